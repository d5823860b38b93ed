//! Capture sinks: an RX queue's bursts written to files by a writer thread, so the thread
//! that hands them over never waits for the disk.
//!
//! [`CaptureSink::submit`] copies each packet's bytes (segments joined) into the batch
//! being filled, framed as the file has them: its record header carries its receive
//! timestamp (`Packet::timestamp_ns`, or the capture time when the engine gave none). So a
//! batch is the file's next bytes, and the writer thread does nothing but write it: one
//! `write` per 4 MiB batch, the one copy `dd` also makes. Full batches go to the writer
//! over a bounded queue. When the queue is full (the disk is slower than the link) the batch is dropped
//! and its packets counted as `writer_full`: the RX path never stalls on disk.
//!
//! Formats: pcap (nanosecond timestamps, Ethernet link type), pcapng (one Ethernet
//! interface with 1 ns resolution; the file headers come from `pcap-file`, little endian), raw (every packet's bytes appended to one file), and
//! raw per packet (a directory with one file per packet, numbered in arrival order).
//!
//! A sink made with [`CaptureSink::create_gpu`] (the queue's packets are in GPU memory)
//! gathers packets into 4 MiB device buffers with device-to-device copies and writes each
//! buffer to the file with one cuFile write (GPUDirect Storage, or cuFile's compatibility
//! mode where the machine has no GDS driver); the record headers of pcap and pcapng are
//! written around it from the host. A host sink counts packets in GPU memory as `not_host`.
//!
//! [`read_capture`] reads a pcap or pcapng file back, for replay
//! (`crate::plane::replay`).

#![deny(unsafe_code)]

#[cfg(feature = "cuda")]
mod gpu;
mod read;
mod transient;

pub use read::{CapturedFrame, ReadError, read_capture};
pub use transient::{
    TransientConfig, TransientStats, TransientTrigger, TriggerMatch, fire_all_transients,
};

use crate::burst::Burst;
use pcap_file::DataLink;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

/// Bytes of packet data per batch handed to the writer.
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// A file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureFormat {
    /// Classic pcap, nanosecond resolution.
    Pcap,
    /// pcapng, one interface with nanosecond resolution.
    Pcapng,
    /// Packet bytes back to back in one file.
    Raw,
    /// One file per packet in a directory.
    RawPerPacket,
}

impl CaptureFormat {
    /// The configuration's name for it.
    pub fn name(self) -> &'static str {
        match self {
            CaptureFormat::Pcap => "pcap",
            CaptureFormat::Pcapng => "pcapng",
            CaptureFormat::Raw => "raw",
            CaptureFormat::RawPerPacket => "raw_per_packet",
        }
    }

    /// Parses a configuration name.
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Pcap, Self::Pcapng, Self::Raw, Self::RawPerPacket]
            .into_iter()
            .find(|f| f.name() == name)
    }
}

/// `config` with a capture sink on every RX queue its `bench_rx` entries read, writing to
/// `path` in `format` (what `dataplane capture` runs). Several queues get one file each,
/// `path` with `_INTERFACE_qID` added before the extension (the interface name reduced to
/// a safe file-name component, so it cannot leave `path`'s directory). Without `keep_tx` the
/// `bench_tx` generators are removed, so only traffic from elsewhere is captured.
pub fn capture_bench_rx(
    config: &crate::config::Config,
    path: &Path,
    format: CaptureFormat,
    keep_tx: bool,
) -> crate::config::Config {
    let mut c = config.clone();
    if !keep_tx {
        c.bench.tx.clear();
    }
    let mut targets = Vec::new();
    for b in &config.bench.rx {
        let Some(i) = config.interface_index(&b.interface_name) else {
            continue;
        };
        for q in config.interfaces[i].rx.iter().flat_map(|r| &r.queues) {
            if b.queue_id.is_none_or(|id| id == q.id) && !targets.contains(&(i, q.id)) {
                targets.push((i, q.id));
            }
        }
    }
    let single = targets.len() == 1;
    for (i, id) in targets {
        let name = crate::files::file_component(&c.interfaces[i].name);
        let file = if single {
            path.to_owned()
        } else {
            with_suffix(path, &format!("_{name}_q{id}"))
        };
        for q in c.interfaces[i]
            .rx
            .iter_mut()
            .flat_map(|r| r.queues.iter_mut())
            .filter(|q| q.id == id)
        {
            q.capture = Some(crate::config::CaptureSpec {
                path: file.display().to_string(),
                format: format.name().to_owned(),
                queue_mb: 256,
                transient: None,
            });
        }
    }
    c
}

