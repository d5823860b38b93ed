//! From the located YAML tree to the [`Config`] model. Structural and type errors are
//! found here; cross-references are checked in `validate`.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::model::*;
use super::reader::{self as r, MapReader, index, join};
use super::yaml::{Node, Value};
use gpudirect::reorder::{BitField, Conversion, InputType, Method, OutputType};
use std::net::Ipv4Addr;

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
    let listen = m.required(d, "listen", |d, n, p| {
        let text = r::string(d, n, p)?;
        match super::model::metrics_listen_address(&text) {
            Ok(_) => Some(text),
            Err(why) => {
                d.error(Kind::Invalid, p, Some(n.location), why);
                None
            }
        }
    });
    m.finish(d);
    Some(MetricsConfig { listen: listen? })
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

fn interface(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    legacy: Option<Transport>,
) -> Option<InterfaceConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let address = m.required(d, "address", r::name);
    let socket = m.optional(d, "socket_config", |d, n, p| socket_config(d, n, p, legacy));
    let roce = m.optional(d, "roce_config", |d, n, p| {
        let mut c = MapReader::open(d, n, p)?;
        let mode = c
            .optional(d, "transport_mode", |d, n, p| {
                r::choice(d, n, p, &["rc", "uc", "ud"])
            })
            .unwrap_or("rc");
        let small = |c: &mut MapReader, d: &mut Diagnostics, key: &'static str, max, default| {
            c.optional(d, key, |d, n, p| r::uint_in(d, n, p, 0, max))
                .map_or(default, |v| v as u8)
        };
        let defaults = RoceConfig::default();
        let min_rnr_timer = small(&mut c, d, "min_rnr_timer", 31, defaults.min_rnr_timer);
        let rnr_retry = small(&mut c, d, "rnr_retry", 7, defaults.rnr_retry);
        let retry_count = small(&mut c, d, "retry_count", 7, defaults.retry_count);
        let max_inflight_bytes = c
            .optional(d, "max_inflight_bytes", |d, n, p| {
                r::uint_in(d, n, p, 1, 1 << 32)
            })
            .unwrap_or(defaults.max_inflight_bytes);
        let gpu_memory_path = c
            .optional(d, "gpu_memory_path", |d, n, p| {
                r::choice(d, n, p, &["auto", "direct", "staged"]).map(|k| match k {
                    "direct" => GpuMemoryPath::Direct,
                    "staged" => GpuMemoryPath::Staged,
                    _ => GpuMemoryPath::Auto,
                })
            })
            .unwrap_or(defaults.gpu_memory_path);
        c.finish(d);
        Some(RoceConfig {
            transport_mode: mode.to_ascii_uppercase(),
            min_rnr_timer,
            rnr_retry,
            retry_count,
            max_inflight_bytes,
            gpu_memory_path,
        })
    });
    if let Some(n) = m.get("rdma_config") {
        let p = m.child("rdma_config");
        d.error(
            Kind::Invalid,
            &p,
            Some(n.location),
            "rdma_config was replaced by socket_config (roce:// local_addr) plus roce_config",
        );
    }
    let rx = m.optional(d, "rx", rx_config);
    let tx = m.optional(d, "tx", tx_config);
    let faults = m.optional(d, "fault_injection", fault_injection);
    m.finish(d);
    Some(InterfaceConfig {
        name: name?,
        address: address?,
        socket,
        roce,
        faults,
        rx,
        tx,
        location: node.location,
    })
}

fn socket_config(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    legacy: Option<Transport>,
) -> Option<SocketConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let mode = m.required(d, "mode", |d, n, p| {
        r::choice(d, n, p, &["client", "server"]).map(|w| {
            if w == "client" {
                SocketMode::Client
            } else {
                SocketMode::Server
            }
        })
    });
    let mut transports = Vec::new();
    let mut endpoint = |m: &mut MapReader,
                        d: &mut Diagnostics,
                        uri_key: &'static str,
                        ip_key: &'static str,
                        port_key: &'static str| {
        let uri = m.optional(d, uri_key, |d, n, p| {
            let (t, e) = parse_uri(d, n, p)?;
            Some((t, e))
        });
        let ip = m.optional(d, ip_key, ipv4);
        let port = m.optional(d, port_key, |d, n, p| r::uint_in(d, n, p, 0, 65535));
        if uri.is_some() && (ip.is_some() || port.is_some()) {
            d.error(
                Kind::Invalid,
                &m.child(uri_key),
                Some(m.location_of(uri_key)),
                format!("{uri_key} cannot be combined with the legacy {ip_key}/{port_key}"),
            );
        }
        match (uri, ip) {
            (Some((t, e)), _) => {
                transports.push(t);
                Some(e)
            }
            (None, Some(ip)) => Some(Endpoint {
                ip,
                port: port.unwrap_or(0) as u16,
            }),
            (None, None) => None,
        }
    };
    let local = endpoint(&mut m, d, "local_addr", "local_ip", "local_port");
    let remote = endpoint(&mut m, d, "remote_addr", "remote_ip", "remote_port");
    let max_payload_size = m
        .optional(d, "max_payload_size", |d, n, p| {
            r::uint_in(d, n, p, 0, 1 << 30)
        })
        .unwrap_or(0) as u32;
    let retry_connect_s = m
        .optional(d, "retry_connect_s", |d, n, p| r::uint_in(d, n, p, 0, 3600))
        .unwrap_or(1) as u32;
    let busy_poll_us = m
        .optional(d, "busy_poll_us", |d, n, p| {
            r::uint_in(d, n, p, 0, 1_000_000)
        })
        .unwrap_or(0) as u32;
    let udp_gso = m.optional(d, "udp_gso", r::boolean).unwrap_or(true);
    let udp_gro = m.optional(d, "udp_gro", r::boolean).unwrap_or(false);
    let allowed_peers = m.optional(d, "allowed_peers", |d, n, p| {
        let items = r::list(d, n, p)?;
        let prefixes: Vec<_> = items
            .iter()
            .enumerate()
            .filter_map(|(i, a)| ipv4_prefix(d, a, &index(p, i)))
            .collect();
        (prefixes.len() == items.len()).then_some(prefixes)
    });
    let idle_timeout_s = m
        .optional(d, "idle_timeout_s", |d, n, p| {
            r::uint_in(d, n, p, 0, 86_400)
        })
        .unwrap_or(60) as u32;
    m.not_supported(d, "max_burst_interval_ms");
    m.not_supported(d, "min_ipg_ns");
    m.finish(d);
    let transport = match (transports.first(), legacy) {
        (Some(t), _) => {
            if transports.iter().any(|x| x != t) {
                d.error(
                    Kind::Invalid,
                    path,
                    Some(node.location),
                    "local_addr and remote_addr use different schemes",
                );
            }
            *t
        }
        (None, Some(t)) => t,
        (None, None) => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "no transport: give local_addr/remote_addr as udp://, tcp:// or roce:// URIs",
            );
            return None;
        }
    };
    let mode = mode?;
    if mode == SocketMode::Server && local.is_none_or(|e| e.port == 0) {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "a server needs local_addr with a non-zero port",
        );
    }
    if mode == SocketMode::Client && transport != Transport::Roce && remote.is_none() {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "a TCP/UDP client needs remote_addr",
        );
    }
    Some(SocketConfig {
        mode,
        transport,
        local,
        remote,
        max_payload_size,
        retry_connect_s,
        busy_poll_us,
        udp_gso,
        udp_gro,
        allowed_peers,
        idle_timeout_s,
    })
}

