//! Soundness and fault handling through the public API: bursts never cross data planes,
//! a worker that panics is reported by its queues and by shutdown, and the fault-injecting
//! wire gives exact, attributed bench verdicts.

mod common;

use dataplane::config::{self, Config};
use dataplane::{Burst, DataPlane, TxFailure};
use dataplane_bench::raw::{RawReport, Verdict};
use std::time::{Duration, Instant};

fn shipped(name: &str) -> String {
    std::fs::read_to_string(common::config_path(name)).expect("shipped config")
}

fn load(text: &str) -> Config {
    config::load_str(text, "test").expect("valid config").config
}

/// `configs/sw_loopback.yaml` with `fault_injection` rules on its interface (YAML lines
/// indented for the interface map), and optionally one fixed UDP flow.
fn loopback_with_faults(rules: &str, one_flow: bool) -> Config {
    let mut text = shipped("sw_loopback.yaml").replacen(
        "      address: \"loopback\"",
        &format!("      address: \"loopback\"\n      fault_injection:\n{rules}"),
        1,
    );
    if one_flow {
        text = text
            .replace("udp_src_port: \"4096-4103\"", "udp_src_port: \"4096\"")
            .replace("udp_dst_port: \"5000-5001\"", "udp_dst_port: \"5000\"");
    }
    load(&text)
}

fn available(b: &Burst) -> Vec<usize> {
    b.regions().iter().map(|r| r.available()).collect()
}

#[test]
fn bursts_never_cross_data_planes() {
    let cfg = load(&shipped("sw_loopback.yaml"));
    let mut a = DataPlane::start(&cfg).expect("plane a");
    let mut b = DataPlane::start(&cfg).expect("plane b");
    let (mut a_tx, mut a_rx) = (
        a.take_tx_queue("loop0", 0).unwrap(),
        a.take_rx_queue("loop0", 0).unwrap(),
    );
    let (mut b_tx, mut b_rx) = (
        b.take_tx_queue("loop0", 0).unwrap(),
        b.take_rx_queue("loop0", 0).unwrap(),
    );
    let a_burst = a_tx.alloc(8).unwrap();
    let b_burst = b_tx.alloc(5).unwrap();
    let (a_free, b_free) = (available(&a_burst), available(&b_burst));

    // Sends in both directions come back with the burst and the reason.
    let err = b_tx.send(a_burst).unwrap_err();
    assert_eq!(err.reason, TxFailure::ForeignMemory);
    assert!(err.to_string().contains("another data plane"), "{err}");
    let mut a_burst = err.burst;
    let err = a_tx.send(b_burst).unwrap_err();
    assert_eq!(err.reason, TxFailure::ForeignMemory);
    let mut b_burst = err.burst;

    // Merging across planes is refused in release builds too, before anything moves.
    let merged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        b_burst.take_from(&mut a_burst, 4)
    }));
    assert!(merged.is_err(), "take_from across planes must be refused");
    let merged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        a_burst.take_from(&mut b_burst, 4)
    }));
    assert!(merged.is_err());
    assert_eq!((a_burst.len(), b_burst.len()), (8, 5));
    assert!(!a_burst.same_memory(&b_burst));
    assert_eq!(
        available(&a_burst),
        a_free,
        "no buffer moved between planes"
    );
    assert_eq!(available(&b_burst), b_free);

    // Both planes still move their own traffic, with exact counts.
    for (tx, rx, burst, n) in [
        (&mut a_tx, &mut a_rx, a_burst, 8usize),
        (&mut b_tx, &mut b_rx, b_burst, 5),
    ] {
        let regions = burst.regions().clone();
        let mut burst = burst;
        for i in 0..n {
            burst.buffer_mut(i, 0).unwrap()[..4].copy_from_slice(&(i as u32).to_be_bytes());
            burst.set_len(i, 0, 64);
        }
        tx.send(burst).expect("own burst is accepted");
        let mut got = Vec::new();
        let started = Instant::now();
        while got.len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "traffic stalled"
            );
            if let Some(rb) = rx.poll().expect("worker alive") {
                assert!(rb.belongs_to(&regions));
                for i in 0..rb.len() {
                    got.push(u32::from_be_bytes(
                        rb.data(i, 0).unwrap()[..4].try_into().unwrap(),
                    ));
                }
            }
        }
        assert_eq!(got, (0..n as u32).collect::<Vec<_>>());
    }
    a.shutdown().expect("no worker failed");
    b.shutdown().expect("no worker failed");
}

