//! Wall time of the model itself on seed 003's CMD_SYNC: 1000 lone `CMD_SYNC`s into the empty
//! SMMUv3 command queue of the `kunpeng920` profile (5.10's `arm_smmu_cmdq_issue_sync`, MSI
//! polling, the queue's lines priced by the NUMA topology), with the queue on node 0 (the default
//! CMA area) and on node 2 (`cma_pernuma=`, the SMMU's node), the CPU on the SMMU's node, as
//! `dmasim reproduce pernuma-cma` runs it.
//!
//! The throughput column counts modelled nanoseconds: one "item" is a nanosecond of the modelled
//! machine's time, measured on a run before timing starts, so `N Gitem/s` reads "N times faster
//! than the hardware it models". Target (#12): at least 10 Gitem/s (10x).

use dmasim::hw::model::Model;
use dmasim::hw::{Hw, MmioReg, SmmuPort, SwKey};
use dmasim::iommu::arm_smmu_v3::Cmdq;
use dmasim::platform::Profile;
use dmasim::platform::numa::InitiatorKind;
use dmasim::setup::numa_lines;

fn main() {
    divan::main();
}

const CALLS: u64 = 1000;

#[divan::bench(args = [0, 2])]
fn cmd_sync_1000(bencher: divan::Bencher, queue_node: u32) {
    let profile = Profile::load("kunpeng920").unwrap();
    let topo = profile.numa.as_ref().unwrap();
    let smmu = topo.first_of(InitiatorKind::Smmu).unwrap();
    let mut hw = Model::new(profile.model.clone());
    hw.set_numa(numa_lines(&profile, smmu.node).unwrap());
    // The queue's base on the chosen node, as the SMMU learns it at probe.
    let base = dmasim::setup::numa_memory(&profile, vec![])
        .nodes()
        .iter()
        .find(|n| n.node == queue_node)
        .unwrap()
        .start;
    hw.mmio_write(MmioReg::SmmuCmdqBase, base.0);
    let cmdq = Cmdq::new(8);
    let cost = hw.sw_cost(SwKey::ArmSmmuCmdqIssueCmdlist);
    let t0 = hw.now_ps();
    for _ in 0..CALLS {
        cmdq.issue_sync(&mut hw, cost);
    }
    let modelled_ns = (hw.now_ps() - t0) / 1000;
    hw.clear_ledger();
    bencher
        .counter(divan::counter::ItemsCount::new(modelled_ns))
        .bench_local(|| {
            for _ in 0..CALLS {
                cmdq.issue_sync(&mut hw, cost);
            }
        });
}
