//! Reliable-connected queue pairs over real verbs and rdma_cm (sideway, which loads
//! rdma-core at run time, so a binary without RDMA hardware still starts and reports "no
//! RDMA device found").
//!
//! A [`Connection`] owns its protection domain, one completion queue per direction, the
//! queue pair and a registered message area: `recv_depth` receive slots and `send_depth`
//! send slots of `message_size` bytes. Receives are posted before the peer can send (the
//! server posts them before it accepts, the client before it confirms the connection), and
//! every completed receive is reposted at once, so the receive window always covers the
//! peer's send window. A completion with an error status is returned as a
//! [`CompletionError`] naming the work request; nothing is dropped silently.

use crate::cm::{Client, CmAction, CmEvent, RetryPolicy};
use rdma_mummy_sys::{ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr, ibv_query_qp};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::completion::{GenericCompletionQueue, WorkCompletionStatus};
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair, QueuePairState, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, Event, EventChannel, EventType, GetEventErrorKind, Identifier, PortSpace,
};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod connection;
mod listen;
mod transfer;

pub use connection::Connection;
use listen::*;
pub use listen::{Listener, ListenerEvent, Request};
use transfer::*;
pub use transfer::{Completion, ExternalBuffer, Polled, Registration, RemoteWindow};

/// Longest wait for address or route resolution in one connection attempt.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of the verbs layer.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// No RDMA device on this machine (or rdma-core is not installed).
    #[error(
        "no RDMA device found ({0}); install rdma-core and load a driver (a NIC's, or Soft-RoCE: rdma link add rxe0 type rxe netdev IFACE)"
    )]
    NoDevice(String),
    /// An rdma_cm or verbs call failed.
    #[error("{what}: {detail}")]
    Call {
        /// The step that failed.
        what: &'static str,
        /// The library's error.
        detail: String,
    },
    /// rdma_cm reported an unexpected event or a failure.
    #[error("{what}: rdma_cm reported {event} (status {status})")]
    Event {
        /// What we were waiting for.
        what: &'static str,
        /// What came instead.
        event: String,
        /// rdma_cm's status.
        status: i32,
    },
    /// No server accepted within the connect budget.
    #[error("no server accepted within {seconds} s (last attempt: {last})")]
    GaveUp {
        /// The budget.
        seconds: f64,
        /// The last attempt's error.
        last: Box<VerbsError>,
    },
    /// The caller asked to stop (a signal) while waiting.
    #[error("{0}: stopped")]
    Stopped(&'static str),
    /// Nothing happened in time.
    #[error("{0}: timed out")]
    Timeout(&'static str),
    /// A work request completed with an error.
    #[error(transparent)]
    Completion(#[from] CompletionError),
    /// A connection request from a peer the server does not admit (`allowed_peers`); it
    /// was rejected before any memory was registered for it.
    #[error("connection request from {peer} refused: not in allowed_peers")]
    PeerRefused {
        /// The peer's address.
        peer: IpAddr,
    },
}

/// The error and its chain of causes as one line.
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn call<E: std::error::Error>(what: &'static str) -> impl FnOnce(E) -> VerbsError {
    move |e| VerbsError::Call {
        what,
        detail: describe(&e),
    }
}

/// The kind inside a sideway error, found through its source chain.
fn cause<'a, E: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(k) = c.downcast_ref::<E>() {
            return Some(k);
        }
        cur = c.source();
    }
    None
}

/// A work request that completed with an error status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} work request {wr_id} completed with status {status} ({status_text}), vendor error {vendor_err}"
)]
pub struct CompletionError {
    /// `send` or `recv`.
    pub kind: &'static str,
    /// The work request id (our slot number).
    pub wr_id: u64,
    /// ibv_wc_status.
    pub status: u32,
    /// Its name.
    pub status_text: String,
    /// The device's own code.
    pub vendor_err: u32,
}

/// Checks that at least one RDMA device can be listed.
pub fn device_present() -> Result<usize, VerbsError> {
    let list = DeviceList::new().map_err(|e| VerbsError::NoDevice(e.to_string()))?;
    let n = list.iter().count();
    if n == 0 {
        return Err(VerbsError::NoDevice("the device list is empty".into()));
    }
    Ok(n)
}

/// What a peer may do to memory we register, beyond our own local use. Memory is
/// registered with the least of these its use needs: message slots and buffers that are
/// only sent from or received into get [`RemoteAccess::None`], so a peer that learns or
/// guesses their key still cannot READ or WRITE them (its request fails with a remote
/// access error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemoteAccess {
    /// Local access only (SEND/RECV).
    #[default]
    None,
    /// Peers may RDMA WRITE (and WRITE with immediate) into it.
    Write,
    /// Peers may RDMA READ it.
    Read,
    /// Peers may READ and WRITE.
    ReadWrite,
}

