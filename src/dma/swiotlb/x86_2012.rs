//! swiotlb as x86-64's `dma_map_ops` in 2012, with its two address-bookkeeping policies.
//!
//! Kernel counterpart: lib/swiotlb.c of Linux 3.6 and 3.8 as `swiotlb_dma_ops`
//! (arch/x86/kernel/pci-swiotlb.c): `swiotlb_map_page`, `swiotlb_unmap_page` → `unmap_single`,
//! `swiotlb_sync_single_for_{cpu,device}` → `swiotlb_sync_single`, `swiotlb_map_sg_attrs`,
//! `swiotlb_unmap_sg_attrs`, `swiotlb_sync_sg_for_{cpu,device}`, `swiotlb_dma_mapping_error`, over
//! `swiotlb_tbl_map_single`, `swiotlb_tbl_unmap_single`, `swiotlb_tbl_sync_single`,
//! `swiotlb_bounce` and `is_swiotlb_buffer`; the pool follows [`Release::Linux3_6`] rules.
//!
//! What it models: x86 DMA is coherent, so there is no cache maintenance; a device that can reach
//! the buffer gets its physical address back unbounced (`dma_capable`, unless `swiotlb=force`),
//! but unmap and both syncs still ask `is_swiotlb_buffer` every time. A full pool hands out the
//! 32 KiB overflow buffer, which `swiotlb_dma_mapping_error` recognises; a failed mapping larger
//! than the overflow buffer is where 3.6 panics, here a mapping error. The two [`Bookkeeping`]
//! policies differ only in how the pool's addresses are stored and turned into physical ones:
//!
//! - [`VirtAddrs`] (≤ 3.6): `io_tlb_start`, `io_tlb_end`, `io_tlb_overflow_buffer` and the slot
//!   addresses handed between the helpers are kernel virtual addresses. Every `virt_to_phys` /
//!   `swiotlb_virt_to_bus` on them is a `__pa()`: in 3.6 a call to the out-of-line `__phys_addr`
//!   (a frame, a charge and a `Counter::PhysAddrCall`; [`crate::arch::x86::physaddr`]). Going
//!   the other way (`phys_to_virt`) is an inline add.
//!   Per call path, exactly as 3.6's code makes them:
//!   `is_swiotlb_buffer` 2 (1 when the address is below the pool: `&&` stops early);
//!   `unmap_single` and `swiotlb_sync_single` = their `is_swiotlb_buffer`;
//!   `swiotlb_map_page` 0 unbounced, 2 bounced (`map_single`'s `io_tlb_start`, then the slot),
//!   2 when the pool is full (`io_tlb_start`, then the overflow buffer);
//!   `swiotlb_dma_mapping_error` 1.
//! - [`PhysAddrs`] (3.8 on): the same paths with physical addresses: no `__phys_addr` at all, and
//!   `is_swiotlb_buffer` small enough to be inlined (no frame).
//!
//! What the callers lose is charged where it runs: `swiotlb_sync_single`, `unmap_single` and
//! `swiotlb_dma_mapping_error` are priced per instruction, by the groups of [`InsnGroups`] (frame,
//! registers kept across an out-of-line call, the call itself, the inlined range check; counted
//! in the profile's `[code.swiotlb_2012]`), so under `phys` their own time shrinks by the
//! instructions 3.8's code no longer has, not by a factor.
//!
//! Invariants: as [`super`]; and the count of `__phys_addr` calls on a path is whatever running
//! that path produced — no table of counts exists.

use super::pool::{INVALID_PHYS_ADDR, IoTlbMem, PoolCosts, SlotRequest, SwiotlbError};
use super::{Areas, BounceDir, IO_TLB_OVERFLOW, IO_TLB_SHIFT, IO_TLB_SIZE, Release, memcpy};
use crate::arch::x86::physaddr::{self, PhysAddrFn, PhysAddrImpl, PhysAddrKind};
use crate::device::Device;
use crate::dma::direct::dma_capable;
use crate::dma::{DmaError, DmaMapOps};
use crate::hw::{DeviceHw, Hw, SwCost, SwKey};
use crate::mm::physmem::SharedPhysMem;
use crate::scatterlist::SgTable;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};
use std::fmt::Debug;

pub use crate::arch::x86::physaddr::PAGE_OFFSET;

