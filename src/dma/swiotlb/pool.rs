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

use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::mm::physmem::{PhysMem, PhysMemError};
use crate::scatterlist::PAGE_SIZE;
use crate::types::PhysAddr;
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

    /// Give `nslots` slots from `index` back and merge them with the free runs on either side, under
    /// the lock of the area they belong to (`swiotlb_release_slots`; in 3.6 the body of
    /// `swiotlb_tbl_unmap_single`).
    pub fn release<H: Hw + ?Sized>(
        &mut self,
        hw: &mut H,
        c: &PoolCosts,
        index: usize,
        nslots: usize,
    ) {
        let nslots = nslots.min(self.slots.len() - index);
        let a = index / self.area_nslabs;
        spin_lock_irqsave(hw, c);
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

/// Taking the pool or area lock: `_raw_spin_lock_irqsave` is out of line, so it is a frame; the
/// unlock's cost is folded into the same named cost.
pub fn spin_lock_irqsave<H: Hw + ?Sized>(hw: &mut H, c: &PoolCosts) {
    hw.enter("_raw_spin_lock_irqsave");
    hw.sw(c.lock);
    hw.count(Counter::SpinLock, 1);
    hw.leave();
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
        t: &mut SlotTable,
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_search!(self, s => s.find_slots(t, hw, c, req))
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
    spin_lock_irqsave(hw, c);
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        next_fit(t, hw, c, req, PAGE_SIZE + 1)
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        next_fit(t, hw, c, req, PAGE_SIZE)
    }
}

