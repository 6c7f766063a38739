//! dma-direct: DMA without an IOMMU, bus address = physical address.
//!
//! Kernel counterpart: kernel/dma/direct.c and kernel/dma/direct.h — `dma_direct_map_sg`,
//! `dma_direct_unmap_sg`, `dma_direct_sync_sg_for_{device,cpu}` (out of line, so they appear as
//! frames) and the inline single-region helpers `dma_direct_map_phys`, `dma_direct_unmap_phys`,
//! `dma_direct_sync_single_for_{device,cpu}` (inline, so their instructions are charged to the
//! caller's frame, as a profiler would show them).
//!
//! What it models: the bus-address check against the device's mask (`dma_capable`), cache
//! maintenance for non-coherent devices through the arch layer, `DMA_ATTR_SKIP_CPU_SYNC`, nothing at
//! all for coherent devices, and where completion is waited for: each path under its own
//! [`SyncPolicy`] from the release's [`SyncPaths`]. In 7.1 the scatter-gather calls batch —
//! map_sg, unmap_sg and both sync_sg: they issue every entry and end with one
//! `arch_sync_dma_flush()` when the list had an entry and the device is non-coherent (map_sg and
//! unmap_sg under `DMA_ATTR_SKIP_CPU_SYNC` too, where nothing was issued), and a failed map_sg
//! unwinds through unmap_sg, so its error path ends with that one flush as well.
//! `swiotlb_map()` flushes its slot's clean at once even inside a batched map_sg. A buffer the device
//! cannot reach, or any buffer when bouncing is forced (`swiotlb=force`, or the device's
//! `force_bounce`), goes through the swiotlb pool when one is set up ([`DmaDirect::with_swiotlb`])
//! and fails with a mapping error otherwise. For a bounced buffer, cache maintenance applies to the
//! slot, not the original: to the device, the copy into the slot comes first and the clean after it;
//! to the CPU, the invalidate comes first and has *completed* before the copy out reads the slot —
//! with batched sync that takes an `arch_sync_dma_flush()` before each copy (the 7.1 review's
//! requirement), so a stale line can never be copied.
//!
//! Invariants: map_sg either maps every entry or unmaps what it mapped (with SKIP_CPU_SYNC) and
//! fails; when any call returns, all maintenance it issued has completed; every swiotlb slot a map
//! claimed is released by the matching unmap.
//!
//! dma-direct never reaches an SMMU, so its entry points are inherent methods on the CPU side of
//! the hardware interface ([`Hw`]), callable with the host backend; the [`DmaMapOps`] impl, which
//! takes a [`DeviceHw`] like every implementation, forwards to them.

use super::swiotlb::Swiotlb;
use super::sync_policy::{Batched, FlushEach, PerEntry, SyncPaths, SyncPolicy, SyncRule};
use super::{DmaError, DmaMapOps};
use crate::arch::{ArchDma, ArchOps, arch_ops_dispatch};
use crate::device::Device;
use crate::hw::{DeviceHw, Hw, SwCost, SwKey};
use crate::scatterlist::SgTable;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// Software costs dma-direct charges, resolved once from the backend.
#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    map_phys: SwCost,
    unmap_phys: SwCost,
    sync_single: SwCost,
    sg_next: SwCost,
    /// An sg walk's step and the inline map or unmap helper run back to back, in one frame:
    /// one charge of both per entry.
    sg_map_phys: SwCost,
    sg_unmap_phys: SwCost,
}

impl Costs {
    fn new(hw: &dyn Hw) -> Costs {
        let map_phys = hw.sw_cost(SwKey::DmaDirectMapPhys);
        let unmap_phys = hw.sw_cost(SwKey::DmaDirectUnmapPhys);
        let sg_next = hw.sw_cost(SwKey::SgNext);
        Costs {
            map_phys,
            unmap_phys,
            sync_single: hw.sw_cost(SwKey::DmaDirectSyncSingle),
            sg_next,
            sg_map_phys: SwCost(sg_next.0.saturating_add(map_phys.0)),
            sg_unmap_phys: SwCost(sg_next.0.saturating_add(unmap_phys.0)),
        }
    }
}

#[derive(Debug)]
pub struct DmaDirect {
    arch: ArchOps,
    st: State,
}

