//! [`Gpu`]'s frame kernels: digests of frames in GPU memory (checked by the CPU against its
//! own model) and test frames written in place from a template.

use super::*;

impl Gpu {
    /// For each packet (`(address, len)`, GPU-readable): the sum of its big-endian 16-bit
    /// words from byte `sum_from` on into `sums[i]`, and its first `head` and last `tail`
    /// bytes into `digests[i * (head + tail)..]`. Waits for the result.
    ///
    /// # Safety
    /// The packets must be readable by the GPU until this returns.
    pub unsafe fn frame_digest(
        &mut self,
        packets: &[(u64, u32)],
        sum_from: u32,
        (head, tail): (u32, u32),
        sums: &mut [u64],
        digests: &mut [u8],
    ) -> Result<(), GpuError> {
        let n = packets.len();
        let per = digest_bytes(head, tail)?;
        if sums.len() < n || digests.len() < n * per {
            return Err(out_of_range(format_args!(
                "{n} packets need {n} sums and {} digest bytes; {} and {} given",
                n * per,
                sums.len(),
                digests.len()
            )));
        }
        // The last slot, so that digests queued in the first ones stay undisturbed.
        let slot = TABLE_SLOTS - 1;
        // SAFETY: the caller keeps the packets readable until this returns, after the wait.
        unsafe {
            self.queue_frame_digest(slot, n, packets.iter().copied(), sum_from, (head, tail))
        }?;
        let (s, d) = self.frame_digest_output(slot, n, per)?;
        sums[..n].copy_from_slice(s);
        digests[..n * per].copy_from_slice(d);
        Ok(())
    }

    /// The first half of [`Gpu::frame_digest`]: queues the digest of the `n` `packets` (at
    /// most [`MAX_ITEMS`]) in table `slot`, with an output of its own, and returns without
    /// waiting, so the caller can work while the GPU digests. [`Gpu::frame_digest_output`]
    /// waits for it. Two slots in turn keep one digest running while the previous one's
    /// output is read. [`Gpu::frame_digest`] uses the last slot.
    ///
    /// # Safety
    /// The packets must stay readable by the GPU until [`Gpu::frame_digest_output`] for
    /// this slot returned; the slot's previous digest must have been waited for.
    pub unsafe fn queue_frame_digest(
        &mut self,
        slot: usize,
        n: usize,
        packets: impl Iterator<Item = (u64, u32)>,
        sum_from: u32,
        (head, tail): (u32, u32),
    ) -> Result<(), GpuError> {
        if n > MAX_ITEMS || slot >= TABLE_SLOTS {
            return Err(out_of_range(format_args!(
                "a digest of {n} packets (at most {MAX_ITEMS}) in table slot {slot} (of {TABLE_SLOTS})"
            )));
        }
        let per = digest_bytes(head, tail)?;
        self.digest_queued[slot] = (0, 0);
        if n == 0 {
            return Ok(());
        }
        let need = n * (8 + per);
        if self.digest_out[slot]
            .as_ref()
            .is_none_or(|b| b.len() < need)
        {
            self.digest_out[slot] =
                Some(PinnedBuffer::alloc(self.ordinal, need.max(MAX_ITEMS * 72))?);
        }
        let (src, _, len, _) = self.table_parts_in(slot);
        let mut written = 0;
        for (k, (a, l)) in packets.enumerate().take(n) {
            src[k] = a;
            len[k] = l;
            written += 1;
        }
        // Checked in release builds: a short iterator would leave stale table entries.
        if written != n {
            return Err(out_of_range(format_args!(
                "{written} packets given for a digest of {n}"
            )));
        }
        let out = self.digest_out[slot]
            .as_ref()
            .expect("just allocated")
            .as_ptr();
        let (s, _, l, _) = self.table_addrs_in(slot);
        let (sums_at, digest_at) = (out as u64, out as u64 + 8 * n as u64);
        let n32 = n as u32;
        self.bind()?;
        let cfg = per_block(n32);
        let mut b = self.stream.launch_builder(&self.frame_digest);
        b.arg(&s)
            .arg(&l)
            .arg(&n32)
            .arg(&sum_from)
            .arg(&head)
            .arg(&tail)
            .arg(&digest_at)
            .arg(&sums_at);
        // SAFETY: the signature matches; table and output stay valid until the wait.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(frame_digest)"))?;
        // A mark in pinned memory rather than a stream sync: no driver call while waiting.
        self.record_slot(slot)?;
        self.digest_queued[slot] = (n, per);
        Ok(())
    }

