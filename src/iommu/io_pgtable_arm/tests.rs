//! Unit tests of `io_pgtable_arm`: the checks against the kernel's own behaviour, edge by edge.

use super::*;
use crate::arch::arm64::{Arm64, DirRules};
use crate::hw::recorder::Recorder;
use crate::hw::{CacheOp, Counter};
use crate::iommu::FlushOps;
use crate::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};

pub(crate) fn mem() -> SharedPhysMem {
    PhysMem::single(PhysAddr(0x1_0000_0000), 256 << 20).shared()
}

fn table(r: &mut Recorder, granule: u64, ias: u32) -> ArmLpaeIoPgtable {
    ArmLpaeIoPgtable::new(r, IoPgtableCfg::new(granule, ias), mem(), None).unwrap()
}

/// `check_map`'s and `check_unmap`'s one-condition fast paths give what the checks one by
/// one give, for addresses either side of each end of the input and output ranges (and up
/// to `u64::MAX`, where an add would wrap), every page size and count near the edges. (A
/// fast path that refuses too much only sends the request to the checks in order, which
/// answer the same; one that accepts too much is what this catches.)
#[test]
fn check_map_and_unmap_are_the_checks_in_order_at_every_edge() {
    let mut r = Recorder::new(64);
    let mut cfg = IoPgtableCfg::new(0x1000, 40);
    cfg.oas = 36;
    let t = ArmLpaeIoPgtable::new(&mut r, cfg, mem(), None).unwrap();
    let edges = |end: u64| {
        let mut v = vec![0, 0x1000, 0x20_0000, u64::MAX - 0xfff, u64::MAX];
        for d in [0x40_0000, 0x20_0000, 0x2000, 0x1000, 0] {
            v.extend([end - d, end + d]);
        }
        v
    };
    let mut checked = 0u32;
    for iova in edges(1 << 40) {
        for paddr in edges(1 << 36) {
            for pgsize in [0, 0x1000, 0x2000, 0x20_0000, 1 << 30, 1 << 63] {
                for pgcount in [0, 1, 2, 512, u64::MAX] {
                    let (i, p) = (IovaAddr(iova), PhysAddr(paddr));
                    assert_eq!(
                        t.check_map(i, p, pgsize, pgcount),
                        t.check_map_in_order(i, p, pgsize, pgcount),
                        "iova {iova:#x} paddr {paddr:#x} pgsize {pgsize:#x} x {pgcount}"
                    );
                    assert_eq!(
                        t.check_unmap(iova, pgsize, pgcount),
                        t.check_unmap_in_order(iova, pgsize, pgcount),
                        "unmap: iova {iova:#x} pgsize {pgsize:#x} x {pgcount}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 15 * 15 * 6 * 5);
}

#[test]
fn levels_and_top_table_follow_granule_and_ias() {
    let mut r = Recorder::new(64);
    for (g, ias, levels, start, pgd) in [
        (0x1000, 48, 4, 0, 4096),
        (0x1000, 39, 3, 1, 4096),
        (0x1000, 32, 3, 1, 32),
        (0x4000, 48, 4, 0, 16),
        (0x4000, 36, 2, 2, 16384),
        (0x10000, 48, 3, 1, 512),
        (0x10000, 42, 2, 2, 65536),
    ] {
        let t = table(&mut r, g, ias);
        assert_eq!(
            (t.levels(), t.start_level(), t.pgd_size()),
            (levels, start, pgd),
            "{g:#x}/{ias}"
        );
        assert_eq!(t.mem().allocations(), 1);
    }
}

#[test]
fn bad_configurations_are_errors() {
    let mut r = Recorder::new(64);
    let e = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(8192, 48), mem(), None).unwrap_err();
    assert_eq!(e, IommuError::BadGranule(8192));
    let e = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 52), mem(), None).unwrap_err();
    assert_eq!(e, IommuError::BadIas(52));
    let e = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 31), mem(), None).unwrap_err();
    assert_eq!(e, IommuError::BadIas(31));
}

