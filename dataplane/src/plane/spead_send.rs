//! A TX queue that sends SPEAD (`protocol: {spead: ...}` on a TX queue): the application
//! hands over heaps as items, the sender cuts them into packets (every packet repeating
//! the heap's item pointers, as spead2's `repeat_pointers`), wraps each packet in a UDP
//! frame on raw engines, and queues them on the TX queue, whose worker paces them
//! (`pacing_mbps`).
//!
//! The item descriptors the plan declares go out in a heap of their own before the first
//! heap and again every `descriptors_every` heaps: spead2's `ItemGroup` learns names and
//! types from them wherever they come, and data heaps keep one layout, which is what a
//! chunk receiver places (it counts a descriptor heap as packets without its key).

use super::queues::{TxFailure, TxQueue};
use crate::packet::UdpFrame;
use crate::plan::SpeadSendPlan;
use crate::protocol::spead::{self, DESCRIPTOR, HeapPackets, ItemPointer};
use std::time::Duration;

/// How long a heap may wait for room (free buffers, ring space) before the send fails:
/// far beyond any pacing, so only a stalled worker gets there.
const STALL: Duration = Duration::from_secs(10);

/// One item of a heap to send.
#[derive(Clone, Copy, Debug)]
pub enum HeapItem<'a> {
    /// A value carried in the item pointer itself (at most the flavour's heap address
    /// width: 48 or 40 bits).
    Immediate {
        /// Item id.
        id: u32,
        /// The value.
        value: u64,
    },
    /// Bytes carried in the heap's payload (an array, a string).
    Addressed {
        /// Item id.
        id: u32,
        /// The item's bytes.
        bytes: &'a [u8],
    },
}

impl HeapItem<'_> {
    fn id(&self) -> u32 {
        match *self {
            Self::Immediate { id, .. } | Self::Addressed { id, .. } => id,
        }
    }
}

/// Why a heap was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SpeadSendError {
    /// An item id the SPEAD header or descriptors use (0x00-0x06, 0x10-0x15), or one
    /// wider than the flavour.
    #[error("item id {0:#x} is reserved by SPEAD or too wide for the flavour")]
    ItemId(u32),
    /// The heap does not fit the flavour or the packets: an immediate value or the
    /// payload wider than the heap address, or so many items that a packet has no room
    /// left for payload.
    #[error(
        "a heap of {items} items and {payload_bytes} payload bytes does not fit flavour 64-{address_bits} in packets of {max_packet_bytes} B"
    )]
    DoesNotFit {
        /// Item pointers per packet (the heap's own and the descriptors).
        items: usize,
        /// The heap's payload bytes.
        payload_bytes: usize,
        /// The flavour's heap address width.
        address_bits: u8,
        /// The planned largest packet.
        max_packet_bytes: u32,
    },
    /// The TX queue refused or stalled; the heap's first `packets_queued` packets are
    /// queued, the rest are not.
    #[error("{reason} after {packets_queued} packets of the heap were queued")]
    Queue {
        /// Why.
        reason: TxFailure,
        /// Packets of the heap already queued.
        packets_queued: usize,
    },
}

/// What a sender has queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpeadSendCounters {
    /// Heaps of items queued whole.
    pub heaps: u64,
    /// Heaps of item descriptors queued whole.
    pub descriptor_heaps: u64,
    /// Packets queued.
    pub packets: u64,
    /// SPEAD bytes queued (headers, item pointers and payload; no UDP or frame headers).
    pub bytes: u64,
}

/// The application's end of a SPEAD TX queue (see [`super::DataPlane::take_spead_sender`]).
pub struct SpeadSender {
    tx: TxQueue,
    plan: SpeadSendPlan,
    /// The descriptors, each encoded as the packet that is its item's value.
    descriptors: Vec<Vec<u8>>,
    frame: Option<UdpFrame>,
    next_heap_cnt: u64,
    counters: SpeadSendCounters,
    pointers: Vec<ItemPointer>,
    payload: Vec<u8>,
    packet: Vec<u8>,
}

impl SpeadSender {
    pub(super) fn new(tx: TxQueue, plan: &SpeadSendPlan) -> Result<Self, String> {
        let descriptors = plan
            .descriptors
            .iter()
            .map(|d| {
                d.encode(plan.flavour)
                    .ok_or_else(|| format!("item {:#x}'s descriptor does not fit", d.id))
            })
            .collect::<Result<_, _>>()?;
        let frame = plan.udp.map(|u| {
            UdpFrame::new(u.source, u.destination)
                .macs(u.source_mac.unwrap_or([0; 6]), u.destination_mac)
        });
        Ok(Self {
            tx,
            plan: plan.clone(),
            descriptors,
            frame,
            // spead2's senders count heaps from 1.
            next_heap_cnt: 1,
            counters: SpeadSendCounters::default(),
            pointers: Vec::new(),
            payload: Vec::new(),
            packet: Vec::new(),
        })
    }

    /// The heap counter the next heap gets (1 at first, then one more per heap).
    pub fn next_heap_cnt(&self) -> u64 {
        self.next_heap_cnt
    }

