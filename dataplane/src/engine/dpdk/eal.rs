//! EAL: started once from the plan's arguments, cleaned up (with its runtime directory)
//! when the handle drops.

use super::error::{DpdkError, free_memory_text};
use crate::engine::EngineError;
use crate::hugepages;
use crate::plan::dpdk::DpdkPlan;
use dpdk_sys as sys;
use std::ffi::CString;

/// The EAL arguments to start with: the plan's, then what only this process knows: its
/// file prefix, the hugetlbfs mount our region files use (when the plan maps huge pages
/// and there is one), and whatever the environment variable `DATAPLANE_EAL_ARGS` adds
/// (checked by [`extra_eal_args`]).
pub fn eal_args(plan: &DpdkPlan, huge: bool) -> Result<Vec<String>, EngineError> {
    let mut a = plan.eal_args.clone();
    a.push(format!("--file-prefix={}", hugepages::file_prefix()));
    if huge && let Ok(Some(m)) = hugepages::mount_for(hugepages::default_page_size()) {
        a.push(format!("--huge-dir={}", m.path.display()));
    }
    if let Some(extra) = std::env::var_os(EXTRA_ARGS_ENV) {
        let extra = extra
            .to_str()
            .ok_or_else(|| bad_extra("it is not UTF-8".into()))?;
        a.extend(extra_eal_args(extra).map_err(bad_extra)?);
    }
    Ok(a)
}

/// The environment variable with extra EAL options (debugging, tuning: e.g.
/// `--log-level=pmd.net.tap:debug`). Trusted input, like the configuration: whoever sets
/// the environment runs the process. Still checked, so a slip cannot make EAL misbehave.
pub const EXTRA_ARGS_ENV: &str = "DATAPLANE_EAL_ARGS";

/// Options EAL must not get from the environment: the file prefix and process type are
/// what hugepage cleanup and the runtime directory rely on; `--help` and `--version`
/// make EAL print and exit the process; `--no-shconf` and `--in-memory` change where its
/// files go behind the plan's back.
const REFUSED_EAL_OPTIONS: &[&str] = &[
    "--file-prefix",
    "--proc-type",
    "--help",
    "-h",
    "--version",
    "-v",
    "--no-shconf",
    "--in-memory",
];

fn bad_extra(why: String) -> EngineError {
    EngineError::Interface {
        interface: EXTRA_ARGS_ENV.into(),
        reason: why,
    }
}

/// The words of `DATAPLANE_EAL_ARGS`: options (starting with `-`), each with its value
/// joined by `=` or in the next word (`-d DRIVER.so`), none of [`REFUSED_EAL_OPTIONS`],
/// at most 64 words of at most 4096 bytes.
pub fn extra_eal_args(text: &str) -> Result<Vec<String>, String> {
    let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
    if words.len() > 64 || words.iter().any(|w| w.len() > 4096) {
        return Err("more than 64 words, or a word over 4096 bytes".into());
    }
    let mut value_may_follow = false;
    for w in &words {
        let name = w.split('=').next().unwrap_or_default();
        if !w.starts_with('-') {
            if !value_may_follow {
                return Err(format!(
                    "`{w}` is neither an option nor the value of one (EAL would stop reading there)"
                ));
            }
            value_may_follow = false;
            continue;
        }
        value_may_follow = !w.contains('=');
        if REFUSED_EAL_OPTIONS.contains(&name) {
            return Err(format!(
                "`{name}` is not allowed there (the data plane sets it, or EAL would exit or move its files)"
            ));
        }
    }
    Ok(words)
}

/// A running EAL. Everything made with DPDK (ports, pools) must be gone before it drops.
pub struct Eal {
    _private: (),
}

/// EAL 22.11 leaves its runtime directory behind even after a clean exit.
fn remove_runtime_dir() {
    for base in hugepages::dpdk_runtime_bases() {
        let _ = std::fs::remove_dir_all(base.join(hugepages::file_prefix()));
    }
}

impl Eal {
    /// Starts EAL with `args` (the first is the program name).
    pub fn init(args: Vec<String>) -> Result<Self, EngineError> {
        // EAL pins the calling thread to the main lcore; a throwaway thread keeps that away
        // from the application's threads.
        std::thread::spawn(move || {
            let cargs: Vec<CString> = args
                .iter()
                .map(|s| CString::new(s.as_str()).expect("no NUL in EAL arguments"))
                .collect();
            let mut argv: Vec<*mut std::os::raw::c_char> =
                cargs.iter().map(|a| a.as_ptr() as *mut _).collect();
            // SAFETY: argv points at C strings that outlive the call.
            let ret = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
            if ret < 0 {
                remove_runtime_dir();
                return Err(EngineError::Eal {
                    source: DpdkError::last("DPDK EAL initialisation failed"),
                    args: args.join(" "),
                    free_memory: free_memory_text(),
                });
            }
            tracing::info!(
                "DPDK {} EAL started ({})",
                sys::DPDK_VERSION,
                args.join(" ")
            );
            Ok(Self { _private: () })
        })
        .join()
        .map_err(|_| EngineError::Panicked("DPDK EAL initialisation"))?
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        // SAFETY: the owner dropped every port and pool first (they are declared before
        // the EAL handle), so nothing uses DPDK any more.
        unsafe { sys::rte_eal_cleanup() };
        remove_runtime_dir();
    }
}

#[cfg(test)]
mod tests {
    use super::extra_eal_args;

    #[test]
    fn environment_eal_options_are_checked() {
        assert_eq!(
            extra_eal_args(" --log-level=pmd.net.tap:debug 0 -l ").unwrap_err(),
            "`0` is neither an option nor the value of one (EAL would stop reading there)"
        );
        assert!(
            extra_eal_args("-d a.so b.so").is_err(),
            "one value per option"
        );
        assert_eq!(
            extra_eal_args(
                "--log-level=pmd.net.tap:debug -d /x/librte_net_ring.so.23 --iova-mode=va"
            )
            .unwrap(),
            [
                "--log-level=pmd.net.tap:debug",
                "-d",
                "/x/librte_net_ring.so.23",
                "--iova-mode=va"
            ]
        );
        for bad in [
            "--help",
            "--file-prefix=x",
            "--proc-type=secondary",
            "-v",
            "--in-memory",
        ] {
            assert!(extra_eal_args(bad).is_err(), "{bad}");
        }
        assert!(extra_eal_args(&"-x ".repeat(65)).is_err());
    }
}
