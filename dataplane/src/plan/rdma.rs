//! The RDMA engine's start-up decisions: per `roce://` interface its address, whether it
//! listens, and its connection slots (one per queue, as in the reference) with their
//! regions, core, windows, and the staging a slot needs where the NIC cannot reach its
//! layout itself: a header-data split (a receive lands in one buffer), and `device`
//! regions the NIC may be unable to register (`roce_config.gpu_memory_path`).

use super::{PlanError, StagePlan};
use crate::config::{
    Config, Direction, GpuMemoryPath, InterfaceConfig, MemoryKind, MemoryRegionConfig, PeerFilter,
    QueueConfig, RoceConfig, SocketMode, Transport,
};
use crate::descriptor::RegionId;
use serde::Serialize;
use std::net::SocketAddr;

/// Packets per burst of a connection's queues (and of its stages).
pub const CONNECTION_BURST: usize = 64;

/// Largest receive window per connection (the RX region may hold fewer buffers).
pub const MAX_RECV_WINDOW: usize = 1024;

/// One connection slot: what the connection in queue slot `n` of an interface uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlotPlan {
    /// Region receives land in when the NIC writes the layout itself (its first region).
    pub rx_region: RegionId,
    /// The RX queue's layout: one region, or two for a header-data split.
    pub rx_layout: Vec<RegionId>,
    /// Host region receives land in instead when the slot is staged, and how the RX stage
    /// then moves them into `rx_layout`. Always taken for a split; for a `device` region
    /// as `gpu_memory_path` says.
    pub rx_staging: Option<SlotStaging>,
    /// Region sends come from, when the slot has one.
    pub tx_region: Option<RegionId>,
    /// Host region a TX stage copies the application's sends into first, when
    /// `tx_region` is `device` memory the NIC may be unable to register.
    pub tx_staging: Option<SlotStaging>,
    /// Core of the worker that runs the connection: its TX queue's, else its RX queue's,
    /// else (an interface without queues) `master_core`.
    pub core: u32,
    /// Key path of that core, for messages (`master_core` when it is the fallback).
    pub core_key: String,
    /// Receives posted at once: the RX region's buffers, at most [`MAX_RECV_WINDOW`].
    pub recv_window: usize,
    /// Sends in flight at once (`max_inflight_bytes` over the message size).
    pub send_window: u32,
}

/// A staged side of a connection slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlotStaging {
    /// The host staging region the NIC reads or writes.
    pub region: RegionId,
    /// The stage between it and the application's region.
    pub stage: StagePlan,
    /// True when the slot always goes through it (a split, or `gpu_memory_path: staged`);
    /// false when only after the NIC failed to register the GPU memory (`auto`).
    pub always: bool,
}

/// One `roce://` interface.
#[derive(Clone, Debug, Serialize)]
pub struct InterfacePlan {
    /// Interface index.
    pub interface: usize,
    /// Interface name.
    pub name: String,
    /// Server (listens) or client (connects).
    pub mode: SocketMode,
    /// Its own address (a server listens on it; a client binds to it).
    pub local: SocketAddr,
    /// Seconds between connection attempts of a client (`socket_config.retry_connect_s`).
    pub retry_connect_s: u32,
    /// Whose connection requests a server accepts (`socket_config.allowed_peers`);
    /// others are rejected before any memory is registered for them.
    pub allowed_peers: PeerFilter,
    /// `roce_config` (defaults when absent).
    #[serde(skip)]
    pub roce: RoceConfig,
    /// Connection slots; a connection takes the first free one.
    pub slots: Vec<SlotPlan>,
}

impl InterfacePlan {
    /// True for a server interface, which has a listener.
    pub fn listens(&self) -> bool {
        self.mode == SocketMode::Server
    }
}

