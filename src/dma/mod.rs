//! The DMA-mapping stack: the API front and the implementations behind `dma_map_ops`.
//!
//! Kernel counterpart: kernel/dma/ — mapping.c ([`mapping`]), direct.c and direct.h ([`direct`]),
//! 3.x ARM's own `arm_dma_ops` from arch/arm/mm/dma-mapping.c ([`arm_dma`]),
//! swiotlb.c and its 2012 ancestor lib/swiotlb.c ([`swiotlb`]), and the 7.1 batching of cache
//! maintenance ([`sync_policy`]).
//!
//! [`DmaMapOps`] and the API front take a [`DeviceHw`]: one implementation (iommu-dma) drives an
//! SMMU, and any may be behind the API, so none can be handed a backend without a device side.
//! dma-direct, which needs only the CPU, keeps inherent methods on [`crate::hw::Hw`] for the host.

pub mod arm_dma;
pub mod coherent;
pub mod contiguous;
pub mod direct;
pub mod mapping;
pub mod swiotlb;
pub mod sync_policy;

use crate::device::Device;
use crate::hw::DeviceHw;
use crate::scatterlist::SgTable;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// Why a mapping failed. The kernel returns `DMA_MAPPING_ERROR` (or 0 entries for map_sg); we keep
/// the reason so reports can say it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmaError {
    #[error("DMA mapping error: {0}")]
    MappingError(String),
}

/// `struct dma_map_ops`: what a DMA implementation (dma-direct, iommu-dma) provides. Generic over
/// the backend, so a run's calls reach the Model statically; the implementations a run can put
/// behind the API are the closed set [`crate::setup::DmaOps`]. What the ops' shared state saw is
/// [`crate::stats::Stats`]'s, beside the kernel's methods. Every CPU calls the one object through
/// `&self`, as the kernel calls `dev->dma_ops` through a const pointer: what the CPUs share sits
/// in [`crate::smp`]'s locks and shared lines, what each keeps for itself in a
/// [`crate::smp::PerCpu`].
pub trait DmaMapOps: crate::stats::Stats {
    fn name(&self) -> &'static str;
    fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError>;
    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    );
    /// Returns the number of mapped entries (`nents`).
    fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError>;
    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    );
    fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    );
    fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    );
    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    );
    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    );
    /// `dma_mapping_error()` → `ops->mapping_error` where an implementation has one (2012
    /// swiotlb's `swiotlb_dma_mapping_error`); otherwise the comparison with `DMA_MAPPING_ERROR`.
    fn mapping_error<H: DeviceHw>(&self, _hw: &mut H, _dev: &Device, addr: DmaAddr) -> bool {
        addr == DmaAddr::MAPPING_ERROR
    }
    /// When the earliest timer these ops armed expires, in ps on the backend's clock (the
    /// flush queue's `fq_timer`); `None` when none is pending. By default none is.
    fn next_timer_ps(&self) -> Option<u64> {
        None
    }
    /// Run every timer that has expired by the backend's clock, as the timer softirq runs
    /// them on an otherwise idle CPU: for a caller whose CPU idles between calls
    /// ([`crate::hw::Hw::idle_until`]), so that a timer runs when it expires rather than at
    /// the next call. Returns how many ran.
    fn run_timers<H: DeviceHw>(&self, _hw: &mut H) -> u64 {
        0
    }
}
