//! Software classifier cost per packet: 1, 16 and 256 rules with exact ports or port
//! ranges, the packet matching the last rule (a full scan) or none; 16 and 10,000 rules
//! with exact ports, traffic hitting the first four, the last or none; and the RSS hash.
//! Run: `cargo bench -p dataplane --bench classifier`.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dataplane::config::{FlowConfig, FlowMatch, PortRange, QueueConfig, RxConfig};
use dataplane::steering::{Classifier, rss};
use std::hint::black_box;

const FRAMES: usize = 256;

fn frame(sport: u16, dport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

fn rules(n: usize, ranges: bool) -> RxConfig {
    let queue = |id| QueueConfig::new(&format!("q{id}"), id, 0, 32, &[]);
    let flows = (0..n)
        .map(|i| {
            // Ten ports a rule below 5,000 rules; one port a rule above (they must fit).
            let base = if n < 5000 {
                10_000 + (i as u16) * 10
            } else {
                1024 + i as u16
            };
            let udp_dst = if ranges {
                PortRange {
                    first: base,
                    last: base + 9,
                }
            } else {
                PortRange {
                    first: base,
                    last: base,
                }
            };
            FlowConfig {
                name: format!("f{i}"),
                id: i as u32 + 1,
                queue_ids: vec![(i % 4) as u16],
                matches: FlowMatch {
                    udp_src: Some(PortRange {
                        first: 4096,
                        last: if ranges { 4103 } else { 4096 },
                    }),
                    udp_dst: Some(udp_dst),
                    ..Default::default()
                },
                transforms: vec![],
                location: Default::default(),
            }
        })
        .collect();
    RxConfig {
        timestamps: false,
        flow_isolation: true,
        queues: (0..4).map(queue).collect(),
        flows,
        flex_items: vec![],
        exception_queue: None,
        reorder: Vec::new(),
        dynamic_flow_capacity: 0,
        descriptors: None,
    }
}

fn classify(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    g.throughput(Throughput::Elements(FRAMES as u64));
    {
        let cl = Classifier::compile(&rules(0, false), 1);
        let frames: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(4096, 2000 + i as u16)).collect();
        g.bench_with_input(BenchmarkId::new("parse_only", 0), &frames, |b, frames| {
            b.iter(|| {
                for f in frames {
                    black_box(cl.classify(black_box(f)));
                }
            })
        });
    }
    for n in [1usize, 4, 16, 256] {
        for ranges in [false, true] {
            let cfg = rules(n, ranges);
            let cl = Classifier::compile(&cfg, 1);
            let last_port = 10_000 + (n as u16 - 1) * 10;
            let hit_last: Vec<Vec<u8>> = (0..FRAMES).map(|_| frame(4096, last_port)).collect();
            let miss: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(4096, 2000 + i as u16)).collect();
            let kind = if ranges { "ranges" } else { "exact" };
            for (what, frames) in [("last_rule", &hit_last), ("no_match", &miss)] {
                g.bench_with_input(
                    BenchmarkId::new(format!("{kind}/{what}"), n),
                    frames,
                    |b, frames| {
                        b.iter(|| {
                            for f in frames {
                                black_box(cl.classify(black_box(f)));
                            }
                        })
                    },
                );
            }
        }
    }
    // Cost that must not grow with the rule count: 16 against 10,000 exact-port rules.
    for n in [16usize, 10_000] {
        let cl = Classifier::compile(&rules(n, false), 1);
        let port = |i: usize| {
            if n < 5000 {
                10_000 + (i as u16) * 10
            } else {
                1024 + i as u16
            }
        };
        let first_four: Vec<Vec<u8>> = (0..FRAMES).map(|i| frame(4096, port(i % 4))).collect();
        let last: Vec<Vec<u8>> = (0..FRAMES).map(|_| frame(4096, port(n - 1))).collect();
        let miss: Vec<Vec<u8>> = (0..FRAMES)
            .map(|i| frame(4096, 60_000 + i as u16))
            .collect();
        for (what, frames) in [
            ("first_four", &first_four),
            ("last_rule", &last),
            ("no_match", &miss),
        ] {
            g.bench_with_input(
                BenchmarkId::new(format!("scale/{what}"), n),
                frames,
                |b, frames| {
                    b.iter(|| {
                        for f in frames {
                            black_box(cl.classify(black_box(f)));
                        }
                    })
                },
            );
        }
    }
    g.finish();
}

fn rss_hash(c: &mut Criterion) {
    let mut g = c.benchmark_group("rss");
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("toeplitz_ipv4_udp", |b| {
        b.iter(|| {
            let mut acc = 0u32;
            for i in 0..FRAMES as u16 {
                acc ^= rss::hash_ipv4_udp(black_box(0x0a00_0001), 0x0a00_0002, 4096 + i, 5000);
            }
            acc
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2)).warm_up_time(std::time::Duration::from_millis(500));
    targets = classify, rss_hash
}
criterion_main!(benches);
