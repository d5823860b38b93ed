use super::*;
use crate::config::{Access, MemoryKind, MemoryRegionConfig};

fn regions() -> Arc<RegionSet> {
    let mk = |name: &str, n| MemoryRegionConfig {
        name: name.into(),
        kind: MemoryKind::Host,
        affinity: 0,
        gpu_uuid: None,
        num_bufs: n,
        buf_size: 256,
        access: vec![Access::Local],
        zero_copy: None,
        location: Default::default(),
    };
    Arc::new(RegionSet::allocate(&[mk("hdr", 16), mk("data", 8)]).unwrap())
}

/// Two FIFO regions of 256-byte buffers: `a` of 8, `b` of 16.
fn fifo_regions() -> Arc<RegionSet> {
    let mk = |name: &str, n| MemoryRegionConfig::new(name, MemoryKind::Host, n, 256);
    Arc::new(RegionSet::allocate_fifo(&[mk("a", 8), mk("b", 16)]).unwrap())
}

/// A run answers lengths, bytes, addresses and buffers without descriptors, makes the
/// right descriptors when asked, stays a run through a whole-burst move and a length it
/// already has, and frees exactly its buffers.
#[test]
fn a_run_reads_like_the_burst_it_stands_for_and_frees_its_buffers() {
    let r = fifo_regions();
    let mut run =
        Burst::allocate_run(r.clone(), PortIndex(1), QueueId(2), RegionId(1), 5, 100).unwrap();
    assert_eq!(
        (run.len(), run.bytes(), run.port(), run.queue()),
        (5, 500, PortIndex(1), QueueId(2))
    );
    assert_eq!(r.get(RegionId(1)).available(), 11);
    for i in 0..5 {
        assert_eq!(
            run.segment_addr(i, 0),
            r.get(RegionId(1)).buffer_addr(i as u32)
        );
        assert_eq!(run.segment_len(i, 0), 100);
        assert_eq!(run.capacity(i, 0), 256);
        run.buffer_mut(i, 0).unwrap()[..100].fill(i as u8);
        run.set_len(i, 0, 100);
    }
    assert!(run.run().is_some(), "the same length keeps it a run");
    assert_eq!(run.data(3, 0).unwrap(), &[3u8; 100][..]);
    let p = run.packets();
    assert_eq!(p.len(), 5);
    for (i, p) in p.iter().enumerate() {
        assert_eq!(
            p.segments(),
            &[Segment {
                region: RegionId(1),
                index: i as u32,
                len: 100
            }]
        );
        assert_eq!((p.flow_id, p.timestamp_ns), (0, 0));
    }
    let mut into = Burst::empty(r.clone(), PortIndex(1), QueueId(2), 0);
    assert_eq!(into.take_from(&mut run, 5), 5);
    assert!(into.run().is_some() && run.run().is_none() && run.is_empty());
    drop(run);
    drop(into);
    assert_eq!(r.get(RegionId(1)).available(), 16);
}

/// Changing one packet turns a run into descriptors with every other field kept;
/// moving part of a run moves descriptors; no buffer is lost or freed twice.
#[test]
fn a_changed_run_becomes_descriptors_and_keeps_ownership_single() {
    let r = fifo_regions();
    let mut run =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(1), 6, 64).unwrap();
    run.set_len(2, 0, 10);
    assert!(run.run().is_none());
    assert_eq!(run.bytes(), 5 * 64 + 10);
    assert_eq!(run.packets()[2].segments()[0].index, 2);
    let mut other =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(1), 4, 64).unwrap();
    other.set_flow_id(0, 9);
    assert_eq!(other.packets()[0].flow_id, 9);
    let mut part =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(1), 4, 32).unwrap();
    let mut into = Burst::empty(r.clone(), PortIndex(0), QueueId(0), 0);
    assert_eq!(into.take_from(&mut part, 3), 3);
    assert_eq!((into.len(), part.len()), (3, 1));
    assert_eq!(part.packets()[0].segments()[0].index, 13);
    let tail = run.split_off(4);
    assert_eq!(tail.len(), 2);
    assert_eq!(r.get(RegionId(1)).available(), 2);
    drop((run, other, part, into, tail));
    assert_eq!(r.get(RegionId(1)).available(), 16);
    let mut all = [0u32; 16];
    assert!(r.get(RegionId(1)).alloc_bulk(&mut all));
    let mut sorted = all.to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..16).collect::<Vec<u32>>(), "each buffer once");
}

