//! The start-up plan: every decision `DataPlane::start` makes, taken from a configuration
//! before anything runs. [`Plan::from_config`] is pure (no system call, no FFI, no clock):
//! the hugepage preflight, memory allocation, the engines and the workers execute the plan
//! and recompute none of it. `dataplane validate --plan FILE` prints it.
//!
//! What only the running machine knows stays out: which cores exist, the huge page size
//! and mounts, the process's DPDK file prefix, environment variables.

#![forbid(unsafe_code)]

pub mod budget;
pub mod capabilities;
pub mod change;
pub mod dpdk;
pub mod gpu;
pub mod loopback;
pub mod rdma;
pub mod socket;
pub mod staging;

mod human;
pub use human::choice_name;
mod queues;
mod slots;

use queues::queues;

pub use capabilities::{Capabilities, Overflow};

use crate::config::{Config, Direction, EngineKind, MemoryKind, ReorderKind, StageMode};
use crate::descriptor::{QueueId, RegionId};
use serde::Serialize;
use std::collections::BTreeMap;

/// Host buffers start on a cache line, so headers never straddle two lines needlessly.
pub const HOST_BUFFER_ALIGN: usize = 64;
/// GPU buffers start on 256 bytes, the alignment CUDA kernels and NICs expect.
pub const DEVICE_BUFFER_ALIGN: usize = 256;
/// The fewest bursts a queue's ring holds, so a worker and its application can each work
/// on a burst while others wait, whatever `ring_packets` and `batch_size` are.
pub const MIN_RING_BURSTS: usize = 4;

/// Bursts in a queue's ring for `ring_packets` packets in bursts of `batch` (rounded up).
///
/// Every engine holds a burst when the ring is full (backpressure), so a producer faster
/// than its consumer keeps the ring full: what it holds is then in flight all the time,
/// and its buffers are the data's cache footprint. Bounding it in packets keeps that
/// footprint independent of the region's size.
pub fn ring_bursts(ring_packets: u32, batch: u32) -> usize {
    (ring_packets.div_ceil(batch.max(1)) as usize).max(MIN_RING_BURSTS)
}

/// Distance between buffer starts of a region of `kind`: headroom plus buffer, aligned.
pub fn buffer_stride(kind: MemoryKind, headroom: usize, buf_size: usize) -> usize {
    let align = if kind == MemoryKind::Device {
        DEVICE_BUFFER_ALIGN
    } else {
        HOST_BUFFER_ALIGN
    };
    (headroom + buf_size).next_multiple_of(align)
}

/// Why a configuration cannot be planned (it passed validation, but the engine it names
/// cannot run it this way).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A region asks for `zero_copy: true` and cannot be lent.
    #[error("memory region `{region}`: zero_copy: true cannot be done: {reason}")]
    ZeroCopyImpossible {
        /// The region.
        region: String,
        /// Why not.
        reason: String,
    },
    /// A `device` region the DPDK engine cannot fill.
    #[error(
        "memory region `{region}`: kind device on a PCI NIC with the DPDK engine needs the NIC to write GPU memory by DMA, with the region as the only memory region of one RX queue (buf_size >= {}, num_bufs >= 1.5x the port's rx.descriptors plus a burst), but {reason}; on a virtual device the queue is staged through host memory instead",
        dpdk::ZERO_COPY_MIN_BUF_SIZE
    )]
    DeviceUnreachable {
        /// The region.
        region: String,
        /// Why the NIC cannot write it.
        reason: String,
    },
    /// A `device` region a NIC must reach by DMA lies on an integrated GPU.
    #[error(
        "memory region `{region}`: kind device on GPU {gpu}, an integrated GPU (it shares the system's memory and has no PCIe BAR a NIC can write into), but {via}; use kind: host_pinned, which the integrated GPU reads in place"
    )]
    IntegratedGpu {
        /// The region.
        region: String,
        /// Its GPU's ordinal.
        gpu: u32,
        /// Who must reach it.
        via: String,
    },
    /// A queue cannot be run as configured.
    #[error("interface `{interface}`: {} queue {queue}: {reason}", direction.name().to_uppercase())]
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
    /// An interface cannot be run as configured.
    #[error("interface `{interface}`: {reason}")]
    Interface {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
}

