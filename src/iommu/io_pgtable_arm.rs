//! Arm LPAE (VMSAv8-64) stage-1 page tables for an IOMMU.
//!
//! Kernel counterpart: drivers/iommu/io-pgtable-arm.c — `arm_64_lpae_alloc_pgtable_s1`,
//! `arm_lpae_map_pages` / `__arm_lpae_map` / `arm_lpae_init_pte`, `arm_lpae_unmap_pages` /
//! `__arm_lpae_unmap` / `arm_lpae_split_blk_unmap`, `__arm_lpae_free_pgtable`,
//! `arm_lpae_iova_to_phys`, and the non-coherent-walk helpers `__arm_lpae_alloc_pages` and
//! `__arm_lpae_sync_pte`.
//!
//! What it models: 4K, 16K and 64K granules; input address sizes of 32 to 48 bits with the
//! kernel's level count (`ceil((ias - pg_shift) / bits_per_level)`), start level and top-level
//! table size (`8 << pgd_bits`); output addresses up to 48 bits. Descriptors are bit-exact u64s
//! in tables allocated from [`PhysMem`]: valid (bit 0), table/page vs block (bit 1), AttrIndx
//! (4:2), AP\[2:1\] (7:6), SH (9:8), AF (10), nG (11), the output address (47:pg_shift), XN (54:53)
//! and, for a non-coherent walker, the software bit 55 that marks a table entry already cleaned
//! (`ARM_LPAE_PTE_SW_SYNC`). Blocks are 1G/2M (4K granule), 32M (16K) and 512M (64K).
//!
//! Release modelled: 5.15 to 6.12 in full (`pgcount == 1` gives 5.14's `__arm_lpae_unmap`),
//! and 6.13 to 7.1 for what this model exercises. `__arm_lpae_unmap` clears entries one at a
//! time; a table entry whose whole range is being removed is freed with
//! `tlb_flush_walk(iova, size, granule)`, a leaf gets `tlb_add_page(iova, size)` (unless the
//! gather is queued, i.e. lazy). One call handles at most the run of entries left in one table
//! and returns the short count; the caller loops. A partial unmap of a block splits it up to 6.12
//! and is refused from 6.13 ([`BlockUnmap`]). `arm_lpae_init_pte` (every release) refuses a leaf
//! already present (`-EEXIST`, WARN) and replaces a table, whatever it still maps, by unmapping
//! it with no gather (one walk flush, the subtree freed) before writing the block; within one
//! call the entries are taken in order, so a refused call may already have freed the tables of
//! the entries before the leaf. Up to 6.11 each entry of an unmapped run is cleaned as it is
//! cleared; from 6.12 ([`PteClear`]) the run's tables go first, then the run is cleared and
//! cleaned with one sync and every entry of it, tables included, gets a `tlb_add_page`. The map
//! side has cleaned a run of new leaves with one sync since 5.15's `map_pages`
//! (`__arm_lpae_init_pte` of `num_entries`), in every release read to 7.1.
//! `arm_lpae_map()` / `arm_lpae_map_pages()` end every call that reaches the walk with `wmb()`
//! (the same in every release read, 5.14 to 7.1); one that returns early (no R/W access, a bad
//! size) issues none.
//!
//! Every `WARN_ON` of the kernel's code paths modelled here is counted ([`Counter::Warn`]):
//! a leaf met on the way to map, a hole met while unmapping, an unsupported page size or count,
//! an address outside the table. Misaligned IOVA or PA are errors without a WARN (the iommu
//! core refuses them first, with `pr_err`).
//!
//! Many CPUs share one table with no lock, as the kernel's domain does: every CPU maps and unmaps
//! through `&self`, and the walk's look-aside state (the hints, the shortcut's remembered walk, a
//! scratch buffer) is each CPU's own, a [`PerCpu`] found by the CPU the calls run on. The kernel
//! installs a new table with `cmpxchg64_relaxed()` against the entry it read (empty, or the
//! block being split), and a CPU that loses that race frees the table it allocated and walks
//! into the winner's. So does this one: between reading the entry and installing the table, the
//! table's allocation cleans its lines for a non-coherent walker, and the write-backs of that
//! clean queue at the node's DRAM channel, which the machine's CPUs share, so that another CPU
//! may take its turn and install a table in the same entry meanwhile. The compare and the write
//! are one step of the engine, with no turn between them, as the `cmpxchg64` is one instruction.
//!
//! Invariants: every table reachable from the top-level table is a live [`PhysMem`] allocation of
//! the granule size (the top level: `8 << pgd_bits` rounded up to a page), and every live
//! allocation made by this table is reachable; unmapping everything leaves only the top level.
//! The walk reads and writes the descriptors in that memory on every call (the per-level hints
//! only say where a table's page was last found, checked against its frame each time). The
//! speed devices live in their own module ([`leaf_walk`]), behind one switch: a shortcut, called
//! once on map and once on unmap, that takes a one-page call from the top with a coherent
//! walker to the same result by a shorter way, and `descend`, which passes the levels a walk
//! merely goes through in one loop. With the switch off every walk takes each level in turn, as
//! the kernel's recursion does.

use super::{AsDynDeviceHw, FlushOps, IommuError, IommuIotlbGather, Prot};
use crate::arch::{ArchDma, ArchOps};
use crate::hw::{Counter, Hw, SmpHw, SwCost, SwKey};
use crate::mm::physmem::{PhysMem, SharedPhysMem};
use crate::smp::PerCpu;
use crate::types::{DmaDirection, IovaAddr, PhysAddr};
use std::cell::Cell;

mod leaf_walk;
use leaf_walk::LeafWalk;

pub const ARM_LPAE_MAX_LEVELS: u32 = 4;

pub const PTE_VALID: u64 = 1 << 0;
/// Bit 1: table (levels 0-2) or page (level 3) when set; block when clear.
pub const PTE_TYPE_TABLE_OR_PAGE: u64 = 1 << 1;
pub const PTE_TYPE_MASK: u64 = 3;
pub const PTE_TYPE_BLOCK: u64 = 1;
pub const PTE_TYPE_TABLE: u64 = 3;
pub const PTE_TYPE_PAGE: u64 = 3;
pub const PTE_ATTRINDX_SHIFT: u32 = 2;
pub const PTE_NS: u64 = 1 << 5;
pub const PTE_AP_UNPRIV: u64 = 1 << 6;
pub const PTE_AP_RDONLY: u64 = 2 << 6;
pub const PTE_SH_OS: u64 = 2 << 8;
pub const PTE_SH_IS: u64 = 3 << 8;
pub const PTE_AF: u64 = 1 << 10;
pub const PTE_NG: u64 = 1 << 11;
pub const PTE_XN: u64 = 3 << 53;
/// Software bit: a table entry that has already been cleaned to PoC for a non-coherent walker.
pub const PTE_SW_SYNC: u64 = 1 << 55;
/// `ARM_LPAE_PTE_ATTR_LO_MASK | ARM_LPAE_PTE_ATTR_HI_MASK`: what `iopte_prot()` keeps.
const PTE_ATTR_MASK: u64 = (0x3ff << 2) | (0x1fff << 51);

