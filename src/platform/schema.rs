//! The profile file as TOML gives it: every section and key, each value with its source.
//!
//! Kernel counterpart: none.
//!
//! Invariants: unknown keys are refused (`deny_unknown_fields`); a value's place in the file is
//! kept (`Spanned`) so a later check can name its line.

use super::*;

/// A plain value with its source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub value: Spanned<f64>,
    pub source: Spanned<String>,
}

/// A time cost, given either in nanoseconds or in CPU cycles, with its source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cost {
    pub ns: Option<Spanned<f64>>,
    pub cycles: Option<Spanned<f64>>,
    pub source: Spanned<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintSpec {
    /// CPU time to issue the operation for one line.
    pub issue: Cost,
    /// From issue until the line's operation has completed at the point of coherency.
    pub latency: Cost,
    /// Minimum spacing of completions (the memory system's retire rate). Optional: 0 if absent.
    pub interval: Option<Cost>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    pub line_bytes: Param,
    /// L1 data cache size per CPU, in KiB. Optional: only the cache model's later users need it;
    /// when given, a power of two.
    pub size_kib: Option<Param>,
    /// L1 data cache associativity. Optional; when given, a power of two from 1 to 64.
    pub ways: Option<Param>,
    pub clean: Option<MaintSpec>,
    pub inval: Option<MaintSpec>,
    pub clean_inval: Option<MaintSpec>,
    /// A line another core wrote last moved to this one (core-to-core): what a lock or an
    /// atomic index costs when CPUs take turns at it, on a platform without a `[numa]`
    /// topology (which prices it per pair of nodes). Optional: without either, lines move free.
    pub line_transfer: Option<Cost>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierSpec {
    pub cost: Cost,
    /// `wmb()` (arm64 `DSB ST`): io-pgtable's map and arm-smmu's invalidations issue it.
    /// Optional: only scenarios with an `[iommu]` domain need it.
    pub wmb: Option<Cost>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformSpec {
    pub name: String,
    pub description: String,
    pub arch: Arch,
    pub cpu_freq_mhz: Param,
    /// CPUs that share a workload which spreads over cores (packet forwarding: one receive queue
    /// per CPU). Optional: only such workloads need it.
    pub cpus: Option<Param>,
}

/// Which SMMU the platform has (`[smmu] kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum SmmuKindSpec {
    #[serde(rename = "mmu-500")]
    Mmu500,
    #[serde(rename = "smmu-v3")]
    SmmuV3,
}

/// The optional `[smmu]` section: the IOMMU in front of the DMA masters and what its operations
/// cost. CPU-side costs (`mmio_write`, `mmio_read`, `cmdq_write`) stall the CPU; SMMU-side costs
/// (`tlbi_va`, `tlbi_asid`, `sync`) occupy the SMMU and are seen by the CPU only through polling.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmmuSpec {
    pub kind: SmmuKindSpec,
    /// Architecture version: `"2"` for MMU-500; `"3.0"`, `"3.1"`, `"3.2"`, ... for SMMUv3 (3.2
    /// adds range invalidation).
    pub version: Option<Spanned<String>>,
    /// The driver implementation the kernel picks for it: `"arm"` (default) or `"qcom"`.
    #[serde(rename = "impl")]
    pub implementation: Option<Spanned<String>>,
    pub source: Spanned<String>,
    pub mmio_write: Cost,
    pub mmio_read: Cost,
    pub tlbi_va: Cost,
    pub tlbi_asid: Cost,
    pub sync: Cost,
    /// SMMUv3 only: CPU time to write one 16-byte command into the queue.
    pub cmdq_write: Option<Cost>,
    /// Whether the SMMU's table walker snoops the CPU caches (SMMUv3 `IDR0.COHACC`, the IORT's
    /// or the device tree's `dma-coherent` on the SMMU): io-pgtable then cleans no PTE.
    pub coherent_walk: FlagParam,
}

/// Which outer cache the platform has (`[outer_cache] kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum OuterKindSpec {
    /// Arm's L2C-310 (PL310), driven by arch/arm/mm/cache-l2x0.c.
    #[serde(rename = "pl310")]
    Pl310,
}

/// The optional `[outer_cache]` section (ARMv7 only): an L2 cache controller outside the CPU,
/// maintained by physical address through its registers, and what each register write costs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OuterCacheSpec {
    pub kind: OuterKindSpec,
    /// RTL revision from the `CACHE_ID` register, e.g. `"r3p2"`: it decides which errata
    /// workarounds the kernel installs.
    pub revision: Spanned<String>,
    pub source: Spanned<String>,
    /// Size in KiB (a power of two).
    pub size_kib: Param,
    /// Associativity (a power of two from 1 to 16).
    pub ways: Param,
    /// One `L2X0_CLEAN_LINE_PA` write and the line operation behind it.
    pub clean_line: Cost,
    /// One `L2X0_INV_LINE_PA` write and its operation.
    pub inval_line: Cost,
    /// One `L2X0_CLEAN_INV_LINE_PA` write and its operation.
    pub clean_inval_line: Cost,
    /// One `L2X0_CACHE_SYNC` write, until the controller has drained.
    pub sync: Cost,
    /// Per line of the cache walked by a clean by way (`L2X0_CLEAN_WAY`, the 3.14/3.15
    /// `l2x0_clean_all` behind a clean of at least the cache's size).
    pub clean_way_line: Cost,
    /// Per line walked by a clean-and-invalidate by way (`L2X0_CLEAN_INV_WAY`, `l2x0_flush_all`).
    pub clean_inval_way_line: Cost,
}

