//! RDMA from a configuration: `stream_type: socket` interfaces with `roce://` endpoints.
//!
//! [`RdmaPlane::start`] allocates the memory regions, listens on every server interface and
//! starts the connection-manager thread, which accepts requests (by the rules of
//! `rdma::cm::Server`) and stops a connection's worker when rdma_cm reports its
//! disconnect, releasing its slot. Every connection gets a worker thread pinned to its
//! interface's queue core: it posts the application's bursts as SENDs, polls both
//! completion queues and hands received messages to the application as bursts.
//! [`RdmaPlane::accept`] and [`RdmaPlane::connect`] return the application's end, an
//! [`RdmaStream`] with `send(burst)` and `poll()`.
//!
//! Which interface a request belongs to is decided from the address it arrived on and the
//! interface's index in the configuration, never from the device's port number.

#![forbid(unsafe_code)]

use crate::burst::Burst;
use crate::config::{Config, RoceConfig, SocketMode};
use crate::memory::{MemoryError, RegionSet};
use crate::plan::rdma::SlotPlan;
use crate::plan::{Plan, PlanError};
use crate::rdma_conn::{BurstConnection, SendError};
use rdma::cm::{CmAction, CmEvent, ConfiguredInterface, Server};
use rdma::verbs::{Connection, ConnectionParams, Listener, ListenerEvent, QpSettings, VerbsError};
use rdma::workers::{Worker, WorkerTable};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bursts queued between the application and a connection's worker, each way.
const STREAM_QUEUE: usize = 64;
/// Idle worker loops between checks of a client connection's own event channel.
const EVENT_CHECK_EVERY: u32 = 1024;
/// Connections per server at most (the reference's limit).
const MAX_CONNECTIONS: usize = 128;
/// How long [`RdmaPlane::connect`] keeps retrying a server that refuses or cannot be reached.
pub const DEFAULT_CONNECT_BUDGET: Duration = Duration::from_secs(30);

/// Why the RDMA plane could not start or connect.
#[derive(Debug, thiserror::Error)]
pub enum RdmaPlaneError {
    /// The configuration has no `roce://` interface.
    #[error("no interface has socket_config with a roce:// local_addr")]
    NoRdmaInterface,
    /// No `roce://` interface has this name.
    #[error("no RDMA interface `{0}`")]
    UnknownInterface(String),
    /// The interface is a client where a server was needed, or the other way round.
    #[error("interface `{interface}` is not a {expected}")]
    WrongSide {
        /// Interface name.
        interface: String,
        /// "server" or "client".
        expected: &'static str,
    },
    /// A connection slot's core cannot be used.
    #[error(
        "interface `{interface}`: cpu_core {core} is not available to this process (usable: {usable:?})"
    )]
    CoreUnavailable {
        /// Interface name.
        interface: String,
        /// The core.
        core: u32,
        /// Cores this process may use.
        usable: Vec<u32>,
    },
    /// Every connection slot of the interface is taken.
    #[error(
        "interface `{interface}`: every queue already carries a connection ({slots}); close one first"
    )]
    NoFreeSlot {
        /// Interface name.
        interface: String,
        /// Its slots.
        slots: usize,
    },
    /// The connection-manager thread is gone (or could not start).
    #[error("interface `{interface}`: the connection manager stopped")]
    ManagerStopped {
        /// Interface name.
        interface: String,
    },
    /// The connection-manager thread could not be started.
    #[error("cannot start the rdma-cm thread: {0}")]
    Spawn(std::io::Error),
    /// The connection manager decided something a server cannot act on.
    #[error("interface `{interface}`: unexpected connection decision {decision}")]
    UnexpectedDecision {
        /// Interface name.
        interface: String,
        /// The decision.
        decision: String,
    },
    /// Memory regions could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The configuration cannot be run as planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Verbs or rdma_cm failed.
    #[error("interface `{interface}`: {source}")]
    Verbs {
        /// Interface name.
        interface: String,
        /// The error.
        source: VerbsError,
    },
    /// The connection was refused by the server's rules.
    #[error("interface `{interface}`: request rejected: {reason}")]
    Rejected {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
}

struct RdmaInterface {
    index: usize,
    name: String,
    local: SocketAddr,
    mode: SocketMode,
    roce: RoceConfig,
    /// Seconds between connection attempts of a client (`socket_config.retry_connect_s`).
    retry_connect_s: u32,
    /// One connection per queue, as in the reference: its regions, its worker's core and
    /// its windows, as planned.
    slots: Vec<SlotPlan>,
    /// Which slots carry a connection now.
    busy: Mutex<Vec<bool>>,
}

