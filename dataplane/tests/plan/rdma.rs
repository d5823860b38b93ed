//! RDMA plans: connection slots, staging where the NIC cannot reach a layout, refused
//! queues, allowed peers.

use super::*;

#[test]
fn rdma_loopback_has_a_server_and_a_client_slot() {
    let p = shipped("rdma_loopback.yaml");
    assert!(p.capabilities.connections);
    let server = p.rdma().iter().find(|i| i.listens()).unwrap();
    let client = p.rdma().iter().find(|i| !i.listens()).unwrap();
    assert_eq!(server.slots.len(), 1);
    let slot = &server.slots[0];
    assert_eq!(p.regions[slot.rx_region.index()].name, "DATA_RX_GPU_SERVER");
    assert_eq!(
        p.regions[slot.tx_region.unwrap().index()].name,
        "DATA_TX_GPU_SERVER"
    );
    assert_eq!(slot.recv_window, 128, "the RX region's buffers");
    assert_eq!(client.local.port(), 0);
    shipped("rdma_xhost.yaml");
}

/// A RoCE client without `local_addr` sends from its interface's `address`, as the
/// founding change's cross-host file is written (remote_ip/remote_port only); without an
/// IPv4 `address` to fall back on, the plan says what is missing.
#[test]
fn a_roce_client_without_local_addr_sends_from_its_address() {
    let text = |address: &str| {
        format!(
            r#"
dataplane:
  cfg:
    version: 1
    stream_type: socket
    protocol: roce
    master_core: 0
    memory_regions:
    - {{name: rx, kind: host, affinity: 0, num_bufs: 4, buf_size: 4096}}
    interfaces:
    - name: my_client
      address: {address}
      socket_config: {{mode: client, remote_ip: 198.18.0.1, remote_port: 4096}}
      roce_config: {{transport_mode: RC}}
      rx: {{queues: [{{name: rq, id: 0, cpu_core: 0, batch_size: 1, memory_regions: [rx]}}]}}
"#
        )
    };
    let cfg = load(&text("198.18.0.2"), "client.yaml").unwrap();
    let plan = Plan::from_config(&cfg).unwrap();
    let client = &plan.rdma()[0];
    assert_eq!(client.local, "198.18.0.2:0".parse().unwrap());
    assert!(!client.listens());
    let cfg = load(&text("my_rdma_port"), "client.yaml").unwrap();
    let e = Plan::from_config(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("local_addr is missing") && e.contains("`address` is not an IPv4 address"),
        "{e}"
    );
}

/// `stage_core` asks for a stage on its own core; an RDMA connection runs its stage (when it
/// has one) on its own worker, so the key is refused by name rather than ignored.
#[test]
fn stage_core_on_an_rdma_queue_is_refused() {
    let name = "rdma_loopback.yaml";
    let text =
        fill_placeholders(&std::fs::read_to_string(root().join("configs").join(name)).unwrap())
            .replace(
                r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1,"#,
                r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1, stage_core: 0,"#,
            );
    assert!(text.contains("stage_core: 0"));
    let cfg = load(&text, name).unwrap();
    let e = Plan::from_config(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("RX queue 0") && e.contains("stage_core is set, but the rdma engine has none"),
        "{e}"
    );
}

/// The loopback RDMA config with its server RX queue split into a 64-byte header region
/// and the payload region, and the client's regions in GPU memory; `extra` goes into
/// the client's `roce_config`.
fn rdma_staged_config(client_roce: &str, server_roce: &str) -> Result<Plan, String> {
    let name = "rdma_loopback.yaml";
    let original =
        fill_placeholders(&std::fs::read_to_string(root().join("configs").join(name)).unwrap());
    let text = common::rdma_loopback_with_split_server_rx(&original)
        .replace(
            r#"{name: "DATA_TX_GPU_CLIENT", kind: "host""#,
            r#"{name: "DATA_TX_GPU_CLIENT", kind: "device""#,
        )
        .replace(
            r#"{name: "DATA_RX_GPU_CLIENT", kind: "host""#,
            r#"{name: "DATA_RX_GPU_CLIENT", kind: "device""#,
        )
        .replacen(
            "transport_mode: RC",
            &format!("transport_mode: RC\n        {server_roce}"),
            1,
        )
        .replacen(
            "        transport_mode: RC\n      tx:",
            &format!("        transport_mode: RC\n        {client_roce}\n      tx:"),
            1,
        );
    assert_eq!(text.matches("kind: \"device\"").count(), 2);
    assert!(text.contains(client_roce) && text.contains(server_roce));
    let cfg = load(&text, name).map_err(|e| e.to_string())?;
    Plan::from_config(&cfg).map_err(|e| e.to_string())
}

