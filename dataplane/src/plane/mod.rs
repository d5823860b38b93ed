//! The running data plane: memory, engine, workers, stats thread and queue handles.

#![forbid(unsafe_code)]

mod change;
mod gpu;
mod handler;
mod iq;
mod queues;
pub mod replay;
mod spead;
mod spead_send;
mod start;
mod stats;
mod stream;

pub use change::{AddedQueues, ChangeError, ChangeReport, RemovedQueue};
pub use handler::{Handler, HandlerError, HandlerQueues, HandlerTx};
pub use iq::{IqGpuBatch, IqStream};
pub use queues::{RecvError, RxQueue, SendError, TxFailure, TxQueue};
pub use spead::SpeadStream;
pub use spead_send::{HeapItem, SpeadSendCounters, SpeadSendError, SpeadSender};
pub use stream::Stream;

use crate::affinity::{self, PinError};
use crate::burst::Burst;
use crate::config::{Config, Direction, FlowConfig};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::engine::{
    ConnectionError, Connections, Engine, EngineError, Established, Link, LinkStatus, StreamState,
    StreamStats,
};
use crate::hugepages::PreflightError;
use crate::memory::{MemoryError, RegionId, RegionSet};
use crate::plan::rdma::CONNECTION_BURST;
use crate::plan::{Plan, PlanError, ProtocolPlan};
use crate::stats::{QueueCounters, Snapshot};
use crate::steering::{FlowError, FlowHandle, InterfaceSteering};
use crate::worker::{self, RxTask, Task, TxTask, WorkerControl, WorkerFailed, WorkerHealth};
use stats::{SeriesRecording, StatsThread, snapshot};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

/// Bursts a connection's rings hold between worker and application: the default
/// `ring_packets` in bursts of a connection's size.
fn connection_ring_bursts() -> usize {
    crate::plan::ring_bursts(
        crate::config::DEFAULT_RING_PACKETS,
        crate::plan::rdma::CONNECTION_BURST as u32,
    )
}

/// Why a data plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A configured core cannot be used on this machine.
    #[error("{key}: cpu_core {core} is not available on this machine (usable cores: {usable:?})")]
    MissingCore {
        /// Key path naming the core.
        key: String,
        /// The core.
        core: u32,
        /// Cores this process may use.
        usable: Vec<u32>,
    },
    /// Not enough huge pages (checked before anything is allocated).
    #[error(transparent)]
    Hugepages(#[from] PreflightError),
    /// A memory region could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A worker could not be pinned.
    #[error("worker: {0}")]
    Pin(#[from] PinError),
    /// A thread could not be spawned.
    #[error("cannot start thread: {0}")]
    Spawn(std::io::Error),
    /// The metrics endpoint could not listen (`metrics.listen`), or OTLP export could not
    /// start (`metrics.otlp_endpoint`).
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The configuration cannot be run as planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// An RX queue's capture file could not be created.
    #[error("interface `{interface}` RX queue {queue}: {source}")]
    Capture {
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: QueueId,
        /// Why.
        source: crate::capture::CaptureError,
    },
    /// A worker has `delivery: handler` queues and the application gave no handler
    /// (started with [`DataPlane::start`] rather than [`DataPlane::start_with_handlers`]).
    #[error(
        "core {core} serves `delivery: handler` queues ({queues}); start the data plane with a handler for it (DataPlane::start_with_handlers) or make them `delivery: ring`"
    )]
    NoHandler {
        /// The worker's core.
        core: u32,
        /// Its handler queues, for the message.
        queues: String,
    },
    /// The application's handler factory refused a worker's queues.
    #[error("core {core}'s handler: {source}")]
    Handler {
        /// The worker's core.
        core: u32,
        /// The factory's reason.
        source: HandlerError,
    },
    /// An RX queue's GPU stage could not be set up.
    #[error("interface `{interface}` RX queue {queue}: {source}")]
    Stage {
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: QueueId,
        /// The GPU's error.
        source: gpudirect::GpuError,
    },
}

