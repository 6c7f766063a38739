//! The call-stack ledger: every charge and count, attributed to the kernel function being run.
//!
//! Kernel counterpart: none — this is what `perf` would attribute by call chain, kept exactly.
//! The Model backend charges through it; runners read it back as rows
//! ([`crate::hw::calls::stack_rows`]) after timing their calls with
//! [`crate::hw::calls::CallTimer`].
//!
//! Invariants: frames are interned as a tree. Every frame is a constant declared where it is
//! entered ([`FrameId`]), so its address is known without a load. Entering looks the frame up in
//! a set-associative cache whose set is chosen by that address alone: the probe's address does
//! not depend on the current node, so a run of frame changes is not a chain of dependent loads.
//! A set remembers the node each of its last four (frame, current node) places reached, and a
//! frame entered together with the routine that calls it (a nested [`FrameId`]) is one look for
//! both. Leaving goes back to the node the enter handed out. On a miss, the frame's names are
//! looked up one by one in a second cache of the same kind keyed by name; only when that misses
//! too are the current node's children scanned. A leaf call ([`Ledger::leaf`]) does not move the
//! current node, so its own cache is indexed by the (node, name) pair. Every charge lands on the
//! node that was current; totals, stacks and the run's total time come from the same nodes and
//! agree. The caches only remember tree edges that exist: they can miss, never answer wrongly, so
//! the tree is exactly what scanning alone would build.

use super::Counter;

/// One node of the call tree: a kernel function reached by one particular path. Its time and its
/// operation counts sit together, so an operation that is both charged and counted (a cache
/// maintenance run, a barrier) finds its node once. Entering a frame goes through the edge cache
/// and does not read nodes at all.
#[derive(Clone, Debug)]
struct Node {
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

/// A kernel function's frame as a call site names it: its name, and for a routine entered with
/// its callers, theirs. A constant ([`crate::frame_id!`] promotes it), so a hot path hands the
/// ledger an address computed from the instruction pointer, with nothing loaded: the ledger's
/// frame cache is keyed by that address ([`Ledger::enter_frame`]).
#[derive(Debug)]
pub struct FrameId {
    /// A routine entered together with the routines that call it, with nothing charged between
    /// (arm64's `arch_sync_dma_for_device` around `dcache_clean_poc`; `iommu_unmap` around
    /// `iommu_iotlb_sync` around `arm_smmu_tlb_sync_context`): the callers' frames, outermost
    /// first, entered before this one. The chain is one move of the ledger.
    outer: &'static [&'static str],
    name: &'static str,
}

/// Sets of each ledger's frame cache (a power of two).
const FRAME_SETS: usize = 256;
/// Places a set remembers (frames entered from more callers in turn than this, counted with
/// the other frames that share the set, go by name).
const FRAME_WAYS: usize = 4;

impl FrameId {
    pub const fn new(name: &'static str) -> FrameId {
        FrameId { outer: &[], name }
    }

    /// `name` entered from inside `outer` (outermost first), all at once (see
    /// [`FrameId::outer`]).
    pub const fn nested(outer: &'static [&'static str], name: &'static str) -> FrameId {
        FrameId { outer, name }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The calling routines' frames entered with this one, outermost first (none for a frame
    /// entered alone).
    #[inline]
    pub fn outer(&self) -> &'static [&'static str] {
        self.outer
    }

    /// This frame's set in the frame cache: address bits alone, as [`edge_set`] does for names.
    #[inline(always)]
    fn set(&'static self) -> usize {
        // Frames are 32 bytes and lie among other constants: 16-byte steps spread them.
        (self as *const FrameId as usize >> 4) & (FRAME_SETS - 1)
    }
}

/// A frame, declared where it is entered: `hw.enter(frame_id!("__iommu_unmap"))`; a frame
/// entered together with its callers, outermost first, when nothing is charged between them:
/// `frame_id!("iommu_unmap" => "__iommu_unmap")`. A promoted constant: its address is known where
/// the code is, so entering it loads nothing to find it.
#[macro_export]
macro_rules! frame_id {
    ($name:literal) => {
        const { &$crate::hw::ledger::FrameId::new($name) }
    };
    ($($outer:literal),+ => $name:literal) => {
        const { &$crate::hw::ledger::FrameId::nested(&[$($outer),+], $name) }
    };
}

