//! The `dataplane` command: validate configurations and run benchmarks.

#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};
use dataplane::config::{self, Config, Direction};
#[cfg(feature = "rdma")]
use dataplane_bench::rdma as rdma_bench;
use dataplane_bench::traffic::{RxWork, TxWork};
use dataplane_bench::{fwd, raw, ring};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod args;

mod bench;
mod csv_out;
mod envelope;

mod logging;
mod progress;
mod replay;

mod signals;

mod status;

use args::*;
use bench::*;
use signals::Signals;

mod plot;

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
    #[cfg(feature = "otlp")]
    if let Some(endpoint) = cli.otlp.clone() {
        let _ = OTLP_ENDPOINT.set(endpoint);
    }
    let (command, config) = cli.command.invocation();
    envelope::set(command, config);
    if !bench_with_signals(&cli.command) {
        signals.default_behaviour();
    }
    match cli.command {
        Command::Validate { file, plan, json } => validate(&file, plan, json),
        Command::Diff {
            running,
            file,
            json,
        } => diff(&running, &file, json),
        Command::Plan {
            file,
            rate,
            packet_size,
            headroom,
            json,
        } => loss_budget(&file, rate, packet_size, headroom, json),
        Command::Hugepages(Hugepages::Status) => {
            emit(&dataplane::hugepages::status_text());
            ExitCode::SUCCESS
        }
        Command::Hugepages(Hugepages::Cleanup { dry_run }) => hugepages_cleanup(dry_run),
        Command::Doctor { file, json, root } => doctor(file.as_deref(), json, &root),
        Command::Plot { results, output } => plot_results(&results, &output),
        Command::Csv { files } => csv_out::write_results(&files),
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
        Command::Replay {
            file,
            capture,
            interface,
            queue,
            speed,
            pps,
            unpaced,
            loops,
            json,
            quiet,
        } => replay::run(
            &file,
            &capture,
            (interface.as_deref(), queue),
            replay::pace(speed, pps, unpaced),
            loops,
            Output { json, quiet },
            &signals,
        ),
        Command::Bench(bench) => run_bench(bench, &signals),
    }
}

/// Runs `dataplane bench ...`: one arm per bench, its flags into its options.
fn run_bench(bench: Bench, signals: &Signals) -> ExitCode {
    match bench {
        Bench::Raw {
            file,
            seconds,
            json,
            verify_payload,
            tx_work,
            rx_work,
            stages,
            target_gbps,
            inline,
            quiet,
            drain_seconds,
            csv,
        } => bench_raw(
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
                inline,
            },
            signals,
        ),
        Bench::Fwd {
            file,
            seconds,
            mac_swap,
            rx,
            tx,
            tx_first,
            cores,
            inline,
            json,
            quiet,
        } => bench_fwd(
            &file,
            fwd::FwdOptions {
                seconds,
                mac_swap,
                rx_interface: rx,
                tx_interface: tx,
                tx_first,
                cores,
                inline,
            },
            Output { json, quiet },
            signals,
        ),
        Bench::DynamicFlows {
            file,
            drop_ms,
            active_ms,
            drain_ms,
            tolerance,
            target_gbps,
            json,
            quiet,
        } => bench_dynamic_flows(
            &file,
            dataplane_bench::dynamic::DynamicOptions {
                drop: std::time::Duration::from_millis(drop_ms),
                active: std::time::Duration::from_millis(active_ms),
                drain: std::time::Duration::from_millis(drain_ms),
                tolerance,
                target_gbps,
            },
            Output { json, quiet },
            signals,
        ),
        #[cfg(feature = "rdma")]
        Bench::Rdma {
            file,
            mode,
            seconds,
            json,
            quiet,
            connect_timeout,
        } => bench_rdma(
            &file,
            mode,
            seconds,
            connect_timeout,
            Output { json, quiet },
            signals,
        ),
        Bench::Socket {
            file,
            mode,
            seconds,
            target_gbps,
            message_size,
            connect_timeout,
            queued_bursts,
            work,
            stages,
            json,
            quiet,
        } => bench_socket(
            &file,
            dataplane_bench::socket::SocketBenchOptions {
                mode,
                seconds,
                target_gbps,
                message_size,
                connect_timeout: std::time::Duration::from_secs_f64(
                    connect_timeout.clamp(0.0, 3600.0),
                ),
                queued_bursts,
                time_stages: stages,
                work,
            },
            Output { json, quiet },
            signals,
        ),
        Bench::Spead {
            heap_bytes,
            packet_bytes,
            seconds,
            max_gbps,
            steps,
            port,
            chunks,
            transport,
            senders,
            json,
            quiet,
        } => bench_spead(
            dataplane_bench::spead::SpeadBenchOptions {
                heap_bytes,
                packet_bytes,
                seconds,
                max_gbps,
                steps,
                port,
                chunks,
                transport,
                senders,
            },
            Output { json, quiet },
            signals,
        ),
        Bench::Gpu {
            seconds,
            only,
            json,
        } => bench_gpu(seconds, &only, json),
        Bench::Ring {
            items,
            reps,
            ring_size,
            json,
        } => bench_ring(
            ring::RingBenchOptions {
                items,
                reps,
                ring_size,
            },
            json,
        ),
    }
}

