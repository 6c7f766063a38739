//! `dmasim compare`: one scenario under several variants, side by side.
//!
//! Kernel counterpart: none — this is the A/B a kernel engineer would otherwise do by running a
//! scenario twice and diffing two tables by hand.
//!
//! What it does: runs the scenario once per variant (a release, a platform, policy overrides, or
//! any mix) on the Model and lines the results up: per timed call the mean time and its change,
//! per operation the count and its change, per call stack the self time and its change. Stacks
//! are matched across releases through [`crate::arch::stable_frame`], so a helper that a release
//! renamed or split (7.1's `dcache_clean_poc_nosync` + `arch_sync_dma_flush` against 7.0's
//! `dcache_clean_poc`) is one frame whose time shrinks, not one frame vanishing and another
//! appearing; consecutive frames with the same stable name merge into one.
//!
//! Invariants: every variant runs the same scenario file; a change is always against the first
//! variant; nothing here charges or counts anything — every figure is read from the runs.

use crate::hw::Counter;
use crate::input::InputError;
use crate::report::ns;
use crate::scenario::{self, Outcome, RunError, Scenario};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write as _;

/// One column of a comparison: what to change in the scenario before running it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    pub platform: Option<String>,
    pub kernel: Option<String>,
    /// `key=value` policy overrides, applied after the release's presets.
    pub policies: Vec<String>,
    /// `section.key=value` scenario settings (`workload.entry=16K`), applied first.
    pub sets: Vec<String>,
}

impl Variant {
    /// `kernel=7.1,platform=sm8150,sync=batched,workload.entry=16K`: `kernel` and `platform`
    /// pick those; a dotted key sets a scenario key as `--set` does; any other key is a policy.
    pub fn parse(spec: &str) -> Result<Variant, String> {
        let mut v = Variant::default();
        let parts = crate::input::split_outside_quotes(spec, ',');
        for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let (k, val) = crate::input::split_assignment(part).ok_or_else(|| {
                format!("`{part}` is not key=value (e.g. kernel=7.1, sync=batched)")
            })?;
            let (k, val) = (k.trim(), val.trim());
            if val.is_empty() {
                return Err(format!("`{k}` has no value"));
            }
            match k {
                "kernel" => v.kernel = Some(val.to_string()),
                "platform" => v.platform = Some(val.to_string()),
                _ if k.contains('.') => v.sets.push(format!("{k}={val}")),
                _ => v.policies.push(format!("{k}={val}")),
            }
        }
        if v == Variant::default() {
            return Err(format!("`{spec}` changes nothing"));
        }
        Ok(v)
    }

    /// How the variant is named in tables: what it changes, in the order it is applied.
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.platform {
            parts.push(format!("platform {p}"));
        }
        if let Some(k) = &self.kernel {
            parts.push(format!("kernel {k}"));
        }
        parts.extend(self.policies.iter().cloned());
        parts.extend(self.sets.iter().cloned());
        if parts.is_empty() {
            "as written".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// Change `s` as the variant says; an error names the variant.
    pub fn apply(&self, s: &mut Scenario) -> Result<(), InputError> {
        let named = |e: InputError| {
            InputError::new("<argument>", format!("variant `{}`: {}", self.label(), e))
        };
        if !self.sets.is_empty() {
            *s = s.with_sets(&self.sets).map_err(named)?;
        }
        if let Some(p) = &self.platform {
            s.set_platform(p).map_err(named)?;
        }
        if let Some(k) = &self.kernel {
            s.set_kernel_str(k).map_err(named)?;
        }
        for p in &self.policies {
            s.set_policies(p).map_err(named)?;
        }
        Ok(())
    }
}

