//! A YAML document as a tree whose every node knows its line and column.
//!
//! serde-saphyr parses the text (with strict booleans and duplicate-key rejection); we keep
//! the result as a located tree so that the typed reader can name the key path, line and
//! column of every problem, suggest spellings for unknown keys and reject unsupported keys
//! by name, which a plain `#[derive(Deserialize)]` cannot do.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// A 1-based position in the YAML text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

/// One YAML value with its position.
#[derive(Clone, Debug)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where the value starts.
    pub location: Location,
}

/// The value of a [`Node`].
#[derive(Clone, Debug)]
pub enum Value {
    /// `~`, `null` or an empty value.
    Null,
    /// `true` / `false` (strict: `yes`/`no` stay strings).
    Bool(bool),
    /// An integer in any YAML notation.
    Int(i128),
    /// A floating point number (also integers too large for 128 bits).
    Float(f64),
    /// A string, quoted or plain.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping in document order.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// A short name of the value's type for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }
}

impl Node {
    /// The text of a scalar key or value, for messages and key lookup.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Float(f) => Some(f.to_string()),
            Value::Null => Some(String::new()),
            _ => None,
        }
    }
}

/// A YAML syntax error with its position.
#[derive(Debug, Clone)]
pub struct SyntaxError {
    /// Where the parser stopped, when it knows.
    pub location: Option<Location>,
    /// The parser's message (first line only; the snippet is dropped).
    pub message: String,
}

/// Parses one YAML document into a located tree.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options::<Node>(text, options).map_err(|err| {
        let location = err.location().map(|l| Location {
            line: l.line(),
            column: l.column(),
        });
        let full = err.to_string();
        let first = full.lines().next().unwrap_or("invalid YAML").trim();
        // The crate prefixes "error: line L column C: "; we print the position ourselves.
        let message = first
            .trim_start_matches("error: ")
            .split_once(": ")
            .filter(|(head, _)| head.starts_with("line "))
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_else(|| first.to_string());
        SyntaxError { location, message }
    })
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned: Spanned<Value> = Spanned::deserialize(deserializer)?;
        Ok(Node {
            value: spanned.value,
            location: Location {
                line: spanned.referenced.line(),
                column: spanned.referenced.column(),
            },
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
        Ok(i128::try_from(v).map_or(Value::Float(v as f64), Value::Int))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}
