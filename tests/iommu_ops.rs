//! `iommu_ops` scenarios say what the iommu core's API can: explicit physical addresses and sg
//! lists, `iommu_map`, `iommu_unmap_fast` + `iotlb_sync`, `iova_to_phys`, `prot`, sizes above
//! 4 GiB. Each operation's result is reported as the kernel gives it, refused ones included, and
//! the run goes on. The kernel's page-table rules per release: a block replaces a table that
//! still maps pages (every release; one walk flush), and a partial unmap of a block splits it up
//! to 6.12 and is refused from 6.13.

use dmasim::hw::Counter;
use dmasim::iommu::io_pgtable_arm::PgtableShape;
use dmasim::scenario::iommu::{IommuRunResult, OpStat};
use dmasim::scenario::{Outcome, Scenario, execute};

fn run(text: &str) -> IommuRunResult {
    let s = Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap();
    match execute(&s) {
        Ok(Outcome::IommuSweep(r) | Outcome::IommuOps(r)) => r,
        other => panic!("an IOMMU result, got {other:?}"),
    }
}

fn n(o: &OpStat, c: Counter) -> u64 {
    o.counts[c as usize]
}

fn ret(o: &OpStat) -> &str {
    o.returned.as_deref().unwrap_or("")
}

#[test]
fn the_shipped_api_scenario_runs_to_the_end_and_reports_each_result() {
    let r = run(include_str!("../scenarios/iommu-api.toml"));
    let returned: Vec<&str> = r.ops.iter().map(ret).collect();
    assert_eq!(
        returned,
        [
            "0",
            "0",
            "-EEXIST",
            "0x880200123",
            "0",
            "0x117ffffff0",
            "6442450944",
            "void",
            "2097152"
        ]
    );
    // The block replaced the table holding the page: one walk flush (5.15 on a Qualcomm MMU-500:
    // one TLBIASID, then a sync), no WARN; the level-3 table is gone.
    let block = &r.ops[1];
    assert_eq!(n(block, Counter::SmmuTlbiasid), 1);
    assert_eq!(n(block, Counter::SmmuTlbsync), 1);
    assert_eq!(n(block, Counter::Warn), 0);
    assert_eq!(r.ops[0].shape.unwrap().tables, [1, 1, 1, 1]);
    assert_eq!(block.shape.unwrap().tables, [1, 1, 1, 0]);
    assert_eq!(block.shape.unwrap().leaves, [0, 0, 1, 0]);
    // Mapping over the live block: refused with a WARN, counted as a refusal; nothing changes.
    assert_eq!((r.ops[2].errors, n(&r.ops[2], Counter::Warn)), (1, 1));
    assert_eq!(r.ops[2].bytes_done, 0);
    assert_eq!(r.ops[2].shape, block.shape);
    // 6 GiB at 4 GiB, 1 GiB aligned on both sides: six level-1 blocks in one map_pages call.
    let big = &r.ops[4];
    assert_eq!(big.bytes_done, 6 << 30);
    assert_eq!(n(big, Counter::PgtableMapCall), 1);
    assert_eq!(big.shape.unwrap().leaves, [0, 6, 1, 0]);
    // unmap_fast invalidates each block by VA as it goes (arm-smmu writes TLBIVAL at once) but
    // leaves the sync to iotlb_sync.
    assert_eq!(
        (
            n(&r.ops[6], Counter::SmmuTlbival),
            n(&r.ops[6], Counter::SmmuTlbsync)
        ),
        (6, 0)
    );
    assert_eq!(
        (
            n(&r.ops[7], Counter::SmmuTlbival),
            n(&r.ops[7], Counter::SmmuTlbsync)
        ),
        (0, 1)
    );
    assert_eq!(r.ops[8].shape.unwrap().leaves, [0; 4]);
    // The JSON carries the geometry, the results and the page-table shapes.
    let j = dmasim::scenario::iommu::json(&r);
    let op2 = &j["ops"][2];
    assert_eq!(op2["returned"], "-EEXIST");
    assert_eq!(op2["geometry"]["op"], "map");
    assert_eq!(op2["geometry"]["sg"][1][0], "0x890010000");
    assert_eq!(op2["geometry"]["sg"][1][1], 65536);
    assert_eq!(j["ops"][4]["geometry"]["prot"][2], "cache");
    assert_eq!(j["ops"][4]["geometry"]["size"], 6u64 << 30);
    assert_eq!(j["ops"][4]["pgtable"]["leaves"]["1"], 6);
    assert_eq!(j["ops"][7]["call"], "iommu_iotlb_sync");
}

