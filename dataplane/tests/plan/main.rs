//! Start-up plans as data: for each shipped configuration and each reference example,
//! the plan's key facts. No machine is needed: planning makes no system call (cores are
//! taken as present, so configurations for bigger hosts plan here too).

#[path = "../common/mod.rs"]
mod common;

use dataplane::config::{self, Config, Direction, EngineKind, MemoryKind, StageMode};
use dataplane::memory::RegionId;
use dataplane::plan::dpdk::RxReceive;
use dataplane::plan::{EnginePlan, EthSrc, Overflow, Plan, PlanError};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load(text: &str, name: &str) -> Result<Config, config::ConfigError> {
    config::load_with(text, name, &|_| true).map(|l| l.config)
}

fn shipped(name: &str) -> Plan {
    let text =
        fill_placeholders(&std::fs::read_to_string(root().join("configs").join(name)).unwrap());
    let cfg = load(&text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let plan = Plan::from_config(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
    invariants(name, &cfg, &plan);
    plan
}

/// What holds for every plan: each queue on exactly one worker core, headroom only on
/// lent regions, huge-page bytes exactly for huge regions, one DPDK port per interface.
fn invariants(name: &str, cfg: &Config, plan: &Plan) {
    let mut seen = vec![0; plan.queues.len()];
    for c in &plan.cores {
        for &q in &c.queues {
            seen[q] += 1;
            assert_eq!(plan.queues[q].core, c.core, "{name}");
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "{name}: {seen:?}");
    // A stage task only for a staged RX queue, on its stage_core, once.
    let mut staged = vec![0; plan.queues.len()];
    for c in &plan.cores {
        for &q in &c.stages {
            staged[q] += 1;
            let queue = &plan.queues[q];
            assert_eq!(queue.stage_core, Some(c.core), "{name}");
            assert!(
                queue.stage.is_some() && queue.direction == Direction::Rx,
                "{name}"
            );
        }
    }
    for (q, n) in staged.iter().enumerate() {
        assert_eq!(
            *n,
            usize::from(plan.queues[q].stage_core.is_some()),
            "{name}"
        );
    }
    for (i, (r, m)) in plan.regions.iter().zip(&cfg.memory_regions).enumerate() {
        // Lent to the engine's pool, to receive into or to send from: room for its headroom.
        let lent_for_tx = plan
            .dpdk()
            .is_some_and(|d| d.tx_regions[i] == dataplane::plan::dpdk::TxCarry::Lent);
        assert_eq!(r.headroom > 0, r.lent || lent_for_tx, "{name}: {}", r.name);
        assert_eq!(r.hugepage_bytes > 0, m.kind == MemoryKind::Huge, "{name}");
        assert!(r.stride >= r.buf_size + r.headroom, "{name}");
    }
    if let Some(d) = plan.dpdk() {
        assert_eq!(d.ports.len(), cfg.interfaces.len(), "{name}");
        assert!(d.eal_args.contains(&"-l".to_owned()), "{name}");
    }
    if plan.capabilities.connections {
        assert!(plan.queues.is_empty() && !plan.rdma().is_empty(), "{name}");
    } else {
        assert_eq!(plan.queues.len(), cfg.queues().count(), "{name}");
    }
    // The engine's own plan matches the engine and covers every interface.
    match (&plan.engine_plan, cfg.engine) {
        (EnginePlan::Loopback(l), EngineKind::Loopback) => {
            assert_eq!(l.interfaces.len(), cfg.interfaces.len(), "{name}");
            let tx: usize = l.interfaces.iter().map(|i| i.tx_queues.len()).sum();
            let planned_tx = plan.queues.iter().filter(|q| q.direction == Direction::Tx);
            assert_eq!(tx, planned_tx.count(), "{name}");
        }
        (EnginePlan::Socket(s), EngineKind::Socket) => {
            assert_eq!(s.len(), cfg.interfaces.len(), "{name}");
            for i in s {
                for q in i.rx.iter().chain(&i.tx) {
                    let r = &plan.regions[q.region.index()];
                    assert_ne!(
                        r.kind,
                        MemoryKind::Device,
                        "{name}: sockets read with the CPU"
                    );
                }
            }
        }
        (EnginePlan::Dpdk(_), EngineKind::Dpdk) | (EnginePlan::Rdma(_), EngineKind::Rdma) => {}
        (other, kind) => panic!("{name}: a {kind:?} configuration planned as {other:?}"),
    }
}

/// Interfaces naming one address are one loopback port: the TX queues of every name
/// enter the wires of the one with RX queues, each at its own ingress point.
#[test]
fn loopback_interfaces_with_one_address_share_a_port() {
    let p = shipped("sw_loopback.yaml");
    let EnginePlan::Loopback(l) = &p.engine_plan else {
        panic!("{:?}", p.engine_plan)
    };
    let i = &l.interfaces[0];
    assert_eq!((i.port, i.rx_interface, i.first_ingress), (0, 0, 0));
    assert!(!i.rx_queues.is_empty() && !i.tx_queues.is_empty());
    // A second name for the same address, with a TX queue of its own and no RX queue.
    let text = std::fs::read_to_string(root().join("configs/sw_loopback.yaml")).unwrap();
    let two = text.replacen(
        "    interfaces:\n",
        "    interfaces:\n    - {name: alias, address: loopback, tx: {queues: [{name: at, id: 3, cpu_core: 1, batch_size: 64, memory_regions: [tx_buffers]}]}}\n",
        1,
    );
    assert_ne!(two, text);
    let p = Plan::from_config(&load(&two, "alias").unwrap()).unwrap();
    let EnginePlan::Loopback(l) = &p.engine_plan else {
        panic!("{:?}", p.engine_plan)
    };
    let (alias, loop0) = (&l.interfaces[0], &l.interfaces[1]);
    assert_eq!((alias.port, loop0.port), (0, 0), "one port");
    assert_eq!(
        (alias.rx_interface, loop0.rx_interface),
        (1, 1),
        "loop0 receives"
    );
    assert_eq!(alias.tx_queues.len(), 1);
    assert_eq!((alias.first_ingress, loop0.first_ingress), (0, 1));
    assert_eq!(alias.ingress_points, 2);
}

/// The socket engine's checks happen while planning: a receive buffer smaller than the
/// largest datagram the interface takes is an error before any socket is opened.
#[test]
fn socket_interfaces_are_planned_and_checked_before_any_socket() {
    let p = shipped("socket_udp_bench.yaml");
    let EnginePlan::Socket(s) = &p.engine_plan else {
        panic!("{:?}", p.engine_plan)
    };
    let server = s.iter().find(|i| i.name == "server").unwrap();
    assert_eq!(server.local.unwrap().port(), 5701);
    assert_eq!(server.rx.len(), 1);
    assert!(server.buffers.0 >= 4 << 20 && server.buffers.0 <= 64 << 20);
    let text = std::fs::read_to_string(root().join("configs/socket_udp_bench.yaml")).unwrap();
    let small = text.replace(
        "local_addr: \"udp://127.0.0.1:5701\"}",
        "local_addr: \"udp://127.0.0.1:5701\", max_payload_size: 9001}",
    );
    assert_ne!(small, text);
    let e = Plan::from_config(&load(&small, "small").unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("max_payload_size 9001 is above the 9000-byte buffers"),
        "{e}"
    );
}

#[test]
fn software_loopback() {
    let p = shipped("sw_loopback.yaml");
    assert_eq!(p.capabilities.rx_overflow, Overflow::Backpressure);
    assert!(p.regions.iter().all(|r| !r.lent && r.headroom == 0));
    assert_eq!(p.regions[0].stride, 1088);
    assert_eq!(p.cores.len(), 1);
    assert_eq!(p.cores[0].core, 1);
    let rx = p.queue(0, Direction::Rx, 0).unwrap();
    assert_eq!((rx.batch, rx.timeout_us, rx.stage), (256, 100, None));
    assert!(p.hugepages.is_empty() && p.dpdk().is_none() && p.rdma().is_empty());
}

#[test]
fn hugepage_loopback_needs_whole_pages_per_region() {
    let p = shipped("sw_loopback_huge.yaml");
    assert!(!p.hugepages.regions.is_empty());
    assert!(
        p.hugepages.engine.is_none(),
        "the loopback maps no pages of its own"
    );
    let need = p.hugepages.in_pages(2 << 20);
    let total: u64 = need.per_node.values().map(|(n, _)| n).sum();
    let by_region: u64 = p
        .hugepages
        .regions
        .iter()
        .map(|(_, _, b)| b.div_ceil(2 << 20))
        .sum();
    assert_eq!(total, by_region);
}

#[test]
fn dpdk_memif_lends_its_region_with_mbuf_headroom() {
    let p = shipped("dpdk_memif_rx.yaml");
    let r = &p.regions[0];
    assert!(r.lent && r.headroom == 128 && r.stride == 2176, "{r:?}");
    let d = p.dpdk().unwrap();
    assert_eq!(d.ports[0].ethdev, "net_memif0");
    assert!(!d.ports[0].pci);
    assert_eq!(
        d.ports[0].rx[0].receive,
        RxReceive::Lent {
            region: RegionId(0)
        }
    );
    assert!(d.eal_args.contains(&"--no-huge".to_owned()));
    assert!(p.hugepages.is_empty(), "no huge region: EAL runs --no-huge");
}

#[test]
fn dpdk_ring_copies_and_sizes_pools_for_the_ring() {
    let p = shipped("dpdk_ring.yaml");
    assert!(p.regions.iter().all(|r| !r.lent));
    let d = p.dpdk().unwrap();
    let RxReceive::Copy { pool } = &d.ports[0].rx[0].receive else {
        panic!("{:?}", d.ports[0].rx[0]);
    };
    assert!(pool.mbufs >= 1024 * 3 / 2, "{pool:?}");
    assert!(pool.data_room >= 2048 + 128, "{pool:?}");
    let q = p
        .queues
        .iter()
        .find(|q| q.direction == Direction::Rx)
        .unwrap();
    let region = &p.regions[q.segments[0].index()];
    assert!(
        region
            .not_lent_because
            .as_deref()
            .is_some_and(|w| w.contains("net_ring")),
        "{region:?}"
    );
    assert!(d.eal_args.iter().any(|a| a.starts_with("--vdev=net_ring")));
}

#[test]
fn dpdk_tx_sends_region_buffers_without_copying_unless_told_not_to() {
    use dataplane::plan::dpdk::TxCarry;
    let p = shipped("dpdk_memif_fwd.yaml");
    let d = p.dpdk().unwrap();
    // The lent RX region goes out in its own mbufs; the TX region, only sent from, is lent
    // to a pool of its own, with the mbuf headroom in front of its buffers.
    assert_eq!(d.tx_regions, vec![TxCarry::OwnMbufs, TxCarry::Lent]);
    assert_eq!(p.regions[1].headroom, 128);
    assert_eq!(d.ports[1].tx[0].attach_pool.data_room, 0);
    // Below `TX_LEND_MIN_BUFS` buffers a region sent from is attached instead.
    let small = dataplane::plan::dpdk::TX_LEND_MIN_BUFS - 1;
    let text = std::fs::read_to_string(root().join("configs/dpdk_ring.yaml"))
        .unwrap()
        .replacen("num_bufs: 16384", &format!("num_bufs: {small}"), 1);
    let p = Plan::from_config(&load(&text, "dpdk_ring.yaml").unwrap()).unwrap();
    assert_eq!(p.dpdk().unwrap().tx_regions[0], TxCarry::Attached);
    assert_eq!(p.regions[0].headroom, 0);
    // On a PCI NIC a region sent from is attached too, whatever its size.
    let text = std::fs::read_to_string(root().join("configs/dpdk_ring.yaml"))
        .unwrap()
        .replace("\"net_ring0\"", "\"0000:01:00.0\"");
    let p = Plan::from_config(&load(&text, "dpdk_ring.yaml").unwrap()).unwrap();
    assert!(p.dpdk().unwrap().ports[0].pci);
    assert_eq!(p.dpdk().unwrap().tx_regions[0], TxCarry::Attached);
    let text = std::fs::read_to_string(root().join("configs/dpdk_ring.yaml"))
        .unwrap()
        .replace("buf_size: 1088", "buf_size: 1088\n      zero_copy: false");
    let cfg = load(&text, "dpdk_ring.yaml").unwrap();
    let p = Plan::from_config(&cfg).unwrap();
    assert_eq!(
        p.dpdk().unwrap().tx_regions[0],
        TxCarry::Copied {
            because: "zero_copy: false".into()
        }
    );
    // zero_copy: true on a region only sent from is met by attaching it.
    let text = std::fs::read_to_string(root().join("configs/dpdk_ring.yaml"))
        .unwrap()
        .replace("buf_size: 1088", "buf_size: 1088\n      zero_copy: true");
    let cfg = load(&text, "dpdk_ring.yaml").unwrap();
    assert!(Plan::from_config(&cfg).is_ok());
}

#[test]
fn gpu_loopback_configs_stage_into_the_gpu() {
    let hds = shipped("gpu_loopback_hds.yaml");
    let rx = hds.queue(0, Direction::Rx, 0).unwrap();
    let stage = rx.stage.unwrap();
    assert_eq!(stage.split_header_bytes, Some(64));
    assert_eq!(stage.gpu, Some(0));
    assert_eq!(stage.mode, StageMode::Copy);
    let whole = shipped("gpu_loopback_64.yaml");
    let rx = whole.queue(0, Direction::Rx, 0).unwrap();
    assert_eq!(rx.stage.unwrap().split_header_bytes, None);
    assert_eq!(rx.stage.unwrap().gpu, Some(0));
    let reorder = shipped("gpu_loopback_reorder.yaml");
    let r = &reorder.queue(0, Direction::Rx, 0).unwrap().reorders[0];
    assert_eq!(r.name, "by_sequence");
    assert_eq!((r.packets_per_batch, r.in_slot_bytes), (1024, 1984));
    assert_eq!(reorder.regions[r.output.index()].name, "batches_gpu");
    shipped("gpu_loopback_8k.yaml");
    // With stage_core: a second worker that runs the queue's stage and no queue.
    let name = "gpu_loopback_64.yaml";
    let text = std::fs::read_to_string(root().join("configs").join(name))
        .unwrap()
        .replace(
            r#"memory_regions: ["rx_gpu"]}"#,
            r#"stage_core: 2, memory_regions: ["rx_gpu"]}"#,
        );
    let cfg = load(&text, name).unwrap();
    let plan = Plan::from_config(&cfg).unwrap();
    invariants(name, &cfg, &plan);
    let rx = plan.queue(0, Direction::Rx, 0).unwrap();
    assert_eq!((rx.core, rx.stage_core), (1, Some(2)));
    let stage_worker = plan.cores.iter().find(|c| c.core == 2).unwrap();
    assert!(stage_worker.queues.is_empty() && stage_worker.stages.len() == 1);
}

#[test]
fn every_other_shipped_config_plans() {
    let mut names: Vec<String> = std::fs::read_dir(root().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 15, "{names:?}");
    for name in names {
        shipped(&name);
    }
    let p = shipped("dpdk_connectx_template.yaml");
    let d = p.dpdk().unwrap();
    assert!(d.ports.iter().all(|port| port.pci));
    assert!(d.eal_args.contains(&"-a".to_owned()));
    assert!(
        d.eal_args.contains(&"--iova-mode=va".to_owned()),
        "regions are registered with their virtual addresses as IOVAs"
    );
    // DGX Spark: one port through its two PCIe functions, each receiving into GPU memory
    // by DMA (lent, not staged).
    let p = shipped("dgx_spark_template.yaml");
    let d = p.dpdk().unwrap();
    assert_eq!(d.ports.len(), 2);
    assert!(d.ports.iter().all(|port| port.pci));
    let allowed: Vec<&String> = d
        .eal_args
        .windows(2)
        .filter(|w| w[0] == "-a")
        .map(|w| &w[1])
        .collect();
    assert_eq!(
        allowed,
        ["0000:01:00.0", "0002:01:00.0"],
        "{:?}",
        d.eal_args
    );
    for q in p.queues.iter().filter(|q| q.direction == Direction::Rx) {
        assert!(q.staging.is_none(), "{q:?}");
        assert!(p.regions[q.segments[0].index()].lent);
    }
}

/// GB10's GPU is integrated: the Spark template receives into `host_pinned` memory, which
/// no integrated-GPU answer refuses; the same file with `device` regions names both
/// regions as reached by a NIC and is refused on an integrated GPU (and only there), with
/// the fix. The ConnectX template (a discrete GPU server) is refused only if its GPU were
/// integrated.
#[test]
fn device_regions_a_nic_fills_are_refused_on_an_integrated_gpu() {
    let integrated = |_: &dataplane::plan::RegionPlan| true;
    let discrete = |_: &dataplane::plan::RegionPlan| false;
    let spark = shipped("dgx_spark_template.yaml");
    assert!(spark.gpu_memory_nics_reach().is_empty());
    spark.check_integrated_gpus(&integrated).unwrap();
    let text = fill_placeholders(
        &std::fs::read_to_string(root().join("configs/dgx_spark_template.yaml")).unwrap(),
    )
    .replace("kind: \"host_pinned\"", "kind: \"device\"");
    let cfg = load(&text, "spark_device.yaml").unwrap();
    let plan = Plan::from_config(&cfg).unwrap();
    let reached: Vec<&str> = plan
        .gpu_memory_nics_reach()
        .iter()
        .map(|a| plan.regions[a.region.index()].name.as_str())
        .collect();
    assert_eq!(reached, ["rx_gpu_a", "rx_gpu_b"]);
    plan.check_integrated_gpus(&discrete).unwrap();
    let e = plan
        .check_integrated_gpus(&integrated)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("memory region `rx_gpu_a`: kind device on GPU 0, an integrated GPU")
            && e.contains("interface `port0_a` receives into it by DMA (DPDK, PCI 0000:01:00.0)")
            && e.contains("use kind: host_pinned"),
        "{e}"
    );
    let cx = shipped("dpdk_connectx_template.yaml");
    cx.check_integrated_gpus(&discrete).unwrap();
    if !cx.gpu_memory_nics_reach().is_empty() {
        assert!(cx.check_integrated_gpus(&integrated).is_err());
    }
}

#[test]
fn tx_eth_src_on_gpu_headers_is_planned_as_unstamped() {
    let text = common::loopback_config(
        r#"
memory_regions:
- {name: host, kind: host, affinity: 0, num_bufs: 64, buf_size: 256}
- {name: gpu, kind: device, affinity: 0, num_bufs: 64, buf_size: 256}
interfaces:
- name: l
  address: loopback
  tx:
    queues:
    - {name: a, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [host], offloads: [tx_eth_src]}
    - {name: b, id: 1, cpu_core: 0, batch_size: 8, memory_regions: [gpu], offloads: [tx_eth_src]}
  rx:
    queues:
    - {name: r, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [host]}
"#,
    );
    let cfg = load(&text, "t").unwrap();
    let p = Plan::from_config(&cfg).unwrap();
    assert_eq!(p.queue(0, Direction::Tx, 0).unwrap().eth_src, EthSrc::Stamp);
    assert_eq!(
        p.queue(0, Direction::Tx, 1).unwrap().eth_src,
        EthSrc::HeadersOnGpu
    );
    // The loopback hands TX buffers to RX: a TX queue in GPU memory means the host RX
    // queue receives GPU packets, so it gets a stage on that GPU.
    let rx = p.queue(0, Direction::Rx, 0).unwrap();
    assert_eq!(rx.stage.unwrap().gpu, Some(0));
}

#[test]
fn dpdk_header_data_split_gets_two_pools() {
    let text = common::raw_config(
        r#"
memory_regions:
- {name: headers, kind: host, affinity: 0, num_bufs: 4096, buf_size: 64}
- {name: payload, kind: host, affinity: 0, num_bufs: 4096, buf_size: 8000}
interfaces:
- name: a
  address: "0000:3b:00.0"
  rx:
    queues:
    - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [headers, payload]}
"#,
    );
    let p = Plan::from_config(&load(&text, "t").unwrap()).unwrap();
    let RxReceive::Split {
        header,
        payload,
        header_bytes,
    } = &p.dpdk().unwrap().ports[0].rx[0].receive
    else {
        panic!("{p:?}");
    };
    assert_eq!(*header_bytes, 64);
    assert_eq!(
        header.data_room,
        64 + 128,
        "a split pool keeps its own size"
    );
    assert_eq!(payload.data_room, 8000 + 128);
    assert!(header.mbufs >= 1024 * 3 / 2);
    // The split itself: the stage knows where, for engines that deliver whole frames.
    assert_eq!(p.queues[0].stage.unwrap().split_header_bytes, Some(64));
}

#[test]
fn impossible_plans_are_typed_errors() {
    let text = common::raw_config(
        r#"
memory_regions:
- {name: gpu, kind: device, affinity: 0, num_bufs: 4096, buf_size: 4096}
interfaces:
- name: a
  address: net_null0
  rx:
    queues:
    - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [gpu]}
"#,
    );
    // A virtual device copies with the CPU: the queue is staged through pinned memory.
    let p = Plan::from_config(&load(&text, "t").unwrap()).expect("staged");
    let staging = p.queues[0].staging.expect("a staging region");
    assert_eq!(p.regions[staging.index()].name, "a.rx0.staging");
    assert_eq!(p.regions[staging.index()].kind, MemoryKind::HostPinned);
    assert!(p.queues[0].stage.is_some());

    // A PCI NIC is not staged: it writes GPU memory itself, which it cannot do for a
    // region two queues share.
    let shared = text.replace("net_null0", "0000:3b:00.0").replace(
        "memory_regions: [gpu]}",
        "memory_regions: [gpu]}
        - {name: r, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [gpu]}",
    );
    let e = Plan::from_config(&load(&shared, "t").unwrap()).unwrap_err();
    assert_eq!(
        e,
        PlanError::DeviceUnreachable {
            region: "gpu".into(),
            reason: "other queues use it too".into()
        }
    );
    assert!(e.to_string().contains("PCI NIC"), "{e}");
}

