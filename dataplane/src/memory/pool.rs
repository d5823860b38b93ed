//! A region's buffer pool: a shared list of free buffer indices with, in LIFO pools, a
//! LIFO cache per thread in front of it, as DPDK's mempool cache.
//!
//! The shared list hands buffers out in one of two orders ([`PoolOrder`]):
//! - **LIFO** (host memory): both levels hand out the buffer freed last, so the buffers in
//!   circulation stay the same few whatever the region's size: a pipeline that allocates
//!   on one thread and frees on another touches about as many buffers as it has in
//!   flight, not the whole region, and they stay in the CPU's caches.
//! - **FIFO** (memory the GPU or a NIC reads: pinned and device regions): buffers come back
//!   in the order they were freed, with no thread caches. A burst freed whole is handed
//!   out whole, and bursts freed one after another are handed out one after another,
//!   whichever threads allocate and free and however their timing interleaves: buffers
//!   that started out adjacent stay adjacent, which lets the GPU stage move several bursts
//!   in one copy. (A LIFO list reverses or shuffles them as soon as two threads race, and
//!   a cache refilled from the front would hand out the end of its refill first.) Every
//!   request locks the list once: a burst's worth of buffers per lock.
//!
//! In LIFO pools the per-thread cache makes most allocations and frees touch no shared
//! cache line; the shared list is locked once per half cache of buffers moved.
//!
//! A thread's cache returns its buffers to the shared list when the thread exits.
//! [`BufferPool::available`] counts the buffers in every thread's cache as free.

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::plan::budget::{MAX_CACHE, cache_size_for};

/// Which free buffer the shared list hands out first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOrder {
    /// The one freed last (host memory: the buffers in use stay few and cache-warm).
    Lifo,
    /// The one freed first, with no thread caches (DMA memory: adjacent buffers stay
    /// adjacent across threads).
    Fifo,
}

/// What the pool and every thread's cache share.
struct Shared {
    /// Free buffers, freed ones pushed at the back; handed out from the back (LIFO) or
    /// the front (FIFO).
    stack: Mutex<VecDeque<u32>>,
    order: PoolOrder,
    /// Buffers of the region: the stack never holds more.
    capacity: usize,
    /// How many buffers each live thread cache holds (each written by its own thread).
    cache_counts: Mutex<Vec<Arc<CacheCount>>>,
    /// Cleared when the pool is dropped, so threads drop their caches of it.
    alive: AtomicBool,
    /// Region name, for the double-free message.
    name: String,
}

/// One thread cache's buffer count, in a cache line of its own: 128 bytes covers both a
/// pair of 64-byte lines (x86 prefetches the adjacent line; GB10 and Grace have 64-byte
/// lines) and the 128-byte lines some Arm cores have.
#[repr(align(128))]
#[derive(Default)]
struct CacheCount(AtomicUsize);

impl Shared {
    fn stack(&self) -> MutexGuard<'_, VecDeque<u32>> {
        // Every operation leaves the stack consistent before it can panic, so a poisoned
        // lock still guards a valid stack.
        self.stack.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pushes buffers; a stack that would hold more than the region means a double free.
    fn push(&self, indices: &[u32]) {
        let mut stack = self.stack();
        assert!(
            stack.len() + indices.len() <= self.capacity,
            "memory region {}: buffer returned twice",
            self.name
        );
        stack.extend(indices);
    }

    /// The next `n` buffers to hand out (at most what is free), in the order they were
    /// pushed, and then taken off the list.
    fn take(&self, n: usize, into: impl FnOnce(std::collections::vec_deque::Drain<'_, u32>)) {
        let mut stack = self.stack();
        let n = n.min(stack.len());
        let range = match self.order {
            PoolOrder::Lifo => stack.len() - n..stack.len(),
            PoolOrder::Fifo => 0..n,
        };
        into(stack.drain(range));
    }

    /// Moves up to `out.len()` buffers into the front of `out`; returns how many.
    fn pop_to(&self, out: &mut [u32]) -> usize {
        let mut n = 0;
        self.take(out.len(), |taken| {
            for (slot, index) in out.iter_mut().zip(taken) {
                *slot = index;
                n += 1;
            }
        });
        n
    }

    /// Moves up to `want` buffers onto `into`; returns how many.
    fn pop_into(&self, into: &mut Vec<u32>, want: usize) -> usize {
        let before = into.len();
        self.take(want, |taken| into.extend(taken));
        into.len() - before
    }
}

/// A thread's cache of one pool's buffers.
struct ThreadCache {
    shared: Arc<Shared>,
    buffers: Vec<u32>,
    count: Arc<CacheCount>,
}

impl ThreadCache {
    fn publish(&self) {
        self.count.0.store(self.buffers.len(), Ordering::Relaxed);
    }

