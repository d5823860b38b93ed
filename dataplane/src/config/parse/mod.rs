//! From the located YAML tree to the [`Config`] model. Structural and type errors are
//! found here; cross-references are checked in `validate`.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::model::*;
use super::reader::{self as r, MapReader, index, join};
use super::yaml::{Node, Value};
use gpudirect::reorder::{BitField, Conversion, InputType, Method, OutputType};
use std::net::Ipv4Addr;

mod bench;
mod flow;
pub(super) use flow::flow as rx_flow;
mod interface;
mod protocol;
mod reorder;

use bench::*;
use flow::*;
use interface::*;
use reorder::*;

/// Largest sane buffer count / size (prevents arithmetic overflow later).
const MAX_COUNT: u64 = 1 << 32;
/// Most buffers in one region: the buffer pool's ring holds at most 2^30 entries.
pub const MAX_NUM_BUFS: u64 = 1 << 30;
/// Largest buffer: segment lengths are 32-bit, and 1 GiB is far beyond any packet or
/// reorder batch.
pub const MAX_BUF_SIZE: u64 = 1 << 30;

/// Reads a whole document. Returns `None` when errors were recorded in `d`.
pub fn document(d: &mut Diagnostics, root: &Node) -> Option<Config> {
    let mut top = MapReader::open(d, root, "")?;
    // Root is `daqiri: { cfg: ... }`, our alias `dataplane: { cfg: ... }`, or the cfg map itself.
    let wrapped = match (top.get("daqiri"), top.get("dataplane")) {
        (Some(_), Some(n)) => {
            d.error(
                Kind::Duplicate,
                "dataplane",
                Some(n.location),
                "`daqiri` and `dataplane` are aliases; give only one",
            );
            None
        }
        (Some(n), None) => Some(("daqiri", n)),
        (None, Some(n)) => Some(("dataplane", n)),
        (None, None) => None,
    };
    let config = match wrapped {
        Some((root_key, node)) => {
            let mut outer = MapReader::open(d, node, root_key)?;
            // Paths inside cfg start at its keys (`interfaces[0].rx`), as users name them.
            let cfg = outer.required(d, "cfg", |d, n, _| {
                let mut m = MapReader::open(d, n, "")?;
                let c = cfg(d, &mut m);
                m.finish(d);
                c
            });
            outer.finish(d);
            cfg
        }
        None => cfg(d, &mut top),
    };
    let bench = bench_sections(d, &mut top);
    top.finish(d);
    let mut config = config?;
    config.bench = bench;
    (!d.has_errors()).then_some(config)
}

struct Common {
    version: u32,
    master_core: u32,
    stream_type: StreamType,
    engine: Option<&'static str>,
    log_level: String,
    debug: bool,
    loopback: bool,
    gpu_stage: StageMode,
    metrics: Option<MetricsConfig>,
    legacy_protocol: Option<Transport>,
}

fn cfg(d: &mut Diagnostics, m: &mut MapReader) -> Option<Config> {
    let common = common(d, m);
    let regions = m.required(d, "memory_regions", |d, n, p| {
        let items = r::list(d, n, p)?;
        if items.is_empty() {
            d.error(
                Kind::Missing,
                p,
                Some(n.location),
                "define at least one memory region",
            );
        }
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, node)| memory_region(d, node, &index(p, i)))
                .collect::<Vec<_>>(),
        )
    });
    let legacy = common.as_ref().and_then(|c| c.legacy_protocol);
    let interfaces = list_of(d, m, "interfaces", |d, node, p| {
        interface(d, node, p, legacy)
    });
    let common = common?;
    let engine = resolve_engine(d, m, &common, &interfaces)?;
    Some(Config {
        version: common.version,
        master_core: common.master_core,
        stream_type: common.stream_type,
        engine,
        log_level: common.log_level,
        debug: common.debug,
        gpu_stage: common.gpu_stage,
        metrics: common.metrics,
        memory_regions: regions?,
        interfaces,
        bench: BenchConfig::default(),
    })
}

