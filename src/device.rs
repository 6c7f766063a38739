//! The device a mapping is made for.
//!
//! Kernel counterpart: the DMA-relevant fields of `struct device` — `dma_coherent`
//! (`dev_is_dma_coherent()`), `dma_mask` / `coherent_dma_mask`, and `numa_node` (`dev_to_node()`).
//!
//! Invariant: `dma_mask` is a mask of the form `2^n - 1` (the kernel's `DMA_BIT_MASK(n)`).

/// A DMA master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    /// Snoops CPU caches (`dma-coherent` in the device tree): no cache maintenance needed.
    pub coherent: bool,
    pub dma_mask: u64,
    /// `None` is the kernel's `NUMA_NO_NODE`.
    pub numa_node: Option<u32>,
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
