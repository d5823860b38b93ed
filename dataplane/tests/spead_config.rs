//! `protocol: {spead: ...}` on an RX queue: parsed with errors that name the key, planned
//! (and shown by `validate --plan`), refused where the packets cannot be read by the CPU,
//! and run end to end on the software loopback, whose queues receive Ethernet frames:
//! the SPEAD packets are their UDP payloads.

mod common;

use dataplane::protocol::spead::chunks::PlacementKey;
use dataplane::protocol::spead::{self, Flavour, HeapPackets};
use std::time::{Duration, Instant};

const HEAP_BYTES: usize = 6000;

fn loopback(rx_region: &str, rx_extra: &str, spead: &str) -> String {
    loopback_with("", rx_region, rx_extra, spead)
}

/// As [`loopback`], with `regions` (lines of `memory_regions`) added.
fn loopback_with(regions: &str, rx_region: &str, rx_extra: &str, spead: &str) -> String {
    let gpu = if rx_region == "gpu" {
        "- {name: gpu, kind: device, affinity: 0, num_bufs: 64, buf_size: 2048}\n"
    } else {
        ""
    };
    common::LoopPair {
        regions: &format!("{regions}{gpu}"),
        rx_queue: &format!(
            "timeout_us: 100\nmemory_regions: [{rx_region}]\n{}\nprotocol:\n  spead: {spead}",
            rx_extra.trim()
        ),
        ..Default::default()
    }
    .text()
}

use common::plan_error as errors;

#[test]
fn the_block_is_parsed_planned_and_shown() {
    let text = loopback(
        "rx",
        "",
        &format!(
            "{{flavour: 64-40, heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 8, place_by: {{item: 0x1600, step: 2048}}}}"
        ),
    );
    let loaded = dataplane::config::load_str(&text, "spead.yaml").unwrap();
    let plan = dataplane::plan::Plan::from_config(&loaded.config).unwrap();
    let sp = plan
        .queues
        .iter()
        .find_map(|q| match q.protocol {
            Some(dataplane::plan::ProtocolPlan::Spead(sp)) => Some(sp),
            _ => None,
        })
        .expect("planned");
    assert_eq!(sp.flavour, Flavour::SPEAD_64_40);
    assert_eq!(sp.placement.key, PlacementKey::Item(0x1600));
    assert_eq!(
        (
            sp.placement.step,
            sp.placement.heaps_per_chunk,
            sp.placement.max_chunks
        ),
        (2048, 8, 4)
    );
    assert!(sp.frames, "the loopback hands over Ethernet frames");
    let human = plan.human();
    assert!(
        human.contains("SPEAD 64-40 in UDP frames: heaps of 6000 B by item 0x1600 / 2048, 8 a chunk (48000 B), 4 chunks open"),
        "{human}"
    );
}

#[test]
fn bad_blocks_name_their_key_and_unreadable_layouts_are_refused() {
    // (queue region, extra queue lines, the block, what the error must say)
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("rx", "", "{heaps_per_chunk: 8}", &["protocol.spead (line", "`heap_bytes`"]),
        ("rx", "", "{heap_bytes: 64, heaps_per_chunk: 8, flavour: 64-32}", &["protocol.spead.flavour"]),
        ("rx", "", "{heap_bytes: 64, heaps_per_chunk: 8, place_by: timestamp}", &["protocol.spead.place_by"]),
        ("rx", "", "{heap_bytes: 64, heaps_per_chunk: 8, place_by: {item: 0x1600, step: 0}}", &["place_by.step"]),
        ("rx", "", "{heap_bytes: 4294967295, heaps_per_chunk: 1048576}", &["protocol.spead.heaps_per_chunk", "over"]),
        // An unknown key is named.
        ("rx", "", "{heap_bytes: 64, heaps_per_chunk: 8, window: 3}", &["window"]),
        ("gpu", "", "{heap_bytes: 64, heaps_per_chunk: 8}", &["reads each packet with the CPU"]),
        ("rx", "\n      delivery: handler", "{heap_bytes: 64, heaps_per_chunk: 8}", &["use delivery: ring"]),
    ];
    for (region, extra, block, wanted) in cases {
        let e = errors(&loopback(region, extra, block));
        for w in *wanted {
            assert!(e.contains(w), "{block}: {w:?} not in {e}");
        }
    }
}

