//! Flow rules and reorder rules: what software steering and the reorder can run, with the
//! key path of every rule that cannot.

use super::*;

/// `reorder_configs`: the reference's rules. Each flow maps to exactly one queue (no RSS),
/// all flows of a config to the same queue, no flow in two configs; that queue has one
/// region (no header-data split); the output region holds a whole batch; memory kinds fit
/// where the reorder runs. Beyond the reference, conversion also runs on the CPU.
pub(super) fn reorder_rules(d: &mut Diagnostics, c: &Config) {
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
