//! Flow rules on a DPDK port whose PMD has no rte_flow (`net_ring`): the engine falls back
//! to software steering in the RX workers. The 4-queue config is lossless, every packet
//! reaches the queue its rule names with the rule's flow id, and a dynamic flow works.
//! EAL can start once per process, so this is its own test binary.
#![cfg(feature = "dpdk")]

mod common;

#[test]
fn net_ring_with_flow_rules_steers_in_software_losslessly() {
    let report = common::bench_shipped_config("dpdk_ring_4q.yaml");
    assert_eq!(report.engine, "dpdk");
    assert_eq!(
        report.steering, "software",
        "net_ring has no rte_flow: the rules run in software"
    );
    assert!(report.lossless, "{:?}", report.problems);
    common::assert_four_queue_split(&report);
}
