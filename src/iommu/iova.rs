//! The IOVA allocator.
//!
//! Kernel counterpart: drivers/iommu/iova.c — `init_iova_domain`, `alloc_iova` /
//! `__alloc_and_insert_iova_range`, `free_iova` / `find_iova`, the cached-node bookkeeping
//! (`__get_cached_rbnode`, `__cached_rbnode_insert_update`, `__cached_rbnode_delete_update`,
//! `max32_alloc_size`, `iova_find_limit`), and the range cache: `alloc_iova_fast`,
//! `free_iova_fast`, `iova_rcache_get` / `iova_rcache_insert` with per-CPU `loaded`/`prev`
//! magazines of `IOVA_MAG_SIZE` pfns and a depot of full magazines.
//!
//! What it models: allocations are ranges of pfns (granule units) kept in an ordered map standing
//! in for the rbtree, with the kernel's anchor node at the top. `alloc_iova` with `size_aligned`
//! aligns the range to its size rounded up to a power of two and walks the tree downwards from the
//! cached node (the last allocation, or the node above the last free above it) to the first gap
//! that fits below the limit; if that fails and the walk did not start at the limit, it retries
//! once over the space above where it started (from 5.11). `alloc_iova_fast` rounds sizes
//! below 32 granules up to a power of two and serves sizes of up to 2^5 granules
//! (`IOVA_RANGE_CACHE_MAX_SIZE` orders) from the per-CPU magazines first; `free_iova_fast` puts
//! them back there, so a hot map/unmap loop rarely touches the tree. On exhaustion the fast path
//! flushes the cached IOVAs back to the tree (5.10: the per-CPU magazines only) and tries once
//! more.
//!
//! Sharing between CPUs (the same in every release modelled, 5.3 to 6.6): each CPU's magazines
//! are under its own `cpu_rcache->lock`, each order's depot under `rcache->lock` (taken inside
//! the CPU's lock), the tree under `iova_rbtree_lock`; a magazine freed to the tree is freed
//! under one hold of the tree's lock (`iova_magazine_free_pfns`), after the CPU's lock is
//! released. The locks are real shared locks ([`crate::smp`]): a CPU that finds one held waits
//! for its holder.
//!
//! Releases: each behaviour that changed between 5.10 and 6.2 is a release rule ([`IovaRules`],
//! chosen once at setup from the `iova` policy's [`IovaRelease`]); [`IovaDomain::new`] starts
//! with the newest rules. Read from the sources of each release:
//! - 5.10: no retry — one walk down from the cached node, and it may continue below `start_pfn`
//!   (its loop does not test the low bound); on exhaustion `alloc_iova_fast` frees the per-CPU
//!   magazines only, not the depot.
//! - 5.11 (4e89dce72521, "Retry from last rb tree node if iova search fails"): when the walk
//!   fails below the cached node, one more walk from the top over the space above it, starting
//!   at the anchor, with `retry_pfn = pfn_hi + 1` — which wraps to 0 when the cached node is the
//!   anchor, so an exhausted domain is walked twice and the second walk may hand out pfns below
//!   `start_pfn` (pfn 0, which iommu-dma takes for a failure and never frees). The exhaustion
//!   flush frees the depot too (`free_global_cached_iovas`).
//! - 5.13 (371d7955e310, "Improve restart logic"): the retry starts at `iova_find_limit()`
//!   instead of the anchor, so it no longer walks every node above a 32-bit limit.
//! - 5.18 ("Improve 32-bit free space estimate"): any free below 4 GiB resets
//!   `max32_alloc_size`; before, only a free that also moved `cached32_node` did.
//! - 6.0 (b4c9bf178ace): `IOVA_MAG_SIZE` 127, so that a magazine (its count and pfns) fills
//!   a 1 KiB slab object instead of spilling into a 2 KiB one.
//! - 6.2 ("Fix alloc iova overflows issue", Fixes: 4e89dce72521): `retry_pfn = pfn_hi` and
//!   `low_pfn = retry_pfn + 1`: no retry at all when the walk already started at the anchor.
//!
//! Not modelled: 6.7's unbounded depot trimmed by delayed work (every release here keeps at
//! most `MAX_GLOBAL_MAGS` magazines and frees the rest to the tree, as 5.10–6.6 do), and the
//! allocators before 5.10 (releases before 5.10 run 5.10's rules). The tree is an ordered map
//! standing in for the rbtree: the walks' node visits are exact, but `iova_find_limit`'s
//! descent from the root has no rbtree shape to count, so it is charged as one step.
//!
//! Invariants: allocated ranges never overlap and lie in `[start_pfn, limit]`, except what the
//! wrapped retry of 5.11–6.1 hands out below `start_pfn`; a cached pfn is
//! still allocated in the tree (the cache only defers the free); the anchor is never allocated
//! or freed.

use super::IommuError;
use crate::hw::SmpHw;
use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::smp::{PerCpu, SpinLock};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// pfns per magazine up to 5.19; 127 from 6.0 ([`IovaRules::mag_size`]).
pub const IOVA_MAG_SIZE: usize = 128;
/// Orders cached: sizes of 2^0 .. 2^(IOVA_RANGE_CACHE_MAX_SIZE - 1) granules.
pub const IOVA_RANGE_CACHE_MAX_SIZE: u32 = 6;
/// Full magazines a depot keeps.
pub const MAX_GLOBAL_MAGS: usize = 32;
/// The anchor node's pfn (`IOVA_ANCHOR`).
const IOVA_ANCHOR: u64 = u64::MAX;

/// Where `__alloc_and_insert_iova_range()`'s second walk starts, and from which pfn up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IovaRetry {
    /// 5.10: no second walk.
    None,
    /// 5.11–5.12: `retry_pfn = pfn_hi + 1` (wrapping to 0 at the anchor), restart at the anchor.
    WrapFromAnchor,
    /// 5.13–6.1: `retry_pfn = pfn_hi + 1` (wrapping), restart at `iova_find_limit()`.
    WrapFromLimit,
    /// 6.2: `retry_pfn = pfn_hi`, `low_pfn = retry_pfn + 1`, restart at `iova_find_limit()`.
    FromLimit,
}

