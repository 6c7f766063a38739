//! A profile `dmasim calibrate` writes on this host runs every shipped streaming scenario as
//! written: no section missing, no software cost left unpriced, and `--format json` carries the
//! same profile.

use std::path::Path;
use std::process::{Command, Output};

fn dmasim(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_calibrated_profile_runs_every_shipped_streaming_scenario_without_edits() {
    let dir = std::env::temp_dir().join(format!("dmasim-calibrated-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A short real measurement: 64 entries of 4 KiB, 3 passes per mode.
    let quick = ["--buffer", "256K", "--iterations", "3"];
    let o = dmasim(
        &dir,
        &[&["calibrate"][..], &quick, &["-o", "host.toml"]].concat(),
    );
    if o.status.code() == Some(2) && text(&o.stderr).contains("no user-space") {
        eprintln!("skipping: {}", text(&o.stderr));
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    assert!(o.status.success(), "{}", text(&o.stderr));
    let list: serde_json::Value =
        serde_json::from_slice(&dmasim(&dir, &["scenarios", "--format", "json"]).stdout).unwrap();
    assert!(list["format_version"].is_u64());
    let streaming: Vec<&str> = list["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "streaming")
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(streaming.len() >= 2, "{streaming:?}");
    for name in &streaming {
        let o = dmasim(&dir, &["run", name, "--platform", "host.toml"]);
        let err = text(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(!err.contains("warning"), "{name}: {err}");
        let table = text(&o.stdout);
        assert!(
            table.contains("platform   host (x86_64)") || table.contains("platform   host (arm64)"),
            "{table}"
        );
    }
    // The JSON document: the measurements per instruction and the same kind of profile.
    let o = dmasim(
        &dir,
        &[&["calibrate"][..], &quick, &["--format", "json"]].concat(),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["format_version"].is_u64());
    let runs = doc["runs"].as_array().unwrap();
    assert!(!runs.is_empty());
    for r in runs {
        assert!(
            r["measurements_ns"]["per_entry_ns"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        assert!(r["fit_ns"]["latency_ns"].is_f64(), "{r}");
    }
    let profile = doc["profile"].as_str().unwrap();
    assert!(profile.contains("[cache.clean_inval]"), "{profile}");
    std::fs::remove_dir_all(&dir).unwrap();
}
