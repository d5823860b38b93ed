//! `dataplane replay`: a capture sent on a TX queue at its own gaps (or scaled, or at a
//! fixed rate, or unpaced), looped if asked, with the send-time error reported.

use super::*;
use dataplane::plane::replay::{Pace, ReplayOptions, ReplayReport};
use dataplane_bench::raw::duration_text;

/// The pacing the flags ask for (clap keeps them exclusive).
pub(crate) fn pace(speed: Option<f64>, pps: Option<f64>, unpaced: bool) -> Pace {
    match (speed, pps, unpaced) {
        (_, _, true) => Pace::Unpaced,
        (_, Some(pps), _) => Pace::PacketsPerSecond(pps),
        (speed, None, false) => Pace::Original {
            speed: speed.unwrap_or(1.0),
        },
    }
}

/// The first interface with a TX queue, or `wanted`.
fn interface_of(config: &Config, wanted: Option<&str>) -> Result<String, String> {
    if let Some(name) = wanted {
        return config
            .interfaces
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.name.clone())
            .ok_or_else(|| format!("no interface named `{name}`"));
    }
    config
        .interfaces
        .iter()
        .find(|i| i.tx.as_ref().is_some_and(|t| !t.queues.is_empty()))
        .map(|i| i.name.clone())
        .ok_or_else(|| "no interface has a TX queue".into())
}

fn human(r: &ReplayReport) -> String {
    let mut s = format!(
        "replayed {} packets ({} bytes), {} loop{}, over {}{}\n",
        r.packets,
        r.bytes,
        r.loops,
        if r.loops == 1 { "" } else { "s" },
        duration_text(r.scheduled_ns),
        if r.stopped { " (stopped early)" } else { "" }
    );
    match r.send_error {
        Some(e) => {
            s += &format!(
                "send-time error (how late packets went): median {}, p99 {}, max {} over {} packets\n",
                duration_text(e.p50_ns),
                duration_text(e.p99_ns),
                duration_text(e.max_ns),
                e.packets
            )
        }
        None => {
            s += "send-time error: not measured (unpaced, or sent at their times by the device)\n"
        }
    }
    s
}

/// Runs the replay; 0 when every loop went out, 1 on an error, 128 + the signal when
/// interrupted.
pub(crate) fn run(
    file: &Path,
    capture: &Path,
    (interface, queue): (Option<&str>, u16),
    pace: Pace,
    loops: u32,
    out: Output,
    signals: &Signals,
) -> ExitCode {
    let Some(config) = load(file) else {
        return ExitCode::FAILURE;
    };
    let interface = match interface_of(&config, interface) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    let frames = match dataplane::capture::read_capture(capture) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut plane = match dataplane::DataPlane::start(&config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(mut tx) = plane.take_tx_queue(&interface, queue) else {
        eprintln!("error: interface `{interface}` has no TX queue {queue}");
        return ExitCode::FAILURE;
    };
    // What the plane receives meanwhile is taken and counted, so that its RX queues
    // (a loopback's, a port's) never hold the buffers the replay needs; a queue with
    // `capture:` writes it (capture, replay, capture again).
    let receivers = drain_rx_queues(&mut plane, &config);
    let options = ReplayOptions {
        pace,
        loops,
        payload_only: config.stream_type == dataplane::config::StreamType::Socket,
        ..ReplayOptions::default()
    };
    let result = dataplane::plane::replay::replay(&mut tx, &frames, &options, &signals.any);
    drop(tx);
    let received = receivers.finish();
    if !out.quiet && received > 0 {
        eprintln!("the plane's RX queues received {received} packets meanwhile");
    }
    if let Err(failed) = plane.shutdown() {
        for f in failed {
            eprintln!("error: {f}");
        }
    }
    finish_bench(result, human, |_| status::SUCCESS, out, signals)
}

/// A thread that empties every RX queue of the plane until finished.
struct Receivers {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Receivers {
    /// Stops the thread once what is in flight has arrived; the packets it took.
    fn finish(mut self) -> u64 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

fn drain_rx_queues(plane: &mut dataplane::DataPlane, config: &Config) -> Receivers {
    let mut queues = Vec::new();
    for i in &config.interfaces {
        for q in i.rx.iter().flat_map(|r| &r.queues) {
            if let Some(rx) = plane.take_rx_queue(&i.name, q.id) {
                queues.push(rx);
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    let thread = (!queues.is_empty()).then(|| {
        std::thread::spawn(move || {
            let mut received = 0u64;
            while !done.load(Ordering::Relaxed) {
                let mut idle = true;
                for rx in &mut queues {
                    while let Ok(Some(b)) = rx.poll() {
                        received += b.len() as u64;
                        idle = false;
                    }
                }
                if idle {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
            // A queue with `capture:` wrote what it took: close its file.
            for rx in &mut queues {
                if let Some(Err(e)) = rx.finish_capture() {
                    eprintln!(
                        "error: capture of {} queue {}: {e}",
                        rx.interface, rx.queue.0
                    );
                }
            }
            received
        })
    });
    Receivers { stop, thread }
}
