//! A connection's RX and TX ports on a worker, and `establish`: a made connection's
//! regions registered (or staged where the NIC cannot reach them) and its ports built.

use super::*;
use crate::descriptor::{PortIndex, QueueId};
use crate::rdma_conn::RegionRegistration;

/// Receive side: polls the connection's completions (also those of its sends).
pub(super) struct RdmaRx {
    pub(super) live: Arc<Mutex<Live>>,
    pub(super) state: Arc<ConnState>,
    /// Received messages not yet taken by the worker's burst.
    pub(super) pending: Option<Burst>,
    /// A client watches its own event channel for the peer's disconnect.
    pub(super) watch_own_events: bool,
    pub(super) idle: u32,
    /// Closed, and a poll since found nothing more: everything received was taken.
    pub(super) drained: bool,
}

impl RdmaRx {
    pub(super) fn hand_over(&mut self, into: &mut Burst, max: usize) -> usize {
        let Some(p) = &mut self.pending else {
            return 0;
        };
        let n = into.take_from(p, max);
        if p.is_empty() {
            self.pending = None;
        }
        n
    }
}

impl RxPort for RdmaRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        let mut got = self.hand_over(into, max);
        if got == max || self.drained {
            return got;
        }
        // Polled also after the connection closed: messages that arrived before it are
        // still in the completion queue, ahead of the flushed receives.
        let closing = self.state.is_closed();
        let mut live = lock(&self.live);
        let (received, error) = live.conn.poll_received();
        match received {
            Some(b) => {
                self.idle = 0;
                self.state
                    .received_packets
                    .fetch_add(b.len() as u64, Ordering::Relaxed);
                self.state
                    .received_bytes
                    .fetch_add(b.bytes(), Ordering::Relaxed);
                drop(live);
                self.pending = Some(b);
                got += self.hand_over(into, max - got);
            }
            None if closing => self.drained = true,
            None => {
                self.idle = self.idle.wrapping_add(1);
                if self.watch_own_events
                    && self.idle.is_multiple_of(EVENT_CHECK_EVERY)
                    && live.conn.connection().peer_disconnected()
                {
                    self.state.close();
                }
            }
        }
        if let Some(e) = error {
            // After a close, error completions are the flushed receives, not a failure.
            if !closing {
                self.state.error(format!("error completion: {e}"));
            }
            self.state.close();
        }
        got
    }

    fn closed(&self) -> bool {
        self.drained && self.pending.is_none()
    }
}

/// Send side: posts each burst's packets as SENDs; the connection holds the burst until
/// its completions, which the receive side polls.
pub(super) struct RdmaTx {
    pub(super) live: Arc<Mutex<Live>>,
    pub(super) state: Arc<ConnState>,
}

impl TxPort for RdmaTx {
    fn transmit(&mut self, burst: Burst) -> Option<Burst> {
        if self.state.is_closed() {
            // Queued before the connection ended: counted, and the buffers go back.
            self.state
                .unsent_packets
                .fetch_add(burst.len() as u64, Ordering::Relaxed);
            return None;
        }
        let (n, bytes) = (burst.len() as u64, burst.bytes());
        match lock(&self.live).conn.send(burst) {
            Ok(()) => {
                self.state.sent_packets.fetch_add(n, Ordering::Relaxed);
                self.state.sent_bytes.fetch_add(bytes, Ordering::Relaxed);
                None
            }
            Err(SendError::Full(b)) => Some(b),
            Err(SendError::Unsupported(why, _)) => {
                self.state.error(format!("burst dropped: {why}"));
                None
            }
            Err(SendError::Verbs(e)) => {
                self.state.error(e.to_string());
                self.state.close();
                None
            }
        }
    }

    fn closed(&self) -> bool {
        self.state.is_closed()
    }
}

