//! Setup: from a checked scenario to a running machine, built once, the way the kernel's boot and
//! probe paths build it.
//!
//! Kernel counterpart: the boot-time `swiotlb_init()` (and 2012's `swiotlb_init` +
//! `pci_swiotlb_detect` choosing `swiotlb_dma_ops` on x86-64, until 5.0), `arch_setup_dma_ops()` and
//! `iommu_setup_dma_ops()` at probe (which `dma_map_ops` a device gets), and
//! `iommu_domain_alloc()` → `alloc_io_pgtable_ops()` with the SMMU driver's flush ops and the
//! iommu core's unmap split.
//!
//! What it models: the platform's hardware model and physical memory ([`Machine`]), and for each
//! device the ops the kernel would give it ([`DmaOpsKind`]): dma-direct; dma-direct over a
//! swiotlb pool with the release's rules; 2012's x86-64 `swiotlb_dma_ops`; or iommu-dma over a
//! fresh domain. Every policy is turned into its implementation here, once; runners receive a
//! built [`DmaApi`] and never resolve a policy or compare kernel versions.
//!
//! Invariants: setup charges nothing a runner measures (runners clear the ledger, or measure
//! across their own calls); what the modelled kernel would refuse at boot or probe (a pool that
//! does not fit, a table that cannot be allocated) is a [`SetupError`], never a panic.

use crate::arch::arm::Arm32;
use crate::arch::arm::cache_v7::CacheV7;
use crate::arch::arm64::Arm64;
use crate::arch::x86::X86Flush;
use crate::arch::{ArchOps, Unshared};
use crate::device::Device;
use crate::dma::arm_dma::ArmDmaOps;
use crate::dma::coherent::CoherentError;
use crate::dma::direct::DmaDirect;
use crate::dma::mapping::DmaApi;
use crate::dma::swiotlb::x86_2012::{InsnGroups, Swiotlb2012Config, Swiotlb2012Ops};
use crate::dma::swiotlb::{Areas, Release, Swiotlb, SwiotlbConfig, SwiotlbError};
use crate::dma::{DmaError, DmaMapOps};
use crate::hw::DeviceHw;
use crate::hw::model::Model;
use crate::hw::{CacheOp, Hw};
use crate::iommu::arm_smmu::ArmSmmuDomain;
use crate::iommu::arm_smmu_v3::{
    ArmSmmuV3Domain, Cmdq, SmmuV3Features, SmmuV3Idr1, SmmuV3Structures, arm_smmu_init_structures,
};
use crate::iommu::core::IommuDomain;
use crate::iommu::dma_iommu::IommuDma;
use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
use crate::iommu::{IommuError, IommuFlushOps};
use crate::mm::physmem::{NodeRange, PhysMem, PhysMemError, SharedPhysMem};
use crate::platform::{Arch, Profile};
use crate::policy::Policies;
use crate::scatterlist::SgTable;
use crate::types::PhysAddr;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection};