/// Opens the capture sink of an RX queue.
///
/// A queue that delivers packets in GPU memory gets a sink that writes through cuFile
/// (GPUDirect Storage); in a build without CUDA its packets are counted as `not_host`.
fn open_capture(
    interface: &str,
    queue: QueueId,
    c: &crate::config::CaptureSpec,
    gpu: Option<u32>,
    transient: Option<Arc<crate::capture::TransientTrigger>>,
) -> Result<crate::capture::CaptureSink, StartError> {
    let format = crate::capture::CaptureFormat::from_name(&c.format)
        .expect("validated by the configuration parser");
    let mut cfg = crate::capture::CaptureConfig::new(&c.path, format);
    cfg.queue_bytes = c.queue_mb as usize * (1 << 20);
    let failed = |source| StartError::Capture {
        interface: interface.to_owned(),
        queue,
        source,
    };
    if let (Some(t), Some(trigger)) = (&c.transient, transient) {
        let tcfg = crate::capture::TransientConfig {
            path: c.path.clone().into(),
            format,
            keep_bytes: t.keep_mb as usize * (1 << 20),
            keep_ns: t.keep_ms * 1_000_000,
            before_ns: t.before_ms * 1_000_000,
            after_ns: t.after_ms * 1_000_000,
            trigger_on: t
                .trigger_on
                .as_ref()
                .map(|(offset, bytes)| crate::capture::TriggerMatch {
                    offset: *offset,
                    bytes: bytes.clone(),
                }),
            keep_in: t.keep_in.unwrap_or(crate::config::MemoryKind::Host),
            // Page-locked chunks of a queue in host memory are made in GPU 0's context
            // (portable: every GPU can read them).
            gpu: gpu.unwrap_or(0),
        };
        let sink = crate::capture::CaptureSink::create_transient(&tcfg, trigger).map_err(failed)?;
        tracing::info!(
            "interface `{interface}`: RX queue {queue} keeps its last {} MiB in {} memory and writes {} ms before to {} ms after each trigger to {}_N ({})",
            t.keep_mb,
            tcfg.keep_in.name(),
            t.before_ms,
            t.after_ms,
            c.path,
            c.format
        );
        return Ok(sink);
    }
    #[cfg(feature = "cuda")]
    if let Some(ordinal) = gpu {
        let sink = crate::capture::CaptureSink::create_gpu(&cfg, ordinal).map_err(failed)?;
        tracing::info!(
            "interface `{interface}`: RX queue {queue} captured from GPU {ordinal} memory to {} ({}) through cuFile by a writer thread",
            c.path,
            c.format
        );
        return Ok(sink);
    }
    let _ = gpu;
    let sink = crate::capture::CaptureSink::create(&cfg).map_err(failed)?;
    tracing::info!(
        "interface `{interface}`: RX queue {queue} captured to {} ({}) by a writer thread",
        c.path,
        c.format
    );
    Ok(sink)
}

struct WorkerHandle {
    core: u32,
    control: Arc<WorkerControl>,
    health: Arc<WorkerHealth>,
    thread: Option<JoinHandle<()>>,
}

/// A running data plane. Dropping it shuts it down.
///
/// ```
/// use dataplane::{DataPlane, RecvError, packet::UdpFrame};
/// use std::time::Duration;
///
/// let yaml = r#"
/// dataplane:
///   cfg:
///     version: 1
///     stream_type: raw
///     master_core: 0
///     loopback: "sw"
///     memory_regions:
///     - {name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}
///     interfaces:
///     - name: loop0
///       address: loopback
///       tx: {queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]}
///       rx: {queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 100, memory_regions: [bufs]}]}
/// "#;
/// let config = dataplane::config::load_str(yaml, "example").unwrap().config;
/// let mut plane = DataPlane::start(&config).unwrap();
/// let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
/// let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
///
/// let frame = UdpFrame::new("10.0.0.1:4096".parse().unwrap(), "10.0.0.2:5000".parse().unwrap());
/// let mut burst = tx.alloc(1).unwrap();
/// let len = frame.write(b"hello", burst.buffer_mut(0, 0).unwrap()).unwrap();
/// burst.set_len(0, 0, len);
/// tx.send_within(burst, Duration::from_secs(1)).unwrap();
///
/// let burst = rx.recv(Duration::from_secs(5)).unwrap().expect("the frame");
/// let view = dataplane::packet::parse(burst.data(0, 0).unwrap()).unwrap();
/// assert_eq!(view.payload, b"hello");
/// drop(burst);
///
/// plane.shutdown().unwrap();
/// assert_eq!(rx.recv(Duration::from_secs(1)).err(), Some(RecvError::Stopped));
/// ```
pub struct DataPlane {
    /// The triggers of the RX queues' transient buffers.
    transient_triggers: Vec<Arc<crate::capture::TransientTrigger>>,
    config: Config,
    engine: Arc<dyn Engine>,
    steering: Vec<Arc<InterfaceSteering>>,
    workers: Vec<WorkerHandle>,
    counters: CounterList,
    stats: Option<StatsThread>,
    metrics: Option<crate::metrics::MetricsServer>,
    /// What the metrics endpoint and the OTLP exporter read (with `metrics`).
    sources: Option<crate::metrics::SharedSources>,
    /// Pushes the metrics over OTLP (`metrics.otlp_endpoint`).
    #[cfg(feature = "otlp")]
    otlp: Option<crate::metrics::OtlpExporter>,
    // Behind locks so the plane is `Sync` (accept and connect from several threads);
    // taking a queue needs `&mut self`, so they are never contended.
    rx_queues: Mutex<BTreeMap<(usize, QueueId), RxQueue>>,
    tx_queues: Mutex<BTreeMap<(usize, QueueId), TxQueue>>,
    regions: Arc<RegionSet>,
    plan: Plan,
    /// Per connection slot (interface index, slot): its RX and TX counters.
    slot_counters: BTreeMap<(usize, usize), (Arc<QueueCounters>, Arc<QueueCounters>)>,
    /// Each packet queue's retirement ([`DataPlane::change`] removes queues with it).
    retirements: BTreeMap<QueueKey, Arc<crate::worker::Retirement>>,
}

