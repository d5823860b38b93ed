//! SIGINT and SIGTERM for the CLI: flags the benches poll, and exit statuses 130 / 143.

use super::*;

/// SIGINT and SIGTERM, as flags the benches poll.
pub(crate) struct Signals {
    /// Set by either signal.
    pub(crate) any: Arc<AtomicBool>,
    /// Set by SIGINT.
    pub(crate) int: Arc<AtomicBool>,
    /// When set, a further signal ends the process at once (commands that do not poll).
    pub(crate) exit_at_once: Arc<AtomicBool>,
}

impl Signals {
    /// Installs the handlers; done first, so a signal at any later moment is seen.
    ///
    /// A signal has several handlers here, installed one at a time, so one may come while
    /// only some exist. The flag that says which signal came is registered first and
    /// `any` is set from it once all are installed: whenever a signal comes, both the
    /// exit status and the interruption are right.
    pub(crate) fn install() -> Self {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let s = Self {
            any: Arc::new(AtomicBool::new(false)),
            int: Arc::new(AtomicBool::new(false)),
            exit_at_once: Arc::new(AtomicBool::new(false)),
        };
        let term = Arc::new(AtomicBool::new(false));
        for (sig, came) in [(SIGINT, &s.int), (SIGTERM, &term)] {
            if let Err(e) = signal_hook::flag::register(sig, came.clone()) {
                eprintln!("warning: cannot handle signal {sig}: {e}");
            }
        }
        for (sig, status) in [(SIGINT, 130), (SIGTERM, 143)] {
            let r = signal_hook::flag::register(sig, s.any.clone()).and_then(|_| {
                signal_hook::flag::register_conditional_shutdown(
                    sig,
                    status,
                    s.exit_at_once.clone(),
                )
            });
            if let Err(e) = r {
                eprintln!("warning: cannot handle signal {sig}: {e}");
            }
        }
        if s.int.load(Ordering::SeqCst) || term.load(Ordering::SeqCst) {
            s.any.store(true, Ordering::SeqCst);
        }
        fire_transients_on_sigusr1();
        s
    }

    /// For commands that do not poll: a signal that already came ends the process now,
    /// later ones end it at once.
    pub(crate) fn default_behaviour(&self) {
        self.exit_at_once.store(true, Ordering::SeqCst);
        if self.any.load(Ordering::SeqCst) {
            std::process::exit(self.exit_status());
        }
    }

    pub(crate) fn interrupted(&self) -> bool {
        self.any.load(Ordering::SeqCst)
    }

    /// 130 after SIGINT, 143 after SIGTERM (128 + the signal's number).
    pub(crate) fn exit_status(&self) -> i32 {
        if self.int.load(Ordering::SeqCst) {
            130
        } else {
            143
        }
    }
}

/// SIGUSR1 fires every transient buffer (`capture.transient`) of the running plane, from a
/// thread of its own (a signal handler may not take the registry's lock).
fn fire_transients_on_sigusr1() {
    use signal_hook::consts::SIGUSR1;
    match signal_hook::iterator::Signals::new([SIGUSR1]) {
        Ok(mut signals) => {
            let spawned = std::thread::Builder::new()
                .name("dp-sigusr1".into())
                .spawn(move || {
                    for _ in signals.forever() {
                        let n = dataplane::capture::fire_all_transients();
                        eprintln!("SIGUSR1: fired {n} transient buffer(s)");
                    }
                });
            if let Err(e) = spawned {
                eprintln!("warning: cannot handle SIGUSR1: {e}");
            }
        }
        Err(e) => eprintln!("warning: cannot handle SIGUSR1: {e}"),
    }
}
