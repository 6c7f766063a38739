//! The outer cache: Arm's L2C-310 (PL310) cache controller.
//!
//! Kernel counterpart: arch/arm/mm/cache-l2x0.c, whose `outer_cache_fns` for a PL310 changed
//! in 3.16:
//!
//! - 3.14/3.15 ([`L2x0`]): `l2x0_of_init` copies `pl310_data.outer_cache`, the `l2x0_inv_range`,
//!   `l2x0_clean_range` and `l2x0_flush_range` every L2x0 shares. Each takes `l2x0_lock` with
//!   interrupts off and works in 4 KB blocks, dropping and retaking the lock between blocks (so an
//!   interrupt can be taken); a clean or flush of a range at least `l2x0_size` long does the whole
//!   cache by way instead (`l2x0_clean_all`, `l2x0_flush_all`: the way mask written to
//!   `L2X0_CLEAN_WAY` / `L2X0_CLEAN_INV_WAY` and polled until clear), while an invalidate has
//!   no such switch (invalidating the whole cache would discard other data). Errata, as the
//!   kernel's conditions make them: `CONFIG_PL310_ERRATA_588369` turns `l2x0_flush_line` into a
//!   clean then an invalidate by PA (two writes) whatever the revision; the 588369/727915
//!   `debug_writel` around flushed lines and by-way operations writes the debug register only
//!   when `l2x0_init` installed `pl310_set_debug`, which it does for revisions up to r3p0, so on
//!   the modelled revisions (r3p1 and later) it writes nothing; `CONFIG_PL310_ERRATA_753970`
//!   moves the sync to a dummy register, still one write. mach-zynq's Kconfig of 3.14–3.19
//!   selects none of them and `multi_v7_defconfig` enables none.
//! - 3.16 on ([`L2c210`]): the `l2c_*` rewrite's L2C-310 `outer_cache_fns` (`l2c310_init_fns`)
//!   use the L2C-210 range functions `l2c210_inv_range`, `l2c210_clean_range` and
//!   `l2c210_flush_range` unless `l2c310_fixup` swaps in an erratum workaround (588369 below
//!   r2p0, 727915 on r2p0 for the whole-cache flush, 753970's dummy sync register on r3p0) —
//!   none applies from r3p1, which is what profiles may name (`platform::OUTER_REVISIONS`).
//!   One posted register write of the line's physical address per 32-byte line
//!   (`L2X0_CLEAN_LINE_PA`, `L2X0_INV_LINE_PA`, `L2X0_CLEAN_INV_LINE_PA`), then one write of
//!   `L2X0_CACHE_SYNC`; no lock, no 4 KB blocking, no switch to a by-way operation.
//!
//! Invariants: the line size is the controller's, `CACHE_LINE_SIZE` (32), whatever the CPU's; an
//! invalidate cleans-and-invalidates a partial first or last line (their other bytes may hold CPU
//! data) and invalidates the whole lines between; every range operation ends with one sync; the
//! lock is taken and released as often as the C does (once, plus once per 4 KB block after the
//! first), and `cache_wait` by line is empty on a PL310 (its by-PA operations are atomic).

use crate::hw::{CacheOp, Counter, Hw, SwCost, SwKey};
use crate::types::{Choice, PhysAddr};
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
        let back = hw.enter(crate::frame_id!("l2c210_inv_range"));
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
        hw.leave(back);
    }

    fn clean_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("l2c210_clean_range"));
        op_pa_range(hw, CacheOp::Clean, start.0 & !MASK, end.0);
        hw.outer_sync();
        hw.leave(back);
    }

    fn flush_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("l2c210_flush_range"));
        op_pa_range(hw, CacheOp::CleanInval, start.0 & !MASK, end.0);
        hw.outer_sync();
        hw.leave(back);
    }

    fn name(&self) -> &'static str {
        "l2c210"
    }
}

/// Which `outer_cache_fns` the release installs for a PL310 (the `outer_range` policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OuterRange {
    /// 3.14/3.15's `l2x0_*` ranges as mainline Zynq builds them (no PL310 errata configured).
    L2x0,
    /// The same with `CONFIG_PL310_ERRATA_588369` (which other PL310 SoCs select): a flushed
    /// line is a clean then an invalidate by PA. Never a preset on the modelled platforms.
    L2x0Errata588369,
    /// 3.16's `l2c210_*` ranges.
    L2c210,
}

impl Choice for OuterRange {
    const ALL: &'static [OuterRange] = &[
        OuterRange::L2x0,
        OuterRange::L2x0Errata588369,
        OuterRange::L2c210,
    ];
    fn name(self) -> &'static str {
        match self {
            OuterRange::L2x0 => "l2x0",
            OuterRange::L2x0Errata588369 => "l2x0-588369",
            OuterRange::L2c210 => "l2c210",
        }
    }
}

