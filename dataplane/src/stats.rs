//! Per-queue counters written by one worker each, read by the stats thread and reports.

#![forbid(unsafe_code)]

use crate::config::Direction;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why packets were dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The queue's ring to the application was full.
    RingFull,
    /// No free buffer in a pool.
    PoolEmpty,
    /// No flow rule matched and flow isolation is on.
    NoFlow,
    /// Truncated or malformed frame.
    Malformed,
    /// The engine (NIC) missed packets.
    EngineMissed,
    /// Copying into or out of GPU memory failed (a CUDA error).
    GpuCopy,
    /// Dropped on purpose by a `fault_injection` rule.
    Injected,
    /// Queued for a connection that ended before they were sent (kernel TCP; the TX
    /// worker took them off the queue, so they also count as sent).
    Disconnected,
}

/// Counters of one queue. Each counter has one writer (the queue's worker, or the thread
/// owning the queue handle), so plain load+store updates suffice.
#[derive(Debug, Default)]
pub struct QueueCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
    drops: [AtomicU64; 8],
    copied: AtomicU64,
    busy_ns: AtomicU64,
}

/// Set to make workers time their productive polls ([`QueueCounters::add_busy_ns`]);
/// read once when a worker starts. Costs two clock reads per burst, so off by default.
static TIME_STAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns per-stage timing on or off for workers started from now on.
pub fn time_stages(on: bool) {
    TIME_STAGES.store(on, Ordering::Relaxed);
}

/// Stage timing on for as long as the returned guard lives (`None` when `on` is false):
/// workers read the switch when their threads start, which may be after a plane's start
/// returned, so a bench keeps it on for its whole run.
pub fn time_stages_while(on: bool) -> Option<StageTimingGuard> {
    on.then(|| {
        time_stages(true);
        StageTimingGuard
    })
}

/// Turns stage timing off when dropped.
pub struct StageTimingGuard;

impl Drop for StageTimingGuard {
    fn drop(&mut self) {
        time_stages(false);
    }
}

/// True when workers started now time their stages.
pub fn stages_timed() -> bool {
    TIME_STAGES.load(Ordering::Relaxed)
}

#[inline]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl QueueCounters {
    /// Counts delivered (RX) or transmitted (TX) packets.
    #[inline]
    pub fn add(&self, packets: u64, bytes: u64) {
        bump(&self.packets, packets);
        bump(&self.bytes, bytes);
    }

    /// Counts dropped packets.
    #[inline]
    pub fn drop_packets(&self, reason: DropReason, packets: u64) {
        bump(&self.drops[reason as usize], packets);
    }

    /// Counts packets whose bytes the engine copied (instead of handing over the buffer).
    #[inline]
    pub fn add_copied(&self, packets: u64) {
        if packets > 0 {
            bump(&self.copied, packets);
        }
    }

    /// Adds time a worker spent on polls of this queue that moved packets.
    #[inline]
    pub fn add_busy_ns(&self, ns: u64) {
        bump(&self.busy_ns, ns);
    }

    /// Nanoseconds a worker spent on polls of this queue that moved packets (0 unless
    /// [`time_stages`] was on when it started).
    pub fn busy_ns(&self) -> u64 {
        self.busy_ns.load(Ordering::Relaxed)
    }

    /// Packets whose bytes the engine copied.
    pub fn copied(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }

    /// A consistent-enough copy for reports.
    pub fn snapshot(&self) -> (u64, u64, Drops) {
        let d = |r: DropReason| self.drops[r as usize].load(Ordering::Relaxed);
        (
            self.packets.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            Drops {
                ring_full: d(DropReason::RingFull),
                pool_empty: d(DropReason::PoolEmpty),
                no_flow: d(DropReason::NoFlow),
                malformed: d(DropReason::Malformed),
                engine_missed: d(DropReason::EngineMissed),
                gpu_copy: d(DropReason::GpuCopy),
                injected: d(DropReason::Injected),
                disconnected: d(DropReason::Disconnected),
            },
        )
    }
}

/// Drop counts by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Drops {
    /// Ring to the application full.
    pub ring_full: u64,
    /// Buffer pool empty.
    pub pool_empty: u64,
    /// No matching flow.
    pub no_flow: u64,
    /// Malformed frames.
    pub malformed: u64,
    /// Missed by the engine / NIC.
    pub engine_missed: u64,
    /// Lost to a failed copy into or out of GPU memory.
    pub gpu_copy: u64,
    /// Dropped by a `fault_injection` rule.
    pub injected: u64,
    /// Queued for a connection that ended first.
    pub disconnected: u64,
}

impl Drops {
    /// Sum over all reasons.
    pub fn total(&self) -> u64 {
        self.ring_full
            + self.pool_empty
            + self.no_flow
            + self.malformed
            + self.engine_missed
            + self.gpu_copy
            + self.injected
            + self.disconnected
    }

    /// Adds another set of counts.
    pub fn add(&mut self, o: &Drops) {
        self.ring_full += o.ring_full;
        self.pool_empty += o.pool_empty;
        self.no_flow += o.no_flow;
        self.malformed += o.malformed;
        self.engine_missed += o.engine_missed;
        self.gpu_copy += o.gpu_copy;
        self.injected += o.injected;
        self.disconnected += o.disconnected;
    }
}

/// Counters of one queue, labelled.
#[derive(Clone, Debug, Serialize)]
pub struct QueueStats {
    /// Interface name.
    pub interface: String,
    /// `rx` or `tx`.
    pub direction: &'static str,
    /// Queue id.
    pub queue: u16,
    /// Packets delivered or sent.
    pub packets: u64,
    /// Bytes delivered or sent.
    pub bytes: u64,
    /// Packets whose bytes the engine copied (the rest went without a copy); counted by
    /// the DPDK engine's TX queues, 0 elsewhere.
    pub copied_packets: u64,
    /// Nanoseconds its worker spent on polls that moved packets (with stage timing on).
    pub busy_ns: u64,
    /// Drops at this queue.
    #[serde(skip)]
    pub drops: Drops,
}

/// A snapshot of every queue.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Per queue, RX queues first.
    pub queues: Vec<QueueStats>,
}

impl Snapshot {
    /// Sum of packets and bytes in one direction.
    pub fn total(&self, dir: Direction) -> (u64, u64) {
        self.queues
            .iter()
            .filter(|q| q.direction == dir.name())
            .fold((0, 0), |(p, b), q| (p + q.packets, b + q.bytes))
    }

    /// Sum of drops over all queues.
    pub fn drops(&self) -> Drops {
        let mut d = Drops::default();
        for q in &self.queues {
            d.add(&q.drops);
        }
        d
    }
}