/// A place a frame was entered from in one ledger, and the node that reached.
#[derive(Clone, Copy, Debug)]
struct FrameEntry {
    /// The frame's address ([`FrameId::set`]).
    frame: usize,
    parent: u32,
    child: u32,
}

/// Parent u32::MAX is no node: an entry that never matches.
const NO_FRAME_ENTRY: FrameEntry = FrameEntry {
    frame: 0,
    parent: u32::MAX,
    child: 0,
};

/// Sets of the enter cache (a power of two).
const EDGE_SETS: usize = 128;
/// Edges a set holds: one frame entered from this many parents, or this many frames sharing a
/// set, all hit.
const EDGE_WAYS: usize = 4;
/// Sets of the leaf cache (a power of two).
const LEAF_SETS: usize = 128;
/// Places a leaf set holds: two (node, leaf) pairs that fall in one set both hit, so which
/// leaves share a set (the linker's placement of their names) cannot make a run thrash.
const LEAF_WAYS: usize = 2;
/// A remembered tree edge: entering `frame` from node `parent` goes to node `child`.
#[derive(Clone, Copy, Debug)]
struct Edge {
    frame: &'static str,
    parent: u32,
    child: u32,
}

/// Parent u32::MAX is no node: an entry that never matches.
const EMPTY_EDGE: Edge = Edge {
    frame: "",
    parent: u32::MAX,
    child: 0,
};

/// Charges attributed by call stack. Interned as a tree; see the module header for how entering
/// a frame stays cheap.
#[derive(Clone, Debug)]
pub struct Ledger {
    nodes: Vec<Node>,
    cur: u32,
    edges: Box<[[Edge; EDGE_WAYS]; EDGE_SETS]>,
    /// The cache of [`Ledger::leaf`], set by (node, frame).
    leaves: Box<[[Edge; LEAF_WAYS]; LEAF_SETS]>,
    /// [`Ledger::enter_frame`]'s cache, set by the frame's address. Held in the ledger itself,
    /// not behind a pointer: an enter reads its set at a fixed offset from the ledger, with no
    /// load of the table's address first.
    frames: [[FrameEntry; FRAME_WAYS]; FRAME_SETS],
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            nodes: vec![Node {
                name: "",
                parent: 0,
                children: Vec::new(),
                self_ps: 0,
                wait_ps: 0,
                counts: [0; Counter::N],
            }],
            cur: 0,
            edges: Box::new([[EMPTY_EDGE; EDGE_WAYS]; EDGE_SETS]),
            leaves: Box::new([[EMPTY_EDGE; LEAF_WAYS]; LEAF_SETS]),
            frames: [[NO_FRAME_ENTRY; FRAME_WAYS]; FRAME_SETS],
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

/// The enter cache's set for entering `frame`: address bits of the (static) name alone (see the
/// module header), no arithmetic that could overflow.
#[inline]
fn edge_set(frame: &'static str) -> usize {
    // String literals lie one after another in read-only data, a few bytes to a few tens apart:
    // their addresses in 8-byte steps already spread them over the sets, and this is computed
    // at run time on every enter (an address is not known when the code is compiled).
    (frame.as_ptr() as usize >> 3) & (EDGE_SETS - 1)
}

/// One more of a count. Unchecked, where an addition of any `n` is checked: a count that goes up
/// one at a time cannot reach 2^64 in any run (that many operations would take centuries), so
/// the check could never fire and is a compare and branch on every operation.
#[inline(always)]
fn bump(count: &mut u64) {
    *count = count.wrapping_add(1);
}

/// The leaf cache's slot for calling `frame` from node `cur`.
#[inline]
fn leaf_slot(cur: u32, frame: &'static str) -> usize {
    let a = frame.as_ptr() as usize;
    // The node is spread by a multiplicative hash: the nodes one leaf is called from are often
    // a fixed stride apart, which a shift alone maps to the same few slots.
    let n = (cur as usize).wrapping_mul(0x9E37_79B1) >> 16;
    ((a >> 3) ^ (a >> 11) ^ n ^ frame.len()) & (LEAF_SETS - 1)
}

impl Ledger {
    /// Enter `frame` (its callers first, if it has any): one look at the frame's set, which
    /// holds the nodes the frames that share it reached from the last places they were entered
    /// from (the first two looked at here, the others out of line). A miss goes by name, and the
    /// set then remembers the new place first.
    #[inline]
    pub(super) fn enter_frame(&mut self, frame: &'static FrameId) {
        let f = frame as *const FrameId as usize;
        let ways = &self.frames[frame.set()];
        let (a, b) = (ways[0], ways[1]);
        if a.parent == self.cur && a.frame == f {
            self.cur = a.child;
        } else if b.parent == self.cur && b.frame == f {
            self.cur = b.child;
        } else {
            self.enter_frame_further(frame);
        }
    }

