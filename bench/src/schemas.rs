//! The JSON Schema of each bench's `--json` result, made from its report type: the files
//! `docs/schemas/<name>.result.schema.json` are these, and a test fails when a report type
//! changes without them (`DATAPLANE_WRITE_SCHEMAS=1 cargo test -p dataplane-bench --test
//! schemas` writes them anew). The field descriptions are the types' rustdoc.

use serde_json::Value;

/// Where the published schemas say they live (their `$id`).
const ID_BASE: &str = "https://dataplane.invalid/schemas/";

/// The schema of `T` as a published result schema: its `$id` and title set.
fn result_schema<T: schemars::JsonSchema>(name: &str, command: &str) -> Value {
    let mut schema = schemars::schema_for!(T).to_value();
    schema["$id"] = format!("{ID_BASE}{name}.result.schema.json").into();
    schema["title"] = format!("dataplane {command}: result").into();
    schema
}

/// Every result schema made from a report type, as `(name, schema)`: the name is the
/// file's (`bench-fwd` for `docs/schemas/bench-fwd.result.schema.json`).
pub fn results() -> Vec<(&'static str, Value)> {
    let mut out = vec![
        (
            "bench-fwd",
            result_schema::<crate::fwd::FwdReport>("bench-fwd", "bench fwd"),
        ),
        (
            "bench-socket",
            result_schema::<crate::socket::SocketReport>("bench-socket", "bench socket"),
        ),
        (
            "bench-dynamic-flows",
            result_schema::<crate::dynamic::DynamicReport>(
                "bench-dynamic-flows",
                "bench dynamic-flows",
            ),
        ),
        (
            "bench-spead",
            result_schema::<crate::spead::SpeadReport>("bench-spead", "bench spead"),
        ),
        (
            "plan",
            result_schema::<dataplane::plan::budget::LossBudget>("plan", "plan"),
        ),
        (
            "diff",
            result_schema::<dataplane::plan::change::PlanChange>("diff", "diff"),
        ),
        // `capture` reports as `bench raw` does.
        (
            "bench-raw",
            result_schema::<crate::raw::RawReport>("bench-raw", "bench raw"),
        ),
    ];
    #[cfg(feature = "rdma")]
    out.push((
        "bench-rdma",
        result_schema::<crate::rdma::RdmaReport>("bench-rdma", "bench rdma"),
    ));
    #[cfg(feature = "cuda")]
    out.push((
        "bench-gpu",
        result_schema::<crate::gpu::GpuReport>("bench-gpu", "bench gpu"),
    ));
    out
}
