use super::*;
use std::net::Ipv4Addr;

fn cfg(header: u32, payload: u32) -> BenchTxConfig {
    BenchTxConfig {
        interface_name: "p".into(),
        queue_id: 0,
        cpu_core: None,
        batch_size: 8,
        payload_size: payload,
        header_size: header,
        udp_src_port: PortRange {
            first: 4096,
            last: 4098,
        },
        udp_dst_port: PortRange {
            first: 5000,
            last: 5001,
        },
        ip_src_addr: Ipv4Addr::new(10, 0, 0, 1),
        ip_dst_addr: Ipv4Addr::new(10, 0, 0, 2),
        eth_src_addr: [2, 0, 0, 0, 0, 1],
        eth_dst_addr: [2, 0, 0, 0, 0, 2],
        sequence_number: None,
        gpu_direct: false,
        location: Default::default(),
    }
}

/// What the GPU's frame writer writes (its CPU model, which the GPU test compares the
/// kernel with) is what the CPU generator writes, frame for frame.
#[test]
fn the_gpu_frame_writer_writes_the_cpu_generators_frames() {
    let counted = BenchTxConfig {
        sequence_number: Some(dataplane::config::SequenceField {
            offset: 3,
            start: 7,
        }),
        ..cfg(43, 101)
    };
    for c in [cfg(64, 64), cfg(64, 1000), cfg(42, 21), counted] {
        let mut cpu = FrameBuilder::new(&c, 5);
        let mut gpu = FrameBuilder::new(&c, 5);
        let t = gpu.template();
        let len = cpu.frame_len();
        let mut want = vec![0u8; len];
        cpu.write_constant(&mut want);
        for i in 0..20u64 {
            cpu.set_send_time(1000 + i);
            gpu.set_send_time(1000 + i);
            cpu.write_next(&mut want);
            let mut got = vec![0xeeu8; len];
            gpudirect::frames::write_frame(&t, &gpu.next_fields(), &mut got);
            assert_eq!(
                got, want,
                "frame {i} of {}+{}",
                c.header_size, c.payload_size
            );
            let common = cpu.common_bytes();
            for (k, b) in common.iter().enumerate() {
                if let Some(b) = b {
                    assert_eq!(*b, want[k], "common byte {k}");
                }
            }
        }
    }
}

/// Reorder fields in the IPv4 header (where the reference's quantize example puts
/// them): the frames carry them, both checksums stay right, and the checker still
/// reads them.
#[test]
fn reorder_fields_are_written_with_valid_checksums() {
    let fields = ReorderFields {
        sequence: BitField {
            bit_offset: 128,
            bit_width: 10,
        },
        batch: Some(BitField {
            bit_offset: 144,
            bit_width: 2,
        }),
        packets_per_batch: 256,
    };
    let mut b = FrameBuilder::new(&cfg(64, 256), 1).with_reorder_fields(fields);
    let mut buf = vec![0u8; b.frame_len()];
    b.write_constant(&mut buf);
    let mut checker = Checker::new(false);
    checker.trailer_only = true;
    for c in 0..2000u64 {
        b.write_next(&mut buf);
        assert_eq!(fields.sequence.read(&buf), Some((c % 1024) as u32));
        assert_eq!(
            fields.batch.unwrap().read(&buf),
            Some(((c / 256) % 4) as u32)
        );
        assert_eq!(checksum(&buf[14..34]), 0, "IPv4 header checksum");
        let udp_len = (buf.len() - 34) as u64;
        assert_eq!(
            !fold(sum16(&buf[26..], false) + 17 + udp_len),
            0,
            "UDP checksum"
        );
        checker.check(&buf);
    }
    assert_eq!(checker.counts.valid, 2000);
}

#[test]
fn frames_are_valid_udp_according_to_etherparse() {
    let counted = |h, p, offset| BenchTxConfig {
        sequence_number: Some(dataplane::config::SequenceField {
            offset,
            start: 0xffff_fffe,
        }),
        ..cfg(h, p)
    };
    for c in [
        cfg(64, 64),
        cfg(64, 1000),
        cfg(43, 21),
        cfg(42, 20),
        counted(64, 1000, 0),
        counted(43, 100, 3),
        counted(64, 64, 40),
    ] {
        let (h, p) = (c.header_size, c.payload_size);
        let mut b = FrameBuilder::new(&c, 3);
        let mut buf = vec![0u8; b.frame_len()];
        b.write_constant(&mut buf);
        let mut ports = Vec::new();
        for _ in 0..12 {
            b.write_next(&mut buf);
            let parsed = etherparse::SlicedPacket::from_ethernet(&buf).expect("parses");
            let Some(etherparse::NetSlice::Ipv4(ip)) = parsed.net else {
                panic!("not ipv4")
            };
            assert_eq!(ip.header().total_len() as usize, buf.len() - 14);
            let Some(etherparse::TransportSlice::Udp(udp)) = parsed.transport else {
                panic!("not udp")
            };
            let expected = udp
                .to_header()
                .calc_checksum_ipv4_raw(
                    ip.header().source(),
                    ip.header().destination(),
                    udp.payload(),
                )
                .unwrap();
            assert_eq!(
                udp.checksum(),
                expected,
                "UDP checksum for header {h} payload {p}"
            );
            ports.push((udp.source_port(), udp.destination_port()));
            if let Some(seq) = c.sequence_number {
                let at = (h + seq.offset) as usize;
                let n = ports.len() as u32 - 1;
                assert_eq!(
                    u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()),
                    seq.start.wrapping_add(n),
                    "frame counter, wrapping at 2^32"
                );
            }
        }
        assert_eq!(ports[0], (4096, 5000));
        assert_eq!(ports[1], (4097, 5001));
        assert_eq!(ports[2], (4098, 5000));
        assert_eq!(ports[6], (4096, 5000), "6 port pairs rotate");
    }
}

