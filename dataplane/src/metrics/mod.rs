//! The Prometheus / OpenMetrics endpoint (`metrics.listen` in the configuration, or the
//! CLI's `--metrics ADDR`): an HTTP server thread that answers `GET /metrics` with the
//! plane's counters, read at scrape time from the same per-queue counters the stats thread
//! and reports read. Nothing is added to the packet path except what workers already
//! publish (busy-pass counts every 1,024 passes; with metrics on, two tick-counter reads
//! per pass to time busy passes).
//!
//! Exported (labels in braces):
//! - `dataplane_queue_packets_total`, `dataplane_queue_bytes_total` {interface, direction,
//!   queue, core}; `dataplane_queue_drops_total` {…, reason};
//! - `dataplane_stage_in_flight_bursts` {interface, direction, queue}: bursts on their way into or
//!   out of GPU memory;
//! - `dataplane_link_up` {interface, direction, queue} (kernel sockets),
//!   `dataplane_link_connections_total`, `dataplane_link_rejected_peers_total`,
//!   `dataplane_rdma_connections` (live RDMA connections) and
//!   `dataplane_rdma_rejected_peers_total` {interface};
//! - `dataplane_pool_buffers`, `dataplane_pool_buffers_free` {region, kind};
//! - `dataplane_worker_passes_total`, `dataplane_worker_busy_passes_total`,
//!   `dataplane_worker_busy_seconds_total`, `dataplane_worker_packets_total` {core};
//! - `dataplane_info` {version, commit, engine} = 1.

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "otlp")]
pub use otlp::OtlpExporter;

use crate::config::Direction;
use crate::engine::{Engine, Link};
use crate::memory::RegionSet;
use crate::stats::QueueCounters;
use crate::worker::WorkerControl;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use rustix::event::{PollFd, PollFlags};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One queue as the endpoint reports it.
pub struct QueueSource {
    /// Interface name.
    pub interface: String,
    /// RX or TX.
    pub direction: Direction,
    /// Queue id (the slot for RDMA connections).
    pub queue: u16,
    /// Core of the worker that serves it.
    pub core: u32,
    /// Its counters.
    pub counters: Arc<QueueCounters>,
    /// Its peer's state, for engines with links (kernel sockets).
    pub link: Option<Arc<Link>>,
}

/// What a scrape reads.
pub struct Sources {
    /// The running engine (its name, live connections).
    pub engine: Arc<dyn Engine>,
    /// Every queue.
    pub queues: Vec<QueueSource>,
    /// The memory regions.
    pub regions: Arc<RegionSet>,
    /// Per worker: its core and control block (activity counters).
    pub workers: Vec<(u32, Arc<WorkerControl>)>,
    /// The RX queues' transient buffers, fired by `POST /trigger`.
    pub transient_triggers: Vec<Arc<crate::capture::TransientTrigger>>,
}

/// What the endpoint and the OTLP exporter read, replaced whole when a live change adds
/// queues or workers ([`crate::DataPlane::change`]).
pub type SharedSources = Arc<arc_swap::ArcSwap<Sources>>;

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("queues", &self.queues.len())
            .field("workers", &self.workers.len())
            .finish()
    }
}

