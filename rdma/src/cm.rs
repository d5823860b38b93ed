//! Connection management as state machines with no I/O: the rdma_cm event loop feeds them
//! events and carries out the actions they return. Everything that decides (which
//! configured interface a connection belongs to, whether to accept, when to retry, when a
//! worker must stop) lives here and is tested without an RDMA device.
//!
//! A connection belongs to the configured interface whose address it arrived on, found by
//! that address and identified by the interface's index in the configuration. The device's
//! port number never enters the decision: looking the interface up by port number instead
//! is the mistake this design exists to rule out (with one port per device, port 1 named
//! the first configured interface, whatever address the request had come to).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Identifies one rdma_cm connection for the state machines (the event loop maps its
/// `rdma_cm_id`s to these).
pub type ConnId = u64;

/// A configured interface that can take RDMA connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredInterface {
    /// Index in the configuration's `interfaces` list.
    pub config_index: usize,
    /// The interface's name in the configuration.
    pub name: String,
    /// Its IPv4 address (`socket_config.local_addr`).
    pub addr: Ipv4Addr,
}

/// What rdma_cm reported, as far as the state machines care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A peer asks to connect. `device_port` is the RDMA device port the request came in on;
    /// it is carried for logging only and never used to choose an interface.
    ConnectRequest {
        /// The new connection.
        conn: ConnId,
        /// Our address the request was sent to.
        local: SocketAddr,
        /// The peer's address.
        remote: SocketAddr,
        /// RDMA device port number (1-based).
        device_port: u8,
    },
    /// Client: the address resolved.
    AddressResolved(ConnId),
    /// Client: the route resolved.
    RouteResolved(ConnId),
    /// The connection is up.
    Established(ConnId),
    /// The peer or we disconnected.
    Disconnected(ConnId),
    /// The peer rejected the connection (client) with rdma_cm status `status`.
    Rejected {
        /// The connection.
        conn: ConnId,
        /// rdma_cm's status code.
        status: i32,
    },
    /// Address or route resolution, or the connection attempt, failed or timed out.
    Failed {
        /// The connection.
        conn: ConnId,
        /// What failed.
        what: String,
    },
}

