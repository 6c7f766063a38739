//! When cache maintenance is waited for: after every region, or once per call — and on which
//! paths a release does the latter.
//!
//! Kernel counterpart: the 7.1 split of `arch_sync_dma_for_*()` into issue-only helpers plus
//! `arch_sync_dma_flush()` (kernel/dma/direct.h, kernel/dma/direct.c, kernel/dma/swiotlb.c,
//! drivers/iommu/dma-iommu.c, `CONFIG_ARCH_HAS_BATCHED_DMA_SYNC`; commits d7eafe655b74 and
//! 661f8a193d48, dma-mapping-7.1).
//!
//! Three completion rules, each a [`SyncPolicy`]:
//! - [`PerEntry`] (≤ 7.0): each region's maintenance ends in its own barrier (`dcache_clean_poc`
//!   ends in `dsb sy`), so a scatter-gather walk waits once per entry.
//! - [`FlushEach`] (7.1, every path it did not batch): the region is issued with the `_nosync`
//!   helper and `arch_sync_dma_flush()` follows at once — also when the arch issued nothing
//!   (arm64's `arch_sync_dma_for_cpu` for TO_DEVICE), since the flush sits in the generic code.
//! - [`Batched`] (7.1's scatter-gather paths): regions only issue; the call ends with one
//!   `arch_sync_dma_flush()` for a non-coherent device.
//!
//! Which rule each path gets is the release's [`SyncKind`], turned once at setup into
//! [`SyncPaths`]. What 7.1 merged is v3 of the series, whose patch 4 folded in v2's 5/8
//! (dma-direct `sync_sg`), 7/8 (IOVA link/unlink) and 8/8 (iommu-dma `sync_sg`): so 7.1 batches
//! every scatter-gather path — `dma_direct_map_sg`/`unmap_sg`, `dma_direct_sync_sg_for_*`, and
//! iommu-dma's `iommu_dma_sync_sg_for_*` with the `map_sg`/`unmap_sg` that call them. A path of
//! one region still issues and flushes at once: single buffers, `swiotlb_map()` (also when a
//! batched map_sg bounces an entry), and iommu-dma's bounced sg entries, which go through
//! `iommu_dma_sync_single_*`. Before swiotlb copies a slot out to the CPU, what was issued is
//! flushed (the v3 fix), so a batched walk that bounces waits there as well.
//!
//! Invariant: whichever rule, everything issued in a call has completed when the call returns.

use crate::arch::ArchDma;
use crate::hw::Hw;
use crate::types::{DmaDirection, PhysAddr};
use std::fmt::Debug;

pub trait SyncPolicy: Debug {
    fn name(&self) -> &'static str;
    /// Maintenance for one region handed to the device.
    fn for_device<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    );
    /// Maintenance for one region handed back to the CPU.
    fn for_cpu<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    );
    /// End of a call on a non-coherent device, after all its regions.
    fn end_of_call<H: Hw + ?Sized, A: ArchDma>(&self, hw: &mut H, arch: &A);
}

#[derive(Debug, Clone, Copy, Default)]
pub struct PerEntry;

#[derive(Debug, Clone, Copy, Default)]
pub struct FlushEach;

#[derive(Debug, Clone, Copy, Default)]
pub struct Batched;

impl SyncPolicy for PerEntry {
    fn name(&self) -> &'static str {
        "per-entry"
    }
    #[inline(always)]
    fn for_device<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_device(hw, paddr, size, dir, true);
    }
    #[inline(always)]
    fn for_cpu<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_cpu(hw, paddr, size, dir, true);
    }
    fn end_of_call<H: Hw + ?Sized, A: ArchDma>(&self, _hw: &mut H, _arch: &A) {}
}

impl SyncPolicy for FlushEach {
    fn name(&self) -> &'static str {
        "flush-each"
    }
    #[inline(always)]
    fn for_device<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_device(hw, paddr, size, dir, false);
        arch.flush(hw);
    }
    #[inline(always)]
    fn for_cpu<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_cpu(hw, paddr, size, dir, false);
        arch.flush(hw);
    }
    fn end_of_call<H: Hw + ?Sized, A: ArchDma>(&self, _hw: &mut H, _arch: &A) {}
}

impl SyncPolicy for Batched {
    fn name(&self) -> &'static str {
        "batched"
    }
    #[inline(always)]
    fn for_device<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_device(hw, paddr, size, dir, false);
    }
    #[inline(always)]
    fn for_cpu<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_cpu(hw, paddr, size, dir, false);
    }
    fn end_of_call<H: Hw + ?Sized, A: ArchDma>(&self, hw: &mut H, arch: &A) {
        arch.flush(hw);
    }
}

/// The three rules as one value, which setup hands to each path: a match on it reaches the rule's
/// implementation statically.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncRule {
    PerEntry,
    FlushEach,
    Batched,
}

