//! `bench fwd --inline`: the relay runs to completion in the workers' handlers, each RX
//! burst forwarded on the same core that polled it (testpmd's `io` forwarding on its
//! lcores); the RX queue and the TX queue it forwards to must share a worker.

use super::*;
use dataplane::burst::Burst;
use dataplane::config::Delivery;
use dataplane::memory::{PortIndex, QueueId};
use dataplane::plane::{Handler, HandlerError, HandlerQueues, HandlerTx};
use std::collections::VecDeque;
use std::sync::Mutex;

/// `config` with the relay's queues made `delivery: handler`.
pub(super) fn inline_config(
    config: &Config,
    (rx_if, rx_ids): (usize, &[u16]),
    (tx_if, tx_ids): (usize, &[u16]),
) -> Config {
    let mut c = config.clone();
    for q in c.interfaces[rx_if]
        .rx
        .iter_mut()
        .flat_map(|r| &mut r.queues)
    {
        if rx_ids.contains(&q.id) {
            q.delivery = Delivery::Handler;
        }
    }
    for q in c.interfaces[tx_if]
        .tx
        .iter_mut()
        .flat_map(|t| &mut t.queues)
    {
        if tx_ids.contains(&q.id) {
            q.delivery = Delivery::Handler;
        }
    }
    c
}

/// What the handlers hand back when forwarding stops.
pub(super) struct Shared {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) forwarded: Arc<AtomicU64>,
    pub(super) results: Mutex<Vec<ThreadResult>>,
}

/// The relay of one worker: its RX queues, each with the TX queue it forwards to.
pub(super) struct InlineRelay {
    /// (interface index, RX queue) and the index of its TX queue in [`HandlerTx::queues`].
    routes: Vec<((u16, QueueId), usize)>,
    mac_swap: bool,
    /// `--tx-first`: frames and bursts per TX queue, sent on the first pass.
    seed: Option<(FrameBuilder, usize)>,
    /// Bursts a TX ring had no room for, oldest first, with their TX queue.
    backlog: VecDeque<(usize, Burst)>,
    result: ThreadResult,
    shared: Arc<Shared>,
    done: bool,
}

impl InlineRelay {
    /// The relay of the worker serving `queues`: RX queue `rx_ids[i]` forwards to TX queue
    /// `tx_ids[i % tx_ids.len()]`, which must be on the same worker.
    pub(super) fn new(
        queues: &HandlerQueues<'_>,
        (rx_if, rx_ids): (u16, &[u16]),
        (tx_if, tx_ids): (u16, &[u16]),
        opts: &FwdOptions,
        seed: Option<FrameBuilder>,
        shared: Arc<Shared>,
    ) -> Result<Self, HandlerError> {
        let mut routes = Vec::new();
        for rx in queues.rx {
            let Some(i) = rx_ids.iter().position(|&id| QueueId(id) == rx.queue) else {
                continue;
            };
            let to = tx_ids[i % tx_ids.len()];
            let at = queues
                .tx
                .iter()
                .position(|t| t.port() == PortIndex(tx_if) && t.queue == QueueId(to))
                .ok_or_else(|| {
                    format!(
                        "--inline: RX queue {} forwards to TX queue {to}, which another core serves; put both on one cpu_core",
                        rx.queue
                    )
                })?;
            routes.push(((rx_if, rx.queue), at));
        }
        for t in queues.tx {
            if opts.tx_first > 0 && (!t.host_accessible() || t.segment_sizes().len() != 1) {
                return Err(FwdError::UnusableTxQueue {
                    interface: t.interface.clone(),
                    queue: t.queue.0,
                    reason: "must have one memory region in host memory",
                }
                .into());
            }
        }
        Ok(Self {
            routes,
            mac_swap: opts.mac_swap,
            seed: seed.map(|b| (b, opts.tx_first)),
            backlog: VecDeque::new(),
            result: ThreadResult::default(),
            shared,
            done: false,
        })
    }

    /// Forwards `burst` on TX queue `at`, or keeps it for the next pass when the ring is
    /// full; false when the queue refused it for good.
    fn forward(&mut self, tx: &mut HandlerTx<'_>, at: usize, burst: Burst) -> bool {
        let (n, bytes) = (burst.len() as u64, burst.bytes());
        match tx.queues()[at].forward(burst) {
            Ok(()) => {
                self.result.packets += n;
                self.result.bytes += bytes;
                self.shared.forwarded.fetch_add(n, Ordering::Relaxed);
                true
            }
            Err(e) if e.reason == TxFailure::RingFull => {
                self.backlog.push_back((at, e.burst));
                true
            }
            Err(e) => {
                self.result.unforwarded += n;
                self.result.problem.get_or_insert(e.reason.to_string());
                false
            }
        }
    }
}

impl Handler for InlineRelay {
    fn on_burst(&mut self, mut burst: Burst, tx: &mut HandlerTx<'_>) {
        if self.done {
            return;
        }
        let from = (burst.port().0, burst.queue());
        let Some(&(_, at)) = self.routes.iter().find(|(r, _)| *r == from) else {
            return;
        };
        if self.mac_swap {
            swap_macs(&mut burst);
        }
        if self.backlog.is_empty() {
            self.forward(tx, at, burst);
        } else {
            // Keep the order: behind what waits.
            self.backlog.push_back((at, burst));
        }
    }

    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        if self.done {
            return false;
        }
        if self.shared.stop.load(Ordering::Relaxed) {
            self.result.unforwarded += self
                .backlog
                .drain(..)
                .map(|(_, b)| b.len() as u64)
                .sum::<u64>();
            let result = std::mem::take(&mut self.result);
            self.shared
                .results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(result);
            self.done = true;
            return false;
        }
        if let Some((mut builder, bursts)) = self.seed.take() {
            // Sent without waiting for room: the worker that would make it is this one.
            for q in tx.queues() {
                for _ in 0..bursts {
                    let sent =
                        q.alloc(q.batch_size)
                            .map_err(|e| e.to_string())
                            .and_then(|mut b| {
                                builder.fill(&mut b);
                                let n = b.len() as u64;
                                q.send(b).map(|()| n).map_err(|e| e.reason.to_string())
                            });
                    match sent {
                        Ok(n) => self.result.seeded += n,
                        Err(e) => {
                            self.result
                                .problem
                                .get_or_insert(format!("--tx-first: {e}"));
                            break;
                        }
                    }
                }
            }
        }
        let mut moved = false;
        while let Some((at, burst)) = self.backlog.pop_front() {
            let waiting = self.backlog.len();
            if !self.forward(tx, at, burst) {
                continue;
            }
            if self.backlog.len() > waiting {
                // Still no room: it went back to the end; put it first again.
                let last = self.backlog.pop_back().expect("just pushed");
                self.backlog.push_front(last);
                break;
            }
            moved = true;
        }
        moved
    }
}
