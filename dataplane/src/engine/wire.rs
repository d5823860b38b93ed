//! Software flow steering between the point where frames enter an interface (an
//! *ingress*) and its RX queues, shared by every engine that steers in software: the
//! software loopback (ingress: its TX queues) and the DPDK engine when the device cannot
//! program the rules with rte_flow (ingress: the device's RX queues).
//!
//! Each (RX queue, ingress) pair has its own wire, a bounded queue of bursts with one
//! producer and one consumer, so pieces from one ingress stay in order and rule epochs only
//! grow along a wire. An ingress classifies each frame with the interface's current rules
//! and pushes one piece per RX queue; an RX queue pulls pieces from all of its wires in
//! turn and never mixes two epochs in one burst.
//!
//! Frames in GPU memory (a generator writing them there) are classified by their first
//! [`DEVICE_HEAD_BYTES`] bytes, which one GPU launch per burst copies out, as a NIC reads
//! the headers it steers by.

#![forbid(unsafe_code)]

use crate::burst::{Burst, Frames};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::RegionSet;
use crate::stats::{DropReason, QueueCounters};
use crate::steering::{Classifier, EpochAck, InterfaceSteering, Verdict, VerdictMemo};
use crossbeam_queue::ArrayQueue;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Pieces in flight per (RX queue, ingress) wire.
const WIRE_BURSTS: usize = 32;
/// Queue ids are below 64 (config limit), so a table maps id to RX index.
const MAX_QUEUE_IDS: usize = 64;
const NO_QUEUE: u8 = u8::MAX;
/// Bytes of a GPU-memory frame the rules see: Ethernet, two VLAN tags, IPv4 with options,
/// UDP and 18 bytes of payload.
pub const DEVICE_HEAD_BYTES: u32 = 128;

type Wire = Arc<ArrayQueue<Burst>>;

/// The wires of one interface: one per (RX queue, ingress point).
pub struct WireGrid {
    steering: Arc<InterfaceSteering>,
    shared: Arc<GridShared>,
}

/// What the grid's ingress points and receivers read their wires from: the layout, and a
/// version that grows with it (RX queues and ingress points added while the plane runs),
/// read once per burst so that each picks up new wires at a burst boundary. On cache lines
/// of its own: read on every burst, written only when the grid grows.
#[repr(align(128))]
struct GridShared {
    layout: Mutex<Layout>,
    version: AtomicU64,
}

struct Layout {
    /// RX queue ids: the first ones lowest first, added ones after them.
    rx_ids: Vec<QueueId>,
    /// `wires[rx][ingress]`.
    wires: Vec<Vec<Wire>>,
    /// Acknowledgement slot of each ingress point.
    ingress_acks: Vec<EpochAck>,
}

