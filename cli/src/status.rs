//! The command's exit statuses, one meaning each (also in `--help` and
//! `docs/bench-output.md`): scripts tell a usage mistake from a failed verdict.

/// Success: the command did what was asked; a bench's run was lossless; `doctor` found
/// nothing blocking.
pub(crate) const SUCCESS: u8 = 0;
/// The command could not run: a configuration that does not load or validate, a
/// resource that could not be had, an I/O error.
pub(crate) const ERROR: u8 = 1;
// 2, usage: an unknown command, flag or value; clap exits with it before any command runs.
/// The verdict failed: a bench that lost, corrupted or reordered packets, or whose
/// peer failed; `doctor` with a blocking finding; `diff` with a change that needs a
/// restart.
pub(crate) const FAILED: u8 = 3;
/// Inconclusive: the run ended with packets still in flight, so it cannot say.
pub(crate) const INCONCLUSIVE: u8 = 4;
// Interrupted: 130 after SIGINT, 143 after SIGTERM (128 + the signal), whatever the
// verdict; 141 when stdout was closed (`| head -1`).

/// The statuses as `--help` lists them.
pub(crate) const HELP: &str = "\
Exit status:
  0    success (a bench: lossless; doctor: nothing blocking)
  1    error: the command could not run (configuration, resources, I/O)
  2    usage: unknown command, flag or value
  3    failed verdict: a bench not lossless or its peer failed; doctor: a blocking finding;
       diff: the change needs a restart
  4    inconclusive: packets still in flight when the run ended
  130  interrupted by SIGINT, 143 by SIGTERM (whatever the verdict)
  141  stdout closed early

Signals:
  SIGUSR1  fires every RX queue's transient buffer (capture.transient): the window around
           now is written to its next file; the run goes on

Environment:
  DATAPLANE_LOG        log filter overriding the configuration's log_level (tracing syntax,
                       e.g. debug or dataplane::engine=trace)
  DATAPLANE_EAL_ARGS   extra DPDK EAL arguments (e.g. -d DRIVER.so --log-level=...)
  DATAPLANE_HUGETLBFS  the hugetlbfs mount region files go to (default: the first fitting one)
  DATAPLANE_PLOT_FONT  a TrueType font for `plot` (default: DejaVu Sans or Liberation Sans)
  OTEL_EXPORTER_OTLP_ENDPOINT  as --otlp: push the metrics to this OpenTelemetry collector";
