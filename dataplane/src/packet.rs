//! Building and reading the frames an application sends and receives: Ethernet (with an
//! optional VLAN tag) / IPv4 / UDP with lengths and both checksums, and eCPRI over
//! Ethernet. `etherparse` does the header work; this module fits it to burst buffers: a
//! frame is written straight into a packet's buffer, and a payload already in the buffer
//! gets its headers written in front of it ([`UdpFrame::write_headers`]), so nothing is
//! copied twice.
//!
//! ```
//! use dataplane::packet::{UdpFrame, parse};
//! let frame = UdpFrame::new("10.0.0.1:4096".parse().unwrap(), "10.0.0.2:5000".parse().unwrap())
//!     .macs([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
//!     .vlan(42);
//! let mut buf = [0u8; 256];
//! let len = frame.write(b"samples", &mut buf).unwrap();
//! let view = parse(&buf[..len]).unwrap();
//! assert_eq!(view.vlan, Some(42));
//! assert_eq!(view.udp_ports, Some((4096, 5000)));
//! assert_eq!(view.payload, b"samples");
//! ```

#![forbid(unsafe_code)]

use etherparse::{
    EtherType, Ethernet2Header, IpNumber, Ipv4Header, SingleVlanHeader, UdpHeader, VlanId,
};
use std::net::{Ipv4Addr, SocketAddrV4};

/// EtherType of eCPRI over Ethernet.
pub const ETHERTYPE_ECPRI: u16 = 0xAEFE;
/// Bytes of the eCPRI common header.
pub const ECPRI_HEADER: usize = 4;

/// Why a frame could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The buffer is shorter than the frame.
    #[error("a {needed}-byte frame does not fit a {available}-byte buffer")]
    NoRoom {
        /// Bytes the frame needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// The payload is longer than the protocol's length fields allow.
    #[error("a {0}-byte payload is longer than the length fields allow")]
    TooLong(usize),
    /// A VLAN id above 4095.
    #[error("VLAN id {0} is above 4095")]
    BadVlan(u16),
    /// The frame's headers could not be read; says which and why.
    #[error("cannot read the frame: {0}")]
    Malformed(String),
}

fn vlan_tag(id: u16, inner: EtherType) -> Result<SingleVlanHeader, PacketError> {
    Ok(SingleVlanHeader {
        pcp: Default::default(),
        drop_eligible_indicator: false,
        vlan_id: VlanId::try_new(id).map_err(|_| PacketError::BadVlan(id))?,
        ether_type: inner,
    })
}

/// Writes the Ethernet header (and VLAN tag) for `inner` into `out`; returns its length.
fn write_link(
    out: &mut [u8],
    src: [u8; 6],
    dst: [u8; 6],
    vlan: Option<u16>,
    inner: EtherType,
) -> Result<usize, PacketError> {
    let outer = if vlan.is_some() {
        EtherType::VLAN_TAGGED_FRAME
    } else {
        inner
    };
    let eth = Ethernet2Header {
        source: src,
        destination: dst,
        ether_type: outer,
    };
    out[..14].copy_from_slice(&eth.to_bytes());
    match vlan {
        Some(id) => {
            out[14..18].copy_from_slice(&vlan_tag(id, inner)?.to_bytes());
            Ok(18)
        }
        None => Ok(14),
    }
}

fn room(needed: usize, available: usize) -> Result<(), PacketError> {
    if needed > available {
        Err(PacketError::NoRoom { needed, available })
    } else {
        Ok(())
    }
}

/// An Ethernet / IPv4 / UDP frame: addresses, ports and an optional VLAN tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFrame {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// VLAN id of an 802.1Q tag, if any.
    pub vlan: Option<u16>,
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// IPv4 time to live.
    pub ttl: u8,
}

impl UdpFrame {
    /// A frame from `src` to `dst`, zero MACs, no VLAN tag, TTL 64.
    pub fn new(src: SocketAddrV4, dst: SocketAddrV4) -> Self {
        Self {
            src_mac: [0; 6],
            dst_mac: [0; 6],
            vlan: None,
            src,
            dst,
            ttl: 64,
        }
    }

    /// With these MACs.
    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Self {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    /// With an 802.1Q tag of VLAN `id`.
    pub fn vlan(mut self, id: u16) -> Self {
        self.vlan = Some(id);
        self
    }

    /// Bytes before the payload: 42, or 46 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        14 + if self.vlan.is_some() { 4 } else { 0 } + 20 + 8
    }

