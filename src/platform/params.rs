//! The registry of profile parameters: every key a platform profile may give, declared once.
//!
//! Kernel counterpart: none — a profile describes the machine; this table says, for each of its
//! numbers, what it is, how it is checked, where the model reads it and which operations it
//! prices, as `hw/sw_costs.rs` does for the `[sw]` table.
//!
//! What derives from it: the range checks of the resolver (`Resolver::checked`), the listing of a
//! profile's values with their sources ([`Profile::params`](super::Profile::params)), which keys
//! `--sensitivity` perturbs, how it moves them and when a run used them, and the parameter table
//! of docs/profiles.md (its docs test renders [`markdown_table`] and compares).
//!
//! Invariants: one row per key; a keyed family (`sw.<name>`, `memory_type.<type>.read_<N>`) is
//! one row whose `<…>` part matches one key segment; rows are in file order of sections, which is
//! the order `params()` lists them in; the serde schema (`schema.rs`) and this table name the same
//! keys (the tests walk every built-in profile both ways).

use super::*;
use crate::hw::Counter;
use crate::hw::memory::MemType;

/// What a parameter is. It decides whether `--sensitivity` perturbs it and what its table says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A time the model charges for an operation, in `ns` or `cycles`.
    Cost,
    /// A bandwidth the model paces a transfer by.
    Rate,
    /// The clock every `cycles` cost is counted in.
    Clock,
    /// A size, a line length, an associativity.
    Geometry,
    /// A number of things: CPUs, buffers, instructions.
    Count,
    /// A yes/no property of the hardware, or its kind.
    Property,
    /// The NUMA topology: nodes, distances, latency tables.
    Topology,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cost => "cost",
            Kind::Rate => "rate",
            Kind::Clock => "clock",
            Kind::Geometry => "geometry",
            Kind::Count => "count",
            Kind::Property => "property",
            Kind::Topology => "topology",
        }
    }

    /// Why `--sensitivity` leaves a parameter of this kind alone, or `None` if it perturbs it.
    pub fn not_perturbed(self) -> Option<&'static str> {
        match self {
            Kind::Cost | Kind::Rate => None,
            Kind::Clock => {
                Some("the clock of every `cycles` cost: moving it moves them all together")
            }
            Kind::Geometry => Some("geometry, not a cost"),
            Kind::Count => Some("a count, not a cost"),
            Kind::Property | Kind::Topology => {
                Some("not a cost the model charges: a topology or a property")
            }
        }
    }
}

/// The range a value must lie in; the resolver's message for a value outside it comes from here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    /// `ns` or `cycles`: finite, non-negative, at most [`MAX_COST_NS`] once in ns.
    Cost,
    /// A power of two from `min` to `max`.
    PowerOfTwo { min: u64, max: u64 },
    /// A whole number from `min` to `max`, in the row's unit.
    Whole { min: f64, max: f64 },
    /// A number from `min` (or more than `min`, if `open`) to `max`, in the row's unit.
    Range { min: f64, max: f64, open: bool },
    /// `true` or `false`.
    Flag,
    /// Checked as a whole by its section's resolver (a table, a list of CPUs).
    Section,
}

impl Check {
    /// The rule as the docs table says it.
    pub fn describe(self, unit: &str) -> String {
        match self {
            Check::Cost => format!("0 to {MAX_COST_NS} ns"),
            Check::PowerOfTwo { min, max } => format!("power of two, {min} to {max}"),
            Check::Whole { min, max } => format!("whole, {min} to {max}"),
            Check::Range {
                min,
                max,
                open: true,
            } => format!("more than {min}, at most {max} {unit}"),
            Check::Range { min, max, .. } => format!("{min} to {max} {unit}"),
            Check::Flag => "true or false".into(),
            Check::Section => "see its section".into(),
        }
    }

    /// `None` if `x` passes, else what it must be.
    pub fn violation(self, unit: &str, x: f64) -> Option<String> {
        let bad = match self {
            Check::Cost | Check::Flag | Check::Section => false,
            Check::PowerOfTwo { min, max } => {
                !(min as f64..=max as f64).contains(&x)
                    || x.fract() != 0.0
                    || !(x as u64).is_power_of_two()
            }
            Check::Whole { min, max } => !(min..=max).contains(&x) || x.fract() != 0.0,
            Check::Range { min, max, open } => x > max || x < min || (open && x == min),
        };
        bad.then(|| match self {
            Check::PowerOfTwo { min, max } => {
                format!("must be a power of two from {min} to {max}, found {x}")
            }
            Check::Whole { min, max } => {
                format!("must be a whole number of {unit} from {min} to {max}, found {x}")
            }
            Check::Range { min, max, open } if open => {
                format!("must be more than {min} and at most {max} {unit}, found {x}")
            }
            _ => format!("must be {}, found {x}", self.describe(unit)),
        })
    }
}

/// Which sources a parameter may cite (docs/profiles.md, "Rules").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceRule {
    /// Measured, cited, fitted or held: a cost may be fitted to the rows its source names.
    Any,
    /// Read from the hardware's documentation or firmware, measured, or held: what a machine
    /// *is* (its geometry, its topology, its counts) is never fitted to timings.
    NotFitted,
}

impl SourceRule {
    pub fn describe(self) -> &'static str {
        match self {
            SourceRule::Any => "any",
            SourceRule::NotFitted => "not `fit:`",
        }
    }

    pub fn allows(self, kind: SourceKind) -> bool {
        self == SourceRule::Any || kind != SourceKind::Fitted
    }
}

