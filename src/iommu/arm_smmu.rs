//! Arm SMMUv2 / MMU-500 TLB maintenance for a stage-1 context bank.
//!
//! Kernel counterpart: drivers/iommu/arm/arm-smmu/arm-smmu.c — `arm_smmu_s1_tlb_ops`
//! (`arm_smmu_tlb_inv_context_s1`, `arm_smmu_tlb_inv_walk_s1`, `arm_smmu_tlb_add_page_s1`,
//! `arm_smmu_tlb_inv_range_s1`), `arm_smmu_iotlb_sync` and `arm_smmu_tlb_sync_context` /
//! `__arm_smmu_tlb_sync`; the 5.15 `flush_walk_prefer_tlbiasid` choice of the Qualcomm
//! implementation (arm-smmu-qcom.c, commit ef75702d6d65).
//!
//! What it models: invalidation is register-programmed. A leaf (`tlb_add_page`) is one `TLBIVAL`
//! write, issued at once (this driver does not gather). A walk flush is, by policy, either one
//! `TLBIVA` write per granule of the range ([`ByVa`]) or one `TLBIASID` ([`ByAsid`]), and in both
//! cases waits for completion. A whole-context flush is `TLBIASID` and a sync. A sync writes
//! `TLBSYNC` and polls `TLBSTATUS`: up to `TLB_SPIN_COUNT` reads, then `udelay(1)`, `udelay(2)`,
//! ... doubling, until the SMMU reports done or a second has passed (then it gives up, as the
//! kernel does, logging a timeout).
//!
//! Barriers (the same in every release read, 5.14 to 7.1): `arm_smmu_tlb_inv_context_s1()` issues
//! `wmb()` before `TLBIASID`, because the register write may be relaxed and the PTEs the CPU
//! cleared must be visible first; `arm_smmu_tlb_inv_range_s1()` issues one `wmb()` per call when
//! the SMMU's table walker is coherent (`ARM_SMMU_FEAT_COHERENT_WALK`) and none otherwise, since
//! io-pgtable's PTE cleaning for a non-coherent walker already ended with a DSB.
//!
//! Invariants: every invalidation register write is followed, before the invalidated memory can
//! be reused, by a sync that observed completion (or a counted timeout).

use super::{IommuFlushOps, IommuIotlbGather};
use crate::hw::SmpHw;
use crate::hw::{DeviceHw, FrameId, Hw, MmioReg, SMMU_TLBSTATUS_GSACTIVE, SwCost, SwKey};
use std::fmt::Debug;

/// Status reads before the poll loop starts sleeping (`TLB_SPIN_COUNT`).
pub const TLB_SPIN_COUNT: u32 = 10;
/// Poll budget in microseconds (`TLB_LOOP_TIMEOUT`).
pub const TLB_LOOP_TIMEOUT_US: u64 = 1_000_000;
/// The value written to `TLBSYNC` (`QCOM_DUMMY_VAL`).
const QCOM_DUMMY_VAL: u64 = u64::MAX;

/// ≤ 5.14, and every non-Qualcomm implementation: a `TLBIVA` per granule, then a sync.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByVa;

/// 5.15 `flush_walk_prefer_tlbiasid` (Qualcomm): the whole ASID, then a sync.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByAsid;

impl ByVa {
    /// A `TLBIVA` per granule of the range, then a sync.
    #[inline]
    pub fn flush<H: DeviceHw + ?Sized>(
        cb: &ArmSmmuContext,
        hw: &mut H,
        iova: u64,
        size: u64,
        granule: u64,
    ) {
        cb.tlb_inv_range_s1(hw, iova, size, granule, MmioReg::SmmuTlbiva);
        cb.tlb_sync_context(hw);
    }
}

impl ByAsid {
    /// The whole ASID (`TLBIASID`), then a sync.
    #[inline]
    pub fn flush<H: DeviceHw + ?Sized>(cb: &ArmSmmuContext, hw: &mut H) {
        cb.tlb_inv_context_s1(hw);
    }
}

