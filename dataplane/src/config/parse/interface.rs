//! `interfaces[]`: an interface, its `socket_config` and addresses, its RX and TX sections
//! and their queues.

use super::*;

pub(super) fn interface(
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
    let multicast = m
        .optional(d, "multicast_groups", |d, n, p| {
            let items = r::list(d, n, p)?;
            Some(
                items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, g)| multicast_group(d, g, &r::index(p, i)))
                    .collect::<Vec<_>>(),
            )
        })
        .unwrap_or_default();
    m.finish(d);
    let address = address?;
    // A RoCE client without local_addr sends from its interface's `address`, as the
    // reference's do (the founding change's cross-host file is written so).
    let socket = socket.map(|mut s| {
        if s.mode == SocketMode::Client
            && s.transport == Transport::Roce
            && s.local.is_none()
            && let Ok(ip) = address.parse::<std::net::IpAddr>()
        {
            s.local = Some(Endpoint { ip, port: 0 });
        }
        s
    });
    Some(InterfaceConfig {
        name: name?,
        address,
        socket,
        roce,
        faults,
        rx,
        tx,
        multicast,
        location: node.location,
    })
}

/// One `multicast_groups` entry: a group address (any source), or `{group, source}`; the
/// source of the group's IP version.
fn multicast_group(d: &mut Diagnostics, node: &Node, path: &str) -> Option<MulticastGroup> {
    let address = |d: &mut Diagnostics, n: &Node, p: &str, multicast: bool| {
        let text = n.scalar_text()?;
        let Ok(a) = text.parse::<std::net::IpAddr>() else {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                format!("`{text}` is not an IP address"),
            );
            return None;
        };
        if a.is_multicast() == multicast {
            return Some(a);
        }
        let want = match (multicast, a) {
            (true, std::net::IpAddr::V4(_)) => "a multicast group (224.0.0.0/4)",
            (true, std::net::IpAddr::V6(_)) => "a multicast group (ff00::/8)",
            (false, _) => "a unicast source address",
        };
        d.error(
            Kind::Invalid,
            p,
            Some(n.location),
            format!("{a} is not {want}"),
        );
        None
    };
    if node.scalar_text().is_some() {
        return Some(MulticastGroup {
            group: address(d, node, path, true)?,
            source: None,
        });
    }
    let mut m = MapReader::open(d, node, path)?;
    let group = m.required(d, "group", |d, n, p| address(d, n, p, true));
    let source = m.optional(d, "source", |d, n, p| address(d, n, p, false));
    m.finish(d);
    let group = group?;
    if let Some(s) = source
        && s.is_ipv4() != group.is_ipv4()
    {
        d.error(
            Kind::Invalid,
            &format!("{path}.source"),
            Some(node.location),
            format!("source {s} and group {group} are of different IP versions"),
        );
        return None;
    }
    Some(MulticastGroup { group, source })
}

pub(super) fn socket_config(
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
    let local = endpoint(
        &mut m,
        d,
        ["local_addr", "local_ip", "local_port"],
        &mut transports,
    );
    let remote = endpoint(
        &mut m,
        d,
        ["remote_addr", "remote_ip", "remote_port"],
        &mut transports,
    );
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
            .filter_map(|(i, a)| peer_prefix(d, a, &index(p, i)))
            .collect();
        (prefixes.len() == items.len()).then_some(prefixes)
    });
    let idle_timeout_s = m
        .optional(d, "idle_timeout_s", |d, n, p| {
            r::uint_in(d, n, p, 0, 86_400)
        })
        .unwrap_or(60) as u32;
    let buffer = |m: &mut MapReader, d: &mut Diagnostics, key: &'static str| {
        m.optional(d, key, |d, n, p| r::uint_in(d, n, p, 4096, 1 << 30))
            .map(|v| v as usize)
    };
    let receive_buffer_bytes = buffer(&mut m, d, "receive_buffer_bytes");
    let send_buffer_bytes = buffer(&mut m, d, "send_buffer_bytes");
    m.not_supported(d, "max_burst_interval_ms");
    m.not_supported(d, "min_ipg_ns");
    m.finish(d);
    let transport = transport_of(d, node, path, &transports, legacy)?;
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
        receive_buffer_bytes,
        send_buffer_bytes,
    })
}

