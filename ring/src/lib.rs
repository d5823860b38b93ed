//! A bounded ring of `Copy` items with all-or-nothing bulk operations: the head/tail
//! algorithm of DPDK's rte_ring, written for Rust atomics. Buffer pools are built on it, so
//! that taking or returning a whole burst of buffers costs one atomic exchange, not one per
//! buffer.
//!
//! Two ways in, both sound from safe code:
//!
//! - [`Ring`]: multi-producer, multi-consumer, shared by reference between any threads
//!   (`Sync`).
//! - [`split`]: a [`Producer`] and a [`Consumer`] handle, each `Send` but not `Sync`. A
//!   side created [`Mode::Single`] has exactly one handle, so its compare-and-swap-free
//!   protocol can never run on two threads at once; a [`Mode::Multi`] side hands out more
//!   handles with `try_clone`.
//!
//! Lengths are checked without truncating casts: a bulk longer than the ring's capacity is
//! refused, never copied past the slots.

#![deny(unsafe_op_in_unsafe_fn)]

use std::marker::PhantomData;
use std::mem::MaybeUninit;

#[cfg(loom)]
use loom::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};
#[cfg(not(loom))]
use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

#[cfg(loom)]
type Cell<T> = loom::cell::UnsafeCell<T>;
#[cfg(not(loom))]
type Cell<T> = std::cell::UnsafeCell<T>;

/// Spins of a publisher waiting for an earlier reservation before it yields its core.
#[cfg(not(loom))]
const SPINS_BEFORE_YIELD: u32 = 1 << 10;
/// Most slots a ring may have: indices are 32-bit and wrap, so at most half the range.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Aligns its content to a cache line pair, so producer and consumer counters never share
/// a line (adjacent-line prefetch makes 128 the safe choice on x86).
#[repr(align(128))]
struct Padded<T>(T);

struct HeadTail {
    head: AtomicU32,
    tail: AtomicU32,
}

/// Whether one or several threads may use a side of a [`split`] ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One handle: one thread at a time, no compare-and-swap.
    Single,
    /// Any number of handles (`try_clone`), on any threads.
    Multi,
}

/// A ring could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityError {
    /// The capacity asked for.
    pub requested: usize,
}

impl std::fmt::Display for CapacityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ring capacity {} is above the limit of {MAX_CAPACITY} slots",
            self.requested
        )
    }
}

impl std::error::Error for CapacityError {}

/// The shared state: slots and the two head/tail pairs. Its operations are `unsafe`: a
/// side in single mode must be used by one thread at a time, which the public types
/// guarantee.
struct Core<T: Copy> {
    prod: Padded<HeadTail>,
    cons: Padded<HeadTail>,
    mask: u32,
    capacity: u32,
    multi_producer: bool,
    multi_consumer: bool,
    slots: Box<[Cell<MaybeUninit<T>>]>,
}

// SAFETY: slots are written only between a successful head reservation and the matching
// tail publication, so no two threads touch one slot at a time; T is moved by copy. The
// single-thread sides are enforced by the handle types (see Producer and Consumer).
unsafe impl<T: Copy + Send> Send for Core<T> {}
// SAFETY: as above; all shared state is atomic or guarded by the head/tail protocol.
unsafe impl<T: Copy + Send> Sync for Core<T> {}

