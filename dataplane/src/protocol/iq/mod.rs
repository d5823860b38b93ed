//! IQ samples out of radio packets, as complex numbers: VITA-49 (VRT) signal data packets
//! and O-RAN fronthaul U-plane messages in eCPRI (uncompressed or block floating point).
//!
//! These are the CPU definitions of the conversions: a sample `(i, q)` becomes
//! `(i as f32, q as f32)` for fixed-point samples, and `mantissa * 2^exponent` for block
//! floating point, both exact in `f32` (at most 16 significant bits times a power of
//! two), and in `f16` rounded to nearest even. A GPU decoder of the same formats must
//! give these bits.
//!
//! [`IqDecoder`] decodes a queue's packets in one declared format ([`IqFormat`]) into
//! batches of samples, counting what it cannot decode and the packets a sequence number
//! says are missing.

mod decoder;
pub use decoder::{
    IqBatch, IqCounters, IqDecoder, IqFormat, IqHeader, IqPacket, IqSamples, Precision,
};

/// Why a packet's samples cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IqError {
    /// Shorter than its headers say.
    #[error("truncated {what}: {need} bytes needed, {have} present")]
    Truncated {
        /// The part that does not fit.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Not a packet of this kind (a VRT context packet, an eCPRI message other than IQ
    /// data).
    #[error("not IQ data: {0}")]
    NotIqData(String),
}

/// How fixed-point samples are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleFormat {
    /// 8-bit signed I, then Q.
    I8,
    /// 16-bit signed big-endian I, then Q (VITA-49's default byte order).
    I16Be,
    /// 16-bit signed little-endian I, then Q.
    I16Le,
}

impl SampleFormat {
    /// Bytes of one complex sample.
    pub fn bytes(self) -> usize {
        match self {
            Self::I8 => 2,
            Self::I16Be | Self::I16Le => 4,
        }
    }

    fn sample(self, b: &[u8]) -> (f32, f32) {
        match self {
            Self::I8 => (f32::from(b[0] as i8), f32::from(b[1] as i8)),
            Self::I16Be => (
                f32::from(i16::from_be_bytes([b[0], b[1]])),
                f32::from(i16::from_be_bytes([b[2], b[3]])),
            ),
            Self::I16Le => (
                f32::from(i16::from_le_bytes([b[0], b[1]])),
                f32::from(i16::from_le_bytes([b[2], b[3]])),
            ),
        }
    }
}

/// Where decoded samples go: interleaved `[i0, q0, i1, q1, ...]`.
pub trait IqSink {
    /// Appends one complex sample.
    fn push(&mut self, i: f32, q: f32);

    /// Sees the stored bytes of the whole samples (VITA-49) or PRBs (eCPRI) about to be
    /// decoded, a sub-slice of the packet; true (the default) decodes them here through
    /// [`IqSink::push`], false leaves them to be decoded elsewhere (on the GPU).
    fn stored(&mut self, _bytes: &[u8]) -> bool {
        true
    }
}

/// A sink that decodes nothing: it notes where each run of stored samples lies in the
/// packet (offset and length), for a GPU kernel to decode them where they arrived.
#[derive(Debug, Default)]
pub struct StoredRanges {
    /// The packet's first byte's address, to turn sub-slices into offsets.
    packet_start: usize,
    /// `(offset, length)` of each run, in packet order.
    pub ranges: Vec<(usize, usize)>,
}

impl StoredRanges {
    /// Notes the runs of `packet` from here on (keeping earlier packets' ranges, whose
    /// offsets are in their own packets: callers take them per packet).
    pub fn start_packet(&mut self, packet: &[u8]) {
        self.packet_start = packet.as_ptr() as usize;
        self.ranges.clear();
    }
}

impl IqSink for StoredRanges {
    fn push(&mut self, _i: f32, _q: f32) {}

    fn stored(&mut self, bytes: &[u8]) -> bool {
        // The decoders pass sub-slices of the packet given to `start_packet`.
        let offset = (bytes.as_ptr() as usize).wrapping_sub(self.packet_start);
        self.ranges.push((offset, bytes.len()));
        false
    }
}

impl IqSink for Vec<f32> {
    fn push(&mut self, i: f32, q: f32) {
        self.extend_from_slice(&[i, q]);
    }
}

/// Interleaved IEEE half precision, as the bits (`u16`), rounded to nearest even.
#[derive(Debug, Default)]
pub struct F16Sink(pub Vec<u16>);

impl IqSink for F16Sink {
    fn push(&mut self, i: f32, q: f32) {
        self.0.push(gpudirect::reorder::f32_to_f16_bits(i));
        self.0.push(gpudirect::reorder::f32_to_f16_bits(q));
    }
}

