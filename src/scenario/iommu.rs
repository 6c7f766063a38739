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

use super::{Ctx, Progress, RunInfo, Scenario, Shared, Workload};
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpsSection {
    kind: Spanned<String>,
    iterations: Spanned<i64>,
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
    /// The current IOVA of the named map op, plus an offset.
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
}

/// `iommu_ops`: an explicit list of iommu core operations, repeated `iterations` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ops {
    pub ops: Vec<Op>,
    pub iterations: u32,
    /// Record the page table's shape after each operation.
    pub pgtable_shape: bool,
}

impl Ops {
    /// Whether any map takes its IOVA from the allocator.
    pub fn allocates_iovas(&self) -> bool {
        self.ops
            .iter()
            .any(|o| matches!(o, Op::Map(m) if m.iova == IovaSpec::Alloc))
    }
}

impl Ctx<'_> {
    fn spanned_size(&self, v: &Spanned<toml::Value>, key: &str) -> Result<u64, InputError> {
        self.size(v.get_ref(), v.span(), key)
    }

    /// A size that is a whole number of granules and at most [`MAX_MAP`].
    fn granule_size(
        &self,
        v: &toml::Value,
        span: std::ops::Range<usize>,
        key: &str,
        granule: u64,
    ) -> Result<u64, InputError> {
        let n = self.size(v, span.clone(), key)?;
        if !n.is_multiple_of(granule) {
            return Err(self.err(
                span,
                key,
                format!(
                    "{n} bytes is not a multiple of the {} KiB IOMMU granule",
                    granule >> 10
                ),
            ));
        }
        if n > MAX_MAP {
            return Err(self.err(span, key, format!("at most {MAX_MAP} bytes")));
        }
        Ok(n)
    }

    /// An IOVA: an integer, a hex string ("0x4000_0000"), a size ("1G"), or "alloc".
    fn iova(&self, v: &Spanned<toml::Value>, key: &str) -> Result<IovaSpec, InputError> {
        let bad = || {
            self.err(
                v.span(),
                key,
                format!(
                    "expected an address such as \"0x40000000\", \"1G\" or \"alloc\", found {}",
                    v.get_ref()
                ),
            )
        };
        match v.get_ref() {
            toml::Value::Integer(i) if *i >= 0 => Ok(IovaSpec::Fixed(*i as u64)),
            toml::Value::String(s) if s == "alloc" => Ok(IovaSpec::Alloc),
            toml::Value::String(s) => {
                let t = s.trim().replace('_', "");
                let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16).ok(),
                    None => parse_size(&t),
                };
                n.map(IovaSpec::Fixed).ok_or_else(bad)
            }
            _ => Err(bad()),
        }
    }

    /// A fixed range must be granule aligned and inside the input address space.
    fn check_range(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        iova: u64,
        size: u64,
        cfg: &IommuConfig,
    ) -> Result<(), InputError> {
        if !iova.is_multiple_of(cfg.granule) {
            return Err(self.err(
                span,
                key,
                format!(
                    "IOVA {iova:#x} is not aligned to the {} KiB granule",
                    cfg.granule >> 10
                ),
            ));
        }
        if iova.checked_add(size).is_none_or(|e| e > 1u64 << cfg.ias) {
            return Err(self.err(
                span,
                key,
                format!(
                    "IOVA {iova:#x} + {size:#x} is outside the {}-bit input address space",
                    cfg.ias
                ),
            ));
        }
        Ok(())
    }
}

/// What `[iommu]` said itself; whatever it left out, the platform's `[smmu]` decides (after
/// overrides too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IommuGiven {
    pub(crate) smmu: bool,
    pub(crate) coherent_walk: bool,
}

/// `[iommu]`: the domain a device or an IOMMU workload maps through. Returns the configuration
/// and which of its keys were given.
pub(crate) fn parse_section(
    c: &Ctx,
    io: &IommuSection,
    profile: &Profile,
) -> Result<(IommuConfig, IommuGiven), InputError> {
    let granule = match c.spanned_size(&io.granule, "iommu.granule") {
        Ok(g @ (0x1000 | 0x4000 | 0x10000)) => g,
        Ok(g) => {
            return Err(c.err(
                io.granule.span(),
                "iommu.granule",
                format!("unsupported granule of {g} bytes; an Arm LPAE table has 4K, 16K or 64K"),
            ));
        }
        Err(e) => return Err(e),
    };
    let ias = *io.ias.get_ref();
    if !(32..=48).contains(&ias) {
        return Err(c.err(
            io.ias.span(),
            "iommu.ias",
            format!("input address size must be 32..=48 bits, found {ias}"),
        ));
    }
    let (smmu, smmu_given) = match &io.smmu {
        Some(s) => (
            SmmuModel::parse(s.get_ref()).ok_or_else(|| {
                c.err(
                    s.span(),
                    "iommu.smmu",
                    format!(
                        "unknown SMMU model `{}`; choose one of: {}",
                        s.get_ref(),
                        SmmuModel::NAMES.join(", ")
                    ),
                )
            })?,
            true,
        ),
        None => (platform_smmu(profile).unwrap_or(SmmuModel::Mmu500), false),
    };
    Ok((
        IommuConfig {
            granule,
            ias: ias as u32,
            smmu,
            // The platform's walker unless the scenario says otherwise.
            coherent_walk: io
                .coherent_walk
                .unwrap_or_else(|| profile.model.smmu.is_some_and(|s| s.coherent_walk)),
            // The tables come from table_memory(), one node.
            node: 0,
        },
        IommuGiven {
            smmu: smmu_given,
            coherent_walk: io.coherent_walk.is_some(),
        },
    ))
}

/// The `[iommu]` an IOMMU workload needs.
fn domain_of<'a>(
    c: &Ctx,
    kind: &Spanned<String>,
    shared: &'a Shared,
) -> Result<&'a IommuConfig, InputError> {
    shared.iommu.ok_or_else(|| {
        c.err(
            kind.span(),
            "iommu",
            format!(
                "missing: an {} workload maps into a domain; give an [iommu] section (granule, ias)",
                kind.get_ref()
            ),
        )
    })
}

fn iterations(c: &Ctx, it: &Spanned<i64>) -> Result<u32, InputError> {
    Ok(c.int(it, "workload.iterations", 1..=MAX_ITERATIONS)? as u32)
}

fn layout(c: &Ctx, l: &Option<Spanned<String>>, key: &str) -> Result<Layout, InputError> {
    match l {
        None => Ok(Layout::Scattered),
        Some(s) => Layout::parse(s.get_ref()).ok_or_else(|| {
            c.err(
                s.span(),
                key,
                format!(
                    "unknown layout `{}`; choose scattered or contiguous",
                    s.get_ref()
                ),
            )
        }),
    }
}

fn element(
    c: &Ctx,
    e: &Option<Spanned<toml::Value>>,
    key: &str,
    granule: u64,
) -> Result<u64, InputError> {
    match e {
        None => Ok(granule),
        Some(e) => c.granule_size(e.get_ref(), e.span(), key, granule),
    }
}

