//! Every shipped scenario and every scenario example in docs/scenarios.md runs. A fragment (a
//! `[workload]` or `[swiotlb]` section alone) runs with the sections the page shows it beside.

use dmasim::scenario::{Scenario, execute};

const DOC: &str = include_str!("../docs/scenarios.md");

/// The ```toml blocks of a Markdown page.
fn toml_blocks(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in md.lines() {
        match (&mut cur, line.trim_start()) {
            (None, l) if l.starts_with("```toml") => cur = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => out.extend(cur.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// What a fragment needs around it: the shared sections of the shipped scenario of its kind.
fn head(kind: &str) -> String {
    let file = match kind {
        "forwarding" => include_str!("../scenarios/ixgbe-forwarding.toml"),
        "bounce" => include_str!("../scenarios/swiotlb-bounce.toml"),
        "iommu_ops" | "iommu_sweep" => include_str!("../scenarios/iommu-ops.toml"),
        "pipeline" => include_str!("../scenarios/zynq-pipeline-streaming.toml"),
        _ => include_str!("../scenarios/batched-sync.toml"),
    };
    file.split("\n[workload]").next().unwrap().to_string() + "\n"
}

fn run(what: &str, text: &str) {
    let s = Scenario::parse("doc.toml", text, std::path::Path::new("."))
        .unwrap_or_else(|e| panic!("{what}: {e}\n{text}"));
    execute(&s).unwrap_or_else(|e| panic!("{what}: {e}"));
}

#[test]
fn every_scenario_example_in_the_docs_runs() {
    let blocks = toml_blocks(DOC);
    assert!(blocks.len() >= 6, "{} blocks", blocks.len());
    let mut ran = 0;
    for (i, b) in blocks.iter().enumerate() {
        let first = b.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let text = match first.trim() {
            "[scenario]" => b.clone(),
            "[workload]" => {
                let kind = b
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("kind = "))
                    .map(|k| k.split('"').nth(1).unwrap_or(""))
                    .unwrap_or("");
                head(kind) + b
            }
            "[swiotlb]" => {
                // The bounce scenario with the page's [swiotlb] in place of its own.
                let bounce = include_str!("../scenarios/swiotlb-bounce.toml");
                let (before, rest) = bounce.split_once("\n[swiotlb]").unwrap();
                let after = rest.find("\n[").map_or("", |i| &rest[i..]);
                format!("{before}\n{after}\n{b}")
            }
            other => panic!("block {i} starts with `{other}`: say here how to run it"),
        };
        run(&format!("docs/scenarios.md block {i}"), &text);
        ran += 1;
    }
    assert_eq!(ran, blocks.len());
}

#[test]
fn every_shipped_scenario_runs() {
    let mut n = 0;
    for e in std::fs::read_dir("scenarios").unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let s = Scenario::load(&p.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
            execute(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 5, "{n} scenarios");
}
