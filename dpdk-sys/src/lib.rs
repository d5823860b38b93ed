//! Raw bindings to the system DPDK (>= 22.11): EAL, ethdev, mbuf pools, rte_flow, external
//! memory, generated at build time by bindgen from the installed headers, plus `shim_*`
//! wrappers for the static inline functions (burst I/O, mbuf alloc/free/data, rte_errno,
//! lcore id). Everything here is `unsafe`; the `dataplane` crate's DPDK engine wraps it.

// Generated code: bindgen writes neither docs nor SAFETY comments.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    rustdoc::all,
    missing_docs,
    unnecessary_transmutes,
    unsafe_op_in_unsafe_fn
)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// The DPDK version (pkg-config's `libdpdk` version) these bindings were generated against:
/// 22.11 on Debian 12, 24.11 on Debian 13, whatever the build machine has.
pub const DPDK_VERSION: &str = env!("DATAPLANE_DPDK_VERSION");
