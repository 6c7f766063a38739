//! dmasim: an executable model of the Linux DMA-mapping stack.
//!
//! The crate runs the stack's algorithms over real data structures and charges every hardware
//! operation they perform through one interface ([`hw::Hw`]) to a calibrated platform model
//! ([`hw::model::Model`]) or to this machine's real hardware ([`hw::host`]). The module tree
//! follows the kernel's: [`dma`] (kernel/dma), [`arch`] (arch/*/mm), with iommu, swiotlb and CMA to
//! come beside them.

pub mod arch;
pub mod calibrate;
pub mod device;
pub mod dma;
pub mod hostbench;
pub mod hw;
pub mod input;
pub mod mm;
pub mod platform;
pub mod policy;
pub mod published;
pub mod report;
pub mod reproduce;
pub mod scatterlist;
pub mod scenario;
pub mod types;
