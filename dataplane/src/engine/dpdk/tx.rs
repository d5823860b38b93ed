//! Transmit on one device queue: each packet carried by an mbuf of its own region (reset),
//! a fresh mbuf attached to its buffer, or a copy, a burst at a time.

use super::attach::AttachableRegion;
use super::lent_tx::TxLending;
use super::mempool::{LentPool, PoolPtr};
use super::queue::MAX_BURST;
use crate::burst::Burst;
use crate::engine::TxPort;
use crate::memory::RegionSet;
use crate::stats::{DropReason, QueueCounters};
use dpdk_sys as sys;
use std::sync::Arc;

/// How a TX queue sends the buffers of one region.
pub enum TxCarrier {
    /// Attached to an mbuf of the queue's attach pool.
    Attach(Arc<AttachableRegion>),
    /// In the mbuf of the RX pool the region is lent to.
    Own(Arc<LentPool>),
    /// In the mbuf of the region's own pool (lent for sending).
    Lent(Arc<TxLending>),
    /// Copied into an mbuf of the queue's pool.
    Copy,
}

impl TxCarrier {
    /// The mbuf that carries buffer `index` when the region's buffers are mbufs.
    #[inline(always)]
    fn own_mbuf(&self, index: u32) -> Option<*mut sys::rte_mbuf> {
        match self {
            TxCarrier::Own(lent) => lent.mbufs.get(index as usize).copied(),
            TxCarrier::Lent(l) => l.lent.mbufs.get(index as usize).copied(),
            _ => None,
        }
    }
}

/// What happened to packet `i` of the burst being sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Carried {
    Copied,
    Attached,
    Own,
    /// Larger than the queue's copy mbufs: dropped, counted.
    TooLarge,
}

pub struct DpdkTx {
    /// The port.
    pub port_id: u16,
    /// The device queue.
    pub hw_queue: u16,
    /// Mbufs frames are copied into.
    pub pool: PoolPtr,
    /// Bytes a copied frame may have.
    pub room: usize,
    /// Mbufs region buffers are attached to.
    pub attach_pool: PoolPtr,
    /// Per region id: how its buffers are sent.
    pub carriers: Arc<Vec<TxCarrier>>,
    /// The queue's counters (packets copied, frames too large).
    pub counters: Arc<QueueCounters>,
    /// Mbufs of the burst being sent.
    pub scratch: [*mut sys::rte_mbuf; MAX_BURST],
    /// How each packet of the burst being sent is carried.
    carried: [Carried; MAX_BURST],
    /// The device sends packets at their `timestamp_ns` (`accurate_send`).
    pub send_times: Option<super::port::DeviceTime>,
    /// The TX flows whose VLAN tags the device inserts: each frame a flow matches is
    /// marked with its tag.
    pub vlan_tags: Option<Arc<crate::steering::TxTransformer>>,
    /// Gives back the mbufs of sent packets (and so their region buffers) once the queue
    /// goes idle.
    reclaim: IdleReclaim,
    /// An mbuf of `pool` kept for zero-packet bursts (null until the first): some drivers
    /// read the first entry of the array before looking at the count (memif in DPDK
    /// 24.11 reads its pool), so it must point at a live mbuf, which the driver never
    /// takes.
    idle_probe: *mut sys::rte_mbuf,
}

/// Idle polls between two reclaim passes of an idle queue.
const RECLAIM_EVERY: u32 = 256;
/// Zero-packet bursts tried after a send on a driver without `tx_done_cleanup`.
const ZERO_BURST_TRIES: u32 = 16;

