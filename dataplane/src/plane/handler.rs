//! Run to completion: the application's code on the polling core.
//!
//! Queues configured `delivery: handler` have no application end on another thread. Their
//! worker calls the [`Handler`] the application gave for its core inside its poll loop:
//! with every burst its handler RX queues deliver (after the stage, the reorder and the
//! capture, as [`RxQueue::poll`] delivers them), and once per pass for generation. The
//! handler sends on the worker's handler TX queues ([`HandlerTx`]), which the same worker
//! transmits later in the same pass. Queue rings stay, but both of their ends are on this
//! core, so no packet, descriptor or buffer leaves it; buffers allocated here come from
//! this worker's pool caches and go back to them.
//!
//! A worker pass then runs, in order: the core's RX tasks, the handler, the TX tasks.

#![forbid(unsafe_code)]

use super::{RxQueue, TxQueue};
use crate::burst::Burst;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;

/// Code run by a worker for its `delivery: handler` queues, on the worker's core.
///
/// It runs on the polling thread: time spent here is time the worker does not poll, as
/// in any DPDK run-to-completion loop. A panic here fails the worker like a panic of the
/// worker itself (its queues report it, see `WorkerFailed`).
pub trait Handler: Send {
    /// A burst received on one of this worker's handler RX queues (its `port()` and
    /// `queue()` say which). Forward it ([`TxQueue::forward`]), reply, or drop it (its
    /// buffers go back to their pool).
    fn on_burst(&mut self, burst: Burst, tx: &mut HandlerTx<'_>);

    /// Once per worker pass, after the RX queues: generate traffic. True when it moved
    /// packets (an idle worker yields its core now and then; see the worker loop).
    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        let _ = tx;
        false
    }
}

/// The handler TX queues of one worker, handed to its [`Handler`].
pub struct HandlerTx<'a> {
    queues: &'a mut [TxQueue],
}

impl HandlerTx<'_> {
    /// Every handler TX queue of this worker, in configuration order.
    pub fn queues(&mut self) -> &mut [TxQueue] {
        self.queues
    }

    /// TX queue `queue` of interface `port` (the interface's index), if this worker
    /// serves it as a handler queue.
    pub fn queue(&mut self, port: u16, queue: u16) -> Option<&mut TxQueue> {
        self.queues
            .iter_mut()
            .find(|q| q.port == PortIndex(port) && q.queue == QueueId(queue))
    }
}

/// What one worker serves for its handler, shown to the factory that makes the handler
/// (to read the queues' names, segment sizes and memory before the worker starts).
pub struct HandlerQueues<'a> {
    /// The worker's core.
    pub core: u32,
    /// Its handler RX queues.
    pub rx: &'a [RxQueue],
    /// Its handler TX queues, in the order of [`HandlerTx::queues`].
    pub tx: &'a [TxQueue],
}

/// Why a handler factory made no handler; start fails with it
/// ([`super::StartError::Handler`]).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// The worker job that runs a handler: polls the handler RX queues' application ends on
/// this core and calls the handler with what they deliver.
pub(super) struct HandlerJob {
    pub(super) handler: Box<dyn Handler>,
    pub(super) rx: Vec<RxQueue>,
    pub(super) tx: Vec<TxQueue>,
}

/// Bursts taken from one RX queue in one pass, so a queue that always has more does not
/// keep the worker from its other queues and its stop flag.
const BURSTS_PER_QUEUE_PER_PASS: usize = 4;

impl crate::worker::Job for HandlerJob {
    fn poll(&mut self) -> bool {
        let mut moved = false;
        let mut tx = HandlerTx {
            queues: &mut self.tx,
        };
        for rx in &mut self.rx {
            for _ in 0..BURSTS_PER_QUEUE_PER_PASS {
                // The worker polling its own queue cannot see itself failed or stopped.
                let Ok(Some(burst)) = rx.poll() else { break };
                moved = true;
                self.handler.on_burst(burst, &mut tx);
            }
        }
        moved | self.handler.on_pass(&mut tx)
    }
}
