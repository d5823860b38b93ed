//! TX flows (`tx.flows`) done in software: the first flow whose match takes a frame pushes
//! its VLAN tags and tunnel headers onto it, in the order the flow lists them, before the
//! engine sends it. The TX worker runs this on every engine that sends Ethernet frames
//! (the software loopback, DPDK), on a copy of the frame in the queue's transform region,
//! so the application's buffers keep what it wrote (as with a NIC's egress rule). The
//! frame grows in its buffer, which needs room for the added bytes; a frame without that
//! room is dropped and counted, never sent unchanged. Where a DPDK device inserts VLAN
//! tags itself, the flows only name each frame's tag ([`TxTransformer::vlan_tci`]).
//!
//! Tunnel headers are those the reference's NIC rules write: outer Ethernet, IPv4 without
//! options, then UDP + VXLAN (50 bytes), GRE without options (38) or GRE with a key, the
//! NVGRE header (42); the whole inner frame follows, its Ethernet header included.

use super::classifier::FrameMatch;
use crate::config::{TunnelConfig, TunnelKind, TxFlowConfig, TxTransform};

/// IP protocol numbers of the outer header.
const IPPROTO_UDP: u8 = 17;
const IPPROTO_GRE: u8 = 47;
/// GRE's "key present" flag.
const GRE_KEY_PRESENT: u16 = 0x2000;
/// EtherType NVGRE carries: transparent Ethernet bridging.
const ETHERTYPE_TEB: u16 = 0x6558;
/// The dynamic port range VXLAN source ports are taken from when none is given
/// (RFC 7348: a hash of the inner headers, for ECMP entropy).
const ENTROPY_PORTS: (u16, u16) = (49152, 65535);

/// Why a frame was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransformError {
    /// The frame's first buffer has no room for the bytes its flow adds.
    NoRoom {
        /// Bytes the frame would need in its first buffer.
        needed: usize,
        /// Bytes the buffer has.
        capacity: usize,
    },
}

/// One TX flow, ready to apply.
#[derive(Clone, Debug)]
struct CompiledFlow {
    matcher: FrameMatch,
    transforms: Vec<TxTransform>,
    added: usize,
}

/// An interface's TX flows, compiled.
#[derive(Clone, Debug, Default)]
pub struct TxTransformer {
    flows: Vec<CompiledFlow>,
}

impl TxTransformer {
    /// The flows of `tx.flows`, in order (the first that matches a frame applies).
    pub fn new(flows: &[TxFlowConfig]) -> Self {
        Self {
            flows: flows
                .iter()
                .map(|f| CompiledFlow {
                    matcher: FrameMatch::new(&f.matches),
                    transforms: f.transforms.clone(),
                    added: f.added_bytes(),
                })
                .collect(),
        }
    }

    /// True when there is no flow.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// True when some flow matches `frame` (its first segment).
    pub fn matches(&self, frame: &[u8]) -> bool {
        self.flows.iter().any(|f| f.matcher.matches(frame))
    }

    /// The most bytes any flow adds to a frame.
    pub fn max_overhead(&self) -> usize {
        self.flows.iter().map(|f| f.added).max().unwrap_or(0)
    }

    /// True when every flow pushes exactly one 802.1Q tag (EtherType 0x8100) and nothing
    /// else: what a device's TX VLAN insert offload does, so it can take the flows'
    /// place (see [`TxTransformer::vlan_tci`]).
    pub fn only_single_vlan_tags(&self) -> bool {
        !self.flows.is_empty()
            && self.flows.iter().all(|f| {
                matches!(
                    f.transforms.as_slice(),
                    [TxTransform::VlanPush {
                        ethertype: 0x8100,
                        ..
                    }]
                )
            })
    }

    /// The tag control information (PCP, DEI, VLAN id) the first flow matching `frame`
    /// pushes, when that flow pushes one tag and nothing else; `None` when no flow
    /// matches (the frame goes untagged) or the flow does more.
    pub fn vlan_tci(&self, frame: &[u8]) -> Option<u16> {
        let flow = self.flows.iter().find(|f| f.matcher.matches(frame))?;
        match flow.transforms.as_slice() {
            [
                TxTransform::VlanPush {
                    vlan_id,
                    pcp,
                    dei,
                    ethertype: 0x8100,
                },
            ] => Some(tci_of(*vlan_id, *pcp, *dei)),
            _ => None,
        }
    }

