//! Kernel behaviour as typed policies, with one registry and presets per release and platform.
//!
//! Kernel counterpart: the behaviour changes the seeds measure — 7.1's batched cache sync, 5.19's
//! arm64 direction rules, 3.8's swiotlb bookkeeping, 6.0's swiotlb areas, 5.15's io-pgtable
//! `unmap_pages` and Qualcomm's `flush_walk_prefer_tlbiasid`. A `--kernel X.Y` preset picks every
//! policy as that release has it *on that platform* (where the kernel's choice depends on the
//! hardware, the preset reads it from the profile); `--policy key=value` overrides one.
//!
//! Each policy is an enum beside its mechanism implementing [`Choice`]; [`REGISTRY`] knows every
//! one by key, with its choices, description, preset and the platforms it applies to. Nothing
//! else resolves a policy name: setup turns the typed values into implementations once.
//!
//! Invariants: a [`Policies`] value only ever holds valid choices (an unknown name can only fail
//! where it is parsed, as an input error listing the choices); [`REGISTRY`] lists every field of
//! [`Policies`] once, in the order reports print them.

use crate::arch::arm::cache_l2x0::OuterRange;
use crate::arch::arm::cache_v7::{Errata764369, V7Dsb};
use crate::arch::arm64::DirRules;
use crate::arch::x86::physaddr::PhysAddrKind;
use crate::device::SegBoundary;
use crate::dma::swiotlb::Release as SwiotlbRules;
use crate::dma::swiotlb::x86_2012::SwiotlbAddr;
use crate::dma::sync_policy::SyncKind;
use crate::hw::model::{SmmuImpl, SmmuKind};
use crate::iommu::arm_smmu::WalkFlushKind;
use crate::iommu::arm_smmu_v3::{CmdqClaim, SmmuV3Rules};
use crate::iommu::core::SplitKind;
use crate::iommu::dma_fq::Invalidation;
use crate::iommu::dma_iommu::UnmapLookup;
use crate::iommu::io_pgtable_arm::{BlockUnmap, PteClear};
use crate::iommu::iova::IovaRelease;
use crate::platform::{Arch, Profile};

pub use crate::types::Choice;

/// The kernel release a run models, as (major, minor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion(pub u32, pub u32);

/// The newest release whose behaviour dmasim models.
pub const LATEST: KernelVersion = KernelVersion(7, 1);
/// The oldest release whose code dmasim models (2012's swiotlb, Linux 3.6).
pub const OLDEST: KernelVersion = KernelVersion(3, 6);

impl KernelVersion {
    /// `7.1`, `v5.15`, or a uname-style `6.1.55` / `6.1.55-generic` (the patch level and any
    /// suffix do not change the modelled code). Anything outside [`OLDEST`]..=[`LATEST`] is
    /// refused: dmasim has no model of it.
    pub fn parse(s: &str) -> Result<KernelVersion, String> {
        let bad = || {
            format!("expected a release such as \"7.1\", \"v5.15\" or \"6.1.55\", found \"{s}\"")
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        // A local-version or -rc suffix does not change the modelled code.
        let core = t.split('-').next().unwrap_or("");
        let nums: Vec<Option<u32>> = core
            .split('.')
            .map(|p| {
                (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| p.parse().ok())
                    .flatten()
            })
            .collect();
        let v = match nums.as_slice() {
            [Some(a), Some(b)] | [Some(a), Some(b), Some(_)] => KernelVersion(*a, *b),
            _ => return Err(bad()),
        };
        if v < OLDEST || v > LATEST {
            return Err(format!(
                "Linux {v} is not modelled: dmasim models releases {OLDEST} to {LATEST}"
            ));
        }
        Ok(v)
    }

    /// The oldest release that can run the modelled code for `arch` (arm64 was merged in 3.7;
    /// ARMv7 is modelled from 3.14, whose cache-l2x0.c still has the `l2x0_*` range functions
    /// that 3.16 replaced: the `outer_range` policy).
    pub fn oldest_for(arch: Arch) -> KernelVersion {
        match arch {
            Arch::Arm64 => KernelVersion(3, 7),
            Arch::Armv7 => KernelVersion(3, 14),
            Arch::X86_64 => OLDEST,
        }
    }
}

impl KernelVersion {
    /// The newest release whose code dmasim models for `arch`: ARMv7's cache-v7.S and
    /// dma-mapping.c are read as 3.16–4.0 have them (later releases changed `v7_dma_inv_range`'s
    /// edge lines: 6.10's steps past a cleaned first line and may invalidate none), so newer ones
    /// are refused rather than guessed.
    pub fn newest_for(arch: Arch) -> KernelVersion {
        match arch {
            Arch::Armv7 => KernelVersion(4, 0),
            Arch::Arm64 | Arch::X86_64 => LATEST,
        }
    }

    /// Whether `arch` runs this release's modelled code.
    pub fn modelled_on(self, arch: Arch) -> bool {
        (KernelVersion::oldest_for(arch)..=KernelVersion::newest_for(arch)).contains(&self)
    }

    /// Why this release is outside [`KernelVersion::modelled_on`] for `arch`, for error messages.
    pub fn unmodelled_reason(self, arch: Arch) -> String {
        let oldest = KernelVersion::oldest_for(arch);
        let newest = KernelVersion::newest_for(arch);
        match arch {
            Arch::Armv7 => format!(
                "dmasim models ARMv7 with the code of {oldest} to {newest} (earlier releases' cache-l2x0.c and later releases' cache-v7.S are not modelled)"
            ),
            a => format!("{} support was merged in {oldest}", a.name()),
        }
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// What a preset and a policy's applicability depend on besides the release: the platform's
/// hardware and whether the scenario's device sits behind an IOMMU domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub arch: Arch,
    /// The platform's SMMU and whose driver implementation runs it.
    pub smmu: Option<(SmmuKind, SmmuImpl)>,
    /// The scenario maps through an `[iommu]` domain.
    pub iommu: bool,
    /// The device's ops bounce through a swiotlb pool.
    pub swiotlb: bool,
    /// The workload drives a device through the DMA API (not the iommu core directly).
    pub dma_api: bool,
    /// That device is a PCI function, whose bus sets its segment boundary in every release.
    pub pci_device: bool,
    /// The workload takes IOVAs from the allocator.
    pub iova_alloc: bool,
    /// The platform has an outer cache (ARMv7's PL310).
    pub outer_cache: bool,
}

impl Target {
    pub fn of(profile: &Profile, iommu: bool, swiotlb: bool, dma_api: bool) -> Target {
        Target {
            arch: profile.arch(),
            smmu: profile.model.smmu.map(|s| (s.kind, s.imp)),
            iommu,
            swiotlb,
            dma_api,
            pci_device: false,
            iova_alloc: false,
            outer_cache: profile.model.outer.is_some(),
        }
    }

