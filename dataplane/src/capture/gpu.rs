//! The GPU sink: packets in GPU memory gathered into device staging buffers and written to
//! the file through cuFile (GPUDirect Storage), one write per 4 MiB buffer.
//!
//! A buffer's layout is the file's: for pcap and pcapng each packet's bytes sit where the
//! file has them, with gaps for the record headers (and pcapng's padding and trailing
//! length), which the writer thread writes from the host after the buffer's cuFile write.
//! Raw per packet writes each packet from the buffer into a file of its own.
//!
//! The staging buffers circulate between the polling thread and the writer; when none is
//! free (the disk is behind), packets are counted as `writer_full`, never waited for.

#![allow(unsafe_code)]

use super::{
    BATCH_BYTES, CaptureConfig, CaptureError, CaptureFormat, CaptureStats, Shared, file_header,
    now_ns,
};
use crate::burst::Burst;
use gpudirect::gds::{DeviceStaging, GdsFile};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

/// One packet in a staging buffer.
#[derive(Clone, Copy)]
struct Record {
    /// Receive time, ns since the Unix epoch.
    ts: u64,
    len: u32,
    /// Offset of its bytes in the buffer.
    at: u32,
}

/// A staging buffer being filled or written.
struct Filled {
    staging: DeviceStaging,
    used: usize,
    records: Vec<Record>,
}

/// The GPU side of a [`super::CaptureSink`].
pub(super) struct GpuSink {
    path: PathBuf,
    format: CaptureFormat,
    free: Vec<DeviceStaging>,
    returned: Receiver<DeviceStaging>,
    filling: Option<Filled>,
    /// A copy was queued since the last wait.
    copies_pending: bool,
    queue: Option<SyncSender<Filled>>,
    writer: Option<JoinHandle<Result<(), CaptureError>>>,
    shared: Arc<Shared>,
    submitted: u64,
    writer_full: u64,
    copy_failed: u64,
}

impl GpuSink {
    /// Allocates the staging buffers (`queue_bytes` of them, at least two), creates the
    /// file and registers it with cuFile, and starts the writer thread.
    pub(super) fn create(cfg: &CaptureConfig, ordinal: u32) -> Result<Self, CaptureError> {
        let gpu = |e: gpudirect::GpuError| CaptureError::Gpu {
            path: cfg.path.clone(),
            reason: e.to_string(),
        };
        let io = |source| CaptureError::Io {
            path: cfg.path.clone(),
            source,
        };
        let out = FileOut::open(&cfg.path, cfg.format).map_err(|e| match e {
            FileError::Io(e) => io(e),
            FileError::Gpu(e) => gpu(e),
        })?;
        let depth = (cfg.queue_bytes / BATCH_BYTES).max(2);
        let free = (0..depth)
            .map(|_| DeviceStaging::alloc(ordinal, BATCH_BYTES))
            .collect::<Result<Vec<_>, _>>()
            .map_err(gpu)?;
        let (tx, rx) = mpsc::sync_channel(depth);
        let (give_back, returned) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let (s, path, format) = (shared.clone(), cfg.path.clone(), cfg.format);
        let writer = std::thread::Builder::new()
            .name("dp-capture-gds".into())
            .spawn(move || write_loop(out, format, rx, give_back, &s, &path))
            .map_err(io)?;
        tracing::info!(
            "capture to {}: packets in GPU {ordinal} memory written through cuFile ({} mode)",
            cfg.path.display(),
            gpudirect::gds::storage_mode()
        );
        Ok(Self {
            path: cfg.path.clone(),
            format: cfg.format,
            free,
            returned,
            filling: None,
            copies_pending: false,
            queue: Some(tx),
            writer: Some(writer),
            shared,
            submitted: 0,
            writer_full: 0,
            copy_failed: 0,
        })
    }