    /// [`Ledger::enter_frame`] past the set's first two places: the others, then by name.
    #[inline(never)]
    fn enter_frame_further(&mut self, frame: &'static FrameId) {
        let f = frame as *const FrameId as usize;
        let cur = self.cur;
        if let Some(e) = self.frames[frame.set()][2..]
            .iter()
            .find(|e| e.parent == cur && e.frame == f)
        {
            self.cur = e.child;
            return;
        }
        self.enter_frame_slow(frame);
    }

    #[cold]
    #[inline(never)]
    fn enter_frame_slow(&mut self, frame: &'static FrameId) {
        let parent = self.cur;
        for outer in frame.outer {
            self.enter(outer);
        }
        self.enter(frame.name);
        // The newest place first; the oldest of the others goes.
        let ways = &mut self.frames[frame.set()];
        ways.copy_within(0..FRAME_WAYS - 1, 1);
        ways[0] = FrameEntry {
            frame: frame as *const FrameId as usize,
            parent,
            child: self.cur,
        };
    }

    #[inline]
    fn enter(&mut self, frame: &'static str) {
        let set = edge_set(frame);
        for e in &self.edges[set] {
            if e.parent == self.cur && std::ptr::eq(e.frame, frame) {
                self.cur = e.child;
                return;
            }
        }
        self.enter_slow(frame, set);
    }

    #[cold]
    #[inline(never)]
    fn enter_slow(&mut self, frame: &'static str, set: usize) {
        let id = self.child_of_cur(frame);
        let ways = &mut self.edges[set];
        ways.copy_within(0..EDGE_WAYS - 1, 1);
        ways[0] = Edge {
            frame,
            parent: self.cur,
            child: id,
        };
        self.cur = id;
    }

    /// The node `frame` entered from the current node is, created if this path is new.
    fn child_of_cur(&mut self, frame: &'static str) -> u32 {
        let cur = self.cur as usize;
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
        match hit {
            Some(c) => c,
            None => {
                let id = self.nodes.len() as u32;
                self.nodes.push(Node {
                    name: frame,
                    parent: self.cur,
                    children: Vec::new(),
                    self_ps: 0,
                    wait_ps: 0,
                    counts: [0; Counter::N],
                });
                self.nodes[cur].children.push(id);
                id
            }
        }
    }

