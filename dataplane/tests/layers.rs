//! The layering rules of `docs/architecture.md` ("Layers and rules"), checked on the
//! source: every `crate::` path in a module names a module of a lower layer (or the
//! module itself), so no import runs back up and there is no cycle; and `unsafe` appears
//! only in the modules allowed to hold it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level modules of the library by layer, lowest first. A module may import modules
/// of lower layers only. Keep this table and the one in `docs/architecture.md` equal.
const LAYERS: &[&[&str]] = &[
    // Leaves: they import nothing from the crate.
    &[
        "descriptor",
        "sysinfo",
        "affinity",
        "ring",
        "clock",
        "cycles",
        "packet",
        "files",
        "sockaddr",
        "protocol",
    ],
    // The configuration schema, parser and validation.
    &["config"],
    // The start-up plan: pure decisions from a configuration.
    &["plan"],
    // Machine resources and per-interface state.
    &["hugepages", "stats", "steering", "netdev"],
    // Regions and pools; threads that copy between raw addresses for a stage.
    &["memory", "copy_helpers"],
    // Packets and what is done to them between engine and application.
    &["burst"],
    &["stage", "reorder", "rdma_conn", "capture"],
    // Engines, the worker loop, the running plane.
    &["engine"],
    &["worker"],
    // The metrics endpoint: reads the counters the plane hands it.
    &["metrics"],
    &["plane"],
    // Checks of the machine against a configuration.
    &["doctor"],
];

/// Modules (top-level name, or a file path under `src/`) that may contain `unsafe`: FFI
/// layers and the small modules that own raw memory.
const UNSAFE_ALLOWED: &[&str] = &[
    // The tick counter's register reads (rdtsc, CNTVCT_EL0).
    "cycles",
    "memory",
    // Copies between raw addresses, on helper threads, for the stage.
    "copy_helpers",
    "hugepages",
    // A kernel interface's MTU through SIOCGIFMTU/SIOCSIFMTU.
    "netdev",
    // Socket addresses in the kernel's C layouts.
    "sockaddr",
    "burst",
    "stage",
    "reorder",
    "rdma_conn",
    "engine/dpdk",
    "engine/socket/sys.rs",
    // GPU capture: device-to-device copies out of a burst's GPU segments.
    "capture/gpu.rs",
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Source text without comments (line comments and doc comments), so prose that names a
/// module does not count as an import.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        // `dataplane_crate::x` or `$crate::` are not paths of this crate.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
            out.push(name);
        }
    }
    out
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn module_files() -> BTreeMap<String, Vec<(String, String)>> {
    let src = src_dir();
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut by_module: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        if rel == "lib.rs" {
            continue;
        }
        let module = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        let text = std::fs::read_to_string(&f).unwrap();
        by_module.entry(module).or_default().push((rel, text));
    }
    by_module
}

#[test]
fn every_module_has_a_layer_and_imports_only_lower_layers() {
    let mut wrong = Vec::new();
    for (module, files) in module_files() {
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "module `{module}` is in no layer; add it to LAYERS here and in docs/architecture.md"
            ));
            continue;
        };
        for (file, text) in files {
            for target in crate_paths(&code_of(&text)) {
                if target == module {
                    continue;
                }
                match layer_of(&target) {
                    Some(l) if l < own => {}
                    Some(l) => wrong.push(format!(
                        "{file}: `{module}` (layer {own}) imports `crate::{target}` (layer {l})"
                    )),
                    // Items of the crate root (re-exports such as `crate::Burst`) are names,
                    // not modules; their modules are checked where they are defined.
                    None => {}
                }
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

/// Modules (top-level name, or a file path under `src/`) that may name the configuration
/// type `Config`: the schema itself, the plan that turns it into decisions, and what sits
/// above the plan (the running plane, which plans its configuration; the benches and the
/// command line are crates of their own). Everything the plane runs (engines, memory, workers, stages)
/// is built from the `Plan` alone.
const CONFIG_ALLOWED: &[&str] = &[
    "config",
    "plan",
    "plane",
    // `doctor::check` takes a configuration and plans it, as the plane does; its checks
    // read the plan.
    "doctor",
    // `capture_bench_rx` rewrites a configuration for `dataplane capture` (a public
    // function: a rewrite, not a reader of the running plane).
    "capture/mod.rs",
];

/// True when `code` names the type `Config` (a whole word: `InterfaceConfig` does not).
fn names_config(code: &str) -> bool {
    let bytes = code.as_bytes();
    code.match_indices("Config").any(|(at, _)| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + "Config".len()).copied();
        let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        !word(before) && !word(after)
    })
}

