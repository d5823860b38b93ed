//! The stage on host memory (always) and with a GPU (feature `cuda`; skipped without a
//! device).

mod host_tests {
    use super::super::*;
    use crate::config::MemoryRegionConfig;
    use crate::plan::StagePlan;

    /// A host-to-host split of 256 packets (about 256 KB, enough to share out) with copy
    /// helpers on this machine's cores: every byte lands in its header or payload buffer.
    #[test]
    fn a_split_shared_with_copy_helpers_arrives_whole() {
        let regions = Arc::new(
            RegionSet::allocate(&[
                MemoryRegionConfig::new("src", MemoryKind::Host, 512, 2048),
                MemoryRegionConfig::new("hdr", MemoryKind::Host, 512, 64),
                MemoryRegionConfig::new("pay", MemoryKind::Host, 512, 2048),
            ])
            .unwrap(),
        );
        let plan = StagePlan {
            split_header_bytes: Some(64),
            gpu: None,
            mode: StageMode::Copy,
        };
        let cores: Vec<u32> = (0..2)
            .filter(|&c| crate::affinity::core_is_usable(c))
            .collect();
        let mut stage = RxStage::new(&regions, &[RegionId(1), RegionId(2)], 256, &plan)
            .unwrap()
            .with_copy_helpers(CopyHelpers::spawn(&cores, "test").unwrap());
        let byte = |i: usize, at: usize| (i * 31 + at * 3 + at / 256) as u8;
        for round in 0..8 {
            let mut b = Burst::test_burst(&regions, &[RegionId(0)], 256);
            for i in 0..256 {
                let len = 900 + (i * 7 + round) % 1100;
                for (at, x) in b.buffer_mut(i, 0).unwrap()[..len].iter_mut().enumerate() {
                    *x = byte(i + round, at);
                }
                b.set_len(i, 0, len);
            }
            stage.submit(b).map_err(|_| "submit").unwrap();
            let out = stage
                .completed()
                .expect("done at once")
                .map_err(|_| "stage")
                .unwrap();
            for i in 0..256 {
                let len = 900 + (i * 7 + round) % 1100;
                let whole = [out.data(i, 0).unwrap(), out.data(i, 1).unwrap()].concat();
                assert_eq!(whole.len(), len);
                assert!(
                    whole
                        .iter()
                        .enumerate()
                        .all(|(at, &x)| x == byte(i + round, at)),
                    "round {round} packet {i}"
                );
            }
        }
    }
}

#[cfg(feature = "cuda")]
mod gpu_tests {
    use super::super::*;
    use crate::config::MemoryRegionConfig;
    use crate::memory::{PortIndex, QueueId};

    fn region(name: &str, kind: MemoryKind) -> MemoryRegionConfig {
        MemoryRegionConfig::new(name, kind, 256, 2048)
    }

    /// Which spans continue an open copy: blocks right above or right below in both
    /// regions, with the same pitches and form; the grown copy covers both (no GPU needed).
    #[test]
    fn a_copy_grows_by_blocks_right_above_or_below() {
        let span = |src: u64, dst: u64, packets: usize, rows: usize, width: usize| SpanCopy {
            src,
            dst,
            src_pitch: 1024,
            dst_pitch: if rows == 1 { 1024 } else { 2048 },
            width,
            rows,
            from_device: false,
            packets,
        };
        // Contiguous form: 4 buffers at 0 (last packet 100 bytes), then 2 above (ends 60).
        let mut c = span(0, 1 << 20, 4, 1, 3 * 1024 + 100);
        assert!(c.extend(&span(4096, (1 << 20) + 4096, 2, 1, 1024 + 60)));
        assert_eq!(
            (c.src, c.dst, c.packets, c.width),
            (0, 1 << 20, 6, 5 * 1024 + 60)
        );
        // A block below: the copy starts there and still ends at the same byte.
        let mut d = span(8192, (1 << 20) + 8192, 2, 1, 1024 + 60);
        assert!(d.extend(&span(0, 1 << 20, 8, 1, 7 * 1024 + 500)));
        assert_eq!(
            (d.src, d.dst, d.packets, d.width),
            (0, 1 << 20, 10, 9 * 1024 + 60)
        );
        // Not adjacent in the destination, a gap, another pitch or form: no.
        let mut e = span(0, 1 << 20, 4, 1, 4000);
        assert!(!e.extend(&span(4096, (1 << 20) + 8192, 2, 1, 1500)));
        assert!(!e.extend(&span(8192, (1 << 20) + 8192, 2, 1, 1500)));
        assert!(!e.extend(&span(4096, (1 << 20) + 4096, 2, 3, 1500)));
        assert_eq!((e.src, e.packets, e.width), (0, 4, 4000));
        // Rows form: rows add up, rows as wide as the longest packet.
        let mut r = span(0, 1 << 20, 3, 3, 700);
        assert!(r.extend(&span(3 * 1024, (1 << 20) + 3 * 2048, 2, 2, 900)));
        assert_eq!((r.rows, r.packets, r.width, r.bytes()), (5, 5, 900, 4500));
        // One-packet bursts between unequal strides are rows too, not one run: two of them
        // make two rows, never one run as wide as the source stride plus a packet.
        let mut one = SpanCopy {
            rows: 1,
            ..span(0, 1 << 20, 1, 2, 300)
        };
        assert!(one.extend(&SpanCopy {
            rows: 1,
            ..span(1024, (1 << 20) + 2048, 1, 2, 500)
        }));
        assert_eq!((one.rows, one.packets, one.width), (2, 2, 500));
    }

