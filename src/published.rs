//! Published measurements, embedded for comparison.
//!
//! Kernel counterpart: none. Each file in data/published/ holds one experiment's published figures
//! with their source and conditions. Only `reproduce` reads them, to print them beside the model's
//! figures; no model code or profile may use them.
//!
//! Invariant: the embedded files parse (a unit test checks every one).

use serde::Deserialize;

const FILES: &[(&str, &str)] = &[
    (
        "batched-sync",
        include_str!("../data/published/batched-sync.toml"),
    ),
    (
        "pernuma-cma",
        include_str!("../data/published/pernuma-cma.toml"),
    ),
    (
        "smmu-walk-flush",
        include_str!("../data/published/smmu-walk-flush.toml"),
    ),
    (
        "swiotlb-phys",
        include_str!("../data/published/swiotlb-phys.toml"),
    ),
    (
        "zynq-coherent-streaming",
        include_str!("../data/published/zynq-coherent-streaming.toml"),
    ),
    (
        "zynq-memcpy",
        include_str!("../data/published/zynq-memcpy.toml"),
    ),
];

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedRow {
    pub id: String,
    pub unit: String,
    pub value: f64,
    pub what: String,
    /// `lower`: the publication only says "more than" this value.
    pub bound: Option<String>,
}

/// A quantity of the published case that `reproduce` needs to restate it in the published unit
/// (a rate, a buffer size), with where it comes from. Not a figure to compare with, and never an
/// input of the model itself.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub id: String,
    pub unit: String,
    pub value: f64,
    pub source: String,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub experiment: String,
    pub title: String,
    pub source: String,
    pub conditions: String,
    #[serde(default, rename = "condition")]
    pub condition_values: Vec<Condition>,
    #[serde(rename = "row")]
    pub rows: Vec<PublishedRow>,
}

impl Published {
    pub fn row(&self, id: &str) -> Option<&PublishedRow> {
        self.rows.iter().find(|r| r.id == id)
    }

    pub fn condition(&self, id: &str) -> Option<&Condition> {
        self.condition_values.iter().find(|c| c.id == id)
    }
}

/// The published figures of an experiment.
pub fn get(experiment: &str) -> Option<Published> {
    FILES
        .iter()
        .find(|(n, _)| *n == experiment)
        .map(|(n, text)| {
            crate::input::parse_toml(&format!("data/published/{n}.toml"), text)
                .expect("embedded published data parses (tested)")
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_file_parses_and_names_itself() {
        for (name, _) in super::FILES {
            let p = super::get(name).unwrap();
            assert_eq!(&p.experiment, name);
            assert!(!p.rows.is_empty());
        }
    }
}