/// `--baseline K`: move the variant `k` names (its letter, its 1-based number, or its label)
/// to the front, where every change is measured from; the others keep their order.
pub fn put_baseline_first(variants: &mut Vec<Variant>, k: &str) -> Result<(), InputError> {
    let k = k.trim();
    let by_letter = (k.len() == 1)
        .then(|| k.chars().next())
        .flatten()
        .filter(char::is_ascii_alphabetic)
        .map(|c| (c.to_ascii_uppercase() as u8 - b'A') as usize);
    let by_number = k.parse::<usize>().ok().and_then(|n| n.checked_sub(1));
    let i = by_letter
        .or(by_number)
        .filter(|&i| i < variants.len())
        .or_else(|| variants.iter().position(|v| v.label() == k))
        .ok_or_else(|| {
            let labels: Vec<String> = variants
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{} ({})", letter(i), v.label()))
                .collect();
            InputError::new(
                "<argument>",
                format!(
                    "--baseline {k}: no such variant; the variants are {}",
                    labels.join(", ")
                ),
            )
        })?;
    let b = variants.remove(i);
    variants.insert(0, b);
    Ok(())
}

/// The variants a command line asks for: each `--variant` as given (on the one `--platform` and
/// `--kernel` given beside them, where it names none of its own), or else every combination of
/// the `--platform` and `--kernel` values (the scenario's own where none is given).
pub fn variants_from(
    specs: &[String],
    platforms: &[String],
    kernels: &[String],
) -> Result<Vec<Variant>, InputError> {
    let arg = |m: String| InputError::new("<argument>", m);
    let out: Vec<Variant> = if !specs.is_empty() {
        if platforms.len() > 1 || kernels.len() > 1 {
            return Err(arg(
                "give variants either with --variant or with repeated --kernel/--platform, not both"
                    .into(),
            ));
        }
        // One --platform or --kernel beside them is every variant's unless it names its own.
        let mut out: Vec<Variant> = specs
            .iter()
            .map(|s| Variant::parse(s).map_err(|m| arg(format!("--variant: {m}"))))
            .collect::<Result<_, _>>()?;
        for v in &mut out {
            if v.platform.is_none() {
                v.platform = platforms.first().cloned();
            }
            if v.kernel.is_none() {
                v.kernel = kernels.first().cloned();
            }
        }
        out
    } else {
        let ps: Vec<Option<&String>> = if platforms.is_empty() {
            vec![None]
        } else {
            platforms.iter().map(Some).collect()
        };
        let ks: Vec<Option<&String>> = if kernels.is_empty() {
            vec![None]
        } else {
            kernels.iter().map(Some).collect()
        };
        ps.iter()
            .flat_map(|p| {
                ks.iter().map(move |k| Variant {
                    platform: p.cloned(),
                    kernel: k.cloned(),
                    policies: Vec::new(),
                    sets: Vec::new(),
                })
            })
            .collect()
    };
    if out.len() < 2 {
        return Err(arg(
            "compare needs at least two variants: repeat --kernel or --platform (e.g. --kernel 7.0 --kernel 7.1), or give --variant twice".into(),
        ));
    }
    Ok(out)
}

/// One variant's run.
#[derive(Clone, Debug)]
pub struct Column {
    pub label: String,
    /// The scenario keys the variant set (`workload.entry=16K`).
    pub sets: Vec<String>,
    /// `[sw]` costs the variant's run can charge and its profile leaves out (charged as 0).
    pub unpriced: Vec<String>,
    pub outcome: Outcome,
}

/// A row of a comparison: one value per variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Row<T> {
    pub name: String,
    pub values: Vec<T>,
}

/// A timed call: calls made and total time per variant.
#[derive(Clone, Debug, PartialEq)]
pub struct CallRow {
    pub call: String,
    /// The device and its call, when the row is a device's (a replay's).
    pub device: Option<(String, String)>,
    pub count: Vec<u64>,
    pub total_ps: Vec<u64>,
}

impl CallRow {
    pub fn mean_ns(&self, i: usize) -> Option<f64> {
        match self.count[i] {
            0 => None,
            n => Some(ns(self.total_ps[i]) / n as f64),
        }
    }
}

