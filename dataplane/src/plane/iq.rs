//! An RX queue whose packets carry radio samples (`protocol: {vrt: ...}` or
//! `{ecpri_uplane: ...}`), taken as batches of complex samples: each burst is decoded
//! where the application polls, on its thread, by the CPU into an [`IqBatch`], or, with a
//! `sample_region`, by the GPU into one of that region's buffers ([`IqGpuBatch`]).

use super::gpu::{PlaneGpu, copy_on_gpu, decode_on_gpu, iq_decode_for, open_gpu};
use super::queues::{RecvError, RxQueue};
use super::spead::protocol_payload;
use crate::memory::{HeldBuffers, RegionSet};
use crate::plan::IqPlan;
use crate::protocol::iq::{
    IqBatch, IqCounters, IqDecoder, IqFormat, IqPacket, Precision, StoredRanges,
};
use std::sync::Arc;
use std::time::Duration;

/// Decoded samples of a radio queue (see [`super::DataPlane::take_iq_stream`]).
pub struct IqStream {
    rx: RxQueue,
    decoder: IqDecoder,
    format: IqFormat,
    frames: bool,
    spare: Vec<IqBatch>,
    not_udp: u64,
    gpu: Option<IqGpu>,
}

/// The GPU side of a radio queue: its `sample_region`'s buffers, the first gathering
/// each burst's stored samples, the others taking decoded bursts in turn.
struct IqGpu {
    buffers: HeldBuffers,
    gpu: PlaneGpu,
    /// Output buffers not held by the application.
    free: Vec<usize>,
    ranges: StoredRanges,
}

/// The held buffer each burst's stored samples are gathered into.
const GATHER: usize = 0;

/// A burst's samples decoded by the GPU into a buffer of the queue's `sample_region`:
/// interleaved `[i0, q0, i1, q1, ...]` as `f32`, or half bits (`u16`) at
/// [`Precision::F16`]. Hand it back with [`IqStream::recycle_gpu`].
#[derive(Debug)]
pub struct IqGpuBatch {
    /// The packets, in arrival order, their samples numbered within this batch.
    pub packets: Vec<IqPacket>,
    /// Complex samples decoded.
    pub samples: usize,
    /// The samples' type.
    pub precision: Precision,
    address: u64,
    buffer: usize,
}

impl IqGpuBatch {
    /// The device address of the first sample.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Bytes of decoded samples from [`IqGpuBatch::address`].
    pub fn bytes(&self) -> usize {
        self.samples
            * 2
            * match self.precision {
                Precision::F32 => 4,
                Precision::F16 => 2,
            }
    }
}

impl IqStream {
    pub(super) fn new(
        rx: RxQueue,
        plan: &IqPlan,
        regions: &Arc<RegionSet>,
    ) -> Result<Self, String> {
        let gpu = match plan.sample_region {
            None => None,
            Some(id) => {
                let region = regions.get(id);
                let buffers = HeldBuffers::take_all(regions, id, region.buf_size())?;
                if buffers.count() < 3 {
                    return Err(format!(
                        "sample region {} has {} free buffers, 3 are needed",
                        region.name(),
                        buffers.count()
                    ));
                }
                let gpu = open_gpu(buffers.affinity())?;
                Some(IqGpu {
                    free: (GATHER + 1..buffers.count()).rev().collect(),
                    buffers,
                    gpu,
                    ranges: StoredRanges::default(),
                })
            }
        };
        Ok(Self {
            rx,
            decoder: IqDecoder::new(plan.format, plan.precision),
            format: plan.format,
            frames: plan.frames,
            spare: Vec::new(),
            not_udp: 0,
            gpu,
        })
    }

