//! The DPDK engine between two processes over net_memif: the RX process receives exactly
//! what the TX process sent, every packet checked, with the RX region lent to the RX
//! queue's mbuf pool (`zero_copy: auto`, the default) and copied into (`zero_copy: false`),
//! with the benches on threads of their own and run to completion (`--inline`).
#![cfg(feature = "dpdk")]

#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Frames of the shipped configs, or 9000-byte ones (`jumbo`).
#[derive(Clone, Copy, PartialEq)]
enum Frames {
    Shipped,
    Jumbo,
}

fn config(
    side: &str,
    socket: &str,
    dir: &std::path::Path,
    zero_copy: bool,
    frames: Frames,
) -> PathBuf {
    let src = common::config_path(&format!("dpdk_memif_{side}.yaml"));
    let mut text = std::fs::read_to_string(src)
        .unwrap()
        .replace("/tmp/dataplane-memif.sock", socket);
    if frames == Frames::Jumbo {
        let jumbo = text
            .replace("buf_size: 2048", "buf_size: 9000")
            .replace("buf_size: 1088", "buf_size: 9000")
            .replace("payload_size: 64", "payload_size: 8936");
        assert_ne!(jumbo, text, "the config names its buffer size");
        text = jumbo;
    }
    if side == "rx" && !zero_copy {
        assert!(
            text.contains("zero_copy: auto"),
            "the RX config names the key"
        );
        text = text.replace("zero_copy: auto", "zero_copy: false");
    }
    let p = dir.join(format!("{side}.yaml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn memif_tx_process_to_rx_process_counts_equal() {
    run_pair(true, false, Frames::Shipped);
    run_pair(false, false, Frames::Shipped);
    // Both processes run to completion: generator and checker in the workers' handlers.
    run_pair(true, true, Frames::Shipped);
}

/// 9000-byte frames (memif carries them over five of its 2048-byte ring buffers), every
/// one received into the lent region whole and verified.
#[test]
fn memif_carries_9000_byte_frames_between_processes() {
    run_pair(true, false, Frames::Jumbo);
}

/// One pair at a time: two pairs busy-polling on a 2-core machine starve each other, and
/// the RX process's fixed run must outlast the TX process's start and run.
static ONE_PAIR_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_pair(zero_copy: bool, inline: bool, frames: Frames) {
    let _one = ONE_PAIR_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mode: &[&str] = if inline { &["--inline"] } else { &[] };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("memif.sock");
    let socket = socket.to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let rx = Command::new(bin)
        .args(["bench", "raw"])
        .arg(config("rx", socket, dir.path(), zero_copy, frames))
        .args(["--seconds", "8", "--json"])
        .args(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let tx = Command::new(bin)
        .args(["bench", "raw"])
        .arg(config("tx", socket, dir.path(), true, frames))
        .args(["--seconds", "2", "--json"])
        .args(mode)
        .output()
        .unwrap();
    let rx = rx.wait_with_output().unwrap();
    for (side, out) in [("TX", &tx), ("RX", &rx)] {
        assert!(
            out.status.success(),
            "{side} ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let (t, r) = (common::last_json(&tx.stdout), common::last_json(&rx.stdout));
    let sent = t["tx_packets"].as_u64().unwrap();
    assert!(sent > 1000, "{t}");
    let frame_bytes = if frames == Frames::Jumbo { 9000 } else { 128 };
    assert_eq!(t["setup"]["frame_bytes"], frame_bytes, "{t}");
    assert_eq!(r["rx_packets"].as_u64().unwrap(), sent, "RX {r}\nTX {t}");
    assert_eq!(r["checker"]["valid"].as_u64().unwrap(), sent);
    assert_eq!(r["lossless"], true, "{r}");
    // The TX region's buffers go to memif attached to mbufs: TX copies nothing itself.
    assert_eq!(t["queues"][0]["direction"], "tx", "{t}");
    assert_eq!(t["queues"][0]["copied_packets"], 0, "{t}");
    // With zero copy, memif's RX copies from the shared ring into mbufs of the queue's
    // pool, which is the region itself: the application gets those buffers, no second copy.
    let lent = if zero_copy { vec!["buffers"] } else { vec![] };
    assert_eq!(r["zero_copy_regions"], serde_json::json!(lent), "{r}");
    assert!(
        !std::path::Path::new(socket).exists(),
        "the socket is removed"
    );
}