/// No run where the pool cannot give consecutive buffers (too few, out of order, or a
/// LIFO pool); nothing is taken then.
/// One flow id for a whole run (steering that matched one rule for every packet) keeps it
/// a run; descriptors made before show the new id; an ordinary burst gets it on every
/// descriptor.
#[test]
fn one_flow_id_for_a_whole_run_keeps_it_a_run() {
    let r = fifo_regions();
    let mut run =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(1), 4, 64).unwrap();
    assert!(run.packets().iter().all(|p| p.flow_id == 0));
    run.set_flow_ids(7);
    assert_eq!(run.run().map(|r| r.flow_id()), Some(7), "still a run");
    assert!(run.packets().iter().all(|p| p.flow_id == 7));
    let mut plain = Burst::test_burst(&r, &[RegionId(0)], 3);
    plain.set_flow_ids(9);
    assert!(plain.run().is_none());
    assert_eq!(
        plain
            .packets()
            .iter()
            .map(|p| p.flow_id)
            .collect::<Vec<_>>(),
        [9, 9, 9]
    );
}

#[test]
fn no_run_without_consecutive_buffers() {
    let r = fifo_regions();
    assert!(Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(0), 9, 1).is_none());
    let a = Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(0), 4, 1).unwrap();
    let b = Burst::test_burst(&r, &[RegionId(0)], 4);
    drop(b);
    drop(a);
    // Free order now 4..8, 0..4: a run of 5 would cross from 7 to 0.
    assert!(Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(0), 5, 1).is_none());
    assert_eq!(r.get(RegionId(0)).available(), 8);
    assert!(
        Burst::allocate_run(regions(), PortIndex(0), QueueId(0), RegionId(0), 2, 1).is_none(),
        "LIFO"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn a_burst_allocated_like_another_carries_its_descriptors_into_new_buffers() {
    let mk = |name: &str, n, buf_size| MemoryRegionConfig::new(name, MemoryKind::Host, n, buf_size);
    let r = Arc::new(RegionSet::allocate(&[mk("src", 16, 512), mk("dst", 8, 256)]).unwrap());
    let mut src = Burst::allocate(r.clone(), PortIndex(3), QueueId(7), &[RegionId(0)], 4).unwrap();
    for i in 0..4 {
        src.set_len(i, 0, 10 * i + 1);
        src.set_flow_id(i, 100 + i as u32);
        src.set_timestamp(i, 1000 + i as u64);
    }
    let out = Burst::allocate_like(&src, RegionId(1)).unwrap();
    assert_eq!(
        (out.port(), out.queue(), out.len()),
        (PortIndex(3), QueueId(7), 4)
    );
    assert_eq!(r.get(RegionId(1)).available(), 4, "one buffer per packet");
    let mut seen = std::collections::BTreeSet::new();
    for (i, p) in out.packets().iter().enumerate() {
        let [s] = p.segments() else {
            panic!("one segment")
        };
        assert_eq!((s.region, s.len), (RegionId(1), 10 * i as u32 + 1));
        assert_eq!(
            (p.flow_id, p.timestamp_ns),
            (100 + i as u32, 1000 + i as u64)
        );
        assert!(seen.insert(s.index), "each buffer once");
    }
    drop(out);
    assert_eq!(r.get(RegionId(1)).available(), 8, "every buffer back");

    // Too few buffers: nothing taken.
    let many = Burst::test_burst(&r, &[RegionId(0)], 9);
    assert_eq!(
        Burst::allocate_like(&many, RegionId(1)).err(),
        Some(AllocateLike::NoBuffers)
    );
    // A packet longer than the buffers, or with two segments: refused, nothing taken.
    src.set_len(2, 0, 257);
    assert_eq!(
        Burst::allocate_like(&src, RegionId(1)).err(),
        Some(AllocateLike::Shape)
    );
    let two = Burst::test_burst(&r, &[RegionId(0), RegionId(0)], 1);
    assert_eq!(
        Burst::allocate_like(&two, RegionId(1)).err(),
        Some(AllocateLike::Shape)
    );
    assert_eq!(r.get(RegionId(1)).available(), 8);

    // A run comes out as a run, with the flow id steering gave the whole run (the GPU
    // reorder takes only packets of its flows: a lost id sent whole bursts past it).
    let r = fifo_regions();
    let mut run = Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(0), 4, 64)
        .expect("consecutive buffers");
    run.set_flow_ids(5);
    let out = Burst::allocate_like(&run, RegionId(1)).unwrap();
    assert_eq!(
        out.run().map(|x| (x.region(), x.flow_id())),
        Some((RegionId(1), 5))
    );
    assert!(out.packets().iter().all(|p| p.flow_id == 5));
}

