//! Starting a data plane: plan the configuration, then carry the plan out one resource at
//! a time (cores, huge pages, memory, steering, the engine, queues and their tasks,
//! workers, the stats thread, metrics). Each step's result is owned by a local or by the
//! plane, so a failing step drops what the earlier ones made, in reverse order.

use super::{DataPlane, QueueLabel, RxQueue, StartError, TxQueue, open_capture};
use crate::config::{Config, Direction, RxConfig};
use crate::descriptor::{PortIndex, QueueId};
use crate::engine::{self, Engine, EngineError};
use crate::hugepages;
use crate::memory::RegionSet;
use crate::plan::{EthSrc, Plan, QueuePlan};
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use crate::worker::{Retirement, RxTask, Task, TxTask, WorkerHealth};
use crate::{affinity, burst::Burst};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

impl DataPlane {
    /// Plans the configuration, allocates memory, creates the engine and starts one pinned
    /// worker per core. Nothing stays allocated or running when it fails.
    pub fn start(config: &Config) -> Result<Self, StartError> {
        Self::start_planned(config, None)
    }

    /// As [`DataPlane::start`], with run-to-completion handlers: `make` is called once per
    /// worker core that serves `delivery: handler` queues, with what it serves, and the
    /// handler it returns runs on that worker (see [`super::Handler`]). Those queues have
    /// no application end ([`DataPlane::take_rx_queue`] gives `None` for them).
    /// A factory's error stops the start ([`StartError::Handler`]).
    pub fn start_with_handlers(
        config: &Config,
        mut make: impl FnMut(
            &super::HandlerQueues<'_>,
        ) -> Result<Box<dyn super::Handler>, super::HandlerError>,
    ) -> Result<Self, StartError> {
        Self::start_planned(config, Some(&mut make))
    }

    fn start_planned(
        config: &Config,
        make: Option<&mut MakeHandler<'_>>,
    ) -> Result<Self, StartError> {
        let (config, plan) = plan_for_this_machine(config)?;
        Self::execute(&config, plan, make)
    }

    /// Carries out `plan` (made from `config`), with handlers from `make`.
    fn execute(
        config: &Config,
        plan: Plan,
        mut make: Option<&mut MakeHandler<'_>>,
    ) -> Result<Self, StartError> {
        check_cores(&plan)?;
        check_handlers(&plan, make.is_some())?;
        prepare_hugepages(&plan)?;
        let regions = Arc::new(RegionSet::from_plan(&plan.regions)?);
        let steering = steering(config, &plan);
        let engine = engine::create(&plan, &regions, &steering)?;
        let mut queues = QueueBuild::new(&engine, &regions);
        for q in &plan.queues {
            queues.add(q)?;
        }
        queues.add_connection_slots(&plan);
        let QueueBuild {
            mut tasks,
            mut health,
            counters,
            mut stage_tasks,
            rx_queues,
            tx_queues,
            slot_counters,
            retirements,
            ..
        } = queues;
        let transient_triggers = rx_queues
            .values()
            .filter_map(|q| q.transient_trigger.clone())
            .collect();
        let mut plane = Self {
            transient_triggers,
            config: config.clone(),
            engine,
            steering,
            workers: Vec::new(),
            counters: Arc::new(arc_swap::ArcSwap::from_pointee(counters)),
            stats: None,
            metrics: None,
            sources: None,
            #[cfg(feature = "otlp")]
            otlp: None,
            rx_queues: Mutex::new(rx_queues),
            tx_queues: Mutex::new(tx_queues),
            regions: regions.clone(),
            plan,
            slot_counters,
            retirements,
        };
        for c in plane.plan.cores.clone() {
            let mut core_tasks: Vec<Task> = c
                .queues
                .iter()
                .filter_map(|&i| tasks[i].take())
                .chain(c.stages.iter().filter_map(|i| stage_tasks.remove(i)))
                .collect();
            if let (true, Some(make)) = (c.handler, make.as_deref_mut()) {
                core_tasks = plane.with_handler(&c, core_tasks, make)?;
            }
            let health = health.remove(&c.core).unwrap_or_default();
            plane.spawn_worker(c.core, core_tasks, health)?;
        }
        plane.stats = Some(super::stats::StatsThread::spawn(
            config.master_core,
            plane.counters.clone(),
        )?);
        if config.metrics.is_some() {
            plane.sources = Some(Arc::new(arc_swap::ArcSwap::from_pointee(
                plane.metrics_sources(),
            )));
        }
        if let (Some(listen), Some(sources)) = (
            config.metrics.as_ref().and_then(|m| m.listen.as_deref()),
            &plane.sources,
        ) {
            plane.metrics = Some(crate::metrics::MetricsServer::start(
                listen,
                sources.clone(),
            )?);
        }
        if let Some(m) = &config.metrics
            && let Some(endpoint) = &m.otlp_endpoint
        {
            #[cfg(feature = "otlp")]
            {
                let sources = plane.sources.clone().expect("made above with `metrics`");
                plane.otlp = Some(crate::metrics::OtlpExporter::start(
                    endpoint,
                    std::time::Duration::from_millis(m.otlp_interval_ms),
                    sources,
                )?);
            }
            #[cfg(not(feature = "otlp"))]
            return Err(crate::metrics::MetricsError {
                address: endpoint.to_string(),
                reason: "metrics.otlp_endpoint needs a build with the `otlp` feature".into(),
            }
            .into());
        }
        Ok(plane)
    }
}

