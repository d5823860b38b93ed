//! Benchmarks behind `dataplane bench`.

pub mod dynamic;
pub mod fwd;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod raw;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod ring;
pub mod socket;
pub mod traffic;

/// Which side(s) of a client/server bench (`bench rdma`, `bench socket`) this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
