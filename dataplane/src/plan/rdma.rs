//! The RDMA engine's start-up decisions: per `roce://` interface its address, whether it
//! listens, and its connection slots (one per queue, as in the reference) with their
//! regions, core and windows.

use super::PlanError;
use crate::config::{Config, QueueConfig, RoceConfig, SocketMode, Transport};
use serde::Serialize;
use std::net::SocketAddr;

/// Largest receive window per connection (the RX region may hold fewer buffers).
pub const MAX_RECV_WINDOW: usize = 1024;

/// One connection slot: what the connection in queue slot `n` of an interface uses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlotPlan {
    /// Region receives land in.
    pub rx_region: u16,
    /// Region sends come from, when the slot has one.
    pub tx_region: Option<u16>,
    /// Core of the worker that runs the connection: its TX queue's, else its RX queue's,
    /// else (an interface without queues) `master_core`.
    pub core: u32,
    /// Key path of that core, for messages (`master_core` when it is the fallback).
    pub core_key: String,
    /// Receives posted at once: the RX region's buffers, at most [`MAX_RECV_WINDOW`].
    pub recv_window: usize,
    /// Sends in flight at once (`max_inflight_bytes` over the message size).
    pub send_window: u32,
}

/// One `roce://` interface.
#[derive(Clone, Debug, Serialize)]
pub struct InterfacePlan {
    /// Interface index.
    pub interface: usize,
    /// Interface name.
    pub name: String,
    /// Server (listens) or client (connects).
    pub mode: SocketMode,
    /// Its own address (a server listens on it; a client binds to it).
    pub local: SocketAddr,
    /// Seconds between connection attempts of a client (`socket_config.retry_connect_s`).
    pub retry_connect_s: u32,
    /// `roce_config` (defaults when absent).
    #[serde(skip)]
    pub roce: RoceConfig,
    /// Connection slots; a connection takes the first free one.
    pub slots: Vec<SlotPlan>,
}

impl InterfacePlan {
    /// True for a server interface, which has a listener.
    pub fn listens(&self) -> bool {
        self.mode == SocketMode::Server
    }
}

/// The `roce://` interfaces of `config`.
pub(super) fn plan(config: &Config) -> Result<Vec<InterfacePlan>, PlanError> {
    let region_id = |n: &str| {
        config
            .memory_regions
            .iter()
            .position(|m| m.name == n)
            .map(|i| i as u16)
    };
    let mut out = Vec::new();
    for (index, iface) in config.interfaces.iter().enumerate() {
        let Some(sock) = &iface.socket else { continue };
        if sock.transport != Transport::Roce {
            continue;
        }
        let bad = |reason: String| PlanError::Interface {
            interface: iface.name.clone(),
            reason,
        };
        let Some(local) = sock.local else {
            return Err(bad(
                "socket_config.local_addr is missing (roce://IP[:PORT])".into(),
            ));
        };
        let roce = iface.roce.clone().unwrap_or_default();
        if roce.transport_mode != "RC" {
            return Err(bad(format!(
                "not supported: roce_config.transport_mode {} (only RC carries SEND/RECV with WRITE and READ)",
                roce.transport_mode
            )));
        }
        let side = if sock.mode == SocketMode::Server {
            "SERVER"
        } else {
            "CLIENT"
        };
        let rx_queues = iface.rx.as_ref().map_or(&[][..], |r| &r.queues[..]);
        let tx_queues = iface.tx.as_ref().map_or(&[][..], |t| &t.queues[..]);
        // The queue's first region, else the reference's fixed region names.
        let region_of = |q: Option<&QueueConfig>, dir: &str| {
            q.and_then(|q| q.memory_regions.first())
                .and_then(|n| region_id(n))
                .or_else(|| region_id(&format!("DATA_{dir}_GPU_{side}")))
        };
        let mut slots = Vec::new();
        let dir_of = |n: usize| {
            if tx_queues.get(n).is_some() {
                "tx"
            } else {
                "rx"
            }
        };
        for n in 0..rx_queues.len().max(tx_queues.len()).max(1) {
            let (rxq, txq) = (rx_queues.get(n), tx_queues.get(n));
            let rx_region = region_of(rxq, "RX").ok_or_else(|| {
                bad(format!(
                    "no memory region to receive into for queue {n} (give the RX queue one, or define DATA_RX_GPU_{side})"
                ))
            })?;
            let tx_region = region_of(txq, "TX");
            let size_of = |r: u16| config.memory_regions[r as usize].buf_size;
            let message = tx_region.map_or(size_of(rx_region), size_of);
            slots.push(SlotPlan {
                rx_region,
                tx_region,
                core: txq.or(rxq).map_or(config.master_core, |q| q.cpu_core),
                core_key: if txq.or(rxq).is_some() {
                    format!("interfaces[{index}].{}.queues[{n}].cpu_core", dir_of(n))
                } else {
                    "master_core".to_owned()
                },
                recv_window: config.memory_regions[rx_region as usize]
                    .num_bufs
                    .min(MAX_RECV_WINDOW),
                send_window: roce.send_window(message),
            });
        }
        out.push(InterfacePlan {
            interface: index,
            name: iface.name.clone(),
            mode: sock.mode,
            local: SocketAddr::from((local.ip, local.port)),
            retry_connect_s: sock.retry_connect_s,
            roce,
            slots,
        });
    }
    Ok(out)
}
