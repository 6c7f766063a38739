//! What `dmasim fit` writes: the fitted profile, and the report of the fit.
//!
//! Kernel counterpart: none.
//!
//! What it writes: the profile is the base profile's own text, edited in place (comments,
//! order and every other value kept), each fitted number replaced in the unit it was written
//! in and its `source` a `fit:` naming the rows that move it, under a header that lists every
//! row with the base's, the fit's and the measured value. The report says per fitted parameter
//! its base and fitted value, the rows that determine it and how far it moves when one row is
//! left out; which parameters were held and why; each row's residual.
//!
//! Invariants: the written text parses as a profile (checked before it is returned); only the
//! fitted parameters and the platform's name and description differ from the base.

use super::{Fit, FitError, Request};
use crate::input::InputError;
use crate::platform::Profile;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// The number at `key` of a profile's text and the unit it is written in (`ns`, `cycles`, or
/// `value` for a parameter with a unit of its own), if it is one number there.
pub fn number(text: &str, key: &str) -> Option<(String, f64)> {
    let doc: toml_edit::DocumentMut = text.parse().ok()?;
    let t = slot(doc.as_item(), key)?.as_table_like()?;
    ["ns", "cycles", "value"].into_iter().find_map(|u| {
        let v = t.get(u)?.as_value()?;
        let n = v.as_float().or_else(|| v.as_integer().map(|i| i as f64))?;
        Some((u.to_string(), n))
    })
}

fn slot<'a>(mut item: &'a toml_edit::Item, key: &str) -> Option<&'a toml_edit::Item> {
    for part in crate::input::key_parts(key).ok()? {
        item = item.as_table_like()?.get(&part)?;
    }
    Some(item)
}

fn slot_mut<'a>(mut item: &'a mut toml_edit::Item, key: &str) -> Option<&'a mut toml_edit::Item> {
    for part in crate::input::key_parts(key).ok()? {
        item = item.as_table_like_mut()?.get_mut(&part)?;
    }
    Some(item)
}

/// A fitted number as the profile writes it: four significant figures are finer than any row.
fn rounded(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    let digits = 3 - x.abs().log10().floor() as i32;
    let f = 10f64.powi(digits.max(0));
    (x * f).round() / f
}

