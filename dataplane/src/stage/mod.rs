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
//! - `copy` (the default): DMA copies. Packets in pinned memory that sit next to each
//!   other in both the source and the destination region go as one asynchronous copy per
//!   run (lone ones go through the kernel); packets in pageable memory are gathered by the
//!   CPU (and its copy helpers) into a pinned staging buffer laid out like their
//!   destinations and copied one run of adjacent destination buffers at a time: when the
//!   output buffers are consecutive, as the FIFO device pool hands them out, a burst is
//!   gathered with no per-packet move list and joins the bursts gathered before it in one
//!   upload, as pinned bursts join one copy;
//! - `kernel`: a GPU gather kernel reads the packets straight from pinned (GPU-mapped)
//!   memory and writes each to its buffer; packets in pageable memory are first gathered
//!   into the pinned staging buffer.
//!
//! `copy` is the default: on the H200 it moved 8 KiB packets from pinned memory at 0.93 of
//! the plain pinned copy bandwidth against 0.82 for the kernel, and the two were even on
//! the loopback bench (BENCHMARKS.md).
//!
//! Up to [`gpudirect::kernels::TABLE_SLOTS`] copies are in flight on the GPU at once (each
//! with its own argument table and staging area); the worker hands a burst over only when
//! the mark queued after its copies reports them done, in arrival order, so the
//! application never sees a buffer whose bytes are still moving.
//!
//! **Coalescing.** A copy costs the H200 about 4 us of its own besides the bytes (and the
//! CPU two driver calls): 256 KiB copies back to back reach only half the link, 2 MiB
//! copies 0.9, 4 MiB copies 0.95 (`bench gpu`, BENCHMARKS.md). So bursts that continue
//! the previous one in both regions (as a busy queue's bursts do: pinned and device pools
//! hand buffers out in the order they were freed, see [`crate::memory::pool`]) join one
//! open copy of up to [`GROUP_BYTES`] (less where the layout region is small: a sixth of
//! it, so every copy in flight, the one filling and the application's buffers fit),
//! issued when it is full, when a burst does not continue it, when a pool runs dry, when
//! the caller waits, or when the worker finds its port idle ([`RxStage::flush`]). A quiet
//! queue therefore pays no extra latency; a busy one trades a few bursts of it for
//! bandwidth.

use crate::burst::Burst;
use crate::config::MemoryKind;
pub use crate::config::StageMode;
use crate::copy_helpers::{CopyHelpers, CopyJob, copy_with};
use crate::memory::{RegionId, RegionSet};
use crate::plan::StagePlan;
use std::collections::VecDeque;
use std::sync::Arc;

/// Why a burst could not be staged.
#[derive(Debug)]
pub enum StageError {
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
    /// Waits for the GPU (its table slot's mark) before it is handed back.
    #[cfg(feature = "cuda")]
    on_gpu: bool,
    /// The last burst of its copy: handing it back frees the copy's table slot.
    #[cfg(feature = "cuda")]
    ends_copy: bool,
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
            ends_copy: false,
            #[cfg(feature = "cuda")]
            finish: Vec::new(),
            #[cfg(feature = "cuda")]
            slot: 0,
        }
    }
}

/// The stage of one RX queue.
pub struct RxStage {
    regions: Arc<RegionSet>,
    layout: Vec<RegionId>,
    /// Header-data split boundary (the first region's buf_size) with two regions.
    split: Option<usize>,
    moves: Vec<Move>,
    in_flight: VecDeque<InFlight>,
    #[cfg(feature = "cuda")]
    gpu: Option<GpuPath>,
    /// The copy growing from consecutive bursts, not issued yet (its bursts are the newest
    /// in `in_flight`).
    #[cfg(feature = "cuda")]
    open: Option<OpenCopy>,
    /// Copies issued whose bursts are not all handed back (each holds a table slot).
    #[cfg(feature = "cuda")]
    copies_in_flight: usize,
    /// GPU copies (or launches) issued since the stage was made.
    #[cfg(feature = "cuda")]
    copies_issued: u64,
    /// Bytes at which the open copy is issued: [`GROUP_BYTES`], or less where the layout
    /// region is small (each copy in flight, the one filling and the application's share
    /// all need buffers of it).
    #[cfg(feature = "cuda")]
    group_bytes: usize,
    /// Threads that share its CPU copies (`stage_core` with more than one core).
    helpers: Option<CopyHelpers>,
}

