//! Capture sinks: an RX queue's bursts written to files by a writer thread, so the thread
//! that hands them over never waits for the disk.
//!
//! [`CaptureSink::submit`] copies each packet's bytes (segments joined) with its receive
//! timestamp (`Packet::timestamp_ns`, or the capture time when the engine gave none) into
//! the batch being filled; full batches (4 MiB) go to the writer thread over a bounded
//! queue. When the queue is full (the disk is slower than the link) the batch is dropped
//! and its packets counted as `writer_full`: the RX path never stalls on disk.
//!
//! Formats: pcap (nanosecond timestamps, Ethernet link type), pcapng (one Ethernet
//! interface with 1 ns resolution), raw (every packet's bytes appended to one file), and
//! raw per packet (a directory with one file per packet, numbered in arrival order).
//!
//! A sink made with [`CaptureSink::create_gpu`] (the queue's packets are in GPU memory)
//! gathers packets into 4 MiB device buffers with device-to-device copies and writes each
//! buffer to the file with one cuFile write (GPUDirect Storage, or cuFile's compatibility
//! mode where the machine has no GDS driver); the record headers of pcap and pcapng are
//! written around it from the host. A host sink counts packets in GPU memory as `not_host`.

#![deny(unsafe_code)]

#[cfg(feature = "cuda")]
mod gpu;

use crate::burst::Burst;
use pcap_file::DataLink;
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bytes of packet data per batch handed to the writer.
pub(crate) const BATCH_BYTES: usize = 4 << 20;
/// Bytes per `write` of the file writer's buffer.
const WRITE_BYTES: usize = 1 << 20;

/// A file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
/// `path` with `_INTERFACE_qID` added before the extension. Without `keep_tx` the
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
        let name = c.interfaces[i].name.clone();
        let file = if single {
            path.to_owned()
        } else {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let ext = path
                .extension()
                .map(|e| format!(".{}", e.to_string_lossy()))
                .unwrap_or_default();
            path.with_file_name(format!("{stem}_{name}_q{id}{ext}"))
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
            });
        }
    }
    c
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
    /// The writer thread panicked.
    #[error("capture to {0}: the writer thread panicked")]
    Panicked(PathBuf),
    /// GPU memory or cuFile could not be set up or written.
    #[error("capture to {path}: {reason}")]
    Gpu {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Packets bound for the writer.
#[derive(Default)]
struct Batch {
    data: Vec<u8>,
    /// (timestamp in ns since the epoch, length) per packet.
    records: Vec<(u64, u32)>,
}

#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) written_packets: AtomicU64,
    pub(crate) written_bytes: AtomicU64,
}

/// A capture sink (see the module documentation).
pub struct CaptureSink {
    path: PathBuf,
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
}

