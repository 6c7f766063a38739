//! IOMMU workloads on many CPUs: each CPU does the workload's work at IOVAs and on pages of its
//! own, on the one domain, page table and SMMU; the figures sum the CPUs; what the CPUs share
//! makes them wait, as each release shares it; bad CPU counts exit 2 naming the key.

use dmasim::hw::Counter;
use dmasim::scenario::iommu::{IommuRunResult, json};
use dmasim::scenario::{Outcome, Scenario, execute};
use std::process::Command;

fn scenario(platform: &str, kernel: &str, workload: &str) -> Scenario {
    let text = format!(
        "[scenario]\nname = \"cpus\"\nplatform = \"{platform}\"\nkernel = \"{kernel}\"\n\
         [iommu]\ngranule = \"4K\"\nias = 48\n[workload]\n{workload}"
    );
    Scenario::parse("cpus.toml", &text, std::path::Path::new(".")).unwrap()
}

fn run(s: &Scenario) -> IommuRunResult {
    match execute(s).unwrap() {
        Outcome::IommuSweep(r) | Outcome::IommuOps(r) => r,
        _ => panic!("an IOMMU result"),
    }
}

fn sweep(cpus: u32) -> String {
    format!("kind = \"iommu_sweep\"\niterations = 20\nsizes = [\"4K\", \"64K\"]\ncpus = {cpus}\n")
}

/// A map at an allocated IOVA and its unmap, on `cpus` CPUs.
fn map_unmap(cpus: u32) -> String {
    format!(
        "kind = \"iommu_ops\"\niterations = 100\ncpus = {cpus}\n\
         [[workload.op]]\nop = \"map\"\nname = \"buf\"\niova = \"alloc\"\nsize = \"4K\"\n\
         [[workload.op]]\nop = \"unmap\"\nof = \"buf\"\n"
    )
}

/// Four CPUs sweeping on sm8150's MMU-500: nothing refused (each CPU's fixed IOVA is a GiB
/// above the previous one's), four times the calls, the same operations per call as one CPU,
/// CPU 0 at the IOVA the scenario gives, and `cb_lock`'s line moving between the CPUs as each
/// takes it for its TLB sync.
#[test]
fn each_cpu_sweeps_at_its_own_iova_and_the_figures_sum_them() {
    let one = run(&scenario("sm8150", "5.15", &sweep(1)));
    let four = run(&scenario("sm8150", "5.15", &sweep(4)));
    assert_eq!(one.ops.len(), four.ops.len());
    for (a, b) in one.ops.iter().zip(&four.ops) {
        assert_eq!(b.errors, 0, "{}: {:?}", b.label, b.first_error);
        assert_eq!(b.calls, 4 * a.calls, "{}", b.label);
        assert_eq!(b.iova, 1 << 30, "{}: CPU 0's IOVA", b.label);
        for c in [
            Counter::SmmuTlbival,
            Counter::PgtableMapCall,
            Counter::PgtableUnmapCall,
        ] {
            assert_eq!(a.per_call(c), b.per_call(c), "{} {c:?}", b.label);
        }
    }
    assert!(
        four.stacks.iter().any(|s| s
            .stack
            .ends_with("arm_smmu_tlb_sync_context > (line from another CPU's cache)")),
        "cb_lock's line moves between the CPUs"
    );
    assert!(
        !one.stacks.iter().any(|s| s.stack.contains("another CPU")),
        "one CPU never waits on another"
    );
}

/// Sixteen CPUs mapping and unmapping through kunpeng920's SMMUv3: under 5.3 they spend most
/// of their time spinning on `cmdq->lock`, and each unmap takes longer than one CPU's; 5.4's
/// lock-free queue has no such lock and its unmaps are faster.
#[test]
fn sixteen_cpus_meet_at_the_command_queue_as_each_release_has_it() {
    let unmap_ns = |r: &IommuRunResult| r.op("op[1] unmap buf").unwrap().mean_ns();
    let alone = run(&scenario("kunpeng920", "5.3", &map_unmap(1)));
    let old = run(&scenario("kunpeng920", "5.3", &map_unmap(16)));
    let new = run(&scenario("kunpeng920", "5.4", &map_unmap(16)));
    let spun = |r: &IommuRunResult| -> u64 {
        r.stacks
            .iter()
            .filter(|s| s.stack.ends_with("(spinning on cmdq->lock)"))
            .map(|s| s.self_ps)
            .sum()
    };
    assert!(
        spun(&old) * 2 > old.total_ps,
        "5.3: cmdq->lock is most of the time"
    );
    assert_eq!(spun(&new), 0, "5.4 has no command-queue spinlock");
    assert!(unmap_ns(&old) > 2.0 * unmap_ns(&alone));
    assert!(unmap_ns(&new) < unmap_ns(&old));
    for r in [&old, &new] {
        assert!(r.ops.iter().all(|o| o.errors == 0 && o.calls == 1600));
    }
}

