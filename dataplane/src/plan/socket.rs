//! The kernel-socket engine's plan: per interface, the transport, the addresses, the
//! region each queue receives into or sends from, the socket buffer sizes and the peer
//! rules, all decided and checked before a socket is opened.

use super::{PlanError, QueuePlan, RegionPlan};
use crate::config::{Config, Direction, MemoryKind, PeerFilter, SocketMode, Transport};
use crate::descriptor::{QueueId, RegionId};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::Duration;

/// The highest MTU a socket interface raises its kernel interface to (jumbo frames).
pub const MAX_RAISED_MTU: u32 = 9000;

/// Socket buffer bytes asked for at least (a queue without a region asks this much).
pub const MIN_SOCKET_BUFFER: usize = 4 << 20;
/// Socket buffer bytes asked for at most.
pub const MAX_SOCKET_BUFFER: usize = 64 << 20;

/// Socket buffer bytes asked for a queue whose region has `num_bufs` buffers of
/// `buf_size` bytes: what the region holds, between 4 and 64 MiB (`dataplane doctor`
/// compares it with `net.core.rmem_max` / `wmem_max`).
pub fn buffer_bytes_for(num_bufs: usize, buf_size: usize) -> usize {
    num_bufs
        .saturating_mul(buf_size)
        .clamp(MIN_SOCKET_BUFFER, MAX_SOCKET_BUFFER)
}

/// One interface on kernel sockets.
#[derive(Clone, Debug, Serialize)]
pub struct SocketInterfacePlan {
    /// Interface name.
    pub name: String,
    /// UDP or TCP.
    pub transport: Transport,
    /// Server (binds, learns or accepts its peer) or client (connects).
    pub mode: SocketMode,
    /// `local_addr`.
    pub local: Option<SocketAddr>,
    /// `remote_addr`.
    pub remote: Option<SocketAddr>,
    /// `multicast_groups` a UDP server joins (on the interface of its `local_addr`).
    pub multicast: Vec<crate::config::MulticastGroup>,
    /// The MTU the kernel interface of `local_addr` is raised to, never lowered, so a
    /// `max_payload_size` datagram or segment goes unfragmented: the payload plus the IP
    /// and UDP or TCP headers (28 or 40 over IPv4, 48 or 60 over IPv6), at most
    /// [`MAX_RAISED_MTU`]; `None` without a `max_payload_size`.
    pub mtu: Option<u32>,
    /// RX queues in configuration order.
    pub rx: Vec<SocketQueuePlan>,
    /// TX queues in configuration order.
    pub tx: Vec<SocketQueuePlan>,
    /// Socket buffer bytes asked for (receive, send).
    pub buffers: (usize, usize),
    /// `busy_poll_us`.
    pub busy_poll_us: u32,
    /// `udp_gso`.
    pub gso: bool,
    /// `udp_gro`.
    pub gro: bool,
    /// RX `hardware_timestamps`: kernel receive timestamps.
    pub timestamps: bool,
    /// Who may reach the interface (`allowed_peers`, or the configured remote).
    pub peers: PeerFilter,
    /// `retry_connect_s` (TCP clients).
    pub retry_connect_s: u32,
    /// TCP servers: close a connection idle this long (`idle_timeout_s`; `None`: never).
    pub idle_timeout: Option<Duration>,
}

impl SocketInterfacePlan {
    /// Where the interface's sockets bind: `local_addr`, else any address (port 0) of the
    /// remote's IP version, or of the groups' (IPv4 without any).
    pub fn local_or_any(&self) -> SocketAddr {
        let v6 = match (self.remote, self.multicast.first()) {
            (Some(r), _) => r.is_ipv6(),
            (None, Some(g)) => g.group.is_ipv6(),
            (None, None) => false,
        };
        self.local.unwrap_or_else(|| match v6 {
            true => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
            false => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
        })
    }
}

/// One socket queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SocketQueuePlan {
    /// Queue id.
    pub id: QueueId,
    /// The host region the socket reads into or writes from (the staging region where the
    /// queue's layout is elsewhere).
    pub region: RegionId,
    /// Packets per burst.
    pub batch: usize,
    /// RX without `timeout_us`: a burst closes as soon as the socket has nothing more
    /// (else the last packets of a stream would wait for a full batch).
    pub close_when_drained: bool,
}