type Labels = Vec<(&'static str, String)>;

fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Labels, M)>,
) -> Result<(), std::fmt::Error> {
    let mut series = series.into_iter().peekable();
    let Some((_, first)) = series.peek() else {
        return Ok(());
    };
    let kind = first.metric_type();
    let mut m = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in series {
        value.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Sources {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snaps: Vec<_> = self.queues.iter().map(|q| q.counters.snapshot()).collect();
        self.encode_info(&mut e)?;
        self.encode_queues(&mut e, &snaps)?;
        self.encode_links(&mut e)?;
        self.encode_rdma(&mut e)?;
        self.encode_regions(&mut e)?;
        self.encode_workers(&mut e, &snaps)
    }
}

/// A queue's labels: interface, direction, queue id and core.
fn queue_labels(q: &QueueSource) -> Labels {
    vec![
        ("interface", q.interface.clone()),
        ("direction", q.direction.name().to_owned()),
        ("queue", q.queue.to_string()),
        ("core", q.core.to_string()),
    ]
}

/// One snapshot of a queue's counters: packets, bytes, drops.
type QueueSnapshot = (u64, u64, crate::stats::Drops);

impl Sources {
    /// Build and engine.
    fn encode_info(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        family(
            e,
            "dataplane_info",
            "Build and engine of the running data plane",
            [(
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_owned()),
                    ("commit", crate::stats::BUILD_COMMIT.to_owned()),
                    ("engine", self.engine.name().to_owned()),
                ],
                ConstGauge::new(1i64),
            )],
        )?;
        Ok(())
    }

    /// Per queue: packets, bytes, drops by reason, bursts in the GPU stage.
    fn encode_queues(
        &self,
        e: &mut DescriptorEncoder,
        snaps: &[QueueSnapshot],
    ) -> Result<(), std::fmt::Error> {
        family(
            e,
            "dataplane_queue_packets",
            "Packets delivered (rx) or sent (tx) by a queue",
            self.queues
                .iter()
                .zip(snaps)
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.0))),
        )?;
        family(
            e,
            "dataplane_queue_bytes",
            "Frame bytes delivered (rx) or sent (tx) by a queue",
            self.queues
                .iter()
                .zip(snaps)
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.1))),
        )?;
        family(
            e,
            "dataplane_queue_drops",
            "Packets dropped at a queue, by reason",
            self.queues.iter().zip(snaps).flat_map(|(q, s)| {
                s.2.by_reason().into_iter().map(move |(r, n)| {
                    let mut l = queue_labels(q);
                    l.push(("reason", r.to_owned()));
                    (l, ConstCounter::new(n))
                })
            }),
        )?;
        family(
            e,
            "dataplane_stage_in_flight_bursts",
            "Bursts a queue's GPU stage has in flight",
            self.queues.iter().map(|q| {
                (
                    queue_labels(q),
                    ConstGauge::new(q.counters.stage_in_flight() as i64),
                )
            }),
        )?;
        Ok(())
    }

    /// Per queue with a peer (kernel sockets): link state, connections, refusals.
    fn encode_links(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let links: Vec<_> = self
            .queues
            .iter()
            .filter_map(|q| Some((q, q.link.as_ref()?.status())))
            .collect();
        family(
            e,
            "dataplane_link_up",
            "1 while a queue's peer is there (kernel sockets)",
            links
                .iter()
                .map(|(q, s)| (queue_labels(q), ConstGauge::new(i64::from(s.up)))),
        )?;
        family(
            e,
            "dataplane_link_connections",
            "Connections made (TCP) or peers learned (UDP) by a queue",
            links
                .iter()
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.connections))),
        )?;
        family(
            e,
            "dataplane_link_rejected_peers",
            "Datagrams (UDP) and connections (TCP) a queue refused: from outside allowed_peers, beyond the lanes, or not the peer a UDP server answers",
            links
                .iter()
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.rejected_peers))),
        )?;
        Ok(())
    }

    /// RDMA connections and refused requests, for engines with connections.
    fn encode_rdma(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(c) = self.engine.connections() {
            family(
                e,
                "dataplane_rdma_connections",
                "RDMA connections established now",
                [(Labels::new(), ConstGauge::new(c.live() as i64))],
            )?;
            family(
                e,
                "dataplane_rdma_rejected_peers",
                "RDMA connection requests a server interface refused: from outside allowed_peers",
                c.rejected_peers()
                    .into_iter()
                    .map(|(interface, n)| (vec![("interface", interface)], ConstCounter::new(n))),
            )?;
        }
        Ok(())
    }

    /// Per region: buffers and free buffers.
    fn encode_regions(&self, e: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let region_labels = |r: &crate::memory::Region| -> Labels {
            vec![
                ("region", r.name().to_owned()),
                ("kind", crate::plan::choice_name(&r.kind())),
            ]
        };
        family(
            e,
            "dataplane_pool_buffers",
            "Buffers of a memory region",
            self.regions
                .newest()
                .map(|r| (region_labels(r), ConstGauge::new(r.num_bufs() as i64))),
        )?;
        family(
            e,
            "dataplane_pool_buffers_free",
            "Free buffers of a memory region (its pool's occupancy is the rest)",
            self.regions
                .newest()
                .map(|r| (region_labels(r), ConstGauge::new(r.available() as i64))),
        )?;
        Ok(())
    }

    /// Per worker: passes, busy passes, busy seconds, cycles per packet.
    fn encode_workers(
        &self,
        e: &mut DescriptorEncoder,
        snaps: &[QueueSnapshot],
    ) -> Result<(), std::fmt::Error> {
        let core_labels = |core: u32| -> Labels { vec![("core", core.to_string())] };
        family(
            e,
            "dataplane_worker_passes",
            "Passes of a worker over its queues",
            self.workers
                .iter()
                .map(|(c, w)| (core_labels(*c), ConstCounter::new(w.activity.passes()))),
        )?;
        family(
            e,
            "dataplane_worker_busy_passes",
            "Passes in which one of a worker's queues moved packets",
            self.workers
                .iter()
                .map(|(c, w)| (core_labels(*c), ConstCounter::new(w.activity.busy_passes()))),
        )?;
        let rate = crate::cycles::ticks_per_second();
        family(
            e,
            "dataplane_worker_busy_seconds",
            "Seconds a worker spent in passes that moved packets",
            self.workers.iter().filter_map(|(c, w)| {
                let t = w.activity.busy_ticks()?;
                Some((core_labels(*c), ConstCounter::new(t as f64 / rate)))
            }),
        )?;
        family(
            e,
            "dataplane_worker_packets",
            "Packets a worker's queues moved (busy seconds over these is its cost per packet)",
            self.workers.iter().map(|(c, _)| {
                let packets: u64 = self
                    .queues
                    .iter()
                    .zip(snaps)
                    .filter(|(q, _)| q.core == *c)
                    .map(|(_, s)| s.0)
                    .sum();
                (core_labels(*c), ConstCounter::new(packets))
            }),
        )?;
        Ok(())
    }
}

