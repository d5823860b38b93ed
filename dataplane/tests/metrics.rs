//! The metrics endpoint over real HTTP during a software-loopback run: a scrape while
//! traffic flows shows counters that only grow, and a scrape after the traffic equals the
//! plane's own final counters, queue by queue; other paths get 404 and the endpoint is gone
//! after shutdown.

mod common;

use dataplane::config::MetricsConfig;
use dataplane::packet::UdpFrame;
use dataplane::{DataPlane, config::Direction};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

static YAML: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    common::loopback_config(
        r#"
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
interfaces:
- name: loop0
  address: loopback
  tx: {queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]}
  rx: {queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}]}
"#,
    )
});

/// `GET path` over a fresh connection: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    get_with(addr, path, "")
}

/// `GET path` with extra header lines (each ending in CRLF).
fn get_with(addr: SocketAddr, path: &str, headers: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: test\r\n{headers}\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_owned()))
}

/// Samples of the exposition text: `name{labels}` to value.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

fn queue_key(name: &str, direction: &str) -> String {
    format!("{name}{{interface=\"loop0\",direction=\"{direction}\",queue=\"0\",core=\"0\"}}")
}

/// Whether `promtool --version` runs; says SKIP when not. A probe rather than a failed
/// spawn, because under qemu-user a missing program starts and exits with 127 instead.
fn promtool_installed() -> bool {
    let runs = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !runs {
        eprintln!("SKIP: promtool is not installed (apt-get install prometheus)");
    }
    runs
}

