//! A live change on a real `net_ring` vdev whose rules run in software (net_ring has no
//! rte_flow): an RX queue is added under traffic, with the rule that moves one flow to it,
//! and removed again. The queue the change keeps loses nothing and keeps its order; the
//! moved flow arrives whole, in order, across the two queues; no drop counter moves. A
//! TX queue (a device queue) is refused. Its own binary: EAL starts once per process.
#![cfg(feature = "dpdk")]

#[macro_use]
mod common;

use common::traffic::{flowing, receive_on};
use dataplane::{ChangeError, DataPlane, config};

/// net_ring0 with TX queue t0 and RX queue q0 (port 5000 to q0; 5001 to q0 unless
/// `q1` adds RX queue q1 and moves port 5001 there); `t1` adds a TX queue.
fn ring_config(q1: bool, t1: bool) -> config::Config {
    let (q1_line, target) = if q1 {
        (
            "        - {name: q1, id: 1, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [rx1]}\n",
            1,
        )
    } else {
        ("", 0)
    };
    let t1_line = if t1 {
        "        - {name: t1, id: 1, cpu_core: 1, batch_size: 32, memory_regions: [tx]}\n"
    } else {
        ""
    };
    let text = config_yaml!(
        raw,
        0,
        r#"    memory_regions:
    - {name: tx, kind: host, affinity: 0, num_bufs: 4096, buf_size: 256}
    - {name: rx, kind: host, affinity: 0, num_bufs: 8192, buf_size: 256}
    # q1's: not lent to the device (zero_copy: false), so adding q1 leaves it as it is
    - {name: rx1, kind: host, affinity: 0, num_bufs: 1024, buf_size: 256, zero_copy: false}
    interfaces:
    - name: ring0
      address: net_ring0
      tx:
        queues:
        - {name: t0, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [tx]}
T1      rx:
        flow_isolation: true
        queues:
        - {name: q0, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [rx]}
Q1        flows:
        - {name: f0, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
        - {name: f1, id: 2, action: {type: queue, id: TARGET}, match: {udp_dst: 5001}}
"#
    )
    .replace("T1", t1_line)
    .replace("Q1", q1_line)
    .replace("TARGET", &target.to_string());
    config::load_with(&text, "ring-change.yaml", &|c| c < 2)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config
}

#[test]
fn an_rx_queue_added_and_removed_on_a_software_steered_port_under_traffic() {
    let mut plane = DataPlane::start(&ring_config(false, false)).expect("starts");
    assert_eq!(plane.steering(), "software", "net_ring has no rte_flow");
    let (traffic, q0, done) = flowing(&mut plane, "ring0", &[5000, 5001], 30_000);

    // A TX queue is a device queue: refused, and nothing changes.
    match plane.change(&ring_config(true, true)) {
        Err(ChangeError::NotLive(why)) => assert!(
            why.iter().any(|n| n.key == "interfaces `ring0` tx queue 1"
                && n.reason.contains("fixed while the port runs")),
            "{why:?}"
        ),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let report = plane
        .change(&ring_config(true, false))
        .expect("an RX queue added live");
    eprintln!("{}", report.change.human());
    assert_eq!(report.added.queues, 1, "{report:?}");
    assert!(
        report
            .change
            .human()
            .contains("no device queue of its own until a restart"),
        "{}",
        report.change.human()
    );
    let q1 = receive_on(&mut plane, "ring0", 1, &done);
    traffic.wait_for(traffic.sent() + 60_000);

    // And removed again: port 5001 back to q0 first, in the same change.
    let report = plane
        .change(&ring_config(false, false))
        .expect("the queue added live is removed live");
    assert_eq!(report.removed.len(), 1, "{report:?}");
    traffic.wait_for(traffic.sent() + 30_000);
    let (next, counters) = traffic.finish_on(&plane, &done);
    let on_q0 = q0.join().unwrap();
    let on_q1 = q1.join().unwrap();
    plane.shutdown().unwrap();

    assert_eq!(
        on_q0[&5000],
        (0..next[0]).collect::<Vec<_>>(),
        "the kept flow: every frame, in order, through both changes"
    );
    // Port 5001: q0 until the rule moved it, q1 until the rule moved it back, then q0.
    let moved = &on_q1[&5001];
    assert!(!moved.is_empty(), "q1 received the moved flow");
    assert!(moved.windows(2).all(|w| w[1] == w[0] + 1), "in order on q1");
    let before: Vec<u64> = on_q0[&5001]
        .iter()
        .copied()
        .filter(|&s| s < moved[0])
        .collect();
    let after: Vec<u64> = on_q0[&5001]
        .iter()
        .copied()
        .filter(|&s| s > moved[0])
        .collect();
    let mut all: Vec<u64> = before.iter().chain(moved).chain(&after).copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..next[1]).collect::<Vec<_>>(),
        "the moved flow: every frame, once, across q0 and q1"
    );
    assert_eq!(
        counters.drops().total(),
        0,
        "nothing lost: {:?}",
        counters.drops()
    );
}
