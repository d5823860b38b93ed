//! Regions added, resized and removed under traffic, in host, page-locked and GPU memory.

use super::*;

/// Loopback interface `loop0`: t0 and q0 (flow f0, port 5000) in region `bufs`, with
/// `more_regions` and `more_tx` (TX queues) added.
fn region_config(more_regions: &str, more_tx: &str) -> Config {
    load_loop(&LoopParts {
        regions_after: more_regions,
        tx: more_tx,
        ..LoopParts::default()
    })
}

/// Frames from `queue` to port 5000, `source` as their source port, sequences from `first`.
fn send_from(queue: &mut dataplane::TxQueue, source: u16, first: u64, count: u64) {
    let frames: Vec<Vec<u8>> = (first..first + count)
        .map(|k| frame(source, 5000, k))
        .collect();
    common::send_frames(queue, &frames);
}

#[test]
fn regions_are_added_resized_and_removed_under_traffic() {
    let side = |bufs: u32| {
        format!("- {{name: side, kind: host, affinity: 0, num_bufs: {bufs}, buf_size: 256}}\n")
    };
    let tx = |name: &str, id: u16, region: &str| {
        format!(
            "    - {{name: {name}, id: {id}, cpu_core: 0, batch_size: 32, memory_regions: [{region}]}}\n"
        )
    };
    let extra = "- {name: extra, kind: host, affinity: 0, num_bufs: 128, buf_size: 256}\n";
    let mut plane =
        DataPlane::start(&region_config(&side(64), &tx("t1", 1, "side"))).expect("starts");
    let (traffic, q0, done) = flowing(&mut plane, "loop0", &[5000], 20_000);

    // Resizing `side` while t1 keeps it is refused: a running queue keeps its region.
    let t1_kept = region_config(&side(512), &tx("t1", 1, "side"));
    match plane.change(&t1_kept) {
        Err(ChangeError::NotLive(why)) => assert!(
            why.iter().any(|n| n.key == "interfaces `loop0` tx queue 1"
                && n.reason.starts_with("changed (memory_regions)")),
            "{why:?}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // In one change: t1 removed, `side` grown from 64 to 512 buffers, `extra` added, and
    // t2 on the new `side`, t3 on `extra`.
    let grown = region_config(
        &format!("{}{extra}", side(512)),
        &format!("{}{}", tx("t2", 2, "side"), tx("t3", 3, "extra")),
    );
    let report = plane.change(&grown).expect("a live change");
    eprintln!("report: {report:?}\n{}", report.change.human());
    let fates: Vec<(String, dataplane::plan::change::QueueFate)> = report
        .change
        .regions
        .iter()
        .map(|r| (r.name.clone(), r.fate.clone()))
        .collect();
    use dataplane::plan::change::QueueFate;
    assert_eq!(
        fates,
        [
            (
                "side".to_owned(),
                QueueFate::Changed(vec!["num_bufs".into()])
            ),
            ("extra".to_owned(), QueueFate::Added),
        ]
    );
    assert_eq!(
        (report.added.queues, report.removed.len()),
        (2, 1),
        "{report:?}"
    );
    // Region ids never move: the old `side` stays at 1, retired; the new ones follow.
    let names: Vec<(&str, usize, bool)> = plane
        .plan()
        .regions
        .iter()
        .map(|r| (r.name.as_str(), r.num_bufs, r.retired))
        .collect();
    assert_eq!(
        names,
        [
            ("bufs", 8192, false),
            ("side", 64, true),
            ("side", 512, false),
            ("extra", 128, false)
        ]
    );
    assert_eq!(plane.regions().len(), 4);
    let mut t2 = plane.take_tx_queue("loop0", 2).expect("t2");
    let mut t3 = plane.take_tx_queue("loop0", 3).expect("t3");
    // t2's buffers come from the grown region: 300 at once, more than the old 64.
    let held = t2.alloc(300).expect("300 buffers of the new `side`");
    match t2.alloc(513) {
        Err(dataplane::TxFailure::TooLarge { most, .. }) => assert_eq!(most, 512),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    drop(held);
    send_from(&mut t2, 7002, 2_000_000, 1000);
    send_from(&mut t3, 7003, 3_000_000, 1000);
    traffic.wait_for(traffic.sent() + 20_000);

    // The next change removes t3 and `extra`: the region is retired, its memory kept.
    let shrunk = region_config(&side(512), &tx("t2", 2, "side"));
    let report = plane.change(&shrunk).expect("removes t3 and `extra`");
    assert_eq!(
        report.change.regions,
        [dataplane::plan::change::RegionChange {
            name: "extra".into(),
            fate: QueueFate::Removed
        }]
    );
    assert!(plane.plan().regions[3].retired && !plane.plan().regions[2].retired);
    send_from(&mut t2, 7002, 2_001_000, 1000);
    traffic.wait_for(traffic.sent() + 20_000);
    let (next, counters) = traffic.finish_on(&plane, &done);
    let on_q0 = q0.join().unwrap();
    drop((t2, t3));
    plane.shutdown().unwrap();

    // q0 kept running through three changes: t0's flow whole and in order; t2's and
    // t3's frames, from the new regions, all there.
    let mut by_source: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for &s in &on_q0[&5000] {
        by_source.entry(s / 1_000_000).or_default().push(s);
    }
    assert_eq!(
        by_source[&0],
        (0..next[0]).collect::<Vec<_>>(),
        "t0 through q0"
    );
    assert_eq!(
        by_source[&2],
        (2_000_000..2_002_000).collect::<Vec<_>>(),
        "t2"
    );
    assert_eq!(
        by_source[&3],
        (3_000_000..3_001_000).collect::<Vec<_>>(),
        "t3"
    );
    let drops: u64 = counters.queues.iter().map(|q| q.drops.total()).sum();
    assert_eq!(drops, 0, "{counters:?}");
}

/// Regions in page-locked and GPU memory added to a running loopback: a TX queue in the
/// new `host_pinned` region and an RX queue in the new `device` region (with the rule
/// that feeds it) carry frames, read back from GPU memory byte for byte, while q0 keeps
/// its flow whole. Needs a CUDA driver (SKIP without one).
#[cfg(feature = "cuda")]
#[test]
fn gpu_and_pinned_regions_added_live_carry_traffic() {
    if !gpudirect::driver_present() {
        eprintln!("SKIP: no CUDA driver found (regions in GPU and page-locked memory added live)");
        return;
    }
    let mut plane = DataPlane::start(&load_loop(&LoopParts::default())).expect("starts");
    let (traffic, q0, done) = flowing(&mut plane, "loop0", &[5000], 20_000);
    let grown = load_loop(&LoopParts {
        regions_after: "- {name: pinned, kind: host_pinned, affinity: 0, num_bufs: 256, buf_size: 256}\n\
                        - {name: gpu, kind: device, affinity: 0, num_bufs: 1024, buf_size: 256}\n",
        tx: "    - {name: t1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [pinned]}\n",
        rx: "    - {name: q1, id: 1, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [gpu]}\n",
        flows: "    - {name: f1, id: 2, action: {type: queue, id: 1}, match: {udp_dst: 5001}}\n",
        ..LoopParts::default()
    });
    let report = plane.change(&grown).expect("a live change");
    use dataplane::plan::change::QueueFate;
    let fates: Vec<(String, QueueFate)> = report
        .change
        .regions
        .iter()
        .map(|r| (r.name.clone(), r.fate.clone()))
        .collect();
    assert_eq!(
        fates,
        [
            ("pinned".to_owned(), QueueFate::Added),
            ("gpu".to_owned(), QueueFate::Added)
        ]
    );
    let mut t1 = plane.take_tx_queue("loop0", 1).expect("t1");
    let mut q1 = plane.take_rx_queue("loop0", 1).expect("q1");
    const FRAMES: u64 = 3000;
    let frames: Vec<Vec<u8>> = (0..FRAMES).map(|k| frame(7001, 5001, k)).collect();
    let sender = std::thread::spawn(move || {
        common::send_frames(&mut t1, &frames);
        t1
    });
    let mut got = 0u64;
    let mut bytes = vec![0u8; 256];
    while got < FRAMES {
        let Some(b) = q1.recv(Duration::from_secs(10)).expect("q1 runs") else {
            panic!("q1 received {got} of {FRAMES} frames, then nothing for 10 s");
        };
        for i in 0..b.len() {
            assert!(b.data(i, 0).is_none(), "q1's packets are in GPU memory");
            let want = frame(7001, 5001, got);
            assert_eq!(b.segment_len(i, 0), want.len());
            let out = &mut bytes[..want.len()];
            // SAFETY: the segment is `want.len()` bytes of GPU 0 memory that `b` holds
            // until the end of this iteration.
            unsafe { gpudirect::read_device(0, b.segment_addr(i, 0), out) }.unwrap();
            assert_eq!(out, &want[..], "frame {got} from GPU memory, byte for byte");
            got += 1;
        }
    }
    let _t1 = sender.join().unwrap();
    let (next, counters) = traffic.finish_on(&plane, &done);
    let on_q0 = q0.join().unwrap();
    drop(q1);
    plane.shutdown().unwrap();
    assert_eq!(
        on_q0[&5000],
        (0..next[0]).collect::<Vec<_>>(),
        "t0 through q0"
    );
    assert_eq!(counters.drops().total(), 0, "{counters:?}");
}

/// Regions listed in another order keep their ids on the loopback (the new plan is
/// renumbered into the running one's), so nothing changes; on DPDK, whose mbuf pools took
/// the regions at start, a resized region needs a restart.
#[test]
fn reordered_regions_keep_their_ids_and_dpdk_refuses_region_changes() {
    let plan = |c: &Config| dataplane::plan::Plan::from_config(c).unwrap();
    let load = |text: &str| {
        config::load_with(text, "regions.yaml", &|c| c < 4)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config
    };
    let side = "- {name: side, kind: host, affinity: 0, num_bufs: 64, buf_size: 256}\n";
    let running = region_config(side, "");
    let reordered = load_loop(&LoopParts {
        regions_before: side,
        ..LoopParts::default()
    });
    let (old, new) = (plan(&running), plan(&reordered));
    assert_eq!(new.regions[0].name, "side", "planned in the file's order");
    let change = dataplane::plan::change::PlanChange::between((&running, &old), (&reordered, &new));
    assert!(change.is_empty(), "{}", change.human());
    let slotted = new.in_slots_of(&old);
    assert_eq!(slotted.queues, old.queues, "the same region ids as running");

    let dpdk = load(&std::fs::read_to_string(common::config_path("dpdk_ring.yaml")).unwrap());
    let swapped_text = std::fs::read_to_string(common::config_path("dpdk_ring.yaml"))
        .unwrap()
        .replace(
            "num_bufs: 16384\n      buf_size: 2048",
            "num_bufs: 8192\n      buf_size: 2048",
        );
    let resized = load(&swapped_text);
    let change = dataplane::plan::change::PlanChange::between(
        (&dpdk, &plan(&dpdk)),
        (&resized, &plan(&resized)),
    );
    let why: Vec<String> = change.not_live.iter().map(|n| n.to_string()).collect();
    assert!(
        why.iter().any(|w| w.starts_with(
            "memory_regions `rx_buffers`: changed: num_bufs: the engine's device took the regions"
        )),
        "{why:?}"
    );
}
