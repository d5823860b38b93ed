//! A queue's radio packets, all in one declared format, decoded into batches of samples:
//! what cannot be decoded is counted by cause, and a packet sequence number that skips
//! counts the packets it skipped.

use super::{Compression, IqError, SampleFormat, UplaneHeader, VrtHeader};
use std::collections::HashMap;

/// The packet format of a queue (`protocol: {vrt: ...}` or `{ecpri_uplane: ...}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IqFormat {
    /// VITA-49 signal data packets with samples stored as `samples`.
    Vrt {
        /// How each sample is stored.
        samples: SampleFormat,
    },
    /// O-RAN U-plane messages in eCPRI IQ data messages.
    EcpriUplane {
        /// Every PRB's compression (static: the message carries no compression header).
        compression: Compression,
        /// PRBs of a section whose PRB count field is 0 (all PRBs of the carrier).
        prbs_when_zero: u16,
    },
}

impl IqFormat {
    /// Where the packet sequence counter wraps: VITA-49's is 4 bits, eCPRI's 8.
    fn sequence_modulus(self) -> u16 {
        match self {
            Self::Vrt { .. } => 16,
            Self::EcpriUplane { .. } => 256,
        }
    }
}

/// The sample type of decoded batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// IEEE single precision (exact for every supported sample).
    #[default]
    F32,
    /// IEEE half precision, rounded to nearest even.
    F16,
}

/// Decoded samples, interleaved `[i0, q0, i1, q1, ...]`.
#[derive(Clone, Debug, PartialEq)]
pub enum IqSamples {
    /// Single precision.
    F32(Vec<f32>),
    /// Half precision, as the bits.
    F16(Vec<u16>),
}

impl IqSamples {
    /// Complex samples held.
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len() / 2,
            Self::F16(v) => v.len() / 2,
        }
    }

    /// True when no sample is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn truncate(&mut self, samples: usize) {
        match self {
            Self::F32(v) => v.truncate(2 * samples),
            Self::F16(v) => v.truncate(2 * samples),
        }
    }

    fn clear(&mut self) {
        self.truncate(0);
    }
}

/// What one packet's headers said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IqHeader {
    /// A VITA-49 signal data packet.
    Vrt(VrtHeader),
    /// An O-RAN U-plane message.
    Uplane(UplaneHeader),
}

/// One decoded packet of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IqPacket {
    /// Its headers (stream, sequence, time).
    pub header: IqHeader,
    /// Index of its first complex sample in the batch.
    pub first_sample: usize,
    /// Its complex samples.
    pub samples: usize,
    /// When it was received, in nanoseconds (0 when the queue takes no timestamps).
    pub rx_timestamp_ns: u64,
}

/// Packets decoded together: their samples one after the other, and where each starts.
#[derive(Clone, Debug, PartialEq)]
pub struct IqBatch {
    /// Every packet's samples, in arrival order.
    pub samples: IqSamples,
    /// The packets, in arrival order.
    pub packets: Vec<IqPacket>,
}

impl IqBatch {
    /// An empty batch of `precision`.
    pub fn new(precision: Precision) -> Self {
        Self {
            samples: match precision {
                Precision::F32 => IqSamples::F32(Vec::new()),
                Precision::F16 => IqSamples::F16(Vec::new()),
            },
            packets: Vec::new(),
        }
    }

    /// The precision of its samples.
    pub fn samples_precision(&self) -> Precision {
        match self.samples {
            IqSamples::F32(_) => Precision::F32,
            IqSamples::F16(_) => Precision::F16,
        }
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.samples.clear();
        self.packets.clear();
    }
}

