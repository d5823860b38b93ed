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

/// Empty passes over all tasks before a worker yields its core once. Keeps busy polling
/// honest on machines with fewer cores than busy threads, at ~1 µs worst-case latency.
const IDLE_PASSES_BEFORE_YIELD: u32 = 1024;

/// Yields of an idle worker (each after [`IDLE_PASSES_BEFORE_YIELD`] empty passes, a few
/// milliseconds in all) before it hands its cached buffers back to their pools.
const IDLE_YIELDS_BEFORE_FLUSH: u32 = 64;

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

/// Receive task of one queue.
pub struct RxTask {
    pub(crate) port: Box<dyn RxPort>,
    pub(crate) regions: Arc<RegionSet>,
    pub(crate) port_id: u16,
    pub(crate) queue_id: u16,
    pub(crate) batch_size: usize,
    pub(crate) timeout: Option<Duration>,
    assembling: Option<Burst>,
    first_packet_at: Option<Instant>,
    /// Where closed bursts go: the stage (when on this core) and the queue's ring.
    out: Delivery,
    /// `hardware_timestamps` done in software: stamps each received packet.
    clock: Option<WallClock>,
    /// Hands bursts to a stage task, which hears of the port going idle by an empty burst
    /// (see [`StageTask`]); true once a burst went since the last such mark.
    idle_mark_due: Option<bool>,
}

pub use crate::clock::WallClock;

/// The delivering end of an RX queue: an optional stage, then the ring the application
/// (or, with a `stage_core`, the stage task on that core) reads.
struct Delivery {
    ring: rtrb::Producer<Burst>,
    overflow: Overflow,
    counters: Arc<QueueCounters>,
    /// Counts what it pushes as the queue's packets (not when it hands bursts to a stage
    /// task, which counts them as it delivers them).
    counts: bool,
    port_id: u16,
    queue_id: u16,
    /// A burst waiting for ring space.
    ready: Option<Burst>,
    /// Moves packets into the queue's own layout (GPU memory, header-data split).
    stage: Option<Box<crate::stage::RxStage>>,
    /// A closed burst waiting for free buffers of the stage's regions.
    unstaged: Option<Burst>,
}

impl Delivery {
    /// Delivers into `ring` (full: by `overflow`) through `stage` if any, counting in
    /// `counters` of queue `(port, queue)`.
    fn new(
        ring: rtrb::Producer<Burst>,
        overflow: Overflow,
        counters: Arc<QueueCounters>,
        (port_id, queue_id): (u16, u16),
        stage: Option<Box<crate::stage::RxStage>>,
    ) -> Self {
        Self {
            ring,
            overflow,
            counters,
            counts: true,
            port_id,
            queue_id,
            ready: None,
            stage,
            unstaged: None,
        }
    }

    /// Retries what waits (a burst for ring space, one for stage buffers) and hands on
    /// finished stage bursts. `Err(progress)` while something still waits, where
    /// `progress` says whether the stage still has bursts moving.
    fn unblock(&mut self) -> Result<(), bool> {
        if let Some(b) = self.ready.take() {
            self.push(b);
            if self.ready.is_some() {
                return Err(false);
            }
        }
        self.drain_stage();
        if self.ready.is_some() {
            return Err(false);
        }
        if let Some(b) = self.unstaged.take() {
            self.deliver(b);
            if self.unstaged.is_some() {
                return Err(self.stage.as_ref().is_some_and(|s| s.in_flight() > 0));
            }
        }
        Ok(())
    }

    /// Issues the stage's open copy (see [`crate::stage::RxStage::flush`]).
    fn flush_stage(&mut self) {
        if let Some(Err(crate::stage::StageError::Failed { packets, reason })) =
            self.stage.as_mut().map(|s| s.flush())
        {
            self.stage_failed(packets, &reason);
        }
    }

