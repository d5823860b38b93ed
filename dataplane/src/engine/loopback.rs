//! Software loopback: bursts sent on an interface's TX queues become received packets on
//! its RX queues. Only descriptors move; the bytes stay in the TX buffers, which change
//! owner.
//!
//! The wire is where frames enter the interface, so software flow steering runs there: each
//! TX queue is an ingress point of the interface's [`WireGrid`].

#![forbid(unsafe_code)]

use super::fault::FaultInjector;
use super::wire::{Ingress, WireGrid, WireReceiver};
use super::{Capabilities, Engine, EngineError, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::{Config, Direction};
use crate::memory::RegionSet;
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use std::sync::Arc;

struct LoopbackInterface {
    grid: WireGrid,
    faults: Option<crate::config::FaultInjection>,
    /// TX queue ids in config order.
    tx_ids: Vec<u16>,
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
                return Err(EngineError::Interface {
                    interface: iface.name.clone(),
                    reason: "the software loopback delivers TX traffic to an RX queue, but the interface has none".into(),
                });
            }
            let must_read_headers = steering.rules().trivial_queue().is_none();
            for q in &tx_queues {
                let first = q.memory_regions.first().and_then(|n| regions.id_of(n));
                if must_read_headers && first.is_some_and(|r| !regions.get(r).host_accessible()) {
                    return Err(EngineError::Queue {
                        interface: iface.name.clone(),
                        direction: Direction::Tx,
                        queue: q.id,
                        reason: "software flow steering reads packet headers, but this queue keeps them in GPU memory; put the first segment in host memory".into(),
                    });
                }
            }
            interfaces.push(LoopbackInterface {
                grid: WireGrid::new(steering, &rx_ids, tx_queues.len()),
                faults: iface.faults.clone(),
                tx_ids: tx_queues.iter().map(|q| q.id).collect(),
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
            .ok_or(EngineError::NoInterface { port })
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
        let receiver = self
            .interface(port)?
            .grid
            .receiver(queue)
            .ok_or(EngineError::NoQueue {
                port,
                direction: Direction::Rx,
                queue,
            })?;
        Ok(Box::new(LoopbackRx(receiver)))
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
            .ok_or(EngineError::NoQueue {
                port,
                direction: Direction::Tx,
                queue,
            })?;
        let faults = iface
            .faults
            .clone()
            .map(|f| FaultInjector::new(f, self.regions.clone(), port, queue, counters.clone()));
        Ok(Box::new(LoopbackTx {
            ingress: iface.grid.ingress(tx, &self.regions, port, counters),
            faults,
            stalled: None,
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::LOOPBACK
    }

    fn steering(&self) -> String {
        "software".into()
    }

    /// A locally administered address per interface: 02:00:00:00:00:<index + 1>.
    fn mac_address(&self, port: u16) -> Option<[u8; 6]> {
        let [hi, lo] = (port + 1).to_be_bytes();
        Some([0x02, 0, 0, 0, hi, lo])
    }
}

/// A TX queue: an ingress point of its interface, behind its fault injector if it has
/// one.
struct LoopbackTx {
    ingress: Ingress,
    faults: Option<FaultInjector>,
    /// Frames the injector already handled that the wire could not take yet; they go
    /// before anything new, so faults apply once per frame.
    stalled: Option<Burst>,
}

impl LoopbackTx {
    /// Pushes the stalled frames; true when none are left.
    fn unstall(&mut self) -> bool {
        match self.stalled.take() {
            Some(b) => {
                self.stalled = self.ingress.steer(b);
                self.stalled.is_none()
            }
            None => true,
        }
    }
}

impl TxPort for LoopbackTx {
    fn transmit(&mut self, burst: Burst) -> Option<Burst> {
        let Some(faults) = &mut self.faults else {
            return self.ingress.steer(burst);
        };
        if self.stalled.is_some() {
            if !self.unstall() {
                // Not taken and not yet seen by the injector: the worker offers it again.
                return Some(burst);
            }
            let faults = self.faults.as_mut().expect("checked above");
            self.stalled = self.ingress.steer(faults.apply(burst));
            return None;
        }
        self.stalled = self.ingress.steer(faults.apply(burst));
        None
    }

    fn idle(&mut self) {
        // Nothing new to send: held-back frames (reordered, delayed) go out now.
        if self.unstall()
            && let Some(faults) = &mut self.faults
            && let Some(held) = faults.release_held()
        {
            self.stalled = self.ingress.steer(held);
        }
        self.ingress.idle();
    }
}

/// An RX queue: the receiving end of its wires.
struct LoopbackRx(WireReceiver);

impl RxPort for LoopbackRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        self.0.receive(into, max)
    }

    fn take_boundary(&mut self) -> bool {
        self.0.take_boundary()
    }
}
