//! Property tests: the page tables against a reference map, the IOVA allocator against the rules
//! it must keep.

use dmasim::hw::recorder::Recorder;
use dmasim::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};
use dmasim::iommu::core::{IommuDomain, SplitKind, iommu_pgsize};
use dmasim::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, BlockUnmap, IoPgtableCfg};
use dmasim::iommu::iova::IovaDomain;
use dmasim::iommu::{IommuError, Prot};
use dmasim::mm::physmem::PhysMem;
use dmasim::types::{IovaAddr, PhysAddr};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    /// Map `len` granules at granule `at` to physical granule `pa`.
    Map {
        at: u64,
        len: u64,
        pa: u64,
    },
    Unmap {
        at: u64,
        len: u64,
    },
}

/// IOVA window in granules; positions are biased towards block boundaries so that blocks, splits
/// and table frees all happen.
fn op(window: u64, block: u64) -> impl Strategy<Value = Op> {
    // Most operations land in a few blocks, so that they meet each other: a block mapped over
    // pages, a page unmapped out of a block, a table freed under a block.
    let near = 8 * block;
    let pos = prop_oneof![
        1 => 0..window,
        2 => 0..near,
        2 => (0..8u64).prop_map(move |b| b * block),
        1 => (1..8u64).prop_map(move |b| b * block - 1),
    ];
    let len = prop_oneof![
        1..40u64,
        Just(block),
        (1..3u64).prop_map(move |n| n * block + 1),
        1..(3 * block)
    ];
    prop_oneof![
        (
            pos.clone(),
            len.clone(),
            prop_oneof![0..(1u64 << 20), (0..64u64).prop_map(move |b| b * block)]
        )
            .prop_map(|(at, len, pa)| Op::Map { at, len, pa }),
        (pos, len).prop_map(|(at, len)| Op::Unmap { at, len }),
    ]
}

fn domain(
    r: &mut Recorder,
    cfg: IoPgtableCfg,
    walk: WalkFlushKind,
    split: SplitKind,
) -> IommuDomain {
    let mem = PhysMem::single(PhysAddr(0x1000_0000_0000), 1 << 30).shared();
    let t = ArmLpaeIoPgtable::new(r, cfg, mem, None).unwrap();
    IommuDomain::new(r, t, Box::new(ArmSmmuDomain::new(r, 1, walk)), split)
}

/// The reference: granule page -> (physical granule, size in granules of the leaf mapping it).
/// Leaf sizes matter because the kernel's rules do: a block over smaller leaves replaces their
/// table, a block over a block of its own size (or any map under a larger one) is `-EEXIST`,
/// and unmapping part of a block splits it (<= 6.12) or is refused (6.13).
type Reference = BTreeMap<u64, (u64, u64)>;

fn remove_range(reference: &mut Reference, from: u64, to: u64) {
    let keys: Vec<u64> = reference.range(from..to).map(|(k, _)| *k).collect();
    for k in keys {
        reference.remove(&k);
    }
}

/// `iommu_map()` of `len` granules at `at` to `pa`, as the kernel's rules have it: the core's
/// page-size steps, then per slot in address order. On a refusal, everything from `at` up to the
/// refusing slot is gone (what this call had mapped is unmapped again; tables it replaced on the
/// way stay freed); the rest is untouched.
fn reference_map(
    reference: &mut Reference,
    bitmap: u64,
    g: u64,
    at: u64,
    len: u64,
    pa: u64,
) -> bool {
    let (mut a, mut p, mut left) = (at, pa, len);
    while left > 0 {
        let (pgsize, count) = iommu_pgsize(bitmap, a * g, p * g, left * g);
        let pg = pgsize / g;
        for k in 0..count {
            let slot = a + k * pg;
            if reference
                .range(slot..slot + pg)
                .any(|(_, &(_, leaf))| leaf >= pg)
            {
                remove_range(reference, at, slot);
                return false;
            }
            // A table under this slot (smaller leaves) is replaced, whatever it maps.
            remove_range(reference, slot, slot + pg);
            for i in 0..pg {
                reference.insert(slot + i, (p + k * pg + i, pg));
            }
        }
        a += count * pg;
        p += count * pg;
        left -= count * pg;
    }
    true
}

