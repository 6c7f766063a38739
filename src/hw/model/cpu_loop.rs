//! A program's own loads and stores on the Model: a loop over one buffer, or a memcpy between two.
//!
//! Kernel counterpart: none — user code (or the kernel's `memcpy`) running on the CPU; what it
//! costs is the memory system's business, priced by the profile's `[memory_type.*]` and
//! `[cache_model]`.
//!
//! What it models, line by line:
//! - Every access costs the profile's per-access CPU time for its memory type and size; a type
//!   other than cached memory is one bus transaction per access and touches no cache.
//! - Cached memory goes through the functional cache model. An access that misses the L1 waits
//!   for the line fill from the level that answered (`fill_l2`, `fill_memory`). The L1 has
//!   `linefill_buffers` fills in flight at most: a fill starts no earlier than the oldest
//!   buffer's fill completes.
//! - With the L1's prefetcher on, a stream's fill of the line after the one it just accessed is
//!   triggered by that access, not by the demand: the loop's work on the previous line hides
//!   that much of the fill. One stream is thus paced by one fill per line (its next line is
//!   requested only once the previous one is there); two streams (a memcpy's source and
//!   destination) keep two fills in flight when there are two buffers.
//! - A dirty line pushed out of a level by a fill is posted into that level's eviction buffer
//!   (the A9's one eviction buffer for L1 victims, the outer cache's for L2 victims), which
//!   holds it for that level's writeback time. The loop waits only when the buffer is still busy
//!   with the previous victim, and a later barrier waits for the buffer to drain. (Maintenance
//!   by address is different: a PL310 by-PA clean is atomic and costs the CPU its writeback;
//!   see the model's header.)
//! - A memcpy runs its two streams in step, one line of the source then the same line of the
//!   destination, as arch/arm/lib/copy_template.S moves a line per LDM/STM pair.
//!
//! Invariants: the clock only moves forward; every picosecond it moves is charged as the loop's
//! own work or as a wait, so breakdowns sum to the total; the counts (accesses, fills,
//! writebacks) come from running the loop through the cache model.

use super::Model;
use crate::hw::Counter;
use crate::hw::cache::{Access, Caches, Effects, LineState};
use crate::hw::memory::{MemCosts, MemType};
use crate::types::PhysAddr;

/// The most linefill buffers a profile may give an L1.
pub const MAX_LINEFILLS: usize = 8;

/// One sequential pass of a program over a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    pub access: Access,
    pub mt: MemType,
    /// Bytes per load or store.
    pub size: u64,
    pub start: PhysAddr,
}

/// A stream while it runs.
struct Running {
    s: Stream,
    /// CPU picoseconds per access.
    per: u64,
    end: u64,
    /// The next byte to access.
    at: u64,
    /// The line the stream accessed last, and when that access ran.
    prev: Option<(u64, u64)>,
}

/// What a loop added up to, and the fills it has in flight.
#[derive(Default)]
struct Tally {
    /// When each linefill buffer's fill completes; the first `buffers` are the L1's.
    in_flight: [u64; MAX_LINEFILLS],
    buffers: usize,
    /// Each level's writeback time, read once.
    writeback_ps: [u64; 2],
    accesses: u64,
    fills: u64,
    work: u64,
    wait: u64,
    fx: Effects,
}

/// The accesses of `size` bytes a loop makes over `[start, end)` when it starts afresh at every
/// `line`-byte boundary, as [`Model::cpu_streams`] walks it: each line's piece rounded up to
/// whole accesses.
fn accesses_by_line(start: u64, end: u64, line: u64, size: u64) -> u64 {
    if start >= end {
        return 0;
    }
    let piece = |from: u64, to: u64| (to - from).div_ceil(size);
    let first_end = (start / line)
        .saturating_add(1)
        .saturating_mul(line)
        .min(end);
    if first_end == end {
        return piece(start, end);
    }
    // Whole lines after the first piece, then what is left of the last line.
    let last_start = ((end - 1) / line).saturating_mul(line).max(first_end);
    let whole = (last_start - first_end) / line;
    piece(start, first_end)
        .saturating_add(whole.saturating_mul(line.div_ceil(size)))
        .saturating_add(piece(last_start, end))
}

