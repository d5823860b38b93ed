//! CUDA memory for NIC DMA: device buffers and page-locked host buffers, with the raw
//! pointers and lengths that NIC registration (DPDK external memory, RDMA memory regions)
//! needs.
//!
//! The CUDA driver is loaded at run time (cudarc with dynamic loading), so a binary built
//! on a machine without CUDA runs everywhere. Every entry point first checks that the
//! driver library is present and returns [`GpuError::NoDriver`] otherwise; cudarc itself
//! would panic.
//!
//! Without the `cuda` feature (on by default) only the CPU side is built: [`reorder`] (the
//! reorder and sample conversion as CPU code), the constants, [`GpuError`] and
//! [`driver_present`], which then says no; cudarc is not compiled.

#[cfg(feature = "cuda")]
mod cuda;
pub mod frames;
#[cfg(feature = "cuda")]
pub mod gds;
#[cfg(feature = "cuda")]
pub mod kernels;
pub mod reorder;

#[cfg(feature = "cuda")]
pub use cuda::*;
#[cfg(feature = "cuda")]
pub use kernels::{Gpu, SampleStorage};

/// Items per kernel launch at most (the argument table's size).
pub const MAX_ITEMS: usize = 4096;
/// Argument tables (so launches) in flight per [`Gpu`] at most.
pub const TABLE_SLOTS: usize = 4;
/// Most head and tail bytes a frame digest copies out per packet.
pub const MAX_DIGEST_BYTES: u32 = 4096;

/// Checks that `len` bytes at `offset` lie inside `size` bytes, without overflow (in
/// release builds too): device copies and exports go through it.
pub fn check_range(offset: usize, len: usize, size: usize) -> Result<(), GpuError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(GpuError::OutOfRange(format!(
            "{len} bytes at offset {offset} of a {size}-byte buffer"
        ))),
    }
}

/// Bytes per packet of a frame digest of `head` leading and `tail` trailing bytes, at most
/// [`MAX_DIGEST_BYTES`] (the kernel indexes its output with this product).
#[inline]
pub fn digest_bytes(head: u32, tail: u32) -> Result<usize, GpuError> {
    match head.checked_add(tail) {
        Some(per) if per <= MAX_DIGEST_BYTES => Ok(per as usize),
        _ => Err(digest_too_large(head, tail)),
    }
}

#[cold]
#[inline(never)]
fn digest_too_large(head: u32, tail: u32) -> GpuError {
    GpuError::OutOfRange(format!(
        "a digest of {head} head and {tail} tail bytes per packet (at most {MAX_DIGEST_BYTES} in all)"
    ))
}

#[cfg(test)]
mod range_tests {
    use super::*;

    #[test]
    fn ranges_and_digest_sizes_that_overflow_are_errors() {
        assert!(check_range(0, 10, 10).is_ok());
        assert!(check_range(1, 10, 10).is_err());
        assert!(check_range(usize::MAX, 2, 10).is_err());
        assert!(check_range(2, usize::MAX, 10).is_err());
        assert_eq!(digest_bytes(16, 16).unwrap(), 32);
        assert!(digest_bytes(u32::MAX, 2).is_err());
        assert!(digest_bytes(MAX_DIGEST_BYTES, 1).is_err());
    }
}

/// Alignment of device allocations: NICs register GPU memory in 64 KiB pages.
pub const DEVICE_ALIGNMENT: usize = 64 * 1024;

/// Errors from the CUDA layer.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No CUDA driver library (libcuda.so) could be loaded.
    #[error("no CUDA driver found (libcuda.so.1 could not be loaded)")]
    NoDriver,
    /// The requested GPU does not exist.
    #[error("GPU {ordinal} does not exist ({count} GPU(s) found: {present})")]
    NoSuchDevice {
        /// Requested ordinal.
        ordinal: u32,
        /// GPUs found.
        count: u32,
        /// The GPUs present, with names and UUIDs.
        present: String,
    },
    /// No NVRTC library (libnvrtc.so) could be loaded, so the kernels cannot be built.
    #[error(
        "no NVRTC found (libnvrtc.so could not be loaded); install the CUDA runtime compiler (cuda-nvrtc) next to the driver"
    )]
    NoNvrtc,
    /// NVRTC rejected the kernel source.
    #[error("compiling the GPU kernels failed: {0}")]
    Compile(String),
    /// The GPU or driver cannot do what was asked.
    #[error("{0}")]
    Unsupported(String),
    /// An offset, length or count outside what the buffer or table holds (checked in
    /// release builds: nothing is copied or launched).
    #[error("out of range: {0}")]
    OutOfRange(String),
    /// A CUDA call failed.
    #[cfg(feature = "cuda")]
    #[error("{call} failed: {source}")]
    Driver {
        /// The CUDA call.
        call: &'static str,
        /// The driver's error.
        source: cudarc::driver::result::DriverError,
    },
    /// This build has no CUDA (the `cuda` feature is off).
    #[cfg(not(feature = "cuda"))]
    #[error("this build has no CUDA support (the `cuda` feature is off)")]
    NotBuilt,
}

/// True when the CUDA driver library can be loaded; always false in a build without the
/// `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub fn driver_present() -> bool {
    false
}
