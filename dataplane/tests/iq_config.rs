//! `protocol: {vrt: ...}` and `{ecpri_uplane: ...}` on an RX queue: parsed with errors
//! that name the key, planned (and shown by `validate --plan`), and run end to end on the
//! software loopback, whose frames carry the radio packets as UDP payloads. The packets
//! are written here field by field from the standards' layouts, independently of the
//! decoders.

mod common;

use dataplane::plan::ProtocolPlan;
use dataplane::protocol::iq::{
    Compression, IqFormat, IqHeader, IqSamples, Precision, SampleFormat,
};
use std::time::{Duration, Instant};

fn loopback(protocol: &str) -> String {
    common::LoopPair {
        interface: "radio",
        rx_queue: &format!("timeout_us: 100\nmemory_regions: [rx]\nprotocol:\n  {protocol}"),
        ..Default::default()
    }
    .text()
}

fn planned(text: &str) -> (dataplane::plan::IqPlan, String) {
    let loaded = dataplane::config::load_str(text, "iq.yaml").unwrap();
    let plan = dataplane::plan::Plan::from_config(&loaded.config).unwrap();
    let iq = plan
        .queues
        .iter()
        .find_map(|q| match q.protocol {
            Some(ProtocolPlan::Iq(iq)) => Some(iq),
            _ => None,
        })
        .expect("planned");
    (iq, plan.human())
}

use common::plan_error as errors;

#[test]
fn the_blocks_are_parsed_planned_and_shown() {
    let (iq, human) = planned(&loopback("vrt: {samples: i16_le, precision: f16}"));
    assert_eq!(
        iq.format,
        IqFormat::Vrt {
            samples: SampleFormat::I16Le
        }
    );
    assert_eq!(iq.precision, Precision::F16);
    assert!(iq.frames);
    assert!(
        human.contains(
            "VITA-49 signal data, 16-bit little-endian samples in UDP frames, to complex f16"
        ),
        "{human}"
    );
    let (iq, _) = planned(&loopback("vrt: {}"));
    assert_eq!(
        (iq.format, iq.precision),
        (
            IqFormat::Vrt {
                samples: SampleFormat::I16Be
            },
            Precision::F32
        ),
        "VITA-49's own byte order and exact f32 by default"
    );
    let (iq, human) = planned(&loopback(
        "ecpri_uplane: {compression: block_floating_point, iq_width: 9, prbs_when_zero: 273}",
    ));
    assert_eq!(
        iq.format,
        IqFormat::EcpriUplane {
            compression: Compression::BlockFloatingPoint { iq_width: 9 },
            prbs_when_zero: 273
        }
    );
    assert!(
        human.contains("O-RAN U-plane in eCPRI, block floating point of 9-bit mantissas, 273 PRBs when a section says 0 in UDP frames, to complex f32"),
        "{human}"
    );
}

#[test]
fn bad_blocks_name_their_key() {
    let e = errors(&loopback(
        "{vrt: {}, ecpri_uplane: {compression: none, prbs_when_zero: 1}}",
    ));
    assert!(e.contains("names one protocol"), "{e}");
    let e = errors(&loopback("vrt: {samples: i12}"));
    assert!(
        e.contains("protocol.vrt.samples") && e.contains("i16_be"),
        "{e}"
    );
    let e = errors(&loopback("vrt: {precision: f64}"));
    assert!(e.contains("protocol.vrt.precision"), "{e}");
    let e = errors(&loopback(
        "ecpri_uplane: {compression: block_floating_point, prbs_when_zero: 1}",
    ));
    assert!(
        e.contains("protocol.ecpri_uplane.iq_width") && e.contains("needs"),
        "{e}"
    );
    let e = errors(&loopback(
        "ecpri_uplane: {compression: none, iq_width: 9, prbs_when_zero: 1}",
    ));
    assert!(
        e.contains("protocol.ecpri_uplane.iq_width") && e.contains("block_floating_point only"),
        "{e}"
    );
    let e = errors(&loopback(
        "ecpri_uplane: {compression: block_floating_point, iq_width: 17, prbs_when_zero: 1}",
    ));
    assert!(e.contains("protocol.ecpri_uplane.iq_width"), "{e}");
    let e = errors(&loopback("ecpri_uplane: {compression: none}"));
    assert!(e.contains("`prbs_when_zero`"), "{e}");
    let e = errors(&loopback("vrt: {samples: i8, endian: big}"));
    assert!(e.contains("endian"), "an unknown key is named: {e}");
}

