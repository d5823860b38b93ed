//! Property tests over what reaches the data plane from outside, run by `make test` with a
//! bounded number of cases (proptest, on the stable toolchain): configuration text (every
//! shipped and reference configuration, mutated), frames (both parsers on any bytes), and
//! capture files (what the pcap and pcapng writers produce, read back with `pcap-file`'s
//! readers). The classifier has its own properties (`steering/classifier/tests.rs`), the
//! RDMA key-exchange message its own (`rdma/src/verbs.rs`).

use dataplane::capture::{CaptureConfig, CaptureFormat, CaptureSink};
use dataplane::config::{self, MemoryKind, MemoryRegionConfig};
use dataplane::memory::RegionSet;
use dataplane::memory::{PortIndex, QueueId, RegionId};
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// Every configuration this checkout has: ours and the reference's examples.
fn corpus() -> &'static [String] {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut dirs = vec![root.join("configs")];
        dirs.extend(
            [
                root.join("../shared/daqiri-examples"),
                PathBuf::from("/work/shared/daqiri-examples"),
            ]
            .into_iter()
            .filter(|d| d.is_dir())
            .take(1),
        );
        let mut texts = Vec::new();
        for d in dirs {
            for e in std::fs::read_dir(d).unwrap().flatten() {
                if e.path().extension().is_some_and(|x| x == "yaml") {
                    texts.push(std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        assert!(
            texts.len() >= 20,
            "only {} configurations found",
            texts.len()
        );
        texts
    })
}

/// One edit of a configuration's text.
#[derive(Clone, Debug)]
enum Edit {
    /// Removes `len` bytes at `at` (a fraction of the text).
    Delete { at: f64, len: usize },
    /// Inserts bytes at `at`.
    Insert { at: f64, bytes: Vec<u8> },
    /// Replaces the digits of the number nearest `at` with a random one.
    Number { at: f64, value: i128 },
    /// Duplicates the line at `at`.
    DuplicateLine { at: f64 },
    /// Shifts the line at `at` by `by` spaces.
    Indent { at: f64, by: i8 },
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = 0.0..1.0f64;
    prop_oneof![
        (at.clone(), 1..40usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        (
            at.clone(),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..12),
                prop::sample::select(vec![
                    b": ".to_vec(),
                    b"\n- ".to_vec(),
                    b"[".to_vec(),
                    b"{a: 1}".to_vec(),
                    b"&x ".to_vec(),
                    b"*x".to_vec(),
                    b"-1".to_vec(),
                    b"99999999999999999999".to_vec(),
                    b"\t".to_vec(),
                    b"\"".to_vec(),
                ]),
            ]
        )
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        (at.clone(), any::<i128>()).prop_map(|(at, value)| Edit::Number { at, value }),
        at.clone().prop_map(|at| Edit::DuplicateLine { at }),
        (at, -4..6i8).prop_map(|(at, by)| Edit::Indent { at, by }),
    ]
}