/// The `walk_flush` policy: how a freed table's walk is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkFlushKind {
    /// A TLBIVA per granule of the range ([`ByVa`]).
    ByVa,
    /// One TLBIASID ([`ByAsid`], `flush_walk_prefer_tlbiasid`).
    Asid,
}

impl crate::types::Choice for WalkFlushKind {
    const ALL: &'static [Self] = &[WalkFlushKind::ByVa, WalkFlushKind::Asid];
    fn name(self) -> &'static str {
        match self {
            WalkFlushKind::ByVa => "by-va",
            WalkFlushKind::Asid => "asid",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    inv_range: SwCost,
    inv_step: SwCost,
    sync: SwCost,
}

/// One stage-1 context bank: its ASID and what happened to its syncs.
#[derive(Debug)]
pub struct ArmSmmuContext {
    pub asid: u16,
    /// `ARM_SMMU_FEAT_COHERENT_WALK`: the table walker snoops CPU caches.
    pub coherent_walk: bool,
    /// `smmu_domain->cb_lock`, held around a sync and its poll, and what it guards.
    pub cb_lock: crate::smp::SpinLock<TlbSync>,
    costs: Costs,
}

/// The context bank's TLB sync, under `cb_lock`: its `TLBSYNC`/`TLBSTATUS` pair is one per
/// context bank, so one CPU syncs at a time.
#[derive(Debug, Default)]
pub struct TlbSync {
    /// Syncs that ran out of poll budget (the kernel logs "TLB sync timed out").
    pub timeouts: u64,
}

impl ArmSmmuContext {
    /// Syncs that ran out of poll budget, on every CPU.
    pub fn sync_timeouts(&self) -> u64 {
        self.cb_lock.peek().timeouts
    }

    /// `arm_smmu_tlb_inv_range_s1()`: one register write per `granule` of `[iova, iova + size)`,
    /// in the AArch64 format (VA[..:12] with the ASID in bits 63:48).
    #[inline]
    pub fn tlb_inv_range_s1<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        size: u64,
        granule: u64,
        reg: MmioReg,
    ) {
        if size == 0 || granule < 4096 {
            return;
        }
        hw.sw(self.costs.inv_range);
        if self.coherent_walk {
            hw.wmb();
        }
        let mut val = (iova >> 12) | (u64::from(self.asid) << 48);
        let mut left = size;
        loop {
            hw.sw(self.costs.inv_step);
            hw.mmio_write(reg, val);
            val += granule >> 12;
            left = left.saturating_sub(granule);
            if left == 0 {
                break;
            }
        }
    }

    /// `arm_smmu_tlb_inv_context_s1()`: `wmb()`, `TLBIASID`, then sync.
    pub fn tlb_inv_context_s1<H: DeviceHw + ?Sized>(&self, hw: &mut H) {
        let back = hw.enter(crate::frame_id!("arm_smmu_tlb_inv_context_s1"));
        hw.wmb();
        hw.mmio_write(MmioReg::SmmuTlbiasid, u64::from(self.asid));
        self.tlb_sync_context(hw);
        hw.leave(back);
    }

    /// `arm_smmu_tlb_sync_context()` / `__arm_smmu_tlb_sync()`: write `TLBSYNC`, poll `TLBSTATUS`.
    pub fn tlb_sync_context<H: DeviceHw + ?Sized>(&self, hw: &mut H) {
        self.tlb_sync_context_in(hw, crate::frame_id!("arm_smmu_tlb_sync_context"));
    }

    /// [`Self::tlb_sync_context`] in `frame`: its own, or entered with its callers' frames.
    #[inline]
    pub fn tlb_sync_context_in<H: DeviceHw + ?Sized>(&self, hw: &mut H, frame: &'static FrameId) {
        let back = hw.enter(frame);
        hw.sw(self.costs.sync);
        hw.with_lock(&self.cb_lock, |hw, sync| {
            hw.mmio_write(MmioReg::SmmuTlbsync, QCOM_DUMMY_VAL);
            // The first read commonly finds the sync complete; the rest of the poll is out of
            // line.
            if hw.mmio_read(MmioReg::SmmuTlbstatus) & SMMU_TLBSTATUS_GSACTIVE != 0
                && tlb_sync_poll(hw)
            {
                sync.timeouts += 1;
            }
        });
        hw.leave(back);
    }
}

