//! Capture sinks on the software loopback: what an RX queue delivers is written by the
//! writer thread, and read back by independent readers (tcpdump for pcap and pcapng, the
//! file system for raw) and compared with what was sent, receive timestamps included. A
//! writer behind its disk drops and counts (`writer_full`) instead of stalling.

#[path = "../../bench/tests/common/mod.rs"]
mod common;

use dataplane::capture::{CaptureConfig, CaptureFormat, CaptureSink};
use dataplane::config;
use dataplane::plane::DataPlane;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A loopback with receive timestamps and, for RX queue 0, `capture` into `path`.
fn yaml(capture: Option<(&Path, &str)>) -> String {
    let capture = capture
        .map(|(p, f)| format!(", capture: {{path: \"{}\", format: {f}}}", p.display()))
        .unwrap_or_default();
    format!(
        r#"
version: 1
stream_type: raw
master_core: 0
loopback: sw
memory_regions:
- {{name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}}
interfaces:
- name: lo
  address: loopback
  rx:
    hardware_timestamps: true
    queues:
    - {{name: rx0, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 100, memory_regions: [bufs]{capture}}}
  tx:
    queues:
    - {{name: tx0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}}
"#
    )
}

/// Frame `k`: Ethernet/IPv4/UDP (so tcpdump decodes it plainly) with 18 to 1458 payload
/// bytes derived from `k`.
fn frame(k: u32) -> Vec<u8> {
    let len = 18 + (k as usize * 37) % 1441;
    let payload: Vec<u8> = (0..len).map(|j| (k as usize * 13 + j) as u8).collect();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(4096, 5000)
        .write(&mut out, &payload)
        .unwrap();
    out
}

/// Sends `n` frames through the loopback and returns what the RX queue delivered:
/// (bytes, timestamp) per packet, and the sink's counters.
fn run(
    capture: Option<(&Path, &str)>,
    n: u32,
) -> (Vec<(Vec<u8>, u64)>, dataplane::capture::CaptureStats) {
    let c = config::load_str(&yaml(capture), "capture.yaml")
        .expect("valid")
        .config;
    let mut plane = DataPlane::start(&c).expect("starts");
    let mut tx = plane.take_tx_queue("lo", 0).unwrap();
    let mut rx = plane.take_rx_queue("lo", 0).unwrap();
    let mut got = Vec::new();
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while (got.len() as u32) < n && Instant::now() < deadline {
        if sent < n
            && let Ok(mut b) = tx.alloc(((n - sent) as usize).min(16))
        {
            for i in 0..b.len() {
                let f = frame(sent + i as u32);
                b.buffer_mut(i, 0).unwrap()[..f.len()].copy_from_slice(&f);
                b.set_len(i, 0, f.len());
            }
            let k = b.len() as u32;
            if tx.send(b).is_ok() {
                sent += k;
            }
        }
        if let Some(b) = rx.poll().unwrap() {
            for i in 0..b.len() {
                got.push((b.data(i, 0).unwrap().to_vec(), b.packets()[i].timestamp_ns));
            }
        }
    }
    let stats = rx
        .finish_capture()
        .map(|r| r.expect("capture finishes"))
        .unwrap_or_default();
    plane.shutdown().unwrap();
    (got, stats)
}

fn check_delivered(got: &[(Vec<u8>, u64)], n: u32) {
    assert_eq!(got.len(), n as usize);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for (k, (bytes, ts)) in got.iter().enumerate() {
        assert_eq!(bytes, &frame(k as u32), "frame {k}");
        assert!(
            *ts > now - 60_000_000_000 && *ts <= now,
            "frame {k}: receive timestamp {ts} is not a recent wall-clock time"
        );
    }
    assert!(
        got.windows(2).all(|w| w[0].1 <= w[1].1),
        "receive times do not go back"
    );
}

#[test]
fn pcap_and_pcapng_captures_read_back_with_tcpdump() {
    let dir = tempfile::tempdir().unwrap();
    for format in ["pcap", "pcapng"] {
        let path = dir.path().join(format!("rx.{format}"));
        let n = 3000;
        let (got, stats) = run(Some((&path, format)), n);
        check_delivered(&got, n);
        assert_eq!(stats.submitted, u64::from(n));
        assert_eq!(stats.written_packets, u64::from(n), "{format}: {stats:?}");
        assert_eq!(stats.writer_full, 0);
        let Some(read) = common::tcpdump(&path) else {
            return;
        };
        assert_eq!(read.len(), n as usize, "{format}: packets in the file");
        for (k, ((bytes, ts), (file_ts, file_bytes))) in got.iter().zip(&read).enumerate() {
            assert_eq!(file_bytes, bytes, "{format}: frame {k} bytes");
            assert_eq!(
                file_ts, ts,
                "{format}: frame {k} keeps its receive time (ns)"
            );
        }
        println!("{format}: {n} frames written and read back by tcpdump");
    }
}