/// An address as the pool's bookkeeping stores it: virtual under [`VirtAddrs`], physical under
/// [`PhysAddrs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kept(pub u64);

/// How swiotlb keeps its own addresses, and what turning one into a physical address costs.
/// Generic over the backend, so held by value ([`AddrBook`]), never as a trait object.
pub trait Bookkeeping: Debug {
    /// The policy's name (`virt` or `phys`).
    fn name(&self) -> &'static str;
    /// Store a physical address the way this release does (`phys_to_virt`: inline, free).
    fn keep(&self, phys: PhysAddr) -> Kept;
    /// The physical address of a kept one, as the kernel path obtains it.
    fn to_phys<H: Hw + ?Sized>(&self, hw: &mut H, kept: Kept) -> PhysAddr;
    /// Whether `is_swiotlb_buffer` is a function of its own or two compares inlined into callers.
    fn is_swiotlb_buffer_out_of_line(&self) -> bool;
    /// Whether turning a kept address into a physical one is an out-of-line call (`__phys_addr`),
    /// for which the caller sets up an argument, calls and keeps its live values across the call.
    fn translation_out_of_line(&self) -> bool;
}

/// ≤ 3.6: virtual addresses, translated by `__pa()` each time — the out-of-line `__phys_addr`
/// in the releases that had this bookkeeping (the `phys_addr` policy decides).
#[derive(Clone, Copy, Debug)]
pub struct VirtAddrs {
    pa: PhysAddrImpl,
}

impl VirtAddrs {
    pub fn new(pa: PhysAddrImpl) -> VirtAddrs {
        VirtAddrs { pa }
    }
}

impl Bookkeeping for VirtAddrs {
    fn name(&self) -> &'static str {
        "virt"
    }
    fn keep(&self, phys: PhysAddr) -> Kept {
        Kept(physaddr::va(phys))
    }
    #[inline]
    fn to_phys<H: Hw + ?Sized>(&self, hw: &mut H, kept: Kept) -> PhysAddr {
        self.pa.pa(hw, kept.0)
    }
    fn is_swiotlb_buffer_out_of_line(&self) -> bool {
        true
    }
    fn translation_out_of_line(&self) -> bool {
        self.pa.out_of_line()
    }
}

/// 3.8 on: physical addresses throughout.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhysAddrs;

impl Bookkeeping for PhysAddrs {
    fn name(&self) -> &'static str {
        "phys"
    }
    fn keep(&self, phys: PhysAddr) -> Kept {
        Kept(phys.0)
    }
    fn to_phys<H: Hw + ?Sized>(&self, _hw: &mut H, kept: Kept) -> PhysAddr {
        PhysAddr(kept.0)
    }
    fn is_swiotlb_buffer_out_of_line(&self) -> bool {
        false
    }
    fn translation_out_of_line(&self) -> bool {
        false
    }
}

/// The `swiotlb_addr` policy's implementation held by value: [`VirtAddrs`] or [`PhysAddrs`],
/// chosen once at setup ([`SwiotlbAddr::bookkeeping`]) and dispatched by a match.
#[derive(Clone, Copy, Debug)]
pub enum AddrBook {
    Virt(VirtAddrs),
    Phys(PhysAddrs),
}

impl From<VirtAddrs> for AddrBook {
    fn from(b: VirtAddrs) -> AddrBook {
        AddrBook::Virt(b)
    }
}

impl From<PhysAddrs> for AddrBook {
    fn from(b: PhysAddrs) -> AddrBook {
        AddrBook::Phys(b)
    }
}

impl Bookkeeping for AddrBook {
    fn name(&self) -> &'static str {
        match self {
            AddrBook::Virt(b) => b.name(),
            AddrBook::Phys(b) => b.name(),
        }
    }
    #[inline]
    fn keep(&self, phys: PhysAddr) -> Kept {
        match self {
            AddrBook::Virt(b) => b.keep(phys),
            AddrBook::Phys(b) => b.keep(phys),
        }
    }
    #[inline]
    fn to_phys<H: Hw + ?Sized>(&self, hw: &mut H, kept: Kept) -> PhysAddr {
        match self {
            AddrBook::Virt(b) => b.to_phys(hw, kept),
            AddrBook::Phys(b) => b.to_phys(hw, kept),
        }
    }
    #[inline]
    fn is_swiotlb_buffer_out_of_line(&self) -> bool {
        match self {
            AddrBook::Virt(b) => b.is_swiotlb_buffer_out_of_line(),
            AddrBook::Phys(b) => b.is_swiotlb_buffer_out_of_line(),
        }
    }
    #[inline]
    fn translation_out_of_line(&self) -> bool {
        match self {
            AddrBook::Virt(b) => b.translation_out_of_line(),
            AddrBook::Phys(b) => b.translation_out_of_line(),
        }
    }
}