/// Why the modelled kernel could not set the machine up, one variant per cause, each carrying the
/// error of the layer that refused. Every one is a refusal of the modelled kernel (exit status 3),
/// never dmasim's own failure: that is [`crate::scenario::Bug`].
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// `swiotlb_init()`: the bounce pool's size, areas or memory.
    #[error("swiotlb_init: {0}")]
    Swiotlb(#[source] SwiotlbError),
    /// `iommu_domain_alloc()`: the page table or the SMMU driver's domain.
    #[error("iommu_domain_alloc: {0}")]
    Domain(#[source] IommuError),
    /// `iommu_dma_init_domain()`: the domain's IOVA allocator.
    #[error("IOVA domain: {0}")]
    IovaDomain(#[source] IommuError),
    /// An IOMMU workload in a scenario without an `[iommu]` domain (its checks require one).
    #[error("scenario `{0}` has no [iommu] domain")]
    NoDomain(String),
    /// A device said to sit behind the IOMMU in a scenario without an `[iommu]` domain.
    #[error("device {0} has no [iommu] to sit behind")]
    NoIommuFor(String),
    /// A run that places memory by node on a platform without a `[numa]` topology.
    #[error("the platform has no [numa] topology")]
    NoTopology,
    /// A run that probes the SMMU on a topology that names none.
    #[error("the topology names no SMMU")]
    NoSmmu,
    /// The SMMUv3 boot on a platform without what it needs (named).
    #[error("SMMUv3 probe: the platform has no {0}")]
    SmmuProbeNeeds(&'static str),
    /// `arm_smmu_init_structures()`: the SMMU's queues could not be allocated.
    #[error("SMMUv3 probe of {smmu}: {source}")]
    SmmuProbe {
        smmu: String,
        #[source]
        source: CoherentError,
    },
    /// A driver's buffers, allocated before it opens the device.
    #[error("buffer allocation: {0}")]
    Buffer(#[source] PhysMemError),
    /// A driver could not open the device (the PL DMA engine's blocks or their mappings). The
    /// driver's own error, boxed: drivers sit above setup, so setup names none of their types.
    #[error("{driver}: {source}")]
    DriverOpen {
        driver: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// ixgbe's receive ring could not be mapped: at open, or refilled while forwarding.
    #[error(transparent)]
    RxRing(DmaError),
}

/// The hardware model and physical memory of one run.
pub struct Machine {
    pub hw: Model,
    pub mem: SharedPhysMem,
    /// The SMMUv3 probed at boot on a NUMA platform ([`Machine::boot_numa_smmu_v3`]): where its
    /// command queue lives. An IOMMU domain set up on this machine issues into that queue.
    pub smmu: Option<SmmuV3Probe>,
}

/// What the SMMUv3's probe left behind: its node and the structures `arm_smmu_init_structures()`
/// allocated (the command queue's memory, and so its home node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmmuV3Probe {
    pub name: String,
    pub node: u32,
    pub structures: SmmuV3Structures,
}

impl SmmuV3Probe {
    /// The command queue's home node.
    pub fn cmdq_node(&self) -> u32 {
        self.structures.cmdq.alloc.node
    }
}

/// IDR1 as setup assumes an SMMUv3 reports it when nothing says otherwise: a 2^11-entry
/// (32 KiB) command queue and event queue, 16-bit stream IDs. No Hi1620 value is published; 32
/// KiB is larger than a page, so the queue's allocation reaches CMA as seed 003's did.
pub const ASSUMED_IDR1: SmmuV3Idr1 = SmmuV3Idr1 {
    cmdqs: 11,
    evtqs: 11,
    sidsize: 16,
};

/// The SMMUv3's own DMA mask at probe (`dma_set_mask_and_coherent` with IDR5.OAS): 44 bits,
/// Hi1620's output address size.
pub const SMMU_DMA_MASK_BITS: u32 = 44;

impl Machine {
    /// Power on: the platform's cost model and memory laid out as `nodes`.
    pub fn boot(profile: &Profile, nodes: Vec<NodeRange>) -> Machine {
        Machine {
            hw: Model::new(profile.model.clone()),
            mem: PhysMem::new(nodes).shared(),
            smmu: None,
        }
    }

    /// Whether a run with an `[iommu]` domain of `cfg` on `profile` boots as
    /// [`Machine::boot_numa_smmu_v3`] does: an SMMUv3 domain on a platform whose topology names
    /// an SMMU and prices line transfers.
    pub fn numa_smmu_v3(profile: &Profile, cfg: Option<&IommuConfig>) -> bool {
        matches!(cfg, Some(c) if matches!(c.smmu, SmmuModel::SmmuV3 { .. }))
            && profile.numa.as_ref().is_some_and(|t| {
                t.line_ps.is_some()
                    && t.first_of(crate::platform::numa::InitiatorKind::Smmu)
                        .is_some()
            })
    }

    /// Boot a NUMA platform with an SMMUv3 as the kernel does before any driver probes: memory
    /// as the topology lays it out, boot's CMA areas (`boot`), then the SMMU's probe
    /// (`arm_smmu_init_structures()`, its queues from `dmam_alloc_coherent()` for the SMMU's own
    /// device on its node) and the `CMDQ_BASE` write that tells it where its commands live.
    /// From then on every command list any path issues runs its protocol against the queue's
    /// home node, with the CPU making calls on `cpu_node`. What the modelled kernel cannot
    /// allocate at probe is a [`SetupError`].
    pub fn boot_numa_smmu_v3(
        profile: &Profile,
        kernel: crate::policy::KernelVersion,
        boot: &crate::dma::contiguous::CmaBoot,
        cpu_node: u32,
    ) -> Result<Machine, SetupError> {
        let no = SetupError::SmmuProbeNeeds;
        let topo = profile.numa.as_ref().ok_or_else(|| no("[numa] topology"))?;
        let init = topo
            .first_of(crate::platform::numa::InitiatorKind::Smmu)
            .ok_or_else(|| no("SMMU initiator in its topology"))?;
        let lines = numa_lines(profile, cpu_node).ok_or_else(|| no("numa.line_ns"))?;
        let mut hw = Model::new(profile.model.clone());
        hw.set_numa(lines);
        let mut mem = numa_memory(profile, vec![]);
        let mut coh = dma_coherent_init(&mut mem, kernel, boot);
        let dev = Device {
            numa_node: Some(init.node),
            ..Device::new(&init.name, true, SMMU_DMA_MASK_BITS)
        };
        let back = hw.enter(crate::frame_id!("arm_smmu_device_probe"));
        let st = arm_smmu_init_structures(&mut hw, &mut coh, &mut mem, &dev, ASSUMED_IDR1);
        hw.leave(back);
        let structures = st.map_err(|source| SetupError::SmmuProbe {
            smmu: init.name.clone(),
            source,
        })?;
        Ok(Machine {
            hw,
            mem: mem.shared(),
            smmu: Some(SmmuV3Probe {
                name: init.name.clone(),
                node: init.node,
                structures,
            }),
        })
    }
}

/// The arch layer's cache maintenance for a profile's CPU under these policies.
pub fn arch_dma(profile: &Profile, policies: &Policies) -> ArchOps {
    match profile.arch() {
        Arch::Arm64 => Arm64::new(policies.arm64_dir_rules).into(),
        Arch::X86_64 => X86Flush {
            op: CacheOp::CleanInval,
        }
        .into(),
        Arch::Armv7 => arm32(profile, policies).into(),
    }
}

/// ARMv7's cache maintenance under the release's cache-v7.S and cache-l2x0.c: the outer cache
/// is a PL310 from r3p1 (checked when the profile was loaded) of the profile's size
/// (`l2x0_size`, which the kernel reads from `AUX_CTRL`).
pub fn arm32(profile: &Profile, policies: &Policies) -> Arm32 {
    let v7 = CacheV7 {
        end: policies.v7_dsb,
        errata_764369: policies.arm_errata_764369,
    };
    let outer = profile.model.outer.map(|_| {
        let kib = profile
            .file
            .outer_cache
            .as_ref()
            .map_or(0, |o| *o.size_kib.value.get_ref() as u64);
        policies.outer_range.fns(kib << 10)
    });
    Arm32::new(v7, outer)
        .with_unmap_area_to_device(policies.kernel < crate::policy::KernelVersion(3, 15))
}

/// The swiotlb pool a scenario sets up (`[swiotlb]`; defaults: 64 MiB, not forced, areas as the
/// release has them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwiotlbSpec {
    pub size: u64,
    pub force: bool,
    /// `None`: the release's default (one pool lock with 3.6's rules; one area per CPU, rounded
    /// up to a power of two, with 6.0's).
    pub areas: Option<u32>,
}

impl Default for SwiotlbSpec {
    fn default() -> Self {
        SwiotlbSpec {
            size: crate::dma::swiotlb::IO_TLB_DEFAULT_SIZE,
            force: false,
            areas: None,
        }
    }
}

/// Which SMMU driver's flush ops the domain uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmmuModel {
    /// arm-smmu (MMU-500, SMMUv2): register-programmed TLBIVA/TLBIVAL/TLBIASID + TLBSYNC.
    Mmu500,
    /// arm-smmu-v3: command queue; `range_inv` on SMMUv3.2.
    SmmuV3 { range_inv: bool },
}

impl SmmuModel {
    pub const NAMES: &[&str] = &["mmu-500", "smmu-v3", "smmu-v3.2"];

    pub fn parse(s: &str) -> Option<SmmuModel> {
        match s {
            "mmu-500" => Some(SmmuModel::Mmu500),
            "smmu-v3" => Some(SmmuModel::SmmuV3 { range_inv: false }),
            "smmu-v3.2" => Some(SmmuModel::SmmuV3 { range_inv: true }),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SmmuModel::Mmu500 => "mmu-500",
            SmmuModel::SmmuV3 { range_inv: false } => "smmu-v3",
            SmmuModel::SmmuV3 { range_inv: true } => "smmu-v3.2",
        }
    }
}

/// The domain a scenario maps into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IommuConfig {
    pub granule: u64,
    pub ias: u32,
    pub smmu: SmmuModel,
    /// The SMMU's table walker snoops CPU caches (`dma-coherent` on the SMMU node): no PTE cleaning.
    pub coherent_walk: bool,
    /// `dev_to_node(iommu_dev)`: io-pgtable allocates its tables there
    /// (`__arm_lpae_alloc_pages` → `alloc_pages_node`), falling back along the zonelist.
    pub node: u32,
}

impl IommuConfig {
    /// Whether several CPUs may call a domain of this configuration at once on a machine of
    /// `arch`: both SMMU drivers' flush ops are shared as the kernel
    /// shares them (arm-smmu's context bank lock, arm-smmu-v3's command queue), so only a
    /// non-coherent table walker's PTE cleaning, the arch's cache maintenance, can keep them
    /// apart.
    pub fn cpu_sharing(&self, arch: Arch) -> Result<(), Unshared> {
        // A driver added to SmmuModel answers here for its flush ops.
        match self.smmu {
            SmmuModel::Mmu500 | SmmuModel::SmmuV3 { .. } => {}
        }
        if self.coherent_walk {
            return Ok(());
        }
        crate::arch::cpu_sharing(arch)
    }
}

/// What setup needs to give a device its ops: the platform, the policies in effect, the device,
/// the boot options of swiotlb, the IOMMU domain it sits behind, and which ops it gets.
pub struct DeviceSetup<'a> {
    pub profile: &'a Profile,
    pub policies: &'a Policies,
    pub device: &'a Device,
    pub swiotlb: &'a SwiotlbSpec,
    pub iommu: Option<&'a IommuConfig>,
    pub ops: DmaOpsKind,
}

