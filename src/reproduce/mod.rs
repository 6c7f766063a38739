//! `dmasim reproduce`: built-in scenarios that recreate published experiments.
//!
//! Kernel counterpart: none. Each experiment runs the model under the releases or policies the
//! publication compared and prints, row by row, the published figure, the model's and the error.
//! Rows whose figure a profile parameter was fitted on are marked, with the parameter named, so the
//! rest can be read as predictions.
//!
//! Invariants: a row's model figure comes from a model run, never from data/published; the
//! published figure is looked up by row id and only printed and compared.

pub mod batched_sync;
pub mod pernuma_cma;
pub mod smmu_walk_flush;
pub mod swiotlb_phys;
pub mod zynq_coherent_streaming;
pub mod zynq_memcpy;

use crate::input::InputError;
use crate::platform::Profile;
use crate::published::Published;
use serde::Serialize;
use std::fmt::Write;

/// One compared figure.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    /// `<experiment>/<row>`, e.g. `batched-sync/map_sg.reduction`.
    pub id: String,
    pub unit: String,
    pub what: String,
    pub published: Option<f64>,
    /// `lower` when the publication only gives a lower bound ("more than"): the error is then 0
    /// when the model reaches the bound, else the relative shortfall.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<String>,
    pub model: f64,
    /// Model minus published, in percentage points for `%` rows, else relative error in %.
    pub error: Option<f64>,
    pub error_unit: Option<&'static str>,
    /// Profile parameters fitted on this row (empty: the row is a prediction).
    pub fitted_params: Vec<String>,
    /// Operation counts or other detail behind the figure.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
}

/// The result of one experiment.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub experiment: String,
    pub title: String,
    pub source: String,
    pub conditions: String,
    pub platform: String,
    /// What the built-in scenario assumes where the publication is silent, and why.
    pub assumptions: Vec<String>,
    pub rows: Vec<Row>,
}

impl Report {
    /// A report of `published`'s experiment, run on `platform`.
    pub fn of(
        published: &Published,
        platform: &str,
        assumptions: Vec<String>,
        rows: Vec<Row>,
    ) -> Report {
        Report {
            experiment: published.experiment.clone(),
            title: published.title.clone(),
            source: published.source.clone(),
            conditions: published.conditions.clone(),
            platform: platform.to_string(),
            assumptions,
            rows,
        }
    }
}

/// An experiment: its name, a one-line summary and how to run it.
pub struct Experiment {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: fn() -> Result<Report, InputError>,
}

pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "batched-sync",
        summary: "seed 000: arm64 one DSB per sg list (7.1) vs one per entry (7.0), Dimensity 9500",
        run: batched_sync::run,
    },
    Experiment {
        name: "pernuma-cma",
        summary: "seed 003: CMD_SYNC with the SMMUv3 queue on node 0 (default CMA) vs node 2 (cma_pernuma=, 5.10), Kunpeng 920",
        run: pernuma_cma::run,
    },
    Experiment {
        name: "smmu-walk-flush",
        summary: "seed 001: MMU-500 walk flush by TLBIASID (5.15) vs TLBIVA per page, SM8150",
        run: smmu_walk_flush::run,
    },
    Experiment {
        name: "swiotlb-phys",
        summary: "seed 004: swiotlb by physical address (3.8) vs virtual (3.6), ixgbe routing on x86-64",
        run: swiotlb_phys::run,
    },
    Experiment {
        name: "zynq-coherent-streaming",
        summary: "seed 002: dma_sync_single_for_* of a 1 MB streaming block on a Zynq-7000 (ARMv7, PL310), 3.19",
        run: zynq_coherent_streaming::run,
    },
    Experiment {
        name: "zynq-memcpy",
        summary: "not a seed: glibc memcpy of 8 MiB cached buffers on a Zynq-7000 (Genode's Linux baseline), a check of the program-access costs",
        run: zynq_memcpy::run,
    },
];

pub fn find(name: &str) -> Result<&'static Experiment, InputError> {
    EXPERIMENTS.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        InputError::new(
            "<argument>",
            format!(
                "unknown experiment `{name}`; known experiments: {}",
                names.join(", ")
            ),
        )
    })
}

/// Builds rows: looks up the published figure and the parameters fitted on it.
pub struct RowBuilder<'a> {
    pub published: &'a Published,
    pub profile: &'a Profile,
}

