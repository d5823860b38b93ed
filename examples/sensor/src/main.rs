//! A sensor application embedding `dataplane` with no optional feature: it starts the
//! software loopback from a compiled-in configuration, sends numbered samples on a TX queue,
//! receives them on an RX queue and checks that every sample arrived once, in order.
//! Exits non-zero when one is missing, duplicated or out of order.

#![forbid(unsafe_code)]

use dataplane::DataPlane;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The configuration, compiled in: `configs/loopback_1q.yaml` (one TX and one RX queue
/// on the software loopback, served by core 0).
const CONFIG: &str = include_str!("../../../configs/loopback_1q.yaml");

/// Samples sent.
const SAMPLES: u64 = 100_000;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sensor-example: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let loaded = dataplane::config::load_str(CONFIG, "embedded").map_err(|e| e.to_string())?;
    let mut plane = DataPlane::start(&loaded.config).map_err(|e| e.to_string())?;
    let mut tx = plane.take_tx_queue("loop0", 0).ok_or("no TX queue")?;
    let mut rx = plane.take_rx_queue("loop0", 0).ok_or("no RX queue")?;

    let (mut sent, mut expected) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while expected < SAMPLES {
        if Instant::now() > deadline {
            return Err(format!("only {expected} of {SAMPLES} samples arrived"));
        }
        if sent < SAMPLES
            && let Ok(mut burst) = tx.alloc((SAMPLES - sent).min(64) as usize)
        {
            for i in 0..burst.len() {
                let value = (sent + i as u64).to_le_bytes();
                let buf = burst.buffer_mut(i, 0).ok_or("TX buffer not host memory")?;
                buf[..8].copy_from_slice(&value);
                burst.set_len(i, 0, 8);
            }
            let n = burst.len() as u64;
            match tx.send(burst) {
                Ok(()) => sent += n,
                // The burst comes back; its buffers return to the pool when it drops.
                Err(e) => drop(e.burst),
            }
        }
        while let Some(burst) = rx.poll().map_err(|e| e.to_string())? {
            for i in 0..burst.len() {
                let data = burst.data(i, 0).ok_or("RX buffer not host memory")?;
                let value = u64::from_le_bytes(data[..8].try_into().map_err(|_| "short sample")?);
                if value != expected {
                    return Err(format!("sample {value} arrived where {expected} was due"));
                }
                expected += 1;
            }
        }
    }
    plane
        .shutdown()
        .map_err(|failed| format!("workers failed: {failed:?}"))?;
    println!("sensor-example: {SAMPLES} samples sent and received in order");
    Ok(())
}