    fn deliver(&mut self, burst: Burst) {
        let Some(stage) = self.stage.as_mut() else {
            return self.push(burst);
        };
        if !stage.has_room() {
            self.unstaged = Some(burst);
            return self.drain_stage();
        }
        match stage.submit(burst) {
            Ok(()) => {}
            // Backpressure: the application still holds the stage regions' buffers.
            Err(crate::stage::StageError::NoBuffers(b)) => self.unstaged = Some(b),
            Err(crate::stage::StageError::Failed { packets, reason }) => {
                self.stage_failed(packets, &reason)
            }
        }
        self.drain_stage();
    }

    /// Delivers the stage's finished bursts, oldest first, while the ring has room.
    fn drain_stage(&mut self) {
        self.drain_stage_bursts();
        if let Some(stage) = &self.stage {
            self.counters.set_stage_in_flight(stage.in_flight());
        }
    }

    fn drain_stage_bursts(&mut self) {
        while self.ready.is_none() {
            let Some(stage) = self.stage.as_mut() else {
                return;
            };
            match stage.completed() {
                None => return,
                Some(Ok(b)) => self.push(b),
                Some(Err(crate::stage::StageError::Failed { packets, reason })) => {
                    self.stage_failed(packets, &reason)
                }
                Some(Err(crate::stage::StageError::NoBuffers(b))) => drop(b),
            }
        }
    }

    fn stage_failed(&mut self, packets: u64, reason: &str) {
        tracing::error!(
            "port {} queue {}: {packets} packets dropped: {reason}",
            self.port_id,
            self.queue_id
        );
        self.counters.drop_packets(DropReason::GpuCopy, packets);
    }

    /// At the end: issues the stage's open copy and hands on what finished. True when
    /// nothing is held here and no more is to come (`more_to_come`), or when the
    /// application dropped its end.
    fn settle(&mut self, more_to_come: bool) -> bool {
        self.flush_stage();
        self.drain_stage();
        (!more_to_come && !self.holds()) || self.ring.is_abandoned()
    }

    /// True while a burst is still held here (waiting, or in the stage).
    fn holds(&self) -> bool {
        self.ready.is_some()
            || self.unstaged.is_some()
            || self.stage.as_ref().is_some_and(|s| s.in_flight() > 0)
    }

    fn push(&mut self, burst: Burst) {
        let (n, bytes) = (burst.len() as u64, burst.bytes());
        match self.ring.push(burst) {
            Ok(()) => {
                if self.counts {
                    self.counters.add(n, bytes)
                }
            }
            Err(rtrb::PushError::Full(b)) => match self.overflow {
                Overflow::Backpressure => self.ready = Some(b),
                Overflow::Drop => self.counters.drop_packets(DropReason::RingFull, n),
            },
        }
    }
}

impl RxTask {
    /// Stamps every received packet with the time the worker received it.
    pub(crate) fn with_timestamps(mut self) -> Self {
        self.clock = Some(WallClock::new());
        self
    }

