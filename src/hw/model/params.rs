//! What the Model charges from, resolved from a platform profile: per-operation costs, the
//! SMMU's, the cache model's shape, the NUMA machine's line transfers.
//!
//! Kernel counterpart: none.

use super::*;
/// The functional cache model's shape and its writeback costs, from `[cache_model]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheModelParams {
    /// Levels innermost first: the L1 from `[cache]`, the outer cache from `[outer_cache]`.
    pub hierarchy: HierarchySpec,
    /// Picoseconds to write one dirty line out of each level (L1 into the next level, L2 to
    /// memory), by level index.
    pub writeback_ps: [u64; 2],
}

/// Cost of one cache-maintenance operation per line, in picoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaintCost {
    pub issue_ps: u64,
    pub latency_ps: u64,
    pub interval_ps: u64,
}

/// Which SMMU architecture the profile describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmmuKind {
    /// Arm MMU-500 or another SMMUv1/v2: register-programmed invalidation (drivers/iommu/arm/arm-smmu).
    #[default]
    Mmu500,
    /// SMMUv3: command queue in memory (drivers/iommu/arm/arm-smmu-v3).
    SmmuV3,
}

/// Whose driver implementation runs the SMMU (`arm_smmu_impl_init()` picks it from the device
/// tree's compatible string). Some kernel choices depend on it: 5.15's
/// `flush_walk_prefer_tlbiasid` is set only by Qualcomm's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmmuImpl {
    /// Arm's own (`arm,mmu-500`, `arm,smmu-v3`): the driver's defaults.
    #[default]
    Arm,
    /// Qualcomm's arm-smmu-qcom.c (`qcom,*-smmu-500`).
    Qcom,
}

impl SmmuImpl {
    pub const NAMES: &[&str] = &["arm", "qcom"];

    pub fn parse(s: &str) -> Option<SmmuImpl> {
        match s {
            "arm" => Some(SmmuImpl::Arm),
            "qcom" => Some(SmmuImpl::Qcom),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SmmuImpl::Arm => "arm",
            SmmuImpl::Qcom => "qcom",
        }
    }
}

/// SMMU costs, in picoseconds. CPU-side costs stall the CPU; SMMU-side costs occupy the SMMU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SmmuParams {
    pub kind: SmmuKind,
    /// The driver implementation (`[smmu] impl`).
    pub imp: SmmuImpl,
    /// SMMUv3.2 range invalidation (`ARM_SMMU_FEAT_RANGE_INV`).
    pub range_inv: bool,
    /// The table walker snoops CPU caches (`[smmu] coherent_walk`): the default of every
    /// `[iommu]` domain on this platform.
    pub coherent_walk: bool,
    /// CPU: one posted register write (TLBIVA, TLBIVAL, TLBIASID, TLBSYNC, CMDQ producer index).
    pub mmio_write_ps: u64,
    /// CPU: one register read round trip (TLBSTATUS).
    pub mmio_read_ps: u64,
    /// SMMU: process one by-VA invalidation (TLBIVA/TLBIVAL, CMD_TLBI_NH_VA).
    pub tlbi_va_ps: u64,
    /// SMMU: process one by-ASID invalidation (TLBIASID, CMD_TLBI_NH_ASID).
    pub tlbi_asid_ps: u64,
    /// SMMU: from the last prior invalidation's completion to the sync's (TLBSYNC, CMD_SYNC).
    pub sync_ps: u64,
    /// CPU: write one 16-byte command into the SMMUv3 queue.
    pub cmdq_write_ps: u64,
}

/// Cost of a CPU copy (`memcpy`): a fixed part per call plus a part per byte. The per-byte part is
/// kept in femtoseconds because a streaming copy moves a byte in well under a picosecond.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyCost {
    pub call_ps: u64,
    pub per_byte_fs: u64,
}

impl CopyCost {
    /// Picoseconds to copy `bytes`.
    pub fn ps(&self, bytes: u64) -> u64 {
        let per_byte = (u128::from(bytes) * u128::from(self.per_byte_fs)).div_ceil(1000);
        self.call_ps
            .saturating_add(u64::try_from(per_byte).unwrap_or(u64::MAX))
    }
}

