//! `rx.flows[]` and `tx.flows[]`: match fields, actions, tunnels and header transforms.

use super::*;

/// Parses one `rx.flows[]` entry (also a dynamic flow's YAML text: [`crate::config::flow_from_str`]).
pub(in crate::config) fn flow(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlowConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 0xFF_FFFF));
    let single = m.optional(d, "action", queue_action);
    let mut transforms = Vec::new();
    let ordered = m.optional(d, "actions", |d, n, p| {
        let items = r::list(d, n, p)?;
        if items.len() > 7 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("at most 7 actions per flow, got {}", items.len()),
            );
        }
        let mut target = None;
        for (i, a) in items.iter().enumerate() {
            let ap = index(p, i);
            let kind = MapReader::open(&mut Diagnostics::default(), a, &ap)
                .and_then(|mut t| t.get("type").and_then(|n| n.scalar_text()));
            match kind.as_deref() {
                Some("queue") => {
                    if i + 1 != items.len() {
                        d.error(
                            Kind::Invalid,
                            &ap,
                            Some(a.location),
                            "the queue action must be the last action",
                        );
                    }
                    target = queue_action(d, a, &ap);
                }
                Some("vlan_pop") => {
                    let mut t = MapReader::open(d, a, &ap)?;
                    t.get("type");
                    t.finish(d);
                    transforms.push(FlowTransform::VlanPop);
                }
                Some("tunnel_decap") => {
                    if let Some(tc) = tunnel_action(d, a, &ap) {
                        transforms.push(FlowTransform::TunnelDecap(tc));
                    }
                }
                Some(other @ ("vlan_push" | "tunnel_encap")) => d.error(
                    Kind::Invalid,
                    &ap,
                    Some(a.location),
                    format!("`{other}` is a TX action; RX flows may only pop or decap"),
                ),
                _ => {
                    let mut t = MapReader::open(d, a, &ap)?;
                    t.required(d, "type", |d, n, p| {
                        r::choice(d, n, p, &["queue", "vlan_pop", "tunnel_decap"])
                    });
                }
            }
        }
        if target.is_none() && !items.is_empty() {
            d.error(
                Kind::Invalid,
                p,
                Some(n.location),
                "RX flow actions must end with a `queue` action",
            );
        }
        target
    });
    if m.has("action") && m.has("actions") {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`action` and `actions` are mutually exclusive",
        );
    }
    let matches = m.optional(d, "match", flow_match).unwrap_or_default();
    m.finish(d);
    let queue_ids = match single.or(ordered) {
        Some(q) => q,
        None => {
            if !d.has_errors() {
                d.error(
                    Kind::Missing,
                    path,
                    Some(node.location),
                    "a flow needs a queue action (`action: {type: queue, id: N}`)",
                );
            }
            return None;
        }
    };
    Some(FlowConfig {
        name: name?,
        id: id? as u32,
        queue_ids,
        matches,
        transforms,
        location: node.location,
    })
}

pub(super) fn tx_flow(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxFlowConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 0xFF_FFFF));
    let transforms = m
        .required(d, "actions", |d, n, p| {
            let items = r::list(d, n, p)?;
            let mut out = Vec::new();
            for (i, a) in items.iter().enumerate() {
                let ap = index(p, i);
                let kind = MapReader::open(&mut Diagnostics::default(), a, &ap)
                    .and_then(|mut t| t.get("type").and_then(|n| n.scalar_text()));
                match kind.as_deref() {
                    Some("vlan_push") => out.extend(vlan_push(d, a, &ap)),
                    Some("tunnel_encap") => {
                        out.extend(tunnel_action(d, a, &ap).map(TxTransform::TunnelEncap))
                    }
                    Some(other @ ("queue" | "vlan_pop" | "tunnel_decap")) => d.error(
                        Kind::Invalid,
                        &ap,
                        Some(a.location),
                        format!("`{other}` is an RX action; TX flows may only push or encap"),
                    ),
                    _ => {
                        let mut t = MapReader::open(d, a, &ap)?;
                        t.required(d, "type", |d, n, p| {
                            r::choice(d, n, p, &["vlan_push", "tunnel_encap"])
                        });
                    }
                }
            }
            if out.is_empty() && !d.has_errors() {
                d.error(
                    Kind::Missing,
                    p,
                    Some(n.location),
                    "a TX flow needs at least one vlan_push or tunnel_encap action",
                );
            }
            Some(out)
        })
        .unwrap_or_default();
    let matches = m.optional(d, "match", flow_match).unwrap_or_default();
    m.finish(d);
    Some(TxFlowConfig {
        name: name?,
        id: id? as u32,
        transforms,
        matches,
        location: node.location,
    })
}

