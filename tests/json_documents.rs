//! `platforms` and `policies` speak JSON too: each document carries `format_version`, and what it
//! says is what the table says.

use std::process::Command;

fn out(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs");
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("utf-8")
}

#[test]
fn platforms_json_lists_what_the_table_lists() {
    let table = out(&["platforms"]);
    let doc: serde_json::Value =
        serde_json::from_str(&out(&["platforms", "--format", "json"])).unwrap();
    assert!(doc["format_version"].is_u64());
    let list = doc["platforms"].as_array().expect("platforms");
    assert_eq!(list.len(), table.lines().count());
    for p in list {
        let name = p["name"].as_str().expect("name");
        assert!(table.lines().any(|l| l.starts_with(name)), "{name}");
    }
}

#[test]
fn policies_json_gives_each_presets_per_release_as_the_table_does() {
    for platform in ["sm8150", "zynq7000", "x86-2012-ixgbe"] {
        let table = out(&["policies", "--platform", platform]);
        let doc: serde_json::Value = serde_json::from_str(&out(&[
            "policies",
            "--platform",
            platform,
            "--format",
            "json",
        ]))
        .unwrap();
        assert!(doc["format_version"].is_u64());
        assert_eq!(doc["platform"], platform);
        for p in doc["policies"].as_array().expect("policies") {
            let key = p["key"].as_str().expect("key");
            let row = table
                .lines()
                .find(|l| l.split_whitespace().next() == Some(key))
                .unwrap_or_else(|| panic!("{platform}: no row for {key}"));
            let cells: Vec<&str> = row.split_whitespace().skip(1).collect();
            let presets = p["presets"].as_object().expect("presets");
            assert_eq!(cells.len(), presets.len(), "{platform} {key}");
            for (cell, v) in cells.iter().zip(presets.values()) {
                assert_eq!(*cell, v.as_str().unwrap_or("-"), "{platform} {key}");
            }
        }
    }
    let z: serde_json::Value = serde_json::from_str(&out(&[
        "policies",
        "--platform",
        "zynq7000",
        "--format",
        "json",
    ]))
    .unwrap();
    let outer = z["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == "outer_range")
        .expect("outer_range");
    assert_eq!(outer["presets"]["3.15"], "l2x0");
    assert_eq!(outer["presets"]["3.16"], "l2c210");
}
