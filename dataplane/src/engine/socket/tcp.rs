//! TCP lanes: one connection per lane, made and remade by a connection thread, read and
//! written by the queues' workers without blocking.

use super::{QueueSetup, SocketInterfacePlan, SocketOpenError, lane_in, lane_of, side, sys};
use crate::burst::Burst;
use crate::config::{Direction, PeerFilter, SocketMode};
use crate::descriptor::QueueId;
use crate::engine::{Link, RxPort, TxPort};
use crate::memory::{RegionId, RegionSet};
use crate::stats::{DropReason, QueueCounters, WarnLimiter};
use arc_swap::ArcSwapOption;
use std::io::{IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the connection thread looks for new connections and dead ones.
const CONNECTOR_PERIOD: Duration = Duration::from_millis(5);
/// Longest wait for one connect attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Slices per `writev` at most.
const MAX_SLICES: usize = 64;

fn tcp_uri(a: impl std::fmt::Display) -> String {
    format!("tcp://{a}")
}

/// Milliseconds since the first call, on a clock shared by every connection.
fn now_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// One established connection.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    dead: AtomicBool,
    /// When a byte last moved either way ([`now_ms`]), for the idle timeout.
    active_ms: AtomicU64,
}

impl Connection {
    fn new(stream: TcpStream, peer: SocketAddr) -> Self {
        Self {
            stream,
            peer,
            dead: AtomicBool::new(false),
            active_ms: AtomicU64::new(now_ms()),
        }
    }

    /// Notes that bytes moved (one store per read or write call, not per packet).
    #[inline]
    fn moved_bytes(&self) {
        self.active_ms.store(now_ms(), Ordering::Relaxed);
    }
}

/// A lane: the connection its RX and TX queues use now.
struct Lane {
    conn: ArcSwapOption<Connection>,
    /// Grows with every change of `conn`, so ports notice with one load.
    generation: AtomicU64,
    link: Arc<Link>,
}

impl Lane {
    fn install(&self, c: Connection) {
        let peer = c.peer;
        self.conn.store(Some(Arc::new(c)));
        self.generation.fetch_add(1, Ordering::Release);
        self.link.connected(peer);
    }

    /// Ends `c` (once), frees the lane for the next connection and says why.
    fn retire(&self, c: &Arc<Connection>, why: String) {
        if c.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = c.stream.shutdown(Shutdown::Both);
        let current = self.conn.load();
        if current.as_ref().is_some_and(|x| Arc::ptr_eq(x, c)) {
            self.conn.store(None);
            self.generation.fetch_add(1, Ordering::Release);
        }
        tracing::warn!("connection with {} ended: {why}", tcp_uri(c.peer));
        self.link
            .disconnected(format!("connection with {} ended: {why}", tcp_uri(c.peer)));
    }

    fn is_free(&self) -> bool {
        self.conn.load().is_none()
    }
}

/// A port's view of its lane: the connection, reloaded when the lane's generation moves.
struct LaneView {
    lane: Arc<Lane>,
    seen: u64,
    conn: Option<Arc<Connection>>,
}

impl LaneView {
    fn new(lane: Arc<Lane>) -> Self {
        Self {
            lane,
            seen: u64::MAX,
            conn: None,
        }
    }

    #[inline]
    fn current(&mut self) -> Option<Arc<Connection>> {
        let g = self.lane.generation.load(Ordering::Acquire);
        if g != self.seen {
            self.seen = g;
            self.conn = self.lane.conn.load_full();
        }
        match &self.conn {
            Some(c) if !c.dead.load(Ordering::Acquire) => Some(c.clone()),
            _ => None,
        }
    }
}

/// What the connection thread works on for one interface.
pub(super) struct TcpShared {
    name: String,
    mode: SocketMode,
    listener: Option<TcpListener>,
    local: SocketAddr,
    remote: Option<SocketAddr>,
    retry: Duration,
    buffers: (usize, usize),
    lanes: Vec<Arc<Lane>>,
    peers: PeerFilter,
    idle_timeout: Option<Duration>,
    warn_refused: WarnLimiter,
}

/// A TCP interface.
pub(super) struct TcpInterface {
    shared: Arc<TcpShared>,
    rx: Vec<QueueSetup>,
    tx: Vec<QueueSetup>,
    regions: Option<Arc<RegionSet>>,
}