impl GridShared {
    fn layout(&self) -> std::sync::MutexGuard<'_, Layout> {
        self.layout.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WireGrid {
    /// Wires from `ingress_points` ingress points to the RX queues `rx_ids`.
    pub fn new(
        steering: &Arc<InterfaceSteering>,
        rx_ids: &[QueueId],
        ingress_points: usize,
    ) -> Self {
        let mut rx_ids = rx_ids.to_vec();
        rx_ids.sort_unstable();
        let layout = Layout {
            wires: rx_ids
                .iter()
                .map(|_| (0..ingress_points).map(|_| new_wire()).collect())
                .collect(),
            ingress_acks: (0..ingress_points).map(|_| steering.register()).collect(),
            rx_ids,
        };
        Self {
            steering: steering.clone(),
            shared: Arc::new(GridShared {
                layout: Mutex::new(layout),
                version: AtomicU64::new(0),
            }),
        }
    }

    /// Adds RX queue `queue` to the running grid: a wire from every ingress point, which
    /// each takes at its next burst. The rules steer to it only once they name it. The
    /// caller (the plan) makes sure no running queue has the id: a removed queue's wires
    /// are reused.
    pub fn add_rx_queue(&self, queue: QueueId) -> Result<(), String> {
        let mut l = self.shared.layout();
        if l.rx_ids.contains(&queue) {
            // A queue removed earlier: its wires are empty, and the new receiver takes
            // them over.
            return Ok(());
        }
        if queue.index() >= MAX_QUEUE_IDS {
            return Err(format!(
                "RX queue {queue}: ids go up to {}",
                MAX_QUEUE_IDS - 1
            ));
        }
        let ingress_points = l.ingress_acks.len();
        l.rx_ids.push(queue);
        l.wires
            .push((0..ingress_points).map(|_| new_wire()).collect());
        self.shared.version.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Adds an ingress point to the running grid (a TX queue of the software loopback):
    /// a wire to every RX queue, which each takes at its next empty burst. Returns its
    /// index for [`WireGrid::ingress`].
    pub fn add_ingress(&self) -> usize {
        let mut l = self.shared.layout();
        for row in &mut l.wires {
            row.push(new_wire());
        }
        let ack = self.steering.register();
        // It starts with the rules in force, so no change waits for its first burst.
        ack.store(self.steering.epoch(), Ordering::Release);
        l.ingress_acks.push(ack);
        self.shared.version.fetch_add(1, Ordering::Release);
        l.ingress_acks.len() - 1
    }

    /// The sending end of ingress point `index`; dropped frames are counted on `counters`.
    pub fn ingress(
        &self,
        index: usize,
        regions: &Arc<RegionSet>,
        port: PortIndex,
        counters: Arc<QueueCounters>,
    ) -> Ingress {
        let mut ingress = Ingress {
            regions: regions.clone(),
            port,
            steering: self.steering.clone(),
            grid: self.shared.clone(),
            version: u64::MAX,
            index,
            wires: Vec::new(),
            rx_ids: Vec::new(),
            index_of: [NO_QUEUE; MAX_QUEUE_IDS],
            ack: self.shared.layout().ingress_acks[index].clone(),
            acked: 0,
            counters,
            pieces: Vec::new(),
            routes: Vec::new(),
            memo: VerdictMemo::default(),
            #[cfg(feature = "cuda")]
            heads: Default::default(),
        };
        ingress.follow_layout();
        ingress
    }

    /// The receiving end for RX queue `queue`, or `None` if the interface has no such queue.
    pub fn receiver(&self, queue: QueueId) -> Option<WireReceiver> {
        let row = self
            .shared
            .layout()
            .rx_ids
            .iter()
            .position(|&id| id == queue)?;
        let mut receiver = WireReceiver {
            grid: self.shared.clone(),
            version: u64::MAX,
            row,
            wires: Vec::new(),
            next: 0,
            steering: self.steering.clone(),
            ack: self.steering.register(),
            boundary: false,
        };
        receiver.follow_layout();
        Some(receiver)
    }
}

fn new_wire() -> Wire {
    Arc::new(ArrayQueue::new(WIRE_BURSTS))
}

/// Where frames enter an interface: classifies them and feeds the RX queues' wires.
pub struct Ingress {
    regions: Arc<RegionSet>,
    port: PortIndex,
    steering: Arc<InterfaceSteering>,
    grid: Arc<GridShared>,
    /// The grid's layout version its wires are from.
    version: u64,
    /// Its index among the grid's ingress points.
    index: usize,
    /// This ingress point's wire to each RX queue, by RX index.
    wires: Vec<Wire>,
    rx_ids: Vec<QueueId>,
    index_of: [u8; MAX_QUEUE_IDS],
    ack: EpochAck,
    acked: u64,
    /// Where frames without a flow or with broken headers are counted (the owning worker
    /// is their only writer).
    counters: Arc<QueueCounters>,
    /// Per-RX-queue pieces of the burst being steered (kept to reuse the allocation).
    pieces: Vec<Burst>,
    /// Where each packet of the burst being steered goes: (RX index, flow id), or `None`
    /// when it is dropped (kept to reuse the allocation).
    routes: Vec<Option<(usize, u32)>>,
    /// The last frame's verdict, for the next frames of its stream.
    memo: VerdictMemo,
    /// The first bytes of frames in GPU memory, read by the GPU for the rules.
    #[cfg(feature = "cuda")]
    heads: crate::stage::DeviceDigest,
}

impl Ingress {
    /// Takes the grid's wires again when RX queues were added (one load per burst).
    #[inline]
    fn follow_layout(&mut self) {
        let version = self.grid.version.load(Ordering::Acquire);
        if version == self.version {
            return;
        }
        let l = self.grid.layout();
        self.wires = l.wires.iter().map(|row| row[self.index].clone()).collect();
        self.rx_ids = l.rx_ids.clone();
        self.index_of = [NO_QUEUE; MAX_QUEUE_IDS];
        for (i, &id) in self.rx_ids.iter().enumerate() {
            self.index_of[id.index()] = i as u8;
        }
        self.pieces = Vec::with_capacity(self.rx_ids.len());
        self.version = version;
    }

    /// True when every wire can take one more piece. This ingress is the only producer on
    /// its wires, so the answer stays true until it pushes.
    pub fn has_room(&self) -> bool {
        !self.wires.iter().any(|w| w.is_full())
    }

    fn acknowledge(&mut self, epoch: u64) {
        if epoch != self.acked {
            self.acked = epoch;
            self.ack.store(epoch, Ordering::Release);
        }
    }

    /// Classifies every frame of `burst` and hands it to its RX queue. Returns the burst
    /// untouched when a wire is full.
    pub fn steer(&mut self, burst: Burst) -> Option<Burst> {
        #[cfg(feature = "cuda")]
        if !burst.is_empty() && burst.data(0, 0).is_none() {
            return self.steer_device_frames(burst);
        }
        let mut memo = self.memo;
        let left = self.steer_by(burst, None, |rules, b, i| match b.get(i) {
            Some(frame) => memo.classify(rules, frame),
            None => Verdict::NoFlow,
        });
        self.memo = memo;
        left
    }

    /// [`Ingress::steer`] for frames in GPU memory: their heads are copied out first,
    /// unless the rules send everything to one queue anyway.
    #[cfg(feature = "cuda")]
    fn steer_device_frames(&mut self, burst: Burst) -> Option<Burst> {
        if !self.has_room() {
            return Some(burst);
        }
        if self.steering.rules().trivial_queue().is_some() {
            return self.steer_by(burst, None, |_, _, _| Verdict::NoFlow);
        }
        let mut heads = std::mem::take(&mut self.heads);
        let read = heads.run(&burst, 0, u32::MAX, (DEVICE_HEAD_BYTES, 0));
        let per = DEVICE_HEAD_BYTES as usize;
        let out = match read {
            Ok(()) => self.steer_by(burst, None, |rules, b, i| {
                let len = b.burst().packets()[i].len().min(per);
                rules.classify(&heads.digests[i * per..i * per + len])
            }),
            Err(e) => {
                // Counted as frames with no flow; the reason goes to the log at most once
                // a second.
                static WARN: crate::stats::WarnLimiter = crate::stats::WarnLimiter::new();
                if let Some(held) = WARN.allow() {
                    tracing::warn!(
                        "reading the headers of {} GPU frames failed: {e}{}",
                        burst.len(),
                        crate::stats::WarnLimiter::note(held)
                    );
                }
                self.steer_by(burst, None, |_, _, _| Verdict::NoFlow)
            }
        };
        self.heads = heads;
        out
    }

    /// As [`Ingress::steer`] for datagrams a kernel socket of RX queue `own` received
    /// (`sources[i]` sent packet `i`, to `local`): the rules see their addresses and
    /// payload. Without rules the packets stay on `own`, which the kernel chose
    /// (SO_REUSEPORT spreads flows over the queues' sockets).
    pub fn steer_datagrams(
        &mut self,
        burst: Burst,
        own: QueueId,
        sources: &[SocketAddr],
        local: SocketAddr,
    ) -> Option<Burst> {
        self.steer_by(burst, Some(own), |rules, b, i| match b.get(i) {
            Some(payload) => rules.classify_datagram(sources[i], local, payload),
            None => Verdict::NoFlow,
        })
    }

    fn steer_by(
        &mut self,
        mut burst: Burst,
        own: Option<QueueId>,
        mut classify: impl FnMut(&Classifier, &Frames<'_>, usize) -> Verdict,
    ) -> Option<Burst> {
        if !self.has_room() {
            return Some(burst);
        }
        let rules = self.steering.rules();
        // After the rules: rules that name an added RX queue were published after its
        // wires, so this sees them.
        self.follow_layout();
        let epoch = rules.epoch();
        let whole = rules
            .trivial_queue()
            .map(QueueId)
            .or(own.filter(|_| rules.spreads_everything()));
        if let Some(queue) = whole {
            let rx = self.index_of[queue.index()] as usize;
            burst.set_steering_epoch(epoch);
            if let Err(b) = self.wires[rx].push(burst) {
                return Some(b);
            }
        } else {
            let rules_now: &Classifier = &rules;
            let (mut no_flow, mut malformed) = (0u64, 0u64);
            let mut routes = std::mem::take(&mut self.routes);
            routes.clear();
            let frames = burst.frames();
            routes.extend(
                (0..burst.len()).map(|i| match classify(rules_now, &frames, i) {
                    Verdict::Deliver { queue, flow_id } => {
                        Some((self.index_of[queue as usize] as usize, flow_id))
                    }
                    Verdict::NoFlow => {
                        no_flow += 1;
                        None
                    }
                    Verdict::Malformed(_) => {
                        malformed += 1;
                        None
                    }
                }),
            );
            let first = routes.first().copied().flatten();
            if let Some((rx, flow_id)) = first
                && routes.iter().all(|r| *r == first)
            {
                // One rule for every packet (a stream per flow, the usual case): the burst
                // goes whole, its flow ids set at once (a run stays a run).
                burst.set_flow_ids(flow_id);
                burst.set_steering_epoch(epoch);
                // Cannot fail: checked above, and nobody else pushes here.
                let _ = self.wires[rx].push(burst);
            } else {
                self.distribute(burst, &routes, epoch);
            }
            self.routes = routes;
            self.counters.drop_packets(DropReason::NoFlow, no_flow);
            self.counters.drop_packets(DropReason::Malformed, malformed);
        }
        drop(rules);
        self.acknowledge(epoch);
        None
    }

    /// Splits `burst` into one piece per RX queue by `routes` (packets routed nowhere are
    /// freed) and pushes the pieces.
    fn distribute(&mut self, burst: Burst, routes: &[Option<(usize, u32)>], epoch: u64) {
        // The container is kept between calls: no allocation per burst.
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.extend(self.rx_ids.iter().map(|&q| {
            let mut b = Burst::empty(self.regions.clone(), self.port, q, burst.len());
            b.set_steering_epoch(epoch);
            b
        }));
        burst.distribute(&mut pieces, |_, i| routes[i]);
        for (rx, piece) in pieces.drain(..).enumerate() {
            if !piece.is_empty() {
                // Cannot fail: checked before steering, and nobody else pushes here.
                let _ = self.wires[rx].push(piece);
            }
        }
        self.pieces = pieces;
    }

    /// Nothing entered: this ingress point has adopted the newest rules.
    pub fn idle(&mut self) {
        let epoch = self.steering.epoch();
        self.acknowledge(epoch);
    }
}

struct WireEnd {
    wire: Wire,
    ingress_ack: EpochAck,
    /// The piece being moved into RX bursts.
    pending: Option<Burst>,
}

impl WireEnd {
    /// The next piece, fetched from the wire when the current one is used up.
    fn refill(&mut self) -> Option<&mut Burst> {
        if self.pending.as_ref().is_none_or(|p| p.is_empty()) {
            self.pending = self.wire.pop();
        }
        self.pending.as_mut()
    }
}

impl Drop for Ingress {
    /// A removed TX queue's ingress sends nothing more: it holds back no receiver's
    /// acknowledgement and no rule change waits for it.
    fn drop(&mut self) {
        self.ack.store(u64::MAX, Ordering::Release);
        self.steering.forget(&self.ack);
    }
}

impl Drop for WireReceiver {
    /// A removed RX queue: rule changes no longer wait for it.
    fn drop(&mut self) {
        self.steering.forget(&self.ack);
    }
}

/// An RX queue that only takes what the wires bring it: every RX queue of the software
/// loopback, and an RX queue added to a running UDP interface (it has no socket of its
/// own; the rules steer to it what the interface's sockets receive).
pub struct WireRxPort(pub WireReceiver);

impl super::RxPort for WireRxPort {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        self.0.receive(into, max)
    }

    fn take_boundary(&mut self) -> bool {
        self.0.take_boundary()
    }
}

/// The receiving end of one RX queue: pulls the pieces steered to it.
pub struct WireReceiver {
    grid: Arc<GridShared>,
    /// The grid's layout version its wires are from.
    version: u64,
    /// Its row in the grid.
    row: usize,
    wires: Vec<WireEnd>,
    next: usize,
    steering: Arc<InterfaceSteering>,
    ack: EpochAck,
    boundary: bool,
}

impl WireReceiver {
    /// Takes the wires of ingress points added since (one load per new burst).
    fn follow_layout(&mut self) {
        let version = self.grid.version.load(Ordering::Acquire);
        if version == self.version {
            return;
        }
        let l = self.grid.layout();
        let known = self.wires.len();
        self.wires.extend(
            l.wires[self.row][known..]
                .iter()
                .zip(&l.ingress_acks[known..])
                .map(|(w, a)| WireEnd {
                    wire: w.clone(),
                    ingress_ack: a.clone(),
                    pending: None,
                }),
        );
        self.version = version;
    }

    /// Called with nothing held back: everything received so far has been delivered, so
    /// the acknowledged epoch may rise to the oldest epoch still waiting on any wire.
    fn update_ack(&mut self) {
        let mut ack = if self.wires.is_empty() {
            self.steering.epoch()
        } else {
            u64::MAX
        };
        for w in &mut self.wires {
            // Read the sender's epoch before looking at the wire: it publishes after pushing.
            let sent = w.ingress_ack.load(Ordering::Acquire);
            let waiting = w.refill().map(|p| p.steering_epoch()).unwrap_or(sent);
            ack = ack.min(waiting);
        }
        if ack > self.ack.load(Ordering::Relaxed) {
            self.ack.store(ack, Ordering::Release);
        }
    }

    /// Moves up to `max` steered packets into `into`; returns how many.
    pub fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        if into.is_empty() {
            self.follow_layout();
            self.update_ack();
        }
        let mut moved = 0;
        let n = self.wires.len();
        'wires: for k in 0..n {
            let w = &mut self.wires[(self.next + k) % n];
            while moved < max {
                let Some(p) = w.refill() else { break };
                if !into.is_empty() && into.steering_epoch() != p.steering_epoch() {
                    // Never mix epochs in one burst: deliver what we have first.
                    self.boundary = true;
                    break 'wires;
                }
                moved += into.take_from(p, max - moved);
            }
        }
        if n > 0 {
            self.next = (self.next + 1) % n;
        }
        if moved == 0
            && !into.is_empty()
            && self
                .wires
                .iter()
                .all(|w| w.ingress_ack.load(Ordering::Acquire) > into.steering_epoch())
        {
            // Every sender moved to newer rules: close this older partial burst.
            self.boundary = true;
        }
        moved
    }

    /// True (once) when the burst being assembled must be delivered now.
    pub fn take_boundary(&mut self) -> bool {
        std::mem::take(&mut self.boundary)
    }
}
