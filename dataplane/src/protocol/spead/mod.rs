//! SPEAD packets: decoding ([`Packet::parse`]), heaps cut into packets ([`HeapPackets`]),
//! and heaps assembled into chunks ([`chunks::ChunkAssembler`]).
//!
//! A packet is an 8-byte header (magic 0x53, version 4, the item pointer's identifier
//! width and the heap address width in bytes, two reserved bytes, the number of item
//! pointers), then that many 64-bit big-endian item pointers, then payload. An item
//! pointer's top bit says whether its value is the item itself (immediate) or an offset
//! into the heap's payload (addressed); the identifier takes the rest of the
//! identifier width, the value the heap address width. Flavours 64-40 and 64-48 are the
//! ones spead2 speaks; every packet of a heap carries the heap's counter, its payload's
//! offset and length in the heap, and usually the heap's length.

pub mod chunks;
pub mod descriptor;

/// The item id of the heap counter (the heap's id within the stream).
pub const HEAP_CNT: u32 = 0x01;
/// The item id of the heap's payload length in bytes.
pub const HEAP_LENGTH: u32 = 0x02;
/// The item id of the offset of a packet's payload within its heap's payload.
pub const PAYLOAD_OFFSET: u32 = 0x03;
/// The item id of the length of a packet's payload.
pub const PAYLOAD_LENGTH: u32 = 0x04;
/// The item id of an item descriptor (addressed).
pub const DESCRIPTOR: u32 = 0x05;
/// The item id of stream control (immediate).
pub const STREAM_CTRL: u32 = 0x06;
/// [`STREAM_CTRL`]'s value that ends a stream.
pub const CTRL_STREAM_STOP: u64 = 2;

const MAGIC: u8 = 0x53;
const VERSION: u8 = 4;
const HEADER_BYTES: usize = 8;
const POINTER_BYTES: usize = 8;

/// Why a datagram is not a SPEAD packet this receiver can use. Each variant is counted by
/// the assembler under its own name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpeadError {
    /// Shorter than its header and item pointers say.
    #[error("truncated SPEAD packet: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the header and pointers need.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// Magic or version wrong: not SPEAD (version 4).
    #[error("not a SPEAD packet (magic {magic:#04x}, version {version})")]
    NotSpead {
        /// The first byte.
        magic: u8,
        /// The second byte.
        version: u8,
    },
    /// A flavour other than the stream's.
    #[error(
        "SPEAD flavour 64-{} in a stream of flavour 64-{expected}",
        8 * u32::from(*heap_address_bytes)
    )]
    Flavour {
        /// The packet's heap address width in bytes.
        heap_address_bytes: u8,
        /// The stream's heap address width in bits.
        expected: u8,
    },
    /// A heap counter, payload offset or payload length missing.
    #[error("SPEAD packet without its {0} item")]
    MissingItem(&'static str),
    /// The payload length names more bytes than the packet has, or the payload runs past
    /// the heap's length.
    #[error("SPEAD payload of {length} bytes at offset {offset} does not fit ({limit})")]
    PayloadOutOfBounds {
        /// The packet's payload offset in its heap.
        offset: u64,
        /// The packet's payload length.
        length: u64,
        /// What it would run past.
        limit: &'static str,
    },
}

/// A stream's flavour: 64-bit item pointers with `heap_address_bits` of value (40 or 48).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Flavour {
    heap_address_bits: u8,
}

impl Flavour {
    /// SPEAD-64-40.
    pub const SPEAD_64_40: Self = Self {
        heap_address_bits: 40,
    };
    /// SPEAD-64-48 (spead2's default).
    pub const SPEAD_64_48: Self = Self {
        heap_address_bits: 48,
    };

    /// The flavour with `heap_address_bits` bits of value (40 or 48: what spead2 speaks).
    pub fn new(heap_address_bits: u8) -> Option<Self> {
        matches!(heap_address_bits, 40 | 48).then_some(Self { heap_address_bits })
    }

