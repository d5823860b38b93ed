//! `bench raw --inline`: the generators and checkers run to completion in the workers'
//! handlers (`delivery: handler`), on the cores that poll their queues, as testpmd's
//! forwarding engines do; without it they are threads of their own that reach the queues
//! through rings.

use super::*;
use dataplane::burst::Burst;
use dataplane::config::Delivery;
use dataplane::memory::QueueId;
use dataplane::plane::{Handler, HandlerError, HandlerQueues, HandlerTx};
use std::sync::Mutex;

/// `config` with every queue a `bench_tx` or `bench_rx` entry names made
/// `delivery: handler`.
pub(super) fn inline_config(config: &Config) -> Result<Config, BenchError> {
    let mut c = config.clone();
    for b in &config.bench.tx {
        let i = config
            .interface_index(&b.interface_name)
            .expect("validated");
        for q in c.interfaces[i].tx.iter_mut().flat_map(|t| &mut t.queues) {
            if q.id == b.queue_id {
                q.delivery = Delivery::Handler;
            }
        }
    }
    for b in &config.bench.rx {
        let i = config
            .interface_index(&b.interface_name)
            .expect("validated");
        let rx = c.interfaces[i].rx.as_mut();
        for q in rx.into_iter().flat_map(|r| &mut r.queues) {
            if b.queue_id.is_none_or(|id| id == q.id) {
                if q.capture.is_some() {
                    return Err(BenchError::NotInline(format!(
                        "RX queue {} of `{}` has a capture, whose statistics the checker thread reports",
                        q.id, b.interface_name
                    )));
                }
                q.delivery = Delivery::Handler;
            }
        }
        if c.interfaces[i]
            .rx
            .as_ref()
            .is_some_and(|r| !r.reorder.is_empty())
        {
            return Err(BenchError::NotInline(format!(
                "`{}` has reorders, whose counts the checker thread reports",
                b.interface_name
            )));
        }
    }
    Ok(c)
}

/// What the handlers share with the bench's thread.
#[derive(Default)]
struct Shared {
    stop_tx: Arc<AtomicBool>,
    stop_rx: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    generated: Mutex<Vec<GeneratorResult>>,
    checked: Mutex<Vec<CheckerResult>>,
}

/// The running handlers of an inline bench, seen from the bench's thread.
pub(super) struct InlineSides {
    shared: Arc<Shared>,
    generators: usize,
    checkers: usize,
}

/// Starts the data plane with the bench's handlers: every worker with bench queues runs
/// the generators of its TX queues and the checkers of its RX queues.
pub(super) fn start(
    config: &Config,
    opts: &RawOptions,
    (stop_tx, stop_rx): (&Arc<AtomicBool>, &Arc<AtomicBool>),
    (sent, received): (&Arc<AtomicU64>, &Arc<AtomicU64>),
) -> Result<(DataPlane, InlineSides), BenchError> {
    let shared = Arc::new(Shared {
        stop_tx: stop_tx.clone(),
        stop_rx: stop_rx.clone(),
        sent: sent.clone(),
        received: received.clone(),
        ..Shared::default()
    });
    let (mut generators, mut checkers) = (0, 0);
    let plane = DataPlane::start_with_handlers(config, |queues| {
        let h = BenchHandler::new(config, opts, queues, shared.clone())?;
        generators += h.sources.len();
        checkers += h.checks.len();
        Ok(Box::new(h))
    })?;
    Ok((
        plane,
        InlineSides {
            shared,
            generators,
            checkers,
        },
    ))
}

impl InlineSides {
    /// Checkers running (a TX-only run has none).
    pub(super) fn checkers(&self) -> usize {
        self.checkers
    }

    /// Waits (at most `deadline`) for every generator's result once `stop_tx` is set.
    pub(super) fn generator_results(&self, deadline: Duration) -> Vec<GeneratorResult> {
        crate::handler_results(&self.shared.generated, self.generators, deadline)
    }

