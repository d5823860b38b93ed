//! Engines move packets between queues and the outside world. Each engine hands out one
//! receive and one transmit handle per queue; a handle is used by exactly one worker, so
//! per-queue state needs no locking.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fault;
pub mod loopback;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod socket;
pub mod wire;

use crate::burst::Burst;
use crate::config::Direction;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::RegionSet;
use crate::plan::{EnginePlan, Plan};
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::plan::{Capabilities, Overflow};

/// Receive side of one queue.
pub trait RxPort: Send {
    /// Moves up to `max` received packets into `into`; returns how many.
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize;

    /// True (once) when the burst being assembled must be delivered now, even if short:
    /// the next packets were steered under newer flow rules.
    fn take_boundary(&mut self) -> bool {
        false
    }

    /// True once nothing more will arrive (a connection ended) and everything received was
    /// handed over; the worker then delivers what it holds and drops the task.
    fn closed(&self) -> bool {
        false
    }
}

/// Transmit side of one queue.
pub trait TxPort: Send {
    /// Transmits `burst`. Returns `None` when all of it was taken, or the packets that
    /// could not be sent yet (the worker offers them again).
    fn transmit(&mut self, burst: Burst) -> Option<Burst>;

    /// Called when the worker has nothing to send on this queue.
    fn idle(&mut self) {}

    /// True once nothing can be sent any more (a connection ended); the worker drops the
    /// task, and the bursts still queued for it go back to their pools.
    fn closed(&self) -> bool {
        false
    }
}

/// A packet engine.
pub trait Engine: Send + Sync {
    /// Name for reports (`loopback`, `dpdk`, ...).
    fn name(&self) -> &'static str;
    /// Receive handle of queue `queue` of interface `port`; `counters` are the queue's own
    /// (its worker is their writer), for drops the engine sees (pool empty, NIC misses).
    fn rx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError>;
    /// Transmit handle of queue `queue` of interface `port`.
    /// `counters` are the queue's own (the worker is their writer); engines that drop
    /// frames on the way out (e.g. software steering) count them there.
    fn tx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError>;
    /// What the engine needs and can do; the same as the plan's
    /// `Capabilities::of(engine)`, which start-up planned with.
    fn capabilities(&self) -> Capabilities;
    /// Where flow steering happens: "software", or "rte_flow" when the device's flow
    /// tables do it (a mix lists each interface).
    fn steering(&self) -> String;
    /// Sets up queue `queue` of interface `port` while the engine runs (a live change,
    /// [`crate::DataPlane::change`]); `rx_port` or `tx_port` then give it. Engines whose
    /// queues are fixed once they start refuse.
    fn open_queue(
        &self,
        port: PortIndex,
        _direction: Direction,
        _queue: QueueId,
    ) -> Result<(), EngineError> {
        Err(EngineError::Interface {
            interface: format!("port {port}"),
            reason: format!(
                "the {} engine sets its queues up when it starts",
                self.name()
            ),
        })
    }

    /// True when queue `queue` of interface `port`, which the plan alone would keep until
    /// a restart, can be removed from the running engine: one [`Engine::open_queue`]
    /// added without a resource of its own (a UDP RX queue without a socket).
    fn closes_live(&self, _port: PortIndex, _direction: Direction, _queue: QueueId) -> bool {
        false
    }

    /// True when the rules of interface `port` run in software in this engine although
    /// the plan expected the device to take them (a DPDK port without rte_flow): a live
    /// change may then switch them as a whole.
    fn rules_in_software(&self, _port: PortIndex) -> bool {
        false
    }

    /// Called on each worker thread after pinning and before its first poll, and again
    /// (with `false`) before it exits; engines register per-thread state here.
    fn worker_thread(&self, _starting: bool) {}

    /// The MAC address of interface `port`, stamped into frames by the `tx_eth_src`
    /// offload; `None` when the engine has none to give.
    fn mac_address(&self, _port: PortIndex) -> Option<[u8; 6]> {
        None
    }

