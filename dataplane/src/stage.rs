//! Delivery into an RX queue's own memory layout when its packets arrive elsewhere: the
//! software loopback, sockets and virtual devices cannot write into GPU memory or split
//! headers from payloads, so the RX worker does it before the burst reaches the
//! application.
//!
//! - **Batched GPU** (one `device` region): every packet is moved into a buffer of that
//!   region.
//! - **Header-data split** (two regions): the first region's `buf_size` bytes of each packet
//!   go to segment 0 and the rest to segment 1, each into its own region (typically headers
//!   in host memory and payloads in device memory).
//! - **From GPU memory** (a TX queue in `device` memory feeding a host RX queue): packets
//!   are copied back out.
//!
//! Host-to-GPU bytes travel one of two ways (`cfg.gpu_stage`), both measured in
//! BENCHMARKS.md:
//! - `copy` (the default): DMA copies. Packets in pinned memory that sit next to each other in both the
//!   source and the destination region go as one asynchronous copy per run (lone ones go
//!   through the kernel); packets in pageable memory are gathered by the CPU into a pinned
//!   staging buffer laid out like their destinations and copied one run of adjacent
//!   destination buffers at a time (one copy per burst when the pools hand out
//!   neighbours, as they mostly do);
//! - `kernel`: a GPU gather kernel reads the packets straight from pinned (GPU-mapped)
//!   memory and writes each to its buffer; packets in pageable memory are first gathered
//!   into the pinned staging buffer.
//!
//! `copy` is the default: on the H200 it moved 8 KiB packets from pinned memory at 0.93 of
//! the plain pinned copy bandwidth against 0.82 for the kernel, and the two were even on
//! the loopback bench (BENCHMARKS.md).
//!
//! Up to [`gpudirect::kernels::TABLE_SLOTS`] bursts are in flight on the GPU at once (each
//! with its own argument table and staging area); the worker hands a burst over only when
//! the event recorded after its copies reports them done, in arrival order, so the
//! application never sees a buffer whose bytes are still moving.

use crate::burst::Burst;
use crate::config::MemoryKind;
pub use crate::config::StageMode;
use crate::memory::{RegionId, RegionSet};
use crate::plan::StagePlan;
use std::collections::VecDeque;
use std::sync::Arc;

/// Why a burst could not be staged.
#[derive(Debug)]
pub(crate) enum StageError {
    /// A layout region has no free buffers now; try again later.
    NoBuffers(Burst),
    /// The packets cannot be staged (they are dropped); says why.
    Failed {
        /// Packets lost.
        packets: u64,
        /// Why.
        reason: String,
    },
}

/// One copy: bytes `len` from `src` (an address in region `src_region`) to `dst` (in
/// `dst_region`).
#[derive(Clone, Copy)]
struct Move {
    src: u64,
    src_region: RegionId,
    dst: u64,
    dst_region: RegionId,
    len: u32,
}

/// Device-to-pageable-host bytes the CPU moves out of staging once the GPU is done:
/// (staging offset, destination, length).
#[cfg(feature = "cuda")]
type CpuFinish = Vec<(usize, u64, u32)>;

/// A staged burst on its way: the output, and the source kept until the copies out of it
/// finished.
struct InFlight {
    out: Burst,
    _source: Burst,
    /// Waits for the GPU (its table slot's event) before it is handed back.
    #[cfg(feature = "cuda")]
    on_gpu: bool,
    /// The CPU's share of device-to-host moves.
    #[cfg(feature = "cuda")]
    finish: CpuFinish,
    #[cfg(feature = "cuda")]
    slot: usize,
}

impl InFlight {
    /// A burst whose copies are all done already (none, or only on the CPU).
    fn done(out: Burst, source: Burst) -> Self {
        Self {
            out,
            _source: source,
            #[cfg(feature = "cuda")]
            on_gpu: false,
            #[cfg(feature = "cuda")]
            finish: Vec::new(),
            #[cfg(feature = "cuda")]
            slot: 0,
        }
    }
}