/// Copies `n` items: a plain loop for the short copies of small bursts (a `memcpy` call
/// costs more than it saves there), `copy_nonoverlapping` for long ones.
///
/// # Safety
/// `src` and `dst` must be valid for `n` items and must not overlap.
#[cfg(not(loom))]
#[inline(always)]
unsafe fn copy_items<T: Copy>(src: *const T, dst: *mut T, n: usize) {
    if n <= 16 {
        for i in 0..n {
            // SAFETY: i < n, within both ranges by the caller's contract.
            unsafe { dst.add(i).write(src.add(i).read()) };
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

impl<T: Copy> Core<T> {
    fn new(capacity: usize, producers: Mode, consumers: Mode) -> Result<Self, CapacityError> {
        // Checked first: rounding usize::MAX up to a power of two overflows.
        if capacity > MAX_CAPACITY {
            return Err(CapacityError {
                requested: capacity,
            });
        }
        let size = capacity.max(1).next_power_of_two();
        let slots = (0..size)
            .map(|_| Cell::new(MaybeUninit::uninit()))
            .collect();
        let ht = || HeadTail {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
        };
        Ok(Self {
            prod: Padded(ht()),
            cons: Padded(ht()),
            mask: size as u32 - 1,
            capacity: size as u32,
            multi_producer: producers == Mode::Multi,
            multi_consumer: consumers == Mode::Multi,
            slots,
        })
    }

    fn len(&self) -> usize {
        let p = self.prod.0.tail.load(Ordering::Acquire);
        let c = self.cons.0.tail.load(Ordering::Acquire);
        p.wrapping_sub(c).min(self.capacity) as usize
    }

    /// Reserves `n` slots on one side; returns the old head and the count, or None when
    /// there is no room (producer) or not enough items (consumer). With `partial`, takes
    /// what there is. `n` is at most the capacity.
    ///
    /// # Safety
    /// When the side is single-mode, no other thread may use that side concurrently.
    #[inline]
    unsafe fn reserve(&self, producer: bool, n: u32, partial: bool) -> Option<(u32, u32)> {
        let (me, other, multi) = if producer {
            (&self.prod.0, &self.cons.0, self.multi_producer)
        } else {
            (&self.cons.0, &self.prod.0, self.multi_consumer)
        };
        // Acquire on our own head (here and when a compare-and-swap fails): a head moved by
        // another thread of this side was computed from the other side's tail as that
        // thread saw it; acquiring it makes our read of that tail at least as new, so
        // `available` below cannot wrap around to a huge count (loom found both orders).
        let mut head = me.head.load(Ordering::Acquire);
        loop {
            let other_tail = other.tail.load(Ordering::Acquire);
            let available = if producer {
                self.capacity.wrapping_add(other_tail).wrapping_sub(head)
            } else {
                other_tail.wrapping_sub(head)
            };
            let take = if n <= available {
                n
            } else if partial && available > 0 {
                available
            } else {
                return None;
            };
            let next = head.wrapping_add(take);
            if !multi {
                me.head.store(next, Ordering::Relaxed);
                return Some((head, take));
            }
            match me
                .head
                .compare_exchange_weak(head, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some((head, take)),
                Err(current) => head = current,
            }
        }
    }

    /// Publishes a reservation: waits for earlier reservations of the same side to finish,
    /// then moves the tail.
    #[inline]
    fn publish(&self, producer: bool, head: u32, n: u32) {
        let (me, multi) = if producer {
            (&self.prod.0, self.multi_producer)
        } else {
            (&self.cons.0, self.multi_consumer)
        };
        if multi {
            // Acquire, not relaxed: the tail we store below must carry the earlier
            // reservation's slot accesses too, or a thread that acquires our tail could race
            // with them (a plain store does not extend the earlier release sequence; loom
            // found this with two producers and a consumer).
            #[cfg(not(loom))]
            let mut spins = 0u32;
            while me.tail.load(Ordering::Acquire) != head {
                #[cfg(loom)]
                loom::thread::yield_now();
                #[cfg(not(loom))]
                {
                    // The reservation ahead may belong to a thread that was preempted
                    // before publishing: after a while, give it the core rather than spin
                    // through a whole time slice (with more threads than cores, or under
                    // emulation, spinning alone took minutes).
                    spins += 1;
                    if spins < SPINS_BEFORE_YIELD {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
        me.tail.store(head.wrapping_add(n), Ordering::Release);
    }

    /// Writes `items` into the slots from `start` on, wrapping at the end.
    ///
    /// # Safety
    /// The caller holds a reservation of `items.len()` (at most the capacity) slots from
    /// `start`.
    #[inline]
    unsafe fn write_slots(&self, start: usize, items: &[T]) {
        #[cfg(not(loom))]
        {
            let first = items.len().min(self.capacity as usize - start);
            let base = Cell::raw_get(self.slots.as_ptr()).cast::<T>();
            // SAFETY: `UnsafeCell` and `MaybeUninit` are `repr(transparent)`, so the slot
            // array is an array of T; the reservation makes these slots this thread's;
            // `first` stops at the array end and the rest (at most capacity - first) goes
            // from slot 0, so both copies stay inside the array.
            unsafe {
                copy_items(items.as_ptr(), base.add(start), first);
                copy_items(items.as_ptr().add(first), base, items.len() - first);
            }
        }
        #[cfg(loom)]
        for (k, item) in items.iter().enumerate() {
            let slot = &self.slots[(start + k) & self.mask as usize];
            // SAFETY: reserved by this thread (loom checks the claim).
            slot.with_mut(|p| unsafe { (*p).write(*item) });
        }
    }

    /// Reads `out.len()` items from the slots from `start` on, wrapping at the end.
    ///
    /// # Safety
    /// The caller holds a reservation of `out.len()` published slots from `start`.
    #[inline]
    unsafe fn read_slots(&self, start: usize, out: &mut [T]) {
        #[cfg(not(loom))]
        {
            let n = out.len();
            let first = n.min(self.capacity as usize - start);
            let base = Cell::raw_get(self.slots.as_ptr()).cast::<T>();
            // SAFETY: as in write_slots; the producer published these slots (tail acquire
            // in reserve).
            unsafe {
                copy_items(base.add(start), out.as_mut_ptr(), first);
                copy_items(base, out.as_mut_ptr().add(first), n - first);
            }
        }
        #[cfg(loom)]
        for (k, o) in out.iter_mut().enumerate() {
            let slot = &self.slots[(start + k) & self.mask as usize];
            // SAFETY: published by a producer and reserved by this thread.
            *o = slot.with(|p| unsafe { (*p).assume_init() });
        }
    }

    /// # Safety
    /// As [`Core::reserve`] for the producer side.
    #[inline]
    unsafe fn enqueue_bulk(&self, items: &[T]) -> bool {
        if items.is_empty() {
            return true;
        }
        // Longer than the ring: it could never fit (and must not be truncated to u32).
        let Some(n) = u32::try_from(items.len())
            .ok()
            .filter(|&n| n <= self.capacity)
        else {
            return false;
        };
        // SAFETY: the caller's contract.
        let Some((head, taken)) = (unsafe { self.reserve(true, n, false) }) else {
            return false;
        };
        // SAFETY: `taken == n == items.len()` slots from head are reserved.
        unsafe { self.write_slots((head & self.mask) as usize, items) };
        self.publish(true, head, taken);
        true
    }

    /// # Safety
    /// As [`Core::reserve`] for the consumer side.
    #[inline]
    unsafe fn dequeue_into(&self, out: &mut [T], partial: bool) -> usize {
        if out.is_empty() {
            return 0;
        }
        let want = match u32::try_from(out.len()) {
            Ok(n) if n <= self.capacity => n,
            // More than the ring can ever hold: take what there is, or refuse a bulk.
            _ if partial => self.capacity,
            _ => return 0,
        };
        // SAFETY: the caller's contract.
        let Some((head, n)) = (unsafe { self.reserve(false, want, partial) }) else {
            return 0;
        };
        // SAFETY: `n <= want <= out.len()` published slots from head are reserved.
        unsafe { self.read_slots((head & self.mask) as usize, &mut out[..n as usize]) };
        self.publish(false, head, n);
        n as usize
    }
}

impl<T: Copy> Core<T> {
    /// # Safety
    /// As [`Core::reserve`] for the consumer side.
    #[inline]
    unsafe fn dequeue_one(&self) -> Option<T> {
        // SAFETY: the caller's contract.
        let (head, n) = unsafe { self.reserve(false, 1, false) }?;
        let slot = &self.slots[(head & self.mask) as usize];
        // SAFETY: published by a producer and reserved by this thread.
        #[cfg(not(loom))]
        let item = unsafe { (*slot.get()).assume_init() };
        // SAFETY: as above.
        #[cfg(loom)]
        let item = slot.with(|p| unsafe { (*p).assume_init() });
        self.publish(false, head, n);
        Some(item)
    }
}

// The public operations, shared by the types below. Each type guarantees the contract of
// `Core`'s unsafe operations in its own way: `Ring` is multi-thread on both sides; a
// single-mode side of a split ring has exactly one handle, which is not `Sync`.

macro_rules! size_methods {
    () => {
        /// Number of slots.
        pub fn capacity(&self) -> usize {
            self.core.capacity as usize
        }

        /// Items in the ring at this instant (approximate under concurrency).
        pub fn len(&self) -> usize {
            self.core.len()
        }

        /// True when no item is in the ring.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    };
}

macro_rules! producer_methods {
    () => {
        /// Enqueues all of `items`, or nothing when there is not room for all (always
        /// nothing when `items` is longer than the capacity).
        #[inline]
        pub fn enqueue_bulk(&self, items: &[T]) -> bool {
            // SAFETY: see the note above `size_methods`.
            unsafe { self.core.enqueue_bulk(items) }
        }

        /// Enqueues one item.
        #[inline]
        pub fn enqueue(&self, item: T) -> bool {
            self.enqueue_bulk(std::slice::from_ref(&item))
        }
    };
}

macro_rules! consumer_methods {
    () => {
        /// Fills all of `out`, or takes nothing when fewer items are available (always
        /// nothing when `out` is longer than the capacity).
        #[inline]
        pub fn dequeue_bulk(&self, out: &mut [T]) -> bool {
            // SAFETY: see the note above `size_methods`.
            out.is_empty() || unsafe { self.core.dequeue_into(out, false) } == out.len()
        }

        /// Takes up to `out.len()` items; returns how many.
        #[inline]
        pub fn dequeue_burst(&self, out: &mut [T]) -> usize {
            // SAFETY: see the note above `size_methods`.
            unsafe { self.core.dequeue_into(out, true) }
        }

        /// Takes one item.
        #[inline]
        pub fn dequeue(&self) -> Option<T> {
            // SAFETY: see the note above `size_methods`.
            unsafe { self.core.dequeue_one() }
        }
    };
}

/// A bounded multi-producer, multi-consumer FIFO of `T` with bulk operations, usable from
/// any number of threads through a shared reference.
pub struct Ring<T: Copy> {
    core: Core<T>,
}

impl<T: Copy> Ring<T> {
    /// A ring holding up to `capacity` items (rounded up to a power of two); more than
    /// [`MAX_CAPACITY`] is an error.
    pub fn new(capacity: usize) -> Result<Self, CapacityError> {
        Ok(Self {
            core: Core::new(capacity, Mode::Multi, Mode::Multi)?,
        })
    }

    size_methods!();
    producer_methods!();
    consumer_methods!();
}

/// Makes a ring of `capacity` items (rounded up to a power of two) and returns its two
/// ends. A side in [`Mode::Single`] skips the compare-and-swap; its one handle is `Send`
/// but not `Sync` and cannot be cloned, so only one thread at a time can use that side.
pub fn split<T: Copy>(
    capacity: usize,
    producers: Mode,
    consumers: Mode,
) -> Result<(Producer<T>, Consumer<T>), CapacityError> {
    let core = Arc::new(Core::new(capacity, producers, consumers)?);
    Ok((
        Producer {
            core: core.clone(),
            _not_sync: PhantomData,
        },
        Consumer {
            core,
            _not_sync: PhantomData,
        },
    ))
}

/// `PhantomData` of this makes a handle `Send` but not `Sync`.
type NotSync = PhantomData<std::cell::Cell<()>>;

/// The producing end of a [`split`] ring.
pub struct Producer<T: Copy> {
    core: Arc<Core<T>>,
    _not_sync: NotSync,
}

/// The consuming end of a [`split`] ring.
pub struct Consumer<T: Copy> {
    core: Arc<Core<T>>,
    _not_sync: NotSync,
}

impl<T: Copy> Producer<T> {
    /// Another producer handle, when the producer side is [`Mode::Multi`]; `None` for a
    /// single producer.
    pub fn try_clone(&self) -> Option<Self> {
        self.core.multi_producer.then(|| Self {
            core: self.core.clone(),
            _not_sync: PhantomData,
        })
    }

    size_methods!();
    producer_methods!();
}

impl<T: Copy> Consumer<T> {
    /// Another consumer handle, when the consumer side is [`Mode::Multi`]; `None` for a
    /// single consumer.
    pub fn try_clone(&self) -> Option<Self> {
        self.core.multi_consumer.then(|| Self {
            core: self.core.clone(),
            _not_sync: PhantomData,
        })
    }

    size_methods!();
    consumer_methods!();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bulk_is_all_or_nothing() {
        let (p, c) = split::<u32>(8, Mode::Single, Mode::Single).unwrap();
        assert!(p.enqueue_bulk(&[1, 2, 3, 4, 5, 6]));
        assert!(!p.enqueue_bulk(&[7, 8, 9]), "only 2 slots left");
        assert_eq!(c.len(), 6);
        let mut out = [0; 7];
        assert!(!c.dequeue_bulk(&mut out), "only 6 items");
        assert_eq!(c.dequeue_burst(&mut out), 6);
        assert_eq!(&out[..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(c.dequeue(), None);
        // Wrap-around keeps order.
        for round in 0..100u32 {
            assert!(p.enqueue_bulk(&[round, round + 1, round + 2]));
            let mut o = [0; 3];
            assert!(c.dequeue_bulk(&mut o));
            assert_eq!(o, [round, round + 1, round + 2]);
        }
    }

    #[test]
    fn single_sides_have_one_handle_multi_sides_clone() {
        let (p, c) = split::<u8>(4, Mode::Single, Mode::Multi).unwrap();
        assert!(p.try_clone().is_none());
        let c2 = c.try_clone().expect("multi consumer side clones");
        assert!(p.enqueue(9));
        assert_eq!(c2.dequeue(), Some(9));
        assert_eq!(c.dequeue(), None);
    }

    #[test]
    fn oversized_requests_are_refused_not_truncated() {
        assert_eq!(
            Ring::<u8>::new(MAX_CAPACITY + 1).err(),
            Some(CapacityError {
                requested: MAX_CAPACITY + 1
            })
        );
        assert_eq!(
            Ring::<u8>::new(usize::MAX).err(),
            Some(CapacityError {
                requested: usize::MAX
            })
        );
        let r = Ring::<u8>::new(8).unwrap();
        assert!(!r.enqueue_bulk(&[1; 9]), "longer than the ring");
        assert!(r.is_empty(), "nothing copied");
        // A zero-sized item type makes slices of any length cheap: 2^32 + 3 items would
        // become 3 under a truncating cast, and be copied past the slots.
        let z = Ring::<()>::new(8).unwrap();
        let huge = vec![(); (1usize << 32) + 3];
        assert!(!z.enqueue_bulk(&huge));
        assert!(z.is_empty());
        assert!(z.enqueue_bulk(&[(); 8]));
        let mut out = vec![(); (1usize << 32) + 3];
        assert!(!z.dequeue_bulk(&mut out), "a bulk larger than the ring");
        assert_eq!(z.len(), 8);
        assert_eq!(z.dequeue_burst(&mut out), 8, "a burst takes what there is");
        assert!(z.is_empty());
    }

    #[test]
    fn long_bulks_wrap_in_order() {
        // 40-item bulks take the memcpy path and wrap around a 64-slot ring at varying points.
        let r = Ring::<u64>::new(64).unwrap();
        let mut next_in = 0u64;
        let mut next_out = 0u64;
        for round in 0..200 {
            let batch: Vec<u64> = (next_in..next_in + 40).collect();
            assert!(r.enqueue_bulk(&batch), "round {round}");
            next_in += 40;
            let mut out = vec![0u64; 17 + round % 23];
            let got = r.dequeue_burst(&mut out);
            for v in &out[..got] {
                assert_eq!(*v, next_out);
                next_out += 1;
            }
            let mut rest = vec![0u64; (next_in - next_out) as usize];
            assert!(r.dequeue_bulk(&mut rest));
            for v in rest {
                assert_eq!(v, next_out);
                next_out += 1;
            }
        }
        assert!(r.is_empty());
    }

    #[test]
    fn multi_producer_multi_consumer_loses_and_duplicates_nothing() {
        const PER: u32 = 200_000;
        let r = Arc::new(Ring::<u32>::new(1024).unwrap());
        let producers: Vec<_> = (0..3)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut i = 0;
                    while i < PER {
                        let batch: Vec<u32> = (i..(i + 7).min(PER)).map(|x| p * PER + x).collect();
                        if r.enqueue_bulk(&batch) {
                            i += batch.len() as u32;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (r, done) = (r.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut buf = [0u32; 16];
                    loop {
                        // Read the flag before polling: once producers are done and the
                        // ring is empty, nothing more can come.
                        let finished = done.load(std::sync::atomic::Ordering::Acquire);
                        let n = r.dequeue_burst(&mut buf);
                        if n > 0 {
                            got.extend_from_slice(&buf[..n]);
                        } else if finished {
                            break;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let mut all: Vec<u32> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all.len(), 3 * PER as usize);
        assert!(all.iter().enumerate().all(|(i, v)| *v == i as u32));
    }
}
