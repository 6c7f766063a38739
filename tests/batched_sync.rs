//! End-to-end checks of the batched-sync experiment (seed 000) and of the mechanism behind it.

use dmasim::hw::Counter;
use dmasim::policy::KernelVersion;
use dmasim::reproduce;
use dmasim::scenario::{Outcome, RunResult, Scenario, execute};

fn base() -> Scenario {
    Scenario::parse(
        "scenarios/batched-sync.toml",
        reproduce::batched_sync::SCENARIO,
        std::path::Path::new("."),
    )
    .unwrap()
}

fn run_with(mut s: Scenario, kernel: KernelVersion) -> RunResult {
    s.set_kernel(kernel).unwrap();
    match execute(&s) {
        Ok(Outcome::Streaming(r)) => r,
        _ => panic!("a streaming result"),
    }
}

fn reduction(s: &Scenario, call: &str) -> f64 {
    let before = run_with(s.clone(), KernelVersion(7, 0))
        .call(call)
        .unwrap()
        .mean_ns();
    let after = run_with(s.clone(), KernelVersion(7, 1))
        .call(call)
        .unwrap()
        .mean_ns();
    100.0 * (1.0 - after / before)
}

#[test]
fn reductions_are_within_one_and_a_half_points_of_the_published_ones() {
    let report = (reproduce::find("batched-sync").unwrap().run)().unwrap();
    for id in [
        "batched-sync/map_sg.reduction",
        "batched-sync/unmap_sg.reduction",
    ] {
        let row = report.rows.iter().find(|r| r.id == id).unwrap();
        let published = row.published.expect("published figure present");
        assert!(
            (row.model - published).abs() <= 1.5,
            "{id}: model {} vs published {published}",
            row.model
        );
        assert_eq!(row.error_unit, Some("pp"));
    }
    // One parameter was fitted, on the map_sg row only: the unmap_sg row is a prediction.
    let unmap = report
        .rows
        .iter()
        .find(|r| r.id == "batched-sync/unmap_sg.reduction")
        .unwrap();
    assert!(unmap.fitted_params.is_empty());
    let map = report
        .rows
        .iter()
        .find(|r| r.id == "batched-sync/map_sg.reduction")
        .unwrap();
    assert!(
        map.fitted_params
            .contains(&"cache.clean.latency".to_string())
    );
}

#[test]
fn larger_entries_save_less() {
    let s4 = base();
    let mut s64 = base();
    s64.streaming_mut().unwrap().entry_bytes = vec![64 * 1024];
    for call in ["dma_map_sg", "dma_unmap_sg"] {
        let r4 = reduction(&s4, call);
        let r64 = reduction(&s64, call);
        assert!(
            r64 > 0.0 && r64 < r4,
            "{call}: 64 KB saves {r64:.2} %, 4 KB saves {r4:.2} %"
        );
    }
}

#[test]
fn coherent_device_costs_no_cache_maintenance() {
    let mut s = base();
    s.device.coherent = true;
    for kernel in [KernelVersion(7, 0), KernelVersion(7, 1)] {
        let r = run_with(s.clone(), kernel);
        for c in Counter::ALL {
            assert_eq!(
                r.count(c),
                0,
                "{kernel}: {} issued on a coherent device",
                c.name()
            );
        }
        assert!(
            r.stacks
                .iter()
                .all(|st| !st.stack.contains("dcache") && !st.stack.contains("arch_sync")),
            "{kernel}"
        );
        // The two releases do the same for a coherent device.
        assert!(r.total_ps > 0);
    }
    let a = run_with(s.clone(), KernelVersion(7, 0));
    let b = run_with(s, KernelVersion(7, 1));
    assert_eq!(a.total_ps, b.total_ps);
}

#[test]
fn operation_counts_are_exact() {
    let s = base();
    let before = run_with(s.clone(), KernelVersion(7, 0));
    let after = run_with(s, KernelVersion(7, 1));
    let it = 200;
    // 10 MiB / 64 B lines = 163840 lines per call; 2560 entries.
    for r in [&before, &after] {
        assert_eq!(r.count(Counter::CacheCleanLine), it * 163_840);
        assert_eq!(r.count(Counter::CacheInvalLine), it * 163_840);
        assert_eq!(r.count(Counter::CacheCleanInvalLine), 0);
    }
    assert_eq!(before.count(Counter::Barrier), it * 2 * 2560);
    assert_eq!(after.count(Counter::Barrier), it * 2);
}

