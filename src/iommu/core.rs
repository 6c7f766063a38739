//! The iommu core's map and unmap: splitting a range into page-table calls.
//!
//! Kernel counterpart: drivers/iommu/iommu.c — `iommu_pgsize`, `__iommu_map` / `iommu_map`,
//! `__iommu_unmap` / `iommu_unmap` / `iommu_unmap_fast`, `iommu_map_sg`, `iommu_iova_to_phys`,
//! `iommu_iotlb_sync` and `iommu_flush_iotlb_all`, over one domain (`struct iommu_domain`) that
//! owns its page table and its driver's flush ops.
//!
//! What it models: at each step `iommu_pgsize` picks the largest supported page size that the
//! alignment of IOVA and PA and the remaining size allow, and a count of such pages up to the
//! next boundary where a larger page size would fit. How many of those pages one driver call
//! handles is the release's [`SplitKind`] policy: `PerPage` (≤ 5.14, `ops->map`/`ops->unmap`,
//! one call per page) or `UnmapPages` (5.15, `map_pages`/`unmap_pages`, the whole count; the
//! page table may still return short at a table boundary, and the core loops). `iommu_map_sg`
//! maps each run of physically contiguous segments with one `__iommu_map`. Unmap ends with one
//! `iommu_iotlb_sync` (strict), unless the caller gathers (`iommu_unmap_fast`).
//!
//! Every CPU calls the one domain through `&self`: the page table and the driver's ops keep what
//! the CPUs share, and what each CPU keeps for itself, inside them.
//!
//! Invariants: a failed map leaves nothing of itself mapped (it unmaps what it had mapped); the
//! bytes an unmap reports are exactly the bytes whose translations it removed.

use super::io_pgtable_arm::ArmLpaeIoPgtable;
use super::{
    AsDynDeviceHw, FlushOps, IommuError, IommuFlushOps, IommuIotlbGather, Prot, sync_frames,
};
use crate::hw::{Counter, DeviceHw, FrameId, Hw, SwCost, SwKey};
use crate::types::{IovaAddr, PhysAddr};
use std::fmt::Debug;

/// The `unmap_split` policy: how the core splits a request into driver calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitKind {
    /// ≤ 5.14: `ops->map` / `ops->unmap` take a single page.
    PerPage,
    /// 5.15: `ops->map_pages` / `ops->unmap_pages` take a run of same-size pages.
    UnmapPages,
}

impl crate::types::Choice for SplitKind {
    const ALL: &'static [Self] = &[SplitKind::PerPage, SplitKind::UnmapPages];
    fn name(self) -> &'static str {
        match self {
            SplitKind::PerPage => "per-page",
            SplitKind::UnmapPages => "unmap-pages",
        }
    }
}

impl SplitKind {
    /// Given the count `iommu_pgsize` computed, the pages passed to one driver call.
    #[inline]
    pub fn pages_per_call(self, count: u64) -> u64 {
        match self {
            SplitKind::PerPage => 1,
            SplitKind::UnmapPages => count,
        }
    }
}

/// `iommu_pgsize()`: the page size for the next step and how many such pages fit before a larger
/// size could be used. `bitmap` is the domain's `pgsize_bitmap`; `size` is non-zero and
/// `iova | paddr | size` is aligned to the smallest page size.
#[inline]
pub fn iommu_pgsize(bitmap: u64, iova: u64, paddr: u64, size: u64) -> (u64, u64) {
    // Exactly the smallest page left (a single page, the end of a run): that page, once. No
    // larger size fits, and the search below would find the same.
    let min = bitmap & bitmap.wrapping_neg();
    if size == min && (iova | paddr) & (min - 1) == 0 {
        return (size, 1);
    }
    pgsize_search(bitmap, iova, paddr, size)
}

/// The search of `iommu_pgsize()` for any size.
fn pgsize_search(bitmap: u64, iova: u64, paddr: u64, size: u64) -> (u64, u64) {
    let addr_merge = iova | paddr;
    // Sizes supported and no larger than `size`.
    let mut pgsizes = bitmap & mask_upto(63 - size.leading_zeros());
    if addr_merge != 0 {
        pgsizes &= mask_upto(addr_merge.trailing_zeros());
    }
    if pgsizes == 0 {
        return (0, 0);
    }
    let idx = 63 - pgsizes.leading_zeros();
    let pgsize = 1u64 << idx;
    let mut size = size;
    let larger = bitmap & !mask_upto(idx);
    if larger != 0 {
        let next = 1u64 << larger.trailing_zeros();
        // A larger page only helps if IOVA and PA share their offset within it.
        if (iova ^ paddr) & (next - 1) == 0 {
            let offset = next - (addr_merge & (next - 1));
            if offset + next <= size {
                size = offset;
            }
        }
    }
    (pgsize, size >> idx)
}