/// The scenario under every variant, lined up.
#[derive(Clone, Debug)]
pub struct Comparison {
    pub scenario: String,
    pub columns: Vec<Column>,
    pub calls: Vec<CallRow>,
    /// Operations issued over the whole run, per counter that any variant issued.
    pub operations: Vec<Row<u64>>,
    /// Self time per matched stack (frames joined by `;`), in the order first met.
    pub stacks: Vec<Row<u64>>,
}

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Input(#[from] InputError),
    /// A variant the modelled kernel refused to set up (the refusal names the variant).
    #[error(transparent)]
    Refused(scenario::Refused),
    /// A variant whose run met a bug of dmasim's (the error names the variant).
    #[error(transparent)]
    Internal(scenario::Internal),
}

impl CompareError {
    /// Variant `label`'s run failure, naming the variant.
    pub fn of_variant(label: String, e: RunError) -> CompareError {
        match e {
            RunError::Input(i) => CompareError::Input(i),
            RunError::Refused(r) => CompareError::Refused(scenario::Refused {
                variant: Some(label),
                ..r
            }),
            RunError::Internal(b) => CompareError::Internal(scenario::Internal {
                variant: Some(label),
                ..b
            }),
        }
    }
}

/// Run `base` under each variant and line the results up, counting the runs' steps on
/// `progress`.
pub fn compare(
    base: &Scenario,
    variants: &[Variant],
    progress: &scenario::Progress,
) -> Result<Comparison, CompareError> {
    let mut columns = Vec::with_capacity(variants.len());
    for v in variants {
        let mut s = base.clone();
        v.apply(&mut s)?;
        let outcome = scenario::execute_with(&s, progress)
            .map_err(|e| CompareError::of_variant(v.label(), e))?;
        columns.push(Column {
            label: v.label(),
            sets: v.sets.clone(),
            unpriced: s
                .profile
                .unpriced_sw(&s.sw_keys())
                .iter()
                .map(|k| format!("sw.{}", k.name()))
                .collect(),
            outcome,
        });
    }
    let n = columns.len();

    let mut calls: Vec<CallRow> = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        let devices = c.outcome.call_devices();
        for (name, count, total) in c.outcome.call_totals() {
            let row = match calls.iter().position(|r| r.call == name) {
                Some(j) => &mut calls[j],
                None => {
                    let device = devices
                        .iter()
                        .find(|(n, _, _)| *n == name)
                        .map(|(_, d, call)| (d.clone(), call.clone()));
                    calls.push(CallRow {
                        call: name,
                        device,
                        count: vec![0; n],
                        total_ps: vec![0; n],
                    });
                    calls.last_mut().expect("just pushed")
                }
            };
            row.count[i] += count;
            row.total_ps[i] += total;
        }
    }

    let mut totals = vec![[0u64; Counter::N]; n];
    let mut stacks: Vec<Row<u64>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, c) in columns.iter().enumerate() {
        for s in c.outcome.stacks() {
            for (t, x) in totals[i].iter_mut().zip(s.counts.iter()) {
                *t = t.saturating_add(*x);
            }
            if s.self_ps == 0 {
                continue;
            }
            let key = matched_stack(&s.stack);
            let j = *index.entry(key.clone()).or_insert_with(|| {
                stacks.push(Row {
                    name: key,
                    values: vec![0; n],
                });
                stacks.len() - 1
            });
            stacks[j].values[i] = stacks[j].values[i].saturating_add(s.self_ps);
        }
    }
    let operations = Counter::ALL
        .iter()
        .filter(|&&c| totals.iter().any(|t| t[c as usize] > 0))
        .map(|&c| Row {
            name: c.name().to_string(),
            values: totals.iter().map(|t| t[c as usize]).collect(),
        })
        .collect();

    Ok(Comparison {
        scenario: base.name.clone(),
        columns,
        calls,
        operations,
        stacks,
    })
}

/// A ledger stack (`a > b > c`) with every frame under its stable name and repeats merged,
/// joined by `;` as folded stacks are.
pub fn matched_stack(stack: &str) -> String {
    let mut frames: Vec<&str> = Vec::new();
    for f in crate::report::frames(stack) {
        let f = crate::arch::stable_frame(f);
        if frames.last() != Some(&f) {
            frames.push(f);
        }
    }
    frames.join(";")
}