    /// A call of `frame` that calls nothing charged: as `enter(frame)`, `charge(ps)`,
    /// `count(c, 1)` if a counter is given, `leave()`, without moving the current node. Its own cache is keyed by the
    /// (node, frame) pair: the lookup is not on the chain of frame changes, so it may depend on
    /// the current node, and a leaf called from many callers (x86's `__phys_addr`) has a slot for
    /// each.
    #[inline]
    pub(super) fn leaf(&mut self, frame: &'static str, ps: u64, count: Option<Counter>) {
        let slot = leaf_slot(self.cur, frame);
        let [a, b] = self.leaves[slot];
        let id = if a.parent == self.cur && std::ptr::eq(a.frame, frame) {
            a.child
        } else if b.parent == self.cur && std::ptr::eq(b.frame, frame) {
            b.child
        } else {
            self.leaf_slow(frame, slot)
        } as usize;
        let node = &mut self.nodes[id];
        node.self_ps = node.self_ps.saturating_add(ps);
        if let Some(c) = count {
            bump(&mut node.counts[c as usize]);
        }
    }

    #[cold]
    #[inline(never)]
    fn leaf_slow(&mut self, frame: &'static str, slot: usize) -> u32 {
        let id = self.child_of_cur(frame);
        // The newest first; the older of the two goes.
        let set = &mut self.leaves[slot];
        set[1] = set[0];
        set[0] = Edge {
            frame,
            parent: self.cur,
            child: id,
        };
        id
    }

    #[cfg(test)]
    fn leave(&mut self) {
        debug_assert!(self.cur != 0, "leave() without enter()");
        self.cur = self.nodes[self.cur as usize].parent;
    }

    /// The current node, for [`Ledger::leave_to`].
    #[inline]
    pub(super) fn current(&self) -> u32 {
        self.cur
    }