/// One-page maps and unmaps through the shortcut do what the general path does: the same
/// descriptors, results, charges, counts and clock. A write that changes nothing but the
/// memory's write stamp makes the shortcut walk from the top instead of using the
/// remembered table; the unmaps go to and fro between leaf tables (the remembered walk is
/// replaced), meet a hole, and some gather lazily. Each run is compared with the same calls
/// on a table without the shortcut.
#[test]
fn the_shortcut_does_what_the_general_path_does() {
    use crate::hw::model::{Model, ModelParams, SmmuParams};
    let sw = [
        ("arm_lpae_walk_level", 3_000),
        ("arm_lpae_clear_pte", 5_000),
        ("arm_lpae_unmap_pages", 7_000),
        ("arm_smmu_tlb_inv_range", 11_000),
        ("arm_smmu_tlb_inv_step", 13_000),
    ];
    let params = ModelParams {
        line_bytes: 64,
        smmu: Some(SmmuParams {
            mmio_write_ps: 20_000,
            mmio_read_ps: 300_000,
            tlbi_va_ps: 50_000,
            ..SmmuParams::default()
        }),
        sw: sw.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..ModelParams::default()
    };
    let base = 0x40_0000_0000u64;
    let mapped = [0u64, 1, 2, 3, 4, 511, 512, 513, 1023, 1024, 1025];
    let unmapped = [0u64, 1, 512, 2, 3, 2, 513, 511, 1024, 4, 1025, 1023];
    let run = |shortcut: bool, force_walk: bool| {
        let mut m = Model::new(params.clone());
        let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&m, 1, WalkFlushKind::ByVa));
        let mut t =
            ArmLpaeIoPgtable::new(&mut m, IoPgtableCfg::new(4096, 48), mem(), None).unwrap();
        if !shortcut {
            t.plain_walk();
        }
        for &p in &mapped {
            let (iova, pa) = (IovaAddr(base + p * 4096), PhysAddr(0x8000_0000 + p * 8192));
            t.map_pages(&mut m, &f, iova, pa, 4096, 1, Prot::RW)
                .unwrap();
        }
        m.clear_ledger();
        let t0 = m.now_ps();
        let mut results = Vec::new();
        for (i, &p) in unmapped.iter().enumerate() {
            if force_walk {
                let pgd = t.ttbr();
                let same = t.read_pte(pgd);
                t.shared_mem().borrow_mut().write_u64(pgd, same);
            }
            let mut g = IommuIotlbGather::new();
            g.queued = i % 3 == 2;
            let r = t.unmap_pages(&mut m, &f, &mut g, IovaAddr(base + p * 4096), 4096, 1);
            results.push((r, g));
        }
        let ptes: Vec<_> = mapped
            .iter()
            .map(|&p| t.pte_at(base + p * 4096, 3))
            .collect();
        (results, ptes, m.ledger().stacks(), m.now_ps() - t0)
    };
    let general = run(false, false);
    assert_eq!(run(true, false), general);
    assert_eq!(run(true, true), general);
    let fast = general;
    let (results, ptes, stacks, _) = fast;
    // Page 2's second unmap meets the hole; every other page was unmapped once.
    assert_eq!(
        results[5].0,
        Err(IommuError::NotMapped(IovaAddr(base + 2 * 4096)))
    );
    assert!(ptes.iter().all(|&p| p == Some(0)));
    let tlbival: u64 = stacks
        .iter()
        .map(|s| s.counts[Counter::SmmuTlbival as usize])
        .sum();
    // Eleven pages unmapped; the three gathered lazily are not invalidated (the fourth lazy
    // call met the hole).
    assert_eq!(tlbival, 11 - 3);
}

/// The remembered leaf table is used only while the memory is unchanged: a descriptor on the
/// way cleared behind the table's back (a stray write into a table page) is what the next
/// map and unmap meet, as a walk from the top would.
#[test]
fn the_remembered_walk_gives_way_to_any_write() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    let base = 0x20_0000u64;
    for i in 0..2 {
        t.map_pages(
            &mut r,
            &f,
            IovaAddr(base + i * 4096),
            PhysAddr(0x8000_0000 + i * 8192),
            4096,
            1,
            Prot::RW,
        )
        .unwrap();
    }
    let tables = t.mem().allocations();
    // The level-2 entry leading to the leaf table, cleared.
    let l2 = t.pte_to_paddr(t.pte_at(base, 1).unwrap());
    let l2_ptep = PhysAddr(l2.0 + t.lvl_idx(base, 2) * 8);
    assert!(ArmLpaeIoPgtable::pte_is_table(t.read_pte(l2_ptep), 2));
    t.shared_mem().borrow_mut().write_u64(l2_ptep, 0);
    // Unmapping a page of that range now meets the hole.
    let mut g = IommuIotlbGather::new();
    let warns = r.count_of(Counter::Warn);
    assert_eq!(
        t.unmap_pages(&mut r, &f, &mut g, IovaAddr(base), 4096, 1),
        Err(IommuError::NotMapped(IovaAddr(base)))
    );
    assert_eq!(r.count_of(Counter::Warn), warns + 1);
    // Mapping the next page installs a fresh leaf table instead of writing into the old one.
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(base + 2 * 4096),
        PhysAddr(0x8000_4000),
        4096,
        1,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(t.mem().allocations(), tables + 1);
    assert_eq!(t.pte_at(base + 4096, 3), Some(0));
    assert_eq!(
        t.walk(base + 2 * 4096).map(|(p, _)| p),
        Some(PhysAddr(0x8000_4000))
    );
}

