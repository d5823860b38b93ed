//! Typed reading of the located YAML tree: every accessor records what it asked for, so
//! unknown keys get a spelling suggestion and unsupported keys are rejected by name.

use super::diag::{DiagnosticKind as Kind, Diagnostics};
use super::yaml::{Location, Node, Value};

/// Joins a key onto a path (`a.b`), or starts one.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Appends a list index to a path (`a[3]`).
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Reads the keys of one YAML map.
pub struct MapReader<'a> {
    /// Key path of the map.
    pub path: String,
    /// Where the map starts.
    pub location: Location,
    entries: &'a [(Node, Node)],
    keys: Vec<Option<String>>,
    used: Vec<bool>,
    known: Vec<&'static str>,
}

const EMPTY: &[(Node, Node)] = &[];

impl<'a> MapReader<'a> {
    /// Opens `node` as a map; a null value counts as an empty map.
    pub fn open(d: &mut Diagnostics, node: &'a Node, path: &str) -> Option<Self> {
        let entries = match &node.value {
            Value::Map(e) => e.as_slice(),
            Value::Null => EMPTY,
            other => {
                d.error(
                    Kind::Type,
                    path,
                    Some(node.location),
                    format!("expected a map of keys, got {}", other.type_name()),
                );
                return None;
            }
        };
        Some(Self {
            path: path.to_owned(),
            location: node.location,
            entries,
            keys: entries.iter().map(|(k, _)| k.scalar_text()).collect(),
            used: vec![false; entries.len()],
            known: Vec::new(),
        })
    }

    /// Path of a child key.
    pub fn child(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Takes the value of `key`, if present.
    pub fn get(&mut self, key: &'static str) -> Option<&'a Node> {
        self.known.push(key);
        let i = self.keys.iter().position(|k| k.as_deref() == Some(key))?;
        self.used[i] = true;
        Some(&self.entries[i].1)
    }

    /// Location of `key`'s value, or of the map when absent.
    pub fn location_of(&self, key: &str) -> Location {
        self.keys
            .iter()
            .position(|k| k.as_deref() == Some(key))
            .map_or(self.location, |i| self.entries[i].0.location)
    }

    /// True when the map has `key` (does not mark it as read).
    pub fn has(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k.as_deref() == Some(key))
    }

    /// Reads a required key with `convert`; reports it when missing.
    pub fn required<T>(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        convert: impl FnOnce(&mut Diagnostics, &'a Node, &str) -> Option<T>,
    ) -> Option<T> {
        match self.get(key) {
            Some(node) => convert(d, node, &self.child(key)),
            None => {
                d.error(
                    Kind::Missing,
                    &self.path,
                    Some(self.location),
                    format!("missing required key `{key}`"),
                );
                None
            }
        }
    }

    /// Reads an optional key with `convert`; `None` when absent or invalid.
    pub fn optional<T>(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        convert: impl FnOnce(&mut Diagnostics, &'a Node, &str) -> Option<T>,
    ) -> Option<T> {
        let node = self.get(key)?;
        if matches!(node.value, Value::Null) {
            return None;
        }
        convert(d, node, &self.child(key))
    }

    /// Rejects a reference key that this project does not implement yet.
    pub fn not_supported(&mut self, d: &mut Diagnostics, key: &'static str) {
        if let Some(node) = self.get(key) {
            let path = self.child(key);
            d.error(
                Kind::NotSupported,
                &path,
                Some(node.location),
                format!("not supported yet: {path}"),
            );
        }
    }

    /// Rejects a key whose value is only supported when it equals the default
    /// (`hardware_timestamps: false` is fine, `true` is not supported yet).
    pub fn not_supported_unless(
        &mut self,
        d: &mut Diagnostics,
        key: &'static str,
        is_default: impl FnOnce(&Node) -> bool,
    ) {
        if let Some(node) = self.get(key)
            && !is_default(node)
        {
            let path = self.child(key);
            d.error(
                Kind::NotSupported,
                &path,
                Some(node.location),
                format!("not supported yet: {path} (only its default value is)"),
            );
        }
    }

    /// Reports every key nobody asked for, with the closest known spelling.
    pub fn finish(self, d: &mut Diagnostics) {
        for (i, used) in self.used.iter().enumerate() {
            if *used {
                continue;
            }
            let key_node = &self.entries[i].0;
            let key = self.keys[i]
                .clone()
                .unwrap_or_else(|| "<complex key>".into());
            let mut message = format!("unknown key `{key}`");
            if let Some(best) = suggest(&key, &self.known) {
                message.push_str(&format!(", did you mean `{best}`?"));
            } else if !self.known.is_empty() {
                let mut known = self.known.clone();
                known.sort_unstable();
                known.dedup();
                message.push_str(&format!(" (known keys: {})", known.join(", ")));
            }
            d.error(
                Kind::UnknownKey,
                &join(&self.path, &key),
                Some(key_node.location),
                message,
            );
        }
    }
}

/// The known name closest to `input`, if it is close enough to be a typo.
pub fn suggest<'k>(input: &str, known: &[&'k str]) -> Option<&'k str> {
    let limit = (input.len() / 3).max(2);
    known
        .iter()
        .map(|k| (strsim::levenshtein(input, k), *k))
        .filter(|(dist, _)| *dist <= limit)
        .min_by_key(|(dist, _)| *dist)
        .map(|(_, k)| k)
}

