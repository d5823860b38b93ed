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
    pub(crate) fn install() -> Self {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let s = Self {
            any: Arc::new(AtomicBool::new(false)),
            int: Arc::new(AtomicBool::new(false)),
            exit_at_once: Arc::new(AtomicBool::new(false)),
        };
        for (sig, status) in [(SIGINT, 130), (SIGTERM, 143)] {
            let r = signal_hook::flag::register_conditional_shutdown(
                sig,
                status,
                s.exit_at_once.clone(),
            )
            .and_then(|_| signal_hook::flag::register(sig, s.any.clone()));
            if let Err(e) = r {
                eprintln!("warning: cannot handle signal {sig}: {e}");
            }
        }
        if let Err(e) = signal_hook::flag::register(SIGINT, s.int.clone()) {
            eprintln!("warning: cannot handle signal {SIGINT}: {e}");
        }
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
