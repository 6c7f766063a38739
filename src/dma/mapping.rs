//! The DMA API front: what drivers call.
//!
//! Kernel counterpart: kernel/dma/mapping.c — `dma_map_page_attrs`, `dma_unmap_page_attrs`,
//! `dma_map_sg_attrs`, `dma_unmap_sg_attrs`, `dma_sync_single_for_{cpu,device}`,
//! `dma_sync_sg_for_{cpu,device}`. Each opens a frame named after the API call and dispatches to the
//! device's `dma_map_ops` (dma-direct, or iommu-dma once a domain is attached).
//!
//! `dma_map_single()` is include/asm-generic/dma-mapping-common.h's `dma_map_single_attrs()` of
//! the 3.x releases: it turns the buffer's kernel virtual address into a page with
//! `virt_to_page()` for `ops->map_page`, and evaluates `virt_to_page()` once more as the argument
//! of `debug_dma_map_page()` — an empty inline without `CONFIG_DMA_API_DEBUG`, but while `__pa()`
//! is an out-of-line call (x86-64 before 3.9) the compiler must still make that call. Both go
//! through the release's `__pa()` ([`crate::arch::x86::physaddr`]; inline arithmetic elsewhere).
//!
//! Invariant: every call leaves the call stack as it found it.

use super::{DmaError, DmaMapOps};
use crate::arch::x86::physaddr::{self, Inline, PhysAddrFn, PhysAddrImpl};
use crate::device::Device;
use crate::hw::{DeviceHw, Hw, SwCost, SwKey};
use crate::scatterlist::SgTable;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// A device's DMA API: the device plus the ops that serve it (`O`: one implementation, or the
/// closed set a run chooses from, [`crate::setup::DmaOps`]).
pub struct DmaApi<O: DmaMapOps> {
    pub dev: Device,
    pub ops: O,
    call: SwCost,
    pa: PhysAddrImpl,
}

impl<O: DmaMapOps> DmaApi<O> {
    /// `call` is the front's own cost per API call (`dma_api_call` in a profile's `[sw]` table).
    pub fn new(hw: &dyn Hw, dev: Device, ops: O) -> DmaApi<O> {
        DmaApi {
            dev,
            ops,
            call: hw.sw_cost(SwKey::DmaApiCall),
            pa: PhysAddrImpl::Inline(Inline),
        }
    }

    /// The release's `__pa()`, which `dma_map_single()` translates the buffer with (inline
    /// arithmetic unless set).
    pub fn with_phys_addr(mut self, pa: PhysAddrImpl) -> DmaApi<O> {
        self.pa = pa;
        self
    }

    #[inline(always)]
    fn frame<T, H: DeviceHw>(
        &self,
        hw: &mut H,
        frame: &'static crate::hw::FrameId,
        f: impl FnOnce(&O, &mut H, &Device) -> T,
    ) -> T {
        let back = hw.enter(frame);
        hw.sw(self.call);
        let r = f(&self.ops, hw, &self.dev);
        hw.leave(back);
        r
    }

    pub fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        self.frame(hw, crate::frame_id!("dma_map_page"), |ops, hw, dev| {
            ops.map_page(hw, dev, phys, size, dir, attrs)
        })
    }

    pub fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.frame(hw, crate::frame_id!("dma_unmap_page"), |ops, hw, dev| {
            ops.unmap_page(hw, dev, addr, size, dir, attrs)
        })
    }

    /// `dma_map_single()`: a kernel virtual address in the kernel; here its physical address,
    /// served by the ops' `map_page` as `dma_map_single_attrs()` → `dma_map_page_attrs()` is.
    pub fn map_single<H: DeviceHw>(
        &self,
        hw: &mut H,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let back = hw.enter(crate::frame_id!("dma_map_single"));
        hw.sw(self.call);
        let virt = physaddr::va(phys);
        let offset = virt & (crate::scatterlist::PAGE_SIZE - 1);
        let page = self.pa.virt_to_page(hw, virt);
        let r = self
            .ops
            .map_page(hw, &self.dev, PhysAddr(page.0 | offset), size, dir, attrs);
        // debug_dma_map_page(dev, virt_to_page(ptr), ...): the stub is empty, its argument is not.
        let _ = self.pa.virt_to_page(hw, virt);
        hw.leave(back);
        r
    }

    /// `dma_unmap_single()`, served by the ops' `unmap_page`.
    pub fn unmap_single<H: DeviceHw>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.frame(hw, crate::frame_id!("dma_unmap_single"), |ops, hw, dev| {
            ops.unmap_page(hw, dev, addr, size, dir, attrs)
        })
    }

    pub fn map_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<usize, DmaError> {
        self.frame(hw, crate::frame_id!("dma_map_sg"), |ops, hw, dev| {
            ops.map_sg(hw, dev, sgt, dir, attrs)
        })
    }

    pub fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        self.frame(hw, crate::frame_id!("dma_unmap_sg"), |ops, hw, dev| {
            ops.unmap_sg(hw, dev, sgt, dir, attrs)
        })
    }

    /// `dma_mapping_error()`: an inline in the kernel, so it opens no frame of its own; an ops
    /// `mapping_error` it calls does.
    pub fn mapping_error<H: DeviceHw>(&self, hw: &mut H, addr: DmaAddr) -> bool {
        self.ops.mapping_error(hw, &self.dev, addr)
    }

    pub fn sync_single_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        self.frame(
            hw,
            crate::frame_id!("dma_sync_single_for_cpu"),
            |ops, hw, dev| ops.sync_single_for_cpu(hw, dev, addr, size, dir),
        )
    }

    pub fn sync_single_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
    ) {
        self.frame(
            hw,
            crate::frame_id!("dma_sync_single_for_device"),
            |ops, hw, dev| ops.sync_single_for_device(hw, dev, addr, size, dir),
        )
    }

    pub fn sync_sg_for_cpu<H: DeviceHw>(&self, hw: &mut H, sgt: &SgTable, dir: DmaDirection) {
        self.frame(
            hw,
            crate::frame_id!("dma_sync_sg_for_cpu"),
            |ops, hw, dev| ops.sync_sg_for_cpu(hw, dev, sgt, dir),
        )
    }

    pub fn sync_sg_for_device<H: DeviceHw>(&self, hw: &mut H, sgt: &SgTable, dir: DmaDirection) {
        self.frame(
            hw,
            crate::frame_id!("dma_sync_sg_for_device"),
            |ops, hw, dev| ops.sync_sg_for_device(hw, dev, sgt, dir),
        )
    }
}
