//! `dataplane bench socket`: kernel UDP or TCP between `socket_bench_server` and
//! `socket_bench_client`, every received byte verified, losses counted and attributed.
//!
//! Each TX queue of a sending side is one stream.
//! - **UDP**: a message carries its sequence number, its stream and a kind in a 16-byte
//!   header and a pattern derived from (stream, sequence) after it. When its time is up a
//!   sender sends end markers carrying how many messages the stream sent; a receiver
//!   counts, per stream, what arrived intact, so `lost` = sent - received exactly, and the
//!   plane's drop counters (the kernel's socket drops as `engine_missed`) say where.
//! - **TCP**: each stream is a byte stream whose byte `o` is fixed by `o`, so every read
//!   is checked wherever the kernel cut it; nothing may be lost.

#![forbid(unsafe_code)]

use dataplane::burst::Burst;
use dataplane::config::{Config, Direction, PeerBenchConfig, SocketMode, Transport};
use dataplane::plane::{DataPlane, RxQueue, StartError, TxFailure, TxQueue};
use dataplane::stats::Drops;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use super::Mode;

/// Options of a run.
#[derive(Clone, Debug)]
pub struct SocketBenchOptions {
    /// Which sides.
    pub mode: Mode,
    /// Seconds each sender sends.
    pub seconds: f64,
    /// Pace every sending side to this many Gb/s of payload (split over its TX queues).
    pub target_gbps: Option<f64>,
    /// Overrides both sections' `message_size`.
    pub message_size: Option<u64>,
    /// How long a sender waits for its peer (a TCP connection, a UDP server's first
    /// datagram) before it gives up.
    pub connect_timeout: Duration,
    /// Bursts a sender keeps queued per TX queue at most ([`QUEUED_BURSTS`] by default).
    pub queued_bursts: usize,
    /// Time each queue's worker (busy nanoseconds per packet, and the share of the run it
    /// was busy).
    pub time_stages: bool,
}

/// Traffic counts of one side, or summed over the sides.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Traffic {
    /// Messages sent (end markers not counted).
    pub messages_sent: u64,
    /// Messages (UDP) or message-sized byte runs (TCP) received and verified.
    pub messages_received: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received and verified.
    pub bytes_received: u64,
    /// Messages the peer sent that never arrived (UDP: from the end markers).
    pub lost: u64,
    /// Corrupt, duplicated or misplaced data.
    pub errors: u64,
    /// Send throughput, payload.
    pub tx_gbps: f64,
    /// Receive throughput, payload.
    pub rx_gbps: f64,
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.lost += o.lost;
        self.errors += o.errors;
        self.tx_gbps += o.tx_gbps;
        self.rx_gbps += o.rx_gbps;
    }
}

/// One side's numbers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SideReport {
    /// Streams (TX queues) this side sent on.
    pub streams: usize,
    /// What it sent and received.
    #[serde(flatten)]
    pub traffic: Traffic,
    /// What went wrong.
    pub problems: Vec<String>,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct SocketReport {
    /// `server`, `client` or `both`.
    pub mode: &'static str,
    /// `udp` or `tcp`.
    pub transport: &'static str,
    /// Bytes per message.
    pub message_size: u64,
    /// Seconds each sender sent for.
    pub seconds: f64,
    /// Summed over the sides (`lost`: messages sent and never received).
    #[serde(flatten)]
    pub total: Traffic,
    /// `--target-gbps`, when paced.
    pub target_gbps: Option<f64>,
    /// Drops the plane counted, by reason (the kernel's socket drops are
    /// `engine_missed`).
    pub drops: Drops,
    /// The drops the plane counted account for every lost message.
    pub attributed: bool,
    /// Nothing lost and nothing wrong.
    pub lossless: bool,
    /// The server side, when this process ran it.
    pub server: Option<SideReport>,
    /// The client side, when this process ran it.
    pub client: Option<SideReport>,
    /// With `--stages`: each queue's worker time per packet.
    pub stages: Vec<super::raw::StageCost>,
    /// With `--stages`: each queue worker's busy time as a share of the sending time
    /// (`seconds`), in the order of `stages`.
    pub busy_fraction: Vec<f64>,
}