fn parse_uri(d: &mut Diagnostics, node: &Node, path: &str) -> Option<(Transport, Endpoint)> {
    let text = r::string(d, node, path)?;
    let bad = |d: &mut Diagnostics, why: &str| {
        d.error(Kind::Invalid, path, Some(node.location), format!("invalid address `{text}`: {why} (expected scheme://ipv4[:port], scheme udp, tcp or roce)"));
    };
    let Some((scheme, rest)) = text.split_once("://") else {
        bad(d, "no scheme");
        return None;
    };
    let transport = match scheme.to_ascii_lowercase().as_str() {
        "udp" => Transport::Udp,
        "tcp" => Transport::Tcp,
        "roce" | "rdma" => Transport::Roce,
        _ => {
            bad(d, "unknown scheme");
            return None;
        }
    };
    let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
    if !query.is_empty() && query != "engine=ibverbs" {
        bad(d, "the only query accepted is ?engine=ibverbs");
        return None;
    }
    let (host, port) = match hostport.split_once(':') {
        Some((h, p)) => match p.parse::<u16>() {
            Ok(p) => (h, p),
            Err(_) => {
                bad(d, "bad port");
                return None;
            }
        },
        None => (hostport, 0),
    };
    let Some(ip) = parse_dotted(host) else {
        bad(d, "bad IPv4 address");
        return None;
    };
    Some((transport, Endpoint { ip, port }))
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

/// `stage_core`: one core, or a list of distinct cores (the stage's, then its copy
/// helpers').
fn stage_cores(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Vec<u32>> {
    let core =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 4095).map(|c| c as u32);
    let Value::Seq(items) = &node.value else {
        return core(d, node, path).map(|c| vec![c]);
    };
    if items.is_empty() {
        d.error(
            Kind::Range,
            path,
            Some(node.location),
            "stage_core: give a core, or a list of at least one".to_owned(),
        );
        return None;
    }
    let mut cores = Vec::new();
    for (i, x) in items.iter().enumerate() {
        let c = core(d, x, &index(path, i))?;
        if cores.contains(&c) {
            d.error(
                Kind::Range,
                &index(path, i),
                Some(x.location),
                format!("core {c} is listed twice"),
            );
            return None;
        }
        cores.push(c);
    }
    Some(cores)
}

fn queue(d: &mut Diagnostics, node: &Node, path: &str, dir: Direction) -> Option<QueueConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 63));
    m.not_supported_unless(
        d,
        "poll_mode",
        |n| matches!(&n.value, Value::Str(s) if s == "indirect"),
    );
    let cpu_core = m.required(d, "cpu_core", |d, n, p| r::uint_in(d, n, p, 0, 4095));
    let batch_size = m.required(d, "batch_size", |d, n, p| {
        let v = r::int_in(d, n, p, i128::MIN, i128::MAX)?;
        if v <= 0 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("batch_size must be at least 1, got {v}"),
            );
            return None;
        }
        if v > 1 << 20 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("{v} is out of range: must be at most {}", 1 << 20),
            );
            return None;
        }
        Some(v as u32)
    });
    let timeout_us = m
        .optional(d, "timeout_us", |d, n, p| {
            r::uint_in(d, n, p, 0, 60_000_000)
        })
        .unwrap_or(0);
    let memory_regions = m
        .optional(d, "memory_regions", |d, n, p| {
            let items = r::list(d, n, p)?;
            if items.len() > MAX_SEGMENTS {
                d.error(
                    Kind::Range,
                    p,
                    Some(n.location),
                    format!(
                        "at most {MAX_SEGMENTS} memory regions (segments) per queue, got {}",
                        items.len()
                    ),
                );
            }
            Some(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| r::name(d, x, &index(p, i)))
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_default();
    let mut tx_eth_src = false;
    let mut pacing_mbps = 0;
    if dir == Direction::Tx {
        m.optional(d, "offloads", |d, n, p| {
            for (i, x) in r::list(d, n, p)?.iter().enumerate() {
                match r::string(d, x, &index(p, i)).as_deref() {
                    Some("tx_eth_src") => tx_eth_src = true,
                    Some(other) => d.error(
                        Kind::NotSupported,
                        &index(p, i),
                        Some(x.location),
                        format!("not supported: offloads {other} (tx_eth_src is)"),
                    ),
                    None => {}
                }
            }
            Some(())
        });
        pacing_mbps = m
            .optional(d, "pacing_mbps", |d, n, p| r::uint_in(d, n, p, 0, 1 << 40))
            .unwrap_or(0);
    }
    let (capture, stage_cores) = if dir == Direction::Rx {
        (
            m.optional(d, "capture", capture_spec),
            m.optional(d, "stage_core", stage_cores).unwrap_or_default(),
        )
    } else {
        (None, Vec::new())
    };
    m.not_supported(d, "split_boundary");
    m.finish(d);
    Some(QueueConfig {
        name: name?,
        id: id? as u16,
        cpu_core: cpu_core? as u32,
        batch_size: batch_size?,
        timeout_us,
        memory_regions,
        tx_eth_src,
        pacing_mbps,
        capture,
        stage_core: stage_cores.first().copied(),
        copy_cores: stage_cores.get(1..).unwrap_or_default().to_vec(),
        location: node.location,
    })
}

/// `capture: {path, format, queue_mb}` of an RX queue.
fn capture_spec(d: &mut Diagnostics, node: &Node, path: &str) -> Option<CaptureSpec> {
    let mut m = MapReader::open(d, node, path)?;
    let file = m.required(d, "path", r::string);
    let format = m
        .optional(d, "format", |d, n, p| {
            r::choice(d, n, p, &["pcap", "pcapng", "raw", "raw_per_packet"]).map(str::to_owned)
        })
        .unwrap_or_else(|| "pcap".into());
    let queue_mb = m
        .optional(d, "queue_mb", |d, n, p| r::uint_in(d, n, p, 4, 1 << 20))
        .unwrap_or(256) as u32;
    m.finish(d);
    Some(CaptureSpec {
        path: file?,
        format,
        queue_mb,
    })
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

fn queues(d: &mut Diagnostics, m: &mut MapReader, dir: Direction) -> Vec<QueueConfig> {
    list_of(d, m, "queues", |d, x, p| queue(d, x, p, dir))
}

fn rx_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<RxConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let flow_isolation = m.optional(d, "flow_isolation", r::boolean).unwrap_or(false);
    let timestamps = m
        .optional(d, "hardware_timestamps", r::boolean)
        .unwrap_or(false);
    let dynamic_flow_capacity = m
        .optional(d, "dynamic_flow_capacity", |d, n, p| {
            r::uint_in(d, n, p, 0, 0xFF_FFFF)
        })
        .unwrap_or(0) as u32;
    let queues = queues(d, &mut m, Direction::Rx);
    let flows = list_of(d, &mut m, "flows", flow);
    let flex_items = list_of(d, &mut m, "flex_items", flex_item);
    let exception_queue = m
        .optional(d, "exception_queue", |d, n, p| r::uint_in(d, n, p, 0, 63))
        .map(|v| v as u16);
    let reorder = list_of(d, &mut m, "reorder_configs", reorder_config);
    m.finish(d);
    Some(RxConfig {
        timestamps,
        flow_isolation,
        queues,
        flows,
        flex_items,
        exception_queue,
        reorder,
        dynamic_flow_capacity,
    })
}

fn bit_field(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BitField> {
    let mut m = MapReader::open(d, node, path)?;
    let bit_offset = m.required(d, "bit_offset", |d, n, p| r::uint_in(d, n, p, 0, 65535 * 8));
    let bit_width = m.required(d, "bit_width", |d, n, p| r::uint_in(d, n, p, 1, 32));
    m.finish(d);
    Some(BitField {
        bit_offset: bit_offset? as u32,
        bit_width: bit_width? as u32,
    })
}

fn reorder_method(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Method> {
    let mut m = MapReader::open(d, node, path)?;
    let given = [m.has("seq_batch_number"), m.has("seq_packets_per_batch")];
    let by_batch = m.optional(d, "seq_batch_number", |d, n, p| {
        let mut b = MapReader::open(d, n, p)?;
        let sequence = b.required(d, "sequence_number", bit_field);
        let batch = b.required(d, "batch_number", bit_field);
        b.finish(d);
        let (sequence, batch) = (sequence?, batch?);
        if batch.bit_width >= sequence.bit_width {
            d.error(
                Kind::Range,
                &join(p, "batch_number.bit_width"),
                Some(n.location),
                format!(
                    "batch_number.bit_width ({}) must be smaller than sequence_number.bit_width ({}): packets per batch = 2^seq bits / 2^batch bits",
                    batch.bit_width, sequence.bit_width
                ),
            );
            return None;
        }
        Some(Method::SeqBatchNumber { sequence, batch })
    });
    let by_count = m.optional(d, "seq_packets_per_batch", |d, n, p| {
        let mut b = MapReader::open(d, n, p)?;
        let sequence = b.required(d, "sequence_number", bit_field);
        let ppb = b.required(d, "packets_per_batch", |d, n, p| {
            r::uint_in(d, n, p, 1, gpudirect::MAX_ITEMS as u64)
        });
        b.finish(d);
        let (sequence, ppb) = (sequence?, ppb? as u32);
        if !(1u64 << sequence.bit_width).is_multiple_of(ppb as u64) {
            d.error(
                Kind::Range,
                &join(p, "packets_per_batch"),
                Some(n.location),
                format!(
                    "packets_per_batch {ppb} must divide 2^{} (the sequence number wraps there)",
                    sequence.bit_width
                ),
            );
            return None;
        }
        Some(Method::SeqPacketsPerBatch {
            sequence,
            packets_per_batch: ppb,
        })
    });
    m.finish(d);
    match given {
        [true, true] => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                "give one method: seq_batch_number or seq_packets_per_batch, not both",
            );
            None
        }
        [false, false] => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "missing the method: seq_batch_number or seq_packets_per_batch",
            );
            None
        }
        // One given: errors inside it are already reported.
        _ => by_batch.or(by_count),
    }
}

