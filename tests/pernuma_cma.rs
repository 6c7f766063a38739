//! Seed 003 end to end: the SMMUv3's probe allocations land where dma-direct's rules put them
//! under the boot's CMA areas, and the CMD_SYNC protocol prices the queue's node.

use dmasim::device::Device;
use dmasim::dma::contiguous::{CmaBoot, CmaCmdline, Served};
use dmasim::hw::model::Model;
use dmasim::hw::{Counter, Hw, SwKey};
use dmasim::iommu::arm_smmu_v3::{Cmdq, SmmuV3Idr1, SmmuV3Structures, arm_smmu_init_structures};
use dmasim::platform::Profile;
use dmasim::policy::KernelVersion;
use dmasim::setup::{dma_coherent_init, numa_lines, numa_memory};

const MIB: u64 = 1 << 20;
const IDR1: SmmuV3Idr1 = SmmuV3Idr1 {
    cmdqs: 11,
    evtqs: 11,
    sidsize: 16,
};

fn boot(pernuma: Option<u64>) -> CmaBoot {
    CmaBoot {
        cma: Some(CmaCmdline {
            size: 64 * MIB,
            base: 0,
            limit: 0,
        }),
        cma_pernuma: pernuma,
        ..CmaBoot::default()
    }
}

/// Probe the node-2 SMMU of kunpeng920 under `kernel` and `b`; the CPU runs on `cpu_node`.
fn probe(kernel: KernelVersion, b: &CmaBoot, cpu_node: u32) -> (Model, SmmuV3Structures) {
    let p = Profile::load("kunpeng920").unwrap();
    let mut mem = numa_memory(&p, vec![]);
    let mut coh = dma_coherent_init(&mut mem, kernel, b);
    let mut hw = Model::new(p.model.clone());
    hw.set_numa(numa_lines(&p, cpu_node).expect("kunpeng920 has numa.line_ns"));
    let dev = Device {
        numa_node: Some(2),
        ..Device::new("smmu-socket1", true, 44)
    };
    let s = arm_smmu_init_structures(&mut hw, &mut coh, &mut mem, &dev, IDR1).unwrap();
    (hw, s)
}

fn lone_sync_ps(hw: &mut Model, s: &SmmuV3Structures) -> u64 {
    let q = Cmdq::new(s.cmdq.max_n_shift);
    let cost = hw.sw_cost(SwKey::ArmSmmuCmdqIssueCmdlist);
    let t = hw.now_ps();
    q.issue_sync(hw, cost);
    hw.now_ps() - t
}

#[test]
fn default_cma_puts_the_queues_on_node_0_and_cma_pernuma_on_the_smmus_node() {
    let (mut hw, s) = probe(KernelVersion(5, 10), &boot(None), 2);
    assert_eq!(s.cmdq.alloc.size, 32 << 10);
    assert_eq!(s.cmdq.max_n_shift, 11);
    assert_eq!(
        (s.cmdq.alloc.node, &s.cmdq.alloc.served),
        (0, &Served::Area("reserved".into()))
    );
    assert_eq!(s.evtq.alloc.size, 64 << 10);
    assert_eq!(s.evtq.alloc.node, 0);
    // The level-1 stream table of a 16-bit SID space is 256 descriptors: one page, no CMA.
    assert_eq!(s.strtab_l1.size, 4096);
    assert_eq!(
        (s.strtab_l1.node, &s.strtab_l1.served),
        (2, &Served::PageAllocator)
    );
    assert_eq!(hw.cmdq_node(), Some(0));
    assert_eq!(hw.ledger().totals()[Counter::SmmuCmdqBase as usize], 1);

    let (hw, s) = probe(KernelVersion(5, 10), &boot(Some(32 * MIB)), 2);
    assert_eq!(
        (s.cmdq.alloc.node, &s.cmdq.alloc.served),
        (2, &Served::Area("pernuma2".into()))
    );
    assert_eq!(s.evtq.alloc.node, 2);
    assert_eq!(hw.cmdq_node(), Some(2));

    // Before 5.10 cma_pernuma= reserves nothing: the queue stays on node 0.
    let (hw, s) = probe(KernelVersion(5, 9), &boot(Some(32 * MIB)), 2);
    assert_eq!(s.cmdq.alloc.node, 0);
    assert_eq!(hw.cmdq_node(), Some(0));
}

