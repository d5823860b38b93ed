//! Replaying a capture (`plane::replay`) through the software loopback: a pcap of UDP
//! frames at irregular gaps goes out at its own times on an `accurate_send` queue, the RX
//! queue timestamps and captures what arrives, and the capture read back holds every
//! frame, in order, byte for byte. The gap error (arrival gaps against the file's) is
//! printed, not asserted: time on a shared machine is not a test's to judge; the
//! benchmark's figures are in BENCHMARKS.md. Bad captures and options are refused with
//! the frame they concern.

mod common;

use dataplane::capture::{CapturedFrame, read_capture};
use dataplane::plane::replay::{Pace, ReplayError, ReplayOptions, replay};
use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const FRAMES: usize = 300;

/// UDP frames of varied lengths, at gaps of 20 to 400 us from a 2020 timestamp.
fn frames() -> Vec<CapturedFrame> {
    let udp = dataplane::packet::UdpFrame::new(
        "10.0.0.1:7000".parse::<SocketAddrV4>().unwrap(),
        "10.0.0.2:7001".parse::<SocketAddrV4>().unwrap(),
    );
    let mut t = 1_600_000_000_000_000_000u64;
    (0..FRAMES)
        .map(|i| {
            let payload: Vec<u8> = (0..(18 + i * 37 % 1400)).map(|k| (k ^ i) as u8).collect();
            let mut bytes = vec![0u8; udp.header_len() + payload.len()];
            udp.write(&payload, &mut bytes).unwrap();
            t += 20_000 + (i as u64 * 7919 % 380) * 1000;
            CapturedFrame {
                timestamp_ns: t,
                original_len: bytes.len() as u32,
                bytes,
            }
        })
        .collect()
}

/// `frames` as a pcap file with nanosecond timestamps.
fn write_pcap(path: &std::path::Path, frames: &[CapturedFrame]) {
    let header = pcap_file::pcap::PcapHeader {
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..Default::default()
    };
    let file = std::fs::File::create(path).unwrap();
    let mut w = pcap_file::pcap::PcapWriter::with_header(file, header).unwrap();
    for f in frames {
        w.write_packet(&pcap_file::pcap::PcapPacket::new_owned(
            Duration::from_nanos(f.timestamp_ns),
            f.original_len,
            f.bytes.clone(),
        ))
        .unwrap();
    }
}

fn loopback(accurate_send: bool, capture: &std::path::Path) -> dataplane::config::Config {
    let rx_queue = format!(
        "timeout_us: 50\nmemory_regions: [rx]\ncapture: {{path: \"{}\", format: pcap}}",
        capture.display()
    );
    let text = common::LoopPair {
        bufs: (1024, 2048),
        buf_size: 1536,
        tx: &format!("accurate_send: {accurate_send}"),
        rx: "hardware_timestamps: true",
        rx_queue: &rx_queue,
        ..Default::default()
    }
    .text();
    dataplane::config::load_str(&text, "replay.yaml")
        .unwrap()
        .config
}

/// Gap errors in microseconds: |arrival gap - file gap| for each pair of neighbours.
fn gap_errors_us(sent: &[CapturedFrame], got: &[CapturedFrame]) -> Vec<f64> {
    let gaps = |f: &[CapturedFrame]| -> Vec<i64> {
        f.windows(2)
            .map(|w| w[1].timestamp_ns as i64 - w[0].timestamp_ns as i64)
            .collect()
    };
    let mut e: Vec<f64> = gaps(sent)
        .iter()
        .zip(gaps(got))
        .map(|(a, b)| (a - b).abs() as f64 / 1000.0)
        .collect();
    e.sort_by(f64::total_cmp);
    e
}

#[test]
fn a_capture_replayed_at_its_gaps_arrives_whole_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (source, captured) = (dir.path().join("in.pcap"), dir.path().join("out.pcap"));
    let sent = frames();
    write_pcap(&source, &sent);
    let frames = read_capture(&source).expect("reads back");
    assert_eq!(frames, sent, "the pcap reader gives what was written");

    let mut plane = dataplane::DataPlane::start(&loopback(true, &captured)).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let report = replay(
        &mut tx,
        &frames,
        &ReplayOptions::default(),
        &AtomicBool::new(false),
    )
    .expect("replayed");
    assert_eq!(
        (report.packets, report.loops, report.stopped),
        (FRAMES as u64, 1, false)
    );
    let span = sent.last().unwrap().timestamp_ns - sent[0].timestamp_ns;
    assert_eq!(report.scheduled_ns, span, "at the file's own gaps");
    let error = report
        .send_error
        .expect("software accurate_send measures it");
    assert_eq!(error.packets, FRAMES as u64);
    let mut arrived = 0;
    while arrived < FRAMES {
        let b = rx
            .recv(Duration::from_secs(10))
            .unwrap()
            .expect("every frame arrives");
        arrived += b.len();
    }
    rx.finish_capture().unwrap().unwrap();
    drop((tx, rx));
    plane.shutdown().unwrap();

    let got = read_capture(&captured).unwrap();
    assert_eq!(got.len(), FRAMES);
    for (i, (a, b)) in sent.iter().zip(&got).enumerate() {
        assert!(a.bytes == b.bytes, "frame {i} differs");
    }
    let e = gap_errors_us(&sent, &got);
    println!(
        "replay gap error over the loopback: median {:.2} us, p99 {:.2} us, max {:.2} us; send-time error median {} ns, p99 {} ns",
        e[e.len() / 2],
        e[e.len() * 99 / 100],
        e[e.len() - 1],
        error.p50_ns,
        error.p99_ns
    );
}