    /// Copies `burst`'s packets into staging buffers; returns once the copies are done, so
    /// the burst's buffers may be reused.
    pub(super) fn submit(&mut self, burst: &Burst) {
        let fallback = std::cell::OnceCell::new();
        for (i, p) in burst.packets().iter().enumerate() {
            self.submitted += 1;
            let len = p.len();
            let (head, tail) = self.format.framing(len);
            let need = head + len + tail;
            if need > BATCH_BYTES {
                self.copy_failed += 1;
                continue;
            }
            if self
                .filling
                .as_ref()
                .is_some_and(|f| f.used + need > BATCH_BYTES)
            {
                self.hand_over();
            }
            if self.filling.is_none() {
                self.free.extend(self.returned.try_iter());
                match self.free.pop() {
                    Some(staging) => {
                        self.filling = Some(Filled {
                            staging,
                            used: 0,
                            records: Vec::new(),
                        })
                    }
                    None => {
                        self.writer_full += 1;
                        continue;
                    }
                }
            }
            let f = self.filling.as_mut().expect("just filled");
            let start = f.used + head;
            let mut at = start;
            let mut failed = None;
            for s in 0..p.segments().len() {
                let seg_len = p.segments()[s].len as usize;
                let copied = match burst.data(i, s) {
                    Some(d) => f.staging.copy_in_host(at, d),
                    // SAFETY: the segment is `seg_len` bytes of GPU memory owned by
                    // `burst`, which the caller holds until this function returns, and
                    // the copies are waited for below before returning.
                    None => unsafe { f.staging.copy_in(at, burst.segment_addr(i, s), seg_len) },
                };
                if let Err(e) = copied {
                    failed = Some(e);
                    break;
                }
                self.copies_pending = true;
                at += seg_len;
            }
            if let Some(e) = failed {
                if self.copy_failed == 0 {
                    tracing::error!("capture to {}: {e}", self.path.display());
                }
                self.copy_failed += 1;
                continue;
            }
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(now_ns),
                t => t,
            };
            f.records.push(Record {
                ts,
                len: len as u32,
                at: start as u32,
            });
            f.used += need;
        }
        self.wait_copies();
    }

    /// Waits for the queued copies, so the packets they read may be reused.
    fn wait_copies(&mut self) {
        if !std::mem::take(&mut self.copies_pending) {
            return;
        }
        if let Some(f) = &mut self.filling
            && let Err(e) = f.staging.wait()
        {
            // The copies' outcome is unknown: the batch's packets are not written.
            tracing::error!("capture to {}: {e}", self.path.display());
            self.copy_failed += f.records.len() as u64;
            f.records.clear();
            f.used = 0;
        }
    }

    /// Sends the buffer being filled to the writer.
    fn hand_over(&mut self) {
        self.wait_copies();
        let Some(f) = self.filling.take() else {
            return;
        };
        if f.records.is_empty() {
            self.free.push(f.staging);
            return;
        }
        match &self.queue {
            // There are no more buffers than queue slots: this never waits.
            Some(q) => {
                if let Err(e) = q.send(f) {
                    self.writer_full += e.0.records.len() as u64;
                }
            }
            None => self.free.push(f.staging),
        }
    }

    pub(super) fn stats(&self) -> CaptureStats {
        CaptureStats {
            submitted: self.submitted,
            written_packets: self.shared.written_packets.load(Ordering::Relaxed),
            written_bytes: self.shared.written_bytes.load(Ordering::Relaxed),
            writer_full: self.writer_full,
            not_host: 0,
            copy_failed: self.copy_failed,
            write_failed: 0,
            transient: None,
        }
    }

    pub(super) fn close(&mut self) -> Result<(), CaptureError> {
        self.hand_over();
        self.queue = None;
        match self.writer.take().map(|w| w.join()) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(CaptureError::Panicked(self.path.clone())),
        }
    }
}

/// Why the writer could not open or write its file.
#[derive(Debug, thiserror::Error)]
pub(super) enum FileError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Gpu(#[from] gpudirect::GpuError),
}

/// Where the writer puts bytes.
enum FileOut {
    /// One file: its cuFile registration and the offset its next bytes go to.
    Single { file: GdsFile, offset: u64 },
    /// A directory of one file per packet.
    PerPacket { dir: PathBuf, next: u64 },
}

impl FileOut {
    fn open(path: &Path, format: CaptureFormat) -> Result<Self, FileError> {
        if format == CaptureFormat::RawPerPacket {
            crate::files::output_dir(path).map_err(FileError::Io)?;
            // cuFile must work before the first packet, so a bad setup fails at start.
            let probe = path.join(".cufile-probe");
            let f = crate::files::create_new(&probe).map_err(FileError::Io)?;
            let registered = GdsFile::register(f).map(drop);
            let _ = std::fs::remove_file(&probe);
            registered.map_err(FileError::Gpu)?;
            return Ok(FileOut::PerPacket {
                dir: path.to_owned(),
                next: 0,
            });
        }
        let mut file = crate::files::create_output(path).map_err(FileError::Io)?;
        let header = file_header(format);
        file.write_all(&header).map_err(FileError::Io)?;
        Ok(FileOut::Single {
            file: GdsFile::register(file).map_err(FileError::Gpu)?,
            offset: header.len() as u64,
        })
    }

    fn write(&mut self, format: CaptureFormat, f: &Filled) -> Result<(), FileError> {
        match self {
            FileOut::Single { file, offset } => {
                let records = f.records.iter().map(|r| {
                    let head = format.framing(r.len as usize).0;
                    (r.ts, r.len, r.at as usize - head)
                });
                write_framed(
                    file,
                    file.file(),
                    &f.staging,
                    0..f.used,
                    *offset,
                    format,
                    records,
                )?;
                *offset += f.used as u64;
            }
            FileOut::PerPacket { dir, next } => {
                for r in &f.records {
                    let path = dir.join(format!("{next:012}.bin"));
                    let file = crate::files::create_new(&path)?;
                    let file = GdsFile::register(file)?;
                    file.write(&f.staging, r.at as usize, r.len as usize, 0)?;
                    *next += 1;
                }
            }
        }
        Ok(())
    }
}

