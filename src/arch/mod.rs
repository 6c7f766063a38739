//! Architecture cache maintenance for non-coherent DMA.
//!
//! Kernel counterparts: `arch_sync_dma_for_device()`, `arch_sync_dma_for_cpu()` and
//! `arch_sync_dma_flush()` (include/linux/dma-map-ops.h) and their implementations:
//! arch/arm64/mm/dma-mapping.c over arch/arm64/mm/cache.S ([`arm64`]); arch/arm/mm/dma-mapping.c
//! over cache-v7.S and the outer cache's cache-l2x0.c for 32-bit ARMv7 ([`arm`]); for host runs on x86-64, a
//! CLFLUSHOPT/CLWB range loop ([`x86`]) — x86 Linux itself never needs this for DMA, but the
//! instructions are what an x86 host can measure.
//!
//! Invariant: `sync_for_*` with `complete = false` only *issues* maintenance (the 7.1 `_nosync`
//! helpers); with `complete = true` it also waits for it (the ≤ 7.0 helpers, ending in DSB).
//! Whether anything is issued follows the architecture's direction rules, never the caller's.

pub mod arm;
pub mod arm64;
pub mod x86;

use crate::hw::{CacheOp, Hw};
use crate::types::{DmaDirection, PhysAddr};
use std::fmt::Debug;

/// What the DMA core asks of the architecture.
pub trait ArchDma: Debug {
    /// CPU → device hand-over (map, sync_for_device).
    fn sync_for_device(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    );
    /// Device → CPU hand-over (unmap, sync_for_cpu).
    fn sync_for_cpu(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    );
    /// `arch_sync_dma_flush()`: wait for everything issued so far.
    fn flush(&self, hw: &mut dyn Hw);
    /// Cache operations this architecture may issue (so a profile can be checked up front).
    fn required_ops(&self) -> &'static [CacheOp];
    fn name(&self) -> &'static str;
}

/// The by-line loop every range operation shares; see [`Hw::by_line_op`].
pub fn by_line_op(
    hw: &mut dyn Hw,
    frame: &'static str,
    op: CacheOp,
    start: PhysAddr,
    size: u64,
    complete: bool,
) {
    hw.by_line_op(frame, op, start, size, complete);
}
