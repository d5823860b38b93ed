//! Flow steering end to end on the software loopback: the 4-queue bench config, and flows
//! added and removed while traffic flows.

#[macro_use]
mod common;

use dataplane::config::{self, FlowConfig, FlowMatch, PortRange};
use dataplane::{DataPlane, TxFailure};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[test]
fn four_queue_loopback_is_lossless_with_the_counts_the_rules_imply() {
    let report = common::bench_shipped_config("sw_loopback_4q.yaml");
    assert!(report.lossless, "{:?}", report.problems);
    assert_eq!(report.steering, "software");
    common::assert_four_queue_split(&report);
}

/// 9000-byte frames on the software loopback: the shipped config with 9000-byte buffers,
/// every frame verified, none lost.
#[test]
fn jumbo_frames_cross_the_software_loopback_whole() {
    let text = std::fs::read_to_string(common::config_path("sw_loopback.yaml"))
        .unwrap()
        .replace("buf_size: 1088", "buf_size: 9000")
        .replace("payload_size: 1024", "payload_size: 8936");
    assert!(
        text.contains("payload_size: 8936"),
        "the config was changed"
    );
    let mut cfg = config::load_str(&text, "jumbo.yaml")
        .expect("config")
        .config;
    cfg.master_core = 0;
    let report = common::run_bench(&cfg, 1.0);
    assert!(report.lossless, "{:?}", report.problems);
    assert_eq!(report.setup.frame_bytes, Some(9000));
    assert!(report.rx_packets > 1000, "{}", report.rx_packets);
    assert_eq!(
        report.checker.valid, report.rx_packets,
        "every frame verified"
    );
}

const DYNAMIC: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: txb, kind: host, affinity: 0, num_bufs: 4096, buf_size: 256}
    - {name: rxb, kind: host, affinity: 0, num_bufs: 256, buf_size: 256}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
        - {name: tq, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [txb]}
      rx:
        flow_isolation: true
        exception_queue: 0
        queues:
        - {name: rq0, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [rxb]}
        - {name: rq1, id: 1, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [rxb]}
"#
);

/// Writes a UDP frame to port 7000 whose payload carries `seq` and whether the sender had
/// seen `remove_flow` return before building it.
fn write_frame(buf: &mut [u8], seq: u64, after_remove: bool) -> usize {
    let mut payload = [0u8; 9];
    payload[..8].copy_from_slice(&seq.to_be_bytes());
    payload[8] = after_remove as u8;
    let mut out = Vec::with_capacity(64);
    etherparse::PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(4000, 7000)
        .write(&mut out, &payload)
        .unwrap();
    buf[..out.len()].copy_from_slice(&out);
    out.len()
}

#[derive(Debug)]
struct Seen {
    queue: u16,
    epoch: u64,
    flow_ids: Vec<u32>,
    after_remove: Vec<bool>,
    seqs: Vec<u64>,
}

#[test]
fn flows_added_and_removed_under_traffic() {
    let cfg = config::load_str(DYNAMIC, "dynamic").expect("config").config;
    let mut dp = DataPlane::start(&cfg).expect("start");
    let tx = dp.take_tx_queue("loop0", 0).unwrap();
    let rx0 = dp.take_rx_queue("loop0", 0).unwrap();
    let rx1 = dp.take_rx_queue("loop0", 1).unwrap();
    let flags = Arc::new(Flags::default());
    let sender = spawn_sender(tx, flags.clone());
    let receiver = spawn_receiver([rx0, rx1], flags.clone());

    let wait_sent = |n: u64| {
        let start = flags.sent.load(Ordering::Relaxed);
        while flags.sent.load(Ordering::Relaxed) < start + n {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_sent(20_000);
    let e_before = dp.steering_epoch("loop0").unwrap();
    let flow = FlowConfig {
        name: "dyn".into(),
        id: 42,
        queue_ids: vec![1],
        matches: FlowMatch {
            udp_dst: Some(PortRange {
                first: 7000,
                last: 7000,
            }),
            ..Default::default()
        },
        transforms: vec![],
        location: Default::default(),
    };
    let handle = dp.add_flow("loop0", flow.clone()).expect("add_flow");
    assert_eq!(handle.flow_id, 42);
    let e_add = dp.steering_epoch("loop0").unwrap();
    assert!(e_add > e_before);
    assert!(
        dp.add_flow("loop0", flow).is_err(),
        "the same id twice is refused"
    );
    wait_sent(20_000);
    dp.remove_flow(handle).expect("remove_flow");
    let e_rm = dp.steering_epoch("loop0").unwrap();
    flags.removed.store(true, Ordering::Release);
    assert!(dp.remove_flow(handle).is_err(), "already removed");
    wait_sent(20_000);
    flags.stop.store(true, Ordering::Relaxed);
    let total = sender.join().unwrap();
    flags.sender_done.store(true, Ordering::Release);
    dp.flush();
    let seen = receiver.join().unwrap();

    // Nothing lost: every packet arrived exactly once (isolation sends unmatched ones to
    // the exception queue 0).
    let mut seqs: Vec<u64> = seen.iter().flat_map(|s| s.seqs.iter().copied()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..total).collect::<Vec<_>>());
    check_epochs_and_flow_ids(&seen, e_add, e_rm);
    drop(dp);
}

/// What the sender and receiver threads share with the test.
#[derive(Default)]
struct Flags {
    stop: AtomicBool,
    /// The flow was removed: frames built from now on say so.
    removed: AtomicBool,
    sent: AtomicU64,
    sender_done: AtomicBool,
}

/// Sends numbered frames until `stop`; returns how many.
fn spawn_sender(mut tx: dataplane::TxQueue, flags: Arc<Flags>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut seq = 0u64;
        while !flags.stop.load(Ordering::Relaxed) {
            let Ok(mut b) = tx.alloc(16) else {
                std::thread::yield_now();
                continue;
            };
            let after = flags.removed.load(Ordering::Acquire);
            for i in 0..b.len() {
                let n = write_frame(b.buffer_mut(i, 0).unwrap(), seq, after);
                b.set_len(i, 0, n);
                seq += 1;
            }
            let mut b = Some(b);
            while let Some(burst) = b.take() {
                if let Err(e) = tx.send(burst) {
                    assert_eq!(e.reason, TxFailure::RingFull);
                    b = Some(e.burst);
                    std::thread::yield_now();
                }
            }
            flags.sent.store(seq, Ordering::Relaxed);
        }
        seq
    })
}

