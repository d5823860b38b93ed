//! RDMA engine (feature `rdma`): `stream_type: socket` interfaces with `roce://` endpoints.
//! Its queues are connections: each interface has connection slots (one per configured
//! queue, from the plan), a server interface listens, a client connects. An established
//! connection becomes an RX and a TX port the plane runs as two tasks on the worker of the
//! slot's core, with the plane's counters; when the connection ends (the peer
//! disconnected, an error, or the application dropped its end) the worker retires the
//! tasks, and with them the connection: disconnect, queue pair destroyed, posted buffers
//! back to the pool, slot free. No thread per connection, so none is joined.
//!
//! The connection-manager thread owns the listeners, decides on requests by the rules of
//! `rdma::cm::Server`, and marks connections closed when rdma_cm reports them gone. Which
//! interface a request belongs to is the listener's that received it (its index in the
//! configuration), never the device's port number.

#![forbid(unsafe_code)]

use super::{
    Capabilities, ConnectionError, Connections, Engine, EngineError, Established, RxPort,
    StreamState, StreamStats, TxPort,
};
use crate::burst::Burst;
use crate::config::{GpuMemoryPath, PeerFilter, RoceConfig, SocketMode};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::{RegionId, RegionSet};
use crate::plan::Plan;
use crate::plan::rdma::{SlotPlan, SlotStaging};
use crate::rdma_conn::{BurstConnection, SendError, register};
use crate::stats::QueueCounters;
use rdma::cm::{CmAction, CmEvent, ConfiguredInterface, Server};
use rdma::verbs::{Connection, ConnectionParams, Listener, ListenerEvent, VerbsError};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

mod cm_loop;
mod ports;

use cm_loop::*;
use ports::*;

/// Idle receive polls between checks of a client connection's own event channel.
const EVENT_CHECK_EVERY: u32 = 1024;
/// Connections per server at most (the reference's limit).
const MAX_CONNECTIONS: usize = 128;
/// How long a connect keeps retrying a server that refuses or cannot be reached, unless
/// the caller gives its own budget.
pub const DEFAULT_CONNECT_BUDGET: Duration = Duration::from_secs(30);

struct RdmaInterface {
    index: usize,
    name: String,
    local: SocketAddr,
    mode: SocketMode,
    roce: RoceConfig,
    /// Seconds between connection attempts of a client (`socket_config.retry_connect_s`).
    retry_connect_s: u32,
    /// One connection per queue, as in the reference: its regions, core and windows.
    slots: Vec<SlotPlan>,
    /// Which slots carry a connection now.
    busy: Mutex<Vec<bool>>,
    /// Whose connection requests a server accepts.
    allowed_peers: PeerFilter,
    /// Connection requests refused for coming from outside `allowed_peers`.
    rejected_peers: AtomicU64,
}

impl RdmaInterface {
    /// Takes the first free queue slot.
    fn take_slot(&self) -> Option<usize> {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let n = busy.iter().position(|b| !b)?;
        busy[n] = true;
        Some(n)
    }

    fn release_slot(&self, n: usize) {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())[n] = false;
    }

    fn params(&self, slot: usize) -> ConnectionParams {
        let q = &self.slots[slot];
        ConnectionParams {
            own_receives: false,
            send_depth: q.send_window,
            recv_depth: q.recv_window as u32,
            message_size: 64,
            window_size: 0,
            rnr_retry: self.roce.rnr_retry,
            retry_count: self.roce.retry_count,
            min_rnr_timer: self.roce.min_rnr_timer,
            ..ConnectionParams::default()
        }
    }
}

/// What the engine's connections share with it.
struct Shared {
    regions: Arc<RegionSet>,
    interfaces: Vec<RdmaInterface>,
    /// Connections established and not yet retired.
    live: AtomicUsize,
}

impl Shared {
    fn interface(&self, name: &str) -> Result<(usize, &RdmaInterface), ConnectionError> {
        self.interfaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.name == name)
            .ok_or_else(|| ConnectionError::UnknownInterface(name.to_owned()))
    }
}

