//! Python bindings (`import dataplane`): start a plane from YAML, take queues, receive and
//! send bursts, read and write packets without copying, steer flows, read counters.
//!
//! Packet bytes in host memory are exported through the buffer protocol (`memoryview`,
//! `numpy.frombuffer`; writable for TX buffers); packets in GPU memory through
//! `__cuda_array_interface__` (CuPy, Numba, PyTorch); both through DLPack (`__dlpack__`,
//! `numpy.from_dlpack`, `torch.from_dlpack`, `cupy.from_dlpack`). A burst refuses to be sent while any
//! such view of it is alive, so no view ever points at memory the plane reuses. Waits
//! release the GIL.

use dataplane::config::{FlowConfig, FlowMatch, PortRange};
use pyo3::create_exception;
use pyo3::exceptions::{PyBufferError, PyException, PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;
use std::time::Duration;

mod buffer;
mod dlpack;

create_exception!(dataplane, Error, PyException, "A data plane error.");
create_exception!(
    dataplane,
    Stopped,
    Error,
    "The data plane was shut down; nothing more comes or goes on this queue."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An interface's name, RX queue ids and TX queue ids.
type InterfaceQueues = (String, Vec<u16>, Vec<u16>);

/// A running data plane; a context manager that shuts it down on exit.
#[pyclass(module = "dataplane")]
struct DataPlane {
    plane: Mutex<Option<dataplane::DataPlane>>,
}

impl DataPlane {
    fn with<T>(&self, f: impl FnOnce(&mut dataplane::DataPlane) -> PyResult<T>) -> PyResult<T> {
        match lock(&self.plane).as_mut() {
            Some(p) => f(p),
            None => Err(Stopped::new_err("the data plane was shut down")),
        }
    }
}

impl DataPlane {
    /// Starts the plane of a loaded configuration, without the GIL.
    fn start(py: Python<'_>, config: dataplane::config::Config) -> PyResult<Self> {
        let plane = py
            .detach(|| dataplane::DataPlane::start(&config))
            .map_err(err)?;
        Ok(Self {
            plane: Mutex::new(Some(plane)),
        })
    }
}

#[pymethods]
impl DataPlane {
    /// Starts a plane from configuration text (the reference's YAML schema); `name` names
    /// it in error messages.
    #[new]
    #[pyo3(signature = (yaml, name = "<string>"))]
    fn new(py: Python<'_>, yaml: &str, name: &str) -> PyResult<Self> {
        let config = dataplane::config::load_str(yaml, name).map_err(err)?.config;
        Self::start(py, config)
    }

    /// Starts a plane from a configuration file.
    #[staticmethod]
    fn from_file(py: Python<'_>, path: &str) -> PyResult<Self> {
        // The library's reader: regular files only, size-limited (as the CLI reads them).
        let config = dataplane::config::load_file(std::path::Path::new(path))
            .map_err(err)?
            .config;
        Self::start(py, config)
    }

    /// `(interface, [RX queue ids], [TX queue ids])` for every interface.
    fn interfaces(&self) -> PyResult<Vec<InterfaceQueues>> {
        self.with(|p| {
            Ok(p.config()
                .interfaces
                .iter()
                .map(|i| {
                    let ids = |qs: Option<&Vec<dataplane::config::QueueConfig>>| {
                        qs.map(|q| q.iter().map(|q| q.id).collect())
                            .unwrap_or_default()
                    };
                    (
                        i.name.clone(),
                        ids(i.rx.as_ref().map(|r| &r.queues)),
                        ids(i.tx.as_ref().map(|t| &t.queues)),
                    )
                })
                .collect())
        })
    }

    /// Takes RX queue `queue` of `interface` (each queue once).
    fn rx_queue(&self, interface: &str, queue: u16) -> PyResult<RxQueue> {
        self.with(|p| {
            p.take_rx_queue(interface, queue)
                .map(|q| RxQueue { q: Mutex::new(q) })
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "`{interface}` has no RX queue {queue}, or it was taken"
                    ))
                })
        })
    }

    /// Takes TX queue `queue` of `interface` (each queue once).
    fn tx_queue(&self, interface: &str, queue: u16) -> PyResult<TxQueue> {
        self.with(|p| {
            p.take_tx_queue(interface, queue)
                .map(|q| TxQueue { q: Mutex::new(q) })
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "`{interface}` has no TX queue {queue}, or it was taken"
                    ))
                })
        })
    }

    /// Adds a flow rule at run time (lowest priority): UDP source/destination port and
    /// target queue; returns a handle for `remove_flow`.
    #[pyo3(signature = (interface, queue, flow_id = 0, udp_src = None, udp_dst = None))]
    fn add_flow(
        &self,
        interface: &str,
        queue: u16,
        flow_id: u32,
        udp_src: Option<u16>,
        udp_dst: Option<u16>,
    ) -> PyResult<FlowHandle> {
        let port = |p: Option<u16>| p.map(|p| PortRange { first: p, last: p });
        let flow = FlowConfig {
            name: format!("python_{flow_id}"),
            id: flow_id,
            queue_ids: vec![queue],
            matches: FlowMatch {
                udp_src: port(udp_src),
                udp_dst: port(udp_dst),
                ..Default::default()
            },
            transforms: Vec::new(),
            location: Default::default(),
        };
        self.with(|p| {
            p.add_flow(interface, flow)
                .map(|h| FlowHandle { h: Some(h) })
                .map_err(err)
        })
    }

    /// Removes a flow added with `add_flow`.
    fn remove_flow(&self, handle: &mut FlowHandle) -> PyResult<()> {
        let h = handle
            .h
            .take()
            .ok_or_else(|| PyValueError::new_err("this flow was removed already"))?;
        self.with(|p| p.remove_flow(h).map_err(err))
    }

    /// Counters: totals (`rx_packets`, `rx_bytes`, `tx_packets`, `tx_bytes`, `drops` by
    /// reason) and `queues`, one dict per queue.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(|p| Ok(p.snapshot()))?;
        let d = PyDict::new(py);
        let (rx_packets, rx_bytes) = s.total(dataplane::config::Direction::Rx);
        let (tx_packets, tx_bytes) = s.total(dataplane::config::Direction::Tx);
        d.set_item("rx_packets", rx_packets)?;
        d.set_item("rx_bytes", rx_bytes)?;
        d.set_item("tx_packets", tx_packets)?;
        d.set_item("tx_bytes", tx_bytes)?;
        let drops = s.drops();
        let dd = PyDict::new(py);
        dd.set_item("ring_full", drops.ring_full)?;
        dd.set_item("pool_empty", drops.pool_empty)?;
        dd.set_item("no_flow", drops.no_flow)?;
        dd.set_item("malformed", drops.malformed)?;
        dd.set_item("engine_missed", drops.engine_missed)?;
        dd.set_item("gpu_copy", drops.gpu_copy)?;
        d.set_item("drops", dd)?;
        let mut queues = Vec::new();
        for q in &s.queues {
            let qd = PyDict::new(py);
            qd.set_item("interface", &q.interface)?;
            qd.set_item("direction", q.direction)?;
            qd.set_item("queue", q.queue)?;
            qd.set_item("packets", q.packets)?;
            qd.set_item("bytes", q.bytes)?;
            queues.push(qd);
        }
        d.set_item("queues", queues)?;
        Ok(d)
    }

    /// Stops the workers. Queues stay usable and raise `Stopped`; calling it again does
    /// nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let plane = lock(&self.plane).take();
        match plane {
            None => Ok(()),
            Some(p) => py.detach(|| p.shutdown()).map_err(|failed| {
                err(failed
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join("; "))
            }),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.shutdown(py)?;
        Ok(false)
    }
}

