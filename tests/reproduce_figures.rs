//! The net under refactoring: `dmasim reproduce` must print, for every row of every experiment,
//! exactly the model figure (and per-row operation detail) recorded in
//! `tests/data/reproduce-figures.json`. A change that moves a figure on purpose (a fidelity fix)
//! updates that file in the same commit and says why.

use std::collections::BTreeMap;
use std::process::Command;

#[test]
fn reproduce_prints_the_recorded_figures() {
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(["reproduce", "--format", "json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut got = BTreeMap::new();
    for e in doc["experiments"].as_array().expect("experiments") {
        for r in e["rows"].as_array().expect("rows") {
            let id = r["id"].as_str().expect("id").to_string();
            let detail = r.get("detail").cloned().unwrap_or(serde_json::Value::Null);
            got.insert(id, (r["model"].clone(), detail));
        }
    }
    let recorded: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(include_str!("data/reproduce-figures.json")).unwrap();
    let missing: Vec<&String> = recorded.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !recorded.contains_key(*k)).collect();
    assert!(missing.is_empty(), "rows no longer printed: {missing:?}");
    assert!(extra.is_empty(), "rows not recorded: {extra:?}");
    for (id, want) in &recorded {
        let (model, detail) = &got[id];
        assert_eq!(model, &want["model"], "{id}: model figure moved");
        assert_eq!(detail, &want["detail"], "{id}: operation detail moved");
    }
}
