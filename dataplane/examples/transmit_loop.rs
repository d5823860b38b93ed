//! A transmit loop that fills payloads in place (as a producer writing into the buffers
//! would) and puts the headers in front with `UdpFrame::write_headers`; the TX queue's
//! counters confirm every frame left, and a send after shutdown fails with `Stopped`.
//!
//! `cargo run --release -p dataplane --example transmit_loop`

use dataplane::packet::UdpFrame;
use dataplane::{DataPlane, TxFailure};
use std::time::Duration;

/// The configuration, compiled in: `configs/loopback_1q.yaml`.
const CONFIG: &str = include_str!("../../configs/loopback_1q.yaml");

const BURSTS: usize = 500;
const PER_BURST: usize = 128;
const PAYLOAD: usize = 1000;

fn main() {
    let config = dataplane::config::load_str(CONFIG, "transmit_loop")
        .expect("valid configuration")
        .config;
    let mut plane = DataPlane::start(&config).expect("plane starts");
    let mut tx = plane.take_tx_queue("loop0", 0).expect("TX queue 0");
    let mut rx = plane.take_rx_queue("loop0", 0).expect("RX queue 0");
    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );
    let h = frame.header_len();
    let mut received = 0usize;
    for b in 0..BURSTS {
        // Buffers come back when the receiving side is done with them: while the pool is
        // empty, drain the RX queue.
        let mut burst = loop {
            match tx.alloc(PER_BURST) {
                Ok(burst) => break burst,
                Err(TxFailure::PoolEmpty) => {
                    if let Some(burst) = rx.recv(Duration::from_millis(10)).expect("running") {
                        received += burst.len();
                    }
                }
                Err(e) => panic!("alloc: {e}"),
            }
        };
        for i in 0..PER_BURST {
            let buf = burst.buffer_mut(i, 0).expect("host memory");
            // The payload first, where it will stay...
            buf[h..h + PAYLOAD].fill((b + i) as u8);
            // ...then the headers in front of it, checksums over it.
            let len = frame.write_headers(buf, PAYLOAD).unwrap();
            burst.set_len(i, 0, len);
        }
        tx.send_within(burst, Duration::from_secs(5))
            .expect("sent within 5 s");
        // The loopback hands the buffers to the RX queue: drain it so they come back.
        while let Ok(Some(burst)) = rx.poll() {
            received += burst.len();
        }
    }
    while received < BURSTS * PER_BURST {
        match rx.recv(Duration::from_secs(5)).expect("plane running") {
            Some(burst) => received += burst.len(),
            None => panic!("only {received} frames came back"),
        }
    }
    let sent = plane.snapshot().total(dataplane::config::Direction::Tx).0;
    assert_eq!(
        sent,
        (BURSTS * PER_BURST) as u64,
        "the TX queue counted them all"
    );
    plane.shutdown().expect("no worker failed");
    // Buffers can still be taken (the pool outlives the plane), but nothing is sent.
    let burst = tx.alloc(1).expect("the pool is still there");
    let sent_after = tx.send_within(burst, Duration::from_secs(60));
    assert_eq!(
        sent_after.map_err(|e| e.reason),
        Err(TxFailure::Stopped),
        "a send after shutdown fails at once"
    );
    println!(
        "transmit_loop: {sent} frames of {} bytes sent and counted",
        h + PAYLOAD
    );
}
