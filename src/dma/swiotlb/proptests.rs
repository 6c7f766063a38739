//! Property tests: random sizes, offsets, alignments and directions through the bounce paths
//! leave exactly the bytes the kernel promises on each side, and give every slot back.

use super::tests::{HIGH, machine, pattern, read};
use super::x86_2012::{Swiotlb2012Config, Swiotlb2012Ops, SwiotlbAddr};
use super::*;
use crate::arch::arm64::{Arm64, DirRules};
use crate::arch::x86::physaddr::PhysAddrKind;
use crate::dma::DmaMapOps;
use crate::dma::direct::DmaDirect;
use crate::dma::sync_policy::SyncRule;
use crate::hw::recorder::Recorder;
use proptest::prelude::*;

/// One mapping of a test case.
#[derive(Clone, Debug)]
struct Op {
    size: u64,
    offset: u64,
    dir: DmaDirection,
    /// The device's write into its copy: (offset into the mapping, length), clamped to the size.
    write: (u64, u64),
    seed: u8,
}

fn dir() -> impl Strategy<Value = DmaDirection> {
    prop_oneof![
        Just(DmaDirection::ToDevice),
        Just(DmaDirection::FromDevice),
        Just(DmaDirection::Bidirectional),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop_oneof![
            1u64..=4096,
            1u64..=IO_TLB_MAX_MAPPING,
            IO_TLB_MAX_MAPPING - 8192..=IO_TLB_MAX_MAPPING,
        ],
        0u64..4096,
        dir(),
        (0u64..IO_TLB_MAX_MAPPING, 0u64..8192),
        any::<u8>(),
    )
        .prop_map(|(size, offset, dir, write, seed)| Op {
            size,
            offset,
            dir,
            write,
            seed,
        })
}

/// Where op `i`'s buffer lives: its own 1 MiB of high memory, so buffers never overlap.
fn buf_of(i: usize, op: &Op) -> u64 {
    HIGH + (i as u64) * 0x10_0000 + op.offset
}

/// Drive `ops` through `map`/`unmap` of some implementation and check the bytes. `map` returns
/// `None` for a mapping error; `slot_ok` says whether the mapping must have succeeded.
fn check_round_trips(
    mem: &SharedPhysMem,
    ops: &[Op],
    copies_in_from_device: bool,
    mut map: impl FnMut(&mut Recorder, PhysAddr, &Op) -> Option<DmaAddr>,
    mut unmap: impl FnMut(&mut Recorder, DmaAddr, &Op),
    must_map: impl Fn(&Op) -> bool,
) -> Result<(), TestCaseError> {
    let mut r = Recorder::new(64);
    let mut live = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        let buf = buf_of(i, o);
        let data = pattern(o.size as usize, o.seed);
        mem.borrow_mut().write(PhysAddr(buf), &data);
        let Some(dma) = map(&mut r, PhysAddr(buf), o) else {
            prop_assert!(!must_map(o), "op {i} {o:?} failed to map");
            continue;
        };
        let copies_in = copies_in_from_device || o.dir != DmaDirection::FromDevice;
        if copies_in {
            prop_assert_eq!(read(mem, dma.0, o.size as usize), data.clone());
        }
        // The device writes part of its copy.
        let w_off = o.write.0 % o.size;
        let w_len = o.write.1.min(o.size - w_off);
        let dev_bytes = pattern(w_len as usize, o.seed ^ 0x5a);
        mem.borrow_mut().write(PhysAddr(dma.0 + w_off), &dev_bytes);
        live.push((i, dma, data));
    }
    for (i, dma, data) in live {
        let o = &ops[i];
        let buf = buf_of(i, o);
        // What the CPU is promised after unmap: the device's view for FROM_DEVICE and
        // BIDIRECTIONAL (whatever the slot holds, stale bytes included), its own data otherwise.
        let slot_now = read(mem, dma.0, o.size as usize);
        unmap(&mut r, dma, o);
        let want = if o.dir == DmaDirection::ToDevice {
            data
        } else {
            slot_now
        };
        prop_assert_eq!(read(mem, buf, o.size as usize), want, "op {} {:?}", i, o);
    }
    Ok(())
}

