//! The Model backend: a virtual clock charged from a platform profile.
//!
//! Kernel counterpart: none — this stands in for the CPU and memory system.
//!
//! What it models: cache maintenance is pipelined. A line's operation costs `issue` of CPU time and
//! completes `latency` after it was issued; completions are also spaced at least `interval` apart
//! (the memory system's retire rate; 0 when issue is the bottleneck). A barrier waits until the
//! last outstanding operation has completed and then costs its own `barrier` time. One barrier per
//! list beats one per entry *because of these parameters*: per-entry barriers expose the completion
//! latency once per entry, a batched barrier once per list.
//!
//! The SMMU (optional, from the profile's `[smmu]` section) is a second agent with its own
//! timeline. A register write (`TLBIVA`, `TLBIASID`) or a command (`CMD_TLBI_*`) costs the CPU its
//! issue time and queues work on the SMMU, which processes invalidations one after another, each
//! taking its own time. A sync (`TLBSYNC`, `CMD_SYNC`) completes once everything before it has,
//! plus its own time. The CPU learns of completion only by polling (`TLBSTATUS` reads, each a
//! full MMIO round trip) or, on SMMUv3, by waiting for the sync's completion; the driver's poll
//! loop, not this backend, decides how often it looks and how long it sleeps between looks. That
//! side is the [`SmmuPort`] impl; with no `[smmu]` section its costs are 0.
//!
//! On a NUMA machine ([`NumaLines`], from the profile's `[numa] line_ns`) an SMMUv3's command
//! queue has a home node, learnt from the `CMDQ_BASE` write at probe, and a command list runs
//! its protocol against the topology (5.10–5.15 MSI polling, coherent SMMU): the CPU's stores
//! into the queue need the line from its home (`dma_wmb()` before the doorbell waits for them;
//! the misses of one list overlap, so one transfer per list); the SMMU reads the commands from
//! the home node (one transfer per list, later lines prefetched behind it); a `CMD_SYNC`
//! completes with the SMMU writing its MSI payload into the sync's slot (one transfer to the
//! home node); the CPU spinning on that slot (`smp_cond_load_relaxed`) then reloads the line
//! from its home. Each transfer is priced `line_ps[initiator's node][queue's node]`. Without
//! `NumaLines` or before `CMDQ_BASE` is written, none of this is charged.
//!
//! With a functional cache model (the profile's `[cache_model]`), each line's operation also
//! depends on the line's state ([`super::cache`]): a clean of a line that is dirty in the L1
//! writes it back into the next level, which occupies the L1's one eviction buffer for
//! `writeback_ps[0]` (Cortex-A9 TRM §7.1: one 32-byte eviction buffer), so a run of dirty lines
//! is paced by their writebacks and the CPU stalls for the buffer (charged as a wait); a clean of
//! a clean or absent line costs the bare operation. An outer (PL310) operation on a dirty line
//! adds its writeback to DDR, `writeback_ps[1]`, to the CPU's time, the operation being atomic.
//! A program's own loads and stores ([`cpu_loop`]) post their victims to the eviction buffers
//! instead and wait only for a busy buffer. Without `[cache_model]` nothing of this exists and
//! every charge is as before.
//!
//! Invariants: time only moves forward; `pending` (the completion time of the newest outstanding
//! operation) is never before the last barrier. Charges equal busy time: every picosecond the
//! clock advances is attributed to exactly one call stack, so breakdowns sum to the total,
//! except the time the CPU idles ([`Hw::idle_until`]), which no stack is charged.

use super::cache::{Access, Caches, Effects, HierarchySpec, Maint};
use super::{
    CacheOp, Counter, Hw, Ledger, MmioReg, SMMU_TLBSTATUS_GSACTIVE, SmmuCmdKind, SmmuPort, SwCost,
    SwKey,
};
use crate::types::PhysAddr;
use std::collections::BTreeMap;

mod cpu_loop;
pub use cpu_loop::{MAX_LINEFILLS, Stream};

mod dram;
mod params;
mod smmu;
pub use params::*;