/// dma-direct apart from its arch implementation. A call borrows the two separately, so that a
/// scatter-gather walk holds the implementation and the sync rule it matched once
/// ([`with_arch_and_rule`]) while its entries change the rest (a swiotlb slot).
#[derive(Debug)]
struct State {
    sync: SyncPaths,
    costs: Costs,
    swiotlb: Option<Swiotlb>,
}

/// `$body` with `$arch` bound to the implementation `$ops` holds and `$sync` to `$rule`'s policy,
/// both matched here once: a walk over a list's entries then reaches them with static calls, not
/// a match per entry. (`$body` is compiled once per pair.)
macro_rules! with_arch_and_rule {
    ($ops:expr, $rule:expr, |$arch:ident, $sync:ident| $body:expr) => {
        match $rule {
            SyncRule::PerEntry => {
                let $sync = PerEntry;
                arch_ops_dispatch!($ops, $arch => $body)
            }
            SyncRule::FlushEach => {
                let $sync = FlushEach;
                arch_ops_dispatch!($ops, $arch => $body)
            }
            SyncRule::Batched => {
                let $sync = Batched;
                arch_ops_dispatch!($ops, $arch => $body)
            }
        }
    };
}

/// `dma_capable()`: the whole buffer must sit below the device's mask.
pub fn dma_capable(dev: &Device, addr: DmaAddr, size: u64) -> bool {
    match size.checked_sub(1).and_then(|s| addr.checked_add(s)) {
        Some(end) => end.0 <= dev.dma_mask,
        None => size == 0 && addr.0 <= dev.dma_mask,
    }
}

impl DmaDirect {
    /// `sync` is the release's [`SyncPaths`] (a [`crate::dma::sync_policy::SyncKind`] or one boxed
    /// rule for every path converts into it).
    pub fn new(hw: &dyn Hw, arch: impl Into<ArchOps>, sync: impl Into<SyncPaths>) -> DmaDirect {
        DmaDirect {
            arch: arch.into(),
            st: State {
                sync: sync.into(),
                costs: Costs::new(hw),
                swiotlb: None,
            },
        }
    }

    /// dma-direct with a swiotlb pool to fall back to (`swiotlb_init()` having run).
    pub fn with_swiotlb(mut self, swiotlb: Swiotlb) -> DmaDirect {
        self.st.swiotlb = Some(swiotlb);
        self
    }

    /// The architecture's cache maintenance these ops run.
    pub fn arch(&self) -> &ArchOps {
        &self.arch
    }

    pub fn swiotlb(&self) -> Option<&Swiotlb> {
        self.st.swiotlb.as_ref()
    }

    pub fn swiotlb_mut(&mut self) -> Option<&mut Swiotlb> {
        self.st.swiotlb.as_mut()
    }

    pub fn sync_paths(&self) -> SyncPaths {
        self.st.sync
    }
}

impl State {
    /// `phys_to_dma()`: identity until a device has a DMA range offset.
    fn phys_to_dma(&self, _dev: &Device, phys: PhysAddr) -> DmaAddr {
        DmaAddr(phys.0)
    }

    fn dma_to_phys(&self, _dev: &Device, addr: DmaAddr) -> PhysAddr {
        PhysAddr(addr.0)
    }