/// `descend` passes the levels a walk merely goes through as the level-by-level loop does:
/// runs of pages across a table's end, a block over a table, a partial block unmap, runs that
/// meet tables and holes, a non-coherent walker (for which the one-page shortcut declines
/// every call), both ways of clearing a run. Each sequence gives the same results, clock,
/// charges by stack and tables with the speed devices on as with them off.
#[test]
fn descend_does_what_the_level_by_level_walk_does() {
    use crate::hw::model::{Model, ModelParams};
    let sw = [
        ("arm_lpae_walk_level", 3_000),
        ("arm_lpae_clear_pte", 5_000),
    ];
    let params = ModelParams {
        line_bytes: 64,
        sw: sw.iter().map(|&(k, v)| (k.to_string(), v)).collect(),
        ..ModelParams::default()
    };
    let (g, m2) = (0x1000u64, 2u64 << 20);
    // (map?, IOVA, page size, count)
    let calls = [
        (true, m2 - 4 * g, g, 600),
        (true, 4 * m2, g, 3),
        (true, 4 * m2, m2, 2),
        (true, 5 * m2 + g, g, 1),
        (true, 8 * m2, m2, 1),
        (false, 8 * m2 + g, g, 2),
        (false, m2 - 2 * g, g, 5),
        (false, m2 - 4 * g, g, 8),
        (false, 12 * m2, g, 1),
        (false, 0, m2, 3),
        (false, 4 * m2, g, 1),
        (false, 8 * m2, m2, 1),
    ];
    let run = |plain: bool, coherent: bool, pte_clear: PteClear| {
        let mut m = Model::new(params.clone());
        let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&m, 1, WalkFlushKind::ByVa));
        let mut cfg = IoPgtableCfg::new(g, 48);
        cfg.pte_clear = pte_clear;
        let walker = (!coherent).then(|| ArchOps::from(Arm64::new(DirRules::Since5_19)));
        let mut t = ArmLpaeIoPgtable::new(&mut m, cfg, mem(), walker).unwrap();
        if plain {
            t.plain_walk();
        }
        let mut results = Vec::new();
        for &(map, iova, size, n) in &calls {
            let r = if map {
                let pa = PhysAddr(0x8000_0000 + iova);
                t.map_pages(&mut m, &f, IovaAddr(iova), pa, size, n, Prot::RW)
            } else {
                let mut g = IommuIotlbGather::new();
                t.unmap_pages(&mut m, &f, &mut g, IovaAddr(iova), size, n)
            };
            results.push((r, m.now_ps(), t.shape()));
        }
        (results, m.ledger().stacks())
    };
    for coherent in [true, false] {
        for pte_clear in [PteClear::PerPte, PteClear::PerRun] {
            let plain = run(true, coherent, pte_clear);
            assert_eq!(
                run(false, coherent, pte_clear),
                plain,
                "{coherent} {pte_clear:?}"
            );
            let refused = plain.0.iter().filter(|r| r.0.is_err()).count();
            assert_eq!(refused, 2, "{:?}", plain.0);
        }
    }
}

