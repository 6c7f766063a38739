//! ARMv7 L1 data-cache maintenance by virtual address for DMA.
//!
//! Kernel counterpart: arch/arm/mm/cache-v7.S as of 3.14–4.0: `v7_dma_map_area`,
//! `v7_dma_unmap_area` (the `dmac_map_area` / `dmac_unmap_area` of a v7 CPU) and the range
//! loops behind them, `v7_dma_inv_range`, `v7_dma_clean_range`, `v7_dma_flush_range`.
//!
//! What it models: one `mcr p15` per line, stepping by the minimum D-cache line
//! (`dcache_line_size`, 32 bytes on a Cortex-A9): DCCMVAC (clean), DCIMVAC (invalidate), DCCIMVAC
//! (clean and invalidate), each to the point of coherency, then one barrier: a full `dsb` in
//! 3.14 and 3.15 ([`Barrier::barrier`]), `dsb st` from 3.16 ([`Barrier::wmb`]) — the `v7_dsb`
//! policy. With `CONFIG_ARM_ERRATA_764369` each loop is preceded by a full `dsb` on SMP
//! (`ALT_SMP(W(dsb))`), the `arm_errata_764369` policy; mach-zynq's Kconfig of 3.14–3.19 does not
//! select it and `multi_v7_defconfig` does not enable it, so no preset turns it on.
//!
//! Invariants, as the assembly runs: every loop is a do-while, so it maintains at least one line;
//! `v7_dma_inv_range` cleans-and-invalidates a partial first line *without stepping past it* (the
//! invalidate loop starts on that same line again) and a partial last line (which the loop, running
//! while below the rounded-down end, then leaves alone).

use crate::hw::{CacheOp, Hw};
use crate::types::{Choice, DmaDirection, PhysAddr};

/// The barrier that ends each DMA range loop (the `v7_dsb` policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V7Dsb {
    /// `dsb` (DSB SY), 3.14 and 3.15.
    Dsb,
    /// `dsb st`, from 3.16.
    DsbSt,
}

impl Choice for V7Dsb {
    const ALL: &'static [V7Dsb] = &[V7Dsb::Dsb, V7Dsb::DsbSt];
    fn name(self) -> &'static str {
        match self {
            V7Dsb::Dsb => "dsb",
            V7Dsb::DsbSt => "dsb-st",
        }
    }
}

/// `CONFIG_ARM_ERRATA_764369` (the `arm_errata_764369` policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errata764369 {
    Off,
    /// A full `dsb` before each range loop (SMP).
    On,
}

impl Choice for Errata764369 {
    const ALL: &'static [Errata764369] = &[Errata764369::Off, Errata764369::On];
    fn name(self) -> &'static str {
        match self {
            Errata764369::Off => "off",
            Errata764369::On => "on",
        }
    }
}

/// cache-v7.S's DMA range functions as a release and its configuration build them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheV7 {
    pub end: V7Dsb,
    pub errata_764369: Errata764369,
}

impl Default for CacheV7 {
    /// 3.16's, without the erratum.
    fn default() -> CacheV7 {
        CacheV7 {
            end: V7Dsb::DsbSt,
            errata_764369: Errata764369::Off,
        }
    }
}

/// Lines a do-while loop from the aligned `start` visits while below `end` (at least one).
fn loop_lines(start: u64, end: u64, line: u64) -> u64 {
    end.saturating_sub(start).div_ceil(line).max(1)
}

impl CacheV7 {
    /// The erratum's `dsb` before a loop.
    fn before_loop(&self, hw: &mut dyn Hw) {
        if self.errata_764369 == Errata764369::On {
            hw.barrier();
        }
    }

    /// The barrier that ends a loop.
    fn after_loop(&self, hw: &mut dyn Hw) {
        match self.end {
            V7Dsb::Dsb => hw.barrier(),
            V7Dsb::DsbSt => hw.wmb(),
        }
    }

