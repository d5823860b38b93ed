//! An RDMA connection that moves the core's [`Burst`]s: each packet is one RC message, sent
//! straight from its buffer and received straight into a buffer of the queue's region (our
//! regions are registered with the connection's protection domain; nothing is copied).
//!
//! Receives are posted from the RX region before the connection is handed over and are
//! replaced from the region's pool as they complete, so the receive window stays full while
//! the application holds what it received. A burst handed to `send` stays owned by the
//! connection until every one of its messages completed, then its buffers go back to their
//! pools.

use crate::burst::Burst;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::{RegionId, RegionSet};
use rdma::verbs::RemoteAccess::None as Local;
use rdma::verbs::{Completion, Connection, ExternalBuffer, Registration, VerbsError};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// Why a burst could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The send queue has no room for the whole burst now; try again after `poll`.
    #[error("the send queue is full")]
    Full(Burst),
    /// A packet is not in a registered region or has more than one segment.
    #[error("{0}")]
    Unsupported(String, Burst),
    /// The verbs layer failed.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
}

/// A connection that sends and receives bursts.
pub struct BurstConnection {
    /// Always `Some` until dropped (taken first on drop, so the QP is gone before the
    /// buffers it could still write are freed).
    conn: Option<Connection>,
    regions: Arc<RegionSet>,
    rx_region: RegionId,
    /// Registrations by region (kept alive as long as the connection; each holds the
    /// region set, so the memory outlives it whatever drops first).
    registered: BTreeMap<RegionId, RegionRegistration>,
    port: PortIndex,
    queue: QueueId,
    /// Receives to keep posted.
    recv_window: usize,
    /// RX-region buffers posted as receives.
    posted: std::collections::BTreeSet<u32>,
    /// Bursts being sent: the token of their last message, and the burst.
    in_flight: VecDeque<(u64, Burst)>,
    next_token: u64,
}

impl BurstConnection {
    /// Wraps an established connection (made with `own_receives: false`): registers the RX
    /// region and `tx_regions`, and posts `recv_window` receives from the RX region.
    pub fn new(
        conn: Connection,
        regions: Arc<RegionSet>,
        rx_region: RegionId,
        tx_regions: &[RegionId],
        (port, queue): (PortIndex, QueueId),
        recv_window: usize,
    ) -> Result<Self, VerbsError> {
        let mut registered = BTreeMap::new();
        for &r in tx_regions.iter().chain(std::iter::once(&rx_region)) {
            if let std::collections::btree_map::Entry::Vacant(e) = registered.entry(r) {
                e.insert(register(&conn, &regions, r)?);
            }
        }
        Self::with_registrations(
            conn,
            regions,
            rx_region,
            registered,
            (port, queue),
            recv_window,
        )
    }

    /// As [`BurstConnection::new`], with the regions already registered (see
    /// [`register`]); `registered` must hold `rx_region` and every region sends come from.
    pub(crate) fn with_registrations(
        conn: Connection,
        regions: Arc<RegionSet>,
        rx_region: RegionId,
        registered: BTreeMap<RegionId, RegionRegistration>,
        (port, queue): (PortIndex, QueueId),
        recv_window: usize,
    ) -> Result<Self, VerbsError> {
        if !registered.contains_key(&rx_region) {
            return Err(VerbsError::Call {
                what: "posting receives",
                detail: format!(
                    "region `{}` is not registered with the connection",
                    regions.get(rx_region).name()
                ),
            });
        }
        let mut c = Self {
            conn: Some(conn),
            regions,
            rx_region,
            registered,
            port,
            queue,
            recv_window,
            posted: Default::default(),
            in_flight: VecDeque::new(),
            next_token: 0,
        };
        c.refill_receives()?;
        Ok(c)
    }

    /// Posts receives until the window is full (as far as the region has free buffers).
    fn conn(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("connection present until drop")
    }

