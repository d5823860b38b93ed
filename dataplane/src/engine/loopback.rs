//! Software loopback: bursts sent on an interface's TX queues become received packets on
//! its RX queues. Only descriptors move; the bytes stay in the TX buffers, which change
//! owner.
//!
//! The wire is where frames enter the interface, so software flow steering runs there: each
//! TX queue is an ingress point of the interface's [`WireGrid`].

#![forbid(unsafe_code)]

use super::fault::FaultInjector;
use super::wire::{Ingress, WireGrid, WireRxPort};
use super::{Capabilities, Engine, EngineError, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::Direction;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::RegionSet;
use crate::plan::loopback::LoopbackPlan;
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

struct LoopbackInterface {
    /// The wires of the port this interface names: shared by every interface with the
    /// same address.
    grid: Arc<WireGrid>,
    /// The interface whose RX queues the port's wires feed.
    rx_port: PortIndex,
    faults: Option<crate::config::FaultInjection>,
    /// TX queue ids in config order.
    tx_ids: Vec<QueueId>,
    /// Ingress index of this interface's first TX queue on the shared grid.
    first_ingress: usize,
    /// TX queues added while the engine runs, with their ingress index.
    added_tx: Mutex<Vec<(QueueId, usize)>>,
}

/// The software loopback engine.
pub struct LoopbackEngine {
    regions: Arc<RegionSet>,
    interfaces: Vec<LoopbackInterface>,
}

impl LoopbackEngine {
    /// Builds the wires of every port as `plan` lays them out; `steering` has one entry
    /// per interface.
    pub fn new(
        plan: &LoopbackPlan,
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let mut grids: BTreeMap<usize, Arc<WireGrid>> = BTreeMap::new();
        let mut interfaces = Vec::with_capacity(plan.interfaces.len());
        for iface in &plan.interfaces {
            let rules = &steering[iface.rx_interface];
            // With CUDA, the wire has the GPU copy out the heads of such frames.
            let must_read_headers = rules.rules().trivial_queue().is_none();
            for &(queue, first) in &iface.tx_queues {
                if !cfg!(feature = "cuda")
                    && must_read_headers
                    && first.is_some_and(|r| !regions.get(r).host_accessible())
                {
                    return Err(EngineError::Queue {
                        interface: iface.name.clone(),
                        direction: Direction::Tx,
                        queue,
                        reason: "software flow steering reads packet headers, but this queue keeps them in GPU memory; put the first segment in host memory".into(),
                    });
                }
            }
            let grid = grids
                .entry(iface.port)
                .or_insert_with(|| {
                    Arc::new(WireGrid::new(rules, &iface.rx_queues, iface.ingress_points))
                })
                .clone();
            interfaces.push(LoopbackInterface {
                grid,
                rx_port: PortIndex(iface.rx_interface as u16),
                faults: iface.faults.clone(),
                tx_ids: iface.tx_queues.iter().map(|&(id, _)| id).collect(),
                first_ingress: iface.first_ingress,
                added_tx: Mutex::new(Vec::new()),
            });
        }
        Ok(Self {
            regions: regions.clone(),
            interfaces,
        })
    }

    fn interface(&self, port: PortIndex) -> Result<&LoopbackInterface, EngineError> {
        super::interface_at(&self.interfaces, port)
    }
}

impl Engine for LoopbackEngine {
    fn name(&self) -> &'static str {
        "loopback"
    }

    fn rx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        _counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        let iface = self.interface(port)?;
        let receiver = (iface.rx_port == port)
            .then(|| iface.grid.receiver(queue))
            .flatten()
            .ok_or(EngineError::no_queue(port, Direction::Rx, queue))?;
        Ok(Box::new(WireRxPort(receiver)))
    }

    fn tx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        let iface = self.interface(port)?;
        // Added queues first: one added again after its removal has a new ingress point.
        let added = iface
            .added_tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .rev()
            .find(|(id, _)| *id == queue)
            .map(|&(_, ingress)| ingress);
        let first = || {
            let tx = iface.tx_ids.iter().position(|&id| id == queue)?;
            Some(iface.first_ingress + tx)
        };
        let ingress =
            added
                .or_else(first)
                .ok_or(EngineError::no_queue(port, Direction::Tx, queue))?;
        let faults = iface
            .faults
            .clone()
            .map(|f| FaultInjector::new(f, self.regions.clone(), port, queue, counters.clone()));
        Ok(Box::new(LoopbackTx {
            ingress: iface
                .grid
                .ingress(ingress, &self.regions, iface.rx_port, counters),
            faults,
            stalled: None,
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::LOOPBACK
    }

    /// An RX queue gets a wire from every TX queue of its port; a TX queue becomes a new
    /// ingress point of its port's wires. Both join at a burst boundary.
    fn open_queue(
        &self,
        port: PortIndex,
        direction: Direction,
        queue: QueueId,
    ) -> Result<(), EngineError> {
        let iface = self.interface(port)?;
        let refused = |reason| EngineError::queue_not_opened(port, direction, queue, reason);
        match direction {
            Direction::Rx if iface.rx_port != port => Err(refused(
                "this interface's port feeds another interface's RX queues".into(),
            )),
            Direction::Rx => iface.grid.add_rx_queue(queue).map_err(refused),
            // The plan makes sure no running queue has the id (one removed earlier gets
            // a new ingress point).
            Direction::Tx => {
                let ingress = iface.grid.add_ingress();
                iface
                    .added_tx
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((queue, ingress));
                Ok(())
            }
        }
    }

    fn steering(&self) -> String {
        "software".into()
    }

    /// A locally administered address per interface: 02:00:00:00:00:<index + 1>.
    fn mac_address(&self, port: PortIndex) -> Option<[u8; 6]> {
        let [hi, lo] = (port.0 + 1).to_be_bytes();
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
