//! Helpers shared by the bench crate's and the command line's integration tests: the
//! library's own (`dataplane/tests/common`) and those that drive the benches.
#![allow(dead_code)]

#[macro_use]
#[path = "../../../dataplane/tests/common/mod.rs"]
mod base;
pub use base::*;

/// queue and flow id (queue q's rule has id q + 1) is known.
pub fn assert_four_queue_split(report: &dataplane_bench::raw::RawReport) {
    let mut expected = [0u64; 4];
    for k in 0..report.tx_packets {
        let (s, d) = (4096 + (k % 8) as u16, 5000 + (k % 4) as u16);
        expected[queue_by_rules(s, d).expect("every packet has a rule") as usize] += 1;
    }
    let got: Vec<u64> = (0..4)
        .map(|q| {
            report
                .queues
                .iter()
                .find(|s| s.direction == "rx" && s.queue == q)
                .expect("an RX queue report")
                .packets
        })
        .collect();
    assert_eq!(got, expected.to_vec());
    assert!(got.iter().all(|&n| n > 0));
    let marks: Vec<(u32, u64)> = report.flow_ids.iter().map(|(k, v)| (*k, *v)).collect();
    let want: Vec<(u32, u64)> = (0..4).map(|q| (q as u32 + 1, expected[q])).collect();
    assert_eq!(marks, want);
}

/// with the main lcore on core 0.
pub fn bench_shipped_config(name: &str) -> dataplane_bench::raw::RawReport {
    let mut cfg = dataplane::config::load_file(&config_path(name))
        .expect("config")
        .config;
    cfg.master_core = 0;
    run_bench(&cfg, 1.0)
}

/// Runs `dataplane bench raw` on `cfg` for `seconds`, payloads verified, no progress lines.
pub fn run_bench(cfg: &dataplane::config::Config, seconds: f64) -> dataplane_bench::raw::RawReport {
    dataplane_bench::raw::run(
        cfg,
        &dataplane_bench::raw::RawOptions {
            verify_payload: true,
            ..dataplane_bench::raw::RawOptions::new(seconds)
        },
        &std::sync::atomic::AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("bench runs: {e}"))
}

/// returns how many passed, panicking on a damaged one.
pub fn check_captured_frames<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut c = dataplane_bench::traffic::Checker::new(true);
    for f in frames {
        c.check(f);
        assert_eq!(
            c.counts.corrupt, 0,
            "a captured frame is damaged: {:?}",
            c.first_problem
        );
    }
    assert_eq!(c.counts.duplicates, 0, "a frame was captured twice");
    c.counts.valid
}

/// Asserts a quantize run: lossless, and every batch turned back into the frames sent.
pub fn assert_quantize_verified(report: &dataplane_bench::raw::RawReport) {
    eprint!("{}", report.human());
    assert!(report.lossless, "{:?}", report.problems);
    let r = report.reorder.as_ref().expect("reorder report");
    assert_eq!(r.bad_batches, 0, "{:?}", r.first_problem);
    assert_eq!(r.unchecked_batches, 0, "int4 -> fp32 is verifiable");
    assert!(r.verified_batches >= 3, "the example's verify_batches");
    assert_eq!(
        r.verified_batches,
        r.batches + r.timeout_batches,
        "every batch checked sample by sample"
    );
    // 256 payload bytes per frame = 512 int4 samples = 32 chunks of 16.
    assert_eq!(r.verified_chunks, r.aggregated_packets * 32);
    assert_eq!(r.aggregated_packets, report.tx_packets);
}
