//! Checking: the checker threads read every received packet (host bytes, GPU digests,
//! reordered batches) and count what was corrupt, duplicated, missing or out of order.

use super::*;

/// Hands every frame of a burst to the checker, whatever its layout: one host segment as
/// is; split host segments joined; frames with a segment in GPU memory through the GPU's
/// `frame_digest` kernel, which sums the payload where it lies (so the UDP checksum of every
/// byte is verified on the GPU) and copies out headers and trailer.
#[derive(Default)]
pub(super) struct FrameReader {
    pub(super) joined: Vec<u8>,
    /// Frames with a receive time of their own, and frames timed at the poll.
    pub(super) stamped: u64,
    pub(super) polled: u64,
    #[cfg(feature = "cuda")]
    pub(super) digest: dataplane::stage::DeviceDigest,
    /// Bursts wholly in GPU memory waiting to be digested together, with their receive
    /// times: one launch per [`GPU_CHECK_PACKETS`] packets, not per burst.
    #[cfg(feature = "cuda")]
    pub(super) pending: Vec<dataplane::Burst>,
    #[cfg(feature = "cuda")]
    pub(super) pending_polled: Vec<u64>,
    #[cfg(feature = "cuda")]
    pub(super) pending_packets: usize,
    /// The group being digested (its digest slot and receive times), checked once the
    /// next group is queued or the queue goes idle.
    #[cfg(feature = "cuda")]
    pub(super) digesting: Option<(usize, Vec<u64>)>,
    #[cfg(feature = "cuda")]
    pub(super) next_slot: usize,
}

