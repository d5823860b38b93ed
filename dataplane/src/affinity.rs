//! CPU pinning for busy-poll threads.

#![forbid(unsafe_code)]

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// True when this process may run a thread on `core`.
pub fn core_is_usable(core: u32) -> bool {
    let core = core as usize;
    core < CpuSet::MAX_CPU && sched_getaffinity(None).is_ok_and(|set| set.is_set(core))
}

/// The cores this process may run on.
pub fn usable_cores() -> Vec<u32> {
    match sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU)
            .filter(|c| set.is_set(*c))
            .map(|c| c as u32)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Pins the calling thread to `core`.
pub fn pin_current_thread(core: u32) -> Result<(), PinError> {
    if !core_is_usable(core) {
        return Err(PinError {
            core,
            reason: "core not available to this process".into(),
        });
    }
    let mut set = CpuSet::new();
    set.set(core as usize);
    sched_setaffinity(None, &set).map_err(|e| PinError {
        core,
        reason: e.to_string(),
    })
}

/// A thread could not be pinned.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot pin thread to cpu_core {core}: {reason}")]
pub struct PinError {
    /// The requested core.
    pub core: u32,
    /// Why.
    pub reason: String,
}
