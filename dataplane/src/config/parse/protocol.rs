//! `protocol:` of an RX queue: the sensor protocol its packets carry.

use super::*;
use crate::protocol::spead::Flavour;
use crate::protocol::spead::chunks::{Placement, PlacementKey};

/// `protocol: {spead: {...}}` (one protocol per queue).
pub(super) fn protocol(d: &mut Diagnostics, node: &Node, path: &str) -> Option<ProtocolConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let named = m.has("spead");
    let spead = m.optional(d, "spead", spead);
    m.finish(d);
    if !named {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "a protocol block names its protocol (spead)",
        );
    }
    spead.map(ProtocolConfig::Spead)
}

/// The largest chunk: 4 GiB (each chunk is one allocation of heaps × heap bytes).
const MAX_CHUNK_BYTES: u64 = 1 << 32;

fn spead(d: &mut Diagnostics, node: &Node, path: &str) -> Option<SpeadConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let flavour = m
        .optional(d, "flavour", |d, n, p| {
            r::choice(d, n, p, &["64-48", "64-40"]).map(|s| match s {
                "64-40" => Flavour::SPEAD_64_40,
                _ => Flavour::SPEAD_64_48,
            })
        })
        .unwrap_or(Flavour::SPEAD_64_48);
    let heap_bytes = m.required(d, "heap_bytes", |d, n, p| {
        r::uint_in(d, n, p, 1, u64::from(u32::MAX))
    });
    let heaps_per_chunk = m.required(d, "heaps_per_chunk", |d, n, p| {
        r::uint_in(d, n, p, 1, 1 << 20)
    });
    let max_chunks = m
        .optional(d, "max_chunks", |d, n, p| r::uint_in(d, n, p, 1, 64))
        .unwrap_or(4);
    let place_by = m
        .optional(d, "place_by", |d, n, p| place_by(d, n, p, flavour))
        .unwrap_or((PlacementKey::HeapCnt, 1));
    let chunk_location = m.location_of("heaps_per_chunk");
    m.finish(d);
    let (heap_bytes, heaps_per_chunk) = (heap_bytes?, heaps_per_chunk?);
    if heap_bytes * heaps_per_chunk > MAX_CHUNK_BYTES {
        d.error(
            Kind::Range,
            &join(path, "heaps_per_chunk"),
            Some(chunk_location),
            format!(
                "a chunk of {heaps_per_chunk} heaps of {heap_bytes} bytes is over {MAX_CHUNK_BYTES} bytes"
            ),
        );
        return None;
    }
    Some(SpeadConfig {
        flavour,
        placement: Placement {
            key: place_by.0,
            step: place_by.1,
            heaps_per_chunk: heaps_per_chunk as u32,
            heap_bytes: heap_bytes as u32,
            max_chunks: max_chunks as u32,
        },
    })
}

/// `place_by: heap_cnt` or `place_by: {item: ID, step: N}` (step 1 when left out).
fn place_by(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    flavour: Flavour,
) -> Option<(PlacementKey, u64)> {
    if let Value::Str(_) = node.value {
        r::choice(d, node, path, &["heap_cnt"])?;
        return Some((PlacementKey::HeapCnt, 1));
    }
    let mut m = MapReader::open(d, node, path)?;
    let item = m.required(d, "item", |d, n, p| {
        r::uint_in(d, n, p, 1, u64::from(flavour.max_id()))
    });
    let step = m
        .optional(d, "step", |d, n, p| {
            r::uint_in(d, n, p, 1, flavour.max_value())
        })
        .unwrap_or(1);
    m.finish(d);
    Some((PlacementKey::Item(item? as u32), step))
}
