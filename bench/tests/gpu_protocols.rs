//! GPU tests of the sensor protocols. Without a CUDA driver each prints "SKIP: no CUDA
//! driver" and passes (CI has no GPU); on a GPU machine they run for real:
//! - the block floating point and fixed-point kernels against their CPU twins
//!   (`dataplane::protocol::iq`), bit for bit;
//! - radio queues decoded on the GPU (`sample_region`) against the CPU decoder fed the
//!   same packets, bit for bit, with the same packet entries and counters;
//! - SPEAD heaps placed into chunks in GPU memory, byte for byte.

#[macro_use]
mod common;
#[path = "common/gpu.rs"]
mod gpu_common;

use gpu_common::{Rng, gpu_alone};
use gpudirect::{DeviceBuffer, Gpu};

/// Checks a kernel's output bytes against its CPU twin's values, bit for bit: half bits
/// when `half`, else `f32`.
fn assert_same_values(got: &[u8], half: bool, (want, want_half): (&[f32], &[u16]), case: &str) {
    if half {
        let got: Vec<u16> = got
            .chunks_exact(2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, want_half, "{case}, half");
    } else {
        let got: Vec<u32> = got
            .chunks_exact(4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
            .collect();
        let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "{case}, f32");
    }
}

/// The block floating point kernel against its CPU twin (`dataplane::protocol::iq`):
/// random PRBs of every mantissa width, every exponent, as `f32` and as half bits.
#[test]
fn the_bfp_kernel_matches_the_cpu_decoder_bit_for_bit() {
    use dataplane::protocol::iq::{Compression, F16Sink, decode_ecpri_uplane};
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let mut gpu = Gpu::new(0).expect("kernels compile and load");
    let mut rng = Rng(0x0bf9_0000_1234_5678);
    const PRBS: usize = 200;
    for width in 1..=16u32 {
        let prb_bytes = 1 + (24 * width as usize).div_ceil(8);
        let mut prbs = vec![0u8; PRBS * prb_bytes];
        rng.fill(&mut prbs);
        // One U-plane message: eCPRI header, transport and application headers, one
        // section of PRBS PRBs (a count of 0 means the configured 200).
        let mut body = vec![0, 1, 2, 0, 0x10, 1, 0, 0, 0, 0, 0, 0];
        body.extend_from_slice(&prbs);
        let mut m = vec![0x10, 0x00];
        m.extend_from_slice(&(body.len() as u16).to_be_bytes());
        m.extend_from_slice(&body);
        let bfp = Compression::BlockFloatingPoint {
            iq_width: width as u8,
        };
        let mut want = Vec::new();
        decode_ecpri_uplane(&m, bfp, PRBS, &mut want).expect("decodes");
        let mut want_half = F16Sink::default();
        decode_ecpri_uplane(&m, bfp, PRBS, &mut want_half).expect("decodes");
        let src = DeviceBuffer::alloc(0, prbs.len()).unwrap();
        src.write(0, &prbs).unwrap();
        let out = DeviceBuffer::alloc(0, PRBS * 24 * 4).unwrap();
        for half in [false, true] {
            // SAFETY: both buffers are live device memory of the sizes given.
            unsafe { gpu.decode_bfp(src.device_ptr(), PRBS as u32, width, half, out.device_ptr()) }
                .unwrap();
            gpu.sync().unwrap();
            let mut got = vec![0u8; PRBS * 24 * if half { 2 } else { 4 }];
            out.read(0, &mut got).unwrap();
            assert_same_values(&got, half, (&want, &want_half.0), &format!("width {width}"));
        }
    }
}

