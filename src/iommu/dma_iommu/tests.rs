//! Unit tests of `dma_iommu`: the checks against the kernel's own behaviour, edge by edge.

use super::*;
use crate::arch::arm64::{Arm64, DirRules};
use crate::dma::sync_policy::{SyncKind, SyncPaths, SyncRule};
use crate::hw::recorder::Recorder;
use crate::hw::{CacheOp, Counter};
use crate::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};
use crate::iommu::core::SplitKind;
use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
use crate::mm::physmem::PhysMem;
use crate::scatterlist::SgEntry;
use crate::types::IovaAddr;

fn iommu_dma(r: &mut Recorder, batched: bool) -> IommuDma {
    let sync = if batched {
        SyncRule::Batched
    } else {
        SyncRule::PerEntry
    };
    iommu_dma_with(r, sync)
}

fn iommu_dma_with(r: &mut Recorder, sync: impl Into<SyncPaths>) -> IommuDma {
    let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
    let t = ArmLpaeIoPgtable::new(r, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
    let ops = Box::new(ArmSmmuDomain::new(r, 1, WalkFlushKind::Asid));
    let d = IommuDomain::new(r, t, ops, SplitKind::UnmapPages);
    IommuDma::new(r, d, 1, Arm64::new(DirRules::Since5_19), sync).unwrap()
}

fn entry(page: u64, offset: u32, length: u32) -> SgEntry {
    SgEntry {
        page: PhysAddr(page),
        offset,
        length,
        dma_address: DmaAddr::MAPPING_ERROR,
        dma_length: 0,
    }
}

#[test]
fn map_sg_lays_entries_out_contiguously_and_merges_segments() {
    let mut r = Recorder::new(64);
    let d = iommu_dma(&mut r, true);
    let dev = Device::new("cam", true, 64);
    // Scattered pages; the third starts mid-page so it begins a new segment, and its short
    // length ends the segment after it.
    let mut sgt = SgTable {
        entries: vec![
            entry(0x8000_0000, 0, 4096),
            entry(0x8010_0000, 0, 4096),
            entry(0x8020_0000, 0x100, 0x200),
            entry(0x8030_0000, 0, 4096),
            entry(0x8040_0000, 0, 4096),
        ],
        nents: 0,
    };
    let n = d
        .map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(n, 3);
    let base = sgt.entries[0].dma_address.0;
    // Five granules, an 8-granule aligned IOVA range (rounded to a power of two).
    assert_eq!(base % (8 * 4096), 0);
    assert_eq!(sgt.entries[0].dma_length, 8192);
    assert_eq!({ sgt.entries[1].dma_address }, DmaAddr(base + 8192 + 0x100));
    assert_eq!(sgt.entries[1].dma_length, 0x200);
    assert_eq!({ sgt.entries[2].dma_address }, DmaAddr(base + 3 * 4096));
    assert_eq!(sgt.entries[2].dma_length, 8192);
    assert_eq!({ sgt.entries[3].dma_address }, DmaAddr::MAPPING_ERROR);
    assert_eq!(sgt.nents, 3);
    for (i, e) in sgt.entries.iter().enumerate() {
        let iova = base + i as u64 * 4096 + u64::from(e.offset);
        assert_eq!(
            d.domain.iova_to_phys(&mut r, IovaAddr(iova)),
            Some(e.phys()),
            "entry {i}"
        );
    }
    let mut r = Recorder::new(64);
    d.unmap_sg(
        &mut r,
        &dev,
        &mut sgt,
        DmaDirection::Bidirectional,
        DmaAttrs::NONE,
    );
    assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
    assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(base)), None);
    // Five page leaves in one table: five TLBIVAL and one sync, no walk flush.
    assert_eq!(r.count_of(Counter::SmmuTlbival), 5);
    assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
    assert_eq!(d.iovad.cached_pfns(), 1);
}

