//! Wall time of the many-CPU engine: `dmasim map-benchmark --platform kunpeng920 --iommu
//! --kernel 5.4 -t 64 -s 1` (64 CPUs mapping and unmapping one page through iommu-dma, one IOVA
//! space, one page table and one SMMUv3 command queue between them, each CPU its own coroutine
//! and clock), and the same on one CPU.
//!
//! The throughput column counts map+unmap pairs, all CPUs together. Target: 64 CPUs × 1 M
//! pairs through iommu-dma in at most 10 s on one core, that is at least 6.4 M pairs/s at 64
//! CPUs; docs/performance.md has the figure measured.

use dmasim::scenario::{Outcome, Scenario, execute};

fn main() {
    divan::main();
}

fn scenario(threads: u32) -> Scenario {
    let text = format!(
        "[scenario]\nname = \"mb\"\nplatform = \"kunpeng920\"\nkernel = \"5.4\"\n\
         [device]\nname = \"dma_map_benchmark\"\ncoherent = true\ndma_mask_bits = 32\n\
         [iommu]\ngranule = \"4K\"\nias = 48\n\
         [workload]\nkind = \"map_benchmark\"\nthreads = {threads}\nseconds = 1\n"
    );
    Scenario::parse("mb.toml", &text, std::path::Path::new(".")).unwrap()
}

fn pairs(o: &Outcome) -> u64 {
    match o {
        Outcome::MapBenchmark(r) => r.map.loops,
        _ => unreachable!("a map_benchmark scenario"),
    }
}

#[divan::bench(args = [1, 64], sample_count = 1, sample_size = 1)]
fn map_benchmark_pairs(bencher: divan::Bencher, threads: u32) {
    let s = scenario(threads);
    let n = pairs(&execute(&s).unwrap());
    bencher
        .counter(divan::counter::ItemsCount::new(n))
        .bench_local(|| execute(&s).unwrap());
}
