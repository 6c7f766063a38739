//! Platform profiles: the hardware, as data.
//!
//! Kernel counterpart: none — a profile describes the machine the kernel runs on: CPU architecture
//! and clock, cache line size, what each cache-maintenance operation and barrier costs, and what
//! named stretches of kernel code cost on that CPU.
//!
//! Invariants: every parameter carries a non-empty `source` (a citation, `fit: <rows>`, or
//! `measured: <how>`); every cost is finite and non-negative; a profile that fails a check is an
//! [`InputError`] naming the file, line and key. Built-in profiles are compiled into the binary.

use crate::hw::cache::{Geometry, HierarchySpec, LevelSpec};
use crate::hw::model::{
    CacheModelParams, CopyCost, MaintCost, ModelParams, OuterParams, SmmuImpl, SmmuKind, SmmuParams,
};
use crate::hw::{CacheOp, SwKey};
use crate::input::{InputError, parse_toml};
/// Re-exported so `platform::Arch` keeps naming it; it lives in [`crate::types`] so that `hw` can use
/// it without depending on `platform`, which depends on `hw`.
pub use crate::types::Arch;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub mod numa;

/// Built-in profiles: (name, file name, TOML text).
const BUILTIN: &[(&str, &str)] = &[
    (
        "dimensity9500",
        include_str!("../../profiles/dimensity9500.toml"),
    ),
    (
        "x86-2012-ixgbe",
        include_str!("../../profiles/x86-2012-ixgbe.toml"),
    ),
    ("sm8150", include_str!("../../profiles/sm8150.toml")),
    ("zynq7000", include_str!("../../profiles/zynq7000.toml")),
    ("kunpeng920", include_str!("../../profiles/kunpeng920.toml")),
];

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
}

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
}

/// A loaded, checked profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Where it came from: `builtin:NAME` or the path given.
    pub origin: String,
    pub file: ProfileFile,
    pub model: ModelParams,
    /// `platform.cpus`, checked to be a whole number of at least 1.
    pub cpus: Option<u32>,
    /// The checked `[numa]` section, if any.
    pub numa: Option<numa::Topology>,
    /// `acp.bandwidth_mb_s`, checked to be more than 0 and at most [`MAX_PORT_MB_S`].
    pub acp_mb_s: Option<f64>,
    /// The TOML it was read from, so that a `--set platform.KEY=VALUE` edits it and is checked
    /// exactly as the file would be.
    pub text: String,
}

/// `150ns`, `0.2us`, `800ps`, `40cycles` as (the profile's unit key, the number in it).
fn parse_cost_arg(v: &str) -> Option<(&'static str, f64)> {
    let v = v.trim();
    let split = v
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.trim().parse().ok()?;
    if !n.is_finite() {
        return None;
    }
    match unit.trim() {
        "ns" => Some(("ns", n)),
        "us" | "µs" => Some(("ns", n * 1000.0)),
        "ps" => Some(("ns", n / 1000.0)),
        "cycles" | "cycle" => Some(("cycles", n)),
        _ => None,
    }
}

/// Where a parameter's value comes from, by its source text (docs/profiles.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// `measured: ...` — taken on the machine (`dmasim calibrate` writes these).
    Measured,
    /// A manual, datasheet, paper or kernel file (and `counted:` instruction counts).
    Cited,
    /// `fit: <rows>` — chosen so that the model meets published rows.
    Fitted,
    /// `held: ...` or `assumption: ...` — a value set by judgement and kept fixed.
    Held,
}

impl SourceKind {
    pub fn of(source: &str) -> SourceKind {
        let s = source.trim_start().to_ascii_lowercase();
        if s.starts_with("measured") {
            SourceKind::Measured
        } else if s.starts_with("fit:") || s.starts_with("fit ") || s.starts_with("fitted") {
            SourceKind::Fitted
        } else if s.starts_with("held") || s.starts_with("assum") {
            SourceKind::Held
        } else {
            SourceKind::Cited
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Measured => "measured",
            SourceKind::Cited => "cited",
            SourceKind::Fitted => "fitted",
            SourceKind::Held => "held",
        }
    }
}

/// A parameter's resolved value and source, for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    pub key: String,
    pub value: String,
    pub source: String,
}

impl Profile {
    pub fn name(&self) -> &str {
        &self.file.platform.name
    }

    pub fn arch(&self) -> Arch {
        self.file.platform.arch
    }

    /// Parse and check a profile.
    pub fn parse(origin: &str, text: &str) -> Result<Profile, InputError> {
        let file: ProfileFile = parse_toml(origin, text)?;
        let model = resolve(origin, text, &file)?;
        let cpus = match &file.platform.cpus {
            None => None,
            Some(p) => {
                let r = Resolver {
                    origin,
                    text,
                    freq_mhz: 1.0,
                };
                let n = r.param("platform.cpus", p)?;
                if n < 1.0 || n.fract() != 0.0 || n > 4096.0 {
                    return Err(InputError::at(
                        origin,
                        text,
                        Some(p.value.span()),
                        "platform.cpus.value",
                        format!("must be a whole number of CPUs from 1 to 4096, found {n}"),
                    ));
                }
                Some(n as u32)
            }
        };
        let numa = match &file.numa {
            Some(n) => Some(numa::resolve(origin, text, n)?),
            None => None,
        };
        let acp_mb_s = match &file.acp {
            None => None,
            Some(a) => {
                let r = Resolver {
                    origin,
                    text,
                    freq_mhz: 1.0,
                };
                let bw = r.param("acp.bandwidth_mb_s", &a.bandwidth_mb_s)?;
                if bw <= 0.0 || bw > MAX_PORT_MB_S {
                    return Err(InputError::at(
                        origin,
                        text,
                        Some(a.bandwidth_mb_s.value.span()),
                        "acp.bandwidth_mb_s.value",
                        format!("must be more than 0 and at most {MAX_PORT_MB_S} MB/s, found {bw}"),
                    ));
                }
                Some(bw)
            }
        };
        Ok(Profile {
            origin: origin.to_string(),
            file,
            model,
            cpus,
            numa,
            acp_mb_s,
            text: text.to_string(),
        })
    }