/// One memory region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegionPlan {
    /// Region name.
    pub name: String,
    /// Where it lives.
    pub kind: MemoryKind,
    /// NUMA node, or GPU ordinal for GPU kinds.
    pub affinity: u32,
    /// The GPU's UUID when the configuration names it so (`affinity: GPU-…`; resolved to
    /// `affinity` when the plane starts).
    pub gpu_uuid: Option<String>,
    /// Buffers.
    pub num_bufs: usize,
    /// Bytes per buffer the application sees.
    pub buf_size: usize,
    /// Bytes in front of every buffer (the engine's headroom when it is lent).
    pub headroom: usize,
    /// Distance between buffer starts.
    pub stride: usize,
    /// Lent to the engine's buffer pool: the engine receives into it without copying.
    pub lent: bool,
    /// Why it is not lent, where the engine lends regions at all.
    pub not_lent_because: Option<String>,
    /// Bytes mapped from huge pages (0 for other kinds), before rounding to whole pages.
    pub hugepage_bytes: u64,
    /// A live change replaced or removed it: no queue uses it, and its memory stays until
    /// the plane stops ([`Plan::in_slots_of`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub retired: bool,
}

impl RegionPlan {
    /// The same memory as `other`: every planned setting equal (why a region is not lent
    /// is an explanation, and whether it was retired a fact of the running plane).
    pub fn same_memory(&self, other: &RegionPlan) -> bool {
        RegionPlan {
            not_lent_because: None,
            retired: false,
            ..self.clone()
        } == RegionPlan {
            not_lent_because: None,
            retired: false,
            ..other.clone()
        }
    }
}

/// How an RX worker brings bursts into the queue's layout when the engine cannot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StagePlan {
    /// Header-data split: bytes of the header segment.
    pub split_header_bytes: Option<usize>,
    /// GPU the stage copies to or from.
    pub gpu: Option<u32>,
    /// How host bytes reach GPU memory.
    pub mode: StageMode,
}

/// A reorder on an RX queue (`rx.reorder_configs`): what the application's end of the
/// queue runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReorderPlan {
    /// The reorder's name.
    pub name: String,
    /// CPU code or the GPU kernel.
    pub kind: ReorderKind,
    /// Region of the output buffers.
    pub output: RegionId,
    /// Flows whose packets it reorders.
    pub flow_ids: Vec<u32>,
    /// Slots per output buffer.
    pub packets_per_batch: u32,
    /// Payload bytes per slot (from the queue's first region's `buf_size`).
    pub in_slot_bytes: u32,
    /// The parameters the CPU code and the kernel run with.
    #[serde(skip)]
    pub spec: gpudirect::reorder::ReorderSpec,
}