/// The writeback counter of each level.
const WRITEBACK_COUNTERS: [Counter; 2] = [Counter::L1Writeback, Counter::L2Writeback];

/// The modelled machine: one CPU's clock plus the maintenance pipeline behind it.
#[derive(Clone, Debug)]
pub struct Model {
    params: ModelParams,
    /// Per cache op, its costs resolved once (see the closed form in `cache_maint`).
    maint: [MaintCost; 3],
    /// `params.wmb_ps`, 0 when the profile has none, resolved once: every map ends in a wmb().
    wmb_ps: u64,
    now: u64,
    pending: u64,
    /// `params.smmu`, or the zero-cost default when the profile has none, resolved once: the
    /// register accesses read it on every call.
    smmu: SmmuParams,
    /// The SMMU's own timeline: one agent for every CPU of the machine ([`Model::on_cpu`]).
    smmu_agent: SmmuAgent,
    /// Each node's DRAM write channel ([`dram`]), shared like the SMMU.
    dram: dram::Channels,
    /// When the most recent sync this CPU asked for completes.
    smmu_sync_done: u64,
    /// The functional caches, with `params.caches`.
    caches: Option<Caches>,
    /// When the L1's eviction buffer is next free (cache model only).
    evict_free: u64,
    /// When the outer cache's eviction buffer is next free, after a program's access pushed a
    /// dirty line out of it (cache model only).
    outer_evict_free: u64,
    /// The NUMA machine's line transfers, when the profile gives them.
    numa: Option<NumaLines>,
    /// The SMMUv3 command queue's home node, once `CMDQ_BASE` has been written.
    cmdq_node: Option<u32>,
    /// [`Model::cmdq_line_ps`], resolved whenever the topology, the CPU's node or the queue's
    /// node changes: every submission reads it.
    cmdq_lines: (u64, u64),
    /// Which CPU of the machine this is, and how it waits its turn among the others
    /// ([`crate::smp`]); alone unless a many-CPU run says otherwise.
    cpu: crate::smp::Cpu,
    /// The platform's number for this CPU (`smp_processor_id()`): which copy of per-CPU data
    /// the calls use.
    processor: usize,
    ledger: Ledger,
}

impl Model {
    pub fn new(params: ModelParams) -> Model {
        let caches = params.caches.as_ref().map(|c| Caches::new(&c.hierarchy));
        Model {
            smmu: params.smmu.unwrap_or_default(),
            maint: params.maint.map(Option::unwrap_or_default),
            wmb_ps: params.wmb_ps.unwrap_or(0),
            params,
            now: 0,
            pending: 0,
            smmu_agent: SmmuAgent::default(),
            dram: dram::Channels::new(1),
            smmu_sync_done: 0,
            caches,
            evict_free: 0,
            outer_evict_free: 0,
            numa: None,
            cmdq_node: None,
            cmdq_lines: (0, 0),
            cpu: crate::smp::Cpu::alone(),
            processor: 0,
            ledger: Ledger::default(),
        }
    }

    /// Run as `cpu` of a many-CPU machine: shared locks are then taken in the machine's order
    /// of simulated time, and a lock another CPU holds is waited for.
    pub fn set_cpu(&mut self, cpu: crate::smp::Cpu) {
        self.cpu = cpu;
    }

    /// Wait until every CPU of the machine earlier than this one's clock has run up to it
    /// ([`crate::smp::Cpu::turn`]): what they store before now is then seen.
    pub fn take_turn(&self) {
        self.cpu.turn(self.now);
    }

    /// Idle until another CPU wakes `q` (a store this CPU waits for, outside the DMA layers:
    /// a driver handing a mapping to another CPU). The caller checks its condition at its
    /// turn first and again after each wake-up.
    pub fn wait_on(&mut self, q: &crate::smp::WaitQueue) {
        self.now = self.cpu.wait(q, self.now);
    }

    /// Wake every CPU waiting on `q`, from this CPU's clock.
    pub fn wake_all(&self, q: &crate::smp::WaitQueue) {
        self.cpu.wake_all(q, self.now);
    }