fn data_types(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Conversion> {
    let mut m = MapReader::open(d, node, path)?;
    let c = conversion_keys(d, &mut m, node, path);
    m.finish(d);
    c
}

/// `input_type`, `output_type` and `endianness` (or their aliases) of map `m`.
fn conversion_keys(
    d: &mut Diagnostics,
    m: &mut MapReader,
    node: &Node,
    path: &str,
) -> Option<Conversion> {
    // The reference accepts short aliases; a map with both spellings is an error.
    let pick = |d: &mut Diagnostics,
                m: &mut MapReader,
                key: &'static str,
                alias: &'static str,
                choices: &[&'static str]| {
        if m.has(key) && m.has(alias) {
            d.error(
                Kind::Duplicate,
                &join(path, alias),
                Some(m.location_of(alias)),
                format!("`{alias}` and `{key}` are the same key; give one"),
            );
        }
        let k = if m.has(alias) { alias } else { key };
        m.optional(d, k, |d, n, p| r::choice(d, n, p, choices))
    };
    let input = pick(
        d,
        m,
        "input_type",
        "input",
        &["int4", "int8", "int16", "int32"],
    );
    let output = pick(
        d,
        m,
        "output_type",
        "output",
        &["fp16", "bf16", "fp32", "fp64", "int32"],
    );
    let order = pick(d, m, "endianness", "input_endianness", &["host", "network"]);
    let input = match input {
        Some("int4") => InputType::Int4,
        Some("int8") => InputType::Int8,
        Some("int16") => InputType::Int16,
        Some(_) => InputType::Int32,
        None => {
            d.error(
                Kind::Missing,
                &join(path, "input_type"),
                Some(node.location),
                "missing required key `input_type`",
            );
            return None;
        }
    };
    let output = match output {
        Some("fp16") => OutputType::Fp16,
        Some("bf16") => OutputType::Bf16,
        Some("fp32") => OutputType::Fp32,
        Some(other) => {
            d.error(
                Kind::NotSupported,
                &join(path, "output_type"),
                Some(node.location),
                format!("not supported: output_type {other} (fp16, bf16 and fp32 are)"),
            );
            return None;
        }
        None => {
            d.error(
                Kind::Missing,
                &join(path, "output_type"),
                Some(node.location),
                "missing required key `output_type`",
            );
            return None;
        }
    };
    Some(Conversion {
        input,
        output,
        network_order: order == Some("network"),
    })
}

fn reorder_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<ReorderConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let kind = m.required(d, "reorder_type", |d, n, p| {
        r::choice(d, n, p, &["gpu", "cpu"]).map(|k| {
            if k == "gpu" {
                ReorderKind::Gpu
            } else {
                ReorderKind::Cpu
            }
        })
    });
    let memory_region = m.required(d, "memory_region", r::name);
    let payload_byte_offset = m
        .optional(d, "payload_byte_offset", |d, n, p| {
            r::uint_in(d, n, p, 0, 65535)
        })
        .unwrap_or(0) as u32;
    let flow_ids = m.required(d, "flow_ids", |d, n, p| {
        let items = r::list(d, n, p)?;
        if items.is_empty() {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                "flow_ids must name at least one flow",
            );
            return None;
        }
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| r::uint_in(d, x, &index(p, i), 0, 0xFF_FFFF))
                .map(|v| v as u32)
                .collect::<Vec<_>>(),
        )
    });
    let conversion = m.optional(d, "data_types", data_types);
    let method = m.required(d, "method", reorder_method);
    m.finish(d);
    Some(ReorderConfig {
        name: name?,
        kind: kind?,
        memory_region: memory_region?,
        payload_byte_offset,
        flow_ids: flow_ids?,
        conversion,
        method: method?,
        location: node.location,
    })
}

