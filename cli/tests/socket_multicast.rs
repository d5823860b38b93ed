//! Multicast on the socket engine across two network namespaces, IPv4 and IPv6: a UDP
//! server with `multicast_groups` joins an any-source group and a source-specific one; the
//! kernel's own UDP stack in the other namespace sends to both groups from two source
//! addresses and to a group nobody joined. What the server captures must be exactly the
//! any-source group's datagrams and the source-specific group's from its one source. Root
//! only; skipped visibly otherwise.

#[macro_use]
#[path = "../../bench/tests/common/mod.rs"]
mod common;

use std::time::Duration;

/// The sender: `SOURCES` and `PLAN` are filled in per IP version.
const SENDER: &str = r#"
import socket, sys, time
family = socket.AF_INET6 if ":" in SOURCES[0] else socket.AF_INET
socks = {}
for src in SOURCES:
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((src, 0))
    if family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(src))
    else:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, socket.if_nametoindex(DEVICE))
    socks[src] = s
for i in range(20):
    for src, group, tag in PLAN:
        socks[src].sendto(f"{tag}-{i}".encode(), (group, 5000))
    time.sleep(0.01)
print("sent")
"#;

/// One IP version's addresses: the server's and the sender's two, the groups joined
/// (any-source, and source-specific from `sources[0]`) and one not joined.
struct Case {
    namespaces: [&'static str; 2],
    /// The sender's end of the veth pair, then the server's.
    devices: [&'static str; 2],
    server: &'static str,
    sources: [&'static str; 2],
    prefix: &'static str,
    any_source: &'static str,
    source_specific: &'static str,
    other: &'static str,
}

/// The two namespaces of `case`, joined by a veth pair, with the addresses and routes the
/// sender needs.
fn network(case: &Case) -> Result<common::VethPair, String> {
    let v6 = case.server.contains(':');
    let [tx_ns, rx_ns] = case.namespaces;
    let [tx_dev, rx_dev] = case.devices;
    let with_len = |a: &str| format!("{a}/{}", case.prefix);
    let (first, second, server) = (
        with_len(case.sources[0]),
        with_len(case.sources[1]),
        with_len(case.server),
    );
    // IPv6 addresses are added without duplicate detection, so they are usable at once.
    let (a, b) = if v6 {
        (None, None)
    } else {
        (Some(first.as_str()), Some(server.as_str()))
    };
    let pair = common::veth_pair([tx_ns, rx_ns], case.devices, [a, b])?;
    let mut setup: Vec<Vec<&str>> = Vec::new();
    if v6 {
        setup.push(vec![
            "-n", tx_ns, "addr", "add", &first, "dev", tx_dev, "nodad",
        ]);
        setup.push(vec![
            "-n", rx_ns, "addr", "add", &server, "dev", rx_dev, "nodad",
        ]);
        setup.push(vec![
            "-n", tx_ns, "addr", "add", &second, "dev", tx_dev, "nodad",
        ]);
    } else {
        setup.push(vec!["-n", tx_ns, "addr", "add", &second, "dev", tx_dev]);
        setup.push(vec![
            "-n",
            tx_ns,
            "route",
            "add",
            "224.0.0.0/4",
            "dev",
            tx_dev,
        ]);
    }
    for args in &setup {
        if !common::ip(args) {
            return Err(format!("ip {args:?} failed"));
        }
    }
    Ok(pair)
}

/// Runs `case` in its namespaces and returns what the server captured.
fn capture(case: &Case) -> Vec<String> {
    let v6 = case.server.contains(':');
    let [tx_ns, rx_ns] = case.namespaces;
    let tx_dev = case.devices[0];
    let work = std::env::temp_dir().join(format!(
        "dp-multicast-{}-{}",
        std::process::id(),
        if v6 { 6 } else { 4 }
    ));
    std::fs::create_dir_all(&work).unwrap();
    let cfg = work.join("mc.yaml");
    let local = if v6 {
        format!("udp://[{}]:5000", case.server)
    } else {
        format!("udp://{}:5000", case.server)
    };
    let body = format!(
        r#"memory_regions:
- {{name: bufs, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
interfaces:
- name: mc
  address: "{server}"
  socket_config: {{mode: server, local_addr: "{local}"}}
  multicast_groups: ["{asm}", {{group: "{ssm}", source: "{source}"}}]
  rx:
    queues:
    - {{name: q, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 1000, memory_regions: [bufs]}}
"#,
        server = case.server,
        asm = case.any_source,
        ssm = case.source_specific,
        source = case.sources[0],
    );
    let bench_rx = "bench_rx:\n- {interface_name: mc, queue_id: -1, cpu_core: -1}\n";
    std::fs::write(&cfg, common::socket_config(&body) + bench_rx).unwrap();
    let out = work.join("packets");
    let bin = env!("CARGO_BIN_EXE_dataplane");
    let (cfg, folder) = (cfg.to_str().unwrap(), out.to_str().unwrap());
    let capture = ["capture", cfg, folder, "--format", "raw-per-packet"];
    let rx = common::spawn_piped(common::dataplane_in(
        rx_ns,
        bin,
        &[&capture[..], &["--seconds", "4", "--json"]].concat(),
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let [s1, s3] = case.sources;
    let sender = SENDER.replace(
        "import socket, sys, time",
        &format!(
            "import socket, sys, time\nDEVICE = {tx_dev:?}\nSOURCES = [{s1:?}, {s3:?}]\nPLAN = [({s1:?}, {a:?}, 'asm'), ({s3:?}, {a:?}, 'asm3'), ({s1:?}, {g:?}, 'ssm-good'), ({s3:?}, {g:?}, 'ssm-bad'), ({s1:?}, {o:?}, 'other')]",
            a = case.any_source,
            g = case.source_specific,
            o = case.other,
        ),
    );
    let tx = common::in_netns(tx_ns, &["python3", "-c", &sender])
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
    let got: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| String::from_utf8_lossy(&std::fs::read(e.unwrap().path()).unwrap()).into_owned())
        .collect();
    let _ = std::fs::remove_dir_all(&work);
    got
}

/// What a server that joined the case's groups must capture, and only that.
fn check(case: &Case, mut got: Vec<String>) {
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
        "any source of the any-source group, only {} in the source-specific one, no other group: {got:?}",
        case.sources[0]
    );
    println!(
        "multicast to {}: received {} datagrams, each of the joined (source, group) pairs",
        case.server,
        got.len()
    );
}

#[test]
fn a_udp_server_takes_its_groups_any_source_and_source_specific_and_nothing_else() {
    let case = Case {
        namespaces: ["dpmc1", "dpmc2"],
        devices: ["mca", "mcb"],
        server: "198.18.5.2",
        sources: ["198.18.5.1", "198.18.5.3"],
        prefix: "24",
        any_source: "239.7.7.7",
        source_specific: "232.1.1.1",
        other: "239.7.7.8",
    };
    let _ns = ready_or_skip!("multicast test", network(&case));
    check(&case, capture(&case));
}

/// The same over IPv6: the server's sockets are IPv6, the kernel sends MLDv2 reports, and
/// the source-specific group is in ff3e::/16 (SSM).
#[test]
fn an_ipv6_udp_server_takes_its_groups_any_source_and_source_specific_and_nothing_else() {
    let case = Case {
        namespaces: ["dpmc61", "dpmc62"],
        devices: ["mc6a", "mc6b"],
        server: "fd00:5::2",
        sources: ["fd00:5::1", "fd00:5::3"],
        prefix: "64",
        any_source: "ff15::7",
        source_specific: "ff3e::8",
        other: "ff15::9",
    };
    let _ns = ready_or_skip!("multicast test", network(&case));
    check(&case, capture(&case));
}
