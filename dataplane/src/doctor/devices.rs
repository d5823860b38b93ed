//! Checks of the devices a plan uses: PCI NICs (driver, NUMA node, MTU), RDMA devices
//! and GIDs, and GPUs (driver, dma-buf or peer memory, placement).

use super::*;
use crate::memory::RegionId;

/// `dddd:bb:dd.f` for a PCI address written with or without its domain.
pub(super) fn full_pci(addr: &str) -> String {
    if addr.matches(':').count() == 1 {
        format!("0000:{}", addr.to_lowercase())
    } else {
        addr.to_lowercase()
    }
}

/// The regions the configuration names, without the staging regions the plan added (the
/// checks speak of what the user wrote).
pub(super) fn configured_regions(p: &Plan) -> impl Iterator<Item = &crate::plan::RegionPlan> {
    let staging: BTreeSet<RegionId> = p
        .queues
        .iter()
        .filter_map(|q| q.staging)
        .chain(p.rdma().iter().flat_map(|i| &i.slots).flat_map(|s| {
            [&s.rx_staging, &s.tx_staging]
                .into_iter()
                .flatten()
                .map(|st| st.region)
        }))
        .collect();
    p.regions
        .iter()
        .enumerate()
        .filter(move |(i, _)| !staging.contains(&RegionId(*i as u16)))
        .map(|(_, r)| r)
}