/// What a VITA-49 signal data packet said besides its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VrtHeader {
    /// The stream identifier, when the packet type carries one.
    pub stream_id: Option<u32>,
    /// The 4-bit packet count (modulo 16 per stream: a gap is a lost packet).
    pub packet_count: u8,
    /// The integer timestamp, when present.
    pub integer_seconds: Option<u32>,
    /// The fractional timestamp, when present.
    pub fractional: Option<u64>,
    /// Samples decoded.
    pub samples: usize,
}

/// Decodes the samples of a VITA-49 signal data packet (packet types 0 and 1; 2 and 3,
/// extension data, are read the same way) into `out`. The header's packet size bounds
/// the payload; the trailer, when indicated, is not payload; bytes after the last whole
/// sample are ignored (padding to the 32-bit word).
pub fn decode_vrt(
    packet: &[u8],
    format: SampleFormat,
    out: &mut impl IqSink,
) -> Result<VrtHeader, IqError> {
    let word = |k: usize| -> Result<u32, IqError> {
        packet
            .get(4 * k..4 * k + 4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
            .ok_or(IqError::Truncated {
                what: "VRT header",
                need: 4 * k + 4,
                have: packet.len(),
            })
    };
    let h = word(0)?;
    let kind = h >> 28;
    if kind > 3 {
        return Err(IqError::NotIqData(format!(
            "VRT packet type {kind} (signal or extension data is 0 to 3)"
        )));
    }
    let class_id = h & (1 << 27) != 0;
    let trailer = h & (1 << 26) != 0;
    let (tsi, tsf) = ((h >> 22) & 3, (h >> 20) & 3);
    let size_words = (h & 0xffff) as usize;
    if size_words * 4 > packet.len() {
        return Err(IqError::Truncated {
            what: "VRT packet",
            need: size_words * 4,
            have: packet.len(),
        });
    }
    let mut at = 1;
    let mut header = VrtHeader {
        packet_count: ((h >> 16) & 0xf) as u8,
        ..VrtHeader::default()
    };
    if kind & 1 == 1 {
        header.stream_id = Some(word(at)?);
        at += 1;
    }
    if class_id {
        at += 2;
    }
    if tsi != 0 {
        header.integer_seconds = Some(word(at)?);
        at += 1;
    }
    if tsf != 0 {
        header.fractional = Some(u64::from(word(at)?) << 32 | u64::from(word(at + 1)?));
        at += 2;
    }
    let end = size_words.saturating_sub(usize::from(trailer));
    if at > end {
        return Err(IqError::Truncated {
            what: "VRT headers within the packet size",
            need: at * 4,
            have: end * 4,
        });
    }
    let payload = &packet[at * 4..end * 4];
    let whole = &payload[..payload.len() / format.bytes() * format.bytes()];
    header.samples = whole.len() / format.bytes();
    if !whole.is_empty() && out.stored(whole) {
        for s in whole.chunks_exact(format.bytes()) {
            let (i, q) = format.sample(s);
            out.push(i, q);
        }
    }
    Ok(header)
}

/// How an O-RAN U-plane section's PRBs are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// 16-bit big-endian I and Q, no exponent.
    None,
    /// Block floating point: per PRB one byte whose low 4 bits are the exponent, then 24
    /// signed mantissas (12 I/Q pairs) of `iq_width` bits, packed big-endian.
    BlockFloatingPoint {
        /// Bits per mantissa (1 to 16).
        iq_width: u8,
    },
}

impl Compression {
    /// Bytes of one PRB (12 complex samples) stored with this compression.
    pub fn prb_bytes(self) -> usize {
        match self {
            Self::None => 12 * 4,
            Self::BlockFloatingPoint { iq_width } => 1 + (24 * usize::from(iq_width)).div_ceil(8),
        }
    }
}

/// What a U-plane message said besides its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UplaneHeader {
    /// eCPRI's `ecpriPcid`: the eAxC the message belongs to.
    pub pc_id: u16,
    /// eCPRI's sequence id (`ecpriSeqid`, its first byte).
    pub sequence: u8,
    /// The radio frame.
    pub frame_id: u8,
    /// Subframe, slot and symbol.
    pub subframe_slot_symbol: u16,
    /// Sections decoded.
    pub sections: usize,
    /// Samples decoded (12 per PRB).
    pub samples: usize,
}

