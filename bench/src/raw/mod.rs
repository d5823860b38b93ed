//! `dataplane bench raw`: generators from `bench_tx` send verified traffic through the data
//! plane, checkers from `bench_rx` verify every packet, and the report says whether the run
//! was lossless.

use super::traffic::{CheckCounts, Checker, FrameBuilder, Latency, LatencySummary, RxWork, TxWork};
use dataplane::affinity;
use dataplane::config::{Config, Direction};
use dataplane::plane::{DataPlane, StartError, TxFailure};
use dataplane::stats::{Drops, QueueStats};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod check;
mod generate;
mod inline;
mod report;
pub use report::duration_text;
mod verdict;

use check::*;
#[cfg(not(feature = "cuda"))]
pub(crate) use generate::no_cuda;
pub(crate) use generate::with_target_rate;
use generate::*;
use verdict::*;

/// Frames ahead of the current one whose lines the generator and checker prefetch: their
/// buffers were last touched on another core, so each line is a cross-core miss; asking
/// for them early overlaps those misses with the work on the frames before.
const PREFETCH_AHEAD: usize = 6;

/// Asks the CPU to bring the cache line at `addr` in for writing (x86_64 PREFETCHW hint,
/// aarch64 PRFM PSTL1KEEP). Only a hint: any address is fine.
#[inline(always)]
fn prefetch_for_write(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no state visible to the program.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(addr as *const i8)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; PRFM takes any address.
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{0}]", in(reg) addr, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// As [`prefetch_for_write`], for reading (x86_64 PREFETCHT0, aarch64 PRFM PLDL1KEEP).
#[inline(always)]
fn prefetch_for_read(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no state visible to the program.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above; PRFM takes any address.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) addr, options(nostack, readonly, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// Prefetches the first line and the line of the last byte of packet `i`'s first segment,
/// taken as `len` bytes long (its current length when `None`).
#[inline(always)]
fn prefetch_frame(burst: &dataplane::Burst, i: usize, len: Option<usize>) {
    if i >= burst.len() {
        return;
    }
    let s = burst.segment(i, 0);
    let r = burst.regions().get(s.region);
    if !r.host_accessible() {
        return;
    }
    let head = r.buffer_addr(s.index);
    match len {
        Some(len) => {
            prefetch_for_write(head);
            prefetch_for_write(head + len.max(1) as u64 - 1);
        }
        None => {
            prefetch_for_read(head);
            prefetch_for_read(head + u64::from(s.len.max(1)) - 1);
        }
    }
}

/// Target and achieved rate of a paced run.
#[derive(Clone, Copy, Debug, Serialize, schemars::JsonSchema)]
pub struct PacingReport {
    /// `--target-gbps`.
    pub target_gbps: f64,
    /// What the TX workers sent while the generators ran.
    pub sent_gbps: f64,
}

/// The time one stage of the pipeline spent per packet.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct StageCost {
    /// `generator N`, `checker N`, or `IFACE tx|rx queue N` (its worker).
    pub stage: String,
    /// Packets it handled.
    pub packets: u64,
    /// Nanoseconds it spent on them (polls or loops that moved packets).
    pub busy_ns: u64,
    /// `busy_ns / packets`.
    pub ns_per_packet: f64,
}

impl StageCost {
    /// A stage's cost from its packets and busy time.
    pub(crate) fn new(stage: String, packets: u64, busy_ns: u64) -> Self {
        Self {
            stage,
            packets,
            busy_ns,
            ns_per_packet: if packets > 0 {
                busy_ns as f64 / packets as f64
            } else {
                0.0
            },
        }
    }
}

