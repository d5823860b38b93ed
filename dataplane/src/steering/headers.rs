//! The header fields flow rules match on, read from a frame without copying or allocating.
//! Frames the classifier cannot read safely are reported as malformed, with the reason.
//!
//! An IPv4 total length that disagrees with the frame (past its end, or too short for the
//! headers the frame has) does not make a frame malformed: like a NIC's flow engine, the
//! classifier steers by the header fields, and takes the packet to end where the frame
//! does. Senders that keep other data in those bytes (the reference's reorder examples put
//! sequence numbers there) are steered like any other.

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of eCPRI over Ethernet.
pub const ETHERTYPE_ECPRI: u16 = 0xAEFE;
/// EtherTypes of VLAN tags (802.1Q, 802.1ad).
const ETHERTYPE_VLAN: [u16; 2] = [0x8100, 0x88A8];
/// At most two stacked VLAN tags (QinQ) are read.
const MAX_VLAN_TAGS: usize = 2;
/// IP protocol number of UDP.
const IPPROTO_UDP: u8 = 17;

/// Why a frame could not be classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than an Ethernet header.
    ShortEthernet,
    /// A VLAN tag cut short, or more tags than are read.
    BadVlan,
    /// Shorter than an IPv4 header, or not version 4.
    ShortIpv4,
    /// IPv4 header length below 5 words or past the end of the frame.
    BadIhl,
    /// A fragment other than the first: it has no UDP header.
    Fragment,
    /// A UDP header cut short.
    ShortUdp,
    /// An eCPRI header cut short.
    ShortEcpri,
}

impl Malformed {
    /// Short description for logs and reports.
    pub fn describe(self) -> &'static str {
        match self {
            Malformed::ShortEthernet => "shorter than an Ethernet header",
            Malformed::BadVlan => "VLAN tag cut short or more than two tags",
            Malformed::ShortIpv4 => "IPv4 header cut short or wrong version",
            Malformed::BadIhl => "IPv4 header length out of range",
            Malformed::Fragment => "non-first IPv4 fragment",
            Malformed::ShortUdp => "UDP header cut short",
            Malformed::ShortEcpri => "eCPRI header cut short",
        }
    }
}

/// IPv4 fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Fields {
    /// Source address (host order).
    pub src: u32,
    /// Destination address (host order).
    pub dst: u32,
    /// Total length.
    pub total_len: u16,
}

/// UDP fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFields {
    /// Source port.
    pub src: u16,
    /// Destination port.
    pub dst: u16,
    /// Offset of the UDP payload in the frame.
    pub payload_offset: u16,
    /// End of the IPv4 packet in the frame (payload bytes past it are padding).
    pub packet_end: u16,
}

/// eCPRI fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcpriFields {
    /// Message type.
    pub msg_type: u8,
    /// PC_ID / RTC_ID (first 16 bits of the payload), when present.
    pub id: Option<u16>,
}

/// What a frame carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    /// The frame starts with an Ethernet header (false for a socket's datagram).
    pub ethernet: bool,
    /// VLAN id of the outer tag.
    pub vlan: Option<u16>,
    /// IPv4 header, when the frame carries IPv4.
    pub ipv4: Option<Ipv4Fields>,
    /// UDP header, when IPv4 carries UDP.
    pub udp: Option<UdpFields>,
    /// eCPRI header, when the EtherType is eCPRI.
    pub ecpri: Option<EcpriFields>,
}

#[inline]
fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

#[inline]
fn be32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

/// Reads the headers of an Ethernet frame.
#[inline]
pub fn parse(f: &[u8]) -> Result<Headers, Malformed> {
    // Fast path for the common frame: untagged IPv4 without options, not a fragment.
    if let Some(b) = f.get(..42).and_then(|b| <&[u8; 42]>::try_from(b).ok()) {
        let total_len = u16::from_be_bytes([b[16], b[17]]);
        if b[12] == 0x08
            && b[13] == 0x00
            && b[14] == 0x45
            && u16::from_be_bytes([b[20], b[21]]) & 0x1fff == 0
        {
            let ipv4 = Some(Ipv4Fields {
                src: u32::from_be_bytes([b[26], b[27], b[28], b[29]]),
                dst: u32::from_be_bytes([b[30], b[31], b[32], b[33]]),
                total_len,
            });
            let udp = (b[23] == IPPROTO_UDP).then(|| UdpFields {
                src: u16::from_be_bytes([b[34], b[35]]),
                dst: u16::from_be_bytes([b[36], b[37]]),
                payload_offset: 42,
                packet_end: packet_end(f.len(), 14, 20, total_len) as u16,
            });
            return Ok(Headers {
                ethernet: true,
                vlan: None,
                ipv4,
                udp,
                ecpri: None,
            });
        }
    }
    parse_general(f)
}

