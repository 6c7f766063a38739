//! A backend that records what the stack asked of the hardware, for exact-count tests.
//!
//! Kernel counterpart: none. It charges no time; it keeps the sequence of cache operations (merged
//! when consecutive calls continue the same run) and counts barriers, copies and counted events (with
//! the stack each was counted on), so a test can assert the operations an algorithm issued,
//! instruction class by instruction class and call path by call path.

use super::{CacheOp, Counter, Hw, SwCost};
use crate::types::PhysAddr;

#[derive(Debug, Default, Clone)]
pub struct Recorder {
    line: u64,
    /// (op, first line address, line count), one per `cache_maint` call.
    pub ops: Vec<(CacheOp, u64, u64)>,
    pub barriers: u64,
    /// Every frame entered, in order, as full stacks.
    pub frames: Vec<String>,
    /// Length of every bounce copy, in order.
    pub copies: Vec<u64>,
    /// Totals of every counter.
    pub counts: [u64; Counter::N],
    /// Every counted event as (stack, counter, n), in order.
    pub counted: Vec<(String, Counter, u64)>,
    /// Every event in order, for ordering assertions: `maint`, `barrier`, `copy`, or a counter name.
    pub events: Vec<&'static str>,
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

    /// Forget everything recorded so far (the stack must be empty).
    pub fn reset(&mut self) {
        *self = Recorder::new(self.line);
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
            self.events.push("maint");
        }
    }
    fn barrier(&mut self) {
        self.barriers += 1;
        self.counts[Counter::Barrier as usize] += 1;
        self.events.push("barrier");
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
