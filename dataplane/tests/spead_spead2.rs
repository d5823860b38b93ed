//! SPEAD against spead2 itself (from PyPI, in the venv `scripts/setup.sh` makes), over UDP
//! on loopback through the socket engine:
//! - spead2's own UDP sender sends heaps (one left out), our queue receives them and the
//!   chunk assembler places them: every byte checked, the left-out heap counted missing;
//! - our heaps go out through a TX queue with two losses injected (a packet of one heap,
//!   all of another), spead2's receiver checks every byte of every heap it completes,
//!   and it and our assembler (fed the same packets) find the same heaps not whole.
//!
//! Without spead2 it prints SKIP (fails where `DATAPLANE_REQUIRE_SPEAD2` is set, as in
//! `make test`).

mod common;

use dataplane::protocol::spead::chunks::{ChunkAssembler, Placement, PlacementKey};
use dataplane::protocol::spead::{self, Flavour, HeapPackets, ItemPointer};
use std::collections::BTreeSet;
use std::io::BufRead;
use std::process::Command;
use std::time::Duration;

const TIMESTAMP: u32 = 0x1600;
const DATA: u32 = 0x4000;
const SAMPLES_PER_HEAP: u64 = 4096;
const HEAP_BYTES: usize = 16384;
const HEAPS: u64 = 24;

fn heap_payload(h: u64) -> Vec<u8> {
    common::spead::heap_payload(h, HEAP_BYTES)
}

