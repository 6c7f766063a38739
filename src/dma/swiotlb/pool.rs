//! The bounce pool and its slot allocator.
//!
//! Kernel counterpart: `struct io_tlb_mem` with its `slots[]` (`list`, `orig_addr`, `alloc_size`)
//! and `areas[]` (kernel/dma/swiotlb.c, 6.0), and before it the globals `io_tlb_start`,
//! `io_tlb_nslabs`, `io_tlb_list[]`, `io_tlb_orig_addr[]`, `io_tlb_index` and `io_tlb_lock`
//! (lib/swiotlb.c, 3.6). The search is `swiotlb_tbl_map_single`'s loop in 3.6 ([`NextFit3_6`]) or
//! `swiotlb_find_slots` / `swiotlb_do_find_slots` in 6.0 ([`AreaSearch6_0`]); freeing is
//! `swiotlb_tbl_unmap_single` (3.6) / `swiotlb_release_slots` (6.0), the same algorithm in both.
//!
//! What it models: the pool is `nslabs` slots of `IO_TLB_SIZE` (2 KiB) bytes in real simulated
//! memory, grouped in segments of `IO_TLB_SEGSIZE` (128) slots. `list[i]` is the number of free
//! slots from `i` to the end of its free run, and a run never continues past its segment, so no
//! mapping can span two segments: the largest is 128 slots, 256 KiB. Searches are next-fit from a
//! rotating index (one per area), with the stride and alignment rules of the release, and the
//! device's segment boundary (`iommu_is_span_boundary`). Each search or release takes the pool
//! lock (3.6) or the area's lock (6.0), counted and charged through [`Hw`].
//!
//! Invariants: for every slot, `list[i] == 0` exactly when it is in use; for a free slot,
//! `list[i] == list[i + 1] + 1` unless `i + 1` is in use or starts a segment, in which case it is 1;
//! `areas[a].used` is the number of in-use slots in area `a`. A pool with nothing mapped has the
//! same `list[]` as a fresh one. A failed search changes nothing but the charges.

use crate::hw::SmpHw;
use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::mm::physmem::{PhysMem, PhysMemError};
use crate::scatterlist::PAGE_SIZE;
use crate::smp::SpinLock;
use crate::types::PhysAddr;
use std::cell::RefCell;
use std::fmt::Debug;

/// `IO_TLB_SHIFT`: a slot is 2 KiB.
pub const IO_TLB_SHIFT: u32 = 11;
/// `IO_TLB_SIZE`.
pub const IO_TLB_SIZE: u64 = 1 << IO_TLB_SHIFT;
/// `IO_TLB_SEGSIZE`: slots per segment; no mapping spans two.
pub const IO_TLB_SEGSIZE: usize = 128;
/// The largest mapping: one whole segment, 256 KiB (`swiotlb_max_mapping_size()`).
pub const IO_TLB_MAX_MAPPING: u64 = (IO_TLB_SEGSIZE as u64) << IO_TLB_SHIFT;
/// `IO_TLB_DEFAULT_SIZE`: 64 MiB.
pub const IO_TLB_DEFAULT_SIZE: u64 = 64 << 20;
/// 3.6's `io_tlb_overflow`: the 32 KiB buffer a failed map hands out instead of panicking.
pub const IO_TLB_OVERFLOW: u64 = 32 << 10;

/// `nr_slots()`: slots needed for `size` bytes.
pub fn nr_slots(size: u64) -> u64 {
    size.div_ceil(IO_TLB_SIZE)
}

/// `io_tlb_offset()`: a slot's position inside its segment.
fn io_tlb_offset(i: usize) -> usize {
    i % IO_TLB_SEGSIZE
}

/// `iommu_is_span_boundary()`: would `nr` slots from `index` cross a `boundary_size`-slot boundary
/// of the bus address space, given the pool starts `shift` slots into it? The kernel requires a
/// power-of-two boundary; the remainder below equals its mask for those and cannot fault otherwise.
pub fn iommu_is_span_boundary(index: u64, nr: u64, shift: u64, boundary_size: u64) -> bool {
    let boundary_size = boundary_size.max(1);
    let pos = (shift.wrapping_add(index)) % boundary_size;
    pos + nr > boundary_size
}

