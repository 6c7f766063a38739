//! The IOMMU side of the stack.
//!
//! Kernel counterpart: drivers/iommu/ — the IOVA allocator ([`iova`], iova.c), Arm LPAE page
//! tables ([`io_pgtable_arm`], io-pgtable-arm.c), the iommu core's map/unmap splitting ([`core`],
//! iommu.c), the SMMU drivers behind `iommu_flush_ops` ([`arm_smmu`], arm-smmu.c; [`arm_smmu_v3`],
//! arm-smmu-v3.c), the DMA-API glue ([`dma_iommu`], dma-iommu.c) and its flush queue for lazy
//! invalidation ([`dma_fq`], dma-iommu.c since 5.17, iova.c before). This file holds what
//! include/linux/iommu.h and include/linux/io-pgtable.h share between them: the `IOMMU_*`
//! protection bits, `struct iommu_iotlb_gather` with `iommu_iotlb_gather_add_page()`, and
//! `struct iommu_flush_ops`.
//!
//! Whatever reaches the SMMU drivers (flush ops, the page table's map and unmap, the domain, the
//! flush queue, iommu-dma) takes a [`DeviceHw`]; the IOVA allocator and the page table's own
//! memory handling take only the CPU side, [`crate::hw::Hw`]. The core's and the page table's
//! map and unmap are generic over the backend ([`AsDynDeviceHw`]), so the per-page loops run
//! with static calls for a caller holding a concrete backend; what they hand on to a driver's
//! flush ops or the arch layer goes as a trait object, except arm-smmu's per-page `tlb_add_page`,
//! `iotlb_sync` and walk flush: a domain holds arm-smmu's ops by value ([`FlushOps`]), and the page
//! table reaches them through that enum's match ([`tlb_add_page`], [`tlb_flush_walk`],
//! [`iotlb_sync`]).
//!
//! Every CPU calls the same domain, page table and flush ops through `&self`, as the kernel calls
//! one `iommu_flush_ops` through a const pointer: what the CPUs share is in [`crate::smp`]'s
//! types, what each CPU keeps for itself in a [`crate::smp::PerCpu`].
//!
//! Invariants: a gather is either empty (`end == 0`, `pgsize == 0`) or covers `[start, end]`
//! inclusive with one page size; adding a page of another size, or one that neither overlaps nor
//! touches the range, first syncs (invalidates) what was gathered.

pub mod arm_smmu;
pub mod arm_smmu_v3;
pub mod core;
pub mod dma_fq;
pub mod dma_iommu;
pub mod io_pgtable_arm;
pub mod iova;

use crate::hw::{DeviceHw, FrameId};
use crate::mm::physmem::PhysMemError;
use crate::stats::Stats;
use crate::types::IovaAddr;

/// Why an IOMMU operation failed. The kernel returns `-EINVAL`, `-EEXIST`, `-ENOMEM` or a short
/// byte count (after a WARN); we keep the reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IommuError {
    #[error("unsupported granule {0:#x} (expected 4K, 16K or 64K)")]
    BadGranule(u64),
    #[error("unsupported input address size {0} bits (expected 32..=48)")]
    BadIas(u32),
    #[error("unsupported output address size {0} bits (expected 32..=48)")]
    BadOas(u32),
    #[error("page size {pgsize:#x} is not supported by this table (supported: {bitmap:#x})")]
    BadPageSize { pgsize: u64, bitmap: u64 },
    #[error("{what} {addr:#x} (size {size:#x}) is not aligned to {align:#x}")]
    Misaligned {
        what: &'static str,
        addr: u64,
        size: u64,
        align: u64,
    },
    #[error("{what} {addr:#x} + {size:#x} is outside the {bits}-bit address space")]
    OutOfRange {
        what: &'static str,
        addr: u64,
        size: u64,
        bits: u32,
    },
    /// `-EEXIST`: a mapping is already present (the kernel WARNs and refuses).
    #[error("IOVA {0} is already mapped")]
    Exists(IovaAddr),
    /// The kernel WARNs and returns 0 bytes unmapped.
    #[error("IOVA {0} is not mapped")]
    NotMapped(IovaAddr),
    /// 6.13 on: unmapping part of a block is refused (`WARN_ONCE`, 0 bytes).
    #[error(
        "IOVA {iova} is inside a {block:#x}-byte block; a partial unmap of a block is not allowed"
    )]
    PartialBlock { iova: IovaAddr, block: u64 },
    #[error("zero-length or zero-count request")]
    Empty,
    #[error("out of memory for page tables: {0}")]
    NoMem(#[from] PhysMemError),
    #[error("IOVA space exhausted: no free range of {pages} granules below pfn {limit_pfn:#x}")]
    IovaExhausted { pages: u64, limit_pfn: u64 },
    /// 5.11–6.1: the wrapped retry handed out pfn 0, which iommu-dma takes for a failed
    /// allocation (`if (!iova)`): the map fails and the range stays allocated.
    #[error(
        "the IOVA allocator handed out pfn 0 ({pages} granules), which iommu-dma takes for a failure; the range stays allocated"
    )]
    IovaZero { pages: u64 },
    #[error("no CPU {0} in this IOVA domain")]
    BadCpu(usize),
    #[error("free of IOVA pfn {0:#x} which is not allocated")]
    IovaBadFree(u64),
    #[error("unmap stopped short: {unmapped:#x} of {size:#x} bytes at {iova}")]
    ShortUnmap {
        iova: IovaAddr,
        size: u64,
        unmapped: u64,
    },
    #[error("SMMU TLB sync timed out -- SMMU may be deadlocked")]
    SyncTimeout,
}