/// The stage of one RX queue.
pub(crate) struct RxStage {
    regions: Arc<RegionSet>,
    layout: Vec<RegionId>,
    /// Header-data split boundary (the first region's buf_size) with two regions.
    split: Option<usize>,
    moves: Vec<Move>,
    in_flight: VecDeque<InFlight>,
    #[cfg(feature = "cuda")]
    gpu: Option<GpuPath>,
}

#[cfg(feature = "cuda")]
struct GpuPath {
    gpu: gpudirect::Gpu,
    /// One staging area per table slot.
    staging: gpudirect::PinnedBuffer,
    slot_bytes: usize,
    next_slot: usize,
    mode: StageMode,
    items: Vec<(u64, u64, u32)>,
    /// Scratch kept across bursts (no allocation per burst): copy-mode moves from
    /// GPU-reachable sources, from pageable sources, and the runs found.
    direct: Vec<Move>,
    pageable: Vec<Move>,
    runs: Vec<(u64, u64, usize, bool)>,
}

fn gpu_side(regions: &RegionSet, r: RegionId) -> bool {
    regions.get(r).kind() == MemoryKind::Device
}

/// One copy of a burst in consecutive buffers: `rows` rows of `width` bytes, row `k` from
/// `src + k * src_pitch` to `dst + k * dst_pitch` (one row when the pitches are equal).
#[cfg(feature = "cuda")]
struct SpanCopy {
    src: u64,
    dst: u64,
    src_pitch: usize,
    dst_pitch: usize,
    width: usize,
    rows: usize,
    from_device: bool,
}

/// Bursts in flight at most (one per GPU argument table).
#[cfg(feature = "cuda")]
const DEPTH: usize = gpudirect::kernels::TABLE_SLOTS;

impl RxStage {
    /// The stage the plan gave a queue with `layout` regions (whether a queue needs one,
    /// where it splits and which GPU it uses are the plan's decisions, see
    /// [`crate::plan::StagePlan`]). `batch` is the most packets per burst.
    pub(crate) fn new(
        regions: &Arc<RegionSet>,
        layout: &[RegionId],
        batch: usize,
        plan: &StagePlan,
    ) -> Result<Self, gpudirect::GpuError> {
        let split = plan.split_header_bytes;
        let mode = plan.mode;
        #[cfg(not(feature = "cuda"))]
        let _ = mode;
        Ok(Self {
            regions: regions.clone(),
            layout: layout.to_vec(),
            split,
            moves: Vec::with_capacity(batch * 2),
            in_flight: VecDeque::new(),
            #[cfg(feature = "cuda")]
            gpu: match plan.gpu {
                None => None,
                Some(ordinal) => {
                    let slot_bytes = (batch
                        * layout
                            .iter()
                            .map(|&r| regions.get(r).stride())
                            .max()
                            .unwrap_or(0))
                    .max(4096);
                    Some(GpuPath {
                        gpu: gpudirect::Gpu::new(ordinal)?,
                        staging: gpudirect::PinnedBuffer::alloc(ordinal, slot_bytes * DEPTH)?,
                        slot_bytes,
                        next_slot: 0,
                        mode,
                        items: Vec::with_capacity(batch),
                        direct: Vec::with_capacity(batch * 2),
                        pageable: Vec::with_capacity(batch * 2),
                        runs: Vec::with_capacity(batch),
                    })
                }
            },
        })
    }

    /// True when another burst can be submitted now.
    pub(crate) fn has_room(&self) -> bool {
        #[cfg(feature = "cuda")]
        if self.gpu.is_some() {
            return self.in_flight.len() < DEPTH;
        }
        true
    }

