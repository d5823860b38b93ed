//! Item descriptors: what a SPEAD receiver (spead2's `ItemGroup`) needs to name and
//! decode a heap's items. A descriptor travels as a complete SPEAD packet, itself the value
//! of an addressed [`DESCRIPTOR`](super::DESCRIPTOR) item of the heap it rides in.
//!
//! The packet's items: the described item's id (immediate), its name, description, format
//! and shape (addressed), and, for items typed by a NumPy dtype, a NumPy header. Format
//! fields take one byte for the type code and the rest of `9 - heap address bytes` for the
//! width in bits; shape dimensions one byte (0 fixed, 1 variable) and the heap address
//! width for the size, all big-endian: the widths spead2 writes and reads.

use super::{Flavour, HeapPackets, ItemPointer};

/// The item id of the described item's id, inside a descriptor.
pub const DESCRIPTOR_ID: u32 = 0x14;
/// The item id of the described item's name.
pub const DESCRIPTOR_NAME: u32 = 0x10;
/// The item id of the described item's description.
pub const DESCRIPTOR_DESCRIPTION: u32 = 0x11;
/// The item id of the described item's shape.
pub const DESCRIPTOR_SHAPE: u32 = 0x12;
/// The item id of the described item's SPEAD format.
pub const DESCRIPTOR_FORMAT: u32 = 0x13;
/// The item id of the described item's NumPy header (dtype, order, shape).
pub const DESCRIPTOR_DTYPE: u32 = 0x15;

/// How an item's elements are typed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemType {
    /// SPEAD format fields, each a type code (`u`, `i`, `f`, `b`, `c`) and a width in
    /// bits: what immediate items use (`[(u, 48)]` for a 48-bit counter).
    Format(Vec<(u8, u32)>),
    /// A NumPy dtype string (`<u2`, `>i4`, `<c8`, `u1`): the usual type of array items.
    Dtype(String),
}

/// One item's descriptor.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ItemDescriptor {
    /// The item's id.
    pub id: u32,
    /// Its name (ASCII), by which spead2's `ItemGroup` keys it.
    pub name: String,
    /// Its description (ASCII).
    pub description: String,
    /// Its shape: fixed sizes, `None` for a variable dimension (formats only).
    pub shape: Vec<Option<u64>>,
    /// Its element type.
    pub element: ItemType,
}

/// True when `dtype` is a NumPy dtype string spead2 can rebuild: an optional byte order
/// (`<`, `>`, `|`, `=`), a kind (`b`, `i`, `u`, `f`, `c`) and a size in bytes.
pub fn is_simple_dtype(dtype: &str) -> bool {
    let body = dtype.strip_prefix(['<', '>', '|', '=']).unwrap_or(dtype);
    let mut chars = body.chars();
    let kind_ok = matches!(chars.next(), Some('b' | 'i' | 'u' | 'f' | 'c'));
    let size = chars.as_str();
    kind_ok && matches!(size, "1" | "2" | "4" | "8" | "16")
}

impl ItemDescriptor {
    /// The NumPy header spead2 reads for a dtype item: a Python dict literal.
    pub fn numpy_header(&self) -> Option<String> {
        let ItemType::Dtype(descr) = &self.element else {
            return None;
        };
        let dims: Vec<String> = self
            .shape
            .iter()
            .map(|d| d.unwrap_or(0).to_string())
            .collect();
        let shape = match dims.as_slice() {
            [one] => format!("({one},)"),
            _ => format!("({})", dims.join(", ")),
        };
        Some(format!(
            "{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}}}"
        ))
    }

