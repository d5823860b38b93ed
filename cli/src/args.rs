//! The command line: commands, benches and their options (clap).

use super::*;
use dataplane::capture::CaptureFormat;

/// `--version`: the release, the commit it was built from, the features built in.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("DATAPLANE_COMMIT"),
    "; features: ",
    env!("DATAPLANE_FEATURES"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "dataplane",
    version = VERSION,
    about = "Kernel-bypass poll-mode data plane",
    after_help = crate::status::HELP
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    /// Log line format on stderr: `text`, or `json` (one object per line, for log
    /// collectors).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Serve Prometheus / OpenMetrics metrics at http://ADDR/metrics while the plane runs
    /// (as the configuration's `metrics.listen`, which it overrides).
    #[arg(long, global = true, value_name = "ADDR")]
    pub(crate) metrics: Option<std::net::SocketAddr>,
    /// Push the metrics to an OpenTelemetry collector over OTLP/HTTP every second while
    /// the plane runs (`http://HOST[:PORT]`, port 4318 by default; as the configuration's
    /// `metrics.otlp_endpoint`, which it overrides).
    #[cfg(feature = "otlp")]
    #[arg(long, global = true, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT",
          value_parser = |s: &str| dataplane::config::OtlpEndpoint::parse(s))]
    pub(crate) otlp: Option<dataplane::config::OtlpEndpoint>,
}

/// `--metrics`, applied to every configuration loaded.
pub(crate) static METRICS_LISTEN: std::sync::OnceLock<std::net::SocketAddr> =
    std::sync::OnceLock::new();

