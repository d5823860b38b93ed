//! `dataplane bench fwd`: a relay. Bursts received on one interface's RX queues go out on
//! another's (or the same one's) TX queues as they are, optionally with source and
//! destination MAC swapped: testpmd's `io` and `macswap` forwarding, l2fwd, and the shape
//! of a relay in a sensor chain. Nothing is copied by the application; descriptors move
//! from RX to TX.
//!
//! Traffic comes from outside (another process over memif, a NIC), or from `--tx-first`:
//! bursts built from the first `bench_tx` entry are sent once before forwarding starts, so a
//! port that loops back to itself (net_ring, the software loopback) keeps them circling.

#![forbid(unsafe_code)]

use super::traffic::FrameBuilder;
use dataplane::affinity;
use dataplane::config::{Config, Direction};
use dataplane::plane::{DataPlane, RxQueue, StartError, TxFailure, TxQueue};
use dataplane::stats::{Drops, QueueStats};
use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod inline;

/// Options of a forwarding run.
#[derive(Clone, Debug, Default)]
pub struct FwdOptions {
    /// Seconds of forwarding.
    pub seconds: f64,
    /// Swap source and destination MAC of every frame (testpmd `macswap`).
    pub mac_swap: bool,
    /// Interface to receive on (default: the first with RX queues).
    pub rx_interface: Option<String>,
    /// Interface to send on (default: another with TX queues, else the RX one).
    pub tx_interface: Option<String>,
    /// Bursts per forwarding thread sent before forwarding starts (from `bench_tx[0]`).
    pub tx_first: usize,
    /// Cores of the forwarding threads, one per TX queue in use (default: not pinned).
    pub cores: Vec<u32>,
    /// Forward to completion in the workers' handlers, on the cores polling the queues
    /// (`delivery: handler`; each RX queue and its TX queue on one worker), instead of
    /// on forwarding threads (`cores` is then not used).
    pub inline: bool,
}

/// Why a forwarding run could not start.
#[derive(Debug, thiserror::Error)]
pub enum FwdError {
    /// The data plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A named interface does not exist or lacks queues in the needed direction.
    #[error("no interface `{name}` with {direction} queues")]
    NoInterface {
        /// Its name (or a description when none was named).
        name: String,
        /// The direction it needs.
        direction: &'static str,
    },
    /// `--tx-first` without a frame description.
    #[error("--tx-first builds its frames from bench_tx, and the configuration has none")]
    NoFrames,
    /// A TX queue that cannot carry `--tx-first` frames.
    #[error("--tx-first: TX queue {queue} of `{interface}` {reason}")]
    UnusableTxQueue {
        /// Interface.
        interface: String,
        /// Queue id.
        queue: u16,
        /// Why.
        reason: &'static str,
    },
}

/// The result of a forwarding run; serialised as the `--json` line.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct FwdReport {
    /// Engine name.
    pub engine: &'static str,
    /// Interface received on.
    pub rx_interface: String,
    /// Interface sent on.
    pub tx_interface: String,
    /// MAC addresses were swapped.
    pub mac_swap: bool,
    /// Forwarding threads (one per TX queue in use).
    pub threads: usize,
    /// Seconds of forwarding.
    pub seconds: f64,
    /// Packets sent by `--tx-first`.
    pub seeded_packets: u64,
    /// Packets received and handed to a TX queue.
    pub forwarded_packets: u64,
    /// Their bytes.
    pub forwarded_bytes: u64,
    /// Forwarded packets per second, millions.
    pub mpps: f64,
    /// Forwarded bits per second, billions.
    pub gbps: f64,
    /// Packets received but not yet handed on when forwarding stopped (freed).
    pub unforwarded_at_stop: u64,
    /// Drops counted by the data plane.
    pub drops: Drops,
    /// Per queue counts.
    pub queues: Vec<QueueStats>,
    /// Workers or queues that failed.
    pub problems: Vec<String>,
}

#[derive(Default)]
struct ThreadResult {
    seeded: u64,
    packets: u64,
    bytes: u64,
    unforwarded: u64,
    problem: Option<String>,
}

/// Picks the interface named `wanted`, else the first `fallback` accepts.
fn pick(
    config: &Config,
    wanted: Option<&str>,
    direction: &'static str,
    has: impl Fn(usize) -> bool,
    fallback: impl Fn(usize) -> bool,
) -> Result<usize, FwdError> {
    let found = match wanted {
        Some(name) => config.interface_index(name).filter(|&i| has(i)),
        None => (0..config.interfaces.len()).find(|&i| fallback(i)),
    };
    found.ok_or_else(|| FwdError::NoInterface {
        name: wanted.unwrap_or("(any)").to_owned(),
        direction,
    })
}

