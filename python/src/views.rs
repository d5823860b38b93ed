//! Zero-copy views of a burst's bytes for Python: one packet's segment ([`Packet`]) or a
//! segment of every packet as one two-dimensional array ([`Frames`]). Both keep their
//! burst alive and unsendable while they exist.

use crate::{Burst, dlpack};
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// CUDA array interface (version 3) of uint8 GPU memory at `addr`: `strides` `None` for
/// contiguous bytes. Exported writable even for received bytes: PyTorch refuses a
/// read-only CUDA array ("the read only flag is not supported"), and the bytes are the
/// burst's alone while the view lives, so a write harms nothing. DLPack 1.0 carries the
/// read-only flag for consumers that honour it. The bytes are in place when the burst is
/// delivered: no stream to wait on.
fn cuda_array_interface<'py>(
    py: Python<'py>,
    addr: u64,
    shape: impl IntoPyObject<'py>,
    strides: impl IntoPyObject<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("shape", shape)?;
    d.set_item("typestr", "|u1")?;
    d.set_item("data", (addr, false))?;
    d.set_item("version", 3)?;
    d.set_item("strides", strides)?;
    d.set_item("stream", py.None())?;
    Ok(d)
}

/// The DLPack device of segment `segment` of packet `index`: the host, or its region's GPU.
fn segment_device(b: &dataplane::Burst, index: usize, segment: usize) -> dlpack::Device {
    let region = b
        .regions()
        .get(b.packets()[index].segments()[segment].region);
    if region.host_accessible() {
        dlpack::Device {
            device_type: dlpack::CPU,
            device_id: 0,
        }
    } else {
        dlpack::Device {
            device_type: dlpack::CUDA,
            device_id: region.affinity() as i32,
        }
    }
}

/// Segment `segment` of every packet as one two-dimensional uint8 array (packets x
/// bytes), without copying: `Burst.frames`. Only where the burst's layout allows it:
/// every segment of one region and one length, at evenly spaced addresses (as a run of
/// consecutive buffers is). DLPack for host and GPU memory, `__cuda_array_interface__`
/// for GPU memory. Keeps its burst alive and unsendable while it exists.
#[pyclass(module = "dataplane")]
pub(crate) struct Frames {
    burst: Py<Burst>,
    addr: u64,
    rows: usize,
    len: usize,
    /// Bytes from one packet's first byte to the next's (negative: falling addresses).
    stride: i64,
    device: dlpack::Device,
}

impl Frames {
    pub(crate) fn new(burst: Bound<'_, Burst>, segment: usize) -> PyResult<Self> {
        let (addr, rows, len, stride, device) = {
            let this = burst.borrow();
            let b = this.get()?;
            let n = b.len();
            if n == 0 {
                return Err(PyValueError::new_err("an empty burst has no frames"));
            }
            this.check_segment(0, segment)?;
            let seg0 = b.packets()[0].segments()[segment];
            let addr = b.segment_addr(0, segment);
            // Buffers may come in falling order (a LIFO pool): a negative stride, which
            // DLPack and the CUDA array interface both allow.
            let stride = if n > 1 {
                i128::from(b.segment_addr(1, segment)) - i128::from(addr)
            } else {
                i128::from(seg0.len)
            };
            for i in 0..n {
                let segs = b.packets()[i].segments();
                let even = segs.len() > segment
                    && segs[segment].region == seg0.region
                    && segs[segment].len == seg0.len
                    && i128::from(b.segment_addr(i, segment))
                        == i128::from(addr) + i as i128 * stride;
                if !even || (n > 1 && stride.unsigned_abs() < u128::from(seg0.len)) {
                    return Err(PyValueError::new_err(format!(
                        "packet {i} breaks the even layout a two-dimensional view needs (one \
                         region, one length, evenly spaced buffers); use packet(i) and \
                         lengths()"
                    )));
                }
            }
            (
                addr,
                n,
                seg0.len as usize,
                // Within one region: far inside i64.
                stride as i64,
                segment_device(b, 0, segment),
            )
        };
        burst.borrow_mut().views += 1;
        Ok(Self {
            burst: burst.unbind(),
            addr,
            rows,
            len,
            stride,
            device,
        })
    }
}

impl Drop for Frames {
    fn drop(&mut self) {
        Python::attach(|py| self.burst.borrow_mut(py).views -= 1);
    }
}

