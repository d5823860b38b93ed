//! Bursts over a real RDMA connection (Soft-RoCE in the VM of scripts/rdma-vm-tests.sh):
//! packets go out of and arrive in our memory regions without copies, arrive intact and in
//! order, and every buffer is back in its pool at the end. Without an RDMA device it prints
//! SKIP.

mod common;

use dataplane::Burst;
use dataplane::config::{Access, MemoryKind, MemoryRegionConfig};
use dataplane::memory::RegionSet;
use dataplane::memory::{PortIndex, QueueId, RegionId};
use dataplane::rdma_conn::{BurstConnection, SendError};
use rdma::verbs::{self, Connection, ConnectionParams, Listener};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn region(name: &str, num_bufs: usize) -> MemoryRegionConfig {
    MemoryRegionConfig {
        name: name.into(),
        kind: MemoryKind::Host,
        affinity: 0,
        gpu_uuid: None,
        num_bufs,
        buf_size: 2048,
        access: vec![Access::Local],
        zero_copy: None,
        location: Default::default(),
    }
}

fn payload(burst: u32, pkt: u32) -> Vec<u8> {
    let len = 64 + ((burst * 31 + pkt * 17) % 1400) as usize;
    (0..len)
        .map(|i| (i as u32 ^ burst.wrapping_mul(7) ^ pkt.wrapping_mul(13)) as u8)
        .collect()
}

/// Connection parameters for a [`BurstConnection`] (it posts its own receives).
fn burst_params(send_depth: u32, recv_depth: u32) -> ConnectionParams {
    ConnectionParams {
        own_receives: false,
        send_depth,
        recv_depth,
        message_size: 64,
        ..ConnectionParams::default()
    }
}

/// A connection accepted on `listener` (bound to 198.18.0.1:`port`) from a client on
/// 198.18.0.2, both as burst connections over `regions`: the server receives into region 0
/// with `server_receives` posted, the client sends from region 1. (server, client).
fn burst_pair(
    listener: &Listener,
    port: u16,
    params: ConnectionParams,
    regions: &Arc<RegionSet>,
    server_receives: usize,
) -> (BurstConnection, BurstConnection) {
    let client = std::thread::spawn(move || {
        Connection::connect(
            "198.18.0.2:0".parse().unwrap(),
            std::net::SocketAddr::from(([198, 18, 0, 1], port)),
            params,
        )
    });
    let req = listener
        .next_request(Duration::from_secs(60), &|| false)
        .expect("a request");
    let server = req.accept(params).expect("accept");
    let client = client.join().unwrap().expect("connect");
    let srv = BurstConnection::new(
        server,
        regions.clone(),
        RegionId(0),
        &[],
        (PortIndex(0), QueueId(0)),
        server_receives,
    )
    .unwrap();
    let cli = BurstConnection::new(
        client,
        regions.clone(),
        RegionId(0),
        &[RegionId(1)],
        (PortIndex(1), QueueId(0)),
        0,
    )
    .unwrap();
    (srv, cli)
}

