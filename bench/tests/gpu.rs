//! GPU tests. Without a CUDA driver each prints "SKIP: no CUDA driver" and passes (CI has
//! no GPU); on a GPU machine they run for real:
//! - the kernels against the CPU oracle (`gpudirect::reorder`), bit for bit, on random
//!   data with missing, duplicate-free shuffled and too-short packets, every conversion;
//! - the gather and digest kernels against CPU copies and sums;
//! - the software loopback into GPU memory (batched, both stage modes), with header-data
//!   split, and with a GPU reorder, lossless with every frame verified on the GPU;
//! - the frame writer kernel against its CPU model, and the reference's reorder-quantize
//!   example in GPU memory end to end (GPU-written frames, GPU reorder and conversion).

#[macro_use]
mod common;

use dataplane_bench::traffic::payload_sum;
use gpudirect::reorder::{
    BitField, Conversion, InputType, Method, OutputType, ReorderSpec, reorder_cpu,
};
#[path = "common/gpu.rs"]
mod gpu_common;

use gpu_common::{Rng, gpu_alone};
use gpudirect::{DeviceBuffer, Gpu, PinnedBuffer};

const SLOT: usize = 1024;

/// Random packets of one batch for `spec`: a shuffled subset of the slots, random payload
/// lengths (some longer than a slot), and one packet too short for its sequence number.
fn random_batch(rng: &mut Rng, spec: &ReorderSpec, batch_id: u32) -> Vec<Vec<u8>> {
    let ppb = spec.packets_per_batch();
    let mut slots: Vec<u32> = (0..ppb).filter(|_| rng.below(8) != 0).collect();
    for i in (1..slots.len()).rev() {
        slots.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let seq_field = spec.sequence();
    let mut out = Vec::new();
    for s in slots {
        let len = spec.payload_byte_offset as usize
            + rng.below(spec.in_slot_bytes as u64 + 64) as usize
            + 1;
        let len = len.max(seq_field.end_byte());
        let mut p = vec![0u8; len];
        rng.fill(&mut p);
        let seq = match spec.method {
            Method::SeqPacketsPerBatch { .. } => batch_id * ppb + s,
            Method::SeqBatchNumber { batch, .. } => {
                write_field(&mut p, batch, batch_id);
                s + ppb * rng.below(2) as u32
            }
        };
        write_field(&mut p, seq_field, seq);
        out.push(p);
    }
    out.insert(out.len() / 2, vec![0xAB; 3]); // too short: skipped by both
    out
}

fn write_field(p: &mut [u8], f: BitField, value: u32) {
    for b in 0..f.bit_width {
        let bit = (value >> (f.bit_width - 1 - b)) & 1;
        let at = (f.bit_offset + b) as usize;
        let mask = 0x80u8 >> (at % 8);
        if bit == 1 {
            p[at / 8] |= mask;
        } else {
            p[at / 8] &= !mask;
        }
    }
}

fn specs() -> Vec<ReorderSpec> {
    let conversions = [
        None,
        Some((InputType::Int4, OutputType::Fp16, true)),
        Some((InputType::Int4, OutputType::Fp32, false)),
        Some((InputType::Int8, OutputType::Bf16, false)),
        Some((InputType::Int16, OutputType::Fp32, true)),
        Some((InputType::Int16, OutputType::Fp16, false)),
        Some((InputType::Int32, OutputType::Fp16, true)),
        Some((InputType::Int32, OutputType::Bf16, false)),
    ];
    let methods = [
        Method::SeqPacketsPerBatch {
            sequence: BitField {
                bit_offset: 64,
                bit_width: 16,
            },
            packets_per_batch: 64,
        },
        Method::SeqBatchNumber {
            sequence: BitField {
                bit_offset: 83,
                bit_width: 10,
            },
            batch: BitField {
                bit_offset: 72,
                bit_width: 4,
            },
        },
    ];
    let mut out = Vec::new();
    for method in methods {
        for c in conversions {
            out.push(ReorderSpec {
                method,
                payload_byte_offset: 16,
                in_slot_bytes: 256,
                conversion: c.map(|(input, output, network_order)| Conversion {
                    input,
                    output,
                    network_order,
                }),
            });
        }
    }
    out
}

#[test]
fn the_reorder_kernel_matches_the_cpu_oracle_bit_for_bit() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let mut gpu = Gpu::new(0).expect("kernels compile and load");
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let input = DeviceBuffer::alloc(0, 1024 * SLOT).unwrap();
    let pinned = PinnedBuffer::alloc(0, 1024 * SLOT).unwrap();
    let mut cases = 0;
    for spec in specs() {
        for batch_id in [0u32, 5] {
            let packets = random_batch(&mut rng, &spec, batch_id);
            let mut want = vec![0u8; spec.batch_bytes()];
            let refs: Vec<&[u8]> = packets.iter().map(|p| p.as_slice()).collect();
            let (want_batch, _) = reorder_cpu(&spec, &refs, &mut want);
            // The same packets from device memory and from pinned host memory.
            for from_pinned in [false, true] {
                let mut addrs = Vec::new();
                for (k, p) in packets.iter().enumerate() {
                    assert!(p.len() <= SLOT);
                    let at = k * SLOT;
                    if from_pinned {
                        // SAFETY: the pinned buffer has room; nothing else uses it now.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                p.as_ptr(),
                                pinned.as_ptr().add(at),
                                p.len(),
                            )
                        };
                        addrs.push((pinned.as_ptr() as u64 + at as u64, p.len() as u32));
                    } else {
                        input.write(at, p).unwrap();
                        addrs.push((input.device_ptr() + at as u64, p.len() as u32));
                    }
                }
                let out = DeviceBuffer::alloc(0, spec.batch_bytes()).unwrap();
                // Garbage first: the kernel's own zeroing must clear untouched slots.
                out.write(0, &vec![0x5a; spec.batch_bytes()]).unwrap();
                // SAFETY: inputs and output are live GPU-reachable buffers.
                let got_batch = unsafe { gpu.reorder(&spec, &addrs, out.device_ptr()) }.unwrap();
                let mut got = vec![0u8; spec.batch_bytes()];
                out.read(0, &mut got).unwrap();
                assert_eq!(got_batch, want_batch, "batch id, {spec:?}");
                if got != want {
                    let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap();
                    panic!(
                        "GPU and CPU differ at byte {first} for {spec:?} (pinned: {from_pinned})"
                    );
                }
                cases += 1;
            }
        }
    }
    eprintln!("{cases} reorder cases identical on GPU and CPU");
}

