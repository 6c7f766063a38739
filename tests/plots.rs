//! Pictures: `reproduce --plot`, `compare --plot` and `run --sweep --plot FILE.html` write
//! self-contained SVG or HTML. The files are parsed (the HTML is XHTML, so the whole page and
//! its inline SVG parse as XML) and every drawn value is checked against the command's own JSON.

use std::path::PathBuf;
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

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dmasim-plots-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An HTML page parsed as XML: it is XHTML, with the HTML5 doctype (a DTD to the parser).
fn parse_page(text: &str) -> roxmltree::Document<'_> {
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(text, opt).expect("well-formed XHTML")
}

/// Elements with `class` in the document.
fn class<'a, 'i>(doc: &'a roxmltree::Document<'i>, c: &str) -> Vec<roxmltree::Node<'a, 'i>> {
    doc.descendants()
        .filter(|n| n.attribute("class") == Some(c))
        .collect()
}

fn num(n: &roxmltree::Node, attr: &str) -> f64 {
    n.attribute(attr).unwrap().parse().unwrap()
}

/// Every cell text of the page's tables.
fn cells(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("td"))
        .map(|n| n.text().unwrap_or("").to_string())
        .collect()
}

#[test]
fn reproduce_writes_each_published_rows_error_and_its_table() {
    let dir = scratch("reproduce");
    let page = dir.join("r.html");
    let doc = json(&[
        "reproduce",
        "--format",
        "json",
        "--plot",
        page.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&page).unwrap();
    let html = parse_page(&text);
    assert_eq!(html.root_element().tag_name().name(), "html");
    let svgs: Vec<_> = html
        .descendants()
        .filter(|n| n.has_tag_name("svg"))
        .collect();
    let experiments = doc["experiments"].as_array().unwrap();
    assert_eq!(svgs.len(), experiments.len(), "one plot per experiment");
    // No script, no external reference: the page stands alone.
    assert!(!text.contains("<script") && !text.contains("href=") && !text.contains("src="));

    let bars = class(&html, "bar");
    let cells = cells(&html);
    let mut published = 0;
    for e in experiments {
        for row in e["rows"].as_array().unwrap() {
            let id = row["id"].as_str().unwrap();
            assert!(cells.iter().any(|c| c == id), "{id} in a table");
            let local = id.split_once('/').unwrap().1;
            let bar = bars
                .iter()
                .find(|b| b.attribute("data-group") == Some(local));
            match row["error"].as_f64() {
                Some(err) => {
                    published += 1;
                    let bar = bar.unwrap_or_else(|| panic!("no bar for {id}"));
                    // serde_json's float parsing may be one ulp off the file's shortest form.
                    assert!((num(bar, "data-value") - err).abs() < 1e-9, "{id}");
                    // A bar past the ±25 axis is cut and says so.
                    assert_eq!(
                        bar.attribute("data-cut").is_some(),
                        err.abs() > 25.0,
                        "{id}"
                    );
                }
                None => assert!(bar.is_none(), "model-only row {id} has no error to draw"),
            }
        }
    }
    assert_eq!(bars.len(), published);
    // The camera lower bound, -96.8 %, is one of the cut bars; its real error is written.
    assert!(text.contains("✂ -96.76 %"), "camera row's error shown");

    // The SVG form holds the same bars.
    let svg_path = dir.join("r.svg");
    ok(&[
        "reproduce",
        "batched-sync",
        "--plot",
        svg_path.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let svg = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let values: Vec<(String, f64)> = class(&svg, "bar")
        .iter()
        .map(|b| {
            (
                b.attribute("data-group").unwrap().to_string(),
                num(b, "data-value"),
            )
        })
        .collect();
    assert_eq!(values.len(), 2, "{values:?}");
    assert_eq!(values[0].0, "map_sg.reduction");
    assert_eq!(values[1].0, "unmap_sg.reduction");
    let _ = std::fs::remove_dir_all(&dir);
}

const SCENARIO: &str = "scenarios/batched-sync.toml";

#[test]
fn compare_draws_time_per_call_per_variant_and_the_stack_breakdown() {
    let dir = scratch("compare");
    let svg_path = dir.join("c.svg");
    let doc = json(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--format",
        "json",
        "--plot",
        svg_path.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg_path).unwrap();
    let svg = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert_eq!(svg.root_element().tag_name().name(), "svg");

    // Bars: one per call and variant, in µs (the calls are 90 to 273 µs).
    let bars = class(&svg, "bar");
    assert_eq!(bars.len(), 4);
    for call in doc["calls"].as_array().unwrap() {
        let name = call["call"].as_str().unwrap();
        for (i, label) in ["A: kernel 7.0", "B: kernel 7.1"].iter().enumerate() {
            let bar = bars
                .iter()
                .find(|b| {
                    b.attribute("data-group") == Some(name)
                        && b.attribute("data-series") == Some(label)
                })
                .unwrap_or_else(|| panic!("no bar for {name} {label}"));
            let want = call["mean_ns"][i].as_f64().unwrap() / 1000.0;
            assert!(
                (num(bar, "data-value") - want).abs() < 1e-9,
                "{name} {label}"
            );
        }
    }
    assert!(
        text.contains("96.630 µs (-64.6 %)"),
        "B's change at its bar"
    );

    // Segments: every matched stack of each variant, in ms, summing to the run's self time.
    let segs = class(&svg, "segment");
    let stacks = doc["stacks"].as_array().unwrap();
    for (i, bar) in ["A: kernel 7.0", "B: kernel 7.1"].iter().enumerate() {
        let mine: Vec<_> = segs
            .iter()
            .filter(|s| s.attribute("data-bar") == Some(bar))
            .collect();
        for st in stacks {
            let name = st["stack"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" > ");
            let ps = st["values"][i].as_f64().unwrap();
            let seg = mine
                .iter()
                .find(|s| s.attribute("data-stack") == Some(name.as_str()));
            match seg {
                Some(seg) => assert!((num(seg, "data-value") - ps / 1e9).abs() < 1e-9, "{name}"),
                None => assert_eq!(ps, 0.0, "{bar}: {name} drawn"),
            }
        }
    }
    // The cache maintenance of map_sg is one frame in both releases, and it shrinks.
    let cm = "dma_map_sg > dma_direct_map_sg > cache maintenance";
    let v: Vec<f64> = segs
        .iter()
        .filter(|s| s.attribute("data-stack") == Some(cm))
        .map(|s| num(s, "data-value"))
        .collect();
    assert_eq!(v.len(), 2);
    assert!(v[1] < v[0], "{v:?}");

    // The HTML page embeds the same pictures and the tables.
    let page = dir.join("c.html");
    ok(&[
        "compare",
        SCENARIO,
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--plot",
        page.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&page).unwrap();
    let html = parse_page(&text);
    assert_eq!(class(&html, "bar").len(), 4);
    let cells = cells(&html);
    for want in [
        "dma_map_sg",
        "273100.812",
        "96629.613",
        "-64.6 %",
        "barrier",
        "1024000",
        "400",
    ] {
        assert!(cells.iter().any(|c| c == want), "{want} in the tables");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn many_stacks_keep_one_colour_each() {
    let dir = scratch("many");
    let svg_path = dir.join("m.svg");
    ok(&[
        "compare",
        "scenarios/smmu-walk-flush.toml",
        "--kernel",
        "5.14",
        "--kernel",
        "5.15",
        "--plot",
        svg_path.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&svg_path).unwrap();
    let svg = roxmltree::Document::parse(&text).expect("well-formed SVG");
    let names: std::collections::BTreeSet<&str> = class(&svg, "segment")
        .iter()
        .filter_map(|s| s.attribute("data-stack"))
        .collect();
    assert!(names.len() <= 8, "{names:?}");
    assert!(
        names.iter().any(|n| n.ends_with("other stacks")),
        "{names:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sweep_page_holds_its_curves_and_table() {
    let dir = scratch("sweep");
    let page = dir.join("s.html");
    let doc = json(&[
        "run",
        SCENARIO,
        "--sweep",
        "workload.entry=4K,64K",
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--format",
        "json",
        "--plot",
        page.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&page).unwrap();
    let html = parse_page(&text);
    let points = class(&html, "point");
    // Two calls x two releases x two entry sizes.
    assert_eq!(points.len(), 8);
    let cells = cells(&html);
    assert!(cells.iter().any(|c| c == "workload.entry=64K"));
    assert!(doc["format_version"].is_number());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_plot_is_bad_input() {
    let o = dmasim(&[
        "reproduce",
        "batched-sync",
        "--plot",
        "/nonexistent-dir/x.html",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/nonexistent-dir/x.html") && err.contains("cannot write plot"),
        "{err}"
    );
}

/// `--plot` writes the formats it names (SVG, HTML) and refuses any other before running, so a
/// `.png` never holds SVG bytes.
#[test]
fn a_plot_in_a_format_dmasim_does_not_write_is_refused() {
    let dir = std::env::temp_dir().join(format!("dmasim-png-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("x.png");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args([
            "compare",
            "batched-sync",
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
            "--plot",
        ])
        .arg(&png)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("`.png`") && e.contains(".svg") && e.lines().count() == 1,
        "{e}"
    );
    assert!(!png.exists());
    assert!(o.stdout.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A two-key sweep's legend reads whole: every entry's text ends inside the SVG (its width
/// taken at 0.65 em a character, the renderer's own estimate for a sans-serif face), and the
/// value axis' ticks read as the data does.
#[test]
fn a_two_key_sweeps_legend_fits_inside_the_picture() {
    let dir = std::env::temp_dir().join(format!("dmasim-legend-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("two.svg");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args([
            "run",
            "batched-sync",
            "--sweep",
            "workload.entry=4K,16K",
            "--sweep",
            "workload.direction=to_device,bidirectional",
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
            "--plot",
        ])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let root = doc.root_element();
    let width: f64 = root.attribute("width").unwrap().parse().unwrap();
    let mut entries = 0;
    for t in doc.descendants().filter(|n| {
        n.has_tag_name("text")
            && n.attribute("stroke") == Some("none")
            && n.attribute("font-size") == Some("12")
    }) {
        let x: f64 = t.attribute("x").unwrap().parse().unwrap();
        let label = t.text().unwrap_or("");
        assert!(label.contains("kernel 7."), "{label}");
        let end = x + label.chars().count() as f64 * 12.0 * 0.65;
        assert!(
            end <= width,
            "`{label}` ends at {end} in a picture {width} wide"
        );
        entries += 1;
    }
    assert!(entries >= 4, "{entries} legend entries");
    // No tick like `30.00`: a tick has no trailing zero after a decimal point.
    for t in doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("text-anchor") == Some("end"))
    {
        let v = t.text().unwrap_or("");
        assert!(!(v.contains('.') && v.ends_with('0')), "tick `{v}`");
    }
}

/// `reproduce --plot` shows the rows a parameter was fitted on apart from the predictions: one
/// panel each, every published row in exactly one of them.
#[test]
fn reproduce_plots_fitted_rows_apart_from_predictions() {
    let dir = std::env::temp_dir().join(format!("dmasim-repro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("r.svg");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(["reproduce", "batched-sync", "--plot"])
        .arg(&svg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let titles: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text") && n.attribute("font-weight") == Some("bold"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        titles.iter().any(|t| t.contains("fitted rows")),
        "{titles:?}"
    );
    assert!(
        titles.iter().any(|t| t.contains("predictions")),
        "{titles:?}"
    );
    // batched-sync: map_sg.reduction is fitted, unmap_sg.reduction predicted.
    let fitted_at = text.find("fitted rows").unwrap();
    let predicted_at = text.find("predictions (").unwrap();
    let map = text.find("map_sg.reduction").unwrap();
    let unmap = text.find("unmap_sg.reduction").unwrap();
    assert!(
        fitted_at < map && map < predicted_at && predicted_at < unmap,
        "{text}"
    );
}