/// Bad pool configuration, refused before anything is allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SwiotlbError {
    #[error(
        "swiotlb pool size {0:#x} bytes is not a positive multiple of a segment ({IO_TLB_MAX_MAPPING:#x} bytes = {IO_TLB_SEGSIZE} slots of {IO_TLB_SIZE} bytes)"
    )]
    BadSize(u64),
    #[error("swiotlb area count {0} is not a power of two")]
    AreasNotPowerOfTwo(u32),
    #[error(
        "swiotlb: {nareas} areas cannot split {nslabs} slots into whole segments of {IO_TLB_SEGSIZE}"
    )]
    TooManyAreas { nareas: u32, nslabs: u64 },
    #[error("swiotlb: Linux 3.6 keeps one pool lock; areas (here {0}) arrived in 6.0")]
    NoAreasBefore6_0(u32),
    #[error("swiotlb: cannot allocate the pool: {0}")]
    NoMemory(#[from] PhysMemError),
}

/// How many areas (each with its own lock and rotating index) the pool is split into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Areas {
    /// The 6.0 default: the number of possible CPUs, rounded up to a power of two.
    PossibleCpus(u32),
    /// `swiotlb=<slabs>,<areas>`: must be a power of two here.
    Exact(u32),
}

impl Areas {
    /// The area count, or why it is refused.
    pub fn resolve(self) -> Result<u32, SwiotlbError> {
        match self {
            Areas::PossibleCpus(n) => n
                .max(1)
                .checked_next_power_of_two()
                .ok_or(SwiotlbError::AreasNotPowerOfTwo(n)),
            Areas::Exact(n) if n.is_power_of_two() => Ok(n),
            Areas::Exact(n) => Err(SwiotlbError::AreasNotPowerOfTwo(n)),
        }
    }
}

/// One `struct io_tlb_slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Free slots from here to the end of this free run (0: in use).
    pub list: u32,
    /// The original buffer's address for the bytes of this slot (`INVALID_PHYS_ADDR` when free).
    pub orig_addr: PhysAddr,
    /// Bytes of the mapping from this slot to its end (6.0; kept in 3.6 mode for checks only).
    pub alloc_size: u64,
}

/// `INVALID_PHYS_ADDR`.
pub const INVALID_PHYS_ADDR: PhysAddr = PhysAddr(u64::MAX);

/// One `struct io_tlb_area`. In 3.6 mode there is exactly one: its `index` is `io_tlb_index`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Area {
    /// Where the next search starts, relative to the area's first slot.
    pub index: usize,
    pub used: usize,
    /// Times this area's lock (3.6: the pool lock) was taken: a search of the area or a release
    /// of slots in it. Several CPUs mapping at once contend on whichever lock counts grow together.
    pub locks: u64,
}

/// The slot bookkeeping, apart from the search rules so a rule can borrow it mutably.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotTable {
    pub slots: Vec<Slot>,
    pub areas: Vec<Area>,
    pub area_nslabs: usize,
}

impl SlotTable {
    fn new(nslabs: usize, nareas: usize) -> SlotTable {
        SlotTable {
            slots: (0..nslabs)
                .map(|i| Slot {
                    list: (IO_TLB_SEGSIZE - io_tlb_offset(i)) as u32,
                    orig_addr: INVALID_PHYS_ADDR,
                    alloc_size: 0,
                })
                .collect(),
            areas: vec![Area::default(); nareas],
            area_nslabs: nslabs / nareas,
        }
    }

    pub fn nslabs(&self) -> usize {
        self.slots.len()
    }

    /// The `list[]` of a pool with nothing mapped.
    pub fn fresh_lists(nslabs: usize) -> Vec<u32> {
        (0..nslabs)
            .map(|i| (IO_TLB_SEGSIZE - io_tlb_offset(i)) as u32)
            .collect()
    }

    /// Mark `nslots` slots from `index` in use and shorten the free run that ended at them. The
    /// "found:" block of both releases' searches.
    fn claim<H: Hw + ?Sized>(
        &mut self,
        hw: &mut H,
        c: &PoolCosts,
        index: usize,
        nslots: usize,
        alloc: u64,
    ) {
        for i in index..index + nslots {
            hw.sw(c.slot_update);
            self.slots[i].list = 0;
            self.slots[i].alloc_size = alloc.saturating_sub(((i - index) as u64) << IO_TLB_SHIFT);
        }
        let mut count = 0;
        let mut i = index;
        while i > 0 && io_tlb_offset(i - 1) != IO_TLB_SEGSIZE - 1 && self.slots[i - 1].list != 0 {
            i -= 1;
            count += 1;
            hw.sw(c.slot_update);
            self.slots[i].list = count;
        }
        let a = index / self.area_nslabs;
        self.areas[a].used += nslots;
    }

