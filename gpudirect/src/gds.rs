//! GPUDirect Storage through cuFile: bytes in GPU memory written to files by the cuFile
//! library, without passing through our host memory. Where the kernel has no GDS driver
//! (`nvidia-fs`) or the file system no GDS support, cuFile's compatibility mode moves them
//! through its own host bounce buffers; [`storage_mode`] says which applies.
//!
//! [`DeviceStaging`] gathers packets from anywhere in GPU memory into one contiguous device
//! buffer (stream-ordered device-to-device copies), so a whole batch goes to the file in
//! one `cuFileWrite`.

use crate::GpuError;
use crate::cuda::{DeviceBuffer, context, driver};
use cudarc::cufile::{safe::Cufile, safe::FileHandle, sys as cufile_sys};
use cudarc::driver::{CudaStream, result};
use std::sync::Arc;

fn storage(call: &'static str) -> impl FnOnce(cudarc::cufile::result::CufileError) -> GpuError {
    move |e| GpuError::Unsupported(format!("{call} failed: {e:?}"))
}

/// True when the cuFile library (libcufile.so) can be loaded.
pub fn cufile_present() -> bool {
    // SAFETY: only tries to dlopen the library; no cuFile call is made.
    unsafe { cufile_sys::is_culib_present() }
}

/// How cuFile moves bytes on this machine: `"gds"` when the `nvidia-fs` kernel driver is
/// loaded, `"compatibility"` otherwise (through cuFile's host bounce buffers).
pub fn storage_mode() -> &'static str {
    if std::path::Path::new("/proc/driver/nvidia-fs").exists() {
        "gds"
    } else {
        "compatibility"
    }
}

/// A contiguous device buffer that packets are gathered into, on a stream of its own.
pub struct DeviceStaging {
    buf: DeviceBuffer,
    stream: Arc<CudaStream>,
}

// SAFETY: the buffer and stream are plain driver handles, usable from any thread that
// binds the context (every call here does); the staging moves between the thread that
// fills it and the writer thread, never used by two at once (it is not `Sync`).
unsafe impl Send for DeviceStaging {}
// SAFETY: every method through `&self` is a driver call on thread-safe handles (queueing a
// copy, synchronizing the stream, reading to the host); none hands out a host reference
// into the device memory, so sharing cannot alias Rust memory. A staging shared between
// the thread that fills it and a writer is written once and then only read.
unsafe impl Sync for DeviceStaging {}

impl DeviceStaging {
    /// `len` bytes on GPU `ordinal`.
    pub fn alloc(ordinal: u32, len: usize) -> Result<Self, GpuError> {
        let ctx = context(ordinal)?;
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Ok(Self {
            buf: DeviceBuffer::alloc(ordinal, len)?,
            stream,
        })
    }

    /// Capacity in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Device address of the first byte (for a kernel that writes into it; the caller
    /// orders that kernel before [`DeviceStaging::wait`] or a cuFile write).
    pub fn device_ptr(&self) -> u64 {
        self.buf.device_ptr()
    }

    /// True for a zero-length staging.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Queues a copy of `len` bytes from device address `src` to offset `at`; [`wait`]
    /// returns once every queued copy is done.
    ///
    /// # Safety
    /// `src..src + len` must be device memory of this GPU that stays readable (and
    /// unchanged) until [`wait`] returns.
    ///
    /// [`wait`]: DeviceStaging::wait
    pub unsafe fn copy_in(&self, at: usize, src: u64, len: usize) -> Result<(), GpuError> {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len()),
            "copy past the end of a device staging buffer"
        );
        self.stream
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the destination lies inside this allocation (checked above); the source
        // is the caller's promise.
        unsafe {
            result::memcpy_dtod_async(
                self.buf.device_ptr() + at as u64,
                src,
                len,
                self.stream.cu_stream(),
            )
        }
        .map_err(driver("cuMemcpyDtoDAsync"))
    }

    /// Queues a copy of host bytes to offset `at` (the driver copies pageable memory before
    /// returning, so `data` may change afterwards).
    pub fn copy_in_host(&self, at: usize, data: &[u8]) -> Result<(), GpuError> {
        assert!(
            at.checked_add(data.len())
                .is_some_and(|end| end <= self.len()),
            "copy past the end of a device staging buffer"
        );
        self.stream
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the destination lies inside this allocation (checked above). The source
        // is pageable host memory, which cuMemcpyHtoDAsync copies out before returning.
        unsafe { result::memcpy_htod_sync(self.buf.device_ptr() + at as u64, data) }
            .map_err(driver("cuMemcpyHtoD"))
    }

    /// Waits for every queued copy.
    pub fn wait(&self) -> Result<(), GpuError> {
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    /// Copies `out.len()` bytes at `at` to the host (for checks).
    pub fn read(&self, at: usize, out: &mut [u8]) -> Result<(), GpuError> {
        self.wait()?;
        self.buf.read(at, out)
    }
}

/// A file written from GPU memory through cuFile.
pub struct GdsFile {
    handle: FileHandle,
    _driver: Arc<Cufile>,
}

// SAFETY: a cuFile handle may be used from any thread (the library is thread safe); the
// file moves to the writer thread and is used there only.
unsafe impl Send for GdsFile {}

impl GdsFile {
    /// Opens the cuFile driver (once per process) and registers `file` with it.
    pub fn register(file: std::fs::File) -> Result<Self, GpuError> {
        if !crate::driver_present() {
            return Err(GpuError::NoDriver);
        }
        if !cufile_present() {
            return Err(GpuError::Unsupported(
                "GPUDirect Storage needs the cuFile library (libcufile.so, CUDA's libcufile or the nvidia-cufile package) on the library path".into(),
            ));
        }
        let driver_handle = Cufile::new().map_err(storage("cuFileDriverOpen"))?;
        let handle = driver_handle
            .register(file)
            .map_err(storage("cuFileHandleRegister"))?;
        Ok(Self {
            handle,
            _driver: driver_handle,
        })
    }

    /// Writes `len` bytes from offset `from` of `staging` to `file_offset`, after the
    /// staging's queued copies are done.
    pub fn write(
        &self,
        staging: &DeviceStaging,
        from: usize,
        len: usize,
        file_offset: u64,
    ) -> Result<(), GpuError> {
        assert!(
            from.checked_add(len)
                .is_some_and(|end| end <= staging.len()),
            "write past the end of a device staging buffer"
        );
        staging.wait()?;
        staging
            .stream
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        let mut done = 0usize;
        while done < len {
            // SAFETY: the source range lies inside the staging allocation (checked above)
            // and its copies are complete; the handle is registered and open.
            let n = unsafe {
                cudarc::cufile::result::write(
                    self.handle.cu(),
                    staging.buf.device_ptr() as *mut std::ffi::c_void,
                    len - done,
                    (file_offset + done as u64) as i64,
                    (from + done) as i64,
                )
            }
            .map_err(storage("cuFileWrite"))?;
            if n <= 0 {
                return Err(GpuError::Unsupported(format!(
                    "cuFileWrite wrote nothing at file offset {} ({n})",
                    file_offset + done as u64
                )));
            }
            done += n as usize;
        }
        Ok(())
    }

    /// The registered file.
    pub fn file(&self) -> &std::fs::File {
        self.handle.file()
    }
}