/// Plans every interface of `config` on kernel sockets.
pub(super) fn plan(
    config: &Config,
    regions: &[RegionPlan],
    queues: &[QueuePlan],
) -> Result<Vec<SocketInterfacePlan>, PlanError> {
    let mut out = Vec::with_capacity(config.interfaces.len());
    for (i, iface) in config.interfaces.iter().enumerate() {
        let bad = |reason: &str| PlanError::Interface {
            interface: iface.name.clone(),
            reason: reason.to_owned(),
        };
        let socket = iface
            .socket
            .as_ref()
            .ok_or_else(|| bad("a socket stream interface needs socket_config"))?;
        if socket.transport == Transport::Roce {
            return Err(bad(
                "roce:// interfaces run on the RDMA engine, not on kernel sockets",
            ));
        }
        let tcp = socket.transport == Transport::Tcp;
        let rx = socket_queues(tcp, i, Direction::Rx, regions, queues)?;
        let tx = socket_queues(tcp, i, Direction::Tx, regions, queues)?;
        let limit = |q: &SocketQueuePlan| regions[q.region.index()].buf_size;
        if let Some(q) = rx
            .iter()
            .find(|q| (socket.max_payload_size as usize) > limit(q))
        {
            return Err(PlanError::Queue {
                interface: iface.name.clone(),
                direction: Direction::Rx,
                queue: q.id,
                reason: format!(
                    "socket_config.max_payload_size {} is above the {}-byte buffers it receives into (region `{}` buf_size)",
                    socket.max_payload_size,
                    limit(q),
                    regions[q.region.index()].name
                ),
            });
        }
        let bytes = |q: Option<&SocketQueuePlan>| {
            q.map_or(MIN_SOCKET_BUFFER, |q| {
                let r = &regions[q.region.index()];
                buffer_bytes_for(r.num_bufs, r.buf_size)
            })
        };
        out.push(SocketInterfacePlan {
            name: iface.name.clone(),
            transport: socket.transport,
            mode: socket.mode,
            local: socket.local.map(|e| SocketAddr::new(e.ip, e.port)),
            remote: socket.remote.map(|e| SocketAddr::new(e.ip, e.port)),
            multicast: iface.multicast.clone(),
            mtu: (socket.max_payload_size > 0).then(|| {
                let ipv6 = socket
                    .local
                    .or(socket.remote)
                    .is_some_and(|e| e.ip.is_ipv6());
                let headers = match (tcp, ipv6) {
                    (false, false) => 28,
                    (true, false) => 40,
                    (false, true) => 48,
                    (true, true) => 60,
                };
                (socket.max_payload_size + headers).min(MAX_RAISED_MTU)
            }),
            buffers: (
                socket
                    .receive_buffer_bytes
                    .unwrap_or_else(|| bytes(rx.first())),
                socket
                    .send_buffer_bytes
                    .unwrap_or_else(|| bytes(tx.first())),
            ),
            rx,
            tx,
            busy_poll_us: socket.busy_poll_us,
            gso: socket.udp_gso,
            gro: socket.udp_gro,
            timestamps: iface.rx.as_ref().is_some_and(|r| r.timestamps),
            peers: socket.peer_filter(),
            retry_connect_s: socket.retry_connect_s,
            idle_timeout: (socket.mode == SocketMode::Server && socket.idle_timeout_s > 0)
                .then(|| Duration::from_secs(socket.idle_timeout_s.into())),
        });
    }
    Ok(out)
}

/// The planned queues of one direction of interface `index`, in configuration order.
fn socket_queues(
    tcp: bool,
    index: usize,
    direction: Direction,
    regions: &[RegionPlan],
    queues: &[QueuePlan],
) -> Result<Vec<SocketQueuePlan>, PlanError> {
    let mut out = Vec::new();
    for q in queues
        .iter()
        .filter(|q| q.interface == index && q.direction == direction)
    {
        let bad = |reason: String| PlanError::Queue {
            interface: q.interface_name.clone(),
            direction,
            queue: q.id,
            reason,
        };
        // Queues laid out elsewhere (GPU memory, header-data split) move bytes through
        // their staging region; the worker's stage does the rest.
        let Some(region) = q.staging.or(q.segments.first().copied()) else {
            return Err(bad(
                "needs memory_regions: the socket engine receives and sends from region buffers"
                    .into(),
            ));
        };
        if q.staging.is_none() && q.segments.len() > 1 && (tcp || direction == Direction::Rx) {
            return Err(bad("TCP sends each packet from one buffer; a TX queue with several segments is not supported on tcp:// interfaces".into()));
        }
        let r = &regions[region.index()];
        if r.kind == MemoryKind::Device {
            return Err(bad(format!(
                "the socket engine moves bytes with the CPU, but region `{}` is GPU memory and the queue has no staging region",
                r.name
            )));
        }
        out.push(SocketQueuePlan {
            id: q.id,
            region,
            batch: q.batch.max(1),
            close_when_drained: q.timeout_us == 0,
        });
    }
    Ok(out)
}
