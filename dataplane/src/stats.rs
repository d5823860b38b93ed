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
    /// From a source outside the interface's `allowed_peers`, or not the peer a UDP
    /// server already answers.
    RejectedPeer,
    /// A TX flow's VLAN tag or tunnel headers did not fit the frame's buffer.
    TxNoRoom,
}

/// Lets a warning that traffic can trigger through at most once a second, and says how
/// many were held back meanwhile, so a remote sender cannot flood the log. Counters, not
/// the log, are where every event is counted.
#[derive(Debug, Default)]
pub struct WarnLimiter {
    /// Milliseconds since [`WarnLimiter::epoch`] before which nothing passes.
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl WarnLimiter {
    /// How long after one warning the next may pass.
    pub const PERIOD_MS: u64 = 1000;

    /// A limiter that lets the first warning through.
    pub const fn new() -> Self {
        Self {
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    fn epoch() -> std::time::Instant {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        *EPOCH.get_or_init(std::time::Instant::now)
    }

    /// `Some(n)` when a warning may be logged now (`n` were held back since the last),
    /// `None` when it is to be held back.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Self::epoch().elapsed().as_millis() as u64)
    }

    /// [`WarnLimiter::allow`] at `now_ms` milliseconds on the limiter's clock.
    pub fn allow_at(&self, now_ms: u64) -> Option<u64> {
        let next = self.next_ms.load(Ordering::Relaxed);
        if now_ms < next
            || self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms + Self::PERIOD_MS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            self.held.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.held.swap(0, Ordering::Relaxed))
    }

    /// " (N similar warnings held back)" for `held` > 0, else "".
    pub fn note(held: u64) -> String {
        if held == 0 {
            String::new()
        } else {
            format!(" ({held} similar warning(s) held back in the last second(s))")
        }
    }
}

/// Counters of one queue. Each counter has one writer (the queue's worker, or the thread
/// owning the queue handle), so plain load+store updates suffice.
#[derive(Debug, Default)]
pub struct QueueCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
    drops: [AtomicU64; 10],
    copied: AtomicU64,
    busy_ns: AtomicU64,
    stage_in_flight: AtomicU64,
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

    /// Sets the bursts its GPU stage has in flight (a gauge; written only on change).
    #[inline]
    pub fn set_stage_in_flight(&self, bursts: usize) {
        if self.stage_in_flight.load(Ordering::Relaxed) != bursts as u64 {
            self.stage_in_flight.store(bursts as u64, Ordering::Relaxed);
        }
    }

    /// Bursts the queue's stage has in flight (0 without a stage).
    pub fn stage_in_flight(&self) -> u64 {
        self.stage_in_flight.load(Ordering::Relaxed)
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
                rejected_peer: d(DropReason::RejectedPeer),
                tx_no_room: d(DropReason::TxNoRoom),
            },
        )
    }
}

/// Drop counts by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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
    /// From a peer the interface does not take traffic from.
    pub rejected_peer: u64,
    /// TX frames a TX flow could not grow in their buffer (not sent).
    pub tx_no_room: u64,
}

/// The reasons with drops, by name and count (`ring_full 12, no_flow 3`), or `none`.
impl std::fmt::Display for Drops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut any = false;
        for (reason, n) in self.by_reason().into_iter().filter(|(_, n)| *n > 0) {
            write!(f, "{}{reason} {n}", if any { ", " } else { "" })?;
            any = true;
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
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
            + self.rejected_peer
            + self.tx_no_room
    }

    /// Every reason's name (as the JSON fields, metric labels and CSV columns say it) with
    /// its count, in a fixed order.
    pub fn by_reason(&self) -> [(&'static str, u64); 10] {
        [
            ("ring_full", self.ring_full),
            ("pool_empty", self.pool_empty),
            ("no_flow", self.no_flow),
            ("malformed", self.malformed),
            ("engine_missed", self.engine_missed),
            ("gpu_copy", self.gpu_copy),
            ("injected", self.injected),
            ("disconnected", self.disconnected),
            ("rejected_peer", self.rejected_peer),
            ("tx_no_room", self.tx_no_room),
        ]
    }

    /// The counts added since `earlier` (counters only grow).
    pub fn since(&self, earlier: &Drops) -> Drops {
        Drops {
            ring_full: self.ring_full.saturating_sub(earlier.ring_full),
            pool_empty: self.pool_empty.saturating_sub(earlier.pool_empty),
            no_flow: self.no_flow.saturating_sub(earlier.no_flow),
            malformed: self.malformed.saturating_sub(earlier.malformed),
            engine_missed: self.engine_missed.saturating_sub(earlier.engine_missed),
            gpu_copy: self.gpu_copy.saturating_sub(earlier.gpu_copy),
            injected: self.injected.saturating_sub(earlier.injected),
            disconnected: self.disconnected.saturating_sub(earlier.disconnected),
            rejected_peer: self.rejected_peer.saturating_sub(earlier.rejected_peer),
            tx_no_room: self.tx_no_room.saturating_sub(earlier.tx_no_room),
        }
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
        self.rejected_peer += o.rejected_peer;
        self.tx_no_room += o.tx_no_room;
    }
}

