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
//! For a device behind an IOMMU, the memory of `iommu_dma_alloc()` (drivers/iommu/dma-iommu.c
//! of 5.10 and 6.6) comes from here too: [`DmaCoherent::alloc_contiguous_pages`]
//! (`iommu_dma_alloc_pages()`: `dma_alloc_contiguous()`, then `alloc_pages_node()` on the
//! device's node, no zone — the IOMMU reaches any page) and [`DmaCoherent::alloc_page_chunks`]
//! (`__iommu_dma_alloc_pages()`, the remapping path: pages in the largest chunks the domain's
//! page sizes allow). The mapping is iommu-dma's ([`crate::iommu::dma_iommu`]).
//! Not yet: a non-coherent device's remap (`arch_dma_prep_coherent`, the atomic pools) and a
//! device's own `dev->cma_area`.
//!
//! Invariants: a live allocation is either a CMA area's or the page allocator's, never both;
//! a free returns it to where it came from; a failed allocation leaves nothing allocated.

use crate::device::Device;
use crate::dma::contiguous::{Contiguous, Gfp, Served, get_order};
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

/// `dma_alloc_attrs()` (kernel/dma/mapping.c, 5.10 and 6.6): the caller's zone flags are
/// cleared ("let the implementation decide on the zone to allocate from"); dma-direct then
/// picks the zone from the device's coherent mask, and iommu-dma needs none.
pub fn dma_alloc_attrs_gfp(gfp: Gfp) -> Gfp {
    Gfp {
        dma: false,
        dma32: false,
        ..gfp
    }
}

/// The coherent allocator of one machine: its CMA areas and the live allocations.
pub struct DmaCoherent {
    pub cma: Contiguous,
    /// The node of the CPU making calls (`numa_mem_id()`), for a device without a node.
    pub cpu_node: u32,
    /// Live allocations by address (they never overlap), each with the sequence number of
    /// its allocation: a free finds its allocation without a scan.
    live: std::collections::BTreeMap<u64, (u64, Allocation)>,
    next_seq: u64,
}

