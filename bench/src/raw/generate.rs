//! Traffic generation: the frames each `bench_tx` stream writes (host or GPU memory), the
//! generator threads, and the rate a paced run asks of the TX queues.

use super::*;
use dataplane::plane::TxQueue;

/// The frames the generator of `bench_tx` entry `b` (stream `stream`) sends: with
/// `bench_reorder_quantize`, they carry the sequence (and batch) fields of the reorder it
/// verifies, so that reorder sorts them.
pub(super) fn generator_frames(
    config: &Config,
    b: &dataplane::config::BenchTxConfig,
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
            .map(|r| crate::traffic::ReorderFields::of(&r.spec(0)))
    });
    match fields {
        Some(f) => builder.with_reorder_fields(f),
        None => builder,
    }
}

/// Writes a generator's frames into GPU memory with the `write_frames` kernel: the CPU
/// makes only each frame's changing fields.
#[cfg(feature = "cuda")]
pub(super) struct GpuFrames {
    pub(super) gpu: gpudirect::Gpu,
    pub(super) template: gpudirect::frames::FrameTemplate,
    pub(super) frames: Vec<(u64, gpudirect::frames::FrameFields)>,
}

#[cfg(feature = "cuda")]
impl GpuFrames {
    pub(super) fn new(ordinal: u32, builder: &FrameBuilder) -> Result<Self, gpudirect::GpuError> {
        Ok(Self {
            gpu: gpudirect::Gpu::new(ordinal)?,
            template: builder.template(),
            frames: Vec::new(),
        })
    }