    fn refill_receives(&mut self) -> Result<(), VerbsError> {
        let want = self.recv_window - self.posted.len();
        if want == 0 {
            return Ok(());
        }
        let regions = self.regions.clone();
        let region = regions.get(self.rx_region);
        let mut idx = vec![0u32; want];
        let take = region.alloc_up_to(&mut idx);
        idx.truncate(take);
        if take == 0 {
            return Ok(());
        }
        let lkey = self.registered[&self.rx_region].lkey();
        let bufs: Vec<ExternalBuffer> = idx
            .iter()
            .map(|&i| ExternalBuffer {
                lkey,
                addr: region.buffer_addr(i),
                len: region.buf_size() as u32,
                token: i as u64,
            })
            .collect();
        if let Err(e) = self.conn().post_external_receives(&bufs) {
            region.free_bulk(&idx);
            return Err(e);
        }
        self.posted.extend(idx);
        Ok(())
    }

    /// Sends every packet of `burst` as one message (single-segment packets in registered
    /// regions). The connection owns the burst until all of it completed.
    pub fn send(&mut self, burst: Burst) -> Result<(), SendError> {
        if !burst.belongs_to(&self.regions) {
            return Err(SendError::Unsupported(
                "the burst was allocated from another data plane's memory regions".into(),
                burst,
            ));
        }
        if burst.is_empty() {
            return Ok(());
        }
        let mut bufs = Vec::with_capacity(burst.len());
        for (i, p) in burst.packets().iter().enumerate() {
            let segs = p.segments();
            if segs.len() != 1 {
                return Err(SendError::Unsupported(
                    format!(
                        "packet {i} has {} segments; RDMA sends take one",
                        segs.len()
                    ),
                    burst,
                ));
            }
            let Some(reg) = self.registered.get(&segs[0].region) else {
                return Err(SendError::Unsupported(
                    format!(
                        "packet {i} is in region `{}`, which this connection did not register",
                        self.regions.get(segs[0].region).name()
                    ),
                    burst,
                ));
            };
            bufs.push(ExternalBuffer {
                lkey: reg.lkey(),
                addr: burst.segment_addr(i, 0),
                len: segs[0].len,
                token: self.next_token + i as u64,
            });
        }
        if !self.conn().send_external(&bufs)? {
            return Err(SendError::Full(burst));
        }
        self.next_token += bufs.len() as u64;
        self.in_flight.push_back((self.next_token - 1, burst));
        Ok(())
    }

    /// Polls: returns the messages received since the last call as a burst of RX-region
    /// buffers (one packet each), frees sent bursts, and tops the receives up. An error
    /// completion ends the call with the error (see [`BurstConnection::poll_received`]
    /// for the messages that arrived before it).
    pub fn poll(&mut self) -> Result<Option<Burst>, VerbsError> {
        match self.poll_received() {
            (_, Some(e)) => Err(e),
            (b, None) => Ok(b),
        }
    }

    /// As [`BurstConnection::poll`], but the messages that arrived before an error
    /// completion come back with it, so nothing received is lost when the connection
    /// fails or the peer goes away (its flushed receives then complete with errors).
    pub fn poll_received(&mut self) -> (Option<Burst>, Option<VerbsError>) {
        let (received, error) = self.poll_inner();
        (received.filter(|b| !b.is_empty()), error)
    }

    fn poll_inner(&mut self) -> (Option<Burst>, Option<VerbsError>) {
        let mut received = Burst::empty(self.regions.clone(), self.port, self.queue, 64);
        let mut last_sent = None;
        let rx = self.rx_region;
        let conn = self.conn.as_mut().expect("connection present until drop");
        let polled = conn.poll_completions(|c| match c {
            Completion::ReceivedExternal { token, len } => {
                received.push_owned(rx, token as u32, len, 0);
            }
            Completion::SentExternal { token } => last_sent = Some(token),
            _ => {}
        });
        // What arrived is the burst's now, even if a later completion failed (its buffers
        // must not be freed again when the connection drops).
        for p in received.packets() {
            self.posted.remove(&p.segments()[0].index);
        }
        if let Err(e) = polled {
            return (Some(received), Some(e));
        }
        // RC completes sends in order: every burst up to the last completed token is done.
        if let Some(done) = last_sent {
            while self
                .in_flight
                .front()
                .is_some_and(|(last, _)| *last <= done)
            {
                self.in_flight.pop_front();
            }
        }
        let refilled = self.refill_receives().err();
        (Some(received), refilled)
    }

