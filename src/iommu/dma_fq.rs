//! The flush queue: lazy (deferred) IOTLB invalidation for iommu-dma.
//!
//! Kernel counterpart: the IOVA flush queue — drivers/iommu/iova.c from 4.14 to 5.16
//! (`init_iova_flush_queue`, `queue_iova`, `fq_ring_free`, `iova_domain_flush`,
//! `fq_flush_timeout`), moved into drivers/iommu/dma-iommu.c in 5.17 (commit f7f07484542f,
//! "iommu/iova: Move flush queue code to iommu-dma"), where the flush is `fq_flush_iotlb` and
//! setup is `iommu_dma_init_fq`. Constants `IOVA_FQ_SIZE` (256) and `IOVA_FQ_TIMEOUT` (10 ms),
//! renamed `IOVA_DEFAULT_FQ_SIZE` / `IOVA_DEFAULT_FQ_TIMEOUT` in 6.7.
//!
//! Which releases offer lazy mode, and under which names: iommu-dma uses the flush queue since
//! 5.0 (commit 2da274cdf998) for a domain whose driver reports `DOMAIN_ATTR_DMA_USE_FLUSH_QUEUE`,
//! which arm-smmu and arm-smmu-v3 do when booted with `iommu.strict=0`; io-pgtable-arm then skips
//! per-leaf invalidation through `IO_PGTABLE_QUIRK_NON_STRICT`. 5.15 makes it a domain type,
//! `IOMMU_DOMAIN_DMA_FQ` (commit bf3aed4660c6; chosen by `iommu.strict=0` or by
//! `CONFIG_IOMMU_DEFAULT_DMA_LAZY`, the default only on x86, and s390 from 6.7: arm64 stays
//! strict unless asked), and replaces the quirk with `iommu_iotlb_gather.queued` (commits
//! 7a7c5badf858, a8e5f04458c4), which io-pgtable-arm reads to skip `tlb_add_page`; both give the
//! same operations, so one model serves 5.0 onwards. 6.5 also requires the driver's
//! `IOMMU_CAP_DEFERRED_FLUSH` (commit 4a20ce0ff68e), which both SMMU drivers report. 6.7 adds a
//! single large queue (`IOVA_SINGLE_FQ_SIZE` 32768, 1000 ms) for IOMMUs whose flushes shadow
//! page tables (`shadow_on_flush`, s390 only); the Arm SMMUs keep one 256-slot ring per CPU,
//! which is what is modelled.
//!
//! What it models: a lazy unmap has already cleared the page-table entries (without leaf
//! invalidation and without `iommu_iotlb_sync`); `queue_iova` then parks the IOVA range in the
//! current CPU's ring instead of freeing it. Each entry records `fq_flush_start_cnt` when it was
//! queued, and `fq_ring_free` frees (with `free_iova_fast`) only entries older than
//! `fq_flush_finish_cnt`, i.e. entries a completed whole-domain flush has covered. `queue_iova`
//! first frees what earlier flushes covered; if the ring is still full it flushes at once
//! (`fq_flush_iotlb`: the driver's `flush_iotlb_all`, `TLBIASID` + sync on MMU-500,
//! `CMD_TLBI_NH_ASID` + `CMD_SYNC` on SMMUv3) and frees again. The ring is the kernel's
//! head/tail ring with one slot always empty, so it holds `IOVA_FQ_SIZE - 1` entries: the 256th
//! queueing into an empty ring flushes, and the entry it then adds (queued after that flush
//! started) waits for the next one, so a busy CPU flushes every 255 queueings after that. The
//! first queueing with no timer pending arms `fq_timer`; when it expires `fq_flush_timeout`
//! flushes once and frees every CPU's covered entries.
//!
//! Many CPUs ([`crate::smp`]): each CPU's ring is under its own `fq->lock` (a per-CPU lock),
//! held around `queue_iova`'s free, its flush when full, and the new entry, and taken for each
//! CPU's ring in turn by the timer's `fq_flush_timeout`; the flush counts and `fq_timer_on`
//! are lines the CPUs share. Any CPU's finished flush lets every CPU free what it covered.
//!
//! The timer against the model's clocks: the kernel runs `fq_flush_timeout` from a timer
//! softirq once `IOVA_FQ_TIMEOUT` has passed. Here the expiry time is recorded from
//! [`Hw::now_ps`] when the timer is armed, and iommu-dma checks it at the start of each of its
//! map and unmap calls ([`FlushQueue::run_expired_timer`]): an expired timer runs there, as its
//! own top-level frame, before the call proceeds. So a long idle gap makes the next call find
//! its IOVAs freed, as in the kernel, and the timer's flush is charged on the clock when it is
//! noticed rather than at the moment it expired. A caller whose CPU idles between calls (a
//! replayed trace, whose clock follows the trace's timestamps) runs it when it expires instead,
//! through [`crate::dma::DmaMapOps::run_timers`], and then no call is charged its flush. The
//! expiry is the exact timeout: jiffy rounding
//! (`msecs_to_jiffies`, the tick) is not modelled. The timer frees into the magazines of the CPU
//! that armed it (kernel timers fire on the CPU that queued them unless migrated).
//!
//! At teardown the kernel does not flush: `iommu_dma_free_fq` stops the timer and frees only the
//! queued page-table pages; the IOVAs die with the IOVA domain. [`FlushQueue::drain`] instead
//! runs the pending timer's work early, so a caller that wants every IOVA back at the end of a
//! run (and the flush it costs counted) can have it.
//!
//! Not modelled: the freelist of page-table pages an entry carries (`iommu_pages_list`); Arm
//! LPAE frees its tables at once after a walk flush, so for the SMMUs it is always empty.
//!
//! Invariants: an IOVA range queued here stays allocated until a flush that started after it was
//! queued has finished; the timer is armed whenever some ring holds an entry; every queued range
//! is freed exactly once.

