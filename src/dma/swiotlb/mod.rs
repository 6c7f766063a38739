//! swiotlb: bounce buffering for devices that cannot reach a buffer (or must not).
//!
//! Kernel counterparts: kernel/dma/swiotlb.c (5.0 onward; areas from 6.0) and its ancestor
//! lib/swiotlb.c (2.6.x–4.x, here as of 3.6 and 3.8).
//!
//! What it models: a pool of 2 KiB slots in simulated physical memory ([`pool`]); a mapping claims
//! a run of slots, records where each slot's bytes came from (`orig_addr`), and copies real bytes
//! between the original buffer and the slots in the directions the kernel does (`swiotlb_bounce`,
//! charged through [`Hw::copy`]). Two front ends drive the same pool:
//!
//! - [`Swiotlb`], the library dma-direct falls back to (`swiotlb_map`, `swiotlb_tbl_map_single`,
//!   `swiotlb_tbl_unmap_single`, `swiotlb_sync_single_for_{cpu,device}`), as kernel/dma/swiotlb.c
//!   has them. [`crate::dma::direct::DmaDirect`] owns one when a pool is set up and does the cache
//!   maintenance around it.
//! - [`x86_2012::Swiotlb2012Ops`], swiotlb as x86's own `dma_map_ops` in 2012 (`swiotlb_dma_ops`,
//!   lib/swiotlb.c): `swiotlb_map_page`, `swiotlb_unmap_page` → `unmap_single`,
//!   `swiotlb_sync_single_for_{cpu,device}` → `swiotlb_sync_single`, `swiotlb_dma_mapping_error`,
//!   with its two address-bookkeeping policies ([`x86_2012::Bookkeeping`]).
//!
//! Which release each choice models (the `swiotlb_rules` policy, [`Release`]; each holds until
//! the next; the slot searches are in [`pool`]):
//!
//! | choice | models |
//! |---|---|
//! | [`Release::Linux3_6`] | lib/swiotlb.c of 3.6 (3.8 changed the bookkeeping below, not the pool): one pool lock, next fit from `io_tlb_index` with a 2-slot stride for mappings larger than a page, copy at map for TO_DEVICE and BIDIRECTIONAL only, unmap frees as many slots as the caller's size says, a 32 KiB overflow buffer handed out when the pool is full (by [`x86_2012::Swiotlb2012Ops`]; through dma-direct, which 3.6 did not have, a full pool is a mapping error) |
//! | [`Release::Linux4_11`] | 4.11: a mapping of a page exactly is page-strided too; map skips its copy under `DMA_ATTR_SKIP_CPU_SYNC` (4.10). x86-64 still runs [`x86_2012::Swiotlb2012Ops`] |
//! | [`Release::Linux5_0`] | 5.0: the same pool, with swiotlb's ops merged into dma-direct: x86-64 bounces through [`Swiotlb::map`] |
//! | [`Release::Linux5_12`] | 5.12: `min_align_mask` (the original's offset kept in the slot; the start aligned to the stride that mask implies, doubled for a page or more; slots compared on its bits above a slot), per-slot `alloc_size` freed at unmap |
//! | [`Release::Linux5_17`], [`Release::Linux5_18`] | the info-leak fix: map copies the original in every direction unless SKIP_CPU_SYNC (5.17), then always (5.18) |
//! | [`Release::Linux6_0`] | 6.0: areas with their own locks and indices, `alloc_align_mask` widening the stride, no comparison for a request with no original; `swiotlb_max_mapping_size` less the slots `min_align_mask` may skip; partial syncs behave as 6.0's `swiotlb_bounce` does, including its refusal of a sync that starts in a later slot below the `min_align_mask` offset. Map failure is `DMA_MAPPING_ERROR` from 5.0 on |
//! | [`Release::Linux6_3`] | 6.3: alignment compared bit by bit against the original under `min_align_mask \| alloc_align_mask` (plus the page offset for a page or more) from the unaligned rotating index, one counted pass per area |
//! | [`Release::Linux6_9`] | 6.9: `alloc_align_mask` aligns the slot itself, with or without an original; page alignment only when neither mask is given; `min_align_mask` compared on the bits the allocation's alignment does not keep |
//! | `swiotlb_addr = virt` ([`x86_2012::VirtAddrs`]) | ≤ 3.6: `io_tlb_start`, `io_tlb_end` and `io_tlb_overflow_buffer` are kernel virtual addresses; every physical address needed on the map, unmap, sync, `is_swiotlb_buffer` and `dma_mapping_error` paths costs an out-of-line `__phys_addr` call, and `is_swiotlb_buffer` is an out-of-line function |
//! | `swiotlb_addr = phys` ([`x86_2012::PhysAddrs`]) | 3.8 onward (Alexander Duyck's series): physical addresses throughout, no translation on those paths, `is_swiotlb_buffer` two compares inlined into its callers |
//!
//! Invariants: every slot claimed by a map is released by the matching unmap; a failed map claims
//! nothing; nothing a caller passes (sizes up to any value, addresses outside the pool, unmaps of
//! something never mapped) panics — a map too large or a full pool is the kernel's mapping error,
//! an unmap or sync of an address outside the pool does nothing.

