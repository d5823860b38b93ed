//! Reorder by sequence number through a real data plane (software loopback): packets sent
//! out of order come back as aggregates with every payload in its slot; an incomplete
//! batch is flushed by the queue's timeout and marked; other flows pass through; and the
//! reference's own sw-loopback reorder example runs lossless with every batch verified.
//!
//! The reorder timeout is 3 s, far above the time a batch takes to arrive even on a busy
//! machine, so only the batch that really misses packets is flushed by it; the test does
//! not wait for it but passes a later `now` to `RxQueue::poll_at`.

#[macro_use]
mod common;

use dataplane::config::{self, Config};
use dataplane::{Burst, DataPlane};
use std::time::{Duration, Instant};

const PPB: u32 = 32;
const PAYLOAD: usize = 200;
const HEADER: usize = 42;

/// The loopback with a reorder of flow 7 into batches of 32 by a 16-bit sequence number.
fn reorder_config() -> Config {
    common::LoopPair {
        bufs: (4096, 4096),
        buf_size: 256,
        batch: 64,
        core: 1,
        regions: "- {name: batches, kind: host, affinity: 0, num_bufs: 16, buf_size: 8192}",
        rx: "flow_isolation: true",
        rx_queue: "timeout_us: 3000000\nmemory_regions: [rx]",
        rx_after: r#"flows:
- {name: samples, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 5000}}
- {name: other, id: 8, action: {type: queue, id: 0}, match: {udp_dst: 6000}}
reorder_configs:
- name: by_seq
  reorder_type: cpu
  memory_region: batches
  payload_byte_offset: 42
  flow_ids: [7]
  method:
    seq_packets_per_batch:
      sequence_number: {bit_offset: 336, bit_width: 16}
      packets_per_batch: 32"#,
        ..Default::default()
    }
    .config()
}

/// A UDP frame to `port` whose payload starts with `seq` (big-endian 16 bits) followed by
/// bytes derived from it.
fn frame(port: u16, seq: u16) -> Vec<u8> {
    let mut payload = vec![0u8; PAYLOAD];
    payload[..2].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in payload.iter_mut().enumerate().skip(2) {
        *b = (i as u16 ^ seq.wrapping_mul(31)) as u8 | 1;
    }
    let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .udp(4000, port);
    let mut out = Vec::with_capacity(builder.size(PAYLOAD));
    builder.write(&mut out, &payload).unwrap();
    assert_eq!(out.len(), HEADER + PAYLOAD);
    out
}

/// A fixed permutation of 0..n (a multiplicative shuffle; 13 is coprime with 32).
fn shuffled(n: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 13 + 5) % n).collect()
}

#[test]
fn shuffled_arrivals_come_out_in_sequence_with_timeouts_and_passthrough() {
    let cfg = reorder_config();
    let mut plane = DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut rx = plane.take_rx_queue("loop0", 0).unwrap();
    // Batches 0..2 complete; batch 3 misses slots 4, 9 and 30 (flushed by the timeout).
    let missing = [4u32, 9, 30];
    let mut order: Vec<(u16, u16)> = Vec::new();
    for b in 0..4u32 {
        for s in shuffled(PPB) {
            if b == 3 && missing.contains(&s) {
                continue;
            }
            order.push((5000, (b * PPB + s) as u16));
        }
        order.push((6000, b as u16)); // one passthrough packet per batch
    }
    let sent = order.len();
    for chunk in order.chunks(16) {
        let mut burst = tx.alloc(chunk.len()).expect("buffers");
        for (i, &(port, seq)) in chunk.iter().enumerate() {
            let f = frame(port, seq);
            burst.buffer_mut(i, 0).unwrap()[..f.len()].copy_from_slice(&f);
            burst.set_len(i, 0, f.len());
        }
        let mut b = burst;
        loop {
            match tx.send(b) {
                Ok(()) => break,
                Err(e) => b = e.burst,
            }
        }
    }
    // Partial RX bursts go to the application as soon as the queue is idle (the burst
    // timeout is as long as the reorder's).
    plane.flush();
    let mut aggregates: Vec<(dataplane::reorder::ReorderInfo, Vec<u8>)> = Vec::new();
    let mut passthrough = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while aggregates.len() < 4 || passthrough.len() < 4 {
        assert!(
            Instant::now() < deadline,
            "got {} aggregates and {} passthrough packets",
            aggregates.len(),
            passthrough.len()
        );
        // Once everything arrived (the last passthrough packet follows the incomplete
        // batch), the reorder's clock is moved past its 3 s timeout instead of waiting.
        let now = if aggregates.len() == 3 && passthrough.len() == 4 {
            Instant::now() + Duration::from_secs(3)
        } else {
            Instant::now()
        };
        let Some(burst) = rx.poll_at(now).expect("worker alive") else {
            std::thread::yield_now();
            continue;
        };
        match burst.reorder_info() {
            Some(info) => aggregates.push((info.clone(), burst.data(0, 0).unwrap().to_vec())),
            None => collect_passthrough(&burst, &mut passthrough),
        }
    }
    assert_eq!(rx.reorder_error(), None);
    for (b, (info, data)) in aggregates.iter().enumerate() {
        let b = b as u32;
        assert_eq!(info.name, "by_seq");
        assert_eq!(info.batch_id, Some(b), "batches in order");
        assert_eq!(info.packets_per_batch, PPB);
        assert_eq!(
            info.slot_bytes,
            PAYLOAD as u32 + 14,
            "buf_size 256 - offset 42"
        );
        assert_eq!(data.len(), PPB as usize * info.slot_bytes as usize);
        assert_eq!(
            info.timed_out,
            b == 3,
            "only the incomplete batch timed out"
        );
        assert_eq!(
            info.source_packets,
            if b == 3 { PPB - 3 } else { PPB },
            "batch {b}"
        );
        for s in 0..PPB {
            let slot = &data[(s * info.slot_bytes) as usize..((s + 1) * info.slot_bytes) as usize];
            if b == 3 && missing.contains(&s) {
                assert!(slot.iter().all(|&x| x == 0), "missing slot {s} is zero");
                continue;
            }
            let f = frame(5000, (b * PPB + s) as u16);
            assert_eq!(&slot[..PAYLOAD], &f[HEADER..], "batch {b} slot {s}");
            assert!(slot[PAYLOAD..].iter().all(|&x| x == 0), "slot tail zero");
        }
    }
    assert_eq!(
        passthrough,
        vec![0, 1, 2, 3],
        "the other flow passes through in order"
    );
    let counts = rx.reorder_counts().unwrap();
    assert_eq!(
        (
            counts.batches,
            counts.timeout_batches,
            counts.aggregated_packets,
            counts.passthrough_packets
        ),
        (3, 1, sent as u64 - 4, 4)
    );
    drop(aggregates);
    plane.shutdown().expect("no worker failed");
}