fn tx_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let accurate_send = m.optional(d, "accurate_send", r::boolean).unwrap_or(false);
    let queues = queues(d, &mut m, Direction::Tx);
    let flows = list_of(d, &mut m, "flows", tx_flow);
    m.finish(d);
    Some(TxConfig {
        accurate_send,
        queues,
        flows,
    })
}

/// Parses one `rx.flows[]` entry (public for dynamic flows built from YAML text).
pub fn flow(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlowConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 0xFF_FFFF));
    let single = m.optional(d, "action", queue_action);
    let mut transforms = Vec::new();
    let ordered = m.optional(d, "actions", |d, n, p| {
        let items = r::list(d, n, p)?;
        if items.len() > 7 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("at most 7 actions per flow, got {}", items.len()),
            );
        }
        let mut target = None;
        for (i, a) in items.iter().enumerate() {
            let ap = index(p, i);
            let kind = MapReader::open(&mut Diagnostics::default(), a, &ap)
                .and_then(|mut t| t.get("type").and_then(|n| n.scalar_text()));
            match kind.as_deref() {
                Some("queue") => {
                    if i + 1 != items.len() {
                        d.error(
                            Kind::Invalid,
                            &ap,
                            Some(a.location),
                            "the queue action must be the last action",
                        );
                    }
                    target = queue_action(d, a, &ap);
                }
                Some("vlan_pop") => {
                    let mut t = MapReader::open(d, a, &ap)?;
                    t.get("type");
                    t.finish(d);
                    transforms.push(FlowTransform::VlanPop);
                }
                Some("tunnel_decap") => {
                    if let Some(tc) = tunnel_action(d, a, &ap) {
                        transforms.push(FlowTransform::TunnelDecap(tc));
                    }
                }
                Some(other @ ("vlan_push" | "tunnel_encap")) => d.error(
                    Kind::Invalid,
                    &ap,
                    Some(a.location),
                    format!("`{other}` is a TX action; RX flows may only pop or decap"),
                ),
                _ => {
                    let mut t = MapReader::open(d, a, &ap)?;
                    t.required(d, "type", |d, n, p| {
                        r::choice(d, n, p, &["queue", "vlan_pop", "tunnel_decap"])
                    });
                }
            }
        }
        if target.is_none() && !items.is_empty() {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                "RX flow actions must end with a `queue` action",
            );
        }
        target
    });
    if m.has("action") && m.has("actions") {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`action` and `actions` are mutually exclusive",
        );
    }
    let matches = m.optional(d, "match", flow_match).unwrap_or_default();
    m.finish(d);
    let queue_ids = match single.or(ordered) {
        Some(q) => q,
        None => {
            if !d.has_errors() {
                d.error(
                    Kind::Missing,
                    path,
                    Some(node.location),
                    "a flow needs a queue action (`action: {type: queue, id: N}`)",
                );
            }
            return None;
        }
    };
    Some(FlowConfig {
        name: name?,
        id: id? as u32,
        queue_ids,
        matches,
        transforms,
        location: node.location,
    })
}

