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

use corosensei::stack::DefaultStack;
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

/// Why a CPU's body handed control back to the scheduler.
#[derive(Clone, Copy, Debug)]
enum Park {
    /// At a turn point with this clock: run again when it is the earliest.
    At(u64),
    /// Waiting for a lock: run again when a release hands it over.
    Blocked,
}

/// Where a CPU is, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Runnable(u64),
    Blocked,
    Done,
}

/// The runnable CPUs by (clock, number), smallest first: a tournament tree over one leaf per
/// CPU, each inner node the least of its two children, so that changing one CPU's place is
/// one walk from its leaf to the root and the earliest CPU is the root.
#[derive(Debug)]
struct Ready {
    /// Leaves: the CPU count rounded up to a power of two.
    leaves: usize,
    /// `node[1]` is the root; node `j`'s children are `2j` and `2j + 1`; CPU `i`'s leaf is
    /// `leaves + i`. A key is `(clock << 64) | number`, [`Ready::NONE`] for a CPU that is not
    /// waiting to run.
    node: Vec<u128>,
}

impl Ready {
    const NONE: u128 = u128::MAX;

    fn new(n: usize) -> Ready {
        let leaves = n.next_power_of_two();
        Ready {
            leaves,
            node: vec![Ready::NONE; 2 * leaves],
        }
    }

    fn key(t: u64, i: usize) -> u128 {
        (u128::from(t) << 64) | i as u128
    }

    /// CPU `i`'s key is now `key`.
    fn set(&mut self, i: usize, key: u128) {
        let mut j = self.leaves + i;
        self.node[j] = key;
        // Each node on the path is the least of the new key's side (carried up) and its
        // sibling's.
        let mut least = key;
        while j > 1 {
            least = least.min(self.node[j ^ 1]);
            j /= 2;
            self.node[j] = least;
        }
    }

    /// The least key of every CPU but `i`: the siblings along `i`'s path to the root.
    fn least_but(&self, i: usize) -> u128 {
        let mut j = self.leaves + i;
        let mut least = Ready::NONE;
        while j > 1 {
            least = least.min(self.node[j ^ 1]);
            j /= 2;
        }
        least
    }

    /// The earliest CPU waiting to run.
    fn least(&self) -> Option<usize> {
        let k = self.node[1];
        (k != Ready::NONE).then_some(k as u64 as usize)
    }
}

/// What every CPU of one run shares with the scheduler.
#[derive(Debug)]
struct Sched {
    state: Vec<State>,
    /// The runnable CPUs' keys. The running CPU's leaf keeps the key it was resumed with until
    /// it parks, blocks or ends: its own turns compare against the others'
    /// ([`Ready::least_but`]), and the root is read only when no CPU runs.
    ready: Ready,
    /// The CPU whose body runs now: only its coroutine may be suspended.
    running: Option<usize>,
    /// Locks each CPU holds: none when its body ends.
    held: Vec<u32>,
}

impl Sched {
    /// Make CPU `i` runnable at clock `t`, waiting to be resumed.
    fn ready(&mut self, i: usize, t: u64) {
        self.state[i] = State::Runnable(t);
        self.ready.set(i, Ready::key(t, i));
    }

    /// CPU `i` is not waiting to run (blocked, or done).
    fn leave(&mut self, i: usize, state: State) {
        self.state[i] = state;
        self.ready.set(i, Ready::NONE);
    }

    /// Whether CPU `me` (running) at clock `now` is first: no other runnable CPU is earlier.
    fn first(&self, me: usize, now: u64) -> bool {
        Ready::key(now, me) < self.ready.least_but(me)
    }

    /// CPU `i` parked at clock `t` because another runnable CPU was earlier: the CPU to resume
    /// next, the earliest now.
    fn swap_first(&mut self, i: usize, t: u64) -> usize {
        self.ready(i, t);
        self.ready.least().unwrap_or(i)
    }