#[test]
fn gather_and_digest_kernels_match_the_cpu() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let mut gpu = Gpu::new(0).unwrap();
    let mut rng = Rng(77);
    let src = DeviceBuffer::alloc(0, 512 * 2048).unwrap();
    let dst = DeviceBuffer::alloc(0, 512 * 2048).unwrap();
    let mut host = vec![0u8; 512 * 2048];
    rng.fill(&mut host);
    src.write(0, &host).unwrap();
    // Arrival-order gather: packets of random length (odd offsets too) packed end to end.
    let mut items = Vec::new();
    let mut packed = Vec::new();
    for k in 0..512u64 {
        let off = k * 2048 + rng.below(7);
        let len = 1 + rng.below(2000) as u32;
        items.push((
            src.device_ptr() + off,
            dst.device_ptr() + packed.len() as u64,
            len,
        ));
        packed.extend_from_slice(&host[off as usize..off as usize + len as usize]);
    }
    // SAFETY: every range lies inside `src` or `dst`.
    unsafe { gpu.batched_copy(&items) }.unwrap();
    gpu.sync().unwrap();
    let mut got = vec![0u8; packed.len()];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, packed, "gather");
    let refs: Vec<&[u8]> = items
        .iter()
        .map(|&(s, _, l)| {
            let o = (s - src.device_ptr()) as usize;
            &host[o..o + l as usize]
        })
        .collect();
    let mut cpu_gather = vec![0u8; packed.len()];
    assert_eq!(
        gpudirect::reorder::gather_cpu(&refs, &mut cpu_gather),
        packed.len()
    );
    assert_eq!(cpu_gather, packed, "CPU gather is the oracle");
    // Digest: sums from byte 26 and head/tail copies, odd lengths included.
    let frames: Vec<(u64, u32)> = (0..512u64)
        .map(|k| (src.device_ptr() + k * 2048, 62 + rng.below(1900) as u32))
        .collect();
    let (mut sums, mut digests) = (vec![0u64; 512], vec![0u8; 512 * 62]);
    // SAFETY: the frames lie inside `src`.
    unsafe { gpu.frame_digest(&frames, 26, (42, 20), &mut sums, &mut digests) }.unwrap();
    for (k, &(a, l)) in frames.iter().enumerate() {
        let f = &host[(a - src.device_ptr()) as usize..][..l as usize];
        assert_eq!(sums[k], payload_sum(f), "sum of frame {k}");
        assert_eq!(&digests[k * 62..k * 62 + 42], &f[..42]);
        assert_eq!(&digests[k * 62 + 42..k * 62 + 62], &f[f.len() - 20..]);
    }
}

