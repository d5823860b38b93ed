//! The validated configuration model. Field meanings follow the reference schema; see
//! `docs/config.md` for the key-by-key reference.

use super::yaml::Location;
use std::net::Ipv4Addr;

pub use crate::descriptor::MAX_SEGMENTS;

/// Bytes of the check trailer at the end of every bench frame (stream id, flow index,
/// sequence number); the rest of a frame is the sender's to fill.
pub const BENCH_TRAILER_BYTES: usize = 20;

/// How host bytes reach GPU memory when the engine cannot write it (`gpu_stage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageMode {
    /// Gather on the CPU into pinned memory, then asynchronous copies.
    Copy,
    /// A GPU kernel reads from pinned memory.
    Kernel,
}

/// `metrics` (ours): where the Prometheus / OpenMetrics endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `listen`: IP:PORT, or a bare port on 127.0.0.1 (port 0: any free port).
    pub listen: String,
}

/// `IP:PORT`, or a bare port (`9464`, `:9464`) on 127.0.0.1.
pub fn metrics_listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse()
        .map_err(|e| format!("`{text}` is not IP:PORT or a port ({e}); for example 127.0.0.1:9464"))
}

/// A whole configuration file.
#[derive(Clone, Debug)]
pub struct Config {
    /// Schema version (only 1 exists).
    pub version: u32,
    /// Core of the stats thread (and, for DPDK, the EAL main lcore).
    pub master_core: u32,
    /// `raw` Ethernet or `socket` streams.
    pub stream_type: StreamType,
    /// The engine that will run this configuration.
    pub engine: EngineKind,
    /// Log level for the data plane's own logging.
    pub log_level: String,
    /// `debug:` (accepted, only raises the log level).
    pub debug: bool,
    /// `gpu_stage` (ours): how the RX worker moves packets from host memory into a
    /// queue's GPU memory when the engine cannot (see [`crate::stage`]).
    pub gpu_stage: StageMode,
    /// `metrics` (ours): the Prometheus endpoint, when asked for.
    pub metrics: Option<MetricsConfig>,
    /// Memory regions in file order.
    pub memory_regions: Vec<MemoryRegionConfig>,
    /// Interfaces in file order; their index is the port id.
    pub interfaces: Vec<InterfaceConfig>,
    /// Application (benchmark) sections.
    pub bench: BenchConfig,
}

/// `stream_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamType {
    /// Raw Ethernet frames.
    Raw,
    /// Kernel sockets or RDMA connections.
    Socket,
}

/// Which engine moves the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// In-process software loopback (`loopback: "sw"`).
    Loopback,
    /// DPDK poll-mode drivers (`stream_type: raw`).
    Dpdk,
    /// Raw Ethernet through ibverbs (`engine: ibverbs` with `raw`).
    Ibverbs,
    /// Kernel UDP/TCP sockets.
    Socket,
    /// RDMA (RoCE) connections.
    Rdma,
}

impl EngineKind {
    /// True when this engine steers flows in software (no NIC flow tables).
    pub fn software_steering(self) -> bool {
        !matches!(self, EngineKind::Dpdk | EngineKind::Ibverbs)
    }

    /// Name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Loopback => "loopback",
            EngineKind::Dpdk => "dpdk",
            EngineKind::Ibverbs => "ibverbs",
            EngineKind::Socket => "socket",
            EngineKind::Rdma => "rdma",
        }
    }
}

/// Where a memory region lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Ordinary page-aligned host memory.
    Host,
    /// Host memory in huge pages.
    Huge,
    /// Page-locked host memory registered with CUDA.
    HostPinned,
    /// CUDA device memory.
    Device,
}

impl MemoryKind {
    /// The YAML spelling.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Host => "host",
            MemoryKind::Huge => "huge",
            MemoryKind::HostPinned => "host_pinned",
            MemoryKind::Device => "device",
        }
    }
}

/// RDMA access rights of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Local access only.
    Local,
    /// Peers may RDMA READ.
    RdmaRead,
    /// Peers may RDMA WRITE.
    RdmaWrite,
}