pub(super) fn vlan_push(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TxTransform> {
    // The reference accepts the tag fields beside `type` or nested under `vlan:`.
    let mut outer = MapReader::open(d, node, path)?;
    outer.get("type");
    let fields = |d: &mut Diagnostics, m: &mut MapReader| {
        let vlan_id = m.required(d, "vlan_id", |d, n, p| r::uint_in(d, n, p, 0, 4095));
        let pcp = m
            .optional(d, "pcp", |d, n, p| r::uint_in(d, n, p, 0, 7))
            .unwrap_or(0);
        let dei = m
            .optional(d, "dei", |d, n, p| r::uint_in(d, n, p, 0, 1))
            .unwrap_or(0);
        let ethertype = m
            .optional(d, "ethertype", |d, n, p| r::uint_in(d, n, p, 1, 65535))
            .unwrap_or(0x8100);
        Some(TxTransform::VlanPush {
            vlan_id: vlan_id? as u16,
            pcp: pcp as u8,
            dei: dei as u8,
            ethertype: ethertype as u16,
        })
    };
    let t = if outer.has("vlan") {
        outer.required(d, "vlan", |d, n, p| {
            let mut inner = MapReader::open(d, n, p)?;
            let t = fields(d, &mut inner);
            inner.finish(d);
            t
        })
    } else {
        fields(d, &mut outer)
    };
    outer.finish(d);
    t
}

pub(super) fn tunnel_action(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TunnelConfig> {
    let mut m = MapReader::open(d, node, path)?;
    m.get("type");
    let t = m.required(d, "tunnel", tunnel)?;
    m.finish(d);
    Some(t)
}

pub(super) fn tunnel(d: &mut Diagnostics, node: &Node, path: &str) -> Option<TunnelConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let kind = m.required(d, "type", |d, n, p| {
        r::choice(d, n, p, &["vxlan", "gre", "nvgre"])
    })?;
    let kind = match kind {
        "vxlan" => TunnelKind::Vxlan,
        "gre" => TunnelKind::Gre,
        _ => TunnelKind::Nvgre,
    };
    let outer_eth_src = m.optional(d, "outer_eth_src", mac);
    let outer_eth_dst = m.optional(d, "outer_eth_dst", mac);
    let outer_ipv4_src = m.optional(d, "outer_ipv4_src", ipv4_addr);
    let outer_ipv4_dst = m.optional(d, "outer_ipv4_dst", ipv4_addr);
    let u8_key =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 255).map(|v| v as u8);
    let outer_ipv4_ttl = m.optional(d, "outer_ipv4_ttl", u8_key).unwrap_or(64);
    let outer_ipv4_tos = m.optional(d, "outer_ipv4_tos", u8_key).unwrap_or(0);
    let u24 = |d: &mut Diagnostics, n: &Node, p: &str| {
        r::uint_in(d, n, p, 0, 0xFF_FFFF).map(|v| v as u32)
    };
    let port =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 65535).map(|v| v as u16);
    let (mut vni, mut outer_udp_src, mut outer_udp_dst, mut gre_protocol, mut tni, mut flow_id) =
        (0, 0, 4789, 0x0800, 0, 0);
    match kind {
        TunnelKind::Vxlan => {
            vni = m.optional(d, "vni", u24).unwrap_or(0);
            outer_udp_src = m.optional(d, "outer_udp_src", port).unwrap_or(0);
            outer_udp_dst = m.optional(d, "outer_udp_dst", port).unwrap_or(4789);
            if outer_udp_dst == 0 {
                d.error(
                    Kind::Range,
                    &r::join(path, "outer_udp_dst"),
                    Some(m.location_of("outer_udp_dst")),
                    "the VXLAN destination port must not be 0",
                );
            }
        }
        TunnelKind::Gre => {
            gre_protocol = m.optional(d, "gre_protocol", port).unwrap_or(0x0800);
            if gre_protocol == 0 {
                d.error(
                    Kind::Range,
                    &r::join(path, "gre_protocol"),
                    Some(m.location_of("gre_protocol")),
                    "the GRE protocol must not be 0",
                );
            }
        }
        TunnelKind::Nvgre => {
            tni = m.optional(d, "tni", u24).unwrap_or(0);
            flow_id = m.optional(d, "flow_id", u8_key).unwrap_or(0);
        }
    }
    m.finish(d);
    Some(TunnelConfig {
        kind,
        outer_eth_src,
        outer_eth_dst,
        outer_ipv4_src,
        outer_ipv4_dst,
        outer_ipv4_ttl,
        outer_ipv4_tos,
        vni,
        outer_udp_src,
        outer_udp_dst,
        gre_protocol,
        tni,
        nvgre_flow_id: flow_id,
    })
}