    /// A task for one RX queue.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        port: Box<dyn RxPort>,
        ring: rtrb::Producer<Burst>,
        regions: Arc<RegionSet>,
        port_id: u16,
        queue_id: u16,
        batch_size: usize,
        timeout: Option<Duration>,
        overflow: Overflow,
        counters: Arc<QueueCounters>,
    ) -> Self {
        Self {
            port,
            regions,
            port_id,
            queue_id,
            batch_size,
            timeout,
            assembling: None,
            first_packet_at: None,
            out: Delivery::new(ring, overflow, counters, (port_id, queue_id), None),
            clock: None,
            idle_mark_due: None,
        }
    }

    /// Stages every burst into the queue's layout before delivering it.
    pub(crate) fn with_stage(mut self, stage: crate::stage::RxStage) -> Self {
        self.out.stage = Some(Box::new(stage));
        self
    }

    /// Splits off `stage` into a [`StageTask`] for another core (`stage_core`): this task
    /// then hands its bursts, unstaged, to the stage task through a ring of its own ring's
    /// size, and the stage task delivers into the queue's ring. This task waits for ring
    /// space (never drops: a full ring means the stage core is behind, and the engine's
    /// counters show what it could not take) and leaves counting to the stage task.
    pub(crate) fn with_stage_task(mut self, stage: crate::stage::RxStage) -> (Self, StageTask) {
        let (handoff, from_rx) = rtrb::RingBuffer::new(self.out.ring.buffer().capacity());
        let app = std::mem::replace(&mut self.out.ring, handoff);
        let stage_task = StageTask::new(
            from_rx,
            app,
            stage,
            self.out.overflow,
            self.out.counters.clone(),
            (self.port_id, self.queue_id),
        );
        self.out.counts = false;
        self.out.overflow = Overflow::Backpressure;
        self.idle_mark_due = Some(false);
        (self, stage_task)
    }

    pub(crate) fn counters(&self) -> &QueueCounters {
        &self.out.counters
    }

    /// One pass: receive, close the burst when full, at a rule boundary, on `flush` when
    /// idle, or when `timeout_us` passed since its first packet, by `clock`.
    pub(crate) fn poll(&mut self, flush: bool, clock: &PassClock) -> bool {
        // A full burst waiting for ring space (or stage buffers) blocks this queue
        // (backpressure).
        if let Err(progress) = self.out.unblock() {
            return progress;
        }
        let burst = self.assembling.get_or_insert_with(|| {
            Burst::empty(
                self.regions.clone(),
                self.port_id,
                self.queue_id,
                self.batch_size,
            )
        });
        let was_empty = burst.is_empty();
        let before = burst.len();
        let got = self.port.receive(burst, self.batch_size - burst.len());
        if got > 0
            && let Some(c) = &self.clock
        {
            burst.stamp_from(before, c.now_ns());
        }
        if got > 0 && was_empty {
            self.first_packet_at = self.timeout.map(|_| clock.now());
        }
        let boundary = self.port.take_boundary();
        let full = burst.len() >= self.batch_size;
        let expired = !burst.is_empty()
            && (boundary
                || (flush && got == 0)
                || self
                    .timeout
                    .zip(self.first_packet_at)
                    .is_some_and(|(t, at)| {
                        got == 0 && clock.now().saturating_duration_since(at) >= t
                    }));
        if full || expired {
            let b = self.assembling.take().expect("assembling burst");
            self.out.deliver(b);
            if let Some(due) = &mut self.idle_mark_due {
                *due = true;
            }
        }
        if got == 0 {
            // The port is idle: the stage's open copy goes now rather than wait for more.
            match self.idle_mark_due {
                None => self.out.flush_stage(),
                Some(true) if self.out.ready.is_none() => {
                    // Tells the stage task, once per idle spell (a full ring: next pass).
                    let mark = Burst::empty(self.regions.clone(), self.port_id, self.queue_id, 0);
                    if self.out.ring.push(mark).is_ok() {
                        self.idle_mark_due = Some(false);
                    }
                }
                Some(_) => {}
            }
        }
        got > 0
    }

    /// When the port closed (a connection ended): delivers what is still assembled and
    /// says whether the task is done, i.e. nothing is held any more, or the application
    /// dropped its end (what is held then goes back to the pools with the task).
    fn retire(&mut self) -> bool {
        if !self.port.closed() {
            return false;
        }
        if let Some(b) = self.out.ready.take() {
            self.out.push(b);
        }
        if self.out.ready.is_none()
            && let Some(b) = self.assembling.take().filter(|b| !b.is_empty())
        {
            self.out.deliver(b);
        }
        self.out.settle(false)
    }
}

/// Bursts a [`StageTask`] takes from its RX task in one pass.
pub const STAGE_BURSTS_PER_POLL: usize = 32;

/// The stage of an RX queue on a core of its own (`stage_core`): takes the bursts the
/// queue's RX task received on its core, moves them into the queue's layout and delivers
/// them to the application, so the engine's per-packet work and the stage's share no
/// core. An empty burst from the RX task means its port went idle: the open copy goes
/// then, as it does when the stage runs on the RX core (the RX task never delivers an
/// empty burst otherwise).
pub struct StageTask {
    input: rtrb::Consumer<Burst>,
    out: Delivery,
}

