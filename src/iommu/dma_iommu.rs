//! iommu-dma: the DMA API on top of an IOMMU domain.
//!
//! Kernel counterpart: drivers/iommu/dma-iommu.c — `iommu_dma_map_page` / `iommu_dma_unmap_page`,
//! `iommu_dma_map_sg` / `iommu_dma_unmap_sg`, `__finalise_sg`, `__iommu_dma_map` /
//! `__iommu_dma_unmap`, `iommu_dma_alloc_iova` / `iommu_dma_free_iova`,
//! `iommu_dma_sync_{single,sg}_for_{cpu,device}` and `dma_info_to_prot`.
//!
//! What it models: a mapping takes one IOVA range from the domain's [`IovaDomain`] (the fast
//! path, on one CPU) and maps it through the iommu core. map_sg lays the list out back to back in
//! one IOVA range, each entry keeping its offset within its granule and padded to whole granules,
//! maps it with `iommu_map_sg` (which merges physically contiguous entries), then `__finalise_sg`
//! merges entries that continue each other in IOVA into DMA segments of at most `max_seg_size`.
//! Unmap follows the domain's [`Invalidation`] mode. Strict (`IOMMU_DOMAIN_DMA`):
//! `iommu_unmap_fast`, then `iommu_iotlb_sync`, then the IOVA goes back to the range cache. Lazy
//! (`IOMMU_DOMAIN_DMA_FQ`, `iommu.strict=0`): the gather is marked `queued`, so the page table
//! clears its entries without leaf invalidations, `iommu_iotlb_sync` is skipped, and the IOVA
//! goes to the flush queue ([`super::dma_fq`]), which frees it after a whole-domain flush; the
//! queue's timer is checked at the start of every map and unmap call, and run when it expires
//! by a caller whose CPU idles between calls ([`DmaMapOps::run_timers`]). Non-coherent devices get
//! cache maintenance through the arch layer, by physical address (sg entries by `sg_phys`,
//! single buffers by `iova_to_phys`), under the release's [`SyncPaths`]: the scatter-gather
//! paths (`iommu_dma_sync_sg_for_*`, which map_sg and unmap_sg call) under `iommu_sg`, single
//! buffers under `single`. 7.1 batches the scatter-gather paths (every entry issued, one
//! `arch_sync_dma_flush()` per call) and flushes a single buffer at once.
//!
//! `iommu_dma_unmap_page` follows the release's [`UnmapLookup`]: 5.10 looks the physical
//! address up (`iommu_iova_to_phys`, a walk of the table) only for a non-coherent device's sync
//! and never checks it; 5.11 adds a lookup for every device before unmapping (for swiotlb's
//! untrusted-device bounce buffers), which WARNs and returns — nothing unmapped, no IOVA
//! freed — when nothing is mapped there; 5.15 keeps that one lookup and check for every device
//! and syncs from it. `__iommu_dma_unmap` WARNs when the unmap comes back short and frees the
//! IOVA all the same. Every WARN is counted ([`Counter::Warn`]).
//!
//! When the device's segment boundary (`dma_get_seg_boundary`) is smaller than the list, an entry
//! that would straddle a boundary is pushed to the next one by padding the entry before it (whose
//! mapping grows by the pad, as in the kernel); the IOVA range is then aligned to at least the
//! boundary, which the size-aligned allocation guarantees.
//!
//! Coherent allocations (`iommu_dma_alloc` / `iommu_dma_free`, 5.10 and 6.6, for a device
//! whose DMA is coherent): a request that may block and is not `DMA_ATTR_FORCE_CONTIGUOUS`
//! takes the remapping path (`iommu_dma_alloc_remap`: pages from `__iommu_dma_alloc_pages` on
//! the device's node, never CMA, mapped with `iommu_map_sg` into one IOVA range); any other
//! (atomic, or forced contiguous) takes `iommu_dma_alloc_pages` (`dma_alloc_contiguous`, then
//! `alloc_pages_node`) and `__iommu_dma_map`. The pages come from
//! [`crate::dma::coherent::DmaCoherent`]; the kernel's `vmap` of the remapped pages costs
//! nothing here.
//!
//! Not modelled: swiotlb bouncing of untrusted devices, and PCI's 32-bit-first IOVA attempt.
//!
//! Invariants: a failed map leaves no IOVA allocated and nothing mapped; every unmap frees
//! exactly the IOVA range its map allocated (in lazy mode, once a flush has covered it); no IOVA
//! is freed while a stale IOTLB entry could still translate it. DMA-API misuse (unmapping what is
//! not mapped) is recorded in [`IommuDma::warnings`], as the kernel WARNs, and never panics.

