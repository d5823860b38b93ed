//! Flow steering: two rules send UDP destination ports 5000 and 6000 to queues 0 and 1 with
//! their flow ids; a rule added while traffic runs (`add_flow`) sends port 7000 to queue 1
//! as well, and removing it (`remove_flow`) makes such packets count as `no_flow` again.
//!
//! `cargo run --release -p dataplane --example steering`

use dataplane::config::{FlowConfig, FlowMatch, PortRange};
use dataplane::packet::{UdpFrame, parse};
use dataplane::{DataPlane, RxQueue, TxQueue};
use std::time::Duration;

/// The configuration, compiled in: `configs/loopback_steering.yaml`.
const CONFIG: &str = include_str!("../../configs/loopback_steering.yaml");

fn send(tx: &mut TxQueue, dport: u16, count: usize) {
    let frame = UdpFrame::new(
        "10.0.0.1:4096".parse().unwrap(),
        std::net::SocketAddrV4::new([10, 0, 0, 2].into(), dport),
    );
    let mut burst = tx.alloc(count).expect("free buffers");
    for i in 0..count {
        let len = frame
            .write(&[i as u8; 16], burst.buffer_mut(i, 0).unwrap())
            .unwrap();
        burst.set_len(i, 0, len);
    }
    tx.send_within(burst, Duration::from_secs(5)).expect("sent");
}

/// (UDP destination port, flow id) of every packet that arrives within `count`.
fn take(rx: &mut RxQueue, count: usize) -> Vec<(u16, u32)> {
    let mut got = Vec::new();
    while got.len() < count {
        let burst = rx
            .recv(Duration::from_secs(5))
            .expect("plane running")
            .unwrap_or_else(|| panic!("{} of {count} packets arrived", got.len()));
        for i in 0..burst.len() {
            let view = parse(burst.data(i, 0).unwrap()).unwrap();
            got.push((view.udp_ports.unwrap().1, burst.packets()[i].flow_id));
        }
    }
    got
}

fn main() {
    let config = dataplane::config::load_str(CONFIG, "steering")
        .expect("valid configuration")
        .config;
    let mut plane = DataPlane::start(&config).expect("plane starts");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut q0 = plane.take_rx_queue("loop0", 0).unwrap();
    let mut q1 = plane.take_rx_queue("loop0", 1).unwrap();

    send(&mut tx, 5000, 20);
    send(&mut tx, 6000, 10);
    assert!(take(&mut q0, 20).iter().all(|&p| p == (5000, 10)));
    assert!(take(&mut q1, 10).iter().all(|&p| p == (6000, 20)));

    let flow = FlowConfig {
        name: "late".into(),
        id: 30,
        queue_ids: vec![1],
        matches: FlowMatch {
            udp_dst: Some(PortRange {
                first: 7000,
                last: 7000,
            }),
            ..Default::default()
        },
        transforms: Vec::new(),
        location: Default::default(),
    };
    let handle = plane.add_flow("loop0", flow).expect("rule added");
    send(&mut tx, 7000, 8);
    assert!(take(&mut q1, 8).iter().all(|&p| p == (7000, 30)));

    plane.remove_flow(handle).expect("rule removed");
    let before = plane.snapshot().drops().no_flow;
    send(&mut tx, 7000, 8);
    // Counted where the frames entered: no queue gets them.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while plane.snapshot().drops().no_flow < before + 8 {
        assert!(std::time::Instant::now() < deadline, "no_flow not counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    plane.shutdown().expect("no worker failed");
    println!("steering: rules, a rule added at run time and its removal all held");
}
