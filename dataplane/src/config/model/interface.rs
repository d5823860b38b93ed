//! `interfaces[]`: an interface, its socket and RoCE settings, peer rules, RX and TX sections,
//! queues and the software wire's faults.

use super::*;

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
    /// `multicast_groups` (ours): groups the interface joins, any-source or
    /// source-specific.
    pub multicast: Vec<MulticastGroup>,
    /// Where it is defined.
    pub location: Location,
}

/// A multicast group an interface receives (`multicast_groups`: `"239.1.2.3"` for any
/// source, `{group: 232.1.1.1, source: 198.18.0.1}` for one source).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MulticastGroup {
    /// The group address (224.0.0.0/4, or ff00::/8 on DPDK ports).
    pub group: std::net::IpAddr,
    /// The one source taken (source-specific multicast), of the group's IP version;
    /// `None`: any source.
    pub source: Option<std::net::IpAddr>,
}

impl MulticastGroup {
    /// The group and its source as IPv4 addresses; `None` for an IPv6 group.
    pub fn ipv4(&self) -> Option<(std::net::Ipv4Addr, Option<std::net::Ipv4Addr>)> {
        use std::net::IpAddr::V4;
        match (self.group, self.source) {
            (V4(g), None) => Some((g, None)),
            (V4(g), Some(V4(s))) => Some((g, Some(s))),
            _ => None,
        }
    }
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

/// An endpoint parsed from `scheme://ip[:port]` (`scheme://[ipv6]:port`) or the legacy
/// ip/port keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// IPv4 or IPv6 address (IPv6 on the socket engine only).
    pub ip: std::net::IpAddr,
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
    pub allowed_peers: Option<Vec<PeerPrefix>>,
    /// `idle_timeout_s` (this project's key, TCP servers, default 60): a connection that
    /// moved no byte either way for this long is closed, freeing its lane; 0 = never.
    pub idle_timeout_s: u32,
    /// `receive_buffer_bytes` (ours): SO_RCVBUF asked for, instead of what the RX
    /// region holds (4 to 64 MiB).
    pub receive_buffer_bytes: Option<usize>,
    /// `send_buffer_bytes` (ours): SO_SNDBUF asked for, instead of what the TX region
    /// holds (4 to 64 MiB).
    pub send_buffer_bytes: Option<usize>,
}

impl SocketConfig {
    /// Who may reach the interface: `allowed_peers` when given; otherwise the configured
    /// remote address alone where there is one (connected modes); otherwise anyone.
    pub fn peer_filter(&self) -> PeerFilter {
        match (&self.allowed_peers, self.remote) {
            (Some(list), _) => PeerFilter::Only(list.clone()),
            (None, Some(r)) => PeerFilter::Only(vec![PeerPrefix::host(r.ip)]),
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
    Only(Vec<PeerPrefix>),
}

impl PeerFilter {
    /// True when `peer` may reach the interface: it lies inside a listed prefix of its
    /// IP version (an IPv4-mapped IPv6 source, as a dual-stack socket reports an IPv4
    /// peer, is read as IPv4).
    pub fn allows(&self, peer: std::net::IpAddr) -> bool {
        match self {
            PeerFilter::Any => true,
            PeerFilter::Only(list) => list.iter().any(|p| p.contains(peer)),
        }
    }
}

/// An address or prefix of `allowed_peers`: `10.0.0.0/8`, `fd00::/64`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerPrefix {
    /// Address.
    pub addr: std::net::IpAddr,
    /// Prefix length (0..=32 for IPv4, 0..=128 for IPv6).
    pub len: u8,
}

impl PeerPrefix {
    /// The prefix of one address.
    pub fn host(addr: std::net::IpAddr) -> Self {
        let len = if addr.is_ipv4() { 32 } else { 128 };
        Self { addr, len }
    }

    /// True when `peer` lies inside the prefix.
    pub fn contains(&self, peer: std::net::IpAddr) -> bool {
        use std::net::IpAddr::{V4, V6};
        let peer = match peer {
            V6(a) => a.to_ipv4_mapped().map_or(peer, V4),
            v4 => v4,
        };
        let keep = |bits: u32| -> u128 {
            let len = u32::from(self.len).min(bits);
            if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            }
        };
        match (self.addr, peer) {
            (V4(net), V4(a)) => {
                let mask = keep(32) >> 96;
                u128::from(u32::from(net)) & mask == u128::from(u32::from(a)) & mask
            }
            (V6(net), V6(a)) => u128::from(net) & keep(128) == u128::from(a) & keep(128),
            _ => false,
        }
    }
}

impl std::fmt::Display for PeerPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
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
    /// `descriptors` (this project's key; DPDK only): descriptors of each RX queue's device
    /// ring. `None`: [`crate::plan::dpdk::default_descriptors`].
    pub descriptors: Option<u16>,
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
            descriptors: None,
        }
    }
}

/// `tx`.
#[derive(Clone, Debug)]
pub struct TxConfig {
    /// `accurate_send`: each packet's `timestamp_ns` on a TX burst is the time (ns since
    /// the Unix epoch; 0 = now) before which it must not be sent.
    pub accurate_send: bool,
    /// `descriptors` (this project's key; DPDK only): descriptors of each TX queue's device
    /// ring. `None`: [`crate::plan::dpdk::default_descriptors`].
    pub descriptors: Option<u16>,
    /// Queues.
    pub queues: Vec<QueueConfig>,
    /// Egress flows: header transforms applied to matching sent packets (hardware only).
    pub flows: Vec<TxFlowConfig>,
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
    /// `ring_packets` (this project's key): packets the ring between worker and
    /// application holds, in full bursts ([`DEFAULT_RING_PACKETS`] when not given).
    pub ring_packets: u32,
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
    /// `delivery` (this project's key): who takes the queue's bursts.
    pub delivery: Delivery,
    /// `protocol` (ours): RX, the sensor protocol the queue's packets carry, whose
    /// stream the application takes instead of bursts (`DataPlane::take_spead_stream`);
    /// TX, the protocol it sends (`DataPlane::take_spead_sender`).
    pub protocol: Option<ProtocolConfig>,
    /// Where it is defined.
    pub location: Location,
}

