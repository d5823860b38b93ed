//! Cross-reference and machine checks, run after parsing and before anything is allocated.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::model::*;
use super::reader::suggest;
use std::collections::{HashMap, HashSet};

/// Runs every check on a parsed configuration.
pub fn check(d: &mut Diagnostics, c: &Config, online_cores: &dyn Fn(u32) -> bool) {
    duplicates(d, c);
    references(d, c);
    buffer_counts(d, c);
    engine_rules(d, c);
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
        if let Some(rx) = &iface.rx {
            let ids: Vec<u16> = rx.queues.iter().map(|q| q.id).collect();
            for (fi, f) in rx.flows.iter().enumerate() {
                for q in &f.queue_ids {
                    if !ids.contains(q) {
                        d.error(Kind::UnknownReference, &format!("interfaces[{i}].rx.flows[{fi}]"), Some(f.location), format!("flow `{}` sends to queue {q}, but interface `{}` has no RX queue with that id (ids: {ids:?})", f.name, iface.name));
                    }
                }
            }
        }
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

fn engine_rules(d: &mut Diagnostics, c: &Config) {
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
    if c.engine != EngineKind::Loopback && c.interfaces.is_empty() {
        d.error(
            Kind::Missing,
            "interfaces",
            None,
            "define at least one interface",
        );
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

fn bench_refs(d: &mut Diagnostics, c: &Config) {
    for (i, b) in c.bench.tx.iter().enumerate() {
        let path = format!("bench_tx[{i}]");
        let Some(iface) = c.interfaces.iter().find(|x| x.name == b.interface_name) else {
            unknown_interface(d, c, &path, b.location, &b.interface_name);
            continue;
        };
        let Some(q) = iface
            .tx
            .iter()
            .flat_map(|t| &t.queues)
            .find(|q| q.id == b.queue_id)
        else {
            d.error(
                Kind::UnknownReference,
                &path,
                Some(b.location),
                format!("interface `{}` has no TX queue {}", iface.name, b.queue_id),
            );
            continue;
        };
        let frame = u64::from(b.header_size) + u64::from(b.payload_size);
        let room: u64 = q
            .memory_regions
            .iter()
            .filter_map(|n| c.memory_region(n))
            .map(|m| m.buf_size as u64)
            .sum();
        if q.memory_regions.len() == 1 && room < frame && room > 0 {
            d.error(Kind::Range, &format!("{path}.payload_size"), Some(b.location), format!("packets of {frame} bytes (header_size {} + payload_size {}) do not fit the {room}-byte buffers of queue `{}`", b.header_size, b.payload_size, q.name));
        }
        let flows = u64::from(b.udp_src_port.len()) * u64::from(b.udp_dst_port.len());
        if flows > 1 << 20 {
            d.error(
                Kind::Range,
                &path,
                Some(b.location),
                format!("{flows} UDP port pairs; at most {} are tracked", 1 << 20),
            );
        }
    }
    for (i, b) in c.bench.rx.iter().enumerate() {
        let path = format!("bench_rx[{i}]");
        let Some(iface) = c.interfaces.iter().find(|x| x.name == b.interface_name) else {
            unknown_interface(d, c, &path, b.location, &b.interface_name);
            continue;
        };
        let queues: Vec<u16> = iface
            .rx
            .iter()
            .flat_map(|r| &r.queues)
            .map(|q| q.id)
            .collect();
        match b.queue_id {
            Some(q) if !queues.contains(&q) => d.error(
                Kind::UnknownReference,
                &path,
                Some(b.location),
                format!("interface `{}` has no RX queue {q}", iface.name),
            ),
            None if queues.is_empty() => d.error(
                Kind::UnknownReference,
                &path,
                Some(b.location),
                format!("interface `{}` has no RX queues", iface.name),
            ),
            _ => {}
        }
    }
}

fn unknown_interface(
    d: &mut Diagnostics,
    c: &Config,
    path: &str,
    at: super::yaml::Location,
    name: &str,
) {
    let names: Vec<&str> = c.interfaces.iter().map(|i| i.name.as_str()).collect();
    let mut msg = format!("unknown interface `{name}`");
    if let Some(best) = suggest(name, &names) {
        msg.push_str(&format!(", did you mean `{best}`?"));
    } else {
        msg.push_str(&format!(" (defined: {})", names.join(", ")));
    }
    d.error(
        Kind::UnknownReference,
        &format!("{path}.interface_name"),
        Some(at),
        msg,
    );
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
