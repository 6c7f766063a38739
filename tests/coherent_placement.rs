//! Where dma_alloc_coherent's memory comes from on the kunpeng920 topology (seed 003), under
//! the boot parameters and releases that decide it: the placement rules of issue #11.

use dmasim::device::Device;
use dmasim::dma::coherent::DmaCoherent;
use dmasim::dma::contiguous::{CmaBoot, CmaCmdline, Gfp, Served};
use dmasim::mm::physmem::PhysMem;
use dmasim::platform::Profile;
use dmasim::policy::KernelVersion;
use dmasim::setup::{dma_coherent_init, numa_memory};

const MIB: u64 = 1 << 20;

fn boot(kernel: KernelVersion, b: &CmaBoot) -> (PhysMem, DmaCoherent) {
    let p = Profile::load("kunpeng920").unwrap();
    let mut mem = numa_memory(&p, vec![]);
    let c = dma_coherent_init(&mut mem, kernel, b);
    (mem, c)
}

fn cma(size: u64) -> Option<CmaCmdline> {
    Some(CmaCmdline {
        size,
        base: 0,
        limit: 0,
    })
}

/// The SMMUv3 on node 2, coherent, 44-bit (Kunpeng 920's SMMU) — what arm_smmu_device_probe
/// allocates its queues for.
fn smmu() -> Device {
    Device {
        numa_node: Some(2),
        ..Device::new("smmu-socket1", true, 44)
    }
}

/// A command queue larger than a page reaches CMA (arm-smmu-v3 sizes it from the hardware's
/// CMDQS, capped at Q_MAX_SZ_SHIFT): 2^11 entries of 16 bytes, 32 KiB, the size the modelled probe
/// gives kunpeng920's assumed IDR1 (`iommu::arm_smmu_v3::arm_smmu_init_structures`; tests/
/// pernuma_cma.rs runs the probe itself).
const CMDQ: u64 = 32 << 10;

#[test]
fn without_per_node_cma_the_smmu_queues_land_in_the_default_area_on_node_0() {
    let b = CmaBoot {
        cma: cma(64 * MIB),
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &b);
    let area = c
        .cma
        .default_area
        .clone()
        .expect("cma=64M reserves the default area");
    assert_eq!(area.node, 0);
    // 5.10: top-down below arm64_dma32_phys_limit (4 GiB on a machine whose DRAM starts at 0).
    assert_eq!(area.base().0, (4 << 30) - 64 * MIB);
    let q = c.alloc(&mut mem, &smmu(), CMDQ, Gfp::KERNEL, true).unwrap();
    assert_eq!(q.served, Served::Area("reserved".into()));
    assert_eq!(q.node, 0);
    assert_eq!(q.phys, area.base());
}

#[test]
fn with_cma_pernuma_they_land_on_the_smmus_node() {
    for k in [KernelVersion(5, 10), KernelVersion(6, 6)] {
        let b = CmaBoot {
            cma: cma(64 * MIB),
            cma_pernuma: Some(16 * MIB),
            ..CmaBoot::default()
        };
        let (mut mem, mut c) = boot(k, &b);
        for n in 0..4u32 {
            let a = c.cma.pernuma[n as usize]
                .as_ref()
                .expect("an area per node");
            assert_eq!(a.node, n, "{k}");
            assert_eq!(a.name, format!("pernuma{n}"));
        }
        let q = c.alloc(&mut mem, &smmu(), CMDQ, Gfp::KERNEL, true).unwrap();
        assert_eq!(q.served, Served::Area("pernuma2".into()), "{k}");
        assert_eq!(q.node, 2, "{k}");
    }
}