impl RdmaInterface {
    /// Takes the first free queue slot.
    fn take_slot(&self) -> Option<usize> {
        let mut busy = self.busy.lock().expect("slot table");
        let n = busy.iter().position(|b| !b)?;
        busy[n] = true;
        Some(n)
    }

    fn release_slot(&self, n: usize) {
        self.busy.lock().expect("slot table")[n] = false;
    }
}

/// What the connections of a plane share with the plane.
struct Shared {
    regions: Arc<RegionSet>,
    interfaces: Vec<RdmaInterface>,
    workers: Arc<WorkerTable<WorkerEnd>>,
}

/// RDMA endpoints of a configuration.
pub struct RdmaPlane {
    shared: Arc<Shared>,
    /// Accepted connections (or why one failed), per server interface index.
    accepted: BTreeMap<usize, Mutex<Receiver<Result<RdmaStream, RdmaPlaneError>>>>,
    cm_stop: Arc<AtomicBool>,
    cm_thread: Option<JoinHandle<()>>,
}

impl RdmaPlane {
    /// Allocates the regions, listens on every `roce://` server interface and starts the
    /// connection-manager thread.
    pub fn start(config: &Config) -> Result<Self, RdmaPlaneError> {
        let plan = Plan::from_config(config)?;
        let regions = Arc::new(RegionSet::allocate(&config.memory_regions)?);
        let mut interfaces = Vec::new();
        for i in plan.rdma {
            for core in i.slots.iter().filter_map(|s| s.core) {
                if !crate::affinity::core_is_usable(core) {
                    return Err(RdmaPlaneError::CoreUnavailable {
                        interface: i.name,
                        core,
                        usable: crate::affinity::usable_cores(),
                    });
                }
            }
            interfaces.push(RdmaInterface {
                index: i.interface,
                name: i.name,
                local: i.local,
                mode: i.mode,
                retry_connect_s: i.retry_connect_s,
                roce: i.roce,
                busy: Mutex::new(vec![false; i.slots.len()]),
                slots: i.slots,
            });
        }
        if interfaces.is_empty() {
            return Err(RdmaPlaneError::NoRdmaInterface);
        }
        let mut listeners = Vec::new();
        let mut accepted = BTreeMap::new();
        let mut deliver = BTreeMap::new();
        for i in interfaces.iter().filter(|i| i.mode == SocketMode::Server) {
            let l = Listener::bind(i.local, MAX_CONNECTIONS as i32).map_err(|source| {
                RdmaPlaneError::Verbs {
                    interface: i.name.clone(),
                    source,
                }
            })?;
            listeners.push((i.index, l));
            let (tx, rx) = std::sync::mpsc::sync_channel(MAX_CONNECTIONS);
            accepted.insert(i.index, Mutex::new(rx));
            deliver.insert(i.index, tx);
        }
        let server = Server::new(
            interfaces
                .iter()
                .filter_map(|i| match i.local {
                    SocketAddr::V4(a) => Some(ConfiguredInterface {
                        config_index: i.index,
                        name: i.name.clone(),
                        addr: *a.ip(),
                    }),
                    SocketAddr::V6(_) => None,
                })
                .collect(),
            // One connection per server queue.
            interfaces
                .iter()
                .filter(|i| i.mode == SocketMode::Server)
                .map(|i| i.slots.len())
                .sum::<usize>()
                .max(1),
        );
        let shared = Arc::new(Shared {
            regions,
            interfaces,
            workers: Arc::new(WorkerTable::default()),
        });
        let cm_stop = Arc::new(AtomicBool::new(false));
        let cm_thread = if listeners.is_empty() {
            None
        } else {
            let (sh, stop) = (shared.clone(), cm_stop.clone());
            let mut cm = CmLoop {
                shared: sh,
                server,
                listeners,
                deliver,
                conn_of_key: BTreeMap::new(),
                next_conn: 1,
            };
            Some(
                std::thread::Builder::new()
                    .name("rdma-cm".into())
                    .spawn(move || cm.run(&stop))
                    .map_err(RdmaPlaneError::Spawn)?,
            )
        };
        Ok(Self {
            shared,
            accepted,
            cm_stop,
            cm_thread,
        })
    }

    /// The region set the connections' bursts come from.
    pub fn regions(&self) -> &Arc<RegionSet> {
        &self.shared.regions
    }

