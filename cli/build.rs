//! `dataplane --version` names the commit it was built from and the features built in.

use std::path::Path;
use std::process::Command;

fn main() {
    let git_dir = Path::new("../.git");
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown commit".to_owned());
    let features: Vec<&str> = ["cuda", "rdma", "dpdk", "otlp"]
        .into_iter()
        .filter(|f| std::env::var_os(format!("CARGO_FEATURE_{}", f.to_uppercase())).is_some())
        .collect();
    let features = if features.is_empty() {
        "none".to_owned()
    } else {
        features.join(", ")
    };
    println!("cargo:rustc-env=DATAPLANE_COMMIT={commit}");
    println!("cargo:rustc-env=DATAPLANE_FEATURES={features}");
    // A new commit moves HEAD or the branch it points at.
    println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD"))
        && let Some(reference) = head.strip_prefix("ref: ")
    {
        // The branch is a loose file, or a line of packed-refs until its next commit
        // writes the file: watch the folder the file is (or will be) in, and packed-refs.
        let loose = git_dir.join(reference.trim());
        if let Some(folder) = loose.parent().filter(|f| f.exists()) {
            println!("cargo:rerun-if-changed={}", folder.display());
        }
        let packed = git_dir.join("packed-refs");
        if packed.exists() {
            println!("cargo:rerun-if-changed={}", packed.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
