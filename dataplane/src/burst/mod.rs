//! Bursts: batches of packets that own their buffers.
//!
//! A packet has up to [`MAX_SEGMENTS`] segments, one buffer each, in the order of its
//! queue's `memory_regions`. Dropping a [`Burst`] returns every buffer to its pool, so a
//! buffer can be neither leaked nor freed twice by the application.

pub use crate::descriptor::{MAX_SEGMENTS, Packet, Segment};
use crate::descriptor::{PortIndex, QueueId, RegionId, ReorderInfo};
use crate::memory::RegionSet;
use once_cell::race::OnceBox;
use std::sync::Arc;

mod frames;
mod moves;
mod run;
pub use frames::{Frames, FramesMut};
use run::IndexScratch;
pub use run::Run;

/// A batch of packets for one queue of one interface.
///
/// A burst made by [`Burst::allocate_run`] is a *run*: consecutive buffers of one region,
/// each one segment of the same length, with no flow id or time. It carries no
/// per-packet descriptors: lengths, addresses and freeing are worked out from the run,
/// so the threads it passes through (an engine, the GPU stage, the application) touch
/// no descriptor memory. Its descriptors are made on first demand ([`Burst::packets`]);
/// any change to one packet's descriptor turns it into an ordinary burst.
pub struct Burst {
    regions: Arc<RegionSet>,
    port: PortIndex,
    queue: QueueId,
    epoch: u64,
    /// The descriptors; empty while `run` is set.
    packets: Vec<Packet>,
    /// Set while the burst is a run.
    run: Option<Run>,
    /// A run's descriptors, made on the first read of them (one pointer: a burst stays
    /// small for the rings it travels in, and runs are rarely asked for descriptors).
    run_descriptors: OnceBox<Vec<Packet>>,
    /// Set on the aggregate bursts a reorder produces.
    reorder: Option<Box<ReorderInfo>>,
    /// The CUDA stream (raw `CUstream`) that wrote this burst's GPU segments; 0 when none
    /// did.
    gpu_stream: u64,
}

impl Burst {
    /// An empty burst with room for `capacity` packets.
    pub fn empty(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        capacity: usize,
    ) -> Self {
        let packets = regions.descriptor_vec(capacity);
        Self {
            regions,
            port,
            queue,
            epoch: 0,
            packets,
            run: None,
            run_descriptors: OnceBox::new(),
            reorder: None,
            gpu_stream: 0,
        }
    }

    /// A run of `count` consecutive buffers of `region`, each holding `len` bytes (at most
    /// the region's buf_size) in one segment: see [`Burst`]. `None` when the region's pool
    /// cannot hand out `count` consecutive buffers now (too few free, or its next ones are
    /// not consecutive, or it is not a FIFO pool): [`Burst::allocate`] works in every case.
    pub fn allocate_run(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        region: RegionId,
        count: usize,
        len: usize,
    ) -> Option<Self> {
        let r = regions.get(region);
        assert!(
            len <= r.buf_size(),
            "segment length {len} exceeds the {}-byte buffer",
            r.buf_size()
        );
        let count32 = std::num::NonZeroU32::new(u32::try_from(count).ok()?)?;
        let first = r.alloc_run(count)?;
        Some(Self {
            regions,
            port,
            queue,
            epoch: 0,
            packets: Vec::new(),
            run: Some(Run {
                region,
                first,
                count: count32,
                len: len as u32,
                flow_id: 0,
            }),
            run_descriptors: OnceBox::new(),
            reorder: None,
            gpu_stream: 0,
        })
    }

    /// The run this burst is, if it is one (see [`Burst`]).
    #[inline]
    pub fn run(&self) -> Option<Run> {
        self.run
    }

    /// The descriptors, made from the run the first time a run is asked for them.
    #[inline]
    fn descriptors(&self) -> &[Packet] {
        match &self.run {
            None => &self.packets,
            Some(run) => self
                .run_descriptors
                .get_or_init(|| Box::new(run.descriptors(&self.regions))),
        }
    }

    /// The descriptors for changing: a run becomes an ordinary burst first.
    #[inline]
    fn descriptors_mut(&mut self) -> &mut Vec<Packet> {
        if let Some(run) = self.run {
            self.run = None;
            self.packets = match std::mem::take(&mut self.run_descriptors).get() {
                Some(made) => made.clone(),
                None => run.descriptors(&self.regions),
            };
        }
        &mut self.packets
    }