fn run_gpu_config(name: &str, mode: Option<dataplane::stage::StageMode>) {
    run_gpu_config_with(name, mode, |_| {});
}

/// As [`run_gpu_config`], with `edit` applied to the loaded configuration.
fn run_gpu_config_with(
    name: &str,
    mode: Option<dataplane::stage::StageMode>,
    edit: impl FnOnce(&mut dataplane::config::Config),
) {
    run_gpu_bench(name, mode, false, edit);
}

/// Runs `bench raw` on config `name` (the generator and checker on threads of their own,
/// or in the workers' handlers with `inline`) and checks it was lossless with every frame
/// verified on the GPU.
fn run_gpu_bench(
    name: &str,
    mode: Option<dataplane::stage::StageMode>,
    inline: bool,
    edit: impl FnOnce(&mut dataplane::config::Config),
) {
    let mut cfg = dataplane::config::load_file(&common::config_path(name))
        .expect("config")
        .config;
    cfg.master_core = 0;
    if let Some(m) = mode {
        cfg.gpu_stage = m;
    }
    edit(&mut cfg);
    let report = dataplane_bench::raw::run(
        &cfg,
        &dataplane_bench::raw::RawOptions {
            verify_payload: true,
            inline,
            ..dataplane_bench::raw::RawOptions::new(2.0)
        },
        &std::sync::atomic::AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("{name}: bench runs: {e}"));
    eprint!("{name} ({mode:?}, inline {inline}):\n{}", report.human());
    assert!(report.lossless, "{name}: {:?}", report.problems);
    assert!(report.rx_packets > 0);
    match &report.reorder {
        None => assert_eq!(
            report.checker.valid, report.rx_packets,
            "every frame verified (UDP checksum summed on the GPU)"
        ),
        Some(r) => {
            assert_eq!(r.bad_batches, 0);
            assert_eq!(r.verified_batches, r.batches + r.timeout_batches);
            assert_eq!(r.aggregated_packets, report.tx_packets);
        }
    }
}

#[test]
fn loopback_into_device_memory_is_lossless_and_verified_on_the_gpu() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    use dataplane::stage::StageMode;
    for mode in [StageMode::Kernel, StageMode::Copy] {
        run_gpu_config("gpu_loopback_64.yaml", Some(mode));
        run_gpu_config("gpu_loopback_8k.yaml", Some(mode));
    }
}

/// The same loopbacks run to completion: generator and checker in the workers' handlers
/// (`bench raw --inline`), the RX stage on the worker's core before the handler sees the
/// burst; lossless, every frame verified on the GPU.
#[test]
fn run_to_completion_into_device_memory_is_lossless_and_verified_on_the_gpu() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    use dataplane::stage::StageMode;
    for mode in [StageMode::Kernel, StageMode::Copy] {
        for name in ["gpu_loopback_64.yaml", "gpu_loopback_8k.yaml"] {
            run_gpu_bench(name, Some(mode), true, |_| {});
        }
    }
}

/// The same loopbacks with the RX queue's stage on a worker of its own (`stage_core: 2`):
/// lossless, every frame verified on the GPU.
#[test]
fn loopback_into_device_memory_staged_on_its_own_core() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    if !dataplane::affinity::core_is_usable(2) {
        eprintln!("SKIP: stage_core 2 needs a third core");
        return;
    }
    for name in ["gpu_loopback_64.yaml", "gpu_loopback_8k.yaml"] {
        run_gpu_config_with(name, None, |cfg| {
            cfg.interfaces[0].rx.as_mut().expect("an RX side").queues[0].stage_core = Some(2)
        });
    }
}

