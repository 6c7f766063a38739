//! Rendering results: what every table and JSON document shares (docs/output.md).
//!
//! Kernel counterpart: none. Each workload kind renders its own result (`table`, `json` in its
//! module under `scenario`) with the pieces here: the run's head, the device line, call and
//! breakdown documents, refusals, units; and `dmasim policies`' table.
//!
//! Invariants: output depends only on the result, never on the clock or the environment, so the
//! same inputs give byte-identical output; JSON field order is fixed by the structs below.

use crate::hw::Counter;
use crate::hw::calls::{CallStat, StackRow};
use crate::platform::Arch;
use crate::policy::{Policies, Target};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Version of the JSON documents' layout; bumped on any incompatible change. 2: every `stack` is
/// an array of frames (in 1 it was one string joined with " > ").
pub const FORMAT_VERSION: u32 = 2;

pub fn ns(ps: u64) -> f64 {
    ps as f64 / 1000.0
}

/// A duration for people: ns, µs or ms with four significant-ish digits.
pub fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// One unit for a whole column of times: the unit of the column's largest value, so every row of
/// a column reads in the same unit (`0.0077` under `33.4750`, both µs, never `7.7 ns` above
/// `33.475 µs`); the header names it (`mean (µs)`). Decimals are the unit's usual ones (1 for ns,
/// 3 otherwise), more when the column's smallest non-zero value would otherwise show fewer than
/// two significant digits (up to picoseconds for ns, 6 decimals otherwise), so no time that is
/// not zero reads as zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimeUnit {
    pub name: &'static str,
    ns_per_unit: f64,
    decimals: usize,
}

impl TimeUnit {
    pub fn for_column(ns: impl IntoIterator<Item = f64>) -> TimeUnit {
        let (mut max, mut min) = (0.0f64, f64::INFINITY);
        for x in ns {
            max = max.max(x);
            if x > 0.0 {
                min = min.min(x);
            }
        }
        let (name, ns_per_unit, base, cap) = if max >= 1e9 {
            ("s", 1e9, 3, 6)
        } else if max >= 1e6 {
            ("ms", 1e6, 3, 6)
        } else if max >= 1e3 {
            ("µs", 1e3, 3, 6)
        } else {
            ("ns", 1.0, 1, 3)
        };
        let mut decimals = base;
        if min.is_finite() {
            let x = min / ns_per_unit;
            // Digits after the point that show two significant digits of x.
            let need = (1.0 - x.log10().floor()).max(0.0) as usize;
            decimals = need.clamp(base, cap);
        }
        TimeUnit {
            name,
            ns_per_unit,
            decimals,
        }
    }

    /// A time in this unit, without the unit.
    pub fn num(&self, ns: f64) -> String {
        format!("{:.*}", self.decimals, ns / self.ns_per_unit)
    }

    /// A column header with the unit: `mean (µs)`.
    pub fn header(&self, what: &str) -> String {
        format!("{what} ({})", self.name)
    }
}

pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

pub(crate) fn counts_map(c: &[u64; Counter::N]) -> BTreeMap<&'static str, u64> {
    Counter::ALL
        .iter()
        .filter(|k| c[**k as usize] > 0)
        .map(|k| (k.name(), c[*k as usize]))
        .collect()
}

#[derive(Serialize)]
pub(crate) struct DeviceDoc<'a> {
    name: &'a str,
    coherent: bool,
    dma_mask: String,
    numa_node: Option<u32>,
}

#[derive(Serialize)]
pub(crate) struct CallDoc {
    call: &'static str,
    count: u64,
    mean_ns: f64,
    total_ns: f64,
    /// Calls the modelled kernel refused (a mapping error), and the first refusal.
    refused: u64,
    first_refusal: Option<String>,
    /// Operations issued inside the call, per call.
    operations_per_call: BTreeMap<&'static str, f64>,
}