    /// Bursts submitted and not yet handed back.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts moving `burst` into the queue's layout; [`RxStage::completed`] hands it back.
    /// A burst already in the layout is handed back as it is. Call only with
    /// [`RxStage::has_room`].
    pub(crate) fn submit(&mut self, burst: Burst) -> Result<(), StageError> {
        let in_layout = burst.packets().iter().all(|p| {
            p.segments().len() == self.layout.len()
                && p.segments()
                    .iter()
                    .zip(&self.layout)
                    .all(|(s, r)| s.region == *r)
        });
        if burst.is_empty() || in_layout {
            let empty = Burst::empty(self.regions.clone(), burst.port(), burst.queue(), 0);
            self.in_flight.push_back(InFlight::done(burst, empty));
            return Ok(());
        }
        let n = burst.len();
        let Some(mut out) = Burst::allocate(
            self.regions.clone(),
            burst.port(),
            burst.queue(),
            &self.layout,
            n,
        ) else {
            return Err(StageError::NoBuffers(burst));
        };
        #[cfg(feature = "cuda")]
        if let Some(span) = self.contiguous_span(&burst, &mut out) {
            let gpu = self.gpu.as_mut().expect("checked by contiguous_span");
            let slot = gpu.submit_span(&span).map_err(|e| StageError::Failed {
                packets: n as u64,
                reason: format!("GPU copy failed: {e}"),
            })?;
            self.in_flight.push_back(InFlight {
                out,
                _source: burst,
                on_gpu: true,
                finish: Vec::new(),
                slot,
            });
            return Ok(());
        }
        self.moves.clear();
        let failed = |reason| StageError::Failed {
            packets: n as u64,
            reason,
        };
        // The layout has one or two regions (the plan's rule).
        let mut caps = [0usize; 2];
        for (cap, &r) in caps.iter_mut().zip(&self.layout) {
            *cap = self.regions.get(r).buf_size();
        }
        for i in 0..n {
            let p = burst.packets()[i];
            if p.segments().len() != 1 {
                return Err(failed(format!(
                    "packet {i} arrived in {} segments; the software path splits single-segment packets",
                    p.segments().len()
                )));
            }
            let src = p.segments()[0];
            let len = src.len as usize;
            let first = self.split.unwrap_or(len).min(len);
            let parts = [(0usize, first), (first, len - first)];
            for (seg, &(from, bytes)) in parts.iter().enumerate().take(self.layout.len()) {
                let cap = caps[seg];
                let last = seg + 1 == self.layout.len();
                if bytes > cap || (last && from + bytes < len) {
                    return Err(failed(format!(
                        "packet {i} of {len} bytes does not fit the queue's {cap}-byte buffers"
                    )));
                }
                out.set_len(i, seg, bytes);
                if bytes > 0 {
                    self.moves.push(Move {
                        src: burst.segment_addr(i, 0) + from as u64,
                        src_region: src.region,
                        dst: out.segment_addr(i, seg),
                        dst_region: self.layout[seg],
                        len: bytes as u32,
                    });
                }
            }
            out.set_flow_id(i, p.flow_id);
            out.set_timestamp(i, p.timestamp_ns);
        }
        let regions = self.regions.clone();
        let on_gpu = |r| gpu_side(&regions, r);
        // Host to host: plain copies, done now.
        for m in self
            .moves
            .iter()
            .filter(|m| !on_gpu(m.src_region) && !on_gpu(m.dst_region))
        {
            // SAFETY: both ranges lie in host-mapped buffers this stage owns for the call
            // (the source burst and the freshly allocated output), and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(m.src as *const u8, m.dst as *mut u8, m.len as usize)
            };
        }
        let needs_gpu = self
            .moves
            .iter()
            .any(|m| on_gpu(m.src_region) || on_gpu(m.dst_region));
        if !needs_gpu {
            self.in_flight.push_back(InFlight::done(out, burst));
            return Ok(());
        }
        #[cfg(feature = "cuda")]
        {
            let gpu = self
                .gpu
                .as_mut()
                .expect("a GPU path exists for device regions");
            let (slot, finish) = gpu
                .submit(&regions, &self.moves)
                .map_err(|e| failed(format!("GPU copy failed: {e}")))?;
            self.in_flight.push_back(InFlight {
                out,
                _source: burst,
                on_gpu: true,
                finish,
                slot,
            });
            Ok(())
        }
        #[cfg(not(feature = "cuda"))]
        Err(failed("this build has no CUDA support".into()))
    }

    /// The common case in one copy: a burst of single-segment packets in consecutive
    /// buffers of one DMA-reachable region (pinned host or device memory, as a pool hands
    /// them out under load), going into consecutive buffers of a device region, whole
    /// packets, copy mode. One contiguous copy when both regions have the same stride,
    /// else one strided (2D) copy of the longest packet's bytes per buffer. Fills `out`'s
    /// lengths, flow ids and times on the way; `None` leaves the burst to the general
    /// path, which sets `out` again.
    #[cfg(feature = "cuda")]
    fn contiguous_span(&self, burst: &Burst, out: &mut Burst) -> Option<SpanCopy> {
        let gpu = self.gpu.as_ref()?;
        if gpu.mode != StageMode::Copy || self.layout.len() != 1 || self.split.is_some() {
            return None;
        }
        let first = *burst.packets().first()?.segments().first()?;
        let (src_region, dst_region) = (
            self.regions.get(first.region),
            self.regions.get(self.layout[0]),
        );
        let from_device = match src_region.kind() {
            MemoryKind::Device => true,
            MemoryKind::HostPinned => false,
            _ => return None,
        };
        if dst_region.kind() != MemoryKind::Device {
            return None;
        }
        let cap = dst_region.buf_size();
        let n = burst.len();
        let out_first = out.packets()[0].segments()[0].index;
        // Buffers may come in ascending or descending order (a pool hands them back in
        // the order they were freed); sources and destinations must agree.
        let descending = n > 1 && burst.packets()[1].segments()[0].index < first.index;
        let at = |base: u32, k: u32| {
            if descending {
                base.wrapping_sub(k)
            } else {
                base.wrapping_add(k)
            }
        };
        let mut longest = 0;
        for i in 0..n {
            let p = burst.packets()[i];
            let [s] = p.segments() else { return None };
            let d = out.packets()[i].segments()[0];
            let k = i as u32;
            if s.region != first.region
                || s.index != at(first.index, k)
                || d.index != at(out_first, k)
                || s.len as usize > cap
            {
                return None;
            }
            out.set_len(i, 0, s.len as usize);
            out.set_flow_id(i, p.flow_id);
            out.set_timestamp(i, p.timestamp_ns);
            longest = longest.max(s.len as usize);
        }
        // From the lowest buffer; the last row ends with the highest buffer's packet.
        let (low, high) = if descending { (n - 1, 0) } else { (0, n - 1) };
        let (src_pitch, dst_pitch) = (src_region.stride(), dst_region.stride());
        let same_pitch = src_pitch == dst_pitch;
        Some(SpanCopy {
            src: burst.segment_addr(low, 0),
            dst: out.segment_addr(low, 0),
            src_pitch,
            dst_pitch,
            width: if same_pitch {
                (n - 1) * dst_pitch + burst.packets()[high].segments()[0].len as usize
            } else {
                longest
            },
            rows: if same_pitch { 1 } else { n },
            from_device,
        })
    }

    /// The oldest submitted burst once its copies finished (arrival order is kept).
    pub(crate) fn completed(&mut self) -> Option<Result<Burst, StageError>> {
        let front = self.in_flight.front()?;
        #[cfg(feature = "cuda")]
        if front.on_gpu {
            let gpu = &self.gpu.as_ref().expect("GPU path").gpu;
            match gpu.slot_done(front.slot) {
                Ok(false) => return None,
                Ok(true) => {}
                Err(e) => return Some(Err(self.lost(format!("GPU copy failed: {e}")))),
            }
        }
        let _ = front;
        Some(Ok(self.finish_front()))
    }

    /// As [`RxStage::completed`], waiting for the oldest burst.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn wait_oldest(&mut self) -> Option<Result<Burst, StageError>> {
        #[cfg(feature = "cuda")]
        if let Some(f) = self.in_flight.front()
            && f.on_gpu
            && let Err(e) = self.gpu.as_ref().expect("GPU path").gpu.wait_slot(f.slot)
        {
            return Some(Err(self.lost(format!("GPU copy failed: {e}"))));
        }
        self.completed()
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    fn lost(&mut self, reason: String) -> StageError {
        let f = self.in_flight.pop_front().expect("a burst in flight");
        StageError::Failed {
            packets: f.out.len() as u64,
            reason,
        }
    }

    fn finish_front(&mut self) -> Burst {
        let f = self.in_flight.pop_front().expect("a burst in flight");
        #[cfg(feature = "cuda")]
        if let Some(gpu) = &self.gpu {
            let base = gpu.staging.as_ptr();
            for &(at, dst, len) in &f.finish {
                // SAFETY: the GPU finished writing this slot's staging; `dst` is a host
                // buffer of the output burst.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.add(f.slot * gpu.slot_bytes + at),
                        dst as *mut u8,
                        len as usize,
                    )
                };
            }
        }
        #[cfg(feature = "cuda")]
        let on_gpu = f.on_gpu;
        // The source buffers go back as `f` drops: every copy out of them has finished.
        #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
        let InFlight { mut out, .. } = f;
        #[cfg(feature = "cuda")]
        if let (true, Some(gpu)) = (on_gpu, &self.gpu) {
            out.set_gpu_stream(gpu.gpu.stream().cu_stream() as u64);
        }
        out
    }
}

