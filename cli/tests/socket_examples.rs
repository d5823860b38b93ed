//! The reference's socket bench examples run with `dataplane bench socket`, only their cores
//! changed to fit this machine: the 127.0.0.1 ones in one process, the DGX Spark ones
//! split over a veth pair between two network namespaces (server 10.250.0.2, client
//! 10.250.0.1, as the files name them), which also checks the engine across a real
//! kernel network path. The namespace part needs root and is skipped visibly otherwise.

#[macro_use]
#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const NS_CLIENT: &str = "dpsock1";
const NS_SERVER: &str = "dpsock2";

fn examples_dir() -> Option<PathBuf> {
    common::reference_examples_dir()
}

/// The example with every core moved to 0 or 1 (workers of the two sides apart).
fn fitted(dir: &Path, name: &str, out: &Path) -> PathBuf {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut lines = Vec::new();
    let mut side = 0;
    for line in text.lines() {
        if line.contains("mode: client") || line.starts_with("socket_bench_client") {
            side = 1;
        }
        if line.contains("mode: server") || line.starts_with("socket_bench_server") {
            side = 0;
        }
        let t = line.trim_start();
        if t.starts_with("cpu_core:") || t.starts_with("master_core:") {
            let indent = &line[..line.len() - t.len()];
            let key = t.split(':').next().unwrap();
            let core = if key == "master_core" { 0 } else { side };
            lines.push(format!("{indent}{key}: {core}"));
        } else {
            lines.push(line.to_owned());
        }
    }
    let path = out.join(name);
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn bench(ns: Option<&str>, file: &Path, mode: &str, extra: &[&str]) -> Command {
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let mut c = match ns {
        Some(ns) => common::in_netns(ns, &[bin]),
        None => Command::new(bin),
    };
    c.args(["bench", "socket"])
        .arg(file)
        .args(["--mode", mode, "--seconds", "2", "--json", "--quiet"])
        .args(extra);
    c
}

/// Runs and returns (exit code, JSON report).
fn report(mut c: Command) -> (i32, serde_json::Value) {
    let out = c.stderr(Stdio::inherit()).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 3,
        "exit {code}: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (code, common::last_json(&out.stdout))
}

/// Nothing corrupt, and any loss is accounted for by the drop counters.
fn check(r: &serde_json::Value, what: &str) {
    println!("{what}: {r}");
    assert_eq!(r["errors"], 0, "{what}: {r}");
    assert!(r["messages_received"].as_u64().unwrap() > 0, "{what}: {r}");
    assert_eq!(r["attributed"], true, "{what}: losses unaccounted: {r}");
}

#[test]
fn loopback_examples_run() {
    let Some(dir) = examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for name in [
        "daqiri_bench_socket_udp_tx_rx.yaml",
        "daqiri_bench_socket_tcp_tx_rx.yaml",
    ] {
        let f = fitted(&dir, name, tmp.path());
        let (code, r) = report(bench(None, &f, "both", &[]));
        check(&r, name);
        if name.contains("tcp") {
            assert_eq!(code, 0, "{name}: TCP loses nothing: {r}");
            assert_eq!(r["lossless"], true);
        }
        // Both sides send and receive in these files.
        for side in ["server", "client"] {
            assert!(
                r[side]["messages_sent"].as_u64().unwrap() > 0,
                "{name} {side}: {r}"
            );
            assert!(
                r[side]["messages_received"].as_u64().unwrap() > 0,
                "{name} {side}: {r}"
            );
        }
    }
}

fn namespaces() -> Result<common::VethPair, String> {
    common::veth_pair(
        [NS_CLIENT, NS_SERVER],
        ["dpsa", "dpsb"],
        [Some("10.250.0.1/24"), Some("10.250.0.2/24")],
    )
}

/// Waits (at most 10 s) until a socket in namespace `ns` is bound to `port`.
fn wait_bound(ns: &str, port: u16) {
    let needle = format!(":{port:04X} ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if common::netns_output(ns, &["cat", "/proc/net/udp", "/proc/net/tcp"]).contains(&needle) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("nothing in namespace {ns} bound port {port} within 10 s");
}

#[test]
fn spark_examples_run_across_a_veth_pair() {
    let Some(dir) = examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return;
    };
    let _ns = ready_or_skip!("socket examples across network namespaces", namespaces());
    let tmp = tempfile::tempdir().unwrap();
    for (name, paced) in [
        ("daqiri_bench_socket_udp_tx_rx_spark_netns.yaml", false),
        ("daqiri_bench_socket_udp_tx_rx_spark_netns.yaml", true),
        ("daqiri_bench_socket_tcp_tx_rx_spark_netns.yaml", false),
    ] {
        let f = fitted(&dir, name, tmp.path());
        let extra: &[&str] = if paced {
            &["--target-gbps", "0.3"]
        } else {
            &[]
        };
        let server = bench(Some(NS_SERVER), &f, "server", extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // A UDP datagram sent before the server's socket exists is lost without a count
        // (the kernel answers "port unreachable"): start the client once it is bound.
        let port = if name.contains("udp") { 5001 } else { 6001 };
        wait_bound(NS_SERVER, port);
        let (_, client) = report(bench(Some(NS_CLIENT), &f, "client", extra));
        let out = server.wait_with_output().unwrap();
        let code = out.status.code().unwrap_or(-1);
        let server = common::last_json(&out.stdout);
        let what = format!("{name}{}", if paced { " paced" } else { "" });
        println!("{what} client: {client}");
        check(&server, &what);
        assert!(client["client"]["messages_sent"].as_u64().unwrap() > 0);
        let sent = client["client"]["messages_sent"].as_u64().unwrap();
        let got = server["server"]["messages_received"].as_u64().unwrap();
        let lost = server["server"]["lost"].as_u64().unwrap();
        if name.contains("udp") {
            assert_eq!(got + lost, sent, "{what}: received + lost = sent");
        }
        if paced || name.contains("tcp") {
            assert_eq!(code, 0, "{what}: {server}");
            assert_eq!(server["lossless"], true, "{what}");
            if name.contains("tcp") {
                assert_eq!(
                    server["server"]["bytes_received"], client["client"]["bytes_sent"],
                    "{what}"
                );
            } else {
                assert_eq!(got, sent, "{what}");
            }
        }
    }
}

/// 9000-byte frames on the socket engine: with `max_payload_size: 8972` each side raises
/// its veth end's MTU (1500 at the start) to 9000, never lowering it, and 8972-byte
/// datagrams cross the namespaces unfragmented (the kernel counts no reassembly) and
/// verified, paced so that none is lost.
#[test]
fn jumbo_datagrams_cross_after_the_sockets_raise_the_mtu() {
    let _ns = ready_or_skip!("socket jumbo test", namespaces());
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("jumbo.yaml");
    std::fs::write(
        &f,
        common::socket_config(
            r#"memory_regions:
- {name: server_bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000}
- {name: client_bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000}
interfaces:
- name: server
  address: 10.250.0.2
  socket_config: {mode: server, local_addr: "udp://10.250.0.2:5801", max_payload_size: 8972}
  rx:
    queues:
    - {name: server_rx, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [server_bufs]}
- name: client
  address: 10.250.0.1
  socket_config: {mode: client, local_addr: "udp://10.250.0.1:5802", remote_addr: "udp://10.250.0.2:5801", max_payload_size: 8972}
  tx:
    queues:
    - {name: client_tx, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [client_bufs]}
"#,
        ) + r#"socket_bench_server: {server: true, send: false, receive: true, message_size: 8972, server_address: 10.250.0.2, server_port: 5801}
socket_bench_client: {server: false, send: true, receive: false, message_size: 8972, server_address: 10.250.0.2, client_address: 10.250.0.1, server_port: 5801}
"#,
    )
    .unwrap();
    let reassembled = || {
        let text = common::netns_output(NS_SERVER, &["cat", "/proc/net/snmp"]);
        let ip: Vec<&str> = text.lines().filter(|l| l.starts_with("Ip:")).collect();
        let at = ip[0]
            .split_whitespace()
            .position(|k| k == "ReasmOKs")
            .unwrap();
        ip[1]
            .split_whitespace()
            .nth(at)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let mtu = common::netdev_mtu;
    assert_eq!(
        (mtu(NS_CLIENT, "dpsa"), mtu(NS_SERVER, "dpsb")),
        (1500, 1500)
    );
    let before = reassembled();
    let extra = ["--target-gbps", "0.5"];
    let server = bench(Some(NS_SERVER), &f, "server", &extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_bound(NS_SERVER, 5801);
    let (_, client) = report(bench(Some(NS_CLIENT), &f, "client", &extra));
    let out = server.wait_with_output().unwrap();
    let server = common::last_json(&out.stdout);
    check(&server, "jumbo");
    assert_eq!(
        (mtu(NS_CLIENT, "dpsa"), mtu(NS_SERVER, "dpsb")),
        (9000, 9000)
    );
    let sent = client["client"]["messages_sent"].as_u64().unwrap();
    let got = server["server"]["messages_received"].as_u64().unwrap();
    assert!(got > 0 && got <= sent, "{server}");
    assert_eq!(
        server["server"]["bytes_received"].as_u64().unwrap(),
        got * 8972,
        "whole 8972-byte datagrams: {server}"
    );
    assert_eq!(
        reassembled(),
        before,
        "no datagram was fragmented on the way"
    );
    println!(
        "socket jumbo: sent {sent}, received {got} datagrams of 8972 bytes, MTU 9000 both ends"
    );
}

/// A bench longer than two seconds draws a progress bar on a terminal (a pseudo-terminal
/// from `script`) and none when stderr is a pipe: no carriage returns or escape codes reach
/// a file or a log collector.
#[test]
fn a_progress_bar_on_a_terminal_and_none_on_a_pipe() {
    let Some(dir) = examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let f = fitted(&dir, "daqiri_bench_socket_udp_tx_rx.yaml", tmp.path());
    // Ports of its own: the other tests of this binary run the same file at the same time.
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        text.replace(":5001", ":5201")
            .replace(":5002", ":5202")
            .replace("server_port: 5001", "server_port: 5201"),
    )
    .unwrap();
    let args = |seconds: &str| {
        vec![
            env!("CARGO_BIN_EXE_dataplane").to_owned(),
            "bench".into(),
            "socket".into(),
            f.display().to_string(),
            "--mode".into(),
            "both".into(),
            "--seconds".into(),
            seconds.into(),
        ]
    };
    let piped = Command::new(&args("3")[0])
        .args(&args("3")[1..])
        .env_remove("DATAPLANE_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !stderr.contains('\r') && !stderr.contains("bench socket ["),
        "a bar on a pipe: {stderr:?}"
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIP: no `script` (util-linux) for a pseudo-terminal");
        return;
    }
    let line = args("3").join(" ") + " > /dev/null";
    let tty = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_remove("DATAPLANE_LOG")
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&tty.stdout);
    assert!(
        seen.contains("bench socket [") && seen.contains("of 3s"),
        "{seen:?}"
    );
}
