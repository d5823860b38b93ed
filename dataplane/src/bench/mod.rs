//! Benchmarks behind `dataplane bench`.

pub mod raw;
pub mod rdma;
pub mod ring;
pub mod traffic;
