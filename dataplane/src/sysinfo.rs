//! Facts about this machine read from /proc, for validation limits and error messages.

#![forbid(unsafe_code)]

/// Field `name` of /proc/meminfo (`MemTotal`, `HugePages_Free`, ...) as its number: KiB
/// for sizes, a count for page counts. `None` when unreadable.
pub fn meminfo(name: &str) -> Option<u64> {
    meminfo_under(std::path::Path::new("/"), name)
}

/// As [`meminfo`], for the machine whose `/proc` lies below `root` (a recorded tree).
pub fn meminfo_under(root: &std::path::Path, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// CPU seconds (user and system) thread `tid` of this process has used, from
/// `/proc/self/task/TID/stat`. `None` when unreadable (the thread is gone).
pub fn thread_cpu_seconds(tid: i32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its closing parenthesis
    // start at field 3, so utime (14) and stime (15) are the 12th and 13th of the rest.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11);
    let ticks: u64 = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    let per_s = rustix::param::clock_ticks_per_second();
    Some(ticks as f64 / per_s.max(1) as f64)
}

/// Whether the GPU of a region (`affinity`, or the GPU named by `gpu_uuid`) is integrated
/// (GB10, Jetson), asked of the CUDA driver. `false` when it cannot be told (no driver, no
/// such GPU, a build without CUDA): the region's allocation then fails with that reason.
pub fn gpu_is_integrated(affinity: u32, gpu_uuid: Option<&str>) -> bool {
    #[cfg(feature = "cuda")]
    {
        let ordinal = match gpu_uuid {
            Some(uuid) => gpudirect::ordinal_of_uuid(uuid).ok(),
            None => Some(affinity),
        };
        ordinal.is_some_and(|o| gpudirect::is_integrated(o).unwrap_or(false))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (affinity, gpu_uuid);
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_spinning_thread_has_cpu_time_and_a_gone_thread_none() {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let before = super::thread_cpu_seconds(tid).expect("this thread's stat");
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(120) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = super::thread_cpu_seconds(tid).unwrap();
        // The clock-tick resolution is 10 ms; 120 ms of spinning shows as more than none.
        assert!(after > before, "{before} -> {after}");
        assert_eq!(super::thread_cpu_seconds(i32::MAX), None);
    }

    #[test]
    fn reads_sizes_and_counts() {
        assert!(super::meminfo("MemTotal").is_some_and(|kib| kib > 0));
        assert!(super::meminfo("HugePages_Free").is_some());
        assert_eq!(super::meminfo("NoSuchField"), None);
    }
}