impl Drop for RxStage {
    fn drop(&mut self) {
        // Nothing may still write into buffers that go back to their pools.
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            let _ = g.gpu.bind();
            let _ = g.gpu.sync();
        }
        self.in_flight.clear();
    }
}

#[cfg(feature = "cuda")]
impl GpuPath {
    /// Queues every move that touches GPU memory in the next table slot and records the
    /// slot's event after them. Returns the slot and the CPU's share of device-to-host
    /// moves.
    fn submit(
        &mut self,
        regions: &RegionSet,
        moves: &[Move],
    ) -> Result<(usize, CpuFinish), gpudirect::GpuError> {
        // Cheap when already current; the worker thread may differ from the creator.
        self.gpu.bind()?;
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % DEPTH;
        let dev = |r| gpu_side(regions, r);
        let pinned = |r| regions.get(r).kind() == MemoryKind::HostPinned;
        // SAFETY: the slot's staging area lies inside the staging buffer.
        let base = unsafe { self.staging.as_ptr().add(slot * self.slot_bytes) };
        let cap = self.slot_bytes;
        let mut used = 0usize;
        let mut finish = Vec::new();
        self.items.clear();
        let mut copy_mode_moves = std::mem::take(&mut self.pageable);
        let mut direct = std::mem::take(&mut self.direct);
        let mut runs = std::mem::take(&mut self.runs);
        copy_mode_moves.clear();
        direct.clear();
        runs.clear();
        for m in moves
            .iter()
            .filter(|m| dev(m.src_region) || dev(m.dst_region))
        {
            let reachable_src = dev(m.src_region) || pinned(m.src_region);
            let reachable_dst = dev(m.dst_region) || pinned(m.dst_region);
            if self.mode == StageMode::Copy && dev(m.dst_region) {
                if reachable_src {
                    direct.push(*m);
                } else {
                    copy_mode_moves.push(*m);
                }
                continue;
            }
            let (mut src, mut dst) = (m.src, m.dst);
            if !reachable_src {
                // Pageable host bytes: gathered into pinned staging for the kernel.
                assert!(used + m.len as usize <= cap, "staging sized for a burst");
                // SAFETY: the source is host memory of the burst; staging has room.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        m.src as *const u8,
                        base.add(used),
                        m.len as usize,
                    )
                };
                src = base as u64 + used as u64;
                used += m.len as usize;
            }
            if !reachable_dst {
                // Pageable host destination: the GPU writes staging, the CPU finishes.
                assert!(used + m.len as usize <= cap, "staging sized for a burst");
                dst = base as u64 + used as u64;
                finish.push((used, m.dst, m.len));
                used += m.len as usize;
            }
            self.items.push((src, dst, m.len));
        }
        // Copy mode, GPU-reachable sources: runs of packets adjacent in both source and
        // destination go as one DMA copy each; lone packets join the kernel's items.
        direct.sort_unstable_by_key(|m| m.dst);
        let mut k = 0;
        while k < direct.len() {
            let end = run_end(regions, &direct, k, true);
            if end - k >= 2 {
                let last = direct[end - 1];
                let span = (last.dst - direct[k].dst) as usize + last.len as usize;
                runs.push((
                    direct[k].src,
                    direct[k].dst,
                    span,
                    dev(direct[k].src_region),
                ));
            } else {
                self.items
                    .push((direct[k].src, direct[k].dst, direct[k].len));
            }
            k = end;
        }
        for &(src, dst, span, from_device) in &runs {
            // SAFETY: both runs lie in buffers of the bursts in flight (pinned host or
            // device memory), untouched until the slot's event completes.
            unsafe {
                if from_device {
                    self.gpu.copy_device(dst, src, span)
                } else {
                    self.gpu.copy_to_device(dst, src as *const u8, span)
                }
            }?;
        }
        if self.items.len() > MAX_ITEMS {
            // More items than one table holds: one launch at a time, waited for.
            for chunk in self.items.chunks(MAX_ITEMS) {
                // SAFETY: as below; the sync frees the table before the next chunk.
                unsafe { self.gpu.batched_copy_in(slot, chunk) }?;
                self.gpu.sync()?;
            }
        } else {
            // SAFETY: every source and destination is device memory or pinned host memory
            // mapped for the GPU, owned by the bursts or staging until the event below
            // completes; the slot's previous launch completed (at most DEPTH in flight).
            unsafe { self.gpu.batched_copy_in(slot, &self.items) }?;
        }
        let pageable_done = if copy_mode_moves.is_empty() {
            Ok(())
        } else {
            self.copy_runs(regions, &mut copy_mode_moves, base, used)
        };
        self.pageable = copy_mode_moves;
        self.direct = direct;
        self.runs = runs;
        pageable_done?;
        self.gpu.record_slot(slot)?;
        Ok((slot, finish))
    }

    /// One copy of consecutive buffers (see [`RxStage::contiguous_span`]) in the next
    /// table slot, marked for completion; returns the slot.
    fn submit_span(&mut self, c: &SpanCopy) -> Result<usize, gpudirect::GpuError> {
        self.gpu.bind()?;
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % DEPTH;
        // SAFETY: every row lies in the consecutive buffers of the bursts in flight (the
        // source pinned host or device memory, the destination device memory), untouched
        // until the slot's mark completes; a row is at most one buffer's stride wide.
        unsafe {
            match (c.rows, c.from_device) {
                (1, true) => self.gpu.copy_device(c.dst, c.src, c.width),
                (1, false) => self.gpu.copy_to_device(c.dst, c.src as *const u8, c.width),
                (rows, on_device) => self.gpu.copy_rows_to_device(
                    c.dst,
                    c.dst_pitch,
                    c.src,
                    c.src_pitch,
                    on_device,
                    c.width,
                    rows,
                ),
            }
        }?;
        self.gpu.record_slot(slot)?;
        Ok(slot)
    }

    /// Copy mode: gathers into staging laid out like the destinations and issues one
    /// asynchronous copy per run of adjacent destination buffers.
    fn copy_runs(
        &mut self,
        regions: &RegionSet,
        moves: &mut [Move],
        base: *mut u8,
        mut used: usize,
    ) -> Result<(), gpudirect::GpuError> {
        moves.sort_unstable_by_key(|m| m.dst);
        let mut k = 0;
        while k < moves.len() {
            let end = run_end(regions, moves, k, false);
            let run = &moves[k..end];
            let d0 = run[0].dst;
            let span = (run[end - k - 1].dst - d0) as usize + run[end - k - 1].len as usize;
            assert!(used + span <= self.slot_bytes, "staging sized for a burst");
            for m in run {
                // SAFETY: host source of the burst; the staging range is inside the slot.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        m.src as *const u8,
                        base.add(used + (m.dst - d0) as usize),
                        m.len as usize,
                    )
                };
            }
            // SAFETY: pinned staging stays untouched until the burst's event completes;
            // the destination run lies in device buffers of the new burst.
            unsafe { self.gpu.copy_to_device(d0, base.add(used), span) }?;
            used += span;
            k = end;
        }
        Ok(())
    }
}

