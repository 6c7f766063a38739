//! Seed 001 (smmu-walk-flush): every published figure within 10 % of the sm8150 profile, and the
//! invalidation commands exact. Published values are read through `dmasim::published::get`.
//!
//! Hand-worked unaligned unmaps that straddle 2 MB boundaries are in src/iommu/core.rs
//! (`seed001::unaligned_unmap_straddling_2m_boundaries`, `contiguous_memory_is_mapped_with_blocks`);
//! `straddling_unmap_through_a_scenario` below runs one through the scenario path.

use dmasim::reproduce::{Row, smmu_walk_flush};

fn rows() -> Vec<Row> {
    smmu_walk_flush::run().unwrap().rows
}

fn row<'a>(rows: &'a [Row], id: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.id == format!("smmu-walk-flush/{id}"))
        .unwrap_or_else(|| panic!("no row {id}"))
}

fn n(r: &Row, key: &str) -> u64 {
    r.detail.get(key).and_then(|v| v.as_u64()).unwrap_or(0)
}

#[test]
fn all_32_published_figures_within_10_percent() {
    let published = dmasim::published::get("smmu-walk-flush").unwrap();
    let rows = rows();
    let mut checked = 0;
    for p in published.rows.iter().filter(|p| p.bound.is_none()) {
        let r = row(&rows, &p.id);
        let err = (r.model - p.value) / p.value;
        assert!(
            err.abs() <= 0.10,
            "{}: model {} vs published {} ({:+.2} %)",
            p.id,
            r.model,
            p.value,
            err * 100.0
        );
        assert_eq!(r.published, Some(p.value));
        checked += 1;
    }
    assert_eq!(checked, 32);
}

#[test]
fn unmapping_32m_of_4k_pages_issues_the_exact_commands() {
    let rows = rows();
    let before = row(&rows, "unmap.32M.before");
    assert_eq!(n(before, "tlbiva"), 8192);
    assert_eq!(n(before, "tlbiasid"), 0);
    assert_eq!(n(before, "driver_unmap_calls"), 16);
    let after = row(&rows, "unmap.32M.after");
    assert_eq!(n(after, "tlbiasid"), 16);
    assert_eq!(n(after, "tlbiva"), 0);
    assert_eq!(
        n(after, "tlbsync"),
        17,
        "one per walk flush and the final iotlb_sync"
    );
    // 5.15 unmap_pages: one driver call, but __arm_lpae_unmap still flushes each of the 16 freed
    // tables' walks. The seed expected 1 TLBIASID; the algorithm gives 16 (a documented
    // disagreement, shown as a model-only row).
    let v515 = row(&rows, "unmap.32M.5.15");
    assert_eq!(n(v515, "driver_unmap_calls"), 1);
    assert_eq!(n(v515, "tlbiasid"), 16);
    assert!(v515.published.is_none());
    // Below 2 MB nothing is freed: one TLBIVAL per page and one sync, either way.
    let small = row(&rows, "unmap.1M.before");
    assert_eq!((n(small, "tlbival"), n(small, "tlbsync")), (256, 1));
}

#[test]
fn fitted_rows_are_named_and_the_rest_are_predictions() {
    let rows = rows();
    assert!(!row(&rows, "unmap.32M.before").fitted_params.is_empty());
    assert!(row(&rows, "unmap.16M.before").fitted_params.is_empty());
    assert!(row(&rows, "map_sg.1M.before").fitted_params.is_empty());
}

#[test]
fn camera_lower_bound_is_reported_honestly() {
    let rows = rows();
    let r = row(&rows, "camera.unmap_ms_per_s.before");
    assert_eq!(r.bound.as_deref(), Some("lower"));
    // The figure is the modelled 12M unmap at the published rate: 100 MiB/s of 12 MiB buffers
    // is 100/12 unmaps a second, each costing the unmap.12M row's mean.
    let unmap_us = row(&rows, "unmap.12M.before").model;
    let want = 100.0 / 12.0 * unmap_us / 1000.0;
    assert!((r.model - want).abs() < 1e-9, "{} vs {want}", r.model);
    // The seed's own 12M unmap (390.838 µs) puts this case near 3.3 ms/s, far below the
    // published "more than 100 ms": the row must show that miss, not a satisfied bound.
    assert!(r.model > 3.0 && r.model < 3.5, "{}", r.model);
    let pv = r.published.unwrap();
    assert_eq!(pv, 100.0);
    let err = r.error.unwrap();
    assert!((err - (r.model - pv) / pv * 100.0).abs() < 1e-9, "{err}");
    assert!(err < -90.0, "{err}");
    let after = row(&rows, "camera.unmap_ms_per_s.after");
    let unmap_after_us = row(&rows, "unmap.12M.after").model;
    assert!((after.model - 100.0 / 12.0 * unmap_after_us / 1000.0).abs() < 1e-9);
    assert!(after.model < r.model / 10.0);
}

#[test]
fn straddling_unmap_through_a_scenario() {
    let text = r#"
[scenario]
name = "straddle"
platform = "sm8150"
kernel = "5.14"
[iommu]
granule = "4K"
ias = 48
[workload]
kind = "iommu_ops"
iterations = 1
[[workload.op]]
op = "map"
iova = "0x40000000"
size = "8M"
[[workload.op]]
op = "unmap"
iova = "0x40100000"
size = "4M"
"#;
    let s = dmasim::scenario::Scenario::parse("t.toml", text, std::path::Path::new(".")).unwrap();
    let r = dmasim::scenario::iommu::run(&s, &dmasim::scenario::Progress::new()).unwrap();
    let u = &r.ops[1];
    use dmasim::hw::Counter;
    // 1 MB of the first table (256 TLBIVAL), the whole second table (a 512-TLBIVA walk flush),
    // 1 MB of the third (256 TLBIVAL); a sync for the walk flush and one at the end.
    assert_eq!(u.per_call(Counter::SmmuTlbival), 512.0);
    assert_eq!(u.per_call(Counter::SmmuTlbiva), 512.0);
    assert_eq!(u.per_call(Counter::SmmuTlbsync), 2.0);
    assert_eq!(u.per_call(Counter::PgtableUnmapCall), 256.0 + 1.0 + 256.0);
}

/// #8 item 3 on SM8150 (non-coherent walker): one `wmb()` per `arm_lpae_map` call (one per
/// 4 KB page on 5.14, before and after alike), one per `TLBIASID` in the after and 5.15 rows
/// (`arm_smmu_tlb_inv_context_s1`), and none in the before rows' TLBIVA walk flushes and TLBIVAL
/// leaves, which `arm_smmu_tlb_inv_range_s1` fences only for a coherent walker.
#[test]
fn the_wmbs_of_map_and_tlbiasid_are_counted() {
    let rows = rows();
    for (size, pages, tables) in [
        ("4K", 1, 0),
        ("1M", 256, 0),
        ("2M", 512, 1),
        ("32M", 8192, 16),
    ] {
        for when in ["before", "after"] {
            assert_eq!(
                n(row(&rows, &format!("map_sg.{size}.{when}")), "wmb"),
                pages,
                "{size} {when}"
            );
        }
        assert_eq!(
            n(row(&rows, &format!("unmap.{size}.before")), "wmb"),
            0,
            "{size}"
        );
        let after = row(&rows, &format!("unmap.{size}.after"));
        assert_eq!(n(after, "wmb"), tables, "{size}");
        assert_eq!(n(after, "wmb"), n(after, "tlbiasid"), "{size}");
        assert_eq!(
            n(row(&rows, &format!("unmap.{size}.5.15")), "wmb"),
            tables,
            "{size}"
        );
    }
}
