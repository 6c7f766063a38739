//! `--set` and `--sweep`: a set key runs as if written in the file, a sweep's figures are the
//! runs' own, its plot is well-formed SVG holding exactly the plotted values, and bad requests
//! exit 2 naming the argument.

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

fn mean_of(run: &serde_json::Value, call: &str) -> f64 {
    run["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|c| c["call"] == call)
        .and_then(|c| c["mean_ns"].as_f64())
        .unwrap_or_else(|| panic!("no {call}"))
}

#[test]
fn a_set_key_runs_as_if_written_in_the_file() {
    let set = json(&[
        "run",
        SCENARIO,
        "--set",
        "workload.entry=64K",
        "--format",
        "json",
    ]);
    assert_eq!(
        set["workload"]["entry_bytes"],
        serde_json::json!([65536]),
        "{}",
        set["workload"]
    );
    let text =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO))
            .expect("scenario");
    assert!(
        text.contains("entry = \"4K\""),
        "the shipped scenario sets 4K"
    );
    let dir = std::env::temp_dir().join(format!("dmasim-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let edited = dir.join("edited.toml");
    std::fs::write(&edited, text.replace("entry = \"4K\"", "entry = \"64K\"")).expect("write");
    let file = json(&["run", edited.to_str().expect("utf-8"), "--format", "json"]);
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert_eq!(mean_of(&set, "dma_map_sg"), mean_of(&file, "dma_map_sg"));
    assert_eq!(set["total_ns"], file["total_ns"]);
}

#[test]
fn a_sweep_writes_a_plot_with_one_curve_per_release_holding_the_run_figures() {
    let dir = std::env::temp_dir().join(format!("dmasim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let svg_path = dir.join("out.svg");
    let svg_arg = svg_path.to_str().expect("utf-8");
    let doc = json(&[
        "run",
        SCENARIO,
        "--sweep",
        "workload.entry=4K,16K,64K,256K",
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--plot",
        svg_arg,
        "--format",
        "json",
    ]);
    let svg = std::fs::read_to_string(&svg_path).expect("plot written");
    std::fs::remove_dir_all(&dir).expect("clean up");
    let tree = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(tree.root_element().tag_name().name(), "svg");
    assert_eq!(
        doc["variants"],
        serde_json::json!(["kernel 7.0", "kernel 7.1"])
    );

    // One panel per call; in each, two curves (7.0, 7.1) of four points.
    let charts: Vec<_> = tree
        .descendants()
        .filter(|n| n.attribute("class") == Some("chart"))
        .collect();
    assert_eq!(charts.len(), 2, "dma_map_sg and dma_unmap_sg");
    for chart in &charts {
        let series: Vec<_> = chart
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .collect();
        let labels: Vec<_> = series
            .iter()
            .filter_map(|s| s.attribute("data-label"))
            .collect();
        assert_eq!(labels, ["kernel 7.0", "kernel 7.1"]);
        for s in &series {
            assert_eq!(
                s.descendants()
                    .filter(|n| n.has_tag_name("polyline"))
                    .count(),
                1
            );
            assert_eq!(
                s.descendants()
                    .filter(|n| n.attribute("class") == Some("point"))
                    .count(),
                4
            );
        }
    }
    // Every plotted value is the sweep's figure for that call, entry and release (µs).
    let points = doc["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    for (ci, call) in ["dma_map_sg", "dma_unmap_sg"].iter().enumerate() {
        for (vi, _) in ["7.0", "7.1"].iter().enumerate() {
            let series = charts[ci]
                .descendants()
                .filter(|n| n.attribute("class") == Some("series"))
                .nth(vi)
                .expect("series");
            let plotted: Vec<(String, f64)> = series
                .descendants()
                .filter(|n| n.attribute("class") == Some("point"))
                .map(|n| {
                    (
                        n.attribute("data-x").expect("x").to_string(),
                        n.attribute("data-y").expect("y").parse().expect("number"),
                    )
                })
                .collect();
            for (pi, p) in points.iter().enumerate() {
                let c = p["calls"]
                    .as_array()
                    .expect("calls")
                    .iter()
                    .find(|c| c["call"] == *call)
                    .expect("call");
                let want = c["mean_ns"][vi].as_f64().expect("mean") / 1000.0;
                assert_eq!(
                    plotted[pi].0,
                    p["setting"]["workload.entry"].as_str().expect("x")
                );
                assert!((plotted[pi].1 - want).abs() < 1e-9, "{call} {vi} {pi}");
            }
        }
    }
    // And the sweep's figure is what `run --set` gives for that point.
    let one = json(&[
        "run",
        SCENARIO,
        "--set",
        "workload.entry=16K",
        "--kernel",
        "7.1",
        "--format",
        "json",
    ]);
    let at16 = points[1]["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .find(|c| c["call"] == "dma_map_sg")
        .expect("map_sg");
    assert!(
        (at16["mean_ns"][1].as_f64().expect("mean") - mean_of(&one, "dma_map_sg")).abs() < 1e-3
    );
    // 7.1 gains least where entries are largest: the saving shrinks along the sweep.
    let saving = |p: &serde_json::Value| {
        let c = &p["calls"][0];
        c["mean_ns"][0].as_f64().expect("a") - c["mean_ns"][1].as_f64().expect("b")
    };
    assert!(saving(&points[0]) > saving(&points[3]));
}

#[test]
fn bad_sets_and_sweeps_exit_2_naming_the_argument() {
    for (args, needle) in [
        (
            vec!["run", SCENARIO, "--set", "workload.entry"],
            "not KEY=VALUE",
        ),
        (
            vec!["run", SCENARIO, "--set", "workload.entry=banana"],
            "--set workload.entry=banana",
        ),
        (
            vec!["run", SCENARIO, "--set", "workload.nope=1"],
            "--set workload.nope=1",
        ),
        (
            vec!["run", SCENARIO, "--sweep", "workload.entry"],
            "--sweep workload.entry",
        ),
        (
            vec!["run", SCENARIO, "--sweep", "workload.entry=4K,banana"],
            "--set workload.entry=banana",
        ),
        (
            vec!["run", SCENARIO, "--plot", "x.svg"],
            "--plot draws a sweep",
        ),
        (
            vec!["run", SCENARIO, "--kernel", "7.0", "--kernel", "7.1"],
            "dmasim compare",
        ),
    ] {
        let o = dmasim(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.contains("<argument>"), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn quiet_silences_notes_but_not_errors() {
    let dir = std::env::temp_dir().join(format!("dmasim-quiet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let svg = dir.join("q.svg");
    let svg = svg.to_str().expect("utf-8");
    let args = [
        "run",
        SCENARIO,
        "--sweep",
        "workload.entry=4K,64K",
        "--plot",
        svg,
    ];
    let loud = dmasim(&args);
    assert!(String::from_utf8_lossy(&loud.stderr).contains("wrote"));
    let mut q = vec!["-q"];
    q.extend(args);
    let quiet = dmasim(&q);
    let also = dmasim(&[&args[..], &["--quiet"]].concat());
    std::fs::remove_dir_all(&dir).expect("clean up");
    for o in [&quiet, &also] {
        assert!(o.status.success());
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.stdout, loud.stdout);
    }
    let err = dmasim(&["-q", "run", SCENARIO, "--set", "workload.nope=1"]);
    assert_eq!(err.status.code(), Some(2));
    assert!(!err.stderr.is_empty(), "errors still show under -q");
}

/// A sweep's JSON records what every point ran with: the swept values as typed and in base
/// units, the `--set` edits and `--policy` overrides, and per point each variant's platform,
/// release and policies in the schema `compare` uses.
#[test]
fn the_json_records_each_points_effective_configuration() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "run",
            "batched-sync",
            "--sweep",
            "workload.entry=4K,16K",
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
            "--set",
            "workload.iterations=3",
            "--policy",
            "arm64_dir_rules=pre-5.19",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["sets"][0], "workload.iterations=3");
    assert_eq!(d["policy_overrides"][0], "arm64_dir_rules=pre-5.19");
    let p = &d["points"][1];
    assert_eq!(p["setting"]["workload.entry"], "16K");
    assert_eq!(p["setting_values"]["workload.entry"], 16384.0);
    let v = &p["variants"][1];
    assert_eq!(v["policies"]["kernel"], "7.1");
    assert_eq!(v["policies"]["arm64_dir_rules"], "pre-5.19");
    assert_eq!(v["platform"], "dimensity9500");
    // The same keys as a comparison's variants.
    let c = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "compare",
            "batched-sync",
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let c: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
    let keys = |x: &serde_json::Value| {
        let mut k: Vec<String> = x.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(v), keys(&c["variants"][1]));
    assert_eq!(dmasim::sweep::base_value("150ns"), Some(150_000.0));
    assert_eq!(dmasim::sweep::base_value("to_device"), None);
}