#[test]
fn loopback_with_header_data_split_into_host_and_device_memory() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    run_gpu_config("gpu_loopback_hds.yaml", None);
}

#[test]
fn loopback_with_a_gpu_reorder_delivers_verified_batches() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    run_gpu_config("gpu_loopback_reorder.yaml", None);
}

#[test]
fn without_a_driver_device_configs_fail_with_a_cuda_message() {
    if gpudirect::driver_present() {
        eprintln!("a CUDA driver is present: the failure path is not reachable here");
        return;
    }
    let cfg = dataplane::config::load_file(&common::config_path("gpu_loopback_64.yaml"))
        .expect("the config validates without a GPU")
        .config;
    let err = match dataplane::DataPlane::start(&cfg) {
        Ok(_) => panic!("started without a GPU"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("no CUDA driver found"), "{err}");
    assert!(
        err.contains("memory region tx_pinned"),
        "names the region: {err}"
    );
}

/// Kernel sockets over 127.0.0.1 into GPU memory (RX through the stage) and out of it
/// (TX staged to host): every message verified on the GPU by its digest.
#[test]
fn sockets_into_and_out_of_gpu_memory_verified_on_the_gpu() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    use dataplane_bench::socket::{self, Mode, SocketBenchOptions};
    for (name, target) in [
        ("gpu_socket_udp.yaml", Some(2.0)),
        ("gpu_socket_tcp.yaml", None),
    ] {
        let mut cfg = dataplane::config::load_file(&common::config_path(name))
            .expect("config")
            .config;
        cfg.master_core = 0;
        let opts = SocketBenchOptions {
            mode: Mode::Both,
            seconds: 2.0,
            target_gbps: target,
            message_size: None,
            connect_timeout: std::time::Duration::from_secs(10),
            queued_bursts: socket::QUEUED_BURSTS,
            time_stages: false,
            work: socket::SocketWork::Full,
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = socket::run(&cfg, &opts, &stop).expect("bench runs");
        eprint!("{name}:\n{}", r.human());
        assert!(r.lossless, "{name}");
        assert!(r.total.messages_received > 1000, "{name}");
        let server = r.server.as_ref().unwrap();
        let client = r.client.as_ref().unwrap();
        assert_eq!(
            server.traffic.bytes_received, client.traffic.bytes_sent,
            "{name}"
        );
    }
}

/// The reference's GDS writer example with its RX region in GPU memory (its TX region
/// made `host_pinned`, since `bench raw`'s generator writes frames on the CPU): every RX
/// queue's packets go from GPU memory to the file through cuFile, in each format, and
/// every written frame reads back valid (tcpdump for pcap and pcapng, the frame checker
/// for all).
#[test]
fn gds_capture_from_gpu_memory_reads_back_in_every_format() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    if !gpudirect::gds::cufile_present() {
        eprintln!(
            "SKIP: no cuFile library (libcufile.so) on the library path: GDS capture not run"
        );
        return;
    }
    let Some(text) =
        common::mapped_reference_example("daqiri_example_gds_write_sw_loopback.yaml", 1, false)
    else {
        return;
    };
    let text = text.replacen("kind: \"device\"", "kind: \"host_pinned\"", 1);
    let cfg = dataplane::config::load_str(&text, "gds_write.yaml")
        .expect("mapped example")
        .config;
    eprintln!("cuFile mode: {}", gpudirect::gds::storage_mode());
    let dir = tempfile::tempdir().unwrap();
    use dataplane::capture::CaptureFormat;
    for format in [
        CaptureFormat::Pcap,
        CaptureFormat::Pcapng,
        CaptureFormat::Raw,
        CaptureFormat::RawPerPacket,
    ] {
        let path = dir.path().join(format!("gds.{}", format.name()));
        let c = dataplane::capture::capture_bench_rx(&cfg, &path, format, true);
        let report = dataplane_bench::raw::run(
            &c,
            &dataplane_bench::raw::RawOptions {
                target_gbps: Some(1.0),
                ..dataplane_bench::raw::RawOptions::new(1.0)
            },
            &std::sync::atomic::AtomicBool::new(false),
        )
        .expect("runs");
        assert!(report.lossless, "{:?}", report.problems);
        let cap = &report.captures[0];
        assert!(cap.error.is_none(), "{:?}", cap.error);
        let s = cap.stats;
        assert_eq!(s.copy_failed, 0);
        assert_eq!(s.not_host, 0, "GPU packets go through the GPU sink");
        assert_eq!(s.written_packets + s.writer_full, s.submitted, "{s:?}");
        assert!(s.written_packets > 0);
        let frames: Vec<Vec<u8>> = match format {
            CaptureFormat::Pcap | CaptureFormat::Pcapng => {
                // tcpdump where installed; the library's reader (pcap-file) otherwise, so
                // that a machine without tcpdump still checks every format.
                let read = common::tcpdump(&path).unwrap_or_else(|| {
                    dataplane::capture::read_capture(&path)
                        .unwrap_or_else(|e| panic!("{e}"))
                        .into_iter()
                        .map(|f| (f.timestamp_ns, f.bytes))
                        .collect()
                });
                assert!(read.windows(2).all(|w| w[0].0 <= w[1].0), "times in order");
                read.into_iter().map(|(_, b)| b).collect()
            }
            CaptureFormat::Raw => std::fs::read(&path)
                .unwrap()
                .chunks(316)
                .map(<[u8]>::to_vec)
                .collect(),
            CaptureFormat::RawPerPacket => {
                let mut files: Vec<_> = std::fs::read_dir(&path)
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .collect();
                files.sort();
                files.iter().map(|f| std::fs::read(f).unwrap()).collect()
            }
        };
        assert_eq!(frames.len() as u64, s.written_packets, "{}", format.name());
        let valid = common::check_captured_frames(frames.iter().map(Vec::as_slice));
        assert_eq!(valid, s.written_packets);
        eprintln!(
            "GDS capture {}: {} of {} packets written from GPU memory and read back valid ({} writer_full, through cuFile: {})",
            format.name(),
            s.written_packets,
            s.submitted,
            s.writer_full,
            s.through_cufile
        );
    }
}

