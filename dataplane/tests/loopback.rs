//! The software loopback end to end through the public API: bursts keep their bytes,
//! buffers return to their pools, failed sends hand the burst back, shutdown is clean.

mod common;

use dataplane::config;
use dataplane::{DataPlane, TxFailure};
use std::time::{Duration, Instant};

static CFG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    common::loopback_config(
        r#"
memory_regions:
- {name: txb, kind: host, affinity: 0, num_bufs: 512, buf_size: 256}
- {name: rxb, kind: host, affinity: 0, num_bufs: 64, buf_size: 256}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues:
    - {name: tq0, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [txb]}
    - {name: tq1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [txb]}
  rx:
    queues:
    - {name: rq, id: 0, cpu_core: 1, batch_size: 48, timeout_us: 200, memory_regions: [rxb]}
"#,
    )
});

#[test]
fn loopback_moves_bytes_without_loss_and_returns_buffers() {
    let cfg = config::load_str(&CFG, "test").expect("config").config;
    let mut dp = DataPlane::start(&cfg).expect("start");
    let mut tx0 = dp.take_tx_queue("loop0", 0).unwrap();
    let mut tx1 = dp.take_tx_queue("loop0", 1).unwrap();
    let mut rx = dp.take_rx_queue("loop0", 0).unwrap();
    assert!(
        dp.take_rx_queue("loop0", 0).is_none(),
        "a queue is taken once"
    );

    // A burst for queue 0 sent on queue 1 comes back untouched.
    let wrong = tx0.alloc(2).unwrap();
    let err = tx1.send(wrong).unwrap_err();
    assert_eq!(err.reason, TxFailure::WrongQueue);
    assert_eq!(err.burst.len(), 2);
    drop(err);

    let mut got = Vec::new();
    let collect = |rx: &mut dataplane::RxQueue, got: &mut Vec<(u32, usize)>| {
        if let Some(b) = rx.poll().expect("worker alive") {
            assert!(b.len() <= 48, "RX bursts close at batch_size");
            for i in 0..b.len() {
                let d = b.data(i, 0).unwrap();
                got.push((u32::from_be_bytes(d[..4].try_into().unwrap()), d.len()));
            }
        }
    };
    let mut sent = 0u32;
    for round in 0..40u32 {
        let q = if round % 2 == 0 { &mut tx0 } else { &mut tx1 };
        // 40 x 30 packets through a 512-buffer pool: buffers must come back to be reused.
        let mut b = loop {
            match q.alloc(30) {
                Ok(b) => break b,
                Err(e) => {
                    assert_eq!(e, TxFailure::PoolEmpty);
                    collect(&mut rx, &mut got);
                }
            }
        };
        for i in 0..b.len() {
            let v = (round * 100 + i as u32).to_be_bytes();
            b.buffer_mut(i, 0).unwrap()[..4].copy_from_slice(&v);
            b.set_len(i, 0, 4 + i);
        }
        let mut b = Some(b);
        while let Some(burst) = b.take() {
            if let Err(e) = q.send(burst) {
                assert_eq!(e.reason, TxFailure::RingFull);
                b = Some(e.burst);
            }
        }
        sent += 30;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < sent as usize && Instant::now() < deadline {
        collect(&mut rx, &mut got);
    }
    assert_eq!(
        got.len(),
        sent as usize,
        "every packet arrives (timeout_us flushes the last partial burst)"
    );
    let mut values: Vec<u32> = got.iter().map(|g| g.0).collect();
    values.sort_unstable();
    values.dedup();
    assert_eq!(values.len(), sent as usize, "no duplicates");
    assert!(
        got.iter().all(|(v, len)| *len == 4 + (*v % 100) as usize),
        "lengths travel with the packets"
    );

    let snap = dp.snapshot();
    assert_eq!(snap.total(config::Direction::Rx).0, u64::from(sent));
    assert_eq!(snap.total(config::Direction::Tx).0, u64::from(sent));
    assert_eq!(snap.drops().total(), 0);

    let started = Instant::now();
    dp.shutdown().expect("no worker failed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown is bounded"
    );
    // All 512 TX buffers are back: one burst of all of them can be allocated.
    let all = tx0.alloc(512).expect("every buffer returned to its pool");
    assert_eq!(all.len(), 512);
}

#[test]
fn start_fails_cleanly_for_missing_cores_and_missing_cuda() {
    let cfg = config::load_with(&CFG.replace("cpu_core: 1", "cpu_core: 4000"), "t", &|_| {
        true
    })
    .unwrap()
    .config;
    let err = DataPlane::start(&cfg)
        .err()
        .expect("core 4000 does not exist");
    assert!(
        err.to_string().contains("cpu_core 4000 is not available"),
        "{err}"
    );

    let cfg = config::load_str(
        &CFG.replace(
            "kind: host, affinity: 0, num_bufs: 64",
            "kind: device, affinity: 0, num_bufs: 64",
        ),
        "t",
    )
    .unwrap()
    .config;
    match DataPlane::start(&cfg) {
        Err(e) => assert!(
            e.to_string()
                .contains("memory region rxb: kind device needs a CUDA driver"),
            "{e}"
        ),
        Ok(_) => eprintln!("SKIP: a CUDA driver is present, device memory was allocated"),
    }
}

/// Header-data split in software: the RX queue has two regions, so the RX worker puts the
/// first 64 bytes of each packet in the first and the rest in the second, and the TX
/// buffers go back to their pool.
#[test]
fn a_two_region_rx_queue_gets_headers_and_payloads_split() {
    let text: &str = &HDS_CFG;
    let cfg = config::load_with(text, "hds.yaml", &|c| c < 2)
        .unwrap()
        .config;
    sends_and_checks_a_split(cfg);
}

/// A loopback whose RX queue splits headers (64 bytes) from payloads, in 256-buffer
/// regions, all on core 1.
static HDS_CFG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    common::loopback_config(
        r#"
memory_regions:
- {name: txb, kind: host, affinity: 0, num_bufs: 256, buf_size: 1024}
- {name: hdr, kind: host, affinity: 0, num_bufs: 256, buf_size: 64}
- {name: pay, kind: host, affinity: 0, num_bufs: 256, buf_size: 1024}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues:
    - {name: tq, id: 0, cpu_core: 1, batch_size: 16, memory_regions: [txb]}
  rx:
    queues:
    - {name: rq, id: 0, cpu_core: 1, batch_size: 16, timeout_us: 200, memory_regions: [hdr, pay]}
"#,
    )
});