use super::core::IommuDomain;
use super::dma_fq::{FlushQueue, FqStats, Invalidation};
use super::iova::{IovaDomain, IovaRules};
use super::{IommuError, IommuIotlbGather, Prot};
use crate::arch::ArchOps;
use crate::device::Device;
use crate::dma::coherent::{Allocation, DmaCoherent};
use crate::dma::contiguous::Gfp;
use crate::dma::sync_policy::{SyncPaths, SyncPolicy, SyncRule};
use crate::dma::{DmaError, DmaMapOps};
use crate::hw::{Counter, DeviceHw, Hw, SwCost, SwKey};
use crate::mm::physmem::SharedPhysMem;
use crate::scatterlist::SgTable;
use crate::stats::Stats;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, IovaAddr, PhysAddr};
use std::cell::RefCell;

/// `dma_get_max_seg_size()` for a device without `dma_parms`.
pub const DEFAULT_MAX_SEG_SIZE: u64 = 64 << 10;

/// Which lookups `iommu_dma_unmap_page()` makes — the `unmap_lookup` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnmapLookup {
    /// 5.10: `iommu_dma_sync_single_for_cpu` looks up a non-coherent device's buffer (unless
    /// `DMA_ATTR_SKIP_CPU_SYNC`) and uses the answer unchecked; then `__iommu_dma_unmap`.
    Linux5_10,
    /// 5.11–5.14: that sync, then `__iommu_dma_unmap_swiotlb` looks up again for every device
    /// and WARNs and returns when nothing is mapped.
    Linux5_11,
    /// 5.15 ("iommu/dma: Fold _swiotlb helpers into callers") to 7.1: one lookup for every
    /// device, the same WARN and return, and the sync from that address.
    Linux5_15,
}

impl crate::types::Choice for UnmapLookup {
    const ALL: &'static [Self] = &[
        UnmapLookup::Linux5_10,
        UnmapLookup::Linux5_11,
        UnmapLookup::Linux5_15,
    ];
    fn name(self) -> &'static str {
        match self {
            UnmapLookup::Linux5_10 => "5.10",
            UnmapLookup::Linux5_11 => "5.11",
            UnmapLookup::Linux5_15 => "5.15",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    map: SwCost,
    unmap: SwCost,
    sg_entry: SwCost,
    sg_next: SwCost,
}

/// A device's iommu-dma state: its domain, IOVA space and cache-maintenance rules.
#[derive(Debug)]
pub struct IommuDma {
    pub domain: IommuDomain,
    /// The IOVA space, which every CPU calling the device shares.
    pub iovad: IovaDomain,
    arch: ArchOps,
    sync: SyncPaths,
    /// `dma_get_max_seg_size()` (the device model has no `dma_parms.max_segment_size` yet).
    pub max_seg_size: u32,
    /// DMA-API misuse and unexpected failures, as the kernel would WARN them, from every CPU:
    /// borrowed only to push one, never across a call that may let another CPU run.
    pub warnings: RefCell<Vec<String>>,
    invalidation: Invalidation,
    unmap_lookup: UnmapLookup,
    /// The cookie's flush queue; present once the domain has been made lazy.
    fq: Option<FlushQueue>,
    costs: Costs,
}