/// What the event loop must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmAction {
    /// Create the connection's queue pair on the device of `interface`, post its receives
    /// (before accepting, so the peer's first send finds one), then accept.
    Accept {
        /// The connection.
        conn: ConnId,
        /// Configuration index of the interface it belongs to.
        interface: usize,
    },
    /// Refuse the connection, telling the peer `reason`.
    Reject {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: String,
    },
    /// Client: resolve the route next.
    ResolveRoute(ConnId),
    /// Client: create the queue pair, post receives, then connect.
    Connect(ConnId),
    /// Client: try again from address resolution after `after`.
    Retry {
        /// The connection.
        conn: ConnId,
        /// Attempt number about to start (2 for the first retry).
        attempt: u32,
        /// Back-off before it.
        after: Duration,
    },
    /// Start the connection's worker (the connection is established).
    StartWorker {
        /// The connection.
        conn: ConnId,
        /// Configuration index of its interface.
        interface: usize,
    },
    /// Stop the connection's worker: set its own stop flag, take it out of the shared table,
    /// release the table's lock, then join it; its buffers go back only after the join.
    StopWorker(ConnId),
    /// Client: give up.
    GiveUp {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerState {
    Accepting { interface: usize },
    Established { interface: usize },
}

/// The server side: accepts up to `max_connections` connections on its interfaces.
#[derive(Debug)]
pub struct Server {
    interfaces: Vec<ConfiguredInterface>,
    max_connections: usize,
    conns: BTreeMap<ConnId, ServerState>,
}

impl Server {
    /// A server for the given interfaces (those with a `local_addr`).
    pub fn new(interfaces: Vec<ConfiguredInterface>, max_connections: usize) -> Self {
        Self {
            interfaces,
            max_connections,
            conns: BTreeMap::new(),
        }
    }

    /// Configuration index of the interface that owns `local`, by address.
    pub fn interface_for(&self, local: &SocketAddr) -> Option<&ConfiguredInterface> {
        match local {
            SocketAddr::V4(a) => self.interfaces.iter().find(|i| i.addr == *a.ip()),
            SocketAddr::V6(a) => {
                let v4 = a.ip().to_ipv4_mapped()?;
                self.interfaces.iter().find(|i| i.addr == v4)
            }
        }
    }

    /// Connections accepted or being accepted.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The configuration index of a known connection's interface.
    pub fn interface_of(&self, conn: ConnId) -> Option<usize> {
        self.conns.get(&conn).map(|s| match s {
            ServerState::Accepting { interface } | ServerState::Established { interface } => {
                *interface
            }
        })
    }

    /// Feeds one event; returns what to do.
    pub fn on_event(&mut self, event: &CmEvent) -> Vec<CmAction> {
        match event {
            CmEvent::ConnectRequest {
                conn,
                local,
                remote,
                device_port: _,
            } => {
                let Some(iface) = self.interface_for(local) else {
                    return vec![CmAction::Reject {
                        conn: *conn,
                        reason: format!(
                            "request from {remote} arrived on {local}, which is no configured interface's address"
                        ),
                    }];
                };
                if self.conns.len() >= self.max_connections {
                    return vec![CmAction::Reject {
                        conn: *conn,
                        reason: format!(
                            "interface `{}` already has the most connections allowed ({})",
                            iface.name, self.max_connections
                        ),
                    }];
                }
                let interface = iface.config_index;
                self.conns
                    .insert(*conn, ServerState::Accepting { interface });
                vec![CmAction::Accept {
                    conn: *conn,
                    interface,
                }]
            }
            CmEvent::Established(conn) => match self.conns.get_mut(conn) {
                Some(s @ ServerState::Accepting { .. }) => {
                    let ServerState::Accepting { interface } = *s else {
                        unreachable!()
                    };
                    *s = ServerState::Established { interface };
                    vec![CmAction::StartWorker {
                        conn: *conn,
                        interface,
                    }]
                }
                _ => Vec::new(),
            },
            CmEvent::Disconnected(conn) => match self.conns.remove(conn) {
                Some(ServerState::Established { .. }) => vec![CmAction::StopWorker(*conn)],
                _ => Vec::new(),
            },
            CmEvent::Failed { conn, .. } | CmEvent::Rejected { conn, .. } => {
                match self.conns.remove(conn) {
                    Some(ServerState::Established { .. }) => vec![CmAction::StopWorker(*conn)],
                    _ => Vec::new(),
                }
            }
            CmEvent::AddressResolved(_) | CmEvent::RouteResolved(_) => Vec::new(),
        }
    }
}

/// Client connection attempts: retried with back-off up to a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all (the first plus retries).
    pub attempts: u32,
    /// Back-off before the first retry; doubles each time.
    pub first_backoff: Duration,
    /// Longest back-off.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 5,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientState {
    ResolvingAddress,
    ResolvingRoute,
    Connecting,
    Established,
    Closed,
}

/// The client side of one connection.
#[derive(Debug)]
pub struct Client {
    conn: ConnId,
    interface: usize,
    policy: RetryPolicy,
    attempt: u32,
    state: ClientState,
}

impl Client {
    /// A client for connection `conn` of configured interface `interface`; the event loop
    /// starts with address resolution.
    pub fn new(conn: ConnId, interface: usize, policy: RetryPolicy) -> Self {
        Self {
            conn,
            interface,
            policy,
            attempt: 1,
            state: ClientState::ResolvingAddress,
        }
    }

    /// True once established and not closed.
    pub fn is_established(&self) -> bool {
        self.state == ClientState::Established
    }

