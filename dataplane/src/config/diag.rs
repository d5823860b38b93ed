//! Configuration diagnostics: every problem names its key path, line and column.

use super::yaml::Location;
use std::fmt;

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// The configuration cannot be used.
    Error,
    /// The configuration works but probably not as intended.
    Warning,
}

/// What kind of problem a diagnostic reports; tests and tools match on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagnosticKind {
    /// The text is not valid YAML.
    Syntax,
    /// A value has the wrong type.
    Type,
    /// A number is out of its allowed range.
    Range,
    /// A key this project does not know.
    UnknownKey,
    /// A key of the reference schema that this project does not implement yet.
    NotSupported,
    /// A `<placeholder>` value was left in.
    Placeholder,
    /// A required key is missing.
    Missing,
    /// A name or id is used twice.
    Duplicate,
    /// A reference to something that does not exist (memory region, queue, interface).
    UnknownReference,
    /// Any other invalid value or combination.
    Invalid,
    /// The machine cannot run this (missing cores, memory, drivers).
    Machine,
}

/// One problem found in a configuration.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The class of problem.
    pub kind: DiagnosticKind,
    /// Key path such as `interfaces[0].rx.queues[1].batch_size` (empty for the document).
    pub path: String,
    /// Position in the YAML text.
    pub location: Option<Location>,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: ")?;
        match (&self.location, self.path.is_empty()) {
            (Some(l), false) => {
                write!(f, "{} (line {}, column {}): ", self.path, l.line, l.column)?
            }
            (Some(l), true) => write!(f, "line {}, column {}: ", l.line, l.column)?,
            (None, false) => write!(f, "{}: ", self.path)?,
            (None, true) => {}
        }
        f.write_str(&self.message)
    }
}

/// A configuration that cannot be used, with every error (and warning) found.
#[derive(Clone, Debug, thiserror::Error)]
pub struct ConfigError {
    /// Name of the source (file path or `<string>`).
    pub source_name: String,
    /// All diagnostics, errors first in document order.
    pub diagnostics: Vec<Diagnostic>,
}

impl ConfigError {
    /// The errors only.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors().count();
        writeln!(
            f,
            "{}: {} error{} in configuration",
            self.source_name,
            n,
            if n == 1 { "" } else { "s" }
        )?;
        for d in &self.diagnostics {
            writeln!(f, "  {d}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics while a document is read.
#[derive(Default, Debug)]
pub struct Diagnostics {
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Records an error.
    pub fn error(
        &mut self,
        kind: DiagnosticKind,
        path: &str,
        location: Option<Location>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Error, kind, path, location, message.into());
    }

    /// Records a warning.
    pub fn warn(
        &mut self,
        kind: DiagnosticKind,
        path: &str,
        location: Option<Location>,
        message: impl Into<String>,
    ) {
        self.push(Severity::Warning, kind, path, location, message.into());
    }

    fn push(
        &mut self,
        severity: Severity,
        kind: DiagnosticKind,
        path: &str,
        location: Option<Location>,
        message: String,
    ) {
        self.list.push(Diagnostic {
            severity,
            kind,
            path: path.to_owned(),
            location,
            message,
        });
    }

    /// True when at least one error was recorded.
    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }

    /// All diagnostics recorded so far.
    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.list
    }

    /// Moves everything into a [`ConfigError`] (errors first).
    pub fn into_error(self, source_name: &str) -> ConfigError {
        let mut diagnostics = self.list;
        diagnostics.sort_by_key(|d| {
            (
                d.severity != Severity::Error,
                d.location.map(|l| (l.line, l.column)),
            )
        });
        ConfigError {
            source_name: source_name.to_owned(),
            diagnostics,
        }
    }
}
