//! SPEAD against spead2 across two network namespaces joined by a veth pair: our data
//! plane on the DPDK engine (`net_af_packet` on one end, raw Ethernet frames), spead2 with
//! kernel UDP sockets on the other end. Both directions in one plane (EAL starts once per
//! process):
//! - our SPEAD TX queue, declared in the YAML, writes frames (Ethernet, IPv4, UDP with
//!   checksums) that the peer's kernel delivers to spead2's receiver, which reads every
//!   heap by name from our descriptors and checks every byte;
//! - spead2's paced sender, one heap left out, to our SPEAD RX queue's chunks: every byte
//!   in place and the left-out heap counted missing.
//!
//! Root only (namespaces), spead2 from `scripts/setup.sh`'s venv; SKIP otherwise.
#![cfg(feature = "dpdk")]

#[macro_use]
mod common;

use common::spead::{PATTERN_PY, heap_payload, spead2_python};
use dataplane::HeapItem;
use std::io::BufRead;

const NS_PLANE: &str = "spnet1";
const NS_PEER: &str = "spnet2";
const DEV: [&str; 2] = ["spva", "spvb"];
const PLANE_IP: &str = "10.253.0.1";
const PEER_IP: &str = "10.253.0.2";
const TO_PEER_PORT: u16 = 7148;
const TO_PLANE_PORT: u16 = 7149;
const TIMESTAMP: u32 = 0x1600;
const DATA: u32 = 0x4000;
const SAMPLES_PER_HEAP: u64 = 2048;
const HEAP_BYTES: usize = 8192;
const HEAPS: u64 = 16;

fn mac_of(ns: &str, dev: &str) -> String {
    common::netns_output(ns, &["cat", &format!("/sys/class/net/{dev}/address")])
}

/// The namespaces and the veth pair: the peer's end has an address and knows our end's
/// MAC (nothing on our side answers ARP: the DPDK port owns it).
fn setup() -> Result<(common::VethPair, String, String), String> {
    let pair = common::veth_pair(
        [NS_PLANE, NS_PEER],
        DEV,
        [None, Some(&format!("{PEER_IP}/24"))],
    )?;
    for (ns, dev) in [(NS_PLANE, DEV[0]), (NS_PEER, DEV[1])] {
        let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
        let _ = common::in_netns(ns, &["sysctl", "-qw", &key]).status();
    }
    let (ours, theirs) = (mac_of(NS_PLANE, DEV[0]), mac_of(NS_PEER, DEV[1]));
    let neighbour = ["neigh", "add", PLANE_IP, "lladdr", &ours, "dev", DEV[1]];
    if !common::ip(&[&["-n", NS_PEER][..], &neighbour[..]].concat()) {
        return Err("cannot add the peer's neighbour entry".into());
    }
    Ok((pair, ours, theirs))
}

