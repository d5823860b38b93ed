//! Digests of packets in GPU memory, computed where the bytes lie (the bench's checkers
//! compare them with the digests of the bytes they expect).

use super::*;

/// Digests of packets in GPU memory, computed by the GPU where the bytes lie: for one
/// segment of each packet, the sum of its big-endian 16-bit words from a byte on, and its
/// first `head` and last `tail` bytes. A checker compares them with the same digests of
/// the bytes it expects.
///
/// [`DeviceDigest::run_many`] waits for its digests; [`DeviceDigest::queue`] and
/// [`DeviceDigest::finish`] split that in two, so a checker reads one group's digests
/// while the GPU computes the next group's.
#[cfg(feature = "cuda")]
#[derive(Default)]
pub struct DeviceDigest {
    gpu: Option<gpudirect::Gpu>,
    /// Per packet: the word sum.
    pub sums: Vec<u64>,
    /// Per packet: `head + tail` bytes.
    pub digests: Vec<u8>,
    /// The bursts of each queued digest (its table slot's), held until it finished.
    queued: [Vec<Burst>; QUEUED_DIGESTS],
    /// Packets and bytes per packet of each queued digest.
    queued_shape: [(usize, usize); QUEUED_DIGESTS],
}

/// A finished digest: word sums, then `head + tail` bytes per packet, or why it failed.
#[cfg(feature = "cuda")]
pub type Digests<'a> = Result<(&'a [u64], &'a [u8]), gpudirect::GpuError>;

/// Digests [`DeviceDigest::queue`] keeps in flight at once (table slots 0 and 1; the
/// waiting [`DeviceDigest::run_many`] uses the last slot, so the two can mix).
#[cfg(feature = "cuda")]
pub const QUEUED_DIGESTS: usize = 2;
#[cfg(feature = "cuda")]
const _: () = assert!(QUEUED_DIGESTS < gpudirect::kernels::TABLE_SLOTS);

#[cfg(feature = "cuda")]
impl Drop for DeviceDigest {
    fn drop(&mut self) {
        // The GPU may still read the queued bursts' buffers: wait before they go back.
        if let Some(gpu) = &self.gpu {
            for (slot, bursts) in self.queued.iter().enumerate() {
                if !bursts.is_empty() {
                    let _ = gpu.wait_slot(slot);
                }
            }
        }
    }
}

#[cfg(feature = "cuda")]
impl DeviceDigest {
    /// As [`DeviceDigest::run_many`] without waiting: queues the digest of segment `seg`
    /// of every packet of `bursts` (in GPU memory, at most
    /// [`gpudirect::kernels::MAX_ITEMS`] packets) in `slot` (below [`QUEUED_DIGESTS`],
    /// whose previous digest must have been finished) and keeps the bursts until
    /// [`DeviceDigest::finish`] hands them back with the digests. On failure the bursts
    /// come back with the error.
    pub fn queue(
        &mut self,
        slot: usize,
        bursts: Vec<Burst>,
        seg: usize,
        sum_from: u32,
        (head, tail): (u32, u32),
    ) -> Result<(), (Vec<Burst>, gpudirect::GpuError)> {
        assert!(
            slot < QUEUED_DIGESTS && self.queued[slot].is_empty(),
            "digest slot {slot} is busy or out of range"
        );
        let n: usize = bursts.iter().map(Burst::len).sum();
        if n > gpudirect::kernels::MAX_ITEMS {
            return Err((
                bursts,
                gpudirect::GpuError::Unsupported(format!(
                    "{n} packets in one digest: at most {}",
                    gpudirect::kernels::MAX_ITEMS
                )),
            ));
        }
        let Some(first) = bursts.iter().find(|b| !b.is_empty()) else {
            self.queued_shape[slot] = (0, 0);
            self.queued[slot] = bursts;
            return Ok(());
        };
        let ordinal = first.regions().get(first.segment(0, seg).region).affinity();
        if self.gpu.is_none() {
            match gpudirect::Gpu::new(ordinal) {
                Ok(gpu) => self.gpu = Some(gpu),
                Err(e) => return Err((bursts, e)),
            }
        }
        let gpu = self.gpu.as_mut().expect("just set");
        let packets = bursts.iter().flat_map(|b| {
            (0..b.len()).map(move |i| (b.segment_addr(i, seg), b.segment(i, seg).len))
        });
        // SAFETY: the packets are segments of `bursts`, which this digest holds (and its
        // drop waits for the GPU) until `finish` has waited for the slot.
        if let Err(e) = unsafe { gpu.queue_frame_digest(slot, n, packets, sum_from, (head, tail)) }
        {
            return Err((bursts, e));
        }
        self.queued_shape[slot] = (n, (head + tail) as usize);
        self.queued[slot] = bursts;
        Ok(())
    }

    /// Waits for the digest queued in `slot` and hands back its bursts with its word sums
    /// and `head + tail` bytes per packet, in packet order.
    pub fn finish(&mut self, slot: usize) -> (Vec<Burst>, Digests<'_>) {
        let bursts = std::mem::take(&mut self.queued[slot]);
        let (n, per) = std::mem::take(&mut self.queued_shape[slot]);
        let out = match &self.gpu {
            Some(gpu) => gpu.frame_digest_output(slot, n, per),
            None => Ok((&[][..], &[][..])),
        };
        (bursts, out)
    }

    /// Digests segment `seg` of every packet of `burst`, which must be in GPU memory:
    /// word sums from byte `sum_from`, `head` and `tail` bytes.
    pub fn run(
        &mut self,
        burst: &Burst,
        seg: usize,
        sum_from: u32,
        head_tail: (u32, u32),
    ) -> Result<(), gpudirect::GpuError> {
        self.run_many(&[burst], seg, sum_from, head_tail)
    }

    /// As [`DeviceDigest::run`] for the packets of several bursts (of one GPU) in one
    /// launch, in order: one launch and one wait for all of them.
    pub fn run_many(
        &mut self,
        bursts: &[&Burst],
        seg: usize,
        sum_from: u32,
        (head, tail): (u32, u32),
    ) -> Result<(), gpudirect::GpuError> {
        let Some(first) = bursts.iter().find(|b| !b.is_empty()) else {
            return Ok(());
        };
        let ordinal = first.regions().get(first.segment(0, seg).region).affinity();
        if self.gpu.is_none() {
            self.gpu = Some(gpudirect::Gpu::new(ordinal)?);
        }
        let gpu = self.gpu.as_mut().expect("just set");
        let per = (head + tail) as usize;
        let packets: Vec<(u64, u32)> = bursts
            .iter()
            .flat_map(|b| {
                (0..b.len()).map(move |i| (b.segment_addr(i, seg), b.segment(i, seg).len))
            })
            .collect();
        let n = packets.len();
        self.sums.resize(n, 0);
        self.digests.resize(n * per, 0);
        for (k, chunk) in packets.chunks(gpudirect::kernels::MAX_ITEMS).enumerate() {
            let at = k * gpudirect::kernels::MAX_ITEMS;
            // SAFETY: the segments belong to `bursts`, which live across the call.
            unsafe {
                gpu.frame_digest(
                    chunk,
                    sum_from,
                    (head, tail),
                    &mut self.sums[at..],
                    &mut self.digests[at * per..],
                )
            }?;
        }
        Ok(())
    }
}
