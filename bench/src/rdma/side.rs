//! One side of the RDMA bench over its connection: its sending half (messages and the end
//! marker, at most `tx_depth` outstanding) and its receiving half (every message checked
//! in sequence).

use super::*;

/// Runs one side over its connection: sends for `seconds` if `send` (at most `tx_depth`
/// messages outstanding), receives until the peer's end marker if `receive`. A side that
/// was to send and sent nothing fails: a run that moved nothing proves nothing.
pub(super) fn run_side(
    side: &Side,
    cfg: &PeerBenchConfig,
    tx_depth: usize,
    peer_sends: bool,
    seconds: f64,
    stop: &AtomicBool,
) -> SideReport {
    let size = cfg.message_size as usize;
    let stream = &side.stream;
    let mut r = SideReport::default();
    let mut rx = Receiving::default();
    let start = Instant::now();
    let send_until = start + Duration::from_secs_f64(seconds);
    let mut tx = Sending {
        seq: 0,
        unsent: None,
        end_sent: !cfg.send,
        done_at: None,
        depth: tx_depth.max(1),
    };
    let mut rx_done_at = None;
    let give_up = send_until + Duration::from_secs(30);
    let mut next_check = start + PEER_CHECK_EVERY;
    let mut stop_deadline: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let mut progressed = false;
        if cfg.send && !tx.end_sent {
            let sending = now < send_until && !stop.load(Ordering::Relaxed);
            progressed |= tx.pass(side, sending, size, now, &mut r);
        }
        // Read before draining: once closed, everything the connection received is in the
        // queue, so the drain below takes it all and an empty drain means the end. (Read
        // after, the worker could deliver its last burst between the drain and the check.)
        let closed = stream.is_closed();
        progressed |= rx.drain(stream, size, &mut r);
        let rx_done = !peer_sends || rx.peer_total.is_some_and(|t| rx.next >= t);
        if rx_done && rx_done_at.is_none() {
            rx_done_at = Some(Instant::now());
        }
        if rx_done && tx.end_sent && side.outstanding() == 0 {
            break;
        }
        let (next_rx, peer_total, end_sent) = (rx.next, rx.peer_total, tx.end_sent);
        if closed && !progressed {
            // Everything that arrived before the connection ended is in.
            r.errors += 1;
            r.problems.push(format!(
                "{} after {next_rx} messages received and {} sent{}",
                match stream.last_error() {
                    Some(e) => format!("the connection ended with an {e}"),
                    None if side.server_interface.is_some() => "the client disconnected".into(),
                    None => "the server disconnected".into(),
                },
                tx.seq,
                if end_sent {
                    ""
                } else {
                    " (this side had not finished sending)"
                }
            ));
            break;
        }
        if now >= next_check {
            next_check = now + PEER_CHECK_EVERY;
            side.turned_away(&mut r);
        }
        if stop.load(Ordering::Relaxed) {
            let deadline = *stop_deadline.get_or_insert(now + STOP_DRAIN);
            if now > deadline {
                r.errors += 1;
                r.problems.push(format!(
                    "interrupted by a signal: received {next_rx} of {peer_total:?} messages, end marker sent: {end_sent}"
                ));
                break;
            }
        }
        if Instant::now() > give_up {
            r.errors += 1;
            r.problems.push(format!(
                "gave up waiting: received {next_rx} of {peer_total:?} messages, end marker sent: {end_sent}"
            ));
            break;
        }
        if !progressed {
            std::thread::yield_now();
        }
    }
    rx.finish(&mut r);
    if cfg.send && r.messages_sent == 0 && !stop.load(Ordering::Relaxed) {
        r.errors += 1;
        r.problems.push(format!(
            "sent no message in {seconds} s (at most {tx_depth} outstanding)"
        ));
    }
    let secs = |t: Option<Instant>| t.map_or(seconds, |t| (t - start).as_secs_f64().max(1e-9));
    r.tx_gbps = r.bytes_sent as f64 * 8.0 / secs(tx.done_at) / 1e9;
    r.rx_gbps = r.bytes_received as f64 * 8.0 / secs(rx_done_at) / 1e9;
    r
}