/// Reclaiming a TX queue's sent mbufs when it goes idle. A driver frees sent mbufs only
/// when a later burst needs their descriptors, so after the last burst of a stream they
/// (and the region buffers attached to them) stay held while nothing more is sent: a
/// sender whose pool is small then finds it empty. Once idle after a send, every
/// [`RECLAIM_EVERY`] idle polls the queue asks the driver to free what it has sent
/// (`rte_eth_tx_done_cleanup`) until a pass frees nothing; a driver without that call
/// gets a few zero-packet bursts instead, which some drivers free completions in.
#[derive(Debug, Default)]
struct IdleReclaim {
    /// Something was sent since a reclaim pass last found nothing to free.
    pending: bool,
    idle_polls: u32,
    /// The driver answered ENOTSUP: zero-packet bursts instead.
    unsupported: bool,
    zero_bursts_left: u32,
}

/// What an idle poll asks of the driver.
#[derive(Debug, PartialEq, Eq)]
enum ReclaimStep {
    Nothing,
    DoneCleanup,
    ZeroBurst,
}

impl IdleReclaim {
    fn sent(&mut self) {
        self.pending = true;
        self.idle_polls = 0;
        self.zero_bursts_left = ZERO_BURST_TRIES;
    }

    /// The step for this idle poll.
    fn idle(&mut self) -> ReclaimStep {
        if !self.pending {
            return ReclaimStep::Nothing;
        }
        self.idle_polls += 1;
        if !self.idle_polls.is_multiple_of(RECLAIM_EVERY) {
            return ReclaimStep::Nothing;
        }
        if self.unsupported {
            if self.zero_bursts_left == 0 {
                self.pending = false;
                return ReclaimStep::Nothing;
            }
            self.zero_bursts_left -= 1;
            return ReclaimStep::ZeroBurst;
        }
        ReclaimStep::DoneCleanup
    }

    /// The driver's answer to `rte_eth_tx_done_cleanup`: packets freed, or an error.
    fn cleaned(&mut self, answer: i32) {
        match answer {
            n if n > 0 => {}
            n if n == -libc::ENOTSUP => self.unsupported = true,
            // Nothing more to free, or an error that asking again would not change.
            _ => self.pending = false,
        }
    }
}

// SAFETY: as for DpdkRx.
unsafe impl Send for DpdkTx {}