impl OuterRange {
    /// The functions this choice installs for a PL310 of `size` bytes (`l2x0_size`, from
    /// `AUX_CTRL` at init).
    pub fn fns(self, size: u64) -> Box<dyn OuterCacheFns> {
        match self {
            OuterRange::L2c210 => Box::new(L2c210),
            OuterRange::L2x0 => Box::new(L2x0::new(size, false)),
            OuterRange::L2x0Errata588369 => Box::new(L2x0::new(size, true)),
        }
    }
}

/// The 3.14/3.15 `l2x0_*` range functions.
#[derive(Debug, Clone, Copy)]
pub struct L2x0 {
    /// `l2x0_size`, in bytes.
    size: u64,
    /// `CONFIG_PL310_ERRATA_588369`.
    errata_588369: bool,
}

/// The block `l2x0_*_range` works in between lock drops.
pub const L2X0_BLOCK: u64 = 4096;

impl L2x0 {
    pub fn new(size: u64, errata_588369: bool) -> L2x0 {
        L2x0 {
            size,
            errata_588369,
        }
    }

    /// One acquisition of `l2x0_lock` with interrupts off, and its release
    /// (`raw_spin_lock_irqsave` + `raw_spin_unlock_irqrestore`), priced once per range call.
    fn lock(&self, hw: &mut dyn Hw, cost: SwCost) {
        hw.sw(cost);
        hw.count(Counter::SpinLock, 1);
    }

    /// `l2x0_flush_line`: one clean+invalidate write, or under 588369 a clean then an invalidate.
    fn flush_line(&self, hw: &mut dyn Hw, addr: u64, lines: u64) {
        if self.errata_588369 {
            for i in 0..lines {
                let a = PhysAddr(addr + i * CACHE_LINE_SIZE);
                hw.outer_line_op(CacheOp::Clean, a, 1);
                hw.outer_line_op(CacheOp::Inval, a, 1);
            }
        } else {
            hw.outer_line_op(CacheOp::CleanInval, PhysAddr(addr), lines);
        }
    }

    /// The 4 KB block loop: `op` on each line from `start` while below `end`, the lock dropped
    /// and retaken after every block but the last. Returns nothing: the caller syncs and unlocks.
    fn blocks(&self, hw: &mut dyn Hw, lock: SwCost, op: CacheOp, mut start: u64, end: u64) {
        while start < end {
            let blk_end = start + (end - start).min(L2X0_BLOCK);
            let lines = (blk_end - start).div_ceil(CACHE_LINE_SIZE);
            if op == CacheOp::CleanInval {
                self.flush_line(hw, start, lines);
            } else {
                hw.outer_line_op(op, PhysAddr(start), lines);
            }
            start += lines * CACHE_LINE_SIZE;
            if blk_end < end {
                self.lock(hw, lock);
            }
        }
    }

    /// `l2x0_clean_all` / `l2x0_flush_all`: the whole cache by way, under the lock, then a sync.
    fn all(&self, hw: &mut dyn Hw, lock: SwCost, frame: &'static crate::hw::FrameId, op: CacheOp) {
        let back = hw.enter(frame);
        self.lock(hw, lock);
        hw.outer_way_op(op, self.size / CACHE_LINE_SIZE);
        hw.outer_sync();
        hw.leave(back);
    }
}

