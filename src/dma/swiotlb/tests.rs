//! dma-direct over swiotlb: real bytes on both sides, maintenance order, slot accounting.

use super::*;
use crate::arch::arm64::{Arm64, DirRules};
use crate::dma::direct::DmaDirect;
use crate::dma::sync_policy::SyncRule;
use crate::hw::recorder::Recorder;
use crate::hw::{CacheOp, Counter};
use crate::mm::physmem::{NodeRange, PhysMem};
use crate::scatterlist::SgTable;

pub(crate) const LOW: u64 = 0x4000_0000;
/// Above 4 GiB: out of reach of a 32-bit device.
pub(crate) const HIGH: u64 = 0x1_0000_0000;

/// Node 0 below 4 GiB (where the pool goes), node 1 above it (where buffers go).
pub(crate) fn machine() -> SharedPhysMem {
    PhysMem::new(vec![
        NodeRange {
            node: 0,
            start: PhysAddr(LOW),
            size: 256 << 20,
        },
        NodeRange {
            node: 1,
            start: PhysAddr(HIGH),
            size: 256 << 20,
        },
    ])
    .shared()
}

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub(crate) fn read(mem: &SharedPhysMem, at: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    mem.borrow().read(PhysAddr(at), &mut v);
    v
}

fn direct(mem: &SharedPhysMem, cfg: SwiotlbConfig, batched: bool) -> DmaDirect {
    let r = Recorder::new(64);
    let sync = if batched {
        SyncRule::Batched
    } else {
        SyncRule::PerEntry
    };
    let s = Swiotlb::new(&r, mem.clone(), &cfg).unwrap();
    DmaDirect::new(&r, Arm64::new(DirRules::Since5_19), sync).with_swiotlb(s)
}

fn cfg(release: Release) -> SwiotlbConfig {
    SwiotlbConfig {
        size: 4 << 20,
        release,
        ..SwiotlbConfig::default()
    }
}

fn dev32(coherent: bool) -> Device {
    Device::new("dev32", coherent, 32)
}

fn pristine(d: &DmaDirect) -> bool {
    d.swiotlb().unwrap().pool().is_pristine()
}

#[test]
fn to_device_bounces_the_buffer_and_unmap_leaves_it_alone() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), false);
    let dev = dev32(true);
    let buf = HIGH + 0x123;
    let data = pattern(5000, 7);
    mem.borrow_mut().write(PhysAddr(buf), &data);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(buf),
            5000,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert!(d.swiotlb().unwrap().is_swiotlb_buffer(PhysAddr(dma.0)));
    assert!(dma.0 + 5000 <= 1 << 32);
    // What the device reads is the buffer.
    assert_eq!(read(&mem, dma.0, 5000), data);
    assert_eq!(r.copies, vec![5000]);
    assert!(
        r.frames.contains(
            &"swiotlb_map > swiotlb_tbl_map_single > swiotlb_bounce > memcpy".to_string()
        )
    );
    // The device scribbles on its copy; a TO_DEVICE unmap copies nothing back.
    mem.borrow_mut().write(PhysAddr(dma.0), &[0xee; 64]);
    let mut r = Recorder::new(64);
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        5000,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(r.copies.is_empty());
    assert_eq!(read(&mem, buf, 5000), data);
    assert!(pristine(&d));
}

#[test]
fn from_device_data_reaches_the_cpu_at_sync_and_unmap() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), false);
    let dev = dev32(true);
    let buf = HIGH + 0x40;
    let old = pattern(3000, 1);
    mem.borrow_mut().write(PhysAddr(buf), &old);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(buf),
            3000,
            DmaDirection::FromDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    // 6.0 copies in every direction at map, so the slot holds the buffer, not stale pool bytes.
    assert_eq!(read(&mem, dma.0, 3000), old);
    // The device writes the first 1000 bytes.
    let new = pattern(1000, 99);
    mem.borrow_mut().write(PhysAddr(dma.0), &new);
    d.sync_single_for_cpu(&mut r, &dev, dma, 3000, DmaDirection::FromDevice);
    assert_eq!(read(&mem, buf, 1000), new);
    // Then 500 more at offset 2000; the unmap copies everything back.
    let more = pattern(500, 42);
    mem.borrow_mut().write(PhysAddr(dma.0 + 2000), &more);
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        3000,
        DmaDirection::FromDevice,
        DmaAttrs::NONE,
    );
    let mut want = old.clone();
    want[..1000].copy_from_slice(&new);
    want[2000..2500].copy_from_slice(&more);
    assert_eq!(read(&mem, buf, 3000), want);
    assert_eq!(r.copies, vec![3000, 3000, 3000]);
    assert!(pristine(&d));
}

