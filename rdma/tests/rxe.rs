//! RC connections over real verbs and rdma_cm. `make test` runs this binary inside the
//! Soft-RoCE VM (../shared/tools/rxe-vm: rxe0 on 198.18.0.1, rxe1 on 198.18.0.2, one
//! Ethernet segment); run directly on a machine without RDMA, the device tests print SKIP
//! and the no-device test checks the error instead.

use rdma::cm::{CmAction, CmEvent, ConfiguredInterface, Server};
use rdma::verbs::{
    self, Completion, Connection, ConnectionParams, Listener, RemoteAccess, RemoteWindow,
};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

const SERVER: &str = "198.18.0.1";
const CLIENT: &str = "198.18.0.2";

fn have_device() -> bool {
    match verbs::device_present() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: {e}");
            false
        }
    }
}

fn addr(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().unwrap()
}

/// A message whose bytes say who sent it and its number.
fn message(side: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    m[0] = side;
    m[1..5].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in m.iter_mut().enumerate().skip(5) {
        *b = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
    }
    m
}

/// Sends `count` messages and receives `count`, checking each received one is the next in
/// the peer's sequence. Returns (sent, received).
fn exchange(conn: &mut Connection, me: u8, peer: u8, count: u32, len: usize) -> (u32, u32) {
    let (mut sent, mut received) = (0u32, 0u32);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while sent < count || received < count {
        assert!(
            std::time::Instant::now() < deadline,
            "stalled at sent {sent} received {received}"
        );
        while sent < count && conn.send_room() > 0 {
            assert!(conn.send(&message(me, sent, len)).unwrap());
            sent += 1;
        }
        conn.poll(|m| {
            assert_eq!(
                m,
                message(peer, received, len).as_slice(),
                "message {received}"
            );
            received += 1;
        })
        .unwrap();
    }
    // Let our last sends complete.
    while conn.send_room() < ConnectionParams::default().send_depth as usize {
        conn.poll(|_| panic!("nothing more to receive")).unwrap();
    }
    (sent, received)
}

#[test]
fn ten_thousand_sends_each_way_arrive_verified() {
    if !have_device() {
        return;
    }
    const N: u32 = 10_000;
    let params = ConnectionParams {
        message_size: 256,
        ..ConnectionParams::default()
    };
    let listener = Listener::bind(addr(SERVER, 7471), 8).expect("listen");
    let (tx, rx) = mpsc::channel();
    let server = std::thread::spawn(move || {
        let req = listener
            .next_request(Duration::from_secs(30), &|| false)
            .expect("a request");
        let mut conn = req.accept(params).expect("accept");
        tx.send(()).unwrap();
        exchange(&mut conn, b'S', b'C', N, 256)
    });
    let mut client =
        Connection::connect(addr(CLIENT, 0), addr(SERVER, 7471), params).expect("connect");
    rx.recv_timeout(Duration::from_secs(30))
        .expect("server accepted");
    assert_eq!(exchange(&mut client, b'C', b'S', N, 256), (N, N));
    assert_eq!(server.join().unwrap(), (N, N));
    client.disconnect().unwrap();
}

#[test]
fn requests_are_assigned_to_the_configured_interface_by_address() {
    if !have_device() {
        return;
    }
    // The listening interface is the second one configured; rxe devices have one port.
    let mut cm = Server::new(
        vec![
            ConfiguredInterface {
                config_index: 0,
                name: "mgmt".into(),
                addr: "10.255.0.1".parse().unwrap(),
            },
            ConfiguredInterface {
                config_index: 1,
                name: "data".into(),
                addr: SERVER.parse().unwrap(),
            },
        ],
        1,
    );
    let listener = Listener::bind(addr(SERVER, 7472), 8).expect("listen");
    let client = std::thread::spawn(|| {
        Connection::connect(
            addr(CLIENT, 0),
            addr(SERVER, 7472),
            ConnectionParams::default(),
        )
    });
    let req = match listener.next_request(Duration::from_secs(60), &|| false) {
        Ok(r) => r,
        Err(e) => panic!(
            "no request ({e}); client: {:?}",
            client.join().unwrap().err()
        ),
    };
    let actions = cm.on_event(&CmEvent::ConnectRequest {
        conn: 1,
        local: addr(SERVER, 7472),
        remote: addr(CLIENT, 0),
        device_port: req.device_port,
    });
    assert_eq!(req.device_port, 1, "rxe has one port");
    assert_eq!(
        actions,
        vec![CmAction::Accept {
            conn: 1,
            interface: 1
        }],
        "the second interface, though the device port is 1"
    );
    let conn = req.accept(ConnectionParams::default()).expect("accept");
    let client = client.join().unwrap().expect("client connected");
    assert_eq!(
        conn.posted_receives(),
        ConnectionParams::default().recv_depth,
        "every receive posted before the peer could send"
    );
    client.disconnect().unwrap();
}

