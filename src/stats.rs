//! What the state a device's DMA ops share between CPUs saw in a run, for reports.
//!
//! Kernel counterpart: none as an interface — the kernel's own windows onto the same figures are
//! lockstat (`/proc/lock_stat`), swiotlb's debugfs (`io_tlb_used`, `io_tlb_used_hiwater`) and
//! the SMMU drivers' event counters. The kernel's ops tables (`struct dma_map_ops`,
//! `struct iommu_flush_ops`) have no such methods, so neither do [`crate::dma::DmaMapOps`] and
//! [`crate::iommu::IommuFlushOps`]: a layer that owns shared state says what it saw through
//! [`Stats`], beside them.
//!
//! Invariants: reading figures charges nothing and changes nothing; a layer reports its own
//! shared state and what it holds of the layers below it, once.

use crate::smp::LockRecord;

/// What the SMMUv3 command queue saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdqStats {
    pub commands: u64,
    /// Command lists (≤ 5.3: each command is its own).
    pub batches: u64,
    pub syncs: u64,
    /// ≤ 5.3: syncs that found a `CMD_SYNC` last in the queue and waited for it instead.
    pub coalesced: u64,
    /// 5.4: claims of slots, each a `cmpxchg` loop on `llq`.
    pub claims: u64,
    /// 5.4: failed attempts of those loops, each because another CPU wrote `llq` (a claim, the
    /// owner's clearing of the owned flag) between this CPU's read and the line's arrival here;
    /// a claim fails as many times as other CPUs' requests take the line from it first.
    pub cmpxchg_retries: u64,
    /// Batches that would have overrun unconsumed entries (the kernel would wait for space).
    pub overruns: u64,
}

/// What a swiotlb pool holds and saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwiotlbStats {
    pub nslabs: usize,
    pub nareas: usize,
    pub bytes: u64,
    /// Slots in use; `None` while a CPU is inside an area's lock (the table is its until then).
    pub used: Option<usize>,
    /// Per area, the times its lock (3.6: the pool lock) was taken (`None` as for `used`).
    pub area_locks: Option<Vec<u64>>,
}

/// The figures of a layer's shared state: each method answers for the layer and what it holds
/// below it, and a layer without such state keeps the defaults.
pub trait Stats {
    /// What the locks it takes saw so far, by the kernel's names.
    fn lock_records(&self) -> Vec<(&'static str, LockRecord)> {
        Vec::new()
    }
    /// What the SMMU's command queue saw so far, for ops in front of an SMMUv3.
    fn cmdq_stats(&self) -> Option<CmdqStats> {
        None
    }
    /// The swiotlb pool behind these ops, if any.
    fn swiotlb_stats(&self) -> Option<SwiotlbStats> {
        None
    }
}