/// The `tx_eth_src` offload of a TX queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EthSrc {
    /// Not asked for.
    Off,
    /// The worker writes the port's MAC address into every frame.
    Stamp,
    /// Asked for, but the headers are in GPU memory, which the CPU cannot write: frames
    /// go out unstamped (a warning at start).
    HeadersOnGpu,
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueuePlan {
    /// Interface index (the port id).
    pub interface: usize,
    /// Interface name.
    pub interface_name: String,
    /// RX or TX.
    pub direction: Direction,
    /// Queue id.
    pub id: QueueId,
    /// Key path of its `cpu_core`, for messages.
    pub core_key: String,
    /// Regions of its segments, in order.
    pub segments: Vec<RegionId>,
    /// Core of its worker.
    pub core: u32,
    /// Packets per burst.
    pub batch: usize,
    /// Bursts the ring between worker and application holds: `ring_packets` in full
    /// bursts, at least [`MIN_RING_BURSTS`].
    pub ring_bursts: usize,
    /// RX: deliver a partial burst this long after its first packet (0: never).
    pub timeout_us: u64,
    /// The stage, when the engine's bursts are outside the queue's layout: RX, it moves
    /// received bursts into the layout; TX (engines that move bytes with the CPU), it
    /// moves the application's bursts out of GPU memory into `staging` before sending.
    pub stage: Option<StagePlan>,
    /// The host region the engine receives into or sends from instead of the layout
    /// (engines that move bytes with the CPU, see [`staging`]).
    pub staging: Option<RegionId>,
    /// RX: the core of the worker that runs `stage` (`stage_core`), when not `core`.
    pub stage_core: Option<u32>,
    /// RX: cores of the threads that share the stage's CPU copies (the rest of a
    /// `stage_core` list).
    pub copy_cores: Vec<u32>,
    /// RX: the reorders on this queue.
    pub reorders: Vec<ReorderPlan>,
    /// TX: the source MAC offload.
    pub eth_src: EthSrc,
    /// TX: the interface's `tx.flows` (VLAN push, tunnel encap), applied in software by
    /// the TX worker to the frames they match (see `steering::tx_transform`).
    #[serde(skip)]
    pub tx_flows: Vec<crate::config::TxFlowConfig>,
    /// TX: the host region frames are copied into to apply `tx_flows` (the application's
    /// buffers keep what it wrote); a buffer holds the queue's largest frame and the most
    /// bytes a flow adds.
    pub transform_region: Option<RegionId>,
    /// TX: the rate cap in Mb/s (`pacing_mbps`), paced in software by the TX worker.
    pub pacing_mbps: Option<u64>,
    /// RX: `hardware_timestamps`, taken in software by the RX worker at receive.
    pub timestamps: bool,
    /// TX: `accurate_send`: the worker sends no packet before its `timestamp_ns`.
    pub send_at_time: bool,
    /// TX: the engine reads packet bytes with the CPU and no stage moves them out of GPU
    /// memory, so a burst with a segment in GPU memory is refused at send.
    pub host_memory_only: bool,
    /// RX: the capture sink (`capture`), fed as the application polls.
    #[serde(skip)]
    pub capture: Option<crate::config::CaptureSpec>,
    /// Who takes its bursts: the application's thread through a ring, or the worker's
    /// handler on the worker's core (`delivery`).
    pub delivery: crate::config::Delivery,
    /// The protocol its packets carry (`protocol`): RX, decoded as the application
    /// takes them; TX, encoded as the application sends.
    pub protocol: Option<ProtocolPlan>,
}

/// Ethernet, IPv4 and UDP headers before a protocol's packet in a raw engine's frame.
pub const UDP_FRAME_HEADERS: u64 = 14 + 20 + 8;

/// What a queue's packets carry, decoded or encoded where the application takes the
/// queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolPlan {
    /// RX: SPEAD heaps assembled into chunks.
    Spead(SpeadPlan),
    /// RX: radio packets decoded into complex samples.
    Iq(IqPlan),
    /// TX: SPEAD heaps cut into packets.
    SpeadSend(SpeadSendPlan),
}

/// A TX queue's SPEAD heaps: cut into packets of at most `max_packet_bytes`, the item
/// descriptors in the first heap and every `descriptors_every` heaps after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpeadSendPlan {
    /// The stream's flavour.
    pub flavour: crate::protocol::spead::Flavour,
    /// The largest SPEAD packet (UDP payload).
    pub max_packet_bytes: u32,
    /// Heaps between repeats of the descriptors (0: the first heap only).
    pub descriptors_every: u64,
    /// The item descriptors.
    pub descriptors: Vec<crate::protocol::spead::descriptor::ItemDescriptor>,
    /// Raw engines: the frames' addresses (each packet goes out as a UDP datagram in
    /// an IPv4 frame); `None`: the engine sends datagrams (sockets).
    pub udp: Option<crate::config::UdpEndpoints>,
}

