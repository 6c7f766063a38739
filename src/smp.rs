//! Many CPUs on one machine: each modelled CPU runs its own stream of calls on its own clock, and
//! they meet only where the kernel makes them meet.
//!
//! Kernel counterpart: an SMP system running the DMA API on several CPUs at once, and the
//! primitives they share: `spinlock_t` (kernel/locking/qspinlock.c, arm64's ticket locks before
//! 5.8: both hand the lock to waiters in the order they arrived).
//!
//! What it models: every CPU's body is a coroutine (a stack of its own, switched in a few
//! nanoseconds), so the mechanism code stays the kernel's sequential code. A CPU runs freely
//! through everything private to it, charging its own clock; at each point where it touches shared
//! state (a lock taken or released) it waits its turn: it goes on only once no other runnable CPU's
//! clock is earlier (ties: the lower CPU number). So shared state is touched in one deterministic
//! order of simulated time, the order the real CPUs would touch it in, and the wait a CPU sees is
//! what the other CPUs' work produces: a CPU that finds a lock held blocks until its holder,
//! running on, releases it, and then owns it from the release's time on. No contention formula, no
//! fitted constant. A CPU may also wait for another CPU's store (a [`WaitQueue`]: the arm-smmu-v3
//! command queue's owner waiting for the previous owner, or for other CPUs' entries to become
//! valid): it re-checks its condition at each wake-up, and the waker's clock is the earliest it can
//! see the store. Each lock keeps a record of who waited for it, how long, and on which holder
//! ([`LockRecord`]), and who released it last (the CPU whose cache its line is in, for the backend
//! to price the line's transfer).
//!
//! Shared state is typed as the kernel shares it, so what CPUs share is visible in the types: a
//! [`SpinLock<T>`] owns the data it protects, reached only through [`crate::hw::SmpHw::with_lock`]
//! (the borrow lives inside a closure, between the lock and the unlock); a [`Shared<T>`] owns a
//! value and the cache line it sits on, read and written only through [`crate::hw::SmpHw`]'s calls,
//! which charge the line; a [`PerCpu<T>`] holds one copy per possible CPU, found by the CPU the
//! calls run on ([`crate::hw::Hw::cpu`], `smp_processor_id()`). To make a layer shareable: put what
//! the kernel keeps under a lock in that lock's `T`, what it keeps in atomics or `READ_ONCE`d words
//! in a `Shared`, what it keeps per CPU in a `PerCpu`, and take `&self` everywhere else.
//!
//! A per-CPU lock ([`SpinLock::per_cpu`], the kernel's locks of per-CPU data such as
//! `cpu_rcache->lock`) is taken and released by its own CPU, the first to take it, without waiting
//! its turn: another CPU takes it only on rare paths (an exhausted IOVA allocator flushing every
//! CPU's magazines), and then waits its turn as for any lock, finding it held only if its home CPU
//! is inside it in the order the CPUs ran.
//!
//! Invariants: exactly one CPU body runs at a time, and only it may suspend (a CPU's handle used
//! anywhere else panics rather than switch to a stack that is not running); a CPU at a turn point
//! resumes only when its clock is the least of the runnable CPUs' (by clock, then number); a lock's
//! waiters own it in arrival order, and only its owner may release it; a body ends holding no lock;
//! a blocked CPU's clock is set by the CPU that hands it the lock, never earlier than the clock it
//! blocked at. Same bodies, same bytes: nothing depends on host time, threads or addresses. One CPU
//! never switches: its body runs as plain code.

// A run that ends early (a deadlock) drops its suspended coroutines by unwinding their stacks.
#[cfg(panic = "abort")]
compile_error!(
    "smp needs panic = \"unwind\": a suspended CPU's coroutine is dropped by unwinding it"
);

use corosensei::stack::{DefaultStack, Stack, StackPointer};
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::ptr::NonNull;
use std::rc::Rc;

/// The frame a CPU's time spinning on a lock another CPU held is charged in, for a lock that
/// does not name one.
pub static SPIN_FRAME: &str = "(spinning on a held lock)";

/// The most CPUs one machine may have (`dma_map_benchmark`'s `DMA_MAP_MAX_THREADS` is 1024).
pub const MAX_CPUS: usize = 1024;

/// Stack of each CPU's coroutine: committed by the host only as it is touched.
const CPU_STACK_BYTES: usize = 8 << 20;

/// A CPU's coroutine stack: a [`DefaultStack`] whose top is `skew` bytes below the mapping's
/// (`64 × (cpu mod 64)`), so that the CPUs' stacks do not all start at the same offset in a
/// page. They would otherwise: each is its own mapping, page-aligned, and the top frames of
/// every CPU (the switch's saved registers, the body's locals, a CPU's whole model, which its
/// body owns) would fall in the same few sets of the host's L1 data cache, which is indexed by
/// the offset in the page and holds 8 lines a set; at 64 CPUs each switch then misses there.
struct CpuStack {
    stack: DefaultStack,
    skew: usize,
}

impl CpuStack {
    fn new(cpu: usize) -> CpuStack {
        CpuStack {
            stack: DefaultStack::new(CPU_STACK_BYTES).expect("a CPU's stack"),
            skew: (cpu % 64) * 64,
        }
    }
}

// SAFETY: the stack handed out, [limit, base - skew), lies within the DefaultStack's own, and its
// top keeps the stack alignment (the skew is a multiple of 64, the alignment 16 on every target
// corosensei supports).
unsafe impl Stack for CpuStack {
    fn base(&self) -> StackPointer {
        StackPointer::new(self.stack.base().get() - self.skew).expect("within the stack")
    }

    fn limit(&self) -> StackPointer {
        self.stack.limit()
    }

