//! Reading every packet's first segment in a loop: the region of the first packet is
//! looked up once, and each frame in it is that region's first buffer plus a stride,
//! where [`Burst::data`] would look the region up, check it and compute the address per
//! packet.

use super::Burst;
use crate::descriptor::RegionId;

impl Burst {
    /// Every packet's first segment, for a loop that reads them all (cheaper per packet
    /// than [`Burst::data`]).
    #[inline]
    pub fn frames(&self) -> Frames<'_> {
        Frames::of(self)
    }

    /// Every packet's first buffer, for a loop that fills them all (cheaper per packet
    /// than [`Burst::buffer_mut`]).
    #[inline]
    pub fn frames_mut(&mut self) -> FramesMut<'_> {
        FramesMut::of(self)
    }
}

/// The first segment of each packet of a burst, for reading (see [`Burst::frames`]).
pub struct Frames<'a> {
    burst: &'a Burst,
    /// The region most packets are in (the first packet's), when the CPU can read it:
    /// its id, the address of buffer 0 and the stride.
    region: Option<(RegionId, *const u8, usize)>,
}

impl<'a> Frames<'a> {
    fn of(burst: &'a Burst) -> Self {
        let first = match burst.run {
            Some(run) => Some(run.region),
            None => burst.packets.first().map(|p| p.segments()[0].region),
        };
        let region = first.and_then(|id| {
            let r = burst.regions.get(id);
            r.host_accessible()
                .then(|| (id, r.buffer_addr(0) as *const u8, r.stride()))
        });
        Self { burst, region }
    }

    /// The burst read.
    #[inline]
    pub fn burst(&self) -> &'a Burst {
        self.burst
    }

    /// Packet `i`'s first segment, as [`Burst::data`] gives it (`None` in GPU memory);
    /// a panic naming `i` past the end.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        let s = self.burst.segment(i, 0);
        match self.region {
            Some((id, base, stride)) if id == s.region => {
                // SAFETY: the burst owns buffer `s.index` of this region (taken from the
                // pool, returned only when the burst drops, which the borrow `'a`
                // prevents); it lies `s.index` strides after buffer 0 inside the mapped
                // region, and `s.len` is at most its buf_size.
                Some(unsafe {
                    std::slice::from_raw_parts(base.add(s.index as usize * stride), s.len as usize)
                })
            }
            _ => self.burst.data(i, 0),
        }
    }
}

/// The first segment's whole buffer of each packet of a burst, for filling (see
/// [`Burst::frames_mut`]): the region of the first packet is looked up once.
pub struct FramesMut<'a> {
    burst: &'a mut Burst,
    /// The first packet's region when the CPU can write it: id, address of buffer 0,
    /// stride and buffer size.
    region: Option<(RegionId, *mut u8, usize, usize)>,
}

impl<'a> FramesMut<'a> {
    fn of(burst: &'a mut Burst) -> Self {
        let region = Frames::of(burst).region.map(|(id, base, stride)| {
            (
                id,
                base as *mut u8,
                stride,
                burst.regions.get(id).buf_size(),
            )
        });
        Self { burst, region }
    }

    /// How many packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.burst.len()
    }

    /// True without packets.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.burst.is_empty()
    }

    /// Packet `i`'s buffer index (first segment).
    #[inline]
    pub fn index(&self, i: usize) -> u32 {
        self.burst.segment(i, 0).index
    }

    /// The address of packet `i`'s buffer (for a prefetch), `None` past the end or in
    /// GPU memory.
    #[inline]
    pub fn addr(&self, i: usize) -> Option<u64> {
        if i >= self.burst.len() {
            return None;
        }
        let s = self.burst.segment(i, 0);
        match self.region {
            Some((id, base, stride, _)) if id == s.region => {
                Some(base as u64 + s.index as u64 * stride as u64)
            }
            _ => {
                let r = self.burst.regions.get(s.region);
                r.host_accessible().then(|| r.buffer_addr(s.index))
            }
        }
    }

    /// Packet `i`'s whole first buffer, as [`Burst::buffer_mut`] gives it (`None` in GPU
    /// memory); a panic naming `i` past the end.
    #[inline]
    pub fn buffer_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let s = self.burst.segment(i, 0);
        match self.region {
            Some((id, base, stride, buf_size)) if id == s.region => {
                // SAFETY: as in `Frames::get`; `&mut self` (borrowing the burst mutably)
                // makes this the only view of the buffer, which holds `buf_size` bytes.
                Some(unsafe {
                    std::slice::from_raw_parts_mut(base.add(s.index as usize * stride), buf_size)
                })
            }
            _ => self.burst.buffer_mut(i, 0),
        }
    }
}
