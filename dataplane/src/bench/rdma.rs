//! `dataplane bench rdma`: RC SEND/RECV between `rdma_bench_server` and
//! `rdma_bench_client`, one connection, each side sending and/or receiving as configured,
//! every received message verified.
//!
//! A message carries its sequence number in its first 8 bytes and a pattern derived from
//! it in the rest, so each received message is checked byte for byte. When its time is up
//! a sender sends one end marker (sequence `u64::MAX`, then the number of messages sent);
//! a receiver runs until it has that marker and every message before it.

#![forbid(unsafe_code)]

use crate::config::{Config, PeerBenchConfig};
use rdma::verbs::{Connection, ConnectionParams, Listener, ListenerEvent, VerbsError};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Which side(s) this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Mode {
    /// Accept one connection and run `rdma_bench_server`.
    Server,
    /// Connect and run `rdma_bench_client`.
    Client,
    /// Both, in one process (two threads).
    Both,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Server => "server",
            Mode::Client => "client",
            Mode::Both => "both",
        }
    }
}

/// One side's numbers.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SideReport {
    /// Messages this side sent (end marker not counted).
    pub messages_sent: u64,
    /// Messages received and verified.
    pub messages_received: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Wrong sequence numbers, corrupt messages, missing messages, failed completions.
    pub errors: u64,
    /// Send throughput.
    pub tx_gbps: f64,
    /// Receive throughput.
    pub rx_gbps: f64,
    /// What went wrong, if anything.
    pub problems: Vec<String>,
}

/// The report: totals over the sides this process ran, and each side.
#[derive(Clone, Debug, Serialize)]
pub struct RdmaReport {
    /// `server`, `client` or `both`.
    pub mode: &'static str,
    /// Bytes per message.
    pub message_size: u64,
    /// Seconds each sender sent for.
    pub seconds: f64,
    /// Sum over sides.
    pub messages_sent: u64,
    /// Sum over sides.
    pub messages_received: u64,
    /// Sum over sides.
    pub bytes_sent: u64,
    /// Sum over sides.
    pub bytes_received: u64,
    /// Sum over sides.
    pub errors: u64,
    /// Sum over sides.
    pub tx_gbps: f64,
    /// Sum over sides.
    pub rx_gbps: f64,
    /// The server side, when this process ran it.
    pub server: Option<SideReport>,
    /// The client side, when this process ran it.
    pub client: Option<SideReport>,
}

impl RdmaReport {
    /// True when every message completed without error and everything sent arrived
    /// verified.
    pub fn ok(&self) -> bool {
        self.errors == 0
    }

    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "rdma bench, mode {}, {} B messages, {:.2} s\n",
            self.mode, self.message_size, self.seconds
        );
        for (name, side) in [("server", &self.server), ("client", &self.client)] {
            if let Some(r) = side {
                s.push_str(&format!(
                    "  {name}: sent {} ({:.3} Gb/s), received {} verified ({:.3} Gb/s), errors {}\n",
                    r.messages_sent, r.tx_gbps, r.messages_received, r.rx_gbps, r.errors
                ));
                for p in &r.problems {
                    s.push_str(&format!("    - {p}\n"));
                }
            }
        }
        s.push_str(if self.ok() {
            "OK: every message completed and every received message verified\n"
        } else {
            "FAILED: see the problems above\n"
        });
        s
    }
}

/// The bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum RdmaBenchError {
    /// A section is missing from the configuration.
    #[error("the configuration has no `{0}` section")]
    Missing(&'static str),
    /// Messages must hold a sequence number and a count.
    #[error("message_size {0} is below 16 bytes (a message carries its sequence number)")]
    TooSmall(u64),
    /// A signal stopped the side before its peer came.
    #[error("{0}: stopped by a signal before a peer connected")]
    Stopped(&'static str),
    /// The server turned the client away.
    #[error(
        "client: the server at {0} rejected the connection (rdma_cm status 28: it already serves a client; `bench rdma` serves one at a time)"
    )]
    Rejected(SocketAddr),
    /// The server could not be reached within the connect budget.
    #[error("client: no server at {addr} accepted within {seconds} s (last error: {last})")]
    Unreachable {
        /// The server's address.
        addr: SocketAddr,
        /// The budget (`--connect-timeout`).
        seconds: f64,
        /// The last attempt's error.
        last: VerbsError,
    },
    /// Verbs or rdma_cm failed.
    #[error("{side}: {source}")]
    Verbs {
        /// `server` or `client`.
        side: &'static str,
        /// The error.
        source: VerbsError,
    },
}