impl TcpInterface {
    /// Listens (server) or prepares the lanes (client); connecting happens on the
    /// connection thread.
    pub(super) fn open(s: &SocketInterfacePlan) -> Result<Self, SocketOpenError> {
        let lanes = s.rx.len().max(s.tx.len()).max(1);
        let local = s.local_or_any();
        let listener = match s.mode {
            SocketMode::Server => Some(sys::tcp_listener(local, lanes as i32 * 2).map_err(
                |source| SocketOpenError {
                    verb: "listen on",
                    otherwise: "listen on",
                    uri: tcp_uri(local),
                    source,
                },
            )?),
            SocketMode::Client => None,
        };
        tracing::info!(
            "interface `{}`: TCP {} {} with {lanes} connection lane(s)",
            s.name,
            side(s.mode),
            match (s.mode, s.remote) {
                (SocketMode::Client, Some(r)) => format!("to {}", tcp_uri(r)),
                _ => format!("on {}", tcp_uri(local)),
            }
        );
        Ok(Self {
            shared: Arc::new(TcpShared {
                name: s.name.to_owned(),
                mode: s.mode,
                listener,
                local,
                remote: s.remote,
                retry: Duration::from_secs(u64::from(s.retry_connect_s))
                    .max(Duration::from_millis(100)),
                buffers: s.buffers,
                peers: s.peers.clone(),
                idle_timeout: s.idle_timeout,
                warn_refused: WarnLimiter::new(),
                lanes: (0..lanes)
                    .map(|_| {
                        Arc::new(Lane {
                            conn: ArcSwapOption::empty(),
                            generation: AtomicU64::new(0),
                            link: Arc::new(Link::default()),
                        })
                    })
                    .collect(),
            }),
            rx: s.rx.clone(),
            tx: s.tx.clone(),
            regions: None,
        })
    }

    /// Gives the interface the region set its RX ports receive into.
    pub(super) fn with_regions(mut self, regions: &Arc<RegionSet>) -> Self {
        self.regions = Some(regions.clone());
        self
    }

    /// What the connection thread needs.
    pub(super) fn shared(&self) -> Arc<TcpShared> {
        self.shared.clone()
    }

    pub(super) fn rx_port(&self, queue: QueueId) -> Option<Box<dyn RxPort>> {
        let (k, q) = lane_of(&self.rx, queue, self.shared.lanes.len())?;
        let regions = self.regions.clone()?;
        Some(Box::new(TcpRx {
            view: LaneView::new(self.shared.lanes[k].clone()),
            buf_size: regions.get(q.region).buf_size(),
            regions,
            region: q.region,
            batch: q.batch.min(MAX_SLICES),
            spare: None,
            close_when_drained: q.close_when_drained,
            drained: false,
        }))
    }