#[test]
fn descriptors_are_bit_exact() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    let prot = Prot::RW.union(Prot::CACHE);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x1000),
        PhysAddr(0x8765_4000),
        4096,
        1,
        prot,
    )
    .unwrap();
    // page | AttrIndx 1 | AP unpriv | SH inner | AF | nG
    assert_eq!(
        t.pte_at(0x1000, 3),
        Some(0x8765_4000 | 0x3 | 0x4 | 0x40 | 0x300 | 0x400 | 0x800)
    );
    let l2 = t.pte_at(0x1000, 2).unwrap();
    assert_eq!(l2 & 0xfff, 0x3, "table descriptor");
    // Every combination of the six IOMMU_* flags, with bits above them set too (which change
    // nothing): the leaf carries `arm_lpae_prot_to_pte()` of the flags.
    for bits in 0..64u32 {
        let iova = 0x10_0000 + u64::from(bits) * 4096;
        let prot = Prot(bits | 0x8000_0040);
        let pa = PhysAddr(0x9000_0000);
        let n = t.map_pages(&mut r, &f, IovaAddr(iova), pa, 4096, 1, prot);
        if prot.contains(Prot::READ) || prot.contains(Prot::WRITE) {
            assert_eq!(n, Ok(4096));
            let want = t.prot_to_pte(Prot(bits)) | 0x9000_0000 | 0x3;
            assert_eq!(t.pte_at(iova, 3), Some(want), "prot {bits:#x}");
        } else {
            assert_eq!(n, Ok(0), "no access: nothing mapped");
        }
    }
    assert_eq!(t.walk(0x1abc), Some((PhysAddr(0x8765_4abc), 4096)));
    // A read-only, non-cacheable, no-exec 2M block.
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x4000_0000),
        PhysAddr(0x8000_0000),
        2 << 20,
        1,
        Prot::READ.union(Prot::NOEXEC),
    )
    .unwrap();
    assert_eq!(
        t.pte_at(0x4000_0000, 2),
        Some(0x8000_0000 | 0x1 | 0x40 | 0x80 | 0x200 | 0x400 | 0x800 | (3 << 53))
    );
    assert_eq!(t.walk(0x4012_3456), Some((PhysAddr(0x8012_3456), 2 << 20)));
    // 1G block at level 1.
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x80_0000_0000),
        PhysAddr(0xc000_0000),
        1 << 30,
        1,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(t.pte_at(0x80_0000_0000, 1).unwrap() & 0x3, 0x1);
    assert_eq!(
        t.walk(0x80_0000_0010),
        Some((PhysAddr(0xc000_0010), 1 << 30))
    );
    // Device memory: AttrIndx 2.
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x2000),
        PhysAddr(0x9000_0000),
        4096,
        1,
        Prot::RW.union(Prot::MMIO),
    )
    .unwrap();
    assert_eq!(t.pte_at(0x2000, 3).unwrap() & 0x1c, 2 << 2);
}

/// Every configuration `new` accepts has level shifts a u64 can be shifted by, the premise
/// of the wrapping shifts in `lvl_idx` and `block_size`, and its granule as the bitmap's
/// lowest size, the premise of `min_pagesz`.
#[test]
fn level_shifts_are_below_64() {
    let mut r = Recorder::new(64);
    for granule in [0x1000, 0x4000, 0x10000] {
        for ias in 32..=48 {
            let t = table(&mut r, granule, ias);
            let bitmap = t.pgsize_bitmap();
            assert_eq!(t.min_pagesz(), bitmap & bitmap.wrapping_neg());
            for lvl in 0..ARM_LPAE_MAX_LEVELS {
                assert!(
                    t.lvl_shift(lvl) < 64,
                    "granule {granule:#x} ias {ias} lvl {lvl}"
                );
                assert_eq!(t.block_size(lvl), 1u64 << t.lvl_shift(lvl));
            }
        }
    }
}

#[test]
fn blocks_for_16k_and_64k_granules() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x4000, 48);
    assert_eq!(t.pgsize_bitmap(), 0x4000 | (32 << 20));
    assert_eq!(t.min_pagesz(), 0x4000);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(32 << 20),
        PhysAddr(0x8000_0000),
        32 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(
        t.walk((32 << 20) + 0x1234),
        Some((PhysAddr(0x8000_1234), 32 << 20))
    );
    let t = table(&mut r, 0x10000, 48);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(512 << 20),
        PhysAddr(0x2000_0000),
        512 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x10000),
        PhysAddr(0x3000_0000),
        0x10000,
        3,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(t.walk(0x2_0010), Some((PhysAddr(0x3001_0010), 0x10000)));
    assert_eq!(
        t.walk((512 << 20) + 5),
        Some((PhysAddr(0x2000_0005), 512 << 20))
    );
}

