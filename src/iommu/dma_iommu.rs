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
//! queue's timer is checked at the start of every map and unmap call. Non-coherent devices get
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
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, IovaAddr, PhysAddr};

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
    pub iovad: IovaDomain,
    arch: ArchOps,
    sync: SyncPaths,
    /// `dma_get_max_seg_size()` (the device model has no `dma_parms.max_segment_size` yet).
    pub max_seg_size: u32,
    /// The CPU whose IOVA magazines this caller uses.
    pub cpu: usize,
    /// DMA-API misuse and unexpected failures, as the kernel would WARN them.
    pub warnings: Vec<String>,
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
            domain,
            iovad,
            arch: arch.into(),
            sync: sync.into(),
            max_seg_size: DEFAULT_MAX_SEG_SIZE as u32,
            cpu: 0,
            warnings: Vec::new(),
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

    /// The flush queue, if the domain has been lazy.
    pub fn flush_queue(&self) -> Option<&FlushQueue> {
        self.fq.as_ref()
    }

    /// What the flush queue did (all zero for a domain that was never lazy).
    pub fn fq_stats(&self) -> FqStats {
        self.fq.as_ref().map(|f| f.stats).unwrap_or_default()
    }

    /// At the end of a run: flush once and free every queued IOVA, as the pending timer would.
    /// Returns the IOVA ranges freed (0, and no flush, when nothing is queued).
    pub fn flush_queue_drain<H: DeviceHw>(&mut self, hw: &mut H) -> u64 {
        match self.fq.as_mut() {
            Some(fq) => fq.drain(hw, &mut self.domain, &mut self.iovad, &mut self.warnings),
            None => 0,
        }
    }

    /// The flush queue's timer, if it expired while nobody was looking (see [`super::dma_fq`]).
    fn fq_timer<H: DeviceHw>(&mut self, hw: &mut H) {
        if let Some(fq) = self.fq.as_mut() {
            fq.run_expired_timer(hw, &mut self.domain, &mut self.iovad, &mut self.warnings);
        }
    }

    fn granule(&self) -> u64 {
        self.iovad.granule()
    }

    /// `iommu_dma_alloc_iova()`: `size` bytes (granule multiple) below the device's mask and the
    /// domain's aperture.
    fn alloc_iova<H: Hw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        size: u64,
    ) -> Result<u64, IommuError> {
        let shift = self.iovad.shift();
        let aperture_end = (1u64 << self.domain.pgtable.cfg().ias) - 1;
        let limit = dev.dma_mask.min(aperture_end);
        let pfn = self
            .iovad
            .alloc_iova_fast(hw, self.cpu, size >> shift, limit >> shift, true)?;
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
        &mut self,
        hw: &mut H,
        coh: &mut DmaCoherent,
        mem: &SharedPhysMem,
        dev: &Device,
        size: u64,
        gfp: Gfp,
        force_contiguous: bool,
    ) -> Result<IommuCoherent, String> {
        hw.enter("iommu_dma_alloc");
        let r = self.alloc_inner(hw, coh, mem, dev, size, gfp, force_contiguous);
        hw.leave();
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn alloc_inner<H: DeviceHw>(
        &mut self,
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
            hw.enter("__iommu_dma_map");
            let r = self
                .domain
                .iommu_map(hw, IovaAddr(iova), pages[0].phys, mapped, prot)
                .map_err(|e| e.to_string());
            hw.leave();
            r
        };
        if let Err(e) = r {
            let shift = self.iovad.shift();
            let _ = self
                .iovad
                .free_iova_fast(hw, self.cpu, iova >> shift, mapped >> shift);
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
        &mut self,
        hw: &mut H,
        coh: &mut DmaCoherent,
        mem: &SharedPhysMem,
        dev: &Device,
        a: &IommuCoherent,
    ) -> Result<Vec<crate::dma::contiguous::Served>, String> {
        hw.enter("iommu_dma_free");
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
        hw.leave();
        r
    }

    /// `__iommu_dma_unmap()`: unmap `[addr, addr + size)`; strict, invalidate and free its IOVA,
    /// lazy, queue the IOVA for a later flush (`iommu_dma_free_iova` with a queued gather).
    fn iommu_dma_unmap<H: DeviceHw>(&mut self, hw: &mut H, addr: u64, size: u64) {
        let g = self.granule();
        let off = addr & (g - 1);
        let start = addr - off;
        let Some(size) = size.checked_add(off + g - 1).map(|s| s / g * g) else {
            self.warnings
                .push(format!("unmap of {addr:#x}: size {size:#x} overflows"));
            return;
        };
        let mut gather = IommuIotlbGather::new();
        if self.invalidation == Invalidation::Lazy {
            match &self.fq {
                Some(fq) if fq.has_cpu(self.cpu) => gather.queued = true,
                _ => self.warnings.push(format!(
                    "no flush queue for CPU {}: unmap of {start:#x} is strict",
                    self.cpu
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
                self.warnings.push(format!(
                    "unmap of {start:#x}+{size:#x} removed only {n:#x} bytes"
                ))
            }
            Err(e) => {
                hw.count(Counter::Warn, 1);
                self.warnings
                    .push(format!("unmap of {start:#x}+{size:#x}: {e}"))
            }
        }
        let shift = self.iovad.shift();
        if gather.queued {
            if let Some(fq) = self.fq.as_mut()
                && fq.queue_iova(
                    hw,
                    &mut self.domain,
                    &mut self.iovad,
                    self.cpu,
                    start >> shift,
                    size >> shift,
                    &mut self.warnings,
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
        if let Err(e) = self
            .iovad
            .free_iova_fast(hw, self.cpu, start >> shift, size >> shift)
        {
            self.warnings.push(format!("IOVA free at {start:#x}: {e}"));
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

impl DmaMapOps for IommuDma {
    fn name(&self) -> &'static str {
        "iommu-dma"
    }

    fn map_page<H: DeviceHw>(
        &mut self,
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
        hw.enter("iommu_dma_map_page");
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
                    let _ = self
                        .iovad
                        .free_iova_fast(hw, self.cpu, iova >> shift, len >> shift);
                    Err(e)
                }
            }
        });
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave();
        r.map(|iova| DmaAddr(iova + off)).map_err(map_err)
    }

    fn unmap_page<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.fq_timer(hw);
        hw.enter("iommu_dma_unmap_page");
        hw.sw(self.costs.unmap);
        let sync = !dev.is_dma_coherent() && !attrs.contains(DmaAttrs::SKIP_CPU_SYNC);
        let iova = IovaAddr(addr.0);
        // 5.10 and 5.11's iommu_dma_sync_single_for_cpu(): its own lookup, unchecked.
        if sync && self.unmap_lookup != UnmapLookup::Linux5_15 {
            match self.domain.iova_to_phys(hw, iova) {
                Some(phys) => self.for_cpu(hw, self.sync.single, phys, size, dir),
                None => self.warnings.push(format!(
                    "unmap_page of {addr}, which is not mapped: the sync is given physical address 0"
                )),
            }
        }
        if self.unmap_lookup != UnmapLookup::Linux5_10 {
            let Some(phys) = self.domain.iova_to_phys(hw, iova) else {
                // if (WARN_ON(!phys)) return;
                hw.count(Counter::Warn, 1);
                self.warnings.push(format!(
                    "unmap_page of {addr}, which is not mapped: nothing unmapped"
                ));
                hw.leave();
                return;
            };
            if sync && self.unmap_lookup == UnmapLookup::Linux5_15 {
                self.for_cpu(hw, self.sync.single, phys, size, dir);
            }
        }
        self.iommu_dma_unmap(hw, addr.0, size);
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave();
    }

    fn map_sg<H: DeviceHw>(
        &mut self,
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
        hw.enter("iommu_dma_map_sg");
        hw.sw(self.costs.map);
        let coherent = dev.is_dma_coherent();
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) && !coherent {
            hw.enter("iommu_dma_sync_sg_for_device");
            self.sync_sg(hw, dev, sgt, dir, true);
            self.end_of_call(hw, dev, self.sync.iommu_sg);
            hw.leave();
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
                    let _ =
                        self.iovad
                            .free_iova_fast(hw, self.cpu, iova >> shift, iova_len >> shift);
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
        hw.leave();
        out
    }

    fn unmap_sg<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.fq_timer(hw);
        hw.enter("iommu_dma_unmap_sg");
        hw.sw(self.costs.unmap);
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) && !dev.is_dma_coherent() {
            hw.enter("iommu_dma_sync_sg_for_cpu");
            self.sync_sg(hw, dev, sgt, dir, false);
            self.end_of_call(hw, dev, self.sync.iommu_sg);
            hw.leave();
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
            _ => self
                .warnings
                .push("unmap_sg of a list that is not mapped".to_string()),
        }
        for e in &mut sgt.entries {
            e.dma_address = DmaAddr::MAPPING_ERROR;
            e.dma_length = 0;
        }
        sgt.nents = 0;
        hw.leave();
    }

    fn sync_single_for_cpu<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        hw.enter("iommu_dma_sync_single_for_cpu");
        if let Some(phys) = self.domain.iova_to_phys(hw, IovaAddr(addr.0)) {
            self.for_cpu(hw, self.sync.single, phys, size, dir);
        }
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave();
    }

    fn sync_single_for_device<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        hw.enter("iommu_dma_sync_single_for_device");
        if let Some(phys) = self.domain.iova_to_phys(hw, IovaAddr(addr.0)) {
            self.for_device(hw, self.sync.single, phys, size, dir);
        }
        self.end_of_call(hw, dev, self.sync.single);
        hw.leave();
    }

    fn sync_sg_for_cpu<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        hw.enter("iommu_dma_sync_sg_for_cpu");
        self.sync_sg(hw, dev, sgt, dir, false);
        self.end_of_call(hw, dev, self.sync.iommu_sg);
        hw.leave();
    }

    fn sync_sg_for_device<H: DeviceHw>(
        &mut self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if dev.is_dma_coherent() {
            return;
        }
        hw.enter("iommu_dma_sync_sg_for_device");
        self.sync_sg(hw, dev, sgt, dir, true);
        self.end_of_call(hw, dev, self.sync.iommu_sg);
        hw.leave();
    }
}

