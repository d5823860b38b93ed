//! `dataplane bench socket`: kernel UDP or TCP between `socket_bench_server` and
//! `socket_bench_client`, every received byte verified, losses counted and attributed.
//!
//! Each TX queue of a sending side is one stream.
//! - **UDP**: a message carries its sequence number, its stream and a kind in a 16-byte
//!   header and a pattern derived from (stream, sequence) after it. When its time is up a
//!   sender sends end markers carrying how many messages the stream sent; a receiver
//!   counts, per stream, what arrived intact, so `lost` = sent - received exactly, and the
//!   plane's drop counters (the kernel's socket drops as `engine_missed`) say where.
//! - **TCP**: each stream is a byte stream whose byte `o` is fixed by `o`, so every read
//!   is checked wherever the kernel cut it; nothing may be lost.

#![forbid(unsafe_code)]

use dataplane::burst::Burst;
use dataplane::config::{Config, Direction, PeerBenchConfig, SocketMode, Transport};
use dataplane::plane::{DataPlane, RxQueue, StartError, TxFailure, TxQueue};
use dataplane::stats::Drops;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use super::Mode;

mod pattern;
mod side;
use pattern::*;
use side::*;

/// How much of every message the socket bench writes and reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SocketWork {
    /// Every message written with its pattern, every received byte checked.
    #[default]
    Full,
    /// What iperf3 does, for a like-for-like comparison: TCP payloads are neither written
    /// nor read (bytes are counted), UDP messages carry only their 16-byte header (stream,
    /// sequence, kind), which the receiver reads to count losses. Messages in GPU memory
    /// are still written and checked in full.
    Count,
}

impl SocketWork {
    /// The name the command line and the JSON report use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Count => "count",
        }
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct SocketBenchOptions {
    /// Which sides.
    pub mode: Mode,
    /// Seconds each sender sends.
    pub seconds: f64,
    /// Pace every sending side to this many Gb/s of payload (split over its TX queues).
    pub target_gbps: Option<f64>,
    /// Overrides both sections' `message_size`.
    pub message_size: Option<u64>,
    /// How long a sender waits for its peer (a TCP connection, a UDP server's first
    /// datagram) before it gives up.
    pub connect_timeout: Duration,
    /// Bursts a sender keeps queued per TX queue at most ([`QUEUED_BURSTS`] by default).
    pub queued_bursts: usize,
    /// Time each queue's worker (busy nanoseconds per packet, and the share of the run it
    /// was busy).
    pub time_stages: bool,
    /// How much of every message is written and read.
    pub work: SocketWork,
}

/// Traffic counts of one side, or summed over the sides.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct Traffic {
    /// Messages sent (end markers not counted).
    pub messages_sent: u64,
    /// Messages (UDP) or message-sized byte runs (TCP) received and verified.
    pub messages_received: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received and verified.
    pub bytes_received: u64,
    /// Messages the peer sent that never arrived (UDP: from the end markers).
    pub lost: u64,
    /// Corrupt, duplicated or misplaced data.
    pub errors: u64,
    /// Send throughput, payload.
    pub tx_gbps: f64,
    /// Receive throughput, payload.
    pub rx_gbps: f64,
}

impl Traffic {
    /// The rates from the bytes and the seconds each direction took.
    fn set_rates(&mut self, tx_secs: f64, rx_secs: f64) {
        self.tx_gbps = self.bytes_sent as f64 * 8.0 / tx_secs / 1e9;
        self.rx_gbps = self.bytes_received as f64 * 8.0 / rx_secs / 1e9;
    }
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.lost += o.lost;
        self.errors += o.errors;
        self.tx_gbps += o.tx_gbps;
        self.rx_gbps += o.rx_gbps;
    }
}

/// One side's numbers.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema)]
pub struct SideReport {
    /// Streams (TX queues) this side sent on.
    pub streams: usize,
    /// What it sent and received.
    #[serde(flatten)]
    pub traffic: Traffic,
    /// What went wrong.
    pub problems: Vec<String>,
}

/// The report.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SocketReport {
    /// `server`, `client` or `both`.
    pub mode: &'static str,
    /// `udp` or `tcp`.
    pub transport: &'static str,
    /// Bytes per message.
    pub message_size: u64,
    /// Seconds each sender sent for.
    pub seconds: f64,
    /// How much of every message was written and read (`full`: every byte checked).
    pub work: SocketWork,
    /// Summed over the sides (`lost`: messages sent and never received).
    #[serde(flatten)]
    pub total: Traffic,
    /// `--target-gbps`, when paced.
    pub target_gbps: Option<f64>,
    /// Drops the plane counted, by reason (the kernel's socket drops are
    /// `engine_missed`).
    pub drops: Drops,
    /// The drops the plane counted account for every lost message.
    pub attributed: bool,
    /// Nothing lost and nothing wrong.
    pub lossless: bool,
    /// The server side, when this process ran it.
    pub server: Option<SideReport>,
    /// The client side, when this process ran it.
    pub client: Option<SideReport>,
    /// With `--stages`: each queue's worker time per packet.
    pub stages: Vec<super::raw::StageCost>,
    /// With `--stages`: each queue worker's busy time as a share of the sending time
    /// (`seconds`), in the order of `stages`.
    pub busy_fraction: Vec<f64>,
}