/// One `[memory_type.<name>]` section: its costs by key.
pub type MemoryTypeCosts = BTreeMap<Spanned<String>, Cost>;

/// A yes/no property with its source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagParam {
    pub value: Spanned<bool>,
    pub source: Spanned<String>,
}

/// How the L1 and the outer cache share lines (`[cache_model] inclusion`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum InclusionSpec {
    /// Neither inclusive nor exclusive: a Cortex-A9 with a PL310 outside exclusive mode.
    #[serde(rename = "neither")]
    Neither,
    /// The L2 holds every L1 line (not modelled yet: refused).
    #[serde(rename = "inclusive")]
    Inclusive,
    /// A line is in the L1 or the L2, never both (PL310 and A9 both in exclusive mode; not
    /// modelled yet: refused).
    #[serde(rename = "exclusive")]
    Exclusive,
}

/// Replacement policy (`[cache_model] replacement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum ReplacementSpec {
    /// Lowest free way, else round-robin per set.
    #[serde(rename = "round_robin")]
    RoundRobin,
}

/// The optional `[cache_model]` section: run a functional model of the CPU caches (each line
/// absent, clean or dirty), so maintenance is priced by what the lines hold. Its levels are the
/// L1 of `[cache]` (which then needs `size_kib` and `ways`) and the `[outer_cache]`, if any.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheModelSpec {
    pub inclusion: Spanned<InclusionSpec>,
    pub replacement: Spanned<ReplacementSpec>,
    /// Why this inclusion and replacement (a citation or an assumption).
    pub source: Spanned<String>,
    /// Whether a write miss allocates in the L1.
    pub l1_write_allocate: FlagParam,
    /// Whether a write (a store that missed a non-allocating L1, or a dirty L1 line written
    /// back) allocates in the outer cache. Required with `[outer_cache]`.
    pub l2_write_allocate: Option<FlagParam>,
    /// Writing one dirty L1 line out (into the outer cache, or to memory without one).
    pub l1_writeback: Cost,
    /// Writing one dirty outer-cache line to memory. Required with `[outer_cache]`.
    pub l2_writeback: Option<Cost>,
    /// Whether the L1 prefetches the next line of a sequential stream of CPU accesses (priced
    /// by `[memory_type.cached]`'s fills). Optional: no prefetch if absent.
    pub l1_prefetch: Option<FlagParam>,
    /// How many line fills the L1 keeps in flight at most (its linefill buffers). Optional: 1
    /// if absent, every fill then waiting for the one before it.
    pub linefill_buffers: Option<Param>,
}

/// The outer-cache revisions whose kernel code dmasim models: those for which 3.16+'s
/// `l2c310_fixup` installs no range-operation workaround (errata 588369, 727915 and 753970 all
/// predate r3p1).
pub const OUTER_REVISIONS: &[&str] = &["r3p1", "r3p2", "r3p3"];

/// A CPU copy (`memcpy`, as swiotlb's bounce does it): a fixed cost per call plus a cost per byte.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopySpec {
    /// Per copy, whatever its length (call, setup, tail handling). Optional: 0 if absent.
    pub call: Option<Cost>,
    /// Per byte copied (`ns` may be fractional: 0.05 ns per byte is 20 GB/s).
    pub per_byte: Cost,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    pub copy: Option<CopySpec>,
    /// Each node's write bandwidth to its own DRAM, MB/s (10^6 bytes per second), more than 0:
    /// the write channel the write-backs of cache maintenance queue for.
    pub write_bandwidth_mb_s: Option<Param>,
}

/// The largest DRAM bandwidth a profile may give per node, in MB/s (10 TB/s).
pub const MAX_DRAM_MB_S: f64 = 1e7;

/// The optional `[acp]` section: a coherent port into the CPU's cache hierarchy for DMA masters
/// (the Zynq-7000's Accelerator Coherency Port), whose traffic the SCU snoops, so a device on it
/// is `dma-coherent` and needs no cache maintenance; its own bandwidth limits such a device.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpSpec {
    /// The port's bandwidth, MB/s (10^6 bytes per second), more than 0.
    pub bandwidth_mb_s: Param,
}

/// The largest port bandwidth a profile may give, in MB/s (1 TB/s).
pub const MAX_PORT_MB_S: f64 = 1e6;