pub mod pool;
pub mod x86_2012;

pub use pool::{
    Areas, IO_TLB_DEFAULT_SIZE, IO_TLB_MAX_MAPPING, IO_TLB_OVERFLOW, IO_TLB_SEGSIZE, IO_TLB_SHIFT,
    IO_TLB_SIZE, IoTlbMem, SwiotlbError, nr_slots,
};

use super::DmaError;
use crate::device::Device;
use crate::hw::{Hw, SwCost, SwKey};
use crate::mm::physmem::SharedPhysMem;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};
pub use pool::NoSlots;
use pool::{
    AreaSearch6_3, AreaSearch6_9, INVALID_PHYS_ADDR, NextFit3_6, NextFit4_11, PoolCosts,
    SlotRequest, SlotSearch, StrideFit5_12, StrideFit6_0,
};

/// Which release's pool and bounce rules apply: each variant is the release that changed them,
/// and holds until the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Release {
    /// lib/swiotlb.c 3.6–4.10 ([`NextFit3_6`]): page stride above a page; on x86-64 the
    /// library's own `swiotlb_dma_ops`.
    Linux3_6,
    /// 4.11–4.20 ([`NextFit4_11`]): page stride from a page; map skips its copy under
    /// `DMA_ATTR_SKIP_CPU_SYNC` (4.10); still `swiotlb_dma_ops` on x86-64.
    Linux4_11,
    /// 5.0–5.11: the same pool, reached through dma-direct on every architecture (the swiotlb ops
    /// were merged into dma-direct, so x86-64 bounces through `swiotlb_map`).
    Linux5_0,
    /// 5.12–5.16 ([`StrideFit5_12`]): `min_align_mask` (offset kept, slots compared and strided),
    /// per-slot `alloc_size` (unmap frees what map claimed, not what the caller says).
    Linux5_12,
    /// 5.17: map copies the original in every direction (the info-leak fix), unless
    /// `DMA_ATTR_SKIP_CPU_SYNC`.
    Linux5_17,
    /// 5.18–5.19: map copies the original in always, `DMA_ATTR_SKIP_CPU_SYNC` or not.
    Linux5_18,
    /// 6.0–6.2 ([`StrideFit6_0`]): areas with their own locks and indices; `alloc_align_mask`.
    Linux6_0,
    /// 6.3–6.8 ([`AreaSearch6_3`]): bitwise alignment against the original, unaligned start, one
    /// bounded pass per area.
    Linux6_3,
    /// 6.9 on ([`AreaSearch6_9`]): `alloc_align_mask` aligns the slot itself.
    Linux6_9,
}

/// The `swiotlb_rules` policy: which release's pool and bounce rules the swiotlb runs.
impl crate::types::Choice for Release {
    const ALL: &'static [Self] = &[
        Release::Linux3_6,
        Release::Linux4_11,
        Release::Linux5_0,
        Release::Linux5_12,
        Release::Linux5_17,
        Release::Linux5_18,
        Release::Linux6_0,
        Release::Linux6_3,
        Release::Linux6_9,
    ];
    fn name(self) -> &'static str {
        Release::name(self)
    }
}