impl SocketReport {
    /// True when every message arrived verified.
    pub fn ok(&self) -> bool {
        self.lossless
    }

    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "socket bench ({}), mode {}, {} B messages, {:.2} s{}{}\n",
            self.transport,
            self.mode,
            self.message_size,
            self.seconds,
            self.target_gbps
                .map(|g| format!(", paced at {g} Gb/s"))
                .unwrap_or_default(),
            match self.work {
                SocketWork::Full => "",
                SocketWork::Count if self.transport == "tcp" => {
                    ", work count: payloads neither written nor checked"
                }
                SocketWork::Count => ", work count: only the 16-byte headers written and read",
            }
        );
        for (name, side) in [("server", &self.server), ("client", &self.client)] {
            if let Some(r) = side {
                s.push_str(&format!(
                    "  {name}: sent {} on {} stream(s) ({:.3} Gb/s), received {} ({:.3} Gb/s), lost {}, errors {}\n",
                    r.traffic.messages_sent, r.streams, r.traffic.tx_gbps, r.traffic.messages_received, r.traffic.rx_gbps, r.traffic.lost, r.traffic.errors
                ));
                for p in &r.problems {
                    s.push_str(&format!("    - {p}\n"));
                }
            }
        }
        for (st, busy) in self.stages.iter().zip(&self.busy_fraction) {
            s.push_str(&format!(
                "  stage {}: {:.1} ns per packet, busy {:.0} % of the sending time\n",
                st.stage,
                st.ns_per_packet,
                busy * 100.0
            ));
        }
        let d = &self.drops;
        s.push_str(&format!(
            "  drops: engine_missed (kernel socket) {} ring_full {} pool_empty {} no_flow {} malformed {} disconnected {}\n",
            d.engine_missed, d.ring_full, d.pool_empty, d.no_flow, d.malformed, d.disconnected
        ));
        if self.lossless {
            s.push_str("LOSSLESS: every message arrived and verified\n");
        } else if self.total.errors == 0 && self.attributed {
            s.push_str(&format!(
                "LOSSY: {} lost, {} dropped at this end; the drop counters above account for every loss\n",
                self.total.lost,
                self.drops.total()
            ));
        } else {
            s.push_str(&format!(
                "FAILED: {} lost, {} errors{}\n",
                self.total.lost,
                self.total.errors,
                if self.attributed {
                    ""
                } else {
                    " (losses not accounted for by the drop counters)"
                }
            ));
        }
        s
    }
}

/// The bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum SocketBenchError {
    /// A section is missing.
    #[error("the configuration has no `{0}` section")]
    Missing(&'static str),
    /// The configuration is not a kernel socket one.
    #[error("not a udp:// or tcp:// configuration: `bench socket` runs kernel socket interfaces")]
    NotSockets,
    /// No interface for a side.
    #[error("{0}: the configuration has no {0} interface (socket_config.mode: {0})")]
    NoInterface(&'static str),
    /// Messages must hold the header.
    #[error("message_size {0} is below 16 bytes (a UDP message carries a 16-byte header)")]
    TooSmall(u64),
    /// Messages do not fit the buffers.
    #[error(
        "{side}: message_size {size} is above the {buf_size}-byte buffers of TX queue `{queue}`'s region"
    )]
    TooLarge {
        /// Side.
        side: &'static str,
        /// Message size.
        size: u64,
        /// Buffer size.
        buf_size: usize,
        /// Queue.
        queue: String,
    },
    /// The plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
}

const HEADER: usize = 16;
/// Every TCP stream carries the same bytes (a server's lanes take connections in any
/// order, so a receiver cannot tell which sender stream it has).
const TCP_KEY: u64 = 0x5EED;
const KIND_DATA: u32 = 0;
const KIND_END: u32 = 1;
/// End markers per stream, spread over [`END_SPREAD`] (UDP may drop some).
const END_MARKERS: u32 = 20;
const END_SPREAD: Duration = Duration::from_millis(200);
/// Bytes per sent burst at most.
const BURST_BYTES: usize = 256 << 10;
/// Bursts a sender keeps queued per TX queue at most, by default.
pub const QUEUED_BURSTS: usize = 16;
/// A receiver that heard every end marker stops; otherwise it stops this long after the
/// senders' time with nothing arriving.
const QUIET_END: Duration = Duration::from_secs(2);

