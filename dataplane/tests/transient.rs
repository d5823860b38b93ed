//! The triggered transient buffer (`capture.transient`) under sustained traffic on the
//! software loopback: triggers fired by a matching packet, by the queue's trigger handle,
//! by `POST /trigger` on the metrics endpoint and by the plane each write one file, and every packet received inside each window
//! (by its receive timestamp) is in that file, in order, byte for byte, while the queue
//! keeps delivering every packet. The same runs with the history in page-locked memory,
//! and with the queue's packets and the history in GPU memory (windows written through
//! cuFile; no packet predicate there, which needs the CPU to read the packets): those
//! two need a CUDA driver and say SKIP without one.

mod common;

use dataplane::capture::read_capture;
use std::collections::BTreeMap;
use std::io::{Read, Write};

const FRAME: usize = 128;
const PACKETS: u64 = 450_000;
/// Packets whose first bytes fire the trigger.
const MARKED: u64 = 30_000;
const MARK: [u8; 4] = [0xff, 0xee, 0xdd, 0xcc];
const WINDOW_MS: u64 = 5;

fn frame(seq: u64) -> Vec<u8> {
    let mut f: Vec<u8> = (0..FRAME).map(|i| (seq as usize * 7 + i) as u8).collect();
    f[..4].copy_from_slice(if seq == MARKED { &MARK } else { &[0; 4] });
    f[4..12].copy_from_slice(&seq.to_le_bytes());
    f
}

fn seq_of(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[4..12].try_into().unwrap())
}

#[test]
fn each_trigger_writes_its_window_whole_while_ingest_goes_on() {
    windows_hold_every_packet_in(Memory::Host);
}

#[test]
fn windows_kept_in_page_locked_memory_hold_every_packet() {
    if !gpudirect::driver_present() {
        eprintln!("SKIP: no CUDA driver found (keep_in: host_pinned)");
        return;
    }
    windows_hold_every_packet_in(Memory::Pinned);
}

#[test]
fn windows_of_a_gpu_queue_kept_in_gpu_memory_hold_every_packet() {
    if !gpudirect::driver_present() {
        eprintln!("SKIP: no CUDA driver found (a queue in GPU memory)");
        return;
    }
    windows_hold_every_packet_in(Memory::Gpu);
}

/// Where the RX queue's packets and the transient history live.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Memory {
    /// Both in host memory; the first trigger is a matching packet.
    Host,
    /// Packets in host memory, the history page-locked.
    Pinned,
    /// Both in GPU 0's memory; the first trigger is the queue's handle.
    Gpu,
}