/// `memory_regions[]`.
#[derive(Clone, Debug)]
pub struct MemoryRegionConfig {
    /// Unique name.
    pub name: String,
    /// Memory kind.
    pub kind: MemoryKind,
    /// GPU ordinal for `device`/`host_pinned`, NUMA node otherwise.
    pub affinity: u32,
    /// `affinity` given as a GPU UUID (`GPU-…`, as `nvidia-smi -L` prints it) for a
    /// `device`/`host_pinned` region: [`crate::plane::DataPlane::start`] finds its ordinal.
    pub gpu_uuid: Option<String>,
    /// Number of buffers.
    pub num_bufs: usize,
    /// Bytes per buffer.
    pub buf_size: usize,
    /// RDMA access rights.
    pub access: Vec<Access>,
    /// `zero_copy`: lend the buffers to the engine's own pool so received frames land in
    /// them without a copy (DPDK: the RX queue's mbuf pool). `None`: the engine decides.
    pub zero_copy: Option<bool>,
    /// Where it is defined.
    pub location: Location,
}

impl MemoryRegionConfig {
    /// A region built in code rather than read from YAML: GPU 0 or NUMA node 0, local
    /// access, zero copy left to the engine.
    pub fn new(name: &str, kind: MemoryKind, num_bufs: usize, buf_size: usize) -> Self {
        Self {
            name: name.into(),
            kind,
            affinity: 0,
            gpu_uuid: None,
            num_bufs,
            buf_size,
            access: vec![Access::Local],
            zero_copy: None,
            location: Location::default(),
        }
    }
}

/// `interfaces[]`.
#[derive(Clone, Debug)]
pub struct InterfaceConfig {
    /// Label.
    pub name: String,
    /// PCI address, vdev string, IP address or `loopback`.
    pub address: String,
    /// `socket_config`, for socket streams.
    pub socket: Option<SocketConfig>,
    /// `roce_config`, for RDMA.
    pub roce: Option<RoceConfig>,
    /// Receive side.
    pub rx: Option<RxConfig>,
    /// Transmit side.
    pub tx: Option<TxConfig>,
    /// `fault_injection` (ours, software loopback only): frames this interface's wire
    /// drops, duplicates, corrupts, reorders or delays, for tests of counters and verdicts.
    pub faults: Option<FaultInjection>,
    /// Where it is defined.
    pub location: Location,
}

/// Deterministic faults on a software wire: rules applied to each frame in TX order.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultInjection {
    /// Seed of the random choices (`percent` rules); the same seed gives the same faults.
    pub seed: u64,
    /// Rules, first match wins (one fault per frame).
    pub rules: Vec<FaultRule>,
}

/// One fault rule: what to do, and to which frames (counted per TX queue from 1).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    /// The fault.
    pub action: FaultAction,
    /// Which frames.
    pub select: FaultSelect,
}

/// What a fault rule does to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Drop it (counted as `injected`).
    Drop,
    /// Send it twice (the copy in a new buffer right after it).
    Duplicate,
    /// Invert one byte, 20 bytes before its end (the bench trailer's magic).
    Corrupt,
    /// Send it after the frame that follows it.
    Reorder,
    /// Hold it back until this many later frames were sent (or the queue goes idle).
    Delay {
        /// Frames that overtake it.
        frames: u32,
    },
    /// Panic the worker thread (tests of worker failure handling).
    Panic,
}

/// Which frames a fault rule picks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultSelect {
    /// Frames N, 2N, 3N, ...
    Every(u64),
    /// Each frame with this probability (percent), from the seeded generator.
    Percent(f64),
    /// Only frame N.
    At(u64),
}

/// Transport of a socket stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// `udp://`
    Udp,
    /// `tcp://`
    Tcp,
    /// `roce://` (or the legacy `rdma://`).
    Roce,
}

/// Client or server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SocketMode {
    /// Connects to a peer.
    Client,
    /// Listens for peers.
    Server,
}

/// An endpoint parsed from `scheme://ip[:port]` or the legacy ip/port keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// IPv4 address.
    pub ip: Ipv4Addr,
    /// Port, 0 when not given.
    pub port: u16,
}

/// `socket_config`.
#[derive(Clone, Debug)]
pub struct SocketConfig {
    /// Client or server.
    pub mode: SocketMode,
    /// Transport from the URI scheme (or the legacy `protocol:` key).
    pub transport: Transport,
    /// Local endpoint.
    pub local: Option<Endpoint>,
    /// Remote endpoint.
    pub remote: Option<Endpoint>,
    /// Largest message.
    pub max_payload_size: u32,
    /// Seconds between TCP connect retries.
    pub retry_connect_s: u32,
    /// `busy_poll_us` (this project's key): SO_BUSY_POLL microseconds on the queues'
    /// sockets, 0 = off.
    pub busy_poll_us: u32,
    /// `udp_gso` (this project's key, default true): send runs of equal-sized datagrams
    /// as one UDP GSO call.
    pub udp_gso: bool,
    /// `udp_gro` (this project's key, default false): let the kernel hand over runs of
    /// equal-sized datagrams of a flow as one read. Off by default: the kernel then counts
    /// a dropped coalesced read as one drop, so `engine_missed` undercounts datagrams.
    pub udp_gro: bool,
    /// `allowed_peers` (this project's key): addresses and prefixes that may reach the
    /// interface; `None` when not given (see [`SocketConfig::peer_filter`]).
    pub allowed_peers: Option<Vec<Ipv4Prefix>>,
    /// `idle_timeout_s` (this project's key, TCP servers, default 60): a connection that
    /// moved no byte either way for this long is closed, freeing its lane; 0 = never.
    pub idle_timeout_s: u32,
}

