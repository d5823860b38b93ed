//! Fault injection on the software loopback's wire: a TX queue's frames are dropped,
//! duplicated, corrupted, reordered or delayed by the interface's `fault_injection` rules,
//! with a fixed seed, so that drop counters, the bench checker and its verdict have
//! deterministic tests (as smoltcp's `FaultInjector` does for its devices).
//!
//! Frames are numbered per TX queue from 1, in the order the queue sends them; rules are
//! tried in order and the first that picks a frame decides its fault.

#![forbid(unsafe_code)]

use crate::burst::Burst;
use crate::config::{FaultAction, FaultInjection, FaultSelect};
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::{RegionId, RegionSet};
use crate::stats::{DropReason, QueueCounters};
use std::collections::VecDeque;
use std::sync::Arc;

/// What one TX queue's injector did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Frames dropped (also counted as the `injected` drop reason).
    pub dropped: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Duplicates skipped: no free buffer, or the frame is in GPU memory.
    pub duplicate_skipped: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Frames sent after their successor.
    pub reordered: u64,
    /// Frames delayed.
    pub delayed: u64,
}

/// The fault injector of one TX queue.
pub struct FaultInjector {
    config: FaultInjection,
    rng: fastrand::Rng,
    regions: Arc<RegionSet>,
    port: PortIndex,
    queue: QueueId,
    counters: Arc<QueueCounters>,
    /// Frames numbered so far.
    frame: u64,
    /// A reordered frame, waiting for the next one to overtake it.
    swap: Option<Burst>,
    /// Delayed frames and the frame number after which each goes out.
    delayed: VecDeque<(u64, Burst)>,
    counts: FaultCounts,
}

impl FaultInjector {
    /// An injector for TX queue `queue` of interface `port`; `counters` are the queue's.
    pub fn new(
        config: FaultInjection,
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Self {
        // Each queue gets its own stream of choices from the one seed.
        let seed = config.seed ^ ((u64::from(port.0) << 16 | u64::from(queue.0)) << 32);
        Self {
            config,
            rng: fastrand::Rng::with_seed(seed),
            regions,
            port,
            queue,
            counters,
            frame: 0,
            swap: None,
            delayed: VecDeque::new(),
            counts: FaultCounts::default(),
        }
    }

    /// What was done so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }

    /// True when frames are held back (reordered or delayed).
    pub fn holds_frames(&self) -> bool {
        self.swap.is_some() || !self.delayed.is_empty()
    }

    fn pick(&mut self) -> Option<FaultAction> {
        let n = self.frame;
        for rule in &self.config.rules {
            let hit = match rule.select {
                FaultSelect::Every(k) => n.is_multiple_of(k),
                FaultSelect::At(k) => n == k,
                FaultSelect::Percent(p) => self.rng.f64() * 100.0 < p,
            };
            if hit {
                return Some(rule.action);
            }
        }
        None
    }

    fn one_frame(&self) -> Burst {
        Burst::empty(self.regions.clone(), self.port, self.queue, 1)
    }

    /// Applies the rules to every frame of `input`; returns what goes on the wire now.
    pub fn apply(&mut self, mut input: Burst) -> Burst {
        let mut out = Burst::empty(self.regions.clone(), self.port, self.queue, input.len());
        while !input.is_empty() {
            let mut frame = self.one_frame();
            frame.take_from(&mut input, 1);
            self.frame += 1;
            match self.pick() {
                None => self.emit(&mut out, frame),
                Some(FaultAction::Drop) => {
                    self.counts.dropped += 1;
                    self.counters.drop_packets(DropReason::Injected, 1);
                    drop(frame);
                }
                Some(FaultAction::Corrupt) => {
                    corrupt(&mut frame);
                    self.counts.corrupted += 1;
                    self.emit(&mut out, frame);
                }
                Some(FaultAction::Duplicate) => {
                    let copy = self.copy_of(&frame);
                    self.emit(&mut out, frame);
                    match copy {
                        Some(c) => {
                            self.counts.duplicated += 1;
                            out.take_from(&mut { c }, 1);
                        }
                        None => self.counts.duplicate_skipped += 1,
                    }
                }
                Some(FaultAction::Reorder) => {
                    if self.swap.is_none() {
                        self.counts.reordered += 1;
                        self.swap = Some(frame);
                    } else {
                        self.emit(&mut out, frame);
                    }
                }
                Some(FaultAction::Delay { frames }) => {
                    self.counts.delayed += 1;
                    self.delayed
                        .push_back((self.frame + u64::from(frames), frame));
                }
                Some(FaultAction::Panic) => panic!(
                    "fault injection: panic at frame {} of port {} TX queue {}",
                    self.frame, self.port, self.queue
                ),
            }
        }
        out
    }

    /// Appends `frame`, then whatever it lets out: a reordered frame it overtook, and
    /// delayed frames whose time came.
    fn emit(&mut self, out: &mut Burst, mut frame: Burst) {
        out.take_from(&mut frame, 1);
        if let Some(mut s) = self.swap.take() {
            out.take_from(&mut s, 1);
        }
        while self
            .delayed
            .front()
            .is_some_and(|(at, _)| *at <= self.frame)
        {
            let (_, mut d) = self.delayed.pop_front().expect("front exists");
            out.take_from(&mut d, 1);
        }
    }

    /// Everything held back, in order, for when the queue has nothing else to send.
    pub fn release_held(&mut self) -> Option<Burst> {
        if !self.holds_frames() {
            return None;
        }
        let mut out = Burst::empty(self.regions.clone(), self.port, self.queue, 1);
        if let Some(mut s) = self.swap.take() {
            out.take_from(&mut s, 1);
        }
        for (_, mut d) in self.delayed.drain(..) {
            out.take_from(&mut d, 1);
        }
        Some(out)
    }

    /// A copy of a one-frame burst in new buffers of the same regions, or `None` when
    /// no buffer is free or the frame is not in host memory.
    fn copy_of(&self, frame: &Burst) -> Option<Burst> {
        let p = frame.packets().first()?;
        let regions: Vec<RegionId> = p.segments().iter().map(|s| s.region).collect();
        let mut copy = Burst::allocate(self.regions.clone(), self.port, self.queue, &regions, 1)?;
        for (seg, s) in p.segments().iter().enumerate() {
            let bytes = frame.data(0, seg)?;
            copy.buffer_mut(0, seg)?[..bytes.len()].copy_from_slice(bytes);
            copy.set_len(0, seg, s.len as usize);
        }
        copy.set_flow_id(0, p.flow_id);
        Some(copy)
    }
}

/// Bytes from the corrupted byte to the frame's end: the bench trailer is the last 20
/// bytes and starts with its magic, so every checker sees the damage, with or without
/// payload checksums.
const CORRUPT_FROM_END: usize = 20;

/// Inverts one byte of the frame's last segment, [`CORRUPT_FROM_END`] bytes before its end
/// (its first byte when shorter).
fn corrupt(frame: &mut Burst) {
    let Some(p) = frame.packets().first() else {
        return;
    };
    let seg = p.segments().len() - 1;
    let len = p.segments()[seg].len as usize;
    if let Some(buf) = frame.buffer_mut(0, seg)
        && len > 0
    {
        buf[len.saturating_sub(CORRUPT_FROM_END)] ^= 0xff;
    }
}