    /// Sets the next heap's counter (a stream that continues another's, or counters in
    /// steps of the number of senders, as spead2's `heap_cnt` option lets one do).
    pub fn set_next_heap_cnt(&mut self, heap_cnt: u64) {
        self.next_heap_cnt = heap_cnt;
    }

    /// What has been queued.
    pub fn counters(&self) -> SpeadSendCounters {
        self.counters
    }

    /// The TX queue underneath (its link, lateness and pending bursts).
    pub fn tx_queue(&self) -> &TxQueue {
        &self.tx
    }

    /// Sends one heap of `items` (after a heap of the item descriptors when they are due);
    /// returns its heap counter. Waits while the queue is full (the worker paces), up to
    /// a stall of 10 s.
    pub fn send_heap(&mut self, items: &[HeapItem<'_>]) -> Result<u64, SpeadSendError> {
        if let Some(bad) = items.iter().find(|i| {
            let id = i.id();
            id <= spead::STREAM_CTRL
                || (0x10..=0x15).contains(&id)
                || id > self.plan.flavour.max_id()
        }) {
            return Err(SpeadSendError::ItemId(bad.id()));
        }
        let (sent, every) = (self.counters.heaps, self.plan.descriptors_every);
        if !self.descriptors.is_empty() && (sent == 0 || (every > 0 && sent.is_multiple_of(every)))
        {
            self.send_descriptors()?;
        }
        self.pointers.clear();
        self.payload.clear();
        for item in items {
            let (id, immediate, value) = match *item {
                HeapItem::Immediate { id, value } => (id, true, value),
                HeapItem::Addressed { id, bytes } => {
                    let at = self.payload.len() as u64;
                    self.payload.extend_from_slice(bytes);
                    (id, false, at)
                }
            };
            self.pointers.push(ItemPointer {
                immediate,
                id,
                value,
            });
        }
        let cnt = self.send_composed()?;
        self.counters.heaps += 1;
        Ok(cnt)
    }

    /// Sends a heap of every item descriptor now (besides when the plan makes them due);
    /// nothing when the plan declares none.
    pub fn send_descriptors(&mut self) -> Result<(), SpeadSendError> {
        if self.descriptors.is_empty() {
            return Ok(());
        }
        self.pointers.clear();
        self.payload.clear();
        for d in &self.descriptors {
            self.pointers.push(ItemPointer {
                immediate: false,
                id: DESCRIPTOR,
                value: self.payload.len() as u64,
            });
            self.payload.extend_from_slice(d);
        }
        self.send_composed()?;
        self.counters.descriptor_heaps += 1;
        Ok(())
    }

    /// Sends the stream's end (stream control "stop"), as spead2's receivers expect it.
    pub fn send_stop(&mut self) -> Result<(), SpeadSendError> {
        self.pointers.clear();
        self.pointers.push(ItemPointer {
            immediate: true,
            id: spead::STREAM_CTRL,
            value: spead::CTRL_STREAM_STOP,
        });
        self.payload.clear();
        self.send_composed().map(drop)
    }

    /// Cuts the composed heap into packets and queues them, a burst at a time, as the
    /// next heap counter; returns that counter.
    fn send_composed(&mut self) -> Result<u64, SpeadSendError> {
        let heap_cnt = self.next_heap_cnt;
        let max = self.plan.max_packet_bytes as usize;
        let Some(mut packets) = HeapPackets::new(
            self.plan.flavour,
            heap_cnt,
            &self.pointers,
            &self.payload,
            max,
        ) else {
            return Err(SpeadSendError::DoesNotFit {
                items: self.pointers.len(),
                payload_bytes: self.payload.len(),
                address_bits: self.plan.flavour.heap_address_bits(),
                max_packet_bytes: self.plan.max_packet_bytes,
            });
        };
        let total = packets.count();
        let mut queued = 0;
        let fail = |reason, queued| SpeadSendError::Queue {
            reason,
            packets_queued: queued,
        };
        while queued < total {
            let n = (total - queued).min(self.tx.batch_size.max(1));
            let mut burst = self
                .tx
                .alloc_within(n, STALL)
                .map_err(|r| fail(r, queued))?;
            for k in 0..n {
                packets.next_into(&mut self.packet);
                let buf = burst
                    .buffer_mut(k, 0)
                    .expect("a planned TX queue has a host segment");
                let len = match &self.frame {
                    Some(f) => f
                        .write(&self.packet, buf)
                        .expect("the plan sized the buffers for a frame of max_packet_bytes"),
                    None => {
                        buf[..self.packet.len()].copy_from_slice(&self.packet);
                        self.packet.len()
                    }
                };
                burst.set_len(k, 0, len);
                self.counters.bytes += self.packet.len() as u64;
            }
            self.tx
                .send_within(burst, STALL)
                .map_err(|e| fail(e.reason, queued))?;
            queued += n;
            self.counters.packets += n as u64;
        }
        self.next_heap_cnt += 1;
        Ok(heap_cnt)
    }
}
