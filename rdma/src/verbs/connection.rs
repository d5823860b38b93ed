//! `Connection`: a reliable-connected queue pair with its message area, made by connecting
//! (with retries) or by accepting a request.

use super::*;

/// One reliable connection with its own message area.
pub struct Connection {
    pub(super) id: Arc<Identifier>,
    pub(super) channel: Arc<EventChannel>,
    pub(super) _pd: Arc<ProtectionDomain>,
    pub(super) send_cq: GenericCompletionQueue,
    pub(super) recv_cq: GenericCompletionQueue,
    pub(super) qp: GenericQueuePair,
    /// The message slots, local access only.
    pub(super) mr: Arc<MemoryRegion>,
    /// The window, with the access `params.window_access` grants (none: not registered).
    pub(super) window_mr: Option<Arc<MemoryRegion>>,
    pub(super) area: Box<[u8]>,
    pub(super) params: ConnectionParams,
    pub(super) free_send: Vec<u32>,
    /// What each send slot is doing (valid while the slot is in flight).
    pub(super) send_ops: Vec<SendOp>,
    /// Receives posted and not completed.
    pub(super) posted_recv: u32,
    /// Sends of caller buffers in flight.
    pub(super) external_sends: usize,
    /// The peer's window: address, key, length (after [`Connection::exchange_keys`]).
    pub(super) remote: Option<RemoteWindow>,
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

    pub(super) fn connect_once(
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

    pub(super) fn create(
        id: Arc<Identifier>,
        channel: Arc<EventChannel>,
        params: ConnectionParams,
    ) -> Result<Self, VerbsError> {
        let queues = Queues::create(&id, &params)?;
        Self::with_memory(id, channel, params, queues)
    }

    /// Registers the connection's memory on `queues`' protection domain.
    pub(super) fn with_memory(
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

    pub(super) fn move_qp(&mut self, state: QueuePairState) -> Result<(), VerbsError> {
        move_queue_pair(&self.id, &mut self.qp, &self.params, state)
    }

    pub(super) fn slot_addr(&self, slot: u32) -> u64 {
        self.area.as_ptr() as u64 + slot as u64 * self.params.message_size as u64
    }

    pub(super) fn post_recv_slots(&mut self, slots: &[u32]) -> Result<(), VerbsError> {
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

    pub(super) fn post_all_receives(&mut self) -> Result<(), VerbsError> {
        if !self.params.own_receives {
            return Ok(());
        }
        let slots: Vec<u32> = (0..self.params.recv_depth).collect();
        self.post_recv_slots(&slots)
    }
}
