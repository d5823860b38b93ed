//! The DPDK plan's decisions, from configs alone.

use super::*;

fn load(text: &str) -> Config {
    crate::config::load_with(text, "t", &|_| true)
        .unwrap()
        .config
}

/// Ring depths: 1024 on a virtual device; the reference's 8192 on a PCI NIC, the RX
/// ring halved until a region an RX queue receives into alone keeps 1.5x the ring plus
/// a burst (so it is still lent), never below 1024; `descriptors` wins over both, and
/// the pools and lending follow the port's rings.
#[test]
fn ring_depths_follow_the_keys_else_the_device_kind_and_the_lent_regions() {
    let text = |address: &str, rx_bufs: usize, keys: &str| {
        format!(
            r#"    memory_regions:
    - {{name: rxm, kind: host, affinity: 0, num_bufs: {rx_bufs}, buf_size: 2048}}
    - {{name: txm, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048, zero_copy: false}}
    interfaces:
    - name: p
      address: "{address}"
      rx:
        {keys}
        queues:
        - {{name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [rxm]}}
      tx:
        queues:
        - {{name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [txm]}}
"#
        )
    };
    let port = |address: &str, rx_bufs: usize, keys: &str| {
        let yaml = format!(
            "%YAML 1.2\n---\ndataplane:\n  cfg:\n    version: 1\n    stream_type: raw\n    master_core: 0\n{}",
            text(address, rx_bufs, keys)
        );
        let cfg = load(&yaml);
        let plan = crate::plan::Plan::from_config(&cfg).unwrap();
        let p = plan.dpdk().unwrap().ports[0].clone();
        let lent = plan.regions[0].lent;
        (p, lent)
    };
    let (vdev, lent) = port("net_null0", 16384, "");
    assert_eq!((vdev.rx_descriptors, vdev.tx_descriptors), (1024, 1024));
    assert!(lent);
    assert!(!vdev.rx_scatter, "2048-byte frames fit 2048-byte buffers");
    let (pci, lent) = port("0000:3b:00.0", 16384, "");
    assert_eq!((pci.rx_descriptors, pci.tx_descriptors), (8192, 8192));
    assert!(lent, "16384 >= 1.5 x 8192 + 32");
    assert_eq!(
        pci.tx[0].pool.mbufs,
        8192 * 3 / 2 + 32,
        "the TX copy pool is raised to the 8192-descriptor ring"
    );
    let (pci, lent) = port("0000:3b:00.0", 8192, "");
    assert_eq!(
        pci.rx_descriptors, 4096,
        "8192 buffers keep a 4096 ring fed"
    );
    assert!(lent);
    let (pci, lent) = port("0000:3b:00.0", 1000, "");
    assert_eq!(pci.rx_descriptors, 1024, "never below 1024");
    assert!(!lent, "1000 buffers cannot feed a 1024 ring: copied");
    let (pci, lent) = port("0000:3b:00.0", 1000, "descriptors: 512");
    assert_eq!(pci.rx_descriptors, 512);
    assert!(lent, "1000 >= 1.5 x 512 + 32");
    let (vdev, _) = port("net_null0", 16384, "descriptors: 4096");
    assert_eq!(vdev.rx_descriptors, 4096);
    let RxReceive::Lent { .. } = vdev.rx[0].receive else {
        panic!("lent: {:?}", vdev.rx[0].receive)
    };
    let (vdev, lent) = port("net_null0", 4096, "descriptors: 4096");
    assert!(!lent, "4096 buffers cannot feed a 4096 ring");
    let RxReceive::Copy { pool } = vdev.rx[0].receive else {
        panic!("copied: {:?}", vdev.rx[0].receive)
    };
    assert_eq!(pool.mbufs, 4096 * 3 / 2 + 32);
}

fn text_of_memif(buf_size: usize, args: &str) -> String {
    format!(
        "%YAML 1.2\n---\ndataplane:\n  cfg:\n    version: 1\n    stream_type: raw\n    master_core: 0\n    memory_regions:\n    - {{name: m, kind: host, affinity: 0, num_bufs: 4096, buf_size: {buf_size}}}\n    interfaces:\n    - name: p\n      address: \"net_memif0,role=server{args}\"\n      rx:\n        queues:\n        - {{name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [m]}}\n"
    )
}

