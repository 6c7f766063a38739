//! A profile's `[numa]` topology: the built-in kunpeng920 loads with its sources, and every
//! malformed topology (a node out of range, a matrix that is not square, a device or SMMU on a
//! node without memory) exits 2 naming the file, the line and the key.

use std::process::{Command, Output};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("dmasim-numa-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const KUNPENG: &str = include_str!("../profiles/kunpeng920.toml");
const BATCHED: &str = include_str!("../scenarios/batched-sync.toml");

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle")
        + 1
}

/// Exit 2, one line naming `file:line` and `key`, no panic.
fn input_error(o: &Output, file: &str, line: usize, key: &str) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{e}");
    let at = format!("{file}:{line}: key `{key}`");
    assert!(e.contains(&at), "want `{at}` in: {e}");
    assert!(!e.contains("panicked") && !e.contains("serde"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

/// Run the seed-000 scenario on a profile file (the profile is checked before anything runs).
fn run_on(t: &Scratch, profile: &str, scenario: &str) -> (Output, String) {
    let p = t.file("p.toml", profile);
    // The scenario names the profile (a path relative to the scenario), so every check of the
    // scenario against the platform runs against this one.
    let scenario = scenario.replace("platform = \"dimensity9500\"", "platform = \"p.toml\"");
    let s = t.file("s.toml", &scenario);
    (dmasim(&["run", &s]), p)
}

#[test]
fn the_kunpeng920_topology_loads_with_its_sources() {
    let p = dmasim::platform::Profile::load("kunpeng920").unwrap();
    let t = p.numa.as_ref().expect("kunpeng920 has a topology");
    assert_eq!(t.nodes.len(), 4);
    assert_eq!(t.distance(0, 2), 20);
    assert_eq!(t.distance(1, 3), 24);
    assert_eq!(t.nodes[2].cpus.len(), 32);
    assert_eq!(
        t.first_of(dmasim::platform::numa::InitiatorKind::Smmu)
            .unwrap()
            .node,
        2
    );
    // The node holding 0..4 GiB is node 0: the default CMA area's limit lies inside it.
    assert_eq!(t.nodes[0].mem_base, 0);
    let params = p.params();
    for key in ["numa.distance", "numa.latency_ns", "numa.node[3]"] {
        let i = params
            .iter()
            .find(|i| i.key == key)
            .unwrap_or_else(|| panic!("{key}"));
        assert!(!i.source.trim().is_empty(), "{key}");
    }
    assert!(
        params.iter().any(
            |i| i.key == "numa.initiator.smmu-socket1" && i.value.starts_with("smmu on node 2")
        )
    );
    // Profiles without [numa] have none.
    assert!(
        dmasim::platform::Profile::load("sm8150")
            .unwrap()
            .numa
            .is_none()
    );
}

#[test]
fn an_initiator_on_a_node_out_of_range_is_bad_input() {
    let t = Scratch::new("range");
    let text = KUNPENG.replace("node = 2\n", "node = 7\n");
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(&o, &p, line_of(&text, "node = 7"), "numa.initiator[0].node");
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn a_matrix_that_is_not_square_is_bad_input() {
    let t = Scratch::new("square");
    // A row short of one node.
    let text = KUNPENG.replace(
        "[20, 22, 10, 12], [22, 24, 12, 10]]\nsource = \"SLIT",
        "[20, 22, 10], [22, 24, 12, 10]]\nsource = \"SLIT",
    );
    assert_ne!(text, KUNPENG);
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(
        &o,
        &p,
        line_of(&text, "[20, 22, 10], "),
        "numa.distance.value[2]",
    );
    assert!(e.contains("not square"), "{e}");
    // Three rows for four nodes.
    let text = KUNPENG.replace(
        "value = [[100, 120, 200, 220], [120, 100, 220, 240], ",
        "value = [[100, 120, 200, 220], ",
    );
    assert_ne!(text, KUNPENG);
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(
        &o,
        &p,
        line_of(&text, "value = [[100, 120"),
        "numa.latency_ns.value",
    );
    assert!(e.contains("3 rows for 4 nodes"), "{e}");
    // A SLIT whose diagonal is not 10.
    let text = KUNPENG.replace("[[10, 12, 20, 22]", "[[11, 12, 20, 22]");
    let (o, p) = run_on(&t, &text, BATCHED);
    input_error(
        &o,
        &p,
        line_of(&text, "[[11, 12"),
        "numa.distance.value[0][0]",
    );
}

#[test]
fn a_line_ns_matrix_that_is_not_square_or_negative_is_bad_input() {
    let t = Scratch::new("line");
    let text = KUNPENG.replace(
        "[115.6, 115.6, 34, 80], [115.6, 115.6, 80, 34]]",
        "[115.6, 115.6, 34], [115.6, 115.6, 80, 34]]",
    );
    assert_ne!(text, KUNPENG);
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(
        &o,
        &p,
        line_of(&text, "[115.6, 115.6, 34], "),
        "numa.line_ns.value[2]",
    );
    assert!(e.contains("not square"), "{e}");
    let text = KUNPENG.replace("value = [[34, 80,", "value = [[-34, 80,");
    assert_ne!(text, KUNPENG);
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(
        &o,
        &p,
        line_of(&text, "[[-34, 80,"),
        "numa.line_ns.value[0][0]",
    );
    assert!(e.contains("non-negative"), "{e}");
}

#[test]
fn a_device_on_a_node_without_memory_is_bad_input() {
    let t = Scratch::new("memless");
    // Node 2 without memory: the SMMU the profile puts there is refused.
    let text = KUNPENG.replacen(
        "memory_base = \"128G\"\nmemory_size = \"64G\"",
        "memory_base = \"128G\"\nmemory_size = \"0\"",
        1,
    );
    assert_ne!(text, KUNPENG);
    let (o, p) = run_on(&t, &text, BATCHED);
    let e = input_error(&o, &p, line_of(&text, "node = 2"), "numa.initiator[0].node");
    assert!(e.contains("no memory"), "{e}");
    // Node 1 without memory, and the scenario's device on it.
    let text = KUNPENG.replacen(
        "memory_base = \"64G\"\nmemory_size = \"64G\"",
        "memory_base = \"64G\"\nmemory_size = \"0\"",
        1,
    );
    assert_ne!(text, KUNPENG);
    let scen = BATCHED.replace("dma_mask_bits = 64", "dma_mask_bits = 64\nnuma_node = 1");
    let (o, _) = run_on(&t, &text, &scen);
    let s = t.0.join("s.toml").to_string_lossy().into_owned();
    let e = input_error(&o, &s, line_of(&scen, "numa_node"), "device.numa_node");
    assert!(e.contains("no memory"), "{e}");
    // A node the topology does not have.
    let scen = BATCHED.replace("dma_mask_bits = 64", "dma_mask_bits = 64\nnuma_node = 4");
    let (o, _) = run_on(&t, KUNPENG, &scen);
    let e = input_error(&o, &s, line_of(&scen, "numa_node"), "device.numa_node");
    assert!(e.contains("out of range"), "{e}");
}

#[test]
fn a_profile_without_numa_runs_as_before() {
    // The seed-000 scenario on its own platform: one node, as tests/reproduce_figures.rs pins.
    let o = dmasim(&["run", "scenarios/batched-sync.toml", "--format", "json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