/// Decodes an eCPRI IQ data message (message type 0) carrying an O-RAN U-plane message
/// whose sections use `compression` for every PRB, the compression header not in the
/// message (static configuration). Each section: 12-bit section id, rb, symInc, 10-bit
/// start PRB, 8-bit PRB count (0: `prbs_when_zero`), then its PRBs. Samples go to `out`
/// in message order.
pub fn decode_ecpri_uplane(
    message: &[u8],
    compression: Compression,
    prbs_when_zero: usize,
    out: &mut impl IqSink,
) -> Result<UplaneHeader, IqError> {
    const ECPRI: usize = 4;
    const TRANSPORT: usize = 4;
    const APPLICATION: usize = 4;
    const SECTION: usize = 4;
    let truncated = |what, need: usize| IqError::Truncated {
        what,
        need,
        have: message.len(),
    };
    if message.len() < ECPRI + TRANSPORT + APPLICATION {
        return Err(truncated(
            "eCPRI and U-plane headers",
            ECPRI + TRANSPORT + APPLICATION,
        ));
    }
    if message[0] >> 4 != 1 {
        return Err(IqError::NotIqData(format!(
            "eCPRI revision {} (1 is read)",
            message[0] >> 4
        )));
    }
    if message[1] != 0 {
        return Err(IqError::NotIqData(format!(
            "eCPRI message type {} (IQ data is 0)",
            message[1]
        )));
    }
    let size = usize::from(u16::from_be_bytes([message[2], message[3]]));
    let end = ECPRI + size;
    if end > message.len() {
        return Err(truncated("eCPRI payload", end));
    }
    if let Compression::BlockFloatingPoint { iq_width } = compression
        && !(1..=16).contains(&iq_width)
    {
        return Err(IqError::NotIqData(format!("iq_width {iq_width} (1 to 16)")));
    }
    let mut header = UplaneHeader {
        pc_id: u16::from_be_bytes([message[4], message[5]]),
        sequence: message[6],
        frame_id: message[9],
        subframe_slot_symbol: u16::from_be_bytes([message[10], message[11]]),
        ..UplaneHeader::default()
    };
    let mut at = ECPRI + TRANSPORT + APPLICATION;
    let per_prb = compression.prb_bytes();
    while at < end {
        if at + SECTION > end {
            return Err(truncated("U-plane section header", at + SECTION));
        }
        let prbs = match message[at + 3] {
            0 => prbs_when_zero,
            n => usize::from(n),
        };
        at += SECTION;
        let need = at + prbs * per_prb;
        if need > end {
            return Err(truncated("U-plane section PRBs", need));
        }
        if need > at && out.stored(&message[at..need]) {
            for prb in message[at..need].chunks_exact(per_prb) {
                decode_prb(prb, compression, out);
            }
        }
        header.samples += prbs * 12;
        header.sections += 1;
        at = need;
    }
    Ok(header)
}