#[test]
fn linux_3_6_rules_leave_stale_pool_bytes_in_a_from_device_mapping() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux3_6), false);
    let dev = dev32(true);
    // A first user leaves bytes in the pool.
    let secret = pattern(2048, 200);
    mem.borrow_mut().write(PhysAddr(HIGH), &secret);
    let mut r = Recorder::new(64);
    let a = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH),
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    d.unmap_page(
        &mut r,
        &dev,
        a,
        2048,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    // Wrap the rotating index back to slot 0 by filling the rest of the pool and freeing it.
    let n = d.swiotlb().unwrap().pool().nslabs();
    let mut held = Vec::new();
    for i in 0..(n - 1) {
        held.push(
            d.map_page(
                &mut r,
                &dev,
                PhysAddr(HIGH + 0x10_0000 + i as u64 * 2048),
                2048,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            )
            .unwrap(),
        );
    }
    for h in held {
        d.unmap_page(
            &mut r,
            &dev,
            h,
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
    }
    // A FROM_DEVICE mapping reuses slot 0 without copying in; the device writes only 16 bytes,
    // and the unmap copies the whole slot back: the rest is the previous user's data.
    let victim = HIGH + 0x80_0000;
    r.reset();
    let b = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(victim),
            2048,
            DmaDirection::FromDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(b, a);
    assert!(r.copies.is_empty());
    mem.borrow_mut().write(PhysAddr(b.0), &[1u8; 16]);
    d.unmap_page(
        &mut r,
        &dev,
        b,
        2048,
        DmaDirection::FromDevice,
        DmaAttrs::NONE,
    );
    let got = read(&mem, victim, 2048);
    assert_eq!(&got[..16], &[1u8; 16]);
    assert_eq!(&got[16..], &secret[16..]);
}

#[test]
fn bidirectional_sync_for_device_copies_the_cpus_changes_in() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), false);
    let dev = dev32(true);
    let buf = HIGH + 0x2000;
    mem.borrow_mut().write(PhysAddr(buf), &pattern(8192, 3));
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(buf),
            8192,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
    d.sync_single_for_cpu(&mut r, &dev, dma, 8192, DmaDirection::Bidirectional);
    let update = pattern(8192, 77);
    mem.borrow_mut().write(PhysAddr(buf), &update);
    d.sync_single_for_device(&mut r, &dev, dma, 8192, DmaDirection::Bidirectional);
    assert_eq!(read(&mem, dma.0, 8192), update);
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        8192,
        DmaDirection::Bidirectional,
        DmaAttrs::NONE,
    );
    assert!(pristine(&d));
}

#[test]
fn maintenance_is_on_the_slot_and_completes_before_any_copy_out() {
    for batched in [false, true] {
        let mem = machine();
        let d = direct(&mem, cfg(Release::Linux6_3), batched);
        let dev = dev32(false);
        let buf = HIGH + 0x1000;
        let mut r = Recorder::new(64);
        let dma = d
            .map_page(
                &mut r,
                &dev,
                PhysAddr(buf),
                4096,
                DmaDirection::Bidirectional,
                DmaAttrs::NONE,
            )
            .unwrap();
        // To the device: copy into the slot, then clean the slot, then wait.
        assert_eq!(r.events, vec!["spin_lock", "copy", "maint", "barrier"]);
        assert_eq!(r.ops, vec![(CacheOp::Clean, dma.0, 64)]);

        let mut r = Recorder::new(64);
        d.sync_single_for_cpu(&mut r, &dev, dma, 4096, DmaDirection::Bidirectional);
        // To the CPU: invalidate the slot and wait for it *before* copying out of it. Batched sync
        // adds its usual end-of-call flush after.
        let want: &[&str] = if batched {
            &["maint", "barrier", "copy", "barrier"]
        } else {
            &["maint", "barrier", "copy"]
        };
        assert_eq!(r.events, want, "batched={batched}");
        assert_eq!(r.ops, vec![(CacheOp::Inval, dma.0, 64)]);

        let mut r = Recorder::new(64);
        d.sync_single_for_device(&mut r, &dev, dma, 4096, DmaDirection::Bidirectional);
        assert_eq!(r.events, vec!["copy", "maint", "barrier"]);

        let mut r = Recorder::new(64);
        d.unmap_page(
            &mut r,
            &dev,
            dma,
            4096,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        );
        let want: &[&str] = if batched {
            &["maint", "barrier", "copy", "spin_lock", "barrier"]
        } else {
            &["maint", "barrier", "copy", "spin_lock"]
        };
        assert_eq!(r.events, want, "batched={batched}");
        assert!(pristine(&d));
    }
}