    pub fn with_pci_device(self, pci_device: bool) -> Target {
        Target { pci_device, ..self }
    }

    pub fn with_iova_alloc(self, iova_alloc: bool) -> Target {
        Target { iova_alloc, ..self }
    }
}

/// Every policy a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    pub kernel: KernelVersion,
    pub sync: SyncKind,
    pub arm64_dir_rules: DirRules,
    pub swiotlb_rules: SwiotlbRules,
    pub swiotlb_addr: SwiotlbAddr,
    pub phys_addr: PhysAddrKind,
    pub walk_flush: WalkFlushKind,
    pub smmuv3_inv: SmmuV3Rules,
    pub cmdq_claim: CmdqClaim,
    pub unmap_split: SplitKind,
    pub block_unmap: BlockUnmap,
    pub pte_clear: PteClear,
    pub invalidation: Invalidation,
    pub iova: IovaRelease,
    pub unmap_lookup: UnmapLookup,
    pub seg_boundary: SegBoundary,
    pub outer_range: OuterRange,
    pub v7_dsb: V7Dsb,
    pub arm_errata_764369: Errata764369,
}

/// One policy in the registry.
pub struct PolicyDef {
    pub key: &'static str,
    pub description: &'static str,
    /// How the preset is chosen, in words (for `dmasim policies`).
    pub preset_rule: &'static str,
    pub choices: fn() -> Vec<&'static str>,
    get: fn(&Policies) -> &'static str,
    set: fn(&mut Policies, &str) -> bool,
    preset: fn(KernelVersion, &Target) -> &'static str,
    /// `Err(why)` when the policy has no effect on this target, so overriding it is a mistake.
    applies: fn(&Target) -> Result<(), String>,
}

impl PolicyDef {
    pub fn get(&self, p: &Policies) -> &'static str {
        (self.get)(p)
    }
    pub fn preset(&self, k: KernelVersion, t: &Target) -> &'static str {
        (self.preset)(k, t)
    }
    pub fn applies(&self, t: &Target) -> Result<(), String> {
        (self.applies)(t)
    }
}

fn sync_preset(k: KernelVersion, _: &Target) -> SyncKind {
    if k >= KernelVersion(7, 1) {
        SyncKind::Batched
    } else {
        SyncKind::PerEntry
    }
}

fn dir_rules_preset(k: KernelVersion, _: &Target) -> DirRules {
    if k >= KernelVersion(5, 19) {
        DirRules::Since5_19
    } else {
        DirRules::Pre5_19
    }
}

fn swiotlb_rules_preset(k: KernelVersion, _: &Target) -> SwiotlbRules {
    SwiotlbRules::of(k.0, k.1)
}

fn swiotlb_addr_preset(k: KernelVersion, _: &Target) -> SwiotlbAddr {
    if k >= KernelVersion(3, 8) {
        SwiotlbAddr::Phys
    } else {
        SwiotlbAddr::Virt
    }
}

/// x86-64's `__phys_addr` is out of line until 3.9 inlines it (without `CONFIG_DEBUG_VIRTUAL`);
/// every other architecture's `__pa()` is inline arithmetic in every modelled release.
fn phys_addr_preset(k: KernelVersion, t: &Target) -> PhysAddrKind {
    if t.arch == Arch::X86_64 && k < KernelVersion(3, 9) {
        PhysAddrKind::Call
    } else {
        PhysAddrKind::Inline
    }
}

/// 5.15 sets `flush_walk_prefer_tlbiasid` only in Qualcomm's `qcom_smmu_init_context()`; every
/// other arm-smmu keeps a TLBIVA per granule.
fn walk_flush_preset(k: KernelVersion, t: &Target) -> WalkFlushKind {
    if k >= KernelVersion(5, 15) && t.smmu == Some((SmmuKind::Mmu500, SmmuImpl::Qcom)) {
        WalkFlushKind::Asid
    } else {
        WalkFlushKind::ByVa
    }
}

/// arm-smmu-v3's invalidation code by release (read in the 5.3, 5.4, 5.14, 5.15, 6.1, 6.6, 7.0
/// and 7.1 sources): up to 5.3 each leaf issued at once and each command inserted under the
/// queue's lock, 5.4's lock-free queue and gathered leaves, range commands from 5.7, ASID + sync
/// in one list from 5.15, TTL for leaves only from 6.6, large ranges as one ASID invalidation
/// in common code from 7.1.
/// Every release claims command-queue slots with mainline's cmpxchg: the atomic-add claim was
/// posted (2020) and not merged, a what-if chosen only by name.
fn cmdq_claim_preset(_: KernelVersion, _: &Target) -> CmdqClaim {
    CmdqClaim::Cmpxchg
}

fn smmuv3_inv_preset(k: KernelVersion, _: &Target) -> SmmuV3Rules {
    if k >= KernelVersion(7, 1) {
        SmmuV3Rules::Linux7_1
    } else if k >= KernelVersion(6, 6) {
        SmmuV3Rules::Linux6_6
    } else if k >= KernelVersion(5, 15) {
        SmmuV3Rules::Linux5_15
    } else if k >= KernelVersion(5, 7) {
        SmmuV3Rules::Linux5_7
    } else if k >= KernelVersion(5, 4) {
        SmmuV3Rules::Linux5_4
    } else {
        SmmuV3Rules::Linux5_3
    }
}

fn unmap_split_preset(k: KernelVersion, _: &Target) -> SplitKind {
    if k >= KernelVersion(5, 15) {
        SplitKind::UnmapPages
    } else {
        SplitKind::PerPage
    }
}

/// 6.13 retired `arm_lpae_split_blk_unmap()` (commit 33729a5fc0ca, in the Arm SMMU updates
/// for 6.13): a partial unmap of a block WARNs once and unmaps nothing.
/// io-pgtable-arm clears and cleans an unmapped run at once from 6.12 (commit 85b715a33458).
fn pte_clear_preset(k: KernelVersion, _: &Target) -> PteClear {
    if k >= KernelVersion(6, 12) {
        PteClear::PerRun
    } else {
        PteClear::PerPte
    }
}

fn block_unmap_preset(k: KernelVersion, _: &Target) -> BlockUnmap {
    if k >= KernelVersion(6, 13) {
        BlockUnmap::Refuse
    } else {
        BlockUnmap::Split
    }
}

