//! The compiled classifier against hand-written cases and, by property testing, against a
//! plain matcher that reads the rule configuration directly.

use super::*;
use crate::config::{
    EcpriMatch, FlexItemConfig, FlexMatch, FlowConfig, FlowMatch, Ipv4Prefix, PortRange,
    QueueConfig, RxConfig,
};
use crate::steering::headers::{ETHERTYPE_ECPRI, udp_payload_word};
use proptest::prelude::*;
use std::net::Ipv4Addr;

fn queue(id: u16) -> QueueConfig {
    QueueConfig::new(&format!("q{id}"), id, 0, 32, &["m"])
}

fn rx(queues: &[u16], flows: Vec<FlowConfig>, isolation: bool) -> RxConfig {
    RxConfig {
        flow_isolation: isolation,
        timestamps: false,
        descriptors: None,
        queues: queues.iter().map(|&q| queue(q)).collect(),
        flows,
        flex_items: vec![FlexItemConfig {
            name: "word".into(),
            id: 7,
            offset: 4,
            udp_dst_port: 9000,
            location: Default::default(),
        }],
        exception_queue: None,
        reorder: Vec::new(),
        dynamic_flow_capacity: 0,
    }
}

fn flow(id: u32, queues: &[u16], m: FlowMatch) -> FlowConfig {
    FlowConfig {
        name: format!("f{id}"),
        id,
        queue_ids: queues.to_vec(),
        matches: m,
        transforms: vec![],
        location: Default::default(),
    }
}

fn prefix(s: &str, len: u8) -> Ipv4Prefix {
    Ipv4Prefix {
        addr: s.parse().unwrap(),
        len,
    }
}

fn ports(first: u16, last: u16) -> PortRange {
    PortRange { first, last }
}

#[derive(Clone, Debug)]
struct Frame {
    vlan: Option<u16>,
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    payload: Vec<u8>,
}

impl Frame {
    fn udp(sport: u16, dport: u16) -> Self {
        Frame {
            vlan: None,
            src: [10, 0, 0, 1],
            dst: [10, 0, 1, 2],
            sport,
            dport,
            payload: vec![0; 16],
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2; 6], [4; 6]);
        let mut out = Vec::new();
        match self.vlan {
            Some(v) => b
                .single_vlan(etherparse::VlanId::try_new(v).unwrap())
                .ipv4(self.src, self.dst, 64)
                .udp(self.sport, self.dport)
                .write(&mut out, &self.payload),
            None => b
                .ipv4(self.src, self.dst, 64)
                .udp(self.sport, self.dport)
                .write(&mut out, &self.payload),
        }
        .unwrap();
        out
    }
}

fn ecpri_frame(msg_type: u8, id: u16) -> Vec<u8> {
    let mut f = vec![0u8; 30];
    f[12..14].copy_from_slice(&ETHERTYPE_ECPRI.to_be_bytes());
    f[14] = 0x10;
    f[15] = msg_type;
    f[18..20].copy_from_slice(&id.to_be_bytes());
    f
}

fn deliver(queue: u16, flow_id: u32) -> Verdict {
    Verdict::Deliver { queue, flow_id }
}

