//! RDMA from a configuration: `stream_type: socket` interfaces with `roce://` endpoints.
//! [`RdmaPlane::start`] allocates the memory regions and listens on every server
//! interface; [`RdmaPlane::accept`] and [`RdmaPlane::connect`] hand out
//! [`BurstConnection`]s that move the core's bursts in and out of the interface's regions.
//!
//! Which interface a request belongs to is decided by `rdma::cm::Server` from the address
//! it arrived on and the interface's index in the configuration, never from the device's
//! port number.

use crate::config::{Config, SocketMode, Transport};
use crate::memory::{MemoryError, RegionId, RegionSet};
use crate::rdma_conn::BurstConnection;
use rdma::cm::{CmAction, CmEvent, ConfiguredInterface, Server};
use rdma::verbs::{Connection, ConnectionParams, Listener, VerbsError};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Sends in flight per connection; the peer's receive window must cover it.
const SEND_DEPTH: u32 = 32;
/// Largest receive window per connection (the RX region may hold fewer buffers).
const MAX_RECV_WINDOW: usize = 512;
/// Connections per server at most (the reference's limit).
const MAX_CONNECTIONS: usize = 128;

/// Why the RDMA plane could not start or connect.
#[derive(Debug, thiserror::Error)]
pub enum RdmaPlaneError {
    /// The configuration has no RDMA interface, or names one that is not.
    #[error("{0}")]
    Config(String),
    /// Memory regions could not be allocated.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Verbs or rdma_cm failed.
    #[error("interface `{interface}`: {source}")]
    Verbs {
        /// Interface name.
        interface: String,
        /// The error.
        source: VerbsError,
    },
    /// The connection was refused by the server's rules.
    #[error("interface `{interface}`: request rejected: {reason}")]
    Rejected {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
}

struct RdmaInterface {
    index: usize,
    name: String,
    local: SocketAddr,
    mode: SocketMode,
    rx_region: RegionId,
    tx_regions: Vec<RegionId>,
}

/// RDMA endpoints of a configuration.
pub struct RdmaPlane {
    regions: Arc<RegionSet>,
    interfaces: Vec<RdmaInterface>,
    listeners: BTreeMap<usize, Listener>,
    cm: Mutex<Server>,
    next_conn: Mutex<u64>,
}

impl RdmaPlane {
    /// Allocates the regions and listens on every `roce://` server interface.
    pub fn start(config: &Config) -> Result<Self, RdmaPlaneError> {
        let regions = Arc::new(RegionSet::allocate(&config.memory_regions)?);
        let mut interfaces = Vec::new();
        for (index, iface) in config.interfaces.iter().enumerate() {
            let Some(sock) = &iface.socket else { continue };
            if sock.transport != Transport::Roce {
                continue;
            }
            let Some(local) = sock.local else {
                return Err(RdmaPlaneError::Config(format!(
                    "interface `{}`: socket_config.local_addr is missing (roce://IP[:PORT])",
                    iface.name
                )));
            };
            // The queue's first region, else the reference's fixed region names.
            let side = if sock.mode == SocketMode::Server {
                "SERVER"
            } else {
                "CLIENT"
            };
            let region_of = |queues: Option<&Vec<crate::config::QueueConfig>>, dir: &str| {
                queues
                    .and_then(|q| q.first())
                    .and_then(|q| q.memory_regions.first())
                    .and_then(|n| regions.id_of(n))
                    .or_else(|| regions.id_of(&format!("DATA_{dir}_GPU_{side}")))
            };
            let rx_region = region_of(iface.rx.as_ref().map(|r| &r.queues), "RX").ok_or_else(|| {
                RdmaPlaneError::Config(format!(
                    "interface `{}`: no memory region to receive into (give the RX queue one, or define DATA_RX_GPU_{side})",
                    iface.name
                ))
            })?;
            let tx_regions = region_of(iface.tx.as_ref().map(|t| &t.queues), "TX")
                .into_iter()
                .collect();
            interfaces.push(RdmaInterface {
                index,
                name: iface.name.clone(),
                local: SocketAddr::from((local.ip, local.port)),
                mode: sock.mode,
                rx_region,
                tx_regions,
            });
        }
        if interfaces.is_empty() {
            return Err(RdmaPlaneError::Config(
                "no interface has socket_config with a roce:// local_addr".into(),
            ));
        }
        let mut listeners = BTreeMap::new();
        for i in interfaces.iter().filter(|i| i.mode == SocketMode::Server) {
            let l = Listener::bind(i.local, MAX_CONNECTIONS as i32).map_err(|source| {
                RdmaPlaneError::Verbs {
                    interface: i.name.clone(),
                    source,
                }
            })?;
            listeners.insert(i.index, l);
        }
        let cm = Server::new(
            interfaces
                .iter()
                .filter_map(|i| match i.local {
                    SocketAddr::V4(a) => Some(ConfiguredInterface {
                        config_index: i.index,
                        name: i.name.clone(),
                        addr: *a.ip(),
                    }),
                    SocketAddr::V6(_) => None,
                })
                .collect(),
            MAX_CONNECTIONS,
        );
        Ok(Self {
            regions,
            interfaces,
            listeners,
            cm: Mutex::new(cm),
            next_conn: Mutex::new(1),
        })
    }

