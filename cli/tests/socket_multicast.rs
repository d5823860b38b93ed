//! Multicast on the socket engine across two network namespaces: a UDP server with
//! `multicast_groups` joins an any-source group and a source-specific one; the kernel's own
//! UDP stack in the other namespace sends to both groups from two source addresses and to
//! a group nobody joined. What the server captures must be exactly the any-source group's
//! datagrams and the source-specific group's from its one source. Root only; skipped
//! visibly otherwise.

#[macro_use]
#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::time::Duration;

const NS_TX: &str = "dpmc1";
const NS_RX: &str = "dpmc2";

const SENDER: &str = r#"
import socket, sys, time
# (source address, group, tag): each datagram says where it came from and went.
plan = [("198.18.5.1", "239.7.7.7", "asm"), ("198.18.5.3", "239.7.7.7", "asm3"),
        ("198.18.5.1", "232.1.1.1", "ssm-good"), ("198.18.5.3", "232.1.1.1", "ssm-bad"),
        ("198.18.5.1", "239.7.7.8", "other")]
socks = {}
for src in {"198.18.5.1", "198.18.5.3"}:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
    socks[src] = s
for i in range(20):
    for src, group, tag in plan:
        socks[src].sendto(f"{tag}-{i}".encode(), (group, 5000))
    time.sleep(0.01)
print("sent")
"#;

#[test]
fn a_udp_server_takes_its_groups_any_source_and_source_specific_and_nothing_else() {
    let _ns = ready_or_skip!(
        "multicast test",
        common::veth_pair(
            [NS_TX, NS_RX],
            ["mca", "mcb"],
            [Some("198.18.5.1/24"), Some("198.18.5.2/24")],
        )
    );
    // The second source, and a route for the groups on the sender's side.
    for args in [
        ["-n", NS_TX, "addr", "add", "198.18.5.3/24", "dev", "mca"].as_slice(),
        ["-n", NS_TX, "route", "add", "224.0.0.0/4", "dev", "mca"].as_slice(),
    ] {
        assert!(common::ip(args), "ip {args:?}");
    }
    let work = std::env::temp_dir().join(format!("dp-multicast-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let cfg = work.join("mc.yaml");
    let body = r#"memory_regions:
- {name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}
interfaces:
- name: mc
  address: 198.18.5.2
  socket_config: {mode: server, local_addr: "udp://198.18.5.2:5000"}
  multicast_groups: ["239.7.7.7", {group: 232.1.1.1, source: 198.18.5.1}]
  rx:
    queues:
    - {name: q, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 1000, memory_regions: [bufs]}
"#;
    let bench_rx = "bench_rx:\n- {interface_name: mc, queue_id: -1, cpu_core: -1}\n";
    std::fs::write(&cfg, common::socket_config(body) + bench_rx).unwrap();
    let out = work.join("packets");
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let (cfg, folder) = (cfg.to_str().unwrap(), out.to_str().unwrap());
    let capture = ["capture", cfg, folder, "--format", "raw-per-packet"];
    let rx = common::spawn_piped(common::dataplane_in(
        NS_RX,
        bin,
        &[&capture[..], &["--seconds", "4", "--json"]].concat(),
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let tx = common::in_netns(NS_TX, &["python3", "-c", SENDER])
        .output()
        .unwrap();
    assert!(
        tx.status.success(),
        "{}",
        String::from_utf8_lossy(&tx.stderr)
    );
    let rx = rx.wait_with_output().unwrap();
    assert!(
        rx.status.success(),
        "capture ({:?}): {}\n{}",
        rx.status,
        String::from_utf8_lossy(&rx.stdout),
        String::from_utf8_lossy(&rx.stderr)
    );
    let mut got: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| String::from_utf8_lossy(&std::fs::read(e.unwrap().path()).unwrap()).into_owned())
        .collect();
    let _ = std::fs::remove_dir_all(&work);
    got.sort();
    let kinds = |tag: &str| {
        got.iter()
            .filter(|g| g.rsplit_once('-').unwrap().0 == tag)
            .count()
    };
    assert_eq!(
        (
            kinds("asm"),
            kinds("asm3"),
            kinds("ssm-good"),
            kinds("ssm-bad"),
            kinds("other")
        ),
        (20, 20, 20, 0, 0),
        "any source of the any-source group, only 198.18.5.1 in the source-specific one, no other group: {got:?}"
    );
    println!(
        "multicast: received {} datagrams, each of the joined (source, group) pairs",
        got.len()
    );
}
