//! Test traffic: Ethernet/IPv4/UDP frames with valid lengths and checksums and a trailer
//! carrying a stream id, a flow index, a per-flow sequence number and the send time; and
//! the checker that verifies them and measures one-way latency. The trailer sits at the end
//! of the frame, so the checker needs no knowledge of the sender's header or payload sizes.
//!
//! Trailer (20 bytes, big-endian): magic `DPB1` (4), stream (2), flow index (3), sequence
//! (5), send time (6: the low 48 bits of nanoseconds since the Unix epoch, 0 when not
//! stamped; it wraps after 78 hours, which a difference of two stamps survives).

#![forbid(unsafe_code)]

use dataplane::config::{BenchTxConfig, PortRange};
use gpudirect::frames::{FrameFields, FrameTemplate, NO_COUNTER};
use gpudirect::reorder::{BitField, Method, ReorderSpec};

mod checksum;
pub use checksum::{PAYLOAD_SUM_FROM, checksum, payload_sum, shift_sum, word_sum};
use checksum::{fold, sum16};

/// Ethernet + IPv4 + UDP header bytes.
pub const L2_L4_HEADER: usize = 42;
/// Bytes of the trailer at the end of every frame.
pub const TRAILER: usize = dataplane::config::BENCH_TRAILER_BYTES;
const MAGIC: [u8; 4] = *b"DPB1";
const UDP_OFFSET: usize = 34;
/// The EtherType of an 802.1Q tag, and the tag's length.
const VLAN_TPID: [u8; 2] = [0x81, 0x00];
const VLAN_TAG: usize = 4;
/// Send times keep this many low bits of the nanosecond clock.
const TIME_BITS: u32 = 48;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
/// Flow indices fit the trailer's 3 bytes with room to spare.
const MAX_FLOWS: usize = 1 << 20;
/// Sequence numbers wrap at 2^40 per flow (hours at 100 Mpps on one flow).
const SEQUENCE_MASK: u64 = (1 << 40) - 1;

/// How much the generator writes per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TxWork {
    /// Ports, the sequence trailer and the UDP checksum of every frame (headers and fill
    /// are written once per buffer, since they never change).
    #[default]
    Full,
    /// Only the 42-byte Ethernet/IPv4/UDP header of every frame, with rotating ports and no
    /// UDP checksum, into reused, pre-written buffers: the work of testpmd's `txonly`. The
    /// frames carry no sequence trailer, so the receiving side can only count them.
    Headers,
}

/// How much the receiving side reads of every frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum RxWork {
    /// Headers, IPv4 checksum, length fields, trailer and per-flow sequence.
    #[default]
    Full,
    /// Only the trailer: stream, flow and per-flow sequence (no header byte read).
    Trailer,
    /// Nothing: packets and bytes are counted from the descriptors, as testpmd's `rxonly`.
    Count,
}

/// Builds the frames of one generator.
pub struct FrameBuilder {
    frame_len: usize,
    template: [u8; L2_L4_HEADER],
    /// Ones-complement sum of the UDP area that never changes: pseudo header, UDP length,
    /// padding and fill bytes (ports, checksum and trailer excluded).
    constant_sum: u64,
    fill: Vec<u8>,
    src: PortRange,
    dst: PortRange,
    stream: u16,
    sequence: Vec<u64>,
    counter: u64,
    /// `counter` modulo the source and destination port counts, kept by counting: two
    /// divisions per frame cost the generator more than writing its headers.
    port_cursor: (u64, u64),
    /// `sequence_number_offset`: byte position of the 32-bit frame counter and its next
    /// value.
    frame_counter: Option<(usize, u32)>,
    /// Send time written into the next frames' trailers (low 48 bits of epoch ns).
    send_time: u64,
    /// Header area bytes (zeros after the 42-byte header up to here).
    header_size: usize,
    /// A reorder's fields written into every frame, from the frame's index, and the
    /// template those frames are then written from (made once).
    reorder: Option<(ReorderFields, FrameTemplate)>,
}

