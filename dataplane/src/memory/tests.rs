//! Unit tests of regions and region sets.
use super::*;

fn cfg(kind: MemoryKind, num_bufs: usize, buf_size: usize) -> MemoryRegionConfig {
    MemoryRegionConfig::new("r", kind, num_bufs, buf_size)
}

#[test]
fn spare_descriptor_vectors_stay_within_their_bounds() {
    let set = RegionSet::allocate(&[cfg(MemoryKind::Host, 8, 64)]).unwrap();
    // Bursts of every size dropped: each kind is kept up to its count, larger ones
    // not at all.
    for _ in 0..SPARE_LARGE_VECS + 100 {
        set.recycle_descriptor_vec(Vec::with_capacity(SPARE_DESCRIPTOR_MAX_CAPACITY));
        set.recycle_descriptor_vec(Vec::with_capacity(SPARE_DESCRIPTOR_MAX_CAPACITY + 1));
    }
    for _ in 0..SPARE_DESCRIPTOR_VECS + 100 {
        set.recycle_descriptor_vec(Vec::with_capacity(32));
    }
    assert_eq!(set.spare_large.len(), SPARE_LARGE_VECS);
    assert_eq!(set.spare_descriptors.len(), SPARE_DESCRIPTOR_VECS);
    // A large request gets a large spare, a small one a small spare.
    assert!(set.descriptor_vec(1000).capacity() >= SPARE_DESCRIPTOR_MAX_CAPACITY);
    assert_eq!(set.spare_large.len(), SPARE_LARGE_VECS - 1);
    assert!(set.descriptor_vec(8).capacity() < SPARE_SMALL_CAPACITY);
    // The first small ones dropped stayed with this thread: taken back without the
    // shared queue.
    let shared = set.spare_descriptors.len();
    for _ in 0..THREAD_SPARES - 1 {
        assert_eq!(set.descriptor_vec(8).capacity(), 32);
    }
    assert_eq!(
        set.spare_descriptors.len(),
        shared,
        "taken from this thread's own"
    );
    let _ = set.descriptor_vec(8);
    assert_eq!(
        set.spare_descriptors.len(),
        shared - 1,
        "then from the shared ones"
    );
}

/// A lender that hands buffers out of its own free list until it is closed (what an
/// engine's pool does; the DPDK one runs in `dpdk_ring_zero_copy`).
struct ListLender {
    free: std::sync::Mutex<Option<Vec<u32>>>,
}

impl BufferLender for ListLender {
    fn give_back(&self, indices: &[u32]) -> bool {
        match self.free.lock().unwrap().as_mut() {
            Some(free) => {
                free.extend_from_slice(indices);
                true
            }
            None => false,
        }
    }

    fn take(&self, out: &mut [u32], all_or_none: bool) -> Option<usize> {
        let mut guard = self.free.lock().unwrap();
        let free = guard.as_mut()?;
        if all_or_none && free.len() < out.len() {
            return Some(0);
        }
        let n = out.len().min(free.len());
        for slot in &mut out[..n] {
            *slot = free.pop().unwrap();
        }
        Some(n)
    }

    fn available(&self) -> Option<usize> {
        self.free.lock().unwrap().as_ref().map(Vec::len)
    }
}

#[test]
fn a_lent_region_allocates_from_its_lender_until_the_lender_closes() {
    let set = RegionSet::allocate(&[cfg(MemoryKind::Host, 8, 64)]).unwrap();
    let r = set.get(RegionId(0));
    let lender = std::sync::Arc::new(ListLender {
        free: std::sync::Mutex::new(Some(Vec::new())),
    });
    struct Shared(std::sync::Arc<ListLender>);
    impl BufferLender for Shared {
        fn give_back(&self, indices: &[u32]) -> bool {
            self.0.give_back(indices)
        }
        fn take(&self, out: &mut [u32], all_or_none: bool) -> Option<usize> {
            self.0.take(out, all_or_none)
        }
        fn available(&self) -> Option<usize> {
            self.0.available()
        }
    }
    r.lend_all(Box::new(Shared(lender.clone()))).unwrap();
    assert_eq!(r.available(), 0, "every buffer is the lender's");
    lender.give_back(&(0..8).collect::<Vec<_>>());
    let mut six = [0u32; 6];
    assert!(r.alloc_bulk(&mut six));
    assert_eq!(r.available(), 2);
    let mut three = [0u32; 3];
    assert!(!r.alloc_bulk(&mut three), "all or none");
    assert_eq!(r.alloc_up_to(&mut three), 2, "as many as there are");
    assert_eq!(r.alloc_run(1), None, "no runs from a lender");
    r.free_bulk(&six[..2]);
    assert_eq!(lender.available(), Some(2), "freed into the lender");
    // Closed: the region's own pool serves again and takes what comes back.
    *lender.free.lock().unwrap() = None;
    r.restock(&[six[0], six[1]]);
    r.free_bulk(&six[2..]);
    r.free_bulk(&three[..2]);
    assert_eq!(r.available(), 8);
    let mut all = [0u32; 8];
    assert!(r.alloc_bulk(&mut all));
}