/// Options of a raw bench run.
#[derive(Clone, Debug)]
pub struct RawOptions {
    /// Seconds of traffic.
    pub seconds: f64,
    /// Verify the UDP checksum of every packet (reads every payload byte).
    pub verify_payload: bool,
    /// What the generators write per frame.
    pub tx_work: TxWork,
    /// What the checkers read per frame.
    pub rx_work: RxWork,
    /// Time each stage (generators, TX and RX workers, checkers) and report the busy
    /// nanoseconds per packet of each.
    pub time_stages: bool,
    /// Pace the generators' TX queues to this many Gb/s of frames in all (split evenly;
    /// overrides their `pacing_mbps`).
    pub target_gbps: Option<f64>,
    /// Print a progress line per second (on stderr; callers turn it on only for a
    /// terminal).
    pub progress: bool,
    /// Longest wait, after the generators stopped, for the pipeline to empty (every sent
    /// packet received or counted as dropped); what is still missing then is reported as
    /// in flight, not as lost.
    pub drain_deadline: Duration,
    /// Run the generators and checkers to completion in the workers' handlers, on the
    /// cores polling their queues (`delivery: handler`), instead of on threads of their
    /// own (`bench_tx`/`bench_rx` `cpu_core` is then not used).
    pub inline: bool,
}

impl RawOptions {
    /// `seconds` of traffic, full generation and checking without payload checksums, no
    /// progress line, a 10 s drain deadline.
    pub fn new(seconds: f64) -> Self {
        Self {
            seconds,
            verify_payload: false,
            tx_work: TxWork::Full,
            rx_work: RxWork::Full,
            time_stages: false,
            target_gbps: None,
            progress: false,
            drain_deadline: Duration::from_secs(10),
            inline: false,
        }
    }
}

/// The run's outcome in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every sent packet arrived intact, once and in order; nothing dropped anywhere.
    Lossless,
    /// Something was lost, dropped, corrupted, duplicated or reordered, or a worker died.
    NotLossless,
    /// Nothing went wrong, but packets were still in the pipeline at the drain deadline.
    Inconclusive,
}

/// The result of a raw bench; serialised as the `--json` line.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RawReport {
    /// Engine name.
    pub engine: &'static str,
    /// What the generators wrote per frame.
    pub tx_work: TxWork,
    /// What the checkers read per frame (`count`: nothing; the checker counts stay 0).
    pub rx_work: RxWork,
    /// Where flow steering ran.
    pub steering: String,
    /// Regions received into without copying (the engine's pools are made of them).
    pub zero_copy_regions: Vec<String>,
    /// Seconds of traffic generation.
    pub seconds: f64,
    /// Seconds asked for (`--seconds`).
    pub requested_seconds: f64,
    /// True when SIGINT or SIGTERM ended the run early.
    pub interrupted: bool,
    /// Packets the generators handed to the data plane.
    pub tx_packets: u64,
    /// Bytes the generators handed to the data plane.
    pub tx_bytes: u64,
    /// Packets the checkers received.
    pub rx_packets: u64,
    /// Bytes the checkers received.
    pub rx_bytes: u64,
    /// Data plane drop counters: what each counter attributes.
    pub drops: Drops,
    /// Packets sent and never received (each counted once; duplicates do not make up for
    /// lost packets). 0 when one side runs in another process.
    pub lost: u64,
    /// The part of `lost` that no drop counter explains.
    pub unattributed: u64,
    /// Packets neither received nor counted as dropped when the drain deadline passed:
    /// still in the pipeline, so neither lost nor delivered.
    pub in_flight: u64,
    /// Where the in-flight packets were, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight_cause: Option<String>,
    /// Workers that died (a caught panic), with their messages.
    pub worker_failures: Vec<String>,
    /// The outcome.
    pub verdict: Verdict,
    /// True when every sent packet arrived intact, in order, with no drop anywhere
    /// (`verdict` is `lossless`).
    pub lossless: bool,
    /// Received Gb/s (frame bytes).
    pub rx_gbps: f64,
    /// Received million packets per second.
    pub rx_mpps: f64,
    /// Per-queue counters of the data plane.
    pub queues: Vec<QueueStats>,
    /// Received packets per flow id (the mark of the rule that steered them; 0: none).
    pub flow_ids: BTreeMap<u32, u64>,
    /// Checker verdicts.
    pub checker: CheckCounts,
    /// Busy time per packet of each stage (with `time_stages`; empty otherwise).
    pub stages: Vec<StageCost>,
    /// The RX queues' capture sinks (`capture`), when the configuration has any.
    pub captures: Vec<CaptureReport>,
    /// When the generators' TX queues are paced (`pacing_mbps`, or `target_gbps`): the
    /// target, and the rate the TX workers sent frames at while the generators ran (Gb/s
    /// of frame bytes).
    pub pacing: Option<PacingReport>,
    /// Reorder results, when a queue has `reorder_configs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reorder: Option<ReorderReport>,
    /// One-way latency of checked frames: from the generator writing the burst (its time
    /// in the trailer) to the receive time (`Packet::timestamp_ns` with
    /// `hardware_timestamps`, otherwise when the checker polled the burst). It includes the
    /// time a burst waits for room in a full TX ring, so at full rate it measures queueing;
    /// with `--target-gbps` below capacity it measures the path. `None` when no frame was
    /// checked (`--rx-work count`, `--tx-work headers`).
    pub latency: Option<LatencySummary>,
    /// Where the receive times came from: `rx_timestamp` (stamped by the RX worker or the
    /// kernel), `poll` (the checker's clock), or `mixed`.
    pub latency_clock: &'static str,
    /// Why the run was not lossless (empty when it was).
    pub problems: Vec<String>,
    /// What ran: the facts a reader of a plot needs.
    pub setup: RunSetup,
    /// A point per second while the generators ran and the pipeline drained: rates and
    /// drops, in all and per queue (`--csv` writes it as a table).
    pub series: Vec<dataplane::stats::SeriesPoint>,
    /// Per worker core: CPU use and busy fraction over the run.
    pub workers: Vec<dataplane::worker::WorkerUse>,
}

