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

/// A streaming workload's `rate` gives the share of one CPU its calls take at that rate: the
/// modelled time of one iteration times the iterations a second.
#[test]
fn a_rate_gives_the_cpu_share() {
    use dmasim::scenario::{Outcome, Scenario, execute};
    let text = include_str!("../scenarios/batched-sync.toml")
        .replace("iterations = 200", "iterations = 20\nrate = \"30/s\"");
    let s = Scenario::parse("b.toml", &text, std::path::Path::new(".")).unwrap();
    let Ok(Outcome::Streaming(r)) = execute(&s) else {
        panic!("a streaming result")
    };
    let per_it = r.total_ps as f64 / 20.0;
    let share = r.cpu_share().unwrap();
    assert!((share - per_it * 1e-12 * 30.0).abs() < 1e-12, "{share}");
    assert!(r.info.scenario == "batched-sync");
    let doc = Outcome::Streaming(r.clone()).json();
    assert_eq!(doc["workload"]["rate_per_s"], 30.0);
    assert!((doc["cpu_share"].as_f64().unwrap() - share).abs() < 1e-15);
    assert!(Outcome::Streaming(r).table().contains("% of one CPU"));
    for bad in ["0/s", "fast", "-3/s"] {
        let t = text.replace("rate = \"30/s\"", &format!("rate = \"{bad}\""));
        let e = Scenario::parse("b.toml", &t, std::path::Path::new(".")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.rate"), "{bad}: {e}");
    }
}

/// A run's header says which of the profile's costs were fitted and which held (assumed, not
/// fitted); the JSON head carries both lists.
#[test]
fn the_header_says_which_costs_were_fitted_and_which_held() {
    use dmasim::scenario::{Scenario, execute};
    let s = Scenario::parse(
        "b.toml",
        include_str!("../scenarios/batched-sync.toml"),
        std::path::Path::new("."),
    )
    .unwrap();
    let out = execute(&s).unwrap();
    let t = out.table();
    let line = t.lines().find(|l| l.starts_with("costs ")).unwrap();
    assert!(line.contains("fitted: cache.clean.latency"), "{line}");
    let held = line.split("held (assumed, not fitted): ").nth(1).unwrap();
    assert!(
        held.contains("barrier.cost") && !held.contains("cache.clean.latency"),
        "{line}"
    );
    let j = out.json();
    assert!(
        j["fitted_costs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "cache.clean.latency")
    );
    assert!(
        j["held_costs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == "barrier.cost")
    );
}