/// The `roce://` interfaces of `config`.
pub(super) fn plan(config: &Config) -> Result<Vec<InterfacePlan>, PlanError> {
    let region_id = |n: &str| {
        config
            .memory_regions
            .iter()
            .position(|m| m.name == n)
            .map(|i| RegionId(i as u16))
    };
    let mut out = Vec::new();
    for (index, iface) in config.interfaces.iter().enumerate() {
        let Some(sock) = &iface.socket else { continue };
        if sock.transport != Transport::Roce {
            continue;
        }
        let bad = |reason: String| PlanError::Interface {
            interface: iface.name.clone(),
            reason,
        };
        let Some(local) = sock.local else {
            return Err(bad(
                "socket_config.local_addr is missing (roce://IP[:PORT]), and `address` is not an IPv4 address to send from".into(),
            ));
        };
        let roce = iface.roce.clone().unwrap_or_default();
        if roce.transport_mode != "RC" {
            return Err(bad(format!(
                "not supported: roce_config.transport_mode {} (only RC carries SEND/RECV with WRITE and READ)",
                roce.transport_mode
            )));
        }
        let mut slots = Vec::new();
        for slot in slot_queues(config, iface) {
            let n = slot.n;
            let rx_layout: Vec<RegionId> =
                slot.rx_layout.iter().filter_map(|n| region_id(n)).collect();
            let Some(&rx_region) = rx_layout.first() else {
                return Err(bad(format!(
                    "no memory region to receive into for queue {n} (give the RX queue one, or define DATA_RX_GPU_{})",
                    slot.side
                )));
            };
            if rx_layout.len() > 2 {
                return Err(bad(format!(
                    "RX queue {n} has {} memory regions; a connection splits each message into at most two (headers, payload)",
                    rx_layout.len()
                )));
            }
            if let Some(q) = slot.txq.filter(|q| q.memory_regions.len() > 1) {
                return Err(bad(format!(
                    "TX queue {} has {} memory regions; an RDMA SEND goes out of one buffer, so give it one",
                    q.id,
                    q.memory_regions.len()
                )));
            }
            let tx_region = slot.tx_region.as_deref().and_then(region_id);
            let needs = staging_needs(config, iface, &slot);
            if roce.gpu_memory_path == GpuMemoryPath::Direct && rx_layout.len() == 2 {
                return Err(bad(format!(
                    "RX queue {n} splits headers from payload, which a connection does through a host staging region; gpu_memory_path direct forbids staging (use auto)"
                )));
            }
            let staging = |need: &Option<StagingNeed>| {
                need.as_ref().map(|need| SlotStaging {
                    region: region_id(&need.region.name).expect("with_staging_regions made it"),
                    stage: StagePlan {
                        split_header_bytes: need.split_header_bytes,
                        gpu: need.gpu,
                        mode: config.gpu_stage,
                    },
                    always: need.always,
                })
            };
            let rx_staging = staging(&needs.rx);
            let tx_staging = staging(&needs.tx);
            let size_of = |r: RegionId| config.memory_regions[r.index()].buf_size;
            let message = tx_region.map_or(size_of(rx_region), size_of);
            slots.push(SlotPlan {
                rx_region,
                recv_window: recv_window(config, &rx_layout),
                rx_layout,
                rx_staging,
                tx_region,
                tx_staging,
                core: slot
                    .txq
                    .or(slot.rxq)
                    .map_or(config.master_core, |q| q.cpu_core),
                core_key: match (slot.txq, slot.rxq) {
                    (Some(_), _) => format!("interfaces[{index}].tx.queues[{n}].cpu_core"),
                    (None, Some(_)) => format!("interfaces[{index}].rx.queues[{n}].cpu_core"),
                    (None, None) => "master_core".to_owned(),
                },
                send_window: roce.send_window(message),
            });
        }
        out.push(InterfacePlan {
            interface: index,
            name: iface.name.clone(),
            mode: sock.mode,
            local: SocketAddr::from((local.ip, local.port)),
            retry_connect_s: sock.retry_connect_s,
            allowed_peers: sock.peer_filter(),
            roce,
            slots,
        });
    }
    Ok(out)
}

/// Receives posted at once: the fewest buffers of the layout's regions, at most
/// [`MAX_RECV_WINDOW`].
fn recv_window(config: &Config, layout: &[RegionId]) -> usize {
    layout
        .iter()
        .map(|&r| config.memory_regions[r.index()].num_bufs)
        .min()
        .unwrap_or(0)
        .min(MAX_RECV_WINDOW)
}

/// A slot's queues and the region names it uses, as the configuration gives them.
struct SlotQueues<'a> {
    n: usize,
    /// `SERVER` or `CLIENT`, for the reference's fixed region names.
    side: &'static str,
    rxq: Option<&'a QueueConfig>,
    txq: Option<&'a QueueConfig>,
    /// The RX queue's regions, else the reference's `DATA_RX_GPU_{side}`.
    rx_layout: Vec<String>,
    /// The TX queue's first region, else `DATA_TX_GPU_{side}` where it exists.
    tx_region: Option<String>,
}

