//! Burst I/O on one device queue: receive (copying into the queue's regions, or handing
//! over the lent region's buffers) and the port counters folded into the queue's drops.
//! Transmit is `tx.rs`.

use super::attach;
use super::mempool::LentPool;
use crate::burst::Burst;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::engine::RxPort;
use crate::engine::wire::{Ingress, WireReceiver};
use crate::memory::{RegionId, RegionSet};
use crate::stats::{DropReason, QueueCounters};
use crate::steering::InterfaceSteering;
use dpdk_sys as sys;
use std::sync::Arc;

/// Mbufs taken from or handed to the driver per call.
pub const MAX_BURST: usize = 64;

/// Polls between reads of the port's counters (a few per second at full speed).
const NIC_STATS_EVERY: u32 = 1 << 20;

/// One device RX queue: pulls frames and copies them into a queue's memory regions.
pub struct DeviceQueue {
    pub(super) port_id: u16,
    pub(super) hw_queue: u16,
    /// Polls since the port's counters were last read (queue 0 of a port reads them).
    pub(super) polls: u32,
    /// Missed + errored and no-mbuf counts already folded into our counters.
    pub(super) nic_seen: (u64, u64),
    pub(super) port: PortIndex,
    pub(super) queue: QueueId,
    pub(super) regions: Arc<RegionSet>,
    /// The queue's region per segment (two with header-data split).
    pub(super) segments: Vec<RegionId>,
    pub(super) counters: Arc<QueueCounters>,
    /// The device tags packets with the flow id (rte_flow MARK).
    pub(super) marks: bool,
    /// rte_flow placed the packet but could not tag it: find the flow id from the headers.
    pub(super) classify_ids: bool,
    /// The queue's region is its mbuf pool (this one): frames are handed over, not copied.
    pub(super) lent_pool: Option<Arc<LentPool>>,
    /// Regions lent for sending: frames that come back in their mbufs (a port that loops
    /// back) are taken over as they are.
    pub(super) lent_for_tx: Vec<Arc<super::lent_tx::TxLent>>,
    pub(super) rules: Arc<InterfaceSteering>,
    pub(super) scratch: [*mut sys::rte_mbuf; MAX_BURST],
    pub(super) mark_values: [u32; MAX_BURST],
    /// The last frame's verdict, for the next frames of its stream (software flow ids).
    pub(super) memo: std::cell::Cell<crate::steering::VerdictMemo>,
    pub(super) infos: [sys::shim_mbuf_info; MAX_BURST],
    /// The last burst arrived as attached buffers of ours (see `take_over`).
    pub(super) taking_over: bool,
    /// The device places packets without static rules: once flows are added at run time,
    /// flow ids come from the headers.
    pub(super) ids_after_changes: bool,
    /// Zero copy: mbufs of the lent pool kept ready, `reserve[..reserve_len]`.
    pub(super) reserve: [*mut sys::rte_mbuf; MAX_BURST],
    pub(super) reserve_len: usize,
    /// The device stamps received packets (`hardware_timestamps`).
    pub(super) rx_time: Option<super::port::DeviceTime>,
    /// Receive times of the last received mbufs, ns since the epoch (0: none).
    pub(super) stamps: [u64; MAX_BURST],
}

/// How an RX queue gets its packets.
pub enum RxMode {
    /// Straight from its device queue.
    Direct,
    /// Its device queue is one ingress point of software steering; the queue's packets
    /// come over the wires (from its own and every other device queue).
    Software(Box<(Ingress, WireReceiver)>),
}

pub struct DpdkRx {
    /// The device queue.
    pub device: DeviceQueue,
    /// Where its packets go.
    pub mode: RxMode,
}

// SAFETY: the scratch pointers are only used inside one call on the owning worker thread.
unsafe impl Send for DeviceQueue {}

