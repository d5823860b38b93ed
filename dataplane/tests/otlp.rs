//! OTLP export against a receiver in this test: a TCP listener that reads each
//! OTLP/HTTP POST and decodes its body with the OTLP protobuf types, as a collector does
//! (no collector binary installs here). The pushes carry the same counters the plane
//! reports, as cumulative sums; the last push, at shutdown, carries the final counts; a
//! collector that is not there costs nothing but warnings.

mod common;

use dataplane::DataPlane;
use dataplane::config::{MetricsConfig, OtlpEndpoint};
use dataplane::packet::UdpFrame;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, metric, number_data_point};
use prost::Message;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// One loopback queue pair on core 0, with `extra` lines in `cfg`.
fn yaml(extra: &str) -> String {
    common::loopback_config(&format!(
        r#"
memory_regions:
- {{name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
interfaces:
- {{name: loop0, address: loopback, tx: {{queues: [{{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}}]}}, rx: {{queues: [{{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}}]}}}}
{extra}"#
    ))
}

/// A receiver on a free port: every request's path and decoded body, on the channel.
fn receiver() -> (u16, mpsc::Receiver<(String, ExportMetricsServiceRequest)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).unwrap();
            let decoded =
                ExportMetricsServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
            stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            if tx.send((path, decoded)).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

/// The value of `metric`'s data point whose attributes include every `labels` pair.
fn point(r: &ExportMetricsServiceRequest, metric: &str, labels: &[(&str, &str)]) -> Option<i64> {
    let m = r.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == metric)?;
    let points = match m.data.as_ref()? {
        metric::Data::Sum(s) => {
            assert!(s.is_monotonic, "{metric}");
            assert_eq!(
                s.aggregation_temporality,
                AggregationTemporality::Cumulative as i32
            );
            &s.data_points
        }
        metric::Data::Gauge(g) => &g.data_points,
        other => panic!("{metric}: {other:?}"),
    };
    points
        .iter()
        .find(|p| {
            labels.iter().all(|(k, v)| {
                p.attributes.iter().any(|a| {
                    a.key == *k
                        && a.value.as_ref().and_then(|v| v.value.as_ref())
                            == Some(&any_value::Value::StringValue((*v).to_owned()))
                })
            })
        })
        .map(|p| match p.value {
            Some(number_data_point::Value::AsInt(i)) => i,
            Some(number_data_point::Value::AsDouble(d)) => d as i64,
            None => panic!("{metric}: a point without a value"),
        })
}

#[test]
fn pushes_carry_the_planes_counters_and_the_last_one_its_final_counts() {
    let (port, pushes) = receiver();
    let mut config = dataplane::config::load_str(&yaml(""), "otlp")
        .unwrap()
        .config;
    config.metrics = Some(MetricsConfig {
        otlp_endpoint: Some(OtlpEndpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap()),
        otlp_interval_ms: 50,
        ..MetricsConfig::default()
    });
    let mut plane = DataPlane::start(&config).expect("start");
    // A push arrives while the plane runs, before any traffic.
    let (path, first) = pushes
        .recv_timeout(Duration::from_secs(30))
        .expect("a push");
    assert_eq!(path, "/v1/metrics");
    let resource = first.resource_metrics[0].resource.as_ref().unwrap();
    assert!(
        resource.attributes.iter().any(|a| a.key == "service.name"
            && a.value.as_ref().and_then(|v| v.value.as_ref())
                == Some(&any_value::Value::StringValue("dataplane".into()))),
        "{resource:?}"
    );
    assert!(point(&first, "dataplane_queue_packets", &[("direction", "rx")]).is_some());
    assert_eq!(
        point(&first, "dataplane_info", &[("engine", "loopback")]),
        Some(1)
    );

    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );
    let (bursts, per_burst) = (20u64, 32usize);
    let mut received = 0u64;
    for _ in 0..bursts {
        let mut b = tx.alloc(per_burst).expect("buffers");
        for p in 0..per_burst {
            let n = frame
                .write(&[1u8; 64], b.buffer_mut(p, 0).unwrap())
                .unwrap();
            b.set_len(p, 0, n);
        }
        tx.send_within(b, Duration::from_secs(5)).expect("send");
        while let Some(b) = rx.recv(Duration::from_millis(5)).unwrap() {
            received += b.len() as u64;
        }
    }
    while received < bursts * per_burst as u64 {
        let b = rx
            .recv(Duration::from_secs(5))
            .unwrap()
            .expect("every packet arrives");
        received += b.len() as u64;
    }
    drop((tx, rx));
    plane.shutdown().expect("clean shutdown");
    // The last push (at shutdown) has the final counts: every packet sent and received.
    let last = pushes
        .try_iter()
        .last()
        .map(|(_, r)| r)
        .expect("pushes after the first");
    let sent = point(
        &last,
        "dataplane_queue_packets",
        &[("direction", "tx"), ("queue", "0")],
    );
    let got = point(
        &last,
        "dataplane_queue_packets",
        &[("direction", "rx"), ("queue", "0")],
    );
    assert_eq!((sent, got), (Some(received as i64), Some(received as i64)));
    assert_eq!(
        point(
            &last,
            "dataplane_queue_drops",
            &[("direction", "rx"), ("reason", "ring_full")]
        ),
        Some(0)
    );
}

#[test]
fn a_collector_that_is_not_there_leaves_the_plane_running() {
    // A port nobody listens on (bound, then released).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = dataplane::config::load_str(&yaml(""), "otlp")
        .unwrap()
        .config;
    config.metrics = Some(MetricsConfig {
        otlp_endpoint: Some(OtlpEndpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap()),
        otlp_interval_ms: 10,
        ..MetricsConfig::default()
    });
    let mut plane = DataPlane::start(&config).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let mut b = tx.alloc(4).unwrap();
    for p in 0..4 {
        b.set_len(p, 0, 60);
    }
    tx.send_within(b, Duration::from_secs(5)).unwrap();
    let mut got = 0;
    while got < 4 {
        got += rx
            .recv(Duration::from_secs(5))
            .unwrap()
            .expect("delivered")
            .len();
    }
    drop((tx, rx));
    plane.shutdown().expect("clean shutdown");
}

#[test]
fn the_configuration_names_a_bad_endpoint_and_a_metrics_key_without_either_export() {
    let with = |metrics: &str| {
        dataplane::config::load_str(&yaml(&format!("metrics: {metrics}")), "m.yaml")
            .err()
            .map(|e| e.to_string())
    };
    let e = with("{otlp_endpoint: \"https://collector:4318\"}").expect("refused");
    assert!(
        e.contains("metrics.otlp_endpoint") && e.contains("https is not supported"),
        "{e}"
    );
    let e = with("{otlp_interval_ms: 100}").expect("refused");
    assert!(
        e.contains("needs `listen`") && e.contains("`otlp_endpoint`"),
        "{e}"
    );
    let ok = yaml("metrics: {otlp_endpoint: \"http://collector\", otlp_interval_ms: 250}");
    let m = dataplane::config::load_str(&ok, "m.yaml")
        .unwrap()
        .config
        .metrics
        .unwrap();
    assert_eq!(
        m.otlp_endpoint.unwrap().to_string(),
        "http://collector:4318/v1/metrics"
    );
    assert_eq!(m.otlp_interval_ms, 250);
}
