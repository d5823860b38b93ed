//! `protocol:` of a queue: the sensor protocol its packets carry (RX: SPEAD, or radio
//! samples in VITA-49 or eCPRI; TX: SPEAD heaps with their item descriptors).

use super::*;
use crate::protocol::iq::{Compression, IqFormat, Precision, SampleFormat};
use crate::protocol::spead::Flavour;
use crate::protocol::spead::chunks::{Placement, PlacementKey};
use crate::protocol::spead::descriptor::{self, ItemDescriptor, ItemType};

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

/// `vrt: {samples: i8 | i16_be | i16_le, precision, sample_region}` (16-bit big-endian
/// by default).
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
    let sample_region = m.optional(d, "sample_region", r::name);
    m.finish(d);
    Some(IqConfig {
        format: IqFormat::Vrt { samples },
        precision,
        sample_region,
    })
}

/// `ecpri_uplane: {compression: none | block_floating_point, iq_width (block floating
/// point only), prbs_when_zero, precision, sample_region}`.
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
    let sample_region = m.optional(d, "sample_region", r::name);
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
        sample_region,
    })
}

/// `flavour: 64-48 | 64-40` of a SPEAD block (64-48, spead2's default, when left out).
fn flavour(m: &mut MapReader, d: &mut Diagnostics) -> Flavour {
    m.optional(d, "flavour", |d, n, p| {
        r::choice(d, n, p, &["64-48", "64-40"]).map(|s| match s {
            "64-40" => Flavour::SPEAD_64_40,
            _ => Flavour::SPEAD_64_48,
        })
    })
    .unwrap_or(Flavour::SPEAD_64_48)
}

/// The largest chunk: 4 GiB (each chunk is one allocation of heaps × heap bytes).
const MAX_CHUNK_BYTES: u64 = 1 << 32;

fn spead(d: &mut Diagnostics, node: &Node, path: &str) -> Option<SpeadConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let flavour = flavour(&mut m, d);
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

/// `protocol:` of a TX queue: `{spead: {...}}`, the one protocol a queue sends.
pub(super) fn tx_protocol(d: &mut Diagnostics, node: &Node, path: &str) -> Option<ProtocolConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let location = node.location;
    let has_spead = m.has("spead");
    let spead = m.optional(d, "spead", spead_send);
    for other in ["vrt", "ecpri_uplane"] {
        if let Some(n) = m.get(other) {
            d.error(
                Kind::NotSupported,
                &join(path, other),
                Some(n.location),
                format!("not supported: {other} on a TX queue (spead is)"),
            );
        }
    }
    m.finish(d);
    if !has_spead {
        d.error(
            Kind::Missing,
            path,
            Some(location),
            "a TX queue's protocol block names spead",
        );
    }
    spead.map(ProtocolConfig::SpeadSend)
}

/// Item ids a heap's own items may not take: the heap's header items (0x00-0x06) and a
/// descriptor's fields (0x10-0x15).
fn reserved_item_id(id: u64) -> bool {
    id <= 0x06 || (0x10..=0x15).contains(&id)
}

/// `spead: {flavour, max_packet_bytes, descriptors_every, items, udp}` of a TX queue.
fn spead_send(d: &mut Diagnostics, node: &Node, path: &str) -> Option<SpeadSendConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let flavour = flavour(&mut m, d);
    // spead2's default packet size: a 1500-byte MTU less the IPv4 and UDP headers.
    let max_packet_bytes = m
        .optional(d, "max_packet_bytes", |d, n, p| {
            r::uint_in(d, n, p, 128, 65507)
        })
        .unwrap_or(1472) as u32;
    let descriptors_every = m
        .optional(d, "descriptors_every", |d, n, p| {
            r::uint_in(d, n, p, 0, u64::from(u32::MAX))
        })
        .unwrap_or(0);
    let descriptors = m
        .optional(d, "items", |d, n, p| {
            let list = r::list(d, n, p)?;
            let items: Vec<_> = list
                .iter()
                .enumerate()
                .filter_map(|(i, x)| item_descriptor(d, x, &index(p, i), flavour))
                .collect();
            (items.len() == list.len()).then_some(items)
        })
        .unwrap_or_default();
    let udp = m.optional(d, "udp", udp_endpoints);
    m.finish(d);
    let mut seen = std::collections::BTreeSet::new();
    for item in &descriptors {
        if !seen.insert(item.id) {
            d.error(
                Kind::Duplicate,
                &join(path, "items"),
                Some(node.location),
                format!("item id {:#x} is described twice", item.id),
            );
        }
    }
    Some(SpeadSendConfig {
        flavour,
        max_packet_bytes,
        descriptors_every,
        descriptors,
        udp,
    })
}

