//! `dataplane bench …` and `dataplane capture`: each bench run from its configuration,
//! its report printed for people or as a JSON line, and its exit status.

use super::*;

/// How a bench prints its result.
#[derive(Clone, Copy)]
pub(crate) struct Output {
    /// One JSON object as the last line of stdout.
    pub(crate) json: bool,
    /// No human report, no progress line.
    pub(crate) quiet: bool,
}

/// Which `bench` command a configuration belongs to, when it is not `expected`.
pub(crate) fn wrong_bench(file: &Path, c: &Config, expected: &str) -> Option<String> {
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
pub(crate) fn bench_exit(signals: &Signals, status: u8) -> ExitCode {
    if signals.interrupted() {
        ExitCode::from(signals.exit_status() as u8)
    } else {
        ExitCode::from(status)
    }
}

/// The status of a verdict: success, or failed.
pub(crate) fn verdict(ok: bool) -> u8 {
    if ok { status::SUCCESS } else { status::FAILED }
}

/// What `bench raw` does per frame.
pub(crate) struct RawWork {
    pub(crate) verify_payload: bool,
    pub(crate) tx: TxWork,
    pub(crate) rx: RxWork,
    pub(crate) stages: bool,
    pub(crate) target_gbps: Option<f64>,
    pub(crate) inline: bool,
}

/// Checks a number flag: positive (or zero, when `zero_ok`) and finite; prints the error.
pub(crate) fn number_ok(flag: &str, value: f64, zero_ok: bool) -> bool {
    let ok = value.is_finite() && (value > 0.0 || (zero_ok && value == 0.0));
    if !ok {
        let what = if zero_ok {
            "zero or a positive number"
        } else {
            "a positive number"
        };
        eprintln!("error: --{flag} must be {what}");
    }
    ok
}

/// The configuration of a `bench KIND` run: `file` loaded, and one that bench runs (the
/// errors printed otherwise).
pub(crate) fn bench_config(file: &Path, kind: &str) -> Option<Config> {
    let c = load(file)?;
    if let Some(why) = wrong_bench(file, &c, kind) {
        eprintln!("error: {why}");
        return None;
    }
    Some(c)
}

pub(crate) fn bench_raw(
    file: &Path,
    seconds: f64,
    drain_seconds: f64,
    csv: Option<&Path>,
    output: Output,
    work: RawWork,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("seconds", seconds, false)
        || !work
            .target_gbps
            .is_none_or(|g| number_ok("target-gbps", g, false))
        || !number_ok("drain-seconds", drain_seconds, true)
    {
        return ExitCode::FAILURE;
    }
    let Some(c) = bench_config(file, "raw") else {
        return ExitCode::FAILURE;
    };
    let opts = raw::RawOptions {
        verify_payload: work.verify_payload,
        tx_work: work.tx,
        rx_work: work.rx,
        time_stages: work.stages,
        target_gbps: work.target_gbps,
        progress: !output.quiet && std::io::stderr().is_terminal(),
        drain_deadline: std::time::Duration::from_secs_f64(drain_seconds),
        inline: work.inline,
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
            raw::Verdict::Lossless => status::SUCCESS,
            raw::Verdict::NotLossless => status::FAILED,
            raw::Verdict::Inconclusive => status::INCONCLUSIVE,
        },
        output,
        signals,
    )
}

pub(crate) fn bench_fwd(
    file: &Path,
    opts: fwd::FwdOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("seconds", opts.seconds, false) {
        return ExitCode::FAILURE;
    }
    let Some(c) = bench_config(file, "raw") else {
        return ExitCode::FAILURE;
    };
    let progress = crate::progress::Progress::start("bench fwd", opts.seconds, output.quiet);
    let result = fwd::run(&c, &opts, &signals.any);
    drop(progress);
    finish_bench(
        result,
        fwd::FwdReport::human,
        |r| verdict(r.problems.is_empty()),
        output,
        signals,
    )
}