impl DeviceQueue {
    /// Folds the port's own drop counters into this queue's: packets the NIC missed or
    /// rejected become `engine_missed`, receives without an mbuf `pool_empty`, so
    /// "lossless" also covers the device.
    fn fold_nic_counters(&mut self) {
        if self.hw_queue != 0 {
            return;
        }
        let mut st = sys::rte_eth_stats::default();
        // SAFETY: a valid port and an out structure.
        if unsafe { sys::rte_eth_stats_get(self.port_id, &mut st) } != 0 {
            return;
        }
        let (missed, nombuf) = (st.imissed + st.ierrors, st.rx_nombuf);
        self.counters.drop_packets(
            DropReason::EngineMissed,
            missed.saturating_sub(self.nic_seen.0),
        );
        self.counters.drop_packets(
            DropReason::PoolEmpty,
            nombuf.saturating_sub(self.nic_seen.1),
        );
        self.nic_seen = (missed, nombuf);
    }

    /// Receives up to `max` mbufs into `scratch` (and their marks); returns how many.
    fn receive_mbufs(&mut self, max: usize) -> usize {
        self.polls += 1;
        if self.polls >= NIC_STATS_EVERY {
            self.polls = 0;
            self.fold_nic_counters();
        }
        if max == 0 {
            return 0;
        }
        // SAFETY: a started port; scratch has room for `max` <= MAX_BURST pointers.
        let n = unsafe {
            sys::shim_rte_eth_rx_burst(
                self.port_id,
                self.hw_queue,
                self.scratch.as_mut_ptr(),
                max.min(MAX_BURST) as u16,
            )
        } as usize;
        if n > 0 && self.marks {
            // SAFETY: n received mbufs and room for n marks.
            unsafe {
                sys::shim_rte_mbuf_marks(
                    self.scratch.as_ptr(),
                    self.mark_values.as_mut_ptr(),
                    n as u32,
                )
            };
        }
        if n > 0
            && let Some(t) = &self.rx_time
        {
            // SAFETY: n received mbufs and room for n values.
            unsafe {
                sys::shim_rx_timestamps(
                    self.scratch.as_ptr(),
                    self.stamps.as_mut_ptr(),
                    n as u32,
                    t.offset,
                    t.flag,
                )
            };
            for s in &mut self.stamps[..n] {
                if *s != 0 {
                    *s = t.clock.to_ns(*s);
                }
            }
        }
        n
    }

    /// Gives packet `slot` of `burst` the device's receive time of received mbuf `i`.
    #[inline]
    fn stamp(&self, i: usize, burst: &mut Burst, slot: usize) {
        if self.rx_time.is_some() && self.stamps[i] != 0 {
            burst.set_timestamp(slot, self.stamps[i]);
        }
    }

    /// The flow id of received mbuf `i`, now packet `slot` of `burst`.
    /// The rules flow ids come from, when the headers must give them: rte_flow rules
    /// without MARK, or flows added at run time on a port without static rules (epoch
    /// past the first).
    #[inline]
    fn id_rules(&self) -> Option<arc_swap::Guard<Arc<crate::steering::Classifier>>> {
        if self.marks || !(self.classify_ids || self.ids_after_changes) {
            return None;
        }
        let rules = self.rules.rules();
        (self.classify_ids || rules.epoch() > 1).then_some(rules)
    }

    fn flow_id(
        &self,
        i: usize,
        burst: &Burst,
        slot: usize,
        rules: Option<&Arc<crate::steering::Classifier>>,
    ) -> u32 {
        if self.marks {
            return self.mark_values[i];
        }
        let mut memo = self.memo.get();
        let verdict = rules.and_then(|r| burst.data(slot, 0).map(|f| memo.classify(r, f)));
        self.memo.set(memo);
        match verdict {
            Some(crate::steering::Verdict::Deliver { flow_id, .. }) => flow_id,
            _ => 0,
        }
    }

