//! The GPU sink: packets in GPU memory gathered into device staging buffers (one copy
//! kernel launch per burst where the kernel loads) and written to the file, one write per
//! 4 MiB buffer: through cuFile (GPUDirect Storage) where the file system takes a file
//! opened with `O_DIRECT`, else copied to the host first (decided when the file is
//! created; the log says which).
//!
//! A buffer's layout is the file's: for pcap and pcapng each packet's bytes sit where the
//! file has them, with gaps for the record headers (and pcapng's padding and trailing
//! length), which the writer fills in from the host. Raw per packet writes each packet
//! from the buffer into a file of its own.
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
    queue: Option<SyncSender<Filled>>,
    writer: Option<JoinHandle<Result<(), CaptureError>>>,
    shared: Arc<Shared>,
    submitted: u64,
    writer_full: u64,
    copy_failed: u64,
    /// The copy kernel gathering a burst's packets in one launch (`None`: it did not
    /// load; one driver copy per segment).
    kernels: Option<gpudirect::Gpu>,
    /// Packets of the burst being submitted placed in the buffer being filled, not yet
    /// copied: (packet, offset of its bytes).
    placed: Vec<(usize, usize)>,
    /// The file goes through cuFile (else copies through the host).
    through_cufile: bool,
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
        let out = FileOut::open(&cfg.path, cfg.format, ordinal).map_err(|e| match e {
            FileError::Io(e) => io(e),
            FileError::Gpu(e) => gpu(e),
        })?;
        let kernels = match gpudirect::Gpu::new(ordinal) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(
                    "capture to {}: no copy kernel ({e}): one driver copy per segment",
                    cfg.path.display()
                );
                None
            }
        };
        let depth = (cfg.queue_bytes / BATCH_BYTES).max(2);
        let free = (0..depth)
            .map(|_| DeviceStaging::alloc(ordinal, BATCH_BYTES))
            .collect::<Result<Vec<_>, _>>()
            .map_err(gpu)?;
        let through_cufile = out.through_cufile();
        let (tx, rx) = mpsc::sync_channel(depth);
        let (give_back, returned) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let (s, path, format) = (shared.clone(), cfg.path.clone(), cfg.format);
        let writer = std::thread::Builder::new()
            .name("dp-capture-gds".into())
            .spawn(move || write_loop(out, format, rx, give_back, &s, &path))
            .map_err(io)?;
        if through_cufile {
            tracing::info!(
                "capture to {}: packets in GPU {ordinal} memory written through cuFile ({} mode)",
                cfg.path.display(),
                gpudirect::gds::storage_mode()
            );
        }
        Ok(Self {
            path: cfg.path.clone(),
            format: cfg.format,
            free,
            returned,
            filling: None,
            queue: Some(tx),
            writer: Some(writer),
            shared,
            submitted: 0,
            writer_full: 0,
            copy_failed: 0,
            kernels,
            placed: Vec::new(),
            through_cufile,
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
                self.gather(burst);
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
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(now_ns),
                t => t,
            };
            f.records.push(Record {
                ts,
                len: len as u32,
                at: (f.used + head) as u32,
            });
            self.placed.push((i, f.used + head));
            f.used += need;
        }
        self.gather(burst);
    }

    /// Copies the packets of `burst` placed in the buffer being filled into it and waits
    /// for the copies; packets whose copy failed are taken out of the buffer.
    fn gather(&mut self, burst: &Burst) {
        if self.placed.is_empty() {
            return;
        }
        let Some(f) = &mut self.filling else {
            self.placed.clear();
            return;
        };
        if let Err(e) = gather_packets(&f.staging, self.kernels.as_mut(), burst, &self.placed) {
            if self.copy_failed == 0 {
                tracing::error!("capture to {}: {e}", self.path.display());
            }
            // The copies' outcome is unknown: forget this burst's packets.
            let first = f.records.len() - self.placed.len();
            let head = self.format.framing(f.records[first].len as usize).0;
            f.used = f.records[first].at as usize - head;
            f.records.truncate(first);
            self.copy_failed += self.placed.len() as u64;
        }
        self.placed.clear();
    }

    /// Sends the buffer being filled to the writer.
    fn hand_over(&mut self) {
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
            through_cufile: self.through_cufile,
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
    /// One file written through cuFile: its `O_DIRECT` registration, an ordinary
    /// descriptor for the record framing, and the offset its next bytes go to.
    Gds {
        direct: GdsFile,
        host: std::fs::File,
        offset: u64,
    },
    /// One file cuFile does not take (or a pipe): each buffer copied to the host and
    /// written there, framing filled in.
    Staged(std::fs::File),
    /// A directory of one file per packet, written through cuFile when `gds` (the GPU's
    /// ordinal), else copied out first.
    PerPacket {
        dir: PathBuf,
        next: u64,
        gds: Option<u32>,
    },
}

