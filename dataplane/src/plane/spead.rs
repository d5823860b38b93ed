//! An RX queue whose packets carry SPEAD (`protocol: {spead: ...}`), taken as chunks: the
//! queue's bursts are decoded and placed where the application polls, on its thread.

use super::queues::{RecvError, RxQueue};
use crate::plan::SpeadPlan;
use crate::protocol::spead::chunks::{Chunk, ChunkAssembler, SpeadCounters};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The protocol's bytes of packet `i`: the datagram (sockets), or the UDP payload of the
/// frame (raw engines; a frame without one is counted in `not_udp`). A planned protocol
/// queue has one host-visible segment.
pub(super) fn protocol_payload<'b>(
    burst: &'b crate::burst::Burst,
    i: usize,
    frames: bool,
    not_udp: &mut u64,
) -> Option<&'b [u8]> {
    let bytes = burst.data(i, 0)?;
    if !frames {
        return Some(bytes);
    }
    match crate::packet::parse(bytes) {
        Ok(v) if v.udp_ports.is_some() => Some(v.payload),
        _ => {
            *not_udp += 1;
            None
        }
    }
}

/// Chunks of a SPEAD queue (see [`super::DataPlane::take_spead_stream`]).
pub struct SpeadStream {
    rx: RxQueue,
    assembler: ChunkAssembler,
    frames: bool,
    ready: VecDeque<Chunk>,
    not_udp: u64,
}

impl SpeadStream {
    pub(super) fn new(rx: RxQueue, plan: &SpeadPlan) -> Option<Self> {
        Some(Self {
            rx,
            assembler: ChunkAssembler::new(plan.flavour, plan.placement)?,
            frames: plan.frames,
            ready: VecDeque::new(),
            not_udp: 0,
        })
    }

    /// The next chunk, oldest first, waiting up to `timeout` for the packets that retire
    /// one: `Ok(None)` when none was ready in time, and at once after the stream's end
    /// ([`SpeadStream::stopped`]) once every chunk came out.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Chunk>, RecvError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.ready.pop_front() {
                return Ok(Some(c));
            }
            if self.assembler.stopped() {
                return Ok(None);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(burst) = self.rx.recv(left)? else {
                return Ok(None);
            };
            let ready = &mut self.ready;
            for i in 0..burst.len() {
                let Some(datagram) = protocol_payload(&burst, i, self.frames, &mut self.not_udp)
                else {
                    continue;
                };
                // Undecodable packets are counted by the assembler.
                let _ = self.assembler.ingest(datagram, &mut |c| ready.push_back(c));
            }
        }
    }

    /// Gives a chunk back, to be filled again (no allocation per chunk).
    pub fn recycle(&mut self, chunk: Chunk) {
        self.assembler.recycle(chunk);
    }

    /// True once the stream's end arrived (a stream-stop packet).
    pub fn stopped(&self) -> bool {
        self.assembler.stopped()
    }

    /// What the assembler counted so far.
    pub fn counters(&self) -> SpeadCounters {
        self.assembler.counters()
    }

    /// Frames of a raw queue that carried no UDP datagram (ARP, for instance).
    pub fn frames_not_udp(&self) -> u64 {
        self.not_udp
    }

    /// Hands every chunk under construction over, oldest first (when the application
    /// stops reading a stream that never sends its end).
    pub fn flush(&mut self) -> Vec<Chunk> {
        let mut out: Vec<Chunk> = self.ready.drain(..).collect();
        self.assembler.flush(&mut |c| out.push(c));
        out
    }
}
