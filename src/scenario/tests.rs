//! The scenario file's own tests: parsing, errors naming key and line, the built-in list.

use super::*;

pub(crate) const GOOD: &str = r#"
[scenario]
name = "t"
platform = "dimensity9500"
kernel = "7.0"
policy = { sync = "batched" }

[device]
name = "dev"
coherent = false
dma_mask_bits = 64

[workload]
kind = "streaming"
buffer = "1M"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 3
"#;

fn parse(text: &str) -> Result<Scenario, InputError> {
    Scenario::parse("s.toml", text, std::path::Path::new("."))
}

#[test]
fn good_scenario_parses_and_overrides_apply() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.policies.kernel, KernelVersion(7, 0));
    assert_eq!(s.policies.sync, crate::dma::sync_policy::SyncKind::Batched);
    let w = s.streaming().unwrap();
    assert_eq!(w.buffer_bytes, 1 << 20);
    assert_eq!(w.entry_bytes, vec![4096]);
}

#[test]
fn errors_name_key_and_line() {
    let cases = [
        (
            "buffer = \"1M\"",
            "buffer = \"1 furlong\"",
            "workload.buffer",
            15,
        ),
        (
            "direction = \"bidirectional\"",
            "direction = \"up\"",
            "workload.direction",
            17,
        ),
        (
            "calls = \"map_sg+unmap_sg\"",
            "calls = \"dance\"",
            "workload.calls",
            18,
        ),
        (
            "iterations = 3",
            "iterations = -3",
            "workload.iterations",
            19,
        ),
        (
            "dma_mask_bits = 64",
            "dma_mask_bits = 99",
            "device.dma_mask_bits",
            11,
        ),
        (
            "policy = { sync = \"batched\" }",
            "policy = { sync = \"never\" }",
            "scenario.policy.sync",
            6,
        ),
        (
            "platform = \"dimensity9500\"",
            "platform = \"nosuch\"",
            "scenario.platform",
            4,
        ),
        (
            "kernel = \"7.0\"",
            "kernel = \"seven\"",
            "scenario.kernel",
            5,
        ),
        (
            "entry = \"4K\"",
            "entry = \"4K\"\ncolour = \"red\"",
            "workload.colour",
            17,
        ),
    ];
    for (from, to, key, line) in cases {
        let e = parse(&GOOD.replace(from, to)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
        assert_eq!(e.line, Some(line), "{to}: {e}");
    }
    let e = parse(&GOOD.replace(
        "iterations = 3",
        "iterations = 3\nattrs = [\"weak_ordering\"]",
    ))
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.attrs"), "{e}");
    assert_eq!(e.line, Some(20), "{e}");
    let e = parse(&GOOD.replace("iterations = 3\n", "")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.iterations"), "{e}");
    assert!(e.line.is_some(), "{e}");
}

const FORWARDING: &str = r#"
[scenario]
name = "f"
platform = "x86-2012-ixgbe"
kernel = "3.6"

[device]
name = "ixgbe"
coherent = true
dma_mask_bits = 64

[workload]
kind = "forwarding"
packets = 10
"#;

#[test]
fn forwarding_defaults_come_from_ixgbe_and_the_profile() {
    let s = parse(FORWARDING).unwrap();
    let Workload::Forwarding(f) = &s.workload else {
        panic!("forwarding")
    };
    assert_eq!(
        (f.packets, f.packet_bytes, f.rx_ring, f.rx_reuse_percent),
        (10, 60, 512, 100)
    );
    assert_eq!(Some(f.cpus), s.profile.cpus);
    assert_eq!(s.swiotlb, SwiotlbSpec::default());
    let s = parse(&format!(
        "{FORWARDING}cpus = 2\n[swiotlb]\nsize = \"1M\"\nforce = true\n"
    ))
    .unwrap();
    assert_eq!(s.swiotlb.size, 1 << 20);
    assert!(s.swiotlb.force);
    let Workload::Forwarding(f) = &s.workload else {
        panic!("forwarding")
    };
    assert_eq!(f.cpus, 2);
}

#[test]
fn forwarding_errors_name_key_and_line() {
    for (extra, key, line) in [
        ("cpus = 0\n", "workload.cpus", 15),
        ("iterations = 3\n", "workload.iterations", 15),
        ("[swiotlb]\nsize = \"300K\"\n", "swiotlb.size", 16),
        ("[swiotlb]\nareas = 2\n", "swiotlb.areas", 16),
    ] {
        let e = parse(&format!("{FORWARDING}{extra}")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{extra}: {e}");
        assert_eq!(e.line, Some(line), "{extra}: {e}");
    }
    let e = parse(&FORWARDING.replace("packets = 10\n", "")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.packets"), "{e}");
}

#[test]
fn every_shipped_scenario_is_built_in_under_its_file_name() {
    let mut files: Vec<String> = std::fs::read_dir("scenarios")
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".toml").map(str::to_string)
        })
        .collect();
    files.sort();
    let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, files);
    for (name, text) in BUILTIN {
        let on_disk = std::fs::read_to_string(format!("scenarios/{name}.toml")).unwrap();
        assert_eq!(*text, on_disk, "{name}");
    }
}

#[test]
fn a_shipped_scenario_loads_by_name_and_a_file_of_that_name_wins() {
    let s = Scenario::load("batched-sync").unwrap();
    assert_eq!(s.name, "batched-sync");
    let info = builtin_list();
    let b = info.iter().find(|i| i.name == "batched-sync").unwrap();
    assert_eq!(
        (b.kind.as_str(), b.platform.as_str()),
        ("streaming", "dimensity9500")
    );
    assert!(b.description.ends_with('.'), "{}", b.description);
    let e = Scenario::load("no-such-scenario").unwrap_err();
    assert!(e.message.contains("batched-sync"), "{e}");
    // A path that exists is read as the file, never replaced by the built-in.
    let dir = std::env::temp_dir().join(format!("dmasim-builtin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("batched-sync");
    std::fs::write(&f, "not toml [").unwrap();
    let r = Scenario::load(&f.to_string_lossy());
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(r.is_err());
}

/// A runner's failure is classed by whose it is: the modelled kernel's refusal at setup, or a
/// bug of dmasim's (a deadlock of the many-CPU engine, sharing the checks should have refused).
#[test]
fn run_failures_are_classed_by_whose_they_are() {
    use crate::mm::physmem::PhysMemError;
    let deadlock = RunFailure::from(crate::smp::Deadlock(vec![0, 1])).in_file("s.toml");
    assert!(
        matches!(&deadlock, RunError::Internal(i) if matches!(i.cause, Bug::Deadlock(_))),
        "{deadlock:?}"
    );
    let not_shared = RunFailure::from(Bug::NotShared {
        what: "arm_dma_ops",
    })
    .in_file("s.toml");
    assert!(
        matches!(not_shared, RunError::Internal(_)),
        "{not_shared:?}"
    );
    let refused =
        RunFailure::from(SetupError::Buffer(PhysMemError::NoSuchNode(1))).in_file("s.toml");
    assert!(matches!(refused, RunError::Refused(_)), "{refused:?}");
}
