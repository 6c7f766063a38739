//! `--sensitivity`: how much each headline result moves when one profile parameter moves ±10 %.
//!
//! Kernel counterpart: none — this answers the question a user with a borrowed or half-measured
//! profile has before trusting an answer: which of the profile's numbers does it rest on, and
//! which should be measured first.
//!
//! What it does: runs the scenario (under each variant, for a comparison) once as given, then,
//! for every profile cost the base runs exercised, twice more with that one cost scaled by 1.1
//! and by 0.9, in every variant at once. Each headline result — each call's mean time per
//! variant, and for each variant after the first the absolute and the percentage change of that
//! call against the first — gives an elasticity, the central difference
//! `(y(+10 %) − y(−10 %)) / (0.2 · y)`: 1 means the result moves in proportion to the parameter,
//! 0 that it does not depend on it. The reruns are whole runs of the model (the algorithms count,
//! the profile prices), so an effect that is not linear in the parameter — a barrier that stops
//! waiting once completions outpace issue — shows as it is; nothing here differentiates a
//! formula.
//!
//! A parameter is perturbed in its resolved form (picoseconds, femtoseconds per byte, MB/s),
//! which is the profile value times a fixed unit factor, so ±10 % of one is ±10 % of the other.
//! Parameters that are not costs (line size, CPU count, cache geometry, instruction counts,
//! yes/no properties) are not perturbed: a 10 % change of them is not a small change of the same
//! machine. `platform.cpu_freq_mhz` is not perturbed on its own either: it is the clock every
//! `cycles` cost is counted in, so moving it moves all of them together (its elasticity is minus
//! the sum of theirs), and the report names them instead.
//!
//! Source kinds come from the source text's category as docs/profiles.md defines it: `measured:`
//! is measured, `fit:` fitted, `held:` and `assumption:` held, and anything else (a manual, a
//! datasheet, a kernel file, a `counted:` instruction count) cited.
//!
//! Invariants: the base runs are exactly the runs `run`/`compare` make; a parameter is perturbed
//! only if the base runs issued the operation it prices (a non-zero count, or for a `[sw]` cost a
//! layer the scenario goes through); every perturbed run is the same scenario with one resolved
//! cost changed, in every variant alike.

use crate::compare::{CompareError, Variant};
use crate::hw::{CacheOp, Counter};
use crate::platform::Profile;
use crate::platform::params::{self, Used};
use crate::report::ns;
use crate::scenario::{self, Outcome, Scenario};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The relative step of each perturbation.
pub const STEP: f64 = 0.10;

/// Below this |elasticity| a result is called robust to a parameter: a 10 % error in the
/// parameter moves the result by less than 1 %.
pub const ROBUST: f64 = 0.1;

pub use crate::platform::SourceKind;

/// What a headline result is.
#[derive(Clone, Debug, PartialEq)]
pub enum Measure {
    /// The call's mean time under variant `v`, in ns.
    Mean { v: usize },
    /// The call's mean time under variant `v` minus under the first, in ns.
    Change { v: usize },
    /// The same change in percent of the first variant's mean.
    ChangePct { v: usize },
}

/// One headline result of one call.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    pub call: String,
    pub measure: Measure,
    /// Its value in the base runs (`None` when the call did not run in a variant it needs, or a
    /// percentage of a zero mean).
    pub base: Option<f64>,
}

/// One perturbed parameter and what it did to every headline.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamEffect {
    pub key: String,
    /// The value as the (first) profile that has it writes it.
    pub value: String,
    pub source: String,
    pub kind: SourceKind,
    /// Per headline, its value with the parameter at −10 % and at +10 %.
    pub minus: Vec<Option<f64>>,
    pub plus: Vec<Option<f64>>,
}

impl ParamEffect {
    /// The elasticity of headline `h` (whose base value is `base`).
    pub fn elasticity(&self, h: usize, base: Option<f64>) -> Option<f64> {
        match (self.minus[h], self.plus[h], base) {
            (Some(m), Some(p), Some(b)) if b != 0.0 => Some((p - m) / (2.0 * STEP * b)),
            _ => None,
        }
    }

