//! A streaming device behind an IOMMU: every DMA-API call goes through iommu-dma, with exact
//! IOVA, page-table and TLB-invalidation counts per call; and 5.15's walk flush follows the SMMU
//! implementation of the platform.

use dmasim::hw::Counter;
use dmasim::scenario::iommu::IommuRunResult;
use dmasim::scenario::{Outcome, RunResult, Scenario, execute};

const STREAM: &str = r#"
[scenario]
name = "camera-behind-mmu500"
platform = "sm8150"
kernel = "5.15"

[device]
name = "camera"
coherent = false
dma_mask_bits = 36

[iommu]
granule = "4K"
ias = 36

[workload]
kind = "streaming"
buffer = "10M"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 4
"#;

fn streaming(text: &str) -> RunResult {
    let s = Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap();
    match execute(&s) {
        Ok(Outcome::Streaming(r)) => r,
        other => panic!("a streaming result, got {other:?}"),
    }
}

fn per_call(r: &RunResult, call: &str, c: Counter) -> f64 {
    r.call(call).unwrap().per_call(c)
}

#[test]
fn map_sg_of_10m_goes_through_iommu_dma_with_exact_counts() {
    let r = streaming(STREAM);
    assert_eq!(r.dma_ops, "iommu-dma");
    let m = "dma_map_sg";
    // One IOVA range per call; 10 MB is above the rcache's largest size, so never a hit.
    assert_eq!(per_call(&r, m, Counter::IovaAlloc), 1.0);
    assert_eq!(per_call(&r, m, Counter::IovaRcacheHit), 0.0);
    // The buffer is physically contiguous: iommu_map_sg merges it into one __iommu_map, which
    // the 5.15 core hands to the page table in one map_pages call.
    assert_eq!(per_call(&r, m, Counter::PgtableMapCall), 1.0);
    // Nothing is invalidated on map.
    assert_eq!(per_call(&r, m, Counter::SmmuTlbival), 0.0);
    assert_eq!(per_call(&r, m, Counter::SmmuTlbsync), 0.0);
    let u = "dma_unmap_sg";
    // Strict: the five 2 MB blocks are each invalidated by VA (leaf), then one sync.
    assert_eq!(per_call(&r, u, Counter::PgtableUnmapCall), 1.0);
    assert_eq!(per_call(&r, u, Counter::SmmuTlbival), 5.0);
    assert_eq!(per_call(&r, u, Counter::SmmuTlbiva), 0.0);
    assert_eq!(per_call(&r, u, Counter::SmmuTlbsync), 1.0);
    assert_eq!(per_call(&r, u, Counter::IovaFree), 1.0);
    // The cache maintenance is still the device's: 163840 lines each way per call.
    assert_eq!(per_call(&r, u, Counter::CacheInvalLine), 163_840.0);
    // Per-call counts and times add up to the run's.
    let calls: u64 = r.calls.iter().map(|c| c.total_ps).sum();
    assert_eq!(calls, r.total_ps);
    for c in Counter::ALL {
        let sum: u64 = r.calls.iter().map(|k| k.counts[c as usize]).sum();
        assert_eq!(sum, r.count(c), "{}", c.name());
    }
}

#[test]
fn single_pages_come_from_the_rcache_after_the_first() {
    let text = STREAM
        .replace("buffer = \"10M\"", "buffer = \"64K\"")
        .replace("map_sg+unmap_sg", "map_page+unmap_page")
        .replace("iterations = 4", "iterations = 2");
    let r = streaming(&text);
    let map = r.call("dma_map_page").unwrap();
    assert_eq!(map.count, 32);
    assert_eq!(map.counts[Counter::IovaAlloc as usize], 32);
    // The first 4 KB range comes from the tree; every later one from the CPU's magazine.
    assert_eq!(map.counts[Counter::IovaRcacheHit as usize], 31);
    assert_eq!(map.counts[Counter::PgtableMapCall as usize], 32);
    let unmap = r.call("dma_unmap_page").unwrap();
    assert_eq!(unmap.counts[Counter::SmmuTlbival as usize], 32);
    assert_eq!(unmap.counts[Counter::SmmuTlbsync as usize], 32);
    assert_eq!(unmap.counts[Counter::IovaFree as usize], 32);
}

#[test]
fn map_single_is_a_call_of_its_own() {
    let text = STREAM
        .replace("buffer = \"10M\"", "buffer = \"16K\"")
        .replace("map_sg+unmap_sg", "map_single+unmap_single");
    let r = streaming(&text);
    assert_eq!(r.call("dma_map_single").unwrap().count, 16);
    assert_eq!(r.call("dma_unmap_single").unwrap().count, 16);
    assert!(
        r.stacks
            .iter()
            .any(|s| s.stack.starts_with("dma_map_single > iommu_dma_map_page"))
    );
}

const SWEEP: &str = r#"
[scenario]
name = "walk"
platform = "PLATFORM"
kernel = "5.15"

[iommu]
granule = "4K"
ias = 48

