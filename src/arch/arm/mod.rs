//! 32-bit ARM (ARMv7-A) cache maintenance for streaming DMA.
//!
//! Kernel counterpart: arch/arm/mm/dma-mapping.c of 3.14–4.0: `__dma_page_cpu_to_dev` (map and
//! sync_for_device) and `__dma_page_dev_to_cpu` (unmap and sync_for_cpu), over the CPU's
//! `dmac_map_area` / `dmac_unmap_area` ([`cache_v7`]) and the outer cache's `outer_*_range`
//! ([`cache_l2x0`]); the `arm_dma_ops` that call them are `dma::arm_dma`.
//!
//! Direction rules: towards the device, the L1 by virtual address first (`dmac_map_area`:
//! invalidate for FROM_DEVICE, clean otherwise), then the outer cache by physical address
//! (`outer_inv_range` for FROM_DEVICE, `outer_clean_range` otherwise). Towards the CPU, nothing at
//! all for TO_DEVICE; otherwise the outer cache is invalidated *first*, then the L1
//! (`dmac_unmap_area`) — in that order because a line the L1 refilled from a stale L2 would
//! otherwise survive. 3.14 alone calls `dmac_unmap_area` for TO_DEVICE too (outside the
//! direction test), where `v7_dma_unmap_area` returns at once: a call, no maintenance. The second invalidation at unmap exists because the CPU may speculatively
//! refill lines while the device owns the buffer.
//!
//! Invariants: a lowmem buffer is one `dmac_*_area` call whatever its length
//! (`dma_cache_maint_page` splits only highmem pages, which the model does not have); every L1
//! helper ends with its own `dsb` (`dsb st` from 3.16), so `complete = false` (7.1's issue-only
//! hooks, which ARM32 of these releases does not have) changes nothing and `flush` issues
//! nothing; a platform without an outer cache skips the `outer_*` calls, as the kernel's NULL
//! `outer_cache` hooks do.

pub mod cache_l2x0;
pub mod cache_v7;
pub mod pgtable;

use super::ArchDma;
use crate::hw::{CacheOp, Hw};
use crate::types::{DmaDirection, PhysAddr};
use cache_l2x0::OuterCacheFns;
use cache_v7::CacheV7;

#[derive(Debug)]
pub struct Arm32 {
    /// cache-v7.S's range functions as the release and its configuration build them.
    pub v7: CacheV7,
    /// The outer cache's `outer_cache_fns`, or `None` when the platform has none.
    pub outer: Option<Box<dyn OuterCacheFns>>,
    /// 3.14's `__dma_page_dev_to_cpu` calls `dmac_unmap_area` for TO_DEVICE as well (which
    /// returns at once); later releases skip the call with the outer invalidate.
    pub unmap_area_to_device: bool,
}

impl Arm32 {
    pub fn new(v7: CacheV7, outer: Option<Box<dyn OuterCacheFns>>) -> Arm32 {
        Arm32 {
            v7,
            outer,
            unmap_area_to_device: false,
        }
    }

    /// 3.14's `__dma_page_dev_to_cpu`, which reaches `dmac_unmap_area` for TO_DEVICE too.
    pub fn with_unmap_area_to_device(mut self, on: bool) -> Arm32 {
        self.unmap_area_to_device = on;
        self
    }

    /// `__dma_page_cpu_to_dev`.
    pub fn dma_page_cpu_to_dev(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("__dma_page_cpu_to_dev"));
        self.v7.v7_dma_map_area(hw, paddr, size, dir);
        if let Some(outer) = &self.outer {
            let end = PhysAddr(paddr.0.saturating_add(size));
            if dir == DmaDirection::FromDevice {
                outer.inv_range(hw, paddr, end);
            } else {
                outer.clean_range(hw, paddr, end);
            }
        }
        hw.leave(back);
    }

    /// `__dma_page_dev_to_cpu`.
    pub fn dma_page_dev_to_cpu(
        &self,
        hw: &mut dyn Hw,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("__dma_page_dev_to_cpu"));
        if dir != DmaDirection::ToDevice {
            if let Some(outer) = &self.outer {
                outer.inv_range(hw, paddr, PhysAddr(paddr.0.saturating_add(size)));
            }
            self.v7.v7_dma_unmap_area(hw, paddr, size, dir);
        } else if self.unmap_area_to_device {
            // 3.14: dma_cache_maint_page() runs whatever the direction; v7_dma_unmap_area
            // tests for TO_DEVICE and returns.
            self.v7.v7_dma_unmap_area(hw, paddr, size, dir);
        }
        hw.leave(back);
    }
}

