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
//! - `copy`: the CPU gathers the payloads into a pinned staging buffer, laid out like their
//!   destination buffers, and one asynchronous copy per run of adjacent destination buffers
//!   moves them (one per burst when the pool hands out neighbours, as it mostly does);
//! - `kernel` (the default): a GPU gather kernel reads the packets straight from pinned
//!   (GPU-mapped) memory and writes each to its buffer; packets in pageable memory are first
//!   gathered into the pinned staging buffer.
//!
//! The worker waits for the copies before it hands the burst over, so the application never
//! sees a buffer whose bytes are still in flight.

use crate::burst::Burst;
use crate::config::MemoryKind;
use crate::memory::{RegionId, RegionSet};
use std::sync::Arc;

/// How host bytes reach GPU memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageMode {
    /// Gather on the CPU into pinned memory, then asynchronous copies.
    Copy,
    /// A GPU kernel reads from pinned memory.
    Kernel,
}

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

/// The stage of one RX queue.
pub(crate) struct RxStage {
    regions: Arc<RegionSet>,
    layout: Vec<RegionId>,
    /// Header-data split boundary (the first region's buf_size) with two regions.
    split: Option<usize>,
    moves: Vec<Move>,
    #[cfg(feature = "cuda")]
    gpu: Option<GpuPath>,
}

#[cfg(feature = "cuda")]
struct GpuPath {
    gpu: gpudirect::Gpu,
    staging: gpudirect::PinnedBuffer,
    mode: StageMode,
    items: Vec<(u64, u64, u32)>,
    /// Device-to-host moves finished by the CPU after the GPU wrote them to staging.
    finish: Vec<(usize, u64, u32)>,
}

fn gpu_side(regions: &RegionSet, r: RegionId) -> bool {
    regions.get(r).kind() == MemoryKind::Device
}

impl RxStage {
    /// A stage for a queue with `layout` regions, or `None` when its packets need none
    /// (one host region). `batch` is the most packets per burst.
    pub(crate) fn for_queue(
        regions: &Arc<RegionSet>,
        layout: &[RegionId],
        batch: usize,
        mode: StageMode,
    ) -> Result<Option<Self>, String> {
        let any_device = layout.iter().any(|&r| gpu_side(regions, r));
        if layout.len() < 2 && !any_device {
            return Ok(None);
        }
        let split = (layout.len() == 2).then(|| regions.get(layout[0]).buf_size());
        if layout.len() > 2 {
            return Err(format!(
                "the software path splits packets into at most two segments (headers, payload); this queue has {}",
                layout.len()
            ));
        }
        #[cfg(not(feature = "cuda"))]
        let _ = (batch, mode);
        Ok(Some(Self {
            regions: regions.clone(),
            layout: layout.to_vec(),
            split,
            moves: Vec::with_capacity(batch * 2),
            #[cfg(feature = "cuda")]
            gpu: match layout.iter().find(|&&r| gpu_side(regions, r)) {
                None => None,
                Some(_) => {
                    let ordinal = device_ordinal(regions, layout);
                    let bytes = batch
                        * layout
                            .iter()
                            .map(|&r| regions.get(r).stride())
                            .max()
                            .unwrap_or(0);
                    let e = |e: gpudirect::GpuError| e.to_string();
                    Some(GpuPath {
                        gpu: gpudirect::Gpu::new(ordinal).map_err(e)?,
                        staging: gpudirect::PinnedBuffer::alloc(ordinal, bytes.max(4096))
                            .map_err(e)?,
                        mode,
                        items: Vec::with_capacity(batch),
                        finish: Vec::with_capacity(batch),
                    })
                }
            },
        }))
    }

    /// `burst` in the queue's layout: unchanged when it already is, otherwise copied into
    /// new buffers (the old ones go back to their pools).
    pub(crate) fn apply(&mut self, burst: Burst) -> Result<Burst, StageError> {
        let in_layout = burst.packets().iter().all(|p| {
            p.segments().len() == self.layout.len()
                && p.segments()
                    .iter()
                    .zip(&self.layout)
                    .all(|(s, r)| s.region == *r)
        });
        if burst.is_empty() || in_layout {
            return Ok(burst);
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
        self.moves.clear();
        let failed = |reason| StageError::Failed {
            packets: n as u64,
            reason,
        };
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
                let cap = self.regions.get(self.layout[seg]).buf_size();
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
        }
        self.run_moves().map_err(failed)?;
        // The old buffers go back only now: every copy out of them has finished.
        drop(burst);
        Ok(out)
    }