impl StageTask {
    /// A stage task reading bursts from `input`, staging them with `stage` and delivering
    /// them into `ring` (full: by `overflow`), counting them in `counters` of queue
    /// `(port, queue)`.
    pub(crate) fn new(
        input: rtrb::Consumer<Burst>,
        ring: rtrb::Producer<Burst>,
        stage: crate::stage::RxStage,
        overflow: Overflow,
        counters: Arc<QueueCounters>,
        (port_id, queue_id): (u16, u16),
    ) -> Self {
        Self {
            input,
            out: Delivery::new(
                ring,
                overflow,
                counters,
                (port_id, queue_id),
                Some(Box::new(stage)),
            ),
        }
    }

    /// The stage's GPU copies (or launches) so far.
    #[cfg(feature = "cuda")]
    pub(crate) fn copies_issued(&self) -> u64 {
        self.out.stage.as_ref().map_or(0, |s| s.copies_issued())
    }

    /// One pass: hand on finished bursts, submit what the RX task sent (an empty burst:
    /// issue the open copy). True when it moved something.
    /// Takes at most [`STAGE_BURSTS_PER_POLL`] bursts, so a worker fed faster than its
    /// stage drains still returns to its stop flag and its other tasks.
    pub(crate) fn poll(&mut self) -> bool {
        if let Err(progress) = self.out.unblock() {
            return progress;
        }
        let mut moved = false;
        let mut budget = STAGE_BURSTS_PER_POLL;
        while budget > 0
            && self.out.unstaged.is_none()
            && self.out.ready.is_none()
            && let Ok(b) = self.input.pop()
        {
            budget -= 1;
            if b.is_empty() {
                self.out.flush_stage();
                continue;
            }
            moved = true;
            self.out.deliver(b);
        }
        moved || self.out.stage.as_ref().is_some_and(|s| s.in_flight() > 0)
    }

    /// Done once its RX task is gone (its port closed) and nothing is held, or the
    /// application dropped its end.
    fn retire(&mut self) -> bool {
        if !self.input.is_abandoned() {
            return false;
        }
        let _ = self.poll();
        self.out.settle(!self.input.is_empty())
    }
}

/// How far a paced queue may catch up after coming late: 1 ms of sending.
pub const PACING_DEPTH_NS: u64 = 1_000_000;

/// A TX queue's rate cap, a token bucket kept as the time the next burst may go: each
/// burst moves it on by `8000 * bytes / mbps` ns (the remainder carried, so rounding does
/// not drift). A worker that comes late (descheduled, busy with other queues) may catch up
/// by at most [`PACING_DEPTH_NS`] of sending; longer idle time earns no more credit.
#[derive(Clone, Debug)]
pub struct Pacer {
    mbps: u64,
    /// Nanoseconds (since `origin`) before which nothing more is sent.
    next_ns: u64,
    /// `8000 * bytes` not yet turned into whole nanoseconds.
    carry: u64,
    origin: Instant,
}

impl Pacer {
    /// A cap of `mbps` megabits per second of frame bytes.
    pub fn new(mbps: u64, origin: Instant) -> Self {
        Self {
            mbps: mbps.max(1),
            next_ns: 0,
            carry: 0,
            origin,
        }
    }

    fn ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// True when a burst may go at `now`.
    #[inline]
    pub fn ready(&self, now: Instant) -> bool {
        self.ns(now) >= self.next_ns
    }

    /// Accounts `bytes` sent at `now`.
    #[inline]
    pub fn sent(&mut self, bytes: u64, now: Instant) {
        let start = self
            .next_ns
            .max(self.ns(now).saturating_sub(PACING_DEPTH_NS));
        let total = bytes * 8000 + self.carry;
        self.next_ns = start + total / self.mbps;
        self.carry = total % self.mbps;
    }
}

