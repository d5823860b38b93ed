//! What each engine needs from the start-up and offers the application, as data: the
//! plan, the hugepage preflight and the plane read these instead of asking which engine
//! runs.

use crate::config::EngineKind;
use serde::Serialize;

/// What an RX worker does when the application's ring is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Hold the burst and stop receiving from this queue until there is room; the engine
    /// pushes back on its sender (software loopback).
    Backpressure,
    /// Drop the burst and count it as `ring_full` (a NIC cannot be paused).
    Drop,
}

/// What an engine needs and can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    /// Bytes the engine keeps in front of every buffer of a region it receives into
    /// (DPDK's mbuf headroom); such regions are allocated with it.
    pub lent_headroom: usize,
    /// The engine can receive into the application's regions without copying (a region
    /// lent to its own buffer pool).
    pub receives_into_lent_regions: bool,
    /// Flow rules can be programmed into the device (else they are steered in software).
    pub hardware_steering: bool,
    /// The engine maps huge pages of its own (DPDK's EAL): its pools count in the hugepage
    /// preflight, and runtime files a dead process left are cleaned before it starts.
    pub own_hugepages: bool,
    /// TX buffers arrive as RX buffers (the software loopback hands them over), so a TX
    /// queue in GPU memory means packets arrive in GPU memory.
    pub tx_buffers_reach_rx: bool,
    /// The engine's queues are connections (accept, connect) rather than ports.
    pub connections: bool,
    /// What an RX worker does when the application's ring is full.
    pub rx_overflow: Overflow,
    /// The engine reads and writes packet bytes with the CPU from one host buffer per
    /// packet (kernel sockets): queues laid out elsewhere go through a host staging
    /// region ([`super::staging`]).
    pub moves_bytes_with_cpu: bool,
}

impl Capabilities {
    /// The in-process software loopback.
    pub const LOOPBACK: Self = Self {
        lent_headroom: 0,
        receives_into_lent_regions: false,
        hardware_steering: false,
        own_hugepages: false,
        tx_buffers_reach_rx: true,
        connections: false,
        rx_overflow: Overflow::Backpressure,
        moves_bytes_with_cpu: false,
    };

    /// DPDK poll-mode drivers.
    pub const DPDK: Self = Self {
        lent_headroom: super::dpdk::HEADROOM,
        receives_into_lent_regions: true,
        hardware_steering: true,
        own_hugepages: true,
        tx_buffers_reach_rx: false,
        connections: false,
        // Holding a full burst stops polling the queue, so packets wait in the device's
        // ring; a NIC then counts what it cannot hold itself.
        rx_overflow: Overflow::Backpressure,
        moves_bytes_with_cpu: false,
    };

    /// RDMA connections (`roce://`): every message lands in a registered region buffer.
    pub const RDMA: Self = Self {
        lent_headroom: 0,
        receives_into_lent_regions: false,
        hardware_steering: false,
        own_hugepages: false,
        tx_buffers_reach_rx: false,
        connections: true,
        rx_overflow: Overflow::Backpressure,
        moves_bytes_with_cpu: false,
    };

    /// Kernel UDP/TCP sockets: datagrams and stream reads land in region buffers; a full
    /// application ring stops reading, so the kernel's socket buffer fills and the kernel
    /// counts what it drops (UDP) or the sender waits (TCP).
    pub const SOCKET: Self = Self {
        lent_headroom: 0,
        receives_into_lent_regions: false,
        hardware_steering: false,
        own_hugepages: false,
        tx_buffers_reach_rx: false,
        connections: false,
        rx_overflow: Overflow::Backpressure,
        moves_bytes_with_cpu: true,
    };

    /// Engines in the schema that no engine of this project runs yet.
    pub const NONE: Self = Self {
        lent_headroom: 0,
        receives_into_lent_regions: false,
        hardware_steering: false,
        own_hugepages: false,
        tx_buffers_reach_rx: false,
        connections: false,
        rx_overflow: Overflow::Drop,
        moves_bytes_with_cpu: false,
    };

    /// The capabilities of `engine`.
    pub fn of(engine: EngineKind) -> Self {
        match engine {
            EngineKind::Loopback => Self::LOOPBACK,
            EngineKind::Dpdk => Self::DPDK,
            EngineKind::Rdma => Self::RDMA,
            EngineKind::Socket => Self::SOCKET,
            EngineKind::Ibverbs => Self::NONE,
        }
    }
}