    #[cfg(windows)]
    fn teb_fields(&self) -> corosensei::stack::StackTebFields {
        self.stack.teb_fields()
    }

    #[cfg(windows)]
    fn update_teb_fields(&mut self, stack_limit: usize, guaranteed_stack_bytes: usize) {
        self.stack
            .update_teb_fields(stack_limit, guaranteed_stack_bytes)
    }
}

/// Why a CPU's body handed control back to the scheduler.
#[derive(Clone, Copy, Debug)]
enum Park {
    /// At a turn point behind an earlier CPU, which it took out of the ready tree to run
    /// next ([`Ready::hand_over`]): run that one now, this one again when it is the earliest.
    Behind(usize),
    /// Waiting for a lock or a store: run again once a release or a wake-up makes it runnable.
    Blocked,
}

/// Where a CPU is, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Running, or waiting in the ready tree to run.
    Runnable,
    Blocked,
    Done,
}

/// A CPU's place in the order of turns: its clock, then its number (ties go to the lower).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    clock: u64,
    cpu: usize,
}

impl Key {
    /// An empty slot's: after every CPU's.
    const NONE: Key = Key {
        clock: u64::MAX,
        cpu: usize::MAX,
    };

    /// The earlier of `self` and `other`: [`Ord::min`] without its branch. Which one it is
    /// depends on the CPUs' clocks, no pattern a branch predictor learns, so it is chosen by
    /// conditional moves rather than a branch that mispredicts at about every other level of a
    /// walk up the tree. (Two words, not one `u128`: the compiler turns a select of a `u128`
    /// back into a branch.)
    fn earlier(self, other: Key) -> Key {
        std::hint::select_unpredictable(other < self, other, self)
    }
}

/// The CPUs waiting to run by [`Key`], least first: a tournament tree over one slot per CPU,
/// each inner node the least of its two children, so that changing one slot is one walk from its
/// leaf to the root and the earliest CPU is the root.
///
/// The running CPU is not in it, so the root is the earliest of the *other* runnable CPUs: all a
/// turn compares against, read without a walk. A CPU that leaves the tree to run leaves its slot
/// empty; the CPU that parks behind it takes that slot and gives it its own empty one, so a
/// hand-over is one walk (not one to put the parked CPU in and one to take the next out), every
/// CPU always owns exactly one slot, and a blocked CPU made runnable fills its own.
#[derive(Debug)]
struct Ready {
    /// Leaves: the CPU count rounded up to a power of two.
    leaves: usize,
    /// `node[1]` is the root; node `j`'s children are `2j` and `2j + 1`; slot `s`'s leaf is
    /// `leaves + s`; [`Key::NONE`] in an empty slot. Sized for [`MAX_CPUS`] whatever the CPU
    /// count, so that an index reduced modulo its length is in bounds by its type and a walk
    /// checks none (only the first `2 × leaves` nodes are ever touched).
    node: Box<[Cell<Key>; Ready::NODES]>,
    /// The slot each CPU owns.
    slot: Box<[Cell<u32>]>,
}

impl Ready {
    const NODES: usize = 2 * MAX_CPUS;

    /// `n` CPUs, CPU `i` in slot `i`, all waiting to run at clock 0.
    fn new(n: usize) -> Ready {
        let leaves = n.next_power_of_two();
        let node: Box<[Cell<Key>]> = (0..Ready::NODES).map(|_| Cell::new(Key::NONE)).collect();
        let ready = Ready {
            leaves,
            node: node.try_into().expect("NODES nodes"),
            slot: (0..n as u32).map(Cell::new).collect(),
        };
        for cpu in 0..n {
            ready.fill(Key { clock: 0, cpu });
        }
        ready
    }

    /// The least key waiting: while a CPU runs, the earliest of the others'.
    fn least(&self) -> Key {
        self.node[1].get()
    }

    /// Slot `s` now holds `key`.
    fn set(&self, s: usize, key: Key) {
        // `leaves + s` is below NODES: the modulo, a mask, only tells the compiler so.
        let mut j = (self.leaves + s) % Ready::NODES;
        self.node[j].set(key);
        // Each node on the path is the least of the new key's side (carried up) and its
        // sibling's.
        let mut least = key;
        while j > 1 {
            least = least.earlier(self.node[j ^ 1].get());
            j /= 2;
            self.node[j].set(least);
        }
    }

    /// `key`'s CPU, not in the tree, waits to run, in its own slot.
    fn fill(&self, key: Key) {
        self.set(self.slot[key.cpu].get() as usize, key);
    }

    /// The earliest waiting CPU leaves the tree to run, its slot left empty.
    fn take_least(&self) -> Option<usize> {
        let w = self.least();
        if w == Key::NONE {
            return None;
        }
        self.set(self.slot[w.cpu].get() as usize, Key::NONE);
        Some(w.cpu)
    }

    /// `key`'s CPU, running, waits, later than the least key: the earliest waiting CPU leaves
    /// the tree to run, the parked one taking its slot and giving it its own. Returns that CPU.
    fn hand_over(&self, key: Key) -> usize {
        let w = self.least().cpu;
        debug_assert!(self.least() < key);
        let (mine, theirs) = (self.slot[key.cpu].get(), self.slot[w].get());
        self.slot[key.cpu].set(theirs);
        self.slot[w].set(mine);
        self.set(theirs as usize, key);
        w
    }
}

