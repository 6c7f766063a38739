//! Architecture cache maintenance for non-coherent DMA.
//!
//! Kernel counterparts: `arch_sync_dma_for_device()`, `arch_sync_dma_for_cpu()` and
//! `arch_sync_dma_flush()` (include/linux/dma-map-ops.h) and their implementations:
//! arch/arm64/mm/dma-mapping.c over arch/arm64/mm/cache.S ([`arm64`]); arch/arm/mm/dma-mapping.c
//! over cache-v7.S and the outer cache's cache-l2x0.c for 32-bit ARMv7 ([`arm`]); for host runs on x86-64, a
//! CLFLUSHOPT/CLWB range loop ([`x86`]) — x86 Linux itself never needs this for DMA, but the
//! instructions are what an x86 host can measure.
//!
//! Which architectures' maintenance several CPUs of one machine may run at once is one table,
//! [`cpu_sharing`].
//!
//! Invariant: `sync_for_*` with `complete = false` only *issues* maintenance (the 7.1 `_nosync`
//! helpers); with `complete = true` it also waits for it (the ≤ 7.0 helpers, ending in DSB).
//! Whether anything is issued follows the architecture's direction rules, never the caller's.

pub mod arm;
pub mod arm64;
pub mod x86;

use crate::hw::{CacheOp, FrameId, Hw};
use crate::types::{Arch, DmaDirection, PhysAddr};
use std::fmt::Debug;

/// Frames whose names a release chose for the same work, and the stable name `dmasim compare`
/// matches them by, so a diff across releases shows the work shrinking rather than one helper
/// disappearing and another appearing. arm64's cache maintenance is one piece of work whatever
/// the release calls it: ≤ 7.0 waits inside `dcache_clean_poc`, 7.1 issues with the `_nosync`
/// helper and waits once in `arch_sync_dma_flush`; the `arch_sync_dma_for_*` wrappers around them
/// belong to it too. ARMv7's outer cache is reached through `outer_*_range` whichever
/// cache-l2x0.c implementation the release installs.
pub static STABLE_FRAMES: &[(&str, &str)] = &[
    ("arch_sync_dma_for_device", "cache maintenance"),
    ("arch_sync_dma_for_cpu", "cache maintenance"),
    ("arch_sync_dma_flush", "cache maintenance"),
    ("dcache_clean_poc", "cache maintenance"),
    ("dcache_clean_poc_nosync", "cache maintenance"),
    ("dcache_inval_poc", "cache maintenance"),
    ("dcache_inval_poc_nosync", "cache maintenance"),
    ("l2c210_inv_range", "outer_inv_range"),
    ("l2c210_clean_range", "outer_clean_range"),
    ("l2c210_flush_range", "outer_flush_range"),
    ("l2x0_inv_range", "outer_inv_range"),
    ("l2x0_clean_range", "outer_clean_range"),
    ("l2x0_flush_range", "outer_flush_range"),
];

/// The stable name of a frame ([`STABLE_FRAMES`]), or the frame itself.
pub fn stable_frame(frame: &str) -> &str {
    STABLE_FRAMES
        .iter()
        .find(|(f, _)| *f == frame)
        .map_or(frame, |(_, s)| s)
}

/// What the DMA core asks of the architecture. Generic over the backend so that a caller holding
/// a concrete one (the Model in a run) gets a static, inlined path; a `&mut dyn Hw` works as well.
pub trait ArchDma: Debug {
    /// CPU → device hand-over (map, sync_for_device).
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    );
    /// Device → CPU hand-over (unmap, sync_for_cpu).
    fn sync_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    );
    /// `arch_sync_dma_flush()`: wait for everything issued so far.
    fn flush<H: Hw + ?Sized>(&self, hw: &mut H);
    /// Cache operations this architecture may issue (so a profile can be checked up front).
    fn required_ops(&self) -> &'static [CacheOp];
    fn name(&self) -> &'static str;
}

/// The architecture implementations, one of which setup picks for a run (the registry the
/// profile's `platform.arch` and the host's instruction set choose from). A closed set held by
/// value, so a call reaches the implementation by a match rather than through a vtable. The tag
/// is a byte of its own: the match reads it directly, where a niche in a variant's fields would
/// first have to be decoded (on every region of a scatter-gather walk).
#[derive(Debug)]
#[repr(u8)]
pub enum ArchOps {
    Arm64(arm64::Arm64),
    Arm64CleanInval(arm64::Arm64CleanInval),
    Arm32(arm::Arm32),
    X86(x86::X86Flush),
}

