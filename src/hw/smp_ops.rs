//! The kernel's primitives for state the machine's CPUs share, on any backend.
//!
//! Kernel counterpart: `spin_lock`/`spin_unlock` around a lock's data, `READ_ONCE`, atomics and
//! `cmpxchg` on a shared word, `smp_cond_load_relaxed`, `this_cpu_ptr`.
//!
//! What it models: each call of [`SmpHw`] is a sequence of the backend's own primitives
//! ([`Hw::spin_lock`], [`Hw::load`], [`Hw::atomic`], [`Hw::cmpxchg`], [`Hw::wait_on`]) on the
//! [`crate::smp`] types, and charges exactly what those calls charge. The types own their data,
//! and these calls are the only way to it besides the `peek`s for reports.
//!
//! Invariants: a lock's data is borrowed only between its lock and its unlock, inside the
//! closure; a shared value only after its line was charged (or inside a wait on it).

use super::{Hw, SwCost};
use crate::smp::{PerCpu, Shared, SpinLock, WaitQueue};

/// The kernel's ways to reach shared state, on any backend: a lock around its data, a shared
/// line's load, atomic update and `cmpxchg`, and a spin until another CPU's store. Each charges
/// through the backend's primitives ([`Hw::spin_lock`], [`Hw::load`],
/// [`Hw::atomic`], [`Hw::cmpxchg`], [`Hw::wait_on`]) exactly as
/// a call of them would.
pub trait SmpHw: Hw {
    /// `this_cpu_ptr(p)`: the copy of the CPU the calls run on ([`Hw::cpu`]), `None` for a
    /// CPU `p` was not set up for.
    fn this_cpu_ptr<'a, T>(&self, p: &'a PerCpu<T>) -> Option<&'a T> {
        p.get(self.cpu())
    }

    /// `spin_lock(&l->lock); f(data); spin_unlock(&l->lock)`.
    fn with_lock<T, R>(&mut self, l: &SpinLock<T>, f: impl FnOnce(&mut Self, &mut T) -> R) -> R {
        let (raw, data) = l.parts();
        self.spin_lock(raw);
        let r = f(self, &mut data.borrow_mut());
        self.spin_unlock(raw);
        r
    }

    /// `READ_ONCE(*v)`: the line loaded, its value returned with the line's version (what a
    /// later [`SmpHw::cmpxchg_update`] expects).
    fn read_once<T: Clone>(&mut self, v: &Shared<T>) -> (T, u64) {
        self.load(v.line());
        (v.cell().borrow().clone(), v.line().version())
    }

    /// An atomic read-modify-write of `v` (`atomic_fetch_andnot`, `atomic_set_release`, a
    /// store to a line others read): the line exclusive here, then `f` on the value.
    fn update<T, R>(&mut self, v: &Shared<T>, f: impl FnOnce(&mut Self, &mut T) -> R) -> R {
        self.atomic(v.line());
        f(self, &mut v.cell().borrow_mut())
    }

    /// A `cmpxchg` loop on `v` expecting what this CPU read at version `seen`, `retry` the
    /// loop's instructions between a failed attempt and the next: `f` applied once it
    /// succeeds; how many attempts failed before.
    fn cmpxchg_update<T, R>(
        &mut self,
        v: &Shared<T>,
        seen: u64,
        retry: SwCost,
        f: impl FnOnce(&mut T) -> R,
    ) -> (u64, R) {
        let failed = self.cmpxchg(v.line(), seen, retry);
        (failed, f(&mut v.cell().borrow_mut()))
    }

    /// `smp_cond_load_relaxed(v, cond)` / `atomic_cond_read_relaxed`: load `v` and, while
    /// `cond` does not hold, spin on its line until another CPU's store makes it hold, woken
    /// through `q`. The first load is the kernel's too: it brings the line over from the CPU
    /// that wrote it last even when the condition holds already.
    fn cond_load<T>(
        &mut self,
        v: &Shared<T>,
        q: &WaitQueue,
        frame: &'static str,
        cond: impl Fn(&T) -> bool,
    ) {
        self.load(v.line());
        while !cond(&v.cell().borrow()) {
            self.wait_on(q, Some(v.line()), frame);
        }
    }
}

impl<H: Hw + ?Sized> SmpHw for H {}