/// The sequence (and batch) fields of a reorder, written by a generator so that its
/// frames are reordered by them: frame `c` of the generator carries sequence
/// `c mod 2^width` and, for `seq_batch_number`, batch `(c / packets_per_batch) mod
/// 2^batch_width`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReorderFields {
    /// Sequence number field (bits from the frame's first byte).
    pub sequence: BitField,
    /// Batch number field (`seq_batch_number` only).
    pub batch: Option<BitField>,
    /// Packets per batch.
    pub packets_per_batch: u32,
}

fn low_bits(v: u64, width: u32) -> u32 {
    (v & ((1u64 << width) - 1)) as u32
}

impl ReorderFields {
    /// The fields `spec` reads.
    pub fn of(spec: &ReorderSpec) -> Self {
        let (sequence, batch) = match spec.method {
            Method::SeqBatchNumber { sequence, batch } => (sequence, Some(batch)),
            Method::SeqPacketsPerBatch { sequence, .. } => (sequence, None),
        };
        Self {
            sequence,
            batch,
            packets_per_batch: spec.packets_per_batch(),
        }
    }

    /// Sequence and batch field values of frame `c`.
    pub fn values(&self, c: u64) -> (u32, u32) {
        let seq = low_bits(c, self.sequence.bit_width);
        let batch = self.batch.map_or(0, |b| {
            low_bits(c / u64::from(self.packets_per_batch), b.bit_width)
        });
        (seq, batch)
    }
}