/// Makes the handler of one worker (see [`DataPlane::start_with_handlers`]).
type MakeHandler<'a> = dyn FnMut(&super::HandlerQueues<'_>) -> Result<Box<dyn super::Handler>, super::HandlerError>
    + 'a;

/// Handler queues need a handler: refused before anything is allocated.
fn check_handlers(plan: &Plan, have_handlers: bool) -> Result<(), StartError> {
    if have_handlers {
        return Ok(());
    }
    match plan.cores.iter().find(|c| c.handler) {
        None => Ok(()),
        Some(c) => Err(StartError::NoHandler {
            core: c.core,
            queues: c
                .queues
                .iter()
                .map(|&i| &plan.queues[i])
                .filter(|q| q.delivery == crate::config::Delivery::Handler)
                .map(|q| format!("{} {} {}", q.interface_name, q.direction.name(), q.id))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

impl DataPlane {
    /// The tasks of worker `c` with its handler: its handler queues' application ends
    /// move into the handler's job, which runs between the RX and the TX tasks.
    fn with_handler(
        &mut self,
        c: &crate::plan::CorePlan,
        tasks: Vec<Task>,
        make: &mut MakeHandler<'_>,
    ) -> Result<Vec<Task>, StartError> {
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        let rx_queues = self.rx_queues.get_mut().unwrap_or_else(|e| e.into_inner());
        let tx_queues = self.tx_queues.get_mut().unwrap_or_else(|e| e.into_inner());
        for q in c.queues.iter().map(|&i| &self.plan.queues[i]) {
            if q.delivery != crate::config::Delivery::Handler {
                continue;
            }
            match q.direction {
                Direction::Rx => rx.extend(rx_queues.remove(&(q.interface, q.id))),
                Direction::Tx => tx.extend(tx_queues.remove(&(q.interface, q.id))),
            }
        }
        let served = super::HandlerQueues {
            core: c.core,
            rx: &rx,
            tx: &tx,
        };
        let handler = make(&served).map_err(|source| StartError::Handler {
            core: c.core,
            source,
        })?;
        let job = super::handler::HandlerJob { handler, rx, tx };
        let (mut ordered, tx_tasks): (Vec<Task>, Vec<Task>) =
            tasks.into_iter().partition(|t| !matches!(t, Task::Tx(_)));
        ordered.push(Task::Job(Box::new(job)));
        ordered.extend(tx_tasks);
        Ok(ordered)
    }
}

/// Each interface's flow steering, from its `rx` rules: in software where the engine has
/// no hardware steering.
fn steering(config: &Config, plan: &Plan) -> Vec<Arc<InterfaceSteering>> {
    let software = !plan.capabilities.hardware_steering;
    config
        .interfaces
        .iter()
        .enumerate()
        .map(|(i, iface)| {
            let rx = iface.rx.clone().unwrap_or_else(RxConfig::empty);
            Arc::new(InterfaceSteering::new(i as u16, &iface.name, &rx, software))
        })
        .collect()
}

/// The queues' application ends, worker tasks and counters, built queue by queue before
/// any worker starts.
pub(super) struct QueueBuild<'a> {
    pub(super) engine: &'a Arc<dyn Engine>,
    pub(super) regions: &'a Arc<RegionSet>,
    /// Worker tasks by queue index (taken as the workers start).
    pub(super) tasks: Vec<Option<Task>>,
    /// Each worker core's health, shared with the queue handles it serves.
    pub(super) health: BTreeMap<u32, Arc<WorkerHealth>>,
    pub(super) counters: Vec<(QueueLabel, Arc<QueueCounters>)>,
    /// Stage tasks of queues with a `stage_core`, by queue index.
    pub(super) stage_tasks: BTreeMap<usize, Task>,
    pub(super) rx_queues: BTreeMap<(usize, QueueId), RxQueue>,
    pub(super) tx_queues: BTreeMap<(usize, QueueId), TxQueue>,
    /// Connection slots' (RX, TX) counters, kept across their connections.
    pub(super) slot_counters: BTreeMap<(usize, usize), (Arc<QueueCounters>, Arc<QueueCounters>)>,
    /// Each queue's retirement, for removing it while the plane runs.
    pub(super) retirements: BTreeMap<super::QueueKey, Arc<Retirement>>,
}

impl<'a> QueueBuild<'a> {
    pub(super) fn new(engine: &'a Arc<dyn Engine>, regions: &'a Arc<RegionSet>) -> Self {
        Self {
            engine,
            regions,
            tasks: Vec::new(),
            health: BTreeMap::new(),
            counters: Vec::new(),
            stage_tasks: BTreeMap::new(),
            rx_queues: BTreeMap::new(),
            tx_queues: BTreeMap::new(),
            slot_counters: BTreeMap::new(),
            retirements: BTreeMap::new(),
        }
    }

    /// Builds queue `q`: its counters, its ring, its application end and its task.
    pub(super) fn add(&mut self, q: &QueuePlan) -> Result<(), StartError> {
        let c = Arc::new(QueueCounters::default());
        self.counters.push((
            QueueLabel {
                interface: q.interface_name.clone(),
                direction: q.direction,
                queue: q.id,
            },
            c.clone(),
        ));
        let (producer, consumer) = rtrb::RingBuffer::new(q.ring_bursts);
        let task = match q.direction {
            Direction::Rx => self.rx(q, c, producer, consumer)?,
            Direction::Tx => self.tx(q, c, producer, consumer)?,
        };
        self.tasks.push(Some(task));
        Ok(())
    }

    /// Queue `q`'s retirement, kept for [`DataPlane::change`].
    fn retirement(&mut self, q: &QueuePlan) -> Arc<Retirement> {
        let r = Arc::new(Retirement::default());
        self.retirements
            .insert((q.interface, q.direction == Direction::Tx, q.id), r.clone());
        r
    }

    /// An RX queue: the application end reads the ring the worker's task fills.
    fn rx(
        &mut self,
        q: &QueuePlan,
        c: Arc<QueueCounters>,
        producer: rtrb::Producer<Burst>,
        consumer: rtrb::Consumer<Burst>,
    ) -> Result<Task, StartError> {
        let port = PortIndex(q.interface as u16);
        let worker_health = self.health.entry(q.core).or_default().clone();
        let timeout = (q.timeout_us > 0).then(|| Duration::from_micros(q.timeout_us));
        let transient = q
            .capture
            .as_ref()
            .and_then(|c| c.transient.as_ref())
            .map(|_| crate::capture::TransientTrigger::registered());
        let retirement = self.retirement(q);
        self.rx_queues.insert(
            (q.interface, q.id),
            RxQueue {
                ring: consumer,
                interface: q.interface_name.clone(),
                queue: q.id,
                reorder: crate::reorder::QueueReorder::for_queue(q, self.regions),
                reorder_error: None,
                health: worker_health,
                stage_health: q
                    .stage_core
                    .map(|core| self.health.entry(core).or_default().clone()),
                link: self.engine.link(port, Direction::Rx, q.id),
                transient_trigger: transient.clone(),
                retirement: Some(retirement.clone()),
                capture: match &q.capture {
                    None => None,
                    Some(c) => {
                        let gpu = q
                            .segments
                            .iter()
                            .map(|&r| self.regions.get(r))
                            .find(|r| !r.host_accessible())
                            .map(|r| r.affinity());
                        Some(open_capture(&q.interface_name, q.id, c, gpu, transient)?)
                    }
                },
            },
        );
        let mut task = RxTask::new(
            self.engine.rx_port(port, q.id, c.clone())?,
            producer,
            self.regions.clone(),
            port,
            q.id,
            q.batch,
            timeout,
            self.engine.capabilities().rx_overflow,
            c,
        )
        .with_retirement(retirement);
        if q.timestamps && self.engine.stamps_rx(port) {
            tracing::info!(
                "interface `{}`: RX queue {} carries the {} engine's receive timestamps ({})",
                q.interface_name,
                q.id,
                self.engine.name(),
                if self.engine.name() == "dpdk" {
                    "the device clock, converted to ns since the epoch"
                } else {
                    "the kernel's, SO_TIMESTAMPNS"
                }
            );
        } else if q.timestamps {
            tracing::info!(
                "interface `{}`: RX queue {} timestamps packets in software as its worker receives them (the {} engine has no NIC clock here)",
                q.interface_name,
                q.id,
                self.engine.name()
            );
            task = task.with_timestamps();
        }
        let task = match &q.stage {
            Some(stage) => {
                let stage = crate::stage::RxStage::new(self.regions, &q.segments, q.batch, stage)
                    .map_err(|source| StartError::Stage {
                    interface: q.interface_name.clone(),
                    queue: q.id,
                    source,
                })?;
                match q.stage_core {
                    None => Task::Rx(task.with_stage(stage)),
                    Some(core) => {
                        tracing::info!(
                            "interface `{}`: RX queue {} is received on core {} and staged on core {core}",
                            q.interface_name,
                            q.id,
                            q.core
                        );
                        let stage = if q.copy_cores.is_empty() {
                            stage
                        } else {
                            tracing::info!(
                                "interface `{}`: RX queue {}'s stage shares its CPU copies with cores {:?}",
                                q.interface_name,
                                q.id,
                                q.copy_cores
                            );
                            let name = format!("dp-stage-{}-{}", q.interface, q.id);
                            stage.with_copy_helpers(
                                crate::copy_helpers::CopyHelpers::spawn(&q.copy_cores, &name)
                                    .map_err(StartError::Spawn)?,
                            )
                        };
                        let (task, stage_task) = task.with_stage_task(stage);
                        self.stage_tasks
                            .insert(self.tasks.len(), Task::Stage(stage_task));
                        Task::Rx(task)
                    }
                }
            }
            None => Task::Rx(task),
        };
        Ok(task)
    }

    /// A TX queue: the worker's task sends what the application end puts in the ring.
    fn tx(
        &mut self,
        q: &QueuePlan,
        c: Arc<QueueCounters>,
        producer: rtrb::Producer<Burst>,
        consumer: rtrb::Consumer<Burst>,
    ) -> Result<Task, StartError> {
        let port = PortIndex(q.interface as u16);
        let worker_health = self.health.entry(q.core).or_default().clone();
        let retirement = self.retirement(q);
        let by_device = q.send_at_time && self.engine.sends_at_time(port);
        if by_device {
            tracing::info!(
                "interface `{}`: TX queue {} sends each packet at its time (accurate_send) through the device's send-on-timestamp",
                q.interface_name,
                q.id
            );
        }
        let lateness = (q.send_at_time && !by_device)
            .then(|| Arc::new(crate::worker::SendLateness::default()));
        self.tx_queues.insert(
            (q.interface, q.id),
            TxQueue {
                ring: producer,
                regions: self.regions.clone(),
                segment_regions: q.segments.clone(),
                port,
                interface: q.interface_name.clone(),
                queue: q.id,
                batch_size: q.batch,
                health: worker_health,
                all_regions_host: self.regions.iter().all(|r| r.host_accessible()),
                refuses_gpu_memory: q.host_memory_only
                    && !self.regions.iter().all(|r| r.host_accessible()),
                link: self.engine.link(port, Direction::Tx, q.id),
                lateness: lateness.clone(),
                sends_at_time: q.send_at_time,
                retirement: Some(retirement.clone()),
            },
        );
        let mut task = TxTask::new(self.engine.tx_port(port, q.id, c.clone())?, consumer, c)
            .with_retirement(retirement);
        if let Some(l) = lateness {
            tracing::info!(
                "interface `{}`: TX queue {} sends each packet at its time (accurate_send), in software by its worker (the engine or device has no send-on-timestamp)",
                q.interface_name,
                q.id
            );
            task = task.with_send_times(l);
        }
        if let (Some(stage), Some(staging)) = (&q.stage, q.staging) {
            let stage = crate::stage::RxStage::new(self.regions, &[staging], q.batch, stage)
                .map_err(|source| StartError::Stage {
                    interface: q.interface_name.clone(),
                    queue: q.id,
                    source,
                })?;
            tracing::info!(
                "interface `{}`: TX queue {} is staged out of GPU memory into `{}` before the {} engine sends it",
                q.interface_name,
                q.id,
                self.regions.get(staging).name(),
                self.engine.name()
            );
            task = task.with_stage(stage);
        }
        if let Some(mbps) = q.pacing_mbps {
            match self.engine.pace_tx_queue(port, q.id, mbps) {
                Ok(()) => tracing::info!(
                    "interface `{}`: TX queue {} paced by the device at {mbps} Mb/s",
                    q.interface_name,
                    q.id
                ),
                Err(why) => {
                    tracing::info!(
                        "interface `{}`: TX queue {} paced in software at {mbps} Mb/s ({why})",
                        q.interface_name,
                        q.id
                    );
                    task = task.with_pacing(mbps);
                }
            }
        }
        if q.transform_region.is_some() && self.engine.inserts_vlan_tags(port) {
            tracing::info!(
                "interface `{}`: TX queue {} leaves its {} TX flow(s) to the device (VLAN insert offload)",
                q.interface_name,
                q.id,
                q.tx_flows.len()
            );
        } else if let Some(region) = q.transform_region {
            tracing::info!(
                "interface `{}`: TX queue {} applies {} TX flow(s) in software on its worker (VLAN push, tunnel encap), on copies in `{}`",
                q.interface_name,
                q.id,
                q.tx_flows.len(),
                self.regions.get(region).name()
            );
            task = task.with_transforms(crate::steering::TxTransformer::new(&q.tx_flows), region);
        }
        let task = match q.eth_src {
            EthSrc::Off => Task::Tx(task),
            EthSrc::HeadersOnGpu => {
                // A NIC's egress flow would stamp it; a CPU cannot write GPU memory.
                tracing::warn!(
                    "interface `{}`: TX queue {} keeps its headers in device memory, so the {} engine sends them without the tx_eth_src stamp",
                    q.interface_name,
                    q.id,
                    self.engine.name()
                );
                Task::Tx(task)
            }
            EthSrc::Stamp => {
                let mac = self.engine.mac_address(port).ok_or_else(|| EngineError::Queue {
                        interface: q.interface_name.clone(),
                        direction: Direction::Tx,
                        queue: q.id,
                        reason: format!(
                            "asks for the tx_eth_src offload, but the {} engine has no MAC address for it",
                            self.engine.name()
                        ),
                    })?;
                Task::Tx(task.with_eth_src(mac))
            }
        };
        Ok(task)
    }

    /// Connection slots: an RX and a TX counter each, kept across its connections.
    fn add_connection_slots(&mut self, plan: &Plan) {
        for i in plan.rdma() {
            for n in 0..i.slots.len() {
                let mut pair = Vec::new();
                for direction in [Direction::Rx, Direction::Tx] {
                    let c = Arc::new(QueueCounters::default());
                    self.counters.push((
                        QueueLabel {
                            interface: i.name.clone(),
                            direction,
                            queue: QueueId(n as u16),
                        },
                        c.clone(),
                    ));
                    pair.push(c);
                }
                self.slot_counters
                    .insert((i.interface, n), (pair[0].clone(), pair[1].clone()));
            }
        }
    }
}

/// Before anything is allocated: removes what dead processes left (the engine's runtime
/// files when it maps huge pages of its own; files in the hugetlbfs mounts when the plan
/// maps huge pages), then checks that enough pages are free for the plan.
fn prepare_hugepages(plan: &Plan) -> Result<(), StartError> {
    if plan.capabilities.own_hugepages {
        for dir in hugepages::cleanup_dpdk_runtime_dirs(false) {
            tracing::warn!("Removed leftover DPDK runtime directory {}", dir.display());
        }
    }
    if plan.hugepages.regions.is_empty() {
        return Ok(());
    }
    let mounts = hugepages::mounts();
    let report = hugepages::cleanup(&mounts, false);
    for line in report
        .lines(false)
        .iter()
        .filter(|l| !l.starts_with("Kept"))
    {
        tracing::warn!("{line}");
    }
    let page = hugepages::default_page_size();
    let need = plan.hugepages.in_pages(page);
    let have_mount = hugepages::mount_for(page).ok().flatten().is_some();
    hugepages::check(&need, &hugepages::page_counts(), have_mount)?;
    Ok(())
}

pub(super) fn check_cores(plan: &Plan) -> Result<(), StartError> {
    let missing = |key: String, core: u32| StartError::MissingCore {
        key,
        core,
        usable: affinity::usable_cores(),
    };
    if !affinity::core_is_usable(plan.master_core) {
        return Err(missing("master_core".into(), plan.master_core));
    }
    for q in &plan.queues {
        if !affinity::core_is_usable(q.core) {
            return Err(missing(q.core_key.clone(), q.core));
        }
        for &core in q.stage_core.iter().chain(&q.copy_cores) {
            if !affinity::core_is_usable(core) {
                return Err(missing(
                    q.core_key.replace(".cpu_core", ".stage_core"),
                    core,
                ));
            }
        }
    }
    for slot in plan.rdma().iter().flat_map(|i| &i.slots) {
        if !affinity::core_is_usable(slot.core) {
            return Err(missing(slot.core_key.clone(), slot.core));
        }
    }
    Ok(())
}

/// `config` with every region that names its GPU by UUID (`affinity: GPU-…`) given that
/// GPU's ordinal; an unknown UUID fails with the GPUs present.
/// The configuration the plane keeps and its plan, as a start (and a live change) makes
/// them: regions that name their GPU by UUID get its ordinal; engines that move bytes
/// with the CPU get host staging regions for queues laid out in GPU memory (or split), so
/// region ids mean the same in the kept configuration and in the plan; GPU memory a NIC
/// would reach on an integrated GPU is refused.
pub(super) fn plan_for_this_machine(config: &Config) -> Result<(Config, Plan), StartError> {
    let resolved = resolve_gpu_uuids(config)?;
    let config = crate::plan::staging::with_staging_regions(&resolved);
    let plan = Plan::from_staged(&config)?;
    plan.check_integrated_gpus(&|r| {
        crate::sysinfo::gpu_is_integrated(r.affinity, r.gpu_uuid.as_deref())
    })?;
    Ok((config, plan))
}

fn resolve_gpu_uuids(
    config: &crate::config::Config,
) -> Result<std::borrow::Cow<'_, crate::config::Config>, crate::memory::MemoryError> {
    if config.memory_regions.iter().all(|m| m.gpu_uuid.is_none()) {
        return Ok(std::borrow::Cow::Borrowed(config));
    }
    let mut c = config.clone();
    for m in &mut c.memory_regions {
        let Some(uuid) = &m.gpu_uuid else { continue };
        #[cfg(feature = "cuda")]
        {
            m.affinity = gpudirect::ordinal_of_uuid(uuid).map_err(|e| match e {
                gpudirect::GpuError::Unsupported(reason) => crate::memory::MemoryError::NoSuchGpu {
                    name: m.name.clone(),
                    reason,
                },
                other => crate::memory::MemoryError::NeedsCuda {
                    name: m.name.clone(),
                    kind: m.kind.name(),
                    reason: other.to_string(),
                },
            })?;
        }
        #[cfg(not(feature = "cuda"))]
        return Err(crate::memory::MemoryError::NeedsCuda {
            name: m.name.clone(),
            kind: m.kind.name(),
            reason: format!("GPU {uuid}: this build has no CUDA support"),
        });
    }
    Ok(std::borrow::Cow::Owned(c))
}
