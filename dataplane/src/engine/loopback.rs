//! Software loopback: bursts sent on an interface's TX queues become received packets on
//! its RX queues. Only descriptors move; the bytes stay in the TX buffers, which change
//! owner.
//!
//! The wire is where frames enter the interface, so software flow steering runs there: on
//! the TX worker, each frame is classified with the interface's rules and its descriptor
//! joins the piece for its RX queue. Each (RX queue, TX queue) pair has its own wire, so
//! pieces from one sender stay in order and rule epochs only grow along a wire.

use super::{Engine, EngineError, Overflow, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::Config;
use crate::memory::RegionSet;
use crate::stats::{DropReason, QueueCounters};
use crate::steering::{EpochAck, InterfaceSteering, Verdict};
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Pieces in flight per (RX queue, TX queue) wire.
const WIRE_BURSTS: usize = 32;
/// Queue ids are below 64 (config limit), so a table maps id to RX index.
const MAX_QUEUE_IDS: usize = 64;
const NO_QUEUE: u8 = u8::MAX;

type Wire = Arc<ArrayQueue<Burst>>;

struct LoopbackInterface {
    steering: Arc<InterfaceSteering>,
    /// RX queue ids, lowest first.
    rx_ids: Vec<u16>,
    /// TX queue ids in config order.
    tx_ids: Vec<u16>,
    /// `wires[rx][tx]`.
    wires: Vec<Vec<Wire>>,
    /// Acknowledgement slot of each TX queue (ingress point), by TX index.
    ingress_acks: Vec<EpochAck>,
}

/// The software loopback engine.
pub struct LoopbackEngine {
    regions: Arc<RegionSet>,
    interfaces: Vec<LoopbackInterface>,
}

impl LoopbackEngine {
    /// Builds the wires of every interface; `steering` has one entry per interface.
    pub fn new(
        config: &Config,
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let mut interfaces = Vec::new();
        for (iface, steering) in config.interfaces.iter().zip(steering) {
            let mut rx_ids: Vec<u16> = iface
                .rx
                .iter()
                .flat_map(|r| &r.queues)
                .map(|q| q.id)
                .collect();
            rx_ids.sort_unstable();
            let tx_queues: Vec<_> = iface.tx.iter().flat_map(|t| &t.queues).collect();
            if !tx_queues.is_empty() && rx_ids.is_empty() {
                return Err(EngineError::Config(format!(
                    "interface `{}`: the software loopback delivers TX traffic to an RX queue, but the interface has none",
                    iface.name
                )));
            }
            let must_read_headers = steering.rules().trivial_queue().is_none();
            for q in &tx_queues {
                let first = q.memory_regions.first().and_then(|n| regions.id_of(n));
                if must_read_headers && first.is_some_and(|r| !regions.get(r).host_accessible()) {
                    return Err(EngineError::Config(format!(
                        "interface `{}`: software flow steering reads packet headers, but TX queue {} keeps them in GPU memory; put the first segment in host memory",
                        iface.name, q.id
                    )));
                }
            }
            let wires = rx_ids
                .iter()
                .map(|_| {
                    tx_queues
                        .iter()
                        .map(|_| Arc::new(ArrayQueue::new(WIRE_BURSTS)))
                        .collect()
                })
                .collect();
            interfaces.push(LoopbackInterface {
                ingress_acks: tx_queues.iter().map(|_| steering.register()).collect(),
                steering: steering.clone(),
                rx_ids,
                tx_ids: tx_queues.iter().map(|q| q.id).collect(),
                wires,
            });
        }
        Ok(Self {
            regions: regions.clone(),
            interfaces,
        })
    }

    fn interface(&self, port: u16) -> Result<&LoopbackInterface, EngineError> {
        self.interfaces
            .get(port as usize)
            .ok_or_else(|| EngineError::Config(format!("no interface with index {port}")))
    }
}

impl Engine for LoopbackEngine {
    fn name(&self) -> &'static str {
        "loopback"
    }

    fn rx_port(
        &self,
        port: u16,
        queue: u16,
        _counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        let iface = self.interface(port)?;
        let rx = iface
            .rx_ids
            .iter()
            .position(|&id| id == queue)
            .ok_or_else(|| EngineError::Config(format!("port {port} has no RX queue {queue}")))?;
        Ok(Box::new(LoopbackRx {
            wires: iface.wires[rx]
                .iter()
                .zip(&iface.ingress_acks)
                .map(|(w, a)| WireEnd {
                    wire: w.clone(),
                    ingress_ack: a.clone(),
                    pending: None,
                })
                .collect(),
            next: 0,
            steering: iface.steering.clone(),
            ack: iface.steering.register(),
            boundary: false,
        }))
    }

    fn tx_port(
        &self,
        port: u16,
        queue: u16,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        let iface = self.interface(port)?;
        let tx = iface
            .tx_ids
            .iter()
            .position(|&id| id == queue)
            .ok_or_else(|| EngineError::Config(format!("port {port} has no TX queue {queue}")))?;
        let mut index_of = [NO_QUEUE; MAX_QUEUE_IDS];
        for (i, &id) in iface.rx_ids.iter().enumerate() {
            index_of[id as usize] = i as u8;
        }
        Ok(Box::new(LoopbackTx {
            regions: self.regions.clone(),
            port,
            steering: iface.steering.clone(),
            wires: iface
                .wires
                .iter()
                .map(|per_tx| per_tx[tx].clone())
                .collect(),
            rx_ids: iface.rx_ids.clone(),
            index_of,
            ack: iface.ingress_acks[tx].clone(),
            acked: 0,
            counters,
            pieces: Vec::with_capacity(iface.rx_ids.len()),
        }))
    }

    fn rx_overflow(&self) -> Overflow {
        Overflow::Backpressure
    }

    fn steering(&self) -> &'static str {
        "software"
    }
}

