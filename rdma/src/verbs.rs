//! Reliable-connected queue pairs over real verbs and rdma_cm (sideway, which loads
//! rdma-core at run time, so a binary without RDMA hardware still starts and reports "no
//! RDMA device found").
//!
//! A [`Connection`] owns its protection domain, one completion queue per direction, the
//! queue pair and a registered message area: `recv_depth` receive slots and `send_depth`
//! send slots of `message_size` bytes. Receives are posted before the peer can send (the
//! server posts them before it accepts, the client before it confirms the connection), and
//! every completed receive is reposted at once, so the receive window always covers the
//! peer's send window. A completion with an error status is returned as a
//! [`CompletionError`] naming the work request; nothing is dropped silently.

use crate::cm::{Client, CmAction, CmEvent, RetryPolicy};
use rdma_mummy_sys::{ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr, ibv_query_qp};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::completion::{GenericCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair, QueuePairState, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, GetEventErrorKind, Identifier, PortSpace,
};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for address or route resolution in one connection attempt.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of the verbs layer.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// No RDMA device on this machine (or rdma-core is not installed).
    #[error(
        "no RDMA device found ({0}); install rdma-core and load a driver (a NIC's, or Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE)"
    )]
    NoDevice(String),
    /// An rdma_cm or verbs call failed.
    #[error("{what}: {detail}")]
    Call {
        /// The step that failed.
        what: &'static str,
        /// The library's error.
        detail: String,
    },
    /// rdma_cm reported an unexpected event or a failure.
    #[error("{what}: rdma_cm reported {event} (status {status})")]
    Event {
        /// What we were waiting for.
        what: &'static str,
        /// What came instead.
        event: String,
        /// rdma_cm's status.
        status: i32,
    },
    /// No server accepted within the connect budget.
    #[error("no server accepted within {seconds} s (last attempt: {last})")]
    GaveUp {
        /// The budget.
        seconds: f64,
        /// The last attempt's error.
        last: Box<VerbsError>,
    },
    /// The caller asked to stop (a signal) while waiting.
    #[error("{0}: stopped")]
    Stopped(&'static str),
    /// Nothing happened in time.
    #[error("{0}: timed out")]
    Timeout(&'static str),
    /// A work request completed with an error.
    #[error(transparent)]
    Completion(#[from] CompletionError),
    /// A connection request from a peer the server does not admit (`allowed_peers`); it
    /// was rejected before any memory was registered for it.
    #[error("connection request from {peer} refused: not in allowed_peers")]
    PeerRefused {
        /// The peer's address.
        peer: IpAddr,
    },
}

/// The error and its chain of causes as one line.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn call<E: std::error::Error>(what: &'static str) -> impl FnOnce(E) -> VerbsError {
    move |e| VerbsError::Call {
        what,
        detail: describe(&e),
    }
}

/// The kind inside a sideway error, found through its source chain.
fn cause<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(k) = c.downcast_ref::<E>() {
            return Some(k);
        }
        cur = c.source();
    }
    None
}

/// A work request that completed with an error status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} work request {wr_id} completed with status {status} ({status_text}), vendor error {vendor_err}"
)]
pub struct CompletionError {
    /// `send` or `recv`.
    pub kind: &'static str,
    /// The work request id (our slot number).
    pub wr_id: u64,
    /// ibv_wc_status.
    pub status: u32,
    /// Its name.
    pub status_text: String,
    /// The device's own code.
    pub vendor_err: u32,
}

/// Checks that at least one RDMA device can be listed.
pub fn device_present() -> Result<usize, VerbsError> {
    let list = DeviceList::new().map_err(|e| VerbsError::NoDevice(e.to_string()))?;
    let n = list.iter().count();
    if n == 0 {
        return Err(VerbsError::NoDevice("the device list is empty".into()));
    }
    Ok(n)
}

/// What a peer may do to memory we register, beyond our own local use. Memory is
/// registered with the least of these its use needs: message slots and buffers that are
/// only sent from or received into get [`RemoteAccess::None`], so a peer that learns or
/// guesses their key still cannot READ or WRITE them (its request fails with a remote
/// access error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemoteAccess {
    /// Local access only (SEND/RECV).
    #[default]
    None,
    /// Peers may RDMA WRITE (and WRITE with immediate) into it.
    Write,
    /// Peers may RDMA READ it.
    Read,
    /// Peers may READ and WRITE.
    ReadWrite,
}

impl RemoteAccess {
    fn flags(self) -> AccessFlags {
        let local = AccessFlags::LocalWrite;
        match self {
            RemoteAccess::None => local,
            RemoteAccess::Write => local | AccessFlags::RemoteWrite,
            RemoteAccess::Read => local | AccessFlags::RemoteRead,
            RemoteAccess::ReadWrite => local | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
        }
    }
}

/// Queue and flow-control settings of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionParams {
    /// Bytes per message slot.
    pub message_size: usize,
    /// Send slots (messages in flight from us).
    pub send_depth: u32,
    /// Receive slots; must cover the peer's `send_depth` so its sends never meet an empty
    /// receive queue.
    pub recv_depth: u32,
    /// RNR retry count sent to the peer (7: retry forever).
    pub rnr_retry: u8,
    /// How long the peer waits before resending when we had no receive posted (IB
    /// encoding: 12 = 0.64 ms; rdma_cm leaves 0, which means 655 ms).
    pub min_rnr_timer: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// Bytes of the window the peer may WRITE into and READ from.
    pub window_size: usize,
    /// What the peer may do to the window: nothing by default, so a connection for
    /// SEND/RECV exposes no memory. The window's key leaves the process (in
    /// [`Connection::exchange_keys`]) only when this grants something.
    pub window_access: RemoteAccess,
    /// Post the connection's own receive slots (off when the caller posts receives into
    /// its own registered buffers with [`Connection::post_external_receives`]).
    pub own_receives: bool,
    /// How long connection steps may take.
    pub timeout: Duration,
}