/// The configuration facts of a run, for comparing runs and labelling plots.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RunSetup {
    /// The `dataplane` version.
    pub version: &'static str,
    /// The commit it was built from.
    pub commit: &'static str,
    /// The engine.
    pub engine: &'static str,
    /// Where flow steering ran.
    pub steering: String,
    /// Frame bytes of the first generator (header and payload, without the FCS); `None`
    /// without generators.
    pub frame_bytes: Option<usize>,
    /// Its `payload_size`.
    pub payload_bytes: Option<u32>,
    /// Its `batch_size`.
    pub batch: Option<u32>,
    /// Generators and checkers.
    pub generators: usize,
    /// Checkers (`bench_rx` sections).
    pub checkers: usize,
    /// RX and TX queues of the plane.
    pub rx_queues: usize,
    /// TX queues of the plane.
    pub tx_queues: usize,
    /// Worker cores.
    pub worker_cores: Vec<u32>,
    /// The pacing target in Gb/s, when paced.
    pub paced_gbps: Option<f64>,
}

/// What the queues' reorders did, and what the checkers found in their output.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct ReorderReport {
    /// Complete batches.
    pub batches: u64,
    /// Incomplete batches flushed by the timeout.
    pub timeout_batches: u64,
    /// Packets placed in batches.
    pub aggregated_packets: u64,
    /// Packets of other flows passed through.
    pub passthrough_packets: u64,
    /// Batches whose every slot held the packet with the right sequence number.
    pub verified_batches: u64,
    /// Batches with a slot holding the wrong packet, or fewer filled slots than packets.
    pub bad_batches: u64,
    /// Batches that could not be checked (a conversion that loses bits, or a sequence
    /// number outside the copied payload).
    pub unchecked_batches: u64,
    /// Converted batches: chunks of `chunk_elements` output samples compared with the
    /// samples of the frames sent (`bench_reorder_quantize`).
    pub verified_chunks: u64,
    /// The first wrong slot, described.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_problem: Option<String>,
}