fn common(d: &mut Diagnostics, m: &mut MapReader) -> Option<Common> {
    let version = m.required(d, "version", |d, n, p| r::uint_in(d, n, p, 1, 1));
    let master_core = m.required(d, "master_core", |d, n, p| r::uint_in(d, n, p, 0, 4095));
    let stream_type = m.required(d, "stream_type", |d, n, p| {
        r::choice(d, n, p, &["raw", "socket"]).map(|s| match s {
            "raw" => StreamType::Raw,
            _ => StreamType::Socket,
        })
    });
    let engine = m.optional(d, "engine", |d, n, p| {
        let e = r::choice(d, n, p, &["dpdk", "socket", "ibverbs", "default", "rdma"])?;
        if e == "rdma" {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                "`rdma` is not an engine name: use `ibverbs` (RDMA is chosen by a roce:// address)",
            );
            return None;
        }
        Some(e)
    });
    let log_level = m
        .optional(d, "log_level", |d, n, p| {
            r::choice(
                d,
                n,
                p,
                &["trace", "debug", "info", "warn", "error", "critical", "off"],
            )
        })
        .unwrap_or("warn")
        .to_owned();
    let debug = m.optional(d, "debug", r::boolean).unwrap_or(false);
    let loopback = m
        .optional(d, "loopback", |d, n, p| {
            if let Value::Str(s) = &n.value
                && s.is_empty()
            {
                return Some(false);
            }
            r::choice(d, n, p, &["sw"]).map(|_| true)
        })
        .unwrap_or(false);
    // Metadata pools are sized automatically here; the keys are accepted for compatibility
    // and checked for range.
    m.optional(d, "tx_meta_buffers", |d, n, p| {
        r::uint_in(d, n, p, 2, MAX_COUNT)
    });
    m.optional(d, "rx_meta_buffers", |d, n, p| {
        r::uint_in(d, n, p, 2, MAX_COUNT)
    });
    // Legacy form (older reference files): `protocol: roce|rdma|tcp|udp` at the top level.
    let legacy_protocol = m.optional(d, "protocol", |d, n, p| {
        r::choice(d, n, p, &["roce", "rdma", "tcp", "udp"]).map(transport_of)
    });
    let gpu_stage = m
        .optional(d, "gpu_stage", |d, n, p| {
            r::choice(d, n, p, &["kernel", "copy"]).map(|k| match k {
                "copy" => StageMode::Copy,
                _ => StageMode::Kernel,
            })
        })
        .unwrap_or(StageMode::Copy);
    let metrics = m.optional(d, "metrics", metrics_config);
    m.not_supported(d, "manager");
    Some(Common {
        version: version? as u32,
        master_core: master_core? as u32,
        stream_type: stream_type?,
        engine,
        log_level,
        debug,
        loopback,
        gpu_stage,
        metrics,
        legacy_protocol,
    })
}

/// `metrics: {listen: "IP:PORT" | PORT}` (ours): the Prometheus endpoint (a bare port on
/// 127.0.0.1).
fn metrics_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<MetricsConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let listen = m.optional(d, "listen", |d, n, p| {
        let text = r::string(d, n, p)?;
        match super::model::metrics_listen_address(&text) {
            Ok(_) => Some(text),
            Err(why) => {
                d.error(Kind::Invalid, p, Some(n.location), why.to_string());
                None
            }
        }
    });
    let otlp_endpoint = m.optional(d, "otlp_endpoint", |d, n, p| {
        let text = r::string(d, n, p)?;
        match super::model::OtlpEndpoint::parse(&text) {
            Ok(e) => Some(e),
            Err(why) => {
                d.error(Kind::Invalid, p, Some(n.location), why);
                None
            }
        }
    });
    let interval = m.optional(d, "otlp_interval_ms", |d, n, p| {
        r::uint_in(d, n, p, 1, 3_600_000)
    });
    m.finish(d);
    if listen.is_none() && otlp_endpoint.is_none() {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "needs `listen` (the Prometheus endpoint), `otlp_endpoint` (OTLP pushes), or both",
        );
        return None;
    }
    Some(MetricsConfig {
        listen,
        otlp_endpoint,
        otlp_interval_ms: interval.unwrap_or(super::model::DEFAULT_OTLP_INTERVAL_MS),
    })
}

fn transport_of(word: &str) -> Transport {
    match word {
        "tcp" => Transport::Tcp,
        "udp" => Transport::Udp,
        _ => Transport::Roce,
    }
}

