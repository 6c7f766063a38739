//! arm64 cache maintenance for DMA.
//!
//! Kernel counterparts: arch/arm64/mm/dma-mapping.c (`arch_sync_dma_for_device/cpu`),
//! arch/arm64/mm/cache.S (`dcache_clean_poc`, `dcache_inval_poc` and, from 7.1, their `_nosync`
//! forms), `dcache_by_line_op` in arch/arm64/include/asm/assembler.h, and 7.1's
//! `arch_sync_dma_flush()` (`dsb sy`).
//!
//! Direction rules (since 5.19, commit c50f11c6196f): for the device, clean to PoC in every
//! direction; for the CPU, nothing for TO_DEVICE, invalidate to PoC otherwise. Before 5.19 a map for
//! FROM_DEVICE invalidated instead of cleaning ([`DirRules::Pre5_19`]).
//!
//! `dcache_inval_poc` cleans-and-invalidates (DC CIVAC) a partial first or last line, because the
//! rest of that line may hold CPU data that must not be lost, and invalidates (DC IVAC) the rest.
//! It runs as cache.S writes it (the same from 3.15's ebf81a938dad to 7.1): the partial last line
//! first, then the first line (CIVAC if partial, else IVAC), then IVAC up to the last line, the
//! loop body running at least once. So a range whose unaligned end lies in its first line
//! maintains that line twice: CIVAC + CIVAC when the start is unaligned too, CIVAC + IVAC when
//! it is aligned.

use super::{ArchDma, by_line_op};
use crate::hw::{CacheOp, FrameId, Hw};
use crate::types::{DmaDirection, PhysAddr};

/// Which release's direction rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirRules {
    /// ≤ 5.18: map for FROM_DEVICE invalidates.
    Pre5_19,
    /// ≥ 5.19: map cleans in every direction.
    Since5_19,
}