/// What every CPU of one run shares with the scheduler. Cells, not a `RefCell` around the
/// whole: one CPU's code runs at a time and none of it holds a borrow across a switch, so there
/// is nothing for a borrow flag to catch, and a turn is on every shared access.
#[derive(Debug)]
struct Sched {
    /// The runnable CPUs waiting to run: all but the running one.
    ready: Ready,
    state: Box<[Cell<State>]>,
    /// The clock a blocked CPU was made runnable at (the release that handed it the lock, the
    /// store that woke it): it goes on from there.
    woken_at: Box<[Cell<u64>]>,
    /// The CPU whose body runs now: only its coroutine may be suspended.
    running: Cell<Option<usize>>,
    /// Locks each CPU holds: none when its body ends.
    held: Box<[Cell<u32>]>,
}

impl Sched {
    /// `n` CPUs, all runnable at clock 0, none running.
    fn new(n: usize) -> Sched {
        Sched {
            ready: Ready::new(n),
            state: (0..n).map(|_| Cell::new(State::Runnable)).collect(),
            woken_at: (0..n).map(|_| Cell::new(0)).collect(),
            running: Cell::new(None),
            held: (0..n).map(|_| Cell::new(0)).collect(),
        }
    }

    /// Blocked CPU `i` is runnable from clock `t`.
    fn wake(&self, i: usize, t: u64) {
        debug_assert_eq!(self.state[i].get(), State::Blocked);
        self.state[i].set(State::Runnable);
        self.woken_at[i].set(t);
        self.ready.fill(Key { clock: t, cpu: i });
    }

    /// CPU `i` owns one more lock.
    fn took(&self, i: usize) {
        self.held[i].set(self.held[i].get() + 1);
    }

    /// CPU `i` released a lock.
    fn released(&self, i: usize) {
        self.held[i].set(self.held[i].get() - 1);
    }
}

/// One CPU as its body sees it: its number, and the way to wait its turn.
#[derive(Clone, Debug)]
pub struct Cpu {
    id: usize,
    link: Option<Link>,
}

#[derive(Clone, Debug)]
struct Link {
    sched: Rc<Sched>,
    /// The coroutine's yielder, valid for as long as its body runs: a `Cpu` is made inside the
    /// body and handed only to code that runs inside it.
    yielder: NonNull<Yielder<(), Park>>,
}

impl Cpu {
    /// A CPU alone: it never waits, and every lock it takes is free.
    pub fn alone() -> Cpu {
        Cpu { id: 0, link: None }
    }

    pub fn id(&self) -> usize {
        self.id
    }

    /// Hand control back to the scheduler, for the reason `why` gives (which may move the
    /// scheduler's state: only once this CPU is known to be the one running).
    fn park(&self, link: &Link, why: impl FnOnce(&Sched) -> Park) {
        // A `Cpu` carried out of its body (returned, or handed to another CPU) must never
        // suspend a coroutine that is not running: its yielder may be gone.
        assert_eq!(
            link.sched.running.get(),
            Some(self.id),
            "CPU {}'s handle used outside its own body",
            self.id
        );
        let p = why(&link.sched);
        // SAFETY: `running` is this CPU only while the scheduler resumes its coroutine, whose
        // body (and so its yielder) is alive until it returns.
        unsafe { link.yielder.as_ref() }.suspend(p);
    }

    /// Block until another CPU makes this one runnable again: returns the clock it goes on
    /// from.
    fn block(&self, link: &Link) -> u64 {
        self.park(link, |s| {
            s.state[self.id].set(State::Blocked);
            Park::Blocked
        });
        debug_assert_eq!(link.sched.state[self.id].get(), State::Runnable);
        link.sched.woken_at[self.id].get()
    }

    /// Wait until this CPU, at clock `now`, is the earliest of the runnable CPUs: everything any
    /// CPU does to shared state before `now` has then been done.
    #[inline]
    pub fn turn(&self, now: u64) {
        let Some(link) = &self.link else { return };
        let key = Key {
            clock: now,
            cpu: self.id,
        };
        // The tree holds the other runnable CPUs: when none is earlier, this one goes on
        // without touching it.
        if key < link.sched.ready.least() {
            return;
        }
        self.park_behind(link, key);
    }

    /// Park at `key` behind the earliest runnable CPU, which runs next. Out of line: the check
    /// above is inlined at every shared access, the switch's saving of registers is not.
    #[inline(never)]
    fn park_behind(&self, link: &Link, key: Key) {
        self.park(link, |s| Park::Behind(s.ready.hand_over(key)));
    }

    /// Wait until another CPU wakes `q` ([`Cpu::wake_all`]): returns the clock of the wake-up,
    /// never before `now`. The caller checks its condition first, at its turn, and again after
    /// every wake-up: nothing runs between the check and the wait, so no wake-up is lost.
    pub fn wait(&self, q: &WaitQueue, now: u64) -> u64 {
        let Some(link) = &self.link else {
            panic!("a CPU alone waits for a store no other CPU will make");
        };
        q.waiters.borrow_mut().push((self.id, now));
        self.block(link)
    }

    /// Wake every CPU waiting on `q`: each goes on from `now`, or from when it began waiting if
    /// that is later.
    pub fn wake_all(&self, q: &WaitQueue, now: u64) {
        let Some(link) = &self.link else { return };
        // Drained in place: the queue keeps its buffer for the next waiters.
        for (i, since) in q.waiters.borrow_mut().drain(..) {
            link.sched.wake(i, now.max(since));
        }
    }

