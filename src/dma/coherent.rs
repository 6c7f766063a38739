//! Coherent allocations through dma-direct: `dma_alloc_coherent()` / `dma_free_coherent()` and
//! the managed `dmam_alloc_coherent()` a driver's probe uses.
//!
//! Kernel counterpart: kernel/dma/direct.c's `dma_direct_alloc()` → `__dma_direct_alloc_pages()`
//! and `dma_direct_free()` → `__dma_direct_free_pages()` (5.10 as read in 5.11; 6.6), with
//! `dma_direct_optimal_gfp_mask()` and `dma_coherent_ok()`; kernel/dma/mapping.c's
//! `dmam_alloc_coherent()` (a devres entry freed when the driver detaches).
//!
//! What it models, for a device whose DMA is coherent with the CPU (arm64 servers' PCIe and
//! SMMUs): the zone the device's coherent mask calls for (GFP_DMA at or below ZONE_DMA's width,
//! GFP_DMA32 at or below 32 bits); [`Contiguous::alloc`] first; an area's pages the mask cannot
//! reach go back; then `alloc_pages_node()` on the device's node (the CPU's node for a device
//! without one), falling back along the zonelist, retried with GFP_DMA32 and then GFP_DMA when
//! the pages it got lie above the mask. Every allocation records its node and what served it.
//! Not yet: a non-coherent device's remap (`arch_dma_prep_coherent`, the atomic pools), a
//! device's own `dev->cma_area`, and the iommu-dma allocation path.
//!
//! Invariants: a live allocation is either a CMA area's or the page allocator's, never both;
//! a free returns it to where it came from; a failed allocation leaves nothing allocated.

use crate::device::Device;
use crate::dma::contiguous::{Contiguous, Gfp, Served, get_order, max_zone_phys};
use crate::mm::physmem::PhysMem;
use crate::types::PhysAddr;

const PAGE: u64 = 4096;

/// One coherent allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub device: String,
    pub phys: PhysAddr,
    /// What the caller asked for, page aligned.
    pub size: u64,
    /// The node of its memory (`page_to_nid()`).
    pub node: u32,
    pub served: Served,
    /// The zone flag the allocation finally used, for reports: "" (normal), "GFP_DMA32",
    /// "GFP_DMA".
    pub zone: &'static str,
    /// Managed (`dmam_alloc_coherent`): freed when the device's driver detaches.
    pub managed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoherentError {
    /// `dma_alloc_coherent()` returned NULL.
    #[error("dma_alloc_coherent of {size:#x} bytes for {device}: no memory the device can reach")]
    NoMemory { device: String, size: u64 },
    /// A free of something this device did not allocate (the DMA-API debug checks' report).
    #[error(
        "dma_free_coherent of {phys} for {device}: not a live coherent allocation of this device"
    )]
    BadFree { device: String, phys: PhysAddr },
    #[error("{0}")]
    Cma(#[from] crate::mm::cma::CmaError),
}

/// The coherent allocator of one machine: its CMA areas and the live allocations.
pub struct DmaCoherent {
    pub cma: Contiguous,
    /// The node of the CPU making calls (`numa_mem_id()`), for a device without a node.
    pub cpu_node: u32,
    live: Vec<Allocation>,
}

impl DmaCoherent {
    pub fn new(cma: Contiguous, cpu_node: u32) -> DmaCoherent {
        DmaCoherent {
            cma,
            cpu_node,
            live: Vec::new(),
        }
    }

    /// Live allocations, oldest first.
    pub fn live(&self) -> &[Allocation] {
        &self.live
    }

    /// `dma_coherent_ok()`: the whole buffer lies within the device's coherent mask.
    fn coherent_ok(dev: &Device, phys: PhysAddr, size: u64) -> bool {
        phys.0
            .checked_add(size - 1)
            .is_some_and(|last| last <= dev.dma_mask)
    }

