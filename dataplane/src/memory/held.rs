//! Buffers taken out of a region's pool and held by one owner for its life (a SPEAD
//! stream's chunk memories, for instance), with bounds-checked writes and reads for host
//! memory and GPU copies into device memory from pinned host memory.

use super::{MemoryKind, RegionId, RegionSet};
use std::sync::Arc;

/// `len` usable bytes in each of some buffers of one region, given back when dropped.
pub struct HeldBuffers {
    regions: Arc<RegionSet>,
    id: RegionId,
    buffers: Vec<u32>,
    len: usize,
}

impl HeldBuffers {
    /// Takes every free buffer of region `id` (up to its count), using `len` bytes of each;
    /// an error when `len` is over the region's buffer size.
    pub fn take_all(regions: &Arc<RegionSet>, id: RegionId, len: usize) -> Result<Self, String> {
        let r = regions
            .try_get(id)
            .ok_or_else(|| format!("no region {}", id.0))?;
        if len > r.buf_size() {
            return Err(format!(
                "region {} holds {} bytes a buffer, {len} are needed",
                r.name(),
                r.buf_size()
            ));
        }
        let mut buffers = vec![0u32; r.num_bufs()];
        let n = r.alloc_up_to(&mut buffers);
        buffers.truncate(n);
        Ok(Self {
            regions: regions.clone(),
            id,
            buffers,
            len,
        })
    }

    /// Buffers held.
    pub fn count(&self) -> usize {
        self.buffers.len()
    }

    /// The region's memory kind.
    pub fn kind(&self) -> MemoryKind {
        self.regions.get(self.id).kind()
    }

    /// The GPU (device regions) or NUMA node (host regions) of the region.
    pub fn affinity(&self) -> u32 {
        self.regions.get(self.id).affinity()
    }

    /// Where held buffer `k` starts (a device address for GPU memory).
    pub fn address(&self, k: usize) -> Option<u64> {
        let b = *self.buffers.get(k)?;
        Some(self.regions.get(self.id).buffer_addr(b))
    }

    /// Copies `bytes` to `offset` of held buffer `k`; false (nothing written) when `k` is
    /// not held, the range leaves the usable bytes, or the memory is not host memory.
    pub fn write(&mut self, k: usize, offset: usize, bytes: &[u8]) -> bool {
        let Some(dst) = self.host_range(k, offset, bytes.len()) else {
            return false;
        };
        // SAFETY: `host_range` checked that buffer `k` is held by this owner (taken from
        // the pool, so nothing else writes or frees it while `self` lives), is host memory
        // that lives as long as `regions`, and that the range is within its usable bytes;
        // `&mut self` excludes readers through `bytes`. A source inside the held buffer is
        // impossible: it would need a borrow of `self`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, bytes.len()) };
        true
    }

    /// The `len` usable bytes of held buffer `k`, when it is host memory.
    pub fn bytes(&self, k: usize) -> Option<&[u8]> {
        let addr = self.host_range(k, 0, self.len)?;
        // SAFETY: as in `write`: a held buffer of host memory, in range; writes need
        // `&mut self`, so none happens while this borrow lives.
        Some(unsafe { std::slice::from_raw_parts(addr as *const u8, self.len) })
    }

    fn host_range(&self, k: usize, offset: usize, len: usize) -> Option<u64> {
        let r = self.regions.get(self.id);
        let end = offset.checked_add(len)?;
        if !r.host_accessible() || end > self.len {
            return None;
        }
        Some(self.address(k)? + offset as u64)
    }