const END: u64 = u64::MAX;

/// Word `i` (after the sequence number) of message `seq`: differs per message and per
/// position, and each word is computed on its own (no serial chain), so filling and checking
/// run at memory speed.
fn pattern_word(seq: u64, i: usize) -> u64 {
    seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93)
}

/// Writes message `seq`: its sequence number, then the pattern.
fn fill(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let n = (buf.len() - 8) / 8;
    let mut words = buf[8..].chunks_exact_mut(8);
    for (i, w) in words.by_ref().enumerate() {
        w.copy_from_slice(&pattern_word(seq, i).to_le_bytes());
    }
    let tail = words.into_remainder();
    let last = pattern_word(seq, n).to_le_bytes();
    let len = tail.len();
    tail.copy_from_slice(&last[..len]);
}

/// True when `m` is exactly what `fill(_, seq)` writes, checked in place.
fn matches(m: &[u8], seq: u64) -> bool {
    if m.len() < 8 || m[..8] != seq.to_le_bytes() {
        return false;
    }
    let mut words = m[8..].chunks_exact(8);
    let body_ok = words
        .by_ref()
        .enumerate()
        .all(|(i, w)| w == pattern_word(seq, i).to_le_bytes());
    let tail = words.remainder();
    body_ok && tail == &pattern_word(seq, (m.len() - 8) / 8).to_le_bytes()[..tail.len()]
}

fn params_of(side: &PeerBenchConfig, peer: Option<&PeerBenchConfig>) -> ConnectionParams {
    // The receive window covers the peer's send window, so the peer never meets an empty
    // receive queue (no RNR waits at start or later).
    let recv = side.rx_depth.max(peer.map_or(0, |p| p.tx_depth)).max(2);
    ConnectionParams {
        message_size: side.message_size as usize,
        send_depth: side.tx_depth.max(1),
        recv_depth: recv,
        window_size: 4096,
        ..ConnectionParams::default()
    }
}

/// Runs one side over an established connection: sends for `seconds` if `send`, receives
/// until the peer's end marker if `receive`.
/// Where a side learns that its peer went away: a server's accepted connections report
/// on the listener's event channel (which also brings surplus clients to turn away), a
/// client's on its own.
enum PeerWatch<'a> {
    Listener(&'a Listener),
    OwnChannel,
}

/// How often the event channels are read while moving messages.
const PEER_CHECK_EVERY: Duration = Duration::from_millis(1);
/// How long a side keeps draining after a signal before it reports and exits.
const STOP_DRAIN: Duration = Duration::from_secs(1);

impl PeerWatch<'_> {
    /// Why the peer is gone, if it is; turns away connection requests meanwhile.
    fn peer_gone(&self, conn: &Connection, r: &mut SideReport) -> Option<&'static str> {
        match self {
            PeerWatch::OwnChannel => conn
                .peer_disconnected()
                .then_some("the server disconnected"),
            PeerWatch::Listener(listener) => loop {
                match listener.next_event(Duration::ZERO, &|| false) {
                    Ok(ListenerEvent::Request(req)) => {
                        req.reject();
                        r.problems.push(
                            "turned away a second client: this bench serves one at a time".into(),
                        );
                    }
                    Ok(ListenerEvent::Disconnected(key)) if key == conn.key() => {
                        return Some("the client disconnected");
                    }
                    Ok(_) => {}
                    Err(_) => return None,
                }
            },
        }
    }
}