/// A flow added at run time.
#[pyclass(module = "dataplane")]
struct FlowHandle {
    h: Option<dataplane::steering::FlowHandle>,
}

/// The application's end of an RX queue.
#[pyclass(module = "dataplane")]
struct RxQueue {
    q: Mutex<dataplane::RxQueue>,
}

#[pymethods]
impl RxQueue {
    /// The next burst if one is ready, else None (never waits for traffic; the GIL is
    /// released while it waits for another thread's call on this queue).
    fn poll(&self, py: Python<'_>) -> PyResult<Option<Burst>> {
        let q = &self.q;
        match py.detach(|| lock(q).poll()) {
            Ok(b) => Ok(b.map(Burst::new)),
            Err(e) => Err(err(e)),
        }
    }

    /// The next burst, waiting up to `timeout` seconds with the GIL released; None when
    /// none came. Raises `Stopped` once the plane is shut down and drained.
    #[pyo3(signature = (timeout = 1.0))]
    fn recv(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<Burst>> {
        let wait = wait_of(timeout)?;
        let q = &self.q;
        match py.detach(|| lock(q).recv(wait)) {
            Ok(b) => Ok(b.map(Burst::new)),
            Err(dataplane::RecvError::Stopped) => {
                Err(Stopped::new_err("the data plane was shut down"))
            }
            Err(e) => Err(err(e)),
        }
    }
}

/// The application's end of a TX queue.
#[pyclass(module = "dataplane")]
struct TxQueue {
    q: Mutex<dataplane::TxQueue>,
}

/// A timeout in seconds: negative is 0, `math.inf` waits as long as it takes, NaN is an
/// error.
fn wait_of(timeout: f64) -> PyResult<Duration> {
    if timeout.is_nan() {
        return Err(PyValueError::new_err("timeout is NaN"));
    }
    Ok(Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX))
}

