//! The DPDK engine on a real `net_ring` vdev (no NIC, no hugepages): the bench config is
//! lossless. EAL can start once per process, so each DPDK test has its own binary.
#![cfg(feature = "dpdk")]

mod common;

use dataplane::bench::raw::{self, RawOptions};
use dataplane::config;
use std::sync::atomic::AtomicBool;

#[test]
fn net_ring_bench_is_lossless() {
    let path = common::config_path("dpdk_ring.yaml");
    let cfg = config::load_file(&path).expect("config").config;
    let report = raw::run(
        &cfg,
        &RawOptions {
            seconds: 1.0,
            verify_payload: true,
            progress: false,
        },
        &AtomicBool::new(false),
    )
    .expect("bench runs");
    assert_eq!(report.engine, "dpdk");
    assert!(
        report.zero_copy_regions.is_empty(),
        "virtual devices copy unless a region asks for zero copy"
    );
    assert!(report.lossless, "{:?}", report.problems);
    assert!(report.rx_packets > 10_000, "{}", report.rx_packets);
}