    /// Whether moving the parameter changed any headline at all.
    fn moved(&self, base: &[Option<f64>]) -> bool {
        base.iter()
            .enumerate()
            .any(|(h, b)| self.minus[h] != *b || self.plus[h] != *b)
    }
}

/// The analysis of one scenario (under one or several variants).
#[derive(Clone, Debug)]
pub struct Sensitivity {
    pub scenario: String,
    /// The variants' labels (one, "as written", for a plain run).
    pub variants: Vec<String>,
    pub headlines: Vec<Headline>,
    /// Parameters perturbed that moved some headline, in profile order.
    pub params: Vec<ParamEffect>,
    /// Parameters perturbed that moved nothing (a `[sw]` cost of a layer the run passed through
    /// but whose function it never called).
    pub no_effect: Vec<String>,
    /// Parameters of the profiles not perturbed, with why.
    pub not_perturbed: Vec<(String, &'static str)>,
    /// Costs the runs charge at 0: written as 0, or absent from the profile (a `[sw]` cost the
    /// run can charge, an optional interval). No ±10 % moves them, so they are reported apart,
    /// with why each is 0.
    pub not_priced: Vec<(String, &'static str)>,
    /// Runs of the model made, the base runs included.
    pub runs: usize,
}

/// Why a parameter is not perturbed, or `None` if it is a cost that can be (its registry row's
/// kind decides).
fn structural(key: &str) -> Option<&'static str> {
    match params::def(key) {
        Some(d) if d.scale.is_some() => d.kind.not_perturbed(),
        Some(d) => Some(
            d.kind
                .not_perturbed()
                .unwrap_or("not a cost the model charges"),
        ),
        None => Some("not a parameter the registry knows"),
    }
}

/// Scale the resolved cost `key` of `p` by `f` as its registry row says; false if `p` has no
/// such cost.
pub fn scale(p: &mut Profile, key: &str, f: f64) -> bool {
    params::def(key)
        .and_then(|d| d.scale)
        .is_some_and(|scale| scale(p, key, f))
}

/// Whether runs that issued `totals` (and went through the `[sw]` costs `sw`) used `key`.
fn used(key: &str, totals: &[u64; Counter::N], sw: &[String], pipeline: bool) -> bool {
    match params::def(key).map(|d| d.used) {
        Some(Used::Any(cs)) => cs.iter().any(|&c| totals[c as usize] > 0),
        Some(Used::Sw) => key
            .strip_prefix("sw.")
            .is_some_and(|k| sw.iter().any(|s| s == k)),
        Some(Used::Pipeline) => pipeline,
        Some(Used::Never) | None => false,
    }
}

/// Whether two profiles charge the same for everything `scale` can move.
fn same_costs(a: &Profile, b: &Profile) -> bool {
    a.model == b.model
        && a.acp_mb_s == b.acp_mb_s
        && a.numa.as_ref().map(|t| &t.line_ps) == b.numa.as_ref().map(|t| &t.line_ps)
}

fn run(s: &Scenario, label: &str, progress: &scenario::Progress) -> Result<Outcome, CompareError> {
    scenario::execute_with(s, progress).map_err(|e| CompareError::of_variant(label.to_string(), e))
}

/// Each call's mean time (ns) per variant, in the order calls are first met.
fn means(outcomes: &[Outcome]) -> Vec<(String, Vec<Option<f64>>)> {
    let n = outcomes.len();
    let mut rows: Vec<(String, Vec<u64>, Vec<u64>)> = Vec::new();
    for (i, o) in outcomes.iter().enumerate() {
        for (name, count, total) in o.call_totals() {
            let j = match rows.iter().position(|r| r.0 == name) {
                Some(j) => j,
                None => {
                    rows.push((name, vec![0; n], vec![0; n]));
                    rows.len() - 1
                }
            };
            rows[j].1[i] += count;
            rows[j].2[i] = rows[j].2[i].saturating_add(total);
        }
    }
    rows.into_iter()
        .map(|(name, count, total)| {
            let m = (0..n)
                .map(|i| (count[i] > 0).then(|| ns(total[i]) / count[i] as f64))
                .collect();
            (name, m)
        })
        .collect()
}

/// The headline values of a set of runs, in the order of `headlines`.
fn values(headlines: &[Headline], outcomes: &[Outcome]) -> Vec<Option<f64>> {
    let m = means(outcomes);
    headlines
        .iter()
        .map(|h| {
            let row = &m.iter().find(|r| r.0 == h.call)?.1;
            match h.measure {
                Measure::Mean { v } => row[v],
                Measure::Change { v } => Some(row[v]? - row[0]?),
                Measure::ChangePct { v } => crate::compare::change_pct(row[0]?, row[v]?),
            }
        })
        .collect()
}

fn totals(outcomes: &[Outcome]) -> [u64; Counter::N] {
    let mut t = [0u64; Counter::N];
    for o in outcomes {
        for s in o.stacks() {
            for (t, x) in t.iter_mut().zip(s.counts.iter()) {
                *t = t.saturating_add(*x);
            }
        }
    }
    t
}

/// What runs used of their profiles: the costs they charged (the ones `--sensitivity` moves),
/// the parameters that are not costs, and the costs charged at 0.
pub struct UsedParams {
    /// Every cost or rate the runs used, with its value and source, in profile order (the
    /// first profile's order, then each further variant's new keys).
    pub costs: Vec<crate::platform::ParamInfo>,
    /// The profiles' parameters that are not costs, with why.
    pub not_perturbed: Vec<(String, &'static str)>,
    /// Costs the runs charge at 0 because the profile does not give them, with why.
    pub not_priced: Vec<(String, &'static str)>,
}

/// The parameters `scenarios` used in the runs that gave `outcomes`: a cost counts as used
/// when the runs issued the operation it prices, or for a `[sw]` cost went through its layer.
pub fn used_params(scenarios: &[&Scenario], outcomes: &[Outcome]) -> UsedParams {
    let used_counts = totals(outcomes);
    let pipeline = scenarios
        .iter()
        .any(|s| matches!(s.workload, scenario::Workload::Pipeline(_)));
    let mut sw: Vec<String> = Vec::new();
    for s in scenarios {
        for k in s.sw_keys() {
            let k = k.name().to_string();
            if !sw.contains(&k) {
                sw.push(k);
            }
        }
    }
    let mut keys: Vec<crate::platform::ParamInfo> = Vec::new();
    for s in scenarios {
        for p in s.profile.params() {
            if !keys.iter().any(|k| k.key == p.key) {
                keys.push(p);
            }
        }
    }
    let mut not_priced: Vec<(String, &'static str)> = Vec::new();
    for s in scenarios {
        for k in s.profile.unpriced_sw(&s.sw_keys()) {
            let key = format!("sw.{}", k.name());
            if !not_priced.iter().any(|(n, _)| *n == key) {
                not_priced.push((key, "absent from the profile, so charged as 0"));
            }
        }
    }
    // An operation's completion interval is optional and 0 when absent, which ±10 % cannot
    // move; a user should still see that the answer was computed with it at 0.
    for op in CacheOp::ALL {
        let key = format!("cache.{}.interval", op.key());
        if used(&key, &used_counts, &sw, pipeline)
            && !keys.iter().any(|k| k.key == key)
            && scenarios
                .iter()
                .any(|s| s.profile.model.maint(op).is_some())
        {
            not_priced.push((
                key,
                "absent, so 0: 10 % of nothing is nothing; give it a value to see its effect",
            ));
        }
    }
    let mut costs = Vec::new();
    let mut not_perturbed = Vec::new();
    for info in keys {
        if let Some(why) = structural(&info.key) {
            not_perturbed.push((info.key, why));
        } else if used(&info.key, &used_counts, &sw, pipeline) {
            costs.push(info);
        }
    }
    UsedParams {
        costs,
        not_perturbed,
        not_priced,
    }
}

/// Run `base` under each variant (one variant for a plain run), then again with each cost the
/// runs used at ±[`STEP`], and collect every headline's elasticity to each.
pub fn analyse(
    base: &Scenario,
    variants: &[Variant],
    progress: &scenario::Progress,
) -> Result<Sensitivity, CompareError> {
    let mut scenarios = Vec::with_capacity(variants.len());
    for v in variants {
        let mut s = base.clone();
        v.apply(&mut s)?;
        scenarios.push((v.label(), s));
    }
    let run_all = |ss: &[(String, Scenario)]| -> Result<Vec<Outcome>, CompareError> {
        ss.iter().map(|(l, s)| run(s, l, progress)).collect()
    };
    let outcomes = run_all(&scenarios)?;
    let mut runs = outcomes.len();

    let nv = scenarios.len();
    let mut headlines = Vec::new();
    for (call, _) in means(&outcomes) {
        let mut push = |measure| {
            headlines.push(Headline {
                call: call.clone(),
                measure,
                base: None,
            })
        };
        for v in 0..nv {
            push(Measure::Mean { v });
        }
        for v in 1..nv {
            push(Measure::Change { v });
            push(Measure::ChangePct { v });
        }
    }
    let base_values = values(&headlines, &outcomes);
    for (h, b) in headlines.iter_mut().zip(&base_values) {
        h.base = *b;
    }

    let refs: Vec<&Scenario> = scenarios.iter().map(|(_, s)| s).collect();
    let UsedParams {
        costs,
        not_perturbed,
        mut not_priced,
    } = used_params(&refs, &outcomes);
    let mut params = Vec::new();
    let mut no_effect = Vec::new();
    for info in costs {
        let mut side = |f: f64| -> Result<Option<Vec<Option<f64>>>, CompareError> {
            let mut ss = scenarios.clone();
            let mut any = false;
            for ((_, s), (_, orig)) in ss.iter_mut().zip(&scenarios) {
                any |=
                    scale(&mut s.profile, &info.key, f) && !same_costs(&s.profile, &orig.profile);
            }
            if !any {
                return Ok(None);
            }
            let o = run_all(&ss)?;
            runs += o.len();
            Ok(Some(values(&headlines, &o)))
        };
        let (Some(minus), Some(plus)) = (side(1.0 - STEP)?, side(1.0 + STEP)?) else {
            not_priced.push((
                info.key,
                "written as 0: 10 % of nothing is nothing; give it a value to see its effect",
            ));
            continue;
        };
        let e = ParamEffect {
            kind: SourceKind::of(&info.source),
            key: info.key,
            value: info.value,
            source: info.source,
            minus,
            plus,
        };
        if e.moved(&base_values) {
            params.push(e);
        } else {
            no_effect.push(e.key);
        }
    }
    Ok(Sensitivity {
        scenario: base.name.clone(),
        variants: scenarios.iter().map(|(l, _)| l.clone()).collect(),
        headlines,
        params,
        no_effect,
        not_perturbed,
        not_priced,
        runs,
    })
}

fn letter(i: usize) -> char {
    char::from(b'A' + (i % 26) as u8)
}

impl Headline {
    /// A short column name: `A`, `B`, `B-A`, `B/A %`.
    fn column(&self, variants: usize) -> String {
        match self.measure {
            Measure::Mean { .. } if variants == 1 => "mean".to_string(),
            Measure::Mean { v } => format!("{}", letter(v)),
            Measure::Change { v } => format!("{}-A", letter(v)),
            Measure::ChangePct { v } => format!("{}/A %", letter(v)),
        }
    }

    fn describe(&self, variants: &[String]) -> String {
        match self.measure {
            Measure::Mean { .. } if variants.len() == 1 => "mean time".to_string(),
            Measure::Mean { v } => format!("mean time under {}", variants[v]),
            Measure::Change { v } => format!("{} vs A, absolute change", letter(v)),
            Measure::ChangePct { v } => format!("{} vs A, % change", letter(v)),
        }
    }

    fn json_name(&self) -> &'static str {
        match self.measure {
            Measure::Mean { .. } => "mean_ns",
            Measure::Change { .. } => "change_ns",
            Measure::ChangePct { .. } => "change_pct",
        }
    }
}

impl Sensitivity {
    /// Indices of the parameters, ranked by |elasticity| of headline `h` (largest first; a
    /// parameter with no elasticity for it last, ties in profile order).
    pub fn ranked(&self, h: usize) -> Vec<usize> {
        let base = self.headlines[h].base;
        let mut idx: Vec<usize> = (0..self.params.len()).collect();
        let mag = |i: usize| self.params[i].elasticity(h, base).map(f64::abs);
        idx.sort_by(|&a, &b| {
            mag(b)
                .unwrap_or(-1.0)
                .partial_cmp(&mag(a).unwrap_or(-1.0))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        idx
    }

    /// Per call, the headline indices that belong to it, in order.
    fn by_call(&self) -> Vec<(&str, Vec<usize>)> {
        let mut out: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, h) in self.headlines.iter().enumerate() {
            match out.iter_mut().find(|c| c.0 == h.call) {
                Some(c) => c.1.push(i),
                None => out.push((&h.call, vec![i])),
            }
        }
        out
    }

    /// What to say about robustness of a change: the parameters the absolute change hardly
    /// depends on but the percentage does, and whether the absolute change is robust to all.
    fn robustness(&self, abs: usize, pct: usize) -> Vec<String> {
        let (ba, bp) = (self.headlines[abs].base, self.headlines[pct].base);
        let mut only_pct = Vec::new();
        let mut abs_max: f64 = 0.0;
        let mut pct_max: f64 = 0.0;
        for p in &self.params {
            let (ea, ep) = (p.elasticity(abs, ba), p.elasticity(pct, bp));
            if let Some(ea) = ea {
                abs_max = abs_max.max(ea.abs());
            }
            if let Some(ep) = ep {
                pct_max = pct_max.max(ep.abs());
            }
            if let (Some(ea), Some(ep)) = (ea, ep)
                && ea.abs() < ROBUST
                && ep.abs() >= ROBUST
            {
                only_pct.push(format!("{} ({})", p.key, p.kind.name()));
            }
        }
        let mut out = Vec::new();
        if ba.is_none() || bp.is_none() {
            return out;
        }
        if abs_max < ROBUST && pct_max >= ROBUST {
            out.push(format!(
                "the absolute change is robust (no parameter's |elasticity| reaches {ROBUST}) while the percentage is not: trust the time saved, not the percentage, until the parameters above are measured"
            ));
        } else if !only_pct.is_empty() {
            out.push(format!(
                "the absolute change hardly depends on {} (|elasticity| < {ROBUST}) while the percentage does: the time saved holds whatever {}, the percentage does not",
                only_pct.join(", "),
                if only_pct.len() == 1 { "its value is" } else { "their values are" }
            ));
        }
        if abs_max >= ROBUST && pct_max < ROBUST {
            out.push(format!(
                "the percentage is robust (no parameter's |elasticity| reaches {ROBUST}) while the absolute change is not"
            ));
        }
        out
    }
}

fn fmt_e(e: Option<f64>) -> String {
    match e {
        Some(0.0) => "0".to_string(),
        Some(e) => format!("{e:+.3}"),
        None => "-".to_string(),
    }
}

fn fmt_base(h: &Headline) -> String {
    match (&h.measure, h.base) {
        (_, None) => "-".into(),
        (Measure::ChangePct { .. }, Some(b)) => format!("{b:+.2} %"),
        (Measure::Change { .. }, Some(b)) => {
            let (unit, div) = crate::compare::unit_for(b.abs());
            format!("{:+.3} {unit}", b / div)
        }
        (Measure::Mean { .. }, Some(b)) => {
            let (unit, div) = crate::compare::unit_for(b);
            format!("{:.3} {unit}", b / div)
        }
    }
}

/// The terminal report.
pub fn table(s: &Sensitivity) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "sensitivity   {}", s.scenario);
    if s.variants.len() > 1 {
        for (i, v) in s.variants.iter().enumerate() {
            let _ = writeln!(
                o,
                "{:<13} {}: {v}",
                if i == 0 { "variants" } else { "" },
                letter(i)
            );
        }
    }
    let _ = writeln!(
        o,
        "each profile cost the run used, moved by -10 % and +10 % and the scenario re-run ({} runs);\n\
         elasticity = (result at +10 % - result at -10 %) / (0.2 x result): 1 moves in proportion, 0 not at all",
        s.runs
    );
    let kw = s
        .params
        .iter()
        .map(|p| p.key.len())
        .max()
        .unwrap_or(0)
        .max(24);
    for (call, hs) in s.by_call() {
        // Rank by the last headline: the % change of the last variant, or the mean of a run.
        let rank_by = *hs.last().expect("a call has headlines");
        let _ = writeln!(o, "\n{call}");
        for &h in &hs {
            let hd = &s.headlines[h];
            let _ = writeln!(
                o,
                "  {:<8} {:<40} {}",
                hd.column(s.variants.len()),
                hd.describe(&s.variants),
                fmt_base(hd)
            );
        }
        let _ = write!(o, "  {:<kw$}  {:<8}", "parameter", "source");
        for &h in &hs {
            let _ = write!(o, " {:>9}", s.headlines[h].column(s.variants.len()));
        }
        let _ = writeln!(
            o,
            "   (elasticities, ranked by |{}|)",
            s.headlines[rank_by].column(s.variants.len())
        );
        for i in s.ranked(rank_by) {
            let p = &s.params[i];
            // A parameter none of this call's results moved with belongs to another call.
            if hs
                .iter()
                .all(|&h| p.minus[h] == s.headlines[h].base && p.plus[h] == s.headlines[h].base)
            {
                continue;
            }
            let _ = write!(o, "  {:<kw$}  {:<8}", p.key, p.kind.name());
            for &h in &hs {
                let _ = write!(o, " {:>9}", fmt_e(p.elasticity(h, s.headlines[h].base)));
            }
            let _ = writeln!(o);
        }
        // The parameter to measure first for each headline.
        for &h in &hs {
            if let Some(&top) = s.ranked(h).first()
                && let Some(e) = s.params[top].elasticity(h, s.headlines[h].base)
                && !matches!(s.headlines[h].measure, Measure::Mean { .. })
            {
                let p = &s.params[top];
                let _ = writeln!(
                    o,
                    "  {} rests most on {} ({}, {}; elasticity {})",
                    s.headlines[h].column(s.variants.len()),
                    p.key,
                    p.value,
                    p.kind.name(),
                    fmt_e(Some(e))
                );
            }
        }
        for v in 1..s.variants.len() {
            let find = |m: Measure| hs.iter().copied().find(|&h| s.headlines[h].measure == m);
            if let (Some(a), Some(p)) =
                (find(Measure::Change { v }), find(Measure::ChangePct { v }))
            {
                for line in s.robustness(a, p) {
                    let _ = writeln!(o, "  {} vs {}: {line}", letter(v), letter(0));
                }
            }
        }
    }
    if !s.no_effect.is_empty() {
        let _ = writeln!(
            o,
            "\nmoved nothing (perturbed; no call of the run reaches them): {}",
            s.no_effect.join(", ")
        );
    }
    if !s.not_priced.is_empty() {
        let _ = writeln!(o, "not priced (charged as 0):");
        for (k, why) in &s.not_priced {
            let _ = writeln!(o, "  {k} ({why})");
        }
    }
    if !s.not_perturbed.is_empty() {
        let _ = writeln!(o, "not perturbed:");
        let mut seen: Vec<&str> = Vec::new();
        for &(_, why) in &s.not_perturbed {
            if seen.contains(&why) {
                continue;
            }
            seen.push(why);
            let keys: Vec<&str> = s
                .not_perturbed
                .iter()
                .filter(|p| p.1 == why)
                .map(|p| p.0.as_str())
                .collect();
            let _ = writeln!(o, "  {} ({why})", keys.join(", "));
        }
    }
    o
}

/// The JSON document (docs/output.md).
pub fn json(s: &Sensitivity) -> Value {
    let headlines: Vec<Value> = s
        .headlines
        .iter()
        .enumerate()
        .map(|(h, hd)| {
            let variant = match hd.measure {
                Measure::Mean { v } | Measure::Change { v } | Measure::ChangePct { v } => v,
            };
            let ranked: Vec<Value> = s
                .ranked(h)
                .into_iter()
                .map(|i| {
                    let p = &s.params[i];
                    json!({
                        "parameter": p.key,
                        "source_kind": p.kind.name(),
                        "elasticity": p.elasticity(h, hd.base),
                        "minus_10": p.minus[h],
                        "plus_10": p.plus[h],
                    })
                })
                .collect();
            json!({
                "call": hd.call,
                "measure": hd.json_name(),
                "variant": variant,
                "base": hd.base,
                "elasticities": ranked,
            })
        })
        .collect();
    let params: Vec<Value> = s
        .params
        .iter()
        .map(|p| {
            json!({
                "parameter": p.key,
                "value": p.value,
                "source": p.source,
                "source_kind": p.kind.name(),
            })
        })
        .collect();
    let not: Vec<Value> = s
        .not_perturbed
        .iter()
        .map(|(k, why)| json!({ "parameter": k, "why": why }))
        .collect();
    json!({
        "format_version": crate::report::FORMAT_VERSION,
        "scenario": s.scenario,
        "variants": s.variants,
        "step": STEP,
        "runs": s.runs,
        "parameters": params,
        "headlines": headlines,
        "moved_nothing": s.no_effect,
        "not_perturbed": not,
        "not_priced": s
            .not_priced
            .iter()
            .map(|(k, why)| json!({ "parameter": k, "why": why }))
            .collect::<Vec<Value>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_kinds_follow_the_documented_prefixes() {
        assert_eq!(SourceKind::of("measured: 4K entries"), SourceKind::Measured);
        assert_eq!(
            SourceKind::of("fit: batched-sync/map_sg"),
            SourceKind::Fitted
        );
        assert_eq!(SourceKind::of("held: one per cycle"), SourceKind::Held);
        assert_eq!(SourceKind::of("assumption: as sm8150"), SourceKind::Held);
        assert_eq!(SourceKind::of("UG585 table 3"), SourceKind::Cited);
        assert_eq!(SourceKind::of("counted: 3.6 source"), SourceKind::Cited);
    }

    #[test]
    fn only_costs_are_perturbed() {
        assert!(structural("cache.line_bytes").is_some());
        assert!(structural("platform.cpu_freq_mhz").is_some());
        assert!(structural("code.swiotlb_2012.frame").is_some());
        assert!(structural("cache_model.l1_write_allocate").is_some());
        assert!(structural("cache.clean.latency").is_none());
        assert!(structural("sw.insn.unmap_single").is_none());
    }

    #[test]
    fn scaling_reaches_the_resolved_cost_and_nothing_else() {
        let p = Profile::load("dimensity9500").unwrap();
        let mut q = p.clone();
        assert!(scale(&mut q, "cache.clean.latency", 1.1));
        let (a, b) = (
            p.model.maint(CacheOp::Clean).unwrap(),
            q.model.maint(CacheOp::Clean).unwrap(),
        );
        assert_eq!(b.latency_ps, 72_050);
        assert_eq!(a.latency_ps, 65_500);
        assert_eq!(a.issue_ps, b.issue_ps);
        assert_eq!(p.model.maint(CacheOp::Inval), q.model.maint(CacheOp::Inval));
        let mut r = p.clone();
        assert!(scale(&mut r, "sw.sg_next", 0.9));
        assert_ne!(r.model.sw["sg_next"], p.model.sw["sg_next"]);
        assert!(
            !scale(&mut r, "smmu.sync", 1.1),
            "dimensity9500 has no SMMU"
        );
        assert!(!scale(&mut r, "sw.no_such_cost", 1.1));
    }
}