impl FrameBuilder {
    /// A builder for the generator described by `cfg`, tagging frames with `stream`.
    pub fn new(cfg: &BenchTxConfig, stream: u16) -> Self {
        let frame_len = (cfg.header_size + cfg.payload_size) as usize;
        assert!(frame_len >= L2_L4_HEADER + TRAILER);
        let mut t = [0u8; L2_L4_HEADER];
        t[0..6].copy_from_slice(&cfg.eth_dst_addr);
        t[6..12].copy_from_slice(&cfg.eth_src_addr);
        t[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        t[14] = 0x45;
        t[16..18].copy_from_slice(&((frame_len - 14) as u16).to_be_bytes());
        t[20..22].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
        t[22] = 64;
        t[23] = 17;
        t[26..30].copy_from_slice(&cfg.ip_src_addr.octets());
        t[30..34].copy_from_slice(&cfg.ip_dst_addr.octets());
        let ip_sum = checksum(&t[14..34]);
        t[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        let udp_len = (frame_len - UDP_OFFSET) as u16;
        t[38..40].copy_from_slice(&udp_len.to_be_bytes());
        // Bytes between the UDP header and the trailer: zero padding to header_size, then a
        // counting pattern (zero where the frame counter goes; it is summed per frame).
        let counter_at = cfg
            .sequence_number
            .map(|s| (cfg.header_size + s.offset) as usize);
        let fill: Vec<u8> = (L2_L4_HEADER..frame_len - TRAILER)
            .map(|i| {
                if i < cfg.header_size as usize
                    || counter_at.is_some_and(|at| (at..at + 4).contains(&i))
                {
                    0
                } else {
                    i as u8
                }
            })
            .collect();
        let pseudo = sum16(&t[26..34], false) + 17 + u64::from(udp_len);
        let constant_sum = pseudo + u64::from(udp_len) + sum16(&fill, false);
        let flows = cfg.udp_src_port.len() as usize * cfg.udp_dst_port.len() as usize;
        Self {
            frame_len,
            template: t,
            constant_sum,
            fill,
            src: cfg.udp_src_port,
            dst: cfg.udp_dst_port,
            stream,
            sequence: vec![0; flows],
            counter: 0,
            port_cursor: (0, 0),
            frame_counter: cfg
                .sequence_number
                .map(|s| ((cfg.header_size + s.offset) as usize, s.start)),
            send_time: 0,
            header_size: cfg.header_size as usize,
            reorder: None,
        }
    }

    /// Writes `fields`' sequence (and batch) numbers into every frame from now on. The
    /// checksums are then computed over the whole frame, since the fields may sit
    /// anywhere (the reference's examples put them in the IPv4 header).
    pub fn with_reorder_fields(mut self, fields: ReorderFields) -> Self {
        let template = self.template_with(Some(fields));
        self.reorder = Some((fields, template));
        self
    }

    /// The reorder fields written into the frames, if any.
    pub fn reorder_fields(&self) -> Option<ReorderFields> {
        self.reorder.map(|(f, _)| f)
    }

    /// What every frame shares, for the GPU's frame writer.
    pub fn template(&self) -> FrameTemplate {
        match self.reorder {
            Some((_, t)) => t,
            None => self.template_with(None),
        }
    }

    fn template_with(&self, reorder: Option<ReorderFields>) -> FrameTemplate {
        let mut head = [0u8; 64];
        head[..L2_L4_HEADER].copy_from_slice(&self.template);
        let (sequence_offset, sequence_width, batch_offset, batch_width) = match reorder {
            Some(r) => {
                let b = r.batch.unwrap_or(BitField {
                    bit_offset: 0,
                    bit_width: 0,
                });
                (
                    r.sequence.bit_offset,
                    r.sequence.bit_width,
                    b.bit_offset,
                    b.bit_width,
                )
            }
            None => (0, 0, 0, 0),
        };
        FrameTemplate {
            head,
            frame_len: self.frame_len as u32,
            header_size: self.header_size as u32,
            counter_at: self.frame_counter.map_or(NO_COUNTER, |(at, _)| at as u32),
            sequence_offset,
            sequence_width,
            batch_offset,
            batch_width,
        }
    }

    /// The bytes every frame has in common: `Some(byte)` where no frame differs, `None`
    /// for per-frame bytes (ports, checksums, counter, reorder fields, trailer).
    pub fn common_bytes(&self) -> Vec<Option<u8>> {
        let t = self.template();
        let f = FrameFields::default();
        let mut out: Vec<Option<u8>> = (0..self.frame_len as u32)
            .map(|k| Some(t.byte(&f, k)))
            .collect();
        let mut unknown = |from: usize, to: usize| {
            for b in &mut out[from.min(self.frame_len)..to.min(self.frame_len)] {
                *b = None;
            }
        };
        unknown(24, 26);
        unknown(34, 38);
        unknown(40, 42);
        unknown(self.frame_len - TRAILER, self.frame_len);
        if let Some((at, _)) = self.frame_counter {
            unknown(at, at + 4);
        }
        for field in [t.sequence_field(), t.batch_field()].into_iter().flatten() {
            unknown(field.bit_offset as usize / 8, field.end_byte());
        }
        out
    }

    /// The next frame's per-frame fields (what [`FrameBuilder::write_next`] writes), for
    /// the GPU's frame writer; advances the generator as writing a frame does.
    pub fn next_fields(&mut self) -> FrameFields {
        let index = self.counter;
        let (flow, sport, dport) = self.next_ports();
        let seq = self.sequence[flow];
        self.sequence[flow] = seq + 1;
        let mut trailer = [0u8; TRAILER];
        trailer[0..4].copy_from_slice(&MAGIC);
        trailer[4..6].copy_from_slice(&self.stream.to_be_bytes());
        trailer[6..9].copy_from_slice(&(flow as u32).to_be_bytes()[1..]);
        trailer[9..14].copy_from_slice(&(seq & SEQUENCE_MASK).to_be_bytes()[3..]);
        trailer[14..20].copy_from_slice(&self.send_time.to_be_bytes()[2..]);
        let counter = match &mut self.frame_counter {
            Some((_, next)) => {
                let v = *next;
                *next = next.wrapping_add(1);
                v
            }
            None => 0,
        };
        let (sequence, batch) = self.reorder.map_or((0, 0), |(r, _)| r.values(index));
        FrameFields {
            sport,
            dport,
            counter,
            sequence,
            batch,
            trailer,
            pad: [0; 4],
        }
    }

    /// Stamps the next frames with `epoch_ns` (nanoseconds since the Unix epoch): a
    /// generator calls it once per burst, so the clock is read once per burst.
    #[inline]
    pub fn set_send_time(&mut self, epoch_ns: u64) {
        self.send_time = epoch_ns & TIME_MASK;
    }

    /// Length of every frame.
    pub fn frame_len(&self) -> usize {
        self.frame_len
    }

    /// Writes a whole frame (constant part and the next frame's fields) into every packet
    /// of `burst` (first segment, host memory) and sets their lengths.
    pub fn fill(&mut self, burst: &mut dataplane::Burst) {
        let len = self.frame_len;
        for i in 0..burst.len() {
            let buf = burst
                .buffer_mut(i, 0)
                .expect("frames are built in host memory");
            self.write_constant(buf);
            self.write_next(buf);
            burst.set_len(i, 0, len);
        }
    }

    /// Writes the constant part of a frame (headers and fill) into `buf`; needed once per
    /// buffer, since only ports, checksum and trailer change between frames.
    pub fn write_constant(&self, buf: &mut [u8]) {
        buf[..L2_L4_HEADER].copy_from_slice(&self.template);
        buf[L2_L4_HEADER..self.frame_len - TRAILER].copy_from_slice(&self.fill);
    }

    /// Writes the next frame's changing fields into `buf` (which holds the constant part).
    #[inline]
    pub fn write_next(&mut self, buf: &mut [u8]) {
        if let Some((_, t)) = self.reorder {
            let f = self.next_fields();
            gpudirect::frames::write_frame(&t, &f, buf);
            return;
        }
        let (flow, sport, dport) = self.next_ports();
        let seq = self.sequence[flow];
        self.sequence[flow] = seq + 1;
        let f = self.frame_len;
        let trailer = &mut buf[f - TRAILER..f];
        trailer[0..4].copy_from_slice(&MAGIC);
        trailer[4..6].copy_from_slice(&self.stream.to_be_bytes());
        trailer[6..9].copy_from_slice(&(flow as u32).to_be_bytes()[1..]);
        trailer[9..14].copy_from_slice(&(seq & SEQUENCE_MASK).to_be_bytes()[3..]);
        trailer[14..20].copy_from_slice(&self.send_time.to_be_bytes()[2..]);
        let trailer_odd = (f - TRAILER - UDP_OFFSET) % 2 == 1;
        let mut counter_sum = 0;
        if let Some((at, next)) = &mut self.frame_counter {
            buf[*at..*at + 4].copy_from_slice(&next.to_be_bytes());
            counter_sum = sum16(&buf[*at..*at + 4], (*at - UDP_OFFSET) % 2 == 1);
            *next = next.wrapping_add(1);
        }
        let sum = self.constant_sum
            + counter_sum
            + u64::from(sport)
            + u64::from(dport)
            + sum16(&buf[f - TRAILER..f], trailer_odd);
        let mut csum = !fold(sum);
        if csum == 0 {
            csum = 0xffff;
        }
        buf[34..36].copy_from_slice(&sport.to_be_bytes());
        buf[36..38].copy_from_slice(&dport.to_be_bytes());
        buf[40..42].copy_from_slice(&csum.to_be_bytes());
    }

    /// Writes the next frame's headers only (rotating ports, no UDP checksum, no trailer)
    /// into `buf`; the rest of the frame is whatever the buffer holds ([`TxWork::Headers`]).
    #[inline]
    pub fn write_headers(&mut self, buf: &mut [u8]) {
        let (_, sport, dport) = self.next_ports();
        let head = &mut buf[..L2_L4_HEADER];
        head.copy_from_slice(&self.template);
        head[34..36].copy_from_slice(&sport.to_be_bytes());
        head[36..38].copy_from_slice(&dport.to_be_bytes());
    }

    /// The next frame's flow index and UDP ports: both ports rotate per frame.
    #[inline]
    fn next_ports(&mut self) -> (usize, u16, u16) {
        let nd = u64::from(self.dst.len());
        let (si, di) = self.port_cursor;
        self.counter += 1;
        let wrap = |i: u64, n: u64| if i + 1 == n { 0 } else { i + 1 };
        self.port_cursor = (wrap(si, u64::from(self.src.len())), wrap(di, nd));
        (
            (si * nd + di) as usize,
            self.src.first + si as u16,
            self.dst.first + di as u16,
        )
    }

    /// UDP port pairs the generator rotates through (its flows).
    pub fn flows(&self) -> usize {
        self.sequence.len()
    }

    /// The stream id in the trailers.
    pub fn stream(&self) -> u16 {
        self.stream
    }

    /// Frames generated so far.
    pub fn generated(&self) -> u64 {
        self.counter
    }
}

/// Verdicts of the checker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct CheckCounts {
    /// Frames that passed every check.
    pub valid: u64,
    /// Frames with wrong lengths, headers, checksums or trailer.
    pub corrupt: u64,
    /// Sequence numbers still missing from the flows' sequences at the end (not yet seen;
    /// late arrivals fill their gap). Corrupt frames leave gaps too, since their sequence
    /// number cannot be trusted.
    pub gaps: u64,
    /// Frames that arrived after a later frame of their flow (late, not duplicated).
    pub reordered: u64,
    /// Frames whose sequence number was already seen (within the last
    /// [`DUPLICATE_WINDOW`] of their flow).
    pub duplicates: u64,
}

impl CheckCounts {
    /// Adds another checker's counts.
    pub fn add(&mut self, o: &CheckCounts) {
        self.valid += o.valid;
        self.corrupt += o.corrupt;
        self.gaps += o.gaps;
        self.reordered += o.reordered;
        self.duplicates += o.duplicates;
    }
}

/// How far below a flow's next expected sequence number the checker remembers which
/// numbers it saw, to tell a duplicate from a late frame. Older late frames count as
/// reordered.
pub const DUPLICATE_WINDOW: u64 = 64;

/// Where a flow's sequence stands: the next number expected and, bit k, whether
/// `next - 1 - k` was seen.
#[derive(Clone, Copy, Debug, Default)]
struct FlowSequence {
    next: u64,
    seen: u64,
}

/// One-way latency of checked frames: receive time minus the send time in their trailer,
/// both nanoseconds since the Unix epoch.
pub struct Latency {
    histogram: hdrhistogram::Histogram<u64>,
    /// A run of equal samples not yet recorded (frames of one burst share both times).
    pending: (u64, u64),
    /// Frames whose receive time was before their send time (clocks of two processes).
    pub receive_before_send: u64,
}

/// Percentiles of [`Latency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct LatencySummary {
    /// Frames measured.
    pub frames: u64,
    /// Smallest, ns.
    pub min_ns: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
    /// Frames whose receive time was before their send time (not measured).
    pub receive_before_send: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            // Three significant digits up to an hour.
            histogram: hdrhistogram::Histogram::new_with_max(3_600_000_000_000, 3)
                .expect("valid histogram bounds"),
            pending: (0, 0),
            receive_before_send: 0,
        }
    }
}