/// `sample_region`: the GPU decodes a burst into one of its buffers, so it must be GPU
/// memory, fed from pinned receive buffers, and hold a burst's stored and decoded samples
/// in each of at least three buffers.
#[test]
fn sample_regions_are_checked_when_planned() {
    // The loopback hands TX buffers to RX: the packets arrive in both regions.
    let with = |rx_kind: &str, samples: &str, protocol: &str| {
        loopback(protocol)
            .replace(
                "{name: rx, kind: host, affinity: 0, num_bufs: 2048, buf_size: 2048}",
                &format!(
                    "{{name: rx, kind: {rx_kind}, affinity: 0, num_bufs: 2048, buf_size: 2048}}\n    - {{name: samples, {samples}}}"
                ),
            )
            .replace(
                "{name: tx, kind: host,",
                &format!("{{name: tx, kind: {rx_kind},"),
            )
    };
    // 32 packets of up to 2048 bytes: 512 16-bit samples each, 4096 bytes as f32.
    let fits = "kind: device, affinity: 0, num_bufs: 3, buf_size: 131072";
    let (iq, human) = planned(&with(
        "host_pinned",
        fits,
        "vrt: {samples: i16_be, sample_region: samples}",
    ));
    assert!(iq.sample_region.is_some());
    assert!(
        human.contains("to complex f32 on the GPU into region samples"),
        "{human}"
    );
    let cases = [
        (
            "host_pinned",
            fits,
            "vrt: {sample_region: nowhere}",
            "no memory region named `nowhere`",
        ),
        (
            "host_pinned",
            "kind: host_pinned, affinity: 0, num_bufs: 3, buf_size: 131072",
            "vrt: {sample_region: samples}",
            "is host_pinned memory; the GPU decodes into device memory",
        ),
        (
            "host",
            fits,
            "vrt: {sample_region: samples}",
            "must receive into host_pinned memory",
        ),
        (
            "host_pinned",
            "kind: device, affinity: 0, num_bufs: 3, buf_size: 131071",
            "vrt: {sample_region: samples}",
            "a burst of 32 packets of up to 2048 bytes needs 131072",
        ),
        (
            "host_pinned",
            "kind: device, affinity: 0, num_bufs: 2, buf_size: 131072",
            "vrt: {sample_region: samples}",
            "has 2 buffers; it needs 3",
        ),
        (
            "host_pinned",
            fits,
            // 1-bit mantissas: 4 bytes a PRB of 12 samples, 96 bytes as f32.
            "ecpri_uplane: {compression: block_floating_point, iq_width: 1, prbs_when_zero: 273, sample_region: samples}",
            "needs 1572864",
        ),
    ];
    let tx_host = with("host_pinned", fits, "vrt: {sample_region: samples}")
        .replace("{name: tx, kind: host_pinned,", "{name: tx, kind: host,");
    assert!(
        errors(&tx_host).contains("on the loopback, the TX queues' buffers arrive"),
        "{}",
        errors(&tx_host)
    );
    for (rx_kind, samples, protocol, expected) in cases {
        let e = errors(&with(rx_kind, samples, protocol));
        assert!(e.contains(expected), "{expected}: {e}");
    }
}

