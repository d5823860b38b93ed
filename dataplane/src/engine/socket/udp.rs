//! UDP lanes: batched datagram I/O between kernel sockets and region buffers.

use super::peer::{LearnedPeer, PeerGate};
use super::sys::{self, Outgoing, Received};
use super::{
    QueueSetup, SocketInterfacePlan, SocketOpenError, grid, lane_in, lane_of, side, udp_uri,
    warn_if_capped,
};
use crate::burst::Burst;
use crate::config::{Direction, PeerFilter, SocketMode};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::engine::wire::{Ingress, WireGrid, WireReceiver, WireRxPort};
use crate::engine::{EngineError, Link, RxPort, TxPort};
use crate::memory::RegionSet;
use crate::stats::{DropReason, QueueCounters, WarnLimiter};
use crate::steering::InterfaceSteering;
use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

mod tx;
use tx::UdpTx;

/// Empty receive calls between two reads of the socket's drop counter (drops after the
/// last datagram that arrived carry no SO_RXQ_OVFL report).
const DROP_CHECK_EVERY: u32 = 256;
/// Most packets in one GSO send (the kernel's UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most datagrams the kernel coalesces into one GRO read (UDP_GRO_CNT_MAX).
const GRO_MAX_SEGMENTS: usize = 64;
/// Most bytes of one GRO read.
const GRO_MAX_BYTES: usize = 65535;

/// One socket and what its RX and TX queues share.
struct Lane {
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    /// Server lanes: whom to answer.
    learned: Arc<LearnedPeer>,
    link: Arc<Link>,
}

/// A UDP interface: its lanes and the wires from lanes to RX queues.
pub(super) struct UdpInterface {
    name: String,
    port: PortIndex,
    mode: SocketMode,
    remote: Option<SocketAddr>,
    lanes: Vec<Lane>,
    gso: bool,
    gro: bool,
    /// The kernel stamps received datagrams (SO_TIMESTAMPNS).
    kernel_timestamps: bool,
    rx: Vec<QueueSetup>,
    tx: Vec<QueueSetup>,
    grid: WireGrid,
    regions: Arc<RegionSet>,
    /// Ingress points not yet handed to an RX port (one per lane).
    ingresses: Mutex<Vec<Option<Ingress>>>,
    /// Who may send to the interface.
    peers: PeerFilter,
    /// Queues added while the interface runs (a live change): RX queues without a socket
    /// of their own, TX queues on the existing lanes.
    added: Mutex<AddedQueues>,
}

/// The queues a live change added to a UDP interface, in the order they came.
#[derive(Default)]
struct AddedQueues {
    rx: Vec<QueueId>,
    tx: Vec<QueueId>,
}