/// MAIR indices the SMMU driver programs (`ARM_LPAE_MAIR_ATTR_IDX_*`).
pub const MAIR_ATTR_IDX_NC: u64 = 0;
pub const MAIR_ATTR_IDX_CACHE: u64 = 1;
pub const MAIR_ATTR_IDX_DEV: u64 = 2;

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    map_pages: SwCost,
    unmap_pages: SwCost,
    walk_level: SwCost,
    init_pte: SwCost,
    clear_pte: SwCost,
    alloc_table: SwCost,
    free_table: SwCost,
    iova_to_phys: SwCost,
}

/// What `__arm_lpae_unmap()` does when asked to unmap part of a block (a leaf larger than the
/// size being unmapped) — the `block_unmap` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockUnmap {
    /// ≤ 6.12: `arm_lpae_split_blk_unmap()` replaces the block by a table of the next level
    /// that maps the rest.
    Split,
    /// 6.13 (commit 33729a5fc0ca, "Remove split on unmap behavior"): `WARN_ONCE` and 0 bytes;
    /// the block stays mapped.
    Refuse,
}

impl crate::types::Choice for BlockUnmap {
    const ALL: &'static [Self] = &[BlockUnmap::Split, BlockUnmap::Refuse];
    fn name(self) -> &'static str {
        match self {
            BlockUnmap::Split => "split",
            BlockUnmap::Refuse => "refuse",
        }
    }
}

/// How `__arm_lpae_unmap()` clears a run of entries at the level being unmapped — the
/// `pte_clear` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PteClear {
    /// ≤ 6.11: entry by entry, each cleaned to PoC as it is cleared (non-coherent walker), a
    /// leaf's `tlb_add_page` after it, a table walk-flushed and freed.
    PerPte,
    /// 6.12 (commit 85b715a33458, "Optimise non-coherent unmap"): tables first, then the whole
    /// run cleared and cleaned with one sync, then a `tlb_add_page` for every entry of the run,
    /// tables included.
    PerRun,
}

impl crate::types::Choice for PteClear {
    const ALL: &'static [Self] = &[PteClear::PerPte, PteClear::PerRun];
    fn name(self) -> &'static str {
        match self {
            PteClear::PerPte => "per-pte",
            PteClear::PerRun => "per-run",
        }
    }
}

/// `struct io_pgtable_cfg`, the parts a stage-1 LPAE table uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoPgtableCfg {
    /// Translation granule in bytes: 4K, 16K or 64K.
    pub granule: u64,
    /// Input (IOVA) address bits.
    pub ias: u32,
    /// Output (physical) address bits.
    pub oas: u32,
    /// Memory node the tables are allocated on.
    pub node: u32,
    /// `IO_PGTABLE_QUIRK_ARM_NS`: non-secure output.
    pub quirk_ns: bool,
    /// The release's rule for a partial unmap of a block.
    pub block_unmap: BlockUnmap,
    /// The release's way of clearing a run of entries on unmap.
    pub pte_clear: PteClear,
}

impl IoPgtableCfg {
    pub fn new(granule: u64, ias: u32) -> IoPgtableCfg {
        IoPgtableCfg {
            granule,
            ias,
            oas: 48,
            node: 0,
            quirk_ns: false,
            block_unmap: BlockUnmap::Split,
            pte_clear: PteClear::PerPte,
        }
    }
}

/// Live tables and valid leaves per level of a table (see [`ArmLpaeIoPgtable::shape`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PgtableShape {
    pub tables: [u64; ARM_LPAE_MAX_LEVELS as usize],
    pub leaves: [u64; ARM_LPAE_MAX_LEVELS as usize],
}

/// What one CPU's walks remember of the tables: none of it is the kernel's, and all of it is
/// checked against memory before it is trusted ([`leaf_walk`]). Per CPU as a per-CPU variable
/// would be, so CPUs walking the one table at once do not overwrite each other's; only Cells,
/// so nothing here is ever borrowed across a call that may let another CPU run.
#[derive(Default)]
struct LookAside {
    /// Per level, where in simulated memory's page store the table read at that level was last
    /// found ([`PhysMem::read_u64_hinted`]).
    walk_hint: [Cell<u32>; ARM_LPAE_MAX_LEVELS as usize],
    /// Where the last one-page map or unmap from the top found its leaf table (see the module
    /// header).
    leaf_walk: Cell<LeafWalk>,
    /// The entries of a run being mapped or unmapped, kept between calls to save an allocation.
    pte_scratch: Cell<Vec<u64>>,
}

impl std::fmt::Debug for LookAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LookAside").finish_non_exhaustive()
    }
}

/// `struct arm_lpae_io_pgtable`.
#[derive(Debug)]
pub struct ArmLpaeIoPgtable {
    cfg: IoPgtableCfg,
    bits_per_level: u32,
    /// Per level: `ARM_LPAE_LVL_SHIFT` and the index mask (`ARM_LPAE_LVL_IDX`), computed once so a
    /// walk step is a shift and a mask.
    lvl_shift: [u32; ARM_LPAE_MAX_LEVELS as usize],
    lvl_mask: [u64; ARM_LPAE_MAX_LEVELS as usize],
    start_level: u32,
    pgd_bits: u32,
    pgsize_bitmap: u64,
    pgd: PhysAddr,
    mem: SharedPhysMem,
    /// `None`: the SMMU's table walker snoops CPU caches (`cfg->coherent_walk`). Otherwise PTE
    /// writes are cleaned to PoC through this architecture's cache maintenance.
    walk_sync: Option<ArchOps>,
    costs: Costs,
    /// The partial-block `WARN_ONCE` has fired (once per boot, whichever CPU hit it; a table is
    /// the model's boot).
    warned_partial_block: Cell<bool>,
    /// Each CPU's look-aside state, found by the CPU the walk runs on.
    look: PerCpu<LookAside>,
    /// Whether the walk's speed devices are on ([`leaf_walk`]): the one-page shortcut and
    /// `descend`.
    shortcut: bool,
    /// `arm_lpae_prot_to_pte()` of every combination of the six `IOMMU_*` bits, for this
    /// configuration: a map looks its attributes up rather than building them.
    prot_pte: [u64; PROT_COMBINATIONS],
    /// The first IOVA and the first output address past the table's reach (`1 << ias`,
    /// `1 << oas`).
    iova_end: u64,
    pa_end: u64,
    /// The output-address bits of a descriptor (47:12 for a 4 KB granule), resolved once: every
    /// leaf a map writes is masked with it.
    addr_mask: u64,
}

/// Combinations of the `IOMMU_*` bits [`ArmLpaeIoPgtable::prot_to_pte`] reads (bits 0 to 5).
const PROT_COMBINATIONS: usize = 64;

