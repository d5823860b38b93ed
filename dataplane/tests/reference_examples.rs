//! Every reference example config loads: it validates, or fails only because of keys this
//! project does not implement yet or `<placeholder>` values left for the user to fill in.

mod common;

use dataplane::config::{self, DiagnosticKind};
use std::path::PathBuf;

/// Keys still rejected with "not supported yet". Remove entries as features land.
const STILL_UNSUPPORTED: &[&str] = &[];

fn examples_dir() -> Option<PathBuf> {
    common::reference_examples_dir()
}

fn normalise(path: &str) -> String {
    // interfaces[1].tx.queues[0].offloads -> tx.queues[].offloads
    let mut out = String::new();
    let mut skip = false;
    for c in path.chars() {
        match c {
            '[' => {
                out.push('[');
                skip = true;
            }
            ']' => {
                out.push(']');
                skip = false;
            }
            _ if skip => {}
            _ => out.push(c),
        }
    }
    out.trim_start_matches("interfaces[].").to_owned()
}

#[test]
fn every_reference_example_loads() {
    let Some(dir) = examples_dir() else {
        eprintln!("SKIP: reference examples not found (set DAQIRI_EXAMPLES to the folder)");
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "expected the reference's example set in {}",
        dir.display()
    );
    let mut valid = 0;
    for f in &files {
        // Cores of the reference's machines (up to 19) do not exist here: accept any core,
        // the core check has its own test.
        let text = std::fs::read_to_string(f).unwrap();
        match config::load_with(&text, &f.display().to_string(), &|_| true) {
            Ok(_) => valid += 1,
            Err(e) => {
                for d in e.errors() {
                    match d.kind {
                        DiagnosticKind::Placeholder => {}
                        DiagnosticKind::NotSupported => {
                            let key = normalise(&d.path);
                            let listed = STILL_UNSUPPORTED
                                .iter()
                                .any(|k| key == *k || key.ends_with(k));
                            assert!(
                                listed,
                                "{}: {key} rejected but not in STILL_UNSUPPORTED: {d}",
                                f.display()
                            );
                            assert!(d.message.starts_with("not supported yet: "), "{d}");
                        }
                        _ => panic!("{}: unexpected error: {d}", f.display()),
                    }
                }
            }
        }
    }
    eprintln!(
        "{valid} of {} reference examples validate as they are",
        files.len()
    );
    assert!(valid >= 10, "only {valid} examples validate");
}
