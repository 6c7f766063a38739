//! IOMMU scenarios: a domain (granule, input address size, SMMU model) and explicit
//! `iommu_map_sg` / `iommu_unmap` work on it, run on the Model.
//!
//! Kernel counterpart: none as such — this is what a test module calling the iommu core directly
//! does (seed 001's measurement called `iommu_map_sg()` and `iommu_unmap()` on a domain), written
//! down. The work runs through [`crate::iommu::core::IommuDomain`] over Arm LPAE tables and the
//! arm-smmu (MMU-500) or arm-smmu-v3 flush ops, under the release's `walk_flush` and
//! `unmap_split` policies. The format is documented in docs/scenarios.md.
//!
//! Two workload kinds: `iommu_sweep` (for each size, a fresh domain, then `iterations` times
//! `iommu_map_sg` of an sg list of `element`-sized pieces at a fixed IOVA and `iommu_unmap` of the
//! whole range — seed 001's experiment) and `iommu_ops` (an explicit list of iommu core calls —
//! `iommu_map_sg` of generated or explicit sg lists, `iommu_map`, `iommu_unmap`,
//! `iommu_unmap_fast` into one gather and `iommu_iotlb_sync` of it, `iommu_flush_iotlb_all`,
//! `iommu_iova_to_phys` — at given IOVAs or at IOVAs from the allocator, with given physical
//! addresses and `prot`, repeated `iterations` times).
//!
//! Invariants: a scenario that parses has an SMMU model the platform prices, every `of` naming an
//! earlier map, and no address range past 2^64; a sweep also has every size a multiple of the
//! granule and every IOVA range inside the input address space. What the modelled kernel refuses
//! (mapping over a live leaf, a misaligned or out-of-range request, unmapping a hole or part of a
//! block from 6.13) is a result: each operation records what its last call returned as the kernel
//! would return it, the refusal is counted, and the run goes on; never a panic. Each operation's
//! time is the Model clock's advance across it; its counts are the ledger's difference across it,
//! so per-operation figures and the breakdown agree.

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::hw::calls::{StackRow, stack_rows};
use crate::hw::model::{Model, SmmuKind};
use crate::hw::{Counter, Hw};
use crate::input::{InputError, parse_size};
use crate::iommu::arm_smmu_v3::Cmdq;
use crate::iommu::io_pgtable_arm::PgtableShape;
use crate::iommu::iova::IovaDomain;
use crate::iommu::{IommuError, IommuIotlbGather, Prot};
use crate::platform::Profile;
use crate::report::{
    FORMAT_VERSION, HeadDoc, StackDoc, TimeUnit, breakdown_docs, counts_map, header, ns, refusals,
    stack_table, trim_float,
};
pub use crate::setup::{IommuConfig, SmmuModel};
use crate::setup::{Machine, iommu_domain_alloc_with_cmdq, table_bytes, table_memory};
use crate::types::{IovaAddr, PhysAddr};
use serde::Deserialize;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use toml::Spanned;

/// The registry entry of the sweep kind.
pub const SWEEP: super::Kind = super::Kind {
    name: "iommu_sweep",
    summary: "iommu_map_sg + iommu_unmap of each size on a fresh domain (seed 001's experiment)",
    parse: parse_sweep,
};

/// The registry entry of the operation-list kind.
pub const OPS: super::Kind = super::Kind {
    name: "iommu_ops",
    summary: "an explicit list of iommu map and unmap operations",
    parse: parse_ops,
};