/// What `iommu_dma_alloc()` handed out: the pages, and the IOVA the device uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IommuCoherent {
    pub dma: DmaAddr,
    /// Bytes mapped (the request aligned to the IOVA granule).
    pub size: u64,
    /// The memory, one entry per block the page allocator or a CMA area gave.
    pub pages: Vec<Allocation>,
    /// `iommu_dma_alloc_remap()`'s pages rather than one contiguous block.
    pub remap: bool,
}

/// `dma_info_to_prot()`.
pub fn dma_info_to_prot(dir: DmaDirection, coherent: bool) -> Prot {
    let base = if coherent { Prot::CACHE } else { Prot(0) };
    match dir {
        DmaDirection::Bidirectional => base.union(Prot::RW),
        DmaDirection::ToDevice => base.union(Prot::READ),
        DmaDirection::FromDevice => base.union(Prot::WRITE),
        DmaDirection::None => base,
    }
}

fn map_err(e: IommuError) -> DmaError {
    DmaError::MappingError(e.to_string())
}

impl IommuDma {
    /// `iommu_dma_init_domain()`: an IOVA space in the domain's granule above pfn 0.
    pub fn new(
        hw: &dyn Hw,
        domain: IommuDomain,
        ncpus: usize,
        arch: impl Into<ArchOps>,
        sync: impl Into<SyncPaths>,
    ) -> Result<IommuDma, IommuError> {
        let iovad = IovaDomain::new(hw, domain.min_pagesz(), 1, ncpus)?;
        Ok(IommuDma {
            domain: domain.with_cpus(ncpus),
            iovad,
            arch: arch.into(),
            sync: sync.into(),
            max_seg_size: DEFAULT_MAX_SEG_SIZE as u32,
            warnings: RefCell::default(),
            invalidation: Invalidation::Strict,
            unmap_lookup: UnmapLookup::Linux5_15,
            fq: None,
            costs: Costs {
                map: hw.sw_cost(SwKey::IommuDmaMap),
                unmap: hw.sw_cost(SwKey::IommuDmaUnmap),
                sg_entry: hw.sw_cost(SwKey::IommuDmaSgEntry),
                sg_next: hw.sw_cost(SwKey::SgNext),
            },
        })
    }

    /// The domain's invalidation mode, chosen once at setup: `Lazy` is `IOMMU_DOMAIN_DMA_FQ`,
    /// whose `iommu_dma_init_domain` sets up the flush queue (`iommu_dma_init_fq`) for every CPU
    /// of the IOVA domain. Going back to `Strict` stops queueing; what is already queued is
    /// still freed by the timer or [`IommuDma::flush_queue_drain`].
    pub fn with_invalidation(mut self, hw: &dyn Hw, mode: Invalidation) -> IommuDma {
        if mode == Invalidation::Lazy && self.fq.is_none() {
            self.fq = Some(FlushQueue::new(hw, self.iovad.ncpus()));
        }
        self.invalidation = mode;
        self
    }

    pub fn invalidation(&self) -> Invalidation {
        self.invalidation
    }

    /// The release's IOVA allocator rules and `unmap_page` lookups, chosen once at setup (a
    /// new domain starts with the newest of both).
    pub fn with_release_rules(mut self, iova: IovaRules, unmap_lookup: UnmapLookup) -> IommuDma {
        self.iovad = self.iovad.with_rules(iova);
        self.unmap_lookup = unmap_lookup;
        self
    }

    /// Whether several CPUs may call the device at once: both its cache maintenance and its
    /// domain's can be shared ([`crate::arch::cpu_sharing`]).
    pub fn shareable(&self) -> bool {
        self.arch.shareable() && self.domain.shareable()
    }

    /// The flush queue, if the domain has been lazy.
    pub fn flush_queue(&self) -> Option<&FlushQueue> {
        self.fq.as_ref()
    }

    /// What the flush queue did (all zero for a domain that was never lazy).
    pub fn fq_stats(&self) -> FqStats {
        self.fq.as_ref().map(|f| f.stats()).unwrap_or_default()
    }