/// Counters of one queue, labelled.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
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

/// The version and commit this library was built from.
pub fn build_version() -> String {
    format!(
        "{} ({})",
        env!("CARGO_PKG_VERSION"),
        env!("DATAPLANE_COMMIT")
    )
}

/// The commit this library was built from (12 hex digits, `-dirty` when the work tree had
/// changes, `unknown` outside a git checkout).
pub const BUILD_COMMIT: &str = env!("DATAPLANE_COMMIT");

/// One interval of a run (normally a second): rates over the interval that ended `t_s`
/// seconds after recording started.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct SeriesPoint {
    /// End of the interval, seconds since recording started.
    pub t_s: f64,
    /// Sent million packets per second.
    pub tx_mpps: f64,
    /// Sent Gb/s (frame bytes).
    pub tx_gbps: f64,
    /// Received million packets per second.
    pub rx_mpps: f64,
    /// Received Gb/s (frame bytes).
    pub rx_gbps: f64,
    /// Drops in the interval, by reason.
    pub drops: Drops,
    /// Per queue.
    pub queues: Vec<QueuePoint>,
}

/// One queue's interval.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct QueuePoint {
    /// Interface name.
    pub interface: String,
    /// `rx` or `tx`.
    pub direction: &'static str,
    /// Queue id.
    pub queue: u16,
    /// Million packets per second.
    pub mpps: f64,
    /// Gb/s.
    pub gbps: f64,
    /// Drops in the interval, by reason.
    pub drops: Drops,
}

impl SeriesPoint {
    /// The interval from `last` to `now`, `dt_s` seconds long, ending at `t_s`. Queues are
    /// matched by position (snapshots of one plane list them in the same order).
    pub fn between(t_s: f64, dt_s: f64, last: &Snapshot, now: &Snapshot) -> Self {
        let dt = dt_s.max(1e-9);
        let rate = |p: u64, b: u64| (p as f64 / dt / 1e6, b as f64 * 8.0 / dt / 1e9);
        let (tx, tx_b) = now.total(Direction::Tx);
        let (tx0, tx_b0) = last.total(Direction::Tx);
        let (rx, rx_b) = now.total(Direction::Rx);
        let (rx0, rx_b0) = last.total(Direction::Rx);
        let (tx_mpps, tx_gbps) = rate(tx.saturating_sub(tx0), tx_b.saturating_sub(tx_b0));
        let (rx_mpps, rx_gbps) = rate(rx.saturating_sub(rx0), rx_b.saturating_sub(rx_b0));
        // Matched by name: a live change adds and removes queues between two snapshots.
        let queues = now
            .queues
            .iter()
            .filter_map(|q| {
                let q0 = last.queues.iter().find(|q0| {
                    (q0.queue, q0.direction, &q0.interface) == (q.queue, q.direction, &q.interface)
                })?;
                Some((q, q0))
            })
            .map(|(q, q0)| {
                let (mpps, gbps) = rate(
                    q.packets.saturating_sub(q0.packets),
                    q.bytes.saturating_sub(q0.bytes),
                );
                QueuePoint {
                    interface: q.interface.clone(),
                    direction: q.direction,
                    queue: q.queue,
                    mpps,
                    gbps,
                    drops: q.drops.since(&q0.drops),
                }
            })
            .collect();
        SeriesPoint {
            t_s,
            tx_mpps,
            tx_gbps,
            rx_mpps,
            rx_gbps,
            drops: now.drops().since(&last.drops()),
            queues,
        }
    }
}