#[test]
fn an_entry_that_would_straddle_a_segment_boundary_moves_to_the_next_one() {
    let mut r = Recorder::new(64);
    let d = iommu_dma(&mut r, true);
    let mut dev = Device::new("d", true, 64);
    dev.seg_boundary_mask = 0xffff;
    let mut sgt = SgTable {
        entries: vec![
            entry(0x8000_0000, 0, 0x3000),
            entry(0x8010_0000, 0, 0x3000),
            entry(0x8020_0000, 0, 0xc000),
        ],
        nents: 0,
    };
    let n = d
        .map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(n, 2);
    let base = sgt.entries[0].dma_address.0;
    assert_eq!(sgt.entries[0].dma_length, 0x6000);
    assert_eq!({ sgt.entries[1].dma_address }, DmaAddr(base + 0x10000));
    assert_eq!(sgt.entries[1].dma_length, 0xc000);
    assert_eq!(
        d.domain.iova_to_phys(&mut r, IovaAddr(base + 0x10000)),
        Some(PhysAddr(0x8020_0000))
    );
    d.unmap_sg(
        &mut r,
        &dev,
        &mut sgt,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
    assert_eq!(d.domain.pgtable.walk(base), None);
    assert_eq!(d.domain.pgtable.walk(base + 0x10000), None);
}

/// A 5 GiB list of 1, 2 and 2 GiB entries: under a 32-bit boundary (up to 5.9, or any
/// PCI device) the last entry would straddle 4 GiB, so the one before it is padded by
/// 1 GiB and the list takes 6 GiB of IOVA; from 5.10 a device with no boundary of its
/// own gets ULONG_MAX and the list is laid out back to back. (A list of at most 4 GiB
/// never differs: its IOVA range is aligned to its size, so no entry but the first can
/// start on a 4 GiB boundary.)
#[test]
fn the_default_segment_boundary_pads_a_list_across_4g_only_before_5_10() {
    use crate::device::SegBoundary;
    let gib = 1u64 << 30;
    for (rule, third_at, mapped) in [
        (SegBoundary::Bits32, 4 * gib, 6 * gib),
        (SegBoundary::UlongMax, 3 * gib, 5 * gib),
    ] {
        let mut r = Recorder::new(64);
        let d = iommu_dma(&mut r, false);
        let dev = Device::new("d", true, 36).with_default_seg_boundary(rule);
        let mut sgt = SgTable {
            entries: vec![
                entry(0x10_0000_0000, 0, gib as u32),
                entry(0x20_0000_0000, 0, (2 * gib) as u32),
                entry(0x30_0000_0000, 0, (2 * gib) as u32),
            ],
            nents: 0,
        };
        let dir = DmaDirection::ToDevice;
        // The entries exceed max_seg_size, so `max_len - cur_len` wraps (unsigned int) and
        // the first two merge; the third starts a segment either way: at the 4 GiB
        // boundary, or because 3 GiB + 2 GiB does not fit the wrapped room.
        assert_eq!(d.map_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE), Ok(2));
        let base = sgt.entries[0].dma_address.0;
        assert_eq!(base % (8 * gib), 0, "{rule:?}: aligned to the range's size");
        assert_eq!(u64::from(sgt.entries[0].dma_length), 3 * gib);
        assert_eq!(
            { sgt.entries[1].dma_address.0 },
            base + third_at,
            "{rule:?}"
        );
        assert_eq!(u64::from(sgt.entries[1].dma_length), 2 * gib);
        let (lo, hi) = d.iovad.ranges().into_iter().next().unwrap();
        assert_eq!((hi - lo + 1) << 12, mapped, "{rule:?}");
        // The pad is mapped too: the second entry's mapping runs on past its 2 GiB.
        let past = d.domain.iova_to_phys(&mut r, IovaAddr(base + 3 * gib));
        let want = (rule == SegBoundary::Bits32).then_some(PhysAddr(0x20_8000_0000));
        assert_eq!(past, want.or(Some(PhysAddr(0x30_0000_0000))), "{rule:?}");
        d.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
        assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
        assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(base)), None);
    }
}

#[test]
fn segments_stop_at_max_seg_size() {
    let mut r = Recorder::new(64);
    let d = iommu_dma(&mut r, true);
    let dev = Device::new("d", true, 64);
    let mut sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), 256 << 10, &[4096]);
    assert_eq!(
        d.map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::NONE
        ),
        Ok(4)
    );
    assert!(sgt.entries[..4].iter().all(|e| e.dma_length == 64 << 10));
}

