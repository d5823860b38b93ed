//! The validated configuration model. Field meanings follow the reference schema; see
//! `docs/config.md` for the key-by-key reference.

use super::yaml::Location;
use std::net::Ipv4Addr;

/// Largest number of segments per packet (header-data split uses 2).
pub const MAX_SEGMENTS: usize = 4;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Number of buffers.
    pub num_bufs: usize,
    /// Bytes per buffer.
    pub buf_size: usize,
    /// RDMA access rights.
    pub access: Vec<Access>,
    /// Where it is defined.
    pub location: Location,
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
    /// Where it is defined.
    pub location: Location,
}

/// Transport of a socket stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `udp://`
    Udp,
    /// `tcp://`
    Tcp,
    /// `roce://` (or the legacy `rdma://`).
    Roce,
}

/// Client or server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

/// `roce_config`.
#[derive(Clone, Debug)]
pub struct RoceConfig {
    /// `RC`, `UC` or `UD`.
    pub transport_mode: String,
}

/// `rx`.
#[derive(Clone, Debug)]
pub struct RxConfig {
    /// Drop packets no flow matches instead of spreading them over the queues.
    pub flow_isolation: bool,
    /// Queues.
    pub queues: Vec<QueueConfig>,
    /// Static flow rules.
    pub flows: Vec<FlowConfig>,
}

/// `tx`.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// Queues.
    pub queues: Vec<QueueConfig>,
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
    /// Where it is defined.
    pub location: Location,
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
}

/// An IPv4 prefix (`10.0.0.1` or `10.0.0.0/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Prefix {
    /// Address.
    pub addr: Ipv4Addr,
    /// Prefix length 0..=32.
    pub len: u8,
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
    /// Where it is defined.
    pub location: Location,
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
    /// Where it is defined.
    pub location: Location,
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
        let mut cores: Vec<u32> = self.queues().map(|(_, _, q)| q.cpu_core).collect();
        cores.sort_unstable();
        cores.dedup();
        cores
    }
}

/// Receive or transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