fn parse_sweep(
    c: &Ctx,
    v: Spanned<toml::de::DeValue>,
    shared: &Shared,
) -> Result<Workload, InputError> {
    let w: SweepSection = c.section(v)?;
    let iommu = domain_of(c, &w.kind, shared)?;
    let granule = iommu.granule;
    let iterations = iterations(c, &w.iterations)?;
    let Some(list) = &w.sizes else {
        return Err(c.missing(&w.kind, "sizes", "an iommu_sweep needs a list of sizes"));
    };
    if list.get_ref().is_empty() {
        return Err(c.err(list.span(), "workload.sizes", "must not be empty"));
    }
    let element = element(c, &w.element, "workload.element", granule)?;
    let sizes: Vec<u64> = list
        .get_ref()
        .iter()
        .map(|v| c.granule_size(v, list.span(), "workload.sizes", granule))
        .collect::<Result<_, _>>()?;
    if let Some(bad) = sizes.iter().find(|s| !s.is_multiple_of(element)) {
        return Err(c.err(
            list.span(),
            "workload.sizes",
            format!("{bad} bytes is not a whole number of {element}-byte elements"),
        ));
    }
    let iova = match &w.iova {
        None => DEFAULT_SWEEP_IOVA,
        Some(v) => match c.iova(v, "workload.iova")? {
            IovaSpec::Fixed(a) => a,
            IovaSpec::Alloc => {
                return Err(c.err(
                    v.span(),
                    "workload.iova",
                    "a sweep maps at one fixed IOVA; give an address",
                ));
            }
        },
    };
    let max = sizes.iter().copied().max().unwrap_or(0);
    let span = w.iova.as_ref().map_or(list.span(), |v| v.span());
    c.check_range(span, "workload.iova", iova, max, iommu)?;
    Ok(Workload::IommuSweep(Sweep {
        sizes,
        element,
        layout: layout(c, &w.layout, "workload.layout")?,
        iova,
        iterations,
    }))
}

fn parse_ops(
    c: &Ctx,
    v: Spanned<toml::de::DeValue>,
    shared: &Shared,
) -> Result<Workload, InputError> {
    let w: OpsSection = c.section(v)?;
    let iommu = domain_of(c, &w.kind, shared)?;
    let iterations = iterations(c, &w.iterations)?;
    if w.op.is_empty() {
        return Err(c.missing(
            &w.kind,
            "op",
            "an iommu_ops workload needs [[workload.op]] entries",
        ));
    }
    if w.op.len() > MAX_OPS {
        return Err(c.err(
            w.op[MAX_OPS].op.span(),
            "workload.op",
            format!("at most {MAX_OPS} operations"),
        ));
    }
    let mut ops = Vec::new();
    for (i, o) in w.op.iter().enumerate() {
        ops.push(parse_op(c, o, i, &ops, iommu)?);
    }
    Ok(Workload::IommuOps(Ops {
        ops,
        iterations,
        pgtable_shape: w.pgtable_shape.unwrap_or(false),
    }))
}

pub(crate) fn platform_smmu(p: &Profile) -> Option<SmmuModel> {
    p.model.smmu.map(|s| match s.kind {
        SmmuKind::Mmu500 => SmmuModel::Mmu500,
        SmmuKind::SmmuV3 => SmmuModel::SmmuV3 {
            range_inv: s.range_inv,
        },
    })
}

/// The operation names an `iommu_ops` list accepts, in the order help texts give them.
pub const OP_NAMES: &[&str] = &[
    "map",
    "iommu_map",
    "unmap",
    "unmap_fast",
    "iotlb_sync",
    "flush_iotlb_all",
    "iova_to_phys",
];

/// Which keys each operation takes (besides `op`).
fn op_keys(op: &str) -> &'static [&'static str] {
    match op {
        "map" => &[
            "name", "iova", "size", "element", "layout", "phys", "sg", "prot",
        ],
        "iommu_map" => &["name", "iova", "size", "phys", "prot"],
        "unmap" => &["iova", "size", "of"],
        "unmap_fast" => &["iova", "size", "of", "queued"],
        "iova_to_phys" => &["iova", "of"],
        _ => &[],
    }
}

/// A physical address: an integer or a hex string, below 2^64.
fn phys_addr(
    c: &Ctx,
    v: &toml::Value,
    span: std::ops::Range<usize>,
    key: &str,
) -> Result<u64, InputError> {
    let bad = || {
        c.err(
            span.clone(),
            key,
            format!("expected a physical address such as \"0x80000000\", found {v}"),
        )
    };
    match v {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        toml::Value::String(s) => {
            let t = s.trim().replace('_', "");
            match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).map_err(|_| bad()),
                None => parse_size(&t).ok_or_else(bad),
            }
        }
        _ => Err(bad()),
    }
}

/// A size of an `iommu_ops` operation: non-zero and at most [`MAX_MAP`]. Alignment is the
/// kernel's to check (a misaligned request is refused with `-EINVAL`, a result).
fn op_size(
    c: &Ctx,
    v: &toml::Value,
    span: std::ops::Range<usize>,
    key: &str,
) -> Result<u64, InputError> {
    let n = c.size(v, span.clone(), key)?;
    if n == 0 || n > MAX_MAP {
        return Err(c.err(
            span,
            key,
            format!("must be 1 to {MAX_MAP} bytes, found {n}"),
        ));
    }
    Ok(n)
}

/// The named map op earlier in the list.
fn named_map(
    c: &Ctx,
    earlier: &[Op],
    of: &Spanned<String>,
    key: &str,
) -> Result<usize, InputError> {
    earlier
        .iter()
        .position(|e| matches!(e, Op::Map(m) if m.name.as_deref() == Some(of.get_ref())))
        .ok_or_else(|| {
            c.err(
                of.span(),
                key,
                format!("no earlier map is named `{}`", of.get_ref()),
            )
        })
}