/// Instructions per group of lib/swiotlb.c (Linux 3.6/3.8) as the platform's compiler emits it
/// (`[code.swiotlb_2012]`): the groups the functions the 3.8 series changed execute on the
/// unbounced path. Each is a whole number with its source (how it was counted).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Swiotlb2012Code {
    /// Frame set-up and return.
    pub frame: Param,
    /// `BUG_ON(dir == DMA_NONE)`.
    pub bug_on_dir: Param,
    /// One value kept in a callee-saved register across an out-of-line call.
    pub saved_reg: Param,
    /// An out-of-line call: the argument and the call.
    pub call: Param,
    /// Using a predicate's result.
    pub test_result: Param,
    /// `is_swiotlb_buffer()` inlined (3.8).
    pub range_check: Param,
    /// `swiotlb_dma_mapping_error()`'s comparison.
    pub compare_result: Param,
    /// Values `swiotlb_sync_single` (3.6) keeps live across its `is_swiotlb_buffer` call.
    pub sync_single_live: Param,
    /// Values `unmap_single` (3.6) keeps live across its `is_swiotlb_buffer` call.
    pub unmap_single_live: Param,
    /// Values `swiotlb_dma_mapping_error` (3.6) keeps live across its `__phys_addr` call.
    pub mapping_error_live: Param,
}

impl Swiotlb2012Code {
    /// Every group with its key, in file order.
    pub fn groups(&self) -> [(&'static str, &Param); 10] {
        [
            ("frame", &self.frame),
            ("bug_on_dir", &self.bug_on_dir),
            ("saved_reg", &self.saved_reg),
            ("call", &self.call),
            ("test_result", &self.test_result),
            ("range_check", &self.range_check),
            ("compare_result", &self.compare_result),
            ("sync_single_live", &self.sync_single_live),
            ("unmap_single_live", &self.unmap_single_live),
            ("mapping_error_live", &self.mapping_error_live),
        ]
    }

    /// A group's count (checked at parse to be a whole number).
    pub fn count(p: &Param) -> u64 {
        *p.value.get_ref() as u64
    }
}

/// The optional `[code]` section: instruction counts of kernel code as compiled for the platform,
/// for the functions the model prices per instruction.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSpec {
    pub swiotlb_2012: Option<Swiotlb2012Code>,
}

/// The most instructions one group may count.
pub const MAX_GROUP_INSNS: f64 = 1000.0;

/// The profile file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub platform: PlatformSpec,
    pub cache: CacheSpec,
    pub barrier: BarrierSpec,
    /// Optional: only scenarios that copy (swiotlb bounce buffers) need it.
    pub memory: Option<MemorySpec>,
    /// Named software costs, by [`SwKey`] name; a key that names none is refused.
    #[serde(default)]
    pub sw: BTreeMap<Spanned<String>, Cost>,
    /// Optional: instruction counts for the costs `[sw]` gives per instruction.
    pub code: Option<CodeSpec>,
    pub smmu: Option<SmmuSpec>,
    /// ARMv7 only: the outer (L2) cache controller.
    pub outer_cache: Option<OuterCacheSpec>,
    /// Optional: an accelerator coherency port for DMA masters (Zynq-7000's ACP).
    pub acp: Option<AcpSpec>,
    /// Optional: a functional model of the caches (line states) behind the maintenance costs.
    pub cache_model: Option<CacheModelSpec>,
    /// Optional: the NUMA topology (nodes, SLIT, latencies, where the SMMUs and devices sit).
    /// Without it the platform is one node, as before.
    pub numa: Option<numa::NumaSpec>,
    /// Optional: what a program's loads and stores cost, per memory type (`cached`,
    /// `normal_nc`, `device`, `strongly_ordered`): `read_N` / `write_N` per access of N bytes,
    /// and for `cached` the L1 miss's `fill_l2` and `fill_memory`.
    pub memory_type: Option<BTreeMap<Spanned<String>, MemoryTypeCosts>>,
    /// Optional: the board measurements `dmasim fit` fitted the profile to, which `dmasim
    /// reproduce --platform FILE` sets beside the model's predictions. Read by nothing else.
    pub fit: Option<FitSpec>,
}

/// The `[fit]` section: how the measured runs were made, and each row.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitSpec {
    /// The release the board ran.
    pub kernel: Spanned<String>,
    /// The benchmark's device was behind the IOMMU, and cache-coherent.
    pub iommu: bool,
    pub coherent: bool,
    #[serde(default)]
    pub row: Vec<FitRowSpec>,
}

/// One measured row: where it was read, the tool run, what it measured and the value.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRowSpec {
    /// `FILE:LINE` of the measurement.
    pub at: Spanned<String>,
    /// The tool's command line.
    pub run: Spanned<String>,
    /// `map_latency_us`, `unmap_latency_us` or a function's name (ns).
    pub metric: Spanned<String>,
    pub value: Spanned<f64>,
}
