//! `dmasim fit`: rows the model made from known costs are fitted back from a profile whose costs
//! are all off by 2x, every parameter the rows determine on its own comes back within 2 %, and
//! the rest are named; the kernel tool's and the function_graph tracer's own output is read; a
//! fit that cannot be made exits 2 naming the file and line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch directory, removed when the guard drops (the suite leaves nothing behind).
struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("dmasim-fit-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fit");

/// Every cost of a profile's text times `f`, every rate over it: a machine `f` times slower.
fn slower(text: &str, f: f64) -> String {
    let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
    fn walk(t: &mut dyn toml_edit::TableLike, f: f64) {
        for (k, v) in t.iter_mut() {
            let k = k.get().to_string();
            let scale = match k.as_str() {
                "ns" | "cycles" => Some(f),
                _ => None,
            };
            if let (Some(s), Some(n)) = (scale, v.as_value().and_then(number)) {
                *v = toml_edit::value(n * s);
            } else if let Some(t) = v.as_table_like_mut() {
                if k.ends_with("_mb_s")
                    && let Some(n) = t.get("value").and_then(|x| x.as_value()).and_then(number)
                {
                    t.insert("value", toml_edit::value(n / f));
                } else {
                    walk(t, f);
                }
            }
        }
    }
    fn number(v: &toml_edit::Value) -> Option<f64> {
        v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
    }
    walk(doc.as_table_mut(), f);
    doc.to_string()
}

/// The number at a dotted key of a profile's text (`sw.dma_api_call` → its `ns`, `cycles` or
/// `value`).
fn value_at(text: &str, key: &str) -> f64 {
    let doc: toml::Table = toml::from_str(text).unwrap();
    let mut v = &toml::Value::Table(doc);
    for part in key.split('.') {
        v = &v[part];
    }
    ["ns", "cycles", "value"]
        .iter()
        .find_map(|u| v.get(*u))
        .and_then(|n| n.as_float().or_else(|| n.as_integer().map(|i| i as f64)))
        .unwrap_or_else(|| panic!("{key} is one number"))
}

