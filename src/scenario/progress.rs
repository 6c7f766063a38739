//! How far a running scenario has got, for a progress display on a terminal.
//!
//! Kernel counterpart: none. Each runner counts its outer steps on the [`Progress`] handle it is
//! given (a streaming iteration, a sweep size's iteration, a bounce size's iteration, an
//! `iommu_ops` iteration, a block of forwarded packets); `dmasim run` keeps a clone of the handle
//! and reads [`Progress::done`] from another thread to draw a bar on standard error when that is
//! a terminal.
//!
//! Invariants: counting is one relaxed atomic add per outer step, never per operation, and
//! nothing in the model reads the counter, so no result can depend on it. A run advances its
//! handle by exactly its scenario's [`crate::scenario::Scenario::progress_total`]. A handle is
//! shared only by its clones: two runs with their own handles (two tests on two threads) never
//! see each other's steps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A count of outer steps done, shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    done: Arc<AtomicU64>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Count `units` outer steps of the running scenario as done.
    #[inline]
    pub fn advance(&self, units: u64) {
        self.done.fetch_add(units, Ordering::Relaxed);
    }

    /// Outer steps done on this handle so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_a_count_and_handles_do_not() {
        let a = Progress::new();
        let seen = a.clone();
        let other = Progress::new();
        a.advance(3);
        other.advance(5);
        assert_eq!(seen.done(), 3);
        assert_eq!(other.done(), 5);
    }
}