    /// Hands every cached buffer back to the shared stack.
    fn flush_all(&mut self) {
        // Counted out of the cache before they are on the stack: a concurrent
        // `available` may count too few for a moment, never too many.
        self.count.0.store(0, Ordering::Relaxed);
        self.shared.push(&self.buffers);
        self.buffers.clear();
    }
}

impl Drop for ThreadCache {
    fn drop(&mut self) {
        self.flush_all();
        let mut counts = self
            .shared
            .cache_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        counts.retain(|c| !Arc::ptr_eq(c, &self.count));
    }
}

thread_local! {
    /// This thread's caches, one per pool it used; the latest used first.
    static CACHES: RefCell<Vec<ThreadCache>> = const { RefCell::new(Vec::new()) };
}

/// Hands every buffer this thread's caches hold back to their pools' shared lists, so a
/// thread that stops allocating (an application thread gone quiet, a worker whose queues
/// are idle) strands none of them: other threads, RX workers among them, can have them.
/// Workers call it when their queues stay idle for milliseconds, and the library's waits
/// (`recv`, `send_within`) after about a millisecond of waiting; an application thread
/// that frees bursts and then does other work calls it itself. Cheap when the caches are
/// empty.
pub fn flush_thread_caches() {
    let _ = CACHES.try_with(|caches| {
        if let Ok(mut caches) = caches.try_borrow_mut() {
            for c in caches.iter_mut().filter(|c| !c.buffers.is_empty()) {
                c.flush_all();
            }
        }
    });
}

/// The free buffers of one region.
pub struct BufferPool {
    shared: Arc<Shared>,
    cache_size: usize,
}

impl BufferPool {
    /// A LIFO pool holding buffers `0..num_bufs`, with per-thread caches of
    /// [`cache_size_for`]`(num_bufs)` buffers.
    pub fn full(name: &str, num_bufs: usize) -> Self {
        Self::with_cache(name, num_bufs, cache_size_for(num_bufs))
    }

    /// As [`BufferPool::full`], handing buffers out in `order` (FIFO: without caches).
    pub fn ordered(name: &str, num_bufs: usize, order: PoolOrder) -> Self {
        match order {
            PoolOrder::Lifo => Self::full(name, num_bufs),
            PoolOrder::Fifo => Self::with_order(name, num_bufs, 0, order),
        }
    }

    /// As [`BufferPool::full`] with a given cache size (0: none).
    pub fn with_cache(name: &str, num_bufs: usize, cache_size: usize) -> Self {
        Self::with_order(name, num_bufs, cache_size, PoolOrder::Lifo)
    }

    /// A pool of `num_bufs` buffers in `order` with caches of `cache_size` (0: none). The
    /// first burst handed out is `0, 1, 2, ...` in FIFO order and `..., 2, 1, 0` in LIFO.
    fn with_order(name: &str, num_bufs: usize, cache_size: usize, order: PoolOrder) -> Self {
        let stack: VecDeque<u32> = match order {
            PoolOrder::Lifo => (0..num_bufs as u32).rev().collect(),
            PoolOrder::Fifo => (0..num_bufs as u32).collect(),
        };
        Self {
            shared: Arc::new(Shared {
                stack: Mutex::new(stack),
                order,
                capacity: num_bufs,
                cache_counts: Mutex::new(Vec::new()),
                alive: AtomicBool::new(true),
                name: name.to_owned(),
            }),
            cache_size,
        }
    }

