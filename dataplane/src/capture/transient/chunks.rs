//! The history's chunks: where their bytes live (heap, page-locked or GPU memory), the
//! packets they frame, and the pool that hands them out and takes them back once the
//! writer is done with them.

use super::TransientConfig;
use crate::config::MemoryKind;
use std::sync::Arc;

/// Bytes per chunk of the history in host memory (the unit chunks are kept, dropped and
/// written in).
pub(super) const CHUNK_BYTES: usize = 1 << 20;
/// Page-locked and GPU chunks allocated beyond `keep_bytes`, for those the writer holds.
const SPARE_CHUNKS: usize = 8;

/// One packet in a chunk.
#[derive(Clone, Copy)]
pub(super) struct Record {
    /// Offset of its record (header first) in the chunk.
    pub(super) at: u32,
    /// Packet bytes (the writer frames GPU chunks' packets by it).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(super) len: u32,
    /// Receive time, ns since the epoch.
    pub(super) ts: u64,
}

/// Where a chunk's bytes are.
pub(super) enum Store {
    Heap(Box<[u8]>),
    #[cfg(feature = "cuda")]
    Pinned(gpudirect::PinnedBuffer),
    /// Framing is not in the buffer: the writer adds it from the records.
    #[cfg(feature = "cuda")]
    Device(gpudirect::gds::DeviceStaging),
}

impl Store {
    /// Bytes of a chunk kept in `keep_in`: GPU chunks are one cuFile write each, so
    /// larger.
    fn bytes_in(keep_in: MemoryKind) -> usize {
        match keep_in {
            MemoryKind::Device => crate::capture::BATCH_BYTES,
            _ => CHUNK_BYTES,
        }
    }

    fn alloc(keep_in: MemoryKind, gpu: u32) -> Result<Self, String> {
        let bytes = Self::bytes_in(keep_in);
        match keep_in {
            #[cfg(feature = "cuda")]
            MemoryKind::HostPinned => gpudirect::PinnedBuffer::alloc(gpu, bytes)
                .map(Store::Pinned)
                .map_err(|e| e.to_string()),
            #[cfg(feature = "cuda")]
            MemoryKind::Device => gpudirect::gds::DeviceStaging::alloc(gpu, bytes)
                .map(Store::Device)
                .map_err(|e| e.to_string()),
            MemoryKind::Host | MemoryKind::Huge => {
                let _ = gpu;
                Ok(Store::Heap(vec![0; bytes].into_boxed_slice()))
            }
            #[cfg(not(feature = "cuda"))]
            _ => Err(format!(
                "keep_in: {} needs the cuda feature, which this build lacks",
                keep_in.name()
            )),
        }
    }

    pub(super) fn capacity(&self) -> usize {
        match self {
            Store::Heap(b) => b.len(),
            #[cfg(feature = "cuda")]
            Store::Pinned(b) => b.len(),
            #[cfg(feature = "cuda")]
            Store::Device(b) => b.len(),
        }
    }

    /// The bytes, where the CPU can read them.
    pub(super) fn host(&self) -> Option<&[u8]> {
        match self {
            Store::Heap(b) => Some(b),
            #[cfg(feature = "cuda")]
            Store::Pinned(b) => Some(b.as_slice()),
            #[cfg(feature = "cuda")]
            Store::Device(_) => None,
        }
    }

    pub(super) fn host_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Store::Heap(b) => Some(b),
            #[cfg(feature = "cuda")]
            Store::Pinned(b) => Some(b.as_mut_slice()),
            #[cfg(feature = "cuda")]
            Store::Device(_) => None,
        }
    }
}

/// Framed packets, and where each starts and when it arrived.
pub(super) struct Chunk {
    pub(super) store: Store,
    /// Bytes filled.
    pub(super) used: usize,
    pub(super) records: Vec<Record>,
}

impl Chunk {
    pub(super) fn last_ts(&self) -> u64 {
        self.records.last().map_or(0, |r| r.ts)
    }

    /// Byte offset of record `i` (`used` past the last).
    pub(super) fn offset(&self, i: usize) -> usize {
        self.records.get(i).map_or(self.used, |r| r.at as usize)
    }
}

/// The chunks a sink fills: free ones, and those out of the history that the writer may
/// still hold.
pub(super) struct ChunkPool {
    keep_in: MemoryKind,
    gpu: u32,
    free: Vec<Chunk>,
    pub(super) retired: Vec<Arc<Chunk>>,
    /// Chunks made so far, and at most (page-locked and GPU memory are made at start).
    made: usize,
    most: usize,
}

impl ChunkPool {
    pub(super) fn new(cfg: &TransientConfig) -> Result<Self, String> {
        let mut pool = Self {
            keep_in: cfg.keep_in,
            gpu: cfg.gpu,
            free: Vec::new(),
            retired: Vec::new(),
            made: 0,
            most: usize::MAX,
        };
        if cfg.keep_in != MemoryKind::Host {
            pool.most = cfg.keep_bytes.div_ceil(Store::bytes_in(cfg.keep_in)) + SPARE_CHUNKS;
            while pool.made < pool.most {
                let chunk = pool.make()?;
                pool.free.push(chunk);
            }
        }
        Ok(pool)
    }

    fn make(&mut self) -> Result<Chunk, String> {
        self.made += 1;
        Ok(Chunk {
            store: Store::alloc(self.keep_in, self.gpu)?,
            used: 0,
            records: Vec::new(),
        })
    }

    /// An empty chunk: a free one, one the writer let go of, or a new one while fewer than
    /// `most` exist.
    pub(super) fn take(&mut self) -> Option<Chunk> {
        if let Some(c) = self.free.pop() {
            return Some(c);
        }
        // Only the pool holds it once the writer has dropped its reference.
        if let Some(i) = self.retired.iter().position(|c| Arc::strong_count(c) == 1) {
            let mut c = Arc::try_unwrap(self.retired.swap_remove(i)).ok()?;
            c.used = 0;
            c.records.clear();
            return Some(c);
        }
        if self.made < self.most {
            return self.make().ok();
        }
        None
    }
}
