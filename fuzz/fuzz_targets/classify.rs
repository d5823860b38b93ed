//! Random rule sets against random frames: the classifier never panics, and every packet
//! it delivers goes to a configured queue.
#![no_main]

use dataplane::config::{
    FlowConfig, FlowMatch, Ipv4Prefix, PortRange, QueueConfig, RxConfig,
};
use dataplane::steering::{Classifier, Verdict, headers};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

const RULE_BYTES: usize = 12;

fn rules_from(bytes: &[u8]) -> RxConfig {
    let queue = |id| QueueConfig {
        name: format!("q{id}"),
        id,
        cpu_core: 0,
        batch_size: 32,
        timeout_us: 0,
        memory_regions: vec![],
        location: Default::default(),
    };
    let flows = bytes
        .chunks_exact(RULE_BYTES)
        .enumerate()
        .map(|(i, r)| {
            let port = |a: u8, b: u8, span: u8| {
                let first = u16::from_be_bytes([a, b]);
                PortRange { first, last: first.saturating_add(u16::from(span)) }
            };
            let flags = r[0];
            FlowConfig {
                name: format!("f{i}"),
                id: i as u32 + 1,
                queue_ids: if flags & 1 == 0 { vec![u16::from(r[1] % 4)] } else { vec![0, 1, 2, 3] },
                matches: FlowMatch {
                    udp_src: (flags & 2 != 0).then(|| port(r[2], r[3], r[4])),
                    udp_dst: (flags & 4 != 0).then(|| port(r[5], r[6], r[4])),
                    ipv4_src: (flags & 8 != 0).then(|| Ipv4Prefix {
                        addr: Ipv4Addr::new(r[7], r[8], r[9], r[10]),
                        len: r[11] % 33,
                    }),
                    ipv4_len: (flags & 16 != 0).then(|| u16::from_be_bytes([r[9], r[10]])),
                    vlan_id: (flags & 32 != 0).then(|| u16::from(r[11]) & 0x0fff),
                    ..Default::default()
                },
                transforms: vec![],
                location: Default::default(),
            }
        })
        .collect();
    RxConfig {
        flow_isolation: bytes.first().is_some_and(|b| b & 0x80 != 0),
        queues: (0..4).map(queue).collect(),
        flows,
        flex_items: vec![],
        exception_queue: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else { return };
    let rule_len = (usize::from(n) % 20) * RULE_BYTES;
    if rest.len() < rule_len {
        return;
    }
    let (rules, frame) = rest.split_at(rule_len);
    let _ = headers::parse(frame);
    let c = Classifier::compile(&rules_from(rules), 1);
    if let Verdict::Deliver { queue, .. } = c.classify(frame) {
        assert!(queue < 4, "delivered to unconfigured queue {queue}");
    }
});