/// `__arm_smmu_tlb_sync()`'s poll after its first `TLBSTATUS` read found the sync active:
/// the rest of the first `TLB_SPIN_COUNT` reads, then `udelay(1)`, `udelay(2)`, ... each
/// followed by as many reads, until a read finds it complete or the delay reaches
/// `TLB_LOOP_TIMEOUT_US`: whether it timed out.
#[cold]
#[inline(never)]
fn tlb_sync_poll<H: DeviceHw + ?Sized>(hw: &mut H) -> bool {
    let mut delay = 1u64;
    let mut reads = TLB_SPIN_COUNT - 1;
    while delay < TLB_LOOP_TIMEOUT_US {
        for _ in 0..reads {
            if hw.mmio_read(MmioReg::SmmuTlbstatus) & SMMU_TLBSTATUS_GSACTIVE == 0 {
                return false;
            }
        }
        let back = hw.enter(crate::frame_id!("udelay"));
        hw.udelay(delay);
        hw.leave(back);
        delay *= 2;
        reads = TLB_SPIN_COUNT;
    }
    true
}

/// The arm-smmu driver's `iommu_flush_ops` for one stage-1 domain.
#[derive(Debug)]
pub struct ArmSmmuDomain {
    pub cb: ArmSmmuContext,
    walk: WalkFlushKind,
}

impl ArmSmmuDomain {
    /// A domain on an SMMU whose table walker is not coherent (see [`Self::with_coherent_walk`]).
    pub fn new(hw: &dyn Hw, asid: u16, walk: WalkFlushKind) -> ArmSmmuDomain {
        ArmSmmuDomain {
            cb: ArmSmmuContext {
                asid,
                coherent_walk: false,
                cb_lock: crate::smp::SpinLock::named(
                    "cb_lock",
                    "(spinning on cb_lock)",
                    TlbSync::default(),
                ),
                costs: Costs {
                    inv_range: hw.sw_cost(SwKey::ArmSmmuTlbInvRange),
                    inv_step: hw.sw_cost(SwKey::ArmSmmuTlbInvStep),
                    sync: hw.sw_cost(SwKey::ArmSmmuTlbSync),
                },
            },
            walk,
        }
    }

    /// The SMMU's `ARM_SMMU_FEAT_COHERENT_WALK`, read at probe.
    pub fn with_coherent_walk(mut self, coherent: bool) -> ArmSmmuDomain {
        self.cb.coherent_walk = coherent;
        self
    }

    pub fn walk_flush(&self) -> WalkFlushKind {
        self.walk
    }

