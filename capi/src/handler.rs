//! Run to completion from C: callbacks the workers call on their own cores for the queues
//! configured `delivery: handler` (the library's `plane::Handler`).

use super::*;
use dataplane::plane::{Handler, HandlerTx};
use std::ffi::c_void;

/// A run-to-completion handler's callbacks. The plane calls `make` once per worker core
/// that serves `delivery: handler` queues (on the thread calling
/// [`dp_start_yaml_with_handler`]); the other callbacks run on that worker's thread, with
/// the context `make` returned. Any callback may be NULL.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DpHandler {
    /// Makes the context of the worker on `core` (may return NULL).
    pub make: Option<unsafe extern "C" fn(user: *mut c_void, core: u32) -> *mut c_void>,
    /// A burst received on one of the worker's handler RX queues (`dp_burst_port` and
    /// `dp_burst_queue` say which). The callback owns it: send or forward it on `tx`, or
    /// free it. NULL: bursts are freed.
    pub on_burst: Option<
        unsafe extern "C" fn(context: *mut c_void, burst: *mut DpBurst, tx: *mut DpHandlerTx),
    >,
    /// Once per worker pass, after the RX queues (generation); returns nonzero when it
    /// moved packets.
    pub on_pass: Option<unsafe extern "C" fn(context: *mut c_void, tx: *mut DpHandlerTx) -> i32>,
    /// The worker stopped: its context is no longer used.
    pub release: Option<unsafe extern "C" fn(context: *mut c_void)>,
    /// Passed to `make`.
    pub user: *mut c_void,
}

/// The handler TX queues of one worker, valid only during the callback it is passed to.
pub struct DpHandlerTx {
    tx: *mut c_void,
}

/// A C handler of one worker.
struct CHandler {
    callbacks: DpHandler,
    context: *mut c_void,
}

// SAFETY: the header's contract for `DpHandler`: its context is made for one worker and
// used only by that worker's thread (after `make` on the starting thread), so moving it to
// that thread is what the C side agreed to.
unsafe impl Send for CHandler {}

impl CHandler {
    /// Runs `f` with a `DpHandlerTx` for `tx`, valid for the call.
    fn with_tx<R>(tx: &mut HandlerTx<'_>, f: impl FnOnce(*mut DpHandlerTx) -> R) -> R {
        let mut handle = DpHandlerTx {
            tx: tx as *mut HandlerTx<'_> as *mut c_void,
        };
        f(&mut handle)
    }
}

impl Handler for CHandler {
    fn on_burst(&mut self, burst: Burst, tx: &mut HandlerTx<'_>) {
        let Some(f) = self.callbacks.on_burst else {
            return;
        };
        let b = DpBurst::boxed(Some(burst));
        // SAFETY: a callback the application gave, with its worker's context, a burst it
        // now owns and a TX handle valid for the call.
        Self::with_tx(tx, |t| unsafe { f(self.context, b, t) });
    }

    fn on_pass(&mut self, tx: &mut HandlerTx<'_>) -> bool {
        let Some(f) = self.callbacks.on_pass else {
            return false;
        };
        // SAFETY: as in `on_burst`.
        Self::with_tx(tx, |t| unsafe { f(self.context, t) }) != 0
    }
}

impl Drop for CHandler {
    fn drop(&mut self) {
        if let Some(f) = self.callbacks.release {
            // SAFETY: the application's callback, once, with the context it made.
            unsafe { f(self.context) }
        }
    }
}

/// As [`dp_start_yaml`], with a run-to-completion handler for the queues configured
/// `delivery: handler` (which then have no `dp_rx_queue`/`dp_tx_queue` handle).
///
/// # Safety
/// As [`dp_start_yaml`]; `handler` points to callbacks that keep the contract of
/// [`DpHandler`] until the plane is shut down.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_start_yaml_with_handler(
    yaml: *const c_char,
    source_name: *const c_char,
    handler: *const DpHandler,
    out: *mut *mut DpPlane,
) -> DpStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let Some(callbacks) = (unsafe { handler.as_ref() }).copied() else {
            return invalid("handler is NULL");
        };
        let starter = |config: &dataplane::config::Config| {
            DataPlane::start_with_handlers(config, |queues| {
                let context = match callbacks.make {
                    // SAFETY: the application's callback with its own pointer.
                    Some(make) => unsafe { make(callbacks.user, queues.core) },
                    None => std::ptr::null_mut(),
                };
                Ok(Box::new(CHandler { callbacks, context }))
            })
        };
        // SAFETY: the caller's promise, passed on.
        unsafe { start(yaml, source_name, out, starter) }
    })
}

