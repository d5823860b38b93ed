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

mod reorder;
mod stage;
use reorder::*;
use stage::*;

/// One staged-ingest case.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
    let timing = Timing {
        round,
        rounds,
        h2d_pinned_gbps,
    };

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
        stage.extend(stage_cases(payload, g.gbps, &timing, progress)?);
        gathers.push(g);
    }

    let reorder = if parts.reorder {
        reorder_cases(&mut gpu, rounds, progress)?
    } else {
        Vec::new()
    };
    Ok(GpuReport {
        gpu: gpu_name,
        h2d_pinned_gbps,
        copies,
        gathers,
        stage,
        reorder,
    })
}

/// How the cases are timed, and the pinned copy they are compared with.
struct Timing {
    round: Duration,
    rounds: usize,
    h2d_pinned_gbps: f64,
}

/// The stage cases of one payload size: each source kind through the kernel and copy
/// modes, pinned sources also as runs, pageable ones also with copy helpers.
/// `gather_gbps`: the CPU gather's bound for this payload.
fn stage_cases(
    payload: usize,
    gather_gbps: f64,
    timing: &Timing,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<StageResult>, GpuBenchError> {
    let Timing {
        round,
        rounds,
        h2d_pinned_gbps,
    } = *timing;
    let of_gather = |kind, gbps: f64| (kind == MemoryKind::Host).then(|| gbps / gather_gbps);
    let mut stage = Vec::new();
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
            let c =
                stage_case_threads(payload, kind, StageMode::Copy, runs, helpers, round, rounds)?;
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
    Ok(stage)
}

/// The reorder cases: 1,024 packets a batch by a 32-bit sequence number, bytes as they
/// are and each conversion.
fn reorder_cases(
    gpu: &mut gpudirect::Gpu,
    rounds: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<ReorderResult>, GpuBenchError> {
    let convert = |input, output| {
        Some(Conversion {
            input,
            output,
            network_order: true,
        })
    };
    let cases = [
        ("reorder 1024 x 8 KiB, bytes", 8192u32, None),
        ("reorder 1024 x 1 KiB, bytes", 1024, None),
        (
            "reorder 1024 x 8 KiB, int16 -> fp32",
            8192,
            convert(InputType::Int16, OutputType::Fp32),
        ),
        (
            "reorder 1024 x 8 KiB, int16 -> fp16",
            8192,
            convert(InputType::Int16, OutputType::Fp16),
        ),
        (
            "reorder 1024 x 8 KiB, int8 -> bf16",
            8192,
            convert(InputType::Int8, OutputType::Bf16),
        ),
        (
            "reorder 1024 x 8 KiB, int4 -> fp32",
            8192,
            convert(InputType::Int4, OutputType::Fp32),
        ),
    ];
    let mut reorder = Vec::new();
    for (case, payload, conversion) in cases {
        let spec = ReorderSpec {
            method: Method::SeqPacketsPerBatch {
                sequence: BitField {
                    bit_offset: 0,
                    bit_width: 32,
                },
                packets_per_batch: 1024,
            },
            payload_byte_offset: 64,
            in_slot_bytes: payload,
            conversion,
        };
        let r = reorder_case(gpu, case, &spec, payload, rounds)?;
        progress(&r.line());
        reorder.push(r);
    }
    Ok(reorder)
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
