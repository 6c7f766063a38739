//! Seed 000: batched cache sync on arm64 (Linux 7.1).
//!
//! Runs the built-in scenario (scenarios/batched-sync.toml: Dimensity 9500, 10 MB in 4 KB entries,
//! BIDIRECTIONAL, 200 iterations of dma_map_sg + dma_unmap_sg) under the 7.0 policies (a DSB per sg
//! entry) and the 7.1 policies (one per list), and compares the reductions of the mean call times
//! with the published ones. The absolute means are reported too, as model-only rows: none were
//! published.

use super::{Report, Row, RowBuilder};
use crate::hw::Counter;
use crate::input::InputError;
use crate::policy::KernelVersion;
use crate::scenario::{Outcome, RunResult, Scenario, execute};

pub const SCENARIO: &str = include_str!("../../scenarios/batched-sync.toml");

fn run_under(base: &Scenario, kernel: KernelVersion) -> Result<RunResult, InputError> {
    let mut s = base.clone();
    s.set_kernel(kernel)?;
    match execute(&s) {
        Ok(Outcome::Streaming(r)) => Ok(r),
        Ok(_) => Err(InputError::new(&s.file, "not a streaming scenario")),
        Err(e) => Err(InputError::new(&s.file, e.to_string())),
    }
}

fn counts(r: &RunResult) -> serde_json::Value {
    let it = u64::from(r.workload.iterations);
    let mut m = serde_json::Map::new();
    for c in Counter::ALL {
        let n = r.count(c);
        if n > 0 {
            m.insert(c.name().to_string(), (n / it).into());
        }
    }
    serde_json::Value::Object(m)
}

pub fn run() -> Result<Report, InputError> {
    let base = Scenario::parse(
        "scenarios/batched-sync.toml",
        SCENARIO,
        std::path::Path::new("."),
    )?;
    let published = crate::published::get("batched-sync").expect("embedded");
    let before = run_under(&base, KernelVersion(7, 0))?;
    let after = run_under(&base, KernelVersion(7, 1))?;
    let b = RowBuilder {
        published: &published,
        profile: &base.profile,
    };

    let mut rows: Vec<Row> = Vec::new();
    for (call, key) in [("dma_map_sg", "map_sg"), ("dma_unmap_sg", "unmap_sg")] {
        let t0 = before.call(call).map(|c| c.mean_ns()).unwrap_or(0.0);
        let t1 = after.call(call).map(|c| c.mean_ns()).unwrap_or(0.0);
        rows.push(b.row(
            &format!("{key}.before_us"),
            "µs",
            &format!("mean {call}() time, 7.0 (a DSB per entry)"),
            t0 / 1000.0,
        ));
        rows.push(b.row(
            &format!("{key}.after_us"),
            "µs",
            &format!("mean {call}() time, 7.1 (one DSB per list)"),
            t1 / 1000.0,
        ));
        let mut r = b.row(
            &format!("{key}.reduction"),
            "%",
            "",
            100.0 * (1.0 - t1 / t0),
        );
        r.detail
            .insert("operations_per_iteration_before".into(), counts(&before));
        r.detail
            .insert("operations_per_iteration_after".into(), counts(&after));
        rows.push(r);
    }
    Ok(Report::of(
        &published,
        base.profile.name(),
        vec![
            "direction DMA_BIDIRECTIONAL: the publication does not say; dma_map_benchmark defaults to it, and a DMA_TO_DEVICE unmap would need no cache maintenance on arm64, leaving nothing for batching to save".into(),
            format!("{} entries of 4 KB, page aligned and physically contiguous; non-coherent device", before.entries),
        ],
        rows,
    ))
}