impl Latency {
    /// Records a frame sent at `sent` (low 48 bits of epoch ns) and received at
    /// `received` (epoch ns).
    #[inline]
    fn record(&mut self, sent: u64, received: u64) {
        let ns = received.wrapping_sub(sent) & TIME_MASK;
        if ns >= 1 << (TIME_BITS - 1) {
            self.receive_before_send += 1;
            return;
        }
        if ns == self.pending.0 {
            self.pending.1 += 1;
        } else {
            self.flush();
            self.pending = (ns, 1);
        }
    }

    fn flush(&mut self) {
        let (ns, n) = std::mem::take(&mut self.pending);
        if n > 0 {
            self.histogram.saturating_record_n(ns, n);
        }
    }

    /// Adds another checker's samples.
    pub fn add(&mut self, o: &mut Latency) {
        self.flush();
        o.flush();
        // Same bounds on both sides: adding cannot fail.
        let _ = self.histogram.add(&o.histogram);
        self.receive_before_send += o.receive_before_send;
    }

    /// The percentiles so far, or `None` when no frame was measured.
    pub fn summary(&mut self) -> Option<LatencySummary> {
        self.flush();
        let h = &self.histogram;
        (!h.is_empty()).then(|| LatencySummary {
            frames: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            receive_before_send: self.receive_before_send,
        })
    }
}

