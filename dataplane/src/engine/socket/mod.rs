//! Kernel sockets (`stream_type: socket` with `udp://` or `tcp://` addresses): the engine
//! for any Linux machine and any NIC. Its queues are served by the same pinned busy-poll
//! workers as every other engine; the kernel does the protocol.
//!
//! - **UDP**: one socket per *lane*. A server's lanes are its RX queues, each a socket
//!   bound to `local_addr` with SO_REUSEPORT, so the kernel spreads 4-tuples over them; a
//!   client's lanes are `max(RX, TX)` sockets connected to `remote_addr`, lane `i` bound
//!   to `local_port + i` (so each lane is its own flow). RX queue `i` reads lane `i`
//!   (`recvmmsg` straight into the queue's region buffers, one datagram per buffer), TX
//!   queue `j` sends on lane `j % lanes` (`sendmmsg`, equal-sized runs of packets as one
//!   UDP GSO send). A server answers the peer its lane last heard from. Flow rules run in
//!   software on what the sockets receive (the classifier sees the datagram's addresses
//!   and payload). Kernel drops (SO_RXQ_OVFL, SO_MEMINFO) count as `engine_missed`.
//! - **TCP** ([`tcp`]): one connection per lane, made by a connection thread that never
//!   blocks start: a server accepts into free lanes, a client connects and reconnects
//!   every `retry_connect_s`. RX reads the byte stream into region buffers (`readv`, one
//!   packet per filled buffer); TX writes packets with `writev`, holding a partly written
//!   burst until the socket takes the rest (backpressure, no loss).

#![deny(unsafe_code)]

mod peer;
#[allow(unsafe_code)]
pub mod sys;
pub mod tcp;
mod udp;

