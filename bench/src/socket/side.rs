//! One side of the socket bench (server or client): its interfaces taken from the plane,
//! its senders and receivers run, and its report.

use super::*;

/// `config` with only the interfaces of `keep` sides.
pub(super) fn for_mode(config: &Config, mode: Mode) -> Config {
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
pub(super) fn paced(config: &Config, gbps: f64, senders: &[SocketMode]) -> Config {
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
pub(super) struct SideQueues {
    pub(super) tx: Vec<TxQueue>,
    pub(super) rx: Vec<RxQueue>,
}

pub(super) fn take_side(plane: &mut DataPlane, config: &Config, mode: SocketMode) -> SideQueues {
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
pub(super) struct StreamRx {
    received: u64,
    /// UDP: the sender's total, from an end marker.
    total: Option<u64>,
    /// UDP: next expected sequence (for duplicates and reordering).
    next: u64,
    /// TCP: bytes received.
    offset: u64,
}

pub(super) struct Sender {
    stream: u32,
    seq: u64,
    /// TCP: bytes sent.
    offset: u64,
    unsent: Option<Burst>,
    ends_sent: u32,
}

impl Sender {
    fn new(stream: u32) -> Self {
        Self {
            stream,
            seq: 0,
            offset: 0,
            unsent: None,
            ends_sent: 0,
        }
    }
}

/// Bytes of the digest a GPU check compares: the tail.
pub(super) const TAIL: usize = 8;

/// A received message as the checker sees it: its bytes (host memory), or the GPU's
/// digest of them (GPU memory).
pub(super) enum Seen<'a> {
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
                    && *sum == crate::traffic::word_sum(expected)
                    && head[..n.min(HEADER)] == expected[..n.min(HEADER)]
                    && (n < HEADER + TAIL || tail[..] == expected[n - TAIL..])
            }
        }
    }
}

#[cfg(feature = "cuda")]
pub(super) type Digest = dataplane::stage::DeviceDigest;
/// Without CUDA no message lands in GPU memory.
#[cfg(not(feature = "cuda"))]
#[derive(Default)]
pub(super) struct Digest {
    _none: (),
}

#[cfg(feature = "cuda")]
pub(super) fn gpu_digest(d: &mut Digest, b: &Burst) -> Result<(), gpudirect::GpuError> {
    d.run(b, 0, 0, (HEADER as u32, TAIL as u32))
}
#[cfg(not(feature = "cuda"))]
pub(super) fn gpu_digest(_: &mut Digest, _: &Burst) -> Result<(), gpudirect::GpuError> {
    Err(crate::raw::no_cuda())
}

#[cfg(feature = "cuda")]
pub(super) fn digest_sum(d: &Digest, i: usize) -> u64 {
    d.sums[i]
}
#[cfg(not(feature = "cuda"))]
pub(super) fn digest_sum(_: &Digest, _: usize) -> u64 {
    0
}

/// `N` digest bytes of packet `i` from `at` (head at 0, tail after it).
#[cfg(feature = "cuda")]
pub(super) fn digest_bytes<const N: usize>(d: &Digest, i: usize, at: usize) -> [u8; N] {
    let per = HEADER + TAIL;
    d.digests[i * per + at..i * per + at + N]
        .try_into()
        .expect("N bytes")
}
#[cfg(not(feature = "cuda"))]
pub(super) fn digest_bytes<const N: usize>(_: &Digest, _: usize, _: usize) -> [u8; N] {
    [0; N]
}

#[cfg(feature = "cuda")]
pub(super) fn write_gpu_packet(
    b: &mut Burst,
    i: usize,
    data: &[u8],
) -> Result<(), gpudirect::GpuError> {
    crate::gpu::write_packet(b, i, data)
}
#[cfg(not(feature = "cuda"))]
pub(super) fn write_gpu_packet(
    _: &mut Burst,
    _: usize,
    _: &[u8],
) -> Result<(), gpudirect::GpuError> {
    Err(crate::raw::no_cuda())
}

