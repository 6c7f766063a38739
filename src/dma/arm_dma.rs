//! 32-bit ARM's own `dma_map_ops`: `arm_dma_ops` and `arm_coherent_dma_ops`.
//!
//! Kernel counterpart: arch/arm/mm/dma-mapping.c of 3.14–4.0 (read in 3.14, 3.16 and 3.19; ARM
//! had no dma-direct then). A non-coherent device gets `arm_dma_ops`: `arm_dma_map_page` and
//! `arm_dma_sync_single_for_device` call `__dma_page_cpu_to_dev`, `arm_dma_unmap_page` and
//! `arm_dma_sync_single_for_cpu` call `__dma_page_dev_to_cpu`, and the sg variants
//! (`arm_dma_map_sg`, `arm_dma_unmap_sg`, `arm_dma_sync_sg_for_*`) call the single ops once per
//! entry through `get_dma_ops(dev)`. A device marked `dma-coherent` (Zynq's ACP) gets
//! `arm_coherent_dma_ops`: `arm_coherent_dma_map_page` only translates, and unmap and the four
//! syncs are NULL, so the generic `dma_sync_single_for_*` / `dma_unmap_page` call nothing.
//!
//! What it models: those frames, so a stack reads as the kernel's
//! (`dma_sync_single_for_cpu > arm_dma_sync_single_for_cpu > __dma_page_dev_to_cpu >
//! l2c210_inv_range`), over [`Arm32`]'s direction rules; the bus address is the physical one
//! (`pfn_to_dma` with no offset, as on Zynq), with no `dma_capable` check (`arm_dma_map_page`
//! makes none).
//!
//! It lives under `dma` rather than beside [`Arm32`] because it is a [`DmaMapOps`]: the arch
//! layer below never reaches up into the DMA layer.
//!
//! Invariants: a coherent device issues no maintenance at all, in any call; `DMA_ATTR_SKIP_CPU_SYNC`
//! skips the maintenance of map and unmap, never of a sync; map_sg either maps every entry or
//! unmaps what it mapped and returns 0 — with these ops nothing can fail, so it maps every entry.

use super::{DmaError, DmaMapOps};
use crate::arch::arm::Arm32;
use crate::device::Device;
use crate::hw::DeviceHw;
use crate::scatterlist::SgTable;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// `arm_dma_ops` (non-coherent device) or `arm_coherent_dma_ops` (`dma-coherent`).
#[derive(Debug)]
pub struct ArmDmaOps {
    arch: Arm32,
    coherent: bool,
}

impl ArmDmaOps {
    /// The ops `arm_get_dma_map_ops()` gives a device: coherent ones when it is `dma-coherent`.
    pub fn new(arch: Arm32, coherent: bool) -> ArmDmaOps {
        ArmDmaOps { arch, coherent }
    }

    fn phys(addr: DmaAddr) -> PhysAddr {
        PhysAddr(addr.0)
    }
}

impl crate::stats::Stats for ArmDmaOps {}

