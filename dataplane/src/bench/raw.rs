//! `dataplane bench raw`: generators from `bench_tx` send verified traffic through the data
//! plane, checkers from `bench_rx` verify every packet, and the report says whether the run
//! was lossless.

use super::traffic::{CheckCounts, Checker, FrameBuilder, Latency, LatencySummary, RxWork, TxWork};
use crate::affinity;
use crate::config::{Config, Direction};
use crate::plane::{DataPlane, StartError, TxFailure};
use crate::stats::{Drops, QueueStats};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
fn prefetch_frame(burst: &crate::Burst, i: usize, len: Option<usize>) {
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
#[derive(Clone, Copy, Debug, Serialize)]
pub struct PacingReport {
    /// `--target-gbps`.
    pub target_gbps: f64,
    /// What the TX workers sent while the generators ran.
    pub sent_gbps: f64,
}

/// The time one stage of the pipeline spent per packet.
#[derive(Clone, Debug, Serialize)]
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
        }
    }
}

/// The run's outcome in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, Serialize)]
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
    pub series: Vec<crate::stats::SeriesPoint>,
    /// Per worker core: CPU use and busy fraction over the run.
    pub workers: Vec<crate::worker::WorkerUse>,
}

/// The configuration facts of a run, for comparing runs and labelling plots.
#[derive(Clone, Debug, Serialize)]
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
#[derive(Clone, Debug, Default, Serialize)]
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

impl ReorderReport {
    fn add(&mut self, o: &ReorderReport) {
        self.batches += o.batches;
        self.timeout_batches += o.timeout_batches;
        self.aggregated_packets += o.aggregated_packets;
        self.passthrough_packets += o.passthrough_packets;
        self.verified_batches += o.verified_batches;
        self.bad_batches += o.bad_batches;
        self.unchecked_batches += o.unchecked_batches;
        self.verified_chunks += o.verified_chunks;
        if self.first_problem.is_none() {
            self.first_problem.clone_from(&o.first_problem);
        }
    }
}

/// Hands every frame of a burst to the checker, whatever its layout: one host segment as
/// is; split host segments joined; frames with a segment in GPU memory through the GPU's
/// `frame_digest` kernel, which sums the payload where it lies (so the UDP checksum of every
/// byte is verified on the GPU) and copies out headers and trailer.
#[derive(Default)]
struct FrameReader {
    joined: Vec<u8>,
    /// Frames with a receive time of their own, and frames timed at the poll.
    stamped: u64,
    polled: u64,
    #[cfg(feature = "cuda")]
    digest: crate::stage::DeviceDigest,
    /// Bursts wholly in GPU memory waiting to be digested together, with their receive
    /// times: one launch per [`GPU_CHECK_PACKETS`] packets, not per burst.
    #[cfg(feature = "cuda")]
    pending: Vec<crate::Burst>,
    #[cfg(feature = "cuda")]
    pending_polled: Vec<u64>,
    #[cfg(feature = "cuda")]
    pending_packets: usize,
    /// The group being digested (its digest slot and receive times), checked once the
    /// next group is queued or the queue goes idle.
    #[cfg(feature = "cuda")]
    digesting: Option<(usize, Vec<u64>)>,
    #[cfg(feature = "cuda")]
    next_slot: usize,
}

/// Checks the frames of `bursts` (received at `polled`) against their GPU digests (word
/// sums, then heads and tails); a failed digest counts them all as corrupt. Adds the
/// frames to `frames_polled`.
#[cfg(feature = "cuda")]
fn check_digests(
    frames_polled: &mut u64,
    bursts: &[crate::Burst],
    polled: &[u64],
    digests: crate::stage::Digests<'_>,
    checker: &mut Checker,
) {
    use super::traffic::{L2_L4_HEADER, TRAILER};
    let per = L2_L4_HEADER + TRAILER;
    let mut k = 0;
    for (burst, &polled) in bursts.iter().zip(polled) {
        checker.receive_time = polled;
        *frames_polled += burst.len() as u64;
        let (sums, heads) = match &digests {
            Ok(d) => d,
            Err(e) => {
                checker
                    .first_problem
                    .get_or_insert(format!("GPU check: {e}"));
                checker.counts.corrupt += burst.len() as u64;
                continue;
            }
        };
        for i in 0..burst.len() {
            let d = &heads[k * per..(k + 1) * per];
            checker.check_parts(
                &d[..L2_L4_HEADER],
                &d[L2_L4_HEADER..],
                burst.segment_len(i, 0),
                Some(sums[k]),
            );
            k += 1;
        }
    }
}

/// Packets of GPU-resident bursts the checker digests in one launch (the queue going idle
/// digests what is there sooner).
#[cfg(feature = "cuda")]
const GPU_CHECK_PACKETS: usize = 2048;

impl FrameReader {
    /// Checks `burst`: frames in host memory at once; bursts wholly in GPU memory are held
    /// and digested together, a group at a time, each group checked while the GPU digests
    /// the next (the caller calls [`FrameReader::flush`] when the queue is idle and at the
    /// end, which checks everything held).
    fn take(&mut self, burst: crate::Burst, checker: &mut Checker, polled: u64) {
        #[cfg(feature = "cuda")]
        {
            let regions = burst.regions();
            let whole_gpu = match burst.run() {
                Some(run) => !regions.get(run.region).host_accessible(),
                None => burst.packets().first().is_some_and(|p| {
                    p.segments().len() == 1
                        && !regions.get(p.segments()[0].region).host_accessible()
                }),
            };
            if whole_gpu {
                self.pending_packets += burst.len();
                self.pending.push(burst);
                self.pending_polled.push(polled);
                if self.pending_packets >= GPU_CHECK_PACKETS {
                    self.advance(checker);
                }
                return;
            }
        }
        self.check(&burst, checker, polled);
    }

    /// Queues the held GPU bursts' digest, then checks the group digested before them.
    #[cfg(feature = "cuda")]
    fn advance(&mut self, checker: &mut Checker) {
        use super::traffic::{L2_L4_HEADER, PAYLOAD_SUM_FROM, TRAILER};
        let previous = self.digesting.take();
        if !self.pending.is_empty() {
            let slot = self.next_slot;
            self.next_slot = (slot + 1) % crate::stage::QUEUED_DIGESTS;
            let bursts = std::mem::take(&mut self.pending);
            let polled = std::mem::take(&mut self.pending_polled);
            self.pending_packets = 0;
            match self.digest.queue(
                slot,
                bursts,
                0,
                PAYLOAD_SUM_FROM as u32,
                (L2_L4_HEADER as u32, TRAILER as u32),
            ) {
                Ok(()) => self.digesting = Some((slot, polled)),
                Err((bursts, e)) => {
                    check_digests(&mut self.polled, &bursts, &polled, Err(e), checker)
                }
            }
        }
        if let Some((slot, polled)) = previous {
            // The digests are read where the GPU wrote them.
            let (bursts, out) = self.digest.finish(slot);
            check_digests(&mut self.polled, &bursts, &polled, out, checker);
        }
    }