fn decode_prb(prb: &[u8], compression: Compression, out: &mut impl IqSink) {
    match compression {
        Compression::None => {
            for s in prb.chunks_exact(4) {
                let (i, q) = SampleFormat::I16Be.sample(s);
                out.push(i, q);
            }
        }
        Compression::BlockFloatingPoint { iq_width } => {
            let scale = f32::from(1u16 << (prb[0] & 0xf));
            let bits = &prb[1..];
            let w = u32::from(iq_width);
            let mantissa = |k: u32| -> f32 {
                let first = k * w;
                let mut v: u32 = 0;
                for b in first..first + w {
                    let bit = (bits[(b / 8) as usize] >> (7 - b % 8)) & 1;
                    v = (v << 1) | u32::from(bit);
                }
                // Sign-extend the w-bit two's complement value.
                let signed = ((v << (32 - w)) as i32) >> (32 - w);
                signed as f32
            };
            for k in 0..12 {
                out.push(mantissa(2 * k) * scale, mantissa(2 * k + 1) * scale);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VRT signal data packet with a stream id, integer and fractional timestamps and
    /// a trailer, written field by field from the standard's layout.
    fn vrt(samples: &[(i16, i16)], count: u8) -> Vec<u8> {
        let words = 1 + 1 + 1 + 2 + samples.len() + 1;
        let h: u32 =
            (1 << 28) | (1 << 26) | (1 << 22) | (2 << 20) | (u32::from(count) << 16) | words as u32;
        let mut p = h.to_be_bytes().to_vec();
        p.extend_from_slice(&0xabcd_0001u32.to_be_bytes());
        p.extend_from_slice(&1_700_000_000u32.to_be_bytes());
        p.extend_from_slice(&123_456_789u64.to_be_bytes());
        for (i, q) in samples {
            p.extend_from_slice(&i.to_be_bytes());
            p.extend_from_slice(&q.to_be_bytes());
        }
        p.extend_from_slice(&0u32.to_be_bytes()); // trailer
        p
    }

    #[test]
    fn vrt_samples_and_header_fields_read_back() {
        let samples = [(1i16, -1i16), (i16::MAX, i16::MIN), (-300, 12)];
        let p = vrt(&samples, 9);
        let mut out = Vec::new();
        let h = decode_vrt(&p, SampleFormat::I16Be, &mut out).unwrap();
        assert_eq!(
            h,
            VrtHeader {
                stream_id: Some(0xabcd_0001),
                packet_count: 9,
                integer_seconds: Some(1_700_000_000),
                fractional: Some(123_456_789),
                samples: 3
            }
        );
        let want: Vec<f32> = samples
            .iter()
            .flat_map(|&(i, q)| [f32::from(i), f32::from(q)])
            .collect();
        assert_eq!(out, want, "the trailer is not a sample");
        let mut half = F16Sink::default();
        decode_vrt(&p, SampleFormat::I16Be, &mut half).unwrap();
        // 32767 rounds to 32768 in half precision; -32768 is exact.
        assert_eq!(half.0[2], 0x7800);
        assert_eq!(half.0[3], 0xf800);
        // A context packet, and a packet cut short, are refused by name.
        let mut context = p.clone();
        context[0] = 0x40;
        assert!(matches!(
            decode_vrt(&context, SampleFormat::I16Be, &mut out),
            Err(IqError::NotIqData(_))
        ));
        assert!(matches!(
            decode_vrt(&p[..p.len() - 4], SampleFormat::I16Be, &mut out),
            Err(IqError::Truncated { .. })
        ));
    }

    /// Packs mantissas MSB first, as the O-RAN block floating point layout does.
    fn bfp_prb(exponent: u8, mantissas: &[i32; 24], width: u32) -> Vec<u8> {
        let mut bits = Vec::new();
        for &m in mantissas {
            for b in (0..width).rev() {
                bits.push(((m >> b) & 1) as u8);
            }
        }
        let mut out = vec![exponent];
        for byte in bits.chunks(8) {
            let mut v = 0u8;
            for (k, &bit) in byte.iter().enumerate() {
                v |= bit << (7 - k);
            }
            out.push(v);
        }
        out
    }

    fn uplane(sections: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x12, 0x34, 0x07, 0x80]; // PC_ID, sequence 7, E bit
        body.extend_from_slice(&[0x10, 5, 0x01, 0x23]); // direction..., frame 5, slot
        for (k, (prbs, data)) in sections.iter().enumerate() {
            body.extend_from_slice(&[(k as u8) << 4, 0, 0, *prbs]);
            body.extend_from_slice(data);
        }
        let mut m = vec![0x10, 0x00];
        m.extend_from_slice(&(body.len() as u16).to_be_bytes());
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn block_floating_point_sections_decode_exactly() {
        for width in [9u32, 14] {
            let lim = 1i32 << (width - 1);
            let a: [i32; 24] = std::array::from_fn(|k| (k as i32 * 37 % (2 * lim)) - lim);
            let b: [i32; 24] = std::array::from_fn(|k| lim - 1 - k as i32);
            let mut data = bfp_prb(3, &a, width);
            data.extend(bfp_prb(0, &b, width));
            let m = uplane(&[(2, data), (1, bfp_prb(15, &a, width))]);
            let mut out = Vec::new();
            let h = decode_ecpri_uplane(
                &m,
                Compression::BlockFloatingPoint {
                    iq_width: width as u8,
                },
                273,
                &mut out,
            )
            .unwrap();
            assert_eq!(
                (h.sequence, h.frame_id, h.sections, h.samples),
                (7, 5, 2, 36)
            );
            let want: Vec<f32> = a
                .iter()
                .map(|&m| (m * 8) as f32)
                .chain(b.iter().map(|&m| m as f32))
                .chain(a.iter().map(|&m| (m as f32) * 32768.0))
                .collect();
            assert_eq!(out, want, "width {width}");
        }
        let plain: Vec<u8> = (0..12u16)
            .flat_map(|k| [(k as i16 - 6).to_be_bytes(), (600 * k as i16).to_be_bytes()])
            .flatten()
            .collect();
        let mut out = Vec::new();
        decode_ecpri_uplane(&uplane(&[(1, plain)]), Compression::None, 0, &mut out).unwrap();
        assert_eq!(out[..4], [-6.0, 0.0, -5.0, 600.0]);
        let short = uplane(&[(3, vec![0; 10])]);
        assert!(matches!(
            decode_ecpri_uplane(&short, Compression::None, 0, &mut out),
            Err(IqError::Truncated { .. })
        ));
    }

    proptest::proptest! {
        /// Any bytes: samples or a named error, never a panic.
        #[test]
        fn any_bytes_decode_or_are_refused(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            width in 0u8..20,
        ) {
            let mut out = Vec::new();
            let _ = decode_vrt(&bytes, SampleFormat::I16Le, &mut out);
            let _ = decode_vrt(&bytes, SampleFormat::I8, &mut out);
            let _ = decode_ecpri_uplane(
                &bytes,
                Compression::BlockFloatingPoint { iq_width: width },
                273,
                &mut out,
            );
            let _ = decode_ecpri_uplane(&bytes, Compression::None, 0, &mut out);
        }
    }
}