/// arm64 kernels default to strict invalidation (`IOMMU_DEFAULT_DMA_STRICT`); lazy is the
/// default only on x86 (and s390 from 6.7), where no SMMU runs.
fn invalidation_preset(_: KernelVersion, _: &Target) -> Invalidation {
    Invalidation::Strict
}

/// The IOVA allocator's rules change in 5.11 (the retry), 5.13 (`iova_find_limit`), 5.18 (the
/// 32-bit free space estimate), 6.0 (127-entry magazines) and 6.2 (the retry's overflow fix);
/// the allocators before 5.10 are not modelled and run 5.10's rules.
fn iova_preset(k: KernelVersion, _: &Target) -> IovaRelease {
    let v = |a, b| k >= KernelVersion(a, b);
    if v(6, 2) {
        IovaRelease::Linux6_2
    } else if v(6, 0) {
        IovaRelease::Linux6_0
    } else if v(5, 18) {
        IovaRelease::Linux5_18
    } else if v(5, 13) {
        IovaRelease::Linux5_13
    } else if v(5, 11) {
        IovaRelease::Linux5_11
    } else {
        IovaRelease::Linux5_10
    }
}

/// `iommu_dma_unmap_page()`: 5.11 added a lookup for every device (swiotlb bouncing of
/// untrusted devices, `__iommu_dma_unmap_swiotlb`) beside the sync's own; 5.15 folded the two
/// into one ("iommu/dma: Fold _swiotlb helpers into callers").
fn unmap_lookup_preset(k: KernelVersion, _: &Target) -> UnmapLookup {
    if k >= KernelVersion(5, 15) {
        UnmapLookup::Linux5_15
    } else if k >= KernelVersion(5, 11) {
        UnmapLookup::Linux5_11
    } else {
        UnmapLookup::Linux5_10
    }
}

/// `dma_get_seg_boundary()` of a device whose bus and driver set none: `DMA_BIT_MASK(32)` up to
/// 5.9, `ULONG_MAX` from 5.10 ("dma-mapping: set default segment_boundary_mask to ULONG_MAX").
fn seg_boundary_preset(k: KernelVersion, _: &Target) -> SegBoundary {
    if k >= KernelVersion(5, 10) {
        SegBoundary::UlongMax
    } else {
        SegBoundary::Bits32
    }
}

/// What `iommu_map_sg()` returns for a failed map: `size_t` 0 up to 5.14, the negative errno
/// from 5.15 (`__iommu_map_sg` made `ssize_t` with the series that let `dma_map_sg` report
/// errors).
pub fn map_sg_returns(k: KernelVersion) -> crate::iommu::core::MapSgReturn {
    if k >= KernelVersion(5, 15) {
        crate::iommu::core::MapSgReturn::Errno
    } else {
        crate::iommu::core::MapSgReturn::Zero
    }
}

/// How a release reserves and hands out CMA for coherent allocations on `arch` (a release
/// preset, not an overridable policy: the boot parameters a release lacks are refused at boot).
/// Read in kernel/dma/contiguous.c, mm/cma.c and arch/arm64/mm/init.c of 5.10, 5.11, 5.12,
/// 5.15, 6.0 and 6.6: per-NUMA CMA from 5.10, `numa_cma=` (reserved before the default area)
/// from 6.6; 4 MiB minimum area alignment (`MAX_ORDER - 1`) until `CMA_MIN_ALIGNMENT_BYTES`
/// (one 2 MiB pageblock) in 5.18; the bottom-up attempt above 4 GiB from 5.12; arm64's
/// ZONE_DMA of 30 bits with the default area below 4 GiB in 5.10, ZONE_DMA of up to 32 bits
/// (the default area's limit) from 5.11. Coherent allocation is modelled from 5.10.
pub fn contiguous_rules(k: KernelVersion) -> crate::dma::contiguous::ContiguousRules {
    use crate::dma::contiguous::{ContiguousRules, NumaCma};
    use crate::mm::cma::CmaRules;
    let v = |a, b| k >= KernelVersion(a, b);
    ContiguousRules {
        numa: if v(6, 6) {
            NumaCma::NumaCma
        } else if v(5, 10) {
            NumaCma::PerNuma
        } else {
            NumaCma::None
        },
        cma: CmaRules {
            min_align: if v(5, 18) { 2 << 20 } else { 4 << 20 },
            bottom_up_above_4g: v(5, 12),
        },
        numa_first: v(6, 6),
        zone_dma_bits: if v(5, 11) { 32 } else { 30 },
        zone_from_dram_start: !v(5, 11),
        default_below_dma32: !v(5, 11),
    }
}

/// The oldest release whose coherent-allocation path dmasim models.
pub const COHERENT_SINCE: KernelVersion = KernelVersion(5, 10);

/// cache-l2x0.c's PL310 range functions: 3.16's `l2c_*` rewrite replaced `l2x0_*` (read in
/// 3.14.1, 3.15.5 and 3.16). Mainline mach-zynq selects no PL310 erratum in 3.14 or 3.15, and
/// `multi_v7_defconfig` enables none, so no preset is `l2x0-588369`.
fn outer_range_preset(k: KernelVersion, _: &Target) -> OuterRange {
    if k >= KernelVersion(3, 16) {
        OuterRange::L2c210
    } else {
        OuterRange::L2x0
    }
}

/// cache-v7.S ends its DMA range loops with `dsb` in 3.14 and 3.15, `dsb st` from 3.16.
fn v7_dsb_preset(k: KernelVersion, _: &Target) -> V7Dsb {
    if k >= KernelVersion(3, 16) {
        V7Dsb::DsbSt
    } else {
        V7Dsb::Dsb
    }
}

/// `CONFIG_ARM_ERRATA_764369`: mach-zynq's Kconfig of 3.14–3.19 selects no erratum and
/// `multi_v7_defconfig` does not enable it, so every preset leaves it off (a vendor
/// configuration that enables it is `--policy arm_errata_764369=on`).
fn arm_errata_764369_preset(_: KernelVersion, _: &Target) -> Errata764369 {
    Errata764369::Off
}

/// The release from which arm-smmu and arm-smmu-v3 offer lazy invalidation (`iommu.strict=0`,
/// the flush queue used through `DOMAIN_ATTR_DMA_USE_FLUSH_QUEUE`).
pub const LAZY_SINCE: KernelVersion = KernelVersion(5, 0);

