//! OTLP export (`metrics: otlp_endpoint` in the configuration, the CLI's `--otlp URL`): a
//! thread that pushes the same families `/metrics` serves to an OpenTelemetry collector
//! every `otlp_interval_ms`, over OTLP/HTTP with protobuf bodies (`POST .../v1/metrics`),
//! and once more when the plane shuts down, so a short run's last counts arrive too.
//!
//! The families are read from the OpenMetrics text [`render`](super::render) makes, so
//! both exports describe the plane the same way: counters become cumulative monotonic
//! sums named as the family (`dataplane_queue_packets`, without Prometheus's `_total`),
//! gauges become gauges, labels become attributes; the resource carries `service.name`
//! `dataplane`. The message types are the OTLP protobuf's (`opentelemetry-proto`); the
//! counters are already cumulative, so no SDK aggregation sits in between. Plain `http://`
//! only (a collector on the host or a sidecar); an unreachable collector costs a warning,
//! never the data path.

use super::MetricsError;
use crate::config::OtlpEndpoint;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long one push may take (connect, send, answer).
const PUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The collector's socket address.
fn address(target: &OtlpEndpoint) -> std::io::Result<SocketAddr> {
    (target.host.as_str(), target.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{} does not resolve", target.host)))
}

/// The running exporter; dropping it pushes once more and stops its thread (bounded by
/// the push timeout).
pub struct OtlpExporter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpExporter {
    /// Pushes `sources` to `target` every `interval`.
    pub fn start(
        target: &OtlpEndpoint,
        interval: Duration,
        sources: super::SharedSources,
    ) -> Result<Self, MetricsError> {
        let endpoint = target.to_string();
        let err = |reason: String| MetricsError {
            address: endpoint.clone(),
            reason,
        };
        let target = target.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let start_ns = unix_ns(SystemTime::now());
        let thread = std::thread::Builder::new()
            .name("dp-otlp".into())
            .spawn(move || push_loop(&target, interval, &sources, start_ns, &flag))
            .map_err(|e| err(e.to_string()))?;
        tracing::info!(
            "metrics: OTLP to {endpoint} every {} ms",
            interval.as_millis()
        );
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for OtlpExporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn push_loop(
    target: &OtlpEndpoint,
    interval: Duration,
    sources: &super::SharedSources,
    start_ns: u64,
    stop: &AtomicBool,
) {
    let mut failures = 0u64;
    loop {
        let until = Instant::now() + interval;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
        let last = stop.load(Ordering::Relaxed);
        let body = request(
            &super::render(sources.load_full()),
            start_ns,
            unix_ns(SystemTime::now()),
        )
        .encode_to_vec();
        match post(target, &body) {
            Ok(()) => failures = 0,
            Err(e) => {
                // The first failure of a run of them, then one in 60.
                if failures.is_multiple_of(60) {
                    tracing::warn!("metrics: OTLP push to {target} failed: {e}");
                }
                failures += 1;
            }
        }
        if last {
            return;
        }
    }
}

/// One POST of a protobuf body; an answer other than 2xx is an error.
fn post(target: &OtlpEndpoint, body: &[u8]) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&address(target)?, PUSH_TIMEOUT)?;
    s.set_read_timeout(Some(PUSH_TIMEOUT))?;
    s.set_write_timeout(Some(PUSH_TIMEOUT))?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        target.path,
        target.host,
        target.port,
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut answer = [0u8; 64];
    let n = s.read(&mut answer)?;
    let line = String::from_utf8_lossy(&answer[..n]);
    let status = line.split_whitespace().nth(1).unwrap_or("");
    if status.starts_with('2') {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the collector answered `{}`",
            line.lines().next().unwrap_or("")
        )))
    }
}

/// A family of the OpenMetrics text.
#[derive(Debug, Default, PartialEq)]
struct Family {
    name: String,
    help: String,
    counter: bool,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// The families of an OpenMetrics exposition (as [`render`](super::render) writes it).
fn families(text: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_owned(),
                help: help.to_owned(),
                ..Family::default()
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (out.last_mut(), rest.split_once(' ')) {
                f.counter = kind == "counter";
            }
        } else if !line.starts_with('#')
            && let Some(f) = out.last_mut()
            && let Some(sample) = parse_sample(line)
        {
            f.samples.push(sample);
        }
    }
    out
}