/// Every queue's counters, in the order queues were made (a live change appends).
type CounterList = Arc<arc_swap::ArcSwap<Vec<(QueueLabel, Arc<QueueCounters>)>>>;

/// A packet queue: interface index, true for TX, queue id.
type QueueKey = (usize, bool, QueueId);

#[derive(Clone)]
struct QueueLabel {
    interface: String,
    direction: Direction,
    queue: QueueId,
}

impl DataPlane {
    fn spawn_worker(
        &mut self,
        core: u32,
        tasks: Vec<Task>,
        health: Arc<WorkerHealth>,
    ) -> Result<(), StartError> {
        let control = Arc::new(WorkerControl::default());
        control
            .time_busy_passes
            .store(self.config.metrics.is_some(), Ordering::Relaxed);
        let (ready_tx, ready_rx) = mpsc::channel();
        let ctl = control.clone();
        let engine = self.engine.clone();
        let name = format!("dp-worker-{core}");
        let worker_health = health.clone();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Err(e) = affinity::pin_current_thread(core) {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                engine.worker_thread(true);
                let _ = ready_tx.send(Ok(()));
                worker::run_guarded(tasks, &ctl, &name, &worker_health);
                engine.worker_thread(false);
            })
            .map_err(StartError::Spawn)?;
        self.workers.push(WorkerHandle {
            core,
            control,
            health,
            thread: Some(thread),
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(StartError::Spawn(std::io::Error::other(format!(
                "worker for core {core} exited during start"
            )))),
        }
    }

    /// Adds an RX flow rule to `interface` while traffic flows. It has the lowest priority
    /// (after the static flows and earlier dynamic ones); flow id 0 gets a free id. Returns
    /// once every worker steers with it.
    pub fn add_flow(&self, interface: &str, flow: FlowConfig) -> Result<FlowHandle, FlowError> {
        let i = self
            .config
            .interface_index(interface)
            .ok_or_else(|| FlowError::UnknownInterface(interface.to_owned()))?;
        self.steering[i].add_flow(flow)
    }

    /// Removes a flow added with [`DataPlane::add_flow`]. When it returns, every burst the
    /// application receives afterwards was steered without it.
    pub fn remove_flow(&self, handle: FlowHandle) -> Result<(), FlowError> {
        self.steering
            .get(handle.port as usize)
            .ok_or_else(|| FlowError::UnknownInterface(format!("#{}", handle.port)))?
            .remove_flow(handle.flow_id)
    }

    /// The current flow-rule epoch of `interface` (see [`Burst::steering_epoch`]).
    pub fn steering_epoch(&self, interface: &str) -> Option<u64> {
        let i = self.config.interface_index(interface)?;
        Some(self.steering[i].epoch())
    }

    /// The flow rules in effect on `interface` (static, then dynamic).
    pub fn flows(&self, interface: &str) -> Option<Vec<FlowConfig>> {
        let i = self.config.interface_index(interface)?;
        Some(self.steering[i].flows())
    }

    /// The configuration it runs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Regions an engine receives into without copying (their buffers are lent to the
    /// engine's own pool, e.g. a DPDK mbuf pool over external memory).
    pub fn zero_copy_regions(&self) -> Vec<String> {
        self.plan.lent_regions()
    }