impl FileOut {
    /// Creates the file (or directory) and finds out whether cuFile takes it: a bad path
    /// fails here, at start; a file system without GPUDirect Storage falls back to
    /// copies through the host, with a warning.
    fn open(path: &Path, format: CaptureFormat, gpu: u32) -> Result<Self, FileError> {
        let refused = |e: &str| {
            tracing::warn!(
                "capture to {}: cuFile does not take it ({e}): each 4 MiB buffer is copied to the host and written from there",
                path.display()
            );
        };
        if format == CaptureFormat::RawPerPacket {
            crate::files::output_dir(path).map_err(FileError::Io)?;
            let probe = path.join(".cufile-probe");
            crate::files::create_new(&probe).map_err(FileError::Io)?;
            let registered = register_direct(&probe, gpu).map(drop);
            let _ = std::fs::remove_file(&probe);
            if let Err(e) = &registered {
                refused(e);
            }
            return Ok(FileOut::PerPacket {
                dir: path.to_owned(),
                next: 0,
                gds: registered.is_ok().then_some(gpu),
            });
        }
        let mut file = crate::files::create_output(path).map_err(FileError::Io)?;
        let header = file_header(format);
        file.write_all(&header).map_err(FileError::Io)?;
        match register_direct(path, gpu) {
            Ok(direct) => Ok(FileOut::Gds {
                direct,
                host: file,
                offset: header.len() as u64,
            }),
            Err(e) => {
                refused(&e);
                Ok(FileOut::Staged(file))
            }
        }
    }

    /// True when the bytes go through cuFile.
    fn through_cufile(&self) -> bool {
        matches!(
            self,
            FileOut::Gds { .. } | FileOut::PerPacket { gds: Some(_), .. }
        )
    }

    fn write(&mut self, format: CaptureFormat, f: &Filled) -> Result<(), FileError> {
        let records = f.records.iter().map(|r| {
            let head = format.framing(r.len as usize).0;
            (r.ts, r.len, r.at as usize - head)
        });
        match self {
            FileOut::Gds {
                direct,
                host,
                offset,
            } => {
                write_framed(
                    direct,
                    host,
                    &f.staging,
                    0..f.used,
                    *offset,
                    format,
                    records,
                )?;
                *offset += f.used as u64;
            }
            FileOut::Staged(file) => write_staged(file, &f.staging, 0..f.used, format, records)?,
            FileOut::PerPacket { dir, next, gds } => {
                for r in &f.records {
                    let path = dir.join(format!("{next:012}.bin"));
                    let mut file = crate::files::create_new(&path)?;
                    match gds {
                        Some(gpu) => register_direct(&path, *gpu)
                            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?
                            .write(&f.staging, r.at as usize, r.len as usize, 0)?,
                        None => {
                            let mut bytes = vec![0u8; r.len as usize];
                            f.staging.read(r.at as usize, &mut bytes)?;
                            file.write_all(&bytes)?;
                        }
                    }
                    *next += 1;
                }
            }
        }
        Ok(())
    }
}

/// Opens `path` (an existing file) again with `O_DIRECT` and registers that descriptor
/// with cuFile, in GPU `gpu`'s context (the driver opens cuFile on the first
/// registration, in the calling thread's context).
pub(super) fn register_direct(path: &Path, gpu: u32) -> Result<GdsFile, String> {
    use std::os::unix::fs::OpenOptionsExt;
    gpudirect::bind_context(gpu).map_err(|e| e.to_string())?;
    let direct = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("opening with O_DIRECT: {e}"))?;
    GdsFile::register(direct).map_err(|e| format!("registering with cuFile: {e}"))
}

/// Copies bytes `range` of `staging` to the host, fills in the record headers and
/// trailers of `records` (as for [`write_framed`]) and appends the whole to `file`.
pub(super) fn write_staged(
    file: &mut std::fs::File,
    staging: &DeviceStaging,
    range: std::ops::Range<usize>,
    format: CaptureFormat,
    records: impl Iterator<Item = (u64, u32, usize)>,
) -> Result<(), FileError> {
    let mut bytes = vec![0u8; range.len()];
    staging.read(range.start, &mut bytes)?;
    let mut framing = Vec::new();
    for (ts, len, at) in records {
        let (head, tail) = format.framing(len as usize);
        framing.clear();
        format.record_head(ts, len, &mut framing);
        bytes[at..at + head].copy_from_slice(&framing);
        framing.clear();
        format.record_tail(len, &mut framing);
        let after = at + head + len as usize;
        bytes[after..after + tail].copy_from_slice(&framing);
    }
    file.write_all(&bytes)?;
    Ok(())
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
