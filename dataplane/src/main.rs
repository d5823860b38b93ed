//! The `dataplane` command: validate configurations and run benchmarks.

use clap::{Parser, Subcommand};
use dataplane::bench::{raw, rdma as rdma_bench, ring};
use dataplane::config::{self, Config, Direction};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(Parser)]
#[command(
    name = "dataplane",
    version,
    about = "Kernel-bypass poll-mode data plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a configuration file and print a summary or every error.
    Validate {
        /// YAML configuration.
        file: PathBuf,
    },
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Bench),
    /// Huge pages: status, and cleanup of files dead processes left behind.
    #[command(subcommand)]
    Hugepages(Hugepages),
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
    },
    /// RDMA SEND/RECV between rdma_bench_server and rdma_bench_client, every message
    /// verified; exits 0 only when every message completed and verified.
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
    },
    /// GPU paths on GPU 0: staged ingest against a pinned host-to-device copy, the reorder
    /// kernel against a device-to-device copy.
    Gpu {
        /// Seconds per timed round of the staged-ingest cases (7 rounds each).
        #[arg(long, default_value_t = 0.3)]
        seconds: f64,
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DATAPLANE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { file } => validate(&file),
        Command::Hugepages(Hugepages::Status) => {
            print!("{}", dataplane::hugepages::status_text());
            ExitCode::SUCCESS
        }
        Command::Hugepages(Hugepages::Cleanup { dry_run }) => hugepages_cleanup(dry_run),
        Command::Bench(Bench::Raw {
            file,
            seconds,
            json,
            verify_payload,
        }) => bench_raw(&file, seconds, json, verify_payload),
        Command::Bench(Bench::Rdma {
            file,
            mode,
            seconds,
            json,
        }) => bench_rdma(&file, mode, seconds, json),
        Command::Bench(Bench::Gpu { seconds, json }) => bench_gpu(seconds, json),
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

fn hugepages_cleanup(dry_run: bool) -> ExitCode {
    use dataplane::hugepages;
    let verb = if dry_run { "Would remove" } else { "Removed" };
    for dir in hugepages::cleanup_dpdk_runtime_dirs(dry_run) {
        println!("{verb} leftover DPDK runtime directory {}", dir.display());
    }
    let mounts = hugepages::mounts();
    if mounts.is_empty() {
        println!("no hugetlbfs mounts: no hugepage files to clean");
        return ExitCode::SUCCESS;
    }
    let report = hugepages::cleanup(&mounts, dry_run);
    for line in report.lines(dry_run) {
        println!("{line}");
    }
    if report.removed.is_empty() && report.errors.is_empty() {
        println!("no leftover hugepage files");
    }
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
            Some(loaded.config)
        }
        Err(e) => {
            eprint!("{e}");
            None
        }
    }
}

fn validate(file: &Path) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    println!("{}: valid", file.display());
    println!(
        "  engine: {} (stream_type {:?}), master_core {}",
        c.engine.name(),
        c.stream_type,
        c.master_core
    );
    for iface in &c.interfaces {
        println!("  interface {} at {}", iface.name, iface.address);
        let rx = iface
            .rx
            .iter()
            .flat_map(|r| r.queues.iter().map(|q| (Direction::Rx, q)));
        let tx = iface
            .tx
            .iter()
            .flat_map(|t| t.queues.iter().map(|q| (Direction::Tx, q)));
        for (dir, q) in rx.chain(tx) {
            println!(
                "    {} queue {} `{}`: core {}, batch {}, timeout {} us, regions [{}]",
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
            println!(
                "    {} flow rule(s), flow_isolation {}",
                rx.flows.len(),
                rx.flow_isolation
            );
        }
    }
    println!("  worker cores: {:?}", c.worker_cores());
    let mut total = 0u64;
    for m in &c.memory_regions {
        let bytes = m.num_bufs as u64 * m.buf_size as u64;
        total += bytes;
        println!(
            "  memory {} ({}, affinity {}): {} x {} B = {:.1} MiB",
            m.name,
            m.kind.name(),
            m.affinity,
            m.num_bufs,
            m.buf_size,
            bytes as f64 / 1048576.0
        );
    }
    println!("  memory total: {:.1} MiB", total as f64 / 1048576.0);
    println!(
        "  bench: {} generator(s), {} checker(s)",
        c.bench.tx.len(),
        c.bench.rx.len()
    );
    ExitCode::SUCCESS
}

fn interrupt_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("warning: cannot handle signal {sig}: {e}");
        }
    }
    flag
}

fn bench_raw(file: &Path, seconds: f64, json: bool, verify_payload: bool) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::FAILURE;
    }
    let interrupted = interrupt_flag();
    let opts = raw::RawOptions {
        seconds,
        verify_payload,
        progress: true,
    };
    match raw::run(&c, &opts, &interrupted) {
        Ok(report) => {
            print_report(&report.human(), &report, json);
            if report.lossless {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench_rdma(file: &Path, mode: rdma_bench::Mode, seconds: f64, json: bool) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if !(seconds > 0.0 && seconds.is_finite()) {
        eprintln!("error: --seconds must be a positive number");
        return ExitCode::FAILURE;
    }
    let interrupted = interrupt_flag();
    match rdma_bench::run(&c, mode, seconds, &interrupted) {
        Ok(report) => {
            eprint!("{}", report.human());
            if json {
                println!(
                    "{}",
                    serde_json::to_string(&report).expect("report serialises")
                );
            }
            if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The human report on stderr, and on stdout either it again or one JSON line.
fn print_report(human: &str, report: &impl serde::Serialize, json: bool) {
    eprint!("{human}");
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("report serialises")
        );
    } else {
        print!("{human}");
    }
}

#[cfg(feature = "cuda")]
fn bench_gpu(seconds: f64, json: bool) -> ExitCode {
    match dataplane::bench::gpu::run(seconds) {
        Ok(report) => {
            print_report(&report.human(), &report, json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn bench_gpu(_seconds: f64, _json: bool) -> ExitCode {
    eprintln!("error: this build has no CUDA support; rebuild with --features cuda");
    ExitCode::FAILURE
}

fn bench_ring(opts: ring::RingBenchOptions, json: bool) -> ExitCode {
    if opts.ring_size < 256 || opts.ring_size > 1 << 30 {
        eprintln!("error: --ring-size must be between 256 and 2^30");
        return ExitCode::FAILURE;
    }
    let cases = ring::run(opts);
    eprintln!(
        "{:<20} {:>14} {:>10} {:>16}",
        "case", "M items/s", "ns/item", "enq+deq ns/item"
    );
    for c in &cases {
        eprintln!(
            "{:<20} {:>14.1} {:>10.2} {:>16.2}",
            c.case,
            c.items_per_s / 1e6,
            c.ns_per_item,
            c.enq_plus_deq_ns
        );
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "bench": "ring",
                "items": opts.items,
                "reps": opts.reps,
                "ring_size": opts.ring_size,
                "cases": cases
            })
        );
    }
    ExitCode::SUCCESS
}