fn collect_passthrough(burst: &Burst, out: &mut Vec<u16>) {
    for i in 0..burst.len() {
        assert_eq!(burst.packets()[i].flow_id, 8, "only flow 8 passes through");
        let d = burst.data(i, 0).unwrap();
        out.push(u16::from_be_bytes([d[HEADER], d[HEADER + 1]]));
    }
}

/// Maps every core the reference's machines use onto cores 0 and 1.
fn onto_two_cores(c: &mut Config) {
    c.master_core = 0;
    for iface in &mut c.interfaces {
        for q in iface
            .rx
            .iter_mut()
            .flat_map(|r| &mut r.queues)
            .chain(iface.tx.iter_mut().flat_map(|t| &mut t.queues))
        {
            q.cpu_core %= 2;
        }
    }
    for b in &mut c.bench.tx {
        b.cpu_core = b.cpu_core.map(|c| c % 2);
    }
    for b in &mut c.bench.rx {
        b.cpu_core = b.cpu_core.map(|c| c % 2);
    }
}

#[test]
fn the_reference_sw_loopback_reorder_example_runs_lossless_and_verified() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let name = "daqiri_bench_raw_sw_loopback_reorder_seq_1024.yaml";
    let Some(text) = [
        std::env::var_os("DAQIRI_EXAMPLES").map(std::path::PathBuf::from),
        Some(root.join("shared/daqiri-examples")),
        Some(root.join("../shared/daqiri-examples")),
        Some("/work/shared/daqiri-examples".into()),
    ]
    .into_iter()
    .flatten()
    .find_map(|d| std::fs::read_to_string(d.join(name)).ok()) else {
        eprintln!("SKIP: {name} not found (set DAQIRI_EXAMPLES to the reference's examples)");
        return;
    };
    // Its regions are `huge`; as root we reserve the pages (and give them back), otherwise
    // the same run uses ordinary host memory.
    let pages = Pages::reserve(200);
    let text = if pages.is_some() {
        text
    } else {
        eprintln!("not root: running the example with kind host instead of huge");
        text.replace("kind: \"huge\"", "kind: \"host\"")
    };
    let mut cfg = config::load_with(&text, "reference example", &|_| true)
        .expect("the reference example validates")
        .config;
    onto_two_cores(&mut cfg);
    let report = common::run_bench(&cfg, 1.0);
    drop(pages);
    eprint!("{}", report.human());
    assert!(report.lossless, "{:?}", report.problems);
    let r = report.reorder.expect("reorder report");
    assert!(r.batches > 0, "at least one full batch of 1024");
    assert_eq!(r.bad_batches, 0);
    assert_eq!(
        r.verified_batches,
        r.batches + r.timeout_batches,
        "every batch checked slot by slot"
    );
    assert_eq!(r.aggregated_packets, report.tx_packets);
}

/// Huge pages reserved for a test, given back on drop.
struct Pages(u64);

impl Pages {
    fn reserve(n: u64) -> Option<Self> {
        const NR: &str = "/proc/sys/vm/nr_hugepages";
        if !rustix::process::geteuid().is_root() {
            return None;
        }
        let before: u64 = std::fs::read_to_string(NR).ok()?.trim().parse().ok()?;
        std::fs::write(NR, (before + n).to_string()).ok()?;
        Some(Self(before))
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", self.0.to_string());
    }
}

/// The reference's int4 -> fp32 reorder-quantize example, on the software loopback with its
/// GPU memory mapped to host memory (so its GPU reorder runs as the CPU reorder, which
/// converts the same way, and its `gpu_direct` generator as the CPU one): frames carry the
/// 10-bit sequence and 2-bit batch numbers where the example reads them (inside the IPv4
/// header), every batch of 256 is reordered and converted, and every slot is turned back
/// into the bytes of the frame sent. The GPU test runs the example unmapped.
#[test]
fn the_reference_quantize_example_verifies_every_batch_on_the_cpu() {
    let Some(text) = common::mapped_reference_example(
        "daqiri_bench_raw_tx_rx_reorder_quantize_seq_batch.yaml",
        1,
        true,
    ) else {
        return;
    };
    let cfg = config::load_with(&text, "quantize example", &|_| true)
        .expect("the mapped example validates")
        .config;
    let q = cfg.bench.reorder_quantize.expect("bench_reorder_quantize");
    assert_eq!((q.verify_batches, q.chunk_elements), (3, 16));
    let report = common::run_bench(&cfg, 1.0);
    common::assert_quantize_verified(&report);
}
