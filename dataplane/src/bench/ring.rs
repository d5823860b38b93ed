//! `dataplane bench ring`: throughput of the ring behind buffer pools, single-item and in
//! bulk, with one producer and one consumer (SPSC) and with two of each (MPMC).

use crate::affinity;
use crate::ring::{Ring, Sync};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One measured case.
#[derive(Clone, Debug, Serialize)]
pub struct RingCase {
    /// Case name, e.g. `spsc bulk32`.
    pub case: String,
    /// Items moved per second (median of the repetitions).
    pub items_per_s: f64,
    /// Nanoseconds per item (from the median).
    pub ns_per_item: f64,
}

const RING_SIZE: usize = 1024;

fn one_run(producers: usize, consumers: usize, bulk: usize, items_per_producer: u64) -> f64 {
    let mode = |n| if n > 1 { Sync::Multi } else { Sync::Single };
    let ring = Arc::new(Ring::<u64>::new(
        RING_SIZE,
        mode(producers),
        mode(consumers),
    ));
    let cores = affinity::usable_cores();
    let go = Arc::new(AtomicBool::new(false));
    let total = items_per_producer * producers as u64;
    let mut threads = Vec::new();
    for p in 0..producers {
        let (ring, go, core) = (
            ring.clone(),
            go.clone(),
            cores.get(p % cores.len().max(1)).copied(),
        );
        threads.push(std::thread::spawn(move || {
            if let Some(c) = core {
                let _ = affinity::pin_current_thread(c);
            }
            let batch = vec![7u64; bulk];
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let mut sent = 0;
            while sent < items_per_producer {
                if ring.enqueue_bulk(&batch) {
                    sent += bulk as u64;
                } else {
                    std::hint::spin_loop();
                }
            }
        }));
    }
    let per_consumer = total / consumers as u64;
    for c in 0..consumers {
        let (ring, go, core) = (
            ring.clone(),
            go.clone(),
            cores.get((producers + c) % cores.len().max(1)).copied(),
        );
        threads.push(std::thread::spawn(move || {
            if let Some(core) = core {
                let _ = affinity::pin_current_thread(core);
            }
            let mut out = vec![0u64; bulk];
            while !go.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let mut got = 0;
            while got < per_consumer {
                if ring.dequeue_bulk(&mut out) {
                    got += bulk as u64;
                } else {
                    std::hint::spin_loop();
                }
            }
        }));
    }
    let start = Instant::now();
    go.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("ring bench thread");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Runs every case `reps` times and reports medians. `items` is per producer and run.
pub fn run(items: u64, reps: usize) -> Vec<RingCase> {
    let mut out = Vec::new();
    for (name, p, c) in [("spsc", 1, 1), ("mpmc 2p2c", 2, 2)] {
        for bulk in [1usize, 8, 32, 256] {
            let items = items / bulk as u64 * bulk as u64;
            let mut rates: Vec<f64> = (0..reps.max(1))
                .map(|_| one_run(p, c, bulk, items))
                .collect();
            rates.sort_by(f64::total_cmp);
            let median = rates[rates.len() / 2];
            let label = if bulk == 1 {
                format!("{name} single")
            } else {
                format!("{name} bulk{bulk}")
            };
            out.push(RingCase {
                case: label,
                items_per_s: median,
                ns_per_item: 1e9 / median,
            });
        }
    }
    out
}