    /// Another CPU of this machine, the platform's CPU `cpu` on `node`: the same costs, caches
    /// as they are now (each CPU's its own from here on), the same clock, an empty ledger, and
    /// the one SMMU this model drives. Give it its [`crate::smp::Cpu`] with [`Model::set_cpu`]
    /// inside its body.
    pub fn on_cpu(&self, cpu: u32, node: u32) -> Model {
        let mut m = self.clone();
        m.smmu_agent = self.smmu_agent.share();
        m.dram = self.dram.share();
        m.ledger = Ledger::default();
        m.place(cpu, node);
        m
    }

    /// The calls run on the platform's CPU `cpu`, on `node`.
    pub fn place(&mut self, cpu: u32, node: u32) {
        self.set_processor(cpu);
        self.set_cpu_node(node);
    }

    /// The calls run on the platform's CPU `cpu` ([`Hw::cpu`]): the copy of per-CPU data they
    /// use. A machine of one CPU keeps one copy of each, CPU 0's, wherever it runs.
    pub fn set_processor(&mut self, cpu: u32) {
        self.processor = cpu as usize;
    }

    /// Take the charges and counts of `other` (another CPU's model) into this one's ledger.
    pub fn absorb_ledger(&mut self, other: &Model) {
        self.ledger.absorb(&other.ledger);
    }

    /// The node the CPU making calls runs on (0 without a topology).
    pub fn cpu_node(&self) -> u32 {
        self.numa.as_ref().map_or(0, |n| n.cpu_node)
    }

    /// A line last written by a CPU on `from` moved to this CPU: its price from the topology
    /// (`[numa] line_ns`, the diagonal for another core of the same node), else the profile's
    /// `cache.line_transfer`; 0 without either.
    fn line_from(&self, from: u32) -> u64 {
        match &self.numa {
            Some(n) => n.line(n.cpu_node, from),
            None => self.params.line_transfer_ps.unwrap_or(0),
        }
    }

    /// `line` comes to this CPU's cache from the CPU that wrote it last, if that is another
    /// and this CPU holds no copy of what it wrote.
    ///
    /// What it reads is what the line holds when it arrives: after a transfer, every CPU
    /// earlier than the arrival has its turn first.
    fn fetch_line(&mut self, line: &crate::smp::SharedLine) {
        let me = self.cpu.id();
        if !line.shared_by(me) && self.take_line_from_writer(line) {
            self.cpu.turn(self.now);
            line.read_by(me);
        }
    }

    /// The transfer of `line` from the CPU that wrote it last, if that is another: whether one
    /// was made.
    fn take_line_from_writer(&mut self, line: &crate::smp::SharedLine) -> bool {
        let Some(last) = line.last_writer().filter(|l| l.cpu != self.cpu.id()) else {
            return false;
        };
        self.transfer_line(line, last.node);
        true
    }

    /// `line` moves here from the cache of a CPU on `from`: after its earlier transfers to other
    /// CPUs, then its own ([`crate::smp::SharedLine::transfer`]).
    fn transfer_line(&mut self, line: &crate::smp::SharedLine, from: u32) {
        let ps = self.line_from(from);
        if ps > 0 {
            let start = line.transfer(self.cpu.id(), self.now, ps);
            let waited = start - self.now;
            self.leaf(
                super::LINE_FRAME,
                SwCost(waited.saturating_add(ps)),
                Some(Counter::NumaLine),
            );
        }
    }

    /// One attempt of a `cmpxchg` loop: `line` exclusive here, then, once every CPU earlier than
    /// its arrival has had its turn, whether it still holds what this CPU read at `seen`. The
    /// line comes from the CPU that had it exclusive last, unless this CPU has had it since and
    /// no later request has taken it away ([`crate::smp::SharedLine::kept_by`]).
    fn cmpxchg_attempt(&mut self, line: &crate::smp::SharedLine, seen: u64) -> bool {
        let me = self.cpu.id();
        self.cpu.turn(self.now);
        if !line.kept_by(me, self.now)
            && let Some(last) = line.last_writer()
        {
            self.transfer_line(line, last.node);
            self.cpu.turn(self.now);
        }
        line.version() == seen
    }

