//! Receiving into GPU memory: the RX queue's region is `device`, so the loopback's frames
//! are moved into GPU buffers before the application sees them (the burst's bytes are then
//! device addresses, ready for a kernel on `Burst::gpu_stream`). Without a CUDA driver the
//! example says so and exits 0.
//!
//! `cargo run --release -p dataplane --example gpu_region`

use dataplane::DataPlane;
use dataplane::packet::UdpFrame;
use std::time::Duration;

/// The configuration, compiled in: `configs/loopback_gpu.yaml`.
const CONFIG: &str = include_str!("../../configs/loopback_gpu.yaml");

fn main() {
    if !gpudirect::driver_present() {
        println!("gpu_region: SKIP, no CUDA driver found (the example needs an NVIDIA GPU)");
        return;
    }
    let config = dataplane::config::load_str(CONFIG, "gpu_region")
        .expect("valid configuration")
        .config;
    let mut plane = DataPlane::start(&config).expect("plane starts");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );
    let mut burst = tx.alloc(64).unwrap();
    for i in 0..64 {
        let len = frame
            .write(&[i as u8; 900], burst.buffer_mut(i, 0).unwrap())
            .unwrap();
        burst.set_len(i, 0, len);
    }
    tx.send_within(burst, Duration::from_secs(5)).unwrap();
    let mut got = 0;
    while got < 64 {
        let burst = rx
            .recv(Duration::from_secs(5))
            .expect("plane running")
            .expect("frames arrive");
        for i in 0..burst.len() {
            assert!(burst.data(i, 0).is_none(), "the bytes are in GPU memory");
            assert_eq!(burst.packets()[i].len(), frame.header_len() + 900);
        }
        got += burst.len();
        println!(
            "burst of {} in GPU memory, first at device address {:#x}, written on stream {:?}",
            burst.len(),
            burst.segment_addr(0, 0),
            burst.gpu_stream()
        );
    }
    plane.shutdown().expect("no worker failed");
}
