//! Cross-reference and machine checks, run after parsing and before anything is allocated.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::model::*;
use super::reader::suggest;
use std::collections::{HashMap, HashSet};

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
                if c.engine.software_steering() {
                    d.error(Kind::NotSupported, &format!("{fp}.actions"), Some(f.location), format!("not supported in software steering: {} (VLAN push and tunnel encap need a NIC that does them)", f.name));
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
        if iface.faults.is_some() && c.engine != EngineKind::Loopback {
            d.error(Kind::Invalid, &format!("interfaces[{i}].fault_injection"), Some(iface.location), format!("fault injection runs on the software loopback's wire (loopback: \"sw\"); the {} engine has no such wire", c.engine.name()));
        }
    }
    reorder_rules(d, c);
    bench_refs(d, c);
    cores(d, c, online_cores);
}

/// `reorder_configs`: the reference's rules. Each flow maps to exactly one queue (no RSS),
/// all flows of a config to the same queue, no flow in two configs; that queue has one
/// region (no header-data split); the output region holds a whole batch; memory kinds fit
/// where the reorder runs. Beyond the reference, conversion also runs on the CPU.
fn reorder_rules(d: &mut Diagnostics, c: &Config) {
    let region = |name: &str| c.memory_regions.iter().find(|m| m.name == name);
    for (i, iface) in c.interfaces.iter().enumerate() {
        let Some(rx) = &iface.rx else { continue };
        let mut names = HashMap::new();
        let mut claimed: HashMap<u32, usize> = HashMap::new();
        for (k, r) in rx.reorder.iter().enumerate() {
            let path = format!("interfaces[{i}].rx.reorder_configs[{k}]");
            let at = Some(r.location);
            if let Some(first) = names.insert(r.name.as_str(), k) {
                d.error(
                    Kind::Duplicate,
                    &format!("{path}.name"),
                    at,
                    format!(
                        "duplicate reorder name `{}` (also reorder_configs[{first}])",
                        r.name
                    ),
                );
            }
            if c.engine == EngineKind::Rdma || c.engine == EngineKind::Socket {
                d.error(Kind::NotSupported, &path, at, "not supported: reorder_configs on socket or RDMA interfaces (raw streams only)");
                continue;
            }
            let mut queue = None;
            for (fi, &fid) in r.flow_ids.iter().enumerate() {
                let fp = format!("{path}.flow_ids[{fi}]");
                if let Some(other) = claimed.insert(fid, k) {
                    d.error(
                        Kind::Duplicate,
                        &fp,
                        at,
                        format!("flow id {fid} is already reordered by reorder_configs[{other}]"),
                    );
                }
                let Some(flow) = rx.flows.iter().find(|f| f.id == fid) else {
                    d.error(
                        Kind::UnknownReference,
                        &fp,
                        at,
                        format!("no flow in rx.flows has id {fid}"),
                    );
                    continue;
                };
                match flow.queue_ids.as_slice() {
                    [q] if queue.is_none_or(|first| first == *q) => queue = Some(*q),
                    [q] => d.error(Kind::Invalid, &fp, at, format!("flow `{}` goes to queue {q}, the reorder's other flows to queue {}; one reorder serves one queue", flow.name, queue.unwrap_or_default())),
                    _ => d.error(Kind::Invalid, &fp, at, format!("flow `{}` spreads over several queues (RSS); a reordered flow must go to exactly one queue", flow.name)),
                }
            }
            let Some(out) = region(&r.memory_region) else {
                d.error(
                    Kind::UnknownReference,
                    &format!("{path}.memory_region"),
                    at,
                    format!("unknown memory region `{}`", r.memory_region),
                );
                continue;
            };
            let Some(q) = queue.and_then(|id| rx.queues.iter().find(|q| q.id == id)) else {
                continue;
            };
            if q.memory_regions.len() != 1 {
                d.error(Kind::Invalid, &path, at, format!("queue `{}` has {} memory regions; a reordered queue has exactly one (no header-data split)", q.name, q.memory_regions.len()));
                continue;
            }
            let Some(src) = region(&q.memory_regions[0]) else {
                continue;
            };
            if r.payload_byte_offset as usize >= src.buf_size {
                d.error(
                    Kind::Range,
                    &format!("{path}.payload_byte_offset"),
                    at,
                    format!(
                        "payload_byte_offset {} is not below the source region's buf_size {}",
                        r.payload_byte_offset, src.buf_size
                    ),
                );
                continue;
            }
            let spec = r.spec(src.buf_size);
            if spec.sequence().end_byte() > src.buf_size {
                d.error(Kind::Range, &format!("{path}.method"), at, format!("the sequence number (bits {}..{}) lies past the source region's {}-byte buffers", spec.sequence().bit_offset, spec.sequence().bit_offset + spec.sequence().bit_width, src.buf_size));
            }
            if out.buf_size < spec.batch_bytes() {
                d.error(Kind::Range, &format!("{path}.memory_region"), at, format!(
                    "region `{}` has buf_size {}, but a batch needs {} bytes ({} packets x {} bytes per slot; a slot is the source buf_size {} minus payload_byte_offset {}{})",
                    out.name, out.buf_size, spec.batch_bytes(), spec.packets_per_batch(), spec.out_slot_bytes(), src.buf_size, r.payload_byte_offset,
                    if r.conversion.is_some() { ", converted" } else { "" }
                ));
            }
            let gpu_kinds = [MemoryKind::Device, MemoryKind::HostPinned];
            match r.kind {
                ReorderKind::Gpu => {
                    for (what, m) in [("source", src), ("output", out)] {
                        if !gpu_kinds.contains(&m.kind) {
                            d.error(Kind::Invalid, &path, at, format!("a gpu reorder reads and writes GPU-reachable memory: the {what} region `{}` is {}, use device or host_pinned", m.name, m.kind.name()));
                        }
                    }
                }
                ReorderKind::Cpu => {
                    for (what, m) in [("source", src), ("output", out)] {
                        if m.kind == MemoryKind::Device {
                            d.error(Kind::Invalid, &path, at, format!("a cpu reorder reads and writes host memory: the {what} region `{}` is device memory, use reorder_type: gpu", m.name));
                        }
                    }
                }
            }
        }
    }
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

/// Checks the flow rules of one interface's `rx` section (`path`): queue and flex-item
/// references, one match class per interface, rules hidden by earlier ones, and what
/// software steering cannot do. Also used for flows added at run time.
pub fn flow_rules(d: &mut Diagnostics, path: &str, interface: &str, rx: &RxConfig, software: bool) {
    let queue_ids: Vec<u16> = rx.queues.iter().map(|q| q.id).collect();
    let mut flex_ids = HashMap::new();
    let mut flex_names = HashMap::new();
    for (xi, x) in rx.flex_items.iter().enumerate() {
        let xp = format!("{path}.flex_items[{xi}]");
        if let Some(first) = flex_ids.insert(x.id, xi) {
            d.error(
                Kind::Duplicate,
                &format!("{xp}.id"),
                Some(x.location),
                format!("duplicate flex item id {} (also flex_items[{first}])", x.id),
            );
        }
        if let Some(first) = flex_names.insert(x.name.as_str(), xi) {
            d.error(
                Kind::Duplicate,
                &format!("{xp}.name"),
                Some(x.location),
                format!(
                    "duplicate flex item name `{}` (also flex_items[{first}])",
                    x.name
                ),
            );
        }
    }
    let mut class: Option<(MatchClass, &FlowConfig)> = None;
    for (fi, f) in rx.flows.iter().enumerate() {
        let fp = format!("{path}.flows[{fi}]");
        let mut seen = HashSet::new();
        for q in &f.queue_ids {
            if !queue_ids.contains(q) {
                d.error(Kind::UnknownReference, &fp, Some(f.location), format!("flow `{}` sends to queue {q}, but interface `{interface}` has no RX queue with that id (ids: {queue_ids:?})", f.name));
            }
            if !seen.insert(q) {
                d.error(
                    Kind::Duplicate,
                    &fp,
                    Some(f.location),
                    format!("flow `{}` lists queue {q} twice", f.name),
                );
            }
        }
        let c = f.matches.class();
        if c == MatchClass::Ecpri && f.queue_ids.len() > 1 {
            d.error(Kind::Invalid, &fp, Some(f.location), format!("flow `{}`: eCPRI flows cannot spread over several queues (RSS hashes IPv4/UDP)", f.name));
        }
        if let Some(fm) = &f.matches.flex
            && !flex_ids.contains_key(&fm.item_id)
        {
            d.error(
                Kind::UnknownReference,
                &format!("{fp}.match.flex_item_id"),
                Some(f.location),
                format!(
                    "flow `{}` uses flex item {}, but `{path}.flex_items` has no such id",
                    f.name, fm.item_id
                ),
            );
        }
        match class {
            None => class = Some((c, f)),
            Some((first, ff)) if first != c => d.error(Kind::Invalid, &fp, Some(f.location), format!("flow `{}` matches {} fields but flow `{}` matches {} fields; one interface takes one match class", f.name, c.name(), ff.name, first.name())),
            _ => {}
        }
        if let Some((ei, earlier)) = rx.flows[..fi]
            .iter()
            .enumerate()
            .find(|(_, e)| e.matches.covers(&f.matches))
        {
            d.warn(Kind::Invalid, &fp, Some(f.location), format!("flow `{}` can never match: the earlier flow `{}` (flows[{ei}]) takes every packet it would", f.name, earlier.name));
        }
        if software && !f.transforms.is_empty() {
            d.error(Kind::NotSupported, &format!("{fp}.actions"), Some(f.location), format!("not supported in software steering: {} (VLAN pop and tunnel decap need a NIC that does them)", f.name));
        }
    }
    if let Some(q) = rx.exception_queue {
        if !queue_ids.contains(&q) {
            d.error(Kind::UnknownReference, &format!("{path}.exception_queue"), None, format!("exception queue {q}: interface `{interface}` has no RX queue with that id (ids: {queue_ids:?})"));
        } else if !rx.flow_isolation {
            d.warn(Kind::Invalid, &format!("{path}.exception_queue"), None, "exception_queue has no effect without flow_isolation: true (unmatched packets go to the queues)");
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
    if c.engine == EngineKind::Dpdk {
        for (i, iface) in c.interfaces.iter().enumerate() {
            vdev_queue_counts(d, &format!("interfaces[{i}].address"), iface);
        }
        dpdk_buffer_sizes(d, c);
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
const VDEV_QUEUE_OPTIONS: &[(&str, &str, u64)] = &[
    ("net_af_packet", "qpairs", 1),
    ("net_af_xdp", "queue_count", 1),
];

/// A multi-queue interface on a vdev that opens fewer queues than configured would fail
/// deep inside `rte_eth_dev_configure`; say here which vdev option to change.
fn vdev_queue_counts(d: &mut Diagnostics, path: &str, iface: &InterfaceConfig) {
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
fn dpdk_buffer_sizes(d: &mut Diagnostics, c: &Config) {
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
        let first_kind = q
            .memory_regions
            .first()
            .and_then(|n| c.memory_region(n))
            .map(|m| m.kind);
        if b.gpu_direct && first_kind.is_some_and(|k| k != MemoryKind::Device) {
            d.error(
                Kind::Invalid,
                &format!("{path}.gpu_direct"),
                Some(b.location),
                format!(
                    "gpu_direct: true writes frames into GPU memory, but queue `{}` sends from {} memory; give it a `device` region or set gpu_direct: false",
                    q.name,
                    first_kind.map_or("no", |k| k.name())
                ),
            );
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
        for q in iface
            .rx
            .iter()
            .flat_map(|r| &r.queues)
            .filter(|q| b.queue_id.is_none_or(|id| id == q.id))
        {
            bench_rx_layout(d, c, &path, b, q);
        }
    }
    if let Some(rq) = &c.bench.reorder_quantize {
        let found = c
            .interfaces
            .iter()
            .filter_map(|i| i.rx.as_ref())
            .flat_map(|r| &r.reorder)
            .any(|r| r.conversion == Some(rq.conversion));
        if !found {
            d.error(
                Kind::UnknownReference,
                "bench_reorder_quantize",
                Some(rq.location),
                format!(
                    "no reorder_configs entry converts {:?} to {:?} ({} order): the quantize bench verifies such a reorder's output",
                    rq.conversion.input,
                    rq.conversion.output,
                    if rq.conversion.network_order { "network" } else { "host" }
                ),
            );
        }
    }
}

/// `bench_rx` keys that describe the layout the application expects, against queue `q`.
fn bench_rx_layout(
    d: &mut Diagnostics,
    c: &Config,
    path: &str,
    b: &super::model::BenchRxConfig,
    q: &super::model::QueueConfig,
) {
    let regions: Vec<_> = q
        .memory_regions
        .iter()
        .filter_map(|n| c.memory_region(n))
        .collect();
    let on_gpu = regions.iter().any(|m| m.kind == MemoryKind::Device);
    let mut conflict = |key: &str, msg: String| {
        d.error(
            Kind::Invalid,
            &format!("{path}.{key}"),
            Some(b.location),
            msg,
        )
    };
    if let Some(g) = b.gpu_direct
        && g != on_gpu
    {
        conflict(
            "gpu_direct",
            format!(
                "gpu_direct: {g}, but RX queue `{}` delivers into {}",
                q.name,
                if on_gpu {
                    "GPU memory"
                } else {
                    "host memory only"
                }
            ),
        );
    }
    if let Some(split) = b.split_boundary
        && split != (regions.len() == 2)
    {
        conflict(
            "split_boundary",
            format!(
                "split_boundary: {split}, but RX queue `{}` has {} segment(s)",
                q.name,
                regions.len()
            ),
        );
    }
    if let Some(batch) = b.batch_size
        && q.batch_size > batch
    {
        conflict(
            "batch_size",
            format!(
                "RX queue `{}` delivers bursts of up to {} packets, more than batch_size {batch}",
                q.name, q.batch_size
            ),
        );
    }
    if let (Some(true), Some(h), Some(first)) = (b.split_boundary, b.header_size, regions.first())
        && (first.buf_size as u64) < u64::from(h)
    {
        conflict(
            "header_size",
            format!(
                "header_size {h} does not fit the {}-byte header buffers of RX queue `{}`",
                first.buf_size, q.name
            ),
        );
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
