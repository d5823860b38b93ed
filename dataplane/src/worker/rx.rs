//! RX work on a worker: `RxTask` polls a port and delivers bursts (through its stage, when
//! it has one) to the application's ring; `StageTask` runs a stage on a core of its own.

use super::*;
use crate::descriptor::{PortIndex, QueueId};

/// Receive task of one queue.
pub struct RxTask {
    pub(crate) port: Box<dyn RxPort>,
    pub(crate) regions: Arc<RegionSet>,
    pub(crate) port_id: PortIndex,
    pub(crate) queue_id: QueueId,
    pub(crate) batch_size: usize,
    pub(crate) timeout: Option<Duration>,
    pub(super) assembling: Option<Burst>,
    pub(super) first_packet_at: Option<Instant>,
    /// Where closed bursts go: the stage (when on this core) and the queue's ring.
    pub(super) out: Delivery,
    /// `hardware_timestamps` done in software: stamps each received packet.
    pub(super) clock: Option<WallClock>,
    /// Hands bursts to a stage task, which hears of the port going idle by an empty burst
    /// (see [`StageTask`]); true once a burst went since the last such mark.
    pub(super) idle_mark_due: Option<bool>,
    /// Set when the plane removes the queue while it runs.
    pub(super) retirement: Option<Arc<Retirement>>,
}

/// The delivering end of an RX queue: an optional stage, then the ring the application
/// (or, with a `stage_core`, the stage task on that core) reads.
pub(super) struct Delivery {
    pub(super) ring: rtrb::Producer<Burst>,
    pub(super) overflow: Overflow,
    pub(super) counters: Arc<QueueCounters>,
    /// Counts what it pushes as the queue's packets (not when it hands bursts to a stage
    /// task, which counts them as it delivers them).
    pub(super) counts: bool,
    pub(super) port_id: PortIndex,
    pub(super) queue_id: QueueId,
    /// A burst waiting for ring space.
    pub(super) ready: Option<Burst>,
    /// Moves packets into the queue's own layout (GPU memory, header-data split).
    pub(super) stage: Option<Box<crate::stage::RxStage>>,
    /// A closed burst waiting for free buffers of the stage's regions.
    pub(super) unstaged: Option<Burst>,
}

impl Delivery {
    /// Delivers into `ring` (full: by `overflow`) through `stage` if any, counting in
    /// `counters` of queue `(port, queue)`.
    pub(super) fn new(
        ring: rtrb::Producer<Burst>,
        overflow: Overflow,
        counters: Arc<QueueCounters>,
        (port_id, queue_id): (PortIndex, QueueId),
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
    pub(super) fn unblock(&mut self) -> Result<(), bool> {
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
    pub(super) fn flush_stage(&mut self) {
        if let Some(Err(crate::stage::StageError::Failed { packets, reason })) =
            self.stage.as_mut().map(|s| s.flush())
        {
            self.stage_failed(packets, &reason);
        }
    }

    pub(super) fn deliver(&mut self, burst: Burst) {
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
    pub(super) fn drain_stage(&mut self) {
        self.drain_stage_bursts();
        if let Some(stage) = &self.stage {
            self.counters.set_stage_in_flight(stage.in_flight());
        }
    }

    pub(super) fn drain_stage_bursts(&mut self) {
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

    pub(super) fn stage_failed(&mut self, packets: u64, reason: &str) {
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
    pub(super) fn settle(&mut self, more_to_come: bool) -> bool {
        self.flush_stage();
        self.drain_stage();
        (!more_to_come && !self.holds()) || self.ring.is_abandoned()
    }

    /// True while a burst is still held here (waiting, or in the stage).
    pub(super) fn holds(&self) -> bool {
        self.ready.is_some()
            || self.unstaged.is_some()
            || self.stage.as_ref().is_some_and(|s| s.in_flight() > 0)
    }

    pub(super) fn push(&mut self, burst: Burst) {
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
        port_id: PortIndex,
        queue_id: QueueId,
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
            retirement: None,
        }
    }

    /// Lets the plane remove the queue while it runs (see [`Retirement`]).
    pub(crate) fn with_retirement(mut self, retirement: Arc<Retirement>) -> Self {
        self.retirement = Some(retirement);
        self
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
    /// Also when the plane removes the queue: its rules no longer steer anything here by
    /// then, so the port is drained first (a bounded number of polls per housekeeping
    /// pass, so the worker's other queues wait no longer than for a few bursts).
    pub(super) fn retire(&mut self) -> bool {
        let removed = self.retirement.as_ref().is_some_and(|r| r.asked());
        if removed {
            let clock = PassClock::live();
            for _ in 0..RETIRE_POLLS {
                clock.next_pass();
                if !self.poll(true, &clock) {
                    break;
                }
            }
            if self.out.ready.is_some() && !self.out.ring.is_abandoned() {
                return false;
            }
        } else if !self.port.closed() {
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
        let done = self.out.settle(false);
        if done && let Some(r) = &self.retirement {
            r.finished();
        }
        done
    }
}

/// Polls a removed RX queue's task makes per housekeeping pass to drain its port.
pub(super) const RETIRE_POLLS: usize = 64;

/// Bursts a [`StageTask`] takes from its RX task in one pass.
pub const STAGE_BURSTS_PER_POLL: usize = 32;

/// The stage of an RX queue on a core of its own (`stage_core`): takes the bursts the
/// queue's RX task received on its core, moves them into the queue's layout and delivers
/// them to the application, so the engine's per-packet work and the stage's share no
/// core. An empty burst from the RX task means its port went idle: the open copy goes
/// then, as it does when the stage runs on the RX core (the RX task never delivers an
/// empty burst otherwise).
pub struct StageTask {
    pub(super) input: rtrb::Consumer<Burst>,
    pub(super) out: Delivery,
}

impl StageTask {
    /// A stage task reading bursts from `input`, staging them with `stage` and delivering
    /// them into `ring` (full: by `overflow`), counting them in `counters` of queue
    /// `(port, queue)`.
    pub fn new(
        input: rtrb::Consumer<Burst>,
        ring: rtrb::Producer<Burst>,
        stage: crate::stage::RxStage,
        overflow: Overflow,
        counters: Arc<QueueCounters>,
        (port_id, queue_id): (PortIndex, QueueId),
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
    pub fn copies_issued(&self) -> u64 {
        self.out.stage.as_ref().map_or(0, |s| s.copies_issued())
    }

    /// One pass: hand on finished bursts, submit what the RX task sent (an empty burst:
    /// issue the open copy). True when it moved something.
    /// Takes at most [`STAGE_BURSTS_PER_POLL`] bursts, so a worker fed faster than its
    /// stage drains still returns to its stop flag and its other tasks.
    pub fn poll(&mut self) -> bool {
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
    pub(super) fn retire(&mut self) -> bool {
        if !self.input.is_abandoned() {
            return false;
        }
        let _ = self.poll();
        self.out.settle(!self.input.is_empty())
    }
}
