//! Busy-poll workers: one thread per configured core, serving every queue on that core
//! round-robin. RX tasks assemble bursts (closed at `batch_size` packets or `timeout_us`
//! after their first packet) and push them to the queue's ring; TX tasks take bursts from
//! the queue's ring and hand them to the engine.

#![forbid(unsafe_code)]

use crate::burst::Burst;
use crate::engine::{Overflow, RxPort, TxPort};
use crate::memory::RegionSet;
use crate::stats::{DropReason, QueueCounters};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod rx;
#[cfg(test)]
mod tests;
mod tx;

pub use crate::clock::WallClock;
pub use rx::{RxTask, STAGE_BURSTS_PER_POLL, StageTask};
pub use tx::{LatenessSummary, PACING_DEPTH_NS, Pacer, SendLateness, TxTask};

/// How long a worker polls without finding work before it yields its core, and then
/// yields every [`IDLE_PASSES_PER_CHECK`] empty passes. Short, so that an application
/// thread sharing the worker's core (the reference's socket examples, one message per
/// burst) runs within microseconds instead of after the worker's time slice; long enough
/// that a stream with short gaps never pays for the system call on a core of its own.
const IDLE_NS_BEFORE_YIELD: u64 = 10_000;

/// Empty passes between looks at the clock while idle.
const IDLE_PASSES_PER_CHECK: u32 = 16;

/// Idle time after which a worker hands its cached buffers back to their pools.
const IDLE_NS_BEFORE_FLUSH: u64 = 2_000_000;

/// Passes between a worker's housekeeping: taking tasks handed to it while it runs
/// (connections) and retiring tasks whose port closed.
const HOUSEKEEPING_EVERY: u32 = 1024;

/// Flags a worker reads; each worker has its own.
#[derive(Default)]
pub struct WorkerControl {
    /// Set to make the worker exit.
    pub stop: AtomicBool,
    /// Set to deliver partial RX bursts as soon as the queue is idle (drain at the end).
    pub flush: AtomicBool,
    /// Set when `incoming` holds tasks.
    has_incoming: AtomicBool,
    /// Tasks handed to the running worker (a new connection's queues).
    incoming: std::sync::Mutex<Vec<Task>>,
    /// What the worker did, for metrics and reports.
    pub activity: WorkerActivity,
    /// Set before the worker starts to make it count the ticks of its busy passes
    /// ([`WorkerActivity::busy_ticks`]): two counter reads per pass, so only when metrics
    /// are served.
    pub time_busy_passes: AtomicBool,
}

/// What one worker did since it started, published every [`HOUSEKEEPING_EVERY`] passes
/// (and when it stops), so reading it costs the worker nothing per packet. On a cache
/// line of its own: the stop flag beside it is read every pass.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerActivity {
    passes: AtomicU64,
    busy_passes: AtomicU64,
    busy_ticks: AtomicU64,
    timed: AtomicBool,
    tid: std::sync::atomic::AtomicI32,
}

/// A reading of one worker, taken twice to get its [`WorkerUse`] over an interval.
#[derive(Clone, Copy, Debug)]
pub struct WorkerReading {
    core: u32,
    at: Instant,
    cpu_s: Option<f64>,
    passes: u64,
    busy_passes: u64,
    busy_ticks: Option<u64>,
}

impl WorkerReading {
    /// Reads `activity` of the worker on `core` now.
    pub fn now(core: u32, activity: &WorkerActivity) -> Self {
        Self {
            core,
            at: Instant::now(),
            cpu_s: crate::sysinfo::thread_cpu_seconds(activity.thread_id()),
            passes: activity.passes(),
            busy_passes: activity.busy_passes(),
            busy_ticks: activity.busy_ticks(),
        }
    }
}

