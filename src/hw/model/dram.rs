//! Each node's memory as an agent with a service time: the write channel a dirty line's
//! write-back occupies on its way to DRAM.
//!
//! Kernel counterpart: none — this is the memory controller under the cache maintenance the
//! kernel issues (`dcache_clean_poc` / `__dma_map_area` on arm64, `__arm_lpae_sync_pte`'s
//! `DC CVAC`): the kernel only waits for it, in the `DSB` that ends a run of maintenance.
//!
//! What it models: the profile's `memory.write_bandwidth_mb_s` is each node's write bandwidth
//! to its own DRAM. Without a cache model every line a clean (or clean+invalidate) touches is
//! taken to be dirty, as the profiles' maintenance latencies already say (they price a clean as
//! a write-back to DRAM): a line the CPU just wrote before handing it to a device, a PTE just
//! stored. Its write-back occupies the channel of the node its address is on for `line_bytes /
//! bandwidth`, starting no earlier than the line's issue and no earlier than the channel has
//! finished the write-backs queued before it, by any CPU of the machine; the line has completed
//! only once its write-back has. A barrier after a run of `n` lines therefore waits for at least
//! `n × line_bytes / bandwidth` however fast the core issues them, and CPUs cleaning on the same
//! node share that rate. An invalidate writes nothing back and does not use the channel.
//!
//! What it does not model: read traffic (line fills, the SMMU's command and table reads) and the
//! write-backs of the functional cache model (`[cache_model]`, which prices a dirty line's way
//! to DRAM itself); a profile with both is refused. The channel is first come, first served: no
//! bank or row-buffer effects, no read/write turnaround.
//!
//! Invariants: a channel's free time only moves forward; a run's write-backs end no earlier than
//! `lines × service` after the channel's earlier work or the run's first issue, whichever is
//! later ([`channel_run`], equal to the line-by-line step: `tests::channel_run_is_the_step`).

use std::cell::Cell;
use std::rc::Rc;

/// The DRAM write channels of a machine, one per node: when each is next free. Cloning a
/// [`super::Model`] copies them (a second machine); [`super::Model::on_cpu`] shares them (a
/// second CPU of the same machine).
#[derive(Debug, Default)]
pub(super) struct Channels(Rc<Vec<Cell<u64>>>);

impl Clone for Channels {
    fn clone(&self) -> Channels {
        Channels(Rc::new(self.0.iter().map(|c| Cell::new(c.get())).collect()))
    }
}

impl Channels {
    /// `nodes` channels (at least one), all free.
    pub(super) fn new(nodes: usize) -> Channels {
        Channels(Rc::new((0..nodes.max(1)).map(|_| Cell::new(0)).collect()))
    }

    pub(super) fn share(&self) -> Channels {
        Channels(Rc::clone(&self.0))
    }

    /// `lines` write-backs of `service` ps each, into `node`'s channel, their lines issued
    /// from `t` one every `issue` ps: when the last is in DRAM. A node the machine does not
    /// have writes through channel 0 (a profile without `[numa]` has only that one).
    pub(super) fn write_back(
        &self,
        node: u32,
        t: u64,
        issue: u64,
        service: u64,
        lines: u64,
    ) -> u64 {
        let ch = self.0.get(node as usize).unwrap_or(&self.0[0]);
        let end = channel_run(ch.get(), t, issue, service, lines);
        ch.set(end);
        end
    }
}

/// The channel free at `free`, `k` write-backs of `service` ps whose lines are issued from `t`,
/// one every `issue` ps: when the last ends. Line by line, each starts when both its line has
/// been issued and the one before has ended: end_i = max(end_{i-1}, t + i × issue) + service.
/// Unrolled, the last end is the largest of the chain from `free`, the chain from the first
/// line, and the last line's own issue plus one service, all saturating.
pub(super) fn channel_run(free: u64, t: u64, issue: u64, service: u64, k: u64) -> u64 {
    if k == 0 {
        return free;
    }
    let chain = k.saturating_mul(service);
    free.saturating_add(chain).max(t.saturating_add(chain)).max(
        t.saturating_add((k - 1).saturating_mul(issue))
            .saturating_add(service),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn channel_run_is_the_step(
            free in 0u64..1_000_000,
            t in 0u64..1_000_000,
            issue in 0u64..5_000,
            service in 0u64..5_000,
            k in 0u64..400,
        ) {
            let mut end = free;
            for i in 0..k {
                end = end.max(t + i * issue) + service;
            }
            prop_assert_eq!(channel_run(free, t, issue, service, k), end);
        }
    }

    #[test]
    fn cpus_of_one_machine_share_a_node_s_channel_and_not_another_s() {
        let a = Channels::new(2);
        let b = a.share();
        assert_eq!(a.write_back(0, 0, 1, 10, 4), 40);
        // Queued behind the first CPU's four on node 0; alone on node 1.
        assert_eq!(b.write_back(0, 0, 1, 10, 1), 50);
        assert_eq!(b.write_back(1, 0, 1, 10, 1), 10);
        // A second machine starts from a copy and moves on its own.
        let c = a.clone();
        assert_eq!(c.write_back(0, 50, 1, 10, 3), 80);
        assert_eq!(a.write_back(0, 50, 1, 10, 1), 60);
    }
}
