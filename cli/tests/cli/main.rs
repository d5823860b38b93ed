//! The `dataplane` command as a user runs it: output goes where it belongs, exit statuses
//! mean one thing each, and a configuration given to the wrong bench says which one to
//! use. Signals are in `signals.rs`.

#[path = "../../../bench/tests/common/mod.rs"]
mod common;
mod signals;

use std::process::Command;

fn dataplane() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dataplane"));
    c.env_remove("DATAPLANE_LOG");
    c
}

fn cfg(name: &str) -> String {
    common::config_path(name).display().to_string()
}

#[test]
fn report_once_on_stdout_no_progress_or_colour_off_a_terminal() {
    let out = dataplane()
        .args(["bench", "raw", &cfg("sw_loopback.yaml"), "--seconds", "1.5"])
        .env("DATAPLANE_LOG", "info")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout.matches("LOSSLESS").count(), 1, "{stdout}");
    assert!(
        !stderr.contains("LOSSLESS"),
        "the report is not repeated on stderr"
    );
    assert!(
        !stderr.contains("Mpps"),
        "no progress line off a terminal: {stderr}"
    );
    assert!(!stderr.contains('\x1b'), "no ANSI colour codes: {stderr:?}");

    let out = dataplane()
        .args([
            "bench",
            "raw",
            &cfg("sw_loopback.yaml"),
            "--seconds",
            "0.5",
            "--quiet",
            "--json",
        ])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "only the JSON line: {stdout}");
    assert_eq!(common::last_json(&out.stdout)["verdict"], "lossless");
}

