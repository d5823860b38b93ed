//! An RX queue whose packets carry radio samples (`protocol: {vrt: ...}` or
//! `{ecpri_uplane: ...}`), taken as batches of complex samples: each burst is decoded
//! where the application polls, on its thread.

use super::queues::{RecvError, RxQueue};
use super::spead::protocol_payload;
use crate::plan::IqPlan;
use crate::protocol::iq::{IqBatch, IqCounters, IqDecoder};
use std::time::Duration;

/// Decoded samples of a radio queue (see [`super::DataPlane::take_iq_stream`]).
pub struct IqStream {
    rx: RxQueue,
    decoder: IqDecoder,
    frames: bool,
    spare: Vec<IqBatch>,
    not_udp: u64,
}

impl IqStream {
    pub(super) fn new(rx: RxQueue, plan: &IqPlan) -> Self {
        Self {
            rx,
            decoder: IqDecoder::new(plan.format, plan.precision),
            frames: plan.frames,
            spare: Vec::new(),
            not_udp: 0,
        }
    }

    /// The samples of the next burst, waiting up to `timeout`: `Ok(None)` when none came
    /// in time. A batch can hold no packet when none of the burst's could be decoded
    /// (see [`IqStream::counters`]).
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<IqBatch>, RecvError> {
        let Some(burst) = self.rx.recv(timeout)? else {
            return Ok(None);
        };
        let mut batch = self
            .spare
            .pop()
            .unwrap_or_else(|| IqBatch::new(self.decoder.precision()));
        for i in 0..burst.len() {
            let Some(packet) = protocol_payload(&burst, i, self.frames, &mut self.not_udp) else {
                continue;
            };
            // Undecodable packets are counted by the decoder.
            let _ = self
                .decoder
                .decode(packet, burst.packets()[i].timestamp_ns, &mut batch);
        }
        Ok(Some(batch))
    }

    /// Gives a batch back, to be filled again (no allocation per burst once warm).
    pub fn recycle(&mut self, mut batch: IqBatch) {
        if batch.samples_precision() == self.decoder.precision() {
            batch.clear();
            self.spare.push(batch);
        }
    }

    /// What the decoder counted so far.
    pub fn counters(&self) -> IqCounters {
        self.decoder.counters()
    }

    /// Frames of a raw queue that carried no UDP datagram (ARP, for instance).
    pub fn frames_not_udp(&self) -> u64 {
        self.not_udp
    }
}