    /// The write-backs of `lines` dirty lines from `first`, issued from now one every `issue`
    /// ps, through the DRAM write channel of the node they are on ([`dram`]): when the last is
    /// in DRAM. The channel is the machine's: every CPU earlier than this one has queued its
    /// write-backs first.
    #[inline(never)]
    fn write_back(&mut self, first: PhysAddr, issue: u64, service: u64, lines: u64) -> u64 {
        self.cpu.turn(self.now);
        let node = self
            .numa
            .as_ref()
            .and_then(|n| n.node_of(first.0))
            .unwrap_or(0);
        self.dram.write_back(node, self.now, issue, service, lines)
    }

    /// Price the SMMUv3 queue's protocol against a NUMA topology (see the module header).
    pub fn set_numa(&mut self, numa: NumaLines) {
        self.dram = dram::Channels::new(numa.line_ps.len());
        self.numa = Some(numa);
        self.resolve_cmdq_lines();
    }

    /// The node the CPU making calls runs on, for a machine with [`NumaLines`].
    pub fn set_cpu_node(&mut self, node: u32) {
        if let Some(n) = &mut self.numa {
            n.cpu_node = node;
        }
        self.resolve_cmdq_lines();
    }

    /// The command queue's home node, as the SMMU learnt it from `CMDQ_BASE`.
    pub fn cmdq_node(&self) -> Option<u32> {
        self.cmdq_node
    }

    /// One line transfer of the command queue for the CPU and for the SMMU, in ps; `(0, 0)`
    /// without a topology or before the queue's base is known.
    #[inline]
    fn cmdq_line_ps(&self) -> (u64, u64) {
        self.cmdq_lines
    }

    fn resolve_cmdq_lines(&mut self) {
        self.cmdq_lines = match (&self.numa, self.cmdq_node) {
            (Some(n), Some(q)) => (n.line(n.cpu_node, q), n.line(n.smmu_node, q)),
            _ => (0, 0),
        };
    }

    /// The functional caches, when the profile has a `[cache_model]`.
    pub fn caches(&self) -> Option<&Caches> {
        self.caches.as_ref()
    }

    fn count_writebacks(&mut self, fx: &Effects) {
        for (level, c) in WRITEBACK_COUNTERS.iter().enumerate() {
            if fx.writebacks[level] > 0 {
                self.ledger.count(*c, fx.writebacks[level]);
            }
        }
    }

    /// Each level's cost of writing one dirty line out (0 without a cache model).
    fn writeback_ps(&self) -> [u64; 2] {
        self.params
            .caches
            .as_ref()
            .map(|c| c.writeback_ps)
            .unwrap_or_default()
    }

    /// Picoseconds of writeback work in `fx`, by the levels' writeback costs.
    fn writeback_work(&self, fx: &Effects) -> u64 {
        let wb = self.writeback_ps();
        (0..wb.len()).fold(0u64, |acc, l| {
            acc.saturating_add(fx.writebacks[l].saturating_mul(wb[l]))
        })
    }

    /// [`Hw::cache_maint`] line by line through the cache model: the same pipeline as the
    /// closed form (completion i = max(issue_i + latency, completion_{i-1} + interval)), plus, for
    /// every line with writebacks, the eviction buffer: the line waits until the buffer is free,
    /// then holds it for its writeback work.
    fn cache_maint_modelled(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        let c = self.params.maint(op).unwrap_or_default();
        let Some(mut caches) = self.caches.take() else {
            return;
        };
        let line0 = caches.line_of(first.0);
        let mut t = self.now;
        let mut stall = 0u64;
        let mut done = self.pending;
        let mut total = Effects::default();
        // Lines before `priced` have had their pipeline step.
        let mut priced = 0u64;
        caches.maint_range(false, Maint::from(op), line0, lines, |i, fx| {
            (t, done) = pipeline_run(c, t, done, i - priced);
            let work = self.writeback_work(fx);
            if work > 0 {
                let start = t.max(self.evict_free);
                stall = stall.saturating_add(start - t);
                t = start;
                self.evict_free = t.saturating_add(work);
                self.pending = self.pending.max(self.evict_free);
            }
            (t, done) = pipeline_run(c, t, done, 1);
            total.add(fx);
            priced = i + 1;
        });
        (_, done) = pipeline_run(c, t, done, lines - priced);
        self.caches = Some(caches);
        self.pending = self.pending.max(done);
        self.ledger.count(op.counter(), lines);
        self.count_writebacks(&total);
        self.advance(lines.saturating_mul(c.issue_ps));
        if stall > 0 {
            self.now = self.now.saturating_add(stall);
            self.ledger.charge_wait(stall);
        }
    }