    /// Writes the next frames into every packet of `burst` and waits until they are there.
    pub(super) fn write(
        &mut self,
        builder: &mut FrameBuilder,
        burst: &mut dataplane::Burst,
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
pub(super) struct GpuFrames;

#[cfg(not(feature = "cuda"))]
impl GpuFrames {
    pub(super) fn new(_: u32, _: &FrameBuilder) -> Result<Self, gpudirect::GpuError> {
        Err(no_cuda())
    }

    pub(super) fn write(
        &mut self,
        _: &mut FrameBuilder,
        _: &mut dataplane::Burst,
    ) -> Result<(), gpudirect::GpuError> {
        Err(no_cuda())
    }
}

/// What a GPU step says in a build without CUDA.
#[cfg(not(feature = "cuda"))]
pub(crate) fn no_cuda() -> gpudirect::GpuError {
    gpudirect::GpuError::Unsupported("this build has no CUDA support".into())
}

pub(super) struct Generator {
    pub(super) thread: JoinHandle<GeneratorResult>,
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
pub(super) fn paced_gbps(config: &Config) -> Option<f64> {
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

/// What one generator did: packets and bytes handed to its TX queue, why it stopped early
/// (a failure), and ns spent making and sending bursts (`--stages`).
pub(super) type GeneratorResult = (u64, u64, Option<String>, u64);

/// One generator: makes bursts of its stream's frames and hands them to its TX queue, on
/// a thread of its own or, with `--inline`, in the worker's handler.
pub(super) struct FrameSource {
    builder: FrameBuilder,
    gpu_writer: Option<GpuFrames>,
    /// One bit per buffer index of the region: its constant part is written.
    initialised: Vec<u64>,
    /// A burst the TX queue's ring had no room for yet.
    pending: Option<dataplane::Burst>,
    packets: u64,
    bytes: u64,
    failure: Option<String>,
    busy_ns: u64,
    clock: dataplane::clock::WallClock,
    tx_work: TxWork,
    frame_len: usize,
    batch: usize,
    timed: bool,
    paced: bool,
}

/// What one [`FrameSource::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A burst went to the queue.
    Sent,
    /// Nothing could go now (no buffers, a full ring, pacing): try again later.
    Wait,
    /// The queue is gone or the writer failed: nothing more will go.
    Done,
}

impl FrameSource {
    /// The generator of `bench_tx` entry `b` (stream `stream`) on TX queue `q`, or why the
    /// queue cannot carry its frames.
    pub(super) fn new(
        config: &Config,
        opts: &RawOptions,
        stream: usize,
        b: &dataplane::config::BenchTxConfig,
        q: &TxQueue,
    ) -> Result<Self, BenchError> {
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
        let builder = generator_frames(config, b, stream);
        if builder.frame_len() > q.segment_sizes()[0] {
            return Err(unusable(format!(
                "has {}-byte buffers, shorter than the {}-byte frames",
                q.segment_sizes()[0],
                builder.frame_len()
            )));
        }
        // Frames in GPU memory are written there by a kernel (`gpu_direct`).
        let gpu_writer = if q.host_accessible() {
            None
        } else if opts.tx_work == TxWork::Headers {
            return Err(unusable(
                "is in GPU memory, where the generator writes whole frames: --tx-work headers needs host memory".into(),
            ));
        } else {
            match q.device_gpu() {
                Some(gpu) => Some(
                    GpuFrames::new(gpu, &builder)
                        .map_err(|e| unusable(format!("GPU frame writer: {e}")))?,
                ),
                None => return Err(unusable("is neither host nor device memory".into())),
            }
        };
        Ok(Self {
            frame_len: builder.frame_len(),
            builder,
            gpu_writer,
            initialised: Vec::new(),
            pending: None,
            packets: 0,
            bytes: 0,
            failure: None,
            busy_ns: 0,
            clock: dataplane::clock::WallClock::new(),
            tx_work: opts.tx_work,
            batch: b.batch_size as usize,
            timed: opts.time_stages,
            paced: opts.target_gbps.is_some(),
        })
    }

    /// Packets handed to the queue so far.
    pub(super) fn packets(&self) -> u64 {
        self.packets
    }

    /// What it did.
    pub(super) fn result(&self) -> GeneratorResult {
        (self.packets, self.bytes, self.failure.clone(), self.busy_ns)
    }

    /// Makes a burst (or takes the one the ring refused) and hands it to `q`.
    pub(super) fn step(&mut self, q: &mut TxQueue) -> Step {
        if self.failure.is_some() {
            return Step::Done;
        }
        // Paced: a burst is made when the TX ring is empty (the worker holds the one its
        // pacer sends), not queued ahead, so its send time measures the path rather than
        // the wait in the ring.
        if self.paced && self.pending.is_none() && q.pending() > 0 {
            return Step::Wait;
        }
        let started = self.timed.then(Instant::now);
        let burst = match self.pending.take() {
            Some(b) => b,
            None => match q.alloc_frames(self.batch, self.frame_len) {
                Ok(burst) => match self.fill(burst) {
                    Some(b) => b,
                    None => return Step::Done,
                },
                Err(_) => return Step::Wait,
            },
        };
        let n = burst.len() as u64;
        let sent_now = q.send(burst);
        if let Some(t) = started {
            self.busy_ns += t.elapsed().as_nanos() as u64;
        }
        match sent_now {
            Ok(()) => {
                self.packets += n;
                self.bytes += n * self.frame_len as u64;
                Step::Sent
            }
            Err(e) if e.reason == TxFailure::RingFull => {
                self.pending = Some(e.burst);
                Step::Wait
            }
            // The queue is gone (its worker died): nothing more can be sent.
            Err(e) => {
                self.failure = Some(e.reason.to_string());
                Step::Done
            }
        }
    }

    /// Writes the next frames into `burst` (`None`: the GPU writer failed).
    fn fill(&mut self, mut burst: dataplane::Burst) -> Option<dataplane::Burst> {
        self.builder.set_send_time(self.clock.now_ns());
        if let Some(w) = self.gpu_writer.as_mut() {
            if let Err(e) = w.write(&mut self.builder, &mut burst) {
                self.failure = Some(format!("GPU frame writer: {e}"));
                return None;
            }
            return Some(burst);
        }
        let frame_len = self.frame_len;
        let mut frames = burst.frames_mut();
        let prefetch = |frames: &dataplane::FramesMut, i| {
            if let Some(head) = frames.addr(i) {
                prefetch_for_write(head);
                prefetch_for_write(head + frame_len.max(1) as u64 - 1);
            }
        };
        for i in 0..PREFETCH_AHEAD {
            prefetch(&frames, i);
        }
        for i in 0..frames.len() {
            prefetch(&frames, i + PREFETCH_AHEAD);
            let idx = frames.index(i) as usize;
            let buf = frames.buffer_mut(i).expect("host memory");
            // Headers and fill are written once per buffer.
            let (word, bit) = (idx / 64, idx % 64);
            if self.initialised.len() <= word {
                self.initialised.resize(word + 1, 0);
            }
            if self.initialised[word] & (1 << bit) == 0 {
                self.builder.write_constant(buf);
                self.initialised[word] |= 1 << bit;
            }
            match self.tx_work {
                TxWork::Full => self.builder.write_next(buf),
                TxWork::Headers => self.builder.write_headers(buf),
            }
            // The length is set: `alloc_frames` did it.
        }
        Some(burst)
    }
}

/// Starts a generator thread for every `bench_tx` entry; each counts the packets it hands
/// to its TX queue into `sent` and stops when `stop` is set.
pub(super) fn spawn_generators(
    config: &Config,
    opts: &RawOptions,
    plane: &mut DataPlane,
    stop_tx: &Arc<AtomicBool>,
    sent: &Arc<AtomicU64>,
) -> Result<Vec<Generator>, BenchError> {
    let mut generators = Vec::new();
    for (stream, b) in config.bench.tx.iter().enumerate() {
        let mut q = plane
            .take_tx_queue(&b.interface_name, b.queue_id)
            .ok_or_else(|| BenchError::QueueTwice {
                interface: b.interface_name.clone(),
                direction: Direction::Tx,
                queue: b.queue_id,
            })?;
        let mut source = FrameSource::new(config, opts, stream, b, &q)?;
        let (stop, sent, core) = (stop_tx.clone(), sent.clone(), b.cpu_core);
        let thread = std::thread::Builder::new()
            .name("bench-tx".into())
            .spawn(move || {
                if let Some(c) = core {
                    let _ = affinity::pin_current_thread(c);
                }
                while !stop.load(Ordering::Relaxed) {
                    // Generators share `sent`: each adds what it sent.
                    let before = source.packets();
                    match source.step(&mut q) {
                        Step::Sent => {
                            sent.fetch_add(source.packets() - before, Ordering::Relaxed);
                        }
                        Step::Wait => std::thread::yield_now(),
                        Step::Done => break,
                    }
                }
                // A burst built but never sent is dropped here; its sequence numbers were
                // never seen by anyone, so it is not a gap.
                source.result()
            })
            .map_err(StartError::Spawn)?;
        generators.push(Generator { thread });
    }
    Ok(generators)
}