/// Swaps destination and source MAC of every packet whose first segment is in host memory.
#[inline]
fn swap_macs(burst: &mut dataplane::Burst) {
    for i in 0..burst.len() {
        if let Some(buf) = burst.buffer_mut(i, 0)
            && buf.len() >= 12
        {
            let (dst, src) = buf[..12].split_at_mut(6);
            dst.swap_with_slice(src);
        }
    }
}

/// Sends `tx_first` bursts of frames from `builder` on `tx`.
fn seed(tx: &mut TxQueue, builder: &mut FrameBuilder, bursts: usize) -> Result<u64, TxFailure> {
    let mut sent = 0;
    for _ in 0..bursts {
        let mut burst = tx.alloc(tx.batch_size)?;
        builder.fill(&mut burst);
        let n = burst.len() as u64;
        super::send_when_room(tx, burst).map_err(|e| e.reason)?;
        sent += n;
    }
    Ok(sent)
}

/// The relay's two interfaces and their queues.
struct Ends {
    rx_if: usize,
    tx_if: usize,
    rx_name: String,
    tx_name: String,
    rx_ids: Vec<u16>,
    tx_ids: Vec<u16>,
}

impl Ends {
    /// The interfaces `--rx-interface` and `--tx-interface` name, or the first with RX
    /// queues and another (else the same) with TX queues.
    fn choose(config: &Config, opts: &FwdOptions) -> Result<Self, FwdError> {
        let count = |i: usize, dir: Direction| {
            let iface = &config.interfaces[i];
            match dir {
                Direction::Rx => iface.rx.iter().map(|r| r.queues.len()).sum::<usize>(),
                Direction::Tx => iface.tx.iter().map(|t| t.queues.len()).sum::<usize>(),
            }
        };
        let rx_if = pick(
            config,
            opts.rx_interface.as_deref(),
            "RX",
            |i| count(i, Direction::Rx) > 0,
            |i| count(i, Direction::Rx) > 0,
        )?;
        let tx_if = pick(
            config,
            opts.tx_interface.as_deref(),
            "TX",
            |i| count(i, Direction::Tx) > 0,
            |i| i != rx_if && count(i, Direction::Tx) > 0,
        )
        .or_else(|e| {
            if opts.tx_interface.is_none() && count(rx_if, Direction::Tx) > 0 {
                Ok(rx_if)
            } else {
                Err(e)
            }
        })?;
        let rx_name = config.interfaces[rx_if].name.clone();
        let tx_name = config.interfaces[tx_if].name.clone();
        let ids = |queues: &[dataplane::config::QueueConfig]| queues.iter().map(|q| q.id).collect();
        let rx_ids: Vec<u16> = config.interfaces[rx_if]
            .rx
            .as_ref()
            .map_or_else(Vec::new, |r| ids(&r.queues));
        let tx_ids: Vec<u16> = config.interfaces[tx_if]
            .tx
            .as_ref()
            .map_or_else(Vec::new, |t| ids(&t.queues));
        Ok(Self {
            rx_if,
            tx_if,
            rx_name,
            tx_name,
            rx_ids,
            tx_ids,
        })
    }
}

/// Starts the plane with the relay in the workers' handlers (`--inline`).
fn start_inline(
    config: &Config,
    opts: &FwdOptions,
    (rx_if, rx_ids): (usize, &[u16]),
    (tx_if, tx_ids): (usize, &[u16]),
    (stop, forwarded): (&Arc<AtomicBool>, &Arc<AtomicU64>),
) -> Result<(DataPlane, Relays), FwdError> {
    let shared = Arc::new(inline::Shared {
        stop: stop.clone(),
        forwarded: forwarded.clone(),
        results: Default::default(),
    });
    let config = inline::inline_config(config, (rx_if, rx_ids), (tx_if, tx_ids));
    let mut relays = 0;
    let plane = DataPlane::start_with_handlers(&config, |queues| {
        relays += 1;
        let seed = (opts.tx_first > 0).then(|| FrameBuilder::new(&config.bench.tx[0], 0));
        let relay = inline::InlineRelay::new(
            queues,
            (rx_if as u16, rx_ids),
            (tx_if as u16, tx_ids),
            opts,
            seed,
            shared.clone(),
        )?;
        Ok(Box::new(relay))
    })?;
    Ok((plane, Relays::Inline(shared, relays)))
}

