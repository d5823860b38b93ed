//! The staged-ingest cases of `bench gpu`: bursts in host memory moved into a `device`
//! region by the RX stage, with the bounds they are compared to (one core's gather into
//! pinned memory, the pinned host-to-device copy of one large buffer).

use super::*;
use dataplane::memory::{PortIndex, QueueId, RegionId};

/// Gb/s of one core copying bursts of [`BURST`] `payload`-byte packets, one packet at a
/// time, from a pageable region sized as [`stage_case`]'s source into a pinned buffer
/// (median round): the gather alone, from the same kind of memory; with `upload`, each
/// burst then copied to the GPU and its slot marked, waiting for the slot's previous copy
/// before gathering into it again.
pub(super) fn gather_bound(
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
    while let Some(mut b) = Burst::allocate(
        regions.clone(),
        PortIndex(0),
        QueueId(0),
        &[RegionId(0)],
        BURST,
    ) {
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
pub(super) fn copy_ceiling(
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
pub(super) struct StageCase {
    pub(super) gbps: f64,
    pub(super) submit_us: f64,
    pub(super) wait_us: f64,
    pub(super) source_us: f64,
    pub(super) bursts_per_copy: f64,
    pub(super) delivered_as_runs: f64,
}

/// A source burst of [`BURST`] `payload`-byte packets in `src`, as an engine would hand it
/// over: a run when `runs` and the pool's next buffers are consecutive, else descriptors.
pub(super) fn source_burst(
    regions: &Arc<RegionSet>,
    src: u16,
    payload: usize,
    runs: bool,
) -> Option<Burst> {
    if runs
        && let Some(b) = Burst::allocate_run(
            regions.clone(),
            PortIndex(0),
            QueueId(0),
            RegionId(src),
            BURST,
            payload,
        )
    {
        return Some(b);
    }
    let mut b = Burst::allocate(
        regions.clone(),
        PortIndex(0),
        QueueId(0),
        &[RegionId(src)],
        BURST,
    )?;
    for i in 0..BURST {
        b.set_len(i, 0, payload);
    }
    Some(b)
}

pub(super) fn stage_case(
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
pub(super) fn stage_case_threads(
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
        (PortIndex(0), QueueId(0)),
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
                            .push(Burst::empty(regions.clone(), PortIndex(0), QueueId(0), 0))
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
pub(super) const RING_BURSTS: usize = 64;

/// Packets per burst in the staged-ingest cases.
pub(super) const BURST: usize = 256;

/// Buffers of each region [`stage_regions`] makes (see there).
pub(super) fn stage_bufs(payload: usize, extra: usize) -> usize {
    (dataplane::stage::GROUP_BYTES / payload).max(BURST) * (gpudirect::kernels::TABLE_SLOTS + 2)
        + extra
}

/// A source region of `kind` (region 0) and a device region (1) of `payload`-byte
/// buffers, with room for every table slot's copy at its largest (the stage coalesces
/// bursts into copies of up to `GROUP_BYTES`), one more being filled and `extra` buffers,
/// and a stage moving bursts of [`BURST`] packets from the first into the second.
pub(super) fn stage_regions(
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
        gpu: Some(regions.get(RegionId(1)).affinity()),
        mode,
    };
    let stage = RxStage::new(&regions, &[RegionId(1)], BURST, &plan)?;
    Ok((regions, stage))
}