    /// `dma_alloc_coherent(dev, size, gfp)` (or `dmam_alloc_coherent` when `managed`).
    pub fn alloc(
        &mut self,
        mem: &mut PhysMem,
        dev: &Device,
        size: u64,
        mut gfp: Gfp,
        managed: bool,
    ) -> Result<Allocation, CoherentError> {
        let fail = || CoherentError::NoMemory {
            device: dev.name.clone(),
            size,
        };
        let size = size
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(fail)?;
        let dma_bits = self.cma.rules.zone_dma_bits;
        let zone_dma = max_zone_phys(mem, dma_bits);
        let zone_dma32 = max_zone_phys(mem, 32);
        // dma_direct_optimal_gfp_mask(): the zone the mask falls into, tried first.
        let phys_limit = dev.dma_mask;
        if phys_limit <= crate::device::Device::bit_mask(dma_bits) {
            gfp.dma = true;
        } else if phys_limit <= crate::device::Device::bit_mask(32) {
            gfp.dma32 = true;
        }
        let node = dev.numa_node;
        let mut got: Option<(PhysAddr, Served, u64)> = None;
        if let Some((p, area)) = self.cma.alloc(node, size, gfp) {
            if Self::coherent_ok(dev, p, size) {
                got = Some((p, Served::Area(area), size));
            } else {
                self.free_pages(mem, p, size)?;
            }
        }
        let nid = node.unwrap_or(self.cpu_node);
        loop {
            if got.is_some() {
                break;
            }
            let order = get_order(size);
            let limit = if gfp.dma {
                Some(zone_dma)
            } else if gfp.dma32 {
                Some(zone_dma32)
            } else {
                None
            };
            let Ok(p) = mem.alloc_pages_node(nid, order, limit) else {
                return Err(fail());
            };
            let block = PAGE << order;
            if Self::coherent_ok(dev, p, size) {
                got = Some((p, Served::PageAllocator, block));
                break;
            }
            mem.free(p, block).map_err(|_| fail())?;
            if phys_limit < u64::MAX && !gfp.dma32 && !gfp.dma {
                gfp.dma32 = true;
            } else if !gfp.dma {
                gfp.dma32 = false;
                gfp.dma = true;
            } else {
                return Err(fail());
            }
        }
        let (phys, served, _) = got.ok_or_else(fail)?;
        let a = Allocation {
            device: dev.name.clone(),
            phys,
            size,
            node: mem.node_of(phys).unwrap_or(0),
            served,
            zone: if gfp.dma {
                "GFP_DMA"
            } else if gfp.dma32 {
                "GFP_DMA32"
            } else {
                ""
            },
            managed,
        };
        self.live.push(a.clone());
        Ok(a)
    }

    /// `dma_free_contiguous()`: to the area of the page's node, the default area, or the page
    /// allocator (`__free_pages(page, get_order(size))`).
    fn free_pages(
        &mut self,
        mem: &mut PhysMem,
        phys: PhysAddr,
        size: u64,
    ) -> Result<(), CoherentError> {
        let node = mem.node_of(phys).unwrap_or(0);
        if self.cma.release(node, phys, size)?.is_some() {
            return Ok(());
        }
        let block = PAGE << get_order(size);
        mem.free(phys, block).map_err(|_| CoherentError::BadFree {
            device: String::new(),
            phys,
        })
    }

    /// `dma_free_coherent(dev, size, vaddr, handle)`: where the memory went back to.
    pub fn free(
        &mut self,
        mem: &mut PhysMem,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
    ) -> Result<Served, CoherentError> {
        let size = size.max(1).next_multiple_of(PAGE);
        let Some(i) = self
            .live
            .iter()
            .position(|a| a.device == dev.name && a.phys == phys && a.size == size)
        else {
            return Err(CoherentError::BadFree {
                device: dev.name.clone(),
                phys,
            });
        };
        let a = self.live.remove(i);
        let node = mem.node_of(phys).unwrap_or(0);
        match self.cma.release(node, phys, size)? {
            Some(area) => Ok(Served::Area(area)),
            None => {
                mem.free(phys, PAGE << get_order(size))
                    .map_err(|_| CoherentError::BadFree {
                        device: a.device,
                        phys,
                    })?;
                Ok(Served::PageAllocator)
            }
        }
    }

    /// `devres_release_all()` at driver detach: every managed allocation of `dev`, newest
    /// first; how many were freed.
    pub fn devres_release_all(
        &mut self,
        mem: &mut PhysMem,
        dev: &Device,
    ) -> Result<usize, CoherentError> {
        let managed: Vec<Allocation> = self
            .live
            .iter()
            .rev()
            .filter(|a| a.managed && a.device == dev.name)
            .cloned()
            .collect();
        for a in &managed {
            self.free(mem, dev, a.phys, a.size)?;
        }
        Ok(managed.len())
    }
}
