//! CUDA memory for NIC DMA: device buffers and page-locked host buffers, with the raw
//! pointers and lengths that NIC registration (DPDK external memory, RDMA memory regions)
//! needs.
//!
//! The CUDA driver is loaded at run time (cudarc with dynamic loading), so a binary built
//! on a machine without CUDA runs everywhere. Every entry point first checks that the
//! driver library is present and returns [`GpuError::NoDriver`] otherwise; cudarc itself
//! would panic.

use cudarc::driver::{CudaContext, result, sys};
use std::sync::Arc;

/// Alignment of device allocations: NICs register GPU memory in 64 KiB pages.
pub const DEVICE_ALIGNMENT: usize = 64 * 1024;

/// Errors from the CUDA layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library (libcuda.so) could be loaded.
    #[error("no CUDA driver found (libcuda.so.1 could not be loaded)")]
    NoDriver,
    /// The requested GPU does not exist.
    #[error("GPU {ordinal} does not exist ({count} GPU(s) found)")]
    NoSuchDevice {
        /// Requested ordinal.
        ordinal: u32,
        /// GPUs found.
        count: u32,
    },
    /// A CUDA call failed.
    #[error("{call} failed: {source}")]
    Driver {
        /// The CUDA call.
        call: &'static str,
        /// The driver's error.
        source: result::DriverError,
    },
}

fn driver(call: &'static str) -> impl FnOnce(result::DriverError) -> GpuError {
    move |source| GpuError::Driver { call, source }
}

/// True when the CUDA driver library can be loaded on this machine.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    unsafe { sys::is_culib_present() }
}

/// Number of GPUs, or [`GpuError::NoDriver`].
pub fn device_count() -> Result<u32, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    result::init().map_err(driver("cuInit"))?;
    let n = result::device::get_count().map_err(driver("cuDeviceGetCount"))?;
    Ok(n.max(0) as u32)
}

/// Opens the primary context of GPU `ordinal`.
pub fn context(ordinal: u32) -> Result<Arc<CudaContext>, GpuError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(GpuError::NoSuchDevice { ordinal, count });
    }
    CudaContext::new(ordinal as usize).map_err(driver("cuDevicePrimaryCtxRetain"))
}

/// The GPU's name, e.g. "NVIDIA H200".
pub fn device_name(ordinal: u32) -> Result<String, GpuError> {
    context(ordinal)?.name().map_err(driver("cuDeviceGetName"))
}

/// Device memory, 64 KiB aligned, with `SYNC_MEMOPS` set so that DMA from a NIC and CUDA
/// copies are ordered.
#[derive(Debug)]
pub struct DeviceBuffer {
    ctx: Arc<CudaContext>,
    raw: sys::CUdeviceptr,
    aligned: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes on GPU `ordinal`.
    pub fn alloc(ordinal: u32, len: usize) -> Result<Self, GpuError> {
        let ctx = context(ordinal)?;
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // Over-allocate so the start can be rounded up to the NIC page size.
        // SAFETY: the context is bound to this thread; the result is freed in Drop.
        let raw =
            unsafe { result::malloc_sync(len + DEVICE_ALIGNMENT) }.map_err(driver("cuMemAlloc"))?;
        let aligned = raw.div_ceil(DEVICE_ALIGNMENT as u64) * DEVICE_ALIGNMENT as u64;
        let mut one: u32 = 1;
        // SAFETY: `aligned` lies inside the allocation just made; the attribute takes a u32.
        let set = unsafe {
            sys::cuPointerSetAttribute(
                (&mut one as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                aligned,
            )
        };
        let buf = Self {
            ctx,
            raw,
            aligned,
            len,
        };
        if set != sys::CUresult::CUDA_SUCCESS {
            return Err(GpuError::Driver {
                call: "cuPointerSetAttribute(SYNC_MEMOPS)",
                source: result::DriverError(set),
            });
        }
        Ok(buf)
    }

    /// Device address of the first byte.
    pub fn device_ptr(&self) -> u64 {
        self.aligned
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` to `offset` (synchronous; for set-up and tests, not the packet path).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        assert!(
            offset + data.len() <= self.len,
            "write past the end of a device buffer"
        );
        self.ctx
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the destination range lies inside this allocation (checked above).
        unsafe { result::memcpy_htod_sync(self.aligned + offset as u64, data) }
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Copies from `offset` into `out` (synchronous).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        assert!(
            offset + out.len() <= self.len,
            "read past the end of a device buffer"
        );
        self.ctx
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the source range lies inside this allocation (checked above).
        unsafe { result::memcpy_dtoh_sync(out, self.aligned + offset as u64) }
            .map_err(driver("cuMemcpyDtoH"))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `raw` came from cuMemAlloc in this context and is freed once.
            let _ = unsafe { result::free_sync(self.raw) };
        }
    }
}

/// Page-locked host memory, mapped for the GPU and usable by the CPU.
#[derive(Debug)]
pub struct PinnedBuffer {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; access is governed by the
// borrow rules of its accessors.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared references only hand out raw pointers and read-only views.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `len` bytes of pinned host memory on behalf of GPU `ordinal`. Not
    /// write-combined: the CPU reads packet headers from it.
    pub fn alloc(ordinal: u32, len: usize) -> Result<Self, GpuError> {
        let ctx = context(ordinal)?;
        ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: the context is bound; the memory is freed in Drop.
        let ptr =
            unsafe { result::malloc_host(len.max(1), flags) }.map_err(driver("cuMemHostAlloc"))?;
        Ok(Self {
            ctx,
            ptr: ptr.cast(),
            len,
        })
    }

    /// Host address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed once.
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs on any machine: without a driver every call must fail with NoDriver, never panic.
    #[test]
    fn missing_driver_is_an_error_not_a_panic() {
        if driver_present() {
            eprintln!("CUDA driver present: checking a real allocation instead");
            let b = DeviceBuffer::alloc(0, 1 << 20).expect("device alloc");
            assert_eq!(b.device_ptr() % DEVICE_ALIGNMENT as u64, 0);
            b.write(100, b"gpudirect").unwrap();
            let mut back = [0u8; 9];
            b.read(100, &mut back).unwrap();
            assert_eq!(&back, b"gpudirect");
            let p = PinnedBuffer::alloc(0, 4096).expect("pinned alloc");
            // SAFETY: the buffer is 4096 bytes long and owned here.
            unsafe { p.as_ptr().write_bytes(7, 4096) };
            return;
        }
        eprintln!("SKIP GPU part: no CUDA driver found on this machine");
        assert!(matches!(device_count(), Err(GpuError::NoDriver)));
        assert!(matches!(
            DeviceBuffer::alloc(0, 4096),
            Err(GpuError::NoDriver)
        ));
        assert!(matches!(
            PinnedBuffer::alloc(0, 4096),
            Err(GpuError::NoDriver)
        ));
    }
}
