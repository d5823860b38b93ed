//! Reorder by sequence number (`rx.reorder_configs`), on the application's side of an RX
//! queue, as in the reference: [`crate::plane::RxQueue::poll`] takes the queue's bursts,
//! holds the packets of reordered flows until a batch is complete (its
//! `packets_per_batch` arrivals) or the queue's `timeout_us` passed since its first packet,
//! then puts their payloads into one buffer of the reorder's region, each in slot
//! `sequence % packets_per_batch`, and hands that buffer over as a one-packet aggregate
//! burst with [`ReorderInfo`]. Slots no packet filled are zero. Packets of other flows pass
//! through unchanged.
//!
//! `reorder_type: cpu` runs [`gpudirect::reorder::reorder_cpu`]; `gpu` runs the CUDA kernel
//! of [`gpudirect::Gpu`] on the GPU of the output region and returns when it finished.

use crate::burst::Burst;
use crate::config::ReorderKind;
use crate::descriptor::PortIndex;
use crate::descriptor::RegionId;
pub use crate::descriptor::ReorderInfo;
use crate::memory::RegionSet;
use crate::plan::QueuePlan;
use gpudirect::reorder::ReorderSpec;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters of one queue's reorders.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderCounts {
    /// Complete batches delivered.
    pub batches: u64,
    /// Incomplete batches flushed by the timeout.
    pub timeout_batches: u64,
    /// Packets placed into batches.
    pub aggregated_packets: u64,
    /// Packets of other flows passed through.
    pub passthrough_packets: u64,
}

#[cfg(feature = "cuda")]
type GpuBackend = Option<gpudirect::Gpu>;
#[cfg(not(feature = "cuda"))]
type GpuBackend = ();

struct Plan {
    name: String,
    kind: ReorderKind,
    spec: ReorderSpec,
    output: RegionId,
    /// When the first packet of the batch being collected arrived (`None`: none staged).
    first_at: Option<Instant>,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    gpu: GpuBackend,
}

/// Why a reorder could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReorderError {
    /// The GPU failed.
    #[error("reorder `{name}`: {reason}")]
    Gpu {
        /// Reorder name.
        name: String,
        /// What failed.
        reason: String,
    },
}

/// The reorders of one RX queue.
pub(crate) struct QueueReorder {
    regions: Arc<RegionSet>,
    plans: Vec<Plan>,
    /// Packets of each plan's batch being collected (the plan's index).
    staged: Vec<Burst>,
    plan_of_flow: HashMap<u32, usize>,
    timeout: Option<Duration>,
    ready: VecDeque<Burst>,
    counts: ReorderCounts,
    /// Set when a batch could not be written (no free output buffer): no more input is
    /// taken until it can, so the backlog stays in the queue's ring, not here.
    blocked: bool,
}

impl QueueReorder {
    /// The reorders the plan gave queue `q`, or `None` when it has none.
    pub(crate) fn for_queue(q: &QueuePlan, regions: &Arc<RegionSet>) -> Option<Self> {
        let mut plans = Vec::new();
        let mut staged = Vec::new();
        let mut plan_of_flow = HashMap::new();
        for r in &q.reorders {
            for id in &r.flow_ids {
                plan_of_flow.insert(*id, plans.len());
            }
            plans.push(Plan {
                name: r.name.clone(),
                kind: r.kind,
                spec: r.spec,
                output: r.output,
                first_at: None,
                gpu: Default::default(),
            });
            staged.push(Burst::empty(
                regions.clone(),
                PortIndex(q.interface as u16),
                q.id,
                0,
            ));
        }
        if plans.is_empty() {
            return None;
        }
        Some(Self {
            regions: regions.clone(),
            plans,
            staged,
            plan_of_flow,
            timeout: (q.timeout_us > 0).then(|| Duration::from_micros(q.timeout_us)),
            ready: VecDeque::new(),
            counts: ReorderCounts::default(),
            blocked: false,
        })
    }

    pub(crate) fn counts(&self) -> ReorderCounts {
        self.counts
    }