    /// At the end of a run: flush once and free every queued IOVA, as the pending timer would.
    /// Returns the IOVA ranges freed (0, and no flush, when nothing is queued).
    pub fn flush_queue_drain<H: DeviceHw>(&self, hw: &mut H) -> u64 {
        match self.fq.as_ref() {
            Some(fq) => fq.drain(hw, &self.domain, &self.iovad, &self.warnings),
            None => 0,
        }
    }

    /// The flush queue's timer, if it expired while nobody was looking (see [`super::dma_fq`]).
    fn fq_timer<H: DeviceHw>(&self, hw: &mut H) {
        if let Some(fq) = self.fq.as_ref() {
            fq.run_expired_timer(hw, &self.domain, &self.iovad, &self.warnings);
        }
    }

    /// A WARN's message, kept for the report.
    fn warn(&self, msg: String) {
        self.warnings.borrow_mut().push(msg);
    }

    fn granule(&self) -> u64 {
        self.iovad.granule()
    }

    /// `iommu_dma_alloc_iova()`: `size` bytes (granule multiple) below the device's mask and the
    /// domain's aperture.
    fn alloc_iova<H: Hw>(&self, hw: &mut H, dev: &Device, size: u64) -> Result<u64, IommuError> {
        let shift = self.iovad.shift();
        let aperture_end = (1u64 << self.domain.pgtable.cfg().ias) - 1;
        let limit = dev.dma_mask.min(aperture_end);
        let pfn = self
            .iovad
            .alloc_iova_fast(hw, size >> shift, limit >> shift, true)?;
        if pfn == 0 {
            return Err(IommuError::IovaZero {
                pages: size >> shift,
            });
        }
        Ok(pfn << shift)
    }

