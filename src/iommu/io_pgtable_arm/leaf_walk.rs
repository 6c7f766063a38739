//! The io-pgtable walk's speed devices, behind one switch: a shortcut for the commonest call
//! (one page, mapped or unmapped from the top-level table, with a coherent table walker), and a
//! quick pass through the levels any other walk merely goes through.
//!
//! Kernel counterpart: none — `__arm_lpae_map()` and `__arm_lpae_unmap()` walk from the top on
//! every call, one level per recursion. The answer is theirs; only the way to it is shorter.
//!
//! What it does: the shortcut remembers where the last such call on this CPU found its leaf
//! table (the address bits above the last level's index, the table, the walk steps to it)
//! together with the simulated memory's write stamp
//! ([`PhysMem::write_stamp`](crate::mm::physmem::PhysMem::write_stamp)) at that moment. While the
//! stamp is unchanged, every descriptor on the way reads byte for byte as the walk read it, so
//! the remembered table is the one a walk would reach and the steps are the levels it would
//! pass. Otherwise the call walks from the top itself, under one borrow of the memory, through
//! tables that exist. It writes the leaf only when the general path would write exactly that (an
//! empty entry for a map, a page for an unmap) and gathers exactly the general path's charges (a
//! walk step per level, one `init_pte` or `clear_pte`); in any other case it changes nothing and
//! the general path runs from the start. The general path's walk, in turn, passes the levels
//! whose entry is a table and whose block is larger than the size asked for ([`descend`]) in one
//! loop under one borrow of the memory, charging a walk step for each, and takes the level it
//! stops at as the kernel does; on the iommu benches with a non-coherent walker (where the
//! shortcut declines every call) that pass saves about 7 % of the instructions of a call.
//!
//! Rule (docs/design.md): this module is the only place these devices live; the table calls
//! the shortcut once on map and once on unmap, and [`descend`] once per level reached. With
//! `DMASIM_PLAIN_WALK` set in the environment (or [`ArmLpaeIoPgtable::plain_walk`]) the shortcut
//! declines every call and [`descend`] passes no level, so every walk takes each level as the
//! kernel's recursion does; the test suite runs the figure net, the snapshots and the
//! exact-count tests that way too.
//!
//! Invariants: a call the shortcut takes changes the memory and the pending charges exactly as
//! the general path would; a call it declines changes nothing. [`descend`] reads only, and the
//! levels it passes are those the general path's loop would have passed, each charged one walk
//! step by the caller.
//!
//! [`descend`]: ArmLpaeIoPgtable::descend

use super::{ARM_LPAE_MAX_LEVELS, ArmLpaeIoPgtable, LookAside, PTE_TYPE_PAGE};
use crate::hw::{Hw, SwCost};
use crate::mm::physmem::PhysMem;
use crate::types::PhysAddr;

/// Whether new tables use the speed devices: yes, unless the environment sets
/// `DMASIM_PLAIN_WALK` (read once per process). The integration suite runs itself again that way
/// (`tests/plain_walk.rs`), so the figures, snapshots and exact counts are proved the same
/// without it.
pub(super) fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("DMASIM_PLAIN_WALK").is_none())
}

/// Where the last one-page call from the top found its leaf table.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LeafWalk {
    valid: bool,
    /// The memory's write stamp when the walk was read (or its own leaf last written).
    stamp: u64,
    /// The IOVA bits above the last level's index.
    block: u64,
    table: u64,
    /// The walk's steps to the leaf, the leaf level's own included, and their price.
    steps: u64,
    steps_cost: SwCost,
}

impl ArmLpaeIoPgtable {
    /// Turn the speed devices off for this table: every call takes the general path, level by
    /// level (for the tests that prove the two the same).
    pub fn plain_walk(&mut self) {
        self.shortcut = false;
    }