/// What a connection's ports and its application end share.
struct ConnState {
    sent_packets: AtomicU64,
    sent_bytes: AtomicU64,
    received_packets: AtomicU64,
    received_bytes: AtomicU64,
    errors: AtomicU64,
    unsent_packets: AtomicU64,
    closed: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl ConnState {
    fn new() -> Self {
        Self {
            sent_packets: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            received_packets: AtomicU64::new(0),
            received_bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            unsent_packets: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            last_error: Mutex::new(None),
        }
    }

    fn error(&self, what: String) {
        tracing::warn!("rdma connection: {what}");
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(what);
    }
}

impl StreamState for ConnState {
    fn stats(&self) -> StreamStats {
        StreamStats {
            sent_packets: self.sent_packets.load(Ordering::Relaxed),
            sent_bytes: self.sent_bytes.load(Ordering::Relaxed),
            received_packets: self.received_packets.load(Ordering::Relaxed),
            received_bytes: self.received_bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            unsent_packets: self.unsent_packets.load(Ordering::Relaxed),
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// Holds a slot while its connection lives.
struct SlotGuard {
    shared: Arc<Shared>,
    interface: usize,
    slot: usize,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.shared.interfaces[self.interface].release_slot(self.slot);
        self.shared.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection while its ports run. Dropped when the worker retired both of them: it
/// disconnects, then the queue pair goes (its posted buffers back to the pool), then the
/// slot is free (fields drop in order).
struct Live {
    conn: BurstConnection,
    _slot: SlotGuard,
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.conn.connection().disconnect();
    }
}

fn lock(live: &Mutex<Live>) -> std::sync::MutexGuard<'_, Live> {
    // Both ports run on one worker thread, so the lock is never contended; a panic while
    // holding it leaves a connection that is still consistent (every call is complete).
    live.lock().unwrap_or_else(|e| e.into_inner())
}

/// The RDMA engine: the `roce://` interfaces, their listeners and the connection manager.
pub struct RdmaEngine {
    shared: Arc<Shared>,
    /// Accepted connections (or why one failed), per server interface index.
    accepted: BTreeMap<usize, Mutex<Receiver<Result<Established, ConnectionError>>>>,
    cm_stop: Arc<AtomicBool>,
    cm_thread: Option<JoinHandle<()>>,
}

impl RdmaEngine {
    /// Listens on every server interface of `plan` and starts the connection manager.
    pub fn new(plan: &Plan, regions: &Arc<RegionSet>) -> Result<Self, EngineError> {
        let interfaces: Vec<RdmaInterface> = plan
            .rdma()
            .iter()
            .map(|i| RdmaInterface {
                index: i.interface,
                name: i.name.clone(),
                local: i.local,
                mode: i.mode,
                roce: i.roce.clone(),
                retry_connect_s: i.retry_connect_s,
                busy: Mutex::new(vec![false; i.slots.len()]),
                slots: i.slots.clone(),
                allowed_peers: i.allowed_peers.clone(),
                rejected_peers: AtomicU64::new(0),
            })
            .collect();
        if interfaces.is_empty() {
            return Err(EngineError::NoConnectionInterface);
        }
        let mut listeners = Vec::new();
        let mut accepted = BTreeMap::new();
        let mut deliver = BTreeMap::new();
        for (position, i) in interfaces.iter().enumerate() {
            if i.mode != SocketMode::Server {
                continue;
            }
            let l = Listener::bind(i.local, MAX_CONNECTIONS as i32).map_err(|source| {
                EngineError::Verbs {
                    interface: i.name.clone(),
                    source,
                }
            })?;
            listeners.push((position, l));
            let (tx, rx) = std::sync::mpsc::sync_channel(MAX_CONNECTIONS);
            accepted.insert(i.index, Mutex::new(rx));
            deliver.insert(position, tx);
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
            regions: regions.clone(),
            interfaces,
            live: AtomicUsize::new(0),
        });
        let cm_stop = Arc::new(AtomicBool::new(false));
        let cm_thread = if listeners.is_empty() {
            None
        } else {
            let stop = cm_stop.clone();
            let mut cm = CmLoop {
                shared: shared.clone(),
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
                    .map_err(|source| EngineError::Spawn {
                        what: "rdma-cm",
                        source,
                    })?,
            )
        };
        Ok(Self {
            shared,
            accepted,
            cm_stop,
            cm_thread,
        })
    }
}

impl Drop for RdmaEngine {
    fn drop(&mut self) {
        // The plane stopped its workers first, which retired every running connection.
        // No lock is held here.
        self.cm_stop.store(true, Ordering::Release);
        if let Some(t) = self.cm_thread.take() {
            let _ = t.join();
        }
        // Connections the application never took go with their channels.
        self.accepted.clear();
    }
}

impl Engine for RdmaEngine {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn rx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        _counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        Err(EngineError::no_queue(
            port,
            crate::config::Direction::Rx,
            queue,
        ))
    }

    fn tx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        _counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        Err(EngineError::no_queue(
            port,
            crate::config::Direction::Tx,
            queue,
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::RDMA
    }

    fn steering(&self) -> String {
        "connections".into()
    }

    fn connections(&self) -> Option<&dyn Connections> {
        Some(self)
    }
}

impl Connections for RdmaEngine {
    fn accept(&self, interface: &str, timeout: Duration) -> Result<Established, ConnectionError> {
        let (_, iface) = self.shared.interface(interface)?;
        let rx = self
            .accepted
            .get(&iface.index)
            .ok_or_else(|| ConnectionError::WrongSide {
                interface: interface.to_owned(),
                expected: "server",
            })?;
        match rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(timeout)
        {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(ConnectionError::Timeout {
                interface: interface.to_owned(),
                waited: timeout,
            }),
            Err(RecvTimeoutError::Disconnected) => Err(ConnectionError::ManagerStopped {
                interface: interface.to_owned(),
            }),
        }
    }

