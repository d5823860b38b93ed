//! [`Gpu`]'s reorder launches: a batch of packets put in sequence-number order (copied or
//! converted) into one output buffer on a table slot's stream, and the completion marks
//! that say when a slot's batch is done.

use super::*;

impl Gpu {
    /// Reorders `packets` (`(address, len)` in arrival order, GPU-readable) into `out`
    /// (device address, `spec.batch_bytes()` long); every byte of `out` that no packet
    /// wrote is zeroed (slot tails and missing slots, without a separate memset pass).
    /// Waits for the result and returns the batch id of the first packet (`None` when it
    /// was too short).
    ///
    /// # Safety
    /// The packets must be readable and `out` writable by the GPU until this returns.
    pub unsafe fn reorder(
        &mut self,
        spec: &ReorderSpec,
        packets: &[(u64, u32)],
        out: u64,
    ) -> Result<Option<u32>, GpuError> {
        // SAFETY: the caller's promise; the wait below ends the use of table slot 0.
        unsafe { self.reorder_in(0, spec, packets, out) }?;
        self.wait_reorder(0)?;
        Ok(self.reorder_batch_id(0))
    }

    /// Queues a reorder (as [`Gpu::reorder`]) with its arguments in table `slot`, without
    /// waiting. It runs on the slot's own stream ([`Gpu::slot_stream`]), so batches in
    /// different slots overlap on the GPU, and marks itself complete in the slot's pinned
    /// metadata, so no event is needed: [`Gpu::reorder_done`] and [`Gpu::wait_reorder`]
    /// read it. Once complete, [`Gpu::reorder_batch_id`] gives the batch id.
    ///
    /// # Safety
    /// The packets must stay readable and `out` writable by the GPU until it completed;
    /// the previous work that used `slot` must have completed.
    pub unsafe fn reorder_in(
        &mut self,
        slot: usize,
        spec: &ReorderSpec,
        packets: &[(u64, u32)],
        out: u64,
    ) -> Result<(), GpuError> {
        assert!(packets.len() <= MAX_ITEMS, "more than MAX_ITEMS packets");
        assert!(
            spec.packets_per_batch() as usize <= MAX_ITEMS,
            "more than MAX_ITEMS slots"
        );
        let (src, _, len, meta) = self.table_parts_in(slot);
        for (k, &(a, l)) in packets.iter().enumerate() {
            src[k] = a;
            len[k] = l;
        }
        meta[0] = 0;
        meta[1] = 0;
        // SAFETY: the word is in pinned memory the GPU also writes; volatile keeps the
        // store from being merged with the kernel's later one.
        unsafe { std::ptr::write_volatile(&mut meta[2], 0) };
        let (s, _, l, m) = self.table_addrs_in(slot);
        let seq = spec.sequence();
        let (batch_off, batch_width) = match spec.method {
            Method::SeqBatchNumber { batch, .. } => (batch.bit_offset, batch.bit_width),
            Method::SeqPacketsPerBatch { .. } => (0, 0),
        };
        let ppb = spec.packets_per_batch();
        let (in_type, out_type, network) = match spec.conversion {
            None => (-1i32, 0i32, 0i32),
            Some(c) => (c.input.code(), c.output.code(), c.network_order as i32),
        };
        let (in_slot, out_slot) = (spec.in_slot_bytes, spec.out_slot_bytes());
        self.bind()?;
        // Slot tags and counters of this table slot: launches in other slots may run at the
        // same time.
        let filled = self.filled.device_ptr() + (slot * MAX_ITEMS * 4) as u64;
        let done = self.done.device_ptr() + (slot * 8) as u64;
        let stream = self.slot_streams[slot].clone();
        let generation = self.generation;
        self.generation = self.generation.wrapping_add(1).max(1);
        self.slot_generation[slot] = generation;
        // A batch of at least `ppb` packets cleans up after itself in its one launch;
        // with fewer, a second pass zeroes the empty slots.
        let whole = packets.len() >= ppb as usize;
        let n = packets.len() as u32;
        if n > 0 {
            let clean = whole as u32;
            let cfg = LaunchConfig {
                grid_dim: (n.div_ceil(REORDER_WARPS), 1, 1),
                block_dim: (REORDER_WARPS * 32, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.reorder);
            b.arg(&s)
                .arg(&l)
                .arg(&n)
                .arg(&seq.bit_offset)
                .arg(&seq.bit_width)
                .arg(&batch_off)
                .arg(&batch_width)
                .arg(&ppb)
                .arg(&spec.payload_byte_offset)
                .arg(&in_slot)
                .arg(&out_slot)
                .arg(&in_type)
                .arg(&out_type)
                .arg(&network)
                .arg(&out)
                .arg(&m)
                .arg(&filled)
                .arg(&generation)
                .arg(&clean)
                .arg(&done);
            // SAFETY: the signature matches; the table, `out`, the slot tags and the
            // completion counter stay valid until the work completes (the caller's promise
            // and `self`).
            unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(reorder)"))?;
        }
        if !whole {
            let cfg = per_block(ppb);
            let mut b = stream.launch_builder(&self.zero_missing);
            b.arg(&out)
                .arg(&out_slot)
                .arg(&ppb)
                .arg(&filled)
                .arg(&generation);
            // SAFETY: the signature matches; `out` holds ppb slots of out_slot bytes.
            unsafe { b.launch(cfg) }.map_err(driver("cuLaunchKernel(zero_missing)"))?;
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.signal_done);
            b.arg(&m).arg(&generation);
            // SAFETY: the signature matches; `m` is this slot's pinned metadata.
            unsafe { b.launch(one) }.map_err(driver("cuLaunchKernel(signal_done)"))?;
        }
        Ok(())
    }

    /// True once the reorder queued in table `slot` completed.
    pub fn reorder_done(&mut self, slot: usize) -> bool {
        let want = self.slot_generation[slot];
        let (_, _, _, meta) = self.table_parts_in(slot);
        // SAFETY: a word of this slot's pinned metadata, written by the GPU.
        unsafe { std::ptr::read_volatile(&meta[2]) == want }
    }

    /// Waits until the reorder queued in table `slot` completed: spins on the flag its
    /// kernel writes, yielding now and then, and asks the driver whether the slot's
    /// stream failed (a failed kernel never writes the flag).
    pub fn wait_reorder(&mut self, slot: usize) -> Result<(), GpuError> {
        let mut spins = 0u32;
        while !self.reorder_done(slot) {
            spins += 1;
            if spins.is_multiple_of(256) {
                // SAFETY: a stream of this context.
                let r = unsafe {
                    cudarc::driver::sys::cuStreamQuery(self.slot_streams[slot].cu_stream())
                };
                match r {
                    cudarc::driver::sys::CUresult::CUDA_SUCCESS => {
                        // Idle: the flag is there now unless the batch never signalled.
                        if !self.reorder_done(slot) {
                            return Err(GpuError::Unsupported(format!(
                                "reorder in slot {slot} finished without marking itself complete"
                            )));
                        }
                    }
                    cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => std::thread::yield_now(),
                    e => {
                        return Err(GpuError::Driver {
                            call: "cuStreamQuery",
                            source: cudarc::driver::result::DriverError(e),
                        });
                    }
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(())
    }

    /// The batch id the completed reorder in table `slot` read from its first packet.
    pub fn reorder_batch_id(&mut self, slot: usize) -> Option<u32> {
        let (_, _, _, meta) = self.table_parts_in(slot);
        (meta[1] == 1).then_some(meta[0])
    }
}