/// What a worker did over an interval.
#[derive(Clone, Debug, serde::Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct WorkerUse {
    /// Its core.
    pub core: u32,
    /// CPU seconds it used (user and system), when readable.
    pub cpu_seconds: Option<f64>,
    /// Those over the interval's wall time (1.0: a whole core, as busy polling takes).
    pub cpu_share: Option<f64>,
    /// Passes over its queues in which one moved packets, over all passes.
    pub busy_fraction: f64,
    /// Seconds of busy passes, when it timed them (metrics on).
    pub busy_seconds: Option<f64>,
}

impl WorkerUse {
    /// The interval from `start` to `end` (readings of the same workers, in order).
    pub fn between(start: &[WorkerReading], end: &[WorkerReading]) -> Vec<WorkerUse> {
        start
            .iter()
            .zip(end)
            .map(|(a, b)| {
                let wall = (b.at - a.at).as_secs_f64().max(1e-9);
                let cpu = a.cpu_s.zip(b.cpu_s).map(|(a, b)| (b - a).max(0.0));
                let passes = b.passes.saturating_sub(a.passes);
                WorkerUse {
                    core: b.core,
                    cpu_seconds: cpu,
                    cpu_share: cpu.map(|c| c / wall),
                    busy_fraction: if passes == 0 {
                        0.0
                    } else {
                        b.busy_passes.saturating_sub(a.busy_passes) as f64 / passes as f64
                    },
                    busy_seconds: a.busy_ticks.zip(b.busy_ticks).map(|(a, b)| {
                        b.saturating_sub(a) as f64 / crate::cycles::ticks_per_second()
                    }),
                }
            })
            .collect()
    }
}

impl WorkerActivity {
    /// Passes over its tasks.
    pub fn passes(&self) -> u64 {
        self.passes.load(Ordering::Relaxed)
    }

    /// Passes in which some task moved packets.
    pub fn busy_passes(&self) -> u64 {
        self.busy_passes.load(Ordering::Relaxed)
    }

    /// [`crate::cycles`] ticks spent in busy passes, when the worker times them (see
    /// [`WorkerControl::time_busy_passes`]); `None` otherwise.
    pub fn busy_ticks(&self) -> Option<u64> {
        self.timed
            .load(Ordering::Relaxed)
            .then(|| self.busy_ticks.load(Ordering::Relaxed))
    }

    /// The worker thread's Linux thread id (0 before it started), for its CPU time in
    /// `/proc/self/task/TID/stat`.
    pub fn thread_id(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    fn publish(&self, passes: u64, busy: u64, ticks: u64) {
        self.passes.store(passes, Ordering::Relaxed);
        self.busy_passes.store(busy, Ordering::Relaxed);
        self.busy_ticks.store(ticks, Ordering::Relaxed);
    }
}

impl WorkerControl {
    /// Hands `tasks` to the running worker; it takes them within a few microseconds
    /// (its next housekeeping pass). The lock is only held to move the tasks.
    pub fn attach(&self, tasks: Vec<Task>) {
        self.incoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tasks);
        self.has_incoming.store(true, Ordering::Release);
    }

    fn take_incoming(&self, into: &mut Vec<Task>) {
        if self.has_incoming.swap(false, Ordering::Acquire) {
            into.append(&mut self.incoming.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }
}

/// The removal of one queue from a running plane ([`crate::DataPlane::change`]): the plane
/// asks, the queue's task finishes what it holds on its worker's next housekeeping pass
/// and says it is done. Read at housekeeping, and by the queue's application end on each
/// send, so it gets cache lines of its own (a neighbouring allocation written per burst
/// would make each read a miss).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Retirement {
    asked: AtomicBool,
    done: AtomicBool,
}

impl Retirement {
    /// Asks the task to finish and leave its worker.
    pub fn ask(&self) {
        self.asked.store(true, Ordering::Release);
    }

    /// True once asked.
    pub fn asked(&self) -> bool {
        self.asked.load(Ordering::Acquire)
    }

    /// True once the task left its worker, having delivered (RX) or sent (TX) what it held.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    fn finished(&self) {
        self.done.store(true, Ordering::Release);
    }
}