fn windows_hold_every_packet_in(memory: Memory) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("window.pcap");
    let (region, keep_in, trigger_on) = match memory {
        Memory::Host => (
            "rx",
            "",
            r#", trigger_on: {offset: 0, bytes: "ff ee dd cc"}"#,
        ),
        Memory::Pinned => ("rx", ", keep_in: host_pinned", ""),
        Memory::Gpu => ("rx_gpu", "", ""),
    };
    let capture = format!(
        r#"timeout_us: 100
memory_regions: [{region}]
capture:
  path: "{}"
  transient: {{keep_mb: 128, keep_ms: 50, before_ms: {WINDOW_MS}, after_ms: {WINDOW_MS}{keep_in}{trigger_on}}}"#,
        path.display()
    );
    let cfg = common::LoopPair {
        bufs: (4096, 4096),
        buf_size: 256,
        top: r#"metrics: {listen: "127.0.0.1:0"}"#,
        regions: if memory == Memory::Gpu {
            "- {name: rx_gpu, kind: device, affinity: 0, num_bufs: 4096, buf_size: 256}"
        } else {
            ""
        },
        rx: "hardware_timestamps: true",
        rx_queue: &capture,
        ..Default::default()
    }
    .config();
    let plan = dataplane::plan::Plan::from_config(&cfg).unwrap();
    let shown = match memory {
        Memory::Host => {
            "transient buffer of 128 MiB in host memory: 5 ms before to 5 ms after each trigger (and matching packets)"
        }
        Memory::Pinned => {
            "transient buffer of 128 MiB in host_pinned memory: 5 ms before to 5 ms after each trigger to"
        }
        Memory::Gpu => {
            "transient buffer of 128 MiB in device memory: 5 ms before to 5 ms after each trigger to"
        }
    };
    assert!(plan.human().contains(shown), "{}", plan.human());
    let mut plane = dataplane::DataPlane::start(&cfg).expect("starts");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let trigger = rx
        .transient_trigger()
        .expect("a transient queue has a trigger");
    let sender = std::thread::spawn(move || {
        let frames: Vec<Vec<u8>> = (0..PACKETS).map(frame).collect();
        common::send_frames(&mut tx, &frames);
        tx
    });
    // Every packet's receive time, by sequence number; the triggers' times.
    let mut received: Vec<(u64, u64)> = Vec::with_capacity(PACKETS as usize);
    let mut fired: Vec<u64> = Vec::new();
    while (received.len() as u64) < PACKETS {
        let Some(b) = rx.poll().unwrap() else {
            std::thread::yield_now();
            continue;
        };
        for i in 0..b.len() {
            // The loopback delivers in order (checked here where the CPU can read it).
            let seq = received.len() as u64;
            if let Some(d) = b.data(i, 0) {
                assert_eq!(d, frame(seq), "delivered in order, whole");
            }
            let ts = b.packets()[i].timestamp_ns;
            assert!(ts > 0, "stamped at receive");
            if seq == MARKED && memory == Memory::Host {
                fired.push(ts);
            }
            received.push((seq, ts));
        }
        // Far apart in packets (about 100 ms here), so the windows do not overlap.
        match (received.len() as u64, fired.len()) {
            (n, 0) if memory != Memory::Host && n >= MARKED => {
                let at = received.last().unwrap().1;
                trigger.fire_at(at);
                fired.push(at);
            }
            (n, 1) if n >= 150_000 => {
                let at = received.last().unwrap().1;
                trigger.fire_at(at);
                fired.push(at);
            }
            (n, 2) if n >= 270_000 => {
                let reply = post_trigger(plane.metrics_address().expect("metrics endpoint"));
                assert!(
                    reply.starts_with("HTTP/1.1 200") && reply.contains("fired 1 transient buffer"),
                    "{reply}"
                );
                fired.push(0);
            }
            (n, 3) if n >= 390_000 => {
                assert_eq!(plane.trigger_transients(), 1);
                fired.push(0);
            }
            _ => {}
        }
    }
    let _tx = sender.join().unwrap();
    let stats = rx
        .finish_capture()
        .expect("a capture sink")
        .expect("closes cleanly");
    let t = stats.transient.expect("transient counters");
    assert_eq!(
        (t.triggers, t.triggers_merged, t.windows_written),
        (4, 0, 4),
        "{stats:?}"
    );
    assert_eq!((t.windows_failed, t.not_kept), (0, 0), "{t:?}");
    eprintln!("{memory:?}: {t:?}");
    let by_seq: BTreeMap<u64, u64> = received.iter().copied().collect();
    let window = WINDOW_MS * 1_000_000;
    let mut written = 0;
    for (n, &at) in fired.iter().enumerate() {
        let file = dir.path().join(format!("window_{}.pcap", n + 1));
        let frames = read_capture(&file).unwrap_or_else(|e| panic!("{e}"));
        written += frames.len() as u64;
        let seqs: Vec<u64> = frames.iter().map(|f| seq_of(&f.bytes)).collect();
        for f in &frames {
            let seq = seq_of(&f.bytes);
            assert_eq!(
                f.bytes,
                frame(seq),
                "{}: packet {seq} byte for byte",
                file.display()
            );
            assert_eq!(f.timestamp_ns, by_seq[&seq], "its receive time");
        }
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "{}: in order, none missing",
            file.display()
        );
        if at == 0 {
            // Fired by the plane at a time the test did not see: a contiguous run around
            // the moment it fired, as wide as the window at most.
            let span = frames.last().unwrap().timestamp_ns - frames[0].timestamp_ns;
            assert!(span <= 2 * window, "{span} ns");
            assert!(seqs[0] > 150_000 * (n as u64 - 1), "after the one before");
            continue;
        }
        let want: Vec<u64> = received
            .iter()
            .filter(|(_, ts)| *ts + window >= at && *ts <= at + window)
            .map(|(s, _)| *s)
            .collect();
        assert_eq!(
            (seqs.first(), seqs.last(), seqs.len()),
            (want.first(), want.last(), want.len()),
            "{}: exactly the packets received within {WINDOW_MS} ms of the trigger",
            file.display()
        );
    }
    assert_eq!(stats.written_packets, written);
    assert_eq!(
        stats.submitted, PACKETS,
        "every packet went through the buffer"
    );
    assert_eq!(plane.snapshot().drops().total(), 0, "ingest lost nothing");
    plane.shutdown().unwrap();
}