    /// Leave for `caller`, which the caller saved with [`Ledger::current`] before it entered
    /// (a nested frame's callers too): a register move, without reading the node.
    #[inline]
    pub(super) fn leave_to(&mut self, caller: u32) {
        if cfg!(debug_assertions) {
            let mut up = self.cur;
            while up != caller && up != 0 {
                up = self.nodes[up as usize].parent;
            }
            assert!(
                up == caller && self.cur != caller,
                "leave_to() out of order"
            );
        }
        self.cur = caller;
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
        bump(&mut n.counts[kind as usize]);
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

    /// `count(c, 1)`, without the overflow check (see [`bump`]).
    #[inline]
    pub fn count_one(&mut self, c: Counter) {
        bump(&mut self.nodes[self.cur as usize].counts[c as usize]);
    }

    /// `count(c, n)` and `charge(ps)` on the current node, finding it once.
    #[inline]
    pub fn charge_count(&mut self, ps: u64, c: Counter, n: u64) {
        let node = &mut self.nodes[self.cur as usize];
        node.counts[c as usize] += n;
        node.self_ps = node.self_ps.saturating_add(ps);
    }

    /// `charge_count(ps, c, 1)`, the count without the overflow check (see [`bump`]).
    #[inline]
    pub fn charge_count_one(&mut self, ps: u64, c: Counter) {
        let node = &mut self.nodes[self.cur as usize];
        bump(&mut node.counts[c as usize]);
        node.self_ps = node.self_ps.saturating_add(ps);
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
        let counts = &n.counts;
        if id != 0 {
            path.push(n.name);
            if n.self_ps > 0 || counts.iter().any(|&c| c > 0) {
                out.push(StackCharge {
                    stack: path.clone(),
                    self_ps: n.self_ps,
                    counts: *counts,
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

    /// Add every charge and count of `other` (another CPU's ledger) to the same call stacks here:
    /// a many-CPU run's breakdown is the sum of its CPUs'.
    pub fn absorb(&mut self, other: &Ledger) {
        let cur = self.cur;
        self.absorb_node(0, other, 0);
        self.cur = cur;
    }

    fn absorb_node(&mut self, mine: u32, other: &Ledger, theirs: u32) {
        let o = &other.nodes[theirs as usize];
        let n = &mut self.nodes[mine as usize];
        n.self_ps = n.self_ps.saturating_add(o.self_ps);
        n.wait_ps = n.wait_ps.saturating_add(o.wait_ps);
        for (a, b) in n.counts.iter_mut().zip(o.counts.iter()) {
            *a = a.saturating_add(*b);
        }
        for &c in &o.children {
            self.cur = mine;
            let id = self.child_of_cur(other.nodes[c as usize].name);
            self.absorb_node(id, other, c);
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
        // Another CPU's ledger, with one stack in common and one of its own, adds by stack.
        let mut other = Ledger::default();
        other.enter("a");
        other.enter("b");
        other.charge(2);
        other.leave();
        other.enter("c");
        other.charge(3);
        other.count(Counter::Barrier, 2);
        other.leave();
        other.leave();
        l.absorb(&other);
        let s = l.stacks();
        let rows: Vec<(String, u64)> = s.iter().map(|c| (c.stack_string(), c.self_ps)).collect();
        assert_eq!(
            rows,
            [("a".into(), 5), ("a > b".into(), 10), ("a > c".into(), 3)]
        );
        assert_eq!(l.totals()[Counter::Barrier as usize], 3);
        assert!(l.depth_is_zero());
        l.clear();
        assert_eq!(l.total_ps(), 0);
        assert!(l.stacks().is_empty());
    }

    /// A leaf call is the same as entering, charging, counting and leaving, from many callers
    /// (more than a set has ways, at node ids a stride apart) and interleaved with other calls:
    /// the same stacks, in the same order, with the same charges and counts.
    #[test]
    fn a_leaf_is_enter_charge_count_leave() {
        let callers: Vec<&'static str> = (0..40)
            .map(|i| &*Box::leak(format!("c{i}").into_boxed_str()))
            .collect();
        let run = |leaf: bool| {
            let mut l = Ledger::default();
            for round in 0..3u64 {
                for (i, c) in callers.iter().enumerate() {
                    l.enter(c);
                    l.charge(1);
                    for k in 0..(i % 3) as u64 {
                        let ps = round * 100 + k;
                        if leaf {
                            l.leaf("__phys_addr", ps, Some(Counter::PhysAddrCall));
                            l.leaf("other", ps + 1, None);
                        } else {
                            l.enter("__phys_addr");
                            l.charge(ps);
                            l.count(Counter::PhysAddrCall, 1);
                            l.leave();
                            l.enter("other");
                            l.charge(ps + 1);
                            l.leave();
                        }
                    }
                    l.leave();
                }
            }
            assert!(l.depth_is_zero());
            (l.stacks(), l.totals(), l.total_ps())
        };
        let with_leaf = run(true);
        assert_eq!(with_leaf, run(false));
        assert_eq!(with_leaf.1[Counter::PhysAddrCall as usize], 3 * 39);
    }

    /// Entering a nested frame is entering its frames one after the other by name (two or
    /// three deep), from more parents than a set remembers and interleaved with enters by
    /// name of the same frames: the same tree, in the same order, with the same charges.
    #[test]
    fn a_nested_frame_id_is_its_enters_in_turn() {
        static CLEAN: FrameId = FrameId::nested(&["arch"], "clean");
        static INVAL: FrameId = FrameId::nested(&["arch"], "inval");
        static DEEP: FrameId = FrameId::nested(&["arch", "mid"], "clean");
        let ids: [&'static FrameId; 3] = [&CLEAN, &INVAL, &DEEP];
        let callers: Vec<&'static str> = (0..12)
            .map(|i| &*Box::leak(format!("c{i}").into_boxed_str()))
            .collect();
        let run = |nested: bool| {
            let mut l = Ledger::default();
            for round in 0..3u64 {
                for (i, c) in callers.iter().enumerate() {
                    l.enter(c);
                    let back = l.current();
                    let id = ids[i % 3];
                    if nested && round != 1 {
                        l.enter_frame(id);
                        l.charge(round + 1);
                        l.count(Counter::Barrier, 1);
                        l.leave_to(back);
                    } else {
                        for outer in id.outer() {
                            l.enter(outer);
                        }
                        l.enter(id.name());
                        l.charge(round + 1);
                        l.count(Counter::Barrier, 1);
                        for _ in 0..=id.outer().len() {
                            l.leave();
                        }
                    }
                    l.leave();
                }
            }
            assert!(l.depth_is_zero());
            (l.stacks(), l.totals(), l.total_ps())
        };
        let by_id = run(true);
        assert_eq!(by_id, run(false));
        assert_eq!(by_id.0.len(), callers.len());
        assert_eq!(by_id.2, 6 * callers.len() as u64);
        let deep = by_id.0.iter().filter(|s| s.stack.len() == 4).count();
        assert_eq!(
            deep,
            callers.len() / 3,
            "c/arch/mid/clean once per third caller"
        );
    }

    /// Frames entered from one to six alternating parents (more than a set remembers),
    /// nested in each other and mixed with enters by name of the same frames:
    /// the same tree, in the same order, with the same charges as entering every one by name.
    #[test]
    fn entering_a_frame_is_entering_its_name() {
        let ids: Vec<&'static FrameId> = (0..6)
            .map(|i| {
                let name: &'static str = Box::leak(format!("f{i}").into_boxed_str());
                &*Box::leak(Box::new(FrameId::new(name)))
            })
            .collect();
        let parents = ["p0", "p1", "p2", "p3", "p4", "p5"];
        let run = |by_id: bool| {
            let mut l = Ledger::default();
            for round in 0..13u64 {
                for (i, f) in ids.iter().enumerate() {
                    // Frame i is entered from i + 1 parents in turn: one to six, more than an
                    // entry remembers.
                    let p = parents[(round as usize) % (i + 1)];
                    l.enter(p);
                    let back = l.current();
                    if by_id && !(round + i as u64).is_multiple_of(4) {
                        l.enter_frame(f);
                    } else {
                        l.enter(f.name());
                    }
                    l.charge(round * 10 + i as u64);
                    // The next frame nested inside this one.
                    let g = ids[(i + 1) % ids.len()];
                    let inner = l.current();
                    if by_id {
                        l.enter_frame(g);
                    } else {
                        l.enter(g.name());
                    }
                    l.count(Counter::Barrier, 1);
                    l.leave_to(inner);
                    l.leave_to(back);
                    l.leave();
                }
            }
            assert!(l.depth_is_zero());
            (l.stacks(), l.totals(), l.total_ps())
        };
        let by_frame = run(true);
        assert_eq!(by_frame, run(false));
        assert_eq!(by_frame.1[Counter::Barrier as usize], 13 * ids.len() as u64);
    }

    /// More frames than the enter cache has slots, entered from several parents in changing
    /// orders, and one name reached through a second pointer: the tree is the one scanning alone
    /// builds (one node per distinct path), and every charge lands on its own path.
    #[test]
    fn the_enter_cache_never_changes_the_tree() {
        let names: Vec<&'static str> = (0..600)
            .map(|i| &*Box::leak(format!("f{i}").into_boxed_str()))
            .collect();
        let mut l = Ledger::default();
        for round in 0..3u64 {
            for parent in ["p", "q"] {
                l.enter(parent);
                for k in 0..names.len() {
                    // A different order each round.
                    let i = (k * 7 + round as usize * 13) % names.len();
                    l.enter(names[i]);
                    l.charge(i as u64 + 1);
                    l.leave();
                }
                l.leave();
            }
        }
        // "f0" again, from a copy of its bytes at another address.
        let copy: &'static str = Box::leak(String::from("f0").into_boxed_str());
        assert!(!std::ptr::eq(copy, names[0]));
        l.enter("p");
        l.enter(copy);
        l.charge(1000);
        l.leave();
        l.leave();
        assert!(l.depth_is_zero());
        let s = l.stacks();
        assert_eq!(s.len(), 2 * names.len());
        for (i, n) in names.iter().enumerate() {
            let p = s.iter().find(|c| c.stack == ["p", *n]).unwrap();
            let q = s.iter().find(|c| c.stack == ["q", *n]).unwrap();
            let extra = if i == 0 { 1000 } else { 0 };
            assert_eq!(p.self_ps, 3 * (i as u64 + 1) + extra, "{n}");
            assert_eq!(q.self_ps, 3 * (i as u64 + 1), "{n}");
        }
    }
}
