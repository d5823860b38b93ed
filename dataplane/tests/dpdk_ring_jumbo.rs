//! Frames larger than an RX queue's buffers on a real `net_ring` vdev: a TX queue of
//! 9000-byte buffers raises the port's MTU past the RX queue's 2048-byte buffers, so the
//! plan asks for RX scatter (net_ring offers it). Every jumbo frame sent is counted as a
//! `malformed` drop on receive, none is delivered cut, and every frame that fits arrives
//! intact. On a second port whose RX buffers hold 9000 bytes, 9000-byte frames arrive
//! whole, byte for byte. The TX regions is copied into mbufs (`zero_copy: false`): sent from attached
//! region buffers, net_ring would hand them to the receiver whole, which takes them over
//! without a copy. Its own binary: EAL starts once per process.
#![cfg(feature = "dpdk")]

#[macro_use]
mod common;

use dataplane::{DataPlane, TxFailure, config};
use std::time::{Duration, Instant};

const FRAMES: usize = 2000;

/// Frame `i`: 1500 bytes when even, 8000 when odd (too long for the RX buffers).
fn frame_len(i: usize) -> usize {
    if i.is_multiple_of(2) { 1500 } else { 8000 }
}

fn byte(i: usize, k: usize) -> u8 {
    (k * 31 + i * 7) as u8
}

#[test]
fn jumbo_frames_over_small_rx_buffers_are_counted_drops_and_the_rest_arrive_intact() {
    let text = config_yaml!(
        raw,
        0,
        r#"    memory_regions:
    - {name: rx_small, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    - {name: tx_jumbo, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000, zero_copy: false}
    - {name: rx_jumbo, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000}
    - {name: tx_jumbo1, kind: host, affinity: 0, num_bufs: 4096, buf_size: 9000, zero_copy: false}
    interfaces:
    - name: ring0
      address: net_ring0
      rx:
        descriptors: 512
        queues:
        - {name: r, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 100, memory_regions: [rx_small]}
      tx:
        queues:
        - {name: t, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [tx_jumbo]}
    - name: ring1
      address: net_ring1
      rx:
        queues:
        - {name: r, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 100, memory_regions: [rx_jumbo]}
      tx:
        queues:
        - {name: t, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [tx_jumbo1]}
"#
    );
    let cfg = config::load_str(text, "jumbo.yaml").expect("config").config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plan");
    let port = &plan.dpdk().expect("DPDK").ports[0];
    assert_eq!(port.mtu, 9000 - 14, "the TX queue's frames set the MTU");
    assert!(
        port.rx_scatter,
        "9000-byte frames over 2048-byte RX buffers"
    );
    let jumbo_port = &plan.dpdk().unwrap().ports[1];
    assert_eq!(jumbo_port.mtu, 9000 - 14);
    assert!(
        !jumbo_port.rx_scatter,
        "9000-byte frames fit 9000-byte buffers"
    );

    let mut plane = DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("ring0", 0).unwrap();
    let mut rx = plane.take_rx_queue("ring0", 0).unwrap();
    let mut received = Vec::new();
    let mut sent = 0;
    while sent < FRAMES {
        let mut b = match tx.alloc((FRAMES - sent).min(32)) {
            Ok(b) => b,
            Err(TxFailure::PoolEmpty) => {
                received.extend(rx.poll().unwrap());
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        for p in 0..b.len() {
            let i = sent + p;
            let buf = b.buffer_mut(p, 0).unwrap();
            for (k, x) in buf[..frame_len(i)].iter_mut().enumerate() {
                *x = byte(i, k);
            }
            buf[..4].copy_from_slice(&(i as u32).to_be_bytes());
            b.set_len(p, 0, frame_len(i));
        }
        sent += b.len();
        let mut pending = Some(b);
        while let Some(b) = pending.take() {
            if let Err(e) = tx.send(b) {
                assert_eq!(e.reason, TxFailure::RingFull);
                pending = Some(e.burst);
                received.extend(rx.poll().unwrap());
            }
        }
    }
    let fit = FRAMES / 2;
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.iter().map(|b| b.len()).sum::<usize>() < fit {
        assert!(
            Instant::now() < deadline,
            "the frames that fit did not all arrive"
        );
        match rx.poll().unwrap() {
            Some(b) => received.push(b),
            None => std::thread::yield_now(),
        }
    }
    let mut seen = vec![false; FRAMES];
    for b in &received {
        for p in 0..b.len() {
            let d = b.data(p, 0).expect("host memory");
            let i = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
            assert!(
                i < FRAMES && i.is_multiple_of(2) && !seen[i],
                "frame {i} unexpected"
            );
            seen[i] = true;
            assert_eq!(d.len(), frame_len(i), "frame {i} length");
            assert!(
                d[4..].iter().enumerate().all(|(k, &x)| x == byte(i, k + 4)),
                "frame {i} bytes"
            );
        }
    }
    // The drops are counted as the worker receives; give it until they all show.
    let deadline = Instant::now() + Duration::from_secs(30);
    let snap = loop {
        let snap = plane.snapshot();
        if snap.drops().malformed >= (FRAMES - fit) as u64 || Instant::now() > deadline {
            break snap;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ring0 = |dir: &str| {
        snap.queues
            .iter()
            .find(|q| q.direction == dir && q.interface == "ring0")
            .unwrap()
    };
    let tx_stats = ring0("tx");
    assert_eq!(tx_stats.packets, FRAMES as u64, "net_ring took every frame");
    let rx_stats = ring0("rx");
    assert_eq!(rx_stats.packets, fit as u64);
    assert_eq!(
        snap.drops().malformed,
        (FRAMES - fit) as u64,
        "each jumbo frame a named drop"
    );
    assert_eq!(snap.drops().total(), (FRAMES - fit) as u64, "no other drop");
    drop((tx, rx, received));

    // 9000-byte frames end to end where the RX buffers hold them: every one arrives whole.
    let mut tx = plane.take_tx_queue("ring1", 0).unwrap();
    let mut rx = plane.take_rx_queue("ring1", 0).unwrap();
    let mut got = 0;
    for i in 0..FRAMES {
        let mut b = loop {
            match tx.alloc(1) {
                Ok(b) => break b,
                Err(TxFailure::PoolEmpty) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        let buf = b.buffer_mut(0, 0).unwrap();
        for (k, x) in buf[..9000].iter_mut().enumerate() {
            *x = byte(i, k);
        }
        b.set_len(0, 0, 9000);
        tx.send(b).map_err(|e| e.reason).expect("sent");
        let deadline = Instant::now() + Duration::from_secs(30);
        let r = loop {
            assert!(Instant::now() < deadline, "jumbo frame {i} did not arrive");
            if let Some(r) = rx.poll().unwrap() {
                break r;
            }
            std::thread::yield_now();
        };
        assert_eq!(r.len(), 1);
        let d = r.data(0, 0).unwrap();
        assert_eq!(d.len(), 9000, "jumbo frame {i} length");
        assert!(
            d.iter().enumerate().all(|(k, &x)| x == byte(i, k)),
            "jumbo frame {i} bytes"
        );
        got += 1;
    }
    assert_eq!(got, FRAMES);
    drop((tx, rx));
    plane.shutdown().expect("no worker failed");
}