#[cfg(test)]
mod tests {
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
        let mut d = iommu_dma(&mut r, true);
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
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(base)), None);
        // Five page leaves in one table: five TLBIVAL and one sync, no walk flush.
        assert_eq!(r.count_of(Counter::SmmuTlbival), 5);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
        assert_eq!(d.iovad.cached_pfns(), 1);
    }

    #[test]
    fn an_entry_that_would_straddle_a_segment_boundary_moves_to_the_next_one() {
        let mut r = Recorder::new(64);
        let mut d = iommu_dma(&mut r, true);
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
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
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
            let mut d = iommu_dma(&mut r, false);
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
            let (lo, hi) = d.iovad.ranges().next().unwrap();
            assert_eq!((hi - lo + 1) << 12, mapped, "{rule:?}");
            // The pad is mapped too: the second entry's mapping runs on past its 2 GiB.
            let past = d.domain.iova_to_phys(&mut r, IovaAddr(base + 3 * gib));
            let want = (rule == SegBoundary::Bits32).then_some(PhysAddr(0x20_8000_0000));
            assert_eq!(past, want.or(Some(PhysAddr(0x30_0000_0000))), "{rule:?}");
            d.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
            assert!(d.warnings.is_empty(), "{:?}", d.warnings);
            assert_eq!(d.domain.iova_to_phys(&mut r, IovaAddr(base)), None);
        }
    }

    #[test]
    fn segments_stop_at_max_seg_size() {
        let mut r = Recorder::new(64);
        let mut d = iommu_dma(&mut r, true);
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
            let mut d = iommu_dma(&mut r, batched);
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
            let mut d = iommu_dma_with(&mut r, kind);
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
        let mut d = iommu_dma(&mut r, false)
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
            let mut d = IommuDma::new(&m, dom, 1, arch, SyncKind::PerEntry)
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
            let t0 = m.ledger.total_ps();
            d.unmap_page(&mut m, &dev, a, 4096, dir, DmaAttrs::NONE);
            spent.push(m.ledger.total_ps() - t0);
        }
        assert_eq!(spent[1] - spent[0], 40_000);
        assert_eq!(spent[2], spent[1]);
    }

    #[test]
    fn map_page_keeps_the_offset_and_unmap_page_frees_the_iova() {
        let mut r = Recorder::new(64);
        let mut d = iommu_dma(&mut r, true);
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
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
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
        assert_eq!(d.iovad.stats.rcache_hits, 1);
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
        assert!(!d.warnings.is_empty());
    }

    fn map_unmap_4k<H: DeviceHw>(
        r: &mut H,
        d: &mut IommuDma,
        dev: &Device,
        n: u64,
    ) -> Vec<DmaAddr> {
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
        assert_eq!(d.iovad.stats.tree_allocs, 1);
        assert_eq!(d.iovad.stats.rcache_hits, 299);
        assert_eq!(d.flush_queue_drain(&mut r), 0);
        assert_eq!(d.fq_stats(), FqStats::default());

        let mut r = Recorder::new(64);
        let mut d = iommu_dma(&mut r, true).with_invalidation(&r, Invalidation::Lazy);
        assert_eq!(d.invalidation(), Invalidation::Lazy);
        let mut r = Recorder::new(64);
        map_unmap_4k(&mut r, &mut d, &dev, 300);
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert_eq!(r.count_of(Counter::SmmuTlbival), 0);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 0);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 1);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
        let flush =
            "iommu_dma_unmap_page > queue_iova > fq_flush_iotlb > arm_smmu_tlb_inv_context_s1";
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
        assert_eq!(d.iovad.stats.tree_allocs, 256);
        assert_eq!(d.iovad.stats.rcache_hits, 44);

        assert_eq!(d.flush_queue_drain(&mut r), 45);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 2);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 2);
        assert_eq!(d.fq_stats().freed, 300);
        assert_eq!(d.fq_stats().drain_flushes, 1);
        assert_eq!(d.fq_stats().flushes(), 2);
        assert_eq!(d.flush_queue().map(|f| f.pending()), Some(0));
        assert_eq!(d.flush_queue().and_then(|f| f.timer_expires_ps()), None);
        // Every IOVA is back, cached for reuse: 256 allocated, 256 in the magazines.
        assert_eq!(d.iovad.ranges().count(), 256);
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
        assert_eq!(d.iovad.stats.tree_allocs, 2);
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
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
                ArmSmmuV3Domain::new(&r, 3, 4096, SmmuV3Features::default(), Cmdq::new(10))
                    .unwrap(),
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
            assert_eq!(d.iovad.cached_pfns(), d.iovad.ranges().count(), "{mode:?}");
        }
    }

    /// The timer on the Model's clock: 10 ms after the first queueing, the next call flushes
    /// first and finds the IOVA free; 5 ms is not enough.
    #[test]
    fn the_flush_queue_timer_fires_at_the_first_call_after_ten_ms() {
        use crate::hw::SmmuPort;
        use crate::hw::model::{Model, ModelParams};
        let dev = Device::new("d", true, 64);
        let mut m = Model::new(ModelParams::default());
        let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
        let t = ArmLpaeIoPgtable::new(&mut m, IoPgtableCfg::new(4096, 36), mem, None).unwrap();
        let ops = Box::new(ArmSmmuDomain::new(&m, 1, WalkFlushKind::Asid));
        let dom = IommuDomain::new(&m, t, ops, SplitKind::UnmapPages);
        let arch = Arm64::new(DirRules::Since5_19);
        let mut d = IommuDma::new(&m, dom, 1, arch, SyncKind::Batched)
            .unwrap()
            .with_invalidation(&m, Invalidation::Lazy);
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
        let totals = m.ledger.totals();
        assert_eq!(totals[Counter::SmmuTlbiasid as usize], 1);
        assert_eq!(totals[Counter::SmmuTlbival as usize], 0);
        assert!(
            m.ledger.stacks().iter().any(|s| s.stack_string()
                == "fq_flush_timeout > fq_flush_iotlb > arm_smmu_tlb_inv_context_s1"),
            "the timer runs as its own top-level frame"
        );
        // Re-armed by the third unmap's queueing.
        assert!(d.flush_queue().and_then(|f| f.timer_expires_ps()) > expires);
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
        d.cpu = 1;
        map_unmap_4k(&mut r, &mut d, &dev, 2);
        assert_eq!(d.flush_queue().map(|f| f.pending()), Some(5));
        let mut r = Recorder::new(64);
        assert_eq!(d.flush_queue_drain(&mut r), 5);
        assert_eq!(r.count_of(Counter::SmmuTlbiasid), 1);
        // One lock per CPU's ring.
        assert_eq!(r.count_of(Counter::SpinLock), 2);
        // A CPU the queue does not have: that unmap is strict, and says so.
        d.cpu = 0;
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
        d.cpu = 7;
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
        assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
        assert!(d.warnings[0].starts_with("no flush queue for CPU 7"));
        assert!(d.warnings[1].contains("no CPU 7"), "{}", d.warnings[1]);
    }
}