#[test]
fn batched_map_sg_flushes_before_each_bounced_copy_out_only() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), true);
    let dev = dev32(false);
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
    // Four copies in and cleans, one flush for the list.
    assert_eq!(r.barriers, 1);
    assert_eq!(r.copies.len(), 4);
    let mut r = Recorder::new(64);
    d.sync_sg_for_cpu(&mut r, &dev, &sgt, DmaDirection::FromDevice);
    // One flush before each of the four copies, plus the end-of-call one.
    assert_eq!(r.barriers, 5);
    assert_eq!(r.copies.len(), 4);
    d.unmap_sg(
        &mut r,
        &dev,
        &mut sgt,
        DmaDirection::FromDevice,
        DmaAttrs::NONE,
    );
    assert!(pristine(&d));
}

#[test]
fn forced_bouncing_per_device_and_global() {
    let mem = machine();
    let mut d = direct(&mem, cfg(Release::Linux6_3), false);
    let mut dev = Device::new("dev64", true, 64);
    let buf = PhysAddr(HIGH);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            buf,
            100,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(dma, DmaAddr(buf.0), "reachable: no bounce");
    dev.force_bounce = true;
    let dma = d
        .map_page(
            &mut r,
            &dev,
            buf,
            100,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert!(d.swiotlb().unwrap().is_swiotlb_buffer(PhysAddr(dma.0)));
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        100,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    dev.force_bounce = false;
    d.swiotlb_mut().unwrap().force = true;
    let dma = d
        .map_page(
            &mut r,
            &dev,
            buf,
            100,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert!(d.swiotlb().unwrap().is_swiotlb_buffer(PhysAddr(dma.0)));
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        100,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(pristine(&d));
}

#[test]
fn exhaustion_and_oversize_are_mapping_errors() {
    let mem = machine();
    let mut d = direct(
        &mem,
        SwiotlbConfig {
            size: IO_TLB_MAX_MAPPING,
            ..SwiotlbConfig::default()
        },
        false,
    );
    let dev = dev32(true);
    let mut r = Recorder::new(64);
    let map = |d: &mut DmaDirect, r: &mut Recorder, size| {
        d.map_page(
            r,
            &dev,
            PhysAddr(HIGH),
            size,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
    };
    assert!(matches!(
        map(&mut d, &mut r, IO_TLB_MAX_MAPPING + 1),
        Err(DmaError::MappingError(_))
    ));
    let a = map(&mut d, &mut r, 200 << 10).unwrap();
    let e = map(&mut d, &mut r, 100 << 10).unwrap_err();
    assert!(format!("{e}").contains("swiotlb buffer is full"), "{e}");
    d.unmap_page(
        &mut r,
        &dev,
        a,
        200 << 10,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    let b = map(&mut d, &mut r, IO_TLB_MAX_MAPPING).unwrap();
    d.unmap_page(
        &mut r,
        &dev,
        b,
        IO_TLB_MAX_MAPPING,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    assert!(pristine(&d));
}

#[test]
fn map_sg_failure_unwinds_bounced_entries() {
    let mem = machine();
    let d = direct(
        &mem,
        SwiotlbConfig {
            size: IO_TLB_MAX_MAPPING,
            ..SwiotlbConfig::default()
        },
        false,
    );
    let dev = dev32(true);
    // 80 entries of 4 KiB need 320 KiB of a 256 KiB pool.
    let mut sgt = SgTable::from_contiguous(PhysAddr(HIGH), 80 * 4096, &[4096]);
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
    assert!(pristine(&d));
}

#[test]
fn locks_are_taken_by_map_and_unmap_not_by_sync() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), false);
    let dev = dev32(true);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH),
            1500,
            DmaDirection::FromDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(r.count_of(Counter::SpinLock), 1);
    assert_eq!(
        r.count_at(
            "swiotlb_map > swiotlb_tbl_map_single > _raw_spin_lock_irqsave",
            Counter::SpinLock
        ),
        1
    );
    r.reset();
    d.sync_single_for_cpu(&mut r, &dev, dma, 1500, DmaDirection::FromDevice);
    assert_eq!(r.count_of(Counter::SpinLock), 0);
    assert_eq!(r.count_of(Counter::BounceCopyBytes), 1500);
    r.reset();
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        1500,
        DmaDirection::FromDevice,
        DmaAttrs::NONE,
    );
    assert_eq!(
        r.count_at(
            "swiotlb_tbl_unmap_single > _raw_spin_lock_irqsave",
            Counter::SpinLock
        ),
        1
    );
}

