//! What an embedding application relies on: once the plane is shut down, a sender and a
//! receiver that are waiting end with `Stopped` instead of waiting forever, and what the
//! plane delivered before still comes out first.

mod common;

use dataplane::{DataPlane, RecvError, TxFailure};
use std::time::Duration;

static CONFIG: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    common::loopback_config(
        r#"
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 2048, buf_size: 256}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}]
  rx:
    queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 100, memory_regions: [bufs]}]
"#,
    )
});

#[test]
fn waiting_senders_and_receivers_end_with_stopped_after_shutdown() {
    let config = dataplane::config::load_str(&CONFIG, "embedding")
        .unwrap()
        .config;
    let mut plane = DataPlane::start(&config).unwrap();
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    // Nobody reads the RX queue while the sender runs: buffers run out and the rings fill,
    // so the sender ends up waiting (for buffers or for room) when the plane stops.
    let sender = std::thread::spawn(move || {
        let mut sent = 0u64;
        loop {
            let burst = match tx.alloc(32) {
                Ok(b) => b,
                Err(TxFailure::PoolEmpty) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return (sent, e),
            };
            let mut burst = burst;
            for i in 0..burst.len() {
                burst.set_len(i, 0, 64);
            }
            match tx.send_within(burst, Duration::from_secs(3600)) {
                Ok(()) => sent += 32,
                Err(e) => return (sent, e.reason),
            }
        }
    });
    // Let the sender fill what it can, then stop the plane under it.
    while plane.snapshot().total(dataplane::config::Direction::Tx).0 < 256 {
        std::thread::sleep(Duration::from_millis(1));
    }
    plane.shutdown().expect("no worker failed");
    let (sent, why) = sender.join().unwrap();
    assert_eq!(why, TxFailure::Stopped, "the sender ends with Stopped");
    // Everything the plane delivered comes out, then Stopped; nothing waits an hour.
    let mut received = 0u64;
    loop {
        match rx.recv(Duration::from_secs(3600)) {
            Ok(Some(b)) => received += b.len() as u64,
            Ok(None) => panic!("recv timed out instead of reporting Stopped"),
            Err(e) => {
                assert_eq!(e, RecvError::Stopped);
                break;
            }
        }
    }
    assert!(
        received > 0 && received <= sent,
        "received {received} of {sent}"
    );
}
