//! The software loopback's wiring: which interfaces form one port, which of them receives,
//! and where each TX queue enters the port's wires. Interfaces that name the same address
//! are one port seen under several names (as two interfaces naming one NIC port): frames
//! sent on any of them arrive at the RX queues of the one that has RX queues.

use super::{PlanError, QueuePlan};
use crate::config::{Config, Direction, FaultInjection};
use crate::descriptor::{QueueId, RegionId};
use serde::Serialize;

/// The loopback engine's plan: one entry per interface, in configuration order.
#[derive(Clone, Debug, Serialize)]
pub struct LoopbackPlan {
    /// Every interface's place on its port.
    pub interfaces: Vec<LoopbackInterfacePlan>,
}

/// One interface of the loopback.
#[derive(Clone, Debug, Serialize)]
pub struct LoopbackInterfacePlan {
    /// Interface name.
    pub name: String,
    /// The first interface of its port: interfaces with the same value share one set of
    /// wires.
    pub port: usize,
    /// The interface whose RX queues the port's wires feed.
    pub rx_interface: usize,
    /// RX queue ids of `rx_interface`, ascending (the same for the whole port).
    pub rx_queues: Vec<QueueId>,
    /// Ingress points of the whole port: every TX queue of its interfaces.
    pub ingress_points: usize,
    /// This interface's TX queues in configuration order, each with the region its first
    /// segment lives in.
    pub tx_queues: Vec<(QueueId, Option<RegionId>)>,
    /// Ingress index of this interface's first TX queue on the port's wires.
    pub first_ingress: usize,
    /// `faults`: the wire's deterministic fault rules.
    #[serde(skip)]
    pub faults: Option<FaultInjection>,
}

/// Wires the interfaces of `config` into ports; `queues` are the planned queues.
pub(super) fn plan(config: &Config, queues: &[QueuePlan]) -> Result<LoopbackPlan, PlanError> {
    let count = config.interfaces.len();
    let mut slots: Vec<Option<LoopbackInterfacePlan>> = (0..count).map(|_| None).collect();
    let queues_of = |i: usize, d: Direction| {
        queues
            .iter()
            .filter(move |q| q.interface == i && q.direction == d)
    };
    for first in 0..count {
        if slots[first].is_some() {
            continue;
        }
        let address = &config.interfaces[first].address;
        let members: Vec<usize> = (first..count)
            .filter(|&i| config.interfaces[i].address == *address)
            .collect();
        let receiving: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&m| queues_of(m, Direction::Rx).next().is_some())
            .collect();
        if receiving.len() > 1 {
            return Err(PlanError::Interface {
                interface: config.interfaces[receiving[1]].name.clone(),
                reason: format!(
                    "it names the same address `{address}` as interface `{}`, so both are one port, and only one of them may have RX queues",
                    config.interfaces[receiving[0]].name
                ),
            });
        }
        let rx_interface = receiving.first().copied().unwrap_or(first);
        let mut rx_queues: Vec<QueueId> = queues_of(rx_interface, Direction::Rx)
            .map(|q| q.id)
            .collect();
        rx_queues.sort_unstable();
        let mut ingress_points = 0;
        let mut planned = Vec::new();
        for &m in &members {
            let tx_queues: Vec<(QueueId, Option<RegionId>)> = queues_of(m, Direction::Tx)
                .map(|q| (q.id, q.segments.first().copied()))
                .collect();
            if !tx_queues.is_empty() && rx_queues.is_empty() {
                return Err(PlanError::Interface {
                    interface: config.interfaces[m].name.clone(),
                    reason: "the software loopback delivers TX traffic to an RX queue, but the interface (and any other naming its address) has none".into(),
                });
            }
            let first_ingress = ingress_points;
            ingress_points += tx_queues.len();
            planned.push((m, tx_queues, first_ingress));
        }
        for (m, tx_queues, first_ingress) in planned {
            slots[m] = Some(LoopbackInterfacePlan {
                name: config.interfaces[m].name.clone(),
                port: first,
                rx_interface,
                rx_queues: rx_queues.clone(),
                ingress_points,
                tx_queues,
                first_ingress,
                faults: config.interfaces[m].faults.clone(),
            });
        }
    }
    Ok(LoopbackPlan {
        interfaces: slots
            .into_iter()
            .map(|s| s.expect("every interface is on a port"))
            .collect(),
    })
}
