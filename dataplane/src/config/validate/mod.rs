//! Cross-reference and machine checks, run after parsing and before anything is allocated.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::model::*;
use super::reader::suggest;
use std::collections::{HashMap, HashSet};

mod bench;
mod engines;
mod flows;
use bench::*;
use engines::*;
pub use engines::{DPDK_MAX_BUF_SIZE, is_pci_address};
pub use flows::flow_rules;
use flows::*;

/// Runs every check on a parsed configuration.
pub fn check(
    d: &mut Diagnostics,
    c: &Config,
    online_cores: &dyn Fn(u32) -> bool,
    host_memory_bytes: Option<u64>,
) {
    duplicates(d, c);
    references(d, c);
    buffer_counts(d, c);
    if let Some(total) = host_memory_bytes {
        memory_totals(d, c, total);
    }
    engine_rules(d, c);
    for (i, iface) in c.interfaces.iter().enumerate() {
        if let Some(tx) = &iface.tx {
            let mut ids = HashMap::new();
            for (fi, f) in tx.flows.iter().enumerate() {
                let fp = format!("interfaces[{i}].tx.flows[{fi}]");
                if f.id != 0
                    && let Some(first) = ids.insert(f.id, fi)
                {
                    d.error(
                        Kind::Duplicate,
                        &format!("{fp}.id"),
                        Some(f.location),
                        format!("duplicate TX flow id {} (also flows[{first}])", f.id),
                    );
                }
                if matches!(c.engine, EngineKind::Socket | EngineKind::Rdma) {
                    d.error(Kind::NotSupported, &format!("{fp}.actions"), Some(f.location), format!("not supported on the {} engine: TX flow `{}` (the kernel or the RDMA NIC writes the frame headers, so there is no Ethernet frame to tag or encapsulate)", c.engine.name(), f.name));
                }
                if f.matches.flex.is_some() {
                    d.error(Kind::NotSupported, &format!("{fp}.match.flex"), Some(f.location), format!("not supported: match.flex in TX flow `{}` (flex items are an RX parser's)", f.name));
                }
                for (ti, t) in f.transforms.iter().enumerate() {
                    if let crate::config::TxTransform::TunnelEncap(tc) = t {
                        for (missing, key) in [
                            (tc.outer_ipv4_src.is_none(), "outer_ipv4_src"),
                            (tc.outer_ipv4_dst.is_none(), "outer_ipv4_dst"),
                        ] {
                            if missing {
                                d.error(Kind::Missing, &format!("{fp}.actions[{ti}].tunnel.{key}"), Some(f.location), format!("TX flow `{}`: a tunnel_encap needs {key} (the outer IPv4 header's address)", f.name));
                            }
                        }
                    }
                }
            }
        }
        if let Some(rx) = &iface.rx
            && c.engine == EngineKind::Socket
        {
            for (fi, f) in rx.flows.iter().enumerate() {
                let m = &f.matches;
                let layer2 = [
                    (m.vlan_id.is_some(), "vlan_id"),
                    (m.ethernet.is_some(), "ethernet"),
                    (m.ecpri.is_some(), "ecpri"),
                ];
                for (_, key) in layer2.iter().filter(|(set, _)| *set) {
                    d.error(Kind::NotSupported, &format!("interfaces[{i}].rx.flows[{fi}].match.{key}"), Some(f.location), format!("not supported on the socket engine: match.{key} in flow `{}` (a kernel socket receives datagrams without their Ethernet header, so the rule could never match)", f.name));
                }
            }
        }
        if let Some(rx) = &iface.rx {
            flow_rules(
                d,
                &format!("interfaces[{i}].rx"),
                &iface.name,
                rx,
                c.engine.software_steering(),
            );
        }
    }
    for (i, iface) in c.interfaces.iter().enumerate() {
        ip_versions(d, c, i, iface);
        multicast_rules(d, c, i, iface);
        if iface.faults.is_some() && c.engine != EngineKind::Loopback {
            d.error(Kind::Invalid, &format!("interfaces[{i}].fault_injection"), Some(iface.location), format!("fault injection runs on the software loopback's wire (loopback: \"sw\"); the {} engine has no such wire", c.engine.name()));
        }
    }
    reorder_rules(d, c);
    bench_refs(d, c);
    cores(d, c, online_cores);
}

