//! `bench dynamic-flows`: rules added and removed under traffic, in phases, with the counts
//! of every phase checked (the reference's dynamic RX flow example, as a bench).
//!
//! The RX interface starts isolated with no rule, so traffic is dropped (`no_flow`). Then
//! one rule at a time, each with its own flow id, steers the generator's traffic: to the
//! first queue, to the second, and spread over both by RSS (the generator then varies its
//! UDP source port over 64 values so the hash has something to spread). A rule is removed
//! before the next is added, and [`DataPlane::add_flow`] returns only once every worker
//! adopted the change, so a packet's flow id says which phase steered it. The run passes
//! when each rule's packets reached exactly its queues, the RSS split is within the
//! tolerance, no other flow id arrived, no frame was damaged, and every sent packet was
//! received or counted by a drop counter.

use super::traffic::{CheckCounts, Checker, FrameBuilder};
use dataplane::affinity;
use dataplane::config::{BenchTxConfig, Config, FlowConfig, FlowMatch, PortRange};
use dataplane::plane::{DataPlane, RxQueue, StartError, TxQueue};
use dataplane::stats::Drops;
use dataplane::steering::FlowError;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// UDP source ports the generator cycles through in the RSS phase.
const RSS_SOURCE_PORTS: u16 = 64;

/// Flow ids of the phases' rules.
const FLOW_FIRST_QUEUE: u32 = 1;
const FLOW_SECOND_QUEUE: u32 = 2;
const FLOW_RSS: u32 = 3;

/// How long each phase lasts, and what counts as balanced.
#[derive(Clone, Debug)]
pub struct DynamicOptions {
    /// The isolated phase before the first rule.
    pub drop: Duration,
    /// Each phase with a rule.
    pub active: Duration,
    /// After the last rule is removed, before the generator stops.
    pub drain: Duration,
    /// Largest accepted `|a - b| / (a + b)` of the RSS phase's two queues.
    pub tolerance: f64,
    /// Pace the generator's TX queue (`pacing_mbps`) to this rate, Gb/s.
    pub target_gbps: Option<f64>,
}

impl Default for DynamicOptions {
    fn default() -> Self {
        Self {
            drop: Duration::from_millis(1000),
            active: Duration::from_millis(1000),
            drain: Duration::from_millis(200),
            tolerance: 0.35,
            target_gbps: None,
        }
    }
}

/// The bench cannot run on this configuration.
#[derive(Debug, thiserror::Error)]
pub enum DynamicError {
    /// Something the phases need is missing from the configuration.
    #[error("bench dynamic-flows: {0}")]
    Config(String),
    /// The data plane did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A rule change failed.
    #[error("bench dynamic-flows, phase `{phase}`: {source}")]
    Flow {
        /// The phase.
        phase: &'static str,
        /// Why.
        source: FlowError,
    },
}

/// One phase's counts.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct PhaseReport {
    /// `isolated`, `first_queue`, `second_queue`, `rss` or `drain`.
    pub name: &'static str,
    /// The flow id of the phase's rule (none in the isolated and drain phases).
    pub flow_id: Option<u32>,
    /// The queues its rule names.
    pub queues: Vec<u16>,
    /// Seconds it lasted.
    pub seconds: f64,
    /// Packets the generator sent during it.
    pub sent: u64,
    /// `no_flow` drops counted during it (packets no rule matched).
    pub no_flow: u64,
    /// Packets received with the phase's flow id, per queue (whenever they arrived).
    pub received: BTreeMap<u16, u64>,
}

/// The result; serialised as the `--json` line.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DynamicReport {
    /// Engine name.
    pub engine: &'static str,
    /// Where steering ran.
    pub steering: String,
    /// The RX interface whose rules changed.
    pub interface: String,
    /// The phases in order.
    pub phases: Vec<PhaseReport>,
    /// Packets sent.
    pub tx_packets: u64,
    /// Packets received on the two queues.
    pub rx_packets: u64,
    /// Drop counters of the data plane.
    pub drops: Drops,
    /// Sent packets neither received nor counted by a drop counter.
    pub unattributed: u64,
    /// Packets received with a flow id no phase's rule carries, or on a queue its rule
    /// does not name: `(queue, flow id) -> packets`, as `"q0/flow7"`.
    pub unexpected_flow_ids: BTreeMap<String, u64>,
    /// `|a - b| / (a + b)` of the RSS phase's two queues.
    pub relative_delta: f64,
    /// The accepted `relative_delta`.
    pub tolerance: f64,
    /// Frame checks (damaged frames, duplicates; gaps are expected, dropped phases leave
    /// them).
    pub checker: CheckCounts,
    /// True when every check held.
    pub ok: bool,
    /// What failed.
    pub problems: Vec<String>,
}

