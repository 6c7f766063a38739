//! Running a scenario on the Model backend.
//!
//! Kernel counterpart: none — this is the driver loop around the DMA API.
//!
//! Invariants: each API call's time is the Model clock's advance across it, so per-call means, the
//! per-stack breakdown and the total all come from the same charges and agree exactly.

use super::{Calls, Scenario, Streaming};
use crate::arch::ArchDma;
use crate::arch::arm64::Arm64;
use crate::arch::x86::X86Flush;
use crate::device::Device;
use crate::dma::direct::DmaDirect;
use crate::dma::mapping::DmaApi;
use crate::dma::sync_policy;
use crate::hw::model::Model;
use crate::hw::{CacheOp, Counter, Hw};
use crate::mm::physmem::PhysMem;
use crate::platform::{Arch, Profile};
use crate::policy::Policies;
use crate::scatterlist::SgTable;
use crate::types::PhysAddr;

/// Where simulated DRAM starts (arm64 SoCs commonly map DRAM at 2 GiB).
pub const DRAM_BASE: u64 = 0x8000_0000;

/// Mean time of one kind of API call over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct CallStat {
    pub call: &'static str,
    pub count: u64,
    pub total_ps: u64,
}

impl CallStat {
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ps as f64 / self.count as f64 / 1000.0
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

#[derive(Clone, Debug)]
pub struct RunResult {
    pub scenario: String,
    pub platform: String,
    pub arch: Arch,
    pub policies: Policies,
    pub device: Device,
    pub workload: Streaming,
    pub entries: usize,
    pub calls: Vec<CallStat>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl RunResult {
    pub fn call(&self, name: &str) -> Option<&CallStat> {
        self.calls.iter().find(|c| c.call == name)
    }

    pub fn count(&self, c: Counter) -> u64 {
        self.counts[c as usize]
    }
}

/// The arch layer a profile's CPU uses under these policies.
pub fn arch_for(profile: &Profile, policies: &Policies) -> Box<dyn ArchDma> {
    match profile.arch() {
        Arch::Arm64 => Box::new(Arm64::new(policies.arm64_dir_rules)),
        Arch::X86_64 => Box::new(X86Flush {
            op: CacheOp::CleanInval,
        }),
    }
}

struct Timer {
    stats: Vec<CallStat>,
}

impl Timer {
    fn time<T>(
        &mut self,
        hw: &mut Model,
        call: &'static str,
        f: impl FnOnce(&mut Model) -> T,
    ) -> T {
        let t0 = hw.now_ps();
        let r = f(hw);
        let dt = hw.now_ps() - t0;
        match self.stats.iter_mut().find(|s| s.call == call) {
            Some(s) => {
                s.count += 1;
                s.total_ps += dt;
            }
            None => self.stats.push(CallStat {
                call,
                count: 1,
                total_ps: dt,
            }),
        }
        r
    }
}

/// Run a checked scenario on the Model.
pub fn run(s: &Scenario) -> Result<RunResult, crate::dma::DmaError> {
    let mut hw = Model::new(s.profile.model.clone());
    let sync =
        sync_policy::by_name(&s.policies.sync).expect("policy names are checked when parsed");
    let direct = DmaDirect::new(&hw, arch_for(&s.profile, &s.policies), sync);
    let mut api = DmaApi::new(&hw, s.device.clone(), Box::new(direct));

    let Some(w) = s.streaming() else {
        return Err(crate::dma::DmaError::MappingError(format!(
            "scenario `{}` is a {} workload, not a streaming one: run it with scenario::execute",
            s.name,
            s.workload.kind()
        )));
    };
    let node_size = w.buffer_bytes.next_power_of_two().max(1 << 20) * 2;
    let mut mem = PhysMem::single(PhysAddr(DRAM_BASE), node_size);
    let buf = mem
        .alloc(0, w.buffer_bytes)
        .expect("node is sized for the buffer");
    let mut sgt = SgTable::from_contiguous(buf, w.buffer_bytes, &w.entry_bytes);
    let (dir, attrs) = (w.direction, w.attrs);
    let mut t = Timer { stats: Vec::new() };

    match w.calls {
        Calls::MapUnmapSg => {
            for _ in 0..w.iterations {
                t.time(&mut hw, "dma_map_sg", |hw| {
                    api.map_sg(hw, &mut sgt, dir, attrs)
                })?;
                t.time(&mut hw, "dma_unmap_sg", |hw| {
                    api.unmap_sg(hw, &mut sgt, dir, attrs)
                });
            }
        }
        Calls::SyncSg => {
            api.map_sg(&mut hw, &mut sgt, dir, attrs)?;
            hw.clear_ledger();
            for _ in 0..w.iterations {
                t.time(&mut hw, "dma_sync_sg_for_device", |hw| {
                    api.sync_sg_for_device(hw, &sgt, dir)
                });
                t.time(&mut hw, "dma_sync_sg_for_cpu", |hw| {
                    api.sync_sg_for_cpu(hw, &sgt, dir)
                });
            }
        }
        Calls::MapUnmapPage => {
            let regions: Vec<(PhysAddr, u64)> = sgt
                .entries
                .iter()
                .map(|e| (e.phys(), u64::from(e.length)))
                .collect();
            for _ in 0..w.iterations {
                for &(phys, len) in &regions {
                    let addr = t.time(&mut hw, "dma_map_page", |hw| {
                        api.map_page(hw, phys, len, dir, attrs)
                    })?;
                    t.time(&mut hw, "dma_unmap_page", |hw| {
                        api.unmap_page(hw, addr, len, dir, attrs)
                    });
                }
            }
        }
    }
    debug_assert!(hw.ledger.depth_is_zero());

    let stacks = hw
        .ledger
        .stacks()
        .into_iter()
        .map(|s| StackRow {
            stack: s.stack_string(),
            self_ps: s.self_ps,
            counts: s.counts,
        })
        .collect();
    Ok(RunResult {
        scenario: s.name.clone(),
        platform: s.profile.name().to_string(),
        arch: s.profile.arch(),
        policies: s.policies.clone(),
        device: s.device.clone(),
        workload: w.clone(),
        entries: sgt.orig_nents(),
        calls: t.stats,
        counts: hw.ledger.totals(),
        stacks,
        total_ps: hw.ledger.total_ps(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::tests::GOOD;

    fn scenario(text: &str) -> Scenario {
        Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn breakdown_sums_to_the_calls() {
        for calls in Calls::NAMES {
            let s = scenario(&GOOD.replace("map_sg+unmap_sg", calls));
            let r = run(&s).unwrap();
            let calls_total: u64 = r.calls.iter().map(|c| c.total_ps).sum();
            let stacks_total: u64 = r.stacks.iter().map(|s| s.self_ps).sum();
            assert_eq!(calls_total, r.total_ps, "{calls}");
            assert_eq!(stacks_total, r.total_ps, "{calls}");
            assert!(r.total_ps > 0);
        }
    }

    #[test]
    fn counts_come_from_the_walk() {
        let r = run(&scenario(GOOD)).unwrap();
        // 1 MiB / 64 B = 16384 lines per pass, 3 iterations; map cleans, unmap invalidates.
        assert_eq!(r.count(Counter::CacheCleanLine), 3 * 16384);
        assert_eq!(r.count(Counter::CacheInvalLine), 3 * 16384);
        // batched: one barrier per call.
        assert_eq!(r.count(Counter::Barrier), 6);
        assert_eq!(r.entries, 256);
    }

    #[test]
    fn skip_cpu_sync_leaves_only_the_batched_flush() {
        let s = scenario(&GOOD.replace(
            "iterations = 3",
            "iterations = 3\nattrs = [\"skip_cpu_sync\"]",
        ));
        let r = run(&s).unwrap();
        assert_eq!(
            r.count(Counter::CacheCleanLine) + r.count(Counter::CacheInvalLine),
            0
        );
        // 7.1 still closes each sg call with arch_sync_dma_flush() on a non-coherent device.
        assert_eq!(r.count(Counter::Barrier), 6);
    }

    #[test]
    fn deterministic() {
        let a = run(&scenario(GOOD)).unwrap();
        let b = run(&scenario(GOOD)).unwrap();
        assert_eq!(a.calls, b.calls);
        assert_eq!(a.stacks, b.stacks);
    }
}