/// The integrated-GPU check against this machine's own GPU: the DGX Spark template with
/// `device` regions (which its two ConnectX functions would fill by DMA) is refused exactly
/// when the CUDA driver calls GPU 0 integrated, with `host_pinned` as the fix. On the H200
/// host (discrete) it plans; on a GB10 it is refused.
#[test]
fn the_spark_template_with_device_regions_follows_what_the_driver_says_of_this_gpu() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let integrated = gpudirect::is_integrated(0).expect("CU_DEVICE_ATTRIBUTE_INTEGRATED");
    eprintln!("GPU 0 integrated: {integrated}");
    let template = std::fs::read_to_string(common::config_path("dgx_spark_template.yaml"))
        .unwrap()
        .replace("kind: \"host_pinned\"", "kind: \"device\"");
    // `<value>` placeholders keep their example value; MAC placeholders get one.
    let mut parts = template.split('<');
    let mut text = parts.next().unwrap_or_default().to_string();
    for part in parts {
        let (inner, rest) = part.split_once('>').expect("a closed placeholder");
        text.push_str(if inner.contains("MAC") {
            "02:00:00:00:00:01"
        } else {
            inner
        });
        text.push_str(rest);
    }
    let cfg = dataplane::config::load_str(&text, "spark_device.yaml")
        .expect("loads")
        .config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plans");
    assert_eq!(
        plan.gpu_memory_nics_reach().len(),
        2,
        "both RX regions are reached by DMA"
    );
    let checked = plan.check_integrated_gpus(&|r| {
        dataplane::sysinfo::gpu_is_integrated(r.affinity, r.gpu_uuid.as_deref())
    });
    match checked {
        Ok(()) => assert!(
            !integrated,
            "an integrated GPU let a NIC DMA into device memory"
        ),
        Err(e) => {
            assert!(integrated, "a discrete GPU was refused: {e}");
            assert!(e.to_string().contains("host_pinned"), "{e}");
        }
    }
}