fn parse_op(
    c: &Ctx,
    o: &OpSection,
    i: usize,
    earlier: &[Op],
    cfg: &IommuConfig,
) -> Result<Op, InputError> {
    let key = |k: &str| format!("workload.op[{i}].{k}");
    let name = o.op.get_ref().as_str();
    if !OP_NAMES.contains(&name) {
        return Err(c.err(
            o.op.span(),
            &key("op"),
            format!(
                "unknown operation `{name}`; choose one of: {}",
                OP_NAMES.join(", ")
            ),
        ));
    }
    // Keys the operation does not take are mistakes, named with what it does take.
    let given: [(&str, Option<std::ops::Range<usize>>); 10] = [
        ("iova", o.iova.as_ref().map(|v| v.span())),
        ("size", o.size.as_ref().map(|v| v.span())),
        ("element", o.element.as_ref().map(|v| v.span())),
        ("layout", o.layout.as_ref().map(|v| v.span())),
        ("name", o.name.as_ref().map(|v| v.span())),
        ("of", o.of.as_ref().map(|v| v.span())),
        ("phys", o.phys.as_ref().map(|v| v.span())),
        ("sg", o.sg.as_ref().map(|v| v.span())),
        ("prot", o.prot.as_ref().map(|v| v.span())),
        ("queued", o.queued.as_ref().map(|v| v.span())),
    ];
    let takes = op_keys(name);
    for (k, span) in given {
        if let Some(span) = span
            && !takes.contains(&k)
        {
            let what = if takes.is_empty() {
                "takes no other key".to_string()
            } else {
                format!("takes {}", takes.join(", "))
            };
            return Err(c.err(span, &key(k), format!("`{name}` {what}")));
        }
    }
    let fixed_iova = |v: &Spanned<toml::Value>, size: u64| -> Result<u64, InputError> {
        match c.iova(v, &key("iova"))? {
            IovaSpec::Fixed(a) if a.checked_add(size).is_some() => Ok(a),
            IovaSpec::Fixed(a) => Err(c.err(
                v.span(),
                &key("iova"),
                format!("IOVA {a:#x} + {size:#x} passes 2^64"),
            )),
            IovaSpec::Alloc => Err(c.err(
                v.span(),
                &key("iova"),
                format!(
                    "`{name}` needs an address; to name an allocated mapping use `of = \"name\"`"
                ),
            )),
        }
    };
    let fast = (name == "unmap_fast").then(|| o.queued.as_ref().is_some_and(|q| *q.get_ref()));
    match name {
        "map" | "iommu_map" => parse_map(c, o, i, earlier, cfg, name),
        "unmap" | "unmap_fast" => match (&o.of, &o.iova, &o.size) {
            (Some(of), None, None) => Ok(Op::UnmapOf {
                index: named_map(c, earlier, of, &key("of"))?,
                name: of.get_ref().clone(),
                fast,
            }),
            (None, Some(v), Some(sz)) => {
                let size = op_size(c, sz.get_ref(), sz.span(), &key("size"))?;
                let iova = fixed_iova(v, size)?;
                Ok(Op::UnmapRange { iova, size, fast })
            }
            _ => Err(c.err(
                o.op.span(),
                &key("op"),
                format!("`{name}` takes either `of = \"name\"` or both `iova` and `size`"),
            )),
        },
        "iova_to_phys" => match (&o.of, &o.iova) {
            (Some(of), None) => Ok(Op::IovaToPhys {
                at: IovaAt::Of {
                    index: named_map(c, earlier, of, &key("of"))?,
                    name: of.get_ref().clone(),
                },
            }),
            (None, Some(v)) => Ok(Op::IovaToPhys {
                at: IovaAt::Fixed(fixed_iova(v, 0)?),
            }),
            _ => Err(c.err(
                o.op.span(),
                &key("op"),
                "`iova_to_phys` takes either `of = \"name\"` or `iova`",
            )),
        },
        "iotlb_sync" => Ok(Op::IotlbSync),
        _ => Ok(Op::FlushIotlbAll),
    }
}

fn parse_map(
    c: &Ctx,
    o: &OpSection,
    i: usize,
    earlier: &[Op],
    cfg: &IommuConfig,
    op: &str,
) -> Result<Op, InputError> {
    let key = |k: &str| format!("workload.op[{i}].{k}");
    let call = if op == "map" {
        MapCall::MapSg
    } else {
        MapCall::Map
    };
    let (phys, size) = match (&o.sg, &o.phys) {
        (Some(sg), _) => {
            let span = sg.span();
            if o.phys.is_some() || o.size.is_some() || o.element.is_some() || o.layout.is_some() {
                return Err(c.err(
                    span,
                    &key("sg"),
                    "an explicit sg list gives every element's address and size: drop phys, size, element and layout",
                ));
            }
            let list = sg.get_ref();
            if list.is_empty() || list.len() > MAX_SG {
                return Err(c.err(
                    span,
                    &key("sg"),
                    format!("must have 1 to {MAX_SG} elements"),
                ));
            }
            let mut els = Vec::new();
            let mut total = 0u64;
            for (j, e) in list.iter().enumerate() {
                let k = key(&format!("sg[{j}]"));
                let pa = phys_addr(c, &e.phys, span.clone(), &format!("{k}.phys"))?;
                let len = op_size(c, &e.size, span.clone(), &format!("{k}.size"))?;
                if pa.checked_add(len).is_none() {
                    return Err(c.err(span.clone(), &k, format!("{pa:#x} + {len:#x} passes 2^64")));
                }
                total = total
                    .checked_add(len)
                    .filter(|&t| t <= MAX_MAP)
                    .ok_or_else(|| {
                        c.err(
                            span.clone(),
                            &key("sg"),
                            format!("at most {MAX_MAP} bytes in all"),
                        )
                    })?;
                els.push((pa, len));
            }
            (Phys::Sg(els), total)
        }
        (None, phys) => {
            let Some(sz) = &o.size else {
                return Err(c.err(
                    o.op.span(),
                    &key("size"),
                    "missing: a map needs a size (or an sg list)",
                ));
            };
            let size = op_size(c, sz.get_ref(), sz.span(), &key("size"))?;
            match phys {
                Some(p) => {
                    if o.element.is_some() || o.layout.is_some() {
                        return Err(c.err(
                            p.span(),
                            &key("phys"),
                            "one contiguous run from `phys`: drop element and layout (or give an sg list)",
                        ));
                    }
                    let pa = phys_addr(c, p.get_ref(), p.span(), &key("phys"))?;
                    if pa.checked_add(size).is_none() {
                        return Err(c.err(
                            p.span(),
                            &key("phys"),
                            format!("{pa:#x} + {size:#x} passes 2^64"),
                        ));
                    }
                    (Phys::At(pa), size)
                }
                None => {
                    let element = match &o.element {
                        None => cfg.granule.min(size),
                        Some(e) => op_size(c, e.get_ref(), e.span(), &key("element"))?,
                    };
                    if !size.is_multiple_of(element) {
                        return Err(c.err(
                            sz.span(),
                            &key("size"),
                            format!(
                                "{size} bytes is not a whole number of {element}-byte elements"
                            ),
                        ));
                    }
                    let layout = match call {
                        MapCall::MapSg => layout(c, &o.layout, &key("layout"))?,
                        MapCall::Map => Layout::Contiguous,
                    };
                    (Phys::Generated { element, layout }, size)
                }
            }
        }
    };
    let iova = match &o.iova {
        None => IovaSpec::Alloc,
        Some(v) => match c.iova(v, &key("iova"))? {
            IovaSpec::Fixed(a) if a.checked_add(size).is_none() => {
                return Err(c.err(
                    v.span(),
                    &key("iova"),
                    format!("IOVA {a:#x} + {size:#x} passes 2^64"),
                ));
            }
            x => x,
        },
    };
    let prot = match &o.prot {
        None => Prot::RW,
        Some(list) => {
            let mut p = Prot(0);
            for f in list.get_ref() {
                p = p.union(Prot::flag(f).ok_or_else(|| {
                    let names: Vec<&str> = Prot::FLAGS.iter().map(|f| f.0).collect();
                    c.err(
                        list.span(),
                        &key("prot"),
                        format!("unknown flag `{f}`; choose from: {}", names.join(", ")),
                    )
                })?);
            }
            if !p.contains(Prot::READ) && !p.contains(Prot::WRITE) {
                return Err(c.err(
                    list.span(),
                    &key("prot"),
                    "needs read or write: with neither, io-pgtable-arm maps nothing and reports success, and 5.15's __iommu_map never finishes",
                ));
            }
            p
        }
    };
    let name = match &o.name {
        Some(n) => {
            let dup = earlier
                .iter()
                .any(|e| matches!(e, Op::Map(m) if m.name.as_deref() == Some(n.get_ref())));
            if dup {
                return Err(c.err(
                    n.span(),
                    &key("name"),
                    format!("a mapping named `{}` was already declared", n.get_ref()),
                ));
            }
            Some(n.get_ref().clone())
        }
        None => None,
    };
    Ok(Op::Map(MapOp {
        name,
        call,
        iova,
        size,
        phys,
        prot,
    }))
}

