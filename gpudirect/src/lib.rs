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
pub use kernels::Gpu;

/// Items per kernel launch at most (the argument table's size).
pub const MAX_ITEMS: usize = 4096;
/// Argument tables (so launches) in flight per [`Gpu`] at most.
pub const TABLE_SLOTS: usize = 4;

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