fn apply(text: &str, e: &Edit) -> String {
    let mut b = text.as_bytes().to_vec();
    let pos = |at: f64, b: &[u8]| ((b.len() as f64 * at) as usize).min(b.len());
    let line_start = |b: &[u8], p: usize| {
        b[..p]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1)
    };
    match e {
        Edit::Delete { at, len } => {
            let p = pos(*at, &b);
            let end = (p + len).min(b.len());
            b.drain(p..end);
        }
        Edit::Insert { at, bytes } => {
            let p = pos(*at, &b);
            b.splice(p..p, bytes.iter().copied());
        }
        Edit::Number { at, value } => {
            let p = pos(*at, &b);
            if let Some(s) = (p..b.len()).find(|&i| b[i].is_ascii_digit()) {
                let end = (s..b.len())
                    .find(|&i| !b[i].is_ascii_digit())
                    .unwrap_or(b.len());
                b.splice(s..end, value.to_string().bytes());
            }
        }
        Edit::DuplicateLine { at } => {
            let p = line_start(&b, pos(*at, &b));
            let end = (p..b.len())
                .find(|&i| b[i] == b'\n')
                .map_or(b.len(), |i| i + 1);
            let line = b[p..end].to_vec();
            b.splice(p..p, line);
        }
        Edit::Indent { at, by } => {
            let p = line_start(&b, pos(*at, &b));
            if *by >= 0 {
                b.splice(p..p, std::iter::repeat_n(b' ', *by as usize));
            } else {
                let n = (0..(-by) as usize)
                    .take_while(|i| b.get(p + i) == Some(&b' '))
                    .count();
                b.drain(p..p + n);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// A mutated configuration loads or fails with diagnostics that name a place; the
    /// loader never panics, and what loads passes its own validation again.
    #[test]
    fn mutated_configurations_never_panic(
        which in any::<prop::sample::Index>(),
        edits in proptest::collection::vec(edit(), 1..4),
    ) {
        let corpus = corpus();
        let mut text = corpus[which.index(corpus.len())].clone();
        for e in &edits {
            text = apply(&text, e);
        }
        match config::load_with(&text, "mutated.yaml", &|_| true) {
            Ok(loaded) => {
                // Deterministic: the same text loads to the same configuration.
                let again = config::load_with(&text, "mutated.yaml", &|_| true);
                prop_assert!(again.is_ok());
                prop_assert_eq!(format!("{:?}", again.unwrap().config), format!("{:?}", loaded.config));
            }
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.contains("mutated.yaml"), "{}", text);
                prop_assert!(!e.diagnostics.is_empty(), "{}", text);
            }
        }
    }

    /// Any bytes go through both frame parsers without a panic, and what they read lies
    /// inside the frame.
    #[test]
    fn any_frame_parses_without_panic(frame in proptest::collection::vec(any::<u8>(), 0..200), tweak in any::<(u8, u8)>()) {
        let mut frame = frame;
        // Often an IPv4/UDP frame with some fields off, so the deep paths run.
        if frame.len() >= 42 && tweak.0 % 2 == 0 {
            frame[12] = 0x08;
            frame[13] = 0x00;
            frame[14] = 0x40 | (tweak.1 & 0x0f);
            frame[23] = 17;
        }
        let _ = dataplane::steering::headers::parse(&frame);
        if let Ok(view) = dataplane::packet::parse(&frame) {
            let inside = view.payload.is_empty()
                || (view.payload.as_ptr() as usize >= frame.as_ptr() as usize
                    && view.payload.as_ptr() as usize + view.payload.len()
                        <= frame.as_ptr() as usize + frame.len());
            prop_assert!(inside);
        }
    }
}

fn regions() -> Arc<RegionSet> {
    Arc::new(
        RegionSet::allocate(&[MemoryRegionConfig::new("bufs", MemoryKind::Host, 256, 2048)])
            .unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Packets of any length and content, captured as pcap and pcapng, read back with
    /// pcap-file's readers: the same packets, in order, with their timestamps.
    #[test]
    fn captures_read_back_packet_for_packet(
        packets in proptest::collection::vec(
            // Timestamps pcap can hold: 32-bit seconds (until 2106).
            (proptest::collection::vec(any::<u8>(), 0..2048), 1..(u64::from(u32::MAX) * 1_000_000_000)),
            1..40,
        ),
    ) {
        let regions = regions();
        let mut burst = dataplane::Burst::allocate(regions, PortIndex(0), QueueId(0), &[RegionId(0)], packets.len()).unwrap();
        for (i, (bytes, ts)) in packets.iter().enumerate() {
            burst.buffer_mut(i, 0).unwrap()[..bytes.len()].copy_from_slice(bytes);
            burst.set_len(i, 0, bytes.len());
            burst.set_timestamp(i, *ts);
        }
        let dir = tempfile::tempdir().unwrap();
        for format in [CaptureFormat::Pcap, CaptureFormat::Pcapng] {
            let path = dir.path().join(format.name());
            let mut sink = CaptureSink::create(&CaptureConfig::new(&path, format)).unwrap();
            sink.submit(&burst);
            let stats = sink.finish().unwrap();
            prop_assert_eq!(stats.written_packets, packets.len() as u64);
            let file = std::fs::File::open(&path).unwrap();
            let read: Vec<(Vec<u8>, u64)> = match format {
                CaptureFormat::Pcap => {
                    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
                    let mut v = Vec::new();
                    while let Some(p) = r.next_packet() {
                        let p = p.unwrap();
                        v.push((p.data.into_owned(), p.timestamp.as_nanos() as u64));
                    }
                    v
                }
                _ => {
                    let mut r = pcap_file::pcapng::PcapNgReader::new(file).unwrap();
                    let mut v = Vec::new();
                    while let Some(b) = r.next_block() {
                        if let pcap_file::pcapng::Block::EnhancedPacket(p) = b.unwrap() {
                            v.push((p.data.into_owned(), p.timestamp.as_nanos() as u64));
                        }
                    }
                    v
                }
            };
            prop_assert_eq!(&read, &packets, "{:?}", format);
        }
    }
}
