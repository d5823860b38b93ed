//! The transient buffer: a capture sink that keeps the last `keep_bytes` of a queue's
//! packets in memory, framed as the file has them, and writes a file only when triggered:
//! the packets received from `before_ns` before the trigger to `after_ns` after it, with
//! their receive timestamps.
//!
//! The queue's thread copies each packet into the chunk being filled (as the capture sink
//! does) and nothing more; full chunks join the history, the oldest leaving it when it
//! holds more than `keep_bytes`. Chunks live where `keep_in` says: the heap (1 MiB each,
//! allocated as needed), page-locked host memory (1 MiB each) or the queue's GPU (4 MiB
//! each, filled by device-to-device copies and written through cuFile, the record headers
//! of pcap and pcapng written around them from the host). Page-locked and GPU chunks are
//! allocated at start, `keep_bytes` of them and a few more for those the writer still
//! holds; a chunk that leaves the history is used again once the writer is done with it.
//! When none is free the packet is counted as `not_kept` (the queue still delivers it). A trigger (an API call, a signal or HTTP request through
//! [`TransientTrigger`], or a packet that matches the queue's predicate) hands the
//! history's chunks that reach into the window to the writer thread by reference, then
//! every chunk filled until the window ends: no copy and no wait on the queue's thread,
//! so ingest goes on at full rate. A trigger while a window is open extends nothing; it
//! is counted as `triggers_merged`.

mod chunks;
mod writer;

use super::{CaptureError, CaptureFormat};
use crate::burst::Burst;
use crate::config::MemoryKind;
#[cfg(feature = "cuda")]
use chunks::Store;
use chunks::{Chunk, ChunkPool, Record};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use writer::{GpuWrites, Job, WindowFile, WriterCounters, write_windows};

/// A packet predicate that fires the trigger: `bytes` at `offset` of the packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerMatch {
    /// Where in the packet (its first segment, then the next) the bytes start.
    pub offset: usize,
    /// The bytes to match.
    pub bytes: Vec<u8>,
}

/// What a transient sink keeps and writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransientConfig {
    /// Files are this path with `_N` (1, 2, ...) before the extension.
    pub path: PathBuf,
    /// pcap, pcapng or raw.
    pub format: CaptureFormat,
    /// Bytes of framed packets kept (at least one chunk, 1 MiB).
    pub keep_bytes: usize,
    /// Also drop chunks whose packets are all older than this (0: keep by bytes alone).
    pub keep_ns: u64,
    /// The window starts this long before the trigger.
    pub before_ns: u64,
    /// And ends this long after it.
    pub after_ns: u64,
    /// Packets that fire the trigger themselves (host memory only).
    pub trigger_on: Option<TriggerMatch>,
    /// Where the kept packets live: `Host`, `HostPinned` or `Device` (the queue's packets
    /// must then be in that GPU's memory).
    pub keep_in: MemoryKind,
    /// The GPU of `Device` chunks (and whose context allocates `HostPinned` ones).
    pub gpu: u32,
}

/// Fires a transient sink from any thread: the time of the latest trigger not yet taken.
#[derive(Debug, Default)]
pub struct TransientTrigger {
    at_ns: AtomicU64,
}

/// Every trigger made by [`TransientTrigger::registered`] in this process, held weakly.
static REGISTERED: std::sync::Mutex<Vec<std::sync::Weak<TransientTrigger>>> =
    std::sync::Mutex::new(Vec::new());

/// Fires every live transient buffer of every plane in this process now (what the
/// command line does on SIGUSR1); returns how many.
pub fn fire_all_transients() -> usize {
    let mut list = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    let at = super::now_ns();
    list.iter()
        .filter_map(std::sync::Weak::upgrade)
        .map(|t| t.fire_at(at))
        .count()
}

impl TransientTrigger {
    /// A trigger that [`fire_all_transients`] also fires.
    pub fn registered() -> Arc<Self> {
        let t = Arc::new(Self::default());
        let mut list = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
        // Planes come and go in a long-lived process: forget the triggers of ended ones.
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&t));
        t
    }

    /// Fires at `at_ns` (nanoseconds since the epoch, the clock of the packets' receive
    /// timestamps); the sink opens the window the next time the queue is polled.
    pub fn fire_at(&self, at_ns: u64) {
        self.at_ns.store(at_ns.max(1), Ordering::Release);
    }

    /// Fires now.
    pub fn fire(&self) {
        self.fire_at(super::now_ns());
    }

    fn take(&self) -> Option<u64> {
        match self.at_ns.swap(0, Ordering::AcqRel) {
            0 => None,
            t => Some(t),
        }
    }
}

