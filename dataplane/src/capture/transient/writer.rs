//! The writer thread of a transient buffer: one file per window, the chunks written as
//! they come, from host memory or (GPU chunks) through cuFile or copied out first.

use super::chunks::Chunk;
#[cfg(feature = "cuda")]
use super::chunks::Store;
use crate::capture::{CaptureFormat, file_header};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Work for the writer thread.
pub(super) enum Job {
    /// Start window file `path` (registered with cuFile for GPU chunks).
    Open(PathBuf),
    /// Records `from..to` of a chunk.
    Write(Arc<Chunk>, usize, usize),
    /// Close the file.
    Close,
}

#[derive(Default)]
pub(super) struct WriterCounters {
    pub(super) windows_written: AtomicU64,
    pub(super) written_packets: AtomicU64,
    pub(super) windows_failed: AtomicU64,
    /// Why the last window failed.
    pub(super) last_failure: std::sync::Mutex<Option<String>>,
}

/// How windows of GPU chunks reach their files, decided once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GpuWrites {
    /// Through cuFile, from GPU memory (the file registered open with `O_DIRECT`, the
    /// record framing written through an ordinary descriptor of the same file).
    Gds,
    /// cuFile refused the file system: each range copied to the host, then written.
    Staged,
}

/// A window's file as the writer has it.
pub(super) enum WindowFile {
    /// Written in order from host memory (host chunks, or GPU chunks copied out).
    Plain(std::fs::File),
    /// GPU chunks written through cuFile, and the offset the next bytes go to.
    #[cfg(feature = "cuda")]
    Gds {
        direct: gpudirect::gds::GdsFile,
        host: std::fs::File,
        offset: u64,
    },
}

impl WindowFile {
    /// Creates `path` with the format's header; registered with cuFile when GPU chunks
    /// go to it through cuFile (`gds`: the GPU's ordinal).
    pub(super) fn open(
        path: &std::path::Path,
        format: CaptureFormat,
        gds: Option<u32>,
    ) -> Result<Self, String> {
        let mut f = crate::files::create_output(path).map_err(|e| format!("creating: {e}"))?;
        let header = file_header(format);
        f.write_all(&header)
            .map_err(|e| format!("writing the header: {e}"))?;
        #[cfg(feature = "cuda")]
        if let Some(gpu) = gds {
            return Ok(WindowFile::Gds {
                direct: crate::capture::gpu::register_direct(path, gpu)?,
                host: f,
                offset: header.len() as u64,
            });
        }
        let _ = gds;
        Ok(WindowFile::Plain(f))
    }

    /// Records `from..to` of `chunk`.
    fn write(
        &mut self,
        format: CaptureFormat,
        chunk: &Chunk,
        from: usize,
        to: usize,
    ) -> Result<(), String> {
        let (start, end) = (chunk.offset(from), chunk.offset(to));
        let _ = format; // GPU chunks only: the host ones hold their framing
        match (self, &chunk.store) {
            #[cfg(feature = "cuda")]
            (
                WindowFile::Gds {
                    direct,
                    host,
                    offset,
                },
                Store::Device(staging),
            ) => {
                let records = chunk.records[from..to]
                    .iter()
                    .map(|r| (r.ts, r.len, r.at as usize - start));
                crate::capture::gpu::write_framed(
                    direct,
                    host,
                    staging,
                    start..end,
                    *offset,
                    format,
                    records,
                )
                .map_err(|e| {
                    format!("writing bytes {start}..{end} of a GPU chunk at {offset}: {e}")
                })?;
                *offset += (end - start) as u64;
                Ok(())
            }
            #[cfg(feature = "cuda")]
            (WindowFile::Plain(f), Store::Device(staging)) => {
                let records = chunk.records[from..to]
                    .iter()
                    .map(|r| (r.ts, r.len, r.at as usize - start));
                crate::capture::gpu::write_staged(f, staging, start..end, format, records)
                    .map_err(|e| format!("copying out bytes {start}..{end} of a GPU chunk: {e}"))
            }
            (WindowFile::Plain(f), store) => match store.host() {
                Some(bytes) => f.write_all(&bytes[start..end]).map_err(|e| e.to_string()),
                None => Err("a GPU chunk without the cuda feature".into()),
            },
            #[cfg(feature = "cuda")]
            (WindowFile::Gds { .. }, _) => Err("a host chunk for a cuFile window".into()),
        }
    }
}

/// The writer thread: one file per window, chunks written as they come.
pub(super) fn write_windows(
    jobs: mpsc::Receiver<Job>,
    format: CaptureFormat,
    gds: Option<u32>,
    counters: &WriterCounters,
) {
    let mut file: Option<(PathBuf, Result<WindowFile, String>, u64)> = None;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Open(path) => {
                let f = WindowFile::open(&path, format, gds);
                file = Some((path, f, 0));
            }
            Job::Write(chunk, from, to) => {
                if let Some((_, result, packets)) = &mut file
                    && let Ok(f) = result
                {
                    match f.write(format, &chunk, from, to) {
                        Ok(()) => *packets += (to - from) as u64,
                        Err(e) => *result = Err(e),
                    }
                }
            }
            Job::Close => match file.take() {
                Some((_, Ok(_), packets)) => {
                    counters.windows_written.fetch_add(1, Ordering::Relaxed);
                    counters
                        .written_packets
                        .fetch_add(packets, Ordering::Relaxed);
                }
                Some((path, Err(e), _)) => {
                    tracing::error!("transient capture {}: {e}", path.display());
                    counters.windows_failed.fetch_add(1, Ordering::Relaxed);
                    *counters
                        .last_failure
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(e);
                }
                None => {}
            },
        }
    }
}