    /// `spin_lock(lock)` at clock `now`: returns the clock at which this CPU owns it, `now` if it
    /// was free, else the time its last holder released it to this CPU.
    pub fn spin_lock(&self, lock: &RawSpinLock, now: u64) -> u64 {
        lock.acquired.set(lock.acquired.get() + 1);
        let Some(link) = &self.link else {
            return now;
        };
        if lock.per_cpu {
            let home = lock.home.get().unwrap_or(self.id);
            lock.home.set(Some(home));
            if home == self.id && lock.owner.get().is_none() {
                lock.owner.set(Some(self.id));
                link.sched.took(self.id);
                return now;
            }
        }
        self.turn(now);
        if lock.owner.get().is_none() {
            lock.owner.set(Some(self.id));
            link.sched.took(self.id);
            return now;
        }
        lock.waiters.borrow_mut().push_back(self.id);
        let owned = self.block(link);
        assert_eq!(
            lock.owner.get(),
            Some(self.id),
            "a lock handed to its waiter"
        );
        let from = lock.line.last_writer().map_or(self.id, |l| l.cpu);
        lock.record.borrow_mut().waited(self.id, from, owned - now);
        owned
    }

    /// `spin_unlock(lock)` at clock `now`: the first waiter, if any, owns it from `now`.
    pub fn spin_unlock(&self, lock: &RawSpinLock, now: u64) {
        let Some(link) = &self.link else { return };
        if !(lock.per_cpu && lock.home.get() == Some(self.id) && lock.waiters.borrow().is_empty()) {
            self.turn(now);
        }
        assert_eq!(
            lock.owner.get(),
            Some(self.id),
            "unlock by a CPU that does not own it"
        );
        let next = lock.waiters.borrow_mut().pop_front();
        lock.owner.set(next);
        link.sched.released(self.id);
        if let Some(n) = next {
            link.sched.took(n);
            link.sched.wake(n, now);
        }
    }
}

/// Where a shared line was last written: the CPU that wrote it, and that CPU's node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastOwner {
    pub cpu: usize,
    pub node: u32,
}

/// A cache line CPUs write in turn (a lock word, an atomic index): which CPU had it exclusive
/// last, so that the next CPU to touch it pays for its transfer from that CPU's cache, which
/// CPUs have read it since (they hold a copy, and read it again for nothing), and how it is
/// handed on: one transfer at a time, in the order the CPUs ask for it. A transfer's time is
/// the request's way to the holder and the data's way back; the holder keeps the line until
/// the request reaches it, half-way, so a CPU that got the line keeps it at least that long
/// after the next CPU's transfer starts ([`SharedLine::kept_by`]).
#[derive(Debug)]
pub struct SharedLine {
    /// What the kernel keeps in it (`cmdq->q.llq`, `cmdq->owner_prod`).
    pub name: &'static str,
    last: Cell<Option<LastOwner>>,
    /// Writes so far: a CPU that read the line sees, by this, whether it changed since.
    version: Cell<u64>,
    /// The CPUs holding a copy of the current contents, one bit each: CPUs 0 to 63 in a word of
    /// the line's own, so that on a machine of up to 64 CPUs a read or a write of the line
    /// touches one word and follows no pointer; the CPUs above, a word for each 64 in `more`.
    sharers: Cell<u64>,
    /// CPU `64 (k + 1) + b`'s bit is bit `b` of `more[k]`; the words past its length are 0, so
    /// a write empties it without walking it.
    more: RefCell<Vec<u64>>,
    /// When the line's last transfer ends: one moving to another CPU starts no earlier.
    free_at: Cell<u64>,
    /// The CPU the last transfer went to, and by CPU when the request of the transfer asked for
    /// after its own reaches it (`u64::MAX` while none is asked for): until then it has the
    /// line.
    tail: Cell<Option<usize>>,
    loses_at: RefCell<Vec<u64>>,
}

impl SharedLine {
    pub const fn new(name: &'static str) -> SharedLine {
        SharedLine {
            name,
            last: Cell::new(None),
            version: Cell::new(0),
            sharers: Cell::new(0),
            more: RefCell::new(Vec::new()),
            free_at: Cell::new(0),
            tail: Cell::new(None),
            loses_at: RefCell::new(Vec::new()),
        }
    }

    /// A transfer of the line to `cpu`, asked for at `now`, taking `ps`: it starts once the
    /// line's previous transfer has ended (a line is in one place at a time, and moves in the
    /// order the CPUs ask for it). The CPU it went to before loses it when this request reaches
    /// it, half-way through. Returns when it starts.
    pub fn transfer(&self, cpu: usize, now: u64, ps: u64) -> u64 {
        let start = now.max(self.free_at.get());
        self.free_at.set(start.saturating_add(ps));
        let mut loses_at = self.loses_at.borrow_mut();
        if let Some(prev) = self.tail.replace(Some(cpu)) {
            loses_at[prev] = start.saturating_add(ps / 2);
        }
        if loses_at.len() <= cpu {
            loses_at.resize(cpu + 1, u64::MAX);
        }
        loses_at[cpu] = u64::MAX;
        start
    }

    /// Whether `cpu`, which had the line exclusive last, still has it at `now`: no request
    /// made since its own has reached it by then.
    pub fn kept_by(&self, cpu: usize, now: u64) -> bool {
        self.last.get().is_some_and(|l| l.cpu == cpu)
            && self.loses_at.borrow().get(cpu).is_none_or(|&t| now < t)
    }

    /// `cpu`, on `node`, has the line exclusive without writing it (a `cmpxchg` that failed):
    /// the other copies are gone, the contents unchanged.
    pub fn taken_by(&self, cpu: usize, node: u32) {
        self.last.set(Some(LastOwner { cpu, node }));
        self.forget_sharers();
    }

    /// The CPU that wrote it last, and its node.
    pub fn last_writer(&self) -> Option<LastOwner> {
        self.last.get()
    }

    /// How many times it has been written.
    pub fn version(&self) -> u64 {
        self.version.get()
    }

