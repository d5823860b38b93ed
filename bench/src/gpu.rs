//! `dataplane bench gpu`: the GPU paths next to their physical peers, measured in one run.
//!
//! - **Staged ingest**: bursts of packets in host memory moved into a `device` region by
//!   the RX stage (both modes, pageable and pinned sources), in Gb/s of payload, next to
//!   the plain pinned host-to-device copy bandwidth of one large buffer.
//! - **Reorder**: the reorder kernel on a batch in device memory, in GB/s of payload, next
//!   to a device-to-device copy of the same bytes.
//!
//! Each figure is the median of several timed rounds.

use dataplane::burst::Burst;
use dataplane::config::{MemoryKind, MemoryRegionConfig};
use dataplane::memory::RegionSet;
use dataplane::stage::{RxStage, StageMode};
use gpudirect::reorder::{BitField, Conversion, InputType, Method, OutputType, ReorderSpec};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One staged-ingest case.
#[derive(Clone, Debug, Serialize)]
pub struct StageResult {
    /// Payload bytes per packet.
    pub payload: usize,
    /// Memory of the source packets.
    pub source: &'static str,
    /// `kernel` or `copy`.
    pub mode: &'static str,
    /// The source bursts are runs ([`Burst::allocate_run`]: consecutive buffers and one
    /// length, no per-packet descriptors) rather than bursts of descriptors, as an engine
    /// that fills consecutive buffers can hand over.
    pub runs: bool,
    /// Share of the bursts delivered into device memory that were still runs (the stage
    /// keeps a run a run when the device pool hands out consecutive buffers).
    pub delivered_as_runs: f64,
    /// Threads: 1, the source bursts, the stage and their consumer on one thread, as on an
    /// RX worker staging its own queue; 3, each on its own, as with `stage_core` (the
    /// engine's worker, the stage's, the application), the stage running as the
    /// pipeline's stage task; more, with copy helpers.
    pub threads: u32,
    /// Of those, threads helping the stage copy (`stage_core` lists, pageable sources).
    pub copy_helpers: u32,
    /// Payload Gb/s into device memory (median round).
    pub gbps: f64,
    /// `gbps` over the pinned host-to-device copy bandwidth.
    pub ratio_to_h2d: f64,
    /// CPU microseconds per burst spent submitting (building the output burst and the
    /// copies, queuing them), median round (one thread only).
    pub submit_us_per_burst: Option<f64>,
    /// Microseconds per burst spent waiting for the oldest burst's copies (one thread).
    pub wait_us_per_burst: Option<f64>,
    /// Microseconds per burst the bench spends making the source burst (allocating and
    /// setting lengths, as an engine receiving it would; one thread).
    pub source_us_per_burst: Option<f64>,
    /// Bursts per GPU copy or launch over all rounds (the stage coalesces consecutive
    /// bursts into copies of up to 4 MiB).
    pub bursts_per_copy: f64,
    /// Pageable sources: `gbps` over one core's gather of the same packets
    /// ([`GatherBound`]), the bound of a stage without copy helpers.
    pub ratio_to_gather: Option<f64>,
}

/// One core copying bursts of packets out of pageable memory into pinned staging, one
/// packet at a time, with nothing else: the most a stage without copy helpers can move
/// from pageable sources.
#[derive(Clone, Debug, Serialize)]
pub struct GatherBound {
    /// Payload bytes per packet.
    pub payload: usize,
    /// Gb/s gathered (median round).
    pub gbps: f64,
    /// `gbps` over the pinned host-to-device copy bandwidth.
    pub ratio_to_h2d: f64,
    /// Gb/s when each gathered burst is also uploaded to the GPU from its staging slot, as
    /// the stage does (one copy and one mark per burst, at most one copy per slot in
    /// flight): the gather and the driver calls, without the stage's bookkeeping.
    pub with_upload_gbps: f64,
}

/// Back-to-back host-to-device copies of one burst's bytes each, with as many in flight as
/// the stage allows: the ceiling of a path that issues one copy per burst, without any of
/// the stage's own work.
#[derive(Clone, Debug, Serialize)]
pub struct CopyCeiling {
    /// Bytes per copy.
    pub bytes: usize,
    /// Streams the copies go round (1: one stream; more: one per table slot, as the
    /// stage's one-copy path does).
    pub streams: usize,
    /// Gb/s (median round).
    pub gbps: f64,
    /// `gbps` over the pinned copy of one large buffer.
    pub ratio_to_h2d: f64,
    /// CPU microseconds per `cuMemcpyHtoDAsync` call (median round).
    pub copy_call_us: f64,
    /// CPU microseconds per completion mark queued (`cuStreamWriteValue32` or an event).
    pub mark_call_us: f64,
}

