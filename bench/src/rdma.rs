//! `dataplane bench rdma`: RC SEND/RECV between `rdma_bench_server` and
//! `rdma_bench_client`, one connection, each side sending and/or receiving as configured,
//! every received message verified.
//!
//! A message carries its sequence number in its first 8 bytes and a pattern derived from
//! it in the rest, so each received message is checked byte for byte. When its time is up
//! a sender sends one end marker (sequence `u64::MAX`, then the number of messages sent);
//! a receiver runs until it has that marker and every message before it.

#![forbid(unsafe_code)]

use dataplane::burst::Burst;
use dataplane::config::{Config, PeerBenchConfig, SocketMode};
use dataplane::engine::ConnectionError;
use dataplane::plane::{DataPlane, StartError, Stream};
use rdma::verbs::VerbsError;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod side;
use side::run_side;

pub use super::Mode;

/// One side's numbers.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
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
    /// How the side ran where it differs from what its section asks (not errors).
    pub notes: Vec<String>,
}

/// The report: totals over the sides this process ran, and each side.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
                for n in &r.notes {
                    s.push_str(&format!("    note: {n}\n"));
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
        "client: the server at {0} rejected the connection (rdma_cm status 28: it already serves a client, and `bench rdma` serves one at a time; or this address is not in its allowed_peers)"
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
    /// The connection could not be made.
    #[error("{side}: {source}")]
    Connection {
        /// `server` or `client`.
        side: &'static str,
        /// The error.
        source: ConnectionError,
    },
    /// The data plane did not start.
    #[error(transparent)]
    Start(StartError),
    /// No `roce://` interface of the configuration has the side's address.
    #[error(
        "{side}: no roce:// {side} interface has the address {address} (socket_config.local_addr)"
    )]
    NoInterface {
        /// `server` or `client`.
        side: &'static str,
        /// The address the bench section names.
        address: SocketAddr,
    },
    /// Messages do not fit the send region's buffers.
    #[error(
        "{side}: message_size {message_size} is above the {buf_size}-byte buffers of region `{region}` messages are sent from"
    )]
    MessageTooLarge {
        /// `server` or `client`.
        side: &'static str,
        /// The bench's message size.
        message_size: u64,
        /// The send region.
        region: String,
        /// Its buffer size.
        buf_size: usize,
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

/// How often the server looks for clients it turned away while moving messages.
const PEER_CHECK_EVERY: Duration = Duration::from_millis(1);
/// How long a side keeps draining after a signal before it reports and exits.
const STOP_DRAIN: Duration = Duration::from_secs(1);
/// Messages handed to the connection per burst at most.
const SEND_BURST: usize = 32;

/// One side's connection, with what its loop needs to know about the plane.
struct Side<'a> {
    plane: &'a DataPlane,
    stream: Stream,
    /// The server's interface, watched for clients the plane turned away.
    server_interface: Option<&'a str>,
}

impl Side<'_> {
    /// Messages handed to the connection whose buffers are not back yet (queued, on the
    /// wire, or waiting for their completion): the send region's buffers out of the pool.
    fn outstanding(&self) -> usize {
        self.stream.send_region().map_or(0, |r| {
            let region = self.plane.regions().get(r);
            region.num_bufs() - region.available()
        })
    }

    /// Clients the server's rules turned away since the last look.
    fn turned_away(&self, r: &mut SideReport) {
        let Some(interface) = self.server_interface else {
            return;
        };
        while let Err(ConnectionError::Rejected { .. }) =
            self.plane.accept(interface, Duration::ZERO)
        {
            r.problems
                .push("turned away a second client: this bench serves one at a time".into());
        }
    }
}

/// Fills a burst of `count` messages from `seq` on.
fn messages(stream: &Stream, count: usize, size: usize, seq: u64) -> Option<Burst> {
    let mut b = stream.alloc(count).ok()?;
    for i in 0..b.len() {
        let buf = b.buffer_mut(i, 0)?;
        fill(&mut buf[..size], seq + i as u64);
        b.set_len(i, 0, size);
    }
    Some(b)
}

/// The plane's interface whose own address is `ip` (and `port`, for a server).
fn interface_at(
    config: &Config,
    mode: SocketMode,
    ip: std::net::Ipv4Addr,
    port: Option<u16>,
) -> Option<String> {
    config
        .interfaces
        .iter()
        .find(|i| {
            i.socket.as_ref().is_some_and(|s| {
                s.mode == mode
                    && s.local
                        .is_some_and(|l| l.ip == ip && port.is_none_or(|p| p == l.port))
            })
        })
        .map(|i| i.name.clone())
}