impl Release {
    /// The rules of kernel `major.minor`: the newest variant not after it.
    pub fn of(major: u32, minor: u32) -> Release {
        use crate::types::Choice;
        Release::ALL
            .iter()
            .copied()
            .rfind(|r| r.since() <= (major, minor))
            .unwrap_or(Release::Linux3_6)
    }

    /// The release that brought these rules.
    pub fn since(self) -> (u32, u32) {
        match self {
            Release::Linux3_6 => (3, 6),
            Release::Linux4_11 => (4, 11),
            Release::Linux5_0 => (5, 0),
            Release::Linux5_12 => (5, 12),
            Release::Linux5_17 => (5, 17),
            Release::Linux5_18 => (5, 18),
            Release::Linux6_0 => (6, 0),
            Release::Linux6_3 => (6, 3),
            Release::Linux6_9 => (6, 9),
        }
    }

    pub(crate) fn search(self) -> SlotSearch {
        match self {
            Release::Linux3_6 => NextFit3_6.into(),
            Release::Linux4_11 | Release::Linux5_0 => NextFit4_11.into(),
            Release::Linux5_12 | Release::Linux5_17 | Release::Linux5_18 => StrideFit5_12.into(),
            Release::Linux6_0 => StrideFit6_0.into(),
            Release::Linux6_3 => AreaSearch6_3.into(),
            Release::Linux6_9 => AreaSearch6_9.into(),
        }
    }

    /// Whether the pool is split into areas with their own locks (6.0).
    pub fn has_areas(self) -> bool {
        self >= Release::Linux6_0
    }

    /// Whether swiotlb is its own `dma_map_ops` (lib/swiotlb.c's `swiotlb_dma_ops`, which x86-64
    /// used until 5.0) rather than a library dma-direct calls.
    pub fn own_dma_ops(self) -> bool {
        self < Release::Linux5_0
    }

    /// Whether a bounce buffer keeps the original's offset under `min_align_mask` (5.12).
    fn keeps_min_align(self) -> bool {
        self >= Release::Linux5_12
    }

    /// Whether unmap frees the slots map recorded (5.12) or as many as the caller's size says.
    fn frees_recorded_size(self) -> bool {
        self >= Release::Linux5_12
    }

    /// Whether `swiotlb_tbl_map_single` copies the original into the slots for `dir`, `attrs`.
    pub fn copies_at_map(self, dir: DmaDirection, attrs: DmaAttrs) -> bool {
        let skip = attrs.contains(DmaAttrs::SKIP_CPU_SYNC);
        let to_device = matches!(dir, DmaDirection::ToDevice | DmaDirection::Bidirectional);
        match self {
            Release::Linux3_6 => to_device,
            Release::Linux4_11 | Release::Linux5_0 | Release::Linux5_12 => to_device && !skip,
            Release::Linux5_17 => !skip,
            Release::Linux5_18 | Release::Linux6_0 | Release::Linux6_3 | Release::Linux6_9 => true,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Release::Linux3_6 => "3.6",
            Release::Linux4_11 => "4.11",
            Release::Linux5_0 => "5.0",
            Release::Linux5_12 => "5.12",
            Release::Linux5_17 => "5.17",
            Release::Linux5_18 => "5.18",
            Release::Linux6_0 => "6.0",
            Release::Linux6_3 => "6.3",
            Release::Linux6_9 => "6.9",
        }
    }
}

/// How the pool is set up (`swiotlb=` on the kernel command line, and the release).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwiotlbConfig {
    /// Pool size in bytes: a whole number of 256 KiB segments.
    pub size: u64,
    pub areas: Areas,
    pub release: Release,
    /// NUMA node the pool is allocated on.
    pub node: u32,
    /// `swiotlb=force`: bounce every streaming mapping.
    pub force: bool,
}

impl Default for SwiotlbConfig {
    fn default() -> Self {
        SwiotlbConfig {
            size: IO_TLB_DEFAULT_SIZE,
            areas: Areas::PossibleCpus(1),
            release: Release::Linux6_9,
            node: 0,
            force: false,
        }
    }
}