    /// The next aggregate or passthrough burst as of `now` (batches whose first packet
    /// is older than the queue's timeout are flushed incomplete); `next_input` yields the
    /// queue's raw bursts.
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        mut next_input: impl FnMut() -> Option<Burst>,
    ) -> Result<Option<Burst>, ReorderError> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Ok(Some(b));
            }
            self.flush_full_and_expired(now)?;
            if let Some(b) = self.ready.pop_front() {
                return Ok(Some(b));
            }
            if self.blocked {
                return Ok(None);
            }
            let Some(mut raw) = next_input() else {
                return Ok(None);
            };
            let plan_of_flow = &self.plan_of_flow;
            raw.sort_out(&mut self.staged, |p| plan_of_flow.get(&p.flow_id).copied());
            for (plan, staged) in self.plans.iter_mut().zip(&self.staged) {
                if plan.first_at.is_none() && !staged.is_empty() {
                    plan.first_at = Some(now);
                }
            }
            if !raw.is_empty() {
                self.counts.passthrough_packets += raw.len() as u64;
                self.ready.push_back(raw);
            }
        }
    }

    /// Writes every plan's complete batches, and its incomplete one once the timeout
    /// passed since its first packet.
    fn flush_full_and_expired(&mut self, now: Instant) -> Result<(), ReorderError> {
        self.blocked = false;
        for k in 0..self.plans.len() {
            loop {
                let plan = &self.plans[k];
                let ppb = plan.spec.packets_per_batch() as usize;
                let staged = &self.staged[k];
                let full = staged.len() >= ppb;
                let expired = !staged.is_empty()
                    && self
                        .timeout
                        .zip(plan.first_at)
                        .is_some_and(|(t, at)| now.saturating_duration_since(at) >= t);
                if !full && !expired {
                    break;
                }
                match self.write_batch(k, full, now)? {
                    Some(out) => self.ready.push_back(out),
                    None => {
                        self.blocked = true;
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes the first batch of plan `k`; `None` when the output region has no free
    /// buffer (the batch stays staged).
    fn write_batch(
        &mut self,
        k: usize,
        full: bool,
        now: Instant,
    ) -> Result<Option<Burst>, ReorderError> {
        let regions = self.regions.clone();
        let plan = &mut self.plans[k];
        let staged = &mut self.staged[k];
        let ppb = plan.spec.packets_per_batch() as usize;
        let out_region = regions.get(plan.output);
        let mut index = [0u32];
        if !out_region.alloc_bulk(&mut index) {
            return Ok(None);
        }
        let aggregate_len = plan.spec.batch_bytes();
        let (port, queue) = (staged.port(), staged.queue());
        let mut out = Burst::empty(regions.clone(), port, queue, 1);
        out.push_owned(plan.output, index[0], aggregate_len as u32, 0);
        // The batch: the first `ppb` staged packets.
        let mut batch = Burst::empty(regions.clone(), port, queue, ppb);
        batch.take_from(staged, ppb);
        // Packets long enough to carry a sequence number are placed, the rest skipped
        // (by the CPU code and the kernel alike).
        let (mut placed, mut payload_bytes) = (0usize, 0u64);
        for p in batch.packets() {
            if p.len() >= plan.spec.sequence().end_byte() {
                placed += 1;
                payload_bytes += (p.len() as u64)
                    .saturating_sub(plan.spec.payload_byte_offset as u64)
                    .min(plan.spec.in_slot_bytes as u64);
            }
        }
        let batch_id = match plan.kind {
            ReorderKind::Cpu => {
                let packets: Vec<&[u8]> = (0..batch.len())
                    .map(|i| batch.data(i, 0).expect("validated: host-readable source"))
                    .collect();
                let dst = out
                    .buffer_mut(0, 0)
                    .expect("validated: host-writable output");
                dst[..aggregate_len].fill(0);
                gpudirect::reorder::reorder_cpu(&plan.spec, &packets, dst).0
            }
            ReorderKind::Gpu => {
                let ordinal = out_region.affinity();
                let (id, stream) = gpu_reorder(plan, ordinal, &batch, out.segment_addr(0, 0))?;
                out.set_gpu_stream(stream);
                id
            }
        };
        plan.first_at = (!staged.is_empty()).then_some(now);
        if full {
            self.counts.batches += 1;
        } else {
            self.counts.timeout_batches += 1;
        }
        self.counts.aggregated_packets += placed as u64;
        out.set_reorder_info(ReorderInfo {
            name: plan.name.clone(),
            batch_id,
            source_packets: placed as u32,
            payload_bytes,
            packets_per_batch: ppb as u32,
            slot_bytes: plan.spec.out_slot_bytes(),
            aggregate_len,
            timed_out: !full,
        });
        // The source packets go back to their pool here: their bytes are in the output.
        drop(batch);
        Ok(Some(out))
    }
}

#[cfg(feature = "cuda")]
fn gpu_reorder(
    plan: &mut Plan,
    ordinal: u32,
    batch: &Burst,
    out: u64,
) -> Result<(Option<u32>, u64), ReorderError> {
    let err = |e: gpudirect::GpuError| ReorderError::Gpu {
        name: plan.name.clone(),
        reason: e.to_string(),
    };
    if plan.gpu.is_none() {
        plan.gpu = Some(gpudirect::Gpu::new(ordinal).map_err(err)?);
    }
    let gpu = plan.gpu.as_mut().expect("just set");
    gpu.bind().map_err(err)?;
    let packets: Vec<(u64, u32)> = (0..batch.len())
        .map(|i| (batch.segment_addr(i, 0), batch.packets()[i].len() as u32))
        .collect();
    // SAFETY: validation put the source and output in device or host_pinned memory, which
    // the GPU reaches at these addresses; this burst and `out` own the buffers until the
    // call returns (it waits for the kernel).
    let batch_id = unsafe { gpu.reorder(&plan.spec, &packets, out) }.map_err(err)?;
    let stream = gpu.slot_stream(0).cu_stream() as u64;
    Ok((batch_id, stream))
}

#[cfg(not(feature = "cuda"))]
fn gpu_reorder(
    plan: &mut Plan,
    _ordinal: u32,
    _batch: &Burst,
    _out: u64,
) -> Result<(Option<u32>, u64), ReorderError> {
    Err(ReorderError::Gpu {
        name: plan.name.clone(),
        reason: "this build has no CUDA support; rebuild with --features cuda".into(),
    })
}