/// Any frame: VLAN tags, IPv4 options, eCPRI, and every malformed case.
fn parse_general(f: &[u8]) -> Result<Headers, Malformed> {
    if f.len() < 14 {
        return Err(Malformed::ShortEthernet);
    }
    let mut h = Headers {
        ethernet: true,
        ..Headers::default()
    };
    let mut ethertype = be16(f, 12);
    let mut at = 14;
    let mut tags = 0;
    while ETHERTYPE_VLAN.contains(&ethertype) {
        if tags == MAX_VLAN_TAGS || f.len() < at + 4 {
            return Err(Malformed::BadVlan);
        }
        if tags == 0 {
            h.vlan = Some(be16(f, at) & 0x0fff);
        }
        ethertype = be16(f, at + 2);
        at += 4;
        tags += 1;
    }
    match ethertype {
        ETHERTYPE_IPV4 => parse_ipv4(f, at, &mut h)?,
        ETHERTYPE_ECPRI => {
            // Common header: revision/flags, message type, payload size; then the id.
            if f.len() < at + 4 {
                return Err(Malformed::ShortEcpri);
            }
            let id = (f.len() >= at + 6).then(|| be16(f, at + 4));
            h.ecpri = Some(EcpriFields {
                msg_type: f[at + 1],
                id,
            });
        }
        _ => {}
    }
    Ok(h)
}

fn parse_ipv4(f: &[u8], at: usize, h: &mut Headers) -> Result<(), Malformed> {
    if f.len() < at + 20 || f[at] >> 4 != 4 {
        return Err(Malformed::ShortIpv4);
    }
    let ihl = usize::from(f[at] & 0x0f) * 4;
    let total_len = be16(f, at + 2);
    if ihl < 20 || at + ihl > f.len() {
        return Err(Malformed::BadIhl);
    }
    let end = packet_end(f.len(), at, ihl, total_len);
    if be16(f, at + 6) & 0x1fff != 0 {
        return Err(Malformed::Fragment);
    }
    h.ipv4 = Some(Ipv4Fields {
        src: be32(f, at + 12),
        dst: be32(f, at + 16),
        total_len,
    });
    if f[at + 9] == IPPROTO_UDP {
        let u = at + ihl;
        if u + 8 > end {
            return Err(Malformed::ShortUdp);
        }
        h.udp = Some(UdpFields {
            src: be16(f, u),
            dst: be16(f, u + 2),
            payload_offset: (u + 8) as u16,
            packet_end: end as u16,
        });
    }
    Ok(())
}

/// Where the IPv4 packet starting at `at` (header `ihl` bytes) ends in a frame of
/// `frame_len` bytes: at its total length when that covers the IPv4 and UDP headers and
/// lies inside the frame (the rest is Ethernet padding), else at the frame's end.
#[inline]
fn packet_end(frame_len: usize, at: usize, ihl: usize, total_len: u16) -> usize {
    let end = at + usize::from(total_len);
    if usize::from(total_len) >= ihl + 8 && end <= frame_len {
        end
    } else {
        frame_len
    }
}

