//! The 2012 paths: translation counts per call path under both policies, overflow buffer, bytes.

use super::*;
use crate::dma::mapping::DmaApi;
use crate::dma::swiotlb::IO_TLB_MAX_MAPPING;
use crate::dma::swiotlb::tests::{HIGH, LOW, machine, pattern, read};
use crate::hw::Counter;
use crate::hw::recorder::Recorder;
use crate::mm::physmem::{NodeRange, PhysMem};

fn ops(mem: &SharedPhysMem, policy: &str, size: u64) -> Swiotlb2012Ops {
    let r = Recorder::new(64);
    Swiotlb2012Ops::new(
        &r,
        mem.clone(),
        &Swiotlb2012Config {
            size,
            ..Swiotlb2012Config::default()
        },
        <SwiotlbAddr as crate::types::Choice>::parse(policy)
            .unwrap()
            .bookkeeping(&r, PhysAddrKind::Call),
    )
    .unwrap()
}

/// ixgbe's NIC: 64-bit DMA, coherent (x86).
fn nic() -> Device {
    Device::new("ixgbe", true, 64)
}

fn phys_addr_calls(r: &Recorder) -> u64 {
    r.count_of(Counter::PhysAddrCall)
}

const FROM: DmaDirection = DmaDirection::FromDevice;
const TO: DmaDirection = DmaDirection::ToDevice;
const NONE: DmaAttrs = DmaAttrs::NONE;

/// One forwarded packet as ixgbe handles it in 2012, against buffers at `rx` and `tx`: the rx
/// buffer is synced for the CPU and handed back to the device (page reuse), the tx buffer is
/// mapped, checked and, at tx completion, unmapped. Returns the recorder of that packet.
fn ixgbe_packet(o: &mut Swiotlb2012Ops, rx: DmaAddr, tx: PhysAddr) -> Recorder {
    let dev = nic();
    let mut r = Recorder::new(64);
    o.sync_single_for_cpu(&mut r, &dev, rx, 2048, FROM);
    o.sync_single_for_device(&mut r, &dev, rx, 2048, FROM);
    let t = o.map_page(&mut r, &dev, tx, 60, TO, NONE).unwrap();
    assert!(!o.mapping_error(&mut r, &dev, t));
    o.unmap_page(&mut r, &dev, t, 60, TO, NONE);
    r
}

#[test]
fn ixgbe_packet_makes_seven_phys_addr_calls_under_virt_and_none_under_phys() {
    for (policy, want) in [("virt", 7), ("phys", 0)] {
        let mem = machine();
        let mut o = ops(&mem, policy, 4 << 20);
        // Packet buffers above the pool (node 1): the NIC reaches them, nothing is bounced.
        assert!(o.pool().start.0 < HIGH);
        let r = ixgbe_packet(&mut o, DmaAddr(HIGH), PhysAddr(HIGH + 0x10_0000));
        assert_eq!(phys_addr_calls(&r), want, "{policy}");
        assert!(r.copies.is_empty());
        assert_eq!(r.count_of(Counter::SpinLock), 0);
        if policy == "virt" {
            let at = |s: &str| r.count_at(s, Counter::PhysAddrCall);
            assert_eq!(
                at(
                    "swiotlb_sync_single_for_cpu > swiotlb_sync_single > is_swiotlb_buffer > __phys_addr"
                ),
                2
            );
            assert_eq!(
                at(
                    "swiotlb_sync_single_for_device > swiotlb_sync_single > is_swiotlb_buffer > __phys_addr"
                ),
                2
            );
            assert_eq!(
                at("swiotlb_unmap_page > unmap_single > is_swiotlb_buffer > __phys_addr"),
                2
            );
            assert_eq!(at("swiotlb_dma_mapping_error > __phys_addr"), 1);
        } else {
            // is_swiotlb_buffer is inlined: no frame of its own.
            assert!(r.frames.iter().all(|f| !f.contains("is_swiotlb_buffer")));
            assert!(
                r.frames
                    .contains(&"swiotlb_unmap_page > unmap_single".to_string())
            );
        }
    }
}

#[test]
fn below_the_pool_is_swiotlb_buffer_stops_after_one_translation() {
    // Memory below the pool: node 0 starts low and the pool is carved from node 1.
    let mem = PhysMem::new(vec![
        NodeRange {
            node: 0,
            start: PhysAddr(0x100_0000),
            size: 16 << 20,
        },
        NodeRange {
            node: 1,
            start: PhysAddr(LOW),
            size: 64 << 20,
        },
    ])
    .shared();
    let r0 = Recorder::new(64);
    let o = Swiotlb2012Ops::new(
        &r0,
        mem,
        &Swiotlb2012Config {
            size: 4 << 20,
            node: 1,
            force: false,
            ..Default::default()
        },
        <SwiotlbAddr as crate::types::Choice>::parse("virt")
            .unwrap()
            .bookkeeping(&r0, PhysAddrKind::Call),
    )
    .unwrap();
    let mut r = Recorder::new(64);
    o.unmap_page(&mut r, &nic(), DmaAddr(0x100_0000), 60, TO, NONE);
    assert_eq!(phys_addr_calls(&r), 1);
}