/// When a run counts as having used a parameter (so `--sensitivity` perturbs it).
#[derive(Clone, Copy, Debug)]
pub enum Used {
    /// When any of these operations was counted.
    Any(&'static [Counter]),
    /// When the run went through a layer that charges this `[sw]` cost.
    Sw,
    /// When the scenario runs a pipeline: the ACP's rate paces its engine and no counter says so.
    Pipeline,
    /// Never: not a cost.
    Never,
}

/// A value as the file gives it.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    Param(&'a Param),
    Cost(&'a Cost),
    Flag(&'a FlagParam),
}

/// How a row's values are found in a profile.
#[derive(Clone, Copy)]
pub enum Get {
    /// The one value at this key, if the profile gives it.
    One(for<'a> fn(&'a ProfileFile) -> Option<Value<'a>>),
    /// Every key of a family the profile gives, or a value rendered from its resolved form.
    Many(fn(&Profile) -> Vec<ParamInfo>),
}

/// Scale the resolved value of `key` in a profile by a factor; false if the profile has none.
pub type Scale = fn(&mut Profile, &str, f64) -> bool;

/// One row of the registry.
#[derive(Clone, Copy)]
pub struct ParamDef {
    /// The key as `--set platform.KEY` and reports write it; `<…>` is one segment of a family.
    pub key: &'static str,
    pub kind: Kind,
    /// The unit of `value` (costs: `ns` or `cycles`, as written).
    pub unit: &'static str,
    /// When a profile must give it.
    pub need: &'static str,
    pub check: Check,
    pub source: SourceRule,
    /// Where the model reads it.
    pub reads: &'static str,
    pub used: Used,
    pub get: Get,
    /// How `--sensitivity` moves it, for costs and rates.
    pub scale: Option<Scale>,
}

impl ParamDef {
    /// Whether `key` is this row's key, or one of its family. A `<…>` part matches one segment,
    /// or in last place the rest of the key (`[sw]` names have dots of their own).
    pub fn matches(&self, key: &str) -> bool {
        let (mut p, mut k) = (self.key.split('.').peekable(), key);
        while let Some(ps) = p.next() {
            let last = p.peek().is_none();
            let (ks, rest) = match k.split_once('.') {
                Some((ks, rest)) if !last => (ks, Some(rest)),
                Some(_) => (k, None),
                None => (k, None),
            };
            let ok = match ps.find('<') {
                Some(i) => ks.len() > i && ks.starts_with(&ps[..i]),
                None => ps == ks,
            };
            match rest {
                Some(rest) if ok && !last => k = rest,
                None if ok && last => return true,
                _ => return false,
            }
        }
        false
    }

    /// This row's values in `p`, each with its key and source.
    pub fn values(&self, p: &Profile) -> Vec<ParamInfo> {
        match self.get {
            Get::One(get) => get(&p.file)
                .map(|v| info(self.key, self.unit, v))
                .into_iter()
                .collect(),
            Get::Many(get) => get(p),
        }
    }
}

/// The row for `key`, if the registry has one.
pub fn def(key: &str) -> Option<&'static ParamDef> {
    PARAMS.iter().find(|d| d.matches(key))
}

fn info(key: &str, unit: &str, v: Value) -> ParamInfo {
    let (value, unit, source) = match v {
        Value::Param(p) if unit.is_empty() => (p.value.get_ref().to_string(), unit, &p.source),
        Value::Param(p) => (format!("{} {unit}", p.value.get_ref()), unit, &p.source),
        Value::Cost(c) => match (&c.ns, &c.cycles) {
            (Some(ns), _) => (format!("{} ns", ns.get_ref()), "ns", &c.source),
            (_, Some(cy)) => (format!("{} cycles", cy.get_ref()), "cycles", &c.source),
            _ => (String::new(), "", &c.source),
        },
        Value::Flag(f) => (f.value.get_ref().to_string(), "", &f.source),
    };
    ParamInfo {
        key: key.to_string(),
        value,
        unit: unit.to_string(),
        source: source.get_ref().clone(),
    }
}

fn scale_ps(v: Option<&mut u64>, f: f64) -> bool {
    match v {
        Some(v) => {
            // Resolved costs are at most a second (MAX_COST_NS), far from where a float loses a
            // picosecond; `as` saturates rather than wraps.
            *v = (*v as f64 * f).round() as u64;
            true
        }
        None => false,
    }
}

fn maint(p: &mut Profile, op: CacheOp) -> Option<&mut crate::hw::model::MaintCost> {
    p.model.maint[op as usize].as_mut()
}

/// A `[memory_type.<type>]` key's resolved cost.
fn mem_cost<'a>(p: &'a mut Profile, key: &str) -> Option<&'a mut u64> {
    let mut parts = key.split('.').skip(1);
    let (t, k) = (MemType::from_key(parts.next()?)?, parts.next()?);
    let mem = p.model.mem.as_mut()?;
    match (t, k) {
        (MemType::Cached, "fill_l2") => Some(&mut mem.fill_l2_ps),
        (MemType::Cached, "fill_memory") => Some(&mut mem.fill_memory_ps),
        _ => {
            let (write, n) = k
                .strip_prefix("read_")
                .map(|n| (false, n))
                .or_else(|| k.strip_prefix("write_").map(|n| (true, n)))?;
            let tc = mem.types[t as usize].as_mut()?;
            let list = if write { &mut tc.write } else { &mut tc.read };
            let size: u64 = n.parse().ok()?;
            list.iter_mut().find(|c| c.0 == size).map(|c| &mut c.1)
        }
    }
}