/// Verifies frames and per-flow sequence continuity, and measures one-way latency.
#[derive(Default)]
pub struct Checker {
    /// Verify the UDP checksum over the whole frame (touches every byte).
    pub verify_payload: bool,
    /// Read only the trailer ([`RxWork::Trailer`]).
    pub trailer_only: bool,
    /// Receive time of the next frames (epoch ns); 0 measures no latency.
    pub receive_time: u64,
    /// Latency of frames with a send time checked while `receive_time` was set.
    pub latency: Latency,
    next: Vec<Vec<FlowSequence>>,
    /// Counts so far.
    pub counts: CheckCounts,
    /// Description of the first corrupt frame, for the report.
    pub first_problem: Option<String>,
}

impl Checker {
    /// A checker; with `verify_payload` it also verifies every UDP checksum.
    pub fn new(verify_payload: bool) -> Self {
        Self {
            verify_payload,
            ..Default::default()
        }
    }

    /// Checks one frame.
    #[inline]
    pub fn check(&mut self, frame: &[u8]) {
        let len = frame.len();
        if len < L2_L4_HEADER + TRAILER {
            self.counts.corrupt += 1;
            self.note(format!(
                "corrupt frame of {len} bytes: shorter than headers and trailer"
            ));
            return;
        }
        if self.trailer_only {
            let tail = &frame[len - TRAILER..];
            let parsed = Self::parse_trailer(tail);
            self.time(&parsed, tail);
            self.count_sequence(parsed, len);
            return;
        }
        if frame[12..14] == VLAN_TPID && len >= L2_L4_HEADER + VLAN_TAG + TRAILER {
            // One 802.1Q tag (a TX flow's vlan_push, pushed in software or by the device):
            // the frame the generator wrote is the one without it. The payload sum skips
            // the tag by starting 4 bytes later (an even shift keeps the word pairs).
            let mut head = [0u8; L2_L4_HEADER];
            head[..12].copy_from_slice(&frame[..12]);
            head[12..].copy_from_slice(&frame[12 + VLAN_TAG..L2_L4_HEADER + VLAN_TAG]);
            let sum = self.verify_payload.then(|| payload_sum(&frame[VLAN_TAG..]));
            self.check_parts(&head, &frame[len - TRAILER..], len - VLAN_TAG, sum);
            return;
        }
        let sum = self.verify_payload.then(|| payload_sum(frame));
        self.check_parts(&frame[..L2_L4_HEADER], &frame[len - TRAILER..], len, sum);
    }