#[test]
fn chunk_regions_are_checked_when_planned() {
    let spead = format!(
        "{{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2, chunk_region: chunks}}"
    );
    let chunks = |kind: &str, n: u32, size: u32| {
        format!("- {{name: chunks, kind: {kind}, affinity: 0, num_bufs: {n}, buf_size: {size}}}\n")
    };
    let text = loopback_with(&chunks("host", 3, 24000), "rx", "", &spead);
    let loaded = dataplane::config::load_str(&text, "spead.yaml").unwrap();
    let plan = dataplane::plan::Plan::from_config(&loaded.config).unwrap();
    assert!(
        plan.human()
            .contains("4 a chunk (24000 B), 2 chunks open in region chunks"),
        "{}",
        plan.human()
    );
    let small = "{heap_bytes: 64, heaps_per_chunk: 8, chunk_region: CHUNKS}";
    // (chunk region lines, the block, what the error must say)
    #[rustfmt::skip]
    let cases = [
        (String::new(), small.replace("CHUNKS", "nowhere"), "no memory region named `nowhere`"),
        (chunks("host", 3, 23999), spead.clone(), "hold 23999 bytes, a chunk 24000"),
        (chunks("host", 2, 24000), spead.clone(), "needs at least 3"),
        (String::new(), small.replace("CHUNKS", "rx"), "chunks need a region of their own"),
        (chunks("device", 3, 24000), spead.clone(), "must be host_pinned"),
    ];
    for (regions, block, wanted) in cases {
        let e = errors(&loopback_with(&regions, "rx", "", &block));
        assert!(e.contains(wanted), "{block}: {wanted:?} not in {e}");
    }
}

