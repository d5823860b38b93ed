//! Host staging regions for engines that move packet bytes with the CPU (kernel sockets,
//! and DPDK virtual devices, which copy frames on the CPU and cannot reach GPU memory): a
//! queue whose layout is elsewhere (GPU memory; for sockets also header-data split) gets a
//! host region of its own that the engine receives into or sends from, and the worker's
//! stage moves packets between it and the queue's layout. RDMA connection slots get theirs
//! from [`super::rdma`]: a NIC writes one buffer per message and may be unable to register
//! GPU memory.

use crate::config::{
    Config, Direction, EngineKind, InterfaceConfig, MemoryKind, MemoryRegionConfig,
    validate::is_pci_address,
};

/// Which queues of an interface need staging because its engine moves packet bytes with
/// the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuCopies {
    /// Every layout it cannot deliver in place: GPU memory and header-data split (kernel
    /// sockets).
    EveryLayout,
    /// Only GPU memory (a DPDK virtual device: it splits buffers itself).
    GpuMemoryOnly,
}

/// How `iface`'s engine needs staging, or `None` when it reaches every layout itself.
pub fn cpu_copies(config: &Config, iface: &InterfaceConfig) -> Option<CpuCopies> {
    if super::Capabilities::of(config.engine).moves_bytes_with_cpu {
        Some(CpuCopies::EveryLayout)
    } else if config.engine == EngineKind::Dpdk && !is_pci_address(&iface.address) {
        Some(CpuCopies::GpuMemoryOnly)
    } else {
        None
    }
}

/// Name of the staging region of a queue.
pub fn staging_name(interface: &str, direction: Direction, queue: u16) -> String {
    format!("{interface}.{}{queue}.staging", direction.name())
}

/// The name of the host region a TX queue's flows write transformed frames into.
pub fn transform_name(interface: &str, queue: u16) -> String {
    format!("{interface}.tx{queue}.transform")
}

/// Staging buffers per queue: bursts in flight through the stage, with room to spare.
fn staging_buffers(batch: usize) -> usize {
    (batch * 16).max(1024)
}

/// `config` with a staging region for every queue that needs one on an interface whose
/// engine moves bytes with the CPU ([`cpu_copies`]): RX queues with a `device` region (or,
/// on sockets, two segments), TX queues whose first region is `device`. Regions already there are kept (so applying it twice is the
/// same as once). Pinned host memory when GPU memory is involved (the copies
/// then go by DMA), plain host memory otherwise.
pub fn with_staging_regions(config: &Config) -> Config {
    let mut c = config.clone();
    // Connection slots the NIC cannot deliver as laid out ([`super::rdma::SlotPlan`]).
    for m in super::rdma::staging_regions(config) {
        if c.memory_region(&m.name).is_none() {
            c.memory_regions.push(m);
        }
    }
    // TX flows: frames are copied into a host region of their own with room for the
    // headers the flows add, so the application's buffers keep what it wrote.
    for iface in &config.interfaces {
        let Some(tx) = iface.tx.as_ref().filter(|t| !t.flows.is_empty()) else {
            continue;
        };
        let added = tx.flows.iter().map(|f| f.added_bytes()).max().unwrap_or(0);
        for q in &tx.queues {
            let name = transform_name(&iface.name, q.id);
            if c.memory_region(&name).is_some() {
                continue;
            }
            let frame: usize = q
                .memory_regions
                .iter()
                .filter_map(|n| config.memory_region(n))
                .map(|m| m.buf_size)
                .sum();
            let affinity = q
                .memory_regions
                .first()
                .and_then(|n| config.memory_region(n))
                .map_or(0, |m| m.affinity);
            let mut m = MemoryRegionConfig::new(
                &name,
                MemoryKind::Host,
                staging_buffers(q.batch_size as usize),
                frame + added,
            );
            m.affinity = affinity;
            c.memory_regions.push(m);
        }
    }
    let kind_of = |name: &String| config.memory_region(name).map(|m| (m.kind, m));
    for iface in &config.interfaces {
        let Some(copies) = cpu_copies(config, iface) else {
            continue;
        };
        let every_layout = copies == CpuCopies::EveryLayout;
        for (direction, queues) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            for q in queues.into_iter().flatten() {
                let regions: Vec<_> = q.memory_regions.iter().filter_map(kind_of).collect();
                let on_gpu: Vec<_> = regions
                    .iter()
                    .filter(|(k, _)| *k == MemoryKind::Device)
                    .collect();
                let needs = match direction {
                    Direction::Rx => !on_gpu.is_empty() || (every_layout && regions.len() == 2),
                    Direction::Tx => regions
                        .first()
                        .is_some_and(|(k, _)| *k == MemoryKind::Device),
                };
                if !needs {
                    continue;
                }
                let buf_size = match direction {
                    Direction::Rx => regions.iter().map(|(_, m)| m.buf_size).sum(),
                    Direction::Tx => regions[0].1.buf_size,
                };
                let (kind, affinity) = match on_gpu.first() {
                    Some((_, m)) => (MemoryKind::HostPinned, m.affinity),
                    None => (MemoryKind::Host, regions[0].1.affinity),
                };
                let name = staging_name(&iface.name, direction, q.id);
                if c.memory_region(&name).is_some() {
                    continue;
                }
                let mut m = MemoryRegionConfig::new(
                    &name,
                    kind,
                    staging_buffers(q.batch_size as usize),
                    buf_size,
                );
                m.affinity = affinity;
                c.memory_regions.push(m);
            }
        }
    }
    c
}