    /// Connection workers running now.
    pub fn workers(&self) -> usize {
        self.shared.workers.len()
    }

    fn interface(&self, name: &str) -> Result<&RdmaInterface, RdmaPlaneError> {
        self.shared
            .interfaces
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| RdmaPlaneError::UnknownInterface(name.to_owned()))
    }

    /// Waits up to `timeout` for the next connection accepted on server interface
    /// `interface`. A request the server's rules refused comes back as `Rejected`.
    pub fn accept(&self, interface: &str, timeout: Duration) -> Result<RdmaStream, RdmaPlaneError> {
        let iface = self.interface(interface)?;
        let rx = self
            .accepted
            .get(&iface.index)
            .ok_or_else(|| RdmaPlaneError::WrongSide {
                interface: interface.to_owned(),
                expected: "server",
            })?;
        match rx.lock().expect("accept queue").recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(RdmaPlaneError::Verbs {
                interface: interface.to_owned(),
                source: VerbsError::Timeout("waiting for a connection"),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(RdmaPlaneError::ManagerStopped {
                interface: interface.to_owned(),
            }),
        }
    }

    /// Connects client interface `interface` to `remote`, retrying a server that refuses
    /// or cannot be reached every `socket_config.retry_connect_s` for up to
    /// [`DEFAULT_CONNECT_BUDGET`]; see [`RdmaPlane::connect_within`].
    pub fn connect(
        &self,
        interface: &str,
        remote: SocketAddr,
    ) -> Result<RdmaStream, RdmaPlaneError> {
        self.connect_within(interface, remote, DEFAULT_CONNECT_BUDGET)
    }

    /// As [`RdmaPlane::connect`], retrying for up to `budget` (so the start order of
    /// server and client does not matter). A server that rejects the client (busy) is
    /// final and reported at once.
    pub fn connect_within(
        &self,
        interface: &str,
        remote: SocketAddr,
        budget: Duration,
    ) -> Result<RdmaStream, RdmaPlaneError> {
        let iface = self.interface(interface)?;
        if iface.mode != SocketMode::Client {
            return Err(RdmaPlaneError::WrongSide {
                interface: interface.to_owned(),
                expected: "client",
            });
        }
        let verbs = |source| RdmaPlaneError::Verbs {
            interface: interface.to_owned(),
            source,
        };
        let slot = iface
            .take_slot()
            .ok_or_else(|| RdmaPlaneError::NoFreeSlot {
                interface: interface.to_owned(),
                slots: iface.slots.len(),
            })?;
        let local = SocketAddr::new(iface.local.ip(), 0);
        let period = Duration::from_secs(u64::from(iface.retry_connect_s.max(1)));
        let stream =
            Connection::connect_within(local, remote, params(iface, slot), period, budget, &|| {
                false
            })
            .and_then(|conn| spawn_stream(&self.shared, iface, slot, conn, true));
        if stream.is_err() {
            iface.release_slot(slot);
        }
        stream.map_err(verbs)
    }
}

impl Drop for RdmaPlane {
    fn drop(&mut self) {
        self.cm_stop.store(true, Ordering::Release);
        if let Some(t) = self.cm_thread.take() {
            let _ = t.join();
        }
        // Connections the application never took, then every worker still running.
        self.accepted.clear();
        self.shared.workers.stop_all();
    }
}

fn params(iface: &RdmaInterface, slot: usize) -> ConnectionParams {
    let q = &iface.slots[slot];
    ConnectionParams {
        own_receives: false,
        send_depth: q.send_window,
        recv_depth: q.recv_window as u32,
        message_size: 64,
        window_size: 0,
        rnr_retry: iface.roce.rnr_retry,
        retry_count: iface.roce.retry_count,
        min_rnr_timer: iface.roce.min_rnr_timer,
        ..ConnectionParams::default()
    }
}

