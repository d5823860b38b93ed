//! The stats thread: samples every queue's counters once a second on `master_core`, logs
//! drops as they appear, prints a bench's progress line, and records the per-second series
//! a bench asks for.

use super::{QueueLabel, StartError};
use crate::affinity;
use crate::config::Direction;
use crate::stats::{QueueCounters, QueueStats, Snapshot};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub(super) fn snapshot(counters: &[(QueueLabel, Arc<QueueCounters>)]) -> Snapshot {
    Snapshot {
        queues: counters
            .iter()
            .map(|(l, c)| {
                let (packets, bytes, drops) = c.snapshot();
                QueueStats {
                    interface: l.interface.clone(),
                    direction: l.direction.name(),
                    queue: l.queue.0,
                    packets,
                    bytes,
                    copied_packets: c.copied(),
                    busy_ns: c.busy_ns(),
                    drops,
                }
            })
            .collect(),
    }
}

#[derive(Default)]
pub(super) struct StatsControl {
    stop: AtomicBool,
    pub(super) progress_total_s: AtomicU64,
    /// While recording: a point per second since it started.
    pub(super) series: Mutex<Option<SeriesRecording>>,
}

/// A per-second series being recorded.
pub(super) struct SeriesRecording {
    started: Instant,
    last: Snapshot,
    pub(super) last_at: Instant,
    pub(super) points: Vec<crate::stats::SeriesPoint>,
}

impl SeriesRecording {
    pub(super) fn new(now: Snapshot) -> Self {
        Self {
            started: Instant::now(),
            last: now,
            last_at: Instant::now(),
            points: Vec::new(),
        }
    }

    /// Adds the interval from the last reading to `now`.
    pub(super) fn advance(&mut self, now: Snapshot) {
        let at = Instant::now();
        self.points.push(crate::stats::SeriesPoint::between(
            (at - self.started).as_secs_f64(),
            (at - self.last_at).as_secs_f64(),
            &self.last,
            &now,
        ));
        self.last = now;
        self.last_at = at;
    }
}

/// Samples the counters once per second on `master_core`, logs drops as they appear and,
/// during a bench, prints a progress line.
pub(super) struct StatsThread {
    pub(super) control: Arc<StatsControl>,
    thread: Option<JoinHandle<()>>,
}

impl StatsThread {
    pub(super) fn spawn(core: u32, counters: super::CounterList) -> Result<Self, StartError> {
        let control = Arc::new(StatsControl::default());
        let ctl = control.clone();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dp-stats".into())
            .spawn(move || {
                let pinned = affinity::pin_current_thread(core);
                let failed = pinned.is_err();
                let _ = ready_tx.send(pinned);
                if !failed {
                    stats_loop(&ctl, &counters);
                }
            })
            .map_err(StartError::Spawn)?;
        let mut s = Self {
            control,
            thread: Some(thread),
        };
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(s),
            Ok(Err(e)) => {
                s.stop();
                Err(StartError::Pin(e))
            }
            Err(_) => Err(StartError::Spawn(std::io::Error::other(
                "stats thread exited during start",
            ))),
        }
    }

    pub(super) fn stop(&mut self) {
        self.control.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn stats_loop(ctl: &StatsControl, counters: &super::CounterList) {
    let started = Instant::now();
    let mut last = snapshot(&counters.load());
    let mut last_at = Instant::now();
    let mut next = last_at + Duration::from_secs(1);
    while !ctl.stop.load(Ordering::Relaxed) {
        // Sleep in short steps so that shutdown never waits long for this thread.
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() < next {
            continue;
        }
        next += Duration::from_secs(1);
        let now = snapshot(&counters.load());
        let dt = last_at.elapsed().as_secs_f64().max(1e-9);
        last_at = Instant::now();
        if let Some(r) = ctl
            .series
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            r.advance(now.clone());
        }
        let (d_now, d_last) = (now.drops(), last.drops());
        if d_now.total() > d_last.total() {
            tracing::warn!(
                ring_full = d_now.ring_full - d_last.ring_full,
                pool_empty = d_now.pool_empty - d_last.pool_empty,
                no_flow = d_now.no_flow - d_last.no_flow,
                malformed = d_now.malformed - d_last.malformed,
                engine_missed = d_now.engine_missed - d_last.engine_missed,
                gpu_copy = d_now.gpu_copy - d_last.gpu_copy,
                injected = d_now.injected - d_last.injected,
                "packets dropped in the last second"
            );
        }
        let total = ctl.progress_total_s.load(Ordering::Relaxed);
        if total > 0 {
            let (tx, _) = now.total(Direction::Tx);
            let (rx, rx_bytes) = now.total(Direction::Rx);
            let (tx0, _) = last.total(Direction::Tx);
            let (rx0, rx_bytes0) = last.total(Direction::Rx);
            let elapsed = started.elapsed().as_secs().min(total);
            let width = 20;
            let done = (elapsed * width / total.max(1)) as usize;
            eprintln!(
                "[{}{}] {elapsed:>3}/{total} s  tx {:>7.2} Mpps  rx {:>7.2} Mpps {:>7.2} Gb/s  drops {}",
                "#".repeat(done),
                "-".repeat(width as usize - done),
                (tx - tx0) as f64 / dt / 1e6,
                (rx - rx0) as f64 / dt / 1e6,
                (rx_bytes - rx_bytes0) as f64 * 8.0 / dt / 1e9,
                d_now.total(),
            );
        }
        last = now;
    }
}