/// Sends five packets of 10 to 1,024 bytes through `cfg` (as [`HDS_CFG`]) and checks
/// each arrives split at 64 bytes, whole, and that the TX buffers come back.
fn sends_and_checks_a_split(cfg: config::Config) {
    let mut plane = DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let lens = [10usize, 64, 65, 700, 1024];
    let mut b = tx.alloc(lens.len()).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        let buf = b.buffer_mut(i, 0).unwrap();
        for (k, x) in buf[..len].iter_mut().enumerate() {
            *x = (k * 7 + i) as u8;
        }
        b.set_len(i, 0, len);
    }
    tx.send(b).expect("send");
    let deadline = Instant::now() + Duration::from_secs(30);
    let burst = loop {
        if let Some(b) = rx.poll().expect("worker alive") {
            break b;
        }
        assert!(Instant::now() < deadline, "nothing arrived");
        std::thread::yield_now();
    };
    assert_eq!(burst.len(), lens.len());
    let regions = burst.regions().clone();
    for (i, &len) in lens.iter().enumerate() {
        let p = burst.packets()[i];
        let segs = p.segments();
        assert_eq!(segs.len(), 2);
        assert_eq!(regions.get(segs[0].region).name(), "hdr");
        assert_eq!(regions.get(segs[1].region).name(), "pay");
        assert_eq!(
            (segs[0].len as usize, segs[1].len as usize),
            (len.min(64), len.saturating_sub(64))
        );
        let whole: Vec<u8> = [burst.data(i, 0).unwrap(), burst.data(i, 1).unwrap()].concat();
        let want: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
        assert_eq!(whole, want, "packet {i}");
    }
    drop(burst);
    let txb = regions.id_of("txb").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while regions.get(txb).available() != 256 {
        assert!(Instant::now() < deadline, "TX buffers never came back");
        std::thread::yield_now();
    }
    plane.shutdown().expect("no worker failed");
}