impl Default for ConnectionParams {
    fn default() -> Self {
        Self {
            message_size: 4096,
            send_depth: 64,
            recv_depth: 64,
            rnr_retry: 7,
            min_rnr_timer: 12,
            retry_count: 7,
            window_size: 64 * 1024,
            window_access: RemoteAccess::None,
            own_receives: true,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Retry and RNR settings of a QP, as the device reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSettings {
    /// Minimum RNR NAK timer (IB encoding).
    pub min_rnr_timer: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry_count: u8,
}

/// rdma_cm's status for a reject the server's application chose (`rdma_reject`: the
/// consumer-defined reason); other rejects (no listener yet: invalid service id) mean "try
/// again".
pub const REJECTED_BY_SERVER: i32 = 28;

fn is_server_reject(e: &VerbsError, status: i32) -> bool {
    matches!(e, VerbsError::Event { event, .. } if event == "Rejected")
        && status == REJECTED_BY_SERVER
}

/// Waits for the next event on `channel` (non-blocking channel, polled) up to `deadline`.
fn next_event(
    channel: &Arc<EventChannel>,
    deadline: Instant,
    what: &'static str,
    stop: &dyn Fn() -> bool,
) -> Result<Event, VerbsError> {
    loop {
        match channel.get_cm_event() {
            Ok(ev) => return Ok(ev),
            Err(e)
                if matches!(
                    cause::<GetEventErrorKind>(&e),
                    Some(GetEventErrorKind::NoEvent)
                ) => {}
            Err(e) => return Err(call(what)(e)),
        }
        if stop() {
            return Err(VerbsError::Stopped(what));
        }
        if Instant::now() >= deadline {
            return Err(VerbsError::Timeout(what));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn expect_event(ev: Event, want: EventType, what: &'static str) -> Result<Event, VerbsError> {
    if ev.event_type() == want {
        Ok(ev)
    } else {
        let (event, status) = (format!("{:?}", ev.event_type()), ev.status());
        let _ = ev.ack();
        Err(VerbsError::Event {
            what,
            event,
            status,
        })
    }
}

/// A non-blocking event channel and an rdma_cm identifier on it (TCP port space).
fn new_id() -> Result<(Arc<EventChannel>, Arc<Identifier>), VerbsError> {
    let channel = EventChannel::new().map_err(call("rdma_create_event_channel"))?;
    channel
        .set_nonblocking(true)
        .map_err(call("event channel non-blocking"))?;
    let id = channel
        .create_id(PortSpace::Tcp)
        .map_err(call("rdma_create_id"))?;
    Ok((channel, id))
}

/// A listening rdma_cm endpoint.
pub struct Listener {
    channel: Arc<EventChannel>,
    id: Arc<Identifier>,
    /// Events for other connections that arrived while one was being accepted; handed out
    /// by `next_event` before new ones.
    pending: Pending,
}

type Pending = Arc<std::sync::Mutex<std::collections::VecDeque<ListenerEvent>>>;

impl Listener {
    /// Listens on `addr` (its IP selects the RDMA device).
    pub fn bind(addr: SocketAddr, backlog: i32) -> Result<Self, VerbsError> {
        device_present()?;
        let (channel, id) = new_id()?;
        id.bind_addr(addr).map_err(call("rdma_bind_addr"))?;
        id.listen(backlog).map_err(call("rdma_listen"))?;
        Ok(Self {
            channel,
            id,
            pending: Pending::default(),
        })
    }

    /// The port the listener is bound to.
    pub fn id(&self) -> &Arc<Identifier> {
        &self.id
    }

    /// Waits for the next event on the listener's channel: a connection request, or a
    /// disconnect of an accepted connection (by its [`Connection::key`]).
    pub fn next_event(
        &self,
        timeout: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<ListenerEvent, VerbsError> {
        if let Some(ev) = self.pending.lock().expect("pending events").pop_front() {
            return Ok(ev);
        }
        let deadline = Instant::now() + timeout;
        let ev = next_event(
            &self.channel,
            deadline,
            "waiting for a connection event",
            stop,
        )?;
        let kind = ev.event_type();
        let id = ev.cm_id();
        let status = ev.status();
        let out = ListenerEvent::of(kind, id, status, &self.channel, &self.pending);
        let _ = ev.ack();
        Ok(out)
    }

    /// Waits for the next connection request; the caller decides (the `cm::Server` state
    /// machine) whether to accept or reject it. Any other event first is an error.
    pub fn next_request(
        &self,
        timeout: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Request, VerbsError> {
        match self.next_event(timeout, stop)? {
            ListenerEvent::Request(r) => Ok(r),
            other => Err(VerbsError::Event {
                what: "waiting for a connection request",
                event: other.describe(),
                status: 0,
            }),
        }
    }
}

/// An event on a listener's channel.
pub enum ListenerEvent {
    /// A peer asks to connect.
    Request(Request),
    /// The connection with this key is up.
    Established(u64),
    /// The connection with this key went away.
    Disconnected(u64),
    /// Anything else, described.
    Other(String),
}

impl ListenerEvent {
    fn of(
        kind: EventType,
        id: Option<Arc<Identifier>>,
        status: i32,
        channel: &Arc<EventChannel>,
        pending: &Pending,
    ) -> Self {
        match (kind, id) {
            (EventType::ConnectRequest, Some(id)) => ListenerEvent::Request(Request {
                device_port: id.port(),
                id,
                channel: channel.clone(),
                pending: pending.clone(),
            }),
            (EventType::Disconnected, Some(id)) => ListenerEvent::Disconnected(key_of(&id)),
            (EventType::Established, Some(id)) => ListenerEvent::Established(key_of(&id)),
            (other, _) => ListenerEvent::Other(format!("{other:?} (status {status})")),
        }
    }

    fn describe(&self) -> String {
        match self {
            ListenerEvent::Request(_) => "ConnectRequest".into(),
            ListenerEvent::Established(k) => format!("Established (connection {k:#x})"),
            ListenerEvent::Disconnected(k) => format!("Disconnected (connection {k:#x})"),
            ListenerEvent::Other(what) => what.clone(),
        }
    }
}

fn key_of(id: &Arc<Identifier>) -> u64 {
    Arc::as_ptr(id) as u64
}

/// A connection request, to accept or reject.
pub struct Request {
    id: Arc<Identifier>,
    channel: Arc<EventChannel>,
    pending: Pending,
    /// The device port the request arrived on (for logs only).
    pub device_port: u8,
}

impl Request {
    /// Builds the queue pair, posts every receive, accepts, and waits until the connection
    /// is established.
    pub fn accept(self, params: ConnectionParams) -> Result<Connection, VerbsError> {
        self.accept_if(params, |_| true)
    }

    /// As [`Request::accept`], for a peer `admit` lets in. The peer's address is the
    /// destination GID of the route rdma_cm resolved for the request, which the queue pair
    /// carries once it is ready to receive; so the queue pair is built and moved that far
    /// first, and a refused peer is rejected ([`VerbsError::PeerRefused`]) before any
    /// memory is registered or any receive posted for it. Dropping the request's
    /// identifier sends the peer a reject.
    pub fn accept_if(
        self,
        params: ConnectionParams,
        admit: impl FnOnce(IpAddr) -> bool,
    ) -> Result<Connection, VerbsError> {
        let mut queues = Queues::create(&self.id, &params)?;
        queues.move_to(&self.id, &params, QueuePairState::Init)?;
        queues.move_to(&self.id, &params, QueuePairState::ReadyToReceive)?;
        let peer = queues.peer_address()?;
        if !admit(peer) {
            return Err(VerbsError::PeerRefused { peer });
        }
        let mut conn =
            Connection::with_memory(self.id.clone(), self.channel.clone(), params, queues)?;
        conn.post_all_receives()?;
        conn.move_qp(QueuePairState::ReadyToSend)?;
        let mut p = ConnectionParameter::default();
        p.setup_qp_number(conn.qp.qp_number());
        self.id.accept(p).map_err(call("rdma_accept"))?;
        let deadline = Instant::now() + params.timeout;
        let me = key_of(&self.id);
        loop {
            let ev = next_event(&self.channel, deadline, "accepting", &|| false)?;
            let (kind, id, status) = (ev.event_type(), ev.cm_id(), ev.status());
            match id {
                Some(id) if key_of(&id) == me => {
                    let _ = ev.ack();
                    if kind == EventType::Established {
                        return Ok(conn);
                    }
                    if kind == EventType::Disconnected {
                        // The peer's data arrived and it left before our Established event
                        // (its RTU came late or was implied by traffic): the connection
                        // was made. Hand it over, with its disconnect queued for the
                        // listener's next_event, so no received message is lost.
                        self.pending
                            .lock()
                            .expect("pending events")
                            .push_back(ListenerEvent::Disconnected(me));
                        return Ok(conn);
                    }
                    return Err(VerbsError::Event {
                        what: "accepting",
                        event: format!("{kind:?}"),
                        status,
                    });
                }
                other => {
                    // Another connection's event: keep it for the listener's next_event.
                    let kept = ListenerEvent::of(kind, other, status, &self.channel, &self.pending);
                    let _ = ev.ack();
                    self.pending.lock().expect("pending events").push_back(kept);
                }
            }
        }
    }

    /// Refuses the request. sideway 0.4.3 has no `rdma_reject`; destroying the identifier of
    /// a pending request makes the kernel send the peer a reject (its client sees
    /// `Rejected` and does not retry). The reason is the caller's to log.
    pub fn reject(self) {
        drop(self);
    }
}

/// A connection's protection domain, completion queues and queue pair, before any memory
/// is registered (a server decides on the peer in between).
struct Queues {
    pd: Arc<ProtectionDomain>,
    send_cq: GenericCompletionQueue,
    recv_cq: GenericCompletionQueue,
    qp: GenericQueuePair,
}

impl Queues {
    fn create(id: &Identifier, params: &ConnectionParams) -> Result<Self, VerbsError> {
        let ctx = id.get_device_context().ok_or(VerbsError::Call {
            what: "device context",
            detail: "the connection has no device yet".into(),
        })?;
        let pd = ctx.alloc_pd().map_err(call("ibv_alloc_pd"))?;
        let cq = |depth: u32, what| -> Result<GenericCompletionQueue, VerbsError> {
            Ok(ctx
                .create_cq_builder()
                .setup_cqe(depth)
                .build()
                .map_err(call(what))?
                .into())
        };
        let send_cq = cq(params.send_depth, "ibv_create_cq (send)")?;
        let recv_cq = cq(params.recv_depth, "ibv_create_cq (recv)")?;
        let qp: GenericQueuePair = pd
            .create_qp_builder()
            .setup_max_send_wr(params.send_depth)
            .setup_max_recv_wr(params.recv_depth)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(send_cq.clone())
            .setup_recv_cq(recv_cq.clone())
            .build()
            .map_err(call("ibv_create_qp"))?
            .into();
        Ok(Self {
            pd,
            send_cq,
            recv_cq,
            qp,
        })
    }

    fn move_to(
        &mut self,
        id: &Identifier,
        params: &ConnectionParams,
        state: QueuePairState,
    ) -> Result<(), VerbsError> {
        move_queue_pair(id, &mut self.qp, params, state)
    }

    /// The peer's IP address: the destination GID of the queue pair's address vector (set
    /// from the route rdma_cm resolved, so the queue pair must be ready to receive). RoCE
    /// GIDs of IPv4 addresses are IPv4-mapped; any other GID (InfiniBand's) is returned as
    /// IPv6 and matches no IPv4 prefix.
    fn peer_address(&self) -> Result<IpAddr, VerbsError> {
        // sideway reads the attributes back but keeps the address vector private, so the
        // query goes through its sys crate (the same bindings sideway links against).
        let mut attr = std::mem::MaybeUninit::<ibv_qp_attr>::zeroed();
        let mut init = std::mem::MaybeUninit::<ibv_qp_init_attr>::zeroed();
        // SAFETY: `self.qp` is a live queue pair we own for the whole call; both out
        // parameters point to zeroed structs of the types ibv_query_qp fills (plain C
        // data, valid when zeroed) that outlive the call.
        let rc = unsafe {
            ibv_query_qp(
                self.qp.qp().as_ptr(),
                attr.as_mut_ptr(),
                ibv_qp_attr_mask::IBV_QP_AV.0 as i32,
                init.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(VerbsError::Call {
                what: "ibv_query_qp (address vector)",
                detail: std::io::Error::from_raw_os_error(rc).to_string(),
            });
        }
        // SAFETY: zeroed is a valid ibv_qp_attr, and the call succeeded.
        let attr = unsafe { attr.assume_init() };
        if attr.ah_attr.is_global == 0 {
            return Err(VerbsError::Call {
                what: "peer address",
                detail: "the route has no global routing header, so no IP address".into(),
            });
        }
        // SAFETY: every variant of the ibv_gid union is 16 plain bytes.
        let gid = Ipv6Addr::from(unsafe { attr.ah_attr.grh.dgid.raw });
        Ok(gid.to_ipv4_mapped().map_or(IpAddr::V6(gid), IpAddr::V4))
    }
}

fn move_queue_pair(
    id: &Identifier,
    qp: &mut GenericQueuePair,
    params: &ConnectionParams,
    state: QueuePairState,
) -> Result<(), VerbsError> {
    let mut attr = id.get_qp_attr(state).map_err(call("rdma_init_qp_attr"))?;
    if state == QueuePairState::ReadyToReceive {
        attr.setup_min_rnr_timer(params.min_rnr_timer);
    }
    if state == QueuePairState::ReadyToSend {
        attr.setup_retry_cnt(params.retry_count)
            .setup_rnr_retry(params.rnr_retry);
    }
    qp.modify(&attr).map_err(call("ibv_modify_qp"))
}

/// One reliable connection with its own message area.
pub struct Connection {
    id: Arc<Identifier>,
    channel: Arc<EventChannel>,
    _pd: Arc<ProtectionDomain>,
    send_cq: GenericCompletionQueue,
    recv_cq: GenericCompletionQueue,
    qp: GenericQueuePair,
    /// The message slots, local access only.
    mr: Arc<MemoryRegion>,
    /// The window, with the access `params.window_access` grants (none: not registered).
    window_mr: Option<Arc<MemoryRegion>>,
    area: Box<[u8]>,
    params: ConnectionParams,
    free_send: Vec<u32>,
    /// What each send slot is doing (valid while the slot is in flight).
    send_ops: Vec<SendOp>,
    /// Receives posted and not completed.
    posted_recv: u32,
    /// Sends of caller buffers in flight.
    external_sends: usize,
    /// The peer's window: address, key, length (after [`Connection::exchange_keys`]).
    remote: Option<RemoteWindow>,
}

/// The peer's RDMA window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteWindow {
    /// Its address in the peer's memory.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length.
    pub len: u64,
}

impl RemoteWindow {
    /// Bytes of the key-exchange message: magic, address, key, length.
    pub const MESSAGE_LEN: usize = 24;

    /// The key-exchange message that announces this window.
    pub fn encode(&self) -> [u8; Self::MESSAGE_LEN] {
        let mut m = [0u8; Self::MESSAGE_LEN];
        m[..4].copy_from_slice(&KEY_MAGIC);
        m[4..12].copy_from_slice(&self.addr.to_le_bytes());
        m[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        m[16..24].copy_from_slice(&self.len.to_le_bytes());
        m
    }

    /// The window a peer's key-exchange message announces, or `None` for anything else
    /// (any length, any bytes: the message comes from the network).
    pub fn decode(m: &[u8]) -> Option<Self> {
        let m: &[u8; Self::MESSAGE_LEN] = m.try_into().ok()?;
        if m[..4] != KEY_MAGIC {
            return None;
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&m[r]);
            u64::from_le_bytes(b)
        };
        Some(Self {
            addr: word(4..12),
            rkey: word(12..16) as u32,
            len: word(16..24),
        })
    }
}

/// The operation a send slot carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendOp {
    Send,
    Write,
    Read { len: u32 },
}

/// One completed operation, as `poll_completions` reports it.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion<'a> {
    /// A message arrived.
    Received(&'a [u8]),
    /// The peer wrote `len` bytes at `offset` of our window and sent `imm` with it.
    WrittenWithImm {
        /// Immediate value.
        imm: u32,
        /// Bytes written.
        len: u32,
    },
    /// One of our SENDs or WRITEs completed.
    Sent,
    /// A receive into a caller buffer completed with `len` bytes.
    ReceivedExternal {
        /// The buffer's token.
        token: u64,
        /// Bytes received.
        len: u32,
    },
    /// A SEND of a caller buffer completed.
    SentExternal {
        /// The buffer's token.
        token: u64,
    },
    /// One of our READs completed; `data` is what was read.
    ReadDone {
        /// The token `read` returned.
        token: u32,
        /// The bytes read.
        data: &'a [u8],
    },
}

/// `IBV_WC_WR_FLUSH_ERR`: the request was flushed because its QP had failed.
const FLUSHED: u32 = 5;

/// Work request ids of caller buffers carry this bit (own slots never reach it).
const EXTERNAL: u64 = 1 << 63;

/// A registration of caller memory with a connection's protection domain.
pub struct Registration {
    mr: Arc<MemoryRegion>,
}

impl Registration {
    /// Local key for work requests.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// Remote key for the peer's READ/WRITE.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
}

/// A caller-owned buffer for a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalBuffer {
    /// Local key of its registration.
    pub lkey: u32,
    /// Address.
    pub addr: u64,
    /// Bytes (to send, or room to receive into).
    pub len: u32,
    /// Reported back on completion (below 2^63).
    pub token: u64,
}

/// Magic of the key-exchange message.
const KEY_MAGIC: [u8; 4] = *b"DPKX";

// SAFETY: the connection is used by one thread at a time (its worker); verbs objects may
// be used from any thread.
unsafe impl Send for Connection {}

/// What one `poll` saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Messages received (and handed to the callback).
    pub received: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Sends completed.
    pub sent: u64,
}

impl Connection {
    /// Connects from `local` (its IP selects the device; port 0) to `remote`.
    pub fn connect(
        local: SocketAddr,
        remote: SocketAddr,
        params: ConnectionParams,
    ) -> Result<Self, VerbsError> {
        Self::connect_with_retry(local, remote, params, RetryPolicy::default())
    }

    /// As [`Connection::connect`], with the attempts and back-off of `policy`: failed or
    /// timed-out resolution and connection attempts are retried from the start; a reject
    /// is the server's answer and is not.
    pub fn connect_with_retry(
        local: SocketAddr,
        remote: SocketAddr,
        params: ConnectionParams,
        policy: RetryPolicy,
    ) -> Result<Self, VerbsError> {
        device_present()?;
        let mut client = Client::new(0, 0, policy);
        loop {
            let err = match Self::connect_once(local, remote, params, &mut client) {
                Ok(conn) => return Ok(conn),
                Err(e) => e,
            };
            let event = match &err {
                VerbsError::Event { event, status, .. } if event == "Rejected" => {
                    CmEvent::Rejected {
                        conn: 0,
                        status: *status,
                    }
                }
                other => CmEvent::Failed {
                    conn: 0,
                    what: other.to_string(),
                },
            };
            match client.on_event(&event).first() {
                Some(CmAction::Retry { after, attempt, .. }) => {
                    tracing::warn!(
                        "connecting {local} -> {remote}: {err}; attempt {attempt} in {after:?}"
                    );
                    std::thread::sleep(*after);
                }
                _ => return Err(err),
            }
        }
    }

    /// Connects, retrying refused or unreachable attempts every `period` until `budget`
    /// ends or `stop` says so, so that the start order of server and client does not
    /// matter. A reject the server's application chose ([`REJECTED_BY_SERVER`]) is final
    /// and comes back at once, as do a missing device and a stop ([`VerbsError::Stopped`]).
    pub fn connect_within(
        local: SocketAddr,
        remote: SocketAddr,
        params: ConnectionParams,
        period: Duration,
        budget: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Self, VerbsError> {
        let started = Instant::now();
        let once = RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        };
        loop {
            let last = match Self::connect_with_retry(local, remote, params, once) {
                Ok(conn) => return Ok(conn),
                Err(e @ VerbsError::Event { status, .. }) if is_server_reject(&e, status) => {
                    return Err(e);
                }
                Err(e @ VerbsError::NoDevice(_)) => return Err(e),
                Err(e) => e,
            };
            let retry_at = Instant::now() + period;
            while Instant::now() < retry_at {
                if stop() {
                    return Err(VerbsError::Stopped("connecting"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if started.elapsed() >= budget {
                return Err(VerbsError::GaveUp {
                    seconds: budget.as_secs_f64(),
                    last: Box::new(last),
                });
            }
            tracing::info!("connecting {local} -> {remote}: {last}; trying again");
        }
    }

    fn connect_once(
        local: SocketAddr,
        remote: SocketAddr,
        params: ConnectionParams,
        client: &mut Client,
    ) -> Result<Self, VerbsError> {
        let (channel, id) = new_id()?;
        // Resolution gets a short timeout per attempt: a lost first ARP exchange is better
        // retried than waited out.
        let ms = params.timeout.min(RESOLVE_TIMEOUT);
        let deadline = Instant::now() + ms;
        // Bind the source first and resolve without one: sideway 0.4.3's resolve_addr passes
        // a pointer to a temporary that is gone by the time of the call when given a source
        // address (EINVAL).
        id.bind_addr(local)
            .map_err(call("rdma_bind_addr (source)"))?;
        id.resolve_addr(None, remote, ms)
            .map_err(call("rdma_resolve_addr"))?;
        let ev = next_event(&channel, deadline, "resolving the address", &|| false)?;
        expect_event(ev, EventType::AddressResolved, "resolving the address")?
            .ack()
            .map_err(call("ack"))?;
        client.on_event(&CmEvent::AddressResolved(0));
        id.resolve_route(ms).map_err(call("rdma_resolve_route"))?;
        let ev = next_event(&channel, deadline, "resolving the route", &|| false)?;
        expect_event(ev, EventType::RouteResolved, "resolving the route")?
            .ack()
            .map_err(call("ack"))?;
        client.on_event(&CmEvent::RouteResolved(0));
        let deadline = Instant::now() + params.timeout;
        let mut conn = Self::create(id.clone(), channel.clone(), params)?;
        let mut p = ConnectionParameter::default();
        p.setup_qp_number(conn.qp.qp_number());
        id.connect(p).map_err(call("rdma_connect"))?;
        let ev = next_event(&channel, deadline, "connecting", &|| false)?;
        let ev = expect_event(ev, EventType::ConnectResponse, "connecting")?;
        let _ = ev.ack();
        conn.move_qp(QueuePairState::Init)?;
        // Receives go up before the server learns we are ready.
        conn.post_all_receives()?;
        conn.move_qp(QueuePairState::ReadyToReceive)?;
        conn.move_qp(QueuePairState::ReadyToSend)?;
        id.establish().map_err(call("rdma_establish"))?;
        client.on_event(&CmEvent::Established(0));
        Ok(conn)
    }

    fn create(
        id: Arc<Identifier>,
        channel: Arc<EventChannel>,
        params: ConnectionParams,
    ) -> Result<Self, VerbsError> {
        let queues = Queues::create(&id, &params)?;
        Self::with_memory(id, channel, params, queues)
    }

    /// Registers the connection's memory on `queues`' protection domain.
    fn with_memory(
        id: Arc<Identifier>,
        channel: Arc<EventChannel>,
        params: ConnectionParams,
        queues: Queues,
    ) -> Result<Self, VerbsError> {
        let Queues {
            pd,
            send_cq,
            recv_cq,
            qp,
        } = queues;
        let slots = (params.recv_depth + params.send_depth) as usize;
        // Receive slots, send slots, then the window the peer may write and read.
        let area = vec![0u8; slots * params.message_size + params.window_size].into_boxed_slice();
        let window_at = slots * params.message_size;
        // SAFETY: `area` lives as long as the connection, and both MRs are deregistered
        // before it is freed (fields drop in declaration order; `mr` and `window_mr` come
        // before `area`). The slots are registered for local access only, the window with
        // what the connection's mode grants the peer.
        let mr = unsafe {
            pd.reg_mr(
                area.as_ptr() as usize,
                window_at,
                RemoteAccess::None.flags(),
            )
        }
        .map_err(call("ibv_reg_mr"))?;
        let window_mr = match params.window_access {
            RemoteAccess::None => None,
            _ if params.window_size == 0 => None,
            access => Some(
                // SAFETY: as above; the window is the tail of `area`.
                unsafe {
                    pd.reg_mr(
                        area.as_ptr() as usize + window_at,
                        params.window_size,
                        access.flags(),
                    )
                }
                .map_err(call("ibv_reg_mr (window)"))?,
            ),
        };
        Ok(Self {
            id,
            channel,
            _pd: pd,
            send_cq,
            recv_cq,
            qp,
            mr,
            window_mr,
            area,
            params,
            free_send: (0..params.send_depth).rev().collect(),
            send_ops: vec![SendOp::Send; params.send_depth as usize],
            posted_recv: 0,
            external_sends: 0,
            remote: None,
        })
    }

    fn move_qp(&mut self, state: QueuePairState) -> Result<(), VerbsError> {
        move_queue_pair(&self.id, &mut self.qp, &self.params, state)
    }

    fn slot_addr(&self, slot: u32) -> u64 {
        self.area.as_ptr() as u64 + slot as u64 * self.params.message_size as u64
    }

    fn post_recv_slots(&mut self, slots: &[u32]) -> Result<(), VerbsError> {
        if slots.is_empty() {
            return Ok(());
        }
        let lkey = self.mr.lkey();
        let addrs: Vec<u64> = slots.iter().map(|&s| self.slot_addr(s)).collect();
        let len = self.params.message_size as u32;
        let mut guard = self.qp.start_post_recv();
        for (&slot, &addr) in slots.iter().zip(&addrs) {
            let wr = guard.construct_wr(slot as u64);
            // SAFETY: the slot lies inside the registered area, which outlives the request.
            unsafe { wr.setup_sge(lkey, addr, len) };
        }
        guard.post().map_err(call("ibv_post_recv"))?;
        self.posted_recv += slots.len() as u32;
        Ok(())
    }

    fn post_all_receives(&mut self) -> Result<(), VerbsError> {
        if !self.params.own_receives {
            return Ok(());
        }
        let slots: Vec<u32> = (0..self.params.recv_depth).collect();
        self.post_recv_slots(&slots)
    }

    /// Registers `len` bytes at `addr` (host memory, or GPU memory where the NIC and
    /// driver allow it) with this connection's protection domain, with the remote access
    /// `access` grants (buffers for SEND/RECV: [`RemoteAccess::None`]).
    ///
    /// # Safety
    /// The memory must stay mapped for as long as the registration and any work request
    /// using it live.
    pub unsafe fn register(
        &self,
        addr: u64,
        len: usize,
        access: RemoteAccess,
    ) -> Result<Registration, VerbsError> {
        // SAFETY: the caller keeps the memory mapped (see above).
        let mr = unsafe { self._pd.reg_mr(addr as usize, len, access.flags()) }
            .map_err(call("ibv_reg_mr"))?;
        Ok(Registration { mr })
    }

    /// Registers `len` bytes of a dma-buf (GPU memory exported with
    /// `gpudirect::DeviceBuffer::export_dmabuf`), starting `offset` bytes into it, reachable
    /// in work requests at address `iova` (the device pointer), with the remote access
    /// `access` grants. Needs a NIC and driver with
    /// dma-buf support (Soft-RoCE has none); the descriptor may be closed afterwards.
    ///
    /// # Safety
    /// The exported memory must stay allocated for as long as the registration and any
    /// work request using it live.
    pub unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: RemoteAccess,
    ) -> Result<Registration, VerbsError> {
        // SAFETY: the caller keeps the exported memory allocated (see above).
        let mr = unsafe {
            self._pd
                .reg_dmabuf_mr(offset, len, iova, fd, access.flags())
        }
        .map_err(call("ibv_reg_dmabuf_mr"))?;
        Ok(Registration { mr })
    }

    /// Posts receives into caller-owned registered buffers; each completes as
    /// `Completion::ReceivedExternal` with its token.
    pub fn post_external_receives(&mut self, bufs: &[ExternalBuffer]) -> Result<(), VerbsError> {
        if bufs.is_empty() {
            return Ok(());
        }
        let mut guard = self.qp.start_post_recv();
        for b in bufs {
            let wr = guard.construct_wr(EXTERNAL | b.token);
            // SAFETY: the caller registered the buffer and keeps it until its completion.
            unsafe { wr.setup_sge(b.lkey, b.addr, b.len) };
        }
        guard.post().map_err(call("ibv_post_recv"))?;
        self.posted_recv += bufs.len() as u32;
        Ok(())
    }

    /// SENDs caller-owned registered buffers, one message each, all or none: returns false
    /// when the send queue lacks room for all of them. Each completes as
    /// `Completion::SentExternal` with its token, in order.
    pub fn send_external(&mut self, bufs: &[ExternalBuffer]) -> Result<bool, VerbsError> {
        if bufs.len() > self.send_room() {
            return Ok(false);
        }
        if bufs.is_empty() {
            return Ok(true);
        }
        let mut guard = self.qp.start_post_send();
        for b in bufs {
            let wr = guard.construct_wr(EXTERNAL | b.token, WorkRequestFlags::Signaled);
            // SAFETY: the caller registered the buffer and keeps it until its completion.
            unsafe { wr.setup_send().setup_sge(b.lkey, b.addr, b.len) };
        }
        guard.post().map_err(call("ibv_post_send"))?;
        self.external_sends += bufs.len();
        Ok(true)
    }

    /// Receives currently posted.
    pub fn posted_receives(&self) -> u32 {
        self.posted_recv
    }

    /// Sends that can be posted now.
    pub fn send_room(&self) -> usize {
        self.free_send.len().saturating_sub(self.external_sends)
    }

    /// Copies `data` into a send slot and posts a SEND. Returns false (nothing posted) when
    /// every send slot is in flight.
    pub fn send(&mut self, data: &[u8]) -> Result<bool, VerbsError> {
        self.post_from_slot(data, SendOp::Send, None, None)
    }

    /// Posts a SEND of `len` bytes that `fill` writes straight into a send slot (no copy).
    /// Returns false (nothing posted, `fill` not called) when every send slot is in flight.
    pub fn send_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool, VerbsError> {
        self.post_filled(len, fill, SendOp::Send, None, None)
    }

    /// Copies `data` into a send slot and WRITEs it at `offset` of the peer's window, with
    /// an immediate value when `imm` is set (the peer sees a `WrittenWithImm`). Returns
    /// false when every send slot is in flight.
    pub fn write(
        &mut self,
        data: &[u8],
        offset: u64,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        let remote = self.remote_range(offset, data.len())?;
        self.post_from_slot(data, SendOp::Write, Some(remote), imm)
    }

    /// READs `len` bytes at `offset` of the peer's window into a send slot. Returns a token
    /// that the matching `ReadDone` carries, or `None` when every send slot is in flight.
    pub fn read(&mut self, offset: u64, len: usize) -> Result<Option<u32>, VerbsError> {
        self.check_message_len(len)?;
        let (rkey, raddr) = self.remote_range(offset, len)?;
        let Some(slot) = self.free_send.pop() else {
            return Ok(None);
        };
        self.send_ops[slot as usize] = SendOp::Read { len: len as u32 };
        let addr = self.slot_addr(self.params.recv_depth + slot);
        let lkey = self.mr.lkey();
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(slot as u64, WorkRequestFlags::Signaled);
        // SAFETY: the slot lies inside the registered area and is not touched until the
        // READ completes.
        unsafe { wr.setup_read(rkey, raddr).setup_sge(lkey, addr, len as u32) };
        if let Err(e) = guard.post() {
            self.free_send.push(slot);
            return Err(call("ibv_post_send (READ)")(e));
        }
        Ok(Some(slot))
    }

    fn check_message_len(&self, len: usize) -> Result<(), VerbsError> {
        if len > self.params.message_size {
            return Err(VerbsError::Call {
                what: "posting a message",
                detail: format!(
                    "{len} bytes exceed the connection's message_size {}",
                    self.params.message_size
                ),
            });
        }
        Ok(())
    }

    fn remote_range(&self, offset: u64, len: usize) -> Result<(u32, u64), VerbsError> {
        let r = self.remote.ok_or(VerbsError::Call {
            what: "RDMA READ/WRITE",
            detail: "the peer's window is unknown: call exchange_keys first".into(),
        })?;
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > r.len) {
            return Err(VerbsError::Call {
                what: "RDMA READ/WRITE",
                detail: format!(
                    "{len} bytes at offset {offset} exceed the peer's {}-byte window",
                    r.len
                ),
            });
        }
        Ok((r.rkey, r.addr.wrapping_add(offset)))
    }

    fn post_from_slot(
        &mut self,
        data: &[u8],
        op: SendOp,
        remote: Option<(u32, u64)>,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        self.post_filled(
            data.len(),
            |slot| slot.copy_from_slice(data),
            op,
            remote,
            imm,
        )
    }

    /// Posts `len` bytes of a send slot that `fill` writes in place.
    fn post_filled(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        op: SendOp,
        remote: Option<(u32, u64)>,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        self.check_message_len(len)?;
        let Some(slot) = self.free_send.pop() else {
            return Ok(false);
        };
        self.send_ops[slot as usize] = op;
        let index = self.params.recv_depth + slot;
        let addr = self.slot_addr(index);
        let off = index as usize * self.params.message_size;
        fill(&mut self.area[off..off + len]);
        let lkey = self.mr.lkey();
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(slot as u64, WorkRequestFlags::Signaled);
        let len = len as u32;
        // SAFETY: the slot lies inside the registered area and stays untouched until its
        // completion returns it to `free_send`. Immediate values go on the wire in network
        // byte order.
        unsafe {
            match (remote, imm) {
                (Some((rkey, raddr)), Some(v)) => wr
                    .setup_write_imm(rkey, raddr, v.to_be())
                    .setup_sge(lkey, addr, len),
                (Some((rkey, raddr)), None) => {
                    wr.setup_write(rkey, raddr).setup_sge(lkey, addr, len)
                }
                (None, _) => wr.setup_send().setup_sge(lkey, addr, len),
            }
        };
        if let Err(e) = guard.post() {
            self.free_send.push(slot);
            return Err(call("ibv_post_send")(e));
        }
        Ok(true)
    }

    /// Tells the peer where our window is and learns where its window is: one SEND each
    /// way, before any other traffic. READ and WRITE need it. A side whose
    /// `window_access` grants nothing sends an empty window (no key, no address), so the
    /// peer's READs and WRITEs are refused before they are posted.
    pub fn exchange_keys(&mut self, timeout: Duration) -> Result<RemoteWindow, VerbsError> {
        let ours = self.remote_key().unwrap_or(RemoteWindow {
            addr: 0,
            rkey: 0,
            len: 0,
        });
        let hello = ours.encode();
        let deadline = Instant::now() + timeout;
        while !self.send(&hello)? {
            self.poll_completions(|_| {})?;
        }
        let mut got = None;
        let mut unexpected = false;
        while got.is_none() {
            if Instant::now() >= deadline {
                return Err(VerbsError::Timeout("waiting for the peer's window key"));
            }
            self.poll_completions(|c| {
                if let Completion::Received(m) = c {
                    match RemoteWindow::decode(m) {
                        Some(w) => got = Some(w),
                        None => unexpected = true,
                    }
                }
            })?;
            if unexpected {
                return Err(VerbsError::Call {
                    what: "key exchange",
                    detail: "the peer sent data before its window key".into(),
                });
            }
        }
        self.remote = got;
        Ok(got.expect("set above"))
    }

    /// Our window's contents (what the peer WRITEs and READs).
    pub fn window(&self) -> &[u8] {
        &self.area[self.window_offset()..]
    }

    /// Our window, writable (what the peer will READ).
    pub fn window_mut(&mut self) -> &mut [u8] {
        let off = self.window_offset();
        &mut self.area[off..]
    }

    fn window_offset(&self) -> usize {
        (self.params.recv_depth + self.params.send_depth) as usize * self.params.message_size
    }

    /// Polls both completion queues and reports each completion to `on`: received
    /// messages (their slots are reposted at once), WRITE-with-immediate arrivals,
    /// completed sends and writes, and READ results. The first completion with an error
    /// status is returned as an error.
    pub fn poll_completions(
        &mut self,
        mut on: impl FnMut(Completion<'_>),
    ) -> Result<Polled, VerbsError> {
        const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
        let mut out = Polled::default();
        let mut repost = Vec::new();
        let mut failed: Option<CompletionError> = None;
        // The cause, not its echo: when a QP fails, every request still posted completes
        // as "flushed"; the failed one's own status is what is reported.
        let mut note = |e: CompletionError| {
            if failed
                .as_ref()
                .is_none_or(|f| f.status == FLUSHED && e.status != FLUSHED)
            {
                failed = Some(e);
            }
        };
        if let Ok(poller) = self.recv_cq.start_poll() {
            for wc in poller {
                let slot = wc.wr_id() as u32;
                self.posted_recv -= 1;
                if wc.status() != WorkCompletionStatus::Success as u32 {
                    note(completion_error(
                        "recv",
                        wc.wr_id(),
                        wc.status(),
                        wc.vendor_err(),
                    ));
                    continue;
                }
                let len = wc.byte_len();
                if wc.wr_id() & EXTERNAL != 0 {
                    on(Completion::ReceivedExternal {
                        token: wc.wr_id() & !EXTERNAL,
                        len,
                    });
                    out.received += 1;
                    out.received_bytes += len as u64;
                    continue;
                }
                if wc.opcode() == IBV_WC_RECV_RDMA_WITH_IMM {
                    on(Completion::WrittenWithImm {
                        imm: u32::from_be(wc.imm_data()),
                        len,
                    });
                } else {
                    let off = slot as usize * self.params.message_size;
                    on(Completion::Received(&self.area[off..off + len as usize]));
                    out.received += 1;
                    out.received_bytes += len as u64;
                }
                repost.push(slot);
            }
        }
        if let Ok(poller) = self.send_cq.start_poll() {
            for wc in poller {
                if wc.wr_id() & EXTERNAL != 0 {
                    self.external_sends -= 1;
                    if wc.status() != WorkCompletionStatus::Success as u32 {
                        note(completion_error(
                            "send",
                            wc.wr_id() & !EXTERNAL,
                            wc.status(),
                            wc.vendor_err(),
                        ));
                    } else {
                        on(Completion::SentExternal {
                            token: wc.wr_id() & !EXTERNAL,
                        });
                        out.sent += 1;
                    }
                    continue;
                }
                let slot = wc.wr_id() as u32;
                if wc.status() != WorkCompletionStatus::Success as u32 {
                    note(completion_error(
                        "send",
                        wc.wr_id(),
                        wc.status(),
                        wc.vendor_err(),
                    ));
                } else {
                    match self.send_ops[slot as usize] {
                        SendOp::Read { len } => {
                            let off =
                                (self.params.recv_depth + slot) as usize * self.params.message_size;
                            on(Completion::ReadDone {
                                token: slot,
                                data: &self.area[off..off + len as usize],
                            });
                        }
                        SendOp::Send | SendOp::Write => on(Completion::Sent),
                    }
                    out.sent += 1;
                }
                self.free_send.push(slot);
            }
        }
        if failed.is_none() {
            self.post_recv_slots(&repost)?;
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    /// As [`Connection::poll_completions`], handing only received messages to `on_message`.
    pub fn poll(&mut self, mut on_message: impl FnMut(&[u8])) -> Result<Polled, VerbsError> {
        self.poll_completions(|c| {
            if let Completion::Received(m) = c {
                on_message(m)
            }
        })
    }

    /// Identifies the connection in [`ListenerEvent`]s.
    pub fn key(&self) -> u64 {
        key_of(&self.id)
    }

    /// Starts an orderly disconnect.
    pub fn disconnect(&self) -> Result<(), VerbsError> {
        self.id.disconnect().map_err(call("rdma_disconnect"))
    }

    /// True when rdma_cm has reported a disconnect (checks the event channel once).
    pub fn peer_disconnected(&self) -> bool {
        match self.channel.get_cm_event() {
            Ok(ev) => {
                let gone = matches!(
                    ev.event_type(),
                    EventType::Disconnected | EventType::DeviceRemoval
                );
                let _ = ev.ack();
                gone
            }
            Err(_) => false,
        }
    }

    /// The retry and RNR settings the QP runs with, read back from the device.
    pub fn qp_settings(&self) -> Result<QpSettings, VerbsError> {
        use sideway::ibverbs::queue_pair::QueuePairAttributeMask as M;
        let (attr, _) = self
            .qp
            .query(M::MinResponderNotReadyTimer | M::ResponderNotReadyRetryCount | M::RetryCount)
            .map_err(call("ibv_query_qp"))?;
        Ok(QpSettings {
            min_rnr_timer: attr.min_rnr_timer(),
            rnr_retry: attr.rnr_retry(),
            retry_count: attr.retry_cnt(),
        })
    }

    /// Our window as the peer addresses it (for its READ/WRITE), or `None` when
    /// `window_access` grants the peer nothing.
    pub fn remote_key(&self) -> Option<RemoteWindow> {
        let mr = self.window_mr.as_ref()?;
        Some(RemoteWindow {
            addr: self.area.as_ptr() as u64 + self.window_offset() as u64,
            rkey: mr.rkey(),
            len: self.params.window_size as u64,
        })
    }

    /// Where the message slots are and their key, as a peer would address them. They are
    /// registered for local access only, so a peer's READ or WRITE there fails with a
    /// remote access error; this exists so tests can show exactly that.
    pub fn message_slots_key(&self) -> RemoteWindow {
        RemoteWindow {
            addr: self.area.as_ptr() as u64,
            rkey: self.mr.rkey(),
            len: self.window_offset() as u64,
        }
    }

    /// Uses `window` as the peer's window without [`Connection::exchange_keys`] (keys
    /// learned some other way). The peer's registration decides what succeeds: outside
    /// what it granted, the operation completes with a remote access error.
    pub fn assume_remote_window(&mut self, window: RemoteWindow) {
        self.remote = Some(window);
    }
}

fn completion_error(
    kind: &'static str,
    wr_id: u64,
    status: u32,
    vendor_err: u32,
) -> CompletionError {
    CompletionError {
        kind,
        wr_id,
        status,
        status_text: status_name(status).to_owned(),
        vendor_err,
    }
}

/// The name of an ibv_wc_status value.
pub fn status_name(status: u32) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed",
        6 => "memory window bind error",
        7 => "bad response",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        _ => "other error",
    }
}

#[cfg(test)]
mod key_message_tests {
    use super::RemoteWindow;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever a peer sends, decoding neither panics nor accepts a message that is
        /// not exactly a key-exchange message.
        #[test]
        fn any_bytes_decode_without_panic(
            magic in any::<bool>(),
            rest in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            // Half of them start like a key message, so lengths around 24 are exercised.
            let mut m = if magic { b"DPKX".to_vec() } else { Vec::new() };
            m.extend_from_slice(&rest);
            let w = RemoteWindow::decode(&m);
            prop_assert_eq!(w.is_some(), m.len() == RemoteWindow::MESSAGE_LEN && m[..4] == *b"DPKX");
        }

        /// What we send is what the peer reads.
        #[test]
        fn windows_round_trip(addr in any::<u64>(), rkey in any::<u32>(), len in any::<u64>()) {
            let w = RemoteWindow { addr, rkey, len };
            prop_assert_eq!(RemoteWindow::decode(&w.encode()), Some(w));
        }
    }
}
