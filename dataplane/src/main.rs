//! The `dataplane` command: validate configurations and run benchmarks.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
#[cfg(feature = "rdma")]
use dataplane::bench::rdma as rdma_bench;
use dataplane::bench::traffic::{RxWork, TxWork};
use dataplane::bench::{fwd, raw, ring};
use dataplane::config::{self, Config, Direction};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Parser)]
#[command(
    name = "dataplane",
    version,
    about = "Kernel-bypass poll-mode data plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log line format on stderr: `text`, or `json` (one object per line, for log
    /// collectors).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Serve Prometheus / OpenMetrics metrics at http://ADDR/metrics while the plane runs
    /// (as the configuration's `metrics.listen`, which it overrides).
    #[arg(long, global = true, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
}

/// `--metrics`, applied to every configuration loaded.
static METRICS_LISTEN: std::sync::OnceLock<std::net::SocketAddr> = std::sync::OnceLock::new();

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable; colours only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

#[path = "cli/plot.rs"]
mod plot;

#[derive(Subcommand)]
enum Command {
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
    /// pages, cores, PCI devices, RDMA GIDs, GPU driver, socket and locked-memory limits.
    /// Each finding comes with the command that fixes it. Exit status 1 when something
    /// blocks a start, 2 when the configuration does not load.
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
        format: Option<dataplane::capture::CaptureFormat>,
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
}

#[derive(Subcommand)]
enum Hugepages {
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
enum Bench {
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
    /// received byte verified; exits 0 only when nothing was lost or wrong (2: lost or
    /// corrupt data, the report says whether the drop counters account for the losses).
    Socket {
        /// YAML configuration (udp:// or tcp:// interfaces).
        file: PathBuf,
        /// Run the server interfaces, the client interfaces, or both in this process.
        #[arg(long, value_enum)]
        mode: dataplane::bench::socket::Mode,
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
        #[arg(long, default_value_t = dataplane::bench::socket::QUEUED_BURSTS)]
        queued_bursts: usize,
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

/// The log subscriber: its level comes from `DATAPLANE_LOG` when set (an `EnvFilter`
/// directive such as `info` or `dataplane=debug`), else from the loaded configuration's
/// `log_level` (and `debug: true`), else `warn`.
mod logging {
    use super::LogFormat;
    use std::io::IsTerminal;
    use std::sync::OnceLock;
    use tracing_subscriber::{EnvFilter, Layer, Registry, layer::SubscriberExt, reload};

    /// The environment variable that overrides the configuration's level.
    pub const ENV: &str = "DATAPLANE_LOG";

    static LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

    fn from_env() -> Option<EnvFilter> {
        std::env::var_os(ENV)?;
        match EnvFilter::try_from_env(ENV) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("warning: {ENV} is not a valid filter ({e}); using the default");
                None
            }
        }
    }

    /// Installs the subscriber on stderr in `format`.
    pub fn init(format: LogFormat) {
        let (filter, handle) =
            reload::Layer::new(from_env().unwrap_or_else(|| EnvFilter::new("warn")));
        let output = match format {
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_writer(std::io::stderr)
                .boxed(),
            LogFormat::Text => tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .boxed(),
        };
        let subscriber = tracing_subscriber::registry().with(filter).with(output);
        if tracing::subscriber::set_global_default(subscriber).is_ok() {
            let _ = LEVEL.set(handle);
        }
    }

