//! `dataplane bench spead`: the highest rate at which SPEAD heaps cross the kernel's UDP
//! loopback (or, with `--transport loopback`, the data plane's software loopback, so that
//! no socket bounds the rate) without a lost heap, found as spead2's own
//! `spead2_bench.py` finds it (a binary search over the offered rate, each rate one run of
//! a fresh sender and receiver). Our sender cuts heaps into packets and sends them through
//! a TX queue paced by its worker; our receiver is an RX queue declared
//! `protocol: {spead: ...}` whose chunks the application takes
//! ([`dataplane::DataPlane::take_spead_stream`]). A rate is lossless when every heap sent
//! arrived whole. Payload bytes are not checked here (the SPEAD tests check every byte).

#![forbid(unsafe_code)]

use dataplane::DataPlane;
use dataplane::protocol::spead::{self, Flavour, HeapPackets};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Options of a search.
#[derive(Clone, Debug)]
pub struct SpeadBenchOptions {
    /// Payload bytes per heap.
    pub heap_bytes: u32,
    /// Bytes per packet (UDP payload: SPEAD header, item pointers and heap payload).
    pub packet_bytes: u32,
    /// Seconds each rate is sent for.
    pub seconds: f64,
    /// The highest rate tried, in Gb/s of heap payload.
    pub max_gbps: f64,
    /// Halvings of the interval after the first rate.
    pub steps: u32,
    /// UDP port on 127.0.0.1 the receiver listens on.
    pub port: u16,
    /// Where the chunks live.
    pub chunks: ChunkMemory,
    /// What carries the packets.
    pub transport: SpeadTransport,
    /// Sending threads, each with a TX queue of its own, taking the next heap id as they
    /// start a heap (one core cutting heaps into packets is the first limit on the
    /// software loopback). Above 1 only with [`SpeadTransport::Loopback`].
    pub senders: u32,
}

/// What carries the bench's packets (`--transport`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SpeadTransport {
    /// Kernel UDP sockets over 127.0.0.1 (what spead2_bench.py measures).
    #[default]
    Udp,
    /// The data plane's software loopback: Ethernet/IPv4/UDP frames from a TX queue to an
    /// RX queue of one interface, no kernel in between (the receiver's placement, not a
    /// socket, is then the limit).
    Loopback,
}

/// Where the bench's chunks live (`--chunks`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum ChunkMemory {
    /// The process's heap (no `chunk_region`).
    #[default]
    Heap,
    /// A `host` region's buffers (`chunk_region`), written by the CPU.
    Host,
    /// A `host_pinned` region's buffers, written by the CPU.
    Pinned,
    /// A `device` region on GPU 0: the GPU copies each payload out of the packet's pinned
    /// receive buffer.
    Gpu,
}

/// One rate tried.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SpeadTrial {
    /// The rate offered, in Gb/s of heap payload (0: unpaced).
    pub offered_gbps: f64,
    /// Heaps sent.
    pub heaps_sent: u64,
    /// Heap payload sent, in Gb/s over the sending time: below the offered rate when the
    /// sender is the limit.
    pub sent_gbps: f64,
    /// Heaps that arrived whole.
    pub heaps_complete: u64,
    /// Heaps of which only part arrived.
    pub heaps_incomplete: u64,
    /// Heap payload that arrived whole, in Gb/s over the sending time.
    pub received_gbps: f64,
    /// Packets the plane counted as dropped (the kernel's socket drops among them).
    pub dropped_packets: u64,
    /// Heaps of which nothing arrived, by the receiver's count of retired chunks (the
    /// last chunk's slots after the final heap sent among them).
    pub heaps_missing: u64,
    /// Packets that arrived after their chunk was retired.
    pub packets_too_late: u64,
    /// Packets whose chunk could not be opened (every chunk memory in use).
    pub packets_no_free_chunk: u64,
    /// Every heap sent arrived whole.
    pub lossless: bool,
}