impl RowBuilder<'_> {
    pub fn row(&self, local_id: &str, unit: &str, what: &str, model: f64) -> Row {
        let id = format!("{}/{local_id}", self.published.experiment);
        let p = self.published.row(local_id);
        let published = p.map(|p| p.value);
        let bound = p.and_then(|p| p.bound.clone());
        let (error, error_unit) = match published {
            Some(v) if bound.as_deref() == Some("lower") && v != 0.0 => {
                (Some(((model - v) / v * 100.0).min(0.0)), Some("%"))
            }
            Some(v) if unit == "%" => (Some(model - v), Some("pp")),
            Some(v) if v != 0.0 => (Some((model - v) / v * 100.0), Some("%")),
            _ => (None, None),
        };
        let fitted_params = self
            .profile
            .params()
            .into_iter()
            .filter(|i| i.source.starts_with("fit:") && names_row(&i.source, &id))
            .map(|i| i.key)
            .collect();
        Row {
            id,
            unit: unit.to_string(),
            what: p
                .map(|p| p.what.clone())
                .unwrap_or_else(|| what.to_string()),
            published,
            bound,
            model,
            error,
            error_unit,
            fitted_params,
            detail: serde_json::Map::new(),
        }
    }
}

/// Whether a `fit:` source names row `id` itself, not merely a row whose id starts with it
/// (`profile.before.swiotlb_sync_single` vs `profile.before.swiotlb_sync_single_for_cpu`).
pub(crate) fn names_row(source: &str, id: &str) -> bool {
    source.match_indices(id).any(|(at, _)| {
        source[at + id.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')))
    })
}

fn fmt_num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.3}")
    }
}