/// One operation's (or one sweep row's) figures over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStat {
    /// `map_sg 4K`, `unmap 4K`, `op[0] map`, ...
    pub label: String,
    /// The iommu core call timed: `iommu_map_sg` or `iommu_unmap`.
    pub call: &'static str,
    pub bytes: u64,
    /// The IOVA of the last call.
    pub iova: u64,
    pub calls: u64,
    pub total_ps: u64,
    /// Operations issued by all calls together.
    pub counts: [u64; Counter::N],
    /// Calls the modelled kernel refused, and the first refusal in its words.
    pub errors: u64,
    pub first_error: Option<String>,
    /// What the last call returned, as the kernel returns it (`0`, `-EEXIST`, bytes unmapped,
    /// a physical address, `void`).
    pub returned: Option<String>,
    /// Bytes the last call mapped or unmapped.
    pub bytes_done: u64,
    /// The page table's shape after the last call, when the scenario asks for it.
    pub shape: Option<PgtableShape>,
}

impl OpStat {
    pub fn mean_ns(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.total_ps as f64 / self.calls as f64 / 1000.0
        }
    }
    /// Operations of one kind per call.
    pub fn per_call(&self, c: Counter) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.counts[c as usize] as f64 / self.calls as f64
        }
    }
}

#[derive(Clone, Debug)]
pub struct IommuRunResult {
    /// Which scenario ran where, under which policies.
    pub info: RunInfo,
    pub iommu: IommuConfig,
    /// The domain's page-table geometry (`None` only when no domain was allocated).
    pub geometry: Option<DomainGeometry>,
    pub workload: Workload,
    pub ops: Vec<OpStat>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl IommuRunResult {
    pub fn op(&self, label: &str) -> Option<&OpStat> {
        self.ops.iter().find(|o| o.label == label)
    }
}

/// A size for labels: `4K`, `2M`, `1G`, or bytes.
pub fn size_label(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

/// The sg list of one mapping: `(physical start, length)` per element.
fn segments(base: u64, size: u64, element: u64, layout: Layout) -> Vec<(PhysAddr, u64)> {
    let stride = match layout {
        Layout::Scattered => 2 * element,
        Layout::Contiguous => element,
    };
    (0..size / element)
        .map(|i| (PhysAddr(base + i * stride), element))
        .collect()
}

/// Physical base for the `k`-th mapping's pages: each gets its own 1 GiB-aligned window (aligned
/// for every block size), so contiguous pages can be mapped with blocks.
fn data_base(k: usize, size: u64) -> u64 {
    let window = (2 * size).next_multiple_of(1 << 30);
    DATA_BASE + k as u64 * window
}

/// A fresh domain on its own table memory, enough for `mapped` bytes of leaves.
fn new_domain(
    hw: &mut Model,
    s: &Scenario,
    cfg: &IommuConfig,
    mapped: u64,
    cmdq_shift: Option<u32>,
) -> Result<crate::iommu::core::IommuDomain, String> {
    let cmdq = Cmdq::new(cmdq_shift.unwrap_or(8));
    iommu_domain_alloc_with_cmdq(
        hw,
        cfg,
        &s.profile,
        &s.policies,
        table_memory(table_bytes(mapped)),
        cmdq,
    )
    .map_err(|e| e.to_string())
}

struct Meter {
    ops: Vec<OpStat>,
    /// The page table of the first domain the run allocated (every domain of a run has the
    /// same configuration).
    geometry: Option<DomainGeometry>,
}

/// What the run's domain is, as the documents describe it: the domain type, and the io-pgtable
/// format `alloc_io_pgtable_ops` worked out from the granule and the address sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DomainGeometry {
    /// `iommu_domain_alloc()` gives the caller an `IOMMU_DOMAIN_UNMANAGED` domain: the iommu
    /// core's API is driven directly, as the seed's test driver did; no iommu-dma, no IOVA
    /// flush queue.
    pub domain_type: &'static str,
    pub format: &'static str,
    pub granule: u64,
    pub ias: u32,
    pub oas: u32,
    /// Levels walked (`ARM_LPAE_MAX_LEVELS - start_level`) and the level the walk starts at.
    pub levels: u32,
    pub start_level: u32,
    /// The top-level table's bytes (`ARM_LPAE_PGD_SIZE`).
    pub pgd_bytes: u64,
    /// `pgsize_bitmap`, and the page and block sizes it allows, smallest first.
    pub pgsize_bitmap: String,
    pub page_sizes: Vec<u64>,
}

impl DomainGeometry {
    fn of(d: &crate::iommu::core::IommuDomain) -> DomainGeometry {
        let t = &d.pgtable;
        let bitmap = t.pgsize_bitmap();
        DomainGeometry {
            domain_type: "IOMMU_DOMAIN_UNMANAGED",
            format: "ARM_64_LPAE_S1",
            granule: t.granule(),
            ias: t.cfg().ias,
            oas: t.cfg().oas,
            levels: t.levels(),
            start_level: t.start_level(),
            pgd_bytes: t.pgd_size(),
            pgsize_bitmap: format!("{bitmap:#x}"),
            page_sizes: (0..64)
                .map(|b| 1u64 << b)
                .filter(|sz| bitmap & sz != 0)
                .collect(),
        }
    }
}

impl Meter {
    fn saw(&mut self, d: &crate::iommu::core::IommuDomain) {
        if self.geometry.is_none() {
            self.geometry = Some(DomainGeometry::of(d));
        }
    }
}

impl Meter {
    /// Time and count one call of the operation at `slot`.
    fn time<T>(&mut self, hw: &mut Model, slot: usize, f: impl FnOnce(&mut Model) -> T) -> T {
        let t0 = hw.now_ps();
        let c0 = hw.ledger.totals();
        let r = f(hw);
        let c1 = hw.ledger.totals();
        let o = &mut self.ops[slot];
        o.calls += 1;
        o.total_ps += hw.now_ps() - t0;
        for (k, (a, b)) in o.counts.iter_mut().zip(c1.iter().zip(c0.iter())) {
            *k += a - b;
        }
        r
    }

    /// Record a refusal of the operation at `slot`.
    fn refused(&mut self, slot: usize, why: String) {
        let o = &mut self.ops[slot];
        o.errors += 1;
        if o.first_error.is_none() {
            o.first_error = Some(why);
        }
    }

    fn slot(&mut self, label: String, call: &'static str, bytes: u64) -> usize {
        self.ops.push(OpStat {
            label,
            call,
            bytes,
            iova: 0,
            calls: 0,
            total_ps: 0,
            counts: [0; Counter::N],
            errors: 0,
            first_error: None,
            returned: None,
            bytes_done: 0,
            shape: None,
        });
        self.ops.len() - 1
    }