/// A worker that stopped by panicking: its name and the panic's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("worker `{worker}` failed: {message}")]
pub struct WorkerFailed {
    /// The worker thread's name (`dp-worker-CORE`).
    pub worker: String,
    /// The panic message.
    pub message: String,
}

/// Whether a worker is still running its queues; shared with the queue handles it serves.
/// Read on every `poll`, `alloc` and `send`, so it gets cache lines of its own: a
/// neighbouring allocation written by the worker (its queue counters) would otherwise make
/// each read a miss.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct WorkerHealth {
    failed: AtomicBool,
    failure: std::sync::OnceLock<WorkerFailed>,
    /// The plane was shut down: the worker is gone on purpose.
    stopped: AtomicBool,
}

impl WorkerHealth {
    /// Records that the plane stopped the worker (queues then report `Stopped`).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// True once the plane stopped the worker.
    #[inline]
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Records that the worker died; the first failure wins.
    pub fn fail(&self, failure: WorkerFailed) {
        let _ = self.failure.set(failure);
        self.failed.store(true, Ordering::Release);
    }

    /// The failure, if the worker died (one atomic load when it did not).
    #[inline]
    pub fn failure(&self) -> Option<&WorkerFailed> {
        if self.failed.load(Ordering::Acquire) {
            self.failure.get()
        } else {
            None
        }
    }
}

/// The text of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

/// Runs `tasks` like [`run`], catching a panic: the worker's queues are then marked failed
/// in `health` (their handles report it) instead of going silent. The tasks, and the
/// bursts they hold, are dropped either way, so their buffers go back.
pub fn run_guarded(tasks: Vec<Task>, control: &WorkerControl, name: &str, health: &WorkerHealth) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(tasks, control)));
    if let Err(payload) = outcome {
        let failure = WorkerFailed {
            worker: name.to_owned(),
            message: panic_message(payload.as_ref()),
        };
        tracing::error!("{failure}");
        health.fail(failure);
    }
}

/// The time of one worker pass: read from the clock only when a task needs it (most passes
/// need none: a burst starts or may have timed out), then the same for every task of the
/// pass. Tests and simulations fix it with [`PassClock::at`].
pub struct PassClock {
    fixed: Option<Instant>,
    read: std::cell::Cell<Option<Instant>>,
}

impl PassClock {
    /// A clock that always says `now`.
    pub fn at(now: Instant) -> Self {
        Self {
            fixed: Some(now),
            read: std::cell::Cell::new(None),
        }
    }

    /// The worker's clock: the system clock, read at most once per pass.
    fn live() -> Self {
        Self {
            fixed: None,
            read: std::cell::Cell::new(None),
        }
    }

    /// The pass's time.
    #[inline]
    pub fn now(&self) -> Instant {
        if let Some(t) = self.fixed.or(self.read.get()) {
            return t;
        }
        let t = Instant::now();
        self.read.set(Some(t));
        t
    }

    /// Starts the next pass: the next `now` reads the clock again.
    #[inline]
    fn next_pass(&self) {
        self.read.set(None);
    }
}

/// Work a higher layer gives a worker to poll beside its queues: the plane's run-to-
/// completion handler, which takes the RX queues' bursts on this core and sends on its TX
/// queues.
pub trait Job: Send {
    /// One poll: true when it moved packets.
    fn poll(&mut self) -> bool;
}

/// A queue served by a worker.
pub enum Task {
    /// Receive.
    Rx(RxTask),
    /// Transmit.
    Tx(TxTask),
    /// An RX queue's stage on its own core.
    Stage(StageTask),
    /// Other work on this core (see [`Job`]).
    Job(Box<dyn Job>),
}

impl Task {
    fn counters(&self) -> Option<&QueueCounters> {
        match self {
            Task::Rx(rx) => Some(rx.counters()),
            Task::Tx(tx) => Some(&tx.counters),
            Task::Stage(st) => Some(&st.out.counters),
            Task::Job(_) => None,
        }
    }

