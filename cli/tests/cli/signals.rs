//! Signals as a user sends them: SIGINT and SIGTERM end a bench with its report and the
//! conventional exit status, SIGUSR1 fires the transient buffer while it runs, and a closed
//! stdout ends the command quietly.

use super::{cfg, common, dataplane};
use rustix::process::{Pid, Signal, kill_process};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// Waits until `child` has installed its handler for `sig` (its `SigCgt` mask in
/// /proc), so the test does not race the process's start-up.
fn wait_for_handler(child: &Child, sig: Signal) {
    let bit = 1u64 << (sig.as_raw() - 1);
    let started = Instant::now();
    loop {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("child status");
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or(0);
        if caught & bit != 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no handler installed"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn interrupted_run(sig: Signal) -> Output {
    let child = dataplane()
        .args([
            "bench",
            "raw",
            &cfg("sw_loopback.yaml"),
            "--seconds",
            "60",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // As early as possible: right after the handler exists, before the plane starts.
    wait_for_handler(&child, sig);
    kill_process(Pid::from_child(&child), sig).expect("signal");
    child.wait_with_output().expect("wait")
}

#[test]
fn an_early_sigint_still_gives_a_report_and_exit_130() {
    let out = interrupted_run(Signal::INT);
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let report = common::last_json(&out.stdout);
    assert_eq!(report["interrupted"], true);
    assert_eq!(report["requested_seconds"], 60.0);
    assert!(report["seconds"].as_f64().unwrap() < 60.0);
    let human = String::from_utf8_lossy(&out.stdout);
    assert!(human.contains("INTERRUPTED after"), "{human}");
}

#[test]
fn sigterm_gives_a_report_and_exit_143() {
    let out = interrupted_run(Signal::TERM);
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    assert_eq!(common::last_json(&out.stdout)["interrupted"], true);
}

#[test]
fn a_closed_stdout_ends_quietly() {
    for args in [
        vec!["validate".to_owned(), cfg("sw_loopback.yaml")],
        vec!["hugepages".to_owned(), "status".to_owned()],
    ] {
        // The reader is gone before the command starts (as after `| head -1` read its line).
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = dataplane()
            .args(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
    }
}

/// SIGUSR1 during a bench fires the transient buffer of its RX queue: the run goes on
/// (lossless) and the window around the signal is in `window_1.pcap`, whole frames in
/// receive order.
#[test]
fn sigusr1_writes_the_transient_window_while_the_bench_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("transient.yaml");
    let text = std::fs::read_to_string(cfg("sw_loopback.yaml"))
        .unwrap()
        .replacen(
            "          memory_regions: [\"rx_buffers\"]",
            &format!(
                "          memory_regions: [\"rx_buffers\"]\n          capture: {{path: \"{}\", transient: {{keep_mb: 64, before_ms: 20, after_ms: 20}}}}",
                dir.path().join("window.pcap").display()
            ),
            1,
        );
    assert!(text.contains("transient:"), "the RX queue line moved");
    std::fs::write(&file, text).unwrap();
    let child = dataplane()
        .args([
            "bench",
            "raw",
            file.to_str().unwrap(),
            "--seconds",
            "3",
            "--quiet",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    wait_for_handler(&child, Signal::USR1);
    // Traffic flows by then on any machine that runs the suite; the window is written
    // from whatever the queue received around the signal.
    std::thread::sleep(Duration::from_millis(1500));
    kill_process(Pid::from_child(&child), Signal::USR1).expect("signal");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("SIGUSR1: fired 1 transient buffer(s)"),
        "{stderr}"
    );
    let frames = dataplane::capture::read_capture(&dir.path().join("window_1.pcap")).unwrap();
    assert!(!frames.is_empty(), "{stderr}");
    assert!(
        frames
            .windows(2)
            .all(|w| w[0].timestamp_ns <= w[1].timestamp_ns)
    );
    let span = frames.last().unwrap().timestamp_ns - frames[0].timestamp_ns;
    assert!(span <= 40_000_000, "the window is 40 ms at most: {span} ns");
    assert!(
        frames.iter().all(|f| f.bytes.len() == 64 + 1024),
        "whole frames"
    );
}
