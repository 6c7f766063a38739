//! Seed 002's platform end to end: a 1 MB streaming buffer on a non-coherent device of the
//! `zynq7000` profile, synced through the DMA API (dma_map_single, dma_sync_single_for_*), with
//! the exact operations each call issues at L1 (cache-v7.S) and at the PL310 (cache-l2x0.c).

use dmasim::hw::{Counter, Hw};
use dmasim::mm::physmem::NodeRange;
use dmasim::policy::KernelVersion;
use dmasim::scenario::Scenario;
use dmasim::setup::{Machine, setup_dma_ops};
use dmasim::types::{DmaAttrs, DmaDirection, PhysAddr};

const SCENARIO: &str = include_str!("../scenarios/zynq-streaming.toml");
const MB: u64 = 1 << 20;
const BUF: PhysAddr = PhysAddr(0x1000_0000);

/// The counts one call makes, on every modelled release from 3.16 to 4.0.
fn counts_of(kernel: (u32, u32), call: &str, dir: DmaDirection) -> [u64; Counter::N] {
    let mut s = Scenario::parse("s.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    s.set_kernel(KernelVersion(kernel.0, kernel.1)).unwrap();
    let node = NodeRange {
        node: 0,
        start: BUF,
        size: 4 * MB,
    };
    let mut m = Machine::boot(&s.profile, vec![node]);
    let mut api = setup_dma_ops(&mut m, &s.device_setup(), 1).unwrap();
    let addr = api
        .map_single(&mut m.hw, BUF, MB, dir, DmaAttrs::default())
        .unwrap();
    m.hw.clear_ledger();
    let t0 = m.hw.now_ps();
    match call {
        "for_device" => api.sync_single_for_device(&mut m.hw, addr, MB, dir),
        "for_cpu" => api.sync_single_for_cpu(&mut m.hw, addr, MB, dir),
        _ => unreachable!(),
    }
    let took = m.hw.now_ps() - t0;
    let totals = m.hw.ledger.totals();
    let maint: u64 = [
        Counter::CacheCleanLine,
        Counter::CacheInvalLine,
        Counter::CacheCleanInvalLine,
        Counter::OuterCleanLine,
        Counter::OuterInvalLine,
        Counter::OuterCleanInvalLine,
        Counter::OuterSync,
    ]
    .iter()
    .map(|&c| totals[c as usize])
    .sum();
    // Time passes exactly when something was issued (the profile prices every operation).
    assert_eq!(maint > 0, took > 0, "{call} {dir}: {took} ps");
    totals
}

fn n(t: &[u64; Counter::N], c: Counter) -> u64 {
    t[c as usize]
}

#[test]
fn for_device_to_device_cleans_every_line_at_l1_and_l2() {
    for k in [(3, 16), (3, 19), (4, 0)] {
        let t = counts_of(k, "for_device", DmaDirection::ToDevice);
        assert_eq!(n(&t, Counter::CacheCleanLine), 32768, "{k:?}");
        assert_eq!(n(&t, Counter::OuterCleanLine), 32768, "{k:?}");
        assert_eq!(n(&t, Counter::OuterSync), 1, "{k:?}");
        // cache-v7.S's one `dsb st`; no full barrier, no other maintenance.
        assert_eq!(n(&t, Counter::Wmb), 1, "{k:?}");
        assert_eq!(n(&t, Counter::Barrier), 0, "{k:?}");
        assert_eq!(n(&t, Counter::CacheInvalLine), 0, "{k:?}");
        assert_eq!(n(&t, Counter::OuterInvalLine), 0, "{k:?}");
    }
}

#[test]
fn for_device_from_device_invalidates_at_l1_and_l2() {
    let t = counts_of((3, 19), "for_device", DmaDirection::FromDevice);
    assert_eq!(n(&t, Counter::CacheInvalLine), 32768);
    assert_eq!(n(&t, Counter::OuterInvalLine), 32768);
    assert_eq!(n(&t, Counter::CacheCleanLine), 0);
    assert_eq!(n(&t, Counter::OuterCleanLine), 0);
    assert_eq!(n(&t, Counter::OuterSync), 1);
    assert_eq!(n(&t, Counter::Wmb), 1);
}

#[test]
fn for_cpu_from_device_invalidates_and_for_cpu_to_device_does_nothing() {
    let t = counts_of((3, 19), "for_cpu", DmaDirection::FromDevice);
    assert_eq!(n(&t, Counter::CacheInvalLine), 32768);
    assert_eq!(n(&t, Counter::OuterInvalLine), 32768);
    assert_eq!(n(&t, Counter::OuterSync), 1);
    assert_eq!(n(&t, Counter::Wmb), 1);
    let t = counts_of((3, 19), "for_cpu", DmaDirection::ToDevice);
    assert_eq!(t.iter().sum::<u64>(), 0, "{t:?}");
}

#[test]
fn armv7_is_refused_before_3_16() {
    let mut s = Scenario::parse("s.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    let e = s.set_kernel(KernelVersion(3, 14)).unwrap_err();
    assert!(e.to_string().contains("3.16"), "{e}");
}

#[test]
fn bad_outer_cache_input_names_line_and_key() {
    use dmasim::platform::Profile;
    let good = include_str!("../profiles/zynq7000.toml");
    assert!(Profile::parse("z.toml", good).is_ok());
    for (from, to, key) in [
        (
            "size_kib = { value = 512",
            "size_kib = { value = 500",
            "outer_cache.size_kib.value",
        ),
        (
            "ways = { value = 8",
            "ways = { value = 6",
            "outer_cache.ways.value",
        ),
        (
            "ways = { value = 4",
            "ways = { value = 3",
            "cache.ways.value",
        ),
        (
            "revision = \"r3p2\"",
            "revision = \"r3p0\"",
            "outer_cache.revision",
        ),
        ("arch = \"armv7\"", "arch = \"arm64\"", "outer_cache"),
    ] {
        let text = good.replacen(from, to, 1);
        assert_ne!(text, good, "{from}");
        let e = Profile::parse("z.toml", &text).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}

#[test]
fn armv7_is_refused_after_4_0() {
    let mut s = Scenario::parse("s.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    let e = s.set_kernel(KernelVersion(4, 1)).unwrap_err();
    assert!(e.to_string().contains("4.0"), "{e}");
    assert!(s.set_kernel(KernelVersion(4, 0)).is_ok());
}

/// The functional cache model (`[cache_model]` of `zynq7000`): a TO_DEVICE clean of the 1 MB
/// block just after the program wrote all of it writes back every dirty line — the 1024 the
/// 32 KB L1 still holds into the PL310, then the 16384 the 512 KB PL310 holds to DDR (the
/// first 512 KB went to DDR as the PL310 evicted them during the writes) — and costs more than
/// the same clean again, with nothing written since, which writes back nothing.
#[test]
fn a_clean_after_a_write_costs_its_writebacks_and_a_second_clean_does_not() {
    use dmasim::hw::cache::Access;
    let s = Scenario::parse("s.toml", SCENARIO, std::path::Path::new(".")).unwrap();
    let node = NodeRange {
        node: 0,
        start: BUF,
        size: 4 * MB,
    };
    let mut m = Machine::boot(&s.profile, vec![node]);
    let mut api = setup_dma_ops(&mut m, &s.device_setup(), 1).unwrap();
    let dir = DmaDirection::ToDevice;
    let addr = api
        .map_single(&mut m.hw, BUF, MB, dir, DmaAttrs::default())
        .unwrap();
    let mut sync = |m: &mut Machine| {
        m.hw.clear_ledger();
        let t0 = m.hw.now_ps();
        api.sync_single_for_device(&mut m.hw, addr, MB, dir);
        (m.hw.now_ps() - t0, m.hw.ledger.totals())
    };
    m.hw.cpu_touch(Access::Write, BUF, MB);
    let (written, t) = sync(&mut m);
    assert_eq!(n(&t, Counter::L1Writeback), 1024);
    assert_eq!(n(&t, Counter::L2Writeback), 16384);
    assert_eq!(n(&t, Counter::CacheCleanLine), 32768);
    assert_eq!(n(&t, Counter::OuterCleanLine), 32768);
    let (again, t) = sync(&mut m);
    assert_eq!(n(&t, Counter::L1Writeback), 0);
    assert_eq!(n(&t, Counter::L2Writeback), 0);
    assert_eq!(n(&t, Counter::CacheCleanLine), 32768);
    assert!(again < written, "{again} ps vs {written} ps");
    // What the writebacks cost, from the profile's own keys: 16384 PL310 writebacks to DDR on
    // the CPU's time (atomic by-PA operations), and the L1's 1024 through its eviction buffer,
    // which the issue of the 32768 DCCMVACs hides only in part.
    let p = s.profile.model.caches.as_ref().unwrap();
    assert!(
        written - again >= 16384 * p.writeback_ps[1],
        "{written} - {again}"
    );
    // Reading the buffer leaves it clean: the next clean writes back nothing either.
    m.hw.cpu_touch(Access::Read, BUF, MB);
    let (read, t) = sync(&mut m);
    assert_eq!(n(&t, Counter::L1Writeback) + n(&t, Counter::L2Writeback), 0);
    assert_eq!(read, again);
}

/// The same through the streaming workload's `cpu` key: a program that writes the block before
/// each dma_sync_sg_for_device(TO_DEVICE) pays the writebacks on every call; one that touches
/// nothing pays only the bare operations.
#[test]
fn the_streaming_workload_says_what_the_cpu_does_between_transfers() {
    let run = |cpu: &str| {
        let text = SCENARIO
            .replace("direction = \"from_device\"", "direction = \"to_device\"")
            .replace(
                "iterations = 10",
                &format!("iterations = 3\ncpu = \"{cpu}\""),
            );
        let s = Scenario::parse("s.toml", &text, std::path::Path::new(".")).unwrap();
        let w = s.streaming().unwrap();
        dmasim::scenario::streaming::run(&s, w).unwrap()
    };
    let (wrote, none, read) = (run("write_all"), run("none"), run("read_all"));
    for r in [&wrote, &none, &read] {
        // The same operations were issued whatever the CPU did.
        assert_eq!(r.count(Counter::CacheCleanLine), 3 * 32768);
        assert_eq!(r.count(Counter::OuterCleanLine), 3 * 32768);
    }
    assert_eq!(wrote.count(Counter::L1Writeback), 3 * 1024);
    assert_eq!(wrote.count(Counter::L2Writeback), 3 * 16384);
    assert_eq!(
        none.count(Counter::L1Writeback) + none.count(Counter::L2Writeback),
        0
    );
    assert_eq!(
        read.count(Counter::L1Writeback) + read.count(Counter::L2Writeback),
        0
    );
    let mean = |r: &dmasim::scenario::streaming::RunResult| {
        r.call("dma_sync_sg_for_device").unwrap().mean_ns()
    };
    assert!(
        mean(&wrote) > mean(&none),
        "{} vs {}",
        mean(&wrote),
        mean(&none)
    );
    assert_eq!(mean(&read), mean(&none));
    // An unknown value is refused by name.
    let bad = SCENARIO.replace("iterations = 10", "iterations = 1\ncpu = \"scribble\"");
    let e = Scenario::parse("s.toml", &bad, std::path::Path::new(".")).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.cpu"), "{e}");
}