    /// Connection-oriented operations, for engines whose queues are connections
    /// (`Capabilities::connections`): accept and connect hand out an [`Established`]
    /// connection, whose ports the plane runs on its workers.
    fn connections(&self) -> Option<&dyn Connections> {
        None
    }

    /// True when the engine stamps the packets interface `port` receives itself (kernel
    /// timestamps on UDP sockets); the RX worker then leaves `timestamp_ns` alone.
    fn stamps_rx(&self, _port: PortIndex) -> bool {
        false
    }

    /// True when the engine sends each packet of port `port` no earlier than its
    /// `timestamp_ns` itself (DPDK's send-on-timestamp); the TX worker then holds nothing
    /// back.
    fn sends_at_time(&self, _port: PortIndex) -> bool {
        false
    }

    /// Asks the device to cap TX queue `queue` of interface `port` at `mbps` Mb/s. `Ok`
    /// when the device paces it (the worker then does not); `Err` says why the worker has
    /// to (the default: no device pacing).
    fn pace_tx_queue(
        &self,
        _port: PortIndex,
        _queue: QueueId,
        _mbps: u64,
    ) -> Result<(), NoDevicePacing> {
        Err(NoDevicePacing::NotOffered(self.name()))
    }

    /// True when the device of interface `port` inserts its TX flows' VLAN tags (DPDK's
    /// VLAN insert offload), so the TX workers leave them to it.
    fn inserts_vlan_tags(&self, _port: PortIndex) -> bool {
        false
    }

    /// The peer state behind queue `queue` of interface `port` (kernel sockets: the TCP
    /// connection, or the UDP peer a server learned), shared with the queue's handles;
    /// `None` for queues without one.
    fn link(&self, _port: PortIndex, _direction: Direction, _queue: QueueId) -> Option<Arc<Link>> {
        None
    }
}

/// Whether a queue's peer is there, shared by an engine's ports (the writers) and the
/// application's queue handles.
#[derive(Debug, Default)]
pub struct Link {
    up: AtomicBool,
    connections: AtomicU64,
    disconnects: AtomicU64,
    rejected: AtomicU64,
    peer: Mutex<Option<SocketAddr>>,
    last_error: Mutex<Option<String>>,
}

/// A copy of a [`Link`]'s state.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStatus {
    /// A peer is there (a TCP connection is up; a UDP server knows whom to answer).
    pub up: bool,
    /// The current (or last) peer.
    pub peer: Option<SocketAddr>,
    /// Connections made (TCP) or peers learned (UDP server).
    pub connections: u64,
    /// Connections that ended.
    pub disconnects: u64,
    /// Connections (TCP) and datagrams (UDP) refused: from outside `allowed_peers`, or
    /// beyond the lanes, or not the peer a UDP server already answers.
    pub rejected_peers: u64,
    /// The last error (a refused connect, a reset connection).
    pub last_error: Option<String>,
}

impl Link {
    /// A link that is up from the start (a connected UDP socket).
    pub fn up_from_start() -> Self {
        let l = Self::default();
        l.up.store(true, Ordering::Release);
        l
    }

    /// True while a peer is there.
    #[inline]
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// A peer is there now.
    pub fn connected(&self, peer: SocketAddr) {
        *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(peer);
        self.connections.fetch_add(1, Ordering::Relaxed);
        self.up.store(true, Ordering::Release);
    }

    /// The peer went away, for `why`.
    pub fn disconnected(&self, why: String) {
        if self.up.swap(false, Ordering::AcqRel) {
            self.disconnects.fetch_add(1, Ordering::Relaxed);
        }
        self.failed(why);
    }

    /// Counts `n` connections or datagrams refused from `peer`, for `why`.
    pub fn rejected(&self, n: u64, peer: SocketAddr, why: &str) {
        self.rejected.fetch_add(n, Ordering::Relaxed);
        self.failed(format!("refused {peer}: {why}"));
    }

