//! The DPDK engine's start-up decisions: which regions it receives into without copying,
//! its mbuf pools (per queue segment), buffer split, and its EAL arguments and memory.

use super::{PlanError, RegionPlan};
use crate::config::{
    Config, Direction, InterfaceConfig, MemoryKind, QueueConfig, validate::is_pci_address,
};
use crate::descriptor::{QueueId, RegionId};
use serde::Serialize;

use eal::{eal_args, eal_bytes_of, pool_size};
pub use lending::{TX_LEND_MIN_BUFS, TxCarry};
pub(super) use lending::{check_lending, lending, tx_carry, tx_lending};

/// Descriptors per RX and TX ring of a virtual device when `descriptors` is not given;
/// also the lowest a PCI port's RX default goes.
pub const VDEV_DESCRIPTORS: u16 = 1024;
/// Descriptors per RX and TX ring of a PCI NIC when `descriptors` is not given: the
/// reference's default.
pub const PCI_DESCRIPTORS: u16 = 8192;
/// Bytes DPDK keeps in front of packet data (RTE_PKTMBUF_HEADROOM).
pub const HEADROOM: usize = 128;
/// Bytes of an mbuf's header.
pub const MBUF_HEADER: usize = 128;
/// Smallest `buf_size` received into without copying: a full frame, which every PMD's
/// queue setup accepts (af_packet wants the MTU plus overhead).
pub const ZERO_COPY_MIN_BUF_SIZE: usize = 2048;
/// Smallest data room of a pool that takes whole frames (some PMDs, af_packet among
/// them, want 2 KiB).
const WHOLE_FRAME_ROOM: usize = 2048;
/// Lent buffers start on 256 bytes.
const LENT_ALIGN: usize = 256;

/// Mbufs a queue's pool needs at least: 1.5x its ring of `descriptors` plus a burst
/// (with fewer, the ring holds every buffer and the worker waits for ever).
pub fn min_mbufs(descriptors: u16, batch_size: u32) -> usize {
    usize::from(descriptors) * 3 / 2 + batch_size as usize
}

/// Descriptors of the RX and TX rings of interface `iface`: its `rx.descriptors` and
/// `tx.descriptors`, else [`default_descriptors`].
pub fn descriptors(config: &Config, iface: &InterfaceConfig) -> (u16, u16) {
    let (rx, tx) = default_descriptors(config, iface);
    (
        iface.rx.as_ref().and_then(|r| r.descriptors).unwrap_or(rx),
        iface.tx.as_ref().and_then(|t| t.descriptors).unwrap_or(tx),
    )
}

/// The default ring depths of `iface`: [`VDEV_DESCRIPTORS`] on a virtual device (memory is
/// what a test machine lacks, and a vdev's ring is a software queue). On a PCI NIC the
/// reference's [`PCI_DESCRIPTORS`], the RX ring halved (not below [`VDEV_DESCRIPTORS`])
/// until every region that an RX queue receives into alone keeps 1.5x the ring plus a
/// burst: such a region is lent to the NIC, and the reference instead raises its
/// `num_bufs` to three rings, tripling memory the configuration did not ask for.
pub fn default_descriptors(config: &Config, iface: &InterfaceConfig) -> (u16, u16) {
    if !is_pci_address(&iface.address) {
        return (VDEV_DESCRIPTORS, VDEV_DESCRIPTORS);
    }
    let mut rx = PCI_DESCRIPTORS;
    for q in iface.rx.iter().flat_map(|r| &r.queues) {
        let [only] = q.memory_regions.as_slice() else {
            continue;
        };
        let Some(m) = config.memory_region(only) else {
            continue;
        };
        while rx > VDEV_DESCRIPTORS && m.num_bufs < min_mbufs(rx, q.batch_size) {
            rx /= 2;
        }
    }
    (rx, PCI_DESCRIPTORS)
}

/// One mbuf pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PoolSize {
    /// The segment's region's `num_bufs`.
    pub configured: usize,
    /// Mbufs in the pool: `configured`, raised to [`min_mbufs`].
    pub mbufs: usize,
    /// Data room per mbuf: headroom plus the buffer size.
    pub data_room: usize,
}

impl PoolSize {
    /// Bytes the pool takes from EAL memory.
    pub fn bytes(&self) -> u64 {
        (self.mbufs * (self.data_room + MBUF_HEADER)) as u64
    }
}

/// How an RX queue receives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum RxReceive {
    /// The PMD fills the queue's region's own buffers (lent to an mbuf pool).
    Lent {
        /// The region.
        region: RegionId,
    },
    /// Frames are copied out of mbufs of this pool.
    Copy {
        /// The pool.
        pool: PoolSize,
    },
    /// Buffer split: headers into the first pool, the rest into the second.
    Split {
        /// Header pool.
        header: PoolSize,
        /// Payload pool.
        payload: PoolSize,
        /// Bytes of each header segment.
        header_bytes: usize,
    },
}

