//! A bounded ring of `Copy` items with all-or-nothing bulk operations, in single- or
//! multi-producer and single- or multi-consumer modes: the head/tail algorithm of DPDK's
//! rte_ring, written for Rust atomics. Buffer pools are built on it, so that taking or
//! returning a whole burst of buffers costs one atomic exchange, not one per buffer.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, Ordering};

/// Aligns its content to a cache line pair, so producer and consumer counters never share
/// a line (adjacent-line prefetch makes 128 the safe choice on x86).
#[repr(align(128))]
struct Padded<T>(T);

struct HeadTail {
    head: AtomicU32,
    tail: AtomicU32,
}

/// Whether one or several threads may use a side of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Exactly one thread at a time (no compare-and-swap).
    Single,
    /// Any number of threads.
    Multi,
}

/// A bounded FIFO of `T` with bulk operations.
pub struct Ring<T: Copy> {
    prod: Padded<HeadTail>,
    cons: Padded<HeadTail>,
    mask: u32,
    capacity: u32,
    multi_producer: bool,
    multi_consumer: bool,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: slots are written only between a successful head reservation and the matching
// tail publication, so no two threads touch one slot at a time; T is moved by copy.
unsafe impl<T: Copy + Send> Send for Ring<T> {}
// SAFETY: as above; all shared state is atomic or guarded by the head/tail protocol.
unsafe impl<T: Copy + Send> std::marker::Sync for Ring<T> {}

/// Copies `n` items: a plain loop for the short copies of small bursts (a `memcpy` call
/// costs more than it saves there), `copy_nonoverlapping` for long ones.
///
/// # Safety
/// `src` and `dst` must be valid for `n` items and must not overlap.
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

impl<T: Copy> Ring<T> {
    /// A ring holding up to `capacity` items (rounded up to a power of two, at most 2^30).
    pub fn new(capacity: usize, producers: Sync, consumers: Sync) -> Self {
        let size = capacity.max(1).next_power_of_two();
        assert!(size <= 1 << 30, "ring capacity {capacity} too large");
        let slots = (0..size)
            .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
            .collect();
        let ht = || HeadTail {
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
        };
        Self {
            prod: Padded(ht()),
            cons: Padded(ht()),
            mask: size as u32 - 1,
            capacity: size as u32,
            multi_producer: producers == Sync::Multi,
            multi_consumer: consumers == Sync::Multi,
            slots,
        }
    }

    /// The slot array as plain `T`s; `UnsafeCell` and `MaybeUninit` are both
    /// `repr(transparent)`, so the layouts match.
    #[inline]
    fn slot_ptr(&self) -> *mut T {
        UnsafeCell::raw_get(self.slots.as_ptr()).cast::<T>()
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Items in the ring at this instant (approximate under concurrency).
    pub fn len(&self) -> usize {
        let p = self.prod.0.tail.load(Ordering::Acquire);
        let c = self.cons.0.tail.load(Ordering::Acquire);
        p.wrapping_sub(c).min(self.capacity) as usize
    }

    /// True when no item is in the ring.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reserves `n` slots on one side; returns the old head, or None when there is no room
    /// (producer) or not enough items (consumer). With `partial`, takes what there is.
    #[inline]
    fn reserve(&self, producer: bool, n: u32, partial: bool) -> Option<(u32, u32)> {
        let (me, other, multi) = if producer {
            (&self.prod.0, &self.cons.0, self.multi_producer)
        } else {
            (&self.cons.0, &self.prod.0, self.multi_consumer)
        };
        let mut head = me.head.load(Ordering::Relaxed);
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
                .compare_exchange_weak(head, next, Ordering::AcqRel, Ordering::Relaxed)
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
            while me.tail.load(Ordering::Relaxed) != head {
                std::hint::spin_loop();
            }
        }
        me.tail.store(head.wrapping_add(n), Ordering::Release);
    }