    /// Buffers per thread cache (0: no cache).
    pub fn cache_size(&self) -> usize {
        self.cache_size
    }

    /// Free buffers: on the shared stack and in every thread's cache.
    pub fn available(&self) -> usize {
        let on_stack = self.shared.stack().len();
        let cached: usize = self
            .shared
            .cache_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .sum();
        on_stack + cached
    }

    /// Runs `f` on this thread's cache of this pool, creating it on first use. `None`
    /// when the pool has no cache or the thread is exiting (its caches are gone).
    #[inline]
    fn with_cache_of<R>(&self, f: impl FnOnce(&mut ThreadCache) -> R) -> Option<R> {
        if self.cache_size == 0 {
            return None;
        }
        CACHES
            .try_with(|caches| {
                let mut caches = caches.try_borrow_mut().ok()?;
                let at = match caches
                    .iter()
                    .position(|c| Arc::ptr_eq(&c.shared, &self.shared))
                {
                    Some(at) => at,
                    None => {
                        // Caches of dropped pools go first (their buffers are just numbers).
                        caches.retain(|c| c.shared.alive.load(Ordering::Relaxed));
                        let count = Arc::new(CacheCount::default());
                        self.shared
                            .cache_counts
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(count.clone());
                        caches.push(ThreadCache {
                            shared: self.shared.clone(),
                            buffers: Vec::with_capacity(self.cache_size * 2),
                            count,
                        });
                        caches.len() - 1
                    }
                };
                if at != 0 {
                    caches.swap(0, at);
                }
                Some(f(&mut caches[0]))
            })
            .ok()
            .flatten()
    }

    /// Takes exactly `out.len()` buffers, or none; the ones freed last come first.
    #[inline]
    pub fn alloc_bulk(&self, out: &mut [u32]) -> bool {
        if self.take_cached(out) {
            return true;
        }
        // Larger than a cache, or short: this thread's cache and the shared stack
        // together, all or nothing.
        let got = self.take_from_cache_and_stack(out);
        if got == out.len() {
            return true;
        }
        self.free_bulk(&out[..got]);
        false
    }

    /// Takes up to `out.len()` buffers; returns how many (at the front of `out`).
    #[inline]
    pub fn alloc_up_to(&self, out: &mut [u32]) -> usize {
        if self.take_cached(out) {
            return out.len();
        }
        self.take_from_cache_and_stack(out)
    }

    /// Fills `out` from this thread's cache, refilled from the shared stack when short:
    /// false when `out` is larger than a cache or both together hold too few.
    #[inline]
    fn take_cached(&self, out: &mut [u32]) -> bool {
        let n = out.len();
        if n > self.cache_size {
            return false;
        }
        let cache_size = self.cache_size;
        self.with_cache_of(|cache| {
            if cache.buffers.len() < n {
                // Refill to half a cache beyond this request, so the next requests are
                // served without the lock.
                let want = n + cache_size / 2 - cache.buffers.len();
                cache.shared.pop_into(&mut cache.buffers, want);
                if cache.buffers.len() < n {
                    cache.publish();
                    return false;
                }
            }
            let from = cache.buffers.len() - n;
            out.copy_from_slice(&cache.buffers[from..]);
            cache.buffers.truncate(from);
            cache.publish();
            true
        })
        .unwrap_or(false)
    }

    /// Moves up to `out.len()` buffers from this thread's cache, then the shared stack.
    fn take_from_cache_and_stack(&self, out: &mut [u32]) -> usize {
        let got = self.take_from_cache(out);
        got + self.shared.pop_to(&mut out[got..])
    }

    /// Moves up to `out.len()` buffers from this thread's cache into the front of `out`.
    fn take_from_cache(&self, out: &mut [u32]) -> usize {
        self.with_cache_of(|cache| {
            let k = cache.buffers.len().min(out.len());
            let from = cache.buffers.len() - k;
            out[..k].copy_from_slice(&cache.buffers[from..]);
            cache.buffers.truncate(from);
            cache.publish();
            k
        })
        .unwrap_or(0)
    }