/// Map 4K at 0x200000, then 2M at 0x200000: the kernel frees the level-3 table that still
/// maps the page (one walk flush: 512 TLBIVA by VA on an MMU-500 without the Qualcomm
/// preference) and installs the block, with no WARN.
#[test]
fn a_block_replaces_a_table_that_still_maps_pages() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let mut t = table(&mut r, 0x1000, 48);
    let map = |t: &ArmLpaeIoPgtable, r: &mut Recorder, f: &FlushOps, pa, sz| {
        t.map_pages(r, f, IovaAddr(0x20_0000), PhysAddr(pa), sz, 1, Prot::RW)
    };
    map(&mut t, &mut r, &f, 0x8000_5000, 4096).unwrap();
    assert_eq!(t.count_tables(), 4);
    r.reset();
    assert_eq!(map(&mut t, &mut r, &f, 0x8020_0000, 2 << 20), Ok(2 << 20));
    assert_eq!(r.count_of(Counter::SmmuTlbiva), 512);
    assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
    assert_eq!(r.count_of(Counter::Warn), 0);
    assert_eq!(t.count_tables(), 3, "the level-3 table is gone");
    assert_eq!(t.mem().allocations(), 3, "and freed");
    assert_eq!(t.walk(0x20_0123), Some((PhysAddr(0x8020_0123), 2 << 20)));
    // Now a leaf is there: mapping over it is refused with a WARN.
    assert_eq!(
        map(&mut t, &mut r, &f, 0x8040_0000, 2 << 20),
        Err(IommuError::Exists(IovaAddr(0x20_0000)))
    );
    assert_eq!(r.count_of(Counter::Warn), 1);
}

/// In one call the entries are checked in order: the tables before a leaf are replaced
/// (their mappings lost) before the leaf refuses the call, and nothing is installed.
#[test]
fn a_refused_block_run_has_already_freed_the_tables_before_the_leaf() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    let (a, b) = (0x4000_0000u64, 0x4020_0000u64);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(a),
        PhysAddr(0x9000_0000),
        4096,
        1,
        Prot::RW,
    )
    .unwrap();
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(b),
        PhysAddr(0x9000_0000),
        2 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    r.reset();
    let e = t.map_pages(&mut r, &f, IovaAddr(a), PhysAddr(0), 2 << 20, 2, Prot::RW);
    assert_eq!(e, Err(IommuError::Exists(IovaAddr(b))));
    assert_eq!(r.count_of(Counter::SmmuTlbiva), 512, "one walk flush");
    assert_eq!(r.count_of(Counter::Warn), 1);
    assert_eq!(t.walk(a), None, "the page under the replaced table is gone");
    assert_eq!(t.walk(b), Some((PhysAddr(0x9000_0000), 2 << 20)));
}

#[test]
fn map_over_a_mapping_is_refused_and_unmap_of_a_hole_is_an_error() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x20_0000),
        PhysAddr(0x8000_0000),
        4096,
        4,
        Prot::RW,
    )
    .unwrap();
    let e = t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x20_2000),
        PhysAddr(0x9000_0000),
        4096,
        1,
        Prot::RW,
    );
    assert_eq!(e, Err(IommuError::Exists(IovaAddr(0x20_2000))));
    assert_eq!(r.count_of(Counter::Warn), 1);
    let mut g = IommuIotlbGather::new();
    let e = t.unmap_pages(&mut r, &f, &mut g, IovaAddr(0x40_0000), 4096, 1);
    assert_eq!(e, Err(IommuError::NotMapped(IovaAddr(0x40_0000))));
    assert_eq!(r.count_of(Counter::Warn), 2);
    // A run that meets a hole stops there, with a WARN.
    assert_eq!(
        t.unmap_pages(&mut r, &f, &mut g, IovaAddr(0x20_0000), 4096, 8),
        Ok(4 * 4096)
    );
    assert_eq!(r.count_of(Counter::Warn), 3);
    assert!(matches!(
        t.map_pages(
            &mut r,
            &f,
            IovaAddr(0x20_0800),
            PhysAddr(0),
            4096,
            1,
            Prot::RW
        ),
        Err(IommuError::Misaligned { .. })
    ));
    assert!(matches!(
        t.map_pages(
            &mut r,
            &f,
            IovaAddr(1 << 48),
            PhysAddr(0),
            4096,
            1,
            Prot::RW
        ),
        Err(IommuError::OutOfRange { .. })
    ));
    assert!(matches!(
        t.map_pages(&mut r, &f, IovaAddr(0), PhysAddr(0), 8192, 1, Prot::RW),
        Err(IommuError::BadPageSize { .. })
    ));
}

