//! A progress bar on stderr (indicatif) for the benches whose report comes only at the end
//! (`bench socket`, `bench rdma`, `bench fwd`): the planned seconds filling up. Drawn only
//! on a terminal and only for runs longer than two seconds, so pipes, files and log
//! collectors get no control characters. `bench raw` and `capture` print a line per second
//! with rates instead (the plane's stats thread).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A run's bar; cleared when dropped.
pub(crate) struct Progress {
    running: Option<(ProgressBar, Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Progress {
    /// A bar for a run of `seconds` named `what`, unless `quiet`, short or not on a
    /// terminal.
    pub(crate) fn start(what: &str, seconds: f64, quiet: bool) -> Self {
        if quiet || seconds.is_nan() || seconds <= 2.0 || !std::io::stderr().is_terminal() {
            return Self { running: None };
        }
        let total_ms = (seconds * 1000.0) as u64;
        let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {elapsed} of {prefix}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>-");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar.set_prefix(format!("{seconds:.0}s"));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (bar, stop) = (bar.clone(), stop.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    bar.set_position((start.elapsed().as_millis() as u64).min(total_ms));
                    std::thread::sleep(Duration::from_millis(200));
                }
            })
        };
        Self {
            running: Some((bar, stop, ticker)),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((bar, stop, ticker)) = self.running.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = ticker.join();
            bar.finish_and_clear();
        }
    }
}