/// Wraps an established connection and starts its worker.
fn spawn_stream(
    shared: &Arc<Shared>,
    iface: &RdmaInterface,
    slot: usize,
    conn: Connection,
    watch_own_events: bool,
) -> Result<RdmaStream, VerbsError> {
    let key = conn.key();
    let qp = conn.qp_settings()?;
    let q = &iface.slots[slot];
    let conn = BurstConnection::new(
        conn,
        shared.regions.clone(),
        q.rx_region,
        &q.tx_region.into_iter().collect::<Vec<_>>(),
        (iface.index as u16, slot as u16),
        q.recv_window,
    )?;
    let (to_worker, from_app) = std::sync::mpsc::sync_channel(STREAM_QUEUE);
    let (to_app, from_worker) = std::sync::mpsc::sync_channel(STREAM_QUEUE);
    let state = Arc::new(StreamState::default());
    let (st, core) = (state.clone(), q.core);
    let worker = Worker::spawn(format!("rdma-{}", iface.name), move |stop| {
        run_worker(
            conn,
            WorkerIo {
                from_app,
                to_app,
                state: st,
                core,
                watch_own_events,
            },
            &stop,
        )
    })
    .map_err(|e| VerbsError::Call {
        what: "spawning the connection worker",
        detail: e.to_string(),
    })?;
    shared.workers.insert(key, worker);
    Ok(RdmaStream {
        key,
        interface: iface.name.clone(),
        slot: (iface.index, slot),
        // A client's slot is its own to release; a server's goes back with the disconnect
        // event (the connection-manager thread sees it either way).
        shared: watch_own_events.then(|| shared.clone()),
        to_worker: Some(to_worker),
        from_worker,
        state,
        qp,
        workers: shared.workers.clone(),
        regions: shared.regions.clone(),
    })
}

/// The connection-manager thread: owns the listeners, decides on requests, and stops the
/// worker of every connection rdma_cm reports gone.
struct CmLoop {
    shared: Arc<Shared>,
    server: Server,
    listeners: Vec<(usize, Listener)>,
    deliver: BTreeMap<usize, SyncSender<Result<RdmaStream, RdmaPlaneError>>>,
    /// Every accepted connection by its rdma_cm key: our connection id, its interface
    /// index and queue slot.
    conn_of_key: BTreeMap<u64, (u64, usize, usize)>,
    next_conn: u64,
}

impl CmLoop {
    fn run(&mut self, stop: &AtomicBool) {
        let stopping = || stop.load(Ordering::Acquire);
        while !stopping() {
            for n in 0..self.listeners.len() {
                let (index, listener) = &self.listeners[n];
                let index = *index;
                match listener.next_event(Duration::from_millis(2), &stopping) {
                    Ok(ListenerEvent::Request(req)) => self.on_request(index, req),
                    Ok(ListenerEvent::Disconnected(key)) => self.on_disconnected(key),
                    Ok(ListenerEvent::Established(_)) => {}
                    Ok(ListenerEvent::Other(what)) => {
                        tracing::debug!(interface = index, "rdma_cm event {what}")
                    }
                    Err(VerbsError::Timeout(_) | VerbsError::Stopped(_)) => {}
                    Err(e) => tracing::warn!(interface = index, "rdma_cm: {e}"),
                }
            }
        }
    }

    fn iface(&self, index: usize) -> &RdmaInterface {
        self.shared
            .interfaces
            .iter()
            .find(|i| i.index == index)
            .expect("listeners belong to configured interfaces")
    }

    fn on_request(&mut self, listening: usize, req: rdma::verbs::Request) {
        let conn_id = self.next_conn;
        self.next_conn += 1;
        let local = self.iface(listening).local;
        let decision = self.server.on_event(&CmEvent::ConnectRequest {
            conn: conn_id,
            local,
            remote: local,
            device_port: req.device_port,
        });
        let name = self.iface(listening).name.clone();
        let result = match decision.into_iter().next() {
            Some(CmAction::Accept { interface, .. }) => {
                let shared = self.shared.clone();
                let owner = shared
                    .interfaces
                    .iter()
                    .find(|i| i.index == interface)
                    .expect("the cm names a configured interface");
                let verbs = |source| RdmaPlaneError::Verbs {
                    interface: owner.name.clone(),
                    source,
                };
                let accepted = match owner.take_slot() {
                    None => {
                        req.reject();
                        Err(None)
                    }
                    Some(slot) => match req.accept(params(owner, slot)) {
                        Ok(conn) => Ok((slot, conn)),
                        Err(e) => {
                            owner.release_slot(slot);
                            Err(Some(e))
                        }
                    },
                };
                match accepted {
                    Ok((slot, conn)) => {
                        let key = conn.key();
                        self.server.on_event(&CmEvent::Established(conn_id));
                        match spawn_stream(&shared, owner, slot, conn, false) {
                            Ok(stream) => {
                                self.conn_of_key.insert(key, (conn_id, owner.index, slot));
                                Ok(stream)
                            }
                            Err(e) => {
                                self.server.on_event(&CmEvent::Disconnected(conn_id));
                                owner.release_slot(slot);
                                Err(verbs(e))
                            }
                        }
                    }
                    Err(None) => {
                        // Every queue is taken (the state machine counts all interfaces).
                        let reason = format!(
                            "interface `{}` has no free queue ({} queues, each carries one connection); close a connection first",
                            owner.name,
                            owner.slots.len()
                        );
                        self.server.on_event(&CmEvent::Failed {
                            conn: conn_id,
                            what: reason.clone(),
                        });
                        Err(RdmaPlaneError::Rejected {
                            interface: owner.name.clone(),
                            reason,
                        })
                    }
                    Err(Some(e)) => {
                        let what = e.to_string();
                        self.server.on_event(&CmEvent::Failed {
                            conn: conn_id,
                            what,
                        });
                        Err(verbs(e))
                    }
                }
            }
            Some(CmAction::Reject { reason, .. }) => {
                tracing::warn!(interface = %name, "connection request rejected: {reason}");
                req.reject();
                Err(RdmaPlaneError::Rejected {
                    interface: name,
                    reason,
                })
            }
            other => Err(RdmaPlaneError::UnexpectedDecision {
                interface: name.clone(),
                decision: format!("{other:?}"),
            }),
        };
        if let Some(tx) = self.deliver.get(&listening) {
            // A full or closed queue drops the stream, which stops its worker.
            let _ = tx.try_send(result);
        }
    }