/// Which `dma_map_ops` a device gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaOpsKind {
    /// dma-direct, no bounce pool.
    Direct,
    /// dma-direct with a swiotlb pool under these rules.
    DirectSwiotlb(Release),
    /// lib/swiotlb.c's own `swiotlb_dma_ops`, as x86-64 had them until 5.0 (one pool lock,
    /// `swiotlb_addr` bookkeeping), with the pool rules of that release.
    Swiotlb2012(Release),
    /// iommu-dma over a domain of the scenario's `[iommu]`.
    IommuDma,
    /// 32-bit ARM's own ops (3.14–4.0): `arm_dma_ops`, or `arm_coherent_dma_ops` for a
    /// `dma-coherent` device.
    ArmDma,
}

impl DmaOpsKind {
    /// Whether several CPUs may share a device's ops of this kind on a machine of `arch` (behind
    /// a domain of `iommu`, for iommu-dma), all calling the one object: the one table of which
    /// ops CPUs can share, which the scenario checks read before a run of several CPUs is set
    /// up (so that setup never meets ops a second CPU cannot call; [`DmaOps::shareable`] reads
    /// the same answer back from what setup built).
    pub fn cpu_sharing(self, arch: Arch, iommu: Option<&IommuConfig>) -> Result<(), Unshared> {
        match self {
            // The arch's cache maintenance, and state shared by handle (swiotlb's pool).
            DmaOpsKind::Direct | DmaOpsKind::DirectSwiotlb(_) => crate::arch::cpu_sharing(arch),
            DmaOpsKind::IommuDma => {
                crate::arch::cpu_sharing(arch)?;
                iommu.map_or(Ok(()), |c| c.cpu_sharing(arch))
            }
            // lib/swiotlb.c's pool under its one lock, and no cache maintenance (x86-64).
            DmaOpsKind::Swiotlb2012(_) => Ok(()),
            // 32-bit ARM's own ops run its cache maintenance directly.
            DmaOpsKind::ArmDma => crate::arch::cpu_sharing(Arch::Armv7),
        }
    }