    fn run_moves(&mut self) -> Result<(), String> {
        let regions = self.regions.clone();
        let on_gpu = |r| gpu_side(&regions, r);
        // Host to host: plain copies.
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
        if self
            .moves
            .iter()
            .all(|m| !on_gpu(m.src_region) && !on_gpu(m.dst_region))
        {
            return Ok(());
        }
        #[cfg(feature = "cuda")]
        {
            let gpu = self
                .gpu
                .as_mut()
                .expect("a GPU path exists for device regions");
            gpu.run(&regions, &self.moves)
                .map_err(|e| format!("GPU copy failed: {e}"))
        }
        #[cfg(not(feature = "cuda"))]
        Err("this build has no CUDA support".into())
    }
}

#[cfg(feature = "cuda")]
fn device_ordinal(regions: &RegionSet, layout: &[RegionId]) -> u32 {
    layout
        .iter()
        .find(|&&r| gpu_side(regions, r))
        .map_or(0, |&r| regions.get(r).affinity())
}

#[cfg(feature = "cuda")]
impl GpuPath {
    /// Runs every move that touches GPU memory, then waits for them.
    fn run(&mut self, regions: &RegionSet, moves: &[Move]) -> Result<(), gpudirect::GpuError> {
        // Cheap when already current; the worker thread may differ from the creator.
        self.gpu.bind()?;
        let dev = |r| gpu_side(regions, r);
        let pinned = |r| regions.get(r).kind() == MemoryKind::HostPinned;
        let base = self.staging.as_ptr();
        let cap = self.staging.len();
        let mut used = 0usize;
        self.items.clear();
        self.finish.clear();
        let mut copy_mode_moves: Vec<Move> = Vec::new();
        for m in moves
            .iter()
            .filter(|m| dev(m.src_region) || dev(m.dst_region))
        {
            let reachable_src = dev(m.src_region) || pinned(m.src_region);
            let reachable_dst = dev(m.dst_region) || pinned(m.dst_region);
            if self.mode == StageMode::Copy && !dev(m.src_region) && dev(m.dst_region) {
                copy_mode_moves.push(*m);
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
                self.finish.push((used, m.dst, m.len));
                used += m.len as usize;
            }
            self.items.push((src, dst, m.len));
        }
        for chunk in self.items.chunks(crate::stage::MAX_ITEMS) {
            // SAFETY: every source and destination is device memory or pinned host memory
            // mapped for the GPU, owned by the bursts or staging until the sync below.
            unsafe { self.gpu.batched_copy(chunk) }?;
            if self.items.len() > crate::stage::MAX_ITEMS {
                self.gpu.sync()?;
            }
        }
        if !copy_mode_moves.is_empty() {
            self.copy_runs(regions, &mut copy_mode_moves, used)?;
        }
        self.gpu.sync()?;
        for &(at, dst, len) in &self.finish {
            // SAFETY: the GPU finished writing staging; `dst` is a host buffer of the new
            // burst.
            unsafe { std::ptr::copy_nonoverlapping(base.add(at), dst as *mut u8, len as usize) };
        }
        Ok(())
    }

    /// Copy mode: gathers into staging laid out like the destinations and issues one
    /// asynchronous copy per run of adjacent destination buffers.
    fn copy_runs(
        &mut self,
        regions: &RegionSet,
        moves: &mut [Move],
        mut used: usize,
    ) -> Result<(), gpudirect::GpuError> {
        moves.sort_unstable_by_key(|m| m.dst);
        let base = self.staging.as_ptr();
        let mut k = 0;
        while k < moves.len() {
            let stride = regions.get(moves[k].dst_region).stride() as u64;
            let mut end = k + 1;
            while end < moves.len()
                && moves[end].dst_region == moves[k].dst_region
                && moves[end].dst == moves[end - 1].dst + stride
            {
                end += 1;
            }
            let run = &moves[k..end];
            let d0 = run[0].dst;
            let span = (run[end - k - 1].dst - d0) as usize + run[end - k - 1].len as usize;
            assert!(
                used + span <= self.staging.len(),
                "staging sized for a burst"
            );
            for m in run {
                // SAFETY: host source of the burst; the staging range is inside the buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        m.src as *const u8,
                        base.add(used + (m.dst - d0) as usize),
                        m.len as usize,
                    )
                };
            }
            // SAFETY: pinned staging stays untouched until the sync; the destination run
            // lies in device buffers of the new burst.
            unsafe { self.gpu.copy_to_device(d0, base.add(used), span) }?;
            used += span;
            k = end;
        }
        Ok(())
    }
}

/// Items per kernel launch (the argument table's size).
#[cfg(feature = "cuda")]
const MAX_ITEMS: usize = gpudirect::kernels::MAX_ITEMS;