/// What the decoder saw; every packet is counted once, under one cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IqCounters {
    /// Packets decoded.
    pub packets: u64,
    /// Complex samples decoded.
    pub samples: u64,
    /// Packets of another kind (a VRT context packet, an eCPRI message other than IQ data).
    pub packets_not_iq: u64,
    /// Packets shorter than their headers say, or otherwise damaged.
    pub packets_damaged: u64,
    /// Packets a stream's sequence counter skipped (lost before they arrived).
    pub packets_missing: u64,
    /// Packets whose sequence number was behind the stream's (late or repeated); decoded.
    pub packets_out_of_sequence: u64,
    /// Packets of streams beyond the tracked limit, decoded without a sequence check.
    pub packets_untracked: u64,
}

/// Streams whose sequence is followed; more would let a peer grow the table without bound.
const MAX_STREAMS: usize = 4096;

/// Decodes packets of one format into batches (see the module's documentation).
#[derive(Debug)]
pub struct IqDecoder {
    format: IqFormat,
    precision: Precision,
    counters: IqCounters,
    /// Per stream (VRT stream id, eCPRI `ecpriPcid`): the sequence number expected next.
    next_sequence: HashMap<u32, u16>,
}

impl IqDecoder {
    /// A decoder of `format` writing samples at `precision`.
    pub fn new(format: IqFormat, precision: Precision) -> Self {
        Self {
            format,
            precision,
            counters: IqCounters::default(),
            next_sequence: HashMap::new(),
        }
    }

    /// The precision of the batches it is declared to fill.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Decodes one packet onto the end of `batch`, at the batch's precision. A packet
    /// that cannot be decoded leaves `batch` as it was and is counted.
    pub fn decode(
        &mut self,
        packet: &[u8],
        rx_timestamp_ns: u64,
        batch: &mut IqBatch,
    ) -> Result<(), IqError> {
        let first_sample = batch.samples.len();
        let decoded = match &mut batch.samples {
            IqSamples::F32(v) => self.decode_into(packet, v),
            IqSamples::F16(v) => {
                let mut sink = super::F16Sink(std::mem::take(v));
                let r = self.decode_into(packet, &mut sink);
                *v = sink.0;
                r
            }
        };
        if decoded.is_err() {
            // A message can fail in a later section, after some samples were written.
            batch.samples.truncate(first_sample);
        }
        self.account(decoded, first_sample, rx_timestamp_ns, &mut batch.packets)
    }

    /// Reads one packet's headers without decoding its samples (for a GPU to decode them
    /// where they arrived): `ranges` gets where its stored samples lie in `packet`, and
    /// `packets` its entry, its samples numbered from `first_sample`. Counted as
    /// [`IqDecoder::decode`] counts.
    pub fn locate(
        &mut self,
        packet: &[u8],
        rx_timestamp_ns: u64,
        first_sample: usize,
        ranges: &mut super::StoredRanges,
        packets: &mut Vec<IqPacket>,
    ) -> Result<(), IqError> {
        ranges.start_packet(packet);
        let located = self.decode_into(packet, ranges);
        if located.is_err() {
            ranges.ranges.clear();
        }
        self.account(located, first_sample, rx_timestamp_ns, packets)
    }

    /// Counts a packet's outcome and, when it decoded, follows its stream's sequence and
    /// adds its entry to `packets`.
    fn account(
        &mut self,
        decoded: Result<IqHeader, IqError>,
        first_sample: usize,
        rx_timestamp_ns: u64,
        packets: &mut Vec<IqPacket>,
    ) -> Result<(), IqError> {
        let header = match decoded {
            Ok(h) => h,
            Err(e) => {
                match e {
                    IqError::NotIqData(_) => self.counters.packets_not_iq += 1,
                    IqError::Truncated { .. } => self.counters.packets_damaged += 1,
                }
                return Err(e);
            }
        };
        let (stream, sequence, samples) = match header {
            IqHeader::Vrt(h) => (h.stream_id.unwrap_or(0), h.packet_count, h.samples),
            IqHeader::Uplane(h) => (u32::from(h.pc_id), h.sequence, h.samples),
        };
        self.follow_sequence(stream, sequence);
        self.counters.packets += 1;
        self.counters.samples += samples as u64;
        packets.push(IqPacket {
            header,
            first_sample,
            samples,
            rx_timestamp_ns,
        });
        Ok(())
    }