    /// For reports: which code serves the device.
    pub fn describe(self, p: &Policies) -> String {
        match self {
            DmaOpsKind::Direct => "dma-direct".to_string(),
            DmaOpsKind::DirectSwiotlb(r) => {
                format!("dma-direct over swiotlb ({} rules)", r.name())
            }
            DmaOpsKind::Swiotlb2012(r) => format!(
                "x86 swiotlb_dma_ops ({} rules), one pool lock, swiotlb_addr={}",
                r.name(),
                crate::types::Choice::name(p.swiotlb_addr)
            ),
            DmaOpsKind::IommuDma => "iommu-dma".to_string(),
            DmaOpsKind::ArmDma => format!(
                "arm_dma_ops (outer_range={}, v7_dsb={}, arm_errata_764369={})",
                crate::types::Choice::name(p.outer_range),
                crate::types::Choice::name(p.v7_dsb),
                crate::types::Choice::name(p.arm_errata_764369)
            ),
        }
    }
}

/// `arch_setup_dma_ops()` / `iommu_setup_dma_ops()` (with `swiotlb_init()` before them where the
/// device's ops bounce): the device `s` describes, with its ops, on machine `m`. `cpus` sizes
/// the per-CPU structures (swiotlb areas, IOVA magazines); swiotlb's pool and an IOMMU domain's
/// tables come from node 0.
/// The instruction groups of lib/swiotlb.c 3.6/3.8 as the profile counts them
/// (`[code.swiotlb_2012]`); none when it has no such section, which it may only omit when it
/// prices no function per instruction.
pub fn swiotlb_2012_insns(profile: &Profile) -> InsnGroups {
    let Some(c) = profile
        .file
        .code
        .as_ref()
        .and_then(|c| c.swiotlb_2012.as_ref())
    else {
        return InsnGroups::default();
    };
    let n = crate::platform::Swiotlb2012Code::count;
    InsnGroups {
        frame: n(&c.frame),
        bug_on_dir: n(&c.bug_on_dir),
        saved_reg: n(&c.saved_reg),
        call: n(&c.call),
        test_result: n(&c.test_result),
        range_check: n(&c.range_check),
        compare_result: n(&c.compare_result),
        sync_single_live: n(&c.sync_single_live),
        unmap_single_live: n(&c.unmap_single_live),
        mapping_error_live: n(&c.mapping_error_live),
    }
}