pub(super) fn ipv4_addr(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Ipv4Addr> {
    let p = ipv4_prefix(d, node, path)?;
    if p.len != 32 {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "an IPv4 address is needed here, not a prefix",
        );
        return None;
    }
    Some(p.addr)
}

pub(super) fn flex_item(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlexItemConfig> {
    let mut m = MapReader::open(d, node, path)?;
    let name = m.required(d, "name", r::name);
    let id = m.required(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 65535));
    let offset = m.required(d, "offset", |d, n, p| {
        let v = r::uint_in(d, n, p, 0, 28)?;
        if v % 4 != 0 {
            d.error(
                Kind::Range,
                p,
                Some(n.location),
                format!("offset must be a multiple of 4 (0..28), got {v}"),
            );
            return None;
        }
        Some(v as u32)
    });
    let udp_dst_port = m.required(d, "udp_dst_port", |d, n, p| r::uint_in(d, n, p, 1, 65535));
    m.finish(d);
    Some(FlexItemConfig {
        name: name?,
        id: id? as u16,
        offset: offset?,
        udp_dst_port: udp_dst_port? as u16,
        location: node.location,
    })
}

pub(super) fn queue_action(d: &mut Diagnostics, node: &Node, path: &str) -> Option<Vec<u16>> {
    let mut m = MapReader::open(d, node, path)?;
    m.required(d, "type", |d, n, p| r::choice(d, n, p, &["queue"]));
    let id = m.optional(d, "id", |d, n, p| r::uint_in(d, n, p, 0, 63));
    let ids = m.optional(d, "ids", |d, n, p| {
        let items = r::list(d, n, p)?;
        Some(
            items
                .iter()
                .enumerate()
                .filter_map(|(i, x)| r::uint_in(d, x, &index(p, i), 0, 63))
                .collect::<Vec<_>>(),
        )
    });
    m.finish(d);
    match (id, ids) {
        (Some(id), None) => Some(vec![id as u16]),
        (None, Some(ids)) if !ids.is_empty() => Some(ids.into_iter().map(|i| i as u16).collect()),
        (Some(_), Some(_)) => {
            d.error(
                Kind::Invalid,
                path,
                Some(node.location),
                "give either `id` or `ids`, not both",
            );
            None
        }
        _ => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "missing required key `id` (or a non-empty `ids` list)",
            );
            None
        }
    }
}