/// Runs the relay. `interrupted` is polled (Ctrl-C ends the run early, with a report).
pub fn run(
    config: &Config,
    opts: &FwdOptions,
    interrupted: &AtomicBool,
) -> Result<FwdReport, FwdError> {
    let ends = Ends::choose(config, opts)?;
    let (rx_if, tx_if, rx_ids, tx_ids) = (ends.rx_if, ends.tx_if, &ends.rx_ids, &ends.tx_ids);
    if opts.tx_first > 0 && config.bench.tx.is_empty() {
        return Err(FwdError::NoFrames);
    }
    let threads = tx_ids.len().min(rx_ids.len());
    let stop = Arc::new(AtomicBool::new(false));
    let forwarded = Arc::new(AtomicU64::new(0));
    let (plane, relays) = if opts.inline {
        start_inline(
            config,
            opts,
            (rx_if, rx_ids),
            (tx_if, &tx_ids[..threads]),
            (&stop, &forwarded),
        )?
    } else {
        let mut plane = DataPlane::start(config)?;
        let threads = start_threads(
            &mut plane,
            config,
            opts,
            (&ends.rx_name, rx_ids),
            (&ends.tx_name, &tx_ids[..threads]),
            (&stop, &forwarded),
        )?;
        (plane, threads)
    };
    if let Relays::Threads(_, go) = &relays {
        go.store(true, Ordering::Release);
    }
    let started = Instant::now();
    let duration = Duration::from_secs_f64(opts.seconds);
    while started.elapsed() < duration && !interrupted.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let mut totals = ThreadResult {
        seeded: 0,
        packets: 0,
        bytes: 0,
        unforwarded: 0,
        problem: None,
    };
    let mut problems = Vec::new();
    for r in relays.results() {
        totals.seeded += r.seeded;
        totals.packets += r.packets;
        totals.bytes += r.bytes;
        totals.unforwarded += r.unforwarded;
        problems.extend(r.problem);
    }
    let seconds = started.elapsed().as_secs_f64();
    let snapshot = plane.snapshot();
    let engine = plane.engine_name();
    if let Err(failed) = plane.shutdown() {
        problems.extend(failed.iter().map(|f| f.to_string()));
    }
    let drops = snapshot.drops();
    if drops.total() > 0 {
        problems.push(format!(
            "data plane dropped {} packets ({drops})",
            drops.total()
        ));
    }
    Ok(FwdReport {
        engine,
        rx_interface: ends.rx_name.clone(),
        tx_interface: ends.tx_name.clone(),
        mac_swap: opts.mac_swap,
        threads,
        seconds,
        seeded_packets: totals.seeded,
        forwarded_packets: totals.packets,
        forwarded_bytes: totals.bytes,
        mpps: totals.packets as f64 / seconds / 1e6,
        gbps: totals.bytes as f64 * 8.0 / seconds / 1e9,
        unforwarded_at_stop: totals.unforwarded,
        drops,
        queues: snapshot.queues,
        problems,
    })
}

/// Where the relay runs.
enum Relays {
    /// Forwarding threads, released by the flag.
    Threads(Vec<std::thread::JoinHandle<ThreadResult>>, Arc<AtomicBool>),
    /// The workers' handlers (`--inline`): what they share, and how many there are.
    Inline(Arc<inline::Shared>, usize),
}

impl Relays {
    /// Once `stop` is set: what each thread or handler did.
    fn results(self) -> Vec<ThreadResult> {
        match self {
            Relays::Threads(handles, _) => handles
                .into_iter()
                .map(|h| h.join().expect("forwarding thread"))
                .collect(),
            Relays::Inline(shared, count) => {
                crate::handler_results(&shared.results, count, Duration::from_secs(10))
            }
        }
    }
}

