//! Reorder by sequence number and sample conversion, as plain CPU code.
//!
//! This is the reference implementation of what the GPU kernels in [`crate::kernels`] do:
//! hosts without a GPU run it, and the GPU tests compare the kernels' output with it bit for
//! bit. Both sides use the same arithmetic (integer to `f32` rounding to nearest, then
//! `f32` to half or bfloat16 rounding to nearest even), so results match exactly.

#![forbid(unsafe_code)]

/// Sample type of the input payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputType {
    /// Two signed 4-bit samples per byte, the high nibble first.
    Int4,
    /// Signed bytes.
    Int8,
    /// Signed 16-bit samples.
    Int16,
    /// Signed 32-bit samples.
    Int32,
}

impl InputType {
    /// Bits per sample.
    pub fn bits(self) -> u32 {
        match self {
            InputType::Int4 => 4,
            InputType::Int8 => 8,
            InputType::Int16 => 16,
            InputType::Int32 => 32,
        }
    }

    // The kernels' encoding (the `cuda` feature's only).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn code(self) -> i32 {
        match self {
            InputType::Int4 => 0,
            InputType::Int8 => 1,
            InputType::Int16 => 2,
            InputType::Int32 => 3,
        }
    }
}

/// Sample type written to the output (little-endian, as the GPU stores it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputType {
    /// IEEE half precision.
    Fp16,
    /// bfloat16.
    Bf16,
    /// IEEE single precision.
    Fp32,
}

impl OutputType {
    /// Bytes per sample.
    pub fn bytes(self) -> u32 {
        match self {
            OutputType::Fp16 | OutputType::Bf16 => 2,
            OutputType::Fp32 => 4,
        }
    }

    // The kernels' encoding (the `cuda` feature's only).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn code(self) -> i32 {
        match self {
            OutputType::Fp16 => 0,
            OutputType::Bf16 => 1,
            OutputType::Fp32 => 2,
        }
    }
}

/// Conversion of each payload's samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// Input sample type.
    pub input: InputType,
    /// Output sample type.
    pub output: OutputType,
    /// Input samples are big-endian (network order) rather than little-endian (host).
    pub network_order: bool,
}

/// A bit field of a packet, counted from the packet's first byte, most significant bit
/// first (as on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitField {
    /// Offset of the field's first bit.
    pub bit_offset: u32,
    /// Width, 1 to 32 bits.
    pub bit_width: u32,
}

impl BitField {
    /// Bytes a packet needs for the field to be inside it.
    pub fn end_byte(&self) -> usize {
        (self.bit_offset as usize + self.bit_width as usize).div_ceil(8)
    }

    /// The field's value, or `None` when the packet is too short.
    pub fn read(&self, packet: &[u8]) -> Option<u32> {
        if packet.len() < self.end_byte() {
            return None;
        }
        let first = (self.bit_offset / 8) as usize;
        let shift = self.bit_offset % 8;
        let bytes = (shift + self.bit_width).div_ceil(8) as usize;
        let mut v = 0u64;
        for &b in &packet[first..first + bytes] {
            v = (v << 8) | b as u64;
        }
        v >>= bytes as u32 * 8 - shift - self.bit_width;
        Some((v & ((1u64 << self.bit_width) - 1)) as u32)
    }

    /// Writes the low `bit_width` bits of `value` into the field; returns false (writing
    /// nothing) when the packet is too short.
    pub fn write(&self, packet: &mut [u8], value: u32) -> bool {
        if packet.len() < self.end_byte() {
            return false;
        }
        for b in 0..self.bit_width {
            let bit = (value >> (self.bit_width - 1 - b)) & 1;
            let pos = (self.bit_offset + b) as usize;
            let mask = 0x80u8 >> (pos % 8);
            if bit == 1 {
                packet[pos / 8] |= mask;
            } else {
                packet[pos / 8] &= !mask;
            }
        }
        true
    }
}

/// How packets map to batches and slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `seq_batch_number`: the slot is the sequence number modulo the batch size
    /// (2^seq bits / 2^batch bits) and the batch id is its own field.
    SeqBatchNumber {
        /// Sequence number field.
        sequence: BitField,
        /// Batch number field.
        batch: BitField,
    },
    /// `seq_packets_per_batch`: the slot is the sequence number modulo
    /// `packets_per_batch`, the batch id its quotient.
    SeqPacketsPerBatch {
        /// Sequence number field.
        sequence: BitField,
        /// Packets per batch.
        packets_per_batch: u32,
    },
}