fn tx_flow(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxFlowConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 0xFF_FFFF));
    let transforms = m
        .required(d, "actions", |d, n, p| {
            let items = r::list(d, n, p)?;
            let mut out = Vec::new();
            for (i, a) in items.iter().enumerate() {
                let ap = index(p, i);
                let kind = MapReader::open(&mut Diagnostics::default(), a, &ap)
                    .and_then(|mut t| t.get("type").and_then(|n| n.scalar_text()));
                match kind.as_deref() {
                    Some("vlan_push") => out.extend(vlan_push(d, a, &ap)),
                    Some("tunnel_encap") => {
                        out.extend(tunnel_action(d, a, &ap).map(TxTransform::TunnelEncap))
                    }
                    Some(other @ ("queue" | "vlan_pop" | "tunnel_decap")) => d.error(
                        Kind::Invalid,
                        &ap,
                        Some(a.location),
                        format!("`{other}` is an RX action; TX flows may only push or encap"),
                    ),
                    _ => {
                        let mut t = MapReader::open(d, a, &ap)?;
                        t.required(d, "type", |d, n, p| {
                            r::choice(d, n, p, &["vlan_push", "tunnel_encap"])
                        });
                    }
                }
            }
            if out.is_empty() && !d.has_errors() {
                d.error(
                    Kind::Missing,
                    p,
                    Some(n.location),
                    "a TX flow needs at least one vlan_push or tunnel_encap action",
                );
            }
            Some(out)
        })
        .unwrap_or_default();
    let matches = m.optional(d, "match", flow_match).unwrap_or_default();
    m.finish(d);
    Some(TxFlowConfig {
        name: name?,
        id: id? as u32,
        transforms,
        matches,
        location: node.location,
    })
}

