//! `rx.reorders[]`: reorder methods, bit fields and data conversions.

use super::*;

pub(super) fn bit_field(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BitField> {
    let mut m = MapReader::open(d, node, path)?;
    let bit_offset = m.required(d, "bit_offset", |d, n, p| r::uint_in(d, n, p, 0, 65535 * 8));
    let bit_width = m.required(d, "bit_width", |d, n, p| r::uint_in(d, n, p, 1, 32));
    m.finish(d);
    Some(BitField {
        bit_offset: bit_offset? as u32,
        bit_width: bit_width? as u32,
    })
}

pub(super) fn reorder_method(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Method> {
    let mut m = MapReader::open(d, node, path)?;
    let given = [m.has("seq_batch_number"), m.has("seq_packets_per_batch")];
    let by_batch = m.optional(d, "seq_batch_number", |d, n, p| {
        let mut b = MapReader::open(d, n, p)?;
        let sequence = b.required(d, "sequence_number", bit_field);
        let batch = b.required(d, "batch_number", bit_field);
        b.finish(d);
        let (sequence, batch) = (sequence?, batch?);
        if batch.bit_width >= sequence.bit_width {
            d.error(
                Kind::Range,
                &join(p, "batch_number.bit_width"),
                Some(n.location),
                format!(
                    "batch_number.bit_width ({}) must be smaller than sequence_number.bit_width ({}): packets per batch = 2^seq bits / 2^batch bits",
                    batch.bit_width, sequence.bit_width
                ),
            );
            return None;
        }
        Some(Method::SeqBatchNumber { sequence, batch })
    });
    let by_count = m.optional(d, "seq_packets_per_batch", |d, n, p| {
        let mut b = MapReader::open(d, n, p)?;
        let sequence = b.required(d, "sequence_number", bit_field);
        let ppb = b.required(d, "packets_per_batch", |d, n, p| {
            r::uint_in(d, n, p, 1, gpudirect::MAX_ITEMS as u64)
        });
        b.finish(d);
        let (sequence, ppb) = (sequence?, ppb? as u32);
        if !(1u64 << sequence.bit_width).is_multiple_of(ppb as u64) {
            d.error(
                Kind::Range,
                &join(p, "packets_per_batch"),
                Some(n.location),
                format!(
                    "packets_per_batch {ppb} must divide 2^{} (the sequence number wraps there)",
                    sequence.bit_width
                ),
            );
            return None;
        }
        Some(Method::SeqPacketsPerBatch {
            sequence,
            packets_per_batch: ppb,
        })
    });
    m.finish(d);
    match given {
        [true, true] => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                "give one method: seq_batch_number or seq_packets_per_batch, not both",
            );
            None
        }
        [false, false] => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "missing the method: seq_batch_number or seq_packets_per_batch",
            );
            None
        }
        // One given: errors inside it are already reported.
        _ => by_batch.or(by_count),
    }
}

pub(super) fn data_types(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Conversion> {
    let mut m = MapReader::open(d, node, path)?;
    let c = conversion_keys(d, &mut m, node, path);
    m.finish(d);
    c
}

/// `input_type`, `output_type` and `endianness` (or their aliases) of map `m`.
pub(super) fn conversion_keys(
    d: &mut Diagnostics,
    m: &mut MapReader,
    node: &Node,
    path: &str,
) -> Option<Conversion> {
    // The reference accepts short aliases; a map with both spellings is an error.
    let pick = |d: &mut Diagnostics,
                m: &mut MapReader,
                key: &'static str,
                alias: &'static str,
                choices: &[&'static str]| {
        if m.has(key) && m.has(alias) {
            d.error(
                Kind::Duplicate,
                &join(path, alias),
                Some(m.location_of(alias)),
                format!("`{alias}` and `{key}` are the same key; give one"),
            );
        }
        let k = if m.has(alias) { alias } else { key };
        m.optional(d, k, |d, n, p| r::choice(d, n, p, choices))
    };
    let input = pick(
        d,
        m,
        "input_type",
        "input",
        &["int4", "int8", "int16", "int32"],
    );
    let output = pick(
        d,
        m,
        "output_type",
        "output",
        &["fp16", "bf16", "fp32", "fp64", "int32"],
    );
    let order = pick(d, m, "endianness", "input_endianness", &["host", "network"]);
    let input = match input {
        Some("int4") => InputType::Int4,
        Some("int8") => InputType::Int8,
        Some("int16") => InputType::Int16,
        Some(_) => InputType::Int32,
        None => {
            d.error(
                Kind::Missing,
                &join(path, "input_type"),
                Some(node.location),
                "missing required key `input_type`",
            );
            return None;
        }
    };
    let output = match output {
        Some("fp16") => OutputType::Fp16,
        Some("bf16") => OutputType::Bf16,
        Some("fp32") => OutputType::Fp32,
        Some(other) => {
            d.error(
                Kind::NotSupported,
                &join(path, "output_type"),
                Some(node.location),
                format!("not supported: output_type {other} (fp16, bf16 and fp32 are)"),
            );
            return None;
        }
        None => {
            d.error(
                Kind::Missing,
                &join(path, "output_type"),
                Some(node.location),
                "missing required key `output_type`",
            );
            return None;
        }
    };
    Some(Conversion {
        input,
        output,
        network_order: order == Some("network"),
    })
}

pub(super) fn reorder_config(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
) -> Option<ReorderConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let kind = m.required(d, "reorder_type", |d, n, p| {
        r::choice(d, n, p, &["gpu", "cpu"]).map(|k| {
            if k == "gpu" {
                ReorderKind::Gpu
            } else {
                ReorderKind::Cpu
            }
        })
    });
    let memory_region = m.required(d, "memory_region", r::name);
    let payload_byte_offset = m
        .optional(d, "payload_byte_offset", |d, n, p| {
            r::uint_in(d, n, p, 0, 65535)
        })
        .unwrap_or(0) as u32;
    let flow_ids = m.required(d, "flow_ids", |d, n, p| {
        let items = r::list(d, n, p)?;
        if items.is_empty() {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                "flow_ids must name at least one flow",
            );
            return None;
        }
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| r::uint_in(d, x, &index(p, i), 0, 0xFF_FFFF))
                .map(|v| v as u32)
                .collect::<Vec<_>>(),
        )
    });
    let conversion = m.optional(d, "data_types", data_types);
    let method = m.required(d, "method", reorder_method);
    m.finish(d);
    Some(ReorderConfig {
        name: name?,
        kind: kind?,
        memory_region: memory_region?,
        payload_byte_offset,
        flow_ids: flow_ids?,
        conversion,
        method: method?,
        location: node.location,
    })
}

pub(super) fn reorder_quantize(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
) -> Option<ReorderQuantizeConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let conversion = conversion_keys(d, &mut m, node, path);
    let count = |key: &'static str, default: u64, m: &mut MapReader, d: &mut Diagnostics| {
        m.optional(d, key, |d, n, p| r::uint_in(d, n, p, 1, 1 << 40))
            .unwrap_or(default)
    };
    let verify_batches = count("verify_batches", 1, &mut m, d);
    let verify_chunks = count("verify_chunks", 1, &mut m, d);
    let chunk_elements = count("chunk_elements", 16, &mut m, d);
    m.finish(d);
    Some(ReorderQuantizeConfig {
        conversion: conversion?,
        verify_batches,
        verify_chunks,
        chunk_elements,
        location: node.location,
    })
}