/// The `swiotlb_addr` policy: how the 2012 swiotlb keeps its pool addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwiotlbAddr {
    /// ≤ 3.6: virtual addresses, translated by `__phys_addr` calls ([`VirtAddrs`]).
    Virt,
    /// 3.8: physical addresses ([`PhysAddrs`]).
    Phys,
}

impl crate::types::Choice for SwiotlbAddr {
    const ALL: &'static [Self] = &[SwiotlbAddr::Virt, SwiotlbAddr::Phys];
    fn name(self) -> &'static str {
        match self {
            SwiotlbAddr::Virt => "virt",
            SwiotlbAddr::Phys => "phys",
        }
    }
}

impl SwiotlbAddr {
    /// The bookkeeping implementation, chosen once at setup, translating with the release's
    /// `__pa()`.
    pub fn bookkeeping<H: Hw + ?Sized>(self, hw: &H, pa: PhysAddrKind) -> AddrBook {
        match self {
            SwiotlbAddr::Virt => VirtAddrs::new(pa.resolve(hw)).into(),
            SwiotlbAddr::Phys => PhysAddrs.into(),
        }
    }
}

/// `enum dma_sync_target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTarget {
    ForCpu,
    ForDevice,
}

/// Instructions the 2012 functions whose code the 3.8 series changed execute on the unbounced
/// path, by group, as the platform's compiler emits lib/swiotlb.c: the profile's
/// `[code.swiotlb_2012]`, where each count has its source (for the x86-2012-ixgbe profile: GCC
/// -O2 with `CONFIG_FRAME_POINTER` and without shrink-wrapping, counted from the 3.6 and 3.8 C
/// source). Each group is charged at the per-instruction cost of the function it runs in
/// (`insn.<function>` in a profile's `[sw]` table), so a group one release drops takes its time
/// out of the symbol perf would have seen it in, and nothing else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsnGroups {
    /// Frame set-up and return (`push %rbp; mov %rsp,%rbp; pop %rbp; ret`).
    pub frame: u64,
    /// `BUG_ON(dir == DMA_NONE)`: compare and branch.
    pub bug_on_dir: u64,
    /// One value kept in a callee-saved register across an out-of-line call: the prologue's
    /// push, the move into it, the epilogue's pop. Without shrink-wrapping these run on every
    /// path of a function that makes the call on any path.
    pub saved_reg: u64,
    /// An out-of-line call: the argument into `%rdi`, the `call`.
    pub call: u64,
    /// Using a predicate's result: `test %eax,%eax; jne`.
    pub test_result: u64,
    /// `is_swiotlb_buffer()` inlined (3.8): two compares against the pool bounds, two branches.
    pub range_check: u64,
    /// `swiotlb_dma_mapping_error()`'s comparison: `cmp; sete; movzbl`.
    pub compare_result: u64,
    /// Values `swiotlb_sync_single` (3.6) keeps live across its `is_swiotlb_buffer` call.
    pub sync_single_live: u64,
    /// Values `unmap_single` (3.6) keeps live across its `is_swiotlb_buffer` call.
    pub unmap_single_live: u64,
    /// Values `swiotlb_dma_mapping_error` (3.6) keeps live across its `__phys_addr` call.
    pub mapping_error_live: u64,
}

/// One function's instructions per call: what both releases execute, what the out-of-line call
/// adds (≤ 3.6), what the inlined check adds (3.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FnInsns {
    pub common: u64,
    pub out_of_line: u64,
    pub inline: u64,
}

impl FnInsns {
    /// Instructions per call under the virtual (≤ 3.6) bookkeeping.
    pub fn virt(&self) -> u64 {
        self.common + self.out_of_line
    }
    /// Instructions per call under the physical (3.8) bookkeeping.
    pub fn phys(&self) -> u64 {
        self.common + self.inline
    }
}

