//! Driver models: what a real driver does with the DMA API, driven by a workload.
//!
//! Kernel counterpart: drivers/ — each model follows one driver's calls of one release. A driver
//! takes a typed configuration and the device's [`crate::dma::mapping::DmaApi`] as setup built
//! it; it never reads a scenario.

pub mod ixgbe;
pub mod pl_dma;