#[test]
fn bursts_cross_an_rdma_connection_intact_and_every_buffer_comes_back() {
    if !rdma_device_present() {
        return;
    }
    const BURSTS: u32 = 200;
    const PER: u32 = 32;
    let regions =
        Arc::new(RegionSet::allocate(&[region("srv_rx", 1024), region("cli_tx", 1024)]).unwrap());
    let (srv_rx, cli_tx) = (0, 1);
    let params = burst_params(128, 256);
    let listener = Listener::bind("198.18.0.1:7480".parse().unwrap(), 8).expect("listen");
    let (mut srv, mut cli) = burst_pair(&listener, 7480, params, &regions, 256);
    assert_eq!(srv.receives_posted(), 256, "receives up before any send");

    let (mut sent, mut got_bursts, mut got) = (0u32, 0u32, 0u64);
    let (mut want_burst, mut want_pkt) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < u64::from(BURSTS * PER) {
        assert!(
            Instant::now() < deadline,
            "stalled: sent {sent} bursts, got {got} packets"
        );
        if sent < BURSTS {
            let mut b = Burst::allocate(
                regions.clone(),
                PortIndex(1),
                QueueId(0),
                &[RegionId(cli_tx)],
                PER as usize,
            )
            .expect("TX buffers");
            for p in 0..PER {
                let data = payload(sent, p);
                b.buffer_mut(p as usize, 0).unwrap()[..data.len()].copy_from_slice(&data);
                b.set_len(p as usize, 0, data.len());
            }
            match cli.send(b) {
                Ok(()) => sent += 1,
                Err(SendError::Full(_)) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        cli.poll().unwrap();
        if let Some(rx) = srv.poll().unwrap() {
            got_bursts += 1;
            for i in 0..rx.len() {
                assert_eq!(
                    rx.data(i, 0).unwrap(),
                    payload(want_burst, want_pkt).as_slice(),
                    "burst {want_burst} packet {want_pkt}"
                );
                want_pkt += 1;
                if want_pkt == PER {
                    (want_burst, want_pkt) = (want_burst + 1, 0);
                }
                got += 1;
            }
            // `rx` drops here: its buffers go back to the RX region's pool.
        }
    }
    while cli.bursts_in_flight() > 0 {
        assert!(Instant::now() < deadline, "sends never completed");
        cli.poll().unwrap();
    }
    eprintln!("{got} packets in {got_bursts} received bursts");
    assert_eq!(
        regions.get(RegionId(cli_tx)).available(),
        1024,
        "every TX buffer came back"
    );
    drop(cli);
    drop(srv);
    assert_eq!(
        regions.get(RegionId(srv_rx)).available(),
        1024,
        "every RX buffer came back"
    );
}

fn loopback_config_text() -> String {
    // Without `..`: inside the VM only the files themselves exist, not the crate directory.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("configs/rdma_loopback.yaml");
    std::fs::read_to_string(path).expect("configs/rdma_loopback.yaml")
}

fn loopback_plane() -> dataplane::DataPlane {
    let cfg = dataplane::config::load_str(&loopback_config_text(), "rdma_loopback.yaml")
        .expect("config")
        .config;
    // The same `DataPlane::start` as every engine: regions, hugepage preflight, workers
    // on the configured cores, counters.
    dataplane::DataPlane::start(&cfg).expect("start")
}

/// The plane's `server` interface accepts while its `client` interface connects to
/// `server_addr`: (server end, client end).
fn accept_and_connect(
    plane: &dataplane::DataPlane,
    server_addr: std::net::SocketAddr,
) -> (dataplane::Stream, dataplane::Stream) {
    std::thread::scope(|s| {
        let srv = s.spawn(|| plane.accept("server", Duration::from_secs(60)));
        let cli = plane.connect("client", server_addr).expect("connect");
        (srv.join().unwrap().expect("accept"), cli)
    })
}

/// Says SKIP and gives false where this machine has no RDMA device.
fn rdma_device_present() -> bool {
    match verbs::device_present() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIP: {e}");
            false
        }
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `bursts` bursts of `per` packets from `from` and checks every packet arrives at
/// `to`, in order, in `rx_region`.
fn stream_bursts(
    plane: &dataplane::DataPlane,
    from: &dataplane::Stream,
    tx_region: &str,
    to: &dataplane::Stream,
    rx_region: &str,
    bursts_of: (u32, u32),
) {
    let regions = plane.regions().clone();
    let (tx, rx) = (
        regions.id_of(tx_region).unwrap(),
        regions.id_of(rx_region).unwrap(),
    );
    stream_bursts_checked(from, Some(tx), to, bursts_of, |burst, i, want, _| {
        assert_eq!(burst.data(i, 0).unwrap(), want);
        assert_eq!(burst.packets()[i].segments()[0].region, rx);
    });
}

/// Sends `bursts` bursts of `per` packets from `from` (allocated from `tx_region` when
/// given) and calls `check(burst, index, expected bytes, packet number)` for every packet
/// `to` receives, in order.
fn stream_bursts_checked(
    from: &dataplane::Stream,
    tx_region: Option<RegionId>,
    to: &dataplane::Stream,
    (bursts, per): (u32, u32),
    mut check: impl FnMut(&Burst, usize, &[u8], u32),
) {
    let (mut sent, mut got) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < bursts * per {
        assert!(
            Instant::now() < deadline,
            "sent {sent} bursts, got {got} packets"
        );
        if sent < bursts
            && let Ok(mut b) = from.alloc(per as usize)
        {
            if let Some(tx) = tx_region {
                assert_eq!(
                    b.packets()[0].segments()[0].region,
                    tx,
                    "the slot's TX region"
                );
            }
            for p in 0..per as usize {
                let data = payload(sent, p as u32);
                b.buffer_mut(p, 0).unwrap()[..data.len()].copy_from_slice(&data);
                b.set_len(p, 0, data.len());
            }
            match from.send(b) {
                Ok(()) => sent += 1,
                Err(b) => drop(b), // the queue is full: try again
            }
        }
        while let Some(burst) = to.poll() {
            for i in 0..burst.len() {
                check(&burst, i, &payload(got / per, got % per), got);
                got += 1;
            }
        }
    }
    assert_eq!(from.stats().errors, 0, "{:?}", from.last_error());
    assert_eq!(to.stats().errors, 0, "{:?}", to.last_error());
}

#[test]
fn the_loopback_config_runs_connections_on_the_plane_workers_and_frees_the_slot_on_disconnect() {
    if !rdma_device_present() {
        return;
    }
    let plane = loopback_plane();
    let server_addr = "198.18.0.1:4791".parse().unwrap();
    let (server, client) = accept_and_connect(&plane, server_addr);
    assert_eq!(
        plane.connections(),
        2,
        "both ends run, on the plane's workers"
    );
    assert_eq!(
        plane.worker_cores(),
        vec![0, 1],
        "one worker per slot core (client 0, server 1), no thread per connection"
    );
    assert_eq!((server.interface(), server.queue()), ("server", 0));
    // The QPs run with the configured (default) RNR timer, not rdma_cm's 655 ms.
    for end in [&server, &client] {
        let qp = end.qp_settings();
        assert_eq!((qp.min_rnr_timer, qp.rnr_retry, qp.retry_count), (12, 7, 7));
    }
    stream_bursts(
        &plane,
        &client,
        "DATA_TX_GPU_CLIENT",
        &server,
        "DATA_RX_GPU_SERVER",
        (100, 16),
    );
    stream_bursts(
        &plane,
        &server,
        "DATA_TX_GPU_SERVER",
        &client,
        "DATA_RX_GPU_CLIENT",
        (60, 8),
    );
    assert_eq!(client.stats().sent_packets, 1600);
    assert_eq!(server.stats().received_packets, 1600);

    // The plane's client interface has one queue, so it cannot open a second connection.
    let busy = plane
        .connect("client", server_addr)
        .err()
        .expect("no free client queue");
    assert!(
        busy.to_string()
            .contains("every queue already carries a connection"),
        "{busy}"
    );
    // The server interface has one queue too: a second client (outside the plane) is refused.
    let refused = Connection::connect(
        "198.18.0.2:0".parse().unwrap(),
        server_addr,
        ConnectionParams::default(),
    );
    assert!(refused.is_err(), "a second connection must be refused");
    let told = plane.accept("server", Duration::from_secs(60));
    match told {
        Err(dataplane::engine::ConnectionError::Rejected { reason, .. }) => {
            eprintln!("refused as expected: {reason}")
        }
        Err(e) => panic!("expected a rejection, got {e}"),
        Ok(_) => panic!("expected a rejection, got a connection"),
    }

    // The client goes away: the server end closes, the workers retire both connections
    // (no thread is joined), and the queue is free for the next client.
    let start = Instant::now();
    drop(client);
    wait_until("the server end to close", || server.is_closed());
    drop(server);
    wait_until("both connections to retire", || plane.connections() == 0);
    eprintln!(
        "both connections retired {:?} after the client dropped",
        start.elapsed()
    );
    // The slots' counters are the plane's, like any queue's.
    let snap = plane.snapshot();
    let sent: u64 = snap
        .queues
        .iter()
        .filter(|q| q.interface == "client" && q.direction == "tx")
        .map(|q| q.packets)
        .sum();
    assert_eq!(sent, 1600, "{snap:?}");
    let (server, client) = accept_and_connect(&plane, server_addr);
    stream_bursts(
        &plane,
        &client,
        "DATA_TX_GPU_CLIENT",
        &server,
        "DATA_RX_GPU_SERVER",
        (10, 4),
    );
    drop((server, client));
    drop(plane);
}

/// A header-data split on a connection: the NIC writes each message into one buffer, so
/// the slot receives into its host staging region and the RX stage splits every message
/// into the header region (its first 64 bytes) and the payload region. The same stage
/// carries messages into GPU memory when the NIC cannot register it (not here: the VM has
/// no GPU; `engine::rdma::tests` covers that choice).
#[test]
fn a_split_rx_queue_receives_through_its_staging_region_into_both_regions() {
    if !rdma_device_present() {
        return;
    }
    let text = common::rdma_loopback_with_split_server_rx(&loopback_config_text());
    let cfg = dataplane::config::load_str(&text, "split.yaml")
        .expect("config")
        .config;
    let plane = dataplane::DataPlane::start(&cfg).expect("start");
    let regions = plane.regions().clone();
    let (hdr, data, staging) = (
        regions.id_of("HDR").unwrap(),
        regions.id_of("DATA_RX_GPU_SERVER").unwrap(),
        regions
            .id_of("server.rx0.staging")
            .expect("the slot's staging region"),
    );
    let server_addr = "198.18.0.1:4791".parse().unwrap();
    let (server, client) = accept_and_connect(&plane, server_addr);
    const BURSTS: u32 = 60;
    const PER: u32 = 8;
    stream_bursts_checked(
        &client,
        None,
        &server,
        (BURSTS, PER),
        |burst, i, want, got| {
            let segs = burst.packets()[i].segments();
            assert_eq!(
                (segs.len(), segs[0].region, segs[1].region),
                (2, hdr, data),
                "packet {got}: headers, then payload"
            );
            assert_eq!(
                burst.data(i, 0).unwrap(),
                &want[..64],
                "packet {got} header"
            );
            assert_eq!(
                burst.data(i, 1).unwrap(),
                &want[64..],
                "packet {got} payload"
            );
        },
    );
    assert_eq!(server.stats().errors, 0, "{:?}", server.last_error());
    assert_eq!(server.stats().received_packets, u64::from(BURSTS * PER));
    drop(client);
    wait_until("the server end to close", || server.is_closed());
    drop(server);
    wait_until("both connections to retire", || plane.connections() == 0);
    for (r, what) in [(hdr, "header"), (data, "payload"), (staging, "staging")] {
        assert_eq!(
            regions.get(r).available(),
            regions.get(r).num_bufs(),
            "every {what} buffer came back"
        );
    }
    drop(plane);
}

/// The memory a connection registered outlives the registration whatever the application
/// drops first: the connections hold the region set (a weak handle still reaches it after
/// the application's last handle is gone), and the set is freed once nothing holds it, so
/// nothing leaks either. All six orders of dropping the application's handle, the server's
/// connection and the client's, with a burst in flight from the client and every receive
/// posted on the server.
#[test]
fn regions_outlive_their_registrations_in_every_drop_order() {
    if !rdma_device_present() {
        return;
    }
    let params = burst_params(64, 64);
    let orders: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    let listener = Listener::bind("198.18.0.1:7483".parse().unwrap(), 8).expect("listen");
    for order in orders {
        let regions =
            Arc::new(RegionSet::allocate(&[region("srv_rx", 128), region("cli_tx", 128)]).unwrap());
        let weak = Arc::downgrade(&regions);
        let (srv, mut cli) = burst_pair(&listener, 7483, params, &regions, 64);
        let mut b = Burst::allocate(regions.clone(), PortIndex(1), QueueId(0), &[RegionId(1)], 8)
            .expect("TX buffers");
        for p in 0..8 {
            b.buffer_mut(p, 0).unwrap()[..100].fill(p as u8);
            b.set_len(p, 0, 100);
        }
        cli.send(b).expect("send");
        let mut held: [Option<Box<dyn std::any::Any>>; 3] = [
            Some(Box::new(regions)),
            Some(Box::new(srv)),
            Some(Box::new(cli)),
        ];
        for (step, &who) in order.iter().enumerate() {
            drop(held[who].take());
            if step < 2 {
                assert!(
                    weak.upgrade().is_some(),
                    "order {order:?}: the regions are gone while a registration lives"
                );
            }
        }
        assert!(
            weak.upgrade().is_none(),
            "order {order:?}: the regions outlived everything that holds them"
        );
    }
}
