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
fn names_row(source: &str, id: &str) -> bool {
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
            (Some(e), Some(u)) => format!("{e:+.2} {u}"),
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