fn examples_dir() -> Option<PathBuf> {
    [
        std::env::var_os("DAQIRI_EXAMPLES").map(PathBuf::from),
        Some(root().join("shared/daqiri-examples")),
        Some(root().join("../shared/daqiri-examples")),
        Some(PathBuf::from("/work/shared/daqiri-examples")),
    ]
    .into_iter()
    .flatten()
    .find(|p| p.is_dir())
}

/// Fills the `<placeholder>` values the reference leaves for users with values of the
/// right shape (a PCI address, a MAC, an IPv4 address).
fn fill_placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let Some(len) = rest[open..].find('>') else {
            break;
        };
        let inner = &rest[open + 1..open + len];
        let value = if inner.matches(':').count() == 5 || inner.contains("MAC") {
            "02:00:00:00:00:01"
        } else if inner.parse::<u32>().is_ok()
            || dataplane::config::validate::is_pci_address(inner)
            || inner.parse::<std::net::Ipv4Addr>().is_ok()
        {
            // Values of the right shape already (the template's examples) stay.
            inner
        } else if inner.contains("PCI") {
            "0000:3b:00.0"
        } else if inner.contains("CORE") {
            "2"
        } else if inner.contains(':') {
            "0000:3b:00.0"
        } else if inner.matches('.').count() == 3 {
            "192.0.2.1"
        } else {
            out.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            continue;
        };
        out.push_str(&rest[..open]);
        out.push_str(value);
        rest = &rest[open + len + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn reference_examples_plan() {
    let Some(dir) = examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return;
    };
    let mut planned = Vec::new();
    let mut refused = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = fill_placeholders(&std::fs::read_to_string(&path).unwrap());
        // Examples that use keys this project rejects as not supported are covered by
        // `reference_examples.rs`; the rest must plan.
        let cfg = match load(&text, &name) {
            Ok(cfg) => cfg,
            Err(e) => {
                eprintln!("not planned: {e}");
                continue;
            }
        };
        match Plan::from_config(&cfg) {
            Ok(plan) => {
                invariants(&name, &cfg, &plan);
                planned.push((name, plan));
            }
            Err(e) => {
                eprintln!("{name}: refused: {e}");
                refused.push((name, e));
            }
        }
    }
    // What the engines cannot run yet, refused by the plan before anything is allocated:
    // GPU memory the DPDK engine cannot lend to the NIC (a TX source, a reorder output,
    // buffers under 2 KiB), and the seed's legacy RDMA client without a local address.
    for (name, e) in &refused {
        match e {
            PlanError::DeviceUnreachable { .. } => {}
            PlanError::Interface { reason, .. } => {
                assert!(
                    name.starts_with("seed_") && reason.contains("local_addr"),
                    "{name}: {e}"
                )
            }
            _ => panic!("{name}: {e}"),
        }
    }
    assert!(
        planned.len() >= 15,
        "only {} examples planned",
        planned.len()
    );
    let get = |n: &str| {
        &planned
            .iter()
            .find(|(name, _)| name == n)
            .unwrap_or_else(|| panic!("{n} did not plan"))
            .1
    };
    // GPUDirect on a PCI NIC: the GPU-pinned RX region is lent, with mbuf headroom.
    let spark = get("daqiri_bench_raw_rx_spark_xhost.yaml");
    assert!(spark.regions[0].lent && spark.regions[0].headroom == 128);
    assert!(spark.dpdk().unwrap().ports[0].pci);
    // The reference's RDMA example: one slot per side, the fixed region names.
    let rdma = get("daqiri_bench_rdma_tx_rx.yaml");
    assert_eq!(rdma.rdma().len(), 2);
    assert!(
        rdma.rdma()
            .iter()
            .any(|i| i.listens() && i.local.port() == 4096)
    );
    // The reorder example on the loopback: huge regions counted per region.
    let reorder = get("daqiri_bench_raw_sw_loopback_reorder_seq_1024.yaml");
    assert_eq!(reorder.hugepages.regions.len(), 3);
    let r = reorder
        .queues
        .iter()
        .flat_map(|q| &q.reorders)
        .next()
        .expect("a reorder");
    assert_eq!(
        (r.name.as_str(), r.packets_per_batch),
        ("rx_reorder_seq_1024", 1024)
    );
    assert_eq!(reorder.regions[r.output.index()].name, "Reorder_RX_CPU");
}

mod rdma;