    /// Give `nslots` slots from `index` back and merge them with the free runs on either side
    /// (`swiotlb_release_slots`; in 3.6 the body of `swiotlb_tbl_unmap_single`), under the lock
    /// of the area they belong to, which the caller holds ([`IoTlbMem::release`]).
    pub fn release<H: Hw + ?Sized>(
        &mut self,
        hw: &mut H,
        c: &PoolCosts,
        index: usize,
        nslots: usize,
    ) {
        let nslots = nslots.min(self.slots.len() - index);
        let a = index / self.area_nslabs;
        self.areas[a].locks += 1;
        let seg_end = (index + 1).div_ceil(IO_TLB_SEGSIZE) * IO_TLB_SEGSIZE;
        let mut count = if index + nslots < seg_end {
            self.slots[index + nslots].list
        } else {
            0
        };
        for i in (index..index + nslots).rev() {
            count += 1;
            hw.sw(c.slot_update);
            self.slots[i] = Slot {
                list: count,
                orig_addr: INVALID_PHYS_ADDR,
                alloc_size: 0,
            };
        }
        let mut i = index;
        while i > 0 && io_tlb_offset(i - 1) != IO_TLB_SEGSIZE - 1 && self.slots[i - 1].list != 0 {
            i -= 1;
            count += 1;
            hw.sw(c.slot_update);
            self.slots[i].list = count;
        }
        self.areas[a].used = self.areas[a].used.saturating_sub(nslots);
    }

    pub fn used(&self) -> usize {
        self.areas.iter().map(|a| a.used).sum()
    }
}

/// Software costs of the pool, resolved once.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolCosts {
    /// `spin_lock_irqsave` + `spin_unlock_irqrestore` of the pool or area lock, uncontended.
    pub lock: SwCost,
    /// One iteration of the search loop (one candidate slot looked at).
    pub search_step: SwCost,
    /// One `list[]` entry written when claiming or releasing slots.
    pub slot_update: SwCost,
}

impl PoolCosts {
    pub fn resolve<H: Hw + ?Sized>(hw: &H) -> PoolCosts {
        PoolCosts {
            lock: hw.sw_cost(SwKey::SpinLockIrqsave),
            search_step: hw.sw_cost(SwKey::SwiotlbSearchStep),
            slot_update: hw.sw_cost(SwKey::SwiotlbSlotUpdate),
        }
    }
}

/// `spin_lock_irqsave(lock)`, `f`, `spin_unlock_irqrestore(lock)` on the pool or area lock.
/// `_raw_spin_lock_irqsave` is out of line, so it is a frame (a CPU that finds the lock held
/// spins in it); the unlock's cost is folded into the same named cost.
pub fn with_lock_irqsave<H: Hw + ?Sized, T, R>(
    hw: &mut H,
    c: &PoolCosts,
    lock: &SpinLock<T>,
    f: impl FnOnce(&mut H, &mut T) -> R,
) -> R {
    let back = hw.enter(crate::frame_id!("_raw_spin_lock_irqsave"));
    // The irqsave and the atomic that finds the lock are paid before it is owned: the critical
    // section another CPU waits out is the work done under it.
    hw.sw(c.lock);
    hw.with_lock(lock, |hw, data| {
        hw.count(Counter::SpinLock, 1);
        hw.leave(back);
        f(hw, data)
    })
}

/// What a search is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRequest {
    /// The original buffer (`None`: an allocation with no original, as `swiotlb_alloc` makes).
    pub orig_addr: Option<PhysAddr>,
    /// Bytes to hold, including the `min_align_mask` offset in front (6.0), or the mapping size (3.6).
    pub alloc_size: u64,
    /// Extra alignment the caller asks for (6.0 `alloc_align_mask`).
    pub alloc_align_mask: u64,
    /// `dma_get_min_align_mask(dev)` (6.0).
    pub min_align_mask: u64,
    /// `dma_get_seg_boundary(dev)`.
    pub seg_boundary_mask: u64,
    /// Bus address of the pool's first slot (`phys_to_dma(io_tlb_start)`).
    pub tbl_dma_addr: u64,
    /// `raw_smp_processor_id()`: picks the first area tried (6.0).
    pub cpu: u32,
}

/// Why a search found no slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoSlots {
    /// Every candidate was looked at: nothing fits (the kernel's "swiotlb buffer is full").
    Full,
    /// The search loop can never end (5.12–6.2: after a misaligned candidate the index steps off
    /// the stride and never meets the start again). The kernel spins there forever with the lock
    /// held; the model stops once a candidate repeats, having charged every step to it.
    Spins,
}

