//! Header-data split (an RX queue with two memory regions) on a device without DPDK's
//! buffer split offload fails at start with a message that names the device and says what
//! to change; no vdev offers the offload, so the working path needs a NIC. Its own test
//! binary: EAL starts once per process.
#![cfg(feature = "dpdk")]

#[macro_use]
mod common;

use dataplane::{DataPlane, config};

#[test]
fn header_data_split_on_a_device_without_buffer_split_is_refused_by_name() {
    let text = config_yaml!(
        raw,
        0,
        r#"    memory_regions:
    - {name: headers, kind: host, affinity: 0, num_bufs: 4096, buf_size: 64}
    - {name: payload, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    interfaces:
    - name: ring
      address: "net_ring0"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [headers, payload]}
"#
    );
    let cfg = config::load_str(text, "split")
        .expect("valid config")
        .config;
    let err = DataPlane::start(&cfg)
        .err()
        .expect("start fails")
        .to_string();
    assert!(
        err.contains("header-data split (two memory regions) is not supported by this device"),
        "{err}"
    );
    assert!(err.contains("net_ring"), "names the driver: {err}");
    assert!(err.contains("RX queue 0"), "{err}");
}