impl InsnGroups {
    /// `swiotlb_sync_single`: frame and `BUG_ON`; 3.6 keeps its live values across the
    /// `is_swiotlb_buffer` call, makes it and tests the result; 3.8 has the range check inline.
    pub fn sync_single(&self) -> FnInsns {
        self.predicate_caller(self.sync_single_live)
    }
    /// `unmap_single`: as `swiotlb_sync_single`, with its own live values.
    pub fn unmap_single(&self) -> FnInsns {
        self.predicate_caller(self.unmap_single_live)
    }
    /// `swiotlb_dma_mapping_error`: frame and comparison; 3.6 keeps `dma_addr` across the
    /// `__phys_addr` call of the overflow buffer's address and makes it.
    pub fn mapping_error(&self) -> FnInsns {
        FnInsns {
            common: self.frame + self.compare_result,
            out_of_line: self.mapping_error_live * self.saved_reg + self.call,
            inline: 0,
        }
    }
    fn predicate_caller(&self, live: u64) -> FnInsns {
        FnInsns {
            common: self.frame + self.bug_on_dir,
            out_of_line: live * self.saved_reg + self.call + self.test_result,
            inline: self.range_check,
        }
    }
}

/// What one function costs per call under each bookkeeping, from its instruction groups.
#[derive(Clone, Copy, Debug, Default)]
struct Groups {
    /// Groups both releases execute.
    common: SwCost,
    /// ≤ 3.6: what the out-of-line call costs the caller (argument, call, result test, saved
    /// registers).
    out_of_line: SwCost,
    /// 3.8: the inlined range check.
    inline: SwCost,
}