use super::IommuFlushOps;
use super::core::IommuDomain;
use super::iova::IovaDomain;
use crate::hw::SmpHw;
use crate::hw::{Counter, DeviceHw, Hw, SwCost, SwKey};
use crate::smp::{PerCpu, Shared, SpinLock};
use std::cell::{Cell, RefCell};

/// Slots in each CPU's ring (`IOVA_FQ_SIZE`; `IOVA_DEFAULT_FQ_SIZE` from 6.7). A power of two:
/// the kernel wraps indices with a mask.
pub const IOVA_FQ_SIZE: usize = 256;
/// Milliseconds from the first queueing to the timer's flush (`IOVA_FQ_TIMEOUT`).
pub const IOVA_FQ_TIMEOUT_MS: u64 = 10;
const PS_PER_MS: u64 = 1_000_000_000;

/// How iommu-dma invalidates the IOTLB when it unmaps: the domain type the setup layer chose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Invalidation {
    /// `IOMMU_DOMAIN_DMA` (`iommu.strict=1`, the arm64 default): every unmap invalidates its
    /// leaves and syncs before its IOVA is freed.
    #[default]
    Strict,
    /// `IOMMU_DOMAIN_DMA_FQ` (`iommu.strict=0`; before 5.15, a non-strict DMA domain): unmaps
    /// skip invalidation and queue their IOVAs; a whole-domain flush covers them in batches.
    Lazy,
}

/// The `invalidation` policy.
impl crate::types::Choice for Invalidation {
    const ALL: &'static [Self] = &[Invalidation::Strict, Invalidation::Lazy];
    fn name(self) -> &'static str {
        match self {
            Invalidation::Strict => "strict",
            Invalidation::Lazy => "lazy",
        }
    }
}

/// What the flush queue did, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FqStats {
    /// IOVA ranges handed to `queue_iova`.
    pub queued: u64,
    /// Ranges `fq_ring_free` gave back to the IOVA allocator.
    pub freed: u64,
    /// `fq_flush_iotlb` calls made by `queue_iova` finding its ring full.
    pub full_flushes: u64,
    /// `fq_flush_iotlb` calls made by the expired timer.
    pub timer_flushes: u64,
    /// `fq_flush_iotlb` calls made by [`FlushQueue::drain`].
    pub drain_flushes: u64,
}