impl DmaCoherent {
    pub fn new(cma: Contiguous, cpu_node: u32) -> DmaCoherent {
        DmaCoherent {
            cma,
            cpu_node,
            live: std::collections::BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Live allocations, oldest first.
    pub fn live(&self) -> Vec<&Allocation> {
        let mut v: Vec<&(u64, Allocation)> = self.live.values().collect();
        v.sort_by_key(|(seq, _)| *seq);
        v.into_iter().map(|(_, a)| a).collect()
    }

    fn keep(&mut self, a: Allocation) {
        self.live.insert(a.phys.0, (self.next_seq, a));
        self.next_seq += 1;
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
        let zone_dma = self.cma.rules.max_zone_phys(mem, dma_bits);
        let zone_dma32 = self.cma.rules.max_zone_phys(mem, 32);
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
        self.keep(a.clone());
        Ok(a)
    }

    /// `iommu_dma_alloc_pages()` (5.10, 6.6) for a device behind an IOMMU: one contiguous
    /// block from `dma_alloc_contiguous()` (the device's node area, then the default area), else
    /// `alloc_pages_node(dev_to_node(dev), gfp, get_order(size))`. Unlike dma-direct no zone is
    /// asked for: the device reaches the memory through the IOMMU, whatever its mask.
    pub fn alloc_contiguous_pages(
        &mut self,
        mem: &mut PhysMem,
        dev: &Device,
        size: u64,
        gfp: Gfp,
    ) -> Result<Allocation, CoherentError> {
        let fail = || CoherentError::NoMemory {
            device: dev.name.clone(),
            size,
        };
        let size = size
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(fail)?;
        let gfp = Gfp {
            dma: false,
            dma32: false,
            ..gfp
        };
        let (phys, served) = match self.cma.alloc(dev.numa_node, size, gfp) {
            Some((p, area)) => (p, Served::Area(area)),
            None => {
                let nid = dev.numa_node.unwrap_or(self.cpu_node);
                let p = mem
                    .alloc_pages_node(nid, get_order(size), None)
                    .map_err(|_| fail())?;
                (p, Served::PageAllocator)
            }
        };
        let a = Allocation {
            device: dev.name.clone(),
            phys,
            size,
            node: mem.node_of(phys).unwrap_or(0),
            served,
            zone: "",
            managed: false,
        };
        self.keep(a.clone());
        Ok(a)
    }

    /// `__iommu_dma_alloc_pages(dev, count, order_mask, gfp)` (5.10, 6.6): the pages of `size`
    /// from `alloc_pages_node(dev_to_node(dev))`, each time in the largest order of
    /// `order_mask` (the domain's page sizes, at most `MAX_ORDER`) that the pages still needed
    /// allow; an order that fails is dropped from the mask for the rest of the call. Never
    /// CMA. On a failure everything taken so far goes back and the call fails. Each chunk is
    /// one [`Allocation`] (the kernel splits it into single pages and frees them one by one;
    /// the pages go back to the same place either way).
    pub fn alloc_page_chunks(
        &mut self,
        mem: &mut PhysMem,
        dev: &Device,
        size: u64,
        order_mask: u64,
    ) -> Result<Vec<Allocation>, CoherentError> {
        let fail = || CoherentError::NoMemory {
            device: dev.name.clone(),
            size,
        };
        let size = size
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(fail)?;
        let nid = dev.numa_node.unwrap_or(self.cpu_node);
        // 5.10: `order_mask &= (2U << MAX_ORDER) - 1` with MAX_ORDER 11; 6.6:
        // `GENMASK(MAX_ORDER, 0)` with MAX_ORDER 10 (its meaning changed in 6.4): orders 0-10
        // in both, as the largest block the buddy allocator hands out is 2^10 pages.
        let mut order_mask = order_mask & ((1 << 11) - 1);
        let mut count = size / PAGE;
        let mut got: Vec<Allocation> = Vec::new();
        while count > 0 {
            order_mask &= (2u64 << count.ilog2()) - 1;
            let mut chunk = None;
            while order_mask != 0 {
                let order = order_mask.ilog2();
                if let Ok(p) = mem.alloc_pages_node(nid, order, None) {
                    chunk = Some((p, order));
                    break;
                }
                order_mask &= !(1 << order);
            }
            let Some((phys, order)) = chunk else {
                for a in got {
                    mem.free(a.phys, a.size).map_err(|_| fail())?;
                }
                return Err(fail());
            };
            let bytes = PAGE << order;
            got.push(Allocation {
                device: dev.name.clone(),
                phys,
                size: bytes,
                node: mem.node_of(phys).unwrap_or(0),
                served: Served::PageAllocator,
                zone: "",
                managed: false,
            });
            count -= 1 << order;
        }
        for a in &got {
            self.keep(a.clone());
        }
        Ok(got)
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
        let ours = self
            .live
            .get(&phys.0)
            .is_some_and(|(_, a)| a.device == dev.name && a.size == size);
        let Some((_, a)) = (if ours {
            self.live.remove(&phys.0)
        } else {
            None
        }) else {
            return Err(CoherentError::BadFree {
                device: dev.name.clone(),
                phys,
            });
        };
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
            .live()
            .into_iter()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::contiguous::CmaBoot;
    use crate::dma::contiguous::{ContiguousRules, NumaCma};
    use crate::mm::cma::CmaRules;
    use crate::mm::physmem::NodeRange;

    const MIB: u64 = 1 << 20;

    /// Two nodes: node 0 of 64 MiB at 0, node 1 of `node1` bytes above it; no CMA.
    fn machine(node1: u64) -> (PhysMem, DmaCoherent) {
        let mut mem = PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(0),
                size: 64 * MIB,
            },
            NodeRange {
                node: 1,
                start: PhysAddr(64 * MIB),
                size: node1,
            },
        ]);
        mem.set_zonelists([(0, vec![0, 1]), (1, vec![1, 0])].into_iter().collect());
        // 6.6's rules on arm64 (policy::contiguous_rules), written out: dma sits below policy.
        let rules = ContiguousRules {
            numa: NumaCma::NumaCma,
            cma: CmaRules {
                min_align: 2 << 20,
                bottom_up_above_4g: true,
            },
            numa_first: true,
            zone_dma_bits: 32,
            default_below_dma32: false,
            zone_from_dram_start: false,
        };
        let none = CmaBoot {
            size_mbytes: 0,
            ..CmaBoot::default()
        };
        let cma = Contiguous::reserve(&mut mem, rules, &none, &[0, 1]);
        (mem, DmaCoherent::new(cma, 0))
    }

