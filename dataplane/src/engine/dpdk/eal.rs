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
/// and there is one), and whatever the environment variable `DATAPLANE_EAL_ARGS` adds.
pub fn eal_args(plan: &DpdkPlan, huge: bool) -> Vec<String> {
    let mut a = plan.eal_args.clone();
    a.push(format!("--file-prefix={}", hugepages::file_prefix()));
    if huge && let Ok(Some(m)) = hugepages::mount_for(hugepages::default_page_size()) {
        a.push(format!("--huge-dir={}", m.path.display()));
    }
    // Extra EAL options for debugging or tuning (e.g. `--log-level=pmd.net.tap:debug`).
    if let Ok(extra) = std::env::var("DATAPLANE_EAL_ARGS") {
        a.extend(extra.split_whitespace().map(str::to_owned));
    }
    a
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