impl Groups {
    fn resolve<H: Hw + ?Sized>(hw: &H, per_insn: SwKey, n: FnInsns) -> Groups {
        let per = hw.sw_cost(per_insn).0;
        Groups {
            common: SwCost(per.saturating_mul(n.common)),
            out_of_line: SwCost(per.saturating_mul(n.out_of_line)),
            inline: SwCost(per.saturating_mul(n.inline)),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    pool: PoolCosts,
    map_page: SwCost,
    unmap_page: SwCost,
    unmap_single: Groups,
    sync_single_for_cpu: SwCost,
    sync_single_for_device: SwCost,
    sync_single: Groups,
    is_swiotlb_buffer: SwCost,
    mapping_error: Groups,
    tbl_map_single: SwCost,
    tbl_unmap_single: SwCost,
    tbl_sync_single: SwCost,
    bounce: SwCost,
    sg_next: SwCost,
}

/// How the 2012 pool is set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swiotlb2012Config {
    /// Pool size in bytes (64 MiB by default): a whole number of 256 KiB segments.
    pub size: u64,
    pub node: u32,
    /// `swiotlb=force`.
    pub force: bool,
    /// The pool's rules: [`Release::Linux3_6`] or [`Release::Linux4_11`], the releases that
    /// still had these ops on x86-64.
    pub release: Release,
    /// The instruction groups of the functions priced per instruction (the profile's
    /// `[code.swiotlb_2012]`; none counted by default).
    pub insns: InsnGroups,
}

impl Default for Swiotlb2012Config {
    fn default() -> Self {
        Swiotlb2012Config {
            size: super::IO_TLB_DEFAULT_SIZE,
            node: 0,
            force: false,
            release: Release::Linux3_6,
            insns: InsnGroups::default(),
        }
    }
}

/// `swiotlb_dma_ops` of 2012 x86-64.
#[derive(Debug)]
pub struct Swiotlb2012Ops {
    /// The one pool, under its one lock for every CPU that calls these ops.
    pool: IoTlbMem,
    mem: SharedPhysMem,
    book: AddrBook,
    io_tlb_start: Kept,
    io_tlb_end: Kept,
    io_tlb_overflow_buffer: Kept,
    overflow_phys: PhysAddr,
    /// `swiotlb_force`.
    pub force: bool,
    release: Release,
    costs: Costs,
}

impl Swiotlb2012Ops {
    /// `swiotlb_init()`: the pool and the overflow buffer, both from `mem`.
    pub fn new<H: Hw + ?Sized>(
        hw: &H,
        mem: SharedPhysMem,
        cfg: &Swiotlb2012Config,
        book: impl Into<AddrBook>,
    ) -> Result<Swiotlb2012Ops, SwiotlbError> {
        let book = book.into();
        let (pool, overflow_phys) = {
            let mut m = mem.borrow_mut();
            let pool = IoTlbMem::new(
                &mut m,
                cfg.node,
                cfg.size,
                Areas::Exact(1),
                cfg.release.search(),
            )?;
            let overflow = match m.alloc(cfg.node, IO_TLB_OVERFLOW) {
                Ok(a) => a,
                Err(e) => {
                    // Give the pool back: a failed init leaves memory as it found it.
                    let _ = m.free(pool.start, cfg.size);
                    return Err(e.into());
                }
            };
            (pool, overflow)
        };
        Ok(Swiotlb2012Ops {
            io_tlb_start: book.keep(pool.start),
            io_tlb_end: book.keep(pool.end()),
            io_tlb_overflow_buffer: book.keep(overflow_phys),
            overflow_phys,
            pool,
            mem,
            book,
            force: cfg.force,
            release: cfg.release,
            costs: Costs {
                pool: PoolCosts::resolve(hw),
                map_page: hw.sw_cost(SwKey::SwiotlbMapPage),
                unmap_page: hw.sw_cost(SwKey::SwiotlbUnmapPage),
                unmap_single: Groups::resolve(hw, SwKey::InsnUnmapSingle, cfg.insns.unmap_single()),
                sync_single_for_cpu: hw.sw_cost(SwKey::SwiotlbSyncSingleForCpu),
                sync_single_for_device: hw.sw_cost(SwKey::SwiotlbSyncSingleForDevice),
                sync_single: Groups::resolve(
                    hw,
                    SwKey::InsnSwiotlbSyncSingle,
                    cfg.insns.sync_single(),
                ),
                is_swiotlb_buffer: hw.sw_cost(SwKey::IsSwiotlbBuffer),
                mapping_error: Groups::resolve(
                    hw,
                    SwKey::InsnSwiotlbDmaMappingError,
                    cfg.insns.mapping_error(),
                ),
                tbl_map_single: hw.sw_cost(SwKey::SwiotlbTblMapSingle),
                tbl_unmap_single: hw.sw_cost(SwKey::SwiotlbTblUnmapSingle),
                tbl_sync_single: hw.sw_cost(SwKey::SwiotlbTblSyncSingle),
                bounce: hw.sw_cost(SwKey::SwiotlbBounce),
                sg_next: hw.sw_cost(SwKey::SgNext),
            },
        })
    }

    pub fn pool(&self) -> &IoTlbMem {
        &self.pool
    }

    pub fn mem(&self) -> &SharedPhysMem {
        &self.mem
    }

    pub fn bookkeeping(&self) -> &AddrBook {
        &self.book
    }

    /// The overflow buffer's physical (= bus) address.
    pub fn overflow_buffer(&self) -> PhysAddr {
        self.overflow_phys
    }

    /// `is_swiotlb_buffer()`. C's `&&`: the end is translated only if the start compare passed.
    /// `caller` is the calling function's instruction groups: what the call costs it out of line
    /// (≤ 3.6), or the range check it executes itself once the function is inlined (3.8); either
    /// is charged to the caller's frame, which is current here.
    #[inline(always)]
    fn is_swiotlb_buffer<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        caller: &Groups,
        paddr: PhysAddr,
    ) -> bool {
        let out_of_line = self.book.is_swiotlb_buffer_out_of_line();
        hw.sw(if out_of_line {
            caller.out_of_line
        } else {
            caller.inline
        });
        let back = out_of_line.then(|| hw.enter(crate::frame_id!("is_swiotlb_buffer")));
        if out_of_line {
            hw.sw(self.costs.is_swiotlb_buffer);
        }
        let r = paddr >= self.book.to_phys(hw, self.io_tlb_start)
            && paddr < self.book.to_phys(hw, self.io_tlb_end);
        if let Some(back) = back {
            hw.leave(back);
        }
        r
    }

    /// Slot index of a kept slot address (pointer arithmetic on kept values: no translation).
    fn kept_index(&self, kept: Kept) -> Option<usize> {
        let off = kept.0.checked_sub(self.io_tlb_start.0)?;
        let i = usize::try_from(off >> IO_TLB_SHIFT).ok()?;
        (i < self.pool.nslabs()).then_some(i)
    }