/// The rows' places, as a source names them.
fn places(fit: &Fit, rows: &[usize]) -> String {
    rows.iter()
        .map(|&i| fit.rows[i].place())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fitted profile's text.
pub fn profile(fit: &Fit, base: &Profile, req: &Request) -> Result<String, FitError> {
    let mut doc: toml_edit::DocumentMut = base
        .text
        .parse()
        .map_err(|e: toml_edit::TomlError| InputError::new(&base.origin, e.message()))?;
    for f in &fit.fitted {
        let on = places(fit, &f.rows);
        let factor = f.value / f.base;
        let mut set = |key: &str, unit: &str, value: f64, source: String| {
            let mut t = toml_edit::InlineTable::new();
            t.insert(unit, toml_edit::Value::from(rounded(value)));
            t.insert("source", toml_edit::Value::from(source));
            let s = slot_mut(doc.as_item_mut(), key).expect("a fitted key was read from this text");
            *s = toml_edit::Item::Value(toml_edit::Value::InlineTable(t));
        };
        set(
            &f.key,
            &f.unit,
            f.value,
            format!(
                "fit: dmasim fit on {on} (from {} {} in {})",
                f.base, f.unit, base.origin
            ),
        );
        for (key, unit, b) in &f.tied {
            set(
                key,
                unit,
                b * factor,
                format!(
                    "fit: dmasim fit on {on}, moved with {} by the same factor: these rows cannot tell them apart (from {b} {unit} in {})",
                    f.key, base.origin
                ),
            );
        }
    }
    let name = req
        .name
        .clone()
        .unwrap_or_else(|| format!("{}-fit", base.name()));
    doc["platform"]["name"] = toml_edit::value(name.clone());
    doc["platform"]["description"] = toml_edit::value(format!(
        "{}, fitted by dmasim fit to {} rows",
        base.file.platform.description,
        fit.rows.len()
    ));
    doc["fit"] = fit_section(fit, req);
    let text = format!("{}{}", header(fit), doc);
    Profile::parse(&name, &text).map_err(|e| {
        FitError::Input(InputError::new(
            "<fit>",
            format!("the fitted profile does not load ({e}): a fitted value is out of its range"),
        ))
    })?;
    Ok(text)
}

/// The `[fit]` section: how the runs were made, and every row, for `dmasim reproduce`.
fn fit_section(fit: &Fit, req: &Request) -> toml_edit::Item {
    let mut t = toml_edit::Table::new();
    t.insert("kernel", toml_edit::value(fit.kernel.to_string()));
    t.insert("iommu", toml_edit::value(req.iommu));
    t.insert("coherent", toml_edit::value(req.coherent));
    let mut rows = toml_edit::ArrayOfTables::new();
    for r in &fit.rows {
        let mut row = toml_edit::Table::new();
        row.insert("at", toml_edit::value(r.place()));
        row.insert("run", toml_edit::value(r.run.command()));
        row.insert("metric", toml_edit::value(r.metric.key()));
        row.insert("value", toml_edit::value(r.value));
        rows.push(row);
    }
    t.insert("row", toml_edit::Item::ArrayOfTables(rows));
    toml_edit::Item::Table(t)
}

/// The profile's header: what was fitted to what, and every row.
fn header(fit: &Fit) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "# Fitted by `dmasim fit` from {} under Linux {}: {} parameters fitted to {} rows of\n# dma_map_benchmark; every other value is the base profile's, with its source.",
        fit.base,
        fit.kernel,
        fit.fitted.len(),
        fit.rows.len()
    );
    for f in fit.fitted.iter().filter(|f| !f.tied.is_empty()) {
        let keys: Vec<&str> = f.tied.iter().map(|t| t.0.as_str()).collect();
        let _ = writeln!(
            h,
            "# {} moved with {} by one factor: these rows cannot tell them apart.",
            keys.join(", "),
            f.key
        );
    }
    for held in fit.held.iter().filter(|h| !h.with.is_empty()) {
        let _ = writeln!(
            h,
            "# {} is held at its base value: these rows cannot tell it from {} together.",
            held.key,
            held.with.join(", ")
        );
    }
    let _ = writeln!(
        h,
        "#\n# row                      run                                 metric                      measured       base     fitted"
    );
    for (i, r) in fit.rows.iter().enumerate() {
        let _ = writeln!(
            h,
            "# {:<24} {:<35} {:<25} {:>10.3} {:>10.3} {:>10.3}",
            r.place(),
            r.run.command(),
            r.metric.name(),
            r.value,
            fit.base_model[i],
            fit.fit_model[i]
        );
    }
    h.push('\n');
    h
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The report, as a table.
pub fn table(fit: &Fit) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "base       {} (Linux {})", fit.base, fit.kernel);
    let _ = writeln!(
        o,
        "rows       {} fitted{}; {} model runs of {} pairs a thread; {}",
        fit.rows.len(),
        if fit.ignored.is_empty() {
            String::new()
        } else {
            format!(", {} not predicted (below)", fit.ignored.len())
        },
        fit.runs,
        super::PAIRS,
        if fit.converged {
            "converged".to_string()
        } else {
            format!("did not converge ({})", fit.stopped)
        }
    );
    let _ = writeln!(
        o,
        "\nparameter                          base        fitted    change  rows  leave-one-out (largest move, row)"
    );
    for f in &fit.fitted {
        let loo = match f.loo {
            Some((m, i)) => format!("{} without {}", pct(m), fit.rows[i].place()),
            None => "-".into(),
        };
        let _ = writeln!(
            o,
            "{:<30} {:>10} {:>13} {:>9} {:>5}  {loo}",
            f.key,
            format!("{} {}", rounded(f.base), unit(&f.unit)),
            format!("{} {}", rounded(f.value), unit(&f.unit)),
            pct(f.value / f.base - 1.0),
            f.rows.len(),
        );
    }
    for &i in &fit.essential {
        let _ = writeln!(
            o,
            "without {} the other rows cannot determine every fitted parameter",
            fit.rows[i].place()
        );
    }
    let tied: Vec<_> = fit.fitted.iter().filter(|f| !f.tied.is_empty()).collect();
    if !tied.is_empty() {
        let _ = writeln!(
            o,
            "\nmoved by the same factor as a fitted parameter: these rows cannot tell them apart"
        );
        for f in tied {
            let keys: Vec<&str> = f.tied.iter().map(|t| t.0.as_str()).collect();
            let _ = writeln!(o, "  {} with {}", keys.join(", "), f.key);
        }
    }
    let (sep, unmoved): (Vec<_>, Vec<_>) = fit.held.iter().partition(|h| !h.with.is_empty());
    if !sep.is_empty() {
        let _ = writeln!(
            o,
            "\nheld at the base value: these rows cannot tell each from several fitted ones together"
        );
        for h in sep {
            let _ = writeln!(o, "  {} from {}", h.key, h.with.join(", "));
        }
    }
    if !unmoved.is_empty() {
        let _ = writeln!(
            o,
            "\nheld at the base value: too small a part of these rows to be fitted"
        );
        let keys: Vec<&str> = unmoved.iter().map(|h| h.key.as_str()).collect();
        let _ = writeln!(o, "  {}", keys.join(", "));
    }
    let _ = writeln!(
        o,
        "\nrow                        metric                         measured       base     fitted  residual"
    );
    for (i, r) in fit.rows.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:<26} {:<28} {:>10.3} {:>10.3} {:>10.3} {:>9}",
            r.place(),
            r.metric.name(),
            r.value,
            fit.base_model[i],
            fit.fit_model[i],
            pct(fit.fit_model[i] / r.value - 1.0),
        );
    }
    for (r, why) in &fit.ignored {
        let _ = writeln!(o, "not predicted: {} {}: {why}", r.place(), r.metric.name());
    }
    o
}

