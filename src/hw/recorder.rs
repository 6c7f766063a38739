//! A backend that records what the stack asked of the hardware, for exact-count tests.
//!
//! Kernel counterpart: none. It charges no time; it keeps the sequence of cache operations (merged
//! when consecutive calls continue the same run) and counts barriers, copies and counted events (with
//! the stack each was counted on), so a test can assert the operations an algorithm issued,
//! instruction class by instruction class and call path by call path. SMMU register accesses,
//! `udelay`s and command-queue submissions are kept in order and counted; `TLBSTATUS` reads answer
//! "idle" unless a test asks for a number of busy polls per sync. It implements [`SmmuPort`] as well
//! as [`Hw`], so it can stand in for the machine under the iommu layer.

use super::{CacheOp, Caller, Counter, FrameId, Hw, SwCost, SwKey};
use super::{MmioReg, SMMU_TLBSTATUS_GSACTIVE, SmmuCmdKind, SmmuPort};
use crate::types::PhysAddr;

#[derive(Debug, Clone)]
pub struct Recorder {
    line: u64,
    /// (op, first line address, line count), one per `cache_maint` call.
    pub ops: Vec<(CacheOp, u64, u64)>,
    /// Outer-cache register writes as (op, first line address, line count), one per
    /// `outer_line_op` call (outer lines are 32 bytes, the PL310's).
    pub outer_ops: Vec<(CacheOp, u64, u64)>,
    /// Outer-cache operations by way, as (op, lines walked), one per `outer_way_op` call.
    pub outer_ways: Vec<(CacheOp, u64)>,
    pub barriers: u64,
    /// Every frame entered, in order, as full stacks.
    pub frames: Vec<String>,
    /// Length of every bounce copy, in order.
    pub copies: Vec<u64>,
    /// Totals of every counter.
    pub counts: [u64; Counter::N],
    /// Every counted event as (stack, counter, n), in order.
    pub counted: Vec<(String, Counter, u64)>,
    /// Every event in order, for ordering assertions: `maint`, `barrier`, `wmb`, `copy`,
    /// `outer_maint`, `outer_sync`, or a counter name (SMMU register writes and reads by theirs).
    pub events: Vec<&'static str>,
    stack: Vec<&'static str>,
    /// Device register writes and reads, in order.
    pub mmio: Vec<MmioReg>,
    /// SMMUv3 submissions, one inner list per doorbell.
    pub cmdq: Vec<Vec<SmmuCmdKind>>,
    /// `udelay` arguments, in order.
    pub udelays: Vec<u64>,
    /// How many `TLBSTATUS` reads after each `TLBSYNC` answer "still active" (0: the first read
    /// already sees completion).
    pub busy_polls_per_sync: u64,
    busy_left: u64,
    /// The CPU the calls run on ([`Hw::cpu`]).
    pub cpu: usize,
}

impl Recorder {
    pub fn new(line_bytes: u64) -> Recorder {
        Recorder {
            line: line_bytes,
            cpu: 0,
            ops: Vec::new(),
            outer_ops: Vec::new(),
            outer_ways: Vec::new(),
            barriers: 0,
            frames: Vec::new(),
            copies: Vec::new(),
            counts: [0; Counter::N],
            counted: Vec::new(),
            events: Vec::new(),
            stack: Vec::new(),
            mmio: Vec::new(),
            cmdq: Vec::new(),
            udelays: Vec::new(),
            busy_polls_per_sync: 0,
            busy_left: 0,
        }
    }

    /// Total lines issued with `op`.
    pub fn lines(&self, op: CacheOp) -> u64 {
        self.ops.iter().filter(|o| o.0 == op).map(|o| o.2).sum()
    }

    pub fn count_of(&self, c: Counter) -> u64 {
        self.counts[c as usize]
    }

    /// Events of counter `c` counted on exactly the stack `stack` (frames joined by ` > `).
    pub fn count_at(&self, stack: &str, c: Counter) -> u64 {
        self.counted
            .iter()
            .filter(|(s, k, _)| s == stack && *k == c)
            .map(|e| e.2)
            .sum()
    }

    /// The next calls run on CPU `cpu`.
    pub fn as_cpu(&mut self, cpu: usize) -> &mut Recorder {
        self.cpu = cpu;
        self
    }

    /// Forget everything recorded so far (the stack must be empty).
    pub fn reset(&mut self) {
        *self = Recorder::new(self.line);
    }
}

