//! Model checks of the head/tail protocol with loom: every interleaving of the threads (up
//! to loom's preemption bound) hands each enqueued item out exactly once, keeps each bulk
//! together and in order, and loom's cells see no unsynchronised slot access.
//!
//! Threads make single attempts instead of retrying in loops, so the models stay small
//! enough to explore; afterwards the ring is drained and every item accounted for.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p dataplane-ring --test loom --release`
//! (`scripts/loom.sh`).
#![cfg(loom)]

use dataplane_ring::{Mode, Ring, split};
use loom::sync::Arc;
use loom::thread;

/// Runs `f` under loom, exploring every interleaving.
fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model(f);
}

/// Drains what is left in `ring`.
fn drain(ring: &Ring<u32>) -> Vec<u32> {
    let mut rest = Vec::new();
    while let Some(v) = ring.dequeue() {
        rest.push(v);
    }
    rest
}

#[test]
fn spsc_items_arrive_once_and_in_order() {
    model(|| {
        let (p, c) = split::<u32>(2, Mode::Single, Mode::Single).unwrap();
        let producer = thread::spawn(move || {
            let first = p.enqueue_bulk(&[1, 2]);
            let second = p.enqueue(3);
            (p, first, second)
        });
        let mut got = Vec::new();
        let mut out = [0u32; 2];
        let n = c.dequeue_burst(&mut out);
        got.extend_from_slice(&out[..n]);
        let (p, first, second) = producer.join().unwrap();
        assert!(first, "an empty ring takes a bulk of its capacity");
        let n = c.dequeue_burst(&mut out);
        got.extend_from_slice(&out[..n]);
        if !second {
            assert!(p.enqueue(3));
        }
        while let Some(v) = c.dequeue() {
            got.push(v);
        }
        assert_eq!(got, [1, 2, 3]);
    });
}

#[test]
fn one_producer_two_consumers_hand_out_each_item_once() {
    // The consumers race on the consumer head; one of them may see a head moved by the
    // other before it sees the producer's newest tail (the case that needs an acquiring
    // head load, or it takes a slot that was never written).
    model(|| {
        let ring = Arc::new(Ring::<u32>::new(2).unwrap());
        let r = ring.clone();
        let producer = thread::spawn(move || {
            assert!(r.enqueue(7));
            assert!(r.enqueue(8));
        });
        let r = ring.clone();
        // Two attempts each: the second may see the other consumer's head move.
        let consumer = thread::spawn(move || r.dequeue().or_else(|| r.dequeue()));
        let mine = ring.dequeue().or_else(|| ring.dequeue());
        producer.join().unwrap();
        let theirs = consumer.join().unwrap();
        let mut all: Vec<u32> = mine.into_iter().chain(theirs).collect();
        all.extend(drain(&ring));
        all.sort_unstable();
        assert_eq!(all, [7, 8]);
    });
}

#[test]
fn two_producers_one_consumer_lose_and_duplicate_nothing() {
    model(|| {
        let ring = Arc::new(Ring::<u32>::new(2).unwrap());
        let producers: Vec<_> = [10u32, 20]
            .into_iter()
            .map(|v| {
                let r = ring.clone();
                thread::spawn(move || assert!(r.enqueue(v), "two slots for two items"))
            })
            .collect();
        let mut all: Vec<u32> = ring.dequeue().into_iter().collect();
        for p in producers {
            p.join().unwrap();
        }
        all.extend(drain(&ring));
        all.sort_unstable();
        assert_eq!(all, [10, 20]);
    });
}

#[test]
fn multi_producer_bulks_stay_together() {
    model(|| {
        let (p, c) = split::<u32>(4, Mode::Multi, Mode::Single).unwrap();
        let p2 = p.try_clone().unwrap();
        let t = thread::spawn(move || assert!(p2.enqueue_bulk(&[20, 21])));
        assert!(p.enqueue_bulk(&[10, 11]));
        let mut out = [0u32; 4];
        let early = c.dequeue_burst(&mut out);
        t.join().unwrap();
        let late = c.dequeue_burst(&mut out[early..]);
        assert_eq!(early + late, 4);
        // Each bulk is contiguous; the two bulks come in either order.
        assert!(
            out == [10, 11, 20, 21] || out == [20, 21, 10, 11],
            "{out:?}"
        );
    });
}
