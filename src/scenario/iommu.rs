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
//! whole range — seed 001's experiment) and `iommu_ops` (an explicit list of map and unmap
//! operations, at given IOVAs or at IOVAs from the allocator, repeated `iterations` times).
//!
//! Invariants: a scenario that parses has every size a multiple of the granule, every IOVA range
//! inside the input address space, an SMMU model the platform prices, and every `unmap.of`
//! naming an earlier map; a misuse that only running can reveal (mapping over a live mapping,
//! unmapping a hole) is reported as the kernel would (`-EEXIST`, a WARN and 0 bytes), as an error,
//! never a panic. Each operation's time is the Model clock's advance across it; its counts are
//! the ledger's difference across it, so per-operation figures and the breakdown agree.

use super::{Ctx, RunInfo, Scenario, Shared, Workload, progress};
use crate::hw::calls::{StackRow, stack_rows};
use crate::hw::model::{Model, SmmuKind};
use crate::hw::{Counter, Hw};
use crate::input::{InputError, parse_size};
use crate::iommu::iova::IovaDomain;
use crate::iommu::{IommuError, Prot};
use crate::platform::Profile;
use crate::report::{
    FORMAT_VERSION, HeadDoc, StackDoc, breakdown_docs, counts_map, header, human_ns, ns, refusals,
    stack_table, trim_float,
};
pub use crate::setup::{IommuConfig, SmmuModel};
use crate::setup::{iommu_domain_alloc, table_bytes, table_memory};
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
pub const MAX_MAP: u64 = 4 << 30;
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapOp {
    pub name: Option<String>,
    pub iova: IovaSpec,
    pub size: u64,
    pub element: u64,
    pub layout: Layout,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Map(MapOp),
    /// Unmap `[iova, iova + size)`.
    UnmapRange {
        iova: u64,
        size: u64,
    },
    /// Unmap everything the map op at this index mapped (and free its IOVA if allocated).
    UnmapOf {
        index: usize,
        name: String,
    },
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

/// `iommu_ops`: an explicit list of map and unmap operations, repeated `iterations` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ops {
    pub ops: Vec<Op>,
    pub iterations: u32,
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

/// `[iommu]`: the domain a device or an IOMMU workload maps through. Returns the configuration
/// and whether `smmu` was given (if not, the platform's `[smmu]` decides, after overrides too).
pub(crate) fn parse_section(
    c: &Ctx,
    io: &IommuSection,
    profile: &Profile,
) -> Result<(IommuConfig, bool), InputError> {
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
            coherent_walk: io.coherent_walk.unwrap_or(false),
        },
        smmu_given,
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
    Ok(Workload::IommuOps(Ops { ops, iterations }))
}

pub(crate) fn platform_smmu(p: &Profile) -> Option<SmmuModel> {
    p.model.smmu.map(|s| match s.kind {
        SmmuKind::Mmu500 => SmmuModel::Mmu500,
        SmmuKind::SmmuV3 => SmmuModel::SmmuV3 {
            range_inv: s.range_inv,
        },
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
    let refuse = |what: Option<std::ops::Range<usize>>, k: &str, why: &str| match what {
        Some(span) => Err(c.err(span, &key(k), why.to_string())),
        None => Ok(()),
    };
    match o.op.get_ref().as_str() {
        "map" => {
            refuse(
                o.of.as_ref().map(|s| s.span()),
                "of",
                "only an unmap names a mapping with `of`",
            )?;
            let Some(sz) = &o.size else {
                return Err(c.err(o.op.span(), &key("size"), "missing: a map needs a size"));
            };
            let size = c.granule_size(sz.get_ref(), sz.span(), &key("size"), cfg.granule)?;
            let element = element(c, &o.element, &key("element"), cfg.granule)?;
            if !size.is_multiple_of(element) {
                return Err(c.err(
                    sz.span(),
                    &key("size"),
                    format!("{size} bytes is not a whole number of {element}-byte elements"),
                ));
            }
            let iova = match &o.iova {
                None => IovaSpec::Alloc,
                Some(v) => c.iova(v, &key("iova"))?,
            };
            if let (IovaSpec::Fixed(a), Some(v)) = (iova, &o.iova) {
                c.check_range(v.span(), &key("iova"), a, size, cfg)?;
            }
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
                iova,
                size,
                element,
                layout: layout(c, &o.layout, &key("layout"))?,
            }))
        }
        "unmap" => {
            refuse(
                o.element.as_ref().map(|s| s.span()),
                "element",
                "only a map has elements",
            )?;
            refuse(
                o.layout.as_ref().map(|s| s.span()),
                "layout",
                "only a map has a layout",
            )?;
            refuse(
                o.name.as_ref().map(|s| s.span()),
                "name",
                "only a map is named; an unmap refers to one with `of`",
            )?;
            match (&o.of, &o.iova, &o.size) {
                (Some(of), None, None) => {
                    let index = earlier
                        .iter()
                        .position(
                            |e| matches!(e, Op::Map(m) if m.name.as_deref() == Some(of.get_ref())),
                        )
                        .ok_or_else(|| {
                            c.err(
                                of.span(),
                                &key("of"),
                                format!("no earlier map is named `{}`", of.get_ref()),
                            )
                        })?;
                    Ok(Op::UnmapOf {
                        index,
                        name: of.get_ref().clone(),
                    })
                }
                (None, Some(v), Some(sz)) => {
                    let size =
                        c.granule_size(sz.get_ref(), sz.span(), &key("size"), cfg.granule)?;
                    let iova = match c.iova(v, &key("iova"))? {
                        IovaSpec::Fixed(a) => a,
                        IovaSpec::Alloc => {
                            return Err(c.err(
                                v.span(),
                                &key("iova"),
                                "an unmap needs an address; to unmap an allocated mapping use `of = \"name\"`",
                            ));
                        }
                    };
                    c.check_range(v.span(), &key("iova"), iova, size, cfg)?;
                    Ok(Op::UnmapRange { iova, size })
                }
                _ => Err(c.err(
                    o.op.span(),
                    &key("op"),
                    "an unmap takes either `of = \"name\"` or both `iova` and `size`",
                )),
            }
        }
        other => Err(c.err(
            o.op.span(),
            &key("op"),
            format!("unknown operation `{other}`; choose map or unmap"),
        )),
    }
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
) -> Result<crate::iommu::core::IommuDomain, String> {
    iommu_domain_alloc(
        hw,
        cfg,
        &s.profile,
        &s.policies,
        table_memory(table_bytes(mapped)),
    )
    .map_err(|e| e.to_string())
}

