//! Output snapshots: the human tables must not change by accident (review a diff with
//! `cargo insta review`, or rerun with INSTA_UPDATE=always after an intended change).

use std::process::Command;

fn dmasim(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn reproduce_batched_sync_table() {
    insta::assert_snapshot!(dmasim(&["reproduce", "batched-sync"]));
}

#[test]
fn run_table_per_entry() {
    insta::assert_snapshot!(dmasim(&[
        "run",
        "scenarios/batched-sync.toml",
        "--kernel",
        "7.0"
    ]));
}