fn tx_error(e: dataplane::TxFailure) -> PyErr {
    match e {
        dataplane::TxFailure::Stopped => Stopped::new_err("the data plane was shut down"),
        other => err(other),
    }
}

#[pymethods]
impl TxQueue {
    /// A burst of `count` packets from the queue's memory (raises when the pool is short).
    fn alloc(&self, py: Python<'_>, count: usize) -> PyResult<Burst> {
        let q = &self.q;
        py.detach(|| lock(q).alloc(count))
            .map(Burst::new)
            .map_err(tx_error)
    }

    /// Sends `burst`, waiting up to `timeout` seconds for room (GIL released). Afterwards
    /// the burst is empty. Raises `BufferError` while views of its packets are alive.
    #[pyo3(signature = (burst, timeout = 1.0))]
    fn send(&self, py: Python<'_>, burst: &mut Burst, timeout: f64) -> PyResult<()> {
        if burst.exports > 0 || burst.views > 0 {
            return Err(PyBufferError::new_err(
                "views of this burst's packets are alive (memoryview, numpy arrays): release them before sending",
            ));
        }
        // Before the burst is taken: a bad timeout leaves it with the caller.
        let wait = wait_of(timeout)?;
        let b = burst
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("this burst was sent already"))?;
        let q = &self.q;
        match py.detach(|| lock(q).send_within(b, wait)) {
            Ok(()) => Ok(()),
            Err(e) => {
                burst.inner = Some(e.burst);
                Err(tx_error(e.reason))
            }
        }
    }
}

/// A burst of packets. `len(burst)`; `burst.packet(i)` views a received frame,
/// `burst.buffer(i)` a TX buffer to fill (both zero-copy).
#[pyclass(module = "dataplane")]
struct Burst {
    inner: Option<dataplane::Burst>,
    /// Buffer-protocol exports alive (memoryviews, numpy arrays).
    exports: usize,
    /// `Packet` objects alive.
    views: usize,
}

impl Burst {
    fn new(b: dataplane::Burst) -> Self {
        Self {
            inner: Some(b),
            exports: 0,
            views: 0,
        }
    }