/// The fixed-point kernel against its CPU twins (`dataplane::protocol::iq`): random
/// samples in every storage, read out of VITA-49 packets and of uncompressed O-RAN PRBs
/// by the CPU decoders, and out of the same payload bytes by the kernel; `f32` and half.
#[test]
fn the_fixed_point_kernel_matches_the_vrt_and_ecpri_decoders_bit_for_bit() {
    use dataplane::protocol::iq::{
        Compression, F16Sink, IqSink, SampleFormat, decode_ecpri_uplane, decode_vrt,
    };
    use gpudirect::SampleStorage;
    /// The CPU decoders on `payload` wrapped as eCPRI IQ data with one U-plane section of
    /// uncompressed PRBs, or as a VITA-49 signal data packet (type 0, header word only).
    fn cpu_decode(payload: &[u8], format: SampleFormat, ecpri: bool, sink: &mut impl IqSink) {
        let samples = if ecpri {
            let prbs = (payload.len() / 48) as u8;
            let mut body = vec![0, 1, 2, 0, 0x10, 1, 0, 0, 0, 0x10, 0, prbs];
            body.extend_from_slice(payload);
            let mut m = vec![0x10, 0x00];
            m.extend_from_slice(&(body.len() as u16).to_be_bytes());
            m.extend_from_slice(&body);
            decode_ecpri_uplane(&m, Compression::None, 273, sink)
                .expect("decodes")
                .samples
        } else {
            let words = 1 + payload.len() / 4;
            let mut p = (words as u32).to_be_bytes().to_vec();
            p.extend_from_slice(payload);
            decode_vrt(&p, format, sink).expect("decodes").samples
        };
        assert_eq!(samples * format.bytes(), payload.len());
    }
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let mut gpu = Gpu::new(0).expect("kernels compile and load");
    let mut rng = Rng(0x0f1c_ed00_5a3b_1e55);
    const SAMPLES: usize = 3000; // 250 PRBs
    let cases = [
        (SampleFormat::I8, SampleStorage::I8, false),
        (SampleFormat::I16Be, SampleStorage::I16Be, false),
        (SampleFormat::I16Le, SampleStorage::I16Le, false),
        (SampleFormat::I16Be, SampleStorage::I16Be, true), // eCPRI, uncompressed
    ];
    for (format, storage, ecpri) in cases {
        let mut payload = vec![0u8; SAMPLES * format.bytes()];
        rng.fill(&mut payload);
        let mut want = Vec::<f32>::new();
        cpu_decode(&payload, format, ecpri, &mut want);
        let mut want_half = F16Sink::default();
        cpu_decode(&payload, format, ecpri, &mut want_half);
        let src = DeviceBuffer::alloc(0, payload.len()).unwrap();
        src.write(0, &payload).unwrap();
        let out = DeviceBuffer::alloc(0, SAMPLES * 2 * 4).unwrap();
        for half in [false, true] {
            // SAFETY: both buffers are live device memory of the sizes given.
            unsafe {
                gpu.decode_fixed_iq(
                    src.device_ptr(),
                    SAMPLES as u64,
                    storage,
                    half,
                    out.device_ptr(),
                )
            }
            .unwrap();
            gpu.sync().unwrap();
            let mut got = vec![0u8; SAMPLES * 2 * if half { 2 } else { 4 }];
            out.read(0, &mut got).unwrap();
            let case = format!("{format:?}, eCPRI {ecpri}");
            assert_same_values(&got, half, (&want, &want_half.0), &case);
        }
    }
}

/// SPEAD heaps through the software loopback into chunks in GPU memory
/// (`chunk_region` of kind `device`): the GPU copies every payload out of the packet's
/// pinned receive buffer, and each chunk read back from the GPU holds its heaps exactly.
#[test]
fn spead_chunks_land_in_gpu_memory_byte_for_byte() {
    use dataplane::protocol::spead::{self, Flavour, HeapPackets};
    use std::net::SocketAddrV4;
    use std::time::{Duration, Instant};
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    const HEAP: usize = 6000;
    let text = common::LoopPair {
        kind: "host_pinned",
        core: 1,
        regions: "- {name: chunks, kind: device, affinity: 0, num_bufs: 3, buf_size: 24000}",
        rx_queue: "timeout_us: 100\nmemory_regions: [rx]\nprotocol:\n  spead: {heap_bytes: 6000, heaps_per_chunk: 4, max_chunks: 2, chunk_region: chunks}",
        ..Default::default()
    }
    .text();
    let cfg = dataplane::config::load_str(&text, "spead-gpu.yaml")
        .unwrap()
        .config;
    let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
    let mut tx = plane.take_tx_queue("loop0", 0).unwrap();
    let mut stream = plane.take_spead_stream("loop0", 0).expect("a SPEAD queue");
    let udp = dataplane::packet::UdpFrame::new(
        "10.0.0.1:7000".parse::<SocketAddrV4>().unwrap(),
        "10.0.0.2:7001".parse::<SocketAddrV4>().unwrap(),
    );
    let flavour = Flavour::SPEAD_64_48;
    let payload =
        |h: u64| -> Vec<u8> { (0..HEAP).map(|i| (i as u64 * 13 + h * 71) as u8).collect() };
    let heaps = 40u64;
    let mut frames = Vec::new();
    for h in 0..heaps {
        let body = payload(h);
        let mut p = HeapPackets::new(flavour, h, &[], &body, 1400).unwrap();
        let mut datagram = Vec::new();
        while p.next_into(&mut datagram) {
            let mut f = vec![0u8; udp.header_len() + datagram.len()];
            udp.write(&datagram, &mut f).unwrap();
            frames.push(f);
        }
    }
    let stop = spead::stream_stop_packet(flavour, heaps);
    let mut f = vec![0u8; udp.header_len() + stop.len()];
    udp.write(&stop, &mut f).unwrap();
    frames.push(f);
    let mut next = 0;
    let mut checked = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "{:?}", stream.counters());
        // Send fewer packets a pass than a chunk holds (20), taking every finished chunk
        // in between, so that the three chunk memories suffice (each chunk is given back
        // once checked).
        {
            if next < frames.len() {
                let group = &frames[next..(next + 8).min(frames.len())];
                if let Ok(mut b) = tx.alloc(group.len()) {
                    for (k, f) in group.iter().enumerate() {
                        b.buffer_mut(k, 0).unwrap()[..f.len()].copy_from_slice(f);
                        b.set_len(k, 0, f.len());
                    }
                    if tx.send(b).is_ok() {
                        next += group.len();
                    }
                }
            }
        }
        while let Some(c) = stream.recv(Duration::from_millis(20)).unwrap() {
            assert!(
                stream.chunk_bytes(&c).is_none(),
                "GPU memory is not for the CPU"
            );
            let addr = stream.chunk_address(&c).expect("in the region");
            let mut got = vec![0u8; 4 * HEAP];
            // SAFETY: the chunk's buffer is live device memory of the region, 24000 bytes.
            unsafe { gpudirect::read_device(0, addr, &mut got) }.unwrap();
            for i in 0..4 {
                let h = c.id * 4 + i as u64;
                if c.present[i] == 1 {
                    assert!(got[i * HEAP..(i + 1) * HEAP] == payload(h), "heap {h}");
                    checked += 1;
                }
            }
            stream.recycle(c);
        }
        if stream.stopped() {
            break;
        }
    }
    let n = stream.counters();
    assert_eq!(checked, heaps, "{n:?}");
    assert_eq!(
        (n.heaps_complete, n.packets_no_free_chunk),
        (heaps, 0),
        "{n:?}"
    );
    drop((tx, stream));
    plane.shutdown().unwrap();
}