    fn connect_within(
        &self,
        interface: &str,
        remote: SocketAddr,
        budget: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Established, ConnectionError> {
        let (position, iface) = self.shared.interface(interface)?;
        if iface.mode != SocketMode::Client {
            return Err(ConnectionError::WrongSide {
                interface: interface.to_owned(),
                expected: "client",
            });
        }
        let transport = |e: VerbsError| ConnectionError::Transport {
            interface: interface.to_owned(),
            source: Box::new(e),
        };
        let slot = iface
            .take_slot()
            .ok_or_else(|| ConnectionError::NoFreeSlot {
                interface: interface.to_owned(),
                slots: iface.slots.len(),
            })?;
        let local = SocketAddr::new(iface.local.ip(), 0);
        let period = Duration::from_secs(u64::from(iface.retry_connect_s.max(1)));
        let conn =
            Connection::connect_within(local, remote, iface.params(slot), period, budget, stop);
        match conn {
            // From here the slot is released by the connection's guard.
            Ok(conn) => establish(&self.shared, position, slot, conn, true)
                .map(|(e, _)| e)
                .map_err(transport),
            Err(e) => {
                iface.release_slot(slot);
                Err(transport(e))
            }
        }
    }

    fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    fn rejected_peers(&self) -> Vec<(String, u64)> {
        self.shared
            .interfaces
            .iter()
            .filter(|i| i.mode == SocketMode::Server)
            .map(|i| (i.name.clone(), i.rejected_peers.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! The choice between the NIC reaching a region and staging it. Registration is a
    //! closure here: no machine has both a GPU and an RDMA device, so a NIC that cannot
    //! register GPU memory is stood in for by a registration that fails. The staged path
    //! itself runs over real verbs in `tests/rdma_bursts.rs` (a header-data split).
    use super::*;
    use crate::config::StageMode;
    use crate::plan::StagePlan;
    use std::cell::Cell;

    fn staging(always: bool, split: Option<usize>) -> SlotStaging {
        SlotStaging {
            region: RegionId(7),
            stage: StagePlan {
                split_header_bytes: split,
                gpu: Some(0),
                mode: StageMode::Copy,
            },
            always,
        }
    }

    fn refused() -> Result<&'static str, VerbsError> {
        Err(VerbsError::Call {
            what: "registering GPU memory",
            detail: "no dma-buf; ibv_reg_mr: Bad address".into(),
        })
    }

    #[test]
    fn gpu_memory_is_registered_when_the_nic_can_and_staged_when_it_cannot() {
        let auto = staging(false, None);
        let tried = Cell::new(0);
        let direct = || {
            tried.set(tried.get() + 1);
            Ok("gpu")
        };
        assert_eq!(
            reach(Some(&auto), GpuMemoryPath::Auto, direct, |_| Ok("staging")).unwrap(),
            Reach::Direct("gpu")
        );
        assert_eq!(tried.get(), 1);
        match reach(Some(&auto), GpuMemoryPath::Auto, refused, |s| {
            assert_eq!(s.region, RegionId(7));
            Ok("staging")
        })
        .unwrap()
        {
            Reach::Staged("staging", why) => assert!(
                why.contains("cannot register the GPU memory")
                    && why.contains("Bad address")
                    && why.contains("gpu_memory_path: direct"),
                "{why}"
            ),
            other => panic!("expected staging, got {other:?}"),
        }
        // Nothing to fall back to: the failure is the connection's.
        let e = reach(None, GpuMemoryPath::Auto, refused, |_| Ok("staging")).unwrap_err();
        assert!(e.to_string().contains("Bad address"), "{e}");
        // A staging region that cannot be registered either fails the connection.
        assert!(reach(Some(&auto), GpuMemoryPath::Auto, refused, |_| refused()).is_err());
    }

    #[test]
    fn splits_and_staged_paths_never_try_the_gpu_registration() {
        for (s, path, says) in [
            (
                staging(true, Some(64)),
                GpuMemoryPath::Auto,
                "splits headers",
            ),
            (
                staging(true, None),
                GpuMemoryPath::Staged,
                "gpu_memory_path is staged",
            ),
        ] {
            let got = reach(
                Some(&s),
                path,
                || -> Result<&str, VerbsError> { panic!("direct registration tried") },
                |_| Ok("staging"),
            )
            .unwrap();
            match got {
                Reach::Staged("staging", why) => assert!(why.contains(says), "{why}"),
                other => panic!("expected staging, got {other:?}"),
            }
        }
    }
}
