//! Mbuf pools: owned by the port that made them and freed when it drops, plus the
//! non-owning pointer queue handles use, and the pool over a lent region.

use super::error::{DpdkError, free_memory_text};
use crate::memory::BufferLender;
use crate::ring::Ring;
use dpdk_sys as sys;
use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

/// A mempool pointer that may move between threads (DPDK mempools are thread-safe). It
/// does not own the pool: the port's [`Mempool`] does, and outlives every queue handle.
#[derive(Clone, Copy)]
pub struct PoolPtr(pub *mut sys::rte_mempool);
// SAFETY: rte_mempool operations are multi-thread safe; the pointer stays valid while the
// owning port lives, which is longer than any queue handle (workers are joined first).
unsafe impl Send for PoolPtr {}
// SAFETY: as above.
unsafe impl Sync for PoolPtr {}

/// An mbuf pool this process created; freed on drop.
pub struct Mempool {
    ptr: NonNull<sys::rte_mempool>,
    name: String,
}

// SAFETY: as for PoolPtr; the owner frees it once, after the port that used it stopped.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

/// The message of a failed mbuf pool: what was asked for, DPDK's reason, what is free.
pub fn pool_error(what: &'static str, mbufs: usize, data_room: usize) -> PoolError {
    PoolError {
        source: DpdkError::last(what),
        mbufs,
        data_room,
        free_memory: free_memory_text(),
    }
}

/// An mbuf pool could not be created.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{source} (asked for {mbufs} mbufs of {data_room} bytes, {:.1} MiB; {free_memory})",
    // An mbuf is its 128-byte header, the data room and the private area (none here).
    (*mbufs as u64 * (128 + *data_room as u64)) as f64 / (1u64 << 20) as f64
)]
pub struct PoolError {
    /// DPDK's reason.
    pub source: DpdkError,
    /// Mbufs asked for.
    pub mbufs: usize,
    /// Data room per mbuf.
    pub data_room: usize,
    /// What the machine has free.
    pub free_memory: String,
}

impl Mempool {
    /// A pool of `mbufs` mbufs with `data_room` bytes each on `socket`.
    pub fn pktmbuf(
        name: String,
        mbufs: usize,
        cache: u32,
        data_room: u16,
        socket: i32,
    ) -> Result<Self, PoolError> {
        let cname = CString::new(name.as_str()).expect("pool names have no NUL");
        // SAFETY: valid arguments; the pool is freed by Drop.
        let p = unsafe {
            sys::rte_pktmbuf_pool_create(cname.as_ptr(), mbufs as u32, cache, 0, data_room, socket)
        };
        NonNull::new(p)
            .map(|ptr| Self { ptr, name })
            .ok_or_else(|| pool_error("cannot create the mbuf pool", mbufs, data_room.into()))
    }

    /// A pool whose `mbufs` buffers are `ext` (external memory, registered before).
    pub fn over_external(
        name: String,
        mbufs: usize,
        data_room: u16,
        socket: i32,
        ext: &sys::rte_pktmbuf_extmem,
    ) -> Result<Self, PoolError> {
        let cname = CString::new(name.as_str()).expect("pool names have no NUL");
        // SAFETY: `ext` describes registered memory with room for `mbufs` buffers; the
        // pool is freed by Drop, before the memory is unregistered.
        let p = unsafe {
            sys::rte_pktmbuf_pool_create_extbuf(
                cname.as_ptr(),
                mbufs as u32,
                256,
                0,
                data_room,
                socket,
                ext,
                1,
            )
        };
        NonNull::new(p)
            .map(|ptr| Self { ptr, name })
            .ok_or_else(|| {
                pool_error(
                    "cannot create the mbuf pool over the region",
                    mbufs,
                    data_room.into(),
                )
            })
    }

    /// The pointer queue handles use.
    pub fn ptr(&self) -> PoolPtr {
        PoolPtr(self.ptr.as_ptr())
    }

    /// The pool's name (unique in the process).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: created by this process and freed once; the port that used it is
        // stopped and closed (its owner drops the port first), so no mbuf is in a ring.
        unsafe { sys::rte_mempool_free(self.ptr.as_ptr()) };
    }
}

/// An mbuf pool over a region's own buffers (external buffers), and the mbuf of each
/// buffer so freed buffers find their way back.
pub struct LentPool {
    pub pool: PoolPtr,
    /// `mbufs[i]` carries region buffer `i`.
    pub mbufs: Vec<*mut sys::rte_mbuf>,
    /// Buffers the application is done with. The RX worker frees their mbufs (in bulk,
    /// through its own mempool cache): freeing on the application's thread would pull
    /// every mbuf header across cores.
    pub returned: Ring<u32>,
}

// SAFETY: the mbuf pointers are only dereferenced by DPDK calls on the RX worker; the
// returned ring is thread-safe.
unsafe impl Send for LentPool {}
// SAFETY: as above.
unsafe impl Sync for LentPool {}

/// The region side of a [`LentPool`].
pub struct LentBuffers(pub Arc<LentPool>);

impl BufferLender for LentBuffers {
    fn give_back(&self, indices: &[u32]) -> bool {
        // The ring has a slot for every buffer, so it cannot be full.
        let ok = self.0.returned.enqueue_bulk(indices);
        assert!(ok, "lent buffer returned twice");
        true
    }
}