/// Runs one side to the end.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_side(
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
    let mut senders: Vec<Sender> = (0..q.tx.len() as u32).map(Sender::new).collect();
    r.streams = if send { senders.len() } else { 0 };
    let count_only = opts.work == SocketWork::Count;
    let mut rx = RxCheck::new(udp, size, count_only);
    let start = Instant::now();
    let mut send_from: Option<Instant> = None;
    let mut send_until = start + Duration::from_secs_f64(seconds);
    let mut tx_done_at = None;
    let batch = messages_per_burst(&q.tx, size);
    let give_up =
        start + connect_timeout + Duration::from_secs_f64(seconds) + Duration::from_secs(30);
    let mut waiting_since = start;
    // A message written into GPU memory is built here first.
    let mut scratch: Vec<u8> = Vec::new();
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
                        None => txq.alloc(batch).ok().map(|mut b| {
                            let kind = (udp, count_only);
                            fill_messages(&mut b, s, size, kind, &mut scratch, &mut rx.bad);
                            b
                        }),
                    };
                    let Some(b) = burst else { continue };
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
                                if send_from.is_none() && now - waiting_since > connect_timeout {
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
                } else if udp && s.ends_sent < END_MARKERS {
                    all_ended = false;
                    let due = send_until + END_SPREAD * s.ends_sent / END_MARKERS;
                    if now >= due {
                        send_end_marker(s, txq);
                    }
                }
            }
            if all_ended {
                tx_done_at = Some(now);
            }
        } else {
            waiting_since = now;
        }
        progressed |= rx.poll_all(&mut q.rx, &mut r.traffic, now);
        let senders_done = tx_done_at.is_some() || !send;
        let quiet = now - rx.last > QUIET_END && now > send_until;
        if senders_done && (!receive || rx.markers_in() || quiet || stop.load(Ordering::Relaxed)) {
            break;
        }
        if now > give_up {
            r.traffic.errors += 1;
            let doing = if senders_done { "receiving" } else { "sending" };
            let why = Some(&last_wait_error)
                .filter(|w| !w.is_empty())
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            let after = (now - start).as_secs_f64();
            r.problems
                .push(format!("gave up: still {doing} after {after:.0} s{why}"));
            break;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    let rx_secs = rx
        .first
        .map_or(seconds, |a| (rx.last - a).as_secs_f64().max(1e-3));
    let tx_secs = match (send_from, tx_done_at) {
        (Some(a), Some(b)) => (b.min(send_until) - a).as_secs_f64().max(1e-9),
        _ => seconds,
    };
    rx.finish(
        &mut r,
        receive && peer_sends && !stop.load(Ordering::Relaxed),
    );
    r.traffic.set_rates(tx_secs, rx_secs);
    r
}

/// Messages per burst: bursts of at most BURST_BYTES, at most QUEUED_BURSTS waiting per
/// queue. A sender that keeps its data in flight small keeps it in cache (as an
/// application that produces data as it goes does), instead of running a whole region
/// ahead.
fn messages_per_burst(tx: &[TxQueue], size: usize) -> usize {
    tx.first()
        .map_or(32, |t| t.batch_size.clamp(1, 64))
        .min((BURST_BYTES / size.max(1)).max(1))
}

