//! The DPDK engine's start-up decisions: which regions it receives into without copying,
//! its mbuf pools (per queue segment), buffer split, and its EAL arguments and memory.

use super::{PlanError, RegionPlan};
use crate::config::{
    Config, Direction, InterfaceConfig, MemoryKind, QueueConfig, validate::is_pci_address,
};
use crate::descriptor::{QueueId, RegionId};
use serde::Serialize;

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

/// How the DPDK engine transmits the buffers of a region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum TxCarry {
    /// Attached to mbufs as external buffers (the region is registered with EAL): no
    /// copy; the buffer returns to its pool when the driver frees the mbuf.
    Attached,
    /// In the mbuf of the RX pool the region is lent to: no copy.
    OwnMbufs,
    /// Copied into an mbuf of the TX queue's pool.
    Copied {
        /// Why not without a copy.
        because: String,
    },
}

impl TxCarry {
    /// True unless copied.
    pub fn zero_copy(&self) -> bool {
        !matches!(self, TxCarry::Copied { .. })
    }
}

/// Per region: how its buffers are sent (see [`TxCarry`]). A host region is attached
/// unless its `zero_copy` is `false` or its buffers exceed an mbuf's 16-bit buffer length.
pub(super) fn tx_carry(config: &Config, lending: &[(bool, Option<String>)]) -> Vec<TxCarry> {
    config
        .memory_regions
        .iter()
        .zip(lending)
        .map(|(m, (lent, _))| {
            let copied = |because: &str| TxCarry::Copied {
                because: because.to_owned(),
            };
            if *lent {
                TxCarry::OwnMbufs
            } else if m.zero_copy == Some(false) {
                copied("zero_copy: false")
            } else if m.kind == MemoryKind::Device {
                copied("GPU memory that is not lent to a PCI NIC's RX pool")
            } else if m.buf_size > u16::MAX as usize {
                copied("buf_size is above 65,535 bytes (an mbuf's buffer length)")
            } else {
                TxCarry::Attached
            }
        })
        .collect()
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

/// Pool of segment `seg` of queue `q` (one pool per segment: header-data split has two).
fn pool_size(config: &Config, q: &QueueConfig, descriptors: u16, seg: usize) -> PoolSize {
    let region = q
        .memory_regions
        .get(seg)
        .and_then(|n| config.memory_regions.iter().find(|m| &m.name == n));
    let (configured, size) = region.map_or((4096, WHOLE_FRAME_ROOM), |m| (m.num_bufs, m.buf_size));
    let size = if q.memory_regions.len() > 1 {
        size
    } else {
        size.max(WHOLE_FRAME_ROOM)
    };
    PoolSize {
        configured,
        mbufs: configured.max(min_mbufs(descriptors, q.batch_size)),
        data_room: (size + HEADROOM).min(u16::MAX as usize),
    }
}

/// EAL memory a queue accounts for: a pool per segment. A lent queue's pool sits over its
/// region, but EAL still holds the mbuf headers; it is counted whole, for slack.
fn eal_bytes_of(config: &Config, q: &QueueConfig, descriptors: u16) -> u64 {
    (0..q.memory_regions.len().max(1))
        .map(|seg| pool_size(config, q, descriptors, seg).bytes())
        .sum()
}

/// Per region: whether the DPDK engine receives into it without copying, and if not,
/// why. A region qualifies when it is the only region of one RX queue (no other queue
/// uses it), has buffers of at least [`ZERO_COPY_MIN_BUF_SIZE`] bytes and enough of them
/// for the descriptor ring, and is memory the port can reach (host kinds; `device` only
/// for a PCI NIC, which writes it by DMA). A qualifying region is lent unless its
/// `zero_copy` is `false` or, by default, the port is a `net_ring` (which hands over the
/// sender's mbufs, so a lent pool would only add a copy). [`check_lending`] says which
/// outcomes are errors.
pub(super) fn lending(config: &Config) -> Vec<(bool, Option<String>)> {
    let n = config.memory_regions.len();
    let index = |name: &String| config.memory_regions.iter().position(|m| &m.name == name);
    let mut uses = vec![0usize; n];
    for (_, _, q) in config.queues() {
        for i in q.memory_regions.iter().filter_map(index) {
            uses[i] += 1;
        }
    }
    let mut plan: Vec<(bool, Option<String>)> = vec![
        (
            false,
            Some("it is not the only memory region of one RX queue".into())
        );
        n
    ];
    for (iface, dir, q) in config.queues() {
        if dir != Direction::Rx || q.memory_regions.len() != 1 {
            continue;
        }
        let Some(i) = index(&q.memory_regions[0]) else {
            continue;
        };
        let m = &config.memory_regions[i];
        let pci = is_pci_address(&config.interfaces[iface].address);
        let stride = (HEADROOM + m.buf_size).next_multiple_of(LENT_ALIGN);
        let rx_descriptors = descriptors(config, &config.interfaces[iface]).0;
        let ring = min_mbufs(rx_descriptors, q.batch_size);
        let why_not = if uses[i] != 1 {
            Some("other queues use it too".to_owned())
        } else if m.kind == MemoryKind::Device && !pci {
            Some("a virtual device cannot reach GPU memory".to_owned())
        } else if m.buf_size < ZERO_COPY_MIN_BUF_SIZE {
            Some(format!("buf_size is below {ZERO_COPY_MIN_BUF_SIZE}"))
        } else if stride > u16::MAX as usize {
            Some("buf_size is above 65 KiB".to_owned())
        } else if m.num_bufs < ring {
            Some(format!(
                "num_bufs is below {ring} (1.5x the {rx_descriptors}-descriptor ring plus a burst)"
            ))
        } else {
            None
        };
        let net_ring = config.interfaces[iface].address.starts_with("net_ring");
        plan[i] = match (why_not, m.zero_copy) {
            (Some(reason), _) => (false, Some(reason)),
            (None, Some(false)) => (false, Some("zero_copy: false".into())),
            (None, None) if net_ring => (
                false,
                Some("a net_ring port hands over the sender's mbufs (set zero_copy: true to lend it anyway)".into()),
            ),
            (None, _) => (true, None),
        };
    }
    plan
}

/// A region with `zero_copy: true` that cannot be lent, or a `device` region that is not
/// (nothing else can fill it), is an error.
pub(super) fn check_lending(
    config: &Config,
    plan: &[(bool, Option<String>)],
) -> Result<(), PlanError> {
    let carry = tx_carry(config, plan);
    let received_into = |name: &str| {
        config
            .queues()
            .any(|(_, dir, q)| dir == Direction::Rx && q.memory_regions.iter().any(|n| n == name))
    };
    for ((m, (lent, why)), carry) in config.memory_regions.iter().zip(plan).zip(&carry) {
        // A region only sent from is zero copy when attached; one received into, when lent.
        let sent_without_copy = carry.zero_copy() && !received_into(&m.name);
        if m.zero_copy == Some(true) && !lent && !sent_without_copy {
            return Err(PlanError::ZeroCopyImpossible {
                region: m.name.clone(),
                reason: why.clone().unwrap_or_default(),
            });
        }
        // Queues on a virtual device receive into and send from their staging region;
        // the worker's stage moves packets to and from GPU memory.
        let staged = config.queues().all(|(i, dir, q)| {
            !q.memory_regions.contains(&m.name)
                || config
                    .memory_region(&super::staging::staging_name(
                        &config.interfaces[i].name,
                        dir,
                        q.id,
                    ))
                    .is_some()
        });
        if m.kind == MemoryKind::Device && !lent && !staged {
            return Err(PlanError::DeviceUnreachable {
                region: m.name.clone(),
                reason: why.clone().unwrap_or_default(),
            });
        }
    }
    Ok(())
}

/// EAL arguments from `config`: the main lcore on `master_core`, huge pages or `--no-huge` (with `-m`) when no region is `huge`, every PCI address allowed
/// (`-a`) and every other address as a `--vdev`.
fn eal_args(config: &Config, memory_bytes: u64) -> Vec<String> {
    let mut a = vec![
        "dataplane".to_owned(),
        "-l".to_owned(),
        config.master_core.to_string(),
        format!(
            "--log-level={}",
            crate::config::eal_log_level(&config.log_level, config.debug)
        ),
    ];
    // The EAL's own start-up lines only when debugging.
    if crate::config::eal_log_level(&config.log_level, config.debug) < 8 {
        a.push("--log-level=lib.eal:error".to_owned());
    }
    if config
        .memory_regions
        .iter()
        .any(|m| m.kind == MemoryKind::Huge)
    {
        a.push("--huge-unlink".to_owned());
    } else {
        a.extend([
            "--no-huge".to_owned(),
            "--no-shconf".to_owned(),
            "-m".to_owned(),
            memory_bytes.div_ceil(1 << 20).to_string(),
        ]);
    }
    let mut pci = false;
    for iface in &config.interfaces {
        if is_pci_address(&iface.address) {
            pci = true;
            a.extend(["-a".to_owned(), iface.address.clone()]);
        } else {
            a.push(format!("--vdev={}", vdev_args(config, iface)));
        }
    }
    if pci {
        // Regions are this process's own memory, registered with EAL with their virtual
        // addresses as IOVAs (lent to a pool, or attached to TX mbufs): a NIC must see
        // virtual addresses, through the IOMMU (vfio) or its own translation (mlx5).
        a.push("--iova-mode=va".to_owned());
    } else {
        a.push("--no-pci".to_owned());
    }
    a
}

/// The vdev string of `iface` as EAL gets it: its `address`, and for a net_memif port
/// whose frames exceed memif's default 2048-byte ring buffers, `bsize` (the next power of
/// two above the largest frame) unless the address sets it. A frame spread over several
/// memif buffers arrives corrupted from DPDK 22.11's memif (seen with 9000-byte frames:
/// duplicates, gaps and cut frames; none with one buffer per frame).
fn vdev_args(config: &Config, iface: &crate::config::InterfaceConfig) -> String {
    let address = &iface.address;
    let frame = largest_frame(config, iface).min(MAX_FRAME);
    let memif = address.starts_with("net_memif");
    let given = address.split(',').any(|kv| kv.trim().starts_with("bsize="));
    if memif && !given && frame > MEMIF_BUFFER {
        format!("{address},bsize={}", frame.next_power_of_two())
    } else {
        address.clone()
    }
}

/// memif's default ring buffer size (`bsize`).
const MEMIF_BUFFER: usize = 2048;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        crate::config::load_with(text, "t", &|_| true)
            .unwrap()
            .config
    }

    /// Ring depths: 1024 on a virtual device; the reference's 8192 on a PCI NIC, the RX
    /// ring halved until a region an RX queue receives into alone keeps 1.5x the ring plus
    /// a burst (so it is still lent), never below 1024; `descriptors` wins over both, and
    /// the pools and lending follow the port's rings.
    #[test]
    fn ring_depths_follow_the_keys_else_the_device_kind_and_the_lent_regions() {
        let text = |address: &str, rx_bufs: usize, keys: &str| {
            format!(
                r#"    memory_regions:
    - {{name: rxm, kind: host, affinity: 0, num_bufs: {rx_bufs}, buf_size: 2048}}
    - {{name: txm, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048, zero_copy: false}}
    interfaces:
    - name: p
      address: "{address}"
      rx:
        {keys}
        queues:
        - {{name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [rxm]}}
      tx:
        queues:
        - {{name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [txm]}}
"#
            )
        };
        let port = |address: &str, rx_bufs: usize, keys: &str| {
            let yaml = format!(
                "%YAML 1.2\n---\ndataplane:\n  cfg:\n    version: 1\n    stream_type: raw\n    master_core: 0\n{}",
                text(address, rx_bufs, keys)
            );
            let cfg = load(&yaml);
            let plan = crate::plan::Plan::from_config(&cfg).unwrap();
            let p = plan.dpdk().unwrap().ports[0].clone();
            let lent = plan.regions[0].lent;
            (p, lent)
        };
        let (vdev, lent) = port("net_null0", 16384, "");
        assert_eq!((vdev.rx_descriptors, vdev.tx_descriptors), (1024, 1024));
        assert!(lent);
        assert!(!vdev.rx_scatter, "2048-byte frames fit 2048-byte buffers");
        let (pci, lent) = port("0000:3b:00.0", 16384, "");
        assert_eq!((pci.rx_descriptors, pci.tx_descriptors), (8192, 8192));
        assert!(lent, "16384 >= 1.5 x 8192 + 32");
        assert_eq!(
            pci.tx[0].pool.mbufs,
            8192 * 3 / 2 + 32,
            "the TX copy pool is raised to the 8192-descriptor ring"
        );
        let (pci, lent) = port("0000:3b:00.0", 8192, "");
        assert_eq!(
            pci.rx_descriptors, 4096,
            "8192 buffers keep a 4096 ring fed"
        );
        assert!(lent);
        let (pci, lent) = port("0000:3b:00.0", 1000, "");
        assert_eq!(pci.rx_descriptors, 1024, "never below 1024");
        assert!(!lent, "1000 buffers cannot feed a 1024 ring: copied");
        let (pci, lent) = port("0000:3b:00.0", 1000, "descriptors: 512");
        assert_eq!(pci.rx_descriptors, 512);
        assert!(lent, "1000 >= 1.5 x 512 + 32");
        let (vdev, _) = port("net_null0", 16384, "descriptors: 4096");
        assert_eq!(vdev.rx_descriptors, 4096);
        let RxReceive::Lent { .. } = vdev.rx[0].receive else {
            panic!("lent: {:?}", vdev.rx[0].receive)
        };
        let (vdev, lent) = port("net_null0", 4096, "descriptors: 4096");
        assert!(!lent, "4096 buffers cannot feed a 4096 ring");
        let RxReceive::Copy { pool } = vdev.rx[0].receive else {
            panic!("copied: {:?}", vdev.rx[0].receive)
        };
        assert_eq!(pool.mbufs, 4096 * 3 / 2 + 32);
    }

    fn text_of_memif(buf_size: usize, args: &str) -> String {
        format!(
            "%YAML 1.2\n---\ndataplane:\n  cfg:\n    version: 1\n    stream_type: raw\n    master_core: 0\n    memory_regions:\n    - {{name: m, kind: host, affinity: 0, num_bufs: 4096, buf_size: {buf_size}}}\n    interfaces:\n    - name: p\n      address: \"net_memif0,role=server{args}\"\n      rx:\n        queues:\n        - {{name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [m]}}\n"
        )
    }

    /// The MTU comes from the largest frame of any queue, RX or TX (a TX queue larger than
    /// every RX queue counts), a frame being the sum of a queue's segment buffers; it is
    /// capped at 9100-byte frames and never below the smallest MTU.
    #[test]
    fn mtu_follows_the_largest_frame_of_any_queue() {
        assert_eq!(mtu_for_frame(2048), 2034);
        assert_eq!(mtu_for_frame(9000), 8986);
        assert_eq!(mtu_for_frame(65536), 9086);
        assert_eq!(mtu_for_frame(0), MIN_MTU);
        assert_eq!(
            kernel_interface("net_af_packet0,framesz=4096,iface=veth1").as_deref(),
            Some("veth1")
        );
        assert_eq!(kernel_interface("net_ring0"), None);
        assert_eq!(kernel_interface("net_memif0,iface=x"), None);
        let cfg = load(config_yaml!(
            raw,
            0,
            r#"    memory_regions:
    - {name: hdr, kind: host, affinity: 0, num_bufs: 4096, buf_size: 64}
    - {name: pay, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1024}
    - {name: jumbo, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000}
    interfaces:
    - name: split
      address: "net_null0"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [hdr, pay]}
    - name: sender
      address: "net_null1"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [pay]}
      tx:
        queues:
        - {name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [jumbo]}
"#
        ));
        let regions = crate::plan::Plan::from_config(&cfg).unwrap();
        let ports = &regions.dpdk().unwrap().ports;
        assert_eq!(
            ports[0].mtu,
            1088 - 14,
            "header and payload buffers of a split"
        );
        assert_eq!(
            ports[1].mtu,
            9000 - 14,
            "the TX queue's frames, larger than RX's"
        );
        assert!(
            !ports[0].rx_scatter,
            "a split takes its frames in two segments"
        );
        let memif = load(&text_of_memif(9000, ""));
        assert!(
            eal_args(&memif, 0).contains(&"--vdev=net_memif0,role=server,bsize=16384".to_owned()),
            "{:?}",
            eal_args(&memif, 0)
        );
        let given = load(&text_of_memif(9000, ",bsize=4096"));
        assert!(
            eal_args(&given, 0).contains(&"--vdev=net_memif0,role=server,bsize=4096".to_owned())
        );
        let small = load(&text_of_memif(2048, ""));
        assert!(eal_args(&small, 0).contains(&"--vdev=net_memif0,role=server".to_owned()));
        assert!(
            ports[1].rx_scatter,
            "9000-byte frames over 2048-byte RX mbufs need a chain"
        );
    }

    #[test]
    fn eal_arguments_follow_the_config() {
        let cfg = load(config_yaml!(
            raw,
            1,
            r#"    memory_regions:
    - {name: b, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    interfaces:
    - name: a
      address: "net_memif0,role=server,socket=/tmp/x.sock"
      rx:
        queues:
        - {name: q, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [b]}
"#
        ));
        let a = eal_args(&cfg, 300 << 20);
        assert_eq!(&a[1..3], &["-l", "1"]);
        assert!(a.contains(&"--no-huge".to_owned()) && a.contains(&"300".to_owned()));
        assert!(a.contains(&"--vdev=net_memif0,role=server,socket=/tmp/x.sock".to_owned()));
        assert!(a.contains(&"--no-pci".to_owned()));
        assert!(
            !a.iter().any(|x| x.starts_with("--file-prefix")),
            "the process's own prefix is added at start, not planned"
        );
        assert_eq!(port_name("net_memif0,role=server"), "net_memif0");
        assert_eq!(port_name("0000:01:00.0"), "0000:01:00.0");
    }

    #[test]
    fn zero_copy_takes_a_queue_own_large_region_the_port_can_reach() {
        let text = |address: &str, own: &str| {
            format!(
                config_yaml!(
                    raw,
                    0,
                    r#"    memory_regions:
    - {{name: own, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048, zero_copy: {own}}}
    - {{name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}}
    - {{name: small, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1024}}
    - {{name: few, kind: host, affinity: 0, num_bufs: 1000, buf_size: 2048}}
    - {{name: gpu, kind: device, affinity: 0, num_bufs: 4096, buf_size: 4096}}
    interfaces:
    - name: a
      address: "{address}"
      rx:
        queues:
        - {{name: q0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [own]}}
        - {{name: q1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [shared]}}
        - {{name: q2, id: 2, cpu_core: 0, batch_size: 32, memory_regions: [shared]}}
        - {{name: q3, id: 3, cpu_core: 0, batch_size: 32, memory_regions: [small]}}
        - {{name: q4, id: 4, cpu_core: 0, batch_size: 32, memory_regions: [few]}}
        - {{name: q5, id: 5, cpu_core: 0, batch_size: 32, memory_regions: [gpu]}}
"#
                ),
                address = address,
                own = own
            )
        };
        let decide = |address: &str, own: &str| lending(&load(&text(address, own)));
        let lent = |address: &str| -> Vec<bool> {
            decide(address, "auto").into_iter().map(|p| p.0).collect()
        };
        assert_eq!(
            lent("net_null0"),
            vec![true, false, false, false, false],
            "a vdev cannot reach GPU memory"
        );
        assert_eq!(
            lent("net_ring0"),
            vec![false, false, false, false, false],
            "net_ring hands over the sender's mbufs: copy"
        );
        assert_eq!(
            lent("0000:3b:00.0"),
            vec![true, false, false, false, true],
            "a PCI NIC writes GPU memory by DMA"
        );
        assert!(decide("net_ring0", "true")[0].0, "asked for");
        assert_eq!(
            decide("0000:3b:00.0", "false")[0],
            (false, Some("zero_copy: false".into())),
            "declined"
        );
        let why = |address: &str, i: usize| decide(address, "auto")[i].1.clone().unwrap();
        assert_eq!(why("net_null0", 2), "buf_size is below 2048");
        assert_eq!(
            why("net_null0", 3),
            "num_bufs is below 1568 (1.5x the 1024-descriptor ring plus a burst)"
        );
        assert_eq!(
            why("net_null0", 4),
            "a virtual device cannot reach GPU memory"
        );
        let cfg = load(&text("net_null0", "auto"));
        assert_eq!(
            check_lending(&cfg, &lending(&cfg)),
            Err(PlanError::DeviceUnreachable {
                region: "gpu".into(),
                reason: "a virtual device cannot reach GPU memory".into()
            }),
            "nothing else can fill a device region"
        );
        let shared = load(&text("0000:3b:00.0", "auto").replace(
            "name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048",
            "name: shared, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048, zero_copy: true",
        ));
        assert_eq!(
            check_lending(&shared, &lending(&shared)),
            Err(PlanError::ZeroCopyImpossible {
                region: "shared".into(),
                reason: "other queues use it too".into()
            })
        );
    }
}