/// The connection slots of `iface`: one per queue (RX and TX queue `n` share slot `n`),
/// at least one.
fn slot_queues<'a>(config: &'a Config, iface: &'a InterfaceConfig) -> Vec<SlotQueues<'a>> {
    let side = match iface.socket.as_ref().map(|s| s.mode) {
        Some(SocketMode::Server) => "SERVER",
        _ => "CLIENT",
    };
    let rx_queues = iface.rx.as_ref().map_or(&[][..], |r| &r.queues[..]);
    let tx_queues = iface.tx.as_ref().map_or(&[][..], |t| &t.queues[..]);
    let fixed = |dir: &str| {
        let name = format!("DATA_{dir}_GPU_{side}");
        config.memory_region(&name).is_some().then_some(name)
    };
    (0..rx_queues.len().max(tx_queues.len()).max(1))
        .map(|n| {
            let (rxq, txq) = (rx_queues.get(n), tx_queues.get(n));
            let rx_layout = match rxq.map(|q| &q.memory_regions) {
                Some(names) if !names.is_empty() => names.clone(),
                _ => fixed("RX").into_iter().collect(),
            };
            let tx_region = txq
                .and_then(|q| q.memory_regions.first().cloned())
                .or_else(|| fixed("TX"));
            SlotQueues {
                n,
                side,
                rxq,
                txq,
                rx_layout,
                tx_region,
            }
        })
        .collect()
}

/// Why and how one side of a slot is staged.
struct StagingNeed {
    split_header_bytes: Option<usize>,
    gpu: Option<u32>,
    always: bool,
    /// The staging region to make (named as [`super::staging::staging_name`] names a
    /// queue's).
    region: MemoryRegionConfig,
}

/// The staging each side of a slot needs.
struct SlotStagingNeeds {
    rx: Option<StagingNeed>,
    tx: Option<StagingNeed>,
}

fn staging_needs(config: &Config, iface: &InterfaceConfig, slot: &SlotQueues) -> SlotStagingNeeds {
    let path = iface
        .roce
        .as_ref()
        .map_or(GpuMemoryPath::Auto, |r| r.gpu_memory_path);
    let region = |n: &String| config.memory_region(n);
    let staging_region = |dir, kind, affinity, num_bufs, buf_size| {
        let name = super::staging::staging_name(&iface.name, dir, slot.n as u16);
        let mut m = MemoryRegionConfig::new(&name, kind, num_bufs, buf_size);
        m.affinity = affinity;
        m
    };
    let rx_layout: Vec<&MemoryRegionConfig> = slot.rx_layout.iter().filter_map(region).collect();
    let gpu_of = |rs: &[&MemoryRegionConfig]| {
        rs.iter()
            .find(|m| m.kind == MemoryKind::Device)
            .map(|m| m.affinity)
    };
    let rx_gpu = gpu_of(&rx_layout);
    let split = rx_layout.len() == 2;
    let rx = (split || (rx_gpu.is_some() && path != GpuMemoryPath::Direct)).then(|| {
        let window = rx_layout
            .iter()
            .map(|m| m.num_bufs)
            .min()
            .unwrap_or(0)
            .min(MAX_RECV_WINDOW);
        StagingNeed {
            split_header_bytes: split.then(|| rx_layout[0].buf_size),
            gpu: rx_gpu,
            always: split || path == GpuMemoryPath::Staged,
            region: staging_region(
                Direction::Rx,
                if rx_gpu.is_some() {
                    MemoryKind::HostPinned
                } else {
                    MemoryKind::Host
                },
                rx_gpu.unwrap_or(rx_layout[0].affinity),
                // The posted window, and as many again moving through the stage.
                (window * 2).max(2),
                rx_layout.iter().map(|m| m.buf_size).sum(),
            ),
        }
    });
    let tx = slot
        .tx_region
        .as_ref()
        .and_then(region)
        .filter(|m| m.kind == MemoryKind::Device && path != GpuMemoryPath::Direct)
        .map(|m| StagingNeed {
            split_header_bytes: None,
            gpu: Some(m.affinity),
            always: path == GpuMemoryPath::Staged,
            region: staging_region(
                Direction::Tx,
                MemoryKind::HostPinned,
                m.affinity,
                m.num_bufs,
                m.buf_size,
            ),
        });
    SlotStagingNeeds { rx, tx }
}

/// The host staging regions the connection slots of `config` need (see [`SlotPlan`]).
pub(super) fn staging_regions(config: &Config) -> Vec<MemoryRegionConfig> {
    config
        .interfaces
        .iter()
        .filter(|i| i.socket.as_ref().map(|s| s.transport) == Some(Transport::Roce))
        .flat_map(|iface| {
            slot_queues(config, iface)
                .into_iter()
                .flat_map(move |slot| {
                    let needs = staging_needs(config, iface, &slot);
                    [needs.rx, needs.tx].into_iter().flatten().map(|n| n.region)
                })
        })
        .collect()
}
