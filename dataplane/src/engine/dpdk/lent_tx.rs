//! A region sent from, lent to an mbuf pool of its own: its buffers are the pool's mbufs.
//! The region allocates from the pool and frees into it ([`BufferLender`]), a frame goes
//! out in the mbuf that carries its buffer (no attach, no free callback), and the driver
//! frees a sent mbuf straight into the pool's per-lcore cache, where the next allocation
//! on that core finds it. A port that loops back (net_ring) hands the mbufs to the
//! receiver, which takes them over as they are ([`TxLent::buffer_of`]).
//!
//! The pool lives as long as the engine; bursts may outlive it. Every call into the pool
//! from the region's side passes a [`PoolGuard`], which the engine closes before it frees
//! the pool: after that, allocations find nothing and returned buffers stay unused.

use super::extmem::{ExternalMemory, LendError, pool_over_region};
use super::mempool::{Mempool, PoolPtr};
use crate::memory::{BufferLender, RegionId, RegionSet};
use dpdk_sys as sys;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Division by a constant that only ever divides its own multiples (addresses of
/// evenly spaced objects): a shift and a multiply by the odd part's inverse modulo 2^64,
/// instead of a division on the packet path.
#[derive(Clone, Copy, Debug)]
struct ExactDivisor {
    shift: u32,
    inverse: u64,
}

impl ExactDivisor {
    fn new(divisor: u64) -> Self {
        assert!(divisor > 0, "a divisor of 0");
        let shift = divisor.trailing_zeros();
        let odd = divisor >> shift;
        // Newton's iteration doubles the correct low bits each step: 3, 6, ..., 96.
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        Self { shift, inverse }
    }

    /// `n / divisor` when the divisor divides `n`; some other number otherwise.
    #[inline(always)]
    fn quotient(self, n: u64) -> u64 {
        (n >> self.shift).wrapping_mul(self.inverse)
    }
}

/// Which buffer an mbuf of the pool carries, from its address.
#[derive(Clone, Copy, Debug)]
enum MbufIndex {
    /// The mbuf of buffer `i` lies at `first + i * step` (a pool made in one piece):
    /// found without reading the mbuf.
    Spaced { first: u64, step: ExactDivisor },
    /// Otherwise from the buffer address the mbuf carries.
    ByBuffer { base: u64, stride: ExactDivisor },
}

/// Entered for each call into the pool from the region's side; closed by the engine
/// before the pool is freed, after which no call enters.
#[derive(Debug, Default)]
struct PoolGuard(AtomicUsize);

/// The guard's top bit: closed. The rest counts the calls inside.
const CLOSED: usize = 1 << (usize::BITS - 1);

impl PoolGuard {
    /// True when the pool may be used until [`PoolGuard::leave`].
    #[inline(always)]
    fn enter(&self) -> bool {
        if self.0.fetch_add(1, Ordering::Acquire) & CLOSED != 0 {
            self.0.fetch_sub(1, Ordering::Release);
            return false;
        }
        true
    }

    #[inline(always)]
    fn leave(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }

    /// Closes the guard and waits for the calls inside to leave (each is one pool
    /// operation, so the wait is short and bounded).
    fn close(&self) {
        self.0.fetch_or(CLOSED, Ordering::AcqRel);
        while self.0.load(Ordering::Acquire) & !CLOSED != 0 {
            std::hint::spin_loop();
        }
    }
}

/// Pool operations per call, at most (the stack arrays they use).
const CHUNK: usize = 64;

/// The region's view of the pool: the mbuf of each buffer and the way back.
pub struct TxLent {
    pool: PoolPtr,
    /// The region lent.
    pub region: RegionId,
    /// `mbufs[i]` carries buffer `i`.
    pub mbufs: Vec<*mut sys::rte_mbuf>,
    index: MbufIndex,
    guard: PoolGuard,
}

// SAFETY: the mbuf pointers are handed to DPDK only by the thread that owns the buffer
// (the burst holding it, or the pool), and the pool is thread-safe; calls into it pass
// the guard, which the engine closes before freeing it.
unsafe impl Send for TxLent {}
// SAFETY: as above.
unsafe impl Sync for TxLent {}

impl TxLent {
    /// The pool, to tell its mbufs apart from others.
    pub fn pool(&self) -> PoolPtr {
        self.pool
    }

    /// The buffer `m` carries, when `m` is an mbuf of this pool (checked against the
    /// table, so a wrong answer cannot come out).
    #[inline(always)]
    pub fn buffer_of(&self, m: *mut sys::rte_mbuf) -> Option<u32> {
        let i = match self.index {
            MbufIndex::Spaced { first, step } => step.quotient((m as u64).wrapping_sub(first)),
            MbufIndex::ByBuffer { base, stride } => {
                // SAFETY: an mbuf the caller holds.
                let addr = unsafe { sys::shim_rte_mbuf_buf_addr(m) } as u64;
                stride.quotient(addr.wrapping_sub(base))
            }
        };
        let i = usize::try_from(i).ok()?;
        (self.mbufs.get(i) == Some(&m)).then_some(i as u32)
    }

    /// Takes `out.len()` (at most [`CHUNK`]) mbufs from the pool as they are and writes
    /// their buffers; false takes none. Inside the guard.
    fn get(&self, out: &mut [u32]) -> bool {
        let mut objs = [std::ptr::null_mut::<c_void>(); CHUNK];
        let n = out.len();
        // SAFETY: a live pool (the guard is held); room for n objects.
        if unsafe { sys::shim_mempool_get_bulk(self.pool.0, objs.as_mut_ptr(), n as u32) } != 0 {
            return false;
        }
        for (slot, &m) in out.iter_mut().zip(&objs[..n]) {
            *slot = self
                .buffer_of(m.cast())
                .expect("an mbuf of a lent pool carries one of its region's buffers");
        }
        true
    }

    /// Returns the mbufs of `buffers` to the pool as they are. Inside the guard.
    fn put(&self, buffers: &[u32]) {
        let mut objs = [std::ptr::null_mut::<c_void>(); CHUNK];
        for chunk in buffers.chunks(CHUNK) {
            for (o, &b) in objs.iter_mut().zip(chunk) {
                *o = self.mbufs[b as usize].cast();
            }
            // SAFETY: a live pool (the guard is held); each mbuf is out of the pool (its
            // buffer was the caller's) and goes back once, one segment held once, as the
            // pool keeps its free mbufs.
            unsafe { sys::shim_mempool_put_bulk(self.pool.0, objs.as_ptr(), chunk.len() as u32) };
        }
    }
}

/// The region side of a [`TxLent`]. Once the pool is closed it answers "not mine", and
/// the region's own pool serves again.
struct TxLentBuffers(Arc<TxLent>);

impl BufferLender for TxLentBuffers {
    fn give_back(&self, indices: &[u32]) -> bool {
        let lent = &self.0;
        if !lent.guard.enter() {
            return false;
        }
        lent.put(indices);
        lent.guard.leave();
        true
    }

    fn take(&self, out: &mut [u32], all_or_none: bool) -> Option<usize> {
        let lent = &self.0;
        if !lent.guard.enter() {
            return None;
        }
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(CHUNK);
            if lent.get(&mut out[done..done + want]) {
                done += want;
                continue;
            }
            if all_or_none {
                lent.put(&out[..done]);
                done = 0;
                break;
            }
            // Fewer left than asked: as many as the pool has (counting is slower than an
            // allocation; this is the pool running dry).
            let left = lent.available().min(want);
            if left > 0 && lent.get(&mut out[done..done + left]) {
                done += left;
            }
            break;
        }
        lent.guard.leave();
        Some(done)
    }

    fn available(&self) -> Option<usize> {
        let lent = &self.0;
        if !lent.guard.enter() {
            return None;
        }
        let n = lent.available();
        lent.guard.leave();
        Some(n)
    }
}