    fn decode_into(
        &self,
        packet: &[u8],
        out: &mut impl super::IqSink,
    ) -> Result<IqHeader, IqError> {
        match self.format {
            IqFormat::Vrt { samples } => super::decode_vrt(packet, samples, out).map(IqHeader::Vrt),
            IqFormat::EcpriUplane {
                compression,
                prbs_when_zero,
            } => super::decode_ecpri_uplane(packet, compression, prbs_when_zero.into(), out)
                .map(IqHeader::Uplane),
        }
    }

    /// Counts the packets a stream's sequence skipped. A jump of half the counter's range
    /// or more reads as a late or repeated packet: with VITA-49's 4-bit counter, a loss
    /// of 8 or more packets in a row cannot be told from one.
    fn follow_sequence(&mut self, stream: u32, sequence: u8) {
        let modulus = self.format.sequence_modulus();
        let sequence = u16::from(sequence) % modulus;
        let tracked = self.next_sequence.len();
        match self.next_sequence.get_mut(&stream) {
            Some(expected) => {
                let gap = (sequence + modulus - *expected) % modulus;
                if gap < modulus / 2 {
                    self.counters.packets_missing += u64::from(gap);
                    *expected = (sequence + 1) % modulus;
                } else {
                    self.counters.packets_out_of_sequence += 1;
                }
            }
            None if tracked < MAX_STREAMS => {
                self.next_sequence.insert(stream, (sequence + 1) % modulus);
            }
            None => self.counters.packets_untracked += 1,
        }
    }

    /// What was counted so far.
    pub fn counters(&self) -> IqCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A VRT signal data packet with a stream id: header, stream id, samples.
    fn vrt(stream: u32, count: u8, samples: &[(i16, i16)]) -> Vec<u8> {
        let words = 2 + samples.len();
        let h: u32 = (1 << 28) | (u32::from(count & 0xf) << 16) | words as u32;
        let mut p = h.to_be_bytes().to_vec();
        p.extend_from_slice(&stream.to_be_bytes());
        for (i, q) in samples {
            p.extend_from_slice(&i.to_be_bytes());
            p.extend_from_slice(&q.to_be_bytes());
        }
        p
    }

    fn decoder(precision: Precision) -> IqDecoder {
        IqDecoder::new(
            IqFormat::Vrt {
                samples: SampleFormat::I16Be,
            },
            precision,
        )
    }

    /// Located packets give the same entries and counters as decoded ones, and their
    /// ranges hold exactly the bytes the decoder turns into samples.
    #[test]
    fn located_ranges_are_the_decoded_samples_bytes() {
        let samples: Vec<(i16, i16)> = (0..40).map(|k| (k * 3 - 50, 7 - k)).collect();
        let packets = [vrt(1, 0, &samples), vrt(1, 1, &samples[..9]), vec![0xf0; 8]];
        let (mut decoded, mut located) = (decoder(Precision::F32), decoder(Precision::F32));
        let mut batch = IqBatch::new(Precision::F32);
        let (mut ranges, mut entries, mut stored) = (
            crate::protocol::iq::StoredRanges::default(),
            Vec::new(),
            Vec::new(),
        );
        let mut first = 0;
        for p in &packets {
            let a = decoded.decode(p, 5, &mut batch).is_ok();
            let b = located
                .locate(p, 5, first, &mut ranges, &mut entries)
                .is_ok();
            assert_eq!(a, b);
            for &(at, len) in &ranges.ranges {
                stored.extend_from_slice(&p[at..at + len]);
            }
            first = entries
                .last()
                .map_or(0, |e: &IqPacket| e.first_sample + e.samples);
        }
        assert_eq!(entries, batch.packets);
        assert_eq!(located.counters(), decoded.counters());
        let mut again = Vec::new();
        for s in stored.chunks_exact(4) {
            let (i, q) = SampleFormat::I16Be.sample(s);
            again.extend_from_slice(&[i, q]);
        }
        assert_eq!(batch.samples, IqSamples::F32(again));
    }