    /// Regions `src` (of `src_kind`) and `gpu` (device) of `bufs` 1 KiB buffers, and a
    /// copy-mode stage from the first into the second for bursts of up to 256 packets.
    fn copy_stage(src_kind: MemoryKind, bufs: usize) -> (Arc<RegionSet>, RxStage) {
        let regions = Arc::new(
            RegionSet::allocate(&[
                MemoryRegionConfig::new("src", src_kind, bufs, 1024),
                MemoryRegionConfig::new("gpu", MemoryKind::Device, bufs, 1024),
            ])
            .unwrap(),
        );
        let plan = StagePlan {
            split_header_bytes: None,
            gpu: Some(0),
            mode: StageMode::Copy,
        };
        let stage = RxStage::new(&regions, &[RegionId(1)], 256, &plan).unwrap();
        (regions, stage)
    }

    /// Burst number `burst` of `n` packets in region 0: packet `i` holds `len(burst, i)`
    /// bytes `byte(burst, i, k)` and flow id `burst * 1000 + i` (what [`assert_landed`]
    /// checks).
    fn source_burst(
        regions: &Arc<RegionSet>,
        burst: usize,
        n: usize,
        len: &dyn Fn(usize, usize) -> usize,
        byte: &dyn Fn(usize, usize, usize) -> u8,
    ) -> Burst {
        let mut b = Burst::test_burst(regions, &[RegionId(0)], n);
        for i in 0..n {
            let len = len(burst, i);
            for (k, x) in b.buffer_mut(i, 0).unwrap()[..len].iter_mut().enumerate() {
                *x = byte(burst, i, k);
            }
            b.set_len(i, 0, len);
            b.set_flow_id(i, (burst * 1000 + i) as u32);
        }
        b
    }

    /// Every packet `i` of burst `burst` in `got` (device memory) holds `len(burst, i)`
    /// bytes `byte(burst, i, k)` and flow id `burst * 1000 + i`.
    fn assert_landed(
        got: &[Burst],
        len: impl Fn(usize, usize) -> usize,
        byte: impl Fn(usize, usize, usize) -> u8,
    ) {
        for (burst, b) in got.iter().enumerate() {
            for i in 0..b.len() {
                let len = len(burst, i);
                assert_eq!(b.packets()[i].flow_id, (burst * 1000 + i) as u32);
                let mut back = vec![0u8; len];
                // SAFETY: the packet's device buffer holds `len` bytes, copied in full.
                unsafe { gpudirect::read_device(0, b.segment_addr(i, 0), &mut back) }.unwrap();
                let want: Vec<u8> = (0..len).map(|k| byte(burst, i, k)).collect();
                assert_eq!(back, want, "burst {burst} packet {i}");
            }
        }
    }

    /// Waits for every burst still in the stage, after those in `got`.
    fn drain(stage: &mut RxStage, got: &mut Vec<Burst>) {
        while let Some(done) = stage.wait_oldest() {
            got.push(done.map_err(|_| "stage").unwrap());
        }
    }

