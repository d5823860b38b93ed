//! TX flows on the software loopback: the TX worker pushes VLAN tags and tunnel headers
//! onto copies of the frames a flow matches, the receiving side's classifier steers by
//! what arrives, and every arriving byte is compared with what the transform must have
//! made; the application's buffers keep what it wrote.

mod common;

use dataplane::DataPlane;
use dataplane::config;
use std::time::{Duration, Instant};

const CFG: &str = r#"
memory_regions:
- {name: txb, kind: host, affinity: 0, num_bufs: 256, buf_size: 256}
- {name: rxb, kind: host, affinity: 0, num_bufs: 256, buf_size: 512}
interfaces:
- name: loop0
  address: loopback
  tx:
    flows:
    - name: tag
      id: 1
      actions: [{type: vlan_push, vlan_id: 100, pcp: 5}]
      match: {udp_dst: 5000}
    - name: tunnel
      id: 2
      actions:
      - type: tunnel_encap
        tunnel: {type: vxlan, outer_eth_src: "02:00:00:00:00:0a", outer_eth_dst: "02:00:00:00:00:0b",
                 outer_ipv4_src: 192.0.2.1, outer_ipv4_dst: 192.0.2.2, outer_udp_src: 49999, vni: 4660}
      match: {udp_dst: 6000}
    queues:
    - {name: tq, id: 0, cpu_core: 1, batch_size: 16, memory_regions: [txb]}
  rx:
    queues:
    - {name: plain, id: 0, cpu_core: 0, batch_size: 16, timeout_us: 200, memory_regions: [rxb]}
    - {name: tagged, id: 1, cpu_core: 0, batch_size: 16, timeout_us: 200, memory_regions: [rxb]}
    - {name: tunnelled, id: 2, cpu_core: 0, batch_size: 16, timeout_us: 200, memory_regions: [rxb]}
    flows:
    - {name: by_tag, id: 11, action: {type: queue, id: 1}, match: {vlan_id: 100}}
    - {name: by_vxlan, id: 12, action: {type: queue, id: 2}, match: {udp_dst: 4789, ipv4_dst: 192.0.2.2}}
"#;

/// An Ethernet/IPv4/UDP frame to `dport` whose payload starts with `seq`.
fn frame(dport: u16, payload: usize, seq: u8) -> Vec<u8> {
    let mut f = vec![0u8; 42 + payload];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((28 + payload) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f[34..36].copy_from_slice(&4096u16.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = seq.wrapping_add(i as u8);
    }
    f
}

#[test]
fn vlan_push_and_vxlan_encap_arrive_as_configured_and_the_application_buffers_keep_their_bytes() {
    let cfg = config::load_str(&common::loopback_config(CFG), "tx_flows.yaml")
        .expect("config")
        .config;
    let mut dp = DataPlane::start(&cfg).expect("start");
    let mut tx = dp.take_tx_queue("loop0", 0).unwrap();
    let mut rx: Vec<_> = (0..3)
        .map(|q| dp.take_rx_queue("loop0", q).unwrap())
        .collect();
    // Per port: 8 frames of 100 payload bytes, and 2 to the tagged port that fill their
    // 256-byte buffers (the transform region's buffers have room for the tag).
    let mut sent = Vec::new();
    for (k, dport) in [5000u16, 6000, 7000].into_iter().enumerate() {
        for s in 0..8u8 {
            sent.push(frame(dport, 100, (k as u8) * 16 + s));
        }
    }
    sent.push(frame(5000, 256 - 42, 200));
    sent.push(frame(5000, 256 - 42, 201));
    for chunk in sent.chunks(12) {
        let mut b = tx.alloc(chunk.len()).expect("buffers");
        for (i, f) in chunk.iter().enumerate() {
            b.buffer_mut(i, 0).unwrap()[..f.len()].copy_from_slice(f);
            b.set_len(i, 0, f.len());
        }
        tx.send(b).map_err(|e| e.reason).expect("sent");
    }
    let mut got: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.iter().map(Vec::len).sum::<usize>() < sent.len() && Instant::now() < deadline {
        for (q, r) in rx.iter_mut().enumerate() {
            if let Some(b) = r.poll().expect("worker alive") {
                for i in 0..b.len() {
                    got[q].push(b.data(i, 0).unwrap().to_vec());
                }
            }
        }
    }
    let [plain, tagged, tunnelled] = [&got[0], &got[1], &got[2]];
    assert_eq!((plain.len(), tagged.len(), tunnelled.len()), (8, 10, 8));
    let tagged_sent: Vec<&Vec<u8>> = sent[..8].iter().chain(&sent[24..]).collect();
    for (f, want) in tagged.iter().zip(tagged_sent) {
        assert_eq!(f.len(), want.len() + 4);
        assert_eq!(f[..12], want[..12], "addresses first");
        assert_eq!(f[12..16], [0x81, 0x00, 0xa0, 100], "802.1Q, PCP 5, VID 100");
        assert_eq!(f[16..], want[12..], "then the frame as sent");
    }
    for (i, f) in tunnelled.iter().enumerate() {
        let want = &sent[8 + i];
        assert_eq!(f.len(), want.len() + 50);
        assert_eq!(f[..12], [2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa]);
        assert_eq!(
            u16::from_be_bytes([f[16], f[17]]) as usize,
            20 + 16 + want.len()
        );
        assert_eq!(f[26..34], [192, 0, 2, 1, 192, 0, 2, 2]);
        assert_eq!(f[34..38], [0xc3, 0x4f, 0x12, 0xb5], "ports 49999 and 4789");
        assert_eq!(f[42..50], [0x08, 0, 0, 0, 0x00, 0x12, 0x34, 0], "VNI 4660");
        assert_eq!(f[50..], want[..], "the whole inner frame");
    }
    for (i, f) in plain.iter().enumerate() {
        assert_eq!(
            f,
            &sent[16 + i],
            "a frame no TX flow matches goes out unchanged"
        );
    }
    let snap = dp.snapshot();
    assert_eq!(snap.drops().total(), 0, "nothing dropped");
    assert_eq!(snap.total(config::Direction::Tx).0, 26);
    // Every TX buffer is back, holding what the application wrote: no tag, no tunnel.
    let mut all = tx.alloc(256).expect("every TX buffer returned");
    for i in 0..all.len() {
        let b = all.buffer_mut(i, 0).unwrap();
        assert_ne!(b[12..14], [0x81, 0x00], "buffer {i} was tagged in place");
        assert_ne!(
            b[..6],
            [2, 0, 0, 0, 0, 0xb],
            "buffer {i} was encapsulated in place"
        );
    }
    dp.shutdown().expect("clean shutdown");
}