    #[inline(never)]
    fn cache_maint_out_of_line(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        self.cache_maint_modelled(op, first, lines)
    }

    pub fn params(&self) -> &ModelParams {
        &self.params
    }

    /// Forget charges and counts (after a warm-up), keeping the clock monotonic.
    pub fn clear_ledger(&mut self) {
        self.ledger.clear();
    }

    /// The call-stack ledger, for reading its charges and counts.
    pub fn ledger(&mut self) -> &Ledger {
        &self.ledger
    }

    // The clock saturates rather than wraps: a run whose modelled time passes u64::MAX ps (213
    // days) ends with a total of u64::MAX, which `scenario::execute` reports as an error.
    #[inline]
    fn advance(&mut self, ps: u64) {
        self.now = self.now.saturating_add(ps);
        self.ledger.charge(ps);
    }

    /// [`Model::advance`] by an operation's cost and one count of it, on the node found once.
    #[inline]
    fn advance_count(&mut self, ps: u64, c: Counter) {
        self.now = self.now.saturating_add(ps);
        self.ledger.charge_count_one(ps, c);
    }

    #[inline]
    fn smmu(&self) -> SmmuParams {
        self.smmu
    }

    /// Queue `work` ps of SMMU-side work arriving now. The caller has had its turn: every CPU
    /// earlier than this one has queued its work.
    fn smmu_work(&mut self, work: u64) {
        let busy = &self.smmu_agent.0;
        busy.set(busy.get().max(self.now).saturating_add(work));
    }

    /// Commands the SMMU reads from memory `latency` ps away: it starts on them once they have
    /// arrived, or once it is done with earlier work if that is later.
    fn smmu_fetch(&mut self, latency: u64) {
        let busy = &self.smmu_agent.0;
        busy.set(busy.get().max(self.now.saturating_add(latency)));
    }

    fn smmu_sync(&mut self, work: u64) {
        self.smmu_work(work);
        self.smmu_sync_done = self.smmu_agent.0.get();
    }
}

/// The SMMU as an agent with its own timeline: when it finishes the last work queued so far.
/// Cloning a [`Model`] copies it (a second machine); [`Model::on_cpu`] shares it (a second CPU
/// of the same machine).
#[derive(Debug, Default)]
struct SmmuAgent(std::rc::Rc<std::cell::Cell<u64>>);

impl Clone for SmmuAgent {
    fn clone(&self) -> SmmuAgent {
        SmmuAgent(std::rc::Rc::new(std::cell::Cell::new(self.0.get())))
    }
}

impl SmmuAgent {
    fn share(&self) -> SmmuAgent {
        SmmuAgent(std::rc::Rc::clone(&self.0))
    }

    /// When it finishes the last work queued so far.
    fn busy(&self) -> u64 {
        self.0.get()
    }
}