/// Nanoseconds since the Unix epoch now.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl CaptureSink {
    /// Creates the file (so a bad path fails here) and starts the writer thread.
    pub fn create(cfg: &CaptureConfig) -> Result<Self, CaptureError> {
        let io = |source| CaptureError::Io {
            path: cfg.path.clone(),
            source,
        };
        let out = Output::open(&cfg.path, cfg.format).map_err(|e| match e {
            OpenError::Io(source) => io(source),
            OpenError::Pcap(reason) => CaptureError::Pcap {
                path: cfg.path.clone(),
                reason,
            },
        })?;
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
            queue: Some(tx),
            filling: Batch::default(),
            shared,
            writer: Some(writer),
            submitted: 0,
            writer_full: 0,
            not_host: 0,
            #[cfg(feature = "cuda")]
            gpu: None,
        })
    }

    /// A sink for packets in the memory of GPU `ordinal`, written through cuFile (see the
    /// module documentation). Fails here when the GPU, its memory or cuFile is not there.
    #[cfg(feature = "cuda")]
    pub fn create_gpu(cfg: &CaptureConfig, ordinal: u32) -> Result<Self, CaptureError> {
        let gpu = gpu::GpuSink::create(cfg, ordinal)?;
        Ok(Self {
            path: cfg.path.clone(),
            queue: None,
            filling: Batch::default(),
            shared: Arc::new(Shared::default()),
            writer: None,
            submitted: 0,
            writer_full: 0,
            not_host: 0,
            gpu: Some(gpu),
        })
    }

    /// Copies `burst`'s packets for the writer (never waits for it).
    pub fn submit(&mut self, burst: &Burst) {
        #[cfg(feature = "cuda")]
        if let Some(g) = &mut self.gpu {
            g.submit(burst);
            return;
        }
        let fallback = std::cell::OnceCell::new();
        for (i, p) in burst.packets().iter().enumerate() {
            self.submitted += 1;
            let start = self.filling.data.len();
            let mut host = true;
            for s in 0..p.segments().len() {
                match burst.data(i, s) {
                    Some(d) => self.filling.data.extend_from_slice(d),
                    None => host = false,
                }
            }
            if !host {
                self.filling.data.truncate(start);
                self.not_host += 1;
                continue;
            }
            let len = (self.filling.data.len() - start) as u32;
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(now_ns),
                t => t,
            };
            self.filling.records.push((ts, len));
            if self.filling.data.len() >= BATCH_BYTES {
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
                self.writer_full += b.records.len() as u64;
                // Keep the allocation for the next batch.
                self.filling = b;
                self.filling.data.clear();
                self.filling.records.clear();
            }
        }
    }

    /// Counters so far (written ones as of the writer's last batch).
    pub fn stats(&self) -> CaptureStats {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.gpu {
            return g.stats();
        }
        CaptureStats {
            submitted: self.submitted,
            written_packets: self.shared.written_packets.load(Ordering::Relaxed),
            written_bytes: self.shared.written_bytes.load(Ordering::Relaxed),
            writer_full: self.writer_full,
            not_host: self.not_host,
            copy_failed: 0,
        }
    }

    /// Writes what is left, closes the file and returns the counters.
    pub fn finish(mut self) -> Result<CaptureStats, CaptureError> {
        self.close()?;
        Ok(self.stats())
    }

    fn close(&mut self) -> Result<(), CaptureError> {
        #[cfg(feature = "cuda")]
        if let Some(g) = &mut self.gpu {
            return g.close();
        }
        if let (Some(q), false) = (&self.queue, self.filling.records.is_empty()) {
            // The last batch may wait for room: nothing is lost at the end.
            let batch = std::mem::take(&mut self.filling);
            let n = batch.records.len() as u64;
            if q.send(batch).is_err() {
                self.writer_full += n;
            }
        }
        self.queue = None;
        match self.writer.take().map(|w| w.join()) {
            None => Ok(()),
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
    Pcap(pcap_file::pcap::PcapWriter<BufWriter<std::fs::File>>),
    Pcapng(pcap_file::pcapng::PcapNgWriter<BufWriter<std::fs::File>>),
    Raw(BufWriter<std::fs::File>),
    PerPacket { dir: PathBuf, next: u64 },
}

enum OpenError {
    Io(std::io::Error),
    Pcap(String),
}

impl Output {
    fn open(path: &Path, format: CaptureFormat) -> Result<Self, OpenError> {
        let file = || {
            std::fs::File::create(path)
                .map(|f| BufWriter::with_capacity(WRITE_BYTES, f))
                .map_err(OpenError::Io)
        };
        let pcap = |e: pcap_file::PcapError| OpenError::Pcap(e.to_string());
        Ok(match format {
            CaptureFormat::Pcap => {
                let header = pcap_file::pcap::PcapHeader {
                    datalink: DataLink::ETHERNET,
                    ts_resolution: pcap_file::TsResolution::NanoSecond,
                    snaplen: 65535,
                    ..Default::default()
                };
                Output::Pcap(
                    pcap_file::pcap::PcapWriter::with_header(file()?, header).map_err(pcap)?,
                )
            }
            CaptureFormat::Pcapng => {
                use pcap_file::pcapng::blocks::interface_description::{
                    InterfaceDescriptionBlock, InterfaceDescriptionOption,
                };
                let mut w = pcap_file::pcapng::PcapNgWriter::new(file()?).map_err(pcap)?;
                w.write_pcapng_block(InterfaceDescriptionBlock {
                    linktype: DataLink::ETHERNET,
                    snaplen: 0,
                    options: vec![InterfaceDescriptionOption::IfTsResol(9)],
                })
                .map_err(pcap)?;
                Output::Pcapng(w)
            }
            CaptureFormat::Raw => Output::Raw(file()?),
            CaptureFormat::RawPerPacket => {
                std::fs::create_dir_all(path).map_err(OpenError::Io)?;
                Output::PerPacket {
                    dir: path.to_owned(),
                    next: 0,
                }
            }
        })
    }

    fn write(&mut self, batch: &Batch) -> Result<(), String> {
        let mut at = 0usize;
        for &(ts, len) in &batch.records {
            let data = &batch.data[at..at + len as usize];
            at += len as usize;
            let t = Duration::from_nanos(ts);
            match self {
                Output::Pcap(w) => {
                    w.write_packet(&pcap_file::pcap::PcapPacket::new(t, len, data))
                        .map_err(|e| e.to_string())?;
                }
                Output::Pcapng(w) => {
                    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
                    w.write_pcapng_block(EnhancedPacketBlock {
                        interface_id: 0,
                        timestamp: t,
                        original_len: len,
                        data: std::borrow::Cow::Borrowed(data),
                        options: Vec::new(),
                    })
                    .map_err(|e| e.to_string())?;
                }
                Output::Raw(w) => w.write_all(data).map_err(|e| e.to_string())?,
                Output::PerPacket { dir, next } => {
                    std::fs::write(dir.join(format!("{next:012}.bin")), data)
                        .map_err(|e| e.to_string())?;
                    *next += 1;
                }
            }
        }
        Ok(())
    }

    /// Writes out what is buffered and closes the file.
    fn close(self) -> std::io::Result<()> {
        match self {
            Output::Pcap(w) => w.into_writer().flush(),
            Output::Pcapng(w) => w.into_inner().flush(),
            Output::Raw(mut w) => w.flush(),
            Output::PerPacket { .. } => Ok(()),
        }
    }
}

fn write_loop(
    mut out: Output,
    rx: Receiver<Batch>,
    shared: &Shared,
    path: &Path,
) -> Result<(), CaptureError> {
    let failed = |reason: String| CaptureError::Pcap {
        path: path.to_owned(),
        reason,
    };
    // Ends when the sink drops its sender (finish or drop).
    while let Ok(batch) = rx.recv() {
        out.write(&batch).map_err(failed)?;
        shared
            .written_packets
            .fetch_add(batch.records.len() as u64, Ordering::Relaxed);
        shared
            .written_bytes
            .fetch_add(batch.data.len() as u64, Ordering::Relaxed);
    }
    out.close().map_err(|source| CaptureError::Io {
        path: path.to_owned(),
        source,
    })
}
