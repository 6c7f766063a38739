//! Wall time of the many-CPU engine: `dmasim map-benchmark --platform kunpeng920 --iommu
//! --kernel 5.4 -t 64 -s 1` (64 CPUs mapping and unmapping one page through iommu-dma, one IOVA
//! space, one page table and one SMMUv3 command queue between them, each CPU its own coroutine
//! and clock), and the same on one CPU.
//!
//! The throughput column counts map+unmap pairs, all CPUs together. Target: 64 CPUs × 1 M
//! pairs through iommu-dma in at most 10 s on one core, that is at least 6.4 M pairs/s at 64
//! CPUs; docs/performance.md has the figure measured.
//!
//! `engine_turns` is the engine alone: CPUs whose bodies do nothing but wait their turn at
//! clocks that interleave, so that every turn hands over to another CPU. Its time per item is
//! what one such hand-over costs, the floor under every point where a modelled CPU must wait
//! for the others.

use dmasim::scenario::{Outcome, Scenario, execute};
use dmasim::smp::{Body, Cpu, run};

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

/// Turns per CPU in `engine_turns`.
const TURNS: u64 = 100_000;

#[divan::bench(args = [2, 64], sample_count = 3, sample_size = 1)]
fn engine_turns(bencher: divan::Bencher, cpus: u64) {
    let body = |offset: u64| -> Body<'static, u64> {
        Box::new(move |cpu: Cpu| {
            let mut t = offset;
            for _ in 0..TURNS {
                t += cpus;
                cpu.turn(t);
            }
            t
        })
    };
    bencher
        .counter(divan::counter::ItemsCount::new(cpus * TURNS))
        .bench_local(|| run((0..cpus).map(body).collect()).unwrap());
}