impl SocketConfig {
    /// Who may reach the interface: `allowed_peers` when given; otherwise the configured
    /// remote address alone where there is one (connected modes); otherwise anyone.
    pub fn peer_filter(&self) -> PeerFilter {
        match (&self.allowed_peers, self.remote) {
            (Some(list), _) => PeerFilter::Only(list.clone()),
            (None, Some(r)) => PeerFilter::Only(vec![Ipv4Prefix {
                addr: r.ip,
                len: 32,
            }]),
            (None, None) => PeerFilter::Any,
        }
    }
}

/// Which peers a listening interface takes traffic and connections from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PeerFilter {
    /// Anyone.
    #[default]
    Any,
    /// Only sources inside one of these prefixes.
    Only(Vec<Ipv4Prefix>),
}

impl PeerFilter {
    /// True when `peer` may reach the interface (IPv4 only: these engines speak IPv4, so
    /// an IPv6 source never passes a list; an IPv4-mapped one is read as IPv4).
    pub fn allows(&self, peer: std::net::IpAddr) -> bool {
        let v4 = match peer {
            std::net::IpAddr::V4(a) => Some(a),
            std::net::IpAddr::V6(a) => a.to_ipv4_mapped(),
        };
        match (self, v4) {
            (PeerFilter::Any, _) => true,
            (PeerFilter::Only(list), Some(a)) => list.iter().any(|p| p.contains(u32::from(a))),
            (PeerFilter::Only(_), None) => false,
        }
    }
}

impl std::fmt::Display for PeerFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerFilter::Any => f.write_str("anyone"),
            PeerFilter::Only(list) => {
                for (n, p) in list.iter().enumerate() {
                    if n > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
        }
    }
}

/// As its text: `anyone`, or the prefixes.
impl serde::Serialize for PeerFilter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `roce_config`.
#[derive(Clone, Debug)]
pub struct RoceConfig {
    /// `RC`, `UC` or `UD`.
    pub transport_mode: String,
    /// `min_rnr_timer`: how long a peer waits before resending when we had no receive
    /// posted, in the IB encoding (0 = 655.36 ms, 12 = 0.64 ms, 31 = 491.52 ms).
    pub min_rnr_timer: u8,
    /// `rnr_retry`: receiver-not-ready retries (7 = retry for ever).
    pub rnr_retry: u8,
    /// `retry_count`: transport retries before a send fails with retry-exceeded.
    pub retry_count: u8,
    /// `max_inflight_bytes`: bytes of SENDs in flight per connection; divided by the
    /// message size (the TX region's `buf_size`) it gives the send window.
    pub max_inflight_bytes: u64,
    /// `gpu_memory_path` (ours): how a connection reaches a `device` region.
    pub gpu_memory_path: GpuMemoryPath,
}

/// `roce_config.gpu_memory_path` (ours): how an RDMA connection reaches a queue's `device`
/// region (the choice NCCL and UCX offer as their GPUDirect RDMA setting).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuMemoryPath {
    /// Register GPU memory with the NIC (dma-buf, else peer memory); where the NIC or
    /// driver cannot, stage through pinned host memory instead, and say why.
    #[default]
    Auto,
    /// The NIC must read and write GPU memory itself: a connection whose GPU memory it
    /// cannot register fails.
    Direct,
    /// Always stage through pinned host memory (the NIC never touches GPU memory).
    Staged,
}

impl RoceConfig {
    /// Default `min_rnr_timer`: 0.64 ms (rdma_cm's 0 means 655 ms, a throughput cliff
    /// for small messages).
    pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;
    /// Default `max_inflight_bytes`.
    pub const DEFAULT_MAX_INFLIGHT_BYTES: u64 = 2 << 20;

    /// Sends in flight for messages of `message_size` bytes: 1 to 1024.
    pub fn send_window(&self, message_size: usize) -> u32 {
        (self.max_inflight_bytes / message_size.max(1) as u64).clamp(1, 1024) as u32
    }
}