/// An endpoint given as a URI (`uri_key`, its transport noted in `transports`) or in the
/// legacy form (`ip_key`, `port_key`); both at once is an error.
fn endpoint(
    m: &mut MapReader,
    d: &mut Diagnostics,
    [uri_key, ip_key, port_key]: [&'static str; 3],
    transports: &mut Vec<Transport>,
) -> Option<Endpoint> {
    let uri = m.optional(d, uri_key, parse_uri);
    let ip = m.optional(d, ip_key, ip_address);
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
}

/// The transport: the URIs' scheme (one for both), else the legacy key's.
fn transport_of(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    transports: &[Transport],
    legacy: Option<Transport>,
) -> Option<Transport> {
    match (transports.first(), legacy) {
        (Some(t), _) => {
            if transports.iter().any(|x| x != t) {
                d.error(
                    Kind::Invalid,
                    path,
                    Some(node.location),
                    "local_addr and remote_addr use different schemes",
                );
            }
            Some(*t)
        }
        (None, Some(t)) => Some(t),
        (None, None) => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "no transport: give local_addr/remote_addr as udp://, tcp:// or roce:// URIs",
            );
            None
        }
    }
}

pub(super) fn parse_uri(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
) -> Option<(Transport, Endpoint)> {
    let text = r::string(d, node, path)?;
    let bad = |d: &mut Diagnostics, why: &str| {
        d.error(Kind::Invalid, path, Some(node.location), format!("invalid address `{text}`: {why} (expected scheme://ipv4[:port] or scheme://[ipv6]:port, scheme udp, tcp or roce)"));
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
    // `[ipv6]:port`, `[ipv6]`, a bare IPv6 address (no port), `ipv4:port` or `ipv4`.
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let Some((h, rest)) = inner.split_once(']') else {
            bad(d, "`[` without `]`");
            return None;
        };
        match rest.strip_prefix(':').map(str::parse::<u16>) {
            None if rest.is_empty() => (h, 0),
            Some(Ok(p)) => (h, p),
            _ => {
                bad(d, "bad port");
                return None;
            }
        }
    } else if hostport.matches(':').count() > 1 {
        (hostport, 0)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => match p.parse::<u16>() {
                Ok(p) => (h, p),
                Err(_) => {
                    bad(d, "bad port");
                    return None;
                }
            },
            None => (hostport, 0),
        }
    };
    let ip = match (parse_dotted(host), host.parse::<std::net::Ipv6Addr>()) {
        (Some(v4), _) => std::net::IpAddr::V4(v4),
        (None, Ok(v6)) => std::net::IpAddr::V6(v6),
        _ => {
            bad(d, "bad IP address");
            return None;
        }
    };
    Some((transport, Endpoint { ip, port }))
}

