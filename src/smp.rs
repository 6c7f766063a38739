//! Many CPUs on one machine: each modelled CPU runs its own stream of calls on its own clock, and
//! they meet only where the kernel makes them meet.
//!
//! Kernel counterpart: an SMP system running the DMA API on several CPUs at once, and the
//! primitives they share: `spinlock_t` (kernel/locking/qspinlock.c, arm64's ticket locks before
//! 5.8: both hand the lock to waiters in the order they arrived).
//!
//! What it models: every CPU's body is a coroutine (a stack of its own, switched in a few
//! nanoseconds), so the mechanism code stays the kernel's sequential code. A CPU runs freely
//! through everything private to it, charging its own clock; at each point where it touches
//! shared state (a lock taken or released) it waits its turn: it goes on only once no other
//! runnable CPU's clock is earlier (ties: the lower CPU number). So shared state is touched in
//! one deterministic order of simulated time, the order the real CPUs would touch it in, and the
//! wait a CPU sees is what the other CPUs' work produces: a CPU that finds a lock held blocks
//! until its holder, running on, releases it, and then owns it from the release's time on. No
//! contention formula, no fitted constant.
//!
//! Invariants: exactly one CPU body runs at a time, and only it may suspend (a CPU's handle used
//! anywhere else panics rather than switch to a stack that is not running); a CPU at a turn point
//! resumes only when its clock is the least of the runnable CPUs' (by clock, then number); a
//! lock's waiters own it in arrival order, and only its owner may release it; a body ends holding
//! no lock; a blocked CPU's clock is set by the CPU that hands it the lock, never earlier than the
//! clock it blocked at. Same bodies, same bytes: nothing depends on host time, threads
//! or addresses. One CPU never switches: its body runs as plain code.

// A run that ends early (a deadlock) drops its suspended coroutines by unwinding their stacks.
#[cfg(panic = "abort")]
compile_error!(
    "smp needs panic = \"unwind\": a suspended CPU's coroutine is dropped by unwinding it"
);

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::rc::Rc;

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

/// What every CPU of one run shares with the scheduler.
#[derive(Debug)]
struct Sched {
    state: Vec<State>,
    /// The CPU whose body runs now: only its coroutine may be suspended.
    running: Option<usize>,
    /// Locks each CPU holds: none when its body ends.
    held: Vec<u32>,
}

impl Sched {
    /// Whether CPU `me` at clock `now` is first: no other runnable CPU is earlier.
    fn first(&self, me: usize, now: u64) -> bool {
        self.state.iter().enumerate().all(|(i, s)| match *s {
            State::Runnable(t) if i != me => (now, me) < (t, i),
            _ => true,
        })
    }

    /// The runnable CPU to resume next: the earliest, then the lowest number.
    fn next(&self) -> Option<usize> {
        self.state
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match *s {
                State::Runnable(t) => Some((t, i)),
                _ => None,
            })
            .min()
            .map(|(_, i)| i)
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

    /// `spin_lock(lock)` at clock `now`: returns the clock at which this CPU owns it, `now` if it
    /// was free, else the time its last holder released it to this CPU.
    pub fn spin_lock(&self, lock: &SpinLock, now: u64) -> u64 {
        let Some(link) = &self.link else {
            return now;
        };
        self.turn(now);
        if lock.owner.get().is_none() {
            lock.owner.set(Some(self.id));
            link.sched.borrow_mut().held[self.id] += 1;
            return now;
        }
        lock.waiters.borrow_mut().push_back(self.id);
        link.sched.borrow_mut().state[self.id] = State::Blocked;
        self.park(link, Park::Blocked);
        assert_eq!(
            lock.owner.get(),
            Some(self.id),
            "a lock handed to its waiter"
        );
        match link.sched.borrow().state[self.id] {
            State::Runnable(t) => t,
            s => unreachable!("a CPU handed a lock is runnable, found {s:?}"),
        }
    }