impl Default for RoceConfig {
    fn default() -> Self {
        Self {
            transport_mode: "RC".into(),
            min_rnr_timer: Self::DEFAULT_MIN_RNR_TIMER,
            rnr_retry: 7,
            retry_count: 7,
            max_inflight_bytes: Self::DEFAULT_MAX_INFLIGHT_BYTES,
            gpu_memory_path: GpuMemoryPath::Auto,
        }
    }
}

/// Where a reorder runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReorderKind {
    /// CUDA kernels on the GPU of the output region.
    Gpu,
    /// Plain CPU code on the application's thread.
    Cpu,
}

/// `rx.reorder_configs[]`: packets of some flows are put back in sequence order, a batch at
/// a time, into one contiguous buffer of `memory_region`.
#[derive(Clone, Debug)]
pub struct ReorderConfig {
    /// Unique per interface.
    pub name: String,
    /// GPU or CPU.
    pub kind: ReorderKind,
    /// Region of the output buffers.
    pub memory_region: String,
    /// Bytes skipped at the start of each packet.
    pub payload_byte_offset: u32,
    /// Flows whose packets are reordered.
    pub flow_ids: Vec<u32>,
    /// Optional sample conversion (`data_types`).
    pub conversion: Option<gpudirect::reorder::Conversion>,
    /// Batch and slot of each packet (`method`).
    pub method: gpudirect::reorder::Method,
    /// Where it is defined.
    pub location: Location,
}

impl ReorderConfig {
    /// The kernel parameters for packets from a region of `source_buf_size`-byte buffers:
    /// each slot takes up to `source_buf_size - payload_byte_offset` payload bytes.
    pub fn spec(&self, source_buf_size: usize) -> gpudirect::reorder::ReorderSpec {
        gpudirect::reorder::ReorderSpec {
            method: self.method,
            payload_byte_offset: self.payload_byte_offset,
            in_slot_bytes: source_buf_size.saturating_sub(self.payload_byte_offset as usize) as u32,
            conversion: self.conversion,
        }
    }
}

/// `rx`.
#[derive(Clone, Debug)]
pub struct RxConfig {
    /// Drop packets no flow matches instead of spreading them over the queues.
    pub flow_isolation: bool,
    /// Queues.
    pub queues: Vec<QueueConfig>,
    /// Static flow rules, in priority order (the first match wins).
    pub flows: Vec<FlowConfig>,
    /// Flex items (32-bit fields after the UDP header) that flows can match.
    pub flex_items: Vec<FlexItemConfig>,
    /// With `flow_isolation`, unmatched packets go to this queue instead of being dropped
    /// (so ARP and the like can be inspected). Flow id 0.
    pub exception_queue: Option<u16>,
    /// Reorders (`reorder_configs`).
    pub reorder: Vec<ReorderConfig>,
    /// `dynamic_flow_capacity`: on an interface whose rules are on the device (rte_flow),
    /// at most this many flows added at run time at once, with device priorities reserved
    /// between the static rules and the `exception_queue` catch-all. 0: no limit (and no
    /// run-time flows there when an exception queue is set).
    pub dynamic_flow_capacity: u32,
    /// `hardware_timestamps`: every received packet carries its receive time
    /// (`Packet::timestamp_ns`, ns since the Unix epoch). No engine here reads a NIC clock
    /// yet: the RX worker takes the time in software when it receives.
    pub timestamps: bool,
}

impl RxConfig {
    /// The queue reorder `r` serves: that of its first flow that goes to exactly one queue
    /// (validation makes every flow of a reorder go to the same one).
    pub fn reorder_queue(&self, r: &ReorderConfig) -> Option<&QueueConfig> {
        r.flow_ids.iter().find_map(|id| {
            let f = self.flows.iter().find(|f| f.id == *id)?;
            let [q] = f.queue_ids[..] else { return None };
            self.queues.iter().find(|c| c.id == q)
        })
    }

    /// No queues, no flows.
    pub fn empty() -> Self {
        Self {
            flow_isolation: false,
            queues: Vec::new(),
            flows: Vec::new(),
            flex_items: Vec::new(),
            exception_queue: None,
            reorder: Vec::new(),
            dynamic_flow_capacity: 0,
            timestamps: false,
        }
    }
}