/// Map a page at `iova`, then a block over it; look the block up; unmap one page out of it.
fn block_over_table(kernel: &str, granule: &str, block: &str, ias: u32, iova: u64) -> String {
    format!(
        r#"
[scenario]
name = "block-over-table"
platform = "sm8150"
kernel = "{kernel}"

[iommu]
granule = "{granule}"
ias = {ias}

[workload]
kind = "iommu_ops"
iterations = 1
pgtable_shape = true

[[workload.op]]
op = "iommu_map"
iova = "{iova:#x}"
size = "{granule}"
phys = "0x880000000"

[[workload.op]]
op = "iommu_map"
iova = "{iova:#x}"
size = "{block}"
phys = "0x900000000"

[[workload.op]]
op = "iova_to_phys"
iova = "{probe:#x}"

[[workload.op]]
op = "unmap"
iova = "{probe_page:#x}"
size = "{granule}"

[[workload.op]]
op = "iova_to_phys"
iova = "{probe:#x}"
"#,
        probe = iova + 0x234,
        probe_page = iova,
    )
}

#[test]
fn a_block_over_a_table_that_maps_a_page_frees_the_table_with_one_walk_flush() {
    // 5.14 (by VA on every MMU-500): 512 TLBIVA for the 2 MB table's walk; 5.15 on a Qualcomm
    // MMU-500: one TLBIASID. Neither WARNs; the block is what the lookup then finds.
    for (kernel, tlbiva, tlbiasid) in [("5.14", 512, 0), ("5.15", 0, 1)] {
        let r = run(&block_over_table(kernel, "4K", "2M", 48, 0x20_0000));
        let b = &r.ops[1];
        assert_eq!(ret(b), "0", "{kernel}");
        assert_eq!(
            (n(b, Counter::SmmuTlbiva), n(b, Counter::SmmuTlbiasid)),
            (tlbiva, tlbiasid),
            "{kernel}"
        );
        assert_eq!(n(b, Counter::SmmuTlbsync), 1, "{kernel}");
        assert_eq!(n(b, Counter::Warn), 0, "{kernel}");
        assert_eq!(ret(&r.ops[2]), "0x900000234", "{kernel}");
    }
}

#[test]
fn a_partial_unmap_of_a_block_splits_it_until_6_12_and_is_refused_from_6_13() {
    let r = run(&block_over_table("6.12", "4K", "2M", 48, 0x20_0000));
    let u = &r.ops[3];
    assert_eq!((ret(u), u.errors, n(u, Counter::Warn)), ("4096", 0, 0));
    // The block became a level-3 table of 511 pages; the lookup of the unmapped page fails.
    assert_eq!(
        u.shape.unwrap(),
        PgtableShape {
            tables: [1, 1, 1, 1],
            leaves: [0, 0, 0, 511]
        }
    );
    assert_eq!(ret(&r.ops[4]), "0");
    let r = run(&block_over_table("6.13", "4K", "2M", 48, 0x20_0000));
    let u = &r.ops[3];
    assert_eq!((ret(u), u.errors, n(u, Counter::Warn)), ("0", 1, 1));
    assert!(
        u.first_error
            .as_deref()
            .unwrap()
            .contains("partial unmap of a block")
    );
    assert_eq!(u.shape.unwrap().leaves, [0, 0, 1, 0], "the block stays");
    assert_eq!(ret(&r.ops[4]), "0x900000234");
}

#[test]
fn every_granule_and_input_size_reports_each_operation() {
    for (granule, block, shift) in [("4K", "2M", 21), ("16K", "32M", 25), ("64K", "512M", 29)] {
        for ias in [32u32, 36, 40, 42, 44, 48] {
            let iova = 1u64 << shift;
            for kernel in ["6.12", "6.13"] {
                let r = run(&block_over_table(kernel, granule, block, ias, iova));
                let what = format!("{granule} {ias}-bit {kernel}");
                let returned: Vec<&str> = r.ops.iter().map(ret).collect();
                let pa = format!("{:#x}", 0x9_0000_0234u64);
                let (unmap, after) = if kernel == "6.12" {
                    (granule_bytes(granule).to_string(), "0".to_string())
                } else {
                    ("0".to_string(), pa.clone())
                };
                assert_eq!(returned, ["0", "0", pa.as_str(), &unmap, &after], "{what}");
                // One walk flush replaced the page's table: sm8150's MMU-500 is Qualcomm's, so
                // from 5.15 that is one TLBIASID.
                assert_eq!(n(&r.ops[1], Counter::SmmuTlbiasid), 1, "{what}");
                let leaf_level = r.ops[1].shape.unwrap().leaves.iter().position(|&l| l > 0);
                assert_eq!(leaf_level, Some(2), "{what}: the block is a level-2 leaf");
            }
        }
    }
}

fn granule_bytes(g: &str) -> u64 {
    match g {
        "4K" => 4096,
        "16K" => 16384,
        _ => 65536,
    }
}

