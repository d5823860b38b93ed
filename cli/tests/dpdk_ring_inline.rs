//! Run to completion on the DPDK engine (`net_ring`, one process): `bench raw --inline`
//! generates and checks in the worker's handler, losslessly, and `bench fwd --inline`
//! keeps `--tx-first` frames circling through the handler's relay. Processes of their own:
//! EAL starts once per process.
#![cfg(feature = "dpdk")]

#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::process::Command;

fn run(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .arg(common::config_path("dpdk_ring.yaml"))
        .args(["--seconds", "1", "--json", "--inline"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::last_json(&out.stdout)
}

#[test]
fn net_ring_runs_to_completion_in_the_workers_handler() {
    let r = run(&["bench", "raw"]);
    assert_eq!(r["engine"], "dpdk", "{r}");
    assert_eq!(r["lossless"], true, "{r}");
    let sent = r["tx_packets"].as_u64().unwrap();
    assert!(sent > 10_000, "{r}");
    assert_eq!(
        r["checker"]["valid"].as_u64().unwrap(),
        sent,
        "every frame checked: {r}"
    );

    let f = run(&["bench", "fwd", "--tx-first", "8"]);
    assert_eq!(f["problems"], serde_json::json!([]), "{f}");
    let (seeded, forwarded) = (
        f["seeded_packets"].as_u64().unwrap(),
        f["forwarded_packets"].as_u64().unwrap(),
    );
    assert_eq!(seeded, 8 * 64, "{f}");
    assert!(forwarded > 100 * seeded, "the seeded frames circled: {f}");
}