#[test]
fn to_device_unmap_costs_no_maintenance_under_either_release() {
    let mut s = base();
    s.streaming_mut().unwrap().direction = dmasim::types::DmaDirection::ToDevice;
    let before = run_with(s.clone(), KernelVersion(7, 0));
    let after = run_with(s, KernelVersion(7, 1));
    assert_eq!(before.count(Counter::CacheInvalLine), 0);
    assert_eq!(after.count(Counter::CacheInvalLine), 0);
    // 7.0 issues no barrier on a TO_DEVICE unmap; 7.1 still flushes once per call.
    assert_eq!(before.count(Counter::Barrier), 200 * 2560);
    assert_eq!(after.count(Counter::Barrier), 200 * 2);
}

/// 7.1 merged v3 of the series, which folded v2's 5/8 into its patch 4: `dma_direct_sync_sg_for_*`
/// issue every entry and flush once per call, like map_sg and unmap_sg (2 DSB an iteration, where
/// 7.0 waits after each of 2560 entries twice).
#[test]
fn sync_sg_is_batched_in_7_1() {
    let mut s = base();
    s.streaming_mut().unwrap().calls = dmasim::scenario::streaming::Calls::SyncSg;
    let it = 200;
    let v70 = run_with(s.clone(), KernelVersion(7, 0));
    let v71 = run_with(s, KernelVersion(7, 1));
    for r in [&v70, &v71] {
        assert_eq!(r.count(Counter::CacheCleanLine), it * 163_840);
        assert_eq!(r.count(Counter::CacheInvalLine), it * 163_840);
    }
    assert_eq!(v70.count(Counter::Barrier), it * 2 * 2560);
    assert_eq!(v71.count(Counter::Barrier), it * 2);
    // 7.1 issues with the _nosync helper and flushes once, in dma_direct_sync_sg_for_device.
    assert!(v71.stacks.iter().any(|st| {
        st.stack
            .ends_with("dma_direct_sync_sg_for_device > arch_sync_dma_flush")
    }));
    assert!(
        v70.stacks
            .iter()
            .all(|st| !st.stack.contains("arch_sync_dma_flush"))
    );
    // The same lines with 5118 fewer barriers an iteration: 7.1 costs much less on this path.
    let mean = |r: &RunResult| r.call("dma_sync_sg_for_device").unwrap().mean_ns();
    assert!(mean(&v71) < 0.5 * mean(&v70));
}

/// iommu-dma's map_sg and unmap_sg of seed 000's list on sm8150, behind a coherent table walker
/// (so no PTE clean adds a barrier): 7.1 waits once per call (v2's 8/8 folded into the merged
/// patch 4), 7.0 once per entry. The IOMMU's own `wmb()`s are DSB ST, counted apart.
#[test]
fn iommu_dma_sg_paths_batch_in_7_1() {
    let text = r#"
[scenario]
name = "iommu-sg"
platform = "sm8150"
kernel = "7.1"

[device]
name = "camera"
coherent = false
dma_mask_bits = 64

[iommu]
granule = "4K"
ias = 48
coherent_walk = true

[workload]
kind = "streaming"
buffer = "10M"
entry = "4K"
calls = "map_sg+unmap_sg"
direction = "bidirectional"
iterations = 3
"#;
    let s = Scenario::parse("iommu-sg.toml", text, std::path::Path::new(".")).unwrap();
    let v70 = run_with(s.clone(), KernelVersion(7, 0));
    let v71 = run_with(s, KernelVersion(7, 1));
    for r in [&v70, &v71] {
        assert_eq!(r.dma_ops, "iommu-dma");
        assert_eq!(r.count(Counter::CacheCleanLine), 3 * 163_840);
        assert_eq!(r.count(Counter::CacheInvalLine), 3 * 163_840);
    }
    assert_eq!(v70.count(Counter::Barrier), 3 * 2 * 2560);
    assert_eq!(v71.count(Counter::Barrier), 3 * 2);
    assert!(v71.stacks.iter().any(|st| {
        st.stack
            .ends_with("iommu_dma_map_sg > iommu_dma_sync_sg_for_device > arch_sync_dma_flush")
    }));
}