    /// `iommu_dma_alloc(dev, size, gfp, attrs)` for a coherent device: the memory (see the
    /// module header for which path), an IOVA range below the device's mask, and the mapping.
    /// A failure at any step gives back what the earlier steps took.
    #[allow(clippy::too_many_arguments)]
    pub fn iommu_dma_alloc<H: DeviceHw>(
        &self,
        hw: &mut H,
        coh: &mut DmaCoherent,
        mem: &SharedPhysMem,
        dev: &Device,
        size: u64,
        gfp: Gfp,
        force_contiguous: bool,
    ) -> Result<IommuCoherent, String> {
        let back = hw.enter(crate::frame_id!("iommu_dma_alloc"));
        let r = self.alloc_inner(hw, coh, mem, dev, size, gfp, force_contiguous);
        hw.leave(back);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn alloc_inner<H: DeviceHw>(
        &self,
        hw: &mut H,
        coh: &mut DmaCoherent,
        mem: &SharedPhysMem,
        dev: &Device,
        size: u64,
        gfp: Gfp,
        force_contiguous: bool,
    ) -> Result<IommuCoherent, String> {
        let g = self.granule();
        let remap = gfp.blocking && !force_contiguous;
        let pages = {
            let mut m = mem.borrow_mut();
            if remap {
                // The domain's smallest page size sets the allocation's granule.
                let order_mask = self.domain.pgsize_bitmap() >> 12;
                let size = size
                    .max(1)
                    .checked_next_multiple_of(g)
                    .ok_or("size overflows")?;
                coh.alloc_page_chunks(&mut m, dev, size, order_mask)
            } else {
                coh.alloc_contiguous_pages(&mut m, dev, size, gfp)
                    .map(|a| vec![a])
            }
        }
        .map_err(|e| e.to_string())?;
        let total: u64 = pages.iter().map(|a| a.size).sum();
        let mapped = total.next_multiple_of(g);
        let give_back = |coh: &mut DmaCoherent| {
            let mut m = mem.borrow_mut();
            for a in &pages {
                let _ = coh.free(&mut m, dev, a.phys, a.size);
            }
        };
        let iova = match self.alloc_iova(hw, dev, mapped) {
            Ok(i) => i,
            Err(e) => {
                give_back(coh);
                return Err(e.to_string());
            }
        };
        let prot = dma_info_to_prot(DmaDirection::Bidirectional, dev.is_dma_coherent());
        let r = if remap {
            let segs: Vec<(PhysAddr, u64)> = pages.iter().map(|a| (a.phys, a.size)).collect();
            match self.domain.iommu_map_sg(hw, IovaAddr(iova), &segs, prot) {
                Ok(n) if n < total => {
                    Err(format!("iommu_map_sg mapped {n:#x} of {total:#x} bytes"))
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        } else {
            let back = hw.enter(crate::frame_id!("__iommu_dma_map"));
            let r = self
                .domain
                .iommu_map(hw, IovaAddr(iova), pages[0].phys, mapped, prot)
                .map_err(|e| e.to_string());
            hw.leave(back);
            r
        };
        if let Err(e) = r {
            let shift = self.iovad.shift();
            let _ = self
                .iovad
                .free_iova_fast(hw, iova >> shift, mapped >> shift);
            give_back(coh);
            return Err(e);
        }
        Ok(IommuCoherent {
            dma: DmaAddr(iova),
            size: mapped,
            pages,
            remap,
        })
    }

    /// `iommu_dma_free()`: unmap (strict: invalidate and sync; lazy: queue the IOVA), then give
    /// the pages back where they came from. Returns where each block went.
    pub fn iommu_dma_free<H: DeviceHw>(
        &self,
        hw: &mut H,
        coh: &mut DmaCoherent,
        mem: &SharedPhysMem,
        dev: &Device,
        a: &IommuCoherent,
    ) -> Result<Vec<crate::dma::contiguous::Served>, String> {
        let back = hw.enter(crate::frame_id!("iommu_dma_free"));
        self.iommu_dma_unmap(hw, a.dma.0, a.size);
        let mut m = mem.borrow_mut();
        let r = a
            .pages
            .iter()
            .map(|p| {
                coh.free(&mut m, dev, p.phys, p.size)
                    .map_err(|e| e.to_string())
            })
            .collect();
        hw.leave(back);
        r
    }

    /// `__iommu_dma_unmap()`: unmap `[addr, addr + size)`; strict, invalidate and free its IOVA,
    /// lazy, queue the IOVA for a later flush (`iommu_dma_free_iova` with a queued gather).
    fn iommu_dma_unmap<H: DeviceHw>(&self, hw: &mut H, addr: u64, size: u64) {
        let g = self.granule();
        let off = addr & (g - 1);
        let start = addr - off;
        let Some(size) = size.checked_add(off + g - 1).map(|s| s / g * g) else {
            self.warn(format!("unmap of {addr:#x}: size {size:#x} overflows"));
            return;
        };
        let mut gather = IommuIotlbGather::new();
        if self.invalidation == Invalidation::Lazy {
            match &self.fq {
                Some(fq) if fq.has_cpu(hw.cpu()) => gather.queued = true,
                _ => self.warn(format!(
                    "no flush queue for CPU {}: unmap of {start:#x} is strict",
                    hw.cpu()
                )),
            }
        }
        match self
            .domain
            .iommu_unmap_fast(hw, IovaAddr(start), size, &mut gather)
        {
            Ok(n) if n == size => {}
            // WARN_ON(unmapped != size), and on to free the IOVA all the same.
            Ok(n) => {
                hw.count(Counter::Warn, 1);
                self.warn(format!(
                    "unmap of {start:#x}+{size:#x} removed only {n:#x} bytes"
                ))
            }
            Err(e) => {
                hw.count(Counter::Warn, 1);
                self.warn(format!("unmap of {start:#x}+{size:#x}: {e}"))
            }
        }
        let shift = self.iovad.shift();
        if gather.queued {
            if let Some(fq) = self.fq.as_ref()
                && fq.queue_iova(
                    hw,
                    &self.domain,
                    &self.iovad,
                    start >> shift,
                    size >> shift,
                    &self.warnings,
                )
            {
                return;
            }
            // Not reached (the CPU was checked above), but the leaves were not invalidated, so
            // the IOVA may only be freed after the whole context has been.
            self.domain.flush_iotlb_all(hw);
        } else {
            self.domain.iotlb_sync(hw, &mut gather);
        }
        if let Err(e) = self.iovad.free_iova_fast(hw, start >> shift, size >> shift) {
            self.warn(format!("IOVA free at {start:#x}: {e}"));
        }
    }

    fn for_cpu<H: Hw>(
        &self,
        hw: &mut H,
        sync: SyncRule,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        sync.for_cpu(hw, &self.arch, phys, size, dir);
    }

    fn for_device<H: Hw>(
        &self,
        hw: &mut H,
        sync: SyncRule,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        sync.for_device(hw, &self.arch, phys, size, dir);
    }

    fn end_of_call<H: Hw>(&self, hw: &mut H, dev: &Device, sync: SyncRule) {
        if !dev.is_dma_coherent() {
            sync.end_of_call(hw, &self.arch);
        }
    }

    /// Maintenance for every entry of a list, without the end-of-call flush.
    fn sync_sg<H: Hw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
        to_device: bool,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        let sync = self.sync.iommu_sg;
        for e in &sgt.entries {
            hw.sw(self.costs.sg_next);
            let len = u64::from(e.length);
            if to_device {
                self.for_device(hw, sync, e.phys(), len, dir);
            } else {
                self.for_cpu(hw, sync, e.phys(), len, dir);
            }
        }
    }

    /// `__finalise_sg()`: give each entry its DMA address and merge entries that continue one
    /// another in IOVA into segments. Returns the number of DMA segments.
    fn finalise_sg<H: Hw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        layout: &[(u64, u64)],
        iova: u64,
    ) -> usize {
        // The kernel's lengths here are `unsigned int`, and so are these: an entry longer than
        // `max_seg_size` (a driver bug DMA-API debug reports) makes `max_len - cur_len` wrap,
        // so the merge goes ahead and the sum wraps too, as it does in the kernel.
        let max_len = self.max_seg_size;
        let (mut cur, mut cur_len, mut count) = (0usize, 0u32, 0usize);
        let mut dma_addr = iova;
        for (i, &(s_iova_off, s_iova_len)) in layout.iter().enumerate() {
            hw.sw(self.costs.sg_entry);
            let s_length = sgt.entries[i].length;
            sgt.entries[i].dma_address = DmaAddr::MAPPING_ERROR;
            sgt.entries[i].dma_length = 0;
            if cur_len != 0
                && s_iova_off == 0
                && dma_addr & dev.seg_boundary_mask != 0
                && max_len.wrapping_sub(cur_len) >= s_length
            {
                cur_len = cur_len.wrapping_add(s_length);
            } else {
                if i > 0 {
                    cur += 1;
                }
                cur_len = s_length;
                count += 1;
                sgt.entries[cur].dma_address = DmaAddr(dma_addr + s_iova_off);
            }
            sgt.entries[cur].dma_length = cur_len;
            dma_addr += s_iova_len;
            if u64::from(s_length) + s_iova_off < s_iova_len {
                cur_len = 0;
            }
        }
        count
    }
}

impl Stats for IommuDma {
    fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        let mut v = self.domain.ops.lock_records();
        v.extend(self.iovad.lock_records());
        if let Some(fq) = &self.fq {
            v.push(("fq->lock", fq.lock_record()));
        }
        v
    }