pub(crate) fn call_doc(c: &CallStat) -> CallDoc {
    CallDoc {
        call: c.call,
        count: c.count,
        mean_ns: c.mean_ns(),
        total_ns: ns(c.total_ps),
        refused: c.errors,
        first_refusal: c.first_error.clone(),
        operations_per_call: Counter::ALL
            .iter()
            .filter(|k| c.counts[**k as usize] > 0)
            .map(|k| (k.name(), c.per_call(*k)))
            .collect(),
    }
}

#[derive(Serialize)]
pub(crate) struct StackDoc {
    /// The frames, outermost first (an array, so no frame name needs escaping).
    stack: Vec<String>,
    self_ns: f64,
    share_pct: f64,
    operations: BTreeMap<&'static str, u64>,
}

impl<'a> DeviceDoc<'a> {
    pub(crate) fn of(d: &'a crate::device::Device) -> DeviceDoc<'a> {
        DeviceDoc {
            name: &d.name,
            coherent: d.coherent,
            dma_mask: format!("{:#x}", d.dma_mask),
            numa_node: d.numa_node,
        }
    }
}

/// The release and every policy in effect for `t`, for the JSON documents' `policies`.
pub fn policies_map(
    p: &crate::policy::Policies,
    t: &crate::policy::Target,
) -> BTreeMap<&'static str, String> {
    let mut m: BTreeMap<&'static str, String> = p
        .in_effect(t)
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    m.insert("kernel", p.kernel.to_string());
    m
}

/// The frames of a stack as the ledger names it (`a > b > c`), outermost first: what JSON
/// documents carry as an array and folded output joins with `;`.
pub fn frames(stack: &str) -> impl Iterator<Item = &str> {
    stack.split(" > ")
}

pub(crate) fn breakdown_docs(stacks: &[StackRow], total_ps: u64) -> Vec<StackDoc> {
    stacks
        .iter()
        .map(|s| StackDoc {
            stack: frames(&s.stack).map(str::to_string).collect(),
            self_ns: ns(s.self_ps),
            share_pct: share(s.self_ps, total_ps),
            operations: counts_map(&s.counts),
        })
        .collect()
}

pub(crate) fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (part as f64 * 100.0 / total as f64 * 1000.0).round() / 1000.0
    }
}

/// Which scenario ran where, under which policies: the head of every result.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub scenario: String,
    pub platform: String,
    pub arch: Arch,
    pub policies: Policies,
    /// What the policies were resolved for (which of them apply).
    pub target: Target,
    /// The IOMMU the run maps through, as its header line says it: granule, address size, SMMU
    /// model and version, and the table walker's coherence with where it came from.
    pub iommu: Option<String>,
    /// The profile's costs that were fitted to published rows, and those held (set by
    /// judgement, not fitted), by key.
    pub fitted: Vec<String>,
    pub held: Vec<String>,
}

/// The first lines of every `run` table: scenario, platform and policies, and the IOMMU if the
/// run has one.
pub(crate) fn header(o: &mut String, i: &RunInfo) {
    let _ = writeln!(o, "scenario   {}", i.scenario);
    let _ = writeln!(
        o,
        "platform   {} ({}), {}",
        i.platform,
        i.arch.name(),
        i.policies.summary(&i.target)
    );
    if let Some(iommu) = &i.iommu {
        let _ = writeln!(o, "iommu      {iommu}");
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let _ = writeln!(
        o,
        "costs      fitted: {}; held (assumed, not fitted): {}",
        list(&i.fitted),
        list(&i.held)
    );
}

/// The head of every run document: scenario, platform, arch and the policies in effect.
#[derive(Serialize)]
pub(crate) struct HeadDoc<'a> {
    scenario: &'a str,
    platform: &'a str,
    arch: &'a str,
    policies: BTreeMap<&'static str, String>,
    fitted_costs: &'a [String],
    held_costs: &'a [String],
}