impl SocketReport {
    /// True when every message arrived verified.
    pub fn ok(&self) -> bool {
        self.lossless
    }

    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "socket bench ({}), mode {}, {} B messages, {:.2} s{}\n",
            self.transport,
            self.mode,
            self.message_size,
            self.seconds,
            self.target_gbps
                .map(|g| format!(", paced at {g} Gb/s"))
                .unwrap_or_default()
        );
        for (name, side) in [("server", &self.server), ("client", &self.client)] {
            if let Some(r) = side {
                s.push_str(&format!(
                    "  {name}: sent {} on {} stream(s) ({:.3} Gb/s), received {} verified ({:.3} Gb/s), lost {}, errors {}\n",
                    r.traffic.messages_sent, r.streams, r.traffic.tx_gbps, r.traffic.messages_received, r.traffic.rx_gbps, r.traffic.lost, r.traffic.errors
                ));
                for p in &r.problems {
                    s.push_str(&format!("    - {p}\n"));
                }
            }
        }
        for (st, busy) in self.stages.iter().zip(&self.busy_fraction) {
            s.push_str(&format!(
                "  stage {}: {:.1} ns per packet, busy {:.0} % of the sending time\n",
                st.stage,
                st.ns_per_packet,
                busy * 100.0
            ));
        }
        let d = &self.drops;
        s.push_str(&format!(
            "  drops: engine_missed (kernel socket) {} ring_full {} pool_empty {} no_flow {} malformed {} disconnected {}\n",
            d.engine_missed, d.ring_full, d.pool_empty, d.no_flow, d.malformed, d.disconnected
        ));
        if self.lossless {
            s.push_str("LOSSLESS: every message arrived and verified\n");
        } else if self.total.errors == 0 && self.attributed {
            s.push_str(&format!(
                "LOSSY: {} lost, {} dropped at this end; the drop counters above account for every loss\n",
                self.total.lost,
                self.drops.total()
            ));
        } else {
            s.push_str(&format!(
                "FAILED: {} lost, {} errors{}\n",
                self.total.lost,
                self.total.errors,
                if self.attributed {
                    ""
                } else {
                    " (losses not accounted for by the drop counters)"
                }
            ));
        }
        s
    }
}

/// The bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum SocketBenchError {
    /// A section is missing.
    #[error("the configuration has no `{0}` section")]
    Missing(&'static str),
    /// The configuration is not a kernel socket one.
    #[error("not a udp:// or tcp:// configuration: `bench socket` runs kernel socket interfaces")]
    NotSockets,
    /// No interface for a side.
    #[error("{0}: the configuration has no {0} interface (socket_config.mode: {0})")]
    NoInterface(&'static str),
    /// Messages must hold the header.
    #[error("message_size {0} is below 16 bytes (a UDP message carries a 16-byte header)")]
    TooSmall(u64),
    /// Messages do not fit the buffers.
    #[error(
        "{side}: message_size {size} is above the {buf_size}-byte buffers of TX queue `{queue}`'s region"
    )]
    TooLarge {
        /// Side.
        side: &'static str,
        /// Message size.
        size: u64,
        /// Buffer size.
        buf_size: usize,
        /// Queue.
        queue: String,
    },
    /// The plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

const HEADER: usize = 16;
/// Every TCP stream carries the same bytes (a server's lanes take connections in any
/// order, so a receiver cannot tell which sender stream it has).
const TCP_KEY: u64 = 0x5EED;
const KIND_DATA: u32 = 0;
const KIND_END: u32 = 1;
/// End markers per stream, spread over [`END_SPREAD`] (UDP may drop some).
const END_MARKERS: u32 = 20;
const END_SPREAD: Duration = Duration::from_millis(200);
/// Bytes per sent burst at most.
const BURST_BYTES: usize = 256 << 10;
/// Bursts a sender keeps queued per TX queue at most, by default.
pub const QUEUED_BURSTS: usize = 16;
/// A receiver that heard every end marker stops; otherwise it stops this long after the
/// senders' time with nothing arriving.
const QUIET_END: Duration = Duration::from_secs(2);

/// Words of the base pattern (64 KiB, more than the largest UDP payload).
const BASE_WORDS: usize = 8192;

/// The base pattern: pseudo-random words, made once. A message's word `i` is
/// `base[i] ^ key`, with a key per message (UDP) or per 64 KiB block of the stream (TCP):
/// every message differs, and filling or checking costs a load and an XOR per word.
fn base() -> &'static [u64; BASE_WORDS] {
    static BASE: std::sync::OnceLock<Box<[u64; BASE_WORDS]>> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut b = Box::new([0u64; BASE_WORDS]);
        for w in b.iter_mut() {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            *w = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        b
    })
}

/// A key spread over all 64 bits.
#[inline]
fn mix(k: u64) -> u64 {
    let k = (k ^ (k >> 31)).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    k ^ (k >> 29) ^ 0xA5A5_5A5A_0F0F_F0F0
}

fn message_key(stream: u32, seq: u64) -> u64 {
    mix(seq ^ (u64::from(stream) << 48))
}

/// Writes `base[first + i] ^ key` as word `i` of `dst` (whole words only).
#[inline]
fn fill_words(dst: &mut [u8], first: usize, key: u64) {
    for (w, b) in dst.chunks_exact_mut(8).zip(&base()[first..]) {
        w.copy_from_slice(&(b ^ key).to_le_bytes());
    }
}

