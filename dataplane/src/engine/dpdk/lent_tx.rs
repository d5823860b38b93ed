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
#[derive(Clone, Debug)]
enum MbufIndex {
    /// The mbufs that start in each 4 KiB page are consecutive buffers, `step` bytes apart
    /// (a pool laid out in pieces that break only at page boundaries, as EAL lays pools
    /// out that must not cross pages): per page from `first_page` on, the first such mbuf's
    /// address and buffer. Found without reading the mbuf.
    Paged {
        first_page: u64,
        pages: Vec<(u64, u32)>,
        step: ExactDivisor,
    },
    /// Otherwise from the buffer address the mbuf carries.
    ByBuffer { base: u64, stride: ExactDivisor },
}

/// The granularity of [`MbufIndex::Paged`].
const PAGE_SHIFT: u32 = 12;

impl MbufIndex {
    /// The paged index of `mbufs` (`mbufs[i]` carries buffer `i`), when they are laid out
    /// that way.
    fn paged(mbufs: &[*mut sys::rte_mbuf]) -> Option<Self> {
        let addrs: Vec<u64> = mbufs.iter().map(|&m| m as u64).collect();
        let step = addrs.windows(2).map(|w| w[1].wrapping_sub(w[0])).min()?;
        if step == 0 || step > 1 << PAGE_SHIFT {
            return None;
        }
        let first_page = addrs.iter().min()? >> PAGE_SHIFT;
        let last_page = addrs.iter().max()? >> PAGE_SHIFT;
        let count = usize::try_from(last_page - first_page + 1).ok()?;
        if count > addrs.len() * 2 + 16 {
            return None;
        }
        let mut pages = vec![(u64::MAX, u32::MAX); count];
        for (i, &a) in addrs.iter().enumerate() {
            let page = &mut pages[((a >> PAGE_SHIFT) - first_page) as usize];
            if a < page.0 {
                *page = (a, i as u32);
            }
        }
        let index = MbufIndex::Paged {
            first_page,
            pages,
            step: ExactDivisor::new(step),
        };
        // Every mbuf must map to its own buffer.
        let all = mbufs
            .iter()
            .enumerate()
            .all(|(i, &m)| index.lookup(m) == Some(i as u64));
        all.then_some(index)
    }

    /// The buffer of mbuf `m` (unchecked: the caller compares with its table).
    #[inline(always)]
    fn lookup(&self, m: *mut sys::rte_mbuf) -> Option<u64> {
        match self {
            MbufIndex::Paged {
                first_page,
                pages,
                step,
            } => {
                let a = m as u64;
                let page = usize::try_from((a >> PAGE_SHIFT).wrapping_sub(*first_page)).ok()?;
                let &(first, index) = pages.get(page)?;
                Some(u64::from(index).wrapping_add(step.quotient(a.wrapping_sub(first))))
            }
            MbufIndex::ByBuffer { base, stride } => {
                // SAFETY: an mbuf the caller holds.
                let addr = unsafe { sys::shim_rte_mbuf_buf_addr(m) } as u64;
                Some(stride.quotient(addr.wrapping_sub(*base)))
            }
        }
    }
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
    /// Caches of the pool for threads without an lcore (the application's), each `(cache,
    /// in use by a live thread)`: without one, each of their allocations and frees would
    /// take the pool's shared ring. A thread that ends flushes its cache and frees the
    /// slot for the next; the engine flushes and frees them all when it closes the pool.
    thread_caches: std::sync::Mutex<Vec<(CachePtr, bool)>>,
}

/// A cache a thread without an lcore uses (`rte_mempool_cache_create`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct CachePtr(*mut sys::rte_mempool_cache);
// SAFETY: used by one thread at a time (the slot's owner, or the engine once every thread
// is kept out by the closed guard).
unsafe impl Send for CachePtr {}

/// Objects a thread's cache holds (as the pool's per-lcore caches).
const THREAD_CACHE_SIZE: u32 = 256;

/// This thread's cache of a lent pool; flushed into the pool when the thread ends.
struct ThreadCache {
    lent: Arc<TxLent>,
    slot: usize,
    cache: CachePtr,
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        let lent = &self.lent;
        // A closed pool's caches are the engine's to free.
        if lent.guard.enter() {
            // SAFETY: this thread's cache of a live pool (the guard is held).
            unsafe { sys::shim_mempool_cache_flush(self.cache.0, lent.pool.0) };
            lent.thread_caches.lock().unwrap_or_else(|e| e.into_inner())[self.slot].1 = false;
            lent.guard.leave();
        }
    }
}