/// Why a bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The data plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// Headers-only frames, and checkers in the same run that would read them.
    #[error(
        "--tx-work headers writes no sequence trailer, so this run's checkers cannot check its frames: add --rx-work count"
    )]
    UncheckableWork,
    /// `--inline` with a queue whose results only a checker thread can report.
    #[error("--inline: {0}; run without --inline")]
    NotInline(String),
    /// The configuration has neither `bench_tx` nor `bench_rx`.
    #[error("the configuration has neither bench_tx nor bench_rx")]
    NothingToRun,
    /// Two bench entries name the same queue.
    #[error("{} queue {queue} of `{interface}` is used by two bench_{} entries", direction.name().to_uppercase(), direction.name())]
    QueueTwice {
        /// Interface name.
        interface: String,
        /// RX or TX.
        direction: Direction,
        /// Queue id.
        queue: u16,
    },
    /// A `bench_tx` entry's queue cannot carry generated frames.
    #[error("bench_tx[{stream}]: TX queue {queue} of `{interface}` {reason}")]
    UnusableTxQueue {
        /// Index of the bench_tx entry.
        stream: usize,
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: u16,
        /// Why.
        reason: String,
    },
}

/// What an RX queue's capture sink wrote during the run.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CaptureReport {
    /// `IFACE rx queue N`.
    pub queue: String,
    /// Its counters once the file was closed.
    pub stats: dataplane::capture::CaptureStats,
    /// Bytes written per second of the run.
    pub mbytes_per_s: f64,
    /// Why the writer failed, if it did.
    pub error: Option<String>,
}

/// Runs the bench. `interrupted` is polled (Ctrl-C ends the run early, with a report).
pub fn run(
    config: &Config,
    opts: &RawOptions,
    interrupted: &AtomicBool,
) -> Result<RawReport, BenchError> {
    let config = &*run_config(config, opts)?;
    let _timing = dataplane::stats::time_stages_while(opts.time_stages);
    let timed = opts.time_stages;
    let stop_tx = Arc::new(AtomicBool::new(false));
    let stop_rx = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let (plane, mut sides) = start_sides(config, opts, (&stop_tx, &stop_rx), (&sent, &received))?;

    let tx_only = sides.checkers() == 0;
    if opts.progress {
        plane.show_progress(opts.seconds.ceil() as u64);
    }
    plane.record_series();
    let workers_at_start = plane.worker_readings();
    let started = Instant::now();
    let sent_gbps = wait_run(&plane, opts.seconds, interrupted);
    stop_tx.store(true, Ordering::Relaxed);
    let (mut tx_packets, mut tx_bytes) = (0, 0);
    let mut worker_failures: Vec<String> = Vec::new();
    let mut stages = Vec::new();
    for (i, (p, b, failure, busy_ns)) in sides.generator_results().into_iter().enumerate() {
        stages.extend(timed.then(|| StageCost::new(format!("generator {i}"), p, busy_ns)));
        tx_packets += p;
        tx_bytes += b;
        worker_failures.extend(failure);
    }
    let seconds = started.elapsed().as_secs_f64();
    plane.show_progress(0);

    let both_sides = !config.bench.tx.is_empty() && !tx_only;
    let drain = Drain::run(
        &plane,
        &received,
        tx_packets,
        both_sides,
        tx_only,
        opts,
        interrupted,
    );
    stop_rx.store(true, Ordering::Relaxed);
    let mut checked = CheckTotals::collect(sides.checker_results(), seconds, timed);
    stages.append(&mut checked.stages);
    for f in std::mem::take(&mut checked.failures) {
        note_failure(&mut worker_failures, f);
    }
    let Finished {
        snapshot,
        series,
        workers,
        setup,
        zero_copy_regions,
    } = Finished::shut_down(plane, config, &workers_at_start, &mut worker_failures);

    if timed {
        stages.extend(worker_stages(&snapshot.queues));
    }
    let drops = snapshot.drops();
    let loss = Loss::reckon(tx_packets, &checked, drops.total(), both_sides, &drain);
    let in_flight = loss.in_flight;
    let in_flight_cause =
        (in_flight > 0).then(|| drain.in_flight_cause(in_flight, tx_packets, interrupted));
    let mut problems = std::mem::take(&mut checked.problems);
    note_problems(
        &mut problems,
        config,
        tx_packets,
        &drops,
        &loss,
        drain.unsent,
        &checked,
        both_sides,
    );
    problems.extend(worker_failures.iter().cloned());
    let verdict = match (problems.is_empty(), in_flight) {
        (false, _) => Verdict::NotLossless,
        (true, 0) => Verdict::Lossless,
        (true, _) => Verdict::Inconclusive,
    };
    // A TX-only run reports what it sent.
    let (tput_bytes, tput_packets) = if tx_only {
        (tx_bytes, tx_packets)
    } else {
        (checked.bytes, checked.packets)
    };
    Ok(RawReport {
        engine: setup.engine,
        tx_work: opts.tx_work,
        rx_work: opts.rx_work,
        steering: setup.steering.clone(),
        zero_copy_regions,
        seconds,
        requested_seconds: opts.seconds,
        captures: checked.captures,
        interrupted: interrupted.load(Ordering::Relaxed),
        tx_packets,
        tx_bytes,
        rx_packets: checked.packets,
        rx_bytes: checked.bytes,
        drops,
        lost: loss.lost,
        unattributed: loss.unattributed,
        in_flight,
        in_flight_cause,
        worker_failures,
        verdict,
        lossless: verdict == Verdict::Lossless,
        rx_gbps: tput_bytes as f64 * 8.0 / seconds / 1e9,
        rx_mpps: tput_packets as f64 / seconds / 1e6,
        queues: snapshot.queues,
        flow_ids: checked.flow_ids,
        checker: checked.counts,
        stages,
        pacing: paced_gbps(config).map(|target_gbps| PacingReport {
            target_gbps,
            sent_gbps,
        }),
        reorder: checked.reorder,
        latency: checked.latency.summary(),
        latency_clock: match (checked.stamped, checked.polled) {
            (_, 0) => "rx_timestamp",
            (0, _) => "poll",
            _ => "mixed",
        },
        problems,
        setup,
        series,
        workers,
    })
}