/// `path` with `suffix` added before its extension (`w.pcap`, `_2`: `w_2.pcap`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}{suffix}{ext}"))
}

/// Where and how a sink writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureConfig {
    /// File (or directory, for raw per packet).
    pub path: PathBuf,
    /// Format.
    pub format: CaptureFormat,
    /// Bytes of packet data waiting for the writer at most; more is dropped as
    /// `writer_full` (at least one batch, 4 MiB).
    pub queue_bytes: usize,
}

impl CaptureConfig {
    /// `path` in `format` with a 256 MiB queue.
    pub fn new(path: impl Into<PathBuf>, format: CaptureFormat) -> Self {
        Self {
            path: path.into(),
            format,
            queue_bytes: 256 << 20,
        }
    }
}

/// What a sink did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct CaptureStats {
    /// Packets handed over.
    pub submitted: u64,
    /// Packets written to the file.
    pub written_packets: u64,
    /// Packet bytes written.
    pub written_bytes: u64,
    /// Packets dropped because the writer was behind (its queue full).
    pub writer_full: u64,
    /// Packets not captured because they live in GPU memory (a host sink).
    pub not_host: u64,
    /// Packets not captured because a GPU copy failed (a GPU sink; the error is logged).
    pub copy_failed: u64,
    /// Packets lost because writing failed (an I/O error, a full disk): the batch being
    /// written and every one after it. The sink's `finish` returns the error.
    pub write_failed: u64,
    /// A transient buffer's triggers and windows (`capture.transient`); its packets are
    /// counted in `written_packets` as its windows are written.
    pub transient: Option<TransientStats>,
    /// A GPU sink writes through cuFile (GPUDirect Storage); false where cuFile did not
    /// take the file and each buffer is copied to the host first, and for host sinks.
    pub through_cufile: bool,
}

