//! Test frames written by the GPU: what the `write_frames` kernel of [`crate::kernels`]
//! writes, as plain CPU code ([`write_frame`]), so the two can be compared byte for byte.
//!
//! The CPU hands the kernel a [`FrameTemplate`] (the Ethernet/IPv4/UDP header and the
//! frame's layout, the same for every frame) and per frame only its [`FrameFields`]
//! (ports, frame counter, reorder fields and the 20-byte trailer). The kernel lays out the
//! frame, writes the reorder's bit fields, then computes both checksums.
//!
//! Layout of a frame of `frame_len` bytes: the 42-byte header; zeros up to
//! `header_size`; from there byte `k` holds `k as u8` (the fill), except the 4-byte
//! big-endian frame counter at `counter_at`; the trailer in the last 20 bytes.

#![forbid(unsafe_code)]

use crate::reorder::BitField;

/// Ethernet + IPv4 + UDP header bytes.
pub const HEADER: usize = 42;
/// Trailer bytes at the end of every frame.
pub const TRAILER: usize = 20;
/// No frame counter.
pub const NO_COUNTER: u32 = u32::MAX;

/// What every frame of a generator shares. `#[repr(C)]`: the kernel takes it as is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTemplate {
    /// Ethernet/IPv4/UDP header (bytes 0..42; the rest unused). Ports and checksums are
    /// written per frame.
    pub head: [u8; 64],
    /// Frame length.
    pub frame_len: u32,
    /// Bytes before the fill starts (zeros after the header).
    pub header_size: u32,
    /// Byte offset of the 4-byte frame counter, or [`NO_COUNTER`].
    pub counter_at: u32,
    /// Reorder sequence field: bit offset and width (width 0: none).
    pub sequence_offset: u32,
    /// Width of the reorder sequence field.
    pub sequence_width: u32,
    /// Reorder batch field: bit offset and width (width 0: none).
    pub batch_offset: u32,
    /// Width of the reorder batch field.
    pub batch_width: u32,
}

/// What changes from frame to frame. `#[repr(C)]`, 40 bytes: the kernel takes it as is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameFields {
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// Frame counter value (when the template has one).
    pub counter: u32,
    /// Reorder sequence field value.
    pub sequence: u32,
    /// Reorder batch field value.
    pub batch: u32,
    /// The last 20 bytes of the frame.
    pub trailer: [u8; TRAILER],
    /// Padding to 8-byte alignment.
    pub pad: [u8; 4],
}

impl FrameTemplate {
    /// The reorder sequence field, when frames carry one.
    pub fn sequence_field(&self) -> Option<BitField> {
        (self.sequence_width > 0).then_some(BitField {
            bit_offset: self.sequence_offset,
            bit_width: self.sequence_width,
        })
    }

    /// The reorder batch field, when frames carry one.
    pub fn batch_field(&self) -> Option<BitField> {
        (self.batch_width > 0).then_some(BitField {
            bit_offset: self.batch_offset,
            bit_width: self.batch_width,
        })
    }

    /// Byte `k` of a frame before bit fields and checksums are written (checksum bytes
    /// read as zero).
    pub fn byte(&self, f: &FrameFields, k: u32) -> u8 {
        match k {
            34 => (f.sport >> 8) as u8,
            35 => f.sport as u8,
            36 => (f.dport >> 8) as u8,
            37 => f.dport as u8,
            24 | 25 | 40 | 41 => 0,
            _ if k < HEADER as u32 => self.head[k as usize],
            _ if k >= self.frame_len - TRAILER as u32 => {
                f.trailer[(k - (self.frame_len - TRAILER as u32)) as usize]
            }
            _ if self.counter_at != NO_COUNTER
                && k >= self.counter_at
                && k < self.counter_at + 4 =>
            {
                (f.counter >> (8 * (3 - (k - self.counter_at)))) as u8
            }
            _ if k < self.header_size => 0,
            _ => k as u8,
        }
    }
}

/// Folds a ones-complement sum to 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn word_sum(data: &[u8]) -> u64 {
    let mut pairs = data.chunks_exact(2);
    let mut s: u64 = (&mut pairs)
        .map(|p| u64::from(u16::from_be_bytes([p[0], p[1]])))
        .sum();
    if let [last] = pairs.remainder() {
        s += u64::from(*last) << 8;
    }
    s
}

/// Writes the IPv4 header checksum (over bytes 14..34) and the UDP checksum of `frame`.
pub fn write_checksums(frame: &mut [u8]) {
    frame[24..26].fill(0);
    let ip = !fold(word_sum(&frame[14..34]));
    frame[24..26].copy_from_slice(&ip.to_be_bytes());
    frame[40..42].fill(0);
    let udp_len = (frame.len() - 34) as u64;
    let mut udp = !fold(word_sum(&frame[26..]) + 17 + udp_len);
    if udp == 0 {
        udp = 0xffff;
    }
    frame[40..42].copy_from_slice(&udp.to_be_bytes());
}

/// Writes frame `f` of template `t` into `buf` (at least `t.frame_len` bytes), as the
/// `write_frames` kernel does.
pub fn write_frame(t: &FrameTemplate, f: &FrameFields, buf: &mut [u8]) {
    let frame = &mut buf[..t.frame_len as usize];
    for (k, b) in frame.iter_mut().enumerate() {
        *b = t.byte(f, k as u32);
    }
    if let Some(field) = t.sequence_field() {
        field.write(frame, f.sequence);
    }
    if let Some(field) = t.batch_field() {
        field.write(frame, f.batch);
    }
    write_checksums(frame);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_structs_have_the_kernels_layout() {
        assert_eq!(std::mem::size_of::<FrameFields>(), 40);
        assert_eq!(std::mem::size_of::<FrameTemplate>(), 64 + 7 * 4);
    }

    #[test]
    fn bit_fields_written_then_read_back() {
        let mut p = [0xa5u8; 8];
        let f = BitField {
            bit_offset: 13,
            bit_width: 10,
        };
        assert!(f.write(&mut p, 0x2f1));
        assert_eq!(f.read(&p), Some(0x2f1));
        // Bits around the field are kept.
        assert_eq!(p[0], 0xa5);
        assert_eq!(p[1] & 0xf8, 0xa5 & 0xf8);
        assert_eq!(p[2] & 0x01, 0xa5 & 0x01);
        assert!(!f.write(&mut p[..2], 1), "too short");
    }
}