impl RemoteAccess {
    fn flags(self) -> AccessFlags {
        let local = AccessFlags::LocalWrite;
        match self {
            RemoteAccess::None => local,
            RemoteAccess::Write => local | AccessFlags::RemoteWrite,
            RemoteAccess::Read => local | AccessFlags::RemoteRead,
            RemoteAccess::ReadWrite => local | AccessFlags::RemoteWrite | AccessFlags::RemoteRead,
        }
    }
}

/// Queue and flow-control settings of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionParams {
    /// Bytes per message slot.
    pub message_size: usize,
    /// Send slots (messages in flight from us).
    pub send_depth: u32,
    /// Receive slots; must cover the peer's `send_depth` so its sends never meet an empty
    /// receive queue.
    pub recv_depth: u32,
    /// RNR retry count sent to the peer (7: retry forever).
    pub rnr_retry: u8,
    /// How long the peer waits before resending when we had no receive posted (IB
    /// encoding: 12 = 0.64 ms; rdma_cm leaves 0, which means 655 ms).
    pub min_rnr_timer: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// Bytes of the window the peer may WRITE into and READ from.
    pub window_size: usize,
    /// What the peer may do to the window: nothing by default, so a connection for
    /// SEND/RECV exposes no memory. The window's key leaves the process (in
    /// [`Connection::exchange_keys`]) only when this grants something.
    pub window_access: RemoteAccess,
    /// Post the connection's own receive slots (off when the caller posts receives into
    /// its own registered buffers with [`Connection::post_external_receives`]).
    pub own_receives: bool,
    /// How long connection steps may take.
    pub timeout: Duration,
}

impl Default for ConnectionParams {
    fn default() -> Self {
        Self {
            message_size: 4096,
            send_depth: 64,
            recv_depth: 64,
            rnr_retry: 7,
            min_rnr_timer: 12,
            retry_count: 7,
            window_size: 64 * 1024,
            window_access: RemoteAccess::None,
            own_receives: true,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Retry and RNR settings of a QP, as the device reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSettings {
    /// Minimum RNR NAK timer (IB encoding).
    pub min_rnr_timer: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry_count: u8,
}

/// rdma_cm's status for a reject the server's application chose (`rdma_reject`: the
/// consumer-defined reason); other rejects (no listener yet: invalid service id) mean "try
/// again".
pub const REJECTED_BY_SERVER: i32 = 28;

fn is_server_reject(e: &VerbsError, status: i32) -> bool {
    matches!(e, VerbsError::Event { event, .. } if event == "Rejected")
        && status == REJECTED_BY_SERVER
}

/// Waits for the next event on `channel` (non-blocking channel, polled) up to `deadline`.
fn next_event(
    channel: &Arc<EventChannel>,
    deadline: Instant,
    what: &'static str,
    stop: &dyn Fn() -> bool,
) -> Result<Event, VerbsError> {
    loop {
        match channel.get_cm_event() {
            Ok(ev) => return Ok(ev),
            Err(e)
                if matches!(
                    cause::<GetEventErrorKind>(&e),
                    Some(GetEventErrorKind::NoEvent)
                ) => {}
            Err(e) => return Err(call(what)(e)),
        }
        if stop() {
            return Err(VerbsError::Stopped(what));
        }
        if Instant::now() >= deadline {
            return Err(VerbsError::Timeout(what));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn expect_event(ev: Event, want: EventType, what: &'static str) -> Result<Event, VerbsError> {
    if ev.event_type() == want {
        Ok(ev)
    } else {
        let (event, status) = (format!("{:?}", ev.event_type()), ev.status());
        let _ = ev.ack();
        Err(VerbsError::Event {
            what,
            event,
            status,
        })
    }
}

/// A non-blocking event channel and an rdma_cm identifier on it (TCP port space).
fn new_id() -> Result<(Arc<EventChannel>, Arc<Identifier>), VerbsError> {
    let channel = EventChannel::new().map_err(call("rdma_create_event_channel"))?;
    channel
        .set_nonblocking(true)
        .map_err(call("event channel non-blocking"))?;
    let id = channel
        .create_id(PortSpace::Tcp)
        .map_err(call("rdma_create_id"))?;
    Ok((channel, id))
}

fn key_of(id: &Arc<Identifier>) -> u64 {
    Arc::as_ptr(id) as u64
}

/// The name of an ibv_wc_status value.
pub fn status_name(status: u32) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        4 => "local protection error",
        5 => "work request flushed",
        6 => "memory window bind error",
        7 => "bad response",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry counter exceeded",
        13 => "RNR retry counter exceeded",
        _ => "other error",
    }
}