impl FqStats {
    /// Every whole-domain flush the queue issued.
    pub fn flushes(&self) -> u64 {
        self.full_flushes + self.timer_flushes + self.drain_flushes
    }
}

/// `struct iova_fq_entry` (without the page freelist, always empty on Arm LPAE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FqEntry {
    iova_pfn: u64,
    pages: u64,
    /// `fq_flush_start_cnt` when the entry was queued.
    counter: u64,
}

/// `struct iova_fq`: one CPU's ring.
#[derive(Clone, Debug)]
struct IovaFq {
    entries: Vec<FqEntry>,
    head: usize,
    tail: usize,
}

impl IovaFq {
    fn new(size: usize) -> IovaFq {
        IovaFq {
            entries: vec![FqEntry::default(); size],
            head: 0,
            tail: 0,
        }
    }

    fn mod_mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// `fq_full()`: one slot stays empty so that `head == tail` means empty.
    fn is_full(&self) -> bool {
        (self.tail + 1) & self.mod_mask() == self.head
    }

    fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head) & self.mod_mask()
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Costs {
    queue: SwCost,
    ring_free: SwCost,
    timeout: SwCost,
}

/// `fq_flush_start_cnt` / `fq_flush_finish_cnt`: two atomics on one line.
#[derive(Clone, Copy, Debug, Default)]
struct FlushCounts {
    start: u64,
    finish: u64,
}

/// A DMA-FQ domain's flush queues (the `fq_*` fields of `struct iommu_dma_cookie`), shared by
/// every CPU that unmaps through the domain: each CPU's ring under its own `fq->lock`, the
/// flush counts and the timer on lines the CPUs share.
#[derive(Debug)]
pub struct FlushQueue {
    fqs: PerCpu<SpinLock<IovaFq>>,
    counts: Shared<FlushCounts>,
    /// `fq_timer_on`: when the pending timer expires (ps on the backend's clock), and the CPU it
    /// will run on.
    timer: Shared<Option<(u64, usize)>>,
    timeout_ps: u64,
    stats: Cell<FqStats>,
    costs: Costs,
}

impl FlushQueue {
    /// `iommu_dma_init_fq()` with per-CPU queues of [`IOVA_FQ_SIZE`] slots for `ncpus` CPUs.
    pub fn new(hw: &dyn Hw, ncpus: usize) -> FlushQueue {
        FlushQueue {
            fqs: PerCpu::new(ncpus, |_| {
                SpinLock::per_cpu(
                    "fq->lock",
                    "(spinning on fq->lock)",
                    IovaFq::new(IOVA_FQ_SIZE),
                )
            }),
            counts: Shared::new(
                "fq_flush_start_cnt, fq_flush_finish_cnt",
                FlushCounts::default(),
            ),
            timer: Shared::new("fq_timer_on", None),
            timeout_ps: IOVA_FQ_TIMEOUT_MS * PS_PER_MS,
            stats: Cell::new(FqStats::default()),
            costs: Costs {
                queue: hw.sw_cost(SwKey::QueueIova),
                ring_free: hw.sw_cost(SwKey::FqRingFree),
                timeout: hw.sw_cost(SwKey::FqFlushTimeout),
            },
        }
    }

    pub fn has_cpu(&self, cpu: usize) -> bool {
        cpu < self.fqs.len()
    }

    /// What every CPU's `fq->lock` saw, together.
    pub fn lock_record(&self) -> crate::smp::LockRecord {
        let mut r = crate::smp::LockRecord::default();
        for l in self.fqs.iter() {
            r.merge(&l.record());
        }
        r
    }

    /// What the queue did so far.
    pub fn stats(&self) -> FqStats {
        self.stats.get()
    }