    /// The attempt in progress (1-based).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    fn retry_or_give_up(&mut self, why: String) -> Vec<CmAction> {
        if self.attempt >= self.policy.attempts {
            self.state = ClientState::Closed;
            return vec![CmAction::GiveUp {
                conn: self.conn,
                reason: format!("{why} (after {} attempts)", self.attempt),
            }];
        }
        let shift = (self.attempt - 1).min(16);
        let after = self
            .policy
            .first_backoff
            .saturating_mul(1 << shift)
            .min(self.policy.max_backoff);
        self.attempt += 1;
        self.state = ClientState::ResolvingAddress;
        vec![CmAction::Retry {
            conn: self.conn,
            attempt: self.attempt,
            after,
        }]
    }

    /// Feeds one event about this connection; returns what to do.
    pub fn on_event(&mut self, event: &CmEvent) -> Vec<CmAction> {
        match (self.state, event) {
            (ClientState::ResolvingAddress, CmEvent::AddressResolved(c)) if *c == self.conn => {
                self.state = ClientState::ResolvingRoute;
                vec![CmAction::ResolveRoute(self.conn)]
            }
            (ClientState::ResolvingRoute, CmEvent::RouteResolved(c)) if *c == self.conn => {
                self.state = ClientState::Connecting;
                vec![CmAction::Connect(self.conn)]
            }
            (ClientState::Connecting, CmEvent::Established(c)) if *c == self.conn => {
                self.state = ClientState::Established;
                vec![CmAction::StartWorker {
                    conn: self.conn,
                    interface: self.interface,
                }]
            }
            (ClientState::Established, CmEvent::Disconnected(c)) if *c == self.conn => {
                self.state = ClientState::Closed;
                vec![CmAction::StopWorker(self.conn)]
            }
            (
                ClientState::ResolvingAddress
                | ClientState::ResolvingRoute
                | ClientState::Connecting,
                CmEvent::Failed { conn, what },
            ) if *conn == self.conn => self.retry_or_give_up(what.clone()),
            (ClientState::Connecting, CmEvent::Rejected { conn, status }) if *conn == self.conn => {
                // A reject is the server's answer, not a transient failure: no retry.
                self.state = ClientState::Closed;
                vec![CmAction::GiveUp {
                    conn: self.conn,
                    reason: format!("the server rejected the connection (status {status})"),
                }]
            }
            (ClientState::Established, CmEvent::Failed { conn, .. }) if *conn == self.conn => {
                self.state = ClientState::Closed;
                vec![CmAction::StopWorker(self.conn)]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(i: usize, name: &str, addr: &str) -> ConfiguredInterface {
        ConfiguredInterface {
            config_index: i,
            name: name.into(),
            addr: addr.parse().unwrap(),
        }
    }

    fn request(conn: ConnId, local: &str, device_port: u8) -> CmEvent {
        CmEvent::ConnectRequest {
            conn,
            local: format!("{local}:4791").parse().unwrap(),
            remote: "198.18.0.9:50000".parse().unwrap(),
            device_port,
        }
    }

    #[test]
    fn server_on_the_second_configured_interface_takes_its_own_index() {
        // The listening interface is the second in the list, and its device has one port
        // (port 1): looking the interface up by port number would pick index 0.
        let mut s = Server::new(
            vec![iface(0, "mgmt", "10.0.0.1"), iface(1, "data", "198.18.0.1")],
            4,
        );
        assert_eq!(
            s.on_event(&request(7, "198.18.0.1", 1)),
            vec![CmAction::Accept {
                conn: 7,
                interface: 1
            }]
        );
        assert_eq!(
            s.on_event(&CmEvent::Established(7)),
            vec![CmAction::StartWorker {
                conn: 7,
                interface: 1
            }]
        );
        assert_eq!(s.interface_of(7), Some(1));
    }

    #[test]
    fn device_port_numbers_that_differ_from_config_indexes_are_ignored() {
        let mut s = Server::new(
            vec![iface(0, "a", "198.18.0.1"), iface(1, "b", "198.18.1.1")],
            4,
        );
        // Interface 0 sits on port 2 of a dual-port device, interface 1 on port 1 of
        // another: the address decides, never the port.
        assert_eq!(
            s.on_event(&request(1, "198.18.0.1", 2)),
            vec![CmAction::Accept {
                conn: 1,
                interface: 0
            }]
        );
        assert_eq!(
            s.on_event(&request(2, "198.18.1.1", 1)),
            vec![CmAction::Accept {
                conn: 2,
                interface: 1
            }]
        );
        // An IPv4-mapped IPv6 local address (how rdma_cm may report it) is the same address.
        let mapped = CmEvent::ConnectRequest {
            conn: 3,
            local: "[::ffff:198.18.1.1]:4791".parse().unwrap(),
            remote: "[::ffff:198.18.0.9]:5".parse().unwrap(),
            device_port: 9,
        };
        assert_eq!(
            s.on_event(&mapped),
            vec![CmAction::Accept {
                conn: 3,
                interface: 1
            }]
        );
    }

    #[test]
    fn server_rejects_beyond_its_limit_and_unknown_addresses_with_a_reason() {
        let mut s = Server::new(vec![iface(0, "data", "198.18.0.1")], 1);
        assert!(matches!(
            s.on_event(&request(1, "198.18.0.1", 1))[0],
            CmAction::Accept { .. }
        ));
        match &s.on_event(&request(2, "198.18.0.1", 1))[0] {
            CmAction::Reject { conn: 2, reason } => {
                assert!(reason.contains("most connections allowed (1)"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        match &s.on_event(&request(3, "192.0.2.7", 1))[0] {
            CmAction::Reject { conn: 3, reason } => {
                assert!(reason.contains("no configured interface"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // A slot frees up when the first connection goes away.
        s.on_event(&CmEvent::Established(1));
        assert_eq!(
            s.on_event(&CmEvent::Disconnected(1)),
            vec![CmAction::StopWorker(1)]
        );
        assert_eq!(s.connections(), 0);
        assert!(matches!(
            s.on_event(&request(4, "198.18.0.1", 1))[0],
            CmAction::Accept { .. }
        ));
    }

    #[test]
    fn disconnect_before_establishment_starts_and_stops_nothing() {
        let mut s = Server::new(vec![iface(0, "data", "198.18.0.1")], 1);
        s.on_event(&request(1, "198.18.0.1", 1));
        assert!(s.on_event(&CmEvent::Disconnected(1)).is_empty());
        assert!(s.on_event(&CmEvent::Established(1)).is_empty(), "gone");
    }

    #[test]
    fn client_walks_resolve_route_connect_and_retries_with_backoff() {
        let policy = RetryPolicy {
            attempts: 3,
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(150),
        };
        let mut c = Client::new(5, 2, policy);
        let fail = |what: &str| CmEvent::Failed {
            conn: 5,
            what: what.into(),
        };
        assert_eq!(
            c.on_event(&fail("address resolution timed out")),
            vec![CmAction::Retry {
                conn: 5,
                attempt: 2,
                after: Duration::from_millis(100)
            }]
        );
        assert_eq!(
            c.on_event(&CmEvent::AddressResolved(5)),
            vec![CmAction::ResolveRoute(5)]
        );
        assert_eq!(
            c.on_event(&fail("route")),
            vec![CmAction::Retry {
                conn: 5,
                attempt: 3,
                after: Duration::from_millis(150)
            }],
            "doubled, capped"
        );
        c.on_event(&CmEvent::AddressResolved(5));
        assert_eq!(
            c.on_event(&CmEvent::RouteResolved(5)),
            vec![CmAction::Connect(5)]
        );
        assert_eq!(
            c.on_event(&CmEvent::Established(5)),
            vec![CmAction::StartWorker {
                conn: 5,
                interface: 2
            }]
        );
        assert!(c.is_established());
        assert_eq!(
            c.on_event(&CmEvent::Disconnected(5)),
            vec![CmAction::StopWorker(5)]
        );
    }

    #[test]
    fn client_gives_up_after_its_attempts_and_never_retries_a_reject() {
        let mut c = Client::new(
            1,
            0,
            RetryPolicy {
                attempts: 2,
                ..RetryPolicy::default()
            },
        );
        let fail = CmEvent::Failed {
            conn: 1,
            what: "unreachable".into(),
        };
        assert!(matches!(c.on_event(&fail)[0], CmAction::Retry { .. }));
        match &c.on_event(&fail)[0] {
            CmAction::GiveUp { reason, .. } => assert!(reason.contains("after 2 attempts")),
            other => panic!("{other:?}"),
        }
        let mut c = Client::new(1, 0, RetryPolicy::default());
        c.on_event(&CmEvent::AddressResolved(1));
        c.on_event(&CmEvent::RouteResolved(1));
        match &c.on_event(&CmEvent::Rejected {
            conn: 1,
            status: 28,
        })[0]
        {
            CmAction::GiveUp { reason, .. } => assert!(reason.contains("rejected")),
            other => panic!("{other:?}"),
        }
        assert!(c.on_event(&CmEvent::Established(1)).is_empty(), "closed");
    }
}