fn resolve_engine(
    d: &mut Diagnostics,
    m: &MapReader,
    c: &Common,
    interfaces: &[InterfaceConfig],
) -> Option<EngineKind> {
    let at = Some(m.location_of("stream_type"));
    let path = m.child("stream_type");
    match c.stream_type {
        StreamType::Raw => {
            if let Some(i) = interfaces.iter().position(|i| i.socket.is_some()) {
                d.error(
                    Kind::Invalid,
                    &format!("interfaces[{i}].socket_config"),
                    Some(interfaces[i].location),
                    "socket_config is only allowed with stream_type: socket",
                );
            }
            if c.loopback {
                if matches!(c.engine, Some("socket" | "ibverbs")) {
                    d.error(
                        Kind::Invalid,
                        &path,
                        at,
                        "loopback: \"sw\" needs the raw software loopback engine",
                    );
                }
                return Some(EngineKind::Loopback);
            }
            match c.engine {
                Some("ibverbs") => Some(EngineKind::Ibverbs),
                Some("socket") => {
                    d.error(
                        Kind::Invalid,
                        &m.child("engine"),
                        Some(m.location_of("engine")),
                        "engine `socket` needs stream_type: socket",
                    );
                    None
                }
                _ => Some(EngineKind::Dpdk),
            }
        }
        StreamType::Socket => {
            if c.loopback {
                d.error(
                    Kind::Invalid,
                    &m.child("loopback"),
                    Some(m.location_of("loopback")),
                    "loopback: \"sw\" needs stream_type: raw",
                );
            }
            let mut transport: Option<Transport> = None;
            for (i, iface) in interfaces.iter().enumerate() {
                let Some(sock) = &iface.socket else {
                    d.error(
                        Kind::Missing,
                        &format!("interfaces[{i}]"),
                        Some(iface.location),
                        "missing required key `socket_config` (stream_type is socket)",
                    );
                    continue;
                };
                match transport {
                    None => transport = Some(sock.transport),
                    Some(t) if t != sock.transport => d.error(
                        Kind::Invalid,
                        &format!("interfaces[{i}].socket_config"),
                        Some(iface.location),
                        format!("transport {:?} conflicts with {:?} of an earlier interface; all interfaces must use one", sock.transport, t),
                    ),
                    _ => {}
                }
                let roce = sock.transport == Transport::Roce;
                if roce != iface.roce.is_some() {
                    d.error(
                        Kind::Invalid,
                        &format!("interfaces[{i}].roce_config"),
                        Some(iface.location),
                        if roce {
                            "missing required key `roce_config` for a roce:// interface"
                        } else {
                            "roce_config is only allowed for roce:// interfaces"
                        },
                    );
                }
            }
            match (transport, c.engine) {
                (Some(Transport::Roce), _) => Some(EngineKind::Rdma),
                (_, Some("ibverbs")) => Some(EngineKind::Rdma),
                _ => Some(EngineKind::Socket),
            }
        }
    }
}

