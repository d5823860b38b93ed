//! RX flow rules added and removed while traffic flows, written in the configuration's
//! own schema (one `rx.flows` entry as YAML text), so C code needs no struct per match
//! field and gains each new field the configuration gains.

use crate::{DpPlane, DpStatus, guard, handle, invalid, set_error, text};
use dataplane::steering::FlowHandle;
use std::ffi::c_char;

/// Adds the RX flow rule `flow_yaml` (one entry of an interface's `rx.flows`, e.g.
/// `{name: f, id: 7, action: {type: queue, id: 0}, match: {udp_dst: 7000}}`) to
/// `interface` at the lowest priority, and sets `*flow_id` to its id (an `id` of 0 gets a
/// free one). Returns once every worker steers with it; its packets carry that flow id
/// (`dp_burst_packet_info`). A rule that does not parse is `DP_STATUS_INVALID_ARGUMENT`
/// with the key, line and column in `dp_last_error`.
///
/// # Safety
/// `plane` is a live plane; `interface` and `flow_yaml` NUL-terminated strings;
/// `flow_id` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_add_flow(
    plane: *mut DpPlane,
    interface: *const c_char,
    flow_yaml: *const c_char,
    flow_id: *mut u32,
) -> DpStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let args = unsafe {
            (
                handle(plane, "plane"),
                text(interface, "interface"),
                text(flow_yaml, "flow_yaml"),
            )
        };
        let (Ok(p), Ok(interface), Ok(yaml)) = args else {
            return DpStatus::InvalidArgument;
        };
        if flow_id.is_null() {
            return invalid("flow_id is NULL");
        }
        let flow = match dataplane::config::flow_from_str(yaml, "flow_yaml") {
            Ok(flow) => flow,
            Err(e) => return invalid(&e.to_string()),
        };
        p.with(|p| match p.add_flow(interface, flow) {
            Ok(h) => {
                // SAFETY: checked non-NULL; the caller's promise that it is writable.
                unsafe { *flow_id = h.flow_id };
                DpStatus::Ok
            }
            Err(e) => {
                set_error(e.to_string());
                DpStatus::Error
            }
        })
    })
}

/// Removes the flow rule `flow_id` that [`dp_add_flow`] added to `interface`. When it
/// returns, every burst received afterwards was steered without it.
///
/// # Safety
/// `plane` is a live plane; `interface` a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_remove_flow(
    plane: *mut DpPlane,
    interface: *const c_char,
    flow_id: u32,
) -> DpStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let args = unsafe { (handle(plane, "plane"), text(interface, "interface")) };
        let (Ok(p), Ok(interface)) = args else {
            return DpStatus::InvalidArgument;
        };
        p.with(|p| {
            let Some(port) = p.config().interface_index(interface) else {
                return invalid(&format!("no interface `{interface}`"));
            };
            let h = FlowHandle {
                port: port as u16,
                flow_id,
            };
            match p.remove_flow(h) {
                Ok(()) => DpStatus::Ok,
                Err(e) => {
                    set_error(e.to_string());
                    DpStatus::Error
                }
            }
        })
    })
}
