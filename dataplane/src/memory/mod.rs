//! Memory regions carved into fixed-size buffers, and the lock-free pools that hand them
//! out. A region is one allocation (host pages, huge pages, pinned host or GPU memory);
//! buffer `i` starts at `base + i * stride`.

mod backing;
mod held;
#[cfg(feature = "cuda")]
pub use held::GpuIqDecode;
pub use held::HeldBuffers;
pub mod pool;

use crate::config::{MemoryKind, MemoryRegionConfig};
use crate::descriptor::Packet;
pub use crate::descriptor::{PortIndex, QueueId, RegionId};
use crate::plan::RegionPlan;
use backing::{Backing, cuda_backing, map_huge, map_pages};
use crossbeam_queue::ArrayQueue;
use pool::{BufferPool, PoolOrder};
use std::sync::{Mutex, OnceLock};

/// Why a region's buffers could not be lent to an engine's pool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LendAllError {
    /// Some buffers are out of the pool.
    #[error("memory region {region}: buffers are in use, cannot lend them")]
    InUse {
        /// Region name.
        region: String,
    },
    /// The region is lent already.
    #[error("memory region {region} is already lent")]
    AlreadyLent {
        /// Region name.
        region: String,
    },
}

/// Why a region could not be created.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// Not enough free huge pages.
    #[error(
        "memory region {name}: needs {pages_needed} huge pages of 2 MiB but only {pages_free} are free; reserve them with: echo {reserve} > /proc/sys/vm/nr_hugepages"
    )]
    NoHugePages {
        /// Region name.
        name: String,
        /// Pages this region needs.
        pages_needed: usize,
        /// Pages free now.
        pages_free: usize,
        /// Total to write to nr_hugepages.
        reserve: usize,
    },
    /// mmap failed for another reason.
    #[error("memory region {name}: cannot map {bytes} bytes of {kind} memory: {reason}")]
    Map {
        /// Region name.
        name: String,
        /// Kind.
        kind: &'static str,
        /// Size requested.
        bytes: usize,
        /// The OS error.
        reason: String,
    },
    /// CUDA memory requested in a build or on a machine without CUDA.
    #[error("memory region {name}: kind {kind} needs a CUDA driver ({reason})")]
    NeedsCuda {
        /// Region name.
        name: String,
        /// Kind.
        kind: &'static str,
        /// What is missing.
        reason: String,
    },
    /// The GPU the region names (by UUID or ordinal) is not on this machine.
    #[error("memory region {name}: {reason}")]
    NoSuchGpu {
        /// Region name.
        name: String,
        /// Which UUID, and the GPUs present.
        reason: String,
    },
    /// The region would be larger than the address space allows.
    #[error(
        "memory region {name}: {num_bufs} buffers of {buf_size} bytes overflow the address space"
    )]
    TooLarge {
        /// Region name.
        name: String,
        /// Buffers.
        num_bufs: usize,
        /// Bytes each.
        buf_size: usize,
    },
    /// Every slot of the running set is taken ([`RegionSet::append`]).
    #[error(
        "memory region {name}: the running plane has room for {capacity} regions in all (those it started with, {LIVE_REGION_SLOTS} more, and those a change replaced), and every one is taken; a restart frees the replaced ones"
    )]
    NoSlot {
        /// Region name.
        name: String,
        /// Slots of the set.
        capacity: usize,
    },
}

/// Where the buffers of a region lent to an engine go when a burst is done with them, and,
/// for a region an engine sends from, where allocations come from. A lender that stops
/// lending (its engine is gone) answers "not mine" from then on, and the region's own pool
/// serves again.
pub trait BufferLender: Send + std::marker::Sync {
    /// Takes buffers back (each lent buffer is returned once); false leaves them to the
    /// region's own pool.
    fn give_back(&self, indices: &[u32]) -> bool;