#[test]
fn unmap_stops_at_the_end_of_a_last_level_table() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    let iova = (2 << 20) - 8 * 4096;
    let mut left = 16u64;
    let mut at = iova;
    while left > 0 {
        let m = t
            .map_pages(
                &mut r,
                &f,
                IovaAddr(at),
                PhysAddr(0x8000_0000 + at),
                4096,
                left,
                Prot::RW,
            )
            .unwrap();
        at += m;
        left -= m / 4096;
    }
    let mut g = IommuIotlbGather::new();
    assert_eq!(
        t.unmap_pages(&mut r, &f, &mut g, IovaAddr(iova), 4096, 16),
        Ok(8 * 4096)
    );
    assert_eq!(r.count_of(Counter::SmmuTlbival), 8);
}

#[test]
fn partial_unmap_of_a_block_splits_it() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    let base = 0x4000_0000u64;
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(base),
        PhysAddr(0x8000_0000),
        2 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    let tables = t.mem().allocations();
    let mut g = IommuIotlbGather::new();
    assert_eq!(
        t.unmap_pages(&mut r, &f, &mut g, IovaAddr(base + 0x5000), 4096, 2),
        Ok(8192)
    );
    assert_eq!(t.mem().allocations(), tables + 1);
    assert_eq!(t.walk(base + 0x5000), None);
    assert_eq!(t.walk(base + 0x6000), None);
    assert_eq!(t.walk(base + 0x4fff), Some((PhysAddr(0x8000_4fff), 4096)));
    assert_eq!(t.walk(base + 0x7000), Some((PhysAddr(0x8000_7000), 4096)));
    assert_eq!(r.count_of(Counter::SmmuTlbival), 2);
    // Splitting a 1G block down to a 4K hole goes through a level-2 table of 2M blocks.
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(2u64 << 30),
        PhysAddr(1 << 32),
        1 << 30,
        1,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(
        t.unmap_pages(
            &mut r,
            &f,
            &mut g,
            IovaAddr((2u64 << 30) + (6 << 20)),
            4096,
            1
        ),
        Ok(4096)
    );
    assert_eq!(
        t.walk((2u64 << 30) + (4 << 20)),
        Some((PhysAddr((1 << 32) + (4 << 20)), 2 << 20))
    );
    assert_eq!(
        t.walk((2u64 << 30) + (6 << 20) + 4096),
        Some((PhysAddr((1 << 32) + (6 << 20) + 4096), 4096))
    );
}

#[test]
fn a_block_replaces_an_empty_table_with_a_walk_flush() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x20_0000),
        PhysAddr(0x8000_0000),
        4096,
        1,
        Prot::RW,
    )
    .unwrap();
    let mut g = IommuIotlbGather::new();
    t.unmap_pages(&mut r, &f, &mut g, IovaAddr(0x20_0000), 4096, 1)
        .unwrap();
    let before = t.mem().allocations();
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x20_0000),
        PhysAddr(0x8000_0000),
        2 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    assert_eq!(t.mem().allocations(), before - 1);
    assert_eq!(r.count_of(Counter::SmmuTlbiva), 512);
}

/// A 4K, 48-bit table behind an MMU-500 (walk flush by VA) whose walker is not coherent: every
/// table and PTE it writes is cleaned by arm64's maintenance.
fn non_coherent_table(r: &mut Recorder) -> (FlushOps, ArmLpaeIoPgtable) {
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(r, 1, WalkFlushKind::ByVa));
    let arch = ArchOps::from(Arm64::new(DirRules::Since5_19));
    let t = ArmLpaeIoPgtable::new(r, IoPgtableCfg::new(0x1000, 48), mem(), Some(arch)).unwrap();
    (f, t)
}