    /// Bits of an item pointer's value (an immediate item or a heap address).
    pub fn heap_address_bits(self) -> u8 {
        self.heap_address_bits
    }

    /// The largest value an item pointer holds.
    pub fn max_value(self) -> u64 {
        (1u64 << self.heap_address_bits) - 1
    }

    /// The largest item id.
    pub fn max_id(self) -> u32 {
        (1u32 << (63 - self.heap_address_bits)) - 1
    }

    fn pointer(self, raw: u64) -> ItemPointer {
        ItemPointer {
            immediate: raw >> 63 == 1,
            id: ((raw >> self.heap_address_bits) as u32) & self.max_id(),
            value: raw & self.max_value(),
        }
    }

    fn raw(self, p: ItemPointer) -> u64 {
        (u64::from(p.immediate) << 63)
            | (u64::from(p.id & self.max_id()) << self.heap_address_bits)
            | (p.value & self.max_value())
    }
}

/// One item pointer: an immediate value, or the item's offset in the heap's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemPointer {
    /// The value is the item (not an address).
    pub immediate: bool,
    /// The item's id.
    pub id: u32,
    /// The immediate value, or the item's offset in the heap's payload.
    pub value: u64,
}

/// A decoded SPEAD packet, borrowing the datagram.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    flavour: Flavour,
    pointers: &'a [u8],
    /// The packet's heap counter.
    pub heap_cnt: u64,
    /// The heap's payload length, where the packet says it.
    pub heap_length: Option<u64>,
    /// Where this packet's payload goes in the heap's payload.
    pub payload_offset: u64,
    /// This packet's payload.
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Decodes `bytes` as a packet of `flavour`. The header items (heap counter, payload
    /// offset and length) must be present and immediate; payload beyond the payload
    /// length (padding) is not part of the heap.
    pub fn parse(bytes: &'a [u8], flavour: Flavour) -> Result<Self, SpeadError> {
        if bytes.len() < HEADER_BYTES {
            return Err(SpeadError::Truncated {
                need: HEADER_BYTES,
                have: bytes.len(),
            });
        }
        if bytes[0] != MAGIC || bytes[1] != VERSION {
            return Err(SpeadError::NotSpead {
                magic: bytes[0],
                version: bytes[1],
            });
        }
        let address_bytes = flavour.heap_address_bits / 8;
        if bytes[2] != 8 - address_bytes || bytes[3] != address_bytes {
            return Err(SpeadError::Flavour {
                heap_address_bytes: bytes[3],
                expected: flavour.heap_address_bits,
            });
        }
        let items = usize::from(u16::from_be_bytes([bytes[6], bytes[7]]));
        let start = HEADER_BYTES + items * POINTER_BYTES;
        if bytes.len() < start {
            return Err(SpeadError::Truncated {
                need: start,
                have: bytes.len(),
            });
        }
        let mut packet = Packet {
            flavour,
            pointers: &bytes[HEADER_BYTES..start],
            heap_cnt: 0,
            heap_length: None,
            payload_offset: 0,
            payload: &[],
        };
        let (mut cnt, mut offset, mut length) = (None, None, None);
        for p in packet.items().filter(|p| p.immediate) {
            match p.id {
                HEAP_CNT => cnt = Some(p.value),
                HEAP_LENGTH => packet.heap_length = Some(p.value),
                PAYLOAD_OFFSET => offset = Some(p.value),
                PAYLOAD_LENGTH => length = Some(p.value),
                _ => {}
            }
        }
        packet.heap_cnt = cnt.ok_or(SpeadError::MissingItem("heap counter"))?;
        packet.payload_offset = offset.ok_or(SpeadError::MissingItem("payload offset"))?;
        let length = length.ok_or(SpeadError::MissingItem("payload length"))?;
        let rest = &bytes[start..];
        if length > rest.len() as u64 {
            return Err(SpeadError::PayloadOutOfBounds {
                offset: packet.payload_offset,
                length,
                limit: "the packet",
            });
        }
        if let Some(heap) = packet.heap_length
            && packet.payload_offset.saturating_add(length) > heap
        {
            return Err(SpeadError::PayloadOutOfBounds {
                offset: packet.payload_offset,
                length,
                limit: "the heap length",
            });
        }
        packet.payload = &rest[..length as usize];
        Ok(packet)
    }

    /// Every item pointer, in packet order.
    pub fn items(&self) -> impl Iterator<Item = ItemPointer> + 'a {
        let flavour = self.flavour;
        self.pointers
            .chunks_exact(POINTER_BYTES)
            .map(move |p| flavour.pointer(u64::from_be_bytes(p.try_into().expect("8-byte chunks"))))
    }

    /// The value of immediate item `id`, when the packet carries it.
    pub fn immediate(&self, id: u32) -> Option<u64> {
        self.items()
            .find(|p| p.immediate && p.id == id)
            .map(|p| p.value)
    }

    /// True when the packet ends the stream (stream control "stop").
    pub fn is_stream_stop(&self) -> bool {
        self.immediate(STREAM_CTRL) == Some(CTRL_STREAM_STOP)
    }
}