#[test]
fn numa_cma_gives_per_node_sizes_from_6_6_and_is_refused_before() {
    let b = CmaBoot {
        cma: cma(64 * MIB),
        numa_cma: vec![(0, 16 * MIB), (2, 32 * MIB)],
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(6, 6), &b);
    assert!(c.cma.ignored.is_empty());
    assert_eq!(c.cma.numa[2].as_ref().unwrap().size(), 32 * MIB);
    assert!(c.cma.numa[1].is_none() && c.cma.numa[3].is_none());
    let q = c.alloc(&mut mem, &smmu(), CMDQ, Gfp::KERNEL, true).unwrap();
    assert_eq!(
        (q.served.clone(), q.node),
        (Served::Area("numa2".into()), 2)
    );
    // 6.5: the parameter does not exist; boot says so and reserves no per-node area.
    let (mut mem, mut c) = boot(KernelVersion(6, 5), &b);
    assert_eq!(c.cma.ignored.len(), 1);
    assert_eq!(
        c.cma.ignored[0].describe("6.5"),
        "numa_cma= is not a parameter of 6.5: ignored (it came in Linux 6.6; the kernel hands an unknown parameter on to init and reserves no area for it)"
    );
    assert!(c.cma.numa.iter().all(Option::is_none));
    let q = c.alloc(&mut mem, &smmu(), CMDQ, Gfp::KERNEL, true).unwrap();
    assert_eq!((q.served, q.node), (Served::Area("reserved".into()), 0));
    // cma_pernuma= before 5.10 likewise.
    let b = CmaBoot {
        cma_pernuma: Some(16 * MIB),
        ..CmaBoot::default()
    };
    let (_, c) = boot(KernelVersion(5, 9), &b);
    assert_eq!(
        (c.cma.ignored[0].param, c.cma.ignored[0].since),
        ("cma_pernuma=", "5.10")
    );
    assert!(c.cma.pernuma.iter().all(Option::is_none));
}