fn config(our_mac: &str, peer_mac: &str) -> String {
    common::raw_config(&format!(
        r#"
memory_regions:
- {{name: rx, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1514}}
- {{name: tx, kind: host, affinity: 0, num_bufs: 1024, buf_size: 1514}}
interfaces:
- name: veth
  address: "net_af_packet0,iface={dev}"
  rx:
    queues:
    - name: rq
      id: 0
      cpu_core: 0
      batch_size: 32
      timeout_us: 100
      memory_regions: [rx]
      protocol:
        spead: {{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2,
                place_by: {{item: {TIMESTAMP:#x}, step: {SAMPLES_PER_HEAP}}}}}
  tx:
    queues:
    - name: tq
      id: 0
      cpu_core: 0
      batch_size: 32
      memory_regions: [tx]
      pacing_mbps: 100
      protocol:
        spead:
          udp: {{source: "{PLANE_IP}:7000", destination: "{PEER_IP}:{TO_PEER_PORT}",
                destination_mac: "{peer_mac}", source_mac: "{our_mac}"}}
          items:
          - {{id: {TIMESTAMP:#x}, name: timestamp, format: [[u, 48]]}}
          - {{id: {DATA:#x}, name: data, shape: [{HEAP_BYTES}], dtype: u1}}
"#,
        dev = DEV[0]
    ))
}

/// spead2's receiver in the peer's namespace: a line `ready`, then one JSON line of the
/// heaps it read by name (timestamp, every byte right).
fn spead2_receiver(python: &str) -> std::process::Command {
    let script = format!(
        "{PATTERN_PY}
import json, spead2, spead2.recv
stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
stream.add_udp_reader({TO_PEER_PORT}, bind_hostname='{PEER_IP}', buffer_size=4 << 20)
print('ready', flush=True)
ig = spead2.ItemGroup()
heaps = []
for heap in stream:
    if 'data' in ig.update(heap):
        ts = int(ig['timestamp'].value)
        heaps.append([ts, bool(np.array_equal(ig['data'].value, payload(ts // {SAMPLES_PER_HEAP}, {HEAP_BYTES})))])
print(json.dumps(heaps), flush=True)
os._exit(0)
"
    );
    common::in_netns(NS_PEER, &["timeout", "60", python, "-c", &script])
}

/// spead2's paced sender in the peer's namespace, heap `left_out` skipped, then the
/// stream's end.
fn spead2_sender(python: &str, left_out: u64) -> std::process::Child {
    let script = common::spead::Spead2Heaps {
        ids: (TIMESTAMP, DATA),
        heaps: HEAPS,
        left_out,
        heap_bytes: HEAP_BYTES,
        samples_per_heap: SAMPLES_PER_HEAP,
    }
    .sender_script((PLANE_IP, TO_PLANE_PORT), 20e6);
    common::in_netns(NS_PEER, &["timeout", "60", python, "-c", &script])
        .spawn()
        .expect("python")
}

#[test]
fn spead_both_ways_with_spead2_across_namespaces_on_af_packet() {
    let Some(python) = spead2_python() else {
        return;
    };
    let (_pair, our_mac, peer_mac) = ready_or_skip!("SPEAD across namespaces", setup());
    let text = config(&our_mac, &peer_mac);
    let cfg = dataplane::config::load_str(&text, "spead-netns.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config;
    let mut plane = common::on_thread_in_netns(NS_PLANE, move || {
        dataplane::DataPlane::start(&cfg).expect("start")
    });
    let mut sender = plane.take_spead_sender("veth", 0).expect("SPEAD TX");
    let mut stream = plane.take_spead_stream("veth", 0).expect("SPEAD RX");

    // Ours to spead2.
    let (mut receiver, mut out) = common::spead::spawn_when_ready(&mut spead2_receiver(&python));
    for h in 0..HEAPS {
        let data = heap_payload(h, HEAP_BYTES);
        sender
            .send_heap(&[
                HeapItem::Immediate {
                    id: TIMESTAMP,
                    value: h * SAMPLES_PER_HEAP,
                },
                HeapItem::Addressed {
                    id: DATA,
                    bytes: &data,
                },
            ])
            .expect("queued");
    }
    sender.send_stop().unwrap();
    let mut result = String::new();
    out.read_line(&mut result).unwrap();
    assert!(receiver.wait().unwrap().success(), "spead2's receiver");
    let theirs: serde_json::Value = serde_json::from_str(&result).expect(&result);
    let expected: Vec<serde_json::Value> = (0..HEAPS)
        .map(|h| serde_json::json!([h * SAMPLES_PER_HEAP, true]))
        .collect();
    assert_eq!(
        theirs,
        serde_json::Value::from(expected),
        "spead2 read every heap by name, every byte"
    );

    // spead2 to ours. Our own frames went out on this port: the RX queue saw none of
    // them (af_packet does not loop a port's transmissions back to it).
    let left_out = 6;
    let mut spead2 = spead2_sender(&python, left_out);
    let chunks = common::spead::chunks_until_stopped(&mut stream);
    assert!(spead2.wait().unwrap().success(), "spead2's sender");
    let n = stream.counters();
    drop((sender, stream));
    plane.shutdown().unwrap();
    assert_eq!(n.bad_packets, 0, "{n:?}");
    assert_eq!(
        (n.heaps_complete, n.heaps_incomplete, n.heaps_missing),
        (HEAPS - 1, 0, 1),
        "{n:?}"
    );
    common::spead::check_chunks(&chunks, (HEAPS, 4, HEAP_BYTES), Some(left_out), |h| {
        heap_payload(h, HEAP_BYTES)
    });
}
