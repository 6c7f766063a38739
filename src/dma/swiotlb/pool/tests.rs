//! Unit tests of `pool`: the checks against the kernel's own behaviour, edge by edge.

use super::*;
use crate::hw::recorder::Recorder;

const MIB: u64 = 1 << 20;

fn mem() -> PhysMem {
    PhysMem::single(PhysAddr(0x8000_0000), 256 * MIB)
}

fn pool(size: u64, areas: Areas, search: SlotSearch) -> IoTlbMem {
    IoTlbMem::new(&mut mem(), 0, size, areas, search).unwrap()
}

fn req(size: u64) -> SlotRequest {
    SlotRequest {
        orig_addr: Some(PhysAddr(0x1_0000_0000)),
        alloc_size: size,
        alloc_align_mask: 0,
        min_align_mask: 0,
        seg_boundary_mask: u64::from(u32::MAX),
        tbl_dma_addr: 0x8000_0000,
        cpu: 0,
    }
}

fn find(p: &mut IoTlbMem, r: &mut Recorder, q: &SlotRequest) -> Option<usize> {
    p.find_slots(r, &PoolCosts::default(), q).ok()
}

fn release(p: &mut IoTlbMem, r: &mut Recorder, index: usize, size: u64) {
    p.release(r, &PoolCosts::default(), index, nr_slots(size) as usize);
}

#[test]
fn fresh_pool_free_runs_count_down_per_segment() {
    let p = pool(
        IO_TLB_DEFAULT_SIZE,
        Areas::Exact(1),
        SlotSearch::from(NextFit3_6),
    );
    assert_eq!(p.nslabs(), 32768);
    assert_eq!(p.table.borrow().slots[0].list, 128);
    assert_eq!(p.table.borrow().slots[127].list, 1);
    assert_eq!(p.table.borrow().slots[128].list, 128);
    assert_eq!(p.end().0 - p.start.0, IO_TLB_DEFAULT_SIZE);
    assert!(p.is_pristine());
}

#[test]
fn bad_configurations_are_errors() {
    let mut m = mem();
    let e = |r: Result<IoTlbMem, SwiotlbError>| r.unwrap_err();
    assert_eq!(
        e(IoTlbMem::new(
            &mut m,
            0,
            MIB + 4096,
            Areas::Exact(1),
            SlotSearch::from(NextFit3_6)
        )),
        SwiotlbError::BadSize(MIB + 4096)
    );
    assert_eq!(
        e(IoTlbMem::new(
            &mut m,
            0,
            0,
            Areas::Exact(1),
            SlotSearch::from(NextFit3_6)
        )),
        SwiotlbError::BadSize(0)
    );
    assert_eq!(
        e(IoTlbMem::new(
            &mut m,
            0,
            MIB,
            Areas::Exact(3),
            SlotSearch::from(AreaSearch6_3)
        )),
        SwiotlbError::AreasNotPowerOfTwo(3)
    );
    // 1 MiB is 4 segments: 8 areas cannot each get a whole one.
    assert!(matches!(
        e(IoTlbMem::new(
            &mut m,
            0,
            MIB,
            Areas::Exact(8),
            SlotSearch::from(AreaSearch6_3)
        )),
        SwiotlbError::TooManyAreas { nareas: 8, .. }
    ));
    assert_eq!(
        e(IoTlbMem::new(
            &mut m,
            0,
            MIB,
            Areas::Exact(2),
            SlotSearch::from(NextFit3_6)
        )),
        SwiotlbError::NoAreasBefore6_0(2)
    );
    assert!(matches!(
        e(IoTlbMem::new(
            &mut m,
            0,
            512 * MIB,
            Areas::Exact(1),
            SlotSearch::from(NextFit3_6)
        )),
        SwiotlbError::NoMemory(_)
    ));
    assert_eq!(m.allocations(), 0, "a refused pool allocates nothing");
}

#[test]
fn possible_cpus_round_up_to_a_power_of_two() {
    assert_eq!(Areas::PossibleCpus(6).resolve(), Ok(8));
    assert_eq!(Areas::PossibleCpus(0).resolve(), Ok(1));
    assert_eq!(Areas::PossibleCpus(8).resolve(), Ok(8));
    let p = pool(
        4 * MIB,
        Areas::PossibleCpus(3),
        SlotSearch::from(AreaSearch6_3),
    );
    assert_eq!(p.nareas(), 4);
    assert_eq!(p.table.borrow().area_nslabs, 512);
}

