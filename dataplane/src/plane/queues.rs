//! The application's ends of the queues: `RxQueue` (receive, poll, wait) and `TxQueue`
//! (allocate, send, wait), their errors, and the back-off their waits share.

use super::*;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;

/// The application's end of an RX queue: bursts in arrival order, or, on a queue with
/// `reorder_configs`, reordered aggregates (see [`crate::reorder`]) and the other flows'
/// packets.
pub struct RxQueue {
    pub(super) ring: rtrb::Consumer<Burst>,
    /// Interface name.
    pub interface: String,
    /// Queue id.
    pub queue: QueueId,
    pub(super) reorder: Option<crate::reorder::QueueReorder>,
    pub(super) reorder_error: Option<String>,
    pub(super) health: Arc<WorkerHealth>,
    /// With `stage_core`: the stage worker's, which delivers into the ring.
    pub(super) stage_health: Option<Arc<WorkerHealth>>,
    pub(super) link: Option<Arc<Link>>,
    pub(super) capture: Option<crate::capture::CaptureSink>,
    /// Fires the queue's transient buffer (`capture.transient`).
    pub(super) transient_trigger: Option<Arc<crate::capture::TransientTrigger>>,
    /// Set once a live change removed the queue and its task handed over all it held.
    pub(super) retirement: Option<Arc<crate::worker::Retirement>>,
}

impl RxQueue {
    /// The next burst, if one is ready. Never blocks. A reorder that fails (a GPU error)
    /// stops delivering; [`RxQueue::reorder_error`] says why. When the queue's worker died,
    /// the bursts it delivered before still come out, then the failure.
    #[inline]
    pub fn poll(&mut self) -> Result<Option<Burst>, WorkerFailed> {
        // The clock is read only when a reorder needs the time.
        self.poll_with(Instant::now)
    }

    /// As [`RxQueue::poll`], with the time that decides a reorder's timeout flush given
    /// (a test or a simulation passes its own clock; only reorders read it).
    #[inline]
    pub fn poll_at(&mut self, now: Instant) -> Result<Option<Burst>, WorkerFailed> {
        self.poll_with(|| now)
    }

    #[inline]
    pub(super) fn poll_with(
        &mut self,
        now: impl FnOnce() -> Instant,
    ) -> Result<Option<Burst>, WorkerFailed> {
        let burst = self.next_burst(now);
        if let (Some(c), Some(b)) = (&mut self.capture, &burst) {
            c.submit(b);
        }
        if burst.is_none()
            && let Some(f) = self
                .health
                .failure()
                .or_else(|| self.stage_health.as_ref().and_then(|h| h.failure()))
        {
            return Err(f.clone());
        }
        Ok(burst)
    }

    /// True once the plane stopped the worker that delivers into the ring (the stage
    /// worker with `stage_core`), so every burst it delivered is there.
    /// Also once a change removed the queue and its task handed over what it held.
    pub(super) fn deliverer_stopped(&self) -> bool {
        self.stage_health
            .as_ref()
            .unwrap_or(&self.health)
            .is_stopped()
            || self.retirement.as_ref().is_some_and(|r| r.is_done())
    }