/// `arm_lpae_split_blk_unmap()`: the block of `size` granules at `base` becomes leaves of the
/// next level; the one holding `slot` is removed (if `pg` is that size) or split again.
fn reference_split(
    reference: &mut Reference,
    per_table: u64,
    base: u64,
    size: u64,
    slot: u64,
    pg: u64,
) {
    let s = size / per_table;
    for sub in (base..base + size).step_by(s as usize) {
        if (sub..sub + s).contains(&slot) {
            if s == pg {
                remove_range(reference, sub, sub + s);
            } else {
                reference_split(reference, per_table, sub, s, slot, pg);
            }
        } else {
            for k in sub..sub + s {
                if let Some(e) = reference.get_mut(&k) {
                    e.1 = s;
                }
            }
        }
    }
}

/// `iommu_unmap()` of a fully mapped range: the granules it reports unmapped.
fn reference_unmap(
    reference: &mut Reference,
    bitmap: u64,
    g: u64,
    block_unmap: BlockUnmap,
    at: u64,
    len: u64,
) -> u64 {
    let (mut a, mut left) = (at, len);
    let per_table = g / 8;
    while left > 0 {
        let (pgsize, count) = iommu_pgsize(bitmap, a * g, a * g, left * g);
        let pg = pgsize / g;
        for k in 0..count {
            let slot = a + k * pg;
            let leaf = reference[&slot].1;
            if leaf > pg {
                match block_unmap {
                    BlockUnmap::Split => {
                        let base = slot / leaf * leaf;
                        reference_split(reference, per_table, base, leaf, slot, pg);
                    }
                    BlockUnmap::Refuse => return slot - at,
                }
            } else {
                remove_range(reference, slot, slot + pg);
            }
        }
        a += count * pg;
        left -= count * pg;
    }
    len
}

fn check_against_reference(
    granule: u64,
    ias: u32,
    per_page: bool,
    block_unmap: BlockUnmap,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut r = Recorder::new(64);
    let split: SplitKind = if per_page {
        SplitKind::PerPage
    } else {
        SplitKind::UnmapPages
    };
    let walk: WalkFlushKind = if per_page {
        WalkFlushKind::ByVa
    } else {
        WalkFlushKind::Asid
    };
    let cfg = IoPgtableCfg {
        block_unmap,
        ..IoPgtableCfg::new(granule, ias)
    };
    let d = domain(&mut r, cfg, walk, split);
    let g = granule;
    let bitmap = d.pgsize_bitmap();
    let window = (1u64 << ias.min(34)) / g;
    let mut reference: Reference = BTreeMap::new();
    for op in ops {
        match op {
            Op::Map { at, len, pa } => {
                let len = len.min(window - at.min(window - 1)).max(1);
                if at + len > window {
                    continue;
                }
                let res = d.iommu_map(
                    &mut r,
                    IovaAddr(at * g),
                    PhysAddr(pa * g),
                    len * g,
                    Prot::RW,
                );
                if reference_map(&mut reference, bitmap, g, at, len, pa) {
                    prop_assert_eq!(res, Ok(()));
                } else {
                    prop_assert!(matches!(res, Err(IommuError::Exists(_))), "{res:?}");
                }
            }
            Op::Unmap { at, len } => {
                if at + len > window {
                    continue;
                }
                let mapped = reference.range(at..at + len).count() as u64;
                if mapped == len {
                    let res = d.iommu_unmap(&mut r, IovaAddr(at * g), len * g);
                    let done = reference_unmap(&mut reference, bitmap, g, block_unmap, at, len);
                    if done == len {
                        prop_assert_eq!(res, Ok(len * g));
                    } else if done == 0 {
                        prop_assert!(
                            matches!(res, Err(IommuError::PartialBlock { .. })),
                            "{res:?}"
                        );
                    } else {
                        prop_assert!(
                            matches!(res, Err(IommuError::ShortUnmap { unmapped, .. }) if unmapped == done * g),
                            "{res:?}, expected {done} granules"
                        );
                    }
                } else if mapped == 0 {
                    // All holes: the kernel may still free an empty table it meets at block size
                    // (and report those bytes), but it must not remove any mapping.
                    let _ = d.iommu_unmap(&mut r, IovaAddr(at * g), len * g);
                }
                // A range partly mapped is left alone: the kernel frees a whole table met at block
                // size whatever it maps, which a leaf-level reference cannot follow.
            }
        }
        prop_assert_eq!(
            d.pgtable.mem().allocations(),
            d.pgtable.count_tables(),
            "leaked or lost a table"
        );
    }
    for (&iova, &(pa, leaf)) in &reference {
        prop_assert_eq!(
            d.pgtable.walk(iova * g + 5),
            Some((PhysAddr(pa * g + 5), leaf * g)),
            "granule {:#x}",
            iova
        );
    }
    // Sample the holes too.
    for probe in (0..window).step_by((window / 997).max(1) as usize) {
        if !reference.contains_key(&probe) {
            prop_assert_eq!(d.pgtable.walk(probe * g), None);
        }
    }
    // Unmap every leaf that is left, then free: nothing may remain.
    let leaves: Vec<(u64, u64)> = reference
        .iter()
        .filter(|(k, (_, leaf))| *k % leaf == 0)
        .map(|(k, (_, leaf))| (*k, *leaf))
        .collect();
    for (s, l) in leaves {
        prop_assert_eq!(d.iommu_unmap(&mut r, IovaAddr(s * g), l * g), Ok(l * g));
    }
    prop_assert_eq!(d.pgtable.mem().allocations(), d.pgtable.count_tables());
    let mem = d.pgtable.shared_mem().clone();
    d.pgtable.free(&mut r);
    prop_assert_eq!(mem.borrow().allocations(), 0);
    prop_assert_eq!(mem.borrow().allocated_bytes(), 0);
    Ok(())
}