pub fn setup_dma_ops(
    m: &mut Machine,
    s: &DeviceSetup,
    cpus: u32,
) -> Result<DeviceDmaApi, SetupError> {
    let p = s.policies;
    let ops: DmaOps = match s.ops {
        DmaOpsKind::Direct => DmaDirect::new(&m.hw, arch_dma(s.profile, p), p.sync).into(),
        DmaOpsKind::ArmDma => ArmDmaOps::new(arm32(s.profile, p), s.device.coherent).into(),
        DmaOpsKind::DirectSwiotlb(release) => {
            let areas = match (release.has_areas(), s.swiotlb.areas) {
                (false, _) => Areas::Exact(1),
                (true, Some(n)) => Areas::Exact(n),
                (true, None) => Areas::PossibleCpus(cpus),
            };
            let pool = Swiotlb::new(
                &m.hw,
                m.mem.clone(),
                &SwiotlbConfig {
                    size: s.swiotlb.size,
                    areas,
                    release,
                    node: 0,
                    force: s.swiotlb.force,
                },
            )
            .map_err(SetupError::Swiotlb)?;
            DmaDirect::new(&m.hw, arch_dma(s.profile, p), p.sync)
                .with_swiotlb(pool)
                .into()
        }
        DmaOpsKind::Swiotlb2012(release) => Swiotlb2012Ops::new(
            &m.hw,
            m.mem.clone(),
            &Swiotlb2012Config {
                size: s.swiotlb.size,
                node: 0,
                force: s.swiotlb.force,
                release,
                insns: swiotlb_2012_insns(s.profile),
            },
            p.swiotlb_addr.bookkeeping(&m.hw, p.phys_addr),
        )
        .map_err(SetupError::Swiotlb)?
        .into(),
        DmaOpsKind::IommuDma => {
            let cfg = s
                .iommu
                .as_ref()
                .ok_or(SetupError::Domain(IommuError::Empty))?;
            // An SMMUv3 probed at boot: the domain's tables on its node, its commands into the
            // queue the probe sized.
            let (cfg, cmdq) = match &m.smmu {
                Some(probe) => (
                    IommuConfig {
                        node: probe.node,
                        ..**cfg
                    },
                    Cmdq::new(probe.structures.cmdq.max_n_shift),
                ),
                None => (**cfg, Cmdq::new(8)),
            };
            let domain =
                iommu_domain_alloc_with_cmdq(&mut m.hw, &cfg, s.profile, p, m.mem.clone(), cmdq)?;
            let dma = IommuDma::new(
                &m.hw,
                domain,
                cpus.max(1) as usize,
                arch_dma(s.profile, p),
                p.sync,
            )
            .map_err(SetupError::IovaDomain)?
            .with_invalidation(&m.hw, p.invalidation)
            .with_release_rules(p.iova.rules(), p.unmap_lookup);
            dma.into()
        }
    };
    let pa = p.phys_addr.resolve(&m.hw);
    let device = s.device.clone().with_default_seg_boundary(p.seg_boundary);
    Ok(DmaApi::new(&m.hw, device, ops).with_phys_addr(pa))
}