    #[inline]
    pub(super) fn next_burst(&mut self, now: impl FnOnce() -> Instant) -> Option<Burst> {
        let Some(reorder) = &mut self.reorder else {
            return self.ring.pop().ok();
        };
        if self.reorder_error.is_some() {
            return None;
        }
        let ring = &mut self.ring;
        match reorder.poll(now(), || ring.pop().ok()) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("{}: queue {}: {e}", self.interface, self.queue);
                self.reorder_error = Some(e.to_string());
                None
            }
        }
    }

    /// The next burst, waiting up to `timeout` for one (spinning, then yielding, then
    /// sleeping in growing steps): `Ok(None)` when none came in time. Once the plane is
    /// shut down, the bursts it delivered still come out, then [`RecvError::Stopped`], so
    /// a receive loop ends instead of waiting on a plane that is gone.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Burst>, RecvError> {
        let mut wait = Backoff::new(timeout);
        loop {
            match self.poll() {
                Ok(Some(b)) => return Ok(Some(b)),
                Err(f) => return Err(RecvError::WorkerFailed(f)),
                Ok(None) if self.deliverer_stopped() => {
                    // Anything the worker pushed before it stopped is in the ring now.
                    return match self.poll() {
                        Ok(Some(b)) => Ok(Some(b)),
                        Ok(None) => Err(RecvError::Stopped),
                        Err(f) => Err(RecvError::WorkerFailed(f)),
                    };
                }
                Ok(None) if wait.expired() => return Ok(None),
                Ok(None) => wait.pause(),
            }
        }
    }

    /// Counters of the queue's reorders, when it has any.
    pub fn reorder_counts(&self) -> Option<crate::reorder::ReorderCounts> {
        self.reorder.as_ref().map(|r| r.counts())
    }

    /// Why the queue's reorder stopped, if it did.
    pub fn reorder_error(&self) -> Option<&str> {
        self.reorder_error.as_deref()
    }

    /// The state of the queue's peer (kernel sockets: its TCP connection or the UDP peer
    /// a server answers); `None` for queues without one.
    pub fn link(&self) -> Option<LinkStatus> {
        self.link.as_ref().map(|l| l.status())
    }

    /// The trigger of the queue's transient buffer (`capture.transient`), if it has one:
    /// fire it from any thread; the window opens the next time the queue is polled.
    pub fn transient_trigger(&self) -> Option<Arc<crate::capture::TransientTrigger>> {
        self.transient_trigger.clone()
    }

    /// The counters of the queue's capture sink (`capture`), if it has one.
    pub fn capture_stats(&self) -> Option<crate::capture::CaptureStats> {
        self.capture.as_ref().map(|c| c.stats())
    }

    /// Writes out what the capture sink holds, closes its file and returns its counters.
    pub fn finish_capture(
        &mut self,
    ) -> Option<Result<crate::capture::CaptureStats, crate::capture::CaptureError>> {
        self.capture.take().map(|c| c.finish())
    }
}

/// Why a TX operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxFailure {
    /// The queue's ring to its worker is full; try again.
    #[error("TX ring full")]
    RingFull,
    /// Not enough free buffers in the queue's memory regions.
    #[error("no free buffers")]
    PoolEmpty,
    /// The burst belongs to another queue.
    #[error("burst belongs to another queue")]
    WrongQueue,
    /// The burst's buffers come from another data plane's memory regions; its buffer
    /// indices mean nothing here.
    #[error("burst was allocated from another data plane's memory regions")]
    ForeignMemory,
    /// The queue's worker died; nothing sent on this queue goes anywhere. (Boxed: a send
    /// error carries the burst back, and stays small for it.)
    #[error(transparent)]
    WorkerFailed(Box<WorkerFailed>),
    /// The data plane was shut down (or dropped), or a change removed the queue; nothing
    /// sent on this queue goes anywhere.
    #[error("the data plane was shut down, or a change removed the queue")]
    Stopped,
    /// The burst has a segment in GPU memory, and this queue's engine reads bytes with
    /// the CPU (forwarding, or a queue without a stage out of GPU memory).
    #[error(
        "the burst has a segment in GPU memory, which this queue's engine reads with the CPU; send host-memory bursts, or give the queue a device region so it stages them"
    )]
    GpuMemory,
    /// A forwarded burst is a reorder's aggregate, whose packets are not frames.
    #[error("a reorder's aggregate burst holds no frames to forward")]
    NotFrames,
    /// More packets than the queue's memory regions hold were asked for at once.
    #[error("a burst of {count} packets was asked for; the queue's regions hold {most}")]
    TooLarge {
        /// Packets asked for.
        count: usize,
        /// Buffers of the smallest of the queue's regions.
        most: usize,
    },
    /// The queue's peer is not there (a TCP connection down or not made yet, a UDP server
    /// that has heard from nobody); says why. Try again later.
    #[error("not connected: {0}")]
    NotConnected(String),
}