/// A copy being grown from consecutive bursts.
#[cfg(feature = "cuda")]
struct OpenCopy {
    span: SpanCopy,
    /// The table slot it will be marked in (reserved when it opened).
    slot: usize,
    bursts: usize,
    /// Its source is the slot's staging, where pageable bursts were gathered (only such
    /// bursts join it).
    gathered: bool,
}

/// Bytes at which an open copy is issued (on the H200, back-to-back copies of 4 MiB
/// reached 0.95 of a large pinned copy, 2 MiB ones 0.9, 256 KiB ones 0.5).
#[cfg(feature = "cuda")]
pub const GROUP_BYTES: usize = 4 << 20;

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
    /// Copy mode with copy helpers: the runs gathered before their uploads (moves
    /// `from..to`, device address, staging offset, bytes), kept across bursts.
    uploads: Vec<Upload>,
}

/// One run of copy mode's pageable moves: gathered into staging at `at`, then one copy of
/// `span` bytes to `dst`.
#[cfg(feature = "cuda")]
struct Upload {
    moves: std::ops::Range<usize>,
    dst: u64,
    at: usize,
    span: usize,
}

fn gpu_side(regions: &RegionSet, r: RegionId) -> bool {
    regions.get(r).kind() == MemoryKind::Device
}

/// Bursts in flight at most (one per GPU argument table).
#[cfg(feature = "cuda")]
const DEPTH: usize = gpudirect::kernels::TABLE_SLOTS;