#[test]
fn non_coherent_map_sg_cleans_each_entry_and_flushes_once_when_batched() {
    for (batched, barriers) in [(false, 16), (true, 1)] {
        let mut r = Recorder::new(64);
        let d = iommu_dma(&mut r, batched);
        let dev = Device::new("d", false, 64);
        let mut sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), 64 << 10, &[4096]);
        let mut r = Recorder::new(64);
        d.map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
        assert_eq!(r.lines(CacheOp::Clean), 16 * 64);
        assert_eq!(r.barriers, barriers);
        let mut r = Recorder::new(64);
        d.unmap_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::FromDevice,
            DmaAttrs::NONE,
        );
        assert_eq!(r.lines(CacheOp::Inval), 16 * 64);
    }
}

/// DSB per call for a non-coherent device, 16 entries of 4 KiB: 7.0's helpers each end in
/// a DSB; 7.1 (v2's 8/8 folded into the merged patch 4) issues every entry of an sg call and
/// flushes once. A TO_DEVICE unmap_page invalidates nothing, yet 7.1 flushes in the generic
/// code.
#[test]
fn iommu_dma_batches_its_sg_paths_in_7_1() {
    // (map_sg, sync_sg_for_cpu, unmap_sg, map_page, unmap_page TO_DEVICE)
    for (kind, want) in [
        (SyncKind::PerEntry, (16, 16, 16, 1, 0)),
        (SyncKind::Batched, (1, 1, 1, 1, 1)),
    ] {
        let mut r = Recorder::new(64);
        let d = iommu_dma_with(&mut r, kind);
        let dev = Device::new("d", false, 64);
        let dir = DmaDirection::Bidirectional;
        let mut sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), 64 << 10, &[4096]);
        let mut r = Recorder::new(64);
        d.map_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE)
            .unwrap();
        assert_eq!(r.lines(CacheOp::Clean), 16 * 64);
        let map_sg = r.barriers;
        let mut r = Recorder::new(64);
        d.sync_sg_for_cpu(&mut r, &dev, &sgt, dir);
        assert_eq!(r.lines(CacheOp::Inval), 16 * 64);
        let sync_sg = r.barriers;
        let mut r = Recorder::new(64);
        d.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
        assert_eq!(r.lines(CacheOp::Inval), 16 * 64);
        let unmap_sg = r.barriers;
        let mut r = Recorder::new(64);
        let a = d
            .map_page(
                &mut r,
                &dev,
                PhysAddr(0x8000_0000),
                4096,
                dir,
                DmaAttrs::NONE,
            )
            .unwrap();
        let map_page = r.barriers;
        let mut r = Recorder::new(64);
        d.unmap_page(
            &mut r,
            &dev,
            a,
            4096,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
        assert!(r.ops.is_empty());
        assert_eq!(
            (map_sg, sync_sg, unmap_sg, map_page, r.barriers),
            want,
            "{kind:?}"
        );
    }
}

/// One map_page + unmap_page of a 4 KiB FROM_DEVICE buffer, then an unmap_page of the
/// same (now unmapped) address, on the Recorder: per unmap_page, (lookups, WARNs, unmap
/// calls into the page table, IOVA frees, lines invalidated).
fn unmap_page_counts(rel: UnmapLookup, coherent: bool) -> [[u64; 5]; 2] {
    let mut r = Recorder::new(64);
    let d = iommu_dma(&mut r, false)
        .with_release_rules(crate::iommu::iova::IovaRelease::Linux6_2.rules(), rel);
    let dev = Device::new("d", coherent, 36);
    let dir = DmaDirection::FromDevice;
    let a = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(0x8000_0000),
            4096,
            dir,
            DmaAttrs::NONE,
        )
        .unwrap();
    let mut out = [[0; 5]; 2];
    for o in &mut out {
        r.reset();
        d.unmap_page(&mut r, &dev, a, 4096, dir, DmaAttrs::NONE);
        *o = [
            r.count_of(Counter::IovaToPhys),
            r.count_of(Counter::Warn),
            r.count_of(Counter::PgtableUnmapCall),
            r.count_of(Counter::IovaFree),
            r.lines(CacheOp::Inval),
        ];
    }
    out
}