    /// `cpu`, on `node`, writes it: the line is now in that CPU's cache alone.
    pub fn written_by(&self, cpu: usize, node: u32) {
        self.last.set(Some(LastOwner { cpu, node }));
        self.version.set(self.version.get() + 1);
        self.forget_sharers();
    }

    /// No CPU holds a copy any more: the line is in one cache alone.
    fn forget_sharers(&self) {
        self.sharers.set(0);
        self.more.borrow_mut().clear();
    }

    /// Whether `cpu` holds a copy of the current contents.
    pub fn shared_by(&self, cpu: usize) -> bool {
        let word = match cpu / 64 {
            0 => self.sharers.get(),
            k => self.more.borrow().get(k - 1).copied().unwrap_or(0),
        };
        word & (1 << (cpu % 64)) != 0
    }

    /// `cpu` now holds a copy of the current contents.
    pub fn read_by(&self, cpu: usize) {
        let bit = 1 << (cpu % 64);
        match cpu / 64 {
            0 => self.sharers.set(self.sharers.get() | bit),
            k => {
                let mut more = self.more.borrow_mut();
                if more.len() < k {
                    more.resize(k, 0);
                }
                more[k - 1] |= bit;
            }
        }
    }
}

/// What one lock saw in a run: how often it was taken, how often a CPU found it held, and the
/// time spun, in total and by (waiter, the CPU that handed it over).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockRecord {
    pub acquired: u64,
    pub contended: u64,
    pub wait_ps: u64,
    pub max_wait_ps: u64,
    pub by_pair: BTreeMap<(usize, usize), u64>,
}

impl LockRecord {
    fn waited(&mut self, waiter: usize, holder: usize, ps: u64) {
        self.contended += 1;
        self.wait_ps = self.wait_ps.saturating_add(ps);
        self.max_wait_ps = self.max_wait_ps.max(ps);
        let e = self.by_pair.entry((waiter, holder)).or_default();
        *e = e.saturating_add(ps);
    }

    /// Add `other`'s figures (the same lock's, or another's of the same name).
    pub fn merge(&mut self, other: &LockRecord) {
        self.acquired += other.acquired;
        self.contended += other.contended;
        self.wait_ps = self.wait_ps.saturating_add(other.wait_ps);
        self.max_wait_ps = self.max_wait_ps.max(other.max_wait_ps);
        for (k, v) in &other.by_pair {
            let e = self.by_pair.entry(*k).or_default();
            *e = e.saturating_add(*v);
        }
    }
}

/// CPUs waiting for another CPU's store to a shared line.
#[derive(Debug, Default)]
pub struct WaitQueue {
    /// Each waiter and the clock it began waiting at.
    waiters: RefCell<Vec<(usize, u64)>>,
}

impl WaitQueue {
    pub fn new() -> WaitQueue {
        WaitQueue::default()
    }
}

/// The lock word of a [`SpinLock`]: who owns it and who waits, in arrival order. Only a
/// [`SpinLock`] makes one, and only [`crate::hw::SmpHw::with_lock`] takes and releases it, so no
/// lock is taken without the data it protects, nor left held.
#[derive(Debug)]
pub struct RawSpinLock {
    /// The kernel's name for it (`iova_rbtree_lock`, `cmdq->lock`).
    pub name: &'static str,
    /// The frame a CPU's time spinning on it is charged in.
    pub spin_frame: &'static str,
    owner: Cell<Option<usize>>,
    waiters: RefCell<VecDeque<usize>>,
    /// The lock word's line: written by every CPU that takes or releases it.
    pub line: SharedLine,
    acquired: Cell<u64>,
    /// Its waits (`acquired` is kept apart: a CPU alone counts without borrowing).
    record: RefCell<LockRecord>,
    /// A lock of one CPU's data, and that CPU once it has taken it (see the module header).
    per_cpu: bool,
    home: Cell<Option<usize>>,
}

impl RawSpinLock {
    /// A lock called `name`, whose waiters' spinning is charged in the frame `spin_frame`.
    const fn named(name: &'static str, spin_frame: &'static str) -> RawSpinLock {
        RawSpinLock {
            name,
            spin_frame,
            owner: Cell::new(None),
            waiters: RefCell::new(VecDeque::new()),
            line: SharedLine::new(name),
            acquired: Cell::new(0),
            per_cpu: false,
            home: Cell::new(None),
            record: RefCell::new(LockRecord {
                acquired: 0,
                contended: 0,
                wait_ps: 0,
                max_wait_ps: 0,
                by_pair: BTreeMap::new(),
            }),
        }
    }

    /// Whether a CPU holds it.
    pub fn is_locked(&self) -> bool {
        self.owner.get().is_some()
    }

    /// What the lock saw so far.
    pub fn record(&self) -> LockRecord {
        LockRecord {
            acquired: self.acquired.get(),
            ..self.record.borrow().clone()
        }
    }
}

/// A `spinlock_t` and the data it protects, as one value: the data is reached only through
/// [`crate::hw::SmpHw::with_lock`], which takes the lock (waiting for it in the machine's order,
/// the spinning charged), lends the data to a closure and releases the lock when the closure
/// returns. The borrow lives inside the closure, so a CPU that waits for a lock holds no borrow of
/// its data, and none outlives the unlock.
#[derive(Debug)]
pub struct SpinLock<T = ()> {
    raw: RawSpinLock,
    data: RefCell<T>,
}

impl<T> SpinLock<T> {
    /// A lock called `name` around `data`, whose waiters' spinning is charged in the frame
    /// `spin_frame`.
    pub const fn named(name: &'static str, spin_frame: &'static str, data: T) -> SpinLock<T> {
        SpinLock {
            raw: RawSpinLock::named(name, spin_frame),
            data: RefCell::new(data),
        }
    }

