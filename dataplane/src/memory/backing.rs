//! What a region's memory is: anonymous or huge-page mappings, a hugetlbfs file, or
//! CUDA pinned or device memory, and how each is made.

use super::MemoryError;
use crate::hugepages;
use crate::plan::RegionPlan;
use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};
use std::ptr::NonNull;

/// The allocation behind a region; released when dropped.
pub(super) enum Backing {
    Mapped {
        ptr: NonNull<u8>,
        len: usize,
    },
    /// Huge pages in a hugetlbfs file (removed when dropped).
    HugeFile(crate::hugepages::HugeFile),
    #[cfg(feature = "cuda")]
    Device(gpudirect::DeviceBuffer),
    #[cfg(feature = "cuda")]
    Pinned(gpudirect::PinnedBuffer),
}

impl Drop for Backing {
    fn drop(&mut self) {
        if let Backing::Mapped { ptr, len } = *self {
            // SAFETY: the mapping was made in map_pages with this length and is unmapped once;
            // bursts hold an Arc to the region set, so no buffer outlives it.
            let _ = unsafe { munmap(ptr.as_ptr().cast(), len) };
        }
    }
}

/// Huge pages from a file in a hugetlbfs mount when one is usable, else anonymous.
pub(super) fn map_huge(
    cfg: &RegionPlan,
    bytes: usize,
    index: usize,
) -> Result<Backing, MemoryError> {
    let page = hugepages::default_page_size() as usize;
    let mount = hugepages::mount_for(page as u64).map_err(|reason| MemoryError::Map {
        name: cfg.name.clone(),
        kind: "huge",
        bytes,
        reason,
    })?;
    let Some(mount) = mount else {
        return map_pages(cfg, bytes, true);
    };
    let len = bytes.next_multiple_of(mount.page_size as usize);
    match hugepages::HugeFile::create(&mount, index, len) {
        Ok(f) => {
            tracing::debug!(
                "memory region {}: {len} bytes of huge pages backed by {}",
                cfg.name,
                f.path().display()
            );
            Ok(Backing::HugeFile(f))
        }
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOMEM.raw_os_error()) => Err(
            no_huge_pages(cfg, len / mount.page_size as usize, mount.page_size),
        ),
        Err(e) => Err(MemoryError::Map {
            name: cfg.name.clone(),
            kind: "huge",
            bytes: len,
            reason: format!("in {}: {e}", mount.path.display()),
        }),
    }
}

/// Anonymous memory of at least `bytes`: explicit huge pages (`MAP_HUGETLB`, populated at
/// once) when `huge`, else host pages through [`map_transparent_huge`].
pub(super) fn map_pages(
    cfg: &RegionPlan,
    bytes: usize,
    huge: bool,
) -> Result<Backing, MemoryError> {
    let huge_page = hugepages::default_page_size() as usize;
    let len = if huge {
        bytes.next_multiple_of(huge_page)
    } else {
        bytes.next_multiple_of(4096)
    };
    let mapped = if huge {
        let flags = MapFlags::PRIVATE | MapFlags::HUGETLB | MapFlags::POPULATE;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
        unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                flags,
            )
        }
    } else {
        map_transparent_huge(len, huge_page)
    };
    match mapped {
        Ok(p) => Ok(Backing::Mapped {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        }),
        Err(e) if huge => {
            let err = no_huge_pages(cfg, len / huge_page, huge_page as u64);
            if e == rustix::io::Errno::NOMEM
                || matches!(err, MemoryError::NoHugePages { pages_needed, pages_free, .. } if pages_needed > pages_free)
            {
                return Err(err);
            }
            Err(MemoryError::Map {
                name: cfg.name.clone(),
                kind: "huge",
                bytes: len,
                reason: e.to_string(),
            })
        }
        Err(e) => Err(MemoryError::Map {
            name: cfg.name.clone(),
            kind: "host",
            bytes: len,
            reason: e.to_string(),
        }),
    }
}

/// Anonymous host pages, `len` bytes, starting on a `huge_page` boundary and marked for
/// transparent huge pages when at least one fits. Buffers are handed out from across the
/// whole region, so with 4 KiB pages a region larger than what the TLB maps costs a page
/// walk on most packet touches; huge pages keep that to one entry per 2 MiB.
fn map_transparent_huge(len: usize, huge_page: usize) -> rustix::io::Result<*mut std::ffi::c_void> {
    let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
    let rw = ProtFlags::READ | ProtFlags::WRITE;
    if len < huge_page {
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
        return unsafe { mmap_anonymous(std::ptr::null_mut(), len, rw, flags) };
    }
    // Map a page more and trim both ends, so the kept part starts on a boundary.
    let padded = len + huge_page;
    // SAFETY: as above.
    let raw = unsafe { mmap_anonymous(std::ptr::null_mut(), padded, rw, flags)? };
    let start = raw as usize;
    let aligned = start.next_multiple_of(huge_page);
    let head = aligned - start;
    let tail = padded - head - len;
    // SAFETY: both ranges lie inside the mapping just made and outside the part kept;
    // nothing refers to them yet.
    unsafe {
        if head > 0 {
            munmap(raw, head)?;
        }
        if tail > 0 {
            munmap((aligned + len) as *mut std::ffi::c_void, tail)?;
        }
    }
    let kept = aligned as *mut std::ffi::c_void;
    // SAFETY: advice on the mapping kept; the kernel only changes how it backs the pages.
    // Without THP (disabled, or an old kernel) the advice fails and 4 KiB pages serve.
    let _ = unsafe { rustix::mm::madvise(kept, len, rustix::mm::Advice::LinuxHugepage) };
    Ok(kept)
}

/// The error for a huge region that did not get its pages, with the pool's numbers.
fn no_huge_pages(cfg: &RegionPlan, pages_needed: usize, page_size: u64) -> MemoryError {
    let (free, total) = hugepages::available_and_total(page_size);
    let (free, total) = (free as usize, total as usize);
    MemoryError::NoHugePages {
        name: cfg.name.clone(),
        pages_needed,
        pages_free: free,
        reserve: total + pages_needed.saturating_sub(free),
    }
}

#[cfg(feature = "cuda")]
pub(super) fn cuda_backing(cfg: &RegionPlan, bytes: usize) -> Result<Backing, MemoryError> {
    let needs = |e: gpudirect::GpuError| match e {
        gpudirect::GpuError::NoSuchDevice { .. } => MemoryError::NoSuchGpu {
            name: cfg.name.clone(),
            reason: e.to_string(),
        },
        e => MemoryError::NeedsCuda {
            name: cfg.name.clone(),
            kind: cfg.kind.name(),
            reason: e.to_string(),
        },
    };
    if cfg.kind == crate::config::MemoryKind::Device {
        gpudirect::DeviceBuffer::alloc(cfg.affinity, bytes)
            .map(Backing::Device)
            .map_err(needs)
    } else {
        gpudirect::PinnedBuffer::alloc(cfg.affinity, bytes)
            .map(Backing::Pinned)
            .map_err(needs)
    }
}

#[cfg(not(feature = "cuda"))]
pub(super) fn cuda_backing(cfg: &RegionPlan, _bytes: usize) -> Result<Backing, MemoryError> {
    Err(MemoryError::NeedsCuda {
        name: cfg.name.clone(),
        kind: cfg.kind.name(),
        reason: "this build has no CUDA support; rebuild with --features cuda".into(),
    })
}
