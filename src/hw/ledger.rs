//! The call-stack ledger: every charge and count, attributed to the kernel function being run.
//!
//! Kernel counterpart: none — this is what `perf` would attribute by call chain, kept exactly.
//! The Model backend charges through it; runners read it back as rows
//! ([`crate::hw::calls::stack_rows`]) after timing their calls with
//! [`crate::hw::calls::CallTimer`].
//!
//! Invariants: frames are interned as a tree, so entering a frame is a short scan of the current
//! node's children (cheap enough for a per-sg-entry hot path); every charge lands on the node that
//! was current; totals, stacks and the run's total time come from the same nodes and agree.

use super::Counter;

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
        let n = &mut self.nodes[self.cur as usize];
        n.self_ps = n.self_ps.saturating_add(ps);
    }

    /// A barrier in the current frame: its stall for completions (to the wait pseudo-frame), its
    /// own cost, and its count, touching the node once.
    #[inline]
    pub fn barrier(&mut self, wait_ps: u64, cost_ps: u64) {
        self.barrier_as(Counter::Barrier, wait_ps, cost_ps);
    }

    /// As [`Ledger::barrier`], counted as `kind` (a `wmb()` is [`Counter::Wmb`]).
    #[inline]
    pub fn barrier_as(&mut self, kind: Counter, wait_ps: u64, cost_ps: u64) {
        let n = &mut self.nodes[self.cur as usize];
        n.wait_ps = n.wait_ps.saturating_add(wait_ps);
        n.self_ps = n.self_ps.saturating_add(cost_ps);
        n.counts[kind as usize] += 1;
    }

    /// Charge a barrier's stall for completions to the current frame's wait pseudo-frame.
    #[inline]
    pub fn charge_wait(&mut self, ps: u64) {
        let n = &mut self.nodes[self.cur as usize];
        n.wait_ps = n.wait_ps.saturating_add(ps);
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
        // Saturating, so a clock that ran past u64::MAX shows as u64::MAX, never as a small sum.
        self.nodes.iter().fold(0u64, |t, n| {
            t.saturating_add(n.self_ps).saturating_add(n.wait_ps)
        })
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
}
