//! Zero-copy TX: a region's buffers go to the device attached to mbufs as external buffers.
//! Each buffer has its shared-info entry in a table; when the driver frees the last mbuf
//! carrying a buffer, DPDK calls [`give_back`], which returns the buffer to its region's
//! pool. The region is registered with EAL (and DMA-mapped for PCI devices) so drivers
//! can translate its addresses.

use super::error::DpdkError;
use super::extmem::{Device, ExternalMemory};
use super::queue::MAX_BURST;
use crate::memory::{RegionId, RegionSet};
use dpdk_sys as sys;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

/// What the free callback needs: the buffer's region; and the table, whose entry a
/// received mbuf points at gives its buffer index without a division.
struct ReturnTo {
    regions: Arc<RegionSet>,
    region: RegionId,
    /// Address of the shared-info table (set once it exists).
    table: std::sync::atomic::AtomicUsize,
    num_bufs: usize,
}

/// Runs inside DPDK when the last mbuf carrying an attached buffer is freed (on whatever
/// thread frees it: the TX worker after transmission, or a receiver that got the mbuf).
extern "C" fn give_back(addr: *mut c_void, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `ReturnTo` of the table this buffer was attached from; the
    // table and its `ReturnTo` outlive every mbuf carrying its buffers (the engine drops
    // them after its ports, whose close frees every mbuf the devices held).
    let to = unsafe { &*(opaque as *const ReturnTo) };
    let region = to.regions.get(to.region);
    match region.index_of(addr as u64) {
        Some(index) => region.free_bulk(&[index]),
        // Cannot happen: only this region's buffers are attached with this table.
        None => std::process::abort(),
    }
}

/// A region whose buffers can be attached to mbufs for transmission.
pub struct AttachableRegion {
    /// Bytes per buffer, as the mbuf's buffer length.
    buf_len: u16,
    table: NonNull<sys::rte_mbuf_ext_shared_info>,
    /// Boxed: its address is the callback's opaque pointer.
    _return_to: Box<ReturnTo>,
    /// Dropped last: unregistered after the table is gone.
    _memory: ExternalMemory,
}

// SAFETY: the table is written by DPDK only for buffers an mbuf carries, each owned by one
// mbuf at a time (a burst hands a buffer over once); the rest is immutable.
unsafe impl Send for AttachableRegion {}
// SAFETY: as above.
unsafe impl Sync for AttachableRegion {}

impl AttachableRegion {
    /// Registers `region` (DMA-mapped for each of `devices`) and builds its table.
    pub fn new(
        regions: &Arc<RegionSet>,
        region: RegionId,
        devices: &[Device],
    ) -> Result<Self, DpdkError> {
        let r = regions.get(region);
        let memory = ExternalMemory::register_region(r, devices)?;
        let buf_len = u16::try_from(r.buf_size()).unwrap_or(u16::MAX);
        let return_to = Box::new(ReturnTo {
            regions: regions.clone(),
            region,
            table: std::sync::atomic::AtomicUsize::new(0),
            num_bufs: r.num_bufs(),
        });
        let opaque = &*return_to as *const ReturnTo as *mut c_void;
        // SAFETY: a table of num_bufs entries whose callback and opaque pointer stay valid
        // for the table's life (both owned here).
        let table =
            unsafe { sys::shim_shinfo_table_new(r.num_bufs() as u32, Some(give_back), opaque) };
        return_to
            .table
            .store(table as usize, std::sync::atomic::Ordering::Relaxed);
        let table = NonNull::new(table).ok_or_else(|| {
            DpdkError::from_code(
                "shared-info table for zero-copy TX",
                rustix::io::Errno::NOMEM.raw_os_error(),
            )
        })?;
        Ok(Self {
            buf_len,
            table,
            _return_to: return_to,
            _memory: memory,
        })
    }
}