#[test]
fn without_a_device_the_error_says_so() {
    if verbs::device_present().is_ok() {
        eprintln!("SKIP: an RDMA device is present");
        return;
    }
    let err = Listener::bind(addr("127.0.0.1", 7473), 1)
        .err()
        .expect("fails");
    let msg = err.to_string();
    assert!(msg.starts_with("no RDMA device found"), "{msg}");
    assert!(msg.contains("rdma link add"), "with a hint: {msg}");
}

/// Server and client connected on `port`, both returned.
fn pair(port: u16, params: ConnectionParams) -> (Listener, Connection, Connection) {
    let listener = Listener::bind(addr(SERVER, port), 8).expect("listen");
    let client = std::thread::spawn(move || {
        Connection::connect(addr(CLIENT, 0), addr(SERVER, port), params)
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    let server = req.accept(params).expect("accept");
    let client = client.join().unwrap().expect("client connected");
    (listener, server, client)
}

#[test]
fn write_with_immediate_and_read_move_data_one_sided() {
    if !have_device() {
        return;
    }
    let params = ConnectionParams {
        message_size: 4096,
        window_size: 16 * 4096,
        window_access: RemoteAccess::ReadWrite,
        ..ConnectionParams::default()
    };
    let (_l, mut server, mut client) = pair(7474, params);
    // Both sides learn the other's window.
    let s = std::thread::spawn(move || {
        server
            .exchange_keys(Duration::from_secs(30))
            .expect("server keys");
        server
    });
    let remote = client
        .exchange_keys(Duration::from_secs(30))
        .expect("client keys");
    let mut server = s.join().unwrap();
    assert_eq!(remote.len, 16 * 4096);

    // WRITE 4 chunks, the last with an immediate value.
    let chunk = |i: u64| -> Vec<u8> { (0..4096u64).map(|b| (b * 7 + i * 13) as u8).collect() };
    for i in 0..4u64 {
        let imm = (i == 3).then_some(0xC0FFEE);
        while !client.write(&chunk(i), i * 4096, imm).unwrap() {
            client.poll_completions(|_| {}).unwrap();
        }
    }
    let mut arrived = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while arrived.is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no WRITE_WITH_IMM arrived"
        );
        client.poll_completions(|_| {}).unwrap();
        server
            .poll_completions(|c| {
                if let rdma::verbs::Completion::WrittenWithImm { imm, len } = c {
                    arrived = Some((imm, len));
                }
            })
            .unwrap();
    }
    assert_eq!(
        arrived,
        Some((0xC0FFEE, 4096)),
        "immediate value and length"
    );
    for i in 0..4u64 {
        let at = (i * 4096) as usize;
        assert_eq!(
            &server.window()[at..at + 4096],
            chunk(i).as_slice(),
            "chunk {i}"
        );
    }

    // READ back what the server puts in its window.
    let pattern: Vec<u8> = (0..4096u32).map(|b| (b ^ 0x5a) as u8).collect();
    server.window_mut()[8192..8192 + 4096].copy_from_slice(&pattern);
    let token = client.read(8192, 4096).unwrap().expect("a free slot");
    let mut data = None;
    while data.is_none() {
        assert!(std::time::Instant::now() < deadline, "READ never completed");
        client
            .poll_completions(|c| {
                if let rdma::verbs::Completion::ReadDone { token: t, data: d } = c {
                    assert_eq!(t, token);
                    data = Some(d.to_vec());
                }
            })
            .unwrap();
    }
    assert_eq!(data.unwrap(), pattern);
    // Out of the window is refused before anything is posted.
    assert!(client.read(16 * 4096 - 10, 100).is_err());
    client.disconnect().unwrap();
}

