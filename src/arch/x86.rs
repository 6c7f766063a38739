//! x86-64 cache flushing, for host measurements.
//!
//! Kernel counterpart: `clflush_cache_range()` (arch/x86/mm/pat/set_memory.c), which issues
//! CLFLUSHOPT per line between fences. x86 DMA is cache coherent, so Linux never calls this on the
//! DMA path; dmasim uses it to run the *same* scatter-gather geometry on an x86 host's real caches
//! ([`crate::hostbench`]). Every direction gets the same instruction: the one the user picked.
//!
//! Invariant: "complete" means an SFENCE after the range, as `clflush_cache_range` does.
//!
//! [`physaddr`] is x86-64's `__pa()`, which the DMA API front, the 2012 swiotlb and the packet
//! path of the forwarding workload go through.

pub mod physaddr;

use super::{ArchDma, by_line_op};
use crate::hw::{CacheOp, Hw};
use crate::types::{DmaDirection, PhysAddr};

#[derive(Debug, Clone, Copy)]
pub struct X86Flush {
    /// `Clean` = CLWB, `CleanInval` = CLFLUSHOPT.
    pub op: CacheOp,
}

impl X86Flush {
    fn range<H: Hw + ?Sized>(&self, hw: &mut H, paddr: PhysAddr, size: u64, complete: bool) {
        let frame = if self.op == CacheOp::Clean {
            crate::frame_id!("clwb_range")
        } else {
            crate::frame_id!("clflushopt_range")
        };
        by_line_op(hw, frame, self.op, paddr, size, complete);
    }
}

impl ArchDma for X86Flush {
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        _dir: DmaDirection,
        complete: bool,
    ) {
        self.range(hw, paddr, size, complete);
    }

    fn sync_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        _dir: DmaDirection,
        complete: bool,
    ) {
        self.range(hw, paddr, size, complete);
    }

    fn flush<H: Hw + ?Sized>(&self, hw: &mut H) {
        let back = hw.enter(crate::frame_id!("sfence"));
        hw.barrier();
        hw.leave(back);
    }

    fn required_ops(&self) -> &'static [CacheOp] {
        match self.op {
            CacheOp::Clean => &[CacheOp::Clean],
            CacheOp::Inval => &[CacheOp::Inval],
            CacheOp::CleanInval => &[CacheOp::CleanInval],
        }
    }

    fn name(&self) -> &'static str {
        "x86_64"
    }
}
