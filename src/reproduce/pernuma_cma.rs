//! Seed 003: per-NUMA CMA (Linux 5.10, `cma_pernuma=`) and the SMMUv3's CMD_SYNC latency.
//!
//! Boots the kunpeng920 profile twice under the 5.10 rules: with only the default CMA area
//! (`cma=64M`, which arm64 places below 4 GiB, on node 0) and with `cma_pernuma=32M` as well.
//! Each time the SMMUv3 on node 2 probes (`arm_smmu_init_structures`: command queue, event
//! queue and stream table from `dmam_alloc_coherent()`), and the node each allocation got is
//! whatever dma-direct's rules gave it. Then, on a CPU of node 2, a lone `CMD_SYNC` is sent into
//! the empty queue (`arm_smmu_cmdq_issue_sync`), and its time — the protocol run against the
//! topology by the Model — is compared with the published figures. Model-only rows give a strict
//! `iommu_unmap()` of 4 KB through the same SMMU (one `CMD_TLBI_NH_VA` and a `CMD_SYNC`): no
//! figure was published for it.

use super::{Report, Row, RowBuilder};
use crate::device::Device;
use crate::dma::contiguous::{CmaBoot, CmaCmdline, Served};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw, SwKey};
use crate::input::InputError;
use crate::iommu::Prot;
use crate::iommu::arm_smmu_v3::{Cmdq, SmmuV3Idr1, SmmuV3Structures, arm_smmu_init_structures};
use crate::platform::Profile;
use crate::platform::numa::InitiatorKind;
use crate::policy::{KernelVersion, Policies, Target};
use crate::setup::{
    IommuConfig, SmmuModel, dma_coherent_init, iommu_domain_alloc_with_cmdq, numa_lines,
    numa_memory,
};
use crate::types::{IovaAddr, PhysAddr};

const PROFILE: &str = "kunpeng920";
const KERNEL: KernelVersion = KernelVersion(5, 10);
const MIB: u64 = 1 << 20;
/// The default area's size (`cma=`) and the per-node areas' (`cma_pernuma=`).
const CMA: u64 = 64 * MIB;
const CMA_PERNUMA: u64 = 32 * MIB;
/// What the SMMU's IDR1 is assumed to report: the same as every run that probes it.
const IDR1: SmmuV3Idr1 = crate::setup::ASSUMED_IDR1;
/// Calls averaged per row (the model is deterministic; a run of calls shows that nothing
/// accumulates from one to the next).
const CALLS: u64 = 1000;

/// One boot and what it measured.
struct Case {
    structures: SmmuV3Structures,
    sync_ns: f64,
    unmap_ns: f64,
    unmap_cmds: u64,
    unmap_syncs: u64,
    /// The node of the domain's top-level table.
    pgd_node: Option<u32>,
}

fn area(s: &Served) -> String {
    match s {
        Served::Area(a) => format!("cma:{a}"),
        Served::PageAllocator => "page allocator".into(),
    }
}

fn err(msg: String) -> InputError {
    InputError::new(&format!("profiles/{PROFILE}.toml"), msg)
}

fn run_case(profile: &Profile, boot: &CmaBoot) -> Result<Case, InputError> {
    let topo = profile
        .numa
        .as_ref()
        .ok_or_else(|| err("the profile has no [numa] topology".into()))?;
    let smmu = topo
        .first_of(InitiatorKind::Smmu)
        .ok_or_else(|| err("the topology names no SMMU initiator".into()))?;
    // The CPU that sends and waits runs on the SMMU's node (see the assumptions).
    let cpu_node = smmu.node;
    let lines = numa_lines(profile, cpu_node)
        .ok_or_else(|| err("the topology has no numa.line_ns".into()))?;
    let mut mem = numa_memory(profile, vec![]);
    let mut coh = dma_coherent_init(&mut mem, KERNEL, boot);
    let mut hw = Model::new(profile.model.clone());
    hw.set_numa(lines);
    let dev = Device {
        numa_node: Some(smmu.node),
        ..Device::new(&smmu.name, true, 44)
    };
    let structures = arm_smmu_init_structures(&mut hw, &mut coh, &mut mem, &dev, IDR1)
        .map_err(|e| err(format!("SMMUv3 probe: {e}")))?;

    // A lone CMD_SYNC into the empty queue.
    let cmdq = Cmdq::new(structures.cmdq.max_n_shift);
    let cost = hw.sw_cost(SwKey::ArmSmmuCmdqIssueCmdlist);
    let t0 = hw.now_ps();
    for _ in 0..CALLS {
        cmdq.issue_sync(&mut hw, cost);
    }
    let sync_ns = (hw.now_ps() - t0) as f64 / CALLS as f64 / 1000.0;

    // A strict 4 KB unmap through a stage-1 domain of this SMMU.
    let range_inv = profile.model.smmu.is_some_and(|s| s.range_inv);
    let cfg = IommuConfig {
        granule: 4096,
        ias: 48,
        smmu: SmmuModel::SmmuV3 { range_inv },
        coherent_walk: true,
        node: smmu.node,
    };
    let policies = Policies::preset(KERNEL, &Target::of(profile, true, false, false));
    let dom = iommu_domain_alloc_with_cmdq(
        &mut hw,
        &cfg,
        profile,
        &policies,
        numa_memory(profile, vec![]).shared(),
        Cmdq::new(structures.cmdq.max_n_shift),
    )
    .map_err(|e| err(e.to_string()))?;
    let pgd_node = topo.node_of(dom.pgtable.ttbr().0);
    let iova = IovaAddr(1 << 32);
    let (mut unmap_ps, before) = (0u64, hw.ledger().totals());
    for _ in 0..CALLS {
        dom.iommu_map(&mut hw, iova, PhysAddr(3 << 37), 4096, Prot::RW)
            .map_err(|e| err(format!("iommu_map: {e}")))?;
        let t = hw.now_ps();
        dom.iommu_unmap(&mut hw, iova, 4096)
            .map_err(|e| err(format!("iommu_unmap: {e}")))?;
        unmap_ps += hw.now_ps() - t;
    }
    let after = hw.ledger().totals();
    let per = |c: Counter| (after[c as usize] - before[c as usize]) / CALLS;
    Ok(Case {
        structures,
        sync_ns,
        unmap_ns: unmap_ps as f64 / CALLS as f64 / 1000.0,
        unmap_cmds: per(Counter::CmdqTlbiNhVa),
        unmap_syncs: per(Counter::CmdqSync),
        pgd_node,
    })
}