/// What the bench runs, checked against the configuration: the transport, each side's
/// section (present when that side runs here) and the message size.
struct Plan {
    transport: Transport,
    server: Option<PeerBenchConfig>,
    client: Option<PeerBenchConfig>,
    size: u64,
}

impl Plan {
    fn new(config: &Config, opts: &SocketBenchOptions) -> Result<Self, SocketBenchError> {
        let transport = config
            .interfaces
            .iter()
            .find_map(|i| i.socket.as_ref().map(|s| s.transport))
            .filter(|t| *t != Transport::Roce)
            .ok_or(SocketBenchError::NotSockets)?;
        let server = config.bench.socket_server.clone();
        let client = config.bench.socket_client.clone();
        if opts.mode != Mode::Client && server.is_none() {
            return Err(SocketBenchError::Missing("socket_bench_server"));
        }
        if opts.mode != Mode::Server && client.is_none() {
            return Err(SocketBenchError::Missing("socket_bench_client"));
        }
        let size = opts
            .message_size
            .or(server.as_ref().map(|c| c.message_size))
            .or(client.as_ref().map(|c| c.message_size))
            .unwrap_or(1024);
        if transport == Transport::Udp && size < HEADER as u64 {
            return Err(SocketBenchError::TooSmall(size));
        }
        Ok(Self {
            transport,
            server,
            client,
            size,
        })
    }

    /// The sides that run here: name, mode, own section, the peer's section.
    fn sides(
        &self,
        mode: Mode,
    ) -> impl Iterator<
        Item = (
            &'static str,
            SocketMode,
            &PeerBenchConfig,
            &Option<PeerBenchConfig>,
        ),
    > {
        [
            (
                mode != Mode::Client,
                "server",
                SocketMode::Server,
                &self.server,
                &self.client,
            ),
            (
                mode != Mode::Server,
                "client",
                SocketMode::Client,
                &self.client,
                &self.server,
            ),
        ]
        .into_iter()
        .filter(|side| side.0)
        .map(|(_, name, m, cfg, peer)| (name, m, cfg.as_ref().expect("checked"), peer))
    }

    /// `config` with only the sides that run here, their senders paced to `--target-gbps`.
    fn config(
        &self,
        config: &Config,
        opts: &SocketBenchOptions,
    ) -> Result<Config, SocketBenchError> {
        let mut c = for_mode(config, opts.mode);
        for (name, mode, _, _) in self.sides(opts.mode) {
            if !c
                .interfaces
                .iter()
                .any(|i| i.socket.as_ref().is_some_and(|s| s.mode == mode))
            {
                return Err(SocketBenchError::NoInterface(name));
            }
        }
        if let Some(g) = opts.target_gbps {
            let senders: Vec<SocketMode> = self
                .sides(opts.mode)
                .filter(|side| side.2.send)
                .map(|side| side.1)
                .collect();
            c = paced(&c, g, &senders);
        }
        Ok(c)
    }
}

