//! The SPEAD tests' shared parts: spead2 (from PyPI) as the peer (finding a Python that
//! has it, starting its scripts), the payload formula both sides compute, and taking and
//! checking a stream's chunks.

use dataplane::SpeadStream;
use dataplane::protocol::spead::chunks::Chunk;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Byte `i` of heap `h`'s `n` bytes: the same formula as [`PATTERN_PY`]'s `payload`.
pub fn heap_payload(h: u64, n: usize) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i ^ h.wrapping_mul(40503)) & 0xff) as u8)
        .collect()
}

/// Python that defines `payload(h, n)` as [`heap_payload`] does (NumPy imported as `np`).
pub const PATTERN_PY: &str = "
import os
import numpy as np
def payload(h, n):
    return ((np.arange(n, dtype=np.uint64) ^ np.uint64(h * 40503)) & np.uint64(0xff)).astype(np.uint8)
";

/// A Python with spead2, or None (after saying SKIP, or failing when it is required: where
/// `DATAPLANE_REQUIRE_SPEAD2` is set, as in `make test`).
pub fn spead2_python() -> Option<String> {
    let cache = std::env::var("DATAPLANE_CACHE").unwrap_or("/var/cache/dataplane".into());
    let candidates = [
        std::env::var("DATAPLANE_SPEAD2_PYTHON").ok(),
        Some(format!("{cache}/spead2-venv/bin/python")),
        Some("python3".into()),
    ];
    for python in candidates.into_iter().flatten() {
        let ok = Command::new(&python)
            .args(["-c", "import spead2, numpy"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    assert!(
        std::env::var_os("DATAPLANE_REQUIRE_SPEAD2").is_none(),
        "spead2 is required here but no Python has it (scripts/setup.sh makes the venv)"
    );
    eprintln!("SKIP: no Python with spead2 (pip install spead2 numpy)");
    None
}

/// Starts `command` (a spead2 receiver) with its stdout piped and waits for its first
/// line, `ready`; the child and the rest of its stdout.
pub fn spawn_when_ready(command: &mut Command) -> (Child, BufReader<ChildStdout>) {
    let mut child = command.stdout(Stdio::piped()).spawn().expect("python");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "spead2's receiver did not start");
    (child, out)
}

/// Every chunk of `stream` until it sees the stream's end (a minute at most).
pub fn chunks_until_stopped(stream: &mut SpeadStream) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stream.stopped() {
        assert!(Instant::now() < deadline, "{:?}", stream.counters());
        if let Some(c) = stream.recv(Duration::from_millis(50)).expect("rx") {
            chunks.push(c);
        }
    }
    while let Some(c) = stream.recv(Duration::ZERO).unwrap() {
        chunks.push(c);
    }
    chunks
}

/// Checks `chunks` of `per_chunk` heaps of `heap_bytes`: `heaps` heaps in all, every one
/// present with `payload(h)` as its bytes but `left_out`, which is absent.
pub fn check_chunks(
    chunks: &[Chunk],
    (heaps, per_chunk, heap_bytes): (u64, usize, usize),
    left_out: Option<u64>,
    payload: impl Fn(u64) -> Vec<u8>,
) {
    assert_eq!(chunks.len() as u64, heaps / per_chunk as u64);
    for c in chunks {
        for i in 0..per_chunk {
            let h = c.id * per_chunk as u64 + i as u64;
            let expected = left_out != Some(h);
            assert_eq!(c.present[i] == 1, expected, "heap {h}");
            if expected {
                assert!(
                    c.data[i * heap_bytes..(i + 1) * heap_bytes] == payload(h),
                    "heap {h}: bytes differ"
                );
            }
        }
    }
}

/// What spead2's sender script sends: heaps of a 48-bit timestamp (`ids.0`, heap `h`
/// stamped `h * samples_per_heap`) and `heap_bytes` of [`heap_payload`] (`ids.1`), one
/// left out, to `destination` at `rate` bytes per second.
pub struct Spead2Heaps {
    /// Timestamp and data item ids.
    pub ids: (u32, u32),
    /// Heaps, counted from 0.
    pub heaps: u64,
    /// The heap not sent.
    pub left_out: u64,
    /// Each heap's data bytes.
    pub heap_bytes: usize,
    /// The timestamp's step from heap to heap.
    pub samples_per_heap: u64,
}

impl Spead2Heaps {
    /// The Python script: spead2's own UDP sender, paced, heaps that repeat their item
    /// pointers (as chunk receivers need), the left-out heap skipped, then the stream's
    /// end.
    pub fn sender_script(&self, (host, port): (&str, u16), rate: f64) -> String {
        let Self {
            ids: (timestamp, data),
            heaps,
            left_out,
            heap_bytes,
            samples_per_heap,
        } = self;
        format!(
            "{PATTERN_PY}
import spead2, spead2.send
config = spead2.send.StreamConfig(max_packet_size=1472, rate={rate})
stream = spead2.send.UdpStream(spead2.ThreadPool(), [('{host}', {port})], config)
ig = spead2.send.ItemGroup(flavour=spead2.Flavour(4, 64, 48, 0))
ig.add_item({timestamp}, 'timestamp', '', shape=(), format=[('u', 48)])
ig.add_item({data}, 'data', '', shape=({heap_bytes},), dtype=np.uint8)
for h in range({heaps}):
    if h == {left_out}:
        continue
    ig['timestamp'].value = h * {samples_per_heap}
    ig['data'].value = payload(h, {heap_bytes})
    heap = ig.get_heap(descriptors='none', data='all')
    heap.repeat_pointers = True
    stream.send_heap(heap)
stream.send_heap(ig.get_end())
# send_heap returns once the heap is out. Leave without tearing the thread pool down:
# beside a busy-polling worker on a shared core that teardown can spin for minutes.
os._exit(0)
"
        )
    }
}
