//! The Internet checksum over test frames: 16-bit word sums from any offset, folding, and
//! the payload sums the GPU frame digest is checked against.

/// Sum of big-endian 16-bit words of `data`, which starts at an even (`odd == false`) or
/// odd offset from the start of the checksummed area.
pub(super) fn sum16(data: &[u8], odd: bool) -> u64 {
    let mut sum = 0u64;
    let mut rest = data;
    if odd && !rest.is_empty() {
        sum += u64::from(rest[0]);
        rest = &rest[1..];
    }
    let mut chunks = rest.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_be_bytes(c.try_into().unwrap());
        sum += (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
    }
    let tail = chunks.remainder();
    let mut pairs = tail.chunks_exact(2);
    for p in &mut pairs {
        sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    sum
}

pub(super) fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Where the sum behind a frame's UDP checksum starts: the IPv4 source address.
pub const PAYLOAD_SUM_FROM: usize = 26;

/// The big-endian 16-bit word sum of `frame` from [`PAYLOAD_SUM_FROM`] to its end (an odd
/// last byte counts as a high byte): what [`Checker::check_parts`] needs to verify the UDP
/// checksum. The GPU's `frame_digest` kernel computes the same sum.
pub fn payload_sum(frame: &[u8]) -> u64 {
    sum16(&frame[PAYLOAD_SUM_FROM..], false)
}

/// The same sum for bytes that sit at an odd distance from [`PAYLOAD_SUM_FROM`] (the
/// second part of a split frame whose first part has an odd length after it): each
/// 16-bit word straddles the parts, which in ones-complement arithmetic is a byte swap of
/// the folded sum.
pub fn shift_sum(sum: u64) -> u64 {
    u64::from(fold(sum).swap_bytes())
}

/// The plain sum of the big-endian 16-bit words of `data` (an odd last byte counts as a
/// high byte), as the GPU's `frame_digest` kernel computes it.
pub fn word_sum(data: &[u8]) -> u64 {
    sum16(data, false)
}

/// Internet checksum of `data`.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum16(data, false))
}