    /// Hands out free buffers into the front of `out` and returns how many: all of `out`
    /// or none when `all_or_none`, else as many as it has. `None`: the region's own pool
    /// serves the allocation (the default: a lender that only receives into the buffers,
    /// which leaves that pool empty, or one that stopped lending).
    fn take(&self, out: &mut [u32], all_or_none: bool) -> Option<usize> {
        let _ = (out, all_or_none);
        None
    }

    /// Buffers [`BufferLender::take`] could hand out now (not for the packet path);
    /// `None`: count the region's own pool.
    fn available(&self) -> Option<usize> {
        None
    }
}

/// One allocated memory region and its buffer pool.
pub struct Region {
    name: String,
    kind: MemoryKind,
    /// GPU ordinal (device, host_pinned) or NUMA node.
    affinity: u32,
    buf_size: usize,
    stride: usize,
    /// Bytes in front of each buffer's data, reserved for an engine (DPDK's mbuf headroom
    /// when the region backs an mbuf pool).
    headroom: usize,
    num_bufs: usize,
    base: u64,
    /// The memory itself, released when the region is dropped (read only by the CUDA
    /// build, which exports device memory from it).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    backing: Backing,
    pool: BufferPool,
    /// Set when every buffer is lent to an engine's own pool (zero-copy receive).
    lender: std::sync::OnceLock<Box<dyn BufferLender>>,
}

// SAFETY: the region's memory is reached only through buffer indices handed out by the
// pool, which gives each buffer to one owner at a time; the mapping itself is immutable.
unsafe impl Send for Region {}
// SAFETY: see Send; shared access only reads immutable fields and uses the atomic pool.
unsafe impl std::marker::Sync for Region {}

impl Region {
    /// Allocates the region described by `cfg` and fills its pool with every buffer.
    pub fn allocate(cfg: &MemoryRegionConfig) -> Result<Self, MemoryError> {
        Self::allocate_at(cfg, 0, 0)
    }

    /// As [`Region::allocate`]; `index` (the region's position in the configuration)
    /// names its huge-page file, and each buffer gets `headroom` bytes in front of it.
    pub fn allocate_at(
        cfg: &MemoryRegionConfig,
        index: usize,
        headroom: usize,
    ) -> Result<Self, MemoryError> {
        Self::allocate_planned(
            &RegionPlan {
                name: cfg.name.clone(),
                kind: cfg.kind,
                affinity: cfg.affinity,
                gpu_uuid: cfg.gpu_uuid.clone(),
                num_bufs: cfg.num_bufs,
                buf_size: cfg.buf_size,
                headroom,
                stride: crate::plan::buffer_stride(cfg.kind, headroom, cfg.buf_size),
                lent: false,
                not_lent_because: None,
                hugepage_bytes: 0,
                retired: false,
            },
            index,
        )
    }