#[test]
fn next_fit_3_6_strides_two_slots_above_a_page_only() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
    let mut r = Recorder::new(64);
    // One slot: the rotating index moves to 1.
    assert_eq!(find(&mut p, &mut r, &req(100)), Some(0));
    // Exactly a page is not "larger than a page": stride 1, starts at slot 1.
    assert_eq!(find(&mut p, &mut r, &req(4096)), Some(1));
    // Larger than a page: the index (3) is aligned up to the stride: slot 4.
    assert_eq!(find(&mut p, &mut r, &req(4097)), Some(4));
    assert_eq!(p.table.borrow().areas[0].index, 7);
    // The run in front of the allocation was shortened to end at it.
    assert_eq!(p.table.borrow().slots[3].list, 1);
    assert_eq!(r.count_of(Counter::SpinLock), 3);
}

#[test]
fn allocations_never_span_a_segment() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
    let mut r = Recorder::new(64);
    assert_eq!(find(&mut p, &mut r, &req(100 * IO_TLB_SIZE)), Some(0));
    // 50 slots do not fit in the 28 left in segment 0: the search walks on to segment 1.
    assert_eq!(find(&mut p, &mut r, &req(50 * IO_TLB_SIZE)), Some(128));
    // The largest mapping is a whole segment; one slot more never fits anywhere.
    assert_eq!(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING)), Some(256));
    assert_eq!(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING + 1)), None);
}

#[test]
fn device_segment_boundary_is_respected() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
    let mut r = Recorder::new(64);
    let mut q = req(20 * IO_TLB_SIZE);
    q.seg_boundary_mask = 64 * 1024 - 1; // 32-slot windows of the bus address space
    assert_eq!(find(&mut p, &mut r, &q), Some(0));
    // Slots 20..40 would cross the 32-slot boundary: the next fit is slot 32.
    assert_eq!(find(&mut p, &mut r, &q), Some(32));
    for s in 20..32 {
        assert_ne!(
            p.table.borrow().slots[s].list,
            0,
            "slot {s} skipped, still free"
        );
    }
}

#[test]
fn rotating_index_wraps_to_the_start() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
    let mut r = Recorder::new(64);
    let n = p.nslabs();
    // Fill all but the last 4 slots of the pool, then free the first segment.
    let mut idx = Vec::new();
    for _ in 0..(n / 128 - 1) {
        idx.push(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING)).unwrap());
    }
    let tail = find(&mut p, &mut r, &req(124 * IO_TLB_SIZE)).unwrap();
    assert_eq!(tail, n - 128);
    assert_eq!(p.table.borrow().areas[0].index, n - 4);
    release(&mut p, &mut r, idx[0], IO_TLB_MAX_MAPPING);
    // 8 slots do not fit in the 4 at the end: the search wraps and takes slot 0.
    assert_eq!(find(&mut p, &mut r, &req(8 * IO_TLB_SIZE)), Some(0));
    assert_eq!(p.table.borrow().areas[0].index, 8);
}

#[test]
fn exhaustion_and_release_restore_a_fresh_pool() {
    // 6 KiB is more than a page: 3.6 aligns each start up to its 2-slot stride and 6.0 page-
    // aligns the slot, so each mapping of 3 slots leaves the 4th unused: 32 per segment.
    for (search, per_segment) in [
        (SlotSearch::from(NextFit3_6), 32),
        (SlotSearch::from(AreaSearch6_3), 32),
    ] {
        let mut p = pool(MIB, Areas::Exact(1), search);
        let mut r = Recorder::new(64);
        let mut got = Vec::new();
        while let Some(i) = find(&mut p, &mut r, &req(3 * IO_TLB_SIZE)) {
            got.push(i);
        }
        assert_eq!(got.len(), 4 * per_segment, "{}", p.rules());
        assert_eq!(p.table.borrow().used(), 4 * per_segment * 3);
        // Free in a scrambled order; the runs must merge back exactly.
        got.sort_by_key(|&i| (i * 7919) % 1031);
        for i in got {
            release(&mut p, &mut r, i, 3 * IO_TLB_SIZE);
        }
        assert!(p.is_pristine(), "{}", p.rules());
    }
}

#[test]
fn areas_start_at_the_cpus_area_and_fall_back_under_their_own_locks() {
    let mut p = pool(MIB, Areas::Exact(4), SlotSearch::from(AreaSearch6_3));
    assert_eq!(p.table.borrow().area_nslabs, 128);
    let mut r = Recorder::new(64);
    let mut q = req(IO_TLB_MAX_MAPPING);
    q.cpu = 6; // 6 & 3 = area 2
    assert_eq!(find(&mut p, &mut r, &q), Some(256));
    assert_eq!(r.count_of(Counter::SpinLock), 1);
    // Area 2 is full: its lock is taken, the search gives up at once, area 3 is next.
    r.reset();
    assert_eq!(find(&mut p, &mut r, &q), Some(384));
    assert_eq!(r.count_of(Counter::SpinLock), 2);
    // Areas 2, 3 full: wraps to area 0.
    r.reset();
    assert_eq!(find(&mut p, &mut r, &q), Some(0));
    assert_eq!(r.count_of(Counter::SpinLock), 3);
    assert_eq!(p.table.borrow().areas[2].used, 128);
    q.cpu = 1;
    assert_eq!(find(&mut p, &mut r, &q), Some(128));
    r.reset();
    assert_eq!(find(&mut p, &mut r, &q), None);
    assert_eq!(r.count_of(Counter::SpinLock), 4, "every area tried once");
}