    /// `__arm_lpae_map()` of one empty page entry: `true` when done here.
    #[inline]
    pub(super) fn map_one_shortcut<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        paddr: u64,
        size: u64,
        pgcount: u64,
        attrs: u64,
    ) -> bool {
        let new = attrs | PTE_TYPE_PAGE | (paddr & self.addr_mask);
        let cost = self.costs.init_pte;
        let write = |pte| (pte == 0).then_some(new);
        self.leaf_shortcut(hw, iova, size, pgcount, cost, write, |old| old == 0)
    }

    /// `__arm_lpae_unmap()` of one page entry: `true` when cleared here (the caller then
    /// invalidates it, clear before invalidate as the kernel orders them).
    #[inline]
    pub(super) fn unmap_one_shortcut<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        size: u64,
        pgcount: u64,
    ) -> bool {
        let leaf = ARM_LPAE_MAX_LEVELS - 1;
        let cost = self.costs.clear_pte;
        let clear = |pte| Self::pte_is_leaf(pte, leaf).then_some(0);
        self.leaf_shortcut(hw, iova, size, pgcount, cost, clear, |old| {
            Self::pte_is_leaf(old, leaf)
        })
    }

    /// Find the leaf entry of one page (remembered, or walked through existing tables) and
    /// `update` it; `update` declines (`None`) what the general path must handle, and `took`
    /// says from the entry's old value whether it did not.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn leaf_shortcut<H: Hw + ?Sized>(
        &self,
        hw: &mut H,
        iova: u64,
        size: u64,
        pgcount: u64,
        cost: SwCost,
        update: impl FnOnce(u64) -> Option<u64>,
        took: impl FnOnce(u64) -> bool,
    ) -> bool {
        if !self.shortcut || pgcount != 1 || size != self.cfg.granule || self.walk_sync.is_some() {
            return false;
        }
        let leaf = ARM_LPAE_MAX_LEVELS - 1;
        let block = iova.wrapping_shr(self.lvl_shift(leaf - 1));
        let look = self.look(&*hw);
        let mut mem = self.mem.borrow_mut();
        let w = look.leaf_walk.get();
        let remembered = w.valid && w.block == block && w.stamp == mem.write_stamp();
        let (table, steps, steps_cost) = if remembered {
            (w.table, w.steps, w.steps_cost)
        } else {
            match self.walk_to_leaf_table(look, &mem, iova) {
                Some(found) => found,
                None => return false,
            }
        };
        let ptep = PhysAddr(table + (self.lvl_idx(iova, leaf) << 3));
        if !took(mem.update_u64_hinted(ptep, &look.walk_hint[leaf as usize], update)) {
            return false;
        }
        // A leaf written in its table moves no descriptor on the way to it: the walk stays
        // good under the new stamp.
        let stamp = mem.write_stamp();
        drop(mem);
        look.leaf_walk.set(if remembered {
            LeafWalk { stamp, ..w }
        } else {
            LeafWalk {
                valid: true,
                stamp,
                block,
                table,
                steps,
                steps_cost,
            }
        });
        hw.sw(steps_cost);
        hw.sw(cost);
        true
    }

    /// The walk from the top-level table to the leaf table of `iova`, through table descriptors
    /// only: the table, the steps (the leaf level's included) and their price; `None` at
    /// anything else. Out of line: the remembered table answers most calls.
    #[inline(never)]
    fn walk_to_leaf_table(
        &self,
        look: &LookAside,
        mem: &PhysMem,
        iova: u64,
    ) -> Option<(u64, u64, SwCost)> {
        let top = (self.start_level, self.pgd);
        let (lvl, table, passed) = self.pass_tables(look, mem, iova, self.cfg.granule, top);
        let steps = passed + 1;
        let steps_cost = SwCost(self.costs.walk_level.0.saturating_mul(steps));
        (lvl == ARM_LPAE_MAX_LEVELS - 1).then_some((table.0, steps, steps_cost))
    }

    /// The levels a map or unmap walk passes straight through, from `table` at `lvl`: the level
    /// reached, its table and the levels passed (each a step of `__arm_lpae_map` /
    /// `__arm_lpae_unmap`'s recursion, which the caller charges). The caller reads what it
    /// finds at the level reached again, so only the levels a walk merely goes through are
    /// shortened, under one borrow of the memory. With the shortcut off it passes none, and
    /// the caller's loop takes every level itself, as the kernel's recursion does.
    #[inline]
    pub(super) fn descend(
        &self,
        look: &LookAside,
        iova: u64,
        size: u64,
        lvl: u32,
        table: PhysAddr,
    ) -> (u32, PhysAddr, u64) {
        if !self.shortcut {
            return (lvl, table, 0);
        }
        self.pass_tables(look, &self.mem.borrow(), iova, size, (lvl, table))
    }

    /// From `table` at `lvl`, follow table descriptors toward `iova` while `size` is smaller
    /// than the level's block: the level reached, its table and the levels passed.
    #[inline(always)]
    fn pass_tables(
        &self,
        look: &LookAside,
        mem: &PhysMem,
        iova: u64,
        size: u64,
        (mut lvl, mut table): (u32, PhysAddr),
    ) -> (u32, PhysAddr, u64) {
        let mut passed = 0;
        while lvl < ARM_LPAE_MAX_LEVELS - 1 && size != self.block_size(lvl) {
            let ptep = PhysAddr(table.0 + (self.lvl_idx(iova, lvl) << 3));
            let pte = mem.read_u64_hinted(ptep, &look.walk_hint[lvl as usize]);
            if !Self::pte_is_table(pte, lvl) {
                break;
            }
            table = self.pte_to_paddr(pte);
            lvl += 1;
            passed += 1;
        }
        (lvl, table, passed)
    }
}