/// The series as CSV: one row per interval (time, rates, drops by reason), then per
/// queue its Mpps, Gb/s and drops (columns named `IFACE.DIRQUEUE.*`).
pub fn series_csv(series: &[SeriesPoint]) -> String {
    let mut out = String::from("t_s,tx_mpps,tx_gbps,rx_mpps,rx_gbps");
    for (r, _) in Drops::default().by_reason() {
        out += &format!(",drops_{r}");
    }
    if let Some(first) = series.first() {
        for q in &first.queues {
            let name = format!("{}.{}{}", q.interface, q.direction, q.queue);
            out += &format!(",{name}.mpps,{name}.gbps,{name}.drops");
        }
    }
    out.push('\n');
    for p in series {
        out += &format!(
            "{:.3},{:.4},{:.4},{:.4},{:.4}",
            p.t_s, p.tx_mpps, p.tx_gbps, p.rx_mpps, p.rx_gbps
        );
        for (_, d) in p.drops.by_reason() {
            out += &format!(",{d}");
        }
        for q in &p.queues {
            out += &format!(",{:.4},{:.4},{}", q.mpps, q.gbps, q.drops.total());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod series_tests {
    use super::*;

    fn queue(direction: &'static str, packets: u64, bytes: u64, ring_full: u64) -> QueueStats {
        QueueStats {
            interface: "p0".into(),
            direction,
            queue: 0,
            packets,
            bytes,
            copied_packets: 0,
            busy_ns: 0,
            drops: Drops {
                ring_full,
                ..Drops::default()
            },
        }
    }

    #[test]
    fn a_series_point_holds_the_rates_and_drops_of_its_interval_and_csv_has_a_row_per_point() {
        let last = Snapshot {
            queues: vec![
                queue("rx", 1_000, 64_000, 1),
                queue("tx", 2_000, 128_000, 0),
            ],
        };
        let now = Snapshot {
            queues: vec![
                queue("rx", 3_001_000, 192_064_000, 6),
                queue("tx", 3_002_000, 192_128_000, 0),
            ],
        };
        // 3 M packets of 64 B in 0.5 s: 6 Mpps, 3.072 Gb/s; 5 ring_full drops.
        let p = SeriesPoint::between(1.5, 0.5, &last, &now);
        assert_eq!(p.t_s, 1.5);
        assert!((p.rx_mpps - 6.0).abs() < 1e-9 && (p.tx_mpps - 6.0).abs() < 1e-9);
        assert!((p.rx_gbps - 3.072).abs() < 1e-9);
        assert_eq!(p.drops.ring_full, 5);
        assert_eq!(p.queues[0].drops.ring_full, 5);
        assert!((p.queues[1].mpps - 6.0).abs() < 1e-9);
        let csv = series_csv(&[p.clone(), p]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("t_s,tx_mpps,tx_gbps,rx_mpps,rx_gbps,drops_ring_full"));
        assert!(lines[0].ends_with("p0.tx0.mpps,p0.tx0.gbps,p0.tx0.drops"));
        assert_eq!(
            lines[1].split(',').count(),
            lines[0].split(',').count(),
            "{csv}"
        );
        assert!(lines[1].starts_with("1.500,6.0000,3.0720,6.0000,3.0720,5,0"));
    }
}

#[cfg(test)]
mod warn_limiter_tests {
    use super::WarnLimiter;

    #[test]
    fn a_flood_of_warnings_passes_once_a_period_and_counts_the_rest() {
        let w = WarnLimiter::new();
        assert_eq!(w.allow_at(5), Some(0));
        assert!((0..10_000).all(|i| w.allow_at(5 + i % 999).is_none()));
        assert_eq!(w.allow_at(5 + WarnLimiter::PERIOD_MS), Some(10_000));
        assert_eq!(w.allow_at(6 + WarnLimiter::PERIOD_MS), None);
    }
}

#[cfg(test)]
mod drops_text_tests {
    use super::Drops;

    /// People read drop counts by the names the JSON and metrics use, only the reasons
    /// that happened.
    #[test]
    fn drops_read_as_reasons_with_counts() {
        assert_eq!(Drops::default().to_string(), "none");
        let d = Drops {
            ring_full: 12,
            no_flow: 3,
            ..Default::default()
        };
        assert_eq!(d.to_string(), "ring_full 12, no_flow 3");
    }
}
