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
//! The device operations have default implementations that do nothing (a read returns 0, "idle"),
//! so a backend that cannot reach an SMMU still compiles and answers; the Model charges them from
//! the profile's optional `[smmu]` section.
//!
//! Invariants: functional code never computes a time. It calls [`Hw`]; a backend decides what an
//! operation costs ([`model::Model`]) or performs it ([`host`]). Every charge lands on the call
//! stack that was current when it was made, so reports can break time down by kernel function.

pub mod host;
pub mod model;
pub mod recorder;

#[cfg(test)]
pub(crate) mod test_support {
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
}

impl MmioReg {
    pub fn counter(self) -> Counter {
        match self {
            MmioReg::SmmuTlbiva => Counter::SmmuTlbiva,
            MmioReg::SmmuTlbival => Counter::SmmuTlbival,
            MmioReg::SmmuTlbiasid => Counter::SmmuTlbiasid,
            MmioReg::SmmuTlbsync => Counter::SmmuTlbsync,
            MmioReg::SmmuTlbstatus => Counter::SmmuTlbstatusRead,
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
    /// One bounce copy (`memcpy` in `swiotlb_bounce`), whatever its length.
    BounceCopy,
    /// Bytes moved by bounce copies.
    BounceCopyBytes,
    /// A spin lock taken (`spin_lock_irqsave` of the swiotlb pool or area lock).
    SpinLock,
    /// An out-of-line `__phys_addr` call (x86-64 `virt_to_phys` before the 3.7 swiotlb series).
    PhysAddrCall,
    SmmuTlbiva,
    SmmuTlbival,
    SmmuTlbiasid,
    SmmuTlbsync,
    SmmuTlbstatusRead,
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
}

impl Counter {
    pub const ALL: [Counter; 20] = [
        Counter::CacheCleanLine,
        Counter::CacheInvalLine,
        Counter::CacheCleanInvalLine,
        Counter::Barrier,
        Counter::BounceCopy,
        Counter::BounceCopyBytes,
        Counter::SpinLock,
        Counter::PhysAddrCall,
        Counter::SmmuTlbiva,
        Counter::SmmuTlbival,
        Counter::SmmuTlbiasid,
        Counter::SmmuTlbsync,
        Counter::SmmuTlbstatusRead,
        Counter::Udelay,
        Counter::CmdqTlbiNhVa,
        Counter::CmdqTlbiNhAsid,
        Counter::CmdqSync,
        Counter::CmdqBatch,
        Counter::PgtableMapCall,
        Counter::PgtableUnmapCall,
    ];
    pub const N: usize = Counter::ALL.len();

    /// Stable name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Counter::CacheCleanLine => "cache_clean_line",
            Counter::CacheInvalLine => "cache_inval_line",
            Counter::CacheCleanInvalLine => "cache_clean_inval_line",
            Counter::Barrier => "barrier",
            Counter::BounceCopy => "bounce_copy",
            Counter::BounceCopyBytes => "bounce_copy_bytes",
            Counter::SpinLock => "spin_lock",
            Counter::PhysAddrCall => "phys_addr_call",
            Counter::SmmuTlbiva => "smmu_tlbiva",
            Counter::SmmuTlbival => "smmu_tlbival",
            Counter::SmmuTlbiasid => "smmu_tlbiasid",
            Counter::SmmuTlbsync => "smmu_tlbsync",
            Counter::SmmuTlbstatusRead => "smmu_tlbstatus_read",
            Counter::Udelay => "udelay",
            Counter::CmdqTlbiNhVa => "cmdq_tlbi_nh_va",
            Counter::CmdqTlbiNhAsid => "cmdq_tlbi_nh_asid",
            Counter::CmdqSync => "cmdq_sync",
            Counter::CmdqBatch => "cmdq_batch",
            Counter::PgtableMapCall => "pgtable_map_call",
            Counter::PgtableUnmapCall => "pgtable_unmap_call",
        }
    }