/// `protocol:` of a queue: one protocol per queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolConfig {
    /// RX `spead:`: SPEAD heaps assembled into chunks.
    Spead(SpeadConfig),
    /// RX `vrt:` or `ecpri_uplane:`: radio packets decoded into complex samples.
    Iq(IqConfig),
    /// TX `spead:`: heaps cut into SPEAD packets, with their item descriptors.
    SpeadSend(SpeadSendConfig),
}

/// TX `protocol: {spead: {...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeadSendConfig {
    /// `flavour`: `64-48` (default) or `64-40`.
    pub flavour: crate::protocol::spead::Flavour,
    /// `max_packet_bytes`: the largest SPEAD packet (the UDP payload), 1472 by default
    /// as spead2's.
    pub max_packet_bytes: u32,
    /// `descriptors_every`: the item descriptors ride in the first heap and then in
    /// every this many heaps (0: the first only).
    pub descriptors_every: u64,
    /// `items`: the item descriptors (id, name, description, shape, dtype or format).
    pub descriptors: Vec<crate::protocol::spead::descriptor::ItemDescriptor>,
    /// `udp`: the frames' addresses, for raw engines (sockets have their own).
    pub udp: Option<UdpEndpoints>,
}

/// `udp: {source, destination, destination_mac, source_mac}` of a sending protocol on a
/// raw engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UdpEndpoints {
    /// IPv4 source address and port.
    pub source: std::net::SocketAddrV4,
    /// IPv4 destination address and port.
    pub destination: std::net::SocketAddrV4,
    /// The destination's MAC address (the next hop's).
    pub destination_mac: [u8; 6],
    /// The frames' source MAC address; `None`: the worker writes the port's own
    /// (`offloads: [tx_eth_src]`, which the plan then requires).
    pub source_mac: Option<[u8; 6]>,
}

/// `protocol: {vrt: {...}}` or `{ecpri_uplane: {...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IqConfig {
    /// The packets' format: `vrt` with `samples`, or `ecpri_uplane` with `compression`,
    /// `iq_width` and `prbs_when_zero`.
    pub format: crate::protocol::iq::IqFormat,
    /// `precision`: `f32` (default) or `f16`.
    pub precision: crate::protocol::iq::Precision,
    /// `sample_region`: a `device` region whose buffers receive the decoded samples, one
    /// burst a buffer, decoded by the GPU. Left out: decoded by the CPU into the batch.
    pub sample_region: Option<String>,
}

/// `protocol: {spead: {...}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpeadConfig {
    /// `flavour`: `64-48` (default) or `64-40`.
    pub flavour: crate::protocol::spead::Flavour,
    /// `heap_bytes`, `heaps_per_chunk`, `place_by` (`heap_cnt`, or `{item, step}`) and
    /// `max_chunks` (default 4).
    pub placement: crate::protocol::spead::chunks::Placement,
    /// `chunk_region`: the memory region whose buffers hold the chunks (one chunk a
    /// buffer; any kind, GPU memory included). Left out: chunks in the process's heap.
    pub chunk_region: Option<String>,
}

/// Packets a queue's ring holds when `ring_packets` is not given: as many as the
/// reference system's default device descriptor ring.
pub const DEFAULT_RING_PACKETS: u32 = 8192;
/// The largest `ring_packets`.
pub const MAX_RING_PACKETS: u32 = 1 << 18;

/// `delivery` of a queue: where its bursts go (RX) or come from (TX).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// `ring` (default): through a ring to the application's thread, which polls the
    /// queue's handle ([`crate::plane::DataPlane::rx_queue`], `tx_queue`).
    #[default]
    Ring,
    /// `handler`: to the [`crate::handler::Handler`] the application gave for the queue's
    /// worker core, called by that worker in its poll loop (run to completion): no
    /// packet leaves the core.
    Handler,
}

impl Delivery {
    /// The YAML spelling.
    pub fn name(self) -> &'static str {
        match self {
            Delivery::Ring => "ring",
            Delivery::Handler => "handler",
        }
    }
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
    /// `transient`: keep the last packets in memory and write only the windows around
    /// triggers, each to its own file.
    pub transient: Option<TransientSpec>,
}

/// `capture.transient`: a triggered transient buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransientSpec {
    /// `keep_mb`: MiB of packets (as the file frames them) kept in memory at most
    /// (default 256).
    pub keep_mb: u32,
    /// `keep_ms`: also forget packets older than this (0, the default: `keep_mb` alone).
    pub keep_ms: u64,
    /// `before_ms`: the window starts this long before the trigger.
    pub before_ms: u64,
    /// `after_ms`: and ends this long after it.
    pub after_ms: u64,
    /// `trigger_on: {offset, bytes}`: a packet with these bytes (hex) at this offset fires
    /// the trigger.
    pub trigger_on: Option<(usize, Vec<u8>)>,
    /// `keep_in`: where the kept packets live: `host`, `host_pinned` (page-locked, the
    /// GPU can read it) or `device` (the queue's GPU, for a queue in device memory; windows
    /// are written through cuFile). Unset: `device` for a queue in device memory, else
    /// `host` (the plan decides).
    pub keep_in: Option<super::MemoryKind>,
}