/// End of the run of moves starting at `k` (sorted by destination) whose destination
/// buffers are neighbours in one region, and with `with_source` whose sources are too, at
/// the same distance: such a run is one contiguous copy.
#[cfg(feature = "cuda")]
fn run_end(regions: &RegionSet, moves: &[Move], k: usize, with_source: bool) -> usize {
    let first = moves[k];
    let stride = regions.get(first.dst_region).stride() as u64;
    let mut end = k + 1;
    while end < moves.len() {
        let (m, prev) = (moves[end], moves[end - 1]);
        let dst_next = m.dst_region == first.dst_region && m.dst == prev.dst + stride;
        let src_next =
            !with_source || (m.src_region == first.src_region && m.src == prev.src + stride);
        if !(dst_next && src_next) {
            break;
        }
        end += 1;
    }
    end
}

/// Items per kernel launch (the argument table's size).
#[cfg(feature = "cuda")]
const MAX_ITEMS: usize = gpudirect::kernels::MAX_ITEMS;

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;
    use crate::config::MemoryRegionConfig;

    fn region(name: &str, kind: MemoryKind) -> MemoryRegionConfig {
        MemoryRegionConfig::new(name, kind, 256, 2048)
    }

    /// Host to GPU and back (the way a TX queue in device memory reaches host RX queues),
    /// in both modes and for pageable and pinned host memory: every byte survives.
    /// Skips without a CUDA driver.
    #[test]
    fn packets_go_into_gpu_memory_and_back_out_intact() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: the GPU round trip is not run");
            return;
        }
        for host_kind in [MemoryKind::Host, MemoryKind::HostPinned] {
            for mode in [StageMode::Kernel, StageMode::Copy] {
                let regions = Arc::new(
                    RegionSet::allocate(&[
                        region("src", host_kind),
                        region("gpu", MemoryKind::Device),
                        region("back", host_kind),
                    ])
                    .unwrap(),
                );
                let to_gpu = StagePlan {
                    split_header_bytes: None,
                    gpu: Some(0),
                    mode,
                };
                let mut into = RxStage::new(&regions, &[1], 64, &to_gpu).unwrap();
                // A host layout fed device packets still converts: build it directly.
                let mut out_of = RxStage {
                    regions: regions.clone(),
                    layout: vec![2],
                    split: None,
                    moves: Vec::new(),
                    in_flight: VecDeque::new(),
                    gpu: into.gpu.take().map(|mut g| {
                        g.mode = mode;
                        g
                    }),
                };
                into.gpu = Some(GpuPath {
                    gpu: gpudirect::Gpu::new(0).unwrap(),
                    staging: gpudirect::PinnedBuffer::alloc(0, 64 * 2048 * DEPTH).unwrap(),
                    slot_bytes: 64 * 2048,
                    next_slot: 0,
                    mode,
                    items: Vec::new(),
                    direct: Vec::new(),
                    pageable: Vec::new(),
                    runs: Vec::new(),
                });
                let mut b = Burst::allocate(regions.clone(), 0, 0, &[0], 40).unwrap();
                for i in 0..40 {
                    let len = 1 + i * 47;
                    for (k, x) in b.buffer_mut(i, 0).unwrap()[..len].iter_mut().enumerate() {
                        *x = (k * 13 + i) as u8;
                    }
                    b.set_len(i, 0, len);
                }
                into.submit(b).map_err(|_| "submit").unwrap();
                let on_gpu = into.wait_oldest().unwrap().map_err(|_| "stage").unwrap();
                assert!(on_gpu.data(0, 0).is_none(), "now in device memory");
                assert!(
                    on_gpu.gpu_stream().is_some(),
                    "names the stream that filled it"
                );
                out_of.submit(on_gpu).map_err(|_| "submit back").unwrap();
                let back = out_of
                    .wait_oldest()
                    .unwrap()
                    .map_err(|_| "stage back")
                    .unwrap();
                for i in 0..40 {
                    let want: Vec<u8> = (0..1 + i * 47).map(|k| (k * 13 + i) as u8).collect();
                    assert_eq!(
                        back.data(i, 0).unwrap(),
                        &want[..],
                        "{host_kind:?} {mode:?} packet {i}"
                    );
                }
                drop(back);
                drop((into, out_of));
                for r in 0..3 {
                    assert_eq!(
                        regions.get(r).available(),
                        256,
                        "region {r} got every buffer back"
                    );
                }
            }
        }
    }
}