/// Where dma-direct or iommu-dma complete cache maintenance: not ARMv7's `arm_dma_ops`, whose
/// every helper ends with its own barrier.
fn not_arm_dma_ops(t: &Target) -> Result<(), String> {
    if t.arch == Arch::Armv7 && !t.iommu && !t.swiotlb {
        Err("ARMv7's arm_dma_ops complete every cache-v7.S loop with its own dsb".into())
    } else {
        Ok(())
    }
}

fn armv7_only(t: &Target) -> Result<(), String> {
    match t.arch {
        Arch::Armv7 => Ok(()),
        a => Err(format!(
            "it is ARMv7's cache-v7.S, and the platform is {}",
            a.name()
        )),
    }
}

fn outer_cache_only(t: &Target) -> Result<(), String> {
    armv7_only(t)?;
    if t.outer_cache {
        Ok(())
    } else {
        Err("the platform has no outer cache ([outer_cache])".into())
    }
}

fn arm64_only(t: &Target) -> Result<(), String> {
    match t.arch {
        Arch::Arm64 => Ok(()),
        a => Err(format!(
            "it is arm64's rule, and the platform is {}",
            a.name()
        )),
    }
}

fn x86_only(t: &Target) -> Result<(), String> {
    match t.arch {
        Arch::X86_64 => Ok(()),
        a => Err(format!(
            "it is x86-64's __pa(), and the platform is {}",
            a.name()
        )),
    }
}

fn swiotlb_only(t: &Target) -> Result<(), String> {
    if t.swiotlb {
        Ok(())
    } else {
        Err("the scenario's device does not bounce through swiotlb".to_string())
    }
}

fn x86_swiotlb_only(t: &Target) -> Result<(), String> {
    swiotlb_only(t)?;
    match t.arch {
        Arch::X86_64 => Ok(()),
        a => Err(format!(
            "it is the 2012 x86-64 swiotlb_dma_ops' rule, and the platform is {}",
            a.name()
        )),
    }
}

fn iommu_only(t: &Target) -> Result<(), String> {
    if t.iommu {
        Ok(())
    } else {
        Err("the scenario has no [iommu] domain".to_string())
    }
}

fn iova_users(t: &Target) -> Result<(), String> {
    iommu_only(t)?;
    if t.iova_alloc {
        Ok(())
    } else {
        Err("the workload maps at fixed IOVAs and never calls the IOVA allocator".into())
    }
}

fn iommu_dma_only(t: &Target) -> Result<(), String> {
    iommu_only(t)?;
    if t.dma_api {
        Ok(())
    } else {
        Err("the workload calls the iommu core directly, whose iommu_unmap always invalidates and syncs; only iommu-dma (a device behind [iommu]) defers".to_string())
    }
}

/// Where `dma_get_seg_boundary()` is read: iommu-dma's map_sg and swiotlb's slot search.
fn seg_boundary_users(t: &Target) -> Result<(), String> {
    if !t.dma_api {
        return Err("the workload calls the iommu core directly: there is no device".into());
    }
    if t.pci_device {
        return Err(
            "the device is a PCI function: the PCI core sets its boundary (4 GiB) in every release"
                .into(),
        );
    }
    if t.iommu || t.swiotlb {
        Ok(())
    } else {
        Err(
            "only iommu-dma and swiotlb read the segment boundary, and the device uses neither"
                .into(),
        )
    }
}

fn mmu500_only(t: &Target) -> Result<(), String> {
    iommu_only(t)?;
    match t.smmu {
        Some((SmmuKind::Mmu500, _)) => Ok(()),
        _ => Err(
            "it is arm-smmu's (MMU-500's) walk flush, and the platform's SMMU is not one".into(),
        ),
    }
}

fn smmuv3_only(t: &Target) -> Result<(), String> {
    iommu_only(t)?;
    match t.smmu {
        Some((SmmuKind::SmmuV3, _)) => Ok(()),
        _ => Err(
            "it is arm-smmu-v3's invalidation code, and the platform's SMMU is not an SMMUv3"
                .into(),
        ),
    }
}

macro_rules! policy_def {
    ($field:ident, $ty:ty, $preset:ident, $applies:ident, $rule:expr, $desc:expr) => {
        PolicyDef {
            key: stringify!($field),
            description: $desc,
            preset_rule: $rule,
            choices: <$ty as Choice>::names,
            get: |p| p.$field.name(),
            set: |p, v| match <$ty as Choice>::parse(v) {
                Some(x) => {
                    p.$field = x;
                    true
                }
                None => false,
            },
            preset: |k, t| $preset(k, t).name(),
            applies: $applies,
        }
    };
}

/// Kernel behaviours the policies do not offer, each with what the model runs instead and
/// why: `dmasim policies` prints them after the policies, so a choice a user looks for and
/// does not find is answered there.
pub static NOT_MODELLED: &[(&str, &str)] = &[
    (
        "arm-smmu-v3 CMD_SYNC completion without MSI polling",
        "an SMMUv3 that is not coherent or has no MSIs (ARM_SMMU_OPT_MSIPOLL off) completes CMD_SYNC with CS=SEV and the CPU polls CMDQ_CONS by MMIO (an uncached register read per poll, WFE between); the model always runs the MSI protocol: the SMMU writes the sync's own queue slot and the CPU reloads that line",
    ),
    (
        "arm-smmu-v3 waiting for command-queue space",
        "a command list that would overrun entries the SMMU has not consumed is counted (overruns) and written all the same: the CPU does not poll CMDQ_CONS (5.3, under the queue's lock) or refresh cons under the exclusive lock (5.4); the queue's consumer catches up at each completed sync",
    ),
    (
        "swiotlb bouncing of untrusted devices behind an IOMMU",
        "iommu-dma maps every buffer in place; PCI's 32-bit-first IOVA attempt is not made",
    ),
];