#[test]
fn raw_captures_hold_every_byte() {
    let dir = tempfile::tempdir().unwrap();
    let n = 500;
    let appended = dir.path().join("rx.raw");
    let (got, stats) = run(Some((&appended, "raw")), n);
    check_delivered(&got, n);
    assert_eq!(stats.written_packets, u64::from(n));
    let all: Vec<u8> = got.iter().flat_map(|(b, _)| b.clone()).collect();
    assert_eq!(std::fs::read(&appended).unwrap(), all);

    let per = dir.path().join("packets");
    let (got, _) = run(Some((&per, "raw_per_packet")), n);
    let mut files: Vec<_> = std::fs::read_dir(&per)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), n as usize);
    for (k, f) in files.iter().enumerate() {
        assert_eq!(std::fs::read(f).unwrap(), got[k].0, "file {}", f.display());
    }
}

#[test]
fn a_writer_behind_its_disk_drops_and_counts_instead_of_stalling() {
    // A FIFO whose reader is slow stands in for a slow disk.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("slow.pcap");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader_path = fifo.clone();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut f = std::fs::File::open(&reader_path).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        // Slow at first, then drains whatever is left.
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(20));
            total += f.read(&mut buf).unwrap();
        }
        loop {
            match f.read(&mut buf).unwrap() {
                0 => return total,
                k => total += k,
            }
        }
    });
    let mut cfg = CaptureConfig::new(&fifo, CaptureFormat::Pcap);
    cfg.queue_bytes = 4 << 20;
    let mut sink = CaptureSink::create(&cfg).expect("sink");
    let b = full_burst();
    // 64 MiB handed over at once, far more than a 4 MiB queue and a slow reader take.
    let started = Instant::now();
    for _ in 0..700 {
        sink.submit(&b);
    }
    let submit_time = started.elapsed();
    let stats = sink.finish().expect("finishes");
    let read = reader.join().unwrap();
    println!("{stats:?}; submitting took {submit_time:?}; the reader got {read} bytes");
    assert_eq!(stats.submitted, 700 * 64);
    assert!(stats.writer_full > 0, "the writer fell behind: {stats:?}");
    assert_eq!(stats.written_packets + stats.writer_full, stats.submitted);
    assert_eq!(
        read as u64,
        24 + stats.written_packets * (16 + 1500),
        "the file holds exactly the written packets"
    );
}