/// The slot search of one release. Its search is generic over the backend, so the trait is
/// held by value ([`SlotSearch`]), never as a trait object.
pub trait FindSlots: Debug {
    fn name(&self) -> &'static str;
    /// Claim slots for `req` and return the first one's index, or why none were claimed. Takes
    /// (and counts) every lock the release takes, and charges every loop iteration.
    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots>;
    /// Whether this release has areas.
    fn has_areas(&self) -> bool;
}

/// lib/swiotlb.c 3.6–4.10: one lock; next fit from `io_tlb_index` aligned up to the stride;
/// stride 2 slots (page-aligned starts) when the mapping is larger than a page (`size >
/// PAGE_SIZE`, strictly); the segment boundary skip; wrap to 0 at the end of the pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct NextFit3_6;

/// 4.11–5.11 (lib/swiotlb.c, kernel/dma/swiotlb.c from 4.17): 3.6's search, but a mapping of a
/// page exactly is page-aligned too (`alloc_size >= PAGE_SIZE`, Nikita Yushchenko's "swiotlb:
/// ensure that page-sized mappings are page-aligned", 4.11).
#[derive(Clone, Copy, Debug, Default)]
pub struct NextFit4_11;

/// 5.12–5.19 `find_slots()`: one lock; the start index aligned up to the stride; slots must
/// match the original under `min_align_mask` (its bits above a slot only); the stride is the one
/// that mask implies, doubled for allocations of a page or more; a misaligned candidate steps
/// by one. The loop ends only when the index meets the start again (see [`NoSlots::Spins`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct StrideFit5_12;

/// 6.0–6.2 `swiotlb_do_find_slots()`: 5.12's search in each area under the area's lock, the
/// stride at least the one `alloc_align_mask` implies (which the slot is not compared against),
/// and no comparison at all for a request with no original (`swiotlb_alloc`), which still
/// honours the stride. Areas are tried from the current CPU's on.
#[derive(Clone, Copy, Debug, Default)]
pub struct StrideFit6_0;

/// 6.3–6.8: `nareas` areas, each with its own lock and rotating index; the first area tried is
/// the current CPU's (`cpu & (nareas - 1)`) and the others follow in turn; slots must match the
/// original's address bits under `min_align_mask | alloc_align_mask` (plus the page offset for
/// allocations of a page or more), compared bit by bit, from an unaligned start, with the stride
/// that alignment implies; at most one pass over the area's slots (`slots_checked`).
#[derive(Clone, Copy, Debug, Default)]
pub struct AreaSearch6_3;

/// 6.9 on: as 6.3, but `alloc_align_mask` is an alignment of the slot itself (checked with or
/// without an original), page alignment for a page or more only when neither mask is given,
/// and `min_align_mask` compared only on the bits the allocation's own alignment does not keep.
#[derive(Clone, Copy, Debug, Default)]
pub struct AreaSearch6_9;

/// The search of the pool's release, held by value: one of the [`FindSlots`] implementations
/// above, chosen once at setup ([`super::Release`]), dispatched by a match so that the search
/// runs monomorphised for the caller's backend.
#[derive(Clone, Copy, Debug)]
pub enum SlotSearch {
    NextFit3_6(NextFit3_6),
    NextFit4_11(NextFit4_11),
    StrideFit5_12(StrideFit5_12),
    StrideFit6_0(StrideFit6_0),
    AreaSearch6_3(AreaSearch6_3),
    AreaSearch6_9(AreaSearch6_9),
}

macro_rules! slot_search_from {
    ($($v:ident),*) => {$(
        impl From<$v> for SlotSearch {
            fn from(s: $v) -> SlotSearch {
                SlotSearch::$v(s)
            }
        }
    )*};
}
slot_search_from!(
    NextFit3_6,
    NextFit4_11,
    StrideFit5_12,
    StrideFit6_0,
    AreaSearch6_3,
    AreaSearch6_9
);

macro_rules! each_search {
    ($self:expr, $s:ident => $e:expr) => {
        match $self {
            SlotSearch::NextFit3_6($s) => $e,
            SlotSearch::NextFit4_11($s) => $e,
            SlotSearch::StrideFit5_12($s) => $e,
            SlotSearch::StrideFit6_0($s) => $e,
            SlotSearch::AreaSearch6_3($s) => $e,
            SlotSearch::AreaSearch6_9($s) => $e,
        }
    };
}

impl FindSlots for SlotSearch {
    fn name(&self) -> &'static str {
        each_search!(self, s => s.name())
    }

    fn has_areas(&self) -> bool {
        each_search!(self, s => s.has_areas())
    }

    #[inline]
    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_search!(self, s => s.find_slots(mem, hw, c, req))
    }
}

