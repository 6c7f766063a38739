//! The one hardware interface every layer of the stack charges its work through.
//!
//! Kernel counterpart: none as such — this is the line between the kernel's algorithms (which we
//! run for real) and the machine they run on (which we model or, on a real host, exercise). What
//! crosses it mirrors the instructions the kernel's code would execute: a cache-maintenance
//! instruction per line (`DC CVAC`, `CLFLUSHOPT`, ...), a barrier (`DSB SY`, `SFENCE`), a CPU copy
//! between two buffers (swiotlb's bounce), and named stretches of the kernel's own instructions
//! (`sw`), some of which are also counted events (a lock taken, an out-of-line address translation),
//! device register writes and polls (SMMUv2 `TLBIVA`/`TLBIASID`/`TLBSYNC`/`TLBSTATUS`), `udelay`, and
//! SMMUv3 command-queue submission.
//!
//! The interface is split by who answers. [`Hw`] is the CPU side (function frames, cache
//! maintenance, barriers, copies, software costs); [`SmmuPort`] is the device side (SMMU registers,
//! `udelay`, the command queue); [`DeviceHw`] is a backend that has both. The Model prices the device
//! side from the profile's optional `[smmu]` section and the Recorder records it; the host backend
//! cannot reach an SMMU and implements only [`Hw`], so code that drives an SMMU (the iommu layer,
//! and every [`crate::dma::DmaMapOps`]) cannot be handed the host backend: the compiler refuses it.
//!
//! Invariants: functional code never computes a time. It calls [`Hw`] (and [`SmmuPort`]); a backend
//! decides what an operation costs ([`model::Model`]) or performs it ([`host`]). Every charge lands
//! on the call stack that was current when it was made, so reports can break time down by kernel
//! function. [`SmmuPort`] has no default bodies, so no backend answers the device side by accident.

pub mod cache;
pub mod calls;
pub mod host;
pub mod ledger;
pub mod memory;
pub mod model;
pub mod recorder;
mod smp_ops;
pub mod sw_costs;
pub use smp_ops::SmpHw;

pub use sw_costs::SwKey;

pub use ledger::{FrameId, Ledger, StackCharge, WAIT_FRAME};

/// The frame a CPU's time spinning on a lock another CPU held is charged in, unless the lock
/// names its own.
pub use crate::smp::SPIN_FRAME;

/// The frame a shared line's transfer from another CPU's cache is charged in (a lock's line
/// after another CPU released it).
pub static LINE_FRAME: &str = "(line from another CPU's cache)";

#[cfg(test)]
pub(crate) mod test_support {
    use super::{SmmuCmdKind, SmmuPort};

    /// Write `cmds` into the command queue and ring the doorbell for them, as one CPU alone
    /// publishes a list: the completion of the last `CMD_SYNC` among them (0 if none).
    pub fn cmdq_issue<H: SmmuPort + ?Sized>(hw: &mut H, cmds: &[SmmuCmdKind]) -> u64 {
        hw.smmu_cmdq_write(cmds.len() as u64);
        let mut done = Vec::new();
        hw.smmu_cmdq_doorbell(cmds, &mut done);
        done.last().copied().unwrap_or(0)
    }

    /// Poll until the sync completing at `done` is seen.
    pub fn cmdq_wait<H: SmmuPort + ?Sized>(hw: &mut H, done: u64) {
        hw.smmu_cmdq_poll(done);
    }

    pub use super::recorder::Recorder;
}

use crate::types::{Arch, PhysAddr};

/// A cache-maintenance operation to the point of coherency, by line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheOp {
    /// Write a dirty line back, keep it (arm64 `DC CVAC`, x86 `CLWB`).
    Clean,
    /// Discard the line (arm64 `DC IVAC`; no x86 equivalent).
    Inval,
    /// Write back and discard (arm64 `DC CIVAC`, x86 `CLFLUSHOPT`).
    CleanInval,
}

impl CacheOp {
    pub const ALL: [CacheOp; 3] = [CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval];

    /// The profile key for this operation's costs.
    pub fn key(self) -> &'static str {
        match self {
            CacheOp::Clean => "clean",
            CacheOp::Inval => "inval",
            CacheOp::CleanInval => "clean_inval",
        }
    }

    fn counter(self) -> Counter {
        match self {
            CacheOp::Clean => Counter::CacheCleanLine,
            CacheOp::Inval => Counter::CacheInvalLine,
            CacheOp::CleanInval => Counter::CacheCleanInvalLine,
        }
    }

    /// The counter of this operation done by way on an outer cache (one per whole-cache
    /// operation); an invalidate by way is only done at boot, so it has none.
    pub fn outer_way_counter(self) -> Option<Counter> {
        match self {
            CacheOp::Clean => Some(Counter::OuterCleanWay),
            CacheOp::CleanInval => Some(Counter::OuterCleanInvalWay),
            CacheOp::Inval => None,
        }
    }

    /// The counter of this operation on an outer cache (one register write per line).
    pub fn outer_counter(self) -> Counter {
        match self {
            CacheOp::Clean => Counter::OuterCleanLine,
            CacheOp::Inval => Counter::OuterInvalLine,
            CacheOp::CleanInval => Counter::OuterCleanInvalLine,
        }
    }
}

