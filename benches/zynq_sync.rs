//! Wall time of the model itself on seed 002's loop: one round of the streaming design's syncs of
//! two 1 MB blocks on the `zynq7000` profile (dma_sync_single_for_device then _for_cpu of a
//! TO_DEVICE block and of a FROM_DEVICE block: 32768 lines each way at L1 and at the PL310 for
//! each call that maintains), under 3.19 (l2c210) and 3.14 (l2x0), with the profile's functional
//! cache model walking every line (nothing written between rounds, so nothing is dirty).
//!
//! The throughput column counts modelled nanoseconds: one "item" is a nanosecond of the modelled
//! Zynq's time, measured on a round before timing starts, so `N Gitem/s` reads "N times faster
//! than the hardware it models". Target (#12): at least 10 Gitem/s (10x). Figures on this
//! machine: docs/performance.md.

use dmasim::hw::Hw;
use dmasim::hw::model::Model;
use dmasim::mm::physmem::NodeRange;
use dmasim::policy::KernelVersion;
use dmasim::scenario::Scenario;
use dmasim::setup::{Machine, setup_dma_ops};
use dmasim::types::{DmaAttrs, DmaDirection, PhysAddr};

const SCENARIO: &str = include_str!("../scenarios/zynq-streaming.toml");
const MB: u64 = 1 << 20;

fn main() {
    divan::main();
}

#[divan::bench(args = ["3.19", "3.14"])]
fn sync_loop_two_1m_blocks(bencher: divan::Bencher, kernel: &str) {
    let mut s =
        Scenario::parse("zynq-streaming.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    s.set_kernel(KernelVersion::parse(kernel).unwrap()).unwrap();
    let node = NodeRange {
        node: 0,
        start: PhysAddr(0x1000_0000),
        size: 4 * MB,
    };
    let mut m = Machine::boot(&s.profile, vec![node]);
    let mut api = setup_dma_ops(&mut m, &s.device_setup(), 1).unwrap();
    let mut hw: Model = m.hw;
    let tx = PhysAddr(0x1000_0000);
    let rx = PhysAddr(0x1010_0000);
    let to = DmaDirection::ToDevice;
    let from = DmaDirection::FromDevice;
    let tx = api.map_single(&mut hw, tx, MB, to, DmaAttrs::NONE).unwrap();
    let rx = api
        .map_single(&mut hw, rx, MB, from, DmaAttrs::NONE)
        .unwrap();
    let t0 = hw.now_ps();
    api.sync_single_for_device(&mut hw, tx, MB, to);
    api.sync_single_for_device(&mut hw, rx, MB, from);
    api.sync_single_for_cpu(&mut hw, rx, MB, from);
    api.sync_single_for_cpu(&mut hw, tx, MB, to);
    let modelled_ns = (hw.now_ps() - t0) / 1000;
    hw.clear_ledger();
    bencher
        .counter(divan::counter::ItemsCount::new(modelled_ns))
        .bench_local(|| {
            api.sync_single_for_device(&mut hw, tx, MB, to);
            api.sync_single_for_device(&mut hw, rx, MB, from);
            api.sync_single_for_cpu(&mut hw, rx, MB, from);
            api.sync_single_for_cpu(&mut hw, tx, MB, to);
            hw.clear_ledger();
        });
}