/// True when the whole words of `src` are `base[first + i] ^ key`.
#[inline]
fn words_match(src: &[u8], first: usize, key: u64) -> bool {
    let mut diff = 0u64;
    for (w, b) in src.chunks_exact(8).zip(&base()[first..]) {
        diff |= u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ b ^ key;
    }
    diff == 0
}

/// Word `i` of a UDP message body with `key`.
#[inline]
fn body_word(key: u64, i: usize) -> u64 {
    base()[i % BASE_WORDS] ^ key
}

fn fill_udp(buf: &mut [u8], stream: u32, seq: u64, kind: u32) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..12].copy_from_slice(&stream.to_le_bytes());
    buf[12..16].copy_from_slice(&kind.to_le_bytes());
    let key = message_key(stream, seq);
    let body = &mut buf[HEADER..];
    let whole = body.len() / 8;
    fill_words(body, 0, key);
    let tail = &mut body[whole * 8..];
    let n = tail.len();
    tail.copy_from_slice(&body_word(key, whole).to_le_bytes()[..n]);
}

fn check_udp_body(m: &[u8], stream: u32, seq: u64) -> bool {
    let key = message_key(stream, seq);
    let body = &m[HEADER..];
    let whole = body.len() / 8;
    let tail = &body[whole * 8..];
    words_match(body, 0, key) && tail == &body_word(key, whole).to_le_bytes()[..tail.len()]
}

/// Stream word `w` (bytes `8w..8w+8`) of a TCP stream.
#[inline]
fn stream_word(w: u64) -> u64 {
    base()[(w % BASE_WORDS as u64) as usize] ^ mix(TCP_KEY ^ (w / BASE_WORDS as u64))
}

/// Byte `o` of a TCP stream.
#[inline]
fn stream_byte(o: u64) -> u8 {
    stream_word(o / 8).to_le_bytes()[(o % 8) as usize]
}

/// Fills `buf` with stream bytes from offset `o`.
fn fill_stream(buf: &mut [u8], mut o: u64) {
    let mut at = 0;
    while at < buf.len() && !o.is_multiple_of(8) {
        buf[at] = stream_byte(o);
        at += 1;
        o += 1;
    }
    // Whole words, one 64 KiB block (one key) at a time.
    while buf.len() - at >= 8 {
        let w = o / 8;
        let first = (w % BASE_WORDS as u64) as usize;
        let words = ((buf.len() - at) / 8).min(BASE_WORDS - first);
        let key = mix(TCP_KEY ^ (w / BASE_WORDS as u64));
        fill_words(&mut buf[at..at + words * 8], first, key);
        at += words * 8;
        o += words as u64 * 8;
    }
    for b in &mut buf[at..] {
        *b = stream_byte(o);
        o += 1;
    }
}

/// True when `chunk` is the stream's bytes from offset `o`.
fn check_stream(chunk: &[u8], mut o: u64) -> bool {
    let mut at = 0;
    while at < chunk.len() && !o.is_multiple_of(8) {
        if chunk[at] != stream_byte(o) {
            return false;
        }
        at += 1;
        o += 1;
    }
    while chunk.len() - at >= 8 {
        let w = o / 8;
        let first = (w % BASE_WORDS as u64) as usize;
        let words = ((chunk.len() - at) / 8).min(BASE_WORDS - first);
        let key = mix(TCP_KEY ^ (w / BASE_WORDS as u64));
        if !words_match(&chunk[at..at + words * 8], first, key) {
            return false;
        }
        at += words * 8;
        o += words as u64 * 8;
    }
    chunk[at..]
        .iter()
        .enumerate()
        .all(|(k, &b)| b == stream_byte(o + k as u64))
}

/// `config` with only the interfaces of `keep` sides.
fn for_mode(config: &Config, mode: Mode) -> Config {
    let mut c = config.clone();
    c.interfaces.retain(|i| {
        let m = i.socket.as_ref().map(|s| s.mode);
        match mode {
            Mode::Both => true,
            Mode::Server => m == Some(SocketMode::Server),
            Mode::Client => m == Some(SocketMode::Client),
        }
    });
    c
}

/// `config` with the TX queues of sending sides paced to their share of `gbps`.
fn paced(config: &Config, gbps: f64, senders: &[SocketMode]) -> Config {
    let mut c = config.clone();
    for mode in senders {
        let queues: usize = c
            .interfaces
            .iter()
            .filter(|i| i.socket.as_ref().is_some_and(|s| s.mode == *mode))
            .map(|i| i.tx.as_ref().map_or(0, |t| t.queues.len()))
            .sum();
        let mbps = ((gbps * 1000.0) / queues.max(1) as f64).round().max(1.0) as u64;
        for i in c
            .interfaces
            .iter_mut()
            .filter(|i| i.socket.as_ref().is_some_and(|s| s.mode == *mode))
        {
            for q in i.tx.iter_mut().flat_map(|t| t.queues.iter_mut()) {
                q.pacing_mbps = mbps;
            }
        }
    }
    c
}

