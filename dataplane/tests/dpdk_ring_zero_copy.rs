//! Zero-copy TX on real `net_ring` vdevs, both ways a region goes out without a copy: the
//! shipped TX region (16,384 buffers) lent to an mbuf pool of its own (its buffers are the
//! mbufs), and a second port's smaller region (below `TX_LEND_MIN_BUFS`) attached to mbufs
//! as external buffers. Since net_ring hands the sent mbufs to the receiver, the RX side
//! takes those buffers over (nothing copied on RX either). They arrive intact, are
//! forwarded once more as they are, arrive intact again, and every buffer is back in its
//! region's pool after shutdown, a burst held across the shutdown included. Its own
//! binary: EAL starts once per process.
#![cfg(feature = "dpdk")]

mod common;

use dataplane::plan::dpdk::TxCarry;
use dataplane::{Burst, DataPlane, RxQueue, TxFailure, config};
use std::time::{Duration, Instant};

const FRAMES: usize = 4096;
/// Frames through the port with the small (attached) region, whose 1,024 buffers must
/// hold them all at once (whole bursts of 64).
const SMALL_FRAMES: usize = 960;

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
fn verify(bursts: &[Burst], frames: usize) {
    let mut seen = vec![false; frames];
    for b in bursts {
        for i in 0..b.len() {
            let d = b.data(i, 0).expect("host memory");
            let frame = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
            assert!(
                frame < frames && !seen[frame],
                "frame {frame} twice or unknown"
            );
            seen[frame] = true;
            let len = 64 + frame % 1000;
            assert_eq!(d.len(), len, "frame {frame} length");
            assert_eq!(&d[4..], &pattern(frame, len)[4..], "frame {frame} bytes");
        }
    }
}

/// Sends `frames` numbered frames from `tx`'s region (which has buffers for all of them),
/// receives them on `rx`, forwards them as received and receives them again, checking
/// every byte both times.
fn round_trip(tx: &mut dataplane::TxQueue, rx: &mut RxQueue, frames: usize) {
    let mut frame = 0;
    let mut arrived = Vec::new();
    while frame < frames {
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
    arrived.extend(receive(rx, frames - have));
    verify(&arrived, frames);

    // Forwarded as received: the taken-over buffers go out again without a copy.
    for b in arrived {
        let mut pending = Some(b);
        while let Some(b) = pending.take() {
            if let Err(e) = tx.forward(b) {
                assert_eq!(e.reason, TxFailure::RingFull);
                pending = Some(e.burst);
            }
        }
    }
    let again = receive(rx, frames);
    verify(&again, frames);
}

#[test]
fn net_ring_sends_region_buffers_without_copying_and_returns_every_one() {
    let mut cfg = config::load_file(&common::config_path("dpdk_ring.yaml"))
        .expect("config")
        .config;
    cfg.master_core = 0;
    // A second port whose TX region is too small to be lent: attached instead.
    let mut small = cfg.memory_regions[0].clone();
    small.name = "tx_small".into();
    small.num_bufs = 1024;
    let mut rx_small = cfg.memory_regions[1].clone();
    rx_small.name = "rx_small".into();
    cfg.memory_regions.extend([small, rx_small]);
    let mut ring1 = cfg.interfaces[0].clone();
    ring1.name = "ring1".into();
    ring1.address = "net_ring1".into();
    for q in &mut ring1.tx.as_mut().unwrap().queues {
        q.memory_regions = vec!["tx_small".into()];
    }
    for q in &mut ring1.rx.as_mut().unwrap().queues {
        q.memory_regions = vec!["rx_small".into()];
    }
    cfg.interfaces.push(ring1);

    let mut plane = DataPlane::start(&cfg).expect("start");
    let carry = &plane.plan().dpdk().expect("a DPDK plan").tx_regions;
    assert_eq!(carry[0], TxCarry::Lent, "the shipped TX region is lent");
    assert_eq!(carry[2], TxCarry::Attached, "the small one is attached");
    let regions = plane.regions().clone();
    // A burst of the lent region held across the shutdown comes back when dropped.
    let mut held = None;
    for (port, frames) in [("ring0", FRAMES), ("ring1", SMALL_FRAMES)] {
        let mut tx = plane.take_tx_queue(port, 0).unwrap();
        let mut rx = plane.take_rx_queue(port, 0).unwrap();
        round_trip(&mut tx, &mut rx, frames);
        held.get_or_insert_with(|| tx.alloc(64).expect("buffers"));
    }

    let snap = plane.snapshot();
    for q in &snap.queues {
        let frames = if q.interface == "ring0" {
            FRAMES
        } else {
            SMALL_FRAMES
        };
        assert_eq!(q.packets, 2 * frames as u64, "{q:?}");
        assert_eq!(
            q.copied_packets, 0,
            "{q:?}: nothing copied (RX took the sent buffers over from net_ring's mbufs)"
        );
    }
    assert_eq!(snap.drops().total(), 0);
    plane.shutdown().expect("no worker failed");
    drop(held);
    for r in regions.iter() {
        assert_eq!(
            r.available(),
            r.num_bufs(),
            "every buffer of {} back in its pool",
            r.name()
        );
    }
}
