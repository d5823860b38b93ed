//! Software loopback: bursts sent on an interface's TX queues become received packets on
//! its RX queues. Only descriptors move; the bytes stay in the TX buffers, which change
//! owner. Until flow steering exists, the interface's lowest RX queue receives everything.

use super::{Engine, EngineError, Overflow, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::Config;
use crate::memory::RegionSet;
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

/// Bursts in flight between TX and RX per RX queue.
const WIRE_BURSTS: usize = 256;

/// The software loopback engine.
pub struct LoopbackEngine {
    /// Per interface: (RX queue id, its wire), lowest id first.
    wires: Vec<Vec<(u16, Arc<ArrayQueue<Burst>>)>>,
}

impl LoopbackEngine {
    /// Builds one wire per RX queue of every interface.
    pub fn new(config: &Config, _regions: &Arc<RegionSet>) -> Result<Self, EngineError> {
        let mut wires = Vec::new();
        for iface in &config.interfaces {
            let mut ids: Vec<u16> = iface
                .rx
                .iter()
                .flat_map(|r| &r.queues)
                .map(|q| q.id)
                .collect();
            ids.sort_unstable();
            let has_tx = iface.tx.as_ref().is_some_and(|t| !t.queues.is_empty());
            if has_tx && ids.is_empty() {
                return Err(EngineError::Config(format!(
                    "interface `{}`: the software loopback delivers TX traffic to an RX queue, but the interface has none",
                    iface.name
                )));
            }
            wires.push(
                ids.into_iter()
                    .map(|id| (id, Arc::new(ArrayQueue::new(WIRE_BURSTS))))
                    .collect(),
            );
        }
        Ok(Self { wires })
    }

    fn wire(&self, port: u16, queue: u16) -> Result<Arc<ArrayQueue<Burst>>, EngineError> {
        self.wires
            .get(port as usize)
            .and_then(|w| w.iter().find(|(id, _)| *id == queue))
            .map(|(_, w)| w.clone())
            .ok_or_else(|| EngineError::Config(format!("port {port} has no RX queue {queue}")))
    }
}

impl Engine for LoopbackEngine {
    fn name(&self) -> &'static str {
        "loopback"
    }

    fn rx_port(&self, port: u16, queue: u16) -> Result<Box<dyn RxPort>, EngineError> {
        Ok(Box::new(LoopbackRx {
            wire: self.wire(port, queue)?,
            pending: None,
        }))
    }

    fn tx_port(&self, port: u16, _queue: u16) -> Result<Box<dyn TxPort>, EngineError> {
        let first = self
            .wires
            .get(port as usize)
            .and_then(|w| w.first())
            .ok_or_else(|| EngineError::Config(format!("port {port} has no RX queue")))?;
        Ok(Box::new(LoopbackTx {
            wire: first.1.clone(),
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
    wire: Arc<ArrayQueue<Burst>>,
}

impl TxPort for LoopbackTx {
    fn transmit(&mut self, burst: Burst) -> Option<Burst> {
        self.wire.push(burst).err()
    }
}

struct LoopbackRx {
    wire: Arc<ArrayQueue<Burst>>,
    /// The TX burst being split into RX bursts.
    pending: Option<Burst>,
}

impl RxPort for LoopbackRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        let mut moved = 0;
        while moved < max {
            match &mut self.pending {
                Some(p) if !p.is_empty() => moved += into.take_from(p, max - moved),
                _ => match self.wire.pop() {
                    Some(b) => self.pending = Some(b),
                    None => break,
                },
            }
        }
        moved
    }
}
