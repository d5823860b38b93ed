//! The connection-manager thread: owns the listeners, decides on each request (the
//! interface it belongs to, a free slot, `allowed_peers`), and closes what rdma_cm reports
//! gone.

use super::*;

/// The connection-manager thread: owns the listeners, decides on requests, and closes
/// every connection rdma_cm reports gone (its worker then retires it).
pub(super) struct CmLoop {
    pub(super) shared: Arc<Shared>,
    pub(super) server: Server,
    /// Listeners by interface position.
    pub(super) listeners: Vec<(usize, Listener)>,
    pub(super) deliver: BTreeMap<usize, SyncSender<Result<Established, ConnectionError>>>,
    /// Every accepted connection by its rdma_cm key: our connection id and its state.
    pub(super) conn_of_key: BTreeMap<u64, (u64, Arc<ConnState>)>,
    pub(super) next_conn: u64,
}

impl CmLoop {
    pub(super) fn run(&mut self, stop: &AtomicBool) {
        let stopping = || stop.load(Ordering::Acquire);
        while !stopping() {
            for n in 0..self.listeners.len() {
                let (position, listener) = &self.listeners[n];
                let position = *position;
                match listener.next_event(Duration::from_millis(2), &stopping) {
                    Ok(ListenerEvent::Request(req)) => self.on_request(position, req),
                    Ok(ListenerEvent::Disconnected(key)) => self.on_disconnected(key),
                    Ok(ListenerEvent::Established(_)) => {}
                    Ok(ListenerEvent::Other(what)) => {
                        tracing::debug!(interface = position, "rdma_cm event {what}")
                    }
                    Err(VerbsError::Timeout(_) | VerbsError::Stopped(_)) => {}
                    Err(e) => tracing::warn!(interface = position, "rdma_cm: {e}"),
                }
            }
        }
    }

    /// A connection request on listener `listening`: accepted into a free slot or
    /// rejected; the outcome goes to the application's accept queue.
    pub(super) fn on_request(&mut self, listening: usize, req: rdma::verbs::Request) {
        let conn_id = self.next_conn;
        self.next_conn += 1;
        let shared = self.shared.clone();
        let local = shared.interfaces[listening].local;
        let decision = self.server.on_event(&CmEvent::ConnectRequest {
            conn: conn_id,
            local,
            remote: local,
            device_port: req.device_port,
        });
        let name = shared.interfaces[listening].name.clone();
        let result = match decision.into_iter().next() {
            Some(CmAction::Accept { interface, .. }) => {
                // The owner is the listener's interface (by configuration index).
                let Some(position) = shared.interfaces.iter().position(|i| i.index == interface)
                else {
                    req.reject();
                    return;
                };
                match self.accept(conn_id, position, req) {
                    Some(result) => result,
                    None => return,
                }
            }
            Some(CmAction::Reject { reason, .. }) => {
                // Peers can send requests as fast as they like: one line a second.
                static WARN: crate::stats::WarnLimiter = crate::stats::WarnLimiter::new();
                if let Some(held) = WARN.allow() {
                    tracing::warn!(
                        interface = %name,
                        "connection request rejected: {reason}{}",
                        crate::stats::WarnLimiter::note(held)
                    );
                }
                req.reject();
                Err(ConnectionError::Rejected {
                    interface: name,
                    reason,
                })
            }
            other => {
                req.reject();
                Err(ConnectionError::Rejected {
                    interface: name,
                    reason: format!("unexpected connection decision {other:?}"),
                })
            }
        };
        if let Some(tx) = self.deliver.get(&listening) {
            // A full or closed queue drops the connection, which closes it.
            let _ = tx.try_send(result);
        }
    }

    /// Accepts a request for interface `position` into a free slot (one queue carries one
    /// connection) and establishes it. None when the request is dropped without an
    /// answer to the application: a peer outside `allowed_peers`.
    fn accept(
        &mut self,
        conn_id: u64,
        position: usize,
        req: rdma::verbs::Request,
    ) -> Option<Result<Established, ConnectionError>> {
        let shared = self.shared.clone();
        let owner = &shared.interfaces[position];
        let transport = |e: VerbsError| ConnectionError::Transport {
            interface: owner.name.clone(),
            source: Box::new(e),
        };
        let accepted = match owner.take_slot() {
            None => {
                req.reject();
                Err(None)
            }
            Some(slot) => {
                let admit = |peer| owner.allowed_peers.allows(peer);
                match req.accept_if(owner.params(slot), admit) {
                    Ok(conn) => Ok((slot, conn)),
                    Err(e) => {
                        owner.release_slot(slot);
                        Err(Some(e))
                    }
                }
            }
        };
        if let Err(Some(VerbsError::PeerRefused { peer })) = &accepted {
            // Counted and logged, not handed to `accept`: an outsider's requests
            // must not wake, or end, the application's wait for its real peer.
            owner.rejected_peers.fetch_add(1, Ordering::Relaxed);
            self.server.on_event(&CmEvent::Failed {
                conn: conn_id,
                what: format!("{peer} is not in allowed_peers"),
            });
            static REFUSED: crate::stats::WarnLimiter = crate::stats::WarnLimiter::new();
            if let Some(held) = REFUSED.allow() {
                tracing::warn!(
                    interface = %owner.name,
                    "connection request from {peer} rejected: not in allowed_peers ({}){}",
                    owner.allowed_peers,
                    crate::stats::WarnLimiter::note(held)
                );
            }
            return None;
        }
        Some(match accepted {
            Ok((slot, conn)) => {
                let key = conn.key();
                self.server.on_event(&CmEvent::Established(conn_id));
                match establish(&shared, position, slot, conn, false) {
                    Ok((established, state)) => {
                        self.conn_of_key.insert(key, (conn_id, state));
                        Ok(established)
                    }
                    Err(e) => {
                        self.server.on_event(&CmEvent::Disconnected(conn_id));
                        Err(transport(e))
                    }
                }
            }
            Err(None) => {
                // Every queue is taken (the state machine counts all interfaces).
                let reason = format!(
                    "interface `{}` has no free queue ({} queues, each carries one connection); close a connection first",
                    owner.name,
                    owner.slots.len()
                );
                self.server.on_event(&CmEvent::Failed {
                    conn: conn_id,
                    what: reason.clone(),
                });
                Err(ConnectionError::Rejected {
                    interface: owner.name.clone(),
                    reason,
                })
            }
            Err(Some(e)) => {
                self.server.on_event(&CmEvent::Failed {
                    conn: conn_id,
                    what: e.to_string(),
                });
                Err(transport(e))
            }
        })
    }

    pub(super) fn on_disconnected(&mut self, key: u64) {
        let Some((conn, state)) = self.conn_of_key.remove(&key) else {
            return;
        };
        // Closing is a flag: the worker retires the connection's ports and with them the
        // connection and its slot. Nothing is joined here.
        state.close();
        self.server.on_event(&CmEvent::Disconnected(conn));
    }
}
