//! Facts about this machine read from /proc, for validation limits and error messages.

#![forbid(unsafe_code)]

/// Field `name` of /proc/meminfo (`MemTotal`, `HugePages_Free`, ...) as its number: KiB
/// for sizes, a count for page counts. `None` when unreadable.
pub fn meminfo(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_sizes_and_counts() {
        assert!(super::meminfo("MemTotal").is_some_and(|kib| kib > 0));
        assert!(super::meminfo("HugePages_Free").is_some());
        assert_eq!(super::meminfo("NoSuchField"), None);
    }
}