/// `iommu_domain_alloc()` → `alloc_io_pgtable_ops()`: a fresh domain with its top-level table in
/// `mem`, the SMMU driver's flush ops under the release's `walk_flush`, and the core's
/// `unmap_split`. A non-coherent table walker gets PTE cleaning through the arch layer.
pub fn iommu_domain_alloc(
    hw: &mut Model,
    cfg: &IommuConfig,
    profile: &Profile,
    p: &Policies,
    mem: SharedPhysMem,
) -> Result<IommuDomain, SetupError> {
    iommu_domain_alloc_with_cmdq(hw, cfg, profile, p, mem, Cmdq::new(8))
}

/// [`iommu_domain_alloc`] for an SMMUv3 whose command queue probe sized (`cmdq`; ignored for an
/// MMU-500).
pub fn iommu_domain_alloc_with_cmdq(
    hw: &mut Model,
    cfg: &IommuConfig,
    profile: &Profile,
    p: &Policies,
    mem: SharedPhysMem,
    cmdq: Cmdq,
) -> Result<IommuDomain, SetupError> {
    let back = hw.enter(crate::frame_id!("iommu_domain_alloc"));
    let r = (|| {
        let walk_sync = (!cfg.coherent_walk).then(|| arch_dma(profile, p));
        let pcfg = IoPgtableCfg {
            block_unmap: p.block_unmap,
            pte_clear: p.pte_clear,
            node: cfg.node,
            ..IoPgtableCfg::new(cfg.granule, cfg.ias)
        };
        let t = ArmLpaeIoPgtable::new(hw, pcfg, mem, walk_sync)?;
        let ops: Box<dyn IommuFlushOps> = match cfg.smmu {
            SmmuModel::Mmu500 => Box::new(
                ArmSmmuDomain::new(hw, 1, p.walk_flush).with_coherent_walk(cfg.coherent_walk),
            ),
            SmmuModel::SmmuV3 { range_inv } => Box::new(
                ArmSmmuV3Domain::new(hw, 1, cfg.granule, SmmuV3Features { range_inv }, cmdq)?
                    .with_rules(hw, p.smmuv3_inv)
                    .with_claim(p.cmdq_claim),
            ),
        };
        Ok(IommuDomain::new(hw, t, ops, p.unmap_split)
            .with_map_sg_returns(crate::policy::map_sg_returns(p.kernel)))
    })();
    hw.leave(back);
    r.map_err(SetupError::Domain)
}