impl ArmLpaeIoPgtable {
    /// `arm_64_lpae_alloc_pgtable_s1()`: check the configuration, size the levels and allocate the
    /// top-level table from `mem` (shared with the rest of the machine: the tables are ordinary
    /// pages of it). `walk_sync` is `None` for a coherent table walker.
    pub fn new(
        hw: &mut dyn Hw,
        cfg: IoPgtableCfg,
        mem: SharedPhysMem,
        walk_sync: Option<ArchOps>,
    ) -> Result<ArmLpaeIoPgtable, IommuError> {
        let pgsize_bitmap = match cfg.granule {
            0x1000 => 0x1000 | (2 << 20) | (1 << 30),
            0x4000 => 0x4000 | (32 << 20),
            0x10000 => 0x10000 | (512 << 20),
            g => return Err(IommuError::BadGranule(g)),
        };
        if !(32..=48).contains(&cfg.ias) {
            return Err(IommuError::BadIas(cfg.ias));
        }
        if !(32..=48).contains(&cfg.oas) {
            return Err(IommuError::BadOas(cfg.oas));
        }
        let pg_shift = cfg.granule.trailing_zeros();
        let bits_per_level = pg_shift - 3;
        let va_bits = cfg.ias - pg_shift;
        let levels = va_bits.div_ceil(bits_per_level);
        let start_level = ARM_LPAE_MAX_LEVELS - levels;
        let pgd_bits = va_bits - bits_per_level * (levels - 1);
        // Leaf sizes the input space cannot hold are of no use (`arm_lpae_restrict_pgsizes`
        // drops sizes above the address space in the same spirit).
        let pgsize_bitmap = pgsize_bitmap & ((1u64 << cfg.ias) - 1);
        let costs = Costs {
            map_pages: hw.sw_cost(SwKey::ArmLpaeMapPages),
            unmap_pages: hw.sw_cost(SwKey::ArmLpaeUnmapPages),
            walk_level: hw.sw_cost(SwKey::ArmLpaeWalkLevel),
            init_pte: hw.sw_cost(SwKey::ArmLpaeInitPte),
            clear_pte: hw.sw_cost(SwKey::ArmLpaeClearPte),
            alloc_table: hw.sw_cost(SwKey::ArmLpaeAllocTable),
            free_table: hw.sw_cost(SwKey::ArmLpaeFreeTable),
            iova_to_phys: hw.sw_cost(SwKey::ArmLpaeIovaToPhys),
        };
        let lvl_shift: [u32; ARM_LPAE_MAX_LEVELS as usize] = std::array::from_fn(|l| {
            pg_shift + (ARM_LPAE_MAX_LEVELS - 1 - l as u32) * bits_per_level
        });
        let lvl_mask = std::array::from_fn(|l| {
            let bits = if l as u32 == start_level {
                pgd_bits
            } else {
                bits_per_level
            };
            (1u64 << bits) - 1
        });
        let pgd_size = 8u64 << pgd_bits;
        let pgd = mem.borrow_mut().alloc(cfg.node, pgd_size)?;
        let (ias, oas, cfg_granule) = (cfg.ias, cfg.oas, cfg.granule);
        let t = ArmLpaeIoPgtable {
            cfg,
            bits_per_level,
            lvl_shift,
            lvl_mask,
            start_level,
            pgd_bits,
            pgsize_bitmap,
            pgd,
            mem,
            walk_sync,
            costs,
            warned_partial_block: Cell::new(false),
            look: PerCpu::new(1, |_| LookAside::default()),
            shortcut: leaf_walk::enabled(),
            prot_pte: [0; PROT_COMBINATIONS],
            iova_end: 1u64 << ias,
            pa_end: 1u64 << oas,
            addr_mask: ((1u64 << 48) - 1) & !(cfg_granule - 1),
        };
        let mut t = t;
        t.prot_pte = std::array::from_fn(|bits| t.prot_to_pte(Prot(bits as u32)));
        t.sync_new_table(hw, pgd, pgd_size);
        Ok(t)
    }

    /// Look-aside state for `ncpus` possible CPUs (one until set), chosen at setup, before
    /// any CPU walks the table.
    pub fn with_cpus(mut self, ncpus: usize) -> ArmLpaeIoPgtable {
        self.look = PerCpu::new(ncpus, |_| LookAside::default());
        self
    }

    /// The look-aside state of the CPU the calls run on (`this_cpu_ptr`). A CPU the table was
    /// not sized for shares the first CPU's: it is all Cells checked before use, so sharing
    /// costs host time, never a figure.
    #[inline]
    fn look<H: Hw + ?Sized>(&self, hw: &H) -> &LookAside {
        hw.this_cpu_ptr(&self.look)
            .unwrap_or_else(|| self.first_look())
    }

    /// The first CPU's look-aside state: the one a walk outside any CPU's calls (a report's)
    /// uses.
    fn first_look(&self) -> &LookAside {
        self.look
            .get(0)
            .expect("a table has look-aside state for at least one CPU")
    }

