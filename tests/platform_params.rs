//! `dmasim platforms NAME`: every parameter a profile gives, with its value, unit, kind and
//! source, for a built-in name or a file, as a table and as JSON; a bad name exits 2 with one
//! line; and the hint `--set` gives for an unknown key names this command.

use dmasim::platform::{Profile, SourceKind, builtin_names};
use std::process::{Command, Output};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
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

const KINDS: [&str; 3] = ["fitted", "held", "sourced"];

/// Each built-in profile's parameters, from the registry (`Profile::params`), are what the JSON
/// lists, each with a kind its source decides and a source that is not empty; the table has a
/// row per key with the same kind.
#[test]
fn every_builtin_lists_each_parameter_with_a_kind_and_a_source() {
    for name in builtin_names() {
        let profile = Profile::load(name).unwrap();
        let expected = profile.params();
        let doc: serde_json::Value =
            serde_json::from_str(&ok(&["platforms", name, "--format", "json"])).unwrap();
        assert_eq!(doc["platform"], name);
        assert!(doc["format_version"].is_u64(), "{name}");
        let params = doc["params"].as_array().expect("params");
        assert_eq!(params.len(), expected.len(), "{name}");
        let table = ok(&["platforms", name]);
        for (row, info) in params.iter().zip(&expected) {
            let (key, kind) = (row["key"].as_str().unwrap(), row["kind"].as_str().unwrap());
            let source = row["source"].as_str().unwrap();
            assert_eq!(key, info.key, "{name}");
            assert!(!source.trim().is_empty(), "{name}: {key} has no source");
            assert!(KINDS.contains(&kind), "{name}: {key}: kind {kind}");
            let want = match SourceKind::of(source) {
                SourceKind::Fitted => "fitted",
                SourceKind::Held => "held",
                _ => "sourced",
            };
            assert_eq!(kind, want, "{name}: {key}: {source}");
            assert!(
                row["value"].as_str().is_some_and(|v| !v.is_empty()),
                "{key}"
            );
            assert!(row["unit"].is_string(), "{name}: {key}");
            let line = table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(key))
                .unwrap_or_else(|| panic!("{name}: no table row for {key}"));
            assert!(line.contains(&format!(" {kind} ")), "{line}");
        }
        let total = format!("\n{} parameters: ", expected.len());
        assert!(table.contains(&total), "{name}: {table}");
    }
}

/// A cost shows its number and the unit the file writes it in, in their own columns.
#[test]
fn a_cost_shows_its_number_and_unit_apart() {
    let doc: serde_json::Value =
        serde_json::from_str(&ok(&["platforms", "sm8150", "--format", "json"])).unwrap();
    let row = |key: &str| {
        doc["params"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == key)
            .unwrap_or_else(|| panic!("{key}"))
            .clone()
    };
    let r = row("smmu.mmio_read");
    assert_eq!((&r["value"], &r["unit"]), (&"250".into(), &"ns".into()));
    let r = row("barrier.cost");
    assert_eq!((&r["value"], &r["unit"]), (&"10".into(), &"cycles".into()));
    let r = row("smmu.coherent_walk");
    assert_eq!((&r["value"], &r["unit"]), (&"false".into(), &"".into()));
    assert_eq!(row("smmu.mmio_write")["kind"], "fitted");
}

/// A profile file is listed as a built-in one is, under its path.
#[test]
fn a_profile_file_lists_its_parameters() {
    let dir = std::env::temp_dir().join(format!("dmasim-platform-params-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mine.toml");
    let text = Profile::load("dimensity9500")
        .unwrap()
        .text
        .replace("name = \"dimensity9500\"", "name = \"mine\"");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let table = ok(&["platforms", path]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(table.starts_with("mine: "), "{table}");
    assert!(table.lines().nth(1) == Some(path), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("cache.clean.latency ") && l.contains(" fitted ")),
        "{table}"
    );
}

/// A name that is neither built in nor a file, or a file that does not parse, is one line on
/// standard error and exit 2; nothing on standard output.
#[test]
fn a_bad_name_exits_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("dmasim-platform-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[platform]\nname = \"x\"\ncpu_freq_mhz = 5\n").unwrap();
    for (arg, needle) in [
        ("no-such-platform", "unknown platform `no-such-platform`"),
        (bad.to_str().unwrap(), "bad.toml:3"),
    ] {
        for format in ["table", "json"] {
            let o = dmasim(&["platforms", arg, "--format", format]);
            let e = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{arg}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
            assert!(e.contains(needle), "{e}");
            assert!(o.stdout.is_empty(), "{arg}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--set platform.KEY` on a key the profile lacks names the command that lists the keys it
/// has, and that command does list them.
#[test]
fn the_set_hint_names_a_command_that_lists_the_keys() {
    let o = dmasim(&["run", "batched-sync", "--set", "platform.cache.nope=1ns"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    let hint = e
        .split('`')
        .find(|s| s.starts_with("dmasim platforms "))
        .unwrap_or_else(|| panic!("{e}"));
    let args: Vec<&str> = hint.split_whitespace().skip(1).collect();
    let table = ok(&args);
    assert!(
        table.lines().any(|l| l.starts_with("cache.clean.latency ")),
        "{table}"
    );
}
