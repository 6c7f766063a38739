//! `dmasim run --sweep KEY=V1,V2,...`: one scenario over a range of settings, per variant.
//!
//! Kernel counterpart: none — the loop a user would otherwise write around `dmasim run` and a
//! text editor.
//!
//! What it does: for every value of the swept key (every combination, for two keys) the scenario
//! is read again with that key set ([`crate::input::set_key`], so the value goes through the same
//! checks as one written in the file), then run under each variant through
//! [`crate::compare::compare`]; the result is each call's mean time per setting and variant, as a
//! table, a JSON document, and a plot ([`crate::plot`]) with one panel per call and one curve per
//! variant (and per value of a second swept key). A kind with figures of its own at each point
//! ([`SweepPoint`]: `dma_map_benchmark`'s pairs a second and its tool's lines) adds them to
//! each, and a panel of its rate to the plot.
//!
//! Invariants: every figure is a run's own; the settings run in the order the user gave them;
//! at most two keys and [`MAX_VALUES`] values per key, so a sweep's size is known before it runs.

use crate::compare::{self, CompareError, Comparison, Variant, unit_for};
use crate::input::InputError;
use crate::plot::{Chart, Series};
use crate::scenario::{Scenario, SweepPoint};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// Most values one swept key may take.
pub const MAX_VALUES: usize = 64;

/// One swept key and its values, as the user wrote them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    pub key: String,
    pub values: Vec<String>,
}

impl Sweep {
    /// `workload.entry=4K,16K,64K`.
    pub fn parse(spec: &str) -> Result<Sweep, InputError> {
        let arg = |m: String| InputError::new("<argument>", format!("--sweep {spec}: {m}"));
        let (key, values) = crate::input::split_assignment(spec)
            .ok_or_else(|| arg("not KEY=V1,V2,... (e.g. workload.entry=4K,16K,64K)".into()))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(arg("no key".into()));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return Err(arg("an empty value".into()));
        }
        if values.len() > MAX_VALUES {
            return Err(arg(format!(
                "{} values: at most {MAX_VALUES} per key",
                values.len()
            )));
        }
        Ok(Sweep {
            key: key.to_string(),
            values,
        })
    }
}

/// The sweeps a command line asks for: one or two keys, each once.
pub fn sweeps_from(specs: &[String]) -> Result<Vec<Sweep>, InputError> {
    let sweeps: Vec<Sweep> = specs
        .iter()
        .map(|s| Sweep::parse(s))
        .collect::<Result<_, _>>()?;
    if sweeps.len() > 2 {
        return Err(InputError::new(
            "<argument>",
            format!("--sweep: at most two keys (got {})", sweeps.len()),
        ));
    }
    if sweeps.len() == 2 && sweeps[0].key == sweeps[1].key {
        return Err(InputError::new(
            "<argument>",
            format!("--sweep: `{}` is swept twice", sweeps[0].key),
        ));
    }
    Ok(sweeps)
}

/// One setting of the swept keys and the scenario's runs under it.
#[derive(Clone, Debug)]
pub struct Point {
    /// (key, value) per swept key.
    pub setting: Vec<(String, String)>,
    pub comparison: Comparison,
}

/// A whole sweep.
#[derive(Clone, Debug)]
pub struct SweepResult {
    pub scenario: String,
    pub sweeps: Vec<Sweep>,
    pub points: Vec<Point>,
    /// The `--set` edits and `--policy` overrides every point ran with.
    pub sets: Vec<String>,
    pub policies: Vec<String>,
}

/// A swept value in base units, as a number: a size in bytes (`4K`: 4096), a time in ps
/// (`150ns`: 150000), a plain number as written; `None` for a word (`to_device`).
pub fn base_value(v: &str) -> Option<f64> {
    let t = v.trim();
    if let Ok(x) = t.parse::<f64>() {
        return x.is_finite().then_some(x);
    }
    if let Some(b) = crate::input::parse_size(t) {
        return Some(b as f64);
    }
    let split = t.find(|c: char| c.is_ascii_alphabetic() || c == 'µ')?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num.trim().parse().ok()?;
    let ps = match unit.trim() {
        "ps" => 1.0,
        "ns" => 1e3,
        "us" | "µs" => 1e6,
        "ms" => 1e9,
        "s" => 1e12,
        _ => return None,
    };
    Some(n * ps)
}