impl IommuError {
    /// The errno the kernel returns for this failure (negative, by name).
    pub fn errno(&self) -> &'static str {
        match self {
            IommuError::Exists(_) => "-EEXIST",
            IommuError::OutOfRange { .. } => "-ERANGE",
            IommuError::NoMem(_) | IommuError::IovaExhausted { .. } => "-ENOMEM",
            IommuError::SyncTimeout => "-ETIMEDOUT",
            _ => "-EINVAL",
        }
    }
}

/// `IOMMU_READ`, `IOMMU_WRITE`, ... (include/linux/iommu.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Prot(pub u32);

impl Prot {
    pub const READ: Prot = Prot(1 << 0);
    pub const WRITE: Prot = Prot(1 << 1);
    /// Cacheable, coherent with the CPU.
    pub const CACHE: Prot = Prot(1 << 2);
    pub const NOEXEC: Prot = Prot(1 << 3);
    /// Device memory (MSI doorbells).
    pub const MMIO: Prot = Prot(1 << 4);
    pub const PRIV: Prot = Prot(1 << 5);
    pub const RW: Prot = Prot(Self::READ.0 | Self::WRITE.0);

    /// The flags by the names scenarios and reports use for them.
    pub const FLAGS: &'static [(&'static str, Prot)] = &[
        ("read", Prot::READ),
        ("write", Prot::WRITE),
        ("cache", Prot::CACHE),
        ("noexec", Prot::NOEXEC),
        ("mmio", Prot::MMIO),
        ("priv", Prot::PRIV),
    ];

    pub fn flag(name: &str) -> Option<Prot> {
        Self::FLAGS.iter().find(|(n, _)| *n == name).map(|f| f.1)
    }

    pub fn names(self) -> Vec<&'static str> {
        Self::FLAGS
            .iter()
            .filter(|(_, f)| self.contains(*f))
            .map(|(n, _)| *n)
            .collect()
    }

    pub fn contains(self, o: Prot) -> bool {
        self.0 & o.0 == o.0
    }
    pub fn union(self, o: Prot) -> Prot {
        Prot(self.0 | o.0)
    }
}

/// `struct iommu_iotlb_gather`: the range of leaf invalidations an unmap has collected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IommuIotlbGather {
    pub start: u64,
    /// Inclusive; 0 while empty.
    pub end: u64,
    pub pgsize: u64,
    /// Lazy (flush-queue) invalidation: leaf invalidations are skipped, the IOVA is only reused
    /// after a whole-context flush.
    pub queued: bool,
}

impl IommuIotlbGather {
    /// `iommu_iotlb_gather_init()`.
    pub fn new() -> IommuIotlbGather {
        IommuIotlbGather {
            start: u64::MAX,
            end: 0,
            pgsize: 0,
            queued: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pgsize == 0
    }

    /// `iommu_iotlb_gather_is_disjoint()`: the new range neither overlaps nor touches.
    pub fn is_disjoint(&self, iova: u64, size: u64) -> bool {
        let end = iova + size - 1;
        self.end != 0 && (end + 1 < self.start || iova > self.end + 1)
    }

    /// `iommu_iotlb_gather_add_range()`.
    pub fn add_range(&mut self, iova: u64, size: u64) {
        let end = iova + size - 1;
        self.start = self.start.min(iova);
        self.end = self.end.max(end);
    }
}

/// A backend the iommu layer's generic paths can hand on as a trait object: to a driver's
/// [`IommuFlushOps`], to the arch layer's cache maintenance. The iommu core and io-pgtable are
/// generic over the backend so that a caller holding a concrete one (the Model) runs their
/// per-page loops with static calls, while a caller holding `&mut dyn DeviceHw` still works
/// (`H = dyn DeviceHw`); `&mut H` with `H: ?Sized` does not coerce to `&mut dyn DeviceHw` by
/// itself, hence this.
pub trait AsDynDeviceHw: DeviceHw {
    fn as_dyn(&mut self) -> &mut dyn DeviceHw;
}

impl<T: DeviceHw> AsDynDeviceHw for T {
    #[inline]
    fn as_dyn(&mut self) -> &mut dyn DeviceHw {
        self
    }
}

impl AsDynDeviceHw for dyn DeviceHw + '_ {
    #[inline]
    fn as_dyn(&mut self) -> &mut dyn DeviceHw {
        self
    }
}

