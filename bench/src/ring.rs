//! `dataplane bench ring`: throughput of the ring behind buffer pools, single-item and in
//! bulk: on one thread (enqueue then dequeue, nothing shared), with one producer and one
//! consumer on two cores (SPSC), and with two of each (MPMC).
//!
//! Pair cases report two figures: wall-clock ns per item, and the sum of the producer's and
//! the consumer's own ns per item. The second is how DPDK's `ring_perf_autotest` reports its
//! two-core case (cycles of the enqueue side plus cycles of the dequeue side), so
//! `scripts/ring_compare.sh` can put the two side by side without conversion errors.

#![forbid(unsafe_code)]

use dataplane::affinity;
use dataplane::ring::{Consumer, Mode, Producer, split};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Ring size used by DPDK's `ring_perf_autotest`, our default for comparability.
pub const DEFAULT_RING_SIZE: usize = 4096;

/// One measured case.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct RingCase {
    /// Case name, e.g. `spsc bulk32`, `same-thread bulk32`, `mpmc 2p2c bulk8`.
    pub case: String,
    /// Items per operation (1 for single).
    pub bulk: usize,
    /// Items moved per second (median of the repetitions).
    pub items_per_s: f64,
    /// Wall-clock nanoseconds per item (from the median).
    pub ns_per_item: f64,
    /// Producer's plus consumer's own ns per item (median), as DPDK reports its two-core
    /// case; equal to `ns_per_item` for the same-thread case.
    pub enq_plus_deq_ns: f64,
}

/// Options of a run.
#[derive(Clone, Copy, Debug)]
pub struct RingBenchOptions {
    /// Items per producer and run.
    pub items: u64,
    /// Repetitions per case; the median is reported.
    pub reps: usize,
    /// Ring slots.
    pub ring_size: usize,
}

struct Sample {
    items_per_s: f64,
    enq_plus_deq_ns: f64,
}

/// Single-item cases use the single-item calls, as a user of one item at a time would.
#[inline]
fn put(ring: &Producer<u64>, batch: &[u64]) -> bool {
    if let [one] = batch {
        ring.enqueue(*one)
    } else {
        ring.enqueue_bulk(batch)
    }
}

#[inline]
fn take(ring: &Consumer<u64>, out: &mut [u64]) -> bool {
    if let [one] = out {
        ring.dequeue().map(|v| *one = v).is_some()
    } else {
        ring.dequeue_bulk(out)
    }
}

fn spin_until(go: &AtomicBool) {
    while !go.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
}

fn same_thread_run(opts: &RingBenchOptions, bulk: usize) -> Sample {
    // On its own thread: pinning the caller would narrow the affinity that later threads
    // inherit.
    let opts = *opts;
    let core = affinity::usable_cores().first().copied();
    std::thread::spawn(move || {
        if let Some(core) = core {
            let _ = affinity::pin_current_thread(core);
        }
        same_thread_loop(&opts, bulk)
    })
    .join()
    .expect("ring bench thread")
}

fn same_thread_loop(opts: &RingBenchOptions, bulk: usize) -> Sample {
    let (producer, consumer) =
        split::<u64>(opts.ring_size, Mode::Single, Mode::Single).expect("ring size checked");
    let batch = vec![7u64; bulk];
    let mut out = vec![0u64; bulk];
    let rounds = (opts.items / bulk as u64).max(1);
    let start = Instant::now();
    for _ in 0..rounds {
        let ok = put(&producer, std::hint::black_box(&batch));
        let ok2 = take(&consumer, std::hint::black_box(&mut out));
        assert!(ok && ok2, "an empty ring takes and gives back one bulk");
    }
    let secs = start.elapsed().as_secs_f64();
    let items = (rounds * bulk as u64) as f64;
    Sample {
        items_per_s: items / secs,
        enq_plus_deq_ns: secs * 1e9 / items,
    }
}