fn max_slots(boundary_mask: u64) -> u64 {
    if boundary_mask == u64::MAX {
        1 << (64 - IO_TLB_SHIFT)
    } else {
        nr_slots(boundary_mask + 1)
    }
}

/// The next-fit search of 3.6 to 5.11 under the one pool lock; `page_from` is the smallest
/// size that gets a page stride.
fn next_fit<H: Hw + ?Sized>(
    t: &mut SlotTable,
    hw: &mut H,
    c: &PoolCosts,
    req: &SlotRequest,
    page_from: u64,
) -> Result<usize, NoSlots> {
    let nslabs = t.nslabs();
    let mask = req.seg_boundary_mask;
    let tbl_dma_addr = req.tbl_dma_addr & mask;
    let offset_slots = tbl_dma_addr.div_ceil(IO_TLB_SIZE);
    let max_slots = max_slots(mask);
    let nslots = nr_slots(req.alloc_size);
    if nslots == 0 {
        return Err(NoSlots::Full);
    }
    let stride = if req.alloc_size >= page_from {
        (PAGE_SIZE / IO_TLB_SIZE) as usize
    } else {
        1
    };
    t.areas[0].locks += 1;
    let mut index = t.areas[0].index.div_ceil(stride) * stride;
    if index >= nslabs {
        index = 0;
    }
    let wrap = index;
    let advance = |i: usize| if i + stride >= nslabs { 0 } else { i + stride };
    loop {
        while iommu_is_span_boundary(index as u64, nslots, offset_slots, max_slots) {
            hw.sw(c.search_step);
            index = advance(index);
            if index == wrap {
                return Err(NoSlots::Full);
            }
        }
        hw.sw(c.search_step);
        if u64::from(t.slots[index].list) >= nslots {
            let n = nslots as usize;
            t.claim(hw, c, index, n, req.alloc_size);
            t.areas[0].index = if index + n < nslabs { index + n } else { 0 };
            return Ok(index);
        }
        index = advance(index);
        if index == wrap {
            return Err(NoSlots::Full);
        }
    }
}

impl FindSlots for NextFit3_6 {
    fn name(&self) -> &'static str {
        "3.6"
    }

    fn has_areas(&self) -> bool {
        false
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        mem.locked(hw, c, 0, req, |t, hw| {
            next_fit(t, hw, c, req, PAGE_SIZE + 1)
        })
    }
}

impl FindSlots for NextFit4_11 {
    fn name(&self) -> &'static str {
        "4.11"
    }

    fn has_areas(&self) -> bool {
        false
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        mem.locked(hw, c, 0, req, |t, hw| next_fit(t, hw, c, req, PAGE_SIZE))
    }
}

/// Tries the current CPU's area first, then each other in turn (`swiotlb_find_slots()`, 6.0 on),
/// each under its own lock.
fn each_area<H: Hw + ?Sized>(
    mem: &IoTlbMem,
    hw: &mut H,
    c: &PoolCosts,
    req: &SlotRequest,
    mut one: impl FnMut(&mut SlotTable, &mut H, usize) -> Result<usize, NoSlots>,
) -> Result<usize, NoSlots> {
    let nareas = mem.nareas();
    let start = req.cpu as usize & (nareas - 1);
    let mut i = start;
    loop {
        match mem.locked(hw, c, i, req, |t, hw| one(t, hw, i)) {
            Ok(idx) => return Ok(idx),
            Err(NoSlots::Spins) => return Err(NoSlots::Spins),
            Err(NoSlots::Full) => {}
        }
        i = if i + 1 >= nareas { 0 } else { i + 1 };
        if i == start {
            return Err(NoSlots::Full);
        }
    }
}

impl FindSlots for StrideFit5_12 {
    fn name(&self) -> &'static str {
        "5.12"
    }

    fn has_areas(&self) -> bool {
        false
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        mem.locked(hw, c, 0, req, |t, hw| stride_fit(t, hw, c, req, 0, false))
    }
}

impl FindSlots for StrideFit6_0 {
    fn name(&self) -> &'static str {
        "6.0"
    }

    fn has_areas(&self) -> bool {
        true
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(mem, hw, c, req, |t, hw, a| {
            stride_fit(t, hw, c, req, a, true)
        })
    }
}