/// The MTU comes from the largest frame of any queue, RX or TX (a TX queue larger than
/// every RX queue counts), a frame being the sum of a queue's segment buffers; it is
/// capped at 9100-byte frames and never below the smallest MTU.
#[test]
fn mtu_follows_the_largest_frame_of_any_queue() {
    assert_eq!(mtu_for_frame(2048), 2034);
    assert_eq!(mtu_for_frame(9000), 8986);
    assert_eq!(mtu_for_frame(65536), 9086);
    assert_eq!(mtu_for_frame(0), MIN_MTU);
    assert_eq!(
        kernel_interface("net_af_packet0,framesz=4096,iface=veth1").as_deref(),
        Some("veth1")
    );
    assert_eq!(kernel_interface("net_ring0"), None);
    assert_eq!(kernel_interface("net_memif0,iface=x"), None);
    let cfg = load(config_yaml!(
        raw,
        0,
        r#"    memory_regions:
    - {name: hdr, kind: host, affinity: 0, num_bufs: 4096, buf_size: 64}
    - {name: pay, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1024}
    - {name: jumbo, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000}
    interfaces:
    - name: split
      address: "net_null0"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [hdr, pay]}
    - name: sender
      address: "net_null1"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [pay]}
      tx:
        queues:
        - {name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [jumbo]}
"#
    ));
    let regions = crate::plan::Plan::from_config(&cfg).unwrap();
    let ports = &regions.dpdk().unwrap().ports;
    assert_eq!(
        ports[0].mtu,
        1088 - 14,
        "header and payload buffers of a split"
    );
    assert_eq!(
        ports[1].mtu,
        9000 - 14,
        "the TX queue's frames, larger than RX's"
    );
    assert!(
        !ports[0].rx_scatter,
        "a split takes its frames in two segments"
    );
    let memif = load(&text_of_memif(9000, ""));
    assert!(
        eal_args(&memif, 0).contains(&"--vdev=net_memif0,role=server,bsize=16384".to_owned()),
        "{:?}",
        eal_args(&memif, 0)
    );
    let given = load(&text_of_memif(9000, ",bsize=4096"));
    assert!(eal_args(&given, 0).contains(&"--vdev=net_memif0,role=server,bsize=4096".to_owned()));
    let small = load(&text_of_memif(2048, ""));
    assert!(eal_args(&small, 0).contains(&"--vdev=net_memif0,role=server".to_owned()));
    assert!(
        ports[1].rx_scatter,
        "9000-byte frames over 2048-byte RX mbufs need a chain"
    );
}

#[test]
fn eal_arguments_follow_the_config() {
    let cfg = load(config_yaml!(
        raw,
        1,
        r#"    memory_regions:
    - {name: b, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    interfaces:
    - name: a
      address: "net_memif0,role=server,socket=/tmp/x.sock"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [b]}
"#
    ));
    let a = eal_args(&cfg, 300 << 20);
    assert_eq!(&a[1..3], &["-l", "1"]);
    assert!(a.contains(&"--no-huge".to_owned()) && a.contains(&"300".to_owned()));
    assert!(a.contains(&"--vdev=net_memif0,role=server,socket=/tmp/x.sock".to_owned()));
    assert!(a.contains(&"--no-pci".to_owned()));
    assert!(
        !a.iter().any(|x| x.starts_with("--file-prefix")),
        "the process's own prefix is added at start, not planned"
    );
    assert_eq!(port_name("net_memif0,role=server"), "net_memif0");
    assert_eq!(port_name("0000:01:00.0"), "0000:01:00.0");
}

#[test]
fn zero_copy_takes_a_queue_own_large_region_the_port_can_reach() {
    let text = |address: &str, own: &str| {
        format!(
            config_yaml!(
                raw,
                0,
                r#"    memory_regions:
    - {{name: own, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048, zero_copy: {own}}}
    - {{name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}}
    - {{name: small, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1024}}
    - {{name: few, kind: host, affinity: 0, num_bufs: 1000, buf_size: 2048}}
    - {{name: gpu, kind: device, affinity: 0, num_bufs: 4096, buf_size: 4096}}
    interfaces:
    - name: a
      address: "{address}"
      rx:
        queues:
        - {{name: q0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [own]}}
        - {{name: q1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [shared]}}
        - {{name: q2, id: 2, cpu_core: 0, batch_size: 32, memory_regions: [shared]}}
        - {{name: q3, id: 3, cpu_core: 0, batch_size: 32, memory_regions: [small]}}
        - {{name: q4, id: 4, cpu_core: 0, batch_size: 32, memory_regions: [few]}}
        - {{name: q5, id: 5, cpu_core: 0, batch_size: 32, memory_regions: [gpu]}}
"#
            ),
            address = address,
            own = own
        )
    };
    let decide = |address: &str, own: &str| lending(&load(&text(address, own)));
    let lent =
        |address: &str| -> Vec<bool> { decide(address, "auto").into_iter().map(|p| p.0).collect() };
    assert_eq!(
        lent("net_null0"),
        vec![true, false, false, false, false],
        "a vdev cannot reach GPU memory"
    );
    assert_eq!(
        lent("net_ring0"),
        vec![false, false, false, false, false],
        "net_ring hands over the sender's mbufs: copy"
    );
    assert_eq!(
        lent("0000:3b:00.0"),
        vec![true, false, false, false, true],
        "a PCI NIC writes GPU memory by DMA"
    );
    assert!(decide("net_ring0", "true")[0].0, "asked for");
    assert_eq!(
        decide("0000:3b:00.0", "false")[0],
        (false, Some("zero_copy: false".into())),
        "declined"
    );
    let why = |address: &str, i: usize| decide(address, "auto")[i].1.clone().unwrap();
    assert_eq!(why("net_null0", 2), "buf_size is below 2048");
    assert_eq!(
        why("net_null0", 3),
        "num_bufs is below 1568 (1.5x the 1024-descriptor ring plus a burst)"
    );
    assert_eq!(
        why("net_null0", 4),
        "a virtual device cannot reach GPU memory"
    );
    let cfg = load(&text("net_null0", "auto"));
    assert_eq!(
        check_lending(&cfg, &lending(&cfg)),
        Err(PlanError::DeviceUnreachable {
            region: "gpu".into(),
            reason: "a virtual device cannot reach GPU memory".into()
        }),
        "nothing else can fill a device region"
    );
    let shared = load(&text("0000:3b:00.0", "auto").replace(
        "name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048",
        "name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048, zero_copy: true",
    ));
    assert_eq!(
        check_lending(&shared, &lending(&shared)),
        Err(PlanError::ZeroCopyImpossible {
            region: "shared".into(),
            reason: "other queues use it too".into()
        })
    );
}