    /// Digests and checks every GPU burst held (the queue is idle, or the run ended).
    fn flush(&mut self, checker: &mut Checker) {
        #[cfg(feature = "cuda")]
        {
            self.advance(checker);
            self.advance(checker);
        }
        #[cfg(not(feature = "cuda"))]
        let _ = checker;
    }

    /// Checks every frame of `burst`, received at `polled` (epoch ns) unless a packet
    /// carries its own receive time.
    fn check(&mut self, burst: &crate::Burst, checker: &mut Checker, polled: u64) {
        if let Some(run) = burst.run()
            && burst.regions().get(run.region).host_accessible()
        {
            // One segment each and no receive times: no descriptor to read.
            checker.receive_time = polled;
            self.polled += burst.len() as u64;
            for i in 0..PREFETCH_AHEAD {
                prefetch_frame(burst, i, None);
            }
            for i in 0..burst.len() {
                prefetch_frame(burst, i + PREFETCH_AHEAD, None);
                checker.check(burst.data(i, 0).expect("host memory"));
            }
            return;
        }
        let Some(first) = burst.packets().first() else {
            return;
        };
        let (stamped, polled_frames) = (&mut self.stamped, &mut self.polled);
        let mut received = |p: &crate::Packet| match p.timestamp_ns {
            0 => {
                *polled_frames += 1;
                polled
            }
            t => {
                *stamped += 1;
                t
            }
        };
        let regions = burst.regions();
        let host = first
            .segments()
            .iter()
            .all(|s| regions.get(s.region).host_accessible());
        if host {
            for i in 0..PREFETCH_AHEAD {
                prefetch_frame(burst, i, None);
            }
            for i in 0..burst.len() {
                prefetch_frame(burst, i + PREFETCH_AHEAD, None);
                checker.receive_time = received(&burst.packets()[i]);
                let segs = burst.packets()[i].segments().len();
                if segs == 1 {
                    checker.check(burst.data(i, 0).expect("host memory"));
                } else {
                    self.joined.clear();
                    for s in 0..segs {
                        self.joined
                            .extend_from_slice(burst.data(i, s).expect("host memory"));
                    }
                    checker.check(&self.joined);
                }
            }
            return;
        }
        // Frames in GPU memory are checked together: one receive time for the burst.
        checker.receive_time = received(first);
        #[cfg(feature = "cuda")]
        if let Err(e) = self.check_on_gpu(burst, checker) {
            checker
                .first_problem
                .get_or_insert(format!("GPU check: {e}"));
            checker.counts.corrupt += burst.len() as u64;
        }
        #[cfg(not(feature = "cuda"))]
        {
            checker.counts.corrupt += burst.len() as u64;
        }
    }

    /// Frames `[device]` (batched GPU) or `[host headers, device payload]` (header-data
    /// split).
    #[cfg(feature = "cuda")]
    fn check_on_gpu(
        &mut self,
        burst: &crate::Burst,
        checker: &mut Checker,
    ) -> Result<(), gpudirect::GpuError> {
        use super::traffic::{L2_L4_HEADER, PAYLOAD_SUM_FROM, TRAILER, payload_sum, shift_sum};
        let regions = burst.regions();
        let layout: Vec<bool> = burst.packets()[0]
            .segments()
            .iter()
            .map(|s| regions.get(s.region).host_accessible())
            .collect();
        let dev_seg = layout.len() - 1;
        if !(layout == [false] || layout == [true, false]) {
            return Err(gpudirect::GpuError::Unsupported(format!(
                "no GPU check for segment layout {layout:?} (host = true)"
            )));
        }
        let ordinal = regions
            .get(burst.packets()[0].segments()[dev_seg].region)
            .affinity();
        let whole = dev_seg == 0;
        let (sum_from, head) = if whole {
            (PAYLOAD_SUM_FROM as u32, L2_L4_HEADER as u32)
        } else {
            (0, 0)
        };
        let per = head as usize + TRAILER;
        let n = burst.len();
        self.digest
            .run(burst, dev_seg, sum_from, (head, TRAILER as u32))?;
        for i in 0..n {
            let d = &self.digest.digests[i * per..(i + 1) * per];
            let len = burst.packets()[i].len();
            if whole {
                checker.check_parts(
                    &d[..L2_L4_HEADER],
                    &d[L2_L4_HEADER..],
                    len,
                    Some(self.digest.sums[i]),
                );
                continue;
            }
            let h = burst.data(i, 0).expect("host headers");
            let dev_len = burst.packets()[i].segments()[1].len as usize;
            if h.len() < L2_L4_HEADER || dev_len < TRAILER {
                // Too short to split the check: bring the payload over and check on the CPU.
                self.joined.clear();
                self.joined.extend_from_slice(h);
                let at = self.joined.len();
                self.joined.resize(at + dev_len, 0);
                // SAFETY: the device segment of `burst` holds `dev_len` bytes.
                unsafe {
                    gpudirect::read_device(
                        ordinal,
                        burst.segment_addr(i, 1),
                        &mut self.joined[at..],
                    )
                }?;
                checker.check(&self.joined);
                continue;
            }
            let dev_sum = if (h.len() - PAYLOAD_SUM_FROM) % 2 == 1 {
                shift_sum(self.digest.sums[i])
            } else {
                self.digest.sums[i]
            };
            checker.check_parts(
                &h[..L2_L4_HEADER],
                &d[..TRAILER],
                len,
                Some(payload_sum(h) + dev_sum),
            );
        }
        Ok(())
    }
}

/// Checks reorder aggregates: each filled slot must hold the packet whose sequence number
/// belongs there (read back from the slot's copy of the payload).
struct ReorderChecker {
    /// Per reorder name: the spec, and the GPU of the output region when it is device memory.
    plans: BTreeMap<String, (gpudirect::reorder::ReorderSpec, Option<u32>)>,
    /// Per converting reorder whose conversion can be undone: its slot check.
    converted: BTreeMap<String, super::quantize::ConvertedCheck>,
    report: ReorderReport,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    scratch: Vec<u8>,
}

