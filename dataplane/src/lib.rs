//! `dataplane`: a kernel-bypass, poll-mode data plane.
//!
//! One YAML file describes memory regions (host, hugepage, pinned host, CUDA device),
//! interfaces with RX/TX queues, and flow rules. [`DataPlane::start`] allocates the regions,
//! starts one pinned busy-poll worker per configured core and hands the application one
//! [`RxQueue`] and [`TxQueue`] per queue. Packets travel in [`Burst`]s that own their
//! buffers: dropping a burst returns every buffer to its pool, and sending one moves it.

// `config_yaml!` for the unit tests' configurations (shared with the integration tests).
#[cfg(test)]
#[macro_use]
#[path = "../tests/common/yaml.rs"]
mod test_yaml;

pub mod affinity;
pub mod burst;
pub mod capture;
pub mod clock;
pub mod config;
pub mod copy_helpers;
pub mod cycles;
pub mod descriptor;
pub mod doctor;
pub mod engine;
pub mod files;
pub mod hugepages;
pub mod memory;
pub mod metrics;
pub mod netdev;
pub mod packet;
pub mod plan;
pub mod plane;
pub mod protocol;
#[cfg(feature = "rdma")]
pub mod rdma_conn;
pub mod reorder;
mod sockaddr;
pub mod stage;
pub mod stats;
pub mod steering;
pub mod sysinfo;
pub mod worker;

/// The bulk ring buffer pools are built on (its own crate, so loom can model-check it).
pub use dataplane_ring as ring;

/// The front page and the book (`README.md`, `docs/`): their `rust` code blocks run as
/// doctests, so an example that stops working fails `cargo test`.
#[cfg(doctest)]
pub mod book {
    #[doc = include_str!("../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../docs/library.md")]
    pub struct Library;
    #[doc = include_str!("../../docs/features.md")]
    pub struct Features;
    #[doc = include_str!("../../docs/configuration.md")]
    pub struct Configuration;
    #[doc = include_str!("../../docs/operations.md")]
    pub struct Operations;
    #[doc = include_str!("../../docs/dpdk.md")]
    pub struct Dpdk;
    #[doc = include_str!("../../docs/sockets.md")]
    pub struct Sockets;
    #[doc = include_str!("../../docs/rdma.md")]
    pub struct Rdma;
    #[doc = include_str!("../../docs/gpu.md")]
    pub struct Gpu;
    #[doc = include_str!("../../docs/architecture.md")]
    pub struct Architecture;
    #[doc = include_str!("../../docs/introduction.md")]
    pub struct Introduction;
    #[doc = include_str!("../../docs/bench-output.md")]
    pub struct BenchOutput;
    #[doc = include_str!("../../docs/hugepages.md")]
    pub struct Hugepages;
    #[doc = include_str!("../../docs/aarch64.md")]
    pub struct Aarch64;
    #[doc = include_str!("../../docs/testing.md")]
    pub struct Testing;
    #[doc = include_str!("../../docs/sensors.md")]
    pub struct Sensors;
}

pub use burst::{Burst, Frames, FramesMut, Packet, Segment};
pub use memory::pool::flush_thread_caches;
pub use plane::{
    ChangeError, ChangeReport, DataPlane, HeapItem, IqGpuBatch, IqStream, RecvError, RxQueue,
    SendError, SpeadSendCounters, SpeadSendError, SpeadSender, SpeadStream, StartError, Stream,
    TxFailure, TxQueue,
};