/// The handler TX queues behind `tx`.
///
/// # Safety
/// `tx` is NULL or the handle passed to the running callback.
unsafe fn handler_tx<'a>(tx: *mut DpHandlerTx) -> Result<&'a mut HandlerTx<'a>, DpStatus> {
    // SAFETY: the caller's promise: `tx` is NULL or the live handle of the callback.
    let Some(t) = (unsafe { tx.as_mut() }) else {
        return Err(invalid("tx is NULL"));
    };
    // SAFETY: during the callback `t.tx` points to the worker's `HandlerTx`, borrowed
    // mutably for the callback's length and reached through nothing else meanwhile.
    Ok(unsafe { &mut *(t.tx as *mut HandlerTx<'a>) })
}

/// Allocates a burst of `count` packets from handler TX queue `queue` of interface `port`
/// (its index in the configuration), as `dp_tx_alloc`. Only inside a callback.
///
/// # Safety
/// `tx` is the handle passed to the running callback; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_handler_tx_alloc(
    tx: *mut DpHandlerTx,
    port: u16,
    queue: u16,
    count: usize,
    out: *mut *mut DpBurst,
) -> DpStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let tx = match unsafe { handler_tx(tx) } {
            Ok(t) => t,
            Err(s) => return s,
        };
        if out.is_null() {
            return invalid("out is NULL");
        }
        let Some(q) = tx.queue(port, queue) else {
            return invalid(&format!(
                "no handler TX queue {queue} of port {port} on this worker"
            ));
        };
        match q.alloc(count) {
            Ok(b) => {
                // SAFETY: checked non-NULL; the caller's promise.
                unsafe { *out = DpBurst::boxed(Some(b)) };
                DpStatus::Ok
            }
            Err(e) => tx_status(e),
        }
    })
}

/// Sends `burst` on handler TX queue `queue` of interface `port`, without waiting (the
/// worker sends it later in this pass). `forward` nonzero: a burst received on any queue
/// of the plane, sent as it is (`TxQueue::forward`). On `DP_STATUS_OK` the burst is gone;
/// otherwise (`DP_STATUS_TIMEOUT`: the queue's ring is full) it is still the caller's.
///
/// # Safety
/// `tx` is the handle passed to the running callback; `burst` a live burst.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_handler_tx_send(
    tx: *mut DpHandlerTx,
    port: u16,
    queue: u16,
    burst: *mut DpBurst,
    forward: i32,
) -> DpStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let tx = match unsafe { handler_tx(tx) } {
            Ok(t) => t,
            Err(s) => return s,
        };
        let Some(q) = tx.queue(port, queue) else {
            return invalid(&format!(
                "no handler TX queue {queue} of port {port} on this worker"
            ));
        };
        // SAFETY: the caller's promise, passed on.
        unsafe {
            hand_over(burst, |inner| {
                let sent = if forward != 0 {
                    q.forward(inner)
                } else {
                    q.send(inner)
                };
                sent.map_err(|e| (e.burst, tx_status(e.reason)))
            })
        }
    })
}

/// The interface index (`port`) of a burst: where it was received, or the queue it was
/// allocated for. 0 for NULL.
///
/// # Safety
/// `burst` is NULL or a live burst.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_burst_port(burst: *const DpBurst) -> u16 {
    // SAFETY: the caller's promise, passed on.
    unsafe { burst_field(burst, |b: &Burst| b.port().0) }
}

/// The queue id of a burst, as [`dp_burst_port`].
///
/// # Safety
/// `burst` is NULL or a live burst.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_burst_queue(burst: *const DpBurst) -> u16 {
    // SAFETY: the caller's promise, passed on.
    unsafe { burst_field(burst, |b: &Burst| b.queue().0) }
}

/// `field` of the burst behind `burst`, 0 for NULL or a burst in use elsewhere.
///
/// # Safety
/// `burst` is NULL or a live burst.
unsafe fn burst_field(burst: *const DpBurst, field: fn(&Burst) -> u16) -> u16 {
    let mut value = 0;
    // SAFETY: the caller's promise.
    unsafe {
        with_burst(burst, |b| {
            value = field(b);
            DpStatus::Ok
        })
    };
    value
}