    /// `got` holds bursts of `sizes` packets, each as [`assert_landed`] checks; once they
    /// and the stage are dropped, every buffer of both regions is back.
    fn assert_landed_and_released(
        regions: &RegionSet,
        stage: RxStage,
        got: Vec<Burst>,
        sizes: &[usize],
        len: impl Fn(usize, usize) -> usize,
        byte: impl Fn(usize, usize, usize) -> u8,
    ) {
        assert_eq!(got.iter().map(Burst::len).collect::<Vec<_>>(), sizes);
        assert_landed(&got, len, byte);
        assert_released(regions, stage, got);
    }

    /// Once `got` and the stage are dropped, every buffer of both regions is back.
    fn assert_released(regions: &RegionSet, stage: RxStage, got: Vec<Burst>) {
        drop(got);
        drop(stage);
        assert_eq!(
            regions.get(RegionId(0)).available(),
            regions.get(RegionId(0)).num_bufs()
        );
        assert_eq!(
            regions.get(RegionId(1)).available(),
            regions.get(RegionId(1)).num_bufs()
        );
    }

    /// Bursts in consecutive pinned buffers join one copy into device memory, nothing is
    /// handed back before it is issued, the bursts come back in order once it is done, and
    /// every byte arrives. A burst that does not continue the copy issues it and opens the
    /// next. Skips without a CUDA driver.
    #[test]
    fn consecutive_bursts_share_one_copy_and_arrive_intact() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: coalesced copies are not run");
            return;
        }
        // 8 MiB regions: a sixth of one (the group size) holds five bursts.
        let (regions, mut stage) = copy_stage(MemoryKind::HostPinned, 8192);
        let byte = |burst: usize, i: usize, k: usize| (burst * 31 + i * 7 + k) as u8;
        let len = |_: usize, i: usize| 64 + (i * 37) % 900;
        let make = |burst: usize, n: usize| source_burst(&regions, burst, n, &len, &byte);
        // Four bursts of 256 x 1 KiB buffers, one after the other in both regions: 1 MiB.
        for burst in 0..4 {
            stage
                .submit(make(burst, 256))
                .map_err(|_| "submit")
                .unwrap();
        }
        assert_eq!(stage.open.as_ref().map(|o| o.bursts), Some(4));
        assert_eq!(stage.copies_in_flight, 0);
        assert!(
            stage.completed().is_none(),
            "nothing back before the copy goes"
        );
        // A short burst continues it too.
        stage.submit(make(4, 10)).map_err(|_| "submit").unwrap();
        assert_eq!(stage.open.as_ref().map(|o| o.bursts), Some(5));
        // Source buffers taken in between: the next burst's source does not continue the
        // copy (its output still does), so the copy goes and another opens.
        let skipped = Burst::test_burst(&regions, &[RegionId(0)], 8);
        stage.submit(make(5, 8)).map_err(|_| "submit").unwrap();
        assert_eq!(stage.copies_in_flight, 1, "the first copy was issued");
        assert_eq!(stage.open.as_ref().map(|o| o.bursts), Some(1));
        drop(skipped);
        let mut got = Vec::new();
        drain(&mut stage, &mut got);
        assert_eq!(stage.copies_in_flight, 0);
        assert_landed_and_released(
            &regions,
            stage,
            got,
            &[256, 256, 256, 256, 10, 8],
            len,
            byte,
        );
    }

    /// Runs of consecutive pinned buffers stay runs through the stage: they join one copy
    /// into device memory as descriptor bursts do, an output run that does not continue
    /// the copy opens the next, and each comes back a run holding every byte. Skips
    /// without a CUDA driver.
    #[test]
    fn runs_join_one_copy_and_arrive_as_runs() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: runs through the stage are not run");
            return;
        }
        let (regions, mut stage) = copy_stage(MemoryKind::HostPinned, 8192);
        let byte = |burst: usize, i: usize, k: usize| (burst * 29 + i * 5 + k) as u8;
        let make = |burst: usize| {
            let mut b = Burst::allocate_run(
                regions.clone(),
                PortIndex(0),
                QueueId(0),
                RegionId(0),
                256,
                1000,
            )
            .unwrap();
            for i in 0..256 {
                for (k, x) in b.buffer_mut(i, 0).unwrap()[..1000].iter_mut().enumerate() {
                    *x = byte(burst, i, k);
                }
            }
            assert!(b.run().is_some());
            b
        };
        for burst in 0..4 {
            stage.submit(make(burst)).map_err(|_| "submit").unwrap();
        }
        assert_eq!(stage.open.as_ref().map(|o| o.bursts), Some(4));
        assert_eq!(stage.copies_issued, 0);
        // Device buffers taken in between: the next output run does not continue the copy.
        let skipped = Burst::test_burst(&regions, &[RegionId(1)], 3);
        stage.submit(make(4)).map_err(|_| "submit").unwrap();
        assert_eq!(stage.copies_issued, 1, "the first copy was issued");
        drop(skipped);
        let mut got = Vec::new();
        drain(&mut stage, &mut got);
        assert_eq!(stage.copies_issued, 2);
        for (burst, b) in got.iter().enumerate() {
            let run = b.run().expect("delivered as a run");
            assert_eq!(
                (run.region, b.len(), b.bytes()),
                (RegionId(1), 256, 256 * 1000)
            );
            let mut back = vec![0u8; 1000];
            for i in 0..256 {
                // SAFETY: the packet's device buffer holds 1000 bytes, copied in full.
                unsafe { gpudirect::read_device(0, b.segment_addr(i, 0), &mut back) }.unwrap();
                assert!(
                    back.iter()
                        .enumerate()
                        .all(|(k, &x)| x == byte(burst, i, k)),
                    "burst {burst} packet {i}"
                );
            }
        }
        assert_released(&regions, stage, got);
    }

    /// A layout region of 2 MiB gives copies of at most a sixth of it (about 341 KiB): a
    /// second 256 KiB burst no longer joins, so the copies in flight cannot hold the whole
    /// region.
    #[test]
    fn a_small_region_shrinks_the_copy_group() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: copy groups are not run");
            return;
        }
        let (regions, mut stage) = copy_stage(MemoryKind::HostPinned, 2048);
        assert_eq!(
            stage.group_bytes,
            2048 * regions.get(RegionId(1)).stride() / 6
        );
        for _ in 0..2 {
            let mut b = Burst::test_burst(&regions, &[RegionId(0)], 256);
            for i in 0..256 {
                b.set_len(i, 0, 1024);
            }
            stage.submit(b).map_err(|_| "submit").unwrap();
        }
        // Another burst would not fit either copy: each went at once, alone.
        assert_eq!(stage.copies_issued, 2);
        assert!(stage.open.is_none());
        while let Some(done) = stage.wait_oldest() {
            assert_eq!(done.map_err(|_| "stage").unwrap().len(), 256);
        }
        drop(stage);
        assert_eq!(regions.get(RegionId(1)).available(), 2048);
    }

    /// Pageable bursts into consecutive device buffers: each packet gathered into staging
    /// at its buffer's place, whatever order the source buffers came in (a LIFO host pool
    /// hands them out descending, the device pool ascending), and bursts whose outputs
    /// continue each other uploaded together, up to the group size.
    #[test]
    fn pageable_bursts_are_gathered_into_joined_uploads_and_arrive_intact() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: pageable uploads are not run");
            return;
        }
        // 8 MiB regions: groups of a sixth, 1365 KiB.
        let (regions, mut stage) = copy_stage(MemoryKind::Host, 8192);
        let byte = |burst: usize, i: usize, k: usize| (burst * 29 + i * 5 + k) as u8;
        let len = |burst: usize, i: usize| 60 + (i * 53 + burst) % 965;
        let sizes = [256, 256, 256, 256, 17, 256, 256, 256];
        let mut got = Vec::new();
        let mut skipped = None;
        for (burst, &n) in sizes.iter().enumerate() {
            if burst == 7 {
                // Output buffers taken in between: the next burst cannot continue the copy.
                skipped =
                    Burst::allocate(regions.clone(), PortIndex(0), QueueId(0), &[RegionId(1)], 4);
            }
            let b = source_burst(&regions, burst, n, &len, &byte);
            stage.submit(b).map_err(|_| "submit").unwrap();
            assert!(stage.moves.is_empty(), "no per-packet move list");
            let open = stage.open.as_ref().map(|o| (o.gathered, o.bursts));
            match burst {
                // 4 x 256 KiB and 17 KiB join; 256 KiB more still fits (1297 KiB), and
                // as another would not, the copy goes at once.
                0..=4 => assert_eq!((stage.copies_issued, open), (0, Some((true, burst + 1)))),
                5 => assert_eq!((stage.copies_issued, open), (1, None)),
                6 => assert_eq!((stage.copies_issued, open), (1, Some((true, 1)))),
                _ => assert_eq!((stage.copies_issued, open), (2, Some((true, 1)))),
            }
        }
        drop(skipped);
        drain(&mut stage, &mut got);
        assert_eq!(stage.copies_issued, 3);
        assert_landed_and_released(&regions, stage, got, &sizes, len, byte);
    }

    /// Host to GPU and back (the way a TX queue in device memory reaches host RX queues),
    /// in both modes and for pageable and pinned host memory: every byte survives.
    /// Skips without a CUDA driver.
    #[test]
    fn packets_go_into_gpu_memory_and_back_out_intact() {
        if gpudirect::device_count().is_err() {
            eprintln!("SKIP: no CUDA driver: the GPU round trip is not run");
            return;
        }
        for host_kind in [MemoryKind::Host, MemoryKind::HostPinned] {
            for mode in [StageMode::Kernel, StageMode::Copy] {
                let regions = Arc::new(
                    RegionSet::allocate(&[
                        region("src", host_kind),
                        region("gpu", MemoryKind::Device),
                        region("back", host_kind),
                    ])
                    .unwrap(),
                );
                let to_gpu = StagePlan {
                    split_header_bytes: None,
                    gpu: Some(0),
                    mode,
                };
                let mut into = RxStage::new(&regions, &[RegionId(1)], 64, &to_gpu).unwrap();
                // A host layout fed device packets still converts: build it directly.
                let mut out_of = RxStage {
                    regions: regions.clone(),
                    layout: vec![RegionId(2)],
                    split: None,
                    moves: Vec::new(),
                    in_flight: VecDeque::new(),
                    open: None,
                    copies_in_flight: 0,
                    copies_issued: 0,
                    group_bytes: GROUP_BYTES,
                    helpers: None,
                    gpu: into.gpu.take().map(|mut g| {
                        g.mode = mode;
                        g
                    }),
                };
                into.gpu = Some(GpuPath {
                    gpu: gpudirect::Gpu::new(0).unwrap(),
                    staging: gpudirect::PinnedBuffer::alloc(0, 64 * 2048 * DEPTH).unwrap(),
                    slot_bytes: 64 * 2048,
                    next_slot: 0,
                    mode,
                    items: Vec::new(),
                    direct: Vec::new(),
                    pageable: Vec::new(),
                    runs: Vec::new(),
                    uploads: Vec::new(),
                });
                // Pageable packets are gathered into staging with a copy helper, shared
                // out however small the burst.
                let cores: Vec<u32> = (0..2)
                    .filter(|&c| crate::affinity::core_is_usable(c))
                    .collect();
                into = into
                    .with_copy_helpers(CopyHelpers::spawn(&cores, "test").unwrap().sharing_from(0));
                let mut b = Burst::test_burst(&regions, &[RegionId(0)], 40);
                for i in 0..40 {
                    let len = 1 + i * 47;
                    for (k, x) in b.buffer_mut(i, 0).unwrap()[..len].iter_mut().enumerate() {
                        *x = (k * 13 + i) as u8;
                    }
                    b.set_len(i, 0, len);
                }
                into.submit(b).map_err(|_| "submit").unwrap();
                let on_gpu = into.wait_oldest().unwrap().map_err(|_| "stage").unwrap();
                assert!(on_gpu.data(0, 0).is_none(), "now in device memory");
                assert!(
                    on_gpu.gpu_stream().is_some(),
                    "names the stream that filled it"
                );
                out_of.submit(on_gpu).map_err(|_| "submit back").unwrap();
                let back = out_of
                    .wait_oldest()
                    .unwrap()
                    .map_err(|_| "stage back")
                    .unwrap();
                for i in 0..40 {
                    let want: Vec<u8> = (0..1 + i * 47).map(|k| (k * 13 + i) as u8).collect();
                    assert_eq!(
                        back.data(i, 0).unwrap(),
                        &want[..],
                        "{host_kind:?} {mode:?} packet {i}"
                    );
                }
                drop(back);
                drop((into, out_of));
                for r in 0..3 {
                    assert_eq!(
                        regions.get(RegionId(r)).available(),
                        256,
                        "region {r} got every buffer back"
                    );
                }
            }
        }
    }
}
