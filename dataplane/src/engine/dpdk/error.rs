//! The one place DPDK return codes and `rte_errno` become typed errors.

use dpdk_sys as sys;
use std::ffi::CStr;

/// A DPDK call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {text} (errno {errno})")]
pub struct DpdkError {
    /// The call, or what it was for.
    pub call: &'static str,
    /// The positive errno value.
    pub errno: i32,
    /// DPDK's text for it (`rte_strerror`).
    pub text: String,
}

impl DpdkError {
    /// The error of a call that returned `code` (a negative errno, or a positive one).
    pub fn from_code(call: &'static str, code: i32) -> Self {
        let errno = code.saturating_abs();
        // SAFETY: rte_strerror returns a valid C string for any errno value.
        let text = unsafe { CStr::from_ptr(sys::rte_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        Self { call, errno, text }
    }

    /// The error of a call that reported it through the calling thread's `rte_errno`.
    pub fn last(call: &'static str) -> Self {
        // SAFETY: reads the calling thread's rte_errno.
        Self::from_code(call, unsafe { sys::shim_rte_errno() })
    }
}

/// `Ok` for a call that returned 0 or more, else its error.
pub fn check(call: &'static str, ret: i32) -> Result<i32, DpdkError> {
    if ret < 0 {
        Err(DpdkError::from_code(call, ret))
    } else {
        Ok(ret)
    }
}

/// A C string from DPDK (a static name or message), or `default` for null.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that lives through the call.
pub(crate) unsafe fn c_text(p: *const std::os::raw::c_char, default: &str) -> String {
    if p.is_null() {
        return default.to_owned();
    }
    // SAFETY: the caller's guarantee.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// What the machine has free, for allocation errors: available memory and free huge
/// pages (from /proc/meminfo).
pub fn free_memory_text() -> String {
    use crate::sysinfo::meminfo;
    match (
        meminfo("MemAvailable"),
        meminfo("HugePages_Free"),
        meminfo("Hugepagesize"),
    ) {
        (Some(avail_kib), Some(free), Some(page_kib)) => format!(
            "free memory: {} MiB available, {free} free huge pages of {} KiB",
            avail_kib / 1024,
            page_kib
        ),
        _ => "free memory: unknown (/proc/meminfo unreadable)".into(),
    }
}