/// 5.10 looks up only for a non-coherent device's sync; 5.11–5.14 add a lookup for every
/// device, which refuses (WARN, nothing unmapped or freed) an address nothing maps; 5.15
/// on makes that one lookup serve the sync too. 5.10 goes on to unmap the hole: the page
/// table's WARN and `__iommu_dma_unmap`'s, then an IOVA free the model refuses (the
/// kernel's `free_iova_fast` would cache the pfn a second time).
#[test]
fn unmap_page_looks_up_the_address_as_each_release_does() {
    use UnmapLookup::*;
    for (rel, coherent, mapped, hole) in [
        (Linux5_10, false, [1, 0, 1, 1, 64], [1, 2, 1, 0, 0]),
        (Linux5_10, true, [0, 0, 1, 1, 0], [0, 2, 1, 0, 0]),
        (Linux5_11, false, [2, 0, 1, 1, 64], [2, 1, 0, 0, 0]),
        (Linux5_11, true, [1, 0, 1, 1, 0], [1, 1, 0, 0, 0]),
        (Linux5_15, false, [1, 0, 1, 1, 64], [1, 1, 0, 0, 0]),
        (Linux5_15, true, [1, 0, 1, 1, 0], [1, 1, 0, 0, 0]),
    ] {
        let got = unmap_page_counts(rel, coherent);
        assert_eq!(got, [mapped, hole], "{rel:?}, coherent {coherent}");
    }
}