impl FindSlots for AreaSearch6_3 {
    fn name(&self) -> &'static str {
        "6.3"
    }

    fn has_areas(&self) -> bool {
        true
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(mem, hw, c, req, |t, hw, a| {
            let mut align_mask = req.min_align_mask | req.alloc_align_mask;
            if req.alloc_size >= PAGE_SIZE {
                align_mask |= PAGE_SIZE - 1;
            }
            align_mask &= !(IO_TLB_SIZE - 1);
            // Once an aligned slot is found, only every stride-th one after it can be aligned.
            let stride = ((align_mask >> IO_TLB_SHIFT) + 1) as usize;
            one_pass(t, hw, c, req, a, stride, |slot_bus| {
                req.orig_addr
                    .is_none_or(|o| slot_bus & align_mask == o.0 & align_mask)
            })
        })
    }
}

impl FindSlots for AreaSearch6_9 {
    fn name(&self) -> &'static str {
        "6.9"
    }

    fn has_areas(&self) -> bool {
        true
    }

    fn find_slots<H: Hw + ?Sized>(
        &self,
        mem: &IoTlbMem,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(mem, hw, c, req, |t, hw, a| {
            let mut alloc_align_mask = req.alloc_align_mask;
            let mut iotlb_align_mask = req.min_align_mask;
            // Page alignment for a page or more survives only where no mask says otherwise.
            if alloc_align_mask == 0 && iotlb_align_mask == 0 && req.alloc_size >= PAGE_SIZE {
                alloc_align_mask = PAGE_SIZE - 1;
            }
            alloc_align_mask |= IO_TLB_SIZE - 1;
            iotlb_align_mask &= !alloc_align_mask;
            let stride = usize::try_from(max_slots(alloc_align_mask.max(iotlb_align_mask)))
                .unwrap_or(usize::MAX);
            one_pass(t, hw, c, req, a, stride, |slot_bus| {
                slot_bus & alloc_align_mask == 0
                    && req
                        .orig_addr
                        .is_none_or(|o| slot_bus & iotlb_align_mask == o.0 & iotlb_align_mask)
            })
        })
    }
}

/// 5.12–6.2: the do-while search of one area (5.12: the whole pool), from the rotating index
/// aligned up to the stride until the index meets that start again.
fn stride_fit<H: Hw + ?Sized>(
    t: &mut SlotTable,
    hw: &mut H,
    c: &PoolCosts,
    req: &SlotRequest,
    area: usize,
    since_6_0: bool,
) -> Result<usize, NoSlots> {
    let boundary_mask = req.seg_boundary_mask;
    let tbl_dma_addr = req.tbl_dma_addr & boundary_mask;
    let max_slots = max_slots(boundary_mask);
    let iotlb_align_mask = req.min_align_mask & !(IO_TLB_SIZE - 1);
    let nslots = nr_slots(req.alloc_size);
    if nslots == 0 {
        return Err(NoSlots::Full);
    }
    let mut stride = (iotlb_align_mask >> IO_TLB_SHIFT).saturating_add(1);
    if req.alloc_size >= PAGE_SIZE {
        stride = stride.max(stride << (PAGE_SIZE / IO_TLB_SIZE).trailing_zeros());
    }
    if since_6_0 {
        stride = stride.max((req.alloc_align_mask >> IO_TLB_SHIFT).saturating_add(1));
    }
    let stride = usize::try_from(stride).unwrap_or(usize::MAX);
    let area_nslabs = t.area_nslabs;
    let wrap = |i: usize| if i >= area_nslabs { 0 } else { i };

    t.areas[area].locks += 1;
    if nslots > (area_nslabs - t.areas[area].used) as u64 {
        return Err(NoSlots::Full);
    }
    let slot_base = area * area_nslabs;
    let start = wrap(t.areas[area].index.div_ceil(stride).saturating_mul(stride));
    let mut index = start;
    // The loop's only state is `index`: once more candidates than slots were looked at, one
    // repeated, and the kernel's loop goes round for ever.
    let mut steps = 0usize;
    loop {
        if steps >= area_nslabs {
            return Err(NoSlots::Spins);
        }
        steps += 1;
        hw.sw(c.search_step);
        let slot_index = slot_base + index;
        let slot_bus = tbl_dma_addr.wrapping_add((slot_index as u64) << IO_TLB_SHIFT);
        // 5.12 compares every request (with no original, against address 0); 6.0 only those
        // with an original.
        let orig = match req.orig_addr {
            Some(o) => Some(o.0),
            None if since_6_0 => None,
            None => Some(0),
        };
        if let Some(o) = orig
            && slot_bus & iotlb_align_mask != o & iotlb_align_mask
        {
            index = wrap(index + 1);
        } else {
            if !iommu_is_span_boundary(
                slot_index as u64,
                nslots,
                tbl_dma_addr.div_ceil(IO_TLB_SIZE),
                max_slots,
            ) && u64::from(t.slots[slot_index].list) >= nslots
            {
                return Ok(claim_in_area(
                    t, hw, c, req, area, slot_index, index, nslots,
                ));
            }
            index = wrap(index.saturating_add(stride));
        }
        if index == start {
            return Err(NoSlots::Full);
        }
    }
}