    /// `swiotlb_map()` from dma-direct, with `arch_sync_dma_for_device()` on the slot under the
    /// single-region rule: swiotlb.c flushes at once, whichever path called it.
    #[allow(clippy::too_many_arguments)]
    fn swiotlb_map<H: Hw + ?Sized, A: ArchDma>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let State { sync, swiotlb, .. } = self;
        let sync = sync.single;
        let Some(swiotlb) = swiotlb.as_ref() else {
            return Err(DmaError::MappingError(format!(
                "{}: no swiotlb is set up",
                dev.name
            )));
        };
        swiotlb.map(hw.as_dyn_hw(), dev, phys, size, dir, attrs, |hw, tlb| {
            sync.for_device(hw, arch, tlb, size, dir)
        })
    }

    /// `dma_direct_map_phys()` without the closing flush: the part shared by map_page and map_sg.
    /// Inline in the kernel, so its instructions are charged with its caller's.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn map_phys<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
        sync: S,
    ) -> Result<DmaAddr, DmaError> {
        let addr = self.phys_to_dma(dev, phys);
        if self
            .swiotlb
            .as_ref()
            .is_some_and(|s| s.is_force_bounce(dev))
        {
            return self.swiotlb_map(hw, arch, dev, phys, size, dir, attrs);
        }
        if !dma_capable(dev, addr, size) {
            if self.swiotlb.is_some() {
                return self.swiotlb_map(hw, arch, dev, phys, size, dir, attrs);
            }
            return Err(DmaError::MappingError(format!(
                "{}: bus address {addr}+{size:#x} is above the device's mask {:#x} and no swiotlb is set up",
                dev.name, dev.dma_mask
            )));
        }
        if !dev.is_dma_coherent() && !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
            sync.for_device(hw, arch, phys, size, dir);
        }
        Ok(addr)
    }

    /// `dma_direct_unmap_phys()` without the closing flush; charged with its caller, as map_phys.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn unmap_phys<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
        sync: S,
    ) {
        let phys = self.dma_to_phys(dev, addr);
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
            self.sync_single_for_cpu_nowait(hw, arch, dev, addr, size, dir, sync);
        }
        if let Some(s) = self.swiotlb.as_ref()
            && s.is_swiotlb_buffer(phys)
        {
            // The copy out, if any, was the sync above.
            s.tbl_unmap_single(
                hw.as_dyn_hw(),
                dev,
                phys,
                size,
                dir,
                attrs.union(DmaAttrs::SKIP_CPU_SYNC),
            );
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn sync_single_for_cpu_nowait<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        sync: S,
    ) {
        let paddr = self.dma_to_phys(dev, addr);
        if !dev.is_dma_coherent() {
            sync.for_cpu(hw, arch, paddr, size, dir);
        }
        if let Some(s) = self.swiotlb.as_ref()
            && s.is_swiotlb_buffer(paddr)
        {
            let copies_out = matches!(dir, DmaDirection::FromDevice | DmaDirection::Bidirectional);
            if copies_out && !dev.is_dma_coherent() {
                // The invalidate of the slot must have completed before the CPU reads it: per-entry
                // sync already waited; batched sync waits here rather than at the end of the call.
                sync.end_of_call(hw, arch);
            }
            s.sync_single_for_cpu(hw.as_dyn_hw(), dev, paddr, size, dir);
        }
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn sync_single_for_device_nowait<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        sync: S,
    ) {
        let paddr = self.dma_to_phys(dev, addr);
        // Copy into the slot first: the clean below must push the copied bytes, not stale ones.
        if let Some(s) = self.swiotlb.as_ref()
            && s.is_swiotlb_buffer(paddr)
        {
            s.sync_single_for_device(hw.as_dyn_hw(), dev, paddr, size, dir);
        }
        if !dev.is_dma_coherent() {
            sync.for_device(hw, arch, paddr, size, dir);
        }
    }

    fn end_of_call<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        sync: S,
    ) {
        if !dev.is_dma_coherent() {
            sync.end_of_call(hw, arch);
        }
    }

    /// `dma_direct_map_sg()`'s walk: each entry mapped under `sync` (the map_sg/unmap_sg rule),
    /// then one end-of-call flush; on a failure, what was mapped is unmapped (with
    /// `DMA_ATTR_SKIP_CPU_SYNC`: the CPU never touched it) and the list has no entries mapped.
    #[allow(clippy::too_many_arguments)]
    fn map_entries<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy + Copy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
        sync: S,
    ) -> Result<usize, DmaError> {
        let mut failed = None;
        for (i, e) in sgt.entries.iter_mut().enumerate() {
            let (phys, len) = (e.phys(), u64::from(e.length));
            hw.sw(self.costs.sg_map_phys);
            let r = self.map_phys(hw, arch, dev, phys, len, dir, attrs, sync);
            match r {
                Ok(addr) => {
                    e.dma_address = addr;
                    e.dma_length = e.length;
                }
                Err(err) => {
                    failed = Some((i, err));
                    break;
                }
            }
        }
        match failed {
            None => {
                if !sgt.entries.is_empty() {
                    self.end_of_call(hw, arch, dev, sync);
                }
                sgt.nents = sgt.entries.len();
                Ok(sgt.nents)
            }
            Some((i, err)) => {
                // Undo what was mapped through unmap_sg; the CPU never touched it, so skip the
                // maintenance. Its closing flush also completes what the entries before `i`
                // issued.
                let skip = attrs.union(DmaAttrs::SKIP_CPU_SYNC);
                self.unmap_entries(hw, arch, dev, sgt, i, dir, skip, sync);
                sgt.nents = 0;
                Err(err)
            }
        }
    }

    /// `dma_direct_unmap_sg()` over `entries`: each entry's unmap issued under `sync` (the
    /// map_sg/unmap_sg rule), then one end-of-call flush when there was an entry (the kernel's
    /// `need_sync`, which does not look at `attrs`).
    #[allow(clippy::too_many_arguments)]
    fn unmap_entries<H: Hw + ?Sized, A: ArchDma, S: SyncPolicy + Copy>(
        &self,
        hw: &mut H,
        arch: &A,
        dev: &Device,
        sgt: &mut SgTable,
        n: usize,
        dir: DmaDirection,
        attrs: DmaAttrs,
        sync: S,
    ) {
        for e in &mut sgt.entries[..n] {
            hw.sw(self.costs.sg_unmap_phys);
            let len = u64::from(e.dma_length);
            self.unmap_phys(hw, arch, dev, e.dma_address, len, dir, attrs, sync);
            e.dma_address = DmaAddr::MAPPING_ERROR;
            e.dma_length = 0;
        }
        if n > 0 {
            self.end_of_call(hw, arch, dev, sync);
        }
    }
}

