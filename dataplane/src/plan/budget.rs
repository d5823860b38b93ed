//! The loss budget: how long the application may stop taking a queue's bursts, at a given
//! load, before a packet is lost, which counter would show it, and what memory holds the
//! packets meanwhile. Pure: computed from the [`Plan`] alone, before anything runs.
//!
//! When the application stops taking an RX queue's bursts, packets pile up in layers, in
//! this order:
//! 1. the queue's ring to the application (`ring_packets`, in bursts);
//! 2. the one burst the worker holds while the ring is full (it then stops receiving);
//! 3. what the engine holds once the worker stops: the device's RX descriptor ring
//!    (DPDK), the kernel's socket receive buffer (UDP), or nothing, because the sender
//!    itself is held back (the software loopback, TCP).
//!
//! Layers 1 and 2 (and DPDK descriptors of a lent region) hold region buffers; when the
//! region has fewer free buffers than that, the pool is the limit instead.
//!
//! A burst closes when full, at `timeout_us`, or when the port goes idle, so a ring slot
//! holds between one packet and a full burst: each layer says both, and the lossless
//! stall is the smaller. Worker speed is not modelled: the budget assumes the worker
//! keeps up with the load while the application does.

use super::dpdk::RxReceive;
use super::{EnginePlan, Plan, QueuePlan};
use crate::config::{Direction, Transport};
use serde::Serialize;

/// Most buffers a thread keeps per region (DPDK's `RTE_MEMPOOL_CACHE_MAX_SIZE` is 512).
pub const MAX_CACHE: usize = 512;
/// Regions smaller than this many buffers per cache slot get no cache: a few threads
/// holding cached buffers could otherwise starve the others.
const BUFFERS_PER_CACHED: usize = 16;
/// Smallest useful cache; smaller regions go to the shared stack directly.
const MIN_CACHE: usize = 32;

/// The per-thread buffer cache of a region of `num_bufs` buffers (0: no cache). Decided
/// here because a cache holds buffers no other thread can take, which the budget counts.
pub fn cache_size_for(num_bufs: usize) -> usize {
    let size = (num_bufs / BUFFERS_PER_CACHED).min(MAX_CACHE);
    if size < MIN_CACHE { 0 } else { size }
}

/// Bytes Linux charges a UDP socket's receive buffer for one datagram of `payload` bytes
/// (the buffer's `truesize`): the data with headers and shared info, rounded up to its
/// allocation, plus the socket buffer's own structure. Measured on loopback (Linux 6.1)
/// for 64 B to 9000 B datagrams sent one per send: within 8 % (it is 832, not 768, for
/// 64 B). Segments of one GSO send on loopback are charged less (about 1.86 KiB for
/// 1 KiB), and NIC drivers that receive into pages charge differently.
pub fn udp_truesize(payload: u64) -> u64 {
    (payload + 360).next_power_of_two() + 256
}

/// The kernel's accounting is an estimate ([`udp_truesize`]): the budget's margin for it.
pub const KERNEL_ESTIMATE_MARGIN: f64 = 0.1;

/// The load a budget is computed for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Load {
    /// Bits per second of packets (their bytes as the queue receives them; preamble,
    /// inter-frame gap and CRC not counted, which overstates the packet rate a little).
    pub bits_per_second: f64,
    /// Bytes per packet as the queue receives it (a frame for raw engines, a datagram's
    /// payload for sockets).
    pub packet_bytes: u32,
}

impl Load {
    /// Packets per second.
    pub fn packets_per_second(&self) -> f64 {
        self.bits_per_second / (8.0 * f64::from(self.packet_bytes.max(1)))
    }
}

/// Where packets wait while the application does not take them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Layer {
    /// What it is, in words.
    pub name: String,
    /// Packets it holds at least (partial bursts).
    pub packets_min: u64,
    /// Packets it holds at most (full bursts).
    pub packets_max: u64,
    /// Bytes of memory it takes when full (buffers, descriptors' buffers or kernel
    /// memory).
    pub bytes: u64,
}

/// What happens once every layer is full.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case", tag = "then")]
pub enum Beyond {
    /// Packets are dropped and counted under `counter` (a `drops` counter of the queue).
    Dropped {
        /// The counter's name, as `stats` and the metrics show it.
        counter: &'static str,
    },
    /// The sender is held back: nothing is lost, however long the stall.
    SenderHeldBack {
        /// Why.
        because: &'static str,
    },
}

/// One RX queue's budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct QueueBudget {
    /// Interface name.
    pub interface: String,
    /// Queue id.
    pub queue: u16,
    /// The layers, in the order they fill.
    pub layers: Vec<Layer>,
    /// Packets in flight when every layer is full: at least, at most.
    pub packets: (u64, u64),
    /// The longest stall that loses nothing, in seconds (`packets.0` at the load's
    /// packet rate).
    pub lossless_stall_s: f64,
    /// The first loss comes after at most this long (`packets.1`, plus the margin of an
    /// estimated layer).
    pub loss_by_s: f64,
    /// What happens after that.
    pub beyond: Beyond,
    /// Bytes of memory every layer takes when full.
    pub memory_bytes: u64,
    /// What to change to absorb the requested headroom (empty: it already does, or
    /// nothing need change).
    pub to_reach_headroom: Vec<String>,
}