#[test]
fn client_disconnect_while_the_server_reports_stats_stops_the_server_worker() {
    use rdma::workers::{Worker, WorkerTable};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    if !have_device() {
        return;
    }
    let (listener, server, mut client) = pair(7475, ConnectionParams::default());
    let key = server.key();
    let table: Arc<WorkerTable<u64>> = Arc::new(WorkerTable::default());
    let received = Arc::new(AtomicU64::new(0));
    let (t, r) = (table.clone(), received.clone());
    let worker = Worker::spawn("conn-worker".into(), move |stop| {
        let mut conn = server;
        while !stop.load(Ordering::Acquire) {
            match conn.poll(|_| {}) {
                Ok(p) => r.fetch_add(p.received, Ordering::Relaxed),
                Err(_) => break,
            };
        }
        // Final stats go through the table (takes its lock).
        let _ = t.len();
        r.load(Ordering::Relaxed)
    })
    .unwrap();
    table.insert(key, worker);
    // A stats reporter holds the table lock over and over.
    let reporting = Arc::new(AtomicBool::new(true));
    let (t2, rep) = (table.clone(), reporting.clone());
    let stats = std::thread::spawn(move || {
        while rep.load(Ordering::Acquire) {
            let _ = t2.len();
        }
    });
    for i in 0..100u32 {
        while !client.send(&i.to_le_bytes()).unwrap() {
            client.poll(|_| {}).unwrap();
        }
    }
    while received.load(Ordering::Relaxed) < 100 {
        client.poll(|_| {}).unwrap();
    }
    client.disconnect().unwrap();
    // The server's event loop: the disconnect stops that connection's worker.
    let start = std::time::Instant::now();
    loop {
        match listener
            .next_event(Duration::from_secs(30), &|| false)
            .expect("an event")
        {
            rdma::verbs::ListenerEvent::Disconnected(k) if k == key => break,
            _ => continue,
        }
    }
    let got = table.stop(key);
    let took = start.elapsed();
    reporting.store(false, Ordering::Release);
    stats.join().unwrap();
    assert_eq!(
        got,
        Some(100),
        "the worker was joined and returned its count"
    );
    assert!(table.is_empty());
    eprintln!("server worker stopped {took:?} after the disconnect event");
    assert!(took < Duration::from_secs(5), "bounded: {took:?}");
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// QPs on the machine, from iproute2's `rdma` tool (`None` when it is not there).
fn qps() -> Option<usize> {
    let out = std::process::Command::new("rdma")
        .args(["res", "show", "qp"])
        .output()
        .ok()?;
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("lqpn"))
            .count(),
    )
}