/// Every policy, in the order reports print them.
pub static REGISTRY: &[PolicyDef] = &[
    policy_def!(
        sync,
        SyncKind,
        sync_preset,
        not_arm_dma_ops,
        "batched from 7.1, per-entry before",
        "cache-maintenance completion: a barrier per region everywhere (per-entry, <= 7.0); or one per call on every scatter-gather path (dma-direct's map_sg, unmap_sg and sync_sg, iommu-dma's sg paths), a path of one region, swiotlb_map and a bounced entry flushing per region (batched, 7.1)"
    ),
    policy_def!(
        arm64_dir_rules,
        DirRules,
        dir_rules_preset,
        arm64_only,
        "5.19 from 5.19, pre-5.19 before",
        "arm64 map for FROM_DEVICE invalidates (pre-5.19) or cleans (5.19)"
    ),
    policy_def!(
        swiotlb_rules,
        SwiotlbRules,
        swiotlb_rules_preset,
        swiotlb_only,
        "the newest of 3.6, 4.11, 5.0, 5.12, 5.17, 5.18, 6.0, 6.3, 6.9 not after the release",
        "swiotlb pool and bounce rules of the release that last changed them: one pool lock and next fit (3.6; page stride from a page 4.11; through dma-direct 5.0, before which x86-64 runs lib/swiotlb.c's swiotlb_dma_ops), min_align_mask (5.12), copy at map in every direction (5.17, and under SKIP_CPU_SYNC 5.18), areas with their own locks (6.0), bitwise alignment from an unaligned start (6.3), alloc_align_mask aligning the slot (6.9)"
    ),
    policy_def!(
        swiotlb_addr,
        SwiotlbAddr,
        swiotlb_addr_preset,
        x86_swiotlb_only,
        "phys from 3.8, virt before",
        "the 2012 swiotlb keeps its pool addresses virtual, translated by __phys_addr calls (virt, <= 3.7), or physical (phys, 3.8: the series was merged for 3.8)"
    ),
    policy_def!(
        phys_addr,
        PhysAddrKind,
        phys_addr_preset,
        x86_only,
        "call before 3.9, inline from 3.9 (x86-64)",
        "x86-64 __pa() (virt_to_page, virt_to_phys): a call to the out-of-line __phys_addr (call, <= 3.8) or arithmetic inlined into the caller (inline, 3.9 without CONFIG_DEBUG_VIRTUAL); dma_map_single, the 2012 swiotlb's virtual bookkeeping and the forwarding path's skb frees translate through it"
    ),
    policy_def!(
        walk_flush,
        WalkFlushKind,
        walk_flush_preset,
        mmu500_only,
        "asid from 5.15 on a Qualcomm MMU-500 ([smmu] impl = \"qcom\"), by-va otherwise",
        "arm-smmu (MMU-500) flush of a freed table's walk: a TLBIVA per granule (by-va) or one TLBIASID (asid, 5.15's flush_walk_prefer_tlbiasid)"
    ),
    policy_def!(
        smmuv3_inv,
        SmmuV3Rules,
        smmuv3_inv_preset,
        smmuv3_only,
        "the release that introduced the code: 5.4, 5.7, 5.15, 6.6, 7.1 (earlier releases get 5.4's)",
        "arm-smmu-v3 invalidation: range commands on SMMUv3.2 (5.7), ASID+sync in one command list (5.15), TTL for leaves only (6.6), ranges of 1 << (log2(granule) - 3) granules or more as one CMD_TLBI_NH_ASID without range invalidation (7.1)"
    ),
    policy_def!(
        cmdq_claim,
        CmdqClaim,
        cmdq_claim_preset,
        smmuv3_only,
        "cmpxchg in every release; atomic-add was posted in 2020, not merged",
        "arm-smmu-v3 lock-free command queue (5.4 on; the locked queue of 5.3 and before has no claim): slots claimed with a cmpxchg loop on llq (cmpxchg, mainline), or with one atomic add that cannot fail, cons on a line of its own and the owner taking the queue's lock shared for the syncs it gathered (atomic-add: John Garry's 2020 series removing the cmpxchg, posted, not merged)"
    ),
    policy_def!(
        unmap_split,
        SplitKind,
        unmap_split_preset,
        iommu_only,
        "unmap-pages from 5.15, per-page before",
        "iommu core: one driver call per page (per-page, <= 5.14) or per run of pages (unmap-pages, 5.15)"
    ),
    policy_def!(
        block_unmap,
        BlockUnmap,
        block_unmap_preset,
        iommu_only,
        "refuse from 6.13, split before",
        "io-pgtable-arm unmap of part of a block: replace the block by a table mapping the rest (split, <= 6.12) or WARN once and unmap nothing (refuse, 6.13)"
    ),
    policy_def!(
        pte_clear,
        PteClear,
        pte_clear_preset,
        iommu_only,
        "per-run from 6.12, per-pte before",
        "io-pgtable-arm unmap of a run of entries: each cleared and (non-coherent walker) cleaned in turn, a tlb_add_page per leaf (per-pte, <= 6.11); or tables first, then the run cleared and cleaned with one sync and a tlb_add_page for every entry, tables included (per-run, 6.12)"
    ),
    policy_def!(
        invalidation,
        Invalidation,
        invalidation_preset,
        iommu_dma_only,
        "strict on arm64 (IOMMU_DEFAULT_DMA_STRICT); lazy from 5.0 by iommu.strict=0",
        "iommu-dma unmap: invalidate and sync every unmap (strict) or queue the IOVA and flush the whole domain when the flush queue fills or its 10 ms timer fires (lazy, iommu.strict=0 / DMA-FQ)"
    ),
    policy_def!(
        iova,
        IovaRelease,
        iova_preset,
        iova_users,
        "the newest of 5.10, 5.11, 5.13, 5.18, 6.0, 6.2 at or below the release (5.10 before it)",
        "IOVA allocator rules, named by the release that introduced them: no retry, per-CPU-only exhaustion flush (5.10); a retry above the cached node with retry_pfn = pfn_hi + 1, wrapping at the anchor, from the anchor (5.11) or iova_find_limit (5.13); max32_alloc_size reset by any free below 4 GiB (5.18); 127-entry magazines (6.0); the retry's overflow fixed (6.2)"
    ),
    policy_def!(
        unmap_lookup,
        UnmapLookup,
        unmap_lookup_preset,
        iommu_dma_only,
        "5.15 from 5.15, 5.11 from 5.11, 5.10 before",
        "iommu_dma_unmap_page's iova_to_phys: only a non-coherent device's sync looks it up, unchecked (5.10); the sync's lookup plus one for every device that WARNs and returns without unmapping when nothing is mapped (5.11); one lookup for every device, same WARN (5.15)"
    ),
    policy_def!(
        seg_boundary,
        SegBoundary,
        seg_boundary_preset,
        seg_boundary_users,
        "ulong-max from 5.10, 32-bit before",
        "dma_get_seg_boundary() of a device whose bus or driver set none: DMA_BIT_MASK(32) (32-bit, <= 5.9) or ULONG_MAX (ulong-max, 5.10); a PCI device (the forwarding workload's NIC) has 4 GiB from the PCI core in every release, so the policy does not apply to it"
    ),
    policy_def!(
        outer_range,
        OuterRange,
        outer_range_preset,
        outer_cache_only,
        "l2c210 from 3.16, l2x0 before",
        "PL310 range maintenance (cache-l2x0.c): l2x0_* with l2x0_lock taken with interrupts off, 4 KB blocks dropping and retaking it, clean/flush of at least the cache size as one whole-cache operation by way (l2x0, 3.14/3.15); the same with PL310_ERRATA_588369's clean-then-invalidate per flushed line (l2x0-588369, never a preset: mach-zynq does not select it); or one register write per line and a sync, no lock, no threshold (l2c210, 3.16)"
    ),
    policy_def!(
        v7_dsb,
        V7Dsb,
        v7_dsb_preset,
        armv7_only,
        "dsb-st from 3.16, dsb before",
        "the barrier that ends each cache-v7.S DMA range loop: a full dsb (3.14/3.15) or dsb st (3.16)"
    ),
    policy_def!(
        arm_errata_764369,
        Errata764369,
        arm_errata_764369_preset,
        armv7_only,
        "off (mach-zynq selects no erratum in 3.14-3.19; multi_v7_defconfig enables none)",
        "CONFIG_ARM_ERRATA_764369 (Cortex-A9 MPCore): a full dsb before each cache-v7.S DMA range loop (on), or none (off)"
    ),
];