impl TxLent {
    /// Mbufs in the pool and its caches. Inside the guard.
    fn available(&self) -> usize {
        // SAFETY: a live pool (the guard is held).
        unsafe { sys::rte_mempool_avail_count(self.pool.0) as usize }
    }
}

/// A region lent for sending, as the engine owns it: the region's view, the pool and the
/// registration. Dropping it (after the ports closed and the workers stopped) closes the
/// guard, puts every buffer the pool holds back into the region's own pool (buffers that
/// bursts still hold follow when they are freed), frees the pool and unregisters.
pub struct TxLending {
    /// What TX queues and receivers use.
    pub lent: Arc<TxLent>,
    regions: Arc<RegionSet>,
    _pool: Mempool,
    _memory: ExternalMemory,
}

impl Drop for TxLending {
    fn drop(&mut self) {
        let lent = &self.lent;
        lent.guard.close();
        // SAFETY: a live pool, used by no other thread any more (closed, ports closed,
        // workers stopped).
        unsafe { sys::shim_mempool_flush_caches(lent.pool.0) };
        let region = self.regions.get(lent.region);
        let mut buffers = [0u32; CHUNK];
        loop {
            let n = lent.available().min(CHUNK);
            if n == 0 || !lent.get(&mut buffers[..n]) {
                break;
            }
            region.restock(&buffers[..n]);
        }
    }
}