    /// The plan it started from.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The region set bursts of this plane come from.
    pub fn regions(&self) -> &Arc<RegionSet> {
        &self.regions
    }

    fn connection_engine(&self) -> Result<&dyn Connections, ConnectionError> {
        self.engine
            .connections()
            .ok_or(ConnectionError::NotConnections(self.engine.name()))
    }

    /// Waits up to `timeout` for the next connection accepted on server interface
    /// `interface` (engines whose queues are connections: `roce://`). A request the
    /// server's rules refused comes back as [`ConnectionError::Rejected`].
    pub fn accept(&self, interface: &str, timeout: Duration) -> Result<Stream, ConnectionError> {
        let e = self.connection_engine()?.accept(interface, timeout)?;
        self.attach(e)
    }

    /// Connects client interface `interface` to `remote`, retrying a server that refuses
    /// or cannot be reached every `socket_config.retry_connect_s` for up to 30 s.
    pub fn connect(&self, interface: &str, remote: SocketAddr) -> Result<Stream, ConnectionError> {
        self.connect_within(interface, remote, Duration::from_secs(30), &|| false)
    }

    /// As [`DataPlane::connect`], retrying for up to `budget` (so the start order of
    /// server and client does not matter) or until `stop` returns true. A server that
    /// rejects the client is final.
    pub fn connect_within(
        &self,
        interface: &str,
        remote: SocketAddr,
        budget: Duration,
        stop: &dyn Fn() -> bool,
    ) -> Result<Stream, ConnectionError> {
        let e = self
            .connection_engine()?
            .connect_within(interface, remote, budget, stop)?;
        self.attach(e)
    }

    /// Connections established and not yet retired.
    pub fn connections(&self) -> usize {
        self.engine.connections().map_or(0, |c| c.live())
    }

    /// Runs an established connection: its ports become an RX and a TX task on the
    /// worker of its core, with the slot's counters; the application gets the queues.
    fn attach(&self, e: Established) -> Result<Stream, ConnectionError> {
        let Some(worker) = self.workers.iter().find(|w| w.core == e.core) else {
            return Err(ConnectionError::NoWorker {
                interface: e.interface_name,
                core: e.core,
            });
        };
        let (rx_counters, tx_counters) = self
            .slot_counters
            .get(&(e.interface, e.slot))
            .cloned()
            .unwrap_or_default();
        let (port, queue) = (PortIndex(e.interface as u16), QueueId(e.slot as u16));
        let (rx_producer, rx_consumer) = rtrb::RingBuffer::new(connection_ring_bursts());
        let (tx_producer, tx_consumer) = rtrb::RingBuffer::new(connection_ring_bursts());
        let rx_task = RxTask::new(
            e.rx,
            rx_producer,
            self.regions.clone(),
            port,
            queue,
            CONNECTION_BURST,
            // Messages go to the application as soon as the connection is idle.
            Some(Duration::ZERO),
            self.engine.capabilities().rx_overflow,
            rx_counters,
        );
        let rx_task = match e.rx_stage {
            Some(stage) => rx_task.with_stage(stage),
            None => rx_task,
        };
        let tx_task = TxTask::new(e.tx, tx_consumer, tx_counters);
        let tx_task = match e.tx_stage {
            Some(stage) => tx_task.with_stage(stage),
            None => tx_task,
        };
        let send_region = e.tx_regions.first().copied();
        worker
            .control
            .attach(vec![Task::Rx(rx_task), Task::Tx(tx_task)]);
        Ok(Stream {
            rx: Mutex::new(RxQueue {
                ring: rx_consumer,
                interface: e.interface_name.clone(),
                queue,
                reorder: None,
                reorder_error: None,
                health: worker.health.clone(),
                stage_health: None,
                link: None,
                capture: None,
                transient_trigger: None,
                retirement: None,
            }),
            tx: Mutex::new(TxQueue {
                ring: tx_producer,
                regions: self.regions.clone(),
                segment_regions: e.tx_regions,
                port,
                interface: e.interface_name.clone(),
                queue,
                batch_size: CONNECTION_BURST,
                health: worker.health.clone(),
                all_regions_host: self.regions.iter().all(|r| r.host_accessible()),
                refuses_gpu_memory: false,
                link: None,
                lateness: None,
                sends_at_time: false,
                retirement: None,
            }),
            state: e.state,
            worker_failed: std::sync::OnceLock::new(),
            send_region,
            interface: e.interface_name,
            slot: e.slot,
            #[cfg(feature = "rdma")]
            qp: e.qp,
        })
    }