    #[test]
    fn packets_land_one_after_the_other_with_their_offsets() {
        let mut d = decoder(Precision::F32);
        let mut batch = IqBatch::new(Precision::F32);
        d.decode(&vrt(7, 0, &[(1, -1), (2, -2)]), 11, &mut batch)
            .unwrap();
        d.decode(&vrt(7, 1, &[(3, -3)]), 12, &mut batch).unwrap();
        assert_eq!(
            batch.samples,
            IqSamples::F32(vec![1.0, -1.0, 2.0, -2.0, 3.0, -3.0])
        );
        let offsets: Vec<_> = batch
            .packets
            .iter()
            .map(|p| (p.first_sample, p.samples, p.rx_timestamp_ns))
            .collect();
        assert_eq!(offsets, [(0, 2, 11), (2, 1, 12)]);
        assert_eq!(d.counters().samples, 3);
    }

    #[test]
    fn half_precision_batches_hold_the_half_bits() {
        let mut d = decoder(Precision::F16);
        let mut batch = IqBatch::new(Precision::F16);
        d.decode(&vrt(7, 0, &[(1, -2)]), 0, &mut batch).unwrap();
        // 1.0 and -2.0 in IEEE half.
        assert_eq!(batch.samples, IqSamples::F16(vec![0x3c00, 0xc000]));
    }

    #[test]
    fn sequence_gaps_count_missing_packets_per_stream() {
        let mut d = decoder(Precision::F32);
        let mut batch = IqBatch::new(Precision::F32);
        for (stream, count) in [(1, 14), (1, 15), (2, 3), (1, 2), (2, 4), (1, 1)] {
            d.decode(&vrt(stream, count, &[(0, 0)]), 0, &mut batch)
                .unwrap();
        }
        let c = d.counters();
        // Stream 1: 14, 15, (0 and 1 lost), 2; then 1 is late. Stream 2: 3, 4.
        assert_eq!(c.packets, 6);
        assert_eq!(c.packets_missing, 2);
        assert_eq!(c.packets_out_of_sequence, 1);
    }

    #[test]
    fn a_damaged_packet_leaves_the_batch_as_it_was() {
        let mut d = IqDecoder::new(
            IqFormat::EcpriUplane {
                compression: Compression::None,
                prbs_when_zero: 1,
            },
            Precision::F32,
        );
        let mut batch = IqBatch::new(Precision::F32);
        // One whole section of one PRB, then a section header that promises 2 PRBs more.
        let mut m = vec![0x10, 0, 0, 0, 0, 5, 9, 0x80, 0x10, 0, 0, 0];
        m.extend_from_slice(&[0, 0x10, 0, 1]);
        m.extend((0..48).map(|b| b as u8));
        m.extend_from_slice(&[0, 0x20, 0, 2]);
        let size = (m.len() - 4) as u16;
        m[2..4].copy_from_slice(&size.to_be_bytes());
        assert!(d.decode(&m, 0, &mut batch).is_err());
        assert!(batch.samples.is_empty() && batch.packets.is_empty());
        let real_time_control = [0x10, 2, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(d.decode(&real_time_control, 0, &mut batch).is_err());
        let c = d.counters();
        assert_eq!((c.packets_damaged, c.packets_not_iq, c.packets), (1, 1, 0));
    }

    #[test]
    fn streams_beyond_the_limit_are_decoded_untracked() {
        let mut d = decoder(Precision::F32);
        let mut batch = IqBatch::new(Precision::F32);
        for stream in 0..=MAX_STREAMS as u32 {
            d.decode(&vrt(stream, 0, &[]), 0, &mut batch).unwrap();
        }
        assert_eq!(d.counters().packets_untracked, 1);
        assert_eq!(d.next_sequence.len(), MAX_STREAMS);
    }
}