pub(crate) fn capture(
    file: &Path,
    output: &Path,
    format: Option<CaptureFormatArg>,
    (tx, target_gbps): (bool, Option<f64>),
    seconds: f64,
    out: Output,
    signals: &Signals,
) -> ExitCode {
    use dataplane::capture::CaptureFormat;
    if !number_ok("seconds", seconds, false) {
        return ExitCode::FAILURE;
    }
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if c.bench.rx.is_empty() {
        eprintln!(
            "error: {}: capture reads the queues of bench_rx, and it has none",
            file.display()
        );
        return ExitCode::FAILURE;
    }
    let format = format.map(CaptureFormat::from).unwrap_or(
        match output.extension().and_then(|e| e.to_str()) {
            Some("pcap") => CaptureFormat::Pcap,
            Some("pcapng") => CaptureFormat::Pcapng,
            _ => CaptureFormat::Raw,
        },
    );
    let c = dataplane::capture::capture_bench_rx(&c, output, format, tx);
    if !target_gbps.is_none_or(|g| number_ok("target-gbps", g, false)) {
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

pub(crate) fn bench_dynamic_flows(
    file: &Path,
    opts: dataplane_bench::dynamic::DynamicOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("tolerance", opts.tolerance, true) {
        return ExitCode::FAILURE;
    }
    let Some(c) = bench_config(file, "raw") else {
        return ExitCode::FAILURE;
    };
    finish_bench(
        dataplane_bench::dynamic::run(&c, &opts, &signals.any),
        dataplane_bench::dynamic::DynamicReport::human,
        |r| verdict(r.ok),
        output,
        signals,
    )
}

/// Benchmarks that handle SIGINT/SIGTERM themselves (they stop, report and exit 130/143).
pub(crate) fn bench_with_signals(command: &Command) -> bool {
    match command {
        Command::Bench(
            Bench::Raw { .. }
            | Bench::Fwd { .. }
            | Bench::Socket { .. }
            | Bench::Spead { .. }
            | Bench::DynamicFlows { .. },
        ) => true,
        Command::Capture { .. } | Command::Replay { .. } => true,
        #[cfg(feature = "rdma")]
        Command::Bench(Bench::Rdma { .. }) => true,
        _ => false,
    }
}

#[cfg(feature = "rdma")]
pub(crate) fn bench_rdma(
    file: &Path,
    mode: rdma_bench::Mode,
    seconds: f64,
    connect_timeout: f64,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("connect-timeout", connect_timeout, true) || !number_ok("seconds", seconds, false)
    {
        return ExitCode::FAILURE;
    }
    let Some(c) = bench_config(file, "rdma") else {
        return ExitCode::FAILURE;
    };
    let budget = std::time::Duration::from_secs_f64(connect_timeout);
    let progress = crate::progress::Progress::start("bench rdma", seconds, output.quiet);
    let result = rdma_bench::run(&c, mode, seconds, budget, &signals.any);
    drop(progress);
    finish_bench(result, |r| r.human(), |r| verdict(r.ok()), output, signals)
}

pub(crate) fn bench_socket(
    file: &Path,
    opts: dataplane_bench::socket::SocketBenchOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("seconds", opts.seconds, false)
        || !opts
            .target_gbps
            .is_none_or(|g| number_ok("target-gbps", g, false))
    {
        return ExitCode::FAILURE;
    }
    let Some(c) = bench_config(file, "socket") else {
        return ExitCode::FAILURE;
    };
    let progress = crate::progress::Progress::start("bench socket", opts.seconds, output.quiet);
    let result = dataplane_bench::socket::run(&c, &opts, &signals.any);
    drop(progress);
    finish_bench(result, |r| r.human(), |r| verdict(r.ok()), output, signals)
}

pub(crate) fn bench_spead(
    opts: dataplane_bench::spead::SpeadBenchOptions,
    output: Output,
    signals: &Signals,
) -> ExitCode {
    if !number_ok("seconds", opts.seconds, false) || !number_ok("max-gbps", opts.max_gbps, false) {
        return ExitCode::FAILURE;
    }
    let total = opts.seconds * f64::from(opts.steps + 1);
    let progress = crate::progress::Progress::start("bench spead", total, output.quiet);
    let result = dataplane_bench::spead::run(&opts, &signals.any);
    drop(progress);
    finish_bench(result, |r| r.human(), |r| verdict(r.ok()), output, signals)
}

/// Prints a bench's report and gives its exit status (the `status` it asks for, or
/// 130/143 after a signal), or prints its error and fails.
pub(crate) fn finish_bench<R: serde::Serialize, E: std::fmt::Display>(
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
            bench_exit(signals, status::ERROR)
        }
    }
}

/// The human report once on stdout (unless quiet), then the JSON line when asked for.
pub(crate) fn print_report(human: &str, report: &impl serde::Serialize, output: Output) {
    let mut out = String::new();
    if !output.quiet {
        out += human;
    }
    if output.json {
        out += &crate::envelope::wrap_report(report);
    }
    emit(&out);
}

/// A part of `bench gpu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GpuPart {
    /// Back-to-back copies of one burst's bytes.
    Copies,
    /// Staged ingest.
    Stage,
    /// The reorder kernel.
    Reorder,
}

#[cfg(feature = "cuda")]
pub(crate) fn bench_gpu(seconds: f64, only: &[GpuPart], json: bool) -> ExitCode {
    let wants = |p| only.is_empty() || only.contains(&p);
    let parts = dataplane_bench::gpu::GpuParts {
        copies: wants(GpuPart::Copies),
        stage: wants(GpuPart::Stage),
        reorder: wants(GpuPart::Reorder),
    };
    // Each case's line on stderr as it is measured: a run cut short still says something.
    let mut progress = |line: &str| eprintln!("{line}");
    match dataplane_bench::gpu::run(seconds, parts, &mut progress) {
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
pub(crate) fn bench_gpu(_seconds: f64, _only: &[GpuPart], _json: bool) -> ExitCode {
    eprintln!("error: this build has no CUDA support; rebuild with --features cuda");
    ExitCode::FAILURE
}

pub(crate) fn bench_ring(opts: ring::RingBenchOptions, json: bool) -> ExitCode {
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
        emit(&crate::envelope::wrap(serde_json::json!({
            "bench": "ring",
            "items": opts.items,
            "reps": opts.reps,
            "ring_size": opts.ring_size,
            "cases": cases
        })));
    }
    ExitCode::SUCCESS
}