/// Every setting, in the order given (the first key varies slowest).
fn settings(sweeps: &[Sweep]) -> Vec<Vec<(String, String)>> {
    let mut out = vec![Vec::new()];
    for s in sweeps {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                s.values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((s.key.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// Run the scenario at `path` (with the user's own `--set` edits and policies) at every setting
/// of `sweeps`, under each variant. `check` sees each variant's scenario before anything runs
/// (the work limit).
pub fn run(
    path: &str,
    sets: &[String],
    policies: &[String],
    sweeps: &[Sweep],
    variants: &[Variant],
    check: &dyn Fn(&Scenario) -> Result<(), InputError>,
    progress: &crate::scenario::Progress,
) -> Result<SweepResult, CompareError> {
    let source = Scenario::source(path)?;
    run_source(&source, sets, policies, sweeps, variants, check, progress)
}

/// [`run`] over a scenario's text (its name, text and directory, as [`Scenario::source`]
/// reads them), for a command that writes the scenario itself (`dmasim map-benchmark`).
pub fn run_source(
    source: &(String, String, std::path::PathBuf),
    sets: &[String],
    policies: &[String],
    sweeps: &[Sweep],
    variants: &[Variant],
    check: &dyn Fn(&Scenario) -> Result<(), InputError>,
    progress: &crate::scenario::Progress,
) -> Result<SweepResult, CompareError> {
    let mut scenarios = Vec::new();
    for setting in settings(sweeps) {
        let mut all = sets.to_vec();
        all.extend(setting.iter().map(|(k, v)| format!("{k}={v}")));
        let first = variants.iter().find_map(|v| v.platform.as_deref());
        let mut s = Scenario::load_source_on(source.clone(), &all, first)?;
        for p in policies {
            s.set_policies(p)?;
        }
        for v in variants {
            let mut t = s.clone();
            v.apply(&mut t)?;
            check(&t)?;
        }
        scenarios.push((setting, s));
    }
    let mut points = Vec::with_capacity(scenarios.len());
    let mut name = String::new();
    for (setting, s) in scenarios {
        name.clone_from(&s.name);
        points.push(Point {
            setting,
            comparison: compare::compare(&s, variants, progress)?,
        });
    }
    Ok(SweepResult {
        scenario: name,
        sweeps: sweeps.to_vec(),
        points,
        sets: sets.to_vec(),
        policies: policies.to_vec(),
    })
}

/// The calls any setting made, in the order first met.
fn call_names(r: &SweepResult) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &r.points {
        for c in &p.comparison.calls {
            if !names.contains(&c.call) {
                names.push(c.call.clone());
            }
        }
    }
    names
}

fn mean(p: &Point, call: &str, variant: usize) -> Option<f64> {
    p.comparison
        .calls
        .iter()
        .find(|c| c.call == call)
        .and_then(|c| c.mean_ns(variant))
}

/// How each variant is named on a plot: its label, or with one variant, the release it ran.
fn series_names(r: &SweepResult) -> Vec<String> {
    let Some(first) = r.points.first() else {
        return Vec::new();
    };
    let cols = &first.comparison.columns;
    if cols.len() == 1 {
        vec![format!("kernel {}", cols[0].outcome.info().policies.kernel)]
    } else {
        cols.iter().map(|c| c.label.clone()).collect()
    }
}

/// The terminal table: per setting and call, the mean time per variant and the change against
/// the first.
pub fn table(r: &SweepResult) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "scenario   {}", r.scenario);
    for s in &r.sweeps {
        let _ = writeln!(o, "sweep      {} = {}", s.key, s.values.join(", "));
    }
    let names = series_names(r);
    let n = names.len();
    if let Some(first) = r.points.first() {
        for (i, col) in first.comparison.columns.iter().enumerate() {
            let info = col.outcome.info();
            let _ = writeln!(
                o,
                "{:<10} {}: {} ({}), {}",
                if i == 0 { "variants" } else { "" },
                char::from(b'A' + (i % 26) as u8),
                info.platform,
                info.arch.name(),
                info.policies.summary(&info.target)
            );
        }
    }
    let calls = call_names(r);
    let max = r
        .points
        .iter()
        .flat_map(|p| {
            calls
                .iter()
                .flat_map(move |c| (0..n).filter_map(move |i| mean(p, c, i)))
        })
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let setting_w = r
        .points
        .iter()
        .map(|p| setting_label(&p.setting).len())
        .max()
        .unwrap_or(0)
        .max(8);
    let call_w = calls.iter().map(String::len).max().unwrap_or(0).max(4);
    let _ = write!(
        o,
        "\nmean time per call ({unit})\n{:<setting_w$}  {:<call_w$}",
        "setting", "call"
    );
    column_heads(&mut o, n);
    for p in &r.points {
        for c in &calls {
            let _ = write!(o, "{:<setting_w$}  {c:<call_w$}", setting_label(&p.setting));
            let values: Vec<Option<f64>> = (0..n).map(|i| mean(p, c, i)).collect();
            cells(&mut o, &values, |v| format!("{:.3}", v / div));
        }
    }
    own_figures(&mut o, r, n, setting_w);
    o
}

/// The variants' column heads (`A`, `B`, then `B vs A`), ending the line.
fn column_heads(o: &mut String, n: usize) {
    for i in 0..n {
        let _ = write!(o, " {:>12}", char::from(b'A' + (i % 26) as u8));
    }
    for i in 1..n {
        let _ = write!(
            o,
            " {:>10}",
            format!("{} vs A", char::from(b'A' + (i % 26) as u8))
        );
    }
    let _ = writeln!(o);
}

/// One value per variant under [`column_heads`], then each one's change against the first,
/// ending the line.
fn cells(o: &mut String, values: &[Option<f64>], show: impl Fn(f64) -> String) {
    for v in values {
        let _ = write!(o, " {:>12}", v.map_or("-".into(), &show));
    }
    for v in values.iter().skip(1) {
        let cell = match (values[0], *v) {
            (Some(a), Some(b)) => {
                compare::change_pct(a, b).map_or("-".into(), |x| format!("{x:+.1} %"))
            }
            _ => "-".into(),
        };
        let _ = write!(o, " {cell:>10}");
    }
    let _ = writeln!(o);
}

/// A variant's own figures at a point ([`SweepPoint`]), where its kind has any.
fn own(p: &Point, variant: usize) -> Option<SweepPoint> {
    p.comparison.columns.get(variant)?.outcome.sweep_point()
}

/// The runs' own figures, where their kind has any (`dma_map_benchmark`'s): the rate per
/// setting and variant, then at each setting each variant's tool lines as the tool prints them.
fn own_figures(o: &mut String, r: &SweepResult, n: usize, setting_w: usize) {
    let Some(rate_of) = r.points.iter().find_map(|p| own(p, 0)).map(|f| f.rate_of) else {
        return;
    };
    let _ = write!(
        o,
        "\n{rate_of} per modelled second\n{:<setting_w$}",
        "setting"
    );
    column_heads(o, n);
    for p in &r.points {
        let _ = write!(o, "{:<setting_w$}", setting_label(&p.setting));
        let values: Vec<Option<f64>> = (0..n).map(|i| own(p, i).map(|f| f.rate)).collect();
        cells(o, &values, |v| format!("{v:.0}"));
    }
    let _ = writeln!(
        o,
        "\nthe tool's own lines, at each setting under each variant"
    );
    for p in &r.points {
        for i in 0..n {
            if let Some(f) = own(p, i) {
                let letter = char::from(b'A' + (i % 26) as u8);
                let _ = write!(o, "\n{}, {letter}:\n{}", setting_label(&p.setting), f.lines);
            }
        }
    }
}

fn setting_label(s: &[(String, String)]) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The JSON document: the sweep, the variants, and per setting each call's figures per variant.
/// A self-contained HTML page: the plot, then each call's mean time per setting and variant.
pub fn html(r: &SweepResult) -> String {
    use crate::plot::{Panel, Section, Table};
    let names = series_names(r);
    let mut head = vec!["setting".to_string(), "call".to_string()];
    head.extend(names.iter().map(|n| format!("{n}: mean (ns)")));
    let calls = call_names(r);
    let mut rows = Vec::new();
    for p in &r.points {
        for c in &calls {
            let mut row = vec![setting_label(&p.setting), c.clone()];
            row.extend(
                (0..names.len()).map(|i| mean(p, c, i).map_or("-".into(), |v| format!("{v:.3}"))),
            );
            rows.push(row);
        }
    }
    let notes = r
        .sweeps
        .iter()
        .map(|s| format!("sweep {} = {}", s.key, s.values.join(", ")))
        .collect();
    crate::plot::html(
        &format!("dmasim sweep: {}", r.scenario),
        &[Section {
            heading: r.scenario.clone(),
            notes,
            panels: charts(r).into_iter().map(Panel::Line).collect(),
            table: Some(Table { head, rows }),
        }],
    )
}

pub fn json(r: &SweepResult) -> Value {
    let points: Vec<Value> = r
        .points
        .iter()
        .map(|p| {
            let setting: serde_json::Map<String, Value> = p
                .setting
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            let values: serde_json::Map<String, Value> = p
                .setting
                .iter()
                .map(|(k, v)| (k.clone(), json!(base_value(v))))
                .collect();
            let c = compare::json(&p.comparison);
            let mut point = json!({
                "setting": setting,
                "setting_values": values,
                // The effective configuration of each variant at this point, in the schema
                // `compare` uses: platform, release and policies, settings, unpriced costs.
                "variants": c["variants"],
                "calls": c["calls"],
                "total_ps": p.comparison.columns.iter().map(|c| c.outcome.total_ps()).collect::<Vec<_>>(),
            });
            let own: Vec<Option<SweepPoint>> =
                (0..p.comparison.columns.len()).map(|i| own(p, i)).collect();
            if own.iter().any(Option::is_some) {
                point["tool"] = own.into_iter().map(|f| f.map(|f| f.json)).collect();
            }
            point
        })
        .collect();
    let sweeps: Vec<Value> = r
        .sweeps
        .iter()
        .map(|s| json!({ "key": s.key, "values": s.values }))
        .collect();
    json!({
        "scenario": r.scenario,
        "sweep": sweeps,
        "sets": r.sets,
        "policy_overrides": r.policies,
        "variants": series_names(r),
        "points": points,
    })
}

/// One chart per call: x is the first swept key, one curve per variant (and per value of the
/// second key), y the call's mean time; where the runs have their own figures
/// ([`SweepPoint`]), one more chart of their rate. A count of CPUs is drawn on a log axis.
pub fn charts(r: &SweepResult) -> Vec<Chart> {
    let Some(first) = r.sweeps.first() else {
        return Vec::new();
    };
    let names = series_names(r);
    let calls = call_names(r);
    let n = names.len();
    let max = r
        .points
        .iter()
        .flat_map(|p| {
            calls
                .iter()
                .flat_map(move |c| (0..n).filter_map(move |i| mean(p, c, i)))
        })
        .fold(0.0, f64::max);
    let (unit, div) = unit_for(max);
    let chart = |what: &str, y_name: String, value: &dyn Fn(&Point, usize) -> Option<f64>| Chart {
        title: format!("{} — {what}", r.scenario),
        x_name: match counts_cpus(first) {
            true => format!("{} (log scale)", first.key),
            false => first.key.clone(),
        },
        x_labels: first.values.clone(),
        y_name,
        series: series(r, &names, value),
        log_x: counts_cpus(first).then(|| {
            first
                .values
                .iter()
                .map(|v| base_value(v).unwrap_or(0.0))
                .collect()
        }),
    };
    let mut charts: Vec<Chart> = calls
        .iter()
        .map(|call| {
            chart(call, format!("mean time per call ({unit})"), &|p, vi| {
                mean(p, call, vi).map(|m| m / div)
            })
        })
        .collect();
    if let Some(rate_of) = r.points.iter().find_map(|p| own(p, 0)).map(|f| f.rate_of) {
        let what = format!("{rate_of} per modelled second");
        charts.push(chart(&what, what.clone(), &|p, vi| {
            own(p, vi).map(|f| f.rate)
        }));
    }
    charts
}

/// Whether a swept key counts CPUs (`-t`, a workload's `cpus`): its values double from setting
/// to setting, and read best on a log axis.
fn counts_cpus(s: &Sweep) -> bool {
    matches!(s.key.as_str(), "workload.threads" | "workload.cpus")
}

/// A chart's curves: one per variant named in `names` (and per value of a second swept key),
/// each with `value` at each value of the first key, in the order given.
fn series(
    r: &SweepResult,
    names: &[String],
    value: &dyn Fn(&Point, usize) -> Option<f64>,
) -> Vec<Series> {
    let first = &r.sweeps[0];
    let second = r.sweeps.get(1);
    let inner: Vec<Option<&String>> = match second {
        Some(s) => s.values.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut series = Vec::new();
    for (vi, vname) in names.iter().enumerate() {
        for v2 in &inner {
            let values = first
                .values
                .iter()
                .map(|v1| {
                    let p = r.points.iter().find(|p| {
                        p.setting[0].1 == *v1
                            && v2.is_none_or(|v2| p.setting.get(1).is_some_and(|s| s.1 == *v2))
                    })?;
                    value(p, vi)
                })
                .collect();
            let label = match (v2, second) {
                (Some(v2), Some(s)) => format!("{vname}, {}={v2}", s.key),
                _ => vname.clone(),
            };
            series.push(Series { label, values });
        }
    }
    series
}

/// Total picoseconds of every run, for a quick check that a sweep ran what it says.
pub fn total_ps(r: &SweepResult) -> u64 {
    r.points
        .iter()
        .flat_map(|p| p.comparison.columns.iter().map(|c| c.outcome.total_ps()))
        .fold(0u64, u64::saturating_add)
}

/// Mean time of `call` at setting `i` under variant `v`, in ns (for tests and callers).
pub fn mean_ns(r: &SweepResult, i: usize, call: &str, v: usize) -> Option<f64> {
    r.points.get(i).and_then(|p| mean(p, call, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_limits_hold() {
        let s = Sweep::parse("workload.entry=4K, 16K,64K").unwrap();
        assert_eq!(s.key, "workload.entry");
        assert_eq!(s.values, ["4K", "16K", "64K"]);
        for bad in ["workload.entry", "=4K", "workload.entry=4K,,8K"] {
            assert!(Sweep::parse(bad).is_err(), "{bad}");
        }
        let many = format!("k={}", vec!["1"; MAX_VALUES + 1].join(","));
        assert!(Sweep::parse(&many).is_err());
        let two = |a: &str, b: &str| sweeps_from(&[a.to_string(), b.to_string()]);
        assert!(two("a=1", "a=2").is_err());
        assert!(two("a=1", "b=2").is_ok());
        assert!(sweeps_from(&["a=1".into(), "b=1".into(), "c=1".into()]).is_err());
    }

    #[test]
    fn settings_vary_the_first_key_slowest() {
        let s = settings(&[
            Sweep {
                key: "a".into(),
                values: vec!["1".into(), "2".into()],
            },
            Sweep {
                key: "b".into(),
                values: vec!["x".into(), "y".into()],
            },
        ]);
        let flat: Vec<String> = s.iter().map(|p| setting_label(p)).collect();
        assert_eq!(flat, ["a=1, b=x", "a=1, b=y", "a=2, b=x", "a=2, b=y"]);
    }
}
