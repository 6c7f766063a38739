//! A backend that records what the stack asked of the hardware, for exact-count tests.
//!
//! Kernel counterpart: none. It charges no time; it keeps the sequence of cache operations (merged
//! when consecutive calls continue the same run) and counts barriers, so a test can assert the
//! operations an algorithm issued, instruction class by instruction class. SMMU register accesses,
//! `udelay`s and command-queue submissions are kept in order; `TLBSTATUS` reads answer "idle"
//! unless a test asks for a number of busy polls per sync.

use super::{CacheOp, Hw, SwCost};
use super::{Counter, MmioReg, SMMU_TLBSTATUS_GSACTIVE, SmmuCmdKind};
use crate::types::PhysAddr;

#[derive(Debug, Default, Clone)]
pub struct Recorder {
    line: u64,
    /// (op, first line address, line count), one per `cache_maint` call.
    pub ops: Vec<(CacheOp, u64, u64)>,
    pub barriers: u64,
    /// Every frame entered, in order, as full stacks.
    pub frames: Vec<String>,
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
}

impl Recorder {
    pub fn new(line_bytes: u64) -> Recorder {
        Recorder {
            line: line_bytes,
            ..Recorder::default()
        }
    }

    /// How many times an SMMU operation was issued (register writes and reads, commands,
    /// doorbells, delays).
    pub fn count(&self, c: Counter) -> u64 {
        let reg = |r: MmioReg| self.mmio.iter().filter(|&&m| m == r).count() as u64;
        let cmd = |k: SmmuCmdKind| self.cmdq.iter().flatten().filter(|&&m| m == k).count() as u64;
        match c {
            Counter::SmmuTlbiva => reg(MmioReg::SmmuTlbiva),
            Counter::SmmuTlbival => reg(MmioReg::SmmuTlbival),
            Counter::SmmuTlbiasid => reg(MmioReg::SmmuTlbiasid),
            Counter::SmmuTlbsync => reg(MmioReg::SmmuTlbsync),
            Counter::SmmuTlbstatusRead => reg(MmioReg::SmmuTlbstatus),
            Counter::Udelay => self.udelays.len() as u64,
            Counter::CmdqTlbiNhVa => cmd(SmmuCmdKind::TlbiNhVa),
            Counter::CmdqTlbiNhAsid => cmd(SmmuCmdKind::TlbiNhAsid),
            Counter::CmdqSync => cmd(SmmuCmdKind::Sync),
            Counter::CmdqBatch => self.cmdq.len() as u64,
            Counter::Barrier => self.barriers,
            Counter::CacheCleanLine => self.lines(CacheOp::Clean),
            Counter::CacheInvalLine => self.lines(CacheOp::Inval),
            Counter::CacheCleanInvalLine => self.lines(CacheOp::CleanInval),
        }
    }

    /// Total lines issued with `op`.
    pub fn lines(&self, op: CacheOp) -> u64 {
        self.ops.iter().filter(|o| o.0 == op).map(|o| o.2).sum()
    }
}

impl Hw for Recorder {
    fn enter(&mut self, frame: &'static str) {
        self.stack.push(frame);
        self.frames.push(self.stack.join(" > "));
    }
    fn leave(&mut self) {
        self.stack.pop();
    }
    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines > 0 {
            self.ops.push((op, first.0 & !(self.line - 1), lines));
        }
    }
    fn barrier(&mut self) {
        self.barriers += 1;
    }
    fn sw(&mut self, _cost: SwCost) {}
    fn sw_cost(&self, _name: &str) -> SwCost {
        SwCost(0)
    }
    fn line_bytes(&self) -> u64 {
        self.line
    }
    fn now_ps(&self) -> u64 {
        0
    }
    fn mmio_write(&mut self, reg: MmioReg, _val: u64) {
        if reg == MmioReg::SmmuTlbsync {
            self.busy_left = self.busy_polls_per_sync;
        }
        self.mmio.push(reg);
    }
    fn mmio_read(&mut self, reg: MmioReg) -> u64 {
        self.mmio.push(reg);
        if reg == MmioReg::SmmuTlbstatus && self.busy_left > 0 {
            self.busy_left -= 1;
            return SMMU_TLBSTATUS_GSACTIVE;
        }
        0
    }
    fn udelay(&mut self, us: u64) {
        self.udelays.push(us);
    }
    fn smmu_cmdq_issue(&mut self, cmds: &[SmmuCmdKind]) {
        self.cmdq.push(cmds.to_vec());
    }
}