/// Everything a reorder needs, for the CPU and the GPU alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReorderSpec {
    /// Batch and slot of each packet.
    pub method: Method,
    /// Bytes skipped at the start of each packet (headers).
    pub payload_byte_offset: u32,
    /// Payload bytes one slot takes from a packet (longer payloads are cut).
    pub in_slot_bytes: u32,
    /// Optional sample conversion.
    pub conversion: Option<Conversion>,
}

impl ReorderSpec {
    /// Packets per batch (slots in the output).
    pub fn packets_per_batch(&self) -> u32 {
        match self.method {
            Method::SeqBatchNumber { sequence, batch } => {
                1u32 << (sequence.bit_width - batch.bit_width)
            }
            Method::SeqPacketsPerBatch {
                packets_per_batch, ..
            } => packets_per_batch,
        }
    }

    /// The sequence number field.
    pub fn sequence(&self) -> BitField {
        match self.method {
            Method::SeqBatchNumber { sequence, .. }
            | Method::SeqPacketsPerBatch { sequence, .. } => sequence,
        }
    }

    /// Output bytes per slot.
    pub fn out_slot_bytes(&self) -> u32 {
        match self.conversion {
            None => self.in_slot_bytes,
            Some(c) => self.in_slot_bytes * 8 / c.input.bits() * c.output.bytes(),
        }
    }

    /// Output bytes of one batch.
    pub fn batch_bytes(&self) -> usize {
        self.packets_per_batch() as usize * self.out_slot_bytes() as usize
    }

    /// Slot of a packet, or `None` when it is too short to carry the sequence number.
    pub fn slot_of(&self, packet: &[u8]) -> Option<u32> {
        Some(self.sequence().read(packet)? % self.packets_per_batch())
    }

    /// Batch id of a packet (its batch number field, or sequence / packets per batch).
    pub fn batch_of(&self, packet: &[u8]) -> Option<u32> {
        match self.method {
            Method::SeqBatchNumber { batch, .. } => batch.read(packet),
            Method::SeqPacketsPerBatch {
                sequence,
                packets_per_batch,
            } => Some(sequence.read(packet)? / packets_per_batch),
        }
    }
}

/// Reorders `packets` (in arrival order) into `out` (`spec.batch_bytes()` long, zeroed by
/// the caller: slots no packet filled stay zero). A later packet for the same slot
/// overwrites an earlier one. Returns the batch id of the first packet and how many
/// packets were placed (too-short packets are skipped).
pub fn reorder_cpu(spec: &ReorderSpec, packets: &[&[u8]], out: &mut [u8]) -> (Option<u32>, usize) {
    assert!(
        out.len() >= spec.batch_bytes(),
        "output smaller than a batch"
    );
    let stride = spec.out_slot_bytes() as usize;
    let mut placed = 0;
    for p in packets {
        let Some(slot) = spec.slot_of(p) else {
            continue;
        };
        let payload = payload_of(spec, p);
        let dst = &mut out[slot as usize * stride..(slot as usize + 1) * stride];
        match spec.conversion {
            None => dst[..payload.len()].copy_from_slice(payload),
            Some(c) => {
                convert(payload, dst, c);
            }
        }
        placed += 1;
    }
    let batch = packets
        .first()
        .filter(|p| spec.slot_of(p).is_some())
        .and_then(|p| spec.batch_of(p));
    (batch, placed)
}

/// The bytes of `packet` one slot takes.
pub fn payload_of<'a>(spec: &ReorderSpec, packet: &'a [u8]) -> &'a [u8] {
    let start = (spec.payload_byte_offset as usize).min(packet.len());
    let end = packet.len().min(start + spec.in_slot_bytes as usize);
    &packet[start..end]
}

/// Copies `payloads` one after the other into `out` (arrival order). Returns the bytes
/// written.
pub fn gather_cpu(payloads: &[&[u8]], out: &mut [u8]) -> usize {
    let mut at = 0;
    for p in payloads {
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    at
}

/// Converts the samples of `input` into `out` (as many whole samples as `input` holds).
pub fn convert(input: &[u8], out: &mut [u8], c: Conversion) -> usize {
    let n = input.len() * 8 / c.input.bits() as usize;
    let size = c.output.bytes() as usize;
    for e in 0..n {
        let v = load_sample(input, e, c.input, c.network_order) as f32;
        let d = &mut out[e * size..(e + 1) * size];
        match c.output {
            OutputType::Fp16 => d.copy_from_slice(&f32_to_f16_bits(v).to_le_bytes()),
            OutputType::Bf16 => d.copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes()),
            OutputType::Fp32 => d.copy_from_slice(&v.to_le_bytes()),
        }
    }
    n
}

