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

/// Every `stack` in a document is an array of frame names, and no string anywhere (value or key)
/// is a stack joined with " > ".
fn check_stacks(what: &str, v: &serde_json::Value) -> usize {
    let mut n = 0;
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                assert!(!k.contains(" > "), "{what}: key `{k}`");
                if k == "stack" {
                    let frames = x.as_array().unwrap_or_else(|| panic!("{what}: stack {x}"));
                    assert!(frames.iter().all(|f| f.is_string()), "{what}: {x}");
                    n += 1;
                }
                n += check_stacks(what, x);
            }
        }
        serde_json::Value::Array(a) => n += a.iter().map(|x| check_stacks(what, x)).sum::<usize>(),
        serde_json::Value::String(s) => assert!(!s.contains(" > "), "{what}: `{s}`"),
        _ => {}
    }
    n
}

#[test]
fn every_document_has_format_version_and_stacks_as_arrays() {
    let list: serde_json::Value =
        serde_json::from_str(&out(&["scenarios", "--format", "json"])).unwrap();
    let mut docs: Vec<(String, Vec<String>)> = list["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["name"].as_str().unwrap().to_string();
            (
                format!("run {name}"),
                vec![
                    "run".into(),
                    name,
                    "-q".into(),
                    "--format".into(),
                    "json".into(),
                ],
            )
        })
        .collect();
    for args in [
        &["reproduce", "--format", "json"][..],
        &[
            "compare",
            "batched-sync",
            "--kernel",
            "7.0",
            "--kernel",
            "7.1",
            "--format",
            "json",
        ],
        &[
            "run",
            "batched-sync",
            "--sweep",
            "workload.entry=4K,64K",
            "--format",
            "json",
        ],
        &["costs", "--format", "json"],
        &["scenarios", "--format", "json"],
        &["platforms", "--format", "json"],
        &["policies", "--format", "json"],
    ] {
        docs.push((args.join(" "), args.iter().map(|s| s.to_string()).collect()));
    }
    let mut stacks = 0;
    for (what, args) in &docs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v: serde_json::Value = serde_json::from_str(&out(&args)).unwrap();
        assert!(v["format_version"].is_u64(), "{what}: no format_version");
        stacks += check_stacks(what, &v);
    }
    assert!(stacks > 100, "{stacks} stacks checked");
}

/// An IOMMU run's document says what domain it ran on: type, format, levels, address sizes and
/// the page sizes the format allows, as io-pgtable-arm works them out (4K granule, 48-bit IOVA:
/// 4 levels from 0, 4K/2M/1G; 64K granule, 36-bit IOVA: DIV_ROUND_UP(36 - 16, 13) = 2 levels
/// from level 2, a 2^(20 - 13) entry top table of 1 KiB, 64K pages and 512M blocks).
#[test]
fn the_iommu_document_describes_its_domain() {
    let doc = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["run", "smmu-walk-flush", "-q", "--format", "json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&out(&args)).unwrap()
    };
    let d = doc(&[]);
    let i = &d["iommu"];
    assert_eq!(i["domain_type"], "IOMMU_DOMAIN_UNMANAGED");
    assert_eq!(i["format"], "ARM_64_LPAE_S1");
    assert_eq!(
        (i["granule"].as_u64(), i["ias"].as_u64(), i["oas"].as_u64()),
        (Some(4096), Some(48), Some(48))
    );
    assert_eq!(
        (i["levels"].as_u64(), i["start_level"].as_u64()),
        (Some(4), Some(0))
    );
    assert_eq!(
        i["page_sizes"],
        serde_json::json!([4096, 2 << 20, 1u64 << 30])
    );
    assert_eq!(i["pgsize_bitmap"], "0x40201000");
    assert_eq!(i["pgd_bytes"], 4096);
    let d = doc(&[
        "--set",
        "iommu.granule=64K",
        "--set",
        "iommu.ias=36",
        "--set",
        "workload.sizes=[\"64K\"]",
        "--set",
        "workload.element=64K",
    ]);
    let i = &d["iommu"];
    assert_eq!(
        (i["levels"].as_u64(), i["start_level"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(i["page_sizes"], serde_json::json!([65536, 512u64 << 20]));
    assert_eq!(i["pgd_bytes"], 1024);
}