/// `dataplane plot`: reads the results and draws them into `output`.
fn plot_results(results: &[PathBuf], output: &Path) -> ExitCode {
    let runs: Result<Vec<_>, _> = results.iter().map(|p| plot::Run::read(p)).collect();
    match runs.and_then(|r| plot::plot(&r, output)) {
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

fn doctor(file: Option<&Path>, json: bool, root: &Path) -> ExitCode {
    use dataplane::doctor;
    let config = match file {
        Some(f) => match load(f) {
            Some(c) => Some(c),
            None => return ExitCode::from(status::ERROR),
        },
        None => None,
    };
    let findings = doctor::check(&doctor::Machine::at(root), config.as_ref());
    let blocking = doctor::exit_status(&findings) != 0;
    if json {
        emit(&envelope::wrap(serde_json::json!({
            "root": root,
            "blocking": blocking,
            "findings": findings,
        })));
    } else {
        let head = match file {
            Some(f) => format!("{} on {}\n", f.display(), root.display()),
            None => format!("machine-wide checks on {}\n", root.display()),
        };
        emit(&(head + &doctor::human(&findings)));
    }
    ExitCode::from(if blocking {
        status::FAILED
    } else {
        status::SUCCESS
    })
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
                config.metrics.get_or_insert_with(Default::default).listen = Some(addr.to_string());
            }
            if let Some(endpoint) = OTLP_ENDPOINT.get() {
                config
                    .metrics
                    .get_or_insert_with(Default::default)
                    .otlp_endpoint = Some(endpoint.clone());
            }
            Some(config)
        }
        Err(e) => {
            eprint!("{e}");
            None
        }
    }
}

/// `dataplane plan`: the loss budget of a configuration's plan at a load.
fn loss_budget(
    file: &Path,
    rate: f64,
    packet_size: u32,
    headroom: Option<f64>,
    json: bool,
) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    let plan = match dataplane::plan::Plan::from_config(&c) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let load = dataplane::plan::budget::Load {
        bits_per_second: rate,
        packet_bytes: packet_size,
    };
    let budget = plan.loss_budget(load, headroom);
    if json {
        emit(&envelope::wrap_report(&budget));
    } else {
        emit(&format!("{}\n{}", file.display(), budget.human()));
    }
    ExitCode::SUCCESS
}

/// `dataplane diff RUNNING NEW`: what a live change would do.
fn diff(running: &Path, file: &Path, json: bool) -> ExitCode {
    let planned = |path: &Path| {
        let c = dataplane::plan::staging::with_staging_regions(&load(path)?);
        match dataplane::plan::Plan::from_staged(&c) {
            Ok(p) => Some((c, p)),
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                None
            }
        }
    };
    let (Some(old), Some(new)) = (planned(running), planned(file)) else {
        return ExitCode::FAILURE;
    };
    let change = dataplane::plan::change::PlanChange::between((&old.0, &old.1), (&new.0, &new.1));
    if json {
        emit(&envelope::wrap_report(&change));
    } else {
        emit(&format!(
            "{} -> {}\n{}",
            running.display(),
            file.display(),
            change.human()
        ));
    }
    if change.is_live() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(status::FAILED)
    }
}

fn validate(file: &Path, with_plan: bool, json: bool) -> ExitCode {
    let Some(c) = load(file) else {
        return ExitCode::FAILURE;
    };
    if with_plan {
        // The plan, then what only this machine can say about it (an integrated GPU).
        let planned = dataplane::plan::Plan::from_config(&c).and_then(|p| {
            p.check_integrated_gpus(&|r| {
                dataplane::sysinfo::gpu_is_integrated(r.affinity, r.gpu_uuid.as_deref())
            })
            .map(|()| p)
        });
        return match planned {
            Ok(plan) if json => {
                emit(&envelope::wrap_report(&plan));
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
        "  engine: {} (stream_type {}), master_core {}\n",
        c.engine.name(),
        dataplane::plan::choice_name(&c.stream_type),
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
