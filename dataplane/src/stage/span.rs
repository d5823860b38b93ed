//! How the stage joins copies: a burst whose buffers (and sources) are neighbours becomes
//! one contiguous or 2D copy, pageable sources are gathered into the open copy's pinned
//! staging, and bursts that continue the open copy join it instead of starting their own.

#![cfg(feature = "cuda")]

use super::*;

impl RxStage {
    /// The common case in one copy: a burst of single-segment packets in consecutive
    /// buffers of one DMA-reachable region (pinned host or device memory, as a pool hands
    /// them out under load), going into consecutive buffers of a device region, whole
    /// packets, copy mode. One contiguous copy when both regions have the same stride,
    /// else one strided (2D) copy of the longest packet's bytes per buffer. `out` is
    /// [`Burst::allocate_like`]'s; `None` leaves the burst to the general path.
    #[cfg(feature = "cuda")]
    pub(super) fn contiguous_span(&self, burst: &Burst, out: &Burst) -> Option<SpanCopy> {
        let first_region = match burst.run() {
            Some(run) => run.region,
            None => burst.packets().first()?.segments().first()?.region,
        };
        let (src_region, dst_region) = (
            self.regions.get(first_region),
            self.regions.get(*self.layout.first()?),
        );
        let from_device = match src_region.kind() {
            MemoryKind::Device => true,
            MemoryKind::HostPinned => false,
            _ => return None,
        };
        // Sources and destinations must be consecutive the same way: runs are, ascending,
        // with no descriptor to read.
        let (descending, longest) = match (burst.run(), out.run()) {
            (Some(run), Some(_)) => (false, run.len as usize),
            _ => self.consecutive(burst, out, true)?,
        };
        let n = burst.len();
        // From the lowest buffer; the last row ends with the highest buffer's packet.
        let (low, high) = if descending { (n - 1, 0) } else { (0, n - 1) };
        let (src_pitch, dst_pitch) = (src_region.stride(), dst_region.stride());
        let same_pitch = src_pitch == dst_pitch;
        let width = if same_pitch {
            (n - 1) * dst_pitch + burst.segment_len(high, 0)
        } else {
            longest
        };
        Some(SpanCopy {
            src: burst.segment_addr(low, 0),
            dst: out.segment_addr(low, 0),
            src_pitch,
            dst_pitch,
            width,
            rows: if same_pitch { 1 } else { n },
            from_device,
            packets: n,
        })
    }

    /// Copy mode, a burst of single-segment packets from pageable memory going into
    /// consecutive buffers of a device region (either direction): the output burst's
    /// device range one upload covers (lowest buffer's address, bytes up to the highest
    /// buffer's packet end). `out` is [`Burst::allocate_like`]'s; `None` leaves the burst
    /// to the general path.
    #[cfg(feature = "cuda")]
    pub(super) fn pageable_upload(&self, burst: &Burst, out: &Burst) -> Option<(u64, usize)> {
        let first = *burst.packets().first()?.segments().first()?;
        if !matches!(
            self.regions.get(first.region).kind(),
            MemoryKind::Host | MemoryKind::Huge
        ) {
            return None;
        }
        let (descending, _) = self.consecutive(burst, out, false)?;
        let n = burst.len();
        let (low, high) = if descending { (n - 1, 0) } else { (0, n - 1) };
        let width = (n - 1) * self.regions.get(self.layout[0]).stride()
            + out.packets()[high].segments()[0].len as usize;
        let slot_bytes = self.gpu.as_ref()?.slot_bytes;
        (width <= slot_bytes).then(|| (out.segment_addr(low, 0), width))
    }

    /// Copy mode into one device region, whole packets: where the one-copy paths apply
    /// and [`Burst::allocate_like`] makes the output burst.
    #[cfg(feature = "cuda")]
    pub(super) fn copies_into_one_device_region(&self) -> bool {
        self.gpu.as_ref().is_some_and(|g| g.mode == StageMode::Copy)
            && self.layout.len() == 1
            && self.split.is_none()
            && self.regions.get(self.layout[0]).kind() == MemoryKind::Device
    }