    /// The instruction this count stands for on `arch`, for human-readable tables.
    pub fn instruction(self, arch: Arch) -> &'static str {
        match (self, arch) {
            (Counter::CacheCleanLine, Arch::Arm64) => "DC CVAC",
            (Counter::CacheInvalLine, Arch::Arm64) => "DC IVAC",
            (Counter::CacheCleanInvalLine, Arch::Arm64) => "DC CIVAC",
            (Counter::Barrier, Arch::Arm64) => "DSB SY",
            (Counter::CacheCleanLine, Arch::X86_64) => "CLWB",
            (Counter::CacheInvalLine, Arch::X86_64) => "(none)",
            (Counter::CacheCleanInvalLine, Arch::X86_64) => "CLFLUSHOPT",
            (Counter::Barrier, Arch::X86_64) => "SFENCE",
            (Counter::BounceCopy, _) => "memcpy",
            (Counter::BounceCopyBytes, _) => "memcpy (bytes)",
            (Counter::SpinLock, _) => "spin_lock_irqsave",
            (Counter::PhysAddrCall, _) => "call __phys_addr",
            (Counter::SmmuTlbiva, _) => "TLBIVA write",
            (Counter::SmmuTlbival, _) => "TLBIVAL write",
            (Counter::SmmuTlbiasid, _) => "TLBIASID write",
            (Counter::SmmuTlbsync, _) => "TLBSYNC write",
            (Counter::SmmuTlbstatusRead, _) => "TLBSTATUS read",
            (Counter::Udelay, _) => "udelay()",
            (Counter::CmdqTlbiNhVa, _) => "CMD_TLBI_NH_VA",
            (Counter::CmdqTlbiNhAsid, _) => "CMD_TLBI_NH_ASID",
            (Counter::CmdqSync, _) => "CMD_SYNC",
            (Counter::CmdqBatch, _) => "CMDQ doorbell",
            (Counter::PgtableMapCall, _) => "map_pages call",
            (Counter::PgtableUnmapCall, _) => "unmap_pages call",
        }
    }
}

/// A resolved software-path cost: picoseconds on the modelled CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwCost(pub u64);

/// The hardware interface.
pub trait Hw {
    /// Enter a kernel function; charges until the matching [`Hw::leave`] are attributed to it.
    fn enter(&mut self, frame: &'static str);
    fn leave(&mut self);
    /// Issue `op` on `lines` consecutive cache lines starting at the line containing `first`.
    /// Issue does not wait for completion; a later [`Hw::barrier`] does.
    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64);
    /// A full barrier: returns once every outstanding maintenance operation has completed.
    fn barrier(&mut self);
    /// The kernel's own instructions along a named path.
    fn sw(&mut self, cost: SwCost);
    /// Resolve a named software cost once, so hot paths do not look names up.
    fn sw_cost(&self, name: &str) -> SwCost;
    /// Cache line size the maintenance loops step by (`CTR_EL0.DminLine`, CPUID on x86).
    fn line_bytes(&self) -> u64;
    /// The by-line loop every cache-maintenance range shares (`dcache_by_line_op` on arm64,
    /// `clflush_cache_range` on x86): enter `frame`, issue `op` on every line the range touches,
    /// wait for completion if asked, leave. A provided method so that, called through `dyn Hw`,
    /// the steps inside dispatch statically; backends have no reason to override it.
    fn by_line_op(
        &mut self,
        frame: &'static str,
        op: CacheOp,
        start: PhysAddr,
        size: u64,
        complete: bool,
    ) {
        self.enter(frame);
        let lines = lines_spanned(start, size, self.line_bytes());
        self.cache_maint(op, start, lines);
        if complete {
            self.barrier();
        }
        self.leave();
    }
    /// Current time on this backend's clock, in picoseconds.
    fn now_ps(&self) -> u64;
    /// A CPU copy of `bytes` between two buffers in memory (swiotlb's bounce `memcpy`). The bytes
    /// themselves are moved by the caller in simulated memory; this charges and counts the copy.
    /// Backends that cannot price a copy ignore it.
    fn copy(&mut self, _bytes: u64) {}
    /// Count `n` events of a kind that has no time of its own here (its time was charged through
    /// [`Hw::sw`]): a lock taken, an out-of-line translation call. Backends without counters ignore it.
    fn count(&mut self, _c: Counter, _n: u64) {}