/// Writes bytes `range` of `staging` to `file` at `offset` through cuFile, then the
/// record headers and trailers of `records` (receive time, packet length, where its record
/// starts counted from `range.start`) around the packets from the host, through `host`
/// (the same file opened for ordinary writes).
pub(super) fn write_framed(
    file: &GdsFile,
    host: &std::fs::File,
    staging: &DeviceStaging,
    range: std::ops::Range<usize>,
    offset: u64,
    format: CaptureFormat,
    records: impl Iterator<Item = (u64, u32, usize)>,
) -> Result<(), FileError> {
    file.write(staging, range.start, range.len(), offset)?;
    let mut framing = Vec::new();
    for (ts, len, at) in records {
        let (head, tail) = format.framing(len as usize);
        let at = offset + at as u64;
        if head > 0 {
            framing.clear();
            format.record_head(ts, len, &mut framing);
            host.write_all_at(&framing, at)?;
        }
        if tail > 0 {
            framing.clear();
            format.record_tail(len, &mut framing);
            host.write_all_at(&framing, at + (head + len as usize) as u64)?;
        }
    }
    Ok(())
}

/// Copies packets `(i, at)` of `burst` (segments joined) into `staging` at `at`, and
/// waits for the copies: once it returns, the burst's buffers may be reused. With
/// `kernels`, the segments in GPU memory go in one copy kernel launch per
/// [`gpudirect::MAX_ITEMS`] segments; without, one driver copy each.
pub(super) fn gather_packets(
    staging: &DeviceStaging,
    mut kernels: Option<&mut gpudirect::Gpu>,
    burst: &Burst,
    placed: &[(usize, usize)],
) -> Result<(), gpudirect::GpuError> {
    let mut queued = Ok(());
    let mut items: Vec<(u64, u64, u32)> = Vec::new();
    'packets: for &(i, mut at) in placed {
        for (s, seg) in burst.packets()[i].segments().iter().enumerate() {
            let len = seg.len as usize;
            assert!(
                at.checked_add(len).is_some_and(|end| end <= staging.len()),
                "a packet placed past the end of a device staging buffer"
            );
            let copied = match (burst.data(i, s), &kernels) {
                (Some(d), _) => staging.copy_in_host(at, d),
                (None, Some(_)) => {
                    let dst = staging.device_ptr() + at as u64;
                    items.push((burst.segment_addr(i, s), dst, seg.len));
                    Ok(())
                }
                // SAFETY: the segment is `len` bytes of GPU memory owned by `burst`, which
                // the caller holds until this function returns, and the copies are waited
                // for below before returning.
                (None, None) => unsafe { staging.copy_in(at, burst.segment_addr(i, s), len) },
            };
            if let Err(e) = copied {
                queued = Err(e);
                break 'packets;
            }
            at += len;
        }
    }
    if let Some(gpu) = kernels.as_deref_mut()
        && queued.is_ok()
        && !items.is_empty()
    {
        queued = gpu.bind();
        for part in items.chunks(gpudirect::MAX_ITEMS) {
            if queued.is_err() {
                break;
            }
            // SAFETY: each source is a segment of GPU memory `burst` holds, each
            // destination lies inside `staging` (checked above); both stay valid until
            // the sync right after, before this function returns. The sync also frees
            // the argument table for the next part.
            queued = unsafe { gpu.batched_copy(part) }.and_then(|()| gpu.sync());
        }
    }
    // Waited for even after a failed copy: the queued ones still read the burst.
    let launched = kernels.map_or(Ok(()), |gpu| gpu.sync());
    let waited = staging.wait();
    queued.and(launched).and(waited)
}

fn write_loop(
    mut out: FileOut,
    format: CaptureFormat,
    rx: Receiver<Filled>,
    give_back: mpsc::Sender<DeviceStaging>,
    shared: &Shared,
    path: &Path,
) -> Result<(), CaptureError> {
    let failed = |reason: String| CaptureError::Gpu {
        path: path.to_owned(),
        reason,
    };
    // Ends when the sink drops its sender (finish or drop).
    while let Ok(f) = rx.recv() {
        out.write(format, &f).map_err(|e| failed(e.to_string()))?;
        shared
            .written_packets
            .fetch_add(f.records.len() as u64, Ordering::Relaxed);
        let bytes: u64 = f.records.iter().map(|r| u64::from(r.len)).sum();
        shared.written_bytes.fetch_add(bytes, Ordering::Relaxed);
        let _ = give_back.send(f.staging);
    }
    Ok(())
}