/// What a transient sink did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct TransientStats {
    /// Triggers that opened a window.
    pub triggers: u64,
    /// Triggers while a window was open (they open none).
    pub triggers_merged: u64,
    /// Windows whose files were written and closed.
    pub windows_written: u64,
    /// Packets written into window files.
    pub written_packets: u64,
    /// Windows whose files failed (the error is logged).
    pub windows_failed: u64,
    /// Packets delivered but not kept: no chunk was free (the writer held them all), the
    /// packet was larger than a chunk, or a GPU copy failed (logged).
    pub not_kept: u64,
    /// Windows of GPU chunks go to their files through cuFile (GPUDirect Storage);
    /// false when the chunks are in host memory, or cuFile refused the file system and
    /// each window is copied to the host first.
    pub through_cufile: bool,
}

/// The open window: it takes every packet up to `end_ns`.
struct Window {
    end_ns: u64,
}

/// The transient sink (see the module documentation).
pub(crate) struct TransientSink {
    cfg: TransientConfig,
    trigger: Arc<TransientTrigger>,
    history: std::collections::VecDeque<Arc<Chunk>>,
    history_bytes: usize,
    filling: Option<Chunk>,
    pool: ChunkPool,
    /// Packets of the chunk being filled whose bytes are still to be copied in by the
    /// GPU: (packet of the burst, offset of its bytes).
    #[cfg(feature = "cuda")]
    to_gather: Vec<(usize, usize)>,
    /// The copy kernel that gathers packets into GPU chunks (per-segment driver copies
    /// where NVRTC is missing).
    #[cfg(feature = "cuda")]
    kernels: Option<gpudirect::Gpu>,
    not_kept: u64,
    through_cufile: bool,
    /// A record header or trailer being made.
    framing: Vec<u8>,
    window: Option<Window>,
    next_file: u64,
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    counters: Arc<WriterCounters>,
    triggers: u64,
    triggers_merged: u64,
}

impl TransientSink {
    /// Starts the writer thread; files are created when a window opens.
    pub(crate) fn create(
        cfg: &TransientConfig,
        trigger: Arc<TransientTrigger>,
    ) -> Result<Self, CaptureError> {
        let pool = ChunkPool::new(cfg).map_err(|reason| CaptureError::Gpu {
            path: cfg.path.clone(),
            reason,
        })?;
        let on_gpu = (cfg.keep_in == MemoryKind::Device).then_some(cfg.gpu);
        // Window files must be possible before the first trigger (a bad path fails at
        // start); for GPU chunks, a probe file says whether cuFile takes the file system.
        let probe = |gds| {
            let path = super::with_suffix(&cfg.path, "_probe");
            let opened = WindowFile::open(&path, cfg.format, gds).map(drop);
            let _ = std::fs::remove_file(&path);
            opened
        };
        probe(None).map_err(|reason| CaptureError::Gpu {
            path: cfg.path.clone(),
            reason,
        })?;
        let gpu_writes = on_gpu.map(|gpu| match probe(Some(gpu)) {
            Ok(()) => GpuWrites::Gds,
            Err(reason) => {
                tracing::warn!(
                    "transient capture {}: cuFile cannot write there ({reason}); windows are copied from GPU memory and written by the host",
                    cfg.path.display()
                );
                GpuWrites::Staged
            }
        });
        let gds = on_gpu.filter(|_| gpu_writes == Some(GpuWrites::Gds));
        let (jobs, rx) = mpsc::channel();
        let counters = Arc::new(WriterCounters::default());
        let c = counters.clone();
        let format = cfg.format;
        let writer = std::thread::Builder::new()
            .name("dp-transient".into())
            .spawn(move || write_windows(rx, format, gds, &c))
            .map_err(|source| CaptureError::Io {
                path: cfg.path.clone(),
                source,
            })?;
        Ok(Self {
            cfg: cfg.clone(),
            trigger,
            history: Default::default(),
            history_bytes: 0,
            filling: None,
            pool,
            #[cfg(feature = "cuda")]
            to_gather: Vec::new(),
            #[cfg(feature = "cuda")]
            kernels: match on_gpu.map(gpudirect::Gpu::new) {
                Some(Ok(gpu)) => Some(gpu),
                Some(Err(e)) => {
                    tracing::warn!(
                        "transient capture {}: no copy kernel ({e}): one driver copy per packet",
                        cfg.path.display()
                    );
                    None
                }
                None => None,
            },
            not_kept: 0,
            through_cufile: gds.is_some(),
            framing: Vec::new(),
            window: None,
            next_file: 1,
            jobs: Some(jobs),
            writer: Some(writer),
            counters,
            triggers: 0,
            triggers_merged: 0,
        })
    }

