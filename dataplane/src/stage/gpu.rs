//! The GPU side of a stage: queuing the moves that touch GPU memory in a table slot,
//! issuing coalesced copies and kernel launches, and waiting on their marks.

use super::*;

#[cfg(feature = "cuda")]
impl GpuPath {
    /// Queues every move that touches GPU memory in table `slot` and marks the slot after
    /// them. Returns the CPU's share of device-to-host moves.
    pub(super) fn submit(
        &mut self,
        regions: &RegionSet,
        moves: &[Move],
        slot: usize,
        helpers: Option<&mut CopyHelpers>,
    ) -> Result<CpuFinish, gpudirect::GpuError> {
        // Cheap when already current; the worker thread may differ from the creator.
        self.gpu.bind()?;
        let dev = |r| gpu_side(regions, r);
        let pinned = |r| regions.get(r).kind() == MemoryKind::HostPinned;
        // SAFETY: the slot's staging area lies inside the staging buffer.
        let base = unsafe { self.staging.as_ptr().add(slot * self.slot_bytes) };
        let cap = self.slot_bytes;
        let mut used = 0usize;
        let mut finish = Vec::new();
        self.items.clear();
        let mut copy_mode_moves = std::mem::take(&mut self.pageable);
        let mut direct = std::mem::take(&mut self.direct);
        let mut runs = std::mem::take(&mut self.runs);
        copy_mode_moves.clear();
        direct.clear();
        runs.clear();
        for m in moves
            .iter()
            .filter(|m| dev(m.src_region) || dev(m.dst_region))
        {
            let reachable_src = dev(m.src_region) || pinned(m.src_region);
            let reachable_dst = dev(m.dst_region) || pinned(m.dst_region);
            if self.mode == StageMode::Copy && dev(m.dst_region) {
                if reachable_src {
                    direct.push(*m);
                } else {
                    copy_mode_moves.push(*m);
                }
                continue;
            }
            let (mut src, mut dst) = (m.src, m.dst);
            if !reachable_src {
                // Pageable host bytes: gathered into pinned staging for the kernel.
                assert!(used + m.len as usize <= cap, "staging sized for a burst");
                // SAFETY: the source is host memory of the burst; staging has room.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        m.src as *const u8,
                        base.add(used),
                        m.len as usize,
                    )
                };
                src = base as u64 + used as u64;
                used += m.len as usize;
            }
            if !reachable_dst {
                // Pageable host destination: the GPU writes staging, the CPU finishes.
                assert!(used + m.len as usize <= cap, "staging sized for a burst");
                dst = base as u64 + used as u64;
                finish.push((used, m.dst, m.len));
                used += m.len as usize;
            }
            self.items.push((src, dst, m.len));
        }
        // Copy mode, GPU-reachable sources: runs of packets adjacent in both source and
        // destination go as one DMA copy each; lone packets join the kernel's items.
        direct.sort_unstable_by_key(|m| m.dst);
        let mut k = 0;
        while k < direct.len() {
            let end = run_end(regions, &direct, k, true);
            if end - k >= 2 {
                let last = direct[end - 1];
                let span = (last.dst - direct[k].dst) as usize + last.len as usize;
                runs.push((
                    direct[k].src,
                    direct[k].dst,
                    span,
                    dev(direct[k].src_region),
                ));
            } else {
                self.items
                    .push((direct[k].src, direct[k].dst, direct[k].len));
            }
            k = end;
        }
        for &(src, dst, span, from_device) in &runs {
            // SAFETY: both runs lie in buffers of the bursts in flight (pinned host or
            // device memory), untouched until the slot's event completes.
            unsafe {
                if from_device {
                    self.gpu.copy_device(dst, src, span)
                } else {
                    self.gpu.copy_to_device(dst, src as *const u8, span)
                }
            }?;
        }
        if self.items.len() > MAX_ITEMS {
            // More items than one table holds: one launch at a time, waited for.
            for chunk in self.items.chunks(MAX_ITEMS) {
                // SAFETY: as below; the sync frees the table before the next chunk.
                unsafe { self.gpu.batched_copy_in(slot, chunk) }?;
                self.gpu.sync()?;
            }
        } else {
            // SAFETY: every source and destination is device memory or pinned host memory
            // mapped for the GPU, owned by the bursts or staging until the event below
            // completes; the slot's previous launch completed (at most DEPTH in flight).
            unsafe { self.gpu.batched_copy_in(slot, &self.items) }?;
        }
        let pageable_done = if copy_mode_moves.is_empty() {
            Ok(())
        } else {
            self.copy_runs(regions, &mut copy_mode_moves, base, used, helpers)
        };
        self.pageable = copy_mode_moves;
        self.direct = direct;
        self.runs = runs;
        pageable_done?;
        self.gpu.record_slot(slot)?;
        Ok(finish)
    }

    /// One copy of consecutive buffers (see [`RxStage::contiguous_span`]), marked for
    /// completion in table `slot`.
    pub(super) fn issue_span(
        &mut self,
        c: &SpanCopy,
        slot: usize,
    ) -> Result<(), gpudirect::GpuError> {
        self.gpu.bind()?;
        // SAFETY: every row lies in the consecutive buffers of the bursts in flight (the
        // source pinned host or device memory, the destination device memory), untouched
        // until the slot's mark completes; a row is at most one buffer's stride wide.
        unsafe {
            match (c.rows, c.from_device) {
                (1, true) => self.gpu.copy_device(c.dst, c.src, c.width),
                (1, false) => self.gpu.copy_to_device(c.dst, c.src as *const u8, c.width),
                (rows, on_device) => self.gpu.copy_rows_to_device(
                    c.dst,
                    c.dst_pitch,
                    c.src,
                    c.src_pitch,
                    on_device,
                    c.width,
                    rows,
                ),
            }
        }?;
        self.gpu.record_slot(slot)
    }

    /// Copy mode: gathers into staging laid out like the destinations and issues one
    /// asynchronous copy per run of adjacent destination buffers. Alone, each run's copy
    /// goes as soon as it is gathered (the GPU moves one run while the CPU gathers the
    /// next); with `helpers`, every run is gathered first, shared out, then uploaded.
    pub(super) fn copy_runs(
        &mut self,
        regions: &RegionSet,
        moves: &mut [Move],
        base: *mut u8,
        mut used: usize,
        helpers: Option<&mut CopyHelpers>,
    ) -> Result<(), gpudirect::GpuError> {
        moves.sort_unstable_by_key(|m| m.dst);
        // Move `m` of the run to `dst` at staging offset `at`, at its own packet's place.
        let gather = |m: &Move, dst: u64, at: usize| CopyJob {
            src: m.src,
            dst: base as u64 + (at + (m.dst - dst) as usize) as u64,
            len: m.len as usize,
        };
        self.uploads.clear();
        let mut k = 0;
        while k < moves.len() {
            let end = run_end(regions, moves, k, false);
            let (first, last) = (moves[k], moves[end - 1]);
            let span = (last.dst - first.dst) as usize + last.len as usize;
            // Checked in release builds: the run's gathers write `used..used + span`.
            assert!(used + span <= self.slot_bytes, "staging sized for a burst");
            let up = Upload {
                moves: k..end,
                dst: first.dst,
                at: used,
                span,
            };
            if helpers.is_some() {
                self.uploads.push(up);
            } else {
                // SAFETY: each source is host memory of a burst in flight; each
                // destination lies in this slot's staging (the assert above), at its own
                // packet's place, so no two copies overlap.
                unsafe { copy_with(None, moves[k..end].iter().map(|m| gather(m, up.dst, up.at))) };
                // SAFETY: pinned staging stays untouched until the burst's event
                // completes; the destination run lies in device buffers of the new burst.
                unsafe { self.gpu.copy_to_device(up.dst, base.add(up.at), up.span) }?;
            }
            used += span;
            k = end;
        }
        if self.uploads.is_empty() {
            return Ok(());
        }
        let jobs = self.uploads.iter().flat_map(|up| {
            moves[up.moves.clone()]
                .iter()
                .map(|m| gather(m, up.dst, up.at))
        });
        // SAFETY: as above, for every run; all are done when this returns.
        unsafe { copy_with(helpers, jobs) };
        for up in &self.uploads {
            // SAFETY: pinned staging stays untouched until the burst's event completes;
            // the destination run lies in device buffers of the new burst.
            unsafe { self.gpu.copy_to_device(up.dst, base.add(up.at), up.span) }?;
        }
        Ok(())
    }
}