#[test]
fn a_lone_cmd_sync_costs_four_line_transfers_more_from_the_far_node() {
    let p = Profile::load("kunpeng920").unwrap();
    let line = p.numa.as_ref().unwrap().line_ps.clone().unwrap();
    let (mut far, sf) = probe(KernelVersion(5, 10), &boot(None), 2);
    let (mut near, sn) = probe(KernelVersion(5, 10), &boot(Some(32 * MIB)), 2);
    let (tf, tn) = (lone_sync_ps(&mut far, &sf), lone_sync_ps(&mut near, &sn));
    // CPU and SMMU both on node 2: each of the four transfers moves from node 0's price to
    // node 2's.
    assert_eq!(tf - tn, 4 * (line[2][0] - line[2][2]));
    assert_eq!(far.ledger().totals()[Counter::CmdqSync as usize], 1);
    assert_eq!(far.ledger().totals()[Counter::CmdqBatch as usize], 1);
    // A CPU on the queue's node 0 sees the SMMU's two remote transfers and two local ones of
    // its own, whichever of the two placements.
    let (mut cpu0, s0) = probe(KernelVersion(5, 10), &boot(None), 0);
    let t0 = lone_sync_ps(&mut cpu0, &s0);
    assert_eq!(tf - t0, 2 * (line[2][0] - line[0][0]));
}

#[test]
fn reproduce_pernuma_cma_is_within_ten_percent_with_one_fitted_parameter() {
    let r = (dmasim::reproduce::find("pernuma-cma").unwrap().run)().unwrap();
    let row = |id: &str| {
        r.rows
            .iter()
            .find(|x| x.id == format!("pernuma-cma/{id}"))
            .unwrap()
    };
    let (n0, n2) = (row("cmd_sync.node0_ns"), row("cmd_sync.node2_ns"));
    assert!(n0.error.unwrap().abs() < 10.0, "{n0:?}");
    assert!(n2.error.unwrap().abs() < 10.0, "{n2:?}");
    assert!(n0.model > 550.0);
    assert_eq!(n0.fitted_params, ["numa.line_ns"]);
    assert!(
        n2.fitted_params.is_empty(),
        "the node-2 row is a prediction"
    );
    let fitted: Vec<String> = r
        .rows
        .iter()
        .flat_map(|x| x.fitted_params.clone())
        .collect();
    assert!(fitted.iter().all(|k| k == "numa.line_ns"));
    // The unmap rows: one TLBI and one sync each, slower with the far queue.
    let (u0, u2) = (row("unmap_4k.node0_ns"), row("unmap_4k.node2_ns"));
    assert!(u0.published.is_none() && u2.published.is_none());
    assert_eq!(u0.detail["cmd_tlbi_nh_va"], 1);
    assert_eq!(u0.detail["cmd_sync"], 1);
    // io-pgtable's tables come from the SMMU's node whatever the CMA areas.
    assert_eq!(u0.detail["pgtable_node"], 2);
    assert_eq!(u2.detail["pgtable_node"], 2);
    assert!(u0.model > u2.model);
}

/// A strict 4 KB `dma_unmap_single` behind kunpeng920's SMMUv3 from a driver on node 2: the
/// command list of every unmap runs the queue's protocol against the node the probe put the
/// queue on. Without `cma_pernuma` the queue lands in the default area on node 0; with it, in
/// node 2's area. The difference is the protocol's four line transfers (the CPU's stores, the
/// SMMU's command fetch, its MSI write, the CPU's reload), each cross-socket against local.
mod streaming_unmap {
    use dmasim::hw::Counter;
    use dmasim::platform::Profile;
    use dmasim::scenario::{Outcome, RunResult, Scenario, execute};