fn rule(name: &str, id: u32, queues: &[u16], dst: PortRange) -> FlowConfig {
    FlowConfig {
        name: name.into(),
        id,
        queue_ids: queues.to_vec(),
        matches: FlowMatch {
            udp_dst: Some(dst),
            ..Default::default()
        },
        transforms: Vec::new(),
        location: Default::default(),
    }
}

/// What the phases run on, checked from the configuration.
struct Setup {
    /// The first `bench_tx` entry.
    tx: BenchTxConfig,
    /// The RX interface whose rules change.
    interface: String,
    /// Its two receiving queues.
    queues: [u16; 2],
    /// Where the receiver runs.
    rx_core: Option<u32>,
}

impl Setup {
    fn from_config(config: &Config) -> Result<Self, DynamicError> {
        let bad = |s: String| Err(DynamicError::Config(s));
        let Some(tx) = config.bench.tx.first().cloned() else {
            return bad("needs a bench_tx entry to send traffic".into());
        };
        let Some(rx_bench) = config.bench.rx.first() else {
            return bad("needs a bench_rx entry naming the interface whose rules change".into());
        };
        let interface = rx_bench.interface_name.clone();
        let iface = &config.interfaces[config.interface_index(&interface).expect("validated")];
        let Some(rx) = iface.rx.as_ref() else {
            return bad(format!("interface `{interface}` has no RX queues"));
        };
        if !rx.flow_isolation {
            return bad(format!(
                "interface `{interface}` needs rx.flow_isolation: true (the first phase checks that traffic without a rule is not delivered)"
            ));
        }
        if !rx.flows.is_empty() {
            return bad(format!(
                "interface `{interface}` has static flows; the phases need an interface whose only rules are the ones they add"
            ));
        }
        let mut queue_ids: Vec<u16> = config
            .bench
            .rx
            .iter()
            .filter(|b| b.interface_name == interface)
            .filter_map(|b| b.queue_id)
            .collect();
        if queue_ids.len() < 2 {
            queue_ids = rx.queues.iter().map(|q| q.id).collect();
        }
        let [q0, q1] = match queue_ids[..] {
            [a, b, ..] => [a, b],
            _ => {
                return bad(format!(
                    "interface `{interface}` needs two RX queues (the phases steer to each and spread over both)"
                ));
            }
        };
        Ok(Self {
            tx,
            interface,
            queues: [q0, q1],
            rx_core: rx_bench.cpu_core,
        })
    }
}

/// The generator and receiver threads' shared state.
#[derive(Default)]
struct Shared {
    stop_tx: AtomicBool,
    stop_rx: AtomicBool,
    /// Vary the UDP source port (the RSS phase).
    vary: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
}

/// What the receiver saw: packets per `(queue, flow id)`, the frame checks, poll errors.
type Received = (BTreeMap<(u16, u32), u64>, Checker, Vec<String>);