impl crate::types::Choice for DirRules {
    const ALL: &'static [Self] = &[DirRules::Pre5_19, DirRules::Since5_19];
    fn name(self) -> &'static str {
        match self {
            DirRules::Pre5_19 => "pre-5.19",
            DirRules::Since5_19 => "5.19",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Arm64 {
    pub rules: DirRules,
}

impl Arm64 {
    pub fn new(rules: DirRules) -> Arm64 {
        Arm64 { rules }
    }
}

/// A cache routine's frame under both of its names, the one that waits for completion itself
/// and the `_nosync` one 7.1 issues with, entered alone or from inside a caller's frame (the
/// caller charges nothing of its own around it, so the two are entered as one).
struct PocFrames {
    synced: FrameId,
    nosync: FrameId,
}

impl PocFrames {
    const fn alone(synced: &'static str, nosync: &'static str) -> PocFrames {
        PocFrames {
            synced: FrameId::new(synced),
            nosync: FrameId::new(nosync),
        }
    }

    const fn from(
        caller: &'static [&'static str],
        synced: &'static str,
        nosync: &'static str,
    ) -> PocFrames {
        PocFrames {
            synced: FrameId::nested(caller, synced),
            nosync: FrameId::nested(caller, nosync),
        }
    }

    #[inline(always)]
    fn pick(&'static self, complete: bool) -> &'static FrameId {
        if complete { &self.synced } else { &self.nosync }
    }
}

static CLEAN_POC: PocFrames = PocFrames::alone("dcache_clean_poc", "dcache_clean_poc_nosync");
static CLEAN_POC_FOR_DEVICE: PocFrames = PocFrames::from(
    &["arch_sync_dma_for_device"],
    "dcache_clean_poc",
    "dcache_clean_poc_nosync",
);
static INVAL_POC: PocFrames = PocFrames::alone("dcache_inval_poc", "dcache_inval_poc_nosync");
static INVAL_POC_FOR_DEVICE: PocFrames = PocFrames::from(
    &["arch_sync_dma_for_device"],
    "dcache_inval_poc",
    "dcache_inval_poc_nosync",
);
static INVAL_POC_FOR_CPU: PocFrames = PocFrames::from(
    &["arch_sync_dma_for_cpu"],
    "dcache_inval_poc",
    "dcache_inval_poc_nosync",
);
static CLEAN_INVAL_POC: PocFrames =
    PocFrames::alone("dcache_clean_inval_poc", "dcache_clean_inval_poc_nosync");

/// `dcache_clean_poc[_nosync]`: DC CVAC on every line of the range.
#[inline(always)]
pub fn dcache_clean_poc<H: Hw + ?Sized>(hw: &mut H, start: PhysAddr, size: u64, complete: bool) {
    clean_poc_in(hw, &CLEAN_POC, start, size, complete);
}

/// [`dcache_clean_poc`] in `frames` (alone, or from inside its caller's frame).
#[inline(always)]
fn clean_poc_in<H: Hw + ?Sized>(
    hw: &mut H,
    frames: &'static PocFrames,
    start: PhysAddr,
    size: u64,
    complete: bool,
) {
    let frame = frames.pick(complete);
    by_line_op(hw, frame, CacheOp::Clean, start, size, complete);
}

/// `dcache_inval_poc[_nosync]`: DC CIVAC on a partial first and last line, DC IVAC between.
#[inline(always)]
pub fn dcache_inval_poc<H: Hw + ?Sized>(hw: &mut H, start: PhysAddr, size: u64, complete: bool) {
    inval_poc_in(hw, &INVAL_POC, start, size, complete);
}

/// [`dcache_inval_poc`] in `frames` (alone, or from inside its caller's frame).
#[inline(always)]
fn inval_poc_in<H: Hw + ?Sized>(
    hw: &mut H,
    frames: &'static PocFrames,
    start: PhysAddr,
    size: u64,
    complete: bool,
) {
    let frame = frames.pick(complete);
    let back = hw.enter(frame);
    if size > 0 {
        let line = hw.line_bytes();
        let mask = line - 1;
        let end = start.0 + size;
        let first = start.0 & !mask;
        // The end rounded down: the loop runs while below it.
        let last = end & !mask;
        if end & mask != 0 {
            hw.cache_maint(CacheOp::CleanInval, PhysAddr(last), 1);
        }
        let shift = line.trailing_zeros();
        if start.0 & mask != 0 {
            // The range starts inside its first line: clean it too, then invalidate the rest.
            hw.cache_maint(CacheOp::CleanInval, PhysAddr(first), 1);
            let next = first + line;
            if last > next {
                hw.cache_maint(CacheOp::Inval, PhysAddr(next), (last - next) >> shift);
            }
        } else {
            // The loop body runs at least once, so the first line is invalidated even when the
            // end (already cleaned above) lies inside it.
            let lines = ((last - first) >> shift).max(1);
            hw.cache_maint(CacheOp::Inval, PhysAddr(first), lines);
        }
    }
    if complete {
        hw.barrier();
    }
    hw.leave(back);
}

/// `dcache_clean_inval_poc[_nosync]`: DC CIVAC on every line of the range.
#[inline]
pub fn dcache_clean_inval_poc<H: Hw + ?Sized>(
    hw: &mut H,
    start: PhysAddr,
    size: u64,
    complete: bool,
) {
    let frame = CLEAN_INVAL_POC.pick(complete);
    by_line_op(hw, frame, CacheOp::CleanInval, start, size, complete);
}

/// Clean-and-invalidate in every direction, for host measurements on arm64 where user space may
/// issue DC CIVAC but not DC IVAC (so the kernel's invalidate path cannot run at EL0). It walks
/// the same geometry as [`Arm64`] with the one instruction a user asked to measure.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arm64CleanInval;

impl ArchDma for Arm64CleanInval {
    #[inline(always)]
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        _dir: DmaDirection,
        complete: bool,
    ) {
        let back = hw.enter(crate::frame_id!("arch_sync_dma_for_device"));
        dcache_clean_inval_poc(hw, paddr, size, complete);
        hw.leave(back);
    }

    #[inline(always)]
    fn sync_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        _dir: DmaDirection,
        complete: bool,
    ) {
        let back = hw.enter(crate::frame_id!("arch_sync_dma_for_cpu"));
        dcache_clean_inval_poc(hw, paddr, size, complete);
        hw.leave(back);
    }

    fn flush<H: Hw + ?Sized>(&self, hw: &mut H) {
        let back = hw.enter(crate::frame_id!("arch_sync_dma_flush"));
        hw.barrier();
        hw.leave(back);
    }

    fn required_ops(&self) -> &'static [CacheOp] {
        &[CacheOp::CleanInval]
    }

    fn name(&self) -> &'static str {
        "arm64"
    }
}