/// One reorder case.
#[derive(Clone, Debug, Serialize)]
pub struct ReorderResult {
    /// What the kernel does.
    pub case: String,
    /// Packets per batch and payload bytes each.
    pub packets: u32,
    /// Payload bytes per packet.
    pub payload: u32,
    /// Input GB/s of the reorder kernel (median round).
    pub reorder_gbyte_s: f64,
    /// GB/s of a device-to-device copy of the same bytes.
    pub d2d_gbyte_s: f64,
    /// `reorder_gbyte_s / d2d_gbyte_s`.
    pub ratio: f64,
    /// The same batches against a device-to-device copy that moves as many bytes as the
    /// kernel does (it reads the input and writes the output, so the copy is of
    /// `(input + output) / 2` bytes), both timed in this run: copy time over kernel time.
    /// Equal to `ratio` without a conversion; for a widening conversion it is the measured
    /// counterpart of `traffic_bound`.
    pub ratio_to_equal_traffic_copy: f64,
    /// The highest ratio memory traffic allows: the copy reads and writes the input bytes
    /// once, a conversion reads them and writes its (larger or smaller) output, so at equal
    /// bandwidth the ratio is at most `2 * input / (input + output)` (1 without a
    /// conversion).
    pub traffic_bound: f64,
    /// CPU microseconds per batch spent queueing the reorder (table, launch, event) and
    /// waiting for a table slot to come free (medians of the rounds): a wait near zero
    /// means the CPU, not the GPU, sets the pace.
    pub submit_us_per_batch: f64,
    /// See `submit_us_per_batch`.
    pub wait_us_per_batch: f64,
}

/// The whole report (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct GpuReport {
    /// GPU name.
    pub gpu: String,
    /// Pinned host-to-device copy of one 256 MiB buffer, Gb/s.
    pub h2d_pinned_gbps: f64,
    /// Per-burst copy ceilings.
    pub copies: Vec<CopyCeiling>,
    /// One core's gather from pageable memory, per payload.
    pub gathers: Vec<GatherBound>,
    /// Staged ingest cases.
    pub stage: Vec<StageResult>,
    /// Reorder cases.
    pub reorder: Vec<ReorderResult>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Why the GPU bench could not run, or found a wrong result.