/// A VITA-49 signal data packet with a stream id (type 1) of 16-bit big-endian samples.
fn vrt_packet(stream: u32, count: u8, samples: &[u8]) -> Vec<u8> {
    let words = 2 + samples.len() / 4;
    let h: u32 = (1 << 28) | (u32::from(count & 0xf) << 16) | words as u32;
    let mut p = h.to_be_bytes().to_vec();
    p.extend_from_slice(&stream.to_be_bytes());
    p.extend_from_slice(samples);
    p
}

/// An eCPRI IQ data message of one O-RAN U-plane message whose sections hold
/// `sections[k]` PRBs of `prb_bytes` random bytes each.
fn uplane_message(rng: &mut Rng, sequence: u8, sections: &[u8], prb_bytes: usize) -> Vec<u8> {
    let mut body = vec![0, 3, sequence, 0x80, 0x10, 1, 0, 0];
    for (k, &prbs) in sections.iter().enumerate() {
        body.extend_from_slice(&[(k as u8) << 4, 0, 0, prbs]);
        let mut data = vec![0u8; usize::from(prbs) * prb_bytes];
        rng.fill(&mut data);
        body.extend_from_slice(&data);
    }
    let mut m = vec![0x10, 0x00];
    m.extend_from_slice(&(body.len() as u16).to_be_bytes());
    m.extend_from_slice(&body);
    m
}