/// `POST /trigger` to the metrics endpoint at `addr`; the whole reply.
fn post_trigger(addr: std::net::SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connects");
    s.write_all(b"POST /trigger HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

#[test]
fn transient_blocks_are_checked() {
    let queue = |capture: &str, kind: &str| {
        common::loopback_config(&format!(
            r#"
memory_regions:
- {{name: rx, kind: {kind}, affinity: 0, num_bufs: 64, buf_size: 256}}
interfaces:
- name: loop0
  address: loopback
  rx:
    queues:
    - {{name: rq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [rx], capture: {capture}}}
"#
        ))
    };
    // (the capture block, what the error must say); `plan_error` loads and plans.
    #[rustfmt::skip]
    let cases: &[(&str, &[&str])] = &[
        ("{path: w.pcap, transient: {before_ms: 1}}", &["capture.transient", "after_ms"]),
        ("{path: w, format: raw_per_packet, transient: {before_ms: 1, after_ms: 1}}",
            &["not supported: format raw_per_packet with transient"]),
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, trigger_on: {offset: 0, bytes: xyz}}}",
            &["trigger_on.bytes", "not bytes in hex"]),
        // Not hex, and not ASCII: refused, never cut inside a character.
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, trigger_on: {offset: 0, bytes: a\u{e9}b}}}",
            &["not bytes in hex"]),
        ("{path: w.pcap, transient: {keep_ms: 5, before_ms: 10, after_ms: 1}}",
            &["keep_ms 5 is shorter than before_ms 10"]),
        // An unknown key is named.
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, window: 3}}", &["window"]),
    ];
    for (capture, wanted) in cases {
        let e = common::plan_error(&queue(capture, "host"));
        for w in *wanted {
            assert!(e.contains(w), "{capture}: {w:?} not in {e}");
        }
    }
    // Where the history lives follows where the packets are.
    #[rustfmt::skip]
    let by_memory: &[(&str, &str, &[&str])] = &[
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, keep_in: host}}", "device",
            &["keep_in", "this queue's packets are in device memory"]),
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, keep_in: host_pinned}}", "device",
            &["keep_in", "this queue's packets are in device memory"]),
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, trigger_on: {offset: 0, bytes: ff}}}", "device",
            &["trigger_on reads packets with the CPU"]),
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, keep_in: device}}", "host",
            &["keep_in: device keeps", "this queue's are in host memory"]),
        ("{path: w.pcap, transient: {before_ms: 1, after_ms: 1, keep_in: huge}}", "host",
            &["keep_in", "host_pinned"]),
    ];
    for (capture, kind, wanted) in by_memory {
        let e = common::plan_error(&queue(capture, kind));
        for w in *wanted {
            assert!(e.contains(w), "{capture} ({kind}): {w:?} not in {e}");
        }
    }
    // A queue in device memory keeps its history there unless told otherwise.
    let text = queue(
        "{path: w.pcap, transient: {before_ms: 1, after_ms: 1}}",
        "device",
    );
    let cfg = dataplane::config::load_str(&text, "t.yaml").unwrap().config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plans");
    assert!(
        plan.human()
            .contains("transient buffer of 256 MiB in device memory: 1 ms before to 1 ms after each trigger to w.pcap_N (pcap, through cuFile)"),
        "{}",
        plan.human()
    );
}