#[test]
fn min_align_mask_offset_is_kept_in_the_slot() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), false);
    let mut dev = dev32(true);
    dev.min_align_mask = 0xfff;
    let buf = HIGH + 0x3a30;
    let data = pattern(6000, 5);
    mem.borrow_mut().write(PhysAddr(buf), &data);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(buf),
            6000,
            DmaDirection::Bidirectional,
            DmaAttrs::NONE,
        )
        .unwrap();
    assert_eq!(dma.0 & 0xfff, buf & 0xfff);
    assert_eq!(read(&mem, dma.0, 6000), data);
    // A partial sync inside the first slot finds its original through orig_addr.
    mem.borrow_mut().write(PhysAddr(dma.0 + 100), &[9u8; 100]);
    d.sync_single_for_cpu(
        &mut r,
        &dev,
        DmaAddr(dma.0 + 100),
        100,
        DmaDirection::Bidirectional,
    );
    assert_eq!(read(&mem, buf + 100, 100), vec![9u8; 100]);
    // 6.0's swiotlb_bounce subtracts the min_align offset inside *every* slot, so a partial sync
    // starting in a later slot below that offset is taken for an access before the mapping and
    // copies nothing (a later release fixed partial syncs). The model keeps 6.0's behaviour.
    mem.borrow_mut().write(PhysAddr(dma.0 + 4000), &[8u8; 100]);
    r.reset();
    d.sync_single_for_cpu(
        &mut r,
        &dev,
        DmaAddr(dma.0 + 4000),
        100,
        DmaDirection::Bidirectional,
    );
    assert!(r.copies.is_empty());
    assert_eq!(read(&mem, buf + 4000, 100), data[4000..4100]);
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        6000,
        DmaDirection::Bidirectional,
        DmaAttrs::NONE,
    );
    assert!(pristine(&d));
}

#[test]
fn a_whole_segment_at_an_odd_half_page_fits_in_every_release_but_6_3_to_6_8() {
    use crate::types::Choice;
    for &release in Release::ALL {
        let fits = release != Release::Linux6_3;
        let mem = machine();
        let d = direct(&mem, cfg(release), false);
        let dev = dev32(true);
        let mut r = Recorder::new(64);
        // At page offset 0x800, 6.3–6.8 keep bit 11 of the original (mappings of a page or more
        // are "page aligned" relative to it), so the run must start at an odd slot: 127 slots at
        // most. Before, the page alignment was of the slot (a stride from an aligned start, and
        // no comparison without a min_align_mask); from 6.9 it is again.
        let got = d.map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH + 0x800),
            IO_TLB_MAX_MAPPING,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
        assert_eq!(got.is_ok(), fits, "{}", release.name());
        if let Ok(a) = got {
            d.unmap_page(
                &mut r,
                &dev,
                a,
                IO_TLB_MAX_MAPPING,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            );
        }
        assert!(pristine(&d));
        let mut nvme = dev.clone();
        nvme.min_align_mask = 0xfff;
        let s = d.swiotlb().unwrap();
        let want = if release >= Release::Linux6_0 {
            IO_TLB_MAX_MAPPING - 4096
        } else {
            IO_TLB_MAX_MAPPING
        };
        assert_eq!(s.max_mapping_size(&nvme), want);
        assert_eq!(s.max_mapping_size(&dev), IO_TLB_MAX_MAPPING);
    }
}

#[test]
fn batched_to_device_unmap_of_a_bounce_buffer_waits_only_at_the_end() {
    let mem = machine();
    let d = direct(&mem, cfg(Release::Linux6_3), true);
    let dev = dev32(false);
    let mut r = Recorder::new(64);
    let dma = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH),
            4096,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    let mut r = Recorder::new(64);
    d.unmap_page(
        &mut r,
        &dev,
        dma,
        4096,
        DmaDirection::ToDevice,
        DmaAttrs::NONE,
    );
    // Nothing to invalidate and nothing to copy out: just the release and the call's flush.
    assert_eq!(r.events, vec!["spin_lock", "barrier"]);
    assert!(pristine(&d));
}