impl ReorderChecker {
    fn new(config: &Config) -> Self {
        let mut plans = BTreeMap::new();
        let mut converted = BTreeMap::new();
        for iface in &config.interfaces {
            let Some(rx) = &iface.rx else { continue };
            for r in &rx.reorder {
                let src = rx.reorder_queue(r).and_then(|q| {
                    config
                        .memory_regions
                        .iter()
                        .find(|m| Some(&m.name) == q.memory_regions.first())
                });
                let out = config
                    .memory_regions
                    .iter()
                    .find(|m| m.name == r.memory_region);
                if let (Some(src), Some(out)) = (src, out) {
                    let gpu =
                        (out.kind == crate::config::MemoryKind::Device).then_some(out.affinity);
                    let spec = r.spec(src.buf_size);
                    plans.insert(r.name.clone(), (spec, gpu));
                    let models = config
                        .bench
                        .tx
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            super::quantize::StreamModel::of(&generator_frames(config, b, i))
                        })
                        .collect();
                    let chunk = config
                        .bench
                        .reorder_quantize
                        .map_or(16, |q| q.chunk_elements);
                    if let Some(c) = super::quantize::ConvertedCheck::new(spec, models, chunk) {
                        converted.insert(r.name.clone(), c);
                    }
                }
            }
        }
        Self {
            plans,
            converted,
            report: ReorderReport::default(),
            scratch: Vec::new(),
        }
    }

    fn check(&mut self, burst: &crate::Burst, info: &crate::reorder::ReorderInfo) {
        let Some((spec, gpu)) = self.plans.get(&info.name).copied() else {
            self.report.unchecked_batches += 1;
            return;
        };
        let seq = spec.sequence();
        let skip = spec.payload_byte_offset * 8;
        let converted = spec.conversion.is_some();
        if converted && !self.converted.contains_key(&info.name)
            || !converted && seq.bit_offset < skip
        {
            self.report.unchecked_batches += 1;
            return;
        }
        let in_slot = gpudirect::reorder::BitField {
            bit_offset: seq.bit_offset.saturating_sub(skip),
            bit_width: seq.bit_width,
        };
        let data: &[u8] = match (burst.data(0, 0), gpu) {
            (Some(d), _) => d,
            #[cfg(feature = "cuda")]
            (None, Some(ordinal)) => {
                self.scratch.resize(info.aggregate_len, 0);
                // SAFETY: the aggregate is a device buffer of aggregate_len bytes owned by
                // `burst`.
                if unsafe {
                    gpudirect::read_device(ordinal, burst.segment_addr(0, 0), &mut self.scratch)
                }
                .is_err()
                {
                    self.report.unchecked_batches += 1;
                    return;
                }
                &self.scratch
            }
            // Device memory exists only with the `cuda` feature.
            (None, _) => {
                self.report.unchecked_batches += 1;
                return;
            }
        };
        let ppb = info.packets_per_batch;
        let stride = info.slot_bytes as usize;
        let mut filled = 0u32;
        let mut wrong = false;
        if let Some(check) = self.converted.get_mut(&info.name) {
            let mut chunks = 0;
            for s in 0..ppb {
                let slot = &data[s as usize * stride..(s as usize + 1) * stride];
                match check.slot(s, slot, info.batch_id) {
                    super::quantize::SlotVerdict::Empty => {}
                    super::quantize::SlotVerdict::Good { chunks: c } => {
                        filled += 1;
                        chunks += c;
                    }
                    super::quantize::SlotVerdict::Bad(why) => {
                        wrong = true;
                        if self.report.first_problem.is_none() {
                            self.report.first_problem = Some(format!(
                                "reorder `{}` batch {:?}: {why}",
                                info.name, info.batch_id
                            ));
                        }
                    }
                }
            }
            let expected = if info.timed_out {
                info.source_packets
            } else {
                ppb
            };
            if wrong || filled != expected {
                self.report.bad_batches += 1;
            } else {
                self.report.verified_batches += 1;
                self.report.verified_chunks += chunks;
            }
            return;
        }
        for s in 0..ppb {
            let slot = &data[s as usize * stride..(s as usize + 1) * stride];
            if slot.iter().all(|&b| b == 0) {
                continue; // nothing arrived for it
            }
            let v = in_slot.read(slot);
            let batch_ok = match spec.method {
                gpudirect::reorder::Method::SeqPacketsPerBatch { .. } => {
                    v.map(|v| v / ppb) == info.batch_id
                }
                gpudirect::reorder::Method::SeqBatchNumber { .. } => true,
            };
            if v.map(|v| v % ppb) == Some(s) && batch_ok {
                filled += 1;
            } else {
                wrong = true;
            }
        }
        let expected = if info.timed_out {
            info.source_packets
        } else {
            ppb
        };
        if wrong || filled != expected {
            self.report.bad_batches += 1;
        } else {
            self.report.verified_batches += 1;
        }
    }
}

/// The frames the generator of `bench_tx` entry `b` (stream `stream`) sends: with
/// `bench_reorder_quantize`, they carry the sequence (and batch) fields of the reorder it
/// verifies, so that reorder sorts them.
fn generator_frames(
    config: &Config,
    b: &crate::config::BenchTxConfig,
    stream: usize,
) -> FrameBuilder {
    let builder = FrameBuilder::new(b, stream as u16);
    let fields = config.bench.reorder_quantize.and_then(|q| {
        config
            .interfaces
            .iter()
            .filter_map(|i| i.rx.as_ref())
            .flat_map(|r| &r.reorder)
            .find(|r| r.conversion == Some(q.conversion))
            .map(|r| super::traffic::ReorderFields::of(&r.spec(0)))
    });
    match fields {
        Some(f) => builder.with_reorder_fields(f),
        None => builder,
    }
}

/// Writes a generator's frames into GPU memory with the `write_frames` kernel: the CPU
/// makes only each frame's changing fields.
#[cfg(feature = "cuda")]
struct GpuFrames {
    gpu: gpudirect::Gpu,
    template: gpudirect::frames::FrameTemplate,
    frames: Vec<(u64, gpudirect::frames::FrameFields)>,
}

#[cfg(feature = "cuda")]
impl GpuFrames {
    fn new(ordinal: u32, builder: &FrameBuilder) -> Result<Self, gpudirect::GpuError> {
        Ok(Self {
            gpu: gpudirect::Gpu::new(ordinal)?,
            template: builder.template(),
            frames: Vec::new(),
        })
    }