/// `--otlp`, applied to every configuration loaded.
pub(crate) static OTLP_ENDPOINT: std::sync::OnceLock<dataplane::config::OtlpEndpoint> =
    std::sync::OnceLock::new();

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable; colours only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The loss budget at a load: per RX queue the buffers in flight, the longest stall
    /// of the application that loses nothing, the counter that would show a loss, the
    /// memory it takes, and (with --headroom) what to change to absorb that stall.
    Plan {
        /// YAML configuration.
        file: PathBuf,
        /// The load per queue, in bits per second: `10G`, `2.5Gb/s`, `800M`, `1e9`.
        #[arg(long, value_parser = parse_rate)]
        rate: f64,
        /// Bytes per packet as the queue receives it (a frame, or a datagram's payload).
        #[arg(long)]
        packet_size: u32,
        /// A stall each queue should absorb: `10ms`, `1s`, `250us`.
        #[arg(long, value_parser = parse_duration_s)]
        headroom: Option<f64>,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Compare a configuration with the one a plane runs: which queues a live change
    /// (`DataPlane::change`) keeps, removes or touches, which rules switch, or what needs a
    /// restart (then exit status 3).
    Diff {
        /// The configuration the plane runs.
        running: PathBuf,
        /// The new configuration.
        file: PathBuf,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// Check a configuration file and print a summary or every error.
    Validate {
        /// YAML configuration.
        file: PathBuf,
        /// Also print the start-up plan: per region its headroom, lending and huge pages;
        /// per queue its segments, core, batch, timeout, stage, reorders and offloads; per
        /// core its queues; DPDK pools and EAL arguments; RDMA connection slots.
        #[arg(long)]
        plan: bool,
        /// With --plan: the plan as one JSON object instead.
        #[arg(long, requires = "plan")]
        json: bool,
    },
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
    /// Check this machine against a configuration (or, without one, machine-wide): huge
    /// pages, cores, PCI devices and PCIe links, RDMA GIDs, GPU driver, persistence and
    /// clocks, GPUDirect Storage, socket and locked-memory limits. Each finding comes with
    /// the command that fixes it. Exit status 3 when something blocks a start, 1 when the
    /// configuration does not load.
    Doctor {
        /// YAML configuration.
        file: Option<PathBuf>,
        /// Print the findings as one JSON object.
        #[arg(long)]
        json: bool,
        /// Read /proc and /sys below this directory instead of / (a recorded machine).
        #[arg(long, default_value = "/")]
        root: PathBuf,
    },
    /// Plot `bench raw --json` results: RX throughput over time for each, and with
    /// several a comparison of their medians (a sweep: labelled by payload size).
    Plot {
        /// Result files (the JSON line of `bench raw --json`, alone or as the last line).
        #[arg(required = true)]
        results: Vec<PathBuf>,
        /// Output image: .png or .svg.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Results as CSV: reads the JSON lines of `--json` outputs (files, or stdin when
    /// none) and writes one row per result to stdout, one column per field of the result
    /// (nested fields as `drops.ring_full`, list items as `queues.0.packets`), after the
    /// command, configuration file, its SHA-256 and the build's commit.
    Csv {
        /// Files with `--json` output (other lines are passed over).
        files: Vec<PathBuf>,
    },
    /// Huge pages: status, and cleanup of files dead processes left behind.
    #[command(subcommand)]
    Hugepages(Hugepages),
    /// Capture what the bench_rx queues receive to files (the reference's pcap and GDS
    /// writer examples): one file per queue, written by a writer thread (through cuFile
    /// for queues in GPU memory); with --tx the bench_tx generators send verified traffic.
    Capture {
        /// YAML configuration.
        file: PathBuf,
        /// Output file (a directory for raw_per_packet); with several queues,
        /// `_INTERFACE_qID` is added before the extension.
        output: PathBuf,
        /// File format (default: from the output's extension, pcap or pcapng, else raw).
        #[arg(long, value_enum)]
        format: Option<CaptureFormatArg>,
        /// Also run the bench_tx generators (demonstration traffic).
        #[arg(long)]
        tx: bool,
        /// With --tx: pace the generators to this many Gb/s in all.
        #[arg(long, requires = "tx")]
        target_gbps: Option<f64>,
        /// Seconds to capture (SIGINT or SIGTERM ends it earlier, with a report).
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Send a pcap or pcapng capture on a TX queue: at its original gaps (the queue's
    /// interface needs `tx.accurate_send: true`), faster or slower with --speed, evenly
    /// with --pps, or --unpaced; --loops repeats it. Reports the send-time error (how
    /// late packets went against their times), which bounds the gap error. A socket queue
    /// sends each frame's UDP payload.
    Replay {
        /// YAML configuration.
        file: PathBuf,
        /// The capture (pcap or pcapng).
        capture: PathBuf,
        /// The TX queue's interface (default: the first with a TX queue).
        #[arg(long)]
        interface: Option<String>,
        /// The TX queue's id.
        #[arg(long, default_value_t = 0)]
        queue: u16,
        /// Speed-up of the capture's gaps (2 sends twice as fast).
        #[arg(long, conflicts_with_all = ["pps", "unpaced"])]
        speed: Option<f64>,
        /// Evenly at this many packets per second instead of the capture's gaps.
        #[arg(long, conflicts_with = "unpaced")]
        pps: Option<f64>,
        /// As fast as the queue takes them (no send times).
        #[arg(long)]
        unpaced: bool,
        /// Times through the capture.
        #[arg(long, default_value_t = 1)]
        loops: u32,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum Hugepages {
    /// hugetlbfs mounts, page sizes, free and total pages per NUMA node, and the files in
    /// the mounts with their owner state.
    Status,
    /// Remove our and DPDK's files (`dataplane_*`, `rtemap_*`, `*map_*`) that no live
    /// process holds, from every hugetlbfs mount; other files are never touched.
    Cleanup {
        /// Only say what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum Bench {
    /// Send verified UDP traffic from bench_tx through the data plane to bench_rx.
    Raw {
        /// YAML configuration.
        file: PathBuf,
        /// Seconds of traffic.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// Also verify every packet's UDP checksum (reads every byte).
        #[arg(long)]
        verify_payload: bool,
        /// What the generator writes per frame: `full` (ports, sequence trailer, UDP
        /// checksum) or `headers` (the 42-byte header only, as testpmd's txonly).
        #[arg(long, value_enum, default_value_t = TxWork::Full)]
        tx_work: TxWork,
        /// What the checker reads per frame: `full` (headers and trailer), `trailer`, or
        /// `count` (nothing, as testpmd's rxonly).
        #[arg(long, value_enum, default_value_t = RxWork::Full)]
        rx_work: RxWork,
        /// Time every stage (generator, TX and RX workers, checker) and report its busy
        /// nanoseconds per packet (two clock reads per burst per stage).
        #[arg(long)]
        stages: bool,
        /// Pace the generators' TX queues to this many Gb/s of frames in all (software
        /// pacing in the TX workers, as `pacing_mbps`).
        #[arg(long)]
        target_gbps: Option<f64>,
        /// Run generators and checkers to completion on the workers' cores (their queues
        /// become `delivery: handler`) instead of on threads of their own.
        #[arg(long)]
        inline: bool,
        /// No progress line and no human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
        /// Longest wait, after sending stopped, for packets still in the pipeline.
        #[arg(long, default_value_t = 10.0)]
        drain_seconds: f64,
        /// Also write the per-second series (rates, drops by reason, per queue) as CSV.
        #[arg(long, value_name = "FILE")]
        csv: Option<PathBuf>,
    },
    /// Forward what one interface receives out of another (or the same) interface, as
    /// testpmd's io and macswap modes: descriptors move from RX to TX, nothing is copied.
    Fwd {
        /// YAML configuration.
        file: PathBuf,
        /// Seconds of forwarding.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Swap source and destination MAC of every frame.
        #[arg(long)]
        mac_swap: bool,
        /// Interface to receive on (default: the first with RX queues).
        #[arg(long)]
        rx: Option<String>,
        /// Interface to send on (default: another with TX queues, else the RX one).
        #[arg(long)]
        tx: Option<String>,
        /// Bursts per TX queue sent before forwarding starts, built from bench_tx[0]
        /// (for a port that loops back to itself, like testpmd's --tx-first).
        #[arg(long, default_value_t = 0)]
        tx_first: usize,
        /// Cores of the forwarding threads, one per TX queue in use (comma separated).
        #[arg(long, value_delimiter = ',')]
        cores: Vec<u32>,
        /// Forward to completion on the workers' cores (the queues become `delivery:
        /// handler`; each RX queue and its TX queue on one cpu_core) instead of on
        /// forwarding threads.
        #[arg(long, conflicts_with = "cores")]
        inline: bool,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
    /// Flow rules added and removed under traffic in phases (isolated, first queue, second
    /// queue, RSS over both), every phase's counts checked; exits 0 only when each rule's
    /// packets reached exactly its queues and nothing went unaccounted.
    DynamicFlows {
        /// YAML configuration (bench_tx sends; bench_rx names the interface, isolated,
        /// with two RX queues and no static flows).
        file: PathBuf,
        /// Milliseconds of the isolated phase before the first rule.
        #[arg(long, default_value_t = 1000)]
        drop_ms: u64,
        /// Milliseconds of each phase with a rule.
        #[arg(long, default_value_t = 1000)]
        active_ms: u64,
        /// Milliseconds after the last rule is removed.
        #[arg(long, default_value_t = 200)]
        drain_ms: u64,
        /// Largest accepted |a - b| / (a + b) of the RSS phase's two queues.
        #[arg(long, default_value_t = 0.35)]
        tolerance: f64,
        /// Pace the generator's TX queue to this many Gb/s.
        #[arg(long)]
        target_gbps: Option<f64>,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
    /// RDMA SEND/RECV between rdma_bench_server and rdma_bench_client, every message
    /// verified; exits 0 only when every message completed and verified.
    #[cfg(feature = "rdma")]
    Rdma {
        /// YAML configuration.
        file: PathBuf,
        /// Run the server, the client, or both in this process.
        #[arg(long, value_enum)]
        mode: rdma_bench::Mode,
        /// Seconds each side sends for.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
        /// How long a client keeps retrying a server that refuses or cannot be reached
        /// (every `socket_config.retry_connect_s`, default 1 s).
        #[arg(long, default_value_t = 30.0)]
        connect_timeout: f64,
    },
    /// Kernel UDP or TCP between socket_bench_server and socket_bench_client, every
    /// received byte verified; exits 0 only when nothing was lost or wrong (3: lost or
    /// corrupt data, the report says whether the drop counters account for the losses).
    Socket {
        /// YAML configuration (udp:// or tcp:// interfaces).
        file: PathBuf,
        /// Run the server interfaces, the client interfaces, or both in this process.
        #[arg(long, value_enum)]
        mode: dataplane_bench::socket::Mode,
        /// Seconds each side sends for.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Pace each sending side to this many Gb/s of payload (its TX queues' pacing_mbps).
        #[arg(long)]
        target_gbps: Option<f64>,
        /// Bytes per message (default: the sections' message_size).
        #[arg(long)]
        message_size: Option<u64>,
        /// How long a sender waits for its peer before it gives up.
        #[arg(long, default_value_t = 10.0)]
        connect_timeout: f64,
        /// Bursts a sender keeps queued per TX queue at most (data in flight, kept small
        /// so that it stays in cache).
        #[arg(long, default_value_t = dataplane_bench::socket::QUEUED_BURSTS)]
        queued_bursts: usize,
        /// How much of every message is written and read: `full` (every byte written and
        /// checked), or `count` (iperf3's work, for comparing with it: TCP payloads neither
        /// written nor read, UDP only its 16-byte header, which still counts losses).
        #[arg(long, value_enum, default_value = "full")]
        work: dataplane_bench::socket::SocketWork,
        /// Time each queue's worker: busy nanoseconds per packet and share of the sending
        /// time.
        #[arg(long)]
        stages: bool,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
    /// SPEAD heaps over the UDP loopback (or the software loopback): the highest rate
    /// without a lost heap, found by a binary search as spead2's spead2_bench.py does
    /// (exit 3 when no rate was lossless).
    Spead {
        /// Payload bytes per heap.
        #[arg(long, default_value_t = 4 << 20)]
        heap_bytes: u32,
        /// Bytes per packet (SPEAD header, item pointers and payload: the UDP payload).
        #[arg(long, default_value_t = 9172)]
        packet_bytes: u32,
        /// Seconds each rate is sent for.
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// The first and highest rate tried, in Gb/s of heap payload.
        #[arg(long, default_value_t = 40.0)]
        max_gbps: f64,
        /// Halvings of the interval after the first rate.
        #[arg(long, default_value_t = 7)]
        steps: u32,
        /// UDP port on 127.0.0.1 for the receiver.
        #[arg(long, default_value_t = 8888)]
        port: u16,
        /// Where the chunks live: the heap, a host, pinned host or GPU region's buffers
        /// (`chunk_region`; GPU 0, filled by the GPU from pinned receive buffers).
        #[arg(long, value_enum, default_value_t = dataplane_bench::spead::ChunkMemory::Heap)]
        chunks: dataplane_bench::spead::ChunkMemory,
        /// What carries the packets: kernel UDP sockets over 127.0.0.1, or the data
        /// plane's software loopback (no socket in the way).
        #[arg(long, value_enum, default_value_t = dataplane_bench::spead::SpeadTransport::Udp)]
        transport: dataplane_bench::spead::SpeadTransport,
        /// Sending threads, each with a TX queue of its own, taking the next heap id as
        /// they start a heap (with `--transport loopback`; one core cutting heaps into
        /// packets is its first limit).
        #[arg(long, default_value_t = 1)]
        senders: u32,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
        /// No human report (the exit code, and `--json`, remain).
        #[arg(long, short)]
        quiet: bool,
    },
    /// GPU paths on GPU 0: staged ingest against a pinned host-to-device copy, the reorder
    /// kernel against a device-to-device copy.
    Gpu {
        /// Seconds per timed round of the staged-ingest cases (7 rounds each).
        #[arg(long, default_value_t = 0.3)]
        seconds: f64,
        /// Only these parts (repeat the flag; default: all). The pinned copy, their peer,
        /// is always measured.
        #[arg(long, value_enum)]
        only: Vec<GpuPart>,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
    },
    /// Ring microbenchmark: SPSC and MPMC, single and bulk 8/32/256.
    Ring {
        /// Items per producer and run.
        #[arg(long, default_value_t = 20_000_000)]
        items: u64,
        /// Repetitions per case (the median is reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Ring slots (DPDK's ring_perf_autotest uses 4096).
        #[arg(long, default_value_t = ring::DEFAULT_RING_SIZE)]
        ring_size: usize,
        /// Print one JSON object as the last line of stdout.
        #[arg(long)]
        json: bool,
    },
}

/// `dataplane capture --format`: the library's [`CaptureFormat`] as the command line spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CaptureFormatArg {
    /// Classic pcap, nanosecond resolution.
    Pcap,
    /// pcapng, one interface with nanosecond resolution.
    Pcapng,
    /// Packet bytes back to back in one file.
    Raw,
    /// One file per packet in a directory.
    RawPerPacket,
}

impl From<CaptureFormatArg> for CaptureFormat {
    fn from(f: CaptureFormatArg) -> Self {
        match f {
            CaptureFormatArg::Pcap => CaptureFormat::Pcap,
            CaptureFormatArg::Pcapng => CaptureFormat::Pcapng,
            CaptureFormatArg::Raw => CaptureFormat::Raw,
            CaptureFormatArg::RawPerPacket => CaptureFormat::RawPerPacket,
        }
    }
}

impl Command {
    /// The command as typed (`bench raw`) and the configuration file it runs on, for the
    /// JSON envelope.
    pub(crate) fn invocation(&self) -> (&'static str, Option<&Path>) {
        match self {
            Command::Validate { file, .. } => ("validate", Some(file)),
            Command::Doctor { file, .. } => ("doctor", file.as_deref()),
            Command::Plot { .. } => ("plot", None),
            Command::Csv { .. } => ("csv", None),
            Command::Hugepages(_) => ("hugepages", None),
            Command::Capture { file, .. } => ("capture", Some(file)),
            Command::Replay { file, .. } => ("replay", Some(file)),
            Command::Plan { file, .. } => ("plan", Some(file)),
            Command::Diff { file, .. } => ("diff", Some(file)),
            Command::Bench(b) => match b {
                Bench::Raw { file, .. } => ("bench raw", Some(file)),
                Bench::Fwd { file, .. } => ("bench fwd", Some(file)),
                Bench::DynamicFlows { file, .. } => ("bench dynamic-flows", Some(file)),
                #[cfg(feature = "rdma")]
                Bench::Rdma { file, .. } => ("bench rdma", Some(file)),
                Bench::Socket { file, .. } => ("bench socket", Some(file)),
                Bench::Spead { .. } => ("bench spead", None),
                Bench::Gpu { .. } => ("bench gpu", None),
                Bench::Ring { .. } => ("bench ring", None),
            },
        }
    }
}

/// A rate in bits per second: a number with an optional `k`, `M`, `G` or `T` and an
/// optional `b/s` or `bps`.
pub(crate) fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("b/s")
        .or_else(|| t.strip_suffix("bps"))
        .unwrap_or(t)
        .trim();
    let (number, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G') => (&t[..t.len() - 1], 1e9),
        Some('T') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * scale),
        _ => Err(format!(
            "`{text}` is not a rate: a positive number of bits per second, such as 10G or 800M"
        )),
    }
}

/// A duration in seconds: a number with `s`, `ms`, `us` or `ns`.
pub(crate) fn parse_duration_s(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ns") {
        (n, 1e-9)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, f64::NAN)
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && scale.is_finite() => Ok(v * scale),
        _ => Err(format!(
            "`{text}` is not a duration: a number with s, ms, us or ns, such as 10ms"
        )),
    }
}
