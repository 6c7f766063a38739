//! Map and unmap 32 MB of 4 KB pages through the full functional IOMMU stack (real LPAE tables in
//! simulated memory, SMMU flush ops, the Model backend's ledger).
//!
//! The throughput column counts 4 KB pages, so nanoseconds per page are 1e9 / the items per second
//! (or the median / 8192). Targets (#12), each per page: `iommu_map_sg_unmap_32m` (one
//! iommu_map_sg + one iommu_unmap of 8192 physically scattered pages) at most 20 ns;
//! `iommu_map_single_pages` (8192 iommu_map calls of one page each, on a fresh domain) at most
//! 20 ns; `iommu_unmap_single_pages` (8192 strict iommu_unmap calls of one 4 KB page each) at most
//! 20 ns. `iommu_map_sg_unmap_by_pages` runs the first at 2048, 8192 and 32768 pages to show the
//! cost growing linearly with the pages.

use dmasim::arch::arm64::{Arm64, DirRules};
use dmasim::device::Device;
use dmasim::dma::DmaMapOps;
use dmasim::dma::sync_policy::SyncKind;
use dmasim::hw::model::{Model, ModelParams};
use dmasim::iommu::Prot;
use dmasim::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};
use dmasim::iommu::core::{IommuDomain, SplitKind};
use dmasim::iommu::dma_iommu::IommuDma;
use dmasim::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
use dmasim::mm::physmem::PhysMem;
use dmasim::scatterlist::{SgEntry, SgTable};
use dmasim::types::{DmaAddr, DmaAttrs, DmaDirection, IovaAddr, PhysAddr};

const PAGES: u64 = 8192;
const IOVA: u64 = 0x10_0000_0000;

fn main() {
    divan::main();
}

fn model() -> Model {
    Model::new(ModelParams {
        line_bytes: 64,
        ..ModelParams::default()
    })
}

fn domain(hw: &mut Model, walk: WalkFlushKind, split: SplitKind) -> IommuDomain {
    domain_with(hw, walk, split, IoPgtableCfg::new(4096, 48), None)
}

fn domain_with(
    hw: &mut Model,
    walk: WalkFlushKind,
    split: SplitKind,
    cfg: IoPgtableCfg,
    walker: Option<dmasim::arch::ArchOps>,
) -> IommuDomain {
    let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
    let t = ArmLpaeIoPgtable::new(hw, cfg, mem, walker).unwrap();
    let ops = Box::new(ArmSmmuDomain::new(hw, 1, walk));
    IommuDomain::new(hw, t, ops, split)
}

/// Pages that are not physically contiguous, so every one is its own 4K PTE.
fn scattered() -> Vec<(PhysAddr, u64)> {
    scattered_n(PAGES)
}

fn scattered_n(n: u64) -> Vec<(PhysAddr, u64)> {
    (0..n)
        .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
        .collect()
}

/// The policies the benches compare: 5.14's and 5.15's walk flush and unmap split, 5.15's with
/// a non-coherent table walker (the one-page shortcut declines every call; `descend` still
/// runs), and 6.12's clearing of a run with one sync.
const POLICIES: [&str; 4] = [
    "5.14 per-page + by-va",
    "5.15 unmap_pages + asid",
    "5.15 non-coherent walker",
    "6.12 per-run clear",
];

fn domain_for(hw: &mut Model, policy: &str) -> IommuDomain {
    let (asid, split) = (WalkFlushKind::Asid, SplitKind::UnmapPages);
    let cfg = IoPgtableCfg::new(4096, 48);
    match policy {
        "5.14 per-page + by-va" => domain(hw, WalkFlushKind::ByVa, SplitKind::PerPage),
        "5.15 non-coherent walker" => {
            let walker = dmasim::arch::ArchOps::from(Arm64::new(DirRules::Since5_19));
            domain_with(hw, asid, split, cfg, Some(walker))
        }
        "6.12 per-run clear" => {
            let mut cfg = cfg;
            cfg.pte_clear = dmasim::iommu::io_pgtable_arm::PteClear::PerRun;
            domain_with(hw, asid, split, cfg, None)
        }
        _ => domain(hw, asid, split),
    }
}