impl SyncPolicy for SyncRule {
    fn name(&self) -> &'static str {
        match self {
            SyncRule::PerEntry => PerEntry.name(),
            SyncRule::FlushEach => FlushEach.name(),
            SyncRule::Batched => Batched.name(),
        }
    }
    #[inline(always)]
    fn for_device<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        match self {
            SyncRule::PerEntry => PerEntry.for_device(hw, arch, paddr, size, dir),
            SyncRule::FlushEach => FlushEach.for_device(hw, arch, paddr, size, dir),
            SyncRule::Batched => Batched.for_device(hw, arch, paddr, size, dir),
        }
    }
    #[inline(always)]
    fn for_cpu<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        match self {
            SyncRule::PerEntry => PerEntry.for_cpu(hw, arch, paddr, size, dir),
            SyncRule::FlushEach => FlushEach.for_cpu(hw, arch, paddr, size, dir),
            SyncRule::Batched => Batched.for_cpu(hw, arch, paddr, size, dir),
        }
    }
    #[inline]
    fn end_of_call<H: Hw + ?Sized, A: ArchDma>(&self, hw: &mut H, arch: &A) {
        match self {
            SyncRule::PerEntry => PerEntry.end_of_call(hw, arch),
            SyncRule::FlushEach => FlushEach.end_of_call(hw, arch),
            SyncRule::Batched => Batched.end_of_call(hw, arch),
        }
    }
}

/// The completion rule of every DMA-API path that does cache maintenance, chosen once at setup.
#[derive(Clone, Copy, Debug)]
pub struct SyncPaths {
    /// `dma_direct_map_sg()` / `dma_direct_unmap_sg()` (and map_sg's error unwind).
    pub direct_sg: SyncRule,
    /// `dma_direct_sync_sg_for_device()` / `dma_direct_sync_sg_for_cpu()`.
    pub direct_sync_sg: SyncRule,
    /// iommu-dma's scatter-gather maintenance: `iommu_dma_sync_sg_for_*`, which its map_sg and
    /// unmap_sg call too.
    pub iommu_sg: SyncRule,
    /// One region per call: dma-direct's and iommu-dma's map/unmap of one buffer and
    /// `sync_single_*`, and `swiotlb_map()` wherever it is called from.
    pub single: SyncRule,
}

impl SyncPaths {
    /// One rule on every path (for measurements of the mechanism rather than of a release).
    pub fn uniform(p: SyncRule) -> SyncPaths {
        SyncPaths {
            direct_sg: p,
            direct_sync_sg: p,
            iommu_sg: p,
            single: p,
        }
    }
}

/// One rule means that rule on every path.
impl From<SyncRule> for SyncPaths {
    fn from(p: SyncRule) -> SyncPaths {
        SyncPaths::uniform(p)
    }
}

impl From<SyncKind> for SyncPaths {
    fn from(k: SyncKind) -> SyncPaths {
        k.paths()
    }
}

/// The `sync` policy: which paths of a release wait per region and which once per call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// ≤ 7.0: a barrier at the end of every region's maintenance, on every path.
    PerEntry,
    /// 7.1 as merged: every scatter-gather path issues per entry and flushes once per call;
    /// every path of one region flushes after it.
    Batched,
}

impl crate::types::Choice for SyncKind {
    const ALL: &'static [Self] = &[SyncKind::PerEntry, SyncKind::Batched];
    fn name(self) -> &'static str {
        match self {
            SyncKind::PerEntry => "per-entry",
            SyncKind::Batched => "batched",
        }
    }
}

impl SyncKind {
    /// The implementation of every path, chosen once at setup.
    pub fn paths(self) -> SyncPaths {
        match self {
            SyncKind::PerEntry => SyncPaths::uniform(SyncRule::PerEntry),
            SyncKind::Batched => SyncPaths {
                direct_sg: SyncRule::Batched,
                direct_sync_sg: SyncRule::Batched,
                iommu_sg: SyncRule::Batched,
                single: SyncRule::FlushEach,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ArchOps;
    use crate::arch::arm64::{Arm64, DirRules};
    use crate::hw::CacheOp;
    use crate::hw::recorder::Recorder;

    /// 7.1's unbatched paths flush after each region even where arm64 issued nothing (the
    /// flush is in the generic code); ≤ 7.0's `dcache_inval_poc` is never called for TO_DEVICE.
    #[test]
    fn flush_each_flushes_even_when_nothing_was_issued() {
        let arch = ArchOps::from(Arm64::new(DirRules::Since5_19));
        for (p, barriers) in [
            (SyncRule::PerEntry, 0),
            (SyncRule::FlushEach, 1),
            (SyncRule::Batched, 0),
        ] {
            let mut r = Recorder::new(64);
            p.for_cpu(
                &mut r,
                &arch,
                PhysAddr(0x1000),
                4096,
                DmaDirection::ToDevice,
            );
            assert!(r.ops.is_empty(), "{}", p.name());
            assert_eq!(r.barriers, barriers, "{}", p.name());
        }
        let mut r = Recorder::new(64);
        FlushEach.for_device(
            &mut r,
            &arch,
            PhysAddr(0x1000),
            4096,
            DmaDirection::ToDevice,
        );
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0x1000, 64)]);
        assert_eq!(r.barriers, 1);
        assert!(
            r.frames
                .contains(&"arch_sync_dma_for_device > dcache_clean_poc_nosync".to_string())
        );
        assert!(r.frames.contains(&"arch_sync_dma_flush".to_string()));
    }

    /// 7.1 (v3 of the series, with v2's 5/8, 7/8 and 8/8 folded into its patch 4) batches every
    /// scatter-gather path; a path of one region flushes at once.
    #[test]
    fn every_sg_path_batches_in_7_1() {
        let p = SyncKind::Batched.paths();
        for q in [p.direct_sg, p.direct_sync_sg, p.iommu_sg] {
            assert_eq!(q.name(), "batched");
        }
        assert_eq!(p.single.name(), "flush-each");
        let old = SyncKind::PerEntry.paths();
        for q in [old.direct_sg, old.direct_sync_sg, old.iommu_sg, old.single] {
            assert_eq!(q.name(), "per-entry");
        }
    }
}
