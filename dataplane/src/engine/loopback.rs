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
    /// The wires of the port this interface names: shared by every interface with the
    /// same address.
    grid: Arc<WireGrid>,
    /// The interface whose RX queues the port's wires feed.
    rx_port: u16,
    faults: Option<crate::config::FaultInjection>,
    /// TX queue ids in config order.
    tx_ids: Vec<u16>,
    /// Ingress index of this interface's first TX queue on the shared grid.
    first_ingress: usize,
}

/// The software loopback engine.
pub struct LoopbackEngine {
    regions: Arc<RegionSet>,
    interfaces: Vec<LoopbackInterface>,
}

impl LoopbackEngine {
    /// Builds the wires of every port; `steering` has one entry per interface.
    ///
    /// Interfaces with the same address are one port seen under several names (as two
    /// interfaces naming one NIC port): frames sent on any of them arrive at the RX
    /// queues of the one that has RX queues, steered by its rules.
    pub fn new(
        config: &Config,
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let mut slots: Vec<Option<LoopbackInterface>> =
            (0..config.interfaces.len()).map(|_| None).collect();
        let mut grouped = vec![false; config.interfaces.len()];
        for first in 0..config.interfaces.len() {
            if grouped[first] {
                continue;
            }
            let address = &config.interfaces[first].address;
            let members: Vec<usize> = (first..config.interfaces.len())
                .filter(|&i| config.interfaces[i].address == *address)
                .collect();
            for &m in &members {
                grouped[m] = true;
            }
            let receiving: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&m| config.interfaces[m].rx.iter().any(|r| !r.queues.is_empty()))
                .collect();
            if receiving.len() > 1 {
                return Err(EngineError::Interface {
                    interface: config.interfaces[receiving[1]].name.clone(),
                    reason: format!(
                        "it names the same address `{address}` as interface `{}`, so both are one port, and only one of them may have RX queues",
                        config.interfaces[receiving[0]].name
                    ),
                });
            }
            let rx_port = receiving.first().copied().unwrap_or(first);
            let rx_iface = &config.interfaces[rx_port];
            let mut rx_ids: Vec<u16> = rx_iface
                .rx
                .iter()
                .flat_map(|r| &r.queues)
                .map(|q| q.id)
                .collect();
            rx_ids.sort_unstable();
            let rules = &steering[rx_port];
            let must_read_headers = rules.rules().trivial_queue().is_none();
            let mut ingress_points = 0;
            let mut senders = Vec::new();
            for &m in &members {
                let iface = &config.interfaces[m];
                let tx_queues: Vec<_> = iface.tx.iter().flat_map(|t| &t.queues).collect();
                if !tx_queues.is_empty() && rx_ids.is_empty() {
                    return Err(EngineError::Interface {
                        interface: iface.name.clone(),
                        reason: "the software loopback delivers TX traffic to an RX queue, but the interface (and any other naming its address) has none".into(),
                    });
                }
                for q in &tx_queues {
                    let first = q.memory_regions.first().and_then(|n| regions.id_of(n));
                    // With CUDA, the wire has the GPU copy out the heads of such frames.
                    if !cfg!(feature = "cuda")
                        && must_read_headers
                        && first.is_some_and(|r| !regions.get(r).host_accessible())
                    {
                        return Err(EngineError::Queue {
                            interface: iface.name.clone(),
                            direction: Direction::Tx,
                            queue: q.id,
                            reason: "software flow steering reads packet headers, but this queue keeps them in GPU memory; put the first segment in host memory".into(),
                        });
                    }
                }
                let tx_ids: Vec<u16> = tx_queues.iter().map(|q| q.id).collect();
                senders.push((m, tx_ids, ingress_points));
                ingress_points += tx_queues.len();
            }
            let grid = Arc::new(WireGrid::new(rules, &rx_ids, ingress_points));
            for (m, tx_ids, first_ingress) in senders {
                slots[m] = Some(LoopbackInterface {
                    grid: grid.clone(),
                    rx_port: rx_port as u16,
                    faults: config.interfaces[m].faults.clone(),
                    tx_ids,
                    first_ingress,
                });
            }
        }
        Ok(Self {
            regions: regions.clone(),
            interfaces: slots
                .into_iter()
                .map(|s| s.expect("every interface is in a group"))
                .collect(),
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
        let iface = self.interface(port)?;
        let receiver = (iface.rx_port == port)
            .then(|| iface.grid.receiver(queue))
            .flatten()
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
            ingress: iface.grid.ingress(
                iface.first_ingress + tx,
                &self.regions,
                iface.rx_port,
                counters,
            ),
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
