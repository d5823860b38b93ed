//! Threads that help a stage with its CPU copies (`stage_core: [S, H1, H2, ...]`): the
//! gather of pageable packets into pinned staging and host-to-host header-data splits are
//! one core's `memcpy` otherwise. A batch of copies is cut into one share per helper and
//! one for the caller; each helper busy-polls its own slot on its own core, and the caller
//! returns only when every share is done, so no copy outlives the call.

use crate::affinity;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One copy: `len` bytes from address `src` to address `dst`.
#[derive(Clone, Copy, Debug)]
pub struct CopyJob {
    /// Source address.
    pub src: u64,
    /// Destination address.
    pub dst: u64,
    /// Bytes to copy.
    pub len: usize,
}

/// Batches below this many bytes are copied by the caller alone: handing out shares costs
/// more than it saves.
const SHARE_MIN_BYTES: usize = 64 << 10;

/// Empty polls before a helper yields its core once (as workers do).
const IDLE_POLLS_BEFORE_YIELD: u32 = 1024;

/// A helper's mailbox, on a cache line of its own.
#[repr(align(128))]
#[derive(Default)]
struct Slot {
    /// The share to copy; `posted` says when a new one is there.
    share: Mutex<Vec<CopyJob>>,
    /// Shares posted so far.
    posted: AtomicU64,
    /// Shares finished so far (equal to `posted` when idle).
    done: AtomicU64,
    /// False once the helper's thread ended (its share then falls to the caller).
    alive: AtomicBool,
}

struct Shared {
    stop: AtomicBool,
    slots: Vec<Slot>,
}

/// Helper threads, one per core, stopped and joined when dropped.
pub struct CopyHelpers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// Shares being filled by the caller (kept to avoid allocation per batch).
    scratch: Vec<Vec<CopyJob>>,
    /// Per helper, the share number posted to it in this batch (0: none).
    posted: Vec<u64>,
    /// Batches below this many bytes are copied by the caller alone.
    min_share_bytes: usize,
    /// The batch [`copy_with`] gathers (kept to avoid allocation per batch).
    batch: Vec<CopyJob>,
}

impl CopyHelpers {
    /// Starts one helper pinned to each of `cores`; `name` labels the threads.
    pub fn spawn(cores: &[u32], name: &str) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            slots: cores
                .iter()
                .map(|_| Slot {
                    alive: AtomicBool::new(true),
                    ..Slot::default()
                })
                .collect(),
        });
        let mut helpers = Self {
            shared: shared.clone(),
            threads: Vec::new(),
            scratch: vec![Vec::new(); cores.len() + 1],
            posted: vec![0; cores.len()],
            min_share_bytes: SHARE_MIN_BYTES,
            batch: Vec::new(),
        };
        for (i, &core) in cores.iter().enumerate() {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-copy-{core}"))
                .spawn(move || {
                    // Marks the helper gone however it ends, so no caller waits for it.
                    struct Gone<'a>(&'a AtomicBool);
                    impl Drop for Gone<'_> {
                        fn drop(&mut self) {
                            self.0.store(false, Ordering::Release);
                        }
                    }
                    let slot = &shared.slots[i];
                    let _gone = Gone(&slot.alive);
                    if let Err(e) = affinity::pin_current_thread(core) {
                        tracing::warn!("copy helper on core {core}: not pinned: {e}");
                    }
                    help(&shared.stop, slot);
                })?;
            helpers.threads.push(thread);
        }
        Ok(helpers)
    }

    /// Shares out batches from `bytes` on (tests: small batches too).
    #[cfg(all(test, feature = "cuda"))]
    pub(crate) fn sharing_from(mut self, bytes: usize) -> Self {
        self.min_share_bytes = bytes;
        self
    }

    /// Helper threads.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.threads.len()
    }

    /// Does every copy of `jobs`, with the helpers when the batch is large enough, and
    /// returns when all are done.
    ///
    /// # Safety
    ///
    /// Every job's `src` must be readable and `dst` writable for `len` bytes until this
    /// returns, and no job's destination may overlap another job's source or destination.
    pub(crate) unsafe fn copy_all(&mut self, jobs: &[CopyJob]) {
        let total: usize = jobs.iter().map(|j| j.len).sum();
        let helpers = self.shared.slots.len();
        if helpers == 0 || total < self.min_share_bytes || jobs.len() < 2 {
            // SAFETY: the caller's contract.
            unsafe { copy_jobs(jobs) };
            return;
        }
        // Shares of about equal bytes, in order: share k takes jobs until it holds its
        // part of the total.
        let parts = helpers + 1;
        for s in &mut self.scratch {
            s.clear();
        }
        let (mut share, mut filled) = (0usize, 0usize);
        for j in jobs {
            if filled >= total * (share + 1) / parts && share + 1 < parts {
                share += 1;
            }
            self.scratch[share].push(*j);
            filled += j.len;
        }
        for (h, slot) in self.shared.slots.iter().enumerate() {
            self.posted[h] = 0;
            let mine = &mut self.scratch[h + 1];
            if mine.is_empty() {
                continue;
            }
            let mut s = slot.share.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *s, mine);
            drop(s);
            self.posted[h] = slot.posted.fetch_add(1, Ordering::Release) + 1;
        }
        // SAFETY: the caller's contract; share 0 is disjoint from the helpers' shares.
        unsafe { copy_jobs(&self.scratch[0]) };
        for (h, slot) in self.shared.slots.iter().enumerate() {
            if self.posted[h] == 0 {
                continue;
            }
            loop {
                if slot.done.load(Ordering::Acquire) >= self.posted[h] {
                    break;
                }
                if !slot.alive.load(Ordering::Acquire) {
                    // The helper ended (it copies nothing any more): do its share here.
                    let s = slot.share.lock().unwrap_or_else(|e| e.into_inner());
                    // SAFETY: the caller's contract; the share's copies are idempotent.
                    unsafe { copy_jobs(&s) };
                    break;
                }
                std::hint::spin_loop();
            }
            // Take the share's vector back for the next batch.
            let mut s = slot.share.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *s, &mut self.scratch[h + 1]);
        }
    }
}

