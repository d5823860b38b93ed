//! Benchmarks behind `dataplane bench`.

pub mod raw;
pub mod ring;
pub mod traffic;