    fn stat(&self, f: impl FnOnce(&mut FqStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// IOVA ranges waiting in every ring.
    pub fn pending(&self) -> usize {
        self.fqs.iter().map(|fq| fq.peek().len()).sum()
    }

    /// When the pending timer expires, if one is armed (ps on the backend's clock).
    pub fn timer_expires_ps(&self) -> Option<u64> {
        self.timer.peek().map(|(t, _)| t)
    }

    /// `queue_iova()`: park `pages` granules at `iova_pfn`, unmapped without invalidation, in
    /// this CPU's ring, under its `fq->lock`. A CPU this queue does not have is refused
    /// (`false`) and nothing changes; the caller then unmaps strictly.
    pub fn queue_iova(
        &self,
        hw: &mut dyn DeviceHw,
        domain: &IommuDomain,
        iovad: &IovaDomain,
        iova_pfn: u64,
        pages: u64,
        warnings: &RefCell<Vec<String>>,
    ) -> bool {
        let cpu = hw.cpu();
        let Some(fq) = self.fqs.get(cpu) else {
            return false;
        };
        let back = hw.enter(crate::frame_id!("queue_iova"));
        hw.sw(self.costs.queue);
        hw.count(Counter::SpinLock, 1);
        hw.with_lock(fq, |hw, fq| {
            // Entries an earlier flush (from another CPU, or the timer) covered make room
            // first.
            self.fq_ring_free(hw.as_dyn_hw(), iovad, fq, cpu, warnings);
            if fq.is_full() {
                // The flush runs with this CPU's lock held, as the kernel's does.
                self.fq_flush_iotlb(hw, domain);
                self.stat(|s| s.full_flushes += 1);
                self.fq_ring_free(hw.as_dyn_hw(), iovad, fq, cpu, warnings);
            }
            // fq_ring_free's load brought the counts' line here.
            let counter = self.counts.peek().start;
            let idx = fq.tail;
            fq.entries[idx] = FqEntry {
                iova_pfn,
                pages,
                counter,
            };
            fq.tail = (idx + 1) & fq.mod_mask();
        });
        self.stat(|s| s.queued += 1);
        hw.count(Counter::FqQueued, 1);
        // Arm the timer unless it is on (5.4: a read of `fq_timer_on`, then the atomic that
        // sets it, which only one CPU wins).
        if hw.read_once(&self.timer).0.is_none() {
            hw.update(&self.timer, |hw, timer| {
                if timer.is_none() {
                    *timer = Some((hw.now_ps().saturating_add(self.timeout_ps), cpu));
                }
            });
        }
        hw.leave(back);
        true
    }

    /// `fq_ring_free()`, with the ring's `fq->lock` held: give back, from the head of `fq`,
    /// every entry queued before the last finished flush started, into `free_cpu`'s IOVA
    /// magazines.
    fn fq_ring_free(
        &self,
        hw: &mut dyn Hw,
        iovad: &IovaDomain,
        fq: &mut IovaFq,
        free_cpu: usize,
        warnings: &RefCell<Vec<String>>,
    ) {
        let back = hw.enter(crate::frame_id!("fq_ring_free"));
        hw.sw(self.costs.ring_free);
        let finished = hw.read_once(&self.counts).0.finish;
        while fq.head != fq.tail {
            let ent = fq.entries[fq.head];
            if ent.counter >= finished {
                break;
            }
            if let Err(err) = iovad.free_iova_fast_on(hw, free_cpu, ent.iova_pfn, ent.pages) {
                warnings.borrow_mut().push(format!(
                    "flush queue free of IOVA pfn {:#x}: {err}",
                    ent.iova_pfn
                ));
            }
            fq.head = (fq.head + 1) & fq.mod_mask();
            self.stat(|s| s.freed += 1);
        }
        hw.leave(back);
    }

    /// `fq_flush_iotlb()` (`iova_domain_flush()` before 5.17): the driver's `flush_iotlb_all`,
    /// bracketed by the start and finish counts that tell `fq_ring_free` what it covered.
    fn fq_flush_iotlb(&self, hw: &mut dyn DeviceHw, domain: &IommuDomain) {
        let back = hw.enter(crate::frame_id!("fq_flush_iotlb"));
        hw.count(Counter::FqFlush, 1);
        hw.update(&self.counts, |_, c| c.start += 1);
        domain.ops.tlb_flush_all(hw);
        hw.update(&self.counts, |_, c| c.finish += 1);
        hw.leave(back);
    }

    /// `fq_flush_timeout()`: one flush, then every CPU's ring freed under its lock.
    fn fq_flush_timeout(
        &self,
        hw: &mut dyn DeviceHw,
        domain: &IommuDomain,
        iovad: &IovaDomain,
        timer_cpu: usize,
        warnings: &RefCell<Vec<String>>,
    ) {
        let back = hw.enter(crate::frame_id!("fq_flush_timeout"));
        hw.sw(self.costs.timeout);
        self.fq_flush_iotlb(hw, domain);
        for fq in self.fqs.iter() {
            hw.count(Counter::SpinLock, 1);
            hw.with_lock(fq, |hw, fq| {
                self.fq_ring_free(hw.as_dyn_hw(), iovad, fq, timer_cpu, warnings)
            });
        }
        hw.leave(back);
    }

    /// Run the timer if it has expired by the backend's clock. Returns whether it ran. A CPU
    /// that sees it expired takes its turn and looks again: an earlier CPU may have run it.
    pub fn run_expired_timer(
        &self,
        hw: &mut dyn DeviceHw,
        domain: &IommuDomain,
        iovad: &IovaDomain,
        warnings: &RefCell<Vec<String>>,
    ) -> bool {
        let expired = |t: Option<(u64, usize)>, now| t.filter(|&(expires, _)| now >= expires);
        // The backend's timer wheel, not a load of the kernel's.
        if expired(*self.timer.peek(), hw.now_ps()).is_none() {
            return false;
        }
        // The timer runs once: the first CPU to clear `fq_timer_on` runs it.
        let run = hw.update(&self.timer, |hw, timer| {
            let run = expired(*timer, hw.now_ps());
            if run.is_some() {
                *timer = None;
            }
            run
        });
        match run {
            Some((_, cpu)) => {
                self.fq_flush_timeout(hw, domain, iovad, cpu, warnings);
                self.stat(|s| s.timer_flushes += 1);
                true
            }
            None => false,
        }
    }

    /// Fire the pending timer now, if one is armed (the kernel's teardown would not; see the
    /// module notes). Returns the IOVA ranges freed.
    pub fn drain(
        &self,
        hw: &mut dyn DeviceHw,
        domain: &IommuDomain,
        iovad: &IovaDomain,
        warnings: &RefCell<Vec<String>>,
    ) -> u64 {
        let Some((_, cpu)) = self.timer.peek_mut().take() else {
            return 0;
        };
        let before = self.stats.get().freed;
        self.fq_flush_timeout(hw, domain, iovad, cpu, warnings);
        self.stat(|s| s.drain_flushes += 1);
        self.stats.get().freed - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidation_names_round_trip() {
        use crate::types::Choice;
        assert_eq!(Invalidation::names(), ["strict", "lazy"]);
        for m in Invalidation::ALL {
            assert_eq!(Invalidation::parse(m.name()), Some(*m));
        }
        assert_eq!(Invalidation::parse("deferred"), None);
        assert_eq!(Invalidation::default(), Invalidation::Strict);
    }

    #[test]
    fn the_ring_holds_one_entry_fewer_than_its_slots() {
        let mut fq = IovaFq::new(IOVA_FQ_SIZE);
        let mut added = 0;
        while !fq.is_full() {
            fq.tail = (fq.tail + 1) & fq.mod_mask();
            added += 1;
        }
        assert_eq!(added, 255);
        assert_eq!(fq.len(), 255);
        // Wrapped: head moved on, the count still follows.
        fq.head = 200;
        fq.tail = 10;
        assert_eq!(fq.len(), 66);
    }
}
