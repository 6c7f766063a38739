//! Unit tests of the Model: the pipeline, the cache model's charges, the SMMU's timeline.

use super::*;
use crate::hw::test_support::{cmdq_issue, cmdq_wait};

pub(super) fn params(issue: u64, latency: u64, interval: u64, barrier: u64) -> ModelParams {
    let c = MaintCost {
        issue_ps: issue,
        latency_ps: latency,
        interval_ps: interval,
    };
    ModelParams {
        line_bytes: 64,
        maint: [Some(c), Some(c), Some(c)],
        barrier_ps: barrier,
        wmb_ps: Some(barrier / 2),
        line_transfer_ps: None,
        sw: BTreeMap::new(),
        smmu: None,
        copy: None,
        outer: None,
        caches: None,
        mem: None,
        dram_write_ps: None,
    }
}

/// The cache model's range operations as they were written first, line by line: every line
/// of the range stepped through the caches and the pipeline. Kept as the reference the
/// stepping of resident lines only must equal.
mod line_by_line {
    use super::super::*;

    pub fn cache_maint(m: &mut Model, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines == 0 {
            return;
        }
        let c = m.params.maint(op).unwrap_or_default();
        let mut caches = m.caches.take().unwrap();
        let line0 = caches.line_of(first.0);
        let mt = Maint::from(op);
        let mut t = m.now;
        let mut stall = 0u64;
        let mut done = m.pending;
        let mut total = Effects::default();
        for i in 0..lines {
            let mut fx = Effects::default();
            caches.maint_inner(mt, line0.saturating_add(i), &mut fx);
            let work = m.writeback_work(&fx);
            if work > 0 {
                let start = t.max(m.evict_free);
                stall = stall.saturating_add(start - t);
                t = start;
                m.evict_free = t.saturating_add(work);
                m.pending = m.pending.max(m.evict_free);
            }
            done = t
                .saturating_add(c.latency_ps)
                .max(done.saturating_add(c.interval_ps));
            t = t.saturating_add(c.issue_ps);
            total.add(&fx);
        }
        m.caches = Some(caches);
        m.pending = m.pending.max(done);
        m.ledger.count(op.counter(), lines);
        m.count_writebacks(&total);
        m.advance(lines.saturating_mul(c.issue_ps));
        if stall > 0 {
            m.now = m.now.saturating_add(stall);
            m.ledger.charge_wait(stall);
        }
    }

    pub fn outer_line_op(m: &mut Model, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines == 0 {
            return;
        }
        let per_line = m.params.outer.unwrap_or_default().line_ps[op as usize];
        m.ledger.count(op.outer_counter(), lines);
        let mut ps = lines.saturating_mul(per_line);
        let mut caches = m.caches.take().unwrap();
        let line0 = caches.line_of(first.0);
        let mut fx = Effects::default();
        for i in 0..lines {
            caches.maint_outer(Maint::from(op), line0.saturating_add(i), &mut fx);
        }
        m.caches = Some(caches);
        ps = ps.saturating_add(m.writeback_work(&fx));
        m.count_writebacks(&fx);
        m.advance(ps);
    }

    pub fn outer_way_op(m: &mut Model, op: CacheOp, lines: u64) {
        let per_line = m.params.outer.unwrap_or_default().way_line_ps[op as usize];
        if let Some(c) = op.outer_way_counter() {
            m.ledger.count(c, 1);
        }
        let mut ps = lines.saturating_mul(per_line);
        let mut caches = m.caches.take().unwrap();
        let mut fx = Effects::default();
        for level in caches.outer_from()..caches.depth() {
            for (line, _) in caches.contents(level) {
                caches.maint_outer(Maint::from(op), line, &mut fx);
            }
        }
        m.caches = Some(caches);
        ps = ps.saturating_add(m.writeback_work(&fx));
        m.count_writebacks(&fx);
        m.advance(ps);
    }
}

#[derive(Clone, Copy, Debug)]
enum RangeOp {
    Touch(bool, u64, u64),
    Inner(usize, u64, u64),
    Outer(usize, u64, u64),
    Way(usize),
    Barrier,
}

fn range_op() -> impl proptest::strategy::Strategy<Value = RangeOp> {
    use proptest::prelude::*;
    // 64-byte lines over 160 lines: ranges from one line to more than either level holds,
    // so both ways of finding a range's resident lines (probing its lines, reading every
    // slot) are taken, at unaligned starts.
    let addr = 0u64..160 * 64;
    prop_oneof![
        (any::<bool>(), addr.clone(), 1u64..100 * 64).prop_map(|(w, a, b)| RangeOp::Touch(w, a, b)),
        (0usize..3, addr.clone(), 1u64..100).prop_map(|(o, a, n)| RangeOp::Inner(o, a, n)),
        (0usize..3, addr, 1u64..100).prop_map(|(o, a, n)| RangeOp::Outer(o, a, n)),
        (0usize..3).prop_map(RangeOp::Way),
        Just(RangeOp::Barrier),
    ]
}

