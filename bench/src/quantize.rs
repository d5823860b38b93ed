//! Verification of converting reorders (`bench_reorder_quantize`): every slot of every
//! output batch is turned back into the payload bytes it was converted from, which must be
//! the bytes a generator sent, in the slot its sequence number names.
//!
//! That needs a conversion that loses nothing (every input sample has its own output
//! value): int4 and int8 into any output type, int16 into fp32. Other conversions are
//! reported as not verifiable rather than passed.

#![forbid(unsafe_code)]

use super::traffic::{Checker, FrameBuilder, ReorderFields, TRAILER};
use gpudirect::reorder::{Conversion, InputType, Method, OutputType, ReorderSpec};

/// What a generator's frames hold, as far as a slot shows them.
pub(crate) struct StreamModel {
    stream: u16,
    frame_len: usize,
    /// Bytes every frame of the stream has (`None`: differs per frame).
    common: Vec<Option<u8>>,
    /// The reorder fields the generator writes (`None`: it writes none).
    fields: Option<ReorderFields>,
    /// One flow only: the trailer's sequence number is then the frame's index.
    single_flow: bool,
}

impl StreamModel {
    /// The model of the frames `builder` makes.
    pub(crate) fn of(builder: &FrameBuilder) -> Self {
        Self {
            stream: builder.stream(),
            frame_len: builder.frame_len(),
            common: builder.common_bytes(),
            fields: builder.reorder_fields(),
            single_flow: builder.flows() == 1,
        }
    }
}

/// True when every input sample converts to an output value of its own, so output can be
/// turned back into input.
pub(crate) fn lossless(c: Conversion) -> bool {
    match c.input {
        InputType::Int4 | InputType::Int8 => true,
        InputType::Int16 => c.output == OutputType::Fp32,
        InputType::Int32 => false,
    }
}

/// Output bits (little-endian, zero-extended) of every input sample value, so output
/// turns back into input by lookup. Only for [`lossless`] conversions.
fn inverse_table(c: Conversion) -> std::collections::HashMap<u32, i32> {
    let bits = c.input.bits();
    let (lo, hi) = (-(1i32 << (bits - 1)), (1i32 << (bits - 1)) - 1);
    let size = c.output.bytes() as usize;
    let mut table = std::collections::HashMap::new();
    for x in lo..=hi {
        let (mut input, mut out) = ([0u8; 4], [0u8; 8]);
        encode(x, &mut input, 0, c);
        gpudirect::reorder::convert(&input[..(bits as usize).div_ceil(8)], &mut out, c);
        let mut word = [0u8; 4];
        word[..size].copy_from_slice(&out[..size]);
        table.insert(u32::from_le_bytes(word), x);
    }
    table
}

/// The input sample that output sample `e` of `out` was converted from, or `None` when
/// the output is not exactly what any input sample converts to.
fn decode(
    out: &[u8],
    e: usize,
    size: usize,
    table: &std::collections::HashMap<u32, i32>,
) -> Option<i32> {
    let mut word = [0u8; 4];
    word[..size].copy_from_slice(&out[e * size..(e + 1) * size]);
    table.get(&u32::from_le_bytes(word)).copied()
}

/// Writes sample `x` as sample `e` of `input`.
fn encode(x: i32, input: &mut [u8], e: usize, c: Conversion) {
    match c.input {
        InputType::Int4 => {
            let nibble = (x as u8) & 0x0f;
            let b = &mut input[e / 2];
            *b = if e.is_multiple_of(2) {
                (*b & 0x0f) | nibble << 4
            } else {
                (*b & 0xf0) | nibble
            };
        }
        InputType::Int8 => input[e] = x as u8,
        InputType::Int16 => {
            let v = x as i16;
            let bytes = if c.network_order {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            input[2 * e..2 * e + 2].copy_from_slice(&bytes);
        }
        InputType::Int32 => {
            let bytes = if c.network_order {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            };
            input[4 * e..4 * e + 4].copy_from_slice(&bytes);
        }
    }
}

/// What one slot held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotVerdict {
    /// Nothing arrived for it (all zero).
    Empty,
    /// The right frame's payload, converted exactly; `chunks` groups of `chunk_elements`
    /// samples were compared.
    Good {
        /// Chunks compared.
        chunks: u64,
    },
    /// Why it is wrong.
    Bad(String),
}

/// Checks the slots of converted batches against the generators' frames.
pub(crate) struct ConvertedCheck {
    spec: ReorderSpec,
    conversion: Conversion,
    models: Vec<StreamModel>,
    chunk_elements: u64,
    input: Vec<u8>,
    inverse: std::collections::HashMap<u32, i32>,
}