fn placeholder(d: &mut Diagnostics, node: &Node, path: &str, text: &str) -> bool {
    let t = text.trim();
    if t.len() >= 2 && t.starts_with('<') && t.ends_with('>') {
        d.error(
            Kind::Placeholder,
            path,
            Some(node.location),
            format!("placeholder `{t}` must be replaced with a real value"),
        );
        return true;
    }
    false
}

/// A string (integers are accepted and written out); placeholders are errors.
pub fn string(d: &mut Diagnostics, node: &Node, path: &str) -> Option<String> {
    let text = match &node.value {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        other => {
            d.error(
                Kind::Type,
                path,
                Some(node.location),
                format!("expected a string, got {}", other.type_name()),
            );
            return None;
        }
    };
    // Checked before the text is echoed anywhere: a multi-megabyte value must not become
    // a multi-megabyte message, and C APIs (EAL arguments, device names) end at a NUL.
    if text.len() > MAX_STRING_BYTES {
        d.error(
            Kind::Range,
            path,
            Some(node.location),
            format!(
                "is {} bytes long; the limit is {MAX_STRING_BYTES}",
                text.len()
            ),
        );
        return None;
    }
    if text.contains('\0') {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "contains a NUL byte",
        );
        return None;
    }
    if placeholder(d, node, path, &text) {
        return None;
    }
    Some(text)
}

/// Longest string value (names, addresses, vdev arguments with socket paths).
pub const MAX_STRING_BYTES: usize = 4096;

/// A non-empty string.
pub fn name(d: &mut Diagnostics, node: &Node, path: &str) -> Option<String> {
    let s = string(d, node, path)?;
    if s.trim().is_empty() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "must not be empty",
        );
        return None;
    }
    Some(s)
}

/// `true` or `false`.
pub fn boolean(d: &mut Diagnostics, node: &Node, path: &str) -> Option<bool> {
    match &node.value {
        Value::Bool(b) => Some(*b),
        other => {
            d.error(
                Kind::Type,
                path,
                Some(node.location),
                format!("expected true or false, got {}", describe(other)),
            );
            None
        }
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Str(s) => format!("\"{s}\""),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        other => other.type_name().to_owned(),
    }
}

/// A signed integer within `min..=max`; a string of digits is accepted (the reference
/// writes `cpu_core: "11"`).
pub fn int_in(d: &mut Diagnostics, node: &Node, path: &str, min: i128, max: i128) -> Option<i128> {
    let value = match &node.value {
        Value::Int(i) => *i,
        Value::Str(s) => {
            if placeholder(d, node, path, s) {
                return None;
            }
            match parse_int_text(s) {
                Some(i) => i,
                None => {
                    d.error(
                        Kind::Type,
                        path,
                        Some(node.location),
                        format!("expected an integer, got \"{s}\""),
                    );
                    return None;
                }
            }
        }
        Value::Float(f) => {
            let msg = if f.fract() == 0.0 {
                format!("{f} is out of range: must be at most {max}")
            } else {
                format!("expected an integer, got {f}")
            };
            d.error(Kind::Range, path, Some(node.location), msg);
            return None;
        }
        other => {
            d.error(
                Kind::Type,
                path,
                Some(node.location),
                format!("expected an integer, got {}", other.type_name()),
            );
            return None;
        }
    };
    if value < min || value > max {
        let msg = if value < min {
            format!("{value} is out of range: must be at least {min}")
        } else {
            format!("{value} is out of range: must be at most {max}")
        };
        d.error(Kind::Range, path, Some(node.location), msg);
        return None;
    }
    Some(value)
}

fn parse_int_text(s: &str) -> Option<i128> {
    let t = s.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i128::from_str_radix(hex, 16).ok();
    }
    t.parse::<i128>().ok()
}

/// An unsigned integer within `min..=max`.
pub fn uint_in(d: &mut Diagnostics, node: &Node, path: &str, min: u64, max: u64) -> Option<u64> {
    int_in(d, node, path, min.into(), max.into()).map(|v| v as u64)
}

/// A list; a single scalar is not accepted.
pub fn list<'a>(d: &mut Diagnostics, node: &'a Node, path: &str) -> Option<&'a [Node]> {
    match &node.value {
        Value::Seq(items) => Some(items),
        Value::Null => Some(&[]),
        other => {
            d.error(
                Kind::Type,
                path,
                Some(node.location),
                format!("expected a list, got {}", other.type_name()),
            );
            None
        }
    }
}

/// A list, or one map standing for a list of one (the reference allows both for
/// `bench_rx` / `bench_tx`).
pub fn one_or_many(node: &Node) -> Vec<(usize, &Node)> {
    match &node.value {
        Value::Seq(items) => items.iter().enumerate().collect(),
        _ => vec![(0, node)],
    }
}

/// One of a fixed set of words (case-insensitive), with a suggestion otherwise.
pub fn choice(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
    allowed: &[&'static str],
) -> Option<&'static str> {
    let s = string(d, node, path)?;
    let lower = s.to_ascii_lowercase();
    if let Some(hit) = allowed.iter().find(|a| **a == lower) {
        return Some(hit);
    }
    let mut msg = format!(
        "unknown value `{s}`, expected one of: {}",
        allowed.join(", ")
    );
    if let Some(best) = suggest(&lower, allowed) {
        msg.push_str(&format!(" (did you mean `{best}`?)"));
    }
    d.error(Kind::Invalid, path, Some(node.location), msg);
    None
}