impl ArchOps {
    /// Whether several CPUs may run this implementation at once ([`cpu_sharing`] of its
    /// architecture): arm64's and x86's hold only costs and rules; 32-bit ARM's holds the
    /// machine's one outer cache, whose sharing is not modelled.
    pub fn shareable(&self) -> bool {
        !matches!(self, ArchOps::Arm32(_))
    }
}

macro_rules! arch_ops_dispatch {
    ($self:expr, $a:ident => $e:expr) => {
        match $self {
            $crate::arch::ArchOps::Arm64($a) => $e,
            $crate::arch::ArchOps::Arm64CleanInval($a) => $e,
            $crate::arch::ArchOps::Arm32($a) => $e,
            $crate::arch::ArchOps::X86($a) => $e,
        }
    };
}
// By path, for the callers that match once and then run a walk on the implementation itself.
pub(crate) use arch_ops_dispatch;

impl ArchDma for ArchOps {
    #[inline(always)]
    fn sync_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        complete: bool,
    ) {
        arch_ops_dispatch!(self, a => a.sync_for_device(hw, paddr, size, dir, complete))
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
        arch_ops_dispatch!(self, a => a.sync_for_cpu(hw, paddr, size, dir, complete))
    }
    #[inline]
    fn flush<H: Hw + ?Sized>(&self, hw: &mut H) {
        arch_ops_dispatch!(self, a => a.flush(hw))
    }
    fn required_ops(&self) -> &'static [CacheOp] {
        arch_ops_dispatch!(self, a => a.required_ops())
    }
    fn name(&self) -> &'static str {
        arch_ops_dispatch!(self, a => a.name())
    }
}

impl From<arm64::Arm64> for ArchOps {
    fn from(a: arm64::Arm64) -> ArchOps {
        ArchOps::Arm64(a)
    }
}

impl From<arm64::Arm64CleanInval> for ArchOps {
    fn from(a: arm64::Arm64CleanInval) -> ArchOps {
        ArchOps::Arm64CleanInval(a)
    }
}

impl From<arm::Arm32> for ArchOps {
    fn from(a: arm::Arm32) -> ArchOps {
        ArchOps::Arm32(a)
    }
}

impl From<x86::X86Flush> for ArchOps {
    fn from(a: x86::X86Flush) -> ArchOps {
        ArchOps::X86(a)
    }
}

/// Why several CPUs cannot share a layer of the machine yet: state the model holds once per
/// machine, which the CPUs calling it at once would have to share and whose sharing is not
/// modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unshared {
    /// 32-bit ARM's cache maintenance ([`arm::Arm32`]) holds the machine's one outer cache (the
    /// PL310 behind cache-l2x0.c's `outer_*_range`).
    #[error(
        "32-bit ARM's cache maintenance holds the machine's one outer cache (PL310), and sharing it between CPUs is not modelled yet"
    )]
    OuterCache,
}

/// Whether several CPUs may each run a platform architecture's cache maintenance (the
/// [`ArchOps`] [`crate::setup::arch_dma`] builds for `arch`) on one machine: arm64's and x86's
/// hold only costs and rules, 32-bit ARM's holds the machine's one outer cache. The one table of
/// this fact; [`crate::setup::DmaOpsKind::cpu_sharing`] builds on it, and the scenario checks
/// read that before a run of several CPUs is set up.
pub const fn cpu_sharing(arch: Arch) -> Result<(), Unshared> {
    match arch {
        Arch::Arm64 | Arch::X86_64 => Ok(()),
        Arch::Armv7 => Err(Unshared::OuterCache),
    }
}

/// The by-line loop every range operation shares; see [`Hw::by_line_op`].
#[inline(always)]
pub fn by_line_op<H: Hw + ?Sized>(
    hw: &mut H,
    frame: &'static FrameId,
    op: CacheOp,
    start: PhysAddr,
    size: u64,
    complete: bool,
) {
    hw.by_line_op(frame, op, start, size, complete);
}
