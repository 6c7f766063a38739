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
//! once over the space above where it started, as 5.11+ does. `alloc_iova_fast` rounds sizes
//! below 32 granules up to a power of two and serves sizes of up to 2^5 granules
//! (`IOVA_RANGE_CACHE_MAX_SIZE` orders) from the per-CPU magazines first; `free_iova_fast` puts
//! them back there, so a hot map/unmap loop rarely touches the tree. On exhaustion the fast path
//! flushes every cached IOVA back to the tree and tries once more.
//!
//! Releases, mixed today: the range cache is 5.11–5.19's (`IOVA_MAG_SIZE` 128, a depot of at
//! most `MAX_GLOBAL_MAGS` 32 magazines, full magazines beyond that freed back to the tree); the
//! retry in `__alloc_and_insert_iova_range` is 6.2's (`retry_pfn = pfn_hi`, restarting from
//! `iova_find_limit`). Not modelled yet, so every release runs this one (issue #8 item 7):
//! 127-entry magazines from 6.0, the unbounded depot trimmed by delayed work from 6.5, no retry
//! in 5.10, and `retry_pfn = pfn_hi + 1` (wrapping to 0 at the anchor) from 5.11 to 6.1.
//!
//! Invariants: allocated ranges never overlap and lie in `[start_pfn, limit]`; a cached pfn is
//! still allocated in the tree (the cache only defers the free); the anchor is never allocated
//! or freed.

use super::IommuError;
use crate::hw::{Counter, Hw, SwCost, SwKey};
use std::collections::BTreeMap;

/// pfns per magazine.
pub const IOVA_MAG_SIZE: usize = 128;
/// Orders cached: sizes of 2^0 .. 2^(IOVA_RANGE_CACHE_MAX_SIZE - 1) granules.
pub const IOVA_RANGE_CACHE_MAX_SIZE: u32 = 6;
/// Full magazines a depot keeps.
pub const MAX_GLOBAL_MAGS: usize = 32;
/// The anchor node's pfn (`IOVA_ANCHOR`).
const IOVA_ANCHOR: u64 = u64::MAX;

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

/// `struct iova_rcache`: one per cached order.
#[derive(Clone, Debug, Default)]
struct IovaRcache {
    depot: Vec<Vec<u64>>,
    cpus: Vec<CpuRcache>,
}

/// Statistics of the fast path, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IovaStats {
    pub rcache_hits: u64,
    pub rcache_misses: u64,
    pub tree_allocs: u64,
    pub tree_frees: u64,
    pub tree_steps: u64,
    pub rcache_flushes: u64,
}

/// `struct iova_domain`.
#[derive(Clone, Debug)]
pub struct IovaDomain {
    granule: u64,
    start_pfn: u64,
    dma_32bit_pfn: u64,
    /// pfn_lo -> pfn_hi of every allocated range, plus the anchor.
    tree: BTreeMap<u64, u64>,
    /// Keys (pfn_lo) of the cached nodes.
    cached_node: u64,
    cached32_node: u64,
    max32_alloc_size: u64,
    rcaches: Vec<IovaRcache>,
    costs: Costs,
    pub stats: IovaStats,
}