    /// The physical address behind a kept slot address, for moving bytes (the CPU dereferences
    /// the virtual address directly; nothing is called).
    fn slot_phys(&self, kept: Kept) -> PhysAddr {
        PhysAddr(
            self.pool
                .start
                .0
                .wrapping_add(kept.0.wrapping_sub(self.io_tlb_start.0)),
        )
    }

    /// `swiotlb_bounce()`: `size` bytes between the original and the slot, within the pool.
    fn bounce<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        orig: PhysAddr,
        kept: Kept,
        size: u64,
        dir: BounceDir,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_bounce"));
        hw.sw(self.costs.bounce);
        let tlb = self.slot_phys(kept);
        let len = size.min(self.pool.end().0.saturating_sub(tlb.0));
        match dir {
            BounceDir::ToDevice => memcpy(hw, &self.mem, tlb, orig, len),
            BounceDir::FromDevice => memcpy(hw, &self.mem, orig, tlb, len),
        }
        hw.leave(back);
    }

    /// `swiotlb_tbl_map_single()`: `None` when no run of slots fits.
    #[allow(clippy::too_many_arguments)]
    fn tbl_map_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tbl_dma_addr: PhysAddr,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Option<Kept> {
        let back = hw.enter(crate::frame_id!("swiotlb_tbl_map_single"));
        hw.sw(self.costs.tbl_map_single);
        let req = SlotRequest {
            orig_addr: Some(phys),
            alloc_size: size,
            alloc_align_mask: 0,
            min_align_mask: 0,
            seg_boundary_mask: dev.seg_boundary_mask,
            tbl_dma_addr: tbl_dma_addr.0,
            cpu: 0,
        };
        // A next-fit search always ends: no run of slots fits, or one does.
        let found = self.pool.find_slots(hw, &self.costs.pool, &req).ok();
        let r = found.map(|index| {
            for i in 0..super::nr_slots(size) as usize {
                self.pool.table.borrow_mut().slots[index + i].orig_addr =
                    PhysAddr(phys.0.wrapping_add((i as u64) << IO_TLB_SHIFT));
            }
            let kept = Kept(self.io_tlb_start.0 + ((index as u64) << IO_TLB_SHIFT));
            if self.release.copies_at_map(dir, attrs) {
                self.bounce(hw, phys, kept, size, BounceDir::ToDevice);
            }
            kept
        });
        hw.leave(back);
        r
    }

    /// `swiotlb_tbl_unmap_single()`: copy back, then free as many slots as `size` says.
    fn tbl_unmap_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        kept: Kept,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_tbl_unmap_single"));
        hw.sw(self.costs.tbl_unmap_single);
        if let Some(index) = self.kept_index(kept)
            && self.pool.table.borrow().slots[index].list == 0
        {
            let orig = self.pool.table.borrow().slots[index].orig_addr;
            if orig != INVALID_PHYS_ADDR
                && matches!(dir, DmaDirection::FromDevice | DmaDirection::Bidirectional)
            {
                self.bounce(hw, orig, kept, size, BounceDir::FromDevice);
            }
            self.pool
                .release(hw, &self.costs.pool, index, super::nr_slots(size) as usize);
        }
        hw.leave(back);
    }

    /// `swiotlb_tbl_sync_single()`: no lock, just the copy the direction asks for.
    fn tbl_sync_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        kept: Kept,
        size: u64,
        dir: DmaDirection,
        target: SyncTarget,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_tbl_sync_single"));
        hw.sw(self.costs.tbl_sync_single);
        if let Some(index) = self.kept_index(kept) {
            let orig = self.pool.table.borrow().slots[index].orig_addr;
            if orig != INVALID_PHYS_ADDR {
                let phys = PhysAddr(orig.0.wrapping_add(kept.0 & (IO_TLB_SIZE - 1)));
                match target {
                    SyncTarget::ForCpu
                        if matches!(
                            dir,
                            DmaDirection::FromDevice | DmaDirection::Bidirectional
                        ) =>
                    {
                        self.bounce(hw, phys, kept, size, BounceDir::FromDevice)
                    }
                    SyncTarget::ForDevice
                        if matches!(dir, DmaDirection::ToDevice | DmaDirection::Bidirectional) =>
                    {
                        self.bounce(hw, phys, kept, size, BounceDir::ToDevice)
                    }
                    _ => {}
                }
            }
        }
        hw.leave(back);
    }

    /// `map_single()` (static, inlined into its callers): the pool's bus address, then the search.
    fn map_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Option<Kept> {
        let start_dma_addr = self.book.to_phys(hw, self.io_tlb_start);
        self.tbl_map_single(hw, dev, start_dma_addr, phys, size, dir, attrs)
    }

    /// `unmap_single()`.
    #[inline(always)]
    fn unmap_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("unmap_single"));
        hw.sw(self.costs.unmap_single.common);
        let paddr = PhysAddr(addr.0);
        let caller = self.costs.unmap_single;
        if self.is_swiotlb_buffer(hw, &caller, paddr) {
            let kept = self.book.keep(paddr);
            self.tbl_unmap_single(hw, kept, size, dir);
        }
        // Otherwise only dma_mark_clean(), which x86 does not have.
        hw.leave(back);
    }

    /// `swiotlb_sync_single()`.
    #[inline(always)]
    fn sync_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        target: SyncTarget,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_single"));
        hw.sw(self.costs.sync_single.common);
        let paddr = PhysAddr(addr.0);
        let caller = self.costs.sync_single;
        if self.is_swiotlb_buffer(hw, &caller, paddr) {
            let kept = self.book.keep(paddr);
            self.tbl_sync_single(hw, kept, size, dir, target);
        }
        hw.leave(back);
    }

    /// `swiotlb_dma_mapping_error()`: is `addr` the overflow buffer's bus address?
    #[inline(always)]
    pub fn dma_mapping_error<H: Hw + ?Sized>(&self, hw: &mut H, addr: DmaAddr) -> bool {
        let back = hw.enter(crate::frame_id!("swiotlb_dma_mapping_error"));
        let c = self.costs.mapping_error;
        hw.sw(c.common);
        if self.book.translation_out_of_line() {
            hw.sw(c.out_of_line);
        }
        let r = addr.0 == self.book.to_phys(hw, self.io_tlb_overflow_buffer).0;
        hw.leave(back);
        r
    }

    /// `swiotlb_full()`: 3.6 panics when a failed mapping is larger than the overflow buffer
    /// (random memory would be DMA'd); that becomes a mapping error naming the panic.
    fn swiotlb_full(dev: &Device, size: u64, dir: DmaDirection) -> Result<(), DmaError> {
        if size <= IO_TLB_OVERFLOW {
            return Ok(());
        }
        let what = match dir {
            DmaDirection::Bidirectional => "accessed",
            DmaDirection::FromDevice => "written",
            _ => "read",
        };
        Err(DmaError::MappingError(format!(
            "{}: out of SW-IOMMU space for {size} bytes; 3.6 panics here (\"DMA: Random memory could be DMA {what}\")",
            dev.name
        )))
    }

    fn map_page_inner<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let dev_addr = DmaAddr(phys.0);
        if dma_capable(dev, dev_addr, size) && !self.force {
            return Ok(dev_addr);
        }
        if size == 0 {
            // BUG_ON(!nslots) in 3.6.
            return Err(DmaError::MappingError(format!(
                "{}: zero-length swiotlb mapping",
                dev.name
            )));
        }
        let map = match self.map_single(hw, dev, phys, size, dir, attrs) {
            Some(m) => m,
            None => {
                Self::swiotlb_full(dev, size, dir)?;
                self.io_tlb_overflow_buffer
            }
        };
        let dev_addr = DmaAddr(self.book.to_phys(hw, map).0);
        if !dma_capable(dev, dev_addr, size) {
            // 3.6 would also "unmap" the overflow buffer here, corrupting the pool; only a real
            // slot run is given back.
            if map != self.io_tlb_overflow_buffer {
                self.tbl_unmap_single(hw, map, size, dir);
            }
            return Ok(DmaAddr(
                self.book.to_phys(hw, self.io_tlb_overflow_buffer).0,
            ));
        }
        Ok(dev_addr)
    }

    fn unmap_sg_entries<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        sgt: &mut SgTable,
        n: usize,
        dir: DmaDirection,
    ) {
        for e in &mut sgt.entries[..n] {
            hw.sw(self.costs.sg_next);
            let (addr, len) = (e.dma_address, u64::from(e.dma_length));
            e.dma_address = DmaAddr::MAPPING_ERROR;
            e.dma_length = 0;
            self.unmap_single(hw, addr, len, dir);
        }
    }
}