fn placement(c: &Case) -> serde_json::Map<String, serde_json::Value> {
    let s = &c.structures;
    let mut m = serde_json::Map::new();
    for (name, a) in [
        ("cmdq", &s.cmdq.alloc),
        ("evtq", &s.evtq.alloc),
        ("strtab_l1", &s.strtab_l1),
    ] {
        m.insert(
            name.into(),
            serde_json::json!({
                "bytes": a.size,
                "node": a.node,
                "served": area(&a.served),
            }),
        );
    }
    m
}

pub fn run() -> Result<Report, InputError> {
    let profile = Profile::load(PROFILE)?;
    let published = crate::published::get("pernuma-cma").expect("embedded");
    let cma = Some(CmaCmdline {
        size: CMA,
        base: 0,
        limit: 0,
    });
    let default = run_case(
        &profile,
        &CmaBoot {
            cma,
            ..CmaBoot::default()
        },
    )?;
    let pernuma = run_case(
        &profile,
        &CmaBoot {
            cma,
            cma_pernuma: Some(CMA_PERNUMA),
            ..CmaBoot::default()
        },
    )?;
    let b = RowBuilder {
        published: &published,
        profile: &profile,
    };
    let mut rows: Vec<Row> = Vec::new();
    let node = |c: &Case| c.structures.cmdq.alloc.node;
    for (id, c) in [
        ("cmd_sync.node0_ns", &default),
        ("cmd_sync.node0_ns.cover_letter", &default),
        ("cmd_sync.node2_ns", &pernuma),
    ] {
        let mut r = b.row(
            id,
            "ns",
            &format!("CMD_SYNC on an empty queue, queue on node {}", node(c)),
            c.sync_ns,
        );
        r.detail = placement(c);
        rows.push(r);
    }
    for (id, c, how) in [
        ("unmap_4k.node0_ns", &default, "cma=64M"),
        ("unmap_4k.node2_ns", &pernuma, "cma=64M cma_pernuma=32M"),
    ] {
        let mut r = b.row(
            id,
            "ns",
            &format!(
                "strict iommu_unmap() of 4 KB through the SMMUv3, {how}: queue on node {} (no published figure)",
                node(c)
            ),
            c.unmap_ns,
        );
        r.detail
            .insert("cmd_tlbi_nh_va".into(), c.unmap_cmds.into());
        r.detail.insert("cmd_sync".into(), c.unmap_syncs.into());
        r.detail.insert("cmdq_node".into(), node(c).into());
        r.detail.insert("pgtable_node".into(), c.pgd_node.into());
        rows.push(r);
    }
    Ok(Report::of(
        &published,
        profile.name(),
        vec![
            "the CPU that sends the CMD_SYNC and polls for it runs on node 2, the SMMU's node: the seed does not say; with the CPU on node 0 the two placements would cost the same (two transfers local and two remote either way), so only a CPU on the SMMU's socket shows the published difference".into(),
            "the time is the whole arm_smmu_cmdq_issue_sync() call (arm_smmu_cmdq_issue_cmdlist with one CMD_SYNC): from writing the command to seeing its MSI payload".into(),
            format!("Linux 5.10 (arm_smmu_cmdq_issue_sync, MSI polling); cma={}M, and cma_pernuma={}M in the after case: sizes not stated, any that holds the queues gives the same placement", CMA / MIB, CMA_PERNUMA / MIB),
            format!("IDR1: CMDQS {}, EVTQS {}, SIDSIZE {} (not published for Hi1620): a command queue of {} KiB, larger than a page, so it reaches CMA as the seed's did; no PRI queue; a 2-level stream table whose level-1 table is one page and so skips CMA", IDR1.cmdqs, IDR1.evtqs, IDR1.sidsize, (16u64 << IDR1.cmdqs) >> 10),
            "the unmap rows add to the SMMU and queue side the iommu core's and io-pgtable's software costs, which the profile holds at instruction counts (no Kunpeng 920 row measures them); page tables come from alloc_pages_node on the SMMU's node (not priced by node: table walks are not modelled)".into(),
        ],
        rows,
    ))
}