#[test]
fn bounced_paths_translate_twice_more_at_map_and_lock_in_map_and_unmap() {
    for (policy, map_calls, unmap_calls, sync_calls) in [("virt", 2, 2, 2), ("phys", 0, 0, 0)] {
        let mem = machine();
        let o = ops(&mem, policy, 4 << 20);
        let dev = Device::new("dev32", true, 32);
        let buf = PhysAddr(HIGH + 0x345);
        let data = pattern(1514, 9);
        mem.borrow_mut().write(buf, &data);

        let mut r = Recorder::new(64);
        let dma = o
            .map_page(&mut r, &dev, buf, 1514, DmaDirection::Bidirectional, NONE)
            .unwrap();
        assert_eq!(phys_addr_calls(&r), map_calls, "{policy} map");
        if policy == "virt" {
            assert_eq!(
                r.count_at("swiotlb_map_page > __phys_addr", Counter::PhysAddrCall),
                2
            );
        }
        assert_eq!(r.count_of(Counter::SpinLock), 1);
        assert_eq!(read(&mem, dma.0, 1514), data);

        let mut r = Recorder::new(64);
        mem.borrow_mut().write(PhysAddr(dma.0), &[0xab; 100]);
        o.sync_single_for_cpu(&mut r, &dev, dma, 1514, DmaDirection::Bidirectional);
        assert_eq!(phys_addr_calls(&r), sync_calls, "{policy} sync");
        assert_eq!(r.count_of(Counter::SpinLock), 0);
        assert_eq!(read(&mem, buf.0, 100), vec![0xab; 100]);

        let mut r = Recorder::new(64);
        o.unmap_page(&mut r, &dev, dma, 1514, DmaDirection::Bidirectional, NONE);
        assert_eq!(phys_addr_calls(&r), unmap_calls, "{policy} unmap");
        assert_eq!(r.count_of(Counter::SpinLock), 1);
        assert_eq!(r.copies, vec![1514]);
        assert!(o.pool().is_pristine());
    }
}

#[test]
fn full_pool_hands_out_the_overflow_buffer_and_mapping_error_sees_it() {
    for policy in ["virt", "phys"] {
        let mem = machine();
        let o = ops(&mem, policy, IO_TLB_MAX_MAPPING);
        let dev = Device::new("dev32", true, 32);
        let mut r = Recorder::new(64);
        let a = o
            .map_page(&mut r, &dev, PhysAddr(HIGH), IO_TLB_MAX_MAPPING, TO, NONE)
            .unwrap();
        assert!(!o.mapping_error(&mut r, &dev, a));
        // Full: a small mapping gets the overflow buffer, which the driver must check for.
        r.reset();
        let b = o
            .map_page(&mut r, &dev, PhysAddr(HIGH + 0x100_0000), 4096, TO, NONE)
            .unwrap();
        assert_eq!(b.0, o.overflow_buffer().0);
        assert!(o.mapping_error(&mut r, &dev, b), "{policy}");
        if policy == "virt" {
            // map_single's io_tlb_start, the overflow buffer's address, mapping_error's.
            assert_eq!(phys_addr_calls(&r), 3);
        }
        // Unmapping it (a driver that did not check) touches nothing.
        o.unmap_page(&mut r, &dev, b, 4096, TO, NONE);
        // Larger than the overflow buffer: 3.6 panics; here it is an error value.
        let e = o
            .map_page(
                &mut r,
                &dev,
                PhysAddr(HIGH),
                IO_TLB_OVERFLOW + 1,
                FROM,
                NONE,
            )
            .unwrap_err();
        assert!(format!("{e}").contains("panics"), "{e}");
        o.unmap_page(&mut r, &dev, a, IO_TLB_MAX_MAPPING, TO, NONE);
        assert!(o.pool().is_pristine());
    }
}

#[test]
fn dma_api_mapping_error_reaches_the_ops() {
    let mem = machine();
    let o = ops(&mem, "virt", IO_TLB_MAX_MAPPING);
    let overflow = DmaAddr(o.overflow_buffer().0);
    let api = DmaApi::new(&Recorder::new(64), nic(), o);
    let mut r = Recorder::new(64);
    assert!(api.mapping_error(&mut r, overflow));
    assert!(!api.mapping_error(&mut r, DmaAddr::MAPPING_ERROR));
    // dma_mapping_error() is inline: the first frame is the ops function.
    assert_eq!(r.frames[0], "swiotlb_dma_mapping_error");
}

#[test]
fn map_sg_bounces_what_the_device_cannot_reach_and_unwinds_on_failure() {
    let mem = machine();
    let o = ops(&mem, "virt", IO_TLB_MAX_MAPPING);
    let dev = Device::new("dev32", true, 32);
    let mut sgt = SgTable::from_contiguous(PhysAddr(HIGH), 16 * 4096, &[4096]);
    let mut r = Recorder::new(64);
    assert_eq!(o.map_sg(&mut r, &dev, &mut sgt, TO, NONE).unwrap(), 16);
    // Two translations per bounced entry.
    assert_eq!(phys_addr_calls(&r), 32);
    o.sync_sg_for_cpu(&mut r, &dev, &sgt, TO);
    o.unmap_sg(&mut r, &dev, &mut sgt, TO, NONE);
    assert!(o.pool().is_pristine());
    // 80 pages do not fit in a 256 KiB pool.
    let mut big = SgTable::from_contiguous(PhysAddr(HIGH), 80 * 4096, &[4096]);
    assert!(o.map_sg(&mut r, &dev, &mut big, TO, NONE).is_err());
    assert_eq!(big.nents, 0);
    assert!(o.pool().is_pristine());
}

