//! A vdev DPDK does not know gives an error that names it, and nothing is left behind.
#![cfg(feature = "dpdk")]

#[macro_use]
mod common;

use dataplane::{DataPlane, config};

#[test]
fn unknown_vdev_is_a_clear_error() {
    let text = config_yaml!(
        raw,
        0,
        r#"    memory_regions:
    - {name: b, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    interfaces:
    - name: bogus
      address: "net_nosuchdriver0"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [b]}
"#
    );
    let cfg = config::load_str(text, "bad").expect("valid config").config;
    let err = DataPlane::start(&cfg)
        .err()
        .expect("start fails")
        .to_string();
    assert!(err.contains("net_nosuchdriver0"), "{err}");
    assert!(err.contains("EAL"), "{err}");
}