use super::wire::WireGrid;
use super::{Capabilities, Engine, EngineError, Link, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::{Direction, SocketMode, Transport};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::RegionSet;
use crate::plan::socket::SocketInterfacePlan;
/// A queue as the socket engine runs it: as planned.
use crate::plan::socket::SocketQueuePlan as QueueSetup;
use crate::stats::{DropReason, QueueCounters, WarnLimiter};
use crate::steering::InterfaceSteering;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;

/// Largest UDP payload over IPv4.
pub const MAX_UDP_PAYLOAD: usize = 65507;

/// Frees the packets of `burst` with a segment the CPU cannot read (GPU memory the queue's
/// stage did not move out; the plane refuses such bursts at send, so this is the last
/// guard), counting them as `malformed`: a packet is sent whole or not at all, never
/// truncated. True when nothing is left to send.
fn drop_unreadable(burst: &mut Burst, counters: &QueueCounters, warn: &WarnLimiter) -> bool {
    if burst.regions().iter().all(|r| r.host_accessible()) {
        return false;
    }
    let unreadable =
        |i: usize| (0..burst.packets()[i].segments().len()).any(|s| burst.data(i, s).is_none());
    let bad: Vec<bool> = (0..burst.len()).map(unreadable).collect();
    let n = bad.iter().filter(|&&b| b).count();
    if n > 0 {
        let len = burst.len();
        burst.drop_front_where(len, |i| bad[i]);
        counters.drop_packets(DropReason::Malformed, n as u64);
        if let Some(held) = warn.allow() {
            tracing::warn!(
                "{n} packet(s) with a segment in GPU memory dropped before a socket send (counted as malformed){}",
                WarnLimiter::note(held)
            );
        }
    }
    burst.is_empty()
}

enum Interface {
    Udp(Box<udp::UdpInterface>),
    Tcp(tcp::TcpInterface),
}

/// The kernel socket engine.
pub struct SocketEngine {
    interfaces: Vec<Interface>,
    /// Accepts and connects for TCP interfaces; stopped and joined on drop.
    _connector: Option<tcp::Connector>,
}

/// Warns when the kernel granted less socket buffer than asked (it reports twice what it
/// grants, capped by `net.core.rmem_max` / `wmem_max`).
fn warn_if_capped(interface: &str, asked: (usize, usize), got: sys::BufferSizes) {
    for (what, sysctl, asked, got) in [
        ("receive", "net.core.rmem_max", asked.0, got.receive),
        ("send", "net.core.wmem_max", asked.1, got.send),
    ] {
        if asked > 0 && got / 2 < asked {
            tracing::warn!(
                "interface `{interface}`: the kernel capped the socket {what} buffer at {} KiB of the {} KiB asked for; raise it with `sysctl -w {sysctl}={asked}`",
                got / 2 / 1024,
                asked / 1024
            );
        }
    }
}

impl SocketEngine {
    /// Opens every interface's sockets (UDP) or listener (TCP servers) and starts the
    /// connection thread for TCP; a port in use or an address not on this machine fails
    /// here, naming the interface.
    pub fn new(
        plan: &[SocketInterfacePlan],
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let mut interfaces = Vec::new();
        let mut tcp_interfaces = Vec::new();
        for (i, (iface, steering)) in plan.iter().zip(steering).enumerate() {
            log_queues(iface, regions);
            raise_mtu(iface);
            match iface.transport {
                Transport::Udp => {
                    interfaces.push(Interface::Udp(Box::new(udp::UdpInterface::open(
                        iface,
                        PortIndex(i as u16),
                        regions,
                        steering,
                    )?)));
                }
                Transport::Tcp => {
                    let t = tcp::TcpInterface::open(iface)
                        .map_err(|source| EngineError::Socket {
                            interface: iface.name.clone(),
                            source,
                        })?
                        .with_regions(regions);
                    tcp_interfaces.push(t.shared());
                    interfaces.push(Interface::Tcp(t));
                }
                Transport::Roce => {
                    return Err(EngineError::Interface {
                        interface: iface.name.clone(),
                        reason: "roce:// interfaces run on the RDMA engine, not on kernel sockets"
                            .into(),
                    });
                }
            }
        }
        let connector = if tcp_interfaces.is_empty() {
            None
        } else {
            Some(
                tcp::Connector::spawn(tcp_interfaces).map_err(|source| EngineError::Spawn {
                    what: "socket connection",
                    source,
                })?,
            )
        };
        Ok(Self {
            interfaces,
            _connector: connector,
        })
    }

    fn interface(&self, port: PortIndex) -> Result<&Interface, EngineError> {
        super::interface_at(&self.interfaces, port)
    }
}

/// Raises the MTU of the kernel interface that has the interface's `local_addr` to the
/// planned one (from `max_payload_size`), never lowering it; a refusal is a warning with
/// the command that does it (larger datagrams are then fragmented by the kernel).
fn raise_mtu(iface: &SocketInterfacePlan) {
    let (Some(mtu), Some(local)) = (iface.mtu, iface.local) else {
        return;
    };
    if local.ip().is_unspecified() {
        return;
    }
    let netdev = match crate::netdev::with_address(local.ip()) {
        Ok(Some(n)) => n,
        Ok(None) => return, // the bind names the missing address
        Err(e) => {
            tracing::warn!(
                "interface `{}`: cannot list the kernel interfaces ({e})",
                iface.name
            );
            return;
        }
    };
    match crate::netdev::raise_mtu(&netdev, mtu) {
        Ok(had) if had < mtu => tracing::info!(
            "interface `{}`: kernel interface {netdev}'s MTU raised from {had} to {mtu} (max_payload_size)",
            iface.name
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            "interface `{}`: cannot raise kernel interface {netdev}'s MTU to {mtu} ({e}); datagrams above it are fragmented until `ip link set dev {netdev} mtu {mtu}`",
            iface.name
        ),
    }
}

/// Says where each RX queue receives: straight into its region, or into its staging
/// region for the RX stage to move on.
fn log_queues(iface: &SocketInterfacePlan, regions: &RegionSet) {
    for q in &iface.rx {
        tracing::info!(
            "interface `{}`: RX queue {} receives into `{}`",
            iface.name,
            q.id,
            regions.get(q.region).name()
        );
    }
}

impl Engine for SocketEngine {
    fn name(&self) -> &'static str {
        "socket"
    }

    fn rx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        let missing = EngineError::no_queue(port, Direction::Rx, queue);
        match self.interface(port)? {
            Interface::Udp(u) => u.rx_port(queue, counters).ok_or(missing),
            // TCP drops nothing on receive: the sender waits.
            Interface::Tcp(t) => t.rx_port(queue).ok_or(missing),
        }
    }

    fn tx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        let missing = EngineError::no_queue(port, Direction::Tx, queue);
        match self.interface(port)? {
            Interface::Udp(u) => u.tx_port(queue, counters).ok_or(missing),
            Interface::Tcp(t) => t.tx_port(queue, counters).ok_or(missing),
        }
    }

    /// An RX queue added to a UDP interface while it ran reads no socket.
    fn closes_live(&self, port: PortIndex, direction: Direction, queue: QueueId) -> bool {
        match self.interfaces.get(port.index()) {
            Some(Interface::Udp(u)) => direction == Direction::Rx && u.added_rx(queue),
            _ => false,
        }
    }

    /// UDP: RX queues added without a socket of their own (the rules steer to them), TX
    /// queues on the existing sockets. TCP's queues are connections: refused.
    fn open_queue(
        &self,
        port: PortIndex,
        direction: Direction,
        queue: QueueId,
    ) -> Result<(), EngineError> {
        let refused = |reason| EngineError::queue_not_opened(port, direction, queue, reason);
        match self.interface(port)? {
            Interface::Udp(u) => u.open_queue(direction, queue).map_err(refused),
            Interface::Tcp(_) => Err(refused(
                "a TCP interface's queues are its connections, made when it starts".into(),
            )),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::SOCKET
    }

    fn steering(&self) -> String {
        "software".into()
    }

    fn stamps_rx(&self, port: PortIndex) -> bool {
        matches!(self.interfaces.get(port.index()), Some(Interface::Udp(u)) if u.kernel_timestamps())
    }

    fn link(&self, port: PortIndex, direction: Direction, queue: QueueId) -> Option<Arc<Link>> {
        match self.interfaces.get(port.index())? {
            Interface::Udp(u) => u.link(direction, queue),
            Interface::Tcp(t) => t.link(direction, queue),
        }
    }
}