    fn cmdq_stats(&self) -> Option<crate::stats::CmdqStats> {
        self.domain.ops.cmdq_stats()
    }
}

impl DmaMapOps for IommuDma {
    fn name(&self) -> &'static str {
        "iommu-dma"
    }

    fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        if size == 0 {
            return Err(map_err(IommuError::Empty));
        }
        let g = self.granule();
        let off = phys.0 & (g - 1);
        let Some(len) = size.checked_add(off + g - 1).map(|s| s / g * g) else {
            return Err(map_err(IommuError::OutOfRange {
                what: "buffer",
                addr: phys.0,
                size,
                bits: 64,
            }));
        };
        self.fq_timer(hw);
        let back = hw.enter(crate::frame_id!("iommu_dma_map_page"));
        hw.sw(self.costs.map);
        let coherent = dev.is_dma_coherent();
        if !coherent && !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
            self.for_device(hw, self.sync.single, phys, size, dir);
        }
        let r = self.alloc_iova(hw, dev, len).and_then(|iova| {
            let prot = dma_info_to_prot(dir, coherent);
            match self
                .domain
                .iommu_map(hw, IovaAddr(iova), PhysAddr(phys.0 - off), len, prot)
            {
                Ok(()) => Ok(iova),
                Err(e) => {
                    let shift = self.iovad.shift();
                    let _ = self.iovad.free_iova_fast(hw, iova >> shift, len >> shift);
                    Err(e)
                }
            }
        });
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave(back);
        r.map(|iova| DmaAddr(iova + off)).map_err(map_err)
    }

    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.fq_timer(hw);
        let back = hw.enter(crate::frame_id!("iommu_dma_unmap_page"));
        hw.sw(self.costs.unmap);
        let sync = !dev.is_dma_coherent() && !attrs.contains(DmaAttrs::SKIP_CPU_SYNC);
        let iova = IovaAddr(addr.0);
        // 5.10 and 5.11's iommu_dma_sync_single_for_cpu(): its own lookup, unchecked.
        if sync && self.unmap_lookup != UnmapLookup::Linux5_15 {
            match self.domain.iova_to_phys(hw, iova) {
                Some(phys) => self.for_cpu(hw, self.sync.single, phys, size, dir),
                None => self.warn(format!(
                    "unmap_page of {addr}, which is not mapped: the sync is given physical address 0"
                )),
            }
        }
        if self.unmap_lookup != UnmapLookup::Linux5_10 {
            let Some(phys) = self.domain.iova_to_phys(hw, iova) else {
                // if (WARN_ON(!phys)) return;
                hw.count(Counter::Warn, 1);
                self.warn(format!(
                    "unmap_page of {addr}, which is not mapped: nothing unmapped"
                ));
                hw.leave(back);
                return;
            };
            if sync && self.unmap_lookup == UnmapLookup::Linux5_15 {
                self.for_cpu(hw, self.sync.single, phys, size, dir);
            }
        }
        self.iommu_dma_unmap(hw, addr.0, size);
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave(back);
    }

    fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        if sgt.entries.is_empty() {
            return Err(map_err(IommuError::Empty));
        }
        self.fq_timer(hw);
        let back = hw.enter(crate::frame_id!("iommu_dma_map_sg"));
        hw.sw(self.costs.map);
        let coherent = dev.is_dma_coherent();
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) && !coherent {
            let back2 = hw.enter(crate::frame_id!("iommu_dma_sync_sg_for_device"));
            self.sync_sg(hw, dev, sgt, dir, true);
            self.end_of_call(hw, dev, self.sync.iommu_sg);
            hw.leave(back2);
        }
        let g = self.granule();
        // Each entry keeps its offset within its granule and is padded to whole granules.
        let mut layout: Vec<(u64, u64)> = Vec::with_capacity(sgt.entries.len());
        let mut segs: Vec<(PhysAddr, u64)> = Vec::with_capacity(sgt.entries.len());
        let mut iova_len = 0u64;
        let mask = dev.seg_boundary_mask;
        for e in &sgt.entries {
            hw.sw(self.costs.sg_entry);
            let phys = e.phys().0;
            let off = phys & (g - 1);
            let len = (u64::from(e.length) + off).div_ceil(g) * g;
            // Bytes to the next segment boundary. The IOVA range will start on a boundary when
            // the list is larger than one, so the layout can be decided from lengths alone.
            let pad = mask.wrapping_sub(iova_len).wrapping_add(1) & mask;
            if pad != 0
                && pad < len - 1
                && let (Some(prev), Some(pseg)) = (layout.last_mut(), segs.last_mut())
            {
                prev.1 += pad;
                pseg.1 += pad;
                iova_len += pad;
            }
            layout.push((off, len));
            segs.push((PhysAddr(phys - off), len));
            iova_len += len;
        }
        let prot = dma_info_to_prot(dir, coherent);
        let r = self.alloc_iova(hw, dev, iova_len).and_then(|iova| {
            match self.domain.iommu_map_sg(hw, IovaAddr(iova), &segs, prot) {
                Ok(m) if m == iova_len => Ok(iova),
                r => {
                    let shift = self.iovad.shift();
                    let _ = self
                        .iovad
                        .free_iova_fast(hw, iova >> shift, iova_len >> shift);
                    Err(r.err().unwrap_or(IommuError::Empty))
                }
            }
        });
        let out = match r {
            Ok(iova) => {
                let n = self.finalise_sg(hw, dev, sgt, &layout, iova);
                sgt.nents = n;
                Ok(n)
            }
            Err(e) => {
                for e in &mut sgt.entries {
                    e.dma_address = DmaAddr::MAPPING_ERROR;
                    e.dma_length = 0;
                }
                sgt.nents = 0;
                Err(map_err(e))
            }
        };
        hw.leave(back);
        out
    }

    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.fq_timer(hw);
        let back = hw.enter(crate::frame_id!("iommu_dma_unmap_sg"));
        hw.sw(self.costs.unmap);
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) && !dev.is_dma_coherent() {
            let back2 = hw.enter(crate::frame_id!("iommu_dma_sync_sg_for_cpu"));
            self.sync_sg(hw, dev, sgt, dir, false);
            self.end_of_call(hw, dev, self.sync.iommu_sg);
            hw.leave(back2);
        }
        let first = sgt.entries.first().map(|e| e.dma_address);
        match first {
            Some(start) if sgt.nents > 0 && start != DmaAddr::MAPPING_ERROR => {
                let mut end = start.0 + u64::from(sgt.entries[0].dma_length);
                for e in sgt.entries.iter().skip(1) {
                    hw.sw(self.costs.sg_entry);
                    if e.dma_length == 0 {
                        break;
                    }
                    end = e.dma_address.0 + u64::from(e.dma_length);
                }
                self.iommu_dma_unmap(hw, start.0, end - start.0);
            }
            _ => self.warn("unmap_sg of a list that is not mapped".to_string()),
        }
        for e in &mut sgt.entries {
            e.dma_address = DmaAddr::MAPPING_ERROR;
            e.dma_length = 0;
        }
        sgt.nents = 0;
        hw.leave(back);
    }

    fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        let back = hw.enter(crate::frame_id!("iommu_dma_sync_single_for_cpu"));
        if let Some(phys) = self.domain.iova_to_phys(hw, IovaAddr(addr.0)) {
            self.for_cpu(hw, self.sync.single, phys, size, dir);
        }
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave(back);
    }

    fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        let back = hw.enter(crate::frame_id!("iommu_dma_sync_single_for_device"));
        if let Some(phys) = self.domain.iova_to_phys(hw, IovaAddr(addr.0)) {
            self.for_device(hw, self.sync.single, phys, size, dir);
        }
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave(back);
    }

    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        let back = hw.enter(crate::frame_id!("iommu_dma_sync_sg_for_cpu"));
        self.sync_sg(hw, dev, sgt, dir, false);
        self.end_of_call(hw, dev, self.sync.iommu_sg);
        hw.leave(back);
    }

    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        let back = hw.enter(crate::frame_id!("iommu_dma_sync_sg_for_device"));
        self.sync_sg(hw, dev, sgt, dir, true);
        self.end_of_call(hw, dev, self.sync.iommu_sg);
        hw.leave(back);
    }

    fn next_timer_ps(&self) -> Option<u64> {
        self.fq.as_ref()?.timer_expires_ps()
    }

    fn run_timers<H: DeviceHw>(&self, hw: &mut H) -> u64 {
        let ran = self
            .fq
            .as_ref()
            .is_some_and(|fq| fq.run_expired_timer(hw, &self.domain, &self.iovad, &self.warnings));
        u64::from(ran)
    }
}

#[cfg(test)]
mod tests;