[workload]
kind = "iommu_sweep"
sizes = ["2M"]
element = "4K"
layout = "scattered"
iterations = 1
"#;

fn sweep(dir: &std::path::Path, platform: &str) -> IommuRunResult {
    let text = SWEEP.replace("PLATFORM", platform);
    let s = Scenario::parse("s.toml", &text, dir).unwrap();
    match execute(&s) {
        Ok(Outcome::IommuSweep(r) | Outcome::IommuOps(r)) => r,
        other => panic!("an IOMMU result, got {other:?}"),
    }
}

/// A scratch directory removed when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_515_walk_flush_follows_the_smmu_implementation() {
    // sm8150's MMU-500 is Qualcomm's: 5.15 flushes a freed table's walk with one TLBIASID.
    let tmp =
        Scratch(std::env::temp_dir().join(format!("dmasim-iommu-dma-{}", std::process::id())));
    std::fs::create_dir_all(&tmp.0).unwrap();
    let qcom = sweep(&tmp.0, "sm8150");
    let u = qcom.op("unmap 2M").unwrap();
    assert_eq!(u.per_call(Counter::SmmuTlbiasid), 1.0);
    assert_eq!(u.per_call(Counter::SmmuTlbiva), 0.0);
    // The same MMU-500 under Arm's own implementation: a TLBIVA per 4 KB granule.
    let arm = include_str!("../profiles/sm8150.toml").replace("impl = \"qcom\"", "impl = \"arm\"");
    std::fs::write(tmp.0.join("mmu500-arm.toml"), arm).unwrap();
    let generic = sweep(&tmp.0, "mmu500-arm.toml");
    assert_eq!(
        generic.info.policies.walk_flush,
        dmasim::iommu::arm_smmu::WalkFlushKind::ByVa
    );
    let u = generic.op("unmap 2M").unwrap();
    assert_eq!(u.per_call(Counter::SmmuTlbiva), 512.0);
    assert_eq!(u.per_call(Counter::SmmuTlbiasid), 0.0);
}

fn counts(r: &RunResult, call: &str) -> impl Fn(Counter) -> u64 {
    let c = r.call(call).unwrap().counts;
    move |k| c[k as usize]
}

fn with_policy(text: &str, policy: &str) -> RunResult {
    let mut s = Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap();
    s.set_policies(policy).unwrap();
    match execute(&s) {
        Ok(Outcome::Streaming(r)) => r,
        other => panic!("a streaming result, got {other:?}"),
    }
}

#[test]
fn lazy_invalidation_defers_the_unmaps_to_flush_queue_flushes() {
    // 40 × map_sg + unmap_sg of 10 MB: each iteration takes about 0.66 ms of modelled time.
    let text = STREAM.replace("iterations = 4", "iterations = 40");
    let strict = with_policy(&text, "invalidation=strict");
    let u = counts(&strict, "dma_unmap_sg");
    assert_eq!(
        (
            u(Counter::SmmuTlbival),
            u(Counter::SmmuTlbsync),
            u(Counter::IovaFree)
        ),
        (200, 40, 40)
    );
    assert_eq!((u(Counter::FqQueued), u(Counter::FqFlush)), (0, 0));

    let lazy = with_policy(&text, "invalidation=lazy");
    let u = counts(&lazy, "dma_unmap_sg");
    // No unmap invalidates or syncs by itself: each queues its IOVA.
    assert_eq!(u(Counter::SmmuTlbival), 0);
    assert_eq!(u(Counter::FqQueued), 40);
    // The queue never fills (255 slots per CPU); its 10 ms timer, armed by the first queued
    // IOVA, expires during the 16th iteration and again 10 ms after the next queueing: two
    // whole-domain flushes (TLBIASID + TLBSYNC each), each freeing the 15 IOVAs queued before it.
    assert_eq!(u(Counter::FqFlush), 2);
    assert_eq!((u(Counter::SmmuTlbiasid), u(Counter::SmmuTlbsync)), (2, 2));
    assert_eq!(u(Counter::IovaFree), 30);
    // Maps are untouched by the mode.
    let m = counts(&lazy, "dma_map_sg");
    assert_eq!(
        (m(Counter::IovaAlloc), m(Counter::PgtableMapCall)),
        (40, 40)
    );
    assert!(
        lazy.call("dma_unmap_sg").unwrap().total_ps < strict.call("dma_unmap_sg").unwrap().total_ps
    );
}

