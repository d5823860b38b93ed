//! The bench sections: `bench_rx`, `bench_tx` and the peer benches
//! (`rdma_bench_*`, `socket_bench_*`).

use super::*;

pub(super) fn bench_sections(d: &mut Diagnostics, top: &mut MapReader) -> BenchConfig {
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

pub(super) fn bench_rx(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BenchRxConfig> {
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

pub(super) fn bench_tx(d: &mut Diagnostics, node: &Node, path: &str) -> Option<BenchTxConfig> {
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

pub(super) fn peer_bench(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    rdma: bool,
) -> Option<PeerBenchConfig> {
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