/// What the plane said as it shut down.
struct Finished {
    snapshot: dataplane::stats::Snapshot,
    series: Vec<dataplane::stats::SeriesPoint>,
    workers: Vec<dataplane::worker::WorkerUse>,
    setup: RunSetup,
    zero_copy_regions: Vec<String>,
}

impl Finished {
    /// Reads the plane's counters, then shuts it down; its workers' failures are noted.
    fn shut_down(
        plane: DataPlane,
        config: &Config,
        workers_at_start: &[dataplane::worker::WorkerReading],
        failures: &mut Vec<String>,
    ) -> Self {
        let snapshot = plane.snapshot();
        let series = plane.take_series();
        let workers =
            dataplane::worker::WorkerUse::between(workers_at_start, &plane.worker_readings());
        let setup = run_setup(config, &plane, &snapshot);
        let zero_copy_regions = plane.zero_copy_regions();
        if let Err(failed) = plane.shutdown() {
            for f in failed {
                note_failure(failures, f.to_string());
            }
        }
        Self {
            snapshot,
            series,
            workers,
            setup,
            zero_copy_regions,
        }
    }
}

/// Each worker queue's cost per packet (`--stages`).
pub(crate) fn worker_stages(queues: &[QueueStats]) -> impl Iterator<Item = StageCost> + '_ {
    queues.iter().map(|q| {
        StageCost::new(
            format!("{} {} queue {} (worker)", q.interface, q.direction, q.queue),
            q.packets,
            q.busy_ns,
        )
    })
}

/// Starts the plane with the generators and checkers: threads of their own, or the
/// workers' handlers (`--inline`).
fn start_sides(
    config: &Config,
    opts: &RawOptions,
    (stop_tx, stop_rx): (&Arc<AtomicBool>, &Arc<AtomicBool>),
    (sent, received): (&Arc<AtomicU64>, &Arc<AtomicU64>),
) -> Result<(DataPlane, Sides), BenchError> {
    if opts.inline {
        let (plane, sides) = inline::start(config, opts, (stop_tx, stop_rx), (sent, received))?;
        return Ok((plane, Sides::Inline(sides)));
    }
    let mut plane = DataPlane::start(config)?;
    let checkers = spawn_checkers(config, opts, &mut plane, stop_rx, received)?;
    let generators = spawn_generators(config, opts, &mut plane, stop_tx, sent)?;
    Ok((plane, Sides::Threads(generators, checkers)))
}

