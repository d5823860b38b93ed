//! Runs: bursts of consecutive buffers of one region that carry no per-packet descriptor,
//! and the scratch space allocation fills with buffer indices.

use super::one_segment;
use crate::descriptor::{Packet, RegionId, Segment};
use crate::memory::RegionSet;

/// A burst's packets when it is a run: buffers `first..first + count` of `region`, each
/// `len` bytes in one segment, all with the flow id `flow_id` and time 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// The region of every buffer.
    pub(crate) region: RegionId,
    /// The first buffer's index.
    pub(crate) first: u32,
    /// How many packets (buffers); a run has at least one (and `Option<Run>` needs no
    /// room of its own for `None`).
    pub(crate) count: std::num::NonZeroU32,
    /// Bytes in each buffer.
    pub(crate) len: u32,
    /// The flow id of every packet (0: none): steering that finds one rule for the whole
    /// run sets it once instead of writing a descriptor per packet.
    pub(crate) flow_id: u32,
}

impl Run {
    /// The region every buffer of the run is in.
    pub fn region(&self) -> RegionId {
        self.region
    }

    /// Bytes in each buffer.
    pub fn buffer_len(&self) -> u32 {
        self.len
    }

    /// The flow id of every packet of the run (0: none).
    pub fn flow_id(&self) -> u32 {
        self.flow_id
    }

    /// How many packets.
    #[inline]
    pub(crate) fn count(&self) -> usize {
        self.count.get() as usize
    }

    /// The run's packet descriptors.
    pub(super) fn descriptors(&self, regions: &RegionSet) -> Vec<Packet> {
        let mut v = regions.descriptor_vec(self.count());
        v.extend((self.first..self.first + self.count.get()).map(|index| {
            let mut p = one_segment(Segment {
                region: self.region,
                index,
                len: self.len,
            });
            p.flow_id = self.flow_id;
            p
        }));
        v
    }

    /// Buffer index of packet `i`, or a panic naming it when the run has no such packet or
    /// `seg` is not 0: the same checks indexing the descriptors makes.
    #[inline]
    pub(super) fn index(&self, i: usize, seg: usize) -> u32 {
        assert!(
            i < self.count() && seg == 0,
            "packet {i} segment {seg} is not in a run of {} one-segment packets",
            self.count
        );
        self.first + i as u32
    }
}

/// Buffer indices being allocated: on the stack for usual burst sizes.
pub(super) struct IndexScratch {
    on_stack: [u32; 512],
    on_heap: Vec<u32>,
}

impl IndexScratch {
    pub(super) fn new() -> Self {
        Self {
            on_stack: [0; 512],
            on_heap: Vec::new(),
        }
    }

    /// Room for `n` indices.
    pub(super) fn get(&mut self, n: usize) -> &mut [u32] {
        if n <= self.on_stack.len() {
            &mut self.on_stack[..n]
        } else {
            self.on_heap.resize(n, 0);
            &mut self.on_heap
        }
    }
}