/// One side's queues.
struct SideQueues {
    tx: Vec<TxQueue>,
    rx: Vec<RxQueue>,
}

fn take_side(plane: &mut DataPlane, config: &Config, mode: SocketMode) -> SideQueues {
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    for i in config
        .interfaces
        .iter()
        .filter(|i| i.socket.as_ref().is_some_and(|s| s.mode == mode))
    {
        for (dir, queues) in [
            (Direction::Tx, i.tx.as_ref().map(|t| &t.queues)),
            (Direction::Rx, i.rx.as_ref().map(|r| &r.queues)),
        ] {
            for q in queues.into_iter().flatten() {
                match dir {
                    Direction::Tx => tx.extend(plane.take_tx_queue(&i.name, q.id)),
                    Direction::Rx => rx.extend(plane.take_rx_queue(&i.name, q.id)),
                }
            }
        }
    }
    SideQueues { tx, rx }
}

/// Per-stream receive state.
#[derive(Default)]
struct StreamRx {
    received: u64,
    /// UDP: the sender's total, from an end marker.
    total: Option<u64>,
    /// UDP: next expected sequence (for duplicates and reordering).
    next: u64,
    /// TCP: bytes received.
    offset: u64,
}

struct Sender {
    stream: u32,
    seq: u64,
    /// TCP: bytes sent.
    offset: u64,
    unsent: Option<Burst>,
    ends_sent: u32,
}

/// Bytes of the digest a GPU check compares: the tail.
const TAIL: usize = 8;

/// A received message as the checker sees it: its bytes (host memory), or the GPU's
/// digest of them (GPU memory).
enum Seen<'a> {
    Bytes(&'a [u8]),
    Digest {
        len: usize,
        sum: u64,
        head: [u8; HEADER],
        tail: [u8; TAIL],
    },
}

impl Seen<'_> {
    /// The first (up to) 16 bytes.
    fn head(&self) -> [u8; HEADER] {
        match self {
            Seen::Bytes(m) => {
                let mut h = [0u8; HEADER];
                let n = m.len().min(HEADER);
                h[..n].copy_from_slice(&m[..n]);
                h
            }
            Seen::Digest { head, .. } => *head,
        }
    }

    /// The bytes, or their digest, match `expected` (or its digest).
    fn matches(&self, expected: &[u8]) -> bool {
        match self {
            Seen::Bytes(m) => *m == expected,
            Seen::Digest {
                len,
                sum,
                head,
                tail,
            } => {
                let n = *len;
                n == expected.len()
                    && *sum == super::traffic::word_sum(expected)
                    && head[..n.min(HEADER)] == expected[..n.min(HEADER)]
                    && (n < HEADER + TAIL || tail[..] == expected[n - TAIL..])
            }
        }
    }
}

#[cfg(feature = "cuda")]
type Digest = dataplane::stage::DeviceDigest;
/// Without CUDA no message lands in GPU memory.
#[cfg(not(feature = "cuda"))]
#[derive(Default)]
struct Digest {
    _none: (),
}

#[cfg(feature = "cuda")]
fn gpu_digest(d: &mut Digest, b: &Burst) -> Result<(), gpudirect::GpuError> {
    d.run(b, 0, 0, (HEADER as u32, TAIL as u32))
}
#[cfg(not(feature = "cuda"))]
fn gpu_digest(_: &mut Digest, _: &Burst) -> Result<(), String> {
    Err("this build has no CUDA support".into())
}

#[cfg(feature = "cuda")]
fn digest_sum(d: &Digest, i: usize) -> u64 {
    d.sums[i]
}
#[cfg(not(feature = "cuda"))]
fn digest_sum(_: &Digest, _: usize) -> u64 {
    0
}

/// `N` digest bytes of packet `i` from `at` (head at 0, tail after it).
#[cfg(feature = "cuda")]
fn digest_bytes<const N: usize>(d: &Digest, i: usize, at: usize) -> [u8; N] {
    let per = HEADER + TAIL;
    d.digests[i * per + at..i * per + at + N]
        .try_into()
        .expect("N bytes")
}
#[cfg(not(feature = "cuda"))]
fn digest_bytes<const N: usize>(_: &Digest, _: usize, _: usize) -> [u8; N] {
    [0; N]
}

#[cfg(feature = "cuda")]
fn write_gpu_packet(b: &mut Burst, i: usize, data: &[u8]) -> Result<(), gpudirect::GpuError> {
    super::gpu::write_packet(b, i, data)
}
#[cfg(not(feature = "cuda"))]
fn write_gpu_packet(_: &mut Burst, _: usize, _: &[u8]) -> Result<(), String> {
    Err("this build has no CUDA support".into())
}