/// A device register the stack writes or polls (SMMUv2 / MMU-500 context-bank registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmioReg {
    /// `ARM_SMMU_CB_S1_TLBIVA`: invalidate one VA (every level of walk) for an ASID.
    SmmuTlbiva,
    /// `ARM_SMMU_CB_S1_TLBIVAL`: invalidate one VA, last-level (leaf) entries only.
    SmmuTlbival,
    /// `ARM_SMMU_CB_S1_TLBIASID`: invalidate every entry of an ASID.
    SmmuTlbiasid,
    /// `ARM_SMMU_CB_TLBSYNC`: ask for completion of every invalidation issued before it.
    SmmuTlbsync,
    /// `ARM_SMMU_CB_TLBSTATUS`: bit 0 (`GSACTIVE`) is set while a sync is still in progress.
    SmmuTlbstatus,
    /// SMMUv3 `ARM_SMMU_CMDQ_BASE`: the command queue's physical address, written once at probe
    /// (`arm_smmu_device_reset()`); from then on the SMMU reads commands from that memory.
    SmmuCmdqBase,
}

impl MmioReg {
    pub fn counter(self) -> Counter {
        match self {
            MmioReg::SmmuTlbiva => Counter::SmmuTlbiva,
            MmioReg::SmmuTlbival => Counter::SmmuTlbival,
            MmioReg::SmmuTlbiasid => Counter::SmmuTlbiasid,
            MmioReg::SmmuTlbsync => Counter::SmmuTlbsync,
            MmioReg::SmmuTlbstatus => Counter::SmmuTlbstatusRead,
            MmioReg::SmmuCmdqBase => Counter::SmmuCmdqBase,
        }
    }
}

/// `TLBSTATUS.GSACTIVE`: a sync is still in progress.
pub const SMMU_TLBSTATUS_GSACTIVE: u64 = 1;

/// What kind of SMMUv3 command a queue entry holds; the backend needs no more than this to price
/// it (the 16-byte encoding lives in the driver's queue, `iommu::arm_smmu_v3`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SmmuCmdKind {
    /// `CMD_TLBI_NH_VA` (a single VA, or a range when TG/NUM/SCALE are set on SMMUv3.2).
    TlbiNhVa,
    /// `CMD_TLBI_NH_ASID`.
    TlbiNhAsid,
    /// `CMD_SYNC`.
    Sync,
}

impl SmmuCmdKind {
    pub fn counter(self) -> Counter {
        match self {
            SmmuCmdKind::TlbiNhVa => Counter::CmdqTlbiNhVa,
            SmmuCmdKind::TlbiNhAsid => Counter::CmdqTlbiNhAsid,
            SmmuCmdKind::Sync => Counter::CmdqSync,
        }
    }
}

