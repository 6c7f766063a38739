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

/// `calibrate` says on standard error, as warnings, each cross-check that misses its
/// measurement by more than 10 % (and each fit held at 0), writes the profile all the same and
/// exits 0: every cross-check in the written header is warned of exactly when it misses.
#[test]
fn calibrate_warns_of_cross_checks_that_miss_and_still_writes_the_profile() {
    let dir = std::env::temp_dir().join(format!("dmasim-calwarn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = dmasim(
        &dir,
        &[
            "calibrate",
            "--buffer",
            "256K",
            "--iterations",
            "3",
            "-o",
            "host.toml",
        ],
    );
    if o.status.code() == Some(2) && text(&o.stderr).contains("no user-space") {
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    }
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    let profile = std::fs::read_to_string(dir.join("host.toml")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    for l in err.lines() {
        assert!(l.starts_with("warning: ") || l.starts_with("wrote "), "{l}");
    }
    // Each instruction's header: its measured one-line figure, then the Model's charge.
    let lines: Vec<&str> = profile.lines().collect();
    let mut checked = 0;
    for (i, l) in lines.iter().enumerate() {
        let Some(m) = l.split("one dirty line + barrier ").nth(1) else {
            continue;
        };
        let Ok(measured) = m.trim_end_matches('.').parse::<f64>() else {
            continue;
        };
        let name = lines[..i]
            .iter()
            .rev()
            .find_map(|h| {
                h.strip_prefix("# ")
                    .and_then(|h| h.split(": raw medians").next())
            })
            .unwrap();
        let model: f64 = lines[i + 1]
            .split("= ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let misses = ((model - measured) / measured).abs() > 0.10;
        let warned = err
            .lines()
            .any(|w| w.starts_with(&format!("warning: {name}: cross-check misses")));
        assert_eq!(
            misses, warned,
            "{name}: model {model}, measured {measured}\n{err}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no cross-check in the header:\n{profile}");
}