    /// Records an error without changing whether the link is up.
    pub fn failed(&self, why: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// The state now.
    pub fn status(&self) -> LinkStatus {
        LinkStatus {
            up: self.is_up(),
            peer: *self.peer.lock().unwrap_or_else(|e| e.into_inner()),
            connections: self.connections.load(Ordering::Relaxed),
            disconnects: self.disconnects.load(Ordering::Relaxed),
            rejected_peers: self.rejected.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Why no peer is there, for errors.
    pub fn why_down(&self) -> String {
        self.status()
            .last_error
            .unwrap_or_else(|| "no peer connected yet".into())
    }
}

/// Counters of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Messages sent.
    pub sent_packets: u64,
    /// Bytes sent.
    pub sent_bytes: u64,
    /// Messages received.
    pub received_packets: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Errors (failed completions, refused bursts).
    pub errors: u64,
    /// Packets queued for sending when the connection ended, never sent (their buffers
    /// went back to the pool).
    pub unsent_packets: u64,
}

/// What a connection's ports and the application's end share.
pub trait StreamState: Send + Sync {
    /// Counters so far.
    fn stats(&self) -> StreamStats;
    /// True once the connection is gone (peer, error, or closed by us).
    fn is_closed(&self) -> bool;
    /// The last error, if any.
    fn last_error(&self) -> Option<String>;
    /// Closes it from our side; the worker then retires its ports.
    fn close(&self);
}

/// A connection the engine established, ready to be run by the plane: its two ports go to
/// the worker of `core` as an RX and a TX task.
pub struct Established {
    /// Interface index.
    pub interface: usize,
    /// Interface name (of the listener that accepted it, for a server).
    pub interface_name: String,
    /// The interface's queue slot it occupies.
    pub slot: usize,
    /// Core of the worker that runs it.
    pub core: u32,
    /// Regions the application's sends come from.
    pub tx_regions: Vec<crate::memory::RegionId>,
    /// Receive side.
    pub rx: Box<dyn RxPort>,
    /// Send side.
    pub tx: Box<dyn TxPort>,
    /// Shared with the application's end.
    pub state: Arc<dyn StreamState>,
    /// The RDMA queue pair's retry and RNR settings (read back from the device).
    #[cfg(feature = "rdma")]
    pub qp: ::rdma::verbs::QpSettings,
    /// The RX stage that moves what `rx` receives into the queue's layout, when the
    /// connection cannot deliver it there itself.
    pub(crate) rx_stage: Option<crate::stage::RxStage>,
    /// The TX stage that copies the application's sends into what `tx` sends from.
    pub(crate) tx_stage: Option<crate::stage::RxStage>,
}

/// Accept and connect, for engines whose queues are connections.
pub trait Connections: Send + Sync {
    /// Waits up to `timeout` for the next connection accepted on server interface
    /// `interface`.
    fn accept(&self, interface: &str, timeout: Duration) -> Result<Established, ConnectionError>;
    /// Connects client interface `interface` to `remote`, retrying a server that refuses
    /// or cannot be reached for up to `budget`, or until `stop` returns true.
    fn connect_within(
        &self,
        interface: &str,
        remote: SocketAddr,
        budget: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Established, ConnectionError>;
    /// Connections established and not yet retired.
    fn live(&self) -> usize;
    /// Connection requests each server interface refused for coming from outside its
    /// `allowed_peers`, by interface name.
    fn rejected_peers(&self) -> Vec<(String, u64)>;
}

/// Why a connection could not be accepted or made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The engine has no connections (a packet engine).
    #[error("the {0} engine has no connections; accept and connect are for roce:// interfaces")]
    NotConnections(&'static str),
    /// No connection interface has this name.
    #[error("no connection interface `{0}`")]
    UnknownInterface(String),
    /// A client interface where a server was needed, or the other way round.
    #[error("interface `{interface}` is not a {expected}")]
    WrongSide {
        /// Interface name.
        interface: String,
        /// "server" or "client".
        expected: &'static str,
    },
    /// Every queue slot of the interface carries a connection.
    #[error(
        "interface `{interface}`: every queue already carries a connection ({slots}); close one first"
    )]
    NoFreeSlot {
        /// Interface name.
        interface: String,
        /// Its slots.
        slots: usize,
    },
    /// No connection arrived in time.
    #[error("interface `{interface}`: no connection within {waited:?}")]
    Timeout {
        /// Interface name.
        interface: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The connection manager stopped.
    #[error("interface `{interface}`: the connection manager stopped")]
    ManagerStopped {
        /// Interface name.
        interface: String,
    },
    /// The server's rules refused the request.
    #[error("interface `{interface}`: request rejected: {reason}")]
    Rejected {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
    /// The transport failed (verbs, rdma_cm).
    #[error("interface `{interface}`: {source}")]
    Transport {
        /// Interface name.
        interface: String,
        /// The transport's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The plane has no worker on the connection's core.
    #[error("interface `{interface}`: no worker runs on core {core}")]
    NoWorker {
        /// Interface name.
        interface: String,
        /// The core.
        core: u32,
    },
}

/// Why a device does not pace a TX queue (its worker then paces it in software).
#[derive(Debug, thiserror::Error)]
pub enum NoDevicePacing {
    /// The engine has no device rate limit.
    #[error("the {0} engine has no device rate limit")]
    NotOffered(&'static str),
    /// The interface is not one of the engine's ports.
    #[error(transparent)]
    Port(Box<EngineError>),
    /// The port has no such TX queue.
    #[error("no TX queue {0}")]
    NoQueue(QueueId),
    /// The rate does not fit the device API.
    #[error("{0} Mb/s is above the API's range")]
    RateOutOfRange(u64),
    /// The device refused the rate limit.
    #[cfg(feature = "dpdk")]
    #[error("the device has no queue rate limit ({0})")]
    Refused(#[source] dpdk::DpdkError),
}

/// An engine could not be created or a queue could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The configuration asks for an engine this build does not have yet.
    #[error(
        "engine `{0}` is not available in this build; this build runs the software loopback (loopback: \"sw\")"
    )]
    Unavailable(&'static str),
    /// The configuration asks for DPDK in a build without it.
    #[error(
        "the DPDK engine is not in this build; rebuild with `cargo build --release --features dpdk` (needs apt-get install dpdk libdpdk-dev libclang-dev pkg-config)"
    )]
    DpdkNotBuilt,
    /// The configuration asks for RDMA in a build without it.
    #[error("roce:// interfaces need the `rdma` feature, which this build does not have")]
    RdmaNotBuilt,
    /// An RDMA listener or the connection manager could not start.
    #[cfg(feature = "rdma")]
    #[error("interface `{interface}`: {source}")]
    Verbs {
        /// Interface name.
        interface: String,
        /// The verbs layer's error.
        source: ::rdma::verbs::VerbsError,
    },
    /// A thread could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Spawn {
        /// Which thread.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A connection engine with no interface to listen or connect on.
    #[error("no interface has socket_config with a roce:// local_addr")]
    NoConnectionInterface,
    /// A start-up thread panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// DPDK's EAL did not start.
    #[cfg(feature = "dpdk")]
    #[error("{source} (EAL arguments: {args}; {free_memory})")]
    Eal {
        /// DPDK's reason.
        source: dpdk::DpdkError,
        /// The arguments it was given.
        args: String,
        /// What the machine has free.
        free_memory: String,
    },
    /// A DPDK call on an interface's port failed.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}` ({address}): {source}")]
    Device {
        /// Interface name.
        interface: String,
        /// Its address.
        address: String,
        /// DPDK's reason.
        source: dpdk::DpdkError,
    },
    /// An mbuf pool of an interface could not be made.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}`{}: {source}", queue_label(*direction, *queue))]
    Pool {
        /// Interface name.
        interface: String,
        /// Queue direction.
        direction: Direction,
        /// Queue id; `None` for an idle device queue.
        queue: Option<QueueId>,
        /// Why.
        source: dpdk::PoolError,
    },
    /// A region could not be lent to an RX queue's port.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}` RX queue {queue}: {source}")]
    Lend {
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: QueueId,
        /// Why.
        source: dpdk::LendError,
    },
    /// Flow rules could not be put on an interface's device.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}`: {source}")]
    Flow {
        /// Interface name.
        interface: String,
        /// Why.
        source: dpdk::FlowError,
    },
    /// An interface's socket could not be opened.
    #[error("interface `{interface}`: {source}")]
    Socket {
        /// Interface name.
        interface: String,
        /// What the kernel refused.
        source: socket::SocketOpenError,
    },
    /// An interface cannot be run as configured.
    #[error("interface `{interface}`: {reason}")]
    Interface {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
    /// A queue cannot be run as configured.
    #[error("interface `{interface}`{}: {reason}", queue_label(*direction, Some(*queue)))]
    Queue {
        /// Interface name.
        interface: String,
        /// RX or TX.
        direction: Direction,
        /// Queue id.
        queue: QueueId,
        /// Why.
        reason: String,
    },
    /// A handle was asked for an interface index the engine does not have.
    #[error("no interface with index {port}")]
    NoInterface {
        /// The index.
        port: PortIndex,
    },
    /// A handle was asked for a queue the interface does not have.
    #[error("interface index {port} has no {} queue {queue}", direction.name().to_uppercase())]
    NoQueue {
        /// Interface index.
        port: PortIndex,
        /// RX or TX.
        direction: Direction,
        /// Queue id.
        queue: QueueId,
    },
}

impl EngineError {
    /// Interface `port` has no `direction` queue `queue`.
    pub(crate) fn no_queue(port: PortIndex, direction: Direction, queue: QueueId) -> Self {
        EngineError::NoQueue {
            port,
            direction,
            queue,
        }
    }

    /// Queue `queue` of interface `port` cannot be set up while the engine runs, for
    /// `reason` ([`Engine::open_queue`]).
    pub(crate) fn queue_not_opened(
        port: PortIndex,
        direction: Direction,
        queue: QueueId,
        reason: String,
    ) -> Self {
        EngineError::Queue {
            interface: format!("port {port}"),
            direction,
            queue,
            reason,
        }
    }
}

/// Entry `port` of an engine's per-interface table (interfaces by configuration index).
pub(crate) fn interface_at<T>(table: &[T], port: PortIndex) -> Result<&T, EngineError> {
    table
        .get(port.index())
        .ok_or(EngineError::NoInterface { port })
}

/// " RX queue 3" for messages; "" for no queue.
fn queue_label(direction: Direction, queue: Option<QueueId>) -> String {
    match queue {
        Some(q) => format!(" {} queue {q}", direction.name().to_uppercase()),
        None => String::new(),
    }
}

/// Creates the engine `plan` asks for, from its engine plan alone.
pub fn create(
    plan: &Plan,
    regions: &Arc<RegionSet>,
    steering: &[Arc<InterfaceSteering>],
) -> Result<Arc<dyn Engine>, EngineError> {
    match &plan.engine_plan {
        EnginePlan::Socket(p) => Ok(Arc::new(socket::SocketEngine::new(p, regions, steering)?)),
        EnginePlan::Loopback(p) => Ok(Arc::new(loopback::LoopbackEngine::new(
            p, regions, steering,
        )?)),
        #[cfg(feature = "dpdk")]
        EnginePlan::Dpdk(_) => Ok(Arc::new(dpdk::DpdkEngine::new(plan, regions, steering)?)),
        #[cfg(not(feature = "dpdk"))]
        EnginePlan::Dpdk(_) => Err(EngineError::DpdkNotBuilt),
        #[cfg(feature = "rdma")]
        EnginePlan::Rdma(_) => Ok(Arc::new(rdma::RdmaEngine::new(plan, regions)?)),
        #[cfg(not(feature = "rdma"))]
        EnginePlan::Rdma(_) => Err(EngineError::RdmaNotBuilt),
        EnginePlan::Unavailable => Err(EngineError::Unavailable(plan.engine.name())),
    }
}