    /// Appends a one-segment packet whose buffer `index` of `region` the caller hands over
    /// (an engine receiving into lent buffers); dropping the burst frees it.
    pub(crate) fn push_owned(&mut self, region: RegionId, index: u32, len: u32, flow_id: u32) {
        let mut p = one_segment(Segment { region, index, len });
        p.flow_id = flow_id;
        self.descriptors_mut().push(p);
    }

    /// A burst of one-segment packets in buffers `indices[i]` of `region`, holding
    /// `lens[i]` bytes each, which the caller hands over (an engine that received into
    /// them); each descriptor written once. Dropping the burst frees them.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn of_owned_buffers(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        region: RegionId,
        indices: &[u32],
        lens: &[u16],
    ) -> Self {
        let mut burst = Self::empty(regions, port, queue, indices.len());
        burst
            .packets
            .extend(indices.iter().zip(lens).map(|(&index, &len)| {
                one_segment(Segment {
                    region,
                    index,
                    len: u32::from(len),
                })
            }));
        burst
    }

    /// Allocates `count` packets with one buffer from each of `segment_regions` (all or
    /// nothing). Segment lengths start at 0.
    pub fn allocate(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        segment_regions: &[RegionId],
        count: usize,
    ) -> Option<Self> {
        Self::allocate_with(regions, port, queue, segment_regions, count, true, 0)
    }

    /// As [`Burst::allocate`], with the first segment of every packet `len` bytes long
    /// (each descriptor written once; at most the first region's buf_size).
    pub(crate) fn allocate_frames(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        segment_regions: &[RegionId],
        count: usize,
        len: usize,
    ) -> Option<Self> {
        let cap = regions.get(*segment_regions.first()?).buf_size();
        assert!(
            len <= cap,
            "segment length {len} exceeds the {cap}-byte buffer"
        );
        Self::allocate_with(
            regions,
            port,
            queue,
            segment_regions,
            count,
            true,
            len as u32,
        )
    }

    /// Allocates up to `max` packets with one buffer from each of `segment_regions`, as
    /// many as every region can give (`None`: not one). Segment lengths start at 0.
    pub fn allocate_up_to(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        segment_regions: &[RegionId],
        max: usize,
    ) -> Option<Self> {
        Self::allocate_with(regions, port, queue, segment_regions, max, false, 0)
    }

    /// `count` packets (exactly, or as many as the pools give), segment by segment; the
    /// packets short of a segment give back the segments they have. The first segment
    /// holds `first_len` bytes (checked by the caller), the others 0.
    fn allocate_with(
        regions: Arc<RegionSet>,
        port: PortIndex,
        queue: QueueId,
        segment_regions: &[RegionId],
        count: usize,
        exact: bool,
        first_len: u32,
    ) -> Option<Self> {
        if segment_regions.is_empty() || segment_regions.len() > MAX_SEGMENTS {
            return None;
        }
        // More packets than a region has buffers can never be had (and must not size an
        // allocation: a count of 2^40 would abort the process).
        let most = segment_regions
            .iter()
            .map(|&r| regions.try_get(r).map(|r| r.num_bufs()))
            .min()??;
        let count = match count {
            c if c <= most => c,
            _ if exact => return None,
            _ => most,
        };
        let mut burst = Self::empty(regions, port, queue, count);
        let mut scratch = IndexScratch::new();
        let indices = scratch.get(count);
        // Buffers of `region` into `indices`: how many (all or none when `exact`).
        let take = |regions: &RegionSet, region: RegionId, indices: &mut [u32]| {
            let pool = regions.get(region);
            if !exact {
                pool.alloc_up_to(indices)
            } else if pool.alloc_bulk(indices) {
                indices.len()
            } else {
                0
            }
        };
        if let &[region] = segment_regions {
            // One segment (the usual case): each descriptor written once.
            let got = take(&burst.regions, region, indices);
            if got == 0 {
                return None;
            }
            burst.packets.extend(indices[..got].iter().map(|&index| {
                one_segment(Segment {
                    region,
                    index,
                    len: first_len,
                })
            }));
            return Some(burst);
        }
        burst.packets.resize(count, Packet::default());
        for (s, &region) in segment_regions.iter().enumerate() {
            let want = burst.packets.len();
            let got = take(&burst.regions, region, &mut indices[..want]);
            for (p, &index) in burst.packets.iter_mut().zip(&indices[..got]) {
                p.segments[s] = Segment {
                    region,
                    index,
                    len: if s == 0 { first_len } else { 0 },
                };
                p.num_segments = s as u8 + 1;
            }
            burst.truncate(got);
            if got == 0 {
                return None;
            }
        }
        Some(burst)
    }

    /// A burst with one buffer of `region` for each packet of `like`, whose descriptors
    /// are `like`'s (length, flow id, time) with the new buffer in place of their one
    /// segment: each written once, as a whole copy, where [`Burst::allocate`] and setting
    /// the lengths after would write every descriptor twice, field by field (the stage's
    /// per-burst CPU cost at small packets). Segment bytes are not copied. A run comes out
    /// as a run where the region's pool has its next buffers consecutive.
    #[cfg(feature = "cuda")]
    pub(crate) fn allocate_like(like: &Burst, region: RegionId) -> Result<Self, AllocateLike> {
        let cap = like.regions.get(region).buf_size();
        if let Some(run) = like.run
            && run.len as usize <= cap
            && let Some(mut burst) = Self::allocate_run(
                like.regions.clone(),
                like.port,
                like.queue,
                region,
                run.count(),
                run.len as usize,
            )
        {
            // The run's one flow id (set by steering) goes along, as descriptors' do.
            burst.set_flow_ids(run.flow_id);
            return Ok(burst);
        }
        let packets = like.packets();
        if packets
            .iter()
            .any(|p| p.num_segments != 1 || p.segments[0].len as usize > cap)
        {
            return Err(AllocateLike::Shape);
        }
        let n = packets.len();
        let mut scratch = IndexScratch::new();
        let indices = scratch.get(n);
        if !like.regions.get(region).alloc_bulk(indices) {
            return Err(AllocateLike::NoBuffers);
        }
        let mut burst = Self::empty(like.regions.clone(), like.port, like.queue, n);
        burst
            .packets
            .extend(packets.iter().zip(indices.iter()).map(|(p, &index)| {
                let mut q = *p;
                q.segments[0].region = region;
                q.segments[0].index = index;
                q
            }));
        Ok(burst)
    }

    /// Interface index (port id).
    pub fn port(&self) -> PortIndex {
        self.port
    }

    /// Queue id.
    pub fn queue(&self) -> QueueId {
        self.queue
    }

    /// Epoch of the flow rules that steered these packets (0: not steered). Epochs only
    /// grow; a burst never mixes packets steered under different epochs.
    pub fn steering_epoch(&self) -> u64 {
        self.epoch
    }

    /// Addresses the burst to another queue (forwarding), as not steered.
    pub(crate) fn readdress(&mut self, port: PortIndex, queue: QueueId) {
        self.port = port;
        self.queue = queue;
        self.epoch = 0;
    }

    pub(crate) fn set_steering_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// Number of packets.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.run {
            Some(run) => run.count(),
            None => self.packets.len(),
        }
    }

    /// True when the burst holds no packet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Packet descriptors.
    #[inline]
    pub fn packets(&self) -> &[Packet] {
        self.descriptors()
    }

    /// Total bytes of all packets.
    #[inline]
    pub fn bytes(&self) -> u64 {
        match &self.run {
            Some(run) => u64::from(run.count.get()) * u64::from(run.len),
            None => self.packets.iter().map(|p| p.len() as u64).sum(),
        }
    }

    /// Sets the flow id of packet `i`.
    pub fn set_flow_id(&mut self, i: usize, flow_id: u32) {
        self.descriptors_mut()[i].flow_id = flow_id;
    }

    /// Sets the flow id of every packet: a run keeps being a run (one id for all, no
    /// descriptor written), an ordinary burst writes each descriptor.
    pub fn set_flow_ids(&mut self, flow_id: u32) {
        match &mut self.run {
            Some(run) => {
                run.flow_id = flow_id;
                // Descriptors made before carry the old id.
                self.run_descriptors = OnceBox::new();
            }
            None => {
                for p in &mut self.packets {
                    p.flow_id = flow_id;
                }
            }
        }
    }

    /// Sets the timestamp (ns since the Unix epoch) of packet `i`: on a TX queue with
    /// `accurate_send`, the time before which it is not sent.
    pub fn set_timestamp(&mut self, i: usize, ns: u64) {
        self.descriptors_mut()[i].timestamp_ns = ns;
    }

    /// Moves packets `at..` into a new burst of the same queue, in order.
    pub(crate) fn split_off(&mut self, at: usize) -> Burst {
        let mut rest = Burst::empty(self.regions.clone(), self.port, self.queue, 0);
        rest.epoch = self.epoch;
        let packets = self.descriptors_mut();
        let at = at.min(packets.len());
        rest.packets.extend(packets.drain(at..));
        rest
    }

    /// Stamps packets `from..` with `ns` (an RX worker's receive time).
    pub(crate) fn stamp_from(&mut self, from: usize, ns: u64) {
        if from >= self.len() {
            return;
        }
        for p in self.descriptors_mut().iter_mut().skip(from) {
            p.timestamp_ns = ns;
        }
    }

    /// Bytes segment `seg` of packet `i` can hold (its region's buf_size).
    pub fn capacity(&self, i: usize, seg: usize) -> usize {
        self.regions.get(self.segment(i, seg).region).buf_size()
    }

    /// Sets the byte length of segment `seg` of packet `i` (at most the region's buf_size).
    /// A run keeps being one when `len` is its packets' length already.
    #[inline]
    pub fn set_len(&mut self, i: usize, seg: usize, len: usize) {
        let cap = self.capacity(i, seg);
        if self.run.is_some_and(|run| run.len as usize == len) {
            return;
        }
        let p = &mut self.descriptors_mut()[i];
        let s = &mut p.segments[..p.num_segments as usize][seg];
        assert!(
            len <= cap,
            "segment length {len} exceeds the {cap}-byte buffer"
        );
        s.len = len as u32;
    }

    /// Bytes of segment `seg` of packet `i` (its current length), or `None` when the
    /// segment lives in GPU memory.
    #[inline]
    pub fn data(&self, i: usize, seg: usize) -> Option<&[u8]> {
        let s = self.segment(i, seg);
        let region = self.regions.get(s.region);
        if !region.host_accessible() {
            return None;
        }
        // SAFETY: this burst owns buffer `s.index` (taken from the pool, not yet returned),
        // the address lies inside the mapped region and `len` <= buf_size.
        Some(unsafe {
            std::slice::from_raw_parts(region.buffer_addr(s.index) as *const u8, s.len as usize)
        })
    }

    /// The whole buffer (buf_size bytes) of segment `seg` of packet `i`, for filling, or
    /// `None` when the segment lives in GPU memory.
    #[inline]
    pub fn buffer_mut(&mut self, i: usize, seg: usize) -> Option<&mut [u8]> {
        let s = self.segment(i, seg);
        let region = self.regions.get(s.region);
        if !region.host_accessible() {
            return None;
        }
        // SAFETY: as in `data`; `&mut self` makes this the only view of the buffer.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                region.buffer_addr(s.index) as *mut u8,
                region.buf_size(),
            )
        })
    }

    /// The buffers (their first `len` bytes, at most buf_size) of segment `seg` of every
    /// packet, in order, for an engine that fills them in one call (`recvmmsg`, `readv`);
    /// empty when a packet's segment lives in GPU memory.
    pub(crate) fn buffers_mut(&mut self, seg: usize, len: usize) -> Vec<std::io::IoSliceMut<'_>> {
        let n = self.len();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let s = self.segment(i, seg);
            let region = self.regions.get(s.region);
            if !region.host_accessible() {
                return Vec::new();
            }
            // SAFETY: this burst owns every buffer it lists (taken from the pool, not yet
            // returned), each lies inside its mapped region, and no two packets share a
            // buffer, so the slices are disjoint; `&mut self` keeps the burst from being
            // read or changed while they live.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(
                    region.buffer_addr(s.index) as *mut u8,
                    region.buf_size().min(len),
                )
            };
            out.push(std::io::IoSliceMut::new(buf));
        }
        out
    }

    /// Address of segment `seg` of packet `i` (a device address for GPU regions), for
    /// engines and GPU kernels.
    #[inline]
    pub fn segment_addr(&self, i: usize, seg: usize) -> u64 {
        let s = self.segment(i, seg);
        self.regions.get(s.region).buffer_addr(s.index)
    }

    /// Bytes in segment `seg` of packet `i` (a run answers without descriptors).
    #[inline]
    pub fn segment_len(&self, i: usize, seg: usize) -> usize {
        self.segment(i, seg).len as usize
    }

    /// Segment `seg` of packet `i` (a run answers without descriptors); panics when there
    /// is no such segment.
    #[inline]
    pub fn segment(&self, i: usize, seg: usize) -> Segment {
        match &self.run {
            Some(run) => Segment {
                region: run.region,
                index: run.index(i, seg),
                len: run.len,
            },
            None => self.packets[i].segments()[seg],
        }
    }

    /// True when `other`'s buffers come from the same region set as this burst's, so that
    /// descriptors may move between the two.
    #[inline]
    pub fn same_memory(&self, other: &Burst) -> bool {
        Arc::ptr_eq(&self.regions, &other.regions)
    }

    /// True when this burst's buffers belong to `regions`.
    #[inline]
    pub fn belongs_to(&self, regions: &Arc<RegionSet>) -> bool {
        Arc::ptr_eq(&self.regions, regions)
    }

    /// What a reorder says about this burst, when it is one of its aggregates: one packet
    /// whose buffer holds a whole batch, slot after slot.
    pub fn reorder_info(&self) -> Option<&ReorderInfo> {
        self.reorder.as_deref()
    }

    pub(crate) fn set_reorder_info(&mut self, info: ReorderInfo) {
        self.reorder = Some(Box::new(info));
    }

    /// The CUDA stream (a raw `CUstream`) whose work filled this burst's GPU memory, or
    /// `None`. The work has completed before a burst is delivered, so consumers need not
    /// wait on it; GPU consumers may queue their own kernels on this stream to stay in
    /// its order.
    pub fn gpu_stream(&self) -> Option<u64> {
        (self.gpu_stream != 0).then_some(self.gpu_stream)
    }

    pub(crate) fn set_gpu_stream(&mut self, stream: u64) {
        self.gpu_stream = stream;
    }

    /// The region set the buffers belong to.
    #[inline]
    pub fn regions(&self) -> &Arc<RegionSet> {
        &self.regions
    }
}

