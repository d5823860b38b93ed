//! The EAL's arguments and memory, and the mbuf pools they account for.

use super::*;

/// Pool of segment `seg` of queue `q` (one pool per segment: header-data split has two).
pub(super) fn pool_size(
    config: &Config,
    q: &QueueConfig,
    descriptors: u16,
    seg: usize,
) -> PoolSize {
    let region = q
        .memory_regions
        .get(seg)
        .and_then(|n| config.memory_regions.iter().find(|m| &m.name == n));
    let (configured, size) = region.map_or((4096, WHOLE_FRAME_ROOM), |m| (m.num_bufs, m.buf_size));
    let size = if q.memory_regions.len() > 1 {
        size
    } else {
        size.max(WHOLE_FRAME_ROOM)
    };
    PoolSize {
        configured,
        mbufs: configured.max(min_mbufs(descriptors, q.batch_size)),
        data_room: (size + HEADROOM).min(u16::MAX as usize),
    }
}

/// EAL memory a queue accounts for: a pool per segment. A lent queue's pool sits over its
/// region, but EAL still holds the mbuf headers; it is counted whole, for slack.
pub(super) fn eal_bytes_of(config: &Config, q: &QueueConfig, descriptors: u16) -> u64 {
    (0..q.memory_regions.len().max(1))
        .map(|seg| pool_size(config, q, descriptors, seg).bytes())
        .sum()
}

/// EAL arguments from `config`: the main lcore on `master_core`, huge pages or `--no-huge` (with `-m`) when no region is `huge`, every PCI address allowed
/// (`-a`) and every other address as a `--vdev`.
pub(super) fn eal_args(config: &Config, memory_bytes: u64) -> Vec<String> {
    let mut a = vec![
        "dataplane".to_owned(),
        "-l".to_owned(),
        config.master_core.to_string(),
        format!(
            "--log-level={}",
            crate::config::eal_log_level(&config.log_level, config.debug)
        ),
    ];
    // The EAL's own start-up lines only when debugging.
    if crate::config::eal_log_level(&config.log_level, config.debug) < 8 {
        a.push("--log-level=lib.eal:error".to_owned());
    }
    if config
        .memory_regions
        .iter()
        .any(|m| m.kind == MemoryKind::Huge)
    {
        a.push("--huge-unlink".to_owned());
    } else {
        a.extend([
            "--no-huge".to_owned(),
            "--no-shconf".to_owned(),
            "-m".to_owned(),
            memory_bytes.div_ceil(1 << 20).to_string(),
        ]);
    }
    let mut pci = false;
    for iface in &config.interfaces {
        if is_pci_address(&iface.address) {
            pci = true;
            a.extend(["-a".to_owned(), iface.address.clone()]);
        } else {
            a.push(format!("--vdev={}", vdev_args(config, iface)));
        }
    }
    if pci {
        // Regions are this process's own memory, registered with EAL with their virtual
        // addresses as IOVAs (lent to a pool, or attached to TX mbufs): a NIC must see
        // virtual addresses, through the IOMMU (vfio) or its own translation (mlx5).
        a.push("--iova-mode=va".to_owned());
    } else {
        a.push("--no-pci".to_owned());
    }
    a
}

/// The vdev string of `iface` as EAL gets it: its `address`, and for a net_memif port
/// whose frames exceed memif's default 2048-byte ring buffers, `bsize` (the next power of
/// two above the largest frame) unless the address sets it. A frame spread over several
/// memif buffers arrives corrupted from DPDK 22.11's memif (seen with 9000-byte frames:
/// duplicates, gaps and cut frames; none with one buffer per frame).
pub(super) fn vdev_args(config: &Config, iface: &crate::config::InterfaceConfig) -> String {
    let address = &iface.address;
    let frame = largest_frame(config, iface).min(MAX_FRAME);
    let memif = address.starts_with("net_memif");
    let given = address.split(',').any(|kv| kv.trim().starts_with("bsize="));
    if memif && !given && frame > MEMIF_BUFFER {
        format!("{address},bsize={}", frame.next_power_of_two())
    } else {
        address.clone()
    }
}

/// memif's default ring buffer size (`bsize`).
const MEMIF_BUFFER: usize = 2048;
