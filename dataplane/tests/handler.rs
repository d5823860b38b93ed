//! Run to completion (`delivery: handler`) on the software loopback: the worker runs the
//! application's handler on its own core, which generates on a TX queue and checks what
//! comes back on an RX queue, or forwards between interfaces; queues of both kinds share
//! a plane; a plane with handler queues and no handler does not start.

use dataplane::burst::Burst;
use dataplane::config::{self, Config, Direction};
use dataplane::plane::{DataPlane, Handler, HandlerQueues, HandlerTx, StartError};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const FRAMES: u64 = 200_000;
const PER_BURST: usize = 32;
const LEN: usize = 64;

fn config(text: &str) -> Config {
    config::load_str(text, "handler").expect("valid").config
}

/// One interface, TX and RX queue 0 on core 0, both run by the handler.
fn generate_and_check() -> String {
    common::loopback_config(
        r#"
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues: [{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs], delivery: handler}]
  rx:
    queues: [{name: rq, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs], delivery: handler}]
"#,
    )
}

/// What the handler saw, shared with the test thread.
#[derive(Default)]
struct Seen {
    sent: AtomicU64,
    received: AtomicU64,
    out_of_order: AtomicU64,
    bad_bytes: AtomicU64,
    thread: Mutex<Option<String>>,
    done: AtomicBool,
}

/// Writes a sequence number into each frame and checks that they come back in order,
/// byte for byte.
struct GenerateAndCheck {
    seen: Arc<Seen>,
    next_sent: u64,
    next_expected: u64,
}

impl Handler for GenerateAndCheck {
    fn on_burst(&mut self, burst: Burst, _tx: &mut HandlerTx<'_>) {
        *self.seen.thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        for i in 0..burst.len() {
            let bytes = burst.data(i, 0).expect("host memory");
            let seq = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            if seq != self.next_expected {
                self.seen.out_of_order.fetch_add(1, Ordering::Relaxed);
            }
            if bytes.len() != LEN || bytes[8..].iter().any(|&b| b != seq as u8) {
                self.seen.bad_bytes.fetch_add(1, Ordering::Relaxed);
            }
            self.next_expected = seq + 1;
        }
        let got = self
            .seen
            .received
            .fetch_add(burst.len() as u64, Ordering::Relaxed);
        if got + burst.len() as u64 >= FRAMES {
            self.seen.done.store(true, Ordering::Release);
        }
    }

    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        if self.next_sent >= FRAMES {
            return false;
        }
        let q = &mut tx.queues()[0];
        let n = PER_BURST.min((FRAMES - self.next_sent) as usize);
        // Buffers come back as the RX side of this same handler drops its bursts.
        let Ok(mut burst) = q.alloc_frames(n, LEN) else {
            return false;
        };
        for i in 0..n {
            let seq = self.next_sent + i as u64;
            let buf = burst.buffer_mut(i, 0).expect("host memory");
            buf[..8].copy_from_slice(&seq.to_le_bytes());
            buf[8..LEN].fill(seq as u8);
        }
        match q.send(burst) {
            Ok(()) => {
                self.next_sent += n as u64;
                self.seen.sent.store(self.next_sent, Ordering::Relaxed);
                true
            }
            // The queue's ring is full: the worker sends it further on in this pass.
            Err(_) => false,
        }
    }
}