/// `rx.flex_items[]`: a 32-bit word at `offset` bytes after the UDP header of packets to
/// `udp_dst_port`.
#[derive(Clone, Debug)]
pub struct FlexItemConfig {
    /// Name.
    pub name: String,
    /// Id, unique per interface; flows refer to it as `flex_item_id`.
    pub id: u16,
    /// Bytes after the UDP header (a multiple of 4, at most 28).
    pub offset: u32,
    /// UDP destination port that activates the item.
    pub udp_dst_port: u16,
    /// Where it is defined.
    pub location: Location,
}

/// `tx`.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// `accurate_send`: each packet's `timestamp_ns` on a TX burst is the time (ns since
    /// the Unix epoch; 0 = now) before which it must not be sent.
    pub accurate_send: bool,
    /// Queues.
    pub queues: Vec<QueueConfig>,
    /// Egress flows: header transforms applied to matching sent packets (hardware only).
    pub flows: Vec<TxFlowConfig>,
}

/// `tx.flows[]`: packets the interface sends that match get VLAN tags or tunnel headers.
#[derive(Clone, Debug)]
pub struct TxFlowConfig {
    /// Name.
    pub name: String,
    /// Id.
    pub id: u32,
    /// Transforms, in order.
    pub transforms: Vec<TxTransform>,
    /// Match fields.
    pub matches: FlowMatch,
    /// Where it is defined.
    pub location: Location,
}

/// A header transform of a TX flow.
#[derive(Clone, Debug, PartialEq)]
pub enum TxTransform {
    /// Push a VLAN tag.
    VlanPush {
        /// VLAN id 0..4095.
        vlan_id: u16,
        /// Priority 0..7.
        pcp: u8,
        /// Drop eligible 0..1.
        dei: u8,
        /// Tag EtherType (default 0x8100).
        ethertype: u16,
    },
    /// Add tunnel outer headers.
    TunnelEncap(TunnelConfig),
}

/// A receive or transmit queue.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Name.
    pub name: String,
    /// Queue id, unique per interface and direction.
    pub id: u16,
    /// Core of the busy-poll worker that serves it.
    pub cpu_core: u32,
    /// Packets per burst.
    pub batch_size: u32,
    /// RX: flush a partial burst this long after its first packet (0: only full bursts).
    pub timeout_us: u64,
    /// Memory regions, one per segment, in segment order.
    pub memory_regions: Vec<String>,
    /// TX `offloads: [tx_eth_src]`: the worker writes the interface's MAC address into the
    /// Ethernet source field of every frame it sends.
    pub tx_eth_src: bool,
    /// TX `pacing_mbps`: the queue's average rate cap in Mb/s of Ethernet frames (no
    /// preamble, gap or FCS), 0 for none. The TX worker paces in software.
    pub pacing_mbps: u64,
    /// RX: `capture` (this project's key): where the queue's bursts are written as the
    /// application polls them.
    pub capture: Option<crate::config::CaptureSpec>,
    /// RX: `stage_core` (this project's key): the core of a second worker that moves the
    /// queue's packets into its layout (GPU memory, header-data split) when the engine
    /// cannot, leaving `cpu_core` to receiving.
    pub stage_core: Option<u32>,
    /// RX: the rest of a `stage_core` list: cores of threads that share the stage's CPU
    /// copies (pageable packets gathered into pinned staging, host-to-host splits).
    pub copy_cores: Vec<u32>,
    /// Where it is defined.
    pub location: Location,
}

/// `rx.queues[].capture`: a file sink for what the queue delivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureSpec {
    /// `path`: the file (a directory for `raw_per_packet`).
    pub path: String,
    /// `format`: `pcap` (default), `pcapng`, `raw`, `raw_per_packet`.
    pub format: String,
    /// `queue_mb`: MiB of packet data that may wait for the writer (default 256); more is
    /// dropped and counted as `writer_full`.
    pub queue_mb: u32,
}

/// A UDP port or inclusive port range (`4096` or `"4096-4100"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (equal to `first` for one port).
    pub last: u16,
}

impl PortRange {
    /// Number of ports in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Always false: a range holds at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True when `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        self.first <= port && port <= self.last
    }

    /// True when every port of `other` is in this range.
    pub fn covers(&self, other: &PortRange) -> bool {
        self.first <= other.first && other.last <= self.last
    }
}

/// An IPv4 prefix (`10.0.0.1` or `10.0.0.0/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Prefix {
    /// Address.
    pub addr: Ipv4Addr,
    /// Prefix length 0..=32.
    pub len: u8,
}

impl std::fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Ipv4Prefix {
    /// The netmask as an integer.
    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> u32 {
        u32::from(self.addr) & self.mask()
    }

    /// True when `addr` lies inside the prefix.
    pub fn contains(&self, addr: u32) -> bool {
        addr & self.mask() == self.network()
    }