#[test]
fn only_the_plan_and_what_is_above_it_see_the_configuration() {
    let mut wrong = Vec::new();
    for (module, files) in module_files() {
        for (file, text) in files {
            let allowed = CONFIG_ALLOWED
                .iter()
                .any(|a| *a == module || file.starts_with(a));
            if !allowed && names_config(&code_of(&text)) {
                wrong.push(file);
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "these name `Config`; build them from the `Plan` instead: {wrong:?}"
    );
    assert!(names_config("fn new(config: &Config)"));
    assert!(names_config("use crate::config::{Config, Direction};"));
    assert!(!names_config("iface: &InterfaceConfig, c: ConfigError"));
}

#[test]
fn unsafe_code_only_where_allowed() {
    let mut wrong = unsafe_outside(Path::new("../bench/src"), BENCH_UNSAFE_ALLOWED);
    wrong.extend(unsafe_outside(Path::new("../cli/src"), &[]));
    for (module, files) in module_files() {
        for (file, text) in files {
            let allowed = UNSAFE_ALLOWED
                .iter()
                .any(|a| *a == module || file.starts_with(a));
            let code = code_of(&text);
            let uses_unsafe = code
                .lines()
                .any(|l| l.contains("unsafe ") && !l.contains("unsafe_code"));
            if uses_unsafe && !allowed {
                wrong.push(file);
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "`unsafe` outside the modules allowed to hold it: {wrong:?}"
    );
}

/// Files of the bench crate that may contain `unsafe`: the GPU bench (raw copies into pinned
/// staging and uploads) and the raw bench's GPU-side frame writer and checker.
const BENCH_UNSAFE_ALLOWED: &[&str] = &["gpu/", "raw/"];

/// Files under `dir` (a crate's `src`, relative to this crate) that use `unsafe` without
/// being named by `allowed`.
fn unsafe_outside(dir: &Path, allowed: &[&str]) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files = Vec::new();
    sources(&dir, &mut files);
    assert!(!files.is_empty(), "no sources under {}", dir.display());
    files
        .into_iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(&dir).unwrap().to_string_lossy().into_owned();
            let code = code_of(&std::fs::read_to_string(&f).unwrap());
            let uses = code
                .lines()
                .any(|l| l.contains("unsafe ") && !l.contains("unsafe_code"));
            (uses && !allowed.iter().any(|a| rel.starts_with(a))).then_some(rel)
        })
        .collect()
}

/// The library carries no command line and no bench: those are the crates `dataplane-cli`
/// and `dataplane-bench`, above it.
#[test]
fn the_library_holds_neither_the_benches_nor_the_command_line() {
    let src = src_dir();
    for gone in ["bench", "bench.rs", "cli", "main.rs", "bin"] {
        assert!(
            !src.join(gone).exists(),
            "src/{gone} belongs in its own crate"
        );
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    for dep in [
        "clap",
        "signal-hook",
        "tracing-subscriber",
        "plotters",
        "[[bin]]",
    ] {
        assert!(
            !manifest.contains(dep),
            "the library's manifest names {dep}"
        );
    }
}

#[test]
fn the_checker_sees_imports_and_ignores_comments() {
    let code = code_of("use crate::memory::RegionSet; // crate::plane is only named\n");
    assert_eq!(crate_paths(&code), vec!["memory".to_owned()]);
    assert_eq!(
        crate_paths("x: $crate::a, crate::Burst"),
        Vec::<String>::new()
    );
}