    /// Writes the next frames into every packet of `burst` and waits until they are there.
    fn write(
        &mut self,
        builder: &mut FrameBuilder,
        burst: &mut crate::Burst,
    ) -> Result<(), gpudirect::GpuError> {
        self.frames.clear();
        let len = self.template.frame_len as usize;
        for i in 0..burst.len() {
            self.frames
                .push((burst.segment_addr(i, 0), builder.next_fields()));
            burst.set_len(i, 0, len);
        }
        // SAFETY: every address is a buffer this burst owns (device memory of the queue's
        // region, at least `len` bytes: checked before the generator started), and the
        // burst lives until after the sync below.
        unsafe { self.gpu.write_frames(&self.template, &self.frames) }?;
        self.gpu.sync()
    }
}

/// Without CUDA there is no device memory, so no GPU writer is ever made.
#[cfg(not(feature = "cuda"))]
struct GpuFrames;

#[cfg(not(feature = "cuda"))]
impl GpuFrames {
    fn new(_: u32, _: &FrameBuilder) -> Result<Self, String> {
        Err("built without CUDA".into())
    }

    fn write(&mut self, _: &mut FrameBuilder, _: &mut crate::Burst) -> Result<(), String> {
        Err("built without CUDA".into())
    }
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

struct Generator {
    thread: JoinHandle<(u64, u64, Option<String>, u64)>,
}

struct CheckerResult {
    stamped: u64,
    polled: u64,
    busy_ns: u64,
    packets: u64,
    bytes: u64,
    checker: Checker,
    marks: FlowMarks,
    reorder: Option<ReorderReport>,
    /// Worker failures seen through the queues.
    failures: Vec<String>,
    /// The queues' capture sinks, closed (`capture` in the configuration).
    captures: Vec<CaptureReport>,
}

/// What an RX queue's capture sink wrote during the run.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureReport {
    /// `IFACE rx queue N`.
    pub queue: String,
    /// Its counters once the file was closed.
    pub stats: crate::capture::CaptureStats,
    /// Bytes written per second of the run.
    pub mbytes_per_s: f64,
    /// Why the writer failed, if it did.
    pub error: Option<String>,
}

struct CheckerThread {
    thread: JoinHandle<CheckerResult>,
}

