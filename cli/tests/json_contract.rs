//! The JSON contract: every `--json` output is one envelope line (schema version, command,
//! build, configuration file and digest, result), valid against
//! `docs/schemas/envelope.schema.json`, and its result valid against the command's
//! `docs/schemas/<command>.result.schema.json`. The schemas are what a consumer codes
//! against; a field the code drops or renames fails here.

#[path = "../../bench/tests/common/mod.rs"]
mod common;

use serde_json::Value;
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::process::Command;

fn schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schemas")
}

fn schema(name: &str) -> Option<jsonschema::Validator> {
    let text = std::fs::read_to_string(schemas().join(name)).ok()?;
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    Some(jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn assert_valid(validator: &jsonschema::Validator, v: &Value, what: &str) {
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}");
}

/// Runs `dataplane ARGS`, checks its last stdout line against the envelope schema and the
/// command's result schema, and returns the envelope.
fn checked(args: &[&str], result_schema: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(args)
        .env_remove("DATAPLANE_LOG")
        .output()
        .unwrap();
    let envelope = common::json_envelope(&out.stdout);
    assert_valid(
        &schema("envelope.schema.json").unwrap(),
        &envelope,
        &format!("{args:?} envelope"),
    );
    let result = schema(result_schema).unwrap_or_else(|| panic!("no {result_schema}"));
    assert_valid(&result, &envelope["result"], &format!("{args:?} result"));
    envelope
}

fn config(name: &str) -> String {
    common::config_path(name).display().to_string()
}

#[test]
fn every_json_output_is_an_envelope_its_schemas_describe() {
    let file = config("sw_loopback.yaml");
    let raw = checked(
        &["bench", "raw", &file, "--seconds", "1", "--json", "-q"],
        "bench-raw.result.schema.json",
    );
    assert_eq!(raw["command"], "bench raw");
    assert_eq!(raw["config"]["file"], file.as_str());
    let digest: String = sha2::Sha256::digest(std::fs::read(&file).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(raw["config"]["sha256"], digest.as_str());
    assert_eq!(raw["result"]["lossless"], true);

    let plan = checked(
        &["validate", &file, "--plan", "--json"],
        "validate.result.schema.json",
    );
    assert_eq!(plan["command"], "validate");
    let budget = checked(
        &[
            "plan",
            &file,
            "--rate",
            "10Gb/s",
            "--packet-size",
            "1024",
            "--headroom",
            "2ms",
            "--json",
        ],
        "plan.result.schema.json",
    );
    assert_eq!(budget["command"], "plan");
    let diff = checked(
        &["diff", &file, &config("sw_loopback_4q.yaml"), "--json"],
        "diff.result.schema.json",
    );
    assert_eq!(diff["command"], "diff");
    assert!(
        diff["result"]["not_live"]
            .as_array()
            .is_some_and(|n| !n.is_empty()),
        "queues added: not live: {diff}"
    );
    assert_eq!(budget["result"]["load"]["bits_per_second"], 1e10);
    assert_eq!(
        budget["result"]["queues"][0]["beyond"]["then"],
        "sender_held_back"
    );

    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doctor/tuned-server");
    let gpu_config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doctor/connectx_gpu.yaml");
    let doctor = checked(
        &[
            "doctor",
            gpu_config.to_str().unwrap(),
            "--root",
            tree.to_str().unwrap(),
            "--json",
        ],
        "doctor.result.schema.json",
    );
    assert_eq!(doctor["command"], "doctor");
    let machine_wide = checked(&["doctor", "--json"], "doctor.result.schema.json");
    assert_eq!(machine_wide["config"], Value::Null);

    let ring = checked(
        &["bench", "ring", "--items", "20000", "--reps", "1", "--json"],
        "bench-ring.result.schema.json",
    );
    assert_eq!(
        (&ring["command"], &ring["config"]),
        (&"bench ring".into(), &Value::Null)
    );
}

/// The benches whose schemas are made from their report types (`docs/schemas/bench-*`):
/// forward, socket, SPEAD, dynamic flows and capture (which reports as `bench raw` does). The RDMA
/// and GPU benches need a device (their schemas are published the same way).
#[test]
fn every_bench_result_is_valid_against_its_published_schema() {
    let dir = tempfile::tempdir().unwrap();
    let loopback = config("sw_loopback.yaml");
    let fwd = checked(
        &[
            "bench",
            "fwd",
            &loopback,
            "--seconds",
            "1",
            "--tx-first",
            "2",
            "--json",
            "-q",
        ],
        "bench-fwd.result.schema.json",
    );
    assert_eq!(fwd["command"], "bench fwd");
    // The same result as CSV: one column per field, the values the JSON has.
    let json_file = dir.path().join("fwd.json");
    std::fs::write(&json_file, format!("{fwd}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dataplane"))
        .args(["csv", json_file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let cell = |name: &str| {
        let i = lines[0].split(',').position(|h| h == name).unwrap();
        lines[1].split(',').nth(i).unwrap().to_owned()
    };
    assert_eq!(cell("command"), "bench fwd");
    assert_eq!(
        cell("forwarded_packets"),
        fwd["result"]["forwarded_packets"].to_string()
    );
    assert_eq!(cell("drops.ring_full"), "0");
    assert_eq!(cell("queues.0.interface"), "loop0");

    let capture = dir.path().join("capture");
    let raw = checked(
        &[
            "capture",
            &loopback,
            capture.to_str().unwrap(),
            "--tx",
            "--seconds",
            "1",
            "--json",
            "-q",
        ],
        "bench-raw.result.schema.json",
    );
    assert_eq!(raw["command"], "capture");
    assert_eq!(raw["result"]["captures"].as_array().unwrap().len(), 1);

    // The shipped UDP bench on ports and cores of this test's own.
    let udp = std::fs::read_to_string(config("socket_udp_bench.yaml"))
        .unwrap()
        .replace("5701", "5771")
        .replace("5702", "5772")
        .replace("cpu_core: 9,", "cpu_core: 1,")
        .replace("cpu_core: 10,", "cpu_core: 0,")
        .replace("cpu_core: 2,", "cpu_core: 1,");
    let udp_file = dir.path().join("udp.yaml");
    std::fs::write(&udp_file, udp).unwrap();
    let socket = checked(
        &[
            "bench",
            "socket",
            udp_file.to_str().unwrap(),
            "--mode",
            "both",
            "--seconds",
            "1",
            "--json",
            "-q",
        ],
        "bench-socket.result.schema.json",
    );
    assert_eq!(socket["result"]["transport"], "udp");

    // SPEAD heaps over the software loopback into chunks of a host region, one rate, from
    // two senders (every heap whole, none too late).
    let spead = checked(
        &[
            "bench",
            "spead",
            "--transport",
            "loopback",
            "--senders",
            "2",
            "--chunks",
            "host",
            "--heap-bytes",
            "262144",
            "--packet-bytes",
            "8192",
            "--seconds",
            "0.3",
            "--max-gbps",
            "1",
            "--steps",
            "0",
            "--json",
            "-q",
        ],
        "bench-spead.result.schema.json",
    );
    let r = &spead["result"];
    assert_eq!(
        (&r["transport"], &r["chunks"], &r["senders"]),
        (&"loopback".into(), &"host".into(), &2.into())
    );
    let trial = &r["trials"][0];
    assert!(trial["heaps_sent"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(trial["heaps_complete"], trial["heaps_sent"], "{r}");
    assert_eq!(trial["heaps_incomplete"], 0, "{r}");
    assert_eq!(trial["packets_too_late"], 0, "{r}");

    if let Some(text) =
        common::mapped_reference_example("daqiri_example_dynamic_rx_flow.yaml", 1, true)
    {
        let file = dir.path().join("dynamic.yaml");
        std::fs::write(&file, text).unwrap();
        let dynamic = checked(
            &[
                "bench",
                "dynamic-flows",
                file.to_str().unwrap(),
                "--drop-ms",
                "200",
                "--active-ms",
                "300",
                "--json",
                "-q",
            ],
            "bench-dynamic-flows.result.schema.json",
        );
        assert_eq!(dynamic["command"], "bench dynamic-flows");
    }
}

/// The schemas are strict where a consumer relies on them: an envelope with a field
/// renamed, or a raw result missing its verdict, is refused.
#[test]
fn the_schemas_refuse_what_consumers_could_not_read() {
    let envelope = schema("envelope.schema.json").unwrap();
    let good = serde_json::json!({
        "schema_version": 1, "command": "bench ring",
        "dataplane": {"version": "0.1.0", "commit": "abc", "features": "none"},
        "config": null, "result": {}
    });
    assert!(envelope.is_valid(&good));
    let mut renamed = good.clone();
    renamed["version"] = renamed["schema_version"].take();
    renamed.as_object_mut().unwrap().remove("schema_version");
    assert!(!envelope.is_valid(&renamed));
    let mut newer = good.clone();
    newer["schema_version"] = 2.into();
    assert!(!envelope.is_valid(&newer), "version 2 needs new schemas");

    let raw = schema("bench-raw.result.schema.json").unwrap();
    assert!(!raw.is_valid(&serde_json::json!({"rx_packets": 1})));
    // A made schema is as strict: a forward result without its counts is refused.
    let fwd = schema("bench-fwd.result.schema.json").unwrap();
    let drops = serde_json::json!({"ring_full": "0"});
    assert!(!fwd.is_valid(&serde_json::json!({"drops": drops})));
}
