//! The transient buffer: a capture sink that keeps the last `keep_bytes` of a queue's
//! packets in memory, framed as the file has them, and writes a file only when triggered:
//! the packets received from `before_ns` before the trigger to `after_ns` after it, with
//! their receive timestamps.
//!
//! The queue's thread copies each packet into the chunk being filled (as the capture sink
//! does) and nothing more; full chunks join the history, the oldest leaving it when it
//! holds more than `keep_bytes`. A trigger (an API call, a signal or HTTP request through
//! [`TransientTrigger`], or a packet that matches the queue's predicate) hands the
//! history's chunks that reach into the window to the writer thread by reference, then
//! every chunk filled until the window ends: no copy and no wait on the queue's thread,
//! so ingest goes on at full rate. A trigger while a window is open extends nothing; it
//! is counted as `triggers_merged`.

use super::{CaptureError, CaptureFormat, file_header};
use crate::burst::Burst;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Bytes per chunk of the history (the unit chunks are kept, dropped and written in).
const CHUNK_BYTES: usize = 1 << 20;

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
    /// Packets that fire the trigger themselves.
    pub trigger_on: Option<TriggerMatch>,
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
}

/// Framed packets, and where each starts and when it arrived.
#[derive(Default)]
struct Chunk {
    data: Vec<u8>,
    /// (offset of its record in `data`, receive time) per packet.
    records: Vec<(u32, u64)>,
}

impl Chunk {
    fn last_ts(&self) -> u64 {
        self.records.last().map_or(0, |r| r.1)
    }

    /// Byte offset of record `i` (`data.len()` past the last).
    fn offset(&self, i: usize) -> usize {
        self.records
            .get(i)
            .map_or(self.data.len(), |r| r.0 as usize)
    }
}

/// Work for the writer thread.
enum Job {
    /// Start window file `path`.
    Open(PathBuf),
    /// Records `from..to` of a chunk.
    Write(Arc<Chunk>, usize, usize),
    /// Close the file.
    Close,
}

/// The open window: it takes every packet up to `end_ns`.
struct Window {
    end_ns: u64,
}

#[derive(Default)]
struct WriterCounters {
    windows_written: AtomicU64,
    written_packets: AtomicU64,
    windows_failed: AtomicU64,
}

/// The transient sink (see the module documentation).
pub(crate) struct TransientSink {
    cfg: TransientConfig,
    trigger: Arc<TransientTrigger>,
    history: std::collections::VecDeque<Arc<Chunk>>,
    history_bytes: usize,
    filling: Chunk,
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
        let (jobs, rx) = mpsc::channel();
        let counters = Arc::new(WriterCounters::default());
        let c = counters.clone();
        let format = cfg.format;
        let writer = std::thread::Builder::new()
            .name("dp-transient".into())
            .spawn(move || write_windows(rx, format, &c))
            .map_err(|source| CaptureError::Io {
                path: cfg.path.clone(),
                source,
            })?;
        Ok(Self {
            cfg: cfg.clone(),
            trigger,
            history: Default::default(),
            history_bytes: 0,
            filling: Chunk::default(),
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

    /// Takes a burst: its packets into the history (host memory only; the caller counts
    /// the rest), opening and closing windows as triggers and timestamps say.
    pub(crate) fn submit(&mut self, burst: &Burst) -> u64 {
        // The clock is read only for a burst with packets the engine did not stamp.
        let fallback = std::cell::OnceCell::new();
        if let Some(at) = self.trigger.take() {
            self.fire(at);
        }
        let mut not_host = 0;
        for (i, p) in burst.packets().iter().enumerate() {
            let segments = p.segments().len();
            if (0..segments).any(|s| burst.data(i, s).is_none()) {
                not_host += 1;
                continue;
            }
            let ts = match p.timestamp_ns {
                0 => *fallback.get_or_init(super::now_ns),
                t => t,
            };
            if self.window.as_ref().is_some_and(|w| ts > w.end_ns) {
                self.close_window();
            }
            let len = p.len() as u32;
            let c = &mut self.filling;
            c.records.push((c.data.len() as u32, ts));
            self.cfg.format.record_head(ts, len, &mut c.data);
            for s in 0..segments {
                c.data
                    .extend_from_slice(burst.data(i, s).expect("checked above"));
            }
            self.cfg.format.record_tail(len, &mut c.data);
            if let Some(m) = &self.cfg.trigger_on
                && matches(burst, i, m)
            {
                self.fire(ts);
            }
            if self.filling.data.len() >= CHUNK_BYTES {
                self.seal();
            }
        }
        not_host
    }

    /// Moves the chunk being filled into the history (and to the open window's file).
    fn seal(&mut self) {
        if self.filling.records.is_empty() {
            return;
        }
        let chunk = Arc::new(std::mem::take(&mut self.filling));
        if self.window.is_some() {
            self.send(Job::Write(chunk.clone(), 0, chunk.records.len()));
        }
        self.history_bytes += chunk.data.len();
        self.history.push_back(chunk);
        let newest = self.history.back().map_or(0, |c| c.last_ts());
        while self.history.len() > 1
            && (self.history_bytes > self.cfg.keep_bytes
                || (self.cfg.keep_ns > 0 && self.history[0].last_ts() + self.cfg.keep_ns < newest))
        {
            let old = self.history.pop_front().expect("not empty");
            self.history_bytes -= old.data.len();
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
            let from = c.records.partition_point(|r| r.1 < start);
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
        }
    }

    /// Closes an open window (with what it has so far) and waits for the writer.
    pub(crate) fn close(&mut self) {
        if self.window.is_some() {
            self.close_window();
        }
        self.jobs = None;
        if let Some(w) = self.writer.take()
            && w.join().is_err()
        {
            tracing::error!(
                "transient capture {}: the writer thread panicked",
                self.cfg.path.display()
            );
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

/// The writer thread: one file per window, chunks written as they come.
fn write_windows(jobs: mpsc::Receiver<Job>, format: CaptureFormat, counters: &WriterCounters) {
    let mut file: Option<(PathBuf, std::io::Result<std::fs::File>, u64)> = None;
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Open(path) => {
                let f = crate::files::create_output(&path)
                    .and_then(|mut f| f.write_all(&file_header(format)).map(|()| f));
                file = Some((path, f, 0));
            }
            Job::Write(chunk, from, to) => {
                if let Some((_, result, packets)) = &mut file
                    && let Ok(f) = result
                {
                    let bytes = &chunk.data[chunk.offset(from)..chunk.offset(to)];
                    match f.write_all(bytes) {
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
                }
                None => {}
            },
        }
    }
}