#[test]
fn min_align_mask_keeps_the_low_bits_of_the_original() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(AreaSearch6_3));
    let mut r = Recorder::new(64);
    // NVMe-style 4 KiB - 1 mask; original at page offset 0x800 + 0x10: the slot must sit at
    // an odd slot (bit 11 set) and the data 0x10 into it.
    let mut q = req(0);
    q.min_align_mask = 0xfff;
    q.orig_addr = Some(PhysAddr(0x1_0000_0810));
    q.alloc_size = 100 + 0x10;
    let i = find(&mut p, &mut r, &q).unwrap();
    assert_eq!(i % 2, 1);
    assert_eq!(p.table.borrow().slots[i].alloc_size, 100);
}

#[test]
fn page_or_larger_allocations_are_page_aligned_in_6_3() {
    let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(AreaSearch6_3));
    let mut r = Recorder::new(64);
    assert_eq!(find(&mut p, &mut r, &req(100)), Some(0));
    // A page exactly: 6.3 page-aligns (>= PAGE_SIZE), so slot 1 is skipped.
    assert_eq!(find(&mut p, &mut r, &req(4096)), Some(2));
    // With an original, a 16 KiB alloc_align_mask makes the slot share its low 14 bits.
    let mut q = req(4096);
    q.alloc_align_mask = 0x3fff;
    assert_eq!(find(&mut p, &mut r, &q), Some(8));
    // 6.3 checks alignment only against an original: with none (swiotlb_alloc), the search
    // takes the first fit at the rotating index, stride or not.
    q.orig_addr = None;
    assert_eq!(find(&mut p, &mut r, &q), Some(10));
}

#[test]
fn search_steps_come_from_the_loop() {
    let p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
    let c = PoolCosts {
        lock: SwCost(1),
        search_step: SwCost(1000),
        slot_update: SwCost(0),
    };
    let mut m = crate::hw::model::Model::new(Default::default());
    // First fit at the rotating index: one lock, one step.
    p.find_slots(&mut m, &c, &req(IO_TLB_SIZE)).unwrap();
    assert_eq!(m.now_ps(), 1 + 1000);
}

/// Every release's search, fresh, in a 1 MiB pool of one area.
fn searches() -> Vec<(&'static str, SlotSearch)> {
    vec![
        ("3.6", SlotSearch::from(NextFit3_6)),
        ("4.11", SlotSearch::from(NextFit4_11)),
        ("5.12", SlotSearch::from(StrideFit5_12)),
        ("6.0", SlotSearch::from(StrideFit6_0)),
        ("6.3", SlotSearch::from(AreaSearch6_3)),
        ("6.9", SlotSearch::from(AreaSearch6_9)),
    ]
}

/// Run one search with each loop iteration costing 1 ps and nothing else costing anything:
/// the clock then reads the iterations.
fn steps(p: &mut IoTlbMem, q: &SlotRequest) -> (Result<usize, NoSlots>, u64) {
    let c = PoolCosts {
        lock: SwCost(0),
        search_step: SwCost(1),
        slot_update: SwCost(0),
    };
    let mut m = crate::hw::model::Model::new(Default::default());
    let r = p.find_slots(&mut m, &c, q);
    (r, m.now_ps())
}

/// (slot, search iterations) of a second request after a first small one moved the index
/// to slot 1, per release.
fn after_one_small(q: &SlotRequest) -> Vec<(&'static str, Result<usize, NoSlots>, u64)> {
    searches()
        .into_iter()
        .map(|(name, search)| {
            let mut p = pool(MIB, Areas::Exact(1), search);
            assert_eq!(steps(&mut p, &req(100)).0, Ok(0));
            let (r, n) = steps(&mut p, q);
            (name, r, n)
        })
        .collect()
}

#[test]
fn a_page_exactly_is_page_strided_from_4_11_and_6_0_aligns_the_start_where_6_3_steps() {
    // Index 1, a page: 3.6 strides only above a page (slot 1); 4.11 on page-align. 5.12 and
    // 6.0 align the start up to the stride (one look); 6.3 starts unaligned at slot 1 and
    // steps one slot to the aligned 2; 6.9 likewise against the slot's own alignment.
    assert_eq!(
        after_one_small(&req(4096)),
        vec![
            ("3.6", Ok(1), 1),
            ("4.11", Ok(2), 1),
            ("5.12", Ok(2), 1),
            ("6.0", Ok(2), 1),
            ("6.3", Ok(2), 2),
            ("6.9", Ok(2), 2),
        ]
    );
}