/// The registry entry for `key`, or an error listing the known keys.
pub fn def(key: &str) -> Result<&'static PolicyDef, String> {
    REGISTRY.iter().find(|d| d.key == key).ok_or_else(|| {
        let keys: Vec<&str> = REGISTRY.iter().map(|d| d.key).collect();
        format!(
            "unknown policy `{key}`; known policies: {}",
            keys.join(", ")
        )
    })
}

impl Policies {
    /// The policies of a release on a platform.
    pub fn preset(kernel: KernelVersion, t: &Target) -> Policies {
        Policies {
            kernel,
            sync: sync_preset(kernel, t),
            arm64_dir_rules: dir_rules_preset(kernel, t),
            swiotlb_rules: swiotlb_rules_preset(kernel, t),
            swiotlb_addr: swiotlb_addr_preset(kernel, t),
            phys_addr: phys_addr_preset(kernel, t),
            walk_flush: walk_flush_preset(kernel, t),
            smmuv3_inv: smmuv3_inv_preset(kernel, t),
            cmdq_claim: cmdq_claim_preset(kernel, t),
            unmap_split: unmap_split_preset(kernel, t),
            block_unmap: block_unmap_preset(kernel, t),
            pte_clear: pte_clear_preset(kernel, t),
            invalidation: invalidation_preset(kernel, t),
            iova: iova_preset(kernel, t),
            unmap_lookup: unmap_lookup_preset(kernel, t),
            seg_boundary: seg_boundary_preset(kernel, t),
            outer_range: outer_range_preset(kernel, t),
            v7_dsb: v7_dsb_preset(kernel, t),
            arm_errata_764369: arm_errata_764369_preset(kernel, t),
        }
    }

