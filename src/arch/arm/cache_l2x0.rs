//! The outer cache: Arm's L2C-310 (PL310) cache controller.
//!
//! Kernel counterpart: arch/arm/mm/cache-l2x0.c from 3.16 (the `l2c_*` rewrite), whose L2C-310
//! `outer_cache_fns` (`l2c310_init_fns`) use the L2C-210 range functions `l2c210_inv_range`,
//! `l2c210_clean_range` and `l2c210_flush_range` unless `l2c310_fixup` swaps in an erratum
//! workaround (588369 below r2p0, 727915 on r2p0 for the whole-cache flush, 753970's dummy sync
//! register on r3p0) — none applies from r3p1, which is what profiles may name
//! (`platform::OUTER_REVISIONS`).
//!
//! What it models: one posted register write of the line's physical address per 32-byte line
//! (`L2X0_CLEAN_LINE_PA`, `L2X0_INV_LINE_PA`, `L2X0_CLEAN_INV_LINE_PA`), then one write of
//! `L2X0_CACHE_SYNC`; no lock, no 4 KB blocking, no switch to a by-way operation however large the
//! range. The 3.14/3.15 `l2x0_*` functions (spinlock with interrupts off, 4 KB blocks, by-way
//! clean/flush from 512 KB) are the documented next step.
//!
//! Invariants: the line size is the controller's, `CACHE_LINE_SIZE` (32), whatever the CPU's; an
//! invalidate cleans-and-invalidates a partial first or last line (their other bytes may hold CPU
//! data) and invalidates the whole lines between; every range operation ends with one sync.

use crate::hw::{CacheOp, Hw};
use crate::types::PhysAddr;
use std::fmt::Debug;

/// `CACHE_LINE_SIZE` in cache-l2x0.c.
pub const CACHE_LINE_SIZE: u64 = 32;
const MASK: u64 = CACHE_LINE_SIZE - 1;

/// `struct outer_cache_fns`: the range operations the DMA code calls through `outer_*_range`.
pub trait OuterCacheFns: Debug {
    /// `outer_inv_range(start, end)`.
    fn inv_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr);
    /// `outer_clean_range(start, end)`.
    fn clean_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr);
    /// `outer_flush_range(start, end)`.
    fn flush_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr);
    fn name(&self) -> &'static str;
}

/// The L2C-210 range functions, as 3.16+ installs them for an L2C-310 from r3p1.
#[derive(Debug, Clone, Copy, Default)]
pub struct L2c210;

/// `__l2c210_op_pa_range`: one write per line from `start` while below `end`.
fn op_pa_range(hw: &mut dyn Hw, op: CacheOp, start: u64, end: u64) {
    if start < end {
        hw.outer_line_op(op, PhysAddr(start), (end - start).div_ceil(CACHE_LINE_SIZE));
    }
}

impl OuterCacheFns for L2c210 {
    fn inv_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        hw.enter("l2c210_inv_range");
        let mut start = start.0;
        let mut end = end.0;
        if start & MASK != 0 {
            start &= !MASK;
            hw.outer_line_op(CacheOp::CleanInval, PhysAddr(start), 1);
            start += CACHE_LINE_SIZE;
        }
        if end & MASK != 0 {
            end &= !MASK;
            hw.outer_line_op(CacheOp::CleanInval, PhysAddr(end), 1);
        }
        op_pa_range(hw, CacheOp::Inval, start, end);
        hw.outer_sync();
        hw.leave();
    }

    fn clean_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        hw.enter("l2c210_clean_range");
        op_pa_range(hw, CacheOp::Clean, start.0 & !MASK, end.0);
        hw.outer_sync();
        hw.leave();
    }

    fn flush_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        hw.enter("l2c210_flush_range");
        op_pa_range(hw, CacheOp::CleanInval, start.0 & !MASK, end.0);
        hw.outer_sync();
        hw.leave();
    }

    fn name(&self) -> &'static str {
        "l2c210"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Counter;
    use crate::hw::test_support::Recorder;

    #[test]
    fn clean_one_megabyte_is_one_write_per_line_and_one_sync() {
        let mut r = Recorder::new(32);
        L2c210.clean_range(&mut r, PhysAddr(0x10_0000), PhysAddr(0x20_0000));
        assert_eq!(r.outer_ops, vec![(CacheOp::Clean, 0x10_0000, 32768)]);
        assert_eq!(r.count_of(Counter::OuterCleanLine), 32768);
        assert_eq!(r.count_of(Counter::OuterSync), 1);
        assert_eq!(r.events, vec!["outer_maint", "outer_sync"]);
        // No CPU-side maintenance or barrier: the PL310 is reached by register writes only.
        assert!(r.ops.is_empty());
        assert_eq!(r.barriers, 0);
    }

    #[test]
    fn inval_cleans_partial_edges_and_steps_past_the_first() {
        let mut r = Recorder::new(32);
        L2c210.inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
        assert_eq!(
            r.outer_ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::CleanInval, 0x1100, 1),
                (CacheOp::Inval, 0x1020, 7),
            ]
        );
        assert_eq!(r.count_of(Counter::OuterSync), 1);
        // Both ends inside one line: that line is cleaned and invalidated twice, nothing else.
        let mut r = Recorder::new(32);
        L2c210.inv_range(&mut r, PhysAddr(0x1004), PhysAddr(0x1008));
        assert_eq!(
            r.outer_ops,
            vec![
                (CacheOp::CleanInval, 0x1000, 1),
                (CacheOp::CleanInval, 0x1000, 1)
            ]
        );
    }

    #[test]
    fn flush_and_empty_ranges() {
        let mut r = Recorder::new(32);
        L2c210.flush_range(&mut r, PhysAddr(0x1001), PhysAddr(0x1041));
        assert_eq!(r.outer_ops, vec![(CacheOp::CleanInval, 0x1000, 3)]);
        // An empty range still syncs (the C loop simply does not run).
        let mut r = Recorder::new(32);
        L2c210.clean_range(&mut r, PhysAddr(0x1000), PhysAddr(0x1000));
        assert!(r.outer_ops.is_empty());
        assert_eq!(r.count_of(Counter::OuterSync), 1);
    }
}