/// Regions pick their GPU by UUID as well as by ordinal; a UUID or ordinal that is not
/// there fails at start naming the GPUs present.
#[test]
fn gpus_are_chosen_by_uuid_and_missing_ones_name_those_present() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let gpus = gpudirect::gpus().expect("GPU list");
    eprintln!("GPUs: {}", gpudirect::describe(&gpus));
    let text = std::fs::read_to_string(common::config_path("gpu_loopback_64.yaml")).unwrap();
    let with = |affinity: &str| {
        let t = text.replace(
            "kind: \"device\", affinity: 0",
            &format!("kind: \"device\", affinity: \"{affinity}\""),
        );
        assert_ne!(t, text, "the config names its device region's GPU");
        dataplane::config::load_str(&t, "uuid.yaml")
            .expect("loads")
            .config
    };
    let mut cfg = with(&gpus[0].uuid.to_lowercase());
    cfg.master_core = 0;
    let report = common::run_bench(&cfg, 0.5);
    assert!(report.lossless, "{:?}", report.problems);

    let err = dataplane::DataPlane::start(&with("GPU-00000000-0000-0000-0000-000000000000"))
        .err()
        .expect("no such GPU")
        .to_string();
    assert!(err.contains("GPUs present: 0: "), "{err}");
    assert!(err.contains(&gpus[0].uuid), "{err}");
    eprintln!("{err}");

    let missing = text.replace(
        "kind: \"device\", affinity: 0",
        &format!("kind: \"device\", affinity: {}", gpus.len()),
    );
    let c = dataplane::config::load_str(&missing, "missing.yaml")
        .unwrap()
        .config;
    let err = dataplane::DataPlane::start(&c)
        .err()
        .expect("no such GPU")
        .to_string();
    assert!(
        err.contains("does not exist") && err.contains(&gpus[0].uuid),
        "{err}"
    );
    eprintln!("{err}");
}

/// A DPDK virtual device cannot write GPU memory: its RX queue in a `device` region
/// receives into a pinned staging region and the worker's stage copies each burst into
/// GPU memory; every frame is verified on the GPU. (EAL starts once per process: the only
/// DPDK test of this binary.)
#[cfg(feature = "dpdk")]
#[test]
fn dpdk_virtual_device_into_gpu_memory_through_staging() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let cfg = dataplane::config::load_file(&common::config_path("gpu_dpdk_ring.yaml"))
        .expect("config")
        .config;
    let plan = dataplane::plan::Plan::from_config(&cfg).expect("plan");
    let q = plan
        .queues
        .iter()
        .find(|q| q.direction == dataplane::config::Direction::Rx)
        .unwrap();
    assert!(q.staging.is_some() && q.stage.is_some(), "staged");
    run_gpu_config("gpu_dpdk_ring.yaml", None);
}

/// The `write_frames` kernel writes exactly what its CPU model writes, which the unit
/// tests compare with the CPU generator: frames of several sizes, with a frame counter and
/// reorder fields inside the IPv4 header, at addresses 4-byte aligned and not.
#[test]
fn the_frame_writer_kernel_matches_its_cpu_model() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    use dataplane_bench::traffic::{FrameBuilder, ReorderFields};
    let mut gpu = Gpu::new(0).unwrap();
    let text = common::mapped_reference_example(
        "daqiri_bench_raw_tx_rx_reorder_quantize_seq_batch.yaml",
        1,
        true,
    );
    let base = match text {
        Some(t) => dataplane::config::load_with(&t, "quantize", &|_| true)
            .unwrap()
            .config
            .bench
            .tx[0]
            .clone(),
        None => return,
    };
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
    for (header, payload, offset) in [(64u32, 256u32, 0u64), (43, 1001, 1), (64, 8000, 2)] {
        let cfg = dataplane::config::BenchTxConfig {
            header_size: header,
            payload_size: payload,
            sequence_number: Some(dataplane::config::SequenceField {
                offset: 2,
                start: 9,
            }),
            ..base.clone()
        };
        let mut b = FrameBuilder::new(&cfg, 2).with_reorder_fields(fields);
        let t = b.template();
        let len = b.frame_len();
        let stride = (len + 64) as u64;
        let n = 700; // more than one launch of 512
        let dev = DeviceBuffer::alloc(0, stride as usize * n).unwrap();
        let mut want = vec![0u8; stride as usize * n];
        let mut frames = Vec::new();
        for k in 0..n {
            b.set_send_time(k as u64 * 1000);
            let f = b.next_fields();
            let at = k as u64 * stride + offset;
            gpudirect::frames::write_frame(&t, &f, &mut want[at as usize..]);
            frames.push((dev.device_ptr() + at, f));
        }
        // SAFETY: every frame lies inside `dev`, which lives past the sync.
        unsafe { gpu.write_frames(&t, &frames) }.unwrap();
        gpu.sync().unwrap();
        let mut got = vec![0u8; want.len()];
        dev.read(0, &mut got).unwrap();
        for k in 0..n {
            let at = k * stride as usize + offset as usize;
            assert_eq!(
                &got[at..at + len],
                &want[at..at + len],
                "frame {k} of {len} bytes"
            );
        }
    }
}

