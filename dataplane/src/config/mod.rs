//! Configuration: the reference's YAML schema, read with key paths, lines and columns in
//! every error, then validated before anything is allocated.

pub mod diag;
pub mod model;
mod parse;
pub mod reader;
pub mod validate;
pub mod yaml;

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

/// Reads and validates a configuration file.
pub fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &name),
        Err(e) => {
            let mut d = Diagnostics::default();
            d.error(
                DiagnosticKind::Invalid,
                "",
                None,
                format!("cannot read {name}: {e}"),
            );
            Err(d.into_error(&name))
        }
    }
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
    let root = match yaml::parse(text) {
        Ok(root) => root,
        Err(e) => {
            d.error(
                DiagnosticKind::Syntax,
                "",
                e.location,
                format!("invalid YAML: {}", e.message),
            );
            return Err(d.into_error(source_name));
        }
    };
    let Some(config) = parse::document(&mut d, &root) else {
        return Err(d.into_error(source_name));
    };
    validate::check(&mut d, &config, online);
    if d.has_errors() {
        return Err(d.into_error(source_name));
    }
    Ok(Loaded {
        config,
        warnings: d.into_vec(),
    })
}
