//! The device a mapping is made for.
//!
//! Kernel counterpart: the DMA-relevant fields of `struct device` — `dma_coherent`
//! (`dev_is_dma_coherent()`), `dma_mask` / `coherent_dma_mask`, `numa_node` (`dev_to_node()`),
//! `dma_io_tlb_mem->force_bounce` (`is_swiotlb_force_bounce()`), and from `dma_parms` the
//! `min_align_mask` (`dma_get_min_align_mask()`) and `segment_boundary_mask`
//! (`dma_get_seg_boundary()`).
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
    /// A single mapping must not cross a boundary of this size (default `DMA_BIT_MASK(32)`).
    pub seg_boundary_mask: u64,
}

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
        }
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
}