/// Records every burst of both queues until the sender is done and everything it sent
/// arrived (or a generous bound passed, for a report).
fn spawn_receiver(
    mut rx: [dataplane::RxQueue; 2],
    flags: Arc<Flags>,
) -> std::thread::JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut received = 0u64;
        let mut done_at = None;
        loop {
            let mut got = false;
            for (q, rx) in rx.iter_mut().enumerate() {
                if let Some(b) = rx.poll().expect("worker alive") {
                    got = true;
                    let mut s = Seen {
                        queue: q as u16,
                        epoch: b.steering_epoch(),
                        flow_ids: Vec::new(),
                        after_remove: Vec::new(),
                        seqs: Vec::new(),
                    };
                    for i in 0..b.len() {
                        let d = b.data(i, 0).unwrap();
                        s.flow_ids.push(b.packets()[i].flow_id);
                        s.seqs
                            .push(u64::from_be_bytes(d[42..50].try_into().unwrap()));
                        s.after_remove.push(d[50] == 1);
                    }
                    received += b.len() as u64;
                    seen.push(s);
                }
            }
            if flags.sender_done.load(Ordering::Acquire) {
                let since = done_at.get_or_insert_with(std::time::Instant::now);
                if received >= flags.sent.load(Ordering::Relaxed)
                    || since.elapsed() > Duration::from_secs(10)
                {
                    break;
                }
            }
            if !got {
                std::thread::yield_now();
            }
        }
        seen
    })
}

/// Epochs never go back on a queue and a burst holds one epoch's packets; flow 42 reached
/// queue 1 only while it existed (epochs `e_add..e_rm`); everything else went unmarked to
/// the exception queue.
fn check_epochs_and_flow_ids(seen: &[Seen], e_add: u64, e_rm: u64) {
    let mut last_epoch = BTreeMap::new();
    let mut flow_packets = 0;
    let mut after = 0;
    for s in seen {
        let last = last_epoch.entry(s.queue).or_insert(0);
        assert!(
            s.epoch >= *last,
            "queue {} epoch {} after {}",
            s.queue,
            s.epoch,
            last
        );
        *last = s.epoch;
        for (i, &fid) in s.flow_ids.iter().enumerate() {
            if fid == 42 {
                flow_packets += 1;
                assert_eq!(s.queue, 1, "flow 42 goes to queue 1");
                assert!(
                    s.epoch >= e_add && s.epoch < e_rm,
                    "flow 42 only while it exists"
                );
            } else {
                assert_eq!(
                    (s.queue, fid),
                    (0, 0),
                    "unmatched: exception queue, no mark"
                );
            }
            if s.after_remove[i] {
                after += 1;
                assert_ne!(fid, 42, "built after remove_flow returned");
                assert!(s.epoch >= e_rm);
            }
        }
        if s.epoch >= e_rm {
            assert!(!s.flow_ids.contains(&42));
        }
    }
    assert!(flow_packets > 0, "the added flow steered packets");
    assert!(after > 0, "traffic continued after the removal");
}