/// Outer-cache (PL310) costs, in picoseconds of CPU time. A by-PA line operation is atomic on
/// the PL310: the controller takes the next register write only once the previous operation has
/// finished, so a run of writes costs the CPU one full operation per line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OuterParams {
    /// Per line, by [`CacheOp`]: one `L2X0_{CLEAN,INV,CLEAN_INV}_LINE_PA` write and its operation.
    pub line_ps: [u64; 3],
    /// One `CACHE_SYNC` write, until the controller has drained.
    pub sync_ps: u64,
    /// Per line of the cache walked by a whole-cache operation by way, by [`CacheOp`] (only
    /// clean and clean+invalidate are done by way on the DMA paths): the CPU polls the way
    /// register until the controller has visited every line.
    pub way_line_ps: [u64; 3],
}

/// Everything the Model charges from, resolved from a profile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelParams {
    pub line_bytes: u64,
    pub maint: [Option<MaintCost>; 3],
    pub barrier_ps: u64,
    /// `wmb()` (`DSB ST`); `None` when the profile has no `barrier.wmb`, and a scenario that
    /// issues one (any with an `[iommu]` domain) was refused up front (`Profile::require_wmb`).
    pub wmb_ps: Option<u64>,
    /// A line another core wrote last moved to this one, on a machine without [`NumaLines`]
    /// (`cache.line_transfer`); `None`: such lines move free.
    pub line_transfer_ps: Option<u64>,
    pub sw: BTreeMap<String, u64>,
    /// `None` when the profile has no `[smmu]` section: SMMU operations then cost nothing but
    /// are still counted.
    pub smmu: Option<SmmuParams>,
    /// `None` when the profile has no `[memory.copy]`: copies are then counted but free, and a
    /// scenario that bounces should have been refused up front (`Profile::require_copy`).
    pub copy: Option<CopyCost>,
    /// `None` when the profile has no `[outer_cache]`: an architecture that drives one (ARMv7
    /// with a PL310) is then set up without it, as the kernel is when no L2C was probed.
    pub outer: Option<OuterParams>,
    /// `None` when the profile has no `[cache_model]`: maintenance is then priced by operation
    /// alone, whatever the lines hold.
    pub caches: Option<CacheModelParams>,
    /// `None` when the profile has no `[memory_type.*]`: a program's accesses cost nothing, and
    /// a workload that makes them was refused up front.
    pub mem: Option<crate::hw::memory::MemCosts>,
    /// One dirty line's write-back through its node's DRAM write channel, in ps
    /// (`memory.write_bandwidth_mb_s`, rounded up); `None`: write-backs move at issue rate.
    pub dram_write_ps: Option<u64>,
}

impl ModelParams {
    pub fn maint(&self, op: CacheOp) -> Option<MaintCost> {
        self.maint[op as usize]
    }
}

/// Where the SMMUv3 command queue's lines travel on a NUMA machine: each node's memory, the
/// nodes of the running CPU and of the SMMU, and what one cache-line transfer costs between an
/// initiator's node and a line's home node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NumaLines {
    /// `(base, size, node)` of each node's memory.
    pub memory: Vec<(u64, u64, u32)>,
    /// The node of the CPU that issues commands and polls for their completion.
    pub cpu_node: u32,
    pub smmu_node: u32,
    /// `line_ps[initiator node][home node]`.
    pub line_ps: Vec<Vec<u64>>,
}

impl NumaLines {
    pub(super) fn node_of(&self, phys: u64) -> Option<u32> {
        self.memory
            .iter()
            .find(|(b, s, _)| phys >= *b && phys - b < *s)
            .map(|t| t.2)
    }

    pub(super) fn line(&self, from: u32, home: u32) -> u64 {
        self.line_ps
            .get(from as usize)
            .and_then(|r| r.get(home as usize))
            .copied()
            .unwrap_or(0)
    }
}