/// An RX queue's radio samples: packets of `format` decoded at `precision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IqPlan {
    /// The packets' format.
    pub format: crate::protocol::iq::IqFormat,
    /// The samples' type.
    pub precision: crate::protocol::iq::Precision,
    /// The queue receives Ethernet frames (raw engines), whose UDP payload is the packet;
    /// else datagrams (sockets), which are.
    pub frames: bool,
    /// The GPU memory region the samples are decoded into (`sample_region`), one burst a
    /// buffer; `None`: decoded by the CPU.
    pub sample_region: Option<RegionId>,
}

/// An RX queue's SPEAD stream: packets decoded with `flavour`, heaps placed by
/// `placement`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SpeadPlan {
    /// The stream's flavour.
    pub flavour: crate::protocol::spead::Flavour,
    /// Where heaps go in chunks.
    pub placement: crate::protocol::spead::chunks::Placement,
    /// The queue receives Ethernet frames (raw engines), whose UDP payload is the SPEAD
    /// packet; else datagrams (sockets), which are.
    pub frames: bool,
    /// The region whose buffers hold the chunks (`chunk_region`), one chunk a buffer;
    /// `None`: chunks in the process's heap.
    pub chunk_region: Option<RegionId>,
}

/// One worker core and its queues.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CorePlan {
    /// The core.
    pub core: u32,
    /// Indices into [`Plan::queues`], in the order the worker polls them.
    pub queues: Vec<usize>,
    /// Indices into [`Plan::queues`] of the RX queues whose stage this worker runs
    /// (`stage_core`), polled after `queues`.
    pub stages: Vec<usize>,
    /// True when some of `queues` are `delivery: handler`: the worker then runs the
    /// application's handler for them, between its RX and its TX queues.
    pub handler: bool,
}

/// Huge-page bytes a configuration maps, per region and for the engine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HugepageNeed {
    /// Per huge region: name, NUMA node, bytes.
    pub regions: Vec<(String, u32, u64)>,
    /// The engine's own (DPDK's EAL pools, taken on the first huge region's node).
    pub engine: Option<(String, u32, u64)>,
}

impl HugepageNeed {
    /// True when nothing is mapped from huge pages.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty() && self.engine.is_none()
    }

    /// The need in pages of `page_size`, per node: each region is rounded up to whole
    /// pages (it is one mapping), the engine's bytes too.
    pub fn in_pages(&self, page_size: u64) -> Need {
        let mut per_node: BTreeMap<u32, (u64, Vec<(String, u64)>)> = BTreeMap::new();
        for (name, node, bytes) in self.regions.iter().chain(&self.engine) {
            let pages = bytes.div_ceil(page_size);
            let e = per_node.entry(*node).or_default();
            e.0 += pages;
            e.1.push((name.clone(), pages));
        }
        Need {
            page_size,
            per_node,
        }
    }
}

/// What a configuration needs, per NUMA node, in pages of `page_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// Page size.
    pub page_size: u64,
    /// Per node: pages and the mappings that make them up (name, pages).
    pub per_node: BTreeMap<u32, (u64, Vec<(String, u64)>)>,
}

/// Every start-up decision for one configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// The engine.
    pub engine: EngineKind,
    /// What it needs and offers.
    pub capabilities: Capabilities,
    /// Core of the stats thread (and DPDK's main lcore).
    pub master_core: u32,
    /// Memory regions in configuration order (index = [`RegionId`]).
    pub regions: Vec<RegionPlan>,
    /// Packet queues (RX then TX per interface). Empty for connection engines, whose
    /// queues are connection slots (see [`Plan::rdma`]).
    pub queues: Vec<QueuePlan>,
    /// Worker cores and their queues, by core (a connection engine's cores start without
    /// queues: connections join them as they are made).
    pub cores: Vec<CorePlan>,
    /// Huge pages the regions and the engine map.
    pub hugepages: HugepageNeed,
    /// What the engine builds: everything it needs, decided here.
    pub engine_plan: EnginePlan,
}