fn vlan_push(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxTransform> {
    // The reference accepts the tag fields beside `type` or nested under `vlan:`.
    let mut outer = MapReader::open(d, node, path)?;
    outer.get("type");
    let fields = |d: &mut Diagnostics, m: &mut MapReader| {
        let vlan_id = m.required(d, "vlan_id", |d, n, p| r::uint_in(d, n, p, 0, 4095));
        let pcp = m
            .optional(d, "pcp", |d, n, p| r::uint_in(d, n, p, 0, 7))
            .unwrap_or(0);
        let dei = m
            .optional(d, "dei", |d, n, p| r::uint_in(d, n, p, 0, 1))
            .unwrap_or(0);
        let ethertype = m
            .optional(d, "ethertype", |d, n, p| r::uint_in(d, n, p, 1, 65535))
            .unwrap_or(0x8100);
        Some(TxTransform::VlanPush {
            vlan_id: vlan_id? as u16,
            pcp: pcp as u8,
            dei: dei as u8,
            ethertype: ethertype as u16,
        })
    };
    let t = if outer.has("vlan") {
        outer.required(d, "vlan", |d, n, p| {
            let mut inner = MapReader::open(d, n, p)?;
            let t = fields(d, &mut inner);
            inner.finish(d);
            t
        })
    } else {
        fields(d, &mut outer)
    };
    outer.finish(d);
    t
}

fn tunnel_action(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TunnelConfig> {
    let mut m = MapReader::open(d, node, path)?;
    m.get("type");
    let t = m.required(d, "tunnel", tunnel)?;
    m.finish(d);
    Some(t)
}

fn tunnel(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TunnelConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let kind = m.required(d, "type", |d, n, p| {
        r::choice(d, n, p, &["vxlan", "gre", "nvgre"])
    })?;
    let kind = match kind {
        "vxlan" => TunnelKind::Vxlan,
        "gre" => TunnelKind::Gre,
        _ => TunnelKind::Nvgre,
    };
    let outer_eth_src = m.optional(d, "outer_eth_src", mac);
    let outer_eth_dst = m.optional(d, "outer_eth_dst", mac);
    let outer_ipv4_src = m.optional(d, "outer_ipv4_src", ipv4_addr);
    let outer_ipv4_dst = m.optional(d, "outer_ipv4_dst", ipv4_addr);
    let u8_key =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 255).map(|v| v as u8);
    let outer_ipv4_ttl = m.optional(d, "outer_ipv4_ttl", u8_key).unwrap_or(64);
    let outer_ipv4_tos = m.optional(d, "outer_ipv4_tos", u8_key).unwrap_or(0);
    let u24 = |d: &mut Diagnostics, n: &Node, p: &str| {
        r::uint_in(d, n, p, 0, 0xFF_FFFF).map(|v| v as u32)
    };
    let port =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 65535).map(|v| v as u16);
    let (mut vni, mut outer_udp_src, mut outer_udp_dst, mut gre_protocol, mut tni, mut flow_id) =
        (0, 0, 4789, 0x0800, 0, 0);
    match kind {
        TunnelKind::Vxlan => {
            vni = m.optional(d, "vni", u24).unwrap_or(0);
            outer_udp_src = m.optional(d, "outer_udp_src", port).unwrap_or(0);
            outer_udp_dst = m.optional(d, "outer_udp_dst", port).unwrap_or(4789);
            if outer_udp_dst == 0 {
                d.error(
                    Kind::Range,
                    &r::join(path, "outer_udp_dst"),
                    Some(m.location_of("outer_udp_dst")),
                    "the VXLAN destination port must not be 0",
                );
            }
        }
        TunnelKind::Gre => {
            gre_protocol = m.optional(d, "gre_protocol", port).unwrap_or(0x0800);
            if gre_protocol == 0 {
                d.error(
                    Kind::Range,
                    &r::join(path, "gre_protocol"),
                    Some(m.location_of("gre_protocol")),
                    "the GRE protocol must not be 0",
                );
            }
        }
        TunnelKind::Nvgre => {
            tni = m.optional(d, "tni", u24).unwrap_or(0);
            flow_id = m.optional(d, "flow_id", u8_key).unwrap_or(0);
        }
    }
    m.finish(d);
    Some(TunnelConfig {
        kind,
        outer_eth_src,
        outer_eth_dst,
        outer_ipv4_src,
        outer_ipv4_dst,
        outer_ipv4_ttl,
        outer_ipv4_tos,
        vni,
        outer_udp_src,
        outer_udp_dst,
        gre_protocol,
        tni,
        nvgre_flow_id: flow_id,
    })
}

fn ipv4_addr(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Ipv4Addr> {
    let p = ipv4_prefix(d, node, path)?;
    if p.len != 32 {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "an IPv4 address is needed here, not a prefix",
        );
        return None;
    }
    Some(p.addr)
}

fn flex_item(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlexItemConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 65535));
    let offset = m.required(d, "offset", |d, n, p| {
        let v = r::uint_in(d, n, p, 0, 28)?;
        if v % 4 != 0 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("offset must be a multiple of 4 (0..28), got {v}"),
            );
            return None;
        }
        Some(v as u32)
    });
    let udp_dst_port = m.required(d, "udp_dst_port", |d, n, p| r::uint_in(d, n, p, 1, 65535));
    m.finish(d);
    Some(FlexItemConfig {
        name: name?,
        id: id? as u16,
        offset: offset?,
        udp_dst_port: udp_dst_port? as u16,
        location: node.location,
    })
}

fn queue_action(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Vec<u16>> {
    let mut m = MapReader::open(d, node, path)?;
    m.required(d, "type", |d, n, p| r::choice(d, n, p, &["queue"]));
    let id = m.optional(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 63));
    let ids = m.optional(d, "ids", |d, n, p| {
        let items = r::list(d, n, p)?;
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| r::uint_in(d, x, &index(p, i), 0, 63))
                .collect::<Vec<_>>(),
        )
    });
    m.finish(d);
    match (id, ids) {
        (Some(id), None) => Some(vec![id as u16]),
        (None, Some(ids)) if !ids.is_empty() => Some(ids.into_iter().map(|i| i as u16).collect()),
        (Some(_), Some(_)) => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                "give either `id` or `ids`, not both",
            );
            None
        }
        _ => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "missing required key `id` (or a non-empty `ids` list)",
            );
            None
        }
    }
}

