//! `Stream`: an established connection's RX and TX queues, its state and counters.

use super::*;

/// The application's end of a connection (see [`DataPlane::accept`]): its queues, run by
/// the worker of the connection's core. Dropping it closes the connection.
pub struct Stream {
    pub(super) rx: Mutex<RxQueue>,
    pub(super) tx: Mutex<TxQueue>,
    pub(super) state: Arc<dyn StreamState>,
    /// The worker running the connection died (seen by `poll`).
    pub(super) worker_failed: std::sync::OnceLock<WorkerFailed>,
    pub(super) send_region: Option<RegionId>,
    pub(super) interface: String,
    pub(super) slot: usize,
    #[cfg(feature = "rdma")]
    pub(super) qp: rdma::verbs::QpSettings,
}

impl Stream {
    /// The region sends come from (a buffer per message), if the slot has one.
    pub fn send_region(&self) -> Option<RegionId> {
        self.send_region
    }

    /// A burst of `count` packets from the connection's send region.
    pub fn alloc(&self, count: usize) -> Result<Burst, TxFailure> {
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .alloc(count)
    }

    /// Queues `burst` to be sent, one message per packet. Gives it back when the queue
    /// is full (try again later), the connection is closed, or the burst belongs to
    /// another connection or plane.
    pub fn send(&self, burst: Burst) -> Result<(), Burst> {
        if self.state.is_closed() {
            return Err(burst);
        }
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(burst)
            .map_err(|e| e.burst)
    }

    /// The next burst of received messages, if one arrived (also after the connection
    /// closed, for what arrived before). When the worker running the connection died, the
    /// stream counts as closed and [`Stream::last_error`] says why.
    pub fn poll(&self) -> Option<Burst> {
        match self.rx.lock().unwrap_or_else(|e| e.into_inner()).poll() {
            Ok(b) => b,
            Err(failed) => {
                let _ = self.worker_failed.set(failed);
                None
            }
        }
    }

    /// True once the connection is gone (the peer disconnected, an error, or shutdown)
    /// and everything it received is in this end's queue: [`Stream::poll`] returns the
    /// rest, then nothing more arrives.
    pub fn is_closed(&self) -> bool {
        if self.worker_failed.get().is_some() {
            return true;
        }
        self.state.is_closed()
            && self
                .rx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .ring
                .is_abandoned()
    }

    /// Counters so far.
    pub fn stats(&self) -> StreamStats {
        self.state.stats()
    }

    /// The last error, if any (a dead worker's failure first).
    pub fn last_error(&self) -> Option<String> {
        match self.worker_failed.get() {
            Some(f) => Some(f.to_string()),
            None => self.state.last_error(),
        }
    }

    /// The interface this connection belongs to (for a server, the listener's that
    /// accepted it).
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The interface's queue slot this connection occupies (its regions and core).
    pub fn queue(&self) -> usize {
        self.slot
    }

    /// The retry and RNR settings the queue pair runs with (read back from the device).
    #[cfg(feature = "rdma")]
    pub fn qp_settings(&self) -> rdma::verbs::QpSettings {
        self.qp
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // A flag: the worker retires the connection's tasks, and with them the connection.
        self.state.close();
    }
}