/// The same sixteen CPUs give the same document twice.
#[test]
fn sixteen_cpus_give_the_same_bytes_twice() {
    let s = scenario("kunpeng920", "5.4", &map_unmap(16));
    assert_eq!(json(&run(&s)), json(&run(&s)));
}

/// More CPUs than the platform has, a CPU whose fixed IOVAs would leave the input address
/// space, and no CPUs at all: each exits 2 naming `workload.cpus` and its line.
#[test]
fn bad_cpu_counts_exit_2_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("dmasim-iommu-cpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, ias, cpus, says) in [
        ("too-many", 48, 9, "9 CPUs, and platform `sm8150` has 8"),
        ("past-ias", 32, 4, "outside the 32-bit input address space"),
        ("none", 48, 0, "workload.cpus"),
    ] {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(
            &path,
            format!(
                "[scenario]\nname = \"{name}\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\
                 [iommu]\ngranule = \"4K\"\nias = {ias}\n[workload]\n{}",
                sweep(cpus)
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_dmasim"))
            .arg("run")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(":12: key `workload.cpus`"), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every CPU's fixed mappings get page tables of their own: 128 kunpeng920 CPUs each mapping
/// ten 64 KB pages half a GiB apart (a 64 KB leaf table each) find table memory for all of
/// them, as one CPU does.
#[test]
fn each_cpus_own_tables_fit() {
    let ops: String = (0..10)
        .map(|i| {
            format!(
                "[[workload.op]]\nop = \"map\"\nname = \"m{i}\"\niova = \"{:#x}\"\nsize = \"64K\"\n",
                (1u64 << 30) + i * (512 << 20)
            )
        })
        .collect();
    let text = format!(
        "[scenario]\nname = \"tables\"\nplatform = \"kunpeng920\"\nkernel = \"5.4\"\n\
         [iommu]\ngranule = \"64K\"\nias = 48\n[workload]\nkind = \"iommu_ops\"\n\
         iterations = 1\ncpus = 128\n{ops}"
    );
    let r = run(&Scenario::parse("tables.toml", &text, std::path::Path::new(".")).unwrap());
    for o in &r.ops {
        assert_eq!(
            (o.calls, o.errors),
            (128, 0),
            "{}: {:?}",
            o.label,
            o.first_error
        );
    }
}

/// The other CPUs' copies of a fixed IOVA are kept out of the allocator: on a 32-bit space,
/// four CPUs each mapping a fixed page just below 1 GiB (the last CPU's copy is the space's top
/// page) and a page from the allocator never collide, as one CPU does not.
#[test]
fn the_allocator_keeps_out_of_the_other_cpus_fixed_ranges() {
    let text = "[scenario]\nname = \"apart\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\
         [iommu]\ngranule = \"4K\"\nias = 32\n[workload]\nkind = \"iommu_ops\"\n\
         iterations = 3\ncpus = 4\n\
         [[workload.op]]\nop = \"map\"\nname = \"fixed\"\niova = \"0x3ffff000\"\nsize = \"4K\"\n\
         [[workload.op]]\nop = \"map\"\nname = \"buf\"\niova = \"alloc\"\nsize = \"4K\"\n\
         [[workload.op]]\nop = \"unmap\"\nof = \"buf\"\n\
         [[workload.op]]\nop = \"unmap\"\nof = \"fixed\"\n";
    let r = run(&Scenario::parse("apart.toml", text, std::path::Path::new(".")).unwrap());
    for o in &r.ops {
        assert_eq!(
            (o.calls, o.errors),
            (12, 0),
            "{}: {:?}",
            o.label,
            o.first_error
        );
    }
}