    /// This profile with one parameter changed from the command line (`--set
    /// platform.KEY=VALUE`): a cost takes a number with its unit (`150ns`, `0.2us`, `800ps`,
    /// `40cycles`), any other parameter its value as the file writes it. The edited profile is
    /// checked as a file would be; an error names the argument. The parameter's source becomes
    /// the argument, so reports say where the value came from.
    pub fn with_set(&self, key: &str, value: &str) -> Result<Profile, InputError> {
        let arg = format!("--set platform.{key}={value}");
        let err = |m: String| InputError::new("<argument>", format!("{arg}: {m}"));
        let mut doc: toml_edit::DocumentMut = self
            .text
            .parse()
            .map_err(|e: toml_edit::TomlError| err(e.message().to_string()))?;
        let path: Vec<&str> = key.split('.').map(str::trim).collect();
        if path.iter().any(|p| p.is_empty()) {
            return Err(err("the key is empty or has an empty part".into()));
        }
        let (last, tables) = path.split_last().expect("split gives one part at least");
        let mut item = doc.as_item_mut();
        for t in tables {
            item = item
                .as_table_like_mut()
                .and_then(|tl| tl.get_mut(t))
                .ok_or_else(|| {
                    err(format!(
                        "platform `{}` has no `{key}` (`dmasim platforms --format json` and docs/profiles.md list the parameters)",
                        self.name()
                    ))
                })?;
        }
        let slot = item
            .as_table_like_mut()
            .and_then(|tl| tl.get_mut(last))
            .ok_or_else(|| {
                err(format!(
                    "platform `{}` has no `{key}` (`dmasim platforms --format json` and docs/profiles.md list the parameters)",
                    self.name()
                ))
            })?;
        let source = format!("set on the command line: {arg}");
        let mut table = toml_edit::InlineTable::new();
        let old = slot.as_table_like();
        let is_cost = old.is_some_and(|t| t.contains_key("ns") || t.contains_key("cycles"));
        let is_param = old.is_some_and(|t| t.contains_key("value"));
        if is_cost {
            let (unit, n) = parse_cost_arg(value).ok_or_else(|| {
                err("a cost takes a number and its unit: ns, us, ps or cycles (e.g. 150ns)".into())
            })?;
            table.insert(unit, toml_edit::Value::from(n));
        } else if is_param {
            let v = value
                .parse::<toml_edit::Value>()
                .map_err(|_| err("expected a number, or true or false".into()))?;
            table.insert("value", v);
        } else {
            return Err(err(
                "not a parameter of the profile: --set platform.KEY takes a cost (`{ ns = ... }`) or a `{ value = ... }` parameter".into(),
            ));
        }
        table.insert("source", toml_edit::Value::from(source));
        *slot = toml_edit::Item::Value(toml_edit::Value::InlineTable(table));
        let text = doc.to_string();
        Profile::parse(&self.origin, &text).map_err(|e| match &e.key {
            Some(k) if k == key || k.starts_with(&format!("{key}.")) => err(e.message),
            _ => err(e.to_string()),
        })
    }

    /// The profile's costs by how their values were obtained: (fitted, held), each a list of
    /// keys in profile order. Geometry, counts and properties are not costs and are left out.
    pub fn fitted_and_held(&self) -> (Vec<String>, Vec<String>) {
        let (mut fitted, mut held) = (Vec::new(), Vec::new());
        for p in self.params() {
            let cost = !(p.key.starts_with("platform.")
                || p.key.starts_with("code.")
                || p.key.starts_with("numa.distance")
                || p.key.starts_with("numa.latency_ns")
                || p.key.ends_with("line_bytes")
                || p.key.ends_with("size_kib")
                || p.key.ends_with("ways"));
            if !cost {
                continue;
            }
            match SourceKind::of(&p.source) {
                SourceKind::Fitted => fitted.push(p.key),
                SourceKind::Held => held.push(p.key),
                _ => {}
            }
        }
        (fitted, held)
    }