/// An RX queue of a port.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RxQueuePlan {
    /// Queue id in the configuration.
    pub queue: QueueId,
    /// The device's queue index.
    pub device_queue: u16,
    /// How it receives.
    pub receive: RxReceive,
}

/// A TX queue of a port. A one-segment packet whose region is attachable or lent goes out
/// without a copy; any other packet is copied into one mbuf of the queue's pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TxQueuePlan {
    /// Queue id in the configuration.
    pub queue: QueueId,
    /// The device's queue index.
    pub device_queue: u16,
    /// The mbuf pool frames are copied into.
    pub pool: PoolSize,
    /// Mbufs without data room that region buffers are attached to.
    pub attach_pool: PoolSize,
}

/// One DPDK port.
#[derive(Clone, Debug, Serialize)]
pub struct PortPlan {
    /// Interface index.
    pub interface: usize,
    /// Interface name.
    pub name: String,
    /// The interface's `address` (vdev string or PCI address).
    pub address: String,
    /// The ethdev name (vdev name or PCI address).
    pub ethdev: String,
    /// A PCI device (else a virtual device).
    pub pci: bool,
    /// RX queues in configuration order.
    pub rx: Vec<RxQueuePlan>,
    /// TX queues in configuration order.
    pub tx: Vec<TxQueuePlan>,
    /// The flow rules the port installs on the device (or steers in software when the
    /// device refuses them).
    pub flows: PortFlows,
    /// RX `hardware_timestamps`: device timestamps where the driver offers them.
    pub rx_timestamps: bool,
    /// TX `accurate_send`: the device sends on time where the driver offers it.
    pub accurate_send: bool,
    /// Descriptors of each RX queue's device ring (`rx.descriptors`, else
    /// [`default_descriptors`]); the driver may round it to what it supports.
    pub rx_descriptors: u16,
    /// Descriptors of each TX queue's device ring (`tx.descriptors`, else
    /// [`default_descriptors`]).
    pub tx_descriptors: u16,
    /// RX scatter (`RTE_ETH_RX_OFFLOAD_SCATTER`), asked of the device where offered: a
    /// frame of the port's MTU is larger than the buffer of one of its one-segment RX
    /// queues (a TX queue's larger frames raised the MTU). Drivers such as mlx5 refuse
    /// such a queue without it; the frames that need a chain are then dropped as
    /// `malformed`, never cut, and the rest arrive as usual.
    pub rx_scatter: bool,
    /// The MTU the port is raised to: the largest frame any of its queues holds (the sum
    /// of a queue's segment buffers, RX or TX), at least 64 and at most [`MAX_FRAME`]
    /// bytes, less the 14-byte Ethernet header; never below [`MIN_MTU`]. The reference
    /// subtracts 18 (the CRC too); a buffer holds a frame without its CRC (DPDK strips
    /// it), so a frame that fills its buffer would then be dropped.
    pub mtu: u16,
    /// The kernel interface a virtual device sends through (`iface=` of net_af_packet and
    /// net_af_xdp): its MTU is raised to [`PortPlan::mtu`] at start, never lowered.
    pub kernel_interface: Option<String>,
    /// `multicast_groups`: joined through the port's kernel interface (the kernel sends
    /// the IGMP reports), and all-multicast asked of the device.
    pub multicast: Vec<crate::config::MulticastGroup>,
    /// `tx.flows` when each pushes one 802.1Q tag and nothing else: the device's TX VLAN
    /// insert offload (`RTE_ETH_TX_OFFLOAD_VLAN_INSERT`) does them where the driver offers
    /// it, the TX workers in software otherwise. Empty when some flow does more (QinQ,
    /// another tag EtherType, a tunnel): software then.
    #[serde(skip)]
    pub tx_vlan_flows: Vec<crate::config::TxFlowConfig>,
}

