//! ARMv7 L1 data-cache maintenance by virtual address for DMA.
//!
//! Kernel counterpart: arch/arm/mm/cache-v7.S as of 3.16–4.0: `v7_dma_map_area`,
//! `v7_dma_unmap_area` (the `dmac_map_area` / `dmac_unmap_area` of a v7 CPU) and the range
//! loops behind them, `v7_dma_inv_range`, `v7_dma_clean_range`, `v7_dma_flush_range`.
//!
//! What it models: one `mcr p15` per line, stepping by the minimum D-cache line
//! (`dcache_line_size`, 32 bytes on a Cortex-A9): DCCMVAC (clean), DCIMVAC (invalidate), DCCIMVAC
//! (clean and invalidate), each to the point of coherency, then one `dsb st` (a `wmb()` here:
//! 3.14 still ends with a full `dsb`; 3.16 already has `dsb st`).
//!
//! Invariants, as the assembly runs: every loop is a do-while, so it maintains at least one line;
//! `v7_dma_inv_range` cleans-and-invalidates a partial first line *without stepping past it* (the
//! invalidate loop starts on that same line again) and a partial last line (which the loop, running
//! while below the rounded-down end, then leaves alone). Erratum 764369's extra `dsb` before each
//! loop is a kernel-config choice not modelled yet.

use crate::hw::{CacheOp, Hw};
use crate::types::{DmaDirection, PhysAddr};

/// Lines a do-while loop from the aligned `start` visits while below `end` (at least one).
fn loop_lines(start: u64, end: u64, line: u64) -> u64 {
    end.saturating_sub(start).div_ceil(line).max(1)
}

/// `v7_dma_inv_range(start, end)`.
pub fn v7_dma_inv_range(hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
    hw.enter("v7_dma_inv_range");
    let line = hw.line_bytes();
    let mask = line - 1;
    let first = start.0 & !mask;
    if start.0 & mask != 0 {
        hw.cache_maint(CacheOp::CleanInval, PhysAddr(first), 1);
    }
    let last = end.0 & !mask;
    if end.0 & mask != 0 {
        hw.cache_maint(CacheOp::CleanInval, PhysAddr(last), 1);
    }
    hw.cache_maint(
        CacheOp::Inval,
        PhysAddr(first),
        loop_lines(first, last, line),
    );
    hw.wmb();
    hw.leave();
}

/// `v7_dma_clean_range(start, end)`: DCCMVAC from the line holding `start` while below `end`.
pub fn v7_dma_clean_range(hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
    by_line(hw, "v7_dma_clean_range", CacheOp::Clean, start, end);
}

/// `v7_dma_flush_range(start, end)`: DCCIMVAC from the line holding `start` while below `end`.
pub fn v7_dma_flush_range(hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
    by_line(hw, "v7_dma_flush_range", CacheOp::CleanInval, start, end);
}

fn by_line(hw: &mut dyn Hw, frame: &'static str, op: CacheOp, start: PhysAddr, end: PhysAddr) {
    hw.enter(frame);
    let line = hw.line_bytes();
    let first = start.0 & !(line - 1);
    hw.cache_maint(op, PhysAddr(first), loop_lines(first, end.0, line));
    hw.wmb();
    hw.leave();
}

/// `v7_dma_map_area(start, size, dir)`: invalidate for FROM_DEVICE, clean otherwise.
pub fn v7_dma_map_area(hw: &mut dyn Hw, start: PhysAddr, size: u64, dir: DmaDirection) {
    hw.enter("v7_dma_map_area");
    let end = PhysAddr(start.0.saturating_add(size));
    if dir == DmaDirection::FromDevice {
        v7_dma_inv_range(hw, start, end);
    } else {
        v7_dma_clean_range(hw, start, end);
    }
    hw.leave();
}