impl DpdkTx {
    /// A TX queue's port.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        port_id: u16,
        hw_queue: u16,
        pool: PoolPtr,
        room: usize,
        attach_pool: PoolPtr,
        carriers: Arc<Vec<TxCarrier>>,
        counters: Arc<QueueCounters>,
    ) -> Self {
        Self {
            port_id,
            hw_queue,
            pool,
            room,
            attach_pool,
            carriers,
            counters,
            scratch: [std::ptr::null_mut(); MAX_BURST],
            carried: [Carried::Copied; MAX_BURST],
            send_times: None,
            vlan_tags: None,
            reclaim: IdleReclaim::default(),
            idle_probe: std::ptr::null_mut(),
        }
    }

    /// Decides how each of the first `n` packets goes; returns how many mbufs of the copy
    /// and of the attach pool that takes.
    fn plan(&mut self, burst: &Burst, n: usize) -> (usize, usize) {
        let (mut copies, mut attaches) = (0, 0);
        for (i, p) in burst.packets()[..n].iter().enumerate() {
            let segs = p.segments();
            let carrier = match segs {
                [only] => self.carriers.get(only.region.index()),
                _ => None,
            };
            self.carried[i] = match carrier {
                Some(TxCarrier::Attach(_)) => {
                    attaches += 1;
                    Carried::Attached
                }
                Some(TxCarrier::Own(_) | TxCarrier::Lent(_)) => Carried::Own,
                _ if p.len() > self.room => Carried::TooLarge,
                _ => {
                    copies += 1;
                    Carried::Copied
                }
            };
        }
        (copies, attaches)
    }

    /// Puts the mbuf carrying each of the first `n` packets into `scratch`, as planned:
    /// own mbufs reset, fresh ones attached to region buffers (a burst at a time, after
    /// the loop), frames copied into the copy pool's mbufs.
    #[inline(always)]
    fn carry(
        &mut self,
        burst: &Burst,
        regions: &RegionSet,
        n: usize,
        (copy_mbufs, attach_mbufs): (&[*mut sys::rte_mbuf], &[*mut sys::rte_mbuf]),
    ) {
        let (mut next_copy, mut next_attach) = (0, 0);
        // Own mbufs are reset and fresh ones attached a burst at a time, after the loop.
        let mut attach = super::attach::AttachBatch::new();
        let mut reuse = [std::ptr::null_mut(); MAX_BURST];
        let mut reuse_lens = [0u16; MAX_BURST];
        let mut reused = 0;
        for i in 0..n {
            let p = burst.packets()[i];
            self.scratch[i] = match self.carried[i] {
                Carried::Own => {
                    let s = p.segments()[0];
                    let m = self
                        .carriers
                        .get(s.region.index())
                        .and_then(|c| c.own_mbuf(s.index))
                        .expect("planned by `plan`: a region whose buffers are mbufs");
                    reuse[reused] = m;
                    reuse_lens[reused] = s.len as u16;
                    reused += 1;
                    m
                }
                Carried::Attached => {
                    let s = p.segments()[0];
                    let Some(TxCarrier::Attach(region)) = self.carriers.get(s.region.index())
                    else {
                        unreachable!("planned by `plan`");
                    };
                    let m = attach_mbufs[next_attach];
                    next_attach += 1;
                    let addr = regions.get(s.region).buffer_addr(s.index);
                    // SAFETY: a fresh direct mbuf; the burst owns buffer `s.index` and
                    // hands it over only if the driver takes the mbuf (else
                    // `shim_tx_free_untaken` keeps it the burst's). Attached below.
                    unsafe { attach.push(region, m, addr, s.index, s.len as u16) };
                    m
                }
                Carried::Copied => {
                    let m = copy_mbufs[next_copy];
                    next_copy += 1;
                    let mut off = 0usize;
                    // SAFETY: a fresh mbuf whose data room holds `room` bytes.
                    let dst = unsafe { sys::shim_rte_pktmbuf_data(m) as *mut u8 };
                    for seg in 0..p.segments().len() {
                        let data = burst.data(i, seg).expect("DPDK regions are host memory");
                        // SAFETY: the packet's length is at most `room` (planned by `plan`).
                        unsafe {
                            std::ptr::copy_nonoverlapping(data.as_ptr(), dst.add(off), data.len())
                        };
                        off += data.len();
                    }
                    // SAFETY: as above.
                    unsafe { sys::shim_rte_pktmbuf_set_len(m, off as u16) };
                    m
                }
                Carried::TooLarge => unreachable!("`transmit` drops these first"),
            };
        }
        // SAFETY: as promised at each push, before any of these mbufs is used.
        unsafe { attach.flush() };
        if reused > 0 {
            // SAFETY: the mbufs carrying this burst's lent buffers, out of their pool
            // while the burst owns the buffers; each reset to one segment of the
            // frame's length at the headroom where the region's data starts.
            unsafe { sys::shim_tx_reuse_bulk(reuse.as_ptr(), reuse_lens.as_ptr(), reused as u32) };
        }
    }

    /// Gives each packet with a send time its mbuf's TX timestamp (`accurate_send`).
    #[inline(always)]
    fn stamp_send_times(&mut self, burst: &Burst, n: usize) {
        if let Some(t) = &self.send_times {
            for i in 0..n {
                let at = burst.packets()[i].timestamp_ns;
                if at != 0 {
                    // SAFETY: an mbuf of this burst, not yet handed to the driver.
                    unsafe {
                        sys::shim_set_tx_timestamp(
                            self.scratch[i],
                            t.offset,
                            t.flag,
                            t.clock.to_ticks(at),
                        )
                    };
                }
            }
        }
    }

    /// Marks each of the first `n` packets a TX flow matches with that flow's tag, for
    /// the device to insert as it sends the frame.
    #[inline(always)]
    fn mark_vlan_tags(&mut self, burst: &Burst, n: usize) {
        if let Some(t) = &self.vlan_tags {
            for i in 0..n {
                // The flows match on headers, which are in the first segment.
                let frame = burst.data(i, 0).unwrap_or(&[]);
                if let Some(tci) = t.vlan_tci(frame) {
                    // SAFETY: an mbuf of this burst, not yet handed to the driver.
                    unsafe { sys::shim_set_tx_vlan(self.scratch[i], tci) };
                }
            }
        }
    }

    /// Returns the copy and attach mbufs of packets `sent..n` that the driver did not
    /// take to their pools; the burst keeps the buffers. An own mbuf stays out of its
    /// pool, with its buffer in the burst.
    #[inline(always)]
    fn free_untaken(&mut self, sent: usize, n: usize) {
        let mut untaken = [std::ptr::null_mut(); MAX_BURST];
        let mut k = 0;
        for i in sent..n {
            if self.carried[i] != Carried::Own {
                untaken[k] = self.scratch[i];
                k += 1;
            }
        }
        // SAFETY: mbufs the driver did not take, each freed once, without giving
        // back the buffers attached to them.
        unsafe { sys::shim_tx_free_untaken(untaken.as_mut_ptr(), k as u32) };
    }
}