impl Hw for Recorder {
    #[inline]
    fn as_dyn_hw(&mut self) -> &mut dyn Hw {
        self
    }

    fn cpu(&self) -> usize {
        self.cpu
    }

    fn enter(&mut self, frame: &'static FrameId) -> Caller {
        let caller = Caller(self.stack.len() as u32);
        for name in frame.outer().iter().chain([&frame.name()]) {
            self.stack.push(name);
            self.frames.push(self.stack.join(" > "));
        }
        caller
    }
    fn leaf(&mut self, name: &'static str, cost: SwCost, count: Option<Counter>) {
        self.stack.push(name);
        self.frames.push(self.stack.join(" > "));
        self.sw(cost);
        if let Some(c) = count {
            self.count(c, 1);
        }
        self.stack.pop();
    }
    fn leave(&mut self, caller: Caller) {
        debug_assert!(
            self.stack.len() > caller.0 as usize,
            "leave() without enter()"
        );
        self.stack.truncate(caller.0 as usize);
    }
    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines > 0 {
            self.ops.push((op, first.0 & !(self.line - 1), lines));
            self.events.push("maint");
        }
    }
    fn barrier(&mut self) {
        self.barriers += 1;
        self.counts[Counter::Barrier as usize] += 1;
        self.events.push("barrier");
    }
    fn wmb(&mut self) {
        self.counts[Counter::Wmb as usize] += 1;
        self.events.push("wmb");
    }
    fn sw(&mut self, _cost: SwCost) {}
    fn sw_cost(&self, _key: SwKey) -> SwCost {
        SwCost(0)
    }
    fn line_bytes(&self) -> u64 {
        self.line
    }
    fn outer_line_op(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines > 0 {
            self.outer_ops.push((op, first.0 & !31, lines));
            self.counts[op.outer_counter() as usize] += lines;
            self.events.push("outer_maint");
        }
    }
    fn outer_way_op(&mut self, op: CacheOp, lines: u64) {
        self.outer_ways.push((op, lines));
        if let Some(c) = op.outer_way_counter() {
            self.counts[c as usize] += 1;
        }
        self.events.push("outer_way");
    }
    fn outer_sync(&mut self) {
        self.counts[Counter::OuterSync as usize] += 1;
        self.events.push("outer_sync");
    }
    fn now_ps(&self) -> u64 {
        0
    }
    fn copy(&mut self, bytes: u64) {
        self.copies.push(bytes);
        self.counts[Counter::BounceCopy as usize] += 1;
        self.counts[Counter::BounceCopyBytes as usize] += bytes;
        self.events.push("copy");
    }
    fn count(&mut self, c: Counter, n: u64) {
        self.counts[c as usize] += n;
        self.counted.push((self.stack.join(" > "), c, n));
        self.events.push(c.name());
    }
}

impl SmmuPort for Recorder {
    fn mmio_write(&mut self, reg: MmioReg, _val: u64) {
        if reg == MmioReg::SmmuTlbsync {
            self.busy_left = self.busy_polls_per_sync;
        }
        self.mmio.push(reg);
        self.counts[reg.counter() as usize] += 1;
        self.events.push(reg.counter().name());
    }
    fn mmio_read(&mut self, reg: MmioReg) -> u64 {
        self.mmio.push(reg);
        self.counts[reg.counter() as usize] += 1;
        self.events.push(reg.counter().name());
        if reg == MmioReg::SmmuTlbstatus && self.busy_left > 0 {
            self.busy_left -= 1;
            return SMMU_TLBSTATUS_GSACTIVE;
        }
        0
    }
    fn udelay(&mut self, us: u64) {
        self.udelays.push(us);
        self.counts[Counter::Udelay as usize] += 1;
    }
    fn smmu_cmdq_write(&mut self, _n: u64) {
        // Recorded when published.
    }
    fn smmu_cmdq_doorbell(&mut self, cmds: &[SmmuCmdKind], sync_done: &mut Vec<u64>) {
        for c in cmds {
            self.counts[c.counter() as usize] += 1;
            if *c == SmmuCmdKind::Sync {
                // No time passes here: every sync is complete at once.
                sync_done.push(0);
            }
        }
        self.counts[Counter::CmdqBatch as usize] += 1;
        self.cmdq.push(cmds.to_vec());
    }
    fn smmu_cmdq_poll(&mut self, _done: u64) {
        // Nothing to wait for: no time passes here.
    }
}