    /// `arm_smmu_tlb_inv_walk_s1()`: the body of [`IommuFlushOps::tlb_flush_walk`], generic as
    /// [`Self::tlb_add_page_s1`] is, the policy reached by a match.
    #[inline]
    pub fn tlb_flush_walk_s1<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        size: u64,
        granule: u64,
    ) {
        let back = hw.enter(crate::frame_id!("arm_smmu_tlb_inv_walk_s1"));
        match self.walk {
            WalkFlushKind::ByVa => ByVa::flush(&self.cb, hw, iova, size, granule),
            WalkFlushKind::Asid => ByAsid::flush(&self.cb, hw),
        }
        hw.leave(back);
    }

    /// `arm_smmu_tlb_add_page_s1()`: one `TLBIVAL`, issued at once. The body of
    /// [`IommuFlushOps::tlb_add_page`], generic so that io-pgtable's unmap loop, holding a
    /// concrete backend, reaches the register write with static calls.
    #[inline]
    pub fn tlb_add_page_s1<H: DeviceHw + ?Sized>(&self, hw: &mut H, iova: u64, granule: u64) {
        let back = hw.enter(crate::frame_id!("arm_smmu_tlb_add_page_s1"));
        self.cb
            .tlb_inv_range_s1(hw, iova, granule, granule, MmioReg::SmmuTlbival);
        hw.leave(back);
    }

    /// `arm_smmu_iotlb_sync()`: the body of [`IommuFlushOps::iotlb_sync`], generic as above.
    #[inline]
    pub fn iotlb_sync_s1<H: DeviceHw + ?Sized>(&self, hw: &mut H, gather: &mut IommuIotlbGather) {
        self.iotlb_sync_s1_in(hw, gather, crate::frame_id!("arm_smmu_tlb_sync_context"));
    }

    /// [`Self::iotlb_sync_s1`] with the sync routine's frame entered as `frame` (see
    /// [`super::SyncFrames`]).
    #[inline]
    pub fn iotlb_sync_s1_in<H: DeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        gather: &mut IommuIotlbGather,
        frame: &'static FrameId,
    ) {
        self.cb.tlb_sync_context_in(hw, frame);
        let queued = gather.queued;
        *gather = IommuIotlbGather::new();
        gather.queued = queued;
    }
}

impl crate::stats::Stats for ArmSmmuDomain {
    fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        vec![(self.cb.cb_lock.name(), self.cb.cb_lock.record())]
    }
}