/// The same stream with its chunks in a region's buffers: each chunk's bytes are read
/// where the region holds them, and a chunk kept by the application while the window
/// moves on leaves fewer memories to fill, which is counted, not lost silently.
#[test]
fn chunks_in_a_region_hold_every_heap() {
    let spead = format!(
        "{{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2, chunk_region: chunks}}"
    );
    let text = loopback_with(
        "- {name: chunks, kind: host, affinity: 0, num_bufs: 3, buf_size: 24000}\n",
        "rx",
        "",
        &spead,
    );
    let cfg = dataplane::config::load_str(&text, "spead.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut stream = plane.take_spead_stream("loop0", 0).expect("a SPEAD queue");
    let flavour = Flavour::SPEAD_64_48;
    let payload = |h: u64| -> Vec<u8> {
        (0..HEAP_BYTES)
            .map(|i| (i as u64 * 11 + h * 37) as u8)
            .collect()
    };
    let send = |tx: &mut dataplane::TxQueue, heaps: std::ops::Range<u64>, stop: bool| {
        let mut datagrams = Vec::new();
        for h in heaps.clone() {
            let body = payload(h);
            let mut p = HeapPackets::new(flavour, h, &[], &body, 1400).unwrap();
            let mut datagram = Vec::new();
            while p.next_into(&mut datagram) {
                datagrams.push(datagram.clone());
            }
        }
        if stop {
            datagrams.push(spead::stream_stop_packet(flavour, heaps.end));
        }
        common::send_udp_frames(tx, &datagrams);
    };
    let take = |stream: &mut dataplane::SpeadStream, n: usize| {
        let mut chunks = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while chunks.len() < n {
            assert!(Instant::now() < deadline, "{:?}", stream.counters());
            if let Some(c) = stream.recv(Duration::from_millis(100)).unwrap() {
                chunks.push(c);
            }
        }
        chunks
    };
    let check = |stream: &dataplane::SpeadStream, c: &spead::chunks::Chunk| {
        assert!(c.data.is_empty(), "the chunk's bytes are in the region");
        assert!(stream.chunk_address(c).is_some());
        let bytes = stream.chunk_bytes(c).expect("host memory");
        for i in 0..4 {
            let h = c.id * 4 + i as u64;
            assert!(
                bytes[i * HEAP_BYTES..(i + 1) * HEAP_BYTES] == payload(h),
                "heap {h}"
            );
        }
    };
    // Chunks 0..3: chunk 2 opens the window past 0, chunk 3 past 1; every chunk is given
    // back once read, so three memories are enough for the whole stream.
    send(&mut tx, 0..16, false);
    for c in take(&mut stream, 2) {
        check(&stream, &c);
        stream.recycle(c);
    }
    // Now chunk 2 is kept: chunks 4 and 5 need two memories, and only one is free.
    send(&mut tx, 16..24, false);
    let kept = take(&mut stream, 1).remove(0);
    check(&stream, &kept);
    send(&mut tx, 24..28, true);
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stream.stopped() {
        assert!(Instant::now() < deadline, "{:?}", stream.counters());
        if let Some(c) = stream.recv(Duration::from_millis(100)).unwrap() {
            rest.push(c);
        }
    }
    while let Some(c) = stream.recv(Duration::from_millis(1)).unwrap() {
        rest.push(c);
    }
    let n = stream.counters();
    assert!(n.packets_no_free_chunk > 0, "{n:?}");
    for c in &rest {
        if c.heaps_present() == 4 {
            check(&stream, c);
        }
    }
    assert_eq!(
        n.heaps_complete + n.heaps_incomplete + n.heaps_missing,
        4 * (3 + rest.len() as u64),
        "every heap of every chunk handed out is counted: {n:?}"
    );
    drop((tx, stream, kept, rest));
    plane.shutdown().unwrap();
}

/// Heaps cut into packets, wrapped in UDP frames, sent through the loopback's TX queue;
/// the RX queue's chunks hold every heap, byte for byte, and a frame that is not UDP
/// is counted, not decoded.
#[test]
fn heaps_in_udp_frames_on_the_loopback_arrive_as_chunks() {
    let text = loopback(
        "rx",
        "",
        &format!("{{heap_bytes: {HEAP_BYTES}, heaps_per_chunk: 4, max_chunks: 2}}"),
    );
    let cfg = dataplane::config::load_str(&text, "spead.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut stream = plane.take_spead_stream("loop0", 0).expect("a SPEAD queue");
    assert!(plane.take_spead_stream("loop0", 0).is_none(), "taken once");
    let flavour = Flavour::SPEAD_64_48;
    let payload = |h: u64| -> Vec<u8> {
        (0..HEAP_BYTES)
            .map(|i| (i as u64 * 7 + h * 131) as u8)
            .collect()
    };
    common::send_frames(&mut tx, &[vec![0xff; 60]]); // not IPv4: counted, not decoded
    let mut datagrams = Vec::new();
    let heaps = 12u64;
    for h in 0..heaps {
        let body = payload(h);
        let mut p = HeapPackets::new(flavour, h, &[], &body, 1400).unwrap();
        let mut datagram = Vec::new();
        while p.next_into(&mut datagram) {
            datagrams.push(datagram.clone());
        }
    }
    datagrams.push(spead::stream_stop_packet(flavour, heaps));
    common::send_udp_frames(&mut tx, &datagrams);
    let mut chunks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stream.stopped() || chunks.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "{:?} {:?}",
            stream.counters(),
            plane.snapshot()
        );
        match stream.recv(Duration::from_millis(100)).unwrap() {
            Some(c) => chunks.push(c),
            None if stream.stopped() => break,
            None => {}
        }
    }
    let n = stream.counters();
    assert_eq!(stream.frames_not_udp(), 1);
    assert_eq!(
        (
            n.heaps_complete,
            n.heaps_incomplete,
            n.heaps_missing,
            n.bad_packets
        ),
        (heaps, 0, 0, 0),
        "{n:?}"
    );
    assert_eq!(chunks.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 1, 2]);
    for c in &chunks {
        for i in 0..4 {
            let h = c.id * 4 + i as u64;
            assert!(
                c.data[i * HEAP_BYTES..(i + 1) * HEAP_BYTES] == payload(h),
                "heap {h}"
            );
        }
    }
    drop((tx, stream));
    plane.shutdown().unwrap();
}