struct Meter {
    ops: Vec<OpStat>,
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
        });
        self.ops.len() - 1
    }
}

/// Run a checked IOMMU scenario on the Model. What the modelled kernel refuses (mapping over a
/// live mapping, unmapping a hole) is recorded on the operation and the run goes on; only a
/// domain that cannot be set up ends it.
pub fn run(s: &Scenario) -> Result<IommuRunResult, String> {
    let cfg = s
        .iommu
        .ok_or_else(|| format!("scenario `{}` has no [iommu] domain", s.name))?;
    let mut hw = Model::new(s.profile.model.clone());
    let mut m = Meter { ops: Vec::new() };
    match &s.workload {
        Workload::IommuSweep(w) => {
            for &size in &w.sizes {
                let label = size_label(size);
                let map = m.slot(format!("map_sg {label}"), "iommu_map_sg", size);
                let unmap = m.slot(format!("unmap {label}"), "iommu_unmap", size);
                let mut d =
                    new_domain(&mut hw, s, &cfg, size).map_err(|e| format!("domain: {e}"))?;
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
                    progress::advance(1);
                }
                m.ops[map].iova = w.iova;
                m.ops[unmap].iova = w.iova;
            }
        }
        Workload::IommuOps(w) => run_ops(&mut hw, &mut m, s, &cfg, &w.ops, w.iterations)?,
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
        workload: s.workload.clone(),
        ops: m.ops,
        counts: hw.ledger.totals(),
        stacks,
        total_ps: hw.ledger.total_ps(),
    })
}