    /// Returns buffers (each taken from this pool and returned once).
    #[inline]
    pub fn free_bulk(&self, indices: &[u32]) {
        let n = indices.len();
        if n <= self.cache_size {
            let cache_size = self.cache_size;
            let cached = self.with_cache_of(|cache| {
                cache.buffers.extend_from_slice(indices);
                if cache.buffers.len() > cache_size + cache_size / 2 {
                    // Keep the hottest half cache; the coldest go to the shared stack.
                    let keep = cache_size / 2;
                    let spill = cache.buffers.len() - keep;
                    cache.count.0.store(keep, Ordering::Relaxed);
                    cache.shared.push(&cache.buffers[..spill]);
                    cache.buffers.drain(..spill);
                }
                cache.publish();
            });
            if cached.is_some() {
                return;
            }
        }
        self.shared.push(indices);
    }

    /// Takes `n` (at least 1) consecutive buffers, `first..first + n`, when the next `n` a
    /// FIFO pool hands out are exactly those (as they are under load: a burst freed whole
    /// comes back whole); `None` leaves the pool as it was (too few free, not consecutive,
    /// or a LIFO pool, whose thread caches shuffle buffers). Checks 4 bytes per buffer and
    /// writes nothing per buffer: a run's burst needs no descriptors.
    pub fn alloc_run(&self, n: usize) -> Option<u32> {
        let n32 = u32::try_from(n).ok()?;
        if self.shared.order != PoolOrder::Fifo || n == 0 {
            return None;
        }
        let mut stack = self.shared.stack();
        let first = *stack.front()?;
        // `first + n` must exist too: the run's end, as its owner computes it.
        let consecutive = stack.len() >= n
            && first.checked_add(n32).is_some()
            && stack
                .range(..n)
                .zip(first..)
                .all(|(&index, want)| index == want);
        if !consecutive {
            return None;
        }
        stack.drain(..n);
        Some(first)
    }

    /// Returns the buffers `first..first + n` (each taken from this pool and returned
    /// once), in that order.
    pub fn free_run(&self, first: u32, n: usize) {
        if self.shared.order == PoolOrder::Fifo {
            let mut stack = self.shared.stack();
            assert!(
                stack.len() + n <= self.shared.capacity,
                "memory region {}: buffer returned twice",
                self.shared.name
            );
            stack.extend(first..first + n as u32);
            return;
        }
        // A LIFO pool never hands out runs; take them back all the same.
        let indices: Vec<u32> = (first..first + n as u32).collect();
        self.free_bulk(&indices);
    }