/// `v7_dma_unmap_area(start, size, dir)`: invalidate unless TO_DEVICE, for which it returns at once.
pub fn v7_dma_unmap_area(hw: &mut dyn Hw, start: PhysAddr, size: u64, dir: DmaDirection) {
    hw.enter("v7_dma_unmap_area");
    if dir != DmaDirection::ToDevice {
        v7_dma_inv_range(hw, start, PhysAddr(start.0.saturating_add(size)));
    }
    hw.leave();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::test_support::Recorder;

    #[test]
    fn inval_partial_first_line_is_cleaned_then_invalidated_again() {
        let mut r = Recorder::new(32);
        v7_dma_inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
        // First line 0x1000 (partial): DCCIMVAC; last line 0x1100 (partial): DCCIMVAC; then the
        // loop from 0x1000 (not stepped past) while below 0x1100: 8 DCIMVAC.
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::CleanInval, 0x1100, 1),
                (CacheOp::Inval, 0x1000, 8),
            ]
        );
        assert_eq!(r.count_of(crate::hw::Counter::Wmb), 1);
        assert_eq!(r.barriers, 0);
    }

    #[test]
    fn loops_run_at_least_once() {
        let mut r = Recorder::new(32);
        v7_dma_inv_range(&mut r, PhysAddr(0x1000), PhysAddr(0x1000));
        assert_eq!(r.ops, vec![(CacheOp::Inval, 0x1000, 1)]);
        let mut r = Recorder::new(32);
        v7_dma_clean_range(&mut r, PhysAddr(0x1004), PhysAddr(0x1004));
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0x1000, 1)]);
    }

    #[test]
    fn clean_covers_a_partial_last_line() {
        let mut r = Recorder::new(32);
        v7_dma_clean_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1041));
        // 0x1000, 0x1020, 0x1040.
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0x1000, 3)]);
        let mut r = Recorder::new(32);
        v7_dma_flush_range(&mut r, PhysAddr(0x2000), PhysAddr(0x3000));
        assert_eq!(r.ops, vec![(CacheOp::CleanInval, 0x2000, 128)]);
    }

    #[test]
    fn map_and_unmap_follow_the_direction() {
        for dir in DmaDirection::ALL {
            let mut r = Recorder::new(32);
            v7_dma_map_area(&mut r, PhysAddr(0), 4096, dir);
            let want = if dir == DmaDirection::FromDevice {
                CacheOp::Inval
            } else {
                CacheOp::Clean
            };
            assert_eq!(r.ops, vec![(want, 0, 128)], "{dir}");
            let mut r = Recorder::new(32);
            v7_dma_unmap_area(&mut r, PhysAddr(0), 4096, dir);
            if dir == DmaDirection::ToDevice {
                assert!(r.ops.is_empty());
                assert_eq!(r.count_of(crate::hw::Counter::Wmb), 0);
            } else {
                assert_eq!(r.ops, vec![(CacheOp::Inval, 0, 128)], "{dir}");
            }
        }
    }

    proptest::proptest! {
        /// Against a line-by-line reading of the assembly: every line of [start, end) is
        /// invalidated at least once, only partial edge lines are cleaned, and nothing outside
        /// the lines holding the range is touched (except the one line a do-while always visits).
        #[test]
        fn inval_touches_exactly_the_range(start in 0u64..1 << 16, size in 1u64..5000) {
            let mut r = Recorder::new(32);
            let end = start + size;
            v7_dma_inv_range(&mut r, PhysAddr(start), PhysAddr(end));
            let mut inval = std::collections::BTreeSet::new();
            let mut clean = std::collections::BTreeSet::new();
            for (op, first, n) in &r.ops {
                for i in 0..*n {
                    let l = first + i * 32;
                    match op {
                        CacheOp::Inval => { inval.insert(l); }
                        _ => { clean.insert(l); }
                    }
                }
            }
            let lines: std::collections::BTreeSet<u64> =
                ((start & !31)..end).step_by(32).collect();
            let partial: std::collections::BTreeSet<u64> = lines
                .iter()
                .copied()
                .filter(|&l| l < start || l + 32 > end)
                .collect();
            proptest::prop_assert_eq!(&clean, &partial);
            let all: std::collections::BTreeSet<u64> = inval.union(&clean).copied().collect();
            proptest::prop_assert_eq!(all, lines);
        }
    }
}
