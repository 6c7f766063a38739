//! `dmasim fit` at the size a user brings: ten parameters fitted to twenty rows of one-thread
//! dma_map_benchmark runs (tests/data/fit/sm8150-20-rows.csv: ten runs, map and unmap each,
//! from an sm8150-like board behind its MMU-500). Every step of the fit reruns the model, so
//! this is the model's speed times the steps the solve takes.

use dmasim::fit::{self, Request};

fn main() {
    divan::main();
}

const ROWS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/fit/sm8150-20-rows.csv"
);

/// The ten costs fitted: those the rows move most, and some they cannot tell apart.
const PARAMS: [&str; 10] = [
    "sw.iommu_map",
    "smmu.mmio_write",
    "sw.iommu_unmap",
    "sw.arm_lpae_map_pages",
    "sw.arm_lpae_unmap_pages",
    "cache.clean.issue",
    "cache.clean.latency",
    "cache.inval.latency",
    "memory.write_bandwidth_mb_s",
    "sw.dma_api_call",
];

#[divan::bench(sample_count = 3, sample_size = 1)]
fn ten_params_twenty_rows(bencher: divan::Bencher) {
    let text = std::fs::read_to_string(ROWS).unwrap();
    let rows = fit::rows::read(ROWS, &text).unwrap();
    assert_eq!(rows.len(), 20);
    let req = Request {
        platform: "sm8150".into(),
        kernel: dmasim::policy::LATEST,
        iommu: true,
        coherent: false,
        params: PARAMS.iter().map(|p| p.to_string()).collect(),
        name: None,
    };
    bencher.bench(|| {
        let f = fit::fit(&req, rows.clone()).unwrap();
        assert!(f.converged, "{}", f.stopped);
        f
    });
}