    /// Writes the whole frame (headers, then `payload`) into `buf`; returns its length.
    pub fn write(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, PacketError> {
        let h = self.header_len();
        room(h + payload.len(), buf.len())?;
        buf[h..h + payload.len()].copy_from_slice(payload);
        self.write_headers(buf, payload.len())
    }

    /// Writes the headers in front of a `payload_len`-byte payload already at
    /// `buf[header_len()..]` (filled in place, for example by a GPU or a DMA), computing
    /// both checksums over it; returns the frame's length.
    pub fn write_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, PacketError> {
        let h = self.header_len();
        room(h + payload_len, buf.len())?;
        let udp_len = u16::try_from(payload_len + UdpHeader::LEN)
            .map_err(|_| PacketError::TooLong(payload_len))?;
        let ip = {
            let mut ip = Ipv4Header::new(
                udp_len,
                self.ttl,
                IpNumber::UDP,
                self.src.ip().octets(),
                self.dst.ip().octets(),
            )
            .map_err(|_| PacketError::TooLong(payload_len))?;
            ip.header_checksum = ip.calc_header_checksum();
            ip
        };
        let (head, rest) = buf.split_at_mut(h);
        let payload = &rest[..payload_len];
        let udp = UdpHeader::with_ipv4_checksum(self.src.port(), self.dst.port(), &ip, payload)
            .map_err(|_| PacketError::TooLong(payload_len))?;
        let l3 = write_link(head, self.src_mac, self.dst_mac, self.vlan, EtherType::IPV4)?;
        head[l3..l3 + 20].copy_from_slice(&ip.to_bytes());
        head[l3 + 20..l3 + 28].copy_from_slice(&udp.to_bytes());
        Ok(h + payload_len)
    }
}

/// An eCPRI frame over Ethernet (EtherType 0xAEFE): the 4-byte common header (revision 1,
/// no concatenation), then the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcpriFrame {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// VLAN id of an 802.1Q tag, if any.
    pub vlan: Option<u16>,
    /// eCPRI message type (0: IQ data, 2: real-time control, ...).
    pub msg_type: u8,
}

impl EcpriFrame {
    /// Bytes before the message: 18, or 22 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        14 + if self.vlan.is_some() { 4 } else { 0 } + ECPRI_HEADER
    }

    /// Writes the frame (headers, then `message`, which starts with the PC_ID or RTC_ID
    /// where the type has one) into `buf`; returns its length.
    pub fn write(&self, message: &[u8], buf: &mut [u8]) -> Result<usize, PacketError> {
        let h = self.header_len();
        room(h + message.len(), buf.len())?;
        let size = u16::try_from(message.len()).map_err(|_| PacketError::TooLong(message.len()))?;
        let l2 = write_link(
            buf,
            self.src_mac,
            self.dst_mac,
            self.vlan,
            EtherType(ETHERTYPE_ECPRI),
        )?;
        buf[l2] = 0x10; // revision 1, reserved 0, C = 0
        buf[l2 + 1] = self.msg_type;
        buf[l2 + 2..l2 + 4].copy_from_slice(&size.to_be_bytes());
        buf[h..h + message.len()].copy_from_slice(message);
        Ok(h + message.len())
    }
}

/// What a frame carries, read without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameView<'a> {
    /// VLAN id of the outer tag.
    pub vlan: Option<u16>,
    /// IPv4 source and destination.
    pub ipv4: Option<(Ipv4Addr, Ipv4Addr)>,
    /// UDP source and destination ports.
    pub udp_ports: Option<(u16, u16)>,
    /// eCPRI message type.
    pub ecpri_type: Option<u8>,
    /// The UDP payload, the eCPRI message, or what follows the last header read.
    pub payload: &'a [u8],
}

