//! Flow rules: match fields, ranges and prefixes, tunnels, and the transforms of RX and TX
//! flows.

use super::*;

/// `rx.flex_items[]`: a 32-bit word at `offset` bytes after the UDP header of packets to
/// `udp_dst_port`.
#[derive(Clone, Debug)]
pub struct FlexItemConfig {
    /// Name.
    pub name: String,
    /// Id, unique per interface; flows refer to it as `flex_item_id`.
    pub id: u16,
    /// Bytes after the UDP header (a multiple of 4, at most 28).
    pub offset: u32,
    /// UDP destination port that activates the item.
    pub udp_dst_port: u16,
    /// Where it is defined.
    pub location: Location,
}

/// `tx.flows[]`: packets the interface sends that match get VLAN tags or tunnel headers.
#[derive(Clone, Debug, PartialEq)]
pub struct TxFlowConfig {
    /// Name.
    pub name: String,
    /// Id.
    pub id: u32,
    /// Transforms, in order.
    pub transforms: Vec<TxTransform>,
    /// Match fields.
    pub matches: FlowMatch,
    /// Where it is defined.
    pub location: Location,
}

/// A header transform of a TX flow.
#[derive(Clone, Debug, PartialEq)]
pub enum TxTransform {
    /// Push a VLAN tag.
    VlanPush {
        /// VLAN id 0..4095.
        vlan_id: u16,
        /// Priority 0..7.
        pcp: u8,
        /// Drop eligible 0..1.
        dei: u8,
        /// Tag EtherType (default 0x8100).
        ethertype: u16,
    },
    /// Add tunnel outer headers.
    TunnelEncap(TunnelConfig),
}

impl TxTransform {
    /// Bytes the transform adds to a frame: a VLAN tag 4; tunnel headers (outer Ethernet,
    /// IPv4 without options, then UDP + VXLAN, GRE, or GRE with the NVGRE key) 50, 38, 42.
    pub fn added_bytes(&self) -> usize {
        match self {
            TxTransform::VlanPush { .. } => 4,
            TxTransform::TunnelEncap(tc) => {
                14 + 20
                    + match tc.kind {
                        TunnelKind::Vxlan => 16,
                        TunnelKind::Gre => 4,
                        TunnelKind::Nvgre => 8,
                    }
            }
        }
    }
}

impl TxFlowConfig {
    /// Bytes the flow's transforms add to a frame it matches.
    pub fn added_bytes(&self) -> usize {
        self.transforms.iter().map(TxTransform::added_bytes).sum()
    }
}

/// A UDP port or inclusive port range (`4096` or `"4096-4100"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (equal to `first` for one port).
    pub last: u16,
}

impl PortRange {
    /// Number of ports in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Always false: a range holds at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// True when `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        self.first <= port && port <= self.last
    }

    /// True when every port of `other` is in this range.
    pub fn covers(&self, other: &PortRange) -> bool {
        self.first <= other.first && other.last <= self.last
    }
}

/// An IPv4 prefix (`10.0.0.1` or `10.0.0.0/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Prefix {
    /// Address.
    pub addr: Ipv4Addr,
    /// Prefix length 0..=32.
    pub len: u8,
}

impl std::fmt::Display for Ipv4Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Ipv4Prefix {
    /// The netmask as an integer.
    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.len))
        }
    }

    /// The network address (host bits cleared).
    pub fn network(&self) -> u32 {
        u32::from(self.addr) & self.mask()
    }

    /// True when `addr` lies inside the prefix.
    pub fn contains(&self, addr: u32) -> bool {
        addr & self.mask() == self.network()
    }

    /// True when every address of `other` lies inside this prefix.
    pub fn covers(&self, other: &Ipv4Prefix) -> bool {
        self.len <= other.len && self.contains(other.network())
    }
}

/// `rx.flows[]`.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    /// Name.
    pub name: String,
    /// Flow id delivered with each matching packet.
    pub id: u32,
    /// Target queues (one, or several for RSS).
    pub queue_ids: Vec<u16>,
    /// Match fields (all given fields must match).
    pub matches: FlowMatch,
    /// Header transforms before delivery (hardware steering only).
    pub transforms: Vec<FlowTransform>,
    /// Where it is defined.
    pub location: Location,
}

/// A header transform of an RX flow.
#[derive(Clone, Debug, PartialEq)]
pub enum FlowTransform {
    /// Remove the outer VLAN tag.
    VlanPop,
    /// Remove a tunnel's outer headers.
    TunnelDecap(TunnelConfig),
}

/// Tunnel kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunnelKind {
    /// VXLAN (UDP, default port 4789).
    Vxlan,
    /// GRE.
    Gre,
    /// NVGRE.
    Nvgre,
}

/// Outer headers of a tunnel.
#[derive(Clone, Debug, PartialEq)]
pub struct TunnelConfig {
    /// Kind.
    pub kind: TunnelKind,
    /// Outer Ethernet source.
    pub outer_eth_src: Option<[u8; 6]>,
    /// Outer Ethernet destination.
    pub outer_eth_dst: Option<[u8; 6]>,
    /// Outer IPv4 source.
    pub outer_ipv4_src: Option<Ipv4Addr>,
    /// Outer IPv4 destination.
    pub outer_ipv4_dst: Option<Ipv4Addr>,
    /// Outer TTL.
    pub outer_ipv4_ttl: u8,
    /// Outer TOS.
    pub outer_ipv4_tos: u8,
    /// VXLAN network id (24 bits).
    pub vni: u32,
    /// VXLAN outer UDP source port (0: any).
    pub outer_udp_src: u16,
    /// VXLAN outer UDP destination port.
    pub outer_udp_dst: u16,
    /// GRE protocol.
    pub gre_protocol: u16,
    /// NVGRE tenant network id (24 bits).
    pub tni: u32,
    /// NVGRE flow id.
    pub nvgre_flow_id: u8,
}

