//! Peer filtering on the kernel socket engine across two network namespaces joined by a
//! veth pair (the data plane in one, its peers in the other, so every datagram crosses a
//! real kernel network path): `allowed_peers` on UDP and TCP, a UDP server that keeps the
//! peer it answers against a datagram with a forged source address (sent through a raw
//! socket), TCP connections beyond the lanes refused, and the idle timeout freeing a lane.
//! Needs root; skipped visibly otherwise.

mod common;

use dataplane::config;
use dataplane::plane::DataPlane;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// Namespaces: the data plane's and its peers' (one pair per test: tests run in parallel).
struct Hosts {
    plane: &'static str,
    peers: &'static str,
    _pair: common::VethPair,
}
const PLANE_IP: &str = "10.252.0.1";
/// Allowed peer, another host of the peers' namespace (outside the list), and a source
/// address nobody has (forged).
const ALLOWED: &str = "10.252.0.2";
const OTHER: &str = "10.252.0.3";
const FORGED: &str = "10.252.0.9";

/// The two namespaces `plane` and `peers` joined by a veth pair `dev`, the peers' end
/// with a second address (`OTHER`).
fn hosts(plane: &'static str, peers: &'static str, dev: [&str; 2]) -> Option<Hosts> {
    match common::veth_pair(
        [plane, peers],
        dev,
        [Some("10.252.0.1/24"), Some("10.252.0.2/24")],
    ) {
        Ok(pair) => {
            let ok = std::process::Command::new("ip")
                .args(["-n", peers, "addr", "add", "10.252.0.3/24", "dev", dev[1]])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "second address in {peers}");
            Some(Hosts {
                plane,
                peers,
                _pair: pair,
            })
        }
        Err(why) => {
            eprintln!("SKIP peer filtering across network namespaces: {why}");
            None
        }
    }
}

fn yaml(transport: &str, port: u16, socket_extra: &str, with_tx: bool) -> String {
    let tx = if with_tx {
        "      tx:\n        queues:\n        - {name: t0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [bufs]}\n"
    } else {
        ""
    };
    format!(
        "dataplane:\n  cfg:\n    version: 1\n    stream_type: socket\n    master_core: 0\n    memory_regions:\n    - {{name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}}\n    interfaces:\n    - name: server\n      address: {PLANE_IP}\n      socket_config: {{mode: server, local_addr: \"{transport}://{PLANE_IP}:{port}\"{socket_extra}}}\n      rx:\n        queues:\n        - {{name: r0, id: 0, cpu_core: 0, batch_size: 32, timeout_us: 100, memory_regions: [bufs]}}\n{tx}"
    )
}

fn start(h: &Hosts, text: &str) -> DataPlane {
    let config = config::load_str(text, "peers.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config;
    let owned = text.to_owned();
    common::on_thread_in_netns(h.plane, move || {
        DataPlane::start(&config).unwrap_or_else(|e| panic!("{e}\n{owned}"))
    })
}

/// A UDP datagram from `source` (which need not be ours: a raw socket writes the IP
/// header) to `dest`, sent from the peers' namespace.
fn forged_datagram(h: &Hosts, source: SocketAddr, dest: SocketAddr, payload: &[u8]) {
    let (SocketAddr::V4(s), SocketAddr::V4(d)) = (source, dest) else {
        unreachable!()
    };
    let builder = etherparse::PacketBuilder::ipv4(s.ip().octets(), d.ip().octets(), 64)
        .udp(s.port(), d.port());
    let mut packet = Vec::new();
    builder.write(&mut packet, payload).unwrap();
    common::on_thread_in_netns(h.peers, move || {
        let raw = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::RAW,
            Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
        )
        .unwrap();
        raw.send_to(&packet, &dest.into()).unwrap();
    });
}

fn udp_from(h: &Hosts, ip: &str, port: u16) -> UdpSocket {
    let ip = ip.to_owned();
    common::on_thread_in_netns(h.peers, move || {
        UdpSocket::bind((ip.as_str(), port)).unwrap()
    })
}

/// Packets the queue delivers within `wait` (or until `enough` arrived), their bytes.
fn drain_until(rx: &mut dataplane::RxQueue, wait: Duration, enough: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && out.len() < enough {
        if let Some(b) = rx.recv(Duration::from_millis(50)).unwrap() {
            for i in 0..b.len() {
                out.push(b.data(i, 0).unwrap().to_vec());
            }
        }
    }
    out
}

/// Packets the queue delivers within `wait`.
fn drain(rx: &mut dataplane::RxQueue, wait: Duration) -> Vec<Vec<u8>> {
    drain_until(rx, wait, usize::MAX)
}