/// `b` against `a` in percent, or `None` when `a` is zero.
pub fn change_pct(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) / a * 100.0)
}

fn change_cell(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => match change_pct(a, b) {
            // Almost all of it gone is not all of it: keep the digits that say so.
            Some(c) if c.abs() > 99.9 && c.abs() < 100.0 => format!("{c:+.2} %"),
            Some(c) => format!("{c:+.1} %"),
            None if b == 0.0 => "=".into(),
            None => "new".into(),
        },
        (None, Some(_)) => "new".into(),
        (Some(_), None) => "gone".into(),
        (None, None) => "-".into(),
    }
}

/// One unit for a whole column of times (ns, µs, ms or s), chosen by its largest value.
pub fn unit_for(max_ns: f64) -> (&'static str, f64) {
    if max_ns >= 1e9 {
        ("s", 1e9)
    } else if max_ns >= 1e6 {
        ("ms", 1e6)
    } else if max_ns >= 1e3 {
        ("µs", 1e3)
    } else {
        ("ns", 1.0)
    }
}

fn letter(i: usize) -> String {
    // Variant columns are A, B, C ... (more than 26 variants read as A1, B1 ...).
    let c = char::from(b'A' + (i % 26) as u8);
    if i < 26 {
        c.to_string()
    } else {
        format!("{c}{}", i / 26)
    }
}

/// When the variants span several platforms, each platform's release changes: (the first
/// variant on the platform, another on it with a different release), in variant order.
pub fn within_platform(c: &Comparison) -> Vec<(usize, usize)> {
    let platforms: Vec<&str> = c
        .columns
        .iter()
        .map(|col| col.outcome.info().platform.as_str())
        .collect();
    let distinct = distinct_in_order(&platforms);
    if distinct.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for p in distinct {
        let on: Vec<usize> = (0..platforms.len())
            .filter(|&i| platforms[i] == p)
            .collect();
        let first = on[0];
        let k0 = c.columns[first].outcome.info().policies.kernel;
        for &i in &on[1..] {
            if c.columns[i].outcome.info().policies.kernel != k0 {
                out.push((first, i));
            }
        }
    }
    out
}

fn distinct_in_order<'a>(v: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for x in v {
        if !out.contains(x) {
            out.push(x);
        }
    }
    out
}