    /// Record what the call at `slot` returned and the bytes it moved.
    fn returned(&mut self, slot: usize, returned: String, bytes: u64) {
        let o = &mut self.ops[slot];
        o.returned = Some(returned);
        o.bytes_done = bytes;
    }
}

/// Run a checked IOMMU scenario on the Model. What the modelled kernel refuses (mapping over a
/// live mapping, unmapping a hole) is recorded on the operation and the run goes on; only a
/// domain that cannot be set up ends it.
pub fn run(s: &Scenario, progress: &Progress) -> Result<IommuRunResult, String> {
    let cfg = s
        .iommu
        .ok_or_else(|| format!("scenario `{}` has no [iommu] domain", s.name))?;
    // On a NUMA platform the SMMUv3 probes at boot: its command queue's node prices every
    // command list below. The tables themselves come from table_memory().
    let (mut hw, cmdq_shift) = if s.probes_smmu_v3() {
        let m = Machine::boot_numa_smmu_v3(&s.profile, s.kernel, &s.boot, s.cpu_node())
            .map_err(|e| e.to_string())?;
        let shift = m.smmu.as_ref().map(|p| p.structures.cmdq.max_n_shift);
        let mut hw = m.hw;
        hw.clear_ledger();
        (hw, shift)
    } else {
        (Model::new(s.profile.model.clone()), None)
    };
    let mut m = Meter {
        ops: Vec::new(),
        geometry: None,
    };
    match &s.workload {
        Workload::IommuSweep(w) => {
            for &size in &w.sizes {
                let label = size_label(size);
                let map = m.slot(format!("map_sg {label}"), "iommu_map_sg", size);
                let unmap = m.slot(format!("unmap {label}"), "iommu_unmap", size);
                let mut d = new_domain(&mut hw, s, &cfg, size, cmdq_shift)
                    .map_err(|e| format!("domain: {e}"))?;
                m.saw(&d);
                let segs = segments(data_base(0, size), size, w.element, w.layout);
                for it in 0..w.iterations {
                    let r = m.time(&mut hw, map, |hw| {
                        d.iommu_map_sg(hw, IovaAddr(w.iova), &segs, Prot::RW)
                    });
                    if let Err(e) = r {
                        m.refused(map, format!("iteration {it}: {e}"));
                    }
                    let r = m.time(&mut hw, unmap, |hw| {
                        d.iommu_unmap(hw, IovaAddr(w.iova), size)
                    });
                    if let Err(e) = r {
                        m.refused(unmap, format!("iteration {it}: {e}"));
                    }
                    progress.advance(1);
                }
                m.ops[map].iova = w.iova;
                m.ops[unmap].iova = w.iova;
            }
        }
        Workload::IommuOps(w) => run_ops(&mut hw, &mut m, s, &cfg, w, cmdq_shift, progress)?,
        other => {
            return Err(format!(
                "scenario `{}` is a {} workload, not an IOMMU one",
                s.name,
                other.kind()
            ));
        }
    }
    debug_assert!(hw.ledger.depth_is_zero());
    let stacks = stack_rows(&hw.ledger);
    Ok(IommuRunResult {
        info: s.run_info(),
        iommu: cfg,
        geometry: m.geometry,
        workload: s.workload.clone(),
        ops: m.ops,
        counts: hw.ledger.totals(),
        stacks,
        total_ps: hw.ledger.total_ps(),
    })
}

/// The sg list (physical start, length) of map op `i`.
fn map_segments(i: usize, m: &MapOp) -> Vec<(PhysAddr, u64)> {
    match &m.phys {
        Phys::Generated { element, layout } => {
            segments(data_base(i, m.size), m.size, *element, *layout)
        }
        Phys::At(pa) => vec![(PhysAddr(*pa), m.size)],
        Phys::Sg(list) => list.iter().map(|&(pa, len)| (PhysAddr(pa), len)).collect(),
    }
}

/// The label of op `i` in tables and JSON.
fn op_label(i: usize, o: &Op, ops: &[Op]) -> String {
    let name_of = |index: usize| match &ops[index] {
        Op::Map(m) => m.name.clone().unwrap_or_default(),
        _ => String::new(),
    };
    match o {
        Op::Map(m) => {
            let verb = match m.call {
                MapCall::MapSg => "map",
                MapCall::Map => "iommu_map",
            };
            format!("op[{i}] {verb} {}", size_label(m.size))
        }
        Op::UnmapRange { size, fast, .. } => format!(
            "op[{i}] {} {}",
            if fast.is_some() {
                "unmap_fast"
            } else {
                "unmap"
            },
            size_label(*size)
        ),
        Op::UnmapOf { index, fast, .. } => format!(
            "op[{i}] {} {}",
            if fast.is_some() {
                "unmap_fast"
            } else {
                "unmap"
            },
            name_of(*index)
        ),
        Op::IotlbSync => format!("op[{i}] iotlb_sync"),
        Op::FlushIotlbAll => format!("op[{i}] flush_iotlb_all"),
        Op::IovaToPhys {
            at: IovaAt::Fixed(a),
        } => format!("op[{i}] iova_to_phys {a:#x}"),
        Op::IovaToPhys {
            at: IovaAt::Of { name, .. },
        } => format!("op[{i}] iova_to_phys {name}"),
    }
}

/// What `iommu_unmap` / `iommu_unmap_fast` returns: the bytes unmapped (0 when refused).
fn unmapped(r: &Result<u64, IommuError>) -> u64 {
    match r {
        Ok(b) => *b,
        Err(IommuError::ShortUnmap { unmapped, .. }) => *unmapped,
        Err(_) => 0,
    }
}

fn run_ops(
    hw: &mut Model,
    m: &mut Meter,
    s: &Scenario,
    cfg: &IommuConfig,
    w: &Ops,
    cmdq_shift: Option<u32>,
    progress: &Progress,
) -> Result<(), String> {
    let ops = &w.ops;
    let mapped: u64 = ops
        .iter()
        .map(|o| match o {
            Op::Map(mo) => mo.size,
            _ => 0,
        })
        .sum();
    let mut d = new_domain(hw, s, cfg, mapped, cmdq_shift).map_err(|e| format!("domain: {e}"))?;
    m.saw(&d);
    let mut iovad = IovaDomain::new(hw, cfg.granule, 1, 1)
        .map_err(|e| format!("IOVA domain: {e}"))?
        .with_rules(s.policies.iova.rules());
    let shift = cfg.granule.trailing_zeros();
    let limit_pfn = ((1u64 << cfg.ias) >> shift) - 1;
    for (i, o) in ops.iter().enumerate() {
        let bytes = match o {
            Op::Map(mo) => mo.size,
            Op::UnmapRange { size, .. } => *size,
            Op::UnmapOf { index, .. } => match &ops[*index] {
                Op::Map(mo) => mo.size,
                _ => 0,
            },
            _ => 0,
        };
        m.slot(op_label(i, o, ops), o.call(), bytes);
    }
    let segs: Vec<Vec<(PhysAddr, u64)>> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Op::Map(mo) if mo.call == MapCall::MapSg => map_segments(i, mo),
            _ => Vec::new(),
        })
        .collect();
    // The gather `iommu_unmap_fast` collects into, until an `iotlb_sync`.
    let mut gather = IommuIotlbGather::new();
    // Where each map op's mapping currently lives (and whether its IOVA came from the allocator).
    let mut live: Vec<Option<(u64, bool)>> = vec![None; ops.len()];
    for it in 0..w.iterations {
        for (i, o) in ops.iter().enumerate() {
            let at = |e: &IommuError| format!("iteration {it}: {e}");
            'op: {
                match o {
                    Op::Map(mo) => {
                        let pages = mo.size.div_ceil(cfg.granule);
                        let r = m.time(hw, i, |hw| {
                            let (iova, alloc) = match mo.iova {
                                IovaSpec::Fixed(a) => (a, false),
                                IovaSpec::Alloc => {
                                    let pfn =
                                        iovad.alloc_iova_fast(hw, 0, pages, limit_pfn, true)?;
                                    // 0 is the allocator's failure value (5.11 to 6.1 can hand it
                                    // out when the retry wraps): no IOVA; the range stays allocated.
                                    if pfn == 0 {
                                        return Err(IommuError::IovaZero { pages });
                                    }
                                    (pfn << shift, true)
                                }
                            };
                            let r = match mo.call {
                                MapCall::MapSg => {
                                    d.iommu_map_sg(hw, IovaAddr(iova), &segs[i], mo.prot)
                                }
                                MapCall::Map => {
                                    let pa = match mo.phys {
                                        Phys::At(pa) => pa,
                                        _ => data_base(i, mo.size),
                                    };
                                    d.iommu_map(hw, IovaAddr(iova), PhysAddr(pa), mo.size, mo.prot)
                                        .map(|()| mo.size)
                                }
                            };
                            if r.is_err() && alloc {
                                let _ = iovad.free_iova_fast(hw, 0, iova >> shift, pages);
                            }
                            r.map(|b| (iova, alloc, b))
                        });
                        let (iova, alloc, b) = match r {
                            Ok(x) => x,
                            Err(e) => {
                                if let IovaSpec::Fixed(a) = mo.iova {
                                    m.ops[i].iova = a;
                                }
                                // What iommu_map_sg() itself returned (an IOVA the
                                // allocator refused never reached it).
                                let iova_refused = matches!(
                                    e,
                                    IommuError::IovaZero { .. } | IommuError::IovaExhausted { .. }
                                );
                                let returned = match mo.call {
                                    MapCall::MapSg if !iova_refused => {
                                        d.map_sg_returns.value(&Err(e.clone()))
                                    }
                                    _ => e.errno().to_string(),
                                };
                                m.returned(i, returned, 0);
                                m.refused(i, at(&e));
                                break 'op;
                            }
                        };
                        m.returned(
                            i,
                            match mo.call {
                                MapCall::MapSg => b.to_string(),
                                MapCall::Map => "0".to_string(),
                            },
                            b,
                        );
                        if live[i].is_some() {
                            m.refused(
                            i,
                            format!(
                                "iteration {it}: mapped again while its previous mapping is still live (leaked)"
                            ),
                        );
                        }
                        live[i] = Some((iova, alloc));
                        m.ops[i].iova = iova;
                    }
                    Op::UnmapRange { iova, size, fast } => {
                        let r = m.time(hw, i, |hw| match fast {
                            None => d.iommu_unmap(hw, IovaAddr(*iova), *size),
                            Some(queued) => {
                                gather.queued = *queued;
                                d.iommu_unmap_fast(hw, IovaAddr(*iova), *size, &mut gather)
                            }
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, at(&e));
                        }
                        m.ops[i].iova = *iova;
                        // A fixed-IOVA mapping that started in the range is gone (or cut short).
                        for l in live.iter_mut() {
                            if l.is_some_and(|(a, alloc)| !alloc && a >= *iova && a - *iova < *size)
                            {
                                *l = None;
                            }
                        }
                    }
                    Op::UnmapOf { index, name, fast } => {
                        let Some((iova, alloc)) = live[*index].take() else {
                            m.refused(i, format!("iteration {it}: mapping `{name}` is not mapped"));
                            break 'op;
                        };
                        let size = m.ops[*index].bytes;
                        let r = m.time(hw, i, |hw| {
                            let r = match fast {
                                None => d.iommu_unmap(hw, IovaAddr(iova), size),
                                Some(queued) => {
                                    gather.queued = *queued;
                                    d.iommu_unmap_fast(hw, IovaAddr(iova), size, &mut gather)
                                }
                            };
                            if alloc {
                                iovad.free_iova_fast(
                                    hw,
                                    0,
                                    iova >> shift,
                                    size.div_ceil(cfg.granule),
                                )?;
                            }
                            r
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, at(&e));
                        }
                        m.ops[i].iova = iova;
                    }
                    Op::IotlbSync => {
                        m.time(hw, i, |hw| d.iotlb_sync(hw, &mut gather));
                        gather = IommuIotlbGather::new();
                        m.returned(i, "void".to_string(), 0);
                    }
                    Op::FlushIotlbAll => {
                        m.time(hw, i, |hw| d.flush_iotlb_all(hw));
                        m.returned(i, "void".to_string(), 0);
                    }
                    Op::IovaToPhys { at } => {
                        let iova = match at {
                            IovaAt::Fixed(a) => *a,
                            IovaAt::Of { index, .. } => match live[*index] {
                                Some((a, _)) => a,
                                None => {
                                    m.refused(
                                        i,
                                        format!("iteration {it}: the mapping is not mapped"),
                                    );
                                    break 'op;
                                }
                            },
                        };
                        let pa = m.time(hw, i, |hw| {
                            hw.enter("iommu_iova_to_phys");
                            let pa = d.iova_to_phys(hw, IovaAddr(iova));
                            hw.leave();
                            pa
                        });
                        m.ops[i].iova = iova;
                        m.returned(i, pa.map_or("0".to_string(), |p| format!("{:#x}", p.0)), 0);
                    }
                }
            }
            if w.pgtable_shape {
                m.ops[i].shape = Some(d.pgtable.shape());
            }
        }
        progress.advance(1);
    }
    Ok(())
}