    pub(super) fn tx_port(
        &self,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Option<Box<dyn TxPort>> {
        let (k, _) = lane_of(&self.tx, queue, self.shared.lanes.len())?;
        Some(Box::new(TcpTx {
            view: LaneView::new(self.shared.lanes[k].clone()),
            pending: None,
            counters,
            warn_unreadable: WarnLimiter::new(),
        }))
    }

    pub(super) fn link(&self, direction: Direction, queue: QueueId) -> Option<Arc<Link>> {
        let k = lane_in(
            &self.rx,
            &self.tx,
            direction,
            queue,
            self.shared.lanes.len(),
        )?;
        Some(self.shared.lanes[k].link.clone())
    }
}

/// The connection thread: accepts for servers, connects and reconnects for clients. It
/// has its own stop flag and holds no lock while it waits.
pub(super) struct Connector {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Connector {
    pub(super) fn spawn(interfaces: Vec<Arc<TcpShared>>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dp-tcp-connect".into())
            .spawn(move || connector_loop(&interfaces, &flag))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Connector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connector_loop(interfaces: &[Arc<TcpShared>], stop: &AtomicBool) {
    let mut next_attempt: Vec<Vec<Instant>> = interfaces
        .iter()
        .map(|i| vec![Instant::now(); i.lanes.len()])
        .collect();
    while !stop.load(Ordering::Acquire) {
        for (i, iface) in interfaces.iter().enumerate() {
            match iface.mode {
                SocketMode::Server => {
                    accept_pending(iface);
                    close_idle(iface);
                }
                SocketMode::Client => connect_free_lanes(iface, &mut next_attempt[i], stop),
            }
        }
        std::thread::sleep(CONNECTOR_PERIOD);
    }
    // Close every connection so peers see the end at once.
    for iface in interfaces {
        for lane in &iface.lanes {
            if let Some(c) = lane.conn.swap(None) {
                let _ = c.stream.shutdown(Shutdown::Both);
            }
        }
    }
}

fn prepare(iface: &TcpShared, stream: &TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(true)?;
    sys::size_stream_buffers(stream, iface.buffers.0, iface.buffers.1)?;
    Ok(())
}

fn accept_pending(iface: &TcpShared) {
    let Some(listener) = &iface.listener else {
        return;
    };
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                let free = iface.lanes.iter().find(|l| l.is_free());
                let refusal = if !iface.peers.allows(peer.ip()) {
                    Some("not in allowed_peers".to_owned())
                } else if free.is_none() {
                    Some(format!(
                        "every one of its {} connection lane(s) is busy",
                        iface.lanes.len()
                    ))
                } else {
                    None
                };
                let (Some(lane), None) = (free, &refusal) else {
                    // Closed at once, before a byte is read: one connection attempt costs
                    // an accept and a close. Counted first, so whoever sees the close
                    // also sees the count.
                    let why = refusal.unwrap_or_default();
                    iface.lanes[0].link.rejected(1, peer, &why);
                    drop(stream);
                    if let Some(held) = iface.warn_refused.allow() {
                        tracing::warn!(
                            "interface `{}`: refused {}: {why}{}",
                            iface.name,
                            tcp_uri(peer),
                            WarnLimiter::note(held)
                        );
                    }
                    continue;
                };
                if let Err(e) = prepare(iface, &stream) {
                    lane.link
                        .failed(format!("accepting {}: {e}", tcp_uri(peer)));
                    continue;
                }
                tracing::info!("interface `{}`: accepted {}", iface.name, tcp_uri(peer));
                lane.install(Connection::new(stream, peer));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                tracing::warn!("interface `{}`: accept: {e}", iface.name);
                return;
            }
        }
    }
}

/// Closes server connections that moved no byte for the idle timeout, so one peer cannot
/// hold a lane without using it.
fn close_idle(iface: &TcpShared) {
    let Some(limit) = iface.idle_timeout else {
        return;
    };
    let now = now_ms();
    for lane in &iface.lanes {
        if let Some(c) = lane.conn.load_full() {
            let idle = now.saturating_sub(c.active_ms.load(Ordering::Relaxed));
            if idle >= limit.as_millis() as u64 {
                lane.retire(
                    &c,
                    format!(
                        "idle for {:.0} s (socket_config.idle_timeout_s)",
                        limit.as_secs_f64()
                    ),
                );
            }
        }
    }
}

fn connect_free_lanes(iface: &TcpShared, next: &mut [Instant], stop: &AtomicBool) {
    let Some(remote) = iface.remote else {
        return;
    };
    for (k, lane) in iface.lanes.iter().enumerate() {
        if stop.load(Ordering::Acquire) {
            return;
        }
        if !lane.is_free() || Instant::now() < next[k] {
            continue;
        }
        next[k] = Instant::now() + iface.retry;
        let port = match iface.local.port() {
            0 => 0,
            p => p.saturating_add(k as u16),
        };
        let local = SocketAddr::new(iface.local.ip(), port);
        let timeout = iface.retry.min(CONNECT_TIMEOUT);
        let attempt = sys::tcp_connect(local, remote, timeout, iface.buffers).or_else(|e| {
            // The lane's local port may still be held by the last connection
            // (TIME_WAIT): any port will do.
            if e.raw_os_error() == Some(libc::EADDRINUSE) && port != 0 {
                sys::tcp_connect(
                    SocketAddr::new(iface.local.ip(), 0),
                    remote,
                    timeout,
                    iface.buffers,
                )
            } else {
                Err(e)
            }
        });
        match attempt.and_then(|s| prepare(iface, &s).map(|()| s)) {
            Ok(stream) => {
                tracing::info!(
                    "interface `{}`: connected to {}",
                    iface.name,
                    tcp_uri(remote)
                );
                lane.install(Connection::new(stream, remote));
            }
            Err(e) => {
                let why = format!(
                    "connect to {} failed: {e}; retrying every {:.1} s",
                    tcp_uri(remote),
                    iface.retry.as_secs_f64()
                );
                tracing::debug!("interface `{}`: {why}", iface.name);
                lane.link.failed(why);
            }
        }
    }
}

/// An RX queue: reads its lane's byte stream into region buffers.
struct TcpRx {
    view: LaneView,
    regions: Arc<RegionSet>,
    region: RegionId,
    buf_size: usize,
    batch: usize,
    spare: Option<Burst>,
    close_when_drained: bool,
    /// The last read found nothing.
    drained: bool,
}

impl RxPort for TcpRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        let moved = self.read(into, max);
        self.drained = self.close_when_drained && moved == 0;
        moved
    }

    fn take_boundary(&mut self) -> bool {
        std::mem::take(&mut self.drained)
    }
}