/// The terminal table.
pub fn table(c: &Comparison) -> String {
    let mut o = String::new();
    let n = c.columns.len();
    let _ = writeln!(o, "scenario   {}", c.scenario);
    for (i, col) in c.columns.iter().enumerate() {
        let info = col.outcome.info();
        let sets = if col.sets.is_empty() {
            String::new()
        } else {
            format!("; {}", col.sets.join(", "))
        };
        let _ = writeln!(
            o,
            "{:<10} {}: {} ({}), {}{sets}",
            if i == 0 { "variants" } else { "" },
            letter(i),
            info.platform,
            info.arch.name(),
            info.policies.summary(&info.target)
        );
    }
    let changes: Vec<String> = (1..n).map(|i| format!("{} vs A", letter(i))).collect();
    let head = |o: &mut String, what: &str, w: usize| {
        let _ = write!(o, "\n{what:<w$}");
        for i in 0..n {
            let _ = write!(o, " {:>12}", letter(i));
        }
        for ch in &changes {
            let _ = write!(o, " {ch:>10}");
        }
        let _ = writeln!(o);
    };

    let w = c
        .calls
        .iter()
        .map(|r| r.call.len())
        .max()
        .unwrap_or(0)
        .max(28);
    let max = c
        .calls
        .iter()
        .flat_map(|r| (0..n).filter_map(|i| r.mean_ns(i)))
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    head(&mut o, &format!("mean time per call ({unit})"), w);
    for r in &c.calls {
        let _ = write!(o, "{:<w$}", r.call);
        for i in 0..n {
            let cell = r
                .mean_ns(i)
                .map_or("-".into(), |v| format!("{:.3}", v / div));
            let _ = write!(o, " {cell:>12}");
        }
        for i in 1..n {
            let _ = write!(o, " {:>10}", change_cell(r.mean_ns(0), r.mean_ns(i)));
        }
        let _ = writeln!(o);
    }
    let max = c
        .columns
        .iter()
        .map(|col| ns(col.outcome.total_ps()))
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let _ = write!(o, "{:<w$}", format!("run total ({unit})"));
    for col in &c.columns {
        let _ = write!(o, " {:>12.3}", ns(col.outcome.total_ps()) / div);
    }
    for col in &c.columns[1..] {
        let (a, b) = (c.columns[0].outcome.total_ps(), col.outcome.total_ps());
        let _ = write!(o, " {:>10}", change_cell(Some(a as f64), Some(b as f64)));
    }
    let _ = writeln!(o);
    let pairs = within_platform(c);
    if !pairs.is_empty() {
        let _ = writeln!(
            o,
            "\nrelease change within each platform (mean time per call)"
        );
        for &(a, b) in &pairs {
            let (ia, ib) = (c.columns[a].outcome.info(), c.columns[b].outcome.info());
            let _ = writeln!(
                o,
                "  {}: {} vs {} (kernel {} vs {})",
                ia.platform,
                letter(b),
                letter(a),
                ib.policies.kernel,
                ia.policies.kernel
            );
            for r in &c.calls {
                let _ = writeln!(
                    o,
                    "    {:<w$} {:>10}",
                    r.call,
                    change_cell(r.mean_ns(a), r.mean_ns(b))
                );
            }
        }
    }

    let w = c
        .operations
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(28);
    head(&mut o, "operations (whole run)", w);
    for r in &c.operations {
        let _ = write!(o, "{:<w$}", r.name);
        for v in &r.values {
            let _ = write!(o, " {v:>12}");
        }
        for v in &r.values[1..] {
            let _ = write!(
                o,
                " {:>10}",
                change_cell(Some(r.values[0] as f64), Some(*v as f64))
            );
        }
        let _ = writeln!(o);
    }

    let max = c
        .stacks
        .iter()
        .flat_map(|r| r.values.iter().map(|&v| ns(v)))
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let _ = writeln!(
        o,
        "\nself time by call stack ({unit}, whole run; frames matched across variants)"
    );
    let _ = write!(o, " ");
    for i in 0..n {
        let _ = write!(o, " {:>12}", letter(i));
    }
    for ch in &changes {
        let _ = write!(o, " {ch:>10}");
    }
    let _ = writeln!(o, "  stack");
    for r in &c.stacks {
        let _ = write!(o, " ");
        for v in &r.values {
            let cell = if *v == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", ns(*v) / div)
            };
            let _ = write!(o, " {cell:>12}");
        }
        for v in &r.values[1..] {
            let a = r.values[0];
            let cell = match (a, *v) {
                (0, 0) => "-".to_string(),
                (0, _) => "new".to_string(),
                (_, 0) => "gone".to_string(),
                (a, b) => change_cell(Some(a as f64), Some(b as f64)),
            };
            let _ = write!(o, " {cell:>10}");
        }
        let _ = writeln!(o, "  {}", r.name.replace(';', " > "));
    }
    o
}