    /// Takes every buffer, or none: this thread's cache is emptied first; buffers in other
    /// threads' caches count as in use.
    pub fn take_all(&self) -> Option<Vec<u32>> {
        self.with_cache_of(ThreadCache::flush_all);
        let mut all = Vec::with_capacity(self.shared.capacity);
        let mut stack = self.shared.stack();
        if stack.len() < self.shared.capacity {
            return None;
        }
        all.extend(stack.drain(..));
        Some(all)
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        self.shared.alive.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    #[test]
    fn the_buffer_freed_last_is_handed_out_first_at_both_levels() {
        for cache in [0, 64] {
            let pool = BufferPool::with_cache("r", 1024, cache);
            let mut a = [0u32; 8];
            assert!(pool.alloc_bulk(&mut a));
            pool.free_bulk(&a[2..4]);
            let mut b = [0u32; 2];
            assert!(pool.alloc_bulk(&mut b));
            assert_eq!(
                sorted(b.to_vec()),
                sorted(a[2..4].to_vec()),
                "cache {cache}"
            );
        }
    }

    #[test]
    fn a_pipeline_over_a_large_pool_cycles_few_buffers() {
        // One thread allocates, another frees, 256 at a time with 4 bursts in flight: the
        // buffers in use stay about those in flight plus the two caches, not 65,536.
        let pool = Arc::new(BufferPool::full("r", 65_536));
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u32>>(4);
        let freeing = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for burst in rx {
                    pool.free_bulk(&burst);
                }
            })
        };
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let mut burst = vec![0u32; 256];
            while !pool.alloc_bulk(&mut burst) {
                std::thread::yield_now();
            }
            seen.extend(burst.iter().copied());
            tx.send(burst).unwrap();
        }
        drop(tx);
        freeing.join().unwrap();
        assert!(
            seen.len() <= 256 * 6 + 2 * MAX_CACHE + MAX_CACHE / 2,
            "{} distinct buffers used",
            seen.len()
        );
        assert_eq!(pool.available(), 65_536);
    }

    #[test]
    fn available_counts_every_threads_cache_and_exiting_threads_give_theirs_back() {
        let pool = Arc::new(BufferPool::full("r", 4096));
        assert_eq!(pool.cache_size(), 256);
        let mut held = vec![0u32; 100];
        assert!(pool.alloc_bulk(&mut held));
        let other = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                // Frees into this thread's cache; still free for `available`.
                pool.free_bulk(&held);
                assert_eq!(pool.available(), 4096);
            })
        };
        other.join().unwrap();
        assert_eq!(pool.available(), 4096);
        let all = pool.take_all().expect("every buffer is back on the stack");
        assert_eq!(sorted(all), (0..4096).collect::<Vec<_>>());
    }

    #[test]
    fn a_quiet_thread_strands_no_buffers_once_its_caches_are_flushed() {
        let pool = Arc::new(BufferPool::with_cache("r", 1024, 64));
        // This thread frees buffers into its cache, then goes quiet.
        let mut mine = vec![0u32; 32];
        assert!(pool.alloc_bulk(&mut mine));
        pool.free_bulk(&mine);
        let on_shared_stack = |pool: &Arc<BufferPool>| {
            let p = pool.clone();
            std::thread::spawn(move || {
                let mut all = vec![0u32; 1024];
                let got = p.alloc_bulk(&mut all);
                if got {
                    p.free_bulk(&all);
                }
                got
            })
            .join()
            .unwrap()
        };
        assert!(
            !on_shared_stack(&pool),
            "some of them wait in this thread's cache"
        );
        flush_thread_caches();
        assert!(
            on_shared_stack(&pool),
            "every buffer back where others can have it"
        );
    }

    #[test]
    fn alloc_up_to_takes_from_the_cache_and_the_stack_together() {
        let pool = BufferPool::with_cache("r", 1024, 64);
        let mut a = vec![0u32; 1000];
        assert!(pool.alloc_bulk(&mut a));
        pool.free_bulk(&a[..40]); // into this thread's cache
        let mut b = vec![0u32; 100];
        assert!(!pool.alloc_bulk(&mut b), "64 left: all or nothing");
        let n = pool.alloc_up_to(&mut b);
        assert_eq!(n, 64);
        let mut got = sorted(b[..n].to_vec());
        got.dedup();
        assert_eq!(got.len(), 64, "no buffer twice");
        assert_eq!(pool.available(), 0);
    }

    #[test]
    #[should_panic(expected = "buffer returned twice")]
    fn a_stack_overflowing_its_region_is_a_double_free() {
        let pool = BufferPool::with_cache("r", 16, 0);
        pool.free_bulk(&[3]);
    }

    #[test]
    fn caches_of_dropped_pools_are_released() {
        for _ in 0..100 {
            let pool = BufferPool::full("r", 4096);
            let mut a = [0u32; 8];
            assert!(pool.alloc_bulk(&mut a));
            pool.free_bulk(&a);
        }
        let live = CACHES.with(|c| c.borrow().len());
        assert!(live <= 2, "{live} caches kept");
    }

    /// A stage's pattern over FIFO pools: one thread allocates source bursts, the stage
    /// (here) takes them in order, allocates an output burst for each and frees the
    /// source a few bursts later, a third thread frees the outputs. However the threads'
    /// timing interleaves, every burst is a run of adjacent buffers and continues the one
    /// before it in both pools (wrapping at the region's end), so the stage could join
    /// them all into copies.
    #[test]
    fn a_fifo_pool_hands_bursts_back_adjacent_whichever_threads_free_them() {
        const BURST: usize = 256;
        let n = BURST * 40;
        let src = Arc::new(BufferPool::ordered("src", n, PoolOrder::Fifo));
        let dst = Arc::new(BufferPool::ordered("dst", n, PoolOrder::Fifo));
        assert_eq!(src.cache_size(), 0, "no thread caches");
        let (to_stage, from_source) = std::sync::mpsc::sync_channel::<Vec<u32>>(8);
        let (to_app, from_stage) = std::sync::mpsc::sync_channel::<Vec<u32>>(8);
        let bursts = 2000;
        let source = {
            let src = src.clone();
            std::thread::spawn(move || {
                for _ in 0..bursts {
                    let mut b = vec![0u32; BURST];
                    while !src.alloc_bulk(&mut b) {
                        std::thread::yield_now();
                    }
                    to_stage.send(b).unwrap();
                }
            })
        };
        let app = {
            let dst = dst.clone();
            std::thread::spawn(move || {
                for b in from_stage {
                    dst.free_bulk(&b);
                }
            })
        };
        let follows = |prev: &[u32], next: &[u32]| {
            next.windows(2).all(|w| w[1] == w[0] + 1)
                && next[0] as usize == (prev[BURST - 1] as usize + 1) % n
        };
        let mut in_flight = std::collections::VecDeque::new();
        let (mut last_src, mut last_dst): (Option<Vec<u32>>, Option<Vec<u32>>) = (None, None);
        for (k, s) in from_source.iter().enumerate() {
            let mut d = vec![0u32; BURST];
            while !dst.alloc_bulk(&mut d) {
                std::thread::yield_now();
            }
            if let (Some(ps), Some(pd)) = (&last_src, &last_dst) {
                assert!(
                    follows(ps, &s),
                    "source burst {k} does not continue the last"
                );
                assert!(
                    follows(pd, &d),
                    "output burst {k} does not continue the last"
                );
            }
            (last_src, last_dst) = (Some(s.clone()), Some(d.clone()));
            in_flight.push_back((s, d));
            if in_flight.len() > 6 {
                let (s, d) = in_flight.pop_front().unwrap();
                src.free_bulk(&s);
                to_app.send(d).unwrap();
            }
        }
        for (s, d) in in_flight {
            src.free_bulk(&s);
            to_app.send(d).unwrap();
        }
        drop(to_app);
        source.join().unwrap();
        app.join().unwrap();
        assert_eq!((src.available(), dst.available()), (n, n));
    }

    /// A FIFO pool hands out a run while its next buffers are consecutive and nothing
    /// otherwise (taking nothing); runs freed come back in order, a run freed twice is
    /// caught, and LIFO pools give no runs.
    #[test]
    fn runs_come_from_consecutive_fifo_buffers_only() {
        let pool = BufferPool::ordered("r", 10, PoolOrder::Fifo);
        assert_eq!(pool.alloc_run(4), Some(0));
        assert_eq!(pool.alloc_run(4), Some(4));
        assert_eq!(pool.alloc_run(4), None, "two left");
        assert_eq!(pool.alloc_run(0), None);
        assert_eq!(pool.available(), 2);
        // 8, 9, then 0..4 freed: not consecutive across the wrap.
        pool.free_run(0, 4);
        assert_eq!(pool.alloc_run(3), None, "8, 9, 0 is no run");
        assert_eq!(pool.available(), 6, "a refused run takes nothing");
        let mut two = [0u32; 2];
        assert!(pool.alloc_bulk(&mut two));
        assert_eq!(two, [8, 9]);
        assert_eq!(pool.alloc_run(4), Some(0));
        pool.free_run(0, 4);
        pool.free_run(4, 4);
        pool.free_bulk(&two);
        assert_eq!(pool.available(), 10);
        let twice = std::panic::catch_unwind(|| pool.free_run(0, 1));
        assert!(twice.is_err(), "a buffer returned twice is caught");
        let lifo = BufferPool::ordered("l", 10, PoolOrder::Lifo);
        assert_eq!(lifo.alloc_run(2), None);
        lifo.free_run(0, 0);
        assert_eq!(lifo.available(), 10);
    }
}
