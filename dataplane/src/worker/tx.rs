//! TX work on a worker: `TxTask` sends what the application queued, paced (`Pacer`) and
//! on time (`SendLateness`) where asked, through its stage when it has one.

use super::*;
use crate::memory::RegionId;
use crate::steering::{TransformError, TxTransformer};

/// How far a paced queue may catch up after coming late: 1 ms of sending.
pub const PACING_DEPTH_NS: u64 = 1_000_000;

/// A TX queue's rate cap, a token bucket kept as the time the next burst may go: each
/// burst moves it on by `8000 * bytes / mbps` ns (the remainder carried, so rounding does
/// not drift). A worker that comes late (descheduled, busy with other queues) may catch up
/// by at most [`PACING_DEPTH_NS`] of sending; longer idle time earns no more credit.
#[derive(Clone, Debug)]
pub struct Pacer {
    pub(super) mbps: u64,
    /// Nanoseconds (since `origin`) before which nothing more is sent.
    pub(super) next_ns: u64,
    /// `8000 * bytes` not yet turned into whole nanoseconds.
    pub(super) carry: u64,
    pub(super) origin: Instant,
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

    pub(super) fn ns(&self, now: Instant) -> u64 {
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
    pub(super) in_flight: Option<Burst>,
    pub(super) pacer: Option<Pacer>,
    /// `tx_eth_src`: the MAC written into every frame's Ethernet source field.
    pub(super) eth_src: Option<[u8; 6]>,
    /// The interface's TX flows (VLAN push, tunnel encap) and the region frames are
    /// copied into to apply them, after `eth_src`.
    pub(super) transforms: Option<(TxTransformer, RegionId)>,
    /// A burst waiting for free buffers of the transform region.
    pub(super) untransformed: Option<Burst>,
    /// Moves bursts out of GPU memory into a host staging region before the port sends
    /// them (engines that read packets with the CPU).
    pub(super) stage: Option<Box<crate::stage::RxStage>>,
    /// A burst the stage could not take yet (its staging region had no free buffers).
    pub(super) unstaged: Option<Burst>,
    /// `accurate_send`: the clock packets' send times are read against, and how late
    /// they went.
    pub(super) send_at: Option<(WallClock, Arc<SendLateness>)>,
    /// Packets of a burst whose send time has not come yet (they go before anything
    /// newer).
    pub(super) held_back: Option<Burst>,
    /// Set when the plane removes the queue while it runs.
    pub(super) retirement: Option<Arc<super::Retirement>>,
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
            transforms: None,
            untransformed: None,
            stage: None,
            unstaged: None,
            send_at: None,
            held_back: None,
            retirement: None,
        }
    }

    /// Lets the plane remove the queue while it runs (see [`super::Retirement`]).
    pub(crate) fn with_retirement(mut self, retirement: Arc<super::Retirement>) -> Self {
        self.retirement = Some(retirement);
        self
    }

    /// True once the port closed, or once the plane removed the queue and everything
    /// queued on it went out (a bounded number of polls per housekeeping pass; the
    /// application end sees `Stopped` once the task is gone).
    pub(super) fn retire(&mut self) -> bool {
        if self.port.closed() {
            return true;
        }
        let Some(r) = self.retirement.clone().filter(|r| r.asked()) else {
            return false;
        };
        for _ in 0..super::rx::RETIRE_POLLS {
            if !self.poll() {
                break;
            }
        }
        let holds = self.in_flight.is_some()
            || self.untransformed.is_some()
            || self.unstaged.is_some()
            || self.held_back.is_some()
            || !self.ring.is_empty();
        if holds {
            return false;
        }
        r.finished();
        true
    }

    /// Sends no packet before its `timestamp_ns` (`accurate_send`), recording how late
    /// each went into `lateness`.
    pub(crate) fn with_send_times(mut self, lateness: Arc<SendLateness>) -> Self {
        self.send_at = Some((WallClock::new(), lateness));
        self
    }

    /// Splits off the packets whose send time has not come; `None` when even the first
    /// must wait. Records the lateness of those that go.
    pub(super) fn due(&mut self, mut burst: Burst) -> Result<Burst, Burst> {
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
    pub(super) fn next_burst(&mut self) -> Option<Burst> {
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

    /// Applies `transforms` (the interface's TX flows) to the frames this queue sends, in
    /// copies made in `region` (a host region whose buffers hold the queue's largest frame
    /// and the most bytes a flow adds).
    pub fn with_transforms(mut self, transforms: TxTransformer, region: RegionId) -> Self {
        self.transforms = (!transforms.is_empty()).then_some((transforms, region));
        self
    }

    /// A burst taken for sending (once: a burst the port gives back is not taken again)
    /// with the TX flows' tags and headers on the frames they match, as copies in the
    /// transform region; the application's buffers go back to their pool as it wrote them.
    /// A burst no flow matches goes as it is. Frames that do not fit a transform buffer
    /// are dropped and counted (`tx_no_room`). `Err` gives the burst back when the
    /// transform region has no free buffers yet (the engine still holds them).
    fn transform(&self, b: Burst) -> Result<Burst, Burst> {
        let Some((t, region)) = &self.transforms else {
            return Ok(b);
        };
        let n = b.len();
        if !(0..n).any(|i| b.data(i, 0).is_some_and(|f| t.matches(f))) {
            return Ok(b);
        }
        let Some(mut out) =
            Burst::allocate(b.regions().clone(), b.port(), b.queue(), &[*region], n)
        else {
            return Err(b);
        };
        let mut no_room = Vec::new();
        for (i, p) in b.packets().iter().enumerate() {
            out.set_flow_id(i, p.flow_id);
            out.set_timestamp(i, p.timestamp_ns);
            let buffer = out
                .buffer_mut(i, 0)
                .expect("the transform region is host memory");
            let mut len = 0;
            // Planning keeps such queues in memory the CPU reads.
            let fits = (0..p.segments().len()).all(|s| match b.data(i, s) {
                Some(d) if len + d.len() <= buffer.len() => {
                    buffer[len..len + d.len()].copy_from_slice(d);
                    len += d.len();
                    true
                }
                _ => false,
            });
            match t.apply(buffer, len, 0) {
                Ok(grown) if fits => out.set_len(i, 0, grown),
                Ok(_) | Err(TransformError::NoRoom { .. }) => {
                    if no_room.is_empty() {
                        tracing::warn!(
                            "TX flow: a {}-byte frame does not fit a transform buffer with the headers its flow adds; dropped (tx_no_room)",
                            p.len()
                        );
                    }
                    no_room.push(i);
                }
            }
        }
        drop(b);
        if !no_room.is_empty() {
            let dropped = out.drop_front_where(n, |i| no_room.binary_search(&i).is_ok());
            self.counters
                .drop_packets(DropReason::TxNoRoom, dropped as u64);
        }
        Ok(out)
    }

    /// Writes the `tx_eth_src` MAC into the source address of every frame of `b`.
    fn stamp_eth_src(&self, b: &mut Burst) {
        let Some(mac) = self.eth_src else { return };
        for i in 0..b.len() {
            // Planning keeps the first segment of such queues in host memory.
            if let Some(frame) = b.buffer_mut(i, 0)
                && frame.len() >= 12
            {
                frame[6..12].copy_from_slice(&mac);
            }
        }
    }

    /// Caps the queue at `mbps` Mb/s, paced by this task.
    pub fn with_pacing(mut self, mbps: u64) -> Self {
        self.pacer = Some(Pacer::new(mbps, Instant::now()));
        self
    }

    pub(super) fn poll(&mut self) -> bool {
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
                    None => {
                        let fresh = match self.untransformed.take() {
                            Some(b) => Some(b),
                            None => self.next_burst().map(|mut b| {
                                self.stamp_eth_src(&mut b);
                                b
                            }),
                        };
                        let Some(fresh) = fresh else {
                            self.port.idle();
                            return false;
                        };
                        match self.transform(fresh) {
                            Ok(b) => b,
                            Err(waiting) => {
                                self.untransformed = Some(waiting);
                                self.port.idle();
                                return false;
                            }
                        }
                    }
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
