//! The device a mapping is made for.
//!
//! Kernel counterpart: the DMA-relevant fields of `struct device` — `dma_coherent`
//! (`dev_is_dma_coherent()`), `dma_mask` / `coherent_dma_mask`, `numa_node` (`dev_to_node()`),
//! `dma_io_tlb_mem->force_bounce` (`is_swiotlb_force_bounce()`), and from `dma_parms` the
//! `min_align_mask` (`dma_get_min_align_mask()`) and `segment_boundary_mask`
//! (`dma_get_seg_boundary()`).
//!
//! The segment boundary a device reports depends on the release where nothing set it: setup
//! resolves `seg_boundary_mask` once, from what the bus or driver set
//! (`dma_parms_seg_boundary`, as the PCI core does for every PCI device) or else the release's
//! default ([`SegBoundary`]).
//!
//! Invariant: `dma_mask` and `seg_boundary_mask` are masks of the form `2^n - 1` (the kernel's
//! `DMA_BIT_MASK(n)`).

/// A DMA master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    /// Snoops CPU caches (`dma-coherent` in the device tree): no cache maintenance needed.
    pub coherent: bool,
    pub dma_mask: u64,
    /// `None` is the kernel's `NUMA_NO_NODE`.
    pub numa_node: Option<u32>,
    /// Every streaming mapping of this device goes through swiotlb, reachable or not (a
    /// restricted-DMA pool, or confidential computing).
    pub force_bounce: bool,
    /// Low address bits a bounce buffer must share with the original (NVMe sets 4 KiB - 1).
    pub min_align_mask: u64,
    /// `dma_get_seg_boundary()`: a single mapping must not cross a boundary of this size. Set
    /// by setup from `dma_parms_seg_boundary` or the release's [`SegBoundary`] default.
    pub seg_boundary_mask: u64,
    /// What the bus or driver set with `dma_set_seg_boundary()` (`None`: nothing, so the
    /// release's default applies).
    pub dma_parms_seg_boundary: Option<u64>,
}

/// `dma_get_seg_boundary()` of a device whose `dma_parms` carry no boundary — the
/// `seg_boundary` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegBoundary {
    /// Up to 5.9: `DMA_BIT_MASK(32)`.
    Bits32,
    /// 5.10 ("dma-mapping: set default segment_boundary_mask to ULONG_MAX"): `ULONG_MAX`.
    UlongMax,
}

impl SegBoundary {
    pub fn mask(self) -> u64 {
        match self {
            SegBoundary::Bits32 => Device::bit_mask(32),
            SegBoundary::UlongMax => u64::MAX,
        }
    }
}

impl crate::types::Choice for SegBoundary {
    const ALL: &'static [Self] = &[SegBoundary::Bits32, SegBoundary::UlongMax];
    fn name(self) -> &'static str {
        match self {
            SegBoundary::Bits32 => "32-bit",
            SegBoundary::UlongMax => "ulong-max",
        }
    }
}

/// The boundary `pci_device_add()` sets for every PCI device, in every modelled release.
pub const PCI_SEG_BOUNDARY: u64 = 0xffff_ffff;

impl Device {
    /// `DMA_BIT_MASK(bits)`.
    pub fn bit_mask(bits: u32) -> u64 {
        if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        }
    }

    pub fn new(name: &str, coherent: bool, mask_bits: u32) -> Device {
        Device {
            name: name.to_string(),
            coherent,
            dma_mask: Device::bit_mask(mask_bits),
            numa_node: None,
            force_bounce: false,
            min_align_mask: 0,
            seg_boundary_mask: Device::bit_mask(32),
            dma_parms_seg_boundary: None,
        }
    }

    /// The device as setup leaves it under a release whose default boundary is `default`:
    /// `dma_get_seg_boundary()` answers what the bus or driver set, else the default.
    pub fn with_default_seg_boundary(mut self, default: SegBoundary) -> Device {
        self.seg_boundary_mask = self.dma_parms_seg_boundary.unwrap_or(default.mask());
        self
    }

    /// `dev_is_dma_coherent()`.
    pub fn is_dma_coherent(&self) -> bool {
        self.coherent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_masks() {
        assert_eq!(Device::bit_mask(32), 0xffff_ffff);
        assert_eq!(Device::bit_mask(64), u64::MAX);
        assert_eq!(Device::new("d", false, 40).dma_mask, (1u64 << 40) - 1);
    }

    #[test]
    fn the_default_boundary_is_the_releases_unless_the_bus_set_one() {
        let d = Device::new("d", false, 64);
        let b = |d: &Device, r| d.clone().with_default_seg_boundary(r).seg_boundary_mask;
        assert_eq!(b(&d, SegBoundary::Bits32), 0xffff_ffff);
        assert_eq!(b(&d, SegBoundary::UlongMax), u64::MAX);
        let pci = Device {
            dma_parms_seg_boundary: Some(PCI_SEG_BOUNDARY),
            ..d
        };
        assert_eq!(b(&pci, SegBoundary::UlongMax), 0xffff_ffff);
        assert_eq!(b(&pci, SegBoundary::Bits32), 0xffff_ffff);
    }
}
