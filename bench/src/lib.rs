//! Self-checking benchmarks of the `dataplane` library, behind `dataplane bench`: traffic
//! generation, checking and reports.

pub mod dynamic;
pub mod fwd;
#[cfg(feature = "cuda")]
pub mod gpu;
mod quantize;
pub mod raw;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod ring;
pub mod schemas;
pub mod socket;
pub mod spead;
pub mod traffic;

/// What `count` handlers put in `from` once they were told to stop, waiting at most
/// `deadline` for the last of them (a handler whose worker died never reports; the
/// plane's worker failures say why).
pub(crate) fn handler_results<T>(
    from: &std::sync::Mutex<Vec<T>>,
    count: usize,
    deadline: std::time::Duration,
) -> Vec<T> {
    let until = std::time::Instant::now() + deadline;
    loop {
        let mut got = from.lock().unwrap_or_else(|e| e.into_inner());
        if got.len() >= count || std::time::Instant::now() >= until {
            return std::mem::take(&mut *got);
        }
        drop(got);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Sends `burst` on `tx`, yielding while its ring is full; any other failure comes back.
pub(crate) fn send_when_room(
    tx: &mut dataplane::TxQueue,
    mut burst: dataplane::Burst,
) -> Result<(), dataplane::SendError> {
    loop {
        match tx.send(burst) {
            Ok(()) => return Ok(()),
            Err(e) if e.reason == dataplane::TxFailure::RingFull => {
                burst = e.burst;
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
}

/// Which side(s) of a client/server bench (`bench rdma`, `bench socket`) this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Mode {
    /// The server side (its interfaces and `*_bench_server`).
    Server,
    /// The client side (its interfaces and `*_bench_client`).
    Client,
    /// Both, in one process (one thread each).
    Both,
}

impl Mode {
    /// `server`, `client` or `both`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Server => "server",
            Mode::Client => "client",
            Mode::Both => "both",
        }
    }
}