/// Every RX queue's budget at one load.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct LossBudget {
    /// The load.
    pub load: Load,
    /// Packets per second at that load.
    pub packets_per_second: f64,
    /// The stall the user asked to absorb, in seconds.
    pub headroom_s: Option<f64>,
    /// One per RX packet queue, in plan order (connection engines have none: their
    /// receives are posted per connection, and an RC sender waits when none is posted).
    pub queues: Vec<QueueBudget>,
}

impl Plan {
    /// The loss budget of every RX queue at `load`; with `headroom_s`, what to change so
    /// each absorbs a stall that long.
    pub fn loss_budget(&self, load: Load, headroom_s: Option<f64>) -> LossBudget {
        let queues = self
            .queues
            .iter()
            .filter(|q| q.direction == Direction::Rx)
            .map(|q| self.queue_budget(q, load, headroom_s))
            .collect();
        LossBudget {
            load,
            packets_per_second: load.packets_per_second(),
            headroom_s,
            queues,
        }
    }

    /// Free buffers of the queue's first region it can count on: the region shared
    /// evenly with the other RX queues that receive into it, less what the application
    /// thread's cache may keep.
    fn buffers_for(&self, q: &QueuePlan) -> (u64, u64) {
        let Some(&region) = q.segments.first() else {
            return (0, 0);
        };
        let r = &self.regions[region.0 as usize];
        let sharing = self
            .queues
            .iter()
            .filter(|o| o.direction == Direction::Rx && o.segments.first() == Some(&region))
            .count()
            .max(1);
        let share = (r.num_bufs / sharing).saturating_sub(cache_size_for(r.num_bufs));
        (share as u64, r.buf_size as u64)
    }

    fn queue_budget(&self, q: &QueuePlan, load: Load, headroom_s: Option<f64>) -> QueueBudget {
        let batch = q.batch as u64;
        let packet = u64::from(load.packet_bytes);
        let (buffers, buf_size) = self.buffers_for(q);
        let ring_slots = q.ring_bursts as u64;
        let per_slot = self.packets_per_burst(q, load);
        // The ring's bursts and the held one, in region buffers, as far as the pool goes.
        let ours_max = (ring_slots + 1) * batch;
        let ours_min = (ring_slots + 1) * per_slot;
        let mut layers = vec![Layer {
            name: format!(
                "ring to the application ({ring_slots} bursts of {}) and the burst the worker holds",
                if per_slot == batch {
                    batch.to_string()
                } else {
                    format!("{per_slot} to {batch}")
                }
            ),
            packets_min: ours_min.min(buffers),
            packets_max: ours_max.min(buffers),
            bytes: ours_max.min(buffers) * buf_size,
        }];
        let (engine_layer, beyond, estimated) =
            self.engine_layer(q, packet, buffers.saturating_sub(ours_max));
        layers.extend(engine_layer);
        let packets_min: u64 = layers.iter().map(|l| l.packets_min).sum();
        let packets_max: u64 = layers.iter().map(|l| l.packets_max).sum();
        let margin = if estimated {
            layers
                .last()
                .map_or(0.0, |l| l.packets_max as f64 * KERNEL_ESTIMATE_MARGIN)
        } else {
            0.0
        };
        let pps = load.packets_per_second().max(f64::MIN_POSITIVE);
        let lossless_packets = packets_min as f64 - margin;
        let mut to_reach = Vec::new();
        if let (Some(h), Beyond::Dropped { .. }) = (headroom_s, &beyond) {
            let needed = (h * pps).ceil();
            if needed > lossless_packets.max(0.0) {
                let more = (needed - lossless_packets.max(0.0)).ceil() as u64;
                let slots = ring_slots + more.div_ceil(per_slot);
                to_reach.push(format!("ring_packets: {}", slots * batch));
                if (slots + 1) * batch > buffers {
                    to_reach.push(format!(
                        "num_bufs of the queue's region: {} more buffers for this queue",
                        ((slots + 1) * batch).saturating_sub(buffers)
                    ));
                }
            }
        }
        QueueBudget {
            interface: q.interface_name.clone(),
            queue: q.id.0,
            memory_bytes: layers.iter().map(|l| l.bytes).sum(),
            layers,
            packets: (packets_min, packets_max),
            lossless_stall_s: lossless_packets.max(0.0) / pps,
            loss_by_s: (packets_max as f64 + margin) / pps,
            beyond,
            to_reach_headroom: to_reach,
        }
    }

    /// Packets a burst holds at least at `load`: a burst closes when full, when
    /// `timeout_us` passed since its first packet, or, on a socket queue without
    /// `timeout_us`, as soon as the socket is drained (one packet at the least).
    fn packets_per_burst(&self, q: &QueuePlan, load: Load) -> u64 {
        let batch = q.batch as u64;
        if q.timeout_us > 0 {
            let in_timeout = load.packets_per_second() * q.timeout_us as f64 / 1e6;
            (in_timeout.floor() as u64).clamp(1, batch)
        } else if matches!(self.engine_plan, EnginePlan::Socket(_)) {
            1
        } else {
            batch
        }
    }