/// The reference's reorder-quantize example as written, GPU memory everywhere: the
/// `gpu_direct` generator writes frames into device memory with a kernel, the software
/// loopback steers them by their heads (read by the GPU), the GPU reorder converts int4 to
/// fp32, and every batch is read back and turned into the frames sent.
#[test]
fn the_reference_quantize_example_runs_in_gpu_memory() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let Some(text) = common::mapped_reference_example(
        "daqiri_bench_raw_tx_rx_reorder_quantize_seq_batch.yaml",
        1,
        false,
    ) else {
        return;
    };
    let cfg = dataplane::config::load_with(&text, "quantize example", &|_| true)
        .expect("the mapped example validates")
        .config;
    let report = common::run_bench(&cfg, 2.0);
    common::assert_quantize_verified(&report);
}

/// Untrusted arguments on the GPU side: a burst in GPU memory sent on a kernel-socket TX
/// queue that has no stage out of GPU memory is refused with the burst handed back (the
/// socket would read device addresses with the CPU), and device-buffer offsets past the
/// end (overflowing ones included) are errors, not copies.
#[test]
fn gpu_memory_where_the_cpu_reads_and_offsets_past_the_end_are_refused() {
    let Some(_gpu) = gpu_alone() else {
        return;
    };
    let yaml = config_yaml!(
        socket,
        0,
        r#"    memory_regions:
    - {name: host, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}
    - {name: gpu, kind: device, affinity: 0, num_bufs: 1024, buf_size: 2048}
    interfaces:
    - name: out
      address: 127.0.0.1
      socket_config: {mode: client, local_addr: "udp://127.0.0.1:18300", remote_addr: "udp://127.0.0.1:18301"}
      tx:
        queues: [{name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [host]}]
"#
    );
    let config = dataplane::config::load_str(yaml, "gpu-refusal.yaml")
        .expect("config")
        .config;
    let mut plane = dataplane::DataPlane::start(&config).expect("start");
    let mut tx = plane.take_tx_queue("out", 0).unwrap();
    let regions = plane.regions().clone();
    let gpu = regions.id_of("gpu").unwrap();
    let burst = dataplane::Burst::allocate(
        regions,
        dataplane::memory::PortIndex(0),
        dataplane::memory::QueueId(0),
        &[gpu],
        4,
    )
    .unwrap();
    let e = tx
        .send(burst)
        .expect_err("a GPU burst on a socket queue without a stage");
    assert_eq!(e.reason, dataplane::TxFailure::GpuMemory, "{e}");
    assert_eq!(e.burst.len(), 4, "handed back whole");
    drop(e);
    drop(tx);
    plane.shutdown().unwrap();

    let buf = DeviceBuffer::alloc(0, 4096).unwrap();
    assert!(buf.write(4090, &[0u8; 16]).is_err());
    assert!(buf.write(usize::MAX, &[0u8; 2]).is_err());
    let mut out = [0u8; 8];
    assert!(buf.read(usize::MAX - 3, &mut out).is_err());
    assert!(buf.read(4088, &mut out).is_ok());
}