#[test]
fn fifty_connect_disconnect_cycles_leak_nothing() {
    if !have_device() {
        return;
    }
    let listener = Listener::bind(addr(SERVER, 7476), 8).expect("listen");
    let (threads_before, qps_before) = (threads(), qps());
    for cycle in 0..50u32 {
        let client = std::thread::spawn(move || {
            let mut c = Connection::connect(
                addr(CLIENT, 0),
                addr(SERVER, 7476),
                ConnectionParams::default(),
            )
            .expect("connect");
            while !c.send(&cycle.to_le_bytes()).unwrap() {}
            while c.send_room() < ConnectionParams::default().send_depth as usize {
                c.poll(|_| {}).unwrap();
            }
            c.disconnect().unwrap();
            c
        });
        let req = listener
            .next_request(Duration::from_secs(60), &|| false)
            .expect("request");
        let mut server = req.accept(ConnectionParams::default()).expect("accept");
        let mut got = None;
        while got.is_none() {
            server
                .poll(|m| got = Some(u32::from_le_bytes(m.try_into().unwrap())))
                .unwrap();
        }
        assert_eq!(got, Some(cycle));
        let key = server.key();
        loop {
            match listener
                .next_event(Duration::from_secs(30), &|| false)
                .expect("event")
            {
                rdma::verbs::ListenerEvent::Disconnected(k) if k == key => break,
                _ => continue,
            }
        }
        drop(server);
        drop(client.join().unwrap());
    }
    // A joined thread can still be listed for a moment: `join` returns when the kernel
    // clears the thread's id, before the task leaves /proc/self/task. So the count is
    // read until it settles (a bound, not a timing: a thread left behind stays listed).
    let settle = std::time::Instant::now() + Duration::from_secs(10);
    while threads() != threads_before && std::time::Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads(), threads_before, "no thread left behind");
    match (qps_before, qps()) {
        (Some(before), Some(after)) => assert_eq!(after, before, "no QP left behind"),
        _ => eprintln!("SKIP QP count: the rdma tool is not available"),
    }
}

#[test]
fn a_peer_that_vanishes_mid_transfer_is_reported_and_nothing_hangs() {
    if !have_device() {
        return;
    }
    let params = ConnectionParams {
        retry_count: 2,
        ..ConnectionParams::default()
    };
    let (listener, mut server, client) = pair(7477, params);
    // The client disappears without a disconnect, as a killed process would (its QP and
    // rdma_cm id are destroyed), while the server keeps sending. It goes before its 64
    // posted receives are used up: it never polls, so more would stall the server on RNR.
    let key = server.key();
    let start = std::time::Instant::now();
    let mut dropped = Some(client);
    let mut sent = 0u32;
    let outcome = loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing reported in 60 s"
        );
        if sent == 32 && dropped.is_some() {
            drop(dropped.take());
            eprintln!("client dropped after {:?}", start.elapsed());
        }
        if conn_room(&server) && server.send(&sent.to_le_bytes()).unwrap() {
            sent += 1;
        }
        if let Err(e) = server.poll(|_| {}) {
            break format!("completion error: {e}");
        }
        if dropped.is_none() {
            match listener.next_event(Duration::from_millis(1), &|| false) {
                Ok(rdma::verbs::ListenerEvent::Disconnected(k)) if k == key => {
                    break "disconnected".to_owned();
                }
                Ok(rdma::verbs::ListenerEvent::Other(what)) => eprintln!("event: {what}"),
                _ => {}
            }
        }
    };
    eprintln!("after {:?}: {outcome}", start.elapsed());
    assert!(
        outcome == "disconnected" || outcome.contains("work request"),
        "{outcome}"
    );
}

fn conn_room(c: &Connection) -> bool {
    c.send_room() > 0
}

#[test]
fn shutdown_during_traffic_joins_every_worker_promptly() {
    use rdma::workers::{Worker, WorkerTable};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    if !have_device() {
        return;
    }
    let (_l, server, client) = pair(7478, ConnectionParams::default());
    let table: Arc<WorkerTable<u64>> = Arc::new(WorkerTable::default());
    for (key, conn) in [(1u64, server), (2u64, client)] {
        let w = Worker::spawn(format!("conn-{key}"), move |stop| {
            let mut conn = conn;
            let mut moved = 0u64;
            let mut seq = 0u32;
            while !stop.load(Ordering::Acquire) {
                if conn.send_room() > 0 && conn.send(&seq.to_le_bytes()).unwrap_or(false) {
                    seq += 1;
                }
                match conn.poll(|_| {}) {
                    Ok(p) => moved += p.received,
                    Err(_) => break,
                }
            }
            moved
        })
        .unwrap();
        table.insert(key, w);
    }
    std::thread::sleep(Duration::from_secs(2));
    let start = std::time::Instant::now();
    let done = table.stop_all();
    let took = start.elapsed();
    eprintln!("both workers joined {took:?} after the stop, traffic: {done:?}");
    assert_eq!(done.len(), 2);
    assert!(
        done.iter().all(|(_, n)| n.is_some_and(|n| n > 0)),
        "traffic flowed: {done:?}"
    );
    assert!(took < Duration::from_secs(5), "bounded: {took:?}");
}