/// The JSON document (docs/output.md): per variant its platform and policies, then the calls,
/// operations and matched stacks with one value per variant, in variant order.
pub fn json(c: &Comparison) -> Value {
    let changes = |vals: &[Option<f64>]| -> Vec<Option<f64>> {
        vals.iter()
            .map(|v| match (vals[0], *v) {
                (Some(a), Some(b)) => change_pct(a, b),
                _ => None,
            })
            .collect()
    };
    let variants: Vec<Value> = c
        .columns
        .iter()
        .map(|col| {
            let head = col.outcome.json();
            json!({
                "label": col.label,
                "platform": head.get("platform"),
                "policies": head.get("policies"),
                "settings": col.sets,
                "unpriced_costs": col.unpriced,
                "total_ps": col.outcome.total_ps(),
            })
        })
        .collect();
    let call_doc = |r: &CallRow, call: &str| {
        let means: Vec<Option<f64>> = (0..r.count.len()).map(|i| r.mean_ns(i)).collect();
        json!({
            "call": call,
            "count": r.count,
            "total_ps": r.total_ps,
            "mean_ns": means,
            "change_pct": changes(&means),
        })
    };
    // A device's calls under the device, as a replay's document has them; the others apart.
    let mut calls: Vec<Value> = Vec::new();
    let mut devices: Vec<(&str, Vec<Value>)> = Vec::new();
    for r in &c.calls {
        let Some((device, call)) = &r.device else {
            calls.push(call_doc(r, &r.call));
            continue;
        };
        match devices.iter_mut().find(|(d, _)| d == device) {
            Some((_, v)) => v.push(call_doc(r, call)),
            None => devices.push((device, vec![call_doc(r, call)])),
        }
    }
    let devices: Vec<Value> = devices
        .into_iter()
        .map(|(name, calls)| json!({ "name": name, "calls": calls }))
        .collect();
    let rows = |rows: &[Row<u64>], key: &str, stack: bool| -> Vec<Value> {
        rows.iter()
            .map(|r| {
                let vals: Vec<Option<f64>> = r.values.iter().map(|&v| Some(v as f64)).collect();
                let name = if stack {
                    json!(r.name.split(';').collect::<Vec<_>>())
                } else {
                    json!(r.name)
                };
                json!({
                    key: name,
                    "values": r.values,
                    "change_pct": changes(&vals),
                })
            })
            .collect()
    };
    let within: Vec<Value> = within_platform(c)
        .into_iter()
        .map(|(a, b)| {
            json!({
                "platform": c.columns[a].outcome.info().platform,
                "from": c.columns[a].label,
                "to": c.columns[b].label,
                "calls": c.calls.iter().map(|r| {
                    let mut v = json!({
                        "call": r.device.as_ref().map_or(&r.call, |(_, call)| call),
                        "from_mean_ns": r.mean_ns(a),
                        "to_mean_ns": r.mean_ns(b),
                        "change_pct": match (r.mean_ns(a), r.mean_ns(b)) {
                            (Some(x), Some(y)) => change_pct(x, y),
                            _ => None,
                        },
                    });
                    if let Some((d, _)) = &r.device {
                        v["device"] = json!(d);
                    }
                    v
                }).collect::<Vec<Value>>(),
            })
        })
        .collect();
    json!({
        "scenario": c.scenario,
        "variants": variants,
        "calls": calls,
        "devices": devices,
        "within_platform": within,
        "operations": rows(&c.operations, "operation", false),
        "stacks": rows(&c.stacks, "stack", true),
    })
}

/// Most segments of the breakdown plot: one colour each (the plot's palette has eight), so past
/// this the largest stacks but one keep theirs and the rest are summed into one segment.
const PLOT_STACKS: usize = 8;