    pub fn cfg(&self) -> &IoPgtableCfg {
        &self.cfg
    }
    pub fn granule(&self) -> u64 {
        self.cfg.granule
    }
    pub fn pgsize_bitmap(&self) -> u64 {
        self.pgsize_bitmap
    }
    /// `1 << __ffs(pgsize_bitmap)`: the granule, which every bitmap `new` builds holds as its
    /// lowest size.
    pub fn min_pagesz(&self) -> u64 {
        self.cfg.granule
    }
    pub fn start_level(&self) -> u32 {
        self.start_level
    }
    pub fn levels(&self) -> u32 {
        ARM_LPAE_MAX_LEVELS - self.start_level
    }
    /// Bytes of the top-level table (`ARM_LPAE_PGD_SIZE`).
    pub fn pgd_size(&self) -> u64 {
        8 << self.pgd_bits
    }
    /// Physical address of the top-level table (what TTBR0 is programmed with).
    pub fn ttbr(&self) -> PhysAddr {
        self.pgd
    }
    /// The memory the tables live in (borrowed for as long as the guard lives).
    pub fn mem(&self) -> std::cell::Ref<'_, PhysMem> {
        self.mem.borrow()
    }
    pub fn shared_mem(&self) -> &SharedPhysMem {
        &self.mem
    }
    /// Whether several CPUs may walk the table at once: a non-coherent walker's PTE cleaning
    /// goes through the arch's cache maintenance, which may not be shareable.
    pub fn shareable(&self) -> bool {
        self.walk_sync.as_ref().is_none_or(ArchOps::shareable)
    }
    pub fn coherent_walk(&self) -> bool {
        self.walk_sync.is_none()
    }

    /// `ARM_LPAE_BLOCK_SIZE(lvl)`: bytes one entry at `lvl` covers.
    #[inline]
    pub fn block_size(&self, lvl: u32) -> u64 {
        1u64.wrapping_shl(self.lvl_shift(lvl))
    }

    /// `ARM_LPAE_LVL_SHIFT(lvl)`: below 64 at every level by construction (at most 16 + 3 × 13,
    /// level 0 of a 64 KB granule; `tests::level_shifts_are_below_64`), so the shifts by it are
    /// written wrapping, which for such amounts is the plain shift without a check of the amount
    /// on every walk step.
    #[inline]
    fn lvl_shift(&self, lvl: u32) -> u32 {
        self.lvl_shift[lvl as usize]
    }

    #[inline]
    fn lvl_entries(&self, lvl: u32) -> u64 {
        self.lvl_mask[lvl as usize] + 1
    }

    #[inline]
    fn lvl_idx(&self, iova: u64, lvl: u32) -> u64 {
        iova.wrapping_shr(self.lvl_shift(lvl)) & self.lvl_mask[lvl as usize]
    }

    #[inline]
    fn table_size(&self, lvl: u32) -> u64 {
        if lvl == self.start_level {
            self.pgd_size()
        } else {
            self.cfg.granule
        }
    }

    #[inline]
    fn addr_mask(&self) -> u64 {
        self.addr_mask
    }

    /// `iopte_to_paddr()`.
    #[inline]
    pub fn pte_to_paddr(&self, pte: u64) -> PhysAddr {
        PhysAddr(pte & self.addr_mask())
    }

    /// `iopte_leaf()`: a page at the last level, a block above it.
    #[inline]
    pub fn pte_is_leaf(pte: u64, lvl: u32) -> bool {
        if lvl == ARM_LPAE_MAX_LEVELS - 1 {
            pte & PTE_TYPE_MASK == PTE_TYPE_PAGE
        } else {
            pte & PTE_TYPE_MASK == PTE_TYPE_BLOCK
        }
    }

    #[inline]
    fn pte_is_table(pte: u64, lvl: u32) -> bool {
        lvl < ARM_LPAE_MAX_LEVELS - 1 && pte & PTE_TYPE_MASK == PTE_TYPE_TABLE
    }

    /// `arm_lpae_prot_to_pte()` for stage 1: the attribute bits of a leaf.
    #[inline]
    pub fn prot_to_pte(&self, prot: Prot) -> u64 {
        let mut pte = PTE_NG;
        if !prot.contains(Prot::WRITE) && prot.contains(Prot::READ) {
            pte |= PTE_AP_RDONLY;
        }
        if !prot.contains(Prot::PRIV) {
            pte |= PTE_AP_UNPRIV;
        }
        if prot.contains(Prot::MMIO) {
            pte |= MAIR_ATTR_IDX_DEV << PTE_ATTRINDX_SHIFT;
        } else if prot.contains(Prot::CACHE) {
            pte |= MAIR_ATTR_IDX_CACHE << PTE_ATTRINDX_SHIFT;
        } else {
            pte |= MAIR_ATTR_IDX_NC << PTE_ATTRINDX_SHIFT;
        }
        pte |= if prot.contains(Prot::CACHE) {
            PTE_SH_IS
        } else {
            PTE_SH_OS
        };
        if prot.contains(Prot::NOEXEC) {
            pte |= PTE_XN;
        }
        if self.cfg.quirk_ns {
            pte |= PTE_NS;
        }
        pte | PTE_AF
    }

    #[inline]
    fn read_pte(&self, ptep: PhysAddr) -> u64 {
        self.mem.borrow().read_u64(ptep)
    }

    /// The descriptor at `ptep`, in the table the walk is at on `lvl`.
    #[inline]
    fn read_lvl_pte(&self, look: &LookAside, ptep: PhysAddr, lvl: u32) -> u64 {
        self.mem
            .borrow()
            .read_u64_hinted(ptep, &look.walk_hint[lvl as usize])
    }

    #[inline]
    fn read_ptes(&self, ptep: PhysAddr, n: u64, out: &mut Vec<u64>) {
        out.clear();
        out.resize(n as usize, 0);
        self.mem.borrow().read_u64s(ptep, out);
    }

    /// Store `n` descriptors from `ptep` in the table the walk is at on `lvl`, the `i`th being
    /// `pte(i)`.
    // Always inlined: as a call, it cost a one-page unmap more than the store itself.
    #[inline(always)]
    fn write_ptes(
        &self,
        look: &LookAside,
        ptep: PhysAddr,
        lvl: u32,
        n: u64,
        mut pte: impl FnMut(u64) -> u64,
    ) {
        let mut mem = self.mem.borrow_mut();
        if n == 1 {
            mem.write_u64_hinted(ptep, pte(0), &look.walk_hint[lvl as usize]);
        } else {
            mem.write_u64s_with(ptep, n, pte);
        }
    }

    /// `__arm_lpae_sync_pte()`: clean `n` PTEs to PoC for a non-coherent walker.
    #[inline]
    fn sync_ptes<H: AsDynDeviceHw + ?Sized>(&self, hw: &mut H, ptep: PhysAddr, n: u64) {
        if self.walk_sync.is_some() {
            self.sync_ptes_dyn(hw.as_dyn(), ptep, n);
        }
    }

    fn sync_ptes_dyn(&self, hw: &mut dyn Hw, ptep: PhysAddr, n: u64) {
        if let Some(arch) = &self.walk_sync {
            let back = hw.enter(crate::frame_id!("__arm_lpae_sync_pte"));
            arch.sync_for_device(hw, ptep, n * 8, DmaDirection::ToDevice, true);
            hw.leave(back);
        }
    }

    /// The `dma_map_single(TO_DEVICE)` of a freshly zeroed table for a non-coherent walker.
    fn sync_new_table(&self, hw: &mut dyn Hw, table: PhysAddr, size: u64) {
        if let Some(arch) = &self.walk_sync {
            arch.sync_for_device(hw, table, size, DmaDirection::ToDevice, true);
        }
    }

    /// `__arm_lpae_alloc_pages()`.
    fn alloc_table(&self, hw: &mut dyn Hw) -> Result<PhysAddr, IommuError> {
        let back = hw.enter(crate::frame_id!("__arm_lpae_alloc_pages"));
        hw.sw(self.costs.alloc_table);
        let r = self.mem.borrow_mut().alloc(self.cfg.node, self.cfg.granule);
        if let Ok(t) = r {
            self.sync_new_table(hw, t, self.cfg.granule);
        }
        hw.leave(back);
        Ok(r?)
    }

    /// `__arm_lpae_free_pages()`: the `dma_unmap_single(TO_DEVICE)` does no maintenance on arm64
    /// but is the kernel's path, so it goes through the arch layer.
    fn free_table_pages(&self, hw: &mut dyn Hw, table: PhysAddr, size: u64) {
        hw.sw(self.costs.free_table);
        if let Some(arch) = &self.walk_sync {
            arch.sync_for_cpu(hw, table, size, DmaDirection::ToDevice, true);
        }
        // Only tables this code allocated are reachable, so the free cannot fail.
        let r = self.mem.borrow_mut().free(table, size);
        debug_assert!(r.is_ok(), "page-table free: {r:?}");
    }

    /// `__arm_lpae_free_pgtable()`: free a table and every table below it.
    fn free_pgtable(&self, hw: &mut dyn Hw, lvl: u32, table: PhysAddr) {
        let size = self.table_size(lvl);
        if lvl < ARM_LPAE_MAX_LEVELS - 1 {
            let mut ptes = Vec::new();
            self.read_ptes(table, size / 8, &mut ptes);
            for pte in ptes {
                if Self::pte_is_table(pte, lvl) {
                    let child = self.pte_to_paddr(pte);
                    self.free_pgtable(hw, lvl + 1, child);
                }
            }
        }
        self.free_table_pages(hw, table, size);
    }

    #[inline]
    fn check_pgsize(&self, pgsize: u64, pgcount: u64) -> Result<(), IommuError> {
        if pgcount == 0 {
            return Err(IommuError::Empty);
        }
        if !pgsize.is_power_of_two() || pgsize & self.pgsize_bitmap != pgsize {
            return Err(IommuError::BadPageSize {
                pgsize,
                bitmap: self.pgsize_bitmap,
            });
        }
        Ok(())
    }

    #[inline]
    fn check_iova(&self, iova: u64, size: u64, align: u64) -> Result<(), IommuError> {
        if iova & (align - 1) != 0 {
            return Err(IommuError::Misaligned {
                what: "IOVA",
                addr: iova,
                size,
                align,
            });
        }
        if iova
            .checked_add(size)
            .is_none_or(|e| e > 1u64 << self.cfg.ias)
        {
            return Err(IommuError::OutOfRange {
                what: "IOVA",
                addr: iova,
                size,
                bits: self.cfg.ias,
            });
        }
        Ok(())
    }

    /// The checks `arm_lpae_unmap_pages()` makes before walking: the page size and count, and
    /// the first page's IOVA. As [`Self::check_map`], a request that passes is accepted at once.
    #[inline]
    fn check_unmap(&self, iova: u64, pgsize: u64, pgcount: u64) -> Result<(), IommuError> {
        if pgcount != 0
            && pgsize.is_power_of_two()
            && pgsize & self.pgsize_bitmap == pgsize
            && iova & (pgsize - 1) == 0
            && fits(iova, pgsize, self.iova_end)
        {
            return Ok(());
        }
        self.check_unmap_in_order(iova, pgsize, pgcount)
    }

    #[cold]
    #[inline(never)]
    fn check_unmap_in_order(&self, iova: u64, pgsize: u64, pgcount: u64) -> Result<(), IommuError> {
        self.check_pgsize(pgsize, pgcount)
            .and_then(|()| self.check_iova(iova, pgsize, pgsize))
    }

    /// The checks `arm_lpae_map_pages()` makes before walking; returns the bytes asked for. A
    /// request that passes them all is accepted here; any other goes to the checks one by one,
    /// out of line, for the error the first failing one names.
    #[inline]
    fn check_map(
        &self,
        iova: IovaAddr,
        paddr: PhysAddr,
        pgsize: u64,
        pgcount: u64,
    ) -> Result<u64, IommuError> {
        if pgcount != 0
            && pgsize.is_power_of_two()
            && pgsize & self.pgsize_bitmap == pgsize
            && let Some(size) = pgsize.checked_mul(pgcount)
            && (iova.0 | paddr.0) & (pgsize - 1) == 0
            && fits(iova.0, size, self.iova_end)
            && fits(paddr.0, size, self.pa_end)
        {
            return Ok(size);
        }
        self.check_map_in_order(iova, paddr, pgsize, pgcount)
    }

    #[cold]
    #[inline(never)]
    fn check_map_in_order(
        &self,
        iova: IovaAddr,
        paddr: PhysAddr,
        pgsize: u64,
        pgcount: u64,
    ) -> Result<u64, IommuError> {
        self.check_pgsize(pgsize, pgcount)?;
        let size = pgsize.checked_mul(pgcount).ok_or(IommuError::OutOfRange {
            what: "IOVA",
            addr: iova.0,
            size: u64::MAX,
            bits: self.cfg.ias,
        })?;
        self.check_iova(iova.0, size, pgsize)?;
        if paddr.0 & (pgsize - 1) != 0 {
            return Err(IommuError::Misaligned {
                what: "physical address",
                addr: paddr.0,
                size,
                align: pgsize,
            });
        }
        if paddr
            .0
            .checked_add(size)
            .is_none_or(|e| e > 1u64 << self.cfg.oas)
        {
            return Err(IommuError::OutOfRange {
                what: "physical address",
                addr: paddr.0,
                size,
                bits: self.cfg.oas,
            });
        }
        Ok(size)
    }

    /// `arm_lpae_map_pages()`: map up to `pgcount` pages of `pgsize` at `iova` to `paddr`. Maps at
    /// most the entries left in one table and returns the bytes mapped; the caller loops.
    #[allow(clippy::too_many_arguments)]
    // Inlined into `__iommu_map`'s loop, its one caller outside tests: the call's own register
    // saves and argument moves were a tenth of a one-page map.
    #[inline(always)]
    pub fn map_pages<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        iova: IovaAddr,
        paddr: PhysAddr,
        pgsize: u64,
        pgcount: u64,
        prot: Prot,
    ) -> Result<u64, IommuError> {
        self.check_map(iova, paddr, pgsize, pgcount)
            .inspect_err(|e| warn_on(hw, e))?;
        // No access at all: the kernel maps nothing and reports success.
        if !prot.contains(Prot::READ) && !prot.contains(Prot::WRITE) {
            return Ok(0);
        }
        let back = hw.enter(crate::frame_id!("arm_lpae_map_pages"));
        hw.count(Counter::PgtableMapCall, 1);
        hw.sw(self.costs.map_pages);
        let attrs = self.prot_pte[prot.0 as usize % PROT_COMBINATIONS];
        let (lvl, table) = (self.start_level, self.pgd);
        // The commonest call, one page into tables that exist, may take the shortcut
        // (`leaf_walk`); the general walk (`__arm_lpae_map`'s recursion) stays out of line.
        let r = if self.map_one_shortcut(hw, iova.0, paddr.0, pgsize, pgcount, attrs) {
            Ok(pgsize)
        } else {
            self.lpae_map(hw, tlb, iova.0, paddr.0, pgsize, pgcount, attrs, lvl, table)
        };
        // Every call that reached the walk ends with wmb(), whatever it returned, so no table
        // walk for the new IOVA can start before the PTE stores are visible.
        hw.wmb();
        hw.leave(back);
        r
    }

    /// `__arm_lpae_map()`.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn lpae_map<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        iova: u64,
        paddr: u64,
        size: u64,
        pgcount: u64,
        attrs: u64,
        lvl: u32,
        table: PhysAddr,
    ) -> Result<u64, IommuError> {
        // The kernel recurses one level per call; a loop walks the same levels.
        let look = self.look(&*hw);
        let (mut lvl, mut table) = (lvl, table);
        loop {
            let (l, t, passed) = self.descend(look, iova, size, lvl, table);
            hw.sw(self.costs.walk_level.times(passed));
            (lvl, table) = (l, t);
            hw.sw(self.costs.walk_level);
            let idx = self.lvl_idx(iova, lvl);
            let ptep = PhysAddr(table.0 + idx * 8);
            if size == self.block_size(lvl) {
                let n = pgcount.min(self.lvl_entries(lvl) - idx);
                self.init_pte(hw, tlb, iova, paddr, attrs, lvl, n, table, idx)?;
                return Ok(n * size);
            }
            if lvl >= ARM_LPAE_MAX_LEVELS - 1 {
                return Err(IommuError::BadPageSize {
                    pgsize: size,
                    bitmap: self.pgsize_bitmap,
                });
            }
            let pte = self.read_lvl_pte(look, ptep, lvl);
            let pte = if pte == 0 {
                let t = self.alloc_table(hw.as_dyn())?;
                match self.install_table(hw, t, ptep, 0) {
                    0 => t.0 | PTE_TYPE_TABLE,
                    // Another CPU installed a table first, while this one allocated and
                    // cleaned its own: the kernel frees its own and goes on in the winner's.
                    won => {
                        self.free_table_pages(hw.as_dyn(), t, self.cfg.granule);
                        won
                    }
                }
            } else {
                // An entry another CPU wrote and has not yet marked cleaned, or a leaf (which
                // never carries the mark): the kernel cleans it before looking at it, so that a
                // non-coherent walker sees it whatever this call does next.
                if self.walk_sync.is_some() && pte & PTE_SW_SYNC == 0 {
                    self.sync_ptes(hw, ptep, 1);
                }
                pte
            };
            let child = if Self::pte_is_table(pte, lvl) {
                self.pte_to_paddr(pte)
            } else {
                // A block on the way down: the kernel WARNs and wants an unmap first.
                hw.count(Counter::Warn, 1);
                return Err(IommuError::Exists(IovaAddr(iova)));
            };
            lvl += 1;
            table = child;
        }
    }

    /// `arm_lpae_install_table()`: point `ptep` at a new table if it still holds `curr`
    /// (`cmpxchg64_relaxed()`: the compare and the write are one step, with no turn between);
    /// a non-coherent walker needs the entry cleaned, whoever installed it, after which the
    /// winner marks it with the software sync bit. Returns what the entry held: `curr` if this
    /// CPU's table went in, else what another CPU put there after `curr` was read.
    fn install_table<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        table: PhysAddr,
        ptep: PhysAddr,
        curr: u64,
    ) -> u64 {
        let new = table.0 | PTE_TYPE_TABLE | if self.cfg.quirk_ns { 1 << 63 } else { 0 };
        let old = self.mem.borrow().read_u64(ptep);
        if old == curr {
            self.mem.borrow_mut().write_u64(ptep, new);
        }
        if self.walk_sync.is_none() || old & PTE_SW_SYNC != 0 {
            return old;
        }
        self.sync_ptes(hw, ptep, 1);
        if old == curr {
            self.mem.borrow_mut().write_u64(ptep, new | PTE_SW_SYNC);
        }
        old
    }

    /// `arm_lpae_init_pte()`: refuse leaves already present, replace empty tables, then write
    /// `n` leaves.
    #[allow(clippy::too_many_arguments)]
    fn init_pte<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        iova: u64,
        paddr: u64,
        attrs: u64,
        lvl: u32,
        n: u64,
        table: PhysAddr,
        idx: u64,
    ) -> Result<(), IommuError> {
        let ptep = PhysAddr(table.0 + idx * 8);
        let look = self.look(&*hw);
        if n == 1 {
            // One page per call (every map before 5.15, and scattered memory on any release):
            // no buffer for a run of one.
            let pte = self.read_lvl_pte(look, ptep, lvl);
            return self.init_pte_checked(hw, tlb, iova, paddr, attrs, lvl, n, table, ptep, &[pte]);
        }
        let mut ptes = look.pte_scratch.take();
        self.read_ptes(ptep, n, &mut ptes);
        let r = self.init_pte_checked(hw, tlb, iova, paddr, attrs, lvl, n, table, ptep, &ptes);
        look.pte_scratch.set(ptes);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn init_pte_checked<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        iova: u64,
        paddr: u64,
        attrs: u64,
        lvl: u32,
        n: u64,
        table: PhysAddr,
        ptep: PhysAddr,
        ptes: &[u64],
    ) -> Result<(), IommuError> {
        let sz = self.block_size(lvl);
        // In entry order, as the kernel checks them: a leaf refuses the whole call, but only
        // after the tables of the entries before it have been replaced (freed with their walk
        // flushed), so a refused call can still have removed mappings.
        for (i, &pte) in ptes.iter().enumerate() {
            let at = iova + i as u64 * sz;
            if Self::pte_is_leaf(pte, lvl) {
                hw.count(Counter::Warn, 1);
                return Err(IommuError::Exists(IovaAddr(at)));
            }
            if Self::pte_is_table(pte, lvl) {
                // A block over a table: the table goes, whatever it still maps (pages included),
                // through the unmap path with no gather: one walk flush, no leaf invalidations.
                let mut g = IommuIotlbGather::new();
                let r = self.lpae_unmap(hw, tlb, &mut g, at, sz, 1, lvl, table);
                debug_assert_eq!(r, sz);
            }
        }
        let leaf_type = if lvl == ARM_LPAE_MAX_LEVELS - 1 {
            PTE_TYPE_PAGE
        } else {
            PTE_TYPE_BLOCK
        };
        let base = attrs | leaf_type;
        let mask = self.addr_mask();
        hw.sw(self.costs.init_pte.times(n));
        let look = self.look(&*hw);
        self.write_ptes(look, ptep, lvl, n, |i| base | ((paddr + i * sz) & mask));
        self.sync_ptes(hw, ptep, n);
        Ok(())
    }

    /// `arm_lpae_unmap_pages()`: unmap up to `pgcount` pages of `pgsize` at `iova`. Stops at the
    /// end of a table (or at a hole after the first entry) and returns the bytes unmapped;
    /// a hole at `iova` itself is [`IommuError::NotMapped`] (the kernel WARNs and returns 0).
    pub fn unmap_pages<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: IovaAddr,
        pgsize: u64,
        pgcount: u64,
    ) -> Result<u64, IommuError> {
        self.check_unmap(iova.0, pgsize, pgcount)
            .inspect_err(|e| warn_on(hw, e))?;
        let back = hw.enter(crate::frame_id!("arm_lpae_unmap_pages"));
        hw.count(Counter::PgtableUnmapCall, 1);
        hw.sw(self.costs.unmap_pages);
        let (lvl, table) = (self.start_level, self.pgd);
        // The commonest call, one page in tables that exist, may take the shortcut
        // (`leaf_walk`); the general walk (`__arm_lpae_unmap`'s recursion) stays out of line.
        let n = if self.unmap_one_shortcut(hw, iova.0, pgsize, pgcount) {
            self.tlb_add_leaf(hw, tlb, gather, iova.0, pgsize);
            pgsize
        } else {
            self.lpae_unmap(hw, tlb, gather, iova.0, pgsize, pgcount, lvl, table)
        };
        hw.leave(back);
        if n > 0 {
            Ok(n)
        } else if let Some((_, block)) = self
            .walk_in(self.look(&*hw), iova.0)
            .filter(|&(_, b)| b > pgsize)
        {
            Err(IommuError::PartialBlock { iova, block })
        } else {
            Err(IommuError::NotMapped(iova))
        }
    }

    /// `__arm_lpae_unmap()`. Out of line: the commonest call may have been taken by the shortcut
    /// (`leaf_walk`), and any call may come here instead, the shortcut reaching the same result.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn lpae_unmap<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: u64,
        size: u64,
        pgcount: u64,
        lvl: u32,
        table: PhysAddr,
    ) -> u64 {
        // The kernel recurses one level per call; a loop walks the same levels.
        let look = self.look(&*hw);
        let (mut lvl, mut table) = (lvl, table);
        loop {
            let (l, t, passed) = self.descend(look, iova, size, lvl, table);
            (lvl, table) = (l, t);
            hw.sw(self.costs.walk_level.times(passed));
            if lvl == ARM_LPAE_MAX_LEVELS {
                hw.count(Counter::Warn, 1);
                return 0;
            }
            hw.sw(self.costs.walk_level);
            let idx = self.lvl_idx(iova, lvl);
            let ptep = PhysAddr(table.0 + idx * 8);
            let pte = self.read_lvl_pte(look, ptep, lvl);
            if pte == 0 {
                // `WARN_ON(!pte)`: unmapping a hole.
                hw.count(Counter::Warn, 1);
                return 0;
            }
            if size == self.block_size(lvl) {
                let n = pgcount.min(self.lvl_entries(lvl) - idx);
                if n == 1 {
                    // A run of one (every unmap before 5.15, a single page on any): the entry
                    // just read is the run, with no buffer.
                    return self.clear_ptes(hw, tlb, gather, iova, size, lvl, ptep, &[pte]);
                }
                let mut ptes = look.pte_scratch.take();
                self.read_ptes(ptep, n, &mut ptes);
                let r = self.clear_ptes(hw, tlb, gather, iova, size, lvl, ptep, &ptes);
                look.pte_scratch.set(ptes);
                return r;
            }
            if Self::pte_is_leaf(pte, lvl) {
                return match self.cfg.block_unmap {
                    BlockUnmap::Split => self.split_blk_unmap(
                        hw,
                        tlb,
                        gather,
                        iova,
                        size,
                        pte,
                        lvl + 1,
                        ptep,
                        pgcount,
                    ),
                    BlockUnmap::Refuse => {
                        if !self.warned_partial_block.replace(true) {
                            hw.count(Counter::Warn, 1);
                        }
                        0
                    }
                };
            }
            table = self.pte_to_paddr(pte);
            lvl += 1;
        }
    }

    /// `io_pgtable_tlb_add_page()` for a leaf `__arm_lpae_unmap()` cleared: invalidated now,
    /// unless the gather is queued (lazy invalidation: the IOVA waits for a whole flush).
    #[inline]
    fn tlb_add_leaf<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: u64,
        size: u64,
    ) {
        if !gather.queued {
            super::tlb_add_page(tlb, hw, gather, iova, size);
        }
    }

    /// Zero `n` entries from `ptep` at `lvl`.
    #[inline]
    fn clear_entries(&self, look: &LookAside, ptep: PhysAddr, lvl: u32, n: u64) {
        self.write_ptes(look, ptep, lvl, n, |_| 0);
    }

    /// The leaf-level run of `__arm_lpae_unmap()`: clear `ptes` (read from `ptep` on), stopping
    /// at a hole; a leaf is invalidated through `tlb_add_page`, a table freed after a walk
    /// flush. Returns the bytes unmapped. A run of one is the commonest call (a single page, or
    /// any unmap before 5.15): inlined where the run is one entry read, the loop and the store
    /// fold to that entry's, as short as a path of its own would be.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn clear_ptes<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: u64,
        size: u64,
        lvl: u32,
        ptep: PhysAddr,
        ptes: &[u64],
    ) -> u64 {
        if self.cfg.pte_clear == PteClear::PerRun {
            return self.clear_ptes_per_run(hw, tlb, gather, iova, size, lvl, ptep, ptes);
        }
        let mut i = 0u64;
        for &pte in ptes {
            if pte == 0 {
                // A hole after the first entry: WARN, and the run stops short.
                hw.count(Counter::Warn, 1);
                break;
            }
            let at = iova + i * size;
            hw.sw(self.costs.clear_pte);
            // The entry is cleared (and cleaned for a non-coherent walker) before the
            // invalidation, so the SMMU cannot refetch it; the bytes are written below in
            // one go, which leaves the same memory behind.
            self.sync_ptes(hw, PhysAddr(ptep.0 + i * 8), 1);
            if Self::pte_is_leaf(pte, lvl) {
                self.tlb_add_leaf(hw, tlb, gather, at, size);
            } else {
                self.flush_walk_and_free(hw, tlb, at, size, lvl, pte);
            }
            i += 1;
        }
        self.clear_entries(self.look(&*hw), ptep, lvl, i);
        i * size
    }

    /// A table entry of the run being unmapped, cleared: the walks cached through it are
    /// flushed (`io_pgtable_tlb_flush_walk`), then the table and every table under it freed.
    /// Out of line: a table in a run is the rare case (a block-sized unmap of what was mapped
    /// in pages), and the run's loop, inlined, stays short without it.
    #[inline(never)]
    fn flush_walk_and_free<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        iova: u64,
        size: u64,
        lvl: u32,
        pte: u64,
    ) {
        super::tlb_flush_walk(tlb, hw, iova, size, self.cfg.granule);
        let child = self.pte_to_paddr(pte);
        let back = hw.enter(crate::frame_id!("__arm_lpae_free_pgtable"));
        self.free_pgtable(hw.as_dyn(), lvl + 1, child);
        hw.leave(back);
    }

    /// 6.12's leaf-level run of `__arm_lpae_unmap()` (commit 85b715a33458): the run's table
    /// entries are cleared (each cleaned at once), walk-flushed and freed first; then every
    /// entry of the run is cleared and the run cleaned with one `__arm_lpae_sync_pte` of them
    /// all; then, unless the gather is queued, `tlb_add_page` for each entry, tables included.
    // Inlined as `clear_ptes` is: from 6.12 every unmap the shortcut does not take comes here,
    // a single page too.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn clear_ptes_per_run<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: u64,
        size: u64,
        lvl: u32,
        ptep: PhysAddr,
        ptes: &[u64],
    ) -> u64 {
        let mut i = 0u64;
        for &pte in ptes {
            if pte == 0 {
                hw.count(Counter::Warn, 1);
                break;
            }
            hw.sw(self.costs.clear_pte);
            if !Self::pte_is_leaf(pte, lvl) {
                let at = ptep.0 + i * 8;
                self.write_ptes(self.look(&*hw), PhysAddr(at), lvl, 1, |_| 0);
                self.sync_ptes(hw, PhysAddr(at), 1);
                self.flush_walk_and_free(hw, tlb, iova + i * size, size, lvl, pte);
            }
            i += 1;
        }
        self.clear_entries(self.look(&*hw), ptep, lvl, i);
        if i > 0 {
            self.sync_ptes(hw, ptep, i);
        }
        for j in 0..i {
            self.tlb_add_leaf(hw, tlb, gather, iova + j * size, size);
        }
        i * size
    }

    /// `arm_lpae_split_blk_unmap()`: replace a block by a table of the next level mapping the
    /// same memory minus the part being unmapped.
    #[allow(clippy::too_many_arguments)]
    fn split_blk_unmap<H: AsDynDeviceHw + ?Sized>(
        &self,
        hw: &mut H,
        tlb: &FlushOps,
        gather: &mut IommuIotlbGather,
        iova: u64,
        size: u64,
        blk_pte: u64,
        lvl: u32,
        ptep: PhysAddr,
        pgcount: u64,
    ) -> u64 {
        if lvl == ARM_LPAE_MAX_LEVELS {
            return 0;
        }
        let back = hw.enter(crate::frame_id!("arm_lpae_split_blk_unmap"));
        let split_sz = self.block_size(lvl);
        let per_table = 1u64 << self.bits_per_level;
        let Ok(tablep) = self.alloc_table(hw.as_dyn()) else {
            hw.leave(back);
            return 0;
        };
        let unmap = (size == split_sz).then(|| {
            let start = self.lvl_idx(iova, lvl);
            (start, pgcount.min(per_table - start))
        });
        let blk_paddr = self.pte_to_paddr(blk_pte).0;
        let leaf_type = if lvl == ARM_LPAE_MAX_LEVELS - 1 {
            PTE_TYPE_PAGE
        } else {
            PTE_TYPE_BLOCK
        };
        let attrs = (blk_pte & PTE_ATTR_MASK) | leaf_type;
        let mask = self.addr_mask();
        let skip = |i: u64| unmap.is_some_and(|(s, n)| i >= s && i < s + n);
        self.write_ptes(self.look(&*hw), tablep, lvl, per_table, |i| {
            if skip(i) {
                0
            } else {
                attrs | ((blk_paddr + i * split_sz) & mask)
            }
        });
        for i in (0..per_table).filter(|&i| !skip(i)) {
            hw.sw(self.costs.init_pte);
            self.sync_ptes(hw, PhysAddr(tablep.0 + i * 8), 1);
        }
        let won = self.install_table(hw, tablep, ptep, blk_pte);
        let (tablep, unmap) = if won == blk_pte {
            (tablep, unmap)
        } else {
            // Another CPU replaced the block first (unmapping another part of it): this one's
            // table goes, and the unmap goes on in the other's table, if a table it is.
            self.free_table_pages(hw.as_dyn(), tablep, self.cfg.granule);
            if won & PTE_TYPE_MASK != PTE_TYPE_TABLE {
                hw.leave(back);
                return 0;
            }
            (self.pte_to_paddr(won), None)
        };
        let r = match unmap {
            Some((_, n)) => {
                for i in 0..n {
                    super::tlb_add_page(tlb, hw, gather, iova + i * size, size);
                }
                n * size
            }
            None => self.lpae_unmap(hw, tlb, gather, iova, size, pgcount, lvl, tablep),
        };
        hw.leave(back);
        r
    }

    /// `arm_lpae_iova_to_phys()`: walk the tables as the SMMU would.
    pub fn iova_to_phys(&self, hw: &mut dyn Hw, iova: IovaAddr) -> Option<PhysAddr> {
        hw.sw(self.costs.iova_to_phys);
        self.walk_in(self.look(hw), iova.0).map(|(pa, _)| pa)
    }

    /// The translation of `iova` and the size of the leaf that maps it, without charging time.
    pub fn walk(&self, iova: u64) -> Option<(PhysAddr, u64)> {
        self.walk_in(self.first_look(), iova)
    }

    /// [`Self::walk`] with a CPU's look-aside state.
    fn walk_in(&self, look: &LookAside, iova: u64) -> Option<(PhysAddr, u64)> {
        if iova >> self.cfg.ias != 0 {
            return None;
        }
        let mut table = self.pgd;
        let mut lvl = self.start_level;
        loop {
            let ptep = PhysAddr(table.0 + self.lvl_idx(iova, lvl) * 8);
            let pte = self.read_lvl_pte(look, ptep, lvl);
            if pte & PTE_VALID == 0 {
                return None;
            }
            let bs = self.block_size(lvl);
            if Self::pte_is_leaf(pte, lvl) {
                return Some((PhysAddr(self.pte_to_paddr(pte).0 | (iova & (bs - 1))), bs));
            }
            if !Self::pte_is_table(pte, lvl) {
                return None;
            }
            table = self.pte_to_paddr(pte);
            lvl += 1;
        }
    }

    /// The raw descriptor for `iova` at `lvl` if the walk reaches that level.
    pub fn pte_at(&self, iova: u64, lvl: u32) -> Option<u64> {
        let mut table = self.pgd;
        for l in self.start_level..=lvl {
            let pte = self.read_pte(PhysAddr(table.0 + self.lvl_idx(iova, l) * 8));
            if l == lvl {
                return Some(pte);
            }
            if !Self::pte_is_table(pte, l) {
                return None;
            }
            table = self.pte_to_paddr(pte);
        }
        None
    }

    /// Tables reachable from the top level, itself included. With no leak, this equals the
    /// allocations this table holds in its memory.
    pub fn count_tables(&self) -> usize {
        self.count_from(self.start_level, self.pgd)
    }

    fn count_from(&self, lvl: u32, table: PhysAddr) -> usize {
        let size = self.table_size(lvl);
        let mut buf = vec![0u8; size as usize];
        self.mem.borrow().read(table, &mut buf);
        1 + buf
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .filter(|&pte| Self::pte_is_table(pte, lvl))
            .map(|pte| self.count_from(lvl + 1, self.pte_to_paddr(pte)))
            .sum::<usize>()
    }

    /// The table's shape: live tables and valid leaves at each level (index = level, 0..=3;
    /// levels above the start level stay 0). Reads memory only; charges nothing.
    pub fn shape(&self) -> PgtableShape {
        let mut sh = PgtableShape::default();
        self.shape_from(self.start_level, self.pgd, &mut sh);
        sh
    }

    fn shape_from(&self, lvl: u32, table: PhysAddr, sh: &mut PgtableShape) {
        let size = self.table_size(lvl);
        let mut buf = vec![0u8; size as usize];
        self.mem.borrow().read(table, &mut buf);
        sh.tables[lvl as usize] += 1;
        for c in buf.chunks_exact(8) {
            let pte = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            if Self::pte_is_leaf(pte, lvl) {
                sh.leaves[lvl as usize] += 1;
            } else if Self::pte_is_table(pte, lvl) {
                self.shape_from(lvl + 1, self.pte_to_paddr(pte), sh);
            }
        }
    }

    /// Release every table, the top level included (`free_io_pgtable_ops`).
    pub fn free(self, hw: &mut dyn Hw) {
        let (lvl, pgd) = (self.start_level, self.pgd);
        self.free_pgtable(hw, lvl, pgd);
    }
}

/// `a + size <= end`, without the add (which could wrap): the same answer for any `a`, in two
/// compares and a subtraction that cannot wrap.
#[inline(always)]
fn fits(a: u64, size: u64, end: u64) -> bool {
    a <= end && size <= end - a
}

/// The io-pgtable entry checks are `WARN_ON`s: an unsupported page size or count, an address
/// outside the table's range. (Misalignment is the iommu core's to refuse, without a WARN.)
fn warn_on<H: Hw + ?Sized>(hw: &mut H, e: &IommuError) {
    if matches!(
        e,
        IommuError::BadPageSize { .. } | IommuError::Empty | IommuError::OutOfRange { .. }
    ) {
        hw.count(Counter::Warn, 1);
    }
}

#[cfg(test)]
mod tests;