    /// Up to `max` frames from the device as a burst of the queue's buffers, with their
    /// flow ids: handed over when the region is the mbuf pool, else copied.
    fn pull(&mut self, max: usize) -> Option<Burst> {
        if let Some(lent) = self.lent_pool.clone() {
            return self.pull_lent(max, &lent);
        }
        // While frames arrive as our own attached buffers (a port that loops back), they
        // are taken over: nothing to allocate before receiving.
        if self.taking_over && self.segments.len() == 1 {
            let n = self.receive_mbufs(max);
            if n == 0 {
                return None;
            }
            if let Some(out) = self.take_over(n) {
                return Some(out);
            }
            self.taking_over = false;
            // Mbufs of other kinds: copied, as far as the pool has buffers for them.
            let Some(mut fresh) = Burst::allocate_up_to(
                self.regions.clone(),
                self.port,
                self.queue,
                &self.segments,
                n,
            ) else {
                self.counters.drop_packets(DropReason::PoolEmpty, n as u64);
                // SAFETY: every received mbuf is freed once.
                unsafe { sys::shim_rte_pktmbuf_free_bulk(self.scratch.as_mut_ptr(), n as u32) };
                return None;
            };
            let short = n - fresh.len();
            self.counters
                .drop_packets(DropReason::PoolEmpty, short as u64);
            return self
                .copy_received(fresh.len(), &mut fresh, n)
                .then_some(fresh);
        }
        // Take from the device only what our pools can hold; the rest waits in the
        // device's ring (a NIC counts its own misses when that ring overflows).
        let mut fresh = Burst::allocate_up_to(
            self.regions.clone(),
            self.port,
            self.queue,
            &self.segments,
            max,
        )?;
        let n = self.receive_mbufs(fresh.len());
        if n == 0 {
            return None;
        }
        if self.segments.len() == 1
            && let Some(out) = self.take_over(n)
        {
            self.taking_over = true;
            return Some(out);
        }
        self.copy_received(n, &mut fresh, n).then_some(fresh)
    }

    /// Copies the first `n` of `received` mbufs into `fresh` (which has room for `n`),
    /// keeping only what fits, then frees all `received`. True when a frame was kept.
    fn copy_received(&mut self, n: usize, fresh: &mut Burst, received: usize) -> bool {
        let rules = self.id_rules();
        let mut kept = 0;
        for i in 0..n {
            if !self.copy_frame(self.scratch[i], fresh, kept) {
                // Larger than the queue's buffers or more segments than regions: counted,
                // never delivered cut.
                self.counters.drop_packets(DropReason::Malformed, 1);
                continue;
            }
            let id = self.flow_id(i, fresh, kept, rules.as_deref());
            fresh.set_flow_id(kept, id);
            self.stamp(i, fresh, kept);
            kept += 1;
        }
        fresh.truncate(kept);
        self.counters.add_copied(kept as u64);
        // SAFETY: every received mbuf is freed once.
        unsafe { sys::shim_rte_pktmbuf_free_bulk(self.scratch.as_mut_ptr(), received as u32) };
        kept > 0
    }

    /// The `n` received frames as a burst of the buffers they arrived in, when every one
    /// is a buffer of ours sent attached (a port that loops back, such as net_ring, hands
    /// the sent mbufs over): nothing is copied, the mbufs go back to their pool.
    fn take_over(&mut self, n: usize) -> Option<Burst> {
        let (mut indices, mut lens) = ([0u32; MAX_BURST], [0u16; MAX_BURST]);
        // Mbufs of a region lent for sending are its buffers: kept as they are.
        let lent = self.lent_run(n, &mut indices, &mut lens);
        let one_region = match lent {
            Some(region) => Some(region),
            // SAFETY: n received mbufs.
            None => unsafe { attach::attached_run(&self.scratch[..n], &mut indices, &mut lens) },
        };
        let mut out = match one_region {
            Some(region) => Burst::of_owned_buffers(
                self.regions.clone(),
                self.port,
                self.queue,
                region,
                &indices[..n],
                &lens[..n],
            ),
            None => self.take_over_mixed(n)?,
        };
        let rules = self.id_rules();
        if self.marks || rules.is_some() {
            for i in 0..n {
                let id = self.flow_id(i, &out, i, rules.as_deref());
                out.set_flow_id(i, id);
            }
        }
        if self.rx_time.is_some() {
            for i in 0..n {
                self.stamp(i, &mut out, i);
            }
        }
        if lent.is_none() {
            // SAFETY: each mbuf carries an attached buffer the burst now owns; released
            // once.
            unsafe { attach::release_keeping_buffers(&mut self.scratch[..n]) };
        }
        Some(out)
    }

