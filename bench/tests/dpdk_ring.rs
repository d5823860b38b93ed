//! The DPDK engine on a real `net_ring` vdev (no NIC, no hugepages): the bench config is
//! lossless. EAL can start once per process, so each DPDK test has its own binary.
#![cfg(feature = "dpdk")]

mod common;

/// The shipped config, with ring depths other than the default (`rx.descriptors: 512`,
/// `tx.descriptors: 2048`) that the driver takes.
#[test]
fn net_ring_bench_is_lossless() {
    let mut cfg = dataplane::config::load_file(&common::config_path("dpdk_ring.yaml"))
        .expect("config")
        .config;
    cfg.master_core = 0;
    cfg.interfaces[0].rx.as_mut().unwrap().descriptors = Some(512);
    cfg.interfaces[0].tx.as_mut().unwrap().descriptors = Some(2048);
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plans");
    let port = &plan.dpdk().expect("DPDK").ports[0];
    assert_eq!((port.rx_descriptors, port.tx_descriptors), (512, 2048));
    let report = common::run_bench(&cfg, 1.0);
    assert_eq!(report.engine, "dpdk");
    assert!(
        report.zero_copy_regions.is_empty(),
        "net_ring hands over the sender's mbufs, so its region is copied into, not lent"
    );
    assert!(report.lossless, "{:?}", report.problems);
    assert!(report.rx_packets > 10_000, "{}", report.rx_packets);
}