// Rendering: the terminal table and the JSON document of this kind's result.

/// One operation (or sweep row) of an IOMMU run, in JSON.
#[derive(Serialize)]
struct IommuOpDoc {
    label: String,
    call: &'static str,
    bytes: u64,
    iova: String,
    count: u64,
    mean_ns: f64,
    total_ns: f64,
    /// Operations per call (a fraction where calls differ, e.g. table allocations in the first).
    operations_per_call: BTreeMap<&'static str, f64>,
    /// Calls the modelled kernel refused, and the first refusal.
    refused: u64,
    first_refusal: Option<String>,
    /// What the last call returned, as the kernel returns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    returned: Option<String>,
    /// Bytes the last call mapped or unmapped.
    bytes_done: u64,
    /// What the operation asks for (`iommu_ops` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    geometry: Option<GeometryDoc>,
    /// The page table after the last call (`pgtable_shape = true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pgtable: Option<ShapeDoc>,
}

/// An `iommu_ops` operation as the scenario gives it.
#[derive(Serialize)]
struct GeometryDoc {
    op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// A hex address, or "alloc".
    #[serde(skip_serializing_if = "Option::is_none")]
    iova: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    element: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<&'static str>,
    /// Contiguous from this physical address.
    #[serde(skip_serializing_if = "Option::is_none")]
    phys: Option<String>,
    /// An explicit sg list: (physical address, length) per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    sg: Option<Vec<(String, u64)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prot: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<bool>,
}

/// Live tables and valid leaves per level (keys are level numbers).
#[derive(Serialize)]
struct ShapeDoc {
    table_pages: u64,
    tables: BTreeMap<String, u64>,
    leaves: BTreeMap<String, u64>,
}

fn shape_doc(sh: &PgtableShape) -> ShapeDoc {
    let per_level = |v: &[u64]| {
        v.iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(l, n)| (l.to_string(), *n))
            .collect()
    };
    ShapeDoc {
        table_pages: sh.tables.iter().sum(),
        tables: per_level(&sh.tables),
        leaves: per_level(&sh.leaves),
    }
}