    /// Applies the first matching flow to the frame whose first segment is
    /// `buffer[..len]` (the whole buffer is `buffer`) and whose later segments hold `rest`
    /// bytes. Returns the first segment's new length (unchanged when no flow matches).
    pub fn apply(
        &self,
        buffer: &mut [u8],
        len: usize,
        rest: usize,
    ) -> Result<usize, TransformError> {
        let Some(flow) = self.flows.iter().find(|f| {
            // The match reads the headers, which live in the first segment.
            f.matcher.matches(&buffer[..len.min(buffer.len())])
        }) else {
            return Ok(len);
        };
        if len + flow.added > buffer.len() {
            return Err(TransformError::NoRoom {
                needed: len + flow.added,
                capacity: buffer.len(),
            });
        }
        let mut len = len;
        for t in &flow.transforms {
            len = match t {
                TxTransform::VlanPush {
                    vlan_id,
                    pcp,
                    dei,
                    ethertype,
                } => push_vlan(buffer, len, *ethertype, tci_of(*vlan_id, *pcp, *dei)),
                TxTransform::TunnelEncap(tc) => encapsulate(buffer, len, rest, tc, t.added_bytes()),
            };
        }
        Ok(len)
    }
}

/// A tag's control information: priority, drop eligibility, VLAN id.
fn tci_of(vlan_id: u16, pcp: u8, dei: u8) -> u16 {
    (u16::from(pcp) << 13) | (u16::from(dei) << 12) | vlan_id
}

/// Inserts a tag after the addresses: the new tag is the outer one. Frames shorter than
/// the addresses cannot match a flow (their headers do not parse), so `len >= 12`.
fn push_vlan(buf: &mut [u8], len: usize, ethertype: u16, tci: u16) -> usize {
    buf.copy_within(12..len, 16);
    buf[12..14].copy_from_slice(&ethertype.to_be_bytes());
    buf[14..16].copy_from_slice(&tci.to_be_bytes());
    len + 4
}

/// Puts the tunnel's `outer` bytes of headers in front of the frame.
fn encapsulate(buf: &mut [u8], len: usize, rest: usize, tc: &TunnelConfig, outer: usize) -> usize {
    let inner_total = len + rest;
    let entropy = inner_hash(&buf[..len]);
    buf.copy_within(0..len, outer);
    let (inner_dst, inner_src) = {
        let inner = &buf[outer..outer + 12];
        let mut d = [0u8; 6];
        let mut s = [0u8; 6];
        d.copy_from_slice(&inner[..6]);
        s.copy_from_slice(&inner[6..12]);
        (d, s)
    };
    let h = &mut buf[..outer];
    // Ethernet: the tunnel's addresses, the inner frame's where none is given.
    h[..6].copy_from_slice(&tc.outer_eth_dst.unwrap_or(inner_dst));
    h[6..12].copy_from_slice(&tc.outer_eth_src.unwrap_or(inner_src));
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    // IPv4 without options.
    let ip_total = (outer - 14 + inner_total) as u16;
    let proto = if tc.kind == TunnelKind::Vxlan {
        IPPROTO_UDP
    } else {
        IPPROTO_GRE
    };
    let ip = &mut h[14..34];
    ip[0] = 0x45;
    ip[1] = tc.outer_ipv4_tos;
    ip[2..4].copy_from_slice(&ip_total.to_be_bytes());
    ip[4..8].fill(0);
    ip[8] = tc.outer_ipv4_ttl;
    ip[9] = proto;
    ip[10..12].fill(0);
    // Validation requires both outer addresses for an encap.
    ip[12..16].copy_from_slice(&tc.outer_ipv4_src.map_or([0; 4], |a| a.octets()));
    ip[16..20].copy_from_slice(&tc.outer_ipv4_dst.map_or([0; 4], |a| a.octets()));
    let sum = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let t = &mut h[34..];
    match tc.kind {
        TunnelKind::Vxlan => {
            let sport = if tc.outer_udp_src != 0 {
                tc.outer_udp_src
            } else {
                let span = u32::from(ENTROPY_PORTS.1 - ENTROPY_PORTS.0) + 1;
                ENTROPY_PORTS.0 + (entropy % span) as u16
            };
            t[..2].copy_from_slice(&sport.to_be_bytes());
            t[2..4].copy_from_slice(&tc.outer_udp_dst.to_be_bytes());
            t[4..6].copy_from_slice(&((8 + 8 + inner_total) as u16).to_be_bytes());
            // No UDP checksum: IPv4 lets it be zero, and VXLAN senders leave it so.
            t[6..8].fill(0);
            // VXLAN: the "VNI present" flag, then the VNI in the upper 24 bits.
            t[8..12].copy_from_slice(&0x0800_0000u32.to_be_bytes());
            t[12..16].copy_from_slice(&(tc.vni << 8).to_be_bytes());
        }
        TunnelKind::Gre => {
            t[..2].fill(0);
            t[2..4].copy_from_slice(&tc.gre_protocol.to_be_bytes());
        }
        TunnelKind::Nvgre => {
            t[..2].copy_from_slice(&GRE_KEY_PRESENT.to_be_bytes());
            t[2..4].copy_from_slice(&ETHERTYPE_TEB.to_be_bytes());
            let key = (tc.tni << 8) | u32::from(tc.nvgre_flow_id);
            t[4..8].copy_from_slice(&key.to_be_bytes());
        }
    }
    len + outer
}