/// Runs the phases on `config` (its first `bench_tx` entry sends, the RX interface of its
/// first `bench_rx` entry has its rules changed and its first two queues receive).
pub fn run(
    config: &Config,
    opts: &DynamicOptions,
    interrupted: &AtomicBool,
) -> Result<DynamicReport, DynamicError> {
    let setup = Setup::from_config(config)?;
    let paced;
    let config = match opts.target_gbps {
        Some(g) => {
            paced = super::raw::with_target_rate(config, g);
            &paced
        }
        None => config,
    };

    let mut plane = DataPlane::start(config)?;
    let taken = |what: &str| DynamicError::Config(format!("{what} is used twice"));
    let tx = plane
        .take_tx_queue(&setup.tx.interface_name, setup.tx.queue_id)
        .ok_or_else(|| taken("the bench_tx queue"))?;
    if !tx.host_accessible() {
        return Err(DynamicError::Config(
            "the bench_tx queue's first segment must be in host memory".into(),
        ));
    }
    let mut rx_queues = Vec::new();
    for q in setup.queues {
        let rxq = plane
            .take_rx_queue(&setup.interface, q)
            .ok_or_else(|| taken("an RX queue"))?;
        rx_queues.push((q, rxq));
    }

    let shared = Arc::new(Shared::default());
    let generator = spawn_generator(tx, &setup.tx, opts.target_gbps.is_some(), &shared)?;
    let receiver = spawn_receiver(rx_queues, setup.rx_core, &shared)?;
    let (mut phases, failure) = run_phases(&plane, &setup, opts, &shared, interrupted);
    let tx_failure = generator.join().expect("generator thread");
    let tx_packets = shared.sent.load(Ordering::Relaxed);
    // Every sent packet is received or counted by a drop counter, or the deadline passes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while shared.received.load(Ordering::Relaxed) + plane.snapshot().drops().total() < tx_packets
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    shared.stop_rx.store(true, Ordering::Relaxed);
    let (by_flow, checker, rx_failures) = receiver.join().expect("receiver thread");
    let drops = plane.snapshot().drops();
    let engine = plane.engine_name();
    let steering = plane.steering();
    let shutdown = plane.shutdown();
    if let Some(f) = failure {
        return Err(f);
    }

    let mut problems: Vec<String> = rx_failures;
    problems.extend(tx_failure.map(|e| format!("generator: {e}")));
    if let Err(failed) = shutdown {
        problems.extend(failed.iter().map(|f| f.to_string()));
    }
    let [q0, q1] = setup.queues;
    for p in &mut phases {
        if let Some(id) = p.flow_id {
            for q in [q0, q1] {
                p.received
                    .insert(q, by_flow.get(&(q, id)).copied().unwrap_or(0));
            }
        }
    }
    let unexpected = unexpected_flow_ids(&by_flow, &phases);
    if !unexpected.is_empty() {
        problems.push(format!(
            "packets arrived with a flow id or on a queue no rule named: {unexpected:?}"
        ));
    }
    problems.extend(phase_problems(&phases));
    let rss = |q: u16| by_flow.get(&(q, FLOW_RSS)).copied().unwrap_or(0);
    let (a, b) = (rss(q0) as f64, rss(q1) as f64);
    let relative_delta = if a + b > 0.0 {
        (a - b).abs() / (a + b)
    } else {
        1.0
    };
    if relative_delta > opts.tolerance {
        problems.push(format!(
            "rss phase: queues {q0} and {q1} got {a} and {b} packets, relative delta {relative_delta:.3} above the tolerance {}",
            opts.tolerance
        ));
    }
    let rx_packets: u64 = by_flow.values().sum();
    let unattributed = tx_packets.saturating_sub(rx_packets + drops.total());
    if unattributed > 0 {
        problems.push(format!(
            "{unattributed} of {tx_packets} sent packets were neither received nor counted by a drop counter"
        ));
    }
    if checker.counts.corrupt > 0 || checker.counts.duplicates > 0 {
        problems.push(format!(
            "{} damaged and {} duplicated frames{}",
            checker.counts.corrupt,
            checker.counts.duplicates,
            checker
                .first_problem
                .as_deref()
                .map(|p| format!(" (first: {p})"))
                .unwrap_or_default()
        ));
    }
    if interrupted.load(Ordering::Relaxed) {
        problems.push("interrupted".into());
    }
    Ok(DynamicReport {
        engine,
        steering,
        interface: setup.interface,
        phases,
        tx_packets,
        rx_packets,
        drops,
        unattributed,
        unexpected_flow_ids: unexpected,
        relative_delta,
        tolerance: opts.tolerance,
        checker: checker.counts,
        ok: problems.is_empty(),
        problems,
    })
}