    /// True when every address of `other` lies inside this prefix.
    pub fn covers(&self, other: &Ipv4Prefix) -> bool {
        self.len <= other.len && self.contains(other.network())
    }
}

/// `rx.flows[]`.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Name.
    pub name: String,
    /// Flow id delivered with each matching packet.
    pub id: u32,
    /// Target queues (one, or several for RSS).
    pub queue_ids: Vec<u16>,
    /// Match fields (all given fields must match).
    pub matches: FlowMatch,
    /// Header transforms before delivery (hardware steering only).
    pub transforms: Vec<FlowTransform>,
    /// Where it is defined.
    pub location: Location,
}

/// A header transform of an RX flow.
#[derive(Clone, Debug, PartialEq)]
pub enum FlowTransform {
    /// Remove the outer VLAN tag.
    VlanPop,
    /// Remove a tunnel's outer headers.
    TunnelDecap(TunnelConfig),
}

/// Tunnel kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelKind {
    /// VXLAN (UDP, default port 4789).
    Vxlan,
    /// GRE.
    Gre,
    /// NVGRE.
    Nvgre,
}

/// Outer headers of a tunnel.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelConfig {
    /// Kind.
    pub kind: TunnelKind,
    /// Outer Ethernet source.
    pub outer_eth_src: Option<[u8; 6]>,
    /// Outer Ethernet destination.
    pub outer_eth_dst: Option<[u8; 6]>,
    /// Outer IPv4 source.
    pub outer_ipv4_src: Option<Ipv4Addr>,
    /// Outer IPv4 destination.
    pub outer_ipv4_dst: Option<Ipv4Addr>,
    /// Outer TTL.
    pub outer_ipv4_ttl: u8,
    /// Outer TOS.
    pub outer_ipv4_tos: u8,
    /// VXLAN network id (24 bits).
    pub vni: u32,
    /// VXLAN outer UDP source port (0: any).
    pub outer_udp_src: u16,
    /// VXLAN outer UDP destination port.
    pub outer_udp_dst: u16,
    /// GRE protocol.
    pub gre_protocol: u16,
    /// NVGRE tenant network id (24 bits).
    pub tni: u32,
    /// NVGRE flow id.
    pub nvgre_flow_id: u8,
}

/// The header family a flow matches on; one family per interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchClass {
    /// Ethernet / IPv4 / UDP fields (or no fields: everything).
    Ipv4Udp,
    /// A flex item's 32-bit word.
    FlexItem,
    /// eCPRI over Ethernet.
    Ecpri,
}

impl MatchClass {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            MatchClass::Ipv4Udp => "IPv4/UDP",
            MatchClass::FlexItem => "flex item",
            MatchClass::Ecpri => "eCPRI",
        }
    }
}

/// `rx.flows[].match`.
#[derive(Clone, Debug, Default)]
pub struct FlowMatch {
    /// UDP source port or range.
    pub udp_src: Option<PortRange>,
    /// UDP destination port or range.
    pub udp_dst: Option<PortRange>,
    /// IPv4 total length.
    pub ipv4_len: Option<u16>,
    /// IPv4 source.
    pub ipv4_src: Option<Ipv4Prefix>,
    /// IPv4 destination.
    pub ipv4_dst: Option<Ipv4Prefix>,
    /// VLAN id of the outer tag.
    pub vlan_id: Option<u16>,
    /// eCPRI fields (present: the flow matches eCPRI frames).
    pub ecpri: Option<EcpriMatch>,
    /// Flex item word.
    pub flex: Option<FlexMatch>,
}

impl FlowMatch {
    /// The header family of this match.
    pub fn class(&self) -> MatchClass {
        if self.ecpri.is_some() {
            MatchClass::Ecpri
        } else if self.flex.is_some() {
            MatchClass::FlexItem
        } else {
            MatchClass::Ipv4Udp
        }
    }

