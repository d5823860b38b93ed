//! External memory: a region registered with EAL (and DMA-mapped for a PCI device) so an
//! mbuf pool can carry its buffers. Unregistered when the handle drops.

use super::error::DpdkError;
use super::mempool::{LentBuffers, LentPool, Mempool, PoolError};
use crate::config::MemoryKind;
use crate::hugepages;
use crate::memory::{RegionId, RegionSet};
use crate::ring::Ring;
use dpdk_sys as sys;
use std::sync::Arc;

/// A port's rte_device handle.
#[derive(Clone, Copy)]
pub struct Device(pub *mut sys::rte_device);
// SAFETY: an opaque handle EAL keeps alive until cleanup; only passed back to EAL calls.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

/// Why a region could not be lent to a port.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LendError {
    /// EAL refused the memory, or the device cannot reach it.
    #[error(transparent)]
    Dpdk(#[from] DpdkError),
    /// The pool over the region could not be made.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The region's buffers do not fit an mbuf.
    #[error("a {bytes}-byte {what} does not fit an mbuf")]
    TooLarge {
        /// Buffer or stride.
        what: &'static str,
        /// Its size.
        bytes: usize,
    },
    /// The region's buffers could not be handed to the pool.
    #[error(transparent)]
    Region(#[from] crate::memory::LendAllError),
    /// The pool did not give out the region's buffers one to one.
    #[error("the mbuf pool over the region does not map its buffers one to one ({0})")]
    Mapping(&'static str),
}

/// A registered (and, for a PCI device, DMA-mapped) range; unregistered on drop.
pub struct ExternalMemory {
    base: u64,
    len: usize,
    mapped_for: Vec<Device>,
}

// SAFETY: an address range and an opaque device handle, only passed to EAL calls.
unsafe impl Send for ExternalMemory {}
// SAFETY: as above.
unsafe impl Sync for ExternalMemory {}

impl ExternalMemory {
    /// Registers `[base, base + len)` (whole pages of `page`) and DMA-maps it for `device`.
    fn register(
        base: u64,
        len: usize,
        page: usize,
        device: Option<Device>,
    ) -> Result<Self, DpdkError> {
        // SAFETY: the caller's region mapping covers the range (mappings are whole pages)
        // and outlives this handle; IOVA is the virtual address (no table).
        let rc =
            unsafe { sys::rte_extmem_register(base as *mut _, len, std::ptr::null_mut(), 0, page) };
        if rc != 0 {
            return Err(DpdkError::last("rte_extmem_register"));
        }
        let mut this = Self {
            base,
            len,
            mapped_for: Vec::new(),
        };
        if let Some(d) = device {
            // SAFETY: a registered range and a port's device.
            let rc = unsafe { sys::rte_dev_dma_map(d.0, base as *mut _, base, len) };
            if rc != 0 {
                // `this` unregisters the range (and unmaps it from earlier devices) as it
                // drops.
                return Err(DpdkError::last(
                    "rte_dev_dma_map (the NIC cannot reach this memory)",
                ));
            }
            this.mapped_for.push(d);
        }
        Ok(this)
    }

    /// Registers a whole region (whole pages) and DMA-maps it for each of `devices`.
    pub fn register_region(
        region: &crate::memory::Region,
        devices: &[Device],
    ) -> Result<Self, DpdkError> {
        let (base, len) = region.extent();
        let page = region_page(region);
        let mut this = Self::register(base, len.next_multiple_of(page), page, None)?;
        for &d in devices {
            // SAFETY: a registered range and a port's device.
            let rc = unsafe { sys::rte_dev_dma_map(d.0, base as *mut _, base, this.len) };
            if rc != 0 {
                return Err(DpdkError::last(
                    "rte_dev_dma_map (the NIC cannot reach this memory)",
                ));
            }
            this.mapped_for.push(d);
        }
        Ok(this)
    }
}

/// The page size a region is mapped with.
fn region_page(r: &crate::memory::Region) -> usize {
    if r.kind() == MemoryKind::Huge {
        hugepages::default_page_size() as usize
    } else {
        4096
    }
}

impl Drop for ExternalMemory {
    fn drop(&mut self) {
        // SAFETY: registered (and mapped) by this handle; the pool over it was freed first
        // (its owner drops pools before external memory), so nothing uses it.
        unsafe {
            for d in &self.mapped_for {
                sys::rte_dev_dma_unmap(d.0, self.base as *mut _, self.base, self.len);
            }
            sys::rte_extmem_unregister(self.base as *mut _, self.len);
        }
    }
}

/// What lending a region made: the pool (owned by the port), the queue's view of it, and
/// the registration (dropped after the pool).
pub struct Lent {
    /// The mbuf pool over the region.
    pub pool: Mempool,
    /// The queue's view: mbuf per buffer, returned buffers.
    pub lent: Arc<LentPool>,
    /// The registration.
    pub memory: ExternalMemory,
}

/// Registers `region` as external memory (DMA-mapped for a PCI `device`), creates an mbuf
/// pool whose buffers are the region's, and lends the region's buffers to it. Whatever
/// was made is released again when a later step fails.
pub fn lend_region(
    regions: &RegionSet,
    region: RegionId,
    device: Option<Device>,
    socket: i32,
    name: String,
) -> Result<Lent, LendError> {
    let r = regions.get(region);
    let (base, len) = r.extent();
    let page = region_page(r);
    let memory = ExternalMemory::register(base, len.next_multiple_of(page), page, device)?;
    let (pool, mbufs) = pool_over_region(r, socket, name)?;
    let n = mbufs.len();
    let lent = Arc::new(LentPool {
        pool: pool.ptr(),
        mbufs,
        // Multi-consumer too: the queue reads it through the shared pool.
        returned: Ring::new(n).map_err(|_| LendError::Mapping("too many buffers for a ring"))?,
    });
    r.lend_all(Box::new(LentBuffers(lent.clone())))?;
    Ok(Lent { pool, lent, memory })
}

/// An mbuf pool whose buffers are region `r`'s (registered before), and the mbuf of each
/// buffer: `mbufs[i]` carries buffer `i`.
pub fn pool_over_region(
    r: &crate::memory::Region,
    socket: i32,
    name: String,
) -> Result<(Mempool, Vec<*mut sys::rte_mbuf>), LendError> {
    let (base, _) = r.extent();
    let n = r.num_bufs();
    let elt_size = u16::try_from(r.stride()).map_err(|_| LendError::TooLarge {
        what: "buffer stride",
        bytes: r.stride(),
    })?;
    let room_bytes = r.headroom() + r.buf_size();
    let room = u16::try_from(room_bytes).map_err(|_| LendError::TooLarge {
        what: "buffer",
        bytes: room_bytes,
    })?;
    let ext = sys::rte_pktmbuf_extmem {
        buf_ptr: base as *mut _,
        buf_iova: base,
        buf_len: r.stride() * n,
        elt_size,
    };
    let pool = Mempool::over_external(name, n, room, socket, &ext)?;
    // Learn which mbuf carries which buffer: take them all once.
    let mut all = vec![std::ptr::null_mut(); n];
    // SAFETY: a fresh pool of n mbufs and room for n pointers.
    if unsafe { sys::shim_rte_pktmbuf_alloc_bulk(pool.ptr().0, all.as_mut_ptr(), n as u32) } != 0 {
        return Err(LendError::Mapping("cannot take every mbuf of the new pool"));
    }
    let mut mbufs: Vec<*mut sys::rte_mbuf> = vec![std::ptr::null_mut(); n];
    let mut one_to_one = true;
    for &m in &all {
        // SAFETY: an mbuf of the pool.
        let addr = unsafe { sys::shim_rte_mbuf_buf_addr(m) } as u64;
        match r.index_of(addr) {
            Some(i) if mbufs[i as usize].is_null() => mbufs[i as usize] = m,
            _ => one_to_one = false,
        }
    }
    // SAFETY: every mbuf taken above goes back once.
    unsafe { sys::shim_rte_pktmbuf_free_bulk(all.as_mut_ptr(), n as u32) };
    if !one_to_one {
        return Err(LendError::Mapping(
            "an mbuf buffer is not a buffer of the region",
        ));
    }
    Ok((pool, mbufs))
}