/// The generator thread: bursts of `tx`'s frames, with a varied source port while
/// `shared.vary` is set; returns its failure, if any.
fn spawn_generator(
    mut tx: TxQueue,
    tx_cfg: &BenchTxConfig,
    paced: bool,
    shared: &Arc<Shared>,
) -> Result<JoinHandle<Option<String>>, StartError> {
    let shared = shared.clone();
    let mut fixed = FrameBuilder::new(tx_cfg, 0);
    let mut spread_cfg = tx_cfg.clone();
    let first = tx_cfg.udp_src_port.first;
    spread_cfg.udp_src_port = PortRange {
        first,
        last: first.saturating_add(RSS_SOURCE_PORTS - 1),
    };
    let mut spread = FrameBuilder::new(&spread_cfg, 1);
    let (batch, core) = (tx_cfg.batch_size as usize, tx_cfg.cpu_core);
    std::thread::Builder::new()
        .name("bench-tx".into())
        .spawn(move || -> Option<String> {
            if let Some(c) = core {
                let _ = affinity::pin_current_thread(c);
            }
            let mut packets = 0u64;
            while !shared.stop_tx.load(Ordering::Relaxed) {
                if paced && tx.pending() > 0 {
                    std::thread::yield_now();
                    continue;
                }
                let Ok(mut burst) = tx.alloc(batch) else {
                    std::thread::yield_now();
                    continue;
                };
                if shared.vary.load(Ordering::Relaxed) {
                    spread.fill(&mut burst);
                } else {
                    fixed.fill(&mut burst);
                }
                let n = burst.len() as u64;
                if let Err(e) = super::send_when_room(&mut tx, burst) {
                    return Some(e.to_string());
                }
                packets += n;
                shared.sent.store(packets, Ordering::Relaxed);
            }
            None
        })
        .map_err(StartError::Spawn)
}

/// The receiver thread: counts packets per queue and flow id and checks host frames until
/// `shared.stop_rx`.
fn spawn_receiver(
    mut rx_queues: Vec<(u16, RxQueue)>,
    core: Option<u32>,
    shared: &Arc<Shared>,
) -> Result<JoinHandle<Received>, StartError> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("bench-rx".into())
        .spawn(move || {
            if let Some(c) = core {
                let _ = affinity::pin_current_thread(c);
            }
            let mut by_flow: BTreeMap<(u16, u32), u64> = BTreeMap::new();
            let mut checker = Checker::new(false);
            let mut failures = Vec::new();
            let mut packets = 0u64;
            while !shared.stop_rx.load(Ordering::Relaxed) {
                let mut got = false;
                for (q, rxq) in &mut rx_queues {
                    let burst = match rxq.poll() {
                        Ok(Some(b)) => b,
                        Ok(None) => continue,
                        Err(e) => {
                            if failures.len() < 4 {
                                failures.push(e.to_string());
                            }
                            continue;
                        }
                    };
                    got = true;
                    for i in 0..burst.len() {
                        *by_flow.entry((*q, burst.packets()[i].flow_id)).or_default() += 1;
                        // Frames in GPU memory are counted, not read.
                        if burst.packets()[i].segments().len() == 1
                            && let Some(d) = burst.data(i, 0)
                        {
                            checker.check(d);
                        }
                    }
                    packets += burst.len() as u64;
                    shared.received.store(packets, Ordering::Relaxed);
                }
                if !got {
                    std::thread::yield_now();
                }
            }
            (by_flow, checker, failures)
        })
        .map_err(StartError::Spawn)
}