#[test]
fn forced_bouncing_bounces_reachable_buffers() {
    let mem = machine();
    let r0 = Recorder::new(64);
    let o = Swiotlb2012Ops::new(
        &r0,
        mem.clone(),
        &Swiotlb2012Config {
            size: 1 << 20,
            node: 0,
            force: true,
            ..Default::default()
        },
        PhysAddrs,
    )
    .unwrap();
    let mut r = Recorder::new(64);
    let a = o
        .map_page(&mut r, &nic(), PhysAddr(HIGH), 100, TO, NONE)
        .unwrap();
    assert!(o.pool().slot_index(PhysAddr(a.0)).is_some());
    o.unmap_page(&mut r, &nic(), a, 100, TO, NONE);
    assert!(o.pool().is_pristine());
}

#[test]
fn bad_pool_sizes_are_errors_not_panics() {
    let r = Recorder::new(64);
    let e = Swiotlb2012Ops::new(
        &r,
        machine(),
        &Swiotlb2012Config {
            size: 1000,
            ..Swiotlb2012Config::default()
        },
        PhysAddrs,
    )
    .unwrap_err();
    assert_eq!(e, SwiotlbError::BadSize(1000));
}

#[test]
fn model_time_and_per_symbol_profile_follow_the_calls_made() {
    use crate::hw::model::{Model, ModelParams};
    let mut params = ModelParams::default();
    for (k, ps) in [
        ("__phys_addr", 1000),
        ("is_swiotlb_buffer", 300),
        ("insn.swiotlb_sync_single", 10),
        ("insn.unmap_single", 10),
        ("insn.swiotlb_dma_mapping_error", 10),
    ] {
        params.sw.insert(k.to_string(), ps);
    }
    // Test input: the groups as the x86-2012-ixgbe profile counts them.
    let insns = InsnGroups {
        frame: 4,
        bug_on_dir: 2,
        saved_reg: 3,
        call: 2,
        test_result: 2,
        range_check: 4,
        compare_result: 3,
        sync_single_live: 5,
        unmap_single_live: 4,
        mapping_error_live: 1,
    };
    let mut per_policy = Vec::new();
    for policy in ["virt", "phys"] {
        let mem = machine();
        let m = Model::new(params.clone());
        let o = Swiotlb2012Ops::new(
            &m,
            mem,
            &Swiotlb2012Config {
                size: 1 << 20,
                insns,
                ..Swiotlb2012Config::default()
            },
            <SwiotlbAddr as crate::types::Choice>::parse(policy)
                .unwrap()
                .bookkeeping(&m, PhysAddrKind::Call),
        )
        .unwrap();
        let mut m = m;
        let dev = nic();
        let (rx, tx) = (DmaAddr(HIGH), PhysAddr(HIGH + 0x10_0000));
        o.sync_single_for_cpu(&mut m, &dev, rx, 2048, FROM);
        o.sync_single_for_device(&mut m, &dev, rx, 2048, FROM);
        let t = o.map_page(&mut m, &dev, tx, 60, TO, NONE).unwrap();
        assert!(!o.mapping_error(&mut m, &dev, t));
        o.unmap_page(&mut m, &dev, t, 60, TO, NONE);
        let stacks = m.ledger().stacks();
        let self_time = |sym: &str| -> u64 {
            stacks
                .iter()
                .filter(|s| s.stack.last() == Some(&sym))
                .map(|s| s.self_ps)
                .sum()
        };
        // Frame and BUG_ON (6 instructions) in both; virt adds 5 saved registers, the call and the
        // result test (19), phys the inlined range check (4). Two calls per packet.
        let (sync, unmap, err) = if policy == "virt" {
            (2 * 10 * (6 + 19), 10 * (6 + 16), 10 * (7 + 5))
        } else {
            (2 * 10 * (6 + 4), 10 * (6 + 4), 10 * 7)
        };
        assert_eq!(self_time("swiotlb_sync_single"), sync, "{policy}");
        assert_eq!(self_time("unmap_single"), unmap, "{policy}");
        assert_eq!(self_time("swiotlb_dma_mapping_error"), err, "{policy}");
        per_policy.push((
            m.now_ps(),
            self_time("__phys_addr"),
            self_time("is_swiotlb_buffer"),
        ));
    }
    // virt: 7 translations and 3 out-of-line is_swiotlb_buffer calls; phys: neither.
    assert_eq!(per_policy[0], (7000 + 900 + 500 + 220 + 120, 7000, 900));
    assert_eq!(per_policy[1], (200 + 100 + 70, 0, 0));
}