    /// The engine's name.
    pub fn engine_name(&self) -> &'static str {
        self.engine.name()
    }

    /// Where flow steering runs: "software", or "rte_flow" when the NIC does it.
    pub fn steering(&self) -> String {
        self.engine.steering()
    }

    /// Cores running workers.
    pub fn worker_cores(&self) -> Vec<u32> {
        self.workers.iter().map(|w| w.core).collect()
    }

    /// Takes the application's end of an RX queue (each can be taken once).
    pub fn take_rx_queue(&mut self, interface: &str, queue: u16) -> Option<RxQueue> {
        let i = self.config.interface_index(interface)?;
        self.rx_queues
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(i, QueueId(queue)))
    }

    /// Takes an RX queue whose configuration has `protocol: {spead: ...}` as a stream of
    /// chunks (the queue is then taken: each can be taken once, as bursts or as chunks).
    /// `None` when the queue has no such protocol or was taken.
    pub fn take_spead_stream(&mut self, interface: &str, queue: u16) -> Option<SpeadStream> {
        let Some(ProtocolPlan::Spead(plan)) = self.queue_protocol(interface, Direction::Rx, queue)
        else {
            return None;
        };
        let rx = self.take_rx_queue(interface, queue)?;
        match SpeadStream::new(rx, &plan, &self.regions) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("SPEAD queue {interface}/{queue}: {e}");
                None
            }
        }
    }

    /// Takes an RX queue whose configuration has `protocol: {vrt: ...}` or
    /// `{ecpri_uplane: ...}` as a stream of decoded samples (see [`IqStream`]). `None`
    /// when the queue has no such protocol or was taken.
    pub fn take_iq_stream(&mut self, interface: &str, queue: u16) -> Option<IqStream> {
        let Some(ProtocolPlan::Iq(plan)) = self.queue_protocol(interface, Direction::Rx, queue)
        else {
            return None;
        };
        let rx = self.take_rx_queue(interface, queue)?;
        match IqStream::new(rx, &plan, &self.regions) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("radio queue {interface}/{queue}: {e}");
                None
            }
        }
    }

    /// Takes a TX queue whose configuration has `protocol: {spead: ...}` as a sender of
    /// SPEAD heaps (see [`SpeadSender`]; the queue is then taken). `None` when the queue
    /// has no such protocol or was taken.
    pub fn take_spead_sender(&mut self, interface: &str, queue: u16) -> Option<SpeadSender> {
        let Some(ProtocolPlan::SpeadSend(plan)) =
            self.queue_protocol(interface, Direction::Tx, queue)
        else {
            return None;
        };
        let tx = self.take_tx_queue(interface, queue)?;
        match SpeadSender::new(tx, &plan) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!("SPEAD TX queue {interface}/{queue}: {e}");
                None
            }
        }
    }

    /// The planned protocol of a queue.
    fn queue_protocol(
        &self,
        interface: &str,
        direction: Direction,
        queue: u16,
    ) -> Option<ProtocolPlan> {
        let i = self.config.interface_index(interface)?;
        self.plan
            .queues
            .iter()
            .find(|q| q.interface == i && q.direction == direction && q.id == QueueId(queue))?
            .protocol
            .clone()
    }

    /// Takes the application's end of a TX queue (each can be taken once).
    pub fn take_tx_queue(&mut self, interface: &str, queue: u16) -> Option<TxQueue> {
        let i = self.config.interface_index(interface)?;
        self.tx_queues
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(i, QueueId(queue)))
    }

    /// Current counters of every queue.
    pub fn snapshot(&self) -> Snapshot {
        snapshot(&self.counters.load())
    }

    /// Fires every RX queue's transient buffer (`capture.transient`) now; returns how many
    /// there are. Each opens its window the next time its queue is polled.
    pub fn trigger_transients(&self) -> usize {
        for t in &self.transient_triggers {
            t.fire();
        }
        self.transient_triggers.len()
    }

    /// Makes the stats thread print a progress line per second on stderr for a run of
    /// `total_seconds` (0 stops printing).
    pub fn show_progress(&self, total_seconds: u64) {
        if let Some(s) = &self.stats {
            s.control
                .progress_total_s
                .store(total_seconds, Ordering::Relaxed);
        }
    }

    /// Starts recording a point per second (rates and drops, in all and per queue) for
    /// [`DataPlane::take_series`]; restarts it when already recording.
    pub fn record_series(&self) {
        if let Some(s) = &self.stats {
            *s.control.series.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(SeriesRecording::new(self.snapshot()));
        }
    }

    /// The points recorded since [`DataPlane::record_series`], the last one up to now
    /// (a partial interval, when longer than 100 ms); recording stops.
    pub fn take_series(&self) -> Vec<crate::stats::SeriesPoint> {
        let taken = self.stats.as_ref().and_then(|s| {
            s.control
                .series
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
        });
        let Some(mut r) = taken else {
            return Vec::new();
        };
        if r.last_at.elapsed() > Duration::from_millis(100) {
            r.advance(self.snapshot());
        }
        r.points
    }

    /// Per worker: its core and what it did so far (passes, busy passes, thread id).
    pub fn worker_activity(&self) -> Vec<(u32, &crate::worker::WorkerActivity)> {
        self.workers
            .iter()
            .map(|w| (w.core, &w.control.activity))
            .collect()
    }

    /// Per worker: its core and a reading of its CPU use now (see
    /// [`crate::worker::WorkerUse::between`]).
    pub fn worker_readings(&self) -> Vec<crate::worker::WorkerReading> {
        self.worker_activity()
            .into_iter()
            .map(|(core, a)| crate::worker::WorkerReading::now(core, a))
            .collect()
    }

    /// Where the metrics endpoint listens, when it runs (`metrics.listen`).
    pub fn metrics_address(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.address())
    }

    /// What the metrics endpoint reads: every queue with its worker's core and link, the
    /// regions, the workers.
    fn metrics_sources(&self) -> crate::metrics::Sources {
        let core_of = |interface: &str, direction: Direction, queue: QueueId| {
            let i = self.config.interface_index(interface);
            self.plan
                .queues
                .iter()
                .find(|q| Some(q.interface) == i && q.direction == direction && q.id == queue)
                .map(|q| q.core)
                .or_else(|| {
                    let r = self.plan.rdma().iter().find(|r| Some(r.interface) == i)?;
                    Some(r.slots.get(queue.index())?.core)
                })
                .unwrap_or(self.config.master_core)
        };
        crate::metrics::Sources {
            engine: self.engine.clone(),
            queues: self
                .counters
                .load()
                .iter()
                .map(|(l, c)| {
                    let port =
                        PortIndex(self.config.interface_index(&l.interface).unwrap_or(0) as u16);
                    crate::metrics::QueueSource {
                        interface: l.interface.clone(),
                        direction: l.direction,
                        queue: l.queue.0,
                        core: core_of(&l.interface, l.direction, l.queue),
                        counters: c.clone(),
                        link: self.engine.link(port, l.direction, l.queue),
                    }
                })
                .collect(),
            regions: self.regions.clone(),
            // Workers a live change stopped are left out.
            workers: self
                .workers
                .iter()
                .filter(|w| w.thread.is_some())
                .map(|w| (w.core, w.control.clone()))
                .collect(),
            transient_triggers: self.transient_triggers.clone(),
        }
    }

    /// Asks RX workers to deliver partial bursts as soon as their queue is idle.
    pub fn flush(&self) {
        for w in &self.workers {
            w.control.flush.store(true, Ordering::Relaxed);
        }
    }

    /// Workers that died so far (a panic caught at the worker's top).
    pub fn worker_failures(&self) -> Vec<WorkerFailed> {
        self.workers
            .iter()
            .filter_map(|w| w.health.failure().cloned())
            .collect()
    }

    /// Stops every worker and waits for it. Bounded: workers check their flag every pass.
    /// Returns the failures of workers that died while running.
    pub fn shutdown(mut self) -> Result<(), Vec<WorkerFailed>> {
        self.stop_workers();
        let failed = self.worker_failures();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed)
        }
    }

    fn stop_workers(&mut self) {
        drop(self.metrics.take());
        if let Some(mut s) = self.stats.take() {
            s.stop();
        }
        for w in &self.workers {
            w.control.stop.store(true, Ordering::Relaxed);
        }
        // No lock is held here: each handle owns its thread.
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
            // After the join: what the worker delivered is in the rings before queues
            // see the stop.
            w.health.stop();
        }
        // Last: its final push carries the workers' last counts.
        #[cfg(feature = "otlp")]
        drop(self.otlp.take());
    }
}

impl Drop for DataPlane {
    fn drop(&mut self) {
        self.stop_workers();
    }
}