/// A burst that could not be sent, handed back so that nothing is freed behind the
/// caller's back.
#[derive(Debug, thiserror::Error)]
#[error("send failed: {reason}")]
pub struct SendError {
    /// The burst, unchanged.
    pub burst: Burst,
    /// Why.
    pub reason: TxFailure,
}

/// The application's end of a TX queue.
pub struct TxQueue {
    pub(super) ring: rtrb::Producer<Burst>,
    pub(super) regions: Arc<RegionSet>,
    pub(super) segment_regions: Vec<RegionId>,
    pub(super) port: PortIndex,
    /// Interface name.
    pub interface: String,
    /// Queue id.
    pub queue: QueueId,
    /// Configured packets per burst.
    pub batch_size: usize,
    pub(super) health: Arc<WorkerHealth>,
    /// Every region of the plane is host memory: forwarded bursts need no per-packet check.
    pub(super) all_regions_host: bool,
    /// The engine reads this queue's bytes with the CPU from host memory only (no stage
    /// moves them out of GPU memory), and the plane has GPU regions: sent bursts are
    /// checked for segments in GPU memory.
    pub(super) refuses_gpu_memory: bool,
    pub(super) link: Option<Arc<Link>>,
    pub(super) lateness: Option<Arc<crate::worker::SendLateness>>,
    /// The queue sends no packet before its `timestamp_ns` (`accurate_send`).
    pub(super) sends_at_time: bool,
    /// Set once a live change removed the queue and its task sent all it held.
    pub(super) retirement: Option<Arc<crate::worker::Retirement>>,
}

impl TxQueue {
    /// Allocates a burst of `count` packets with one buffer per segment region. Fails
    /// with [`TxFailure::WorkerFailed`] once the queue's worker died (its buffers may be
    /// stranded in the queue's ring, so the pool would only ever look empty), and with
    /// [`TxFailure::Stopped`] instead of `PoolEmpty` once the plane is shut down.
    pub fn alloc(&self, count: usize) -> Result<Burst, TxFailure> {
        self.alloc_with_len(count, 0)
    }

    /// [`TxQueue::alloc`] with first segments `len` bytes long.
    pub(super) fn alloc_with_len(&self, count: usize, len: usize) -> Result<Burst, TxFailure> {
        if let Some(f) = self.health.failure() {
            return Err(TxFailure::WorkerFailed(Box::new(f.clone())));
        }
        let most = self
            .segment_regions
            .iter()
            .map(|&r| self.regions.get(r).num_bufs())
            .min()
            .unwrap_or(0);
        if count > most {
            return Err(TxFailure::TooLarge { count, most });
        }
        Burst::allocate_frames(
            self.regions.clone(),
            self.port,
            self.queue,
            &self.segment_regions,
            count,
            len,
        )
        .ok_or_else(|| {
            // After shutdown no worker returns buffers: waiting for them would be in vain.
            if self.health.is_stopped() {
                TxFailure::Stopped
            } else {
                TxFailure::PoolEmpty
            }
        })
    }

    /// As [`TxQueue::alloc`], for `count` frames of `len` bytes each in one segment
    /// (lengths set): a run ([`Burst::allocate_run`]) when the queue has one segment region
    /// whose pool hands out consecutive buffers, so the bytes can be written and the burst
    /// sent, staged and freed with no per-packet descriptor; an ordinary burst otherwise,
    /// each descriptor written once. Panics when `len` exceeds the first segment's
    /// buffers, as [`Burst::set_len`] does.
    pub fn alloc_frames(&self, count: usize, len: usize) -> Result<Burst, TxFailure> {
        if let &[region] = self.segment_regions.as_slice()
            && self.health.failure().is_none()
            && let Some(run) = Burst::allocate_run(
                self.regions.clone(),
                self.port,
                self.queue,
                region,
                count,
                len,
            )
        {
            return Ok(run);
        }
        self.alloc_with_len(count, len)
    }

