//! Wall time of the model itself: one modelled dma_map_sg + dma_unmap_sg of 10 MB in 4 KB entries
//! (2560 entries, 163840 lines each way) on the Dimensity 9500 profile. Target: under 100 µs.

use dmasim::device::Device;
use dmasim::dma::direct::DmaDirect;
use dmasim::dma::mapping::DmaApi;
use dmasim::dma::sync_policy::SyncKind;
use dmasim::hw::model::Model;
use dmasim::platform::Profile;
use dmasim::policy::{Choice, KernelVersion, Policies, Target};
use dmasim::scatterlist::SgTable;
use dmasim::types::{DmaAttrs, DmaDirection, PhysAddr};

fn main() {
    divan::main();
}

#[divan::bench(args = ["per-entry", "batched"])]
fn map_unmap_sg_10m_4k(bencher: divan::Bencher, sync: &str) {
    let profile = Profile::load("dimensity9500").unwrap();
    let policies = Policies::preset(
        KernelVersion(7, 1),
        &Target::of(&profile, false, false, true),
    );
    let mut hw = Model::new(profile.model.clone());
    let arch = dmasim::setup::arch_dma(&profile, &policies);
    let direct = DmaDirect::new(&hw, arch, SyncKind::parse(sync).unwrap());
    let mut api = DmaApi::new(&hw, Device::new("dev", false, 64), Box::new(direct));
    let mut sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), 10 << 20, &[4096]);
    bencher.bench_local(|| {
        api.map_sg(
            &mut hw,
            &mut sgt,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
        api.unmap_sg(
            &mut hw,
            &mut sgt,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        );
    });
}