/// The result of a search.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SpeadReport {
    /// Payload bytes per heap.
    pub heap_bytes: u32,
    /// Bytes per packet.
    pub packet_bytes: u32,
    /// Seconds per rate.
    pub seconds: f64,
    /// Where the chunks lived.
    pub chunks: ChunkMemory,
    /// What carried the packets.
    pub transport: SpeadTransport,
    /// Sending threads, each with its own TX queue.
    pub senders: u32,
    /// The highest heap payload rate that arrived without a lost heap, in Gb/s (what
    /// arrived, which is below the offered rate when the sender is the limit; 0 when no
    /// rate was lossless).
    pub lossless_gbps: f64,
    /// At that rate, the sender sent less than 95% of what was offered: over UDP the
    /// receiver was not the limit (spead2_bench says "Limited by send speed"); on the
    /// software loopback, which drops nothing, a receiver that falls behind holds the
    /// sender back, so it may have been either.
    pub limited_by_sender: bool,
    /// Heaps per second at that rate.
    pub lossless_heaps_per_s: f64,
    /// Every rate tried, in order.
    pub trials: Vec<SpeadTrial>,
}

impl SpeadReport {
    /// True when some rate was lossless.
    pub fn ok(&self) -> bool {
        self.lossless_gbps > 0.0
    }

    /// The report for people.
    pub fn human(&self) -> String {
        let mut s = format!(
            "SPEAD over {}, heaps of {} B in packets of {} B, {} s per rate, chunks in {}, {} sender(s)\n",
            match self.transport {
                SpeadTransport::Udp => "UDP loopback",
                SpeadTransport::Loopback => "the software loopback",
            },
            self.heap_bytes,
            self.packet_bytes,
            self.seconds,
            match self.chunks {
                ChunkMemory::Heap => "the heap",
                ChunkMemory::Host => "a host region",
                ChunkMemory::Pinned => "a pinned host region",
                ChunkMemory::Gpu => "GPU memory",
            },
            self.senders
        );
        for t in &self.trials {
            s += &format!(
                "  offered {:>7.3} Gb/s, sent {:.3}: {} of {} heaps whole ({} incomplete, {} missing), {:.3} Gb/s, {} dropped, {} too late, {} without a chunk{}\n",
                t.offered_gbps,
                t.sent_gbps,
                t.heaps_complete,
                t.heaps_sent,
                t.heaps_incomplete,
                t.heaps_missing,
                t.received_gbps,
                t.dropped_packets,
                t.packets_too_late,
                t.packets_no_free_chunk,
                if t.lossless { ", lossless" } else { "" }
            );
        }
        s += &format!(
            "highest lossless rate: {:.3} Gb/s ({:.0} heaps/s){}\n",
            self.lossless_gbps,
            self.lossless_heaps_per_s,
            match (self.limited_by_sender, self.transport) {
                (false, _) => "",
                (true, SpeadTransport::Udp) => ", limited by the sender",
                // The loopback loses nothing: a receiver that falls behind holds the TX
                // queues back, so a slow sender and a slow receiver look alike.
                (true, SpeadTransport::Loopback) => {
                    ", limited by the sender or by the receiver holding it back (the loopback drops nothing)"
                }
            }
        );
        s
    }
}