/// The kernel interface of a vdev `address` that sends through one (`iface=NAME` of
/// net_af_packet and net_af_xdp).
pub fn kernel_interface(address: &str) -> Option<String> {
    let (device, args) = address.split_once(',')?;
    if !(device.starts_with("net_af_packet") || device.starts_with("net_af_xdp")) {
        return None;
    }
    args.split(',')
        .find_map(|kv| kv.strip_prefix("iface="))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

/// The largest frame a port's MTU is derived for (a 9000-byte MTU plus headers, tags and
/// the CRC, as the reference's `JUMBOFRAME_SIZE`).
pub const MAX_FRAME: usize = 9100;

/// The Ethernet header: what a frame in a buffer holds beyond its MTU (the CRC is not in
/// the buffer).
pub const FRAME_OVERHEAD: usize = 14;

/// The smallest MTU a device takes (`RTE_ETHER_MIN_MTU`).
pub const MIN_MTU: u16 = 68;

/// The MTU for a port whose largest frame is `frame` bytes (see [`PortPlan::mtu`]).
pub fn mtu_for_frame(frame: usize) -> u16 {
    let mtu = frame.clamp(64, MAX_FRAME) - FRAME_OVERHEAD;
    (mtu as u16).max(MIN_MTU)
}

impl PortPlan {
    /// The device queue index of RX queue `queue` (its position in the configuration).
    pub fn device_queue(&self, queue: QueueId) -> Option<u16> {
        self.rx
            .iter()
            .find(|q| q.queue == queue)
            .map(|q| q.device_queue)
    }
}

/// A port's RX flow rules as the interface gives them, with the queue ids the plan maps to
/// device queues. The engine encodes them as rte_flow rules (the encoding needs DPDK's own
/// constants, so it happens there, from this alone).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PortFlows {
    /// `rx.flows`, in priority order.
    #[serde(skip)]
    pub flows: Vec<crate::config::FlowConfig>,
    /// `rx.flow_isolation`: only matched packets reach the port's queues.
    pub isolation: bool,
    /// `rx.exception_queue`: where unmatched packets go under isolation.
    pub exception_queue: Option<u16>,
    /// `rx.dynamic_flow_capacity`: priorities kept free above the exception rule for
    /// flows added at run time.
    pub dynamic_flow_capacity: u32,
}

impl PortFlows {
    /// True when the port has rules to install.
    pub fn any(&self) -> bool {
        !self.flows.is_empty() || self.isolation
    }
}

/// The DPDK engine's part of a plan.
#[derive(Clone, Debug, Serialize)]
pub struct DpdkPlan {
    /// EAL arguments from the configuration. At start the engine adds what only the
    /// running process knows: `--file-prefix` (its own), `--huge-dir` (the hugetlbfs mount
    /// in use) and the words of `DATAPLANE_EAL_ARGS`.
    pub eal_args: Vec<String>,
    /// EAL memory: every pool plus EAL's own 64 MiB, a quarter on top for slack.
    pub eal_memory_bytes: u64,
    /// Ports in interface order.
    pub ports: Vec<PortPlan>,
    /// Per region: how TX queues send its buffers.
    pub tx_regions: Vec<TxCarry>,
}

/// The ethdev name of an interface address: the vdev name before its first comma, or the
/// PCI address.
pub fn port_name(address: &str) -> &str {
    address.split(',').next().unwrap_or(address).trim()
}

/// The largest frame any queue of `iface` holds, RX or TX: the sum of its segment
/// regions' `buf_size` (a TX queue larger than every RX queue counts too: deriving the MTU
/// from RX alone drops such frames silently).
fn largest_frame(config: &Config, iface: &crate::config::InterfaceConfig) -> usize {
    let rx = iface.rx.iter().flat_map(|r| &r.queues);
    let tx = iface.tx.iter().flat_map(|t| &t.queues);
    let tx_added = tx_flow_bytes(iface);
    rx.map(|q| (q, 0))
        .chain(tx.map(|q| (q, tx_added)))
        .map(|(q, added)| {
            q.memory_regions
                .iter()
                .filter_map(|n| config.memory_regions.iter().find(|m| &m.name == n))
                .map(|m| m.buf_size)
                .sum::<usize>()
                + added
        })
        .max()
        .unwrap_or(0)
}

/// The most bytes the interface's TX flows add to a frame (tags, tunnel headers): sent
/// frames grow by that much, so the MTU and the TX copy buffers do too.
fn tx_flow_bytes(iface: &crate::config::InterfaceConfig) -> usize {
    iface
        .tx
        .iter()
        .flat_map(|t| &t.flows)
        .map(|f| f.added_bytes())
        .max()
        .unwrap_or(0)
}

/// Whether a frame of `port`'s MTU overflows the buffer of one of its one-segment RX
/// queues (see [`PortPlan::rx_scatter`]).
fn needs_rx_scatter(port: &PortPlan, regions: &[RegionPlan]) -> bool {
    let frame = usize::from(port.mtu) + FRAME_OVERHEAD;
    port.rx.iter().any(|q| match &q.receive {
        RxReceive::Lent { region } => regions[region.index()].buf_size < frame,
        RxReceive::Copy { pool } => pool.data_room.saturating_sub(HEADROOM) < frame,
        RxReceive::Split { .. } => false,
    })
}

/// The interface's TX flows when every one pushes exactly one 802.1Q tag (what a device's
/// VLAN insert does), else none.
fn single_vlan_tags(iface: &crate::config::InterfaceConfig) -> Vec<crate::config::TxFlowConfig> {
    let flows = iface.tx.as_ref().map_or(&[][..], |t| t.flows.as_slice());
    let single = |f: &crate::config::TxFlowConfig| {
        matches!(
            f.transforms.as_slice(),
            [crate::config::TxTransform::VlanPush {
                ethertype: 0x8100,
                ..
            }]
        )
    };
    if flows.iter().all(single) {
        flows.to_vec()
    } else {
        Vec::new()
    }
}

