//! Progress counting: every runner advances the handle it is given by exactly its scenario's
//! `progress_total`, once per outer step, so a display on a terminal ends full. Each run counts
//! on its own handle, so other tests running beside this one cannot disturb the count.

use dmasim::scenario::{Progress, Scenario, execute_with};
use std::path::Path;

#[test]
fn every_kind_counts_its_outer_steps() {
    for (name, text) in [
        (
            "batched-sync",
            include_str!("../scenarios/batched-sync.toml"),
        ),
        ("iommu-ops", include_str!("../scenarios/iommu-ops.toml")),
        (
            "ixgbe-forwarding",
            include_str!("../scenarios/ixgbe-forwarding.toml"),
        ),
        (
            "smmu-walk-flush",
            include_str!("../scenarios/smmu-walk-flush.toml"),
        ),
        (
            "swiotlb-bounce",
            include_str!("../scenarios/swiotlb-bounce.toml"),
        ),
        // One step per allocation.
        ("pernuma-cma", include_str!("../scenarios/pernuma-cma.toml")),
    ] {
        // Few iterations, and a packet count that is not a whole number of counting blocks.
        let text = text
            .replace("iterations = 200", "iterations = 3")
            .replace("iterations = 10", "iterations = 3")
            .replace("packets = 100000", "packets = 70001");
        let s = Scenario::parse(name, &text, Path::new("scenarios")).unwrap();
        let progress = Progress::new();
        execute_with(&s, &progress).unwrap();
        let counted = progress.done();
        assert_eq!(counted, s.progress_total(), "{name}");
        assert!(counted >= 3, "{name}: {counted}");
    }
}