/// Fills `out` with fresh mbufs of `pool`, all or none.
fn alloc_mbufs(pool: PoolPtr, out: &mut [*mut sys::rte_mbuf]) -> bool {
    if out.is_empty() {
        return true;
    }
    // SAFETY: a valid pool; `out` has room for its length.
    unsafe { sys::shim_rte_pktmbuf_alloc_bulk(pool.0, out.as_mut_ptr(), out.len() as u32) == 0 }
}

impl DpdkTx {
    /// The common case in one pass: every one of the first `n` packets is one segment of
    /// the same region whose buffers go without a copy (attached, or in their own mbufs),
    /// and no send time or VLAN tag is to be set. The mbufs are made ready in one call into
    /// the shim and sent; returns how many the driver took (their buffers now belong to
    /// the mbufs), or `None` when the burst is not of that shape (nothing done) and the
    /// general path must send it.
    #[inline(always)]
    fn transmit_one_region(
        &mut self,
        burst: &mut Burst,
        regions: &RegionSet,
        n: usize,
    ) -> Option<usize> {
        if self.send_times.is_some() || self.vlan_tags.is_some() {
            return None;
        }
        let packets = burst.packets();
        let first = packets.first()?.segments.first()?.region;
        let carrier = self.carriers.get(first.index())?;
        if matches!(carrier, TxCarrier::Copy) {
            return None;
        }
        let mut lens = [0u16; MAX_BURST];
        let mut indices = [0u32; MAX_BURST];
        for (i, p) in packets[..n].iter().enumerate() {
            let s = p.segments[0];
            if p.num_segments != 1 || s.region != first {
                return None;
            }
            // Buffers of a region sent without a copy are at most u16::MAX bytes long.
            lens[i] = s.len as u16;
            indices[i] = s.index;
        }
        let mut mbufs = [std::ptr::null_mut(); MAX_BURST];
        let own = match carrier {
            TxCarrier::Attach(attachable) => {
                let region = regions.get(first);
                let mut addrs = [std::ptr::null_mut(); MAX_BURST];
                for (a, &index) in addrs.iter_mut().zip(&indices[..n]) {
                    *a = region.buffer_addr(index) as *mut std::ffi::c_void;
                }
                if !alloc_mbufs(self.attach_pool, &mut mbufs[..n]) {
                    return Some(0);
                }
                // SAFETY: n fresh direct mbufs, each given buffer `indices[i]` of the
                // region, which the burst owns and hands over below for the mbufs the
                // driver takes (`shim_tx_free_untaken` leaves the others' buffers to the
                // burst).
                unsafe {
                    attachable.attach_bulk(&mbufs[..n], &addrs[..n], &lens[..n], &indices[..n])
                };
                false
            }
            _ => {
                for (m, &index) in mbufs.iter_mut().zip(&indices[..n]) {
                    *m = carrier.own_mbuf(index)?;
                }
                // SAFETY: the mbufs carrying this burst's buffers, out of their pool while
                // the burst owns the buffers; each reset to one segment of the frame's
                // length at the headroom where the region's data starts. A lent region's
                // mbufs only ever held one segment (its pool's, or sent by us), so their
                // second cache line is left as it is.
                unsafe {
                    if matches!(carrier, TxCarrier::Lent(_)) {
                        sys::shim_tx_reuse_lent_bulk(mbufs.as_ptr(), lens.as_ptr(), n as u32)
                    } else {
                        sys::shim_tx_reuse_bulk(mbufs.as_ptr(), lens.as_ptr(), n as u32)
                    }
                };
                true
            }
        };
        // SAFETY: a started port; the driver takes the mbufs it accepts.
        let sent = unsafe {
            sys::shim_rte_eth_tx_burst(self.port_id, self.hw_queue, mbufs.as_mut_ptr(), n as u16)
        } as usize;
        if sent < n && !own {
            // SAFETY: mbufs the driver did not take, each freed once, without giving back
            // the buffers attached to them.
            unsafe { sys::shim_tx_free_untaken(mbufs[sent..].as_mut_ptr(), (n - sent) as u32) };
        }
        // An own mbuf the driver did not take stays out of its pool, its buffer the
        // burst's.
        burst.forget_front(sent);
        Some(sent)
    }
}

