//! Property tests of the cache model against the two references of [`super::reference`]:
//! with no capacity pressure (every set of every level holds all the lines it is ever given),
//! [`Sets`]; under pressure, [`Ways`].
//!
//! In both, random CPU reads and writes and random inner and outer maintenance (single lines,
//! and ranges in consecutive blocks) over a small two-level cache must leave the same present
//! and dirty lines at every level, and the same number of writebacks out of each level.

use super::reference::{Sets, Step, Ways};
use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

#[derive(Clone, Copy, Debug)]
enum Op {
    Read(u64),
    Write(u64),
    /// `access_range` over lines `first..first + n` (the caches' streamed path); the references
    /// take it as that many single accesses.
    Range(Access, u64, u64),
    Inner(Maint, u64),
    Outer(Maint, u64),
    /// `maint_range` (outer levels if `outer`, else inner) over `k` blocks of `n` lines one
    /// after another from `first`, as 3.14's PL310 code walks a range, with a CPU write of a
    /// line after each block if one is given; the references step the blocks' lines one by one.
    Blocks(bool, Maint, u64, u64, u64, Option<u64>),
}

/// [`op`], and streamed accesses of up to `lines` lines from anywhere in the first `lines`.
fn op_or_range(lines: u64) -> impl Strategy<Value = Op> {
    let access = prop_oneof![Just(Access::Read), Just(Access::Write)];
    prop_oneof![
        3 => op(lines),
        1 => (access, 0..lines, 1..=lines).prop_map(|(a, f, n)| Op::Range(a, f, n)),
        1 => (
            (any::<bool>(), maint(), 0..lines),
            (1..=8u64, 1..=8u64, proptest::option::of(0..64u64))
        )
            // The write, if any, to a line of the blocks: one a later block may find.
            .prop_map(|((o, m, f), (n, k, w))| Op::Blocks(o, m, f, n, k, w.map(|w| f + w % (n * k)))),
    ]
}

fn maint() -> impl Strategy<Value = Maint> {
    prop_oneof![
        Just(Maint::Clean),
        Just(Maint::Inval),
        Just(Maint::CleanInval)
    ]
}

fn op(lines: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..lines).prop_map(Op::Read),
        (0..lines).prop_map(Op::Write),
        (maint(), 0..lines).prop_map(|(m, l)| Op::Inner(m, l)),
        (maint(), 0..lines).prop_map(|(m, l)| Op::Outer(m, l)),
    ]
}

fn spec(l1: (u64, u64), l2: (u64, u64), wa: (bool, bool)) -> HierarchySpec {
    let g = |(size_bytes, ways)| Geometry {
        line_bytes: 32,
        size_bytes,
        ways,
    };
    HierarchySpec {
        levels: vec![
            LevelSpec {
                name: "L1",
                geometry: g(l1),
                write_allocate: wa.0,
            },
            LevelSpec {
                name: "L2",
                geometry: g(l2),
                write_allocate: wa.1,
            },
        ],
        outer_from: 1,
    }
}

fn apply(c: &mut Caches, o: Op, fx: &mut Effects) {
    match o {
        Op::Read(l) => c.access(Access::Read, l, fx),
        Op::Write(l) => c.access(Access::Write, l, fx),
        Op::Range(a, first, n) => fx.add(&c.access_range(a, first * 32, n * 32)),
        Op::Inner(m, l) => c.maint_inner(m, l, fx),
        Op::Outer(m, l) => c.maint_outer(m, l, fx),
        Op::Blocks(outer, m, first, n, k, write) => {
            for b in 0..k {
                c.maint_range(outer, m, first + b * n, n, |_, f| fx.add(f));
                if let Some(l) = write {
                    c.access(Access::Write, l, fx);
                }
            }
        }
    }
}