impl ConvertedCheck {
    /// A check of `spec`'s batches (`None` when it converts nothing or loses bits).
    pub(crate) fn new(
        spec: ReorderSpec,
        models: Vec<StreamModel>,
        chunk_elements: u64,
    ) -> Option<Self> {
        let conversion = spec.conversion.filter(|c| lossless(*c))?;
        Some(Self {
            spec,
            conversion,
            models,
            chunk_elements: chunk_elements.max(1),
            input: Vec::new(),
            inverse: inverse_table(conversion),
        })
    }

    /// Checks slot `slot` (its output bytes) of a batch with id `batch_id`.
    pub(crate) fn slot(&mut self, slot: u32, out: &[u8], batch_id: Option<u32>) -> SlotVerdict {
        if out.iter().all(|&b| b == 0) {
            return SlotVerdict::Empty;
        }
        let c = self.conversion;
        let in_slot = self.spec.in_slot_bytes as usize;
        let samples = in_slot * 8 / c.input.bits() as usize;
        self.input.clear();
        self.input.resize(in_slot, 0);
        let size = c.output.bytes() as usize;
        for e in 0..samples {
            match decode(out, e, size, &self.inverse) {
                Some(x) => encode(x, &mut self.input, e, c),
                None => {
                    return SlotVerdict::Bad(format!(
                        "slot {slot}: output sample {e} is not the conversion of any {:?} sample",
                        c.input
                    ));
                }
            }
        }
        let off = self.spec.payload_byte_offset as usize;
        let input = &self.input;
        let trailer_of = |m: &StreamModel| {
            let avail = (m.frame_len.saturating_sub(off)).min(in_slot);
            (m.frame_len - off <= in_slot && avail >= TRAILER)
                .then(|| Checker::parse_trailer(&input[avail - TRAILER..avail]).ok())
                .flatten()
        };
        let matched = self
            .models
            .iter()
            .find(|m| trailer_of(m).is_some_and(|(stream, _, _)| stream == m.stream))
            .or(if self.models.len() == 1 {
                self.models.first()
            } else {
                None
            });
        let Some(m) = matched else {
            return SlotVerdict::Bad(format!(
                "slot {slot}: holds no generator's frame (no trailer where one ends)"
            ));
        };
        let avail = m.frame_len.saturating_sub(off).min(in_slot);
        let common = m.common.get(off..).unwrap_or(&[]);
        for (k, (&got, want)) in input[..avail].iter().zip(common).enumerate() {
            if let Some(want) = want
                && got != *want
            {
                return SlotVerdict::Bad(format!(
                    "slot {slot}: payload byte {k} (frame byte {}) is {got:#04x}, the frame had {want:#04x}",
                    off + k
                ));
            }
        }
        if let Some(k) = input[avail..].iter().position(|&b| b != 0) {
            return SlotVerdict::Bad(format!(
                "slot {slot}: byte {} past the {avail}-byte payload is not zero",
                avail + k
            ));
        }
        if let (Some((_, _, seq)), true, Some(fields)) = (trailer_of(m), m.single_flow, m.fields) {
            let ppb = self.spec.packets_per_batch();
            let (sequence, batch) = fields.values(seq);
            let want_batch = match self.spec.method {
                Method::SeqBatchNumber { .. } => batch,
                Method::SeqPacketsPerBatch { .. } => sequence / ppb,
            };
            if sequence % ppb != slot {
                return SlotVerdict::Bad(format!(
                    "slot {slot}: holds frame {seq}, whose slot is {}",
                    sequence % ppb
                ));
            }
            if batch_id.is_some_and(|b| b != want_batch) {
                return SlotVerdict::Bad(format!(
                    "slot {slot}: frame {seq} belongs to batch {want_batch}, not {}",
                    batch_id.unwrap_or_default()
                ));
            }
        }
        let filled = (avail * 8 / c.input.bits() as usize) as u64;
        SlotVerdict::Good {
            chunks: filled.div_ceil(self.chunk_elements),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::config::{BenchTxConfig, PortRange};
    use gpudirect::reorder::BitField;
    use std::net::Ipv4Addr;

    fn generator() -> BenchTxConfig {
        BenchTxConfig {
            interface_name: "p".into(),
            queue_id: 0,
            cpu_core: None,
            batch_size: 8,
            payload_size: 256,
            header_size: 64,
            udp_src_port: PortRange {
                first: 5000,
                last: 5000,
            },
            udp_dst_port: PortRange {
                first: 5000,
                last: 5000,
            },
            ip_src_addr: Ipv4Addr::new(1, 2, 3, 4),
            ip_dst_addr: Ipv4Addr::new(5, 6, 7, 8),
            eth_src_addr: [0; 6],
            eth_dst_addr: [0; 6],
            sequence_number: None,
            gpu_direct: false,
            location: Default::default(),
        }
    }

    /// The reference's int4 -> fp32 example layout: a batch reordered and converted on the
    /// CPU verifies; a swapped slot, a flipped sample and a nonzero tail do not.
    #[test]
    fn converted_batches_verify_and_corruption_is_named() {
        for (input, output) in [
            (InputType::Int4, OutputType::Fp32),
            (InputType::Int8, OutputType::Fp16),
            (InputType::Int8, OutputType::Bf16),
            (InputType::Int16, OutputType::Fp32),
        ] {
            let spec = ReorderSpec {
                method: Method::SeqBatchNumber {
                    sequence: BitField {
                        bit_offset: 128,
                        bit_width: 10,
                    },
                    batch: BitField {
                        bit_offset: 144,
                        bit_width: 2,
                    },
                },
                payload_byte_offset: 64,
                in_slot_bytes: 2048 - 64,
                conversion: Some(Conversion {
                    input,
                    output,
                    network_order: true,
                }),
            };
            let mut b =
                FrameBuilder::new(&generator(), 0).with_reorder_fields(ReorderFields::of(&spec));
            let model = StreamModel::of(&b);
            let mut frames = Vec::new();
            for _ in 0..256 + 300 {
                let mut f = vec![0u8; b.frame_len()];
                b.write_constant(&mut f);
                b.write_next(&mut f);
                frames.push(f);
            }
            // Batch 1 (frames 256..512), arriving in reverse order.
            let batch: Vec<&[u8]> = frames[256..512].iter().rev().map(|f| &f[..]).collect();
            let mut out = vec![0u8; spec.batch_bytes()];
            let (id, placed) = gpudirect::reorder::reorder_cpu(&spec, &batch, &mut out);
            assert_eq!((id, placed), (Some(1), 256));
            let mut check = ConvertedCheck::new(spec, vec![model], 16).expect("lossless");
            let stride = spec.out_slot_bytes() as usize;
            for s in 0..256u32 {
                let slot = &out[s as usize * stride..(s as usize + 1) * stride];
                assert!(
                    matches!(check.slot(s, slot, Some(1)), SlotVerdict::Good { chunks } if chunks > 0),
                    "{input:?} -> {output:?} slot {s}"
                );
            }
            let slot = |k: usize| out[k * stride..(k + 1) * stride].to_vec();
            // The wrong batch id, the wrong slot.
            assert!(
                matches!(check.slot(3, &slot(3), Some(2)), SlotVerdict::Bad(m) if m.contains("batch"))
            );
            assert!(
                matches!(check.slot(4, &slot(3), Some(1)), SlotVerdict::Bad(m) if m.contains("slot is 3"))
            );
            // A sample that no input converts to, and a changed payload byte.
            let mut bad = slot(5);
            bad[1] ^= 0x40;
            assert!(matches!(check.slot(5, &bad, Some(1)), SlotVerdict::Bad(_)));
            let mut other = slot(6);
            let size = output.bytes() as usize;
            let e = 100; // a fill sample: write the next value up in its place
            let c = spec.conversion.unwrap();
            let v = decode(&other, e, size, &inverse_table(c)).unwrap();
            let mut one = [0u8; 4];
            encode(if v == 0 { 1 } else { 0 }, &mut one, 0, c);
            let mut conv = [0u8; 8];
            gpudirect::reorder::convert(&one[..(input.bits() as usize).div_ceil(8)], &mut conv, c);
            other[e * size..(e + 1) * size].copy_from_slice(&conv[..size]);
            assert!(
                matches!(check.slot(6, &other, Some(1)), SlotVerdict::Bad(m) if m.contains("payload byte"))
            );
            // Something past the payload.
            let mut tail = slot(7);
            let last = tail.len() - size;
            let mut one = [0u8; 4];
            encode(1, &mut one, 0, c);
            gpudirect::reorder::convert(&one[..(input.bits() as usize).div_ceil(8)], &mut conv, c);
            tail[last..].copy_from_slice(&conv[..size]);
            assert!(
                matches!(check.slot(7, &tail, Some(1)), SlotVerdict::Bad(m) if m.contains("not zero"))
            );
            assert_eq!(
                check.slot(8, &vec![0u8; stride], Some(1)),
                SlotVerdict::Empty
            );
        }
    }

    #[test]
    fn lossy_conversions_are_not_verified() {
        for (input, output) in [
            (InputType::Int16, OutputType::Fp16),
            (InputType::Int16, OutputType::Bf16),
            (InputType::Int32, OutputType::Fp32),
        ] {
            assert!(!lossless(Conversion {
                input,
                output,
                network_order: false
            }));
        }
    }
}
