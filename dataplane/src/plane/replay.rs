//! Sending a capture again (`dataplane replay`): its frames go out on a TX queue at their
//! original gaps (or scaled, or at a fixed rate, or as fast as the queue takes them),
//! looped if asked. Each packet carries its send time, and an `accurate_send` queue sends
//! none before it; how late each went (the send-time error, which bounds the gap error)
//! is measured by the worker and reported.

use super::queues::{Backoff, TxFailure, TxQueue};
use crate::capture::CapturedFrame;
use crate::clock::WallClock;
use crate::worker::LatenessSummary;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// When the frames go out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// At the capture's own gaps, divided by `speed` (1.0: as captured; 2.0: twice as
    /// fast).
    Original {
        /// The speed-up.
        speed: f64,
    },
    /// Evenly, this many packets per second.
    PacketsPerSecond(f64),
    /// As fast as the queue takes them (no send times).
    Unpaced,
}

/// How to replay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayOptions {
    /// When the frames go out.
    pub pace: Pace,
    /// Times through the capture (at least 1); each loop starts one gap after the last
    /// frame of the one before.
    pub loops: u32,
    /// Send each frame's UDP payload instead of the frame (a socket queue sends
    /// datagrams); a frame without one is refused.
    pub payload_only: bool,
    /// How far ahead of now the first frame is due: time to fill the queue's ring.
    pub lead: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            pace: Pace::Original { speed: 1.0 },
            loops: 1,
            payload_only: false,
            lead: Duration::from_millis(20),
        }
    }
}

/// What a replay sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    /// Packets queued.
    pub packets: u64,
    /// Bytes queued (frames, or payloads).
    pub bytes: u64,
    /// Loops done.
    pub loops: u32,
    /// From the first packet's send time to the last's, in nanoseconds.
    pub scheduled_ns: u64,
    /// The stop flag ended it before every loop was queued.
    pub stopped: bool,
    /// How late packets went against their send times (software `accurate_send`);
    /// `None` unpaced, or when the device sends at the times itself.
    pub send_error: Option<LatenessSummary>,
}

/// Why a replay did not start or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Nothing to send.
    #[error("the capture has no frames")]
    Empty,
    /// Options that cannot be met.
    #[error("{0}")]
    Options(String),
    /// A paced replay on a queue without `accurate_send`, which would send everything at
    /// once.
    #[error(
        "interface `{interface}` TX queue {queue} has no accurate_send: replaying at the capture's gaps needs it (set tx.accurate_send: true), or replay unpaced"
    )]
    NeedsSendTimes {
        /// The queue's interface.
        interface: String,
        /// The queue.
        queue: u16,
    },
    /// A frame longer than the queue's buffers.
    #[error("frame {index} of the capture is {len} bytes; the queue's buffers hold {room}")]
    TooLong {
        /// Its place in the capture (from 0).
        index: usize,
        /// Its length.
        len: usize,
        /// The buffers' size.
        room: usize,
    },
    /// A frame cut short by the capture (its snap length), which would go out cut.
    #[error("frame {index} of the capture was cut to {len} of its {original} bytes")]
    Truncated {
        /// Its place in the capture.
        index: usize,
        /// Bytes captured.
        len: usize,
        /// Bytes on the wire.
        original: u32,
    },
    /// `payload_only` and a frame without a UDP datagram.
    #[error("frame {index} of the capture carries no UDP datagram to send on a socket")]
    NotUdp {
        /// Its place in the capture.
        index: usize,
    },
    /// The queue refused a burst.
    #[error("after {sent} packets: {reason}")]
    Send {
        /// Packets queued before.
        sent: u64,
        /// Why.
        reason: TxFailure,
    },
}

/// Each frame's send time after the first's, in nanoseconds, and the loop's period.
fn schedule(frames: &[CapturedFrame], pace: Pace) -> (Vec<u64>, u64) {
    let n = frames.len() as u64;
    match pace {
        Pace::Original { speed } => {
            let t0 = frames[0].timestamp_ns;
            let mut last = 0;
            // A capture's clock can step back; its frames still go in file order.
            let offsets: Vec<u64> = frames
                .iter()
                .map(|f| {
                    last = last.max((f.timestamp_ns.saturating_sub(t0) as f64 / speed) as u64);
                    last
                })
                .collect();
            let gap = if n > 1 { last / (n - 1) } else { 0 };
            (offsets, (last + gap).max(1))
        }
        Pace::PacketsPerSecond(pps) => {
            let step = 1e9 / pps;
            (
                (0..n).map(|i| (i as f64 * step) as u64).collect(),
                ((n as f64 * step) as u64).max(1),
            )
        }
        Pace::Unpaced => (vec![0; frames.len()], 0),
    }
}

