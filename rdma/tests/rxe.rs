//! RC connections over real verbs and rdma_cm. `make test` runs this binary inside the
//! Soft-RoCE VM (../shared/tools/rxe-vm: rxe0 on 198.18.0.1, rxe1 on 198.18.0.2, one
//! Ethernet segment); run directly on a machine without RDMA, the device tests print SKIP
//! and the no-device test checks the error instead.

use rdma::cm::{CmAction, CmEvent, ConfiguredInterface, Server};
use rdma::verbs::{self, Connection, ConnectionParams, Listener};
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