impl OuterCacheFns for L2x0 {
    fn inv_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("l2x0_inv_range"));
        let lock = hw.sw_cost(SwKey::L2x0Lock);
        self.lock(hw, lock);
        let mut start = start.0;
        let mut end = end.0;
        if start & MASK != 0 {
            start &= !MASK;
            self.flush_line(hw, start, 1);
            start += CACHE_LINE_SIZE;
        }
        if end & MASK != 0 {
            end &= !MASK;
            self.flush_line(hw, end, 1);
        }
        self.blocks(hw, lock, CacheOp::Inval, start, end);
        hw.outer_sync();
        hw.leave(back);
    }

    fn clean_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("l2x0_clean_range"));
        let lock = hw.sw_cost(SwKey::L2x0Lock);
        if end.0.wrapping_sub(start.0) >= self.size {
            self.all(hw, lock, crate::frame_id!("l2x0_clean_all"), CacheOp::Clean);
        } else {
            self.lock(hw, lock);
            self.blocks(hw, lock, CacheOp::Clean, start.0 & !MASK, end.0);
            hw.outer_sync();
        }
        hw.leave(back);
    }

    fn flush_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("l2x0_flush_range"));
        let lock = hw.sw_cost(SwKey::L2x0Lock);
        if end.0.wrapping_sub(start.0) >= self.size {
            self.all(
                hw,
                lock,
                crate::frame_id!("l2x0_flush_all"),
                CacheOp::CleanInval,
            );
        } else {
            self.lock(hw, lock);
            self.blocks(hw, lock, CacheOp::CleanInval, start.0 & !MASK, end.0);
            hw.outer_sync();
        }
        hw.leave(back);
    }

    fn name(&self) -> &'static str {
        if self.errata_588369 {
            "l2x0 (PL310_ERRATA_588369)"
        } else {
            "l2x0"
        }
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

    const KB512: u64 = 512 << 10;

    fn l2x0(errata: bool) -> L2x0 {
        L2x0::new(KB512, errata)
    }

    #[test]
    fn l2x0_inv_of_a_megabyte_is_256_blocks_under_the_lock() {
        let mut r = Recorder::new(32);
        l2x0(false).inv_range(&mut r, PhysAddr(0x10_0000), PhysAddr(0x20_0000));
        // Invalidate has no whole-cache switch: one write per line, in 256 blocks of 128.
        assert_eq!(r.outer_ops.len(), 256);
        assert!(
            r.outer_ops
                .iter()
                .all(|o| o.0 == CacheOp::Inval && o.2 == 128)
        );
        assert_eq!(r.count_of(Counter::OuterInvalLine), 32768);
        // Taken once, then retaken after each of the first 255 blocks.
        assert_eq!(r.count_of(Counter::SpinLock), 256);
        assert_eq!(r.count_of(Counter::OuterSync), 1);
        assert!(r.outer_ways.is_empty());
    }

    #[test]
    fn l2x0_clean_and_flush_switch_to_by_way_at_the_cache_size() {
        for (size, by_way) in [(KB512 - 32, false), (KB512, true), (1 << 20, true)] {
            let mut r = Recorder::new(32);
            l2x0(false).clean_range(&mut r, PhysAddr(0x10_0000), PhysAddr(0x10_0000 + size));
            if by_way {
                assert_eq!(r.outer_ways, vec![(CacheOp::Clean, 16384)], "{size}");
                assert!(r.outer_ops.is_empty());
                assert_eq!(r.count_of(Counter::OuterCleanWay), 1);
                assert_eq!(r.count_of(Counter::SpinLock), 1);
                assert_eq!(
                    r.frames.last().map(String::as_str),
                    Some("l2x0_clean_range > l2x0_clean_all")
                );
            } else {
                assert!(r.outer_ways.is_empty());
                assert_eq!(r.count_of(Counter::OuterCleanLine), size / 32);
                // 128 blocks: the last one short by a line.
                assert_eq!(r.count_of(Counter::SpinLock), 128);
            }
            assert_eq!(r.count_of(Counter::OuterSync), 1);
            let mut r = Recorder::new(32);
            l2x0(false).flush_range(&mut r, PhysAddr(0), PhysAddr(size));
            assert_eq!(r.outer_ways.len(), usize::from(by_way), "flush {size}");
            if by_way {
                assert_eq!(r.count_of(Counter::OuterCleanInvalWay), 1);
            } else {
                assert_eq!(r.count_of(Counter::OuterCleanInvalLine), size / 32);
            }
        }
    }

    #[test]
    fn errata_588369_doubles_only_flushed_lines() {
        let mut r = Recorder::new(32);
        l2x0(true).flush_range(&mut r, PhysAddr(0), PhysAddr(8192));
        assert_eq!(r.count_of(Counter::OuterCleanLine), 256);
        assert_eq!(r.count_of(Counter::OuterInvalLine), 256);
        assert_eq!(r.count_of(Counter::OuterCleanInvalLine), 0);
        // An invalidate's partial edge lines are flushed lines; the whole lines are not.
        let mut r = Recorder::new(32);
        l2x0(true).inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
        assert_eq!(
            r.outer_ops,
            vec![
                (CacheOp::Clean, 0x1000, 1),
                (CacheOp::Inval, 0x1000, 1),
                (CacheOp::Clean, 0x1100, 1),
                (CacheOp::Inval, 0x1100, 1),
                (CacheOp::Inval, 0x1020, 7),
            ]
        );
        let mut r = Recorder::new(32);
        l2x0(false).inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
        assert_eq!(r.count_of(Counter::OuterCleanInvalLine), 2);
        assert_eq!(r.count_of(Counter::OuterInvalLine), 7);
    }

    #[test]
    fn l2x0_blocks_follow_the_c_loop_with_an_unaligned_end() {
        // clean [0x1000, 0x2010): block one is 4096 bytes (128 lines), block two runs from
        // 0x2000 to 0x2010, one line; the lock is dropped once between them.
        let mut r = Recorder::new(32);
        l2x0(false).clean_range(&mut r, PhysAddr(0x1000), PhysAddr(0x2010));
        assert_eq!(
            r.outer_ops,
            vec![(CacheOp::Clean, 0x1000, 128), (CacheOp::Clean, 0x2000, 1)]
        );
        assert_eq!(r.count_of(Counter::SpinLock), 2);
    }
}
