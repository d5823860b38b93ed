//! Benchmarks behind `dataplane bench`.

pub mod fwd;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod raw;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod ring;
pub mod socket;
pub mod traffic;