/// Transmit task of one queue.
pub struct TxTask {
    pub(crate) port: Box<dyn TxPort>,
    pub(crate) ring: rtrb::Consumer<Burst>,
    pub(crate) counters: Arc<QueueCounters>,
    in_flight: Option<Burst>,
    pacer: Option<Pacer>,
    /// `tx_eth_src`: the MAC written into every frame's Ethernet source field.
    eth_src: Option<[u8; 6]>,
    /// Moves bursts out of GPU memory into a host staging region before the port sends
    /// them (engines that read packets with the CPU).
    stage: Option<Box<crate::stage::RxStage>>,
    /// A burst the stage could not take yet (its staging region had no free buffers).
    unstaged: Option<Burst>,
    /// `accurate_send`: the clock packets' send times are read against, and how late
    /// they went.
    send_at: Option<(WallClock, Arc<SendLateness>)>,
    /// Packets of a burst whose send time has not come yet (they go before anything
    /// newer).
    held_back: Option<Burst>,
}

/// How late packets with a send time went out (the worker's decision time against the
/// packet's time), in nanoseconds, for `accurate_send` queues.
#[derive(Debug)]
pub struct SendLateness(std::sync::Mutex<hdrhistogram::Histogram<u64>>);

/// Percentiles of [`SendLateness`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LatenessSummary {
    /// Packets with a send time that went out.
    pub packets: u64,
    /// Median lateness, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
}

impl Default for SendLateness {
    fn default() -> Self {
        // Three significant digits up to an hour.
        let h = hdrhistogram::Histogram::new_with_max(3_600_000_000_000, 3)
            .expect("valid histogram bounds");
        Self(std::sync::Mutex::new(h))
    }
}