fn memory_region(d: &mut Diagnostics, node: &Node, path: &str) -> Option<MemoryRegionConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let kind = m.required(d, "kind", |d, n, p| {
        r::choice(d, n, p, &["host", "huge", "host_pinned", "device"]).map(|k| match k {
            "host" => MemoryKind::Host,
            "huge" => MemoryKind::Huge,
            "host_pinned" => MemoryKind::HostPinned,
            _ => MemoryKind::Device,
        })
    });
    let gpu_kind = matches!(kind, Some(MemoryKind::Device | MemoryKind::HostPinned));
    let mut gpu_uuid = None;
    let affinity = m.required(d, "affinity", |d, n, p| match &n.value {
        Value::Str(s) if s.to_ascii_uppercase().starts_with("GPU-") => {
            if gpu_kind {
                gpu_uuid = Some(s.clone());
                Some(0)
            } else {
                d.error(
                    super::diag::DiagnosticKind::Invalid,
                    p,
                    Some(n.location),
                    format!("`{s}` is a GPU UUID, but only device and host_pinned regions live on a GPU; give this region's NUMA node"),
                );
                None
            }
        }
        _ => r::uint_in(d, n, p, 0, 1023),
    });
    let num_bufs = m.required(d, "num_bufs", |d, n, p| {
        r::uint_in(d, n, p, 1, MAX_NUM_BUFS)
    });
    let buf_size = m.required(d, "buf_size", |d, n, p| {
        r::uint_in(d, n, p, 1, MAX_BUF_SIZE)
    });
    let access = m
        .optional(d, "access", |d, n, p| {
            let items = r::list(d, n, p)?;
            Some(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| {
                        let w = r::choice(d, a, &index(p, i), &["local", "rdma_read", "rdma_write"])?;
                        if w != "local" {
                            // Least privilege: no mode of the RDMA engine is one-sided, so
                            // no region is registered for a peer's READ or WRITE.
                            d.error(
                                Kind::NotSupported,
                                &index(p, i),
                                Some(a.location),
                                format!(
                                    "not supported: {p}: {w} (RDMA connections run SEND/RECV, so regions are registered for local access only; peers cannot read or write them)"
                                ),
                            );
                        }
                        Some(match w {
                            "local" => Access::Local,
                            "rdma_read" => Access::RdmaRead,
                            _ => Access::RdmaWrite,
                        })
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_else(|| vec![Access::Local]);
    m.not_supported_unless(d, "owned", |n| matches!(n.value, Value::Bool(true)));
    let zero_copy = m
        .optional(d, "zero_copy", |d, n, p| {
            if let Value::Bool(b) = n.value {
                return Some(Some(b));
            }
            match r::choice(d, n, p, &["auto", "true", "false"])? {
                "auto" => Some(None),
                "true" => Some(Some(true)),
                _ => Some(Some(false)),
            }
        })
        .flatten();
    m.finish(d);
    Some(MemoryRegionConfig {
        name: name?,
        kind: kind?,
        affinity: affinity? as u32,
        gpu_uuid,
        num_bufs: num_bufs? as usize,
        buf_size: buf_size? as usize,
        access,
        zero_copy,
        location: node.location,
    })
}

fn fault_injection(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FaultInjection> {
    let mut m = MapReader::open(d, node, path)?;
    let seed = m
        .optional(d, "seed", |d, n, p| r::uint_in(d, n, p, 0, u64::MAX))
        .unwrap_or(0);
    let rules = m.required(d, "rules", |d, n, p| {
        let items = r::list(d, n, p)?;
        let rules: Vec<_> = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| fault_rule(d, item, &index(p, i)))
            .collect();
        (rules.len() == items.len()).then_some(rules)
    });
    m.finish(d);
    Some(FaultInjection {
        seed,
        rules: rules?,
    })
}

fn fault_rule(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FaultRule> {
    let mut m = MapReader::open(d, node, path)?;
    let action = m.required(d, "action", |d, n, p| {
        r::choice(
            d,
            n,
            p,
            &["drop", "duplicate", "corrupt", "reorder", "delay", "panic"],
        )
    });
    let frames = m.optional(d, "frames", |d, n, p| r::uint_in(d, n, p, 1, 1 << 20));
    let every = m.optional(d, "every", |d, n, p| r::uint_in(d, n, p, 1, u64::MAX));
    let at = m.optional(d, "at", |d, n, p| r::uint_in(d, n, p, 1, u64::MAX));
    let percent = m.optional(d, "percent", |d, n, p| {
        let v = match n.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => f64::NAN,
        };
        if (0.0..=100.0).contains(&v) {
            Some(v)
        } else {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                "expected a number from 0 to 100",
            );
            None
        }
    });
    let location = m.location;
    m.finish(d);
    let select = match (every, percent, at) {
        (Some(n), None, None) => FaultSelect::Every(n),
        (None, Some(p), None) => FaultSelect::Percent(p),
        (None, None, Some(n)) => FaultSelect::At(n),
        _ => {
            d.error(
                Kind::Invalid,
                path,
                Some(location),
                "a fault rule picks its frames with exactly one of `every`, `percent` or `at`",
            );
            return None;
        }
    };
    let action = match action? {
        "drop" => FaultAction::Drop,
        "duplicate" => FaultAction::Duplicate,
        "corrupt" => FaultAction::Corrupt,
        "reorder" => FaultAction::Reorder,
        "panic" => FaultAction::Panic,
        _ => FaultAction::Delay {
            frames: frames.unwrap_or(8) as u32,
        },
    };
    if frames.is_some() && !matches!(action, FaultAction::Delay { .. }) {
        d.error(
            Kind::Invalid,
            &join(path, "frames"),
            Some(location),
            "`frames` belongs to a delay rule",
        );
        return None;
    }
    Some(FaultRule { action, select })
}

/// Dotted-quad IPv4; leading zeros are allowed (`000.000.000.0` in reference files).
fn parse_dotted(s: &str) -> Option<Ipv4Addr> {
    let octets: Vec<u8> = s
        .trim()
        .split('.')
        .map(|p| {
            if (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()) {
                p.parse::<u8>().ok()
            } else {
                None
            }
        })
        .collect::<Option<_>>()?;
    <[u8; 4]>::try_from(octets).ok().map(Ipv4Addr::from)
}

fn ipv4(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Ipv4Addr> {
    let s = r::string(d, node, path)?;
    match parse_dotted(&s) {
        Some(a) => Some(a),
        None => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                format!("`{s}` is not an IPv4 address"),
            );
            None
        }
    }
}

fn ipv4_prefix(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Ipv4Prefix> {
    let s = r::string(d, node, path)?;
    let (a, l) = s.split_once('/').unwrap_or((&s, "32"));
    match (parse_dotted(a), l.trim().parse::<u8>()) {
        (Some(addr), Ok(len)) if len <= 32 => Some(Ipv4Prefix { addr, len }),
        _ => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                format!("`{s}` is not an IPv4 address or prefix (a.b.c.d or a.b.c.d/len)"),
            );
            None
        }
    }
}