/// A VRT signal data packet with a stream id (type 1), no class id, timestamp or trailer.
fn vrt(stream: u32, count: u8, samples: &[(i16, i16)]) -> Vec<u8> {
    let words = 2 + samples.len() as u32;
    let mut p = ((1u32 << 28) | (u32::from(count & 0xf) << 16) | words)
        .to_be_bytes()
        .to_vec();
    p.extend_from_slice(&stream.to_be_bytes());
    for (i, q) in samples {
        p.extend_from_slice(&i.to_be_bytes());
        p.extend_from_slice(&q.to_be_bytes());
    }
    p
}

fn sample(stream: u32, packet: u32, k: u32) -> (i16, i16) {
    let v = (stream * 1000 + packet * 10 + k) as i16;
    (v, -v)
}

/// Takes batches until `packets` were decoded or counted.
fn drain(stream: &mut dataplane::IqStream, packets: u64) -> Vec<dataplane::protocol::iq::IqBatch> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut batches = Vec::new();
    loop {
        let c = stream.counters();
        if c.packets + c.packets_not_iq + c.packets_damaged >= packets {
            return batches;
        }
        assert!(Instant::now() < deadline, "{c:?}");
        if let Some(b) = stream.recv(Duration::from_millis(100)).unwrap() {
            batches.push(b);
        }
    }
}