/// Which way a bounce copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BounceDir {
    /// Original → slot (map, sync_for_device).
    ToDevice,
    /// Slot → original (unmap, sync_for_cpu).
    FromDevice,
}

/// Software costs of the swiotlb library paths, resolved once.
#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    pool: PoolCosts,
    map: SwCost,
    tbl_map_single: SwCost,
    tbl_unmap_single: SwCost,
    sync_single: SwCost,
    bounce: SwCost,
}

/// One CPU copy in simulated memory: the bytes move, and the copy is charged as `memcpy`.
pub(crate) fn memcpy<H: Hw + ?Sized>(
    hw: &mut H,
    mem: &SharedPhysMem,
    dst: PhysAddr,
    src: PhysAddr,
    len: u64,
) {
    if len == 0 {
        return;
    }
    let back = hw.enter(crate::frame_id!("memcpy"));
    hw.copy(len);
    mem.borrow_mut().copy(dst, src, len);
    hw.leave(back);
}

/// The swiotlb library dma-direct falls back to: one pool (`io_tlb_default_mem`), its areas and
/// locks, which every CPU's calls share, each picking its first area by the CPU it runs on.
#[derive(Debug)]
pub struct Swiotlb {
    pool: IoTlbMem,
    mem: SharedPhysMem,
    release: Release,
    /// `swiotlb=force`.
    pub force: bool,
    costs: Costs,
}

impl Swiotlb {
    /// `swiotlb_init()`: allocate the pool from `mem` as `cfg` says.
    pub fn new<H: Hw + ?Sized>(
        hw: &H,
        mem: SharedPhysMem,
        cfg: &SwiotlbConfig,
    ) -> Result<Swiotlb, SwiotlbError> {
        let pool = IoTlbMem::new(
            &mut mem.borrow_mut(),
            cfg.node,
            cfg.size,
            cfg.areas,
            cfg.release.search(),
        )?;
        Ok(Swiotlb {
            pool,
            mem,
            release: cfg.release,
            force: cfg.force,
            costs: Costs {
                pool: PoolCosts::resolve(hw),
                map: hw.sw_cost(SwKey::SwiotlbMap),
                tbl_map_single: hw.sw_cost(SwKey::SwiotlbTblMapSingle),
                tbl_unmap_single: hw.sw_cost(SwKey::SwiotlbTblUnmapSingle),
                sync_single: hw.sw_cost(SwKey::SwiotlbSyncSingle),
                bounce: hw.sw_cost(SwKey::SwiotlbBounce),
            },
        })
    }

    pub fn pool(&self) -> &IoTlbMem {
        &self.pool
    }

    /// The memory the pool and the buffers live in.
    pub fn mem(&self) -> &SharedPhysMem {
        &self.mem
    }

    pub fn release(&self) -> Release {
        self.release
    }

    /// `is_swiotlb_force_bounce()`.
    pub fn is_force_bounce(&self, dev: &Device) -> bool {
        self.force || dev.force_bounce
    }

    /// `is_swiotlb_buffer()`: two compares, inlined into dma-direct's paths.
    pub fn is_swiotlb_buffer(&self, paddr: PhysAddr) -> bool {
        paddr >= self.pool.start && paddr < self.pool.end()
    }

    /// `swiotlb_max_mapping_size()`: a segment, less (6.0) the slots a `min_align_mask` may skip.
    pub fn max_mapping_size(&self, dev: &Device) -> u64 {
        if self.release >= Release::Linux6_0 {
            IO_TLB_MAX_MAPPING
                - dev
                    .min_align_mask
                    .min(IO_TLB_MAX_MAPPING - 1)
                    .next_multiple_of(IO_TLB_SIZE)
        } else {
            IO_TLB_MAX_MAPPING
        }
    }

    /// `swiotlb_align_offset()`: the part of the original's address a bounce buffer keeps (6.0).
    fn align_offset(&self, dev: &Device, addr: PhysAddr) -> u64 {
        if self.release.keeps_min_align() {
            addr.0 & dev.min_align_mask & (IO_TLB_SIZE - 1)
        } else {
            0
        }
    }

