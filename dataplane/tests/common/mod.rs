//! Helpers shared by the integration tests (each test binary uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;

/// A shipped configuration, by its name in `configs/`.
pub fn config_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(name)
}

/// The `--json` report: the last line of a `dataplane bench` run's stdout.
pub fn last_json(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().expect("a report line")).expect("JSON report")
}
