//! The buffer protocol for packet views on every CPython from 3.9.
//!
//! PyO3 implements `__getbuffer__` for abi3 modules only from 3.11, when `Py_buffer` joined
//! the limited API. The two type slots themselves (`Py_bf_getbuffer`, `Py_bf_releasebuffer`)
//! have been accepted by `PyType_FromSpec` since 3.5, and `Py_buffer`'s layout has not
//! changed since 3.3. So the user-visible `dataplane.Packet` is made here at import: a
//! subclass of the PyO3 class `_Packet` with exactly those two slots, and one abi3 wheel
//! serves CPython 3.9 and later.

use crate::Burst;
use crate::views::Packet;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{PyTypeInfo, ffi, intern};
use std::ffi::{c_char, c_int, c_uint, c_void};

/// CPython's `Py_buffer` (Include/pybuffer.h; one layout on every CPython since 3.3).
#[repr(C)]
pub struct PyBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

/// `PyBUF_WRITABLE`: the consumer asks for a writable buffer.
const PYBUF_WRITABLE: c_int = 0x0001;

unsafe extern "C" {
    /// Fills a one-dimensional byte view and takes a reference to its exporter. Part of
    /// every CPython's exported symbols; the limited API lists it from 3.11.
    fn PyBuffer_FillInfo(
        view: *mut PyBuffer,
        exporter: *mut ffi::PyObject,
        buf: *mut c_void,
        len: ffi::Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
}

/// `burst.packet(i)`, `burst.segment(i, s)` / `burst.buffer(i)`: a `_Packet` made by PyO3, then given the class
/// `dataplane.Packet` (same layout: CPython checks it on `__class__` assignment). Cheaper
/// than calling the subclass, which parses arguments through `tp_new` for every packet.
pub fn new_packet(
    burst: Bound<'_, Burst>,
    index: usize,
    segment: usize,
    writable: bool,
) -> PyResult<Bound<'_, PyAny>> {
    let py = burst.py();
    let packet = Bound::new(py, Packet::new(burst, index, segment, writable)?)?;
    packet.setattr(intern!(py, "__class__"), packet_type(py)?)?;
    Ok(packet.into_any())
}

static PACKET_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `dataplane.Packet`, made on first use: `_Packet` with the buffer protocol.
pub fn packet_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    PACKET_TYPE
        .get_or_try_init(py, || make_packet_type(py))
        .map(|t| t.bind(py))
}

fn make_packet_type(py: Python<'_>) -> PyResult<Py<PyType>> {
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_bf_getbuffer,
            pfunc: get_buffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_bf_releasebuffer,
            pfunc: release_buffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_doc,
            pfunc: DOC.as_ptr() as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: std::ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        // Static: CPython before 3.12 keeps this pointer as the type's tp_name.
        name: c"dataplane.Packet".as_ptr(),
        // Zero: the size and layout of `_Packet` are inherited.
        basicsize: 0,
        itemsize: 0,
        flags: ffi::Py_TPFLAGS_DEFAULT as c_uint,
        slots: slots.as_mut_ptr(),
    };
    let bases = PyTuple::new(py, [Packet::type_object(py)])?;
    // SAFETY: `spec` and `slots` are valid for the call (CPython copies what it keeps, but
    // the name, which is static); `bases` is a live tuple of one PyO3 heap type that allows
    // subclasses. The result is a new reference or null with an exception set.
    let t = unsafe { ffi::PyType_FromSpecWithBases(&mut spec, bases.as_ptr()) };
    if t.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new, non-null reference to a type object.
    Ok(unsafe { Bound::from_owned_ptr(py, t) }
        .cast_into::<PyType>()?
        .unbind())
}

const DOC: &std::ffi::CStr =
    c"A zero-copy view of one packet: the buffer protocol for host memory \
(memoryview(p), numpy.frombuffer(p, dtype)), __cuda_array_interface__ for GPU memory, and \
DLPack for both. Keeps its burst alive and unsendable while it exists.";

/// `bf_getbuffer`: a one-dimensional byte view of the packet's host memory.
unsafe extern "C" fn get_buffer(
    exporter: *mut ffi::PyObject,
    view: *mut PyBuffer,
    flags: c_int,
) -> c_int {
    Python::attach(|py| {
        // SAFETY: CPython calls this slot with a live instance of `dataplane.Packet`.
        let exporter = unsafe { Bound::from_borrowed_ptr(py, exporter) };
        // SAFETY: `view` is CPython's to fill, valid for this call.
        match unsafe { fill(&exporter, view, flags) } {
            Ok(()) => 0,
            Err(e) => {
                e.restore(py);
                -1
            }
        }
    })
}

/// # Safety
/// `view` points at a `Py_buffer` the interpreter asks to have filled.
unsafe fn fill(exporter: &Bound<'_, PyAny>, view: *mut PyBuffer, flags: c_int) -> PyResult<()> {
    let py = exporter.py();
    let packet = exporter.cast::<Packet>()?;
    let this = packet.try_borrow()?;
    let (addr, len, host) = this.span(&this.burst.borrow(py))?;
    if !host {
        return Err(PyBufferError::new_err(
            "the packet is in GPU memory: use __cuda_array_interface__",
        ));
    }
    if flags & PYBUF_WRITABLE != 0 && !this.writable {
        return Err(PyBufferError::new_err(
            "a received packet is read-only; TX buffers (burst.buffer(i)) are writable",
        ));
    }
    // SAFETY: `addr` is `len` bytes of host memory owned by the burst, which this view keeps
    // alive (the fill takes a reference to the exporter, which holds the burst) and which
    // cannot be sent while its export count is above zero.
    let r = unsafe {
        PyBuffer_FillInfo(
            view,
            exporter.as_ptr(),
            addr as *mut c_void,
            len as ffi::Py_ssize_t,
            c_int::from(!this.writable),
            flags,
        )
    };
    if r != 0 {
        return Err(PyErr::fetch(py));
    }
    this.burst.borrow_mut(py).exports += 1;
    Ok(())
}

/// `bf_releasebuffer`: one export fewer.
unsafe extern "C" fn release_buffer(exporter: *mut ffi::PyObject, _view: *mut PyBuffer) {
    Python::attach(|py| {
        // SAFETY: CPython calls this slot with the live exporter of a view it filled.
        let exporter = unsafe { Bound::from_borrowed_ptr(py, exporter) };
        if let Ok(packet) = exporter.cast::<Packet>()
            && let Ok(this) = packet.try_borrow()
            && let Ok(mut burst) = this.burst.try_borrow_mut(py)
        {
            burst.exports -= 1;
        }
        // Otherwise the count stays up: the burst stays unsendable, never the reverse.
    })
}