fn flow_match(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlowMatch> {
    let mut m = MapReader::open(d, node, path)?;
    let udp_src = m.optional(d, "udp_src", port_range);
    let udp_dst = m.optional(d, "udp_dst", port_range);
    let ipv4_len = m
        .optional(d, "ipv4_len", |d, n, p| r::uint_in(d, n, p, 20, 65535))
        .map(|v| v as u16);
    let ipv4_src = m.optional(d, "ipv4_src", ipv4_prefix);
    let ipv4_dst = m.optional(d, "ipv4_dst", ipv4_prefix);
    let vlan_id = m
        .optional(d, "vlan_id", |d, n, p| r::uint_in(d, n, p, 0, 4095))
        .map(|v| v as u16);
    let ecpri = m.optional(d, "ecpri", ecpri_match);
    let flex_id = m.optional(d, "flex_item_id", |d, n, p| r::uint_in(d, n, p, 0, 65535));
    let u32_key = |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, u32::MAX as u64);
    let val = m.optional(d, "val", u32_key);
    let mask = m.optional(d, "mask", u32_key);
    let flex = match (flex_id, val, mask) {
        (Some(id), v, mk) => Some(FlexMatch {
            item_id: id as u16,
            value: v.unwrap_or(0) as u32,
            mask: mk.unwrap_or(u32::MAX as u64) as u32,
        }),
        (None, None, None) => None,
        _ => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "`val` and `mask` need `flex_item_id`",
            );
            None
        }
    };
    let mut fm = FlowMatch {
        udp_src,
        udp_dst,
        ipv4_len,
        ipv4_src,
        ipv4_dst,
        vlan_id,
        ecpri,
        flex,
    };
    if fm.flex.is_some() && (fm.has_ip_fields() || fm.ecpri.is_some()) {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`flex_item_id` cannot be combined with UDP/IPv4 or eCPRI fields (one match class per flow)",
        );
        fm.flex = None;
    }
    if fm.ecpri.is_some() && fm.has_ip_fields() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`ecpri` cannot be combined with UDP/IPv4 fields (eCPRI runs directly over Ethernet)",
        );
    }
    m.finish(d);
    Some(fm)
}

fn ecpri_match(d: &mut Diagnostics, node: &Node, path: &str) -> Option<EcpriMatch> {
    if matches!(node.value, Value::Null) {
        return Some(EcpriMatch::default());
    }
    let mut m = MapReader::open(d, node, path)?;
    let msg_type = m
        .optional(d, "msg_type", |d, n, p| r::uint_in(d, n, p, 0, 255))
        .map(|v| v as u8);
    let id16 =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 65535).map(|v| v as u16);
    let pc_id = m.optional(d, "pc_id", id16);
    let rtc_id = m.optional(d, "rtc_id", id16);
    if pc_id.is_some() && rtc_id.is_some() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "give either `pc_id` or `rtc_id`, not both",
        );
    }
    let id = pc_id.or(rtc_id);
    if id.is_some() && msg_type.is_none() {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "an eCPRI `pc_id`/`rtc_id` needs `msg_type`",
        );
    }
    m.finish(d);
    Some(EcpriMatch { msg_type, id })
}

fn bench_sections(d: &mut Diagnostics, top: &mut MapReader) -> BenchConfig {
    let rx = top
        .optional(d, "bench_rx", |d, n, p| {
            Some(
                r::one_or_many(n)
                    .into_iter()
                    .filter_map(|(i, x)| bench_rx(d, x, &seq_path(n, p, i)))
                    .collect(),
            )
        })
        .unwrap_or_default();
    let tx = top
        .optional(d, "bench_tx", |d, n, p| {
            Some(
                r::one_or_many(n)
                    .into_iter()
                    .filter_map(|(i, x)| bench_tx(d, x, &seq_path(n, p, i)))
                    .collect(),
            )
        })
        .unwrap_or_default();
    let rdma_server = top.optional(d, "rdma_bench_server", |d, n, p| peer_bench(d, n, p, true));
    let rdma_client = top.optional(d, "rdma_bench_client", |d, n, p| peer_bench(d, n, p, true));
    let socket_server = top.optional(d, "socket_bench_server", |d, n, p| {
        peer_bench(d, n, p, false)
    });
    let socket_client = top.optional(d, "socket_bench_client", |d, n, p| {
        peer_bench(d, n, p, false)
    });
    let reorder_quantize = top.optional(d, "bench_reorder_quantize", reorder_quantize);
    BenchConfig {
        rx,
        tx,
        rdma_server,
        rdma_client,
        socket_server,
        socket_client,
        reorder_quantize,
    }
}

fn reorder_quantize(d: &mut Diagnostics, node: &Node, path: &str) -> Option<ReorderQuantizeConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let conversion = conversion_keys(d, &mut m, node, path);
    let count = |key: &'static str, default: u64, m: &mut MapReader, d: &mut Diagnostics| {
        m.optional(d, key, |d, n, p| r::uint_in(d, n, p, 1, 1 << 40))
            .unwrap_or(default)
    };
    let verify_batches = count("verify_batches", 1, &mut m, d);
    let verify_chunks = count("verify_chunks", 1, &mut m, d);
    let chunk_elements = count("chunk_elements", 16, &mut m, d);
    m.finish(d);
    Some(ReorderQuantizeConfig {
        conversion: conversion?,
        verify_batches,
        verify_chunks,
        chunk_elements,
        location: node.location,
    })
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

fn bench_rx(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BenchRxConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let interface_name = m
        .optional(d, "interface_name", r::name)
        .unwrap_or_else(|| "rx_port".into());
    let queue_id = m
        .optional(d, "queue_id", |d, n, p| r::int_in(d, n, p, -1, 63))
        .unwrap_or(-1);
    let cpu_core = m.optional(d, "cpu_core", core_or_unpinned).flatten();
    let gpu_direct = m.optional(d, "gpu_direct", r::boolean);
    let split_boundary = m.optional(d, "split_boundary", r::boolean);
    let size = |key: &'static str, m: &mut MapReader, d: &mut Diagnostics| {
        m.optional(d, key, |d, n, p| r::uint_in(d, n, p, 1, 1 << 20))
            .map(|v| v as u32)
    };
    let batch_size = size("batch_size", &mut m, d);
    let max_packet_size = size("max_packet_size", &mut m, d);
    let header_size = size("header_size", &mut m, d);
    m.finish(d);
    Some(BenchRxConfig {
        interface_name,
        queue_id: (queue_id >= 0).then_some(queue_id as u16),
        cpu_core,
        gpu_direct,
        split_boundary,
        batch_size,
        max_packet_size,
        header_size,
        location: node.location,
    })
}

