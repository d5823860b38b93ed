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

fn config(side: &str, socket: &str, dir: &std::path::Path, zero_copy: bool) -> PathBuf {
    let src = common::config_path(&format!("dpdk_memif_{side}.yaml"));
    let mut text = std::fs::read_to_string(src)
        .unwrap()
        .replace("/tmp/dataplane-memif.sock", socket);
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
    run_pair(true, false);
    run_pair(false, false);
    // Both processes run to completion: generator and checker in the workers' handlers.
    run_pair(true, true);
}

fn run_pair(zero_copy: bool, inline: bool) {
    let mode: &[&str] = if inline { &["--inline"] } else { &[] };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("memif.sock");
    let socket = socket.to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let rx = Command::new(bin)
        .args(["bench", "raw"])
        .arg(config("rx", socket, dir.path(), zero_copy))
        .args(["--seconds", "6", "--json"])
        .args(mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let tx = Command::new(bin)
        .args(["bench", "raw"])
        .arg(config("tx", socket, dir.path(), true))
        .args(["--seconds", "2", "--json"])
        .args(mode)
        .output()
        .unwrap();
    let rx = rx.wait_with_output().unwrap();
    assert!(
        tx.status.success(),
        "TX: {}",
        String::from_utf8_lossy(&tx.stderr)
    );
    assert!(
        rx.status.success(),
        "RX: {}",
        String::from_utf8_lossy(&rx.stderr)
    );
    let (t, r) = (common::last_json(&tx.stdout), common::last_json(&rx.stdout));
    let sent = t["tx_packets"].as_u64().unwrap();
    assert!(sent > 1000, "{t}");
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
