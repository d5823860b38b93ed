//! One JSON envelope around every `--json` output, so a consumer reads any command's
//! result the same way and can tell versions apart:
//! `{"schema_version": 1, "command": "bench raw", "dataplane": {version, commit, features},
//! "config": {"file", "sha256"} or null, "result": {...}}`. The result's fields per command
//! are described by the JSON Schema files in `docs/schemas/`, which the tests validate
//! every output against. A change that removes or renames a result field raises
//! [`SCHEMA_VERSION`].

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Version of the envelope and of the result schemas.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// The command line this process runs: which command, on which configuration file.
struct Invocation {
    command: String,
    config: Option<PathBuf>,
}

static INVOCATION: OnceLock<Invocation> = OnceLock::new();

/// Says which command runs, on which configuration (once, before it runs).
pub(crate) fn set(command: impl Into<String>, config: Option<&Path>) {
    let _ = INVOCATION.set(Invocation {
        command: command.into(),
        config: config.map(Path::to_path_buf),
    });
}

/// The configuration file and the SHA-256 of its bytes (null when it cannot be read).
fn config_of(path: &Path) -> serde_json::Value {
    let digest = std::fs::read(path).ok().map(|bytes| {
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    });
    serde_json::json!({ "file": path, "sha256": digest })
}

/// `result` in the envelope, as one line of JSON (with its newline).
pub(crate) fn wrap(result: serde_json::Value) -> String {
    let (command, config) = INVOCATION.get().map_or(("unknown", None), |i| {
        (i.command.as_str(), i.config.as_deref())
    });
    let envelope = serde_json::json!({
        "schema_version": SCHEMA_VERSION,
        "command": command,
        "dataplane": {
            "version": env!("CARGO_PKG_VERSION"),
            "commit": env!("DATAPLANE_COMMIT"),
            "features": env!("DATAPLANE_FEATURES"),
        },
        "config": config.map_or(serde_json::Value::Null, config_of),
        "result": result,
    });
    format!("{envelope}\n")
}

/// `report` as the result of the envelope.
pub(crate) fn wrap_report(report: &impl serde::Serialize) -> String {
    wrap(serde_json::to_value(report).expect("reports serialise"))
}