/// Runs the bench. `interrupted` is polled (Ctrl-C ends the run early, with a report).
pub fn run(
    config: &Config,
    opts: &RawOptions,
    interrupted: &AtomicBool,
) -> Result<RawReport, BenchError> {
    if config.bench.tx.is_empty() && config.bench.rx.is_empty() {
        return Err(BenchError::NothingToRun);
    }
    let paced;
    let config = match opts.target_gbps {
        Some(gbps) if !config.bench.tx.is_empty() => {
            paced = with_target_rate(config, gbps);
            &paced
        }
        _ => config,
    };
    if opts.tx_work == TxWork::Headers
        && !config.bench.rx.is_empty()
        && opts.rx_work != RxWork::Count
    {
        return Err(BenchError::UncheckableWork);
    }
    let _timing = crate::stats::time_stages_while(opts.time_stages);
    let mut plane = DataPlane::start(config)?;
    let timed = opts.time_stages;
    let stop_tx = Arc::new(AtomicBool::new(false));
    let stop_rx = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));

    let mut checkers = Vec::new();
    for b in &config.bench.rx {
        let iface = &config.interfaces[config
            .interface_index(&b.interface_name)
            .expect("validated")];
        let ids: Vec<u16> = match b.queue_id {
            Some(q) => vec![q],
            None => iface
                .rx
                .iter()
                .flat_map(|r| &r.queues)
                .map(|q| q.id)
                .collect(),
        };
        let mut queues = Vec::new();
        for id in ids {
            let q = plane.take_rx_queue(&b.interface_name, id).ok_or_else(|| {
                BenchError::QueueTwice {
                    interface: b.interface_name.clone(),
                    direction: Direction::Rx,
                    queue: id,
                }
            })?;
            queues.push(q);
        }
        let (stop, received, core, verify, rx_work) = (
            stop_rx.clone(),
            received.clone(),
            b.cpu_core,
            opts.verify_payload,
            opts.rx_work,
        );
        let max_packet = b.max_packet_size.map(|m| m as usize);
        let reorder_check = ReorderChecker::new(config);
        let thread = std::thread::Builder::new()
            .name("bench-rx".into())
            .spawn(move || {
                if let Some(c) = core {
                    let _ = affinity::pin_current_thread(c);
                }
                let mut checker = Checker::new(verify);
                checker.trailer_only = rx_work == RxWork::Trailer;
                let clock = crate::clock::WallClock::new();
                let mut frames = FrameReader::default();
                let mut reorder_check = reorder_check;
                let mut marks = FlowMarks::default();
                let (mut packets, mut bytes) = (0u64, 0u64);
                let mut busy_ns = 0u64;
                let mut idle = 0u32;
                let mut failures: Vec<String> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut got = false;
                    for q in &mut queues {
                        let started = timed.then(Instant::now);
                        let burst = match q.poll() {
                            Ok(Some(b)) => b,
                            Ok(None) => continue,
                            Err(e) => {
                                note_failure(&mut failures, e.to_string());
                                continue;
                            }
                        };
                        got = true;
                        if let Some(info) = burst.reorder_info() {
                            reorder_check.check(&burst, info);
                            packets += info.source_packets as u64;
                            bytes += info.payload_bytes;
                        } else {
                            if let Some(run) = burst.run() {
                                // One length and flow 0 for all: no descriptor to read.
                                let (n, len) = (burst.len() as u64, run.len as usize);
                                marks.count(0, n);
                                bytes += n * len as u64;
                                if let Some(max) = max_packet
                                    && len > max
                                {
                                    checker.counts.corrupt += n;
                                    checker.first_problem.get_or_insert_with(|| {
                                        format!(
                                            "a {len}-byte packet, longer than bench_rx max_packet_size {max}"
                                        )
                                    });
                                }
                            } else {
                                for p in burst.packets() {
                                    marks.count(p.flow_id, 1);
                                    bytes += p.len() as u64;
                                    if let Some(max) = max_packet
                                        && p.len() > max
                                    {
                                        checker.counts.corrupt += 1;
                                        checker.first_problem.get_or_insert_with(|| {
                                            format!(
                                                "a {}-byte packet, longer than bench_rx max_packet_size {max}",
                                                p.len()
                                            )
                                        });
                                    }
                                }
                            }
                            packets += burst.len() as u64;
                            if rx_work != RxWork::Count {
                                frames.take(burst, &mut checker, clock.now_ns());
                            }
                        }
                        if let Some(t) = started {
                            busy_ns += t.elapsed().as_nanos() as u64;
                        }
                        // Duplicates do not count towards what arrived.
                        received.store(
                            packets.saturating_sub(checker.counts.duplicates),
                            Ordering::Relaxed,
                        );
                    }
                    if !got {
                        // Nothing new: check the GPU frames held so far now.
                        frames.flush(&mut checker);
                    }
                    idle = if got { 0 } else { idle + 1 };
                    if idle > 1024 {
                        idle = 0;
                        std::thread::yield_now();
                    }
                }
                frames.flush(&mut checker);
                let mut captures = Vec::new();
                for q in &mut queues {
                    let queue = format!("{} rx queue {}", q.interface, q.queue);
                    match q.finish_capture() {
                        None => {}
                        Some(Ok(stats)) => captures.push(CaptureReport {
                            queue,
                            stats,
                            mbytes_per_s: 0.0,
                            error: None,
                        }),
                        Some(Err(e)) => captures.push(CaptureReport {
                            queue,
                            stats: Default::default(),
                            mbytes_per_s: 0.0,
                            error: Some(e.to_string()),
                        }),
                    }
                }
                let mut reorder = None::<ReorderReport>;
                for q in &queues {
                    if let Some(c) = q.reorder_counts() {
                        let r = reorder.get_or_insert_with(Default::default);
                        r.batches += c.batches;
                        r.timeout_batches += c.timeout_batches;
                        r.aggregated_packets += c.aggregated_packets;
                        r.passthrough_packets += c.passthrough_packets;
                    }
                    if let Some(e) = q.reorder_error() {
                        checker
                            .first_problem
                            .get_or_insert_with(|| format!("reorder: {e}"));
                        checker.counts.corrupt += 1;
                    }
                }
                if let Some(r) = &mut reorder {
                    r.verified_batches = reorder_check.report.verified_batches;
                    r.bad_batches = reorder_check.report.bad_batches;
                    r.unchecked_batches = reorder_check.report.unchecked_batches;
                    r.verified_chunks = reorder_check.report.verified_chunks;
                    r.first_problem = reorder_check.report.first_problem.take();
                }
                CheckerResult {
                    stamped: frames.stamped,
                    polled: frames.polled,
                    busy_ns,
                    packets,
                    bytes,
                    checker,
                    marks,
                    reorder,
                    failures,
                    captures,
                }
            })
            .map_err(StartError::Spawn)?;
        checkers.push(CheckerThread { thread });
    }

    let mut generators = Vec::new();
    for (stream, b) in config.bench.tx.iter().enumerate() {
        let mut q = plane
            .take_tx_queue(&b.interface_name, b.queue_id)
            .ok_or_else(|| BenchError::QueueTwice {
                interface: b.interface_name.clone(),
                direction: Direction::Tx,
                queue: b.queue_id,
            })?;
        let unusable = |reason: String| BenchError::UnusableTxQueue {
            stream,
            interface: b.interface_name.clone(),
            queue: b.queue_id,
            reason,
        };
        if q.segment_sizes().len() != 1 {
            return Err(unusable(format!(
                "has {} segments; the traffic generator writes single-segment packets",
                q.segment_sizes().len()
            )));
        }
        let mut builder = generator_frames(config, b, stream);
        if builder.frame_len() > q.segment_sizes()[0] {
            return Err(unusable(format!(
                "has {}-byte buffers, shorter than the {}-byte frames",
                q.segment_sizes()[0],
                builder.frame_len()
            )));
        }
        // Frames in GPU memory are written there by a kernel (`gpu_direct`).
        let gpu_frames = if q.host_accessible() {
            None
        } else if opts.tx_work == TxWork::Headers {
            return Err(unusable(
                "is in GPU memory, where the generator writes whole frames: --tx-work headers needs host memory".into(),
            ));
        } else {
            match q.device_gpu() {
                Some(gpu) => Some(gpu),
                None => return Err(unusable("is neither host nor device memory".into())),
            }
        };
        let tx_work = opts.tx_work;
        let (stop, sent, core, batch) = (
            stop_tx.clone(),
            sent.clone(),
            b.cpu_core,
            b.batch_size as usize,
        );
        let paced = opts.target_gbps.is_some();
        let thread = std::thread::Builder::new()
            .name("bench-tx".into())
            .spawn(move || {
                if let Some(c) = core {
                    let _ = affinity::pin_current_thread(c);
                }
                let frame_len = builder.frame_len();
                let mut gpu_writer = match gpu_frames.map(|gpu| GpuFrames::new(gpu, &builder)) {
                    None => None,
                    Some(Ok(w)) => Some(w),
                    Some(Err(e)) => return (0, 0, Some(format!("GPU frame writer: {e}")), 0),
                };
                let mut initialised: Vec<u64> = Vec::new();
                let (mut packets, mut bytes) = (0u64, 0u64);
                let mut pending = None;
                let mut failure = None;
                let mut busy_ns = 0u64;
                let clock = crate::clock::WallClock::new();
                while !stop.load(Ordering::Relaxed) {
                    // Paced: a burst is made when the TX ring is empty (the worker holds
                    // the one its pacer sends), not queued ahead, so its send time
                    // measures the path rather than the wait in the ring.
                    if paced && pending.is_none() && q.pending() > 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    let started = timed.then(Instant::now);
                    let burst = match pending.take() {
                        Some(b) => b,
                        None => match q.alloc_frames(batch, frame_len) {
                            Ok(mut burst) if gpu_writer.is_some() => {
                                builder.set_send_time(clock.now_ns());
                                let w = gpu_writer.as_mut().expect("checked");
                                if let Err(e) = w.write(&mut builder, &mut burst) {
                                    failure = Some(format!("GPU frame writer: {e}"));
                                    break;
                                }
                                burst
                            }
                            Ok(mut burst) => {
                                builder.set_send_time(clock.now_ns());
                                for i in 0..PREFETCH_AHEAD {
                                    prefetch_frame(&burst, i, Some(frame_len));
                                }
                                for i in 0..burst.len() {
                                    prefetch_frame(&burst, i + PREFETCH_AHEAD, Some(frame_len));
                                    let idx = burst.segment(i, 0).index as usize;
                                    let buf = burst.buffer_mut(i, 0).expect("host memory");
                                    // Headers and fill are written once per buffer.
                                    let (word, bit) = (idx / 64, idx % 64);
                                    if initialised.len() <= word {
                                        initialised.resize(word + 1, 0);
                                    }
                                    if initialised[word] & (1 << bit) == 0 {
                                        builder.write_constant(buf);
                                        initialised[word] |= 1 << bit;
                                    }
                                    match tx_work {
                                        TxWork::Full => builder.write_next(buf),
                                        TxWork::Headers => builder.write_headers(buf),
                                    }
                                    // The length is set: `alloc_frames` did it.
                                }
                                burst
                            }
                            Err(_) => {
                                std::thread::yield_now();
                                continue;
                            }
                        },
                    };
                    let n = burst.len() as u64;
                    let sent_now = q.send(burst);
                    if let Some(t) = started {
                        busy_ns += t.elapsed().as_nanos() as u64;
                    }
                    match sent_now {
                        Ok(()) => {
                            packets += n;
                            bytes += n * frame_len as u64;
                            sent.store(packets, Ordering::Relaxed);
                        }
                        Err(e) if e.reason == TxFailure::RingFull => {
                            pending = Some(e.burst);
                            std::thread::yield_now();
                        }
                        // The queue is gone (its worker died): nothing more can be sent.
                        Err(e) => {
                            failure = Some(e.reason.to_string());
                            break;
                        }
                    }
                }
                // A burst built but never sent is dropped here; its sequence numbers were
                // never seen by anyone, so it is not a gap.
                (packets, bytes, failure, busy_ns)
            })
            .map_err(StartError::Spawn)?;
        generators.push(Generator { thread });
    }

    let tx_only = checkers.is_empty();
    if opts.progress {
        plane.show_progress(opts.seconds.ceil() as u64);
    }
    plane.record_series();
    let workers_at_start = plane.worker_readings();
    let started = Instant::now();
    let tx_bytes_at_start = plane.snapshot().total(Direction::Tx).1;
    let duration = Duration::from_secs_f64(opts.seconds);
    while started.elapsed() < duration && !interrupted.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    // What the TX workers sent while the generators ran: the paced rate (queued bursts
    // still go out after, during the drain).
    let sent_gbps = (plane.snapshot().total(Direction::Tx).1 - tx_bytes_at_start) as f64 * 8.0
        / started.elapsed().as_secs_f64()
        / 1e9;
    stop_tx.store(true, Ordering::Relaxed);
    let (mut tx_packets, mut tx_bytes) = (0, 0);
    let mut worker_failures: Vec<String> = Vec::new();
    let mut stages = Vec::new();
    for (i, g) in generators.into_iter().enumerate() {
        let (p, b, failure, busy_ns) = g.thread.join().expect("generator thread");
        if timed {
            stages.push(StageCost::new(format!("generator {i}"), p, busy_ns));
        }
        tx_packets += p;
        tx_bytes += b;
        worker_failures.extend(failure);
    }
    let seconds = started.elapsed().as_secs_f64();
    plane.show_progress(0);

    // Drain: deliver partial bursts, then wait until the pipeline is empty (every sent
    // packet received or counted as dropped) or the deadline passes. A run with only the
    // receiving side here cannot know what was sent: it waits until nothing moves.
    plane.flush();
    let deadline = if interrupted.load(Ordering::Relaxed) {
        opts.drain_deadline.min(Duration::from_secs(1))
    } else {
        opts.drain_deadline
    };
    let drain_start = Instant::now();
    let both_sides = !config.bench.tx.is_empty() && !tx_only;
    // Every sent packet received (once) or counted as dropped.
    let pipeline_empty =
        |seen: u64, s: &crate::stats::Snapshot| seen + s.drops().total() >= tx_packets;
    if both_sides {
        while !pipeline_empty(received.load(Ordering::Relaxed), &plane.snapshot())
            && drain_start.elapsed() < deadline
            && plane.worker_failures().is_empty()
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    } else if !tx_only {
        let mut last = received.load(Ordering::Relaxed);
        let mut last_change = Instant::now();
        while drain_start.elapsed() < deadline && last_change.elapsed() < Duration::from_millis(300)
        {
            std::thread::sleep(Duration::from_millis(2));
            let now = received.load(Ordering::Relaxed);
            if now != last {
                last = now;
                last_change = Instant::now();
            }
        }
    }
    // A sender on its own (the other side is another process): wait until the workers have
    // handed every generated packet to the engine, then give the link a moment to carry the
    // last ones before the ports close.
    let mut unsent = 0;
    if tx_only {
        let transmitted = || plane.snapshot().total(Direction::Tx).0;
        while transmitted() < tx_packets && drain_start.elapsed() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        unsent = tx_packets.saturating_sub(transmitted());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Where undelivered packets are, before the checkers stop reading.
    let pipeline = plane.snapshot();
    let unique_seen = received.load(Ordering::Relaxed);
    stop_rx.store(true, Ordering::Relaxed);
    let (mut rx_packets, mut rx_bytes) = (0, 0);
    let mut counts = CheckCounts::default();
    let mut problems = Vec::new();
    let mut flow_ids = BTreeMap::new();
    let mut reorder: Option<ReorderReport> = None;
    let mut captures = Vec::new();
    let mut latency = Latency::default();
    let (mut stamped, mut polled) = (0, 0);
    for (i, c) in checkers.into_iter().enumerate() {
        let r = c.thread.join().expect("checker thread");
        for mut cap in r.captures {
            cap.mbytes_per_s = cap.stats.written_bytes as f64 / seconds.max(1e-9) / 1e6;
            if let Some(e) = &cap.error {
                problems.push(format!("capture {}: {e}", cap.queue));
            }
            captures.push(cap);
        }
        if timed {
            stages.push(StageCost::new(format!("checker {i}"), r.packets, r.busy_ns));
        }
        if let Some(rr) = &r.reorder {
            reorder.get_or_insert_with(Default::default).add(rr);
        }
        r.marks.merge_into(&mut flow_ids);
        rx_packets += r.packets;
        rx_bytes += r.bytes;
        counts.add(&r.checker.counts);
        let mut checker = r.checker;
        latency.add(&mut checker.latency);
        stamped += r.stamped;
        polled += r.polled;
        if let Some(p) = checker.first_problem {
            problems.push(p);
        }
        for f in r.failures {
            note_failure(&mut worker_failures, f);
        }
    }
    let snapshot = plane.snapshot();
    let series = plane.take_series();
    let workers = crate::worker::WorkerUse::between(&workers_at_start, &plane.worker_readings());
    let engine = plane.engine_name();
    let steering = plane.steering();
    let zero_copy_regions = plane.zero_copy_regions();
    let first_tx = config.bench.tx.first();
    let setup = RunSetup {
        version: env!("CARGO_PKG_VERSION"),
        commit: crate::stats::BUILD_COMMIT,
        engine,
        steering: steering.clone(),
        frame_bytes: first_tx.map(|b| FrameBuilder::new(b, 0).frame_len()),
        payload_bytes: first_tx.map(|b| b.payload_size),
        batch: first_tx.map(|b| b.batch_size),
        generators: config.bench.tx.len(),
        checkers: config.bench.rx.len(),
        rx_queues: snapshot
            .queues
            .iter()
            .filter(|q| q.direction == "rx")
            .count(),
        tx_queues: snapshot
            .queues
            .iter()
            .filter(|q| q.direction == "tx")
            .count(),
        worker_cores: plane.worker_cores(),
        paced_gbps: paced_gbps(config),
    };
    if let Err(failed) = plane.shutdown() {
        for f in failed {
            note_failure(&mut worker_failures, f.to_string());
        }
    }

    if timed {
        for q in &snapshot.queues {
            stages.push(StageCost::new(
                format!("{} {} queue {} (worker)", q.interface, q.direction, q.queue),
                q.packets,
                q.busy_ns,
            ));
        }
    }
    let drops = snapshot.drops();
    let unique_rx = rx_packets.saturating_sub(counts.duplicates);
    let missing = if both_sides {
        tx_packets.saturating_sub(unique_rx)
    } else {
        0
    };
    // Missing packets that no counter explains, when the deadline cut the drain short,
    // are in flight; after a complete drain they are lost without attribution.
    let drained = both_sides && pipeline_empty(unique_seen, &pipeline);
    let unexplained = missing.saturating_sub(drops.total());
    let (lost, unattributed, in_flight) = if drained || !both_sides {
        (missing, unexplained, 0)
    } else {
        (missing - unexplained, 0, unexplained)
    };
    let in_flight_cause = (in_flight > 0).then(|| {
        let (tx_done, _) = pipeline.total(Direction::Tx);
        let (rx_done, _) = pipeline.total(Direction::Rx);
        format!(
            "{in_flight} packets were neither received nor counted as dropped {:.1} s after the generators stopped (drain deadline{}): {} not yet taken by the TX workers, {} transmitted but not delivered to an RX queue, {} delivered but not yet read by the checkers",
            drain_start.elapsed().as_secs_f64(),
            if interrupted.load(Ordering::Relaxed) { ", shortened by the interrupt" } else { "" },
            tx_packets.saturating_sub(tx_done),
            tx_done.saturating_sub(rx_done + pipeline.drops().total()),
            rx_done.saturating_sub(unique_seen),
        )
    });
    if drops.total() > 0 {
        problems.push(format!(
            "data plane dropped {} packets ({drops:?})",
            drops.total()
        ));
    }
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
    if counts.corrupt > 0 || counts.reordered > 0 || counts.gaps > 0 || counts.duplicates > 0 {
        problems.push(format!(
            "checker: {} corrupt, {} missing from sequences, {} out of order, {} duplicated",
            counts.corrupt, counts.gaps, counts.reordered, counts.duplicates
        ));
    }
    if let Some(r) = &reorder
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
        let r = reorder.clone().unwrap_or_default();
        let verifiable = super::quantize::lossless(q.conversion);
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
    if both_sides && unique_rx > tx_packets {
        problems.push(format!(
            "received {unique_rx} distinct packets but only {tx_packets} were sent"
        ));
    }
    for f in &worker_failures {
        problems.push(f.clone());
    }
    let verdict = if !problems.is_empty() {
        Verdict::NotLossless
    } else if in_flight > 0 {
        Verdict::Inconclusive
    } else {
        Verdict::Lossless
    };
    // A TX-only run reports what it sent.
    let (tput_bytes, tput_packets) = if tx_only {
        (tx_bytes, tx_packets)
    } else {
        (rx_bytes, rx_packets)
    };
    Ok(RawReport {
        engine,
        tx_work: opts.tx_work,
        rx_work: opts.rx_work,
        steering,
        zero_copy_regions,
        seconds,
        requested_seconds: opts.seconds,
        captures,
        interrupted: interrupted.load(Ordering::Relaxed),
        tx_packets,
        tx_bytes,
        rx_packets,
        rx_bytes,
        drops,
        lost,
        unattributed,
        in_flight,
        in_flight_cause,
        worker_failures,
        verdict,
        lossless: verdict == Verdict::Lossless,
        rx_gbps: tput_bytes as f64 * 8.0 / seconds / 1e9,
        rx_mpps: tput_packets as f64 / seconds / 1e6,
        queues: snapshot.queues,
        flow_ids,
        checker: counts,
        stages,
        pacing: paced_gbps(config).map(|target_gbps| PacingReport {
            target_gbps,
            sent_gbps,
        }),
        reorder,
        latency: latency.summary(),
        latency_clock: match (stamped, polled) {
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

/// `config` with every generator's TX queue paced to its share of `gbps`.
pub(crate) fn with_target_rate(config: &Config, gbps: f64) -> Config {
    let mut c = config.clone();
    let mbps = ((gbps * 1000.0) / c.bench.tx.len() as f64).round().max(1.0) as u64;
    for b in &config.bench.tx {
        let Some(i) = c.interface_index(&b.interface_name) else {
            continue;
        };
        for q in c.interfaces[i]
            .tx
            .iter_mut()
            .flat_map(|t| t.queues.iter_mut())
        {
            if q.id == b.queue_id {
                q.pacing_mbps = mbps;
            }
        }
    }
    c
}

/// The rate the generators' TX queues are paced to in all (`pacing_mbps`, which
/// `--target-gbps` sets), Gb/s; `None` when none is paced.
fn paced_gbps(config: &Config) -> Option<f64> {
    let mut mbps = 0u64;
    for b in &config.bench.tx {
        let Some(i) = config.interface_index(&b.interface_name) else {
            continue;
        };
        mbps += config.interfaces[i]
            .tx
            .iter()
            .flat_map(|t| &t.queues)
            .filter(|q| q.id == b.queue_id)
            .map(|q| q.pacing_mbps)
            .sum::<u64>();
    }
    (mbps > 0).then(|| mbps as f64 / 1000.0)
}

/// Adds a worker failure once (the generators, checkers and shutdown may all see it).
fn note_failure(failures: &mut Vec<String>, failure: String) {
    if !failures.contains(&failure) {
        failures.push(failure);
    }
}

/// Received packets per flow id, counted without hashing for the usual small ids.
#[derive(Default)]
struct FlowMarks {
    small: Vec<u64>,
    large: BTreeMap<u32, u64>,
}

impl FlowMarks {
    const SMALL: u32 = 1024;

    /// Counts `n` packets of flow `id`.
    #[inline]
    fn count(&mut self, id: u32, n: u64) {
        if id < Self::SMALL {
            let i = id as usize;
            if self.small.len() <= i {
                self.small.resize(i + 1, 0);
            }
            self.small[i] += n;
        } else {
            *self.large.entry(id).or_default() += n;
        }
    }

    fn merge_into(self, out: &mut BTreeMap<u32, u64>) {
        for (id, n) in self.small.into_iter().enumerate() {
            if n > 0 {
                *out.entry(id as u32).or_default() += n;
            }
        }
        for (id, n) in self.large {
            *out.entry(id).or_default() += n;
        }
    }
}

impl RawReport {
    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "engine {} (steering: {}), {:.2} s\n",
            self.engine, self.steering, self.seconds
        ));
        if self.interrupted {
            s.push_str(&format!(
                "  INTERRUPTED after {:.2} of {} requested seconds (SIGINT or SIGTERM)\n",
                self.seconds, self.requested_seconds
            ));
        }
        if !self.zero_copy_regions.is_empty() {
            s.push_str(&format!(
                "  zero-copy receive into: {}\n",
                self.zero_copy_regions.join(", ")
            ));
        }
        s.push_str(&format!(
            "  TX  {:>14} packets {:>16} bytes\n",
            self.tx_packets, self.tx_bytes
        ));
        s.push_str(&format!(
            "  RX  {:>14} packets {:>16} bytes   {:.2} Mpps  {:.2} Gb/s\n",
            self.rx_packets, self.rx_bytes, self.rx_mpps, self.rx_gbps
        ));
        let d = &self.drops;
        s.push_str(&format!(
            "  drops: ring_full {} pool_empty {} no_flow {} malformed {} engine_missed {} gpu_copy {} injected {}\n",
            d.ring_full, d.pool_empty, d.no_flow, d.malformed, d.engine_missed, d.gpu_copy, d.injected
        ));
        s.push_str(&format!(
            "  lost {} (attributed to drop counters {}, unattributed {}), in flight {}\n",
            self.lost,
            self.lost - self.unattributed,
            self.unattributed,
            self.in_flight
        ));
        if let Some(c) = &self.in_flight_cause {
            s.push_str(&format!("  in flight: {c}\n"));
        }
        match self.rx_work {
            RxWork::Count => {
                s.push_str("  checker: frames counted, not read (--rx-work count)\n")
            }
            work => s.push_str(&format!(
                "  checker ({}): {} valid, {} corrupt, {} missing from sequences, {} out of order, {} duplicated\n",
                if work == RxWork::Trailer { "trailers only" } else { "headers and trailers" },
                self.checker.valid, self.checker.corrupt, self.checker.gaps, self.checker.reordered, self.checker.duplicates
            )),
        }
        if let Some(l) = &self.latency {
            s.push_str(&format!(
                "  one-way latency ({} frames, receive time from {}): min {} p50 {} p99 {} p99.9 {} max {} ns{}\n",
                l.frames,
                self.latency_clock,
                l.min_ns,
                l.p50_ns,
                l.p99_ns,
                l.p999_ns,
                l.max_ns,
                if l.receive_before_send > 0 {
                    format!(" ({} frames received before their send time: clocks of two processes)", l.receive_before_send)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(p) = &self.pacing {
            s.push_str(&format!(
                "  paced: target {:.3} Gb/s, sent at {:.3} Gb/s while generating ({:+.2} %)\n",
                p.target_gbps,
                p.sent_gbps,
                (p.sent_gbps / p.target_gbps - 1.0) * 100.0
            ));
        }
        for c in &self.captures {
            s.push_str(&format!(
                "  capture {}: {} of {} packets written ({:.1} MB/s), writer_full {}, not in host memory {}{}\n",
                c.queue,
                c.stats.written_packets,
                c.stats.submitted,
                c.mbytes_per_s,
                c.stats.writer_full,
                c.stats.not_host,
                c.error.as_deref().map(|e| format!(", failed: {e}")).unwrap_or_default()
            ));
        }
        for st in &self.stages {
            s.push_str(&format!(
                "  stage {}: {:.1} ns per packet ({} packets, {:.3} s busy)\n",
                st.stage,
                st.ns_per_packet,
                st.packets,
                st.busy_ns as f64 / 1e9
            ));
        }
        if let Some(r) = &self.reorder {
            s.push_str(&format!(
                "  reorder: {} batches, {} flushed by timeout, {} packets aggregated, {} passed through; {} batches verified, {} bad, {} unchecked (RX bytes count their payload bytes)\n",
                r.batches, r.timeout_batches, r.aggregated_packets, r.passthrough_packets, r.verified_batches, r.bad_batches, r.unchecked_batches
            ));
            if r.verified_chunks > 0 {
                s.push_str(&format!(
                    "  converted samples: {} chunks verified against the frames sent\n",
                    r.verified_chunks
                ));
            }
        }
        for q in &self.queues {
            s.push_str(&format!(
                "  {} {} queue {}: {} packets, {} bytes\n",
                q.interface, q.direction, q.queue, q.packets, q.bytes
            ));
        }
        if !self.flow_ids.is_empty() {
            let ids: Vec<String> = self
                .flow_ids
                .iter()
                .map(|(id, n)| format!("{id}: {n}"))
                .collect();
            s.push_str(&format!("  packets by flow id: {}\n", ids.join(", ")));
        }
        match self.verdict {
            Verdict::Lossless if self.rx_work == RxWork::Count => s.push_str(
                "LOSSLESS: every packet sent arrived (counted; contents and order not checked)\n",
            ),
            Verdict::Lossless => {
                s.push_str("LOSSLESS: every packet sent arrived intact and in order\n")
            }
            Verdict::Inconclusive => s.push_str(&format!(
                "INCONCLUSIVE: nothing lost or damaged so far, but {} packets were still in flight at the drain deadline\n",
                self.in_flight
            )),
            Verdict::NotLossless => {
                s.push_str(&format!("NOT LOSSLESS: {} packets lost\n", self.lost));
                for p in &self.problems {
                    s.push_str(&format!("  - {p}\n"));
                }
            }
        }
        s
    }
}