#[test]
fn dropping_a_burst_returns_every_segment_buffer() {
    let r = regions();
    let mut b = Burst::test_burst(&r, &[RegionId(0), RegionId(1)], 5);
    assert_eq!(
        (
            r.get(RegionId(0)).available(),
            r.get(RegionId(1)).available()
        ),
        (11, 3)
    );
    b.buffer_mut(2, 1).unwrap()[..3].copy_from_slice(b"abc");
    b.set_len(2, 1, 3);
    assert_eq!(b.data(2, 1).unwrap(), b"abc");
    assert_eq!(b.bytes(), 3);
    drop(b);
    assert_eq!(
        (
            r.get(RegionId(0)).available(),
            r.get(RegionId(1)).available()
        ),
        (16, 8)
    );
}

#[test]
fn dropped_bursts_hand_their_descriptor_vectors_to_the_next_burst() {
    let r = regions();
    let b = Burst::test_burst(&r, &[RegionId(0)], 5);
    let first = b.packets().as_ptr();
    drop(b);
    let again = Burst::test_burst(&r, &[RegionId(0)], 3);
    assert_eq!(again.packets().as_ptr(), first, "the vector was reused");
    assert_eq!(again.len(), 3, "and holds only the new packets");
    assert!(again.packets().iter().all(|p| p.segments().len() == 1));
}

#[test]
fn failed_allocation_takes_nothing() {
    let r = regions();
    // 9 packets need 9 "data" buffers; only 8 exist. The 9 "hdr" buffers go back.
    assert!(
        Burst::allocate(
            r.clone(),
            PortIndex(0),
            QueueId(0),
            &[RegionId(0), RegionId(1)],
            9
        )
        .is_none()
    );
    assert_eq!(
        (
            r.get(RegionId(0)).available(),
            r.get(RegionId(1)).available()
        ),
        (16, 8)
    );
}

#[test]
fn moving_packets_between_bursts_keeps_ownership_single() {
    let r = regions();
    let mut tx = Burst::test_burst(&r, &[RegionId(0)], 10);
    let mut rx = Burst::empty(r.clone(), PortIndex(0), QueueId(1), 4);
    assert_eq!(rx.take_from(&mut tx, 4), 4);
    assert_eq!((tx.len(), rx.len()), (6, 4));
    drop(tx);
    assert_eq!(
        r.get(RegionId(0)).available(),
        12,
        "the 6 packets left in tx went back"
    );
    drop(rx);
    assert_eq!(r.get(RegionId(0)).available(), 16);
}

/// Packets handed over to a device leave the burst without their buffers going back to
/// the pool; the rest stay, and a run stays a run of what is left.
#[test]
fn forgotten_packets_keep_their_buffers_out_of_the_pool() {
    let r = fifo_regions();
    let mut run =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(1), 6, 64).unwrap();
    run.forget_front(2);
    let left = run.run().expect("still a run");
    assert_eq!((left.first, left.count(), run.len()), (2, 4, 4));
    assert_eq!(run.packets()[0].segments()[0].index, 2);
    drop(run);
    assert_eq!(
        r.get(RegionId(1)).available(),
        14,
        "buffers 0 and 1 stay handed over"
    );
    let mut whole =
        Burst::allocate_run(r.clone(), PortIndex(0), QueueId(0), RegionId(0), 3, 64).unwrap();
    whole.forget_front(3);
    assert!(whole.is_empty() && whole.run().is_none());
    drop(whole);
    assert_eq!(r.get(RegionId(0)).available(), 5);

    // Buffers an engine took from the pool and hands over as a burst.
    let r = regions();
    let mut taken = Burst::allocate(r.clone(), PortIndex(0), QueueId(0), &[RegionId(0)], 3)
        .expect("free buffers");
    let indices: Vec<u32> = taken
        .packets()
        .iter()
        .map(|p| p.segments()[0].index)
        .collect();
    taken.forget_front(3);
    let mut owned = Burst::of_owned_buffers(
        r.clone(),
        PortIndex(0),
        QueueId(0),
        RegionId(0),
        &indices,
        &[10, 20, 30],
    );
    assert_eq!(
        owned.packets().iter().map(|p| p.len()).collect::<Vec<_>>(),
        [10, 20, 30]
    );
    owned.forget_front(1);
    assert_eq!(owned.packets()[0].segments()[0].index, indices[1]);
    drop(owned);
    assert_eq!(
        r.get(RegionId(0)).available(),
        15,
        "the forgotten one stays out"
    );
}