use common::spead::{PATTERN_PY, spead2_python};

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A UDP client of the socket engine sending to `127.0.0.1:port` from one TX queue `tq`
/// of interface `spead_out`, with `queue` (YAML from column 0) added to the queue.
fn spead_out(port: u16, queue: &str) -> dataplane::config::Config {
    let text = common::socket_config(&format!(
        r#"
memory_regions:
- {{name: tx, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}}
interfaces:
- name: spead_out
  address: 127.0.0.1
  socket_config: {{mode: client, remote_addr: "udp://127.0.0.1:{port}"}}
  tx:
    queues:
    - name: tq
      id: 0
      cpu_core: 0
      batch_size: 32
      memory_regions: [tx]
{}"#,
        common::indented(queue, 6)
    ));
    dataplane::config::load_str(&text, "spead-out.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .config
}

#[test]
fn spead2s_sender_to_our_chunks_every_byte_and_the_left_out_heap_counted() {
    let Some(python) = spead2_python() else {
        return;
    };
    let port = free_udp_port();
    // The queue declares its protocol: the plane hands out chunks, not bursts.
    let cfg = common::socket_config(&format!(
        r#"
memory_regions:
- {{name: rx, kind: host, affinity: 0, num_bufs: 8192, buf_size: 2048}}
interfaces:
- name: spead_in
  address: 127.0.0.1
  socket_config: {{mode: server, local_addr: "udp://127.0.0.1:{port}"}}
  rx:
    queues:
    - name: rq
      id: 0
      cpu_core: 0
      batch_size: 64
      memory_regions: [rx]
      protocol:
        spead: {{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2,
                place_by: {{item: {TIMESTAMP:#x}, step: {SAMPLES_PER_HEAP}}}}}
"#
    ));
    let cfg = dataplane::config::load_str(&cfg, "spead-in.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut stream = plane
        .take_spead_stream("spead_in", 0)
        .expect("a SPEAD queue");
    let left_out = 13u64;
    let script = common::spead::Spead2Heaps {
        ids: (TIMESTAMP, DATA),
        heaps: HEAPS,
        left_out,
        heap_bytes: HEAP_BYTES,
        samples_per_heap: SAMPLES_PER_HEAP,
    }
    .sender_script(("127.0.0.1", port), 50e6);
    let mut sender = Command::new(&python)
        .args(["-c", &script])
        .spawn()
        .expect("python");
    let chunks = common::spead::chunks_until_stopped(&mut stream);
    assert!(sender.wait().unwrap().success());
    let drops = plane.snapshot().drops().total();
    let n = stream.counters();
    drop(stream);
    plane.shutdown().unwrap();
    assert_eq!(drops, 0, "loopback at 50 MB/s loses nothing");
    assert_eq!(n.bad_packets, 0, "spead2's packets decode");
    assert_eq!(
        (n.heaps_complete, n.heaps_incomplete, n.heaps_missing),
        (HEAPS - 1, 0, 1),
        "{n:?}"
    );
    common::spead::check_chunks(&chunks, (HEAPS, 4, HEAP_BYTES), Some(left_out), |h| {
        heap_payload(h)
    });
}

#[test]
fn our_heaps_to_spead2s_receiver_every_byte_and_the_same_heaps_not_whole() {
    let Some(python) = spead2_python() else {
        return;
    };
    let port = free_udp_port();
    let script = format!(
        "{PATTERN_PY}
import json, spead2, spead2.recv
config = spead2.recv.StreamConfig(max_heaps=4)
stream = spead2.recv.Stream(spead2.ThreadPool(), config)
stream.add_udp_reader({port}, bind_hostname='127.0.0.1', buffer_size=8 << 20)
print('ready', flush=True)
whole, corrupt = [], []
for heap in stream:
    items = {{item.id: item for item in heap.get_items()}}
    if {TIMESTAMP} not in items:
        continue
    h = items[{TIMESTAMP}].immediate_value // {SAMPLES_PER_HEAP}
    data = np.frombuffer(memoryview(items[{DATA}]), dtype=np.uint8)
    (whole if np.array_equal(data, payload(h, {HEAP_BYTES})) else corrupt).append(int(h))
stats = stream.stats
print(json.dumps({{'whole': whole, 'corrupt': corrupt,
    'incomplete': stats['incomplete_heaps_evicted'] + stats['incomplete_heaps_flushed']}}), flush=True)
os._exit(0)
"
    );
    let (mut receiver, mut out) =
        common::spead::spawn_when_ready(Command::new(&python).args(["-c", &script]));

    let cfg = spead_out(port, "");
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("spead_out", 0).unwrap();
    // Losses injected here: heap 5 loses its third packet, heap 9 every packet.
    let lose = |h: u64, k: usize| h == 9 || (h == 5 && k == 2);
    let flavour = Flavour::SPEAD_64_48;
    let mut asm = ChunkAssembler::new(
        flavour,
        Placement {
            key: PlacementKey::Item(TIMESTAMP),
            step: SAMPLES_PER_HEAP,
            heaps_per_chunk: HEAPS as u32,
            heap_bytes: HEAP_BYTES as u32,
            max_chunks: 1,
        },
    )
    .unwrap();
    let mut ours = None;
    let mut send = |datagrams: &[Vec<u8>]| {
        for d in datagrams {
            asm.ingest(d, &mut |c| ours = Some(c)).unwrap();
        }
        let mut burst = loop {
            match tx.alloc(datagrams.len()) {
                Ok(b) => break b,
                Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        for (k, d) in datagrams.iter().enumerate() {
            burst.buffer_mut(k, 0).unwrap()[..d.len()].copy_from_slice(d);
            burst.set_len(k, 0, d.len());
        }
        let mut burst = burst;
        while let Err(back) = tx.send(burst) {
            burst = back.burst;
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    for h in 0..HEAPS {
        let payload = heap_payload(h);
        let items = [
            ItemPointer {
                immediate: true,
                id: TIMESTAMP,
                value: h * SAMPLES_PER_HEAP,
            },
            ItemPointer {
                immediate: false,
                id: DATA,
                value: 0,
            },
        ];
        let mut packets = HeapPackets::new(flavour, h + 1, &items, &payload, 1472).unwrap();
        let (mut datagram, mut kept, mut k) = (Vec::new(), Vec::new(), 0);
        while packets.next_into(&mut datagram) {
            if !lose(h, k) {
                kept.push(datagram.clone());
            }
            k += 1;
        }
        if !kept.is_empty() {
            send(&kept);
        }
        // Paced: a heap every 2 ms (about 8 MB/s), well within the receiver's buffer.
        std::thread::sleep(Duration::from_millis(2));
    }
    send(&[spead::stream_stop_packet(flavour, HEAPS + 1)]);
    let mut result = String::new();
    out.read_line(&mut result).unwrap();
    assert!(receiver.wait().unwrap().success());
    drop(tx);
    plane.shutdown().unwrap();

    let theirs: serde_json::Value = serde_json::from_str(&result).expect(&result);
    assert_eq!(theirs["corrupt"], serde_json::json!([]), "{result}");
    let whole: BTreeSet<u64> = theirs["whole"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let chunk = ours.expect("the stop packet hands the chunk over");
    let ours_whole: BTreeSet<u64> = (0..HEAPS)
        .filter(|&h| chunk.present[h as usize] == 1)
        .collect();
    assert_eq!(whole, ours_whole, "spead2 and we find the same heaps whole");
    let not_whole: Vec<u64> = (0..HEAPS).filter(|h| !whole.contains(h)).collect();
    assert_eq!(not_whole, [5, 9]);
    assert_eq!(
        theirs["incomplete"], 1,
        "heap 5 incomplete for spead2: {result}"
    );
    let n = asm.counters();
    assert_eq!((n.heaps_incomplete, n.heaps_missing), (1, 1), "{n:?}");
}

/// Our SPEAD TX queue, declared in the YAML with its item descriptors and paced by the
/// worker, to spead2's receiver with an `ItemGroup`: spead2 learns the items' names,
/// types and shapes from our descriptor heaps, and reads every heap by name, the
/// timestamp as a 48-bit integer and the data as a little-endian `uint16` array, every
/// byte checked.
#[test]
fn our_declared_stream_is_read_by_name_by_spead2s_item_group() {
    let Some(python) = spead2_python() else {
        return;
    };
    let port = free_udp_port();
    let words = HEAP_BYTES / 2;
    let script = format!(
        "{PATTERN_PY}
import json, spead2, spead2.recv
stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
stream.add_udp_reader({port}, bind_hostname='127.0.0.1', buffer_size=8 << 20)
print('ready', flush=True)
ig = spead2.ItemGroup()
heaps = []
for heap in stream:
    updated = ig.update(heap)
    if 'data' not in updated:
        continue
    ts = int(ig['timestamp'].value)
    data = ig['data'].value
    ok = (data.dtype == np.dtype('<u2') and data.shape == ({words},)
          and np.array_equal(data.view(np.uint8), payload(ts // {SAMPLES_PER_HEAP}, {HEAP_BYTES})))
    heaps.append([ts, bool(ok)])
print(json.dumps({{'heaps': heaps,
    'items': {{ig[k].id: [k, ig[k].description] for k in ig.keys()}},
    'incomplete': stream.stats['incomplete_heaps_evicted'] + stream.stats['incomplete_heaps_flushed']}}), flush=True)
os._exit(0)
"
    );
    let (mut receiver, mut out) =
        common::spead::spawn_when_ready(Command::new(&python).args(["-c", &script]));

    let cfg = spead_out(
        port,
        &format!(
            r#"pacing_mbps: 100
protocol:
  spead:
    descriptors_every: 8
    items:
    - {{id: {TIMESTAMP:#x}, name: timestamp, description: "first sample", format: [[u, 48]]}}
    - {{id: {DATA:#x}, name: data, description: "samples", shape: [{words}], dtype: "<u2"}}"#
        ),
    );
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut sender = plane.take_spead_sender("spead_out", 0).unwrap();
    for h in 0..HEAPS {
        let payload = heap_payload(h);
        sender
            .send_heap(&[
                dataplane::HeapItem::Immediate {
                    id: TIMESTAMP,
                    value: h * SAMPLES_PER_HEAP,
                },
                dataplane::HeapItem::Addressed {
                    id: DATA,
                    bytes: &payload,
                },
            ])
            .expect("queued");
    }
    sender.send_stop().unwrap();
    let mut result = String::new();
    out.read_line(&mut result).unwrap();
    assert!(receiver.wait().unwrap().success());
    let sent = sender.counters();
    drop(sender);
    plane.shutdown().unwrap();

    let theirs: serde_json::Value = serde_json::from_str(&result).expect(&result);
    let expected: Vec<serde_json::Value> = (0..HEAPS)
        .map(|h| serde_json::json!([h * SAMPLES_PER_HEAP, true]))
        .collect();
    assert_eq!(
        theirs["heaps"],
        serde_json::Value::from(expected),
        "{result}"
    );
    assert_eq!(theirs["incomplete"], 0, "{result}");
    assert_eq!(
        theirs["items"],
        serde_json::json!({
            TIMESTAMP.to_string(): ["timestamp", "first sample"],
            DATA.to_string(): ["data", "samples"],
        }),
        "{result}"
    );
    assert_eq!(sent.descriptor_heaps, HEAPS.div_ceil(8));
}
