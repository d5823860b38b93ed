//! Heaps assembled into chunks, as spead2's chunk stream does: a placement rule maps each
//! heap to a chunk, an index in it and a byte offset; payload goes straight to its place
//! (no heap buffer in between); a presence flag per heap says which heaps arrived whole.
//!
//! The rule here is the one most streams use: a number per heap (the heap counter, or an
//! immediate item such as a timestamp, divided by `step`), heap `n` going to chunk
//! `n / heaps_per_chunk` at index `n % heaps_per_chunk`, every heap `heap_bytes` long.
//! A window of `max_chunks` consecutive chunks is under construction; a heap beyond it
//! retires the oldest (ready, whatever arrived), a heap before it is too late.
//! Incomplete heaps and chunks are counted by cause; no packet is dropped uncounted.

use super::{Flavour, Packet, SpeadError};
use std::collections::VecDeque;

/// Which number of a heap places it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKey {
    /// The heap counter.
    HeapCnt,
    /// The immediate item with this id; every packet must carry it (spead2's senders do
    /// with `repeat_pointers`), so any packet of a heap places the heap.
    Item(u32),
}

/// Where heaps go: heap number `key / step`, `heaps_per_chunk` heaps of `heap_bytes` a
/// chunk, `max_chunks` chunks under construction at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    /// The number that places a heap.
    pub key: PlacementKey,
    /// The key's step between consecutive heaps (1 for the heap counter; samples per heap
    /// for a timestamp).
    pub step: u64,
    /// Heaps in a chunk.
    pub heaps_per_chunk: u32,
    /// Payload bytes of every heap.
    pub heap_bytes: u32,
    /// Chunks under construction at once (at least 1).
    pub max_chunks: u32,
}

/// A chunk: `heaps_per_chunk` heaps' payload, and which heaps arrived whole.
#[derive(Debug)]
pub struct Chunk {
    /// The chunk's id (heap number / heaps per chunk).
    pub id: u64,
    /// Which of the assembler's chunk memories holds it ([`Chunk::slot`]).
    slot: usize,
    /// `heaps_per_chunk * heap_bytes` bytes; heap `i` at `i * heap_bytes`. Bytes of a
    /// heap that did not arrive whole may hold old data. Empty when the chunks live in
    /// memory of the caller's ([`ChunkAssembler::with_slots`]).
    pub data: Vec<u8>,
    /// 1 for each heap that arrived whole, else 0.
    pub present: Vec<u8>,
    received: Vec<u32>,
}

impl Chunk {
    /// Which of the assembler's chunk memories holds it: 0, 1, ..., kept across reuse.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Heaps that arrived whole.
    pub fn heaps_present(&self) -> usize {
        self.present.iter().filter(|&&p| p == 1).count()
    }
}

/// What the assembler saw, each packet and heap counted once under one cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpeadCounters {
    /// Packets placed in a chunk.
    pub packets: u64,
    /// Datagrams that are not SPEAD packets of the stream's flavour, or are damaged.
    pub bad_packets: u64,
    /// Packets without the placement item (descriptor-only heaps, for instance).
    pub packets_without_key: u64,
    /// Packets of heaps whose length is not the placement's `heap_bytes`.
    pub packets_wrong_heap_length: u64,
    /// Packets of heaps in chunks already retired.
    pub packets_too_late: u64,
    /// Packets whose bytes of the heap had already arrived (duplicates).
    pub packets_duplicate: u64,
    /// Heaps that arrived whole.
    pub heaps_complete: u64,
    /// Heaps of which some but not all bytes arrived.
    pub heaps_incomplete: u64,
    /// Heaps of a retired chunk of which nothing arrived.
    pub heaps_missing: u64,
    /// Chunks retired with every heap whole.
    pub chunks_complete: u64,
    /// Chunks retired with a heap missing or incomplete.
    pub chunks_incomplete: u64,
    /// Stream-stop packets seen.
    pub stream_stops: u64,
    /// Packets whose chunk could not be opened: every chunk memory was held by the
    /// application ([`ChunkAssembler::with_slots`]).
    pub packets_no_free_chunk: u64,
}

/// Why a packet's chunk is not open.
enum Closed {
    /// Before the window: retired already.
    TooLate,
    /// Every chunk memory is held by the application.
    NoFreeChunk,
}