    /// A posted write of `val` to a device register: returns once the CPU has issued it; the
    /// device acts on it later.
    fn mmio_write(&mut self, _reg: MmioReg, _val: u64) {}
    /// A read of a device register: the CPU waits for the device's answer. Default: 0 (idle).
    fn mmio_read(&mut self, _reg: MmioReg) -> u64 {
        0
    }
    /// `udelay(us)`: busy-wait for `us` microseconds.
    fn udelay(&mut self, _us: u64) {}
    /// SMMUv3: write `cmds` into the command queue and publish them with one producer-index
    /// update (`arm_smmu_cmdq_issue_cmdlist`). Does not wait.
    fn smmu_cmdq_issue(&mut self, _cmds: &[SmmuCmdKind]) {}
    /// SMMUv3: wait until the most recently issued `CMD_SYNC` has completed.
    fn smmu_cmdq_wait_sync(&mut self) {}
}

/// One node of the call tree: a kernel function reached by one particular path. `repr(C)` with
/// the fields every enter/leave/charge touches first, so the hot path stays in one cache line.
#[derive(Clone, Debug)]
#[repr(C)]
struct Node {
    /// The child entered last, checked first: a loop enters the same callee over and over.
    hot: Option<(&'static str, u32)>,
    self_ps: u64,
    /// Time this frame spent stalled in a barrier, reported as a child `(wait for completion)`.
    /// Kept here rather than as a real child so a barrier costs no frame switch.
    wait_ps: u64,
    parent: u32,
    name: &'static str,
    children: Vec<u32>,
    counts: [u64; Counter::N],
}

/// Name of the pseudo-frame that reports a frame's barrier stalls.
pub static WAIT_FRAME: &str = "(wait for completion)";

/// Charges attributed by call stack. Interned as a tree so that entering a frame is a short scan
/// of the current node's children, cheap enough for a per-sg-entry hot path.
#[derive(Clone, Debug)]
pub struct Ledger {
    nodes: Vec<Node>,
    cur: u32,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            nodes: vec![Node {
                name: "",
                parent: 0,
                hot: None,
                children: Vec::new(),
                self_ps: 0,
                wait_ps: 0,
                counts: [0; Counter::N],
            }],
            cur: 0,
        }
    }
}

/// One row of a breakdown: a full call stack, the time spent in it (excluding its callees) and
/// the operations it issued.
#[derive(Clone, Debug, PartialEq)]
pub struct StackCharge {
    pub stack: Vec<&'static str>,
    pub self_ps: u64,
    pub counts: [u64; Counter::N],
}

impl StackCharge {
    pub fn stack_string(&self) -> String {
        self.stack.join(" > ")
    }
}

