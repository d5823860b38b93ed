//! `protocol: {spead: ...}` on a TX queue: parsed with errors that name the key, planned
//! (and shown by `validate --plan`), refused where the frames could not be addressed or
//! the packets would not fit, and run end to end on the software loopback: heaps sent by
//! the TX queue's sender arrive in an RX queue's chunks, every byte in place, with the
//! descriptor heaps counted apart. spead2 reading our heaps by name is in
//! `spead_spead2.rs`.

mod common;

use dataplane::plan::ProtocolPlan;
use dataplane::protocol::spead::descriptor::ItemType;
use dataplane::{HeapItem, SpeadSendError};
use std::time::Duration;

const TIMESTAMP: u32 = 0x1600;
const DATA: u32 = 0x4000;
const HEAP_BYTES: usize = 6000;
const STEP: u64 = 3000;

const ITEMS: &str = r#"
        items:
        - {id: 0x1600, name: timestamp, description: "first sample's time", format: [[u, 48]]}
        - {id: 0x4000, name: data, shape: [3000], dtype: "<u2"}"#;

/// The loopback with a TX queue of `protocol` (its lines) and a SPEAD RX queue that
/// places heaps by timestamp.
fn loopback(tx_extra: &str, protocol: &str) -> String {
    // Both are written at the queue's keys' indent (6): moved to column 0 for LoopPair.
    let at_column_0 = |t: &str| {
        t.lines()
            .map(|l| l.strip_prefix("      ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let rx_queue = format!(
        "timeout_us: 100\nmemory_regions: [rx]\nprotocol:\n  spead: {{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2,\n          place_by: {{item: {TIMESTAMP:#x}, step: {STEP}}}}}"
    );
    common::LoopPair {
        tx_queue: &format!(
            "{}\nprotocol:\n{}",
            at_column_0(tx_extra.trim_start_matches('\n')),
            at_column_0(protocol)
        ),
        rx_queue: &rx_queue,
        ..Default::default()
    }
    .text()
}

/// The usual sending block: 64-48, 1472-byte packets, descriptors every 4 heaps.
fn spead_block(extra: &str) -> String {
    format!(
        r#"        spead:
          max_packet_bytes: 1472
          descriptors_every: 4
          udp: {{source: "10.0.0.1:7000", destination: "10.0.0.2:7148",
                destination_mac: "02:00:00:00:00:02", source_mac: "02:00:00:00:00:01"}}{}{extra}"#,
        ITEMS.replace("\n        ", "\n          ")
    )
}

use common::plan_error as errors;

#[test]
fn the_tx_block_is_parsed_planned_and_shown() {
    let text = loopback("", &spead_block(""));
    let loaded = dataplane::config::load_str(&text, "spead-send.yaml").unwrap();
    let plan = dataplane::plan::Plan::from_config(&loaded.config).unwrap();
    let sp = plan
        .queues
        .iter()
        .find_map(|q| match &q.protocol {
            Some(ProtocolPlan::SpeadSend(sp)) => Some(sp.clone()),
            _ => None,
        })
        .expect("planned");
    assert_eq!((sp.max_packet_bytes, sp.descriptors_every), (1472, 4));
    assert_eq!(sp.descriptors.len(), 2);
    assert_eq!(
        sp.descriptors[0].element,
        ItemType::Format(vec![(b'u', 48)])
    );
    assert_eq!(sp.descriptors[1].element, ItemType::Dtype("<u2".into()));
    assert_eq!(sp.descriptors[1].shape, [Some(3000)]);
    let human = plan.human();
    assert!(
        human.contains("sends SPEAD 64-48 in UDP frames 10.0.0.1:7000 -> 10.0.0.2:7148 (02:00:00:00:00:02), packets of at most 1472 B, descriptors of timestamp (0x1600), data (0x4000) every 4 heaps"),
        "{human}"
    );
}

#[test]
fn bad_tx_blocks_name_their_key() {
    let cases: &[(&str, &str, &str)] = &[
        ("", "        vrt: {}", "not supported: vrt on a TX queue"),
        (
            "",
            "        spead:\n          max_packet_bytes: 1472\n          items: [{id: 0x3, name: x, format: [[u, 8]]}]",
            "items[0].id",
        ),
        (
            "",
            "        spead:\n          udp: {source: \"10.0.0.1:7000\", destination: \"10.0.0.2:1\", destination_mac: \"02:00:00:00:00:02\", source_mac: \"02:00:00:00:00:01\"}\n          items: [{id: 0x1000, name: x, dtype: \"<u2\", format: [[u, 16]]}]",
            "dtype or format, not both",
        ),
        (
            "",
            "        spead:\n          items: [{id: 0x1000, name: x, dtype: \"<U10\"}]",
            "items[0].dtype",
        ),
        (
            "",
            "        spead:\n          items: [{id: 0x1000, name: x, format: [[q, 8]]}]",
            "items[0].format[0][0]",
        ),
        (
            "",
            "        spead:\n          items: [{id: 0x1000, name: x, shape: [null], dtype: \"<u2\"}]",
            "a dtype item has a fixed shape",
        ),
        (
            "",
            "        spead:\n          items: [{id: 0x1000, name: x, format: [[u, 8]]}, {id: 0x1000, name: y, format: [[u, 8]]}]",
            "described twice",
        ),
        (
            "",
            "        spead:\n          udp: {source: \"10.0.0.1\", destination: \"10.0.0.2:1\", destination_mac: \"02:00:00:00:00:02\"}",
            "udp.source",
        ),
        (
            "",
            "        spead:\n          max_packet_bytes: 1472",
            "needs udp:",
        ),
        (
            "",
            "        spead:\n          udp: {source: \"10.0.0.1:7000\", destination: \"10.0.0.2:1\", destination_mac: \"02:00:00:00:00:02\"}",
            "needs source_mac, or offloads: [tx_eth_src]",
        ),
        (
            "",
            "        spead:\n          max_packet_bytes: 2040\n          udp: {source: \"10.0.0.1:7000\", destination: \"10.0.0.2:1\", destination_mac: \"02:00:00:00:00:02\", source_mac: \"02:00:00:00:00:01\"}",
            "(with 42 bytes of headers) does not fit the queue's 2048-byte buffers",
        ),
        (
            "\n      delivery: handler",
            &spead_block(""),
            "use delivery: ring",
        ),
        ("", &spead_block("\n          window: 3"), "window"),
    ];
    for (tx_extra, block, expected) in cases {
        let e = errors(&loopback(tx_extra, block));
        assert!(e.contains(expected), "{expected}: {e}");
    }
    // With tx_eth_src the port's own MAC is the source: no source_mac needed.
    let text = loopback(
        "\n      offloads: [tx_eth_src]",
        "        spead:\n          udp: {source: \"10.0.0.1:7000\", destination: \"10.0.0.2:1\", destination_mac: \"02:00:00:00:00:02\"}",
    );
    let loaded = dataplane::config::load_str(&text, "spead-send.yaml").unwrap();
    dataplane::plan::Plan::from_config(&loaded.config)
        .expect("tx_eth_src stands in for source_mac");
}

fn samples(h: u64) -> Vec<u8> {
    (0..HEAP_BYTES as u64)
        .map(|i| (i.wrapping_mul(7) ^ h.wrapping_mul(131)) as u8)
        .collect()
}

/// Heaps sent through a SPEAD TX queue of the loopback arrive in the RX queue's chunks,
/// each in its place by timestamp, byte for byte; the descriptor heaps (before heap 0,
/// 4, 8 and 12) are counted as packets without the placement key, and nothing else is.
#[test]
fn heaps_sent_on_the_loopback_arrive_in_chunks_byte_for_byte() {
    let text = loopback("", &spead_block(""));
    let config = dataplane::config::load_str(&text, "spead-send.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&config).expect("start");
    let mut sender = plane
        .take_spead_sender("loop0", 0)
        .expect("a SPEAD TX queue");
    assert!(plane.take_spead_sender("loop0", 0).is_none(), "taken once");
    let mut stream = plane
        .take_spead_stream("loop0", 0)
        .expect("a SPEAD RX queue");
    let heaps = 16u64;
    let receiver = std::thread::spawn(move || {
        let chunks = common::spead::chunks_until_stopped(&mut stream);
        (chunks, stream.counters())
    });
    let mut counters = Vec::new();
    for h in 0..heaps {
        let data = samples(h);
        let cnt = sender
            .send_heap(&[
                HeapItem::Immediate {
                    id: TIMESTAMP,
                    value: h * STEP,
                },
                HeapItem::Addressed {
                    id: DATA,
                    bytes: &data,
                },
            ])
            .expect("queued");
        counters.push(cnt);
        // The loopback has no pacing of its own: keep the receiver's window ahead.
        std::thread::sleep(Duration::from_millis(1));
    }
    let refused = sender.send_heap(&[HeapItem::Immediate { id: 0x02, value: 1 }]);
    assert!(
        matches!(refused, Err(SpeadSendError::ItemId(2))),
        "{refused:?}"
    );
    sender.send_stop().unwrap();
    let (chunks, n) = receiver.join().unwrap();
    let sent = sender.counters();
    drop(sender);
    plane.shutdown().unwrap();

    // Counters 1, 2 went to descriptors and heap 0, and so on: 4 descriptor heaps.
    assert_eq!(sent.heaps, heaps);
    assert_eq!(sent.descriptor_heaps, 4);
    assert_eq!(counters[0], 2, "the descriptors took counter 1");
    assert_eq!(counters[4], 7, "and again before heap 4");
    // 6000 bytes in packets of 1472 with 6 pointers (48 B) and a header: 5 packets a
    // heap; a descriptor heap is one packet.
    assert_eq!(sent.packets, heaps * 5 + 4 + 1);
    assert_eq!(n.bad_packets, 0, "{n:?}");
    assert_eq!(n.packets_without_key, 4, "the descriptor heaps: {n:?}");
    assert_eq!(
        (n.heaps_complete, n.heaps_incomplete, n.heaps_missing),
        (heaps, 0, 0),
        "{n:?}"
    );
    common::spead::check_chunks(&chunks, (heaps, 4, HEAP_BYTES), None, samples);
}
