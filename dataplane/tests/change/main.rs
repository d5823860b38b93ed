//! Changing a running plane (`DataPlane::change`) under traffic on the software loopback:
//! the queues the change does not touch lose nothing and keep their order, a flow moved
//! to another queue loses nothing between the two, a removed queue hands over all it
//! held; and a change the running plane cannot make is refused whole, naming each key.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod regions;

use common::traffic::{Seen, Traffic, flowing, frame, receive_on};
use dataplane::config::{self, Config};
use dataplane::{ChangeError, DataPlane, RecvError};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One TX queue, three RX queues steered by UDP destination port; `FLOWS` and `QUEUE2`
/// are replaced per configuration.
const BASE: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 8192, buf_size: 256}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
        - {name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}
      rx:
        flow_isolation: true
        queues:
        - {name: q0, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}
        - {name: q1, id: 1, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}
QUEUE2
        flows:
FLOWS
"#
);

const QUEUE2: &str = "        - {name: q2, id: 2, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}";

/// Ports 5000 to q0, 5001 to q1, 5002 to q2; 5003 and 5004 match nothing.
const BEFORE: &str = r#"        - {name: f0, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
        - {name: f1, id: 2, action: {type: queue, id: 1}, match: {udp_dst: 5001}}
        - {name: f2, id: 3, action: {type: queue, id: 2}, match: {udp_dst: 5002}}"#;

/// q2 and its flow go; f1 widens to 5001-5003 (so 5002 moves to q1); f3 takes 5004 to q0.
const AFTER: &str = r#"        - {name: f0, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
        - {name: f1, id: 2, action: {type: queue, id: 1}, match: {udp_dst: "5001-5003"}}
        - {name: f3, id: 4, action: {type: queue, id: 0}, match: {udp_dst: 5004}}"#;

const PORTS: [u16; 5] = [5000, 5001, 5002, 5003, 5004];

fn config(queue2: bool, flows: &str) -> Config {
    let queue2 = if queue2 {
        format!("{QUEUE2}\n")
    } else {
        String::new()
    };
    let text = BASE.replace("QUEUE2\n", &queue2).replace("FLOWS", flows);
    config::load_with(&text, "change.yaml", &|core| core < 2)
        .expect("loads")
        .config
}

#[test]
fn a_change_under_traffic_loses_nothing_on_the_queues_it_keeps() {
    let mut plane = DataPlane::start(&config(true, BEFORE)).expect("starts");
    let tx = plane.take_tx_queue("loop0", 0).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let receivers: Vec<_> = (0..3)
        .map(|q| receive_on(&mut plane, "loop0", q, &done))
        .collect();
    // The sender cycles over the five ports, each with its own sequence.
    let traffic = Traffic::start(tx, &PORTS);
    traffic.wait_for(50_000);
    let report = plane.change(&config(false, AFTER)).expect("a live change");
    traffic.wait_for(traffic.sent() + 50_000);
    let (next, counters) = traffic.finish_on(&plane, &done);
    let seen: Vec<Seen> = receivers.into_iter().map(|r| r.join().unwrap()).collect();
    plane.shutdown().unwrap();

    eprintln!("report: {report:?}");
    let rules = &report.change.rules[0];
    assert_eq!(
        (&rules.added, &rules.removed, &rules.changed),
        (
            &vec!["f3".to_owned()],
            &vec!["f2".to_owned()],
            &vec!["f1".to_owned()]
        )
    );
    assert_eq!(report.removed.len(), 1, "{:?}", report.removed);
    let q2 = &report.removed[0];
    assert!(q2.id == 2 && q2.drained && q2.dropped == 0, "{q2:?}");
    assert_eq!(report.stopped_cores, [1], "q2's core serves nothing else");

    let all =
        |port: u16| (0..next[PORTS.iter().position(|&p| p == port).unwrap()]).collect::<Vec<u64>>();
    // Untouched: every packet of 5000 on q0 and of 5001 on q1, in order.
    assert_eq!(seen[0][&5000], all(5000), "q0 lost or reordered port 5000");
    assert_eq!(seen[1][&5001], all(5001), "q1 lost or reordered port 5001");
    // Moved: 5002 went to q2 until the change, then to q1, none lost or repeated.
    let (on_q2, on_q1) = (&seen[2][&5002], &seen[1][&5002]);
    assert!(
        !on_q2.is_empty() && !on_q1.is_empty(),
        "{} on q2, {} on q1",
        on_q2.len(),
        on_q1.len()
    );
    let joined: Vec<u64> = on_q2.iter().chain(on_q1).copied().collect();
    assert_eq!(joined, all(5002), "port 5002 across the move");
    assert_eq!(on_q2.len() as u64, q2.packets, "q2's count");
    // New: 5003 and 5004 arrive in order from some point on; before it they had no flow.
    let mut no_flow = 0;
    for (port, q) in [(5003u16, 1usize), (5004, 0)] {
        let got = seen[q].get(&port).cloned().unwrap_or_default();
        let total = all(port).len() as u64;
        assert!(!got.is_empty(), "nothing on port {port} after the change");
        let first = got[0];
        assert_eq!(
            got,
            (first..total).collect::<Vec<_>>(),
            "port {port} after the change"
        );
        no_flow += first;
    }
    let drops: u64 = counters.queues.iter().map(|q| q.drops.no_flow).sum();
    assert_eq!(
        drops, no_flow,
        "packets without a flow are counted, each one"
    );
    let other: u64 = counters
        .queues
        .iter()
        .map(|q| q.drops.total() - q.drops.no_flow)
        .sum();
    assert_eq!(other, 0, "no drop of any other cause: {counters:?}");
}