/// A run of `lines` (at least one) issued back to back from `t0` with nothing to write back,
/// the newest earlier completion being `pending`: the CPU's time for the run (lines × issue) and
/// the completion of its last line, as [`pipeline_run`] gives them. When every input is far
/// enough below `u64::MAX` that nothing can saturate (every run of a real profile: lines and
/// per-line costs below 2^31, times below 2^61 ps, 26 days), the same figures in plain
/// arithmetic (`tests::maint_run_is_the_pipeline_run`); otherwise [`pipeline_run`] itself, out
/// of line.
#[inline(always)]
fn maint_run(c: &MaintCost, t0: u64, pending: u64, lines: u64) -> (u64, u64) {
    let n = lines.wrapping_sub(1);
    if ((n | c.issue_ps | c.interval_ps) >> 31 | (t0 | pending | c.latency_ps) >> 61) != 0 {
        return maint_run_saturating(c, t0, pending, lines);
    }
    // Products below 2^62, sums of at most two of them and two times below 2^64: no wrap. The
    // last completion is the larger of the chain started by the first line (or by what was
    // already outstanding) and the last line's own latency.
    let after_first = n.wrapping_mul(c.issue_ps);
    let first_done = t0
        .wrapping_add(c.latency_ps)
        .max(pending.wrapping_add(c.interval_ps));
    let last_done = first_done
        .wrapping_add(n.wrapping_mul(c.interval_ps))
        .max(t0.wrapping_add(after_first).wrapping_add(c.latency_ps));
    (after_first.wrapping_add(c.issue_ps), last_done)
}

/// [`maint_run`] for any inputs: lines × issue and [`pipeline_run`]'s completion, saturating.
#[inline(never)]
fn maint_run_saturating(c: &MaintCost, t0: u64, pending: u64, lines: u64) -> (u64, u64) {
    let (_, done) = pipeline_run(*c, t0, pending, lines);
    (lines.saturating_mul(c.issue_ps), done)
}

/// `k` lines issued back to back from `t`, each `issue` after the one before, with no writeback:
/// the issue time after them and the completion of the last, the newest earlier completion being
/// `done`. Line by line that is completion_i = max(issue_i + latency, completion_{i-1} +
/// interval); both terms grow linearly in i, so after `k` lines the completion is the largest of
/// the chain from `done`, the chain from the first line's own latency, and the last line's own
/// latency. Saturating like the step, which it equals (`tests::pipeline_run_is_the_step_repeated`).
fn pipeline_run(c: MaintCost, t: u64, done: u64, k: u64) -> (u64, u64) {
    if k == 0 {
        return (t, done);
    }
    let n = k - 1;
    let done = done
        .saturating_add(k.saturating_mul(c.interval_ps))
        .max(
            t.saturating_add(c.latency_ps)
                .saturating_add(n.saturating_mul(c.interval_ps)),
        )
        .max(
            t.saturating_add(n.saturating_mul(c.issue_ps))
                .saturating_add(c.latency_ps),
        );
    (t.saturating_add(k.saturating_mul(c.issue_ps)), done)
}

impl Hw for Model {
    #[inline]
    fn as_dyn_hw(&mut self) -> &mut dyn Hw {
        self
    }

    #[inline(always)]
    fn enter(&mut self, frame: &'static super::FrameId) -> super::Caller {
        let caller = self.ledger.current();
        self.ledger.enter_frame(frame);
        super::Caller(caller)
    }

    #[inline]
    fn leave(&mut self, caller: super::Caller) {
        self.ledger.leave_to(caller.0);
    }

    #[inline]
    fn cpu(&self) -> usize {
        self.processor
    }

    fn spin_lock(&mut self, lock: &crate::smp::RawSpinLock) {
        let owned = self.cpu.spin_lock(lock, self.now);
        if owned > self.now {
            // Spinning until the holder released it: this CPU's time, in a frame of its own.
            self.leaf(lock.spin_frame, SwCost(owned - self.now), None);
        }
        // The lock's line was last written by the CPU that released it: it comes from that
        // CPU's cache (a lock never taken by another CPU stays in this one's).
        self.fetch_line(&lock.line);
    }

    fn spin_unlock(&mut self, lock: &crate::smp::RawSpinLock) {
        lock.line.written_by(self.cpu.id(), self.cpu_node());
        self.cpu.spin_unlock(lock, self.now);
    }

    fn load(&mut self, line: &crate::smp::SharedLine) {
        self.cpu.turn(self.now);
        self.fetch_line(line);
    }