/// The DMA API's entry points, on any backend: dma-direct drives no SMMU, so it needs only the CPU
/// side of the hardware interface, and the host benchmarks call these with the host backend. The
/// [`DmaMapOps`] impl below forwards to them. A path of one region reaches its arch and sync rule
/// through their enums; a scatter-gather walk matches them once ([`with_arch_and_rule`]).
impl DmaDirect {
    pub fn map_page<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let DmaDirect { arch, st } = self;
        let sync = st.sync.single;
        hw.sw(st.costs.map_phys);
        let r = st.map_phys(hw, arch, dev, phys, size, dir, attrs, sync);
        if r.is_ok() {
            st.end_of_call(hw, arch, dev, sync);
        }
        r
    }

    pub fn unmap_page<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        let DmaDirect { arch, st } = self;
        let sync = st.sync.single;
        hw.sw(st.costs.unmap_phys);
        st.unmap_phys(hw, arch, dev, addr, size, dir, attrs, sync);
        st.end_of_call(hw, arch, dev, sync);
    }

    pub fn map_sg<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        let back = hw.enter(crate::frame_id!("dma_direct_map_sg"));
        let DmaDirect { arch, st } = self;
        let r = with_arch_and_rule!(arch, st.sync.direct_sg, |a, sync| {
            st.map_entries(hw, a, dev, sgt, dir, attrs, sync)
        });
        hw.leave(back);
        r
    }

    pub fn unmap_sg<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        let back = hw.enter(crate::frame_id!("dma_direct_unmap_sg"));
        let DmaDirect { arch, st } = self;
        let n = sgt.entries.len();
        with_arch_and_rule!(arch, st.sync.direct_sg, |a, sync| {
            st.unmap_entries(hw, a, dev, sgt, n, dir, attrs, sync)
        });
        sgt.nents = 0;
        hw.leave(back);
    }

    pub fn sync_single_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let DmaDirect { arch, st } = self;
        hw.sw(st.costs.sync_single);
        let sync = st.sync.single;
        st.sync_single_for_cpu_nowait(hw, arch, dev, addr, size, dir, sync);
        st.end_of_call(hw, arch, dev, sync);
    }

    pub fn sync_single_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        let DmaDirect { arch, st } = self;
        hw.sw(st.costs.sync_single);
        let sync = st.sync.single;
        st.sync_single_for_device_nowait(hw, arch, dev, addr, size, dir, sync);
        st.end_of_call(hw, arch, dev, sync);
    }

    pub fn sync_sg_for_cpu<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("dma_direct_sync_sg_for_cpu"));
        let DmaDirect { arch, st } = self;
        let sync = st.sync.direct_sync_sg;
        for e in &sgt.entries[..sgt.nents] {
            hw.sw(st.costs.sg_next);
            hw.sw(st.costs.sync_single);
            let len = u64::from(e.dma_length);
            st.sync_single_for_cpu_nowait(hw, arch, dev, e.dma_address, len, dir, sync);
        }
        st.end_of_call(hw, arch, dev, sync);
        hw.leave(back);
    }

    pub fn sync_sg_for_device<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        let back = hw.enter(crate::frame_id!("dma_direct_sync_sg_for_device"));
        let DmaDirect { arch, st } = self;
        let sync = st.sync.direct_sync_sg;
        for e in &sgt.entries[..sgt.nents] {
            hw.sw(st.costs.sg_next);
            hw.sw(st.costs.sync_single);
            let len = u64::from(e.dma_length);
            st.sync_single_for_device_nowait(hw, arch, dev, e.dma_address, len, dir, sync);
        }
        st.end_of_call(hw, arch, dev, sync);
        hw.leave(back);
    }
}