    /// One poll: true when it moved packets.
    #[inline]
    fn poll(&mut self, flush: bool, clock: &PassClock) -> bool {
        match self {
            Task::Rx(rx) => rx.poll(flush, clock),
            Task::Tx(tx) => tx.poll(),
            Task::Stage(st) => st.poll(),
            Task::Job(job) => job.poll(),
        }
    }

    /// True once the task's port closed and it holds nothing more to deliver; the worker
    /// then drops it (a closed TX task's unsent bursts go back to their pools).
    fn retire(&mut self) -> bool {
        match self {
            Task::Rx(rx) => rx.retire(),
            Task::Tx(tx) => tx.retire(),
            Task::Stage(st) => st.retire(),
            Task::Job(_) => false,
        }
    }
}

/// Runs `tasks` on the current thread until `control.stop` is set. Bursts still held when
/// stopping are dropped here, which returns their buffers.
pub fn run(mut tasks: Vec<Task>, control: &WorkerControl) {
    let mut idle = 0u32;
    let mut idle_since = 0u64;
    let mut caches_flushed = false;
    let per_ns = crate::cycles::ticks_per_second() / 1e9;
    let yield_after = (IDLE_NS_BEFORE_YIELD as f64 * per_ns) as u64;
    let flush_after = (IDLE_NS_BEFORE_FLUSH as f64 * per_ns) as u64;
    let mut passes = 0u64;
    let (mut busy_passes, mut busy_ticks) = (0u64, 0u64);
    let activity = &control.activity;
    activity.tid.store(
        rustix::thread::gettid().as_raw_nonzero().get(),
        Ordering::Relaxed,
    );
    let tick_passes = control.time_busy_passes.load(Ordering::Relaxed);
    activity.timed.store(tick_passes, Ordering::Relaxed);
    let clock = PassClock::live();
    let timed = crate::stats::stages_timed();
    while !control.stop.load(Ordering::Relaxed) {
        passes += 1;
        if passes.is_multiple_of(HOUSEKEEPING_EVERY as u64) {
            control.take_incoming(&mut tasks);
            tasks.retain_mut(|t| !t.retire());
            activity.publish(passes, busy_passes, busy_ticks);
        }
        let pass_started = if tick_passes {
            crate::cycles::ticks()
        } else {
            0
        };
        let flush = control.flush.load(Ordering::Relaxed);
        // At most one clock read per pass, and only when a task needs the time.
        clock.next_pass();
        let mut busy = false;
        for t in &mut tasks {
            if timed {
                let started = std::time::Instant::now();
                if t.poll(flush, &clock) {
                    busy = true;
                    if let Some(c) = t.counters() {
                        c.add_busy_ns(started.elapsed().as_nanos() as u64);
                    }
                }
            } else {
                busy |= t.poll(flush, &clock);
            }
        }
        if busy {
            idle = 0;
            caches_flushed = false;
            busy_passes += 1;
            if tick_passes {
                busy_ticks += crate::cycles::ticks().wrapping_sub(pass_started);
            }
        } else {
            if idle == 0 {
                idle_since = crate::cycles::ticks();
            }
            idle = idle.wrapping_add(1);
            if idle.is_multiple_of(IDLE_PASSES_PER_CHECK) {
                let idle_ticks = crate::cycles::ticks().wrapping_sub(idle_since);
                if idle_ticks >= yield_after {
                    // Once per idle spell: buffers this worker's caches hold go back to the
                    // shared lists, so an idle worker strands none that another queue needs
                    // (not sooner: between bursts the cache is what keeps allocations off
                    // the shared lock).
                    if !caches_flushed && idle_ticks >= flush_after {
                        caches_flushed = true;
                        crate::memory::pool::flush_thread_caches();
                    }
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
        }
    }
    activity.publish(passes, busy_passes, busy_ticks);
}