    /// When every one of the `n` received mbufs is an mbuf of one region lent for sending,
    /// held once, one segment at the headroom: that region, with each mbuf's buffer in
    /// `indices` and the frame's length in `lens`. The mbufs stay out of their pool: the
    /// burst that takes the buffers returns them.
    fn lent_run(&self, n: usize, indices: &mut [u32], lens: &mut [u16]) -> Option<RegionId> {
        if self.lent_for_tx.is_empty() || n > MAX_BURST {
            return None;
        }
        // SAFETY: reads a constant.
        let headroom = unsafe { sys::shim_mbuf_headroom };
        // SAFETY: n received mbufs and room for n lengths.
        let pool = unsafe {
            sys::shim_pool_run(self.scratch.as_ptr(), n as u32, headroom, lens.as_mut_ptr())
        };
        let lent = self
            .lent_for_tx
            .iter()
            .find(|l| !pool.is_null() && l.pool().0 == pool.cast())?;
        // A length beyond the buffer cannot come from our own sends; such a burst is
        // copied, where frame lengths are checked, rather than trusted.
        let buf_size = self.regions.get(lent.region).buf_size();
        if lens[..n].iter().any(|&l| usize::from(l) > buf_size) {
            return None;
        }
        for (index, &m) in indices[..n].iter_mut().zip(&self.scratch[..n]) {
            *index = lent.buffer_of(m)?;
        }
        Some(lent.region)
    }

    /// As [`DeviceQueue::take_over`] for frames whose buffers are in different regions:
    /// the burst of them, or `None` when one is not a buffer of ours. Releases nothing.
    fn take_over_mixed(&mut self, n: usize) -> Option<Burst> {
        // SAFETY: n received mbufs and room for n records.
        unsafe {
            sys::shim_rte_mbuf_infos(self.scratch.as_ptr(), self.infos.as_mut_ptr(), n as u32)
        };
        let mut found = [None; MAX_BURST];
        // SAFETY: n received mbufs.
        if !unsafe { attach::attached_buffers(&self.scratch[..n], &mut found[..n]) } {
            return None;
        }
        let mut out = Burst::empty(self.regions.clone(), self.port, self.queue, n);
        for (i, buffer) in found[..n].iter().enumerate() {
            let (region, index) = buffer.expect("checked: every frame carries one");
            out.push_owned(region, index, u32::from(self.infos[i].data_len), 0);
        }
        Some(out)
    }