    /// Allocates a region as planned: its buffers `cfg.stride` bytes apart with
    /// `cfg.headroom` bytes in front of each; `index` (its position in the plan) names its
    /// huge-page file.
    pub fn allocate_planned(cfg: &RegionPlan, index: usize) -> Result<Self, MemoryError> {
        let (stride, headroom) = (cfg.stride, cfg.headroom);
        if stride < cfg.buf_size.saturating_add(headroom) {
            return Err(MemoryError::TooLarge {
                name: cfg.name.clone(),
                num_bufs: cfg.num_bufs,
                buf_size: cfg.buf_size,
            });
        }
        let too_large = || MemoryError::TooLarge {
            name: cfg.name.clone(),
            num_bufs: cfg.num_bufs,
            buf_size: cfg.buf_size,
        };
        let bytes = stride.checked_mul(cfg.num_bufs).ok_or_else(too_large)?;
        if bytes > isize::MAX as usize / 2 {
            return Err(too_large());
        }
        // Buffer indices are u32.
        if u32::try_from(cfg.num_bufs).is_err() {
            return Err(too_large());
        }
        let backing = match cfg.kind {
            MemoryKind::Host => map_pages(cfg, bytes, false)?,
            MemoryKind::Huge => map_huge(cfg, bytes, index)?,
            MemoryKind::HostPinned | MemoryKind::Device => cuda_backing(cfg, bytes)?,
        };
        let base = match &backing {
            Backing::Mapped { ptr, .. } => ptr.as_ptr() as u64,
            Backing::HugeFile(f) => f.as_ptr().as_ptr() as u64,
            #[cfg(feature = "cuda")]
            Backing::Device(b) => b.device_ptr(),
            #[cfg(feature = "cuda")]
            Backing::Pinned(b) => b.as_ptr() as u64,
        };
        Ok(Self {
            name: cfg.name.clone(),
            kind: cfg.kind,
            affinity: cfg.affinity,
            buf_size: cfg.buf_size,
            stride,
            headroom,
            num_bufs: cfg.num_bufs,
            base,
            backing,
            // Memory the GPU or a NIC reads: buffers keep their order across threads.
            pool: BufferPool::ordered(
                &cfg.name,
                cfg.num_bufs,
                match cfg.kind {
                    MemoryKind::Host | MemoryKind::Huge => PoolOrder::Lifo,
                    MemoryKind::HostPinned | MemoryKind::Device => PoolOrder::Fifo,
                },
            ),
            lender: std::sync::OnceLock::new(),
        })
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its memory kind.
    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// GPU ordinal (device and host_pinned regions) or NUMA node.
    pub fn affinity(&self) -> u32 {
        self.affinity
    }

    /// For a `device` region: its whole memory exported as a dma-buf, for NICs that
    /// register GPU memory that way (`ibv_reg_dmabuf_mr`). `None` for other kinds.
    #[cfg(feature = "cuda")]
    pub fn export_dmabuf(&self) -> Option<Result<gpudirect::DmaBuf, gpudirect::GpuError>> {
        match &self.backing {
            Backing::Device(b) => Some(b.export_dmabuf(0, b.len())),
            _ => None,
        }
    }

    /// Usable bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Distance between buffer starts.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Number of buffers.
    pub fn num_bufs(&self) -> usize {
        self.num_bufs
    }

    /// Free buffers right now: in the shared pool and in every thread's cache. Slower
    /// than an allocation (it takes the pool's lock); not for the packet path.
    pub fn available(&self) -> usize {
        self.lender
            .get()
            .and_then(|l| l.available())
            .unwrap_or_else(|| self.pool.available())
    }

    /// True when the CPU can read and write the buffers.
    #[inline]
    pub fn host_accessible(&self) -> bool {
        self.kind != MemoryKind::Device
    }

    /// Address of buffer `index` (a device address for `device` regions).
    #[inline]
    pub fn buffer_addr(&self, index: u32) -> u64 {
        self.base + index as u64 * self.stride as u64 + self.headroom as u64
    }

    /// Bytes reserved in front of each buffer.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Index of the buffer whose slot (headroom included) contains `addr`.
    pub fn index_of(&self, addr: u64) -> Option<u32> {
        let off = addr.checked_sub(self.base)?;
        let i = off / self.stride as u64;
        (i < self.num_bufs as u64).then_some(i as u32)
    }

    /// Lends every buffer to an engine's own pool: from now on freed buffers go to
    /// `lender`, allocations come from it, and this region's pool stays empty. Fails when buffers are in use or the
    /// region is already lent.
    pub fn lend_all(&self, lender: Box<dyn BufferLender>) -> Result<(), LendAllError> {
        let Some(all) = self.pool.take_all() else {
            return Err(LendAllError::InUse {
                region: self.name.clone(),
            });
        };
        if self.lender.set(lender).is_err() {
            self.free_bulk(&all);
            return Err(LendAllError::AlreadyLent {
                region: self.name.clone(),
            });
        }
        Ok(())
    }

    /// True when the buffers are lent to an engine's pool.
    pub fn is_lent(&self) -> bool {
        self.lender.get().is_some()
    }

    /// Start and length of the whole region, for NIC or RDMA registration.
    pub fn extent(&self) -> (u64, usize) {
        (self.base, self.stride * self.num_bufs)
    }

    /// Takes exactly `out.len()` buffers, or none.
    #[inline]
    pub fn alloc_bulk(&self, out: &mut [u32]) -> bool {
        if let Some(n) = self.lender.get().and_then(|l| l.take(out, true)) {
            return n == out.len();
        }
        self.pool.alloc_bulk(out)
    }

    /// Takes up to `out.len()` buffers; returns how many, at the front of `out`.
    #[inline]
    pub fn alloc_up_to(&self, out: &mut [u32]) -> usize {
        if let Some(n) = self.lender.get().and_then(|l| l.take(out, false)) {
            return n;
        }
        self.pool.alloc_up_to(out)
    }

    /// Takes `n` consecutive buffers and returns the first, when the pool's next `n` are
    /// consecutive (see [`BufferPool::alloc_run`]); `None` takes nothing.
    #[inline]
    pub(crate) fn alloc_run(&self, n: usize) -> Option<u32> {
        if self.lender.get().is_some() {
            // The lender's order is not the region's: runs are not to be had.
            return None;
        }
        self.pool.alloc_run(n)
    }

    /// Returns the buffers `first..first + n`, each taken from this pool and returned once
    /// ([`crate::Burst`] guarantees that for runs it owns).
    pub(crate) fn free_run(&self, first: u32, n: usize) {
        if let Some(lender) = self.lender.get() {
            let all: Vec<u32> = (first..first + n as u32).collect();
            if !lender.give_back(&all) {
                self.pool.free_bulk(&all);
            }
            return;
        }
        self.pool.free_run(first, n);
    }

    /// Buffers each thread keeps in its own cache of this region (0: none).
    pub fn cache_size(&self) -> usize {
        self.pool.cache_size()
    }

    /// Returns buffers to the pool.
    ///
    /// Every index must have come from this pool and be returned once; [`crate::Burst`]
    /// guarantees that for buffers it owns.
    #[inline]
    pub(crate) fn free_bulk(&self, indices: &[u32]) {
        if self.lender.get().is_some_and(|l| l.give_back(indices)) {
            return;
        }
        self.pool.free_bulk(indices);
    }

    /// Puts buffers an engine stopped lending back into the region's own pool, each once
    /// (the engine's pool held them).
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn restock(&self, indices: &[u32]) {
        self.pool.free_bulk(indices);
    }
}

/// Regions a running set takes on top of those it starts with ([`RegionSet::append`]).
pub const LIVE_REGION_SLOTS: usize = 32;

/// All regions of a data plane, indexed by [`RegionId`]. Bursts hold an `Arc` of it, so
/// memory is released only after the last buffer came back.
///
/// The set only grows: a live change appends a region it adds or resizes in the next free
/// slot, and a region it replaces or removes keeps its slot, and its memory, until the set
/// is dropped (a burst may still hold its buffers, and region ids stay stable). Reading a
/// region the set started with costs what indexing a vector does (the packet path's
/// measured rate did not change); an appended one, an out-of-line call and an acquire
/// load.
pub struct RegionSet {
    /// The regions it started with: ids `0..started.len()`.
    started: Box<[Region]>,
    /// Appended regions, set in order from the first: ids from `started.len()` on.
    added: Box<[OnceLock<Region>]>,
    /// Held while a region is appended.
    appending: Mutex<()>,
    /// Emptied packet-descriptor vectors of dropped bursts, reused by new bursts so that the
    /// packet path does not call the allocator (bursts are often built on one thread and
    /// dropped on another, the costliest case for malloc).
    spare_descriptors: ArrayQueue<Vec<Packet>>,
    /// The same for vectors of more than [`SPARE_SMALL_CAPACITY`] packets, kept apart so
    /// their count, and with it their memory, has a bound of its own.
    spare_large: ArrayQueue<Vec<Packet>>,
}

/// Most small descriptor vectors kept for reuse (4096 x 256 x 64 bytes: 64 MiB at most).
const SPARE_DESCRIPTOR_VECS: usize = 4096;
/// Most large ones kept (256 x 16 Ki x 64 bytes: 256 MiB at most; bursts that large are
/// few at a time).
const SPARE_LARGE_VECS: usize = 256;
/// Larger vectors are freed instead of kept.
const SPARE_DESCRIPTOR_MAX_CAPACITY: usize = 16 * 1024;
/// Vectors up to this many packets go to the small spares.
const SPARE_SMALL_CAPACITY: usize = 256;
/// Small spares each thread keeps for itself before the shared ones: a worker that
/// builds and drops its own bursts (run to completion) then touches no shared queue.
const THREAD_SPARES: usize = 16;

thread_local! {
    /// This thread's small spare descriptor vectors (any region set's: they are plain
    /// memory).
    static SPARES: std::cell::RefCell<Vec<Vec<Packet>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// A small spare vector of this thread's, if it has one.
#[inline]
fn thread_spare() -> Option<Vec<Packet>> {
    SPARES
        .try_with(|s| s.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
}

/// Keeps `v` (empty, small) among this thread's spares; gives it back when they are full.
#[inline]
fn keep_thread_spare(v: Vec<Packet>) -> Option<Vec<Packet>> {
    let mut v = Some(v);
    let _ = SPARES.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.len() < THREAD_SPARES
        {
            s.push(v.take().expect("not yet kept"));
        }
    });
    v
}

impl RegionSet {
    /// Allocates every region of the configuration; on failure nothing stays allocated.
    pub fn allocate(cfgs: &[MemoryRegionConfig]) -> Result<Self, MemoryError> {
        Self::allocate_with_headroom(cfgs, &[])
    }