    fn dev(node: u32) -> Device {
        Device {
            numa_node: Some(node),
            ..Device::new("d", true, 64)
        }
    }

    #[test]
    fn remap_pages_come_in_the_largest_order_the_mask_and_the_count_allow() {
        let (mut mem, mut c) = machine(64 * MIB);
        // A 4K-granule domain: page sizes 4K, 2M, 1G -> orders 0, 9 (18 is above MAX_ORDER).
        let mask = (4096u64 | (2 * MIB) | (1 << 30)) >> 12;
        let got = c
            .alloc_page_chunks(&mut mem, &dev(1), 4 * MIB + 8192, mask)
            .unwrap();
        let sizes: Vec<u64> = got.iter().map(|a| a.size).collect();
        assert_eq!(sizes, vec![2 * MIB, 2 * MIB, 4096, 4096]);
        assert!(got.iter().all(|a| a.node == 1));
        assert!(got.iter().all(|a| a.served == Served::PageAllocator));
        for a in &got {
            c.free(&mut mem, &dev(1), a.phys, a.size).unwrap();
        }
        assert_eq!(mem.free_bytes(1), 64 * MIB);
    }

    #[test]
    fn a_failed_order_is_dropped_and_the_pages_fall_back_along_the_zonelist() {
        // Node 1 holds 1 MiB: no 2 MiB block anywhere on it; order 9 then comes from node 0,
        // the next node of its zonelist.
        let (mut mem, mut c) = machine(MIB);
        let mask = (4096u64 | (2 * MIB)) >> 12;
        let got = c
            .alloc_page_chunks(&mut mem, &dev(1), 2 * MIB, mask)
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].size, got[0].node), (2 * MIB, 0));
        // Nothing fits: everything taken so far goes back, and the call fails.
        let before = (mem.free_bytes(0), mem.free_bytes(1));
        assert!(
            c.alloc_page_chunks(&mut mem, &dev(1), 128 * MIB, mask)
                .is_err()
        );
        assert_eq!((mem.free_bytes(0), mem.free_bytes(1)), before);
    }

    #[test]
    fn a_free_of_another_devices_memory_is_refused_and_changes_nothing() {
        let (mut mem, mut c) = machine(64 * MIB);
        let a = c
            .alloc(&mut mem, &dev(1), 8192, Gfp::KERNEL, false)
            .unwrap();
        let other = Device {
            name: "other".into(),
            ..dev(1)
        };
        assert!(matches!(
            c.free(&mut mem, &other, a.phys, 8192),
            Err(CoherentError::BadFree { .. })
        ));
        assert!(
            c.free(&mut mem, &dev(1), a.phys, 4096).is_err(),
            "wrong size"
        );
        assert_eq!(c.live().len(), 1);
        assert_eq!(
            c.free(&mut mem, &dev(1), a.phys, 8192).unwrap(),
            Served::PageAllocator
        );
        assert!(c.live().is_empty());
    }

    #[test]
    fn dma_alloc_attrs_clears_the_callers_zone() {
        let g = dma_alloc_attrs_gfp(Gfp {
            dma32: true,
            dma: true,
            ..Gfp::KERNEL
        });
        assert_eq!(g, Gfp::KERNEL);
    }
}