/// The DPDK part of the plan of `config`, with the regions' lending already decided.
pub(super) fn plan(config: &Config, regions: &[RegionPlan]) -> Result<DpdkPlan, PlanError> {
    let region_index = |n: &String| config.memory_regions.iter().position(|m| &m.name == n);
    let mut ports = Vec::new();
    let mut pools_bytes = 0u64;
    for (index, iface) in config.interfaces.iter().enumerate() {
        let (rx_descriptors, tx_descriptors) = descriptors(config, iface);
        let mut port = PortPlan {
            rx_descriptors,
            tx_descriptors,
            rx_scatter: false,
            interface: index,
            name: iface.name.clone(),
            address: iface.address.clone(),
            ethdev: port_name(&iface.address).to_owned(),
            pci: is_pci_address(&iface.address),
            rx: Vec::new(),
            tx: Vec::new(),
            flows: iface
                .rx
                .as_ref()
                .map_or_else(PortFlows::default, |r| PortFlows {
                    flows: r.flows.clone(),
                    isolation: r.flow_isolation,
                    exception_queue: r.exception_queue,
                    dynamic_flow_capacity: r.dynamic_flow_capacity,
                }),
            rx_timestamps: iface.rx.as_ref().is_some_and(|r| r.timestamps),
            accurate_send: iface.tx.as_ref().is_some_and(|t| t.accurate_send),
            mtu: mtu_for_frame(largest_frame(config, iface)),
            kernel_interface: kernel_interface(&iface.address),
            multicast: iface.multicast.clone(),
            tx_vlan_flows: single_vlan_tags(iface),
        };
        for (i, q) in iface.rx.iter().flat_map(|r| &r.queues).enumerate() {
            let lent = match q.memory_regions.as_slice() {
                [only] => region_index(only).filter(|&r| regions[r].lent),
                _ => None,
            };
            let receive = match (lent, q.memory_regions.len()) {
                (Some(r), _) => RxReceive::Lent {
                    region: RegionId(r as u16),
                },
                (None, 0 | 1) => RxReceive::Copy {
                    pool: pool_size(config, q, rx_descriptors, 0),
                },
                (None, 2) => RxReceive::Split {
                    header: pool_size(config, q, rx_descriptors, 0),
                    payload: pool_size(config, q, rx_descriptors, 1),
                    header_bytes: region_index(&q.memory_regions[0])
                        .map_or(0, |r| config.memory_regions[r].buf_size),
                },
                (None, n) => {
                    return Err(PlanError::Queue {
                        interface: iface.name.clone(),
                        direction: Direction::Rx,
                        queue: QueueId(q.id),
                        reason: format!(
                            "not supported: {n} memory regions (DPDK buffer split here takes headers and payload, two regions)"
                        ),
                    });
                }
            };
            pools_bytes += eal_bytes_of(config, q, rx_descriptors);
            port.rx.push(RxQueuePlan {
                queue: QueueId(q.id),
                device_queue: i as u16,
                receive,
            });
        }
        for (i, q) in iface.tx.iter().flat_map(|t| &t.queues).enumerate() {
            let frame: usize = q
                .memory_regions
                .iter()
                .filter_map(region_index)
                .map(|r| config.memory_regions[r].buf_size)
                .sum::<usize>()
                + tx_flow_bytes(iface);
            let mut pool = pool_size(config, q, tx_descriptors, 0);
            pool.data_room = (frame.max(WHOLE_FRAME_ROOM) + HEADROOM).min(u16::MAX as usize);
            pools_bytes += eal_bytes_of(config, q, tx_descriptors);
            let attach_pool = PoolSize {
                configured: pool.configured,
                mbufs: pool.mbufs,
                data_room: 0,
            };
            pools_bytes += attach_pool.bytes();
            port.tx.push(TxQueuePlan {
                queue: QueueId(q.id),
                device_queue: i as u16,
                pool,
                attach_pool,
            });
        }
        port.rx_scatter = needs_rx_scatter(&port, regions);
        ports.push(port);
    }
    let bytes = (64u64 << 20) + pools_bytes;
    let eal_memory_bytes = bytes + bytes / 4;
    let lent: Vec<(bool, Option<String>)> = regions
        .iter()
        .map(|r| (r.lent, r.not_lent_because.clone()))
        .collect();
    Ok(DpdkPlan {
        eal_args: eal_args(config, eal_memory_bytes),
        eal_memory_bytes,
        ports,
        tx_regions: tx_carry(config, &lent),
    })
}

mod eal;
mod lending;
#[cfg(test)]
mod tests;