/// One heap cut into packets of at most `max_packet` bytes: every packet carries the heap
/// counter, the heap length, its payload offset and length, and all of `items` (as
/// spead2's `repeat_pointers`, so a receiver can place any packet of the heap, whichever
/// arrives first). Addressed items point into `payload`.
#[derive(Clone, Debug)]
pub struct HeapPackets<'a> {
    flavour: Flavour,
    heap_cnt: u64,
    items: &'a [ItemPointer],
    payload: &'a [u8],
    per_packet: usize,
    next: usize,
    ended: bool,
}

impl<'a> HeapPackets<'a> {
    /// The packets of heap `heap_cnt`; `None` when `max_packet` has no room for payload
    /// after the header and pointers, or a value does not fit the flavour.
    pub fn new(
        flavour: Flavour,
        heap_cnt: u64,
        items: &'a [ItemPointer],
        payload: &'a [u8],
        max_packet: usize,
    ) -> Option<Self> {
        let overhead = HEADER_BYTES + (4 + items.len()) * POINTER_BYTES;
        let fits = |v: u64| v <= flavour.max_value();
        if max_packet <= overhead
            || !fits(heap_cnt)
            || !fits(payload.len() as u64)
            || items
                .iter()
                .any(|p| !fits(p.value) || p.id > flavour.max_id())
            || 4 + items.len() > usize::from(u16::MAX)
        {
            return None;
        }
        Some(Self {
            flavour,
            heap_cnt,
            items,
            payload,
            per_packet: max_packet - overhead,
            next: 0,
            ended: false,
        })
    }

    /// How many packets the heap takes (at least one, even with no payload).
    pub fn count(&self) -> usize {
        self.payload.len().div_ceil(self.per_packet).max(1)
    }

    /// Writes the next packet into `out` (cleared first); false when the heap is sent.
    pub fn next_into(&mut self, out: &mut Vec<u8>) -> bool {
        if self.ended {
            return false;
        }
        let offset = self.next;
        let len = self.per_packet.min(self.payload.len() - offset);
        self.next += len;
        self.ended = self.next >= self.payload.len();
        let heap = [
            (HEAP_CNT, self.heap_cnt),
            (HEAP_LENGTH, self.payload.len() as u64),
            (PAYLOAD_OFFSET, offset as u64),
            (PAYLOAD_LENGTH, len as u64),
        ]
        .map(|(id, value)| ItemPointer {
            immediate: true,
            id,
            value,
        });
        let address_bytes = self.flavour.heap_address_bits / 8;
        let count = (heap.len() + self.items.len()) as u16;
        out.clear();
        out.extend_from_slice(&[MAGIC, VERSION, 8 - address_bytes, address_bytes, 0, 0]);
        out.extend_from_slice(&count.to_be_bytes());
        for p in heap.iter().chain(self.items) {
            out.extend_from_slice(&self.flavour.raw(*p).to_be_bytes());
        }
        out.extend_from_slice(&self.payload[offset..offset + len]);
        true
    }
}

