//! Reference models of the cache hierarchy, written from the rules in the module header and not
//! from its code, for the property tests to compare [`Caches`] against (two levels, lines by
//! number):
//!
//! - [`Sets`]: the rules with no capacity pressure, which reduce to sets: which lines are present
//!   and which are dirty at each level;
//! - [`Ways`]: the rules with capacity, a per-set list of ways with the same replacement rule
//!   (lowest free way, else round-robin) kept as plain vectors, stepped one line at a time.
//!
//! Kernel counterpart: none (the hardware's caches). Invariants: one step at a time, one line
//! at a time; nothing shortcut, so a disagreement is the fast model's.

use super::{HierarchySpec, Maint};
use std::collections::BTreeSet;

/// One step the references take: a CPU access or a maintenance operation of one line.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    Read(u64),
    Write(u64),
    /// Maintenance of the inner (L1) level.
    Inner(Maint, u64),
    /// Maintenance of the outer (L2) level.
    Outer(Maint, u64),
}

/// The rules with unlimited capacity: present and dirty sets per level.
#[derive(Default)]
pub struct Sets {
    pub present: [BTreeSet<u64>; 2],
    pub dirty: [BTreeSet<u64>; 2],
    /// Whether each level allocates on a write.
    pub wa: [bool; 2],
    /// Dirty lines written out of each level.
    pub writebacks: [u64; 2],
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

    pub fn apply(&mut self, o: Step) {
        match o {
            Step::Read(l) => {
                // Read-allocate in every level above the one that has it.
                if !self.present[0].contains(&l) {
                    self.present[1].insert(l);
                    self.present[0].insert(l);
                }
            }
            Step::Write(l) => {
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
            Step::Inner(m, l) => self.maint(0, m, l),
            Step::Outer(m, l) => self.maint(1, m, l),
        }
    }
}

/// One set's ways: `(line, dirty)` or free.
type Set = Vec<Option<(u64, bool)>>;

/// The rules with capacity: per level, per set, a vector of ways.
pub struct Ways {
    /// [level][set].
    sets: Vec<Vec<Set>>,
    rr: Vec<Vec<usize>>,
    wa: [bool; 2],
    pub writebacks: [u64; 2],
    /// CPU accesses answered by the L1, the L2 and memory (a store the L1 does not allocate for
    /// counts as the L2's, where it goes).
    pub served: [u64; 3],
}

impl Ways {
    pub fn new(s: &HierarchySpec) -> Ways {
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

    pub fn apply(&mut self, o: Step) {
        match o {
            Step::Read(l) => {
                self.served[self.holder(l)] += 1;
                self.fill(l)
            }
            Step::Write(l) => {
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
            Step::Inner(m, l) => self.maint(0, m, l),
            Step::Outer(m, l) => self.maint(1, m, l),
        }
    }

    pub fn observed(&self, level: usize) -> (BTreeSet<u64>, BTreeSet<u64>) {
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