    /// Waits for the digest [`Gpu::queue_frame_digest`] queued in `slot` for `n` packets
    /// of `per` head and tail bytes each, and gives its sums and digests, read in place.
    pub fn frame_digest_output(
        &self,
        slot: usize,
        n: usize,
        per: usize,
    ) -> Result<(&[u64], &[u8]), GpuError> {
        if n == 0 {
            return Ok((&[], &[]));
        }
        let out = match self.digest_out.get(slot).and_then(|o| o.as_ref()) {
            Some(out) if self.digest_queued[slot] == (n, per) => out,
            _ => {
                return Err(GpuError::Unsupported(format!(
                    "no digest of {n} packets of {per} bytes queued in slot {slot}"
                )));
            }
        };
        self.wait_slot(slot)?;
        let out = out.as_ptr();
        // SAFETY: the digest last queued in this slot (checked above) wrote n sums, then n
        // digests of `per` bytes, into this pinned output owned by `self` (sized for them
        // when queued), and it has finished; `&self` keeps the slot from being queued
        // again while the views live.
        Ok(unsafe {
            (
                std::slice::from_raw_parts(out.cast::<u64>(), n),
                std::slice::from_raw_parts(out.add(8 * n), n * per),
            )
        })
    }

    /// Queues the writing of test frames: frame `fields` of template `t` at each address
    /// (device memory, or pinned host memory mapped for the GPU), one warp per frame, as
    /// [`crate::frames::write_frame`] does on the CPU. [`Gpu::sync`] waits for it.
    ///
    /// # Safety
    /// Every address must be writable by the GPU for `t.frame_len` bytes until the next
    /// sync, and the previous call's work must have completed (a sync since).
    pub unsafe fn write_frames(
        &mut self,
        t: &FrameTemplate,
        frames: &[(u64, FrameFields)],
    ) -> Result<(), GpuError> {
        assert!(
            t.frame_len as usize >= crate::frames::HEADER + crate::frames::TRAILER,
            "frames shorter than header and trailer"
        );
        let n = frames.len();
        if n == 0 {
            return Ok(());
        }
        let field_bytes = std::mem::size_of::<FrameFields>();
        let need = n * (8 + field_bytes);
        if self.frame_table.as_ref().is_none_or(|b| b.len() < need) {
            self.frame_table = Some(PinnedBuffer::alloc(self.ordinal, need.max(1 << 16))?);
        }
        let table = self.frame_table.as_ref().expect("just allocated").as_ptr();
        // SAFETY: the table holds `need` bytes of pinned memory owned by `self`, 8-byte
        // aligned (page-aligned, and 8 * n before the fields); the previous launch that read
        // it completed (the caller synced before reusing the frames' buffers, and every
        // launch of `self` is on its one stream, so this launch runs after the earlier).
        let (dst, fields) = unsafe {
            (
                std::slice::from_raw_parts_mut(table.cast::<u64>(), n),
                std::slice::from_raw_parts_mut(table.add(8 * n).cast::<FrameFields>(), n),
            )
        };
        for (k, &(a, f)) in frames.iter().enumerate() {
            dst[k] = a;
            fields[k] = f;
        }
        let (d, f) = (table as u64, table as u64 + 8 * n as u64);
        let n32 = n as u32;
        self.bind()?;
        let cfg = LaunchConfig {
            grid_dim: (n32.div_ceil(REORDER_WARPS), 1, 1),
            block_dim: (REORDER_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.write_frames);
        b.arg(&d).arg(&f).arg(&n32).arg(t);
        // SAFETY: the signature matches (the template by value); the table stays valid until
        // the next call, which the caller makes after syncing; the destinations are the
        // caller's promise.
        unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(write_frames)"))?;
        Ok(())
    }

    /// Queues the decoding of `n_prbs` block floating point PRBs of `iq_width`-bit
    /// mantissas, back to back at `src`, into `24 * n_prbs` values at `dst`: `f32`, or
    /// IEEE half bits when `half`. [`Gpu::sync`] waits for it.
    ///
    /// # Safety
    /// `src` must be readable and `dst` writable by the GPU (device memory, or pinned host
    /// memory mapped for it) for those sizes until the next sync.
    pub unsafe fn decode_bfp(
        &mut self,
        src: u64,
        n_prbs: u32,
        iq_width: u32,
        half: bool,
        dst: u64,
    ) -> Result<(), GpuError> {
        if !(1..=16).contains(&iq_width) {
            return Err(out_of_range(format_args!("iq_width {iq_width} (1 to 16)")));
        }
        let threads = u64::from(n_prbs) * 24;
        if threads == 0 {
            return Ok(());
        }
        let blocks = u32::try_from(threads.div_ceil(u64::from(THREADS)))
            .map_err(|_| out_of_range(format_args!("{n_prbs} PRBs in one launch")))?;
        self.bind()?;
        let half = u32::from(half);
        let mut b = self.stream.launch_builder(&self.bfp_decode);
        b.arg(&src).arg(&n_prbs).arg(&iq_width).arg(&half).arg(&dst);
        // SAFETY: the signature matches (pointers as 64-bit addresses); the memory is the
        // caller's promise.
        unsafe { b.launch(per_block(blocks)) }.map_err(driver("cuLaunchKernel(bfp_decode)"))?;
        Ok(())
    }

    /// Queues the decoding of `n_samples` fixed-point complex samples stored as `storage`,
    /// back to back at `src`, into `2 * n_samples` values at `dst`: `f32`, or IEEE half
    /// bits when `half`. [`Gpu::sync`] waits for it.
    ///
    /// # Safety
    /// `src` must be readable and `dst` writable by the GPU (device memory, or pinned host
    /// memory mapped for it) for those sizes until the next sync.
    pub unsafe fn decode_fixed_iq(
        &mut self,
        src: u64,
        n_samples: u64,
        storage: SampleStorage,
        half: bool,
        dst: u64,
    ) -> Result<(), GpuError> {
        let values = n_samples
            .checked_mul(2)
            .ok_or_else(|| out_of_range(format_args!("{n_samples} samples")))?;
        if values == 0 {
            return Ok(());
        }
        let blocks = u32::try_from(values.div_ceil(u64::from(THREADS)))
            .map_err(|_| out_of_range(format_args!("{n_samples} samples in one launch")))?;
        self.bind()?;
        let (format, half) = (storage as u32, u32::from(half));
        let mut b = self.stream.launch_builder(&self.fixed_iq_decode);
        b.arg(&src).arg(&values).arg(&format).arg(&half).arg(&dst);
        // SAFETY: the signature matches (pointers as 64-bit addresses, the count as u64);
        // the memory is the caller's promise.
        unsafe { b.launch(per_block(blocks)) }
            .map_err(driver("cuLaunchKernel(fixed_iq_decode)"))?;
        Ok(())
    }
}

/// How [`Gpu::decode_fixed_iq`]'s input stores each of I and Q.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SampleStorage {
    /// Signed 8-bit.
    I8 = 0,
    /// Signed 16-bit, big-endian (VITA-49's and O-RAN's byte order).
    I16Be = 1,
    /// Signed 16-bit, little-endian.
    I16Le = 2,
}