    /// The descriptor as one SPEAD packet of `flavour` (heap counter 1, as spead2 writes
    /// it). `None` when a value does not fit the flavour's widths.
    pub fn encode(&self, flavour: Flavour) -> Option<Vec<u8>> {
        let address_bytes = usize::from(flavour.heap_address_bits() / 8);
        let field_bytes = 9 - address_bytes;
        let mut payload = Vec::new();
        let mut pointers = vec![ItemPointer {
            immediate: true,
            id: DESCRIPTOR_ID,
            value: u64::from(self.id),
        }];
        let mut addressed = |id: u32, bytes: &[u8], payload: &mut Vec<u8>| {
            pointers.push(ItemPointer {
                immediate: false,
                id,
                value: payload.len() as u64,
            });
            payload.extend_from_slice(bytes);
        };
        addressed(DESCRIPTOR_NAME, self.name.as_bytes(), &mut payload);
        addressed(
            DESCRIPTOR_DESCRIPTION,
            self.description.as_bytes(),
            &mut payload,
        );
        let mut format = Vec::new();
        if let ItemType::Format(fields) = &self.element {
            for &(code, bits) in fields {
                let width = (field_bytes - 1) * 8;
                if u64::from(bits) >> width != 0 {
                    return None;
                }
                format.push(code);
                format.extend_from_slice(&u64::from(bits).to_be_bytes()[8 - (field_bytes - 1)..]);
            }
        }
        addressed(DESCRIPTOR_FORMAT, &format, &mut payload);
        let mut shape = Vec::new();
        for dim in &self.shape {
            let size = dim.unwrap_or(0);
            if size > flavour.max_value() {
                return None;
            }
            shape.push(u8::from(dim.is_none()));
            shape.extend_from_slice(&size.to_be_bytes()[8 - address_bytes..]);
        }
        addressed(DESCRIPTOR_SHAPE, &shape, &mut payload);
        if let Some(header) = self.numpy_header() {
            addressed(DESCRIPTOR_DTYPE, header.as_bytes(), &mut payload);
        }
        let mut out = Vec::new();
        HeapPackets::new(flavour, 1, &pointers, &payload, usize::MAX)?.next_into(&mut out);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::spead::Packet;

    fn item(packet: &Packet, id: u32) -> ItemPointer {
        packet.items().find(|p| p.id == id).expect("item present")
    }

    #[test]
    fn a_dtype_descriptor_is_one_packet_with_every_field_where_spead2_looks() {
        let d = ItemDescriptor {
            id: 0x4000,
            name: "data".into(),
            description: "samples".into(),
            shape: vec![Some(4096)],
            element: ItemType::Dtype("<u2".into()),
        };
        let f = Flavour::SPEAD_64_48;
        let bytes = d.encode(f).unwrap();
        let p = Packet::parse(&bytes, f).unwrap();
        assert_eq!(p.heap_cnt, 1);
        assert_eq!(p.immediate(DESCRIPTOR_ID), Some(0x4000));
        let at = |id| item(&p, id).value as usize;
        assert_eq!(
            &p.payload[at(DESCRIPTOR_NAME)..at(DESCRIPTOR_DESCRIPTION)],
            b"data"
        );
        // No format fields for a dtype item; one shape entry of 1 + 6 bytes.
        assert_eq!(at(DESCRIPTOR_FORMAT), at(DESCRIPTOR_SHAPE));
        assert_eq!(
            &p.payload[at(DESCRIPTOR_SHAPE)..at(DESCRIPTOR_DTYPE)],
            &[0, 0, 0, 0, 0, 0x10, 0x00]
        );
        assert_eq!(
            &p.payload[at(DESCRIPTOR_DTYPE)..],
            b"{'descr': '<u2', 'fortran_order': False, 'shape': (4096,)}"
        );
    }

    #[test]
    fn format_fields_take_the_flavours_width_and_variable_dimensions_are_flagged() {
        let d = ItemDescriptor {
            id: 0x1600,
            name: "timestamp".into(),
            description: String::new(),
            shape: vec![None, Some(2)],
            element: ItemType::Format(vec![(b'u', 48)]),
        };
        for (f, format, shape) in [
            (
                Flavour::SPEAD_64_48,
                vec![b'u', 0, 48],
                vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            ),
            (
                Flavour::SPEAD_64_40,
                vec![b'u', 0, 0, 48],
                vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            ),
        ] {
            let bytes = d.encode(f).unwrap();
            let p = Packet::parse(&bytes, f).unwrap();
            let at = |id| item(&p, id).value as usize;
            assert_eq!(
                &p.payload[at(DESCRIPTOR_FORMAT)..at(DESCRIPTOR_SHAPE)],
                format
            );
            assert_eq!(&p.payload[at(DESCRIPTOR_SHAPE)..], shape);
            assert!(p.items().all(|i| i.id != DESCRIPTOR_DTYPE));
        }
        let too_wide = ItemDescriptor {
            element: ItemType::Format(vec![(b'u', 1 << 16)]),
            ..d
        };
        assert!(too_wide.encode(Flavour::SPEAD_64_48).is_none());
    }

    #[test]
    fn only_simple_dtypes_pass() {
        for ok in ["<u2", ">i4", "u1", "|b1", "<c8", "=f8", "<c16"] {
            assert!(is_simple_dtype(ok), "{ok}");
        }
        for bad in ["", "<", "<u3", "object", "<U10", "<u2,<u2", "<x4"] {
            assert!(!is_simple_dtype(bad), "{bad}");
        }
    }

    #[test]
    fn numpy_headers_write_tuples_as_python_does() {
        let d = |shape: Vec<Option<u64>>| ItemDescriptor {
            id: 0x1000,
            name: "x".into(),
            description: String::new(),
            shape,
            element: ItemType::Dtype("<f4".into()),
        };
        assert!(d(vec![]).numpy_header().unwrap().ends_with("'shape': ()}"));
        assert!(
            d(vec![Some(2), Some(3)])
                .numpy_header()
                .unwrap()
                .ends_with("'shape': (2, 3)}")
        );
    }
}