/// The engine's own plan, one variant per engine. An engine is built from its variant
/// alone; none of them sees the configuration.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnginePlan {
    /// The software loopback's ports and wires.
    Loopback(loopback::LoopbackPlan),
    /// Kernel sockets, per interface.
    Socket(Vec<socket::SocketInterfacePlan>),
    /// The DPDK engine's ports, pools and EAL arguments.
    Dpdk(dpdk::DpdkPlan),
    /// The RDMA engine's interfaces and connection slots.
    Rdma(Vec<rdma::InterfacePlan>),
    /// An engine kind with nothing to plan here (it is not available; starting it says
    /// why).
    Unavailable,
}

impl Plan {
    /// Plans `config` (which passed validation). Pure: it reads nothing but `config`.
    pub fn from_config(config: &Config) -> Result<Self, PlanError> {
        // The staging regions are part of the plan.
        Self::from_staged(&staging::with_staging_regions(config))
    }

    /// Plans a configuration that already has its staging regions
    /// ([`staging::with_staging_regions`]): what the plane does, since it keeps that
    /// configuration, so that region ids mean the same in both.
    pub fn from_staged(config: &Config) -> Result<Self, PlanError> {
        let capabilities = Capabilities::of(config.engine);
        let lending = if capabilities.receives_into_lent_regions {
            let decided = dpdk::lending(config);
            dpdk::check_lending(config, &decided)?;
            decided
        } else {
            vec![(false, None); config.memory_regions.len()]
        };
        // Regions the DPDK engine sends from in mbufs of their own need its headroom too.
        let lent_for_tx = if config.engine == EngineKind::Dpdk {
            dpdk::tx_lending(config, &lending)
        } else {
            vec![false; config.memory_regions.len()]
        };
        let regions: Vec<RegionPlan> = config
            .memory_regions
            .iter()
            .zip(lending)
            .zip(lent_for_tx)
            .map(|((m, (lent, why)), lent_for_tx)| {
                let headroom = if lent || lent_for_tx {
                    capabilities.lent_headroom
                } else {
                    0
                };
                let stride = buffer_stride(m.kind, headroom, m.buf_size);
                RegionPlan {
                    name: m.name.clone(),
                    kind: m.kind,
                    affinity: m.affinity,
                    gpu_uuid: m.gpu_uuid.clone(),
                    num_bufs: m.num_bufs,
                    buf_size: m.buf_size,
                    headroom,
                    stride,
                    lent,
                    not_lent_because: why,
                    hugepage_bytes: if m.kind == MemoryKind::Huge {
                        (m.num_bufs as u64).saturating_mul(stride as u64)
                    } else {
                        0
                    },
                    retired: false,
                }
            })
            .collect();
        let dpdk = (config.engine == EngineKind::Dpdk)
            .then(|| dpdk::plan(config, &regions))
            .transpose()?;
        let rdma = if config.engine == EngineKind::Rdma {
            // A connection's stage, where it has one, runs on the connection's worker.
            if let Some((i, _, q)) = config
                .queues()
                .find(|(_, d, q)| *d == Direction::Rx && q.stage_core.is_some())
            {
                return Err(PlanError::Queue {
                    interface: config.interfaces[i].name.clone(),
                    direction: Direction::Rx,
                    queue: QueueId(q.id),
                    reason: format!(
                        "stage_core is set, but the {} engine has none: a connection that needs a stage (header-data split, GPU memory the NIC cannot register) runs it on its own worker",
                        config.engine.name()
                    ),
                });
            }
            rdma::plan(config)?
        } else {
            Vec::new()
        };
        let queues = if capabilities.connections {
            refuse_handlers_on_connections(config)?;
            Vec::new()
        } else {
            queues(config, &regions, &capabilities)?
        };
        let planned = &queues;
        let mut by_core: BTreeMap<u32, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
        for (i, q) in queues.iter().enumerate() {
            by_core.entry(q.core).or_default().0.push(i);
            if let Some(core) = q.stage_core {
                by_core.entry(core).or_default().1.push(i);
            }
        }
        // Connection slots run on the workers of their cores, which start without queues.
        for slot in rdma.iter().flat_map(|i| &i.slots) {
            by_core.entry(slot.core).or_default();
        }
        let cores = by_core
            .into_iter()
            .map(|(core, (queues, stages))| CorePlan {
                core,
                handler: queues
                    .iter()
                    .any(|&i| planned[i].delivery == crate::config::Delivery::Handler),
                queues,
                stages,
            })
            .collect();
        let mut hugepages = HugepageNeed {
            regions: regions
                .iter()
                .filter(|r| r.kind == MemoryKind::Huge)
                .map(|r| (r.name.clone(), r.affinity, r.hugepage_bytes))
                .collect(),
            engine: None,
        };
        if capabilities.own_hugepages
            && let (Some(d), Some(first)) =
                (&dpdk, regions.iter().find(|r| r.kind == MemoryKind::Huge))
        {
            hugepages.engine = Some((
                "DPDK EAL mbuf pools".to_owned(),
                first.affinity,
                d.eal_memory_bytes,
            ));
        }
        let engine_plan = match (config.engine, dpdk) {
            (EngineKind::Loopback, _) => EnginePlan::Loopback(loopback::plan(config, &queues)?),
            (EngineKind::Socket, _) => EnginePlan::Socket(socket::plan(config, &regions, &queues)?),
            (EngineKind::Dpdk, Some(d)) => EnginePlan::Dpdk(d),
            (EngineKind::Rdma, _) => EnginePlan::Rdma(rdma),
            _ => EnginePlan::Unavailable,
        };
        Ok(Self {
            engine: config.engine,
            capabilities,
            master_core: config.master_core,
            regions,
            queues,
            cores,
            hugepages,
            engine_plan,
        })
    }