    /// A built-in profile by name, or a profile file by path. An unknown name lists the known ones.
    pub fn load(name_or_path: &str) -> Result<Profile, InputError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(&format!("builtin:{name_or_path}"), text);
        }
        let path = std::path::Path::new(name_or_path);
        if path.exists() {
            let text = crate::input::read_input(name_or_path, "profile")?;
            return Profile::parse(name_or_path, &text);
        }
        Err(InputError::new(
            "<argument>",
            format!(
                "unknown platform `{name_or_path}` (not a built-in name and no such file); built-in platforms: {}",
                builtin_names().join(", ")
            ),
        ))
    }

    /// Fail unless the profile prices every cache operation `ops` needs.
    pub fn require_ops(&self, ops: &[CacheOp], why: &str) -> Result<(), InputError> {
        for &op in ops {
            if self.model.maint(op).is_none() {
                return Err(InputError {
                    file: self.origin.clone(),
                    line: None,
                    key: Some(format!("cache.{}", op.key())),
                    message: format!("missing, but {why} issues this operation"),
                });
            }
        }
        Ok(())
    }

    /// Fail unless the profile prices `wmb()` (`barrier.wmb`), which `why` issues.
    pub fn require_wmb(&self, why: &str) -> Result<(), InputError> {
        if self.model.wmb_ps.is_none() {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some("barrier.wmb".to_string()),
                message: format!(
                    "missing, but {why} issues wmb() (io-pgtable's map, arm-smmu's invalidations)"
                ),
            });
        }
        Ok(())
    }

    /// Fail unless the profile prices a memory copy (`[memory.copy]`), which `why` performs.
    pub fn require_copy(&self, why: &str) -> Result<(), InputError> {
        if self.model.copy.is_none() {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some("memory.copy".to_string()),
                message: format!("missing, but {why} copies memory (swiotlb bounce buffers)"),
            });
        }
        Ok(())
    }

    /// The costs of `keys` this profile leaves out of `[sw]`, in the order given. The Model charges
    /// them as 0; a caller that runs a stack charging `keys` should say so.
    pub fn unpriced_sw(&self, keys: &[SwKey]) -> Vec<SwKey> {
        keys.iter()
            .copied()
            .filter(|k| !self.model.sw.contains_key(k.name()))
            .collect()
    }

    /// A one-line warning naming the costs of `keys` this profile leaves unpriced (charged as 0 by
    /// `what`), or `None` when it prices them all.
    pub fn unpriced_sw_warning(&self, keys: &[SwKey], what: &str) -> Option<String> {
        let missing = self.unpriced_sw(keys);
        if missing.is_empty() {
            return None;
        }
        let names: Vec<String> = missing.iter().map(|k| format!("sw.{k}")).collect();
        Some(format!(
            "{}: platform `{}` does not price {} software cost{} {what} can charge, so {} 0: {} (`dmasim costs` says what each stands for)",
            self.origin,
            self.name(),
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            if missing.len() == 1 {
                "it costs"
            } else {
                "they cost"
            },
            names.join(", ")
        ))
    }

    /// Fail unless the profile prices every software cost of `keys`, which `why` charges. The
    /// error names the first missing key and lists the others.
    pub fn require_sw(&self, keys: &[SwKey], why: &str) -> Result<(), InputError> {
        let missing = self.unpriced_sw(keys);
        let Some(first) = missing.first() else {
            return Ok(());
        };
        let mut message = format!("missing, but {why} charges it ({})", first.decl().function);
        if missing.len() > 1 {
            let rest: Vec<String> = missing[1..].iter().map(|k| format!("sw.{k}")).collect();
            message.push_str(&format!("; also missing: {}", rest.join(", ")));
        }
        Err(InputError {
            file: self.origin.clone(),
            line: None,
            key: Some(format!("sw.{first}")),
            message,
        })
    }

    /// Every parameter with its value and source, in file order of sections.
    pub fn params(&self) -> Vec<ParamInfo> {
        let f = &self.file;
        let mut out = vec![
            param_info("platform.cpu_freq_mhz", &f.platform.cpu_freq_mhz, "MHz"),
            param_info("cache.line_bytes", &f.cache.line_bytes, "B"),
        ];
        if let Some(c) = &f.platform.cpus {
            out.insert(1, param_info("platform.cpus", c, "CPUs"));
        }
        for op in CacheOp::ALL {
            if let Some(m) = maint_spec(&f.cache, op) {
                let base = format!("cache.{}", op.key());
                out.push(cost_info(&format!("{base}.issue"), &m.issue));
                out.push(cost_info(&format!("{base}.latency"), &m.latency));
                if let Some(i) = &m.interval {
                    out.push(cost_info(&format!("{base}.interval"), i));
                }
            }
        }
        out.push(cost_info("barrier.cost", &f.barrier.cost));
        if let Some(c) = &f.barrier.wmb {
            out.push(cost_info("barrier.wmb", c));
        }
        if let Some(c) = f.memory.as_ref().and_then(|m| m.copy.as_ref()) {
            if let Some(call) = &c.call {
                out.push(cost_info("memory.copy.call", call));
            }
            out.push(cost_info("memory.copy.per_byte", &c.per_byte));
        }
        for (k, c) in &f.sw {
            out.push(cost_info(&format!("sw.{}", k.get_ref()), c));
        }
        if let Some(a) = &f.acp {
            out.push(param_info("acp.bandwidth_mb_s", &a.bandwidth_mb_s, "MB/s"));
        }
        if let Some(c) = f.code.as_ref().and_then(|c| c.swiotlb_2012.as_ref()) {
            for (k, p) in c.groups() {
                out.push(param_info(
                    &format!("code.swiotlb_2012.{k}"),
                    p,
                    "instructions",
                ));
            }
        }
        if let Some(sm) = &f.smmu {
            for (k, c) in smmu_costs(sm) {
                out.push(cost_info(&format!("smmu.{k}"), c));
            }
        }
        if let Some(o) = &f.outer_cache {
            out.push(param_info("outer_cache.size_kib", &o.size_kib, "KiB"));
            out.push(param_info("outer_cache.ways", &o.ways, "ways"));
            for (k, c) in [
                ("clean_line", &o.clean_line),
                ("inval_line", &o.inval_line),
                ("clean_inval_line", &o.clean_inval_line),
                ("sync", &o.sync),
                ("clean_way_line", &o.clean_way_line),
                ("clean_inval_way_line", &o.clean_inval_way_line),
            ] {
                out.push(cost_info(&format!("outer_cache.{k}"), c));
            }
        }
        if let Some(m) = &f.cache_model {
            out.push(ParamInfo {
                key: "cache_model".into(),
                value: format!(
                    "{:?} inclusion, {:?} replacement",
                    m.inclusion.get_ref(),
                    m.replacement.get_ref()
                ),
                source: m.source.get_ref().clone(),
            });
            let flag = |key: &str, p: &FlagParam| ParamInfo {
                key: key.to_string(),
                value: p.value.get_ref().to_string(),
                source: p.source.get_ref().clone(),
            };
            out.push(flag("cache_model.l1_write_allocate", &m.l1_write_allocate));
            if let Some(p) = &m.l2_write_allocate {
                out.push(flag("cache_model.l2_write_allocate", p));
            }
            if let Some(p) = &m.l1_prefetch {
                out.push(flag("cache_model.l1_prefetch", p));
            }
            if let Some(p) = &m.linefill_buffers {
                out.push(param_info("cache_model.linefill_buffers", p, "buffers"));
            }
            out.push(cost_info("cache_model.l1_writeback", &m.l1_writeback));
            if let Some(c) = &m.l2_writeback {
                out.push(cost_info("cache_model.l2_writeback", c));
            }
        }
        if let (Some(n), Some(t)) = (&f.numa, &self.numa) {
            for (i, (ns, node)) in n.node.iter().zip(&t.nodes).enumerate() {
                out.push(ParamInfo {
                    key: format!("numa.node[{i}]"),
                    value: format!(
                        "cpus \"{}\", memory {:#x} + {} MiB",
                        ns.cpus.get_ref(),
                        node.mem_base,
                        node.mem_size >> 20
                    ),
                    source: ns.source.get_ref().clone(),
                });
            }
            for (key, m, rows) in [
                (
                    "numa.distance",
                    &n.distance,
                    t.distance
                        .iter()
                        .map(|r| r.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                        .collect::<Vec<_>>(),
                ),
                (
                    "numa.latency_ns",
                    &n.latency_ns,
                    t.latency_ps
                        .iter()
                        .map(|r| {
                            r.iter()
                                .map(|p| format!("{}", *p as f64 / 1000.0))
                                .collect::<Vec<_>>()
                        })
                        .collect::<Vec<_>>(),
                ),
            ] {
                let rows: Vec<String> =
                    rows.iter().map(|r| format!("[{}]", r.join(", "))).collect();
                out.push(ParamInfo {
                    key: key.to_string(),
                    value: rows.join(" "),
                    source: m.source.get_ref().clone(),
                });
            }
            if let (Some(m), Some(l)) = (&n.line_ns, &t.line_ps) {
                let rows: Vec<String> = l
                    .iter()
                    .map(|r| {
                        let v: Vec<String> = r
                            .iter()
                            .map(|p| format!("{}", *p as f64 / 1000.0))
                            .collect();
                        format!("[{}]", v.join(", "))
                    })
                    .collect();
                out.push(ParamInfo {
                    key: "numa.line_ns".to_string(),
                    value: rows.join(" "),
                    source: m.source.get_ref().clone(),
                });
            }
            for (s, i) in n.initiator.iter().zip(&t.initiators) {
                let lat: Vec<String> = i
                    .latency_ps
                    .iter()
                    .map(|p| format!("{}", *p as f64 / 1000.0))
                    .collect();
                out.push(ParamInfo {
                    key: format!("numa.initiator.{}", i.name),
                    value: format!(
                        "{:?} on node {}, latency ns [{}]",
                        i.kind,
                        i.node,
                        lat.join(", ")
                    )
                    .to_lowercase(),
                    source: s.source.get_ref().clone(),
                });
            }
        }
        for (t, costs) in f.memory_type.iter().flatten() {
            for (k, c) in costs {
                out.push(cost_info(
                    &format!("memory_type.{}.{}", t.get_ref(), k.get_ref()),
                    c,
                ));
            }
        }
        out
    }

    /// Fail unless the profile prices `write`s (or reads) of `size` bytes to `t`, which `why`
    /// makes; for cached memory, its line fills too.
    pub fn require_access(
        &self,
        t: crate::hw::memory::MemType,
        write: bool,
        size: u64,
        why: &str,
    ) -> Result<(), InputError> {
        let key = format!(
            "memory_type.{}.{}_{size}",
            t.key(),
            if write { "write" } else { "read" }
        );
        let priced = self
            .model
            .mem
            .as_ref()
            .and_then(|m| m.of(t))
            .and_then(|c| c.cost(write, size))
            .is_some();
        if !priced {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some(key),
                message: format!("missing, but {why} makes these accesses"),
            });
        }
        Ok(())
    }
}

fn param_info(key: &str, p: &Param, unit: &str) -> ParamInfo {
    ParamInfo {
        key: key.to_string(),
        value: format!("{} {unit}", p.value.get_ref()),
        source: p.source.get_ref().clone(),
    }
}