/// `stage_core`: one core, or a list of distinct cores (the stage's, then its copy
/// helpers').
pub(super) fn stage_cores(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Vec<u32>> {
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

pub(super) fn queue(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    dir: Direction,
) -> Option<QueueConfig> {
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
    let ring_packets = m
        .optional(d, "ring_packets", |d, n, p| {
            r::uint_in(d, n, p, 1, MAX_RING_PACKETS as u64)
        })
        .map_or(DEFAULT_RING_PACKETS, |v| v as u32);
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
    let (capture, stage_cores, protocol) = if dir == Direction::Rx {
        (
            m.optional(d, "capture", capture_spec),
            m.optional(d, "stage_core", stage_cores).unwrap_or_default(),
            m.optional(d, "protocol", super::protocol::protocol),
        )
    } else {
        (
            None,
            Vec::new(),
            m.optional(d, "protocol", super::protocol::tx_protocol),
        )
    };
    let delivery = m
        .optional(d, "delivery", |d, n, p| {
            r::choice(d, n, p, &["ring", "handler"]).map(|s| match s {
                "handler" => Delivery::Handler,
                _ => Delivery::Ring,
            })
        })
        .unwrap_or_default();
    m.not_supported(d, "split_boundary");
    m.finish(d);
    Some(QueueConfig {
        name: name?,
        id: id? as u16,
        cpu_core: cpu_core? as u32,
        batch_size: batch_size?,
        timeout_us,
        ring_packets,
        memory_regions,
        tx_eth_src,
        pacing_mbps,
        capture,
        stage_core: stage_cores.first().copied(),
        copy_cores: stage_cores.get(1..).unwrap_or_default().to_vec(),
        delivery,
        protocol,
        location: node.location,
    })
}

/// `capture: {path, format, queue_mb}` of an RX queue.
pub(super) fn capture_spec(d: &mut Diagnostics, node: &Node, path: &str) -> Option<CaptureSpec> {
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
    let transient = m.optional(d, "transient", transient_spec);
    if let (Some(_), "raw_per_packet") = (&transient, format.as_str()) {
        d.error(
            Kind::NotSupported,
            &format!("{path}.format"),
            Some(node.location),
            "not supported: format raw_per_packet with transient (pcap, pcapng or raw)",
        );
    }
    m.finish(d);
    Some(CaptureSpec {
        path: file?,
        format,
        queue_mb,
        transient,
    })
}

/// `capture.transient: {keep_mb, keep_ms, keep_in, before_ms, after_ms, trigger_on: {offset, bytes}}`.
fn transient_spec(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TransientSpec> {
    let mut m = MapReader::open(d, node, path)?;
    let keep_mb = m
        .optional(d, "keep_mb", |d, n, p| r::uint_in(d, n, p, 1, 1 << 20))
        .unwrap_or(256) as u32;
    let keep_ms = m
        .optional(d, "keep_ms", |d, n, p| r::uint_in(d, n, p, 0, 86_400_000))
        .unwrap_or(0);
    let before_ms = m.required(d, "before_ms", |d, n, p| r::uint_in(d, n, p, 0, 86_400_000));
    let after_ms = m.required(d, "after_ms", |d, n, p| r::uint_in(d, n, p, 0, 86_400_000));
    let trigger_on = m.optional(d, "trigger_on", |d, n, p| {
        let mut t = MapReader::open(d, n, p)?;
        let offset = t.required(d, "offset", |d, n, p| r::uint_in(d, n, p, 0, 65_535));
        let bytes = t.required(d, "bytes", |d, n, p| {
            let text = r::string(d, n, p)?;
            let digits: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            // Hex digits only (ASCII, so slicing by byte is safe), in pairs.
            let parsed = (digits.len().is_multiple_of(2)
                && !digits.is_empty()
                && digits.chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| {
                (0..digits.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).ok())
                    .collect::<Option<Vec<u8>>>()
            })
            .flatten();
            if parsed.is_none() {
                d.error(
                    Kind::Invalid,
                    p,
                    Some(n.location),
                    format!("`{text}` is not bytes in hex (such as \"de ad be ef\")"),
                );
            }
            parsed
        });
        t.finish(d);
        Some((offset? as usize, bytes?))
    });
    let keep_in = m.optional(d, "keep_in", |d, n, p| {
        match r::choice(d, n, p, &["host", "host_pinned", "device"])? {
            "host" => Some(MemoryKind::Host),
            "host_pinned" => Some(MemoryKind::HostPinned),
            _ => Some(MemoryKind::Device),
        }
    });
    if let (Some(b), true) = (before_ms, keep_ms > 0)
        && keep_ms < b
    {
        d.error(
            Kind::Invalid,
            &format!("{path}.keep_ms"),
            Some(node.location),
            format!("keep_ms {keep_ms} is shorter than before_ms {b}: the window before a trigger would be cut"),
        );
    }
    m.finish(d);
    Some(TransientSpec {
        keep_mb,
        keep_ms,
        before_ms: before_ms?,
        after_ms: after_ms?,
        trigger_on,
        keep_in,
    })
}

pub(super) fn queues(d: &mut Diagnostics, m: &mut MapReader, dir: Direction) -> Vec<QueueConfig> {
    list_of(d, m, "queues", |d, x, p| queue(d, x, p, dir))
}

pub(super) fn rx_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<RxConfig> {
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
    let descriptors = ring_descriptors(d, &mut m);
    m.finish(d);
    Some(RxConfig {
        descriptors,
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

/// `descriptors`: a DPDK queue's device ring, 64 to 32768 (the driver may round it).
fn ring_descriptors(d: &mut Diagnostics, m: &mut MapReader) -> Option<u16> {
    m.optional(d, "descriptors", |d, n, p| r::uint_in(d, n, p, 64, 32768))
        .map(|v| v as u16)
}

pub(super) fn tx_config(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let accurate_send = m.optional(d, "accurate_send", r::boolean).unwrap_or(false);
    let queues = queues(d, &mut m, Direction::Tx);
    let flows = list_of(d, &mut m, "flows", tx_flow);
    let descriptors = ring_descriptors(d, &mut m);
    m.finish(d);
    Some(TxConfig {
        descriptors,
        accurate_send,
        queues,
        flows,
    })
}