#[test]
fn non_coherent_walker_cleans_every_pte_write() {
    let mut r = Recorder::new(64);
    let (f, t) = non_coherent_table(&mut r);
    // The new top-level table is cleaned whole: 64 lines, one DSB.
    assert_eq!((r.lines(CacheOp::Clean), r.barriers), (64, 1));
    let mut r = Recorder::new(64);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0),
        PhysAddr(0x8000_0000),
        4096,
        16,
        Prot::RW,
    )
    .unwrap();
    // Three new tables (64 lines + DSB each), three table entries (1 line + DSB each), then
    // the 16 PTEs: 128 bytes, two lines, one DSB.
    assert_eq!(r.lines(CacheOp::Clean), 3 * 64 + 3 + 2);
    assert_eq!(r.barriers, 3 + 3 + 1);
    assert_ne!(t.pte_at(0, 2).unwrap() & PTE_SW_SYNC, 0);
    let mut r = Recorder::new(64);
    let mut g = IommuIotlbGather::new();
    t.unmap_pages(&mut r, &f, &mut g, IovaAddr(0), 4096, 16)
        .unwrap();
    // 5.15: each cleared PTE cleaned on its own.
    assert_eq!((r.lines(CacheOp::Clean), r.barriers), (16, 16));
}

#[test]
fn freeing_returns_every_table() {
    let mut r = Recorder::new(64);
    let f = FlushOps::ArmSmmu(ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa));
    let t = table(&mut r, 0x1000, 48);
    for i in 0..5u64 {
        t.map_pages(
            &mut r,
            &f,
            IovaAddr(i << 30),
            PhysAddr(0x8000_0000),
            4096,
            1,
            Prot::RW,
        )
        .unwrap();
    }
    assert!(t.mem().allocations() > 5);
    let m = t.shared_mem().clone();
    t.free(&mut r);
    assert_eq!(m.borrow().allocations(), 0);
}

/// `__arm_lpae_map` cleans an entry it finds without the software sync mark before it looks at
/// it: on the way down to a 4 KB page inside a live 2 MB block, the block's entry is cleaned
/// (one line, one DSB) and the map then fails with -EEXIST, the block untouched.
#[test]
fn a_map_into_a_live_block_cleans_the_block_entry_then_refuses() {
    let mut r = Recorder::new(64);
    let (f, t) = non_coherent_table(&mut r);
    t.map_pages(
        &mut r,
        &f,
        IovaAddr(0),
        PhysAddr(0x8000_0000),
        2 << 20,
        1,
        Prot::RW,
    )
    .unwrap();
    let block = t.pte_at(0, 2).unwrap();
    assert_eq!(block & PTE_SW_SYNC, 0, "a leaf never carries the mark");
    let mut r = Recorder::new(64);
    let e = t.map_pages(
        &mut r,
        &f,
        IovaAddr(0x1000),
        PhysAddr(0x9000_0000),
        4096,
        1,
        Prot::RW,
    );
    assert!(matches!(e, Err(IommuError::Exists(_))), "{e:?}");
    assert_eq!((r.lines(CacheOp::Clean), r.barriers), (1, 1));
    assert_eq!(t.pte_at(0, 2), Some(block));
}

/// `arm_lpae_install_table`'s `cmpxchg64`: a table goes in only over the entry the caller
/// read; when another CPU's table went in first, the entry keeps it and the caller learns it
/// (and cleans the entry for the winner if the winner has not marked it yet).
#[test]
fn a_table_install_that_loses_keeps_the_winners_table() {
    let mut r = Recorder::new(64);
    let (_, t) = non_coherent_table(&mut r);
    let ptep = t.pgd;
    let (mine, theirs) = (
        t.alloc_table(&mut r).unwrap(),
        t.alloc_table(&mut r).unwrap(),
    );
    let mut r = Recorder::new(64);
    assert_eq!(
        t.install_table(&mut r, theirs, ptep, 0),
        0,
        "the first install wins"
    );
    let won = t.mem.borrow().read_u64(ptep);
    assert_ne!(won & PTE_SW_SYNC, 0);
    assert_eq!(r.lines(CacheOp::Clean), 1);
    let mut r = Recorder::new(64);
    assert_eq!(
        t.install_table(&mut r, mine, ptep, 0),
        won,
        "the second sees the first's"
    );
    assert_eq!(t.mem.borrow().read_u64(ptep), won, "and leaves it");
    // Marked already: nothing to clean for it.
    assert_eq!(r.lines(CacheOp::Clean), 0);
}