    /// The shared check of [`RxStage::contiguous_span`] and [`RxStage::pageable_upload`]:
    /// `burst`'s packets are of one region and their output buffers (in `out`, from
    /// [`Burst::allocate_like`], so single-segment and fitting) are consecutive
    /// (ascending or descending, as a pool hands back buffers in the order they were
    /// freed), with `sources_too` the source buffers the same way. Returns whether the
    /// buffers descend and the longest packet; `None` leaves the burst to the general path.
    #[cfg(feature = "cuda")]
    pub(super) fn consecutive(
        &self,
        burst: &Burst,
        out: &Burst,
        sources_too: bool,
    ) -> Option<(bool, usize)> {
        let first = *burst.packets().first()?.segments().first()?;
        let n = burst.len();
        let out_first = out.packets()[0].segments()[0].index;
        let descending = n > 1 && out.packets()[1].segments()[0].index < out_first;
        let at = |base: u32, k: u32| {
            if descending {
                base.wrapping_sub(k)
            } else {
                base.wrapping_add(k)
            }
        };
        let mut longest = 0;
        for (k, (p, o)) in burst.packets().iter().zip(out.packets()).enumerate() {
            let (s, d) = (p.segments()[0], o.segments()[0]);
            let k = k as u32;
            if s.region != first.region
                || (sources_too && s.index != at(first.index, k))
                || d.index != at(out_first, k)
            {
                return None;
            }
            longest = longest.max(s.len as usize);
        }
        Some((descending, longest))
    }

    /// The pageable path of [`RxStage::pageable_upload`]: every packet copied by the CPU
    /// (the copy helpers sharing them) into a slot's pinned staging at its output
    /// buffer's place, then uploaded with the bursts gathered before it when its output
    /// buffers continue theirs (right above), as one copy of up to the group size. Per
    /// packet it costs one CPU copy and no move list, sort or run search.
    #[cfg(feature = "cuda")]
    pub(super) fn submit_pageable(
        &mut self,
        burst: Burst,
        out: Burst,
        dst: u64,
        width: usize,
    ) -> Result<(), StageError> {
        let stride = self.regions.get(self.layout[0]).stride();
        let slot_bytes = self.gpu.as_ref().expect("a GPU path").slot_bytes;
        let limit = self.group_bytes.min(slot_bytes);
        // Where in the open copy's staging this burst goes when it continues it.
        let joins_at = self.open.as_ref().and_then(|o| {
            let at = o.span.packets * stride;
            (o.gathered && dst == o.span.dst + at as u64 && at + width <= limit).then_some(at)
        });
        let (slot, at) = match (joins_at, &self.open) {
            (Some(at), Some(open)) => (open.slot, at),
            _ => {
                self.flush_before(&burst)?;
                let Some(slot) = self.take_slot() else {
                    return Err(StageError::NoBuffers(burst));
                };
                (slot, 0)
            }
        };
        let gpu = self
            .gpu
            .as_mut()
            .expect("a GPU path exists for device regions");
        // Checked in release builds: the gathers write `slot`'s staging only.
        assert!(at + width <= gpu.slot_bytes, "staging sized for a group");
        // SAFETY: the slot's staging area lies inside the staging buffer.
        let base = unsafe { gpu.staging.as_ptr().add(slot * gpu.slot_bytes) } as u64;
        let gathers = (0..burst.len()).map(|i| CopyJob {
            src: burst.segment_addr(i, 0),
            dst: base + (at as u64 + out.segment_addr(i, 0) - dst),
            len: burst.packets()[i].segments()[0].len as usize,
        });
        // SAFETY: each source is a packet of the burst in pageable host memory; each
        // destination lies in this slot's staging (the assert above; output buffers are
        // consecutive and `width` covers them), at its own buffer's place past the bursts
        // gathered before, so no two overlap; no copy in flight uses the slot's staging
        // (its previous copy was handed back before the slot was taken again, and the open
        // copy is not issued yet).
        unsafe { copy_with(self.helpers.as_mut(), gathers) };
        let n = burst.len();
        match (joins_at, self.open.as_mut()) {
            (Some(_), Some(open)) => {
                open.span.width = at + width;
                open.span.packets += n;
                open.bursts += 1;
            }
            _ => {
                self.open = Some(OpenCopy {
                    span: SpanCopy {
                        src: base,
                        dst,
                        src_pitch: stride,
                        dst_pitch: stride,
                        width,
                        rows: 1,
                        from_device: false,
                        packets: n,
                    },
                    slot,
                    bursts: 1,
                    gathered: true,
                })
            }
        }
        // Issue now when a burst like this one would no longer fit.
        let full = self
            .open
            .as_ref()
            .is_some_and(|o| o.span.packets * stride + width > limit);
        self.behind_open_copy(out, burst, slot, full)
    }

    /// Queues `out` (and its source) behind the open copy, in `slot`, and issues that copy
    /// when `full`.
    #[cfg(feature = "cuda")]
    pub(super) fn behind_open_copy(
        &mut self,
        out: Burst,
        source: Burst,
        slot: usize,
        full: bool,
    ) -> Result<(), StageError> {
        self.in_flight.push_back(InFlight {
            out,
            _source: source,
            on_gpu: true,
            ends_copy: false,
            finish: Vec::new(),
            slot,
        });
        if full {
            self.flush()?;
        }
        Ok(())
    }

