//! How a run is judged: the drain after the generators stop, the checkers' totals, the
//! packets lost (attributed to drop counters or not) and every problem that makes the
//! run not lossless.

use super::*;

/// Sent packets that did not arrive, split by what explains them.
pub(super) struct Loss {
    /// Distinct packets received.
    pub(super) unique_rx: u64,
    pub(super) lost: u64,
    /// Of `lost`, those no drop counter explains.
    pub(super) unattributed: u64,
    /// Neither received nor dropped when the drain's deadline passed.
    pub(super) in_flight: u64,
}

impl Loss {
    /// Missing packets that no counter explains, when the deadline cut the drain short,
    /// are in flight; after a complete drain they are lost without attribution.
    pub(super) fn reckon(
        tx_packets: u64,
        checked: &CheckTotals,
        dropped: u64,
        both_sides: bool,
        drain: &Drain,
    ) -> Self {
        let unique_rx = checked.packets.saturating_sub(checked.counts.duplicates);
        let missing = if both_sides {
            tx_packets.saturating_sub(unique_rx)
        } else {
            0
        };
        let drained = both_sides && drain.pipeline_empty(tx_packets);
        let unexplained = missing.saturating_sub(dropped);
        let (lost, unattributed, in_flight) = if drained || !both_sides {
            (missing, unexplained, 0)
        } else {
            (missing - unexplained, 0, unexplained)
        };
        Self {
            unique_rx,
            lost,
            unattributed,
            in_flight,
        }
    }
}

/// Why the run is not lossless: drops, losses, unsent and damaged packets, the reorder's
/// and the workers' failures (after the checkers' own problems, already in `problems`).
#[allow(clippy::too_many_arguments)]
pub(super) fn note_problems(
    problems: &mut Vec<String>,
    config: &Config,
    tx_packets: u64,
    drops: &Drops,
    loss: &Loss,
    unsent: u64,
    checked: &CheckTotals,
    both_sides: bool,
) {
    if drops.total() > 0 {
        problems.push(format!(
            "data plane dropped {} packets ({drops})",
            drops.total()
        ));
    }
    let (lost, unattributed) = (loss.lost, loss.unattributed);
    if lost > 0 {
        problems.push(format!(
            "{lost} of {tx_packets} sent packets never arrived ({} attributed to drop counters, {unattributed} unattributed)",
            lost - unattributed
        ));
    }
    if unsent > 0 {
        problems.push(format!(
            "{unsent} of {tx_packets} generated packets were never handed to the engine"
        ));
    }
    let counts = &checked.counts;
    if counts.corrupt > 0 || counts.reordered > 0 || counts.gaps > 0 || counts.duplicates > 0 {
        problems.push(format!(
            "checker: {} corrupt, {} missing from sequences, {} out of order, {} duplicated",
            counts.corrupt, counts.gaps, counts.reordered, counts.duplicates
        ));
    }
    problems.extend(reorder_problems(config, checked.reorder.as_ref()));
    if both_sides && loss.unique_rx > tx_packets {
        problems.push(format!(
            "received {} distinct packets but only {tx_packets} were sent",
            loss.unique_rx
        ));
    }
}

/// The drain after the generators stopped: where the packets still were when it ended.
pub(super) struct Drain {
    /// When it began.
    pub(super) start: Instant,
    /// Generated packets the workers never handed to the engine (sender on its own).
    pub(super) unsent: u64,
    /// The counters as the drain ended, before the checkers stopped reading.
    pub(super) pipeline: dataplane::stats::Snapshot,
    /// Distinct packets the checkers had seen then.
    pub(super) unique_seen: u64,
}

impl Drain {
    /// Delivers partial bursts, then waits until the pipeline is empty (every sent packet
    /// received or counted as dropped) or the deadline passes. A run with only the
    /// receiving side here cannot know what was sent: it waits until nothing moves. A
    /// sender on its own (the other side is another process) waits until the workers have
    /// handed every generated packet to the engine, then gives the link a moment to carry
    /// the last ones before the ports close.
    pub(super) fn run(
        plane: &DataPlane,
        received: &AtomicU64,
        tx_packets: u64,
        both_sides: bool,
        tx_only: bool,
        opts: &RawOptions,
        interrupted: &AtomicBool,
    ) -> Self {
        plane.flush();
        let deadline = if interrupted.load(Ordering::Relaxed) {
            opts.drain_deadline.min(Duration::from_secs(1))
        } else {
            opts.drain_deadline
        };
        let start = Instant::now();
        if both_sides {
            while received.load(Ordering::Relaxed) + plane.snapshot().drops().total() < tx_packets
                && start.elapsed() < deadline
                && plane.worker_failures().is_empty()
            {
                std::thread::sleep(Duration::from_millis(2));
            }
        } else if !tx_only {
            let mut last = received.load(Ordering::Relaxed);
            let mut last_change = Instant::now();
            while start.elapsed() < deadline && last_change.elapsed() < Duration::from_millis(300) {
                std::thread::sleep(Duration::from_millis(2));
                let now = received.load(Ordering::Relaxed);
                if now != last {
                    last = now;
                    last_change = Instant::now();
                }
            }
        }
        let mut unsent = 0;
        if tx_only {
            let transmitted = || plane.snapshot().total(Direction::Tx).0;
            while transmitted() < tx_packets && start.elapsed() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            unsent = tx_packets.saturating_sub(transmitted());
            std::thread::sleep(Duration::from_millis(200));
        }
        Self {
            start,
            unsent,
            pipeline: plane.snapshot(),
            unique_seen: received.load(Ordering::Relaxed),
        }
    }