/// SMMU commands per call, for rows that carry them in `detail` (empty otherwise).
fn commands(row: &Row) -> String {
    const SHOWN: &[(&str, &str)] = &[
        ("tlbiva", "TLBIVA"),
        ("tlbival", "TLBIVAL"),
        ("tlbiasid", "TLBIASID"),
        ("tlbsync", "TLBSYNC"),
        ("tlbstatus_reads", "STATUS"),
        ("udelays", "udelay"),
        ("wmb", "wmb"),
        ("driver_unmap_calls", "unmap calls"),
    ];
    let parts: Vec<String> = SHOWN
        .iter()
        .filter_map(|(k, name)| {
            let v = row.detail.get(*k)?;
            (v.as_f64()? > 0.0).then(|| format!("{name} {v}"))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("  [{}]", parts.join(", "))
    }
}

/// The terminal table of a report.
pub fn render_table(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{} — {}", r.experiment, r.title);
    let _ = writeln!(o, "source:     {}", r.source);
    let _ = writeln!(o, "conditions: {}", r.conditions);
    let _ = writeln!(o, "platform:   {}", r.platform);
    for a in &r.assumptions {
        let _ = writeln!(o, "assumes:    {a}");
    }
    let _ = writeln!(o);
    let w = r
        .rows
        .iter()
        .map(|row| row.id.len())
        .max()
        .unwrap_or(0)
        .max(44);
    let _ = writeln!(
        o,
        "{:<w$} {:>6} {:>12} {:>12} {:>10}  basis",
        "row", "unit", "published", "model", "error"
    );
    for row in &r.rows {
        let published = match (row.published, row.bound.as_deref()) {
            (Some(v), Some("lower")) => format!(">{}", fmt_num(v)),
            (Some(v), _) => fmt_num(v),
            (None, _) => "—".into(),
        };
        let error = match (row.error, row.error_unit) {
            (Some(e), Some(u)) => format!("{} {u}", signed_error(e)),
            _ => "—".into(),
        };
        let basis = if row.fitted_params.is_empty() {
            if row.published.is_some() {
                "prediction".to_string()
            } else {
                "model only".to_string()
            }
        } else {
            format!("fitted: {}", row.fitted_params.join(", "))
        };
        let _ = writeln!(
            o,
            "{:<w$} {:>6} {:>12} {:>12} {:>10}  {basis}{}",
            row.id,
            row.unit,
            published,
            fmt_num(row.model),
            error,
            commands(row)
        );
    }
    o
}

/// The axis of the error plot stops here (in % or pp); a row beyond it is drawn to the edge,
/// marked, and its real error written beside it, so one far-off row does not flatten the rest.
const PLOT_CLIP: f64 = 25.0;

/// The error band drawn on the plot: the README's yardstick, ±10.
const PLOT_BAND: f64 = 10.0;

/// The plot of one experiment's published rows: each row's error as a bar about zero, the rows
/// a parameter was fitted on in one panel and the predictions in another, so a reader sees at a
/// glance which agreement was bought and which was earned.
fn error_panels(r: &Report) -> Vec<crate::plot::Panel> {
    let published: Vec<&Row> = r.rows.iter().filter(|row| row.error.is_some()).collect();
    let (fitted, predicted): (Vec<&Row>, Vec<&Row>) = published
        .into_iter()
        .partition(|row| !row.fitted_params.is_empty());
    let mut out = Vec::new();
    out.extend(error_panel(
        r,
        &fitted,
        "fitted rows (a parameter was fitted on each)",
    ));
    out.extend(error_panel(
        r,
        &predicted,
        "predictions (nothing fitted on them)",
    ));
    out
}

fn error_panel(r: &Report, published: &[&Row], what: &str) -> Option<crate::plot::Panel> {
    use crate::plot::{BarChart, BarGroup, Panel};
    let groups: Vec<BarGroup> = published
        .iter()
        .map(|row| {
            let local = row.id.split_once('/').map_or(row.id.as_str(), |p| p.1);
            let (e, u) = (row.error.unwrap_or(0.0), row.error_unit.unwrap_or(""));
            let p = row.published.map_or("—".into(), fmt_num);
            let bound = if row.bound.as_deref() == Some("lower") {
                ">"
            } else {
                ""
            };
            BarGroup {
                label: local.to_string(),
                values: vec![Some(e)],
                texts: vec![format!(
                    "{} {u}  (published {bound}{p}, model {} {})",
                    signed_error(e),
                    fmt_num(row.model),
                    row.unit
                )],
            }
        })
        .collect();
    if groups.is_empty() {
        None
    } else {
        Some(Panel::Bars(BarChart {
            title: format!("{}: {what}, model vs published", r.experiment),
            x_name: format!(
                "error: % of the published figure (percentage points for % rows); band ±{PLOT_BAND}, axis cut at ±{PLOT_CLIP}"
            ),
            series: Vec::new(),
            groups,
            signed: true,
            band: Some(PLOT_BAND),
            clip: Some(PLOT_CLIP),
        }))
    }
}

/// The error plots of the experiments as one SVG document.
pub fn render_svg(reports: &[Report]) -> String {
    let panels: Vec<crate::plot::Panel> = reports.iter().flat_map(error_panels).collect();
    crate::plot::document(&panels)
}

/// A self-contained HTML report of the experiments: per experiment its source and conditions,
/// a plot of each published row's error, and the table of every row (published, model, error,
/// basis), as the terminal table has them.
pub fn render_html(reports: &[Report]) -> String {
    use crate::plot::{Section, Table};
    let sections: Vec<Section> = reports
        .iter()
        .map(|r| {
            let mut notes = vec![
                r.title.clone(),
                format!("source: {}", r.source),
                format!("conditions: {}", r.conditions),
                format!("platform: {}", r.platform),
            ];
            notes.extend(r.assumptions.iter().map(|a| format!("assumes: {a}")));
            let panels = error_panels(r);
            let rows = r
                .rows
                .iter()
                .map(|row| {
                    let published = match (row.published, row.bound.as_deref()) {
                        (Some(v), Some("lower")) => format!(">{}", fmt_num(v)),
                        (Some(v), _) => fmt_num(v),
                        (None, _) => "—".into(),
                    };
                    let error = match (row.error, row.error_unit) {
                        (Some(e), Some(u)) => format!("{} {u}", signed_error(e)),
                        _ => "—".into(),
                    };
                    let basis = if row.fitted_params.is_empty() {
                        if row.published.is_some() {
                            "prediction"
                        } else {
                            "model only"
                        }
                        .to_string()
                    } else {
                        format!("fitted: {}", row.fitted_params.join(", "))
                    };
                    vec![
                        row.id.clone(),
                        row.unit.clone(),
                        published,
                        fmt_num(row.model),
                        error,
                        format!("{basis}{}", commands(row)),
                    ]
                })
                .collect();
            Section {
                heading: r.experiment.clone(),
                notes,
                panels,
                table: Some(Table {
                    head: ["row", "unit", "published", "model", "error", "basis"]
                        .map(String::from)
                        .to_vec(),
                    rows,
                }),
            }
        })
        .collect();
    crate::plot::html("dmasim reproduce: published vs model", &sections)
}

#[cfg(test)]
mod tests {
    use super::names_row;

    #[test]
    fn fit_sources_name_whole_row_ids() {
        let id = "swiotlb-phys/profile.before.swiotlb_sync_single";
        assert!(names_row(&format!("fit: {id}"), id));
        assert!(names_row(&format!("fit: {id}, with a tool"), id));
        assert!(!names_row(&format!("fit: {id}_for_cpu"), id));
        assert!(!names_row("fit: something else", id));
    }
}

/// An error with its sign to two decimals; one that rounds to zero prints as `+0.00`, not as a
/// `-0.00` that reads as a miss.
fn signed_error(e: f64) -> String {
    let e = if (e * 100.0).round() == 0.0 { 0.0 } else { e };
    format!("{e:+.2}")
}

#[cfg(test)]
mod signed_error_tests {
    use super::signed_error;

    #[test]
    fn a_rounded_zero_has_no_minus_sign() {
        assert_eq!(signed_error(-0.004), "+0.00");
        assert_eq!(signed_error(-0.005), "-0.01");
        assert_eq!(signed_error(4.184), "+4.18");
    }
}