impl ArchDma for Arm32 {
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        _complete: bool,
    ) {
        self.dma_page_cpu_to_dev(hw.as_dyn_hw(), paddr, size, dir);
    }

    fn sync_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        _complete: bool,
    ) {
        self.dma_page_dev_to_cpu(hw.as_dyn_hw(), paddr, size, dir);
    }

    /// Nothing: ARM has no `arch_sync_dma_flush()`, every helper above completed its own work.
    fn flush<H: Hw + ?Sized>(&self, _hw: &mut H) {}

    fn required_ops(&self) -> &'static [CacheOp] {
        &[CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval]
    }

    fn name(&self) -> &'static str {
        "arm"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::Counter;
    use crate::hw::test_support::Recorder;
    use cache_l2x0::L2c210;

    const MB: u64 = 1 << 20;
    const BUF: PhysAddr = PhysAddr(0x1000_0000);

    fn zynq() -> Arm32 {
        Arm32::new(CacheV7::default(), Some(Box::new(L2c210)))
    }

    /// The operations one 1 MB call issues, as (L1 lines by op, outer lines by op, syncs, dsb st).
    fn run(dev: bool, dir: DmaDirection) -> Recorder {
        let mut r = Recorder::new(32);
        if dev {
            zynq().sync_for_device(&mut r, BUF, MB, dir, true);
        } else {
            zynq().sync_for_cpu(&mut r, BUF, MB, dir, true);
        }
        r
    }

    #[test]
    fn for_device_to_device_cleans_l1_then_the_pl310() {
        let r = run(true, DmaDirection::ToDevice);
        assert_eq!(r.ops, vec![(CacheOp::Clean, BUF.0, 32768)]);
        assert_eq!(r.outer_ops, vec![(CacheOp::Clean, BUF.0, 32768)]);
        assert_eq!(r.count_of(Counter::OuterSync), 1);
        assert_eq!(r.count_of(Counter::Wmb), 1);
        assert_eq!(r.barriers, 0);
        assert_eq!(r.events, vec!["maint", "wmb", "outer_maint", "outer_sync"]);
    }

    #[test]
    fn every_call_and_direction_at_l1_and_l2() {
        use CacheOp::*;
        use DmaDirection::*;
        // (for_device?, dir, L1 ops, outer ops, events in order)
        let n = 32768;
        type Case = (
            bool,
            DmaDirection,
            Vec<(CacheOp, u64)>,
            Vec<(CacheOp, u64)>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                true,
                ToDevice,
                vec![(Clean, n)],
                vec![(Clean, n)],
                vec!["maint", "wmb", "outer_maint", "outer_sync"],
            ),
            (
                true,
                Bidirectional,
                vec![(Clean, n)],
                vec![(Clean, n)],
                vec!["maint", "wmb", "outer_maint", "outer_sync"],
            ),
            (
                true,
                FromDevice,
                vec![(Inval, n)],
                vec![(Inval, n)],
                vec!["maint", "wmb", "outer_maint", "outer_sync"],
            ),
            (false, ToDevice, vec![], vec![], vec![]),
            (
                false,
                FromDevice,
                vec![(Inval, n)],
                vec![(Inval, n)],
                vec!["outer_maint", "outer_sync", "maint", "wmb"],
            ),
            (
                false,
                Bidirectional,
                vec![(Inval, n)],
                vec![(Inval, n)],
                vec!["outer_maint", "outer_sync", "maint", "wmb"],
            ),
        ];
        for (dev, dir, l1, l2, events) in cases {
            let r = run(dev, dir);
            let strip = |v: &[(CacheOp, u64, u64)]| -> Vec<(CacheOp, u64)> {
                v.iter().map(|o| (o.0, o.2)).collect()
            };
            assert_eq!(strip(&r.ops), l1, "dev={dev} {dir}");
            assert_eq!(strip(&r.outer_ops), l2, "dev={dev} {dir}");
            assert_eq!(r.events, events, "dev={dev} {dir}");
            assert_eq!(r.barriers, 0, "dev={dev} {dir}");
        }
    }

    #[test]
    fn for_cpu_from_device_invalidates_outer_first() {
        let r = run(false, DmaDirection::FromDevice);
        assert_eq!(
            r.frames,
            vec![
                "__dma_page_dev_to_cpu",
                "__dma_page_dev_to_cpu > l2c210_inv_range",
                "__dma_page_dev_to_cpu > v7_dma_unmap_area",
                "__dma_page_dev_to_cpu > v7_dma_unmap_area > v7_dma_inv_range",
            ]
        );
    }

    #[test]
    fn for_cpu_to_device_does_nothing() {
        let r = run(false, DmaDirection::ToDevice);
        assert!(r.ops.is_empty() && r.outer_ops.is_empty());
        assert_eq!(r.counts.iter().sum::<u64>(), 0);
        assert!(r.events.is_empty());
    }

    /// 3.14 calls dmac_unmap_area for TO_DEVICE as well: the call shows, nothing is maintained.
    #[test]
    fn for_cpu_to_device_calls_v7_dma_unmap_area_in_3_14_only() {
        let a = zynq().with_unmap_area_to_device(true);
        let mut r = Recorder::new(32);
        a.sync_for_cpu(&mut r, BUF, MB, DmaDirection::ToDevice, true);
        assert!(r.ops.is_empty() && r.outer_ops.is_empty());
        assert_eq!(r.counts.iter().sum::<u64>(), 0);
        assert_eq!(
            r.frames,
            vec![
                "__dma_page_dev_to_cpu",
                "__dma_page_dev_to_cpu > v7_dma_unmap_area"
            ]
        );
        let mut r = Recorder::new(32);
        zynq().sync_for_cpu(&mut r, BUF, MB, DmaDirection::ToDevice, true);
        assert_eq!(r.frames, vec!["__dma_page_dev_to_cpu"]);
    }

    #[test]
    fn without_an_outer_cache_only_l1_runs() {
        let a = Arm32::new(CacheV7::default(), None);
        let mut r = Recorder::new(32);
        a.sync_for_device(&mut r, BUF, MB, DmaDirection::ToDevice, true);
        a.sync_for_cpu(&mut r, BUF, MB, DmaDirection::FromDevice, true);
        assert_eq!(
            r.ops,
            vec![
                (CacheOp::Clean, BUF.0, 32768),
                (CacheOp::Inval, BUF.0, 32768)
            ]
        );
        assert!(r.outer_ops.is_empty());
        assert_eq!(r.count_of(Counter::OuterSync), 0);
    }
}