/// Waits (at most 20 s) until the plane has counted `n` rejected datagrams.
fn wait_rejected(plane: &DataPlane, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while rejected(plane) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn rejected(plane: &DataPlane) -> u64 {
    plane
        .snapshot()
        .queues
        .iter()
        .map(|q| q.drops.rejected_peer)
        .sum()
}

#[test]
fn udp_takes_allowed_peers_only_and_keeps_the_peer_it_answers() {
    let Some(h) = hosts("dppeer1", "dppeer2", ["dppa", "dppb"]) else {
        return;
    };
    let dest: SocketAddr = format!("{PLANE_IP}:18100").parse().unwrap();

    // 1. A list: the allowed host's datagrams arrive, the other host's are counted.
    let plane = start(
        &h,
        &yaml(
            "udp",
            18100,
            &format!(", allowed_peers: [\"{ALLOWED}/32\"]"),
            false,
        ),
    );
    let mut plane = plane;
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let good = udp_from(&h, ALLOWED, 0);
    let bad = udp_from(&h, OTHER, 0);
    for i in 0..10u8 {
        good.send_to(&[b'g', i], dest).unwrap();
        bad.send_to(&[b'b', i], dest).unwrap();
    }
    forged_datagram(
        &h,
        format!("{FORGED}:4000").parse().unwrap(),
        dest,
        b"forged",
    );
    wait_rejected(&plane, 11);
    let got = drain(&mut rx, Duration::from_secs(2));
    assert_eq!(got.len(), 10, "{got:?}");
    assert!(got.iter().all(|p| p[0] == b'g'), "{got:?}");
    assert_eq!(rejected(&plane), 11);
    drop(rx);
    plane.shutdown().unwrap();

    // 2. No list, a TX queue answering the learned peer: the first source is learned and
    // kept. A second sender's datagrams still arrive until the server has answered its
    // peer (a receive-only use of the port loses nothing), but never take its place;
    // after the answer, datagrams from any other source (a forged one included) are
    // refused.
    let mut plane = start(&h, &yaml("udp", 18101, "", true));
    let dest: SocketAddr = format!("{PLANE_IP}:18101").parse().unwrap();
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let mut tx = plane.take_tx_queue("server", 0).unwrap();
    let peer = udp_from(&h, ALLOWED, 18200);
    peer.send_to(b"first", dest).unwrap();
    assert_eq!(
        drain_until(&mut rx, Duration::from_secs(20), 1),
        vec![b"first".to_vec()]
    );
    let other = udp_from(&h, OTHER, 0);
    other.send_to(b"second", dest).unwrap();
    assert_eq!(
        drain_until(&mut rx, Duration::from_secs(20), 1),
        vec![b"second".to_vec()]
    );
    let learned: SocketAddr = format!("{ALLOWED}:18200").parse().unwrap();
    assert_eq!(
        tx.link().unwrap().peer,
        Some(learned),
        "the second sender took over"
    );
    // The answer goes to the learned peer.
    let mut b = tx.alloc(1).unwrap();
    b.buffer_mut(0, 0).unwrap()[..5].copy_from_slice(b"reply");
    b.set_len(0, 0, 5);
    tx.send(b).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = peer
        .recv_from(&mut buf)
        .expect("the learned peer hears the answer");
    assert_eq!((&buf[..n], from), (&b"reply"[..], dest));
    // Now a forgery with the learned peer's port from another address, and the other
    // sender, are refused; the peer itself still gets through.
    forged_datagram(
        &h,
        format!("{FORGED}:18200").parse().unwrap(),
        dest,
        b"takeover",
    );
    other.send_to(b"other", dest).unwrap();
    peer.send_to(b"still", dest).unwrap();
    wait_rejected(&plane, 2);
    assert_eq!(
        drain(&mut rx, Duration::from_secs(1)),
        vec![b"still".to_vec()]
    );
    assert_eq!(rejected(&plane), 2);
    let link = tx.link().unwrap();
    assert_eq!(link.peer, Some(learned));
    assert_eq!(link.rejected_peers, 2);
    drop((rx, tx));
    plane.shutdown().unwrap();
}

#[test]
fn tcp_refuses_outsiders_and_extra_connections_and_frees_idle_lanes() {
    let Some(h) = hosts("dppeer3", "dppeer4", ["dppc", "dppd"]) else {
        return;
    };
    let mut plane = start(
        &h,
        &yaml(
            "tcp",
            18110,
            &format!(", allowed_peers: [\"{ALLOWED}/32\"], idle_timeout_s: 5"),
            false,
        ),
    );
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let dest: SocketAddr = format!("{PLANE_IP}:18110").parse().unwrap();
    let connect = |from: &str| -> TcpStream {
        let from = from.to_owned();
        common::on_thread_in_netns(h.peers, move || {
            let s =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            s.bind(&SocketAddr::from((from.parse::<Ipv4Addr>().unwrap(), 0)).into())
                .unwrap();
            s.connect_timeout(&dest.into(), Duration::from_secs(10))
                .unwrap();
            let s: TcpStream = s.into();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s
        })
    };
    // An outsider is closed before anything it sends is read.
    let mut outsider = connect(OTHER);
    let _ = outsider.write_all(b"outsider");
    let mut buf = [0u8; 16];
    assert!(
        matches!(outsider.read(&mut buf), Ok(0) | Err(_)),
        "outsider kept"
    );
    // The allowed peer gets the lane; a second connection finds it busy.
    let mut first = connect(ALLOWED);
    first.write_all(b"hello").unwrap();
    let got = drain_until(&mut rx, Duration::from_secs(20), 1);
    assert_eq!(got.concat(), b"hello");
    let mut second = connect(ALLOWED);
    assert!(
        matches!(second.read(&mut buf), Ok(0) | Err(_)),
        "second kept"
    );
    let link = rx.link().unwrap();
    assert_eq!(link.rejected_peers, 2, "{link:?}");
    // The first one goes silent: the idle timeout closes it and frees the lane.
    assert!(
        matches!(first.read(&mut buf), Ok(0) | Err(_)),
        "idle connection kept"
    );
    let mut third = connect(ALLOWED);
    third.write_all(b"again").unwrap();
    assert_eq!(
        drain_until(&mut rx, Duration::from_secs(20), 1).concat(),
        b"again"
    );
    assert!(rx.link().unwrap().last_error.is_some());
    drop(rx);
    plane.shutdown().unwrap();
}