/// Checks a side's configuration against its connection: messages must fit a buffer of
/// the send region; the receives posted are the slot's window (the RX region's buffers,
/// at most 1024), which a note states when `rx_depth` asks for more. Returns the notes
/// and the messages the side may have outstanding: `tx_depth`, capped by the send
/// region's buffers (a message holds one until its completion), with a note when capped.
fn check_side(
    plane: &DataPlane,
    stream: &Stream,
    cfg: &PeerBenchConfig,
    name: &'static str,
) -> Result<(Vec<String>, usize), RdmaBenchError> {
    let regions = plane.regions();
    let mut notes = Vec::new();
    let mut tx_depth = cfg.tx_depth.max(1) as usize;
    if let Some(r) = stream.send_region()
        && cfg.send
        && regions.get(r).num_bufs() < tx_depth
    {
        let bufs = regions.get(r).num_bufs();
        notes.push(format!(
            "messages outstanding: at most {bufs} (tx_depth {tx_depth} is capped by the {bufs} buffers of region `{}`)",
            regions.get(r).name()
        ));
        tx_depth = bufs;
    }
    if let Some(r) = stream.send_region()
        && regions.get(r).buf_size() < cfg.message_size as usize
    {
        return Err(RdmaBenchError::MessageTooLarge {
            side: name,
            message_size: cfg.message_size,
            region: regions.get(r).name().to_owned(),
            buf_size: regions.get(r).buf_size(),
        });
    }
    let window = plane
        .plan()
        .rdma()
        .iter()
        .find(|i| i.name == stream.interface())
        .and_then(|i| i.slots.get(stream.queue()))
        .map(|s| (s.recv_window, regions.get(s.rx_region).name().to_owned()));
    if let Some((w, region)) = window.filter(|(w, _)| cfg.rx_depth as usize > *w) {
        notes.push(format!(
            "receives posted: {w} (rx_depth {} is capped by the {w} buffers of region `{region}`, at most 1024)",
            cfg.rx_depth
        ));
    }
    Ok((notes, tx_depth))
}

fn serve(
    plane: &DataPlane,
    interface: &str,
    cfg: &PeerBenchConfig,
    peer: Option<&PeerBenchConfig>,
    seconds: f64,
    stop: &AtomicBool,
) -> Result<SideReport, RdmaBenchError> {
    let waited_from = Instant::now();
    let stream = loop {
        if stop.load(Ordering::Relaxed) {
            return Err(RdmaBenchError::Stopped("server"));
        }
        match plane.accept(interface, Duration::from_millis(100)) {
            Ok(s) => break s,
            Err(ConnectionError::Timeout { .. } | ConnectionError::Rejected { .. })
                if waited_from.elapsed() < Duration::from_secs(120) => {}
            Err(source) => {
                return Err(RdmaBenchError::Connection {
                    side: "server",
                    source,
                });
            }
        }
    };
    run_connected(plane, stream, Some(interface), (cfg, peer), seconds, stop)
}

/// Runs one side over its established connection (`server_interface`: the server's
/// interface, `None` on the client), with the checks' notes in its report.
fn run_connected(
    plane: &DataPlane,
    stream: Stream,
    server_interface: Option<&str>,
    (cfg, peer): (&PeerBenchConfig, Option<&PeerBenchConfig>),
    seconds: f64,
    stop: &AtomicBool,
) -> Result<SideReport, RdmaBenchError> {
    let name = if server_interface.is_some() {
        "server"
    } else {
        "client"
    };
    let (notes, tx_depth) = check_side(plane, &stream, cfg, name)?;
    let peer_sends = peer.is_none_or(|p| p.send);
    let side = Side {
        plane,
        stream,
        server_interface,
    };
    let receive = peer_sends && cfg.receive;
    let mut r = run_side(&side, cfg, tx_depth, receive, seconds, stop);
    r.notes = notes;
    Ok(r)
}

/// What a failed connect means for the bench: a reject, a signal, or a server that never
/// answered are told apart; anything else is passed on.
fn client_error(e: ConnectionError, remote: SocketAddr) -> RdmaBenchError {
    let passed_on = |source| RdmaBenchError::Connection {
        side: "client",
        source,
    };
    let ConnectionError::Transport { interface, source } = e else {
        return passed_on(e);
    };
    let source = match source.downcast::<VerbsError>() {
        Ok(v) => match *v {
            VerbsError::Event { status, .. } if status == rdma::verbs::REJECTED_BY_SERVER => {
                return RdmaBenchError::Rejected(remote);
            }
            VerbsError::Stopped(_) => return RdmaBenchError::Stopped("client"),
            VerbsError::GaveUp { seconds, last } => {
                return RdmaBenchError::Unreachable {
                    addr: remote,
                    seconds,
                    last: *last,
                };
            }
            other => Box::new(other),
        },
        Err(other) => other,
    };
    passed_on(ConnectionError::Transport { interface, source })
}