/// 6.3 on: one pass over the area from its rotating index, unaligned, counting the slots
/// looked at (`slots_checked`); `aligned` says whether a slot's bus address may start the
/// mapping.
fn one_pass<H: Hw + ?Sized>(
    t: &mut SlotTable,
    hw: &mut H,
    c: &PoolCosts,
    req: &SlotRequest,
    area: usize,
    stride: usize,
    aligned: impl Fn(u64) -> bool,
) -> Result<usize, NoSlots> {
    let boundary_mask = req.seg_boundary_mask;
    let tbl_dma_addr = req.tbl_dma_addr & boundary_mask;
    let max_slots = max_slots(boundary_mask);
    let nslots = nr_slots(req.alloc_size);
    if nslots == 0 {
        return Err(NoSlots::Full);
    }
    let area_nslabs = t.area_nslabs;
    let wrap = |i: usize| if i >= area_nslabs { 0 } else { i };

    t.areas[area].locks += 1;
    if nslots > (area_nslabs - t.areas[area].used) as u64 {
        return Err(NoSlots::Full);
    }
    let slot_base = area * area_nslabs;
    let mut index = t.areas[area].index;
    let mut checked = 0usize;
    while checked < area_nslabs {
        hw.sw(c.search_step);
        let slot_index = slot_base + index;
        let slot_bus = tbl_dma_addr.wrapping_add((slot_index as u64) << IO_TLB_SHIFT);
        if !aligned(slot_bus) {
            index = wrap(index + 1);
            checked += 1;
            continue;
        }
        if !iommu_is_span_boundary(
            slot_index as u64,
            nslots,
            tbl_dma_addr.div_ceil(IO_TLB_SIZE),
            max_slots,
        ) && u64::from(t.slots[slot_index].list) >= nslots
        {
            return Ok(claim_in_area(
                t, hw, c, req, area, slot_index, index, nslots,
            ));
        }
        index = wrap(index.saturating_add(stride));
        checked = checked.saturating_add(stride);
    }
    Err(NoSlots::Full)
}

/// The "found:" block of 5.12 on: claim the run, record each slot's share of `alloc_size` less
/// the `min_align_mask` offset in front, and move the area's index past the run.
#[allow(clippy::too_many_arguments)]
fn claim_in_area<H: Hw + ?Sized>(
    t: &mut SlotTable,
    hw: &mut H,
    c: &PoolCosts,
    req: &SlotRequest,
    area: usize,
    slot_index: usize,
    index: usize,
    nslots: u64,
) -> usize {
    let n = nslots as usize;
    let offset = req
        .orig_addr
        .map_or(0, |o| o.0 & req.min_align_mask & (IO_TLB_SIZE - 1));
    t.claim(hw, c, slot_index, n, req.alloc_size - offset);
    t.areas[area].index = if index + n < t.area_nslabs {
        index + n
    } else {
        0
    };
    slot_index
}

/// The pool: where it lives, its slots, and the release whose rules it follows.
#[derive(Debug)]
pub struct IoTlbMem {
    /// `io_tlb_start` / `mem->start`.
    pub start: PhysAddr,
    /// The slots and areas: one array, as the kernel's `slots[]`, each area's part of it
    /// borrowed only inside that area's lock (or, for a slot a mapping owns, by that mapping's
    /// CPU), so a CPU waiting for a lock holds no borrow of it.
    pub table: RefCell<SlotTable>,
    /// Each area's lock (3.6: the one `io_tlb_lock`), shared by every CPU that maps through the
    /// pool. It guards a range of `table` rather than owning data of its own, as the kernel's
    /// `area->lock` guards the area's range of the one `slots[]` array.
    locks: Box<[SpinLock]>,
    nslabs: usize,
    search: SlotSearch,
}