    /// `spin_unlock(lock)` at clock `now`: the first waiter, if any, owns it from `now`.
    pub fn spin_unlock(&self, lock: &SpinLock, now: u64) {
        let Some(link) = &self.link else { return };
        self.turn(now);
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
            s.state[n] = State::Runnable(now);
        }
    }
}

/// A spinlock shared by the CPUs of one run: who owns it and who waits, in arrival order.
#[derive(Debug, Default)]
pub struct SpinLock {
    owner: Cell<Option<usize>>,
    waiters: RefCell<VecDeque<usize>>,
}

impl SpinLock {
    pub fn new() -> SpinLock {
        SpinLock::default()
    }

    /// Whether a CPU holds it.
    pub fn is_locked(&self) -> bool {
        self.owner.get().is_some()
    }
}

/// A run that cannot go on: every CPU left waits for a lock none of the others will release.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("every CPU still running waits for a lock: CPUs {0:?}")]
pub struct Deadlock(pub Vec<usize>);

/// One CPU's body: what it runs, given its [`Cpu`].
pub type Body<T> = Box<dyn FnOnce(Cpu) -> T>;

/// Run `bodies`, one per CPU (CPU `i` runs `bodies[i]`), to their ends in simulated-time order;
/// their results in CPU order. One body runs as plain code, with [`Cpu::alone`].
pub fn run<T: 'static>(bodies: Vec<Body<T>>) -> Result<Vec<T>, Deadlock> {
    assert!(bodies.len() <= MAX_CPUS, "callers check the CPU count");
    if bodies.len() == 1 {
        let body = bodies.into_iter().next().expect("one body");
        return Ok(vec![body(Cpu::alone())]);
    }
    let sched = Rc::new(RefCell::new(Sched {
        state: vec![State::Runnable(0); bodies.len()],
        running: None,
        held: vec![0; bodies.len()],
    }));
    let mut cpus: Vec<Coroutine<(), Park, T>> = bodies
        .into_iter()
        .enumerate()
        .map(|(id, body)| {
            let sched = Rc::clone(&sched);
            let stack = DefaultStack::new(CPU_STACK_BYTES).expect("a CPU's stack");
            Coroutine::with_stack(stack, move |y: &Yielder<(), Park>, ()| {
                body(Cpu {
                    id,
                    link: Some(Link {
                        sched,
                        yielder: NonNull::from(y),
                    }),
                })
            })
        })
        .collect();
    let mut out: Vec<Option<T>> = cpus.iter().map(|_| None).collect();
    loop {
        let next = sched.borrow().next();
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
            CoroutineResult::Yield(Park::At(t)) => sched.borrow_mut().state[i] = State::Runnable(t),
            CoroutineResult::Yield(Park::Blocked) => {
                debug_assert_eq!(sched.borrow().state[i], State::Blocked);
            }
            CoroutineResult::Return(r) => {
                let mut s = sched.borrow_mut();
                assert_eq!(s.held[i], 0, "CPU {i}'s body ended holding a lock");
                s.state[i] = State::Done;
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
    ) -> Body<(Vec<(u64, u64)>, u64)> {
        Box::new(move |cpu: Cpu| {
            let mut now = 0;
            let mut got = Vec::new();
            for _ in 0..n {
                now += before;
                let at = cpu.spin_lock(&lock, now);
                got.push((now, at));
                now = at + hold;
                cpu.spin_unlock(&lock, now);
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
        let holds: Body<u64> = Box::new(move |cpu| cpu.spin_lock(&l, 0));
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
            let t = cpu.spin_lock(&a0, 0);
            cpu.spin_lock(&b0, t + 10)
        });
        let one: Body<u64> = Box::new(move |cpu| {
            let t = cpu.spin_lock(&b1, 0);
            cpu.spin_lock(&a1, t + 10)
        });
        assert_eq!(run(vec![zero, one]), Err(Deadlock(vec![0, 1])));
    }
}