impl Model {
    /// Run `streams` in step over `bytes` each, line by line, and charge the loop.
    pub(super) fn cpu_streams(&mut self, streams: &[Stream], bytes: u64) {
        let line = self.params.line_bytes.max(1);
        if self.caches.is_none() {
            self.cpu_streams_uncached(streams, bytes, line);
            return;
        }
        let mem = self.params.mem.clone().unwrap_or_default();
        let mut run: Vec<Running> = streams
            .iter()
            .filter(|s| s.size > 0)
            .map(|&s| Running {
                s,
                per: mem
                    .of(s.mt)
                    .and_then(|c| c.cost(s.access == Access::Write, s.size))
                    .unwrap_or(0),
                end: s.start.0.saturating_add(bytes),
                at: s.start.0,
                prev: None,
            })
            .collect();
        if bytes == 0 || run.is_empty() {
            return;
        }
        let mut caches = self.caches.take();
        let mut t = Tally {
            buffers: (mem.linefill_buffers as usize).clamp(1, MAX_LINEFILLS),
            writeback_ps: self.writeback_ps(),
            ..Tally::default()
        };
        let mut now = self.now;
        while run.iter().any(|r| r.at < r.end) {
            for r in run.iter_mut().filter(|r| r.at < r.end) {
                let next = (r.at / line)
                    .saturating_add(1)
                    .saturating_mul(line)
                    .min(r.end);
                let n = (next - r.at).div_ceil(r.s.size);
                if let (MemType::Cached, Some(c)) = (r.s.mt, caches.as_mut()) {
                    let l = c.line_of(r.at);
                    now = self.line_fill(c, &mem, r, l, now, &mut t);
                    r.prev = Some((l, now));
                }
                let work = n.saturating_mul(r.per);
                t.accesses = t.accesses.saturating_add(n);
                t.work = t.work.saturating_add(work);
                now = now.saturating_add(work);
                r.at = next;
            }
        }
        self.caches = caches;
        self.ledger.count(Counter::CpuAccess, t.accesses);
        if t.fills > 0 {
            self.ledger.count(Counter::LineFill, t.fills);
        }
        self.count_writebacks(&t.fx);
        self.advance(t.work);
        if t.wait > 0 {
            self.now = self.now.saturating_add(t.wait);
            self.ledger.charge_wait(t.wait);
        }
    }

    /// [`Model::cpu_streams`] with no cache model: no fills, no victims, so no waits; each
    /// line's accesses cost their work alone, so the lines are summed without being walked.
    fn cpu_streams_uncached(&mut self, streams: &[Stream], bytes: u64, line: u64) {
        let mem = self.params.mem.as_ref();
        let (mut accesses, mut work, mut any) = (0u64, 0u64, false);
        for s in streams.iter().filter(|s| s.size > 0) {
            let per = mem
                .and_then(|m| m.of(s.mt))
                .and_then(|c| c.cost(s.access == Access::Write, s.size))
                .unwrap_or(0);
            let n = accesses_by_line(s.start.0, s.start.0.saturating_add(bytes), line, s.size);
            accesses = accesses.saturating_add(n);
            work = work.saturating_add(n.saturating_mul(per));
            any = true;
        }
        if bytes == 0 || !any {
            return;
        }
        self.ledger.count(Counter::CpuAccess, accesses);
        self.advance(work);
    }