/// Countable operations. Counts come from running the algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    CacheCleanLine,
    CacheInvalLine,
    CacheCleanInvalLine,
    Barrier,
    /// A write barrier (`wmb()`: arm64 `DSB ST`, x86 `SFENCE`), counted apart from [`Counter::Barrier`].
    Wmb,
    /// One bounce copy (`memcpy` in `swiotlb_bounce`), whatever its length.
    BounceCopy,
    /// Bytes moved by bounce copies.
    BounceCopyBytes,
    /// A spin lock taken (`spin_lock_irqsave` of the swiotlb pool or area lock).
    SpinLock,
    /// An out-of-line `__phys_addr` call (x86-64 `virt_to_phys` before the 3.8 swiotlb series).
    PhysAddrCall,
    SmmuTlbiva,
    SmmuTlbival,
    SmmuTlbiasid,
    SmmuTlbsync,
    SmmuTlbstatusRead,
    /// `ARM_SMMU_CMDQ_BASE` writes (one per probe).
    SmmuCmdqBase,
    /// `udelay()` calls (each of any length).
    Udelay,
    CmdqTlbiNhVa,
    CmdqTlbiNhAsid,
    CmdqSync,
    /// Command-queue submissions (one producer-index doorbell each).
    CmdqBatch,
    /// Calls into the page table's `map_pages` (5.14: `ops->map`, one per page).
    PgtableMapCall,
    /// Calls into the page table's `unmap_pages` (5.14: `ops->unmap`, one per page or block).
    PgtableUnmapCall,
    /// IOVA ranges handed out by `alloc_iova_fast`.
    IovaAlloc,
    /// Of those, the ones served from a per-CPU magazine (`iova_rcache_get` hits).
    IovaRcacheHit,
    /// IOVA ranges given back by `free_iova_fast`.
    IovaFree,
    /// IOVA ranges iommu-dma queued for a later flush instead of invalidating (`queue_iova`).
    FqQueued,
    /// Whole-domain flushes of the flush queue (`fq_flush_iotlb`).
    FqFlush,
    /// Kernel warnings (`WARN_ON`) the modelled code raised: misuse the kernel reports and
    /// survives, such as mapping over a live leaf or unmapping a hole. Costs no modelled time.
    Warn,
    /// `iommu_iova_to_phys()` lookups: a walk of the page table by the CPU.
    IovaToPhys,
    /// Outer-cache (PL310) clean-by-PA register writes (`L2X0_CLEAN_LINE_PA`), one per line.
    OuterCleanLine,
    /// Outer-cache invalidate-by-PA register writes (`L2X0_INV_LINE_PA`).
    OuterInvalLine,
    /// Outer-cache clean-and-invalidate-by-PA register writes (`L2X0_CLEAN_INV_LINE_PA`).
    OuterCleanInvalLine,
    /// Outer-cache `CACHE_SYNC` register writes.
    OuterSync,
    /// Outer-cache clean-by-way operations (`L2X0_CLEAN_WAY` written with the way mask, then
    /// polled until the controller has walked every line of those ways).
    OuterCleanWay,
    /// Outer-cache clean-and-invalidate-by-way operations (`L2X0_CLEAN_INV_WAY`).
    OuterCleanInvalWay,
    /// Dirty lines a maintenance operation wrote out of the L1 (into the next level), with a
    /// functional cache model (`[cache_model]`); a clean of a clean or absent line writes none.
    L1Writeback,
    /// Dirty lines written out of the L2 to memory by maintenance (the PL310's clean by PA, or a
    /// victim the L2 evicted to take a line an L1 clean wrote into it).
    L2Writeback,
    /// Loads and stores a program issued (`user_access` workloads), of any size and type.
    CpuAccess,
    /// Of a program's accesses to cached memory, the L1 line fills (misses).
    LineFill,
    /// Cache lines moved between an initiator (CPU, device) and a line's home node on a NUMA
    /// machine ([`Hw::numa_line`]): a device ring's descriptors and completions.
    NumaLine,
}

impl Counter {
    pub const ALL: [Counter; 40] = [
        Counter::CacheCleanLine,
        Counter::CacheInvalLine,
        Counter::CacheCleanInvalLine,
        Counter::Barrier,
        Counter::Wmb,
        Counter::BounceCopy,
        Counter::BounceCopyBytes,
        Counter::SpinLock,
        Counter::PhysAddrCall,
        Counter::SmmuTlbiva,
        Counter::SmmuTlbival,
        Counter::SmmuTlbiasid,
        Counter::SmmuTlbsync,
        Counter::SmmuTlbstatusRead,
        Counter::SmmuCmdqBase,
        Counter::Udelay,
        Counter::CmdqTlbiNhVa,
        Counter::CmdqTlbiNhAsid,
        Counter::CmdqSync,
        Counter::CmdqBatch,
        Counter::PgtableMapCall,
        Counter::PgtableUnmapCall,
        Counter::IovaAlloc,
        Counter::IovaRcacheHit,
        Counter::IovaFree,
        Counter::FqQueued,
        Counter::FqFlush,
        Counter::Warn,
        Counter::IovaToPhys,
        Counter::OuterCleanLine,
        Counter::OuterInvalLine,
        Counter::OuterCleanInvalLine,
        Counter::OuterSync,
        Counter::OuterCleanWay,
        Counter::OuterCleanInvalWay,
        Counter::L1Writeback,
        Counter::L2Writeback,
        Counter::CpuAccess,
        Counter::LineFill,
        Counter::NumaLine,
    ];
    pub const N: usize = Counter::ALL.len();

