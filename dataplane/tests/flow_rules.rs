//! Flow rules in the configuration: every form the reference writes, and the errors and
//! warnings bad rule sets get (each naming the flow, its key path, line and column).

#[macro_use]
mod common;

use dataplane::config::{self, ConfigError, FlowTransform, MatchClass};

/// Four RX queues; `FLOWS` is replaced by each test's rules.
const BASE: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
        - {name: tq, id: 0, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
      rx:
        flow_isolation: true
        queues:
        - {name: q0, id: 0, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
        - {name: q1, id: 1, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
        - {name: q2, id: 2, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
        - {name: q3, id: 3, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
FLOWS
"#
);

fn with(rules: &str) -> String {
    BASE.replace("FLOWS", rules)
}

fn load(text: &str) -> Result<config::Loaded, ConfigError> {
    config::load_with(text, "flows.yaml", &|core| core < 2)
}

fn errors(rules: &str) -> Vec<String> {
    match load(&with(rules)) {
        Ok(_) => panic!("expected errors for:\n{rules}"),
        Err(e) => e.errors().map(|d| d.to_string()).collect(),
    }
}

fn assert_one(rules: &str, needles: &[&str]) {
    let e = errors(rules);
    assert_eq!(e.len(), 1, "{e:#?}");
    for n in needles {
        assert!(e[0].contains(n), "`{n}` missing in: {}", e[0]);
    }
}

#[test]
fn every_reference_form_parses() {
    let loaded = load(&with(
        r#"        flex_items:
        - {name: word, id: 3, offset: 8, udp_dst_port: 9000}
        flows:
        - name: legacy
          id: 1
          action: {type: queue, id: 0}
          match: {udp_src: 4096, udp_dst: "5000-5010", ipv4_len: 1050}
        - name: ordered_rss
          id: 2
          actions:
          - {type: queue, ids: [1, 2, 3]}
          match: {ipv4_src: 10.0.0.0/8, ipv4_dst: 192.168.1.7, vlan_id: 12}
"#,
    ))
    .expect("loads");
    let rx = loaded.config.interfaces[0].rx.as_ref().unwrap();
    assert_eq!(rx.flows.len(), 2);
    let m = &rx.flows[0].matches;
    assert_eq!(
        (m.udp_dst.unwrap().first, m.udp_dst.unwrap().last),
        (5000, 5010)
    );
    assert_eq!(m.ipv4_len, Some(1050));
    assert_eq!(rx.flows[1].queue_ids, vec![1, 2, 3]);
    assert_eq!(rx.flows[1].matches.ipv4_src.unwrap().len, 8);
    assert_eq!(rx.flows[1].matches.vlan_id, Some(12));
    assert_eq!(rx.flex_items[0].offset, 8);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn ecpri_and_flex_classes_parse() {
    let loaded = load(&with(
        r#"        flows:
        - name: iq
          id: 1
          action: {type: queue, id: 1}
          match: {ecpri: {msg_type: 0, pc_id: 5}}
        - name: any_ecpri
          id: 2
          action: {type: queue, id: 2}
          match: {ecpri: {}}
"#,
    ))
    .expect("loads");
    let rx = loaded.config.interfaces[0].rx.as_ref().unwrap();
    assert_eq!(rx.flows[0].matches.class(), MatchClass::Ecpri);
    assert_eq!(rx.flows[0].matches.ecpri.unwrap().id, Some(5));
}

#[test]
fn transforms_parse_but_software_steering_rejects_them() {
    let rules = r#"        flows:
        - name: pop_then_q1
          id: 1
          actions:
          - {type: vlan_pop}
          - {type: queue, id: 1}
        - name: vxlan_in
          id: 2
          actions:
          - type: tunnel_decap
            tunnel: {type: vxlan, vni: 77, outer_ipv4_dst: 192.0.2.2}
          - {type: queue, id: 2}
"#;
    let e = errors(rules);
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(
        e[0].contains("not supported in software steering: pop_then_q1"),
        "{}",
        e[0]
    );
    assert!(
        e[0].contains("interfaces[0].rx.flows[0].actions (line 24"),
        "{}",
        e[0]
    );
    assert!(
        e[1].contains("not supported in software steering: vxlan_in"),
        "{}",
        e[1]
    );
    // The same rules on a hardware-steering engine validate (DPDK does them on the NIC).
    let dpdk = with(rules)
        .replace("loopback: \"sw\"", "")
        .replace("address: loopback", "address: 0000:01:00.0");
    let loaded = load(&dpdk).expect("hardware steering takes transforms");
    let flows = &loaded.config.interfaces[0].rx.as_ref().unwrap().flows;
    assert_eq!(flows[0].transforms, vec![FlowTransform::VlanPop]);
    assert!(
        matches!(&flows[1].transforms[0], FlowTransform::TunnelDecap(t) if t.vni == 77 && t.outer_udp_dst == 4789)
    );
}

#[test]
fn unknown_queue_and_repeated_queue() {
    assert_one(
        r#"        flows:
        - {name: to_nowhere, id: 1, action: {type: queue, id: 9}}
"#,
        &[
            "flow `to_nowhere` sends to queue 9",
            "interfaces[0].rx.flows[0] (line 24, column 11)",
        ],
    );
    assert_one(
        r#"        flows:
        - {name: twice, id: 1, action: {type: queue, ids: [1, 1]}}
"#,
        &["flow `twice` lists queue 1 twice"],
    );
}

#[test]
fn duplicate_flow_ids_and_names() {
    let e = errors(
        r#"        flows:
        - {name: a, id: 5, action: {type: queue, id: 0}, match: {udp_dst: 1}}
        - {name: b, id: 5, action: {type: queue, id: 1}, match: {udp_dst: 2}}
        - {name: a, id: 6, action: {type: queue, id: 1}, match: {udp_dst: 3}}
"#,
    );
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(
        e.iter()
            .any(|m| m.contains("duplicate flow id 5 (also flows[0])") && m.contains("line 25"))
    );
    assert!(
        e.iter()
            .any(|m| m.contains("duplicate flow name `a`") && m.contains("line 26"))
    );
}

#[test]
fn a_rule_hidden_by_an_earlier_one_is_a_warning() {
    let loaded = load(&with(
        r#"        flows:
        - {name: wide, id: 1, action: {type: queue, id: 0}, match: {udp_dst: "5000-5100", ipv4_dst: 10.0.0.0/8}}
        - {name: narrow, id: 2, action: {type: queue, id: 1}, match: {udp_dst: 5050, udp_src: 7, ipv4_dst: 10.1.2.3}}
        - {name: partly, id: 3, action: {type: queue, id: 2}, match: {udp_dst: "5090-5200"}}
"#,
    ))
    .expect("a warning, not an error");
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    let w = loaded.warnings[0].to_string();
    assert!(
        w.contains("flow `narrow` can never match: the earlier flow `wide` (flows[0])"),
        "{w}"
    );
    assert!(w.contains("interfaces[0].rx.flows[1] (line 25"), "{w}");
}

#[test]
fn one_match_class_per_interface() {
    assert_one(
        r#"        flex_items:
        - {name: word, id: 3, offset: 8, udp_dst_port: 9000}
        flows:
        - {name: by_port, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 9000}}
        - {name: by_word, id: 2, action: {type: queue, id: 1}, match: {flex_item_id: 3, val: 1, mask: 255}}
"#,
        &["flow `by_word` matches flex item fields but flow `by_port` matches IPv4/UDP fields"],
    );
}

#[test]
fn flex_item_errors() {
    assert_one(
        r#"        flex_items:
        - {name: w1, id: 3, offset: 6, udp_dst_port: 9000}
"#,
        &[
            "interfaces[0].rx.flex_items[0].offset (line 24",
            "offset must be a multiple of 4",
        ],
    );
    let e = errors(
        r#"        flex_items:
        - {name: w1, id: 3, offset: 8, udp_dst_port: 9000}
        - {name: w2, id: 3, offset: 4, udp_dst_port: 9001}
        flows:
        - {name: by_word, id: 2, action: {type: queue, id: 1}, match: {flex_item_id: 4, val: 1}}
"#,
    );
    assert!(
        e.iter()
            .any(|m| m.contains("duplicate flex item id 3 (also flex_items[0])")),
        "{e:#?}"
    );
    assert!(
        e.iter()
            .any(|m| m.contains("flow `by_word` uses flex item 4")),
        "{e:#?}"
    );
}

#[test]
fn ports_ids_and_ecpri_out_of_range() {
    let e = errors(
        r#"        flows:
        - {name: big_port, id: 1, action: {type: queue, id: 0}, match: {udp_dst: 70000}}
        - {name: backwards, id: 2, action: {type: queue, id: 0}, match: {udp_src: "5010-5000"}}
        - {name: huge_id, id: 16777216, action: {type: queue, id: 0}}
        - {name: pc_alone, id: 4, action: {type: queue, id: 0}, match: {ecpri: {pc_id: 3}}}
"#,
    );
    for needle in [
        "interfaces[0].rx.flows[0].match.udp_dst (line 24",
        "`5010-5000` is not a port range",
        "interfaces[0].rx.flows[2].id",
        "needs `msg_type`",
    ] {
        assert!(
            e.iter().any(|m| m.contains(needle)),
            "`{needle}` missing in {e:#?}"
        );
    }
}

#[test]
fn exception_queue_must_exist() {
    let text = with("        flows: []\n").replace(
        "flow_isolation: true",
        "flow_isolation: true\n        exception_queue: 7",
    );
    let e = load(&text)
        .unwrap_err()
        .errors()
        .map(|d| d.to_string())
        .collect::<Vec<_>>();
    assert!(e.iter().any(|m| m.contains("exception queue 7")), "{e:#?}");
}

/// TX flows parse on engines that send frames (the loopback applies them in software);
/// the socket engine, whose kernel writes the headers, refuses them, and an encap without
/// outer addresses is an error naming the key.
#[test]
fn tx_flows_parse_and_the_socket_engine_refuses_them() {
    let text = with("        flows: []\n").replace(
        "      tx:\n        queues:",
        r#"      tx:
        flows:
        - name: tag_it
          id: 101
          actions:
          - {type: vlan_push, vlan_id: 100, pcp: 3}
          match: {udp_src: 4096}
        - name: nested_tag
          id: 102
          actions:
          - type: vlan_push
            vlan: {vlan_id: 7, ethertype: 0x88a8}
        queues:"#,
    );
    load(&text).expect("the software loopback applies TX flows");
    let no_outer = text.replace(
        "{type: vlan_push, vlan_id: 100, pcp: 3}",
        "{type: tunnel_encap, tunnel: {type: vxlan, outer_ipv4_src: 192.0.2.1, vni: 5}}",
    );
    let e = load(&no_outer).unwrap_err().to_string();
    assert!(
        e.contains("tx.flows[0].actions[0].tunnel.outer_ipv4_dst")
            && e.contains("needs outer_ipv4_dst"),
        "{e}"
    );
    let sockets = config_yaml!(
        socket,
        0,
        r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 256, buf_size: 2048}
    interfaces:
    - name: udp0
      address: 127.0.0.1
      socket_config: {mode: client, remote_addr: "udp://127.0.0.1:5000"}
      tx:
        flows:
        - name: tag_it
          id: 1
          actions: [{type: vlan_push, vlan_id: 100}]
        queues:
        - {name: q0, id: 0, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
"#
    );
    let e = load(sockets).unwrap_err().to_string();
    assert!(
        e.contains("interfaces[0].tx.flows[0].actions")
            && e.contains("not supported on the socket engine: TX flow `tag_it`"),
        "{e}"
    );
    let hw = text
        .replace("loopback: \"sw\"", "")
        .replace("address: loopback", "address: 0000:01:00.0");
    let loaded = load(&hw).expect("hardware steering takes TX flows");
    let tx = loaded.config.interfaces[0].tx.as_ref().unwrap();
    assert_eq!(
        tx.flows[0].transforms,
        vec![config::TxTransform::VlanPush {
            vlan_id: 100,
            pcp: 3,
            dei: 0,
            ethertype: 0x8100
        }]
    );
    assert_eq!(
        tx.flows[1].transforms,
        vec![config::TxTransform::VlanPush {
            vlan_id: 7,
            pcp: 0,
            dei: 0,
            ethertype: 0x88a8
        }]
    );
    let bad = hw.replace(
        "{type: vlan_push, vlan_id: 100, pcp: 3}",
        "{type: queue, id: 0}",
    );
    let e = load(&bad).unwrap_err().to_string();
    assert!(e.contains("`queue` is an RX action"), "{e}");
}

/// `match.ethernet`: parsed with the other fields; an empty one, a bad MAC, an EtherType
/// that contradicts the IPv4/UDP or eCPRI fields, and any layer-2 field on the socket
/// engine (whose datagrams have no Ethernet header) are errors naming the key.
#[test]
fn ethernet_matches_parse_and_contradictions_are_errors() {
    let loaded = load(&with(
        r#"        flows:
        - name: group
          id: 1
          action: {type: queue, id: 1}
          match: {ethernet: {dst: "01:00:5e:00:00:fb", src: "02-00-00-00-00-09", ethertype: 0x0800}, udp_dst: 5353}
"#,
    ))
    .expect("loads");
    let m = loaded.config.interfaces[0].rx.as_ref().unwrap().flows[0]
        .matches
        .ethernet
        .unwrap();
    assert_eq!(m.dst, Some([1, 0, 0x5e, 0, 0, 0xfb]));
    assert_eq!(m.src, Some([2, 0, 0, 0, 0, 9]));
    assert_eq!(m.ethertype, Some(0x0800));
    let flow = |m: &str| {
        format!(
            "        flows:\n        - name: f\n          id: 1\n          action: {{type: queue, id: 1}}\n          match: {m}\n"
        )
    };
    assert_one(
        &flow("{ethernet: {}}"),
        &[
            "match.ethernet",
            "needs at least one of `dst`, `src`, `ethertype`",
        ],
    );
    assert_one(
        &flow("{ethernet: {dst: \"01:00:5e:00:00\"}}"),
        &["match.ethernet.dst", "is not a MAC address"],
    );
    assert_one(
        &flow("{ethernet: {ethertype: 0x86dd}, udp_dst: 5000}"),
        &[
            "match.ethernet.ethertype",
            "0x86dd contradicts IPv4/UDP fields",
        ],
    );
    assert_one(
        &flow("{ethernet: {ethertype: 0x0800}, ecpri: {}}"),
        &["0x0800 contradicts `ecpri`"],
    );
    assert_one(
        &flow("{ethernet: {ethertype: 0x05ff}}"),
        &["match.ethernet.ethertype"],
    );
    assert_one(
        &flow("{ethernet: {dst: \"01:00:5e:00:00:fb\", mtu: 9000}}"),
        &["mtu"],
    );
    let sockets = config_yaml!(
        socket,
        0,
        r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 256, buf_size: 2048}
    interfaces:
    - name: udp0
      address: 127.0.0.1
      socket_config: {mode: server, local_addr: "udp://127.0.0.1:5000"}
      rx:
        queues:
        - {name: q0, id: 0, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
        - {name: q1, id: 1, cpu_core: 0, batch_size: 64, memory_regions: [bufs]}
        flows:
        - name: tagged
          id: 1
          action: {type: queue, id: 1}
          match: {vlan_id: 3, ethernet: {src: "02:00:00:00:00:01"}}
"#
    );
    let e: Vec<String> = load(sockets)
        .unwrap_err()
        .errors()
        .map(|d| d.to_string())
        .collect();
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(
        e[0].contains("interfaces[0].rx.flows[0].match.vlan_id")
            && e[0].contains("not supported on the socket engine"),
        "{}",
        e[0]
    );
    assert!(
        e[1].contains("match.ethernet") && e[1].contains("without their Ethernet header"),
        "{}",
        e[1]
    );
}