#[divan::bench(args = POLICIES)]
fn iommu_map_sg_unmap_32m(bencher: divan::Bencher, policy: &str) {
    let mut hw = model();
    let d = domain_for(&mut hw, policy);
    let segs = scattered();
    bencher
        .counter(divan::counter::ItemsCount::new(PAGES))
        .bench_local(|| {
            let m = d
                .iommu_map_sg(&mut hw, IovaAddr(IOVA), &segs, Prot::RW)
                .unwrap();
            let u = d.iommu_unmap(&mut hw, IovaAddr(IOVA), m).unwrap();
            divan::black_box(u);
        });
}

#[divan::bench]
fn dma_map_sg_unmap_sg_32m_iommu_dma(bencher: divan::Bencher) {
    let mut hw = model();
    let d = domain(&mut hw, WalkFlushKind::Asid, SplitKind::UnmapPages);
    let arch = Arm64::new(DirRules::Since5_19);
    let dma = IommuDma::new(&hw, d, 1, arch, SyncKind::Batched).unwrap();
    let dev = Device::new("cam", true, 40);
    let mut sgt = SgTable {
        entries: scattered()
            .into_iter()
            .map(|(p, l)| SgEntry {
                page: p,
                offset: 0,
                length: l as u32,
                dma_address: DmaAddr::MAPPING_ERROR,
                dma_length: 0,
            })
            .collect(),
        nents: 0,
    };
    let dir = DmaDirection::Bidirectional;
    bencher.bench_local(|| {
        dma.map_sg(&mut hw, &dev, &mut sgt, dir, DmaAttrs::NONE)
            .unwrap();
        dma.unmap_sg(&mut hw, &dev, &mut sgt, dir, DmaAttrs::NONE);
    });
}

#[divan::bench(args = [2048, 8192, 32768])]
fn iommu_map_sg_unmap_by_pages(bencher: divan::Bencher, pages: u64) {
    let mut hw = model();
    let d = domain_for(&mut hw, "5.15");
    let segs = scattered_n(pages);
    bencher
        .counter(divan::counter::ItemsCount::new(pages))
        .bench_local(|| {
            let m = d
                .iommu_map_sg(&mut hw, IovaAddr(IOVA), &segs, Prot::RW)
                .unwrap();
            let u = d.iommu_unmap(&mut hw, IovaAddr(IOVA), m).unwrap();
            divan::black_box(u);
        });
}

/// 8192 `iommu_map()` calls of one scattered 4 KB page each, from an empty domain (the tables
/// they need are allocated inside the timed region, as the kernel's would be).
#[divan::bench(args = ["5.14 per-page + by-va", "5.15 unmap_pages + asid"])]
fn iommu_map_single_pages(bencher: divan::Bencher, policy: &str) {
    let segs = scattered();
    bencher
        .counter(divan::counter::ItemsCount::new(PAGES))
        .with_inputs(|| {
            let mut hw = model();
            let d = domain_for(&mut hw, policy);
            (hw, d)
        })
        .bench_local_refs(|(hw, d)| {
            for (i, &(pa, len)) in segs.iter().enumerate() {
                d.iommu_map(hw, IovaAddr(IOVA + i as u64 * 4096), pa, len, Prot::RW)
                    .unwrap();
            }
        });
}

/// 8192 strict `iommu_unmap()` calls of one 4 KB page each (a leaf invalidation and a sync each),
/// of pages mapped before timing starts.
#[divan::bench(args = POLICIES)]
fn iommu_unmap_single_pages(bencher: divan::Bencher, policy: &str) {
    let segs = scattered();
    bencher
        .counter(divan::counter::ItemsCount::new(PAGES))
        .with_inputs(|| {
            let mut hw = model();
            let d = domain_for(&mut hw, policy);
            d.iommu_map_sg(&mut hw, IovaAddr(IOVA), &segs, Prot::RW)
                .unwrap();
            (hw, d)
        })
        .bench_local_refs(|(hw, d)| {
            for i in 0..PAGES {
                d.iommu_unmap(hw, IovaAddr(IOVA + i * 4096), 4096).unwrap();
            }
        });
}
