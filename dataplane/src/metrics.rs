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
//! - `dataplane_stage_in_flight` {interface, direction, queue}: bursts on their way into or
//!   out of GPU memory;
//! - `dataplane_link_up` {interface, direction, queue} (kernel sockets), and
//!   `dataplane_link_connections_total`, `dataplane_rdma_connections` (live RDMA
//!   connections);
//! - `dataplane_pool_buffers`, `dataplane_pool_buffers_free` {region, kind};
//! - `dataplane_worker_passes_total`, `dataplane_worker_busy_passes_total`,
//!   `dataplane_worker_busy_seconds_total`, `dataplane_worker_cycles_per_packet` {core};
//! - `dataplane_info` {version, commit, engine} = 1.

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
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

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
}

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
        let queue_labels = |q: &QueueSource| -> Labels {
            vec![
                ("interface", q.interface.clone()),
                ("direction", q.direction.name().to_owned()),
                ("queue", q.queue.to_string()),
                ("core", q.core.to_string()),
            ]
        };
        let snaps: Vec<_> = self.queues.iter().map(|q| q.counters.snapshot()).collect();
        family(
            &mut e,
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
        family(
            &mut e,
            "dataplane_queue_packets",
            "Packets delivered (rx) or sent (tx) by a queue",
            self.queues
                .iter()
                .zip(&snaps)
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.0))),
        )?;
        family(
            &mut e,
            "dataplane_queue_bytes",
            "Frame bytes delivered (rx) or sent (tx) by a queue",
            self.queues
                .iter()
                .zip(&snaps)
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.1))),
        )?;
        family(
            &mut e,
            "dataplane_queue_drops",
            "Packets dropped at a queue, by reason",
            self.queues.iter().zip(&snaps).flat_map(|(q, s)| {
                s.2.by_reason().into_iter().map(move |(r, n)| {
                    let mut l = queue_labels(q);
                    l.push(("reason", r.to_owned()));
                    (l, ConstCounter::new(n))
                })
            }),
        )?;
        family(
            &mut e,
            "dataplane_stage_in_flight",
            "Bursts a queue's GPU stage has in flight",
            self.queues.iter().map(|q| {
                (
                    queue_labels(q),
                    ConstGauge::new(q.counters.stage_in_flight() as i64),
                )
            }),
        )?;
        let links: Vec<_> = self
            .queues
            .iter()
            .filter_map(|q| Some((q, q.link.as_ref()?.status())))
            .collect();
        family(
            &mut e,
            "dataplane_link_up",
            "1 while a queue's peer is there (kernel sockets)",
            links
                .iter()
                .map(|(q, s)| (queue_labels(q), ConstGauge::new(i64::from(s.up)))),
        )?;
        family(
            &mut e,
            "dataplane_link_connections",
            "Connections made (TCP) or peers learned (UDP) by a queue",
            links
                .iter()
                .map(|(q, s)| (queue_labels(q), ConstCounter::new(s.connections))),
        )?;
        if let Some(c) = self.engine.connections() {
            family(
                &mut e,
                "dataplane_rdma_connections",
                "RDMA connections established now",
                [(Labels::new(), ConstGauge::new(c.live() as i64))],
            )?;
        }
        let region_labels = |r: &crate::memory::Region| -> Labels {
            vec![
                ("region", r.name().to_owned()),
                ("kind", format!("{:?}", r.kind()).to_lowercase()),
            ]
        };
        family(
            &mut e,
            "dataplane_pool_buffers",
            "Buffers of a memory region",
            self.regions
                .iter()
                .map(|r| (region_labels(r), ConstGauge::new(r.num_bufs() as i64))),
        )?;
        family(
            &mut e,
            "dataplane_pool_buffers_free",
            "Free buffers of a memory region (its pool's occupancy is the rest)",
            self.regions
                .iter()
                .map(|r| (region_labels(r), ConstGauge::new(r.available() as i64))),
        )?;
        let core_labels = |core: u32| -> Labels { vec![("core", core.to_string())] };
        family(
            &mut e,
            "dataplane_worker_passes",
            "Passes of a worker over its queues",
            self.workers
                .iter()
                .map(|(c, w)| (core_labels(*c), ConstCounter::new(w.activity.passes()))),
        )?;
        family(
            &mut e,
            "dataplane_worker_busy_passes",
            "Passes in which one of a worker's queues moved packets",
            self.workers
                .iter()
                .map(|(c, w)| (core_labels(*c), ConstCounter::new(w.activity.busy_passes()))),
        )?;
        let rate = crate::cycles::ticks_per_second();
        family(
            &mut e,
            "dataplane_worker_busy_seconds",
            "Seconds a worker spent in passes that moved packets",
            self.workers.iter().filter_map(|(c, w)| {
                let t = w.activity.busy_ticks()?;
                Some((core_labels(*c), ConstCounter::new(t as f64 / rate)))
            }),
        )?;
        family(
            &mut e,
            "dataplane_worker_cycles_per_packet",
            "Tick-counter cycles (TSC, CNTVCT) of busy passes per packet a worker moved, since it started",
            self.workers.iter().filter_map(|(c, w)| {
                let t = w.activity.busy_ticks()?;
                let packets: u64 = self
                    .queues
                    .iter()
                    .zip(&snaps)
                    .filter(|(q, _)| q.core == *c)
                    .map(|(_, s)| s.0)
                    .sum();
                (packets > 0).then(|| (core_labels(*c), ConstGauge::new(t as f64 / packets as f64)))
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

/// Why the endpoint did not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics endpoint on {address}: {reason}")]
pub struct MetricsError {
    /// The address asked for.
    pub address: String,
    /// What failed.
    pub reason: String,
}

/// The running endpoint; dropping it stops its thread (within 100 ms).
pub struct MetricsServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `address` (port 0: any free port) and serves `GET /metrics`.
    pub fn start(address: &str, sources: Sources) -> Result<Self, MetricsError> {
        let err = |reason: String| MetricsError {
            address: address.to_owned(),
            reason,
        };
        let server = tiny_http::Server::http(address).map_err(|e| err(e.to_string()))?;
        let bound = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| err("not an IP address".into()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sources = Arc::new(sources);
        let thread = std::thread::Builder::new()
            .name("dp-metrics".into())
            .spawn(move || serve(&server, &sources, &flag))
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

fn serve(server: &tiny_http::Server, sources: &Arc<Sources>, stop: &AtomicBool) {
    const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    while !stop.load(Ordering::Relaxed) {
        let request = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("metrics endpoint: {e}");
                continue;
            }
        };
        let response = if request.url() == "/metrics" || request.url().starts_with("/metrics?") {
            let header =
                tiny_http::Header::from_bytes("Content-Type", OPENMETRICS).expect("a valid header");
            tiny_http::Response::from_string(render(sources.clone())).with_header(header)
        } else {
            tiny_http::Response::from_string("not found: the metrics are at /metrics\n")
                .with_status_code(404)
        };
        if let Err(e) = request.respond(response) {
            tracing::debug!("metrics endpoint: answering a scrape: {e}");
        }
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