    /// The file of window `n`: `_n` before the path's extension.
    fn file(&self, n: u64) -> PathBuf {
        super::with_suffix(&self.cfg.path, &format!("_{n}"))
    }

    fn send(&self, job: Job) {
        if let Some(j) = &self.jobs {
            // The writer only ends when the sink closes; a send cannot fail before.
            let _ = j.send(job);
        }
    }

    /// Takes a burst: its packets into the history (in host memory, only packets the CPU
    /// can read: the caller counts the rest, returned), opening and closing windows as
    /// triggers and timestamps say. Returns once every copy out of the burst is done.
    pub(crate) fn submit(&mut self, burst: &Burst) -> u64 {
        // The clock is read only for a burst with packets the engine did not stamp.
        let fallback = std::cell::OnceCell::new();
        if let Some(at) = self.trigger.take() {
            self.fire(at);
        }
        let on_gpu = self.cfg.keep_in == MemoryKind::Device;
        let mut not_host = 0;
        for (i, p) in burst.packets().iter().enumerate() {
            let segments = p.segments().len();
            if !on_gpu && (0..segments).any(|s| burst.data(i, s).is_none()) {
                not_host += 1;
                continue;
            }
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(super::now_ns),
                t => t,
            };
            if self.window.as_ref().is_some_and(|w| ts > w.end_ns) {
                self.gather(burst);
                self.close_window();
            }
            let len = p.len();
            let (head, tail) = self.cfg.format.framing(len);
            let need = head + len + tail;
            if self
                .filling
                .as_ref()
                .is_some_and(|c| c.used + need > c.store.capacity())
            {
                self.gather(burst);
                self.seal();
            }
            if self.filling.is_none() {
                self.filling = self.pool.take();
            }
            let format = self.cfg.format;
            let Some(c) = self.filling.as_mut().filter(|c| need <= c.store.capacity()) else {
                self.not_kept += 1;
                continue;
            };
            let at = c.used;
            match c.store.host_mut() {
                Some(bytes) => {
                    self.framing.clear();
                    format.record_head(ts, len as u32, &mut self.framing);
                    let mut to = at + head;
                    bytes[at..to].copy_from_slice(&self.framing);
                    for s in 0..segments {
                        let d = burst.data(i, s).expect("checked above");
                        bytes[to..to + d.len()].copy_from_slice(d);
                        to += d.len();
                    }
                    self.framing.clear();
                    format.record_tail(len as u32, &mut self.framing);
                    bytes[to..to + tail].copy_from_slice(&self.framing);
                }
                #[cfg(feature = "cuda")]
                None => self.to_gather.push((i, at + head)),
                #[cfg(not(feature = "cuda"))]
                None => unreachable!("GPU chunks need the cuda feature"),
            }
            c.records.push(Record {
                at: at as u32,
                len: len as u32,
                ts,
            });
            c.used += need;
            if let Some(m) = &self.cfg.trigger_on
                && matches(burst, i, m)
            {
                self.gather(burst);
                self.fire(ts);
            }
        }
        self.gather(burst);
        not_host
    }

    /// Copies the packets of `burst` placed in the GPU chunk being filled into it, and
    /// waits for the copies; packets whose copy failed are taken out of the chunk.
    fn gather(&mut self, burst: &Burst) {
        #[cfg(feature = "cuda")]
        if !self.to_gather.is_empty()
            && let Some(c) = &mut self.filling
            && let Store::Device(staging) = &c.store
        {
            if let Err(e) =
                super::gpu::gather_packets(staging, self.kernels.as_mut(), burst, &self.to_gather)
            {
                if self.not_kept == 0 {
                    tracing::error!("transient capture {}: {e}", self.cfg.path.display());
                }
                // The copies' outcome is unknown: forget this burst's packets.
                let first = c.records.len() - self.to_gather.len();
                self.not_kept += self.to_gather.len() as u64;
                c.used = c.offset(first);
                c.records.truncate(first);
            }
            self.to_gather.clear();
        }
        let _ = burst;
    }

    /// Moves the chunk being filled into the history (and to the open window's file);
    /// its packets are all copied in ([`Self::gather`] first).
    fn seal(&mut self) {
        let Some(chunk) = self.filling.take() else {
            return;
        };
        if chunk.records.is_empty() {
            self.filling = Some(chunk);
            return;
        }
        let chunk = Arc::new(chunk);
        if self.window.is_some() {
            self.send(Job::Write(chunk.clone(), 0, chunk.records.len()));
        }
        self.history_bytes += chunk.used;
        self.history.push_back(chunk);
        let newest = self.history.back().map_or(0, |c| c.last_ts());
        while self.history.len() > 1
            && (self.history_bytes > self.cfg.keep_bytes
                || (self.cfg.keep_ns > 0 && self.history[0].last_ts() + self.cfg.keep_ns < newest))
        {
            let old = self.history.pop_front().expect("not empty");
            self.history_bytes -= old.used;
            self.pool.retired.push(old);
        }
    }

    /// A trigger at `at`: opens a window from `at - before` to `at + after`, its earlier
    /// part handed to the writer from the history now.
    fn fire(&mut self, at: u64) {
        if self.window.is_some() {
            self.triggers_merged += 1;
            return;
        }
        self.triggers += 1;
        let n = self.next_file;
        self.next_file += 1;
        self.send(Job::Open(self.file(n)));
        // What is being filled joins the history first, so the window starts from whole
        // chunks and every later chunk goes to the file as it is sealed.
        self.seal();
        let start = at.saturating_sub(self.cfg.before_ns);
        let first = self
            .history
            .iter()
            .position(|c| c.last_ts() >= start)
            .unwrap_or(self.history.len());
        for c in self.history.iter().skip(first) {
            let from = c.records.partition_point(|r| r.ts < start);
            self.send(Job::Write(c.clone(), from, c.records.len()));
        }
        self.window = Some(Window {
            end_ns: at.saturating_add(self.cfg.after_ns),
        });
    }

    /// Ends the open window: the packets filled so far (all within it) go to its file,
    /// which is closed.
    fn close_window(&mut self) {
        self.seal();
        self.send(Job::Close);
        self.window = None;
    }

    /// Counters so far (the writer's as of its last window).
    pub(crate) fn stats(&self) -> TransientStats {
        TransientStats {
            triggers: self.triggers,
            triggers_merged: self.triggers_merged,
            windows_written: self.counters.windows_written.load(Ordering::Relaxed),
            written_packets: self.counters.written_packets.load(Ordering::Relaxed),
            windows_failed: self.counters.windows_failed.load(Ordering::Relaxed),
            not_kept: self.not_kept,
            through_cufile: self.through_cufile,
        }
    }

    /// Closes an open window (with what it has so far) and waits for the writer; an
    /// error names the last window file that failed.
    pub(crate) fn close(&mut self) -> Result<(), CaptureError> {
        if self.window.is_some() {
            // Nothing is left to gather: every submit gathered its burst.
            self.close_window();
        }
        self.jobs = None;
        if let Some(w) = self.writer.take()
            && w.join().is_err()
        {
            return Err(CaptureError::Panicked(self.cfg.path.clone()));
        }
        let failed = self.counters.windows_failed.load(Ordering::Relaxed);
        let reason = self
            .counters
            .last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match reason {
            Some(reason) if failed > 0 => Err(CaptureError::WindowsFailed {
                path: self.cfg.path.clone(),
                failed,
                reason,
            }),
            _ => Ok(()),
        }
    }
}

/// True when packet `i` of `burst` has `m.bytes` at `m.offset` (across its segments).
fn matches(burst: &Burst, i: usize, m: &TriggerMatch) -> bool {
    let mut want = m.bytes.as_slice();
    let mut skip = m.offset;
    let segments = burst.packets()[i].segments().len();
    for s in 0..segments {
        let Some(d) = burst.data(i, s) else {
            return false;
        };
        if skip >= d.len() {
            skip -= d.len();
            continue;
        }
        let here = &d[skip..];
        skip = 0;
        let n = here.len().min(want.len());
        if here[..n] != want[..n] {
            return false;
        }
        want = &want[n..];
        if want.is_empty() {
            return true;
        }
    }
    want.is_empty()
}
