//! The kernel socket engine against real kernel sockets over 127.0.0.1: UDP paced without
//! loss, unpaced losses counted exactly, SO_REUSEPORT spreading over queues, flow rules
//! on datagrams, TCP reconnects after the peer went away, and the errors for bad
//! addresses, ports in use and missing peers.

use dataplane::config::{self, Config};
use dataplane::plane::{DataPlane, TxFailure};
use dataplane_bench::socket::{self, Mode, SocketBenchOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::net::UdpSocket;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Ports: each test uses its own range, so tests run in parallel.
struct Ends {
    transport: &'static str,
    server_port: u16,
    client_port: u16,
    server_queues: usize,
    client_queues: usize,
    num_bufs: usize,
    buf_size: usize,
    /// Extra lines under the server's `rx:` (flows).
    server_rx_extra: &'static str,
}

impl Ends {
    fn new(transport: &'static str, server_port: u16) -> Self {
        Self {
            transport,
            server_port,
            client_port: server_port + 100,
            server_queues: 1,
            client_queues: 1,
            num_bufs: 4096,
            buf_size: 2048,
            server_rx_extra: "",
        }
    }

    fn queues(n: usize, prefix: &str, region: &str, core: u32) -> String {
        (0..n)
            .map(|i| {
                format!(
                    "        - {{name: {prefix}{i}, id: {i}, cpu_core: {core}, batch_size: 32, memory_regions: [{region}]}}\n"
                )
            })
            .collect()
    }

    fn interface(&self, server: bool) -> String {
        let (name, region, n, core) = if server {
            ("server", "SRV", self.server_queues, 0)
        } else {
            ("client", "CLI", self.client_queues, 1 % cores())
        };
        let t = self.transport;
        let addr = if server {
            format!(
                "{{mode: server, local_addr: \"{t}://127.0.0.1:{}\"}}",
                self.server_port
            )
        } else {
            format!(
                "{{mode: client, local_addr: \"{t}://127.0.0.1:{}\", remote_addr: \"{t}://127.0.0.1:{}\", retry_connect_s: 1}}",
                self.client_port, self.server_port
            )
        };
        let extra = if server { self.server_rx_extra } else { "" };
        format!(
            "    - name: {name}\n      address: 127.0.0.1\n      socket_config: {addr}\n      rx:\n{extra}        queues:\n{}      tx:\n        queues:\n{}",
            Self::queues(n, &format!("{name}_rx"), region, core),
            Self::queues(n, &format!("{name}_tx"), region, core),
        )
    }

    fn yaml(&self, server: bool, client: bool) -> String {
        let mut s = format!(
            "daqiri:\n  cfg:\n    version: 1\n    stream_type: socket\n    master_core: 0\n    memory_regions:\n    - {{name: SRV, kind: host, affinity: 0, num_bufs: {n}, buf_size: {b}}}\n    - {{name: CLI, kind: host, affinity: 0, num_bufs: {n}, buf_size: {b}}}\n    interfaces:\n",
            n = self.num_bufs,
            b = self.buf_size
        );
        if server {
            s += &self.interface(true);
        }
        if client {
            s += &self.interface(false);
        }
        s += &format!(
            "socket_bench_server: {{server: true, send: false, receive: true, cpu_core: 0, message_size: 1400, server_address: 127.0.0.1, server_port: {p}}}\nsocket_bench_client: {{server: false, send: true, receive: false, cpu_core: {c}, message_size: 1400, server_address: 127.0.0.1, client_address: 127.0.0.1, server_port: {p}}}\n",
            p = self.server_port,
            c = 1 % cores()
        );
        s
    }

    fn config(&self, server: bool, client: bool) -> Config {
        let text = self.yaml(server, client);
        config::load_str(&text, "socket-test.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config
    }
}

fn cores() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

fn opts(seconds: f64, target_gbps: Option<f64>) -> SocketBenchOptions {
    SocketBenchOptions {
        mode: Mode::Both,
        seconds,
        target_gbps,
        message_size: None,
        connect_timeout: Duration::from_secs(10),
        queued_bursts: socket::QUEUED_BURSTS,
        time_stages: false,
        work: socket::SocketWork::Full,
    }
}

#[test]
fn udp_paced_is_lossless_and_every_message_verified() {
    let c = Ends::new("udp", 17000).config(true, true);
    let stop = AtomicBool::new(false);
    let r = socket::run(&c, &opts(1.0, Some(0.2)), &stop).expect("bench runs");
    println!("{}", r.human());
    assert!(r.lossless, "{}", r.human());
    assert!(r.total.messages_received > 1000, "{}", r.human());
    assert_eq!(r.total.messages_received, r.total.messages_sent);
}

/// The same UDP and TCP runs over IPv6 (`[::1]`): the engine's sockets, peers and
/// learned addresses are of the interface's IP version.
#[test]
fn udp_and_tcp_run_over_ipv6_lossless_and_verified() {
    for (t, port) in [("udp", 17200), ("tcp", 17210)] {
        let text = Ends::new(t, port)
            .yaml(true, true)
            .replace("127.0.0.1:", "[::1]:")
            .replace("\n      address: 127.0.0.1", "\n      address: \"::1\"");
        let c = config::load_str(&text, "socket-test.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config;
        let stop = AtomicBool::new(false);
        let r = socket::run(&c, &opts(1.0, Some(0.2)), &stop).expect("bench runs");
        println!("{t} over IPv6: {}", r.human());
        assert!(r.lossless, "{}", r.human());
        assert!(r.total.messages_received > 1000, "{}", r.human());
        assert_eq!(r.total.messages_received, r.total.messages_sent);
    }
}

#[test]
fn tcp_stream_arrives_whole_and_verified() {
    let mut e = Ends::new("tcp", 17010);
    e.buf_size = 65536;
    e.num_bufs = 512;
    let c = e.config(true, true);
    let stop = AtomicBool::new(false);
    let mut o = opts(1.0, None);
    o.message_size = Some(65536);
    let r = socket::run(&c, &o, &stop).expect("bench runs");
    println!("{}", r.human());
    assert!(r.lossless, "{}", r.human());
    let server = r.server.as_ref().unwrap();
    let client = r.client.as_ref().unwrap();
    assert!(client.traffic.bytes_sent > 0);
    assert_eq!(server.traffic.bytes_received, client.traffic.bytes_sent);
}

/// The like-for-like work level against iperf3 (`--work count`): TCP payloads are neither
/// written nor read and every byte sent is still counted at the other end; UDP messages
/// carry only their header, and every one arrives in sequence (losses would show from
/// the sequence numbers, as in the full check). The report says what was not checked.
#[test]
fn count_work_moves_every_byte_without_writing_or_reading_payloads() {
    for (transport, port) in [("tcp", 17110), ("udp", 17120)] {
        let mut e = Ends::new(transport, port);
        e.buf_size = 65536;
        e.num_bufs = 512;
        let c = e.config(true, true);
        let stop = AtomicBool::new(false);
        let mut o = opts(1.0, (transport == "udp").then_some(0.2));
        o.message_size = Some(if transport == "tcp" { 65536 } else { 8192 });
        o.work = socket::SocketWork::Count;
        let r = socket::run(&c, &o, &stop).expect("bench runs");
        let human = r.human();
        println!("{human}");
        assert!(r.lossless, "{human}");
        assert_eq!(r.work, socket::SocketWork::Count);
        assert!(human.contains("work count"), "{human}");
        let (server, client) = (r.server.as_ref().unwrap(), r.client.as_ref().unwrap());
        assert!(client.traffic.messages_sent > 0, "{human}");
        assert_eq!(server.traffic.bytes_received, client.traffic.bytes_sent);
        assert_eq!(
            server.traffic.messages_received, client.traffic.messages_sent,
            "{human}"
        );
    }
}

/// The application stops reading the server's queue while the client floods it: the
/// worker stops reading the socket (backpressure), the socket buffer fills and the kernel
/// drops. Every datagram sent is then either received or counted as `engine_missed`.
#[test]
fn udp_kernel_drops_are_counted_exactly() {
    let mut e = Ends::new("udp", 17020);
    e.num_bufs = 1024;
    let mut plane = DataPlane::start(&e.config(true, true)).expect("starts");
    let mut tx = plane.take_tx_queue("client", 0).unwrap();
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let total = 60_000u64;
    let mut sent = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while sent < total && Instant::now() < deadline {
        let n = (total - sent).min(32) as usize;
        let Ok(mut b) = tx.alloc(n) else {
            std::thread::yield_now();
            continue;
        };
        for i in 0..b.len() {
            let buf = b.buffer_mut(i, 0).unwrap();
            buf[..8].copy_from_slice(&(sent + i as u64).to_le_bytes());
            b.set_len(i, 0, 1000);
        }
        let n = b.len() as u64;
        match tx.send(b) {
            Ok(()) => sent += n,
            Err(_) => std::thread::yield_now(),
        }
    }
    assert_eq!(sent, total);
    // Now read everything, checking every sequence number arrives at most once.
    let mut seen = BTreeSet::new();
    let mut last_change = Instant::now();
    let mut missed = 0;
    while last_change.elapsed() < Duration::from_secs(3) {
        if let Some(b) = rx.poll().unwrap() {
            for i in 0..b.len() {
                let d = b.data(i, 0).unwrap();
                assert_eq!(d.len(), 1000);
                let seq = u64::from_le_bytes(d[..8].try_into().unwrap());
                assert!(
                    seq < total && seen.insert(seq),
                    "seq {seq} twice or unknown"
                );
            }
            last_change = Instant::now();
        } else {
            let m = plane.snapshot().drops().engine_missed;
            if m != missed {
                missed = m;
                last_change = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if seen.len() as u64 + missed == total {
            break;
        }
    }
    let received = seen.len() as u64;
    println!("sent {total}, received {received}, kernel drops {missed}");
    assert!(missed > 0, "the flood should overflow the socket buffer");
    assert_eq!(
        received + missed,
        total,
        "every datagram received or counted"
    );
    plane.shutdown().unwrap();
}

/// A client with 8 lanes (8 source ports) against a server with 4 RX queues: the kernel
/// spreads the flows over the queues' sockets, each flow stays on one queue, and every
/// message arrives once.
#[test]
fn udp_flows_spread_over_queues() {
    let mut e = Ends::new("udp", 17030);
    e.server_queues = 4;
    e.client_queues = 8;
    let mut plane = DataPlane::start(&e.config(true, true)).expect("starts");
    let mut txs: Vec<_> = (0..8)
        .map(|q| plane.take_tx_queue("client", q).unwrap())
        .collect();
    let mut rxs: Vec<_> = (0..4)
        .map(|q| plane.take_rx_queue("server", q).unwrap())
        .collect();
    let per_lane = 200u32;
    for (lane, tx) in txs.iter_mut().enumerate() {
        let mut k = 0;
        while k < per_lane {
            let mut b = tx.alloc(1).unwrap();
            let buf = b.buffer_mut(0, 0).unwrap();
            buf[..4].copy_from_slice(&(lane as u32).to_le_bytes());
            buf[4..8].copy_from_slice(&k.to_le_bytes());
            b.set_len(0, 0, 64);
            if tx.send(b).is_ok() {
                k += 1;
            }
        }
    }
    let mut lane_queue: BTreeMap<u32, usize> = BTreeMap::new();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < 8 * per_lane && Instant::now() < deadline {
        for (q, rx) in rxs.iter_mut().enumerate() {
            if let Some(b) = rx.poll().unwrap() {
                for i in 0..b.len() {
                    let d = b.data(i, 0).unwrap();
                    let lane = u32::from_le_bytes(d[..4].try_into().unwrap());
                    let at = *lane_queue.entry(lane).or_insert(q);
                    assert_eq!(at, q, "lane {lane}'s datagrams on two queues");
                    got += 1;
                }
            }
        }
    }
    assert_eq!(got, 8 * per_lane, "every datagram arrives");
    let queues: BTreeSet<usize> = lane_queue.values().copied().collect();
    println!("lane -> queue: {lane_queue:?}");
    assert!(
        queues.len() >= 2,
        "8 flows all on one queue: {lane_queue:?}"
    );
    assert_eq!(plane.snapshot().drops().total(), 0);
    plane.shutdown().unwrap();
}

/// Flow rules on a UDP server apply to what its sockets receive: datagrams from the
/// client's second lane (source port + 1) go to queue 1 marked with flow id 7, the rest
/// to queue 0.
#[test]
fn udp_flow_rules_steer_datagrams() {
    let mut e = Ends::new("udp", 17040);
    e.server_queues = 2;
    e.client_queues = 2;
    e.server_rx_extra = "        flow_isolation: true\n        exception_queue: 0\n        flows:\n        - {name: lane1, id: 7, action: {type: queue, id: 1}, match: {udp_src: 17141, udp_dst: 17040}}\n";
    let mut plane = DataPlane::start(&e.config(true, true)).expect("starts");
    let mut txs: Vec<_> = (0..2)
        .map(|q| plane.take_tx_queue("client", q).unwrap())
        .collect();
    let mut rxs: Vec<_> = (0..2)
        .map(|q| plane.take_rx_queue("server", q).unwrap())
        .collect();
    for (lane, tx) in txs.iter_mut().enumerate() {
        let mut k = 0;
        while k < 100 {
            let mut b = tx.alloc(1).unwrap();
            b.buffer_mut(0, 0).unwrap()[0] = lane as u8;
            b.set_len(0, 0, 100);
            if tx.send(b).is_ok() {
                k += 1;
            }
        }
    }
    let mut got = [[0u32; 2]; 2];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.iter().flatten().sum::<u32>() < 200 && Instant::now() < deadline {
        for (q, rx) in rxs.iter_mut().enumerate() {
            if let Some(b) = rx.poll().unwrap() {
                for i in 0..b.len() {
                    let lane = b.data(i, 0).unwrap()[0] as usize;
                    let flow = b.packets()[i].flow_id;
                    assert_eq!(flow, if lane == 1 { 7 } else { 0 });
                    got[lane][q] += 1;
                }
            }
        }
    }
    assert_eq!(got, [[100, 0], [0, 100]], "[lane][queue] counts");
    plane.shutdown().unwrap();
}

/// A TCP server that goes away: the client's link goes down and its sends say why; a new
/// server comes up on the same port and the client reconnects within retry_connect_s;
/// data flows again. Then the client goes away and the server accepts the next one.
#[test]
fn tcp_peer_killed_and_reconnected() {
    let e = Ends::new("tcp", 17050);
    let mut client =
        DataPlane::start(&e.config(false, true)).expect("client starts without a server");
    let mut tx = client.take_tx_queue("client", 0).unwrap();
    // No server yet: start returned at once and sends say why they cannot go.
    let mut b = tx.alloc(1).unwrap();
    b.set_len(0, 0, 10);
    match tx.send(b) {
        Err(e) => assert!(
            matches!(e.reason, TxFailure::NotConnected(_)),
            "{:?}",
            e.reason
        ),
        Ok(()) => panic!("sent without a server"),
    }

    let mut received_total = 0usize;
    for round in 0..2u8 {
        let mut server = DataPlane::start(&e.config(true, false)).expect("server starts");
        let mut rx = server.take_rx_queue("server", 0).unwrap();
        // Send until 64 KiB arrive.
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < 65536 && Instant::now() < deadline {
            if let Ok(mut b) = tx.alloc(8) {
                for i in 0..b.len() {
                    b.buffer_mut(i, 0).unwrap()[..1024].fill(round + 1);
                    b.set_len(i, 0, 1024);
                }
                let _ = tx.send(b);
            }
            while let Some(b) = rx.poll().unwrap() {
                for i in 0..b.len() {
                    got.extend_from_slice(b.data(i, 0).unwrap());
                }
            }
        }
        assert!(
            got.len() >= 65536,
            "round {round}: {} bytes arrived",
            got.len()
        );
        assert!(
            got.iter().all(|&x| x == round + 1),
            "round {round}: foreign bytes"
        );
        received_total += got.len();
        let link = tx.link().expect("a TCP queue has a link");
        assert!(link.up);
        assert_eq!(link.connections, u64::from(round) + 1, "{link:?}");
        server.shutdown().unwrap();
        // The client notices the server is gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while tx.link().unwrap().up && Instant::now() < deadline {
            let _ = tx.alloc(1).map(|mut b| {
                b.set_len(0, 0, 1);
                tx.send(b)
            });
            std::thread::sleep(Duration::from_millis(10));
        }
        let link = tx.link().unwrap();
        assert!(!link.up, "{link:?}");
        assert_eq!(link.disconnects, u64::from(round) + 1);
        assert!(link.last_error.is_some());
    }
    println!("received {received_total} bytes over two connections");
    client.shutdown().unwrap();
}

#[test]
fn tcp_server_accepts_the_next_client() {
    let e = Ends::new("tcp", 17060);
    let mut server = DataPlane::start(&e.config(true, false)).expect("server starts");
    let rx = server.take_rx_queue("server", 0).unwrap();
    for n in 1..=2u64 {
        let client = DataPlane::start(&e.config(false, true)).expect("client starts");
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx.link().unwrap().connections < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(rx.link().unwrap().connections, n);
        client.shutdown().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx.link().unwrap().up && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!rx.link().unwrap().up, "the server sees client {n} leave");
    }
    server.shutdown().unwrap();
}

fn start_error(c: &Config) -> String {
    match DataPlane::start(c) {
        Ok(_) => panic!("started"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn ports_in_use_and_foreign_addresses_are_clear_errors() {
    // UDP: a socket without SO_REUSEPORT holds the port.
    let holder = UdpSocket::bind("127.0.0.1:17070").unwrap();
    let e = start_error(&Ends::new("udp", 17070).config(true, false));
    assert!(
        e.contains("udp://127.0.0.1:17070") && e.contains("in use"),
        "{e}"
    );
    drop(holder);
    // TCP: a listener holds the port.
    let holder = std::net::TcpListener::bind("127.0.0.1:17071").unwrap();
    let e = start_error(&Ends::new("tcp", 17071).config(true, false));
    assert!(
        e.contains("tcp://127.0.0.1:17071") && e.contains("in use"),
        "{e}"
    );
    drop(holder);
    // An address this machine does not have (TEST-NET-2).
    for t in ["udp", "tcp"] {
        let text = Ends::new(t, 17072)
            .yaml(true, false)
            .replace("127.0.0.1:17072", "198.51.100.7:17072");
        let c = config::load_str(&text, "x.yaml").unwrap().config;
        let e = start_error(&c);
        assert!(
            e.contains("not on this machine") && e.contains("198.51.100.7"),
            "{e}"
        );
    }
}

#[test]
fn missing_peers_are_reported() {
    // TCP: the bench gives up with the connect error.
    let c = Ends::new("tcp", 17080).config(false, true);
    let stop = AtomicBool::new(false);
    let mut o = opts(1.0, None);
    o.mode = Mode::Client;
    o.connect_timeout = Duration::from_secs(2);
    let r = socket::run(&c, &o, &stop).expect("runs");
    let problems = r.client.as_ref().unwrap().problems.join("; ");
    assert!(!r.ok());
    assert!(
        problems.contains("no peer within") && problems.contains("refused"),
        "{problems}"
    );
    // UDP: the kernel's port-unreachable answer shows on the link.
    let mut plane = DataPlane::start(&Ends::new("udp", 17090).config(false, true)).unwrap();
    let mut tx = plane.take_tx_queue("client", 0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tx.link().unwrap().last_error.is_none() && Instant::now() < deadline {
        if let Ok(mut b) = tx.alloc(1) {
            b.set_len(0, 0, 10);
            let _ = tx.send(b);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let why = tx.link().unwrap().last_error.unwrap_or_default();
    assert!(
        why.contains("nothing listens") && why.contains("17090"),
        "{why}"
    );
    plane.shutdown().unwrap();
}

/// Datagrams of changing sizes in runs (sent as GSO runs, read back with `udp_gro` as
/// reads of several datagrams): each arrives whole, once, in order, in a buffer of its own, also
/// across size changes where the receiver lays a read out again.
#[test]
fn udp_runs_of_changing_sizes_arrive_whole() {
    let mut e = Ends::new("udp", 17099);
    e.num_bufs = 8192;
    let text = e
        .yaml(true, true)
        .replace("{mode: server,", "{mode: server, udp_gro: true,");
    let c = config::load_str(&text, "gro.yaml").unwrap().config;
    assert!(c.interfaces[0].socket.as_ref().unwrap().udp_gro);
    let mut plane = DataPlane::start(&c).expect("starts");
    let mut tx = plane.take_tx_queue("client", 0).unwrap();
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let pattern = [
        1000usize, 1000, 1000, 300, 1400, 1400, 1400, 64, 2048, 2048, 7, 2000,
    ];
    let total = 6000u32;
    let size_of = |k: u32| pattern[(k as usize / 5) % pattern.len()];
    let mut sent = 0u32;
    while sent < total {
        let n = (total - sent).min(32) as usize;
        let Ok(mut b) = tx.alloc(n) else { continue };
        for i in 0..b.len() {
            let k = sent + i as u32;
            let len = size_of(k);
            let buf = b.buffer_mut(i, 0).unwrap();
            for (j, x) in buf[..len].iter_mut().enumerate() {
                *x = (k as usize * 7 + j) as u8;
            }
            if len >= 4 {
                buf[..4].copy_from_slice(&k.to_le_bytes());
            }
            b.set_len(i, 0, len);
        }
        let n = b.len() as u32;
        if tx.send(b).is_ok() {
            sent += n;
        }
    }
    let mut next = 0u32;
    let deadline = Instant::now() + Duration::from_secs(30);
    while next < total && Instant::now() < deadline {
        let Some(b) = rx.poll().unwrap() else {
            continue;
        };
        for i in 0..b.len() {
            let d = b.data(i, 0).unwrap();
            assert_eq!(d.len(), size_of(next), "datagram {next}: length");
            for (j, &x) in d.iter().enumerate().skip(if d.len() >= 4 { 4 } else { 0 }) {
                assert_eq!(x, (next as usize * 7 + j) as u8, "datagram {next} byte {j}");
            }
            if d.len() >= 4 {
                assert_eq!(u32::from_le_bytes(d[..4].try_into().unwrap()), next);
            }
            next += 1;
        }
    }
    assert_eq!(next, total, "every datagram, in order");
    assert_eq!(plane.snapshot().drops().total(), 0);
    plane.shutdown().unwrap();
}

/// With `hardware_timestamps` a UDP server's packets carry the kernel's receive times:
/// wall-clock times between the send and the poll that returned them, never going back.
#[test]
fn udp_packets_carry_kernel_receive_timestamps() {
    let mut e = Ends::new("udp", 17097);
    e.server_rx_extra = "        hardware_timestamps: true\n";
    let mut plane = DataPlane::start(&e.config(true, true)).expect("starts");
    let mut tx = plane.take_tx_queue("client", 0).unwrap();
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = wall();
    let mut sent = 0;
    while sent < 200 {
        let mut b = tx.alloc(1).unwrap();
        b.set_len(0, 0, 100);
        if tx.send(b).is_ok() {
            sent += 1;
        }
    }
    let mut stamps = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stamps.len() < 200 && Instant::now() < deadline {
        if let Some(b) = rx.poll().unwrap() {
            let after = wall();
            for p in b.packets() {
                assert!(
                    p.timestamp_ns >= before && p.timestamp_ns <= after,
                    "{} not between {before} and {after}",
                    p.timestamp_ns
                );
                stamps.push(p.timestamp_ns);
            }
        }
    }
    assert_eq!(stamps.len(), 200);
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "times never go back"
    );
    plane.shutdown().unwrap();
}

/// A UDP server queue with header-data split in host memory: the socket receives into
/// the queue's staging region and the RX stage splits each datagram into its two regions.
#[test]
fn udp_header_data_split_through_the_stage() {
    udp_header_data_split(17098, "");
}

/// The same with the stage on a worker of its own (`stage_core: 1`): the socket is read
/// on core 0, split on core 1.
#[test]
fn udp_header_data_split_on_a_stage_core() {
    udp_header_data_split(17065, "stage_core: 1, ");
}

fn udp_header_data_split(port: u16, stage_core: &str) {
    let e = Ends::new("udp", port);
    let text = e
        .yaml(true, true)
        .replace(
            "    - {name: CLI,",
            "    - {name: HDR, kind: host, affinity: 0, num_bufs: 4096, buf_size: 64}\n    - {name: CLI,",
        )
        .replace(
            "{name: server_rx0, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [SRV]}",
            &format!(
                "{{name: server_rx0, id: 0, cpu_core: 0, {stage_core}batch_size: 32, memory_regions: [HDR, SRV]}}"
            ),
        );
    assert!(text.contains(stage_core));
    let c = config::load_str(&text, "hds.yaml").unwrap().config;
    let mut plane = DataPlane::start(&c).expect("starts");
    assert!(
        plane
            .regions()
            .iter()
            .any(|r| r.name() == "server.rx0.staging"),
        "a staging region for the split queue"
    );
    let mut tx = plane.take_tx_queue("client", 0).unwrap();
    let mut rx = plane.take_rx_queue("server", 0).unwrap();
    let mut sent = 0u32;
    while sent < 100 {
        let mut b = tx.alloc(1).unwrap();
        let buf = b.buffer_mut(0, 0).unwrap();
        for (k, x) in buf[..1000].iter_mut().enumerate() {
            *x = (k as u32 + sent) as u8;
        }
        b.set_len(0, 0, 1000);
        if tx.send(b).is_ok() {
            sent += 1;
        }
    }
    let mut got = 0u32;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < 100 && Instant::now() < deadline {
        if let Some(b) = rx.poll().unwrap() {
            for i in 0..b.len() {
                let (h, p) = (b.data(i, 0).unwrap(), b.data(i, 1).unwrap());
                assert_eq!((h.len(), p.len()), (64, 936));
                let first = h[0];
                let whole: Vec<u8> = h.iter().chain(p).copied().collect();
                for (k, &x) in whole.iter().enumerate() {
                    assert_eq!(x, (k as u8).wrapping_add(first), "byte {k}");
                }
                got += 1;
            }
        }
    }
    assert_eq!(got, 100);
    plane.shutdown().unwrap();
}

#[test]
fn oversized_payload_setting_is_refused() {
    let text = Ends::new("udp", 17095)
        .yaml(true, false)
        .replace("{mode: server,", "{mode: server, max_payload_size: 9000,");
    let c = config::load_str(&text, "x.yaml").unwrap().config;
    let e = start_error(&c);
    assert!(
        e.contains("max_payload_size 9000") && e.contains("buf_size"),
        "{e}"
    );
}