/// Writes the next messages of sender `s` into burst `b` (each `size` bytes, in GPU memory
/// through `scratch` where the buffer is not host memory) and advances its sequence.
/// Writes the burst's messages of sender `s`: `(udp, count_only)` says what they are and
/// how much is written (see [`SocketWork`]).
fn fill_messages(
    b: &mut Burst,
    s: &mut Sender,
    size: usize,
    (udp, count_only): (bool, bool),
    scratch: &mut Vec<u8>,
    bad: &mut Vec<String>,
) {
    for i in 0..b.len() {
        let (seq, offset) = (s.seq + i as u64, s.offset + (i * size) as u64);
        let fill = |buf: &mut [u8]| {
            if udp {
                fill_udp(buf, s.stream, seq, KIND_DATA);
            } else {
                fill_stream(buf, offset);
            }
        };
        match b.buffer_mut(i, 0) {
            Some(buf) if count_only => {
                if udp {
                    let mut head = [0u8; HEADER];
                    fill_udp(&mut head, s.stream, seq, KIND_DATA);
                    buf[..HEADER].copy_from_slice(&head);
                }
                b.set_len(i, 0, size);
            }
            Some(buf) => {
                fill(&mut buf[..size]);
                b.set_len(i, 0, size);
            }
            None => {
                scratch.resize(size, 0);
                fill(&mut scratch[..]);
                if let Err(e) = write_gpu_packet(b, i, scratch) {
                    bad.push(format!("writing a message into GPU memory: {e}"));
                }
            }
        }
    }
    s.seq += b.len() as u64;
    s.offset += (b.len() * size) as u64;
}