/// Lets the generators run for `seconds` (or until interrupted); returns what the TX
/// workers sent meanwhile, Gb/s: the paced rate (queued bursts still go out after, during
/// the drain).
fn wait_run(plane: &DataPlane, seconds: f64, interrupted: &AtomicBool) -> f64 {
    let started = Instant::now();
    let tx_bytes_at_start = plane.snapshot().total(Direction::Tx).1;
    let duration = Duration::from_secs_f64(seconds);
    while started.elapsed() < duration && !interrupted.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    (plane.snapshot().total(Direction::Tx).1 - tx_bytes_at_start) as f64 * 8.0
        / started.elapsed().as_secs_f64()
        / 1e9
}

/// The configuration as the run uses it: the TX queues paced to `--target-gbps`, handler
/// queues for `--inline`; work the checkers cannot check is refused.
fn run_config<'a>(config: &'a Config, opts: &RawOptions) -> Result<Cow<'a, Config>, BenchError> {
    if config.bench.tx.is_empty() && config.bench.rx.is_empty() {
        return Err(BenchError::NothingToRun);
    }
    if opts.tx_work == TxWork::Headers
        && !config.bench.rx.is_empty()
        && opts.rx_work != RxWork::Count
    {
        return Err(BenchError::UncheckableWork);
    }
    let mut config = Cow::Borrowed(config);
    if let Some(gbps) = opts.target_gbps
        && !config.bench.tx.is_empty()
    {
        config = Cow::Owned(with_target_rate(&config, gbps));
    }
    if opts.inline {
        config = Cow::Owned(inline::inline_config(&config)?);
    }
    Ok(config)
}

/// What the run was, from the configuration and the plane before it shuts down.
fn run_setup(
    config: &Config,
    plane: &DataPlane,
    snapshot: &dataplane::stats::Snapshot,
) -> RunSetup {
    let first_tx = config.bench.tx.first();
    let queues = |direction: &str| {
        snapshot
            .queues
            .iter()
            .filter(|q| q.direction == direction)
            .count()
    };
    RunSetup {
        version: env!("CARGO_PKG_VERSION"),
        commit: dataplane::stats::BUILD_COMMIT,
        engine: plane.engine_name(),
        steering: plane.steering(),
        frame_bytes: first_tx.map(|b| FrameBuilder::new(b, 0).frame_len()),
        payload_bytes: first_tx.map(|b| b.payload_size),
        batch: first_tx.map(|b| b.batch_size),
        generators: config.bench.tx.len(),
        checkers: config.bench.rx.len(),
        rx_queues: queues("rx"),
        tx_queues: queues("tx"),
        worker_cores: plane.worker_cores(),
        paced_gbps: paced_gbps(config),
    }
}

/// Where the generators and checkers run.
enum Sides {
    /// Threads of their own, reaching the queues through rings.
    Threads(Vec<Generator>, Vec<CheckerThread>),
    /// The workers' handlers (`--inline`).
    Inline(inline::InlineSides),
}

impl Sides {
    fn checkers(&self) -> usize {
        match self {
            Sides::Threads(_, c) => c.len(),
            Sides::Inline(s) => s.checkers(),
        }
    }

    /// Once `stop_tx` is set: what each generator did.
    fn generator_results(&mut self) -> Vec<GeneratorResult> {
        match self {
            Sides::Threads(g, _) => g
                .drain(..)
                .map(|g| g.thread.join().expect("generator thread"))
                .collect(),
            Sides::Inline(s) => s.generator_results(Duration::from_secs(10)),
        }
    }

    /// Once `stop_rx` is set: what each checker found.
    fn checker_results(&mut self) -> Vec<CheckerResult> {
        match self {
            Sides::Threads(_, c) => c
                .drain(..)
                .map(|c| c.thread.join().expect("checker thread"))
                .collect(),
            Sides::Inline(s) => s.checker_results(Duration::from_secs(10)),
        }
    }
}