    /// A lock of one CPU's data ([`PerCpu`]), taken by its home CPU without waiting its turn
    /// (see the module header).
    pub fn per_cpu(name: &'static str, spin_frame: &'static str, data: T) -> SpinLock<T> {
        let mut l = SpinLock::named(name, spin_frame, data);
        l.raw.per_cpu = true;
        l
    }

    /// The kernel's name for it.
    pub fn name(&self) -> &'static str {
        self.raw.name
    }

    /// Whether a CPU holds it.
    pub fn is_locked(&self) -> bool {
        self.raw.is_locked()
    }

    /// What the lock saw so far.
    pub fn record(&self) -> LockRecord {
        self.raw.record()
    }

    /// The lock word and the data, for [`crate::hw::SmpHw::with_lock`] alone.
    pub(crate) fn parts(&self) -> (&RawSpinLock, &RefCell<T>) {
        (&self.raw, &self.data)
    }

    /// The data without taking the lock, charging nothing: for reports and the model's own
    /// guards, never for a kernel access (a CPU inside the lock may hold it borrowed).
    pub fn peek(&self) -> std::cell::Ref<'_, T> {
        self.data.borrow()
    }

    /// The data without taking the lock, before any CPU shares it (setup) or for the model's
    /// own bookkeeping outside the machine's order; never for a kernel access.
    pub fn peek_mut(&self) -> std::cell::RefMut<'_, T> {
        self.data.borrow_mut()
    }
}

impl SpinLock<()> {
    /// A lock that protects no data of the model's (only its own word), by a generic name.
    pub fn new() -> SpinLock<()> {
        SpinLock::named("spinlock", SPIN_FRAME, ())
    }
}

impl Default for SpinLock<()> {
    fn default() -> SpinLock<()> {
        SpinLock::new()
    }
}

/// A value on a cache line of its own that the machine's CPUs read and write in turn (an
/// `atomic_t`, the `llq` word, `owner_prod`): read and written only through [`crate::hw::SmpHw`]'s
/// calls, which charge the line's transfer from the CPU that wrote it last.
#[derive(Debug)]
pub struct Shared<T> {
    line: SharedLine,
    value: RefCell<T>,
}

impl<T> Shared<T> {
    /// `value` on a line called `name` (what the kernel keeps in it).
    pub const fn new(name: &'static str, value: T) -> Shared<T> {
        Shared {
            line: SharedLine::new(name),
            value: RefCell::new(value),
        }
    }

    /// The line, for the backend that prices it.
    pub fn line(&self) -> &SharedLine {
        &self.line
    }

    /// The value, for [`crate::hw::SmpHw`]'s calls alone.
    pub(crate) fn cell(&self) -> &RefCell<T> {
        &self.value
    }

    /// The value without a load, charging nothing: for reports, for a value this CPU's last
    /// access brought into its cache, and for a condition a CPU spinning on the line re-checks
    /// ([`crate::hw::SmpHw::cond_load`] charges the line).
    pub fn peek(&self) -> std::cell::Ref<'_, T> {
        self.value.borrow()
    }

    /// The value without a store, charging nothing: for setup before CPUs share it and the
    /// model's own teardown, never for a kernel access.
    pub fn peek_mut(&self) -> std::cell::RefMut<'_, T> {
        self.value.borrow_mut()
    }
}

/// Data of which each CPU of the machine has its own copy (`DEFINE_PER_CPU`, `alloc_percpu`),
/// indexed by the CPU the calls run on ([`crate::hw::Hw::cpu`], the kernel's
/// `smp_processor_id()`), and walked whole by the kernel's `for_each_possible_cpu` loops.
#[derive(Debug)]
pub struct PerCpu<T> {
    cpus: Box<[T]>,
}

impl<T> PerCpu<T> {
    /// One `T` for each of `ncpus` possible CPUs (at least one).
    pub fn new(ncpus: usize, f: impl FnMut(usize) -> T) -> PerCpu<T> {
        PerCpu {
            cpus: (0..ncpus.max(1)).map(f).collect(),
        }
    }

    /// `per_cpu_ptr(.., cpu)`.
    pub fn get(&self, cpu: usize) -> Option<&T> {
        self.cpus.get(cpu)
    }

    /// The possible CPUs' copies, in CPU order (`for_each_possible_cpu`).
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.cpus.iter()
    }

    /// How many possible CPUs it has a copy for.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }
}

/// A run that cannot go on: every CPU left waits for a lock none of the others will release.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("every CPU still running waits for a lock: CPUs {0:?}")]
pub struct Deadlock(pub Vec<usize>);

/// One CPU's body: what it runs, given its [`Cpu`]. It may borrow from its caller (`'a`): the
/// bodies run, and their coroutines are dropped, before [`run`] returns.
pub type Body<'a, T> = Box<dyn FnOnce(Cpu) -> T + 'a>;