impl<'a> HeadDoc<'a> {
    pub(crate) fn of(i: &'a RunInfo) -> HeadDoc<'a> {
        HeadDoc {
            scenario: &i.scenario,
            platform: &i.platform,
            arch: i.arch.name(),
            policies: policies_map(&i.policies, &i.target),
            fitted_costs: &i.fitted,
            held_costs: &i.held,
        }
    }
}

pub(crate) fn device_line(o: &mut String, d: &crate::device::Device) {
    let kind = if d.coherent {
        "coherent"
    } else {
        "non-coherent"
    };
    let _ = writeln!(
        o,
        "device     {}: {kind}, dma_mask {:#x}",
        d.name, d.dma_mask
    );
}

pub(crate) fn instr(c: Counter, arch: Arch) -> &'static str {
    c.instruction(arch)
}

/// What the modelled kernel refused, per call: a section only when something was.
pub(crate) fn refusals<'a>(
    o: &mut String,
    rows: impl Iterator<Item = (&'a str, u64, Option<&'a str>)>,
) {
    let rows: Vec<_> = rows.filter(|r| r.1 > 0).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nrefused by the modelled kernel");
    for (what, n, first) in rows {
        let _ = writeln!(o, "  {what:<26} {n:>8}  first: {}", first.unwrap_or("?"));
    }
}

/// The breakdown table: every stack that took time, its share and its time divided by `per`
/// (iterations, or 1 for the whole run).
pub(crate) fn stack_table(
    o: &mut String,
    what: &str,
    stacks: &[StackRow],
    total_ps: u64,
    per: u64,
) {
    let per = per.max(1) as f64;
    let unit = TimeUnit::for_column(stacks.iter().map(|s| ns(s.self_ps) / per));
    let _ = writeln!(o, "\ntime by call stack ({what})");
    let _ = writeln!(o, "  {:>7} {:>12}  stack", "share", unit.header("time"));
    for s in stacks.iter().filter(|s| s.self_ps > 0) {
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>12}  {}",
            share(s.self_ps, total_ps),
            unit.num(ns(s.self_ps) / per),
            s.stack
        );
    }
}

/// Every operation the run issued, per iteration: (instruction, counter, count) rows with each
/// column as wide as its longest entry, so a long instruction label (`TLBSTATUS read`,
/// `unmap_pages call`) keeps the columns aligned.
pub(crate) fn operations_per_iteration(
    o: &mut String,
    counts: &[u64; Counter::N],
    arch: Arch,
    iterations: u64,
) {
    let rows: Vec<(&str, &str, String)> = Counter::ALL
        .iter()
        .filter(|c| counts[**c as usize] > 0)
        .map(|&c| {
            let per = counts[c as usize] as f64 / iterations.max(1) as f64;
            (instr(c, arch), c.name(), trim_float(per))
        })
        .collect();
    let w0 = rows
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0)
        .max(12);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(24);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(12);
    for (a, b, c) in rows {
        let _ = writeln!(o, "  {a:<w0$} {b:<w1$} {c:>w2$}");
    }
}

/// A time in ns, in the unit that reads best (`4.1 ms`).
pub(crate) fn human_time_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

pub(crate) fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else if x.abs() < 0.005 {
        // Two decimals would print a count that is not zero as 0.00.
        format!("{x:.2e}")
    } else {
        format!("{x:.2}")
    }
}

/// Folded stacks of any run's breakdown.
pub fn folded(stacks: &[StackRow]) -> String {
    let mut o = String::new();
    for s in stacks {
        if s.self_ps > 0 {
            let _ = writeln!(
                o,
                "{} {}",
                frames(&s.stack).collect::<Vec<_>>().join(";"),
                s.self_ps
            );
        }
    }
    o
}