/// The allocator's behaviour in one release (see the module header for the sources).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IovaRules {
    /// `IOVA_MAG_SIZE`.
    pub mag_size: usize,
    pub retry: IovaRetry,
    /// The exhaustion flush of `alloc_iova_fast` also empties the depot
    /// (`free_global_cached_iovas`, 5.11).
    pub flush_depot: bool,
    /// Any free below 4 GiB resets `max32_alloc_size` (5.18); before, only one that moved
    /// `cached32_node`.
    pub max32_reset_on_free_below_4g: bool,
}

/// The `iova` policy: which release's allocator rules run, named by the release that
/// introduced them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IovaRelease {
    Linux5_10,
    Linux5_11,
    Linux5_13,
    Linux5_18,
    Linux6_0,
    Linux6_2,
}

impl IovaRelease {
    /// The rules a release runs.
    pub fn rules(self) -> IovaRules {
        use IovaRelease::*;
        IovaRules {
            mag_size: if self >= Linux6_0 { 127 } else { IOVA_MAG_SIZE },
            retry: match self {
                Linux5_10 => IovaRetry::None,
                Linux5_11 => IovaRetry::WrapFromAnchor,
                Linux5_13 | Linux5_18 | Linux6_0 => IovaRetry::WrapFromLimit,
                Linux6_2 => IovaRetry::FromLimit,
            },
            flush_depot: self >= Linux5_11,
            max32_reset_on_free_below_4g: self >= Linux5_18,
        }
    }
}

impl crate::types::Choice for IovaRelease {
    const ALL: &'static [Self] = &[
        IovaRelease::Linux5_10,
        IovaRelease::Linux5_11,
        IovaRelease::Linux5_13,
        IovaRelease::Linux5_18,
        IovaRelease::Linux6_0,
        IovaRelease::Linux6_2,
    ];
    fn name(self) -> &'static str {
        match self {
            IovaRelease::Linux5_10 => "5.10",
            IovaRelease::Linux5_11 => "5.11",
            IovaRelease::Linux5_13 => "5.13",
            IovaRelease::Linux5_18 => "5.18",
            IovaRelease::Linux6_0 => "6.0",
            IovaRelease::Linux6_2 => "6.2",
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    hit: SwCost,
    miss: SwCost,
    insert: SwCost,
    depot: SwCost,
    alloc: SwCost,
    step: SwCost,
    free: SwCost,
}

/// `struct iova_cpu_rcache`.
#[derive(Clone, Debug, Default)]
struct CpuRcache {
    loaded: Vec<u64>,
    prev: Vec<u64>,
}

/// `struct iova_rcache`: one per cached order. Each CPU's magazines under that CPU's
/// `cpu_rcache->lock`, the depot under `rcache->lock`.
#[derive(Debug)]
struct IovaRcache {
    depot: SpinLock<Vec<Vec<u64>>>,
    cpu_rcaches: PerCpu<SpinLock<CpuRcache>>,
}

impl IovaRcache {
    fn new(ncpus: usize) -> IovaRcache {
        IovaRcache {
            depot: SpinLock::named("rcache->lock", "(spinning on rcache->lock)", Vec::new()),
            cpu_rcaches: PerCpu::new(ncpus, |_| {
                SpinLock::per_cpu(
                    "cpu_rcache->lock",
                    "(spinning on cpu_rcache->lock)",
                    CpuRcache::default(),
                )
            }),
        }
    }
}

/// Statistics of the fast path, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IovaStats {
    pub rcache_hits: u64,
    pub rcache_misses: u64,
    pub tree_allocs: u64,
    pub tree_frees: u64,
    /// Nodes visited by the allocation walks (`__alloc_and_insert_iova_range`'s loop), each
    /// charged one `iova_rbtree_step`.
    pub tree_steps: u64,
    /// Second walks (the retry over the space above the cached node).
    pub retries: u64,
    /// `iova_find_limit()` descents from the root (a limit at or below 4 GiB), one step each.
    pub find_limit_descents: u64,
    pub rcache_flushes: u64,
}

/// The rbtree half of `struct iova_domain`: what `iova_rbtree_lock` protects.
#[derive(Clone, Debug)]
struct IovaTree {
    start_pfn: u64,
    dma_32bit_pfn: u64,
    /// pfn_lo -> pfn_hi of every allocated range, plus the anchor.
    tree: BTreeMap<u64, u64>,
    /// Keys (pfn_lo) of the cached nodes.
    cached_node: u64,
    cached32_node: u64,
    max32_alloc_size: u64,
    rules: IovaRules,
    costs: Costs,
    /// The tree's figures (allocations, frees, steps, retries, descents).
    stats: IovaStats,
}

/// `struct iova_domain`, shared by every CPU that maps through it: the tree under
/// `iova_rbtree_lock`, and per cached order each CPU's magazines and the depot under their
/// locks ([`IovaRcache`]). Every method takes `&self`; each lock owns what it protects.
#[derive(Debug)]
pub struct IovaDomain {
    granule: u64,
    tree: SpinLock<IovaTree>,
    rcaches: Vec<IovaRcache>,
    rules: IovaRules,
    costs: Costs,
    /// The range caches' figures (hits, misses, flushes).
    rstats: Cell<IovaStats>,
    /// Every pfn sitting in a magazine or the depot: the model's own bookkeeping for its
    /// double-free guard (the kernel keeps none), so that the guard does not search every CPU's
    /// magazines.
    cached: RefCell<HashSet<u64, BuildHasherDefault<PfnHasher>>>,
}

/// A hasher for pfns: one multiply (Fibonacci hashing), which spreads the low, dense bits.
#[derive(Default)]
struct PfnHasher(u64);