/// The same split with `stage_core`: the RX worker on core 1 receives, a second worker on
/// core 0 splits; thousands of packets of varied lengths arrive whole, in order and
/// counted once, and every buffer of every region is back in its pool after shutdown.
#[test]
fn a_queue_staged_on_its_own_core_delivers_every_packet_in_order() {
    let text = HDS_CFG.replace("num_bufs: 256", "num_bufs: 512").replace(
        "cpu_core: 1, batch_size: 16, timeout_us",
        "cpu_core: 1, stage_core: 0, batch_size: 16, timeout_us",
    );
    assert!(text.contains("stage_core: 0") && !text.contains("num_bufs: 256"));
    let cfg = config::load_with(&text, "stage_core.yaml", &|c| c < 2)
        .unwrap()
        .config;
    let mut plane = DataPlane::start(&cfg).expect("start");
    assert_eq!(plane.worker_cores(), vec![0, 1]);
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let total = 5000usize;
    // Packet k: its number in the first 4 bytes, then bytes derived from it.
    let len_of = |k: usize| 4 + (k * 37) % 1020;
    let byte = |k: usize, at: usize| (k * 13 + at * 7) as u8;
    let (mut sent, mut next) = (0usize, 0usize);
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < total {
        assert!(
            Instant::now() < deadline,
            "stalled at {next} of {total} ({sent} sent)"
        );
        if sent < total
            && sent - next < 256
            && let Ok(mut b) = tx.alloc(16.min(total - sent))
        {
            for i in 0..b.len() {
                let k = sent + i;
                let buf = b.buffer_mut(i, 0).unwrap();
                buf[..4].copy_from_slice(&(k as u32).to_le_bytes());
                for (at, x) in buf[4..len_of(k)].iter_mut().enumerate() {
                    *x = byte(k, at);
                }
                b.set_len(i, 0, len_of(k));
            }
            sent += b.len();
            tx.send(b).expect("send");
        }
        if let Some(b) = rx.poll().expect("workers alive") {
            assert!(!b.is_empty(), "idle marks stay between the two workers");
            for i in 0..b.len() {
                let whole: Vec<u8> = [b.data(i, 0).unwrap(), b.data(i, 1).unwrap()].concat();
                let k = u32::from_le_bytes(whole[..4].try_into().unwrap()) as usize;
                assert_eq!(k, next, "packets in order");
                assert_eq!(whole.len(), len_of(k), "packet {k}: length");
                assert_eq!(b.data(i, 0).unwrap().len(), 64.min(len_of(k)), "packet {k}");
                assert!(
                    whole[4..]
                        .iter()
                        .enumerate()
                        .all(|(at, &x)| x == byte(k, at)),
                    "packet {k}: bytes"
                );
                next += 1;
            }
        }
    }
    let snapshot = plane.snapshot();
    let rxq = snapshot
        .queues
        .iter()
        .find(|q| q.direction == "rx")
        .unwrap();
    assert_eq!(rxq.packets, total as u64, "each packet counted once");
    let regions = plane.regions().clone();
    drop((tx, rx));
    plane.shutdown().expect("no worker failed");
    for name in ["txb", "hdr", "pay"] {
        let r = regions.get(regions.id_of(name).unwrap());
        assert_eq!(r.available(), 512, "every `{name}` buffer back");
    }
}