/// An IPv4 (dotted) or IPv6 address.
fn ip_address(d: &mut Diagnostics, node: &Node, path: &str) -> Option<std::net::IpAddr> {
    let s = r::string(d, node, path)?;
    match (parse_dotted(&s), s.trim().parse::<std::net::Ipv6Addr>()) {
        (Some(a), _) => Some(a.into()),
        (None, Ok(a)) => Some(a.into()),
        _ => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                format!("`{s}` is not an IPv4 or IPv6 address"),
            );
            None
        }
    }
}

/// An `allowed_peers` entry: an IPv4 or IPv6 address, or a prefix of either.
fn peer_prefix(d: &mut Diagnostics, node: &Node, path: &str) -> Option<PeerPrefix> {
    let s = r::string(d, node, path)?;
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l.trim())),
        None => (s.as_str(), None),
    };
    let addr = match (parse_dotted(a), a.trim().parse::<std::net::Ipv6Addr>()) {
        (Some(v4), _) => Some(std::net::IpAddr::V4(v4)),
        (None, Ok(v6)) => Some(std::net::IpAddr::V6(v6)),
        _ => None,
    };
    let parsed = addr.and_then(|addr| {
        let host = PeerPrefix::host(addr);
        match l.map(str::parse::<u8>) {
            None => Some(host),
            Some(Ok(len)) if len <= host.len => Some(PeerPrefix { addr, len }),
            Some(_) => None,
        }
    });
    if parsed.is_none() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            format!("`{s}` is not an IP address or prefix (a.b.c.d[/len] or ipv6[/len])"),
        );
    }
    parsed
}

fn mac(d: &mut Diagnostics, node: &Node, path: &str) -> Option<[u8; 6]> {
    let s = r::string(d, node, path)?;
    let parts: Vec<_> = s.split([':', '-']).collect();
    let mut out = [0u8; 6];
    if parts.len() == 6
        && parts
            .iter()
            .zip(out.iter_mut())
            .all(|(p, o)| u8::from_str_radix(p, 16).map(|v| *o = v).is_ok() && p.len() == 2)
    {
        return Some(out);
    }
    d.error(
        Kind::Invalid,
        path,
        Some(node.location),
        format!("`{s}` is not a MAC address (xx:xx:xx:xx:xx:xx)"),
    );
    None
}

/// A port (`4096`) or inclusive range (`"4096-4100"`).
pub fn port_range(d: &mut Diagnostics, node: &Node, path: &str) -> Option<PortRange> {
    if let Value::Str(s) = &node.value
        && let Some((a, b)) = s.split_once('-')
    {
        let (a, b) = (a.trim().parse::<u16>(), b.trim().parse::<u16>());
        return match (a, b) {
            (Ok(first), Ok(last)) if first <= last => Some(PortRange { first, last }),
            _ => {
                d.error(
                    Kind::Invalid,
                    path,
                    Some(node.location),
                    format!("`{s}` is not a port range (first-last, 0..65535, first <= last)"),
                );
                None
            }
        };
    }
    let p = r::uint_in(d, node, path, 0, 65535)? as u16;
    Some(PortRange { first: p, last: p })
}

/// An optional list under `key`, each item parsed by `item` with its indexed path.
fn list_of<T>(
    d: &mut Diagnostics,
    m: &mut MapReader,
    key: &'static str,
    item: impl Fn(&mut Diagnostics, &Node, &str) -> Option<T>,
) -> Vec<T> {
    m.optional(d, key, |d, n, p| {
        let items = r::list(d, n, p)?;
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| item(d, x, &index(p, i)))
                .collect(),
        )
    })
    .unwrap_or_default()
}

fn seq_path(node: &Node, path: &str, i: usize) -> String {
    if matches!(node.value, Value::Seq(_)) {
        index(path, i)
    } else {
        path.to_owned()
    }
}

fn core_or_unpinned(d: &mut Diagnostics, n: &Node, p: &str) -> Option<Option<u32>> {
    let v = r::int_in(d, n, p, -1, 4095)?;
    Some((v >= 0).then_some(v as u32))
}