impl AttachableRegion {
    /// Attaches buffer `indices[i]` (at `addrs[i]`, `lens[i]` bytes) to `mbufs[i]`, in one
    /// call into the shim.
    ///
    /// # Safety
    /// Each mbuf is fresh and direct; each buffer is one of this region's, lies at its
    /// address and is handed over: from now on only the mbuf's release gives it back.
    #[inline]
    pub unsafe fn attach_bulk(
        &self,
        mbufs: &[*mut sys::rte_mbuf],
        addrs: &[*mut c_void],
        lens: &[u16],
        indices: &[u32],
    ) {
        let n = mbufs.len();
        assert!(addrs.len() == n && lens.len() == n && indices.len() == n);
        // SAFETY: as the caller promises; n entries in each array; every length at most
        // the buffer's (the burst's segment lengths are bounded by buf_size).
        unsafe {
            sys::shim_tx_attach_bulk(
                mbufs.as_ptr(),
                addrs.as_ptr(),
                lens.as_ptr(),
                indices.as_ptr(),
                n as u32,
                self.buf_len,
                self.table.as_ptr(),
            )
        };
    }
}

/// Fresh mbufs of one burst waiting for their buffers, handed to the shim in one call
/// per run of packets of one region ([`AttachBatch::flush`]) instead of one per packet.
pub struct AttachBatch<'r> {
    region: Option<&'r AttachableRegion>,
    mbufs: [*mut sys::rte_mbuf; MAX_BURST],
    addrs: [*mut c_void; MAX_BURST],
    lens: [u16; MAX_BURST],
    indices: [u32; MAX_BURST],
    len: usize,
}

impl<'r> AttachBatch<'r> {
    /// An empty batch.
    pub fn new() -> Self {
        Self {
            region: None,
            mbufs: [std::ptr::null_mut(); MAX_BURST],
            addrs: [std::ptr::null_mut(); MAX_BURST],
            lens: [0; MAX_BURST],
            indices: [0; MAX_BURST],
            len: 0,
        }
    }

    /// Queues buffer `index` of `region` (at `addr`, `len` bytes) for attaching to `m`;
    /// a change of region attaches what was queued first.
    ///
    /// # Safety
    /// `m` is a fresh direct mbuf; buffer `index` of `region` lies at `addr` and is handed
    /// over: from now on only the mbuf's release gives it back. `m` is not used before
    /// the batch is flushed.
    #[inline]
    pub unsafe fn push(
        &mut self,
        region: &'r AttachableRegion,
        m: *mut sys::rte_mbuf,
        addr: u64,
        index: u32,
        len: u16,
    ) {
        if self.len == MAX_BURST || self.region.is_some_and(|r| !std::ptr::eq(r, region)) {
            // SAFETY: passed on from the caller of each queued push.
            unsafe { self.flush() };
        }
        debug_assert!(len <= region.buf_len);
        self.region = Some(region);
        let k = self.len;
        self.mbufs[k] = m;
        self.addrs[k] = addr as *mut c_void;
        self.lens[k] = len;
        self.indices[k] = index;
        self.len += 1;
    }

    /// Attaches every queued buffer to its mbuf, in one call into the shim.
    ///
    /// # Safety
    /// As for each [`AttachBatch::push`].
    pub unsafe fn flush(&mut self) {
        let Some(region) = self.region else { return };
        if self.len > 0 {
            // SAFETY: `len` queued entries, each a fresh direct mbuf and a buffer of
            // `region` handed over by the caller; indices below num_bufs (the region
            // handed them out).
            unsafe {
                sys::shim_tx_attach_bulk(
                    self.mbufs.as_ptr(),
                    self.addrs.as_ptr(),
                    self.lens.as_ptr(),
                    self.indices.as_ptr(),
                    self.len as u32,
                    region.buf_len,
                    region.table.as_ptr(),
                )
            };
        }
        self.len = 0;
    }
}

