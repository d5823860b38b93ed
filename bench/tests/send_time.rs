//! `accurate_send` on the software loopback: packets with a send time in the future go out
//! no earlier than it (their receive timestamps, taken after sending, are not earlier),
//! in order, and the TX queue reports how late they went.

mod common;

use dataplane::config;
use dataplane::plane::DataPlane;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CONFIG: &str = r#"
version: 1
stream_type: raw
master_core: 0
loopback: sw
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
interfaces:
- name: lo
  address: loopback
  rx:
    hardware_timestamps: true
    queues:
    - {name: rx0, id: 0, cpu_core: 0, batch_size: 8, timeout_us: 50, memory_regions: [bufs]}
  tx:
    accurate_send: true
    queues:
    - {name: tx0, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [bufs]}
"#;

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn packets_leave_no_earlier_than_their_send_time() {
    let c = config::load_str(CONFIG, "send_time.yaml").unwrap().config;
    let mut plane = DataPlane::start(&c).expect("starts");
    let mut tx = plane.take_tx_queue("lo", 0).unwrap();
    let mut rx = plane.take_rx_queue("lo", 0).unwrap();
    // 50 bursts of 4 packets: one due now (time 0), three 2 ms + 200 us apart in the future.
    let start = wall_ns() + 2_000_000;
    let mut scheduled = Vec::new();
    for b in 0..50u64 {
        let mut burst = tx.alloc(4).unwrap();
        for i in 0..4 {
            let k = b * 4 + i as u64;
            let at = if i == 0 { 0 } else { start + k * 200_000 };
            let buf = burst.buffer_mut(i, 0).unwrap();
            buf[..8].copy_from_slice(&k.to_le_bytes());
            buf[8..16].copy_from_slice(&at.to_le_bytes());
            burst.set_len(i, 0, 64);
            burst.set_timestamp(i, at);
            scheduled.push(at);
        }
        while let Err(e) = tx.send(burst) {
            burst = e.burst;
            std::thread::yield_now();
        }
    }
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while next < 200 && Instant::now() < deadline {
        let Some(b) = rx.poll().unwrap() else {
            continue;
        };
        for i in 0..b.len() {
            let d = b.data(i, 0).unwrap();
            let k = u64::from_le_bytes(d[..8].try_into().unwrap());
            let at = u64::from_le_bytes(d[8..16].try_into().unwrap());
            assert_eq!(k, next, "in order");
            let received = b.packets()[i].timestamp_ns;
            // The two workers' clocks agree to well under this margin.
            assert!(
                received + 50_000 >= at,
                "packet {k} arrived {} us before its send time",
                (at - received) / 1000
            );
            next += 1;
        }
    }
    assert_eq!(next, 200);
    let late = tx
        .send_lateness()
        .expect("an accurate_send queue reports lateness");
    println!(
        "send-time error over {} packets: p50 {} ns, p99 {} ns, max {} ns",
        late.packets, late.p50_ns, late.p99_ns, late.max_ns
    );
    assert_eq!(late.packets, 150, "every packet with a send time counted");
    plane.shutdown().unwrap();
}

const BENCH: &str = r#"
version: 1
stream_type: raw
master_core: 0
loopback: sw
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 8192, buf_size: 2048}
interfaces:
- name: lo
  address: loopback
  rx:
    hardware_timestamps: STAMPED
    queues:
    - {name: rx0, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}
  tx:
    queues:
    - {name: tx0, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [bufs]}
bench_tx:
- {interface_name: lo, queue_id: 0, batch_size: 32, header_size: 64, payload_size: 256,
   eth_src_addr: "02:00:00:00:00:01", eth_dst_addr: "02:00:00:00:00:02",
   ip_src_addr: 10.0.0.1, ip_dst_addr: 10.0.0.2, udp_src_port: 4096, udp_dst_port: 4096}
bench_rx:
- {interface_name: lo}
"#;

/// `bench raw` stamps each burst's send time into the frames' trailers and reports one-way
/// latency percentiles, with receive times from the RX worker's stamps when
/// `hardware_timestamps` is on and from the checker's poll otherwise.
#[test]
fn bench_reports_one_way_latency_from_receive_timestamps() {
    for (stamped, clock) in [("true", "rx_timestamp"), ("false", "poll")] {
        let text = BENCH.replace("STAMPED", stamped);
        let c = config::load_str(&text, "latency.yaml").unwrap().config;
        let report = dataplane_bench::raw::run(
            &c,
            &dataplane_bench::raw::RawOptions {
                target_gbps: Some(0.5),
                ..dataplane_bench::raw::RawOptions::new(0.5)
            },
            &std::sync::atomic::AtomicBool::new(false),
        )
        .expect("bench runs");
        assert!(report.lossless, "{:?}", report.problems);
        assert_eq!(report.latency_clock, clock);
        let l = report.latency.expect("latency measured");
        assert_eq!(l.frames, report.rx_packets, "every checked frame is timed");
        assert_eq!(l.receive_before_send, 0, "one clock in one process");
        assert!(l.min_ns > 0, "{l:?}");
        assert!(
            l.min_ns <= l.p50_ns
                && l.p50_ns <= l.p99_ns
                && l.p99_ns <= l.p999_ns
                && l.p999_ns <= l.max_ns,
            "{l:?}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["latency"]["p999_ns"].as_u64().is_some(), "{json}");
        assert!(report.human().contains("one-way latency"));
    }
}

/// The reference's pacing example (`pacing_mbps: 10000` on its TX queue) runs on the
/// loopback with its NIC port mapped there: lossless, paced by the TX worker. The rate it
/// reaches is a measurement, printed here and recorded in BENCHMARKS.md, not asserted.
#[test]
fn the_reference_pacing_example_runs_paced() {
    let Some(text) =
        common::mapped_reference_example("daqiri_bench_raw_tx_rx_pacing.yaml", 1, true)
    else {
        return;
    };
    let c = config::load_str(&text, "daqiri_bench_raw_tx_rx_pacing.yaml")
        .expect("the mapped example loads")
        .config;
    let paced: Vec<u64> = c
        .interfaces
        .iter()
        .flat_map(|i| i.tx.iter().flat_map(|t| &t.queues))
        .map(|q| q.pacing_mbps)
        .collect();
    assert_eq!(paced, [10_000]);
    let report = common::run_bench(&c, 2.0);
    print!("{}", report.human());
    assert!(report.lossless, "{:?}", report.problems);
    assert!(report.rx_packets > 0);
    let p = report.pacing.expect("a paced queue is reported");
    assert_eq!(p.target_gbps, 10.0);
    println!(
        "pacing example: target {} Gb/s, TX workers sent {:.3} Gb/s while generating",
        p.target_gbps, p.sent_gbps
    );
}