fn duplicates(d: &mut Diagnostics, c: &Config) {
    let mut seen = HashMap::new();
    for (i, m) in c.memory_regions.iter().enumerate() {
        if let Some(first) = seen.insert(m.name.as_str(), i) {
            d.error(
                Kind::Duplicate,
                &format!("memory_regions[{i}].name"),
                Some(m.location),
                format!(
                    "duplicate memory region name `{}` (first defined as memory_regions[{first}])",
                    m.name
                ),
            );
        }
    }
    let mut seen = HashMap::new();
    for (i, iface) in c.interfaces.iter().enumerate() {
        if let Some(first) = seen.insert(iface.name.as_str(), i) {
            d.error(
                Kind::Duplicate,
                &format!("interfaces[{i}].name"),
                Some(iface.location),
                format!(
                    "duplicate interface name `{}` (first defined as interfaces[{first}])",
                    iface.name
                ),
            );
        }
        let mut names = HashMap::new();
        for (dir, list) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            let mut ids = HashMap::new();
            for (qi, q) in list.into_iter().flatten().enumerate() {
                let path = format!("interfaces[{i}].{}.queues[{qi}]", dir.name());
                if let Some(first) = ids.insert(q.id, qi) {
                    d.error(
                        Kind::Duplicate,
                        &format!("{path}.id"),
                        Some(q.location),
                        format!(
                            "duplicate {} queue id {} on interface `{}` (also {}.queues[{first}])",
                            dir.name(),
                            q.id,
                            iface.name,
                            dir.name()
                        ),
                    );
                }
                if let Some((fd, fq)) = names.insert(q.name.as_str(), (dir, qi)) {
                    d.error(
                        Kind::Duplicate,
                        &format!("{path}.name"),
                        Some(q.location),
                        format!(
                            "duplicate queue name `{}` on interface `{}` (also {}.queues[{fq}])",
                            q.name,
                            iface.name,
                            fd.name()
                        ),
                    );
                }
            }
        }
        if let Some(rx) = &iface.rx {
            let mut names = HashMap::new();
            let mut ids = HashMap::new();
            for (fi, f) in rx.flows.iter().enumerate() {
                let path = format!("interfaces[{i}].rx.flows[{fi}]");
                if let Some(first) = names.insert(f.name.as_str(), fi) {
                    d.error(
                        Kind::Duplicate,
                        &format!("{path}.name"),
                        Some(f.location),
                        format!("duplicate flow name `{}` (also flows[{first}])", f.name),
                    );
                }
                // Id 0 means "no flow" in the reference and is used by many flows there.
                if f.id != 0
                    && let Some(first) = ids.insert(f.id, fi)
                {
                    d.error(
                        Kind::Duplicate,
                        &format!("{path}.id"),
                        Some(f.location),
                        format!("duplicate flow id {} (also flows[{first}])", f.id),
                    );
                }
            }
        }
    }
}

fn references(d: &mut Diagnostics, c: &Config) {
    let names: Vec<&str> = c.memory_regions.iter().map(|m| m.name.as_str()).collect();
    let mut used = HashSet::new();
    let socket_engine = matches!(c.engine, EngineKind::Rdma | EngineKind::Socket);
    for (i, iface) in c.interfaces.iter().enumerate() {
        for (dir, list) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            for (qi, q) in list.into_iter().flatten().enumerate() {
                let path = format!("interfaces[{i}].{}.queues[{qi}]", dir.name());
                if q.memory_regions.is_empty() && !socket_engine {
                    d.error(
                        Kind::Missing,
                        &path,
                        Some(q.location),
                        format!(
                            "queue `{}` needs `memory_regions` (one region per segment)",
                            q.name
                        ),
                    );
                }
                for (mi, name) in q.memory_regions.iter().enumerate() {
                    used.insert(name.as_str());
                    if !names.contains(&name.as_str()) {
                        let mut msg =
                            format!("queue `{}` names unknown memory region `{name}`", q.name);
                        match suggest(name, &names) {
                            Some(best) => msg.push_str(&format!(", did you mean `{best}`?")),
                            None => msg.push_str(&format!(" (defined: {})", names.join(", "))),
                        }
                        d.error(
                            Kind::UnknownReference,
                            &format!("{path}.memory_regions[{mi}]"),
                            Some(q.location),
                            msg,
                        );
                    }
                }
            }
        }
    }
    for r in c
        .interfaces
        .iter()
        .filter_map(|i| i.rx.as_ref())
        .flat_map(|rx| &rx.reorder)
    {
        used.insert(r.memory_region.as_str());
    }
    for (i, m) in c.memory_regions.iter().enumerate() {
        if !used.contains(m.name.as_str()) && !socket_engine {
            d.warn(
                Kind::Invalid,
                &format!("memory_regions[{i}]"),
                Some(m.location),
                format!("memory region `{}` is not used by any queue", m.name),
            );
        }
    }
}

