//! Unit tests of the IOMMU workload kinds.

use super::*;

pub(crate) const SWEEP: &str = r#"
[scenario]
name = "t"
platform = "sm8150"
kernel = "5.14"

[iommu]
granule = "4K"
ias = 48
smmu = "mmu-500"

[workload]
kind = "iommu_sweep"
sizes = ["4K", "2M"]
element = "4K"
layout = "scattered"
iterations = 2
"#;

const OPS: &str = r#"
[scenario]
name = "ops"
platform = "sm8150"
kernel = "5.15"

[iommu]
granule = "4K"
ias = 48

[workload]
kind = "iommu_ops"
iterations = 2

[[workload.op]]
op = "map"
name = "a"
size = "4M"

[[workload.op]]
op = "map"
iova = "0x40000000"
size = "4M"
layout = "contiguous"

[[workload.op]]
op = "unmap"
iova = "0x40000000"
size = "4M"

[[workload.op]]
op = "unmap"
of = "a"
"#;

fn parse(text: &str) -> Result<Scenario, InputError> {
    Scenario::parse("s.toml", text, std::path::Path::new("."))
}

#[test]
fn sweep_parses_and_runs() {
    let s = parse(SWEEP).unwrap();
    let r = run(&s, &Progress::new()).unwrap();
    let u = r.op("unmap 2M").unwrap();
    assert_eq!(u.calls, 2);
    assert_eq!(u.per_call(Counter::SmmuTlbiva), 512.0);
    assert_eq!(
        r.op("unmap 4K").unwrap().per_call(Counter::SmmuTlbival),
        1.0
    );
    let stacks: u64 = r.stacks.iter().map(|s| s.self_ps).sum();
    assert_eq!(stacks, r.total_ps);
}

#[test]
fn ops_run_with_allocated_and_fixed_iovas() {
    let s = parse(OPS).unwrap();
    let r = run(&s, &Progress::new()).unwrap();
    assert_eq!(r.ops.len(), 4);
    // 4 MB contiguous and 2 MB aligned in IOVA and PA: two 2 MB blocks, one TLBIVAL each.
    let u = &r.ops[2];
    assert_eq!(u.per_call(Counter::SmmuTlbival), 2.0);
    assert_eq!(r.ops[1].per_call(Counter::PgtableMapCall), 1.0);
    // The allocated 4 MB is size-aligned: two tables, freed with one walk flush each.
    assert_eq!(r.ops[3].per_call(Counter::SmmuTlbiasid), 2.0);
    assert_eq!(r.ops[3].per_call(Counter::PgtableUnmapCall), 1.0);
}

#[test]
fn misuse_is_reported_with_the_result_and_the_run_goes_on() {
    // op[3] unmaps 0x40000000+4M twice over: op[2] already removed it, so each iteration's
    // op[3] finds a hole (the core WARNs and unmaps 0 bytes).
    let text = OPS.replace("of = \"a\"", "iova = \"0x40000000\"\nsize = \"4M\"");
    let r = run(&parse(&text).unwrap(), &Progress::new()).unwrap();
    assert_eq!((r.ops[3].calls, r.ops[3].errors), (2, 2));
    let first = r.ops[3].first_error.as_deref().unwrap();
    assert!(first.starts_with("iteration 0"), "{first}");
    // Mapping `a` is never unmapped now: its second map is reported as a leak, and runs.
    assert_eq!((r.ops[0].calls, r.ops[0].errors), (2, 1));
    assert!(r.ops[0].first_error.as_deref().unwrap().contains("leaked"));
    // The other operations ran every iteration, untouched.
    assert!(r.ops[1..3].iter().all(|o| o.calls == 2 && o.errors == 0));
    // Mapped at a fixed IOVA twice without unmapping: -EEXIST on the second iteration only.
    let text = OPS.replace("\n[[workload.op]]\nop = \"unmap\"\nof = \"a\"\n", "");
    let text = text.replacen("name = \"a\"\n", "name = \"a\"\niova = \"0x80000000\"\n", 1);
    let r = run(&parse(&text).unwrap(), &Progress::new()).unwrap();
    assert_eq!((r.ops[0].calls, r.ops[0].errors), (2, 1));
    let first = r.ops[0].first_error.as_deref().unwrap();
    assert!(first.starts_with("iteration 1"), "{first}");
}

#[test]
fn errors_name_key_and_line() {
    let cases = [
        (
            "sizes = [\"4K\", \"2M\"]",
            "sizes = [\"4K\", \"6000\"]",
            "workload.sizes",
            14,
        ),
        ("ias = 48", "ias = 52", "iommu.ias", 9),
        ("smmu = \"mmu-500\"", "smmu = \"mmu-600\"", "iommu.smmu", 10),
        (
            "smmu = \"mmu-500\"",
            "smmu = \"smmu-v3.2\"",
            "iommu.smmu",
            10,
        ),
        ("granule = \"4K\"", "granule = \"8K\"", "iommu.granule", 8),
        (
            "element = \"4K\"",
            "element = \"6K\"",
            "workload.element",
            15,
        ),
        (
            "layout = \"scattered\"",
            "layout = \"random\"",
            "workload.layout",
            16,
        ),
        (
            "iterations = 2",
            "iterations = 0",
            "workload.iterations",
            17,
        ),
        (
            "kernel = \"5.14\"",
            "kernel = \"5.14\"\npolicy = { walk_flush = \"range\" }",
            "scenario.policy.walk_flush",
            6,
        ),
        (
            "iterations = 2",
            "iterations = 2\niova = \"0x1001\"",
            "workload.iova",
            18,
        ),
    ];
    for (from, to, key, line) in cases {
        let e = parse(&SWEEP.replace(from, to)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
        assert_eq!(e.line, Some(line), "{to}: {e}");
    }
    let e = parse(
        &SWEEP
            .replace("ias = 48", "ias = 32")
            .replace("iterations = 2", "iterations = 2\niova = \"4G\""),
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.iova"), "{e}");
    let e = parse(&OPS.replace("of = \"a\"", "of = \"b\"")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.op[3].of"), "{e}");
    let e = parse(&OPS.replace("size = \"4M\"\nlayout", "size = \"4100\"\nlayout")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.op[1].size"), "{e}");
}
