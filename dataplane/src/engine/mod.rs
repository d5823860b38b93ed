//! Engines move packets between queues and the outside world. Each engine hands out one
//! receive and one transmit handle per queue; a handle is used by exactly one worker, so
//! per-queue state needs no locking.

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod fault;
pub mod loopback;
pub mod wire;

use crate::burst::Burst;
use crate::config::{Config, Direction, EngineKind};
use crate::memory::RegionSet;
use crate::plan::Plan;
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use std::sync::Arc;

pub use crate::plan::{Capabilities, Overflow};

/// Receive side of one queue.
pub trait RxPort: Send {
    /// Moves up to `max` received packets into `into`; returns how many.
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize;

    /// True (once) when the burst being assembled must be delivered now, even if short:
    /// the next packets were steered under newer flow rules.
    fn take_boundary(&mut self) -> bool {
        false
    }
}

/// Transmit side of one queue.
pub trait TxPort: Send {
    /// Transmits `burst`. Returns `None` when all of it was taken, or the packets that
    /// could not be sent yet (the worker offers them again).
    fn transmit(&mut self, burst: Burst) -> Option<Burst>;

    /// Called when the worker has nothing to send on this queue.
    fn idle(&mut self) {}
}

/// A packet engine.
pub trait Engine: Send + Sync {
    /// Name for reports (`loopback`, `dpdk`, ...).
    fn name(&self) -> &'static str;
    /// Receive handle of queue `queue` of interface `port`; `counters` are the queue's own
    /// (its worker is their writer), for drops the engine sees (pool empty, NIC misses).
    fn rx_port(
        &self,
        port: u16,
        queue: u16,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError>;
    /// Transmit handle of queue `queue` of interface `port`.
    /// `counters` are the queue's own (the worker is their writer); engines that drop
    /// frames on the way out (e.g. software steering) count them there.
    fn tx_port(
        &self,
        port: u16,
        queue: u16,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError>;
    /// What the engine needs and can do; the same as the plan's
    /// `Capabilities::of(engine)`, which start-up planned with.
    fn capabilities(&self) -> Capabilities;
    /// Where flow steering happens: "software", or "rte_flow" when the device's flow
    /// tables do it (a mix lists each interface).
    fn steering(&self) -> String;

    /// Called on each worker thread after pinning and before its first poll, and again
    /// (with `false`) before it exits; engines register per-thread state here.
    fn worker_thread(&self, _starting: bool) {}

    /// The MAC address of interface `port`, stamped into frames by the `tx_eth_src`
    /// offload; `None` when the engine has none to give.
    fn mac_address(&self, _port: u16) -> Option<[u8; 6]> {
        None
    }
}

/// An engine could not be created or a queue could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The configuration asks for an engine this build does not have yet.
    #[error(
        "engine `{0}` is not available in this build; this build runs the software loopback (loopback: \"sw\")"
    )]
    Unavailable(&'static str),
    /// The configuration asks for DPDK in a build without it.
    #[error(
        "the DPDK engine is not in this build; rebuild with `cargo build --release --features dpdk` (needs apt-get install dpdk libdpdk-dev libclang-dev pkg-config)"
    )]
    DpdkNotBuilt,
    /// `roce://` interfaces given to the packet plane.
    #[error(
        "roce:// interfaces are RDMA connections, not packet queues: start them with `dataplane::rdma_plane::RdmaPlane::start` (accept/connect give streams with send(burst) and poll()), or run `dataplane bench rdma FILE`"
    )]
    Connections,
    /// A start-up thread panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// DPDK's EAL did not start.
    #[cfg(feature = "dpdk")]
    #[error("{source} (EAL arguments: {args}; {free_memory})")]
    Eal {
        /// DPDK's reason.
        source: dpdk::DpdkError,
        /// The arguments it was given.
        args: String,
        /// What the machine has free.
        free_memory: String,
    },
    /// A DPDK call on an interface's port failed.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}` ({address}): {source}")]
    Device {
        /// Interface name.
        interface: String,
        /// Its address.
        address: String,
        /// DPDK's reason.
        source: dpdk::DpdkError,
    },
    /// An mbuf pool of an interface could not be made.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}`{}: {source}", queue_label(*direction, *queue))]
    Pool {
        /// Interface name.
        interface: String,
        /// Queue direction.
        direction: Direction,
        /// Queue id; `None` for an idle device queue.
        queue: Option<u16>,
        /// Why.
        source: dpdk::PoolError,
    },
    /// A region could not be lent to an RX queue's port.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}` RX queue {queue}: {source}")]
    Lend {
        /// Interface name.
        interface: String,
        /// Queue id.
        queue: u16,
        /// Why.
        source: dpdk::LendError,
    },
    /// Flow rules could not be put on an interface's device.
    #[cfg(feature = "dpdk")]
    #[error("interface `{interface}`: {source}")]
    Flow {
        /// Interface name.
        interface: String,
        /// Why.
        source: dpdk::FlowError,
    },
    /// An interface cannot be run as configured.
    #[error("interface `{interface}`: {reason}")]
    Interface {
        /// Interface name.
        interface: String,
        /// Why.
        reason: String,
    },
    /// A queue cannot be run as configured.
    #[error("interface `{interface}`{}: {reason}", queue_label(*direction, Some(*queue)))]
    Queue {
        /// Interface name.
        interface: String,
        /// RX or TX.
        direction: Direction,
        /// Queue id.
        queue: u16,
        /// Why.
        reason: String,
    },
    /// A handle was asked for an interface index the engine does not have.
    #[error("no interface with index {port}")]
    NoInterface {
        /// The index.
        port: u16,
    },
    /// A handle was asked for a queue the interface does not have.
    #[error("interface index {port} has no {} queue {queue}", direction.name().to_uppercase())]
    NoQueue {
        /// Interface index.
        port: u16,
        /// RX or TX.
        direction: Direction,
        /// Queue id.
        queue: u16,
    },
}

/// " RX queue 3" for messages; "" for no queue.
fn queue_label(direction: Direction, queue: Option<u16>) -> String {
    match queue {
        Some(q) => format!(" {} queue {q}", direction.name().to_uppercase()),
        None => String::new(),
    }
}

/// Creates the engine a configuration asks for.
pub fn create(
    config: &Config,
    plan: &Plan,
    regions: &Arc<RegionSet>,
    steering: &[Arc<InterfaceSteering>],
) -> Result<Arc<dyn Engine>, EngineError> {
    // Only the DPDK engine reads the plan's engine part so far.
    #[cfg(not(feature = "dpdk"))]
    let _ = plan;
    match config.engine {
        EngineKind::Loopback => Ok(Arc::new(loopback::LoopbackEngine::new(
            config, regions, steering,
        )?)),
        #[cfg(feature = "dpdk")]
        EngineKind::Dpdk => Ok(Arc::new(dpdk::DpdkEngine::new(
            config, plan, regions, steering,
        )?)),
        #[cfg(not(feature = "dpdk"))]
        EngineKind::Dpdk => Err(EngineError::DpdkNotBuilt),
        // RDMA moves connections, not queues: its API is `RdmaPlane`.
        EngineKind::Rdma => Err(EngineError::Connections),
        other => Err(EngineError::Unavailable(other.name())),
    }
}