/// Reads the headers of an Ethernet frame (the IPv4 total length bounds the UDP payload;
/// Ethernet padding is not payload).
pub fn parse(frame: &[u8]) -> Result<FrameView<'_>, PacketError> {
    let sliced = etherparse::SlicedPacket::from_ethernet(frame)
        .map_err(|e| PacketError::Malformed(e.to_string()))?;
    let vlan = match &sliced.vlan() {
        Some(etherparse::VlanSlice::SingleVlan(v)) => Some(v.vlan_identifier().value()),
        Some(etherparse::VlanSlice::DoubleVlan(v)) => Some(v.outer.vlan_identifier().value()),
        None => None,
    };
    let mut view = FrameView {
        vlan,
        ipv4: None,
        udp_ports: None,
        ecpri_type: None,
        payload: &[],
    };
    if let Some(etherparse::NetSlice::Ipv4(ip)) = &sliced.net {
        let h = ip.header();
        view.ipv4 = Some((h.source_addr(), h.destination_addr()));
        view.payload = ip.payload().payload;
    }
    if let Some(etherparse::TransportSlice::Udp(udp)) = &sliced.transport {
        view.udp_ports = Some((udp.source_port(), udp.destination_port()));
        view.payload = udp.payload();
    }
    if view.ipv4.is_none()
        && let Some(etherparse::LinkSlice::Ethernet2(eth)) = &sliced.link
    {
        let inner = match &sliced.vlan() {
            Some(etherparse::VlanSlice::SingleVlan(v)) => v.ether_type(),
            Some(etherparse::VlanSlice::DoubleVlan(v)) => v.inner.ether_type(),
            None => eth.ether_type(),
        };
        let rest = match &sliced.vlan() {
            Some(etherparse::VlanSlice::SingleVlan(v)) => v.payload_slice(),
            Some(etherparse::VlanSlice::DoubleVlan(v)) => v.payload().payload,
            None => eth.payload_slice(),
        };
        if inner == EtherType(ETHERTYPE_ECPRI) {
            if rest.len() < ECPRI_HEADER {
                return Err(PacketError::Malformed("eCPRI header cut short".into()));
            }
            let size = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
            let message = &rest[ECPRI_HEADER..];
            view.ecpri_type = Some(rest[1]);
            view.payload = &message[..size.min(message.len())];
        } else {
            view.payload = rest;
        }
    }
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> UdpFrame {
        UdpFrame::new(
            "192.0.2.1:4096".parse().unwrap(),
            "192.0.2.2:5000".parse().unwrap(),
        )
        .macs([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
    }

    /// What etherparse's own builder writes, byte for byte, with and without a tag.
    #[test]
    fn udp_frames_match_etherparse_byte_for_byte() {
        let payload: Vec<u8> = (0..301u32).map(|i| (i * 7) as u8).collect();
        for vlan in [None, Some(42u16)] {
            let f = match vlan {
                Some(v) => frame().vlan(v),
                None => frame(),
            };
            let mut buf = vec![0u8; 1024];
            let len = f.write(&payload, &mut buf).unwrap();
            let b = etherparse::PacketBuilder::ethernet2(f.src_mac, f.dst_mac);
            let mut want = Vec::new();
            match vlan {
                Some(v) => b
                    .single_vlan(VlanId::try_new(v).unwrap())
                    .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
                    .udp(4096, 5000)
                    .write(&mut want, &payload)
                    .unwrap(),
                None => b
                    .ipv4([192, 0, 2, 1], [192, 0, 2, 2], 64)
                    .udp(4096, 5000)
                    .write(&mut want, &payload)
                    .unwrap(),
            }
            assert_eq!(&buf[..len], &want[..], "vlan {vlan:?}");
            let v = parse(&buf[..len]).unwrap();
            assert_eq!(v.vlan, vlan);
            assert_eq!(
                v.ipv4,
                Some((Ipv4Addr::new(192, 0, 2, 1), Ipv4Addr::new(192, 0, 2, 2)))
            );
            assert_eq!(v.udp_ports, Some((4096, 5000)));
            assert_eq!(v.payload, &payload[..]);
        }
    }

    #[test]
    fn headers_in_front_of_a_payload_written_in_place() {
        let f = frame();
        let mut buf = vec![0u8; 200];
        buf[42..142].fill(0x5a);
        let len = f.write_headers(&mut buf, 100).unwrap();
        let mut whole = vec![0u8; 200];
        f.write(&[0x5a; 100], &mut whole).unwrap();
        assert_eq!(&buf[..len], &whole[..len]);
    }

    #[test]
    fn ecpri_frames_read_back_and_padding_is_not_payload() {
        let f = EcpriFrame {
            src_mac: [2; 6],
            dst_mac: [4; 6],
            vlan: Some(7),
            msg_type: 2,
        };
        let mut buf = vec![0u8; 64]; // Ethernet minimum: the rest is padding
        let len = f.write(&[0x12, 0x34, 9, 9], &mut buf).unwrap();
        assert_eq!(len, 26);
        let v = parse(&buf).unwrap();
        assert_eq!((v.vlan, v.ecpri_type), (Some(7), Some(2)));
        assert_eq!(v.payload, &[0x12, 0x34, 9, 9]);
        assert!(v.ipv4.is_none() && v.udp_ports.is_none());
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let mut small = [0u8; 50];
        assert_eq!(
            frame().write(&[0; 20], &mut small),
            Err(PacketError::NoRoom {
                needed: 62,
                available: 50
            })
        );
        let mut buf = [0u8; 100];
        assert_eq!(
            frame().vlan(5000).write(&[], &mut buf),
            Err(PacketError::BadVlan(5000))
        );
        assert!(matches!(parse(&[0u8; 10]), Err(PacketError::Malformed(_))));
    }
}