    /// Apply one `key=value` override; the error text says what was expected.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let d = def(key)?;
        if (d.set)(self, value) {
            Ok(())
        } else {
            Err(format!(
                "policy `{key}` cannot be `{value}`; choose one of: {}",
                (d.choices)().join(", ")
            ))
        }
    }

    /// Parse `key=value[,key=value...]` into pairs (checked against the registry, not applied).
    pub fn parse_overrides(spec: &str) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for kv in spec.split(',') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("policy override `{kv}` is not of the form key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            def(k)?;
            out.push((k.to_string(), v.to_string()));
        }
        Ok(out)
    }

    /// Every policy that applies to `t`, as `(key, value)`, in registry order.
    pub fn in_effect(&self, t: &Target) -> Vec<(&'static str, &'static str)> {
        REGISTRY
            .iter()
            .filter(|d| d.applies(t).is_ok())
            .map(|d| (d.key, d.get(self)))
            .collect()
    }

    /// A one-line summary for reports: the release and every policy in effect.
    pub fn summary(&self, t: &Target) -> String {
        let list: Vec<String> = self
            .in_effect(t)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!("kernel {} ({})", self.kernel, list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARM: Target = Target {
        arch: Arch::Arm64,
        smmu: None,
        iommu: false,
        swiotlb: false,
        dma_api: true,
        pci_device: false,
        iova_alloc: true,
        outer_cache: false,
    };

    fn mmu500(imp: SmmuImpl) -> Target {
        Target {
            arch: Arch::Arm64,
            smmu: Some((SmmuKind::Mmu500, imp)),
            iommu: true,
            swiotlb: false,
            dma_api: false,
            pci_device: false,
            iova_alloc: false,
            outer_cache: false,
        }
    }

    #[test]
    fn iommu_map_sg_returns_an_errno_from_5_15() {
        use crate::iommu::core::MapSgReturn;
        assert_eq!(map_sg_returns(KernelVersion(5, 14)), MapSgReturn::Zero);
        assert_eq!(map_sg_returns(KernelVersion(5, 15)), MapSgReturn::Errno);
        assert_eq!(map_sg_returns(KernelVersion(7, 1)), MapSgReturn::Errno);
    }

    #[test]
    fn presets_follow_releases() {
        let p = |k| Policies::preset(k, &ARM);
        assert_eq!(p(KernelVersion(7, 0)).sync, SyncKind::PerEntry);
        assert_eq!(p(KernelVersion(7, 1)).sync, SyncKind::Batched);
        assert_eq!(p(KernelVersion(5, 18)).arm64_dir_rules, DirRules::Pre5_19);
        assert!(KernelVersion(5, 9) < KernelVersion(5, 10));
        assert_eq!(p(KernelVersion(3, 6)).swiotlb_addr, SwiotlbAddr::Virt);
        assert_eq!(p(KernelVersion(3, 7)).swiotlb_addr, SwiotlbAddr::Virt);
        assert_eq!(p(KernelVersion(3, 8)).swiotlb_addr, SwiotlbAddr::Phys);
        // __phys_addr: out of line on x86-64 to 3.8, inline from 3.9; never a call on arm64.
        let x86 = Target {
            arch: Arch::X86_64,
            ..ARM
        };
        for (k, want) in [
            (KernelVersion(3, 6), PhysAddrKind::Call),
            (KernelVersion(3, 8), PhysAddrKind::Call),
            (KernelVersion(3, 9), PhysAddrKind::Inline),
            (KernelVersion(6, 0), PhysAddrKind::Inline),
        ] {
            assert_eq!(Policies::preset(k, &x86).phys_addr, want, "{k}");
        }
        assert_eq!(p(KernelVersion(3, 7)).phys_addr, PhysAddrKind::Inline);
        assert!(def("phys_addr").unwrap().applies(&ARM).is_err());
        assert!(def("phys_addr").unwrap().applies(&x86).is_ok());
        for (k, rules) in [
            (KernelVersion(3, 6), SwiotlbRules::Linux3_6),
            (KernelVersion(4, 10), SwiotlbRules::Linux3_6),
            (KernelVersion(4, 11), SwiotlbRules::Linux4_11),
            (KernelVersion(4, 20), SwiotlbRules::Linux4_11),
            (KernelVersion(5, 0), SwiotlbRules::Linux5_0),
            (KernelVersion(5, 11), SwiotlbRules::Linux5_0),
            (KernelVersion(5, 12), SwiotlbRules::Linux5_12),
            (KernelVersion(5, 16), SwiotlbRules::Linux5_12),
            (KernelVersion(5, 17), SwiotlbRules::Linux5_17),
            (KernelVersion(5, 19), SwiotlbRules::Linux5_18),
            (KernelVersion(6, 0), SwiotlbRules::Linux6_0),
            (KernelVersion(6, 2), SwiotlbRules::Linux6_0),
            (KernelVersion(6, 3), SwiotlbRules::Linux6_3),
            (KernelVersion(6, 8), SwiotlbRules::Linux6_3),
            (KernelVersion(6, 9), SwiotlbRules::Linux6_9),
            (LATEST, SwiotlbRules::Linux6_9),
        ] {
            assert_eq!(p(k).swiotlb_rules, rules, "{k}");
        }
        let q = Policies::preset(KernelVersion(5, 14), &mmu500(SmmuImpl::Qcom));
        assert_eq!(
            (q.walk_flush, q.unmap_split),
            (WalkFlushKind::ByVa, SplitKind::PerPage)
        );
        let q = Policies::preset(KernelVersion(5, 15), &mmu500(SmmuImpl::Qcom));
        assert_eq!(
            (q.walk_flush, q.unmap_split),
            (WalkFlushKind::Asid, SplitKind::UnmapPages)
        );
    }

    #[test]
    fn iova_unmap_lookup_and_seg_boundary_presets_change_where_the_sources_do() {
        let iova = |a, b| Policies::preset(KernelVersion(a, b), &ARM).iova;
        let cases = [
            ((4, 19), IovaRelease::Linux5_10),
            ((5, 10), IovaRelease::Linux5_10),
            ((5, 11), IovaRelease::Linux5_11),
            ((5, 12), IovaRelease::Linux5_11),
            ((5, 13), IovaRelease::Linux5_13),
            ((5, 17), IovaRelease::Linux5_13),
            ((5, 18), IovaRelease::Linux5_18),
            ((5, 19), IovaRelease::Linux5_18),
            ((6, 0), IovaRelease::Linux6_0),
            ((6, 1), IovaRelease::Linux6_0),
            ((6, 2), IovaRelease::Linux6_2),
            ((7, 1), IovaRelease::Linux6_2),
        ];
        for ((a, b), want) in cases {
            assert_eq!(iova(a, b), want, "{a}.{b}");
        }
        assert_eq!(iova(5, 19).rules().mag_size, 128);
        assert_eq!(iova(6, 0).rules().mag_size, 127);
        let lookup = |a, b| Policies::preset(KernelVersion(a, b), &ARM).unmap_lookup;
        assert_eq!(lookup(5, 10), UnmapLookup::Linux5_10);
        assert_eq!(lookup(5, 11), UnmapLookup::Linux5_11);
        assert_eq!(lookup(5, 14), UnmapLookup::Linux5_11);
        assert_eq!(lookup(5, 15), UnmapLookup::Linux5_15);
        assert_eq!(lookup(7, 1), UnmapLookup::Linux5_15);
        let seg = |a, b| Policies::preset(KernelVersion(a, b), &ARM).seg_boundary;
        assert_eq!(seg(5, 9), SegBoundary::Bits32);
        assert_eq!(seg(5, 10), SegBoundary::UlongMax);
        // The boundary only applies where it is read.
        let bare = Target {
            dma_api: true,
            ..ARM
        };
        assert!(def("seg_boundary").unwrap().applies(&bare).is_err());
        let bounce = Target {
            swiotlb: true,
            ..ARM
        };
        assert!(def("seg_boundary").unwrap().applies(&bounce).is_ok());
        let nic = bounce.with_pci_device(true);
        assert!(def("seg_boundary").unwrap().applies(&nic).is_err());
        let ops = mmu500(SmmuImpl::Arm).with_iova_alloc(true);
        assert!(def("iova").unwrap().applies(&ops).is_ok());
        // A sweep at fixed IOVAs never allocates one.
        assert!(
            def("iova")
                .unwrap()
                .applies(&mmu500(SmmuImpl::Arm))
                .is_err()
        );
        assert!(
            def("unmap_lookup")
                .unwrap()
                .applies(&mmu500(SmmuImpl::Arm))
                .is_err()
        );
    }

    #[test]
    fn the_asid_walk_flush_preset_is_qualcomms_only() {
        for k in [KernelVersion(5, 15), KernelVersion(6, 6), LATEST] {
            let arm = Policies::preset(k, &mmu500(SmmuImpl::Arm));
            assert_eq!(arm.walk_flush, WalkFlushKind::ByVa, "{k}");
            assert_eq!(arm.unmap_split, SplitKind::UnmapPages, "{k}");
        }
    }

    /// arm-smmu-v3's rules change at 5.7, 5.15, 6.6 and 7.1 (sources of 5.14, 5.15, 6.1, 6.6,
    /// 7.0 and 7.1 read), on an SMMUv3 only.
    #[test]
    fn smmuv3_rules_follow_the_releases_that_changed_them() {
        let t = Target {
            arch: Arch::Arm64,
            smmu: Some((SmmuKind::SmmuV3, SmmuImpl::Arm)),
            iommu: true,
            swiotlb: false,
            dma_api: true,
            pci_device: false,
            iova_alloc: true,
            outer_cache: false,
        };
        let r = |a, b| Policies::preset(KernelVersion(a, b), &t).smmuv3_inv;
        assert_eq!(r(3, 7), SmmuV3Rules::Linux5_3);
        assert_eq!(r(5, 3), SmmuV3Rules::Linux5_3);
        assert_eq!(r(5, 4), SmmuV3Rules::Linux5_4);
        assert_eq!(r(5, 6), SmmuV3Rules::Linux5_4);
        assert_eq!(r(5, 7), SmmuV3Rules::Linux5_7);
        assert_eq!(r(5, 14), SmmuV3Rules::Linux5_7);
        assert_eq!(r(5, 15), SmmuV3Rules::Linux5_15);
        assert_eq!(r(6, 1), SmmuV3Rules::Linux5_15);
        assert_eq!(r(6, 5), SmmuV3Rules::Linux5_15);
        assert_eq!(r(6, 6), SmmuV3Rules::Linux6_6);
        assert_eq!(r(7, 0), SmmuV3Rules::Linux6_6);
        assert_eq!(r(7, 1), SmmuV3Rules::Linux7_1);
        let d = def("smmuv3_inv").unwrap();
        assert!(d.applies(&t).is_ok());
        assert!(d.applies(&mmu500(SmmuImpl::Qcom)).is_err());
        assert!(d.applies(&ARM).is_err());
    }

    #[test]
    fn overrides_are_checked() {
        let mut p = Policies::preset(KernelVersion(7, 0), &ARM);
        p.set("sync", "batched").unwrap();
        assert_eq!(p.sync, SyncKind::Batched);
        assert!(
            p.set("sync", "sometimes")
                .unwrap_err()
                .contains("per-entry")
        );
        assert!(
            p.set("color", "blue")
                .unwrap_err()
                .contains("known policies")
        );
        assert!(Policies::parse_overrides("sync").is_err());
        assert!(Policies::parse_overrides("").is_err());
        assert!(Policies::parse_overrides("walk_flush=range,color=x").is_err());
        p.set("swiotlb_addr", "virt").unwrap();
        assert_eq!(p.swiotlb_addr, SwiotlbAddr::Virt);
        assert!(
            p.set("swiotlb_addr", "linear")
                .unwrap_err()
                .contains("phys")
        );
        assert!(p.set("walk_flush", "range").unwrap_err().contains("by-va"));
        assert!(
            p.set("unmap_split", "never")
                .unwrap_err()
                .contains("per-page")
        );
    }

    #[test]
    fn every_field_is_in_the_registry_once() {
        let p = Policies::preset(LATEST, &mmu500(SmmuImpl::Qcom));
        let keys: Vec<&str> = REGISTRY.iter().map(|d| d.key).collect();
        let mut dedup = keys.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), keys.len());
        // Each entry reads and writes its own field: flipping one changes only that key.
        for d in REGISTRY {
            for choice in (d.choices)() {
                let mut q = p.clone();
                q.set(d.key, choice).unwrap();
                assert_eq!(d.get(&q), choice);
                for other in REGISTRY.iter().filter(|o| o.key != d.key) {
                    assert_eq!(
                        other.get(&q),
                        other.get(&p),
                        "{} moved {}",
                        d.key,
                        other.key
                    );
                }
            }
            assert_eq!(d.preset(LATEST, &mmu500(SmmuImpl::Qcom)), d.get(&p));
        }
    }

    #[test]
    fn summary_lists_the_policies_in_effect() {
        let p = Policies::preset(KernelVersion(7, 0), &ARM);
        assert_eq!(
            p.summary(&ARM),
            "kernel 7.0 (sync=per-entry, arm64_dir_rules=5.19)"
        );
        let t = mmu500(SmmuImpl::Qcom);
        assert!(
            p.summary(&t)
                .contains("walk_flush=by-va, unmap_split=unmap-pages")
        );
    }

    /// ARMv7's policies change at 3.16 (cache-l2x0.c's rewrite, cache-v7.S's `dsb st`), read in
    /// 3.14.1, 3.15.5 and 3.16; none applies elsewhere, and the outer range needs an outer cache.
    #[test]
    fn armv7_presets_change_at_3_16() {
        let zynq = Target {
            arch: Arch::Armv7,
            outer_cache: true,
            iova_alloc: false,
            ..ARM
        };
        let p = |a, b| Policies::preset(KernelVersion(a, b), &zynq);
        for (k, range, dsb) in [
            ((3, 14), OuterRange::L2x0, V7Dsb::Dsb),
            ((3, 15), OuterRange::L2x0, V7Dsb::Dsb),
            ((3, 16), OuterRange::L2c210, V7Dsb::DsbSt),
            ((3, 19), OuterRange::L2c210, V7Dsb::DsbSt),
            ((4, 0), OuterRange::L2c210, V7Dsb::DsbSt),
        ] {
            let q = p(k.0, k.1);
            assert_eq!((q.outer_range, q.v7_dsb), (range, dsb), "{k:?}");
            assert_eq!(q.arm_errata_764369, Errata764369::Off, "{k:?}");
        }
        for key in ["outer_range", "v7_dsb", "arm_errata_764369"] {
            assert!(def(key).unwrap().applies(&zynq).is_ok(), "{key}");
            assert!(def(key).unwrap().applies(&ARM).is_err(), "{key}");
        }
        let no_l2 = Target {
            outer_cache: false,
            ..zynq
        };
        assert!(def("outer_range").unwrap().applies(&no_l2).is_err());
        assert!(def("v7_dsb").unwrap().applies(&no_l2).is_ok());
        // arm_dma_ops complete their own maintenance: the completion policy does not act there.
        assert!(def("sync").unwrap().applies(&zynq).is_err());
        assert!(def("sync").unwrap().applies(&ARM).is_ok());
        assert_eq!(KernelVersion::oldest_for(Arch::Armv7), KernelVersion(3, 14));
        assert!(KernelVersion(3, 14).modelled_on(Arch::Armv7));
        assert!(!KernelVersion(3, 13).modelled_on(Arch::Armv7));
    }

    #[test]
    fn releases_parse_like_uname() {
        let ok = |s| KernelVersion::parse(s).unwrap();
        assert_eq!(ok("7.1"), KernelVersion(7, 1));
        assert_eq!(ok("v5.15"), KernelVersion(5, 15));
        assert_eq!(ok("6.1.55"), KernelVersion(6, 1));
        assert_eq!(ok(" 6.1.55-generic "), KernelVersion(6, 1));
        assert_eq!(ok("6.6-rc3"), KernelVersion(6, 6));
        for bad in [
            "",
            "7",
            "seven",
            "7.x",
            "99.0",
            "0.0",
            "4294967295.4294967295",
            "7.1x",
            "6.1.x",
        ] {
            assert!(KernelVersion::parse(bad).is_err(), "{bad}");
        }
    }
}
