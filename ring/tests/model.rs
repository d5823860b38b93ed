//! The ring against a `VecDeque` model: any sequence of bulk and burst operations on one
//! thread gives the same results and the same contents.
#![cfg(not(loom))]

use dataplane_ring::{Mode, split};
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    EnqueueBulk(Vec<u16>),
    Enqueue(u16),
    DequeueBulk(usize),
    DequeueBurst(usize),
    Dequeue,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        prop::collection::vec(any::<u16>(), 0..40).prop_map(Op::EnqueueBulk),
        any::<u16>().prop_map(Op::Enqueue),
        (0usize..40).prop_map(Op::DequeueBulk),
        (0usize..40).prop_map(Op::DequeueBurst),
        Just(Op::Dequeue),
    ]
}

proptest! {
    #[test]
    fn behaves_like_a_bounded_vecdeque(
        capacity in 1usize..40,
        multi in any::<bool>(),
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let mode = if multi { Mode::Multi } else { Mode::Single };
        let (p, c) = split::<u16>(capacity, mode, mode).unwrap();
        let slots = p.capacity();
        prop_assert_eq!(slots, capacity.next_power_of_two());
        let mut model: VecDeque<u16> = VecDeque::new();
        for op in ops {
            match op {
                Op::EnqueueBulk(items) => {
                    let fits = model.len() + items.len() <= slots;
                    prop_assert_eq!(p.enqueue_bulk(&items), fits);
                    if fits {
                        model.extend(items);
                    }
                }
                Op::Enqueue(v) => {
                    let fits = model.len() < slots;
                    prop_assert_eq!(p.enqueue(v), fits);
                    if fits {
                        model.push_back(v);
                    }
                }
                Op::DequeueBulk(n) => {
                    let mut out = vec![0u16; n];
                    let ok = n <= model.len();
                    prop_assert_eq!(c.dequeue_bulk(&mut out), ok);
                    if ok {
                        let want: Vec<u16> = model.drain(..n).collect();
                        prop_assert_eq!(out, want);
                    }
                }
                Op::DequeueBurst(n) => {
                    let mut out = vec![0u16; n];
                    let got = c.dequeue_burst(&mut out);
                    let want: Vec<u16> = model.drain(..n.min(model.len())).collect();
                    prop_assert_eq!(&out[..got], &want[..]);
                }
                Op::Dequeue => prop_assert_eq!(c.dequeue(), model.pop_front()),
            }
            prop_assert_eq!(c.len(), model.len());
        }
    }
}