/// Checks the frames of `bursts` (received at `polled`) against their GPU digests (word
/// sums, then heads and tails); a failed digest counts them all as corrupt. Adds the
/// frames to `frames_polled`.
#[cfg(feature = "cuda")]
pub(super) fn check_digests(
    frames_polled: &mut u64,
    bursts: &[dataplane::Burst],
    polled: &[u64],
    digests: dataplane::stage::Digests<'_>,
    checker: &mut Checker,
) {
    use crate::traffic::{L2_L4_HEADER, TRAILER};
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
pub(super) const GPU_CHECK_PACKETS: usize = 2048;

impl FrameReader {
    /// Checks `burst`: frames in host memory at once; bursts wholly in GPU memory are held
    /// and digested together, a group at a time, each group checked while the GPU digests
    /// the next (the caller calls [`FrameReader::flush`] when the queue is idle and at the
    /// end, which checks everything held).
    pub(super) fn take(&mut self, burst: dataplane::Burst, checker: &mut Checker, polled: u64) {
        #[cfg(feature = "cuda")]
        {
            let regions = burst.regions();
            let whole_gpu = match burst.run() {
                Some(run) => !regions.get(run.region()).host_accessible(),
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
    pub(super) fn advance(&mut self, checker: &mut Checker) {
        use crate::traffic::{L2_L4_HEADER, PAYLOAD_SUM_FROM, TRAILER};
        let previous = self.digesting.take();
        if !self.pending.is_empty() {
            let slot = self.next_slot;
            self.next_slot = (slot + 1) % dataplane::stage::QUEUED_DIGESTS;
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
    pub(super) fn flush(&mut self, checker: &mut Checker) {
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
    pub(super) fn check(&mut self, burst: &dataplane::Burst, checker: &mut Checker, polled: u64) {
        if let Some(run) = burst.run()
            && burst.regions().get(run.region()).host_accessible()
        {
            // One segment each and no receive times: no descriptor to read.
            checker.receive_time = polled;
            self.polled += burst.len() as u64;
            for i in 0..PREFETCH_AHEAD {
                prefetch_frame(burst, i, None);
            }
            let frames = burst.frames();
            for i in 0..burst.len() {
                prefetch_frame(burst, i + PREFETCH_AHEAD, None);
                checker.check(frames.get(i).expect("host memory"));
            }
            return;
        }
        let Some(first) = burst.packets().first() else {
            return;
        };
        let (stamped, polled_frames) = (&mut self.stamped, &mut self.polled);
        let mut received = |p: &dataplane::Packet| match p.timestamp_ns {
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
            let frames = burst.frames();
            for i in 0..burst.len() {
                prefetch_frame(burst, i + PREFETCH_AHEAD, None);
                checker.receive_time = received(&burst.packets()[i]);
                let segs = burst.packets()[i].segments().len();
                if segs == 1 {
                    checker.check(frames.get(i).expect("host memory"));
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
    pub(super) fn check_on_gpu(
        &mut self,
        burst: &dataplane::Burst,
        checker: &mut Checker,
    ) -> Result<(), gpudirect::GpuError> {
        use crate::traffic::{L2_L4_HEADER, PAYLOAD_SUM_FROM, TRAILER, payload_sum, shift_sum};
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
pub(super) struct ReorderChecker {
    /// Per reorder name: the spec, and the GPU of the output region when it is device memory.
    pub(super) plans: BTreeMap<String, (gpudirect::reorder::ReorderSpec, Option<u32>)>,
    /// Per converting reorder whose conversion can be undone: its slot check.
    pub(super) converted: BTreeMap<String, crate::quantize::ConvertedCheck>,
    pub(super) report: ReorderReport,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) scratch: Vec<u8>,
}

impl ReorderChecker {
    pub(super) fn new(config: &Config) -> Self {
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
                        (out.kind == dataplane::config::MemoryKind::Device).then_some(out.affinity);
                    let spec = r.spec(src.buf_size);
                    plans.insert(r.name.clone(), (spec, gpu));
                    let models = config
                        .bench
                        .tx
                        .iter()
                        .enumerate()
                        .map(|(i, b)| {
                            crate::quantize::StreamModel::of(&generator_frames(config, b, i))
                        })
                        .collect();
                    let chunk = config
                        .bench
                        .reorder_quantize
                        .map_or(16, |q| q.chunk_elements);
                    if let Some(c) = crate::quantize::ConvertedCheck::new(spec, models, chunk) {
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

    pub(super) fn check(
        &mut self,
        burst: &dataplane::Burst,
        info: &dataplane::reorder::ReorderInfo,
    ) {
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
                    crate::quantize::SlotVerdict::Empty => {}
                    crate::quantize::SlotVerdict::Good { chunks: c } => {
                        filled += 1;
                        chunks += c;
                    }
                    crate::quantize::SlotVerdict::Bad(why) => {
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
            self.count_batch(wrong, filled, info, ppb, chunks);
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
        self.count_batch(wrong, filled, info, ppb, 0);
    }

    /// A batch is good when no slot held a wrong packet and every slot that should be
    /// filled was: all of them, or the packets that arrived when it timed out.
    fn count_batch(
        &mut self,
        wrong: bool,
        filled: u32,
        info: &dataplane::descriptor::ReorderInfo,
        ppb: u32,
        chunks: u64,
    ) {
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
    }
}

pub(super) struct CheckerResult {
    pub(super) stamped: u64,
    pub(super) polled: u64,
    pub(super) busy_ns: u64,
    pub(super) packets: u64,
    pub(super) bytes: u64,
    pub(super) checker: Checker,
    pub(super) marks: FlowMarks,
    pub(super) reorder: Option<ReorderReport>,
    /// Worker failures seen through the queues.
    pub(super) failures: Vec<String>,
    /// The queues' capture sinks, closed (`capture` in the configuration).
    pub(super) captures: Vec<CaptureReport>,
}

/// One checker: counts and checks the bursts of its `bench_rx` entry's queues, on a
/// thread of its own or, with `--inline`, in the worker's handler.
pub(super) struct BurstCheck {
    checker: Checker,
    clock: dataplane::clock::WallClock,
    frames: FrameReader,
    reorder_check: ReorderChecker,
    marks: FlowMarks,
    packets: u64,
    bytes: u64,
    busy_ns: u64,
    pub(super) failures: Vec<String>,
    max_packet: Option<usize>,
    rx_work: RxWork,
    timed: bool,
}

impl BurstCheck {
    /// The checker of `bench_rx` entry `b`.
    pub(super) fn new(
        config: &Config,
        opts: &RawOptions,
        b: &dataplane::config::BenchRxConfig,
    ) -> Self {
        let mut checker = Checker::new(opts.verify_payload);
        checker.trailer_only = opts.rx_work == RxWork::Trailer;
        Self {
            checker,
            clock: dataplane::clock::WallClock::new(),
            frames: FrameReader::default(),
            reorder_check: ReorderChecker::new(config),
            marks: FlowMarks::default(),
            packets: 0,
            bytes: 0,
            busy_ns: 0,
            failures: Vec::new(),
            max_packet: b.max_packet_size.map(|m| m as usize),
            rx_work: opts.rx_work,
            timed: opts.time_stages,
        }
    }

    /// Packets received so far, duplicates not counted.
    pub(super) fn unique_packets(&self) -> u64 {
        self.packets.saturating_sub(self.checker.counts.duplicates)
    }

    /// Counts and checks one received burst; `--stages` counts the time from `polled`
    /// (when the poll that gave it began) or from now.
    pub(super) fn take(&mut self, burst: dataplane::Burst, polled: Option<Instant>) {
        let started = self.timed.then(|| polled.unwrap_or_else(Instant::now));
        if let Some(info) = burst.reorder_info() {
            self.reorder_check.check(&burst, info);
            self.packets += info.source_packets as u64;
            self.bytes += info.payload_bytes;
        } else {
            if let Some(run) = burst.run() {
                // One length and flow 0 for all: no descriptor to read.
                let (n, len) = (burst.len() as u64, run.buffer_len() as usize);
                self.marks.count(0, n);
                self.bytes += n * len as u64;
                self.check_length(len, n);
            } else {
                for p in burst.packets() {
                    self.marks.count(p.flow_id, 1);
                    self.bytes += p.len() as u64;
                    self.check_length(p.len(), 1);
                }
            }
            self.packets += burst.len() as u64;
            if self.rx_work != RxWork::Count {
                self.frames
                    .take(burst, &mut self.checker, self.clock.now_ns());
            }
        }
        if let Some(t) = started {
            self.busy_ns += t.elapsed().as_nanos() as u64;
        }
    }

    /// `n` packets of `len` bytes: corrupt when longer than `max_packet_size`.
    fn check_length(&mut self, len: usize, n: u64) {
        if let Some(max) = self.max_packet
            && len > max
        {
            self.checker.counts.corrupt += n;
            self.checker.first_problem.get_or_insert_with(|| {
                format!("a {len}-byte packet, longer than bench_rx max_packet_size {max}")
            });
        }
    }

    /// Nothing new arrived: checks the GPU frames held so far.
    pub(super) fn idle(&mut self) {
        self.frames.flush(&mut self.checker);
    }

    /// The result, with the captures and reorders of `queues` (the checker's queues, when
    /// it holds them; a handler's are the worker's).
    pub(super) fn finish(mut self, queues: &mut [dataplane::plane::RxQueue]) -> CheckerResult {
        self.frames.flush(&mut self.checker);
        let mut captures = Vec::new();
        for q in queues.iter_mut() {
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
        for q in queues.iter() {
            if let Some(c) = q.reorder_counts() {
                let r = reorder.get_or_insert_with(Default::default);
                r.batches += c.batches;
                r.timeout_batches += c.timeout_batches;
                r.aggregated_packets += c.aggregated_packets;
                r.passthrough_packets += c.passthrough_packets;
            }
            if let Some(e) = q.reorder_error() {
                self.checker
                    .first_problem
                    .get_or_insert_with(|| format!("reorder: {e}"));
                self.checker.counts.corrupt += 1;
            }
        }
        if let Some(r) = &mut reorder {
            let report = &mut self.reorder_check.report;
            r.verified_batches = report.verified_batches;
            r.bad_batches = report.bad_batches;
            r.unchecked_batches = report.unchecked_batches;
            r.verified_chunks = report.verified_chunks;
            r.first_problem = report.first_problem.take();
        }
        CheckerResult {
            stamped: self.frames.stamped,
            polled: self.frames.polled,
            busy_ns: self.busy_ns,
            packets: self.packets,
            bytes: self.bytes,
            checker: self.checker,
            marks: self.marks,
            reorder,
            failures: self.failures,
            captures,
        }
    }
}

pub(super) struct CheckerThread {
    pub(super) thread: JoinHandle<CheckerResult>,
}

/// Received packets per flow id, counted without hashing for the usual small ids.
#[derive(Default)]
pub(super) struct FlowMarks {
    pub(super) small: Vec<u64>,
    pub(super) large: BTreeMap<u32, u64>,
}

impl FlowMarks {
    const SMALL: u32 = 1024;

    /// Counts `n` packets of flow `id`.
    #[inline]
    pub(super) fn count(&mut self, id: u32, n: u64) {
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

    pub(super) fn merge_into(self, out: &mut BTreeMap<u32, u64>) {
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

/// Starts a checker thread for every RX queue a `bench_rx` entry reads; each counts the
/// packets it verifies into `received` and stops when `stop` is set.
pub(super) fn spawn_checkers(
    config: &Config,
    opts: &RawOptions,
    plane: &mut DataPlane,
    stop_rx: &Arc<AtomicBool>,
    received: &Arc<AtomicU64>,
) -> Result<Vec<CheckerThread>, BenchError> {
    let timed = opts.time_stages;
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
        let mut check = BurstCheck::new(config, opts, b);
        let (stop, received, core) = (stop_rx.clone(), received.clone(), b.cpu_core);
        let thread = std::thread::Builder::new()
            .name("bench-rx".into())
            .spawn(move || {
                if let Some(c) = core {
                    let _ = affinity::pin_current_thread(c);
                }
                let mut idle = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let mut got = false;
                    for q in &mut queues {
                        let polled = timed.then(Instant::now);
                        match q.poll() {
                            Ok(Some(burst)) => {
                                got = true;
                                // Checkers share `received`: each adds what it saw new.
                                let before = check.unique_packets();
                                check.take(burst, polled);
                                let new = check.unique_packets().saturating_sub(before);
                                received.fetch_add(new, Ordering::Relaxed);
                            }
                            Ok(None) => {}
                            Err(e) => note_failure(&mut check.failures, e.to_string()),
                        }
                    }
                    if !got {
                        // Nothing new: check the GPU frames held so far now.
                        check.idle();
                    }
                    idle = if got { 0 } else { idle + 1 };
                    if idle > 1024 {
                        idle = 0;
                        std::thread::yield_now();
                    }
                }
                check.finish(&mut queues)
            })
            .map_err(StartError::Spawn)?;
        checkers.push(CheckerThread { thread });
    }
    Ok(checkers)
}