#[derive(Debug, thiserror::Error)]
pub enum GpuBenchError {
    /// A CUDA call failed.
    #[error(transparent)]
    Gpu(#[from] gpudirect::GpuError),
    /// A region could not be allocated.
    #[error(transparent)]
    Memory(#[from] dataplane::memory::MemoryError),
    /// The stage could not move a burst.
    #[error("staging failed: {0}")]
    Stage(String),
    /// A pool ran dry where it cannot under a working pipeline.
    #[error("{0} pool empty")]
    PoolEmpty(&'static str),
    /// The kernel's output differs from the CPU reference.
    #[error("{case}: GPU output differs from the CPU reorder")]
    Mismatch {
        /// The case.
        case: String,
    },
}

/// Which parts of [`run`] to measure (the pinned copy, their peer, always is).
#[derive(Clone, Copy, Debug)]
pub struct GpuParts {
    /// Back-to-back copies of one burst's bytes.
    pub copies: bool,
    /// Staged ingest.
    pub stage: bool,
    /// The reorder kernel.
    pub reorder: bool,
}

impl Default for GpuParts {
    fn default() -> Self {
        Self {
            copies: true,
            stage: true,
            reorder: true,
        }
    }
}

/// Runs the cases of `parts` on GPU 0; each timed round lasts about `round` seconds.
/// `progress` gets each case's line of [`GpuReport::human`] as it is measured.
pub fn run(
    round: f64,
    parts: GpuParts,
    progress: &mut dyn FnMut(&str),
) -> Result<GpuReport, GpuBenchError> {
    let gpu_name = gpudirect::device_name(0)?;
    let mut gpu = gpudirect::Gpu::new(0)?;
    let round = Duration::from_secs_f64(round.max(0.05));
    let rounds = 7;

    // The peer: one large pinned buffer copied to the device.
    let big = 256 << 20;
    let pinned = gpudirect::PinnedBuffer::alloc(0, big)?;
    let dev = gpudirect::DeviceBuffer::alloc(0, big)?;
    let mut h2d = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        // SAFETY: both buffers are `big` bytes and live past the sync.
        unsafe { gpu.copy_to_device(dev.device_ptr(), pinned.as_ptr(), big) }?;
        gpu.sync()?;
        h2d.push(big as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
    }
    let h2d_pinned_gbps = median(h2d);
    progress(&format!(
        "{gpu_name}: pinned host-to-device copy {h2d_pinned_gbps:.1} Gb/s"
    ));

    let mut copies = Vec::new();
    let copy_sizes: &[usize] = if parts.copies {
        &[256 << 10, dataplane::stage::GROUP_BYTES]
    } else {
        &[]
    };
    for &bytes in copy_sizes {
        for streams in [1, gpudirect::kernels::TABLE_SLOTS] {
            let (gbps, copy_call_us, mark_call_us) =
                copy_ceiling(&mut gpu, &pinned, &dev, bytes, streams > 1, round, rounds)?;
            let c = CopyCeiling {
                bytes,
                streams,
                gbps,
                ratio_to_h2d: gbps / h2d_pinned_gbps,
                copy_call_us,
                mark_call_us,
            };
            progress(&c.line());
            copies.push(c);
        }
    }

    let mut stage = Vec::new();
    let mut gathers = Vec::new();
    let payloads: &[usize] = if parts.stage { &[1024, 8192] } else { &[] };
    for &payload in payloads {
        let gbps = gather_bound(&mut gpu, payload, false, round, rounds)?;
        let with_upload_gbps = gather_bound(&mut gpu, payload, true, round, rounds)?;
        let g = GatherBound {
            payload,
            gbps,
            ratio_to_h2d: gbps / h2d_pinned_gbps,
            with_upload_gbps,
        };
        progress(&g.line());
        let gather_gbps = g.gbps;
        gathers.push(g);
        let of_gather = |kind, gbps: f64| (kind == MemoryKind::Host).then(|| gbps / gather_gbps);
        // Pinned sources also as runs (copy mode, where the stage keeps them runs).
        for (source, kind, runs) in [
            ("host", MemoryKind::Host, false),
            ("host_pinned", MemoryKind::HostPinned, false),
            ("host_pinned", MemoryKind::HostPinned, true),
        ] {
            let modes: &[(&'static str, StageMode)] = if runs {
                &[("copy", StageMode::Copy)]
            } else {
                &[("kernel", StageMode::Kernel), ("copy", StageMode::Copy)]
            };
            for &(mode_name, mode) in modes {
                let c = stage_case(payload, kind, mode, runs, round, rounds)?;
                let r = StageResult {
                    payload,
                    source,
                    mode: mode_name,
                    runs,
                    delivered_as_runs: c.delivered_as_runs,
                    threads: 1,
                    copy_helpers: 0,
                    gbps: c.gbps,
                    ratio_to_h2d: c.gbps / h2d_pinned_gbps,
                    submit_us_per_burst: Some(c.submit_us),
                    wait_us_per_burst: Some(c.wait_us),
                    source_us_per_burst: Some(c.source_us),
                    bursts_per_copy: c.bursts_per_copy,
                    ratio_to_gather: of_gather(kind, c.gbps),
                };
                progress(&r.line());
                stage.push(r);
            }
            // Pageable sources also with copy helpers (the gather is the CPU's memcpy).
            let helper_counts: &[usize] = if kind == MemoryKind::Host {
                &[0, 2]
            } else {
                &[0]
            };
            for &helpers in helper_counts {
                let c = stage_case_threads(
                    payload,
                    kind,
                    StageMode::Copy,
                    runs,
                    helpers,
                    round,
                    rounds,
                )?;
                let gbps = c.gbps;
                let r = StageResult {
                    payload,
                    source,
                    mode: "copy",
                    runs,
                    delivered_as_runs: c.delivered_as_runs,
                    threads: 3 + helpers as u32,
                    copy_helpers: helpers as u32,
                    gbps,
                    ratio_to_h2d: gbps / h2d_pinned_gbps,
                    submit_us_per_burst: None,
                    wait_us_per_burst: None,
                    source_us_per_burst: None,
                    bursts_per_copy: c.bursts_per_copy,
                    ratio_to_gather: of_gather(kind, gbps),
                };
                progress(&r.line());
                stage.push(r);
            }
        }
    }

    let mut reorder = Vec::new();
    let seq = BitField {
        bit_offset: 0,
        bit_width: 32,
    };
    for (case, payload, conversion) in [
        ("reorder 1024 x 8 KiB, bytes", 8192u32, None),
        ("reorder 1024 x 1 KiB, bytes", 1024, None),
        (
            "reorder 1024 x 8 KiB, int16 -> fp32",
            8192,
            Some(Conversion {
                input: InputType::Int16,
                output: OutputType::Fp32,
                network_order: true,
            }),
        ),
        (
            "reorder 1024 x 8 KiB, int16 -> fp16",
            8192,
            Some(Conversion {
                input: InputType::Int16,
                output: OutputType::Fp16,
                network_order: true,
            }),
        ),
        (
            "reorder 1024 x 8 KiB, int8 -> bf16",
            8192,
            Some(Conversion {
                input: InputType::Int8,
                output: OutputType::Bf16,
                network_order: true,
            }),
        ),
        (
            "reorder 1024 x 8 KiB, int4 -> fp32",
            8192,
            Some(Conversion {
                input: InputType::Int4,
                output: OutputType::Fp32,
                network_order: true,
            }),
        ),
    ]
    .into_iter()
    .filter(|_| parts.reorder)
    {
        let spec = ReorderSpec {
            method: Method::SeqPacketsPerBatch {
                sequence: seq,
                packets_per_batch: 1024,
            },
            payload_byte_offset: 64,
            in_slot_bytes: payload,
            conversion,
        };
        let r = reorder_case(&mut gpu, case, &spec, payload, rounds)?;
        progress(&r.line());
        reorder.push(r);
    }
    Ok(GpuReport {
        gpu: gpu_name,
        h2d_pinned_gbps,
        copies,
        gathers,
        stage,
        reorder,
    })
}

/// Gb/s of one core copying bursts of [`BURST`] `payload`-byte packets, one packet at a
/// time, from a pageable region sized as [`stage_case`]'s source into a pinned buffer
/// (median round): the gather alone, from the same kind of memory; with `upload`, each
/// burst then copied to the GPU and its slot marked, waiting for the slot's previous copy
/// before gathering into it again.
fn gather_bound(
    gpu: &mut gpudirect::Gpu,
    payload: usize,
    upload: bool,
    round: Duration,
    rounds: usize,
) -> Result<f64, GpuBenchError> {
    let regions = Arc::new(RegionSet::allocate(&[MemoryRegionConfig::new(
        "src",
        MemoryKind::Host,
        stage_bufs(payload, 0),
        payload,
    )])?);
    // Every buffer in bursts held for the whole measurement, gathered in turn.
    let mut bursts = Vec::new();
    while let Some(mut b) = Burst::allocate(regions.clone(), 0, 0, &[0], BURST) {
        for i in 0..BURST {
            b.set_len(i, 0, payload);
        }
        bursts.push(b);
    }
    let slots = gpudirect::kernels::TABLE_SLOTS;
    let staging = gpudirect::PinnedBuffer::alloc(0, BURST * payload * slots)?;
    let dev = gpudirect::DeviceBuffer::alloc(0, BURST * payload * slots)?;
    let mut results = Vec::new();
    let mut n = 0usize;
    for _ in 0..rounds {
        let (t, mut bytes) = (Instant::now(), 0usize);
        while t.elapsed() < round {
            let b = &bursts[n % bursts.len()];
            let slot = n % slots;
            if upload && n >= slots {
                gpu.wait_slot(slot)?;
            }
            let at = staging.as_ptr() as u64 + (slot * BURST * payload) as u64;
            let jobs = (0..BURST).map(|i| dataplane::copy_helpers::CopyJob {
                src: b.segment_addr(i, 0),
                dst: at + (i * payload) as u64,
                len: payload,
            });
            // SAFETY: each source is a packet's host buffer of a burst held here; each
            // destination lies in its own `payload` bytes of one slot of the staging
            // buffer, which nothing else uses.
            unsafe { dataplane::copy_helpers::copy_with(None, jobs) };
            if upload {
                // SAFETY: the slot's staging and device range are `BURST * payload` bytes
                // inside both buffers, untouched until the slot's mark completes (waited
                // for above before the slot is gathered into again) and alive past the
                // sync below.
                unsafe {
                    gpu.copy_to_device(
                        dev.device_ptr() + (slot * BURST * payload) as u64,
                        at as *const u8,
                        BURST * payload,
                    )
                }?;
                gpu.record_slot(slot)?;
            }
            bytes += BURST * payload;
            n += 1;
        }
        gpu.sync()?;
        results.push(bytes as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
    }
    Ok(median(results))
}

/// Gb/s of back-to-back `bytes`-long copies from `pinned` into `dev` (offsets moving through
/// both, as bursts' buffers do), at most [`gpudirect::kernels::TABLE_SLOTS`] in flight, on
/// one stream or one per slot; and the CPU microseconds per copy call and per mark.
fn copy_ceiling(
    gpu: &mut gpudirect::Gpu,
    pinned: &gpudirect::PinnedBuffer,
    dev: &gpudirect::DeviceBuffer,
    bytes: usize,
    slot_streams: bool,
    round: Duration,
    rounds: usize,
) -> Result<(f64, f64, f64), GpuBenchError> {
    let depth = gpudirect::kernels::TABLE_SLOTS;
    let places = (pinned.len().min(dev.len()) / bytes).max(1);
    let (mut results, mut copy_us, mut mark_us) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (t, mut n) = (Instant::now(), 0usize);
        let (mut copying, mut marking) = (Duration::ZERO, Duration::ZERO);
        while t.elapsed() < round {
            let slot = n % depth;
            if n >= depth {
                gpu.wait_slot(slot)?;
            }
            let at = (n % places) * bytes;
            let c = Instant::now();
            // SAFETY: `at + bytes` lies inside both buffers, which outlive the sync below;
            // the range is rewritten only after its slot's mark completed.
            unsafe {
                gpu.copy_to_device_on(
                    slot_streams.then_some(slot),
                    dev.device_ptr() + at as u64,
                    pinned.as_ptr().add(at),
                    bytes,
                )
            }?;
            let m = Instant::now();
            gpu.record_slot_on(slot, slot_streams)?;
            marking += m.elapsed();
            copying += m - c;
            n += 1;
        }
        gpu.sync()?;
        results.push((n * bytes) as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
        copy_us.push(copying.as_secs_f64() * 1e6 / n.max(1) as f64);
        mark_us.push(marking.as_secs_f64() * 1e6 / n.max(1) as f64);
    }
    Ok((median(results), median(copy_us), median(mark_us)))
}

/// Payload Gb/s of the RX stage moving bursts of 256 packets from `kind` memory into a
/// device region, and the microseconds per burst spent submitting, waiting and making the
/// source burst (medians of the rounds).
/// What [`stage_case`] and [`stage_case_threads`] measured (medians over the rounds; the
/// CPU times per burst from [`stage_case`] only).
#[derive(Default)]
struct StageCase {
    gbps: f64,
    submit_us: f64,
    wait_us: f64,
    source_us: f64,
    bursts_per_copy: f64,
    delivered_as_runs: f64,
}

/// A source burst of [`BURST`] `payload`-byte packets in `src`, as an engine would hand it
/// over: a run when `runs` and the pool's next buffers are consecutive, else descriptors.
fn source_burst(regions: &Arc<RegionSet>, src: u16, payload: usize, runs: bool) -> Option<Burst> {
    if runs && let Some(b) = Burst::allocate_run(regions.clone(), 0, 0, src, BURST, payload) {
        return Some(b);
    }
    let mut b = Burst::allocate(regions.clone(), 0, 0, &[src], BURST)?;
    for i in 0..BURST {
        b.set_len(i, 0, payload);
    }
    Some(b)
}

fn stage_case(
    payload: usize,
    kind: MemoryKind,
    mode: StageMode,
    runs: bool,
    round: Duration,
    rounds: usize,
) -> Result<StageCase, GpuBenchError> {
    let (regions, mut stage) = stage_regions(payload, kind, mode, 0)?;
    let src = 0;
    let fail = |e| match e {
        dataplane::stage::StageError::NoBuffers(_) => GpuBenchError::PoolEmpty("device"),
        dataplane::stage::StageError::Failed { reason, .. } => GpuBenchError::Stage(reason),
    };
    let (mut results, mut submit_us, mut wait_us, mut source_us) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut all_bursts, mut delivered, mut as_runs) = (0u64, 0u64, 0u64);
    for _ in 0..rounds {
        let (mut bytes, t) = (0u64, Instant::now());
        let (mut submitting, mut waiting, mut sourcing, mut bursts) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0u32);
        while t.elapsed() < round {
            // Keep the stage's pipeline full, as an RX worker under load does.
            while stage.has_room() {
                let made = Instant::now();
                let Some(b) = source_burst(&regions, src, payload, runs) else {
                    if stage.in_flight() == 0 {
                        return Err(GpuBenchError::PoolEmpty("source"));
                    }
                    break; // the stage holds the rest: wait for it
                };
                let s = Instant::now();
                sourcing += s - made;
                let r = stage.submit(b);
                submitting += s.elapsed();
                match r {
                    Ok(()) => {
                        bursts += 1;
                        all_bursts += 1;
                    }
                    // Every copy slot or device buffer is taken: wait for the oldest.
                    Err(dataplane::stage::StageError::NoBuffers(_)) if stage.in_flight() > 0 => {
                        break;
                    }
                    Err(e) => return Err(fail(e)),
                }
            }
            let w = Instant::now();
            let done = stage.wait_oldest();
            waiting += w.elapsed();
            if let Some(done) = done {
                let done = done.map_err(fail)?;
                (delivered, as_runs) = (delivered + 1, as_runs + u64::from(done.run().is_some()));
                bytes += done.bytes();
            }
        }
        while let Some(done) = stage.wait_oldest() {
            let done = done.map_err(fail)?;
            (delivered, as_runs) = (delivered + 1, as_runs + u64::from(done.run().is_some()));
            bytes += done.bytes();
        }
        results.push(bytes as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
        let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(bursts.max(1));
        submit_us.push(per(submitting));
        wait_us.push(per(waiting));
        source_us.push(per(sourcing));
    }
    Ok(StageCase {
        gbps: median(results),
        submit_us: median(submit_us),
        wait_us: median(wait_us),
        source_us: median(source_us),
        bursts_per_copy: all_bursts as f64 / stage.copies_issued().max(1) as f64,
        delivered_as_runs: as_runs as f64 / delivered.max(1) as f64,
    })
}

/// As [`stage_case`] with the work on three threads, as a queue with `stage_core` runs:
/// one makes source bursts (the engine's worker), the pipeline's stage task moves them
/// (the stage worker), one takes and drops the results (the application). Payload Gb/s
/// as the application receives it (median round), and bursts per GPU copy. With
/// `helpers`, that many copy helpers share the stage's CPU copies, on the last usable
/// cores.
fn stage_case_threads(
    payload: usize,
    kind: MemoryKind,
    mode: StageMode,
    runs: bool,
    helpers: usize,
    round: Duration,
    rounds: usize,
) -> Result<StageCase, GpuBenchError> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    // The bursts waiting in the two rings need buffers too.
    let (regions, mut stage) = stage_regions(payload, kind, mode, BURST * 2 * RING_BURSTS)?;
    if helpers > 0 {
        let usable = dataplane::affinity::usable_cores();
        let cores = &usable[usable.len().saturating_sub(helpers)..];
        stage = stage.with_copy_helpers(
            dataplane::copy_helpers::CopyHelpers::spawn(cores, "bench")
                .map_err(|e| GpuBenchError::Stage(format!("copy helpers could not start: {e}")))?,
        );
    }
    let src = 0;
    let (mut to_stage, from_source) = rtrb::RingBuffer::new(RING_BURSTS);
    let (to_app, mut from_stage) = rtrb::RingBuffer::new(RING_BURSTS);
    let counters = Arc::new(dataplane::stats::QueueCounters::default());
    let mut task = dataplane::worker::StageTask::new(
        from_source,
        to_app,
        stage,
        dataplane::engine::Overflow::Backpressure,
        counters.clone(),
        (0, 0),
    );
    let stop = AtomicBool::new(false);
    let (delivered, delivered_bursts, as_runs) =
        (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let mut results = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut idle_marked = false;
            while !stop.load(Ordering::Relaxed) {
                let Some(b) = source_burst(&regions, src, payload, runs) else {
                    // As an RX worker whose engine has no buffers to receive into: its
                    // port idles, and it tells the stage task so (an empty burst) once.
                    if !idle_marked {
                        idle_marked = to_stage
                            .push(Burst::empty(regions.clone(), 0, 0, 0))
                            .is_ok();
                    }
                    std::hint::spin_loop();
                    continue;
                };
                idle_marked = false;
                let mut pending = b;
                loop {
                    match to_stage.push(pending) {
                        Ok(()) => break,
                        Err(rtrb::PushError::Full(b)) if !stop.load(Ordering::Relaxed) => {
                            pending = b;
                            std::hint::spin_loop();
                        }
                        Err(_) => return,
                    }
                }
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                match from_stage.pop() {
                    Ok(b) => {
                        delivered.fetch_add(b.bytes(), Ordering::Relaxed);
                        if !b.is_empty() {
                            delivered_bursts.fetch_add(1, Ordering::Relaxed);
                            as_runs.fetch_add(u64::from(b.run().is_some()), Ordering::Relaxed);
                        }
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
        });
        // The other threads stop however this one leaves (a panic too), or the scope
        // would wait for them forever.
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        for _ in 0..rounds {
            let (t, before) = (Instant::now(), delivered.load(Ordering::Relaxed));
            while t.elapsed() < round {
                task.poll();
            }
            let bytes = delivered.load(Ordering::Relaxed) - before;
            results.push(bytes as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e9);
        }
    });
    // The stage counts what it could not move as GPU copy drops: none may happen here.
    let (packets, _, drops) = counters.snapshot();
    let lost = drops.gpu_copy;
    if lost > 0 {
        return Err(GpuBenchError::Stage(format!(
            "{lost} packets dropped by the stage"
        )));
    }
    let bursts = packets / BURST as u64;
    Ok(StageCase {
        gbps: median(results),
        bursts_per_copy: bursts as f64 / task.copies_issued().max(1) as f64,
        delivered_as_runs: as_runs.load(Ordering::Relaxed) as f64
            / delivered_bursts.load(Ordering::Relaxed).max(1) as f64,
        ..StageCase::default()
    })
}

/// Bursts each ring between the threads of [`stage_case_threads`] holds (as a queue's).
const RING_BURSTS: usize = 64;

/// Packets per burst in the staged-ingest cases.
const BURST: usize = 256;

/// Buffers of each region [`stage_regions`] makes (see there).
fn stage_bufs(payload: usize, extra: usize) -> usize {
    (dataplane::stage::GROUP_BYTES / payload).max(BURST) * (gpudirect::kernels::TABLE_SLOTS + 2)
        + extra
}

/// A source region of `kind` (region 0) and a device region (1) of `payload`-byte
/// buffers, with room for every table slot's copy at its largest (the stage coalesces
/// bursts into copies of up to `GROUP_BYTES`), one more being filled and `extra` buffers,
/// and a stage moving bursts of [`BURST`] packets from the first into the second.
fn stage_regions(
    payload: usize,
    kind: MemoryKind,
    mode: StageMode,
    extra: usize,
) -> Result<(Arc<RegionSet>, RxStage), GpuBenchError> {
    let bufs = stage_bufs(payload, extra);
    let regions = Arc::new(RegionSet::allocate(&[
        MemoryRegionConfig::new("src", kind, bufs, payload),
        MemoryRegionConfig::new("dst", MemoryKind::Device, bufs, payload),
    ])?);
    let plan = dataplane::plan::StagePlan {
        split_header_bytes: None,
        gpu: Some(regions.get(1).affinity()),
        mode,
    };
    let stage = RxStage::new(&regions, &[1], BURST, &plan)?;
    Ok((regions, stage))
}

/// The reorder kernel on one batch in device memory against a device-to-device copy of
/// the same payload bytes.
fn reorder_case(
    gpu: &mut gpudirect::Gpu,
    case: &str,
    spec: &ReorderSpec,
    payload: u32,
    rounds: usize,
) -> Result<ReorderResult, GpuBenchError> {
    let ppb = spec.packets_per_batch();
    let stride = (payload as usize + 64).next_multiple_of(256);
    let input = gpudirect::DeviceBuffer::alloc(0, stride * ppb as usize)?;
    let output = gpudirect::DeviceBuffer::alloc(0, spec.batch_bytes())?;
    let copy_dst = gpudirect::DeviceBuffer::alloc(0, payload as usize * ppb as usize)?;
    // The copy that moves what the kernel moves: it reads `bytes` and writes the output.
    let equal_bytes = (payload as usize * ppb as usize + spec.batch_bytes()) / 2;
    let equal_src = gpudirect::DeviceBuffer::alloc(0, equal_bytes)?;
    let equal_dst = gpudirect::DeviceBuffer::alloc(0, equal_bytes)?;
    // Packets in reverse order: sequence number first, then payload bytes.
    let mut host = vec![0u8; stride * ppb as usize];
    for k in 0..ppb as usize {
        let seq = (ppb as usize - 1 - k) as u32;
        host[k * stride..k * stride + 4].copy_from_slice(&seq.to_be_bytes());
        for (j, b) in host[k * stride + 64..k * stride + 64 + payload as usize]
            .iter_mut()
            .enumerate()
        {
            *b = (j ^ k) as u8;
        }
    }
    input.write(0, &host)?;
    let packets: Vec<(u64, u32)> = (0..ppb as u64)
        .map(|k| (input.device_ptr() + k * stride as u64, payload + 64))
        .collect();
    let bytes = payload as f64 * ppb as f64;
    let (mut r, mut c, mut equal) = (Vec::new(), Vec::new(), Vec::new());
    let (mut submit_us, mut wait_us) = (Vec::new(), Vec::new());
    const REPS: usize = 64;
    let slots = gpudirect::kernels::TABLE_SLOTS;
    for _ in 0..rounds {
        // Batches back to back, as a stream of them arrives; one wait at the end.
        let t = Instant::now();
        let (mut submitting, mut waiting) = (Duration::ZERO, Duration::ZERO);
        for k in 0..REPS {
            let slot = k % slots;
            if k >= slots {
                let w = Instant::now();
                gpu.wait_reorder(slot)?;
                waiting += w.elapsed();
            }
            let s = Instant::now();
            // SAFETY: packets and output are device buffers alive until the sync below;
            // the slot's previous batch completed (waited for above).
            unsafe { gpu.reorder_in(slot, spec, &packets, output.device_ptr()) }?;
            submitting += s.elapsed();
        }
        gpu.sync()?;
        let reorder_s = t.elapsed().as_secs_f64();
        r.push(bytes * REPS as f64 / reorder_s / 1e9);
        submit_us.push(submitting.as_secs_f64() * 1e6 / REPS as f64);
        wait_us.push(waiting.as_secs_f64() * 1e6 / REPS as f64);
        let t = Instant::now();
        for _ in 0..REPS {
            // SAFETY: both ranges lie in device buffers of at least `bytes` bytes.
            unsafe { gpu.copy_device(copy_dst.device_ptr(), input.device_ptr(), bytes as usize) }?;
        }
        gpu.sync()?;
        c.push(bytes * REPS as f64 / t.elapsed().as_secs_f64() / 1e9);
        let t = Instant::now();
        for _ in 0..REPS {
            // SAFETY: both ranges are whole device buffers of `equal_bytes` bytes.
            unsafe {
                gpu.copy_device(equal_dst.device_ptr(), equal_src.device_ptr(), equal_bytes)
            }?;
        }
        gpu.sync()?;
        equal.push(t.elapsed().as_secs_f64() / reorder_s);
    }
    // The output of the last batch is checked against the CPU, so a fast wrong kernel
    // cannot pass.
    let mut got = vec![0u8; spec.batch_bytes()];
    output.read(0, &mut got)?;
    let refs: Vec<&[u8]> = (0..ppb as usize)
        .map(|k| &host[k * stride..k * stride + payload as usize + 64])
        .collect();
    let mut want = vec![0u8; spec.batch_bytes()];
    gpudirect::reorder::reorder_cpu(spec, &refs, &mut want);
    if got != want {
        return Err(GpuBenchError::Mismatch {
            case: case.to_string(),
        });
    }
    let (reorder_gbyte_s, d2d_gbyte_s) = (median(r), median(c));
    Ok(ReorderResult {
        case: case.into(),
        packets: ppb,
        payload,
        reorder_gbyte_s,
        d2d_gbyte_s,
        ratio: reorder_gbyte_s / d2d_gbyte_s,
        ratio_to_equal_traffic_copy: median(equal),
        traffic_bound: {
            let (input, output) = (
                f64::from(spec.in_slot_bytes),
                f64::from(spec.out_slot_bytes()),
            );
            (2.0 * input / (input + output)).min(1.0)
        },
        submit_us_per_batch: median(submit_us),
        wait_us_per_batch: median(wait_us),
    })
}

impl GpuReport {
    /// A human-readable summary.
    pub fn human(&self) -> String {
        let mut s = format!(
            "{}: pinned host-to-device copy {:.1} Gb/s\n",
            self.gpu, self.h2d_pinned_gbps
        );
        let lines = self
            .copies
            .iter()
            .map(CopyCeiling::line)
            .chain(self.gathers.iter().map(GatherBound::line))
            .chain(self.stage.iter().map(StageResult::line))
            .chain(self.reorder.iter().map(ReorderResult::line));
        for line in lines {
            s.push_str(&line);
            s.push('\n');
        }
        s
    }
}

impl CopyCeiling {
    /// Its line of [`GpuReport::human`].
    pub fn line(&self) -> String {
        format!(
            "  copies of {:>4} KiB back to back on {} stream(s): {:>7.1} Gb/s = {:.2} x pinned copy; {:.2} us per copy call, {:.2} us per mark",
            self.bytes >> 10,
            self.streams,
            self.gbps,
            self.ratio_to_h2d,
            self.copy_call_us,
            self.mark_call_us
        )
    }
}

impl GatherBound {
    /// Its line of [`GpuReport::human`].
    pub fn line(&self) -> String {
        format!(
            "  one core gathering {:>5} B packets from pageable into pinned memory: {:>7.1} Gb/s = {:.2} x pinned copy (the bound of a pageable stage without copy helpers); {:.1} Gb/s with an upload per burst",
            self.payload, self.gbps, self.ratio_to_h2d, self.with_upload_gbps
        )
    }
}

impl StageResult {
    /// Its line of [`GpuReport::human`].
    pub fn line(&self) -> String {
        let per_burst = match (
            self.submit_us_per_burst,
            self.wait_us_per_burst,
            self.source_us_per_burst,
        ) {
            (Some(submit), Some(wait), Some(source)) => format!(
                "per 256-packet burst {submit:.1} us submitting, {wait:.1} us waiting, {source:.1} us making the source burst"
            ),
            _ => "source, stage and consumer on their own threads".to_owned(),
        };
        let helpers = if self.copy_helpers > 0 {
            format!(", {} copy helpers", self.copy_helpers)
        } else {
            String::new()
        };
        let of_gather = self
            .ratio_to_gather
            .map(|r| format!(" = {r:.2} x one core's gather"))
            .unwrap_or_default();
        let runs = if self.runs {
            format!(
                ", runs: {:.0} % delivered as runs",
                self.delivered_as_runs * 100.0
            )
        } else {
            String::new()
        };
        format!(
            "  staged ingest {:>5} B from {:<11} ({:<6}, {} thread{}{helpers}): {:>7.1} Gb/s = {:.2} x pinned copy{of_gather}; {per_burst}; {:.1} bursts per copy{runs}",
            self.payload,
            self.source,
            self.mode,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.gbps,
            self.ratio_to_h2d,
            self.bursts_per_copy
        )
    }
}

impl ReorderResult {
    /// Its line of [`GpuReport::human`].
    pub fn line(&self) -> String {
        format!(
            "  {}: {:.1} GB/s, device copy {:.1} GB/s, ratio {:.2} (traffic allows {:.2}; {:.2} of a copy moving as many bytes); per batch {:.1} us submitting, {:.1} us waiting",
            self.case,
            self.reorder_gbyte_s,
            self.d2d_gbyte_s,
            self.ratio,
            self.traffic_bound,
            self.ratio_to_equal_traffic_copy,
            self.submit_us_per_batch,
            self.wait_us_per_batch
        )
    }
}

/// Writes `data` into segment 0 of packet `i` of `burst`, which lies in GPU memory, and
/// sets its length.
pub(crate) fn write_packet(
    burst: &mut Burst,
    i: usize,
    data: &[u8],
) -> Result<(), gpudirect::GpuError> {
    let region = burst.regions().get(burst.packets()[i].segments()[0].region);
    if data.len() > region.buf_size() {
        return Err(gpudirect::GpuError::Unsupported(format!(
            "{} bytes do not fit a {}-byte buffer",
            data.len(),
            region.buf_size()
        )));
    }
    let ordinal = region.affinity();
    // SAFETY: the burst owns the buffer (taken from its pool), which holds buf_size bytes
    // of device memory.
    unsafe { gpudirect::write_device(ordinal, burst.segment_addr(i, 0), data) }?;
    burst.set_len(i, 0, data.len());
    Ok(())
}