fn bench_tx(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BenchTxConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let interface_name = m
        .optional(d, "interface_name", r::name)
        .unwrap_or_else(|| "tx_port".into());
    let queue_id = m
        .optional(d, "queue_id", |d, n, p| r::uint_in(d, n, p, 0, 63))
        .unwrap_or(0) as u16;
    let cpu_core = m.optional(d, "cpu_core", core_or_unpinned).flatten();
    let batch_size = m
        .optional(d, "batch_size", |d, n, p| r::uint_in(d, n, p, 1, 1 << 20))
        .unwrap_or(1024) as u32;
    let payload_size = m
        .optional(d, "payload_size", |d, n, p| r::uint_in(d, n, p, 16, 65000))
        .unwrap_or(1000) as u32;
    let header_size = m
        .optional(d, "header_size", |d, n, p| r::uint_in(d, n, p, 42, 1024))
        .unwrap_or(64) as u32;
    let one = |p| PortRange { first: p, last: p };
    let udp_src_port = m
        .optional(d, "udp_src_port", port_range)
        .unwrap_or(one(4096));
    let udp_dst_port = m
        .optional(d, "udp_dst_port", port_range)
        .unwrap_or(one(4096));
    let ip_src_addr = m
        .optional(d, "ip_src_addr", ipv4)
        .unwrap_or(Ipv4Addr::new(1, 2, 3, 4));
    let ip_dst_addr = m
        .optional(d, "ip_dst_addr", ipv4)
        .unwrap_or(Ipv4Addr::new(5, 6, 7, 8));
    let eth_src_addr = m.optional(d, "eth_src_addr", mac).unwrap_or([0; 6]);
    let eth_dst_addr = m.optional(d, "eth_dst_addr", mac).unwrap_or([0; 6]);
    let seq_offset = m.optional(d, "sequence_number_offset", |d, n, p| {
        r::uint_in(d, n, p, 0, 65535)
    });
    let seq_start = m.optional(d, "sequence_number_start", |d, n, p| {
        r::uint_in(d, n, p, 0, u32::MAX as u64)
    });
    let sequence_number = (seq_offset.is_some() || seq_start.is_some()).then(|| SequenceField {
        offset: seq_offset.unwrap_or(0) as u32,
        start: seq_start.unwrap_or(0) as u32,
    });
    if let Some(seq) = sequence_number {
        let (h, p) = (header_size, payload_size);
        let end = (h + seq.offset) as usize + 4;
        let room = (h + p) as usize - BENCH_TRAILER_BYTES;
        if end > room {
            d.error(
                Kind::Range,
                &join(path, "sequence_number_offset"),
                Some(m.location_of("sequence_number_offset")),
                format!(
                    "the 4-byte sequence number at payload offset {} ends at byte {end}, past the {room} bytes before the frame's {}-byte check trailer; lower the offset or raise payload_size",
                    seq.offset,
                    BENCH_TRAILER_BYTES
                ),
            );
        }
    }
    let gpu_direct = m.optional(d, "gpu_direct", r::boolean).unwrap_or(false);
    m.not_supported_unless(d, "split_boundary", |n| {
        matches!(n.value, Value::Bool(false))
    });
    m.finish(d);
    Some(BenchTxConfig {
        interface_name,
        queue_id,
        cpu_core,
        batch_size,
        payload_size,
        header_size,
        udp_src_port,
        udp_dst_port,
        ip_src_addr,
        ip_dst_addr,
        eth_src_addr,
        eth_dst_addr,
        sequence_number,
        gpu_direct,
        location: node.location,
    })
}

fn peer_bench(d: &mut Diagnostics, node: &Node, path: &str, rdma: bool) -> Option<PeerBenchConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let server = m.optional(d, "server", r::boolean).unwrap_or(false);
    let send = m.optional(d, "send", r::boolean).unwrap_or(false);
    let receive = m.optional(d, "receive", r::boolean).unwrap_or(false);
    let cpu_core = m.optional(d, "cpu_core", core_or_unpinned).flatten();
    let message_size = m
        .optional(d, "message_size", |d, n, p| r::uint_in(d, n, p, 1, 1 << 32))
        .unwrap_or(1024);
    let (tx_depth, rx_depth, iterations) = if rdma {
        (
            m.optional(d, "tx_depth", |d, n, p| r::uint_in(d, n, p, 1, 1 << 16))
                .unwrap_or(128) as u32,
            m.optional(d, "rx_depth", |d, n, p| r::uint_in(d, n, p, 1, 1 << 16))
                .unwrap_or(512) as u32,
            0,
        )
    } else {
        (
            0,
            0,
            m.optional(d, "iterations", |d, n, p| {
                r::int_in(d, n, p, i64::MIN.into(), i64::MAX.into())
            })
            .unwrap_or(1000) as i64,
        )
    };
    let (sa, ca, sp) = if rdma {
        (
            Ipv4Addr::new(10, 100, 1, 1),
            Ipv4Addr::new(10, 100, 4, 1),
            4096,
        )
    } else {
        (Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 5001)
    };
    let server_address = m.optional(d, "server_address", ipv4).unwrap_or(sa);
    let client_address = m.optional(d, "client_address", ipv4).unwrap_or(ca);
    let server_port = m
        .optional(d, "server_port", |d, n, p| r::uint_in(d, n, p, 0, 65535))
        .map_or(sp, |v| v as u16);
    m.finish(d);
    Some(PeerBenchConfig {
        server,
        send,
        receive,
        cpu_core,
        message_size,
        tx_depth,
        rx_depth,
        iterations,
        server_address,
        client_address,
        server_port,
    })
}