/// Registers `region` (DMA-mapped for each of `devices`), makes an mbuf pool whose buffers
/// are the region's, and lends the region's buffers to it for sending.
pub fn lend_for_tx(
    regions: &Arc<RegionSet>,
    region: RegionId,
    devices: &[super::extmem::Device],
    socket: i32,
    name: String,
) -> Result<TxLending, LendError> {
    let r = regions.get(region);
    let memory = ExternalMemory::register_region(r, devices)?;
    let (pool, mbufs) = pool_over_region(r, socket, name)?;
    let (base, _) = r.extent();
    let spacing = mbufs
        .get(1)
        .map_or(1, |&m| (m as u64).wrapping_sub(mbufs[0] as u64));
    let spaced = spacing > 0
        && spacing < 1 << 20
        && mbufs
            .iter()
            .enumerate()
            .all(|(i, &m)| m as u64 == mbufs[0] as u64 + i as u64 * spacing);
    let index = if spaced {
        MbufIndex::Spaced {
            first: mbufs[0] as u64,
            step: ExactDivisor::new(spacing),
        }
    } else {
        MbufIndex::ByBuffer {
            base,
            stride: ExactDivisor::new(r.stride() as u64),
        }
    };
    let lent = Arc::new(TxLent {
        pool: pool.ptr(),
        region,
        mbufs,
        index,
        guard: PoolGuard::default(),
    });
    r.lend_all(Box::new(TxLentBuffers(lent.clone())))?;
    tracing::debug!(
        "memory region {}: lent to mbuf pool {} for sending ({})",
        r.name(),
        pool.name(),
        if spaced {
            "mbufs evenly spaced"
        } else {
            "mbufs found by buffer"
        }
    );
    Ok(TxLending {
        lent,
        regions: regions.clone(),
        _pool: pool,
        _memory: memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_division_matches_division_for_multiples() {
        for d in [1u64, 2, 3, 64, 192, 2176, 4352, 65_535, 1 << 20, 3 << 17] {
            let e = ExactDivisor::new(d);
            for q in [0u64, 1, 2, 7, 1000, 65_535, 1 << 30] {
                assert_eq!(e.quotient(q * d), q, "{q} * {d}");
            }
        }
    }

    #[test]
    fn a_closed_guard_waits_for_calls_inside_and_lets_none_in() {
        let g = Arc::new(PoolGuard::default());
        assert!(g.enter());
        let (tx, rx) = std::sync::mpsc::channel();
        let closer = {
            let g = g.clone();
            std::thread::spawn(move || {
                g.close();
                tx.send(()).unwrap();
            })
        };
        // The closer waits while a call is inside.
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(50))
                .is_err()
        );
        g.leave();
        rx.recv().unwrap();
        closer.join().unwrap();
        assert!(!g.enter(), "closed");
        assert_eq!(g.0.load(Ordering::Relaxed), CLOSED, "a refused call leaves no count");
    }
}