/// The comparison's pictures: each call's mean time per variant (bars, with the change against
/// the first written at each bar), and each variant's self time split by matched call stack.
pub fn charts(c: &Comparison) -> Vec<crate::plot::Panel> {
    use crate::plot::{BarChart, BarGroup, Panel, Series, StackChart};
    let n = c.columns.len();
    let max = c
        .calls
        .iter()
        .flat_map(|r| (0..n).filter_map(|i| r.mean_ns(i)))
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let series: Vec<String> = c
        .columns
        .iter()
        .enumerate()
        .map(|(i, col)| format!("{}: {}", letter(i), col.label))
        .collect();
    let groups = c
        .calls
        .iter()
        .map(|r| BarGroup {
            label: r.call.clone(),
            values: (0..n).map(|i| r.mean_ns(i).map(|v| v / div)).collect(),
            texts: (0..n)
                .map(|i| match (i, r.mean_ns(i)) {
                    (_, None) => "-".to_string(),
                    (0, Some(v)) => format!("{:.3} {unit}", v / div),
                    (_, Some(v)) => format!(
                        "{:.3} {unit} ({})",
                        v / div,
                        change_cell(r.mean_ns(0), Some(v))
                    ),
                })
                .collect(),
        })
        .collect();
    let bars = Panel::Bars(BarChart {
        title: format!("{}: mean time per call", c.scenario),
        x_name: format!("{unit} per call"),
        series: series.clone(),
        groups,
        signed: false,
        band: None,
        clip: None,
    });

    // The largest stacks (by their largest value in any variant) each get a segment.
    let mut order: Vec<usize> = (0..c.stacks.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(c.stacks[j].values.iter().copied().max()));
    let keep = if order.len() <= PLOT_STACKS {
        order.len()
    } else {
        PLOT_STACKS - 1
    };
    let (shown, rest) = order.split_at(keep);
    let mut shown = shown.to_vec();
    shown.sort_unstable();
    let max = (0..n)
        .map(|i| c.stacks.iter().map(|r| ns(r.values[i])).sum::<f64>())
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let mut segments: Vec<Series> = shown
        .iter()
        .map(|&j| Series {
            label: c.stacks[j].name.replace(';', " > "),
            values: c.stacks[j]
                .values
                .iter()
                .map(|&v| Some(ns(v) / div))
                .collect(),
        })
        .collect();
    if !rest.is_empty() {
        segments.push(Series {
            label: format!("{} other stacks", rest.len()),
            values: (0..n)
                .map(|i| Some(rest.iter().map(|&j| ns(c.stacks[j].values[i])).sum::<f64>() / div))
                .collect(),
        });
    }
    let stack = Panel::Stack(StackChart {
        title: format!(
            "{}: self time by call stack (whole run, frames matched across variants)",
            c.scenario
        ),
        x_name: unit.to_string(),
        bars: series,
        segments,
    });
    vec![bars, stack]
}

/// A self-contained HTML page: the pictures, then the calls and operations as tables.
pub fn html(c: &Comparison) -> String {
    use crate::plot::{Section, Table};
    let n = c.columns.len();
    let mut head = vec!["call".to_string()];
    head.extend((0..n).map(|i| format!("{} mean (ns)", letter(i))));
    head.extend((1..n).map(|i| format!("{} vs A", letter(i))));
    let rows = c
        .calls
        .iter()
        .map(|r| {
            let mut row = vec![r.call.clone()];
            row.extend((0..n).map(|i| r.mean_ns(i).map_or("-".into(), |v| format!("{v:.3}"))));
            row.extend((1..n).map(|i| change_cell(r.mean_ns(0), r.mean_ns(i))));
            row
        })
        .collect();
    let mut ohead = vec!["operation (whole run)".to_string()];
    ohead.extend((0..n).map(letter));
    ohead.extend((1..n).map(|i| format!("{} vs A", letter(i))));
    let orows = c
        .operations
        .iter()
        .map(|r| {
            let mut row = vec![r.name.clone()];
            row.extend(r.values.iter().map(|v| v.to_string()));
            row.extend(
                r.values[1..]
                    .iter()
                    .map(|v| change_cell(Some(r.values[0] as f64), Some(*v as f64))),
            );
            row
        })
        .collect();
    let notes = c
        .columns
        .iter()
        .enumerate()
        .map(|(i, col)| {
            let info = col.outcome.info();
            format!(
                "{}: {} ({}), {}",
                letter(i),
                info.platform,
                info.arch.name(),
                info.policies.summary(&info.target)
            )
        })
        .collect();
    crate::plot::html(
        &format!("dmasim compare: {}", c.scenario),
        &[
            Section {
                heading: "Variants".into(),
                notes,
                panels: charts(c),
                table: Some(Table { head, rows }),
            },
            Section {
                heading: "Operations".into(),
                notes: Vec::new(),
                panels: Vec::new(),
                table: Some(Table {
                    head: ohead,
                    rows: orows,
                }),
            },
        ],
    )
}