/// Each queue holds up to one burst of buffers from each of its regions at a time, so a
/// region needs at least the sum of its queues' batch sizes, and twice that to keep a
/// pipeline busy while the application still holds the previous bursts.
/// Host memory regions (host, huge, host_pinned) must fit in the machine's memory, each
/// and together; device memory is the GPU's and is checked when allocated.
fn memory_totals(d: &mut Diagnostics, c: &Config, machine: u64) {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut sum = 0u64;
    for (i, m) in c.memory_regions.iter().enumerate() {
        if m.kind == MemoryKind::Device {
            continue;
        }
        // Host buffers start on 64-byte boundaries; the pool holds a 4-byte index each.
        let stride = (m.buf_size as u64).next_multiple_of(64) + 4;
        let bytes = (m.num_bufs as u64).saturating_mul(stride);
        sum = sum.saturating_add(bytes);
        if bytes > machine {
            d.error(Kind::Range, &format!("memory_regions[{i}].num_bufs"), Some(m.location), format!("memory region `{}` needs at least {bytes} bytes ({:.1} GiB: num_bufs {} x buf_size {} on 64-byte boundaries, plus the pool), more than this machine's {machine} bytes ({:.1} GiB) of memory", m.name, gib(bytes), m.num_bufs, m.buf_size, gib(machine)));
            return;
        }
    }
    if sum > machine {
        let at = c.memory_regions.first().map(|m| m.location);
        d.error(Kind::Range, "memory_regions", at, format!("the host memory regions need {sum} bytes ({:.1} GiB) together, more than this machine's {machine} bytes ({:.1} GiB) of memory", gib(sum), gib(machine)));
    }
}

fn buffer_counts(d: &mut Diagnostics, c: &Config) {
    for (i, m) in c.memory_regions.iter().enumerate() {
        let users: Vec<&QueueConfig> = c
            .queues()
            .filter(|(_, _, q)| q.memory_regions.contains(&m.name))
            .map(|(_, _, q)| q)
            .collect();
        let need: u64 = users.iter().map(|q| u64::from(q.batch_size)).sum();
        if users.is_empty() {
            continue;
        }
        let list = users
            .iter()
            .map(|q| format!("{} of `{}`", q.batch_size, q.name))
            .collect::<Vec<_>>()
            .join(" + ");
        let path = format!("memory_regions[{i}].num_bufs");
        if (m.num_bufs as u64) < need {
            d.error(Kind::Range, &path, Some(m.location), format!("memory region `{}` has {} buffers but its queues need at least {need} (batch_size {list}); set num_bufs to {} or more", m.name, m.num_bufs, 2 * need));
        } else if (m.num_bufs as u64) < 2 * need {
            d.warn(Kind::Range, &path, Some(m.location), format!("memory region `{}` has {} buffers, less than twice the {need} its queues take per burst round; the pipeline will stall on buffers (suggest {})", m.name, m.num_bufs, 2 * need));
        }
    }
}

fn cores(d: &mut Diagnostics, c: &Config, online: &dyn Fn(u32) -> bool) {
    let mut report = |path: String, core: u32, at| {
        if !online(core) {
            d.warn(Kind::Machine, &path, at, format!("cpu_core {core} is not available to this process on this machine; starting will fail"));
        }
    };
    report("master_core".into(), c.master_core, None);
    for (i, iface) in c.interfaces.iter().enumerate() {
        for (dir, list) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            for (qi, q) in list.into_iter().flatten().enumerate() {
                report(
                    format!("interfaces[{i}].{}.queues[{qi}].cpu_core", dir.name()),
                    q.cpu_core,
                    Some(q.location),
                );
                for core in q.stage_core.iter().chain(&q.copy_cores) {
                    report(
                        format!("interfaces[{i}].{}.queues[{qi}].stage_core", dir.name()),
                        *core,
                        Some(q.location),
                    );
                }
            }
        }
    }
    for (i, b) in c.bench.tx.iter().enumerate() {
        if let Some(core) = b.cpu_core {
            report(format!("bench_tx[{i}].cpu_core"), core, Some(b.location));
        }
    }
    for (i, b) in c.bench.rx.iter().enumerate() {
        if let Some(core) = b.cpu_core {
            report(format!("bench_rx[{i}].cpu_core"), core, Some(b.location));
        }
    }
}

