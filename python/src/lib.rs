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
mod views;

use views::{Frames, Packet};

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

    /// Changes the running plane to configuration `yaml` while traffic flows, or changes
    /// nothing and raises `Error` naming each key that needs a restart (the Rust
    /// `DataPlane::change`). Returns `{"added": queues added, "removed": [(interface,
    /// "rx" or "tx", queue, packets, dropped, drained)], "rules": [interfaces whose rules
    /// switched], "regions": [(region, "added", "removed" or "changed: KEYS")], "seconds":
    /// s}`; take added queues with `rx_queue` and `tx_queue`.
    #[pyo3(signature = (yaml, name = "change.yaml"))]
    fn change<'py>(&self, py: Python<'py>, yaml: &str, name: &str) -> PyResult<Bound<'py, PyDict>> {
        let config = dataplane::config::load_str(yaml, name).map_err(err)?.config;
        // Without the GIL: removed queues hand over to their readers meanwhile.
        let report = self.with(|p| py.detach(|| p.change(&config)).map_err(err))?;
        let d = PyDict::new(py);
        d.set_item("added", report.added.queues)?;
        let removed: Vec<_> = report
            .removed
            .iter()
            .map(|r| {
                (
                    r.interface.clone(),
                    r.direction.name(),
                    r.id,
                    r.packets,
                    r.dropped,
                    r.drained,
                )
            })
            .collect();
        d.set_item("removed", removed)?;
        let rules: Vec<_> = report
            .change
            .rules
            .iter()
            .map(|r| r.interface.clone())
            .collect();
        d.set_item("rules", rules)?;
        let regions: Vec<_> = report
            .change
            .regions
            .iter()
            .map(|r| (r.name.clone(), r.fate.short()))
            .collect();
        d.set_item("regions", regions)?;
        d.set_item("seconds", report.seconds)?;
        Ok(d)
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