fn threaded_run(
    opts: &RingBenchOptions,
    producers: usize,
    consumers: usize,
    bulk: usize,
) -> Sample {
    let mode = |n| if n > 1 { Mode::Multi } else { Mode::Single };
    let (producer, consumer) =
        split::<u64>(opts.ring_size, mode(producers), mode(consumers)).expect("ring size checked");
    // One handle per thread: a single side has one, a multi side clones.
    let mut producer_ends = vec![producer];
    while producer_ends.len() < producers {
        producer_ends.push(producer_ends[0].try_clone().expect("multi producer"));
    }
    let mut consumer_ends = vec![consumer];
    while consumer_ends.len() < consumers {
        consumer_ends.push(consumer_ends[0].try_clone().expect("multi consumer"));
    }
    let cores = affinity::usable_cores();
    let core_for = |i: usize| cores.get(i % cores.len().max(1)).copied();
    let go = Arc::new(AtomicBool::new(false));
    let per_producer = opts.items / bulk as u64 * bulk as u64;
    let total = per_producer * producers as u64;
    let per_consumer = total / consumers as u64;
    let mut threads = Vec::new();
    for (p, ring) in producer_ends.into_iter().enumerate() {
        let (go, core) = (go.clone(), core_for(p));
        threads.push(std::thread::spawn(move || {
            if let Some(c) = core {
                let _ = affinity::pin_current_thread(c);
            }
            let batch = vec![7u64; bulk];
            spin_until(&go);
            let start = Instant::now();
            let mut sent = 0;
            while sent < per_producer {
                if put(&ring, &batch) {
                    sent += bulk as u64;
                } else {
                    std::hint::spin_loop();
                }
            }
            start.elapsed().as_secs_f64() * 1e9 / per_producer as f64
        }));
    }
    for (c, ring) in consumer_ends.into_iter().enumerate() {
        let (go, core) = (go.clone(), core_for(producers + c));
        threads.push(std::thread::spawn(move || {
            if let Some(core) = core {
                let _ = affinity::pin_current_thread(core);
            }
            let mut out = vec![0u64; bulk];
            spin_until(&go);
            let start = Instant::now();
            let mut got = 0;
            while got < per_consumer {
                if take(&ring, &mut out) {
                    got += bulk as u64;
                } else {
                    std::hint::spin_loop();
                }
            }
            start.elapsed().as_secs_f64() * 1e9 / per_consumer as f64
        }));
    }
    let start = Instant::now();
    go.store(true, Ordering::Release);
    let per_thread: Vec<f64> = threads
        .into_iter()
        .map(|t| t.join().expect("ring bench thread"))
        .collect();
    let secs = start.elapsed().as_secs_f64();
    // Mean over producers plus mean over consumers: one enqueue side and one dequeue side.
    let (prod, cons) = per_thread.split_at(producers);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    Sample {
        items_per_s: total as f64 / secs,
        enq_plus_deq_ns: mean(prod) + mean(cons),
    }
}

fn median_case(
    case: String,
    bulk: usize,
    reps: usize,
    mut run: impl FnMut() -> Sample,
) -> RingCase {
    let mut samples: Vec<Sample> = (0..reps.max(1)).map(|_| run()).collect();
    samples.sort_by(|a, b| a.items_per_s.total_cmp(&b.items_per_s));
    let rate = samples[samples.len() / 2].items_per_s;
    let mut pair: Vec<f64> = samples.iter().map(|s| s.enq_plus_deq_ns).collect();
    pair.sort_by(f64::total_cmp);
    RingCase {
        case,
        bulk,
        items_per_s: rate,
        ns_per_item: 1e9 / rate,
        enq_plus_deq_ns: pair[pair.len() / 2],
    }
}

fn label(prefix: &str, bulk: usize) -> String {
    if bulk == 1 {
        format!("{prefix} single")
    } else {
        format!("{prefix} bulk{bulk}")
    }
}

/// Runs every case and reports medians; `on_case` sees each case as it finishes.
pub fn run(opts: RingBenchOptions, mut on_case: impl FnMut(&RingCase)) -> Vec<RingCase> {
    let mut out = Vec::new();
    let mut done = |case: RingCase| {
        on_case(&case);
        out.push(case);
    };
    for bulk in [1usize, 8, 32] {
        done(median_case(
            label("same-thread", bulk),
            bulk,
            opts.reps,
            || same_thread_run(&opts, bulk),
        ));
    }
    for (name, p, c) in [("spsc", 1, 1), ("mpmc 2p2c", 2, 2)] {
        for bulk in [1usize, 8, 32, 256] {
            done(median_case(label(name, bulk), bulk, opts.reps, || {
                threaded_run(&opts, p, c, bulk)
            }));
        }
    }
    out
}
