//! Device timestamps: the NIC clock in nanoseconds since the Unix epoch.
//!
//! DPDK gives RX timestamps (and takes send times) in the device's clock, in ticks of an
//! unknown rate. At start the port's clock is read twice 100 ms apart beside the wall
//! clock, which gives the rate and an anchor; a tick value then converts both ways. A
//! device whose clock cannot be read (mlx5 in real-time mode answers `-ENOTSUP`) already
//! counts nanoseconds of its own real-time (PTP) clock: its ticks are taken as they are.

#![forbid(unsafe_code)]

use std::time::Duration;

/// How long the calibration watches both clocks.
pub const CALIBRATION: Duration = Duration::from_millis(100);

/// A device clock mapped onto wall-clock nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NicClock {
    ticks0: u64,
    ns0: u64,
    ns_per_tick: f64,
}

impl NicClock {
    /// Ticks are nanoseconds of the device's real-time clock.
    pub const REAL_TIME: NicClock = NicClock {
        ticks0: 0,
        ns0: 0,
        ns_per_tick: 1.0,
    };

    /// From two readings of both clocks, `(ticks, wall ns)` at the start and at the end.
    /// `None` when the device clock did not advance (unusable).
    pub fn from_readings(start: (u64, u64), end: (u64, u64)) -> Option<Self> {
        let ticks = end.0.checked_sub(start.0).filter(|&t| t > 0)?;
        let ns = end.1.checked_sub(start.1)?;
        Some(Self {
            ticks0: end.0,
            ns0: end.1,
            ns_per_tick: ns as f64 / ticks as f64,
        })
    }

    /// Calibrates with `read` (the device clock; `Err` with an errno when it cannot be
    /// read) against `wall` (ns since the epoch), sleeping [`CALIBRATION`] in between.
    pub fn calibrate(
        read: impl Fn() -> Result<u64, i32>,
        wall: impl Fn() -> u64,
    ) -> Result<Self, DeviceClockError> {
        let first = match read() {
            Ok(t) => t,
            Err(e) if e == -95 || e == 95 => return Ok(Self::REAL_TIME), // ENOTSUP
            Err(e) => return Err(DeviceClockError::Read(e)),
        };
        let start = (first, wall());
        std::thread::sleep(CALIBRATION);
        let end = (read().map_err(DeviceClockError::Read)?, wall());
        Self::from_readings(start, end).ok_or(DeviceClockError::Stopped)
    }

    /// Wall-clock nanoseconds of device clock value `ticks`.
    #[inline]
    pub fn to_ns(&self, ticks: u64) -> u64 {
        let d = ticks.wrapping_sub(self.ticks0) as i64 as f64 * self.ns_per_tick;
        (self.ns0 as i64).wrapping_add(d as i64) as u64
    }

    /// Device clock value of wall-clock nanoseconds `ns`.
    #[inline]
    pub fn to_ticks(&self, ns: u64) -> u64 {
        let d = ns.wrapping_sub(self.ns0) as i64 as f64 / self.ns_per_tick;
        (self.ticks0 as i64).wrapping_add(d as i64) as u64
    }

    /// Device ticks per second.
    pub fn hz(&self) -> f64 {
        1e9 / self.ns_per_tick
    }
}

/// Why a device clock cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceClockError {
    /// `rte_eth_read_clock` returned this error code.
    #[error("rte_eth_read_clock failed ({0})")]
    Read(i32),
    /// Two readings 100 ms apart were the same.
    #[error("the device clock does not advance")]
    Stopped,
    /// DPDK refused the mbuf timestamp field (`rte_mbuf_dyn_*_timestamp_register`).
    #[error("registering the mbuf timestamp field failed ({0})")]
    Field(i32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_of_another_rate_and_origin_maps_both_ways() {
        // A 156.25 MHz clock that started 5 s before the anchor.
        let hz = 156_250_000u64;
        let wall0 = 1_764_547_200_000_000_000u64;
        let ticks_at =
            |ns: u64| 5 * hz + ((ns - wall0) as u128 * hz as u128 / 1_000_000_000) as u64;
        let start = (ticks_at(wall0), wall0);
        let end = (ticks_at(wall0 + 100_000_000), wall0 + 100_000_000);
        let c = NicClock::from_readings(start, end).unwrap();
        assert!((c.hz() - hz as f64).abs() < 1.0, "{}", c.hz());
        for later_ns in [0u64, 1_000, 2_500_000_000, 3_600_000_000_000] {
            let ns = wall0 + 100_000_000 + later_ns;
            let back = c.to_ns(ticks_at(ns));
            assert!(back.abs_diff(ns) <= 7, "{later_ns}: {back} vs {ns}");
            assert!(c.to_ticks(ns).abs_diff(ticks_at(ns)) <= 1);
        }
        // Before the anchor too (a send time in the past, a late timestamp).
        let ns = wall0 + 50_000_000;
        assert!(c.to_ns(ticks_at(ns)).abs_diff(ns) <= 7);
    }

    #[test]
    fn an_unreadable_clock_is_the_real_time_clock_and_a_stuck_one_is_refused() {
        let c = NicClock::calibrate(|| Err(-95), || 1).unwrap();
        assert_eq!(c, NicClock::REAL_TIME);
        assert_eq!(c.to_ns(123_456_789), 123_456_789);
        assert_eq!(c.to_ticks(987), 987);
        assert!(NicClock::calibrate(|| Err(-19), || 1).is_err());
        assert!(NicClock::from_readings((10, 0), (10, 100)).is_none());
    }
}
