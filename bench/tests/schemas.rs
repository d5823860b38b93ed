//! The published result schemas (`docs/schemas/`) are the report types' own: a field added,
//! renamed or removed in a report fails here until the files are written anew
//! (`DATAPLANE_WRITE_SCHEMAS=1`), so the contract a consumer codes against changes only
//! on purpose (and with `schema_version` when a field goes away).

use std::path::Path;

#[test]
fn the_published_result_schemas_are_the_report_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schemas");
    let write = std::env::var_os("DATAPLANE_WRITE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in dataplane_bench::schemas::results() {
        let path = dir.join(format!("{name}.result.schema.json"));
        let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
        if write {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the report types: run DATAPLANE_WRITE_SCHEMAS=1 cargo test -p \
         dataplane-bench --test schemas, and raise SCHEMA_VERSION if a field went away"
    );
}