/// A connection slot gets a host staging region where the NIC cannot deliver as the queue
/// is laid out: always for a header-data split (a receive lands in one buffer), and for
/// GPU memory as `gpu_memory_path` says (auto: only if registration fails, staged:
/// always, direct: never).
#[test]
fn rdma_slots_are_staged_where_the_nic_cannot_reach_their_layout() {
    let p = rdma_staged_config("gpu_memory_path: auto", "min_rnr_timer: 12").unwrap();
    let region = |r: RegionId| &p.regions[r.index()];
    let server = &p.rdma().iter().find(|i| i.listens()).unwrap().slots[0];
    let client = &p.rdma().iter().find(|i| !i.listens()).unwrap().slots[0];
    let names = |l: &[RegionId]| {
        l.iter()
            .map(|&r| region(r).name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&server.rx_layout), ["HDR", "DATA_RX_GPU_SERVER"]);
    let split = server.rx_staging.as_ref().expect("a split is staged");
    assert!(split.always);
    assert_eq!(split.stage.split_header_bytes, Some(64));
    assert_eq!(split.stage.gpu, None);
    let staging = region(split.region);
    assert_eq!(staging.name, "server.rx0.staging");
    assert_eq!(
        staging.kind,
        MemoryKind::Host,
        "no GPU memory in the layout"
    );
    assert_eq!(staging.buf_size, 64 + 65536, "a whole message");
    assert_eq!(staging.num_bufs, 2 * server.recv_window);
    assert!(server.tx_staging.is_none(), "host TX region: sent as it is");

    let rx = client.rx_staging.as_ref().expect("device RX region");
    let tx = client.tx_staging.as_ref().expect("device TX region");
    assert!(
        !rx.always && !tx.always,
        "auto: only when registration fails"
    );
    assert_eq!((rx.stage.gpu, tx.stage.gpu), (Some(0), Some(0)));
    assert_eq!(region(rx.region).kind, MemoryKind::HostPinned);
    assert_eq!(region(tx.region).name, "client.tx0.staging");
    assert_eq!(region(tx.region).buf_size, 65536);
    let text = p.human();
    assert!(
        text.contains("receives staged through `client.rx0.staging` (GPU 0 stage) when the NIC cannot register the GPU memory"),
        "{text}"
    );
    assert!(
        text.contains(
            "receives staged through `server.rx0.staging` (CPU stage, header-data split)"
        ),
        "{text}"
    );

    let p = rdma_staged_config("gpu_memory_path: staged", "min_rnr_timer: 12").unwrap();
    let client = &p.rdma().iter().find(|i| !i.listens()).unwrap().slots[0];
    assert!(client.rx_staging.as_ref().unwrap().always);
    assert!(client.tx_staging.as_ref().unwrap().always);

    let p = rdma_staged_config("gpu_memory_path: direct", "min_rnr_timer: 12").unwrap();
    let client = &p.rdma().iter().find(|i| !i.listens()).unwrap().slots[0];
    assert!(client.rx_staging.is_none() && client.tx_staging.is_none());
    assert!(!p.regions.iter().any(|r| r.name.starts_with("client.")));

    let e = rdma_staged_config("gpu_memory_path: auto", "gpu_memory_path: direct").unwrap_err();
    assert!(
        e.contains("server")
            && e.contains("splits headers from payload")
            && e.contains("gpu_memory_path direct"),
        "{e}"
    );
}

/// Regions a connection cannot use are refused, not left unused: a SEND leaves from one
/// buffer, and a message splits into at most headers and payload.
#[test]
fn rdma_queues_with_regions_a_connection_cannot_use_are_refused() {
    let name = "rdma_loopback.yaml";
    let original =
        fill_placeholders(&std::fs::read_to_string(root().join("configs").join(name)).unwrap());
    for (from, to, says) in [
        (
            r#"{name: "Client_TX_Queue", id: 0, cpu_core: 0, batch_size: 1}"#,
            r#"{name: "Client_TX_Queue", id: 0, cpu_core: 0, batch_size: 1, memory_regions: ["DATA_TX_GPU_CLIENT", "DATA_TX_GPU_SERVER"]}"#,
            "TX queue 0 has 2 memory regions; an RDMA SEND goes out of one buffer",
        ),
        (
            r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1, batch_size: 1}"#,
            r#"{name: "Server_RX_Queue", id: 0, cpu_core: 1, batch_size: 1, memory_regions: ["DATA_RX_GPU_SERVER", "DATA_RX_GPU_CLIENT", "DATA_TX_GPU_SERVER"]}"#,
            "RX queue 0 has 3 memory regions; a connection splits each message into at most two",
        ),
    ] {
        let text = original.replace(from, to);
        assert_ne!(text, original);
        let cfg = load(&text, name).unwrap();
        let e = Plan::from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
}

/// `allowed_peers` on a `roce://` server reaches the RDMA engine through the plan (and is
/// shown by `validate --plan`); without it the server takes anyone.
#[test]
fn rdma_servers_carry_their_allowed_peers_in_the_plan() {
    let name = "rdma_loopback.yaml";
    let original =
        fill_placeholders(&std::fs::read_to_string(root().join("configs").join(name)).unwrap());
    let listen = r#"local_addr: "roce://198.18.0.1:4791""#;
    assert!(original.contains(listen));
    let text = original.replacen(
        listen,
        &format!(
            r#"{listen}
        allowed_peers: ["198.18.0.2", "10.0.0.0/8"]"#
        ),
        1,
    );
    let p = Plan::from_config(&load(&text, name).unwrap()).unwrap();
    let server = p.rdma().iter().find(|i| i.listens()).unwrap();
    let allow = |a: &str| server.allowed_peers.allows(a.parse().unwrap());
    assert!(allow("198.18.0.2") && allow("10.200.1.1"));
    assert!(!allow("198.18.0.3") && !allow("::1"));
    assert!(
        p.human().contains("peers: 198.18.0.2/32, 10.0.0.0/8"),
        "{}",
        p.human()
    );
    let open = Plan::from_config(&load(&original, name).unwrap()).unwrap();
    let server = open.rdma().iter().find(|i| i.listens()).unwrap();
    assert!(server.allowed_peers.allows("203.0.113.9".parse().unwrap()));
}
