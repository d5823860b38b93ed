//! The DPDK engine on a real `net_ring` vdev (no NIC, no hugepages): the bench config is
//! lossless. EAL can start once per process, so each DPDK test has its own binary.
#![cfg(feature = "dpdk")]

mod common;

#[test]
fn net_ring_bench_is_lossless() {
    let report = common::bench_shipped_config("dpdk_ring.yaml");
    assert_eq!(report.engine, "dpdk");
    assert!(
        report.zero_copy_regions.is_empty(),
        "net_ring hands over the sender's mbufs, so its region is copied into, not lent"
    );
    assert!(report.lossless, "{:?}", report.problems);
    assert!(report.rx_packets > 10_000, "{}", report.rx_packets);
}