    /// `swiotlb_map()`: bounce `[paddr, paddr + size)` and return the slot's bus address. After the
    /// copy in, and unless the device is coherent or the caller skips CPU sync, `arch_sync` is run
    /// on the slot (dma-direct passes its `arch_sync_dma_for_device`).
    #[allow(clippy::too_many_arguments)]
    pub fn map<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
        arch_sync: impl FnOnce(&mut H, PhysAddr),
    ) -> Result<DmaAddr, DmaError> {
        let back = hw.enter(crate::frame_id!("swiotlb_map"));
        hw.sw(self.costs.map);
        let r = self.map_inner(hw, dev, paddr, size, dir, attrs, arch_sync);
        hw.leave(back);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn map_inner<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        paddr: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
        arch_sync: impl FnOnce(&mut H, PhysAddr),
    ) -> Result<DmaAddr, DmaError> {
        let tlb = self.tbl_map_single(hw, dev, paddr, size, size, 0, dir, attrs)?;
        let dma = DmaAddr(tlb.0);
        if !crate::dma::direct::dma_capable(dev, dma, size) {
            self.tbl_unmap_single(
                hw,
                dev,
                tlb,
                size,
                dir,
                attrs.union(DmaAttrs::SKIP_CPU_SYNC),
            );
            return Err(DmaError::MappingError(format!(
                "{}: swiotlb address {dma}+{size:#x} is above the device's mask {:#x}",
                dev.name, dev.dma_mask
            )));
        }
        if !dev.is_dma_coherent() && !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
            arch_sync(hw, tlb);
        }
        Ok(dma)
    }

    /// `swiotlb_tbl_map_single()`: claim slots for `alloc_size` bytes and copy `mapping_size`
    /// bytes of the original in (in the directions the release copies). Returns the slot address
    /// the data starts at.
    #[allow(clippy::too_many_arguments)]
    pub fn tbl_map_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        orig: PhysAddr,
        mapping_size: u64,
        alloc_size: u64,
        alloc_align_mask: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<PhysAddr, DmaError> {
        let back = hw.enter(crate::frame_id!("swiotlb_tbl_map_single"));
        hw.sw(self.costs.tbl_map_single);
        let r = (|| {
            if mapping_size > alloc_size || mapping_size == 0 {
                return Err(DmaError::MappingError(format!(
                    "{}: invalid swiotlb sizes (mapping {mapping_size:#x} bytes, alloc {alloc_size:#x} bytes)",
                    dev.name
                )));
            }
            let offset = self.align_offset(dev, orig);
            let total = alloc_size.saturating_add(offset);
            let req = SlotRequest {
                orig_addr: Some(orig),
                alloc_size: total,
                alloc_align_mask,
                min_align_mask: if self.release.keeps_min_align() {
                    dev.min_align_mask
                } else {
                    0
                },
                seg_boundary_mask: dev.seg_boundary_mask,
                tbl_dma_addr: self.pool.start.0,
                cpu: hw.cpu() as u32,
            };
            let index = match self.pool.find_slots(hw, &self.costs.pool, &req) {
                Ok(index) => index,
                Err(NoSlots::Full) => {
                    return Err(DmaError::MappingError(format!(
                        "{}: swiotlb buffer is full (sz: {alloc_size} bytes), total {} (slots), used {} (slots)",
                        dev.name,
                        self.pool.nslabs(),
                        self.pool.table.borrow().used()
                    )));
                }
                Err(NoSlots::Spins) => {
                    return Err(DmaError::MappingError(format!(
                        "{}: swiotlb slot search (sz: {alloc_size} bytes) never ends: under {} rules the index steps past its start and the kernel spins with the lock held (the bounded search came in 6.3)",
                        dev.name,
                        self.release.name()
                    )));
                }
            };
            for i in 0..nr_slots(total) as usize {
                self.pool.table.borrow_mut().slots[index + i].orig_addr =
                    PhysAddr(orig.0.wrapping_add((i as u64) << IO_TLB_SHIFT));
            }
            let tlb = PhysAddr(self.pool.slot_addr(index).0 + offset);
            if self.release.copies_at_map(dir, attrs) {
                self.bounce(hw, dev, tlb, mapping_size, BounceDir::ToDevice);
            }
            Ok(tlb)
        })();
        hw.leave(back);
        r
    }

    /// `swiotlb_tbl_unmap_single()`: copy back (FROM_DEVICE, BIDIRECTIONAL, unless the caller
    /// skips CPU sync) and release the slots. An address outside the pool, or slots not in use,
    /// are left alone (the kernel would corrupt its lists; DMA-API debug reports it).
    pub fn tbl_unmap_single<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tlb: PhysAddr,
        mapping_size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_tbl_unmap_single"));
        hw.sw(self.costs.tbl_unmap_single);
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC)
            && matches!(dir, DmaDirection::FromDevice | DmaDirection::Bidirectional)
        {
            self.bounce(hw, dev, tlb, mapping_size, BounceDir::FromDevice);
        }
        self.release_slots(hw, dev, tlb, mapping_size);
        hw.leave(back);
    }

    /// `swiotlb_release_slots()` (6.0: the slot count comes from the recorded `alloc_size`; 3.6:
    /// from the size the caller passes).
    fn release_slots<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tlb: PhysAddr,
        mapping_size: u64,
    ) {
        let offset = self.align_offset(dev, tlb);
        let Some(index) = tlb
            .checked_sub(offset)
            .and_then(|a| self.pool.slot_index(a))
        else {
            return;
        };
        let slot = self.pool.table.borrow().slots[index];
        if slot.list != 0 {
            return;
        }
        let nslots = if self.release.frees_recorded_size() {
            nr_slots(slot.alloc_size + offset)
        } else {
            nr_slots(mapping_size)
        };
        self.pool
            .release(hw, &self.costs.pool, index, nslots as usize);
    }

    /// `swiotlb_sync_single_for_device()`: copy the original in again (TO_DEVICE, BIDIRECTIONAL).
    pub fn sync_single_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tlb: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_single_for_device"));
        hw.sw(self.costs.sync_single);
        if matches!(dir, DmaDirection::ToDevice | DmaDirection::Bidirectional) {
            self.bounce(hw, dev, tlb, size, BounceDir::ToDevice);
        }
        hw.leave(back);
    }

    /// `swiotlb_sync_single_for_cpu()`: copy what the device wrote out (FROM_DEVICE,
    /// BIDIRECTIONAL). The caller has completed cache maintenance on the slot first.
    pub fn sync_single_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tlb: PhysAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_sync_single_for_cpu"));
        hw.sw(self.costs.sync_single);
        if matches!(dir, DmaDirection::FromDevice | DmaDirection::Bidirectional) {
            self.bounce(hw, dev, tlb, size, BounceDir::FromDevice);
        }
        hw.leave(back);
    }

    /// `swiotlb_bounce()`: copy between the slot at `tlb` and the original it stands for, at most
    /// to the end of the mapping.
    fn bounce<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        tlb: PhysAddr,
        size: u64,
        dir: BounceDir,
    ) {
        let back = hw.enter(crate::frame_id!("swiotlb_bounce"));
        hw.sw(self.costs.bounce);
        if let Some((orig, len)) = self.bounce_target(dev, tlb, size) {
            match dir {
                BounceDir::ToDevice => memcpy(hw, &self.mem, tlb, orig, len),
                BounceDir::FromDevice => memcpy(hw, &self.mem, orig, tlb, len),
            }
        }
        hw.leave(back);
    }

    /// Where the bytes at `tlb` came from and how many of `size` lie inside the mapping; `None`
    /// for an address the pool did not hand out (the kernel warns and copies nothing).
    fn bounce_target(&self, dev: &Device, tlb: PhysAddr, size: u64) -> Option<(PhysAddr, u64)> {
        let index = self.pool.slot_index(tlb)?;
        let slot = self.pool.table.borrow().slots[index];
        if slot.orig_addr == INVALID_PHYS_ADDR {
            return None;
        }
        let orig_offset = self.align_offset(dev, slot.orig_addr);
        let tlb_offset = (tlb.0 & (IO_TLB_SIZE - 1)).checked_sub(orig_offset)?;
        if tlb_offset > slot.alloc_size {
            return None;
        }
        Some((
            PhysAddr(slot.orig_addr.0 + tlb_offset),
            size.min(slot.alloc_size - tlb_offset),
        ))
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;