/// `GENMASK(bit, 0)`.
fn mask_upto(bit: u32) -> u64 {
    if bit >= 63 {
        u64::MAX
    } else {
        (1u64 << (bit + 1)) - 1
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    map: SwCost,
    unmap: SwCost,
    pgsize: SwCost,
    sg_entry: SwCost,
    map_sg: SwCost,
}

/// `struct iommu_domain` for a paging domain: its page table, its driver's flush ops and the
/// release's split policy.
#[derive(Debug)]
pub struct IommuDomain {
    pub pgtable: ArmLpaeIoPgtable,
    pub ops: FlushOps,
    split: SplitKind,
    costs: Costs,
    /// What `iommu_map_sg()` hands back when a map fails, by release.
    pub map_sg_returns: MapSgReturn,
}

/// What `iommu_map_sg()` returns for a map that failed part-way: up to 5.14 its `size_t` 0 (the
/// error itself is lost); from 5.15 (`__iommu_map_sg` returns `ssize_t`, with the series that
/// made `dma_map_sg` report errors) the negative errno of the page-table call that failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MapSgReturn {
    Zero,
    #[default]
    Errno,
}

impl MapSgReturn {
    /// The value the caller sees, as the kernel prints it.
    pub fn value(self, r: &Result<u64, IommuError>) -> String {
        match (r, self) {
            (Ok(b), _) => b.to_string(),
            (Err(_), MapSgReturn::Zero) => "0".to_string(),
            (Err(e), MapSgReturn::Errno) => e.errno().to_string(),
        }
    }
}

impl IommuDomain {
    pub fn new(
        hw: &dyn Hw,
        pgtable: ArmLpaeIoPgtable,
        ops: Box<dyn IommuFlushOps>,
        split: SplitKind,
    ) -> IommuDomain {
        IommuDomain {
            pgtable,
            ops: FlushOps::new(ops),
            split,
            costs: Costs {
                map: hw.sw_cost(SwKey::IommuMap),
                unmap: hw.sw_cost(SwKey::IommuUnmap),
                pgsize: hw.sw_cost(SwKey::IommuPgsize),
                sg_entry: hw.sw_cost(SwKey::IommuMapSgEntry),
                map_sg: hw.sw_cost(SwKey::IommuMapSg),
            },
            map_sg_returns: MapSgReturn::default(),
        }
    }

    /// Each CPU's own state (the page table's look-aside) for `ncpus` possible CPUs, set up
    /// before any CPU calls the domain.
    pub fn with_cpus(mut self, ncpus: usize) -> IommuDomain {
        self.pgtable = self.pgtable.with_cpus(ncpus);
        self
    }

    /// Whether several CPUs may call the domain at once: both drivers' flush ops share what the
    /// kernel shares, so only the table's cleaning for a non-coherent walker can refuse.
    pub fn shareable(&self) -> bool {
        self.pgtable.shareable()
    }

    /// The release's `iommu_map_sg()` return on failure.
    pub fn with_map_sg_returns(mut self, r: MapSgReturn) -> IommuDomain {
        self.map_sg_returns = r;
        self
    }

    pub fn split(&self) -> SplitKind {
        self.split
    }

    pub fn pgsize_bitmap(&self) -> u64 {
        self.pgtable.pgsize_bitmap()
    }

    /// Smallest page size: the IOMMU granule.
    pub fn min_pagesz(&self) -> u64 {
        self.pgtable.min_pagesz()
    }

    #[inline]
    fn check_aligned(
        &self,
        what: &'static str,
        iova: u64,
        paddr: u64,
        size: u64,
    ) -> Result<(), IommuError> {
        // The smallest page size is the granule, never 0 (`ArmLpaeIoPgtable::new` refuses any
        // other): its mask needs no overflow check.
        if (iova | paddr | size) & self.min_pagesz().wrapping_sub(1) == 0 && size != 0 {
            return Ok(());
        }
        self.alignment_error(what, iova, paddr, size)
    }

