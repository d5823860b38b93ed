//! Packet descriptors: what a burst carries per packet, with no behaviour of its own. A
//! leaf module: every layer above uses these types, and this module imports nothing from
//! the crate.

#![forbid(unsafe_code)]

/// Largest number of segments per packet (header-data split uses 2).
pub const MAX_SEGMENTS: usize = 4;

/// Index of a memory region (the position in `memory_regions`). A type of its own so
/// that a region is never taken for a port, a queue or a buffer index (all small
/// integers too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
#[repr(transparent)]
pub struct RegionId(pub u16);

impl RegionId {
    /// The position in `memory_regions`, to index a per-region table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for RegionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An interface's position in the configuration (`interfaces[i]`): the "port" a burst
/// belongs to and an engine serves. A type of its own so that it is never taken for a
/// queue id (the two travel together everywhere).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
#[repr(transparent)]
pub struct PortIndex(pub u16);

impl PortIndex {
    /// The position in `interfaces`, to index a per-interface table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for PortIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A queue's `id` within its interface and direction, as configured (`queues[].id`).
/// A type of its own so that it is not mixed up with a port, or with the device queue a
/// DPDK port maps it to (a plain `u16` there).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
#[repr(transparent)]
pub struct QueueId(pub u16);

impl QueueId {
    /// The id as an index into a per-queue table.
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for QueueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One buffer of a packet: which region, which buffer, how many bytes are used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Region of the buffer.
    pub region: RegionId,
    /// Buffer index inside the region.
    pub index: u32,
    /// Bytes of packet data in the buffer.
    pub len: u32,
}

/// A packet descriptor inside a burst.
#[derive(Clone, Copy, Debug, Default)]
pub struct Packet {
    // Crate-visible so that only `Burst` (which owns the buffers) writes them.
    pub(crate) segments: [Segment; MAX_SEGMENTS],
    pub(crate) num_segments: u8,
    /// Id of the flow rule that matched (0: none).
    pub flow_id: u32,
    /// Receive or send timestamp in nanoseconds, when the engine provides one (0: none).
    pub timestamp_ns: u64,
}

impl Packet {
    /// The packet's segments.
    #[inline]
    pub fn segments(&self) -> &[Segment] {
        &self.segments[..self.num_segments as usize]
    }

    /// Total bytes over all segments.
    #[inline]
    pub fn len(&self) -> usize {
        self.segments().iter().map(|s| s.len as usize).sum()
    }

    /// True for a packet with no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What an aggregate burst holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReorderInfo {
    /// The reorder's name.
    pub name: String,
    /// Batch id of the batch's first packet (its batch number field, or sequence /
    /// packets per batch); `None` when that packet was too short to carry a sequence
    /// number.
    pub batch_id: Option<u32>,
    /// Packets placed in the output.
    pub source_packets: u32,
    /// Payload bytes placed (before conversion).
    pub payload_bytes: u64,
    /// Slots in the output.
    pub packets_per_batch: u32,
    /// Bytes of each slot.
    pub slot_bytes: u32,
    /// Bytes of the output (`packets_per_batch * slot_bytes`).
    pub aggregate_len: usize,
    /// The batch was flushed incomplete because the queue's timeout passed.
    pub timed_out: bool,
}