    /// The region set the connections' bursts come from.
    pub fn regions(&self) -> &Arc<RegionSet> {
        &self.regions
    }

    fn interface(&self, name: &str) -> Result<&RdmaInterface, RdmaPlaneError> {
        self.interfaces
            .iter()
            .find(|i| i.name == name)
            .ok_or_else(|| RdmaPlaneError::Config(format!("no RDMA interface `{name}`")))
    }

    fn params(&self, iface: &RdmaInterface) -> ConnectionParams {
        ConnectionParams {
            own_receives: false,
            send_depth: SEND_DEPTH,
            recv_depth: self.recv_window(iface) as u32,
            message_size: 64,
            window_size: 0,
            ..ConnectionParams::default()
        }
    }

    fn recv_window(&self, iface: &RdmaInterface) -> usize {
        self.regions
            .get(iface.rx_region)
            .num_bufs()
            .min(MAX_RECV_WINDOW)
    }

    fn wrap(
        &self,
        iface: &RdmaInterface,
        conn: Connection,
    ) -> Result<BurstConnection, RdmaPlaneError> {
        BurstConnection::new(
            conn,
            self.regions.clone(),
            iface.rx_region,
            &iface.tx_regions,
            (iface.index as u16, 0),
            self.recv_window(iface),
        )
        .map_err(|source| RdmaPlaneError::Verbs {
            interface: iface.name.clone(),
            source,
        })
    }

    /// Waits for the next connection to server interface `interface` and accepts it (or
    /// rejects it, by the server's rules, and says why).
    pub fn accept(
        &self,
        interface: &str,
        timeout: Duration,
    ) -> Result<BurstConnection, RdmaPlaneError> {
        let iface = self.interface(interface)?;
        let listener = self.listeners.get(&iface.index).ok_or_else(|| {
            RdmaPlaneError::Config(format!("interface `{interface}` is not a server"))
        })?;
        let verbs = |source| RdmaPlaneError::Verbs {
            interface: interface.to_owned(),
            source,
        };
        let req = listener.next_request(timeout, &|| false).map_err(verbs)?;
        let conn_id = {
            let mut n = self.next_conn.lock().expect("connection counter");
            *n += 1;
            *n
        };
        let action = self
            .cm
            .lock()
            .expect("cm state")
            .on_event(&CmEvent::ConnectRequest {
                conn: conn_id,
                local: iface.local,
                remote: iface.local,
                device_port: req.device_port,
            })
            .into_iter()
            .next();
        match action {
            Some(CmAction::Accept { interface: idx, .. }) => {
                let owner = self
                    .interfaces
                    .iter()
                    .find(|i| i.index == idx)
                    .expect("the cm names a configured interface");
                let conn = req.accept(self.params(owner)).map_err(verbs)?;
                self.cm
                    .lock()
                    .expect("cm state")
                    .on_event(&CmEvent::Established(conn_id));
                self.wrap(owner, conn)
            }
            Some(CmAction::Reject { reason, .. }) => {
                req.reject();
                Err(RdmaPlaneError::Rejected {
                    interface: interface.to_owned(),
                    reason,
                })
            }
            other => Err(RdmaPlaneError::Config(format!(
                "interface `{interface}`: unexpected connection decision {other:?}"
            ))),
        }
    }

    /// Connects client interface `interface` to `remote`.
    pub fn connect(
        &self,
        interface: &str,
        remote: SocketAddr,
    ) -> Result<BurstConnection, RdmaPlaneError> {
        let iface = self.interface(interface)?;
        if iface.mode != SocketMode::Client {
            return Err(RdmaPlaneError::Config(format!(
                "interface `{interface}` is not a client"
            )));
        }
        let local = SocketAddr::new(iface.local.ip(), 0);
        let conn = Connection::connect(local, remote, self.params(iface)).map_err(|source| {
            RdmaPlaneError::Verbs {
                interface: interface.to_owned(),
                source,
            }
        })?;
        self.wrap(iface, conn)
    }
}