    /// `v7_dma_inv_range(start, end)`.
    pub fn v7_dma_inv_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        let back = hw.enter(crate::frame_id!("v7_dma_inv_range"));
        let line = hw.line_bytes();
        let mask = line - 1;
        let first = start.0 & !mask;
        self.before_loop(hw);
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
        self.after_loop(hw);
        hw.leave(back);
    }

    /// `v7_dma_clean_range(start, end)`: DCCMVAC from the line holding `start` while below `end`.
    pub fn v7_dma_clean_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        self.by_line(
            hw,
            crate::frame_id!("v7_dma_clean_range"),
            CacheOp::Clean,
            start,
            end,
        );
    }

    /// `v7_dma_flush_range(start, end)`: DCCIMVAC from the line holding `start` while below `end`.
    pub fn v7_dma_flush_range(&self, hw: &mut dyn Hw, start: PhysAddr, end: PhysAddr) {
        self.by_line(
            hw,
            crate::frame_id!("v7_dma_flush_range"),
            CacheOp::CleanInval,
            start,
            end,
        );
    }

    fn by_line(
        &self,
        hw: &mut dyn Hw,
        frame: &'static crate::hw::FrameId,
        op: CacheOp,
        start: PhysAddr,
        end: PhysAddr,
    ) {
        let back = hw.enter(frame);
        let line = hw.line_bytes();
        let first = start.0 & !(line - 1);
        self.before_loop(hw);
        hw.cache_maint(op, PhysAddr(first), loop_lines(first, end.0, line));
        self.after_loop(hw);
        hw.leave(back);
    }

    /// `v7_dma_map_area(start, size, dir)`: invalidate for FROM_DEVICE, clean otherwise.
    pub fn v7_dma_map_area(&self, hw: &mut dyn Hw, start: PhysAddr, size: u64, dir: DmaDirection) {
        let back = hw.enter(crate::frame_id!("v7_dma_map_area"));
        let end = PhysAddr(start.0.saturating_add(size));
        if dir == DmaDirection::FromDevice {
            self.v7_dma_inv_range(hw, start, end);
        } else {
            self.v7_dma_clean_range(hw, start, end);
        }
        hw.leave(back);
    }

    /// `v7_dma_unmap_area(start, size, dir)`: invalidate unless TO_DEVICE, for which it returns at once.
    pub fn v7_dma_unmap_area(
        &self,
        hw: &mut dyn Hw,
        start: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("v7_dma_unmap_area"));
        if dir != DmaDirection::ToDevice {
            self.v7_dma_inv_range(hw, start, PhysAddr(start.0.saturating_add(size)));
        }
        hw.leave(back);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::test_support::Recorder;

    const V7: CacheV7 = CacheV7 {
        end: V7Dsb::DsbSt,
        errata_764369: Errata764369::Off,
    };

    #[test]
    fn inval_partial_first_line_is_cleaned_then_invalidated_again() {
        let mut r = Recorder::new(32);
        V7.v7_dma_inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
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
        V7.v7_dma_inv_range(&mut r, PhysAddr(0x1000), PhysAddr(0x1000));
        assert_eq!(r.ops, vec![(CacheOp::Inval, 0x1000, 1)]);
        let mut r = Recorder::new(32);
        V7.v7_dma_clean_range(&mut r, PhysAddr(0x1004), PhysAddr(0x1004));
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0x1000, 1)]);
    }

    #[test]
    fn clean_covers_a_partial_last_line() {
        let mut r = Recorder::new(32);
        V7.v7_dma_clean_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1041));
        // 0x1000, 0x1020, 0x1040.
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0x1000, 3)]);
        let mut r = Recorder::new(32);
        V7.v7_dma_flush_range(&mut r, PhysAddr(0x2000), PhysAddr(0x3000));
        assert_eq!(r.ops, vec![(CacheOp::CleanInval, 0x2000, 128)]);
    }

    #[test]
    fn map_and_unmap_follow_the_direction() {
        for dir in DmaDirection::ALL {
            let mut r = Recorder::new(32);
            V7.v7_dma_map_area(&mut r, PhysAddr(0), 4096, dir);
            let want = if dir == DmaDirection::FromDevice {
                CacheOp::Inval
            } else {
                CacheOp::Clean
            };
            assert_eq!(r.ops, vec![(want, 0, 128)], "{dir}");
            let mut r = Recorder::new(32);
            V7.v7_dma_unmap_area(&mut r, PhysAddr(0), 4096, dir);
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
            V7.v7_dma_inv_range(&mut r, PhysAddr(start), PhysAddr(end));
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

    #[test]
    fn releases_and_errata_change_only_the_barriers() {
        let old = CacheV7 {
            end: V7Dsb::Dsb,
            errata_764369: Errata764369::Off,
        };
        let mut r = Recorder::new(32);
        old.v7_dma_clean_range(&mut r, PhysAddr(0), PhysAddr(4096));
        assert_eq!(r.ops, vec![(CacheOp::Clean, 0, 128)]);
        assert_eq!(r.events, vec!["maint", "barrier"]);
        let errata = CacheV7 {
            errata_764369: Errata764369::On,
            ..V7
        };
        let mut r = Recorder::new(32);
        errata.v7_dma_inv_range(&mut r, PhysAddr(0x1010), PhysAddr(0x1110));
        // The erratum's dsb comes before the first line operation, the partial edges included.
        assert_eq!(r.events, vec!["barrier", "maint", "maint", "maint", "wmb"]);
        let mut r = Recorder::new(32);
        errata.v7_dma_map_area(&mut r, PhysAddr(0), 4096, DmaDirection::ToDevice);
        assert_eq!(r.events, vec!["barrier", "maint", "wmb"]);
    }
}