#[test]
fn a_single_page_skips_cma() {
    let b = CmaBoot {
        cma: cma(64 * MIB),
        cma_pernuma: Some(16 * MIB),
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &b);
    let a = c
        .alloc(&mut mem, &smmu(), 4096, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(a.served, Served::PageAllocator);
    assert_eq!(a.node, 2, "the page allocator on the device's node");
    assert!(c.cma.areas().all(|a| a.used_pages() == 0));
    // Two pages do use CMA; and an allocation that may not sleep never does.
    let b2 = c
        .alloc(&mut mem, &smmu(), 8192, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(b2.served, Served::Area("pernuma2".into()));
    let at = c
        .alloc(&mut mem, &smmu(), 8192, Gfp::ATOMIC, false)
        .unwrap();
    assert_eq!((at.served, at.node), (Served::PageAllocator, 2));
}

#[test]
fn a_32_bit_device_uses_only_the_default_area() {
    let b = CmaBoot {
        cma: cma(64 * MIB),
        cma_pernuma: Some(16 * MIB),
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &b);
    let dev = Device {
        numa_node: Some(2),
        ..Device::new("old-nic", true, 32)
    };
    let a = c
        .alloc(&mut mem, &dev, 64 << 10, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(a.zone, "GFP_DMA32");
    assert_eq!(
        (a.served.clone(), a.node),
        (Served::Area("reserved".into()), 0)
    );
    assert!(a.phys.0 + a.size <= 1 << 32);
    assert_eq!(c.cma.pernuma[2].as_ref().unwrap().used_pages(), 0);
}

#[test]
fn an_exhausted_node_area_falls_back_to_the_default_then_the_page_allocator() {
    let b = CmaBoot {
        cma: cma(8 * MIB),
        cma_pernuma: Some(4 * MIB),
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &b);
    let dev = smmu();
    // 4 MiB fills pernuma2 exactly; the next 4 MiB comes from the default area on node 0, the
    // next two fill it; then the page allocator on node 2.
    let a = c
        .alloc(&mut mem, &dev, 4 * MIB, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(a.served, Served::Area("pernuma2".into()));
    let d1 = c
        .alloc(&mut mem, &dev, 4 * MIB, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(
        (d1.served.clone(), d1.node),
        (Served::Area("reserved".into()), 0)
    );
    let d2 = c
        .alloc(&mut mem, &dev, 4 * MIB, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(d2.served, Served::Area("reserved".into()));
    let p = c
        .alloc(&mut mem, &dev, 4 * MIB, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!((p.served.clone(), p.node), (Served::PageAllocator, 2));
    // Each free returns to where it came from.
    let used =
        |c: &DmaCoherent, name: &str| c.cma.areas().find(|a| a.name == name).unwrap().used_pages();
    assert_eq!(
        c.free(&mut mem, &dev, d1.phys, d1.size).unwrap(),
        Served::Area("reserved".into())
    );
    assert_eq!(used(&c, "reserved"), 1024);
    assert_eq!(
        c.free(&mut mem, &dev, a.phys, a.size).unwrap(),
        Served::Area("pernuma2".into())
    );
    assert_eq!(used(&c, "pernuma2"), 0);
    let before = mem.free_bytes(2);
    assert_eq!(
        c.free(&mut mem, &dev, p.phys, p.size).unwrap(),
        Served::PageAllocator
    );
    assert_eq!(mem.free_bytes(2), before + 4 * MIB);
    // A freed area serves again: the next allocation is pernuma2's.
    let again = c
        .alloc(&mut mem, &dev, 4 * MIB, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!(again.served, Served::Area("pernuma2".into()));
    // Freeing twice is caught.
    assert!(c.free(&mut mem, &dev, d1.phys, d1.size).is_err());
}

#[test]
fn the_page_allocator_falls_back_along_the_distance_order() {
    // No CMA at all (a build with CONFIG_CMA_SIZE_MBYTES=0 and no cma=); node 3's memory used
    // up, so a device on node 3 gets node 2's (distance 12), not node 0's (22).
    let none = CmaBoot {
        size_mbytes: 0,
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &none);
    while mem
        .alloc_pages_node(3, 10, None)
        .is_ok_and(|p| mem.node_of(p) == Some(3))
    {}
    let dev = Device {
        numa_node: Some(3),
        ..Device::new("nic", true, 64)
    };
    let a = c
        .alloc(&mut mem, &dev, 64 << 10, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!((a.served, a.node), (Served::PageAllocator, 2));
}

#[test]
fn managed_allocations_are_freed_when_the_driver_detaches() {
    let b = CmaBoot {
        cma: cma(64 * MIB),
        cma_pernuma: Some(16 * MIB),
        ..CmaBoot::default()
    };
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &b);
    let dev = smmu();
    let before = mem.allocated_bytes();
    for size in [CMDQ, CMDQ, 64 << 10, 4096] {
        c.alloc(&mut mem, &dev, size, Gfp::KERNEL, true).unwrap();
    }
    c.alloc(&mut mem, &dev, 8192, Gfp::KERNEL, false).unwrap();
    assert_eq!(c.devres_release_all(&mut mem, &dev).unwrap(), 4);
    assert_eq!(c.live().len(), 1, "the unmanaged one stays");
    assert_eq!(c.cma.pernuma[2].as_ref().unwrap().used_pages(), 2);
    assert_eq!(mem.allocated_bytes(), before);
}

/// Without `cma=` the arm64 defconfig's CONFIG_CMA_SIZE_MBYTES (32) still reserves a default
/// area on node 0, below the DMA zone's limit, and a device with no area of its own is served
/// from it; a build set to 0 has none.
#[test]
fn without_cma_the_defconfig_size_reserves_a_default_area() {
    let (mut mem, mut c) = boot(KernelVersion(5, 10), &CmaBoot::default());
    let area = c
        .cma
        .areas()
        .find(|a| a.name == "reserved")
        .expect("a default area");
    assert_eq!((area.node, area.size()), (0, 32 * MIB));
    let dev = Device {
        numa_node: Some(3),
        ..Device::new("nic", true, 64)
    };
    let a = c
        .alloc(&mut mem, &dev, 64 << 10, Gfp::KERNEL, false)
        .unwrap();
    assert_eq!((a.served, a.node), (Served::Area("reserved".into()), 0));
    let none = CmaBoot {
        size_mbytes: 0,
        ..CmaBoot::default()
    };
    let (_, c) = boot(KernelVersion(5, 10), &none);
    assert_eq!(c.cma.areas().count(), 0);
}