/// The IPv4 header checksum of `ip` (its checksum field zero).
fn ipv4_checksum(ip: &[u8]) -> u16 {
    let mut sum: u32 = ip
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A hash of the inner frame's addresses and ports (its first 38 bytes at most), so one
/// inner flow keeps one outer source port.
fn inner_hash(frame: &[u8]) -> u32 {
    // FNV-1a.
    frame[..frame.len().min(38)]
        .iter()
        .fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::Location;
    use crate::config::{EthernetMatch, FlowMatch, PortRange};
    use std::net::Ipv4Addr;

    fn udp_frame(dport: u16, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 42 + payload];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((28 + payload) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        f[34..36].copy_from_slice(&4096u16.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[38..40].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        for (i, b) in f[42..].iter_mut().enumerate() {
            *b = i as u8;
        }
        f
    }

    fn flow(dport: Option<u16>, transforms: Vec<TxTransform>) -> TxFlowConfig {
        TxFlowConfig {
            name: "f".into(),
            id: 1,
            transforms,
            matches: FlowMatch {
                udp_dst: dport.map(|p| PortRange { first: p, last: p }),
                ..FlowMatch::default()
            },
            location: Location::default(),
        }
    }

    fn tunnel(kind: TunnelKind) -> TunnelConfig {
        TunnelConfig {
            kind,
            outer_eth_src: Some([2, 0, 0, 0, 0, 0xa]),
            outer_eth_dst: Some([2, 0, 0, 0, 0, 0xb]),
            outer_ipv4_src: Some(Ipv4Addr::new(192, 0, 2, 1)),
            outer_ipv4_dst: Some(Ipv4Addr::new(192, 0, 2, 2)),
            outer_ipv4_ttl: 64,
            outer_ipv4_tos: 0,
            vni: 100,
            outer_udp_src: 0,
            outer_udp_dst: 4789,
            gre_protocol: 0x0800,
            tni: 0x123456,
            nvgre_flow_id: 7,
        }
    }

    fn in_buffer(frame: &[u8], capacity: usize) -> Vec<u8> {
        let mut b = vec![0xeeu8; capacity];
        b[..frame.len()].copy_from_slice(frame);
        b
    }

    #[test]
    fn a_vlan_push_inserts_the_tag_after_the_addresses_and_only_on_matching_frames() {
        let t = TxTransformer::new(&[flow(
            Some(5000),
            vec![TxTransform::VlanPush {
                vlan_id: 100,
                pcp: 3,
                dei: 1,
                ethertype: 0x8100,
            }],
        )]);
        let frame = udp_frame(5000, 20);
        let mut b = in_buffer(&frame, 128);
        let n = t.apply(&mut b, frame.len(), 0).unwrap();
        assert_eq!(n, frame.len() + 4);
        assert_eq!(b[..12], frame[..12]);
        assert_eq!(b[12..16], [0x81, 0x00, 0x70, 100]);
        assert_eq!(b[16..n], frame[12..]);
        let parsed = crate::steering::headers::parse(&b[..n]).unwrap();
        assert_eq!(parsed.vlan, Some(100));
        assert_eq!(parsed.udp.unwrap().dst, 5000);
        // Another port: untouched.
        let other = udp_frame(5001, 20);
        let mut b = in_buffer(&other, 128);
        assert_eq!(t.apply(&mut b, other.len(), 0), Ok(other.len()));
        assert_eq!(b[..other.len()], other[..]);
        // What a device's VLAN insert is asked for instead: the same tag, the same frames.
        assert!(t.only_single_vlan_tags());
        assert_eq!(t.vlan_tci(&frame), Some(0x7000 | 100));
        assert_eq!(t.vlan_tci(&other), None);
    }

    /// Only flows that push one 802.1Q tag each can be left to a device's VLAN insert.
    #[test]
    fn only_single_8021q_tags_can_go_to_the_device() {
        let tag = |ethertype| TxTransform::VlanPush {
            vlan_id: 7,
            pcp: 0,
            dei: 0,
            ethertype,
        };
        let of = |flows: &[TxFlowConfig]| TxTransformer::new(flows).only_single_vlan_tags();
        assert!(of(&[
            flow(Some(1), vec![tag(0x8100)]),
            flow(None, vec![tag(0x8100)])
        ]));
        assert!(!of(&[]));
        assert!(!of(&[flow(None, vec![tag(0x88a8)])]));
        assert!(!of(&[flow(None, vec![tag(0x88a8), tag(0x8100)])]));
        assert!(!of(&[
            flow(Some(1), vec![tag(0x8100)]),
            flow(
                None,
                vec![TxTransform::TunnelEncap(tunnel(TunnelKind::Vxlan))]
            )
        ]));
    }

    #[test]
    fn vxlan_outer_headers_carry_lengths_checksum_and_vni_and_the_whole_inner_frame() {
        let t = TxTransformer::new(&[flow(
            None,
            vec![TxTransform::TunnelEncap(tunnel(TunnelKind::Vxlan))],
        )]);
        let frame = udp_frame(4096, 100);
        let mut b = in_buffer(&frame, 512);
        // 30 more bytes in later segments count in the outer lengths.
        let n = t.apply(&mut b, frame.len(), 30).unwrap();
        assert_eq!(n, frame.len() + 50);
        assert_eq!(b[50..n], frame[..]);
        let outer = crate::steering::headers::parse(&b[..n]).unwrap();
        let ip = outer.ipv4.unwrap();
        assert_eq!(ip.src, u32::from(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(ip.total_len as usize, 20 + 8 + 8 + frame.len() + 30);
        let udp = outer.udp.unwrap();
        assert_eq!(udp.dst, 4789);
        assert!(udp.src >= 49152, "entropy port {}", udp.src);
        assert_eq!(
            u16::from_be_bytes([b[38], b[39]]) as usize,
            16 + frame.len() + 30
        );
        assert_eq!(b[42..50], [0x08, 0, 0, 0, 0, 0, 100, 0]);
        assert_eq!(
            ipv4_checksum(&b[14..34]),
            0,
            "a header with its checksum sums to zero"
        );
        assert_eq!(b[..6], [2, 0, 0, 0, 0, 0xb]);
        // The same inner flow keeps its source port.
        let mut again = in_buffer(&frame, 512);
        t.apply(&mut again, frame.len(), 30).unwrap();
        assert_eq!(again[34..36], b[34..36]);
    }

    #[test]
    fn gre_and_nvgre_write_their_headers_and_keys() {
        let frame = udp_frame(4096, 10);
        for (kind, header) in [
            (TunnelKind::Gre, vec![0u8, 0, 0x08, 0x00]),
            (
                TunnelKind::Nvgre,
                vec![0x20, 0, 0x65, 0x58, 0x12, 0x34, 0x56, 7],
            ),
        ] {
            let t = TxTransformer::new(&[flow(None, vec![TxTransform::TunnelEncap(tunnel(kind))])]);
            let mut b = in_buffer(&frame, 256);
            let n = t.apply(&mut b, frame.len(), 0).unwrap();
            let outer = 34 + header.len();
            assert_eq!(n, frame.len() + outer, "{kind:?}");
            assert_eq!(b[23], 47, "{kind:?}: protocol GRE");
            assert_eq!(b[34..outer], header[..], "{kind:?}");
            assert_eq!(b[outer..n], frame[..], "{kind:?}");
            assert_eq!(ipv4_checksum(&b[14..34]), 0);
        }
    }

    #[test]
    fn a_frame_without_room_is_refused_and_left_as_it_was() {
        let t = TxTransformer::new(&[flow(
            None,
            vec![TxTransform::TunnelEncap(tunnel(TunnelKind::Vxlan))],
        )]);
        let frame = udp_frame(4096, 100);
        let mut b = in_buffer(&frame, frame.len() + 49);
        assert_eq!(
            t.apply(&mut b, frame.len(), 0),
            Err(TransformError::NoRoom {
                needed: frame.len() + 50,
                capacity: frame.len() + 49
            })
        );
        assert_eq!(b[..frame.len()], frame[..]);
    }

    #[test]
    fn transforms_apply_in_order_and_an_ethernet_match_selects() {
        let mut f = flow(
            None,
            vec![
                TxTransform::VlanPush {
                    vlan_id: 5,
                    pcp: 0,
                    dei: 0,
                    ethertype: 0x8100,
                },
                TxTransform::TunnelEncap(tunnel(TunnelKind::Gre)),
            ],
        );
        f.matches.ethernet = Some(EthernetMatch {
            dst: Some([2, 0, 0, 0, 0, 2]),
            src: None,
            ethertype: None,
        });
        let t = TxTransformer::new(&[f]);
        assert_eq!(t.max_overhead(), 42);
        let frame = udp_frame(4096, 10);
        let mut b = in_buffer(&frame, 256);
        let n = t.apply(&mut b, frame.len(), 0).unwrap();
        assert_eq!(n, frame.len() + 42);
        // Inside the GRE header: the tagged frame.
        assert_eq!(b[38 + 12..38 + 16], [0x81, 0, 0, 5]);
        let mut other = frame.clone();
        other[5] = 9;
        let mut b = in_buffer(&other, 256);
        assert_eq!(t.apply(&mut b, other.len(), 0), Ok(other.len()));
    }
}
