//! The server side: a `Listener` on an address, its events, and a connection `Request` to
//! accept (building the queue pair, deciding on the peer, registering memory) or reject.

use super::*;

/// A listening rdma_cm endpoint.
pub struct Listener {
    pub(super) channel: Arc<EventChannel>,
    pub(super) id: Arc<Identifier>,
    /// Events for other connections that arrived while one was being accepted; handed out
    /// by `next_event` before new ones.
    pub(super) pending: Pending,
}

pub(super) type Pending = Arc<std::sync::Mutex<std::collections::VecDeque<ListenerEvent>>>;

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
    pub(super) fn of(
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

    pub(super) fn describe(&self) -> String {
        match self {
            ListenerEvent::Request(_) => "ConnectRequest".into(),
            ListenerEvent::Established(k) => format!("Established (connection {k:#x})"),
            ListenerEvent::Disconnected(k) => format!("Disconnected (connection {k:#x})"),
            ListenerEvent::Other(what) => what.clone(),
        }
    }
}

/// A connection request, to accept or reject.
pub struct Request {
    pub(super) id: Arc<Identifier>,
    pub(super) channel: Arc<EventChannel>,
    pub(super) pending: Pending,
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
pub(super) struct Queues {
    pub(super) pd: Arc<ProtectionDomain>,
    pub(super) send_cq: GenericCompletionQueue,
    pub(super) recv_cq: GenericCompletionQueue,
    pub(super) qp: GenericQueuePair,
}

impl Queues {
    pub(super) fn create(id: &Identifier, params: &ConnectionParams) -> Result<Self, VerbsError> {
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

    pub(super) fn move_to(
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
    pub(super) fn peer_address(&self) -> Result<IpAddr, VerbsError> {
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

pub(super) fn move_queue_pair(
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