pub(super) fn flow_match(d: &mut Diagnostics, node: &Node, path: &str) -> Option<FlowMatch> {
    let mut m = MapReader::open(d, node, path)?;
    let udp_src = m.optional(d, "udp_src", port_range);
    let udp_dst = m.optional(d, "udp_dst", port_range);
    let ipv4_len = m
        .optional(d, "ipv4_len", |d, n, p| r::uint_in(d, n, p, 20, 65535))
        .map(|v| v as u16);
    let ipv4_src = m.optional(d, "ipv4_src", ipv4_prefix);
    let ipv4_dst = m.optional(d, "ipv4_dst", ipv4_prefix);
    let vlan_id = m
        .optional(d, "vlan_id", |d, n, p| r::uint_in(d, n, p, 0, 4095))
        .map(|v| v as u16);
    let ethernet = m.optional(d, "ethernet", ethernet_match);
    let ecpri = m.optional(d, "ecpri", ecpri_match);
    let flex_id = m.optional(d, "flex_item_id", |d, n, p| r::uint_in(d, n, p, 0, 65535));
    let u32_key = |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, u32::MAX as u64);
    let val = m.optional(d, "val", u32_key);
    let mask = m.optional(d, "mask", u32_key);
    let flex = match (flex_id, val, mask) {
        (Some(id), v, mk) => Some(FlexMatch {
            item_id: id as u16,
            value: v.unwrap_or(0) as u32,
            mask: mk.unwrap_or(u32::MAX as u64) as u32,
        }),
        (None, None, None) => None,
        _ => {
            d.error(
                Kind::Missing,
                path,
                Some(node.location),
                "`val` and `mask` need `flex_item_id`",
            );
            None
        }
    };
    let mut fm = FlowMatch {
        udp_src,
        udp_dst,
        ipv4_len,
        ipv4_src,
        ipv4_dst,
        vlan_id,
        ethernet,
        ecpri,
        flex,
    };
    if fm.flex.is_some() && (fm.has_ip_fields() || fm.ecpri.is_some()) {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`flex_item_id` cannot be combined with UDP/IPv4 or eCPRI fields (one match class per flow)",
        );
        fm.flex = None;
    }
    if fm.ecpri.is_some() && fm.has_ip_fields() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "`ecpri` cannot be combined with UDP/IPv4 fields (eCPRI runs directly over Ethernet)",
        );
    }
    // The EtherTypes of IPv4 and of eCPRI.
    if let Some(et) = fm.ethernet.and_then(|e| e.ethertype) {
        let implied = if fm.ecpri.is_some() {
            Some((0xAEFE, "`ecpri`"))
        } else if fm.has_ip_fields() {
            Some((0x0800, "IPv4/UDP fields"))
        } else {
            None
        };
        if let Some((want, what)) = implied.filter(|(want, _)| *want != et) {
            d.error(
                Kind::Invalid,
                &format!("{path}.ethernet.ethertype"),
                Some(node.location),
                format!(
                    "ethertype {et:#06x} contradicts {what}, which match EtherType {want:#06x} only"
                ),
            );
        }
    }
    m.finish(d);
    Some(fm)
}

/// `match.ethernet: {dst, src, ethertype}` (at least one).
pub(super) fn ethernet_match(
    d: &mut Diagnostics,
    node: &Node,
    path: &str,
) -> Option<EthernetMatch> {
    let mut m = MapReader::open(d, node, path)?;
    let given = ["dst", "src", "ethertype"].iter().any(|k| m.has(k));
    let dst = m.optional(d, "dst", super::mac);
    let src = m.optional(d, "src", super::mac);
    let ethertype = m
        .optional(d, "ethertype", |d, n, p| {
            r::uint_in(d, n, p, 0x0600, 0xffff)
        })
        .map(|v| v as u16);
    m.finish(d);
    let e = EthernetMatch {
        dst,
        src,
        ethertype,
    };
    if !given {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "`ethernet` needs at least one of `dst`, `src`, `ethertype`",
        );
        return None;
    }
    Some(e)
}

pub(super) fn ecpri_match(d: &mut Diagnostics, node: &Node, path: &str) -> Option<EcpriMatch> {
    if matches!(node.value, Value::Null) {
        return Some(EcpriMatch::default());
    }
    let mut m = MapReader::open(d, node, path)?;
    let msg_type = m
        .optional(d, "msg_type", |d, n, p| r::uint_in(d, n, p, 0, 255))
        .map(|v| v as u8);
    let id16 =
        |d: &mut Diagnostics, n: &Node, p: &str| r::uint_in(d, n, p, 0, 65535).map(|v| v as u16);
    let pc_id = m.optional(d, "pc_id", id16);
    let rtc_id = m.optional(d, "rtc_id", id16);
    if pc_id.is_some() && rtc_id.is_some() {
        d.error(
            Kind::Invalid,
            path,
            Some(node.location),
            "give either `pc_id` or `rtc_id`, not both",
        );
    }
    let id = pc_id.or(rtc_id);
    if id.is_some() && msg_type.is_none() {
        d.error(
            Kind::Missing,
            path,
            Some(node.location),
            "an eCPRI `pc_id`/`rtc_id` needs `msg_type`",
        );
    }
    m.finish(d);
    Some(EcpriMatch { msg_type, id })
}