/// `iommu_iotlb_gather_add_page()`: a driver's `tlb_add_page` that defers its invalidations
/// (arm-smmu-v3) gathers through this; a page of another size or a disjoint page syncs first.
pub fn iommu_iotlb_gather_add_page(
    ops: &dyn IommuFlushOps,
    hw: &mut dyn DeviceHw,
    gather: &mut IommuIotlbGather,
    iova: u64,
    size: u64,
) {
    if (gather.pgsize != 0 && gather.pgsize != size) || gather.is_disjoint(iova, size) {
        ops.iotlb_sync(hw, gather);
    }
    gather.pgsize = size;
    gather.add_range(iova, size);
}

/// `struct iommu_flush_ops` (io-pgtable.h) plus the domain's `iotlb_sync` (iommu.h): how page-table
/// code asks the IOMMU driver to invalidate its TLBs. What the driver's shared state saw is
/// [`Stats`]'s, beside the kernel's methods.
pub trait IommuFlushOps: std::fmt::Debug + std::any::Any + Stats {
    fn name(&self) -> &'static str;
    /// Invalidate every TLB entry of the context (domain).
    fn tlb_flush_all(&self, hw: &mut dyn DeviceHw);
    /// A table covering `[iova, iova + size)` was removed: invalidate walk caches (and leaves) for
    /// the range, and wait for it, before the table's memory is reused.
    fn tlb_flush_walk(&self, hw: &mut dyn DeviceHw, iova: u64, size: u64, granule: u64);
    /// A leaf of size `granule` at `iova` was cleared: invalidate it now or gather it for
    /// [`IommuFlushOps::iotlb_sync`].
    fn tlb_add_page(
        &self,
        hw: &mut dyn DeviceHw,
        gather: &mut IommuIotlbGather,
        iova: u64,
        granule: u64,
    );
    /// `iommu_iotlb_sync()`: complete what was gathered (and, for drivers that invalidate at once,
    /// wait for completion); leaves `gather` empty.
    fn iotlb_sync(&self, hw: &mut dyn DeviceHw, gather: &mut IommuIotlbGather);
}

/// A domain's flush ops as held by the domain: arm-smmu's by value, so that the per-page
/// `tlb_add_page` and `iotlb_sync` find them with a match rather than a call through the trait
/// object; any other driver's behind the trait. Decided once, when the domain is made.
/// io-pgtable and the core call `tlb_add_page` and `iotlb_sync` for every page they unmap, and
/// for arm-smmu they call its generic bodies directly ([`tlb_add_page`], [`tlb_flush_walk`],
/// [`iotlb_sync`]), so a concrete backend reaches the register writes without a trait object.
/// Same operations, same order, either way.
// One per domain, so its size is of no account; boxing arm-smmu's ops (now that its
// `cb_lock` is held in place rather than behind an `Rc`) would put a pointer back on the
// per-page path this enum exists to keep short.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum FlushOps {
    ArmSmmu(arm_smmu::ArmSmmuDomain),
    Other(Box<dyn IommuFlushOps>),
}

impl FlushOps {
    pub fn new(ops: Box<dyn IommuFlushOps>) -> FlushOps {
        let any: &dyn std::any::Any = &*ops;
        if any.is::<arm_smmu::ArmSmmuDomain>() {
            let any: Box<dyn std::any::Any> = ops;
            if let Ok(d) = any.downcast::<arm_smmu::ArmSmmuDomain>() {
                return FlushOps::ArmSmmu(*d);
            }
            unreachable!("checked to be arm-smmu's ops just above");
        }
        FlushOps::Other(ops)
    }

    fn get(&self) -> &dyn IommuFlushOps {
        match self {
            FlushOps::ArmSmmu(d) => d,
            FlushOps::Other(o) => o.as_ref(),
        }
    }
}

impl Stats for FlushOps {
    fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        match self {
            FlushOps::ArmSmmu(d) => d.lock_records(),
            FlushOps::Other(o) => o.lock_records(),
        }
    }
    fn cmdq_stats(&self) -> Option<crate::stats::CmdqStats> {
        match self {
            FlushOps::ArmSmmu(d) => d.cmdq_stats(),
            FlushOps::Other(o) => o.cmdq_stats(),
        }
    }
}