    /// The index of its interface (the `port()` of the bursts it sends).
    pub fn port(&self) -> PortIndex {
        self.port
    }

    /// Byte capacity of each segment's buffers.
    pub fn segment_sizes(&self) -> Vec<usize> {
        self.segment_regions
            .iter()
            .map(|r| self.regions.get(*r).buf_size())
            .collect()
    }

    /// The GPU whose memory the first segment's region is (`device` regions), if any.
    pub fn device_gpu(&self) -> Option<u32> {
        let r = self.regions.get(*self.segment_regions.first()?);
        (r.kind() == crate::config::MemoryKind::Device).then(|| r.affinity())
    }

    /// True when the segment regions are CPU-accessible.
    pub fn host_accessible(&self) -> bool {
        self.segment_regions
            .iter()
            .all(|r| self.regions.get(*r).host_accessible())
    }

    /// Queues `burst` for transmission. On failure the burst comes back in the error.
    #[inline]
    pub fn send(&mut self, burst: Burst) -> Result<(), SendError> {
        if !burst.belongs_to(&self.regions) {
            return Err(SendError {
                burst,
                reason: TxFailure::ForeignMemory,
            });
        }
        if let Some(f) = self.health.failure() {
            return Err(SendError {
                burst,
                reason: TxFailure::WorkerFailed(Box::new(f.clone())),
            });
        }
        // Stopped also once a change removed the queue (its task is gone).
        if self.health.is_stopped() || self.retirement.as_ref().is_some_and(|r| r.is_done()) {
            return Err(SendError {
                burst,
                reason: TxFailure::Stopped,
            });
        }
        if burst.port() != self.port || burst.queue() != self.queue {
            return Err(SendError {
                burst,
                reason: TxFailure::WrongQueue,
            });
        }
        if self.refuses_gpu_memory && self.in_gpu_memory(&burst) {
            return Err(SendError {
                burst,
                reason: TxFailure::GpuMemory,
            });
        }
        if let Some(link) = &self.link
            && !link.is_up()
        {
            return Err(SendError {
                burst,
                reason: TxFailure::NotConnected(link.why_down()),
            });
        }
        self.ring
            .push(burst)
            .map_err(|rtrb::PushError::Full(burst)| SendError {
                burst,
                reason: TxFailure::RingFull,
            })
    }

    /// Queues a burst received on any RX queue of this plane for transmission on this
    /// queue, as it is: descriptors move, no byte is copied here (a relay, testpmd's `io`
    /// forwarding). The burst must hold frames in host memory. On failure the burst comes
    /// back in the error, still addressed to its RX queue.
    pub fn forward(&mut self, mut burst: Burst) -> Result<(), SendError> {
        if burst.reorder_info().is_some() {
            return Err(SendError {
                burst,
                reason: TxFailure::NotFrames,
            });
        }
        if !self.all_regions_host && burst.belongs_to(&self.regions) && self.in_gpu_memory(&burst) {
            return Err(SendError {
                burst,
                reason: TxFailure::GpuMemory,
            });
        }
        let (port, queue, epoch) = (burst.port(), burst.queue(), burst.steering_epoch());
        burst.readdress(self.port, self.queue);
        self.send(burst).map_err(|mut e| {
            e.burst.readdress(port, queue);
            e.burst.set_steering_epoch(epoch);
            e
        })
    }

    /// True when a segment of `burst` (of this plane's regions) is in GPU memory.
    pub(super) fn in_gpu_memory(&self, burst: &Burst) -> bool {
        let regions = &self.regions;
        burst.packets().iter().any(|p| {
            p.segments()
                .iter()
                .any(|s| !regions.get(s.region).host_accessible())
        })
    }