#[test]
fn each_match_field_selects_its_packets() {
    let m = |f: FlowMatch| f;
    let rules = vec![
        flow(
            1,
            &[1],
            m(FlowMatch {
                udp_dst: Some(ports(5000, 5000)),
                ..Default::default()
            }),
        ),
        flow(
            2,
            &[2],
            m(FlowMatch {
                udp_src: Some(ports(100, 199)),
                ..Default::default()
            }),
        ),
        flow(
            3,
            &[3],
            m(FlowMatch {
                ipv4_src: Some(prefix("192.168.0.0", 16)),
                ..Default::default()
            }),
        ),
        flow(
            4,
            &[0],
            m(FlowMatch {
                ipv4_dst: Some(prefix("10.0.1.2", 32)),
                ipv4_len: Some(20 + 8 + 4),
                ..Default::default()
            }),
        ),
        flow(
            5,
            &[1],
            m(FlowMatch {
                vlan_id: Some(42),
                ..Default::default()
            }),
        ),
    ];
    let c = Classifier::compile(&rx(&[0, 1, 2, 3], rules, true), 1);
    assert_eq!(
        c.classify(&Frame::udp(7, 5000).bytes()),
        deliver(1, 1),
        "exact port"
    );
    assert_eq!(
        c.classify(&Frame::udp(150, 80).bytes()),
        deliver(2, 2),
        "inside the range"
    );
    assert_eq!(
        c.classify(&Frame::udp(200, 80).bytes()),
        deliver(3, 0).into_no_flow(),
        "past the range"
    );
    let mut f = Frame::udp(7, 80);
    f.src = [192, 168, 77, 1];
    assert_eq!(c.classify(&f.bytes()), deliver(3, 3), "CIDR source");
    let mut f = Frame::udp(7, 80);
    f.payload = vec![0; 4];
    assert_eq!(
        c.classify(&f.bytes()),
        deliver(0, 4),
        "destination and total length"
    );
    f.payload = vec![0; 5];
    assert_eq!(
        c.classify(&f.bytes()),
        Verdict::NoFlow,
        "other total length"
    );
    let mut f = Frame::udp(7, 80);
    f.vlan = Some(42);
    assert_eq!(c.classify(&f.bytes()), deliver(1, 5), "VLAN id");
    f.vlan = Some(43);
    assert_eq!(c.classify(&f.bytes()), Verdict::NoFlow);
}

impl Verdict {
    /// Test shorthand: an unmatched packet under isolation.
    fn into_no_flow(self) -> Verdict {
        Verdict::NoFlow
    }
}

#[test]
fn first_matching_rule_wins() {
    let rules = vec![
        flow(
            1,
            &[0],
            FlowMatch {
                udp_dst: Some(ports(5000, 5009)),
                ..Default::default()
            },
        ),
        flow(
            2,
            &[1],
            FlowMatch {
                udp_dst: Some(ports(5005, 5005)),
                ..Default::default()
            },
        ),
    ];
    let c = Classifier::compile(&rx(&[0, 1], rules, false), 1);
    assert_eq!(c.classify(&Frame::udp(1, 5005).bytes()), deliver(0, 1));
}

#[test]
fn ecpri_and_flex_items() {
    let ecpri = vec![
        flow(
            1,
            &[1],
            FlowMatch {
                ecpri: Some(EcpriMatch {
                    msg_type: Some(2),
                    id: Some(0x77),
                }),
                ..Default::default()
            },
        ),
        flow(
            2,
            &[2],
            FlowMatch {
                ecpri: Some(EcpriMatch::default()),
                ..Default::default()
            },
        ),
    ];
    let c = Classifier::compile(&rx(&[0, 1, 2], ecpri, true), 1);
    assert_eq!(c.classify(&ecpri_frame(2, 0x77)), deliver(1, 1));
    assert_eq!(
        c.classify(&ecpri_frame(2, 0x78)),
        deliver(2, 2),
        "any eCPRI frame"
    );
    assert_eq!(
        c.classify(&Frame::udp(1, 2).bytes()),
        Verdict::NoFlow,
        "not eCPRI"
    );

    let flex = vec![flow(
        9,
        &[1],
        FlowMatch {
            flex: Some(FlexMatch {
                item_id: 7,
                value: 0xAB00_0000,
                mask: 0xFF00_0000,
            }),
            ..Default::default()
        },
    )];
    let c = Classifier::compile(&rx(&[0, 1], flex, false), 1);
    let mut f = Frame::udp(1, 9000);
    f.payload = vec![0, 0, 0, 0, 0xAB, 1, 2, 3];
    assert_eq!(
        c.classify(&f.bytes()),
        deliver(1, 9),
        "word at offset 4 matches under the mask"
    );
    f.payload[4] = 0xAC;
    assert!(matches!(
        c.classify(&f.bytes()),
        Verdict::Deliver { flow_id: 0, .. }
    ));
    let mut other_port = Frame::udp(1, 9001);
    other_port.payload = vec![0, 0, 0, 0, 0xAB, 1, 2, 3];
    assert!(
        matches!(
            c.classify(&other_port.bytes()),
            Verdict::Deliver { flow_id: 0, .. }
        ),
        "item inactive on other ports"
    );
}