    /// The samples of the next burst, decoded by the CPU, waiting up to `timeout`:
    /// `Ok(None)` when none came in time. A batch can hold no packet when none of the
    /// burst's could be decoded (see [`IqStream::counters`]). A queue with a
    /// `sample_region` is read with [`IqStream::recv_gpu`] instead.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<IqBatch>, RecvError> {
        if self.gpu.is_some() {
            return Err(RecvError::Failed(
                "this radio queue decodes on the GPU (sample_region): use recv_gpu".into(),
            ));
        }
        let Some(burst) = self.rx.recv(timeout)? else {
            return Ok(None);
        };
        let mut batch = self
            .spare
            .pop()
            .unwrap_or_else(|| IqBatch::new(self.decoder.precision()));
        for i in 0..burst.len() {
            let Some(packet) = protocol_payload(&burst, i, self.frames, &mut self.not_udp) else {
                continue;
            };
            // Undecodable packets are counted by the decoder.
            let _ = self
                .decoder
                .decode(packet, burst.packets()[i].timestamp_ns, &mut batch);
        }
        Ok(Some(batch))
    }

    /// The samples of the next burst, decoded by the GPU into a buffer of the queue's
    /// `sample_region`: the stored samples are gathered from the pinned receive buffers
    /// into GPU memory by one batched copy, then decoded by one kernel. `Ok(None)` when no
    /// burst came within `timeout`, or at once while the application holds every sample
    /// buffer (the burst then waits in the queue's ring).
    pub fn recv_gpu(&mut self, timeout: Duration) -> Result<Option<IqGpuBatch>, RecvError> {
        let Some(g) = self.gpu.as_mut() else {
            return Err(RecvError::Failed(
                "this radio queue decodes on the CPU (no sample_region): use recv".into(),
            ));
        };
        let Some(&out) = g.free.last() else {
            return Ok(None);
        };
        let Some(burst) = self.rx.recv(timeout)? else {
            return Ok(None);
        };
        let mut packets = Vec::with_capacity(burst.len());
        let mut copies: Vec<(&[u8], usize, usize)> = Vec::new();
        let (mut samples, mut gathered) = (0, 0);
        for i in 0..burst.len() {
            let Some(packet) = protocol_payload(&burst, i, self.frames, &mut self.not_udp) else {
                continue;
            };
            let ts = burst.packets()[i].timestamp_ns;
            if self
                .decoder
                .locate(packet, ts, samples, &mut g.ranges, &mut packets)
                .is_err()
            {
                continue;
            }
            samples += packets.last().map_or(0, |p| p.samples);
            for &(at, len) in &g.ranges.ranges {
                copies.push((&packet[at..at + len], GATHER, gathered));
                gathered += len;
            }
        }
        let failed = |what: &str, e: String| RecvError::Failed(format!("{what}: {e}"));
        if gathered > 0 {
            copy_on_gpu(&mut g.buffers, &mut g.gpu, &copies)
                .map_err(|e| failed("gathering samples on the GPU", e))?;
            let decode = iq_decode_for(self.format, gathered);
            let half = self.decoder.precision() == Precision::F16;
            decode_on_gpu(&mut g.buffers, &mut g.gpu, (GATHER, out), decode, half)
                .map_err(|e| failed("decoding samples on the GPU", e))?;
        }
        drop(copies);
        drop(burst);
        g.free.pop();
        Ok(Some(IqGpuBatch {
            packets,
            samples,
            precision: self.decoder.precision(),
            address: g.buffers.address(out).expect("a held buffer"),
            buffer: out,
        }))
    }

    /// Gives a batch back, to be filled again (no allocation per burst once warm).
    pub fn recycle(&mut self, mut batch: IqBatch) {
        if batch.samples_precision() == self.decoder.precision() {
            batch.clear();
            self.spare.push(batch);
        }
    }

    /// Gives a GPU batch's buffer back, to take another burst. A batch of another stream
    /// is ignored.
    pub fn recycle_gpu(&mut self, batch: IqGpuBatch) {
        if let Some(g) = self.gpu.as_mut()
            && g.buffers.address(batch.buffer) == Some(batch.address)
            && batch.buffer != GATHER
            && !g.free.contains(&batch.buffer)
        {
            g.free.push(batch.buffer);
        }
    }

    /// What the decoder counted so far.
    pub fn counters(&self) -> IqCounters {
        self.decoder.counters()
    }

    /// Frames of a raw queue that carried no UDP datagram (ARP, for instance).
    pub fn frames_not_udp(&self) -> u64 {
        self.not_udp
    }
}