#[test]
fn a_worker_that_panics_fails_its_queues_and_shutdown() {
    let cfg = loopback_with_faults("        rules: [{action: panic, at: 1000}]\n", false);
    let mut plane = DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let started = Instant::now();
    // Send until the queue reports its worker gone (frame 1000 panics it).
    let failure = loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the worker never failed"
        );
        while let Ok(Some(_)) = rx.poll() {}
        let mut burst = match tx.alloc(64) {
            Ok(b) => b,
            Err(TxFailure::WorkerFailed(f)) => break *f,
            Err(_) => continue,
        };
        for i in 0..burst.len() {
            burst.set_len(i, 0, 64);
        }
        match tx.send(burst) {
            Ok(()) => {}
            Err(e) => match e.reason {
                TxFailure::WorkerFailed(f) => break *f,
                TxFailure::RingFull => std::thread::yield_now(),
                other => panic!("unexpected send failure: {other}"),
            },
        }
    };
    assert_eq!(failure.worker, "dp-worker-1");
    assert!(
        failure
            .message
            .contains("fault injection: panic at frame 1000"),
        "{failure:?}"
    );
    // The RX queue on the same worker: what was delivered comes out, then the failure.
    let err = loop {
        match rx.poll() {
            Ok(Some(_)) => {}
            Ok(None) => unreachable!("a failed worker's queue reports the failure"),
            Err(e) => break e,
        }
    };
    assert_eq!(err, failure);
    assert!(err.to_string().contains("dp-worker-1"));
    let failures = plane.shutdown().expect_err("shutdown returns the failure");
    assert_eq!(failures, vec![failure]);
}

#[test]
fn bench_verdict_names_a_dead_worker() {
    let cfg = loopback_with_faults("        rules: [{action: panic, at: 5000}]\n", false);
    let report = common::run_bench(&cfg, 1.0);
    assert_eq!(report.verdict, Verdict::NotLossless);
    assert!(!report.lossless);
    assert_eq!(
        report.worker_failures.len(),
        1,
        "{:?}",
        report.worker_failures
    );
    assert!(report.worker_failures[0].contains("dp-worker-1"));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("panic at frame 5000"))
    );
}

fn assert_nothing_lost(r: &RawReport) {
    assert_eq!((r.lost, r.unattributed, r.in_flight), (0, 0, 0), "{r:?}");
    assert_eq!(r.drops.total(), 0);
}

#[test]
fn injected_drops_are_lost_once_and_attributed() {
    let cfg = loopback_with_faults("        rules: [{action: drop, every: 100}]\n", false);
    let r = common::run_bench(&cfg, 1.0);
    assert!(r.tx_packets > 1000, "{r:?}");
    assert_eq!(r.drops.injected, r.tx_packets / 100, "every 100th frame");
    assert_eq!(r.drops.total(), r.drops.injected);
    assert_eq!(r.lost, r.drops.injected, "each lost packet counted once");
    assert_eq!(r.unattributed, 0);
    assert_eq!(r.in_flight, 0);
    assert_eq!(r.rx_packets, r.tx_packets - r.lost);
    assert_eq!((r.checker.corrupt, r.checker.duplicates), (0, 0));
    assert_eq!(r.verdict, Verdict::NotLossless);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["lost"], r.lost);
    assert_eq!(json["drops"]["injected"], r.lost);
    assert_eq!(json["verdict"], "not_lossless");
}

#[test]
fn one_percent_random_drops_with_a_seed() {
    let cfg = loopback_with_faults(
        "        seed: 42\n        rules: [{action: drop, percent: 1}]\n",
        false,
    );
    let r = common::run_bench(&cfg, 1.0);
    assert!(r.tx_packets > 20_000, "{r:?}");
    assert_eq!(r.lost, r.drops.injected);
    assert_eq!(r.unattributed, 0);
    let share = r.lost as f64 / r.tx_packets as f64;
    assert!((0.005..0.015).contains(&share), "{share}");
}

#[test]
fn corrupt_frames_are_corrupt_not_lost() {
    let cfg = loopback_with_faults("        rules: [{action: corrupt, every: 50}]\n", false);
    let r = common::run_bench(&cfg, 1.0);
    assert_nothing_lost(&r);
    assert_eq!(r.rx_packets, r.tx_packets);
    assert_eq!(r.checker.corrupt, r.tx_packets / 50);
    assert_eq!(r.verdict, Verdict::NotLossless);
}