    fn on_disconnected(&mut self, key: u64) {
        let Some((conn, index, slot)) = self.conn_of_key.remove(&key) else {
            return;
        };
        for action in self.server.on_event(&CmEvent::Disconnected(conn)) {
            if let CmAction::StopWorker(_) = action {
                // Flag, removal, lock released, join; the buffers go back after the join.
                drop(self.shared.workers.stop(key));
            }
        }
        // The slot is free again for the next request.
        self.iface(index).release_slot(slot);
    }
}

/// What a connection's worker and its application end share.
#[derive(Default)]
struct StreamState {
    sent_packets: AtomicU64,
    sent_bytes: AtomicU64,
    received_packets: AtomicU64,
    received_bytes: AtomicU64,
    errors: AtomicU64,
    closed: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl StreamState {
    fn error(&self, what: String) {
        tracing::warn!("rdma connection: {what}");
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().expect("last error") = Some(what);
    }
}

/// Counters of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Messages posted as SENDs.
    pub sent_packets: u64,
    /// Bytes posted as SENDs.
    pub sent_bytes: u64,
    /// Messages received.
    pub received_packets: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Errors (failed completions, refused bursts).
    pub errors: u64,
}

/// What a worker leaves behind: dropped only after its join, so the QP is destroyed and the
/// buffers go back to their pools once no thread can touch them.
struct WorkerEnd {
    _conn: BurstConnection,
    _held: VecDeque<Burst>,
}

struct WorkerIo {
    from_app: Receiver<Burst>,
    to_app: SyncSender<Burst>,
    state: Arc<StreamState>,
    core: Option<u32>,
    /// Client connections get their disconnect on their own event channel.
    watch_own_events: bool,
}