/// Builds chunks from a stream's packets (see the module's documentation).
#[derive(Debug)]
pub struct ChunkAssembler {
    flavour: Flavour,
    placement: Placement,
    /// Chunks under construction, consecutive ids from the front's.
    live: VecDeque<Chunk>,
    /// Chunks given back by the application, reused before allocating.
    free: Vec<Chunk>,
    /// Chunk memories made so far (slots `0..made`).
    made: usize,
    /// The caller's chunk memories, when payload goes there (`with_slots`), else `None`
    /// (each chunk's `data`, as many as needed).
    slots: Option<usize>,
    counters: SpeadCounters,
    stopped: bool,
}

impl ChunkAssembler {
    /// An assembler for a stream of `flavour` placed by `placement`; `None` when a size
    /// is zero or a chunk would not fit in memory.
    pub fn new(flavour: Flavour, placement: Placement) -> Option<Self> {
        let p = placement;
        if p.step == 0 || p.heaps_per_chunk == 0 || p.heap_bytes == 0 || p.max_chunks == 0 {
            return None;
        }
        usize::try_from(u64::from(p.heaps_per_chunk) * u64::from(p.heap_bytes)).ok()?;
        Some(Self {
            flavour,
            placement,
            live: VecDeque::new(),
            free: Vec::new(),
            made: 0,
            slots: None,
            counters: SpeadCounters::default(),
            stopped: false,
        })
    }

    /// An assembler whose chunks live in `slots` chunk memories of the caller's (host or
    /// GPU memory): chunks carry no `data`, and [`ChunkAssembler::ingest_placing`] says
    /// where each payload goes. When every slot is held by the application, packets that
    /// need a new chunk are counted (`packets_no_free_chunk`).
    pub fn with_slots(flavour: Flavour, placement: Placement, slots: usize) -> Option<Self> {
        let mut a = Self::new(flavour, placement)?;
        a.slots = Some(slots);
        Some(a)
    }

    /// Bytes of one chunk: `heaps_per_chunk * heap_bytes`.
    pub fn chunk_bytes(&self) -> usize {
        self.placement.heaps_per_chunk as usize * self.placement.heap_bytes as usize
    }

    /// The counts so far.
    pub fn counters(&self) -> SpeadCounters {
        self.counters
    }

    /// True once a stream-stop packet arrived (every chunk was then handed over).
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Gives a chunk back for reuse (its presence flags are cleared then). A chunk whose
    /// `data` or `present` was resized is not reused (a new one is made when needed).
    pub fn recycle(&mut self, chunk: Chunk) {
        let data_len = if self.slots.is_some() {
            0
        } else {
            self.chunk_bytes()
        };
        if self.slots.is_some() && chunk.slot >= self.made {
            return; // not one of this assembler's
        }
        if chunk.data.len() == data_len
            && chunk.present.len() == self.placement.heaps_per_chunk as usize
        {
            self.free.push(chunk);
        } else if self.slots.is_some() {
            // Its slot must not be lost: keep it with clean vectors.
            let heaps = self.placement.heaps_per_chunk as usize;
            self.free.push(Chunk {
                data: Vec::new(),
                present: vec![0; heaps],
                received: vec![0; heaps],
                ..chunk
            });
        } else {
            self.made = self.made.saturating_sub(1);
        }
    }

    /// Takes one datagram: places its payload, and hands every chunk it retires to
    /// `ready`, oldest first. A datagram it cannot use is counted, and its error given.
    pub fn ingest(
        &mut self,
        datagram: &[u8],
        ready: &mut impl FnMut(Chunk),
    ) -> Result<(), SpeadError> {
        self.ingest_placing(datagram, &mut |_, _, _| {}, ready)
    }

