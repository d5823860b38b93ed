//! The reference's dynamic RX flow example runs as `bench dynamic-flows`: its file, with
//! only the hardware names mapped (NIC port to the software loopback, cores, GPU memory to
//! host memory since software steering reads headers on the CPU). Each phase's rule
//! delivers to exactly its queues, RSS spreads within the tolerance, isolation drops what
//! no rule matches, and every packet is accounted for.

mod common;

use dataplane::config;
use dataplane_bench::dynamic::{self, DynamicError, DynamicOptions};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn short() -> DynamicOptions {
    DynamicOptions {
        drop: Duration::from_millis(300),
        active: Duration::from_millis(400),
        drain: Duration::from_millis(100),
        ..Default::default()
    }
}

#[test]
fn the_reference_dynamic_flow_example_passes_every_phase() {
    let Some(text) =
        common::mapped_reference_example("daqiri_example_dynamic_rx_flow.yaml", 1, true)
    else {
        return;
    };
    let c = config::load_str(&text, "daqiri_example_dynamic_rx_flow.yaml")
        .expect("the mapped example loads")
        .config;
    let r = dynamic::run(&c, &short(), &AtomicBool::new(false)).expect("runs");
    println!("{}", r.human());
    assert!(r.ok, "{:?}", r.problems);
    let names: Vec<_> = r.phases.iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        ["isolated", "first_queue", "second_queue", "rss", "drain"]
    );
    let got = |phase: usize, q: u16| r.phases[phase].received[&q];
    assert!(got(1, 0) > 0 && got(1, 1) == 0, "flow 1 only on queue 0");
    assert!(got(2, 1) > 0 && got(2, 0) == 0, "flow 2 only on queue 1");
    assert!(got(3, 0) > 0 && got(3, 1) > 0, "flow 3 on both");
    assert!(r.phases[0].no_flow > 0, "isolation dropped the first phase");
    assert!(r.unexpected_flow_ids.is_empty());
    assert_eq!(r.unattributed, 0);
    assert_eq!(
        r.tx_packets,
        r.rx_packets + r.drops.total(),
        "every packet received or counted"
    );
    assert!(r.relative_delta <= r.tolerance);
}

#[test]
fn the_phases_need_an_isolated_interface_with_two_queues() {
    let Some(text) =
        common::mapped_reference_example("daqiri_example_dynamic_rx_flow.yaml", 1, true)
    else {
        return;
    };
    let open = text.replace("flow_isolation: true", "flow_isolation: false");
    let c = config::load_str(&open, "open.yaml").unwrap().config;
    match dynamic::run(&c, &short(), &AtomicBool::new(false)) {
        Err(DynamicError::Config(why)) => assert!(why.contains("flow_isolation"), "{why}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn two_loopback_interfaces_of_one_address_cannot_both_receive() {
    let Some(text) =
        common::mapped_reference_example("daqiri_example_dynamic_rx_flow.yaml", 1, true)
    else {
        return;
    };
    // Give tx_port an RX queue of its own: one port, two interfaces receiving.
    let text = text.replace(
        "      tx:\n",
        "      rx:\n        queues:\n        - {name: extra, id: 0, cpu_core: 1, batch_size: 64, memory_regions: [Data_RX_GPU_0]}\n      tx:\n",
    );
    let c = config::load_str(&text, "both.yaml").expect("loads").config;
    let err = dataplane::DataPlane::start(&c)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("same address") && err.contains("only one of them may have RX queues"),
        "{err}"
    );
}