    /// Applies `config`'s `log_level` unless the environment variable set the level.
    pub fn apply_config(config: &dataplane::config::Config) {
        if std::env::var_os(ENV).is_some() {
            return;
        }
        let level = dataplane::config::tracing_level(&config.log_level, config.debug);
        if let Some(h) = LEVEL.get() {
            let _ = h.reload(EnvFilter::new(level));
        }
    }
}

/// SIGINT and SIGTERM, as flags the benches poll.
struct Signals {
    /// Set by either signal.
    any: Arc<AtomicBool>,
    /// Set by SIGINT.
    int: Arc<AtomicBool>,
    /// When set, a further signal ends the process at once (commands that do not poll).
    exit_at_once: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers; done first, so a signal at any later moment is seen.
    fn install() -> Self {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let s = Self {
            any: Arc::new(AtomicBool::new(false)),
            int: Arc::new(AtomicBool::new(false)),
            exit_at_once: Arc::new(AtomicBool::new(false)),
        };
        for (sig, status) in [(SIGINT, 130), (SIGTERM, 143)] {
            let r = signal_hook::flag::register_conditional_shutdown(
                sig,
                status,
                s.exit_at_once.clone(),
            )
            .and_then(|_| signal_hook::flag::register(sig, s.any.clone()));
            if let Err(e) = r {
                eprintln!("warning: cannot handle signal {sig}: {e}");
            }
        }
        if let Err(e) = signal_hook::flag::register(SIGINT, s.int.clone()) {
            eprintln!("warning: cannot handle signal {SIGINT}: {e}");
        }
        s
    }

    /// For commands that do not poll: a signal that already came ends the process now,
    /// later ones end it at once.
    fn default_behaviour(&self) {
        self.exit_at_once.store(true, Ordering::SeqCst);
        if self.any.load(Ordering::SeqCst) {
            std::process::exit(self.exit_status());
        }
    }