    /// `value` of every packet as an `array.array` of type `code`.
    fn per_packet<'py>(
        &self,
        py: Python<'py>,
        code: &str,
        value: impl Fn(&dataplane::Packet) -> u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<u64> = self.get()?.packets().iter().map(value).collect();
        py.import("array")?.call_method1("array", (code, values))
    }

    fn get(&self) -> PyResult<&dataplane::Burst> {
        self.inner
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("this burst was sent"))
    }

    fn check_segment(&self, i: usize, segment: usize) -> PyResult<()> {
        self.check_index(i)?;
        let n = self.get()?.packets()[i].segments().len();
        if segment >= n {
            return Err(PyIndexError::new_err(format!(
                "segment {segment} of a {n}-segment packet"
            )));
        }
        Ok(())
    }

    fn check_index(&self, i: usize) -> PyResult<()> {
        let n = self.get()?.len();
        if i >= n {
            return Err(PyIndexError::new_err(format!(
                "packet {i} of a {n}-packet burst"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl Burst {
    fn __len__(&self) -> usize {
        self.inner.as_ref().map_or(0, |b| b.len())
    }

    /// Packet `i`'s frame, read-only (its length): its first segment.
    fn packet<'py>(slf: Bound<'py, Self>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        buffer::new_packet(slf, i, 0, false)
    }

    /// Segment `segment` of packet `i`, read-only: a header-data split queue gives each
    /// packet its headers (0) and its payload (1).
    fn segment<'py>(
        slf: Bound<'py, Self>,
        i: usize,
        segment: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        buffer::new_packet(slf, i, segment, false)
    }

    /// How many segments packet `i` has (1, or 2 on a header-data split queue).
    fn segments(&self, i: usize) -> PyResult<usize> {
        self.check_index(i)?;
        Ok(self.get()?.packets()[i].segments().len())
    }

    /// Every packet's flow id, as an `array.array('I')` (`numpy.frombuffer` reads it
    /// without copying).
    fn flow_ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.per_packet(py, "I", |p| u64::from(p.flow_id))
    }

    /// Every packet's receive time in ns (0 when not stamped), as an `array.array('Q')`.
    fn timestamps_ns<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.per_packet(py, "Q", |p| p.timestamp_ns)
    }

    /// Every packet's length in bytes over all its segments, as an `array.array('Q')`.
    fn lengths<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.per_packet(py, "Q", |p| p.len() as u64)
    }

    /// Segment `segment` of every packet as one two-dimensional array (packets x bytes),
    /// without copying, where the layout allows it (one region, one length, evenly
    /// spaced buffers); otherwise a `ValueError` (read `packet(i)` and `lengths()`).
    #[pyo3(signature = (segment = 0))]
    fn frames<'py>(slf: Bound<'py, Self>, segment: usize) -> PyResult<Bound<'py, Frames>> {
        let py = slf.py();
        Bound::new(py, Frames::new(slf, segment)?)
    }

    /// What a reorder put into this aggregate burst, as a dict (`name`, `batch_id`,
    /// `source_packets`, `payload_bytes`, `packets_per_batch`, `slot_bytes`,
    /// `aggregate_len`, `timed_out`), or None for a burst no reorder made.
    fn reorder<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(info) = self.get()?.reorder_info() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("name", &info.name)?;
        d.set_item("batch_id", info.batch_id)?;
        d.set_item("source_packets", info.source_packets)?;
        d.set_item("payload_bytes", info.payload_bytes)?;
        d.set_item("packets_per_batch", info.packets_per_batch)?;
        d.set_item("slot_bytes", info.slot_bytes)?;
        d.set_item("aggregate_len", info.aggregate_len)?;
        d.set_item("timed_out", info.timed_out)?;
        Ok(Some(d))
    }

    /// Packet `i`'s whole buffer, writable (its capacity); set the frame's length with
    /// `set_len`.
    fn buffer<'py>(slf: Bound<'py, Self>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        buffer::new_packet(slf, i, 0, true)
    }

    /// Sets packet `i`'s length (at most its buffer's capacity).
    fn set_len(&mut self, i: usize, length: usize) -> PyResult<()> {
        self.check_index(i)?;
        let b = self.inner.as_mut().expect("checked");
        let cap = b.capacity(i, 0);
        if length > cap {
            return Err(PyValueError::new_err(format!(
                "length {length} is past the {cap}-byte buffer"
            )));
        }
        b.set_len(i, 0, length);
        Ok(())
    }

    /// Packet `i`'s flow id (0: no rule marked it).
    fn flow_id(&self, i: usize) -> PyResult<u32> {
        self.check_index(i)?;
        Ok(self.get()?.packets()[i].flow_id)
    }

    /// Packet `i`'s receive time in ns (0 when not stamped).
    fn timestamp_ns(&self, i: usize) -> PyResult<u64> {
        self.check_index(i)?;
        Ok(self.get()?.packets()[i].timestamp_ns)
    }
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
struct Frames {
    burst: Py<Burst>,
    addr: u64,
    rows: usize,
    len: usize,
    /// Bytes from one packet's first byte to the next's (negative: falling addresses).
    stride: i64,
    device: dlpack::Device,
}