    #[cfg(feature = "cuda")]
    /// Copies each `(source, k, offset)` into held buffer `k` at `offset` with `gpu`, and
    /// waits for the copies. The buffers must be GPU memory and every source must lie in
    /// a pinned host region of the same region set (the GPU reads it where it is);
    /// anything else is refused before a copy starts.
    pub fn gpu_copy(
        &mut self,
        gpu: &mut gpudirect::Gpu,
        items: &[(&[u8], usize, usize)],
    ) -> Result<(), String> {
        if self.kind() != MemoryKind::Device {
            return Err("GPU copies go into GPU memory only".into());
        }
        let mut copies = Vec::with_capacity(items.len().min(gpudirect::MAX_ITEMS));
        for batch in items.chunks(gpudirect::MAX_ITEMS) {
            copies.clear();
            for &(src, k, offset) in batch {
                let end = offset.checked_add(src.len()).filter(|&e| e <= self.len);
                let dst = self.address(k).filter(|_| end.is_some());
                let (Some(dst), true) = (dst, self.pinned_source(src)) else {
                    return Err(format!(
                        "a copy of {} bytes to buffer {k} at {offset} is out of range or not from pinned memory",
                        src.len()
                    ));
                };
                copies.push((src.as_ptr() as u64, dst + offset as u64, src.len() as u32));
            }
            // SAFETY: every source lies in a pinned host region, mapped for the GPU and
            // borrowed for this call, which syncs before returning; every destination is
            // within a held device buffer's usable bytes, written by no one else.
            unsafe { gpu.batched_copy(&copies) }.map_err(|e| e.to_string())?;
            gpu.sync().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    #[cfg(feature = "cuda")]
    /// Decodes the stored samples at the start of held buffer `from` into held buffer
    /// `to` with `gpu` (`f32`, or half bits when `half`), and waits. Both must be GPU
    /// memory, different buffers, and hold what `decode` reads and writes; anything else
    /// is refused before the kernel starts.
    pub fn gpu_decode_iq(
        &mut self,
        gpu: &mut gpudirect::Gpu,
        (from, to): (usize, usize),
        decode: GpuIqDecode,
        half: bool,
    ) -> Result<(), String> {
        if self.kind() != MemoryKind::Device {
            return Err("GPU decoding reads and writes GPU memory only".into());
        }
        let (read, values) = decode.sizes();
        let written = values.saturating_mul(if half { 2 } else { 4 });
        let (Some(src), Some(dst)) = (self.address(from), self.address(to)) else {
            return Err(format!("buffers {from} and {to} are not both held"));
        };
        if from == to || read > self.len as u64 || written > self.len as u64 {
            return Err(format!(
                "decoding {read} stored bytes of buffer {from} into {written} bytes of buffer {to} does not fit buffers of {} bytes",
                self.len
            ));
        }
        // SAFETY: both buffers are held device buffers of this owner, distinct, and hold
        // the bytes the kernel reads and writes (checked above); nothing else writes them,
        // and the call syncs before returning.
        let launched = unsafe {
            match decode {
                GpuIqDecode::Fixed { storage, samples } => {
                    gpu.decode_fixed_iq(src, samples, storage, half, dst)
                }
                GpuIqDecode::BlockFloatingPoint { prbs, iq_width } => {
                    gpu.decode_bfp(src, prbs, u32::from(iq_width), half, dst)
                }
            }
        };
        launched.map_err(|e| e.to_string())?;
        gpu.sync().map_err(|e| e.to_string())
    }

    #[cfg(feature = "cuda")]
    fn pinned_source(&self, src: &[u8]) -> bool {
        let (start, len) = (src.as_ptr() as u64, src.len() as u64);
        self.regions.iter().any(|r| {
            let (base, size) = r.extent();
            r.kind() == MemoryKind::HostPinned && start >= base && start + len <= base + size as u64
        })
    }
}

/// What [`HeldBuffers::gpu_decode_iq`] decodes: fixed-point complex samples or block
/// floating point PRBs, stored back to back.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuIqDecode {
    /// `samples` complex samples stored as `storage`.
    Fixed {
        /// How I and Q are stored.
        storage: gpudirect::SampleStorage,
        /// Complex samples.
        samples: u64,
    },
    /// `prbs` PRBs of an exponent byte and 24 mantissas of `iq_width` bits.
    BlockFloatingPoint {
        /// PRBs.
        prbs: u32,
        /// Bits per mantissa (1 to 16).
        iq_width: u8,
    },
}

#[cfg(feature = "cuda")]
impl GpuIqDecode {
    /// Stored bytes read and values (I or Q) written.
    fn sizes(self) -> (u64, u64) {
        match self {
            Self::Fixed { storage, samples } => {
                let per_sample = match storage {
                    gpudirect::SampleStorage::I8 => 2,
                    _ => 4,
                };
                (
                    samples.saturating_mul(per_sample),
                    samples.saturating_mul(2),
                )
            }
            Self::BlockFloatingPoint { prbs, iq_width } => {
                let per_prb = 1 + (24 * u64::from(iq_width)).div_ceil(8);
                (u64::from(prbs) * per_prb, u64::from(prbs) * 24)
            }
        }
    }
}

impl Drop for HeldBuffers {
    fn drop(&mut self) {
        self.regions.get(self.id).free_bulk(&self.buffers);
    }
}