    /// As [`ChunkAssembler::ingest`]; with chunk memories of the caller's
    /// ([`ChunkAssembler::with_slots`]), the payload is not copied but handed to `place`
    /// as `(slot, offset, bytes)`, `offset + bytes.len()` within
    /// [`ChunkAssembler::chunk_bytes`]. A chunk handed to `ready` must not be read before
    /// every `place` of its bytes took effect.
    pub fn ingest_placing<'d>(
        &mut self,
        datagram: &'d [u8],
        place: &mut impl FnMut(usize, usize, &'d [u8]),
        ready: &mut impl FnMut(Chunk),
    ) -> Result<(), SpeadError> {
        let packet = match Packet::parse(datagram, self.flavour) {
            Ok(p) => p,
            Err(e) => {
                self.counters.bad_packets += 1;
                return Err(e);
            }
        };
        if packet.is_stream_stop() {
            self.counters.stream_stops += 1;
            self.stopped = true;
            self.flush(ready);
            return Ok(());
        }
        let p = self.placement;
        let key = match p.key {
            PlacementKey::HeapCnt => Some(packet.heap_cnt),
            PlacementKey::Item(id) => packet.immediate(id),
        };
        let Some(key) = key else {
            self.counters.packets_without_key += 1;
            return Ok(());
        };
        if packet.heap_length != Some(u64::from(p.heap_bytes))
            || packet.payload_offset + packet.payload.len() as u64 > u64::from(p.heap_bytes)
        {
            self.counters.packets_wrong_heap_length += 1;
            return Ok(());
        }
        let heap = key / p.step;
        let (chunk_id, index) = (
            heap / u64::from(p.heaps_per_chunk),
            (heap % u64::from(p.heaps_per_chunk)) as usize,
        );
        let chunk = match self.chunk(chunk_id, ready) {
            Ok(chunk) => chunk,
            Err(Closed::TooLate) => {
                self.counters.packets_too_late += 1;
                return Ok(());
            }
            Err(Closed::NoFreeChunk) => {
                self.counters.packets_no_free_chunk += 1;
                return Ok(());
            }
        };
        let heap_bytes = p.heap_bytes as usize;
        let at = index * heap_bytes + packet.payload_offset as usize;
        let got = chunk.received[index] as usize + packet.payload.len();
        if got > heap_bytes {
            self.counters.packets_duplicate += 1;
            return Ok(());
        }
        if chunk.data.is_empty() {
            place(chunk.slot, at, packet.payload);
        } else {
            chunk.data[at..at + packet.payload.len()].copy_from_slice(packet.payload);
        }
        chunk.received[index] = got as u32;
        if got == heap_bytes {
            chunk.present[index] = 1;
        }
        self.counters.packets += 1;
        Ok(())
    }

    /// Hands every chunk under construction to `ready`, oldest first (at the end of a
    /// stream).
    pub fn flush(&mut self, ready: &mut impl FnMut(Chunk)) {
        while let Some(chunk) = self.live.pop_front() {
            self.retire(chunk, ready);
        }
    }

    /// The live chunk `id`, opening the window up to it (retiring what falls out of it);
    /// an error when `id` is before the window, or no chunk memory is free to open it.
    fn chunk(&mut self, id: u64, ready: &mut impl FnMut(Chunk)) -> Result<&mut Chunk, Closed> {
        let window = u64::from(self.placement.max_chunks);
        let mut next = match (self.live.front(), self.live.back()) {
            // The first packet (or the first after a flush) opens the window.
            (None, _) | (_, None) => id,
            (Some(first), _) if id < first.id => return Err(Closed::TooLate),
            (Some(first), Some(last)) if id < first.id + window => last.id + 1,
            (Some(_), Some(_)) => {
                let new_first = id + 1 - window;
                while self.live.front().is_some_and(|c| c.id < new_first) {
                    let chunk = self.live.pop_front().expect("checked");
                    self.retire(chunk, ready);
                }
                self.live.back().map_or(new_first, |c| c.id + 1)
            }
        };
        // Consecutive ids up to `id`: chunks nothing has arrived for yet are opened too, so
        // a late heap still finds its place, and they count as missing heaps when they
        // retire.
        while next <= id {
            let chunk = self.allocate(next).ok_or(Closed::NoFreeChunk)?;
            self.live.push_back(chunk);
            next += 1;
        }
        let first = self.live.front().expect("one at least").id;
        Ok(self
            .live
            .get_mut((id - first) as usize)
            .expect("the window holds consecutive ids up to `id`"))
    }

    /// A chunk for `id`: a recycled one, else a new one (`None` when every slot of the
    /// caller's is in use).
    fn allocate(&mut self, id: u64) -> Option<Chunk> {
        let heaps = self.placement.heaps_per_chunk as usize;
        if let Some(mut c) = self.free.pop() {
            c.id = id;
            c.present.fill(0);
            c.received.fill(0);
            return Some(c);
        }
        if self.slots.is_some_and(|n| self.made >= n) {
            return None;
        }
        self.made += 1;
        Some(Chunk {
            id,
            slot: self.made - 1,
            data: match self.slots {
                Some(_) => Vec::new(),
                None => vec![0; self.chunk_bytes()],
            },
            present: vec![0; heaps],
            received: vec![0; heaps],
        })
    }