/// `multicast_groups`: a UDP server on the socket engine joins them (the kernel sends the
/// IGMP reports); a DPDK port joins through its kernel netdev. Elsewhere nothing would
/// join, so the key is refused.
/// One IP version per interface: its addresses agree; IPv6 only on the socket engine,
/// whose flow rules then read no IPv4 or UDP field (an IPv6 datagram has none); groups
/// of the sockets' version.
fn ip_versions(d: &mut Diagnostics, c: &Config, i: usize, iface: &crate::config::InterfaceConfig) {
    let Some(s) = iface.socket.as_ref() else {
        return;
    };
    let path = format!("interfaces[{i}].socket_config");
    let v6 = match (s.local, s.remote) {
        (Some(l), Some(r)) if l.ip.is_ipv6() != r.ip.is_ipv6() => {
            d.error(
                Kind::Invalid,
                &format!("{path}.remote_addr"),
                Some(iface.location),
                format!(
                    "interface `{}`: local_addr {} and remote_addr {} are of different IP versions (a socket speaks one)",
                    iface.name, l.ip, r.ip
                ),
            );
            return;
        }
        (l, r) => l.or(r).map_or_else(
            || iface.multicast.first().is_some_and(|g| g.group.is_ipv6()),
            |e| e.ip.is_ipv6(),
        ),
    };
    if !v6 {
        if c.engine == EngineKind::Socket
            && let Some(g) = iface.multicast.iter().find(|g| g.group.is_ipv6())
        {
            d.error(Kind::Invalid, &format!("interfaces[{i}].multicast_groups"), Some(iface.location), format!("interface `{}`: IPv6 group {} on an IPv4 local_addr; give an IPv6 local_addr (udp://[::]:PORT) to join IPv6 groups", iface.name, g.group));
        }
        return;
    }
    if c.engine != EngineKind::Socket {
        d.error(
            Kind::NotSupported,
            &path,
            Some(iface.location),
            format!(
                "interface `{}`: not supported on the {} engine: IPv6 addresses (the socket engine speaks IPv6)",
                iface.name,
                c.engine.name()
            ),
        );
        return;
    }
    if let Some(g) = iface.multicast.iter().find(|g| g.group.is_ipv4()) {
        d.error(Kind::Invalid, &format!("interfaces[{i}].multicast_groups"), Some(iface.location), format!("interface `{}`: IPv4 group {} on an IPv6 local_addr; the sockets of one interface speak one IP version", iface.name, g.group));
    }
    for (fi, f) in iface.rx.iter().flat_map(|rx| rx.flows.iter()).enumerate() {
        let m = &f.matches;
        let fields = [
            (m.ipv4_src.is_some(), "ipv4_src"),
            (m.ipv4_dst.is_some(), "ipv4_dst"),
            (m.ipv4_len.is_some(), "ipv4_len"),
            (m.udp_src.is_some(), "udp_src"),
            (m.udp_dst.is_some(), "udp_dst"),
            (m.flex.is_some(), "flex"),
        ];
        for (_, key) in fields.iter().filter(|(set, _)| *set) {
            d.error(Kind::NotSupported, &format!("interfaces[{i}].rx.flows[{fi}].match.{key}"), Some(f.location), format!("not supported on an IPv6 socket interface: match.{key} in flow `{}` (the rules read IPv4 and UDP header fields, which an IPv6 datagram does not have)", f.name));
        }
    }
}

fn multicast_rules(
    d: &mut Diagnostics,
    c: &Config,
    i: usize,
    iface: &crate::config::InterfaceConfig,
) {
    if iface.multicast.is_empty() {
        return;
    }
    let path = format!("interfaces[{i}].multicast_groups");
    let why = match (c.engine, iface.socket.as_ref()) {
        (EngineKind::Socket, Some(s)) if s.transport != crate::config::Transport::Udp => {
            Some("multicast is UDP; this interface is TCP".to_owned())
        }
        (EngineKind::Socket, Some(s)) if s.mode != crate::config::SocketMode::Server => Some(
            "a UDP server (mode: server) joins groups; a client sends to a group with remote_addr"
                .to_owned(),
        ),
        (EngineKind::Socket | EngineKind::Dpdk, _) => None,
        (other, _) => Some(format!(
            "not supported on the {} engine: multicast_groups (nothing there would join them)",
            other.name()
        )),
    };
    if let Some(why) = why {
        d.error(
            Kind::NotSupported,
            &path,
            Some(iface.location),
            format!("interface `{}`: {why}", iface.name),
        );
    }
}