#[test]
fn loops_rates_and_unpaced_replays_send_every_frame() {
    let dir = tempfile::tempdir().unwrap();
    let sent = frames();
    let stop = AtomicBool::new(false);
    // Unpaced needs no accurate_send.
    let mut plane =
        dataplane::DataPlane::start(&loopback(false, &dir.path().join("a.pcap"))).unwrap();
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let paced = replay(&mut tx, &sent, &ReplayOptions::default(), &stop);
    assert!(
        matches!(paced, Err(ReplayError::NeedsSendTimes { .. })),
        "{paced:?}"
    );
    let unpaced = ReplayOptions {
        pace: Pace::Unpaced,
        loops: 2,
        ..ReplayOptions::default()
    };
    let r = replay(&mut tx, &sent, &unpaced, &stop).unwrap();
    assert_eq!(
        (r.packets, r.loops, r.send_error),
        (2 * FRAMES as u64, 2, None)
    );
    let mut arrived = 0;
    while arrived < 2 * FRAMES {
        arrived += rx
            .recv(Duration::from_secs(10))
            .unwrap()
            .expect("arrives")
            .len();
    }
    drop((tx, rx));
    plane.shutdown().unwrap();

    let mut plane =
        dataplane::DataPlane::start(&loopback(true, &dir.path().join("b.pcap"))).unwrap();
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let fixed = ReplayOptions {
        pace: Pace::PacketsPerSecond(100_000.0),
        ..ReplayOptions::default()
    };
    let r = replay(&mut tx, &sent[..100], &fixed, &stop).unwrap();
    assert_eq!(r.scheduled_ns, 99 * 10_000, "10 us apart");
    let twice = ReplayOptions {
        pace: Pace::Original { speed: 2.0 },
        ..ReplayOptions::default()
    };
    let r = replay(&mut tx, &sent[..10], &twice, &stop).unwrap();
    let span = sent[9].timestamp_ns - sent[0].timestamp_ns;
    assert_eq!(r.scheduled_ns, span / 2, "twice as fast");
    for bad in [0.0, -1.0, f64::NAN] {
        let o = ReplayOptions {
            pace: Pace::Original { speed: bad },
            ..ReplayOptions::default()
        };
        assert!(matches!(
            replay(&mut tx, &sent, &o, &stop),
            Err(ReplayError::Options(_))
        ));
    }
    drop(tx);
    plane.shutdown().unwrap();
}

#[test]
fn frames_that_cannot_be_sent_are_refused_by_their_place_in_the_capture() {
    let dir = tempfile::tempdir().unwrap();
    let mut plane =
        dataplane::DataPlane::start(&loopback(true, &dir.path().join("c.pcap"))).unwrap();
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let stop = AtomicBool::new(false);
    let o = ReplayOptions::default();
    let mut sent = frames();
    sent[7].bytes.resize(1600, 0);
    sent[7].original_len = 1600;
    let e = replay(&mut tx, &sent, &o, &stop).unwrap_err();
    assert_eq!(
        e.to_string(),
        "frame 7 of the capture is 1600 bytes; the queue's buffers hold 1536"
    );
    let mut sent = frames();
    sent[3].original_len += 10;
    let e = replay(&mut tx, &sent, &o, &stop).unwrap_err();
    assert!(matches!(e, ReplayError::Truncated { index: 3, .. }), "{e}");
    let mut sent = frames();
    sent[5].bytes[12] = 0x88; // EtherType 0x8800: neither IPv4 nor IPv6
    let payloads = ReplayOptions {
        payload_only: true,
        ..ReplayOptions::default()
    };
    let e = replay(&mut tx, &sent, &payloads, &stop).unwrap_err();
    assert!(matches!(e, ReplayError::NotUdp { index: 5 }), "{e}");
    assert!(matches!(
        replay(&mut tx, &[], &o, &stop),
        Err(ReplayError::Empty)
    ));
    let bad = dir.path().join("bad.pcap");
    std::fs::write(&bad, b"not a capture at all").unwrap();
    let e = read_capture(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.pcap") && e.contains("not a pcap"), "{e}");
    drop(tx);
    plane.shutdown().unwrap();
}