fn memory_types(p: &Profile, fill: bool) -> Vec<ParamInfo> {
    let mut out = Vec::new();
    for (t, costs) in p.file.memory_type.iter().flatten() {
        for (k, c) in costs {
            if k.get_ref().starts_with("fill_") == fill {
                let key = format!("memory_type.{}.{}", t.get_ref(), k.get_ref());
                out.push(info(&key, "ns", Value::Cost(c)));
            }
        }
    }
    out
}

fn ns_rows(rows: &[Vec<u64>]) -> String {
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            let v: Vec<String> = r
                .iter()
                .map(|p| format!("{}", *p as f64 / 1000.0))
                .collect();
            format!("[{}]", v.join(", "))
        })
        .collect();
    rows.join(" ")
}

/// The cache operations in `[cache]` order, with their counters.
const MAINT: [(CacheOp, Counter); 3] = [
    (CacheOp::Clean, Counter::CacheCleanLine),
    (CacheOp::Inval, Counter::CacheInvalLine),
    (CacheOp::CleanInval, Counter::CacheCleanInvalLine),
];

/// Rows for one cache operation's three costs.
macro_rules! maint_rows {
    ($op:literal, $field:ident, $cop:expr, $counter:expr) => {
        [
            ParamDef {
                key: concat!("cache.", $op, ".issue"),
                unit: "ns",
                reads: "`Hw::cache_maint`: CPU time to issue one line's operation",
                get: Get::One(|f| f.cache.$field.as_ref().map(|m| Value::Cost(&m.issue))),
                scale: Some(|p, _, f| scale_ps(maint(p, $cop).map(|c| &mut c.issue_ps), f)),
                ..maint_cost($counter)
            },
            ParamDef {
                key: concat!("cache.", $op, ".latency"),
                unit: "ns",
                reads: "`Hw::cache_maint`, `Hw::barrier`: issue to completion at the point of coherency",
                get: Get::One(|f| f.cache.$field.as_ref().map(|m| Value::Cost(&m.latency))),
                scale: Some(|p, _, f| scale_ps(maint(p, $cop).map(|c| &mut c.latency_ps), f)),
                ..maint_cost($counter)
            },
            ParamDef {
                key: concat!("cache.", $op, ".interval"),
                unit: "ns",
                need: "optional (0)",
                reads: "`Hw::cache_maint`: least spacing of completions",
                get: Get::One(|f| {
                    f.cache
                        .$field
                        .as_ref()
                        .and_then(|m| m.interval.as_ref())
                        .map(Value::Cost)
                }),
                scale: Some(|p, _, f| scale_ps(maint(p, $cop).map(|c| &mut c.interval_ps), f)),
                ..maint_cost($counter)
            },
        ]
    };
}

const fn maint_cost(c: &'static [Counter]) -> ParamDef {
    ParamDef {
        key: "",
        kind: Kind::Cost,
        unit: "ns",
        need: "for the operations the arch layer issues",
        check: Check::Cost,
        source: SourceRule::Any,
        reads: "",
        used: Used::Any(c),
        get: Get::Many(|_| Vec::new()),
        scale: None,
    }
}

/// A cost row: charged when any of `used` is counted.
const fn cost(
    key: &'static str,
    need: &'static str,
    reads: &'static str,
    used: Used,
    get: for<'a> fn(&'a ProfileFile) -> Option<Value<'a>>,
    scale: Scale,
) -> ParamDef {
    ParamDef {
        key,
        kind: Kind::Cost,
        unit: "ns",
        need,
        check: Check::Cost,
        source: SourceRule::Any,
        reads,
        used,
        get: Get::One(get),
        scale: Some(scale),
    }
}

/// A number that is not a cost.
const fn fixed(
    key: &'static str,
    kind: Kind,
    unit: &'static str,
    need: &'static str,
    check: Check,
    reads: &'static str,
    get: for<'a> fn(&'a ProfileFile) -> Option<Value<'a>>,
) -> ParamDef {
    ParamDef {
        key,
        kind,
        unit,
        need,
        check,
        source: SourceRule::NotFitted,
        reads,
        used: Used::Never,
        get: Get::One(get),
        scale: None,
    }
}

/// An instruction-count row of `[code.swiotlb_2012]`.
macro_rules! code_row {
    ($k:ident) => {
        fixed(
            concat!("code.swiotlb_2012.", stringify!($k)),
            Kind::Count,
            "instructions",
            "with per-instruction `[sw]` costs",
            Check::Whole {
                min: 0.0,
                max: MAX_GROUP_INSNS,
            },
            "`Hw::sw` of the 2012 swiotlb's per-instruction costs",
            |f| {
                f.code
                    .as_ref()?
                    .swiotlb_2012
                    .as_ref()
                    .map(|c| Value::Param(&c.$k))
            },
        )
    };
}

/// An SMMU cost row.
macro_rules! smmu_row {
    ($k:ident, $ps:ident, $need:expr, $reads:expr, $used:expr) => {
        cost(
            concat!("smmu.", stringify!($k)),
            $need,
            $reads,
            Used::Any($used),
            |f| f.smmu.as_ref().map(|s| Value::Cost(&s.$k)),
            |p, _, f| scale_ps(p.model.smmu.as_mut().map(|s| &mut s.$ps), f),
        )
    };
}