#[test]
fn unmatched_packets_follow_isolation() {
    let mut cfg = rx(&[0, 1, 2], vec![], true);
    assert_eq!(
        Classifier::compile(&cfg, 1).classify(&Frame::udp(1, 2).bytes()),
        Verdict::NoFlow
    );
    cfg.exception_queue = Some(2);
    assert_eq!(
        Classifier::compile(&cfg, 1).classify(&Frame::udp(1, 2).bytes()),
        deliver(2, 0)
    );
    let single = rx(&[3], vec![], false);
    let c = Classifier::compile(&single, 1);
    assert_eq!(c.trivial_queue(), Some(3));
    assert_eq!(
        c.classify(&[0u8; 3]),
        deliver(3, 0),
        "no rules, one queue: headers are not read"
    );
}

#[test]
fn rss_keeps_a_tuple_on_one_queue_and_uses_every_queue() {
    let rules = vec![flow(1, &[4, 5, 6], FlowMatch::default())];
    let c = Classifier::compile(&rx(&[4, 5, 6], rules, false), 1);
    let mut seen = std::collections::BTreeSet::new();
    for sport in 0..200 {
        let f = Frame::udp(sport, 5000).bytes();
        let v = c.classify(&f);
        assert_eq!(v, c.classify(&f), "same tuple, same queue");
        let Verdict::Deliver { queue, flow_id } = v else {
            panic!("{v:?}")
        };
        assert_eq!(flow_id, 1);
        seen.insert(queue);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![4, 5, 6]);
}

#[test]
fn malformed_frames_are_counted_not_classified() {
    let c = Classifier::compile(&rx(&[0, 1], vec![], false), 1);
    let good = Frame::udp(1, 2).bytes();
    assert_eq!(
        c.classify(&good[..20]),
        Verdict::Malformed(Malformed::ShortIpv4)
    );
    assert_eq!(
        c.classify(&[]),
        Verdict::Malformed(Malformed::ShortEthernet)
    );
}

// ---- property test: compiled classifier vs. a plain reading of the configuration ----

fn ref_port(r: &Option<PortRange>, p: u16) -> bool {
    r.is_none_or(|r| (r.first..=r.last).contains(&p))
}

fn ref_prefix(p: &Option<Ipv4Prefix>, a: u32) -> bool {
    p.is_none_or(|p| p.len == 0 || (a ^ u32::from(p.addr)) >> (32 - u32::from(p.len)) == 0)
}

fn ref_matches(f: &FlowConfig, cfg: &RxConfig, h: &Headers, frame: &[u8]) -> bool {
    let m = &f.matches;
    if m.vlan_id.is_some() && h.vlan != m.vlan_id {
        return false;
    }
    if m.has_ip_fields() {
        let Some(ip) = h.ipv4 else { return false };
        if !ref_prefix(&m.ipv4_src, ip.src)
            || !ref_prefix(&m.ipv4_dst, ip.dst)
            || m.ipv4_len.is_some_and(|l| l != ip.total_len)
        {
            return false;
        }
        if m.udp_src.is_some() || m.udp_dst.is_some() {
            let Some(u) = h.udp else { return false };
            if !ref_port(&m.udp_src, u.src) || !ref_port(&m.udp_dst, u.dst) {
                return false;
            }
        }
    }
    if let Some(e) = m.ecpri {
        let Some(got) = h.ecpri else { return false };
        if e.msg_type.is_some_and(|t| t != got.msg_type) || e.id.is_some_and(|i| got.id != Some(i))
        {
            return false;
        }
    }
    if let Some(fx) = m.flex {
        let item = cfg.flex_items.iter().find(|x| x.id == fx.item_id).unwrap();
        let Some(u) = h.udp else { return false };
        if u.dst != item.udp_dst_port {
            return false;
        }
        match udp_payload_word(frame, &u, item.offset) {
            Some(w) if (w ^ fx.value) & fx.mask == 0 => {}
            _ => return false,
        }
    }
    true
}

fn ref_rss(queues: &[u16], h: &Headers) -> u16 {
    let mut input = Vec::new();
    match (h.ipv4, h.udp) {
        (Some(ip), u) => {
            input.extend_from_slice(&ip.src.to_be_bytes());
            input.extend_from_slice(&ip.dst.to_be_bytes());
            if let Some(u) = u {
                input.extend_from_slice(&u.src.to_be_bytes());
                input.extend_from_slice(&u.dst.to_be_bytes());
            }
        }
        _ => return queues[0],
    }
    let hash = rss::toeplitz_reference(&rss::STANDARD_KEY, &input);
    queues[(hash % 128) as usize % queues.len()]
}