impl TxPort for DpdkTx {
    fn transmit(&mut self, mut burst: Burst) -> Option<Burst> {
        let regions = burst.regions().clone();
        while !burst.is_empty() {
            let n = burst.len().min(MAX_BURST);
            if let Some(sent) = self.transmit_one_region(&mut burst, &regions, n) {
                if sent > 0 {
                    self.reclaim.sent();
                }
                if sent < n {
                    return Some(burst);
                }
                continue;
            }
            let (copies, attaches) = self.plan(&burst, n);
            if copies
                + attaches
                + self.carried[..n]
                    .iter()
                    .filter(|c| **c == Carried::Own)
                    .count()
                < n
            {
                // Frames too large for this queue's mbufs (forwarded from a region with
                // larger buffers): counted and freed, never sent cut.
                let keep: Vec<bool> = self.carried[..n]
                    .iter()
                    .map(|c| *c != Carried::TooLarge)
                    .collect();
                let dropped = burst.drop_front_where(n, |i| !keep[i]);
                self.counters
                    .drop_packets(DropReason::Malformed, dropped as u64);
                continue;
            }
            let mut copy_mbufs = [std::ptr::null_mut(); MAX_BURST];
            let mut attach_mbufs = [std::ptr::null_mut(); MAX_BURST];
            if !alloc_mbufs(self.pool, &mut copy_mbufs[..copies]) {
                return Some(burst);
            }
            if !alloc_mbufs(self.attach_pool, &mut attach_mbufs[..attaches]) {
                if copies > 0 {
                    // SAFETY: fresh mbufs, each freed once.
                    unsafe {
                        sys::shim_rte_pktmbuf_free_bulk(copy_mbufs.as_mut_ptr(), copies as u32)
                    };
                }
                return Some(burst);
            }
            self.carry(&burst, &regions, n, (&copy_mbufs, &attach_mbufs));
            self.stamp_send_times(&burst, n);
            self.mark_vlan_tags(&burst, n);
            // SAFETY: a started port; the driver takes the mbufs it accepts.
            let sent = unsafe {
                sys::shim_rte_eth_tx_burst(
                    self.port_id,
                    self.hw_queue,
                    self.scratch.as_mut_ptr(),
                    n as u16,
                )
            } as usize;
            if sent > 0 {
                self.reclaim.sent();
            }
            if sent < n {
                self.free_untaken(sent, n);
            }
            let copied = self.carried[..sent]
                .iter()
                .filter(|c| **c == Carried::Copied)
                .count();
            self.counters.add_copied(copied as u64);
            // Sent copies free their buffers; the others now belong to their mbufs.
            let carried = self.carried;
            burst.hand_over_front(sent, |i| carried[i] != Carried::Copied);
            if sent < n {
                return Some(burst);
            }
        }
        None
    }

