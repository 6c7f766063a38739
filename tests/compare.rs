//! `dmasim compare`: one scenario under several variants. The figures it shows are the runs'
//! own (checked against `run` of each variant), frames are matched across releases so 7.1's
//! cache maintenance is the same frame as 7.0's and shrinks, and bad requests exit 2.

use std::process::{Command, Output};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("binary runs")
}

fn ok(args: &[&str]) -> String {
    let o = dmasim(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).expect("json")
}

const SCENARIO: &str = "scenarios/batched-sync.toml";

#[test]
fn the_table_shows_calls_operations_and_matched_stacks_with_their_changes() {
    let t = ok(&["compare", SCENARIO, "--kernel", "7.0", "--kernel", "7.1"]);
    assert!(t.contains("A: dimensity9500 (arm64), kernel 7.0"), "{t}");
    assert!(t.contains("B: dimensity9500 (arm64), kernel 7.1"), "{t}");
    let line = |start: &str| {
        t.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` line in\n{t}"))
            .to_string()
    };
    // One barrier per entry (7.0) against one per list (7.1): 1,024,000 DSB over the run
    // against 400 (200 iterations x map + unmap).
    let barrier = line("barrier ");
    let cols: Vec<&str> = barrier.split_whitespace().collect();
    assert_eq!(&cols[..3], ["barrier", "1024000", "400"], "{barrier}");
    assert_eq!(cols[3], "-99.96", "{barrier}");
    assert!(line("dma_map_sg ").contains('%'));
    // The cache maintenance of map_sg is one frame in both releases.
    let cm = t
        .lines()
        .find(|l| l.ends_with("dma_map_sg > dma_direct_map_sg > cache maintenance"))
        .unwrap_or_else(|| panic!("no matched cache-maintenance row in\n{t}"));
    assert!(cm.contains("-13.5 %"), "{cm}");
    assert!(
        !t.contains("_nosync") && !t.contains("arch_sync_dma_flush"),
        "{t}"
    );
}

#[test]
fn the_figures_are_each_variants_own_run() {
    let c = json(&[
        "compare", SCENARIO, "--kernel", "7.0", "--kernel", "7.1", "--format", "json",
    ]);
    assert!(c["format_version"].is_u64());
    for (i, k) in ["7.0", "7.1"].iter().enumerate() {
        let r = json(&["run", SCENARIO, "--kernel", k, "--format", "json"]);
        assert_eq!(c["variants"][i]["policies"], r["policies"], "{k}");
        for call in c["calls"].as_array().expect("calls") {
            let name = call["call"].as_str().expect("name");
            let run_call = r["calls"]
                .as_array()
                .expect("run calls")
                .iter()
                .find(|x| x["call"] == name)
                .unwrap_or_else(|| panic!("{name} not in run {k}"));
            assert_eq!(call["count"][i], run_call["count"], "{k} {name}");
            let ps = call["total_ps"][i].as_u64().expect("ps") as f64;
            let run_ns = run_call["total_ns"].as_f64().expect("ns");
            assert!(
                (ps / 1000.0 - run_ns).abs() < 0.01,
                "{k} {name}: {ps} ps vs {run_ns} ns"
            );
        }
    }
    let stacks = c["stacks"].as_array().expect("stacks");
    assert!(stacks.iter().all(|s| s["stack"].is_array()));
    // The matched stacks keep every picosecond of each run.
    for i in 0..2 {
        let sum: u64 = stacks
            .iter()
            .map(|s| s["values"][i].as_u64().expect("ps"))
            .sum();
        assert_eq!(
            Some(sum),
            c["variants"][i]["total_ps"].as_u64(),
            "variant {i}"
        );
    }
}

#[test]
fn the_folded_pair_is_one_differential_file_in_which_cache_maintenance_shrinks() {
    let f = ok(&[
        "compare", SCENARIO, "--kernel", "7.0", "--kernel", "7.1", "--format", "folded",
    ]);
    let mut cache = 0;
    for line in f.lines() {
        let cols: Vec<&str> = line.rsplitn(3, ' ').collect();
        assert_eq!(cols.len(), 3, "{line}");
        let (b, a): (u64, u64) = (cols[0].parse().expect("B"), cols[1].parse().expect("A"));
        let stack = cols[2];
        assert!(!stack.is_empty() && !stack.contains(" > "), "{line}");
        if stack.ends_with(";cache maintenance") {
            cache += 1;
            assert!(b < a && b > 0, "{line}");
        }
    }
    assert_eq!(
        cache, 2,
        "map and unmap each have one cache-maintenance frame:\n{f}"
    );
}

#[test]
fn variants_can_mix_releases_and_policies() {
    let c = json(&[
        "compare",
        SCENARIO,
        "--variant",
        "kernel=7.1",
        "--variant",
        "kernel=7.1,sync=per-entry",
        "--format",
        "json",
    ]);
    assert_eq!(c["variants"][1]["label"], "kernel 7.1, sync=per-entry");
    assert_eq!(c["variants"][1]["policies"]["sync"], "per-entry");
}

#[test]
fn bad_requests_exit_2_with_one_message() {
    for (args, needle) in [
        (
            vec!["compare", SCENARIO, "--kernel", "7.1"],
            "at least two variants",
        ),
        (
            vec![
                "compare",
                SCENARIO,
                "--variant",
                "kernel=7.0",
                "--variant",
                "kernel",
            ],
            "not key=value",
        ),
        (
            vec![
                "compare",
                SCENARIO,
                "--variant",
                "kernel=7.0",
                "--variant",
                "kernel=9.9",
            ],
            "variant `kernel 9.9`",
        ),
        (
            vec![
                "compare", SCENARIO, "--kernel", "6.0", "--kernel", "7.0", "--kernel", "7.1",
                "--format", "folded",
            ],
            "exactly two variants",
        ),
        (
            vec![
                "compare",
                SCENARIO,
                "--variant",
                "kernel=7.0",
                "--variant",
                "nope=1",
            ],
            "nope",
        ),
    ] {
        let o = dmasim(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// A variant may set scenario keys (a dotted key, as `--set` takes it): that variant runs the
/// edited scenario, the others the scenario as written, and the variant's settings are reported;
/// a key the scenario refuses names the variant.
#[test]
fn a_variant_may_set_scenario_keys() {
    let c = json(&[
        "compare",
        "batched-sync",
        "--variant",
        "kernel=7.0",
        "--variant",
        "kernel=7.1,workload.entry=16K",
        "--format",
        "json",
    ]);
    assert_eq!(c["variants"][1]["settings"][0], "workload.entry=16K");
    assert_eq!(c["variants"][0]["settings"].as_array().unwrap().len(), 0);
    // The same as running the edited scenario under 7.1.
    let plain = json(&[
        "run",
        "batched-sync",
        "--kernel",
        "7.1",
        "--set",
        "workload.entry=16K",
        "--format",
        "json",
    ]);
    let ps = c["variants"][1]["total_ps"].as_f64().unwrap();
    assert!(
        (ps / 1000.0 - plain["total_ns"].as_f64().unwrap()).abs() < 1.0,
        "{plain}"
    );
    let o = dmasim(&[
        "compare",
        "batched-sync",
        "--variant",
        "kernel=7.0",
        "--variant",
        "workload.entry=0",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("workload.entry=0") && e.lines().count() == 1,
        "{e}"
    );
}

/// `compare` and `--sweep` say once per platform which costs its profile leaves unpriced (as
/// `run` does), and the comparison's JSON carries the list per variant.
#[test]
fn compare_and_sweep_warn_of_unpriced_costs_once_per_platform() {
    let sm8150 = crate::priced::sm8150_without_dma_direct();
    for args in [
        vec![
            "compare",
            "batched-sync",
            "--platform",
            sm8150,
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
        ],
        vec![
            "run",
            "batched-sync",
            "--sweep",
            "workload.entry=4K,16K",
            "--platform",
            sm8150,
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
        ],
    ] {
        let o = dmasim(&args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {e}");
        assert_eq!(e.matches("does not price").count(), 1, "{args:?}: {e}");
        assert!(e.contains("sw.dma_direct_map_phys"), "{e}");
    }
    let c = json(&[
        "compare",
        "batched-sync",
        "--platform",
        sm8150,
        "--platform",
        "dimensity9500",
        "--format",
        "json",
    ]);
    assert!(
        c["variants"][0]["unpriced_costs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "sw.dma_direct_map_phys")
    );
    assert_eq!(
        c["variants"][1]["unpriced_costs"].as_array().unwrap().len(),
        0
    );
}

/// `--baseline K` measures every variant against K (its letter, number or label); a 2×2 of
/// kernels and platforms also gives each release change within its platform.
#[test]
fn a_baseline_and_the_release_change_within_each_platform() {
    let t = ok(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--baseline",
        "B",
    ]);
    assert!(t.contains("A: dimensity9500 (arm64), kernel 7.1"), "{t}");
    assert!(t.contains("B: dimensity9500 (arm64), kernel 7.0"), "{t}");
    let by_label = ok(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--baseline",
        "kernel 7.1",
    ]);
    assert_eq!(t, by_label);
    let o = dmasim(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--baseline",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let c = json(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--platform",
        "dimensity9500",
        "--platform",
        "sm8150",
        "--format",
        "json",
    ]);
    let w = c["within_platform"].as_array().unwrap();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0]["platform"], "dimensity9500");
    assert_eq!(w[1]["platform"], "sm8150");
    // Within dimensity9500, 7.1 against 7.0 is seed 000's map_sg change.
    let pct = w[0]["calls"][0]["change_pct"].as_f64().unwrap();
    assert!((pct + 64.6).abs() < 0.1, "{pct}");
    // One platform: nothing to split.
    let one = json(&[
        "compare", SCENARIO, "--kernel", "7.0", "--kernel", "7.1", "--format", "json",
    ]);
    assert_eq!(one["within_platform"].as_array().unwrap().len(), 0);
}