/// Digests of packets in GPU memory, computed by the GPU where the bytes lie: for one
/// segment of each packet, the sum of its big-endian 16-bit words from a byte on, and its
/// first `head` and last `tail` bytes. A checker compares them with the same digests of
/// the bytes it expects.
#[cfg(feature = "cuda")]
#[derive(Default)]
pub struct DeviceDigest {
    gpu: Option<gpudirect::Gpu>,
    /// Per packet: the word sum.
    pub sums: Vec<u64>,
    /// Per packet: `head + tail` bytes.
    pub digests: Vec<u8>,
}

#[cfg(feature = "cuda")]
impl DeviceDigest {
    /// Digests segment `seg` of every packet of `burst`, which must be in GPU memory:
    /// word sums from byte `sum_from`, `head` and `tail` bytes.
    pub fn run(
        &mut self,
        burst: &Burst,
        seg: usize,
        sum_from: u32,
        head_tail: (u32, u32),
    ) -> Result<(), gpudirect::GpuError> {
        self.run_many(&[burst], seg, sum_from, head_tail)
    }

    /// As [`DeviceDigest::run`] for the packets of several bursts (of one GPU) in one
    /// launch, in order: one launch and one wait for all of them.
    pub fn run_many(
        &mut self,
        bursts: &[&Burst],
        seg: usize,
        sum_from: u32,
        (head, tail): (u32, u32),
    ) -> Result<(), gpudirect::GpuError> {
        let Some(first) = bursts
            .iter()
            .find_map(|b| b.packets().first().map(|p| (b, p)))
        else {
            return Ok(());
        };
        let ordinal = first
            .0
            .regions()
            .get(first.1.segments()[seg].region)
            .affinity();
        if self.gpu.is_none() {
            self.gpu = Some(gpudirect::Gpu::new(ordinal)?);
        }
        let gpu = self.gpu.as_mut().expect("just set");
        let per = (head + tail) as usize;
        let packets: Vec<(u64, u32)> = bursts
            .iter()
            .flat_map(|b| {
                (0..b.len())
                    .map(move |i| (b.segment_addr(i, seg), b.packets()[i].segments()[seg].len))
            })
            .collect();
        let n = packets.len();
        self.sums.resize(n, 0);
        self.digests.resize(n * per, 0);
        for (k, chunk) in packets.chunks(gpudirect::kernels::MAX_ITEMS).enumerate() {
            let at = k * gpudirect::kernels::MAX_ITEMS;
            // SAFETY: the segments belong to `bursts`, which live across the call.
            unsafe {
                gpu.frame_digest(
                    chunk,
                    sum_from,
                    (head, tail),
                    &mut self.sums[at..],
                    &mut self.digests[at * per..],
                )
            }?;
        }
        Ok(())
    }
}