/// Sample `e` of `input`.
pub fn load_sample(input: &[u8], e: usize, t: InputType, network_order: bool) -> i32 {
    match t {
        InputType::Int4 => {
            let b = input[e / 2];
            let nibble = if e.is_multiple_of(2) {
                b >> 4
            } else {
                b & 0x0f
            };
            ((nibble ^ 8) as i32) - 8
        }
        InputType::Int8 => input[e] as i8 as i32,
        InputType::Int16 => {
            let b = [input[2 * e], input[2 * e + 1]];
            (if network_order {
                i16::from_be_bytes(b)
            } else {
                i16::from_le_bytes(b)
            }) as i32
        }
        InputType::Int32 => {
            let b = input[4 * e..4 * e + 4].try_into().expect("4 bytes");
            if network_order {
                i32::from_be_bytes(b)
            } else {
                i32::from_le_bytes(b)
            }
        }
    }
}

/// `f32` to IEEE half, rounding to nearest even (overflow to infinity).
pub fn f32_to_f16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let raw_exp = ((x >> 23) & 0xff) as i32;
    let mut mant = x & 0x7f_ffff;
    if raw_exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let exp = raw_exp - 127 + 15;
    if exp >= 31 {
        return sign | 0x7c00;
    }
    if exp <= 0 {
        if exp < -10 {
            return sign;
        }
        mant |= 0x80_0000;
        let shift = (14 - exp) as u32;
        let mut h = mant >> shift;
        let rem = mant & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let mut h = ((exp as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1;
    }
    sign | h as u16
}

/// `f32` to bfloat16, rounding to nearest even (finite inputs).
pub fn f32_to_bf16_bits(f: f32) -> u16 {
    let x = f.to_bits();
    ((x + 0x7fff + ((x >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(seq: u32, payload: &[u8]) -> Vec<u8> {
        // 8 header bytes, the sequence number big-endian in bytes 4..8, then the payload.
        let mut p = vec![0xEE; 4];
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    fn seq_ppb(ppb: u32) -> ReorderSpec {
        ReorderSpec {
            method: Method::SeqPacketsPerBatch {
                sequence: BitField {
                    bit_offset: 32,
                    bit_width: 32,
                },
                packets_per_batch: ppb,
            },
            payload_byte_offset: 8,
            in_slot_bytes: 4,
            conversion: None,
        }
    }

    #[test]
    fn bit_fields_read_most_significant_bit_first() {
        let p = [0b1010_1100, 0b0101_0011, 0xff];
        let f = |o, w| BitField {
            bit_offset: o,
            bit_width: w,
        };
        assert_eq!(f(0, 4).read(&p), Some(0b1010));
        assert_eq!(f(4, 8).read(&p), Some(0b1100_0101));
        assert_eq!(f(6, 3).read(&p), Some(0b000));
        assert_eq!(f(13, 3).read(&p), Some(0b011));
        assert_eq!(f(0, 24).read(&p), Some(0xac53ff));
        assert_eq!(f(20, 5).read(&p), None, "past the end");
        let w = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(f(4, 32).read(&w), Some(0x2345_6789));
    }

    #[test]
    fn packets_land_in_their_slots_whatever_the_arrival_order() {
        let spec = seq_ppb(4);
        let pk: Vec<Vec<u8>> = [9u32, 8, 11]
            .iter()
            .map(|&s| packet(s, &[s as u8; 4]))
            .collect();
        let refs: Vec<&[u8]> = pk.iter().map(|p| p.as_slice()).collect();
        let mut out = vec![0u8; spec.batch_bytes()];
        let (batch, placed) = reorder_cpu(&spec, &refs, &mut out);
        // Batch 2 (9 / 4); slots 1, 0, 3; slot 2 missing stays zero.
        assert_eq!((batch, placed), (Some(2), 3));
        assert_eq!(out, [8, 8, 8, 8, 9, 9, 9, 9, 0, 0, 0, 0, 11, 11, 11, 11]);
    }

    #[test]
    fn seq_batch_number_takes_the_batch_from_its_own_field() {
        // 8-bit sequence, 6-bit batch: 2^(8-6) = 4 packets per batch.
        let spec = ReorderSpec {
            method: Method::SeqBatchNumber {
                sequence: BitField {
                    bit_offset: 56,
                    bit_width: 8,
                },
                batch: BitField {
                    bit_offset: 40,
                    bit_width: 6,
                },
            },
            payload_byte_offset: 8,
            in_slot_bytes: 2,
            conversion: None,
        };
        assert_eq!(spec.packets_per_batch(), 4);
        let mut p = packet(0, &[1, 2, 3]);
        p[5] = 0b0001_0100; // batch field = 0b000101 = 5
        p[7] = 6; // seq 6 -> slot 2
        let mut out = vec![0u8; spec.batch_bytes()];
        let (batch, placed) = reorder_cpu(&spec, &[&p], &mut out);
        assert_eq!((batch, placed), (Some(5), 1));
        assert_eq!(out, [0, 0, 0, 0, 1, 2, 0, 0], "cut to in_slot_bytes");
    }

    #[test]
    fn too_short_packets_are_skipped() {
        let spec = seq_ppb(2);
        let mut out = vec![0u8; spec.batch_bytes()];
        assert_eq!(reorder_cpu(&spec, &[&[1, 2, 3][..]], &mut out), (None, 0));
    }

    #[test]
    fn conversions_match_hand_computed_values() {
        let c = |input, output, network_order| Conversion {
            input,
            output,
            network_order,
        };
        // int4: 0x7F -> 7, -1; 0x80 -> -8, 0.
        let mut out = [0u8; 16];
        assert_eq!(
            convert(
                &[0x7f, 0x80],
                &mut out,
                c(InputType::Int4, OutputType::Fp32, false)
            ),
            4
        );
        let f: Vec<f32> = out
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(f, [7.0, -1.0, -8.0, 0.0]);
        // int16 network order 0x0102 = 258 -> fp16 258 = 0x5c08; host order 0x0201 = 513.
        let mut h = [0u8; 2];
        convert(&[1, 2], &mut h, c(InputType::Int16, OutputType::Fp16, true));
        assert_eq!(u16::from_le_bytes(h), 0x5c08);
        convert(
            &[1, 2],
            &mut h,
            c(InputType::Int16, OutputType::Fp16, false),
        );
        assert_eq!(u16::from_le_bytes(h), 0x6002);
        // int8 -128 -> bf16 0xc300; int32 big 70000 -> fp16 overflows to +inf.
        convert(&[0x80], &mut h, c(InputType::Int8, OutputType::Bf16, false));
        assert_eq!(u16::from_le_bytes(h), 0xc300);
        convert(
            &70000i32.to_be_bytes(),
            &mut h,
            c(InputType::Int32, OutputType::Fp16, true),
        );
        assert_eq!(u16::from_le_bytes(h), 0x7c00);
    }

    #[test]
    fn half_and_bfloat_rounding_is_to_nearest_even() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(65520.0), 0x7c00, "rounds up into infinity");
        // 2049 lies halfway between 2048 and 2050: ties to even (2048).
        assert_eq!(f32_to_f16_bits(2049.0), 0x6800);
        assert_eq!(f32_to_f16_bits(2051.0), 0x6802, "2051 ties to 2052");
        assert_eq!(
            f32_to_f16_bits(5.960_464_5e-8),
            0x0001,
            "smallest subnormal"
        );
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // 257 = 0x43808000: halfway between 256 and 258, ties to even (256 = 0x4380).
        assert_eq!(f32_to_bf16_bits(257.0), 0x4380);
        assert_eq!(f32_to_bf16_bits(259.0), 0x4382, "259 ties up to 260");
        // Every int16 through both paths agrees with the standard library where it can:
        // f32 -> f64 -> exact comparisons for values representable in half.
        for v in -2048i32..=2048 {
            let h = f32_to_f16_bits(v as f32);
            assert_eq!(half_to_f32(h), v as f32, "{v}");
        }
    }

    fn half_to_f32(h: u16) -> f32 {
        let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exp = ((h >> 10) & 0x1f) as i32;
        let mant = (h & 0x3ff) as f32;
        sign * if exp == 0 {
            mant * 2f32.powi(-24)
        } else {
            (1.0 + mant / 1024.0) * 2f32.powi(exp - 15)
        }
    }

    #[test]
    fn gather_packs_payloads_in_arrival_order() {
        let mut out = [0u8; 6];
        assert_eq!(gather_cpu(&[&[1, 2], &[3], &[4, 5, 6]], &mut out), 6);
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
    }
}
