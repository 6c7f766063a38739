//! Property tests of the cache model against two references written from the rules in the
//! module header, not from its code:
//!
//! - with no capacity pressure (every set of every level holds all the lines it is ever given),
//!   the rules reduce to sets: which lines are present and which are dirty at each level;
//! - under pressure, a per-set list of ways with the same replacement rule (lowest free way,
//!   else round-robin) kept as plain vectors, stepped through the same rules one by one.
//!
//! In both, random CPU reads and writes and random inner and outer maintenance (single lines,
//! and ranges in consecutive blocks) over a small two-level cache must leave the same present
//! and dirty lines at every level, and the same number of writebacks out of each level.

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

/// A range or block operation as the single-line operations the references take it as.
fn singles(o: Op) -> Vec<Op> {
    match o {
        Op::Range(a, first, n) => (first..first + n)
            .map(|l| match a {
                Access::Read => Op::Read(l),
                Access::Write => Op::Write(l),
            })
            .collect(),
        Op::Blocks(outer, m, first, n, k, write) => (0..k)
            .flat_map(|b| {
                let maint = (first + b * n..first + (b + 1) * n).map(move |l| {
                    if outer {
                        Op::Outer(m, l)
                    } else {
                        Op::Inner(m, l)
                    }
                });
                maint.chain(write.map(Op::Write))
            })
            .collect(),
        o => vec![o],
    }
}

fn observed(c: &Caches, level: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let v = c.contents(level);
    (
        v.iter().map(|l| l.0).collect(),
        v.iter().filter(|l| l.1).map(|l| l.0).collect(),
    )
}

/// The rules with unlimited capacity: present and dirty sets per level.
#[derive(Default)]
struct Sets {
    present: [BTreeSet<u64>; 2],
    dirty: [BTreeSet<u64>; 2],
    wa: [bool; 2],
    writebacks: [u64; 2],
}

impl Sets {
    fn write_into(&mut self, level: usize, l: u64) {
        if level == 2 {
            return;
        }
        if self.present[level].contains(&l) || self.wa[level] {
            self.present[level].insert(l);
            self.dirty[level].insert(l);
        } else {
            self.write_into(level + 1, l);
        }
    }

    fn maint(&mut self, level: usize, m: Maint, l: u64) {
        if !self.present[level].contains(&l) {
            return;
        }
        if m != Maint::Inval && self.dirty[level].remove(&l) {
            self.writebacks[level] += 1;
            self.write_into(level + 1, l);
        }
        if m != Maint::Clean {
            self.present[level].remove(&l);
            self.dirty[level].remove(&l);
        }
    }

    fn apply(&mut self, o: Op) {
        match o {
            Op::Read(l) => {
                // Read-allocate in every level above the one that has it.
                if !self.present[0].contains(&l) {
                    self.present[1].insert(l);
                    self.present[0].insert(l);
                }
            }
            Op::Write(l) => {
                if self.present[0].contains(&l) || self.wa[0] {
                    if !self.present[0].contains(&l) {
                        self.present[1].insert(l);
                    }
                    self.present[0].insert(l);
                    self.dirty[0].insert(l);
                } else {
                    self.write_into(1, l);
                }
            }
            Op::Inner(m, l) => self.maint(0, m, l),
            Op::Outer(m, l) => self.maint(1, m, l),
            Op::Range(..) | Op::Blocks(..) => singles(o).into_iter().for_each(|o| self.apply(o)),
        }
    }
}

/// One set's ways: `(line, dirty)` or free.
type Set = Vec<Option<(u64, bool)>>;

/// The rules with capacity: per level, per set, a vector of ways.
struct Ways {
    /// [level][set].
    sets: Vec<Vec<Set>>,
    rr: Vec<Vec<usize>>,
    wa: [bool; 2],
    writebacks: [u64; 2],
    /// CPU accesses answered by the L1, the L2 and memory (a store the L1 does not allocate for
    /// counts as the L2's, where it goes).
    served: [u64; 3],
}