    /// True when every packet this match accepts is also accepted by `self` (so a later
    /// rule with match `other` can never fire after a rule with `self`).
    pub fn covers(&self, other: &FlowMatch) -> bool {
        fn opt<T>(a: &Option<T>, b: &Option<T>, f: impl Fn(&T, &T) -> bool) -> bool {
            match (a, b) {
                (None, _) => true,
                (Some(x), Some(y)) => f(x, y),
                (Some(_), None) => false,
            }
        }
        let flex = match (&self.flex, &other.flex) {
            (None, _) => true,
            (Some(a), Some(b)) => {
                a.item_id == b.item_id && a.mask & !b.mask == 0 && (a.value ^ b.value) & a.mask == 0
            }
            (Some(_), None) => false,
        };
        let ecpri = match (&self.ecpri, &other.ecpri) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                opt(&a.msg_type, &b.msg_type, |x, y| x == y) && opt(&a.id, &b.id, |x, y| x == y)
            }
            _ => false,
        };
        // A rule with UDP fields accepts only UDP; one with IPv4 fields only IPv4.
        let needs_udp = |m: &FlowMatch| m.udp_src.is_some() || m.udp_dst.is_some();
        self.class() == other.class()
            && (!needs_udp(self) || needs_udp(other))
            && (!self.has_ip_fields() || other.has_ip_fields())
            && opt(&self.udp_src, &other.udp_src, PortRange::covers)
            && opt(&self.udp_dst, &other.udp_dst, PortRange::covers)
            && opt(&self.ipv4_len, &other.ipv4_len, |a, b| a == b)
            && opt(&self.ipv4_src, &other.ipv4_src, Ipv4Prefix::covers)
            && opt(&self.ipv4_dst, &other.ipv4_dst, Ipv4Prefix::covers)
            && opt(&self.vlan_id, &other.vlan_id, |a, b| a == b)
            && ecpri
            && flex
    }

    /// True when any UDP or IPv4 field is set.
    pub fn has_ip_fields(&self) -> bool {
        self.udp_src.is_some()
            || self.udp_dst.is_some()
            || self.ipv4_len.is_some()
            || self.ipv4_src.is_some()
            || self.ipv4_dst.is_some()
    }
}

/// `match.ecpri`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EcpriMatch {
    /// Message type.
    pub msg_type: Option<u8>,
    /// PC_ID or RTC_ID (needs `msg_type`).
    pub id: Option<u16>,
}

/// `match.flex_item_id` / `val` / `mask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlexMatch {
    /// Flex item id.
    pub item_id: u16,
    /// Value compared under the mask.
    pub value: u32,
    /// Mask.
    pub mask: u32,
}

/// Application sections beside the data plane's own.
#[derive(Clone, Debug, Default)]
pub struct BenchConfig {
    /// `bench_rx` entries.
    pub rx: Vec<BenchRxConfig>,
    /// `bench_tx` entries.
    pub tx: Vec<BenchTxConfig>,
    /// `rdma_bench_server`.
    pub rdma_server: Option<PeerBenchConfig>,
    /// `rdma_bench_client`.
    pub rdma_client: Option<PeerBenchConfig>,
    /// `socket_bench_server`.
    pub socket_server: Option<PeerBenchConfig>,
    /// `socket_bench_client`.
    pub socket_client: Option<PeerBenchConfig>,
    /// `bench_reorder_quantize`: verify a converting reorder's output.
    pub reorder_quantize: Option<ReorderQuantizeConfig>,
}

/// `bench_reorder_quantize`: which converting reorder the bench verifies and how much it
/// must verify. The generators write that reorder's sequence (and batch) fields; every
/// output batch is checked sample by sample against the frames sent.
#[derive(Clone, Copy, Debug)]
pub struct ReorderQuantizeConfig {
    /// The conversion (`input_type`, `output_type`, `endianness`); a reorder with exactly
    /// this conversion must exist.
    pub conversion: gpudirect::reorder::Conversion,
    /// Batches that must be verified for the run to pass.
    pub verify_batches: u64,
    /// Chunks of `chunk_elements` output samples that must be verified per batch (every
    /// chunk of every batch is checked; fewer filled chunks fail the batch).
    pub verify_chunks: u64,
    /// Output samples per chunk.
    pub chunk_elements: u64,
    /// Where it is defined.
    pub location: Location,
}

/// `bench_rx[]`: a checker of received traffic.
#[derive(Clone, Debug)]
pub struct BenchRxConfig {
    /// Interface to read.
    pub interface_name: String,
    /// Queue to read; `None` for every RX queue of the interface.
    pub queue_id: Option<u16>,
    /// Core to pin the checker thread to; `None` for unpinned.
    pub cpu_core: Option<u32>,
    /// `gpu_direct`: whether the queues' payloads must arrive in GPU memory (checked when
    /// the bench starts); `None` when not given.
    pub gpu_direct: Option<bool>,
    /// `split_boundary`: whether the queues must split headers from payloads (two
    /// segments); `None` when not given.
    pub split_boundary: Option<bool>,
    /// `batch_size`: the most packets the application takes at once; the queues' bursts
    /// must not be larger.
    pub batch_size: Option<u32>,
    /// `max_packet_size`: longer packets are counted as oversize and fail the run.
    pub max_packet_size: Option<u32>,
    /// `header_size`: with `split_boundary`, the header segment's buffers must hold it.
    pub header_size: Option<u32>,
    /// Where it is defined.
    pub location: Location,
}