/// The bytes of frame `index` to send.
fn bytes_of(frame: &CapturedFrame, index: usize, payload_only: bool) -> Result<&[u8], ReplayError> {
    if !payload_only {
        return Ok(&frame.bytes);
    }
    match crate::packet::parse(&frame.bytes) {
        Ok(v) if v.udp_ports.is_some() => Ok(v.payload),
        _ => Err(ReplayError::NotUdp { index }),
    }
}

/// Sends `frames` on `tx` as `options` say, until done or `stop` is set; waits while the
/// queue is full (the worker holds paced packets until their time).
pub fn replay(
    tx: &mut TxQueue,
    frames: &[CapturedFrame],
    options: &ReplayOptions,
    stop: &AtomicBool,
) -> Result<ReplayReport, ReplayError> {
    if frames.is_empty() {
        return Err(ReplayError::Empty);
    }
    let paced = match options.pace {
        Pace::Original { speed } if !(speed.is_finite() && speed > 0.0) => {
            return Err(ReplayError::Options(format!(
                "speed {speed} (a positive number)"
            )));
        }
        Pace::PacketsPerSecond(pps) if !(pps.is_finite() && pps > 0.0) => {
            return Err(ReplayError::Options(format!(
                "{pps} packets per second (a positive number)"
            )));
        }
        Pace::Unpaced => false,
        _ => true,
    };
    if options.loops == 0 {
        return Err(ReplayError::Options("loops: at least 1".into()));
    }
    if paced && !tx.sends_at_time() {
        return Err(ReplayError::NeedsSendTimes {
            interface: tx.interface.clone(),
            queue: tx.queue.0,
        });
    }
    let room = tx.segment_sizes().first().copied().unwrap_or(0);
    // Each frame's bytes to send, checked once before anything goes out.
    let mut sendable = Vec::with_capacity(frames.len());
    for (index, f) in frames.iter().enumerate() {
        if f.bytes.len() < f.original_len as usize {
            return Err(ReplayError::Truncated {
                index,
                len: f.bytes.len(),
                original: f.original_len,
            });
        }
        let bytes = bytes_of(f, index, options.payload_only)?;
        if bytes.len() > room {
            return Err(ReplayError::TooLong {
                index,
                len: bytes.len(),
                room,
            });
        }
        sendable.push(bytes);
    }
    let measured_before = tx.send_lateness().map_or(0, |l| l.packets);
    let (offsets, period) = schedule(frames, options.pace);
    let clock = WallClock::new();
    let start = clock.now_ns() + options.lead.as_nanos() as u64;
    let mut report = ReplayReport::default();
    let batch = tx.batch_size.max(1);
    'loops: for l in 0..options.loops {
        let base = start + u64::from(l) * period;
        for (first, group) in sendable
            .chunks(batch)
            .enumerate()
            .map(|(k, g)| (k * batch, g))
        {
            if stop.load(Ordering::Relaxed) {
                report.stopped = true;
                break 'loops;
            }
            let sent = report.packets;
            let fail = |reason| ReplayError::Send { sent, reason };
            // Buffers come back as the worker sends; paced packets are held until their
            // time, so the wait may last until this group is due, and 10 s more.
            let due = if paced { base + offsets[first] } else { 0 };
            let patience = Duration::from_nanos(due.saturating_sub(clock.now_ns())) + STALL;
            let mut burst = tx.alloc_within(group.len(), patience).map_err(fail)?;
            for (k, bytes) in group.iter().enumerate() {
                burst.buffer_mut(k, 0).expect("a host segment")[..bytes.len()]
                    .copy_from_slice(bytes);
                burst.set_len(k, 0, bytes.len());
                if paced {
                    burst.set_timestamp(k, base + offsets[first + k]);
                }
                report.bytes += bytes.len() as u64;
            }
            // Paced packets wait in the worker until their time: room comes back as they
            // go, so the wait is as long as the schedule, not a stall.
            tx.send_within(burst, patience)
                .map_err(|e| fail(e.reason))?;
            report.packets += group.len() as u64;
        }
        report.loops += 1;
    }
    if paced {
        report.scheduled_ns = u64::from(report.loops.saturating_sub(1)) * period
            + offsets.last().copied().unwrap_or(0);
        // The send-time error is known once the last packet is due and gone.
        let last_due = start + report.scheduled_ns;
        while clock.now_ns() < last_due + 2_000_000 && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // A loaded machine may run the worker late: wait (a while) until it has sent, and
        // measured, every packet of this replay.
        let measured = |tx: &TxQueue| tx.send_lateness().map_or(u64::MAX, |l| l.packets);
        let mut drained = Backoff::new(Duration::from_secs(5));
        while measured(tx) < measured_before + report.packets && !drained.expired() {
            drained.pause();
        }
        report.send_error = tx.send_lateness();
    }
    Ok(report)
}

/// How long the queue may take nothing before the replay fails as stalled (a receiver
/// that holds every buffer, a link that is down).
const STALL: Duration = Duration::from_secs(10);
