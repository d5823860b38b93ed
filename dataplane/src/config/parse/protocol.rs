//! `protocol:` of an RX queue: the sensor protocol its packets carry (SPEAD, or radio
//! samples in VITA-49 or eCPRI).

use super::*;
use crate::protocol::iq::{Compression, IqFormat, Precision, SampleFormat};
use crate::protocol::spead::Flavour;
use crate::protocol::spead::chunks::{Placement, PlacementKey};

/// `protocol: {spead | vrt | ecpri_uplane: {...}}` (one protocol per queue).
pub(super) fn protocol(d: &mut Diagnostics, node: &Node, path: &str) -> Option<ProtocolConfig> {
    const NAMES: [&str; 3] = ["spead", "vrt", "ecpri_uplane"];
    let mut m = MapReader::open(d, node, path)?;
    let named = NAMES.iter().filter(|n| m.has(n)).count();
    let location = node.location;
    let spead = m.optional(d, "spead", spead).map(ProtocolConfig::Spead);
    let vrt = m.optional(d, "vrt", vrt).map(ProtocolConfig::Iq);
    let ecpri = m
        .optional(d, "ecpri_uplane", ecpri_uplane)
        .map(ProtocolConfig::Iq);
    m.finish(d);
    if named != 1 {
        d.error(
            if named == 0 {
                Kind::Missing
            } else {
                Kind::Invalid
            },
            path,
            Some(location),
            "a protocol block names one protocol (spead, vrt or ecpri_uplane)",
        );
        return None;
    }
    spead.or(vrt).or(ecpri)
}

/// `precision: f32 | f16` of an IQ protocol (f32 when left out).
fn precision(m: &mut MapReader, d: &mut Diagnostics) -> Precision {
    m.optional(d, "precision", |d, n, p| {
        r::choice(d, n, p, &["f32", "f16"]).map(|s| match s {
            "f16" => Precision::F16,
            _ => Precision::F32,
        })
    })
    .unwrap_or_default()
}

/// `vrt: {samples: i8 | i16_be | i16_le, precision}` (16-bit big-endian by default).
fn vrt(d: &mut Diagnostics, node: &Node, path: &str) -> Option<IqConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let samples = m
        .optional(d, "samples", |d, n, p| {
            r::choice(d, n, p, &["i8", "i16_be", "i16_le"]).map(|s| match s {
                "i8" => SampleFormat::I8,
                "i16_le" => SampleFormat::I16Le,
                _ => SampleFormat::I16Be,
            })
        })
        .unwrap_or(SampleFormat::I16Be);
    let precision = precision(&mut m, d);
    m.finish(d);
    Some(IqConfig {
        format: IqFormat::Vrt { samples },
        precision,
    })
}

/// `ecpri_uplane: {compression: none | block_floating_point, iq_width (block floating
/// point only), prbs_when_zero, precision}`.
fn ecpri_uplane(d: &mut Diagnostics, node: &Node, path: &str) -> Option<IqConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let bfp = m
        .required(d, "compression", |d, n, p| {
            r::choice(d, n, p, &["none", "block_floating_point"])
        })
        .map(|c| c == "block_floating_point");
    let width_location = m.location_of("iq_width");
    let has_width = m.has("iq_width");
    let iq_width = m.optional(d, "iq_width", |d, n, p| r::uint_in(d, n, p, 1, 16));
    // A section's PRB count field is 8 bits; 0 means the carrier's PRBs (273 at most).
    let prbs_when_zero = m
        .required(d, "prbs_when_zero", |d, n, p| r::uint_in(d, n, p, 1, 273))
        .map(|n| n as u16);
    let precision = precision(&mut m, d);
    m.finish(d);
    let compression = match (bfp?, iq_width) {
        (true, Some(w)) => Compression::BlockFloatingPoint { iq_width: w as u8 },
        (true, None) => {
            if !has_width {
                d.error(
                    Kind::Missing,
                    &join(path, "iq_width"),
                    Some(node.location),
                    "block floating point needs iq_width (bits per mantissa, 1 to 16)",
                );
            }
            return None;
        }
        (false, _) if has_width => {
            d.error(
                Kind::Invalid,
                &join(path, "iq_width"),
                Some(width_location),
                "iq_width applies to compression: block_floating_point only",
            );
            return None;
        }
        (false, _) => Compression::None,
    };
    Some(IqConfig {
        format: IqFormat::EcpriUplane {
            compression,
            prbs_when_zero: prbs_when_zero?,
        },
        precision,
    })
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
    let chunk_region = m.optional(d, "chunk_region", r::name);
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
        chunk_region,
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