impl DmaMapOps for Swiotlb2012Ops {
    fn name(&self) -> &'static str {
        "swiotlb (2012 x86 swiotlb_dma_ops)"
    }

    fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let back = hw.enter(crate::frame_id!("swiotlb_map_page"));
        hw.sw(self.costs.map_page);
        let r = self.map_page_inner(hw, dev, phys, size, dir, attrs);
        hw.leave(back);
        r
    }

    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        _attrs: DmaAttrs,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_unmap_page"));
        hw.sw(self.costs.unmap_page);
        self.unmap_single(hw, addr, size, dir);
        hw.leave(back);
    }

    fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        let back = hw.enter(crate::frame_id!("swiotlb_map_sg_attrs"));
        let mut failed = None;
        for i in 0..sgt.entries.len() {
            hw.sw(self.costs.sg_next);
            let (paddr, len) = (sgt.entries[i].phys(), u64::from(sgt.entries[i].length));
            let dev_addr = DmaAddr(paddr.0);
            let addr = if self.force || !dma_capable(dev, dev_addr, len) {
                match self.map_single(hw, dev, paddr, len, dir, attrs) {
                    Some(map) => DmaAddr(self.book.to_phys(hw, map).0),
                    None => {
                        failed = Some(i);
                        break;
                    }
                }
            } else {
                dev_addr
            };
            let e = &mut sgt.entries[i];
            e.dma_address = addr;
            e.dma_length = e.length;
        }
        let r = match failed {
            None => {
                sgt.nents = sgt.entries.len();
                Ok(sgt.nents)
            }
            Some(i) => {
                // swiotlb_full(..., 0) does not panic; swiotlb_unmap_sg_attrs(sgl, i) undoes.
                let back = hw.enter(crate::frame_id!("swiotlb_unmap_sg_attrs"));
                self.unmap_sg_entries(hw, sgt, i, dir);
                hw.leave(back);
                sgt.nents = 0;
                Err(DmaError::MappingError(format!(
                    "{}: out of SW-IOMMU space for sg entry {i} ({} bytes)",
                    dev.name, sgt.entries[i].length
                )))
            }
        };
        hw.leave(back);
        r
    }

    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        _attrs: DmaAttrs,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_unmap_sg_attrs"));
        let n = sgt.nents;
        self.unmap_sg_entries(hw, sgt, n, dir);
        sgt.nents = 0;
        hw.leave(back);
    }

    fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_single_for_cpu"));
        hw.sw(self.costs.sync_single_for_cpu);
        self.sync_single(hw, addr, size, dir, SyncTarget::ForCpu);
        hw.leave(back);
    }

    fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_single_for_device"));
        hw.sw(self.costs.sync_single_for_device);
        self.sync_single(hw, addr, size, dir, SyncTarget::ForDevice);
        hw.leave(back);
    }

    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_sg_for_cpu"));
        for e in &sgt.entries[..sgt.nents] {
            hw.sw(self.costs.sg_next);
            self.sync_single(
                hw,
                e.dma_address,
                u64::from(e.dma_length),
                dir,
                SyncTarget::ForCpu,
            );
        }
        hw.leave(back);
    }

    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_sg_for_device"));
        for e in &sgt.entries[..sgt.nents] {
            hw.sw(self.costs.sg_next);
            self.sync_single(
                hw,
                e.dma_address,
                u64::from(e.dma_length),
                dir,
                SyncTarget::ForDevice,
            );
        }
        hw.leave(back);
    }

    fn mapping_error<H: DeviceHw>(&self, hw: &mut H, _dev: &Device, addr: DmaAddr) -> bool {
        self.dma_mapping_error(hw, addr)
    }
}

impl crate::stats::Stats for Swiotlb2012Ops {
    fn swiotlb_stats(&self) -> Option<crate::stats::SwiotlbStats> {
        Some(self.pool.stats())
    }
}

#[cfg(test)]
mod tests;