impl TcpRx {
    fn read(&mut self, into: &mut Burst, max: usize) -> usize {
        let Some(conn) = self.view.current() else {
            return 0;
        };
        let want = max.min(self.batch);
        if want == 0 {
            return 0;
        }
        let mut spare = match self.spare.take() {
            Some(b) if b.len() >= want => b,
            other => {
                drop(other);
                match Burst::allocate_up_to(
                    self.regions.clone(),
                    into.port(),
                    into.queue(),
                    &[self.region],
                    want,
                ) {
                    Some(b) => b,
                    None => return 0,
                }
            }
        };
        let result = {
            let mut slices = spare.buffers_mut(0, usize::MAX);
            let take = slices.len().min(want);
            (&conn.stream).read_vectored(&mut slices[..take])
        };
        let n = match result {
            Ok(0) => {
                self.spare = Some(spare);
                self.view
                    .lane
                    .retire(&conn, "the peer closed the connection".into());
                return 0;
            }
            Ok(n) => {
                conn.moved_bytes();
                n
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                self.spare = Some(spare);
                return 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                self.spare = Some(spare);
                return 0;
            }
            Err(e) => {
                self.spare = Some(spare);
                self.view.lane.retire(&conn, format!("receive: {e}"));
                return 0;
            }
        };
        let packets = n.div_ceil(self.buf_size);
        for i in 0..packets {
            let len = (n - i * self.buf_size).min(self.buf_size);
            spare.set_len(i, 0, len);
        }
        let moved = into.take_from(&mut spare, packets);
        self.spare = Some(spare);
        moved
    }
}

/// A burst being written: the next packet and the bytes of it already written.
struct Pending {
    burst: Burst,
    packet: usize,
    offset: usize,
}

/// A TX queue: writes its bursts into its lane's connection.
struct TcpTx {
    view: LaneView,
    pending: Option<Pending>,
    counters: Arc<QueueCounters>,
    warn_unreadable: WarnLimiter,
}

impl TcpTx {
    /// Writes what the socket takes of the pending burst.
    fn flush(&mut self) {
        let Some(p) = &mut self.pending else {
            return;
        };
        let Some(conn) = self.view.current() else {
            // The connection ended under a partly written burst: its rest is lost.
            let left = (p.burst.len() - p.packet) as u64;
            self.counters.drop_packets(DropReason::Disconnected, left);
            self.pending = None;
            return;
        };
        loop {
            // Every segment of every packet, the first packet from where the last write
            // ended (`offset` counts into the packet's segments joined).
            let mut slices: Vec<IoSlice> = Vec::with_capacity(MAX_SLICES);
            'packets: for i in p.packet..p.burst.len() {
                let mut skip = if i == p.packet { p.offset } else { 0 };
                for s in 0..p.burst.packets()[i].segments().len() {
                    if slices.len() == MAX_SLICES {
                        break 'packets;
                    }
                    // Host memory only: `transmit` took out packets with other segments.
                    let d = p.burst.data(i, s).unwrap_or_default();
                    if skip >= d.len() {
                        skip -= d.len();
                        continue;
                    }
                    slices.push(IoSlice::new(&d[skip..]));
                    skip = 0;
                }
            }
            if slices.is_empty() {
                self.pending = None;
                return;
            }
            match (&conn.stream).write_vectored(&slices) {
                Ok(0) => {
                    drop(slices);
                    self.view
                        .lane
                        .retire(&conn, "the socket took no bytes".into());
                    return self.flush();
                }
                Ok(mut n) => {
                    drop(slices);
                    conn.moved_bytes();
                    while n > 0 {
                        let len = p.burst.packets()[p.packet].len() - p.offset;
                        if n >= len {
                            n -= len;
                            p.packet += 1;
                            p.offset = 0;
                        } else {
                            p.offset += n;
                            n = 0;
                        }
                    }
                    while p.packet < p.burst.len() && p.burst.packets()[p.packet].is_empty() {
                        p.packet += 1;
                    }
                    if p.packet >= p.burst.len() {
                        self.pending = None;
                        return;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    return;
                }
                Err(e) => {
                    drop(slices);
                    self.view.lane.retire(&conn, format!("send: {e}"));
                    return self.flush();
                }
            }
        }
    }
}

impl TxPort for TcpTx {
    fn transmit(&mut self, mut burst: Burst) -> Option<Burst> {
        if super::drop_unreadable(&mut burst, &self.counters, &self.warn_unreadable) {
            return None;
        }
        if self.pending.is_some() {
            self.flush();
            if self.pending.is_some() {
                return Some(burst);
            }
        }
        if self.view.current().is_none() {
            // Queued for a connection that ended (sends are refused while the link is
            // down): the next connection starts a clean stream.
            self.counters
                .drop_packets(DropReason::Disconnected, burst.len() as u64);
            return None;
        }
        self.pending = Some(Pending {
            burst,
            packet: 0,
            offset: 0,
        });
        self.flush();
        None
    }

    fn idle(&mut self) {
        self.flush();
    }
}