    fn atomic(&mut self, line: &crate::smp::SharedLine) {
        self.cpu.turn(self.now);
        // A write needs the line for this CPU alone: a copy it read is not enough when another
        // CPU wrote it last (the other copies are invalidated, a round trip like a transfer).
        // The write lands when the line arrives, after every CPU earlier than that.
        if self.take_line_from_writer(line) {
            self.cpu.turn(self.now);
        }
        line.written_by(self.cpu.id(), self.cpu_node());
    }

    fn cmpxchg(&mut self, line: &crate::smp::SharedLine, seen: u64, retry: SwCost) -> u64 {
        let (me, node) = (self.cpu.id(), self.cpu_node());
        let (mut seen, mut failed) = (seen, 0u64);
        // A failed attempt leaves the line here with what another CPU wrote; the loop takes that
        // as the value to expect and tries again after its own instructions, by which time a
        // request from another CPU may have taken the line away and written it again.
        while !self.cmpxchg_attempt(line, seen) {
            failed += 1;
            seen = line.version();
            line.taken_by(me, node);
            self.sw(retry);
        }
        line.written_by(me, node);
        failed
    }

    fn wait_on(
        &mut self,
        q: &crate::smp::WaitQueue,
        line: Option<&crate::smp::SharedLine>,
        frame: &'static str,
    ) {
        let woken = self.cpu.wait(q, self.now);
        if woken > self.now {
            self.leaf(frame, SwCost(woken - self.now), None);
        }
        // It sees the store once the line comes over from the CPU that made it.
        if let Some(line) = line {
            self.fetch_line(line);
        }
    }

    fn wake(&mut self, q: &crate::smp::WaitQueue) {
        self.cpu.wake_all(q, self.now);
    }

    #[inline]
    fn leaf(&mut self, name: &'static str, cost: SwCost, count: Option<Counter>) {
        self.now = self.now.saturating_add(cost.0);
        self.ledger.leaf(name, cost.0, count);
    }

