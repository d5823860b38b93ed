//! `config::ConfigBuilder` against the loader: the same configuration, built in code,
//! gives the same start-up plan.

#[macro_use]
mod common;

use dataplane::config::*;

const YAML: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]
      rx:
        flow_isolation: true
        queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 100, memory_regions: [bufs]}]
        flows: [{name: f, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 5000}}]
"#
);

#[test]
fn builds_what_the_loader_reads() {
    let read = load_with(YAML, "t", &|_| true).unwrap().config;
    let built = ConfigBuilder::loopback()
        .region(MemoryRegionConfig::new(
            "bufs",
            MemoryKind::Host,
            1024,
            2048,
        ))
        .interface(
            InterfaceBuilder::new("loop0", "loopback")
                .tx_queue(QueueConfig::new("tq", 0, 0, 32, &["bufs"]))
                .rx_queue(QueueConfig::new("rq", 0, 0, 32, &["bufs"]).with_timeout_us(100))
                .flow_isolation(true)
                .flow(FlowConfig::to_queue(
                    "f",
                    7,
                    0,
                    FlowMatch {
                        udp_dst: Some(PortRange {
                            first: 5000,
                            last: 5000,
                        }),
                        ..Default::default()
                    },
                )),
        )
        .build()
        .unwrap()
        .config;
    let a = dataplane::plan::Plan::from_config(&read).unwrap();
    let b = dataplane::plan::Plan::from_config(&built).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}