    /// What [`Self::check_aligned`] refuses, out of line.
    #[cold]
    #[inline(never)]
    fn alignment_error(
        &self,
        what: &'static str,
        iova: u64,
        paddr: u64,
        size: u64,
    ) -> Result<(), IommuError> {
        let min = self.min_pagesz();
        if (iova | paddr | size) & (min - 1) != 0 {
            return Err(IommuError::Misaligned {
                what,
                addr: iova | paddr,
                size,
                align: min,
            });
        }
        if size == 0 {
            return Err(IommuError::Empty);
        }
        Ok(())
    }

    /// `__iommu_map()` in `frame` (its own, or entered with its caller's): map `[iova, iova +
    /// size)` to `paddr`; on failure, unmap what it had mapped (the kernel's unroll, inside
    /// `__iommu_map`).
    #[inline(always)]
    fn map_range<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        frame: &'static FrameId,
        iova: u64,
        paddr: u64,
        size: u64,
        prot: Prot,
    ) -> Result<(), IommuError> {
        self.check_aligned("map", iova, paddr, size)?;
        let back = hw.enter(frame);
        hw.sw(self.costs.map);
        let (mut at, mut pa, mut left) = (iova, paddr, size);
        let mut err = None;
        while left > 0 {
            hw.sw(self.costs.pgsize);
            let (pgsize, count) = iommu_pgsize(self.pgsize_bitmap(), at, pa, left);
            let n = self.split.pages_per_call(count);
            match self
                .pgtable
                .map_pages(hw, &self.ops, IovaAddr(at), PhysAddr(pa), pgsize, n, prot)
            {
                Ok(0) => break,
                Ok(mapped) => {
                    at += mapped;
                    pa += mapped;
                    left -= mapped;
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let r = match err {
            Some(e) => Err(self.unroll(hw, iova, at - iova, e)),
            None => Ok(()),
        };
        hw.leave(back);
        r
    }

    /// `__iommu_map()`'s unroll of the `done` bytes it mapped from `iova` before failing with
    /// `e`: an `iommu_unmap()`, made even when `done` is 0, so its IOTLB sync always runs.
    #[cold]
    #[inline(never)]
    fn unroll<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        done: u64,
        e: IommuError,
    ) -> IommuError {
        let _ = self.iommu_unmap(hw, IovaAddr(iova), done);
        e
    }

    /// `iommu_map()`.
    pub fn iommu_map<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: IovaAddr,
        paddr: PhysAddr,
        size: u64,
        prot: Prot,
    ) -> Result<(), IommuError> {
        // iommu_map charges nothing of its own before __iommu_map: the two are entered as one.
        let frame = crate::frame_id!("iommu_map" => "__iommu_map");
        self.map_range(hw, frame, iova.0, paddr.0, size, prot)
    }

    /// `iommu_map_sg()`: map `segs` (physical start, length; granule-aligned, as iommu-dma
    /// prepares them) back to back from `iova`, one `__iommu_map` per physically contiguous run.
    /// Returns the bytes mapped; on failure nothing stays mapped.
    pub fn iommu_map_sg<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: IovaAddr,
        segs: &[(PhysAddr, u64)],
        prot: Prot,
    ) -> Result<u64, IommuError> {
        const MAP: &FrameId = crate::frame_id!("__iommu_map");
        let back = hw.enter(crate::frame_id!("iommu_map_sg"));
        hw.sw(self.costs.map_sg);
        let mut mapped = 0u64;
        let mut run: Option<(u64, u64)> = None;
        let mut r = Ok(());
        for &(phys, len) in segs {
            hw.sw(self.costs.sg_entry);
            match run {
                Some((start, l)) if start + l == phys.0 => run = Some((start, l + len)),
                Some((start, l)) => {
                    r = self.map_range(hw, MAP, iova.0 + mapped, start, l, prot);
                    if r.is_err() {
                        break;
                    }
                    mapped += l;
                    run = Some((phys.0, len));
                }
                None => run = Some((phys.0, len)),
            }
        }
        if r.is_ok()
            && let Some((start, l)) = run
        {
            r = self.map_range(hw, MAP, iova.0 + mapped, start, l, prot);
            if r.is_ok() {
                mapped += l;
            }
        }
        if let Err(e) = r {
            // `__iommu_map_sg`'s own undo: an iommu_unmap() of what the runs before the failed
            // one mapped, made even when that is nothing (and then only its IOTLB sync does any
            // work), after the failed run's own unroll.
            let _ = self.iommu_unmap(hw, iova, mapped);
            hw.leave(back);
            return Err(e);
        }
        hw.leave(back);
        Ok(mapped)
    }

    /// `__iommu_unmap()`: remove `[iova, iova + size)`, gathering leaf invalidations in `gather`.
    /// Returns the bytes unmapped, which may be short if a hole was met; 0 bytes is an error.
    fn unmap_range<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        frame: &'static FrameId,
        iova: u64,
        size: u64,
        gather: &mut IommuIotlbGather,
    ) -> Result<u64, IommuError> {
        if size == 0 {
            return self.unmap_nothing(hw, frame, iova);
        }
        self.check_aligned("unmap", iova, 0, size)?;
        let back = hw.enter(frame);
        hw.sw(self.costs.unmap);
        // The loop's first pass, which commonly unmaps it all (a single page, or a run the
        // table takes in one call). The rest of the loop is out of line: without its state
        // kept across the call, a strict unmap of one page runs about 20 instructions and 9
        // memory accesses shorter (callgrind, per bench item).
        hw.sw(self.costs.pgsize);
        let (pgsize, count) = iommu_pgsize(self.pgsize_bitmap(), iova, iova, size);
        let n = self.split.pages_per_call(count);
        let first = self
            .pgtable
            .unmap_pages(hw, &self.ops, gather, IovaAddr(iova), pgsize, n);
        let (unmapped, err) = match first {
            Ok(b) if b >= size => (b, None),
            Ok(b) => self.unmap_rest(hw, iova, size, b, gather),
            Err(e) => (0, Some(e)),
        };
        hw.leave(back);
        match err {
            Some(e) if unmapped == 0 => Err(e),
            Some(_) => Err(IommuError::ShortUnmap {
                iova: IovaAddr(iova),
                size,
                unmapped,
            }),
            None => Ok(unmapped),
        }
    }

    /// `__iommu_unmap()` of 0 bytes at an aligned IOVA (the unrolls of a map that failed at its
    /// first page): the checks pass, the loop does not run, 0 bytes come back and no error.
    #[cold]
    #[inline(never)]
    fn unmap_nothing<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        frame: &'static FrameId,
        iova: u64,
    ) -> Result<u64, IommuError> {
        if iova & (self.min_pagesz() - 1) != 0 {
            return self.alignment_error("unmap", iova, 0, 0).map(|()| 0);
        }
        let back = hw.enter(frame);
        hw.sw(self.costs.unmap);
        hw.leave(back);
        Ok(0)
    }

    /// [`Self::unmap_range`]'s loop after its first pass has unmapped `unmapped` bytes: the
    /// bytes unmapped in all, and the error that stopped it, if one did.
    #[inline(never)]
    fn unmap_rest<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        size: u64,
        mut unmapped: u64,
        gather: &mut IommuIotlbGather,
    ) -> (u64, Option<IommuError>) {
        while unmapped < size {
            hw.sw(self.costs.pgsize);
            let at = iova + unmapped;
            let (pgsize, count) = iommu_pgsize(self.pgsize_bitmap(), at, at, size - unmapped);
            let n = self.split.pages_per_call(count);
            match self
                .pgtable
                .unmap_pages(hw, &self.ops, gather, IovaAddr(at), pgsize, n)
            {
                Ok(b) => unmapped += b,
                Err(e) => return (unmapped, Some(e)),
            }
        }
        (unmapped, None)
    }

    /// `iommu_unmap()`: unmap and invalidate (strict), one `iotlb_sync` at the end.
    pub fn iommu_unmap<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: IovaAddr,
        size: u64,
    ) -> Result<u64, IommuError> {
        // iommu_unmap charges nothing of its own: each routine it calls is entered together
        // with it (and arm-smmu's sync with iommu_iotlb_sync, which charges nothing either).
        let mut gather = IommuIotlbGather::new();
        let frame = crate::frame_id!("iommu_unmap" => "__iommu_unmap");
        let r = self.unmap_range(hw, frame, iova.0, size, &mut gather);
        super::iotlb_sync(&self.ops, hw, &mut gather, sync_frames!("iommu_unmap"));
        r
    }

    /// `iommu_unmap_fast()`: unmap, leaving the gathered invalidations to the caller.
    pub fn iommu_unmap_fast<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: IovaAddr,
        size: u64,
        gather: &mut IommuIotlbGather,
    ) -> Result<u64, IommuError> {
        let frame = crate::frame_id!("iommu_unmap_fast" => "__iommu_unmap");
        self.unmap_range(hw, frame, iova.0, size, gather)
    }

    /// `iommu_iotlb_sync()`.
    #[inline]
    pub fn iotlb_sync<H: AsDynDeviceHw + ?Sized>(&self, hw: &mut H, gather: &mut IommuIotlbGather) {
        super::iotlb_sync(&self.ops, hw, gather, sync_frames!());
    }

    /// `iommu_flush_iotlb_all()`.
    pub fn flush_iotlb_all(&self, hw: &mut dyn DeviceHw) {
        let back = hw.enter(crate::frame_id!("iommu_flush_iotlb_all"));
        self.ops.tlb_flush_all(hw);
        hw.leave(back);
    }

    /// `iommu_iova_to_phys()`: a walk of the table, counted and charged.
    pub fn iova_to_phys(&self, hw: &mut dyn Hw, iova: IovaAddr) -> Option<PhysAddr> {
        hw.count(Counter::IovaToPhys, 1);
        self.pgtable.iova_to_phys(hw, iova)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B4K: u64 = 0x1000 | (2 << 20) | (1 << 30);

    #[test]
    fn pgsize_picks_the_largest_fitting_size_and_counts_to_the_next_boundary() {
        // 1 MB of 4K pages: 256 pages of 4K.
        assert_eq!(
            iommu_pgsize(B4K, 0x10_0000, 0x10_0000, 1 << 20),
            (4096, 256)
        );
        // 32 MB, 2 MB aligned: 2M pages; no 1G fits, so the count runs to the end.
        assert_eq!(
            iommu_pgsize(B4K, 0x4000_0000, 0x4000_0000, 32 << 20),
            (2 << 20, 16)
        );
        // Unaligned start: 4K pages up to the 2 MB boundary only.
        assert_eq!(iommu_pgsize(B4K, 0x1f_f000, 0x1f_f000, 4 << 20), (4096, 1));
        assert_eq!(
            iommu_pgsize(B4K, 0x10_0000, 0x10_0000, 4 << 20),
            (4096, 256)
        );
        // IOVA and PA offset differently within 2 MB: no point stopping at the boundary.
        assert_eq!(iommu_pgsize(B4K, 0x10_0000, 0x1000, 4 << 20), (4096, 1024));
        // A 2 MB block only when the remaining size crosses a whole 2 MB beyond the boundary.
        assert_eq!(
            iommu_pgsize(B4K, 0x10_0000, 0x10_0000, (3 << 20) - 4096),
            (4096, 767)
        );
    }

    /// The single-page shortcut answers what the search does, for every granule's bitmap and
    /// aligned addresses in and across the larger sizes' boundaries.
    #[test]
    fn the_single_page_shortcut_is_the_search() {
        let bitmaps = [B4K, 0x4000 | (32 << 20), 0x10000 | (512 << 20)];
        for bitmap in bitmaps {
            let min = bitmap & bitmap.wrapping_neg();
            for k in 0..4096u64 {
                let iova = k.wrapping_mul(0x9E37_79B9) % (1 << 20) * min;
                // Every 8th pair off the smallest page's alignment: no size fits.
                let paddr = (k * 7919 % 4096) * min + if k % 8 == 7 { min / 2 } else { 0 };
                assert_eq!(
                    iommu_pgsize(bitmap, iova, paddr, min),
                    pgsize_search(bitmap, iova, paddr, min),
                    "{bitmap:#x} {iova:#x} {paddr:#x}"
                );
            }
        }
    }
}

