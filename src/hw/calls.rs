//! Timing DMA API calls and reading the ledger back, for every runner.
//!
//! Kernel counterpart: none — this is the stopwatch around a driver's calls ([`lap`]; every
//! runner's per-call table reads it).
//!
//! Invariants: a call's time is the Model clock's advance across it, so the per-call totals, the
//! per-stack breakdown and the run's total come from the same charges; a refused call is counted
//! with its time (the kernel spent it) and its first error kept for the report.

use super::model::Model;
use super::{Counter, Hw, Ledger};

/// The one stopwatch of every per-call table (`CallTimer`, the IOMMU workloads' operations,
/// ixgbe's calls): run `f` on `hw` and return what it returned with the modelled time it took,
/// the clock's advance across it.
#[inline]
pub fn lap<T>(hw: &mut Model, f: impl FnOnce(&mut Model) -> T) -> (T, u64) {
    let t0 = hw.now_ps();
    let r = f(hw);
    let dt = hw.now_ps() - t0;
    (r, dt)
}

/// [`lap`], with the operations the call issued: the ledger's counts it added.
pub fn lap_counted<T>(
    hw: &mut Model,
    f: impl FnOnce(&mut Model) -> T,
) -> (T, u64, [u64; Counter::N]) {
    let c0 = hw.ledger().totals();
    let (r, dt) = lap(hw, f);
    let mut counts = hw.ledger().totals();
    for (a, b) in counts.iter_mut().zip(c0) {
        *a -= b;
    }
    (r, dt, counts)
}

/// One kind of API call over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct CallStat {
    pub call: &'static str,
    pub count: u64,
    pub total_ps: u64,
    /// Calls the modelled kernel refused (a mapping error), and the first refusal in its words.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Operations issued inside this call's frames (filled by runners whose call names are
    /// the API frames).
    pub counts: [u64; Counter::N],
}

impl CallStat {
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ps as f64 / self.count as f64 / 1000.0
        }
    }

    /// Operations of one kind per call.
    pub fn per_call(&self, c: Counter) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.counts[c as usize] as f64 / self.count as f64
        }
    }
}

/// One call stack's share of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct StackRow {
    pub stack: String,
    pub self_ps: u64,
    pub counts: [u64; Counter::N],
}

/// Every charged stack of a ledger, in its stable order.
pub fn stack_rows(ledger: &Ledger) -> Vec<StackRow> {
    ledger
        .stacks()
        .into_iter()
        .map(|s| StackRow {
            stack: s.stack_string(),
            self_ps: s.self_ps,
            counts: s.counts,
        })
        .collect()
}

/// Per-call statistics, in the order calls were first made.
#[derive(Clone, Debug, Default)]
pub struct CallTimer {
    pub stats: Vec<CallStat>,
}

impl CallTimer {
    fn slot(&mut self, call: &'static str) -> &mut CallStat {
        // Call names are literals: the same pointer almost always, so that is tried first and
        // contents are compared only before a new slot is made.
        let i = match self
            .stats
            .iter()
            .position(|s| std::ptr::eq(s.call, call))
            .or_else(|| self.stats.iter().position(|s| s.call == call))
        {
            Some(i) => i,
            None => {
                self.stats.push(CallStat {
                    call,
                    count: 0,
                    total_ps: 0,
                    errors: 0,
                    first_error: None,
                    counts: [0; Counter::N],
                });
                self.stats.len() - 1
            }
        };
        &mut self.stats[i]
    }

    /// Time one call.
    pub fn time<T>(
        &mut self,
        hw: &mut Model,
        call: &'static str,
        f: impl FnOnce(&mut Model) -> T,
    ) -> T {
        let (r, dt) = lap(hw, f);
        self.record(call, dt);
        r
    }

    /// Count one call whose time the caller measured across a stretch that itself contains
    /// timed calls (an ioctl around the DMA API calls it makes).
    pub fn record(&mut self, call: &'static str, ps: u64) {
        let s = self.slot(call);
        s.count += 1;
        s.total_ps += ps;
    }

    /// Time one call that may be refused; a refusal is recorded, not propagated.
    pub fn time_result<T, E: std::fmt::Display>(
        &mut self,
        hw: &mut Model,
        call: &'static str,
        f: impl FnOnce(&mut Model) -> Result<T, E>,
    ) -> Option<T> {
        let r = self.time(hw, call, f);
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let s = self.slot(call);
                s.errors += 1;
                if s.first_error.is_none() {
                    s.first_error = Some(e.to_string());
                }
                None
            }
        }
    }

    /// Give each call the operations its own frames issued: the stacks whose outermost frame
    /// is the call's name.
    pub fn attribute(&mut self, stacks: &[StackRow]) {
        for s in &mut self.stats {
            s.counts = [0; Counter::N];
        }
        for row in stacks {
            let root = row.stack.split(" > ").next().unwrap_or("");
            if let Some(s) = self.stats.iter_mut().find(|s| s.call == root) {
                for (a, b) in s.counts.iter_mut().zip(row.counts.iter()) {
                    *a += b;
                }
            }
        }
    }

    pub fn clear(&mut self) {
        self.stats.clear();
    }

    /// Add `other`'s calls (another CPU's) to these, call by call.
    pub fn absorb(&mut self, other: &CallTimer) {
        for o in &other.stats {
            let s = self.slot(o.call);
            s.count += o.count;
            s.total_ps = s.total_ps.saturating_add(o.total_ps);
            s.errors += o.errors;
            if s.first_error.is_none() {
                s.first_error.clone_from(&o.first_error);
            }
        }
    }
}