    /// The engine's own layer once the worker stops receiving, what follows it, and
    /// whether its size is an estimate. `spare` region buffers are left after the ring.
    fn engine_layer(
        &self,
        q: &QueuePlan,
        packet: u64,
        spare: u64,
    ) -> (Option<Layer>, Beyond, bool) {
        let missed = Beyond::Dropped {
            counter: "engine_missed",
        };
        match &self.engine_plan {
            EnginePlan::Loopback(_) => (
                None,
                Beyond::SenderHeldBack {
                    because: "the software loopback holds its TX queues back while an RX queue is full",
                },
                false,
            ),
            EnginePlan::Socket(ifaces) => {
                let Some(i) = ifaces.get(q.interface) else {
                    return (None, missed, false);
                };
                if i.transport == Transport::Tcp {
                    return (
                        None,
                        Beyond::SenderHeldBack {
                            because: "TCP's flow control holds the sender back while the socket buffer is full",
                        },
                        false,
                    );
                }
                // Linux doubles what is asked (SO_RCVBUFFORCE as root; else up to
                // net.core.rmem_max, which `doctor` checks).
                let bytes = 2 * i.buffers.0 as u64;
                let packets = bytes / udp_truesize(packet);
                (
                    Some(Layer {
                        name: format!(
                            "kernel socket receive buffer ({bytes} B, about {} B a datagram)",
                            udp_truesize(packet)
                        ),
                        packets_min: packets,
                        packets_max: packets,
                        bytes,
                    }),
                    missed,
                    true,
                )
            }
            EnginePlan::Dpdk(d) => {
                let Some(port) = d.ports.get(q.interface) else {
                    return (None, missed, false);
                };
                let descriptors = u64::from(port.rx_descriptors);
                let pool = port
                    .rx
                    .iter()
                    .find(|r| r.queue == q.id)
                    .map(|r| match &r.receive {
                        RxReceive::Lent { .. } => spare,
                        RxReceive::Copy { pool } => pool.mbufs as u64,
                        RxReceive::Split { header, .. } => header.mbufs as u64,
                    })
                    .unwrap_or(0);
                let held = descriptors.min(pool);
                let counter = if held < descriptors {
                    "pool_empty"
                } else {
                    "engine_missed"
                };
                (
                    Some(Layer {
                        name: format!(
                            "device RX descriptor ring ({descriptors} descriptors, {pool} buffers free for them)"
                        ),
                        packets_min: held,
                        packets_max: held,
                        bytes: held * packet,
                    }),
                    Beyond::Dropped { counter },
                    false,
                )
            }
            EnginePlan::Rdma(_) | EnginePlan::Unavailable => (None, missed, false),
        }
    }
}

impl LossBudget {
    /// The budget in words, one block per queue.
    pub fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!(
            "load: {:.3} Gb/s of {} B packets = {:.0} packets/s\n",
            self.load.bits_per_second / 1e9,
            self.load.packet_bytes,
            self.packets_per_second
        );
        if self.queues.is_empty() {
            s += "no RX packet queues to budget (a connection engine posts its receives per connection, and an RC sender waits while none is posted)\n";
        }
        for q in &self.queues {
            let _ = writeln!(s, "{} RX queue {}:", q.interface, q.queue);
            for l in &q.layers {
                let _ = writeln!(
                    s,
                    "  {}: {} packets",
                    l.name,
                    range_words(l.packets_min, l.packets_max)
                );
            }
            let _ = writeln!(
                s,
                "  in flight: {} packets, {} of memory",
                range_words(q.packets.0, q.packets.1),
                bytes_words(q.memory_bytes)
            );
            match &q.beyond {
                Beyond::Dropped { counter } => {
                    let _ = writeln!(
                        s,
                        "  a stall up to {} loses nothing; by {} packets are lost, counted as `{counter}`",
                        duration_words(q.lossless_stall_s),
                        duration_words(q.loss_by_s)
                    );
                }
                Beyond::SenderHeldBack { because } => {
                    let _ = writeln!(
                        s,
                        "  no stall loses a packet: {because} (the sender waits after at most {})",
                        duration_words(q.loss_by_s)
                    );
                }
            }
            if let Some(h) = self.headroom_s {
                if q.to_reach_headroom.is_empty() {
                    let _ = writeln!(s, "  absorbs the {} headroom asked for", duration_words(h));
                } else {
                    let _ = writeln!(s, "  to absorb {}:", duration_words(h));
                    for c in &q.to_reach_headroom {
                        let _ = writeln!(s, "    {c}");
                    }
                }
            }
        }
        s
    }
}

/// `a`, or `a to b`.
fn range_words(a: u64, b: u64) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a} to {b}")
    }
}

/// Seconds in a unit that fits.
fn duration_words(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// Bytes in a binary unit that fits.
fn bytes_words(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