/// `name{a="x",b="y"} value` (or `name value`): its labels and value.
fn parse_sample(line: &str) -> Option<(Vec<(String, String)>, f64)> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse::<f64>().ok()?;
    let mut labels = Vec::new();
    if let Some((_, rest)) = series.split_once('{') {
        let mut chars = rest.chars().peekable();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if key.is_empty() || chars.next() != Some('"') {
                break;
            }
            let mut val = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some('n') => val.push('\n'),
                        Some(other) => val.push(other),
                        None => break,
                    },
                    '"' => break,
                    c => val.push(c),
                }
            }
            labels.push((key.trim_start_matches(',').to_owned(), val));
            if chars.peek() == Some(&',') {
                chars.next();
            } else {
                break;
            }
        }
    }
    Some((labels, value))
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// The export request for an OpenMetrics exposition read at `now_ns`, counting from
/// `start_ns`.
fn request(openmetrics: &str, start_ns: u64, now_ns: u64) -> ExportMetricsServiceRequest {
    let metrics = families(openmetrics)
        .into_iter()
        .map(|f| {
            let points = f
                .samples
                .iter()
                .map(|(labels, v)| NumberDataPoint {
                    attributes: labels.iter().map(|(k, v)| text(k, v)).collect(),
                    start_time_unix_nano: if f.counter { start_ns } else { 0 },
                    time_unix_nano: now_ns,
                    value: Some(if v.fract() == 0.0 && v.abs() < 9.0e15 {
                        number_data_point::Value::AsInt(*v as i64)
                    } else {
                        number_data_point::Value::AsDouble(*v)
                    }),
                    ..Default::default()
                })
                .collect();
            let data = if f.counter {
                metric::Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })
            } else {
                metric::Data::Gauge(Gauge {
                    data_points: points,
                })
            };
            Metric {
                name: f.name,
                description: f.help,
                data: Some(data),
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![text("service.name", "dataplane")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "dataplane".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_the_metrics_path_and_the_default_port() {
        let p = |u: &str| OtlpEndpoint::parse(u).map(|e| e.to_string());
        assert_eq!(
            p("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            p("http://collector").unwrap(),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(p("http://c:9/otlp/").unwrap(), "http://c:9/otlp/v1/metrics");
        assert_eq!(p("http://c:9/v1/metrics").unwrap(), "http://c:9/v1/metrics");
        assert_eq!(
            p("http://[::1]:4318").unwrap(),
            "http://::1:4318/v1/metrics"
        );
        assert!(
            p("https://c")
                .unwrap_err()
                .contains("https is not supported")
        );
        assert!(p("c:4318").unwrap_err().contains("expected http://"));
        assert!(p("http://c:x").unwrap_err().contains("port `x`"));
    }

    #[test]
    fn openmetrics_families_become_sums_and_gauges_with_their_labels() {
        let text = "# HELP q_packets Packets\n# TYPE q_packets counter\n\
                    q_packets_total{interface=\"a\\\"b\",queue=\"0\"} 7\n\
                    # HELP busy Seconds\n# TYPE busy gauge\nbusy 0.5\n# EOF\n";
        let r = request(text, 10, 20);
        let m = &r.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].name, "q_packets");
        let Some(metric::Data::Sum(sum)) = &m[0].data else {
            panic!("{m:?}")
        };
        assert!(sum.is_monotonic);
        let point = &sum.data_points[0];
        assert_eq!(point.value, Some(number_data_point::Value::AsInt(7)));
        assert_eq!((point.start_time_unix_nano, point.time_unix_nano), (10, 20));
        assert_eq!(
            point.attributes,
            vec![text_kv("interface", "a\"b"), text_kv("queue", "0")]
        );
        let Some(metric::Data::Gauge(g)) = &m[1].data else {
            panic!("{m:?}")
        };
        assert_eq!(
            g.data_points[0].value,
            Some(number_data_point::Value::AsDouble(0.5))
        );
    }

    fn text_kv(k: &str, v: &str) -> KeyValue {
        text(k, v)
    }
}