/// Run `bodies`, one per CPU (CPU `i` runs `bodies[i]`), to their ends in simulated-time order;
/// their results in CPU order. One body runs as plain code, with [`Cpu::alone`].
pub fn run<'a, T: 'a>(bodies: Vec<Body<'a, T>>) -> Result<Vec<T>, Deadlock> {
    assert!(bodies.len() <= MAX_CPUS, "callers check the CPU count");
    if bodies.len() == 1 {
        let body = bodies.into_iter().next().expect("one body");
        return Ok(vec![body(Cpu::alone())]);
    }
    let n = bodies.len();
    let sched = Rc::new(Sched::new(n));
    let mut cpus: Vec<Coroutine<(), Park, T, CpuStack>> = bodies
        .into_iter()
        .enumerate()
        .map(|(id, body)| {
            let sched = Rc::clone(&sched);
            let stack = CpuStack::new(id);
            let f = move |y: &Yielder<(), Park>, ()| {
                body(Cpu {
                    id,
                    link: Some(Link {
                        sched,
                        yielder: NonNull::from(y),
                    }),
                })
            };
            // SAFETY: what `body` borrows lives for 'a, beyond this call; every coroutine is
            // held in `cpus`, a local that is dropped (unwinding any suspended body) before
            // `run` returns, and never forgotten.
            unsafe { Coroutine::with_stack_unchecked(stack, f) }
        })
        .collect();
    let mut out: Vec<Option<T>> = cpus.iter().map(|_| None).collect();
    let mut next = sched.ready.take_least();
    loop {
        let Some(i) = next else {
            let blocked: Vec<usize> = (0..n)
                .filter(|&i| sched.state[i].get() == State::Blocked)
                .collect();
            if blocked.is_empty() {
                break;
            }
            return Err(Deadlock(blocked));
        };
        sched.running.set(Some(i));
        let step = cpus[i].resume(());
        sched.running.set(None);
        next = match step {
            // It parked behind the CPU it took out of the tree for us.
            CoroutineResult::Yield(Park::Behind(w)) => Some(w),
            CoroutineResult::Yield(Park::Blocked) => {
                debug_assert_eq!(sched.state[i].get(), State::Blocked);
                sched.ready.take_least()
            }
            CoroutineResult::Return(r) => {
                assert_eq!(
                    sched.held[i].get(),
                    0,
                    "CPU {i}'s body ended holding a lock"
                );
                sched.state[i].set(State::Done);
                out[i] = Some(r);
                sched.ready.take_least()
            }
        };
    }
    Ok(out
        .into_iter()
        .map(|r| r.expect("every CPU finished"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU that takes `lock` `n` times: `before` ps of its own work, then the lock, `hold` ps
    /// inside it, the unlock. Returns each acquisition's (arrival, owned-from) and its end clock.
    fn locker(
        lock: Rc<SpinLock>,
        n: usize,
        before: u64,
        hold: u64,
    ) -> Body<'static, (Vec<(u64, u64)>, u64)> {
        Box::new(move |cpu: Cpu| {
            let mut now = 0;
            let mut got = Vec::new();
            for _ in 0..n {
                now += before;
                let at = cpu.spin_lock(&lock.raw, now);
                got.push((now, at));
                now = at + hold;
                cpu.spin_unlock(&lock.raw, now);
            }
            (got, now)
        })
    }

    /// Two CPUs arrive together: CPU 0 (the lower number) owns the lock first, CPU 1 waits
    /// exactly CPU 0's critical section, and from then on they alternate, each waiting the
    /// overlap of its critical section with the other's.
    #[test]
    fn two_cpus_wait_exactly_the_overlap() {
        let lock = Rc::new(SpinLock::new());
        let r = run(vec![
            locker(Rc::clone(&lock), 3, 100, 50),
            locker(Rc::clone(&lock), 3, 100, 50),
        ])
        .unwrap();
        // By hand: CPU 0 holds [100, 150); CPU 1 arrives at 100, owns [150, 200). CPU 0 arrives
        // at 250, free: [250, 300); CPU 1 arrives at 300, free: [300, 350); CPU 0 at 400, [400,
        // 450); CPU 1 at 450, [450, 500).
        assert_eq!(r[0].0, [(100, 100), (250, 250), (400, 400)]);
        assert_eq!(r[1].0, [(100, 150), (300, 300), (450, 450)]);
        assert_eq!((r[0].1, r[1].1), (450, 500));
        assert!(!lock.is_locked());
        // The lock's record: six acquisitions, one found it held, for 50.
        let rec = lock.record();
        assert_eq!((rec.acquired, rec.contended, rec.wait_ps), (6, 1, 50));
        assert_eq!(
            rec.by_pair.get(&(1, 1)),
            Some(&50),
            "no backend named the holder"
        );
    }

    /// A CPU waiting for another's store goes on at the store (or at its own clock, if later),
    /// re-checks, and waits again when the condition does not hold yet: CPU 1 wants the value
    /// 2, which CPU 0 stores at 300 after storing 1 at 100.
    #[test]
    fn a_waiter_goes_on_at_the_store_that_wakes_it_and_checks_again() {
        let q = Rc::new(WaitQueue::new());
        let v = Rc::new(Cell::new(0u64));
        let (q0, v0, q1, v1) = (Rc::clone(&q), Rc::clone(&v), Rc::clone(&q), Rc::clone(&v));
        let storer: Body<u64> = Box::new(move |cpu| {
            for (t, x) in [(100, 1), (300, 2)] {
                cpu.turn(t);
                v0.set(x);
                cpu.wake_all(&q0, t);
            }
            300
        });
        let waiter: Body<u64> = Box::new(move |cpu| {
            let mut now = 50;
            let mut wakes = 0;
            cpu.turn(now);
            while v1.get() != 2 {
                now = cpu.wait(&q1, now);
                wakes += 1;
            }
            assert_eq!(wakes, 2);
            now
        });
        assert_eq!(run(vec![storer, waiter]).unwrap(), [300, 300]);
    }

    /// A line moves one transfer at a time, in the order asked: a transfer asked for while the
    /// line is on its way elsewhere starts when that one ends; one asked for later, at once.
    #[test]
    fn a_line_moves_one_transfer_at_a_time() {
        let line = SharedLine::new("llq");
        assert_eq!(line.transfer(1, 100, 50), 100);
        assert_eq!(line.transfer(2, 120, 50), 150);
        assert_eq!(line.transfer(3, 130, 40), 200);
        assert_eq!(line.transfer(1, 500, 50), 500);
    }

    /// A line's copies: each CPU that read it holds one until the next write, on either side
    /// of the 64 CPUs kept in the line's own word.
    #[test]
    fn a_write_drops_every_copy_of_a_line() {
        let line = SharedLine::new("llq");
        let cpus = [0, 5, 63, 64, 130, 1023];
        for round in 0..2 {
            for &c in &cpus {
                assert!(!line.shared_by(c), "round {round}: CPU {c} before its read");
                line.read_by(c);
                assert!(line.shared_by(c), "round {round}: CPU {c} after its read");
            }
            assert!(!line.shared_by(1) && !line.shared_by(129) && !line.shared_by(1022));
            line.written_by(7, 0);
        }
        assert_eq!(line.version(), 2);
    }

    /// Two locks, one per CPU (swiotlb's areas): neither ever waits.
    #[test]
    fn cpus_on_their_own_locks_never_wait() {
        let r = run(vec![
            locker(Rc::new(SpinLock::new()), 4, 100, 50),
            locker(Rc::new(SpinLock::new()), 4, 100, 50),
        ])
        .unwrap();
        for (got, end) in &r {
            assert!(got.iter().all(|(a, o)| a == o));
            assert_eq!(*end, 4 * 150);
        }
    }

    /// Three CPUs queue on one lock: it goes to them in the order they arrived, not by number
    /// (CPU 0 arrives between CPUs 2 and 1), and a late arrival that finds it free takes it at
    /// once.
    #[test]
    fn waiters_own_the_lock_in_arrival_order() {
        let lock = Rc::new(SpinLock::new());
        let r = run(vec![
            locker(Rc::clone(&lock), 1, 20, 100),
            locker(Rc::clone(&lock), 1, 30, 100),
            locker(Rc::clone(&lock), 1, 10, 100),
            locker(Rc::clone(&lock), 1, 400, 100),
        ])
        .unwrap();
        // CPU 2 first at 10, [10, 110); CPU 0 arrived 20, [110, 210); CPU 1 arrived 30,
        // [210, 310); CPU 3 at 400 finds it free.
        assert_eq!(r[2].0, [(10, 10)]);
        assert_eq!(r[0].0, [(20, 110)]);
        assert_eq!(r[1].0, [(30, 210)]);
        assert_eq!(r[3].0, [(400, 400)]);
    }

    /// A CPU that releases and at once asks again, while another waits, queues behind the
    /// waiter: the lock is handed over, never taken back by the releaser.
    #[test]
    fn a_release_hands_the_lock_to_the_waiter_before_the_releaser_asks_again() {
        let lock = Rc::new(SpinLock::new());
        let r = run(vec![
            locker(Rc::clone(&lock), 2, 0, 50),
            locker(Rc::clone(&lock), 1, 10, 50),
        ])
        .unwrap();
        // CPU 0 holds [0, 50); CPU 1 waits from 10 and owns [50, 100); CPU 0 asked again at
        // 50 and owns [100, 150).
        assert_eq!(r[0].0, [(0, 0), (50, 100)]);
        assert_eq!(r[1].0, [(10, 50)]);
    }

    /// A body that ends holding a lock is a modelling error, said at once.
    #[test]
    #[should_panic(expected = "ended holding a lock")]
    fn a_body_may_not_end_holding_a_lock() {
        let lock = Rc::new(SpinLock::new());
        let l = Rc::clone(&lock);
        let holds: Body<u64> = Box::new(move |cpu| cpu.spin_lock(&l.raw, 0));
        let other: Body<u64> = Box::new(|_| 0);
        let _ = run(vec![holds, other]);
    }

    /// One CPU runs as plain code and every lock is free; many CPUs give the same bytes twice.
    #[test]
    fn one_cpu_is_plain_and_many_are_deterministic() {
        let one = run(vec![locker(Rc::new(SpinLock::new()), 5, 10, 10)]).unwrap();
        assert_eq!(one[0].1, 100);
        let many = || {
            let lock = Rc::new(SpinLock::new());
            let bodies: Vec<_> = (0..64u64)
                .map(|i| locker(Rc::clone(&lock), 20, 7 + i % 5, 3 + i % 7))
                .collect();
            run(bodies).unwrap()
        };
        let a = many();
        assert_eq!(a, many());
        // The lock is never held twice at once: sorted by owned-from, each section ends before
        // the next begins.
        let mut sections: Vec<(u64, u64)> = a
            .iter()
            .enumerate()
            .flat_map(|(i, (got, _))| got.iter().map(move |&(_, o)| (o, o + 3 + i as u64 % 7)))
            .collect();
        sections.sort();
        assert!(sections.windows(2).all(|w| w[0].1 <= w[1].0));
    }

    /// Two CPUs each holding the lock the other wants: the run says so.
    #[test]
    fn crossed_locks_are_a_deadlock() {
        let (a, b) = (Rc::new(SpinLock::new()), Rc::new(SpinLock::new()));
        let (a0, b0, a1, b1) = (Rc::clone(&a), Rc::clone(&b), Rc::clone(&a), Rc::clone(&b));
        let zero: Body<u64> = Box::new(move |cpu| {
            let t = cpu.spin_lock(&a0.raw, 0);
            cpu.spin_lock(&b0.raw, t + 10)
        });
        let one: Body<u64> = Box::new(move |cpu| {
            let t = cpu.spin_lock(&b1.raw, 0);
            cpu.spin_lock(&a1.raw, t + 10)
        });
        assert_eq!(run(vec![zero, one]), Err(Deadlock(vec![0, 1])));
    }
}