thread_local! {
    /// The caches this thread (one without an lcore) uses, one per lent pool.
    static THREAD_CACHES: std::cell::RefCell<Vec<ThreadCache>> =
        const { std::cell::RefCell::new(Vec::new()) };
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
        let i = usize::try_from(self.index.lookup(m)?).ok()?;
        (self.mbufs.get(i) == Some(&m)).then_some(i as u32)
    }

    /// The cache this thread uses: null for a thread with an lcore (the pool's own cache
    /// for it), else the thread's own, made on first use (null if none can be made: the
    /// pool's ring then). Inside the guard.
    fn thread_cache(self: &Arc<Self>) -> CachePtr {
        // SAFETY: reads the calling thread's lcore id.
        if unsafe { sys::shim_rte_lcore_id() } != u32::MAX {
            return CachePtr(std::ptr::null_mut());
        }
        THREAD_CACHES
            .try_with(|caches| {
                let mut caches = caches.borrow_mut();
                if let Some(c) = caches.iter().find(|c| Arc::ptr_eq(&c.lent, self)) {
                    return c.cache;
                }
                let mut slots = self.thread_caches.lock().unwrap_or_else(|e| e.into_inner());
                let slot = match slots.iter().position(|(_, in_use)| !in_use) {
                    Some(free) => free,
                    None => {
                        // SAFETY: a new cache, owned by the slot list.
                        let made = unsafe { sys::shim_mempool_cache_create(THREAD_CACHE_SIZE) };
                        if made.is_null() {
                            return CachePtr(std::ptr::null_mut());
                        }
                        slots.push((CachePtr(made), false));
                        slots.len() - 1
                    }
                };
                slots[slot].1 = true;
                let cache = slots[slot].0;
                caches.push(ThreadCache {
                    lent: self.clone(),
                    slot,
                    cache,
                });
                cache
            })
            .unwrap_or(CachePtr(std::ptr::null_mut()))
    }

    /// Takes `out.len()` (at most [`CHUNK`]) mbufs from the pool as they are, through
    /// `cache`, and writes their buffers; false takes none. Inside the guard.
    fn get(&self, out: &mut [u32], cache: CachePtr) -> bool {
        let mut objs = [std::ptr::null_mut::<c_void>(); CHUNK];
        let n = out.len();
        // SAFETY: a live pool (the guard is held); room for n objects; the cache is this
        // thread's or null.
        if unsafe { sys::shim_mempool_get_bulk(self.pool.0, objs.as_mut_ptr(), n as u32, cache.0) }
            != 0
        {
            return false;
        }
        for (slot, &m) in out.iter_mut().zip(&objs[..n]) {
            *slot = self
                .buffer_of(m.cast())
                .expect("an mbuf of a lent pool carries one of its region's buffers");
        }
        true
    }

    /// Returns the mbufs of `buffers` to the pool as they are, through `cache`. Inside the
    /// guard.
    fn put(&self, buffers: &[u32], cache: CachePtr) {
        let mut objs = [std::ptr::null_mut::<c_void>(); CHUNK];
        for chunk in buffers.chunks(CHUNK) {
            for (o, &b) in objs.iter_mut().zip(chunk) {
                *o = self.mbufs[b as usize].cast();
            }
            // SAFETY: a live pool (the guard is held); each mbuf is out of the pool (its
            // buffer was the caller's) and goes back once, one segment held once, as the
            // pool keeps its free mbufs; the cache is this thread's or null.
            unsafe {
                sys::shim_mempool_put_bulk(self.pool.0, objs.as_ptr(), chunk.len() as u32, cache.0)
            };
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
        lent.put(indices, lent.thread_cache());
        lent.guard.leave();
        true
    }

    fn take(&self, out: &mut [u32], all_or_none: bool) -> Option<usize> {
        let lent = &self.0;
        if !lent.guard.enter() {
            return None;
        }
        let cache = lent.thread_cache();
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(CHUNK);
            if lent.get(&mut out[done..done + want], cache) {
                done += want;
                continue;
            }
            if all_or_none {
                lent.put(&out[..done], cache);
                done = 0;
                break;
            }
            // Fewer left than asked: as many as the pool has (counting is slower than an
            // allocation; this is the pool running dry).
            let left = lent.available().min(want);
            if left > 0 && lent.get(&mut out[done..done + left], cache) {
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
        // workers stopped); the threads' caches are the slot list's, freed once here (the
        // closed guard keeps their threads away from them).
        unsafe {
            sys::shim_mempool_flush_caches(lent.pool.0);
            let slots = lent.thread_caches.lock().unwrap_or_else(|e| e.into_inner());
            for (cache, _) in slots.iter() {
                sys::shim_mempool_cache_free(cache.0, lent.pool.0);
            }
        }
        let region = self.regions.get(lent.region);
        let mut buffers = [0u32; CHUNK];
        let no_cache = CachePtr(std::ptr::null_mut());
        loop {
            let n = lent.available().min(CHUNK);
            if n == 0 || !lent.get(&mut buffers[..n], no_cache) {
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
    let paged = MbufIndex::paged(&mbufs);
    let spaced = paged.is_some();
    let index = paged.unwrap_or(MbufIndex::ByBuffer {
        base,
        stride: ExactDivisor::new(r.stride() as u64),
    });
    let lent = Arc::new(TxLent {
        pool: pool.ptr(),
        region,
        mbufs,
        index,
        guard: PoolGuard::default(),
        thread_caches: Default::default(),
    });
    r.lend_all(Box::new(TxLentBuffers(lent.clone())))?;
    tracing::debug!(
        "memory region {}: lent to mbuf pool {} for sending ({})",
        r.name(),
        pool.name(),
        if spaced {
            "mbufs found by address"
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
        assert_eq!(
            g.0.load(Ordering::Relaxed),
            CLOSED,
            "a refused call leaves no count"
        );
    }
}