fn run_ops(
    hw: &mut Model,
    m: &mut Meter,
    s: &Scenario,
    cfg: &IommuConfig,
    ops: &[Op],
    iterations: u32,
) -> Result<(), String> {
    let mapped: u64 = ops
        .iter()
        .map(|o| match o {
            Op::Map(mo) => mo.size,
            _ => 0,
        })
        .sum();
    let mut d = new_domain(hw, s, cfg, mapped).map_err(|e| format!("domain: {e}"))?;
    let mut iovad = IovaDomain::new(hw, cfg.granule, 1, 1)
        .map_err(|e| format!("IOVA domain: {e}"))?
        .with_rules(s.policies.iova.rules());
    let shift = cfg.granule.trailing_zeros();
    let limit_pfn = ((1u64 << cfg.ias) >> shift) - 1;
    for (i, o) in ops.iter().enumerate() {
        let (label, call, bytes) = match o {
            Op::Map(mo) => (
                format!("op[{i}] map {}", size_label(mo.size)),
                "iommu_map_sg",
                mo.size,
            ),
            Op::UnmapRange { size, .. } => (
                format!("op[{i}] unmap {}", size_label(*size)),
                "iommu_unmap",
                *size,
            ),
            Op::UnmapOf { index, name } => {
                let size = match &ops[*index] {
                    Op::Map(mo) => mo.size,
                    _ => 0,
                };
                (format!("op[{i}] unmap {name}"), "iommu_unmap", size)
            }
        };
        m.slot(label, call, bytes);
    }
    // Where each map op's mapping currently lives (and whether its IOVA came from the allocator).
    let mut live: Vec<Option<(u64, bool)>> = vec![None; ops.len()];
    for it in 0..iterations {
        for (i, o) in ops.iter().enumerate() {
            let at = |e: IommuError| format!("iteration {it}: {e}");
            match o {
                Op::Map(mo) => {
                    let segs = segments(data_base(i, mo.size), mo.size, mo.element, mo.layout);
                    let pages = mo.size >> shift;
                    let r = m.time(hw, i, |hw| {
                        let (iova, alloc) = match mo.iova {
                            IovaSpec::Fixed(a) => (a, false),
                            IovaSpec::Alloc => {
                                let pfn = iovad.alloc_iova_fast(hw, 0, pages, limit_pfn, true)?;
                                (pfn << shift, true)
                            }
                        };
                        let r = d.iommu_map_sg(hw, IovaAddr(iova), &segs, Prot::RW);
                        if r.is_err() && alloc {
                            let _ = iovad.free_iova_fast(hw, 0, iova >> shift, pages);
                        }
                        r.map(|_| (iova, alloc))
                    });
                    let (iova, alloc) = match r {
                        Ok(x) => x,
                        Err(e) => {
                            m.refused(i, at(e));
                            continue;
                        }
                    };
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
                Op::UnmapRange { iova, size } => {
                    if let Err(e) = m.time(hw, i, |hw| d.iommu_unmap(hw, IovaAddr(*iova), *size)) {
                        m.refused(i, at(e));
                    }
                    m.ops[i].iova = *iova;
                    // A fixed-IOVA mapping that started in the range is gone (or cut short).
                    for l in live.iter_mut() {
                        if l.is_some_and(|(a, alloc)| !alloc && a >= *iova && a < *iova + *size) {
                            *l = None;
                        }
                    }
                }
                Op::UnmapOf { index, name } => {
                    let Some((iova, alloc)) = live[*index].take() else {
                        m.refused(i, format!("iteration {it}: mapping `{name}` is not mapped"));
                        continue;
                    };
                    let size = m.ops[*index].bytes;
                    let r = m.time(hw, i, |hw| {
                        let r = d.iommu_unmap(hw, IovaAddr(iova), size);
                        if alloc {
                            iovad.free_iova_fast(hw, 0, iova >> shift, size >> shift)?;
                        }
                        r
                    });
                    if let Err(e) = r {
                        m.refused(i, at(e));
                    }
                    m.ops[i].iova = iova;
                }
            }
        }
        progress::advance(1);
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
        },
        workload: IommuWorkloadDoc {
            kind: r.workload.kind(),
            iterations: iommu_iterations(&r.workload),
        },
        ops: r
            .ops
            .iter()
            .map(|o| IommuOpDoc {
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
];

/// The `dmasim run` terminal table of an IOMMU scenario.
pub fn table(r: &IommuRunResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let _ = writeln!(
        o,
        "iommu      {} KiB granule, {}-bit IAS, {}, {} table walker",
        r.iommu.granule >> 10,
        r.iommu.ias,
        r.iommu.smmu.name(),
        if r.iommu.coherent_walk {
            "coherent"
        } else {
            "non-coherent"
        }
    );
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
    let _ = write!(o, "\n{:<20} {:>7} {:>14}", "operation", "calls", "mean");
    for (_, h) in &cols {
        let _ = write!(o, " {h:>10}");
    }
    let _ = writeln!(o);
    for op in &r.ops {
        let _ = write!(
            o,
            "{:<20} {:>7} {:>14}",
            op.label,
            op.calls,
            human_ns(op.mean_ns())
        );
        for (c, _) in &cols {
            let _ = write!(o, " {:>10}", trim_float(op.per_call(*c)));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "(operation counts are per call)");
    refusals(
        &mut o,
        r.ops
            .iter()
            .map(|op| (op.label.as_str(), op.errors, op.first_error.as_deref())),
    );
    stack_table(&mut o, "whole run", &r.stacks, r.total_ps, 1);
    o
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
        let r = run(&s).unwrap();
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
        let r = run(&s).unwrap();
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
        let r = run(&parse(&text).unwrap()).unwrap();
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
        let r = run(&parse(&text).unwrap()).unwrap();
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
