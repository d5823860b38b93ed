//! The process's wall clock: nanoseconds since the Unix epoch from the monotonic clock,
//! one anchor for the whole process, so times taken on any thread (receive stamps, send
//! times, capture records, NIC clock calibration) compare exactly.

#![forbid(unsafe_code)]

use std::time::Instant;

/// Wall-clock nanoseconds from the monotonic clock: one system-time read at start, then
/// only `Instant` (vDSO, no system call) per read.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    epoch_ns: u64,
    origin: Instant,
}

impl WallClock {
    /// The process's clock: every `WallClock` shares one anchor, taken at first use, so
    /// times from different threads compare exactly (no drift between two anchors).
    pub fn new() -> Self {
        static ANCHOR: std::sync::OnceLock<(u64, Instant)> = std::sync::OnceLock::new();
        let &(epoch_ns, origin) = ANCHOR.get_or_init(|| {
            let epoch_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            (epoch_ns, Instant::now())
        });
        Self { epoch_ns, origin }
    }

    /// Nanoseconds since the Unix epoch now.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.epoch_ns + self.origin.elapsed().as_nanos() as u64
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}