    /// The DPDK engine's plan, when the engine is DPDK.
    pub fn dpdk(&self) -> Option<&dpdk::DpdkPlan> {
        match &self.engine_plan {
            EnginePlan::Dpdk(d) => Some(d),
            _ => None,
        }
    }

    /// The RDMA engine's interfaces (none for other engines).
    pub fn rdma(&self) -> &[rdma::InterfacePlan] {
        match &self.engine_plan {
            EnginePlan::Rdma(r) => r,
            _ => &[],
        }
    }

    /// Regions lent to the engine, by name.
    pub fn lent_regions(&self) -> Vec<String> {
        self.regions
            .iter()
            .filter(|r| r.lent)
            .map(|r| r.name.clone())
            .collect()
    }

    /// The queue plan of (`interface` index, direction, queue id).
    pub fn queue(&self, interface: usize, direction: Direction, id: u16) -> Option<&QueuePlan> {
        self.queues
            .iter()
            .find(|q| q.interface == interface && q.direction == direction && q.id == QueueId(id))
    }
}

/// Connection engines make their queues per connection, after start: a handler cannot be
/// given for them yet.
fn refuse_handlers_on_connections(config: &Config) -> Result<(), PlanError> {
    for iface in &config.interfaces {
        for (dir, queues) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            if let Some(q) = queues
                .into_iter()
                .flatten()
                .find(|q| q.delivery == crate::config::Delivery::Handler)
            {
                return Err(PlanError::Queue {
                    interface: iface.name.clone(),
                    direction: dir,
                    queue: QueueId(q.id),
                    reason: format!(
                        "delivery: handler is not supported on {} interfaces: their queues are made per connection; use delivery: ring",
                        config.engine.name()
                    ),
                });
            }
        }
    }
    Ok(())
}