/// The sink could not be created or the writer failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be created or written.
    #[error("capture to {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The pcap writer failed.
    #[error("capture to {path}: {reason}")]
    Pcap {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Writing failed (an I/O error, a full disk); the writer stopped there.
    #[error("capture to {path}: writing failed: {source}; {lost} packet(s) lost")]
    WriteFailed {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
        /// Packets submitted and not written.
        lost: u64,
    },
    /// The writer thread panicked.
    #[error("capture to {0}: the writer thread panicked")]
    Panicked(PathBuf),
    /// Transient windows whose files could not be written (each counted as
    /// `windows_failed`).
    #[error("capture to {path}: {failed} transient window file(s) failed; the last: {reason}")]
    WindowsFailed {
        /// The file the windows are named after.
        path: PathBuf,
        /// Windows that failed.
        failed: u64,
        /// Why the last one failed.
        reason: String,
    },
    /// GPU memory or cuFile could not be set up or written.
    #[error("capture to {path}: {reason}")]
    Gpu {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Packets bound for the writer, laid out as the file has them (record headers and
/// padding included), so the writer only writes.
#[derive(Default)]
struct Batch {
    data: Vec<u8>,
    /// (offset in `data`, length) per packet.
    records: Vec<(u32, u32)>,
    /// Packet bytes (framing excluded).
    packet_bytes: u64,
}

/// pcap record header: seconds, nanoseconds, captured and original length.
const PCAP_RECORD: usize = 16;
/// pcapng enhanced packet block before the data: type, length, interface, time (2 words),
/// captured and original length.
const PCAPNG_HEAD: usize = 28;

impl CaptureFormat {
    /// Bytes the file has before and after a packet of `len` bytes.
    pub(crate) fn framing(self, len: usize) -> (usize, usize) {
        match self {
            CaptureFormat::Pcap => (PCAP_RECORD, 0),
            CaptureFormat::Pcapng => (PCAPNG_HEAD, len.next_multiple_of(4) - len + 4),
            CaptureFormat::Raw | CaptureFormat::RawPerPacket => (0, 0),
        }
    }

    /// Appends the record header of a packet of `len` bytes received at `ts` (ns since the
    /// epoch), little endian as the file header ([`file_header`]).
    pub(crate) fn record_head(self, ts: u64, len: u32, out: &mut Vec<u8>) {
        let (head, tail) = self.framing(len as usize);
        let words: &[u32] = match self {
            CaptureFormat::Pcap => &[
                (ts / 1_000_000_000) as u32,
                (ts % 1_000_000_000) as u32,
                len,
                len,
            ],
            CaptureFormat::Pcapng => &[
                6, // enhanced packet block
                (head + len as usize + tail) as u32,
                0, // interface
                (ts >> 32) as u32,
                ts as u32,
                len,
                len,
            ],
            CaptureFormat::Raw | CaptureFormat::RawPerPacket => &[],
        };
        for w in words {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// Appends what follows a packet of `len` bytes (pcapng: zero padding to 4 bytes, then
    /// the block length again).
    pub(crate) fn record_tail(self, len: u32, out: &mut Vec<u8>) {
        let (head, tail) = self.framing(len as usize);
        if tail > 0 {
            out.resize(out.len() + tail - 4, 0);
            out.extend_from_slice(&((head + len as usize + tail) as u32).to_le_bytes());
        }
    }
}

/// The bytes a capture file starts with (little endian; `pcap-file` writes the pcap and
/// pcapng headers: nanosecond pcap, or a section and one Ethernet interface with
/// `if_tsresol` 9).
pub(crate) fn file_header(format: CaptureFormat) -> Vec<u8> {
    use pcap_file::Endianness;
    match format {
        CaptureFormat::Pcap => {
            let header = pcap_file::pcap::PcapHeader {
                datalink: DataLink::ETHERNET,
                ts_resolution: pcap_file::TsResolution::NanoSecond,
                snaplen: 65535,
                endianness: Endianness::Little,
                ..Default::default()
            };
            pcap_file::pcap::PcapWriter::with_header(Vec::new(), header)
                .expect("writing to memory")
                .into_writer()
        }
        CaptureFormat::Pcapng => {
            use pcap_file::pcapng::blocks::interface_description::{
                InterfaceDescriptionBlock, InterfaceDescriptionOption,
            };
            let mut w =
                pcap_file::pcapng::PcapNgWriter::with_endianness(Vec::new(), Endianness::Little)
                    .expect("writing to memory");
            w.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: 0,
                options: vec![InterfaceDescriptionOption::IfTsResol(9)],
            })
            .expect("writing to memory");
            w.into_inner()
        }
        CaptureFormat::Raw | CaptureFormat::RawPerPacket => Vec::new(),
    }
}

#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) written_packets: AtomicU64,
    pub(crate) written_bytes: AtomicU64,
    /// Set when the writer failed: later batches count as `write_failed`, not as a
    /// full queue.
    pub(crate) failed: std::sync::atomic::AtomicBool,
}

/// A capture sink (see the module documentation).
pub struct CaptureSink {
    path: PathBuf,
    format: CaptureFormat,
    queue: Option<SyncSender<Batch>>,
    filling: Batch,
    shared: Arc<Shared>,
    writer: Option<JoinHandle<Result<(), CaptureError>>>,
    submitted: u64,
    writer_full: u64,
    not_host: u64,
    /// Set for a sink of packets in GPU memory: it does all the work.
    #[cfg(feature = "cuda")]
    gpu: Option<gpu::GpuSink>,
    /// Set for a transient buffer: it does all the work.
    transient: Option<transient::TransientSink>,
}

/// Nanoseconds since the Unix epoch now, on the process's clock.
pub(crate) fn now_ns() -> u64 {
    crate::clock::WallClock::new().now_ns()
}

impl CaptureSink {
    /// Creates the file (so a bad path fails here) and starts the writer thread.
    pub fn create(cfg: &CaptureConfig) -> Result<Self, CaptureError> {
        let io = |source| CaptureError::Io {
            path: cfg.path.clone(),
            source,
        };
        let out = Output::open(&cfg.path, cfg.format).map_err(io)?;
        let depth = (cfg.queue_bytes / BATCH_BYTES).max(1);
        let (tx, rx) = mpsc::sync_channel(depth);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let path = cfg.path.clone();
        let writer = std::thread::Builder::new()
            .name("dp-capture".into())
            .spawn(move || write_loop(out, rx, &s, &path))
            .map_err(io)?;
        Ok(Self {
            path: cfg.path.clone(),
            format: cfg.format,
            queue: Some(tx),
            filling: Batch::default(),
            shared,
            writer: Some(writer),
            submitted: 0,
            writer_full: 0,
            not_host: 0,
            #[cfg(feature = "cuda")]
            gpu: None,
            transient: None,
        })
    }

    /// A transient buffer (see [`TransientConfig`]): writes a window file each time
    /// `trigger` fires or a packet matches `cfg.trigger_on`.
    pub fn create_transient(
        cfg: &TransientConfig,
        trigger: Arc<TransientTrigger>,
    ) -> Result<Self, CaptureError> {
        let mut sink = Self::delegating(&cfg.path, cfg.format);
        sink.transient = Some(transient::TransientSink::create(cfg, trigger)?);
        Ok(sink)
    }

    /// A sink for packets in the memory of GPU `ordinal`, written through cuFile (see the
    /// module documentation). Fails here when the GPU, its memory or cuFile is not there.
    #[cfg(feature = "cuda")]
    pub fn create_gpu(cfg: &CaptureConfig, ordinal: u32) -> Result<Self, CaptureError> {
        let mut sink = Self::delegating(&cfg.path, cfg.format);
        sink.gpu = Some(gpu::GpuSink::create(cfg, ordinal)?);
        Ok(sink)
    }

    /// A sink without a writer of its own, for a GPU sink or a transient buffer to fill in.
    fn delegating(path: &Path, format: CaptureFormat) -> Self {
        Self {
            path: path.to_owned(),
            format,
            queue: None,
            filling: Batch::default(),
            shared: Arc::new(Shared::default()),
            writer: None,
            submitted: 0,
            writer_full: 0,
            not_host: 0,
            #[cfg(feature = "cuda")]
            gpu: None,
            transient: None,
        }
    }

    /// Copies `burst`'s packets for the writer (never waits for it).
    pub fn submit(&mut self, burst: &Burst) {
        #[cfg(feature = "cuda")]
        if let Some(g) = &mut self.gpu {
            g.submit(burst);
            return;
        }
        if let Some(t) = &mut self.transient {
            self.submitted += burst.len() as u64;
            self.not_host += t.submit(burst);
            return;
        }
        let fallback = std::cell::OnceCell::new();
        let format = self.format;
        for (i, p) in burst.packets().iter().enumerate() {
            self.submitted += 1;
            let segments = p.segments().len();
            if (0..segments).any(|s| burst.data(i, s).is_none()) {
                self.not_host += 1;
                continue;
            }
            let len = p.len() as u32;
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(now_ns),
                t => t,
            };
            let b = &mut self.filling;
            format.record_head(ts, len, &mut b.data);
            let at = b.data.len() as u32;
            for s in 0..segments {
                b.data
                    .extend_from_slice(burst.data(i, s).expect("checked above"));
            }
            format.record_tail(len, &mut b.data);
            b.records.push((at, len));
            b.packet_bytes += u64::from(len);
            if b.data.len() >= BATCH_BYTES {
                self.hand_over();
            }
        }
    }

    /// Sends the batch being filled to the writer, or drops it when the writer is behind.
    fn hand_over(&mut self) {
        if self.filling.records.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.filling);
        let Some(q) = &self.queue else {
            return;
        };
        match q.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(b)) | Err(TrySendError::Disconnected(b)) => {
                // After a write failure the writer is gone: the packets count as
                // `write_failed` (see `stats`), not as a full queue.
                if !self.shared.failed.load(Ordering::Acquire) {
                    self.writer_full += b.records.len() as u64;
                }
                // Keep the allocation for the next batch.
                self.filling = b;
                self.filling.data.clear();
                self.filling.records.clear();
                self.filling.packet_bytes = 0;
            }
        }
    }

    /// Counters so far (written ones as of the writer's last batch).
    pub fn stats(&self) -> CaptureStats {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            return g.stats();
        }
        let transient = self.transient.as_ref().map(|t| t.stats());
        CaptureStats {
            submitted: self.submitted,
            written_packets: transient.map_or_else(
                || self.shared.written_packets.load(Ordering::Relaxed),
                |t| t.written_packets,
            ),
            written_bytes: self.shared.written_bytes.load(Ordering::Relaxed),
            writer_full: self.writer_full,
            not_host: self.not_host,
            copy_failed: 0,
            write_failed: self.write_failed(),
            transient,
            through_cufile: false,
        }
    }

    /// Packets lost to a failed write: once the writer failed, everything submitted and
    /// neither written nor dropped for another reason (exact once the sink is closed).
    fn write_failed(&self) -> u64 {
        if !self.shared.failed.load(Ordering::Acquire) {
            return 0;
        }
        let written = self.shared.written_packets.load(Ordering::Relaxed);
        self.submitted
            .saturating_sub(written + self.writer_full + self.not_host)
    }

    /// Writes what is left, closes the file and returns the counters.
    pub fn finish(mut self) -> Result<CaptureStats, CaptureError> {
        self.close()?;
        Ok(self.stats())
    }

    fn close(&mut self) -> Result<(), CaptureError> {
        if let Some(t) = &mut self.transient {
            return t.close();
        }
        #[cfg(feature = "cuda")]
        if let Some(g) = &mut self.gpu {
            return g.close();
        }
        if let (Some(q), false) = (&self.queue, self.filling.records.is_empty()) {
            // The last batch may wait for room: nothing is lost at the end.
            let batch = std::mem::take(&mut self.filling);
            let n = batch.records.len() as u64;
            if q.send(batch).is_err() && !self.shared.failed.load(Ordering::Acquire) {
                self.writer_full += n;
            }
        }
        self.queue = None;
        match self.writer.take().map(|w| w.join()) {
            None => Ok(()),
            Some(Ok(Err(CaptureError::Io { path, source }))) => Err(CaptureError::WriteFailed {
                path,
                source,
                lost: self.write_failed(),
            }),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(CaptureError::Panicked(self.path.clone())),
        }
    }
}