impl UdpInterface {
    /// Opens the lanes' sockets.
    pub(super) fn open(
        s: &SocketInterfacePlan,
        interface_port: PortIndex,
        regions: &Arc<RegionSet>,
        steering: &Arc<InterfaceSteering>,
    ) -> Result<Self, EngineError> {
        let bad = |reason: String| EngineError::Interface {
            interface: s.name.to_owned(),
            reason,
        };
        let lanes_wanted = match s.mode {
            SocketMode::Server => s.rx.len().max(1),
            SocketMode::Client => s.rx.len().max(s.tx.len()).max(1),
        };
        let local = s.local_or_any();
        let mut lanes = Vec::new();
        let mut gro = s.gro;
        let mut kernel_timestamps = s.timestamps;
        // A server of multicast groups binds to its one group (or to any address of the
        // groups' IP version when it has several), since a socket bound to a unicast
        // address takes no multicast.
        let server_at = match s.multicast.as_slice() {
            [] => local,
            [first, rest @ ..] if rest.iter().all(|g| g.group == first.group) => {
                SocketAddr::new(first.group, local.port())
            }
            [first, ..] => {
                let any: std::net::IpAddr = if first.group.is_ipv4() {
                    std::net::Ipv4Addr::UNSPECIFIED.into()
                } else {
                    std::net::Ipv6Addr::UNSPECIFIED.into()
                };
                SocketAddr::new(any, local.port())
            }
        };
        for k in 0..lanes_wanted {
            let (at, peer, shared) = match s.mode {
                SocketMode::Server => (server_at, None, true),
                SocketMode::Client => {
                    let port = if local.port() == 0 {
                        0
                    } else {
                        local.port().checked_add(k as u16).ok_or_else(|| {
                            bad(format!(
                                "client lane {k} would bind local port {} + {k}, past 65535",
                                local.port()
                            ))
                        })?
                    };
                    (SocketAddr::new(local.ip(), port), s.remote, false)
                }
            };
            let socket = open_socket(s, k, (at, shared, peer), (&mut gro, &mut kernel_timestamps))
                .map_err(|source| EngineError::Socket {
                    interface: s.name.to_owned(),
                    source,
                })?;
            if !s.multicast.is_empty() {
                sys::join_groups(&socket, &s.multicast, local.ip())
                    .map_err(|e| bad(e.to_string()))?;
            }
            if let Some(group) = s.remote.filter(|r| r.ip().is_multicast())
                && !local.ip().is_unspecified()
            {
                sys::multicast_from(&socket, local.ip()).map_err(|e| {
                    bad(format!(
                        "send to {group} from the interface of {}: {e}",
                        local.ip()
                    ))
                })?;
            }
            let bound = super::bound(&socket).unwrap_or(at);
            let link = lane_link(s.mode, peer, s.remote);
            lanes.push(Lane {
                socket: Arc::new(socket),
                local: bound,
                learned: Arc::new(LearnedPeer::default()),
                link: Arc::new(link),
            });
        }
        tracing::info!(
            "interface `{}`: UDP {} on {} with {} socket(s){}{}",
            s.name,
            side(s.mode),
            udp_uri(lanes[0].local),
            lanes.len(),
            s.remote
                .map(|r| format!(", peer {}", udp_uri(r)))
                .unwrap_or_default(),
            if s.multicast.is_empty() {
                String::new()
            } else {
                format!(
                    ", joined {}",
                    s.multicast
                        .iter()
                        .map(|g| match g.source {
                            Some(src) => format!("({src}, {})", g.group),
                            None => format!("(*, {})", g.group),
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            }
        );
        let grid = grid(steering, &s.rx, lanes.len());
        let ingresses = (0..lanes.len()).map(|_| None).collect();
        Ok(Self {
            name: s.name.to_owned(),
            port: interface_port,
            mode: s.mode,
            remote: s.remote,
            lanes,
            gso: s.gso,
            gro,
            kernel_timestamps,
            rx: s.rx.clone(),
            tx: s.tx.clone(),
            grid,
            regions: regions.clone(),
            ingresses: Mutex::new(ingresses),
            peers: s.peers.clone(),
            added: Mutex::new(AddedQueues::default()),
        })
    }

    /// Sets up queue `queue` while the interface runs. An RX queue gets no socket: a
    /// socket joining the SO_REUSEPORT group would take flows from the running queues'
    /// sockets, so it receives what the rules steer to it from the sockets there are. A TX
    /// queue sends on an existing lane's socket, in turn after the lanes' own TX queues.
    pub(super) fn open_queue(&self, direction: Direction, queue: QueueId) -> Result<(), String> {
        let mut added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        match direction {
            Direction::Rx => {
                if self.rx.iter().any(|q| q.id == queue) {
                    return Err("the queue reads a socket of the interface's SO_REUSEPORT group, which stays until a restart".into());
                }
                self.grid.add_rx_queue(queue)?;
                if !added.rx.contains(&queue) {
                    added.rx.push(queue);
                }
            }
            Direction::Tx => {
                if !self.tx.iter().any(|q| q.id == queue) && !added.tx.contains(&queue) {
                    added.tx.push(queue);
                }
            }
        }
        Ok(())
    }

    /// The lane an added TX queue sends on.
    fn added_tx_lane(&self, queue: QueueId) -> Option<usize> {
        let added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        let k = added.tx.iter().position(|&q| q == queue)?;
        Some((self.tx.len() + k) % self.lanes.len().max(1))
    }

    /// True when `queue` is an RX queue added while the interface runs.
    pub(super) fn added_rx(&self, queue: QueueId) -> bool {
        let added = self.added.lock().unwrap_or_else(|e| e.into_inner());
        added.rx.contains(&queue)
    }

    pub(super) fn rx_port(
        &self,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Option<Box<dyn RxPort>> {
        let Some((k, q)) = lane_of(&self.rx, queue, self.lanes.len()) else {
            return self
                .added_rx(queue)
                .then(|| self.grid.receiver(queue))
                .flatten()
                .map(|r| Box::new(WireRxPort(r)) as Box<dyn RxPort>);
        };
        let lane = &self.lanes[k];
        let ingress = {
            let mut taken = self.ingresses.lock().unwrap_or_else(|e| e.into_inner());
            match taken[k].take() {
                Some(i) => i,
                None => self
                    .grid
                    .ingress(k, &self.regions, self.port, counters.clone()),
            }
        };
        Some(Box::new(UdpRx {
            socket: lane.socket.clone(),
            local: lane.local,
            learned: lane.learned.clone(),
            link: lane.link.clone(),
            server: self.mode == SocketMode::Server && self.remote.is_none(),
            gate: PeerGate {
                peers: self.peers.clone(),
                // A server that answers its learned peer keeps it.
                pin: self.mode == SocketMode::Server
                    && self.remote.is_none()
                    && !self.tx.is_empty(),
                learned: lane.learned.clone(),
            },
            warn_rejected: WarnLimiter::new(),
            warn_malformed: WarnLimiter::new(),
            regions: self.regions.clone(),
            port: self.port,
            queue,
            region: q.region,
            batch: q.batch.min(sys::MAX_MESSAGES),
            spare: None,
            received: Vec::with_capacity(sys::MAX_MESSAGES),
            sources: Vec::with_capacity(sys::MAX_MESSAGES),
            held: None,
            ingress,
            receiver: self.grid.receiver(queue)?,
            counters,
            drops_seen: 0,
            empty_polls: 0,
            interface: self.name.clone(),
            gro: self.gro,
            read_size: self.regions.get(q.region).buf_size(),
            scratch: Vec::new(),
            overflow: Vec::new(),
            close_when_drained: q.close_when_drained,
            drained: false,
        }))
    }

    pub(super) fn tx_port(
        &self,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Option<Box<dyn TxPort>> {
        let k = lane_of(&self.tx, queue, self.lanes.len())
            .map(|(k, _)| k)
            .or_else(|| self.added_tx_lane(queue))?;
        let lane = &self.lanes[k];
        let to = match (self.mode, self.remote) {
            (SocketMode::Client, _) => Destination::Connected,
            (SocketMode::Server, Some(r)) => Destination::Fixed(r),
            (SocketMode::Server, None) => Destination::Learned(lane.learned.clone()),
        };
        Some(Box::new(UdpTx {
            socket: lane.socket.clone(),
            to,
            gso_below: if self.gso { usize::MAX } else { 0 },
            link: lane.link.clone(),
            counters,
            interface: self.name.clone(),
            warn_unreadable: WarnLimiter::new(),
        }))
    }

    /// True when the kernel stamps what this interface receives.
    pub(super) fn kernel_timestamps(&self) -> bool {
        self.kernel_timestamps
    }

    pub(super) fn link(&self, direction: Direction, queue: QueueId) -> Option<Arc<Link>> {
        // An added RX queue has no lane, so no peer of its own.
        let k = lane_in(&self.rx, &self.tx, direction, queue, self.lanes.len()).or_else(|| {
            (direction == Direction::Tx)
                .then(|| self.added_tx_lane(queue))
                .flatten()
        })?;
        Some(self.lanes[k].link.clone())
    }
}

/// An RX queue: its lane's socket, feeding the interface's wires; it takes from its own
/// wire end.
struct UdpRx {
    socket: Arc<UdpSocket>,
    local: SocketAddr,
    learned: Arc<LearnedPeer>,
    link: Arc<Link>,
    /// A server without `remote_addr` learns whom to answer from what it receives.
    server: bool,
    /// Which sources are taken.
    gate: PeerGate,
    warn_rejected: WarnLimiter,
    warn_malformed: WarnLimiter,
    regions: Arc<RegionSet>,
    port: PortIndex,
    queue: QueueId,
    region: crate::memory::RegionId,
    batch: usize,
    /// Buffers allocated for receiving and not used yet.
    spare: Option<Burst>,
    received: Vec<Received>,
    /// Senders of the packets of `held` (or of the last burst steered).
    sources: Vec<SocketAddr>,
    /// Received packets the wires could not take yet.
    held: Option<Burst>,
    ingress: Ingress,
    receiver: WireReceiver,
    counters: Arc<QueueCounters>,
    /// The socket's drop counter as last seen.
    drops_seen: u32,
    empty_polls: u32,
    interface: String,
    /// UDP GRO is on for this socket.
    gro: bool,
    /// Bytes each buffer of a read is cut to: the datagram size last seen with GRO,
    /// buf_size otherwise.
    read_size: usize,
    /// Bytes of a read being laid out again.
    scratch: Vec<u8>,
    /// GRO: where each read's bytes past its buffers go (a size change).
    overflow: Vec<u8>,
    close_when_drained: bool,
    /// The last receive found the socket and the wire empty.
    drained: bool,
}

/// Lane `k`'s socket bound at `at` (shared by a server's lanes, connected to `peer`), with
/// GRO, kernel timestamps and busy polling as the plan asks; what the kernel refuses is
/// turned off in `gro` and `kernel_timestamps`, with a warning. The error is the reason.
fn open_socket(
    s: &SocketInterfacePlan,
    k: usize,
    (at, shared, peer): (SocketAddr, bool, Option<SocketAddr>),
    (gro, kernel_timestamps): (&mut bool, &mut bool),
) -> Result<UdpSocket, SocketOpenError> {
    let (socket, sizes) =
        sys::udp_socket(at, shared, peer, s.buffers.0, s.buffers.1).map_err(|source| {
            SocketOpenError {
                verb: "bind",
                otherwise: "open a UDP socket on",
                uri: udp_uri(at),
                source,
            }
        })?;
    if k == 0 {
        warn_if_capped(&s.name, s.buffers, sizes);
    }
    if s.gro
        && let Err(e) = sys::udp_gro(&socket)
    {
        tracing::warn!(
            "interface `{}`: UDP GRO not available ({e}); one datagram per read",
            s.name
        );
        *gro = false;
    }
    if *kernel_timestamps && let Err(e) = sys::rx_timestamps(&socket) {
        tracing::warn!(
            "interface `{}`: no kernel receive timestamps ({e}); the RX worker stamps packets instead",
            s.name
        );
        *kernel_timestamps = false;
    }
    if s.busy_poll_us > 0 {
        let refused = sys::busy_poll(&socket, s.busy_poll_us, 64);
        if !refused.is_empty() {
            tracing::warn!(
                "interface `{}`: busy polling not fully on: {}",
                s.name,
                refused.join("; ")
            );
        }
    }
    Ok(socket)
}

/// A lane's link: a connected client's is up from the start; any lane with a configured
/// remote knows its peer.
fn lane_link(mode: SocketMode, peer: Option<SocketAddr>, remote: Option<SocketAddr>) -> Link {
    match (mode, peer) {
        (SocketMode::Client, Some(p)) => {
            let l = Link::up_from_start();
            l.connected(p);
            l
        }
        _ => match remote {
            Some(p) => {
                let l = Link::default();
                l.connected(p);
                l
            }
            None => Link::default(),
        },
    }
}

impl UdpRx {
    /// Counts kernel drops up to the socket's counter value `now`.
    fn account_drops(&mut self, now: u32) {
        let new = now.wrapping_sub(self.drops_seen);
        if new > 0 && new < u32::MAX / 2 {
            self.counters
                .drop_packets(DropReason::EngineMissed, u64::from(new));
            self.drops_seen = now;
        }
    }

    /// Reads one batch from the socket into region buffers and steers it. Without GRO each
    /// read is one datagram in one buffer. With GRO a read may hold several datagrams of
    /// one size back to back: each read is given `per_read` buffers cut to the datagram
    /// size last seen (`read_size`), so the kernel writes datagram `j` into buffer `j`; a
    /// read whose size differs (the first one, or a change) is laid out again by copying.
    fn fill(&mut self) {
        let buf_size = self.regions.get(self.region).buf_size();
        let read_size = self.read_size.min(buf_size);
        let per_read = if self.gro {
            GRO_MAX_BYTES.div_ceil(read_size).clamp(1, GRO_MAX_SEGMENTS)
        } else {
            1
        };
        let reads = (self.batch / per_read).clamp(1, sys::MAX_MESSAGES);
        let want = reads * per_read;
        // Too few buffers for one read: the datagrams wait in the kernel (which counts
        // what it drops).
        let Some(mut spare) = self.spare_buffers(per_read, want) else {
            return;
        };
        let usable = (spare.len() / per_read).min(reads) * per_read;
        // With GRO every read ends in an overflow area of its own, so a read longer than
        // its buffers (a size change) is never cut: it is laid out again from there.
        let overflow_each = if self.gro { GRO_MAX_BYTES } else { 0 };
        self.overflow.resize(overflow_each * reads, 0);
        let result = {
            let bufs = spare.buffers_mut(0, read_size);
            let mut slices = Vec::with_capacity(usable + reads);
            let mut areas = self.overflow.chunks_mut(overflow_each.max(1));
            for (i, b) in bufs.into_iter().take(usable).enumerate() {
                slices.push(b);
                if self.gro && (i + 1) % per_read == 0 {
                    slices.push(IoSliceMut::new(areas.next().expect("one area per read")));
                }
            }
            let per = per_read + usize::from(self.gro);
            sys::receive_datagrams(&self.socket, &mut slices, per, &mut self.received)
        };
        let drops = match result {
            Ok(d) => d,
            Err(e) => {
                // A connected socket's pending "port unreachable" comes out of whichever
                // call runs first, the receive or the send.
                self.link
                    .failed(if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                        refused(self.socket.peer_addr().ok())
                    } else {
                        format!("receive on {}: {e}", udp_uri(self.local))
                    });
                self.spare = Some(spare);
                return;
            }
        };
        if self.received.is_empty() {
            self.spare = Some(spare);
            self.idle_poll();
            return;
        }
        self.empty_polls = 0;
        if let Some(d) = drops {
            self.account_drops(d);
        }
        let mut got = Burst::empty(self.regions.clone(), self.port, self.queue, usable);
        let mut left = Burst::empty(self.regions.clone(), self.port, self.queue, usable);
        self.sources.clear();
        let mut malformed = 0u64;
        let mut rejected: Option<(u64, SocketAddr)> = None;
        let received = std::mem::take(&mut self.received);
        for (m, r) in received.iter().enumerate() {
            let mut block = Burst::empty(self.regions.clone(), self.port, self.queue, per_read);
            block.take_from(&mut spare, per_read);
            let size = r.segment.unwrap_or(r.len);
            let count = if size == 0 { 1 } else { r.len.div_ceil(size) };
            if !self.gate.admits(r.from, &self.link) {
                let n = rejected.map_or(0, |(n, _)| n);
                rejected = Some((n + count as u64, r.from));
                left.take_from(&mut block, per_read);
                continue;
            }
            if r.truncated || size > buf_size {
                // Longer than a buffer: the kernel cut it (or it cannot be laid out).
                malformed += count as u64;
                left.take_from(&mut block, per_read);
                continue;
            }
            if size > read_size || (count > 1 && size != read_size) {
                // Not laid out one datagram per buffer: copy the read's bytes out and
                // write each datagram into a buffer of its own.
                let overflow = m * overflow_each..(m + 1) * overflow_each;
                self.relayout(&mut block, r.len, read_size, overflow, size, count);
                if block.len() < count {
                    malformed += (count - block.len()) as u64;
                }
            }
            let placed = count.min(block.len());
            for j in 0..placed {
                let len = (r.len - j * size).min(size);
                block.set_len(j, 0, len);
                block.set_timestamp(j, r.timestamp_ns);
                self.sources.push(r.from);
            }
            got.take_from(&mut block, placed);
            left.take_from(&mut block, usize::MAX);
        }
        // The next reads are cut to the datagram size last seen (GRO), or to whole buffers
        // again when a longer single datagram came.
        if let Some(r) = received.last() {
            self.read_size = match r.segment {
                Some(g) if g <= buf_size => g,
                _ if r.len > self.read_size => buf_size,
                _ => self.read_size,
            };
        }
        self.received = received;
        left.take_from(&mut spare, usize::MAX);
        self.spare = Some(left);
        self.note_dropped(malformed, rejected, buf_size);
        if !got.is_empty() {
            self.held = self
                .ingress
                .steer_datagrams(got, self.queue, &self.sources, self.local);
        }
    }

    /// The buffers for the next reads: the spare burst when it holds at least one read's
    /// worth, else up to `want` fresh ones (none when the pool has fewer than `per_read`).
    fn spare_buffers(&mut self, per_read: usize, want: usize) -> Option<Burst> {
        match self.spare.take() {
            Some(b) if b.len() >= per_read => Some(b),
            other => {
                drop(other);
                Burst::allocate_up_to(
                    self.regions.clone(),
                    self.port,
                    self.queue,
                    &[self.region],
                    want,
                )
                .filter(|b| b.len() >= per_read)
            }
        }
    }

    /// A read that found nothing: every `DROP_CHECK_EVERY` of them, the kernel's drop
    /// counter is read (a busy socket reports it with its datagrams).
    fn idle_poll(&mut self) {
        self.empty_polls += 1;
        if self.empty_polls >= DROP_CHECK_EVERY {
            self.empty_polls = 0;
            if let Ok(d) = sys::socket_drops(&*self.socket) {
                self.account_drops(d);
            }
        }
    }

    /// Counts and reports the batch's dropped datagrams (too long for a buffer, from a
    /// peer the gate refused), and a server learns its peer from the last datagram kept.
    fn note_dropped(
        &mut self,
        malformed: u64,
        rejected: Option<(u64, SocketAddr)>,
        buf_size: usize,
    ) {
        if malformed > 0 {
            self.counters.drop_packets(DropReason::Malformed, malformed);
            if let Some(held) = self.warn_malformed.allow() {
                tracing::warn!(
                    "interface `{}` RX queue {}: {malformed} datagram(s) longer than the {buf_size}-byte buffers, dropped (counted as malformed){}",
                    self.interface,
                    self.queue,
                    WarnLimiter::note(held)
                );
            }
        }
        if let Some((n, from)) = rejected {
            self.counters.drop_packets(DropReason::RejectedPeer, n);
            let why = self.gate.why_refused(from);
            self.link.rejected(n, from, why);
            if let Some(held) = self.warn_rejected.allow() {
                tracing::warn!(
                    "interface `{}` RX queue {}: {n} datagram(s) from {from} dropped: {why} (counted as rejected_peer){}",
                    self.interface,
                    self.queue,
                    WarnLimiter::note(held)
                );
            }
        }
        if self.server
            && !self.gate.pin
            && let Some(&last) = self.sources.last()
            && self.learned.store(last)
        {
            self.link.connected(last);
        }
    }

    /// Rewrites a read of `len` bytes that the kernel wrote across `block`'s buffers in
    /// pieces of `read_size` bytes as `count` datagrams of `size` bytes, one per buffer
    /// (taking more buffers from the pool when the block has too few).
    fn relayout(
        &mut self,
        block: &mut Burst,
        len: usize,
        read_size: usize,
        overflow: std::ops::Range<usize>,
        size: usize,
        count: usize,
    ) {
        self.scratch.clear();
        let mut at = 0;
        for j in 0..block.len() {
            if at >= len {
                break;
            }
            let n = (len - at).min(read_size);
            let buf = block.buffer_mut(j, 0).expect("host memory");
            self.scratch.extend_from_slice(&buf[..n]);
            at += n;
        }
        if at < len {
            let rest = &self.overflow[overflow];
            self.scratch
                .extend_from_slice(&rest[..(len - at).min(rest.len())]);
        }
        if block.len() < count
            && let Some(mut more) = Burst::allocate_up_to(
                self.regions.clone(),
                self.port,
                self.queue,
                &[self.region],
                count - block.len(),
            )
        {
            block.take_from(&mut more, count);
        }
        for j in 0..count.min(block.len()) {
            let from = j * size;
            let n = (len - from).min(size);
            let buf = block.buffer_mut(j, 0).expect("host memory");
            buf[..n].copy_from_slice(&self.scratch[from..from + n]);
        }
    }
}

impl RxPort for UdpRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        match self.held.take() {
            Some(h) => {
                self.held = self
                    .ingress
                    .steer_datagrams(h, self.queue, &self.sources, self.local);
            }
            None => self.fill(),
        }
        let idle = self.held.is_none() && self.received.is_empty();
        if idle {
            self.ingress.idle();
        }
        let moved = self.receiver.receive(into, max);
        self.drained = self.close_when_drained && idle && moved == 0;
        moved
    }

    fn take_boundary(&mut self) -> bool {
        self.receiver.take_boundary() | std::mem::take(&mut self.drained)
    }
}

/// The link error for a peer that answered "port unreachable".
fn refused(peer: Option<SocketAddr>) -> String {
    format!(
        "the peer {} refused datagrams: nothing listens there (ICMP port unreachable)",
        peer.map_or("?".into(), |p| format!("udp://{p}"))
    )
}

/// Where a TX queue's datagrams go.
enum Destination {
    /// The client socket's connected peer.
    Connected,
    /// `remote_addr` of a server.
    Fixed(SocketAddr),
    /// The peer the lane last heard from.
    Learned(Arc<LearnedPeer>),
}
