//! Moving packets between bursts and out of them: descriptors change hands, buffers
//! either go with them or back to their pools. Every path checks that both bursts share a
//! region set (in release builds), since a buffer index means nothing in another set.

use super::{Burst, Packet};
use once_cell::race::OnceBox;

impl Burst {
    /// Moves up to `max` packets from the front of `from` to the end of this burst
    /// (descriptors only; the bytes stay where they are). Returns how many moved.
    ///
    /// # Panics
    /// When the two bursts come from different region sets (two data planes): a buffer
    /// index only means something in the set it was taken from, so moving it would let two
    /// bursts own one buffer. Checked in release builds; see [`Burst::same_memory`].
    pub fn take_from(&mut self, from: &mut Burst, max: usize) -> usize {
        assert!(
            self.same_memory(from),
            "Burst::take_from: the bursts belong to different region sets (two data planes)"
        );
        let n = max.min(from.len());
        if self.is_empty() {
            self.epoch = from.epoch;
        }
        if self.is_empty() && n == from.len() {
            // Whole burst into an empty one: exchange the descriptors (or the run) instead
            // of copying. An empty burst is no run, so `from` is left an empty ordinary one.
            std::mem::swap(&mut self.packets, &mut from.packets);
            std::mem::swap(&mut self.run, &mut from.run);
            std::mem::swap(&mut self.run_descriptors, &mut from.run_descriptors);
        } else {
            let moved = from.descriptors_mut().drain(..n);
            self.descriptors_mut().extend(moved);
        }
        n
    }

    /// Keeps the first `n` packets; the buffers of the rest go back to their pools.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.descriptors_mut();
            let mut gone = Burst::empty(self.regions.clone(), self.port, self.queue, 0);
            gone.packets.extend(self.packets.drain(n..));
        }
    }

    /// Removes the first `k` packets: those `owned_elsewhere(i)` says an engine now owns
    /// (their buffers went with them: sent without a copy) are forgotten, the others' buffers
    /// return to their pools.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn hand_over_front(&mut self, k: usize, owned_elsewhere: impl Fn(usize) -> bool) {
        let k = k.min(self.len());
        self.descriptors_mut();
        let mut gone = Burst::empty(self.regions.clone(), self.port, self.queue, k);
        for (i, p) in self.packets.drain(..k).enumerate() {
            if !owned_elsewhere(i) {
                gone.packets.push(p);
            }
        }
        drop(gone);
    }

    /// Removes the first `k` packets without freeing their buffers: they were handed over
    /// (to a device's mbufs, which give them back when freed). A run stays a run.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    pub(crate) fn forget_front(&mut self, k: usize) {
        let k = k.min(self.len());
        if k == 0 {
            return;
        }
        if let Some(run) = &mut self.run {
            self.run_descriptors = OnceBox::new();
            match std::num::NonZeroU32::new(run.count.get() - k as u32) {
                Some(left) => {
                    run.first += k as u32;
                    run.count = left;
                }
                None => self.run = None,
            }
            return;
        }
        if k == self.packets.len() {
            self.packets.clear();
        } else {
            self.packets.drain(..k);
        }
    }

    /// Among the first `n` packets, frees those `unwanted(i)` selects; the rest keep their
    /// order. Returns how many were freed.
    pub(crate) fn drop_front_where(&mut self, n: usize, unwanted: impl Fn(usize) -> bool) -> usize {
        let n = n.min(self.len());
        self.descriptors_mut();
        let mut gone = Burst::empty(self.regions.clone(), self.port, self.queue, 0);
        let mut i = 0;
        self.packets.retain(|p| {
            let at = i;
            i += 1;
            if at < n && unwanted(at) {
                gone.packets.push(*p);
                false
            } else {
                true
            }
        });
        gone.packets.len()
    }

    /// Hands every packet to `route`, which returns the index of the output burst it
    /// belongs in and its flow id, or `None` to drop it (its buffers go back to their pools
    /// when this burst is dropped). Returns how many packets were dropped.
    pub(crate) fn distribute(
        mut self,
        outputs: &mut [Burst],
        mut route: impl FnMut(&Burst, usize) -> Option<(usize, u32)>,
    ) -> usize {
        assert_same_memory(&self, outputs);
        self.descriptors_mut();
        let mut kept = 0;
        for i in 0..self.packets.len() {
            match route(&self, i) {
                Some((out, flow_id)) => {
                    let mut p = self.packets[i];
                    p.flow_id = flow_id;
                    outputs[out].descriptors_mut().push(p);
                }
                None => {
                    self.packets[kept] = self.packets[i];
                    kept += 1;
                }
            }
        }
        self.packets.truncate(kept);
        kept
    }

    /// Moves every packet for which `pick` names an output to the end of that output
    /// burst; the others stay here, in order.
    pub(crate) fn sort_out(
        &mut self,
        outputs: &mut [Burst],
        mut pick: impl FnMut(&Packet) -> Option<usize>,
    ) {
        assert_same_memory(self, outputs);
        self.descriptors_mut();
        let mut kept = 0;
        for i in 0..self.packets.len() {
            let p = self.packets[i];
            match pick(&p) {
                Some(out) => outputs[out].descriptors_mut().push(p),
                None => {
                    self.packets[kept] = p;
                    kept += 1;
                }
            }
        }
        self.packets.truncate(kept);
    }
}

/// The release-mode check of every internal path that moves descriptors into other
/// bursts: all of them must share `from`'s region set.
#[inline]
fn assert_same_memory(from: &Burst, outputs: &[Burst]) {
    assert!(
        outputs.iter().all(|o| from.same_memory(o)),
        "packet descriptors moved between bursts of different region sets"
    );
}