#[test]
fn bench_ring_prints_its_table_on_stdout() {
    let out = dataplane()
        .args(["bench", "ring", "--items", "20000", "--reps", "1"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("case"), "{stdout}");
    assert_eq!(
        stdout.lines().skip(1).count(),
        11,
        "a line per case: {stdout}"
    );
}

#[test]
fn a_configuration_given_to_the_wrong_bench_names_the_right_one() {
    let run = |args: &[&str]| {
        let out = dataplane().args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run(&["bench", "raw", &cfg("rdma_loopback.yaml"), "--seconds", "1"]);
    assert!(
        e.contains("is an RDMA configuration") && e.contains("dataplane bench rdma"),
        "{e}"
    );
    let e = run(&[
        "bench",
        "rdma",
        &cfg("sw_loopback.yaml"),
        "--mode",
        "both",
        "--seconds",
        "1",
    ]);
    assert!(
        e.contains("is a raw configuration") && e.contains("dataplane bench raw"),
        "{e}"
    );
    let socket = std::env::current_dir()
        .unwrap()
        .join("../shared/daqiri-examples/daqiri_bench_socket_udp_tx_rx.yaml");
    let socket = if socket.exists() {
        socket
    } else {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/daqiri-examples/daqiri_bench_socket_udp_tx_rx.yaml")
    };
    if socket.exists() {
        let e = run(&["bench", "raw", socket.to_str().unwrap(), "--seconds", "1"]);
        assert!(e.contains("kernel socket configuration"), "{e}");
    } else {
        println!("SKIP socket message check: reference examples not found");
    }
}

#[test]
fn work_levels_count_what_headers_only_generation_sends_and_refuse_to_check_it() {
    let run = |extra: &[&str]| {
        dataplane()
            .args([
                "bench",
                "raw",
                &cfg("sw_loopback.yaml"),
                "--seconds",
                "1",
                "--json",
            ])
            .args(extra)
            .output()
            .expect("run")
    };
    let out = run(&["--tx-work", "headers", "--rx-work", "count"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = common::last_json(&out.stdout);
    assert_eq!(r["tx_work"], "headers");
    assert_eq!(r["rx_work"], "count");
    assert_eq!(r["lossless"], true, "{r}");
    let sent = r["tx_packets"].as_u64().unwrap();
    assert!(sent > 1000 && r["rx_packets"].as_u64() == Some(sent), "{r}");
    assert_eq!(r["checker"]["valid"], 0, "count mode reads no frame: {r}");

    let out = run(&["--rx-work", "trailer", "--stages"]);
    assert!(out.status.success());
    let r = common::last_json(&out.stdout);
    assert_eq!(r["checker"]["valid"], r["rx_packets"], "{r}");
    let stages: Vec<&str> = r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert!(
        stages.contains(&"generator 0") && stages.contains(&"checker 0"),
        "{stages:?}"
    );
    assert!(
        r["stages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["busy_ns"].as_u64() > Some(0)),
        "every stage timed: {r}"
    );

    let out = run(&["--target-gbps", "2"]);
    assert!(out.status.success());
    let r = common::last_json(&out.stdout);
    assert_eq!(r["pacing"]["target_gbps"], 2.0, "{r}");
    assert!(r["pacing"]["sent_gbps"].as_f64() > Some(0.0), "{r}");
    assert_eq!(r["lossless"], true, "{r}");

    let out = run(&["--tx-work", "headers"]);
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("add --rx-work count"), "{e}");
}

#[test]
fn bench_fwd_relays_seeded_frames_around_a_loopback() {
    let out = dataplane()
        .args(["bench", "fwd", &cfg("sw_loopback.yaml"), "--seconds", "1"])
        .args(["--tx-first", "2", "--mac-swap", "--json"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = common::last_json(&out.stdout);
    assert_eq!(r["seeded_packets"], 512, "two bursts of 256: {r}");
    assert_eq!(r["mac_swap"], true);
    let fwd = r["forwarded_packets"].as_u64().unwrap();
    assert!(
        fwd > 512,
        "the seeded frames went round more than once: {r}"
    );
    assert_eq!(r["problems"].as_array().unwrap().len(), 0, "{r}");
    // Every forwarded packet was received and sent again; the seeded ones were sent once
    // more at the start.
    let q = |d: &str| {
        r["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["direction"] == d)
            .unwrap()["packets"]
            .as_u64()
            .unwrap()
    };
    assert!(q("rx") >= fwd && q("tx") >= fwd, "{r}");

    let out = dataplane()
        .args([
            "bench",
            "fwd",
            &cfg("sw_loopback.yaml"),
            "--seconds",
            "1",
            "--tx",
            "nope",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no interface `nope` with TX queues"), "{e}");
}

/// A run of `sw_loopback.yaml` with its `log_level` replaced, metrics on a free port so
/// that an info-level line exists, and `extra` arguments before `bench`.
fn logged_run(log_level: &str, env_level: Option<&str>, extra: &[&str]) -> String {
    let text = std::fs::read_to_string(common::config_path("sw_loopback.yaml")).unwrap();
    let text = text.replace(
        "log_level: \"warn\"",
        &format!("log_level: \"{log_level}\""),
    );
    assert!(text.contains(&format!("log_level: \"{log_level}\"")));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(&file, text).unwrap();
    let mut c = dataplane();
    if let Some(l) = env_level {
        c.env("DATAPLANE_LOG", l);
    }
    let out = c
        .args(extra)
        .args(["--metrics", "127.0.0.1:0", "bench", "raw"])
        .arg(&file)
        .args(["--seconds", "0.3", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn log_level_from_the_yaml_applies_the_environment_overrides_it_and_json_lines_parse() {
    let info = logged_run("info", None, &[]);
    assert!(info.contains("metrics: http://127.0.0.1:"), "{info}");
    assert!(
        !info.contains('\u{1b}'),
        "colour codes off a terminal: {info:?}"
    );
    let warn = logged_run("warn", None, &[]);
    assert!(!warn.contains("metrics: http://"), "{warn}");
    let overridden = logged_run("info", Some("warn"), &[]);
    assert!(!overridden.contains("metrics: http://"), "{overridden}");
    let raised = logged_run("warn", Some("info"), &[]);
    assert!(raised.contains("metrics: http://"), "{raised}");

    let json = logged_run("info", None, &["--log-format", "json"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        lines.iter().any(|v| v["level"] == "INFO"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("metrics: http://"))),
        "{json}"
    );
}

#[test]
fn bench_results_carry_setup_series_and_workers_and_plot_draws_a_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(common::config_path("sw_loopback.yaml")).unwrap();
    let mut results = Vec::new();
    for payload in [64, 512] {
        let file = dir.path().join(format!("p{payload}.yaml"));
        std::fs::write(
            &file,
            text.replace("payload_size: 1024", &format!("payload_size: {payload}")),
        )
        .unwrap();
        let json = dir.path().join(format!("p{payload}.json"));
        let csv = dir.path().join(format!("p{payload}.csv"));
        let out = dataplane()
            .args(["bench", "raw"])
            .arg(&file)
            .args(["--seconds", "1.5", "--json", "-q", "--csv"])
            .arg(&csv)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        std::fs::write(&json, &out.stdout).unwrap();
        let r = common::last_json(&out.stdout);
        assert_eq!(r["setup"]["payload_bytes"], payload);
        assert_eq!(r["setup"]["frame_bytes"], 64 + payload);
        assert_eq!(r["setup"]["batch"], 256);
        assert_eq!(r["setup"]["engine"], "loopback");
        assert_eq!(r["setup"]["worker_cores"], serde_json::json!([1]));
        assert!(r["setup"]["commit"].as_str().is_some_and(|c| !c.is_empty()));
        let series = r["series"].as_array().unwrap();
        // A point per whole second and the partial one at the end.
        assert!(series.len() >= 2, "{series:?}");
        // The series counts what the queues counted while it recorded: never more.
        let in_series: f64 = series
            .windows(2)
            .map(|w| {
                (w[1]["t_s"].as_f64().unwrap() - w[0]["t_s"].as_f64().unwrap())
                    * w[1]["rx_mpps"].as_f64().unwrap()
                    * 1e6
            })
            .sum();
        let rx = r["rx_packets"].as_f64().unwrap();
        assert!(
            in_series > 0.0 && in_series <= rx * 1.001,
            "{in_series} vs {rx}"
        );
        assert_eq!(series[0]["queues"].as_array().unwrap().len(), 2);
        let w = &r["workers"][0];
        assert_eq!(w["core"], 1);
        let busy = w["busy_fraction"].as_f64().unwrap();
        assert!(busy > 0.0 && busy <= 1.0, "{w}");
        let csv = std::fs::read_to_string(&csv).unwrap();
        assert_eq!(csv.lines().count(), series.len() + 1, "{csv}");
        assert!(csv.starts_with("t_s,tx_mpps,tx_gbps,rx_mpps,rx_gbps,"));
        results.push(json);
    }
    let png = dir.path().join("sweep.png");
    let out = dataplane()
        .arg("plot")
        .args(&results)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // IHDR: width and height, big-endian, at bytes 16..24.
    let dim = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    // One panel per question under a title: rate, latency, drops, and the medians of
    // several runs.
    assert_eq!((dim(16), dim(20)), (1200, 40 + 4 * 360));
    let svg = dir.path().join("one.svg");
    let out = dataplane()
        .args(["plot"])
        .arg(&results[0])
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    for title in [
        "<svg",
        "RX throughput over time",
        "One-way latency",
        "Drops by cause",
        "no drops in any run",
    ] {
        assert!(svg.contains(title), "{title} missing");
    }
    assert!(!svg.contains("Median per run"), "one run has no comparison");
    let out = dataplane()
        .args(["plot"])
        .arg(&results[0])
        .args(["-o", "x.jpg"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(".png or .svg"));
}

/// The exit statuses `--help` documents, each from a run that must give it: usage
/// mistakes 2 (clap's), a command that cannot run 1, a lossless bench 0, a bench whose
/// wire drops frames 3 (130 and 143 after signals are tested above; `doctor`'s 0 and 3
/// in `doctor.rs`).
#[test]
fn exit_statuses_mean_one_thing_each() {
    let code = |args: &[&str]| {
        let out = dataplane().args(args).output().expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (status, help) = code(&["--help"]);
    assert_eq!(status, Some(0));
    for want in [
        "Exit status:",
        "3    failed verdict",
        "4    inconclusive",
        "DATAPLANE_EAL_ARGS",
        "DATAPLANE_LOG",
    ] {
        assert!(help.contains(want), "--help lacks {want:?}: {help}");
    }
    assert_eq!(code(&["--no-such-flag"]).0, Some(2));
    assert_eq!(
        code(&["bench", "raw", &cfg("sw_loopback.yaml"), "--seconds", "x"]).0,
        Some(2)
    );
    assert_eq!(
        code(&["validate", "/nonexistent/dataplane.yaml"]).0,
        Some(1)
    );
    let lossless = [
        "bench",
        "raw",
        &cfg("sw_loopback.yaml"),
        "--seconds",
        "1",
        "--quiet",
    ];
    assert_eq!(code(&lossless).0, Some(0));
    let dropping = std::fs::read_to_string(cfg("sw_loopback.yaml"))
        .unwrap()
        .replacen(
            "      address: \"loopback\"",
            "      address: \"loopback\"\n      fault_injection:\n        rules:\n        - {action: drop, every: 100}",
            1,
        );
    let file = std::env::temp_dir().join(format!("dp-exit-{}.yaml", std::process::id()));
    std::fs::write(&file, dropping).unwrap();
    let dropped = code(&[
        "bench",
        "raw",
        file.to_str().unwrap(),
        "--seconds",
        "1",
        "--quiet",
    ]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(dropped.0, Some(3));
}

/// `--version` names the release, the commit the binary was built from (where the source
/// is a git checkout) and the features built in; `validate` names choices as the
/// configuration writes them (`raw`, not Rust's `Raw`).
#[test]
fn version_names_commit_and_features_and_validate_speaks_the_schema() {
    let out = dataplane().arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.starts_with(&format!("dataplane {} (", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("; features: "), "{text}");
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(head) = head {
        let head = String::from_utf8_lossy(&head.stdout);
        assert!(text.contains(head.trim()), "{text} (HEAD {head})");
    }
    let validate = |extra: &[&str]| {
        let out = dataplane()
            .args(["validate", &cfg("sw_loopback.yaml")])
            .args(extra)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = validate(&[]);
    assert!(text.contains("(stream_type raw)"), "{text}");
    let text = validate(&["--plan"]);
    assert!(text.contains("rx overflow: backpressure"), "{text}");
}

/// `--otlp` takes an http URL (usage error otherwise), and a collector that is not there
/// costs warnings, never the run.
#[test]
fn otlp_flag_checks_its_url_and_an_absent_collector_does_not_fail_a_run() {
    let out = dataplane()
        .args([
            "--otlp",
            "https://collector:4318",
            "validate",
            &cfg("sw_loopback.yaml"),
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("https is not supported"), "{e}");
    // Port 9 (discard) on loopback: nothing listens there.
    let out = dataplane()
        .args([
            "--otlp",
            "http://127.0.0.1:9",
            "bench",
            "raw",
            &cfg("sw_loopback.yaml"),
        ])
        .args(["--seconds", "1", "--json", "-q"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(common::last_json(&out.stdout)["lossless"], true);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("OTLP push to http://127.0.0.1:9/v1/metrics failed"),
        "{e}"
    );
}

/// Every command gives 2 for a usage mistake and 1 when its input cannot be read, and 0
/// when it works (the verdicts' 3 are tested above and in doctor.rs; 4, packets still in
/// flight at the end, cannot be provoked deterministically on a loopback that drains).
#[test]
fn every_command_gives_usage_2_error_1_and_success_0() {
    let status = |args: &[&str]| dataplane().args(args).output().expect("run").status.code();
    let missing = "/nonexistent/dataplane.yaml";
    let commands: [&[&str]; 11] = [
        &["validate"],
        &["doctor"],
        &["plot", "-o", "/tmp/x.png"],
        &["csv"],
        &["capture"],
        &["hugepages", "status"],
        &["bench", "raw"],
        &["bench", "fwd"],
        &["bench", "socket", "--mode", "both"],
        &["bench", "dynamic-flows"],
        &["bench", "ring"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--no-such-flag");
        assert_eq!(status(&args), Some(2), "{args:?}");
    }
    for command in [
        &["validate", missing][..],
        &["doctor", missing],
        &["plot", missing, "-o", "/tmp/dp-exit.png"],
        &["csv", missing],
        &["capture", missing, "/tmp/dp-exit-capture"],
        &["bench", "raw", missing],
        &["bench", "fwd", missing],
        &["bench", "socket", missing, "--mode", "both"],
        &["bench", "dynamic-flows", missing],
    ] {
        assert_eq!(status(command), Some(1), "{command:?}");
    }
    let good = cfg("sw_loopback.yaml");
    for command in [
        &["validate", good.as_str()][..],
        &["hugepages", "status"],
        &["bench", "ring", "--items", "20000", "--reps", "1"],
        &[
            "bench",
            "fwd",
            good.as_str(),
            "--seconds",
            "0.5",
            "--tx-first",
            "1",
            "-q",
        ],
    ] {
        assert_eq!(status(command), Some(0), "{command:?}");
    }
}

/// `dataplane plan`: the loss budget in words, per RX queue; a rate or duration it cannot
/// read is a usage error (status 2) that says what it wants.
#[test]
fn diff_says_what_a_live_change_keeps_and_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let running = cfg("loopback_steering.yaml");
    let text = std::fs::read_to_string(&running).unwrap();
    // q1 goes; port 6000 moves to q0.
    let live = text
        .lines()
        .filter(|l| !l.contains("name: q1"))
        .map(|l| {
            l.replace(
                "queue, id: 1}, match: {udp_dst: 6000}",
                "queue, id: 0}, match: {udp_dst: 6000}",
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let resized = live.replace("num_bufs: 4096", "num_bufs: 2048");
    let (live_file, resized_file) = (
        dir.path().join("live.yaml"),
        dir.path().join("resized.yaml"),
    );
    std::fs::write(&live_file, &live).unwrap();
    std::fs::write(&resized_file, &resized).unwrap();
    let run = |new: &std::path::Path| {
        dataplane()
            .args(["diff", &running, new.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = run(&live_file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for want in [
        "loop0 rx queue 0: kept, loses nothing",
        "loop0 rx queue 1: removed",
        "rules of loop0: changed control; also queues",
        "live: a running plane makes this change",
    ] {
        assert!(stdout.contains(want), "{want:?} not in {stdout}");
    }
    let out = run(&resized_file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    // The region itself could change live; the queues that keep running on it cannot.
    for want in [
        "memory region bufs: changed: num_bufs",
        "not live, needs a restart:\n",
        "queue 0: changed (memory_regions): a running queue keeps its settings",
    ] {
        assert!(stdout.contains(want), "{want:?} not in {stdout}");
    }
    let same = run(std::path::Path::new(&running));
    assert!(
        same.status.success() && String::from_utf8_lossy(&same.stdout).contains("nothing changes"),
        "{same:?}"
    );
}

#[test]
fn plan_prints_each_queues_budget_and_refuses_unreadable_loads() {
    let run = |args: &[&str]| dataplane().args(args).output().expect("run");
    let file = cfg("socket_udp_bench.yaml");
    let out = run(&[
        "plan",
        &file,
        "--rate",
        "100G",
        "--packet-size",
        "8000",
        "--headroom",
        "20ms",
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "load: 100.000 Gb/s of 8000 B packets = 1562500 packets/s",
        "server RX queue 0:",
        "kernel socket receive buffer",
        "counted as `engine_missed`",
        "to absorb 20.00 ms:",
        "ring_packets: ",
    ] {
        assert!(text.contains(want), "{want:?} not in {text}");
    }
    let bad = run(&["plan", &file, "--rate", "fast", "--packet-size", "64"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("`fast` is not a rate"),
        "{bad:?}"
    );
    let bad = run(&[
        "plan",
        &file,
        "--rate",
        "1G",
        "--packet-size",
        "64",
        "--headroom",
        "10",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a duration"));
}