fn connect(
    plane: &DataPlane,
    interface: &str,
    cfg: &PeerBenchConfig,
    peer: Option<&PeerBenchConfig>,
    seconds: f64,
    budget: Duration,
    stop: &AtomicBool,
) -> Result<SideReport, RdmaBenchError> {
    let remote = SocketAddr::from((cfg.server_address, cfg.server_port));
    let stream = plane
        .connect_within(interface, remote, budget, &|| stop.load(Ordering::Relaxed))
        .map_err(|e| client_error(e, remote))?;
    run_connected(plane, stream, None, (cfg, peer), seconds, stop)
}

/// Runs the bench on a data plane started from `config` with only the side(s) `mode`
/// asks for (so a client host need not own the server's address). Messages are the
/// buffers of the connections' regions, as in the reference. A client retries refused or
/// unreachable connections every `retry_connect_s` (the interfaces' `socket_config`,
/// default 1 s) for up to `connect_timeout`; `stop` (a signal) ends every wait.
pub fn run(
    config: &Config,
    mode: Mode,
    seconds: f64,
    connect_timeout: Duration,
    stop: &AtomicBool,
) -> Result<RdmaReport, RdmaBenchError> {
    let server = config.bench.rdma_server.as_ref();
    let client = config.bench.rdma_client.as_ref();
    if let Some(small) = server.or(client).filter(|c| c.message_size < 16) {
        return Err(RdmaBenchError::TooSmall(small.message_size));
    }
    let need_server = matches!(mode, Mode::Server | Mode::Both);
    let need_client = matches!(mode, Mode::Client | Mode::Both);
    let scfg = if need_server {
        Some(server.ok_or(RdmaBenchError::Missing("rdma_bench_server"))?)
    } else {
        None
    };
    let ccfg = if need_client {
        Some(client.ok_or(RdmaBenchError::Missing("rdma_bench_client"))?)
    } else {
        None
    };
    let siface = scfg
        .map(|s| {
            interface_at(
                config,
                SocketMode::Server,
                s.server_address,
                Some(s.server_port),
            )
            .ok_or(RdmaBenchError::NoInterface {
                side: "server",
                address: SocketAddr::from((s.server_address, s.server_port)),
            })
        })
        .transpose()?;
    let ciface = ccfg
        .map(|c| {
            interface_at(config, SocketMode::Client, c.client_address, None).ok_or(
                RdmaBenchError::NoInterface {
                    side: "client",
                    address: SocketAddr::from((c.client_address, 0)),
                },
            )
        })
        .transpose()?;
    let mut own = config.clone();
    own.interfaces
        .retain(|i| Some(&i.name) == siface.as_ref() || Some(&i.name) == ciface.as_ref());
    let plane = DataPlane::start(&own).map_err(RdmaBenchError::Start)?;
    let (s, c) = match (scfg, ccfg) {
        (Some(scfg), None) => (
            Some(serve(
                &plane,
                siface.as_deref().expect("server interface"),
                scfg,
                client,
                seconds,
                stop,
            )?),
            None,
        ),
        (None, Some(ccfg)) => (
            None,
            Some(connect(
                &plane,
                ciface.as_deref().expect("client interface"),
                ccfg,
                server,
                seconds,
                connect_timeout,
                stop,
            )?),
        ),
        (Some(scfg), Some(ccfg)) => {
            let (srv, cli) = std::thread::scope(|scope| {
                let srv = scope.spawn(|| {
                    serve(
                        &plane,
                        siface.as_deref().expect("server interface"),
                        scfg,
                        Some(ccfg),
                        seconds,
                        stop,
                    )
                });
                let cli = connect(
                    &plane,
                    ciface.as_deref().expect("client interface"),
                    ccfg,
                    Some(scfg),
                    seconds,
                    connect_timeout,
                    stop,
                );
                (srv.join().expect("server thread"), cli)
            });
            (Some(srv?), Some(cli?))
        }
        (None, None) => unreachable!("every mode runs a side"),
    };
    drop(plane);
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
}