    // The closed form is a handful of instructions and runs once per region on the hottest
    // paths: inlined into the by-line loop, with the cache model's walk kept out of line.
    #[inline(always)]
    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines == 0 {
            return;
        }
        if self.caches.is_some() {
            return self.cache_maint_out_of_line(op, first, lines);
        }
        // A profile without this op was rejected when the scenario was set up (see
        // `platform::Profile::require_ops`); charging nothing here would hide that, so fall back to
        // a zero cost only for ops the caller never checked, which tests rule out.
        let c = &self.maint[op as usize];
        let (ps, mut last_done) = maint_run(c, self.now, self.pending, lines);
        if let Some(service) = self.params.dram_write_ps
            && op != CacheOp::Inval
        {
            last_done = last_done.max(self.write_back(first, c.issue_ps, service, lines));
        }
        self.pending = self.pending.max(last_done);
        self.now = self.now.saturating_add(ps);
        self.ledger.charge_count(ps, op.counter(), lines);
    }

    #[inline]
    fn barrier(&mut self) {
        let wait = self.pending.saturating_sub(self.now);
        let cost = self.params.barrier_ps;
        // The stall is reported apart from the barrier's own cost, so breakdowns separate "the
        // barrier instruction" from "what it waited for".
        self.now = self.now.saturating_add(wait).saturating_add(cost);
        self.ledger.barrier(wait, cost);
    }

    #[inline]
    fn wmb(&mut self) {
        // A DSB of any kind waits for outstanding maintenance; io-pgtable's own PTE cleaning has
        // completed before (its DSB SY), so on the modelled paths only the wmb's cost remains.
        let wait = self.pending.saturating_sub(self.now);
        let cost = self.wmb_ps;
        self.now = self.now.saturating_add(wait).saturating_add(cost);
        self.ledger.barrier_as(Counter::Wmb, wait, cost);
    }

    #[inline]
    fn sw(&mut self, cost: SwCost) {
        if cost.0 != 0 {
            self.advance(cost.0);
        }
    }

    fn sw_cost(&self, key: SwKey) -> SwCost {
        SwCost(self.params.sw.get(key.name()).copied().unwrap_or(0))
    }

    #[inline]
    fn line_bytes(&self) -> u64 {
        self.params.line_bytes
    }

    fn outer_line_op(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines == 0 {
            return;
        }
        let per_line = self.params.outer.unwrap_or_default().line_ps[op as usize];
        self.ledger.count(op.outer_counter(), lines);
        let mut ps = lines.saturating_mul(per_line);
        if let Some(mut caches) = self.caches.take() {
            // Atomic on the PL310: the CPU's next register write waits for this line's
            // writeback to DDR as well.
            let line0 = caches.line_of(first.0);
            let mut fx = Effects::default();
            caches.maint_range_sum(true, Maint::from(op), line0, lines, &mut fx);
            self.caches = Some(caches);
            ps = ps.saturating_add(self.writeback_work(&fx));
            self.count_writebacks(&fx);
        }
        self.advance(ps);
    }

    fn outer_way_op(&mut self, op: CacheOp, lines: u64) {
        let per_line = self.params.outer.unwrap_or_default().way_line_ps[op as usize];
        if let Some(c) = op.outer_way_counter() {
            self.ledger.count(c, 1);
        }
        let mut ps = lines.saturating_mul(per_line);
        if let Some(mut caches) = self.caches.take() {
            // The walk visits every line of every way: each line the outer levels hold gets the
            // operation (a dirty one is written back), whatever address it caches. The CPU polls
            // the way register until the walk, writebacks included, is over.
            let mut fx = Effects::default();
            caches.maint_outer_all(Maint::from(op), &mut fx);
            self.caches = Some(caches);
            ps = ps.saturating_add(self.writeback_work(&fx));
            self.count_writebacks(&fx);
        }
        self.advance(ps);
    }

    fn outer_sync(&mut self) {
        let ps = self.params.outer.unwrap_or_default().sync_ps;
        self.ledger.count(Counter::OuterSync, 1);
        self.advance(ps);
    }

    #[inline]
    fn now_ps(&self) -> u64 {
        self.now
    }

    fn idle_until(&mut self, t: u64) {
        self.now = self.now.max(t);
    }

    #[inline]
    fn copy(&mut self, bytes: u64) {
        let ps = self.params.copy.unwrap_or_default().ps(bytes);
        self.ledger.count(Counter::BounceCopy, 1);
        self.ledger.count(Counter::BounceCopyBytes, bytes);
        self.advance(ps);
    }

    #[inline]
    fn count(&mut self, c: Counter, n: u64) {
        // Most callers count one, a constant once inlined: that count needs no overflow check.
        if n == 1 {
            self.ledger.count_one(c);
        } else {
            self.ledger.count(c, n);
        }
    }

    fn numa_line(&mut self, from: u32, home: PhysAddr, lines: u64) {
        let Some(ps) = self
            .numa
            .as_ref()
            .and_then(|n| Some(n.line(from, n.node_of(home.0)?)))
        else {
            return;
        };
        self.ledger.count(Counter::NumaLine, lines);
        self.advance(ps.saturating_mul(lines));
    }

    fn cpu_touch(&mut self, a: Access, start: PhysAddr, bytes: u64) {
        if let Some(c) = self.caches.as_mut() {
            c.access_range(a, start.0, bytes);
        }
    }

    fn cpu_access(
        &mut self,
        a: Access,
        mt: super::memory::MemType,
        size: u64,
        start: PhysAddr,
        bytes: u64,
    ) {
        self.cpu_streams(
            &[Stream {
                access: a,
                mt,
                size,
                start,
            }],
            bytes,
        );
    }

    fn cpu_copy(
        &mut self,
        dst: (super::memory::MemType, PhysAddr),
        src: (super::memory::MemType, PhysAddr),
        size: u64,
        bytes: u64,
    ) {
        self.cpu_streams(
            &[
                Stream {
                    access: Access::Read,
                    mt: src.0,
                    size,
                    start: src.1,
                },
                Stream {
                    access: Access::Write,
                    mt: dst.0,
                    size,
                    start: dst.1,
                },
            ],
            bytes,
        );
    }
}

#[cfg(test)]
mod tests;