    fn interrupted(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// 130 after SIGINT, 143 after SIGTERM (128 + the signal's number).
    fn exit_status(&self) -> i32 {
        if self.int.load(Ordering::SeqCst) {
            130
        } else {
            143
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`| head -1`) ends the process quietly.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(141);
    }
}

fn main() -> ExitCode {
    let signals = Signals::install();
    let cli = Cli::parse();
    logging::init(cli.log_format);
    if let Some(addr) = cli.metrics {
        let _ = METRICS_LISTEN.set(addr);
    }
    if !bench_with_signals(&cli.command) {
        signals.default_behaviour();
    }
    match cli.command {
        Command::Validate { file, plan, json } => validate(&file, plan, json),
        Command::Hugepages(Hugepages::Status) => {
            emit(&dataplane::hugepages::status_text());
            ExitCode::SUCCESS
        }
        Command::Hugepages(Hugepages::Cleanup { dry_run }) => hugepages_cleanup(dry_run),
        Command::Doctor { file, json, root } => doctor(file.as_deref(), json, &root),
        Command::Plot { results, output } => {
            let runs: Result<Vec<_>, _> = results.iter().map(|p| plot::Run::read(p)).collect();
            match runs.and_then(|r| plot::plot(&r, &output)) {
                Ok(()) => {
                    emit(&format!("wrote {}\n", output.display()));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Bench(Bench::Raw {
            file,
            seconds,
            json,
            verify_payload,
            tx_work,
            rx_work,
            stages,
            target_gbps,
            quiet,
            drain_seconds,
            csv,
        }) => bench_raw(
            &file,
            seconds,
            drain_seconds,
            csv.as_deref(),
            Output { json, quiet },
            RawWork {
                verify_payload,
                tx: tx_work,
                rx: rx_work,
                stages,
                target_gbps,
            },
            &signals,
        ),
        Command::Bench(Bench::Fwd {
            file,
            seconds,
            mac_swap,
            rx,
            tx,
            tx_first,
            cores,
            json,
            quiet,
        }) => bench_fwd(
            &file,
            fwd::FwdOptions {
                seconds,
                mac_swap,
                rx_interface: rx,
                tx_interface: tx,
                tx_first,
                cores,
            },
            Output { json, quiet },
            &signals,
        ),
        Command::Capture {
            file,
            output,
            format,
            tx,
            target_gbps,
            seconds,
            json,
            quiet,
        } => capture(
            &file,
            &output,
            format,
            (tx, target_gbps),
            seconds,
            Output { json, quiet },
            &signals,
        ),
        Command::Bench(Bench::DynamicFlows {
            file,
            drop_ms,
            active_ms,
            drain_ms,
            tolerance,
            target_gbps,
            json,
            quiet,
        }) => bench_dynamic_flows(
            &file,
            dataplane::bench::dynamic::DynamicOptions {
                drop: std::time::Duration::from_millis(drop_ms),
                active: std::time::Duration::from_millis(active_ms),
                drain: std::time::Duration::from_millis(drain_ms),
                tolerance,
                target_gbps,
            },
            Output { json, quiet },
            &signals,
        ),
        #[cfg(feature = "rdma")]
        Command::Bench(Bench::Rdma {
            file,
            mode,
            seconds,
            json,
            quiet,
            connect_timeout,
        }) => bench_rdma(
            &file,
            mode,
            seconds,
            connect_timeout,
            Output { json, quiet },
            &signals,
        ),
        Command::Bench(Bench::Socket {
            file,
            mode,
            seconds,
            target_gbps,
            message_size,
            connect_timeout,
            queued_bursts,
            stages,
            json,
            quiet,
        }) => bench_socket(
            &file,
            dataplane::bench::socket::SocketBenchOptions {
                mode,
                seconds,
                target_gbps,
                message_size,
                connect_timeout: std::time::Duration::from_secs_f64(
                    connect_timeout.clamp(0.0, 3600.0),
                ),
                queued_bursts,
                time_stages: stages,
            },
            Output { json, quiet },
            &signals,
        ),
        Command::Bench(Bench::Gpu {
            seconds,
            only,
            json,
        }) => bench_gpu(seconds, &only, json),
        Command::Bench(Bench::Ring {
            items,
            reps,
            ring_size,
            json,
        }) => bench_ring(
            ring::RingBenchOptions {
                items,
                reps,
                ring_size,
            },
            json,
        ),
    }
}

fn doctor(file: Option<&Path>, json: bool, root: &Path) -> ExitCode {
    use dataplane::doctor;
    let config = match file {
        Some(f) => match load(f) {
            Some(c) => Some(c),
            None => return ExitCode::from(2),
        },
        None => None,
    };
    let findings = doctor::check(&doctor::Machine::at(root), config.as_ref());
    let status = doctor::exit_status(&findings);
    if json {
        emit(&format!(
            "{}\n",
            serde_json::json!({
                "root": root,
                "config": file,
                "blocking": status != 0,
                "findings": findings,
            })
        ));
    } else {
        let head = match file {
            Some(f) => format!("{} on {}\n", f.display(), root.display()),
            None => format!("machine-wide checks on {}\n", root.display()),
        };
        emit(&(head + &doctor::human(&findings)));
    }
    ExitCode::from(status)
}

fn hugepages_cleanup(dry_run: bool) -> ExitCode {
    use dataplane::hugepages;
    let verb = if dry_run { "Would remove" } else { "Removed" };
    let mut out = String::new();
    for dir in hugepages::cleanup_dpdk_runtime_dirs(dry_run) {
        out += &format!("{verb} leftover DPDK runtime directory {}\n", dir.display());
    }
    let mounts = hugepages::mounts();
    if mounts.is_empty() {
        out += "no hugetlbfs mounts: no hugepage files to clean\n";
        emit(&out);
        return ExitCode::SUCCESS;
    }
    let report = hugepages::cleanup(&mounts, dry_run);
    for line in report.lines(dry_run) {
        out += &format!("{line}\n");
    }
    if report.removed.is_empty() && report.errors.is_empty() {
        out += "no leftover hugepage files\n";
    }
    emit(&out);
    if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: {} leftover file(s) could not be removed (are you root?)",
            report.errors.len()
        );
        ExitCode::FAILURE
    }
}

fn load(file: &Path) -> Option<Config> {
    match config::load_file(file) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                eprintln!("{w}");
            }
            logging::apply_config(&loaded.config);
            let mut config = loaded.config;
            if let Some(addr) = METRICS_LISTEN.get() {
                config.metrics = Some(config::MetricsConfig {
                    listen: addr.to_string(),
                });
            }
            Some(config)
        }
        Err(e) => {
            eprint!("{e}");
            None
        }
    }
}

