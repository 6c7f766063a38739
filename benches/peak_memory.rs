//! Peak memory of the model itself on two large runs, each in a child process of its own so one
//! run's heap cannot hide in the other's figure: the child runs the workload and reports its peak
//! resident set (`VmHWM` in /proc/self/status, Linux only), and the baseline of a child that does
//! nothing is shown beside it.
//!
//! - `streaming 8 GiB / 4 KB`: one dma_map_sg + dma_unmap_sg of 8 GiB in 4 KB entries (2,097,152
//!   entries) on the Dimensity 9500 profile under 7.1 (dma-direct).
//! - `iommu 1 GiB / 4 KB`: one iommu_map_sg + iommu_unmap of 1 GiB of physically scattered 4 KB
//!   pages (262,144 PTEs in 512 last-level tables) through the full functional IOMMU stack.
//!
//! Target (#12): at most 64 MiB each. `cargo bench --bench peak_memory`.

use dmasim::device::Device;
use dmasim::dma::direct::DmaDirect;
use dmasim::dma::mapping::DmaApi;
use dmasim::hw::model::{Model, ModelParams};
use dmasim::iommu::Prot;
use dmasim::iommu::arm_smmu::{ArmSmmuDomain, WalkFlushKind};
use dmasim::iommu::core::{IommuDomain, SplitKind};
use dmasim::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
use dmasim::mm::physmem::PhysMem;
use dmasim::platform::Profile;
use dmasim::policy::{KernelVersion, Policies, Target};
use dmasim::scatterlist::SgTable;
use dmasim::types::{DmaAttrs, DmaDirection, IovaAddr, PhysAddr};
use std::process::Command;

const GIB: u64 = 1 << 30;

fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn streaming_8g() {
    let profile = Profile::load("dimensity9500").unwrap();
    let policies = Policies::preset(
        KernelVersion(7, 1),
        &Target::of(&profile, false, false, true),
    );
    let mut hw = Model::new(profile.model.clone());
    let arch = dmasim::setup::arch_dma(&profile, &policies);
    let direct = DmaDirect::new(&hw, arch, policies.sync);
    let api = DmaApi::new(&hw, Device::new("dev", false, 64), direct);
    let mut sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), 8 * GIB, &[4096]);
    let dir = DmaDirection::Bidirectional;
    let n = api.map_sg(&mut hw, &mut sgt, dir, DmaAttrs::NONE).unwrap();
    assert_eq!(n, 2 << 20);
    api.unmap_sg(&mut hw, &mut sgt, dir, DmaAttrs::NONE);
}

fn iommu_1g() {
    let mut hw = Model::new(ModelParams {
        line_bytes: 64,
        ..ModelParams::default()
    });
    let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
    let t = ArmLpaeIoPgtable::new(&mut hw, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
    let ops = Box::new(ArmSmmuDomain::new(&hw, 1, WalkFlushKind::Asid));
    let d = IommuDomain::new(&hw, t, ops, SplitKind::UnmapPages);
    let pages = GIB / 4096;
    let segs: Vec<(PhysAddr, u64)> = (0..pages)
        .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
        .collect();
    let iova = IovaAddr(0x10_0000_0000);
    let m = d.iommu_map_sg(&mut hw, iova, &segs, Prot::RW).unwrap();
    assert_eq!(m, GIB);
    assert_eq!(d.iommu_unmap(&mut hw, iova, m).unwrap(), GIB);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        match args.get(i + 1).map(String::as_str) {
            Some("baseline") => {}
            Some("streaming") => streaming_8g(),
            Some("iommu") => iommu_1g(),
            other => panic!("unknown child workload {other:?}"),
        }
        println!("{}", vm_hwm_kib());
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let peak = |w: &str| -> u64 {
        let out = Command::new(&exe).args(["--child", w]).output().unwrap();
        assert!(
            out.status.success(),
            "{w}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    let base = peak("baseline");
    println!("peak resident memory (VmHWM), target <= 64 MiB each");
    println!(
        "{:<28} {:>10}",
        "baseline (empty child)",
        format!("{:.1} MiB", base as f64 / 1024.0)
    );
    for (name, w) in [
        ("streaming 8 GiB / 4 KB", "streaming"),
        ("iommu 1 GiB / 4 KB", "iommu"),
    ] {
        let kib = peak(w);
        let mib = kib as f64 / 1024.0;
        let met = if mib <= 64.0 { "met" } else { "missed" };
        println!("{name:<28} {:>10}  {met}", format!("{mib:.1} MiB"));
    }
}