/// Wraps an established connection of `slot` of interface `position` into the ports the
/// plane runs. The slot is released when they are retired (or when this fails).
pub(super) fn establish(
    shared: &Arc<Shared>,
    position: usize,
    slot: usize,
    conn: Connection,
    watch_own_events: bool,
) -> Result<(Established, Arc<ConnState>), VerbsError> {
    shared.live.fetch_add(1, Ordering::AcqRel);
    let guard = SlotGuard {
        shared: shared.clone(),
        interface: position,
        slot,
    };
    let iface = &shared.interfaces[position];
    let q = &iface.slots[slot];
    let qp = conn.qp_settings()?;
    let regions = &shared.regions;
    let path = iface.roce.gpu_memory_path;
    let rx = reach(
        q.rx_staging.as_ref(),
        path,
        || register(&conn, regions, q.rx_region),
        |s| register(&conn, regions, s.region),
    )?;
    let tx = match q.tx_region {
        // One region for both: registered once, for the receives.
        Some(t) if t == q.rx_region && matches!(rx, Reach::Direct(_)) => None,
        Some(t) => Some(reach(
            q.tx_staging.as_ref(),
            path,
            || register(&conn, regions, t),
            |s| register(&conn, regions, s.region),
        )?),
        None => None,
    };
    let mut registered = BTreeMap::new();
    let lands = Landing {
        iface,
        slot,
        q,
        regions,
    };
    let (rx_region, rx_stage) = lands.rx(rx, &mut registered)?;
    let tx_stage = lands.tx(tx, &mut registered)?;
    let conn = BurstConnection::with_registrations(
        conn,
        shared.regions.clone(),
        rx_region,
        registered,
        (PortIndex(iface.index as u16), QueueId(slot as u16)),
        q.recv_window,
    )?;
    let live = Arc::new(Mutex::new(Live { conn, _slot: guard }));
    let state = Arc::new(ConnState::new());
    let established = Established {
        interface: iface.index,
        interface_name: iface.name.clone(),
        slot,
        core: q.core,
        tx_regions: q.tx_region.into_iter().collect(),
        rx: Box::new(RdmaRx {
            live: live.clone(),
            state: state.clone(),
            pending: None,
            watch_own_events,
            idle: 0,
            drained: false,
        }),
        tx: Box::new(RdmaTx {
            live,
            state: state.clone(),
        }),
        state: state.clone(),
        qp,
        rx_stage,
        tx_stage,
    };
    Ok((established, state))
}

/// Where a connection's receives land and its sends leave from, said in the log as the
/// registrations are kept.
struct Landing<'a> {
    iface: &'a RdmaInterface,
    slot: usize,
    q: &'a SlotPlan,
    regions: &'a Arc<RegionSet>,
}