/// The sending half of a side.
struct Sending {
    /// Messages filled so far.
    seq: u64,
    /// A filled burst the connection's queue could not take yet.
    unsent: Option<Burst>,
    /// The end marker went out (or this side does not send).
    end_sent: bool,
    done_at: Option<Instant>,
    /// Messages outstanding at most.
    depth: usize,
}

impl Sending {
    /// Sends what the connection takes while `sending`, then the end marker: `END`, then
    /// how many messages came before it. True when something went out.
    fn pass(
        &mut self,
        side: &Side,
        sending: bool,
        size: usize,
        now: Instant,
        r: &mut SideReport,
    ) -> bool {
        let stream = &side.stream;
        let mut progressed = false;
        loop {
            let burst = match self.unsent.take() {
                Some(b) => b,
                None if sending => {
                    let room = self.depth.saturating_sub(side.outstanding());
                    if room == 0 {
                        break;
                    }
                    let Some(b) = messages(stream, room.min(SEND_BURST), size, self.seq) else {
                        break;
                    };
                    self.seq += b.len() as u64;
                    b
                }
                None => break,
            };
            let (n, bytes) = (burst.len() as u64, burst.bytes());
            match stream.send(burst) {
                Ok(()) => {
                    progressed = true;
                    r.messages_sent += n;
                    r.bytes_sent += bytes;
                }
                Err(b) => {
                    self.unsent = Some(b);
                    break;
                }
            }
        }
        if !sending
            && self.unsent.is_none()
            && let Ok(mut b) = stream.alloc(1)
            && let Some(buf) = b.buffer_mut(0, 0)
        {
            buf[..8].copy_from_slice(&END.to_le_bytes());
            buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
            b.set_len(0, 0, 16);
            if stream.send(b).is_ok() {
                self.end_sent = true;
                self.done_at = Some(now);
            }
        }
        progressed
    }
}

/// The receiving half of a side: messages checked in sequence.
#[derive(Default)]
struct Receiving {
    /// The next expected message.
    next: u64,
    /// The peer's count, from its end marker.
    peer_total: Option<u64>,
    /// Scratch space that joins the segments of a split message.
    joined: Vec<u8>,
}

impl Receiving {
    /// Checks every message the connection has delivered; true when there was one.
    fn drain(&mut self, stream: &Stream, size: usize, r: &mut SideReport) -> bool {
        let mut progressed = false;
        let mut bad = Vec::new();
        while let Some(burst) = stream.poll() {
            progressed = true;
            for i in 0..burst.len() {
                // A split queue (headers, payload) holds a message in two segments.
                let segments = burst.packets()[i].segments().len();
                let m = if segments == 1 {
                    burst.data(i, 0)
                } else {
                    self.joined.clear();
                    let joined = &mut self.joined;
                    (0..segments)
                        .map(|seg| burst.data(i, seg).map(|d| joined.extend_from_slice(d)))
                        .collect::<Option<()>>()
                        .map(|()| self.joined.as_slice())
                };
                let Some(m) = m else {
                    bad.push("a message arrived in memory the CPU cannot read".to_owned());
                    continue;
                };
                r.messages_received += 1;
                r.bytes_received += m.len() as u64;
                let s = m.get(..8).map_or(u64::MAX - 1, |w| {
                    u64::from_le_bytes(w.try_into().expect("8 bytes"))
                });
                if s == END && m.len() >= 16 {
                    self.peer_total =
                        Some(u64::from_le_bytes(m[8..16].try_into().expect("8 bytes")));
                    continue;
                }
                if s != self.next {
                    bad.push(format!("expected message {}, got {s}", self.next));
                } else if m.len() != size || !matches(m, s) {
                    bad.push(format!("message {s} corrupt ({} bytes)", m.len()));
                }
                self.next = s.wrapping_add(1);
            }
        }
        if !bad.is_empty() {
            r.errors += bad.len() as u64;
            r.problems.extend(bad.into_iter().take(5));
        }
        progressed
    }

    /// The end marker is one message more than counted; the peer's count must match.
    fn finish(&self, r: &mut SideReport) {
        if let Some(t) = self.peer_total {
            r.messages_received = r.messages_received.saturating_sub(1);
            r.bytes_received = r.bytes_received.saturating_sub(16);
            if self.next != t {
                r.errors += 1;
                r.problems
                    .push(format!("the peer sent {t} messages, {} arrived", self.next));
            }
        }
    }
}