    fn idle(&mut self) {
        match self.reclaim.idle() {
            ReclaimStep::Nothing => {}
            ReclaimStep::DoneCleanup => {
                // SAFETY: a started port and one of its TX queues, used by this worker alone.
                let answer =
                    unsafe { sys::rte_eth_tx_done_cleanup(self.port_id, self.hw_queue, 0) };
                self.reclaim.cleaned(answer);
            }
            ReclaimStep::ZeroBurst => {
                if self.idle_probe.is_null() {
                    let mut probe = [std::ptr::null_mut()];
                    if !alloc_mbufs(self.pool, &mut probe) {
                        return;
                    }
                    self.idle_probe = probe[0];
                }
                let mut probe = [self.idle_probe];
                // SAFETY: as above; a burst of no packets hands the driver nothing, and
                // the one entry it may read is a live mbuf of ours.
                unsafe {
                    sys::shim_rte_eth_tx_burst(self.port_id, self.hw_queue, probe.as_mut_ptr(), 0)
                };
            }
        }
    }
}

impl Drop for DpdkTx {
    fn drop(&mut self) {
        if !self.idle_probe.is_null() {
            // SAFETY: allocated from `pool` by this queue, never handed to a driver (bursts
            // of zero packets take nothing), freed once; the port that owns the pool
            // outlives its queues.
            unsafe { sys::shim_rte_pktmbuf_free_bulk(&mut self.idle_probe, 1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reclaim schedule, with the driver's answers given by the test (no device here
    /// holds sent mbufs: the virtual devices free them in the burst call).
    #[test]
    fn an_idle_queue_reclaims_until_nothing_is_left_and_only_after_a_send() {
        let mut r = IdleReclaim::default();
        assert!(
            (0..1000).all(|_| r.idle() == ReclaimStep::Nothing),
            "nothing sent"
        );
        r.sent();
        let mut steps = Vec::new();
        let mut answers = [32, 5, 0].into_iter();
        for _ in 0..10 * RECLAIM_EVERY {
            match r.idle() {
                ReclaimStep::Nothing => {}
                ReclaimStep::DoneCleanup => {
                    steps.push(ReclaimStep::DoneCleanup);
                    r.cleaned(answers.next().expect("no pass after one freed nothing"));
                }
                ReclaimStep::ZeroBurst => panic!("cleanup is supported"),
            }
        }
        assert_eq!(
            steps.len(),
            3,
            "passes until one frees nothing, one per {RECLAIM_EVERY} idle polls"
        );
        // A driver without tx_done_cleanup: a bounded number of zero-packet bursts.
        let mut r = IdleReclaim::default();
        r.sent();
        let mut zero = 0;
        for _ in 0..100 * RECLAIM_EVERY {
            match r.idle() {
                ReclaimStep::DoneCleanup => r.cleaned(-libc::ENOTSUP),
                ReclaimStep::ZeroBurst => zero += 1,
                ReclaimStep::Nothing => {}
            }
        }
        assert_eq!(zero, ZERO_BURST_TRIES);
        // A new send starts it again.
        r.sent();
        assert!((0..RECLAIM_EVERY).any(|_| r.idle() == ReclaimStep::ZeroBurst));
    }
}