#[test]
fn what_map_copies_in_changed_in_4_11_5_17_and_5_18() {
    use crate::types::Choice;
    // Bounce copies at map (an unmap with SKIP_CPU_SYNC copies nothing back), per release, for
    // FROM_DEVICE, and for TO_DEVICE under DMA_ATTR_SKIP_CPU_SYNC.
    let copies = |release: Release, dir: DmaDirection, attrs: DmaAttrs| {
        let mem = machine();
        let d = direct(&mem, cfg(release), false);
        let dev = dev32(true);
        let mut r = Recorder::new(64);
        let a = d
            .map_page(&mut r, &dev, PhysAddr(HIGH), 512, dir, attrs)
            .unwrap();
        let n = r.count_of(Counter::BounceCopy);
        d.unmap_page(&mut r, &dev, a, 512, dir, DmaAttrs::SKIP_CPU_SYNC);
        assert!(pristine(&d));
        n
    };
    let got: Vec<_> = Release::ALL
        .iter()
        .map(|&rel| {
            (
                rel.name(),
                copies(rel, DmaDirection::FromDevice, DmaAttrs::NONE),
                copies(rel, DmaDirection::ToDevice, DmaAttrs::SKIP_CPU_SYNC),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("3.6", 0, 1),
            ("4.11", 0, 0),
            ("5.0", 0, 0),
            ("5.12", 0, 0),
            ("5.17", 1, 0),
            ("5.18", 1, 1),
            ("6.0", 1, 1),
            ("6.3", 1, 1),
            ("6.9", 1, 1),
        ]
    );
}

#[test]
fn unmap_frees_what_the_caller_says_until_5_12_then_what_map_claimed() {
    // Map 8 KiB (4 slots), unmap saying 2 KiB: before 5.12 one slot goes back and three leak;
    // from 5.12 the slot's recorded alloc_size frees all four.
    for (release, left) in [(Release::Linux5_0, 3), (Release::Linux5_12, 0)] {
        let mem = machine();
        let d = direct(&mem, cfg(release), false);
        let dev = dev32(true);
        let mut r = Recorder::new(64);
        let a = d
            .map_page(
                &mut r,
                &dev,
                PhysAddr(HIGH),
                8192,
                DmaDirection::ToDevice,
                DmaAttrs::NONE,
            )
            .unwrap();
        assert_eq!(d.swiotlb().unwrap().pool().table.borrow().used(), 4);
        d.unmap_page(
            &mut r,
            &dev,
            a,
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        );
        assert_eq!(
            d.swiotlb().unwrap().pool().table.borrow().used(),
            left,
            "{}",
            release.name()
        );
    }
}

#[test]
fn a_search_that_would_spin_is_a_mapping_error_naming_it() {
    // NVMe-style device, original at bit 11: the run must start at an odd slot. With 6.0's
    // rules and every odd slot taken, the kernel's loop never ends; the model reports it.
    let mem = machine();
    let mut c = cfg(Release::Linux6_0);
    c.areas = Areas::Exact(1);
    let d = direct(&mem, c, false);
    let mut dev = dev32(true);
    dev.min_align_mask = 0xfff;
    let mut r = Recorder::new(64);
    // 2 KiB mappings of originals at odd half pages take slots 1, 3, 5, ...: half the pool.
    let n = d.swiotlb().unwrap().pool().nslabs();
    for i in 0..n / 2 {
        let o = PhysAddr(HIGH + (i as u64) * 4096 + 0x800);
        d.map_page(
            &mut r,
            &dev,
            o,
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    }
    // Two at even half pages take slots 0 and 2 and leave the index at 3, so the next search
    // starts at 4: it steps to 5 and strides through the taken odd slots for ever.
    for o in [0x90_0000, 0x91_0000] {
        d.map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH + o),
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    }
    let e = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH + 0x80_0800),
            100,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap_err();
    assert!(e.to_string().contains("never ends"), "{e}");
    // 6.3's bounded pass says the pool is full instead.
    let mut c = cfg(Release::Linux6_3);
    c.areas = Areas::Exact(1);
    let d = direct(&mem, c, false);
    for i in 0..n / 2 {
        let o = PhysAddr(HIGH + (i as u64) * 4096 + 0x800);
        d.map_page(
            &mut r,
            &dev,
            o,
            2048,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap();
    }
    let e = d
        .map_page(
            &mut r,
            &dev,
            PhysAddr(HIGH + 0x80_0800),
            100,
            DmaDirection::ToDevice,
            DmaAttrs::NONE,
        )
        .unwrap_err();
    assert!(e.to_string().contains("buffer is full"), "{e}");
}

/// Two CPUs bounce one buffer each (4 KB: two slots) through one pool, arriving at the same
/// moments. Costs: 100 ns of `swiotlb_tbl_map_single` / `_unmap_single` before the lock, 40 ns
/// of taking it, and under it 3 ns a search step and 2 ns a `list[]` entry written.
///
/// By hand, under 3.6's one `io_tlb_lock`: both reach the lock at 140 ns; CPU 0 owns it for its
/// one search step and two entries, [140, 147); CPU 1 spins those 7 ns and claims slots 2-3 in
/// [147, 154). CPU 0's unmap locks at 287 and rewrites its two entries (slots 2-3 are in use):
/// ends at 291. CPU 1's locks at 294 (free since 291), rewrites its two, then merges the free
/// run below it (slots 1 and 0): 8 ns, ends at 302. Under 6.0 with two areas, each CPU claims
/// the first slots of its own area under its own lock and neither waits: both end at 291.
#[test]
fn two_cpus_bouncing_wait_the_overlap_of_one_lock_and_never_with_areas() {
    use crate::hw::model::{Model, ModelParams};
    use crate::smp::{self, Body};
    let mut params = ModelParams::default();
    for (key, ns) in [
        (SwKey::SwiotlbTblMapSingle, 100),
        (SwKey::SwiotlbTblUnmapSingle, 100),
        (SwKey::SpinLockIrqsave, 40),
        (SwKey::SwiotlbSearchStep, 3),
        (SwKey::SwiotlbSlotUpdate, 2),
    ] {
        params.sw.insert(key.name().to_string(), ns * 1000);
    }
    for (release, areas, slots, ends, spins) in [
        (Release::Linux3_6, 1, [0, 2], [291_000, 302_000], [0, 7_000]),
        (Release::Linux6_0, 2, [0, 1024], [291_000, 291_000], [0, 0]),
    ] {
        let mem = machine();
        let cfg = SwiotlbConfig {
            size: 4 << 20,
            areas: Areas::Exact(areas),
            release,
            ..SwiotlbConfig::default()
        };
        let lib = Swiotlb::new(&Model::new(params.clone()), mem.clone(), &cfg).unwrap();
        let bodies: Vec<Body<(u64, u64, usize)>> = (0..2u32)
            .map(|cpu| {
                let lib = &lib;
                let params = params.clone();
                let body: Body<(u64, u64, usize)> = Box::new(move |c| {
                    let mut m = Model::new(params);
                    m.set_cpu(c);
                    m.set_processor(cpu);
                    let dev = dev32(true);
                    let orig = PhysAddr(HIGH + u64::from(cpu) * 0x10000);
                    let dir = DmaDirection::ToDevice;
                    let tlb = lib
                        .tbl_map_single(&mut m, &dev, orig, 4096, 4096, 0, dir, DmaAttrs::NONE)
                        .unwrap();
                    let slot = lib.pool().slot_index(tlb).unwrap();
                    lib.tbl_unmap_single(&mut m, &dev, tlb, 4096, dir, DmaAttrs::NONE);
                    let spun = m
                        .ledger()
                        .stacks()
                        .iter()
                        .filter(|s| {
                            s.stack
                                .last()
                                .is_some_and(|f| f.starts_with("(spinning on"))
                        })
                        .map(|s| s.self_ps)
                        .sum();
                    (m.now_ps(), spun, slot)
                });
                body
            })
            .collect();
        let r = smp::run(bodies).unwrap();
        assert_eq!(
            [r[0].2, r[1].2],
            slots,
            "{release:?}: the slots each CPU got"
        );
        assert_eq!([r[0].0, r[1].0], ends, "{release:?}: when each CPU ends");
        assert_eq!([r[0].1, r[1].1], spins, "{release:?}: what each CPU spun");
        assert!(lib.pool().is_pristine(), "{release:?}");
    }
}