/// The header family a flow matches on; one family per interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchClass {
    /// Ethernet / IPv4 / UDP fields (or no fields: everything).
    Ipv4Udp,
    /// A flex item's 32-bit word.
    FlexItem,
    /// eCPRI over Ethernet.
    Ecpri,
}

impl MatchClass {
    /// Name for messages.
    pub fn name(self) -> &'static str {
        match self {
            MatchClass::Ipv4Udp => "IPv4/UDP",
            MatchClass::FlexItem => "flex item",
            MatchClass::Ecpri => "eCPRI",
        }
    }
}

/// `rx.flows[].match`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowMatch {
    /// UDP source port or range.
    pub udp_src: Option<PortRange>,
    /// UDP destination port or range.
    pub udp_dst: Option<PortRange>,
    /// IPv4 total length.
    pub ipv4_len: Option<u16>,
    /// IPv4 source.
    pub ipv4_src: Option<Ipv4Prefix>,
    /// IPv4 destination.
    pub ipv4_dst: Option<Ipv4Prefix>,
    /// VLAN id of the outer tag.
    pub vlan_id: Option<u16>,
    /// `match.ethernet`: MAC addresses and EtherType.
    pub ethernet: Option<EthernetMatch>,
    /// eCPRI fields (present: the flow matches eCPRI frames).
    pub ecpri: Option<EcpriMatch>,
    /// Flex item word.
    pub flex: Option<FlexMatch>,
}

impl FlowMatch {
    /// The header family of this match.
    pub fn class(&self) -> MatchClass {
        if self.ecpri.is_some() {
            MatchClass::Ecpri
        } else if self.flex.is_some() {
            MatchClass::FlexItem
        } else {
            MatchClass::Ipv4Udp
        }
    }

    /// True when every packet this match accepts is also accepted by `self` (so a later
    /// rule with match `other` can never fire after a rule with `self`).
    pub fn covers(&self, other: &FlowMatch) -> bool {
        fn opt<T>(a: &Option<T>, b: &Option<T>, f: impl Fn(&T, &T) -> bool) -> bool {
            match (a, b) {
                (None, _) => true,
                (Some(x), Some(y)) => f(x, y),
                (Some(_), None) => false,
            }
        }
        let flex = match (&self.flex, &other.flex) {
            (None, _) => true,
            (Some(a), Some(b)) => {
                a.item_id == b.item_id && a.mask & !b.mask == 0 && (a.value ^ b.value) & a.mask == 0
            }
            (Some(_), None) => false,
        };
        let ecpri = match (&self.ecpri, &other.ecpri) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                opt(&a.msg_type, &b.msg_type, |x, y| x == y) && opt(&a.id, &b.id, |x, y| x == y)
            }
            _ => false,
        };
        // A rule with UDP fields accepts only UDP; one with IPv4 fields only IPv4.
        let needs_udp = |m: &FlowMatch| m.udp_src.is_some() || m.udp_dst.is_some();
        self.class() == other.class()
            && (!needs_udp(self) || needs_udp(other))
            && (!self.has_ip_fields() || other.has_ip_fields())
            && opt(&self.udp_src, &other.udp_src, PortRange::covers)
            && opt(&self.udp_dst, &other.udp_dst, PortRange::covers)
            && opt(&self.ipv4_len, &other.ipv4_len, |a, b| a == b)
            && opt(&self.ipv4_src, &other.ipv4_src, Ipv4Prefix::covers)
            && opt(&self.ipv4_dst, &other.ipv4_dst, Ipv4Prefix::covers)
            && opt(&self.vlan_id, &other.vlan_id, |a, b| a == b)
            && opt(&self.ethernet, &other.ethernet, EthernetMatch::covers)
            && ecpri
            && flex
    }

    /// True when any UDP or IPv4 field is set.
    pub fn has_ip_fields(&self) -> bool {
        self.udp_src.is_some()
            || self.udp_dst.is_some()
            || self.ipv4_len.is_some()
            || self.ipv4_src.is_some()
            || self.ipv4_dst.is_some()
    }
}

/// `match.ethernet`: the Ethernet header's addresses and the EtherType of what follows
/// it (after the VLAN tag when the flow also matches `vlan_id`, as rte_flow's VLAN item
/// reads it; else the one right after the addresses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthernetMatch {
    /// Destination MAC (a group address matches that multicast group).
    pub dst: Option<[u8; 6]>,
    /// Source MAC.
    pub src: Option<[u8; 6]>,
    /// EtherType.
    pub ethertype: Option<u16>,
}

impl EthernetMatch {
    /// True when every frame `other` accepts is also accepted by `self`.
    pub fn covers(&self, other: &EthernetMatch) -> bool {
        fn field<T: PartialEq>(a: Option<T>, b: Option<T>) -> bool {
            a.is_none() || a == b
        }
        field(self.dst, other.dst)
            && field(self.src, other.src)
            && field(self.ethertype, other.ethertype)
    }
}

/// `match.ecpri`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EcpriMatch {
    /// Message type.
    pub msg_type: Option<u8>,
    /// PC_ID or RTC_ID (needs `msg_type`).
    pub id: Option<u16>,
}

/// `match.flex_item_id` / `val` / `mask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlexMatch {
    /// Flex item id.
    pub item_id: u16,
    /// Value compared under the mask.
    pub value: u32,
    /// Mask.
    pub mask: u32,
}