fn run_worker(mut conn: BurstConnection, io: WorkerIo, stop: &AtomicBool) -> WorkerEnd {
    if let Some(core) = io.core
        && let Err(e) = crate::affinity::pin_current_thread(core)
    {
        io.state.error(e.to_string());
    }
    let mut to_send: Option<Burst> = None;
    let mut received: VecDeque<Burst> = VecDeque::new();
    let mut idle = 0u32;
    while !stop.load(Ordering::Acquire) {
        let mut busy = false;
        if to_send.is_none() {
            match io.from_app.try_recv() {
                Ok(b) => to_send = Some(b),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    if conn.bursts_in_flight() == 0 {
                        break; // the application closed its end
                    }
                }
            }
        }
        if let Some(burst) = to_send.take() {
            let (n, bytes) = (burst.len() as u64, burst.bytes());
            match conn.send(burst) {
                Ok(()) => {
                    busy = true;
                    io.state.sent_packets.fetch_add(n, Ordering::Relaxed);
                    io.state.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
                }
                Err(SendError::Full(b)) => to_send = Some(b),
                Err(SendError::Unsupported(why, _)) => {
                    io.state.error(format!("burst dropped: {why}"))
                }
                Err(SendError::Verbs(e)) => {
                    io.state.error(e.to_string());
                    break;
                }
            }
        }
        match conn.poll() {
            Ok(Some(b)) => {
                busy = true;
                io.state
                    .received_packets
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                io.state
                    .received_bytes
                    .fetch_add(b.bytes(), Ordering::Relaxed);
                received.push_back(b);
            }
            Ok(None) => {}
            Err(e) => {
                io.state.error(e.to_string());
                break;
            }
        }
        // Hand received bursts over; while the application lags they wait here and the
        // receive window drains, so the peer is held back by RNR, not by loss.
        while let Some(b) = received.pop_front() {
            match io.to_app.try_send(b) {
                Ok(()) => {}
                Err(TrySendError::Full(b)) => {
                    received.push_front(b);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
        if busy {
            idle = 0;
        } else {
            idle += 1;
            if io.watch_own_events
                && idle.is_multiple_of(EVENT_CHECK_EVERY)
                && conn.connection().peer_disconnected()
            {
                break;
            }
            // Idle: let a thread sharing the core (the application's, often) run.
            std::thread::yield_now();
        }
    }
    io.state.closed.store(true, Ordering::Release);
    let _ = conn.connection().disconnect();
    // Deliver what already arrived; the rest goes back with the connection.
    while let Some(b) = received.pop_front() {
        if let Err(TrySendError::Full(b) | TrySendError::Disconnected(b)) = io.to_app.try_send(b) {
            received.push_front(b);
            break;
        }
    }
    WorkerEnd {
        _conn: conn,
        _held: received,
    }
}

/// The application's end of an RDMA connection. Dropping it disconnects and stops the
/// connection's worker.
pub struct RdmaStream {
    key: u64,
    interface: String,
    to_worker: Option<SyncSender<Burst>>,
    from_worker: Receiver<Burst>,
    state: Arc<StreamState>,
    qp: QpSettings,
    workers: Arc<WorkerTable<WorkerEnd>>,
    /// Interface index and queue slot.
    slot: (usize, usize),
    /// Set for client connections, whose slot this end releases.
    shared: Option<Arc<Shared>>,
    /// The plane's region set: only its bursts may be sent here.
    regions: Arc<RegionSet>,
}

impl RdmaStream {
    /// Queues `burst` to be sent, one message per packet. Gives it back when the queue to
    /// the worker is full (try again later) or the connection is closed.
    pub fn send(&self, burst: Burst) -> Result<(), Burst> {
        // A burst of another plane's memory could never be sent from this connection's
        // registered regions; refuse it here, where the application still holds it.
        if self.is_closed() || !burst.belongs_to(&self.regions) {
            return Err(burst);
        }
        let tx = self.to_worker.as_ref().expect("sender present until drop");
        tx.try_send(burst).map_err(|e| match e {
            TrySendError::Full(b) | TrySendError::Disconnected(b) => b,
        })
    }

    /// The next burst of received messages, if one arrived.
    pub fn poll(&self) -> Option<Burst> {
        self.from_worker.try_recv().ok()
    }

    /// True once the connection is gone (the peer disconnected, an error, or shutdown).
    /// Bursts that arrived before remain available from [`RdmaStream::poll`].
    pub fn is_closed(&self) -> bool {
        self.state.closed.load(Ordering::Acquire)
    }

    /// Counters so far.
    pub fn stats(&self) -> StreamStats {
        let s = &self.state;
        StreamStats {
            sent_packets: s.sent_packets.load(Ordering::Relaxed),
            sent_bytes: s.sent_bytes.load(Ordering::Relaxed),
            received_packets: s.received_packets.load(Ordering::Relaxed),
            received_bytes: s.received_bytes.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
        }
    }

    /// The last error the worker met, if any.
    pub fn last_error(&self) -> Option<String> {
        self.state.last_error.lock().expect("last error").clone()
    }

    /// The retry and RNR settings the QP runs with (read back from the device).
    pub fn qp_settings(&self) -> QpSettings {
        self.qp
    }

    /// The configured interface this connection belongs to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The interface's queue this connection occupies (its regions and worker core).
    pub fn queue(&self) -> usize {
        self.slot.1
    }
}

impl Drop for RdmaStream {
    fn drop(&mut self) {
        // Closing our end lets the worker finish the sends in flight; the stop flag bounds it.
        drop(self.to_worker.take());
        drop(self.workers.stop(self.key));
        if let Some(shared) = &self.shared
            && let Some(iface) = shared.interfaces.iter().find(|i| i.index == self.slot.0)
        {
            iface.release_slot(self.slot.1);
        }
    }
}