/// The matched stacks of two variants as one differential folded file: `stack A B` per line, the
/// two-column form flamegraph.pl renders as a differential flame graph (what difffolded.pl
/// writes), in picoseconds.
pub fn folded_pair(c: &Comparison) -> Result<String, InputError> {
    if c.columns.len() != 2 {
        return Err(InputError::new(
            "<argument>",
            format!(
                "--format folded writes a differential pair: compare exactly two variants (got {})",
                c.columns.len()
            ),
        ));
    }
    let mut o = String::new();
    for r in &c.stacks {
        let _ = writeln!(o, "{} {} {}", r.name, r.values[0], r.values[1]);
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_specs_split_kernel_platform_and_policies() {
        let v = Variant::parse("kernel=7.1, sync=batched,platform=sm8150").unwrap();
        assert_eq!(v.kernel.as_deref(), Some("7.1"));
        assert_eq!(v.platform.as_deref(), Some("sm8150"));
        assert_eq!(v.policies, vec!["sync=batched".to_string()]);
        assert_eq!(v.label(), "platform sm8150, kernel 7.1, sync=batched");
        assert!(Variant::parse("kernel").is_err());
        assert!(Variant::parse("kernel=").is_err());
        assert!(Variant::parse(" , ").is_err());
    }

    #[test]
    fn repeated_kernels_and_platforms_make_their_product() {
        let k = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let v = variants_from(&[], &k(&["a", "b"]), &k(&["7.0", "7.1"])).unwrap();
        let labels: Vec<String> = v.iter().map(Variant::label).collect();
        assert_eq!(
            labels,
            [
                "platform a, kernel 7.0",
                "platform a, kernel 7.1",
                "platform b, kernel 7.0",
                "platform b, kernel 7.1"
            ]
        );
        assert!(variants_from(&[], &[], &k(&["7.1"])).is_err());
        assert!(variants_from(&k(&["kernel=7.0"]), &[], &k(&["7.0", "7.1"])).is_err());
        // One --platform beside --variant is each variant's that names none.
        let specs = k(&["invalidation=strict", "platform=b,invalidation=lazy"]);
        let v = variants_from(&specs, &k(&["a"]), &[]).unwrap();
        let platforms: Vec<Option<&str>> = v.iter().map(|v| v.platform.as_deref()).collect();
        assert_eq!(platforms, [Some("a"), Some("b")]);
        let v = Variant::parse(r#"workload.devices."a,b".iommu=true,platform.smmu.sync=1us"#);
        assert_eq!(
            v.unwrap().sets,
            [
                r#"workload.devices."a,b".iommu=true"#,
                "platform.smmu.sync=1us"
            ]
        );
    }

    #[test]
    fn renamed_cache_helpers_match_and_repeats_merge() {
        assert_eq!(
            matched_stack(
                "dma_map_sg > dma_direct_map_sg > arch_sync_dma_for_device > dcache_clean_poc_nosync"
            ),
            "dma_map_sg;dma_direct_map_sg;cache maintenance"
        );
        assert_eq!(
            matched_stack(
                "dma_map_sg > dma_direct_map_sg > arch_sync_dma_for_device > dcache_clean_poc > (wait for completion)"
            ),
            matched_stack(
                "dma_map_sg > dma_direct_map_sg > arch_sync_dma_flush > (wait for completion)"
            )
        );
        assert_eq!(
            matched_stack("iommu_map > arm_lpae_map_pages"),
            "iommu_map;arm_lpae_map_pages"
        );
    }

    #[test]
    fn changes_are_against_the_first_variant() {
        assert_eq!(change_pct(200.0, 150.0), Some(-25.0));
        assert_eq!(change_pct(0.0, 1.0), None);
        assert_eq!(change_cell(Some(0.0), Some(0.0)), "=");
        assert_eq!(change_cell(Some(0.0), Some(3.0)), "new");
        assert_eq!(change_cell(None, Some(3.0)), "new");
        assert_eq!(change_cell(Some(3.0), None), "gone");
    }
}