/// `bench_tx[]`: a traffic generator.
#[derive(Clone, Debug)]
pub struct BenchTxConfig {
    /// Interface to send on.
    pub interface_name: String,
    /// Queue to send on.
    pub queue_id: u16,
    /// Core to pin the generator thread to; `None` for unpinned.
    pub cpu_core: Option<u32>,
    /// Packets per burst.
    pub batch_size: u32,
    /// Payload bytes after the header area.
    pub payload_size: u32,
    /// Header area bytes (Ethernet + IPv4 + UDP = 42, padded up to this).
    pub header_size: u32,
    /// UDP source ports, rotated per packet.
    pub udp_src_port: PortRange,
    /// UDP destination ports, rotated per packet.
    pub udp_dst_port: PortRange,
    /// IPv4 source.
    pub ip_src_addr: Ipv4Addr,
    /// IPv4 destination.
    pub ip_dst_addr: Ipv4Addr,
    /// Ethernet source.
    pub eth_src_addr: [u8; 6],
    /// Ethernet destination.
    pub eth_dst_addr: [u8; 6],
    /// `sequence_number_offset` / `sequence_number_start`: a 32-bit big-endian counter at
    /// this offset from the payload start (after `header_size`), counting from `start`, one
    /// per frame of the generator (what a reorder sorts by).
    pub sequence_number: Option<SequenceField>,
    /// `gpu_direct`: frames are written into GPU memory by a kernel (the queue's region
    /// must be `device`). Queues in `device` memory get the GPU writer either way.
    pub gpu_direct: bool,
    /// Where it is defined.
    pub location: Location,
}

/// Where the generator writes its frame counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceField {
    /// Bytes after the payload start.
    pub offset: u32,
    /// First value.
    pub start: u32,
}

/// `rdma_bench_*` / `socket_bench_*`: one side of a request/response benchmark.
#[derive(Clone, Debug)]
pub struct PeerBenchConfig {
    /// True for the server side.
    pub server: bool,
    /// Whether this side sends.
    pub send: bool,
    /// Whether this side receives.
    pub receive: bool,
    /// Core of the application thread.
    pub cpu_core: Option<u32>,
    /// Bytes per message.
    pub message_size: u64,
    /// Outstanding sends (RDMA).
    pub tx_depth: u32,
    /// Posted receives (RDMA).
    pub rx_depth: u32,
    /// Iterations (sockets; 0 = time-bounded).
    pub iterations: i64,
    /// Server address.
    pub server_address: Ipv4Addr,
    /// Client address.
    pub client_address: Ipv4Addr,
    /// Server port.
    pub server_port: u16,
}

impl Config {
    /// Looks up a memory region by name.
    pub fn memory_region(&self, name: &str) -> Option<&MemoryRegionConfig> {
        self.memory_regions.iter().find(|m| m.name == name)
    }

    /// Looks up an interface by name, returning its index (port id).
    pub fn interface_index(&self, name: &str) -> Option<usize> {
        self.interfaces.iter().position(|i| i.name == name)
    }

    /// Every queue with its interface index and direction.
    pub fn queues(&self) -> impl Iterator<Item = (usize, Direction, &QueueConfig)> {
        self.interfaces.iter().enumerate().flat_map(|(i, iface)| {
            let rx = iface
                .rx
                .iter()
                .flat_map(move |r| r.queues.iter().map(move |q| (i, Direction::Rx, q)));
            let tx = iface
                .tx
                .iter()
                .flat_map(move |t| t.queues.iter().map(move |q| (i, Direction::Tx, q)));
            rx.chain(tx)
        })
    }

    /// Distinct worker cores, sorted.
    pub fn worker_cores(&self) -> Vec<u32> {
        let mut cores: Vec<u32> = self
            .queues()
            .flat_map(|(_, _, q)| {
                std::iter::once(q.cpu_core)
                    .chain(q.stage_core)
                    .chain(q.copy_cores.iter().copied())
            })
            .collect();
        cores.sort_unstable();
        cores.dedup();
        cores
    }
}

/// Receive or transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Receive.
    Rx,
    /// Transmit.
    Tx,
}

impl Direction {
    /// `rx` or `tx`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Rx => "rx",
            Direction::Tx => "tx",
        }
    }
}