#[cfg(test)]
mod seed001 {
    //! Hand-worked counts for seed 001: unmapping an sg list of 4 KB pages on an MMU-500.
    use super::*;
    use crate::hw::Counter;
    use crate::hw::recorder::Recorder;
    use crate::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};
    use crate::iommu::io_pgtable_arm::IoPgtableCfg;
    use crate::mm::physmem::PhysMem;

    const IOVA: u64 = 0x10_0000_0000;

    fn domain(r: &mut Recorder, walk: WalkFlushKind, split: SplitKind) -> IommuDomain {
        let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
        let t = ArmLpaeIoPgtable::new(r, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
        let ops = Box::new(ArmSmmuDomain::new(r, 5, walk));
        IommuDomain::new(r, t, ops, split)
    }

    /// `n` pages, none physically next to the one before it, so map_sg maps 4K PTEs.
    fn scattered(n: u64) -> Vec<(PhysAddr, u64)> {
        (0..n)
            .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
            .collect()
    }

    fn driver_calls(r: &Recorder, frame: &str) -> usize {
        r.frames.iter().filter(|f| f.ends_with(frame)).count()
    }

    fn unmap_32m(walk: WalkFlushKind, split: SplitKind) -> (Recorder, IommuDomain) {
        let mut r = Recorder::new(64);
        let d = domain(&mut r, walk, split);
        let base = d.pgtable.mem().allocations();
        assert_eq!(
            d.iommu_map_sg(&mut r, IovaAddr(IOVA), &scattered(8192), Prot::RW),
            Ok(32 << 20)
        );
        assert_eq!(
            d.pgtable.mem().allocations(),
            base + 3 + 15,
            "pud, pmd and 16 pte tables"
        );
        let mut r = Recorder::new(64);
        assert_eq!(
            d.iommu_unmap(&mut r, IovaAddr(IOVA), 32 << 20),
            Ok(32 << 20)
        );
        assert_eq!(
            d.pgtable.mem().allocations(),
            base + 2,
            "the 16 pte tables are freed"
        );
        (r, d)
    }

    #[test]
    fn before_5_15_by_va_16_walk_flushes_of_512_tlbiva() {
        let (r, _) = unmap_32m(WalkFlushKind::ByVa, SplitKind::PerPage);
        assert_eq!(driver_calls(&r, "arm_lpae_unmap_pages"), 16);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 8192);
        assert_eq!(r.count_of(Counter::SmmuTlbival), 0);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 0);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 16 + 1);
    }

    #[test]
    fn flush_walk_prefer_tlbiasid_16_tlbiasid() {
        let (r, _) = unmap_32m(WalkFlushKind::Asid, SplitKind::PerPage);
        assert_eq!(driver_calls(&r, "arm_lpae_unmap_pages"), 16);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 0);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 16);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 16 + 1);
    }

    /// The seed's cover letter expects "just 1 TLBIASID" once unmap_pages lands. Running the
    /// 5.15 algorithm gives one driver call, but `__arm_lpae_unmap` still meets 16 table entries at
    /// level 2 and calls `tlb_flush_walk` for each: 16 TLBIASID. The model reports what the
    /// algorithm does.
    #[test]
    fn unmap_pages_one_driver_call_but_still_one_walk_flush_per_table() {
        let (r, _) = unmap_32m(WalkFlushKind::Asid, SplitKind::UnmapPages);
        assert_eq!(driver_calls(&r, "arm_lpae_unmap_pages"), 1);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 16);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 16 + 1);
        let (r, _) = unmap_32m(WalkFlushKind::ByVa, SplitKind::UnmapPages);
        assert_eq!(driver_calls(&r, "arm_lpae_unmap_pages"), 1);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 8192);
    }

    #[test]
    fn one_mb_unmap_is_256_calls_before_5_15_and_one_after() {
        for (split, calls) in [(SplitKind::PerPage, 256), (SplitKind::UnmapPages, 1)] {
            let mut r = Recorder::new(64);
            let d = domain(&mut r, WalkFlushKind::ByVa, split);
            d.iommu_map_sg(&mut r, IovaAddr(IOVA), &scattered(256), Prot::RW)
                .unwrap();
            let mut r = Recorder::new(64);
            assert_eq!(d.iommu_unmap(&mut r, IovaAddr(IOVA), 1 << 20), Ok(1 << 20));
            assert_eq!(driver_calls(&r, "arm_lpae_unmap_pages"), calls);
            assert_eq!(r.count_of(Counter::SmmuTlbival), 256);
            assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
        }
    }

    #[test]
    fn unaligned_unmap_straddling_2m_boundaries() {
        for split in [SplitKind::PerPage, SplitKind::UnmapPages] {
            let mut r = Recorder::new(64);
            let d = domain(&mut r, WalkFlushKind::ByVa, split);
            d.iommu_map_sg(&mut r, IovaAddr(IOVA), &scattered(2048), Prot::RW)
                .unwrap();
            let tables = d.pgtable.mem().allocations();
            let mut r = Recorder::new(64);
            // 1 MB of the first table, the whole second, 1 MB of the third.
            assert_eq!(
                d.iommu_unmap(&mut r, IovaAddr(IOVA + (1 << 20)), 4 << 20),
                Ok(4 << 20)
            );
            assert_eq!(r.count_of(Counter::SmmuTlbival), 512);
            assert_eq!(r.count_of(Counter::SmmuTlbiva), 512);
            assert_eq!(r.count_of(Counter::SmmuTlbsync), 2);
            assert_eq!(d.pgtable.mem().allocations(), tables - 1);
            assert!(
                d.iova_to_phys(&mut r, IovaAddr(IOVA + (1 << 20) - 4096))
                    .is_some()
            );
            assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA + (1 << 20))).is_none());
            assert!(
                d.iova_to_phys(&mut r, IovaAddr(IOVA + (5 << 20) - 4096))
                    .is_none()
            );
            assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA + (5 << 20))).is_some());
        }
    }

    #[test]
    fn contiguous_memory_is_mapped_with_blocks() {
        let mut r = Recorder::new(64);
        let d = domain(&mut r, WalkFlushKind::ByVa, SplitKind::UnmapPages);
        // 4 MB + 8 KB contiguous starting 4 KB below a 2 MB boundary.
        let segs: Vec<_> = (0..1026u64)
            .map(|i| (PhysAddr(0x8020_0000 - 4096 + i * 4096), 4096))
            .collect();
        d.iommu_map_sg(&mut r, IovaAddr(IOVA + (2 << 20) - 4096), &segs, Prot::RW)
            .unwrap();
        assert_eq!(d.pgtable.walk(IOVA + (2 << 20)).map(|w| w.1), Some(2 << 20));
        assert_eq!(d.pgtable.walk(IOVA + (4 << 20)).map(|w| w.1), Some(2 << 20));
        assert_eq!(d.pgtable.walk(IOVA + (6 << 20)).map(|w| w.1), Some(4096));
        let mut r = Recorder::new(64);
        d.iommu_unmap(&mut r, IovaAddr(IOVA + (2 << 20) - 4096), (4 << 20) + 8192)
            .unwrap();
        // Two page leaves and two block leaves: four TLBIVAL, no walk flush.
        assert_eq!(r.count_of(Counter::SmmuTlbival), 4);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 0);
    }

    /// The same unmaps on the Model: time comes only from the `[smmu]` parameters, and the poll
    /// loop decides how the wait shows up (spinning reads, then udelay backoff).
    #[test]
    fn model_time_follows_from_smmu_parameters() {
        use crate::hw::Hw;
        use crate::hw::model::{Model, ModelParams, SmmuKind, SmmuParams};
        let params = ModelParams {
            line_bytes: 64,
            smmu: Some(SmmuParams {
                kind: SmmuKind::Mmu500,
                mmio_write_ps: 20_000,
                mmio_read_ps: 300_000,
                tlbi_va_ps: 50_000,
                tlbi_asid_ps: 200_000,
                sync_ps: 1_000_000,
                ..SmmuParams::default()
            }),
            ..ModelParams::default()
        };
        let run = |walk: WalkFlushKind| {
            let mut m = Model::new(params.clone());
            let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
            let t = ArmLpaeIoPgtable::new(&mut m, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
            let ops = Box::new(ArmSmmuDomain::new(&m, 5, walk));
            let d = IommuDomain::new(&m, t, ops, SplitKind::PerPage);
            d.iommu_map_sg(&mut m, IovaAddr(IOVA), &scattered(8192), Prot::RW)
                .unwrap();
            m.clear_ledger();
            let t0 = m.now_ps();
            d.iommu_unmap(&mut m, IovaAddr(IOVA), 32 << 20).unwrap();
            assert_eq!(
                m.ledger().total_ps(),
                m.now_ps() - t0,
                "charges sum to elapsed time"
            );
            (m.now_ps() - t0, m.ledger().totals(), m.ledger().stacks())
        };
        let (by_va, c_va, stacks) = run(WalkFlushKind::ByVa);
        let (asid, c_asid, _) = run(WalkFlushKind::Asid);
        assert_eq!(c_va[Counter::SmmuTlbiva as usize], 8192);
        assert_eq!(c_asid[Counter::SmmuTlbiasid as usize], 16);
        // 512 TLBIVA outrun the CPU's posted writes: each walk flush's sync spins ten reads and
        // then sleeps; a TLBIASID's sync is seen done within the spin.
        assert!(c_va[Counter::Udelay as usize] > 0);
        assert_eq!(c_asid[Counter::Udelay as usize], 0);
        assert!(c_va[Counter::SmmuTlbstatusRead as usize] > 10 * 16);
        assert!(stacks.iter().any(|s| {
            s.stack_string()
                .ends_with("arm_smmu_tlb_sync_context > udelay")
        }));
        assert!(by_va > 10 * asid, "by-va {by_va} ps vs asid {asid} ps");
    }

    #[test]
    fn failed_map_leaves_nothing_mapped() {
        let mut r = Recorder::new(64);
        let d = domain(&mut r, WalkFlushKind::ByVa, SplitKind::UnmapPages);
        d.iommu_map(
            &mut r,
            IovaAddr(IOVA + 0x5000),
            PhysAddr(0x9000_0000),
            4096,
            Prot::RW,
        )
        .unwrap();
        let e = d.iommu_map_sg(&mut r, IovaAddr(IOVA), &scattered(16), Prot::RW);
        assert_eq!(e, Err(IommuError::Exists(IovaAddr(IOVA + 0x5000))));
        assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA)).is_none());
        assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA + 0x5000)).is_some());
    }

    /// An `iommu_map_sg` of 16 pages whose first eight are one physically contiguous run, over a
    /// page already mapped at the sixth. Both unrolls are `iommu_unmap()` calls, made even when
    /// they have nothing to unmap, and each ends in an IOTLB sync (arm-smmu's syncs the context
    /// whatever the gather holds):
    /// - 5.14 (one `ops->map` per page): pages 0-4 map, page 5 fails; `__iommu_map`'s unroll
    ///   unmaps five pages (five driver calls, five leaf TLBIVAL) and syncs; `__iommu_map_sg`'s own
    ///   `iommu_unmap` of the 0 bytes of earlier runs syncs again. It returns 0 (`size_t`).
    /// - 5.15 (`map_pages` of the run): io-pgtable checks the eight PTEs before writing any and
    ///   refuses the run whole, so both unrolls unmap nothing, and each syncs. It returns
    ///   -EEXIST.
    #[test]
    fn a_failed_map_sg_unrolls_through_iommu_unmap_as_each_release_does() {
        for (kernel, split, returns, unmap_calls, tlbival, ret) in [
            ("5.14", SplitKind::PerPage, MapSgReturn::Zero, 5, 5, "0"),
            (
                "5.15",
                SplitKind::UnmapPages,
                MapSgReturn::Errno,
                0,
                0,
                "-EEXIST",
            ),
        ] {
            let mut r = Recorder::new(64);
            let d = domain(&mut r, WalkFlushKind::ByVa, split);
            let d = d.with_map_sg_returns(returns);
            d.iommu_map(
                &mut r,
                IovaAddr(IOVA + 0x5000),
                PhysAddr(0x9000_0000),
                4096,
                Prot::RW,
            )
            .unwrap();
            // Entries 0-7 contiguous from 0x2000_0000, 8-15 scattered.
            let mut segs: Vec<(PhysAddr, u64)> = (0..8)
                .map(|i| (PhysAddr(0x2000_0000 + i * 4096), 4096))
                .collect();
            segs.extend(
                scattered(8)
                    .into_iter()
                    .map(|(p, l)| (PhysAddr(p.0 + (1 << 30)), l)),
            );
            let mut r = Recorder::new(64);
            let e = d.iommu_map_sg(&mut r, IovaAddr(IOVA), &segs, Prot::RW);
            assert_eq!(
                e,
                Err(IommuError::Exists(IovaAddr(IOVA + 0x5000))),
                "{kernel}"
            );
            assert_eq!(d.map_sg_returns.value(&e), ret, "{kernel}");
            assert_eq!(r.count_of(Counter::SmmuTlbsync), 2, "{kernel}");
            assert_eq!(
                r.count_of(Counter::PgtableUnmapCall),
                unmap_calls,
                "{kernel}"
            );
            assert_eq!(r.count_of(Counter::SmmuTlbival), tlbival, "{kernel}");
            // Nothing of the list stays mapped; the page that was there before still is.
            for i in (0..16).filter(|&i| i != 5) {
                assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA + i * 4096)).is_none());
            }
            assert!(d.iova_to_phys(&mut r, IovaAddr(IOVA + 0x5000)).is_some());
        }
    }
}
