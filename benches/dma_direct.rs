//! Wall time of the model itself: one modelled dma_map_sg + dma_unmap_sg of 10 MB in 4 KB entries
//! (2560 entries, 163840 lines each way) on the Dimensity 9500 profile, under 7.0 (a `DSB SY` per
//! entry) and 7.1 (one per list), each release's preset as `dmasim run` sets it up. Target (#12):
//! at most 40 µs per map_sg + unmap_sg under either release. `map_unmap_sg_4k_by_size` runs the 7.1
//! pair at 1, 10 and 100 MB to show the cost growing linearly with the entries. The throughput
//! column counts sg entries mapped and unmapped.

use dmasim::device::Device;
use dmasim::dma::direct::DmaDirect;
use dmasim::dma::mapping::DmaApi;
use dmasim::hw::model::Model;
use dmasim::platform::Profile;
use dmasim::policy::{KernelVersion, Policies, Target};
use dmasim::scatterlist::SgTable;
use dmasim::types::{DmaAttrs, DmaDirection, PhysAddr};

fn main() {
    divan::main();
}

const MB: u64 = 1 << 20;

fn setup(kernel: &str, bytes: u64) -> (Model, DmaApi<DmaDirect>, SgTable) {
    let profile = Profile::load("dimensity9500").unwrap();
    let policies = Policies::preset(
        KernelVersion::parse(kernel).unwrap(),
        &Target::of(&profile, false, false, true),
    );
    let hw = Model::new(profile.model.clone());
    let arch = dmasim::setup::arch_dma(&profile, &policies);
    let direct = DmaDirect::new(&hw, arch, policies.sync);
    let api = DmaApi::new(&hw, Device::new("dev", false, 64), direct);
    let sgt = SgTable::from_contiguous(PhysAddr(0x8000_0000), bytes, &[4096]);
    (hw, api, sgt)
}

fn run(bencher: divan::Bencher, kernel: &str, bytes: u64) {
    let (mut hw, api, mut sgt) = setup(kernel, bytes);
    let dir = DmaDirection::Bidirectional;
    bencher
        .counter(divan::counter::ItemsCount::new(sgt.entries.len()))
        .bench_local(|| {
            api.map_sg(&mut hw, &mut sgt, dir, DmaAttrs::NONE).unwrap();
            api.unmap_sg(&mut hw, &mut sgt, dir, DmaAttrs::NONE);
        });
}

#[divan::bench(args = ["7.0", "7.1"])]
fn map_unmap_sg_10m_4k(bencher: divan::Bencher, kernel: &str) {
    run(bencher, kernel, 10 * MB);
}

#[divan::bench(args = [1, 10, 100])]
fn map_unmap_sg_4k_by_size(bencher: divan::Bencher, mb: u64) {
    run(bencher, "7.1", mb * MB);
}