impl RxStage {
    /// The stage the plan gave a queue with `layout` regions (whether a queue needs one,
    /// where it splits and which GPU it uses are the plan's decisions, see
    /// [`crate::plan::StagePlan`]). `batch` is the most packets per burst.
    pub fn new(
        regions: &Arc<RegionSet>,
        layout: &[RegionId],
        batch: usize,
        plan: &StagePlan,
    ) -> Result<Self, gpudirect::GpuError> {
        let split = plan.split_header_bytes;
        let mode = plan.mode;
        #[cfg(not(feature = "cuda"))]
        let _ = mode;
        // A sixth of the smallest layout region, at most GROUP_BYTES.
        #[cfg(feature = "cuda")]
        let group_bytes = layout
            .iter()
            .map(|&r| {
                let region = regions.get(r);
                region.num_bufs() * region.stride() / (DEPTH + 2)
            })
            .min()
            .unwrap_or(GROUP_BYTES)
            .min(GROUP_BYTES);
        Ok(Self {
            regions: regions.clone(),
            layout: layout.to_vec(),
            split,
            moves: Vec::with_capacity(batch * 2),
            in_flight: VecDeque::new(),
            helpers: None,
            #[cfg(feature = "cuda")]
            open: None,
            #[cfg(feature = "cuda")]
            copies_in_flight: 0,
            #[cfg(feature = "cuda")]
            copies_issued: 0,
            #[cfg(feature = "cuda")]
            group_bytes,
            #[cfg(feature = "cuda")]
            gpu: match plan.gpu {
                None => None,
                Some(ordinal) => {
                    // Copy mode into one device region may gather pageable bursts into a
                    // slot up to a whole group.
                    let joins_gathers = mode == StageMode::Copy
                        && split.is_none()
                        && matches!(layout, [r] if regions.get(*r).kind() == MemoryKind::Device);
                    let slot_bytes = (batch
                        * layout
                            .iter()
                            .map(|&r| regions.get(r).stride())
                            .max()
                            .unwrap_or(0))
                    .max(4096)
                    .max(if joins_gathers { group_bytes } else { 0 });
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
                        uploads: Vec::with_capacity(batch),
                    })
                }
            },
        })
    }

    /// Shares its CPU copies (pageable packets gathered into pinned staging, host-to-host
    /// splits) with `helpers`.
    pub fn with_copy_helpers(mut self, helpers: CopyHelpers) -> Self {
        self.helpers = Some(helpers);
        self
    }

    /// True when another burst can be submitted now. (A burst that needs a new copy while
    /// every table slot is taken still comes back as [`StageError::NoBuffers`].)
    pub fn has_room(&self) -> bool {
        #[cfg(feature = "cuda")]
        if self.gpu.is_some() {
            return self.open.is_some() || self.copies_in_flight < DEPTH;
        }
        true
    }

    /// Issues the open copy now (the port went idle, or the caller is about to wait).
    pub(crate) fn flush(&mut self) -> Result<(), StageError> {
        #[cfg(feature = "cuda")]
        if let Some(open) = self.open.take() {
            let gpu = self.gpu.as_mut().expect("an open copy has a GPU path");
            if let Err(e) = gpu.issue_span(&open.span, open.slot) {
                // Its bursts are the newest in flight; none of them will be marked.
                let mut packets = 0;
                for _ in 0..open.bursts {
                    packets += self
                        .in_flight
                        .pop_back()
                        .expect("the copy's bursts")
                        .out
                        .len();
                }
                return Err(StageError::Failed {
                    packets: packets as u64,
                    reason: format!("GPU copy failed: {e}"),
                });
            }
            self.copies_in_flight += 1;
            self.copies_issued += 1;
            self.in_flight
                .back_mut()
                .expect("the copy's last burst")
                .ends_copy = true;
        }
        Ok(())
    }

    /// Flushes before `burst` goes another way; on failure `burst` is lost with the copy.
    fn flush_before(&mut self, burst: &Burst) -> Result<(), StageError> {
        self.flush().map_err(|e| match e {
            StageError::Failed { packets, reason } => StageError::Failed {
                packets: packets + burst.len() as u64,
                reason,
            },
            other => other,
        })
    }

    /// A table slot for a new copy, or `None` while every slot is in use.
    #[cfg(feature = "cuda")]
    fn take_slot(&mut self) -> Option<usize> {
        if self.copies_in_flight + usize::from(self.open.is_some()) >= DEPTH {
            return None;
        }
        let gpu = self.gpu.as_mut()?;
        let slot = gpu.next_slot;
        gpu.next_slot = (slot + 1) % DEPTH;
        Some(slot)
    }

    /// GPU copies (or copy launches) issued so far: with [`RxStage::submit`]'s count of
    /// bursts, how well bursts coalesce.
    #[cfg(feature = "cuda")]
    pub fn copies_issued(&self) -> u64 {
        self.copies_issued
    }

    /// Bursts submitted and not yet handed back.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts moving `burst` into the queue's layout; [`RxStage::completed`] hands it back.
    /// A burst already in the layout is handed back as it is. Call only with
    /// [`RxStage::has_room`].
    pub fn submit(&mut self, burst: Burst) -> Result<(), StageError> {
        if burst.is_empty() || self.in_layout(&burst) {
            self.flush_before(&burst)?;
            let empty = Burst::empty(self.regions.clone(), burst.port(), burst.queue(), 0);
            self.in_flight.push_back(InFlight::done(burst, empty));
            return Ok(());
        }
        let n = burst.len();
        let allocate = || {
            Burst::allocate(
                self.regions.clone(),
                burst.port(),
                burst.queue(),
                &self.layout,
                n,
            )
        };
        // Copy mode into one device region: the output descriptors are the source's,
        // written once (lengths, flows and times included), and the one-copy paths below
        // may take the burst (`shaped`).
        #[cfg(feature = "cuda")]
        let (out, shaped) = match self
            .copies_into_one_device_region()
            .then(|| Burst::allocate_like(&burst, self.layout[0]))
        {
            Some(Ok(out)) => (Some(out), true),
            Some(Err(crate::burst::AllocateLike::NoBuffers)) => (None, true),
            // Not single-segment packets that fit: the general path says why.
            Some(Err(crate::burst::AllocateLike::Shape)) | None => (allocate(), false),
        };
        #[cfg(not(feature = "cuda"))]
        let out = allocate();
        let Some(mut out) = out else {
            // Buffers held by the open copy come back only once it is issued.
            self.flush_before(&burst)?;
            return Err(StageError::NoBuffers(burst));
        };
        #[cfg(feature = "cuda")]
        if shaped && let Some(span) = self.contiguous_span(&burst, &out) {
            return self.submit_span(span, out, burst);
        }
        #[cfg(feature = "cuda")]
        if shaped && let Some((dst, width)) = self.pageable_upload(&burst, &out) {
            return self.submit_pageable(burst, out, dst, width);
        }
        #[cfg(feature = "cuda")]
        {
            self.flush_before(&burst)?;
            if self.gpu.is_some() && self.copies_in_flight >= DEPTH {
                return Err(StageError::NoBuffers(burst));
            }
        }
        self.plan_moves(&burst, &mut out)?;
        self.issue_moves(out, burst)
    }

    /// Every packet of `burst` is already in the queue's layout (a run of the one region,
    /// or each segment in its region).
    fn in_layout(&self, burst: &Burst) -> bool {
        match burst.run() {
            Some(run) => self.layout == [run.region],
            None => burst.packets().iter().all(|p| {
                p.segments().len() == self.layout.len()
                    && p.segments()
                        .iter()
                        .zip(&self.layout)
                        .all(|(s, r)| s.region == *r)
            }),
        }
    }

    /// Lays each single-segment packet of `burst` out over `out`'s segments (split at
    /// `split` where the layout has two regions) and records the copies in `moves`; flow
    /// ids and times go along.
    fn plan_moves(&mut self, burst: &Burst, out: &mut Burst) -> Result<(), StageError> {
        let n = burst.len();
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
        Ok(())
    }

    /// Does the host-to-host copies of `moves` now and, where one side is GPU memory,
    /// issues the GPU copy; `out` is handed back once they are done.
    fn issue_moves(&mut self, out: Burst, burst: Burst) -> Result<(), StageError> {
        let failed = |reason| StageError::Failed {
            packets: burst.len() as u64,
            reason,
        };
        let regions = self.regions.clone();
        let on_gpu = |r| gpu_side(&regions, r);
        // Host to host: plain copies, done now.
        let host_copies = self
            .moves
            .iter()
            .filter(|m| !on_gpu(m.src_region) && !on_gpu(m.dst_region))
            .map(|m| CopyJob {
                src: m.src,
                dst: m.dst,
                len: m.len as usize,
            });
        // SAFETY: both ranges of each copy lie in host-mapped buffers this stage owns for
        // the call (the source burst and the freshly allocated output), which no two
        // copies share.
        unsafe { copy_with(self.helpers.as_mut(), host_copies) };
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
            let slot = self.take_slot().expect("a slot is free (checked above)");
            let gpu = self
                .gpu
                .as_mut()
                .expect("a GPU path exists for device regions");
            let finish = gpu
                .submit(&regions, &self.moves, slot, self.helpers.as_mut())
                .map_err(|e| failed(format!("GPU copy failed: {e}")))?;
            self.copies_in_flight += 1;
            self.copies_issued += 1;
            self.in_flight.push_back(InFlight {
                out,
                _source: burst,
                on_gpu: true,
                ends_copy: true,
                finish,
                slot,
            });
            Ok(())
        }
        #[cfg(not(feature = "cuda"))]
        Err(failed("this build has no CUDA support".into()))
    }

    /// The oldest submitted burst once its copies finished (arrival order is kept).
    pub(crate) fn completed(&mut self) -> Option<Result<Burst, StageError>> {
        let front = self.in_flight.front()?;
        #[cfg(feature = "cuda")]
        if self
            .open
            .as_ref()
            .is_some_and(|o| self.in_flight.len() <= o.bursts)
        {
            // Every burst in flight, the oldest too, belongs to the copy not issued yet.
            return None;
        }
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
    pub fn wait_oldest(&mut self) -> Option<Result<Burst, StageError>> {
        if let Err(e) = self.flush() {
            return Some(Err(e));
        }
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
        #[cfg(feature = "cuda")]
        if f.ends_copy {
            self.copies_in_flight -= 1;
        }
        StageError::Failed {
            packets: f.out.len() as u64,
            reason,
        }
    }

    fn finish_front(&mut self) -> Burst {
        let f = self.in_flight.pop_front().expect("a burst in flight");
        #[cfg(feature = "cuda")]
        if f.ends_copy {
            self.copies_in_flight -= 1;
        }
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

/// Items per kernel launch (the argument table's size).
#[cfg(feature = "cuda")]
const MAX_ITEMS: usize = gpudirect::kernels::MAX_ITEMS;

#[cfg(feature = "cuda")]
mod digest;
#[cfg(feature = "cuda")]
pub use digest::{DeviceDigest, Digests, QUEUED_DIGESTS};
#[cfg(feature = "cuda")]
mod gpu;
mod span;
#[cfg(feature = "cuda")]
use span::{SpanCopy, run_end};
#[cfg(test)]
mod tests;