fn reference(cfg: &RxConfig, frame: &[u8]) -> Verdict {
    let mut all: Vec<u16> = cfg.queues.iter().map(|q| q.id).collect();
    all.sort_unstable();
    if cfg.flows.is_empty() && !cfg.flow_isolation && all.len() == 1 {
        return deliver(all[0], 0);
    }
    let h = match headers::parse(frame) {
        Ok(h) => h,
        Err(m) => return Verdict::Malformed(m),
    };
    let target = |ids: &[u16], flow_id| match ids {
        [one] => deliver(*one, flow_id),
        many => deliver(ref_rss(many, &h), flow_id),
    };
    for f in &cfg.flows {
        if ref_matches(f, cfg, &h, frame) {
            return target(&f.queue_ids, f.id);
        }
    }
    match (cfg.flow_isolation, cfg.exception_queue) {
        (true, Some(q)) => deliver(q, 0),
        (true, None) => Verdict::NoFlow,
        (false, _) => target(&all, 0),
    }
}

fn arb_range() -> impl Strategy<Value = Option<PortRange>> {
    prop_oneof![
        Just(None),
        (4096u16..4104).prop_map(|p| Some(ports(p, p))),
        (4096u16..4104, 0u16..6).prop_map(|(a, n)| Some(ports(a, a + n))),
        // Wider than the index lists under each port: scanned beside it.
        (3800u16..4104, 250u16..400).prop_map(|(a, n)| Some(ports(a, a + n))),
    ]
}

fn arb_prefix() -> impl Strategy<Value = Option<Ipv4Prefix>> {
    prop_oneof![
        Just(None),
        (
            0u8..4,
            prop_oneof![Just(0u8), Just(8), Just(24), Just(30), Just(32)]
        )
            .prop_map(|(host, len)| Some(Ipv4Prefix {
                addr: Ipv4Addr::new(10, 0, 0, host),
                len
            })),
    ]
}

fn arb_match(class: u8) -> BoxedStrategy<FlowMatch> {
    let vlan = prop_oneof![Just(None), (5u16..7).prop_map(Some)];
    match class {
        0 => (
            arb_range(),
            arb_range(),
            arb_prefix(),
            arb_prefix(),
            prop_oneof![Just(None), (40u16..44).prop_map(Some)],
            vlan,
        )
            .prop_map(
                |(udp_src, udp_dst, ipv4_src, ipv4_dst, ipv4_len, vlan_id)| FlowMatch {
                    udp_src,
                    udp_dst,
                    ipv4_src,
                    ipv4_dst,
                    ipv4_len,
                    vlan_id,
                    ..Default::default()
                },
            )
            .boxed(),
        1 => (
            any::<u32>(),
            prop_oneof![Just(0u32), Just(0xFF), Just(0xFF00_0000), Just(u32::MAX)],
        )
            .prop_map(|(v, mask)| FlowMatch {
                flex: Some(FlexMatch {
                    item_id: 7,
                    value: v & 0x0300_0003,
                    mask,
                }),
                ..Default::default()
            })
            .boxed(),
        _ => (
            prop_oneof![Just(None), (0u8..3).prop_map(Some)],
            prop_oneof![Just(None), (0u16..3).prop_map(Some)],
        )
            .prop_map(|(msg_type, id)| FlowMatch {
                ecpri: Some(EcpriMatch {
                    msg_type,
                    id: if msg_type.is_some() { id } else { None },
                }),
                ..Default::default()
            })
            .boxed(),
    }
}

fn arb_config() -> impl Strategy<Value = RxConfig> {
    (0u8..3, 1usize..5, any::<bool>(), any::<bool>()).prop_flat_map(|(class, nq, iso, exc)| {
        let rule = (
            arb_match(class),
            proptest::sample::subsequence((0..nq as u16).collect::<Vec<_>>(), 1..=nq),
        );
        // Small sets (plain scan, columns) and large ones (the destination-port index).
        prop_oneof![
            3 => proptest::collection::vec(rule.clone(), 0..7),
            1 => proptest::collection::vec(rule, 60..140),
        ]
        .prop_map(move |rules| {
            let flows = rules
                .into_iter()
                .enumerate()
                .map(|(i, (m, mut qs))| {
                    if class == 2 {
                        qs.truncate(1);
                    }
                    flow(i as u32 + 1, &qs, m)
                })
                .collect();
            let mut c = rx(&(0..nq as u16).collect::<Vec<_>>(), flows, iso);
            c.exception_queue = exc.then_some(0);
            c
        })
    })
}

fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
    let udp = (
        prop_oneof![Just(None), (5u16..7).prop_map(Some)],
        0u8..4,
        0u8..4,
        4094u16..4106,
        prop_oneof![4094u16..4106, Just(9000u16)],
        proptest::collection::vec(prop_oneof![Just(0u8), Just(3), any::<u8>()], 0..24),
    )
        .prop_map(|(vlan, s, d, sport, dport, payload)| {
            Frame {
                vlan,
                src: [10, 0, 0, s],
                dst: [10, 0, 0, d],
                sport,
                dport,
                payload,
            }
            .bytes()
        });
    let ecpri = (0u8..3, 0u16..3, 14usize..30).prop_map(|(t, id, len)| {
        let mut f = ecpri_frame(t, id);
        f.truncate(len);
        f
    });
    let base =
        prop_oneof![4 => udp, 1 => ecpri, 1 => proptest::collection::vec(any::<u8>(), 0..80)];
    // Damage: none, truncate, or overwrite one byte.
    (base, 0u8..3, any::<usize>(), any::<u8>()).prop_map(|(mut f, how, at, v)| {
        if !f.is_empty() {
            match how {
                1 => f.truncate(at % f.len()),
                2 => {
                    let i = at % f.len();
                    f[i] = v;
                }
                _ => {}
            }
        }
        f
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Rules changed at run time (removing some flows, adding others back at the end) give
    /// the same verdicts as the plain matcher on the resulting rule list.
    #[test]
    fn rule_changes_keep_agreeing_with_the_plain_matcher(
        cfg in arb_config(),
        remove in proptest::collection::vec(any::<proptest::sample::Index>(), 0..6),
        frames in proptest::collection::vec(arb_frame(), 1..12),
    ) {
        let s = crate::steering::InterfaceSteering::new(0, "i", &cfg, true);
        let mut readded = Vec::new();
        for r in &remove {
            let flows = s.flows();
            if flows.is_empty() {
                break;
            }
            let f = flows[r.index(flows.len())].clone();
            // Static flows cannot be removed: take them out by re-adding their match at the
            // end under a new name and id instead, and remove dynamic ones.
            match s.remove_flow(f.id) {
                Ok(()) => {}
                Err(_) => {
                    let mut again = f.clone();
                    again.name = format!("again{}", readded.len());
                    again.id = 0;
                    if s.add_flow(again).is_ok() {
                        readded.push(f.id);
                    }
                }
            }
        }
        let mut now = cfg.clone();
        now.flows = s.flows();
        let c = s.rules();
        for f in &frames {
            prop_assert_eq!(c.classify(f), reference(&now, f), "frame {:02x?}", f);
        }
    }

    /// The verdict memo gives what classifying every frame gives: each frame is followed
    /// by copies with one byte changed (in a field the rules read or not), so both the
    /// memo's hits and its misses are exercised.
    #[test]
    fn the_verdict_memo_agrees_with_classifying_every_frame(
        cfg in arb_config(),
        frames in proptest::collection::vec(arb_frame(), 1..8),
        changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
    ) {
        let c = Classifier::compile(&cfg, 1);
        let mut memo = crate::steering::VerdictMemo::default();
        for f in &frames {
            let mut sequence = vec![f.clone(), f.clone()];
            for &(at, v) in &changes {
                let mut g = f.clone();
                if !g.is_empty() {
                    let i = at % g.len().min(48);
                    g[i] = v;
                }
                sequence.push(g);
            }
            for g in &sequence {
                prop_assert_eq!(memo.classify(&c, g), c.classify(g), "frame {:02x?}", g);
            }
        }
    }

    #[test]
    fn compiled_classifier_agrees_with_the_plain_matcher(cfg in arb_config(), frames in proptest::collection::vec(arb_frame(), 1..16)) {
        let c = Classifier::compile(&cfg, 1);
        for f in &frames {
            prop_assert_eq!(c.classify(f), reference(&cfg, f), "frame {:02x?}", f);
        }
    }
}

/// `match.ethernet`: addresses and EtherType, the EtherType read after the VLAN tag when
/// the rule also matches a VLAN id; more rules than the column layout takes, so the scan
/// that reads frames serves them; a socket's datagram (no Ethernet header) never matches.
#[test]
fn ethernet_addresses_and_ethertype_select_their_frames() {
    use crate::config::EthernetMatch;
    let group = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
    let eth = |dst, src, ethertype| FlowMatch {
        ethernet: Some(EthernetMatch {
            dst,
            src,
            ethertype,
        }),
        ..FlowMatch::default()
    };
    let rules = vec![
        flow(1, &[1], eth(Some(group), None, None)),
        flow(2, &[2], eth(None, Some([9; 6]), None)),
        flow(
            3,
            &[3],
            FlowMatch {
                vlan_id: Some(7),
                ..eth(None, None, Some(0x0800))
            },
        ),
        flow(4, &[4], eth(None, None, Some(0x86dd))),
        flow(
            5,
            &[5],
            FlowMatch {
                udp_dst: Some(ports(6000, 6000)),
                ..eth(Some([4; 6]), None, Some(0x0800))
            },
        ),
        flow(6, &[6], FlowMatch::default()),
    ];
    let c = Classifier::compile(&rx(&[0, 1, 2, 3, 4, 5, 6], rules, true), 0);
    assert!(c.columns.is_none() && c.index.is_none());
    let with_macs = |dst: [u8; 6], src: [u8; 6], f: Vec<u8>| {
        let mut f = f;
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f
    };
    let plain = Frame::udp(1, 6000).bytes();
    assert_eq!(
        c.classify(&with_macs(group, [2; 6], plain.clone())),
        deliver(1, 1)
    );
    assert_eq!(
        c.classify(&with_macs([4; 6], [9; 6], plain.clone())),
        deliver(2, 2)
    );
    // Untagged IPv4 to [4; 6] and UDP port 6000: flow 5 (flow 3 wants the tag).
    assert_eq!(c.classify(&plain), deliver(5, 5));
    let mut other_port = Frame::udp(1, 6001);
    assert_eq!(c.classify(&other_port.bytes()), deliver(6, 6));
    other_port.vlan = Some(7);
    assert_eq!(c.classify(&other_port.bytes()), deliver(3, 3));
    other_port.vlan = Some(8);
    assert_eq!(c.classify(&other_port.bytes()), deliver(6, 6));
    let mut ipv6 = plain.clone();
    ipv6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    assert_eq!(c.classify(&ipv6), deliver(4, 4));
    // A datagram: only the rule without Ethernet fields can take it.
    let from = std::net::SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 1));
    let to = std::net::SocketAddr::from((Ipv4Addr::new(10, 0, 1, 2), 6000));
    assert_eq!(c.classify_datagram(from, to, &[0; 16]), deliver(6, 6));
    // An IPv6 datagram has no Ethernet, IPv4 or UDP fields for a rule to match: the
    // rule without fields takes it too.
    let from6: std::net::SocketAddr = "[fd00::1]:1".parse().unwrap();
    let to6: std::net::SocketAddr = "[fd00::2]:6000".parse().unwrap();
    assert_eq!(c.classify_datagram(from6, to6, &[0; 16]), deliver(6, 6));
}

/// Rules on header fields let the memo serve a stream (it knows their bytes); a rule on
/// a payload word does not.
#[test]
fn the_memo_serves_header_rules_and_steps_aside_for_payload_rules() {
    let by_port = rx(
        &[0, 1],
        vec![flow(
            1,
            &[1],
            FlowMatch {
                udp_dst: Some(ports(5000, 5000)),
                ..FlowMatch::default()
            },
        )],
        true,
    );
    assert!(Classifier::compile(&by_port, 1).decisive_bytes().is_some());
    let mut by_word = by_port.clone();
    by_word.flows[0].matches.flex = Some(FlexMatch {
        item_id: 7,
        value: 1,
        mask: 1,
    });
    assert!(Classifier::compile(&by_word, 1).decisive_bytes().is_none());
}