impl Default for AttachBatch<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Buffers of ours that come back from the device still attached (a port that loops back,
/// such as net_ring, hands the sent mbufs to the receiver): for each of `mbufs`, the
/// region and buffer index it carries, or `None`. Fills `out`; true when every mbuf
/// carries one.
///
/// # Safety
/// `mbufs` are valid received mbufs.
pub unsafe fn attached_buffers(
    mbufs: &[*mut sys::rte_mbuf],
    out: &mut [Option<(RegionId, u32)>],
) -> bool {
    let mut opaques = [std::ptr::null_mut(); super::queue::MAX_BURST];
    let mut shinfos = [std::ptr::null_mut(); super::queue::MAX_BURST];
    let n = mbufs.len().min(opaques.len());
    // SAFETY: valid mbufs, room for n results each.
    unsafe {
        sys::shim_attached_opaques(
            mbufs.as_ptr(),
            opaques.as_mut_ptr(),
            shinfos.as_mut_ptr(),
            n as u32,
            Some(give_back),
        )
    };
    let entry = std::mem::size_of::<sys::rte_mbuf_ext_shared_info>();
    let mut all = true;
    for i in 0..n {
        out[i] = if opaques[i].is_null() {
            None
        } else {
            // SAFETY: the opaque pointer of our own tables: a live `ReturnTo` (see
            // `give_back`).
            let to = unsafe { &*(opaques[i] as *const ReturnTo) };
            // The entry's place in its table is the buffer index (a constant divisor).
            let table = to.table.load(std::sync::atomic::Ordering::Relaxed);
            let index = (shinfos[i] as usize).wrapping_sub(table) / entry;
            (index < to.num_bufs).then_some((to.region, index as u32))
        };
        all &= out[i].is_some();
    }
    all
}

/// As [`attached_buffers`] for the common case, in one pass: when every one of `mbufs`
/// carries a buffer of the same region of ours, that region, with each buffer's index in
/// `indices` and the frame's length in `lens`; else `None` ([`attached_buffers`] sorts
/// out mixed bursts).
///
/// # Safety
/// `mbufs` are valid received mbufs.
pub unsafe fn attached_run(
    mbufs: &[*mut sys::rte_mbuf],
    indices: &mut [u32],
    lens: &mut [u16],
) -> Option<RegionId> {
    let n = mbufs.len();
    let mut shinfos = [std::ptr::null_mut(); MAX_BURST];
    if n == 0 || n > MAX_BURST || indices.len() < n || lens.len() < n {
        return None;
    }
    // SAFETY: valid mbufs; room for n results in each array.
    let opaque = unsafe {
        sys::shim_attached_run(
            mbufs.as_ptr(),
            n as u32,
            Some(give_back),
            shinfos.as_mut_ptr(),
            lens.as_mut_ptr(),
        )
    };
    if opaque.is_null() {
        return None;
    }
    // SAFETY: the opaque pointer of our own tables: a live `ReturnTo` (see `give_back`).
    let to = unsafe { &*(opaque as *const ReturnTo) };
    let table = to.table.load(std::sync::atomic::Ordering::Relaxed);
    let entry = std::mem::size_of::<sys::rte_mbuf_ext_shared_info>();
    let mut valid = true;
    for (index, &shinfo) in indices[..n].iter_mut().zip(&shinfos[..n]) {
        // The entry's place in its table is the buffer index (a constant divisor).
        let i = (shinfo as usize).wrapping_sub(table) / entry;
        valid &= i < to.num_bufs;
        *index = i as u32;
    }
    valid.then_some(to.region)
}

/// Releases received mbufs whose attached buffers the caller took over: the mbufs go back
/// to their pool, the buffers stay with the caller.
///
/// # Safety
/// Each mbuf is a received mbuf carrying an attached buffer of ours, released once.
pub unsafe fn release_keeping_buffers(mbufs: &mut [*mut sys::rte_mbuf]) {
    // SAFETY: as the caller promises.
    unsafe { sys::shim_tx_free_untaken(mbufs.as_mut_ptr(), mbufs.len() as u32) };
}

impl Drop for AttachableRegion {
    fn drop(&mut self) {
        // SAFETY: allocated by shim_shinfo_table_new; no mbuf carries a buffer of this
        // region any more (see `give_back`).
        unsafe { sys::shim_shinfo_table_free(self.table.as_ptr()) };
    }
}