#[test]
fn a_full_flush_queue_flushes_every_255_unmaps() {
    // 512 single 4 KB pages, mapped and unmapped one after another in about 1.5 ms: the timer
    // never fires, the per-CPU ring (256 slots, one kept empty) fills.
    let text = STREAM
        .replace("buffer = \"10M\"", "buffer = \"2M\"")
        .replace("map_sg+unmap_sg", "map_page+unmap_page")
        .replace("iterations = 4", "iterations = 1");
    let strict = with_policy(&text, "invalidation=strict");
    let (m, u) = (
        counts(&strict, "dma_map_page"),
        counts(&strict, "dma_unmap_page"),
    );
    assert_eq!(
        (m(Counter::IovaAlloc), m(Counter::IovaRcacheHit)),
        (512, 511)
    );
    assert_eq!(
        (u(Counter::SmmuTlbival), u(Counter::SmmuTlbsync)),
        (512, 512)
    );

    let lazy = with_policy(&text, "invalidation=lazy");
    let (m, u) = (
        counts(&lazy, "dma_map_page"),
        counts(&lazy, "dma_unmap_page"),
    );
    assert_eq!(u(Counter::FqQueued), 512);
    assert_eq!(u(Counter::SmmuTlbival), 0);
    // The 256th unmap finds 255 queued: flush, free them, queue its own; the 511th again.
    assert_eq!(u(Counter::FqFlush), 2);
    assert_eq!((u(Counter::SmmuTlbiasid), u(Counter::SmmuTlbsync)), (2, 2));
    assert_eq!(u(Counter::IovaFree), 510);
    // Until the first flush every map needs a fresh IOVA from the tree; after it, the 255 freed
    // ranges serve maps 257..511 from the magazines, and the second flush's serve the 512th.
    assert_eq!(
        (m(Counter::IovaAlloc), m(Counter::IovaRcacheHit)),
        (512, 256)
    );
}

#[test]
fn lazy_invalidation_needs_a_release_and_a_device_that_have_it() {
    let mut s = Scenario::parse("s.toml", STREAM, std::path::Path::new(".")).unwrap();
    s.set_kernel(dmasim::policy::KernelVersion(4, 19)).unwrap();
    let e = s.set_policies("invalidation=lazy").unwrap_err();
    assert!(e.message.contains("5.0"), "{e}");
    // The refused override is not kept: the scenario still runs, strictly.
    assert_eq!(
        s.policies.invalidation,
        dmasim::iommu::dma_fq::Invalidation::Strict
    );
    assert!(execute(&s).is_ok());
    // The iommu core called directly always invalidates: the policy does not apply there.
    let tmp = std::path::Path::new(".");
    let sweep = SWEEP.replace("PLATFORM", "sm8150");
    let mut s = Scenario::parse("s.toml", &sweep, tmp).unwrap();
    let e = s.set_policies("invalidation=lazy").unwrap_err();
    assert!(e.message.contains("iommu core directly"), "{e}");
}

/// The table walker's coherence is the platform's (`[smmu] coherent_walk`) unless the scenario
/// says otherwise, also after `--platform`; the run's header says which walker ran and whose
/// word it was.
#[test]
fn the_walkers_coherence_comes_from_the_platform() {
    use dmasim::scenario::{Scenario, execute};
    let text = |platform: &str, walk: &str| {
        format!(
            "[scenario]\nname = \"w\"\nplatform = \"{platform}\"\nkernel = \"5.15\"\n\n[device]\nname = \"d\"\ncoherent = true\ndma_mask_bits = 64\n\n[iommu]\ngranule = \"4K\"\nias = 48\n{walk}\n[workload]\nkind = \"streaming\"\nbuffer = \"64K\"\nentry = \"4K\"\ncalls = \"map_sg+unmap_sg\"\ndirection = \"to_device\"\niterations = 1\n"
        )
    };
    let parse = |t: String| Scenario::parse("w.toml", &t, std::path::Path::new(".")).unwrap();
    let walk = |s: &Scenario| s.iommu.unwrap().coherent_walk;
    assert!(walk(&parse(text("kunpeng920", ""))));
    assert!(!walk(&parse(text("sm8150", ""))));
    assert!(!walk(&parse(text("kunpeng920", "coherent_walk = false\n"))));
    assert!(walk(&parse(text("sm8150", "coherent_walk = true\n"))));
    let mut moved = parse(text("sm8150", ""));
    moved.set_platform("kunpeng920").unwrap();
    assert!(walk(&moved));
    let mut kept = parse(text("sm8150", "coherent_walk = false\n"));
    kept.set_platform("kunpeng920").unwrap();
    assert!(!walk(&kept));
    // A coherent walker cleans no PTE; a non-coherent one cleans every PTE it writes.
    let lines = |s: &Scenario| match execute(s).unwrap() {
        dmasim::scenario::Outcome::Streaming(r) => (
            r.count(dmasim::hw::Counter::CacheCleanLine),
            r.info.iommu.clone().unwrap(),
        ),
        _ => panic!("a streaming result"),
    };
    let (n, head) = lines(&parse(text("kunpeng920", "")));
    assert_eq!(n, 0);
    assert_eq!(
        head,
        "4 KiB granule, 48-bit IAS, smmu-v3 (version 3.0), coherent table walker (the platform's [smmu] coherent_walk)"
    );
    let (n, head) = lines(&parse(text("sm8150", "")));
    assert!(n > 0);
    assert!(
        head.contains("mmu-500 (version 2), non-coherent table walker (the platform's"),
        "{head}"
    );
    let (_, head) = lines(&parse(text("sm8150", "coherent_walk = true\n")));
    assert!(
        head.ends_with("coherent table walker (the scenario's coherent_walk)"),
        "{head}"
    );
}