#[test]
fn duplicates_are_counted_and_do_not_hide_loss() {
    let cfg = loopback_with_faults(
        "        rules: [{action: drop, every: 101}, {action: duplicate, every: 10}]\n",
        false,
    );
    let r = common::run_bench(&cfg, 1.0);
    let dropped = r.tx_packets / 101;
    assert_eq!(r.drops.injected, dropped);
    assert_eq!(
        r.lost, dropped,
        "a duplicate does not make up for a lost frame"
    );
    assert!(r.checker.duplicates > 0);
    assert_eq!(r.rx_packets, r.tx_packets - dropped + r.checker.duplicates);
    assert_eq!(r.checker.corrupt, 0);
}

#[test]
fn reordered_and_delayed_frames_arrive_late_not_lost() {
    let cfg = loopback_with_faults("        rules: [{action: reorder, every: 10}]\n", true);
    let r = common::run_bench(&cfg, 1.0);
    assert_nothing_lost(&r);
    // A swapped frame arrives late unless the queue went idle while it was held (then it
    // goes out alone, in order): at most one late frame per swap.
    let swapped = r.tx_packets / 10;
    assert!(
        r.checker.reordered <= swapped && r.checker.reordered >= swapped / 2,
        "{} late of {swapped} swapped",
        r.checker.reordered
    );
    assert_eq!(
        (r.checker.gaps, r.checker.duplicates),
        (0, 0),
        "late frames fill their gaps"
    );

    let cfg = loopback_with_faults(
        "        rules: [{action: delay, frames: 40, every: 97}]\n",
        false,
    );
    let r = common::run_bench(&cfg, 1.0);
    assert_nothing_lost(&r);
    assert!(r.checker.reordered > 0);
    assert!(r.checker.reordered <= r.tx_packets / 97);
    assert_eq!(r.checker.gaps, 0);
}

#[test]
fn no_flow_drops_are_counted_once() {
    // The 4-queue config with a port range that misses the rules: some packets find no
    // flow; each is lost once, attributed to no_flow.
    let text = shipped("sw_loopback_4q.yaml");
    // The generator's line (bench_tx comes after the flow rules).
    let src = text
        .lines()
        .rfind(|l| l.trim_start().starts_with("udp_dst_port:"))
        .expect("a udp_dst_port line")
        .to_owned();
    let indent = &src[..src.len() - src.trim_start().len()];
    let cfg = load(&text.replacen(&src, &format!("{indent}udp_dst_port: \"5000-5004\""), 1));
    let r = common::run_bench(&cfg, 1.0);
    assert!(r.drops.no_flow > 0, "{r:?}");
    assert_eq!(r.lost, r.drops.no_flow, "lost once, not again as gaps");
    assert_eq!(r.unattributed, 0);
    assert_eq!(r.rx_packets + r.lost, r.tx_packets);
    let human = r.human();
    assert!(
        human.contains(&format!("NOT LOSSLESS: {} packets lost", r.lost)),
        "{human}"
    );
}

#[test]
fn packets_still_in_the_pipeline_at_the_deadline_are_in_flight_not_lost() {
    // A zero drain deadline reads the counters the moment the generators stop, while
    // bursts still sit in the rings: what is missing then is in flight, with its place.
    let cfg = load(&shipped("sw_loopback.yaml"));
    let mut seen_in_flight = false;
    for _ in 0..5 {
        let r = dataplane_bench::raw::run(
            &cfg,
            &dataplane_bench::raw::RawOptions {
                drain_deadline: Duration::ZERO,
                ..dataplane_bench::raw::RawOptions::new(0.5)
            },
            &std::sync::atomic::AtomicBool::new(false),
        )
        .expect("bench runs");
        assert_eq!(
            (r.lost, r.unattributed, r.drops.total()),
            (0, 0, 0),
            "{r:?}"
        );
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        if r.in_flight > 0 {
            assert_eq!(r.verdict, Verdict::Inconclusive);
            assert!(!r.lossless);
            let cause = r.in_flight_cause.as_deref().expect("a cause");
            assert!(cause.contains("not yet taken by the TX workers"), "{cause}");
            assert!(r.human().contains("INCONCLUSIVE"), "{}", r.human());
            seen_in_flight = true;
            break;
        }
        assert_eq!(r.verdict, Verdict::Lossless);
    }
    assert!(
        seen_in_flight,
        "five runs never had packets in flight at the deadline"
    );
}