/// Memory for page tables alone (IOMMU workloads that call the core directly): `bytes` at
/// [`TABLE_BASE`].
pub fn table_memory(bytes: u64) -> SharedPhysMem {
    PhysMem::single(PhysAddr(TABLE_BASE), bytes).shared()
}

/// Where page tables of a table-only machine are allocated from.
pub const TABLE_BASE: u64 = 0x8000_0000;

/// Bytes of page-table memory enough for `mapped` bytes of 4K-granule leaves (the worst case):
/// one table per 2 MB plus the upper levels, with room to spare.
pub fn table_bytes(mapped: u64) -> u64 {
    ((64 << 20) + mapped / 256).next_multiple_of(1 << 20)
}

/// Physical memory as the profile's topology lays it out: one range per node with memory, and
/// each node's zonelist in the kernel's fallback order. A profile without `[numa]` gets
/// `fallback` (one node).
pub fn numa_memory(profile: &Profile, fallback: Vec<NodeRange>) -> PhysMem {
    let Some(t) = &profile.numa else {
        return PhysMem::new(fallback);
    };
    let mut mem = PhysMem::new(
        t.memory_nodes()
            .map(|n| NodeRange {
                node: n.id,
                start: PhysAddr(n.mem_base),
                size: n.mem_size,
            })
            .collect(),
    );
    mem.set_zonelists(
        t.memory_nodes()
            .map(|n| {
                let order = t
                    .fallback_order(n.id)
                    .into_iter()
                    .filter(|&o| t.has_memory(o))
                    .collect();
                (n.id, order)
            })
            .collect(),
    );
    mem
}

/// The line transfers of the profile's topology (`[numa] line_ns`), with the CPU making calls on
/// `cpu_node` and the SMMU on its initiator's node; `None` without them, and then the Model
/// prices nothing by node.
pub fn numa_lines(profile: &Profile, cpu_node: u32) -> Option<crate::hw::model::NumaLines> {
    let t = profile.numa.as_ref()?;
    let line_ps = t.line_ps.clone()?;
    let smmu_node = t
        .first_of(crate::platform::numa::InitiatorKind::Smmu)
        .map_or(cpu_node, |i| i.node);
    Some(crate::hw::model::NumaLines {
        memory: t
            .memory_nodes()
            .map(|n| (n.mem_base, n.mem_size, n.id))
            .collect(),
        cpu_node,
        smmu_node,
        line_ps,
    })
}

/// Boot's CMA reservations (`dma_contiguous_reserve()` and the per-node areas, in the
/// release's order) over `mem`, and the coherent allocator over them.
pub fn dma_coherent_init(
    mem: &mut PhysMem,
    kernel: crate::policy::KernelVersion,
    boot: &crate::dma::contiguous::CmaBoot,
) -> crate::dma::coherent::DmaCoherent {
    let nodes: Vec<u32> = mem.nodes().iter().map(|n| n.node).collect();
    let cma = crate::dma::contiguous::Contiguous::reserve(
        mem,
        crate::policy::contiguous_rules(kernel),
        boot,
        &nodes,
    );
    crate::dma::coherent::DmaCoherent::new(cma, nodes.first().copied().unwrap_or(0))
}

/// The `dma_map_ops` a device's API front dispatches to (`dev->dma_ops`, which the kernel's
/// `arch_setup_dma_ops()` installs), chosen once at setup: a closed set held
/// by value, so each call reaches its implementation by a match rather than through a vtable.
pub enum DmaOps {
    Direct(DmaDirect),
    Iommu(Box<IommuDma>),
    ArmDma(ArmDmaOps),
    Swiotlb2012(Swiotlb2012Ops),
}

