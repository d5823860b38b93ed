//! A receive loop: one thread sends frames on the software loopback, the main thread takes
//! them with `RxQueue::recv` (which waits without spinning a core forever), reads each with
//! the packet parser, and ends when the plane is shut down (`RecvError::Stopped`).
//!
//! `cargo run --release -p dataplane --example receive_loop`

use dataplane::packet::{UdpFrame, parse};
use dataplane::{DataPlane, RecvError};
use std::time::Duration;

/// The configuration, compiled in: `configs/loopback_1q.yaml`.
const CONFIG: &str = include_str!("../../configs/loopback_1q.yaml");

const FRAMES: u32 = 10_000;

fn main() {
    let config = dataplane::config::load_str(CONFIG, "receive_loop")
        .expect("valid configuration")
        .config;
    let mut plane = DataPlane::start(&config).expect("plane starts");
    let mut rx = plane.take_rx_queue("loop0", 0).expect("RX queue 0");
    let mut tx = plane.take_tx_queue("loop0", 0).expect("TX queue 0");
    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );

    let sender = std::thread::spawn(move || {
        let mut next = 0u32;
        while next < FRAMES {
            let n = (FRAMES - next).min(32) as usize;
            let mut burst = tx.alloc(n).expect("free buffers");
            for i in 0..n {
                let buf = burst.buffer_mut(i, 0).expect("host memory");
                let len = frame.write(&(next + i as u32).to_be_bytes(), buf).unwrap();
                burst.set_len(i, 0, len);
            }
            tx.send_within(burst, Duration::from_secs(5))
                .expect("sent within 5 s");
            next += n as u32;
        }
    });

    let mut expected = 0u32;
    while expected < FRAMES {
        let Some(burst) = rx.recv(Duration::from_secs(5)).expect("plane running") else {
            panic!("nothing arrived for 5 s after frame {expected}");
        };
        for i in 0..burst.len() {
            let view = parse(burst.data(i, 0).expect("host memory")).expect("valid frame");
            let seq = u32::from_be_bytes(view.payload.try_into().expect("4-byte payload"));
            assert_eq!(seq, expected, "frames arrive in order");
            expected += 1;
        }
    }
    sender.join().unwrap();
    plane.shutdown().expect("no worker failed");
    // After the shutdown the loop's next wait ends at once instead of hanging.
    assert_eq!(
        rx.recv(Duration::from_secs(60)).err(),
        Some(RecvError::Stopped)
    );
    println!("receive_loop: {FRAMES} frames received in order, then Stopped");
}