/// Two VRT streams through the loopback; one packet of stream 2 is never sent and one
/// context packet is: every sample of every sent packet arrives exactly, the lost packet
/// is counted missing by the sequence counter, the context packet as not IQ data.
#[test]
fn vrt_streams_on_the_loopback_arrive_as_samples() {
    let cfg = dataplane::config::load_str(&loopback("vrt: {}"), "iq.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("radio", 0).unwrap();
    let mut stream = plane.take_iq_stream("radio", 0).expect("an IQ queue");
    assert!(plane.take_spead_stream("radio", 0).is_none(), "not SPEAD");
    let mut datagrams = Vec::new();
    let mut expected = Vec::new();
    for packet in 0..40u32 {
        for s in [1u32, 2] {
            if (s, packet) == (2, 17) {
                continue;
            }
            let samples: Vec<_> = (0..50).map(|k| sample(s, packet, k)).collect();
            datagrams.push(vrt(s, packet as u8, &samples));
            expected.push((s, samples));
        }
    }
    // A context packet (type 4) of stream 1.
    datagrams.push([0x4000_0002u32.to_be_bytes(), 1u32.to_be_bytes()].concat());
    common::send_udp_frames(&mut tx, &datagrams);
    let batches = drain(&mut stream, datagrams.len() as u64);
    let mut got = Vec::new();
    for b in &batches {
        let IqSamples::F32(v) = &b.samples else {
            panic!("f32 declared")
        };
        for p in &b.packets {
            let IqHeader::Vrt(h) = p.header else {
                panic!("VRT")
            };
            let samples: Vec<(i16, i16)> = v[2 * p.first_sample..2 * (p.first_sample + p.samples)]
                .chunks(2)
                .map(|c| (c[0] as i16, c[1] as i16))
                .collect();
            assert!(
                v[2 * p.first_sample..2 * (p.first_sample + p.samples)]
                    .iter()
                    .all(|x| x.fract() == 0.0)
            );
            got.push((h.stream_id.unwrap(), samples));
        }
    }
    assert!(got == expected, "every sample, in order");
    let c = stream.counters();
    assert_eq!(
        (
            c.packets,
            c.packets_missing,
            c.packets_not_iq,
            c.packets_damaged
        ),
        (79, 1, 1, 0),
        "{c:?}"
    );
    assert_eq!(c.samples, 79 * 50);
    for b in batches {
        stream.recycle(b);
    }
    drop((tx, stream));
    plane.shutdown().unwrap();
}

/// IEEE half bits of an integer of magnitude below 2048 (exact), written from the format.
fn half_of(v: i16) -> u16 {
    if v == 0 {
        return 0;
    }
    let sign = if v < 0 { 0x8000 } else { 0 };
    let m = v.unsigned_abs();
    let e = 15 - m.leading_zeros() as u16; // floor(log2 m)
    let mantissa = (m - (1 << e)) << (10 - e);
    sign | ((e + 15) << 10) | mantissa
}

/// An eCPRI IQ data message with one O-RAN U-plane section of uncompressed PRBs.
fn uplane(pc_id: u16, sequence: u8, prbs: &[[(i16, i16); 12]]) -> Vec<u8> {
    let mut m = vec![0x10, 0, 0, 0];
    m.extend_from_slice(&pc_id.to_be_bytes());
    m.extend_from_slice(&[sequence, 0x80]);
    m.extend_from_slice(&[0x10, 3, 0x12, 0x34]); // data direction, frame 3, slot and symbol
    m.extend_from_slice(&[0x00, 0x10, 0x00, prbs.len() as u8]); // section 1 from PRB 0
    for prb in prbs {
        for (i, q) in prb {
            m.extend_from_slice(&i.to_be_bytes());
            m.extend_from_slice(&q.to_be_bytes());
        }
    }
    let size = (m.len() - 4) as u16;
    m[2..4].copy_from_slice(&size.to_be_bytes());
    m
}

/// Uncompressed U-plane messages of two eAxCs decoded to half precision: every sample's
/// bits are those of the integer's half, the frame fields read back, and a skipped eCPRI
/// sequence id counts its packets missing.
#[test]
fn ecpri_messages_on_the_loopback_arrive_as_half_samples() {
    let cfg = dataplane::config::load_str(
        &loopback("ecpri_uplane: {compression: none, prbs_when_zero: 4, precision: f16}"),
        "iq.yaml",
    )
    .unwrap()
    .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("radio", 0).unwrap();
    let mut stream = plane.take_iq_stream("radio", 0).expect("an IQ queue");
    let value = |pc: u16, seq: u8, k: usize| -> i16 {
        ((pc as i32 * 700 + seq as i32 * 13 + k as i32) % 2047 - 1000) as i16
    };
    let mut datagrams = Vec::new();
    let mut expected = Vec::new();
    for seq in 0..30u8 {
        for pc in [0x100u16, 0x101] {
            if pc == 0x101 && (10..13).contains(&seq) {
                continue; // three lost in a row
            }
            let prbs: Vec<[(i16, i16); 12]> = (0..3)
                .map(|p| {
                    std::array::from_fn(|k| {
                        let v = value(pc, seq, p * 12 + k);
                        (v, v / 2)
                    })
                })
                .collect();
            let halves: Vec<u16> = prbs
                .iter()
                .flatten()
                .flat_map(|&(i, q)| [half_of(i), half_of(q)])
                .collect();
            datagrams.push(uplane(pc, seq, &prbs));
            expected.push((pc, seq, halves));
        }
    }
    common::send_udp_frames(&mut tx, &datagrams);
    let batches = drain(&mut stream, datagrams.len() as u64);
    let mut got = Vec::new();
    for b in &batches {
        let IqSamples::F16(v) = &b.samples else {
            panic!("f16 declared")
        };
        for p in &b.packets {
            let IqHeader::Uplane(h) = p.header else {
                panic!("U-plane")
            };
            assert_eq!(
                (h.frame_id, h.subframe_slot_symbol, h.sections),
                (3, 0x1234, 1)
            );
            got.push((
                h.pc_id,
                h.sequence,
                v[2 * p.first_sample..2 * (p.first_sample + p.samples)].to_vec(),
            ));
        }
    }
    assert!(got == expected, "every sample's half bits, in order");
    let c = stream.counters();
    assert_eq!((c.packets, c.packets_missing), (57, 3), "{c:?}");
    drop((tx, stream));
    plane.shutdown().unwrap();
}