/// An operation as the single-line steps the references take it as.
fn steps(o: Op) -> Vec<Step> {
    match o {
        Op::Read(l) => vec![Step::Read(l)],
        Op::Write(l) => vec![Step::Write(l)],
        Op::Inner(m, l) => vec![Step::Inner(m, l)],
        Op::Outer(m, l) => vec![Step::Outer(m, l)],
        Op::Range(a, first, n) => (first..first + n)
            .map(|l| match a {
                Access::Read => Step::Read(l),
                Access::Write => Step::Write(l),
            })
            .collect(),
        Op::Blocks(outer, m, first, n, k, write) => (0..k)
            .flat_map(|b| {
                let maint = (first + b * n..first + (b + 1) * n).map(move |l| {
                    if outer {
                        Step::Outer(m, l)
                    } else {
                        Step::Inner(m, l)
                    }
                });
                maint.chain(write.map(Step::Write))
            })
            .collect(),
    }
}

fn observed(c: &Caches, level: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let v = c.contents(level);
    (
        v.iter().map(|l| l.0).collect(),
        v.iter().filter(|l| l.1).map(|l| l.0).collect(),
    )
}

/// Run `ops` on [`Caches`] and on the way-list reference; after each, the two hold the same
/// lines in the same states (and the caches' own counts agree with their slots); at the end they
/// have written back as many lines from each level and answered as many accesses from each.
fn agrees_with_the_way_lists(s: &HierarchySpec, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut c = Caches::new(s);
    let mut r = Ways::new(s);
    let mut fx = Effects::default();
    for &o in ops {
        apply(&mut c, o, &mut fx);
        steps(o).into_iter().for_each(|st| r.apply(st));
        prop_assert!(c.bookkeeping_holds(), "set counts after {:?}", o);
        for level in 0..2 {
            prop_assert_eq!(
                observed(&c, level),
                r.observed(level),
                "L{} after {:?}",
                level + 1,
                o
            );
        }
    }
    prop_assert_eq!(&fx.writebacks[..2], &r.writebacks[..]);
    prop_assert_eq!(&fx.served[..3], &r.served[..]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Eight lines, an L1 of 4 sets x 2 ways and an L2 of 8 sets x 2 ways: nothing is ever
    /// evicted, so the rules are plain set operations.
    #[test]
    fn without_pressure_present_and_dirty_lines_follow_the_rules(
        ops in proptest::collection::vec(op(8), 1..200),
        wa in (any::<bool>(), any::<bool>()),
    ) {
        let s = spec((256, 2), (512, 2), wa);
        let mut c = Caches::new(&s);
        let mut r = Sets { wa: [wa.0, wa.1], ..Sets::default() };
        let mut fx = Effects::default();
        for o in ops {
            apply(&mut c, o, &mut fx);
            steps(o).into_iter().for_each(|st| r.apply(st));
            prop_assert!(c.bookkeeping_holds(), "set counts after {:?}", o);
            for level in 0..2 {
                let (p, d) = observed(&c, level);
                prop_assert_eq!(&p, &r.present[level], "present at L{} after {:?}", level + 1, o);
                prop_assert_eq!(&d, &r.dirty[level], "dirty at L{} after {:?}", level + 1, o);
            }
        }
        prop_assert_eq!(&fx.writebacks[..2], &r.writebacks[..]);
    }

    /// Sixty-four lines over an L1 of 2 sets x 2 ways and an L2 of 4 sets x 4 ways: evictions
    /// all the time, dirty victims written into the next level.
    #[test]
    fn under_pressure_present_and_dirty_lines_agree_with_the_way_lists(
        ops in proptest::collection::vec(op_or_range(64), 1..400),
        wa in (any::<bool>(), any::<bool>()),
    ) {
        let s = spec((128, 2), (512, 4), wa);
        agrees_with_the_way_lists(&s, &ops)?;
    }

    /// The shapes with fast paths: look-ups unrolled for four and eight ways, and two
    /// write-allocating levels of 4 or 8 then 8 or 16 ways streamed by `access_range`; and one
    /// way (direct-mapped), which has neither. Two sets a level, over 96 lines: evictions all
    /// the time.
    #[test]
    fn the_fast_paths_agree_with_the_way_lists(
        ops in proptest::collection::vec(op_or_range(96), 1..300),
        wa in (any::<bool>(), any::<bool>()),
        l1_ways in proptest::sample::select(vec![1u64, 4, 8]),
        l2_ways in proptest::sample::select(vec![8u64, 16]),
    ) {
        let s = spec((64 * l1_ways, l1_ways), (64 * l2_ways, l2_ways), wa);
        agrees_with_the_way_lists(&s, &ops)?;
    }
}