    /// Enqueues all of `items`, or nothing when there is not room for all.
    #[inline]
    pub fn enqueue_bulk(&self, items: &[T]) -> bool {
        if items.is_empty() {
            return true;
        }
        let Some((head, n)) = self.reserve(true, items.len() as u32, false) else {
            return false;
        };
        let start = (head & self.mask) as usize;
        let first = items.len().min(self.capacity as usize - start);
        let base = self.slot_ptr();
        // SAFETY: the reservation gives this thread exclusive use of the `n` slots from
        // `start` (wrapping) until the tail is published; `first` stops at the array end and
        // the rest continues at slot 0, so both copies stay inside the slot array.
        unsafe {
            copy_items(items.as_ptr(), base.add(start), first);
            copy_items(items.as_ptr().add(first), base, items.len() - first);
        }
        self.publish(true, head, n);
        true
    }

    /// Enqueues one item.
    #[inline]
    pub fn enqueue(&self, item: T) -> bool {
        let Some((head, n)) = self.reserve(true, 1, false) else {
            return false;
        };
        // SAFETY: the reservation gives this thread exclusive use of this slot until the
        // tail is published; the mask keeps the index inside the array.
        unsafe { self.slot_ptr().add((head & self.mask) as usize).write(item) };
        self.publish(true, head, n);
        true
    }

    fn dequeue_into(&self, out: &mut [T], partial: bool) -> usize {
        if out.is_empty() {
            return 0;
        }
        let Some((head, n)) = self.reserve(false, out.len() as u32, partial) else {
            return 0;
        };
        let n_items = n as usize;
        let start = (head & self.mask) as usize;
        let first = n_items.min(self.capacity as usize - start);
        let base = self.slot_ptr();
        // SAFETY: the producer published these slots (tail acquire in reserve) and the
        // reservation gives this thread exclusive use until the tail moves; `n <= out.len()`
        // and both copies stay inside the slot array as in enqueue_bulk.
        unsafe {
            copy_items(base.add(start), out.as_mut_ptr(), first);
            copy_items(base, out.as_mut_ptr().add(first), n_items - first);
        }
        self.publish(false, head, n);
        n as usize
    }

    /// Fills all of `out`, or takes nothing when fewer items are available.
    #[inline]
    pub fn dequeue_bulk(&self, out: &mut [T]) -> bool {
        out.is_empty() || self.dequeue_into(out, false) == out.len()
    }

    /// Takes up to `out.len()` items; returns how many.
    #[inline]
    pub fn dequeue_burst(&self, out: &mut [T]) -> usize {
        self.dequeue_into(out, true)
    }

    /// Takes one item.
    #[inline]
    pub fn dequeue(&self) -> Option<T> {
        let (head, n) = self.reserve(false, 1, false)?;
        let slot = &self.slots[(head & self.mask) as usize];
        // SAFETY: as in dequeue_into: published by a producer, reserved by this thread.
        let item = unsafe { (*slot.get()).assume_init() };
        self.publish(false, head, n);
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bulk_is_all_or_nothing() {
        let r = Ring::<u32>::new(8, Sync::Single, Sync::Single);
        assert!(r.enqueue_bulk(&[1, 2, 3, 4, 5, 6]));
        assert!(!r.enqueue_bulk(&[7, 8, 9]), "only 2 slots left");
        assert_eq!(r.len(), 6);
        let mut out = [0; 7];
        assert!(!r.dequeue_bulk(&mut out), "only 6 items");
        assert_eq!(r.dequeue_burst(&mut out), 6);
        assert_eq!(&out[..6], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(r.dequeue(), None);
        // Wrap-around keeps order.
        for round in 0..100u32 {
            assert!(r.enqueue_bulk(&[round, round + 1, round + 2]));
            let mut o = [0; 3];
            assert!(r.dequeue_bulk(&mut o));
            assert_eq!(o, [round, round + 1, round + 2]);
        }
    }

    #[test]
    fn long_bulks_wrap_in_order() {
        // 40-item bulks take the memcpy path and wrap around a 64-slot ring at varying points.
        let r = Ring::<u64>::new(64, Sync::Single, Sync::Single);
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
        let r = Arc::new(Ring::<u32>::new(1024, Sync::Multi, Sync::Multi));
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