    /// Bursts still being sent.
    pub fn bursts_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Receives posted now.
    pub fn receives_posted(&self) -> usize {
        self.posted.len()
    }

    /// The underlying connection (disconnect, keys).
    pub fn connection(&self) -> &Connection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

/// A region's registration with a connection. It holds the region set, and is declared
/// before it, so the registration is gone before the memory can be: whatever is dropped
/// first (the connection, this, the plane), the NIC never keeps a key to freed memory.
pub(crate) struct RegionRegistration {
    registration: Registration,
    _memory: Arc<RegionSet>,
}

impl RegionRegistration {
    /// Local key for work requests.
    pub(crate) fn lkey(&self) -> u32 {
        self.registration.lkey()
    }
}

/// Registers region `r` with `conn`'s protection domain for local access only (connections
/// run SEND/RECV, so a peer can neither READ nor WRITE a region): GPU memory through a dma-buf where
/// the driver exports one (then `ibv_reg_dmabuf_mr`), otherwise, and for host memory, with
/// `ibv_reg_mr` (GPU memory then needs nvidia-peermem).
pub(crate) fn register(
    conn: &Connection,
    regions: &Arc<RegionSet>,
    r: RegionId,
) -> Result<RegionRegistration, VerbsError> {
    register_memory(conn, regions, r).map(|registration| RegionRegistration {
        registration,
        _memory: regions.clone(),
    })
}

fn register_memory(
    conn: &Connection,
    regions: &RegionSet,
    r: RegionId,
) -> Result<Registration, VerbsError> {
    let (addr, len) = regions.get(r).extent();
    #[cfg(feature = "cuda")]
    if let Some(export) = regions.get(r).export_dmabuf() {
        use std::os::fd::AsRawFd;
        let dmabuf = match export {
            Ok(d) => {
                // SAFETY: the region set owns the exported memory and `register` ties it to
                // the registration; the descriptor is closed when `d` drops, after
                // registration.
                let reg =
                    unsafe { conn.register_dmabuf(d.fd.as_raw_fd(), d.offset, len, addr, Local) };
                match reg {
                    Ok(reg) => return Ok(reg),
                    Err(e) => format!("dma-buf registration failed ({e})"),
                }
            }
            Err(e) => format!("no dma-buf ({e})"),
        };
        // SAFETY: as above; the memory outlives the registration.
        return unsafe { conn.register(addr, len, Local) }.map_err(|e| VerbsError::Call {
            what: "registering GPU memory",
            detail: format!(
                "region `{}`: {dmabuf}; ibv_reg_mr: {e} (load nvidia-peermem, or use a NIC and driver with dma-buf support)",
                regions.get(r).name()
            ),
        });
    }
    let _ = (regions, r);
    // SAFETY: `register` ties the region set to the registration (a `RegionRegistration`
    // that drops the registration first), so the memory outlives it.
    unsafe { conn.register(addr, len, Local) }
}

impl Drop for BurstConnection {
    fn drop(&mut self) {
        // The QP goes first: after that nothing can write into the posted buffers.
        drop(self.conn.take());
        let posted: Vec<u32> = std::mem::take(&mut self.posted).into_iter().collect();
        self.regions.get(self.rx_region).free_bulk(&posted);
        // Bursts still in flight drop with `self`, returning their buffers.
    }
}