/// Lane of queue `id` among `ids` (configuration order), spread over `lanes`.
fn lane_of(ids: &[QueueSetup], id: QueueId, lanes: usize) -> Option<(usize, &QueueSetup)> {
    let k = ids.iter().position(|q| q.id == id)?;
    Some((k % lanes.max(1), &ids[k]))
}

/// Lane of queue `queue` of `direction`, among the interface's `rx`/`tx` queues.
fn lane_in(
    rx: &[QueueSetup],
    tx: &[QueueSetup],
    direction: Direction,
    queue: QueueId,
    lanes: usize,
) -> Option<usize> {
    let ids = match direction {
        Direction::Rx => rx,
        Direction::Tx => tx,
    };
    lane_of(ids, queue, lanes).map(|(k, _)| k)
}

/// The wire grid of a UDP interface: one ingress per lane.
fn grid(steering: &Arc<InterfaceSteering>, rx: &[QueueSetup], lanes: usize) -> WireGrid {
    let ids: Vec<QueueId> = rx.iter().map(|q| q.id).collect();
    WireGrid::new(steering, &ids, lanes)
}

/// `udp://ip:port` for messages.
fn udp_uri(a: SocketAddr) -> String {
    format!("udp://{a}")
}

/// The address a UDP socket is bound to.
fn bound(s: &UdpSocket) -> Option<SocketAddr> {
    s.local_addr().ok()
}

/// Server or client wording for messages.
fn side(mode: SocketMode) -> &'static str {
    match mode {
        SocketMode::Server => "server",
        SocketMode::Client => "client",
    }
}

/// A socket the kernel would not open where the plan puts it.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct SocketOpenError {
    /// What was asked of the kernel: `bind`, `listen on`.
    pub verb: &'static str,
    /// What is said when the kernel's reason is neither a port in use nor a foreign
    /// address: `open a UDP socket on`, `listen on`.
    pub otherwise: &'static str,
    /// The address, as a URI (`udp://IP:PORT`).
    pub uri: String,
    /// The kernel's error.
    pub source: std::io::Error,
}

impl SocketOpenError {
    fn describe(&self) -> String {
        let (verb, uri, e) = (self.verb, &self.uri, &self.source);
        match e.raw_os_error() {
            Some(libc::EADDRINUSE) => {
                format!("cannot {verb} {uri}: the port is in use by another socket ({e})")
            }
            Some(libc::EADDRNOTAVAIL) => {
                format!("cannot {verb} {uri}: the address is not on this machine ({e})")
            }
            _ => format!("cannot {} {uri}: {e}", self.otherwise),
        }
    }
}