/// `dataplane capture` on a mapped reference example with `--tx`: the JSON report of the
/// run and of its sink.
fn capture_cli(example: &str, out: &Path, format: &str) -> Option<serde_json::Value> {
    let text = common::mapped_reference_example(example, 1, true)?;
    let dir = out.parent().unwrap();
    let cfg = dir.join(example);
    std::fs::write(&cfg, text).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .arg("capture")
        .arg(&cfg)
        .arg(out)
        .args(["--format", format, "--tx", "--target-gbps", "0.5"])
        .args(["--seconds", "0.4", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    Some(common::last_json(&run.stdout))
}

/// The reference's pcap-writer and GDS-writer examples (software loopback versions, GPU
/// regions mapped to host memory here; `tests/gpu.rs` runs the GDS one from GPU memory)
/// run as `dataplane capture FILE OUT --tx`: every packet the sink wrote reads back as a
/// valid generator frame, and what was not written is counted as `writer_full`.
#[test]
fn the_reference_writer_examples_capture_verified_frames() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("writer.pcap");
    let Some(r) = capture_cli("daqiri_example_pcap_writer_sw_loopback.yaml", &out, "pcap") else {
        return;
    };
    let stats = &r["captures"][0]["stats"];
    let written = stats["written_packets"].as_u64().unwrap();
    assert!(written > 0, "{r}");
    assert_eq!(
        written + stats["writer_full"].as_u64().unwrap(),
        stats["submitted"].as_u64().unwrap(),
        "{r}"
    );
    assert_eq!(r["verdict"], "lossless", "{r}");
    if let Some(read) = common::tcpdump(&out) {
        assert_eq!(read.len() as u64, written);
        let valid = common::check_captured_frames(read.iter().map(|(_, b)| b.as_slice()));
        assert_eq!(valid, written);
        assert!(read.windows(2).all(|w| w[0].0 <= w[1].0), "times in order");
    }

    // The GDS example's frames: 60 header bytes + 256 payload bytes, appended raw.
    let out = dir.path().join("gds.raw");
    let Some(r) = capture_cli("daqiri_example_gds_write_sw_loopback.yaml", &out, "raw") else {
        return;
    };
    let stats = &r["captures"][0]["stats"];
    let written = stats["written_packets"].as_u64().unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(bytes.len() as u64, stats["written_bytes"].as_u64().unwrap());
    assert_eq!(bytes.len() % 316, 0);
    assert_eq!(common::check_captured_frames(bytes.chunks(316)), written);
    assert!(written > 0, "{r}");
}

#[test]
fn captures_never_overwrite_or_follow_links() {
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("precious");
    std::fs::write(&precious, b"keep").unwrap();
    let link = dir.path().join("out.pcap");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    for path in [&precious, &link] {
        for format in [
            CaptureFormat::Pcap,
            CaptureFormat::Raw,
            CaptureFormat::RawPerPacket,
        ] {
            let e = CaptureSink::create(&CaptureConfig::new(path, format))
                .err()
                .unwrap_or_else(|| panic!("{} opened as {format:?}", path.display()));
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
    }
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep");
    // Several queues' files get the interface's name made safe: no `/` or `..` escapes.
    let yaml = "dataplane:\n  cfg:\n    version: 1\n    stream_type: raw\n    master_core: 0\n    loopback: \"sw\"\n    memory_regions:\n    - {name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}\n    interfaces:\n    - name: \"../../x\"\n      address: loopback\n      rx: {queues: [{name: a, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}, {name: b, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]}\nbench_rx:\n- {interface_name: \"../../x\", queue_id: -1, cpu_core: -1}\n";
    let config = match dataplane::config::load_str(yaml, "names") {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    };
    let out = dir.path().join("cap.pcap");
    let c = dataplane::capture::capture_bench_rx(&config, &out, CaptureFormat::Pcap, false);
    for q in c.interfaces[0].rx.iter().flat_map(|r| &r.queues) {
        let path = std::path::PathBuf::from(&q.capture.as_ref().unwrap().path);
        assert_eq!(path.parent(), Some(dir.path()), "{}", path.display());
    }
}

/// A disk that fills up mid-capture: a 1 MiB tmpfs (root only; skipped otherwise). The
/// failure comes back as an I/O error with the packets lost, never as a full queue.
#[test]
fn a_full_disk_is_an_io_error_with_the_packets_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mounted = rustix::process::geteuid().is_root()
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("SKIP: a full disk needs root to mount a small tmpfs");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let mut cfg = CaptureConfig::new(dir.path().join("full.pcap"), CaptureFormat::Pcap);
    // Room for everything: nothing may be dropped as writer_full.
    cfg.queue_bytes = 64 << 20;
    let mut sink = CaptureSink::create(&cfg).expect("sink");
    let b = full_burst();
    for _ in 0..100 {
        sink.submit(&b);
    }
    let before = sink.stats();
    assert_eq!(before.writer_full, 0, "{before:?}");
    match sink.finish() {
        Err(dataplane::capture::CaptureError::WriteFailed { source, lost, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{source}");
            // 1 MiB holds fewer than 700 packets of 1,516 bytes.
            assert!(lost >= 6400 - 700, "{lost}");
        }
        other => panic!("a full disk gave {other:?}"),
    }
}

/// A burst of 64 packets of 1,500 bytes from a region of its own.
fn full_burst() -> dataplane::Burst {
    let regions = std::sync::Arc::new(
        dataplane::memory::RegionSet::allocate(&[config::MemoryRegionConfig::new(
            "bufs",
            config::MemoryKind::Host,
            64,
            1500,
        )])
        .unwrap(),
    );
    let mut b = dataplane::Burst::allocate(
        regions,
        dataplane::memory::PortIndex(0),
        dataplane::memory::QueueId(0),
        &[dataplane::memory::RegionId(0)],
        64,
    )
    .unwrap();
    for i in 0..b.len() {
        b.set_len(i, 0, 1500);
    }
    b
}