#[cfg(test)]
impl Burst {
    /// `n` packets of port 0, queue 0 with one buffer from each of `segments`: the unit
    /// tests' usual burst.
    pub(crate) fn test_burst(regions: &Arc<RegionSet>, segments: &[RegionId], n: usize) -> Self {
        Self::allocate(regions.clone(), PortIndex(0), QueueId(0), segments, n)
            .expect("free buffers for the test burst")
    }
}

/// A packet of one segment, flow id and time 0.
#[inline]
fn one_segment(segment: Segment) -> Packet {
    let mut p = Packet {
        num_segments: 1,
        ..Packet::default()
    };
    p.segments[0] = segment;
    p
}

/// Why [`Burst::allocate_like`] made no burst.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocateLike {
    /// A packet has more than one segment or more bytes than the region's buffers hold.
    Shape,
    /// The region has too few free buffers.
    NoBuffers,
}

impl Drop for Burst {
    fn drop(&mut self) {
        if let Some(run) = self.run {
            self.regions
                .get(run.region)
                .free_run(run.first, run.count());
            return;
        }
        // Return buffers in bulk per region: one pool operation per run of equal regions.
        const CHUNK: usize = 256;
        let mut pending: [u32; CHUNK] = [0; CHUNK];
        // Later segments only when some packet has them (most have one).
        let segments = self
            .packets
            .iter()
            .map(|p| p.num_segments as usize)
            .max()
            .unwrap_or(0);
        for seg in 0..segments {
            let mut n = 0;
            let mut region: Option<RegionId> = None;
            for p in &self.packets {
                let Some(s) = p.segments().get(seg) else {
                    continue;
                };
                if region != Some(s.region) || n == CHUNK {
                    if let Some(r) = region {
                        self.regions.get(r).free_bulk(&pending[..n]);
                    }
                    region = Some(s.region);
                    n = 0;
                }
                pending[n] = s.index;
                n += 1;
            }
            if let Some(r) = region {
                self.regions.get(r).free_bulk(&pending[..n]);
            }
        }
        self.regions
            .recycle_descriptor_vec(std::mem::take(&mut self.packets));
    }
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst")
            .field("port", &self.port)
            .field("queue", &self.queue)
            .field("packets", &self.len())
            .field("run", &self.run)
            .finish()
    }
}

#[cfg(test)]
mod tests;