impl Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `order_base_2()`.
fn order_base_2(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

impl IovaTree {
    /// `find_iova()`: the range containing `pfn`.
    fn find_iova(&self, pfn: u64) -> Option<(u64, u64)> {
        self.tree
            .range(..=pfn)
            .next_back()
            .filter(|(k, hi)| **k != IOVA_ANCHOR && pfn <= **hi)
            .map(|(&k, &v)| (k, v))
    }

    fn get_cached_node(&self, limit_pfn: u64) -> u64 {
        if limit_pfn <= self.dma_32bit_pfn {
            self.cached32_node
        } else {
            self.cached_node
        }
    }

    /// `iova_find_limit()`: the node holding `limit_pfn`, else the lowest one above it. Above
    /// 4 GiB the kernel does not search and starts at the anchor; below, it descends from the
    /// root, charged as one step (see the module header).
    fn find_limit(&mut self, hw: &mut dyn Hw, limit_pfn: u64) -> u64 {
        if limit_pfn > self.dma_32bit_pfn {
            return IOVA_ANCHOR;
        }
        hw.sw(self.costs.step);
        self.stats.find_limit_descents += 1;
        if let Some((&lo, _)) = self
            .tree
            .range(..limit_pfn)
            .next_back()
            .filter(|(_, hi)| **hi >= limit_pfn)
        {
            return lo;
        }
        self.tree
            .range(limit_pfn..)
            .next()
            .map_or(IOVA_ANCHOR, |(&k, _)| k)
    }

    /// `__alloc_and_insert_iova_range()` under the domain's rules. `limit_pfn` is exclusive.
    /// Every node the walks visit is counted and charged one step.
    fn alloc_and_insert(
        &mut self,
        hw: &mut dyn Hw,
        size: u64,
        limit_pfn: u64,
        size_aligned: bool,
    ) -> Option<u64> {
        let align_mask = if size_aligned {
            u64::MAX << order_base_2(size)
        } else {
            u64::MAX
        };
        if limit_pfn <= self.dma_32bit_pfn && size >= self.max32_alloc_size {
            return None;
        }
        let retry = self.rules.retry;
        // 5.10's loop does not test the low bound: it walks on below start_pfn while the gap
        // test fails, and only the final check refuses.
        let loop_tests_low = retry != IovaRetry::None;
        let mut high_pfn = limit_pfn;
        let mut low_pfn = self.start_pfn;
        let mut curr = self.get_cached_node(limit_pfn);
        let cached_hi = self.tree[&curr];
        // The pfn above which the second walk looks: the cached node's end, plus one in the
        // releases that add it here (5.11–6.1), where the anchor's ~0 wraps to 0.
        let retry_pfn = match retry {
            IovaRetry::FromLimit => cached_hi,
            _ => cached_hi.wrapping_add(1),
        };
        loop {
            let mut new_pfn;
            loop {
                hw.sw(self.costs.step);
                self.stats.tree_steps += 1;
                high_pfn = high_pfn.min(curr);
                new_pfn = high_pfn.wrapping_sub(size) & align_mask;
                let prev = self.tree.range(..curr).next_back().map(|(&k, &hi)| (k, hi));
                match prev {
                    Some((p, hi)) if new_pfn <= hi && (!loop_tests_low || new_pfn >= low_pfn) => {
                        curr = p;
                    }
                    _ => break,
                }
            }
            if high_pfn < size || new_pfn < low_pfn {
                if low_pfn == self.start_pfn && retry_pfn < limit_pfn {
                    let (low, restart) = match retry {
                        IovaRetry::None => (None, IOVA_ANCHOR),
                        IovaRetry::WrapFromAnchor => (Some(retry_pfn), IOVA_ANCHOR),
                        IovaRetry::WrapFromLimit => {
                            (Some(retry_pfn), self.find_limit(hw, limit_pfn))
                        }
                        IovaRetry::FromLimit => {
                            (Some(retry_pfn + 1), self.find_limit(hw, limit_pfn))
                        }
                    };
                    if let Some(low) = low {
                        self.stats.retries += 1;
                        high_pfn = limit_pfn;
                        low_pfn = low;
                        curr = restart;
                        continue;
                    }
                }
                self.max32_alloc_size = size;
                return None;
            }
            let hi = new_pfn + size - 1;
            self.tree.insert(new_pfn, hi);
            if hi < self.dma_32bit_pfn {
                self.cached32_node = new_pfn;
            } else {
                self.cached_node = new_pfn;
            }
            return Some(new_pfn);
        }
    }

    /// `alloc_iova()`'s work under `iova_rbtree_lock`.
    fn alloc(
        &mut self,
        hw: &mut dyn Hw,
        size: u64,
        limit_pfn: u64,
        size_aligned: bool,
    ) -> Result<u64, IommuError> {
        let back = hw.enter(crate::frame_id!("alloc_iova"));
        hw.sw(self.costs.alloc);
        let limit = limit_pfn.min(IOVA_ANCHOR - 1) + 1;
        let r = self.alloc_and_insert(hw, size, limit, size_aligned);
        hw.leave(back);
        match r {
            Some(pfn) => {
                self.stats.tree_allocs += 1;
                Ok(pfn)
            }
            None => Err(IommuError::IovaExhausted {
                pages: size,
                limit_pfn,
            }),
        }
    }

    /// `__free_iova()` of the range containing `pfn`, under `iova_rbtree_lock`.
    fn free(&mut self, hw: &mut dyn Hw, pfn: u64) -> Result<(), IommuError> {
        let (lo, hi) = self.find_iova(pfn).ok_or(IommuError::IovaBadFree(pfn))?;
        let back = hw.enter(crate::frame_id!("free_iova"));
        hw.sw(self.costs.free);
        self.delete_update(lo, hi);
        self.tree.remove(&lo);
        self.stats.tree_frees += 1;
        hw.leave(back);
        Ok(())
    }

    /// `__cached_rbnode_delete_update()`, before `lo..=hi` leaves the tree.
    fn delete_update(&mut self, lo: u64, hi: u64) {
        let next = || {
            self.tree
                .range(lo + 1..)
                .next()
                .map_or(IOVA_ANCHOR, |(&k, _)| k)
        };
        let moves_cached32 =
            self.cached32_node == lo || (hi < self.dma_32bit_pfn && lo >= self.cached32_node);
        if moves_cached32 {
            self.cached32_node = next();
        }
        let resets_max32 = if self.rules.max32_reset_on_free_below_4g {
            lo < self.dma_32bit_pfn
        } else {
            moves_cached32
        };
        if resets_max32 {
            self.max32_alloc_size = self.dma_32bit_pfn;
        }
        if lo >= self.cached_node {
            self.cached_node = next();
        }
    }
}

impl IovaDomain {
    /// `init_iova_domain()` plus `iova_domain_init_rcaches()` for `ncpus` CPUs, under the newest
    /// modelled rules ([`IovaDomain::with_rules`] picks a release's). `granule` is the IOMMU page
    /// size; `start_pfn` the lowest allocatable pfn (the kernel keeps pfn 0 out).
    pub fn new(
        hw: &dyn Hw,
        granule: u64,
        start_pfn: u64,
        ncpus: usize,
    ) -> Result<IovaDomain, IommuError> {
        if !granule.is_power_of_two() || granule < 4096 {
            return Err(IommuError::BadGranule(granule));
        }
        let shift = granule.trailing_zeros();
        let dma_32bit_pfn = (1u64 << 32) >> shift;
        let ncpus = ncpus.max(1);
        let rules = IovaRelease::Linux6_2.rules();
        let costs = Costs {
            hit: hw.sw_cost(SwKey::IovaRcacheHit),
            miss: hw.sw_cost(SwKey::IovaRcacheMiss),
            insert: hw.sw_cost(SwKey::IovaRcacheInsert),
            depot: hw.sw_cost(SwKey::IovaDepotSwap),
            alloc: hw.sw_cost(SwKey::AllocIova),
            step: hw.sw_cost(SwKey::IovaRbtreeStep),
            free: hw.sw_cost(SwKey::FreeIova),
        };
        Ok(IovaDomain {
            granule,
            tree: SpinLock::named(
                "iova_rbtree_lock",
                "(spinning on iova_rbtree_lock)",
                IovaTree {
                    start_pfn: start_pfn.max(1),
                    dma_32bit_pfn,
                    tree: BTreeMap::from([(IOVA_ANCHOR, IOVA_ANCHOR)]),
                    cached_node: IOVA_ANCHOR,
                    cached32_node: IOVA_ANCHOR,
                    max32_alloc_size: dma_32bit_pfn,
                    rules,
                    costs,
                    stats: IovaStats::default(),
                },
            ),
            rcaches: (0..IOVA_RANGE_CACHE_MAX_SIZE)
                .map(|_| IovaRcache::new(ncpus))
                .collect(),
            rules,
            costs,
            rstats: Cell::new(IovaStats::default()),
            cached: RefCell::default(),
        })
    }

    /// The same empty domain under a release's rules (chosen once, at setup).
    pub fn with_rules(mut self, rules: IovaRules) -> IovaDomain {
        let mut t = self.tree.peek_mut();
        debug_assert!(t.tree.len() == 1, "rules change on a domain in use");
        t.rules = rules;
        drop(t);
        self.rules = rules;
        self
    }

    pub fn rules(&self) -> IovaRules {
        self.rules
    }

    pub fn granule(&self) -> u64 {
        self.granule
    }
    pub fn shift(&self) -> u32 {
        self.granule.trailing_zeros()
    }
    pub fn start_pfn(&self) -> u64 {
        self.tree.peek().start_pfn
    }
    pub fn ncpus(&self) -> usize {
        self.rcaches[0].cpu_rcaches.len()
    }

    /// The figures of the fast path and the tree so far.
    pub fn stats(&self) -> IovaStats {
        let (r, t) = (self.rstats.get(), self.tree.peek().stats);
        IovaStats {
            rcache_hits: r.rcache_hits,
            rcache_misses: r.rcache_misses,
            rcache_flushes: r.rcache_flushes,
            tree_allocs: t.tree_allocs,
            tree_frees: t.tree_frees,
            tree_steps: t.tree_steps,
            retries: t.retries,
            find_limit_descents: t.find_limit_descents,
        }
    }

    /// Start the figures again from zero.
    pub fn clear_stats(&self) {
        self.rstats.set(IovaStats::default());
        self.tree.peek_mut().stats = IovaStats::default();
    }

    fn rstat(&self, f: impl FnOnce(&mut IovaStats)) {
        let mut s = self.rstats.get();
        f(&mut s);
        self.rstats.set(s);
    }

    /// What the domain's locks saw: the tree's, then each order's depot lock.
    pub fn lock_records(&self) -> Vec<(&'static str, crate::smp::LockRecord)> {
        let mut out = vec![(self.tree.name(), self.tree.record())];
        let (mut depot, mut cpu) = Default::default();
        for rc in &self.rcaches {
            crate::smp::LockRecord::merge(&mut depot, &rc.depot.record());
            for l in rc.cpu_rcaches.iter() {
                crate::smp::LockRecord::merge(&mut cpu, &l.record());
            }
        }
        out.push((self.rcaches[0].depot.name(), depot));
        out.push(("cpu_rcache->lock", cpu));
        out
    }

    /// Allocated ranges `(pfn_lo, pfn_hi)` in ascending order, cached ones included.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.tree
            .peek()
            .tree
            .iter()
            .filter(|(k, _)| **k != IOVA_ANCHOR)
            .map(|(&k, &v)| (k, v))
            .collect()
    }

    /// pfns sitting in magazines or the depot (allocated in the tree, free to reuse).
    pub fn cached_pfns(&self) -> usize {
        self.rcaches
            .iter()
            .map(|r| {
                r.depot.peek().iter().map(Vec::len).sum::<usize>()
                    + r.cpu_rcaches
                        .iter()
                        .map(|c| {
                            let c = c.peek();
                            c.loaded.len() + c.prev.len()
                        })
                        .sum::<usize>()
            })
            .sum()
    }

    /// `find_iova()`: the range containing `pfn`.
    pub fn find_iova(&self, pfn: u64) -> Option<(u64, u64)> {
        self.tree.peek().find_iova(pfn)
    }

    /// `reserve_iova()`: pfns `lo..=hi` taken, so that the allocator never hands them out (as
    /// iommu-dma reserves a device's reserved regions). The kernel merges a reservation with
    /// ranges it overlaps; the model reserves only free ranges and says whether this one was.
    pub fn reserve_iova(&self, lo: u64, hi: u64) -> bool {
        let mut t = self.tree.peek_mut();
        let free = lo <= hi
            && t.tree
                .range(..=hi)
                .next_back()
                .is_none_or(|(_, &end)| end < lo);
        if free {
            t.tree.insert(lo, hi);
        }
        free
    }

    /// `alloc_iova()`: `size` granules ending at or below `limit_pfn` (inclusive), aligned to the
    /// size rounded up to a power of two when `size_aligned`. Returns the first pfn.
    pub fn alloc_iova(
        &self,
        hw: &mut dyn Hw,
        size: u64,
        limit_pfn: u64,
        size_aligned: bool,
    ) -> Result<u64, IommuError> {
        if size == 0 {
            return Err(IommuError::Empty);
        }
        hw.with_lock(&self.tree, |hw, t| {
            t.alloc(hw, size, limit_pfn, size_aligned)
        })
    }

    /// `free_iova()` / `__free_iova()`: release the range containing `pfn`.
    pub fn free_iova(&self, hw: &mut dyn Hw, pfn: u64) -> Result<(), IommuError> {
        hw.with_lock(&self.tree, |hw, t| t.free(hw, pfn))
    }

    /// `iova_magazine_free_pfns()`: every pfn of a magazine back to the tree, under one hold of
    /// `iova_rbtree_lock`.
    fn free_pfns(&self, hw: &mut dyn Hw, pfns: Vec<u64>) {
        if pfns.is_empty() {
            return;
        }
        {
            let mut cached = self.cached.borrow_mut();
            for p in &pfns {
                cached.remove(p);
            }
        }
        hw.with_lock(&self.tree, |hw, t| {
            for p in pfns {
                let r = t.free(hw, p);
                debug_assert!(r.is_ok(), "cached pfn not in the tree: {r:?}");
            }
        });
    }

    /// `alloc_iova_fast()`: from this CPU's magazines if it can, else the tree; on exhaustion,
    /// flush every cache back to the tree and try once more (`flush_rcache`).
    pub fn alloc_iova_fast(
        &self,
        hw: &mut dyn Hw,
        size: u64,
        limit_pfn: u64,
        flush_rcache: bool,
    ) -> Result<u64, IommuError> {
        let cpu = hw.cpu();
        if cpu >= self.ncpus() {
            return Err(IommuError::BadCpu(cpu));
        }
        if size == 0 {
            return Err(IommuError::Empty);
        }
        let back = hw.enter(crate::frame_id!("alloc_iova_fast"));
        // Rounded up so that a freed range goes back into the magazine of its own order.
        let size = if size < 1 << (IOVA_RANGE_CACHE_MAX_SIZE - 1) {
            size.next_power_of_two()
        } else {
            size
        };
        let r = match self.rcache_get(hw, cpu, size, limit_pfn) {
            Some(pfn) => Ok(pfn),
            None => {
                let mut r = self.alloc_iova(hw, size, limit_pfn, true);
                if r.is_err() && flush_rcache {
                    if self.rules.flush_depot {
                        self.flush_rcaches(hw);
                    } else {
                        self.flush_cpu_rcaches(hw);
                    }
                    r = self.alloc_iova(hw, size, limit_pfn, true);
                }
                r
            }
        };
        if r.is_ok() {
            hw.count(Counter::IovaAlloc, 1);
        }
        hw.leave(back);
        r
    }

    /// `free_iova_fast()`: into this CPU's magazine, or back to the tree.
    pub fn free_iova_fast(&self, hw: &mut dyn Hw, pfn: u64, size: u64) -> Result<(), IommuError> {
        let cpu = hw.cpu();
        self.free_iova_fast_on(hw, cpu, pfn, size)
    }

    /// [`IovaDomain::free_iova_fast`] as CPU `cpu` runs it: the flush queue's timer, which the
    /// model runs on the CPU that finds it expired, frees into the magazines of the CPU that
    /// armed it, where the kernel's timer runs.
    pub fn free_iova_fast_on(
        &self,
        hw: &mut dyn Hw,
        cpu: usize,
        pfn: u64,
        size: u64,
    ) -> Result<(), IommuError> {
        if cpu >= self.ncpus() {
            return Err(IommuError::BadCpu(cpu));
        }
        // A model-only guard (the kernel would corrupt its lists): what is freed must be an
        // allocated range's start and not already cached.
        let Some((lo, _)) = self.find_iova(pfn).filter(|(lo, _)| *lo == pfn) else {
            return Err(IommuError::IovaBadFree(pfn));
        };
        if self.cached_pfn(lo) {
            return Err(IommuError::IovaBadFree(pfn));
        }
        let back = hw.enter(crate::frame_id!("free_iova_fast"));
        let order = order_base_2(size);
        let r = if order < IOVA_RANGE_CACHE_MAX_SIZE {
            self.cached.borrow_mut().insert(pfn);
            self.rcache_insert(hw, cpu, order as usize, pfn);
            Ok(())
        } else {
            self.free_iova(hw, pfn)
        };
        if r.is_ok() {
            hw.count(Counter::IovaFree, 1);
        }
        hw.leave(back);
        r
    }

    /// Whether `pfn` already sits in a cache (a second free of it would be a double free).
    fn cached_pfn(&self, pfn: u64) -> bool {
        self.cached.borrow().contains(&pfn)
    }

    /// `iova_rcache_get()` / `__iova_rcache_get()` / `iova_magazine_pop()`: under the CPU's
    /// `cpu_rcache->lock`, and the depot's `rcache->lock` when both magazines are empty.
    fn rcache_get(&self, hw: &mut dyn Hw, cpu: usize, size: u64, limit_pfn: u64) -> Option<u64> {
        let order = order_base_2(size);
        if order >= IOVA_RANGE_CACHE_MAX_SIZE {
            return None;
        }
        // pfn + size - 1 <= limit_pfn.
        let limit = limit_pfn.saturating_add(1).checked_sub(size)?;
        let rc = &self.rcaches[order as usize];
        let cpu_rcache = rc.cpu_rcaches.get(cpu)?;
        hw.with_lock(cpu_rcache, |hw, c| {
            let has = if !c.loaded.is_empty() {
                true
            } else if !c.prev.is_empty() {
                std::mem::swap(&mut c.loaded, &mut c.prev);
                true
            } else {
                match hw.with_lock(&rc.depot, |_, depot| depot.pop()) {
                    Some(full) => {
                        hw.sw(self.costs.depot);
                        c.loaded = full;
                        true
                    }
                    None => false,
                }
            };
            // Take the last pfn under the limit, swapping the top into its place.
            let pfn = has
                .then(|| c.loaded.iter().rposition(|&p| p <= limit))
                .flatten()
                .map(|i| {
                    let pfn = c.loaded.swap_remove(i);
                    self.cached.borrow_mut().remove(&pfn);
                    pfn
                });
            if pfn.is_some() {
                hw.count(Counter::IovaRcacheHit, 1);
                hw.sw(self.costs.hit);
                self.rstat(|s| s.rcache_hits += 1);
            } else {
                hw.sw(self.costs.miss);
                self.rstat(|s| s.rcache_misses += 1);
            }
            pfn
        })
    }

    /// `__iova_rcache_insert()`: under the CPU's `cpu_rcache->lock`; a full pair of magazines
    /// sends one to the depot under `rcache->lock`, or, the depot full, back to the tree once
    /// the CPU's lock is released.
    fn rcache_insert(&self, hw: &mut dyn Hw, cpu: usize, order: usize, pfn: u64) {
        hw.sw(self.costs.insert);
        let rc = &self.rcaches[order];
        let mag = self.rules.mag_size;
        let cpu_rcache = rc.cpu_rcaches.get(cpu).expect("the caller checked the CPU");
        let to_free = hw.with_lock(cpu_rcache, |hw, c| {
            let mut to_free = None;
            if c.loaded.len() >= mag {
                if c.prev.len() < mag {
                    std::mem::swap(&mut c.loaded, &mut c.prev);
                } else {
                    hw.sw(self.costs.depot);
                    let full = std::mem::replace(&mut c.loaded, Vec::with_capacity(mag));
                    to_free = hw.with_lock(&rc.depot, |_, depot| {
                        if depot.len() < MAX_GLOBAL_MAGS {
                            depot.push(full);
                            None
                        } else {
                            Some(full)
                        }
                    });
                }
            }
            c.loaded.push(pfn);
            to_free
        });
        if let Some(mag) = to_free {
            self.free_pfns(hw, mag);
        }
    }

    /// `free_cpu_cached_iovas()` for every CPU and `free_global_cached_iovas()`.
    pub fn flush_rcaches(&self, hw: &mut dyn Hw) {
        self.flush(hw, true);
    }

    /// `free_cpu_cached_iovas()` for every CPU alone: 5.10's exhaustion flush, which leaves
    /// the depot's magazines where they are.
    pub fn flush_cpu_rcaches(&self, hw: &mut dyn Hw) {
        self.flush(hw, false);
    }

    fn flush(&self, hw: &mut dyn Hw, depot: bool) {
        self.rstat(|s| s.rcache_flushes += 1);
        let mut pfns = Vec::new();
        for rc in &self.rcaches {
            for cpu_rcache in rc.cpu_rcaches.iter() {
                hw.with_lock(cpu_rcache, |_, c| {
                    pfns.append(&mut c.loaded);
                    pfns.append(&mut c.prev);
                });
            }
            if depot {
                hw.with_lock(&rc.depot, |_, d| {
                    for mut m in d.drain(..) {
                        pfns.append(&mut m);
                    }
                });
            }
        }
        self.free_pfns(hw, pfns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::recorder::Recorder;

    fn dom() -> (Recorder, IovaDomain) {
        let r = Recorder::new(64);
        let d = IovaDomain::new(&r, 4096, 1, 2).unwrap();
        (r, d)
    }

    /// A reserved range is never handed out: the top-down walk steps over it; a range that
    /// overlaps one taken is refused.
    #[test]
    fn reserved_ranges_are_skipped() {
        let (mut r, d) = dom();
        assert!(d.reserve_iova(0xff, 0xff));
        assert!(!d.reserve_iova(0xf0, 0xff), "overlaps the reservation");
        assert_eq!(d.alloc_iova(&mut r, 1, 0xff, true), Ok(0xfe));
        assert_eq!(d.find_iova(0xff), Some((0xff, 0xff)));
        assert!(!d.reserve_iova(0xfe, 0xfe), "allocated");
    }

    #[test]
    fn allocations_go_top_down_and_are_size_aligned() {
        let (mut r, d) = dom();
        let limit = (1u64 << 32 >> 12) - 1;
        assert_eq!(d.alloc_iova(&mut r, 1, limit, true), Ok(limit));
        assert_eq!(d.alloc_iova(&mut r, 4, limit, true), Ok(limit + 1 - 8));
        // 3 granules are aligned to 4.
        let p = d.alloc_iova(&mut r, 3, limit, true).unwrap();
        assert_eq!(p % 4, 0);
        assert_eq!(p, limit + 1 - 12);
        // Freeing the top one lets the walk find the gap again.
        d.free_iova(&mut r, limit).unwrap();
        assert_eq!(d.alloc_iova(&mut r, 1, limit, true), Ok(limit));
    }

    #[test]
    fn exhaustion_is_an_error_and_frees_make_room() {
        let (mut r, d) = dom();
        // pfns 1..=16 available, 16 aligned 1-granule ranges, then nothing.
        for _ in 0..16 {
            d.alloc_iova(&mut r, 1, 16, true).unwrap();
        }
        assert!(matches!(
            d.alloc_iova(&mut r, 1, 16, true),
            Err(IommuError::IovaExhausted { .. })
        ));
        d.free_iova(&mut r, 9).unwrap();
        assert_eq!(d.alloc_iova(&mut r, 1, 16, true), Ok(9));
        assert_eq!(d.free_iova(&mut r, 100), Err(IommuError::IovaBadFree(100)));
    }

    fn dom_of(r: &Recorder, start_pfn: u64, ncpus: usize, release: IovaRelease) -> IovaDomain {
        IovaDomain::new(r, 4096, start_pfn, ncpus)
            .unwrap()
            .with_rules(release.rules())
    }

    use IovaRelease::*;

    #[test]
    fn retry_finds_space_above_the_cached_node() {
        for rel in [
            Linux5_10, Linux5_11, Linux5_13, Linux5_18, Linux6_0, Linux6_2,
        ] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, 40, 1, rel);
            assert_eq!(d.alloc_iova(&mut r, 2, 63, true), Ok(62));
            // Aligned to 8 below 62: 48..=55, leaving 56..=61 free above the cached node.
            assert_eq!(d.alloc_iova(&mut r, 8, 63, true), Ok(48));
            assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(44));
            assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(40));
            // Nothing left below the cached node: from 5.11 the retry walks down from the
            // limit; 5.10 has no retry.
            let r5 = d.alloc_iova(&mut r, 4, 63, true);
            if rel == Linux5_10 {
                assert!(r5.is_err(), "{rel:?}");
                continue;
            }
            assert_eq!(r5, Ok(56), "{rel:?}");
            assert!(d.alloc_iova(&mut r, 4, 63, true).is_err());
            // The failure recorded the size: a 32-bit request that large now fails at once.
            let steps = d.stats().tree_steps;
            assert!(d.alloc_iova(&mut r, 4, 63, true).is_err());
            assert_eq!(d.stats().tree_steps, steps);
            // Freeing 44 (not the cached node) resets that estimate only from 5.18.
            d.free_iova(&mut r, 44).unwrap();
            let again = d.alloc_iova(&mut r, 4, 63, true);
            if rel >= Linux5_18 {
                assert_eq!(again, Ok(44), "{rel:?}");
            } else {
                assert!(again.is_err(), "{rel:?}");
                assert_eq!(
                    d.stats().tree_steps,
                    steps,
                    "{rel:?}: refused before any walk"
                );
            }
        }
    }

    /// pfns 1..=16 all allocated, then 16 freed: the 32-bit cached node is the anchor.
    fn full_with_the_anchor_cached(rel: IovaRelease) -> (Recorder, IovaDomain) {
        let mut r = Recorder::new(64);
        let d = dom_of(&r, 1, 1, rel);
        for _ in 0..16 {
            d.alloc_iova(&mut r, 1, 16, true).unwrap();
        }
        d.free_iova(&mut r, 16).unwrap();
        d.clear_stats();
        (r, d)
    }

    /// An exhausted domain whose walk starts at the anchor: 5.11–6.1's `retry_pfn` wraps to 0,
    /// so the whole tree is walked a second time (14 + 16 node visits, not 14); 5.10 walks
    /// on below start_pfn instead (16 visits); 6.2 does not retry.
    #[test]
    fn exhaustion_from_the_anchor_walks_twice_from_5_11_to_6_1() {
        for (rel, steps, retries, descents) in [
            (Linux5_10, 16, 0, 0),
            (Linux5_11, 30, 1, 0),
            (Linux5_13, 30, 1, 1),
            (Linux6_0, 30, 1, 1),
            (Linux6_2, 14, 0, 0),
        ] {
            let (mut r, d) = full_with_the_anchor_cached(rel);
            assert!(d.alloc_iova(&mut r, 2, 16, true).is_err(), "{rel:?}");
            assert_eq!(
                (
                    d.stats().tree_steps,
                    d.stats().retries,
                    d.stats().find_limit_descents
                ),
                (steps, retries, descents),
                "{rel:?}"
            );
        }
    }

    /// The same state, one granule below the freed top: the wrapped retry's low bound of 0
    /// lets the second walk hand out pfn 0, below start_pfn (the bug 6.2 fixed).
    #[test]
    fn the_wrapped_retry_hands_out_pfn_0() {
        for (rel, got, steps) in [
            (Linux5_10, None, 16),
            (Linux5_11, Some(0), 32),
            (Linux5_13, Some(0), 32),
            (Linux6_0, Some(0), 32),
            (Linux6_2, None, 16),
        ] {
            let (mut r, d) = full_with_the_anchor_cached(rel);
            assert_eq!(d.alloc_iova(&mut r, 1, 15, true).ok(), got, "{rel:?}");
            assert_eq!(d.stats().tree_steps, steps, "{rel:?}");
        }
    }

    /// A 32-bit retry with ten ranges above 4 GiB: 5.11/5.12 restart at the anchor and walk
    /// past all ten; from 5.13 `iova_find_limit` starts at the lowest of them.
    #[test]
    fn the_retry_starts_at_iova_find_limit_from_5_13() {
        let mut visits = Vec::new();
        for rel in [Linux5_11, Linux5_13, Linux6_2] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, 40, 1, rel);
            for _ in 0..10 {
                d.alloc_iova(&mut r, 1, (1 << 24) - 1, true).unwrap();
            }
            for (size, at) in [(2, 62), (8, 48), (4, 44), (4, 40)] {
                assert_eq!(d.alloc_iova(&mut r, size, 63, true), Ok(at));
            }
            d.clear_stats();
            assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(56), "{rel:?}");
            assert_eq!(d.stats().retries, 1);
            visits.push((d.stats().tree_steps, d.stats().find_limit_descents));
        }
        // First walk: 40 and nothing below it (1 visit). Retry from the anchor: the anchor,
        // the ten high ranges, then 62 where 56 fits (12); from iova_find_limit: the lowest
        // high range, then 62 (2), after one descent.
        assert_eq!(visits, vec![(13, 0), (3, 1), (3, 1)]);
    }

    /// Each visit is charged one `iova_rbtree_step` on the model's clock, each descent one.
    #[test]
    fn every_visit_is_charged_one_step() {
        use crate::hw::model::{Model, ModelParams};
        for (rel, ps) in [(Linux6_2, 14_000), (Linux5_11, 30_000), (Linux5_13, 31_000)] {
            let mut p = ModelParams::default();
            p.sw.insert("iova_rbtree_step".into(), 1000);
            let mut m = Model::new(p);
            let d = IovaDomain::new(&m, 4096, 1, 1)
                .unwrap()
                .with_rules(rel.rules());
            for _ in 0..16 {
                d.alloc_iova(&mut m, 1, 16, true).unwrap();
            }
            d.free_iova(&mut m, 16).unwrap();
            let t0 = m.ledger().total_ps();
            assert!(d.alloc_iova(&mut m, 2, 16, true).is_err());
            assert_eq!(m.ledger().total_ps() - t0, ps, "{rel:?}");
        }
    }

    #[test]
    fn hot_loop_is_served_by_the_magazines() {
        let (mut r, d) = dom();
        let limit = (1u64 << 36 >> 12) - 1;
        let first = d.alloc_iova_fast(r.as_cpu(0), 8, limit, true).unwrap();
        d.free_iova_fast(r.as_cpu(0), first, 8).unwrap();
        for _ in 0..1000 {
            let p = d.alloc_iova_fast(r.as_cpu(0), 8, limit, true).unwrap();
            assert_eq!(p, first);
            d.free_iova_fast(r.as_cpu(0), p, 8).unwrap();
        }
        assert_eq!(d.stats().tree_allocs, 1);
        assert_eq!(d.stats().rcache_hits, 1000);
        assert_eq!(d.stats().tree_frees, 0);
        // Another CPU has its own magazines.
        let q = d.alloc_iova_fast(r.as_cpu(1), 8, limit, true).unwrap();
        assert_ne!(q, first);
        assert_eq!(
            d.alloc_iova_fast(r.as_cpu(2), 8, limit, true),
            Err(IommuError::BadCpu(2))
        );
    }

    /// 34 magazines (loaded, prev and a full depot of 32) fill, the next free sends one back to
    /// the tree: 128 pfns each up to 5.19, 127 from 6.0.
    #[test]
    fn full_magazines_go_to_the_depot_then_back_to_the_tree() {
        for (rel, mag) in [(Linux5_18, 128usize), (Linux6_0, 127)] {
            assert_eq!(rel.rules().mag_size, mag);
            let mut r = Recorder::new(64);
            let d = dom_of(&r, 1, 2, rel);
            let limit = (1u64 << 40 >> 12) - 1;
            let n = 128 * (2 + MAX_GLOBAL_MAGS) + 5;
            let pfns: Vec<u64> = (0..n)
                .map(|_| d.alloc_iova_fast(r.as_cpu(0), 1, limit, true).unwrap())
                .collect();
            for &p in &pfns {
                d.free_iova_fast(r.as_cpu(0), p, 1).unwrap();
            }
            assert_eq!(d.stats().tree_frees, mag as u64, "{rel:?}");
            assert_eq!(d.cached_pfns(), n - mag, "{rel:?}");
            assert_eq!(d.ranges().len(), n - mag);
            // Double free of a cached pfn is refused.
            assert_eq!(
                d.free_iova_fast(r.as_cpu(0), pfns[n - 1], 1),
                Err(IommuError::IovaBadFree(pfns[n - 1]))
            );
        }
    }

    /// 400 singles cached on CPU 0 (two full magazines in the depot, 144 pfns in its own);
    /// CPU 1's exhausted request flushes: 5.10 only the per-CPU magazines, 5.11 the depot too.
    #[test]
    fn the_exhaustion_flush_empties_the_depot_from_5_11() {
        for (rel, freed, left) in [(Linux5_10, 144, 256), (Linux5_11, 400, 0)] {
            let mut r = Recorder::new(64);
            let d = dom_of(&r, 1, 2, rel);
            let pfns: Vec<u64> = (0..400)
                .map(|_| d.alloc_iova_fast(r.as_cpu(0), 1, 400, true).unwrap())
                .collect();
            for &p in &pfns {
                d.free_iova_fast(r.as_cpu(0), p, 1).unwrap();
            }
            assert_eq!(d.cached_pfns(), 400);
            assert!(
                d.alloc_iova_fast(r.as_cpu(1), 2, 400, true).is_ok(),
                "{rel:?}"
            );
            assert_eq!(d.stats().rcache_flushes, 1);
            assert_eq!(d.stats().tree_frees, freed, "{rel:?}");
            assert_eq!(d.cached_pfns(), left, "{rel:?}");
        }
    }

    #[test]
    fn exhausted_fast_path_flushes_the_caches_and_retries() {
        let (mut r, d) = dom();
        // 8 single pfns cached on CPU 1, nothing else free below pfn 8.
        let pfns: Vec<u64> = (0..7)
            .map(|_| d.alloc_iova_fast(r.as_cpu(1), 1, 7, true).unwrap())
            .collect();
        for &p in &pfns {
            d.free_iova_fast(r.as_cpu(1), p, 1).unwrap();
        }
        // CPU 0 wants 2 granules: its caches are empty, the tree is full of cached singles.
        let p = d.alloc_iova_fast(r.as_cpu(0), 2, 7, true).unwrap();
        assert_eq!(p % 2, 0);
        assert_eq!(d.stats().rcache_flushes, 1);
        assert!(d.alloc_iova_fast(r.as_cpu(0), 16, 7, false).is_err());
    }
}