/// The model's own mean map and unmap of `-t 1 -g G -d D` on sm8150, as CSV rows.
fn model_rows(g: u32, d: u32) -> String {
    let (gs, ds) = (g.to_string(), d.to_string());
    let o = dmasim(&[
        "-q",
        "map-benchmark",
        "--platform",
        "sm8150",
        "-s",
        "1",
        "-t",
        "1",
        "-g",
        &gs,
        "-d",
        &ds,
        "--max-work",
        "1000000000000",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let mut rows = String::new();
    for c in v["calls"].as_array().unwrap() {
        let f = match c["call"].as_str().unwrap() {
            "dma_map_single" => "dma_map_page_attrs",
            "dma_unmap_single" => "dma_unmap_page_attrs",
            other => panic!("unexpected call {other}"),
        };
        rows += &format!(
            "dma_map_benchmark,-t 1 -g {g} -d {d},{f},{}\n",
            c["mean_ns"]
        );
    }
    rows
}

#[test]
fn a_profile_two_times_off_is_fitted_back_to_the_costs_that_made_the_rows() {
    let dir = Dir::new("recover");
    let truth = dmasim::platform::Profile::load("sm8150").unwrap().text;
    let mut csv = "experiment,options,metric,value\n".to_string();
    for g in [1, 256] {
        for d in [1, 2] {
            csv += &model_rows(g, d);
        }
    }
    let rows = dir.path("rows.csv");
    std::fs::write(&rows, &csv).unwrap();
    let base = dir.path("slow.toml");
    std::fs::write(&base, slower(&truth, 2.0)).unwrap();
    let out = dir.path("fitted.toml");
    let o = dmasim(&[
        "-q",
        "fit",
        "--platform",
        &base,
        &rows,
        "-o",
        &out,
        "--format",
        "json",
    ]);
    let fit: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(fit["converged"], true, "{fit:#}");

    // A parameter the rows determine on its own: fitted, nothing moved with it, and not one
    // of those a held parameter is made of.
    let inseparable: Vec<&str> = fit["held"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|h| h["inseparable_from"].as_array().unwrap())
        .map(|k| k.as_str().unwrap())
        .collect();
    let mut alone = Vec::new();
    let mut grouped = Vec::new();
    for f in fit["fitted"].as_array().unwrap() {
        let key = f["key"].as_str().unwrap();
        if f["moved_with_it"].as_array().unwrap().is_empty() && !inseparable.contains(&key) {
            alone.push((key, f["value"].as_f64().unwrap()));
        } else {
            grouped.push(key);
        }
    }
    assert!(
        alone.len() >= 2,
        "the rows determine some parameters on their own: {fit:#}"
    );
    for (key, got) in &alone {
        let want = value_at(&truth, key);
        assert!(
            (got / want - 1.0).abs() < 0.02,
            "{key}: fitted {got}, made with {want}"
        );
    }
    // And it says which it could not separate.
    assert!(!grouped.is_empty(), "{fit:#}");
    let text = ok(&dmasim(&["-q", "fit", "--platform", &base, &rows]));
    assert!(text.contains("these rows cannot tell them apart"), "{text}");

    // The written profile: each fitted number's source names the rows, and the commands take it.
    let written = std::fs::read_to_string(&out).unwrap();
    let doc: toml::Table = toml::from_str(&written).unwrap();
    let sw = doc["cache"]["inval"]["latency"]["source"].as_str().unwrap();
    assert!(
        sw.starts_with("fit: dmasim fit on ") && sw.contains("rows.csv:"),
        "{sw}"
    );
    for f in fit["fitted"].as_array().unwrap() {
        let key = f["key"].as_str().unwrap();
        let (got, want) = (value_at(&written, key), f["value"].as_f64().unwrap());
        assert!(
            (got / want - 1.0).abs() < 1e-3,
            "{key}: wrote {got}, fitted {want}"
        );
    }
    ok(&dmasim(&[
        "-q",
        "map-benchmark",
        "--platform",
        &out,
        "-s",
        "1",
        "-g",
        "4",
    ]));
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/batched-sync.toml");
    ok(&dmasim(&["-q", "run", scenario, "--platform", &out]));
}

#[test]
fn the_tools_own_output_and_a_function_graph_capture_are_fitted() {
    let dir = Dir::new("real");
    let out = dir.path("board.toml");
    let tool = format!("{DATA}/sm8150-6.12.txt");
    let graph = format!("{DATA}/sm8150-6.12-graph.txt");
    let o = dmasim(&[
        "-q",
        "fit",
        "--platform",
        "sm8150",
        "--iommu",
        "--kernel",
        "6.12",
        &tool,
        &graph,
        "-o",
        &out,
        "--name",
        "my-board",
        "--format",
        "json",
    ]);
    let fit: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let rows = fit["rows"].as_array().unwrap();
    // Eight tool lines (four runs, map and unmap) and three functions of the capture.
    assert_eq!(rows.len(), 11, "{fit:#}");
    let graph_rows: Vec<(&str, f64)> = rows
        .iter()
        .filter(|r| r["row"].as_str().unwrap().contains("graph"))
        .map(|r| {
            (
                r["metric"].as_str().unwrap(),
                r["measured"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(graph_rows.len(), 3);
    assert_eq!(graph_rows[0].0, "dma_map_page_attrs (ns)");
    // The six calls' durations averaged: their factors 1.03 .. 0.99 average exactly 1.
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains("name = \"my-board\""), "{written}");
    assert!(
        written.contains("source = \"fit: dmasim fit on "),
        "{written}"
    );
    ok(&dmasim(&[
        "-q",
        "map-benchmark",
        "--platform",
        &out,
        "--iommu",
        "-s",
        "1",
    ]));
    // The board made the rows with smmu.mmio_write at 150 ns; the fit finds it.
    let mmio = fit["fitted"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["key"] == "smmu.mmio_write")
        .expect("the rows determine smmu.mmio_write");
    let got = mmio["value"].as_f64().unwrap();
    assert!((got / 150.0 - 1.0).abs() < 0.05, "{got}");

    // The written profile carries its rows: reproduce sets each beside what the profile
    // predicts (what the fit ended at, up to the written values' four figures), fitted, and
    // a row it was not fitted to as a prediction.
    let more = dir.path("more.csv");
    std::fs::write(
        &more,
        "experiment,options,metric,value
dma_map_benchmark,-t 1 -g 64 -d 2,map_latency_us,8.0
",
    )
    .unwrap();
    let o = dmasim(&[
        "-q",
        "reproduce",
        "--platform",
        &out,
        "--rows",
        &more,
        "--format",
        "json",
    ]);
    let rep: serde_json::Value = serde_json::from_str(&ok(&o)).unwrap();
    let got = rep["rows"].as_array().unwrap();
    assert_eq!(got.len(), 12, "{rep:#}");
    for (r, f) in got.iter().zip(rows) {
        assert_eq!(r["id"], f["row"]);
        assert_eq!(r["published"], f["measured"]);
        let (model, fitted) = (r["model"].as_f64().unwrap(), f["fitted"].as_f64().unwrap());
        assert!(
            (model / fitted - 1.0).abs() < 2e-3,
            "{}: {model} against {fitted}",
            r["id"]
        );
        assert!(
            !r["fitted_params"].as_array().unwrap().is_empty(),
            "{} was fitted to",
            r["id"]
        );
    }
    assert!(got[11]["id"].as_str().unwrap().ends_with("more.csv:2"));
    assert_eq!(got[11]["fitted_params"], serde_json::json!([]));
    assert!(Path::new(&out).exists());
}

/// `dmasim fit` with `args` after the subcommand: exit 2, and stderr's message.
fn refused(args: &[&str]) -> String {
    let mut all = vec!["-q", "fit"];
    all.extend_from_slice(args);
    let o = dmasim(&all);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one message: {err}");
    err
}

#[test]
fn a_fit_that_cannot_be_made_names_the_file_and_line() {
    let dir = Dir::new("bad");
    let tool = std::fs::read_to_string(format!("{DATA}/sm8150-6.12.txt")).unwrap();
    let cut = dir.path("cut.txt");
    std::fs::write(
        &cut,
        tool.replacen(
            "average unmap latency(us):2.0",
            "average unmap latency:2.0",
            1,
        ),
    )
    .unwrap();
    let e = refused(&["--platform", "sm8150", "--iommu", &cut]);
    assert!(e.contains("cut.txt:5: "), "{e}");

    let csv = dir.path("rows.csv");
    std::fs::write(
        &csv,
        "experiment,options,metric,value\n\
         dma_map_benchmark,-t 1 -g 1,dma_map_page_attrs,200\n\
         dma_map_benchmark,-t 1 -g 1,dma_map_page_attrs,400\n",
    )
    .unwrap();
    let e = refused(&["--platform", "sm8150", &csv]);
    assert!(
        e.contains("rows.csv:3: ") && e.contains("contradict"),
        "{e}"
    );

    std::fs::write(
        &csv,
        "experiment,options,metric,value\ndma_map_benchmark,-t 1 -g 1,dma_map_page_attrs,200\n",
    )
    .unwrap();
    // No SMMU behind this device: its TLB invalidation moves no row.
    let e = refused(&["--platform", "sm8150", "--param", "smmu.tlbi_va", &csv]);
    assert!(
        e.contains("rows.csv:2: ") && e.contains("no parameter"),
        "{e}"
    );
    let e = refused(&["--platform", "sm8150", "--param", "cache.line_bytes", &csv]);
    assert!(
        e.contains("--param cache.line_bytes") && e.contains("not a cost"),
        "{e}"
    );
    let e = refused(&["--platform", "sm8150", "--param", "sw.no_such_cost", &csv]);
    assert!(e.contains("--param sw.no_such_cost"), "{e}");

    // A profile's [fit] rows are input too.
    let sm8150 = dmasim::platform::Profile::load("sm8150").unwrap().text;
    let prof = dir.path("fitted.toml");
    std::fs::write(
        &prof,
        format!(
            "{sm8150}\n[fit]\nkernel = \"7.1\"\niommu = false\ncoherent = false\n\n[[fit.row]]\nat = \"b.txt:3\"\nrun = \"-t 1\"\nmetric = \"map_latency_us\"\nvalue = -1.0\n"
        ),
    )
    .unwrap();
    let o = dmasim(&["-q", "reproduce", "--platform", &prof]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("fitted.toml:") && e.contains("key `fit.row.value`"),
        "{e}"
    );
    let o = dmasim(&["-q", "reproduce", "--platform", "sm8150"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("no [fit] section"), "{e}");
}