/// Radio queues on the software loopback decoded by the GPU into a `sample_region`:
/// VITA-49 16-bit samples as `f32`, and eCPRI block floating point PRBs (9-bit
/// mantissas) as half precision. Every batch read back from GPU memory is the CPU
/// decoder's output for the same packets, bit for bit; the packet entries and counters
/// (a context packet among them, counted as not IQ data) are the same.
#[test]
fn radio_queues_decoded_on_the_gpu_match_the_cpu_bit_for_bit() {
    use dataplane::protocol::iq::{
        Compression, IqBatch, IqDecoder, IqFormat, IqSamples, Precision, SampleFormat,
    };
    use std::net::SocketAddrV4;
    use std::time::{Duration, Instant};
    let mut rng = Rng(0x1a9d_ec0d_e000_0001);
    let bfp = Compression::BlockFloatingPoint { iq_width: 9 };
    let vrt_packets: Vec<Vec<u8>> = (0..300u32)
        .map(|k| {
            if k == 150 {
                // A context packet (type 4): not IQ data.
                return vec![0x40, 0, 0, 2, 0, 0, 0, 7];
            }
            let mut samples = vec![0u8; 4 * (100 + (k as usize * 37) % 300)];
            rng.fill(&mut samples);
            vrt_packet(7, k as u8, &samples)
        })
        .collect();
    let ecpri_packets: Vec<Vec<u8>> = (0..200u32)
        .map(|k| {
            uplane_message(
                &mut rng,
                k as u8,
                &[10, 1 + (k % 40) as u8],
                bfp.prb_bytes(),
            )
        })
        .collect();
    let cases = [
        (
            "vrt: {samples: i16_be, sample_region: samples}",
            IqFormat::Vrt {
                samples: SampleFormat::I16Be,
            },
            Precision::F32,
            &vrt_packets,
        ),
        (
            "ecpri_uplane: {compression: block_floating_point, iq_width: 9, prbs_when_zero: 273, precision: f16, sample_region: samples}",
            IqFormat::EcpriUplane {
                compression: bfp,
                prbs_when_zero: 273,
            },
            Precision::F16,
            &ecpri_packets,
        ),
    ];
    // The CPU twin first (it runs everywhere): every generated packet decodes.
    let twins: Vec<(IqDecoder, IqBatch)> = cases
        .iter()
        .map(|&(_, format, precision, packets)| {
            let mut cpu = IqDecoder::new(format, precision);
            let mut want = IqBatch::new(precision);
            for p in packets.iter() {
                let _ = cpu.decode(p, 0, &mut want);
            }
            (cpu, want)
        })
        .collect();
    assert_eq!(twins[0].0.counters().packets, 299);
    assert_eq!(twins[0].0.counters().packets_not_iq, 1);
    assert_eq!(twins[1].0.counters().packets, 200);
    assert_eq!(twins[1].0.counters().packets_missing, 0);
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let udp = dataplane::packet::UdpFrame::new(
        "10.0.0.1:7000".parse::<SocketAddrV4>().unwrap(),
        "10.0.0.2:7001".parse::<SocketAddrV4>().unwrap(),
    );
    for ((protocol, format, precision, packets), (cpu, want)) in cases.into_iter().zip(twins) {
        let text = common::LoopPair {
            interface: "radio",
            kind: "host_pinned",
            core: 1,
            regions: "- {name: samples, kind: device, affinity: 0, num_bufs: 4, buf_size: 1048576}",
            rx_queue: &format!("timeout_us: 100\nmemory_regions: [rx]\nprotocol:\n  {protocol}"),
            ..Default::default()
        }
        .text();
        let cfg = dataplane::config::load_str(&text, "iq-gpu.yaml")
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .config;
        eprintln!("radio: starting the plane");
        let mut plane = dataplane::DataPlane::start(&cfg).expect("start");
        let mut tx = plane.take_tx_queue("radio", 0).unwrap();
        let mut stream = plane.take_iq_stream("radio", 0).expect("a radio queue");
        eprintln!("radio: started");
        assert!(
            stream.recv(Duration::ZERO).is_err(),
            "a GPU queue is read with recv_gpu"
        );
        for group in packets.chunks(16) {
            let mut b = tx.alloc(group.len()).expect("buffers");
            for (k, p) in group.iter().enumerate() {
                let n = udp.write(p, b.buffer_mut(k, 0).unwrap()).unwrap();
                b.set_len(k, 0, n);
            }
            tx.send_within(b, Duration::from_secs(5)).expect("queued");
        }
        eprintln!("radio: sent {}", packets.len());
        let (mut got, mut entries) = (Vec::new(), Vec::new());
        let deadline = Instant::now() + Duration::from_secs(60);
        while {
            let n = stream.counters();
            n.packets + n.packets_not_iq + n.packets_damaged < packets.len() as u64
        } {
            assert!(Instant::now() < deadline, "{:?}", stream.counters());
            let Some(batch) = stream.recv_gpu(Duration::from_millis(20)).unwrap() else {
                continue;
            };
            eprintln!("radio: batch of {} packets", batch.packets.len());
            let mut bytes = vec![0u8; batch.bytes()];
            // SAFETY: the batch's buffer is live device memory of the sample region,
            // holding `bytes()` decoded bytes until it is recycled.
            unsafe { gpudirect::read_device(0, batch.address(), &mut bytes) }.unwrap();
            let before = entries
                .last()
                .map_or(0, |e: &dataplane::protocol::iq::IqPacket| {
                    e.first_sample + e.samples
                });
            for mut e in batch.packets.iter().copied() {
                e.first_sample += before;
                entries.push(e);
            }
            got.extend_from_slice(&bytes);
            stream.recycle_gpu(batch);
        }
        let case = format!("{format:?} {precision:?}");
        assert_eq!(stream.counters(), cpu.counters(), "{case}");
        assert_eq!(entries, want.packets, "{case}");
        let want_bytes: Vec<u8> = match &want.samples {
            IqSamples::F32(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
            IqSamples::F16(v) => v.iter().flat_map(|x| x.to_ne_bytes()).collect(),
        };
        assert!(
            got.len() == want_bytes.len() && got == want_bytes,
            "{case}: samples differ"
        );
        assert_eq!(
            stream.counters().packets_not_iq,
            u64::from(
                format
                    == IqFormat::Vrt {
                        samples: SampleFormat::I16Be
                    }
            )
        );
        drop((tx, stream));
        plane.shutdown().unwrap();
    }
}
