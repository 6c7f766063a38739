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

use super::ArchDma;
use crate::hw::{CacheOp, Hw, lines_spanned};
use crate::types::{DmaDirection, PhysAddr};

/// Which release's direction rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirRules {
    /// ≤ 5.18: map for FROM_DEVICE invalidates.
    Pre5_19,
    /// ≥ 5.19: map cleans in every direction.
    Since5_19,
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

/// `dcache_clean_poc[_nosync]`: DC CVAC on every line of the range.
pub fn dcache_clean_poc(hw: &mut dyn Hw, start: PhysAddr, size: u64, complete: bool) {
    hw.enter(if complete {
        "dcache_clean_poc"
    } else {
        "dcache_clean_poc_nosync"
    });
    let lines = lines_spanned(start, size, hw.line_bytes());
    hw.cache_maint(CacheOp::Clean, start, lines);
    if complete {
        hw.barrier();
    }
    hw.leave();
}

/// `dcache_inval_poc[_nosync]`: DC CIVAC on a partial first and last line, DC IVAC between.
pub fn dcache_inval_poc(hw: &mut dyn Hw, start: PhysAddr, size: u64, complete: bool) {
    hw.enter(if complete {
        "dcache_inval_poc"
    } else {
        "dcache_inval_poc_nosync"
    });
    if size > 0 {
        let line = hw.line_bytes();
        let end = start.0 + size;
        let mut first = start.0 / line;
        let mut last = (end - 1) / line; // inclusive
        if !start.0.is_multiple_of(line) {
            hw.cache_maint(CacheOp::CleanInval, PhysAddr(first * line), 1);
            first += 1;
        }
        if !end.is_multiple_of(line) && last >= first {
            hw.cache_maint(CacheOp::CleanInval, PhysAddr(last * line), 1);
            last = last.wrapping_sub(1);
        }
        if last != u64::MAX && last >= first {
            hw.cache_maint(CacheOp::Inval, PhysAddr(first * line), last - first + 1);
        }
    }
    if complete {
        hw.barrier();
    }
    hw.leave();
}

impl ArchDma for Arm64 {
    fn sync_for_device(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    ) {
        hw.enter("arch_sync_dma_for_device");
        if self.rules == DirRules::Pre5_19 && dir == DmaDirection::FromDevice {
            dcache_inval_poc(hw, paddr, size, complete);
        } else {
            dcache_clean_poc(hw, paddr, size, complete);
        }
        hw.leave();
    }

    fn sync_for_cpu(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    ) {
        hw.enter("arch_sync_dma_for_cpu");
        if dir != DmaDirection::ToDevice {
            dcache_inval_poc(hw, paddr, size, complete);
        }
        hw.leave();
    }

    fn flush(&self, hw: &mut dyn Hw) {
        hw.enter("arch_sync_dma_flush");
        hw.barrier();
        hw.leave();
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
        // 0x1010..0x1110: partial first line 0x1000, partial last line 0x1100, full 0x1040..0x10c0.
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::CleanInval, 0x1100, 1),
                (CacheOp::Inval, 0x1040, 3),
            ]
        );
        assert_eq!(r.barriers, 1);
    }

    #[test]
    fn inval_inside_one_partial_line() {
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x1008), 8, false);
        assert_eq!(r.ops, vec![(CacheOp::CleanInval, 0x1000, 1)]);
        assert_eq!(r.barriers, 0);
    }

    #[test]
    fn inval_aligned_range_is_all_ivac() {
        let mut r = Recorder::new(64);
        dcache_inval_poc(&mut r, PhysAddr(0x2000), 4096, false);
        assert_eq!(r.ops, vec![(CacheOp::Inval, 0x2000, 64)]);
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
}