impl IoTlbMem {
    /// `swiotlb_init_with_default_size()` / `swiotlb_init_io_tlb_mem()`: allocate `size` bytes
    /// from `mem` on `node` and set up the slots. `size` must be a whole number of segments.
    pub fn new(
        mem: &mut PhysMem,
        node: u32,
        size: u64,
        areas: Areas,
        search: impl Into<SlotSearch>,
    ) -> Result<IoTlbMem, SwiotlbError> {
        let search = search.into();
        if size == 0 || !size.is_multiple_of(IO_TLB_MAX_MAPPING) {
            return Err(SwiotlbError::BadSize(size));
        }
        let nslabs = size >> IO_TLB_SHIFT;
        let nareas = areas.resolve()?;
        if !search.has_areas() && nareas != 1 {
            return Err(SwiotlbError::NoAreasBefore6_0(nareas));
        }
        if !nslabs.is_multiple_of(u64::from(nareas) * IO_TLB_SEGSIZE as u64) {
            return Err(SwiotlbError::TooManyAreas { nareas, nslabs });
        }
        let nslabs = usize::try_from(nslabs).map_err(|_| SwiotlbError::BadSize(size))?;
        let start = mem.alloc_aligned(node, size, PAGE_SIZE)?;
        Ok(IoTlbMem {
            start,
            table: RefCell::new(SlotTable::new(nslabs, nareas as usize)),
            // Before 6.0 the pool's one `io_tlb_lock`; from 6.0 each area's `area->lock`.
            locks: (0..nareas)
                .map(|_| {
                    if search.has_areas() {
                        SpinLock::named("area->lock", "(spinning on area->lock)", ())
                    } else {
                        SpinLock::named("io_tlb_lock", "(spinning on io_tlb_lock)", ())
                    }
                })
                .collect(),
            nslabs,
            search,
        })
    }

    pub fn nslabs(&self) -> usize {
        self.nslabs
    }

    pub fn nareas(&self) -> usize {
        self.locks.len()
    }

    /// `body` on the table under area `area`'s lock: `spin_lock_irqsave`, `body`,
    /// `spin_unlock_irqrestore`. A request for no slots takes no lock, as the searches return
    /// before they would.
    fn locked<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        c: &PoolCosts,
        area: usize,
        req: &SlotRequest,
        body: impl FnOnce(&mut SlotTable, &mut H) -> Result<usize, NoSlots>,
    ) -> Result<usize, NoSlots> {
        if nr_slots(req.alloc_size) == 0 {
            return Err(NoSlots::Full);
        }
        with_lock_irqsave(hw, c, &self.locks[area], |hw, ()| {
            body(&mut self.table.borrow_mut(), hw)
        })
    }

    /// Give slots back (`swiotlb_release_slots`) under the lock of their area.
    pub fn release<H: Hw + ?Sized>(&self, hw: &mut H, c: &PoolCosts, index: usize, nslots: usize) {
        let area = index / self.table.borrow().area_nslabs;
        with_lock_irqsave(hw, c, &self.locks[area], |hw, ()| {
            self.table.borrow_mut().release(hw, c, index, nslots)
        });
    }

    /// `io_tlb_end` / `mem->end`: one past the last byte.
    pub fn end(&self) -> PhysAddr {
        PhysAddr(self.start.0 + ((self.nslabs() as u64) << IO_TLB_SHIFT))
    }

    /// `slot_addr()`.
    pub fn slot_addr(&self, index: usize) -> PhysAddr {
        PhysAddr(self.start.0 + ((index as u64) << IO_TLB_SHIFT))
    }

    /// The slot holding `addr`, if it lies in the pool.
    pub fn slot_index(&self, addr: PhysAddr) -> Option<usize> {
        let off = addr.offset_from(self.start)?;
        let i = usize::try_from(off >> IO_TLB_SHIFT).ok()?;
        (i < self.nslabs()).then_some(i)
    }

    pub fn rules(&self) -> &'static str {
        self.search.name()
    }

    pub fn find_slots<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        self.search.find_slots(self, hw, c, req)
    }

    /// What the pool holds and saw so far.
    pub fn stats(&self) -> crate::stats::SwiotlbStats {
        // A CPU inside an area's lock holds the table: its figures wait for the unlock.
        let t = self.table.try_borrow().ok();
        crate::stats::SwiotlbStats {
            nslabs: self.nslabs,
            nareas: self.locks.len(),
            bytes: self.end().0 - self.start.0,
            used: t.as_ref().map(|t| t.used()),
            area_locks: t.map(|t| t.areas.iter().map(|a| a.locks).collect()),
        }
    }

    /// Whether nothing is mapped and the free runs are those of a fresh pool.
    pub fn is_pristine(&self) -> bool {
        let t = self.table.borrow();
        t.used() == 0
            && t.slots
                .iter()
                .zip(SlotTable::fresh_lists(self.nslabs()))
                .all(|(s, l)| s.list == l && s.orig_addr == INVALID_PHYS_ADDR)
    }
}

#[cfg(test)]
mod tests;