/// `stage_core` where it cannot apply is refused by name, not ignored.
#[test]
fn stage_core_without_a_stage_or_on_the_receiving_core_is_refused() {
    let text = |regions: &str, stage_core: &str| {
        common::loopback_config(&format!(
            r#"
memory_regions:
- {{name: hdr, kind: host, affinity: 0, num_bufs: 64, buf_size: 64}}
- {{name: pay, kind: host, affinity: 0, num_bufs: 64, buf_size: 1024}}
interfaces:
- name: loop0
  address: loopback
  rx:
    queues:
    - {{name: rq, id: 0, cpu_core: 1, stage_core: {stage_core}, batch_size: 16, memory_regions: [{regions}]}}
"#
        ))
    };
    let start = |t: String| {
        let cfg = config::load_with(&t, "stage_core.yaml", &|c| c < 2)
            .unwrap()
            .config;
        DataPlane::start(&cfg).err().expect("refused").to_string()
    };
    let e = start(text("pay", "0"));
    assert!(
        e.contains("RX queue 0") && e.contains("stage_core is set, but the queue needs no stage"),
        "{e}"
    );
    let e = start(text("hdr, pay", "1"));
    assert!(e.contains("stage_core 1 is its cpu_core"), "{e}");
    let e = start(text("hdr, pay", "[0, 1]"));
    assert!(
        e.contains("stage_core lists its cpu_core 1 as a copy helper"),
        "{e}"
    );
    // A core twice in the list: a configuration error at its line and column.
    let e = config::load_with(&text("hdr, pay", "[0, 0]"), "stage_core.yaml", &|c| c < 2)
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("stage_core[1] (line 16, column 58)") && e.contains("core 0 is listed twice"),
        "{e}"
    );
}

/// A producer faster than its consumer fills every queue on the way (the loopback holds
/// bursts rather than drop them), so what is in flight is bounded by the queues' rings,
/// not by the region: with a ring of the whole pool, every buffer of a large region would
/// be in flight and its data would not stay in the CPU's caches.
#[test]
fn a_stalled_consumer_holds_ring_packets_not_the_whole_pool() {
    const POOL: usize = 16384;
    let text = common::loopback_config(&format!(
        r#"
memory_regions:
- {{name: txb, kind: host, affinity: 0, num_bufs: {POOL}, buf_size: 64}}
- {{name: rxb, kind: host, affinity: 0, num_bufs: 64, buf_size: 64}}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues:
    - {{name: tq, id: 0, cpu_core: 0, batch_size: 32, ring_packets: 256, memory_regions: [txb]}}
  rx:
    queues:
    - {{name: rq, id: 0, cpu_core: 0, batch_size: 32, ring_packets: 256, memory_regions: [rxb]}}
"#
    ));
    let cfg = config::load_str(&text, "test").expect("config").config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plan");
    assert!(
        plan.queues.iter().all(|q| q.ring_bursts == 8),
        "256 packets in bursts of 32"
    );
    let mut dp = DataPlane::start(&cfg).expect("start");
    let mut tx = dp.take_tx_queue("loop0", 0).unwrap();
    let mut rx = dp.take_rx_queue("loop0", 0).unwrap();
    let txb = dp.regions().id_of("txb").unwrap();

    // Send without reading until the TX ring stays full (the worker has filled everything
    // behind it), or until the pool runs dry (what a ring of the whole pool allows).
    let mut sent = 0usize;
    loop {
        let Ok(b) = tx.alloc(32) else { break };
        match tx.send_within(b, Duration::from_millis(500)) {
            Ok(()) => sent += 32,
            Err(e) => {
                assert_eq!(e.reason, TxFailure::RingFull);
                break;
            }
        }
    }
    let in_flight = POOL - dp.regions().get(txb).available();
    // The TX ring (8 bursts), the wire (32 pieces of at most a burst), the RX ring (8),
    // and a burst held at each worker step.
    let bound = (8 + 32 + 8 + 4) * 32;
    assert!(
        in_flight <= bound,
        "{in_flight} buffers in flight with rings of 256 packets (at most {bound} expected, pool {POOL})"
    );

    // Nothing was lost on the way: every packet sent arrives.
    let mut got = 0usize;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < sent && Instant::now() < deadline {
        if let Some(b) = rx.poll().expect("worker alive") {
            got += b.len();
        }
    }
    assert_eq!(got, sent, "every packet sent arrives");
    assert_eq!(dp.snapshot().drops().total(), 0);
    dp.shutdown().expect("no worker failed");
}
