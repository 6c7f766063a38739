//! Wall time of the model itself on seed 002's loop: one round of the streaming design's syncs of
//! two 1 MB blocks on the `zynq7000` profile (dma_sync_single_for_device then _for_cpu of a
//! TO_DEVICE block and of a FROM_DEVICE block: 32768 lines each way at L1 and at the PL310 for
//! each call that maintains), under 3.19 (l2c210) and 3.14 (l2x0), with the profile's functional
//! cache model.
//!
//! Nothing runs between those syncs in the first bench, so after the first round the caches hold
//! none of either block and each range operation finds no line to step (it prices the block's
//! lines in closed form). The second bench is the
//! program's loop with its data: before each round the CPU writes the TO_DEVICE block (1 MB of
//! dirty lines for the cleans to write back) and after it reads the FROM_DEVICE block (filling
//! the lines the next round's invalidates discard). Those accesses cost no modelled time (the
//! streaming design's `cpu = "write_all"`, state only), so their wall time counts against the
//! ratio.
//!
//! The throughput column counts modelled nanoseconds: one "item" is a nanosecond of the modelled
//! Zynq's time, measured on a round before timing starts, so `N Gitem/s` reads "N times faster
//! than the hardware it models". Target (#12): at least 10 Gitem/s (10x). Figures on this
//! machine: docs/performance.md.

use dmasim::hw::Hw;
use dmasim::hw::cache::Access;
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
    sync_loop(bencher, kernel, false);
}

#[divan::bench(args = ["3.19", "3.14"])]
fn sync_loop_cpu_writes_tx_reads_rx(bencher: divan::Bencher, kernel: &str) {
    sync_loop(bencher, kernel, true);
}

fn sync_loop(bencher: divan::Bencher, kernel: &str, touch: bool) {
    let mut s =
        Scenario::parse("zynq-streaming.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    s.set_kernel(KernelVersion::parse(kernel).unwrap()).unwrap();
    let node = NodeRange {
        node: 0,
        start: PhysAddr(0x1000_0000),
        size: 4 * MB,
    };
    let mut m = Machine::boot(&s.profile, vec![node]);
    let api = setup_dma_ops(&mut m, &s.device_setup(), 1).unwrap();
    let mut hw: Model = m.hw;
    let tx = PhysAddr(0x1000_0000);
    let rx = PhysAddr(0x1010_0000);
    let to = DmaDirection::ToDevice;
    let from = DmaDirection::FromDevice;
    let tx = api.map_single(&mut hw, tx, MB, to, DmaAttrs::NONE).unwrap();
    let rx = api
        .map_single(&mut hw, rx, MB, from, DmaAttrs::NONE)
        .unwrap();
    let round = |hw: &mut Model| {
        if touch {
            hw.cpu_touch(Access::Write, PhysAddr(0x1000_0000), MB);
        }
        api.sync_single_for_device(hw, tx, MB, to);
        api.sync_single_for_device(hw, rx, MB, from);
        api.sync_single_for_cpu(hw, rx, MB, from);
        api.sync_single_for_cpu(hw, tx, MB, to);
        if touch {
            hw.cpu_touch(Access::Read, PhysAddr(0x1010_0000), MB);
        }
    };
    // Two rounds first: the first from empty caches, the second the steady state timed below.
    round(&mut hw);
    let t0 = hw.now_ps();
    round(&mut hw);
    let modelled_ns = (hw.now_ps() - t0) / 1000;
    let t1 = hw.now_ps();
    round(&mut hw);
    assert_eq!(
        (hw.now_ps() - t1) / 1000,
        modelled_ns,
        "not yet the steady state"
    );
    hw.clear_ledger();
    bencher
        .counter(divan::counter::ItemsCount::new(modelled_ns))
        .bench_local(|| {
            round(&mut hw);
            hw.clear_ledger();
        });
}