#[test]
fn a_rejected_client_hears_so_at_once_and_does_not_retry() {
    if !have_device() {
        return;
    }
    let mut cm = Server::new(
        vec![ConfiguredInterface {
            config_index: 0,
            name: "data".into(),
            addr: SERVER.parse().unwrap(),
        }],
        0,
    );
    let listener = Listener::bind(addr(SERVER, 7479), 8).expect("listen");
    let client = std::thread::spawn(|| {
        let start = std::time::Instant::now();
        let r = Connection::connect(
            addr(CLIENT, 0),
            addr(SERVER, 7479),
            ConnectionParams::default(),
        );
        (r.err().map(|e| e.to_string()), start.elapsed())
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    match &cm.on_event(&CmEvent::ConnectRequest {
        conn: 1,
        local: addr(SERVER, 7479),
        remote: addr(CLIENT, 0),
        device_port: req.device_port,
    })[0]
    {
        CmAction::Reject { reason, .. } => {
            assert!(reason.contains("most connections allowed (0)"), "{reason}");
            req.reject();
        }
        other => panic!("{other:?}"),
    }
    let (err, took) = client.join().unwrap();
    let err = err.expect("the client is refused");
    eprintln!("client refused after {took:?}: {err}");
    assert!(err.contains("Rejected"), "{err}");
}

/// Posts `op` on `client` and waits for its completion: `Ok` when it succeeded, the
/// completion's status text when it failed.
fn one_sided(client: &mut Connection, write: bool, offset: u64, len: usize) -> Result<(), String> {
    let posted = if write {
        client
            .write(&vec![0xEE; len], offset, None)
            .map(|ok| assert!(ok))
    } else {
        client.read(offset, len).map(|t| assert!(t.is_some()))
    };
    posted.map_err(|e| e.to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "no completion");
        let mut done = false;
        match client.poll_completions(|c| {
            done |= matches!(c, Completion::Sent | Completion::ReadDone { .. })
        }) {
            Err(verbs::VerbsError::Completion(e)) => return Err(e.status_text),
            Err(e) => panic!("{e}"),
            Ok(_) if done => return Ok(()),
            Ok(_) => {}
        }
    }
}

/// A client with the server's keys in hand (learned out of band: the strongest peer),
/// trying one READ or WRITE on a fresh connection each (a failed one breaks its QP).
fn attempt(
    port: u16,
    server_params: ConnectionParams,
    write: bool,
    target: impl Fn(&Connection) -> RemoteWindow,
    offset: u64,
) -> (Result<(), String>, Connection) {
    let listener = Listener::bind(addr(SERVER, port), 8).expect("listen");
    let client_params = ConnectionParams {
        message_size: 4096,
        ..ConnectionParams::default()
    };
    let client = std::thread::spawn(move || {
        Connection::connect(addr(CLIENT, 0), addr(SERVER, port), client_params)
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    let server = req.accept(server_params).expect("accept");
    let mut client = client.join().unwrap().expect("client connected");
    client.assume_remote_window(target(&server));
    (one_sided(&mut client, write, offset, 64), server)
}

#[test]
fn peers_can_touch_only_what_the_mode_grants() {
    if !have_device() {
        return;
    }
    let remote_access = |r: Result<(), String>, what: &str| {
        assert_eq!(r, Err("remote access error".to_owned()), "{what}");
    };
    // A SEND/RECV server (the default): its message slots and a buffer registered the way
    // the data plane registers its regions take neither READ nor WRITE, keys or not.
    let sendrecv = ConnectionParams {
        message_size: 4096,
        ..ConnectionParams::default()
    };
    let slots = |s: &Connection| s.message_slots_key();
    let (r, _s) = attempt(7480, sendrecv, false, slots, 0);
    remote_access(r, "READ of a SEND/RECV server's slots");
    let (r, _s) = attempt(7481, sendrecv, true, slots, 0);
    remote_access(r, "WRITE into a SEND/RECV server's slots");
    let buffer = vec![0x55u8; 1 << 16];
    let buffer_at = buffer.as_ptr() as u64;
    let registered = std::sync::Mutex::new(None);
    let (r, s) = attempt(
        7482,
        sendrecv,
        true,
        |s| {
            // SAFETY: `buffer` outlives the registration (dropped at the end of the test).
            let reg = unsafe { s.register(buffer_at, buffer.len(), RemoteAccess::None) }.unwrap();
            let w = RemoteWindow {
                addr: buffer_at,
                rkey: reg.rkey(),
                len: buffer.len() as u64,
            };
            *registered.lock().unwrap() = Some(reg);
            w
        },
        0,
    );
    remote_access(r, "WRITE into a buffer registered for SEND/RECV");
    assert!(buffer.iter().all(|&b| b == 0x55), "the buffer was written");
    drop((registered, s));
    // And it hands out no key: the exchange gives an empty window.
    assert!(pair(7483, sendrecv).1.remote_key().is_none());

    // A WRITE server: its window takes WRITEs, not READs, and nothing outside it is
    // reachable with the window's key.
    let write_server = ConnectionParams {
        message_size: 4096,
        window_size: 4 * 4096,
        window_access: RemoteAccess::Write,
        ..ConnectionParams::default()
    };
    let window = |s: &Connection| s.remote_key().expect("a WRITE server has a window");
    let (r, s) = attempt(7484, write_server, true, window, 4096);
    assert_eq!(r, Ok(()), "WRITE into the window");
    assert!(s.window()[4096..4096 + 64].iter().all(|&b| b == 0xEE));
    let (r, _s) = attempt(7485, write_server, false, window, 0);
    remote_access(r, "READ of a WRITE-only window");
    // The window's key, aimed just before the window (at the send slots).
    let before = |s: &Connection| {
        let w = s.remote_key().unwrap();
        RemoteWindow {
            addr: w.addr - 4096,
            len: w.len + 4096,
            ..w
        }
    };
    let (r, s) = attempt(7486, write_server, true, before, 0);
    remote_access(r, "WRITE before the window with its key");
    assert!(s.window().iter().all(|&b| b == 0), "the window was written");
    let (r, _s) = attempt(7487, write_server, true, slots, 0);
    remote_access(r, "WRITE into a WRITE server's slots");
}

#[test]
fn a_request_from_outside_the_allowed_peers_is_refused_with_its_address() {
    if !have_device() {
        return;
    }
    let listener = Listener::bind(addr(SERVER, 7481), 8).expect("listen");
    let client: std::net::IpAddr = CLIENT.parse().unwrap();
    // First the client is not admitted: it hears a reject, and the server learns who it was.
    let refused = std::thread::spawn(|| {
        Connection::connect(
            addr(CLIENT, 0),
            addr(SERVER, 7481),
            ConnectionParams::default(),
        )
        .err()
        .map(|e| e.to_string())
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    let mut asked = None;
    let r = req.accept_if(ConnectionParams::default(), |peer| {
        asked = Some(peer);
        false
    });
    assert_eq!(asked, Some(client), "admit saw the client's address");
    match r {
        Err(verbs::VerbsError::PeerRefused { peer }) => assert_eq!(peer, client),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted a refused peer"),
    }
    let err = refused.join().unwrap().expect("the client is refused");
    assert!(err.contains("Rejected"), "{err}");
    // Then admitted: the connection carries traffic both ways.
    let admitted = std::thread::spawn(|| {
        let mut c = Connection::connect(
            addr(CLIENT, 0),
            addr(SERVER, 7481),
            ConnectionParams::default(),
        )
        .expect("connect");
        exchange(&mut c, 2, 1, 100, 256)
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    let mut server = req
        .accept_if(ConnectionParams::default(), |peer| peer == client)
        .expect("accept");
    assert_eq!(exchange(&mut server, 1, 2, 100, 256), (100, 100));
    assert_eq!(admitted.join().unwrap(), (100, 100));
}