fn unit(u: &str) -> &str {
    if u == "value" { "" } else { u }
}

/// The report, as JSON.
pub fn json(fit: &Fit) -> Value {
    json!({
        "base": fit.base,
        "kernel": fit.kernel.to_string(),
        "converged": fit.converged,
        "model_runs": fit.runs,
        "pairs_a_run": super::PAIRS,
        "fitted": fit.fitted.iter().map(|f| json!({
            "key": f.key,
            "unit": f.unit,
            "base": f.base,
            "value": f.value,
            "rows": f.rows.iter().map(|&i| fit.rows[i].place()).collect::<Vec<_>>(),
            "leave_one_out": f.loo.map(|(m, i)| json!({ "move": m, "row": fit.rows[i].place() })),
            "moved_with_it": f.tied.iter().map(|t| json!({ "key": t.0, "unit": t.1, "base": t.2, "value": t.2 * f.value / f.base })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "held": fit.held.iter().map(|h| json!({
            "key": h.key,
            "inseparable_from": h.with,
            "why": if h.with.is_empty() { "too small a part of the rows to be fitted" } else { "the rows cannot tell it from the others together" },
        })).collect::<Vec<_>>(),
        "essential_rows": fit.essential.iter().map(|&i| fit.rows[i].place()).collect::<Vec<_>>(),
        "rows": fit.rows.iter().enumerate().map(|(i, r)| json!({
            "row": r.place(),
            "run": r.run.command(),
            "metric": r.metric.name(),
            "measured": r.value,
            "base": fit.base_model[i],
            "fitted": fit.fit_model[i],
        })).collect::<Vec<_>>(),
        "not_predicted": fit.ignored.iter().map(|(r, why)| json!({
            "row": r.place(), "metric": r.metric.name(), "why": why,
        })).collect::<Vec<_>>(),
    })
}