impl Ledger {
    #[inline]
    pub fn enter(&mut self, frame: &'static str) {
        let cur = self.cur as usize;
        if let Some((name, id)) = self.nodes[cur].hot
            && std::ptr::eq(name, frame)
        {
            self.cur = id;
            return;
        }
        // Frames are string literals, so the same name is almost always the same pointer: try
        // that first, and compare contents only before creating a node.
        let children = &self.nodes[cur].children;
        let hit = children
            .iter()
            .copied()
            .find(|&c| std::ptr::eq(self.nodes[c as usize].name, frame))
            .or_else(|| {
                children
                    .iter()
                    .copied()
                    .find(|&c| self.nodes[c as usize].name == frame)
            });
        if let Some(c) = hit {
            self.nodes[cur].hot = Some((frame, c));
            self.cur = c;
            return;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            name: frame,
            parent: self.cur,
            hot: None,
            children: Vec::new(),
            self_ps: 0,
            wait_ps: 0,
            counts: [0; Counter::N],
        });
        self.nodes[cur].children.push(id);
        self.nodes[cur].hot = Some((frame, id));
        self.cur = id;
    }

    #[inline]
    pub fn leave(&mut self) {
        debug_assert!(self.cur != 0, "leave() without enter()");
        self.cur = self.nodes[self.cur as usize].parent;
    }

    pub fn depth_is_zero(&self) -> bool {
        self.cur == 0
    }

    #[inline]
    pub fn charge(&mut self, ps: u64) {
        self.nodes[self.cur as usize].self_ps += ps;
    }

    /// A barrier in the current frame: its stall for completions (to the wait pseudo-frame), its
    /// own cost, and its count, touching the node once.
    #[inline]
    pub fn barrier(&mut self, wait_ps: u64, cost_ps: u64) {
        let n = &mut self.nodes[self.cur as usize];
        n.wait_ps += wait_ps;
        n.self_ps += cost_ps;
        n.counts[Counter::Barrier as usize] += 1;
    }

    /// Charge a barrier's stall for completions to the current frame's wait pseudo-frame.
    #[inline]
    pub fn charge_wait(&mut self, ps: u64) {
        self.nodes[self.cur as usize].wait_ps += ps;
    }

    #[inline]
    pub fn count(&mut self, c: Counter, n: u64) {
        self.nodes[self.cur as usize].counts[c as usize] += n;
    }

    /// Totals of every counter over the whole tree.
    pub fn totals(&self) -> [u64; Counter::N] {
        let mut t = [0; Counter::N];
        for n in &self.nodes {
            for (a, b) in t.iter_mut().zip(n.counts.iter()) {
                *a += b;
            }
        }
        t
    }

    pub fn total_ps(&self) -> u64 {
        self.nodes.iter().map(|n| n.self_ps + n.wait_ps).sum()
    }

    /// Every stack that was charged time or counted an operation, in a stable order (depth-first,
    /// children in the order first entered).
    pub fn stacks(&self) -> Vec<StackCharge> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        self.walk(0, &mut path, &mut out);
        out
    }

    fn walk(&self, id: u32, path: &mut Vec<&'static str>, out: &mut Vec<StackCharge>) {
        let n = &self.nodes[id as usize];
        if id != 0 {
            path.push(n.name);
            if n.self_ps > 0 || n.counts.iter().any(|&c| c > 0) {
                out.push(StackCharge {
                    stack: path.clone(),
                    self_ps: n.self_ps,
                    counts: n.counts,
                });
            }
            if n.wait_ps > 0 {
                let mut stack = path.clone();
                stack.push(WAIT_FRAME);
                out.push(StackCharge {
                    stack,
                    self_ps: n.wait_ps,
                    counts: [0; Counter::N],
                });
            }
        }
        for &c in &n.children {
            self.walk(c, path, out);
        }
        if id != 0 {
            path.pop();
        }
    }

    /// Forget every charge and count but keep the interned tree (so a warm-up run does not count).
    pub fn clear(&mut self) {
        for n in &mut self.nodes {
            n.self_ps = 0;
            n.wait_ps = 0;
            n.counts = [0; Counter::N];
        }
    }
}

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
    let sh = line.trailing_zeros();
    let first = start.0 >> sh;
    let last = (start.0 + size - 1) >> sh;
    last - first + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_attributes_by_stack() {
        let mut l = Ledger::default();
        l.enter("a");
        l.charge(5);
        l.enter("b");
        l.charge(7);
        l.count(Counter::Barrier, 1);
        l.leave();
        l.enter("b");
        l.charge(1);
        l.leave();
        l.leave();
        assert!(l.depth_is_zero());
        let s = l.stacks();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].stack_string(), "a");
        assert_eq!(s[0].self_ps, 5);
        assert_eq!(s[1].stack_string(), "a > b");
        assert_eq!(s[1].self_ps, 8);
        assert_eq!(l.totals()[Counter::Barrier as usize], 1);
        assert_eq!(l.total_ps(), 13);
        l.clear();
        assert_eq!(l.total_ps(), 0);
        assert!(l.stacks().is_empty());
    }

    #[test]
    fn lines_spanned_counts_partial_lines() {
        assert_eq!(lines_spanned(PhysAddr(0), 4096, 64), 64);
        assert_eq!(lines_spanned(PhysAddr(1), 4096, 64), 65);
        assert_eq!(lines_spanned(PhysAddr(63), 2, 64), 2);
        assert_eq!(lines_spanned(PhysAddr(0), 0, 64), 0);
        assert_eq!(lines_spanned(PhysAddr(64), 1, 64), 1);
    }
}