    /// Checks a frame known by parts: its first [`L2_L4_HEADER`] bytes, its last
    /// [`TRAILER`] bytes, its length, and optionally [`payload_sum`] of it (computed where
    /// the frame is, on the GPU for frames in device memory).
    pub fn check_parts(
        &mut self,
        head: &[u8],
        tail: &[u8],
        frame_len: usize,
        payload_sum: Option<u64>,
    ) {
        let parsed = Self::parse(head, tail, frame_len, payload_sum);
        self.time(&parsed, tail);
        self.count_sequence(parsed, frame_len);
    }

    /// Records the latency of a frame that parsed, when both times are known.
    #[inline]
    fn time(&mut self, parsed: &Result<(u16, usize, u64), &'static str>, tail: &[u8]) {
        if self.receive_time == 0 || parsed.is_err() {
            return;
        }
        let sent = Self::send_time(tail);
        if sent != 0 {
            self.latency.record(sent, self.receive_time);
        }
    }

    /// Counts a parsed frame against its flow's sequence, or as corrupt.
    #[inline]
    fn count_sequence(
        &mut self,
        parsed: Result<(u16, usize, u64), &'static str>,
        frame_len: usize,
    ) {
        match parsed {
            Ok((stream, flow, seq)) => {
                let s = stream as usize;
                if self.next.len() <= s {
                    self.next.resize(s + 1, Vec::new());
                }
                let flows = &mut self.next[s];
                if flows.len() <= flow {
                    flows.resize(flow + 1, FlowSequence::default());
                }
                let f = &mut flows[flow];
                let expected = f.next;
                if seq == expected {
                    // The common case, kept short: the checker reads every frame.
                    self.counts.valid += 1;
                    f.seen = f.seen << 1 | 1;
                    f.next = seq + 1;
                } else if seq > expected {
                    self.counts.valid += 1;
                    let skipped = seq - expected;
                    self.counts.gaps += skipped;
                    let shift = skipped + 1;
                    f.seen = if shift >= 64 { 0 } else { f.seen << shift } | 1;
                    f.next = seq + 1;
                    if skipped > 0 {
                        self.note(format!(
                            "stream {stream} flow {flow}: expected sequence {expected}, got {seq}"
                        ));
                    }
                } else {
                    let k = expected - 1 - seq;
                    if k < DUPLICATE_WINDOW && f.seen & (1 << k) != 0 {
                        self.counts.duplicates += 1;
                        self.note(format!(
                            "stream {stream} flow {flow}: sequence {seq} arrived twice"
                        ));
                    } else {
                        // A late frame: valid, and it fills the gap its absence left.
                        if k < DUPLICATE_WINDOW {
                            f.seen |= 1 << k;
                        }
                        self.counts.valid += 1;
                        self.counts.reordered += 1;
                        self.counts.gaps = self.counts.gaps.saturating_sub(1);
                        self.note(format!(
                            "stream {stream} flow {flow}: sequence {seq} after {}",
                            expected - 1
                        ));
                    }
                }
            }
            Err(why) => {
                self.counts.corrupt += 1;
                self.note(format!("corrupt frame of {frame_len} bytes: {why}"));
            }
        }
    }

