//! An RX queue whose packets carry SPEAD (`protocol: {spead: ...}`), taken as chunks: the
//! queue's bursts are decoded and placed where the application polls, on its thread.

use super::gpu::{PlaneGpu, copy_on_gpu, open_gpu};
use super::queues::{RecvError, RxQueue};
use crate::config::MemoryKind;
use crate::memory::{HeldBuffers, RegionId, RegionSet};
use crate::plan::SpeadPlan;
use crate::protocol::spead::chunks::{Chunk, ChunkAssembler, SpeadCounters};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The protocol's bytes of packet `i`: the datagram (sockets), or the UDP payload of the
/// frame (raw engines; a frame without one is counted in `not_udp`). A planned protocol
/// queue has one host-visible segment.
pub(super) fn protocol_payload<'b>(
    burst: &'b crate::burst::Burst,
    i: usize,
    frames: bool,
    not_udp: &mut u64,
) -> Option<&'b [u8]> {
    let bytes = burst.data(i, 0)?;
    if !frames {
        return Some(bytes);
    }
    match crate::packet::parse(bytes) {
        Ok(v) if v.udp_ports.is_some() => Some(v.payload),
        _ => {
            *not_udp += 1;
            None
        }
    }
}

/// Chunks of a SPEAD queue (see [`super::DataPlane::take_spead_stream`]).
pub struct SpeadStream {
    rx: RxQueue,
    assembler: ChunkAssembler,
    frames: bool,
    ready: VecDeque<Chunk>,
    not_udp: u64,
    /// The chunks' memory when the plan puts them in a region (`chunk_region`).
    region: Option<ChunkRegion>,
}

/// Chunk memories in a region's buffers, taken from its pool for the stream's life.
struct ChunkRegion {
    buffers: HeldBuffers,
    /// GPU memory: the GPU copies each payload from the packet's pinned buffer.
    gpu: Option<PlaneGpu>,
}

impl ChunkRegion {
    fn new(regions: &Arc<RegionSet>, id: RegionId, plan: &SpeadPlan) -> Result<Self, String> {
        let p = plan.placement;
        let chunk_bytes = p.heaps_per_chunk as usize * p.heap_bytes as usize;
        let buffers = HeldBuffers::take_all(regions, id, chunk_bytes)?;
        let gpu = match buffers.kind() {
            MemoryKind::Device => Some(open_gpu(buffers.affinity())?),
            _ => None,
        };
        Ok(Self { buffers, gpu })
    }
}

impl SpeadStream {
    pub(super) fn new(
        rx: RxQueue,
        plan: &SpeadPlan,
        regions: &Arc<RegionSet>,
    ) -> Result<Self, String> {
        let region = plan
            .chunk_region
            .map(|id| ChunkRegion::new(regions, id, plan))
            .transpose()?;
        let assembler = match &region {
            Some(r) => ChunkAssembler::with_slots(plan.flavour, plan.placement, r.buffers.count()),
            None => ChunkAssembler::new(plan.flavour, plan.placement),
        }
        .ok_or("a zero size in the SPEAD placement")?;
        Ok(Self {
            rx,
            assembler,
            frames: plan.frames,
            ready: VecDeque::new(),
            not_udp: 0,
            region,
        })
    }

    /// The bytes of a chunk whose memory the CPU can read: its `data`, or its buffer of
    /// the `chunk_region` (host kinds). `None` for GPU memory (see
    /// [`SpeadStream::chunk_address`]) and for a chunk that is not this stream's.
    pub fn chunk_bytes<'a>(&'a self, chunk: &'a Chunk) -> Option<&'a [u8]> {
        match &self.region {
            None => Some(&chunk.data),
            Some(r) => r.buffers.bytes(chunk.slot()),
        }
    }

    /// Where a chunk's bytes are in its `chunk_region` (a device address for GPU memory),
    /// `chunk_bytes` long; `None` without a region, or for a chunk not of this stream.
    pub fn chunk_address(&self, chunk: &Chunk) -> Option<u64> {
        self.region.as_ref()?.buffers.address(chunk.slot())
    }

    /// The next chunk, oldest first, waiting up to `timeout` for the packets that retire
    /// one: `Ok(None)` when none was ready in time, and at once after the stream's end
    /// ([`SpeadStream::stopped`]) once every chunk came out.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Chunk>, RecvError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Ok(Some(c));
            }
            if self.assembler.stopped() {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(burst) = self.rx.recv(left)? else {
                return Ok(None);
            };
            // Chunks retired by this burst wait here until its GPU copies are done.
            let mut retired = Vec::new();
            // GPU chunks: the payloads to copy, borrowed from the burst until then.
            let mut copies: Vec<(&[u8], usize, usize)> = Vec::new();
            for i in 0..burst.len() {
                let Some(datagram) = protocol_payload(&burst, i, self.frames, &mut self.not_udp)
                else {
                    continue;
                };
                // Undecodable packets are counted by the assembler.
                let _ = match &mut self.region {
                    Some(ChunkRegion { gpu: Some(_), .. }) => self.assembler.ingest_placing(
                        datagram,
                        &mut |slot, at, bytes| copies.push((bytes, slot, at)),
                        &mut |c| retired.push(c),
                    ),
                    Some(region) => self.assembler.ingest_placing(
                        datagram,
                        // The assembler places within its own slots and chunks.
                        &mut |slot, at, bytes| {
                            region.buffers.write(slot, at, bytes);
                        },
                        &mut |c| retired.push(c),
                    ),
                    None => self.assembler.ingest(datagram, &mut |c| retired.push(c)),
                };
            }
            if let Some(ChunkRegion {
                buffers,
                gpu: Some(gpu),
            }) = &mut self.region
                && !copies.is_empty()
            {
                copy_on_gpu(buffers, gpu, &copies)
                    .map_err(|e| RecvError::Failed(format!("GPU copy into the chunks: {e}")))?;
            }
            drop(copies);
            drop(burst);
            self.ready.extend(retired);
        }
    }

    /// Gives a chunk back, to be filled again (no allocation per chunk).
    pub fn recycle(&mut self, chunk: Chunk) {
        self.assembler.recycle(chunk);
    }

    /// True once the stream's end arrived (a stream-stop packet).
    pub fn stopped(&self) -> bool {
        self.assembler.stopped()
    }

    /// What the assembler counted so far.
    pub fn counters(&self) -> SpeadCounters {
        self.assembler.counters()
    }

    /// Frames of a raw queue that carried no UDP datagram (ARP, for instance).
    pub fn frames_not_udp(&self) -> u64 {
        self.not_udp
    }

    /// Hands every chunk under construction over, oldest first (when the application
    /// stops reading a stream that never sends its end).
    pub fn flush(&mut self) -> Vec<Chunk> {
        let mut out: Vec<Chunk> = self.ready.drain(..).collect();
        self.assembler.flush(&mut |c| out.push(c));
        out
    }
}