/// The phases in order, each rule added after the previous one is removed; stops the
/// generator after the drain. Returns the phases' counts and the first rule change that
/// failed.
fn run_phases(
    plane: &DataPlane,
    setup: &Setup,
    opts: &DynamicOptions,
    shared: &Shared,
    interrupted: &AtomicBool,
) -> (Vec<PhaseReport>, Option<DynamicError>) {
    let [q0, q1] = setup.queues;
    let dst = setup.tx.udp_dst_port;
    let mut phases = Vec::new();
    let mut failure = None;
    let mut mark = (Instant::now(), 0u64, plane.snapshot().drops().no_flow);
    let mut end_phase = |name, flow_id: Option<u32>, queues: Vec<u16>| {
        let now = (
            Instant::now(),
            shared.sent.load(Ordering::Relaxed),
            plane.snapshot().drops().no_flow,
        );
        phases.push(PhaseReport {
            name,
            flow_id,
            queues,
            seconds: (now.0 - mark.0).as_secs_f64(),
            sent: now.1 - mark.1,
            no_flow: now.2 - mark.2,
            received: BTreeMap::new(),
        });
        mark = now;
    };
    let wait = |d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until && !interrupted.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let steps: [(&'static str, u32, Vec<u16>); 3] = [
        ("first_queue", FLOW_FIRST_QUEUE, vec![q0]),
        ("second_queue", FLOW_SECOND_QUEUE, vec![q1]),
        ("rss", FLOW_RSS, vec![q0, q1]),
    ];
    wait(opts.drop);
    end_phase("isolated", None, Vec::new());
    let mut installed = None;
    for (phase, id, queues) in steps {
        if let Some(h) = installed.take()
            && let Err(source) = plane.remove_flow(h)
        {
            failure = Some(DynamicError::Flow { phase, source });
            break;
        }
        if id == FLOW_RSS {
            shared.vary.store(true, Ordering::Relaxed);
        }
        match plane.add_flow(&setup.interface, rule(phase, id, &queues, dst)) {
            Ok(h) => installed = Some(h),
            Err(source) => {
                failure = Some(DynamicError::Flow { phase, source });
                break;
            }
        }
        wait(opts.active);
        end_phase(phase, Some(id), queues);
    }
    if let Some(h) = installed.take()
        && let Err(source) = plane.remove_flow(h)
        && failure.is_none()
    {
        failure = Some(DynamicError::Flow {
            phase: "drain",
            source,
        });
    }
    wait(opts.drain);
    shared.stop_tx.store(true, Ordering::Relaxed);
    end_phase("drain", None, Vec::new());
    (phases, failure)
}

/// Packets with a flow id no phase carries, or on a queue its phase's rule does not name,
/// as `"q0/flow7" -> packets`.
fn unexpected_flow_ids(
    by_flow: &BTreeMap<(u16, u32), u64>,
    phases: &[PhaseReport],
) -> BTreeMap<String, u64> {
    by_flow
        .iter()
        .filter(|&(&(q, id), _)| {
            !phases
                .iter()
                .any(|p| p.flow_id == Some(id) && p.queues.contains(&q))
        })
        .map(|(&(q, id), &n)| (format!("q{q}/flow{id}"), n))
        .collect()
}

/// A phase that saw no traffic: the isolated phase dropped nothing, or a queue a rule
/// named received none of its packets.
fn phase_problems(phases: &[PhaseReport]) -> Vec<String> {
    let mut problems = Vec::new();
    for p in phases {
        match p.flow_id {
            None if p.name == "isolated" && p.no_flow == 0 => problems.push(
                "isolated phase: no packet was dropped as no_flow, so the phase saw no traffic"
                    .into(),
            ),
            Some(_) => {
                for (&q, &n) in &p.received {
                    if p.queues.contains(&q) && n == 0 {
                        problems.push(format!(
                            "phase {}: queue {q} received none of the rule's packets",
                            p.name
                        ));
                    }
                }
            }
            None => {}
        }
    }
    problems
}

impl DynamicReport {
    /// The human-readable report.
    pub fn human(&self) -> String {
        let mut s = format!(
            "engine {} (steering: {}), rules changed on `{}`\n",
            self.engine, self.steering, self.interface
        );
        for p in &self.phases {
            let rule = match p.flow_id {
                Some(id) => format!("rule flow {id} -> queues {:?}", p.queues),
                None => "no rule".into(),
            };
            let got: Vec<String> = p
                .received
                .iter()
                .map(|(q, n)| format!("q{q} {n}"))
                .collect();
            s.push_str(&format!(
                "  phase {:<12} {:.2} s, {rule}: sent {}, no_flow drops {}{}\n",
                p.name,
                p.seconds,
                p.sent,
                p.no_flow,
                if got.is_empty() {
                    String::new()
                } else {
                    format!(", received {}", got.join(" "))
                }
            ));
        }
        s.push_str(&format!(
            "TX complete: {} packets; RX complete: {} packets, drops {} (no_flow {}), unattributed {}, unexpected_flow_ids={:?}\n",
            self.tx_packets,
            self.rx_packets,
            self.drops.total(),
            self.drops.no_flow,
            self.unattributed,
            self.unexpected_flow_ids
        ));
        s.push_str(&format!(
            "RSS relative_delta={:.3} tolerance={}\n",
            self.relative_delta, self.tolerance
        ));
        if self.ok {
            s.push_str("PASSED: every phase delivered to exactly its queues\n");
        } else {
            s.push_str("FAILED:\n");
            for p in &self.problems {
                s.push_str(&format!("  - {p}\n"));
            }
        }
        s
    }
}