/// Runs the bench.
pub fn run(
    config: &Config,
    opts: &SocketBenchOptions,
    stop: &AtomicBool,
) -> Result<SocketReport, SocketBenchError> {
    let plan = Plan::new(config, opts)?;
    let (transport, size) = (plan.transport, plan.size);
    let c = plan.config(config, opts)?;
    let _timing = dataplane::stats::time_stages_while(opts.time_stages);
    let mut plane = DataPlane::start(&c)?;
    let mut sides = Vec::new();
    for (name, mode, cfg, peer) in plan.sides(opts.mode) {
        // Whether the peer sends (its section says so): then nothing arriving is an error.
        let peer_sends = peer.as_ref().is_some_and(|p| p.send);
        let q = take_side(&mut plane, &c, mode);
        for t in &q.tx {
            let buf = t.segment_sizes().first().copied().unwrap_or(0);
            if cfg.send && (buf as u64) < size {
                return Err(SocketBenchError::TooLarge {
                    side: name,
                    size,
                    buf_size: buf,
                    queue: format!("{} {}", t.interface, t.queue),
                });
            }
        }
        sides.push((name, q, cfg.clone(), peer_sends));
    }
    let results: Vec<(&'static str, SideReport)> = std::thread::scope(|s| {
        let handles: Vec<_> = sides
            .into_iter()
            .map(|(name, q, cfg, peer_sends)| {
                let opts = opts.clone();
                s.spawn(move || {
                    if let Some(core) = cfg.cpu_core
                        && let Err(e) = dataplane::affinity::pin_current_thread(core)
                    {
                        tracing::warn!("{name}: bench thread not pinned to core {core}: {e}");
                    }
                    (
                        name,
                        run_side(q, &cfg, peer_sends, size as usize, transport, &opts, stop),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench side panicked"))
            .collect()
    });
    // Let the RX workers read the kernel's drop counters once more.
    std::thread::sleep(Duration::from_millis(50));
    let snapshot = plane.snapshot();
    let failures = plane.shutdown().err().unwrap_or_default();
    Ok(report(opts, &plan, snapshot, results, &failures))
}

/// The report from each side's results, the counters and the workers' failures.
fn report(
    opts: &SocketBenchOptions,
    plan: &Plan,
    snapshot: dataplane::stats::Snapshot,
    results: Vec<(&'static str, SideReport)>,
    failures: &[dataplane::worker::WorkerFailed],
) -> SocketReport {
    let elapsed = opts.seconds * 1e9;
    let (mut stages, mut busy_fraction) = (Vec::new(), Vec::new());
    if opts.time_stages {
        let busy: Vec<_> = snapshot
            .queues
            .iter()
            .filter(|q| q.packets > 0)
            .cloned()
            .collect();
        busy_fraction = busy.iter().map(|q| q.busy_ns as f64 / elapsed).collect();
        stages = super::raw::worker_stages(&busy).collect();
    }
    let mut report = SocketReport {
        mode: opts.mode.name(),
        transport: if plan.transport == Transport::Udp {
            "udp"
        } else {
            "tcp"
        },
        message_size: plan.size,
        seconds: opts.seconds,
        work: opts.work,
        total: Traffic::default(),
        target_gbps: opts.target_gbps,
        drops: snapshot.drops(),
        attributed: false,
        lossless: false,
        server: None,
        client: None,
        stages,
        busy_fraction,
    };
    for (name, mut side) in results {
        for f in failures {
            side.traffic.errors += 1;
            side.problems.push(f.to_string());
        }
        report.total.add(&side.traffic);
        if name == "server" {
            report.server = Some(side);
        } else {
            report.client = Some(side);
        }
    }
    if plan.transport == Transport::Tcp && opts.mode == Mode::Both {
        // Everything one side wrote must have arrived at the other.
        let (s, c) = (report.server.as_ref(), report.client.as_ref());
        for (from, to) in [(c, s), (s, c)] {
            if let (Some(f), Some(t)) = (from, to)
                && f.traffic.bytes_sent > 0
                && t.traffic.bytes_received < f.traffic.bytes_sent
            {
                let missing = (f.traffic.bytes_sent - t.traffic.bytes_received) / plan.size;
                report.total.lost += missing;
                report.total.errors += 1;
            }
        }
    }
    report.attributed = report.total.lost <= report.drops.total();
    // Drops at this end (a sender's refused datagrams, a receiver's kernel drops) are
    // losses even where the other end's count is not known here.
    report.lossless =
        report.total.lost == 0 && report.total.errors == 0 && report.drops.total() == 0;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_messages_check_and_corruption_is_found() {
        for size in [16, 17, 23, 24, 1472, 8192, 65507] {
            let mut m = vec![0u8; size];
            fill_udp(&mut m, 3, 77, KIND_DATA);
            assert!(check_udp_body(&m, 3, 77), "{size}");
            assert!(
                size == HEADER || !check_udp_body(&m, 3, 78),
                "another message: {size}"
            );
            if size > HEADER {
                let last = size - 1;
                m[last] ^= 1;
                assert!(!check_udp_body(&m, 3, 77), "flipped last byte: {size}");
            }
        }
    }

    #[test]
    fn a_tcp_stream_checks_wherever_it_is_cut() {
        let total = 3 * BASE_WORDS * 8 + 13;
        let mut whole = vec![0u8; total];
        fill_stream(&mut whole, 0);
        // Filled in odd pieces, it is the same stream.
        let mut pieces = vec![0u8; total];
        let mut at = 0;
        for (k, len) in [1usize, 7, 8, 9, 65535, 65536, 65537, 3]
            .iter()
            .cycle()
            .enumerate()
        {
            if at >= total || k > 1000 {
                break;
            }
            let end = (at + len).min(total);
            fill_stream(&mut pieces[at..end], at as u64);
            assert!(check_stream(&whole[at..end], at as u64), "piece at {at}");
            at = end;
        }
        assert_eq!(pieces, whole);
        // A flipped byte, or the right bytes at the wrong offset, fail.
        let mut bad = whole.clone();
        bad[70_000] ^= 0x10;
        assert!(!check_stream(&bad, 0));
        assert!(!check_stream(&whole[8..100], 16));
        assert!(
            !check_stream(&whole[65536..65600], 0),
            "blocks differ by key"
        );
    }
}