fn cost_info(key: &str, c: &Cost) -> ParamInfo {
    let value = match (&c.ns, &c.cycles) {
        (Some(ns), _) => format!("{} ns", ns.get_ref()),
        (_, Some(cy)) => format!("{} cycles", cy.get_ref()),
        _ => String::new(),
    };
    ParamInfo {
        key: key.to_string(),
        value,
        source: c.source.get_ref().clone(),
    }
}

fn maint_spec(c: &CacheSpec, op: CacheOp) -> Option<&MaintSpec> {
    match op {
        CacheOp::Clean => c.clean.as_ref(),
        CacheOp::Inval => c.inval.as_ref(),
        CacheOp::CleanInval => c.clean_inval.as_ref(),
    }
}

fn smmu_costs(s: &SmmuSpec) -> Vec<(&'static str, &Cost)> {
    let mut v = vec![
        ("mmio_write", &s.mmio_write),
        ("mmio_read", &s.mmio_read),
        ("tlbi_va", &s.tlbi_va),
        ("tlbi_asid", &s.tlbi_asid),
        ("sync", &s.sync),
    ];
    if let Some(c) = &s.cmdq_write {
        v.push(("cmdq_write", c));
    }
    v
}

/// Names of the built-in profiles.
/// Whether `name` is a built-in profile's name.
pub fn is_builtin(name: &str) -> bool {
    BUILTIN.iter().any(|(n, _)| *n == name)
}

pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// `(name, description)` of every built-in profile.
pub fn builtin_list() -> Vec<(String, String)> {
    BUILTIN
        .iter()
        .filter_map(|(n, _)| Profile::load(n).ok())
        .map(|p| {
            (
                p.file.platform.name.clone(),
                p.file.platform.description.clone(),
            )
        })
        .collect()
}

/// Longest one operation may cost, in ns: one second. With it and the model's limits on work,
/// no run's picosecond clock can wrap.
pub const MAX_COST_NS: f64 = 1e9;
/// The CPU frequencies a profile may give, in MHz. The floor is a plausible one for a CPU that
/// runs Linux's DMA layer: a value below it is most likely a GHz figure typed as MHz.
pub const MIN_FREQ_MHZ: f64 = 10.0;
pub const MAX_FREQ_MHZ: f64 = 100_000.0;
/// The largest cache line a profile may give, in bytes.
pub const MAX_LINE_BYTES: f64 = 4096.0;

struct Resolver<'a> {
    origin: &'a str,
    text: &'a str,
    freq_mhz: f64,
}

impl Resolver<'_> {
    fn source(&self, key: &str, s: &Spanned<String>) -> Result<(), InputError> {
        if s.get_ref().trim().is_empty() {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(s.span()),
                &format!("{key}.source"),
                "a source is required: a citation, `fit: <rows>` or `measured: <how>`",
            ));
        }
        Ok(())
    }

    fn number(&self, key: &str, v: &Spanned<f64>) -> Result<f64, InputError> {
        let x = *v.get_ref();
        if !x.is_finite() || x < 0.0 {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(v.span()),
                key,
                format!("must be a finite, non-negative number, found {x}"),
            ));
        }
        Ok(x)
    }

    fn param(&self, key: &str, p: &Param) -> Result<f64, InputError> {
        self.source(key, &p.source)?;
        self.number(&format!("{key}.value"), &p.value)
    }

    /// A cost in picoseconds.
    fn cost(&self, key: &str, c: &Cost) -> Result<u64, InputError> {
        self.cost_scaled(key, c, 1000.0)
    }

    /// A cost in femtoseconds, for per-byte costs that are fractions of a picosecond.
    fn cost_fs(&self, key: &str, c: &Cost) -> Result<u64, InputError> {
        self.cost_scaled(key, c, 1_000_000.0)
    }

    /// A cost in nanoseconds times `per_ns` (1000 for picoseconds).
    fn cost_scaled(&self, key: &str, c: &Cost, per_ns: f64) -> Result<u64, InputError> {
        self.source(key, &c.source)?;
        let ns = match (&c.ns, &c.cycles) {
            (Some(ns), None) => self.number(&format!("{key}.ns"), ns)?,
            (None, Some(cy)) => self.number(&format!("{key}.cycles"), cy)? * 1000.0 / self.freq_mhz,
            (Some(ns), Some(_)) => {
                return Err(InputError::at(
                    self.origin,
                    self.text,
                    Some(ns.span()),
                    key,
                    "give either `ns` or `cycles`, not both",
                ));
            }
            (None, None) => {
                return Err(InputError::at(
                    self.origin,
                    self.text,
                    Some(c.source.span()),
                    key,
                    "a cost needs `ns` or `cycles`",
                ));
            }
        };
        if ns > MAX_COST_NS {
            let span = c.ns.as_ref().or(c.cycles.as_ref()).map(|v| v.span());
            return Err(InputError::at(
                self.origin,
                self.text,
                span,
                key,
                format!(
                    "{ns} ns is more than the model allows for one operation ({MAX_COST_NS} ns, one second): the picosecond clock must not wrap"
                ),
            ));
        }
        Ok((ns * per_ns).round() as u64)
    }

    /// A whole power of two from 1 to `max`.
    fn power_of_two(&self, key: &str, p: &Param, max: u64) -> Result<u64, InputError> {
        let x = self.param(key, p)?;
        if x < 1.0 || x > max as f64 || x.fract() != 0.0 || !(x as u64).is_power_of_two() {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(p.value.span()),
                &format!("{key}.value"),
                format!("must be a power of two from 1 to {max}, found {x}"),
            ));
        }
        Ok(x as u64)
    }

    fn maint(&self, key: &str, m: &MaintSpec) -> Result<MaintCost, InputError> {
        Ok(MaintCost {
            issue_ps: self.cost(&format!("{key}.issue"), &m.issue)?,
            latency_ps: self.cost(&format!("{key}.latency"), &m.latency)?,
            interval_ps: match &m.interval {
                Some(i) => self.cost(&format!("{key}.interval"), i)?,
                None => 0,
            },
        })
    }
}