#[test]
fn a_change_the_running_plane_cannot_make_is_refused_whole() {
    let mut plane = DataPlane::start(&config(true, BEFORE)).expect("starts");
    let before = plane.config().interfaces[0]
        .rx
        .as_ref()
        .unwrap()
        .flows
        .len();
    // A region resized under the queues that keep running, a queue's new batch size
    // and a new rule together: refused, naming each.
    let mut new = config(
        true,
        AFTER.replace("id: 2, action", "id: 9, action").as_str(),
    );
    new.memory_regions[0].num_bufs = 4096;
    let text = BASE
        .replace(
            "QUEUE2\n",
            &format!("{}\n", QUEUE2.replace("batch_size: 32", "batch_size: 16")),
        )
        .replace("FLOWS", AFTER);
    let rebatched = config::load_with(&text, "change.yaml", &|core| core < 2)
        .unwrap()
        .config;
    for (cfg, needles) in [
        (
            &new,
            &[
                "interfaces `loop0` rx queue 0: changed (memory_regions): a running queue keeps its settings",
                "interfaces `loop0` tx queue 0: changed (memory_regions)",
            ][..],
        ),
        (
            &rebatched,
            &[
                "interfaces `loop0` rx queue 2: changed (batch_size): a running queue keeps its settings",
            ][..],
        ),
    ] {
        match plane.change(cfg) {
            Err(ChangeError::NotLive(why)) => {
                let text = why
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join("\n");
                for n in needles {
                    assert!(text.contains(n), "`{n}` missing in:\n{text}");
                }
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Nothing changed: the old rules still steer.
    assert_eq!(plane.steering_epoch("loop0"), Some(1));
    assert_eq!(
        plane.config().interfaces[0]
            .rx
            .as_ref()
            .unwrap()
            .flows
            .len(),
        before
    );
    // The same configuration is an empty change.
    let report = plane.change(&config(true, BEFORE)).expect("nothing to do");
    assert!(
        report.change.is_empty() && report.removed.is_empty(),
        "{report:?}"
    );
    plane.shutdown().unwrap();
}

#[test]
fn removing_a_socket_queue_is_refused_with_the_reason() {
    let q = |id: u16| {
        format!(
            "    - {{name: q{id}, id: {id}, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}}\n"
        )
    };
    let two = udp_server(5621, &format!("  queues:\n{}{}", q(0), q(1)));
    let one = udp_server(5621, &format!("  queues:\n{}", q(0)));
    let plan = |c: &Config| dataplane::plan::Plan::from_config(c).unwrap();
    let change =
        dataplane::plan::change::PlanChange::between((&two, &plan(&two)), (&one, &plan(&one)));
    let why: Vec<String> = change.not_live.iter().map(|n| n.to_string()).collect();
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(
        why[0].starts_with("interfaces `s0` rx queue 1: removed: an RX queue of a UDP interface reads a socket of its SO_REUSEPORT group"),
        "{why:?}"
    );
}

/// A UDP server gets an RX queue (no socket of its own: a rule moves a peer's flow to it)
/// and a TX queue while two peers send: the kept queue gets every datagram of the peer it
/// keeps, in order; the moved flow arrives whole, its first part on the old queue and the
/// rest on the new one; the added TX queue answers. The peers send at most 256 datagrams
/// ahead of what the queues received, so the kernel drops nothing.
#[test]
fn a_udp_server_takes_queues_added_under_traffic() {
    const EACH: u64 = 20_000;
    let peers = [0, 1].map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
    let from = peers.each_ref().map(|p| p.local_addr().unwrap().port());
    let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = free.local_addr().unwrap().port();
    drop(free);
    // With q1 (flow b moved to it) and with t0.
    let server = |with_q1: bool, with_t0: bool| {
        let (q1, b_to) = match with_q1 {
            true => (
                "    - {name: q1, id: 1, cpu_core: 1, batch_size: 8, timeout_us: 50, memory_regions: [bufs]}\n",
                1,
            ),
            false => ("", 0),
        };
        let tx = match with_t0 {
            true => {
                "  tx:\n    queues:\n    - {name: t0, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [bufs]}\n"
            }
            false => "",
        };
        let rx = format!(
            r#"  flow_isolation: true
  queues:
    - {{name: q0, id: 0, cpu_core: 0, batch_size: 8, timeout_us: 50, memory_regions: [bufs]}}
{q1}  flows:
    - {{name: a, id: 1, action: {{type: queue, id: 0}}, match: {{udp_src: {}}}}}
    - {{name: b, id: 2, action: {{type: queue, id: {b_to}}}, match: {{udp_src: {}}}}}"#,
            from[0], from[1]
        );
        udp_server_with(at, &rx, tx)
    };
    let mut plane = DataPlane::start(&server(false, false)).expect("starts");
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let take = |queue: dataplane::RxQueue| {
        let (received, done) = (received.clone(), done.clone());
        std::thread::spawn(move || receive_datagrams(queue, &received, &done))
    };
    let q0 = take(plane.take_rx_queue("s0", 0).unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let senders: Vec<_> = peers
        .each_ref()
        .map(|p| p.try_clone().unwrap())
        .into_iter()
        .enumerate()
        .map(|(peer, socket)| {
            let (sent, received) = (sent.clone(), received.clone());
            std::thread::spawn(move || {
                for seq in 0..EACH {
                    while sent.load(Ordering::Acquire) > received.load(Ordering::Acquire) + 256 {
                        std::thread::yield_now();
                    }
                    let mut d = vec![peer as u8];
                    d.extend_from_slice(&seq.to_le_bytes());
                    socket.send_to(&d, ("127.0.0.1", at)).unwrap();
                    sent.fetch_add(1, Ordering::AcqRel);
                }
            })
        })
        .collect();
    while sent.load(Ordering::Acquire) < EACH / 2 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let report = plane
        .change(&server(true, true))
        .expect("adds q1 and t0 live");
    assert_eq!(report.added.queues, 2, "{report:?}");
    assert!(
        report
            .change
            .human()
            .contains("s0 rx queue 1: added (no socket of its own"),
        "{}",
        report.change.human()
    );
    let q1 = take(plane.take_rx_queue("s0", 1).unwrap());
    for s in senders {
        s.join().unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::Acquire) < 2 * EACH && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The added TX queue answers the peer the server heard from last.
    let now = received.load(Ordering::Acquire);
    peers[0].send_to(b"last", ("127.0.0.1", at)).unwrap();
    while received.load(Ordering::Acquire) == now && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut t0 = plane.take_tx_queue("s0", 0).expect("the added TX queue");
    common::send_frames(&mut t0, &[b"answer".to_vec()]);
    peers[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = peers[0].recv_from(&mut buf).expect("the answer");
    assert_eq!(&buf[..n], b"answer");
    // Both added queues go as they came: q1 reads no socket, so it hands over what it
    // holds and stops (its receiver then ends), and flow b is back on q0.
    let report = plane
        .change(&server(false, false))
        .expect("removes t0 and q1 live");
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert!(report.removed.iter().all(|r| r.drained), "{report:?}");
    let b = t0.alloc(1).expect("its buffers are the plane's");
    assert!(t0.send(b).is_err(), "a removed TX queue takes nothing");
    let q1 = q1.join().unwrap();
    let now = received.load(Ordering::Acquire);
    peers[1].send_to(b"back", ("127.0.0.1", at)).unwrap();
    while received.load(Ordering::Acquire) == now && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        received.load(Ordering::Acquire),
        now + 1,
        "flow b reaches q0 again"
    );
    done.store(true, Ordering::Release);
    let q0 = q0.join().unwrap();
    let all: Vec<u64> = (0..EACH).collect();
    assert_eq!(
        q0.get(&0),
        Some(&all),
        "the kept flow, whole and in order on q0"
    );
    assert!(!q1.contains_key(&0), "the kept flow stays on q0");
    let moved_before = q0.get(&1).cloned().unwrap_or_default();
    let moved_after = q1.get(&1).cloned().unwrap_or_default();
    assert!(
        !moved_after.is_empty(),
        "the moved flow reaches q1 after the change"
    );
    assert_eq!(
        [moved_before, moved_after].concat(),
        all,
        "the moved flow, whole: its first part on q0, the rest on q1"
    );
    plane.shutdown().unwrap();
}

/// Datagrams `[peer, seq (8 bytes LE)]` per peer in arrival order, until `done`.
fn receive_datagrams(
    mut rx: dataplane::RxQueue,
    received: &AtomicU64,
    done: &AtomicBool,
) -> BTreeMap<u8, Vec<u64>> {
    let mut seen: BTreeMap<u8, Vec<u64>> = BTreeMap::new();
    loop {
        match rx.recv(Duration::from_millis(20)) {
            Ok(Some(b)) => {
                for i in 0..b.len() {
                    let d = b.data(i, 0).unwrap();
                    if d.len() == 9 {
                        let seq = u64::from_le_bytes(d[1..9].try_into().unwrap());
                        seen.entry(d[0]).or_default().push(seq);
                    }
                }
                received.fetch_add(b.len() as u64, Ordering::AcqRel);
            }
            Ok(None) if done.load(Ordering::Acquire) => return seen,
            Ok(None) => {}
            Err(RecvError::Stopped) => return seen,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_removed_tx_queue_stops_its_sender_and_later_rule_changes_still_take() {
    let mut plane = DataPlane::start(&loop_config(true, false, "")).expect("starts");
    let mut t1 = plane.take_tx_queue("loop0", 1).unwrap();
    let report = plane
        .change(&loop_config(false, false, ""))
        .expect("removes t1");
    assert!(
        report.removed[0].drained && report.change.rules.is_empty(),
        "{report:?}"
    );
    let b = t1.alloc(1).expect("its buffers are the plane's");
    match t1.send(b) {
        Err(e) => assert!(matches!(e.reason, dataplane::TxFailure::Stopped), "{e}"),
        Ok(()) => panic!("a removed queue took a burst"),
    }
    // The removed queue's wire no longer holds back the adoption of new rules.
    let report = plane
        .change(&two_queue_config(false))
        .expect("a rule change after the removal");
    assert_eq!(report.change.rules[0].added, ["f1"]);
    let mut t0 = plane.take_tx_queue("loop0", 0).unwrap();
    let mut q0 = plane.take_rx_queue("loop0", 0).unwrap();
    common::send_frames(&mut t0, &[frame(7000, 5001, 7)]);
    let b = q0
        .recv(Duration::from_secs(5))
        .unwrap()
        .expect("port 5001 now has a flow");
    assert_eq!(b.packets()[0].flow_id, 2);
    drop(b);
    plane.shutdown().unwrap();
}

/// One loopback interface: TX queue t0, RX queue q0 with flow f0 (port 5000), and, when
/// asked, TX queue t1 and RX queue q1; `flows` are more flows after f0.
fn loop_config(t1: bool, q1: bool, flows: &str) -> Config {
    let t1 = if t1 {
        "    - {name: t1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}\n"
    } else {
        ""
    };
    let q1 = if q1 {
        "    - {name: q1, id: 1, cpu_core: 1, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}\n"
    } else {
        ""
    };
    load_loop(&LoopParts {
        tx: t1,
        rx: q1,
        flows,
        ..LoopParts::default()
    })
}

/// What a loopback interface `loop0` has besides region `bufs`, TX queue t0, RX queue q0
/// and flow f0 (port 5000 to q0): YAML lines spliced in.
#[derive(Default)]
struct LoopParts<'a> {
    /// Regions listed before `bufs`.
    regions_before: &'a str,
    /// Regions listed after `bufs`.
    regions_after: &'a str,
    /// TX queues after t0.
    tx: &'a str,
    /// RX queues after q0.
    rx: &'a str,
    /// Flows after f0.
    flows: &'a str,
}

fn load_loop(p: &LoopParts) -> Config {
    let text = common::loopback_config(&format!(
        r#"memory_regions:
{}- {{name: bufs, kind: host, affinity: 0, num_bufs: 8192, buf_size: 256}}
{}interfaces:
- name: loop0
  address: loopback
  tx:
    queues:
    - {{name: t0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}}
{}  rx:
    flow_isolation: true
    queues:
    - {{name: q0, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 50, memory_regions: [bufs]}}
{}    flows:
    - {{name: f0, id: 1, action: {{type: queue, id: 0}}, match: {{udp_dst: 5000}}}}
{}"#,
        p.regions_before, p.regions_after, p.tx, p.rx, p.flows
    ));
    config::load_with(&text, "loop.yaml", &|c| c < 2)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config
}

/// [`loop_config`] with port 5001 to q0 (`added`: false), or with t1 and q1 and port 5001
/// to q1.
fn two_queue_config(added: bool) -> Config {
    let target = u16::from(added);
    loop_config(
        added,
        added,
        &format!(
            "    - {{name: f1, id: 2, action: {{type: queue, id: {target}}}, match: {{udp_dst: 5001}}}}\n"
        ),
    )
}

#[test]
fn queues_added_under_traffic_take_over_and_the_kept_ones_lose_nothing() {
    let mut plane = DataPlane::start(&two_queue_config(false)).expect("starts");
    let (traffic, q0, done) = flowing(&mut plane, "loop0", &[5000, 5001], 30_000);
    let report = plane
        .change(&two_queue_config(true))
        .expect("a live change");
    eprintln!("report: {report:?}");
    assert_eq!(report.added.queues, 2);
    assert_eq!(report.added.started_cores, [1], "q1's core had no worker");
    assert_eq!(report.change.rules[0].changed, ["f1"]);
    let q1 = receive_on(&mut plane, "loop0", 1, &done);
    // The added TX queue sends too, from another source port, to q0's flow.
    let mut t1 = plane.take_tx_queue("loop0", 1).unwrap();
    let from_t1: Vec<Vec<u8>> = (0..2000)
        .map(|k| frame(7001, 5000, 1_000_000 + k))
        .collect();
    common::send_frames(&mut t1, &from_t1);
    traffic.wait_for(traffic.sent() + 30_000);
    let (next, counters) = traffic.finish_on(&plane, &done);
    let (on_q0, on_q1) = (q0.join().unwrap(), q1.join().unwrap());
    plane.shutdown().unwrap();

    // 5000 on q0: t0's sequence complete and in order, t1's after it began.
    let (t0_5000, t1_5000): (Vec<u64>, Vec<u64>) =
        on_q0[&5000].iter().partition(|&&s| s < 1_000_000);
    assert_eq!(
        t0_5000,
        (0..next[0]).collect::<Vec<_>>(),
        "q0 lost or reordered t0's 5000"
    );
    assert_eq!(
        t1_5000,
        (1_000_000..1_002_000).collect::<Vec<_>>(),
        "t1's frames on q0"
    );
    // 5001 moved from q0 to the added q1: nothing lost or repeated across the move.
    let (before, after) = (&on_q0[&5001], &on_q1[&5001]);
    assert!(
        !before.is_empty() && !after.is_empty(),
        "{} then {}",
        before.len(),
        after.len()
    );
    let joined: Vec<u64> = before.iter().chain(after).copied().collect();
    assert_eq!(
        joined,
        (0..next[1]).collect::<Vec<_>>(),
        "port 5001 across the move"
    );
    let drops: u64 = counters.queues.iter().map(|q| q.drops.total()).sum();
    assert_eq!(drops, 0, "{counters:?}");
    let rx1 = counters
        .queues
        .iter()
        .find(|q| q.direction == "rx" && q.queue == 1)
        .expect("the added queue's counters are in the snapshot");
    assert_eq!(rx1.packets, after.len() as u64);
}

#[test]
fn a_queue_removed_can_be_added_back_in_the_next_change() {
    let with_metrics = |added: bool| {
        let mut c = two_queue_config(added);
        c.metrics = Some(dataplane::config::MetricsConfig {
            listen: Some("127.0.0.1:0".into()),
            ..Default::default()
        });
        c
    };
    let mut plane = DataPlane::start(&with_metrics(true)).expect("starts");
    let removed = plane
        .change(&with_metrics(false))
        .expect("removes q1 and t1");
    assert_eq!(removed.removed.len(), 2, "{removed:?}");
    let added = plane.change(&with_metrics(true)).expect("adds them back");
    assert_eq!(added.added.queues, 2, "{added:?}");
    let mut t1 = plane.take_tx_queue("loop0", 1).expect("the new t1");
    let mut q1 = plane.take_rx_queue("loop0", 1).expect("the new q1");
    let frames: Vec<Vec<u8>> = (0..100).map(|k| frame(7001, 5001, k)).collect();
    common::send_frames(&mut t1, &frames);
    let mut got = Vec::new();
    while got.len() < 100 {
        let b = q1
            .recv(Duration::from_secs(5))
            .unwrap()
            .expect("frames on q1");
        for i in 0..b.len() {
            let v = dataplane::packet::parse(b.data(i, 0).unwrap()).unwrap();
            got.push(u64::from_le_bytes(v.payload[..8].try_into().unwrap()));
        }
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    // The metrics endpoint serves the queues the change added, with their counts.
    let scrape = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(plane.metrics_address().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    for want in [
        r#"direction="rx",queue="1",core="1""#,
        r#"direction="tx",queue="1",core="0""#,
    ] {
        let series = scrape
            .lines()
            .filter(|l| {
                l.starts_with("dataplane_queue_packets_total{")
                    && l.contains(want)
                    && l.ends_with(" 100")
            })
            .count();
        assert_eq!(
            series, 1,
            "{want}: one series, the new queue's, at 100 packets:\n{scrape}"
        );
    }
    plane.shutdown().unwrap();
}

#[test]
fn a_socket_interfaces_rules_switch_while_it_runs() {
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let from = peer.local_addr().unwrap().port();
    let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = free.local_addr().unwrap().port();
    drop(free);
    let rules = |queue: u16| {
        udp_server(
            at,
            &format!(
                r#"  flow_isolation: true
  queues:
    - {{name: q0, id: 0, cpu_core: 0, batch_size: 8, timeout_us: 50, memory_regions: [bufs]}}
    - {{name: q1, id: 1, cpu_core: 0, batch_size: 8, timeout_us: 50, memory_regions: [bufs]}}
  flows:
    - {{name: peer, id: 7, action: {{type: queue, id: {queue}}}, match: {{udp_src: {from}}}}}
"#
            ),
        )
    };
    let mut plane = DataPlane::start(&rules(0)).expect("starts");
    let mut rx = [
        plane.take_rx_queue("s0", 0).unwrap(),
        plane.take_rx_queue("s0", 1).unwrap(),
    ];
    let mut arrives_on = |queue: usize, payload: &[u8]| {
        peer.send_to(payload, ("127.0.0.1", at)).unwrap();
        let b = rx[queue]
            .recv(Duration::from_secs(5))
            .unwrap()
            .unwrap_or_else(|| panic!("nothing on q{queue}"));
        assert_eq!(
            (b.data(0, 0).unwrap(), b.packets()[0].flow_id),
            (payload, 7)
        );
    };
    arrives_on(0, b"before");
    let report = plane.change(&rules(1)).expect("rules switch live");
    assert_eq!(report.change.rules[0].changed, ["peer"]);
    arrives_on(1, b"after");
    plane.shutdown().unwrap();
}

/// A UDP server interface `s0` on 127.0.0.1:`port` whose `rx` section is `rx` (its lines
/// from column 0, as they stand under `rx:`).
fn udp_server(port: u16, rx: &str) -> Config {
    udp_server_with(port, rx, "")
}

/// [`udp_server`] with `more` (the interface's other keys, at its keys' indent) after `rx`.
fn udp_server_with(port: u16, rx: &str, more: &str) -> Config {
    let rx: String = rx.lines().map(|l| format!("    {l}\n")).collect();
    let text = common::socket_config(&format!(
        r#"memory_regions:
- {{name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
interfaces:
- name: s0
  address: 127.0.0.1
  socket_config: {{mode: server, local_addr: "udp://127.0.0.1:{port}"}}
  rx:
{rx}{more}"#
    ));
    config::load_with(&text, "s.yaml", &|c| c < 2)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config
}