/// One `items:` entry: `{id, name, description, shape, dtype | format}`.
fn item_descriptor(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    flavour: Flavour,
) -> Option<ItemDescriptor> {
    let mut m = MapReader::open(d, node, path)?;
    let id_location = m.location_of("id");
    let id = m.required(d, "id", |d, n, p| {
        r::uint_in(d, n, p, 1, u64::from(flavour.max_id()))
    });
    let ascii = |d: &mut Diagnostics, n: &Node, p: &str| {
        let s = r::string(d, n, p)?;
        if s.is_ascii() {
            return Some(s);
        }
        d.error(
            Kind::Invalid,
            p,
            Some(n.location),
            "SPEAD names and descriptions are ASCII",
        );
        None
    };
    let name = m.required(d, "name", ascii);
    let description = m.optional(d, "description", ascii).unwrap_or_default();
    let shape = m
        .optional(d, "shape", |d, n, p| {
            let dims = r::list(d, n, p)?;
            let out: Vec<Option<u64>> = dims
                .iter()
                .enumerate()
                .filter_map(|(i, x)| match x.value {
                    Value::Null => Some(None),
                    _ => r::uint_in(d, x, &index(p, i), 0, flavour.max_value()).map(Some),
                })
                .collect();
            (out.len() == dims.len()).then_some(out)
        })
        .unwrap_or_default();
    let has = (m.has("dtype"), m.has("format"));
    let type_location = node.location;
    let dtype = m.optional(d, "dtype", |d, n, p| {
        let s = r::string(d, n, p)?;
        if descriptor::is_simple_dtype(&s) {
            return Some(s);
        }
        d.error(
            Kind::Invalid,
            p,
            Some(n.location),
            format!("`{s}` is not a NumPy dtype of one field (such as <u2, >i4, <c8, u1)"),
        );
        None
    });
    let format = m.optional(d, "format", |d, n, p| {
        let fields = r::list(d, n, p)?;
        let out: Vec<(u8, u32)> = fields
            .iter()
            .enumerate()
            .filter_map(|(i, x)| format_field(d, x, &index(p, i)))
            .collect();
        (out.len() == fields.len() && !out.is_empty()).then_some(out)
    });
    m.finish(d);
    let id = id?;
    if reserved_item_id(id) {
        d.error(
            Kind::Invalid,
            &join(path, "id"),
            Some(id_location),
            format!("item id {id:#x} is reserved by SPEAD (0x00-0x06, 0x10-0x15)"),
        );
        return None;
    }
    let element = match (has, dtype, format) {
        ((true, false), Some(dtype), _) => {
            if shape.iter().any(Option::is_none) {
                d.error(
                    Kind::Invalid,
                    &join(path, "shape"),
                    Some(type_location),
                    "a dtype item has a fixed shape (a variable dimension needs format)",
                );
                return None;
            }
            ItemType::Dtype(dtype)
        }
        ((false, true), _, Some(format)) => ItemType::Format(format),
        ((false, false), _, _) => {
            d.error(
                Kind::Missing,
                path,
                Some(type_location),
                "an item is typed by dtype (arrays) or format (immediate values such as [[u, 48]])",
            );
            return None;
        }
        ((true, true), _, _) => {
            d.error(
                Kind::Invalid,
                path,
                Some(type_location),
                "an item has dtype or format, not both",
            );
            return None;
        }
        _ => return None,
    };
    Some(ItemDescriptor {
        id: id as u32,
        name: name?,
        description,
        shape,
        element,
    })
}

/// A format field `[CODE, BITS]`: code `u`, `i`, `f`, `b` or `c`, 1 to 65535 bits.
fn format_field(d: &mut Diagnostics, node: &Node, path: &str) -> Option<(u8, u32)> {
    let pair = r::list(d, node, path)?;
    if let [code, bits] = pair {
        let code = r::choice(d, code, &index(path, 0), &["u", "i", "f", "b", "c"]);
        let bits = r::uint_in(d, bits, &index(path, 1), 1, 65535);
        return Some((code?.as_bytes()[0], bits? as u32));
    }
    d.error(
        Kind::Invalid,
        path,
        Some(node.location),
        "a format field is [code, bits], such as [u, 48]",
    );
    None
}

/// `udp: {source, destination, destination_mac, source_mac}`: the headers of the frames a raw engine
/// sends (a socket has its own addresses).
fn udp_endpoints(d: &mut Diagnostics, node: &Node, path: &str) -> Option<UdpEndpoints> {
    let mut m = MapReader::open(d, node, path)?;
    let address = |d: &mut Diagnostics, n: &Node, p: &str| {
        let s = r::string(d, n, p)?;
        let parsed = s.parse::<std::net::SocketAddrV4>().ok();
        if parsed.is_none() {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                format!("`{s}` is not an IPv4 address and port (a.b.c.d:port)"),
            );
        }
        parsed
    };
    let source = m.required(d, "source", address);
    let destination = m.required(d, "destination", address);
    let destination_mac = m.required(d, "destination_mac", mac);
    let source_mac = m.optional(d, "source_mac", mac);
    m.finish(d);
    Some(UdpEndpoints {
        source: source?,
        destination: destination?,
        destination_mac: destination_mac?,
        source_mac,
    })
}