/// Workload kinds this module runs.
pub const KINDS: &[&str] = &["iommu_sweep", "iommu_ops"];
/// Largest single mapping a scenario may ask for (the model keeps every PTE).
pub const MAX_MAP: u64 = 64 << 30;
/// Most elements in an explicit sg list.
pub const MAX_SG: usize = 4096;
/// Most operations in an `iommu_ops` list.
pub const MAX_OPS: usize = 1000;
/// Most iterations of an IOMMU workload.
pub const MAX_ITERATIONS: i64 = 10_000;
/// Where the pages being mapped sit (64 GiB up, clear of the page tables); they are never touched.
pub const DATA_BASE: u64 = 0x10_0000_0000;
/// Where the page tables are allocated from.
pub const TABLE_BASE: u64 = 0x8000_0000;
/// Default fixed IOVA of a sweep: 1 GiB, aligned for every block size of every granule below it.
pub const DEFAULT_SWEEP_IOVA: u64 = 1 << 30;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IommuSection {
    granule: Spanned<toml::Value>,
    ias: Spanned<i64>,
    pub(crate) smmu: Option<Spanned<String>>,
    coherent_walk: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepSection {
    kind: Spanned<String>,
    iterations: Spanned<i64>,
    sizes: Option<Spanned<Vec<toml::Value>>>,
    element: Option<Spanned<toml::Value>>,
    layout: Option<Spanned<String>>,
    iova: Option<Spanned<toml::Value>>,
    cpus: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpsSection {
    kind: Spanned<String>,
    iterations: Spanned<i64>,
    cpus: Option<Spanned<i64>>,
    #[serde(default)]
    op: Vec<OpSection>,
    /// Report the page table's shape after each operation.
    pgtable_shape: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpSection {
    op: Spanned<String>,
    iova: Option<Spanned<toml::Value>>,
    size: Option<Spanned<toml::Value>>,
    element: Option<Spanned<toml::Value>>,
    layout: Option<Spanned<String>>,
    name: Option<Spanned<String>>,
    of: Option<Spanned<String>>,
    phys: Option<Spanned<toml::Value>>,
    sg: Option<Spanned<Vec<SgSection>>>,
    prot: Option<Spanned<Vec<String>>>,
    queued: Option<Spanned<bool>>,
}

/// One element of an explicit sg list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SgSection {
    phys: toml::Value,
    size: toml::Value,
}

/// How the pages behind one mapping sit in physical memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// No element is physically next to the one before it: `iommu_map_sg` maps each on its own.
    Scattered,
    /// One physically contiguous run, aligned for the largest block: `iommu_map_sg` maps it with
    /// one `__iommu_map`, using blocks where IOVA alignment allows.
    Contiguous,
}

impl Layout {
    pub fn parse(s: &str) -> Option<Layout> {
        match s {
            "scattered" => Some(Layout::Scattered),
            "contiguous" => Some(Layout::Contiguous),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::Scattered => "scattered",
            Layout::Contiguous => "contiguous",
        }
    }
}

/// An IOVA: fixed, or from the domain's IOVA allocator (`alloc_iova_fast`, size-aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IovaSpec {
    Fixed(u64),
    Alloc,
}

/// Which iommu core call a map operation makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapCall {
    /// `iommu_map_sg()` of an sg list (`op = "map"`).
    MapSg,
    /// `iommu_map()` of one physically contiguous range (`op = "iommu_map"`).
    Map,
}

/// Where the pages of a mapping sit in physical memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phys {
    /// Generated: `element`-sized pieces in the mapping's own window, laid out as `layout`.
    Generated { element: u64, layout: Layout },
    /// One contiguous run from this address (`phys = ...`).
    At(u64),
    /// An explicit sg list: `(physical address, length)` per element (`sg = [...]`).
    Sg(Vec<(u64, u64)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapOp {
    pub name: Option<String>,
    pub call: MapCall,
    pub iova: IovaSpec,
    pub size: u64,
    pub phys: Phys,
    pub prot: Prot,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Map(MapOp),
    /// Unmap `[iova, iova + size)`: `iommu_unmap`, or with `fast = Some(queued)`,
    /// `iommu_unmap_fast` into the run's gather.
    UnmapRange {
        iova: u64,
        size: u64,
        fast: Option<bool>,
    },
    /// Unmap everything the map op at this index mapped (and free its IOVA if allocated).
    UnmapOf {
        index: usize,
        name: String,
        fast: Option<bool>,
    },
    /// `iommu_iotlb_sync()` of the run's gather, which then starts empty.
    IotlbSync,
    /// `iommu_flush_iotlb_all()`.
    FlushIotlbAll,
    /// `iommu_iova_to_phys()` of a fixed IOVA, or of the start of a named mapping.
    IovaToPhys {
        at: IovaAt,
    },
}

/// The IOVA an `iova_to_phys` translates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IovaAt {
    Fixed(u64),
    /// The current IOVA of the named map op.
    Of {
        index: usize,
        name: String,
    },
}

impl Op {
    /// The iommu core call this operation makes: the stable name in reports and JSON.
    pub fn call(&self) -> &'static str {
        match self {
            Op::Map(MapOp {
                call: MapCall::MapSg,
                ..
            }) => "iommu_map_sg",
            Op::Map(MapOp {
                call: MapCall::Map, ..
            }) => "iommu_map",
            Op::UnmapRange { fast: None, .. } | Op::UnmapOf { fast: None, .. } => "iommu_unmap",
            Op::UnmapRange { fast: Some(_), .. } | Op::UnmapOf { fast: Some(_), .. } => {
                "iommu_unmap_fast"
            }
            Op::IotlbSync => "iommu_iotlb_sync",
            Op::FlushIotlbAll => "iommu_flush_iotlb_all",
            Op::IovaToPhys { .. } => "iommu_iova_to_phys",
        }
    }
}

/// `iommu_sweep`: for each size, a fresh domain, then `iterations` times `iommu_map_sg` of an sg
/// list of `element`-sized pieces at a fixed IOVA and `iommu_unmap` of the whole range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    pub sizes: Vec<u64>,
    pub element: u64,
    pub layout: Layout,
    pub iova: u64,
    pub iterations: u32,
    /// CPUs running the sweep at once on each size's domain, each at IOVAs and on pages of
    /// its own ([`cpu_stride`]); and the line of the key, for the check against the platform.
    pub cpus: u32,
    pub cpus_line: Option<usize>,
}