/// The 32-bit big-endian word `offset` bytes into the UDP payload, if the packet has it.
#[inline]
pub fn udp_payload_word(f: &[u8], udp: &UdpFields, offset: u32) -> Option<u32> {
    let at = usize::from(udp.payload_offset) + offset as usize;
    (at + 4 <= usize::from(udp.packet_end)).then(|| be32(f, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_frame(vlan: Option<u16>, payload: &[u8]) -> Vec<u8> {
        let builder = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6]);
        let mut out = Vec::new();
        match vlan {
            Some(v) => builder
                .single_vlan(etherparse::VlanId::try_new(v).unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .udp(4096, 5000)
                .write(&mut out, payload)
                .unwrap(),
            None => builder
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .udp(4096, 5000)
                .write(&mut out, payload)
                .unwrap(),
        }
        out
    }

    #[test]
    fn reads_what_etherparse_wrote() {
        for vlan in [None, Some(42)] {
            let f = udp_frame(vlan, &[9, 8, 7, 6, 5, 4, 3, 2]);
            let h = parse(&f).unwrap();
            assert_eq!(h.vlan, vlan);
            let ip = h.ipv4.unwrap();
            assert_eq!((ip.src, ip.dst), (0x0a00_0001, 0x0a00_0002));
            assert_eq!(ip.total_len, 20 + 8 + 8);
            let u = h.udp.unwrap();
            assert_eq!((u.src, u.dst), (4096, 5000));
            assert_eq!(udp_payload_word(&f, &u, 4), Some(0x0504_0302));
            assert_eq!(udp_payload_word(&f, &u, 5), None, "past the packet");
        }
    }

    #[test]
    fn a_total_length_the_frame_disagrees_with_still_steers_by_ports() {
        let good = udp_frame(None, &[9, 8, 7, 6, 5, 4, 3, 2]);
        for total_len in [1000u16, 0, 24, 0xffff] {
            let mut f = good.clone();
            f[16..18].copy_from_slice(&total_len.to_be_bytes());
            let h = parse(&f).unwrap();
            let u = h.udp.unwrap();
            assert_eq!((u.src, u.dst), (4096, 5000));
            assert_eq!(
                usize::from(u.packet_end),
                f.len(),
                "total length {total_len}"
            );
            // The general path (a VLAN tag in front) reads the same.
            let mut tagged = f[..12].to_vec();
            tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
            tagged.extend_from_slice(&f[12..]);
            let u = parse(&tagged).unwrap().udp.unwrap();
            assert_eq!(
                (u.src, u.dst, usize::from(u.packet_end)),
                (4096, 5000, tagged.len())
            );
        }
        // A consistent total length below the frame's end: the rest is padding.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(
            usize::from(parse(&padded).unwrap().udp.unwrap().packet_end),
            good.len()
        );
    }

    #[test]
    fn malformed_frames_are_named() {
        let good = udp_frame(None, &[0; 8]);
        assert_eq!(parse(&good[..10]), Err(Malformed::ShortEthernet));
        assert_eq!(parse(&good[..30]), Err(Malformed::ShortIpv4));
        let mut f = good.clone();
        f[14] = 0x44; // IHL 4
        assert_eq!(parse(&f), Err(Malformed::BadIhl));
        let mut f = good.clone();
        f[20..22].copy_from_slice(&0x0010u16.to_be_bytes()); // fragment offset 16
        assert_eq!(parse(&f), Err(Malformed::Fragment));
        let mut short = good[..38].to_vec(); // UDP header cut at 4 bytes
        short[16..18].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(parse(&short), Err(Malformed::ShortUdp));
        let mut tagged = good[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00]);
        assert_eq!(parse(&tagged), Err(Malformed::BadVlan));
        let mut triple = good[..12].to_vec();
        for _ in 0..3 {
            triple.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        }
        triple.extend_from_slice(&good[12..]);
        assert_eq!(parse(&triple), Err(Malformed::BadVlan));
    }

    #[test]
    fn first_fragments_and_other_ethertypes_are_fine() {
        let mut f = udp_frame(None, &[0; 8]);
        f[20] = 0x20; // more fragments, offset 0
        assert!(parse(&f).unwrap().udp.is_some());
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            parse(&arp),
            Ok(Headers {
                ethernet: true,
                ..Headers::default()
            })
        );
        let mut ecpri = vec![0u8; 20];
        ecpri[12..14].copy_from_slice(&ETHERTYPE_ECPRI.to_be_bytes());
        ecpri[15] = 2;
        ecpri[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(
            parse(&ecpri).unwrap().ecpri,
            Some(EcpriFields {
                msg_type: 2,
                id: Some(0x1234)
            })
        );
    }
}
