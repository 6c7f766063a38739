//! ARMv7 page protections and the memory types they give a mapping.
//!
//! Kernel counterpart: arch/arm/include/asm/pgtable.h of 3.16–4.0 (`pgprot_noncached`,
//! `pgprot_writecombine`, `pgprot_dmacoherent`, `pgprot_device`) and arch/arm/mm/dma-mapping.c's
//! `arm_dma_mmap` / `__get_dma_pgprot`, which maps coherent memory to user space with
//! `remap_pfn_range` and the protection `__get_dma_pgprot` computes.
//!
//! What it models: with `CONFIG_ARM_DMA_MEM_BUFFERABLE` (default y for ARMv6/v7, which the
//! seed's Zynq kernel is), `pgprot_dmacoherent` is `L_PTE_MT_BUFFERABLE | L_PTE_XN` — Normal
//! non-cacheable, bufferable — the same type as `pgprot_writecombine`; `pgprot_noncached` is
//! `L_PTE_MT_UNCACHED`, strongly-ordered; `pgprot_device` has no ARM definition in these
//! releases — asm-generic's fallback to `pgprot_noncached` (strongly-ordered) arrives in 3.19,
//! and before it a driver calling it does not build (the scenario check refuses it); a vma's own
//! `vm_page_prot` for an ordinary shared mapping is Normal write-back cacheable.
//!
//! Invariants: `remap_pfn_range` installs exactly the protection it is given: a user mapping's
//! type is its `prot`'s, whatever other mappings of the same memory have. So
//! `dma_mmap_coherent` and a driver's own `remap_pfn_range` with the same protection give the
//! same type; `remap_pfn_range` with the vma's cacheable `vm_page_prot` gives a cacheable alias
//! of memory the kernel maps non-cacheable (mismatched attributes, which the ARMv7 ARM warns
//! against, A3.5.7) — the model runs it as cached and the result says so.

use crate::hw::memory::MemType;

/// The protection a user mapping is made with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pgprot {
    /// The vma's `vm_page_prot` as mmap set it up: Normal write-back (`PAGE_SHARED`).
    VmPageProt,
    /// `pgprot_dmacoherent(vm_page_prot)`: what `arm_dma_mmap` uses without
    /// `DMA_ATTR_WRITE_COMBINE`.
    DmaCoherent,
    /// `pgprot_writecombine(vm_page_prot)`: `arm_dma_mmap` with `DMA_ATTR_WRITE_COMBINE`.
    WriteCombine,
    /// `pgprot_noncached(vm_page_prot)`.
    NonCached,
    /// `pgprot_device(vm_page_prot)`: on ARM 3.19-4.0, asm-generic's `pgprot_noncached`.
    Device,
}

impl Pgprot {
    pub const NAMES: &[&str] = &[
        "vm_page_prot",
        "dmacoherent",
        "writecombine",
        "noncached",
        "device",
    ];

    pub fn parse(s: &str) -> Option<Pgprot> {
        match s {
            "vm_page_prot" => Some(Pgprot::VmPageProt),
            "dmacoherent" => Some(Pgprot::DmaCoherent),
            "writecombine" => Some(Pgprot::WriteCombine),
            "noncached" => Some(Pgprot::NonCached),
            "device" => Some(Pgprot::Device),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pgprot::VmPageProt => "vm_page_prot",
            Pgprot::DmaCoherent => "pgprot_dmacoherent",
            Pgprot::WriteCombine => "pgprot_writecombine",
            Pgprot::NonCached => "pgprot_noncached",
            Pgprot::Device => "pgprot_device",
        }
    }

    /// The memory type an ARMv7 3.16–4.0 kernel's page tables give this protection.
    pub fn memory_type(self) -> MemType {
        match self {
            Pgprot::VmPageProt => MemType::Cached,
            // L_PTE_MT_BUFFERABLE for both (CONFIG_ARM_DMA_MEM_BUFFERABLE).
            Pgprot::DmaCoherent | Pgprot::WriteCombine => MemType::NormalNc,
            // L_PTE_MT_UNCACHED; pgprot_device is pgprot_noncached (asm-generic, 3.19).
            Pgprot::NonCached | Pgprot::Device => MemType::StronglyOrdered,
        }
    }
}

/// `__get_dma_pgprot(attrs, prot)`: the protection `arm_dma_mmap` (`dma_mmap_coherent`,
/// `dma_mmap_writecombine`) hands `remap_pfn_range`.
pub fn get_dma_pgprot(write_combine: bool) -> Pgprot {
    if write_combine {
        Pgprot::WriteCombine
    } else {
        Pgprot::DmaCoherent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dma_mmap_coherent_and_writecombine_are_the_same_normal_nc_type() {
        assert_eq!(get_dma_pgprot(false).memory_type(), MemType::NormalNc);
        assert_eq!(get_dma_pgprot(true).memory_type(), MemType::NormalNc);
        assert_eq!(Pgprot::NonCached.memory_type(), MemType::StronglyOrdered);
        // ARM has no pgprot_device of its own: asm-generic's is pgprot_noncached.
        assert_eq!(Pgprot::Device.memory_type(), MemType::StronglyOrdered);
        assert_eq!(Pgprot::VmPageProt.memory_type(), MemType::Cached);
        for n in Pgprot::NAMES {
            assert!(Pgprot::parse(n).is_some(), "{n}");
        }
    }
}