/// The configuration, when `--seconds` is a positive number and the file loads (errors
/// printed).
fn load_for(file: &Path, seconds: f64) -> Option<Config> {
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return None;
    }
    load(file)
}

fn validate(file: &Path, with_plan: bool, json: bool) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if with_plan {
        return match dataplane::plan::Plan::from_config(&c) {
            Ok(plan) if json => {
                emit(&format!(
                    "{}\n",
                    serde_json::to_string(&plan).expect("a plan serialises")
                ));
                ExitCode::SUCCESS
            }
            Ok(plan) => {
                emit(&format!("{}: valid\n{}", file.display(), plan.human()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                ExitCode::FAILURE
            }
        };
    }
    let mut out = format!("{}: valid\n", file.display());
    out += &format!(
        "  engine: {} (stream_type {:?}), master_core {}\n",
        c.engine.name(),
        c.stream_type,
        c.master_core
    );
    for iface in &c.interfaces {
        out += &format!("  interface {} at {}\n", iface.name, iface.address);
        let rx = iface
            .rx
            .iter()
            .flat_map(|r| r.queues.iter().map(|q| (Direction::Rx, q)));
        let tx = iface
            .tx
            .iter()
            .flat_map(|t| t.queues.iter().map(|q| (Direction::Tx, q)));
        for (dir, q) in rx.chain(tx) {
            out += &format!(
                "    {} queue {} `{}`: core {}, batch {}, timeout {} us, regions [{}]\n",
                dir.name(),
                q.id,
                q.name,
                q.cpu_core,
                q.batch_size,
                q.timeout_us,
                q.memory_regions.join(", ")
            );
        }
        if let Some(rx) = &iface.rx
            && !rx.flows.is_empty()
        {
            out += &format!(
                "    {} flow rule(s), flow_isolation {}\n",
                rx.flows.len(),
                rx.flow_isolation
            );
        }
        if let Some(f) = &iface.faults {
            out += &format!(
                "    fault injection: {} rule(s), seed {}\n",
                f.rules.len(),
                f.seed
            );
        }
    }
    out += &format!("  worker cores: {:?}\n", c.worker_cores());
    let mut total = 0u64;
    for m in &c.memory_regions {
        let bytes = m.num_bufs as u64 * m.buf_size as u64;
        total += bytes;
        out += &format!(
            "  memory {} ({}, affinity {}): {} x {} B = {:.1} MiB\n",
            m.name,
            m.kind.name(),
            m.gpu_uuid.clone().unwrap_or_else(|| m.affinity.to_string()),
            m.num_bufs,
            m.buf_size,
            bytes as f64 / 1048576.0
        );
    }
    out += &format!("  memory total: {:.1} MiB\n", total as f64 / 1048576.0);
    out += &format!(
        "  bench: {} generator(s), {} checker(s)\n",
        c.bench.tx.len(),
        c.bench.rx.len()
    );
    emit(&out);
    ExitCode::SUCCESS
}

/// How a bench prints its result.
#[derive(Clone, Copy)]
struct Output {
    /// One JSON object as the last line of stdout.
    json: bool,
    /// No human report, no progress line.
    quiet: bool,
}

/// Which `bench` command a configuration belongs to, when it is not `expected`.
fn wrong_bench(file: &Path, c: &Config, expected: &str) -> Option<String> {
    use dataplane::config::EngineKind;
    let f = file.display();
    match (c.engine, expected) {
        (EngineKind::Rdma, "raw") => Some(format!(
            "{f} is an RDMA configuration (roce:// interfaces): run `dataplane bench rdma {f} --mode both` (or --mode server / client)"
        )),
        (EngineKind::Socket, "socket") => None,
        (EngineKind::Socket, _) => Some(format!(
            "{f} is a kernel socket configuration (tcp:// or udp:// interfaces): run `dataplane bench socket {f} --mode both` (or --mode server / client)"
        )),
        (EngineKind::Rdma, "socket") => Some(format!(
            "{f} is an RDMA configuration (roce:// interfaces): run `dataplane bench rdma {f} --mode both`"
        )),
        (EngineKind::Loopback | EngineKind::Dpdk | EngineKind::Ibverbs, "socket") => Some(format!(
            "{f} is a raw configuration (engine {}): run `dataplane bench raw {f}`",
            c.engine.name()
        )),
        (EngineKind::Loopback | EngineKind::Dpdk | EngineKind::Ibverbs, "rdma") => Some(format!(
            "{f} is a raw configuration (engine {}): run `dataplane bench raw {f}`",
            c.engine.name()
        )),
        _ => None,
    }
}

/// Exit status of a finished bench: 130 or 143 after a signal, else by the verdict.
fn bench_exit(signals: &Signals, status: u8) -> ExitCode {
    if signals.interrupted() {
        ExitCode::from(signals.exit_status() as u8)
    } else {
        ExitCode::from(status)
    }
}

/// What `bench raw` does per frame.
struct RawWork {
    verify_payload: bool,
    tx: TxWork,
    rx: RxWork,
    stages: bool,
    target_gbps: Option<f64>,
}

fn bench_raw(
    file: &Path,
    seconds: f64,
    drain_seconds: f64,
    csv: Option<&Path>,
    output: Output,
    work: RawWork,
    signals: &Signals,
) -> ExitCode {
    let Some(c) = load_for(file, seconds) else {
        return ExitCode::FAILURE;
    };
    if work
        .target_gbps
        .is_some_and(|g| !(g > 0.0 && g.is_finite()))
    {
        eprintln!("error: --target-gbps must be a positive number");
        return ExitCode::FAILURE;
    }
    if !(drain_seconds >= 0.0 && drain_seconds.is_finite()) {
        eprintln!("error: --drain-seconds must be zero or a positive number");
        return ExitCode::FAILURE;
    }
    if let Some(why) = wrong_bench(file, &c, "raw") {
        eprintln!("error: {why}");
        return ExitCode::FAILURE;
    }
    let opts = raw::RawOptions {
        verify_payload: work.verify_payload,
        tx_work: work.tx,
        rx_work: work.rx,
        time_stages: work.stages,
        target_gbps: work.target_gbps,
        progress: !output.quiet && std::io::stderr().is_terminal(),
        drain_deadline: std::time::Duration::from_secs_f64(drain_seconds),
        ..raw::RawOptions::new(seconds)
    };
    let result = raw::run(&c, &opts, &signals.any);
    if let (Some(path), Ok(report)) = (csv, &result)
        && let Err(e) = dataplane::files::write_new(
            path,
            dataplane::stats::series_csv(&report.series).as_bytes(),
        )
    {
        eprintln!("error: writing {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    finish_bench(
        result,
        raw::RawReport::human,
        |r| match r.verdict {
            raw::Verdict::Lossless => 0,
            raw::Verdict::NotLossless => 2,
            raw::Verdict::Inconclusive => 3,
        },
        output,
        signals,
    )
}

fn bench_fwd(file: &Path, opts: fwd::FwdOptions, output: Output, signals: &Signals) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if !(opts.seconds > 0.0 && opts.seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::FAILURE;
    }
    if let Some(why) = wrong_bench(file, &c, "raw") {
        eprintln!("error: {why}");
        return ExitCode::FAILURE;
    }
    finish_bench(
        fwd::run(&c, &opts, &signals.any),
        fwd::FwdReport::human,
        |r| if r.problems.is_empty() { 0 } else { 2 },
        output,
        signals,
    )
}

fn capture(
    file: &Path,
    output: &Path,
    format: Option<dataplane::capture::CaptureFormat>,
    (tx, target_gbps): (bool, Option<f64>),
    seconds: f64,
    out: Output,
    signals: &Signals,
) -> ExitCode {
    use dataplane::capture::CaptureFormat;
    let Some(c) = load_for(file, seconds) else {
        return ExitCode::FAILURE;
    };
    if c.bench.rx.is_empty() {
        eprintln!(
            "error: {}: capture reads the queues of bench_rx, and it has none",
            file.display()
        );
        return ExitCode::FAILURE;
    }
    let format = format.unwrap_or(match output.extension().and_then(|e| e.to_str()) {
        Some("pcap") => CaptureFormat::Pcap,
        Some("pcapng") => CaptureFormat::Pcapng,
        _ => CaptureFormat::Raw,
    });
    let c = dataplane::capture::capture_bench_rx(&c, output, format, tx);
    if target_gbps.is_some_and(|g| !(g > 0.0 && g.is_finite())) {
        eprintln!("error: --target-gbps must be a positive number");
        return ExitCode::FAILURE;
    }
    let opts = raw::RawOptions {
        progress: !out.quiet && std::io::stderr().is_terminal(),
        target_gbps,
        ..raw::RawOptions::new(seconds)
    };
    finish_bench(
        raw::run(&c, &opts, &signals.any),
        raw::RawReport::human,
        |r| {
            let failed = r.captures.iter().any(|k| k.error.is_some())
                || (tx && r.verdict != raw::Verdict::Lossless);
            if failed { 2 } else { 0 }
        },
        out,
        signals,
    )
}

fn bench_dynamic_flows(
    file: &Path,
    opts: dataplane::bench::dynamic::DynamicOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if !(opts.tolerance >= 0.0 && opts.tolerance.is_finite()) {
        eprintln!("error: --tolerance must be zero or a positive number");
        return ExitCode::FAILURE;
    }
    if let Some(why) = wrong_bench(file, &c, "raw") {
        eprintln!("error: {why}");
        return ExitCode::FAILURE;
    }
    finish_bench(
        dataplane::bench::dynamic::run(&c, &opts, &signals.any),
        dataplane::bench::dynamic::DynamicReport::human,
        |r| if r.ok { 0 } else { 2 },
        output,
        signals,
    )
}

/// Benchmarks that handle SIGINT/SIGTERM themselves (they stop, report and exit 130/143).
fn bench_with_signals(command: &Command) -> bool {
    match command {
        Command::Bench(
            Bench::Raw { .. }
            | Bench::Fwd { .. }
            | Bench::Socket { .. }
            | Bench::DynamicFlows { .. },
        ) => true,
        Command::Capture { .. } => true,
        #[cfg(feature = "rdma")]
        Command::Bench(Bench::Rdma { .. }) => true,
        _ => false,
    }
}

#[cfg(feature = "rdma")]
fn bench_rdma(
    file: &Path,
    mode: rdma_bench::Mode,
    seconds: f64,
    connect_timeout: f64,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !(connect_timeout >= 0.0 && connect_timeout.is_finite()) {
        eprintln!("error: --connect-timeout must be zero or a positive number");
        return ExitCode::FAILURE;
    }
    let Some(c) = load_for(file, seconds) else {
        return ExitCode::FAILURE;
    };
    if let Some(why) = wrong_bench(file, &c, "rdma") {
        eprintln!("error: {why}");
        return ExitCode::FAILURE;
    }
    let budget = std::time::Duration::from_secs_f64(connect_timeout);
    match rdma_bench::run(&c, mode, seconds, budget, &signals.any) {
        Ok(report) => {
            print_report(&report.human(), &report, output);
            bench_exit(signals, if report.ok() { 0 } else { 2 })
        }
        Err(e) => {
            eprintln!("error: {e}");
            bench_exit(signals, 1)
        }
    }
}

fn bench_socket(
    file: &Path,
    opts: dataplane::bench::socket::SocketBenchOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if !(opts.seconds > 0.0 && opts.seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::FAILURE;
    }
    if opts
        .target_gbps
        .is_some_and(|g| !(g > 0.0 && g.is_finite()))
    {
        eprintln!("error: --target-gbps must be a positive number");
        return ExitCode::FAILURE;
    }
    if let Some(why) = wrong_bench(file, &c, "socket") {
        eprintln!("error: {why}");
        return ExitCode::FAILURE;
    }
    match dataplane::bench::socket::run(&c, &opts, &signals.any) {
        Ok(report) => {
            print_report(&report.human(), &report, output);
            bench_exit(signals, if report.ok() { 0 } else { 2 })
        }
        Err(e) => {
            eprintln!("error: {e}");
            bench_exit(signals, 1)
        }
    }
}

/// The human report once on stdout (unless quiet), then the JSON line when asked for.
/// Prints a bench's report and gives its exit status (the `status` it asks for, or
/// 130/143 after a signal), or prints its error and fails.
fn finish_bench<R: serde::Serialize, E: std::fmt::Display>(
    result: Result<R, E>,
    human: impl Fn(&R) -> String,
    status: impl Fn(&R) -> u8,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    match result {
        Ok(report) => {
            print_report(&human(&report), &report, output);
            bench_exit(signals, status(&report))
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn print_report(human: &str, report: &impl serde::Serialize, output: Output) {
    let mut out = String::new();
    if !output.quiet {
        out += human;
    }
    if output.json {
        out += &serde_json::to_string(report).expect("report serialises");
        out.push('\n');
    }
    emit(&out);
}

/// A part of `bench gpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GpuPart {
    /// Back-to-back copies of one burst's bytes.
    Copies,
    /// Staged ingest.
    Stage,
    /// The reorder kernel.
    Reorder,
}

#[cfg(feature = "cuda")]
fn bench_gpu(seconds: f64, only: &[GpuPart], json: bool) -> ExitCode {
    let wants = |p| only.is_empty() || only.contains(&p);
    let parts = dataplane::bench::gpu::GpuParts {
        copies: wants(GpuPart::Copies),
        stage: wants(GpuPart::Stage),
        reorder: wants(GpuPart::Reorder),
    };
    // Each case's line on stderr as it is measured: a run cut short still says something.
    let mut progress = |line: &str| eprintln!("{line}");
    match dataplane::bench::gpu::run(seconds, parts, &mut progress) {
        Ok(report) => {
            print_report(&report.human(), &report, Output { json, quiet: false });
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn bench_gpu(_seconds: f64, _only: &[GpuPart], _json: bool) -> ExitCode {
    eprintln!("error: this build has no CUDA support; rebuild with --features cuda");
    ExitCode::FAILURE
}

fn bench_ring(opts: ring::RingBenchOptions, json: bool) -> ExitCode {
    if opts.ring_size < 256 || opts.ring_size > 1 << 30 {
        eprintln!("error: --ring-size must be between 256 and 2^30");
        return ExitCode::FAILURE;
    }
    emit(&format!(
        "{:<20} {:>14} {:>10} {:>16}\n",
        "case", "M items/s", "ns/item", "enq+deq ns/item"
    ));
    let cases = ring::run(opts, |c| {
        emit(&format!(
            "{:<20} {:>14.1} {:>10.2} {:>16.2}\n",
            c.case,
            c.items_per_s / 1e6,
            c.ns_per_item,
            c.enq_plus_deq_ns
        ))
    });
    if json {
        emit(&format!(
            "{}\n",
            serde_json::json!({
                "bench": "ring",
                "items": opts.items,
                "reps": opts.reps,
                "ring_size": opts.ring_size,
                "cases": cases
            })
        ));
    }
    ExitCode::SUCCESS
}