impl IommuFlushOps for FlushOps {
    fn name(&self) -> &'static str {
        match self {
            FlushOps::ArmSmmu(d) => d.name(),
            FlushOps::Other(o) => o.name(),
        }
    }
    fn tlb_flush_all(&self, hw: &mut dyn DeviceHw) {
        self.get().tlb_flush_all(hw);
    }
    fn tlb_flush_walk(&self, hw: &mut dyn DeviceHw, iova: u64, size: u64, granule: u64) {
        self.get().tlb_flush_walk(hw, iova, size, granule);
    }
    fn tlb_add_page(
        &self,
        hw: &mut dyn DeviceHw,
        gather: &mut IommuIotlbGather,
        iova: u64,
        granule: u64,
    ) {
        self.get().tlb_add_page(hw, gather, iova, granule);
    }
    fn iotlb_sync(&self, hw: &mut dyn DeviceHw, gather: &mut IommuIotlbGather) {
        self.get().iotlb_sync(hw, gather);
    }
}

/// `ops->tlb_add_page()`, statically for arm-smmu (see [`FlushOps`]).
#[inline]
pub fn tlb_add_page<H: AsDynDeviceHw + ?Sized>(
    ops: &FlushOps,
    hw: &mut H,
    gather: &mut IommuIotlbGather,
    iova: u64,
    granule: u64,
) {
    match ops {
        FlushOps::ArmSmmu(d) => d.tlb_add_page_s1(hw, iova, granule),
        FlushOps::Other(o) => o.tlb_add_page(hw.as_dyn(), gather, iova, granule),
    }
}

/// `ops->tlb_flush_walk()`, statically for arm-smmu (see [`FlushOps`]).
#[inline]
pub fn tlb_flush_walk<H: AsDynDeviceHw + ?Sized>(
    ops: &FlushOps,
    hw: &mut H,
    iova: u64,
    size: u64,
    granule: u64,
) {
    match ops {
        FlushOps::ArmSmmu(d) => d.tlb_flush_walk_s1(hw, iova, size, granule),
        FlushOps::Other(o) => o.tlb_flush_walk(hw.as_dyn(), iova, size, granule),
    }
}

/// `iommu_iotlb_sync()`'s frames as one caller enters them: `iommu_iotlb_sync` inside the
/// caller's frames that charge nothing around it, and arm-smmu's sync routine entered with them
/// all at once (`arm_smmu_iotlb_sync` charges nothing before it either); another driver's
/// `iotlb_sync` runs inside them.
pub struct SyncFrames {
    arm_smmu: FrameId,
    other: FrameId,
}

impl SyncFrames {
    pub const fn new(other: FrameId, arm_smmu: FrameId) -> SyncFrames {
        SyncFrames { arm_smmu, other }
    }
}

/// The [`SyncFrames`] of a caller whose frames, outermost first, charge nothing around its
/// `iommu_iotlb_sync()`: `sync_frames!("iommu_unmap")`, or `sync_frames!()` for none.
macro_rules! sync_frames {
    ($($outer:literal),*) => {{
        static FRAMES: $crate::iommu::SyncFrames = $crate::iommu::SyncFrames::new(
            $crate::hw::FrameId::nested(&[$($outer),*], "iommu_iotlb_sync"),
            $crate::hw::FrameId::nested(
                &[$($outer,)* "iommu_iotlb_sync"],
                "arm_smmu_tlb_sync_context",
            ),
        );
        &FRAMES
    }};
}
pub(crate) use sync_frames;

/// `iommu_iotlb_sync()` → `ops->iotlb_sync()` in `frames`, statically for arm-smmu (see
/// [`FlushOps`]).
// Always inlined: a few instructions of its own. Measured (callgrind, benches/iommu), map_sg +
// unmap then runs 12 instructions a page fewer (its loop compiles differently), strict unmap 1 more.
#[inline(always)]
pub fn iotlb_sync<H: AsDynDeviceHw + ?Sized>(
    ops: &FlushOps,
    hw: &mut H,
    gather: &mut IommuIotlbGather,
    frames: &'static SyncFrames,
) {
    match ops {
        FlushOps::ArmSmmu(d) => d.iotlb_sync_s1_in(hw, gather, &frames.arm_smmu),
        FlushOps::Other(ops) => {
            let back = hw.enter(&frames.other);
            ops.iotlb_sync(hw.as_dyn(), gather);
            hw.leave(back);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_merges_touching_ranges_and_detects_disjoint_ones() {
        let mut g = IommuIotlbGather::new();
        assert!(g.is_empty());
        assert!(!g.is_disjoint(0x1000, 0x1000));
        g.pgsize = 0x1000;
        g.add_range(0x2000, 0x1000);
        assert!(!g.is_disjoint(0x3000, 0x1000), "touching above");
        assert!(!g.is_disjoint(0x1000, 0x1000), "touching below");
        assert!(g.is_disjoint(0x5000, 0x1000));
        g.add_range(0x3000, 0x1000);
        assert_eq!((g.start, g.end), (0x2000, 0x3fff));
    }
}