/// `promtool check metrics` (Prometheus's own linter: names, units, `_total`, help
/// texts) on `body`; skipped, visibly, where promtool is not installed.
fn promtool_lint(body: &str) {
    use std::process::{Command, Stdio};
    if !promtool_installed() {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool answered --version but cannot be started");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn scrapes_during_and_after_a_loopback_run_match_the_planes_counters() {
    let mut config = dataplane::config::load_str(&YAML, "metrics-test")
        .unwrap()
        .config;
    config.metrics = Some(MetricsConfig {
        listen: Some("127.0.0.1:0".into()),
        ..MetricsConfig::default()
    });
    let mut plane = DataPlane::start(&config).expect("start");
    let addr = plane.metrics_address().expect("the endpoint runs");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();

    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );
    let (bursts, per_burst, payload) = (400u64, 32usize, [7u8; 100]);
    let mut frame_len = 0;
    let (mut received, mut received_bytes) = (0u64, 0u64);
    let mut during = None;
    for i in 0..bursts {
        // A slow machine (emulation) lets sent bursts pile up: take what arrived until the
        // pool has buffers again.
        let mut b = loop {
            match tx.alloc(per_burst) {
                Ok(b) => break b,
                Err(dataplane::TxFailure::PoolEmpty) => {
                    if let Some(b) = rx.recv(Duration::from_millis(10)).unwrap() {
                        received += b.len() as u64;
                        received_bytes += b.bytes();
                    }
                }
                Err(e) => panic!("{e}"),
            }
        };
        for p in 0..per_burst {
            frame_len = frame.write(&payload, b.buffer_mut(p, 0).unwrap()).unwrap();
            b.set_len(p, 0, frame_len);
        }
        tx.send_within(b, Duration::from_secs(5)).expect("send");
        while let Ok(Some(b)) = rx.poll() {
            received += b.len() as u64;
            received_bytes += b.bytes();
        }
        if i == bursts / 2 {
            let (status, body) = get(addr, "/metrics").expect("scrape while sending");
            assert_eq!(status, 200, "{body}");
            during = Some(samples(&body));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while received < bursts * per_burst as u64 {
        assert!(Instant::now() < deadline, "only {received} packets arrived");
        if let Some(b) = rx.recv(Duration::from_millis(100)).unwrap() {
            received += b.len() as u64;
            received_bytes += b.bytes();
        }
    }
    // Workers publish their pass counts every 1,024 passes; give them a few.
    std::thread::sleep(Duration::from_millis(50));

    let (status, body) = get(addr, "/metrics").expect("scrape after the traffic");
    assert_eq!(status, 200);
    let after = samples(&body);
    let snapshot = plane.snapshot();
    let sent = bursts * per_burst as u64;
    assert_eq!(received, sent);
    assert_eq!(received_bytes, sent * frame_len as u64);
    for q in &snapshot.queues {
        let packets = after[&queue_key("dataplane_queue_packets_total", q.direction)];
        let bytes = after[&queue_key("dataplane_queue_bytes_total", q.direction)];
        assert_eq!(packets as u64, q.packets, "{} packets", q.direction);
        assert_eq!(bytes as u64, q.bytes, "{} bytes", q.direction);
        assert_eq!(
            q.packets, sent,
            "{} packets against what was sent",
            q.direction
        );
        assert_eq!(q.bytes, sent * frame_len as u64);
    }
    let (rx_total, _) = snapshot.total(Direction::Rx);
    assert_eq!(rx_total, received);
    let drops: f64 = after
        .iter()
        .filter(|(k, _)| k.starts_with("dataplane_queue_drops_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(drops, 0.0);
    assert_eq!(
        after["dataplane_pool_buffers{region=\"bufs\",kind=\"host\"}"],
        4096.0
    );
    let free = after["dataplane_pool_buffers_free{region=\"bufs\",kind=\"host\"}"];
    assert!(free > 0.0 && free <= 4096.0, "{free}");
    assert!(after["dataplane_worker_busy_passes_total{core=\"0\"}"] > 0.0);
    assert!(
        after["dataplane_worker_passes_total{core=\"0\"}"]
            >= after["dataplane_worker_busy_passes_total{core=\"0\"}"]
    );
    // Both queues run on core 0: its worker moved every packet twice (TX, then RX).
    assert_eq!(
        after["dataplane_worker_packets_total{core=\"0\"}"],
        2.0 * sent as f64
    );
    assert_eq!(
        after["dataplane_stage_in_flight_bursts{interface=\"loop0\",direction=\"rx\",queue=\"0\",core=\"0\"}"],
        0.0
    );
    // The classic text format by default, as promtool's linter reads it (where it is
    // installed: `scripts/setup.sh` installs it); OpenMetrics to a client that asks.
    assert!(
        body.contains("# TYPE dataplane_queue_packets_total counter") && !body.contains("# EOF")
    );
    promtool_lint(&body);
    let (status, open) = get_with(
        addr,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n",
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(open.contains("# TYPE dataplane_queue_packets counter") && open.ends_with("# EOF\n"));
    assert!(
        after
            .keys()
            .any(|k| k.starts_with("dataplane_info{") && k.contains("engine=\"loopback\"")),
        "{body}"
    );
    // The mid-run scrape saw part of the traffic, never more than the end.
    let during = during.expect("scraped while sending");
    for dir in ["rx", "tx"] {
        let k = queue_key("dataplane_queue_packets_total", dir);
        assert!(during[&k] > 0.0 && during[&k] <= after[&k], "{dir}");
    }

    let (status, _) = get(addr, "/other").unwrap();
    assert_eq!(status, 404);
    drop((tx, rx));
    plane.shutdown().unwrap();
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "the endpoint still listens after shutdown"
    );
}

#[test]
fn a_metrics_address_that_is_not_ip_port_names_the_key() {
    let yaml = YAML.replace(
        "    loopback: \"sw\"\n",
        "    loopback: \"sw\"\n    metrics: {listen: \"localhost-ish\"}\n",
    );
    let e = match dataplane::config::load_str(&yaml, "bad-metrics") {
        Ok(_) => panic!("accepted a bad metrics.listen"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("metrics.listen") && e.contains("IP:PORT"), "{e}");
}

/// A plane with the endpoint on `listen`.
fn plane_with_metrics(listen: &str) -> DataPlane {
    let mut config = dataplane::config::load_str(&YAML, "metrics-test")
        .unwrap()
        .config;
    config.metrics = Some(MetricsConfig {
        listen: Some(listen.into()),
        ..MetricsConfig::default()
    });
    DataPlane::start(&config).expect("start")
}

#[test]
fn a_bare_port_listens_on_loopback_only() {
    let plane = plane_with_metrics(":0");
    let addr = plane.metrics_address().expect("the endpoint runs");
    assert_eq!(addr.ip(), std::net::Ipv4Addr::LOCALHOST, "{addr}");
    let yaml = YAML.replace(
        "    loopback: \"sw\"\n",
        "    loopback: \"sw\"\n    metrics: {listen: \"9464\"}\n",
    );
    let config = dataplane::config::load_str(&yaml, "port-only")
        .unwrap()
        .config;
    assert_eq!(config.metrics.unwrap().listen.as_deref(), Some("9464"));
    assert_eq!(
        dataplane::config::metrics_listen_address("9464").unwrap(),
        "127.0.0.1:9464".parse::<SocketAddr>().unwrap()
    );
}

#[test]
fn silent_and_stalled_clients_neither_block_scrapes_nor_shutdown() {
    let plane = plane_with_metrics("127.0.0.1:0");
    let addr = plane.metrics_address().unwrap();
    // More silent connections than the endpoint serves at once, and clients that send a
    // request and never read the answer.
    let n = dataplane::metrics::MAX_CLIENTS * 2;
    let silent: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    let stalled: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(addr).expect("connect");
            write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            s
        })
        .collect();
    // A scrape still gets its answer: the silent ones are dropped at their deadline.
    let (status, body) = get(addr, "/metrics").expect("scrape beside stalled clients");
    assert_eq!(status, 200);
    assert!(body.contains("dataplane_queue_packets_total"), "{body}");
    // A request head that never ends is refused, not buffered without bound.
    let mut big = TcpStream::connect(addr).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = big.write_all(&vec![b'a'; 64 * 1024]);
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    // Only GET is answered.
    let mut post = TcpStream::connect(addr).unwrap();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(post, "POST /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    // `POST /trigger` fires transient buffers; this plane has none.
    let mut post = TcpStream::connect(addr).unwrap();
    post.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(post, "POST /trigger HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 404") && answer.contains("capture.transient"),
        "{answer}"
    );
    // Shutdown ends with the stalled clients still connected (a bound, not a speed
    // measurement: a hang would fail here rather than time the test out).
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(plane);
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("shutdown waited on a client that stopped reading");
    drop((silent, stalled));
}

/// The dashboard in the repository queries what the endpoint exports: every query parses
/// as PromQL (`promtool check rules`, where promtool is installed), every metric it reads
/// is in a loopback plane's scrape or, for the socket and RDMA engines' link metrics, in
/// the operations chapter's table of metrics.
#[test]
fn the_dashboard_queries_what_the_endpoint_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/grafana/dataplane.json")).unwrap(),
    )
    .unwrap();
    let chapter = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(exprs.len() >= 8, "{exprs:?}");

    let plane = plane_with_metrics("127.0.0.1:0");
    let (_, body) = get(plane.metrics_address().unwrap(), "/metrics").unwrap();
    let exported: std::collections::BTreeSet<String> = samples(&body)
        .keys()
        .map(|k| k.split('{').next().unwrap().to_owned())
        .collect();
    for expr in &exprs {
        let names = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("dataplane_"));
        for name in names {
            let link_metric =
                name.starts_with("dataplane_link_") || name.starts_with("dataplane_rdma_");
            assert!(
                exported.contains(name) || (link_metric && chapter.contains(&format!("`{name}`"))),
                "the dashboard reads {name}, which the endpoint does not export: {expr}"
            );
        }
    }
    drop(plane);

    // PromQL syntax: each query as a recording rule, `$__rate_interval` (Grafana's) as 1m.
    let mut rules = String::from("groups:\n- name: dashboard\n  rules:\n");
    for (i, expr) in exprs.iter().enumerate() {
        let expr = expr.replace("$__rate_interval", "1m").replace('\'', "''");
        rules += &format!("  - record: dashboard:query{i}\n    expr: '{expr}'\n");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-rules.yml");
    std::fs::write(&file, rules).unwrap();
    if promtool_installed() {
        let out = std::process::Command::new("promtool")
            .args(["check", "rules"])
            .arg(&file)
            .output()
            .expect("promtool answered --version but cannot be started");
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