/// Waits (bounded) for `done`; the test then checks counts, not the time it took.
fn wait_for(done: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_handler_generates_and_checks_on_the_workers_core() {
    let seen = Arc::new(Seen::default());
    let mut asked = Vec::new();
    let plane =
        DataPlane::start_with_handlers(&config(&generate_and_check()), |q: &HandlerQueues| {
            let names = |i: &str, id| format!("{i} {id}");
            asked.push((
                q.core,
                q.rx.iter()
                    .map(|r| names(&r.interface, r.queue))
                    .collect::<Vec<_>>(),
                q.tx.iter()
                    .map(|t| names(&t.interface, t.queue))
                    .collect::<Vec<_>>(),
            ));
            Ok(Box::new(GenerateAndCheck {
                seen: seen.clone(),
                next_sent: 0,
                next_expected: 0,
            }))
        })
        .expect("plane starts");
    assert_eq!(
        asked,
        vec![(0, vec!["loop0 0".to_owned()], vec!["loop0 0".to_owned()])],
        "one handler, for core 0, with what it serves"
    );
    wait_for(&seen.done);
    let snap = plane.snapshot();
    drop(plane);
    assert_eq!(seen.sent.load(Ordering::Relaxed), FRAMES);
    assert_eq!(
        seen.received.load(Ordering::Relaxed),
        FRAMES,
        "every frame came back"
    );
    assert_eq!(seen.out_of_order.load(Ordering::Relaxed), 0);
    assert_eq!(seen.bad_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(
        seen.thread.lock().unwrap().as_deref(),
        Some("dp-worker-0"),
        "the handler ran on the worker's thread"
    );
    let (rx, tx) = (queue(&snap, Direction::Rx), queue(&snap, Direction::Tx));
    assert_eq!(
        (rx, tx),
        (FRAMES, FRAMES),
        "the queues' counters saw every frame"
    );
}

fn queue(snap: &dataplane::stats::Snapshot, dir: Direction) -> u64 {
    snap.total(dir).0
}

/// One loopback port, steered by UDP port: the application sends to port 5000 on TX
/// queue 0; RX queue 0 (port 5000) is the handler's, which rewrites the destination to
/// 6000 and forwards on TX queue 1 (also the handler's); RX queue 1 (port 6000) is the
/// application's again.
fn relay() -> String {
    common::loopback_config(
        r#"
memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
interfaces:
- name: loop0
  address: loopback
  tx:
    queues:
    - {name: app_tx, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}
    - {name: relay_tx, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [bufs], delivery: handler}
  rx:
    flow_isolation: true
    queues:
    - {name: relay_rx, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs], delivery: handler}
    - {name: app_rx, id: 1, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}
    flows:
    - {name: to_relay, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
    - {name: to_app, id: 2, action: {type: queue, id: 1}, match: {udp_dst: 6000}}
"#,
    )
}

/// Where the UDP destination port sits in an untagged IPv4 frame.
const UDP_DST: std::ops::Range<usize> = 36..38;

/// Rewrites each frame's UDP destination to 6000 and forwards the burst to TX queue 1.
struct Relay {
    forwarded: Arc<AtomicU64>,
}

impl Handler for Relay {
    fn on_burst(&mut self, mut burst: Burst, tx: &mut HandlerTx<'_>) {
        let n = burst.len();
        for i in 0..n {
            burst.buffer_mut(i, 0).expect("host memory")[UDP_DST]
                .copy_from_slice(&6000u16.to_be_bytes());
        }
        let q = tx.queue(0, 1).expect("TX queue 1 is this worker's");
        match q.forward(burst) {
            Ok(()) => {
                self.forwarded.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => panic!("forward: {}", e.reason),
        }
    }
}

#[test]
fn a_handler_relays_beside_ring_queues() {
    let forwarded = Arc::new(AtomicU64::new(0));
    let f = forwarded.clone();
    let mut plane = DataPlane::start_with_handlers(&config(&relay()), move |_| {
        Ok(Box::new(Relay {
            forwarded: f.clone(),
        }))
    })
    .expect("plane starts");
    assert!(
        plane.take_rx_queue("loop0", 0).is_none(),
        "a handler queue has no application end"
    );
    assert!(plane.take_tx_queue("loop0", 1).is_none());
    let mut tx = plane.take_tx_queue("loop0", 0).expect("a ring queue");
    let mut rx = plane.take_rx_queue("loop0", 1).expect("a ring queue");
    let frame = dataplane::packet::UdpFrame::new(
        "10.0.0.1:4000".parse().unwrap(),
        "10.0.0.2:5000".parse().unwrap(),
    );
    let total = 20_000u64;
    let (mut sent, mut received) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while received < total && Instant::now() < deadline {
        if sent < total
            && let Ok(mut burst) = tx.alloc(PER_BURST)
        {
            for i in 0..PER_BURST {
                let buf = burst.buffer_mut(i, 0).unwrap();
                let h = frame.header_len();
                buf[h..h + 8].copy_from_slice(&(sent + i as u64).to_le_bytes());
                let len = frame.write_headers(buf, 8).unwrap();
                burst.set_len(i, 0, len);
            }
            if tx.send(burst).is_ok() {
                sent += PER_BURST as u64;
            }
        }
        while let Ok(Some(b)) = rx.poll() {
            for i in 0..b.len() {
                let data = b.data(i, 0).unwrap();
                assert_eq!(
                    &data[UDP_DST],
                    &6000u16.to_be_bytes(),
                    "rewritten by the relay"
                );
                let h = frame.header_len();
                let seq = u64::from_le_bytes(data[h..h + 8].try_into().unwrap());
                assert_eq!(seq, received, "relayed in order");
                received += 1;
            }
        }
    }
    drop(plane);
    assert_eq!(received, total);
    assert_eq!(forwarded.load(Ordering::Relaxed), total);
}

#[test]
fn a_refusing_factory_stops_the_start() {
    let err = DataPlane::start_with_handlers(&config(&generate_and_check()), |q| {
        Err(format!("{} TX queues are not enough", q.tx.len()).into())
    })
    .err()
    .expect("refused");
    assert_eq!(
        err.to_string(),
        "core 0's handler: 1 TX queues are not enough"
    );
}

#[test]
fn handler_queues_without_a_handler_do_not_start() {
    let err = DataPlane::start(&config(&generate_and_check()))
        .err()
        .expect("refused");
    assert!(
        matches!(err, StartError::NoHandler { core: 0, .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("loop0 rx 0") && text.contains("loop0 tx 0"),
        "{text}"
    );
    assert!(
        text.contains("start_with_handlers"),
        "says what to do: {text}"
    );
}

#[test]
fn delivery_is_read_checked_and_planned() {
    let bad = generate_and_check().replacen("delivery: handler", "delivery: inline", 1);
    let err = config::load_str(&bad, "handler")
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("tx.queues[0].delivery (line 14, column 99)"),
        "{err}"
    );
    assert!(
        err.contains("ring") && err.contains("handler"),
        "names the choices: {err}"
    );

    let plan = dataplane::plan::Plan::from_config(&config(&generate_and_check())).expect("plans");
    assert!(plan.cores.iter().all(|c| c.handler));
    assert!(
        plan.queues
            .iter()
            .all(|q| q.delivery == config::Delivery::Handler)
    );
    assert!(
        plan.human()
            .contains("run to completion by core 0's handler"),
        "{}",
        plan.human()
    );

    let ring = generate_and_check().replace(", delivery: handler", "");
    let plan = dataplane::plan::Plan::from_config(&config(&ring)).expect("plans");
    assert!(plan.cores.iter().all(|c| !c.handler), "ring is the default");
}

/// A UDP client interface sending to a server interface on 127.0.0.1, both queues run by
/// one handler on core 0 (kernel sockets: the socket engine in run to completion).
fn udp_pair(port: u16) -> String {
    common::socket_config(&format!(
        r#"
memory_regions:
- {{name: srv, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
- {{name: cli, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
interfaces:
- name: server
  address: 127.0.0.1
  socket_config: {{mode: server, local_addr: "udp://127.0.0.1:{port}"}}
  rx:
    queues: [{{name: rq, id: 0, cpu_core: 0, batch_size: 1, memory_regions: [srv], delivery: handler}}]
- name: client
  address: 127.0.0.1
  socket_config: {{mode: client, local_addr: "udp://127.0.0.1:{client}", remote_addr: "udp://127.0.0.1:{port}"}}
  tx:
    queues: [{{name: tq, id: 0, cpu_core: 0, batch_size: 1, memory_regions: [cli], delivery: handler}}]
"#,
        client = port + 1
    ))
}

/// Sends one datagram a pass while fewer than a window's worth are unanswered (so the
/// kernel's socket buffer never overflows) and checks each one received, in order.
struct WindowedUdp {
    inner: GenerateAndCheck,
    frames: u64,
}

impl Handler for WindowedUdp {
    fn on_burst(&mut self, burst: Burst, tx: &mut HandlerTx<'_>) {
        self.inner.on_burst(burst, tx);
        if self.inner.next_expected >= self.frames {
            self.inner.seen.done.store(true, Ordering::Release);
        }
    }

    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        let q = &mut tx.queues()[0];
        let sent = self.inner.next_sent;
        if sent >= self.frames || sent - self.inner.next_expected >= 64 {
            return false;
        }
        let Ok(mut burst) = q.alloc_frames(1, LEN) else {
            return false;
        };
        let buf = burst.buffer_mut(0, 0).expect("host memory");
        buf[..8].copy_from_slice(&sent.to_le_bytes());
        buf[8..LEN].fill(sent as u8);
        if q.send(burst).is_ok() {
            self.inner.next_sent += 1;
            self.inner
                .seen
                .sent
                .store(self.inner.next_sent, Ordering::Relaxed);
        }
        true
    }
}

#[test]
fn a_handler_runs_kernel_udp_sockets_a_message_at_a_time() {
    const UDP_FRAMES: u64 = 20_000;
    // A free pair of ports: bound and released (another process could take it meanwhile,
    // which would fail the start, not pass the test).
    let port = loop {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let p = probe.local_addr().unwrap().port();
        if p < u16::MAX && std::net::UdpSocket::bind(("127.0.0.1", p + 1)).is_ok() {
            break p;
        }
    };
    let seen = Arc::new(Seen::default());
    let plane = DataPlane::start_with_handlers(&config(&udp_pair(port)), |q: &HandlerQueues| {
        assert_eq!((q.rx.len(), q.tx.len()), (1, 1), "both queues on core 0");
        Ok(Box::new(WindowedUdp {
            inner: GenerateAndCheck {
                seen: seen.clone(),
                next_sent: 0,
                next_expected: 0,
            },
            frames: UDP_FRAMES,
        }))
    })
    .expect("plane starts");
    wait_for(&seen.done);
    let snap = plane.snapshot();
    drop(plane);
    assert_eq!(seen.sent.load(Ordering::Relaxed), UDP_FRAMES);
    assert_eq!(seen.received.load(Ordering::Relaxed), UDP_FRAMES);
    assert_eq!(seen.out_of_order.load(Ordering::Relaxed), 0);
    assert_eq!(seen.bad_bytes.load(Ordering::Relaxed), 0);
    assert_eq!(
        (queue(&snap, Direction::Rx), queue(&snap, Direction::Tx)),
        (UDP_FRAMES, UDP_FRAMES)
    );
    assert_eq!(snap.drops().total(), 0);
}