/// The releases `dmasim policies` shows for `profile`, and the target their presets are
/// resolved for (behind an IOMMU where the platform has one).
fn policy_columns(
    profile: &crate::platform::Profile,
) -> (
    crate::policy::Target,
    &'static [crate::policy::KernelVersion],
) {
    use crate::policy::{KernelVersion, Target};
    // ARMv7 is modelled for 3.14-4.0 only: its columns are the releases around its changes.
    const ARMV7: &[KernelVersion] = &[
        KernelVersion(3, 14),
        KernelVersion(3, 15),
        KernelVersion(3, 16),
        KernelVersion(3, 19),
        KernelVersion(4, 0),
    ];
    const OTHERS: &[KernelVersion] = &[
        KernelVersion(3, 6),
        KernelVersion(3, 7),
        KernelVersion(3, 8),
        KernelVersion(5, 14),
        KernelVersion(5, 15),
        KernelVersion(5, 19),
        KernelVersion(6, 0),
        KernelVersion(7, 0),
        KernelVersion(7, 1),
    ];
    // ARMv7's streaming device is served by arm_dma_ops, without a bounce pool.
    let armv7 = profile.arch() == crate::platform::Arch::Armv7;
    let t = Target::of(profile, profile.model.smmu.is_some(), !armv7, true).with_iova_alloc(true);
    (t, if armv7 { ARMV7 } else { OTHERS })
}

/// `dmasim policies --format json`: the same as the table, one object per policy with its
/// choices, meaning, preset rule, whether it applies here, and its preset per release shown
/// (`null` where it does not apply).
pub fn policies_json(profile: &crate::platform::Profile) -> serde_json::Value {
    use crate::policy::REGISTRY;
    let (t, releases) = policy_columns(profile);
    let policies: Vec<serde_json::Value> = REGISTRY
        .iter()
        .map(|d| {
            let presets: serde_json::Map<String, serde_json::Value> = releases
                .iter()
                .map(|&k| {
                    let v = (d.applies(&t).is_ok() && k.modelled_on(t.arch))
                        .then(|| d.preset(k, &t).to_string());
                    (k.to_string(), serde_json::json!(v))
                })
                .collect();
            serde_json::json!({
                "key": d.key,
                "choices": (d.choices)(),
                "description": d.description,
                "preset_rule": d.preset_rule,
                "not_here": d.applies(&t).err(),
                "presets": presets,
            })
        })
        .collect();
    let not_modelled: Vec<serde_json::Value> = crate::policy::NOT_MODELLED
        .iter()
        .map(|(what, instead)| serde_json::json!({ "behaviour": what, "instead": instead }))
        .collect();
    serde_json::json!({
        "platform": profile.name(),
        "arch": t.arch.name(),
        "policies": policies,
        "not_modelled": not_modelled,
    })
}