impl Drop for CaptureSink {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("{e}");
        }
    }
}

/// An open output.
enum Output {
    /// One file, written a batch at a time.
    File(std::fs::File),
    /// A directory of one file per packet.
    PerPacket { dir: PathBuf, next: u64 },
}

impl Output {
    fn open(path: &Path, format: CaptureFormat) -> std::io::Result<Self> {
        if format == CaptureFormat::RawPerPacket {
            crate::files::output_dir(path)?;
            return Ok(Output::PerPacket {
                dir: path.to_owned(),
                next: 0,
            });
        }
        let mut file = crate::files::create_output(path)?;
        file.write_all(&file_header(format))?;
        Ok(Output::File(file))
    }

    fn write(&mut self, batch: &Batch) -> std::io::Result<()> {
        match self {
            // The batch is the file's bytes: one write, no formatting here.
            Output::File(f) => f.write_all(&batch.data),
            Output::PerPacket { dir, next } => {
                for &(at, len) in &batch.records {
                    let data = &batch.data[at as usize..(at + len) as usize];
                    crate::files::write_new(&dir.join(format!("{next:012}.bin")), data)?;
                    *next += 1;
                }
                Ok(())
            }
        }
    }
}

fn write_loop(
    mut out: Output,
    rx: Receiver<Batch>,
    shared: &Shared,
    path: &Path,
) -> Result<(), CaptureError> {
    // Ends when the sink drops its sender (finish or drop).
    while let Ok(batch) = rx.recv() {
        if let Err(source) = out.write(&batch) {
            // Everything from this batch on is lost; the sink counts it (`write_failed`).
            shared.failed.store(true, Ordering::Release);
            return Err(CaptureError::Io {
                path: path.to_owned(),
                source,
            });
        }
        shared
            .written_packets
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        shared
            .written_bytes
            .fetch_add(batch.packet_bytes, Ordering::Relaxed);
    }
    Ok(())
}