/// `iommu_ops`: an explicit list of iommu core operations, repeated `iterations` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ops {
    pub ops: Vec<Op>,
    pub iterations: u32,
    /// Record the page table's shape after each operation.
    pub pgtable_shape: bool,
    /// CPUs running the list at once on the one domain, each at IOVAs and on pages of its own
    /// ([`cpu_stride`]); and the line of the key.
    pub cpus: u32,
    pub cpus_line: Option<usize>,
}

/// How far above the previous CPU's each CPU's fixed IOVAs are, for fixed ranges
/// `(iova, size)`: the span they cover, rounded up to a whole GiB so that every block keeps
/// its alignment and no two CPUs' ranges meet. A workload on several CPUs is each CPU doing
/// the same work on buffers of its own, as `dma_map_benchmark`'s threads do; IOVAs from the
/// allocator are each CPU's own already.
pub fn cpu_stride(ranges: &[(u64, u64)]) -> u64 {
    let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = ranges
        .iter()
        .map(|r| r.0.saturating_add(r.1))
        .max()
        .unwrap_or(0);
    (hi - lo).max(1).next_multiple_of(1 << 30)
}

impl Sweep {
    /// The one fixed range the sweep maps, at its largest size.
    pub fn fixed_ranges(&self) -> Vec<(u64, u64)> {
        vec![(self.iova, self.sizes.iter().copied().max().unwrap_or(0))]
    }
}

impl Ops {
    /// The IOVA ranges the list names outright: maps and unmaps at fixed IOVAs, and the
    /// addresses it translates.
    pub fn fixed_ranges(&self) -> Vec<(u64, u64)> {
        self.ops
            .iter()
            .filter_map(|o| match o {
                Op::Map(MapOp {
                    iova: IovaSpec::Fixed(a),
                    size,
                    ..
                }) => Some((*a, *size)),
                Op::UnmapRange { iova, size, .. } => Some((*iova, *size)),
                Op::IovaToPhys {
                    at: IovaAt::Fixed(a),
                } => Some((*a, 1)),
                _ => None,
            })
            .collect()
    }

    /// Whether any map takes its IOVA from the allocator.
    pub fn allocates_iovas(&self) -> bool {
        self.ops
            .iter()
            .any(|o| matches!(o, Op::Map(m) if m.iova == IovaSpec::Alloc))
    }
}

mod render;
mod run;
mod section;

pub use render::{json, table};
pub use run::*;
use section::*;
pub(crate) use section::{IommuGiven, parse_section, platform_smmu};

impl super::WorkloadKind for Sweep {
    type Output = IommuRunResult;
    const KINDS: &'static [super::Kind] = &[SWEEP];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<IommuRunResult, RunFailure> {
        run(s, progress)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        super::smp_cpus::check_count(s, self.cpus, self.cpus_line, "workload.cpus")?;
        super::smp_cpus::check_shared(s, self.cpus, self.cpus_line, "workload.cpus")
    }

    fn work(&self, s: &Scenario) -> u128 {
        let page = s.work_page();
        let pages: u128 = self.sizes.iter().map(|&size| u128::from(size) / page).sum();
        super::IOMMU_PAGE_STEPS * pages * u128::from(self.iterations) * u128::from(self.cpus)
    }

    fn progress_total(&self) -> u64 {
        self.sizes.len() as u64 * u64::from(self.iterations)
    }

    fn uses_dma_api(&self) -> bool {
        false
    }

    fn probes_smmu(&self) -> bool {
        true
    }
}

impl super::WorkloadKind for Ops {
    type Output = IommuRunResult;
    const KINDS: &'static [super::Kind] = &[OPS];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<IommuRunResult, RunFailure> {
        run(s, progress)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        super::smp_cpus::check_count(s, self.cpus, self.cpus_line, "workload.cpus")?;
        super::smp_cpus::check_shared(s, self.cpus, self.cpus_line, "workload.cpus")
    }

    fn work(&self, s: &Scenario) -> u128 {
        let page = s.work_page();
        let pages: u128 = self
            .ops
            .iter()
            .map(|op| match op {
                Op::Map(m) => u128::from(m.size) / page,
                _ => 0,
            })
            .sum();
        super::IOMMU_PAGE_STEPS * pages * u128::from(self.iterations) * u128::from(self.cpus)
    }

    fn progress_total(&self) -> u64 {
        u64::from(self.iterations)
    }

    fn uses_dma_api(&self) -> bool {
        false
    }

    fn allocates_iovas(&self) -> bool {
        Ops::allocates_iovas(self)
    }

    fn probes_smmu(&self) -> bool {
        true
    }
}

impl super::KindResult for IommuRunResult {
    super::kind::result_fields!();
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        self.ops
            .iter()
            .map(|o| (o.label.clone(), o.calls, o.total_ps))
            .collect()
    }
}

#[cfg(test)]
mod tests;