/// Each lookup is a walk of the table charged at `arm_lpae_iova_to_phys`: a coherent
/// device's unmap_page pays one from 5.11, none in 5.10.
#[test]
fn each_lookup_charges_one_table_walk() {
    use crate::hw::model::{Model, ModelParams};
    use UnmapLookup::*;
    let mut spent = Vec::new();
    for rel in [Linux5_10, Linux5_11, Linux5_15] {
        let mut p = ModelParams::default();
        p.sw.insert("arm_lpae_iova_to_phys".into(), 40_000);
        let mut m = Model::new(p);
        let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
        let t = ArmLpaeIoPgtable::new(&mut m, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
        let ops = Box::new(ArmSmmuDomain::new(&m, 1, WalkFlushKind::Asid));
        let dom = IommuDomain::new(&m, t, ops, SplitKind::UnmapPages);
        let arch = Arm64::new(DirRules::Since5_19);
        let d = IommuDma::new(&m, dom, 1, arch, SyncKind::PerEntry)
            .unwrap()
            .with_release_rules(crate::iommu::iova::IovaRelease::Linux6_2.rules(), rel);
        let dev = Device::new("d", true, 36);
        let dir = DmaDirection::ToDevice;
        let a = d
            .map_page(
                &mut m,
                &dev,
                PhysAddr(0x8000_0000),
                4096,
                dir,
                DmaAttrs::NONE,
            )
            .unwrap();
        let t0 = m.ledger().total_ps();
        d.unmap_page(&mut m, &dev, a, 4096, dir, DmaAttrs::NONE);
        spent.push(m.ledger().total_ps() - t0);
    }
    assert_eq!(spent[1] - spent[0], 40_000);
    assert_eq!(spent[2], spent[1]);
}

#[test]
fn map_page_keeps_the_offset_and_unmap_page_frees_the_iova() {
    let mut r = Recorder::new(64);
    let d = iommu_dma(&mut r, true);
    let dev = Device::new("d", false, 32);
    let a = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(0x8000_0f00),
            0x200,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(a.0 & 0xfff, 0xf00);
    assert!(a.0 < 1 << 32, "below the device's 32-bit mask");
    assert_eq!(
        d.domain.iova_to_phys(&mut r, IovaAddr(a.0 + 0x100)),
        Some(PhysAddr(0x8000_1000))
    );
    // Crossing a page boundary: two granules mapped.
    assert_eq!(
        d.domain.pgtable.walk(a.0 - 0xf00 + 4096).map(|w| w.0),
        Some(PhysAddr(0x8000_1000))
    );
    d.unmap_page(
        &mut r,
        &dev,
        a,
        0x200,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
    assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(a.0)), None);
    // The same IOVA comes back from the magazine.
    let b = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(0x9000_0f00),
            0x200,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(b, a);
    assert_eq!(d.iovad.stats().rcache_hits, 1);
    let huge = d.map_page(
        &mut r,
        &dev,
        PhysAddr(0x1000),
        u64::MAX,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(huge.is_err());
    // Unmapping twice is reported, not a panic.
    d.unmap_page(
        &mut r,
        &dev,
        b,
        0x200,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    d.unmap_page(
        &mut r,
        &dev,
        b,
        0x200,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(!d.warnings.borrow().is_empty());
}

fn map_unmap_4k<H: DeviceHw>(r: &mut H, d: &mut IommuDma, dev: &Device, n: u64) -> Vec<DmaAddr> {
    (0..n)
        .map(|i| {
            let a = d
                .map_page(
                    r,
                    dev,
                    PhysAddr(0x8000_0000 + i * 4096),
                    4096,
                    DmaDirection::ToDevice,
                    DmaAttrs::NONE,
                )
                .unwrap();
            d.unmap_page(r, dev, a, 4096, DmaDirection::ToDevice, DmaAttrs::NONE);
            a
        })
        .collect()
}

/// 300 map/unmap pairs of one page. Strict: each unmap invalidates its leaf and syncs, and
/// the IOVA comes straight back from the magazine. Lazy: no leaf invalidation and no sync;
/// the ring holds 255 entries, so the 256th unmap finds it full, flushes the ASID once and
/// frees those 255; the 256th and the 44 after it (45) wait for the drain's flush.
#[test]
fn lazy_unmaps_skip_invalidation_and_flush_once_per_full_queue() {
    let dev = Device::new("nic", true, 64);
    let mut r = Recorder::new(64);
    let mut d = iommu_dma(&mut r, true);
    let mut r = Recorder::new(64);
    map_unmap_4k(&mut r, &mut d, &dev, 300);
    assert_eq!(r.count_of(Counter::SmmuTlbival), 300);
    assert_eq!(r.count_of(Counter::SmmuTlbsync), 300);
    assert_eq!(r.count_of(Counter::SmmuTlbiasid), 0);
    assert_eq!(d.iovad.stats().tree_allocs, 1);
    assert_eq!(d.iovad.stats().rcache_hits, 299);
    assert_eq!(d.flush_queue_drain(&mut r), 0);
    assert_eq!(d.fq_stats(), FqStats::default());

    let mut r = Recorder::new(64);
    let mut d = iommu_dma(&mut r, true).with_invalidation(&r, Invalidation::Lazy);
    assert_eq!(d.invalidation(), Invalidation::Lazy);
    let mut r = Recorder::new(64);
    map_unmap_4k(&mut r, &mut d, &dev, 300);
    assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
    assert_eq!(r.count_of(Counter::SmmuTlbival), 0);
    assert_eq!(r.count_of(Counter::SmmuTlbiva), 0);
    assert_eq!(r.count_of(Counter::SmmuTlbiasid), 1);
    assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
    let flush = "iommu_dma_unmap_page > queue_iova > fq_flush_iotlb > arm_smmu_tlb_inv_context_s1";
    assert_eq!(r.frames.iter().filter(|f| *f == flush).count(), 1);
    let st = d.fq_stats();
    assert_eq!(
        st,
        FqStats {
            queued: 300,
            freed: 255,
            full_flushes: 1,
            timer_flushes: 0,
            drain_flushes: 0,
        }
    );
    assert_eq!(d.flush_queue().map(|f| f.pending()), Some(45));
    // Maps 1..=256 found every magazine empty; maps 257..=300 reused the 255 freed.
    assert_eq!(d.iovad.stats().tree_allocs, 256);
    assert_eq!(d.iovad.stats().rcache_hits, 44);

    assert_eq!(d.flush_queue_drain(&mut r), 45);
    assert_eq!(r.count_of(Counter::SmmuTlbiasid), 2);
    assert_eq!(r.count_of(Counter::SmmuTlbsync), 2);
    assert_eq!(d.fq_stats().freed, 300);
    assert_eq!(d.fq_stats().drain_flushes, 1);
    assert_eq!(d.fq_stats().flushes(), 2);
    assert_eq!(d.flush_queue().map(|f| f.pending()), Some(0));
    assert_eq!(d.flush_queue().and_then(|f| f.timer_expires_ps()), None);
    // Every IOVA is back, cached for reuse: 256 allocated, 256 in the magazines.
    assert_eq!(d.iovad.ranges().len(), 256);
    assert_eq!(d.iovad.cached_pfns(), 256);
    // Nothing left to drain.
    assert_eq!(d.flush_queue_drain(&mut r), 0);
    assert_eq!(r.count_of(Counter::SmmuTlbiasid), 2);
}

#[test]
fn a_lazy_unmap_keeps_its_iova_until_a_flush() {
    let dev = Device::new("d", true, 64);
    let mut r = Recorder::new(64);
    let mut d = iommu_dma(&mut r, true).with_invalidation(&r, Invalidation::Lazy);
    let a = map_unmap_4k(&mut r, &mut d, &dev, 1)[0];
    // The translation is gone at once; only the IOVA waits.
    assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(a.0)), None);
    assert_eq!(d.iovad.find_iova(a.0 >> 12), Some((a.0 >> 12, a.0 >> 12)));
    let b = map_unmap_4k(&mut r, &mut d, &dev, 1)[0];
    assert_ne!(b, a);
    assert_eq!(d.flush_queue_drain(&mut r), 2);
    // Freed in queue order into the magazine, which hands back the last one first.
    let c = map_unmap_4k(&mut r, &mut d, &dev, 2);
    assert_eq!(c, vec![b, a]);
    assert_eq!(d.iovad.stats().tree_allocs, 2);
    assert!(d.warnings.borrow().is_empty(), "{:?}", d.warnings);
}

#[test]
fn lazy_unmaps_on_smmu_v3_issue_one_asid_invalidation_per_flush() {
    use crate::iommu::arm_smmu_v3::{ArmSmmuV3Domain, Cmdq, SmmuV3Features};
    let dev = Device::new("nic", true, 64);
    for (mode, nh_va, nh_asid, syncs) in [
        (Invalidation::Strict, 300, 0, 300),
        (Invalidation::Lazy, 0, 2, 2),
    ] {
        let mut r = Recorder::new(64);
        let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
        let t = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
        let ops = Box::new(
            ArmSmmuV3Domain::new(&r, 3, 4096, SmmuV3Features::default(), Cmdq::new(10)).unwrap(),
        );
        let dom = IommuDomain::new(&r, t, ops, SplitKind::UnmapPages);
        let arch = Arm64::new(DirRules::Since5_19);
        let mut d = IommuDma::new(&r, dom, 1, arch, SyncKind::Batched)
            .unwrap()
            .with_invalidation(&r, mode);
        let mut r = Recorder::new(64);
        map_unmap_4k(&mut r, &mut d, &dev, 300);
        d.flush_queue_drain(&mut r);
        assert_eq!(r.count_of(Counter::CmdqTlbiNhVa), nh_va, "{mode:?}");
        assert_eq!(r.count_of(Counter::CmdqTlbiNhAsid), nh_asid, "{mode:?}");
        assert_eq!(r.count_of(Counter::CmdqSync), syncs, "{mode:?}");
        assert_eq!(d.iovad.cached_pfns(), d.iovad.ranges().len(), "{mode:?}");
    }
}

/// A coherent device's lazy iommu-dma domain (SMMU, 4 KB pages) on a fresh Model, whose clock
/// the flush queue's timer runs on.
fn lazy_on_model() -> (Device, crate::hw::model::Model, IommuDma) {
    use crate::hw::model::{Model, ModelParams};
    let mut m = Model::new(ModelParams::default());
    let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
    let t = ArmLpaeIoPgtable::new(&mut m, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
    let ops = Box::new(ArmSmmuDomain::new(&m, 1, WalkFlushKind::Asid));
    let dom = IommuDomain::new(&m, t, ops, SplitKind::UnmapPages);
    let arch = Arm64::new(DirRules::Since5_19);
    let d = IommuDma::new(&m, dom, 1, arch, SyncKind::Batched)
        .unwrap()
        .with_invalidation(&m, Invalidation::Lazy);
    (Device::new("d", true, 64), m, d)
}

/// The timer on the Model's clock: 10 ms after the first queueing, the next call flushes
/// first and finds the IOVA free; 5 ms is not enough.
#[test]
fn the_flush_queue_timer_fires_at_the_first_call_after_ten_ms() {
    use crate::hw::SmmuPort;
    let (dev, mut m, mut d) = lazy_on_model();
    let t0 = m.now_ps();
    let a = map_unmap_4k(&mut m, &mut d, &dev, 1)[0];
    let expires = d.flush_queue().and_then(|f| f.timer_expires_ps());
    assert_eq!(expires, Some(t0 + 10_000_000_000));
    // Idle for 5 ms: the timer has not expired, the IOVA is still queued.
    m.udelay(5_000);
    let b = map_unmap_4k(&mut m, &mut d, &dev, 1)[0];
    assert_ne!(b, a);
    assert_eq!(d.fq_stats().timer_flushes, 0);
    // Another 5 ms: the next call runs the timer's flush before mapping.
    m.udelay(5_000);
    let c = map_unmap_4k(&mut m, &mut d, &dev, 1)[0];
    assert_eq!(d.fq_stats().timer_flushes, 1);
    assert_eq!(d.fq_stats().freed, 2);
    assert_eq!(c, b);
    let totals = m.ledger().totals();
    assert_eq!(totals[Counter::SmmuTlbiasid as usize], 1);
    assert_eq!(totals[Counter::SmmuTlbival as usize], 0);
    assert!(
        m.ledger().stacks().iter().any(|s| s.stack_string()
            == "fq_flush_timeout > fq_flush_iotlb > arm_smmu_tlb_inv_context_s1"),
        "the timer runs as its own top-level frame"
    );
    // Re-armed by the third unmap's queueing.
    assert!(d.flush_queue().and_then(|f| f.timer_expires_ps()) > expires);
}

/// A CPU that idles past the timer's expiry runs it then, through the ops' timers, rather
/// than at its next call: the call that follows is charged no flush, and finds its IOVA free.
#[test]
fn an_idle_cpu_runs_the_expired_timer_before_the_next_call() {
    let (dev, mut m, mut d) = lazy_on_model();
    assert_eq!(d.next_timer_ps(), None);
    let a = map_unmap_4k(&mut m, &mut d, &dev, 1)[0];
    let expires = d.next_timer_ps().expect("the queueing armed the timer");
    // Not yet expired: nothing runs.
    m.idle_until(expires - 1);
    assert_eq!(d.run_timers(&mut m), 0);
    m.idle_until(expires);
    assert_eq!(d.run_timers(&mut m), 1);
    assert_eq!(m.ledger().totals()[Counter::FqFlush as usize], 1);
    assert_eq!(d.next_timer_ps(), None);
    assert_eq!((d.fq_stats().timer_flushes, d.fq_stats().freed), (1, 1));
    // The next call runs no timer and reuses the IOVA the timer freed.
    let flushes = m.ledger().totals()[Counter::FqFlush as usize];
    let b = map_unmap_4k(&mut m, &mut d, &dev, 1)[0];
    assert_eq!(b, a);
    assert_eq!(m.ledger().totals()[Counter::FqFlush as usize], flushes);
}

#[test]
fn a_drain_frees_every_cpus_queue_with_one_flush() {
    let dev = Device::new("d", true, 64);
    let mut r = Recorder::new(64);
    let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
    let t = ArmLpaeIoPgtable::new(&mut r, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
    let ops = Box::new(ArmSmmuDomain::new(&r, 1, WalkFlushKind::Asid));
    let dom = IommuDomain::new(&r, t, ops, SplitKind::UnmapPages);
    let arch = Arm64::new(DirRules::Since5_19);
    let mut d = IommuDma::new(&r, dom, 2, arch, SyncKind::Batched)
        .unwrap()
        .with_invalidation(&r, Invalidation::Lazy);
    map_unmap_4k(&mut r, &mut d, &dev, 3);
    r.cpu = 1;
    map_unmap_4k(&mut r, &mut d, &dev, 2);
    assert_eq!(d.flush_queue().map(|f| f.pending()), Some(5));
    let mut r = Recorder::new(64);
    assert_eq!(d.flush_queue_drain(&mut r), 5);
    assert_eq!(r.count_of(Counter::SmmuTlbiasid), 1);
    // One lock per CPU's ring.
    assert_eq!(r.count_of(Counter::SpinLock), 2);
    // A CPU the queue does not have: that unmap is strict, and says so.
    r.cpu = 0;
    let a = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(0x9000_0000),
            4096,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    r.cpu = 7;
    d.unmap_page(
        &mut r,
        &dev,
        a,
        4096,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert_eq!(r.count_of(Counter::SmmuTlbival), 1);
    assert_eq!(d.fq_stats().queued, 5);
    // ... and, as for a strict unmap from that CPU, its IOVA cannot be freed.
    assert_eq!(d.warnings.borrow().len(), 2, "{:?}", d.warnings);
    assert!(d.warnings.borrow()[0].starts_with("no flush queue for CPU 7"));
    assert!(
        d.warnings.borrow()[1].contains("no CPU 7"),
        "{}",
        d.warnings.borrow()[1]
    );
}