impl IommuFlushOps for ArmSmmuDomain {
    fn name(&self) -> &'static str {
        "arm-smmu"
    }

    fn tlb_flush_all(&self, hw: &mut dyn DeviceHw) {
        self.cb.tlb_inv_context_s1(hw);
    }

    fn tlb_flush_walk(&self, hw: &mut dyn DeviceHw, iova: u64, size: u64, granule: u64) {
        self.tlb_flush_walk_s1(hw, iova, size, granule);
    }

    fn tlb_add_page(
        &self,
        hw: &mut dyn DeviceHw,
        _gather: &mut IommuIotlbGather,
        iova: u64,
        granule: u64,
    ) {
        self.tlb_add_page_s1(hw, iova, granule);
    }

    fn iotlb_sync(&self, hw: &mut dyn DeviceHw, gather: &mut IommuIotlbGather) {
        self.iotlb_sync_s1(hw, gather);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Counter;
    use crate::hw::recorder::Recorder;

    #[test]
    fn walk_flush_by_va_writes_one_tlbiva_per_granule_then_syncs() {
        let mut r = Recorder::new(64);
        let d = ArmSmmuDomain::new(&r, 3, WalkFlushKind::ByVa);
        d.tlb_flush_walk(&mut r, 0x20_0000, 2 << 20, 4096);
        assert_eq!(r.count_of(Counter::SmmuTlbiva), 512);
        assert_eq!(r.count_of(Counter::SmmuTlbsync), 1);
        assert_eq!(r.count_of(Counter::SmmuTlbstatusRead), 1);
        let mut r = Recorder::new(64);
        let d = ArmSmmuDomain::new(&r, 3, WalkFlushKind::Asid);
        d.tlb_flush_walk(&mut r, 0x20_0000, 2 << 20, 4096);
        assert_eq!(
            r.mmio,
            vec![
                MmioReg::SmmuTlbiasid,
                MmioReg::SmmuTlbsync,
                MmioReg::SmmuTlbstatus
            ]
        );
    }

    #[test]
    fn sync_spins_ten_reads_then_backs_off() {
        let mut r = Recorder::new(64);
        r.busy_polls_per_sync = 25;
        let d = ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa);
        let mut g = IommuIotlbGather::new();
        d.iotlb_sync(&mut r, &mut g);
        // 10 busy, udelay(1), 10 busy, udelay(2), 5 busy + 1 idle.
        assert_eq!(r.count_of(Counter::SmmuTlbstatusRead), 26);
        assert_eq!(r.udelays, vec![1, 2]);
        assert_eq!(d.cb.sync_timeouts(), 0);
    }

    /// The first back-off comes after exactly `TLB_SPIN_COUNT` busy reads, the first read
    /// included: nine busy reads end the sync in the first round, ten need one `udelay`, twenty
    /// two.
    #[test]
    fn sync_backs_off_after_exactly_ten_busy_reads() {
        for (busy, delays) in [(9, vec![]), (10, vec![1]), (19, vec![1]), (20, vec![1, 2])] {
            let mut r = Recorder::new(64);
            r.busy_polls_per_sync = busy;
            let d = ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa);
            d.cb.tlb_sync_context(&mut r);
            assert_eq!(
                r.count_of(Counter::SmmuTlbstatusRead),
                busy + 1,
                "{busy} busy"
            );
            assert_eq!(r.udelays, delays, "{busy} busy");
        }
    }

    #[test]
    fn sync_gives_up_after_a_second_of_polling() {
        let mut r = Recorder::new(64);
        r.busy_polls_per_sync = u64::MAX;
        let d = ArmSmmuDomain::new(&r, 1, WalkFlushKind::ByVa);
        d.cb.tlb_sync_context(&mut r);
        assert_eq!(d.cb.sync_timeouts(), 1);
        assert_eq!(r.udelays.len(), 20);
        assert!(r.udelays.iter().sum::<u64>() >= TLB_LOOP_TIMEOUT_US);
    }

    #[test]
    fn leaf_invalidation_encodes_asid_and_va() {
        let mut r = Recorder::new(64);
        let d = ArmSmmuDomain::new(&r, 7, WalkFlushKind::ByVa);
        let mut g = IommuIotlbGather::new();
        d.tlb_add_page(&mut r, &mut g, 0x4000_0000, 2 << 20);
        assert_eq!(r.mmio, vec![MmioReg::SmmuTlbival]);
    }

    /// Item 3 of #8: `arm_smmu_tlb_inv_context_s1()` issues `wmb()` before `TLBIASID`, coherent
    /// walker or not; 5.14 and 5.15 (and every release read up to 7.1) share it.
    #[test]
    fn context_invalidation_issues_a_wmb_before_tlbiasid() {
        for coherent in [false, true] {
            let mut r = Recorder::new(64);
            let d = ArmSmmuDomain::new(&r, 3, WalkFlushKind::Asid).with_coherent_walk(coherent);
            d.tlb_flush_all(&mut r);
            assert_eq!(
                r.events,
                vec![
                    "wmb",
                    "smmu_tlbiasid",
                    "smmu_tlbsync",
                    "smmu_tlbstatus_read"
                ],
                "coherent={coherent}"
            );
            // 5.15's walk flush by ASID goes through the same function: one wmb per freed table.
            let mut r = Recorder::new(64);
            for t in 0..16u64 {
                d.tlb_flush_walk(&mut r, t << 21, 2 << 20, 4096);
            }
            assert_eq!(r.count_of(Counter::Wmb), 16);
            assert_eq!(r.count_of(Counter::SmmuTlbiasid), 16);
        }
    }

    /// `arm_smmu_tlb_inv_range_s1()` issues one `wmb()` per call on a coherent walker and none on
    /// a non-coherent one (whose PTE cleaning already ended with a DSB).
    #[test]
    fn range_invalidation_issues_a_wmb_per_call_only_for_a_coherent_walker() {
        for (coherent, wmbs) in [(false, 0), (true, 1)] {
            let mut r = Recorder::new(64);
            let d = ArmSmmuDomain::new(&r, 3, WalkFlushKind::ByVa).with_coherent_walk(coherent);
            d.tlb_flush_walk(&mut r, 0x20_0000, 2 << 20, 4096);
            assert_eq!(r.count_of(Counter::Wmb), wmbs, "coherent={coherent}");
            assert_eq!(r.count_of(Counter::SmmuTlbiva), 512);
            if coherent {
                assert_eq!(r.events[0], "wmb", "before the first TLBIVA");
                assert_eq!(r.events[1], "smmu_tlbiva");
            }
            // Leaves: one call (and so one wmb when coherent) per page.
            let mut r = Recorder::new(64);
            let mut g = IommuIotlbGather::new();
            for i in 0..5 {
                d.tlb_add_page(&mut r, &mut g, 0x4000_0000 + i * 4096, 4096);
            }
            assert_eq!(r.count_of(Counter::SmmuTlbival), 5);
            assert_eq!(r.count_of(Counter::Wmb), 5 * wmbs, "coherent={coherent}");
        }
    }

    /// Item 3 of #8, io-pgtable side: `arm_lpae_map()` (5.14, one page per call) and
    /// `arm_lpae_map_pages()` (5.15) end every call that reaches the walk with `wmb()`, an
    /// `-EEXIST` included; a call with neither read nor write access returns before it.
    #[test]
    fn every_page_table_map_call_ends_with_a_wmb() {
        use crate::iommu::Prot;
        use crate::iommu::core::{IommuDomain, SplitKind};
        use crate::iommu::io_pgtable_arm::{ArmLpaeIoPgtable, IoPgtableCfg};
        use crate::mm::physmem::PhysMem;
        use crate::types::{IovaAddr, PhysAddr};
        let domain = |r: &mut Recorder, split: SplitKind| {
            let mem = PhysMem::single(PhysAddr(0x1_0000_0000), 64 << 20).shared();
            let t = ArmLpaeIoPgtable::new(r, IoPgtableCfg::new(4096, 48), mem, None).unwrap();
            let ops = Box::new(ArmSmmuDomain::new(r, 5, WalkFlushKind::ByVa));
            IommuDomain::new(r, t, ops, split)
        };
        // 1 MB of scattered 4K elements: one driver map call, so one wmb, per page on both.
        let segs: Vec<_> = (0..256u64)
            .map(|i| (PhysAddr(0x8000_0000 + i * 8192), 4096))
            .collect();
        for split in [SplitKind::PerPage, SplitKind::UnmapPages] {
            let mut r = Recorder::new(64);
            let d = domain(&mut r, split);
            let mut r = Recorder::new(64);
            d.iommu_map_sg(&mut r, IovaAddr(1 << 32), &segs, Prot::RW)
                .unwrap();
            assert_eq!(r.count_of(Counter::PgtableMapCall), 256, "{split:?}");
            assert_eq!(r.count_of(Counter::Wmb), 256, "{split:?}");
        }
        // 1 MB physically contiguous: 256 calls on 5.14, one map_pages call on 5.15.
        for (split, calls) in [(SplitKind::PerPage, 256), (SplitKind::UnmapPages, 1)] {
            let mut r = Recorder::new(64);
            let d = domain(&mut r, split);
            let mut r = Recorder::new(64);
            d.iommu_map(
                &mut r,
                IovaAddr(1 << 32),
                PhysAddr(0x8000_0000),
                1 << 20,
                Prot::RW,
            )
            .unwrap();
            assert_eq!(r.count_of(Counter::Wmb), calls, "{split:?}");
            assert_eq!(r.events.last(), Some(&"wmb"));
            // Mapping over it again is refused (-EEXIST) after the walk: the wmb is still issued.
            let mut r = Recorder::new(64);
            let e = d.iommu_map(
                &mut r,
                IovaAddr(1 << 32),
                PhysAddr(0x8000_0000),
                4096,
                Prot::RW,
            );
            assert!(e.is_err());
            assert_eq!(r.count_of(Counter::Wmb), 1, "{split:?}");
            // No access: arm_lpae_map returns 0 before the walk, with no barrier.
            let mut r = Recorder::new(64);
            d.iommu_map(
                &mut r,
                IovaAddr(2 << 32),
                PhysAddr(0x8000_0000),
                4096,
                Prot::CACHE,
            )
            .unwrap();
            assert_eq!(r.count_of(Counter::Wmb), 0, "{split:?}");
        }
    }
}