fn resolve(origin: &str, text: &str, f: &ProfileFile) -> Result<ModelParams, InputError> {
    let mut r = Resolver {
        origin,
        text,
        freq_mhz: 1.0,
    };
    let freq = r.param("platform.cpu_freq_mhz", &f.platform.cpu_freq_mhz)?;
    if !(MIN_FREQ_MHZ..=MAX_FREQ_MHZ).contains(&freq) {
        return Err(InputError::at(
            origin,
            text,
            Some(f.platform.cpu_freq_mhz.value.span()),
            "platform.cpu_freq_mhz.value",
            if freq > 0.0 && freq < MIN_FREQ_MHZ && freq * 1000.0 <= MAX_FREQ_MHZ {
                format!(
                    "must be {MIN_FREQ_MHZ}..={MAX_FREQ_MHZ} MHz, found {freq}: the key is in MHz, so {freq} GHz is {}",
                    freq * 1000.0
                )
            } else {
                format!("must be {MIN_FREQ_MHZ}..={MAX_FREQ_MHZ} MHz, found {freq}")
            },
        ));
    }
    r.freq_mhz = freq;
    let line = r.param("cache.line_bytes", &f.cache.line_bytes)?;
    if !(4.0..=MAX_LINE_BYTES).contains(&line)
        || line.fract() != 0.0
        || !(line as u64).is_power_of_two()
    {
        return Err(InputError::at(
            origin,
            text,
            Some(f.cache.line_bytes.value.span()),
            "cache.line_bytes.value",
            format!("must be a power of two from 4 to {MAX_LINE_BYTES}, found {line}"),
        ));
    }
    let mut maint = [None; 3];
    for op in CacheOp::ALL {
        if let Some(m) = maint_spec(&f.cache, op) {
            maint[op as usize] = Some(r.maint(&format!("cache.{}", op.key()), m)?);
        }
    }
    let barrier_ps = r.cost("barrier.cost", &f.barrier.cost)?;
    let wmb_ps = match &f.barrier.wmb {
        Some(c) => Some(r.cost("barrier.wmb", c)?),
        None => None,
    };
    let mut sw = BTreeMap::new();
    for (k, c) in &f.sw {
        let name = k.get_ref();
        if SwKey::from_name(name).is_none() {
            // A misspelt key would otherwise price nothing and leave the cost it meant at 0.
            let hint = match SwKey::closest(name) {
                Some(near) => format!("did you mean `{near}`? "),
                None => String::new(),
            };
            return Err(InputError::at(
                origin,
                text,
                Some(k.span()),
                &format!("sw.{name}"),
                format!(
                    "unknown software cost `{name}`; {hint}`dmasim costs` lists every name the model charges"
                ),
            ));
        }
        sw.insert(name.clone(), r.cost(&format!("sw.{name}"), c)?);
    }
    resolve_code(&r, f)?;
    let smmu = match &f.smmu {
        Some(sm) => Some(resolve_smmu(&r, sm)?),
        None => None,
    };
    let copy = match f.memory.as_ref().and_then(|m| m.copy.as_ref()) {
        Some(c) => Some(CopyCost {
            call_ps: match &c.call {
                Some(call) => r.cost("memory.copy.call", call)?,
                None => 0,
            },
            per_byte_fs: r.cost_fs("memory.copy.per_byte", &c.per_byte)?,
        }),
        None => None,
    };
    for (key, p, max) in [
        ("cache.size_kib", &f.cache.size_kib, 1u64 << 20),
        ("cache.ways", &f.cache.ways, 64),
    ] {
        if let Some(p) = p {
            r.power_of_two(key, p, max)?;
        }
    }
    let outer = match &f.outer_cache {
        Some(o) => Some(resolve_outer(&r, f.platform.arch, o)?),
        None => None,
    };
    let caches = match &f.cache_model {
        Some(m) => Some(resolve_cache_model(&r, f, m, line as u64)?),
        None => None,
    };
    let mem = match &f.memory_type {
        Some(t) => Some(resolve_memory_types(&r, f, t)?),
        None => None,
    };
    Ok(ModelParams {
        line_bytes: line as u64,
        maint,
        barrier_ps,
        wmb_ps,
        sw,
        copy,
        smmu,
        outer,
        caches,
        mem,
    })
}

/// `[memory_type.*]`: each type's costs by access size (sizes the architecture has), and the
/// cached type's fills.
fn resolve_memory_types(
    r: &Resolver,
    f: &ProfileFile,
    types: &BTreeMap<Spanned<String>, MemoryTypeCosts>,
) -> Result<crate::hw::memory::MemCosts, InputError> {
    use crate::hw::memory::{MemCosts, MemType, TypeCosts, access_sizes};
    let arch = f.platform.arch;
    let mut out = MemCosts::default();
    for (t, costs) in types {
        let Some(mt) = MemType::from_key(t.get_ref()) else {
            let names: Vec<&str> = MemType::ALL.iter().map(|m| m.key()).collect();
            return Err(InputError::at(
                r.origin,
                r.text,
                Some(t.span()),
                &format!("memory_type.{}", t.get_ref()),
                format!("unknown memory type; known: {}", names.join(", ")),
            ));
        };
        let mut tc = TypeCosts::default();
        for (k, c) in costs {
            let key = format!("memory_type.{}.{}", t.get_ref(), k.get_ref());
            let ps = r.cost(&key, c)?;
            let name = k.get_ref().as_str();
            let sized = name
                .strip_prefix("read_")
                .map(|n| (false, n))
                .or_else(|| name.strip_prefix("write_").map(|n| (true, n)));
            match (mt, name, sized) {
                (MemType::Cached, "fill_l2", _) => out.fill_l2_ps = ps,
                (MemType::Cached, "fill_memory", _) => out.fill_memory_ps = ps,
                (_, _, Some((write, n))) => {
                    let size = n
                        .parse::<u64>()
                        .ok()
                        .filter(|s| access_sizes(arch).contains(s));
                    let Some(size) = size else {
                        return Err(InputError::at(
                            r.origin,
                            r.text,
                            Some(k.span()),
                            &key,
                            format!(
                                "{} has no access of `{n}` bytes; its sizes: {:?}",
                                arch.name(),
                                access_sizes(arch)
                            ),
                        ));
                    };
                    if write {
                        tc.write.push((size, ps));
                    } else {
                        tc.read.push((size, ps));
                    }
                }
                _ => {
                    return Err(InputError::at(
                        r.origin,
                        r.text,
                        Some(k.span()),
                        &key,
                        "unknown key: read_N or write_N (N bytes per access), and for `cached` fill_l2 and fill_memory",
                    ));
                }
            }
        }
        out.types[mt as usize] = Some(tc);
    }
    out.prefetch_next_line = f
        .cache_model
        .as_ref()
        .and_then(|m| m.l1_prefetch.as_ref())
        .is_some_and(|p| *p.value.get_ref());
    if let Some(p) = f
        .cache_model
        .as_ref()
        .and_then(|m| m.linefill_buffers.as_ref())
    {
        let n = r.param("cache_model.linefill_buffers", p)?;
        let max = crate::hw::model::MAX_LINEFILLS as f64;
        if n < 1.0 || n.fract() != 0.0 || n > max {
            return Err(InputError::at(
                r.origin,
                r.text,
                Some(p.value.span()),
                "cache_model.linefill_buffers.value",
                format!("must be a whole number of buffers from 1 to {max}, found {n}"),
            ));
        }
        out.linefill_buffers = n as u32;
    }
    Ok(out)
}