/// Tries the current CPU's area first, then each other in turn (`swiotlb_find_slots()`, 6.0 on).
fn each_area<H: Hw + ?Sized>(
    t: &mut SlotTable,
    hw: &mut H,
    cpu: u32,
    mut one: impl FnMut(&mut SlotTable, &mut H, usize) -> Result<usize, NoSlots>,
) -> Result<usize, NoSlots> {
    let nareas = t.areas.len();
    let start = cpu as usize & (nareas - 1);
    let mut i = start;
    loop {
        match one(t, hw, i) {
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        stride_fit(t, hw, c, req, 0, false)
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(t, hw, req.cpu, |t, hw, a| {
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(t, hw, req.cpu, |t, hw, a| {
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
        t: &mut SlotTable,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        each_area(t, hw, req.cpu, |t, hw, a| {
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

    spin_lock_irqsave(hw, c);
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

    spin_lock_irqsave(hw, c);
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
    pub table: SlotTable,
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
            table: SlotTable::new(nslabs, nareas as usize),
            search,
        })
    }

    pub fn nslabs(&self) -> usize {
        self.table.nslabs()
    }

    pub fn nareas(&self) -> usize {
        self.table.areas.len()
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
        &mut self,
        hw: &mut H,
        c: &PoolCosts,
        req: &SlotRequest,
    ) -> Result<usize, NoSlots> {
        self.search.find_slots(&mut self.table, hw, c, req)
    }

    /// Whether nothing is mapped and the free runs are those of a fresh pool.
    pub fn is_pristine(&self) -> bool {
        self.table.used() == 0
            && self
                .table
                .slots
                .iter()
                .zip(SlotTable::fresh_lists(self.nslabs()))
                .all(|(s, l)| s.list == l && s.orig_addr == INVALID_PHYS_ADDR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::recorder::Recorder;

    const MIB: u64 = 1 << 20;

    fn mem() -> PhysMem {
        PhysMem::single(PhysAddr(0x8000_0000), 256 * MIB)
    }

    fn pool(size: u64, areas: Areas, search: SlotSearch) -> IoTlbMem {
        IoTlbMem::new(&mut mem(), 0, size, areas, search).unwrap()
    }

    fn req(size: u64) -> SlotRequest {
        SlotRequest {
            orig_addr: Some(PhysAddr(0x1_0000_0000)),
            alloc_size: size,
            alloc_align_mask: 0,
            min_align_mask: 0,
            seg_boundary_mask: u64::from(u32::MAX),
            tbl_dma_addr: 0x8000_0000,
            cpu: 0,
        }
    }

    fn find(p: &mut IoTlbMem, r: &mut Recorder, q: &SlotRequest) -> Option<usize> {
        p.find_slots(r, &PoolCosts::default(), q).ok()
    }

    fn release(p: &mut IoTlbMem, r: &mut Recorder, index: usize, size: u64) {
        p.table
            .release(r, &PoolCosts::default(), index, nr_slots(size) as usize);
    }

    #[test]
    fn fresh_pool_free_runs_count_down_per_segment() {
        let p = pool(
            IO_TLB_DEFAULT_SIZE,
            Areas::Exact(1),
            SlotSearch::from(NextFit3_6),
        );
        assert_eq!(p.nslabs(), 32768);
        assert_eq!(p.table.slots[0].list, 128);
        assert_eq!(p.table.slots[127].list, 1);
        assert_eq!(p.table.slots[128].list, 128);
        assert_eq!(p.end().0 - p.start.0, IO_TLB_DEFAULT_SIZE);
        assert!(p.is_pristine());
    }

    #[test]
    fn bad_configurations_are_errors() {
        let mut m = mem();
        let e = |r: Result<IoTlbMem, SwiotlbError>| r.unwrap_err();
        assert_eq!(
            e(IoTlbMem::new(
                &mut m,
                0,
                MIB + 4096,
                Areas::Exact(1),
                SlotSearch::from(NextFit3_6)
            )),
            SwiotlbError::BadSize(MIB + 4096)
        );
        assert_eq!(
            e(IoTlbMem::new(
                &mut m,
                0,
                0,
                Areas::Exact(1),
                SlotSearch::from(NextFit3_6)
            )),
            SwiotlbError::BadSize(0)
        );
        assert_eq!(
            e(IoTlbMem::new(
                &mut m,
                0,
                MIB,
                Areas::Exact(3),
                SlotSearch::from(AreaSearch6_3)
            )),
            SwiotlbError::AreasNotPowerOfTwo(3)
        );
        // 1 MiB is 4 segments: 8 areas cannot each get a whole one.
        assert!(matches!(
            e(IoTlbMem::new(
                &mut m,
                0,
                MIB,
                Areas::Exact(8),
                SlotSearch::from(AreaSearch6_3)
            )),
            SwiotlbError::TooManyAreas { nareas: 8, .. }
        ));
        assert_eq!(
            e(IoTlbMem::new(
                &mut m,
                0,
                MIB,
                Areas::Exact(2),
                SlotSearch::from(NextFit3_6)
            )),
            SwiotlbError::NoAreasBefore6_0(2)
        );
        assert!(matches!(
            e(IoTlbMem::new(
                &mut m,
                0,
                512 * MIB,
                Areas::Exact(1),
                SlotSearch::from(NextFit3_6)
            )),
            SwiotlbError::NoMemory(_)
        ));
        assert_eq!(m.allocations(), 0, "a refused pool allocates nothing");
    }

    #[test]
    fn possible_cpus_round_up_to_a_power_of_two() {
        assert_eq!(Areas::PossibleCpus(6).resolve(), Ok(8));
        assert_eq!(Areas::PossibleCpus(0).resolve(), Ok(1));
        assert_eq!(Areas::PossibleCpus(8).resolve(), Ok(8));
        let p = pool(
            4 * MIB,
            Areas::PossibleCpus(3),
            SlotSearch::from(AreaSearch6_3),
        );
        assert_eq!(p.nareas(), 4);
        assert_eq!(p.table.area_nslabs, 512);
    }

    #[test]
    fn next_fit_3_6_strides_two_slots_above_a_page_only() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
        let mut r = Recorder::new(64);
        // One slot: the rotating index moves to 1.
        assert_eq!(find(&mut p, &mut r, &req(100)), Some(0));
        // Exactly a page is not "larger than a page": stride 1, starts at slot 1.
        assert_eq!(find(&mut p, &mut r, &req(4096)), Some(1));
        // Larger than a page: the index (3) is aligned up to the stride: slot 4.
        assert_eq!(find(&mut p, &mut r, &req(4097)), Some(4));
        assert_eq!(p.table.areas[0].index, 7);
        // The run in front of the allocation was shortened to end at it.
        assert_eq!(p.table.slots[3].list, 1);
        assert_eq!(r.count_of(Counter::SpinLock), 3);
    }

    #[test]
    fn allocations_never_span_a_segment() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
        let mut r = Recorder::new(64);
        assert_eq!(find(&mut p, &mut r, &req(100 * IO_TLB_SIZE)), Some(0));
        // 50 slots do not fit in the 28 left in segment 0: the search walks on to segment 1.
        assert_eq!(find(&mut p, &mut r, &req(50 * IO_TLB_SIZE)), Some(128));
        // The largest mapping is a whole segment; one slot more never fits anywhere.
        assert_eq!(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING)), Some(256));
        assert_eq!(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING + 1)), None);
    }

    #[test]
    fn device_segment_boundary_is_respected() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
        let mut r = Recorder::new(64);
        let mut q = req(20 * IO_TLB_SIZE);
        q.seg_boundary_mask = 64 * 1024 - 1; // 32-slot windows of the bus address space
        assert_eq!(find(&mut p, &mut r, &q), Some(0));
        // Slots 20..40 would cross the 32-slot boundary: the next fit is slot 32.
        assert_eq!(find(&mut p, &mut r, &q), Some(32));
        for s in 20..32 {
            assert_ne!(p.table.slots[s].list, 0, "slot {s} skipped, still free");
        }
    }

    #[test]
    fn rotating_index_wraps_to_the_start() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
        let mut r = Recorder::new(64);
        let n = p.nslabs();
        // Fill all but the last 4 slots of the pool, then free the first segment.
        let mut idx = Vec::new();
        for _ in 0..(n / 128 - 1) {
            idx.push(find(&mut p, &mut r, &req(IO_TLB_MAX_MAPPING)).unwrap());
        }
        let tail = find(&mut p, &mut r, &req(124 * IO_TLB_SIZE)).unwrap();
        assert_eq!(tail, n - 128);
        assert_eq!(p.table.areas[0].index, n - 4);
        release(&mut p, &mut r, idx[0], IO_TLB_MAX_MAPPING);
        // 8 slots do not fit in the 4 at the end: the search wraps and takes slot 0.
        assert_eq!(find(&mut p, &mut r, &req(8 * IO_TLB_SIZE)), Some(0));
        assert_eq!(p.table.areas[0].index, 8);
    }

    #[test]
    fn exhaustion_and_release_restore_a_fresh_pool() {
        // 6 KiB is more than a page: 3.6 aligns each start up to its 2-slot stride and 6.0 page-
        // aligns the slot, so each mapping of 3 slots leaves the 4th unused: 32 per segment.
        for (search, per_segment) in [
            (SlotSearch::from(NextFit3_6), 32),
            (SlotSearch::from(AreaSearch6_3), 32),
        ] {
            let mut p = pool(MIB, Areas::Exact(1), search);
            let mut r = Recorder::new(64);
            let mut got = Vec::new();
            while let Some(i) = find(&mut p, &mut r, &req(3 * IO_TLB_SIZE)) {
                got.push(i);
            }
            assert_eq!(got.len(), 4 * per_segment, "{}", p.rules());
            assert_eq!(p.table.used(), 4 * per_segment * 3);
            // Free in a scrambled order; the runs must merge back exactly.
            got.sort_by_key(|&i| (i * 7919) % 1031);
            for i in got {
                release(&mut p, &mut r, i, 3 * IO_TLB_SIZE);
            }
            assert!(p.is_pristine(), "{}", p.rules());
        }
    }

    #[test]
    fn areas_start_at_the_cpus_area_and_fall_back_under_their_own_locks() {
        let mut p = pool(MIB, Areas::Exact(4), SlotSearch::from(AreaSearch6_3));
        assert_eq!(p.table.area_nslabs, 128);
        let mut r = Recorder::new(64);
        let mut q = req(IO_TLB_MAX_MAPPING);
        q.cpu = 6; // 6 & 3 = area 2
        assert_eq!(find(&mut p, &mut r, &q), Some(256));
        assert_eq!(r.count_of(Counter::SpinLock), 1);
        // Area 2 is full: its lock is taken, the search gives up at once, area 3 is next.
        r.reset();
        assert_eq!(find(&mut p, &mut r, &q), Some(384));
        assert_eq!(r.count_of(Counter::SpinLock), 2);
        // Areas 2, 3 full: wraps to area 0.
        r.reset();
        assert_eq!(find(&mut p, &mut r, &q), Some(0));
        assert_eq!(r.count_of(Counter::SpinLock), 3);
        assert_eq!(p.table.areas[2].used, 128);
        q.cpu = 1;
        assert_eq!(find(&mut p, &mut r, &q), Some(128));
        r.reset();
        assert_eq!(find(&mut p, &mut r, &q), None);
        assert_eq!(r.count_of(Counter::SpinLock), 4, "every area tried once");
    }

    #[test]
    fn min_align_mask_keeps_the_low_bits_of_the_original() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(AreaSearch6_3));
        let mut r = Recorder::new(64);
        // NVMe-style 4 KiB - 1 mask; original at page offset 0x800 + 0x10: the slot must sit at
        // an odd slot (bit 11 set) and the data 0x10 into it.
        let mut q = req(0);
        q.min_align_mask = 0xfff;
        q.orig_addr = Some(PhysAddr(0x1_0000_0810));
        q.alloc_size = 100 + 0x10;
        let i = find(&mut p, &mut r, &q).unwrap();
        assert_eq!(i % 2, 1);
        assert_eq!(p.table.slots[i].alloc_size, 100);
    }

    #[test]
    fn page_or_larger_allocations_are_page_aligned_in_6_3() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(AreaSearch6_3));
        let mut r = Recorder::new(64);
        assert_eq!(find(&mut p, &mut r, &req(100)), Some(0));
        // A page exactly: 6.3 page-aligns (>= PAGE_SIZE), so slot 1 is skipped.
        assert_eq!(find(&mut p, &mut r, &req(4096)), Some(2));
        // With an original, a 16 KiB alloc_align_mask makes the slot share its low 14 bits.
        let mut q = req(4096);
        q.alloc_align_mask = 0x3fff;
        assert_eq!(find(&mut p, &mut r, &q), Some(8));
        // 6.3 checks alignment only against an original: with none (swiotlb_alloc), the search
        // takes the first fit at the rotating index, stride or not.
        q.orig_addr = None;
        assert_eq!(find(&mut p, &mut r, &q), Some(10));
    }

    #[test]
    fn search_steps_come_from_the_loop() {
        let mut p = pool(MIB, Areas::Exact(1), SlotSearch::from(NextFit3_6));
        let c = PoolCosts {
            lock: SwCost(1),
            search_step: SwCost(1000),
            slot_update: SwCost(0),
        };
        let mut m = crate::hw::model::Model::new(Default::default());
        // First fit at the rotating index: one lock, one step.
        p.find_slots(&mut m, &c, &req(IO_TLB_SIZE)).unwrap();
        assert_eq!(m.now_ps(), 1 + 1000);
    }

    /// Every release's search, fresh, in a 1 MiB pool of one area.
    fn searches() -> Vec<(&'static str, SlotSearch)> {
        vec![
            ("3.6", SlotSearch::from(NextFit3_6)),
            ("4.11", SlotSearch::from(NextFit4_11)),
            ("5.12", SlotSearch::from(StrideFit5_12)),
            ("6.0", SlotSearch::from(StrideFit6_0)),
            ("6.3", SlotSearch::from(AreaSearch6_3)),
            ("6.9", SlotSearch::from(AreaSearch6_9)),
        ]
    }

    /// Run one search with each loop iteration costing 1 ps and nothing else costing anything:
    /// the clock then reads the iterations.
    fn steps(p: &mut IoTlbMem, q: &SlotRequest) -> (Result<usize, NoSlots>, u64) {
        let c = PoolCosts {
            lock: SwCost(0),
            search_step: SwCost(1),
            slot_update: SwCost(0),
        };
        let mut m = crate::hw::model::Model::new(Default::default());
        let r = p.find_slots(&mut m, &c, q);
        (r, m.now_ps())
    }

    /// (slot, search iterations) of a second request after a first small one moved the index
    /// to slot 1, per release.
    fn after_one_small(q: &SlotRequest) -> Vec<(&'static str, Result<usize, NoSlots>, u64)> {
        searches()
            .into_iter()
            .map(|(name, search)| {
                let mut p = pool(MIB, Areas::Exact(1), search);
                assert_eq!(steps(&mut p, &req(100)).0, Ok(0));
                let (r, n) = steps(&mut p, q);
                (name, r, n)
            })
            .collect()
    }

    #[test]
    fn a_page_exactly_is_page_strided_from_4_11_and_6_0_aligns_the_start_where_6_3_steps() {
        // Index 1, a page: 3.6 strides only above a page (slot 1); 4.11 on page-align. 5.12 and
        // 6.0 align the start up to the stride (one look); 6.3 starts unaligned at slot 1 and
        // steps one slot to the aligned 2; 6.9 likewise against the slot's own alignment.
        assert_eq!(
            after_one_small(&req(4096)),
            vec![
                ("3.6", Ok(1), 1),
                ("4.11", Ok(2), 1),
                ("5.12", Ok(2), 1),
                ("6.0", Ok(2), 1),
                ("6.3", Ok(2), 2),
                ("6.9", Ok(2), 2),
            ]
        );
    }

    #[test]
    fn page_stride_compares_the_original_only_in_6_3_to_6_8() {
        // A page from an original at a half-page offset, no min_align_mask: before 6.3 the page
        // alignment is a stride of the slot, never compared with the original (slot 0); 6.3
        // compares bit 11 bit by bit and needs an odd slot (slot 1); 6.9 aligns the slot again.
        let mut q = req(4096);
        q.orig_addr = Some(PhysAddr(0x1_0000_0800));
        let got: Vec<_> = searches()
            .into_iter()
            .map(|(name, search)| {
                let mut p = pool(MIB, Areas::Exact(1), search);
                (name, steps(&mut p, &q))
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("3.6", (Ok(0), 1)),
                ("4.11", (Ok(0), 1)),
                ("5.12", (Ok(0), 1)),
                ("6.0", (Ok(0), 1)),
                ("6.3", (Ok(1), 2)),
                ("6.9", (Ok(0), 1)),
            ]
        );
    }

    #[test]
    fn with_no_original_6_0_still_honours_the_stride() {
        // swiotlb_alloc-style: no original, a page with a 16 KiB alloc_align_mask, index at 1.
        // 5.12 knows no alloc_align_mask (page stride: slot 2); 6.0 strides by 8 from the
        // aligned start (slot 8, one look); 6.3 compares nothing without an original and takes
        // slot 1; 6.9 checks the slot's own alignment and steps to 8.
        let mut q = req(4096);
        q.orig_addr = None;
        q.alloc_align_mask = 0x3fff;
        let got = after_one_small(&q);
        assert_eq!(
            got[2..],
            [
                ("5.12", Ok(2), 1),
                ("6.0", Ok(8), 1),
                ("6.3", Ok(1), 1),
                ("6.9", Ok(8), 8),
            ]
        );
    }

    #[test]
    fn min_align_mask_strides_the_same_from_5_12_and_is_unknown_before() {
        // NVMe's 4 KiB - 1 mask, original at 0x810: the slot must be odd, the data 0x10 into it.
        let mut q = req(100 + 0x10);
        q.min_align_mask = 0xfff;
        q.orig_addr = Some(PhysAddr(0x1_0000_0810));
        let got: Vec<_> = searches()
            .into_iter()
            .map(|(name, search)| {
                let mut p = pool(MIB, Areas::Exact(1), search);
                let r = steps(&mut p, &q);
                (name, r, p.table.slots[r.0.unwrap()].alloc_size)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("3.6", (Ok(0), 1), 0x10 + 100),
                ("4.11", (Ok(0), 1), 0x10 + 100),
                ("5.12", (Ok(1), 2), 100),
                ("6.0", (Ok(1), 2), 100),
                ("6.3", (Ok(1), 2), 100),
                ("6.9", (Ok(1), 2), 100),
            ]
        );
    }

    #[test]
    fn a_search_that_steps_off_its_stride_spins_until_6_3() {
        // Every odd slot in use, every even one free: a request that must start at an odd slot
        // (min_align_mask bit 11 set in the original) finds nothing. From index 2, 5.12–6.2 step
        // to slot 3 and then by 2 through the odd slots, wrap to 0, step to 1, and go on through
        // the odd slots for ever, never meeting the start (2) again: the kernel spins with the
        // lock held (the model stops after a pass: 512 looks). 6.3 gives up after one counted
        // pass: slot 2, the 255 odd slots above it, slot 0.
        let mut q = req(100);
        q.min_align_mask = 0xfff;
        q.orig_addr = Some(PhysAddr(0x1_0000_0800));
        for (name, search, want) in [
            (
                "5.12",
                SlotSearch::from(StrideFit5_12),
                (Err(NoSlots::Spins), 512),
            ),
            (
                "6.0",
                SlotSearch::from(StrideFit6_0),
                (Err(NoSlots::Spins), 512),
            ),
            (
                "6.3",
                SlotSearch::from(AreaSearch6_3),
                (Err(NoSlots::Full), 257),
            ),
            (
                "6.9",
                SlotSearch::from(AreaSearch6_9),
                (Err(NoSlots::Full), 257),
            ),
        ] {
            let mut p = pool(MIB, Areas::Exact(1), search);
            for i in 0..p.nslabs() {
                p.table.slots[i].list = if i % 2 == 0 { 1 } else { 0 };
            }
            p.table.areas[0].used = p.nslabs() / 2;
            p.table.areas[0].index = 2;
            assert_eq!(steps(&mut p, &q), want, "{name}");
        }
    }
}