fn run_side(
    conn: &mut Connection,
    cfg: &PeerBenchConfig,
    peer_sends: bool,
    seconds: f64,
    stop: &AtomicBool,
    watch: PeerWatch,
) -> SideReport {
    let size = cfg.message_size as usize;
    let mut r = SideReport::default();
    let mut next_rx = 0u64;
    let mut peer_total: Option<u64> = None;
    let start = Instant::now();
    let send_until = start + Duration::from_secs_f64(seconds);
    let mut seq = 0u64;
    let mut end_sent = !cfg.send;
    let mut rx_done_at = None;
    let mut tx_done_at = None;
    let give_up = send_until + Duration::from_secs(30);
    let mut next_check = start + PEER_CHECK_EVERY;
    let mut stop_deadline: Option<Instant> = None;
    let mut gone: Option<&'static str> = None;
    loop {
        let now = Instant::now();
        if cfg.send && !end_sent {
            if now < send_until && !stop.load(Ordering::Relaxed) {
                while conn.send_room() > 0 {
                    match conn.send_with(size, |slot| fill(slot, seq)) {
                        Ok(true) => {
                            seq += 1;
                            r.messages_sent += 1;
                            r.bytes_sent += size as u64;
                        }
                        Ok(false) => break,
                        Err(e) => {
                            r.errors += 1;
                            r.problems.push(format!("send: {e}"));
                            return r;
                        }
                    }
                }
            } else if conn.send_room() > 0 {
                let mut end = vec![0u8; 16];
                end[..8].copy_from_slice(&END.to_le_bytes());
                end[8..].copy_from_slice(&seq.to_le_bytes());
                if let Ok(true) = conn.send(&end) {
                    end_sent = true;
                    tx_done_at = Some(now);
                }
            }
        }
        let mut bad = Vec::new();
        let polled = conn.poll(|m| {
            let s = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
            if s == END {
                peer_total = Some(u64::from_le_bytes(m[8..16].try_into().expect("8 bytes")));
                return;
            }
            if s != next_rx {
                bad.push(format!("expected message {next_rx}, got {s}"));
            } else if m.len() != size || !matches(m, s) {
                bad.push(format!("message {s} corrupt ({} bytes)", m.len()));
            }
            next_rx = s + 1;
        });
        let progressed = match polled {
            Ok(p) => {
                r.messages_received += p.received;
                r.bytes_received += p.received_bytes;
                p.received > 0 || p.sent > 0
            }
            Err(e) => {
                r.errors += 1;
                r.problems.push(format!(
                    "the connection ended with an error completion ({e}) after {next_rx} messages received and {seq} sent: the peer is gone or the link failed"
                ));
                return r;
            }
        };
        if !bad.is_empty() {
            r.errors += bad.len() as u64;
            r.problems.extend(bad.into_iter().take(5));
        }
        let rx_done = !peer_sends || peer_total.is_some_and(|t| next_rx >= t);
        if rx_done && rx_done_at.is_none() {
            rx_done_at = Some(Instant::now());
        }
        let all_sends_done = end_sent && conn.send_room() as u32 == params_of(cfg, None).send_depth;
        if rx_done && all_sends_done {
            break;
        }
        if let Some(why) = gone
            && !progressed
        {
            // The completion queues are drained: what arrived before the disconnect is in.
            r.errors += 1;
            r.problems.push(format!(
                "{why} after {next_rx} messages received and {seq} sent{}",
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
            gone = watch.peer_gone(conn, &mut r);
        }
        if stop.load(Ordering::Relaxed) {
            let deadline = *stop_deadline.get_or_insert(now + STOP_DRAIN);
            if now > deadline {
                r.errors += 1;
                r.problems.push(format!(
                    "interrupted by a signal: received {next_rx} of {:?} messages, end marker sent: {end_sent}",
                    peer_total
                ));
                break;
            }
        }
        if Instant::now() > give_up {
            r.errors += 1;
            r.problems.push(format!(
                "gave up waiting: received {next_rx} of {:?} messages, end marker sent: {end_sent}",
                peer_total
            ));
            break;
        }
    }
    // The end marker is one message more than counted.
    r.messages_received = r.messages_received.saturating_sub(u64::from(peer_sends));
    if let Some(t) = peer_total
        && next_rx != t
    {
        r.errors += 1;
        r.problems
            .push(format!("the peer sent {t} messages, {next_rx} arrived"));
    }
    let secs = |t: Option<Instant>| t.map_or(seconds, |t| (t - start).as_secs_f64().max(1e-9));
    r.tx_gbps = r.bytes_sent as f64 * 8.0 / secs(tx_done_at) / 1e9;
    r.rx_gbps = r.bytes_received.saturating_sub(16 * u64::from(peer_sends)) as f64 * 8.0
        / secs(rx_done_at)
        / 1e9;
    r.bytes_received = r.bytes_received.saturating_sub(16 * u64::from(peer_sends));
    r
}

fn serve(
    cfg: &PeerBenchConfig,
    peer: Option<&PeerBenchConfig>,
    seconds: f64,
    stop: &AtomicBool,
    ready: Option<std::sync::mpsc::Sender<()>>,
) -> Result<SideReport, RdmaBenchError> {
    let err = |source| RdmaBenchError::Verbs {
        side: "server",
        source,
    };
    let listener =
        Listener::bind(SocketAddr::from((cfg.server_address, cfg.server_port)), 8).map_err(err)?;
    if let Some(tx) = ready {
        let _ = tx.send(());
    }
    let req =
        match listener.next_request(Duration::from_secs(120), &|| stop.load(Ordering::Relaxed)) {
            Err(VerbsError::Stopped(_)) => return Err(RdmaBenchError::Stopped("server")),
            other => other.map_err(err)?,
        };
    let mut conn = req.accept(params_of(cfg, peer)).map_err(err)?;
    let peer_sends = peer.is_none_or(|p| p.send);
    Ok(run_side(
        &mut conn,
        cfg,
        peer_sends && cfg.receive,
        seconds,
        stop,
        PeerWatch::Listener(&listener),
    ))
}

fn connect(
    cfg: &PeerBenchConfig,
    peer: Option<&PeerBenchConfig>,
    seconds: f64,
    retry: (Duration, Duration),
    stop: &AtomicBool,
) -> Result<SideReport, RdmaBenchError> {
    let remote = SocketAddr::from((cfg.server_address, cfg.server_port));
    let mut conn = Connection::connect_within(
        SocketAddr::from((cfg.client_address, 0)),
        remote,
        params_of(cfg, peer),
        retry.0,
        retry.1,
        &|| stop.load(Ordering::Relaxed),
    )
    .map_err(|e| match e {
        VerbsError::Event { status, .. } if status == rdma::verbs::REJECTED_BY_SERVER => {
            RdmaBenchError::Rejected(remote)
        }
        VerbsError::Stopped(_) => RdmaBenchError::Stopped("client"),
        VerbsError::GaveUp { seconds, last } => RdmaBenchError::Unreachable {
            addr: remote,
            seconds,
            last: *last,
        },
        source => RdmaBenchError::Verbs {
            side: "client",
            source,
        },
    })?;
    let peer_sends = peer.is_none_or(|p| p.send);
    let r = run_side(
        &mut conn,
        cfg,
        peer_sends && cfg.receive,
        seconds,
        stop,
        PeerWatch::OwnChannel,
    );
    let _ = conn.disconnect();
    Ok(r)
}

/// Runs the bench. A client retries refused or unreachable connections every
/// `retry_connect_s` (the interfaces' `socket_config`, default 1 s) for up to
/// `connect_timeout`; `stop` (a signal) ends every wait.
pub fn run(
    config: &Config,
    mode: Mode,
    seconds: f64,
    connect_timeout: Duration,
    stop: &AtomicBool,
) -> Result<RdmaReport, RdmaBenchError> {
    let period = config
        .interfaces
        .iter()
        .filter_map(|i| i.socket.as_ref())
        .map(|s| s.retry_connect_s)
        .min()
        .unwrap_or(1)
        .max(1);
    let retry = (Duration::from_secs(u64::from(period)), connect_timeout);
    let server = config.bench.rdma_server.as_ref();
    let client = config.bench.rdma_client.as_ref();
    if let Some(small) = server.or(client).filter(|c| c.message_size < 16) {
        return Err(RdmaBenchError::TooSmall(small.message_size));
    }
    let (s, c) = match mode {
        Mode::Server => {
            let cfg = server.ok_or(RdmaBenchError::Missing("rdma_bench_server"))?;
            (Some(serve(cfg, client, seconds, stop, None)?), None)
        }
        Mode::Client => {
            let cfg = client.ok_or(RdmaBenchError::Missing("rdma_bench_client"))?;
            (None, Some(connect(cfg, server, seconds, retry, stop)?))
        }
        Mode::Both => {
            let scfg = server
                .ok_or(RdmaBenchError::Missing("rdma_bench_server"))?
                .clone();
            let ccfg = client.ok_or(RdmaBenchError::Missing("rdma_bench_client"))?;
            let (tx, rx) = std::sync::mpsc::channel();
            let peer = ccfg.clone();
            let (srv, cli) = std::thread::scope(|scope| {
                let srv = scope.spawn(move || serve(&scfg, Some(&peer), seconds, stop, Some(tx)));
                // Connect once the server listens (or it failed).
                let _ = rx.recv_timeout(Duration::from_secs(30));
                let cli = connect(ccfg, server, seconds, retry, stop);
                (srv.join().expect("server thread"), cli)
            });
            (Some(srv?), Some(cli?))
        }
    };
    let sides: Vec<&SideReport> = s.iter().chain(c.iter()).collect();
    let sum = |f: fn(&SideReport) -> u64| sides.iter().map(|r| f(r)).sum::<u64>();
    let sumf = |f: fn(&SideReport) -> f64| sides.iter().map(|r| f(r)).sum::<f64>();
    Ok(RdmaReport {
        mode: mode.name(),
        message_size: server.or(client).map_or(0, |c| c.message_size),
        seconds,
        messages_sent: sum(|r| r.messages_sent),
        messages_received: sum(|r| r.messages_received),
        bytes_sent: sum(|r| r.bytes_sent),
        bytes_received: sum(|r| r.bytes_received),
        errors: sum(|r| r.errors),
        tx_gbps: sumf(|r| r.tx_gbps),
        rx_gbps: sumf(|r| r.rx_gbps),
        server: s,
        client: c,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_sequence_and_a_pattern_that_differs_per_message() {
        let (mut a, mut b) = (vec![0u8; 100], vec![0u8; 100]);
        fill(&mut a, 7);
        fill(&mut b, 8);
        assert_eq!(u64::from_le_bytes(a[..8].try_into().unwrap()), 7);
        assert_ne!(a[8..], b[8..]);
        let mut again = vec![0u8; 100];
        fill(&mut again, 7);
        assert_eq!(a, again, "the receiver recomputes the same bytes");
        assert!(matches(&a, 7) && !matches(&a, 8) && !matches(&b, 7));
        // One flipped bit anywhere, the tail included, is caught.
        for at in [0, 8, 50, 95, 99] {
            let mut c = a.clone();
            c[at] ^= 0x10;
            assert!(!matches(&c, 7), "flip at byte {at} not caught");
        }
    }

    #[test]
    fn the_receive_window_covers_the_peer_send_window() {
        let side = |tx, rx| PeerBenchConfig {
            server: false,
            send: true,
            receive: true,
            cpu_core: None,
            message_size: 4096,
            tx_depth: tx,
            rx_depth: rx,
            iterations: 0,
            server_address: "198.18.0.1".parse().unwrap(),
            client_address: "198.18.0.2".parse().unwrap(),
            server_port: 4096,
        };
        let p = params_of(&side(8, 16), Some(&side(64, 16)));
        assert_eq!((p.send_depth, p.recv_depth), (8, 64));
    }
}