/// `dmasim policies`: every policy with its choices, meaning, preset rule, and the preset each
/// release gets on `profile` (behind an IOMMU where the platform has one).
pub fn policies_table(profile: &crate::platform::Profile) -> String {
    use crate::policy::REGISTRY;
    let (t, releases) = policy_columns(profile);
    let w = REGISTRY
        .iter()
        .map(|d| d.key.len())
        .max()
        .unwrap_or(16)
        .max(16);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "presets on platform {} ({}{})",
        profile.name(),
        t.arch.name(),
        t.smmu
            .map(|(k, i)| format!(", SMMU {k:?} by {}", i.name()))
            .unwrap_or_default()
    );
    let _ = write!(o, "\n{:<w$}", "policy");
    for k in releases {
        let _ = write!(o, " {:>11}", k.to_string());
    }
    let _ = writeln!(o);
    for d in REGISTRY {
        let _ = write!(o, "{:<w$}", d.key);
        for &k in releases {
            let v = if d.applies(&t).is_ok() && k.modelled_on(t.arch) {
                d.preset(k, &t)
            } else {
                "-"
            };
            let _ = write!(o, " {v:>11}");
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "(- : does not apply on this platform)");
    for d in REGISTRY {
        let _ = writeln!(o, "\n{}  ({})", d.key, (d.choices)().join(" | "));
        let _ = writeln!(o, "  {}", d.description);
        let _ = writeln!(o, "  preset: {}", d.preset_rule);
        if let Err(why) = d.applies(&t) {
            let _ = writeln!(o, "  not here: {why}");
        }
    }
    let _ = writeln!(o, "\nnot modelled (no policy offers them):");
    for (what, instead) in crate::policy::NOT_MODELLED {
        let _ = writeln!(o, "  {what}: {instead}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::TimeUnit;

    /// A count per call below 0.005 is not printed as 0.00.
    #[test]
    fn small_counts_keep_their_digits() {
        assert_eq!(super::trim_float(0.004), "4.00e-3");
        assert_eq!(super::trim_float(0.5), "0.50");
        assert_eq!(super::trim_float(3.0), "3");
    }

    #[test]
    fn a_column_reads_in_one_unit_and_no_time_reads_as_zero() {
        // The batched-sync 7.1 stack column: 3.8 ns to 63 µs, all in µs.
        let u = TimeUnit::for_column([3.8, 7.7, 33_475.0, 63_078.0]);
        assert_eq!(u.name, "µs");
        assert_eq!(u.num(3.8), "0.0038");
        assert_eq!(u.num(63_078.0), "63.0780");
        assert_eq!(u.header("time"), "time (µs)");
        // The Zynq pipeline's calls: 45 ns beside 3.3 ms.
        let u = TimeUnit::for_column([3_336_300.0, 45.0]);
        assert_eq!((u.name, u.num(45.0).as_str()), ("ms", "0.000045"));
        // Plain columns keep the unit's usual decimals; a zero stays 0.
        let u = TimeUnit::for_column([32.7, 9.3, 0.0]);
        assert_eq!(
            (u.name, u.num(9.3).as_str(), u.num(0.0).as_str()),
            ("ns", "9.3", "0.0")
        );
        assert_eq!(TimeUnit::for_column([20.007e9]).num(20.007e9), "20.007");
        assert_eq!(TimeUnit::for_column(std::iter::empty()).name, "ns");
    }
}

/// Time the CPUs spent waiting at one place: for a lock, for another CPU's store, for a
/// device.
#[derive(Clone, Debug, PartialEq)]
pub struct Wait {
    /// The frame that waited and the wait's own frame (`arm_smmu_cmdq_issue_cmd > (spinning
    /// on cmdq->lock)`).
    pub place: String,
    pub ps: u64,
}

/// Whether a stack's last frame is time spent waiting rather than working.
fn is_wait_frame(f: &str) -> bool {
    f.starts_with("(spinning on")
        || f.starts_with("(waiting for")
        || f == crate::hw::ledger::WAIT_FRAME
        || f == crate::hw::LINE_FRAME
}

/// Where the CPUs waited, most first: every stack ending in a wait, summed by its last two
/// frames.
pub fn waits(stacks: &[StackRow]) -> Vec<Wait> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for s in stacks {
        let mut frames = s.stack.rsplit(" > ");
        let Some(last) = frames.next() else { continue };
        if !is_wait_frame(last) || s.self_ps == 0 {
            continue;
        }
        let place = match frames.next() {
            Some(caller) => format!("{caller} > {last}"),
            None => last.to_string(),
        };
        *by.entry(place).or_default() += s.self_ps;
    }
    let mut v: Vec<Wait> = by
        .into_iter()
        .map(|(place, ps)| Wait { place, ps })
        .collect();
    v.sort_by(|a, b| b.ps.cmp(&a.ps).then_with(|| a.place.cmp(&b.place)));
    v
}

/// The waits of a run, per `per` (an iteration, a map+unmap), those of at least 0.1 % of the
/// CPUs' time.
pub(crate) fn waits_table(
    o: &mut String,
    stacks: &[StackRow],
    total_ps: u64,
    per: u64,
    what: &str,
) {
    let waits: Vec<Wait> = waits(stacks)
        .into_iter()
        .filter(|w| w.ps.saturating_mul(1000) >= total_ps)
        .collect();
    if waits.is_empty() {
        return;
    }
    let per = per.max(1) as f64;
    let _ = writeln!(
        o,
        "\nwaiting ({what})\n  {:>7} {:>12}  where",
        "share", "time (ns)"
    );
    for w in &waits {
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>12.3}  {}",
            share(w.ps, total_ps),
            ns(w.ps) / per,
            w.place
        );
    }
}