struct LoopbackTx {
    regions: Arc<RegionSet>,
    port: u16,
    steering: Arc<InterfaceSteering>,
    /// This TX queue's wire to each RX queue, by RX index.
    wires: Vec<Wire>,
    rx_ids: Vec<u16>,
    index_of: [u8; MAX_QUEUE_IDS],
    ack: EpochAck,
    acked: u64,
    /// This TX queue's counters; the TX worker is their only writer.
    counters: Arc<QueueCounters>,
    /// Per-RX-queue pieces of the burst being steered (kept to reuse the allocation).
    pieces: Vec<Burst>,
}

impl LoopbackTx {
    fn acknowledge(&mut self, epoch: u64) {
        if epoch != self.acked {
            self.acked = epoch;
            self.ack.store(epoch, Ordering::Release);
        }
    }
}

impl TxPort for LoopbackTx {
    fn transmit(&mut self, mut burst: Burst) -> Option<Burst> {
        // This queue is the only producer on its wires, so a wire that is not full now
        // still has room for the one piece it may get below.
        if self.wires.iter().any(|w| w.is_full()) {
            return Some(burst);
        }
        let rules = self.steering.rules();
        let epoch = rules.epoch();
        if let Some(queue) = rules.trivial_queue() {
            let rx = self.index_of[queue as usize] as usize;
            burst.set_steering_epoch(epoch);
            if let Err(b) = self.wires[rx].push(burst) {
                return Some(b);
            }
        } else {
            // The container is kept between calls: no allocation per burst.
            let mut pieces = std::mem::take(&mut self.pieces);
            pieces.extend(self.rx_ids.iter().map(|&q| {
                let mut b = Burst::empty(self.regions.clone(), self.port, q, burst.len());
                b.set_steering_epoch(epoch);
                b
            }));
            let (mut no_flow, mut malformed) = (0u64, 0u64);
            let index_of = &self.index_of;
            burst.distribute(&mut pieces, |b, i| {
                let verdict = match b.data(i, 0) {
                    Some(frame) => rules.classify(frame),
                    None => Verdict::NoFlow,
                };
                match verdict {
                    Verdict::Deliver { queue, flow_id } => {
                        Some((index_of[queue as usize] as usize, flow_id))
                    }
                    Verdict::NoFlow => {
                        no_flow += 1;
                        None
                    }
                    Verdict::Malformed(_) => {
                        malformed += 1;
                        None
                    }
                }
            });
            for (rx, piece) in pieces.drain(..).enumerate() {
                if !piece.is_empty() {
                    // Cannot fail: checked above, and nobody else pushes here.
                    let _ = self.wires[rx].push(piece);
                }
            }
            self.pieces = pieces;
            self.counters.drop_packets(DropReason::NoFlow, no_flow);
            self.counters.drop_packets(DropReason::Malformed, malformed);
        }
        drop(rules);
        self.acknowledge(epoch);
        None
    }

    fn idle(&mut self) {
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

struct LoopbackRx {
    wires: Vec<WireEnd>,
    next: usize,
    steering: Arc<InterfaceSteering>,
    ack: EpochAck,
    boundary: bool,
}

impl LoopbackRx {
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
}

impl RxPort for LoopbackRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        if into.is_empty() {
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

    fn take_boundary(&mut self) -> bool {
        std::mem::take(&mut self.boundary)
    }
}
