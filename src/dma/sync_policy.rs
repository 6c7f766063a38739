//! When cache maintenance is waited for: after every region, or once per call.
//!
//! Kernel counterpart: the 7.1 split of `arch_sync_dma_for_*()` into issue-only helpers plus
//! `arch_sync_dma_flush()` (kernel/dma/direct.h, kernel/dma/direct.c, `CONFIG_ARCH_HAS_BATCHED_DMA_SYNC`).
//!
//! - [`PerEntry`] (≤ 7.0): each region's maintenance ends in its own barrier (`dcache_clean_poc`
//!   ends in `dsb sy`), so a scatter-gather walk waits once per entry.
//! - [`Batched`] (7.1): regions only issue (`dcache_clean_poc_nosync`); the call ends with one
//!   `arch_sync_dma_flush()` for a non-coherent device.
//!
//! Invariant: either way, everything issued in a call has completed when the call returns.

use crate::arch::ArchDma;
use crate::hw::Hw;
use crate::types::{DmaDirection, PhysAddr};
use std::fmt::Debug;

pub trait SyncPolicy: Debug {
    fn name(&self) -> &'static str;
    /// Maintenance for one region handed to the device.
    fn for_device(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    );
    /// Maintenance for one region handed back to the CPU.
    fn for_cpu(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    );
    /// End of a call on a non-coherent device, after all its regions.
    fn end_of_call(&self, hw: &mut dyn Hw, arch: &dyn ArchDma);
}

#[derive(Debug, Clone, Copy, Default)]
pub struct PerEntry;

#[derive(Debug, Clone, Copy, Default)]
pub struct Batched;

impl SyncPolicy for PerEntry {
    fn name(&self) -> &'static str {
        "per-entry"
    }
    fn for_device(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_device(hw, paddr, size, dir, true);
    }
    fn for_cpu(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_cpu(hw, paddr, size, dir, true);
    }
    fn end_of_call(&self, _hw: &mut dyn Hw, _arch: &dyn ArchDma) {}
}

impl SyncPolicy for Batched {
    fn name(&self) -> &'static str {
        "batched"
    }
    fn for_device(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_device(hw, paddr, size, dir, false);
    }
    fn for_cpu(
        &self,
        hw: &mut dyn Hw,
        arch: &dyn ArchDma,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        arch.sync_for_cpu(hw, paddr, size, dir, false);
    }
    fn end_of_call(&self, hw: &mut dyn Hw, arch: &dyn ArchDma) {
        arch.flush(hw);
    }
}

/// The `sync` policy: which of the two completion rules a release has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncKind {
    /// ≤ 7.0: a barrier after every region.
    PerEntry,
    /// 7.1: issue per region, one `arch_sync_dma_flush()` per call.
    Batched,
}

impl crate::types::Choice for SyncKind {
    const ALL: &'static [Self] = &[SyncKind::PerEntry, SyncKind::Batched];
    fn name(self) -> &'static str {
        match self {
            SyncKind::PerEntry => "per-entry",
            SyncKind::Batched => "batched",
        }
    }
}

impl SyncKind {
    /// The implementation, chosen once at setup.
    pub fn policy(self) -> Box<dyn SyncPolicy> {
        match self {
            SyncKind::PerEntry => Box::new(PerEntry),
            SyncKind::Batched => Box::new(Batched),
        }
    }
}