#[test]
fn page_stride_compares_the_original_only_in_6_3_to_6_8() {
    // A page from an original at a half-page offset, no min_align_mask: before 6.3 the page
    // alignment is a stride of the slot, never compared with the original (slot 0); 6.3
    // compares bit 11 bit by bit and needs an odd slot (slot 1); 6.9 aligns the slot again.
    let mut q = req(4096);
    q.orig_addr = Some(PhysAddr(0x1_0000_0800));
    let got: Vec<_> = searches()
        .into_iter()
        .map(|(name, search)| {
            let mut p = pool(MIB, Areas::Exact(1), search);
            (name, steps(&mut p, &q))
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("3.6", (Ok(0), 1)),
            ("4.11", (Ok(0), 1)),
            ("5.12", (Ok(0), 1)),
            ("6.0", (Ok(0), 1)),
            ("6.3", (Ok(1), 2)),
            ("6.9", (Ok(0), 1)),
        ]
    );
}

#[test]
fn with_no_original_6_0_still_honours_the_stride() {
    // swiotlb_alloc-style: no original, a page with a 16 KiB alloc_align_mask, index at 1.
    // 5.12 knows no alloc_align_mask (page stride: slot 2); 6.0 strides by 8 from the
    // aligned start (slot 8, one look); 6.3 compares nothing without an original and takes
    // slot 1; 6.9 checks the slot's own alignment and steps to 8.
    let mut q = req(4096);
    q.orig_addr = None;
    q.alloc_align_mask = 0x3fff;
    let got = after_one_small(&q);
    assert_eq!(
        got[2..],
        [
            ("5.12", Ok(2), 1),
            ("6.0", Ok(8), 1),
            ("6.3", Ok(1), 1),
            ("6.9", Ok(8), 8),
        ]
    );
}

#[test]
fn min_align_mask_strides_the_same_from_5_12_and_is_unknown_before() {
    // NVMe's 4 KiB - 1 mask, original at 0x810: the slot must be odd, the data 0x10 into it.
    let mut q = req(100 + 0x10);
    q.min_align_mask = 0xfff;
    q.orig_addr = Some(PhysAddr(0x1_0000_0810));
    let got: Vec<_> = searches()
        .into_iter()
        .map(|(name, search)| {
            let mut p = pool(MIB, Areas::Exact(1), search);
            let r = steps(&mut p, &q);
            (name, r, p.table.borrow().slots[r.0.unwrap()].alloc_size)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("3.6", (Ok(0), 1), 0x10 + 100),
            ("4.11", (Ok(0), 1), 0x10 + 100),
            ("5.12", (Ok(1), 2), 100),
            ("6.0", (Ok(1), 2), 100),
            ("6.3", (Ok(1), 2), 100),
            ("6.9", (Ok(1), 2), 100),
        ]
    );
}

#[test]
fn a_search_that_steps_off_its_stride_spins_until_6_3() {
    // Every odd slot in use, every even one free: a request that must start at an odd slot
    // (min_align_mask bit 11 set in the original) finds nothing. From index 2, 5.12–6.2 step
    // to slot 3 and then by 2 through the odd slots, wrap to 0, step to 1, and go on through
    // the odd slots for ever, never meeting the start (2) again: the kernel spins with the
    // lock held (the model stops after a pass: 512 looks). 6.3 gives up after one counted
    // pass: slot 2, the 255 odd slots above it, slot 0.
    let mut q = req(100);
    q.min_align_mask = 0xfff;
    q.orig_addr = Some(PhysAddr(0x1_0000_0800));
    for (name, search, want) in [
        (
            "5.12",
            SlotSearch::from(StrideFit5_12),
            (Err(NoSlots::Spins), 512),
        ),
        (
            "6.0",
            SlotSearch::from(StrideFit6_0),
            (Err(NoSlots::Spins), 512),
        ),
        (
            "6.3",
            SlotSearch::from(AreaSearch6_3),
            (Err(NoSlots::Full), 257),
        ),
        (
            "6.9",
            SlotSearch::from(AreaSearch6_9),
            (Err(NoSlots::Full), 257),
        ),
    ] {
        let mut p = pool(MIB, Areas::Exact(1), search);
        for i in 0..p.nslabs() {
            p.table.borrow_mut().slots[i].list = if i % 2 == 0 { 1 } else { 0 };
        }
        p.table.borrow_mut().areas[0].used = p.nslabs() / 2;
        p.table.borrow_mut().areas[0].index = 2;
        assert_eq!(steps(&mut p, &q), want, "{name}");
    }
}