impl Ways {
    fn new(s: &HierarchySpec) -> Ways {
        let mut sets = Vec::new();
        let mut rr = Vec::new();
        for l in &s.levels {
            let n = l.geometry.sets() as usize;
            sets.push(vec![vec![None; l.geometry.ways as usize]; n]);
            rr.push(vec![0; n]);
        }
        Ways {
            sets,
            rr,
            wa: [s.levels[0].write_allocate, s.levels[1].write_allocate],
            writebacks: [0; 2],
            served: [0; 3],
        }
    }

    fn set(&mut self, level: usize, l: u64) -> &mut Set {
        let n = self.sets[level].len() as u64;
        &mut self.sets[level][(l % n) as usize]
    }

    fn way_of(&mut self, level: usize, l: u64) -> Option<usize> {
        self.set(level, l)
            .iter()
            .position(|w| matches!(w, Some((x, _)) if *x == l))
    }

    /// Place `l`; a dirty victim goes on into the next level.
    fn place(&mut self, level: usize, l: u64, dirty: bool) {
        let n = self.sets[level].len() as u64;
        let s = (l % n) as usize;
        let way = match self.sets[level][s].iter().position(|w| w.is_none()) {
            Some(w) => w,
            None => {
                let w = self.rr[level][s];
                self.rr[level][s] = (w + 1) % self.sets[level][s].len();
                w
            }
        };
        let victim = self.sets[level][s][way].replace((l, dirty));
        if let Some((v, true)) = victim {
            self.writebacks[level] += 1;
            self.write_into(level + 1, v);
        }
    }

    fn write_into(&mut self, level: usize, l: u64) {
        if level == 2 {
            return;
        }
        if let Some(w) = self.way_of(level, l) {
            self.set(level, l)[w] = Some((l, true));
        } else if self.wa[level] {
            self.place(level, l, true);
        } else {
            self.write_into(level + 1, l);
        }
    }

    fn fill(&mut self, l: u64) {
        if self.way_of(0, l).is_some() {
            return;
        }
        if self.way_of(1, l).is_none() {
            self.place(1, l, false);
        }
        self.place(0, l, false);
    }

    fn maint(&mut self, level: usize, m: Maint, l: u64) {
        let Some(w) = self.way_of(level, l) else {
            return;
        };
        let dirty = self.set(level, l)[w].unwrap().1;
        if dirty && m != Maint::Inval {
            self.writebacks[level] += 1;
            self.set(level, l)[w] = Some((l, false));
            self.write_into(level + 1, l);
        }
        if m != Maint::Clean {
            self.set(level, l)[w] = None;
        }
    }

    /// The level that holds `l` first, or memory (2).
    fn holder(&mut self, l: u64) -> usize {
        (0..2).find(|&k| self.way_of(k, l).is_some()).unwrap_or(2)
    }

    fn apply(&mut self, o: Op) {
        match o {
            Op::Read(l) => {
                self.served[self.holder(l)] += 1;
                self.fill(l)
            }
            Op::Write(l) => {
                let at = self.holder(l);
                self.served[if at > 0 && !self.wa[0] { 1 } else { at }] += 1;
                if self.way_of(0, l).is_some() || self.wa[0] {
                    self.fill(l);
                    let w = self.way_of(0, l).unwrap();
                    self.set(0, l)[w] = Some((l, true));
                } else {
                    self.write_into(1, l);
                }
            }
            Op::Inner(m, l) => self.maint(0, m, l),
            Op::Outer(m, l) => self.maint(1, m, l),
            Op::Range(..) | Op::Blocks(..) => singles(o).into_iter().for_each(|o| self.apply(o)),
        }
    }

    fn observed(&self, level: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
        let all: Vec<(u64, bool)> = self.sets[level]
            .iter()
            .flatten()
            .flatten()
            .copied()
            .collect();
        (
            all.iter().map(|l| l.0).collect(),
            all.iter().filter(|l| l.1).map(|l| l.0).collect(),
        )
    }
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
        r.apply(o);
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
            r.apply(o);
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