    /// The runnable CPU to resume next: the earliest, then the lowest number.
    fn next(&self) -> Option<usize> {
        self.ready.least()
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
    sched: Rc<RefCell<Sched>>,
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

    fn park(&self, link: &Link, p: Park) {
        // A `Cpu` carried out of its body (returned, or handed to another CPU) must never
        // suspend a coroutine that is not running: its yielder may be gone.
        assert_eq!(
            link.sched.borrow().running,
            Some(self.id),
            "CPU {}'s handle used outside its own body",
            self.id
        );
        // SAFETY: `running` is this CPU only while the scheduler resumes its coroutine, whose
        // body (and so its yielder) is alive until it returns.
        unsafe { link.yielder.as_ref() }.suspend(p);
    }

    /// Wait until this CPU, at clock `now`, is the earliest of the runnable CPUs: everything any
    /// CPU does to shared state before `now` has then been done.
    pub fn turn(&self, now: u64) {
        let Some(link) = &self.link else { return };
        let first = {
            let mut s = link.sched.borrow_mut();
            s.state[self.id] = State::Runnable(now);
            s.first(self.id, now)
        };
        if !first {
            self.park(link, Park::At(now));
        }
    }

    /// Wait until another CPU wakes `q` ([`Cpu::wake_all`]): returns the clock of the wake-up,
    /// never before `now`. The caller checks its condition first, at its turn, and again after
    /// every wake-up: nothing runs between the check and the wait, so no wake-up is lost.
    pub fn wait(&self, q: &WaitQueue, now: u64) -> u64 {
        let Some(link) = &self.link else {
            panic!("a CPU alone waits for a store no other CPU will make");
        };
        q.waiters.borrow_mut().push((self.id, now));
        link.sched.borrow_mut().leave(self.id, State::Blocked);
        self.park(link, Park::Blocked);
        match link.sched.borrow().state[self.id] {
            State::Runnable(t) => t,
            s => unreachable!("a woken CPU is runnable, found {s:?}"),
        }
    }

    /// Wake every CPU waiting on `q`: each goes on from `now`, or from when it began waiting if
    /// that is later.
    pub fn wake_all(&self, q: &WaitQueue, now: u64) {
        let Some(link) = &self.link else { return };
        let woken = std::mem::take(&mut *q.waiters.borrow_mut());
        let mut s = link.sched.borrow_mut();
        for (i, since) in woken {
            s.ready(i, now.max(since));
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
                link.sched.borrow_mut().held[self.id] += 1;
                return now;
            }
        }
        self.turn(now);
        if lock.owner.get().is_none() {
            lock.owner.set(Some(self.id));
            link.sched.borrow_mut().held[self.id] += 1;
            return now;
        }
        lock.waiters.borrow_mut().push_back(self.id);
        link.sched.borrow_mut().leave(self.id, State::Blocked);
        self.park(link, Park::Blocked);
        assert_eq!(
            lock.owner.get(),
            Some(self.id),
            "a lock handed to its waiter"
        );
        let owned = match link.sched.borrow().state[self.id] {
            State::Runnable(t) => t,
            s => unreachable!("a CPU handed a lock is runnable, found {s:?}"),
        };
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
        let mut s = link.sched.borrow_mut();
        s.held[self.id] -= 1;
        if let Some(n) = next {
            s.held[n] += 1;
            s.ready(n, now);
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
    /// The CPUs holding a copy of the current contents, one bit each.
    sharers: RefCell<Vec<u64>>,
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
            sharers: RefCell::new(Vec::new()),
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
        self.sharers.borrow_mut().iter_mut().for_each(|w| *w = 0);
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
        self.sharers.borrow_mut().iter_mut().for_each(|w| *w = 0);
    }

    /// Whether `cpu` holds a copy of the current contents.
    pub fn shared_by(&self, cpu: usize) -> bool {
        self.sharers
            .borrow()
            .get(cpu / 64)
            .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }

    /// `cpu` now holds a copy of the current contents.
    pub fn read_by(&self, cpu: usize) {
        let mut s = self.sharers.borrow_mut();
        if s.len() <= cpu / 64 {
            s.resize(cpu / 64 + 1, 0);
        }
        s[cpu / 64] |= 1 << (cpu % 64);
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
    let mut ready = Ready::new(bodies.len());
    for i in 0..bodies.len() {
        ready.set(i, Ready::key(0, i));
    }
    let sched = Rc::new(RefCell::new(Sched {
        state: vec![State::Runnable(0); bodies.len()],
        ready,
        running: None,
        held: vec![0; bodies.len()],
    }));
    let mut cpus: Vec<Coroutine<(), Park, T>> = bodies
        .into_iter()
        .enumerate()
        .map(|(id, body)| {
            let sched = Rc::clone(&sched);
            let stack = DefaultStack::new(CPU_STACK_BYTES).expect("a CPU's stack");
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
    // The CPU to resume next when the last one parked behind an earlier one, found as the
    // parked CPU's key went into the tree.
    let mut carry: Option<usize> = None;
    loop {
        let next = carry.take().or_else(|| sched.borrow().next());
        let Some(i) = next else {
            let s = sched.borrow();
            let blocked: Vec<usize> = (0..s.state.len())
                .filter(|&i| s.state[i] == State::Blocked)
                .collect();
            if blocked.is_empty() {
                break;
            }
            return Err(Deadlock(blocked));
        };
        sched.borrow_mut().running = Some(i);
        let step = cpus[i].resume(());
        sched.borrow_mut().running = None;
        match step {
            CoroutineResult::Yield(Park::At(t)) => {
                carry = Some(sched.borrow_mut().swap_first(i, t))
            }
            CoroutineResult::Yield(Park::Blocked) => {
                debug_assert_eq!(sched.borrow().state[i], State::Blocked);
            }
            CoroutineResult::Return(r) => {
                let mut s = sched.borrow_mut();
                assert_eq!(s.held[i], 0, "CPU {i}'s body ended holding a lock");
                s.leave(i, State::Done);
                out[i] = Some(r);
            }
        }
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