/// An outer-cache line-operation row.
macro_rules! outer_row {
    ($k:ident, $op:expr, $way:ident, $counter:expr, $reads:expr) => {
        cost(
            concat!("outer_cache.", stringify!($k)),
            "with `[outer_cache]`",
            $reads,
            Used::Any(&[$counter]),
            |f| f.outer_cache.as_ref().map(|o| Value::Cost(&o.$k)),
            |p, _, f| scale_ps(p.model.outer.as_mut().map(|o| &mut o.$way[$op as usize]), f),
        )
    };
}

const SMMU_MMIO: &[Counter] = &[
    Counter::SmmuTlbiva,
    Counter::SmmuTlbival,
    Counter::SmmuTlbiasid,
    Counter::SmmuTlbsync,
    Counter::SmmuCmdqBase,
    Counter::CmdqBatch,
];

const CM: [ParamDef; 3] = maint_rows!("clean", clean, CacheOp::Clean, &[MAINT[0].1]);
const IM: [ParamDef; 3] = maint_rows!("inval", inval, CacheOp::Inval, &[MAINT[1].1]);
const CIM: [ParamDef; 3] = maint_rows!(
    "clean_inval",
    clean_inval,
    CacheOp::CleanInval,
    &[MAINT[2].1]
);

/// Every profile parameter, in file order of sections.
pub static PARAMS: &[ParamDef] = &[
    fixed(
        "platform.cpu_freq_mhz",
        Kind::Clock,
        "MHz",
        "required",
        Check::Range {
            min: MIN_FREQ_MHZ,
            max: MAX_FREQ_MHZ,
            open: false,
        },
        "every `cycles` cost, converted to ps at resolve",
        |f| Some(Value::Param(&f.platform.cpu_freq_mhz)),
    ),
    fixed(
        "platform.cpus",
        Kind::Count,
        "CPUs",
        "optional",
        Check::Whole {
            min: 1.0,
            max: 4096.0,
        },
        "workloads that spread over cores, as their default `[workload] cpus`",
        |f| f.platform.cpus.as_ref().map(Value::Param),
    ),
    fixed(
        "cache.line_bytes",
        Kind::Geometry,
        "B",
        "required",
        Check::PowerOfTwo {
            min: 4,
            max: MAX_LINE_BYTES as u64,
        },
        "`Hw::line_bytes`: the stride of every by-line maintenance loop",
        |f| Some(Value::Param(&f.cache.line_bytes)),
    ),
    cost(
        "cache.line_transfer",
        "optional (0; a `[numa]` topology prices lines by node instead)",
        "`Hw::spin_lock` / `Hw::atomic` / `Hw::wait_on`: a shared line another CPU wrote last, moved to this one",
        Used::Any(&[Counter::NumaLine]),
        |f| f.cache.line_transfer.as_ref().map(Value::Cost),
        |p, _, f| scale_ps(p.model.line_transfer_ps.as_mut(), f),
    ),
    fixed(
        "cache.size_kib",
        Kind::Geometry,
        "KiB",
        "with `[cache_model]`",
        Check::PowerOfTwo {
            min: 1,
            max: 1 << 20,
        },
        "the cache model's L1 sets",
        |f| f.cache.size_kib.as_ref().map(Value::Param),
    ),
    fixed(
        "cache.ways",
        Kind::Geometry,
        "ways",
        "with `[cache_model]`",
        Check::PowerOfTwo { min: 1, max: 64 },
        "the cache model's L1 ways",
        |f| f.cache.ways.as_ref().map(Value::Param),
    ),
    CM[0],
    CM[1],
    CM[2],
    IM[0],
    IM[1],
    IM[2],
    CIM[0],
    CIM[1],
    CIM[2],
    cost(
        "barrier.cost",
        "required",
        "`Hw::barrier`: a full barrier (`DSB SY`, `MFENCE`) after its maintenance completes",
        Used::Any(&[Counter::Barrier]),
        |f| Some(Value::Cost(&f.barrier.cost)),
        |p, _, f| scale_ps(Some(&mut p.model.barrier_ps), f),
    ),
    cost(
        "barrier.wmb",
        "with `[iommu]` scenarios",
        "`Hw::wmb`: io-pgtable's and the SMMU drivers' write barriers",
        Used::Any(&[Counter::Wmb]),
        |f| f.barrier.wmb.as_ref().map(Value::Cost),
        |p, _, f| scale_ps(p.model.wmb_ps.as_mut(), f),
    ),
    cost(
        "memory.copy.call",
        "optional (0)",
        "`Hw::copy`: per copy, whatever its length",
        Used::Any(&[Counter::BounceCopy]),
        |f| {
            f.memory
                .as_ref()?
                .copy
                .as_ref()?
                .call
                .as_ref()
                .map(Value::Cost)
        },
        |p, _, f| scale_ps(p.model.copy.as_mut().map(|c| &mut c.call_ps), f),
    ),
    cost(
        "memory.copy.per_byte",
        "with bounce buffers",
        "`Hw::copy`: per byte copied (resolved in fs)",
        Used::Any(&[Counter::BounceCopy]),
        |f| {
            f.memory
                .as_ref()?
                .copy
                .as_ref()
                .map(|c| Value::Cost(&c.per_byte))
        },
        |p, _, f| scale_ps(p.model.copy.as_mut().map(|c| &mut c.per_byte_fs), f),
    ),
    ParamDef {
        key: "sw.<name>",
        kind: Kind::Cost,
        unit: "ns",
        need: "for the layers a scenario goes through (`dmasim costs`)",
        check: Check::Cost,
        source: SourceRule::Any,
        reads: "`Hw::sw`: a stretch of kernel code, by `SwKey` (hw/sw_costs.rs)",
        used: Used::Sw,
        get: Get::Many(|p| {
            p.file
                .sw
                .iter()
                .map(|(k, c)| info(&format!("sw.{}", k.get_ref()), "ns", Value::Cost(c)))
                .collect()
        }),
        scale: Some(|p, key, f| scale_ps(p.model.sw.get_mut(&key["sw.".len()..]), f)),
    },
    ParamDef {
        key: "acp.bandwidth_mb_s",
        kind: Kind::Rate,
        unit: "MB/s",
        need: "with `[acp]`",
        check: Check::Range {
            min: 0.0,
            max: MAX_PORT_MB_S,
            open: true,
        },
        source: SourceRule::Any,
        reads: "pipeline workloads: the engine's rate through the ACP",
        used: Used::Pipeline,
        get: Get::One(|f| f.acp.as_ref().map(|a| Value::Param(&a.bandwidth_mb_s))),
        scale: Some(|p, _, f| match p.acp_mb_s.as_mut() {
            Some(v) => {
                *v *= f;
                true
            }
            None => false,
        }),
    },
    ParamDef {
        key: "memory.write_bandwidth_mb_s",
        kind: Kind::Rate,
        unit: "MB/s",
        need: "optional (write-backs at issue rate); not with `[cache_model]`",
        check: Check::Range {
            min: 0.0,
            max: MAX_DRAM_MB_S,
            open: true,
        },
        source: SourceRule::Any,
        reads: "`Hw::cache_maint`: each dirty line a clean writes back occupies its node's DRAM write channel for line_bytes / bandwidth",
        used: Used::Any(&[Counter::CacheCleanLine, Counter::CacheCleanInvalLine]),
        get: Get::One(|f| {
            f.memory
                .as_ref()?
                .write_bandwidth_mb_s
                .as_ref()
                .map(Value::Param)
        }),
        // A faster channel is a shorter write-back.
        scale: Some(|p, _, f| match p.model.dram_write_ps.as_mut() {
            Some(v) => {
                *v = (*v as f64 / f).ceil() as u64;
                true
            }
            None => false,
        }),
    },
    code_row!(frame),
    code_row!(bug_on_dir),
    code_row!(saved_reg),
    code_row!(call),
    code_row!(test_result),
    code_row!(range_check),
    code_row!(compare_result),
    code_row!(sync_single_live),
    code_row!(unmap_single_live),
    code_row!(mapping_error_live),
    smmu_row!(
        mmio_write,
        mmio_write_ps,
        "with `[smmu]`",
        "SMMU model: a register write (TLBI, TLBSYNC, a queue's producer index)",
        SMMU_MMIO
    ),
    smmu_row!(
        mmio_read,
        mmio_read_ps,
        "with `[smmu]`",
        "SMMU model: one poll of `TLBSTATUS`",
        &[Counter::SmmuTlbstatusRead]
    ),
    smmu_row!(
        tlbi_va,
        tlbi_va_ps,
        "with `[smmu]`",
        "SMMU model: the SMMU's work for one invalidation by address",
        &[
            Counter::SmmuTlbiva,
            Counter::SmmuTlbival,
            Counter::CmdqTlbiNhVa
        ]
    ),
    smmu_row!(
        tlbi_asid,
        tlbi_asid_ps,
        "with `[smmu]`",
        "SMMU model: the SMMU's work for one invalidation by ASID",
        &[Counter::SmmuTlbiasid, Counter::CmdqTlbiNhAsid]
    ),
    smmu_row!(
        sync,
        sync_ps,
        "with `[smmu]`",
        "SMMU model: a TLB sync's or `CMD_SYNC`'s completion",
        &[Counter::SmmuTlbsync, Counter::CmdqSync]
    ),
    cost(
        "smmu.cmdq_write",
        "with an `smmu-v3`",
        "SMMU model: the CPU writing one 16-byte command into the queue",
        Used::Any(&[
            Counter::CmdqTlbiNhVa,
            Counter::CmdqTlbiNhAsid,
            Counter::CmdqSync,
        ]),
        |f| f.smmu.as_ref()?.cmdq_write.as_ref().map(Value::Cost),
        |p, _, f| scale_ps(p.model.smmu.as_mut().map(|s| &mut s.cmdq_write_ps), f),
    ),
    fixed(
        "smmu.coherent_walk",
        Kind::Property,
        "",
        "with `[smmu]`",
        Check::Flag,
        "io-pgtable: a coherent walker needs no PTE cleans",
        |f| f.smmu.as_ref().map(|s| Value::Flag(&s.coherent_walk)),
    ),
    fixed(
        "outer_cache.size_kib",
        Kind::Geometry,
        "KiB",
        "with `[outer_cache]`",
        Check::PowerOfTwo {
            min: 1,
            max: 1 << 16,
        },
        "`Hw::outer_way_op` (lines per way operation) and the cache model's L2 sets",
        |f| f.outer_cache.as_ref().map(|o| Value::Param(&o.size_kib)),
    ),
    fixed(
        "outer_cache.ways",
        Kind::Geometry,
        "ways",
        "with `[outer_cache]`",
        Check::PowerOfTwo { min: 1, max: 16 },
        "the cache model's L2 ways",
        |f| f.outer_cache.as_ref().map(|o| Value::Param(&o.ways)),
    ),
    outer_row!(
        clean_line,
        CacheOp::Clean,
        line_ps,
        Counter::OuterCleanLine,
        "`Hw::outer_line_op`: one `CLEAN_LINE_PA` and its operation"
    ),
    outer_row!(
        inval_line,
        CacheOp::Inval,
        line_ps,
        Counter::OuterInvalLine,
        "`Hw::outer_line_op`: one `INV_LINE_PA` and its operation"
    ),
    outer_row!(
        clean_inval_line,
        CacheOp::CleanInval,
        line_ps,
        Counter::OuterCleanInvalLine,
        "`Hw::outer_line_op`: one `CLEAN_INV_LINE_PA` and its operation"
    ),
    cost(
        "outer_cache.sync",
        "with `[outer_cache]`",
        "`Hw::outer_sync`: one `CACHE_SYNC` until the controller drains",
        Used::Any(&[Counter::OuterSync]),
        |f| f.outer_cache.as_ref().map(|o| Value::Cost(&o.sync)),
        |p, _, f| scale_ps(p.model.outer.as_mut().map(|o| &mut o.sync_ps), f),
    ),
    outer_row!(
        clean_way_line,
        CacheOp::Clean,
        way_line_ps,
        Counter::OuterCleanWay,
        "`Hw::outer_way_op`: per line walked by a clean by way"
    ),
    outer_row!(
        clean_inval_way_line,
        CacheOp::CleanInval,
        way_line_ps,
        Counter::OuterCleanInvalWay,
        "`Hw::outer_way_op`: per line walked by a clean-and-invalidate by way"
    ),
    ParamDef {
        key: "cache_model",
        kind: Kind::Property,
        unit: "",
        need: "with `[cache_model]`",
        check: Check::Section,
        source: SourceRule::NotFitted,
        reads: "the cache model's inclusion and replacement",
        used: Used::Never,
        get: Get::Many(|p| {
            p.file
                .cache_model
                .iter()
                .map(|m| ParamInfo {
                    key: "cache_model".into(),
                    value: format!(
                        "{:?} inclusion, {:?} replacement",
                        m.inclusion.get_ref(),
                        m.replacement.get_ref()
                    ),
                    unit: "".into(),
                    source: m.source.get_ref().clone(),
                })
                .collect()
        }),
        scale: None,
    },
    fixed(
        "cache_model.l1_write_allocate",
        Kind::Property,
        "",
        "with `[cache_model]`",
        Check::Flag,
        "the cache model: whether a write miss allocates in the L1",
        |f| {
            f.cache_model
                .as_ref()
                .map(|m| Value::Flag(&m.l1_write_allocate))
        },
    ),
    fixed(
        "cache_model.l2_write_allocate",
        Kind::Property,
        "",
        "with `[cache_model]` and `[outer_cache]`",
        Check::Flag,
        "the cache model: whether a write allocates in the outer cache",
        |f| {
            f.cache_model
                .as_ref()?
                .l2_write_allocate
                .as_ref()
                .map(Value::Flag)
        },
    ),
    fixed(
        "cache_model.l1_prefetch",
        Kind::Property,
        "",
        "optional (false)",
        Check::Flag,
        "`Hw::cpu_access`: the L1 fetches a stream's next line",
        |f| {
            f.cache_model
                .as_ref()?
                .l1_prefetch
                .as_ref()
                .map(Value::Flag)
        },
    ),
    fixed(
        "cache_model.linefill_buffers",
        Kind::Count,
        "buffers",
        "optional (1)",
        Check::Whole {
            min: 1.0,
            max: crate::hw::model::MAX_LINEFILLS as f64,
        },
        "`Hw::cpu_access`, `Hw::cpu_copy`: line fills in flight",
        |f| {
            f.cache_model
                .as_ref()?
                .linefill_buffers
                .as_ref()
                .map(Value::Param)
        },
    ),
    cost(
        "cache_model.l1_writeback",
        "with `[cache_model]`",
        "the cache model: writing one dirty L1 line out, priced where maintenance or an eviction does it",
        Used::Any(&[Counter::L1Writeback]),
        |f| f.cache_model.as_ref().map(|m| Value::Cost(&m.l1_writeback)),
        |p, _, f| scale_ps(p.model.caches.as_mut().map(|c| &mut c.writeback_ps[0]), f),
    ),
    cost(
        "cache_model.l2_writeback",
        "with `[cache_model]` and `[outer_cache]`",
        "the cache model: writing one dirty outer-cache line to memory",
        Used::Any(&[Counter::L2Writeback]),
        |f| {
            f.cache_model
                .as_ref()?
                .l2_writeback
                .as_ref()
                .map(Value::Cost)
        },
        |p, _, f| scale_ps(p.model.caches.as_mut().map(|c| &mut c.writeback_ps[1]), f),
    ),
    ParamDef {
        key: "numa.node[<i>]",
        kind: Kind::Topology,
        unit: "",
        need: "with `[numa]`",
        check: Check::Section,
        source: SourceRule::NotFitted,
        reads: "setup: which node a CPU, a device and each physical address belong to",
        used: Used::Never,
        get: Get::Many(|p| {
            let (Some(n), Some(t)) = (&p.file.numa, &p.numa) else {
                return Vec::new();
            };
            n.node
                .iter()
                .zip(&t.nodes)
                .enumerate()
                .map(|(i, (ns, node))| ParamInfo {
                    key: format!("numa.node[{i}]"),
                    value: format!(
                        "cpus \"{}\", memory {:#x} + {} MiB",
                        ns.cpus.get_ref(),
                        node.mem_base,
                        node.mem_size >> 20
                    ),
                    unit: "".into(),
                    source: ns.source.get_ref().clone(),
                })
                .collect()
        }),
        scale: None,
    },
    ParamDef {
        key: "numa.distance",
        kind: Kind::Topology,
        unit: "",
        need: "with `[numa]`",
        check: Check::Section,
        source: SourceRule::NotFitted,
        reads: "the kernel's node order (`node_distance`) for per-node allocations",
        used: Used::Never,
        get: Get::Many(|p| {
            let (Some(n), Some(t)) = (&p.file.numa, &p.numa) else {
                return Vec::new();
            };
            let rows: Vec<String> = t
                .distance
                .iter()
                .map(|r| {
                    let v: Vec<String> = r.iter().map(|d| d.to_string()).collect();
                    format!("[{}]", v.join(", "))
                })
                .collect();
            vec![ParamInfo {
                key: "numa.distance".into(),
                value: rows.join(" "),
                unit: "".into(),
                source: n.distance.source.get_ref().clone(),
            }]
        }),
        scale: None,
    },
    ParamDef {
        key: "numa.latency_ns",
        kind: Kind::Topology,
        unit: "ns",
        need: "with `[numa]`",
        check: Check::Section,
        source: SourceRule::Any,
        reads: "memory latency from each node to each node",
        used: Used::Never,
        get: Get::Many(|p| {
            let (Some(n), Some(t)) = (&p.file.numa, &p.numa) else {
                return Vec::new();
            };
            vec![ParamInfo {
                key: "numa.latency_ns".into(),
                value: ns_rows(&t.latency_ps),
                unit: "ns".into(),
                source: n.latency_ns.source.get_ref().clone(),
            }]
        }),
        scale: None,
    },
    ParamDef {
        key: "numa.line_ns",
        kind: Kind::Cost,
        unit: "ns",
        need: "optional",
        check: Check::Section,
        source: SourceRule::Any,
        reads: "`Hw::numa_line`: a cache line's transfer between nodes (the SMMUv3 queue's lines)",
        used: Used::Any(&[Counter::CmdqSync, Counter::CmdqBatch]),
        get: Get::Many(|p| {
            let (Some(n), Some(t)) = (&p.file.numa, &p.numa) else {
                return Vec::new();
            };
            match (&n.line_ns, &t.line_ps) {
                (Some(m), Some(l)) => vec![ParamInfo {
                    key: "numa.line_ns".into(),
                    value: ns_rows(l),
                    unit: "ns".into(),
                    source: m.source.get_ref().clone(),
                }],
                _ => Vec::new(),
            }
        }),
        scale: Some(
            |p, _, f| match p.numa.as_mut().and_then(|t| t.line_ps.as_mut()) {
                Some(rows) => {
                    rows.iter_mut()
                        .flatten()
                        .for_each(|v| _ = scale_ps(Some(v), f));
                    true
                }
                None => false,
            },
        ),
    },
    ParamDef {
        key: "numa.initiator.<name>",
        kind: Kind::Topology,
        unit: "",
        need: "optional",
        check: Check::Section,
        source: SourceRule::NotFitted,
        reads: "setup: the node an SMMU or a device sits on",
        used: Used::Never,
        get: Get::Many(|p| {
            let (Some(n), Some(t)) = (&p.file.numa, &p.numa) else {
                return Vec::new();
            };
            n.initiator
                .iter()
                .zip(&t.initiators)
                .map(|(s, i)| {
                    let lat: Vec<String> = i
                        .latency_ps
                        .iter()
                        .map(|p| format!("{}", *p as f64 / 1000.0))
                        .collect();
                    ParamInfo {
                        key: format!("numa.initiator.{}", i.name),
                        value: format!(
                            "{:?} on node {}, latency ns [{}]",
                            i.kind,
                            i.node,
                            lat.join(", ")
                        )
                        .to_lowercase(),
                        unit: "".into(),
                        source: s.source.get_ref().clone(),
                    }
                })
                .collect()
        }),
        scale: None,
    },
    ParamDef {
        key: "memory_type.cached.fill_<level>",
        kind: Kind::Cost,
        unit: "ns",
        need: "for user-space access workloads",
        check: Check::Cost,
        source: SourceRule::Any,
        reads: "`Hw::cpu_access`: an L1 miss filled from the L2 or from memory",
        used: Used::Any(&[Counter::LineFill]),
        get: Get::Many(|p| memory_types(p, true)),
        scale: Some(|p, key, f| scale_ps(mem_cost(p, key), f)),
    },
    ParamDef {
        key: "memory_type.<type>.<access>_<N>",
        kind: Kind::Cost,
        unit: "ns",
        need: "for user-space access workloads",
        check: Check::Cost,
        source: SourceRule::Any,
        reads: "`Hw::cpu_access`, `Hw::cpu_copy`: one load or store of N bytes to that memory type",
        used: Used::Any(&[Counter::CpuAccess]),
        get: Get::Many(|p| memory_types(p, false)),
        scale: Some(|p, key, f| scale_ps(mem_cost(p, key), f)),
    },
];