fn geometry_doc(o: &Op, ops: &[Op]) -> GeometryDoc {
    let name_of = |index: usize| match &ops[index] {
        Op::Map(m) => m.name.clone(),
        _ => None,
    };
    let mut g = GeometryDoc {
        op: match o {
            Op::Map(MapOp {
                call: MapCall::MapSg,
                ..
            }) => "map",
            Op::Map(_) => "iommu_map",
            Op::UnmapRange { fast: None, .. } | Op::UnmapOf { fast: None, .. } => "unmap",
            Op::UnmapRange { .. } | Op::UnmapOf { .. } => "unmap_fast",
            Op::IotlbSync => "iotlb_sync",
            Op::FlushIotlbAll => "flush_iotlb_all",
            Op::IovaToPhys { .. } => "iova_to_phys",
        },
        name: None,
        iova: None,
        size: None,
        of: None,
        element: None,
        layout: None,
        phys: None,
        sg: None,
        prot: None,
        queued: None,
    };
    match o {
        Op::Map(m) => {
            g.name = m.name.clone();
            g.iova = Some(match m.iova {
                IovaSpec::Fixed(a) => format!("{a:#x}"),
                IovaSpec::Alloc => "alloc".to_string(),
            });
            g.size = Some(m.size);
            match &m.phys {
                Phys::Generated { element, layout } => {
                    g.element = Some(*element);
                    g.layout = Some(layout.name());
                }
                Phys::At(pa) => g.phys = Some(format!("{pa:#x}")),
                Phys::Sg(list) => {
                    g.sg = Some(
                        list.iter()
                            .map(|(pa, l)| (format!("{pa:#x}"), *l))
                            .collect(),
                    )
                }
            }
            g.prot = Some(m.prot.names());
        }
        Op::UnmapRange { iova, size, fast } => {
            g.iova = Some(format!("{iova:#x}"));
            g.size = Some(*size);
            g.queued = *fast;
        }
        Op::UnmapOf { index, fast, .. } => {
            g.of = name_of(*index);
            g.queued = *fast;
        }
        Op::IovaToPhys {
            at: IovaAt::Fixed(a),
        } => g.iova = Some(format!("{a:#x}")),
        Op::IovaToPhys {
            at: IovaAt::Of { name, .. },
        } => g.of = Some(name.clone()),
        Op::IotlbSync | Op::FlushIotlbAll => {}
    }
    g
}

#[derive(Serialize)]
struct IommuRunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    iommu: IommuDoc,
    workload: IommuWorkloadDoc,
    ops: Vec<IommuOpDoc>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct IommuDoc {
    granule: u64,
    ias: u32,
    smmu: &'static str,
    coherent_walk: bool,
    /// The domain as set up: type, io-pgtable format, levels, address sizes, page sizes.
    #[serde(flatten)]
    geometry: Option<DomainGeometry>,
}

#[derive(Serialize)]
struct IommuWorkloadDoc {
    kind: &'static str,
    iterations: u32,
}

fn per_call_map(o: &OpStat) -> BTreeMap<&'static str, f64> {
    Counter::ALL
        .iter()
        .filter(|k| o.counts[**k as usize] > 0)
        .map(|k| (k.name(), o.per_call(*k)))
        .collect()
}

