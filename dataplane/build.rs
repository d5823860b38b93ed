//! Records the commit the binary was built from (`DATAPLANE_COMMIT`, "unknown" outside a
//! git checkout), for bench results and `--version`.

fn main() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|o| !o.stdout.is_empty());
    let suffix = if dirty { "-dirty" } else { "" };
    println!("cargo:rustc-env=DATAPLANE_COMMIT={commit}{suffix}");
    // Run again when the commit or the index changes. Outside a checkout (a copy of the
    // tree in a build root) there is nothing to watch: naming files that do not exist
    // would make cargo run this script, and rebuild the crate, on every build.
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| std::path::PathBuf::from(s.trim()));
    match git_dir {
        Some(dir) if dir.join("HEAD").exists() => {
            println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
            if dir.join("index").exists() {
                println!("cargo:rerun-if-changed={}", dir.join("index").display());
            }
        }
        _ => println!("cargo:rerun-if-changed=build.rs"),
    }
}