    /// Waits (at most `deadline`) for every checker's result once `stop_rx` is set.
    pub(super) fn checker_results(&self, deadline: Duration) -> Vec<CheckerResult> {
        crate::handler_results(&self.shared.checked, self.checkers, deadline)
    }
}

/// The generators and checkers of one worker.
struct BenchHandler {
    /// Each generator with the index of its queue in [`HandlerTx::queues`].
    sources: Vec<(usize, FrameSource)>,
    /// Each checker with the (interface index, queue) pairs it checks.
    checks: Vec<(Vec<(u16, QueueId)>, BurstCheck)>,
    shared: Arc<Shared>,
    generators_done: bool,
    checkers_done: bool,
    /// A burst arrived since the last pass.
    got: bool,
}

impl BenchHandler {
    fn new(
        config: &Config,
        opts: &RawOptions,
        queues: &HandlerQueues<'_>,
        shared: Arc<Shared>,
    ) -> Result<Self, HandlerError> {
        let index = |name: &str| config.interface_index(name).expect("validated") as u16;
        let mut sources = Vec::new();
        for (stream, b) in config.bench.tx.iter().enumerate() {
            let port = index(&b.interface_name);
            if let Some(at) = queues
                .tx
                .iter()
                .position(|q| index(&q.interface) == port && q.queue == QueueId(b.queue_id))
            {
                sources.push((
                    at,
                    FrameSource::new(config, opts, stream, b, &queues.tx[at])?,
                ));
            }
        }
        let mut checks = Vec::new();
        for b in &config.bench.rx {
            let port = index(&b.interface_name);
            let served: Vec<(u16, QueueId)> = queues
                .rx
                .iter()
                .filter(|q| {
                    index(&q.interface) == port
                        && b.queue_id.is_none_or(|id| QueueId(id) == q.queue)
                })
                .map(|q| (port, q.queue))
                .collect();
            if !served.is_empty() {
                checks.push((served, BurstCheck::new(config, opts, b)));
            }
        }
        Ok(Self {
            sources,
            checks,
            shared,
            generators_done: false,
            checkers_done: false,
            got: false,
        })
    }
}

impl Handler for BenchHandler {
    fn on_burst(&mut self, burst: Burst, _tx: &mut HandlerTx<'_>) {
        if self.checkers_done {
            return;
        }
        self.got = true;
        let at = (burst.port().0, burst.queue());
        if let Some((_, check)) = self.checks.iter_mut().find(|(qs, _)| qs.contains(&at)) {
            let before = check.unique_packets();
            check.take(burst, None);
            let new = check.unique_packets().saturating_sub(before);
            self.shared.received.fetch_add(new, Ordering::Relaxed);
        }
    }

    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        let mut moved = false;
        if !self.generators_done {
            if self.shared.stop_tx.load(Ordering::Relaxed) {
                // A burst built but never sent is dropped with its source: its sequence
                // numbers were never seen, so it is not a gap.
                let results = self.sources.iter().map(|(_, s)| s.result());
                self.shared
                    .generated
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(results);
                self.sources.clear();
                self.generators_done = true;
            }
            for (at, source) in &mut self.sources {
                let before = source.packets();
                if source.step(&mut tx.queues()[*at]) == Step::Sent {
                    moved = true;
                    self.shared
                        .sent
                        .fetch_add(source.packets() - before, Ordering::Relaxed);
                }
            }
        }
        if !self.checkers_done {
            if self.shared.stop_rx.load(Ordering::Relaxed) {
                let results: Vec<CheckerResult> = self
                    .checks
                    .drain(..)
                    .map(|(_, c)| c.finish(&mut []))
                    .collect();
                self.shared
                    .checked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(results);
                self.checkers_done = true;
            } else if !std::mem::take(&mut self.got) {
                // Nothing new: check the GPU frames held so far now.
                for (_, check) in &mut self.checks {
                    check.idle();
                }
            }
        }
        moved
    }
}