// `DmaDirect::map_page` and the rest name the inherent methods above (inherent items win name
// resolution), so each of these is a forward, not a recursion.
impl crate::stats::Stats for DmaDirect {
    fn swiotlb_stats(&self) -> Option<crate::stats::SwiotlbStats> {
        self.st.swiotlb.as_ref().map(|s| s.pool().stats())
    }
}

impl DmaMapOps for DmaDirect {
    fn name(&self) -> &'static str {
        "dma-direct"
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
        DmaDirect::map_page(self, hw, dev, phys, size, dir, attrs)
    }

    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        DmaDirect::unmap_page(self, hw, dev, addr, size, dir, attrs)
    }

    fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        DmaDirect::map_sg(self, hw, dev, sgt, dir, attrs)
    }

    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        DmaDirect::unmap_sg(self, hw, dev, sgt, dir, attrs)
    }

    fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        DmaDirect::sync_single_for_cpu(self, hw, dev, addr, size, dir)
    }

    fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        DmaDirect::sync_single_for_device(self, hw, dev, addr, size, dir)
    }

    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        DmaDirect::sync_sg_for_cpu(self, hw, dev, sgt, dir)
    }

    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        DmaDirect::sync_sg_for_device(self, hw, dev, sgt, dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::arm64::{Arm64, DirRules};
    use crate::dma::sync_policy::{SyncKind, SyncRule};
    use crate::hw::CacheOp;
    use crate::hw::recorder::Recorder;

    fn direct(batched: bool) -> DmaDirect {
        let r = Recorder::new(64);
        let sync = if batched {
            SyncRule::Batched
        } else {
            SyncRule::PerEntry
        };
        DmaDirect::new(&r, Arm64::new(DirRules::Since5_19), sync)
    }

    fn list() -> SgTable {
        SgTable::from_contiguous(PhysAddr(0x8000_0000), 10 << 20, &[4096])
    }

    #[test]
    fn map_sg_issues_a_clean_per_line_and_a_barrier_per_entry_or_per_list() {
        for (batched, barriers) in [(false, 2560), (true, 1)] {
            let d = direct(batched);
            let dev = Device::new("dev", false, 64);
            let mut sgt = list();
            let mut r = Recorder::new(64);
            let n = d
                .map_sg(
                    &mut r,
                    &dev,
                    &mut sgt,
                    DmaDirection::Bidirectional,
                    DmaAttrs::NONE,
                )
                .unwrap();
            assert_eq!(n, 2560);
            assert_eq!(r.lines(CacheOp::Clean), 163_840);
            assert_eq!(r.barriers, barriers);
            assert_eq!(
                { sgt.entries[7].dma_address },
                DmaAddr(0x8000_0000 + 7 * 4096)
            );

            let mut r = Recorder::new(64);
            d.unmap_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::Bidirectional,
                DmaAttrs::NONE,
            );
            assert_eq!(r.lines(CacheOp::Inval), 163_840);
            assert_eq!(r.lines(CacheOp::CleanInval), 0);
            assert_eq!(r.barriers, barriers);
        }
    }

    #[test]
    fn coherent_devices_get_no_maintenance_and_no_barrier() {
        for batched in [false, true] {
            let d = direct(batched);
            let dev = Device::new("dev", true, 64);
            let mut sgt = list();
            let mut r = Recorder::new(64);
            d.map_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::Bidirectional,
                DmaAttrs::NONE,
            )
            .unwrap();
            d.sync_sg_for_cpu(&mut r, &dev, &sgt, DmaDirection::FromDevice);
            d.unmap_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::Bidirectional,
                DmaAttrs::NONE,
            );
            assert!(r.ops.is_empty());
            assert_eq!(r.barriers, 0);
        }
    }

    #[test]
    fn skip_cpu_sync_skips_maintenance() {
        let d = direct(false);
        let dev = Device::new("dev", false, 64);
        let mut sgt = list();
        let mut r = Recorder::new(64);
        d.map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::SKIP_CPU_SYNC,
        )
        .unwrap();
        assert!(r.ops.is_empty());
        assert_eq!(r.barriers, 0);
    }

    #[test]
    fn unmap_for_to_device_needs_no_maintenance() {
        let d = direct(false);
        let dev = Device::new("dev", false, 64);
        let mut sgt = list();
        d.map_sg(
            &mut Recorder::new(64),
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
        let mut r = Recorder::new(64);
        d.unmap_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
        assert!(r.ops.is_empty());
        assert_eq!(r.barriers, 0);
    }

    #[test]
    fn unreachable_buffer_fails_and_unwinds() {
        let d = direct(true);
        let dev = Device::new("dev32", false, 32);
        // Straddles 4 GiB: the first entries fit, a later one does not.
        let mut sgt = SgTable::from_contiguous(PhysAddr(0xffff_e000), 4 * 4096, &[4096]);
        let mut r = Recorder::new(64);
        let e = d.map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
        assert!(matches!(e, Err(DmaError::MappingError(_))));
        assert_eq!(sgt.nents, 0);
        assert!(
            sgt.entries
                .iter()
                .all(|e| { e.dma_address } == DmaAddr::MAPPING_ERROR)
        );
    }

    /// A DmaDirect with the paths of a release's `sync` policy.
    fn release(kind: SyncKind) -> DmaDirect {
        let r = Recorder::new(64);
        DmaDirect::new(&r, Arm64::new(DirRules::Since5_19), kind)
    }

    const RELEASES: [SyncKind; 2] = [SyncKind::PerEntry, SyncKind::Batched];

    /// DSB per call over 10 MiB of 4 KiB entries (2560), per release: 7.0 waits after every
    /// entry; 7.1 batches map_sg, unmap_sg and both sync_sg calls (v2's 5/8 folded into the
    /// merged patch 4).
    #[test]
    fn which_calls_each_release_batches() {
        // (map_sg, sync_sg_for_device, sync_sg_for_cpu, unmap_sg)
        let want = [(2560, 2560, 2560, 2560), (1, 1, 1, 1)];
        for (kind, want) in RELEASES.into_iter().zip(want) {
            let d = release(kind);
            let dev = Device::new("dev", false, 64);
            let mut sgt = list();
            let dir = DmaDirection::Bidirectional;
            let mut r = Recorder::new(64);
            d.map_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE)
                .unwrap();
            let map = (r.barriers, r.lines(CacheOp::Clean));
            let mut r = Recorder::new(64);
            d.sync_sg_for_device(&mut r, &dev, &sgt, dir);
            let for_device = (r.barriers, r.lines(CacheOp::Clean));
            let mut r = Recorder::new(64);
            d.sync_sg_for_cpu(&mut r, &dev, &sgt, dir);
            let for_cpu = (r.barriers, r.lines(CacheOp::Inval));
            let mut r = Recorder::new(64);
            d.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
            let unmap = (r.barriers, r.lines(CacheOp::Inval));
            assert_eq!(
                (map, for_device, for_cpu, unmap),
                (
                    (want.0, 163_840),
                    (want.1, 163_840),
                    (want.2, 163_840),
                    (want.3, 163_840)
                ),
                "{kind:?}"
            );
        }
    }

    /// 7.1's batched map_sg/unmap_sg end with `arch_sync_dma_flush()` for a non-coherent device
    /// whenever the list had an entry, whatever `attrs` say: one DSB under SKIP_CPU_SYNC, and one
    /// on a TO_DEVICE unmap where arm64 invalidates nothing. 7.0 issues none; a single-buffer
    /// unmap in 7.1 flushes once too (the flush is in the generic code).
    #[test]
    fn the_batched_flush_ignores_skip_cpu_sync_and_direction() {
        for (kind, want) in [(SyncKind::PerEntry, 0), (SyncKind::Batched, 1)] {
            let d = release(kind);
            let dev = Device::new("dev", false, 64);
            let mut sgt = list();
            let mut r = Recorder::new(64);
            d.map_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::SKIP_CPU_SYNC,
            )
            .unwrap();
            assert!(r.ops.is_empty());
            assert_eq!(r.barriers, want, "{kind:?} map_sg SKIP_CPU_SYNC");
            let mut r = Recorder::new(64);
            d.unmap_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
            assert!(r.ops.is_empty());
            assert_eq!(r.barriers, want, "{kind:?} unmap_sg TO_DEVICE");
            let mut r = Recorder::new(64);
            d.unmap_page(
                &mut r,
                &dev,
                DmaAddr(0x8000_0000),
                4096,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
            assert!(r.ops.is_empty());
            assert_eq!(r.barriers, want, "{kind:?} unmap_page TO_DEVICE");
            // An empty list, or a coherent device: nothing to flush.
            let mut empty = SgTable::from_contiguous(PhysAddr(0x1000), 0, &[4096]);
            let mut r = Recorder::new(64);
            let _ = d.map_sg(
                &mut r,
                &dev,
                &mut empty,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
            assert_eq!(r.barriers, 0);
            let coherent = Device::new("dev", true, 64);
            let mut sgt = list();
            let mut r = Recorder::new(64);
            d.map_sg(
                &mut r,
                &coherent,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            )
            .unwrap();
            d.unmap_sg(
                &mut r,
                &coherent,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
            assert_eq!(r.barriers, 0);
        }
    }

    /// A failed map_sg unwinds through unmap_sg with SKIP_CPU_SYNC; in 7.1 that unwind ends with
    /// one flush, which completes the cleans the mapped entries issued. Here the third of four
    /// entries lies above a 32-bit mask: two entries cleaned (128 lines).
    #[test]
    fn the_map_sg_error_path_ends_with_one_flush() {
        for (kind, barriers) in [(SyncKind::PerEntry, 2), (SyncKind::Batched, 1)] {
            let d = release(kind);
            let dev = Device::new("dev32", false, 32);
            let mut sgt = SgTable::from_contiguous(PhysAddr(0xffff_e000), 4 * 4096, &[4096]);
            let mut r = Recorder::new(64);
            let e = d.map_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
            assert!(matches!(e, Err(DmaError::MappingError(_))));
            assert_eq!(r.lines(CacheOp::Clean), 128, "{kind:?}");
            assert_eq!(r.barriers, barriers, "{kind:?}");
            // The first entry failing: nothing mapped, nothing to unwind, no flush.
            let mut sgt = SgTable::from_contiguous(PhysAddr(0x1_0000_0000), 4096, &[4096]);
            let mut r = Recorder::new(64);
            assert!(
                d.map_sg(
                    &mut r,
                    &dev,
                    &mut sgt,
                    DmaDirection::ToDevice,
                    DmaAttrs::NONE
                )
                .is_err()
            );
            assert_eq!((r.ops.len(), r.barriers), (0, 0), "{kind:?}");
        }
    }

    /// `swiotlb_map()` cleans the slot and flushes at once, even inside 7.1's batched map_sg: four
    /// bounced entries are four DSB, plus the list's closing one. To the CPU the slot's invalidate
    /// completes before each copy out, in a batched sync_sg_for_cpu as in unmap_sg.
    #[test]
    fn swiotlb_map_flushes_at_once_inside_a_batched_map_sg() {
        use crate::dma::swiotlb::tests::{HIGH, machine};
        use crate::dma::swiotlb::{Swiotlb, SwiotlbConfig};
        for (kind, map_barriers, unmap_barriers) in
            [(SyncKind::PerEntry, 4, 4), (SyncKind::Batched, 5, 5)]
        {
            let mem = machine();
            let r = Recorder::new(64);
            let pool = Swiotlb::new(&r, mem.clone(), &SwiotlbConfig::default()).unwrap();
            let d = release(kind).with_swiotlb(pool);
            let dev = Device::new("dev32", false, 32);
            let mut sgt = SgTable::from_contiguous(PhysAddr(HIGH), 4 * 4096, &[4096]);
            let mut r = Recorder::new(64);
            d.map_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::FromDevice,
                DmaAttrs::NONE,
            )
            .unwrap();
            assert_eq!(r.copies.len(), 4);
            assert_eq!(r.lines(CacheOp::Clean), 4 * 64);
            assert_eq!(r.barriers, map_barriers, "{kind:?} map_sg");
            let mut r = Recorder::new(64);
            d.sync_sg_for_cpu(&mut r, &dev, &sgt, DmaDirection::FromDevice);
            assert_eq!(r.copies.len(), 4);
            assert_eq!(r.barriers, unmap_barriers, "{kind:?} sync_sg_for_cpu");
            let mut r = Recorder::new(64);
            d.unmap_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::FromDevice,
                DmaAttrs::NONE,
            );
            assert_eq!(r.copies.len(), 4);
            assert_eq!(r.lines(CacheOp::Inval), 4 * 64);
            // Per entry: invalidate, wait, copy out; 7.1 adds the list's closing flush.
            assert_eq!(r.barriers, unmap_barriers, "{kind:?} unmap_sg");
            assert!(d.swiotlb().unwrap().pool().is_pristine());
        }
    }

    /// map_sg and unmap_sg run their walk on the rule matched once per call: each rule's frames
    /// and barriers, per entry or per list, as that rule's `for_device` / `for_cpu` /
    /// `end_of_call` give them.
    #[test]
    fn each_rule_runs_its_own_scatter_gather_walk() {
        let dev = Device::new("dev", false, 64);
        let n = |r: &Recorder, frame: &str| r.frames.iter().filter(|f| *f == frame).count();
        // (rule, the per-region routine's suffix, flushes and barriers for 4 entries)
        for (rule, suffix, flushes, barriers) in [
            (SyncRule::PerEntry, "", 0, 4),
            (SyncRule::FlushEach, "_nosync", 4, 4),
            (SyncRule::Batched, "_nosync", 1, 1),
        ] {
            let d = DmaDirect::new(&Recorder::new(64), Arm64::new(DirRules::Since5_19), rule);
            let mut sgt = SgTable::from_contiguous(PhysAddr(0x1000), 4 * 4096, &[4096]);
            let dir = DmaDirection::Bidirectional;
            let mut r = Recorder::new(64);
            d.map_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE)
                .unwrap();
            let clean =
                format!("dma_direct_map_sg > arch_sync_dma_for_device > dcache_clean_poc{suffix}");
            assert_eq!(n(&r, &clean), 4, "{rule:?}");
            assert_eq!(
                n(&r, "dma_direct_map_sg > arch_sync_dma_flush"),
                flushes,
                "{rule:?}"
            );
            assert_eq!(r.barriers, barriers, "{rule:?} map_sg");
            let mut r = Recorder::new(64);
            d.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
            let inval =
                format!("dma_direct_unmap_sg > arch_sync_dma_for_cpu > dcache_inval_poc{suffix}");
            assert_eq!(n(&r, &inval), 4, "{rule:?}");
            assert_eq!(
                n(&r, "dma_direct_unmap_sg > arch_sync_dma_flush"),
                flushes,
                "{rule:?}"
            );
            assert_eq!(r.barriers, barriers, "{rule:?} unmap_sg");
        }
    }

    #[test]
    fn batched_frames_match_the_kernel_stack() {
        let d = direct(true);
        let dev = Device::new("dev", false, 64);
        let mut sgt = SgTable::from_contiguous(PhysAddr(0x1000), 8192, &[4096]);
        let mut r = Recorder::new(64);
        d.map_sg(
            &mut r,
            &dev,
            &mut sgt,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
        assert!(r.frames.contains(
            &"dma_direct_map_sg > arch_sync_dma_for_device > dcache_clean_poc_nosync".to_string()
        ));
        assert!(
            r.frames
                .contains(&"dma_direct_map_sg > arch_sync_dma_flush".to_string())
        );
    }
}