    /// Zero-copy receive: each mbuf's buffer is one of the region's, so the burst takes
    /// the buffer index and the mbuf stays out of its pool until the burst is dropped.
    fn pull_lent(&mut self, max: usize, lent: &LentPool) -> Option<Burst> {
        // Buffers the application gave back go to the mempool first (this thread's cache).
        let mut back = [0u32; MAX_BURST];
        loop {
            let k = lent.returned.dequeue_burst(&mut back);
            if k == 0 {
                break;
            }
            let mut batch = [std::ptr::null_mut(); MAX_BURST];
            for (slot, &i) in batch.iter_mut().zip(&back[..k]) {
                *slot = lent.mbufs[i as usize];
            }
            // SAFETY: each returned buffer was handed out once by this queue and comes back
            // once (Burst ownership), so each mbuf is freed once.
            unsafe { sys::shim_rte_pktmbuf_free_bulk(batch.as_mut_ptr(), k as u32) };
            if k < MAX_BURST {
                break;
            }
        }
        let pool = lent.pool;
        // Keep a burst's worth of the pool's mbufs in reserve, for frames the device hands
        // over in mbufs of another pool (they are copied into these). Polling only as many
        // frames as the reserve holds stops receiving while the application holds the
        // buffers, and frames wait in the device's ring, as in copy mode.
        if self.reserve_len < MAX_BURST {
            let want = MAX_BURST - self.reserve_len;
            // SAFETY: a valid pool; the reserve has room for `want` more pointers.
            let ok = unsafe {
                sys::shim_rte_pktmbuf_alloc_bulk(
                    pool.0,
                    self.reserve[self.reserve_len..].as_mut_ptr(),
                    want as u32,
                )
            } == 0;
            if ok {
                self.reserve_len = MAX_BURST;
            }
        }
        let n = self.receive_mbufs(max.min(self.reserve_len));
        if n == 0 {
            return None;
        }
        // SAFETY: n received mbufs and room for n records.
        unsafe {
            sys::shim_rte_mbuf_infos(self.scratch.as_ptr(), self.infos.as_mut_ptr(), n as u32)
        };
        let regions = self.regions.clone();
        let region_id = self.segments[0];
        let region = regions.get(region_id);
        // Kept frames: buffer index, length, and which received mbuf each was.
        let (mut indices, mut lens, mut from) =
            ([0u32; MAX_BURST], [0u16; MAX_BURST], [0u8; MAX_BURST]);
        let mut kept = 0;
        let mut done: [*mut sys::rte_mbuf; MAX_BURST] = [std::ptr::null_mut(); MAX_BURST];
        let (mut n_done, mut dropped, mut coalesced) = (0, 0, 0);
        for i in 0..n {
            let info = self.infos[i];
            let (buf, off, mut len) = (
                info.buf_addr as u64,
                info.data_off as usize,
                info.data_len as usize,
            );
            let mut segs = info.nb_segs;
            if segs > 1
                && off == region.headroom()
                && region.host_accessible()
                && region.index_of(buf).is_some()
            {
                // A chain of lent buffers (RX scatter, or a driver that fills less than a
                // whole buffer: Intel's round buf_size down to 1 KiB) whose frame fits the
                // region's buffer: its tail is copied behind the head, and freed.
                // SAFETY: a received chain, ours; its head is a region buffer with
                // buf_size bytes after the headroom, where its data starts.
                let total =
                    unsafe { sys::shim_coalesce_chain(self.scratch[i], region.buf_size() as u32) };
                if total > 0 {
                    (len, segs) = (total as usize, 1);
                    coalesced += 1;
                }
            }
            let fits = segs == 1 && len <= region.buf_size();
            let index = match region.index_of(buf) {
                Some(index) if fits && (off == region.headroom() || region.host_accessible()) => {
                    if off != region.headroom() {
                        // The PMD left the data elsewhere in the buffer: move it to where
                        // the region's buffer starts.
                        // SAFETY: both ranges lie inside this mbuf's buffer (headroom +
                        // buf_size bytes), which nobody else uses now.
                        unsafe {
                            std::ptr::copy(
                                (buf + off as u64) as *const u8,
                                (buf + region.headroom() as u64) as *mut u8,
                                len,
                            )
                        };
                    }
                    index
                }
                None if fits && region.host_accessible() => {
                    // An mbuf of another pool (net_ring passes the sender's mbufs on):
                    // copy it into one of ours from the reserve.
                    self.reserve_len -= 1;
                    let own = self.reserve[self.reserve_len];
                    // SAFETY: `own` is an mbuf of the lent pool, so its buffer is a region
                    // buffer with room for headroom + buf_size bytes; the foreign mbuf
                    // holds `len` bytes at `off`.
                    let dst = unsafe {
                        let dst = sys::shim_rte_mbuf_buf_addr(own) as u64;
                        std::ptr::copy_nonoverlapping(
                            (buf + off as u64) as *const u8,
                            (dst + region.headroom() as u64) as *mut u8,
                            len,
                        );
                        dst
                    };
                    done[n_done] = self.scratch[i];
                    n_done += 1;
                    region
                        .index_of(dst)
                        .expect("mbufs of the lent pool carry region buffers")
                }
                _ => {
                    // A chained (too long) frame: counted, freed.
                    dropped += 1;
                    done[n_done] = self.scratch[i];
                    n_done += 1;
                    continue;
                }
            };
            // A frame that fits is at most buf_size <= u16::MAX bytes (an mbuf's length).
            (indices[kept], lens[kept], from[kept]) = (index, len as u16, i as u8);
            kept += 1;
        }
        let mut out = Burst::of_owned_buffers(
            regions.clone(),
            self.port,
            self.queue,
            region_id,
            &indices[..kept],
            &lens[..kept],
        );
        let rules = self.id_rules();
        if self.marks || rules.is_some() || self.rx_time.is_some() {
            for (slot, &i) in from[..kept].iter().enumerate() {
                let i = usize::from(i);
                if self.marks || rules.is_some() {
                    let id = self.flow_id(i, &out, slot, rules.as_deref());
                    out.set_flow_id(slot, id);
                }
                self.stamp(i, &mut out, slot);
            }
        }
        if n_done > 0 {
            // SAFETY: mbufs not handed to the burst, each freed once.
            unsafe { sys::shim_rte_pktmbuf_free_bulk(done.as_mut_ptr(), n_done as u32) };
        }
        self.counters.drop_packets(DropReason::Malformed, dropped);
        self.counters.add_copied(coalesced);
        (!out.is_empty()).then_some(out)
    }