/// Starts one forwarding thread per TX queue in `tx_ids` (RX queue `i` of `rx_ids` goes to
/// thread `i % threads`); they wait for the returned flag before seeding and forwarding.
fn start_threads(
    plane: &mut DataPlane,
    config: &Config,
    opts: &FwdOptions,
    (rx_name, rx_ids): (&str, &[u16]),
    (tx_name, tx_ids): (&str, &[u16]),
    (stop, forwarded): (&Arc<AtomicBool>, &Arc<AtomicU64>),
) -> Result<Relays, FwdError> {
    let threads = tx_ids.len();
    let mut groups: Vec<(TxQueue, Vec<RxQueue>)> = Vec::new();
    for &id in tx_ids {
        let tx = plane
            .take_tx_queue(tx_name, id)
            .expect("a configured queue, taken once");
        if opts.tx_first > 0 && (!tx.host_accessible() || tx.segment_sizes().len() != 1) {
            return Err(FwdError::UnusableTxQueue {
                interface: tx_name.to_owned(),
                queue: id,
                reason: "must have one memory region in host memory",
            });
        }
        groups.push((tx, Vec::new()));
    }
    for (i, &id) in rx_ids.iter().enumerate() {
        let rx = plane
            .take_rx_queue(rx_name, id)
            .expect("a configured queue, taken once");
        groups[i % threads].1.push(rx);
    }

    let go = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for (j, (mut tx, mut rxs)) in groups.into_iter().enumerate() {
        let (stop_here, go_here, forwarded) = (stop.clone(), go.clone(), forwarded.clone());
        let core = opts.cores.get(j).copied();
        let mac_swap = opts.mac_swap;
        let mut builder = (opts.tx_first > 0).then(|| FrameBuilder::new(&config.bench.tx[0], 0));
        let tx_first = opts.tx_first;
        let handle = std::thread::Builder::new()
            .name("bench-fwd".into())
            .spawn(move || {
                if let Some(c) = core {
                    let _ = affinity::pin_current_thread(c);
                }
                let mut r = ThreadResult {
                    seeded: 0,
                    packets: 0,
                    bytes: 0,
                    unforwarded: 0,
                    problem: None,
                };
                let (stop, go) = (stop_here, go_here);
                while !go.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                if let Some(b) = &mut builder {
                    match seed(&mut tx, b, tx_first) {
                        Ok(n) => r.seeded = n,
                        Err(e) => {
                            r.problem = Some(format!("--tx-first: {e}"));
                            return r;
                        }
                    }
                }
                forward_until_stop(&mut tx, &mut rxs, mac_swap, (&stop, &forwarded), &mut r);
                r
            });
        match handle {
            Ok(h) => handles.push(h),
            Err(e) => {
                // Threads already started wait for `go`: release and end them.
                stop.store(true, Ordering::Relaxed);
                go.store(true, Ordering::Release);
                for h in handles {
                    let _ = h.join();
                }
                return Err(StartError::Spawn(e).into());
            }
        }
    }

    Ok(Relays::Threads(handles, go))
}

/// Forwards every burst of `rxs` to `tx` until `stop` (or a failure, noted in `r`).
fn forward_until_stop(
    tx: &mut TxQueue,
    rxs: &mut [RxQueue],
    mac_swap: bool,
    (stop, forwarded): (&AtomicBool, &AtomicU64),
    r: &mut ThreadResult,
) {
    let mut idle = 0u32;
    'run: while !stop.load(Ordering::Relaxed) {
        let mut got = false;
        for rx in rxs.iter_mut() {
            let mut burst = match rx.poll() {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(e) => {
                    r.problem = Some(e.to_string());
                    break 'run;
                }
            };
            got = true;
            if mac_swap {
                swap_macs(&mut burst);
            }
            let (n, bytes) = (burst.len() as u64, burst.bytes());
            loop {
                match tx.forward(burst) {
                    Ok(()) => break,
                    Err(e) if e.reason == TxFailure::RingFull => {
                        if stop.load(Ordering::Relaxed) {
                            r.unforwarded += n;
                            break 'run;
                        }
                        burst = e.burst;
                        std::hint::spin_loop();
                    }
                    Err(e) => {
                        r.unforwarded += n;
                        r.problem = Some(e.reason.to_string());
                        break 'run;
                    }
                }
            }
            r.packets += n;
            r.bytes += bytes;
            forwarded.fetch_add(n, Ordering::Relaxed);
        }
        idle = if got { 0 } else { idle + 1 };
        if idle > 1024 {
            idle = 0;
            std::thread::yield_now();
        }
    }
}

impl FwdReport {
    /// Human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "engine {}: {} RX -> {} TX, {} forwarding thread(s), {}, {:.2} s\n",
            self.engine,
            self.rx_interface,
            self.tx_interface,
            self.threads,
            if self.mac_swap {
                "MAC swap"
            } else {
                "as received"
            },
            self.seconds
        );
        if self.seeded_packets > 0 {
            s += &format!("  seeded {} packets (--tx-first)\n", self.seeded_packets);
        }
        s += &format!(
            "  forwarded {} packets, {} bytes: {:.2} Mpps, {:.2} Gb/s\n",
            self.forwarded_packets, self.forwarded_bytes, self.mpps, self.gbps
        );
        if self.unforwarded_at_stop > 0 {
            s += &format!(
                "  {} received packets were not handed on when forwarding stopped\n",
                self.unforwarded_at_stop
            );
        }
        for q in &self.queues {
            s += &format!(
                "  {} {} queue {}: {} packets, {} bytes\n",
                q.interface, q.direction, q.queue, q.packets, q.bytes
            );
        }
        for p in &self.problems {
            s += &format!("  problem: {p}\n");
        }
        s
    }
}
