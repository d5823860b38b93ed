//! `dataplane csv`: the results of `--json` outputs as CSV, one row per result and one
//! column per field, so runs line up in a spreadsheet or a data frame. The columns are the
//! result's own fields (the ones `docs/schemas/` describes), flattened: `drops.ring_full`,
//! `queues.0.packets`, in name order within a result. Rows with different fields share one
//! header (the union, in the order first seen); a field a row lacks is empty.

use crate::status;
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

/// The columns every row starts with, taken from the envelope.
const ENVELOPE_COLUMNS: [&str; 4] = ["command", "config.file", "config.sha256", "commit"];

/// Reads envelopes from `files` (stdin when empty) and writes them as CSV to stdout.
pub(crate) fn write_results(files: &[PathBuf]) -> ExitCode {
    let mut rows = Vec::new();
    let read = if files.is_empty() {
        read_envelopes(std::io::stdin().lock(), "stdin", &mut rows)
    } else {
        files.iter().try_for_each(|f| {
            let file = std::fs::File::open(f).map_err(|e| format!("{}: {e}", f.display()))?;
            read_envelopes(
                std::io::BufReader::new(file),
                &f.display().to_string(),
                &mut rows,
            )
        })
    };
    if let Err(e) = read {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if rows.is_empty() {
        eprintln!("error: no `--json` result found (a line with schema_version and result)");
        return ExitCode::from(status::ERROR);
    }
    let mut out = Vec::new();
    if let Err(e) = to_csv(&rows, &mut out) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    crate::emit(&String::from_utf8_lossy(&out));
    ExitCode::SUCCESS
}

/// Appends a flattened row for every envelope line of `input`; other lines (human
/// reports, logs) are passed over.
fn read_envelopes(
    input: impl BufRead,
    name: &str,
    rows: &mut Vec<Vec<(String, String)>>,
) -> Result<(), String> {
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| format!("{name} line {}: {e}", n + 1))?;
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if v.get("schema_version").is_none() || v.get("result").is_none() {
            continue;
        }
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let mut row: Vec<(String, String)> = vec![
            ("command".into(), text(&v["command"])),
            ("config.file".into(), text(&v["config"]["file"])),
            ("config.sha256".into(), text(&v["config"]["sha256"])),
            ("commit".into(), text(&v["dataplane"]["commit"])),
        ];
        flatten("", &v["result"], &mut row);
        rows.push(row);
    }
    Ok(())
}

/// `value`'s leaves as `(path, text)`: objects by key, arrays by index, null as empty.
fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    let join = |key: &str| {
        if prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| flatten(&join(k), v, out)),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&join(&i.to_string()), v, out)),
        Value::Array(_) | Value::Null => out.push((prefix.to_owned(), String::new())),
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}

/// The rows under one header: the envelope's columns, then every field in the order
/// first seen.
fn to_csv(rows: &[Vec<(String, String)>], out: &mut Vec<u8>) -> Result<(), csv::Error> {
    let mut header: Vec<&str> = ENVELOPE_COLUMNS.to_vec();
    let mut seen: std::collections::HashSet<&str> = header.iter().copied().collect();
    for (key, _) in rows.iter().flatten() {
        if seen.insert(key) {
            header.push(key);
        }
    }
    let mut w = csv::Writer::from_writer(out);
    w.write_record(&header)?;
    for row in rows {
        let cells: std::collections::HashMap<&str, &str> =
            row.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        w.write_record(header.iter().map(|h| cells.get(h).copied().unwrap_or("")))?;
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_fields_become_dotted_columns_and_missing_ones_stay_empty() {
        let a = r#"{"schema_version":1,"command":"bench fwd","dataplane":{"commit":"abc"},"config":null,"result":{"mpps":1.5,"drops":{"ring_full":0},"queues":[{"packets":7}],"problems":[]}}"#;
        let b = r#"{"schema_version":1,"command":"bench fwd","dataplane":{"commit":"abc"},"config":{"file":"a,b.yaml","sha256":"00"},"result":{"mpps":2,"extra":"x"}}"#;
        let input = format!("human line\n{a}\n{{\"not\": \"an envelope\"}}\n{b}\n");
        let mut rows = Vec::new();
        read_envelopes(input.as_bytes(), "t", &mut rows).unwrap();
        let mut out = Vec::new();
        to_csv(&rows, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "command,config.file,config.sha256,commit,drops.ring_full,mpps,problems,queues.0.packets,extra\n\
             bench fwd,,,abc,0,1.5,,7,\n\
             bench fwd,\"a,b.yaml\",00,abc,,2,,,x\n"
        );
    }
}