    /// Stable name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Counter::CacheCleanLine => "cache_clean_line",
            Counter::CacheInvalLine => "cache_inval_line",
            Counter::CacheCleanInvalLine => "cache_clean_inval_line",
            Counter::Barrier => "barrier",
            Counter::Wmb => "wmb",
            Counter::BounceCopy => "bounce_copy",
            Counter::BounceCopyBytes => "bounce_copy_bytes",
            Counter::SpinLock => "spin_lock",
            Counter::PhysAddrCall => "phys_addr_call",
            Counter::SmmuTlbiva => "smmu_tlbiva",
            Counter::SmmuTlbival => "smmu_tlbival",
            Counter::SmmuTlbiasid => "smmu_tlbiasid",
            Counter::SmmuTlbsync => "smmu_tlbsync",
            Counter::SmmuTlbstatusRead => "smmu_tlbstatus_read",
            Counter::SmmuCmdqBase => "smmu_cmdq_base",
            Counter::Udelay => "udelay",
            Counter::CmdqTlbiNhVa => "cmdq_tlbi_nh_va",
            Counter::CmdqTlbiNhAsid => "cmdq_tlbi_nh_asid",
            Counter::CmdqSync => "cmdq_sync",
            Counter::CmdqBatch => "cmdq_batch",
            Counter::PgtableMapCall => "pgtable_map_call",
            Counter::PgtableUnmapCall => "pgtable_unmap_call",
            Counter::IovaAlloc => "iova_alloc",
            Counter::IovaRcacheHit => "iova_rcache_hit",
            Counter::IovaFree => "iova_free",
            Counter::FqQueued => "fq_queued",
            Counter::FqFlush => "fq_flush",
            Counter::Warn => "warn",
            Counter::IovaToPhys => "iova_to_phys",
            Counter::OuterCleanLine => "outer_clean_line",
            Counter::OuterInvalLine => "outer_inval_line",
            Counter::OuterCleanInvalLine => "outer_clean_inval_line",
            Counter::OuterSync => "outer_sync",
            Counter::OuterCleanWay => "outer_clean_way",
            Counter::OuterCleanInvalWay => "outer_clean_inval_way",
            Counter::L1Writeback => "l1_writeback",
            Counter::L2Writeback => "l2_writeback",
            Counter::CpuAccess => "cpu_access",
            Counter::LineFill => "line_fill",
            Counter::NumaLine => "numa_line",
        }
    }

    /// The instruction this count stands for on `arch`, for human-readable tables.
    pub fn instruction(self, arch: Arch) -> &'static str {
        match (self, arch) {
            (Counter::CacheCleanLine, Arch::Arm64) => "DC CVAC",
            (Counter::CacheInvalLine, Arch::Arm64) => "DC IVAC",
            (Counter::CacheCleanInvalLine, Arch::Arm64) => "DC CIVAC",
            (Counter::Barrier, Arch::Arm64) => "DSB SY",
            (Counter::Wmb, Arch::Arm64) => "DSB ST",
            (Counter::CacheCleanLine, Arch::X86_64) => "CLWB",
            (Counter::CacheInvalLine, Arch::X86_64) => "(none)",
            (Counter::CacheCleanInvalLine, Arch::X86_64) => "CLFLUSHOPT",
            (Counter::Barrier, Arch::X86_64) => "SFENCE",
            (Counter::Wmb, Arch::X86_64) => "SFENCE (wmb)",
            (Counter::CacheCleanLine, Arch::Armv7) => "DCCMVAC",
            (Counter::CacheInvalLine, Arch::Armv7) => "DCIMVAC",
            (Counter::CacheCleanInvalLine, Arch::Armv7) => "DCCIMVAC",
            (Counter::Barrier, Arch::Armv7) => "DSB",
            (Counter::Wmb, Arch::Armv7) => "DSB ST",
            (Counter::BounceCopy, _) => "memcpy",
            (Counter::BounceCopyBytes, _) => "memcpy (bytes)",
            (Counter::SpinLock, _) => "spin_lock_irqsave",
            (Counter::PhysAddrCall, _) => "call __phys_addr",
            (Counter::SmmuTlbiva, _) => "TLBIVA write",
            (Counter::SmmuTlbival, _) => "TLBIVAL write",
            (Counter::SmmuTlbiasid, _) => "TLBIASID write",
            (Counter::SmmuTlbsync, _) => "TLBSYNC write",
            (Counter::SmmuTlbstatusRead, _) => "TLBSTATUS read",
            (Counter::SmmuCmdqBase, _) => "CMDQ_BASE write",
            (Counter::Udelay, _) => "udelay()",
            (Counter::CmdqTlbiNhVa, _) => "CMD_TLBI_NH_VA",
            (Counter::CmdqTlbiNhAsid, _) => "CMD_TLBI_NH_ASID",
            (Counter::CmdqSync, _) => "CMD_SYNC",
            (Counter::CmdqBatch, _) => "CMDQ doorbell",
            (Counter::PgtableMapCall, _) => "map_pages call",
            (Counter::PgtableUnmapCall, _) => "unmap_pages call",
            (Counter::IovaAlloc, _) => "alloc_iova_fast",
            (Counter::IovaRcacheHit, _) => "rcache hit",
            (Counter::IovaFree, _) => "free_iova_fast",
            (Counter::FqQueued, _) => "queue_iova",
            (Counter::FqFlush, _) => "fq_flush_iotlb",
            (Counter::Warn, _) => "WARN",
            (Counter::IovaToPhys, _) => "iova_to_phys walk",
            // Register writes (L2X0_CLEAN_LINE_PA, _INV_LINE_PA, _CLEAN_INV_LINE_PA, _CACHE_SYNC),
            // short enough for the tables' instruction column.
            (Counter::OuterCleanLine, _) => "L2 CLEAN_PA",
            (Counter::OuterInvalLine, _) => "L2 INV_PA",
            (Counter::OuterCleanInvalLine, _) => "L2 CLNINV_PA",
            (Counter::OuterSync, _) => "L2 SYNC",
            (Counter::OuterCleanWay, _) => "L2 CLEAN_WAY",
            (Counter::OuterCleanInvalWay, _) => "L2 CLNINV_WAY",
            (Counter::L1Writeback, _) => "L1 writeback",
            (Counter::L2Writeback, _) => "L2 writeback",
            (Counter::CpuAccess, _) => "load/store",
            (Counter::LineFill, _) => "L1 linefill",
            (Counter::NumaLine, _) => "line move",
        }
    }
}