    fn note(&mut self, s: String) {
        if self.first_problem.is_none() {
            self.first_problem = Some(s);
        }
    }

    fn parse(
        f: &[u8],
        t: &[u8],
        len: usize,
        payload_sum: Option<u64>,
    ) -> Result<(u16, usize, u64), &'static str> {
        if len < L2_L4_HEADER + TRAILER || f.len() < L2_L4_HEADER || t.len() < TRAILER {
            return Err("shorter than headers and trailer");
        }
        if f[12..14] != [0x08, 0x00] || f[14] != 0x45 || f[23] != 17 {
            return Err("not IPv4/UDP without options");
        }
        if usize::from(u16::from_be_bytes([f[16], f[17]])) != len - 14 {
            return Err("IPv4 total length does not match the frame");
        }
        if checksum(&f[14..34]) != 0 {
            return Err("bad IPv4 header checksum");
        }
        if usize::from(u16::from_be_bytes([f[38], f[39]])) != len - UDP_OFFSET {
            return Err("UDP length does not match the frame");
        }
        let trailer = Self::parse_trailer(t)?;
        if let Some(sum) = payload_sum {
            // Pseudo header: addresses (inside the sum), protocol, UDP length.
            let udp_len = (len - UDP_OFFSET) as u64;
            if fold(sum + 17 + udp_len) != 0xffff {
                return Err("bad UDP checksum");
            }
        }
        Ok(trailer)
    }

    /// Stream, flow and sequence number from a frame's trailer.
    #[inline]
    pub(crate) fn parse_trailer(t: &[u8]) -> Result<(u16, usize, u64), &'static str> {
        if t.len() < TRAILER || t[0..4] != MAGIC {
            return Err("no trailer");
        }
        let stream = u16::from_be_bytes([t[4], t[5]]);
        let flow = u32::from_be_bytes([0, t[6], t[7], t[8]]) as usize;
        if flow >= MAX_FLOWS {
            return Err("flow index out of range");
        }
        let seq = u64::from_be_bytes([0, 0, 0, t[9], t[10], t[11], t[12], t[13]]);
        Ok((stream, flow, seq))
    }

    /// The send time of a trailer (low 48 bits of epoch ns; 0 when not stamped).
    #[inline]
    fn send_time(t: &[u8]) -> u64 {
        u64::from_be_bytes([0, 0, t[14], t[15], t[16], t[17], t[18], t[19]])
    }
}

#[cfg(test)]
mod tests;