/// `order_base_2()`.
fn order_base_2(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

impl IovaDomain {
    /// `init_iova_domain()` plus `iova_domain_init_rcaches()` for `ncpus` CPUs. `granule` is the
    /// IOMMU page size; `start_pfn` the lowest allocatable pfn (the kernel keeps pfn 0 out).
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
        Ok(IovaDomain {
            granule,
            start_pfn: start_pfn.max(1),
            dma_32bit_pfn,
            tree: BTreeMap::from([(IOVA_ANCHOR, IOVA_ANCHOR)]),
            cached_node: IOVA_ANCHOR,
            cached32_node: IOVA_ANCHOR,
            max32_alloc_size: dma_32bit_pfn,
            rcaches: (0..IOVA_RANGE_CACHE_MAX_SIZE)
                .map(|_| IovaRcache {
                    depot: Vec::new(),
                    cpus: vec![CpuRcache::default(); ncpus],
                })
                .collect(),
            costs: Costs {
                hit: hw.sw_cost(SwKey::IovaRcacheHit),
                miss: hw.sw_cost(SwKey::IovaRcacheMiss),
                insert: hw.sw_cost(SwKey::IovaRcacheInsert),
                depot: hw.sw_cost(SwKey::IovaDepotSwap),
                alloc: hw.sw_cost(SwKey::AllocIova),
                step: hw.sw_cost(SwKey::IovaRbtreeStep),
                free: hw.sw_cost(SwKey::FreeIova),
            },
            stats: IovaStats::default(),
        })
    }

    pub fn granule(&self) -> u64 {
        self.granule
    }
    pub fn shift(&self) -> u32 {
        self.granule.trailing_zeros()
    }
    pub fn start_pfn(&self) -> u64 {
        self.start_pfn
    }
    pub fn ncpus(&self) -> usize {
        self.rcaches[0].cpus.len()
    }

    /// Allocated ranges `(pfn_lo, pfn_hi)` in ascending order, cached ones included.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.tree
            .iter()
            .filter(|(k, _)| **k != IOVA_ANCHOR)
            .map(|(&k, &v)| (k, v))
    }

    /// pfns sitting in magazines or the depot (allocated in the tree, free to reuse).
    pub fn cached_pfns(&self) -> usize {
        self.rcaches
            .iter()
            .map(|r| {
                r.depot.iter().map(Vec::len).sum::<usize>()
                    + r.cpus
                        .iter()
                        .map(|c| c.loaded.len() + c.prev.len())
                        .sum::<usize>()
            })
            .sum()
    }

    /// `find_iova()`: the range containing `pfn`.
    pub fn find_iova(&self, pfn: u64) -> Option<(u64, u64)> {
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

    /// `iova_find_limit()`: the lowest node at or above `limit_pfn`.
    fn find_limit(&self, limit_pfn: u64) -> u64 {
        if limit_pfn > self.dma_32bit_pfn {
            return IOVA_ANCHOR;
        }
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

    /// `__alloc_and_insert_iova_range()`. `limit_pfn` is exclusive.
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
        let mut high_pfn = limit_pfn;
        let mut low_pfn = self.start_pfn;
        let mut curr = Some(self.get_cached_node(limit_pfn));
        let retry_pfn = curr.map_or(IOVA_ANCHOR, |k| self.tree[&k]);
        loop {
            let mut new_pfn;
            loop {
                hw.sw(self.costs.step);
                self.stats.tree_steps += 1;
                let c = curr.unwrap_or(IOVA_ANCHOR);
                high_pfn = high_pfn.min(c);
                new_pfn = high_pfn.wrapping_sub(size) & align_mask;
                curr = self.tree.range(..c).next_back().map(|(&k, _)| k);
                match curr {
                    Some(p) if new_pfn <= self.tree[&p] && new_pfn >= low_pfn => continue,
                    _ => break,
                }
            }
            if high_pfn < size || new_pfn < low_pfn {
                if low_pfn == self.start_pfn && retry_pfn < limit_pfn {
                    high_pfn = limit_pfn;
                    low_pfn = retry_pfn + 1;
                    curr = Some(self.find_limit(limit_pfn));
                    continue;
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

    /// `alloc_iova()`: `size` granules ending at or below `limit_pfn` (inclusive), aligned to the
    /// size rounded up to a power of two when `size_aligned`. Returns the first pfn.
    pub fn alloc_iova(
        &mut self,
        hw: &mut dyn Hw,
        size: u64,
        limit_pfn: u64,
        size_aligned: bool,
    ) -> Result<u64, IommuError> {
        if size == 0 {
            return Err(IommuError::Empty);
        }
        hw.enter("alloc_iova");
        hw.sw(self.costs.alloc);
        let limit = limit_pfn.min(IOVA_ANCHOR - 1) + 1;
        let r = self.alloc_and_insert(hw, size, limit, size_aligned);
        hw.leave();
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

    /// `free_iova()` / `__free_iova()`: release the range containing `pfn`.
    pub fn free_iova(&mut self, hw: &mut dyn Hw, pfn: u64) -> Result<(), IommuError> {
        let (lo, hi) = self.find_iova(pfn).ok_or(IommuError::IovaBadFree(pfn))?;
        hw.enter("free_iova");
        hw.sw(self.costs.free);
        self.delete_update(lo, hi);
        self.tree.remove(&lo);
        self.stats.tree_frees += 1;
        hw.leave();
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
        if self.cached32_node == lo || (hi < self.dma_32bit_pfn && lo >= self.cached32_node) {
            self.cached32_node = next();
        }
        if lo < self.dma_32bit_pfn {
            self.max32_alloc_size = self.dma_32bit_pfn;
        }
        if lo >= self.cached_node {
            self.cached_node = next();
        }
    }

    fn cpu(&self, cpu: usize) -> Result<(), IommuError> {
        if cpu >= self.ncpus() {
            return Err(IommuError::BadCpu(cpu));
        }
        Ok(())
    }

    /// `alloc_iova_fast()`: from `cpu`'s magazines if it can, else the tree; on exhaustion, flush
    /// every cache back to the tree and try once more (`flush_rcache`).
    pub fn alloc_iova_fast(
        &mut self,
        hw: &mut dyn Hw,
        cpu: usize,
        size: u64,
        limit_pfn: u64,
        flush_rcache: bool,
    ) -> Result<u64, IommuError> {
        self.cpu(cpu)?;
        if size == 0 {
            return Err(IommuError::Empty);
        }
        hw.enter("alloc_iova_fast");
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
                    self.flush_rcaches(hw);
                    r = self.alloc_iova(hw, size, limit_pfn, true);
                }
                r
            }
        };
        if r.is_ok() {
            hw.count(Counter::IovaAlloc, 1);
        }
        hw.leave();
        r
    }

    /// `free_iova_fast()`: into `cpu`'s magazine, or back to the tree.
    pub fn free_iova_fast(
        &mut self,
        hw: &mut dyn Hw,
        cpu: usize,
        pfn: u64,
        size: u64,
    ) -> Result<(), IommuError> {
        self.cpu(cpu)?;
        let Some((lo, _)) = self.find_iova(pfn).filter(|(lo, _)| *lo == pfn) else {
            return Err(IommuError::IovaBadFree(pfn));
        };
        if self.cached_pfn(lo) {
            return Err(IommuError::IovaBadFree(pfn));
        }
        hw.enter("free_iova_fast");
        let order = order_base_2(size);
        let r = if order < IOVA_RANGE_CACHE_MAX_SIZE {
            self.rcache_insert(hw, cpu, order as usize, pfn)
        } else {
            self.free_iova(hw, pfn)
        };
        if r.is_ok() {
            hw.count(Counter::IovaFree, 1);
        }
        hw.leave();
        r
    }

    /// Whether `pfn` already sits in a cache (a second free of it would be a double free).
    fn cached_pfn(&self, pfn: u64) -> bool {
        self.rcaches.iter().any(|r| {
            r.depot.iter().any(|m| m.contains(&pfn))
                || r.cpus
                    .iter()
                    .any(|c| c.loaded.contains(&pfn) || c.prev.contains(&pfn))
        })
    }

    /// `iova_rcache_get()` / `__iova_rcache_get()` / `iova_magazine_pop()`.
    fn rcache_get(
        &mut self,
        hw: &mut dyn Hw,
        cpu: usize,
        size: u64,
        limit_pfn: u64,
    ) -> Option<u64> {
        let order = order_base_2(size);
        if order >= IOVA_RANGE_CACHE_MAX_SIZE {
            return None;
        }
        // pfn + size - 1 <= limit_pfn.
        let limit = limit_pfn.saturating_add(1).checked_sub(size)?;
        let rc = &mut self.rcaches[order as usize];
        let c = &mut rc.cpus[cpu];
        let has = if !c.loaded.is_empty() {
            true
        } else if !c.prev.is_empty() {
            std::mem::swap(&mut c.loaded, &mut c.prev);
            true
        } else if let Some(full) = rc.depot.pop() {
            hw.sw(self.costs.depot);
            c.loaded = full;
            true
        } else {
            false
        };
        let pfn = if has {
            // Take the last pfn under the limit, swapping the top into its place.
            c.loaded
                .iter()
                .rposition(|&p| p <= limit)
                .map(|i| c.loaded.swap_remove(i))
        } else {
            None
        };
        if pfn.is_some() {
            hw.count(Counter::IovaRcacheHit, 1);
            hw.sw(self.costs.hit);
            self.stats.rcache_hits += 1;
        } else {
            hw.sw(self.costs.miss);
            self.stats.rcache_misses += 1;
        }
        pfn
    }

    /// `__iova_rcache_insert()`.
    fn rcache_insert(
        &mut self,
        hw: &mut dyn Hw,
        cpu: usize,
        order: usize,
        pfn: u64,
    ) -> Result<(), IommuError> {
        hw.sw(self.costs.insert);
        let rc = &mut self.rcaches[order];
        let c = &mut rc.cpus[cpu];
        let mut to_free = None;
        if c.loaded.len() >= IOVA_MAG_SIZE {
            if c.prev.len() < IOVA_MAG_SIZE {
                std::mem::swap(&mut c.loaded, &mut c.prev);
            } else {
                hw.sw(self.costs.depot);
                let full = std::mem::replace(&mut c.loaded, Vec::with_capacity(IOVA_MAG_SIZE));
                if rc.depot.len() < MAX_GLOBAL_MAGS {
                    rc.depot.push(full);
                } else {
                    to_free = Some(full);
                }
            }
        }
        rc.cpus[cpu].loaded.push(pfn);
        if let Some(mag) = to_free {
            for p in mag {
                self.free_iova(hw, p)?;
            }
        }
        Ok(())
    }

    /// `free_cpu_cached_iovas()` for every CPU and `free_global_cached_iovas()`.
    pub fn flush_rcaches(&mut self, hw: &mut dyn Hw) {
        self.stats.rcache_flushes += 1;
        let mut pfns = Vec::new();
        for rc in &mut self.rcaches {
            for c in &mut rc.cpus {
                pfns.append(&mut c.loaded);
                pfns.append(&mut c.prev);
            }
            for mut m in rc.depot.drain(..) {
                pfns.append(&mut m);
            }
        }
        for p in pfns {
            let r = self.free_iova(hw, p);
            debug_assert!(r.is_ok(), "cached pfn not in the tree: {r:?}");
        }
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

    #[test]
    fn allocations_go_top_down_and_are_size_aligned() {
        let (mut r, mut d) = dom();
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
        let (mut r, mut d) = dom();
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

    #[test]
    fn retry_finds_space_above_the_cached_node() {
        let mut r = Recorder::new(64);
        let mut d = IovaDomain::new(&r, 4096, 40, 1).unwrap();
        assert_eq!(d.alloc_iova(&mut r, 2, 63, true), Ok(62));
        // Aligned to 8 below 62: 48..=55, leaving 56..=61 free above the cached node.
        assert_eq!(d.alloc_iova(&mut r, 8, 63, true), Ok(48));
        assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(44));
        assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(40));
        // Nothing left below the cached node: the retry walks down from the limit.
        assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(56));
        assert!(d.alloc_iova(&mut r, 4, 63, true).is_err());
        // The failure recorded the size: a 32-bit request that large now fails at once.
        let steps = d.stats.tree_steps;
        assert!(d.alloc_iova(&mut r, 4, 63, true).is_err());
        assert_eq!(d.stats.tree_steps, steps);
        d.free_iova(&mut r, 44).unwrap();
        assert_eq!(d.alloc_iova(&mut r, 4, 63, true), Ok(44));
    }

    #[test]
    fn hot_loop_is_served_by_the_magazines() {
        let (mut r, mut d) = dom();
        let limit = (1u64 << 36 >> 12) - 1;
        let first = d.alloc_iova_fast(&mut r, 0, 8, limit, true).unwrap();
        d.free_iova_fast(&mut r, 0, first, 8).unwrap();
        for _ in 0..1000 {
            let p = d.alloc_iova_fast(&mut r, 0, 8, limit, true).unwrap();
            assert_eq!(p, first);
            d.free_iova_fast(&mut r, 0, p, 8).unwrap();
        }
        assert_eq!(d.stats.tree_allocs, 1);
        assert_eq!(d.stats.rcache_hits, 1000);
        assert_eq!(d.stats.tree_frees, 0);
        // Another CPU has its own magazines.
        let q = d.alloc_iova_fast(&mut r, 1, 8, limit, true).unwrap();
        assert_ne!(q, first);
        assert_eq!(
            d.alloc_iova_fast(&mut r, 2, 8, limit, true),
            Err(IommuError::BadCpu(2))
        );
    }

    #[test]
    fn full_magazines_go_to_the_depot_then_back_to_the_tree() {
        let (mut r, mut d) = dom();
        let limit = (1u64 << 40 >> 12) - 1;
        let n = IOVA_MAG_SIZE * (2 + MAX_GLOBAL_MAGS) + 5;
        let pfns: Vec<u64> = (0..n)
            .map(|_| d.alloc_iova_fast(&mut r, 0, 1, limit, true).unwrap())
            .collect();
        for &p in &pfns {
            d.free_iova_fast(&mut r, 0, p, 1).unwrap();
        }
        // loaded, prev and 32 depot magazines hold (2 + 32) * 128; one magazine overflowed back.
        assert_eq!(d.cached_pfns(), n - IOVA_MAG_SIZE);
        assert_eq!(d.stats.tree_frees, IOVA_MAG_SIZE as u64);
        assert_eq!(d.ranges().count(), n - IOVA_MAG_SIZE);
        // Double free of a cached pfn is refused.
        assert_eq!(
            d.free_iova_fast(&mut r, 0, pfns[n - 1], 1),
            Err(IommuError::IovaBadFree(pfns[n - 1]))
        );
    }

    #[test]
    fn exhausted_fast_path_flushes_the_caches_and_retries() {
        let (mut r, mut d) = dom();
        // 8 single pfns cached on CPU 1, nothing else free below pfn 8.
        let pfns: Vec<u64> = (0..7)
            .map(|_| d.alloc_iova_fast(&mut r, 1, 1, 7, true).unwrap())
            .collect();
        for &p in &pfns {
            d.free_iova_fast(&mut r, 1, p, 1).unwrap();
        }
        // CPU 0 wants 2 granules: its caches are empty, the tree is full of cached singles.
        let p = d.alloc_iova_fast(&mut r, 0, 2, 7, true).unwrap();
        assert_eq!(p % 2, 0);
        assert_eq!(d.stats.rcache_flushes, 1);
        assert!(d.alloc_iova_fast(&mut r, 0, 16, 7, false).is_err());
    }
}
