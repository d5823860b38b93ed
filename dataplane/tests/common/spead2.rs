//! spead2 (from PyPI) as the peer of the SPEAD tests: finding a Python that has it, and
//! the payload formula both sides compute.

use std::process::{Command, Stdio};

/// Byte `i` of heap `h`'s `n` bytes: the same formula as [`PATTERN_PY`]'s `payload`.
pub fn heap_payload(h: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i ^ h.wrapping_mul(40503)) & 0xff) as u8)
        .collect()
}

/// Python that defines `payload(h, n)` as [`heap_payload`] does (NumPy imported as `np`).
pub const PATTERN_PY: &str = "
import os
import numpy as np
def payload(h, n):
    return ((np.arange(n, dtype=np.uint64) ^ np.uint64(h * 40503)) & np.uint64(0xff)).astype(np.uint8)
";

/// A Python with spead2, or None (after saying SKIP, or failing when it is required: where
/// `DATAPLANE_REQUIRE_SPEAD2` is set, as in `make test`).
pub fn spead2_python() -> Option<String> {
    let cache = std::env::var("DATAPLANE_CACHE").unwrap_or("/var/cache/dataplane".into());
    let candidates = [
        std::env::var("DATAPLANE_SPEAD2_PYTHON").ok(),
        Some(format!("{cache}/spead2-venv/bin/python")),
        Some("python3".into()),
    ];
    for python in candidates.into_iter().flatten() {
        let ok = Command::new(&python)
            .args(["-c", "import spead2, numpy"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    assert!(
        std::env::var_os("DATAPLANE_REQUIRE_SPEAD2").is_none(),
        "spead2 is required here but no Python has it (scripts/setup.sh makes the venv)"
    );
    eprintln!("SKIP: no Python with spead2 (pip install spead2 numpy)");
    None
}