impl DmaMapOps for ArmDmaOps {
    fn name(&self) -> &'static str {
        if self.coherent {
            "arm_coherent_dma_ops"
        } else {
            "arm_dma_ops"
        }
    }

    fn map_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        phys: PhysAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) -> Result<DmaAddr, DmaError> {
        let back = if self.coherent {
            hw.enter(crate::frame_id!("arm_coherent_dma_map_page"))
        } else {
            let back = hw.enter(crate::frame_id!("arm_dma_map_page"));
            if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
                self.arch.dma_page_cpu_to_dev(hw, phys, size, dir);
            }
            back
        };
        hw.leave(back);
        Ok(DmaAddr(phys.0))
    }

    fn unmap_page<H: DeviceHw>(
        &self,
        hw: &mut H,
        _dev: &Device,
        addr: DmaAddr,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        // arm_coherent_dma_ops has no unmap_page: dma_unmap_page() calls nothing.
        if self.coherent {
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_unmap_page"));
        if !attrs.contains(DmaAttrs::SKIP_CPU_SYNC) {
            self.arch
                .dma_page_dev_to_cpu(hw, Self::phys(addr), size, dir);
        }
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
        let back = hw.enter(crate::frame_id!("arm_dma_map_sg"));
        for i in 0..sgt.entries.len() {
            let (phys, len) = (sgt.entries[i].phys(), sgt.entries[i].length);
            let addr = self.map_page(hw, dev, phys, u64::from(len), dir, attrs)?;
            let e = &mut sgt.entries[i];
            e.dma_address = addr;
            e.dma_length = len;
        }
        sgt.nents = sgt.entries.len();
        hw.leave(back);
        Ok(sgt.nents)
    }

    fn unmap_sg<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &mut SgTable,
        dir: DmaDirection,
        attrs: DmaAttrs,
    ) {
        // arm_coherent_dma_ops has no unmap_sg either.
        if self.coherent {
            sgt.nents = 0;
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_unmap_sg"));
        for i in 0..sgt.nents {
            let (addr, len) = (sgt.entries[i].dma_address, sgt.entries[i].dma_length);
            self.unmap_page(hw, dev, addr, u64::from(len), dir, attrs);
        }
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
        if self.coherent {
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_sync_single_for_cpu"));
        self.arch
            .dma_page_dev_to_cpu(hw, Self::phys(addr), size, dir);
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
        if self.coherent {
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_sync_single_for_device"));
        self.arch
            .dma_page_cpu_to_dev(hw, Self::phys(addr), size, dir);
        hw.leave(back);
    }

    fn sync_sg_for_cpu<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if self.coherent {
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_sync_sg_for_cpu"));
        for e in &sgt.entries[..sgt.nents] {
            self.sync_single_for_cpu(hw, dev, e.dma_address, u64::from(e.length), dir);
        }
        hw.leave(back);
    }

    fn sync_sg_for_device<H: DeviceHw>(
        &self,
        hw: &mut H,
        dev: &Device,
        sgt: &SgTable,
        dir: DmaDirection,
    ) {
        if self.coherent {
            return;
        }
        let back = hw.enter(crate::frame_id!("arm_dma_sync_sg_for_device"));
        for e in &sgt.entries[..sgt.nents] {
            self.sync_single_for_device(hw, dev, e.dma_address, u64::from(e.length), dir);
        }
        hw.leave(back);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::arm::cache_l2x0::L2c210;
    use crate::arch::arm::cache_v7::CacheV7;
    use crate::hw::test_support::Recorder;

    const MB: u64 = 1 << 20;

    fn ops(coherent: bool) -> ArmDmaOps {
        ArmDmaOps::new(
            Arm32::new(CacheV7::default(), Some(Box::new(L2c210))),
            coherent,
        )
    }

    #[test]
    fn stacks_read_like_the_kernels() {
        let dev = Device::new("pl", false, 32);
        let mut r = Recorder::new(32);
        ops(false).sync_single_for_cpu(
            &mut r,
            &dev,
            DmaAddr(0x1000_0000),
            MB,
            DmaDirection::FromDevice,
        );
        assert_eq!(
            r.frames,
            vec![
                "arm_dma_sync_single_for_cpu",
                "arm_dma_sync_single_for_cpu > __dma_page_dev_to_cpu",
                "arm_dma_sync_single_for_cpu > __dma_page_dev_to_cpu > l2c210_inv_range",
                "arm_dma_sync_single_for_cpu > __dma_page_dev_to_cpu > v7_dma_unmap_area",
                "arm_dma_sync_single_for_cpu > __dma_page_dev_to_cpu > v7_dma_unmap_area > v7_dma_inv_range",
            ]
        );
        let mut sgt = SgTable::from_contiguous(PhysAddr(0x1000_0000), 8192, &[4096]);
        let mut r = Recorder::new(32);
        let o = ops(false);
        assert_eq!(
            o.map_sg(
                &mut r,
                &dev,
                &mut sgt,
                DmaDirection::ToDevice,
                DmaAttrs::NONE
            ),
            Ok(2)
        );
        assert_eq!({ sgt.entries[1].dma_address }, DmaAddr(0x1000_1000));
        assert!(
            r.frames
                .contains(&"arm_dma_map_sg > arm_dma_map_page > __dma_page_cpu_to_dev".to_string())
        );
        let mut r = Recorder::new(32);
        o.sync_sg_for_device(&mut r, &dev, &sgt, DmaDirection::ToDevice);
        assert_eq!(r.lines(crate::hw::CacheOp::Clean), 256);
        assert!(r.frames.contains(
            &"arm_dma_sync_sg_for_device > arm_dma_sync_single_for_device > __dma_page_cpu_to_dev"
                .to_string()
        ));
    }

    #[test]
    fn skip_cpu_sync_skips_map_and_unmap_maintenance_only() {
        let dev = Device::new("pl", false, 32);
        let mut r = Recorder::new(32);
        let o = ops(false);
        let a = o
            .map_page(
                &mut r,
                &dev,
                PhysAddr(0x1000_0000),
                MB,
                DmaDirection::FromDevice,
                DmaAttrs::SKIP_CPU_SYNC,
            )
            .unwrap();
        o.unmap_page(
            &mut r,
            &dev,
            a,
            MB,
            DmaDirection::FromDevice,
            DmaAttrs::SKIP_CPU_SYNC,
        );
        assert!(r.ops.is_empty() && r.outer_ops.is_empty());
        o.sync_single_for_device(&mut r, &dev, a, MB, DmaDirection::FromDevice);
        assert_eq!(r.lines(crate::hw::CacheOp::Inval), 32768);
    }

    #[test]
    fn a_coherent_device_issues_no_maintenance_in_any_call() {
        let dev = Device::new("acp", true, 32);
        let mut r = Recorder::new(32);
        let o = ops(true);
        for dir in DmaDirection::ALL {
            let a = o
                .map_page(&mut r, &dev, PhysAddr(0x1000_0000), MB, dir, DmaAttrs::NONE)
                .unwrap();
            assert_eq!(a, DmaAddr(0x1000_0000));
            o.sync_single_for_device(&mut r, &dev, a, MB, dir);
            o.sync_single_for_cpu(&mut r, &dev, a, MB, dir);
            o.unmap_page(&mut r, &dev, a, MB, dir, DmaAttrs::NONE);
            let mut sgt = SgTable::from_contiguous(PhysAddr(0x1000_0000), MB, &[4096]);
            o.map_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE)
                .unwrap();
            o.sync_sg_for_device(&mut r, &dev, &sgt, dir);
            o.sync_sg_for_cpu(&mut r, &dev, &sgt, dir);
            o.unmap_sg(&mut r, &dev, &mut sgt, dir, DmaAttrs::NONE);
        }
        assert!(r.ops.is_empty() && r.outer_ops.is_empty() && r.outer_ways.is_empty());
        assert_eq!(r.counts.iter().sum::<u64>(), 0);
        assert!(r.events.is_empty());
    }
}