    const SCENARIO: &str = r#"
[scenario]
name = "kp-unmap"
platform = "kunpeng920"
kernel = "5.10"

[boot]
cma = "64M"

[device]
name = "nic"
coherent = true
dma_mask_bits = 64
numa_node = 2

[iommu]
granule = "4K"
ias = 48

[workload]
kind = "streaming"
buffer = "4K"
entry = "4K"
calls = "map_single+unmap_single"
direction = "to_device"
iterations = 10
"#;

    fn run(text: &str) -> RunResult {
        let s = Scenario::parse("kp.toml", text, std::path::Path::new(".")).unwrap();
        match execute(&s) {
            Ok(Outcome::Streaming(r)) => r,
            _ => panic!("a streaming result"),
        }
    }

    fn unmap_ps(r: &RunResult) -> f64 {
        r.call("dma_unmap_single").unwrap().mean_ns() * 1000.0
    }

    #[test]
    fn the_queues_node_prices_every_unmap() {
        let remote = run(SCENARIO);
        let local = run(&SCENARIO.replace("cma = \"64M\"", "cma = \"64M\"\ncma_pernuma = \"16M\""));
        for r in [&remote, &local] {
            assert_eq!(r.count(Counter::CmdqSync), 10);
            assert_eq!(r.count(Counter::CmdqTlbiNhVa), 10);
        }
        let line = Profile::load("kunpeng920")
            .unwrap()
            .numa
            .unwrap()
            .line_ps
            .unwrap();
        // CPU and SMMU on node 2: four transfers from node 0's queue, or four within node 2.
        let protocol = 4.0 * (line[2][0] as f64 - line[2][2] as f64);
        let diff = unmap_ps(&remote) - unmap_ps(&local);
        assert!((diff - protocol).abs() < 1.0, "{diff} vs {protocol}");
        // Both pinned (ps per unmap), as the profile prices them today.
        assert_eq!(unmap_ps(&remote).round(), 686_628.0);
        assert_eq!(unmap_ps(&local).round(), 360_228.0);
        // The driver on node 0 with the queue there: its own two transfers are local, the
        // SMMU's two cross the sockets.
        let node0 = run(&SCENARIO.replace("numa_node = 2", "numa_node = 0"));
        let want = 2.0 * (line[0][0] as f64 + line[2][0] as f64);
        let diff = unmap_ps(&node0) - unmap_ps(&local);
        assert!(
            (diff - (want - 4.0 * line[2][2] as f64)).abs() < 1.0,
            "{diff}"
        );
    }
}

/// With CMA configured, 5.10 caps a queue at `PAGE_SHIFT + CONFIG_CMA_ALIGNMENT` bytes (1 MiB:
/// 2^16 commands of 16 bytes, 2^15 events of 32), whatever larger size IDR1 offers.
#[test]
fn queues_are_capped_at_the_cma_alignment() {
    let p = Profile::load("kunpeng920").unwrap();
    let b = boot(Some(16 * MIB));
    let mut mem = numa_memory(&p, vec![]);
    let mut coh = dma_coherent_init(&mut mem, KernelVersion(5, 10), &b);
    let mut hw = Model::new(p.model.clone());
    let dev = Device {
        numa_node: Some(2),
        ..Device::new("smmu-socket1", true, 44)
    };
    let big = SmmuV3Idr1 {
        cmdqs: 19,
        evtqs: 19,
        sidsize: 16,
    };
    let s = arm_smmu_init_structures(&mut hw, &mut coh, &mut mem, &dev, big).unwrap();
    assert_eq!((s.cmdq.max_n_shift, s.cmdq.alloc.size), (16, 1 << 20));
    assert_eq!((s.evtq.max_n_shift, s.evtq.alloc.size), (15, 1 << 20));
}