#[test]
fn send_times_in_the_trailer_give_latency_percentiles() {
    let mut b = FrameBuilder::new(&cfg(64, 100), 3);
    // A send time just below the 48-bit wrap, received just after it.
    let sent = (5u64 << TIME_BITS) + TIME_MASK - 500;
    let mut frames = Vec::new();
    for i in 0..100u64 {
        let mut buf = vec![0u8; b.frame_len()];
        b.write_constant(&mut buf);
        b.set_send_time(sent + i);
        b.write_next(&mut buf);
        frames.push(buf);
    }
    let mut c = Checker::new(true);
    c.receive_time = sent + 1_000;
    for f in &frames {
        c.check(f);
    }
    assert_eq!(
        c.counts.valid, 100,
        "the send time is inside the UDP checksum"
    );
    let l = c.latency.summary().expect("frames measured");
    assert_eq!((l.frames, l.min_ns, l.max_ns), (100, 901, 1000));
    assert!((940..=960).contains(&l.p50_ns), "{l:?}");
    assert!(l.p99_ns >= 995, "{l:?}");
    assert_eq!(l.receive_before_send, 0);

    // A receive time before the send time is counted, not recorded as a huge latency.
    let mut c = Checker::new(false);
    c.receive_time = sent - 10;
    c.check(&frames[0]);
    assert!(c.latency.summary().is_none());
    assert_eq!(c.latency.receive_before_send, 1);

    // No receive time, or no send time: nothing measured.
    let mut c = Checker::new(false);
    c.check(&frames[0]);
    assert!(c.latency.summary().is_none());
    let mut unstamped = FrameBuilder::new(&cfg(64, 100), 3);
    let mut buf = vec![0u8; unstamped.frame_len()];
    unstamped.write_constant(&mut buf);
    unstamped.write_next(&mut buf);
    let mut c = Checker::new(true);
    c.receive_time = 1;
    c.check(&buf);
    assert_eq!(c.counts.valid, 1);
    assert!(c.latency.summary().is_none());
}

#[test]
fn checker_counts_gaps_reordering_and_corruption() {
    let mut b = FrameBuilder::new(&cfg(64, 100), 1);
    let mut frames = Vec::new();
    for _ in 0..30 {
        let mut buf = vec![0u8; b.frame_len()];
        b.write_constant(&mut buf);
        b.write_next(&mut buf);
        frames.push(buf);
    }
    let mut c = Checker::new(true);
    for f in &frames {
        c.check(f);
    }
    assert_eq!(
        c.counts,
        CheckCounts {
            valid: 30,
            ..Default::default()
        }
    );

    let mut c = Checker::new(true);
    // Drop frame 7 (flow 1, second frame of that flow), swap 20 and 26 (same flow).
    for (i, f) in frames.iter().enumerate() {
        match i {
            7 => continue,
            20 => c.check(&frames[26]),
            26 => c.check(&frames[20]),
            _ => c.check(f),
        }
    }
    assert_eq!(
        c.counts.gaps, 1,
        "frame 7 lost; frame 20's late arrival filled its gap"
    );
    assert_eq!(c.counts.reordered, 1);
    assert_eq!(c.counts.valid, 29, "the late frame is valid");
    assert_eq!(c.counts.duplicates, 0);

    // A duplicate is told from a late frame.
    let mut c = Checker::new(false);
    for f in &frames[..10] {
        c.check(f);
    }
    c.check(&frames[3]);
    assert_eq!(
        c.counts,
        CheckCounts {
            valid: 10,
            duplicates: 1,
            ..Default::default()
        }
    );

    let mut c = Checker::new(true);
    let mut bad = frames[0].clone();
    bad[80] ^= 1;
    c.check(&bad);
    c.check(&frames[0][..50]);
    let mut bad_ip = frames[1].clone();
    bad_ip[22] = 1;
    c.check(&bad_ip);
    assert_eq!(c.counts.corrupt, 3);
    assert!(c.first_problem.unwrap().contains("bad UDP checksum"));
}

/// A frame that a TX flow tagged (one 802.1Q tag after the addresses) is the frame the
/// generator wrote, UDP checksum included; a flipped payload bit behind the tag is still
/// found, and a second tag is not read.
#[test]
fn checker_reads_frames_with_one_vlan_tag() {
    let mut b = FrameBuilder::new(&cfg(64, 100), 1);
    let tag = |f: &[u8]| {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0xa0, 100]);
        t.extend_from_slice(&f[12..]);
        t
    };
    let mut c = Checker::new(true);
    for _ in 0..10 {
        let mut buf = vec![0u8; b.frame_len()];
        b.write_constant(&mut buf);
        b.write_next(&mut buf);
        c.check(&tag(&buf));
    }
    assert_eq!(
        c.counts,
        CheckCounts {
            valid: 10,
            ..Default::default()
        }
    );
    let mut buf = vec![0u8; b.frame_len()];
    b.write_constant(&mut buf);
    b.write_next(&mut buf);
    let mut bad = tag(&buf);
    bad[90] ^= 1;
    c.check(&bad);
    c.check(&tag(&tag(&buf)));
    assert_eq!(c.counts.corrupt, 2);
    assert!(c.first_problem.unwrap().contains("bad UDP checksum"));
}