/// A resolved software-path cost: picoseconds on the modelled CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwCost(pub u64);

impl SwCost {
    /// `n` charges of this cost, as one.
    #[inline]
    pub fn times(self, n: u64) -> SwCost {
        SwCost(self.0.saturating_mul(n))
    }
}

/// The frame a call returns to: what [`Hw::enter`] hands back and [`Hw::leave`] takes.
/// Opaque outside the backend that made it.
#[derive(Clone, Copy, Debug)]
pub struct Caller(pub(crate) u32);

/// The hardware interface.
pub trait Hw {
    /// This backend as a trait object, for generic code (`H: Hw + ?Sized`) handing it on to a
    /// layer that takes `&mut dyn Hw` (a cold path, or one not yet monomorphised).
    fn as_dyn_hw(&mut self) -> &mut dyn Hw;
    /// Enter a kernel function, declared where it is entered ([`crate::frame_id!`]): charges
    /// until the matching [`Hw::leave`] are attributed to it. A nested frame
    /// ([`FrameId::nested`]) enters its callers' frames and then its own, with nothing charged
    /// between. Returns the frame to go back to: a backend that tracks frames as nodes hands
    /// back the caller's node, so leaving is a register move rather than a lookup that waits
    /// for the enter before it.
    fn enter(&mut self, frame: &'static FrameId) -> Caller;
    /// Leave what the [`Hw::enter`] that returned `caller` entered (all of a nested frame).
    fn leave(&mut self, caller: Caller);
    /// A call of a kernel function that calls nothing the model charges: its `cost` charged,
    /// and one `count` counted if given, in a frame named `name` under the current one. Not an
    /// enter and a leave: the current frame never moves, so a leaf is named by its literal (the
    /// Model keys its own cache by the caller's frame and the name's address).
    fn leaf(&mut self, name: &'static str, cost: SwCost, count: Option<Counter>);
    /// `spin_lock(lock)` on a lock the machine's CPUs share: returns once this CPU owns it, the
    /// time it spun (another CPU held it) charged in the lock's `spin_frame`. Its own cost is the
    /// caller's, as the kernel's `_raw_spin_lock` is. A backend with one CPU takes it at once.
    fn spin_lock(&mut self, _lock: &crate::smp::RawSpinLock) {}
    /// An atomic read-modify-write of a line the machine's CPUs share (`cmpxchg`,
    /// `atomic_fetch_andnot`, `atomic_set_release`): after every earlier CPU's access, with the
    /// line's transfer from the CPU that wrote it last. Its instructions are the caller's cost.
    fn atomic(&mut self, _line: &crate::smp::SharedLine) {}
    /// A `cmpxchg` loop on a line the machine's CPUs share, expecting the contents this CPU
    /// read at version `seen` ([`crate::smp::SharedLine::version`]), each retry after `retry` of
    /// the loop's own instructions: returns how many attempts failed. An attempt fails when
    /// another CPU wrote the line between this CPU's read and the line's arrival here
    /// (exclusive); the failed attempt returns the new contents, and the retry fails again if
    /// another CPU's request took the line and wrote it in the meantime, as many times as that
    /// happens. A backend with one CPU always succeeds at once.
    fn cmpxchg(&mut self, line: &crate::smp::SharedLine, _seen: u64, _retry: SwCost) -> u64 {
        self.atomic(line);
        0
    }
    /// A load of a line the machine's CPUs share (`READ_ONCE`): after every earlier CPU's
    /// access, with the line's transfer unless this CPU holds a copy of its contents.
    fn load(&mut self, _line: &crate::smp::SharedLine) {}
    /// Spin on a shared location until another CPU's store changes it (`atomic_cond_read`,
    /// `smp_cond_load`): returns at the wake-up, the time spun charged in `frame`, then the
    /// line's transfer if `line` names it. The caller re-checks its condition and waits again
    /// if it does not hold. A backend with one CPU has no other CPU to wait for: callers only
    /// wait on conditions another CPU sets, so reaching this on such a backend is a bug.
    fn wait_on(
        &mut self,
        _q: &crate::smp::WaitQueue,
        _line: Option<&crate::smp::SharedLine>,
        frame: &'static str,
    ) {
        panic!("{frame}: one CPU waits for a store no other CPU makes");
    }
    /// Wake every CPU spinning on `q` ([`Hw::wait_on`]): this CPU has just made their store.
    fn wake(&mut self, _q: &crate::smp::WaitQueue) {}
    /// `spin_unlock(lock)`: the first CPU waiting for it, if any, owns it from now.
    fn spin_unlock(&mut self, _lock: &crate::smp::RawSpinLock) {}
    /// The CPU the calls run on (`smp_processor_id()`): which copy of per-CPU data
    /// ([`crate::smp::PerCpu`]) they use. 0 on a backend with one CPU.
    fn cpu(&self) -> usize {
        0
    }
    /// Issue `op` on `lines` consecutive cache lines starting at the line containing `first`.
    /// Issue does not wait for completion; a later [`Hw::barrier`] does.
    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64);
    /// A full barrier: returns once every outstanding maintenance operation has completed.
    fn barrier(&mut self);
    /// The kernel's `wmb()` (arm64 `DSB ST`, x86 `SFENCE`): orders the CPU's earlier stores (page
    /// table entries) before its later device writes, and like any DSB waits for whatever
    /// maintenance is still outstanding. Priced apart from [`Hw::barrier`] (`barrier.wmb`).
    fn wmb(&mut self);
    /// The kernel's own instructions along a named path.
    fn sw(&mut self, cost: SwCost);
    /// Resolve a named software cost once, so hot paths do not look names up. Only declared
    /// names can be asked for ([`sw_costs::REGISTRY`]); one the profile does not price is 0.
    fn sw_cost(&self, key: SwKey) -> SwCost;
    /// Cache line size the maintenance loops step by (`CTR_EL0.DminLine`, CPUID on x86).
    fn line_bytes(&self) -> u64;
    /// The by-line loop every cache-maintenance range shares (`dcache_by_line_op` on arm64,
    /// `clflush_cache_range` on x86): enter `frame`, issue `op` on every line the range touches,
    /// wait for completion if asked, leave. A provided method so that, called through `dyn Hw`,
    /// the steps inside dispatch statically; backends have no reason to override it.
    #[inline(always)]
    fn by_line_op(
        &mut self,
        frame: &'static FrameId,
        op: CacheOp,
        start: PhysAddr,
        size: u64,
        complete: bool,
    ) {
        let back = self.enter(frame);
        let lines = lines_spanned(start, size, self.line_bytes());
        self.cache_maint(op, start, lines);
        if complete {
            self.barrier();
        }
        self.leave(back);
    }
    /// Outer cache (ARMv7's PL310): `lines` posted register writes of `op` by physical address,
    /// one per outer-cache line from the line containing `first` (`writel_relaxed` to
    /// `L2X0_{CLEAN,INV,CLEAN_INV}_LINE_PA`). The PL310's by-PA operations are atomic: the
    /// controller finishes one before it accepts the next write, so nothing is left outstanding.
    /// No default body: a backend that cannot reach an outer cache must say so itself.
    fn outer_line_op(&mut self, op: CacheOp, first: PhysAddr, lines: u64);
    /// Outer cache: one write of the `CACHE_SYNC` register, which drains the controller's buffers.
    fn outer_sync(&mut self);
    /// Outer cache: a whole-cache operation by way (`L2X0_CLEAN_WAY` or `L2X0_CLEAN_INV_WAY`
    /// written with the mask of every way, then `cache_wait_way` polling it until the controller
    /// has walked all `lines` lines of those ways). `op` is [`CacheOp::Clean`] or
    /// [`CacheOp::CleanInval`]; no default body, as for [`Hw::outer_line_op`].
    fn outer_way_op(&mut self, op: CacheOp, lines: u64);
    /// Current time on this backend's clock, in picoseconds.
    fn now_ps(&self) -> u64;
    /// The CPU does nothing until `t` ps on this backend's clock (a traced driver's gap
    /// between two calls, another CPU's setup it waits for): its clock moves on to `t`,
    /// nothing is charged or counted, and what the machine does on its own meanwhile (an
    /// outstanding operation completing) is done by then. A later clock stays where it is.
    /// A backend whose clock is not its own to move (the host's real time; the Recorder's)
    /// ignores it.
    fn idle_until(&mut self, _t: u64) {}
    /// A CPU copy of `bytes` between two buffers in memory (swiotlb's bounce `memcpy`). The bytes
    /// themselves are moved by the caller in simulated memory; this charges and counts the copy.
    /// Backends that cannot price a copy ignore it.
    fn copy(&mut self, _bytes: u64) {}
    /// A program (not the kernel's DMA code) reads or writes every byte of
    /// `[start, start + bytes)` through the CPU caches. On a backend with a functional cache model
    /// the lines' states follow (a write leaves them dirty); nothing is charged or counted, since
    /// the program's own time is not the DMA API's. Backends without a cache model ignore it.
    fn cpu_touch(&mut self, _a: cache::Access, _start: PhysAddr, _bytes: u64) {}
    /// A program's loop of `size`-byte loads or stores over `[start, start + bytes)`, to memory
    /// of type `mt`, charged: cached memory through the cache model (fills, writebacks), any
    /// other type one bus transaction per access. Backends that cannot price it ignore it.
    fn cpu_access(
        &mut self,
        _a: cache::Access,
        _mt: memory::MemType,
        _size: u64,
        _start: PhysAddr,
        _bytes: u64,
    ) {
    }
    /// A program's (or the kernel's) memcpy of `bytes` from `src` to `dst`, each given with the
    /// memory type of its mapping, in `size`-byte loads and stores, charged as
    /// [`Hw::cpu_access`] charges a loop, with the two passes interleaved line by line as a
    /// copy loop runs them. Backends that cannot price it ignore it.
    fn cpu_copy(
        &mut self,
        _dst: (memory::MemType, PhysAddr),
        _src: (memory::MemType, PhysAddr),
        _size: u64,
        _bytes: u64,
    ) {
    }
    /// `lines` cache lines homed on the node whose memory holds `home`, each moved to an
    /// initiator (a CPU, a device) on node `from`, one after another: a device ring's
    /// descriptor written by the CPU and read by the device, a completion the device writes
    /// and the CPU polls. Priced by the topology's line transfers (`numa.line_ns`) and counted
    /// ([`Counter::NumaLine`]); backends without a topology ignore it.
    fn numa_line(&mut self, _from: u32, _home: PhysAddr, _lines: u64) {}
    /// Count `n` events of a kind that has no time of its own here (its time was charged through
    /// [`Hw::sw`]): a lock taken, an out-of-line translation call. Backends without counters ignore it.
    fn count(&mut self, _c: Counter, _n: u64) {}
}

/// The device side of the machine: SMMU registers and command queue, priced by the Model,
/// recorded by the Recorder. The host cannot reach an SMMU, so it does not implement it; there
/// are no default bodies, so a backend that does implement it answers every operation itself.
///
/// That the host backend cannot drive an SMMU is a compile-time fact:
///
/// ```compile_fail,E0277
/// use dmasim::hw::DeviceHw;
/// use dmasim::hw::host::Host;
///
/// fn drives_an_smmu(_hw: &mut dyn DeviceHw) {}
///
/// fn try_host(host: &mut Host) {
///     drives_an_smmu(host); // the trait `SmmuPort` is not implemented for `Host`
/// }
/// ```
///
/// The same code with the Model compiles, and the host is a CPU-side backend all the same:
///
/// ```
/// use dmasim::hw::host::Host;
/// use dmasim::hw::model::Model;
/// use dmasim::hw::{DeviceHw, Hw};
///
/// fn drives_an_smmu(_hw: &mut dyn DeviceHw) {}
/// fn drives_the_cpu(_hw: &mut dyn Hw) {}
///
/// fn try_model(model: &mut Model) {
///     drives_an_smmu(model);
/// }
///
/// fn try_host(host: &mut Host) {
///     drives_the_cpu(host);
/// }
/// ```
pub trait SmmuPort {
    /// A posted write of `val` to a device register: returns once the CPU has issued it; the
    /// device acts on it later.
    fn mmio_write(&mut self, reg: MmioReg, val: u64);
    /// A read of a device register: the CPU waits for the device's answer.
    fn mmio_read(&mut self, reg: MmioReg) -> u64;
    /// `udelay(us)`: busy-wait for `us` microseconds.
    fn udelay(&mut self, us: u64);
    /// SMMUv3: the CPU stores `n` commands into the command queue's memory (their line
    /// fetched from its home first). The SMMU sees nothing until a doorbell.
    fn smmu_cmdq_write(&mut self, n: u64);
    /// SMMUv3: the producer-index write that publishes `cmds` (the queue's commands since the
    /// last doorbell, in order): the SMMU fetches and runs them. The completion time of each
    /// `CMD_SYNC` among them is pushed to `sync_done`, in order. Does not wait.
    fn smmu_cmdq_doorbell(&mut self, cmds: &[SmmuCmdKind], sync_done: &mut Vec<u64>);
    /// SMMUv3: poll until a `CMD_SYNC` that completes at `done` is seen complete (its MSI
    /// payload read back from the queue's home node).
    fn smmu_cmdq_poll(&mut self, done: u64);
}

/// A backend that drives both the CPU and the devices: what the iommu layer and every
/// [`crate::dma::DmaMapOps`] take. Passed where only the CPU side is wanted, a `&mut dyn DeviceHw`
/// upcasts to `&mut dyn Hw`.
pub trait DeviceHw: Hw + SmmuPort {}

impl<T: Hw + SmmuPort + ?Sized> DeviceHw for T {}

/// Number of lines a maintenance loop touches for `[start, start + size)` with `line`-byte lines.
/// The arch layer uses this to step exactly as `dcache_by_line_op` does: from the line containing
/// `start` to the line containing the last byte.
pub fn lines_spanned(start: PhysAddr, size: u64, line: u64) -> u64 {
    debug_assert!(line.is_power_of_two());
    if size == 0 {
        return 0;
    }
    // Line sizes are powers of two (profiles are checked), so shift rather than divide: this runs
    // once per region on the hottest path.
    // Counted from the start's offset in its line: the same count as (last line - first line + 1)
    // without the end address, so nothing to overflow short of a size near 2^64.
    // A power of two's trailing zeros are below 64: the wrapping shift is the plain one.
    let sh = line.trailing_zeros();
    let off = start.0 & (line - 1);
    (off + (size - 1)).wrapping_shr(sh) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use test_support::{cmdq_issue, cmdq_wait};

    /// The recorder enters a nested frame's callers and then the frame, and one `leave` leaves
    /// them all: the same stacks the Model's ledger builds.
    #[test]
    fn a_nested_frame_is_its_callers_then_itself_on_any_backend() {
        static DEEP: FrameId = FrameId::nested(&["a", "b"], "c");
        let mut r = recorder::Recorder::new(64);
        let mut m = model::Model::new(model::ModelParams::default());
        let (rt, mt) = (
            r.enter(crate::frame_id!("top")),
            m.enter(crate::frame_id!("top")),
        );
        let (rb, mb) = (r.enter(&DEEP), m.enter(&DEEP));
        r.count(Counter::Barrier, 1);
        m.count(Counter::Barrier, 1);
        r.leave(rb);
        m.leave(mb);
        r.count(Counter::Wmb, 1);
        m.count(Counter::Wmb, 1);
        r.leave(rt);
        m.leave(mt);
        assert_eq!(
            r.frames,
            ["top", "top > a", "top > a > b", "top > a > b > c"]
        );
        assert_eq!(r.count_at("top > a > b > c", Counter::Barrier), 1);
        assert_eq!(r.count_at("top", Counter::Wmb), 1);
        let stacks: Vec<_> = m
            .ledger()
            .stacks()
            .into_iter()
            .map(|s| (s.stack.join(" > "), s.counts[Counter::Barrier as usize]))
            .collect();
        assert_eq!(stacks, [("top".into(), 0), ("top > a > b > c".into(), 1)]);
    }

    #[test]
    fn the_model_and_the_recorder_drive_devices() {
        fn device_backend<T: DeviceHw>(hw: &mut T) -> u64 {
            // A sync with nothing queued: both backends must answer it themselves (no defaults).
            let done = cmdq_issue(hw, &[SmmuCmdKind::Sync]);
            cmdq_wait(hw, done);
            hw.mmio_read(MmioReg::SmmuTlbstatus)
        }
        let mut m = model::Model::new(model::ModelParams::default());
        let mut r = recorder::Recorder::new(64);
        assert_eq!(device_backend(&mut r), 0);
        assert_eq!(r.cmdq, vec![vec![SmmuCmdKind::Sync]]);
        assert_eq!(device_backend(&mut m), 0);
    }

    #[test]
    fn lines_spanned_counts_partial_lines() {
        assert_eq!(lines_spanned(PhysAddr(0), 4096, 64), 64);
        assert_eq!(lines_spanned(PhysAddr(1), 4096, 64), 65);
        assert_eq!(lines_spanned(PhysAddr(63), 2, 64), 2);
        assert_eq!(lines_spanned(PhysAddr(0), 0, 64), 0);
        assert_eq!(lines_spanned(PhysAddr(64), 1, 64), 1);
        // Against last line - first line + 1, up to the top of the address space.
        for (start, size) in [
            (0x1234_5678u64, 10_000u64),
            (u64::MAX - 63, 64),
            (u64::MAX - 100, 101),
        ] {
            let (first, last) = (start / 64, (start + (size - 1)) / 64);
            assert_eq!(lines_spanned(PhysAddr(start), size, 64), last - first + 1);
        }
    }
}
