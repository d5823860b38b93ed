//! Configuration: the reference's YAML schema, read with key paths, lines and columns in
//! every error, then validated before anything is allocated.

#![forbid(unsafe_code)]

mod builder;
pub mod diag;
pub mod model;
mod parse;
pub mod reader;
pub mod validate;
pub mod yaml;

pub use builder::{ConfigBuilder, InterfaceBuilder};
pub use diag::{ConfigError, Diagnostic, DiagnosticKind, Severity};
pub use model::*;

use diag::Diagnostics;
use std::path::Path;

/// A configuration that passed every check, with the warnings found on the way.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// Warnings (unused regions, cores this machine lacks, tight buffer counts).
    pub warnings: Vec<Diagnostic>,
}

/// Largest configuration file read (far above any real one).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads and validates a configuration file. Only regular files of at most
/// [`MAX_FILE_BYTES`] are read: a device (`/dev/zero`) or a FIFO is refused before anything
/// is read from it, so nothing blocks or reads without end. Text handed over directly
/// ([`load_str`], Python, C) has the same limit.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let name = path.display().to_string();
    match read_config_file(path) {
        Ok(text) => load_str(&text, &name),
        Err(why) => {
            let mut d = Diagnostics::default();
            d.error(
                DiagnosticKind::Invalid,
                "",
                None,
                format!("cannot read {name}: {why}"),
            );
            Err(d.into_error(&name))
        }
    }
}

/// Why a configuration file was not read.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file ({0}); give the path of a YAML file")]
    NotRegular(&'static str),
    #[error("the configuration is {0} bytes; configurations are limited to {MAX_FILE_BYTES} bytes")]
    TooLarge(u64),
    #[error("the file grew past {MAX_FILE_BYTES} bytes while it was read")]
    Grew,
}

fn read_config_file(path: &Path) -> Result<String, ReadError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without blocking (a FIFO would wait for a writer), then examined through the
    // descriptor, so what is read is what was checked.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(describe_file_type(&meta.file_type())));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge(meta.len()));
    }
    // The file may grow between the check and the read: read one byte past the limit.
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::Grew);
    }
    Ok(text)
}

fn describe_file_type(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// This machine's memory (`MemTotal` in /proc/meminfo), or `None` when unreadable.
pub fn host_memory_bytes() -> Option<u64> {
    crate::sysinfo::meminfo("MemTotal").map(|kib| kib * 1024)
}

/// Reads and validates configuration text; `source_name` appears in messages.
pub fn load_str(text: &str, source_name: &str) -> Result<Loaded, ConfigError> {
    load_with(text, source_name, &crate::affinity::core_is_usable)
}

/// As [`load_str`], with a custom answer to "can a thread run on core N?" (for tests).
pub fn load_with(
    text: &str,
    source_name: &str,
    online: &dyn Fn(u32) -> bool,
) -> Result<Loaded, ConfigError> {
    let mut d = Diagnostics::default();
    // The same limit as a file's, whichever entry point the text came through (Python, C).
    if text.len() as u64 > MAX_FILE_BYTES {
        d.error(
            DiagnosticKind::Invalid,
            "",
            None,
            ReadError::TooLarge(text.len() as u64).to_string(),
        );
        return Err(d.into_error(source_name));
    }
    let Some(root) = yaml_root(&mut d, text) else {
        return Err(d.into_error(source_name));
    };
    let Some(config) = parse::document(&mut d, &root) else {
        return Err(d.into_error(source_name));
    };
    validate::check(&mut d, &config, online, host_memory_bytes());
    if d.has_errors() {
        return Err(d.into_error(source_name));
    }
    Ok(Loaded {
        config,
        warnings: d.into_vec(),
    })
}

/// The YAML tree of `text`, or a syntax error in `d`.
fn yaml_root(d: &mut Diagnostics, text: &str) -> Option<yaml::Node> {
    yaml::parse(text)
        .map_err(|e| {
            let message = format!("invalid YAML: {}", e.message);
            d.error(DiagnosticKind::Syntax, "", e.location, message);
        })
        .ok()
}

/// One RX flow rule from YAML text written as an entry of an interface's `rx.flows`
/// (`{name: f, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 7000}}`), for rules
/// added at run time ([`crate::DataPlane::add_flow`]) from text, as the C API does. Errors
/// name the key, line and column; whether the interface has its queues is checked when
/// the rule is added.
pub fn flow_from_str(text: &str, source_name: &str) -> Result<FlowConfig, ConfigError> {
    let mut d = Diagnostics::default();
    let Some(root) = yaml_root(&mut d, text) else {
        return Err(d.into_error(source_name));
    };
    match parse::rx_flow(&mut d, &root, "flow") {
        Some(flow) if !d.has_errors() => Ok(flow),
        _ => Err(d.into_error(source_name)),
    }
}

/// The `tracing` level a configuration's `log_level` asks for (`critical` is `error`, the
/// most severe `tracing` has); `debug: true` raises it to at least `debug`.
pub fn tracing_level(log_level: &str, debug: bool) -> &'static str {
    let level = match log_level {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "error" | "critical" => "error",
        "off" => "off",
        _ => "warn",
    };
    match (debug, level) {
        (true, "trace") => "trace",
        (true, _) => "debug",
        (false, l) => l,
    }
}

/// DPDK's EAL log level for a configuration's `log_level` (`--log-level=N`, syslog
/// numbering: 1 emergency .. 8 debug), so that the EAL and its drivers speak as much as
/// the data plane does.
pub fn eal_log_level(log_level: &str, debug: bool) -> u32 {
    match tracing_level(log_level, debug) {
        "trace" | "debug" => 8,
        "info" => 7,
        "error" => 4,
        "off" => 1,
        _ => 5,
    }
}

#[cfg(test)]
mod log_level_tests {
    use super::*;

    #[test]
    fn every_reference_log_level_maps_to_a_tracing_and_an_eal_level() {
        let cases = [
            ("trace", "trace", 8),
            ("debug", "debug", 8),
            ("info", "info", 7),
            ("warn", "warn", 5),
            ("error", "error", 4),
            ("critical", "error", 4),
            ("off", "off", 1),
        ];
        for (yaml, tracing, eal) in cases {
            assert_eq!(tracing_level(yaml, false), tracing, "{yaml}");
            assert_eq!(eal_log_level(yaml, false), eal, "{yaml}");
        }
        assert_eq!(tracing_level("warn", true), "debug");
        assert_eq!(tracing_level("trace", true), "trace");
        assert_eq!(eal_log_level("error", true), 8);
    }
}