#[test]
fn what_the_kernel_refuses_is_a_result_with_its_errno_and_warns() {
    let text = r#"
[scenario]
name = "refusals"
platform = "sm8150"
kernel = "6.6"

[iommu]
granule = "4K"
ias = 40

[workload]
kind = "iommu_ops"
iterations = 1

[[workload.op]]
op = "iommu_map"                  # misaligned: the core refuses with pr_err, no WARN
iova = "0x1000800"
size = "4K"

[[workload.op]]
op = "iommu_map"                  # beyond the 40-bit input range: io-pgtable WARNs, -ERANGE
iova = "0x10000000000"
size = "4K"

[[workload.op]]
op = "unmap"                      # a hole: WARN, 0 bytes
iova = "0x2000000"
size = "8K"

[[workload.op]]
op = "iova_to_phys"
iova = "0x2000000"

[[workload.op]]
op = "map"
iova = "0x3000000"
sg = [{ phys = "0x880000000", size = "8K" }, { phys = "0x880400000", size = "4K" }]

[[workload.op]]
op = "unmap"                      # mapped 8K + 4K, then a hole: short; the run of 4 pages stops
                                  # at the hole (WARN) and the core's next call starts on it (WARN)
iova = "0x3000000"
size = "16K"
"#;
    let r = run(text);
    let got: Vec<(&str, u64, u64)> = r
        .ops
        .iter()
        .map(|o| (ret(o), o.errors, n(o, Counter::Warn)))
        .collect();
    assert_eq!(
        got,
        [
            ("-EINVAL", 1, 0),
            ("-ERANGE", 1, 1),
            ("0", 1, 1),
            ("0", 0, 0),
            ("12288", 0, 0),
            ("12288", 1, 2),
        ]
    );
    assert_eq!(
        r.ops[0].iova, 0x100_0800,
        "a refused map reports the IOVA it asked for"
    );
}

/// 6.12's io-pgtable unmap (commit 85b715a33458) on sm8150's non-coherent table walker: a run
/// of cleared PTEs is cleaned with one sync instead of one per PTE, and a freed table's entry
/// gets a `tlb_add_page` like a leaf's. 1M of 4K pages is 256 leaves of one table; 4M from a
/// 2 MB boundary is two whole level-3 tables (5.15's unmap_pages hands both to one call).
#[test]
fn from_6_12_an_unmapped_run_is_cleaned_with_one_sync() {
    use dmasim::hw::Counter;
    use dmasim::policy::KernelVersion;
    use dmasim::scenario::{Outcome, Scenario, execute};
    let text = include_str!("../scenarios/smmu-walk-flush.toml")
        .replace(
            "sizes = [\"4K\", \"64K\", \"1M\", \"2M\", \"12M\", \"16M\", \"24M\", \"32M\"]",
            "sizes = [\"1M\", \"4M\"]",
        )
        .replace("iterations = 10", "iterations = 1");
    let run = |k: KernelVersion| {
        let mut s = Scenario::parse("w.toml", &text, std::path::Path::new(".")).unwrap();
        s.set_kernel(k).unwrap();
        match execute(&s).unwrap() {
            Outcome::IommuSweep(r) | Outcome::IommuOps(r) => r,
            _ => panic!("an IOMMU result"),
        }
    };
    let (old, new) = (run(KernelVersion(6, 11)), run(KernelVersion(6, 12)));
    let c = |r: &dmasim::scenario::iommu::IommuRunResult, op: &str, k: Counter| {
        r.op(op).unwrap().counts[k as usize]
    };
    // 256 PTEs of 8 bytes are 32 lines of 64 bytes.
    assert_eq!(c(&old, "unmap 1M", Counter::CacheCleanLine), 256);
    assert_eq!(c(&old, "unmap 1M", Counter::Barrier), 256);
    assert_eq!(c(&new, "unmap 1M", Counter::CacheCleanLine), 32);
    assert_eq!(c(&new, "unmap 1M", Counter::Barrier), 1);
    for r in [&old, &new] {
        assert_eq!(c(r, "unmap 1M", Counter::SmmuTlbival), 256);
    }
    // Two level-2 table entries: each cleaned once before its walk flush (and, in 6.12, again
    // with the run); 6.12 adds a leaf invalidation for each table entry.
    assert_eq!(c(&old, "unmap 4M", Counter::CacheCleanLine), 2);
    assert_eq!(c(&new, "unmap 4M", Counter::CacheCleanLine), 3);
    assert_eq!(c(&old, "unmap 4M", Counter::SmmuTlbival), 0);
    assert_eq!(c(&new, "unmap 4M", Counter::SmmuTlbival), 2);
    assert_eq!(
        c(&old, "unmap 4M", Counter::SmmuTlbiasid) + c(&old, "unmap 4M", Counter::SmmuTlbiva),
        c(&new, "unmap 4M", Counter::SmmuTlbiasid) + c(&new, "unmap 4M", Counter::SmmuTlbiva)
    );
}
