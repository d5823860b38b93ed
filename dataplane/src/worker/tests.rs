use super::*;
use crate::memory::RegionId;
use crate::memory::{PortIndex, QueueId};

#[test]
fn the_pacer_spaces_bursts_by_their_bytes_and_lets_a_late_worker_catch_up_only_1_ms() {
    let t0 = Instant::now();
    let at = |ns: u64| t0 + Duration::from_nanos(ns);
    // 1000 Mb/s: 1250 bytes take 10 us.
    let mut p = Pacer::new(1000, t0);
    assert!(p.ready(at(0)));
    p.sent(1250, at(0));
    assert!(!p.ready(at(9_999)));
    assert!(p.ready(at(10_000)));
    // Sent late (at 15 us, within the bucket's depth): the schedule holds, so the next
    // may go at 20 us and the average rate is kept.
    p.sent(1250, at(15_000));
    assert!(!p.ready(at(19_999)) && p.ready(at(20_000)));
    // After a long pause at most the bucket's depth (1 ms = 100 such bursts) goes at
    // once, besides the one due now; then the rate holds again.
    let t = 10_000_000;
    let mut at_once = 0;
    while p.ready(at(t)) {
        p.sent(1250, at(t));
        at_once += 1;
    }
    assert_eq!(at_once, 101);
    assert!(!p.ready(at(t + 9_999)) && p.ready(at(t + 10_000)));
    // Remainders carry: 3 Mb/s, 1 byte = 2666.67 ns; three bytes sent one at a time
    // take exactly 8000 ns.
    let mut p = Pacer::new(3, t0);
    p.sent(1, at(0));
    p.sent(1, at(0));
    p.sent(1, at(0));
    assert!(!p.ready(at(7_999)) && p.ready(at(8_000)));
}
use crate::config::{MemoryKind, MemoryRegionConfig};

/// Stands in for an engine's receive side (this tests the worker's burst assembly,
/// not an engine): it hands out `offer` buffers of a real region, then nothing.
struct Scripted {
    regions: Arc<RegionSet>,
    offer: usize,
}

impl RxPort for Scripted {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        let n = self.offer.min(max);
        self.offer -= n;
        if n == 0 {
            return 0;
        }
        let mut fresh = Burst::test_burst(&self.regions, &[RegionId(0)], n);
        into.take_from(&mut fresh, n)
    }
}

fn task(offer: usize, batch: usize) -> (RxTask, rtrb::Consumer<Burst>) {
    let regions = Arc::new(
        RegionSet::allocate(&[MemoryRegionConfig::new("r", MemoryKind::Host, 64, 64)]).unwrap(),
    );
    let (producer, consumer) = rtrb::RingBuffer::new(8);
    let port = Scripted {
        regions: regions.clone(),
        offer,
    };
    let task = RxTask::new(
        Box::new(port),
        producer,
        regions,
        PortIndex(0),
        QueueId(0),
        batch,
        Some(Duration::from_micros(100)),
        Overflow::Backpressure,
        Arc::new(QueueCounters::default()),
    );
    (task, consumer)
}

#[test]
fn a_partial_burst_waits_for_its_timeout_measured_from_the_first_packet() {
    let (mut rx, mut out) = task(3, 8);
    let t0 = Instant::now();
    let at = |us| PassClock::at(t0 + Duration::from_micros(us));
    assert!(rx.poll(false, &at(0)), "three packets received");
    assert!(out.pop().is_err(), "a partial burst is held");
    rx.poll(false, &at(99));
    assert!(
        out.pop().is_err(),
        "99 us after the first packet: still held"
    );
    rx.poll(false, &at(100));
    assert_eq!(
        out.pop().map(|b| b.len()),
        Ok(3),
        "delivered at the timeout"
    );
}

#[test]
fn a_full_burst_goes_at_once_and_flush_delivers_the_rest() {
    let (mut rx, mut out) = task(11, 8);
    let t0 = PassClock::at(Instant::now());
    rx.poll(false, &t0);
    assert_eq!(out.pop().map(|b| b.len()), Ok(8), "full at batch_size");
    rx.poll(false, &t0);
    assert!(out.pop().is_err(), "three left, before their timeout");
    rx.poll(true, &t0);
    assert_eq!(out.pop().map(|b| b.len()), Ok(3), "flush when idle");
}

/// A stage task fed faster than it drains still ends each pass after its budget, so
/// its worker gets back to its stop flag (an unbounded pass never returned when the
/// RX side refilled the ring as fast as the stage emptied it).
#[test]
fn a_stage_pass_takes_at_most_its_budget_of_bursts() {
    let regions = Arc::new(
        RegionSet::allocate(&[
            MemoryRegionConfig::new("src", MemoryKind::Host, 4096, 256),
            MemoryRegionConfig::new("hdr", MemoryKind::Host, 4096, 64),
            MemoryRegionConfig::new("pay", MemoryKind::Host, 4096, 256),
        ])
        .unwrap(),
    );
    let plan = crate::plan::StagePlan {
        split_header_bytes: Some(64),
        gpu: None,
        mode: crate::stage::StageMode::Copy,
    };
    let stage =
        crate::stage::RxStage::new(&regions, &[RegionId(1), RegionId(2)], 8, &plan).unwrap();
    let queued = STAGE_BURSTS_PER_POLL * 2;
    let (mut to_stage, from_rx) = rtrb::RingBuffer::new(queued);
    let (to_app, mut from_stage) = rtrb::RingBuffer::new(queued);
    for _ in 0..queued {
        let mut b = Burst::test_burst(&regions, &[RegionId(0)], 8);
        for i in 0..8 {
            b.set_len(i, 0, 200);
        }
        assert!(to_stage.push(b).is_ok());
    }
    let counters = Arc::new(QueueCounters::default());
    let mut task = StageTask::new(
        from_rx,
        to_app,
        stage,
        Overflow::Backpressure,
        counters.clone(),
        (PortIndex(0), QueueId(0)),
    );
    assert!(task.poll());
    assert_eq!(to_stage.slots(), STAGE_BURSTS_PER_POLL, "half still queued");
    assert_eq!(from_stage.slots(), STAGE_BURSTS_PER_POLL);
    assert!(task.poll());
    assert_eq!(from_stage.slots(), queued, "the rest in the next pass");
    let b = from_stage.pop().unwrap();
    assert_eq!(
        (b.data(0, 0).unwrap().len(), b.data(0, 1).unwrap().len()),
        (64, 136)
    );
    assert_eq!(counters.snapshot().0, (queued * 8) as u64);
}