impl Frames {
    fn new(burst: Bound<'_, Burst>, segment: usize) -> PyResult<Self> {
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
            return Err(pyo3::exceptions::PyAttributeError::new_err(
                "the frames are in host memory: use numpy.from_dlpack",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("shape", (self.rows, self.len))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.addr, false))?;
        d.set_item("version", 3)?;
        d.set_item("strides", (self.stride, 1))?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }
}

/// A zero-copy view of one packet: `__cuda_array_interface__` for GPU memory, DLPack for
/// both. Its subclass `dataplane.Packet` (made in [`buffer`]) adds the buffer protocol for
/// host memory (`memoryview(p)`, `numpy.frombuffer(p, dtype)`); `Burst.packet` and
/// `Burst.buffer` make those. Keeps its burst alive and unsendable while it exists.
#[pyclass(module = "dataplane", name = "_Packet", subclass)]
struct Packet {
    burst: Py<Burst>,
    index: usize,
    /// Which segment: 0, or 1 for the payload of a header-data split packet.
    segment: usize,
    writable: bool,
}

impl Packet {
    /// A view of segment `segment` of packet `index` of `burst`: its bytes (read-only) or,
    /// `writable`, its whole buffer.
    fn new(
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
    fn span(&self, b: &Burst) -> PyResult<(u64, usize, bool)> {
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
            return Err(pyo3::exceptions::PyAttributeError::new_err(
                "the packet is in host memory: use the buffer protocol",
            ));
        }
        let d = PyDict::new(py);
        d.set_item("shape", (len,))?;
        d.set_item("typestr", "|u1")?;
        // Exported writable even for a received packet: PyTorch refuses a read-only CUDA
        // array ("the read only flag is not supported"), and the bytes are the burst's
        // alone while the view lives, so a write harms nothing. DLPack 1.0 carries the
        // read-only flag for consumers that honour it.
        d.set_item("data", (addr, false))?;
        d.set_item("version", 3)?;
        d.set_item("strides", py.None())?;
        // The bytes are in place when the burst is delivered: no stream to wait on.
        d.set_item("stream", py.None())?;
        Ok(d)
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

/// The data plane: `DataPlane(yaml)`, queues, bursts, zero-copy packet views.
#[pymodule]
#[pyo3(name = "dataplane")]
fn dataplane_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // What this build can run beyond the software loopback and kernel sockets.
    let features: Vec<&str> = [
        ("cuda", true),
        ("dpdk", cfg!(feature = "dpdk")),
        ("rdma", cfg!(feature = "rdma")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    m.add("FEATURES", pyo3::types::PyTuple::new(m.py(), features)?)?;
    m.add_class::<DataPlane>()?;
    m.add_class::<RxQueue>()?;
    m.add_class::<TxQueue>()?;
    m.add_class::<Burst>()?;
    m.add_class::<Packet>()?;
    m.add_class::<Frames>()?;
    m.add("Packet", buffer::packet_type(m.py())?)?;
    m.add_class::<FlowHandle>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("Stopped", m.py().get_type::<Stopped>())?;
    Ok(())
}
