//! A backend that records what the stack asked of the hardware, for exact-count tests.
//!
//! Kernel counterpart: none. It charges no time; it keeps the sequence of cache operations (merged
//! when consecutive calls continue the same run) and counts barriers, so a test can assert the
//! operations an algorithm issued, instruction class by instruction class.

use super::{CacheOp, Hw, SwCost};
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
}

impl Recorder {
    pub fn new(line_bytes: u64) -> Recorder {
        Recorder {
            line: line_bytes,
            ..Recorder::default()
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
}