impl Landing<'_> {
    fn name(&self, r: RegionId) -> String {
        self.regions.get(r).name().to_owned()
    }

    /// The region receives land in (the queue's, or its staging region) and the RX stage
    /// that moves them from staging into the queue's layout.
    fn rx(
        &self,
        rx: Reach<RegionRegistration>,
        registered: &mut BTreeMap<RegionId, RegionRegistration>,
    ) -> Result<(RegionId, Option<crate::stage::RxStage>), VerbsError> {
        let (iface, slot, q, regions) = (self.iface, self.slot, self.q, self.regions);
        let layout: Vec<String> = q.rx_layout.iter().map(|&r| self.name(r)).collect();
        match rx {
            Reach::Direct(reg) => {
                if regions.get(q.rx_region).host_accessible() {
                    tracing::debug!(
                        "interface `{}` connection {slot}: receives land in `{}`",
                        iface.name,
                        layout[0]
                    );
                } else {
                    tracing::info!(
                        "interface `{}` connection {slot}: receives land in GPU memory `{}` (the NIC registered it)",
                        iface.name,
                        layout[0]
                    );
                }
                registered.insert(q.rx_region, reg);
                Ok((q.rx_region, None))
            }
            Reach::Staged(reg, why) => {
                let s = q
                    .rx_staging
                    .as_ref()
                    .expect("staged only with a staging region");
                tracing::info!(
                    "interface `{}` connection {slot}: receives land in `{}` and the RX stage moves them into `{}`: {why}",
                    iface.name,
                    self.name(s.region),
                    layout.join("` + `")
                );
                registered.insert(s.region, reg);
                Ok((s.region, Some(stage(regions, &q.rx_layout, &s.stage)?)))
            }
        }
    }

    /// The stage that moves sends into the staging region, where the NIC cannot read the
    /// queue's region itself.
    fn tx(
        &self,
        tx: Option<Reach<RegionRegistration>>,
        registered: &mut BTreeMap<RegionId, RegionRegistration>,
    ) -> Result<Option<crate::stage::RxStage>, VerbsError> {
        let (iface, slot, q, regions) = (self.iface, self.slot, self.q, self.regions);
        Ok(match (tx, q.tx_region) {
            (Some(Reach::Direct(reg)), Some(t)) => {
                if !regions.get(t).host_accessible() {
                    tracing::info!(
                        "interface `{}` connection {slot}: sends leave GPU memory `{}` (the NIC registered it)",
                        iface.name,
                        self.name(t)
                    );
                }
                registered.insert(t, reg);
                None
            }
            (Some(Reach::Staged(reg, why)), Some(t)) => {
                let s = q
                    .tx_staging
                    .as_ref()
                    .expect("staged only with a staging region");
                tracing::info!(
                    "interface `{}` connection {slot}: sends are staged out of `{}` into `{}` before the NIC reads them: {why}",
                    iface.name,
                    self.name(t),
                    self.name(s.region)
                );
                registered.insert(s.region, reg);
                Some(stage(regions, &[s.region], &s.stage)?)
            }
            _ => None,
        })
    }
}

/// How one side of a connection reaches the application's region.
#[derive(Debug, PartialEq)]
pub(super) enum Reach<R> {
    /// The NIC reads or writes it: its registration.
    Direct(R),
    /// Through the slot's host staging region: its registration, and why.
    Staged(R, String),
}

/// Decides how one side of a slot reaches its region, registering what it uses: `direct`
/// registers the application's region, `staged` the staging region. Without staging the
/// side is direct; a split, or `gpu_memory_path: staged`, always stages; otherwise (GPU
/// memory, `auto`) a direct registration is tried first and its failure is the reason to
/// stage.
pub(super) fn reach<R>(
    staging: Option<&SlotStaging>,
    path: GpuMemoryPath,
    direct: impl FnOnce() -> Result<R, VerbsError>,
    staged: impl FnOnce(&SlotStaging) -> Result<R, VerbsError>,
) -> Result<Reach<R>, VerbsError> {
    let Some(s) = staging else {
        return direct().map(Reach::Direct);
    };
    if s.always {
        let why = if s.stage.split_header_bytes.is_some() {
            "the queue splits headers from payload, and the NIC writes a message into one buffer"
        } else if path == GpuMemoryPath::Staged {
            "roce_config.gpu_memory_path is staged"
        } else {
            "the slot is always staged"
        };
        return staged(s).map(|r| Reach::Staged(r, why.to_owned()));
    }
    match direct() {
        Ok(r) => Ok(Reach::Direct(r)),
        Err(e) => {
            let why = format!(
                "the NIC cannot register the GPU memory ({e}); set roce_config.gpu_memory_path: direct to fail instead"
            );
            staged(s).map(|r| Reach::Staged(r, why))
        }
    }
}

/// The stage between a slot's staging region and `targets`.
pub(super) fn stage(
    regions: &Arc<RegionSet>,
    targets: &[RegionId],
    plan: &crate::plan::StagePlan,
) -> Result<crate::stage::RxStage, VerbsError> {
    crate::stage::RxStage::new(regions, targets, crate::plan::rdma::CONNECTION_BURST, plan).map_err(
        |e| VerbsError::Call {
            what: "setting up the connection's GPU stage",
            detail: e.to_string(),
        },
    )
}
