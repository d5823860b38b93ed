//! The bench sections (`bench_tx`, `bench_rx`, the peer benches): every interface, queue
//! and region they name exists, and a `bench_rx` layout matches its queue's segments.

use super::*;

pub(super) fn bench_refs(d: &mut Diagnostics, c: &Config) {
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
pub(super) fn bench_rx_layout(
    d: &mut Diagnostics,
    c: &Config,
    path: &str,
    b: &crate::config::model::BenchRxConfig,
    q: &crate::config::model::QueueConfig,
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

pub(super) fn unknown_interface(
    d: &mut Diagnostics,
    c: &Config,
    path: &str,
    at: crate::config::yaml::Location,
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