    /// Copies the segments of mbuf chain `m` into packet `slot` of `fresh`; false when it
    /// does not fit.
    fn copy_frame(&self, m: *mut sys::rte_mbuf, fresh: &mut Burst, slot: usize) -> bool {
        if self.segments.len() == 1 {
            return self.copy_chain(m, fresh, slot);
        }
        let mut cur = m;
        let mut seg = 0;
        while !cur.is_null() {
            if seg >= self.segments.len() {
                return false;
            }
            // SAFETY: a received mbuf segment, ours until the burst's mbufs are freed.
            let (src, len) = unsafe {
                (
                    sys::shim_rte_pktmbuf_data(cur) as *const u8,
                    sys::shim_rte_pktmbuf_data_len(cur) as usize,
                )
            };
            let Some(buf) = fresh.buffer_mut(slot, seg) else {
                return false;
            };
            if len > buf.len() {
                return false;
            }
            // SAFETY: `len` bytes of packet data in the segment.
            buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
            fresh.set_len(slot, seg, len);
            // SAFETY: as above.
            cur = unsafe { sys::shim_rte_pktmbuf_next(cur) };
            seg += 1;
        }
        for s in seg..self.segments.len() {
            fresh.set_len(slot, s, 0);
        }
        true
    }
}

impl DeviceQueue {
    /// Copies every segment of mbuf chain `m`, in order, into the one segment of packet
    /// `slot` of `fresh` (a frame the driver scattered over several mbufs); false when the
    /// frame does not fit.
    fn copy_chain(&self, m: *mut sys::rte_mbuf, fresh: &mut Burst, slot: usize) -> bool {
        let Some(buf) = fresh.buffer_mut(slot, 0) else {
            return false;
        };
        let mut at = 0;
        let mut cur = m;
        while !cur.is_null() {
            // SAFETY: a received mbuf segment, ours until the burst's mbufs are freed.
            let (src, len) = unsafe {
                (
                    sys::shim_rte_pktmbuf_data(cur) as *const u8,
                    sys::shim_rte_pktmbuf_data_len(cur) as usize,
                )
            };
            let Some(dst) = buf.get_mut(at..at + len) else {
                return false;
            };
            // SAFETY: `len` bytes of packet data in the segment.
            dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
            at += len;
            // SAFETY: as above.
            cur = unsafe { sys::shim_rte_pktmbuf_next(cur) };
        }
        fresh.set_len(slot, 0, at);
        true
    }
}

impl Drop for DeviceQueue {
    fn drop(&mut self) {
        // Runs on the worker thread as it exits: the last read of the port's counters.
        self.fold_nic_counters();
        if self.reserve_len > 0 {
            // SAFETY: reserved mbufs, never handed out, each freed once.
            unsafe {
                sys::shim_rte_pktmbuf_free_bulk(self.reserve.as_mut_ptr(), self.reserve_len as u32)
            };
        }
    }
}

impl RxPort for DpdkRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        match &mut self.mode {
            RxMode::Direct => match self.device.pull(max) {
                Some(mut fresh) => {
                    let n = fresh.len();
                    into.take_from(&mut fresh, n)
                }
                None => 0,
            },
            RxMode::Software(ends) => {
                let (ingress, receiver) = &mut **ends;
                if ingress.has_room() {
                    match self.device.pull(MAX_BURST) {
                        Some(fresh) => {
                            // Cannot be refused: every wire has room.
                            let _ = ingress.steer(fresh);
                        }
                        None => ingress.idle(),
                    }
                }
                receiver.receive(into, max)
            }
        }
    }

    fn take_boundary(&mut self) -> bool {
        match &mut self.mode {
            RxMode::Direct => false,
            RxMode::Software(ends) => ends.1.take_boundary(),
        }
    }
}