#[pymethods]
impl Frames {
    /// `(packets, bytes)`.
    #[getter]
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.len)
    }

    /// Bytes from one packet's first byte to the next's (negative when the buffers come in
    /// falling order).
    #[getter]
    fn stride(&self) -> i64 {
        self.stride
    }

    /// DLPack device: `(1, 0)` for host memory, `(2, gpu)` for GPU memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (self.device.device_type, self.device.device_id)
    }

    /// The frames as a two-dimensional uint8 DLPack tensor, in place, read-only (DLPack
    /// 1.0 flag) as received packets are.
    #[pyo3(signature = (stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        let export = {
            let this = slf.borrow();
            this.burst.borrow(slf.py()).get()?;
            dlpack::Export {
                addr: this.addr,
                device: this.device,
                shape: vec![this.rows as i64, this.len as i64],
                strides: vec![this.stride, 1],
                read_only: true,
            }
        };
        dlpack::export(slf.into_any(), export, max_version, dl_device, copy)
    }

    /// CUDA array interface (version 3) of frames in GPU memory (writable, as
    /// `Packet.__cuda_array_interface__` says why).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.device.device_type != dlpack::CUDA {
            return Err(PyAttributeError::new_err(
                "the frames are in host memory: use numpy.from_dlpack",
            ));
        }
        cuda_array_interface(py, self.addr, (self.rows, self.len), (self.stride, 1))
    }
}

/// A zero-copy view of one packet: `__cuda_array_interface__` for GPU memory, DLPack for
/// both. Its subclass `dataplane.Packet` (made in [`buffer`]) adds the buffer protocol for
/// host memory (`memoryview(p)`, `numpy.frombuffer(p, dtype)`); `Burst.packet` and
/// `Burst.buffer` make those. Keeps its burst alive and unsendable while it exists.
#[pyclass(module = "dataplane", name = "_Packet", subclass)]
pub(crate) struct Packet {
    pub(crate) burst: Py<Burst>,
    index: usize,
    /// Which segment: 0, or 1 for the payload of a header-data split packet.
    segment: usize,
    pub(crate) writable: bool,
}

impl Packet {
    /// A view of segment `segment` of packet `index` of `burst`: its bytes (read-only) or,
    /// `writable`, its whole buffer.
    pub(crate) fn new(
        burst: Bound<'_, Burst>,
        index: usize,
        segment: usize,
        writable: bool,
    ) -> PyResult<Self> {
        burst.borrow().check_segment(index, segment)?;
        burst.borrow_mut().views += 1;
        Ok(Self {
            burst: burst.unbind(),
            index,
            segment,
            writable,
        })
    }

    /// Address and length of the viewed bytes, and whether they are host memory.
    pub(crate) fn span(&self, b: &Burst) -> PyResult<(u64, usize, bool)> {
        let inner = b.get()?;
        let seg = inner.packets()[self.index].segments()[self.segment];
        let len = if self.writable {
            inner.capacity(self.index, self.segment)
        } else {
            seg.len as usize
        };
        Ok((
            inner.segment_addr(self.index, self.segment),
            len,
            inner.regions().get(seg.region).host_accessible(),
        ))
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        Python::attach(|py| self.burst.borrow_mut(py).views -= 1);
    }
}

#[pymethods]
impl Packet {
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.span(&self.burst.borrow(py))?.1)
    }

    /// The packet's bytes, copied.
    fn tobytes(&self, py: Python<'_>) -> PyResult<Vec<u8>> {
        let b = self.burst.borrow(py);
        let (_, _, host) = self.span(&b)?;
        if !host {
            return Err(PyBufferError::new_err(
                "the packet is in GPU memory: use __cuda_array_interface__",
            ));
        }
        let inner = b.get()?;
        Ok(inner
            .data(self.index, self.segment)
            .unwrap_or_default()
            .to_vec())
    }

    /// CUDA array interface (version 3) of a packet in GPU memory: one-dimensional bytes.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let b = self.burst.borrow(py);
        let (addr, len, host) = self.span(&b)?;
        if host {
            return Err(PyAttributeError::new_err(
                "the packet is in host memory: use the buffer protocol",
            ));
        }
        cuda_array_interface(py, addr, (len,), py.None())
    }

    /// DLPack device: `(1, 0)` for host memory, `(2, gpu)` for GPU memory.
    fn __dlpack_device__(&self, py: Python<'_>) -> PyResult<(i32, i32)> {
        let b = self.burst.borrow(py);
        let d = segment_device(b.get()?, self.index, self.segment);
        Ok((d.device_type, d.device_id))
    }

    /// The bytes as a one-dimensional uint8 DLPack tensor, in place (no copy): versioned
    /// and flagged read-only for a received packet when the consumer asks for DLPack 1.0
    /// (`max_version`). The bytes are in place when a burst is delivered, so no stream
    /// needs to be waited on.
    #[pyo3(signature = (stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        slf: Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        let py = slf.py();
        let export = {
            let this = slf.borrow();
            let b = this.burst.borrow(py);
            let (addr, len, _) = this.span(&b)?;
            dlpack::Export {
                addr,
                device: segment_device(b.get()?, this.index, this.segment),
                shape: vec![len as i64],
                strides: Vec::new(),
                read_only: !this.writable,
            }
        };
        dlpack::export(slf.into_any(), export, max_version, dl_device, copy)
    }
}