/// Why a search could not run.
#[derive(Debug, thiserror::Error)]
pub enum SpeadBenchError {
    /// An option out of range.
    #[error("{0}")]
    Options(String),
    /// The generated configuration did not load.
    #[error("the bench's configuration: {0}")]
    Config(#[from] dataplane::config::ConfigError),
    /// The plane did not start.
    #[error("starting the plane: {0}")]
    Start(#[from] dataplane::StartError),
}

/// Runs the search; `stop` ends it early (with what was measured).
pub fn run(opts: &SpeadBenchOptions, stop: &AtomicBool) -> Result<SpeadReport, SpeadBenchError> {
    let flavour = Flavour::SPEAD_64_48;
    let heap: Vec<u8> = (0..opts.heap_bytes).map(|i| i as u8).collect();
    let mut template = Vec::new();
    let mut packets = HeapPackets::new(flavour, 0, &[], &heap, opts.packet_bytes as usize)
        .ok_or_else(|| {
            SpeadBenchError::Options(format!(
                "--packet-bytes {} leaves no room for payload, or the heap is too large",
                opts.packet_bytes
            ))
        })?;
    let mut datagram = Vec::new();
    while packets.next_into(&mut datagram) {
        template.push(match opts.transport {
            SpeadTransport::Udp => datagram.clone(),
            SpeadTransport::Loopback => udp_frame(&datagram),
        });
    }
    if !(opts.seconds > 0.0 && opts.max_gbps > 0.0) {
        return Err(SpeadBenchError::Options(
            "--seconds and --max-gbps must be above 0".into(),
        ));
    }
    if !(1..=MAX_SENDERS).contains(&opts.senders) {
        return Err(SpeadBenchError::Options(format!(
            "--senders {} is not in 1..={MAX_SENDERS}",
            opts.senders
        )));
    }
    if opts.senders > 1 && opts.transport != SpeadTransport::Loopback {
        return Err(SpeadBenchError::Options(
            "--senders above 1 needs --transport loopback".into(),
        ));
    }
    let mut trials = Vec::new();
    let (mut lo, mut hi) = (0.0f64, opts.max_gbps);
    let mut rate = opts.max_gbps;
    for _ in 0..=opts.steps {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let t = trial(opts, &template, rate, stop)?;
        // A rate the sender could not reach measured nothing about that rate: like a
        // lossy one, it sends the search lower (on a machine with few cores a paced
        // sender leaves the receiver more of them).
        let held = t.lossless && t.sent_gbps >= 0.95 * rate;
        trials.push(t);
        if held {
            lo = rate;
            if rate == opts.max_gbps {
                break;
            }
        } else {
            hi = rate;
        }
        rate = (lo + hi) / 2.0;
    }
    let best = trials
        .iter()
        .filter(|t| t.lossless)
        .max_by(|a, b| a.received_gbps.total_cmp(&b.received_gbps));
    let (best, limited_by_sender) = best.map_or((0.0, false), |t| {
        (t.received_gbps, t.sent_gbps < 0.95 * t.offered_gbps)
    });
    Ok(SpeadReport {
        heap_bytes: opts.heap_bytes,
        packet_bytes: opts.packet_bytes,
        seconds: opts.seconds,
        chunks: opts.chunks,
        transport: opts.transport,
        senders: opts.senders,
        lossless_gbps: best,
        limited_by_sender,
        lossless_heaps_per_s: best * 1e9 / 8.0 / f64::from(opts.heap_bytes),
        trials,
    })
}

/// The plane of one trial: a client TX queue on core 0 paced to `mbps` (of UDP payload),
/// a server RX queue on core 1 (0 on a one-core machine) declared as SPEAD.
fn config_text(opts: &SpeadBenchOptions, mbps: u64) -> String {
    let rx_core = u32::from(std::thread::available_parallelism().is_ok_and(|n| n.get() > 1));
    let buf = opts.packet_bytes.next_multiple_of(64);
    let port = opts.port;
    let heaps_per_chunk = (4 << 20) / opts.heap_bytes.min(4 << 20);
    let chunk_bytes = u64::from(heaps_per_chunk) * u64::from(opts.heap_bytes);
    // The receiver's window: 4 chunks a sender, since each sender's TX queue holds heaps
    // of its own that may arrive after later ones of another queue. Chunks in a region:
    // the window, and 2 more for the chunks in hand.
    let window = 4 * opts.senders;
    let chunk_bufs = window + 2;
    let (rx_kind, chunk_region, chunk_key) = match opts.chunks {
        ChunkMemory::Heap => ("host", None, ""),
        ChunkMemory::Host => ("host", Some("host"), ", chunk_region: chunks"),
        ChunkMemory::Pinned => ("host", Some("host_pinned"), ", chunk_region: chunks"),
        ChunkMemory::Gpu => ("host_pinned", Some("device"), ", chunk_region: chunks"),
    };
    let chunk_region = chunk_region
        .map(|kind| {
            format!(
                "    - {{name: chunks, kind: {kind}, affinity: 0, num_bufs: {chunk_bufs}, buf_size: {chunk_bytes}}}\n"
            )
        })
        .unwrap_or_default();
    let spead = format!(
        "spead: {{heap_bytes: {}, heaps_per_chunk: {heaps_per_chunk}, max_chunks: {window}{chunk_key}}}",
        opts.heap_bytes
    );
    if opts.transport == SpeadTransport::Loopback {
        let buf = (FRAME_HEADER + opts.packet_bytes as usize).next_multiple_of(64);
        let tx_bufs = 4096 * opts.senders;
        let tx_queues = loopback_tx_queues(opts.senders, rx_core, mbps);
        // The loopback hands the sent buffers to the receiver, so the packets arrive in
        // the TX region: it is the one the GPU reads for GPU chunks.
        return format!(
            r#"
dataplane:
  cfg:
    version: 1
    stream_type: raw
    loopback: "sw"
    master_core: 0
    log_level: error
    memory_regions:
    - {{name: tx, kind: {rx_kind}, affinity: 0, num_bufs: {tx_bufs}, buf_size: {buf}}}
    - {{name: rx, kind: {rx_kind}, affinity: 0, num_bufs: 16384, buf_size: {buf}}}
{chunk_region}    interfaces:
    - name: {LOOP}
      address: loopback
      tx:
        queues:
{tx_queues}      rx:
        queues:
        - name: rq
          id: 0
          cpu_core: {rx_core}
          batch_size: 64
          timeout_us: 100
          memory_regions: [rx]
          protocol:
            {spead}
"#
        );
    }
    format!(
        r#"
dataplane:
  cfg:
    version: 1
    stream_type: socket
    master_core: 0
    log_level: error
    memory_regions:
    - {{name: tx, kind: host, affinity: 0, num_bufs: 4096, buf_size: {buf}}}
    - {{name: rx, kind: {rx_kind}, affinity: 0, num_bufs: 16384, buf_size: {buf}}}
{chunk_region}    interfaces:
    - name: spead_in
      address: 127.0.0.1
      socket_config: {{mode: server, local_addr: "udp://127.0.0.1:{port}"}}
      rx:
        queues:
        - name: rq
          id: 0
          cpu_core: {rx_core}
          batch_size: 64
          timeout_us: 100
          memory_regions: [rx]
          protocol:
            {spead}
    - name: spead_out
      address: 127.0.0.1
      socket_config: {{mode: client, remote_addr: "udp://127.0.0.1:{port}"}}
      tx:
        queues:
        - {{name: tq, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [tx], pacing_mbps: {mbps}}}
"#
    )
}

/// The TX queues of the software loopback transport, one per sender, each paced to its
/// share of `mbps`: the first on core 0 as with one sender, the others on the cores after
/// the receiver's (folded onto those there are).
fn loopback_tx_queues(senders: u32, rx_core: u32, mbps: u64) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let spare: Vec<u32> = (0..cores).filter(|&c| c != rx_core).collect();
    let per_queue = mbps.div_ceil(u64::from(senders));
    (0..senders)
        .map(|i| {
            let core = spare.get(i as usize % spare.len().max(1)).copied().unwrap_or(0);
            format!(
                "        - {{name: tq{i}, id: {i}, cpu_core: {core}, batch_size: 32, memory_regions: [tx], pacing_mbps: {per_queue}}}\n"
            )
        })
        .collect()
}

/// Bursts a sender may have waiting for its worker when there are several senders.
const LEAD_BURSTS: usize = 4;

/// The most `--senders`.
pub const MAX_SENDERS: u32 = 16;

/// The interface of the software loopback transport.
const LOOP: &str = "loop0";
/// Ethernet, IPv4 and UDP headers in front of each datagram on the software loopback.
const FRAME_HEADER: usize = 42;

/// `datagram` as the UDP payload of an Ethernet/IPv4 frame from 10.0.0.1:7000 to
/// 10.0.0.2:8888, its UDP checksum 0 ("none", valid for IPv4): the sender rewrites each
/// heap's counter in place, which would leave a computed one wrong.
fn udp_frame(datagram: &[u8]) -> Vec<u8> {
    let udp = dataplane::packet::UdpFrame::new(
        std::net::SocketAddrV4::new([10, 0, 0, 1].into(), 7000),
        std::net::SocketAddrV4::new([10, 0, 0, 2].into(), 8888),
    );
    debug_assert_eq!(udp.header_len(), FRAME_HEADER);
    let mut frame = vec![0u8; udp.header_len() + datagram.len()];
    udp.write(datagram, &mut frame)
        .expect("the frame has room for its datagram");
    frame[FRAME_HEADER - 2..FRAME_HEADER].fill(0);
    frame
}

fn trial(
    opts: &SpeadBenchOptions,
    template: &[Vec<u8>],
    gbps: f64,
    stop: &AtomicBool,
) -> Result<SpeadTrial, SpeadBenchError> {
    let flavour = Flavour::SPEAD_64_48;
    // Pacing counts datagram bytes: the offered payload rate scaled by the packets'
    // overhead.
    let wire: usize = template.iter().map(Vec::len).sum();
    let mbps = (gbps * 1000.0 * wire as f64 / f64::from(opts.heap_bytes)).ceil() as u64;
    let cfg = dataplane::config::load_str(&config_text(opts, mbps), "bench-spead")?.config;
    let mut plane = DataPlane::start(&cfg)?;
    let (out, into) = match opts.transport {
        SpeadTransport::Udp => ("spead_out", "spead_in"),
        SpeadTransport::Loopback => (LOOP, LOOP),
    };
    let txs: Vec<dataplane::TxQueue> = (0..opts.senders as u16)
        .map(|q| plane.take_tx_queue(out, q).expect("planned"))
        .collect();
    let mut stream = plane.take_spead_stream(into, 0).expect("planned");
    // Where each packet's datagram starts in what is sent.
    let datagram_at = match opts.transport {
        SpeadTransport::Udp => 0,
        SpeadTransport::Loopback => FRAME_HEADER,
    };
    let sending = Duration::from_secs_f64(opts.seconds);
    let sent_all = &AtomicBool::new(false);
    let next_heap = &AtomicU64::new(1);
    let several = opts.senders > 1;
    let (heaps_sent, counters) = std::thread::scope(|s| {
        // Each sender takes the next heap id when it starts a heap, so the heaps of all
        // senders leave in about the order of their ids (the receiver keeps a window of
        // chunks; ids dealt round robin would drift apart as fast as the senders do).
        let threads: Vec<_> = txs
            .into_iter()
            .map(|mut tx| {
                s.spawn(move || {
                    let mut packets = template.to_vec();
                    let end = Instant::now() + sending;
                    let mut heaps = 0u64;
                    'heaps: while Instant::now() < end && !stop.load(Ordering::Relaxed) {
                        // With several senders, none runs more than a few bursts ahead of
                        // its queue's worker: a worker that falls behind would otherwise
                        // deliver its heaps after later ones of the other queues.
                        while several && tx.pending() > LEAD_BURSTS && Instant::now() < end {
                            std::thread::yield_now();
                        }
                        let heap_cnt = next_heap.fetch_add(1, Ordering::Relaxed);
                        for p in &mut packets {
                            spead::rewrite_heap_cnt(&mut p[datagram_at..], flavour, heap_cnt);
                        }
                        for group in packets.chunks(32) {
                            if !send_all(&mut tx, group, end + Duration::from_secs(1)) {
                                break 'heaps;
                            }
                        }
                        heaps += 1;
                    }
                    (heaps, tx)
                })
            })
            .collect();
        // The stop packet goes out once every sender is done and every queue's worker
        // has taken what it held, so that it cannot overtake another queue's heaps.
        let finisher = s.spawn(move || {
            let (mut total, mut txs) = (0, Vec::new());
            for t in threads {
                let (heaps, tx) = t.join().expect("sender");
                total += heaps;
                txs.push(tx);
            }
            let drained = Instant::now() + Duration::from_secs(1);
            while txs.iter().any(|tx| tx.pending() > 0) && Instant::now() < drained {
                std::thread::sleep(Duration::from_micros(100));
            }
            if txs.len() > 1 {
                // A burst a worker took from its ring may still be on its way.
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut stop_packet =
                spead::stream_stop_packet(flavour, next_heap.load(Ordering::Relaxed));
            if datagram_at > 0 {
                stop_packet = udp_frame(&stop_packet);
            }
            if let Some(tx) = txs.last_mut() {
                send_all(tx, &[stop_packet], Instant::now() + Duration::from_secs(1));
            }
            sent_all.store(true, Ordering::Release);
            total
        });
        // Chunks are given back at once: the bench measures placement, not a consumer.
        let mut quiet_since = None;
        loop {
            match stream.recv(Duration::from_millis(50)) {
                Ok(Some(c)) => {
                    stream.recycle(c);
                    quiet_since = None;
                }
                Ok(None) if stream.stopped() => break,
                Ok(None) if sent_all.load(Ordering::Acquire) => {
                    // The stop packet may itself be lost: stop waiting after a quiet
                    // half second.
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(500) {
                        break;
                    }
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
        for c in stream.flush() {
            stream.recycle(c);
        }
        (finisher.join().expect("senders"), stream.counters())
    });
    let dropped = plane.snapshot().drops().total();
    drop(stream);
    let _ = plane.shutdown();
    Ok(SpeadTrial {
        offered_gbps: gbps,
        heaps_sent,
        sent_gbps: heaps_sent as f64 * f64::from(opts.heap_bytes) * 8.0 / opts.seconds / 1e9,
        heaps_complete: counters.heaps_complete,
        heaps_incomplete: counters.heaps_incomplete,
        received_gbps: counters.heaps_complete as f64 * f64::from(opts.heap_bytes) * 8.0
            / opts.seconds
            / 1e9,
        dropped_packets: dropped,
        heaps_missing: counters.heaps_missing,
        packets_too_late: counters.packets_too_late,
        packets_no_free_chunk: counters.packets_no_free_chunk,
        lossless: heaps_sent > 0
            && counters.heaps_complete == heaps_sent
            && counters.heaps_incomplete == 0,
    })
}

/// Sends `datagrams` as one burst, waiting while the queue is full; false when the
/// deadline passed first.
fn send_all(tx: &mut dataplane::TxQueue, datagrams: &[Vec<u8>], deadline: Instant) -> bool {
    let mut burst = loop {
        match tx.alloc(datagrams.len()) {
            Ok(b) => break b,
            Err(_) if Instant::now() > deadline => return false,
            Err(_) => std::hint::spin_loop(),
        }
    };
    for (k, d) in datagrams.iter().enumerate() {
        burst.buffer_mut(k, 0).expect("host buffer")[..d.len()].copy_from_slice(d);
        burst.set_len(k, 0, d.len());
    }
    loop {
        match tx.send(burst) {
            Ok(()) => return true,
            Err(_) if Instant::now() > deadline => return false,
            Err(back) => {
                burst = back.burst;
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every trial's plane plans, on both transports and with chunks in every memory: a
    /// refusal here would only show at start, on a machine with the memory (GPU chunks on
    /// the loopback once needed the TX region page-locked too).
    #[test]
    fn every_transport_and_chunk_memory_plans() {
        for transport in [SpeadTransport::Udp, SpeadTransport::Loopback] {
            for chunks in [
                ChunkMemory::Heap,
                ChunkMemory::Host,
                ChunkMemory::Pinned,
                ChunkMemory::Gpu,
            ] {
                let opts = SpeadBenchOptions {
                    heap_bytes: 1 << 20,
                    packet_bytes: 8192,
                    seconds: 0.1,
                    max_gbps: 10.0,
                    steps: 1,
                    port: 8888,
                    chunks,
                    transport,
                    senders: if transport == SpeadTransport::Loopback {
                        3
                    } else {
                        1
                    },
                };
                let text = config_text(&opts, 1000);
                let loaded = dataplane::config::load_str(&text, "bench-spead")
                    .unwrap_or_else(|e| panic!("{transport:?}, {chunks:?}: {e}\n{text}"));
                if let Err(e) = dataplane::plan::Plan::from_config(&loaded.config) {
                    panic!("{transport:?}, {chunks:?}: {e}\n{text}");
                }
            }
        }
    }
}