/// Runs one side to the end.
#[allow(clippy::too_many_arguments)]
fn run_side(
    mut q: SideQueues,
    cfg: &PeerBenchConfig,
    peer_sends: bool,
    size: usize,
    transport: Transport,
    opts: &SocketBenchOptions,
    stop: &AtomicBool,
) -> SideReport {
    let (seconds, connect_timeout) = (opts.seconds, opts.connect_timeout);
    let queued_bursts = opts.queued_bursts.max(1);
    let mut r = SideReport::default();
    let udp = transport == Transport::Udp;
    let send = cfg.send && !q.tx.is_empty();
    let receive = cfg.receive && !q.rx.is_empty();
    let mut senders: Vec<Sender> = (0..q.tx.len())
        .map(|k| Sender {
            stream: k as u32,
            seq: 0,
            offset: 0,
            unsent: None,
            ends_sent: 0,
        })
        .collect();
    r.streams = if send { senders.len() } else { 0 };
    let mut rx_streams: BTreeMap<(usize, u32), StreamRx> = BTreeMap::new();
    let mut bad: Vec<String> = Vec::new();
    let start = Instant::now();
    let mut send_from: Option<Instant> = None;
    let mut send_until = start + Duration::from_secs_f64(seconds);
    let mut tx_done_at = None;
    let mut last_rx = start;
    let mut first_rx: Option<Instant> = None;
    // Bursts of at most BURST_BYTES, at most QUEUED_BURSTS waiting per queue: a sender
    // that keeps its data in flight small keeps it in cache (as an application that
    // produces data as it goes does), instead of running a whole region ahead.
    let batch =
        q.tx.first()
            .map_or(32, |t| t.batch_size.clamp(1, 64))
            .min((BURST_BYTES / size.max(1)).max(1));
    let give_up =
        start + connect_timeout + Duration::from_secs_f64(seconds) + Duration::from_secs(30);
    let mut waiting_since = start;
    // Expected bytes of a message checked by digest, and written into GPU memory.
    let mut scratch: Vec<u8> = Vec::new();
    let mut digest = Digest::default();
    let mut last_wait_error = String::new();
    loop {
        let now = Instant::now();
        let mut progressed = false;
        if send && tx_done_at.is_none() {
            let mut all_ended = true;
            for (k, s) in senders.iter_mut().enumerate() {
                let txq = &mut q.tx[k];
                let sending =
                    send_from.is_none_or(|_| now < send_until) && !stop.load(Ordering::Relaxed);
                if sending || s.unsent.is_some() {
                    all_ended = false;
                    let burst = match s.unsent.take() {
                        Some(b) => Some(b),
                        None if txq.pending() >= queued_bursts => None,
                        None => match txq.alloc(batch) {
                            Ok(mut b) => {
                                for i in 0..b.len() {
                                    let (seq, offset) =
                                        (s.seq + i as u64, s.offset + (i * size) as u64);
                                    let fill = |buf: &mut [u8]| {
                                        if udp {
                                            fill_udp(buf, s.stream, seq, KIND_DATA);
                                        } else {
                                            fill_stream(buf, offset);
                                        }
                                    };
                                    match b.buffer_mut(i, 0) {
                                        Some(buf) => {
                                            fill(&mut buf[..size]);
                                            b.set_len(i, 0, size);
                                        }
                                        None => {
                                            scratch.resize(size, 0);
                                            fill(&mut scratch[..]);
                                            if let Err(e) = write_gpu_packet(&mut b, i, &scratch) {
                                                bad.push(format!(
                                                    "writing a message into GPU memory: {e}"
                                                ));
                                            }
                                        }
                                    }
                                }
                                s.seq += b.len() as u64;
                                s.offset += (b.len() * size) as u64;
                                Some(b)
                            }
                            Err(_) => None,
                        },
                    };
                    if let Some(b) = burst {
                        let (n, bytes) = (b.len() as u64, b.bytes());
                        match txq.send(b) {
                            Ok(()) => {
                                if send_from.is_none() {
                                    send_from = Some(now);
                                    send_until = now + Duration::from_secs_f64(seconds);
                                }
                                progressed = true;
                                r.traffic.messages_sent += n;
                                r.traffic.bytes_sent += bytes;
                            }
                            Err(e) => {
                                if let TxFailure::NotConnected(why) = &e.reason {
                                    last_wait_error = why.clone();
                                    if send_from.is_none() && now - waiting_since > connect_timeout
                                    {
                                        r.traffic.errors += 1;
                                        r.problems.push(format!(
                                            "no peer within {:.1} s: {why}",
                                            connect_timeout.as_secs_f64()
                                        ));
                                        return r;
                                    }
                                }
                                s.unsent = Some(e.burst);
                            }
                        }
                    }
                } else if udp && s.ends_sent < END_MARKERS {
                    all_ended = false;
                    let due = send_until + END_SPREAD * s.ends_sent / END_MARKERS;
                    if now >= due
                        && let Ok(mut b) = txq.alloc(1)
                    {
                        let mut marker = [0u8; HEADER];
                        fill_udp(&mut marker, s.stream, s.seq, KIND_END);
                        let written = match b.buffer_mut(0, 0) {
                            Some(buf) => {
                                buf[..HEADER].copy_from_slice(&marker);
                                b.set_len(0, 0, HEADER);
                                true
                            }
                            None => write_gpu_packet(&mut b, 0, &marker).is_ok(),
                        };
                        if written && txq.send(b).is_ok() {
                            s.ends_sent += 1;
                        }
                    }
                }
            }
            if all_ended {
                tx_done_at = Some(now);
            }
        } else {
            waiting_since = now;
        }
        for (k, rxq) in q.rx.iter_mut().enumerate() {
            let burst = match rxq.poll() {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(f) => {
                    bad.push(format!("RX worker failed: {f}"));
                    continue;
                }
            };
            progressed = true;
            let on_gpu = burst.packets().first().is_some_and(|p| {
                !burst
                    .regions()
                    .get(p.segments()[0].region)
                    .host_accessible()
            });
            if on_gpu && let Err(e) = gpu_digest(&mut digest, &burst) {
                bad.push(format!("GPU check: {e}"));
                continue;
            }
            for i in 0..burst.len() {
                let len = burst.packets()[i].len();
                let view = if on_gpu {
                    Seen::Digest {
                        len,
                        sum: digest_sum(&digest, i),
                        head: digest_bytes(&digest, i, 0),
                        tail: digest_bytes(&digest, i, HEADER),
                    }
                } else {
                    Seen::Bytes(burst.data(i, 0).expect("host memory"))
                };
                if udp {
                    if len < HEADER {
                        bad.push(format!("a {len}-byte datagram, shorter than the header"));
                        continue;
                    }
                    let head = view.head();
                    let seq = u64::from_le_bytes(head[..8].try_into().expect("8"));
                    let stream = u32::from_le_bytes(head[8..12].try_into().expect("4"));
                    let kind = u32::from_le_bytes(head[12..16].try_into().expect("4"));
                    let st = rx_streams.entry((0, stream)).or_default();
                    if kind == KIND_END {
                        st.total = Some(seq);
                        continue;
                    }
                    let intact = len == size
                        && match &view {
                            Seen::Bytes(m) => check_udp_body(m, stream, seq),
                            Seen::Digest { .. } => {
                                scratch.resize(size, 0);
                                fill_udp(&mut scratch, stream, seq, KIND_DATA);
                                view.matches(&scratch)
                            }
                        };
                    if !intact {
                        bad.push(format!(
                            "stream {stream} message {seq} corrupt ({len} bytes)"
                        ));
                        continue;
                    }
                    if seq < st.next {
                        bad.push(format!(
                            "stream {stream} message {seq} duplicated or reordered"
                        ));
                        continue;
                    }
                    st.next = seq + 1;
                    st.received += 1;
                    r.traffic.messages_received += 1;
                } else {
                    let st = rx_streams.entry((k, k as u32)).or_default();
                    let intact = match &view {
                        Seen::Bytes(m) => check_stream(m, st.offset),
                        Seen::Digest { .. } => {
                            scratch.resize(len, 0);
                            fill_stream(&mut scratch, st.offset);
                            view.matches(&scratch)
                        }
                    };
                    if !intact {
                        bad.push(format!(
                            "stream {k}: bytes {}..{} corrupt",
                            st.offset,
                            st.offset + len as u64
                        ));
                    }
                    st.offset += len as u64;
                }
                r.traffic.bytes_received += len as u64;
                last_rx = now;
                first_rx.get_or_insert(now);
            }
        }
        let senders_done = tx_done_at.is_some() || !send;
        let markers_in = udp
            && !rx_streams.is_empty()
            && rx_streams
                .values()
                .all(|s| s.total.is_some_and(|t| s.received >= t));
        let quiet = now - last_rx > QUIET_END && now > send_until;
        if senders_done && (!receive || markers_in || quiet || stop.load(Ordering::Relaxed)) {
            break;
        }
        if now > give_up {
            r.traffic.errors += 1;
            r.problems.push(format!(
                "gave up: still {} after {:.0} s{}",
                if senders_done { "receiving" } else { "sending" },
                (now - start).as_secs_f64(),
                if last_wait_error.is_empty() {
                    String::new()
                } else {
                    format!(" ({last_wait_error})")
                }
            ));
            break;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    if !udp {
        r.traffic.messages_received = r.traffic.bytes_received / size as u64;
    }
    for ((_, stream), st) in &rx_streams {
        if let Some(t) = st.total {
            r.traffic.lost += t.saturating_sub(st.received);
        } else if udp {
            r.traffic.lost += st.next.saturating_sub(st.received);
            bad.push(format!(
                "stream {stream}: no end marker arrived; {} messages counted as lost from the sequence numbers seen",
                st.next.saturating_sub(st.received)
            ));
        }
    }
    if receive && peer_sends && r.traffic.bytes_received == 0 && !stop.load(Ordering::Relaxed) {
        bad.push("nothing arrived from the peer (its section sends)".into());
    }
    if !bad.is_empty() {
        r.traffic.errors += bad.len() as u64;
        r.problems.extend(bad.into_iter().take(5));
    }
    let tx_secs = match (send_from, tx_done_at) {
        (Some(a), Some(b)) => (b.min(send_until) - a).as_secs_f64().max(1e-9),
        _ => seconds,
    };
    let rx_secs = first_rx.map_or(seconds, |a| (last_rx - a).as_secs_f64().max(1e-3));
    r.traffic.tx_gbps = r.traffic.bytes_sent as f64 * 8.0 / tx_secs / 1e9;
    r.traffic.rx_gbps = r.traffic.bytes_received as f64 * 8.0 / rx_secs / 1e9;
    r
}

/// Runs the bench.
pub fn run(
    config: &Config,
    opts: &SocketBenchOptions,
    stop: &AtomicBool,
) -> Result<SocketReport, SocketBenchError> {
    let transport = config
        .interfaces
        .iter()
        .find_map(|i| i.socket.as_ref().map(|s| s.transport))
        .filter(|t| *t != Transport::Roce)
        .ok_or(SocketBenchError::NotSockets)?;
    let server_cfg = config.bench.socket_server.clone();
    let client_cfg = config.bench.socket_client.clone();
    let run_server = opts.mode != Mode::Client;
    let run_client = opts.mode != Mode::Server;
    let server_cfg = match (run_server, server_cfg) {
        (true, None) => return Err(SocketBenchError::Missing("socket_bench_server")),
        (_, c) => c,
    };
    let client_cfg = match (run_client, client_cfg) {
        (true, None) => return Err(SocketBenchError::Missing("socket_bench_client")),
        (_, c) => c,
    };
    let size = opts
        .message_size
        .or(server_cfg.as_ref().map(|c| c.message_size))
        .or(client_cfg.as_ref().map(|c| c.message_size))
        .unwrap_or(1024);
    if transport == Transport::Udp && size < HEADER as u64 {
        return Err(SocketBenchError::TooSmall(size));
    }
    let mut c = for_mode(config, opts.mode);
    for (run, mode, name) in [
        (run_server, SocketMode::Server, "server"),
        (run_client, SocketMode::Client, "client"),
    ] {
        if run
            && !c
                .interfaces
                .iter()
                .any(|i| i.socket.as_ref().is_some_and(|s| s.mode == mode))
        {
            return Err(SocketBenchError::NoInterface(name));
        }
    }
    if let Some(g) = opts.target_gbps {
        let mut senders = Vec::new();
        if run_server && server_cfg.as_ref().is_some_and(|c| c.send) {
            senders.push(SocketMode::Server);
        }
        if run_client && client_cfg.as_ref().is_some_and(|c| c.send) {
            senders.push(SocketMode::Client);
        }
        c = paced(&c, g, &senders);
    }
    let _timing = dataplane::stats::time_stages_while(opts.time_stages);
    let mut plane = DataPlane::start(&c)?;
    let mut sides = Vec::new();
    for (run, mode, name, cfg, peer) in [
        (
            run_server,
            SocketMode::Server,
            "server",
            &server_cfg,
            &client_cfg,
        ),
        (
            run_client,
            SocketMode::Client,
            "client",
            &client_cfg,
            &server_cfg,
        ),
    ] {
        if !run {
            continue;
        }
        let cfg = cfg.clone().expect("checked above");
        // Whether the peer sends (its section says so): then nothing arriving is an error.
        let peer_sends = peer.as_ref().is_some_and(|p| p.send);

        let q = take_side(&mut plane, &c, mode);
        for t in &q.tx {
            let buf = t.segment_sizes().first().copied().unwrap_or(0);
            if cfg.send && (buf as u64) < size {
                return Err(SocketBenchError::TooLarge {
                    side: name,
                    size,
                    buf_size: buf,
                    queue: format!("{} {}", t.interface, t.queue),
                });
            }
        }
        sides.push((name, q, cfg, peer_sends));
    }
    let results: Vec<(&'static str, SideReport)> = std::thread::scope(|s| {
        let handles: Vec<_> = sides
            .into_iter()
            .map(|(name, q, cfg, peer_sends)| {
                let opts = opts.clone();
                s.spawn(move || {
                    if let Some(core) = cfg.cpu_core
                        && let Err(e) = dataplane::affinity::pin_current_thread(core)
                    {
                        tracing::warn!("{name}: bench thread not pinned to core {core}: {e}");
                    }
                    (
                        name,
                        run_side(q, &cfg, peer_sends, size as usize, transport, &opts, stop),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench side panicked"))
            .collect()
    });
    // Let the RX workers read the kernel's drop counters once more.
    std::thread::sleep(Duration::from_millis(50));
    let snapshot = plane.snapshot();
    let elapsed = opts.seconds * 1e9;
    let drops = snapshot.drops();
    let failures = plane.shutdown().err().unwrap_or_default();
    let (mut stages, mut busy_fraction) = (Vec::new(), Vec::new());
    if opts.time_stages {
        for q in snapshot.queues.iter().filter(|q| q.packets > 0) {
            stages.push(super::raw::StageCost::new(
                format!("{} {} queue {} (worker)", q.interface, q.direction, q.queue),
                q.packets,
                q.busy_ns,
            ));
            busy_fraction.push(q.busy_ns as f64 / elapsed);
        }
    }
    let mut report = SocketReport {
        mode: opts.mode.name(),
        transport: if transport == Transport::Udp {
            "udp"
        } else {
            "tcp"
        },
        message_size: size,
        seconds: opts.seconds,
        total: Traffic::default(),
        target_gbps: opts.target_gbps,
        drops,
        attributed: false,
        lossless: false,
        server: None,
        client: None,
        stages,
        busy_fraction,
    };
    for (name, mut side) in results {
        for f in &failures {
            side.traffic.errors += 1;
            side.problems.push(f.to_string());
        }
        report.total.add(&side.traffic);
        if name == "server" {
            report.server = Some(side);
        } else {
            report.client = Some(side);
        }
    }
    if transport == Transport::Tcp && opts.mode == Mode::Both {
        // Everything one side wrote must have arrived at the other.
        let (s, c) = (report.server.as_ref(), report.client.as_ref());
        for (from, to) in [(c, s), (s, c)] {
            if let (Some(f), Some(t)) = (from, to)
                && f.traffic.bytes_sent > 0
                && t.traffic.bytes_received < f.traffic.bytes_sent
            {
                let missing = (f.traffic.bytes_sent - t.traffic.bytes_received) / size;
                report.total.lost += missing;
                report.total.errors += 1;
            }
        }
    }
    report.attributed = report.total.lost <= report.drops.total();
    // Drops at this end (a sender's refused datagrams, a receiver's kernel drops) are
    // losses even where the other end's count is not known here.
    report.lossless =
        report.total.lost == 0 && report.total.errors == 0 && report.drops.total() == 0;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_messages_check_and_corruption_is_found() {
        for size in [16, 17, 23, 24, 1472, 8192, 65507] {
            let mut m = vec![0u8; size];
            fill_udp(&mut m, 3, 77, KIND_DATA);
            assert!(check_udp_body(&m, 3, 77), "{size}");
            assert!(
                size == HEADER || !check_udp_body(&m, 3, 78),
                "another message: {size}"
            );
            if size > HEADER {
                let last = size - 1;
                m[last] ^= 1;
                assert!(!check_udp_body(&m, 3, 77), "flipped last byte: {size}");
            }
        }
    }

    #[test]
    fn a_tcp_stream_checks_wherever_it_is_cut() {
        let total = 3 * BASE_WORDS * 8 + 13;
        let mut whole = vec![0u8; total];
        fill_stream(&mut whole, 0);
        // Filled in odd pieces, it is the same stream.
        let mut pieces = vec![0u8; total];
        let mut at = 0;
        for (k, len) in [1usize, 7, 8, 9, 65535, 65536, 65537, 3]
            .iter()
            .cycle()
            .enumerate()
        {
            if at >= total || k > 1000 {
                break;
            }
            let end = (at + len).min(total);
            fill_stream(&mut pieces[at..end], at as u64);
            assert!(check_stream(&whole[at..end], at as u64), "piece at {at}");
            at = end;
        }
        assert_eq!(pieces, whole);
        // A flipped byte, or the right bytes at the wrong offset, fail.
        let mut bad = whole.clone();
        bad[70_000] ^= 0x10;
        assert!(!check_stream(&bad, 0));
        assert!(!check_stream(&whole[8..100], 16));
        assert!(
            !check_stream(&whole[65536..65600], 0),
            "blocks differ by key"
        );
    }
}