/// The endpoint's body for `sources` now (OpenMetrics text).
pub fn render(sources: Arc<Sources>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(sources));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

/// The classic Prometheus text format (0.0.4) of an OpenMetrics exposition: a counter's
/// HELP and TYPE name its samples (`x_total`, where OpenMetrics names the family `x`),
/// and there is no `# EOF`.
pub fn classic_text(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ")
            && let Some(name) = rest.strip_suffix(" counter")
        {
            counters.insert(name.to_owned());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        out += renamed.as_deref().unwrap_or(line);
        out.push('\n');
    }
    out
}

/// Why the endpoint did not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {address}: {reason}")]
pub struct MetricsError {
    /// The address asked for.
    pub address: String,
    /// What failed.
    pub reason: String,
}

/// Connections answered at once; more wait in the kernel's accept backlog.
pub const MAX_CLIENTS: usize = 8;
/// How long one connection may take to send its request and read the answer; a client
/// that stalls longer is dropped, so it holds a slot for this long at most.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(2);
/// The largest request head read; a longer one is answered 431 and closed.
const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// The running endpoint; dropping it stops its thread (within 100 ms, whatever its clients
/// do: every socket is non-blocking, so no read or write waits on one).
pub struct MetricsServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `address` (port 0: any free port) and serves `GET /metrics`. A bare port
    /// (`9464` or `:9464`) listens on 127.0.0.1; a non-loopback address is served with a
    /// warning, since the counters then reach anyone who can connect.
    pub fn start(address: &str, sources: SharedSources) -> Result<Self, MetricsError> {
        let err = |reason: String| MetricsError {
            address: address.to_owned(),
            reason,
        };
        let wanted =
            crate::config::metrics_listen_address(address).map_err(|e| err(e.to_string()))?;
        let listener = TcpListener::bind(wanted).map_err(|e| err(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| err(e.to_string()))?;
        let bound = listener.local_addr().map_err(|e| err(e.to_string()))?;
        if !bound.ip().is_loopback() {
            tracing::warn!(
                "metrics: listening on {bound}, not a loopback address: anyone who can reach it reads the counters"
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dp-metrics".into())
            .spawn(move || serve(&listener, &sources, &flag))
            .map_err(|e| err(e.to_string()))?;
        tracing::info!("metrics: http://{bound}/metrics");
        Ok(Self {
            address: bound,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

/// One connection being answered.
struct Client {
    stream: TcpStream,
    since: Instant,
    head: Vec<u8>,
    /// The answer and how much of it went out.
    answer: Option<(Vec<u8>, usize)>,
}

impl Client {
    /// Moves the exchange on as far as the socket allows; false when it is over.
    fn progress(&mut self, sources: &Arc<Sources>) -> bool {
        if self.answer.is_none() {
            let mut buf = [0u8; 1024];
            loop {
                match self.stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => self.head.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return false,
                }
                if self.head.windows(4).any(|w| w == b"\r\n\r\n") {
                    self.answer = Some((answer(&self.head, sources), 0));
                    break;
                }
                if self.head.len() > MAX_REQUEST_HEAD {
                    self.answer = Some((response(431, "text/plain", "request too large\n"), 0));
                    break;
                }
            }
        }
        let Some((bytes, sent)) = &mut self.answer else {
            return true;
        };
        while *sent < bytes.len() {
            match self.stream.write(&bytes[*sent..]) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        false
    }
}

/// The HTTP answer to a request head.
fn answer(head: &[u8], sources: &Arc<Sources>) -> Vec<u8> {
    const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method == "POST" && path == "/trigger" {
        // Fires every transient buffer; a buffer with a window open counts it as merged,
        // so requests cannot make more than one file per window each.
        if sources.transient_triggers.is_empty() {
            return response(
                404,
                "text/plain",
                "no RX queue has a transient buffer (capture.transient)\n",
            );
        }
        for t in &sources.transient_triggers {
            t.fire();
        }
        return response(
            200,
            "text/plain",
            &format!(
                "fired {} transient buffer(s)\n",
                sources.transient_triggers.len()
            ),
        );
    }
    if method != "GET" {
        return response(
            405,
            "text/plain",
            "only GET /metrics and POST /trigger are served\n",
        );
    }
    if path == "/metrics" || path.starts_with("/metrics?") {
        // OpenMetrics for a client that asks for it (Prometheus does), else the classic
        // text format (curl, promtool, older scrapers).
        let head = String::from_utf8_lossy(head).to_ascii_lowercase();
        let wants_openmetrics = head
            .lines()
            .any(|l| l.starts_with("accept:") && l.contains("application/openmetrics-text"));
        let body = render(sources.clone());
        if wants_openmetrics {
            response(200, OPENMETRICS, &body)
        } else {
            response(200, PROMETHEUS_TEXT, &classic_text(&body))
        }
    } else {
        response(
            404,
            "text/plain",
            "not found: the metrics are at /metrics\n",
        )
    }
}

fn response(status: u16, content_type: &str, body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The endpoint's thread: accepts up to [`MAX_CLIENTS`] connections, moves each on when
/// its socket is ready, drops those past [`CLIENT_DEADLINE`], and ends when `stop` is set.
fn serve(listener: &TcpListener, sources: &SharedSources, stop: &AtomicBool) {
    let mut clients: Vec<Client> = Vec::new();
    let tick = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    while !stop.load(Ordering::Relaxed) {
        while clients.len() < MAX_CLIENTS {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        clients.push(Client {
                            stream,
                            since: Instant::now(),
                            head: Vec::new(),
                            answer: None,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!("metrics endpoint: accept: {e}");
                    break;
                }
            }
        }
        let now = Instant::now();
        let current = sources.load_full();
        clients
            .retain_mut(|c| now.duration_since(c.since) < CLIENT_DEADLINE && c.progress(&current));
        // Wait for the listener (while there is room) or a client to be ready.
        let mut fds: Vec<PollFd> = clients
            .iter()
            .map(|c| {
                let wants = if c.answer.is_some() {
                    PollFlags::OUT
                } else {
                    PollFlags::IN
                };
                PollFd::new(&c.stream, wants)
            })
            .collect();
        if clients.len() < MAX_CLIENTS {
            fds.push(PollFd::new(listener, PollFlags::IN));
        }
        let _ = rustix::event::poll(&mut fds, Some(&tick));
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
