//! Every run table keeps one unit per column: a column of times names its unit in its header
//! (`mean (µs)`), and no cell beneath carries a unit of its own.

use std::process::Command;

fn out(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs");
    assert!(o.status.success(), "{args:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// A cell that is a number followed by a time unit, as tables printed before every column had one.
fn timed_cell(line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(2).find_map(|w| {
        (w[0].parse::<f64>().is_ok() && ["ns", "µs", "ms", "s"].contains(&w[1]))
            .then(|| format!("{} {}", w[0], w[1]))
    })
}

#[test]
fn every_run_table_has_one_unit_per_column() {
    let list = out(&["scenarios"]);
    let mut headers = 0;
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let table = out(&["run", name, "-q"]);
        let mut in_table = false;
        for line in table.lines() {
            if line.trim().is_empty() {
                in_table = false;
                continue;
            }
            if [" (ns)", " (µs)", " (ms)", " (s)"]
                .iter()
                .any(|u| line.contains(u))
            {
                in_table = true;
                headers += 1;
                continue;
            }
            if in_table {
                assert!(timed_cell(line).is_none(), "{name}: `{line}`");
            }
        }
        // The call and stack columns of the common kinds.
        if table.contains("time by call stack") {
            assert!(table.contains("time ("), "{name}:\n{table}");
        }
    }
    assert!(headers >= 20, "{headers} time columns");
}
