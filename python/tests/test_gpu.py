"""A `device` RX queue read from Python through DLPack and `__cuda_array_interface__`: a
small consumer (the CUDA driver and the DLPack capsule through ctypes, so nothing beyond the
standard library) copies each packet out of GPU memory and compares it with what was sent. Skipped, visibly, without a CUDA
driver. On the GPU machine: `python3 python/tests/test_gpu.py`."""

import ctypes
import ctypes.util
import pathlib

import pytest

import dataplane

# The shipped configuration file, shared with the Rust examples.
CONFIG = (pathlib.Path(__file__).resolve().parents[2] / "configs" / "loopback_gpu.yaml").read_text()


def cuda():
    """The CUDA driver with a current context on this thread, or None."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    if lib.cuInit(0) != 0:
        return None
    ctx = ctypes.c_void_p()
    if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) != 0 or lib.cuCtxSetCurrent(ctx) != 0:
        return None
    return lib


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]


def dlpack_take(obj):
    """Consumes `obj.__dlpack__()` as a DLPack consumer does: (device address, length,
    device), then renames the capsule and calls the tensor's deleter."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    capsule = obj.__dlpack__()
    t = ctypes.cast(api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(DLManagedTensor))
    tensor = t.contents.dl_tensor
    got = (tensor.data, tensor.shape[0], (tensor.device.device_type, tensor.device.device_id))
    assert (tensor.ndim, tensor.dtype.code, tensor.dtype.bits) == (1, 1, 8)
    api.PyCapsule_SetName(capsule, b"used_dltensor")
    t.contents.deleter(t)
    return got


def frame_bytes(k: int, length: int) -> bytes:
    return bytes((k * 13 + i) & 0xFF for i in range(length))


def run_check():
    lib = cuda()
    if lib is None:
        return None
    lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    frames = 256
    with dataplane.DataPlane(CONFIG, "gpu.yaml") as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        for start in range(0, frames, 64):
            burst = tx.alloc(64)
            for i in range(64):
                data = frame_bytes(start + i, 100 + (start + i) % 800)
                memoryview(burst.buffer(i))[: len(data)] = data
                burst.set_len(i, len(data))
            tx.send(burst, timeout=5.0)
        checked = 0
        while checked < frames:
            burst = rx.recv(timeout=5.0)
            assert burst is not None, f"{checked} of {frames} arrived"
            for i in range(len(burst)):
                p = burst.packet(i)
                # Every other packet through DLPack, the rest through the CUDA interface.
                if checked % 2 == 0:
                    address, length, device = dlpack_take(p)
                    assert device == (2, 0), device
                else:
                    cai = p.__cuda_array_interface__
                    address, length = cai["data"][0], cai["shape"][0]
                host = ctypes.create_string_buffer(length)
                assert lib.cuMemcpyDtoH_v2(host, address, length) == 0
                assert host.raw == frame_bytes(checked, 100 + checked % 800), f"frame {checked}"
                try:
                    memoryview(p)
                    raise AssertionError("GPU memory must have no host view")
                except BufferError:
                    pass
                checked += 1
    return checked


def run_frameworks():
    """Every path PyTorch and CuPy users take to a GPU packet (`torch.from_dlpack`,
    `torch.as_tensor(p, device="cuda")`, `cupy.from_dlpack`, `cupy.asarray`) and to a
    burst's frames as one 2-D array, each compared byte for byte with what was sent.
    Returns {path: frames read}, or None without a CUDA driver, PyTorch or CuPy."""
    if cuda() is None:
        return None
    readers = {}
    try:
        import torch

        readers["torch.from_dlpack"] = lambda v: torch.from_dlpack(v).cpu().numpy().tobytes()
        readers["torch.as_tensor"] = lambda v: torch.as_tensor(v, device="cuda").cpu().numpy().tobytes()
    except ImportError:
        pass
    try:
        import cupy

        readers["cupy.from_dlpack"] = lambda v: cupy.from_dlpack(v).get().tobytes()
        readers["cupy.asarray"] = lambda v: cupy.asarray(v).get().tobytes()
    except ImportError:
        pass
    if not readers:
        return None
    read = {name: 0 for name in readers}
    read["frames 2-D"] = 0
    length = 256
    with dataplane.DataPlane(CONFIG, "gpu.yaml") as plane:
        tx, rx = plane.tx_queue("loop0", 0), plane.rx_queue("loop0", 0)
        burst = tx.alloc(64)
        for i in range(64):
            memoryview(burst.buffer(i))[:length] = frame_bytes(i, length)
            burst.set_len(i, length)
        tx.send(burst, timeout=5.0)
        seen = 0
        while seen < 64:
            burst = rx.recv(timeout=5.0)
            assert burst is not None, f"{seen} of 64 arrived"
            for i in range(len(burst)):
                for name, reader in readers.items():
                    got = reader(burst.packet(i))
                    assert got == frame_bytes(seen + i, length), f"{name}, frame {seen + i}"
                    read[name] += 1
            try:
                view = burst.frames()
            except ValueError:
                view = None  # buffers not evenly spaced: per packet only
            if view is not None:
                for name, reader in readers.items():
                    rows = reader(view)
                    want = b"".join(frame_bytes(seen + i, length) for i in range(len(burst)))
                    assert rows == want, f"{name} of frames()"
                read["frames 2-D"] += len(burst)
            seen += len(burst)
    return read


def test_torch_and_cupy_read_every_gpu_packet():
    read = run_frameworks()
    if read is None:
        pytest.skip("needs a CUDA driver and PyTorch or CuPy: runs on the GPU machine")
    assert all(n == 64 for name, n in read.items() if name != "frames 2-D"), read


def test_gpu_region_through_cuda_array_interface():
    checked = run_check()
    if checked is None:
        pytest.skip("no CUDA driver found: the GPU check runs on the GPU machine")
    assert checked == 256


if __name__ == "__main__":
    n = run_check()
    print("SKIP: no CUDA driver" if n is None else f"GPU check: {n} frames read from GPU memory (half through DLPack, half through __cuda_array_interface__), every byte equal")
    print(f"frameworks: {run_frameworks()} (frames read, every byte equal; None: no CUDA, PyTorch or CuPy)")