fn rule(refuse: bool) -> BlockUnmap {
    if refuse {
        BlockUnmap::Refuse
    } else {
        BlockUnmap::Split
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn pgtable_4k_matches_reference(per_page: bool, refuse: bool, ias in prop::sample::select(vec![32u32, 39, 48]),
                                    ops in prop::collection::vec(op(1 << 22, 512), 1..40)) {
        check_against_reference(4096, ias, per_page, rule(refuse), ops)?;
    }

    #[test]
    fn pgtable_16k_matches_reference(per_page: bool, refuse: bool, ias in prop::sample::select(vec![36u32, 47]),
                                     ops in prop::collection::vec(op(1 << 20, 2048), 1..30)) {
        check_against_reference(16384, ias, per_page, rule(refuse), ops)?;
    }

    #[test]
    fn pgtable_64k_matches_reference(per_page: bool, refuse: bool, ias in prop::sample::select(vec![34u32, 42, 48]),
                                     ops in prop::collection::vec(op(1 << 18, 8192), 1..20)) {
        check_against_reference(65536, ias, per_page, rule(refuse), ops)?;
    }
}

#[derive(Clone, Debug)]
enum IovaOp {
    Alloc { size: u64, fast: bool, cpu: usize },
    Free { pick: usize },
}

fn iova_op() -> impl Strategy<Value = IovaOp> {
    prop_oneof![
        3 => (1..70u64, any::<bool>(), 0..2usize)
            .prop_map(|(size, fast, cpu)| IovaOp::Alloc { size, fast, cpu }),
        2 => any::<usize>().prop_map(|pick| IovaOp::Free { pick }),
    ]
}

/// Whether an aligned range of `size` fits anywhere in `[start, limit]` given the tree's ranges.
fn fits(ranges: &[(u64, u64)], start: u64, limit: u64, size: u64) -> bool {
    let align = size.next_power_of_two();
    let mut lo = start.div_ceil(align) * align;
    while lo + size - 1 <= limit {
        let hi = lo + size - 1;
        if ranges.iter().all(|&(a, b)| b < lo || a > hi) {
            return true;
        }
        lo += align;
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    /// One limit per domain, as one device mask gives: the kernel's `max32_alloc_size` shortcut
    /// remembers the smallest failed size whatever the limit was, so a domain shared by masks
    /// of different widths can fail a request that would fit under the wider one.
    fn iova_allocator_keeps_its_rules(limit in prop::sample::select(vec![255u64, 511, 1023]),
                                      ops in prop::collection::vec(iova_op(), 1..120)) {
        let mut r = Recorder::new(64);
        let d = IovaDomain::new(&r, 4096, 1, 2).unwrap();
        // (pfn, size as asked, how freed)
        let mut live: Vec<(u64, u64, bool)> = Vec::new();
        for op in ops {
            match op {
                IovaOp::Alloc { size, fast, cpu } => {
                    let before: Vec<(u64, u64)> = d.ranges();
                    let res = if fast {
                        d.alloc_iova_fast(r.as_cpu(cpu), size, limit, true)
                    } else {
                        d.alloc_iova(&mut r, size, limit, true)
                    };
                    // What the tree holds for it: fast rounds small sizes up.
                    let held = if fast && size < 32 { size.next_power_of_two() } else { size };
                    match res {
                        Ok(pfn) => {
                            prop_assert_eq!(pfn % held.next_power_of_two(), 0, "size-aligned");
                            prop_assert!(pfn >= 1 && pfn + held - 1 <= limit, "inside the limit");
                            let (lo, hi) = d.find_iova(pfn).unwrap();
                            prop_assert_eq!((lo, hi), (pfn, pfn + held - 1));
                            prop_assert!(live.iter().all(|&(p, _, _)| p != pfn), "handed out twice");
                            live.push((pfn, size, fast));
                        }
                        Err(IommuError::IovaExhausted { .. }) => {
                            // After a flush (fast path) nothing cached remains in the way.
                            let ranges: Vec<(u64, u64)> = if fast { d.ranges() } else { before };
                            prop_assert!(!fits(&ranges, 1, limit, held), "failed although a range fits");
                        }
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
                IovaOp::Free { pick } => {
                    if live.is_empty() {
                        continue;
                    }
                    let (pfn, size, fast) = live.swap_remove(pick % live.len());
                    if fast {
                        d.free_iova_fast(r.as_cpu(0), pfn, size).unwrap();
                    } else {
                        d.free_iova(&mut r, pfn).unwrap();
                    }
                }
            }
            let ranges: Vec<(u64, u64)> = d.ranges();
            for w in ranges.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "overlap {:?}", w);
            }
            prop_assert_eq!(ranges.len(), live.len() + d.cached_pfns());
        }
    }

    /// Without frees, the walk starts at the previous allocation (the cached node) and goes
    /// down: the result is the highest size-aligned fit below it, or else (the retry) the highest
    /// fit above it, or else failure. (So it is not always the highest fit overall: a small
    /// request does not go back up into a gap a larger one skipped.)
    #[test]
    fn iova_allocations_are_top_down_from_the_cached_node(sizes in prop::collection::vec(1..40u64, 1..60)) {
        let mut r = Recorder::new(64);
        let d = IovaDomain::new(&r, 4096, 1, 1).unwrap();
        let limit = 1023u64;
        let mut prev: Option<(u64, u64)> = None;
        let mut failed_at: Option<u64> = None;
        for size in sizes {
            let ranges: Vec<(u64, u64)> = d.ranges();
            let align = size.next_power_of_two();
            let free = |lo: u64| lo >= 1 && lo + size - 1 <= limit
                && ranges.iter().all(|&(a, b)| b < lo || a > lo + size - 1);
            let highest_in = |from: u64, to_excl: u64| -> Option<u64> {
                if to_excl < from + size { return None; }
                let mut lo = (to_excl - size) / align * align;
                loop {
                    if lo < from { return None; }
                    if free(lo) { return Some(lo); }
                    if lo < align { return None; }
                    lo -= align;
                }
            };
            let expect = match prev {
                None => highest_in(1, limit + 1),
                Some((lo, hi)) => highest_in(1, lo).or_else(|| highest_in(hi + 1, limit + 1)),
            };
            // After a failure, requests at least that large fail at once (`max32_alloc_size`).
            let expect = if failed_at.is_some_and(|f| size >= f) { None } else { expect };
            match d.alloc_iova(&mut r, size, limit, true) {
                Ok(p) => {
                    prop_assert_eq!(Some(p), expect);
                    prev = Some((p, p + size - 1));
                }
                Err(_) => {
                    prop_assert_eq!(expect, None);
                    failed_at = Some(size);
                }
            }
        }
    }
}
