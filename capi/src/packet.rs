//! Reading a received packet from C: each of its segments (header-data split gives two),
//! and what the plane knows of it (flow id, receive timestamp, length). Structs the
//! library fills are versioned by their leading `size` field ([`write_sized`]).

use crate::{DpBurst, DpStatus, guard, invalid, with_burst};
use dataplane::Burst;

/// What the plane knows of one packet. Versioned as [`crate::DpStats`]: set `size` to
/// `sizeof(DpPacketInfo)` before [`dp_burst_packet_info`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DpPacketInfo {
    /// Bytes of this struct as the caller knows it; set by the caller, then to the bytes
    /// filled.
    pub size: usize,
    /// Bytes over all segments.
    pub length: u64,
    /// Receive time in nanoseconds (the NIC's clock, or the worker's when the queue
    /// stamps in software); 0 when the RX queue has no `hardware_timestamps`.
    pub timestamp_ns: u64,
    /// Id of the flow rule that steered the packet (its `id` key); 0 when none did.
    pub flow_id: u32,
    /// Segments of the packet: 1, or 2 on a header-data split queue.
    pub segments: u32,
}

/// Writes `value` into the caller's `*out`, whose leading `usize` says how many bytes the
/// caller's version of `T` has: the bytes both versions share are written, and the size
/// field is set to that count. Fewer bytes than the size field itself is an invalid
/// argument.
///
/// # Safety
/// `out` is non-NULL, aligned for `usize` and writable for the bytes its size field
/// declares; `T` is `repr(C)` and starts with that `usize`.
pub(crate) unsafe fn write_sized<T: Copy>(out: *mut T, value: T, what: &str) -> DpStatus {
    // SAFETY: the caller's promise: `out` starts with a readable `usize`.
    let declared = unsafe { out.cast::<usize>().read() };
    if declared < size_of::<usize>() {
        return invalid(&format!(
            "{what}.size is {declared}: set it to sizeof({what}) first"
        ));
    }
    let filled = declared.min(size_of::<T>());
    let bytes = (&raw const value).cast::<u8>();
    // SAFETY: `value` is a local of `size_of::<T>()` bytes; `out` holds `declared` bytes
    // (the caller's promise); `filled` is at most both; a local and the caller's memory
    // do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes, out.cast::<u8>(), filled);
        out.cast::<usize>().write(filled);
    }
    DpStatus::Ok
}

/// Packet `index`'s first segment, as [`dp_burst_segment`] with segment 0.
///
/// # Safety
/// As [`dp_burst_segment`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_burst_packet(
    burst: *const DpBurst,
    index: usize,
    data: *mut *const u8,
    len: *mut usize,
    device_address: *mut u64,
) -> DpStatus {
    // SAFETY: the caller's promise, passed on.
    unsafe { dp_burst_segment(burst, index, 0, data, len, device_address) }
}

/// Segment `segment` of packet `index`: its bytes (`*data`, host memory) and length
/// (`*len`). For a segment in GPU memory `*data` is NULL and `*device_address` its device
/// address (0 for host memory). A header-data split queue gives each packet two segments:
/// its headers, then its payload. Valid until the burst is freed or sent.
///
/// # Safety
/// `burst` is a live burst; the out pointers are writable (`device_address` may be NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_burst_segment(
    burst: *const DpBurst,
    index: usize,
    segment: usize,
    data: *mut *const u8,
    len: *mut usize,
    device_address: *mut u64,
) -> DpStatus {
    guard(|| {
        let fill = |b: &mut Burst| {
            if index >= b.len() || data.is_null() || len.is_null() {
                return invalid("index out of range, or data or len is NULL");
            }
            let segments = b.packets()[index].segments();
            let Some(seg) = segments.get(segment) else {
                return invalid(&format!(
                    "packet {index} has {} segment(s), not {}",
                    segments.len(),
                    segment + 1
                ));
            };
            let bytes = b.data(index, segment);
            // SAFETY: checked non-NULL; the caller's promise that they are writable.
            unsafe {
                *len = seg.len as usize;
                *data = bytes.map_or(std::ptr::null(), |d| d.as_ptr());
                if !device_address.is_null() {
                    *device_address = if bytes.is_none() {
                        b.segment_addr(index, segment)
                    } else {
                        0
                    };
                }
            }
            DpStatus::Ok
        };
        // SAFETY: the caller's promise.
        unsafe { with_burst(burst, fill) }
    })
}

/// What the plane knows of packet `index` (flow id, timestamp, length, segments), into
/// `*out` (set `out->size` first; see [`DpPacketInfo`]).
///
/// # Safety
/// `burst` is a live burst; `out` is writable for the `size` bytes it declares.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dp_burst_packet_info(
    burst: *const DpBurst,
    index: usize,
    out: *mut DpPacketInfo,
) -> DpStatus {
    guard(|| {
        let fill = |b: &mut Burst| {
            if index >= b.len() || out.is_null() {
                return invalid("index out of range, or out is NULL");
            }
            let p = &b.packets()[index];
            let info = DpPacketInfo {
                size: 0,
                length: p.len() as u64,
                timestamp_ns: p.timestamp_ns,
                flow_id: p.flow_id,
                segments: p.segments().len() as u32,
            };
            // SAFETY: checked non-NULL; the caller's promise that it holds `size` bytes.
            unsafe { write_sized(out, info, "DpPacketInfo") }
        };
        // SAFETY: the caller's promise.
        unsafe { with_burst(burst, fill) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An older caller's smaller struct gets only the fields it knows and learns how many
    /// bytes were filled; a newer caller's larger one gets ours and keeps its tail; a size
    /// that does not even cover the size field is refused and nothing is written.
    #[test]
    fn versioned_structs_fill_what_both_sides_know() {
        let info = DpPacketInfo {
            size: 0,
            length: 7,
            timestamp_ns: 9,
            flow_id: 3,
            segments: 2,
        };
        let mut old = [0u64; 2];
        old[0] = 16;
        // SAFETY: 16 writable, aligned bytes, declared as such.
        let s = unsafe { write_sized(old.as_mut_ptr().cast::<DpPacketInfo>(), info, "T") };
        assert_eq!((s, old), (DpStatus::Ok, [16, 7]));

        let mut newer = [u64::MAX; 6];
        newer[0] = 48;
        // SAFETY: 48 writable, aligned bytes, declared as such.
        let s = unsafe { write_sized(newer.as_mut_ptr().cast::<DpPacketInfo>(), info, "T") };
        assert_eq!(s, DpStatus::Ok);
        assert_eq!(newer[..3], [size_of::<DpPacketInfo>() as u64, 7, 9]);
        assert_eq!(
            newer[4..],
            [u64::MAX, u64::MAX],
            "the caller's tail untouched"
        );

        let mut unset = [0u64, 5];
        // SAFETY: 16 writable, aligned bytes.
        let s = unsafe { write_sized(unset.as_mut_ptr().cast::<DpPacketInfo>(), info, "T") };
        assert_eq!((s, unset), (DpStatus::InvalidArgument, [0, 5]));
    }
}