    /// The one-copy path: `span` joins the open copy when it continues it, else opens one
    /// (after issuing the old); a copy that reached its group size (at most
    /// [`GROUP_BYTES`]) is issued at once.
    #[cfg(feature = "cuda")]
    pub(super) fn submit_span(
        &mut self,
        span: SpanCopy,
        out: Burst,
        burst: Burst,
    ) -> Result<(), StageError> {
        let bytes = span.bytes();
        let joined = self.open.as_mut().is_some_and(|o| {
            !o.gathered && o.span.bytes() + bytes <= self.group_bytes && o.span.extend(&span)
        });
        let slot = if joined {
            let open = self.open.as_mut().expect("joined");
            open.bursts += 1;
            open.slot
        } else {
            self.flush_before(&burst)?;
            let Some(slot) = self.take_slot() else {
                return Err(StageError::NoBuffers(burst));
            };
            self.open = Some(OpenCopy {
                span,
                slot,
                bursts: 1,
                gathered: false,
            });
            slot
        };
        // Issue now when a burst like this one would no longer fit.
        let full = self
            .open
            .as_ref()
            .is_some_and(|o| o.span.bytes() + bytes > self.group_bytes);
        self.behind_open_copy(out, burst, slot, full)
    }
}

/// One copy of a burst in consecutive buffers: `rows` rows of `width` bytes, row `k` from
/// `src + k * src_pitch` to `dst + k * dst_pitch` (one row when the pitches are equal).
#[cfg(feature = "cuda")]
pub(super) struct SpanCopy {
    pub(super) src: u64,
    pub(super) dst: u64,
    pub(super) src_pitch: usize,
    pub(super) dst_pitch: usize,
    pub(super) width: usize,
    pub(super) rows: usize,
    pub(super) from_device: bool,
    /// Buffers covered, from `src` and `dst` up (rows of the 2D form).
    pub(super) packets: usize,
}

#[cfg(feature = "cuda")]
impl SpanCopy {
    /// Bytes moved.
    pub(super) fn bytes(&self) -> usize {
        self.width * self.rows
    }

    /// One contiguous run of buffers (equal strides), as opposed to rows of `width` bytes
    /// at two pitches. A one-packet burst between regions of unequal strides has one row
    /// but is of the second form: the form follows the pitches, not the row count.
    pub(super) fn contiguous(&self) -> bool {
        self.src_pitch == self.dst_pitch
    }

    /// Grows `self` by `next` when `next`'s buffers lie right above or right below
    /// `self`'s in both regions (same pitches and kind); false leaves `self` as it was.
    /// (Pinned and device pools are FIFO: they hand out bursts in the order they were
    /// freed, so consecutive bursts usually lie right above each other, wrapping at the
    /// region's end; below covers a LIFO pool and a burst freed out of turn.)
    pub(super) fn extend(&mut self, next: &SpanCopy) -> bool {
        let alike = self.from_device == next.from_device
            && self.src_pitch == next.src_pitch
            && self.dst_pitch == next.dst_pitch;
        if !alike {
            return false;
        }
        let above = |a: &SpanCopy, b: &SpanCopy| {
            b.src == a.src + (a.packets * a.src_pitch) as u64
                && b.dst == a.dst + (a.packets * a.dst_pitch) as u64
        };
        let (low, high) = if above(self, next) {
            (&*self, next)
        } else if above(next, self) {
            (next, &*self)
        } else {
            return false;
        };
        // The contiguous form ends with the highest buffer's packet; rows are as wide as
        // the longest packet.
        let width = if self.contiguous() {
            (high.src - low.src) as usize + high.width
        } else {
            self.width.max(next.width)
        };
        let (src, dst) = (low.src, low.dst);
        if !self.contiguous() {
            self.rows += next.rows;
        }
        self.src = src;
        self.dst = dst;
        self.width = width;
        self.packets += next.packets;
        true
    }
}

/// End of the run of moves starting at `k` (sorted by destination) whose destination
/// buffers are neighbours in one region, and with `with_source` whose sources are too, at
/// the same distance: such a run is one contiguous copy.
#[cfg(feature = "cuda")]
pub(super) fn run_end(regions: &RegionSet, moves: &[Move], k: usize, with_source: bool) -> usize {
    let first = moves[k];
    let stride = regions.get(first.dst_region).stride() as u64;
    let mut end = k + 1;
    while end < moves.len() {
        let (m, prev) = (moves[end], moves[end - 1]);
        let dst_next = m.dst_region == first.dst_region && m.dst == prev.dst + stride;
        let src_next =
            !with_source || (m.src_region == first.src_region && m.src == prev.src + stride);
        if !(dst_next && src_next) {
            break;
        }
        end += 1;
    }
    end
}