/// `[cache_model]`: the levels' geometry from `[cache]` and `[outer_cache]`, checked to be one a
/// cache can have, and the writeback costs.
fn resolve_cache_model(
    r: &Resolver,
    f: &ProfileFile,
    m: &CacheModelSpec,
    line: u64,
) -> Result<CacheModelParams, InputError> {
    r.source("cache_model", &m.source)?;
    let at = |span: std::ops::Range<usize>, key: &str, msg: String| {
        InputError::at(r.origin, r.text, Some(span), key, msg)
    };
    if *m.inclusion.get_ref() != InclusionSpec::Neither {
        return Err(at(
            m.inclusion.span(),
            "cache_model.inclusion",
            "only \"neither\" (non-inclusive, non-exclusive: a Cortex-A9 with a PL310 outside exclusive mode) is modelled".into(),
        ));
    }
    r.source("cache_model.l1_write_allocate", &m.l1_write_allocate.source)?;
    let need = |p: &Option<Param>, key: &str| {
        p.clone().ok_or_else(|| {
            at(
                m.source.span(),
                key,
                format!("missing, but [cache_model] takes the L1's geometry from `{key}`"),
            )
        })
    };
    let size_kib = r.power_of_two(
        "cache.size_kib",
        &need(&f.cache.size_kib, "cache.size_kib")?,
        1 << 20,
    )?;
    let ways_p = need(&f.cache.ways, "cache.ways")?;
    let ways = r.power_of_two("cache.ways", &ways_p, 64)?;
    let l1 = Geometry {
        line_bytes: line,
        size_bytes: size_kib << 10,
        ways,
    };
    if !l1.is_valid() {
        return Err(at(
            ways_p.value.span(),
            "cache.ways.value",
            format!("{ways} ways of {line}-byte lines do not fit in {size_kib} KiB"),
        ));
    }
    let mut levels = vec![LevelSpec {
        name: "L1",
        geometry: l1,
        write_allocate: *m.l1_write_allocate.value.get_ref(),
    }];
    let l1_wb = r.cost("cache_model.l1_writeback", &m.l1_writeback)?;
    let mut l2_wb = 0;
    if let Some(o) = &f.outer_cache {
        let outer_line = crate::arch::arm::cache_l2x0::CACHE_LINE_SIZE;
        if line != outer_line {
            return Err(at(
                f.cache.line_bytes.value.span(),
                "cache.line_bytes.value",
                format!(
                    "the cache model needs the L1 and the outer cache to share one line size, and the PL310's is {outer_line} bytes"
                ),
            ));
        }
        let size = r.power_of_two("outer_cache.size_kib", &o.size_kib, 1 << 16)?;
        let oways = r.power_of_two("outer_cache.ways", &o.ways, 16)?;
        let geometry = Geometry {
            line_bytes: line,
            size_bytes: size << 10,
            ways: oways,
        };
        if !geometry.is_valid() {
            return Err(at(
                o.ways.value.span(),
                "outer_cache.ways.value",
                format!("{oways} ways of {line}-byte lines do not fit in {size} KiB"),
            ));
        }
        let wa = m.l2_write_allocate.as_ref().ok_or_else(|| {
            at(
                m.source.span(),
                "cache_model.l2_write_allocate",
                "missing: with an [outer_cache], say whether it allocates on a write".into(),
            )
        })?;
        r.source("cache_model.l2_write_allocate", &wa.source)?;
        let c = m.l2_writeback.as_ref().ok_or_else(|| {
            at(
                m.source.span(),
                "cache_model.l2_writeback",
                "missing: with an [outer_cache], the cost of writing one of its dirty lines to memory".into(),
            )
        })?;
        l2_wb = r.cost("cache_model.l2_writeback", c)?;
        levels.push(LevelSpec {
            name: "L2",
            geometry,
            write_allocate: *wa.value.get_ref(),
        });
    } else if let Some(c) = &m.l2_writeback {
        return Err(at(
            c.source.span(),
            "cache_model.l2_writeback",
            "the platform has no [outer_cache]: there is no L2 level to write back from".into(),
        ));
    }
    let outer_from = if f.outer_cache.is_some() {
        1
    } else {
        levels.len()
    };
    Ok(CacheModelParams {
        hierarchy: HierarchySpec { levels, outer_from },
        writeback_ps: [l1_wb, l2_wb],
    })
}

fn resolve_outer(r: &Resolver, arch: Arch, o: &OuterCacheSpec) -> Result<OuterParams, InputError> {
    r.source("outer_cache", &o.source)?;
    if arch != Arch::Armv7 {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(o.source.span()),
            "outer_cache",
            format!(
                "an outer cache is driven by ARMv7's cache-l2x0.c, and the platform is {}",
                arch.name()
            ),
        ));
    }
    let rev = o.revision.get_ref();
    if !OUTER_REVISIONS.contains(&rev.as_str()) {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(o.revision.span()),
            "outer_cache.revision",
            format!(
                "PL310 revision `{rev}` is not modelled (its errata workarounds are not); modelled: {}",
                OUTER_REVISIONS.join(", ")
            ),
        ));
    }
    r.power_of_two("outer_cache.size_kib", &o.size_kib, 1 << 16)?;
    r.power_of_two("outer_cache.ways", &o.ways, 16)?;
    let mut line_ps = [0; 3];
    for (op, key, c) in [
        (CacheOp::Clean, "outer_cache.clean_line", &o.clean_line),
        (CacheOp::Inval, "outer_cache.inval_line", &o.inval_line),
        (
            CacheOp::CleanInval,
            "outer_cache.clean_inval_line",
            &o.clean_inval_line,
        ),
    ] {
        line_ps[op as usize] = r.cost(key, c)?;
    }
    let mut way_line_ps = [0; 3];
    way_line_ps[CacheOp::Clean as usize] =
        r.cost("outer_cache.clean_way_line", &o.clean_way_line)?;
    way_line_ps[CacheOp::CleanInval as usize] =
        r.cost("outer_cache.clean_inval_way_line", &o.clean_inval_way_line)?;
    Ok(OuterParams {
        line_ps,
        sync_ps: r.cost("outer_cache.sync", &o.sync)?,
        way_line_ps,
    })
}

/// Check `[code]`: whole instruction counts, and present wherever `[sw]` prices a function per
/// instruction (a per-instruction cost with nothing to count would silently charge nothing).
fn resolve_code(r: &Resolver, f: &ProfileFile) -> Result<(), InputError> {
    let code = f.code.as_ref().and_then(|c| c.swiotlb_2012.as_ref());
    if let Some(c) = code {
        for (k, p) in c.groups() {
            let key = format!("code.swiotlb_2012.{k}");
            let n = r.param(&key, p)?;
            if n.fract() != 0.0 || n > MAX_GROUP_INSNS {
                return Err(InputError::at(
                    r.origin,
                    r.text,
                    Some(p.value.span()),
                    &format!("{key}.value"),
                    format!(
                        "must be a whole number of instructions from 0 to {MAX_GROUP_INSNS}, found {n}"
                    ),
                ));
            }
        }
    } else if let Some((k, _)) =
        f.sw.iter()
            .find(|(k, _)| SwKey::from_name(k.get_ref()).is_some_and(|key| key.per_instruction()))
    {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(k.span()),
            "code.swiotlb_2012",
            format!(
                "`sw.{}` is a cost per instruction, so the profile must count the instructions: add a [code.swiotlb_2012] section (docs/profiles.md)",
                k.get_ref()
            ),
        ));
    }
    Ok(())
}

