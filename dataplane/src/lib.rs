//! `dataplane`: a kernel-bypass, poll-mode data plane.
//!
//! One YAML file describes memory regions (host, hugepage, pinned host, CUDA device),
//! interfaces with RX/TX queues, and flow rules. [`DataPlane::start`] allocates the regions,
//! starts one pinned busy-poll worker per configured core and hands the application one
//! [`RxQueue`] and [`TxQueue`] per queue. Packets travel in [`Burst`]s that own their
//! buffers: dropping a burst returns every buffer to its pool, and sending one moves it.

pub mod affinity;
pub mod bench;
pub mod burst;
pub mod capture;
pub mod clock;
pub mod config;
pub(crate) mod copy_helpers;
pub mod cycles;
pub mod descriptor;
pub mod doctor;
pub mod engine;
pub mod files;
pub mod hugepages;
pub mod memory;
pub mod metrics;
pub mod packet;
pub mod plan;
pub mod plane;
#[cfg(feature = "rdma")]
pub mod rdma_conn;
pub mod reorder;
pub mod stage;
pub mod stats;
pub mod steering;
pub mod sysinfo;
pub mod worker;

/// The bulk ring buffer pools are built on (its own crate, so loom can model-check it).
pub use dataplane_ring as ring;

pub use burst::{Burst, Packet, Segment};
pub use memory::pool::flush_thread_caches;
pub use plane::{DataPlane, RecvError, RxQueue, SendError, StartError, Stream, TxFailure, TxQueue};
