//! Zero-copy TX on a real `net_ring` vdev: frames go to the device in mbufs attached to
//! the TX region's own buffers (nothing copied on TX), and since net_ring hands the sent
//! mbufs to the receiver, the RX side takes those buffers over (nothing copied on RX
//! either). They arrive intact, are forwarded once more as they are, arrive intact again,
//! and every buffer is back in its pool after shutdown. Its own binary: EAL starts once per process.
#![cfg(feature = "dpdk")]

mod common;

use dataplane::{Burst, DataPlane, RxQueue, TxFailure, config};
use std::time::{Duration, Instant};

const FRAMES: usize = 4096;

fn pattern(frame: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k * 13 + frame * 7) as u8).collect()
}

fn receive(rx: &mut RxQueue, want: usize) -> Vec<Burst> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    let mut n = 0;
    while n < want {
        assert!(
            Instant::now() < deadline,
            "only {n} of {want} frames arrived"
        );
        match rx.poll().expect("worker alive") {
            Some(b) => {
                n += b.len();
                got.push(b);
            }
            None => std::thread::yield_now(),
        }
    }
    assert_eq!(n, want, "no frame twice");
    got
}

/// Checks every byte: frame `i` carries `pattern(i)` (its number in its first 4 bytes).
fn verify(bursts: &[Burst]) {
    let mut seen = vec![false; FRAMES];
    for b in bursts {
        for i in 0..b.len() {
            let d = b.data(i, 0).expect("host memory");
            let frame = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
            assert!(
                frame < FRAMES && !seen[frame],
                "frame {frame} twice or unknown"
            );
            seen[frame] = true;
            let len = 64 + frame % 1000;
            assert_eq!(d.len(), len, "frame {frame} length");
            assert_eq!(&d[4..], &pattern(frame, len)[4..], "frame {frame} bytes");
        }
    }
}

#[test]
fn net_ring_sends_region_buffers_without_copying_and_returns_every_one() {
    let mut cfg = config::load_file(&common::config_path("dpdk_ring.yaml"))
        .expect("config")
        .config;
    cfg.master_core = 0;
    let mut plane = DataPlane::start(&cfg).expect("start");
    let regions = plane.regions().clone();
    let mut tx = plane.take_tx_queue("ring0", 0).unwrap();
    let mut rx = plane.take_rx_queue("ring0", 0).unwrap();

    // Sent from the TX region (attached to mbufs), received copied into the RX region.
    let mut frame = 0;
    let mut arrived = Vec::new();
    while frame < FRAMES {
        let mut b = loop {
            match tx.alloc(64) {
                Ok(b) => break b,
                Err(TxFailure::PoolEmpty) => arrived.extend(rx.poll().unwrap()),
                Err(e) => panic!("{e}"),
            }
        };
        for i in 0..b.len() {
            let len = 64 + (frame + i) % 1000;
            let mut bytes = pattern(frame + i, len);
            bytes[..4].copy_from_slice(&((frame + i) as u32).to_be_bytes());
            b.buffer_mut(i, 0).unwrap()[..len].copy_from_slice(&bytes);
            b.set_len(i, 0, len);
        }
        frame += b.len();
        let mut pending = Some(b);
        while let Some(b) = pending.take() {
            if let Err(e) = tx.send(b) {
                assert_eq!(e.reason, TxFailure::RingFull);
                pending = Some(e.burst);
                arrived.extend(rx.poll().unwrap());
            }
        }
    }
    let have: usize = arrived.iter().map(|b| b.len()).sum();
    arrived.extend(receive(&mut rx, FRAMES - have));
    verify(&arrived);

    // Forwarded as received: the RX region's buffers go out attached, and come back.
    for b in arrived {
        let mut pending = Some(b);
        while let Some(b) = pending.take() {
            if let Err(e) = tx.forward(b) {
                assert_eq!(e.reason, TxFailure::RingFull);
                pending = Some(e.burst);
            }
        }
    }
    let again = receive(&mut rx, FRAMES);
    verify(&again);
    drop(again);

    let snap = plane.snapshot();
    let tx_stats = snap.queues.iter().find(|q| q.direction == "tx").unwrap();
    assert_eq!(tx_stats.packets, 2 * FRAMES as u64);
    assert_eq!(tx_stats.copied_packets, 0, "TX copied no frame");
    let rx_stats = snap.queues.iter().find(|q| q.direction == "rx").unwrap();
    assert_eq!(rx_stats.packets, 2 * FRAMES as u64);
    assert_eq!(
        rx_stats.copied_packets, 0,
        "RX took the sent buffers over from net_ring's mbufs"
    );
    assert_eq!(snap.drops().total(), 0);
    drop(tx);
    drop(rx);
    plane.shutdown().expect("no worker failed");
    for r in regions.iter() {
        assert_eq!(
            r.available(),
            r.num_bufs(),
            "every buffer of {} back in its pool",
            r.name()
        );
    }
}