impl SendLateness {
    /// The percentiles so far.
    pub fn summary(&self) -> LatenessSummary {
        let h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        LatenessSummary {
            packets: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

impl TxTask {
    /// A task for one TX queue.
    pub fn new(
        port: Box<dyn TxPort>,
        ring: rtrb::Consumer<Burst>,
        counters: Arc<QueueCounters>,
    ) -> Self {
        Self {
            port,
            ring,
            counters,
            in_flight: None,
            pacer: None,
            eth_src: None,
            stage: None,
            unstaged: None,
            send_at: None,
            held_back: None,
        }
    }

    /// Sends no packet before its `timestamp_ns` (`accurate_send`), recording how late
    /// each went into `lateness`.
    pub(crate) fn with_send_times(mut self, lateness: Arc<SendLateness>) -> Self {
        self.send_at = Some((WallClock::new(), lateness));
        self
    }

    /// Splits off the packets whose send time has not come; `None` when even the first
    /// must wait. Records the lateness of those that go.
    fn due(&mut self, mut burst: Burst) -> Result<Burst, Burst> {
        let Some((clock, lateness)) = &self.send_at else {
            return Ok(burst);
        };
        let now = clock.now_ns();
        let k = burst
            .packets()
            .iter()
            .position(|p| p.timestamp_ns > now)
            .unwrap_or(burst.len());
        if k == 0 {
            return Err(burst);
        }
        {
            let mut h = lateness.0.lock().unwrap_or_else(|e| e.into_inner());
            for p in &burst.packets()[..k] {
                if p.timestamp_ns > 0 {
                    let _ = h.record(now - p.timestamp_ns);
                }
            }
        }
        if k < burst.len() {
            let rest = burst.split_off(k);
            self.held_back = Some(rest);
        }
        Ok(burst)
    }
    pub(crate) fn with_stage(mut self, stage: crate::stage::RxStage) -> Self {
        self.stage = Some(Box::new(stage));
        self
    }

    /// The next burst to send: from the ring, or through the stage when there is one.
    fn next_burst(&mut self) -> Option<Burst> {
        let Some(stage) = self.stage.as_mut() else {
            return self.ring.pop().ok();
        };
        // Feed the stage while it has room, oldest first.
        while stage.has_room() {
            let Some(b) = self.unstaged.take().or_else(|| self.ring.pop().ok()) else {
                // Nothing more to send now: the open copy goes.
                if let Err(crate::stage::StageError::Failed { packets, reason }) = stage.flush() {
                    tracing::error!("TX stage: {packets} packets dropped: {reason}");
                    self.counters.drop_packets(DropReason::GpuCopy, packets);
                }
                break;
            };
            let n = b.len() as u64;
            match stage.submit(b) {
                Ok(()) => {}
                Err(crate::stage::StageError::NoBuffers(b)) => {
                    self.unstaged = Some(b);
                    break;
                }
                Err(crate::stage::StageError::Failed { packets, reason }) => {
                    tracing::error!("TX stage: {packets} of {n} packets dropped: {reason}");
                    self.counters.drop_packets(DropReason::GpuCopy, packets);
                }
            }
        }
        match stage.completed()? {
            Ok(b) => Some(b),
            Err(crate::stage::StageError::Failed { packets, reason }) => {
                tracing::error!("TX stage: {packets} packets dropped: {reason}");
                self.counters.drop_packets(DropReason::GpuCopy, packets);
                None
            }
            Err(crate::stage::StageError::NoBuffers(b)) => {
                self.unstaged = Some(b);
                None
            }
        }
    }

    /// Stamps `mac` into the Ethernet source of every frame this queue sends (the
    /// `tx_eth_src` offload, done in software).
    pub fn with_eth_src(mut self, mac: [u8; 6]) -> Self {
        self.eth_src = Some(mac);
        self
    }

    /// Caps the queue at `mbps` Mb/s, paced by this task.
    pub fn with_pacing(mut self, mbps: u64) -> Self {
        self.pacer = Some(Pacer::new(mbps, Instant::now()));
        self
    }

    fn poll(&mut self) -> bool {
        let now = match &self.pacer {
            Some(p) => {
                let now = Instant::now();
                if !p.ready(now) {
                    return false;
                }
                Some(now)
            }
            None => None,
        };
        let burst = match self.in_flight.take() {
            Some(b) => b,
            None => {
                let candidate = match self.held_back.take() {
                    Some(b) => b,
                    None => match self.next_burst() {
                        Some(mut b) => {
                            if let Some(mac) = self.eth_src {
                                for i in 0..b.len() {
                                    // Validation keeps the first segment of such queues in
                                    // host memory.
                                    if let Some(frame) = b.buffer_mut(i, 0)
                                        && frame.len() >= 12
                                    {
                                        frame[6..12].copy_from_slice(&mac);
                                    }
                                }
                            }
                            b
                        }
                        None => {
                            self.port.idle();
                            return false;
                        }
                    },
                };
                match self.due(candidate) {
                    Ok(b) => b,
                    Err(waiting) => {
                        self.held_back = Some(waiting);
                        self.port.idle();
                        return false;
                    }
                }
            }
        };
        let (n, bytes) = (burst.len() as u64, burst.bytes());
        let (sent, sent_bytes) = match self.port.transmit(burst) {
            None => (n, bytes),
            Some(rest) => {
                let sent = (n - rest.len() as u64, bytes - rest.bytes());
                self.in_flight = Some(rest);
                sent
            }
        };
        self.counters.add(sent, sent_bytes);
        if let (Some(p), Some(now)) = (&mut self.pacer, now) {
            p.sent(sent_bytes, now);
        }
        sent > 0
    }
}

/// A queue served by a worker.
pub enum Task {
    /// Receive.
    Rx(RxTask),
    /// Transmit.
    Tx(TxTask),
    /// An RX queue's stage on its own core.
    Stage(StageTask),
}

impl Task {
    fn counters(&self) -> &QueueCounters {
        match self {
            Task::Rx(rx) => rx.counters(),
            Task::Tx(tx) => &tx.counters,
            Task::Stage(st) => &st.out.counters,
        }
    }

    /// One poll: true when it moved packets.
    #[inline]
    fn poll(&mut self, flush: bool, clock: &PassClock) -> bool {
        match self {
            Task::Rx(rx) => rx.poll(flush, clock),
            Task::Tx(tx) => tx.poll(),
            Task::Stage(st) => st.poll(),
        }
    }

    /// True once the task's port closed and it holds nothing more to deliver; the worker
    /// then drops it (a closed TX task's unsent bursts go back to their pools).
    fn retire(&mut self) -> bool {
        match self {
            Task::Rx(rx) => rx.retire(),
            Task::Tx(tx) => tx.port.closed(),
            Task::Stage(st) => st.retire(),
        }
    }
}

/// Runs `tasks` on the current thread until `control.stop` is set. Bursts still held when
/// stopping are dropped here, which returns their buffers.
pub fn run(mut tasks: Vec<Task>, control: &WorkerControl) {
    let mut idle = 0u32;
    let mut caches_flushed = false;
    let mut idle_yields = 0u32;
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
                    t.counters()
                        .add_busy_ns(started.elapsed().as_nanos() as u64);
                }
            } else {
                busy |= t.poll(flush, &clock);
            }
        }
        if busy {
            idle = 0;
            idle_yields = 0;
            caches_flushed = false;
            busy_passes += 1;
            if tick_passes {
                busy_ticks += crate::cycles::ticks().wrapping_sub(pass_started);
            }
        } else {
            idle += 1;
            if idle >= IDLE_PASSES_BEFORE_YIELD {
                idle = 0;
                // Once per idle spell of IDLE_YIELDS_BEFORE_FLUSH yields: buffers this
                // worker's caches hold go back to the shared lists, so an idle worker
                // strands none that another queue needs (not sooner: between bursts the
                // cache is what keeps allocations off the shared lock).
                idle_yields += 1;
                if !caches_flushed && idle_yields >= IDLE_YIELDS_BEFORE_FLUSH {
                    caches_flushed = true;
                    crate::memory::pool::flush_thread_caches();
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }
    activity.publish(passes, busy_passes, busy_ticks);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacer_spaces_bursts_by_their_bytes_and_lets_a_late_worker_catch_up_only_1_ms() {
        let t0 = Instant::now();
        let at = |ns: u64| t0 + Duration::from_nanos(ns);
        // 1000 Mb/s: 1250 bytes take 10 us.
        let mut p = Pacer::new(1000, t0);
        assert!(p.ready(at(0)));
        p.sent(1250, at(0));
        assert!(!p.ready(at(9_999)));
        assert!(p.ready(at(10_000)));
        // Sent late (at 15 us, within the bucket's depth): the schedule holds, so the next
        // may go at 20 us and the average rate is kept.
        p.sent(1250, at(15_000));
        assert!(!p.ready(at(19_999)) && p.ready(at(20_000)));
        // After a long pause at most the bucket's depth (1 ms = 100 such bursts) goes at
        // once, besides the one due now; then the rate holds again.
        let t = 10_000_000;
        let mut at_once = 0;
        while p.ready(at(t)) {
            p.sent(1250, at(t));
            at_once += 1;
        }
        assert_eq!(at_once, 101);
        assert!(!p.ready(at(t + 9_999)) && p.ready(at(t + 10_000)));
        // Remainders carry: 3 Mb/s, 1 byte = 2666.67 ns; three bytes sent one at a time
        // take exactly 8000 ns.
        let mut p = Pacer::new(3, t0);
        p.sent(1, at(0));
        p.sent(1, at(0));
        p.sent(1, at(0));
        assert!(!p.ready(at(7_999)) && p.ready(at(8_000)));
    }
    use crate::config::{MemoryKind, MemoryRegionConfig};

    /// Stands in for an engine's receive side (this tests the worker's burst assembly,
    /// not an engine): it hands out `offer` buffers of a real region, then nothing.
    struct Scripted {
        regions: Arc<RegionSet>,
        offer: usize,
    }

    impl RxPort for Scripted {
        fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
            let n = self.offer.min(max);
            self.offer -= n;
            if n == 0 {
                return 0;
            }
            let mut fresh = Burst::allocate(self.regions.clone(), 0, 0, &[0], n).unwrap();
            into.take_from(&mut fresh, n)
        }
    }

    fn task(offer: usize, batch: usize) -> (RxTask, rtrb::Consumer<Burst>) {
        let regions = Arc::new(
            RegionSet::allocate(&[MemoryRegionConfig::new("r", MemoryKind::Host, 64, 64)]).unwrap(),
        );
        let (producer, consumer) = rtrb::RingBuffer::new(8);
        let port = Scripted {
            regions: regions.clone(),
            offer,
        };
        let task = RxTask::new(
            Box::new(port),
            producer,
            regions,
            0,
            0,
            batch,
            Some(Duration::from_micros(100)),
            Overflow::Backpressure,
            Arc::new(QueueCounters::default()),
        );
        (task, consumer)
    }

    #[test]
    fn a_partial_burst_waits_for_its_timeout_measured_from_the_first_packet() {
        let (mut rx, mut out) = task(3, 8);
        let t0 = Instant::now();
        let at = |us| PassClock::at(t0 + Duration::from_micros(us));
        assert!(rx.poll(false, &at(0)), "three packets received");
        assert!(out.pop().is_err(), "a partial burst is held");
        rx.poll(false, &at(99));
        assert!(
            out.pop().is_err(),
            "99 us after the first packet: still held"
        );
        rx.poll(false, &at(100));
        assert_eq!(
            out.pop().map(|b| b.len()),
            Ok(3),
            "delivered at the timeout"
        );
    }

    #[test]
    fn a_full_burst_goes_at_once_and_flush_delivers_the_rest() {
        let (mut rx, mut out) = task(11, 8);
        let t0 = PassClock::at(Instant::now());
        rx.poll(false, &t0);
        assert_eq!(out.pop().map(|b| b.len()), Ok(8), "full at batch_size");
        rx.poll(false, &t0);
        assert!(out.pop().is_err(), "three left, before their timeout");
        rx.poll(true, &t0);
        assert_eq!(out.pop().map(|b| b.len()), Ok(3), "flush when idle");
    }

    /// A stage task fed faster than it drains still ends each pass after its budget, so
    /// its worker gets back to its stop flag (an unbounded pass never returned when the
    /// RX side refilled the ring as fast as the stage emptied it).
    #[test]
    fn a_stage_pass_takes_at_most_its_budget_of_bursts() {
        let regions = Arc::new(
            RegionSet::allocate(&[
                MemoryRegionConfig::new("src", MemoryKind::Host, 4096, 256),
                MemoryRegionConfig::new("hdr", MemoryKind::Host, 4096, 64),
                MemoryRegionConfig::new("pay", MemoryKind::Host, 4096, 256),
            ])
            .unwrap(),
        );
        let plan = crate::plan::StagePlan {
            split_header_bytes: Some(64),
            gpu: None,
            mode: crate::stage::StageMode::Copy,
        };
        let stage = crate::stage::RxStage::new(&regions, &[1, 2], 8, &plan).unwrap();
        let queued = STAGE_BURSTS_PER_POLL * 2;
        let (mut to_stage, from_rx) = rtrb::RingBuffer::new(queued);
        let (to_app, mut from_stage) = rtrb::RingBuffer::new(queued);
        for _ in 0..queued {
            let mut b = Burst::allocate(regions.clone(), 0, 0, &[0], 8).unwrap();
            for i in 0..8 {
                b.set_len(i, 0, 200);
            }
            assert!(to_stage.push(b).is_ok());
        }
        let counters = Arc::new(QueueCounters::default());
        let mut task = StageTask::new(
            from_rx,
            to_app,
            stage,
            Overflow::Backpressure,
            counters.clone(),
            (0, 0),
        );
        assert!(task.poll());
        assert_eq!(to_stage.slots(), STAGE_BURSTS_PER_POLL, "half still queued");
        assert_eq!(from_stage.slots(), STAGE_BURSTS_PER_POLL);
        assert!(task.poll());
        assert_eq!(from_stage.slots(), queued, "the rest in the next pass");
        let b = from_stage.pop().unwrap();
        assert_eq!(
            (b.data(0, 0).unwrap().len(), b.data(0, 1).unwrap().len()),
            (64, 136)
        );
        assert_eq!(counters.snapshot().0, (queued * 8) as u64);
    }
}
