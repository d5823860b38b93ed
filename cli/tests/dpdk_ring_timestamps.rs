//! `hardware_timestamps` and `accurate_send` on a DPDK port whose driver offers neither
//! (`net_ring`): the start log says the RX worker stamps packets and the TX worker holds
//! them in software, and the packets still carry receive times (the bench's latency
//! comes from them). Runs the CLI: EAL starts once per process.
#![cfg(feature = "dpdk")]

#[path = "../../bench/tests/common/mod.rs"]
mod common;

#[test]
fn without_device_timestamps_net_ring_stamps_and_schedules_in_software() {
    let text = std::fs::read_to_string(common::config_path("dpdk_ring.yaml"))
        .unwrap()
        .replace(
            "      rx:\n",
            "      rx:\n        hardware_timestamps: true\n",
        )
        .replace("      tx:\n", "      tx:\n        accurate_send: true\n");
    assert!(text.contains("hardware_timestamps") && text.contains("accurate_send"));
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ring_ts.yaml");
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["bench", "raw"])
        .arg(&cfg)
        .args(["--seconds", "1", "--json", "--quiet"])
        .env("DATAPLANE_LOG", "info")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("timestamps packets in software as its worker receives them"),
        "{log}"
    );
    assert!(log.contains("in software by its worker"), "{log}");
    let r = common::last_json(&out.stdout);
    assert_eq!(r["engine"], "dpdk");
    assert_eq!(r["lossless"], true, "{r}");
    assert_eq!(r["latency_clock"], "rx_timestamp", "{r}");
    assert!(r["latency"]["frames"].as_u64().unwrap() > 0, "{r}");
}