fn hierarchy(three: bool, wa: [bool; 3]) -> HierarchySpec {
    use crate::hw::cache::{Geometry, LevelSpec};
    let level = |name, size_bytes, ways, write_allocate| LevelSpec {
        name,
        geometry: Geometry {
            line_bytes: 64,
            size_bytes,
            ways,
        },
        write_allocate,
    };
    let mut levels = vec![level("L1", 512, 2, wa[0]), level("L2", 2048, 4, wa[1])];
    if three {
        // Two inner levels and an outer one: a range's resident lines are gathered from
        // two levels at once.
        levels.push(level("L3", 4096, 4, wa[2]));
    }
    HierarchySpec {
        outer_from: levels.len() - 1,
        levels,
    }
}

/// [`maint_run`] against the pipeline on every combination of values at either side of
/// the bounds it checks and of the next ones up (a million runs): the cases a bound one bit
/// too loose gets wrong are among them, whatever the property test below happens to draw.
#[test]
fn maint_run_is_the_pipeline_run_at_every_edge() {
    const EDGES: [u64; 10] = [
        0,
        7,
        (1 << 31) - 1,
        1 << 31,
        (1 << 32) - 1,
        (1 << 61) - 1,
        1 << 61,
        (1 << 63) - 1,
        1 << 63,
        u64::MAX,
    ];
    let mut checked = 0u32;
    for issue_ps in EDGES {
        for latency_ps in EDGES {
            for interval_ps in EDGES {
                let c = MaintCost {
                    issue_ps,
                    latency_ps,
                    interval_ps,
                };
                for t0 in EDGES {
                    for pending in EDGES {
                        for lines in EDGES.map(|l| l.max(1)) {
                            let want = (
                                lines.saturating_mul(issue_ps),
                                pipeline_run(c, t0, pending, lines).1,
                            );
                            assert_eq!(
                                maint_run(&c, t0, pending, lines),
                                want,
                                "{c:?} t0 {t0} pending {pending} lines {lines}"
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 1_000_000);
}

/// A value small, at either side of 2^31, 2^32, 2^61, 2^62 or 2^63, near `u64::MAX`, or
/// anything.
fn edge_value() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        // Small values three times as often: most overflows need a small factor beside a
        // large time.
        3 => 0u64..100_000,
        1 => (1u64 << 31) - 3..(1u64 << 31) + 3,
        1 => (1u64 << 32) - 3..(1u64 << 32) + 3,
        1 => (1u64 << 61) - 3..(1u64 << 61) + 3,
        1 => (1u64 << 62) - 3..(1u64 << 62) + 3,
        1 => (1u64 << 63) - 3..(1u64 << 63) + 3,
        1 => u64::MAX - 3..=u64::MAX,
        1 => any::<u64>(),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

    /// The plain-arithmetic run gives the pipeline's figures (lines × issue, and
    /// [`pipeline_run`]'s completion, itself the step repeated) for every input: small,
    /// either side of the bounds it checks (2^31, 2^61) and of the next ones up, near
    /// `u64::MAX`, anything. Many cases: a bound one bit too loose shows only for a few
    /// combinations (two factors near 2^32 and a time near 2^61).
    #[test]
    fn maint_run_is_the_pipeline_run(
        v in proptest::array::uniform6(edge_value()),
    ) {
        let c = MaintCost { issue_ps: v[0], latency_ps: v[1], interval_ps: v[2] };
        let lines = v[5].max(1);
        proptest::prop_assert_eq!(
            maint_run(&c, v[3], v[4], lines),
            (lines.saturating_mul(c.issue_ps), pipeline_run(c, v[3], v[4], lines).1)
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// Stepping only the resident lines of a range, with the runs between priced in closed
    /// form, leaves the clock, the pipeline, the eviction buffer, every count and charge and
    /// every slot of every level exactly as the line-by-line walk does.
    #[test]
    fn range_operations_equal_the_line_by_line_walk(
        ops in proptest::collection::vec(range_op(), 1..60),
        costs in (0u64..50, 0u64..2_000, 0u64..300, 0u64..100),
        wb in (0u64..3_000, 0u64..3_000),
        three in proptest::prelude::any::<bool>(),
        wa in proptest::prelude::any::<[bool; 3]>(),
    ) {
        let mut p = params(costs.0, costs.1, costs.2, costs.3);
        p.caches = Some(CacheModelParams {
            hierarchy: hierarchy(three, wa),
            writeback_ps: [wb.0, wb.1],
        });
        p.outer = Some(OuterParams {
            line_ps: [30, 20, 40],
            sync_ps: 90,
            way_line_ps: [5, 0, 6],
        });
        let mut fast = Model::new(p.clone());
        let mut slow = Model::new(p);
        for o in ops {
            match o {
                RangeOp::Touch(w, a, b) => {
                    let acc = if w { Access::Write } else { Access::Read };
                    fast.cpu_touch(acc, PhysAddr(a), b);
                    slow.cpu_touch(acc, PhysAddr(a), b);
                }
                RangeOp::Inner(op, a, n) => {
                    fast.cache_maint(CacheOp::ALL[op], PhysAddr(a), n);
                    line_by_line::cache_maint(&mut slow, CacheOp::ALL[op], PhysAddr(a), n);
                }
                RangeOp::Outer(op, a, n) => {
                    fast.outer_line_op(CacheOp::ALL[op], PhysAddr(a), n);
                    line_by_line::outer_line_op(&mut slow, CacheOp::ALL[op], PhysAddr(a), n);
                }
                RangeOp::Way(op) => {
                    fast.outer_way_op(CacheOp::ALL[op], 64);
                    line_by_line::outer_way_op(&mut slow, CacheOp::ALL[op], 64);
                }
                RangeOp::Barrier => {
                    fast.barrier();
                    slow.barrier();
                }
            }
            proptest::prop_assert_eq!(
                (fast.now, fast.pending, fast.evict_free),
                (slow.now, slow.pending, slow.evict_free),
                "after {:?}", o
            );
            proptest::prop_assert_eq!(fast.ledger().totals(), slow.ledger().totals());
            proptest::prop_assert_eq!(fast.ledger().total_ps(), slow.ledger().total_ps());
            proptest::prop_assert_eq!(
                fast.caches().unwrap().fingerprint(),
                slow.caches().unwrap().fingerprint(),
                "after {:?}", o
            );
        }
    }

    /// The closed form of a run of lines with nothing to write back is the pipeline step
    /// repeated, saturation included.
    #[test]
    fn pipeline_run_is_the_step_repeated(
        c in (0u64..1_000, 0u64..10_000, 0u64..1_000),
        t in 0u64..100_000,
        done in 0u64..200_000,
        k in 0u64..300,
        near_max in proptest::prelude::any::<bool>(),
    ) {
        let off = if near_max { u64::MAX - 300_000 } else { 0 };
        let c = MaintCost { issue_ps: c.0, latency_ps: c.1, interval_ps: c.2 };
        let (mut t1, mut d1) = (t + off, done + off);
        for _ in 0..k {
            d1 = t1.saturating_add(c.latency_ps).max(d1.saturating_add(c.interval_ps));
            t1 = t1.saturating_add(c.issue_ps);
        }
        proptest::prop_assert_eq!(pipeline_run(c, t + off, done + off, k), (t1, d1));
    }
}

/// Outer-cache writes cost the CPU their whole operation per line (PL310 by-PA operations are
/// atomic) and leave nothing outstanding for a barrier; each is counted.
#[test]
fn outer_cache_writes_charge_per_line_and_per_sync() {
    let mut p = params(1_000, 50_000, 0, 7_000);
    p.outer = Some(OuterParams {
        line_ps: [30_000, 20_000, 40_000],
        sync_ps: 90_000,
        way_line_ps: [5_000, 0, 6_000],
    });
    let mut m = Model::new(p);
    m.outer_line_op(CacheOp::Clean, PhysAddr(0), 100);
    assert_eq!(m.now_ps(), 3_000_000);
    m.outer_line_op(CacheOp::Inval, PhysAddr(0), 0);
    assert_eq!(m.now_ps(), 3_000_000);
    m.outer_line_op(CacheOp::CleanInval, PhysAddr(0), 2);
    m.outer_sync();
    assert_eq!(m.now_ps(), 3_000_000 + 80_000 + 90_000);
    // Nothing outstanding: a barrier costs only itself.
    m.barrier();
    assert_eq!(m.now_ps(), 3_170_000 + 7_000);
    let t = m.ledger().totals();
    assert_eq!(t[Counter::OuterCleanLine as usize], 100);
    assert_eq!(t[Counter::OuterInvalLine as usize], 0);
    assert_eq!(t[Counter::OuterCleanInvalLine as usize], 2);
    assert_eq!(t[Counter::OuterSync as usize], 1);
    assert_eq!(m.ledger().total_ps(), m.now_ps());
}

/// A whole-cache operation by way costs the CPU the controller's walk of every line (it
/// polls the way register until done) and counts one operation, whatever the cache's size.
#[test]
fn outer_way_operations_charge_per_line_walked() {
    let mut p = params(1_000, 50_000, 0, 7_000);
    p.outer = Some(OuterParams {
        line_ps: [30_000, 20_000, 40_000],
        sync_ps: 90_000,
        way_line_ps: [5_000, 0, 6_000],
    });
    let mut m = Model::new(p);
    m.outer_way_op(CacheOp::Clean, 16384);
    assert_eq!(m.now_ps(), 16384 * 5_000);
    m.outer_way_op(CacheOp::CleanInval, 16384);
    assert_eq!(m.now_ps(), 16384 * 11_000);
    let t = m.ledger().totals();
    assert_eq!(t[Counter::OuterCleanWay as usize], 1);
    assert_eq!(t[Counter::OuterCleanInvalWay as usize], 1);
    assert_eq!(t[Counter::OuterCleanLine as usize], 0);
    assert_eq!(m.ledger().total_ps(), m.now_ps());
}

pub(super) fn with_caches(mut p: ModelParams, wb: [u64; 2]) -> ModelParams {
    use crate::hw::cache::{Geometry, LevelSpec};
    let level = |name, size_bytes, ways| LevelSpec {
        name,
        geometry: Geometry {
            line_bytes: 64,
            size_bytes,
            ways,
        },
        write_allocate: true,
    };
    p.caches = Some(CacheModelParams {
        hierarchy: HierarchySpec {
            levels: vec![level("L1", 4096, 4), level("L2", 65536, 8)],
            outer_from: 1,
        },
        writeback_ps: wb,
    });
    p.outer = Some(OuterParams {
        line_ps: [30, 20, 40],
        sync_ps: 90,
        way_line_ps: [5, 0, 6],
    });
    p
}

/// A clean by way writes back every dirty line the outer cache holds, wherever it is, and
/// leaves them clean: a second one costs only the walk.
#[test]
fn a_clean_by_way_writes_back_every_dirty_outer_line() {
    let mut m = Model::new(with_caches(params(10, 500, 0, 50), [1_000, 2_000]));
    // 128 dirty lines, the first 64 pushed out of the 4 KB L1 into the L2 dirty.
    m.cpu_touch(Access::Write, PhysAddr(0), 128 * 64);
    let before = m.ledger().totals()[Counter::L2Writeback as usize];
    let t0 = m.now_ps();
    m.outer_way_op(CacheOp::Clean, 1024);
    let l2_wb = m.ledger().totals()[Counter::L2Writeback as usize] - before;
    assert!(l2_wb >= 64, "{l2_wb}");
    assert_eq!(m.now_ps() - t0, 1024 * 5 + l2_wb * 2_000);
    let t1 = m.now_ps();
    m.outer_way_op(CacheOp::Clean, 1024);
    assert_eq!(m.now_ps() - t1, 1024 * 5);
    assert_eq!(m.ledger().totals()[Counter::OuterCleanWay as usize], 2);
}

/// With nothing dirty, the line-by-line pipeline of the cache model charges exactly what the
/// closed form does without one, for every op and interval.
#[test]
fn clean_lines_cost_the_bare_operation_with_or_without_a_cache_model() {
    for interval in [0, 5, 100] {
        let base = params(10, 500, interval, 50);
        let mut plain = Model::new(base.clone());
        let mut cached = Model::new(with_caches(base, [1_000, 2_000]));
        cached.cpu_touch(Access::Read, PhysAddr(0), 8192);
        for m in [&mut plain, &mut cached] {
            for op in CacheOp::ALL {
                m.cache_maint(op, PhysAddr(0), 64);
                m.barrier();
                m.cache_maint(op, PhysAddr(4096), 3);
                m.cache_maint(op, PhysAddr(4096), 5);
                m.wmb();
            }
        }
        assert_eq!(plain.now_ps(), cached.now_ps(), "interval {interval}");
        assert_eq!(cached.ledger.totals()[Counter::L1Writeback as usize], 0);
    }
}

/// Dirty lines are paced by the one eviction buffer: 16 dirty lines with a 1000 ps
/// writeback each and a 10 ps issue take 15 stalls of 990 ps, the last writeback done 1000 ps
/// after its issue; the PL310 then pays its writeback per dirty line on the CPU's time.
#[test]
fn dirty_lines_cost_their_writebacks_at_each_level() {
    let mut m = Model::new(with_caches(params(10, 500, 0, 50), [1_000, 2_000]));
    m.cpu_touch(Access::Write, PhysAddr(0), 16 * 64);
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 16);
    assert_eq!(m.now_ps(), 16 * 10 + 15 * 990);
    m.barrier();
    // The last line issued at 15 * 1000 (after its stall): its writeback ends 1000 later.
    assert_eq!(m.now_ps(), 15 * 1000 + 1000 + 50);
    let t0 = m.now_ps();
    m.outer_line_op(CacheOp::Clean, PhysAddr(0), 16);
    assert_eq!(m.now_ps() - t0, 16 * (30 + 2_000));
    let t = m.ledger().totals();
    assert_eq!(t[Counter::L1Writeback as usize], 16);
    assert_eq!(t[Counter::L2Writeback as usize], 16);
    assert_eq!(m.ledger().total_ps(), m.now_ps());
    // Clean everywhere now: the same two operations cost the bare operations.
    let t1 = m.now_ps();
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 16);
    m.outer_line_op(CacheOp::Clean, PhysAddr(0), 16);
    assert_eq!(m.now_ps() - t1, 16 * 10 + 16 * 30);
    // An invalidate of dirty lines writes nothing back and costs its issue only.
    m.cpu_touch(Access::Write, PhysAddr(0), 64);
    let t2 = m.now_ps();
    m.cache_maint(CacheOp::Inval, PhysAddr(0), 1);
    assert_eq!(m.now_ps() - t2, 10);
    assert_eq!(m.ledger().totals()[Counter::L1Writeback as usize], 16);
}

/// A program's loop: uncached memory is one priced access each; cached memory pays its
/// L1 hits per access, a fill per missed line, and with prefetch only the part of a
/// sequential stream's fill the previous line's accesses did not cover.
#[test]
fn cpu_accesses_cost_by_memory_type_and_line_state() {
    use crate::hw::memory::{MemCosts, MemType, TypeCosts};
    let mut p = with_caches(params(10, 500, 0, 50), [1_000, 2_000]);
    let mut mem = MemCosts {
        fill_l2_ps: 300,
        fill_memory_ps: 1_000,
        ..MemCosts::default()
    };
    mem.types[MemType::Cached as usize] = Some(TypeCosts {
        read: vec![(1, 10), (8, 12)],
        write: vec![(1, 11)],
    });
    mem.types[MemType::NormalNc as usize] = Some(TypeCosts {
        read: vec![(1, 100)],
        write: vec![],
    });
    p.mem = Some(mem.clone());
    let mut m = Model::new(p.clone());
    m.cpu_access(Access::Read, MemType::NormalNc, 1, PhysAddr(0), 256);
    assert_eq!(m.now_ps(), 256 * 100);
    assert!(m.caches().unwrap().contents(0).is_empty(), "no allocation");
    // Cached, cold, no prefetch: 4 lines of 64 bytes, each 64 hits and a fill from memory.
    let t0 = m.now_ps();
    m.cpu_access(Access::Read, MemType::Cached, 1, PhysAddr(0), 256);
    assert_eq!(m.now_ps() - t0, 256 * 10 + 4 * 1_000);
    // Again: all L1 hits.
    let t1 = m.now_ps();
    m.cpu_access(Access::Read, MemType::Cached, 8, PhysAddr(0), 256);
    assert_eq!(m.now_ps() - t1, 32 * 12);
    let t = m.ledger().totals();
    assert_eq!(t[Counter::CpuAccess as usize], 256 + 256 + 32);
    assert_eq!(t[Counter::LineFill as usize], 4);
    // With prefetch: the first line's fill is exposed, each next line's fill less the
    // 640 ps spent on the line before it.
    mem.prefetch_next_line = true;
    p.mem = Some(mem);
    let mut m = Model::new(p);
    m.cpu_access(Access::Read, MemType::Cached, 1, PhysAddr(0), 256);
    assert_eq!(m.now_ps(), 256 * 10 + 1_000 + 3 * (1_000 - 640));
    assert_eq!(m.ledger().total_ps(), m.now_ps());
}

#[test]
fn tlbstatus_reads_busy_until_prior_invalidations_and_the_sync_complete() {
    let mut p = params(1, 1, 0, 1);
    p.smmu = Some(SmmuParams {
        mmio_write_ps: 10,
        mmio_read_ps: 100,
        tlbi_va_ps: 50,
        sync_ps: 20,
        ..SmmuParams::default()
    });
    let mut m = Model::new(p);
    for _ in 0..4 {
        m.mmio_write(MmioReg::SmmuTlbiva, 0);
    }
    // Writes at 10, 20, 30, 40 arrive at a busy SMMU: done at 10 + 4 * 50 = 210.
    m.mmio_write(MmioReg::SmmuTlbsync, 0);
    // Sync done at 230. Reads end at 150, 250.
    assert_eq!(m.mmio_read(MmioReg::SmmuTlbstatus), SMMU_TLBSTATUS_GSACTIVE);
    assert_eq!(m.mmio_read(MmioReg::SmmuTlbstatus), 0);
    assert_eq!(m.now_ps(), 250);
    let t = m.ledger().totals();
    assert_eq!(t[Counter::SmmuTlbiva as usize], 4);
    assert_eq!(t[Counter::SmmuTlbstatusRead as usize], 2);
    m.udelay(2);
    assert_eq!(m.now_ps(), 2_000_250);
}

#[test]
fn cmdq_sync_waits_for_the_queue_to_drain() {
    let mut p = params(1, 1, 0, 1);
    p.smmu = Some(SmmuParams {
        kind: SmmuKind::SmmuV3,
        mmio_write_ps: 10,
        cmdq_write_ps: 5,
        tlbi_va_ps: 40,
        sync_ps: 100,
        ..SmmuParams::default()
    });
    let mut m = Model::new(p);
    let done = cmdq_issue(
        &mut m,
        &[
            SmmuCmdKind::TlbiNhVa,
            SmmuCmdKind::TlbiNhVa,
            SmmuCmdKind::Sync,
        ],
    );
    // CPU: 3 * 5 + 10 = 25. SMMU: 25 + 40 + 40 + 100 = 205.
    assert_eq!(m.now_ps(), 25);
    cmdq_wait(&mut m, done);
    assert_eq!(m.now_ps(), 205);
    assert_eq!(m.ledger().total_ps(), 205);
    assert_eq!(m.ledger().totals()[Counter::CmdqBatch as usize], 1);
}

fn numa_model(cpu_node: u32, smmu_node: u32) -> Model {
    let mut p = params(1, 1, 0, 1);
    p.smmu = Some(SmmuParams {
        kind: SmmuKind::SmmuV3,
        mmio_write_ps: 10,
        cmdq_write_ps: 5,
        tlbi_va_ps: 40,
        sync_ps: 100,
        ..SmmuParams::default()
    });
    let mut m = Model::new(p);
    m.set_numa(NumaLines {
        memory: vec![(0, 1 << 30, 0), (1 << 30, 1 << 30, 1)],
        cpu_node,
        smmu_node,
        line_ps: vec![vec![1_000, 7_000], vec![7_000, 1_000]],
    });
    m
}

/// The queue's home node comes from the CMDQ_BASE write, and a sync pays four line
/// transfers priced by where its initiators sit: the CPU's store and reload, the SMMU's
/// command read and MSI write.
#[test]
fn a_cmd_sync_pays_four_line_transfers_by_the_queues_home_node() {
    let mut t = Vec::new();
    for base in [0x1000u64, (1 << 30) + 0x1000] {
        let mut m = numa_model(1, 1);
        m.mmio_write(MmioReg::SmmuCmdqBase, base | 11);
        let start = m.now_ps();
        let done = cmdq_issue(&mut m, &[SmmuCmdKind::Sync]);
        cmdq_wait(&mut m, done);
        t.push(m.now_ps() - start);
        assert_eq!(m.ledger().totals()[Counter::SmmuCmdqBase as usize], 1);
    }
    // Remote queue (node 0 from node 1): 5 + 7000 + 10, SMMU 7000 + 100 + 7000, reload 7000.
    assert_eq!(t[0], 5 + 10 + 100 + 4 * 7_000);
    assert_eq!(t[1], 5 + 10 + 100 + 4 * 1_000);
    // The CPU on the queue's node and the SMMU away from it: two transfers of each kind.
    let mut m = numa_model(0, 1);
    m.mmio_write(MmioReg::SmmuCmdqBase, 0x1000);
    let start = m.now_ps();
    let done = cmdq_issue(&mut m, &[SmmuCmdKind::Sync]);
    cmdq_wait(&mut m, done);
    assert_eq!(m.now_ps() - start, 5 + 10 + 100 + 2 * 1_000 + 2 * 7_000);
}

/// The line transfers are resolved once, not looked up per submission: whatever changes
/// after the queue's base is known (the CPU's node, the topology) reprices the next sync as
/// a model built that way from the start prices it.
#[test]
fn a_sync_is_priced_by_the_nodes_in_force_when_it_is_issued() {
    let sync = |m: &mut Model| {
        let start = m.now_ps();
        let done = cmdq_issue(m, &[SmmuCmdKind::Sync]);
        cmdq_wait(m, done);
        m.now_ps() - start
    };
    let mut m = numa_model(1, 1);
    m.mmio_write(MmioReg::SmmuCmdqBase, 0x1000);
    assert_eq!(sync(&mut m), 5 + 10 + 100 + 4 * 7_000);
    m.set_cpu_node(0);
    let mut fresh = numa_model(0, 1);
    fresh.mmio_write(MmioReg::SmmuCmdqBase, 0x1000);
    assert_eq!(sync(&mut m), sync(&mut fresh));
    assert_eq!(sync(&mut m), 5 + 10 + 100 + 2 * 1_000 + 2 * 7_000);
    // A new topology with the queue's node unchanged: its own line costs.
    m.set_numa(NumaLines {
        memory: vec![(0, 1 << 30, 0), (1 << 30, 1 << 30, 1)],
        cpu_node: 1,
        smmu_node: 1,
        line_ps: vec![vec![2_000, 3_000], vec![3_000, 2_000]],
    });
    assert_eq!(sync(&mut m), 5 + 10 + 100 + 4 * 3_000);
}

/// Without a known queue base, or for an address on no node, nothing is priced by node.
#[test]
fn no_queue_base_no_line_transfers() {
    for base in [None, Some(1u64 << 40)] {
        let mut m = numa_model(1, 1);
        if let Some(b) = base {
            m.mmio_write(MmioReg::SmmuCmdqBase, b);
        }
        assert_eq!(m.cmdq_node(), None);
        let start = m.now_ps();
        let done = cmdq_issue(&mut m, &[SmmuCmdKind::Sync]);
        cmdq_wait(&mut m, done);
        assert_eq!(m.now_ps() - start, 5 + 10 + 100);
    }
}

#[test]
fn wmb_is_priced_and_counted_apart_from_the_full_barrier() {
    let mut m = Model::new(params(10, 1000, 0, 50));
    m.wmb();
    assert_eq!(m.now_ps(), 25);
    // Outstanding maintenance is waited for, as by any DSB.
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 1);
    m.wmb();
    assert_eq!(m.now_ps(), 25 + 1000 + 25);
    let t = m.ledger().totals();
    assert_eq!(
        (t[Counter::Wmb as usize], t[Counter::Barrier as usize]),
        (2, 0)
    );
    assert_eq!(m.ledger().total_ps(), m.now_ps());
}

#[test]
fn barrier_exposes_latency_once() {
    let mut m = Model::new(params(10, 1000, 0, 50));
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 64);
    assert_eq!(m.now_ps(), 640);
    m.barrier();
    // last line issued at 630, done at 1630, plus the barrier's own 50.
    assert_eq!(m.now_ps(), 1680);
    // Nothing outstanding: a second barrier costs only itself.
    m.barrier();
    assert_eq!(m.now_ps(), 1730);
    assert_eq!(m.ledger().total_ps(), 1730);
}

#[test]
fn per_entry_barriers_cost_more_than_one_per_list() {
    let p = params(10, 1000, 0, 50);
    let mut per_entry = Model::new(p.clone());
    let mut batched = Model::new(p);
    for i in 0..10 {
        per_entry.cache_maint(CacheOp::Clean, PhysAddr(i * 4096), 64);
        per_entry.barrier();
        batched.cache_maint(CacheOp::Clean, PhysAddr(i * 4096), 64);
    }
    batched.barrier();
    assert_eq!(per_entry.now_ps(), 10 * (640 + 1000 - 10 + 50));
    assert_eq!(batched.now_ps(), 6400 + 1000 - 10 + 50);
}

#[test]
fn retire_interval_limits_throughput() {
    // Completions 100 ps apart while issue takes 10: the queue, not issue, sets the pace.
    let mut m = Model::new(params(10, 500, 100, 0));
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 100);
    m.barrier();
    assert_eq!(m.now_ps(), 500 + 99 * 100);
    // A second batch issued once everything is idle: its first line completes a latency
    // after issue, the rest follow one interval apart.
    m.cache_maint(CacheOp::Clean, PhysAddr(0), 10);
    assert_eq!(m.now_ps(), 10_400 + 100);
    m.barrier();
    assert_eq!(m.now_ps(), 10_400 + 500 + 9 * 100);
}

#[test]
fn copies_charge_per_call_and_per_byte() {
    let mut p = params(1, 1, 0, 1);
    p.copy = Some(CopyCost {
        call_ps: 5000,
        per_byte_fs: 250,
    });
    let mut m = Model::new(p);
    let back = m.enter(crate::frame_id!("memcpy"));
    m.copy(2048);
    m.leave(back);
    assert_eq!(m.now_ps(), 5000 + 512);
    let t = m.ledger().totals();
    assert_eq!(t[Counter::BounceCopy as usize], 1);
    assert_eq!(t[Counter::BounceCopyBytes as usize], 2048);
    m.count(Counter::SpinLock, 2);
    assert_eq!(m.ledger().totals()[Counter::SpinLock as usize], 2);
    assert_eq!(m.now_ps(), 5512, "a count charges no time");
}

#[test]
fn sw_costs_resolve_by_name() {
    let mut p = params(1, 1, 0, 1);
    p.sw.insert("dma_direct_map_phys".into(), 42);
    let m = Model::new(p);
    assert_eq!(m.sw_cost(SwKey::DmaDirectMapPhys), SwCost(42));
    assert_eq!(m.sw_cost(SwKey::SgNext), SwCost(0), "unpriced");
}

/// Two Models as two CPUs of one machine, each taking a shared lock after 100 ns of its own
/// work and holding it 50 ns: CPU 0 takes it at once, CPU 1 spins exactly the 50 ns CPU 0
/// held it, charged in the spin frame under the caller, and its clock ends 50 ns later.
#[test]
fn a_held_lock_is_spun_on_for_exactly_the_holders_critical_section() {
    use crate::hw::SmpHw;
    use crate::smp::{self, Body, SpinLock};
    use std::rc::Rc;
    let lock = Rc::new(SpinLock::new());
    let cpu = |lock: Rc<SpinLock>| -> Body<(u64, Vec<(String, u64)>)> {
        Box::new(move |c| {
            let mut m = Model::new(ModelParams::default());
            m.set_cpu(c);
            let back = m.enter(crate::frame_id!("caller"));
            m.sw(SwCost(100_000));
            m.with_lock(&lock, |m, ()| m.sw(SwCost(50_000)));
            m.leave(back);
            let stacks = m
                .ledger()
                .stacks()
                .into_iter()
                .map(|s| (s.stack.join(" > "), s.self_ps))
                .collect();
            (m.now_ps(), stacks)
        })
    };
    let r = smp::run(vec![cpu(Rc::clone(&lock)), cpu(Rc::clone(&lock))]).unwrap();
    assert_eq!(r[0].0, 150_000);
    assert_eq!(r[1].0, 200_000);
    let spin = format!("caller > {}", crate::hw::SPIN_FRAME);
    assert!(!r[0].1.iter().any(|(s, _)| *s == spin));
    assert!(r[1].1.contains(&(spin, 50_000)), "{:?}", r[1].1);
}

/// A line the tests' CPUs contend for, and a machine that moves it in 100 ps a transfer.
fn contended_line() -> (std::rc::Rc<crate::smp::Shared<u64>>, ModelParams) {
    let mut p = params(1, 1, 0, 1);
    p.line_transfer_ps = Some(100);
    (std::rc::Rc::new(crate::smp::Shared::new("llq", 0u64)), p)
}

/// Three CPUs on one line, 100 ps a transfer (a request reaches the holder after 50), 60 ps
/// of loop between a failed `cmpxchg` and the next. CPU 0 reads the line at 0 and claims at
/// 10; CPU 1 wrote it at 5, so the first attempt (the line here at 110) fails. CPU 2 asks for
/// the line at `steal`: asked at 120, its request reaches CPU 0 at 170, as CPU 0's retry
/// begins, so the line goes to CPU 2, which writes it at 220; the retry, its line back only at
/// 320, fails again and the third attempt succeeds. Asked at 150, the request reaches CPU 0
/// at 200, after the retry has succeeded with the line still here.
#[test]
fn a_claim_fails_as_often_as_other_cpus_take_its_line_first() {
    use crate::hw::SmpHw;
    use crate::smp::{self, Body, Shared};
    use std::rc::Rc;
    let run = |steal: u64| {
        let (v, p) = contended_line();
        let cpu = |v: Rc<Shared<u64>>, p: ModelParams, id: u64| -> Body<(u64, u64)> {
            Box::new(move |c| {
                let mut m = Model::new(p);
                m.set_cpu(c);
                match id {
                    0 => {
                        let (_, seen) = m.read_once(&v);
                        m.sw(SwCost(10));
                        let (failed, ()) = m.cmpxchg_update(&v, seen, SwCost(60), |x| *x += 1);
                        (failed, m.now_ps())
                    }
                    _ => {
                        m.sw(SwCost(if id == 1 { 5 } else { steal }));
                        m.update(&v, |_, x| *x += 10);
                        (0, m.now_ps())
                    }
                }
            })
        };
        let bodies = (0..3).map(|id| cpu(Rc::clone(&v), p.clone(), id)).collect();
        let r = smp::run(bodies).unwrap();
        (r[0], *v.peek())
    };
    assert_eq!(run(120), ((2, 380), 21));
    assert_eq!(run(150), ((1, 170), 21));
}

/// CPUs that each claim a line 200 times with 500 ps of their own work between claims, a
/// retry slower than a request's way to the holder (as above): the
/// more CPUs ask for the line, the more often a claim loses it, as counted by the attempts
/// (nothing caps them), and with 8 some claim loses it more than once.
#[test]
fn failures_per_claim_rise_with_the_cpus_contending() {
    use crate::hw::SmpHw;
    use crate::smp::{self, Body, Shared};
    use std::rc::Rc;
    let run = |n: usize| {
        let (v, p) = contended_line();
        let cpu = |v: Rc<Shared<u64>>, p: ModelParams| -> Body<(u64, u64)> {
            Box::new(move |c| {
                let mut m = Model::new(p);
                m.set_cpu(c);
                let (mut total, mut most) = (0, 0);
                for _ in 0..200 {
                    m.sw(SwCost(500));
                    let (_, seen) = m.read_once(&v);
                    let (failed, ()) = m.cmpxchg_update(&v, seen, SwCost(60), |x| *x += 1);
                    total += failed;
                    most = most.max(failed);
                }
                (total, most)
            })
        };
        let r = smp::run((0..n).map(|_| cpu(Rc::clone(&v), p.clone())).collect()).unwrap();
        assert_eq!(*v.peek(), 200 * n as u64, "every claim lands once");
        let failed: u64 = r.iter().map(|x| x.0).sum();
        (
            failed as f64 / (200 * n) as f64,
            r.iter().map(|x| x.1).max().unwrap(),
        )
    };
    let (two, four, eight) = (run(2), run(4), run(8));
    assert!(
        two.0 < four.0 && four.0 < eight.0,
        "{two:?} {four:?} {eight:?}"
    );
    assert!(eight.1 >= 2, "{eight:?}");
}

/// `smp_cond_load_relaxed` loads the line before it tests the condition: a condition that
/// holds already still brings the line over from the CPU that wrote it last (100 ps here),
/// and costs nothing when this CPU wrote it last itself.
#[test]
fn a_cond_load_reads_the_line_even_when_the_condition_holds() {
    use crate::hw::SmpHw;
    use crate::smp::{self, Body, Shared, WaitQueue};
    use std::rc::Rc;
    let run = |writer: u64| {
        let v = Rc::new(Shared::new("owner_prod", 0u64));
        let q = Rc::new(WaitQueue::new());
        let mut p = params(1, 1, 0, 1);
        p.line_transfer_ps = Some(100);
        let cpu = |id: u64| -> Body<u64> {
            let (v, q, p) = (Rc::clone(&v), Rc::clone(&q), p.clone());
            Box::new(move |c| {
                let mut m = Model::new(p);
                m.set_cpu(c);
                if id == writer {
                    m.sw(SwCost(5));
                    m.update(&v, |_, x| *x = 7);
                }
                if id == 0 {
                    m.sw(SwCost(10));
                    m.cond_load(&v, &q, "(waiting)", |x| *x == 7);
                }
                m.now_ps()
            })
        };
        smp::run(vec![cpu(0), cpu(1)]).unwrap()[0]
    };
    assert_eq!(run(1), 110, "the line from CPU 1");
    assert_eq!(run(0), 15, "CPU 0's own line");
}