/// Sends one UDP end marker of sender `s` (its total so far), when `txq` has a buffer.
fn send_end_marker(s: &mut Sender, txq: &mut TxQueue) {
    let Ok(mut b) = txq.alloc(1) else { return };
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

/// The receiving half: every message checked against what its sender wrote.
struct RxCheck {
    udp: bool,
    /// `SocketWork::Count`: host messages are counted (UDP: by their header), not checked.
    count_only: bool,
    /// Bytes of each message.
    size: usize,
    /// Per `(queue, stream)` state (UDP streams all on queue slot 0).
    streams: BTreeMap<(usize, u32), StreamRx>,
    /// The GPU's digests of a burst in GPU memory.
    digest: Digest,
    /// Expected bytes of a message checked by digest.
    scratch: Vec<u8>,
    /// Problems found (sending's too).
    bad: Vec<String>,
    first: Option<Instant>,
    last: Instant,
}

impl RxCheck {
    fn new(udp: bool, size: usize, count_only: bool) -> Self {
        Self {
            udp,
            count_only,
            size,
            streams: BTreeMap::new(),
            digest: Digest::default(),
            scratch: Vec::new(),
            bad: Vec::new(),
            first: None,
            last: Instant::now(),
        }
    }

    /// Polls every RX queue once and checks what came; true when something did.
    fn poll_all(&mut self, queues: &mut [RxQueue], traffic: &mut Traffic, now: Instant) -> bool {
        let mut progressed = false;
        for (k, rxq) in queues.iter_mut().enumerate() {
            match rxq.poll() {
                Ok(Some(b)) => {
                    progressed = true;
                    self.burst(k, &b, traffic, now);
                }
                Ok(None) => {}
                Err(f) => self.bad.push(format!("RX worker failed: {f}")),
            }
        }
        progressed
    }

    /// Checks every message of a burst from RX queue `k`, received at `now`.
    fn burst(&mut self, k: usize, burst: &Burst, traffic: &mut Traffic, now: Instant) {
        let on_gpu = burst.packets().first().is_some_and(|p| {
            !burst
                .regions()
                .get(p.segments()[0].region)
                .host_accessible()
        });
        if on_gpu && let Err(e) = gpu_digest(&mut self.digest, burst) {
            self.bad.push(format!("GPU check: {e}"));
            return;
        }
        for i in 0..burst.len() {
            let len = burst.packets()[i].len();
            let view = if on_gpu {
                Seen::Digest {
                    len,
                    sum: digest_sum(&self.digest, i),
                    head: digest_bytes(&self.digest, i, 0),
                    tail: digest_bytes(&self.digest, i, HEADER),
                }
            } else {
                Seen::Bytes(burst.data(i, 0).expect("host memory"))
            };
            let counted = if self.udp {
                self.datagram(&view, len, traffic)
            } else {
                self.stream_bytes(k, &view, len);
                true
            };
            if counted {
                traffic.bytes_received += len as u64;
                self.last = now;
                self.first.get_or_insert(now);
            }
        }
    }

    /// A UDP message: an end marker, or data in sequence. False when it is not counted as
    /// received (short, corrupt, duplicated or reordered, or a marker).
    fn datagram(&mut self, view: &Seen, len: usize, traffic: &mut Traffic) -> bool {
        if len < HEADER {
            self.bad
                .push(format!("a {len}-byte datagram, shorter than the header"));
            return false;
        }
        let head = view.head();
        let seq = u64::from_le_bytes(head[..8].try_into().expect("8"));
        let stream = u32::from_le_bytes(head[8..12].try_into().expect("4"));
        let kind = u32::from_le_bytes(head[12..16].try_into().expect("4"));
        let st = self.streams.entry((0, stream)).or_default();
        if kind == KIND_END {
            st.total = Some(seq);
            return false;
        }
        let intact = len == self.size
            && match view {
                Seen::Bytes(_) if self.count_only => true,
                Seen::Bytes(m) => check_udp_body(m, stream, seq),
                Seen::Digest { .. } => {
                    self.scratch.resize(self.size, 0);
                    fill_udp(&mut self.scratch, stream, seq, KIND_DATA);
                    view.matches(&self.scratch)
                }
            };
        if !intact {
            self.bad.push(format!(
                "stream {stream} message {seq} corrupt ({len} bytes)"
            ));
            return false;
        }
        if seq < st.next {
            self.bad.push(format!(
                "stream {stream} message {seq} duplicated or reordered"
            ));
            return false;
        }
        st.next = seq + 1;
        st.received += 1;
        traffic.messages_received += 1;
        true
    }

    /// TCP bytes of stream `k`, checked against their offset in the stream.
    fn stream_bytes(&mut self, k: usize, view: &Seen, len: usize) {
        let st = self.streams.entry((k, k as u32)).or_default();
        let intact = match view {
            Seen::Bytes(_) if self.count_only => true,
            Seen::Bytes(m) => check_stream(m, st.offset),
            Seen::Digest { .. } => {
                self.scratch.resize(len, 0);
                fill_stream(&mut self.scratch, st.offset);
                view.matches(&self.scratch)
            }
        };
        if !intact {
            self.bad.push(format!(
                "stream {k}: bytes {}..{} corrupt",
                st.offset,
                st.offset + len as u64
            ));
        }
        st.offset += len as u64;
    }

    /// UDP: every stream's end marker arrived and its messages with it.
    fn markers_in(&self) -> bool {
        self.udp
            && !self.streams.is_empty()
            && self
                .streams
                .values()
                .all(|s| s.total.is_some_and(|t| s.received >= t))
    }

    /// Losses from the end markers (or the sequence numbers seen), and the problems, into
    /// the report; `expect_data`: the peer sends, so nothing arriving is a problem.
    fn finish(mut self, r: &mut SideReport, expect_data: bool) {
        if !self.udp {
            r.traffic.messages_received = r.traffic.bytes_received / self.size as u64;
        }
        for ((_, stream), st) in &self.streams {
            if let Some(t) = st.total {
                r.traffic.lost += t.saturating_sub(st.received);
            } else if self.udp {
                r.traffic.lost += st.next.saturating_sub(st.received);
                self.bad.push(format!(
                    "stream {stream}: no end marker arrived; {} messages counted as lost from the sequence numbers seen",
                    st.next.saturating_sub(st.received)
                ));
            }
        }
        if expect_data && r.traffic.bytes_received == 0 {
            self.bad
                .push("nothing arrived from the peer (its section sends)".into());
        }
        if !self.bad.is_empty() {
            r.traffic.errors += self.bad.len() as u64;
            r.problems.extend(self.bad.into_iter().take(5));
        }
    }
}