    /// Line `l`'s access by stream `r` at `now` through the caches: its fill, if it missed the
    /// L1, and the victims it pushed out. Returns when the access can run.
    fn line_fill(
        &mut self,
        c: &mut Caches,
        mem: &MemCosts,
        r: &Running,
        l: u64,
        mut now: u64,
        t: &mut Tally,
    ) -> u64 {
        let mut fx = Effects::default();
        c.access(r.s.access, l, &mut fx);
        // A miss that brought the line into the L1 (a store to a level that does not
        // write-allocate goes on as a write, with no fill to wait for).
        if fx.served[0] == 0 && c.state(0, l) != LineState::Absent {
            t.fills += 1;
            let fill = if fx.served[1] > 0 && c.depth() > 1 {
                mem.fill_l2_ps
            } else {
                mem.fill_memory_ps
            };
            let asked = match r.prev {
                Some((p, when)) if mem.prefetch_next_line && p.wrapping_add(1) == l => when,
                _ => now,
            };
            let (slot, free) = t.in_flight[..t.buffers]
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(_, done)| done)
                .unwrap_or((0, 0));
            let done = asked.max(free).saturating_add(fill);
            t.in_flight[slot] = done;
            if done > now {
                t.wait = t.wait.saturating_add(done - now);
                now = done;
            }
        }
        for (level, work) in t.writeback_ps.into_iter().enumerate() {
            for _ in 0..fx.writebacks[level] {
                let buffer = if level == 0 {
                    &mut self.evict_free
                } else {
                    &mut self.outer_evict_free
                };
                if *buffer > now {
                    t.wait = t.wait.saturating_add(*buffer - now);
                    now = *buffer;
                }
                *buffer = now.saturating_add(work);
                self.pending = self.pending.max(*buffer);
            }
        }
        t.fx.add(&fx);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{params, with_caches};
    use super::*;
    use crate::hw::Hw;
    use crate::hw::memory::TypeCosts;

    proptest::proptest! {
        /// The sum over lines without a cache model is the count of walking them one by one.
        #[test]
        fn accesses_by_line_counts_what_the_walk_counts(
            start in 0u64..10_000,
            len in 0u64..10_000,
            line in proptest::sample::select(vec![32u64, 64, 128]),
            size in proptest::sample::select(vec![1u64, 4, 8, 16, 32, 48, 64, 256]),
        ) {
            let end = start + len;
            let (mut at, mut walked) = (start, 0);
            while at < end {
                let next = ((at / line + 1) * line).min(end);
                walked += (next - at).div_ceil(size);
                at = next;
            }
            proptest::prop_assert_eq!(accesses_by_line(start, end, line, size), walked);
        }
    }

    /// A write loop over four times the L1 (4 KB, 64-byte lines): from the 65th line on, each
    /// line's fill pushes a dirty line out into the eviction buffer.
    fn write_loop(l1_writeback: u64) -> Model {
        let mut p = with_caches(params(1, 1, 0, 50), [l1_writeback, 0]);
        let mut mem = MemCosts::default();
        mem.types[MemType::Cached as usize] = Some(TypeCosts {
            read: vec![],
            write: vec![(8, 100)],
        });
        p.mem = Some(mem);
        let mut m = Model::new(p);
        m.cpu_access(Access::Write, MemType::Cached, 8, PhysAddr(0), 16 << 10);
        m
    }

    #[test]
    fn a_programs_victims_are_posted_and_cost_only_while_the_buffer_is_busy() {
        // 256 lines of eight 100 ps stores: 800 ps of work per line.
        let work = 256 * 800;
        let mut m = write_loop(500);
        assert_eq!(m.ledger().totals()[Counter::L1Writeback as usize], 192);
        assert_eq!(
            m.now_ps(),
            work,
            "a 500 ps writeback hides behind 800 ps of work"
        );
        // A 2000 ps writeback paces the loop: each victim after the first waits for the one
        // before it to leave the buffer.
        let mut m = write_loop(2_000);
        assert_eq!(m.now_ps(), work + 191 * 1_200);
        assert_eq!(m.ledger().total_ps(), m.now_ps());
        // A barrier waits for the last victim to drain.
        let t = m.now_ps();
        m.barrier();
        assert_eq!(m.now_ps(), t + 2_000 - 800 + 50);
    }
}