/// The `dmasim run --format json` document of an IOMMU scenario.
pub fn json(r: &IommuRunResult) -> serde_json::Value {
    let doc = IommuRunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        iommu: IommuDoc {
            granule: r.iommu.granule,
            ias: r.iommu.ias,
            smmu: r.iommu.smmu.name(),
            coherent_walk: r.iommu.coherent_walk,
            geometry: r.geometry.clone(),
        },
        workload: IommuWorkloadDoc {
            kind: r.workload.kind(),
            iterations: iommu_iterations(&r.workload),
        },
        ops: r
            .ops
            .iter()
            .enumerate()
            .map(|(i, o)| IommuOpDoc {
                label: o.label.clone(),
                call: o.call,
                bytes: o.bytes,
                iova: format!("{:#x}", o.iova),
                count: o.calls,
                mean_ns: o.mean_ns(),
                total_ns: ns(o.total_ps),
                operations_per_call: per_call_map(o),
                refused: o.errors,
                first_refusal: o.first_error.clone(),
                returned: o.returned.clone(),
                bytes_done: o.bytes_done,
                geometry: match &r.workload {
                    Workload::IommuOps(w) => w.ops.get(i).map(|op| geometry_doc(op, &w.ops)),
                    _ => None,
                },
                pgtable: o.shape.as_ref().map(shape_doc),
            })
            .collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

fn iommu_iterations(w: &Workload) -> u32 {
    match w {
        Workload::IommuSweep(s) => s.iterations,
        Workload::IommuOps(o) => o.iterations,
        _ => 1,
    }
}

/// The SMMU and page-table operations shown per call in the IOMMU table, in this order.
const IOMMU_COLUMNS: &[(Counter, &str)] = &[
    (Counter::SmmuTlbiva, "TLBIVA"),
    (Counter::SmmuTlbival, "TLBIVAL"),
    (Counter::SmmuTlbiasid, "TLBIASID"),
    (Counter::SmmuTlbsync, "TLBSYNC"),
    (Counter::SmmuTlbstatusRead, "STATUS"),
    (Counter::Udelay, "udelay"),
    (Counter::CmdqTlbiNhVa, "NH_VA"),
    (Counter::CmdqTlbiNhAsid, "NH_ASID"),
    (Counter::CmdqSync, "CMD_SYNC"),
    (Counter::PgtableMapCall, "map call"),
    (Counter::PgtableUnmapCall, "unmap call"),
    (Counter::Wmb, "wmb"),
    (Counter::CacheCleanLine, "PTE clean"),
    (Counter::Warn, "WARN"),
];

/// The `dmasim run` terminal table of an IOMMU scenario.
pub fn table(r: &IommuRunResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let _ = writeln!(
        o,
        "workload   {}, {} iterations",
        r.workload.kind(),
        iommu_iterations(&r.workload)
    );
    let cols: Vec<&(Counter, &str)> = IOMMU_COLUMNS
        .iter()
        .filter(|(c, _)| r.ops.iter().any(|op| op.counts[*c as usize] > 0))
        .collect();
    let width = r
        .ops
        .iter()
        .map(|op| op.label.len())
        .max()
        .unwrap_or(0)
        .max(20);
    let returns = r.ops.iter().any(|op| op.returned.is_some());
    let unit = TimeUnit::for_column(r.ops.iter().map(|op| op.mean_ns()));
    let _ = write!(
        o,
        "\n{:<width$} {:>7} {:>14}",
        "operation",
        "calls",
        unit.header("mean")
    );
    for (_, h) in &cols {
        let _ = write!(o, " {h:>10}");
    }
    if returns {
        let _ = write!(o, " {:>14}", "returned");
    }
    let _ = writeln!(o);
    for op in &r.ops {
        let _ = write!(
            o,
            "{:<width$} {:>7} {:>14}",
            op.label,
            op.calls,
            unit.num(op.mean_ns())
        );
        for (c, _) in &cols {
            let _ = write!(o, " {:>10}", trim_float(op.per_call(*c)));
        }
        if returns {
            let _ = write!(o, " {:>14}", op.returned.as_deref().unwrap_or("-"));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "(operation counts are per call{})",
        if returns {
            "; `returned` is the last call's return value, as the kernel gives it"
        } else {
            ""
        }
    );
    if r.ops.iter().any(|op| op.shape.is_some()) {
        let _ = writeln!(o, "\npage table after each operation (last iteration)");
        for op in &r.ops {
            if let Some(sh) = &op.shape {
                let lv = |v: &[u64]| {
                    v.iter()
                        .enumerate()
                        .filter(|(_, n)| **n > 0)
                        .map(|(l, n)| format!("L{l} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    o,
                    "{:<width$}  tables: {}; leaves: {}",
                    op.label,
                    lv(&sh.tables),
                    if sh.leaves.iter().any(|n| *n > 0) {
                        lv(&sh.leaves)
                    } else {
                        "none".to_string()
                    }
                );
            }
        }
    }
    refusals(
        &mut o,
        r.ops
            .iter()
            .map(|op| (op.label.as_str(), op.errors, op.first_error.as_deref())),
    );
    stack_table(&mut o, "whole run", &r.stacks, r.total_ps, 1);
    o
}

impl super::WorkloadKind for Sweep {
    type Output = IommuRunResult;
    const KINDS: &'static [super::Kind] = &[SWEEP];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<IommuRunResult, String> {
        run(s, progress)
    }

    fn work(&self, s: &Scenario) -> u128 {
        let page = s.work_page();
        let pages: u128 = self.sizes.iter().map(|&size| u128::from(size) / page).sum();
        super::IOMMU_PAGE_STEPS * pages * u128::from(self.iterations)
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

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<IommuRunResult, String> {
        run(s, progress)
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
        super::IOMMU_PAGE_STEPS * pages * u128::from(self.iterations)
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
mod tests {
    use super::*;

    pub(crate) const SWEEP: &str = r#"
[scenario]
name = "t"
platform = "sm8150"
kernel = "5.14"

[iommu]
granule = "4K"
ias = 48
smmu = "mmu-500"

[workload]
kind = "iommu_sweep"
sizes = ["4K", "2M"]
element = "4K"
layout = "scattered"
iterations = 2
"#;

    const OPS: &str = r#"
[scenario]
name = "ops"
platform = "sm8150"
kernel = "5.15"

[iommu]
granule = "4K"
ias = 48

[workload]
kind = "iommu_ops"
iterations = 2

[[workload.op]]
op = "map"
name = "a"
size = "4M"

[[workload.op]]
op = "map"
iova = "0x40000000"
size = "4M"
layout = "contiguous"

[[workload.op]]
op = "unmap"
iova = "0x40000000"
size = "4M"

[[workload.op]]
op = "unmap"
of = "a"
"#;

    fn parse(text: &str) -> Result<Scenario, InputError> {
        Scenario::parse("s.toml", text, std::path::Path::new("."))
    }

    #[test]
    fn sweep_parses_and_runs() {
        let s = parse(SWEEP).unwrap();
        let r = run(&s, &Progress::new()).unwrap();
        let u = r.op("unmap 2M").unwrap();
        assert_eq!(u.calls, 2);
        assert_eq!(u.per_call(Counter::SmmuTlbiva), 512.0);
        assert_eq!(
            r.op("unmap 4K").unwrap().per_call(Counter::SmmuTlbival),
            1.0
        );
        let stacks: u64 = r.stacks.iter().map(|s| s.self_ps).sum();
        assert_eq!(stacks, r.total_ps);
    }

    #[test]
    fn ops_run_with_allocated_and_fixed_iovas() {
        let s = parse(OPS).unwrap();
        let r = run(&s, &Progress::new()).unwrap();
        assert_eq!(r.ops.len(), 4);
        // 4 MB contiguous and 2 MB aligned in IOVA and PA: two 2 MB blocks, one TLBIVAL each.
        let u = &r.ops[2];
        assert_eq!(u.per_call(Counter::SmmuTlbival), 2.0);
        assert_eq!(r.ops[1].per_call(Counter::PgtableMapCall), 1.0);
        // The allocated 4 MB is size-aligned: two tables, freed with one walk flush each.
        assert_eq!(r.ops[3].per_call(Counter::SmmuTlbiasid), 2.0);
        assert_eq!(r.ops[3].per_call(Counter::PgtableUnmapCall), 1.0);
    }

    #[test]
    fn misuse_is_reported_with_the_result_and_the_run_goes_on() {
        // op[3] unmaps 0x40000000+4M twice over: op[2] already removed it, so each iteration's
        // op[3] finds a hole (the core WARNs and unmaps 0 bytes).
        let text = OPS.replace("of = \"a\"", "iova = \"0x40000000\"\nsize = \"4M\"");
        let r = run(&parse(&text).unwrap(), &Progress::new()).unwrap();
        assert_eq!((r.ops[3].calls, r.ops[3].errors), (2, 2));
        let first = r.ops[3].first_error.as_deref().unwrap();
        assert!(first.starts_with("iteration 0"), "{first}");
        // Mapping `a` is never unmapped now: its second map is reported as a leak, and runs.
        assert_eq!((r.ops[0].calls, r.ops[0].errors), (2, 1));
        assert!(r.ops[0].first_error.as_deref().unwrap().contains("leaked"));
        // The other operations ran every iteration, untouched.
        assert!(r.ops[1..3].iter().all(|o| o.calls == 2 && o.errors == 0));
        // Mapped at a fixed IOVA twice without unmapping: -EEXIST on the second iteration only.
        let text = OPS.replace("\n[[workload.op]]\nop = \"unmap\"\nof = \"a\"\n", "");
        let text = text.replacen("name = \"a\"\n", "name = \"a\"\niova = \"0x80000000\"\n", 1);
        let r = run(&parse(&text).unwrap(), &Progress::new()).unwrap();
        assert_eq!((r.ops[0].calls, r.ops[0].errors), (2, 1));
        let first = r.ops[0].first_error.as_deref().unwrap();
        assert!(first.starts_with("iteration 1"), "{first}");
    }

    #[test]
    fn errors_name_key_and_line() {
        let cases = [
            (
                "sizes = [\"4K\", \"2M\"]",
                "sizes = [\"4K\", \"6000\"]",
                "workload.sizes",
                14,
            ),
            ("ias = 48", "ias = 52", "iommu.ias", 9),
            ("smmu = \"mmu-500\"", "smmu = \"mmu-600\"", "iommu.smmu", 10),
            (
                "smmu = \"mmu-500\"",
                "smmu = \"smmu-v3.2\"",
                "iommu.smmu",
                10,
            ),
            ("granule = \"4K\"", "granule = \"8K\"", "iommu.granule", 8),
            (
                "element = \"4K\"",
                "element = \"6K\"",
                "workload.element",
                15,
            ),
            (
                "layout = \"scattered\"",
                "layout = \"random\"",
                "workload.layout",
                16,
            ),
            (
                "iterations = 2",
                "iterations = 0",
                "workload.iterations",
                17,
            ),
            (
                "kernel = \"5.14\"",
                "kernel = \"5.14\"\npolicy = { walk_flush = \"range\" }",
                "scenario.policy.walk_flush",
                6,
            ),
            (
                "iterations = 2",
                "iterations = 2\niova = \"0x1001\"",
                "workload.iova",
                18,
            ),
        ];
        for (from, to, key, line) in cases {
            let e = parse(&SWEEP.replace(from, to)).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
            assert_eq!(e.line, Some(line), "{to}: {e}");
        }
        let e = parse(
            &SWEEP
                .replace("ias = 48", "ias = 32")
                .replace("iterations = 2", "iterations = 2\niova = \"4G\""),
        )
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.iova"), "{e}");
        let e = parse(&OPS.replace("of = \"a\"", "of = \"b\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.op[3].of"), "{e}");
        let e =
            parse(&OPS.replace("size = \"4M\"\nlayout", "size = \"4100\"\nlayout")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.op[1].size"), "{e}");
    }
}