impl ArchDma for Arm64 {
    #[inline(always)]
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    ) {
        // arch_sync_dma_for_device charges nothing of its own: it is entered with the one cache
        // routine it calls.
        if self.rules == DirRules::Pre5_19 && dir == DmaDirection::FromDevice {
            inval_poc_in(hw, &INVAL_POC_FOR_DEVICE, paddr, size, complete);
        } else {
            clean_poc_in(hw, &CLEAN_POC_FOR_DEVICE, paddr, size, complete);
        }
    }

    #[inline(always)]
    fn sync_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    ) {
        if dir != DmaDirection::ToDevice {
            inval_poc_in(hw, &INVAL_POC_FOR_CPU, paddr, size, complete);
        } else {
            // Nothing to do for the CPU, but the call is the kernel's: its frame is entered.
            let back = hw.enter(crate::frame_id!("arch_sync_dma_for_cpu"));
            hw.leave(back);
        }
    }

    fn flush<H: Hw + ?Sized>(&self, hw: &mut H) {
        let back = hw.enter(crate::frame_id!("arch_sync_dma_flush"));
        hw.barrier();
        hw.leave(back);
    }

    fn required_ops(&self) -> &'static [CacheOp] {
        &[CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval]
    }

    fn name(&self) -> &'static str {
        "arm64"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::test_support::Recorder;

    #[test]
    fn inval_uses_civac_on_partial_edges_only() {
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x1010), 0x100, true);
        // 0x1010..0x1110: partial last line 0x1100 first, then the partial first line 0x1000,
        // then the whole lines 0x1040..0x10c0.
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1100, 1),
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::Inval, 0x1040, 3),
            ]
        );
        assert_eq!(r.barriers, 1);
    }

    /// Both unaligned ends in one line: cache.S maintains it twice — for the end (CIVAC), then
    /// for the start (CIVAC if unaligned, IVAC if aligned).
    #[test]
    fn inval_inside_one_line_maintains_it_twice() {
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x1008), 8, false);
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::CleanInval, 0x1000, 1)
            ]
        );
        assert_eq!(r.barriers, 0);
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x1000), 8, true);
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::Inval, 0x1000, 1)
            ]
        );
        assert_eq!(r.barriers, 1);
        // Ends in adjacent lines: each partial line once.
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x1030), 0x20, false);
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1040, 1),
                (CacheOp::CleanInval, 0x1000, 1)
            ]
        );
    }

    #[test]
    fn inval_aligned_range_is_all_ivac() {
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x2000), 4096, false);
        assert_eq!(r.ops, vec![(CacheOp::Inval, 0x2000, 64)]);
    }

    #[test]
    fn clean_inval_host_arch_uses_civac_both_ways() {
        for dir in DmaDirection::ALL {
            let mut r = Recorder::new(64);
            Arm64CleanInval.sync_for_device(&mut r, PhysAddr(0x1000), 4096, dir, false);
            Arm64CleanInval.sync_for_cpu(&mut r, PhysAddr(0x1000), 4096, dir, true);
            assert_eq!(
                r.ops,
                vec![
                    (CacheOp::CleanInval, 0x1000, 64),
                    (CacheOp::CleanInval, 0x1000, 64)
                ]
            );
            assert_eq!(r.barriers, 1);
        }
    }

    #[test]
    fn direction_rules() {
        let a = Arm64::new(DirRules::Since5_19);
        for dir in DmaDirection::ALL {
            let mut r = Recorder::new(64);
            a.sync_for_device(&mut r, PhysAddr(0), 4096, dir, true);
            assert_eq!(r.ops, vec![(CacheOp::Clean, 0, 64)], "{dir}");
            let mut r = Recorder::new(64);
            a.sync_for_cpu(&mut r, PhysAddr(0), 4096, dir, true);
            if dir == DmaDirection::ToDevice {
                assert!(r.ops.is_empty());
                assert_eq!(r.barriers, 0);
            } else {
                assert_eq!(r.ops, vec![(CacheOp::Inval, 0, 64)], "{dir}");
            }
        }
        let old = Arm64::new(DirRules::Pre5_19);
        let mut r = Recorder::new(64);
        old.sync_for_device(&mut r, PhysAddr(0), 4096, DmaDirection::FromDevice, true);
        assert_eq!(r.ops, vec![(CacheOp::Inval, 0, 64)]);
    }

    proptest::proptest! {
        /// Every line the range touches is maintained; a line only partly inside the range is
        /// cleaned and invalidated, a whole one just invalidated — once each, except the one
        /// line holding both ends of a range whose end is unaligned, which is maintained twice
        /// (CIVAC for the end, then CIVAC or IVAC for the start).
        #[test]
        fn inval_matches_a_line_by_line_reference(start in 0u64..1 << 20, size in 0u64..20_000) {
            let mut r = Recorder::new(64);
            dcache_inval_poc(&mut r, PhysAddr(start), size, false);
            let mut got: std::collections::BTreeMap<u64, Vec<CacheOp>> = Default::default();
            for (op, first, n) in &r.ops {
                for i in 0..*n {
                    got.entry(first + i * 64).or_default().push(*op);
                }
            }
            let mut want: std::collections::BTreeMap<u64, Vec<CacheOp>> = Default::default();
            if size > 0 {
                let end = start + size;
                let mut line = start & !63;
                while line < end {
                    let whole = line >= start && line + 64 <= end;
                    let ops = want.entry(line).or_default();
                    if whole {
                        ops.push(CacheOp::Inval);
                    } else if line == start & !63 && end % 64 != 0 && (end - 1) & !63 == line {
                        ops.push(CacheOp::CleanInval);
                        ops.push(if start % 64 != 0 { CacheOp::CleanInval } else { CacheOp::Inval });
                    } else {
                        ops.push(CacheOp::CleanInval);
                    }
                    line += 64;
                }
            }
            proptest::prop_assert_eq!(got, want);
        }
    }
}