    /// The state of the queue's peer (kernel sockets); `None` for queues without one.
    pub fn link(&self) -> Option<LinkStatus> {
        self.link.as_ref().map(|l| l.status())
    }

    /// With `accurate_send` done in software: how late packets went against their send
    /// times so far (`None` when the device sends at the times itself).
    pub fn send_lateness(&self) -> Option<crate::worker::LatenessSummary> {
        self.lateness.as_ref().map(|l| l.summary())
    }

    /// True when the queue sends no packet before its `timestamp_ns` (`accurate_send`,
    /// by the device or by the worker).
    pub fn sends_at_time(&self) -> bool {
        self.sends_at_time
    }

    /// Bursts waiting in the ring for the worker.
    pub fn pending(&self) -> usize {
        self.ring.buffer().capacity() - self.ring.slots()
    }

    /// As [`TxQueue::alloc`], waiting up to `timeout` while the pool is empty (the worker
    /// gives buffers back as it sends), spinning, then yielding, then sleeping.
    pub fn alloc_within(&self, count: usize, timeout: Duration) -> Result<Burst, TxFailure> {
        let mut wait = Backoff::new(timeout);
        loop {
            match self.alloc(count) {
                Err(TxFailure::PoolEmpty) if !wait.expired() => wait.pause(),
                other => return other,
            }
        }
    }

    /// As [`TxQueue::send`], waiting up to `timeout` for room in a full ring (spinning,
    /// then yielding, then sleeping in growing steps). Fails at once for every other
    /// reason, with [`TxFailure::Stopped`] once the plane is shut down, so a sender never
    /// waits on a plane that is gone.
    pub fn send_within(&mut self, burst: Burst, timeout: Duration) -> Result<(), SendError> {
        let mut wait = Backoff::new(timeout);
        let mut burst = burst;
        loop {
            match self.send(burst) {
                Err(e) if e.reason == TxFailure::RingFull && !wait.expired() => {
                    burst = e.burst;
                    wait.pause();
                }
                other => return other,
            }
        }
    }
}

/// Waiting without burning a core for long: spin first (the next burst is usually
/// microseconds away), then yield, then sleep in steps growing to a millisecond.
pub(super) struct Backoff {
    /// `None`: a timeout too long to add to the clock, so never.
    pub(super) deadline: Option<Instant>,
    pub(super) rounds: u32,
}

impl Backoff {
    pub(super) fn new(timeout: Duration) -> Self {
        Self {
            deadline: Instant::now().checked_add(timeout),
            rounds: 0,
        }
    }

    pub(super) fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    pub(super) fn pause(&mut self) {
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds == 128 + 7 {
            // About a millisecond of waiting: this thread has gone quiet, so its cached
            // buffers go back where other threads can have them (not sooner: a busy
            // thread's cache is what keeps its allocations off the shared lock).
            crate::memory::pool::flush_thread_caches();
        }
        match self.rounds {
            0..64 => std::hint::spin_loop(),
            64..128 => std::thread::yield_now(),
            r => {
                let step = Duration::from_micros(10u64 << (r - 128).min(7));
                let left = self
                    .deadline
                    .map_or(step, |d| d.saturating_duration_since(Instant::now()));
                std::thread::sleep(step.min(left));
            }
        }
    }
}

/// Why [`RxQueue::recv`] returned no burst.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The queue's worker died (after the bursts it delivered came out).
    #[error(transparent)]
    WorkerFailed(WorkerFailed),
    /// The data plane was shut down, or a change removed the queue, and every burst it
    /// delivered came out.
    #[error("the data plane was shut down, or a change removed the queue")]
    Stopped,
    /// A protocol stream could not place what it received (a SPEAD stream whose GPU copy
    /// into its chunks failed); the stream cannot go on.
    #[error("{0}")]
    Failed(String),
}