impl DmaOps {
    /// Whether several CPUs may call these ops at once: what [`DmaOpsKind::cpu_sharing`] said
    /// of their kind before setup, read back from what setup built (32-bit ARM's ops, and any
    /// whose cache maintenance holds its outer cache, run on one CPU).
    pub fn shareable(&self) -> bool {
        match self {
            DmaOps::Direct(o) => o.arch().shareable(),
            DmaOps::Iommu(o) => o.shareable(),
            DmaOps::ArmDma(_) => false,
            DmaOps::Swiotlb2012(_) => true,
        }
    }
}

macro_rules! dma_ops_dispatch {
    ($self:expr, $o:ident => $e:expr) => {
        match $self {
            DmaOps::Direct($o) => $e,
            DmaOps::Iommu($o) => $e,
            DmaOps::ArmDma($o) => $e,
            DmaOps::Swiotlb2012($o) => $e,
        }
    };
}

impl crate::stats::Stats for DmaOps {
    fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        dma_ops_dispatch!(self, o => o.lock_records())
    }
    fn cmdq_stats(&self) -> Option<crate::stats::CmdqStats> {
        dma_ops_dispatch!(self, o => o.cmdq_stats())
    }
    fn swiotlb_stats(&self) -> Option<crate::stats::SwiotlbStats> {
        dma_ops_dispatch!(self, o => o.swiotlb_stats())
    }
}

impl DmaMapOps for DmaOps {
    fn name(&self) -> &'static str {
        dma_ops_dispatch!(self, o => o.name())
    }
    #[inline]
    fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        dma_ops_dispatch!(self, o => o.map_page(hw, dev, phys, size, dir, attrs))
    }
    #[inline]
    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        dma_ops_dispatch!(self, o => o.unmap_page(hw, dev, addr, size, dir, attrs))
    }
    #[inline]
    fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        dma_ops_dispatch!(self, o => o.map_sg(hw, dev, sgt, dir, attrs))
    }
    #[inline]
    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        dma_ops_dispatch!(self, o => o.unmap_sg(hw, dev, sgt, dir, attrs))
    }
    #[inline]
    fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        dma_ops_dispatch!(self, o => o.sync_single_for_cpu(hw, dev, addr, size, dir))
    }
    #[inline]
    fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        dma_ops_dispatch!(self, o => o.sync_single_for_device(hw, dev, addr, size, dir))
    }
    #[inline]
    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        dma_ops_dispatch!(self, o => o.sync_sg_for_cpu(hw, dev, sgt, dir))
    }
    #[inline]
    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        dma_ops_dispatch!(self, o => o.sync_sg_for_device(hw, dev, sgt, dir))
    }
    #[inline]
    fn mapping_error<H: DeviceHw>(&self, hw: &mut H, dev: &Device, addr: DmaAddr) -> bool {
        dma_ops_dispatch!(self, o => o.mapping_error(hw, dev, addr))
    }
    fn next_timer_ps(&self) -> Option<u64> {
        dma_ops_dispatch!(self, o => o.next_timer_ps())
    }
    fn run_timers<H: DeviceHw>(&self, hw: &mut H) -> u64 {
        dma_ops_dispatch!(self, o => o.run_timers(hw))
    }
}

impl From<DmaDirect> for DmaOps {
    fn from(o: DmaDirect) -> DmaOps {
        DmaOps::Direct(o)
    }
}

impl From<IommuDma> for DmaOps {
    fn from(o: IommuDma) -> DmaOps {
        DmaOps::Iommu(Box::new(o))
    }
}

impl From<ArmDmaOps> for DmaOps {
    fn from(o: ArmDmaOps) -> DmaOps {
        DmaOps::ArmDma(o)
    }
}

impl From<Swiotlb2012Ops> for DmaOps {
    fn from(o: Swiotlb2012Ops) -> DmaOps {
        DmaOps::Swiotlb2012(o)
    }
}

/// A device's DMA API as setup builds it for a run.
pub type DeviceDmaApi = DmaApi<DmaOps>;
