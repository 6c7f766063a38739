//! How far a running scenario has got, for a progress display on a terminal.
//!
//! Kernel counterpart: none. Each runner counts its outer steps with [`advance`] (a streaming
//! iteration, a sweep size's iteration, a bounce size's iteration, an `iommu_ops` iteration, a
//! block of forwarded packets); `dmasim run` reads [`done`] from another thread and draws a bar
//! on standard error when that is a terminal.
//!
//! Invariants: counting is one relaxed atomic add per outer step, never per operation, and
//! nothing in the model reads the counter, so no result can depend on it. A run advances the
//! counter by exactly its scenario's [`crate::scenario::Scenario::progress_total`]. The counter
//! is process-wide and only ever grows: a display measures from the value it saw at the start.

use std::sync::atomic::{AtomicU64, Ordering};

static DONE: AtomicU64 = AtomicU64::new(0);

/// Count `units` outer steps of the running scenario as done.
pub fn advance(units: u64) {
    DONE.fetch_add(units, Ordering::Relaxed);
}

/// Outer steps done by every run in this process so far.
pub fn done() -> u64 {
    DONE.load(Ordering::Relaxed)
}