    /// Every sent packet received (once) or counted as dropped when the drain ended.
    pub(super) fn pipeline_empty(&self, tx_packets: u64) -> bool {
        self.unique_seen + self.pipeline.drops().total() >= tx_packets
    }

    /// Where the packets in flight were when the drain's deadline passed.
    pub(super) fn in_flight_cause(
        &self,
        in_flight: u64,
        tx_packets: u64,
        interrupted: &AtomicBool,
    ) -> String {
        let pipeline = &self.pipeline;
        let (tx_done, _) = pipeline.total(Direction::Tx);
        let (rx_done, _) = pipeline.total(Direction::Rx);
        format!(
            "{in_flight} packets were neither received nor counted as dropped {:.1} s after the generators stopped (drain deadline{}): {} not yet taken by the TX workers, {} transmitted but not delivered to an RX queue, {} delivered but not yet read by the checkers",
            self.start.elapsed().as_secs_f64(),
            if interrupted.load(Ordering::Relaxed) {
                ", shortened by the interrupt"
            } else {
                ""
            },
            tx_packets.saturating_sub(tx_done),
            tx_done.saturating_sub(rx_done + pipeline.drops().total()),
            rx_done.saturating_sub(self.unique_seen),
        )
    }
}

/// The checkers' results added up.
#[derive(Default)]
pub(super) struct CheckTotals {
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) counts: CheckCounts,
    /// The first problem each checker found, and the captures' errors.
    pub(super) problems: Vec<String>,
    /// Worker failures the checkers saw.
    pub(super) failures: Vec<String>,
    pub(super) flow_ids: BTreeMap<u32, u64>,
    pub(super) reorder: Option<ReorderReport>,
    pub(super) captures: Vec<CaptureReport>,
    pub(super) latency: Latency,
    pub(super) stamped: u64,
    pub(super) polled: u64,
    /// Per-checker stage costs (`--stages`).
    pub(super) stages: Vec<StageCost>,
}

impl CheckTotals {
    pub(super) fn collect(results: Vec<CheckerResult>, seconds: f64, timed: bool) -> Self {
        let mut t = Self::default();
        for (i, r) in results.into_iter().enumerate() {
            for mut cap in r.captures {
                cap.mbytes_per_s = cap.stats.written_bytes as f64 / seconds.max(1e-9) / 1e6;
                if let Some(e) = &cap.error {
                    t.problems.push(format!("capture {}: {e}", cap.queue));
                }
                t.captures.push(cap);
            }
            if timed {
                t.stages
                    .push(StageCost::new(format!("checker {i}"), r.packets, r.busy_ns));
            }
            if let Some(rr) = &r.reorder {
                t.reorder.get_or_insert_with(Default::default).add(rr);
            }
            r.marks.merge_into(&mut t.flow_ids);
            t.packets += r.packets;
            t.bytes += r.bytes;
            t.counts.add(&r.checker.counts);
            let mut checker = r.checker;
            t.latency.add(&mut checker.latency);
            t.stamped += r.stamped;
            t.polled += r.polled;
            t.problems.extend(checker.first_problem);
            t.failures.extend(r.failures);
        }
        t
    }
}

/// Reorder batches with a packet in the wrong slot, and a quantizing reorder that did not
/// verify what `bench_reorder_quantize` asks for.
pub(super) fn reorder_problems(config: &Config, reorder: Option<&ReorderReport>) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(r) = reorder
        && r.bad_batches > 0
    {
        problems.push(format!(
            "reorder: {} of {} batches held a packet in the wrong slot or missed one that arrived{}",
            r.bad_batches,
            r.batches + r.timeout_batches,
            r.first_problem
                .as_ref()
                .map(|p| format!(" (first: {p})"))
                .unwrap_or_default()
        ));
    }
    if let Some(q) = &config.bench.reorder_quantize {
        let r = reorder.cloned().unwrap_or_default();
        let verifiable = crate::quantize::lossless(q.conversion);
        if !verifiable {
            problems.push(format!(
                "bench_reorder_quantize: {:?} to {:?} loses bits, so the output cannot be turned back into the frames sent; verification needs int4 or int8 input, or int16 to fp32",
                q.conversion.input, q.conversion.output
            ));
        } else if r.verified_batches < q.verify_batches {
            problems.push(format!(
                "bench_reorder_quantize: {} batches verified, verify_batches asks for {}",
                r.verified_batches, q.verify_batches
            ));
        } else if r.verified_chunks < q.verify_chunks * r.verified_batches {
            problems.push(format!(
                "bench_reorder_quantize: {} chunks of {} samples verified in {} batches, fewer than verify_chunks {} per batch",
                r.verified_chunks, q.chunk_elements, r.verified_batches, q.verify_chunks
            ));
        }
    }
    problems
}

/// Adds a worker failure once (the generators, checkers and shutdown may all see it).
pub(super) fn note_failure(failures: &mut Vec<String>, failure: String) {
    if !failures.contains(&failure) {
        failures.push(failure);
    }
}