/// Largest frame interface `interface` sends or receives (bytes after the Ethernet
/// header's 14 count against the MTU).
pub(super) fn largest_buffer(p: &Plan, interface: usize) -> usize {
    p.queues
        .iter()
        .filter(|q| q.interface == interface)
        .map(|q| {
            q.segments
                .iter()
                .map(|&r| p.regions[r.index()].buf_size)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

pub(super) fn pci(m: &Machine, p: &Plan, cores: &BTreeSet<u32>, out: &mut Vec<Finding>) {
    let core_nodes: BTreeSet<u32> = cores.iter().filter_map(|&c| m.node_of_cpu(c)).collect();
    for iface in p.dpdk().iter().flat_map(|d| &d.ports) {
        if !iface.pci {
            continue;
        }
        let addr = full_pci(&iface.address);
        let dir = format!("sys/bus/pci/devices/{addr}");
        if !m.exists(&dir) {
            push(
                out,
                "pci",
                Severity::Block,
                format!("interface `{}`: no PCI device {addr}", iface.name),
                Some("lspci -D -d 15b3: lists the ConnectX functions; put one of their addresses in `address`".into()),
            );
            continue;
        }
        pci_driver(m, &iface.name, &addr, &dir, out);
        pci_numa(m, p, &iface.name, &addr, &dir, &core_nodes, out);
        pci_mtu(
            m,
            &iface.name,
            &dir,
            largest_buffer(p, iface.interface),
            out,
        );
        let what = format!("interface `{}`", iface.name);
        super::pcie::function(m, &what, &addr, super::pcie::Role::Nic, out);
    }
}

/// The driver bound to a DPDK port's PCI function, and the IOMMU vfio-pci needs.
fn pci_driver(m: &Machine, name: &str, addr: &str, dir: &str, out: &mut Vec<Finding>) {
    let driver = m.link_name(&format!("{dir}/driver"));
    match driver.as_deref() {
        None => push(
            out,
            "pci",
            Severity::Block,
            format!("interface `{}`: {addr} has no driver bound", name),
            Some(format!(
                "dpdk-devbind.py --bind=vfio-pci {addr} (or modprobe mlx5_core for ConnectX)"
            )),
        ),
        Some("mlx5_core") | Some("vfio-pci") => push(
            out,
            "pci",
            Severity::Ok,
            format!(
                "interface `{}`: {addr} bound to {}",
                name,
                driver.as_deref().unwrap_or_default()
            ),
            None,
        ),
        Some(d) => push(
            out,
            "pci",
            Severity::Warn,
            format!(
                "interface `{}`: {addr} bound to {d}; DPDK needs vfio-pci (or mlx5_core for ConnectX)",
                name
            ),
            Some(format!("dpdk-devbind.py --bind=vfio-pci {addr}")),
        ),
    }
    if driver.as_deref() == Some("vfio-pci") && m.list("sys/kernel/iommu_groups").is_empty() {
        push(
            out,
            "pci",
            Severity::Block,
            format!(
                "interface `{}`: vfio-pci without an IOMMU (no /sys/kernel/iommu_groups)",
                name
            ),
            Some("add `intel_iommu=on iommu=pt` (or `amd_iommu=on`) to the kernel command line and reboot".into()),
        );
    }
}

/// The NUMA node of a DPDK port's PCI function against the configured cores' and the
/// GPUs' of its regions.
fn pci_numa(
    m: &Machine,
    p: &Plan,
    name: &str,
    addr: &str,
    dir: &str,
    core_nodes: &BTreeSet<u32>,
    out: &mut Vec<Finding>,
) {
    if let Some(node) = m
        .read(&format!("{dir}/numa_node"))
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|&n| n >= 0)
    {
        let node = node as u32;
        if !core_nodes.is_empty() && !core_nodes.contains(&node) {
            let near = m
                .cpus(&format!("sys/devices/system/node/node{node}/cpulist"))
                .map(|c| cpu_list(&c))
                .unwrap_or_default();
            push(
                out,
                "pci",
                Severity::Warn,
                format!(
                    "interface `{}`: {addr} is on NUMA node {node}, the configured cores on {} (every packet crosses the socket link)",
                    name,
                    core_nodes
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Some(format!("use cores of node {node} ({near}) for its queues")),
            );
        }
        for r in configured_regions(p)
            .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
        {
            if let Some(gpu_node) = gpu_node(m, r.affinity)
                && gpu_node != node
            {
                push(
                    out,
                    "pci",
                    Severity::Warn,
                    format!(
                        "interface `{}` ({addr}) is on NUMA node {node}, GPU {} of region `{}` on node {gpu_node}: GPUDirect traffic crosses the socket link",
                        name, r.affinity, r.name
                    ),
                    Some("pick a GPU behind the same PCIe switch or socket as the NIC (nvidia-smi topo -m)".into()),
                );
            }
        }
    }
}

/// The MTU of a DPDK port's kernel netdevs against the largest frame its queues hold.
fn pci_mtu(m: &Machine, name: &str, dir: &str, frame: usize, out: &mut Vec<Finding>) {
    for net in m.list(&format!("{dir}/net")) {
        if let Some(mtu) = m
            .read(&format!("{dir}/net/{net}/mtu"))
            .and_then(|v| v.parse::<usize>().ok())
        {
            let needed = frame.saturating_sub(14);
            if needed > mtu {
                push(
                    out,
                    "pci",
                    Severity::Warn,
                    format!(
                        "interface `{}`: {net} has MTU {mtu}, the queues' buffers hold {frame}-byte frames (MTU {needed} needed)",
                        name
                    ),
                    Some(format!("ip link set dev {net} mtu {needed}")),
                );
            } else {
                push(
                    out,
                    "pci",
                    Severity::Ok,
                    format!("interface `{}`: {net} MTU {mtu}", name),
                    None,
                );
            }
        }
    }
}

/// PCI address of GPU `ordinal` (its order among NVIDIA display/3D functions by address).
fn gpu_address(m: &Machine, ordinal: u32) -> Option<String> {
    m.list("sys/bus/pci/devices")
        .into_iter()
        .filter(|d| {
            let dev = format!("sys/bus/pci/devices/{d}");
            m.read(&format!("{dev}/vendor")).as_deref() == Some("0x10de")
                && m.read(&format!("{dev}/class"))
                    .is_some_and(|c| c.starts_with("0x0300") || c.starts_with("0x0302"))
        })
        .nth(ordinal as usize)
}

/// NUMA node of GPU `ordinal`.
pub(super) fn gpu_node(m: &Machine, ordinal: u32) -> Option<u32> {
    let d = gpu_address(m, ordinal)?;
    m.read(&format!("sys/bus/pci/devices/{d}/numa_node"))?
        .parse::<i64>()
        .ok()
        .filter(|&n| n >= 0)
        .map(|n| n as u32)
}

/// The PCIe links (and IOMMU groups) of the GPUs that device and pinned regions use.
pub(super) fn gpu_links(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let ordinals: BTreeSet<u32> = configured_regions(p)
        .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
        .map(|r| r.affinity)
        .collect();
    for ordinal in ordinals {
        if let Some(addr) = gpu_address(m, ordinal) {
            let what = format!("GPU {ordinal}");
            super::pcie::function(m, &what, &addr, super::pcie::Role::Gpu, out);
            let device_bytes: u64 = configured_regions(p)
                .filter(|r| r.kind == MemoryKind::Device && r.affinity == ordinal)
                .map(|r| (r.num_bufs * r.stride) as u64)
                .sum();
            if device_bytes > 0 {
                super::pcie::bar1(m, &what, &addr, device_bytes, out);
            }
        }
    }
}

/// The IPv4 address as the GID table writes a RoCE v2 IPv4 GID.
pub(super) fn ipv4_gid(ip: std::net::Ipv4Addr) -> String {
    let o = ip.octets();
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    )
}

pub(super) fn rdma(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let roce: Vec<_> = p
        .rdma()
        .iter()
        .filter_map(|i| match i.local.ip() {
            std::net::IpAddr::V4(ip) => Some((i, ip)),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    if roce.is_empty() {
        return;
    }
    let devices = m.list("sys/class/infiniband");
    if devices.is_empty() {
        push(
            out,
            "rdma",
            Severity::Block,
            "no RDMA device (/sys/class/infiniband is empty)".into(),
            Some("modprobe mlx5_ib (ConnectX), or for a software test: rdma link add rxe0 type rxe netdev IFACE".into()),
        );
        return;
    }
    for (iface, local) in roce {
        let gid = ipv4_gid(local);
        let mut found = None;
        for dev in &devices {
            for port in m.list(&format!("sys/class/infiniband/{dev}/ports")) {
                let base = format!("sys/class/infiniband/{dev}/ports/{port}");
                for idx in m.list(&format!("{base}/gids")) {
                    if m.read(&format!("{base}/gids/{idx}")).as_deref() == Some(gid.as_str()) {
                        let kind = m
                            .read(&format!("{base}/gid_attrs/types/{idx}"))
                            .unwrap_or_default();
                        if found.is_none() || kind.contains("v2") {
                            found = Some((dev.clone(), port.clone(), idx.clone(), kind));
                        }
                    }
                }
            }
        }
        match found {
            Some((dev, port, idx, kind)) if kind.contains("v2") => push(
                out,
                "rdma",
                Severity::Ok,
                format!(
                    "interface `{}`: {} is RoCE v2 GID {idx} of {dev} port {port}",
                    iface.name, local
                ),
                None,
            ),
            Some((dev, port, idx, kind)) => push(
                out,
                "rdma",
                Severity::Warn,
                format!(
                    "interface `{}`: {} is GID {idx} of {dev} port {port}, but of type `{kind}`, not RoCE v2",
                    iface.name, local
                ),
                Some(format!("cma_roce_mode -d {dev} -p {port} -m 2")),
            ),
            None => push(
                out,
                "rdma",
                Severity::Block,
                format!(
                    "interface `{}`: no RDMA device has a GID for {} (devices: {})",
                    iface.name,
                    local,
                    devices.join(", ")
                ),
                Some(format!(
                    "ip addr add {}/24 dev NETDEV (the netdev of an RDMA port: rdma link show)",
                    local
                )),
            ),
        }
    }
}

pub(super) fn gpu(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let gpu_regions: Vec<_> = configured_regions(p)
        .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
        .collect();
    if gpu_regions.is_empty() {
        return;
    }
    let gpus = m.list("proc/driver/nvidia/gpus");
    let version = m
        .read("proc/driver/nvidia/version")
        .and_then(|v| v.lines().next().map(str::to_owned));
    let Some(version) = version else {
        push(
            out,
            "gpu",
            Severity::Block,
            format!(
                "regions {} need the NVIDIA driver, which is not loaded (/proc/driver/nvidia/version)",
                gpu_regions
                    .iter()
                    .map(|r| format!("`{}`", r.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(
                "install the NVIDIA driver (open kernel modules for dma-buf) and modprobe nvidia"
                    .into(),
            ),
        );
        return;
    };
    push(
        out,
        "gpu",
        Severity::Ok,
        format!("{} GPU(s); {version}", gpus.len()),
        None,
    );
    for r in &gpu_regions {
        if r.gpu_uuid.is_none() && r.affinity as usize >= gpus.len() {
            push(
                out,
                "gpu",
                Severity::Block,
                format!(
                    "region `{}` asks for GPU {}, {} present",
                    r.name,
                    r.affinity,
                    gpus.len()
                ),
                Some("set its affinity to a GPU ordinal that exists (nvidia-smi -L)".into()),
            );
        }
    }
    if integrated_gpu(m, p, &gpu_regions, out) {
        return;
    }
    // RDMA interfaces that would register GPU memory, and whether one insists
    // (`gpu_memory_path: direct`; `auto` stages where it cannot, `staged` always does).
    let rdma_paths: Vec<GpuMemoryPath> = if gpu_regions.iter().any(|r| r.kind == MemoryKind::Device)
    {
        p.rdma()
            .iter()
            .map(|i| i.roce.gpu_memory_path)
            .filter(|&p| p != GpuMemoryPath::Staged)
            .collect()
    } else {
        Vec::new()
    };
    let rdma_into_gpu = !rdma_paths.is_empty();
    let rdma_must_register = rdma_paths.contains(&GpuMemoryPath::Direct);
    let dpdk_pci_gpu = p.dpdk().is_some_and(|d| d.ports.iter().any(|i| i.pci))
        && gpu_regions.iter().any(|r| r.kind == MemoryKind::Device);
    if rdma_into_gpu || dpdk_pci_gpu {
        // The open kernel modules export GPU memory as dma-buf (with a 5.12+ kernel).
        let open_modules = version.contains("Open Kernel Module");
        let peermem = m.exists("sys/module/nvidia_peermem");
        if open_modules || peermem {
            push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "GPU memory can be registered with the NIC: {}",
                    match (open_modules, peermem) {
                        (true, true) => "dma-buf (open kernel modules) and nvidia-peermem",
                        (true, false) => "dma-buf (open kernel modules)",
                        _ => "nvidia-peermem",
                    }
                ),
                None,
            );
            return;
        }
        let fix = "modprobe nvidia-peermem (or install the open kernel modules: nvidia-open)";
        if dpdk_pci_gpu || rdma_must_register {
            push(
                out,
                "gpu",
                Severity::Block,
                "device regions on a NIC need dma-buf (NVIDIA open kernel modules) or nvidia-peermem; neither is there".into(),
                Some(fix.into()),
            );
        } else {
            push(
                out,
                "gpu",
                Severity::Warn,
                "the NIC cannot register GPU memory here (no dma-buf, no nvidia-peermem): RDMA connections will stage their device regions through pinned host memory (gpu_memory_path auto), a copy each way".into(),
                Some(fix.into()),
            );
        }
    }
}

/// Regions on an integrated GPU: one a NIC must reach by DMA blocks (the plane refuses it
/// at start too); others are noted. True when something blocked.
fn integrated_gpu(
    m: &Machine,
    p: &Plan,
    gpu_regions: &[&crate::plan::RegionPlan],
    out: &mut Vec<Finding>,
) -> bool {
    let reached = p.gpu_memory_nics_reach();
    let mut blocked = false;
    for r in gpu_regions.iter().filter(|r| m.region_on_integrated_gpu(r)) {
        let nic = reached
            .iter()
            .find(|a| p.regions[a.region.index()].name == r.name);
        match (nic, r.kind) {
            (Some(access), _) => {
                blocked = true;
                push(
                    out,
                    "gpu",
                    Severity::Block,
                    format!(
                        "region `{}`: kind device on GPU {}, an integrated GPU (no PCIe BAR a NIC can write into), but {}",
                        r.name, r.affinity, access.via
                    ),
                    Some(format!(
                        "make `{}` kind: host_pinned (the integrated GPU reads it in place)",
                        r.name
                    )),
                );
            }
            (None, MemoryKind::Device) => push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "region `{}` is on GPU {}, an integrated GPU: no NIC writes it, the CPU copies into it",
                    r.name, r.affinity
                ),
                None,
            ),
            (None, _) => push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "region `{}` is pinned host memory of GPU {}, an integrated GPU: the GPU reads it in place",
                    r.name, r.affinity
                ),
                None,
            ),
        }
    }
    blocked
}