    /// Allocates every region of a plan, in its order (index = [`RegionId`]), with the
    /// plan's headroom and stride.
    pub fn from_plan(regions: &[RegionPlan]) -> Result<Self, MemoryError> {
        let regions = regions
            .iter()
            .enumerate()
            .map(|(i, r)| Region::allocate_planned(r, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::of(regions))
    }

    /// A set of `regions` with room for [`LIVE_REGION_SLOTS`] more.
    fn of(regions: Vec<Region>) -> Self {
        Self {
            started: regions.into_boxed_slice(),
            added: std::iter::repeat_with(OnceLock::new)
                .take(LIVE_REGION_SLOTS)
                .collect(),
            appending: Mutex::new(()),
            spare_descriptors: ArrayQueue::new(SPARE_DESCRIPTOR_VECS),
            spare_large: ArrayQueue::new(SPARE_LARGE_VECS),
        }
    }

    /// Regions in the set, replaced ones included (the next region's id).
    pub fn len(&self) -> usize {
        self.started.len() + self.added.iter().take_while(|s| s.get().is_some()).count()
    }

    /// True when the set holds no region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Allocates the region `plan` describes in the next free slot, which must be `id`
    /// (the slot the plan gave it), while the set is in use: bursts and queues holding
    /// the set reach it by `id` from then on.
    pub fn append(&self, plan: &RegionPlan, id: RegionId) -> Result<(), MemoryError> {
        let _one = self.appending.lock().unwrap_or_else(|e| e.into_inner());
        let next = self.len();
        let capacity = self.started.len() + self.added.len();
        if id.index() != next || next == capacity {
            return Err(MemoryError::NoSlot {
                name: plan.name.clone(),
                capacity,
            });
        }
        let region = Region::allocate_planned(plan, next)?;
        // Nobody else sets this slot: appends hold the lock, and it was empty.
        let _ = self.added[next - self.started.len()].set(region);
        Ok(())
    }

    /// As [`RegionSet::allocate`], with `headroom[i]` bytes in front of each buffer of
    /// region `i` (missing entries: none).
    pub fn allocate_with_headroom(
        cfgs: &[MemoryRegionConfig],
        headroom: &[usize],
    ) -> Result<Self, MemoryError> {
        let regions = cfgs
            .iter()
            .enumerate()
            .map(|(i, c)| Region::allocate_at(c, i, headroom.get(i).copied().unwrap_or(0)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::of(regions))
    }

    /// As [`RegionSet::allocate`] with every pool handing buffers out in FIFO order, as
    /// pinned and device regions' pools do: for tests of what FIFO pools allow (runs) on
    /// machines where pinned memory needs a GPU driver that is not there.
    #[cfg(test)]
    pub(crate) fn allocate_fifo(cfgs: &[MemoryRegionConfig]) -> Result<Self, MemoryError> {
        let mut set = Self::allocate(cfgs)?;
        for r in set.started.iter_mut() {
            r.pool = BufferPool::ordered(&r.name, r.num_bufs, PoolOrder::Fifo);
        }
        Ok(set)
    }

    /// An empty descriptor vector with room for `capacity` packets, reused when possible.
    #[inline]
    pub(crate) fn descriptor_vec(&self, capacity: usize) -> Vec<Packet> {
        // A large request takes a large spare first (no regrowing), a small one a small.
        let (first, second) = if capacity > SPARE_SMALL_CAPACITY {
            (&self.spare_large, &self.spare_descriptors)
        } else {
            if let Some(mut v) = thread_spare() {
                v.reserve(capacity);
                return v;
            }
            (&self.spare_descriptors, &self.spare_large)
        };
        match first.pop().or_else(|| second.pop()) {
            Some(mut v) => {
                v.reserve(capacity);
                v
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// Takes back a descriptor vector whose packets no longer own buffers.
    #[inline]
    pub(crate) fn recycle_descriptor_vec(&self, mut v: Vec<Packet>) {
        if v.capacity() == 0 || v.capacity() > SPARE_DESCRIPTOR_MAX_CAPACITY {
            return;
        }
        v.clear();
        // A full cache frees the vector instead.
        let _ = if v.capacity() > SPARE_SMALL_CAPACITY {
            self.spare_large.push(v)
        } else {
            match keep_thread_spare(v) {
                Some(v) => self.spare_descriptors.push(v),
                None => Ok(()),
            }
        };
    }

    /// Region by id.
    #[inline]
    pub fn get(&self, id: RegionId) -> &Region {
        match self.started.get(id.index()) {
            Some(r) => r,
            None => self.added_region(id),
        }
    }

    /// Region `id`, appended while the set was in use; panics when there is none.
    #[cold]
    #[inline(never)]
    fn added_region(&self, id: RegionId) -> &Region {
        match self.try_get(id) {
            Some(r) => r,
            None => panic!("region {} is not in this set", id.index()),
        }
    }

    /// Region `id`, or `None` when the set has no such region.
    #[inline]
    pub fn try_get(&self, id: RegionId) -> Option<&Region> {
        match self.started.get(id.index()) {
            Some(r) => Some(r),
            None => self.added.get(id.index() - self.started.len())?.get(),
        }
    }

    /// Region id by name: the newest of that name (a change that resized a region
    /// appended the new one).
    pub fn id_of(&self, name: &str) -> Option<RegionId> {
        let n = self.len();
        (0..n)
            .rev()
            .find(|&i| self.get(RegionId(i as u16)).name == name)
            .map(|i| RegionId(i as u16))
    }

    /// All regions, replaced ones included, by id.
    pub fn iter(&self) -> impl Iterator<Item = &Region> {
        self.started
            .iter()
            .chain(self.added.iter().map_while(OnceLock::get))
    }

    /// The newest region of each name (a region a change resized is left out; one it
    /// removed stays, as its memory does).
    pub fn newest(&self) -> impl Iterator<Item = &Region> {
        let all: Vec<&Region> = self.iter().collect();
        (0..all.len())
            .filter(move |&i| all[i + 1..].iter().all(|later| later.name != all[i].name))
            .map(|i| self.get(RegionId(i as u16)))
    }
}

#[cfg(test)]
mod tests;
