//! The two generic starting profiles (an arm64 server with a coherent SMMUv3 on two sockets, an
//! arm64 SoC with a non-coherent MMU-500): they are built in and listed, every value has a
//! source and none is fitted (no published row was fitted on them), and the workloads a user
//! starts from run on them without a cost left unpriced.

use dmasim::platform::{Profile, SourceKind};
use std::process::{Command, Output};

const GENERIC: [&str; 2] = ["generic-arm64-smmuv3", "generic-arm64-mmu500"];

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// Standard output of a run that must succeed and warn of nothing (no unpriced cost).
fn clean_run(args: &[&str]) -> String {
    let o = dmasim(args);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{args:?}: {e}");
    assert!(!e.contains("warning"), "{args:?}: {e}");
    String::from_utf8(o.stdout).expect("utf-8")
}

#[test]
fn both_load_and_are_listed() {
    let table = clean_run(&["platforms"]);
    let doc: serde_json::Value =
        serde_json::from_str(&clean_run(&["platforms", "--format", "json"])).unwrap();
    for name in GENERIC {
        let p = Profile::load(name).unwrap();
        assert_eq!(p.name(), name);
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{table}"
        );
        assert!(
            doc["platforms"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == name),
            "{doc}"
        );
    }
}

/// Every value has a source, a held one says why, and nothing is fitted: a fitted value would
/// claim a published row these profiles were never compared against.
#[test]
fn every_value_is_sourced_and_none_is_fitted() {
    for name in GENERIC {
        let p = Profile::load(name).unwrap();
        let params = p.params();
        assert!(params.len() > 40, "{name}: {}", params.len());
        for i in &params {
            let s = i.source.trim();
            assert!(!s.is_empty(), "{name}: {} has no source", i.key);
            match SourceKind::of(s) {
                SourceKind::Fitted => panic!("{name}: {} is fitted: {s}", i.key),
                SourceKind::Held => assert!(s.len() > 12, "{name}: {} held without why", i.key),
                _ => {}
            }
        }
        let cited = params
            .iter()
            .filter(|i| SourceKind::of(&i.source) == SourceKind::Cited)
            .count();
        assert!(cited >= 6, "{name}: only {cited} cited values");
    }
}

/// The server as the first user would try it: the kernel's benchmark through the SMMUv3,
/// one thread, one second.
#[test]
fn map_benchmark_runs_on_the_generic_server() {
    let out = clean_run(&[
        "map-benchmark",
        "-q",
        "--platform",
        "generic-arm64-smmuv3",
        "--iommu",
        "--coherent",
        "-t",
        "1",
        "-s",
        "1",
    ]);
    assert!(out.contains("average map latency(us):"), "{out}");
    assert!(out.contains("average unmap latency(us):"), "{out}");
    assert!(out.contains("smmu-v3"), "{out}");
}

/// The SoC with a shipped streaming scenario (dma-direct's maintenance for a non-coherent
/// device), and its MMU-500 with a shipped IOMMU scenario (a non-coherent walker's PTE cleans).
#[test]
fn shipped_scenarios_run_on_the_generic_soc() {
    let out = clean_run(&[
        "run",
        "batched-sync",
        "--platform",
        "generic-arm64-mmu500",
        "--format",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(doc.to_string().contains("generic-arm64-mmu500"));
    let out = clean_run(&["run", "iommu-ops", "--platform", "generic-arm64-mmu500"]);
    assert!(out.contains("mmu-500"), "{out}");
}
