//! The validated configuration model. Field meanings follow the reference schema; see
//! `docs/config.md` for the key-by-key reference.

use super::yaml::Location;
use std::net::Ipv4Addr;

pub use crate::descriptor::MAX_SEGMENTS;

mod bench;
mod flow;
mod interface;

pub use bench::*;
pub use flow::*;
pub use interface::*;

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

/// `metrics` (ours): where the Prometheus / OpenMetrics endpoint listens, and where OTLP
/// pushes go (at least one of the two).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `listen`: IP:PORT, or a bare port on 127.0.0.1 (port 0: any free port).
    pub listen: Option<String>,
    /// `otlp_endpoint`: an OpenTelemetry collector's OTLP/HTTP URL (`http://HOST[:PORT]`,
    /// port 4318 by default; pushes go to `/v1/metrics` below it). Needs the `otlp`
    /// feature.
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// `otlp_interval_ms`: milliseconds between pushes (default 1000).
    pub otlp_interval_ms: u64,
}

/// Milliseconds between OTLP pushes unless `otlp_interval_ms` says otherwise.
pub const DEFAULT_OTLP_INTERVAL_MS: u64 = 1000;

impl Default for MetricsConfig {
    /// Neither export; pushes every [`DEFAULT_OTLP_INTERVAL_MS`] once an endpoint is set.
    fn default() -> Self {
        Self {
            listen: None,
            otlp_endpoint: None,
            otlp_interval_ms: DEFAULT_OTLP_INTERVAL_MS,
        }
    }
}

/// Where OTLP pushes go: a collector's host, port and request path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Request path, ending in `/v1/metrics`.
    pub path: String,
}

impl OtlpEndpoint {
    /// An `http://HOST[:PORT][/PATH]` URL (port 4318, OTLP/HTTP's, when absent). As with
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, `/v1/metrics` is added to a path that does not end
    /// in it already.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            if url.starts_with("https://") {
                format!(
                    "`{url}`: https is not supported; push to a collector over http (on this host or a sidecar)"
                )
            } else {
                format!("`{url}`: expected http://HOST[:PORT][/PATH]")
            }
        })?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let bracketed = authority.starts_with('[');
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !bracketed || h.ends_with(']') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("`{url}`: port `{p}` is not a number from 0 to 65535"))?,
            ),
            _ => (authority, 4318),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{url}`: no host"));
        }
        let path = path.trim_end_matches('/');
        let path = if path.ends_with("v1/metrics") {
            format!("/{path}")
        } else if path.is_empty() {
            "/v1/metrics".to_owned()
        } else {
            format!("/{path}/v1/metrics")
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            path,
        })
    }
}

impl std::fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}:{}{}", self.host, self.port, self.path)
    }
}

/// `IP:PORT`, or a bare port (`9464`, `:9464`) on 127.0.0.1.
pub fn metrics_listen_address(text: &str) -> Result<std::net::SocketAddr, ListenAddressError> {
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|source| ListenAddressError {
        text: text.to_owned(),
        source,
    })
}

/// A metrics `listen` value that is neither `IP:PORT` nor a port.
#[derive(Debug, thiserror::Error)]
#[error("`{text}` is not IP:PORT or a port ({source}); for example 127.0.0.1:9464")]
pub struct ListenAddressError {
    /// The value.
    pub text: String,
    /// Why it is not `IP:PORT`.
    pub source: std::net::AddrParseError,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
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