/// Sets the heap counter of a packet [`HeapPackets`] wrote (its first item pointer), so
/// that one heap's packets can be sent again as another heap without encoding them anew.
/// False (and nothing written) when `datagram` is not such a packet or `heap_cnt` does
/// not fit the flavour.
pub fn rewrite_heap_cnt(datagram: &mut [u8], flavour: Flavour, heap_cnt: u64) -> bool {
    let first = HEADER_BYTES..HEADER_BYTES + POINTER_BYTES;
    let Some(raw) = datagram.get(first.clone()) else {
        return false;
    };
    let old = flavour.pointer(u64::from_be_bytes(raw.try_into().expect("8 bytes")));
    if !old.immediate || old.id != HEAP_CNT || heap_cnt > flavour.max_value() {
        return false;
    }
    let new = ItemPointer {
        value: heap_cnt,
        ..old
    };
    datagram[first].copy_from_slice(&flavour.raw(new).to_be_bytes());
    true
}

/// The packet that ends a stream (stream control "stop"), as heap `heap_cnt`.
pub fn stream_stop_packet(flavour: Flavour, heap_cnt: u64) -> Vec<u8> {
    let items = [ItemPointer {
        immediate: true,
        id: STREAM_CTRL,
        value: CTRL_STREAM_STOP,
    }];
    let mut out = Vec::new();
    HeapPackets::new(flavour, heap_cnt, &items, &[], 128)
        .expect("a stop packet fits")
        .next_into(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first packet spead2 4.5 writes (`BytesStream`, `max_packet_size` 1024,
    /// flavour 64-48, `repeat_pointers`) for a heap with a 48-bit immediate item 0x1600 =
    /// 12345 and a 2000-byte addressed item 0x4000: its header and pointers, byte for
    /// byte.
    const SPEAD2_FIRST_PACKET_HEAD: [u8; 56] = [
        0x53, 0x04, 0x02, 0x06, 0x00, 0x00, 0x00, 0x06, //
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // heap counter 1
        0x80, 0x02, 0x00, 0x00, 0x00, 0x00, 0x07, 0xd0, // heap length 2000
        0x80, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // payload offset 0
        0x80, 0x04, 0x00, 0x00, 0x00, 0x00, 0x03, 0xc8, // payload length 968
        0x96, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x39, // 0x1600 = 12345
        0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // 0x4000 at offset 0
    ];

    #[test]
    fn spead2s_packet_decodes_and_ours_encodes_the_same_bytes() {
        let mut datagram = SPEAD2_FIRST_PACKET_HEAD.to_vec();
        let payload: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
        datagram.extend_from_slice(&payload[..968]);
        let p = Packet::parse(&datagram, Flavour::SPEAD_64_48).unwrap();
        assert_eq!(
            (p.heap_cnt, p.heap_length, p.payload_offset, p.payload.len()),
            (1, Some(2000), 0, 968)
        );
        assert_eq!(p.immediate(0x1600), Some(12345));
        let items: Vec<ItemPointer> = p.items().skip(4).collect();
        assert_eq!(
            items,
            [
                ItemPointer {
                    immediate: true,
                    id: 0x1600,
                    value: 12345
                },
                ItemPointer {
                    immediate: false,
                    id: 0x4000,
                    value: 0
                }
            ]
        );
        let mut heap = HeapPackets::new(Flavour::SPEAD_64_48, 1, &items, &payload, 1024).unwrap();
        let mut out = Vec::new();
        assert!(heap.next_into(&mut out));
        assert_eq!(out, datagram, "the same first packet as spead2's");
        assert!(heap.next_into(&mut out));
        let second = Packet::parse(&out, Flavour::SPEAD_64_48).unwrap();
        assert_eq!(
            (second.payload_offset, second.payload),
            (968, &payload[968..1936])
        );
        assert!(heap.next_into(&mut out));
        assert!(!heap.next_into(&mut out));
    }

    #[test]
    fn both_flavours_round_trip_and_refuse_each_other() {
        for (flavour, other) in [
            (Flavour::SPEAD_64_40, Flavour::SPEAD_64_48),
            (Flavour::SPEAD_64_48, Flavour::SPEAD_64_40),
        ] {
            let items = [ItemPointer {
                immediate: true,
                id: flavour.max_id(),
                value: flavour.max_value(),
            }];
            let payload = [7u8; 300];
            let mut heap = HeapPackets::new(flavour, 42, &items, &payload, 200).unwrap();
            let (mut out, mut got) = (Vec::new(), vec![0u8; 300]);
            while heap.next_into(&mut out) {
                let p = Packet::parse(&out, flavour).unwrap();
                assert_eq!(p.immediate(flavour.max_id()), Some(flavour.max_value()));
                let at = p.payload_offset as usize;
                got[at..at + p.payload.len()].copy_from_slice(p.payload);
                assert!(matches!(
                    Packet::parse(&out, other),
                    Err(SpeadError::Flavour { .. })
                ));
            }
            assert_eq!(got, payload);
        }
        assert_eq!(Flavour::new(32), None);
    }

    #[test]
    fn damaged_packets_are_named_never_a_panic() {
        let f = Flavour::SPEAD_64_48;
        let good = {
            let mut out = Vec::new();
            HeapPackets::new(f, 1, &[], &[1, 2, 3, 4], 64)
                .unwrap()
                .next_into(&mut out);
            out
        };
        assert!(Packet::parse(&good, f).is_ok());
        for cut in 0..good.len() - 4 {
            assert!(
                matches!(
                    Packet::parse(&good[..cut], f),
                    Err(SpeadError::Truncated { .. } | SpeadError::PayloadOutOfBounds { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut bad = good.clone();
        bad[0] = 0x54;
        assert!(matches!(
            Packet::parse(&bad, f),
            Err(SpeadError::NotSpead { .. })
        ));
        // Payload length 5 in a heap of 4.
        let mut long = good.clone();
        long[8 + 3 * 8 + 7] = 5;
        long.push(0);
        assert!(matches!(
            Packet::parse(&long, f),
            Err(SpeadError::PayloadOutOfBounds {
                limit: "the heap length",
                ..
            })
        ));
        // No heap counter: its pointer becomes a NULL item.
        let mut no_cnt = good.clone();
        no_cnt[8..16].copy_from_slice(&0x8000_0000_0000_0000u64.to_be_bytes());
        assert_eq!(
            Packet::parse(&no_cnt, f).unwrap_err(),
            SpeadError::MissingItem("heap counter")
        );
        let mut again = good.clone();
        assert!(rewrite_heap_cnt(&mut again, f, 77));
        assert_eq!(Packet::parse(&again, f).unwrap().heap_cnt, 77);
        assert!(
            !rewrite_heap_cnt(&mut no_cnt, f, 77),
            "no heap counter first"
        );
        let stop = stream_stop_packet(f, 9);
        assert!(Packet::parse(&stop, f).unwrap().is_stream_stop());
    }

    proptest::proptest! {
        /// Any bytes, and any damage to a good packet: an error or a packet whose payload
        /// lies inside the datagram, never a panic.
        #[test]
        fn any_datagram_decodes_or_is_refused(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            flip in 0usize..120,
            value in proptest::num::u8::ANY,
        ) {
            for f in [Flavour::SPEAD_64_40, Flavour::SPEAD_64_48] {
                if let Ok(p) = Packet::parse(&bytes, f) {
                    proptest::prop_assert!(p.payload.len() <= bytes.len());
                }
                let mut good = Vec::new();
                HeapPackets::new(f, 3, &[], &[9; 40], 100).unwrap().next_into(&mut good);
                let at = flip % good.len();
                good[at] = value;
                if let Ok(p) = Packet::parse(&good, f) {
                    proptest::prop_assert!(p.payload.len() <= 40);
                    let _ = p.items().count();
                }
            }
        }
    }
}