fn direct(
    mem: &SharedPhysMem,
    release: Release,
    areas: u32,
    batched: bool,
    size: u64,
) -> DmaDirect {
    let r = Recorder::new(64);
    let sync = if batched {
        SyncRule::Batched
    } else {
        SyncRule::PerEntry
    };
    let cfg = SwiotlbConfig {
        size,
        areas: if release.has_areas() {
            Areas::Exact(areas)
        } else {
            Areas::Exact(1)
        },
        release,
        ..SwiotlbConfig::default()
    };
    let s = Swiotlb::new(&r, mem.clone(), &cfg).unwrap();
    DmaDirect::new(&r, Arm64::new(DirRules::Since5_19), sync).with_swiotlb(s)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn dma_direct_bounce_keeps_the_promised_bytes(
        ops in proptest::collection::vec(op(), 1..6),
        v6 in any::<bool>(),
        coherent in any::<bool>(),
        batched in any::<bool>(),
        nvme in any::<bool>(),
        areas in prop_oneof![Just(1u32), Just(2), Just(4)],
        cpu in 0u32..8,
    ) {
        let release = if v6 { Release::Linux6_3 } else { Release::Linux3_6 };
        let mem = machine();
        let d = std::cell::RefCell::new(direct(&mem, release, areas, batched, 4 << 20));
        let mut dev = Device::new("dev32", coherent, 32);
        if nvme {
            dev.min_align_mask = 0xfff;
        }
        let max = d.borrow().swiotlb().unwrap().max_mapping_size(&dev);
        let offset_of = |o: &Op| if v6 { o.offset & dev.min_align_mask & (IO_TLB_SIZE - 1) } else { 0 };
        check_round_trips(
            &mem,
            &ops,
            release.copies_at_map(DmaDirection::FromDevice, DmaAttrs::NONE),
            |r, buf, o| {
                // The CPU the maps run on picks the first area tried.
                r.cpu = cpu as usize;
                // The only error there is: DmaError::MappingError.
                d.borrow_mut()
                    .map_page(r, &dev, buf, o.size, o.dir, DmaAttrs::NONE)
                    .ok()
            },
            |r, dma, o| d.borrow_mut().unmap_page(r, &dev, dma, o.size, o.dir, DmaAttrs::NONE),
            // Few enough mappings that they always fit, unless one is too big with its offset, or
            // (6.0) it must start at an odd slot to keep bit 11 of its original — for a page or
            // more, or under a 4 KiB min_align_mask — and so cannot have a whole segment.
            |o| {
                let total = o.size + offset_of(o);
                let odd = v6 && o.offset & 0x800 != 0 && (total >= 4096 || nvme);
                let limit = if odd { IO_TLB_MAX_MAPPING - IO_TLB_SIZE } else { IO_TLB_MAX_MAPPING };
                total <= limit && o.size <= max
            },
        )?;
        let d = d.borrow();
        let pool = d.swiotlb().unwrap().pool();
        prop_assert!(pool.is_pristine());
        prop_assert_eq!(
            pool.table.borrow().slots.iter().map(|s| s.list).collect::<Vec<_>>(),
            pool::SlotTable::fresh_lists(pool.nslabs())
        );
    }

    #[test]
    fn swiotlb_2012_bounce_keeps_the_promised_bytes(
        ops in proptest::collection::vec(op(), 1..6),
        virt in any::<bool>(),
    ) {
        let mem = machine();
        let r0 = Recorder::new(64);
        let book = if virt { SwiotlbAddr::Virt } else { SwiotlbAddr::Phys }.bookkeeping(&r0, PhysAddrKind::Call);
        let o = std::cell::RefCell::new(
            Swiotlb2012Ops::new(&r0, mem.clone(), &Swiotlb2012Config { size: 4 << 20, ..Default::default() }, book).unwrap(),
        );
        let dev = Device::new("dev32", true, 32);
        check_round_trips(
            &mem,
            &ops,
            false,
            |r, buf, op| {
                let a = o.borrow_mut().map_page(r, &dev, buf, op.size, op.dir, DmaAttrs::NONE).ok()?;
                (!o.borrow_mut().mapping_error(r, &dev, a)).then_some(a)
            },
            |r, dma, op| o.borrow_mut().unmap_page(r, &dev, dma, op.size, op.dir, DmaAttrs::NONE),
            |_| true,
        )?;
        prop_assert!(o.borrow().pool().is_pristine());
    }

    #[test]
    fn exhaustion_is_a_mapping_error_and_frees_back_to_a_fresh_pool(
        sizes in proptest::collection::vec(1u64..=IO_TLB_MAX_MAPPING + 4096, 1..40),
        v6 in any::<bool>(),
    ) {
        let release = if v6 { Release::Linux6_3 } else { Release::Linux3_6 };
        let mem = machine();
        let d = direct(&mem, release, 1, false, 4 * IO_TLB_MAX_MAPPING);
        let dev = Device::new("dev32", true, 32);
        let mut r = Recorder::new(64);
        let mut live = Vec::new();
        let mut failed = 0;
        for (i, &size) in sizes.iter().enumerate() {
            let buf = PhysAddr(HIGH + i as u64 * 0x10_0000);
            match d.map_page(&mut r, &dev, buf, size, DmaDirection::ToDevice, DmaAttrs::NONE) {
                Ok(a) => live.push((a, size)),
                Err(DmaError::MappingError(_)) => failed += 1,
            }
            if size > IO_TLB_MAX_MAPPING {
                prop_assert!(live.last().map(|l| l.1) != Some(size), "over 256 KiB mapped");
            }
        }
        let used: u64 = live.iter().map(|l| nr_slots(l.1)).sum();
        prop_assert!(used <= 4 * IO_TLB_SEGSIZE as u64);
        prop_assert_eq!(live.len() + failed, sizes.len());
        for (a, size) in live {
            d.unmap_page(&mut r, &dev, a, size, DmaDirection::ToDevice, DmaAttrs::NONE);
        }
        prop_assert!(d.swiotlb().unwrap().pool().is_pristine());
    }
}