fn resolve_smmu(r: &Resolver, s: &SmmuSpec) -> Result<SmmuParams, InputError> {
    r.source("smmu", &s.source)?;
    let kind = match s.kind {
        SmmuKindSpec::Mmu500 => SmmuKind::Mmu500,
        SmmuKindSpec::SmmuV3 => SmmuKind::SmmuV3,
    };
    let bad_version = |v: &Spanned<String>, what: &str| {
        InputError::at(r.origin, r.text, Some(v.span()), "smmu.version", what)
    };
    let range_inv = match (&s.version, kind) {
        (None, _) => false,
        (Some(v), SmmuKind::Mmu500) => {
            if !matches!(v.get_ref().as_str(), "1" | "2") {
                return Err(bad_version(v, "an mmu-500 is an SMMUv2: expected \"2\""));
            }
            false
        }
        (Some(v), SmmuKind::SmmuV3) => {
            let minor = v
                .get_ref()
                .strip_prefix("3.")
                .and_then(|m| m.parse::<u32>().ok())
                .ok_or_else(|| bad_version(v, "expected \"3.N\", e.g. \"3.2\""))?;
            minor >= 2
        }
    };
    let cmdq_write_ps = match (&s.cmdq_write, kind) {
        (Some(c), _) => r.cost("smmu.cmdq_write", c)?,
        (None, SmmuKind::SmmuV3) => {
            return Err(InputError::at(
                r.origin,
                r.text,
                Some(s.source.span()),
                "smmu.cmdq_write",
                "missing: an smmu-v3 writes its commands into a queue in memory",
            ));
        }
        (None, SmmuKind::Mmu500) => 0,
    };
    let imp = match &s.implementation {
        None => SmmuImpl::Arm,
        Some(v) => match (SmmuImpl::parse(v.get_ref()), kind) {
            (Some(SmmuImpl::Qcom), SmmuKind::SmmuV3) => {
                return Err(InputError::at(
                    r.origin,
                    r.text,
                    Some(v.span()),
                    "smmu.impl",
                    "Qualcomm's implementation (arm-smmu-qcom.c) drives MMU-500s, not SMMUv3s",
                ));
            }
            (Some(i), _) => i,
            (None, _) => {
                return Err(InputError::at(
                    r.origin,
                    r.text,
                    Some(v.span()),
                    "smmu.impl",
                    format!(
                        "unknown implementation `{}`; choose one of: {}",
                        v.get_ref(),
                        SmmuImpl::NAMES.join(", ")
                    ),
                ));
            }
        },
    };
    r.source("smmu.coherent_walk", &s.coherent_walk.source)?;
    Ok(SmmuParams {
        kind,
        imp,
        range_inv,
        coherent_walk: *s.coherent_walk.value.get_ref(),
        mmio_write_ps: r.cost("smmu.mmio_write", &s.mmio_write)?,
        mmio_read_ps: r.cost("smmu.mmio_read", &s.mmio_read)?,
        tlbi_va_ps: r.cost("smmu.tlbi_va", &s.tlbi_va)?,
        tlbi_asid_ps: r.cost("smmu.tlbi_asid", &s.tlbi_asid)?,
        sync_ps: r.cost("smmu.sync", &s.sync)?,
        cmdq_write_ps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_loads() {
        for n in builtin_names() {
            let p = Profile::load(n).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(p.name(), n);
            assert!(p.params().iter().all(|i| !i.source.trim().is_empty()));
        }
    }

    #[test]
    fn unknown_platform_lists_the_known_ones() {
        let e = Profile::load("no-such-soc").unwrap_err();
        assert!(e.message.contains("dimensity9500"), "{e}");
    }

    const MINIMAL: &str = r#"
[platform]
name = "t"
description = "test"
arch = "arm64"
cpu_freq_mhz = { value = 1000, source = "test" }

[cache]
line_bytes = { value = 64, source = "test" }
[cache.clean]
issue = { cycles = 2, source = "test" }
latency = { ns = 100, source = "test" }

[barrier]
cost = { ns = 5, source = "test" }
"#;

    #[test]
    fn cycles_convert_at_the_profile_clock() {
        let p = Profile::parse("t.toml", MINIMAL).unwrap();
        let c = p.model.maint(CacheOp::Clean).unwrap();
        assert_eq!(c.issue_ps, 2000);
        assert_eq!(c.latency_ps, 100_000);
        assert_eq!(p.model.barrier_ps, 5000);
        assert!(p.model.maint(CacheOp::Inval).is_none());
        assert!(
            p.require_ops(&[CacheOp::Inval], "arm64 dma-direct")
                .is_err()
        );
    }

    #[test]
    fn negative_cost_names_key_and_line() {
        let text = MINIMAL.replace("latency = { ns = 100", "latency = { ns = -3");
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cache.clean.latency.ns"), "{e}");
        assert_eq!(e.line, Some(12), "{e}");
    }

    #[test]
    fn numbers_that_would_wrap_the_clock_are_refused() {
        // (from, to, key, line): each value is finite and non-negative but out of range.
        for (from, to, key, line) in [
            (
                "latency = { ns = 100",
                "latency = { ns = 1e300",
                "cache.clean.latency",
                12,
            ),
            (
                "issue = { cycles = 2",
                "issue = { cycles = 1e18",
                "cache.clean.issue",
                11,
            ),
            (
                "cpu_freq_mhz = { value = 1000",
                "cpu_freq_mhz = { value = 1e-300",
                "platform.cpu_freq_mhz.value",
                6,
            ),
            (
                "cpu_freq_mhz = { value = 1000",
                "cpu_freq_mhz = { value = 2.4",
                "platform.cpu_freq_mhz.value",
                6,
            ),
            (
                "line_bytes = { value = 64",
                "line_bytes = { value = 1099511627776",
                "cache.line_bytes.value",
                9,
            ),
        ] {
            let e = Profile::parse("t.toml", &MINIMAL.replace(from, to)).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
            assert_eq!(e.line, Some(line), "{to}: {e}");
        }
        // The largest allowed values still load.
        let edge = MINIMAL
            .replace("latency = { ns = 100", "latency = { ns = 1e9")
            .replace("line_bytes = { value = 64", "line_bytes = { value = 4096");
        assert!(Profile::parse("t.toml", &edge).is_ok());
    }

    const SMMU: &str = r#"
[smmu]
kind = "mmu-500"
version = "2"
source = "test"
mmio_write = { ns = 10, source = "test" }
mmio_read = { cycles = 200, source = "test" }
tlbi_va = { ns = 30, source = "test" }
tlbi_asid = { ns = 40, source = "test" }
sync = { ns = 50, source = "test" }
coherent_walk = { value = false, source = "test" }
"#;

    #[test]
    fn smmu_section_resolves_and_is_listed() {
        let p = Profile::parse("t.toml", &format!("{MINIMAL}{SMMU}")).unwrap();
        let s = p.model.smmu.unwrap();
        assert_eq!(s.kind, SmmuKind::Mmu500);
        assert_eq!(s.mmio_read_ps, 200_000);
        assert_eq!(s.sync_ps, 50_000);
        assert!(p.params().iter().any(|i| i.key == "smmu.tlbi_va"));
        assert!(
            Profile::parse("t.toml", MINIMAL)
                .unwrap()
                .model
                .smmu
                .is_none()
        );
    }

    #[test]
    fn smmu_errors_name_key_and_line() {
        let text =
            format!("{MINIMAL}{SMMU}").replace("tlbi_asid = { ns = 40", "tlbi_asid = { ns = -1");
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("smmu.tlbi_asid.ns"), "{e}");
        assert_eq!(e.line, Some(24), "{e}");
        let text = format!("{MINIMAL}{SMMU}").replace("\"mmu-500\"", "\"smmu-v3\"");
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("smmu.version"), "{e}");
        let text = text.replace("version = \"2\"", "version = \"3.2\"");
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("smmu.cmdq_write"), "{e}");
        let text = text.replace(
            "sync = { ns = 50, source = \"test\" }",
            "sync = { ns = 50, source = \"test\" }\ncmdq_write = { ns = 2, source = \"t\" }",
        );
        let s = Profile::parse("t.toml", &text).unwrap().model.smmu.unwrap();
        assert!(s.range_inv);
        assert_eq!(s.kind, SmmuKind::SmmuV3);
        assert!(!s.coherent_walk);
        // Whether the walker snoops is the platform's to say, with its source.
        let text = format!("{MINIMAL}{SMMU}")
            .replace("coherent_walk = { value = false, source = \"test\" }\n", "");
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert!(e.to_string().contains("coherent_walk"), "{e}");
        let text = format!("{MINIMAL}{SMMU}").replace(
            "value = false, source = \"test\"",
            "value = true, source = \" \"",
        );
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("smmu.coherent_walk.source"), "{e}");
    }

    #[test]
    fn memory_copy_is_optional_and_checked() {
        let p = Profile::parse("t.toml", MINIMAL).unwrap();
        assert!(p.model.copy.is_none());
        assert!(p.require_copy("swiotlb").is_err());
        let text = format!(
            "{MINIMAL}\n[memory.copy]\ncall = {{ ns = 10, source = \"test\" }}\nper_byte = {{ cycles = 0.1, source = \"test\" }}\n"
        );
        let p = Profile::parse("t.toml", &text).unwrap();
        // 0.1 cycles at 1 GHz = 100 ps per byte.
        assert_eq!(
            p.model.copy,
            Some(CopyCost {
                call_ps: 10_000,
                per_byte_fs: 100_000
            })
        );
        p.require_copy("swiotlb").unwrap();
        assert!(p.params().iter().any(|i| i.key == "memory.copy.per_byte"));
        let bad = text.replace("ns = 10,", "ns = -1,");
        let e = Profile::parse("t.toml", &bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("memory.copy.call.ns"), "{e}");
        assert!(e.line.is_some());
        let nosrc = text.replace(
            "cycles = 0.1, source = \"test\"",
            "cycles = 0.1, source = \" \"",
        );
        let e = Profile::parse("t.toml", &nosrc).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("memory.copy.per_byte.source"), "{e}");
    }

    #[test]
    fn unknown_sw_key_names_file_line_key_and_the_closest_name() {
        let text = format!(
            "{MINIMAL}\n[sw]\nsg_next = {{ cycles = 4, source = \"test\" }}\ndma_api_cal = {{ cycles = 20, source = \"test\" }}\n"
        );
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.file, "t.toml");
        assert_eq!(e.key.as_deref(), Some("sw.dma_api_cal"), "{e}");
        assert_eq!(e.line, Some(19), "{e}");
        assert!(e.message.contains("did you mean `dma_api_call`?"), "{e}");
        assert!(e.message.contains("dmasim costs"), "{e}");
        let far = text.replace("dma_api_cal", "\"no such thing\"");
        let e = Profile::parse("t.toml", &far).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("sw.no such thing"), "{e}");
        assert!(!e.message.contains("did you mean"), "{e}");
        let ok = text.replace("dma_api_cal", "dma_api_call");
        let p = Profile::parse("t.toml", &ok).unwrap();
        assert_eq!(p.model.sw.get("dma_api_call"), Some(&20_000));
        assert!(p.params().iter().any(|i| i.key == "sw.dma_api_call"));
    }

    #[test]
    fn unpriced_sw_costs_are_listed_and_can_be_required() {
        let text = format!("{MINIMAL}\n[sw]\nsg_next = {{ ns = 0, source = \"test\" }}\n");
        let p = Profile::parse("t.toml", &text).unwrap();
        let keys = [SwKey::DmaApiCall, SwKey::SgNext, SwKey::DmaDirectMapPhys];
        // An explicit zero is priced; only absent keys are unpriced.
        assert_eq!(
            p.unpriced_sw(&keys),
            vec![SwKey::DmaApiCall, SwKey::DmaDirectMapPhys]
        );
        let e = p.require_sw(&keys, "arm64 dma-direct").unwrap_err();
        assert_eq!(e.file, "t.toml");
        assert_eq!(e.key.as_deref(), Some("sw.dma_api_call"), "{e}");
        assert!(
            e.message.contains("also missing: sw.dma_direct_map_phys"),
            "{e}"
        );
        p.require_sw(&[SwKey::SgNext], "a walk").unwrap();
        let w = p.unpriced_sw_warning(&keys, "a test run").unwrap();
        assert!(w.starts_with("t.toml: platform `t` does not price 2 software costs a test run can charge, so they cost 0: sw.dma_api_call, sw.dma_direct_map_phys"), "{w}");
        assert_eq!(p.unpriced_sw_warning(&[SwKey::SgNext], "a walk"), None);
        for n in builtin_names() {
            let p = Profile::load(n).unwrap();
            assert!(
                p.file
                    .sw
                    .keys()
                    .all(|k| SwKey::from_name(k.get_ref()).is_some()),
                "{n}"
            );
        }
    }

    #[test]
    fn empty_source_is_refused() {
        let text = MINIMAL.replace(
            "cost = { ns = 5, source = \"test\" }",
            "cost = { ns = 5, source = \"\" }",
        );
        let e = Profile::parse("t.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("barrier.cost.source"), "{e}");
    }

    #[test]
    fn per_instruction_costs_need_their_instruction_counts() {
        let insn = format!(
            "{MINIMAL}\n[sw]\n\"insn.unmap_single\" = {{ cycles = 1, source = \"test\" }}\n"
        );
        let e = Profile::parse("t.toml", &insn).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("code.swiotlb_2012"), "{e}");
        assert!(e.to_string().contains("t.toml:"), "{e}");
        // The built-in profile counts them; every group is listed with its source.
        let text = BUILTIN
            .iter()
            .find(|(n, _)| *n == "x86-2012-ixgbe")
            .unwrap()
            .1;
        let p = Profile::parse("x.toml", text).unwrap();
        let groups: Vec<_> = p
            .params()
            .into_iter()
            .filter(|i| i.key.starts_with("code.swiotlb_2012."))
            .collect();
        assert_eq!(groups.len(), 10);
        assert!(groups.iter().all(|g| g.source.starts_with("counted:")));
        // A count must be a whole number, and within bounds.
        for (bad, want) in [
            ("4.5", "whole number"),
            ("1e6", "whole number"),
            ("-1", "non-negative"),
        ] {
            let t = text.replacen(
                "frame = { value = 4,",
                &format!("frame = {{ value = {bad},"),
                1,
            );
            let e = Profile::parse("x.toml", &t).unwrap_err();
            assert_eq!(
                e.key.as_deref(),
                Some("code.swiotlb_2012.frame.value"),
                "{e}"
            );
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
        // An unknown group is refused by name.
        let t = text.replacen("frame = { value = 4,", "frames = { value = 4,", 1);
        assert!(Profile::parse("x.toml", &t).is_err());
    }
}