#[test]
fn a_set_takes_regions_in_its_next_slots_until_full() {
    let set = RegionSet::allocate(&[cfg(MemoryKind::Host, 8, 64)]).unwrap();
    let plan = |bufs| crate::plan::RegionPlan {
        name: "r".into(),
        kind: MemoryKind::Host,
        affinity: 0,
        gpu_uuid: None,
        num_bufs: bufs,
        buf_size: 64,
        headroom: 0,
        stride: 64,
        lent: false,
        not_lent_because: None,
        hugepage_bytes: 0,
        retired: false,
    };
    assert!(matches!(
        set.append(&plan(16), RegionId(2)),
        Err(MemoryError::NoSlot { .. })
    ));
    set.append(&plan(16), RegionId(1)).unwrap();
    assert_eq!(set.len(), 2);
    assert_eq!(set.get(RegionId(1)).num_bufs(), 16);
    assert_eq!(set.id_of("r"), Some(RegionId(1)), "the newest of the name");
    assert_eq!(set.newest().map(|r| r.num_bufs()).collect::<Vec<_>>(), [16]);
    for i in 2..=LIVE_REGION_SLOTS {
        set.append(&plan(4), RegionId(i as u16)).unwrap();
    }
    assert_eq!(set.iter().count(), 1 + LIVE_REGION_SLOTS);
    let full = set.append(&plan(4), RegionId(1 + LIVE_REGION_SLOTS as u16));
    assert!(
        matches!(full, Err(MemoryError::NoSlot { capacity, .. }) if capacity == 1 + LIVE_REGION_SLOTS),
        "{full:?}"
    );
    assert!(set.try_get(RegionId(40)).is_none());
}

#[test]
fn host_region_is_page_aligned_and_pool_hands_out_each_buffer_once() {
    let r = Region::allocate(&cfg(MemoryKind::Host, 100, 1000)).unwrap();
    assert_eq!(r.extent().0 % 4096, 0);
    assert_eq!(r.stride(), 1024);
    let mut a = [0u32; 60];
    assert!(r.alloc_bulk(&mut a));
    let mut b = [0u32; 41];
    assert!(!r.alloc_bulk(&mut b), "only 40 left: all or nothing");
    let mut b = [0u32; 40];
    assert!(r.alloc_bulk(&mut b));
    let mut all: Vec<u32> = a.iter().chain(b.iter()).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    r.free_bulk(&a);
    assert_eq!(r.available(), 60);
}

#[test]
fn large_host_region_starts_on_a_huge_page_boundary() {
    // 3000 buffers of 2 KiB: about 6 MiB, so transparent huge pages can back it whole.
    let r = Region::allocate(&cfg(MemoryKind::Host, 3000, 2048)).unwrap();
    let huge = crate::hugepages::default_page_size();
    assert_eq!(r.extent().0 % huge, 0, "base {:#x}", r.extent().0);
    // Every byte of it is usable (the trimmed ends were outside the kept part).
    let mut all = vec![0u32; 3000];
    assert!(r.alloc_bulk(&mut all));
    let last = r.extent().0 + r.extent().1 as u64 - 1;
    // SAFETY: `last` is the region's last byte, inside the mapping it owns.
    unsafe { (last as *mut u8).write_volatile(7) };
    r.free_bulk(&all);
}

#[test]
fn device_region_without_driver_is_a_clear_error() {
    if cfg!(feature = "cuda") && gpudirect_present() {
        eprintln!("SKIP: a CUDA driver is present; the GPU test suite covers device regions");
        return;
    }
    let err = Region::allocate(&cfg(MemoryKind::Device, 4, 4096))
        .err()
        .expect("must fail without CUDA");
    let msg = err.to_string();
    assert!(
        msg.starts_with("memory region r: kind device needs a CUDA driver ("),
        "{msg}"
    );
}

fn gpudirect_present() -> bool {
    #[cfg(feature = "cuda")]
    return gpudirect::driver_present();
    #[cfg(not(feature = "cuda"))]
    false
}