    fn retire(&mut self, chunk: Chunk, ready: &mut impl FnMut(Chunk)) {
        let c = &mut self.counters;
        let mut whole = true;
        for (&got, &present) in chunk.received.iter().zip(&chunk.present) {
            match (got, present) {
                (_, 1) => c.heaps_complete += 1,
                (0, _) => {
                    c.heaps_missing += 1;
                    whole = false;
                }
                _ => {
                    c.heaps_incomplete += 1;
                    whole = false;
                }
            }
        }
        if whole {
            c.chunks_complete += 1;
        } else {
            c.chunks_incomplete += 1;
        }
        ready(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HeapPackets, ItemPointer, stream_stop_packet};
    use super::*;

    const TIMESTAMP: u32 = 0x1600;

    fn heap_payload(heap: u64, bytes: usize) -> Vec<u8> {
        (0..bytes)
            .map(|i| (i as u64 ^ heap.wrapping_mul(0x9e37)) as u8)
            .collect()
    }

    /// Heap `heap`'s packets, timestamped `heap * 4096`.
    fn packets(f: Flavour, heap: u64, bytes: usize, max_packet: usize) -> Vec<Vec<u8>> {
        let items = [ItemPointer {
            immediate: true,
            id: TIMESTAMP,
            value: heap * 4096,
        }];
        let payload = heap_payload(heap, bytes);
        let mut h = HeapPackets::new(f, heap + 100, &items, &payload, max_packet).unwrap();
        let mut out = Vec::new();
        let mut all = Vec::new();
        while h.next_into(&mut out) {
            all.push(out.clone());
        }
        all
    }

    fn placement() -> Placement {
        Placement {
            key: PlacementKey::Item(TIMESTAMP),
            step: 4096,
            heaps_per_chunk: 4,
            heap_bytes: 3000,
            max_chunks: 2,
        }
    }

    #[test]
    fn shuffled_heaps_land_in_their_chunks_and_losses_are_counted_by_cause() {
        let f = Flavour::SPEAD_64_40;
        let mut asm = ChunkAssembler::new(f, placement()).unwrap();
        // Heaps 0..16 (chunks 0..4), each in 3 packets, shuffled within pairs of heaps;
        // heap 5 loses its middle packet, heap 9 is not sent at all.
        let mut stream = Vec::new();
        for pair in 0..8u64 {
            let mut both = Vec::new();
            for heap in [2 * pair, 2 * pair + 1] {
                if heap != 9 {
                    let mut p = packets(f, heap, 3000, 1200);
                    if heap == 5 {
                        p.remove(1);
                    }
                    both.extend(p);
                }
            }
            both.reverse();
            stream.extend(both);
        }
        stream.push(b"not spead at all".to_vec());
        stream.push(stream_stop_packet(f, 999));
        let mut chunks = Vec::new();
        for d in &stream {
            let _ = asm.ingest(d, &mut |c| chunks.push(c));
        }
        assert!(asm.stopped());
        assert_eq!(
            chunks.iter().map(|c| c.id).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        for c in &chunks {
            for i in 0..4 {
                let heap = c.id * 4 + i as u64;
                let whole = heap != 5 && heap != 9;
                assert_eq!(c.present[i] == 1, whole, "heap {heap}");
                if whole {
                    assert_eq!(
                        &c.data[i * 3000..(i + 1) * 3000],
                        heap_payload(heap, 3000).as_slice(),
                        "heap {heap}"
                    );
                }
            }
        }
        let n = asm.counters();
        assert_eq!(
            (n.heaps_complete, n.heaps_incomplete, n.heaps_missing),
            (14, 1, 1)
        );
        assert_eq!((n.chunks_complete, n.chunks_incomplete), (2, 2));
        assert_eq!((n.bad_packets, n.stream_stops, n.packets), (1, 1, 44));
    }

    #[test]
    fn late_duplicate_unkeyed_and_wrong_length_packets_are_counted() {
        let f = Flavour::SPEAD_64_48;
        let mut asm = ChunkAssembler::new(f, placement()).unwrap();
        let mut chunks = Vec::new();
        let mut ready = |c: Chunk| chunks.push(c);
        for p in packets(f, 0, 3000, 4000) {
            asm.ingest(&p, &mut ready).unwrap();
            asm.ingest(&p, &mut ready).unwrap(); // a duplicate
        }
        // Heap 8 (chunk 2) moves the window past chunk 0.
        for p in packets(f, 8, 3000, 4000) {
            asm.ingest(&p, &mut ready).unwrap();
        }
        for p in packets(f, 1, 3000, 4000) {
            asm.ingest(&p, &mut ready).unwrap(); // chunk 0 is gone
        }
        for p in packets(f, 9, 2999, 4000) {
            asm.ingest(&p, &mut ready).unwrap();
        }
        let mut untimed = Vec::new();
        HeapPackets::new(f, 7, &[], &[0; 3000], 4000)
            .unwrap()
            .next_into(&mut untimed);
        asm.ingest(&untimed, &mut ready).unwrap();
        let n = asm.counters();
        assert_eq!(
            (
                n.packets,
                n.packets_duplicate,
                n.packets_too_late,
                n.packets_wrong_heap_length,
                n.packets_without_key
            ),
            (2, 1, 1, 1, 1)
        );
        assert_eq!(chunks.len(), 1, "chunk 0 retired when chunk 2 opened");
        assert_eq!((chunks[0].id, chunks[0].heaps_present()), (0, 1));
        let c = chunks.pop().unwrap();
        asm.recycle(c);
        asm.flush(&mut |c| chunks.push(c));
        assert_eq!(chunks.iter().map(|c| c.id).collect::<Vec<_>>(), [1, 2]);
        // Heap 12 opens chunk 3 in the recycled chunk, its old presence cleared.
        for p in packets(f, 12, 3000, 4000) {
            asm.ingest(&p, &mut |_| {}).unwrap();
        }
        assert!(asm.free.is_empty(), "the recycled chunk was reused");
        asm.flush(&mut |c| chunks.push(c));
        let last = chunks.pop().unwrap();
        assert_eq!((last.id, last.present.as_slice()), (3, &[1, 0, 0, 0][..]));
    }

    #[test]
    fn chunks_in_the_callers_memory_get_placements_and_run_out_visibly() {
        let f = Flavour::SPEAD_64_48;
        let p = placement();
        let mut asm = ChunkAssembler::with_slots(f, p, 3).unwrap();
        let bytes = asm.chunk_bytes();
        let mut memory = vec![vec![0u8; bytes]; 3];
        let mut ready = Vec::new();
        // Chunks 0..4 with a window of 2 and nothing given back: chunk 3 finds every
        // memory held (0 and 1 retired to us, 2 live), and its 4 heaps of 3 packets are
        // counted.
        for heap in 0..16u64 {
            for pk in packets(f, heap, 3000, 1200) {
                asm.ingest_placing(
                    &pk,
                    &mut |slot, at, b: &[u8]| memory[slot][at..at + b.len()].copy_from_slice(b),
                    &mut |c: Chunk| ready.push(c),
                )
                .unwrap();
            }
        }
        asm.flush(&mut |c| ready.push(c));
        let c = asm.counters();
        assert!(ready.iter().all(|c| c.data.is_empty()));
        assert_eq!(ready.iter().map(|c| c.id).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(c.packets_no_free_chunk, 12, "{c:?}");
        for chunk in &ready {
            for i in 0..4 {
                let heap = chunk.id * 4 + i as u64;
                assert!(
                    memory[chunk.slot()][i * 3000..(i + 1) * 3000] == heap_payload(heap, 3000),
                    "heap {heap}"
                );
            }
        }
        // Given back, a chunk's memory takes the next chunk.
        let first = ready.remove(0);
        let slot = first.slot();
        asm.recycle(first);
        for pk in packets(f, 16, 3000, 1200) {
            asm.ingest_placing(
                &pk,
                &mut |s, at, b: &[u8]| memory[s][at..at + b.len()].copy_from_slice(b),
                &mut |c: Chunk| ready.push(c),
            )
            .unwrap();
        }
        assert!(memory[slot][..3000] == heap_payload(16, 3000));
        // A foreign chunk or a resized one cannot hand out a slot twice.
        let mut other = ChunkAssembler::with_slots(f, p, 8).unwrap();
        let mut foreign = Vec::new();
        for heap in 0..40u64 {
            for pk in packets(f, heap, 3000, 3000) {
                other.ingest(&pk, &mut |c| foreign.push(c)).unwrap();
            }
        }
        let before = asm.made;
        for c in foreign {
            asm.recycle(c);
        }
        assert_eq!(asm.made, before);
        assert!(asm.free.iter().all(|c| c.slot < 3));
    }
}