impl Drop for CopyHelpers {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // No lock is held here; each helper sees `stop` within one poll.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A helper's loop: copies each share posted to `slot` until `stop`.
fn help(stop: &AtomicBool, slot: &Slot) {
    let mut seen = 0u64;
    let mut idle = 0u32;
    while !stop.load(Ordering::Acquire) {
        let posted = slot.posted.load(Ordering::Acquire);
        if posted == seen {
            idle += 1;
            if idle >= IDLE_POLLS_BEFORE_YIELD {
                idle = 0;
                std::thread::yield_now();
            }
            std::hint::spin_loop();
            continue;
        }
        idle = 0;
        let share = slot.share.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the poster (`copy_all`) keeps every range valid and disjoint until
        // `done` reaches `posted`, which happens only after these copies.
        unsafe { copy_jobs(&share) };
        drop(share);
        seen = posted;
        slot.done.store(posted, Ordering::Release);
    }
}

/// Does every copy of `jobs`: one by one on the calling thread, or, with `helpers`,
/// gathered into a batch (kept by the helpers across calls) and shared out.
///
/// # Safety
///
/// As [`CopyHelpers::copy_all`].
pub unsafe fn copy_with(
    helpers: Option<&mut CopyHelpers>,
    jobs: impl IntoIterator<Item = CopyJob>,
) {
    match helpers {
        None => {
            for j in jobs {
                // SAFETY: the caller's contract.
                unsafe { copy_jobs(&[j]) };
            }
        }
        Some(h) => {
            let mut batch = std::mem::take(&mut h.batch);
            batch.clear();
            batch.extend(jobs);
            // SAFETY: the caller's contract.
            unsafe { h.copy_all(&batch) };
            h.batch = batch;
        }
    }
}

/// # Safety
///
/// As [`CopyHelpers::copy_all`].
unsafe fn copy_jobs(jobs: &[CopyJob]) {
    for j in jobs {
        // SAFETY: the caller's contract: readable source, writable destination, no overlap.
        unsafe { std::ptr::copy_nonoverlapping(j.src as *const u8, j.dst as *mut u8, j.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a large batch arrives, through helpers on the machine's cores, and
    /// the helpers stop when dropped.
    #[test]
    fn a_batch_copied_with_helpers_arrives_whole() {
        let cores: Vec<u32> = (0..2).filter(|&c| affinity::core_is_usable(c)).collect();
        let mut helpers = CopyHelpers::spawn(&cores, "test").unwrap();
        assert_eq!(helpers.len(), cores.len());
        let src: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
        for round in 0..20 {
            let mut dst = vec![0u8; src.len()];
            // Jobs of varied lengths, in a scattered order.
            let mut jobs = Vec::new();
            let mut at = 0usize;
            let mut k = round;
            while at < src.len() {
                let len = (512 + (k * 977) % 4096).min(src.len() - at);
                jobs.push(CopyJob {
                    src: src.as_ptr() as u64 + at as u64,
                    dst: dst.as_mut_ptr() as u64 + at as u64,
                    len,
                });
                at += len;
                k += 1;
            }
            jobs.reverse();
            // SAFETY: both vectors outlive the call; the jobs cover disjoint ranges.
            unsafe { helpers.copy_all(&jobs) };
            assert!(dst == src, "round {round}");
        }
        drop(helpers);
    }
}