/// The docs/profiles.md table of every parameter.
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| key | kind | unit | given | range | source | read by |\n|---|---|---|---|---|---|---|\n",
    );
    for d in PARAMS {
        let unit = if d.unit.is_empty() { "—" } else { d.unit };
        let unit = if d.check == Check::Cost {
            "ns or cycles"
        } else {
            unit
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            d.key,
            d.kind.name(),
            unit,
            d.need,
            d.check.describe(d.unit),
            d.source.describe(),
            d.reads
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every leaf a profile's TOML gives a value in: `{ value = … }`, `{ ns = … }` or
    /// `{ cycles = … }` tables, by their dotted key.
    fn toml_keys(t: &toml::Table, at: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            let key = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            match v {
                toml::Value::Table(inner)
                    if ["value", "ns", "cycles"]
                        .iter()
                        .any(|f| inner.contains_key(*f)) =>
                {
                    out.push(key)
                }
                toml::Value::Table(inner) => toml_keys(inner, &key, out),
                toml::Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let toml::Value::Table(inner) = item {
                            toml_keys(inner, &format!("{key}[{i}]"), out);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_registry_and_the_schema_name_the_same_keys() {
        let mut listed = Vec::new();
        // No built-in profile gives a completion interval; one with all three does.
        let d = Profile::load("dimensity9500").unwrap();
        let mut text = d.text.clone();
        for op in ["clean", "inval", "clean_inval"] {
            let head = format!("[cache.{op}]");
            let at = text.find(&head).unwrap() + head.len();
            text.insert_str(at, "\ninterval = { ns = 2, source = \"held: a test\" }");
        }
        let with_intervals = Profile::parse("intervals.toml", &text).unwrap();
        for p in builtin_names()
            .into_iter()
            .map(|n| Profile::load(n).unwrap())
            .chain([with_intervals])
        {
            let name = p.origin.clone();
            let mut keys = Vec::new();
            toml_keys(&toml::from_str(&p.text).unwrap(), "", &mut keys);
            // Tables the registry lists as one value (the NUMA topology's rows and nodes).
            keys.retain(|k| !k.starts_with("numa."));
            let params: Vec<String> = p.params().into_iter().map(|i| i.key).collect();
            for k in &keys {
                assert!(def(k).is_some(), "{name}: `{k}` has no registry row");
                assert!(
                    params.contains(k),
                    "{name}: `{k}` is not listed by params()"
                );
            }
            for k in &params {
                assert!(def(k).is_some(), "{name}: params() lists `{k}`, not a row");
            }
            listed.extend(params);
        }
        let absent: Vec<&str> = PARAMS
            .iter()
            .filter(|d| !listed.iter().any(|k| d.matches(k)))
            .map(|d| d.key)
            .collect();
        assert_eq!(absent, Vec::<&str>::new());
    }

    #[test]
    fn keys_match_their_own_row_first() {
        for (key, row) in [
            ("cache.clean.latency", "cache.clean.latency"),
            ("sw.insn.unmap_single", "sw.<name>"),
            (
                "memory_type.cached.fill_l2",
                "memory_type.cached.fill_<level>",
            ),
            (
                "memory_type.device.read_4",
                "memory_type.<type>.<access>_<N>",
            ),
            ("numa.node[3]", "numa.node[<i>]"),
            ("numa.initiator.smmu0", "numa.initiator.<name>"),
        ] {
            assert_eq!(def(key).map(|d| d.key), Some(row), "{key}");
        }
        for key in [
            "cache",
            "cache.clean",
            "sw.",
            "numa.node",
            "platform.cpus.value",
        ] {
            assert!(def(key).is_none(), "{key}");
        }
    }

    #[test]
    fn every_cost_row_scales_what_the_model_charges() {
        for name in builtin_names() {
            let p = Profile::load(name).unwrap();
            for i in p.params() {
                let d = def(&i.key).unwrap();
                let Some(scale) = d.scale else {
                    assert!(d.kind.not_perturbed().is_some(), "{}", d.key);
                    continue;
                };
                let mut q = p.clone();
                let moved = scale(&mut q, &i.key, 2.0);
                let zero = i.value.starts_with("0 ");
                assert!(moved, "{name}: {} did not scale", i.key);
                assert!(
                    zero || q.model != p.model
                        || q.acp_mb_s != p.acp_mb_s
                        || q.numa.as_ref().map(|t| &t.line_ps)
                            != p.numa.as_ref().map(|t| &t.line_ps),
                    "{name}: scaling {} moved nothing",
                    i.key
                );
            }
        }
    }

    #[test]
    fn checks_say_the_range() {
        let pow = Check::PowerOfTwo { min: 4, max: 4096 };
        assert_eq!(pow.violation("B", 64.0), None);
        assert_eq!(
            pow.violation("B", 48.0).unwrap(),
            "must be a power of two from 4 to 4096, found 48"
        );
        let whole = Check::Whole {
            min: 1.0,
            max: 4096.0,
        };
        assert!(
            whole
                .violation("CPUs", 1.5)
                .unwrap()
                .contains("whole number of CPUs")
        );
        assert!(whole.violation("CPUs", 0.0).is_some());
        let open = Check::Range {
            min: 0.0,
            max: 10.0,
            open: true,
        };
        assert!(
            open.violation("MB/s", 0.0)
                .unwrap()
                .starts_with("must be more than 0")
        );
        assert_eq!(open.violation("MB/s", 10.0), None);
    }

    #[test]
    fn geometry_is_not_fitted() {
        let p = Profile::load("zynq7000").unwrap();
        let text = p.text.replace(
            "size_kib = { value = 512, source = \"",
            "size_kib = { value = 512, source = \"fit: zynq rows; ",
        );
        assert_ne!(text, p.text);
        let e = Profile::parse("z.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("outer_cache.size_kib.source"));
        assert!(e.message.contains("geometry is not fitted"), "{e}");
    }
}
