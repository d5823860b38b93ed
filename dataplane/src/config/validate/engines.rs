//! Checks an engine needs: queue counts a DPDK vdev was created with, DPDK's buffer size
//! limit, and what a raw interface's address may be.

use super::*;

pub(super) fn engine_rules(d: &mut Diagnostics, c: &Config) {
    if c.engine == EngineKind::Loopback {
        for (i, iface) in c.interfaces.iter().enumerate() {
            if iface.address != "loopback" && !is_pci_address(&iface.address) {
                d.error(
                    Kind::Invalid,
                    &format!("interfaces[{i}].address"),
                    Some(iface.location),
                    format!(
                        "the software loopback needs address \"loopback\", got `{}`",
                        iface.address
                    ),
                );
            }
        }
    }
    if c.engine == EngineKind::Dpdk {
        for (i, iface) in c.interfaces.iter().enumerate() {
            vdev_queue_counts(d, &format!("interfaces[{i}].address"), iface);
        }
        dpdk_buffer_sizes(d, c);
    }
    if c.engine != EngineKind::Dpdk {
        for (i, iface) in c.interfaces.iter().enumerate() {
            let rx = iface.rx.as_ref().and_then(|r| r.descriptors).map(|_| "rx");
            let tx = iface.tx.as_ref().and_then(|t| t.descriptors).map(|_| "tx");
            for dir in rx.into_iter().chain(tx) {
                d.error(
                    Kind::Invalid,
                    &format!("interfaces[{i}].{dir}.descriptors"),
                    Some(iface.location),
                    format!(
                        "descriptors: the {} engine has no device rings (DPDK ports do; the ring to the application is ring_packets)",
                        c.engine.name()
                    ),
                );
            }
        }
    }
    if c.engine != EngineKind::Loopback && c.interfaces.is_empty() {
        d.error(
            Kind::Missing,
            "interfaces",
            None,
            "define at least one interface",
        );
    }
}

/// Virtual devices that open one queue pair unless their arguments ask for more: the
/// driver, its option, and the option's default.
pub(super) const VDEV_QUEUE_OPTIONS: &[(&str, &str, u64)] = &[
    ("net_af_packet", "qpairs", 1),
    ("net_af_xdp", "queue_count", 1),
];

/// A multi-queue interface on a vdev that opens fewer queues than configured would fail
/// deep inside `rte_eth_dev_configure`; say here which vdev option to change.
pub(super) fn vdev_queue_counts(d: &mut Diagnostics, path: &str, iface: &InterfaceConfig) {
    let mut parts = iface.address.split(',');
    let driver = parts.next().unwrap_or_default();
    let Some(&(_, option, default)) = VDEV_QUEUE_OPTIONS
        .iter()
        .find(|(prefix, _, _)| driver.starts_with(prefix))
    else {
        return;
    };
    let given = parts
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == option)
        .map(|(_, v)| v.trim().parse::<u64>());
    let opened = match given {
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            d.error(
                Kind::Invalid,
                path,
                Some(iface.location),
                format!("`{option}` of {driver} must be a number"),
            );
            return;
        }
        None => default,
    };
    let rx = iface.rx.as_ref().map_or(0, |r| r.queues.len()) as u64;
    let tx = iface.tx.as_ref().map_or(0, |t| t.queues.len()) as u64;
    let needed = rx.max(tx);
    if needed > opened {
        let how = if given.is_some() {
            format!("{option}={opened}")
        } else {
            format!("no {option}, so {default}")
        };
        d.error(Kind::Invalid, path, Some(iface.location), format!("{driver} opens {opened} queue pair(s) ({how}) but interface `{}` has {rx} RX and {tx} TX queues; add `,{option}={needed}` to the vdev string", iface.name));
    }
}

/// The largest buffer an mbuf describes: its data room is 16-bit, and DPDK keeps
/// headroom in front of received data.
pub const DPDK_MAX_BUF_SIZE: usize = u16::MAX as usize - 128;

/// Regions used by DPDK queues must fit an mbuf.
pub(super) fn dpdk_buffer_sizes(d: &mut Diagnostics, c: &Config) {
    for (i, m) in c.memory_regions.iter().enumerate() {
        let used = c
            .queues()
            .any(|(_, _, q)| q.memory_regions.contains(&m.name));
        if used && m.buf_size > DPDK_MAX_BUF_SIZE {
            d.error(Kind::Range, &format!("memory_regions[{i}].buf_size"), Some(m.location), format!("memory region `{}` has buf_size {}, but a DPDK mbuf holds at most {DPDK_MAX_BUF_SIZE} bytes (16-bit data room, 128 bytes of headroom); split packets over several regions (one per segment) instead", m.name, m.buf_size));
        }
    }
}

/// True for `dddd:bb:dd.f` or `bb:dd.f`.
pub fn is_pci_address(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
    match parts.as_slice() {
        [dom, bus, dev, f] => hex(dom, 4) && hex(bus, 2) && hex(dev, 2) && hex(f, 1),
        [bus, dev, f] => hex(bus, 2) && hex(dev, 2) && hex(f, 1),
        _ => false,
    }
}
