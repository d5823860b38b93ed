//! A cheap per-core tick counter for timing busy polls: the TSC on x86_64
//! (`rdtsc`), the generic timer's virtual count on aarch64 (`CNTVCT_EL0`, what GB10 and
//! Grace expose to user space), and the monotonic clock elsewhere. Ticks are converted
//! with [`ticks_per_second`], measured once against the monotonic clock, so "cycles per
//! packet" means the counter's ticks, as DPDK's `rte_rdtsc` cycles do.

use std::time::{Duration, Instant};

/// The counter now. Monotonic per core; on x86_64 with an invariant TSC (every server
/// CPU of the last decade) also across cores.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads a counter; it has no preconditions and touches no memory.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: reads the virtual count register, which Linux lets user space read
        // (CNTKCTL_EL1.EL0VCTEN); no memory is touched.
        unsafe { std::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nomem, nostack)) };
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Ticks of [`ticks`] per second, measured once (10 ms against the monotonic clock; on
/// aarch64 `CNTFRQ_EL0` states it, and the measurement agrees with it).
pub fn ticks_per_second() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let (t0, i0) = (ticks(), Instant::now());
        std::thread::sleep(Duration::from_millis(10));
        let (t1, i1) = (ticks(), Instant::now());
        let s = (i1 - i0).as_secs_f64();
        if s > 0.0 && t1 > t0 {
            (t1 - t0) as f64 / s
        } else {
            1e9
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_counter_advances_and_its_rate_converts_ticks_to_about_the_elapsed_time() {
        let rate = ticks_per_second();
        assert!(rate > 1e6, "a tick counter slower than 1 MHz: {rate}");
        let (t0, i0) = (ticks(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (t1, i1) = (ticks(), Instant::now());
        assert!(t1 > t0);
        // Converted ticks and the monotonic clock agree within a factor of 2 (the check is
        // of the conversion, not of the machine's timing).
        let by_ticks = (t1 - t0) as f64 / rate;
        let by_clock = (i1 - i0).as_secs_f64();
        assert!(
            by_ticks > by_clock / 2.0 && by_ticks < by_clock * 2.0,
            "ticks say {by_ticks} s, the clock {by_clock} s"
        );
    }
}
