//! DLPack export (dlpack.h): the versioned capsule (`dltensor_versioned`, DLPack 1.0, with
//! the read-only flag) for consumers that ask for it with `max_version >= (1, 0)` (NumPy
//! 2.1 and later, recent PyTorch and CuPy), and the unversioned one (`dltensor`) for older
//! consumers, which has no way to say "read-only".

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::c_void;

/// `kDLCPU`.
pub const CPU: i32 = 1;
/// `kDLCUDA`.
pub const CUDA: i32 = 2;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Device {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (unversioned).
#[repr(C)]
struct ManagedTensor {
    dl_tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedTensor)>,
}

#[repr(C)]
struct Version {
    major: u32,
    minor: u32,
}

/// `DLManagedTensorVersioned`.
#[repr(C)]
struct ManagedTensorVersioned {
    version: Version,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: Tensor,
}

/// What a managed tensor owns: its shape and strides, and a reference to the Python view
/// it was made from (which keeps the burst alive and unsendable).
struct Context {
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Py<PyAny>,
}

/// A uint8 tensor to export: where, on which device, its shape and strides (in bytes,
/// which are elements of uint8; empty strides: compact), and whether consumers may write.
pub struct Export {
    pub addr: u64,
    pub device: Device,
    pub shape: Vec<i64>,
    pub strides: Vec<i64>,
    pub read_only: bool,
}

const UNVERSIONED: &std::ffi::CStr = c"dltensor";
const VERSIONED: &std::ffi::CStr = c"dltensor_versioned";

/// `__dlpack__(stream, max_version, dl_device, copy)` for `export`, owned by `owner`.
/// Never copies (`copy=True` is refused); a `dl_device` other than the data's is refused.
pub fn export<'py>(
    owner: Bound<'py, PyAny>,
    e: Export,
    max_version: Option<Bound<'py, PyAny>>,
    dl_device: Option<Bound<'py, PyAny>>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = owner.py();
    if copy == Some(true) {
        return Err(PyBufferError::new_err(
            "a packet view exports its bytes in place; copy it with tobytes()",
        ));
    }
    if let Some(want) = dl_device.filter(|d| !d.is_none()) {
        let (device_type, device_id): (i32, i32) = want.extract()?;
        if (Device {
            device_type,
            device_id,
        }) != e.device
        {
            return Err(PyBufferError::new_err(format!(
                "the bytes are on device ({}, {}), not ({device_type}, {device_id}); \
                 a view does not copy",
                e.device.device_type, e.device.device_id
            )));
        }
    }
    let versioned = match max_version.filter(|v| !v.is_none()) {
        Some(v) => v.extract::<(u32, u32)>()?.0 >= 1,
        None => false,
    };
    let ctx = Box::into_raw(Box::new(Context {
        shape: e.shape,
        strides: e.strides,
        _owner: owner.unbind(),
    }));
    // SAFETY: `ctx` was just allocated and lives until the deleter runs.
    let (shape, strides, ndim) = unsafe {
        let c = &mut *ctx;
        let strides = if c.strides.is_empty() {
            std::ptr::null_mut()
        } else {
            c.strides.as_mut_ptr()
        };
        (c.shape.as_mut_ptr(), strides, c.shape.len() as i32)
    };
    let dl_tensor = Tensor {
        data: e.addr as *mut c_void,
        device: e.device,
        ndim,
        dtype: DataType {
            code: 1, // kDLUInt
            bits: 8,
            lanes: 1,
        },
        shape,
        strides,
        byte_offset: 0,
    };
    let (pointer, name, destructor): (*mut c_void, _, Option<ffi::PyCapsule_Destructor>) =
        if versioned {
            let t = Box::into_raw(Box::new(ManagedTensorVersioned {
                version: Version { major: 1, minor: 0 },
                manager_ctx: ctx.cast(),
                deleter: Some(delete_versioned),
                flags: if e.read_only { FLAG_READ_ONLY } else { 0 },
                dl_tensor,
            }));
            (t.cast(), VERSIONED, Some(destroy_versioned_capsule))
        } else {
            let t = Box::into_raw(Box::new(ManagedTensor {
                dl_tensor,
                manager_ctx: ctx.cast(),
                deleter: Some(delete_unversioned),
            }));
            (t.cast(), UNVERSIONED, Some(destroy_unversioned_capsule))
        };
    // SAFETY: the capsule owns the tensor until a consumer renames it and calls the
    // deleter, or its destructor deletes it; the name is a static C string.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), destructor) };
    if capsule.is_null() {
        // SAFETY: not handed to anyone: free it here, as the matching deleter does.
        unsafe {
            if versioned {
                delete_versioned(pointer.cast());
            } else {
                delete_unversioned(pointer.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference the interpreter just returned.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
}

/// Drops a tensor's context (shape, strides, the reference to its view).
///
/// # Safety
/// `ctx` was made by [`export`] and is dropped once.
unsafe fn drop_context(ctx: *mut c_void) {
    Python::attach(|_| {
        // SAFETY: the caller's contract: `export`'s own allocation, dropped once.
        drop(unsafe { Box::from_raw(ctx.cast::<Context>()) });
    });
}

/// The consumer is done with an unversioned tensor (or nobody took it).
unsafe extern "C" fn delete_unversioned(t: *mut ManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: made by `export` with Box::into_raw, deleted once (the consumer, or the
    // capsule's destructor when nobody consumed it).
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: its context, dropped with it.
    unsafe { drop_context(t.manager_ctx) };
}

/// The consumer is done with a versioned tensor (or nobody took it).
unsafe extern "C" fn delete_versioned(t: *mut ManagedTensorVersioned) {
    if t.is_null() {
        return;
    }
    // SAFETY: as `delete_unversioned`.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: its context, dropped with it.
    unsafe { drop_context(t.manager_ctx) };
}

/// The capsule is being freed: if no consumer took the tensor (the capsule still has its
/// first name), delete it here.
unsafe extern "C" fn destroy_unversioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is the capsule being destroyed; the checks read only its name.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, UNVERSIONED.as_ptr()) == 1 {
            delete_unversioned(ffi::PyCapsule_GetPointer(capsule, UNVERSIONED.as_ptr()).cast());
        } else {
            ffi::PyErr_Clear();
        }
    }
}

/// As [`destroy_unversioned_capsule`], for the versioned capsule.
unsafe extern "C" fn destroy_versioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: as above.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            delete_versioned(ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr()).cast());
        } else {
            ffi::PyErr_Clear();
        }
    }
}
