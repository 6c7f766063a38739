//! Bouncing: a device that cannot reach the buffers maps and unmaps them through swiotlb.
//!
//! Kernel counterpart: a 32-bit DMA master on a machine with memory above 4 GiB (or any device
//! under `swiotlb=force`): every `dma_map_page` claims slots in the bounce pool and copies, every
//! `dma_unmap_page` copies back and frees them. Which code runs depends on the release: from 6.0
//! dma-direct falls back to kernel/dma/swiotlb.c with its areas; before 6.0 on x86-64 the device's
//! ops are 2012's `swiotlb_dma_ops` (one pool lock; the `swiotlb_addr` policy picks 3.6 or 3.7
//! bookkeeping); before 6.0 elsewhere, dma-direct over the pool with 3.6's rules.
//!
//! What it models: for each mapping size, `cpus` CPUs each map `in_flight` buffers and then unmap
//! them, `iterations` times. The Model has one clock, so the CPUs are interleaved round robin:
//! CPU 0 maps, CPU 1 maps, ..., with `raw_smp_processor_id()` set to the caller so 6.0 picks that
//! CPU's area first. What concurrency would change is reported as counts, not as time: lock
//! acquisitions per area (3.6: the one pool lock). Contention — CPUs waiting for each other on a
//! lock — is not modelled; the busiest lock's share of all acquisitions says how much of it there
//! would be.
//!
//! Invariants: every slot a map claimed is released by its unmap, so the pool is pristine
//! between sizes; a mapping the pool cannot hold is the kernel's mapping error (counted), never a
//! panic.

use super::{Bounce, Scenario};
use crate::device::Device;
use crate::dma::direct::DmaDirect;
use crate::dma::mapping::DmaApi;
use crate::dma::swiotlb::x86_2012::{Swiotlb2012Config, Swiotlb2012Ops, bookkeeping_by_name};
use crate::dma::swiotlb::{Areas, Release, Swiotlb, SwiotlbConfig, nr_slots};
use crate::dma::{DmaError, DmaMapOps, sync_policy};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw};
use crate::mm::physmem::{NodeRange, PhysMem};
use crate::platform::Arch;
use crate::policy::{KernelVersion, Policies};
use crate::types::{DmaAttrs, PhysAddr};

use super::run::StackRow;

/// Below 4 GiB: where the pool is allocated.
const LOW: u64 = 0x1000_0000;
/// Above 4 GiB: out of a 32-bit device's reach.
const HIGH: u64 = 0x1_0000_0000;

/// One mapping size's results.
#[derive(Clone, Debug, PartialEq)]
pub struct BounceRow {
    pub size: u64,
    pub maps: u64,
    /// Maps that returned the kernel's mapping error (pool full, or the overflow buffer in 3.6).
    pub errors: u64,
    pub map_ps: u64,
    pub unmap_ps: u64,
    pub bounce_copies: u64,
    pub bounce_bytes: u64,
    pub slots_per_map: u64,
    /// Most slots in use at once.
    pub peak_slots: u64,
    /// Lock acquisitions per area (one entry before 6.0: the pool lock).
    pub locks: Vec<u64>,
}

impl BounceRow {
    fn per_map(&self, x: u64) -> f64 {
        x as f64 / self.maps.max(1) as f64
    }
    pub fn map_mean_ns(&self) -> f64 {
        self.per_map(self.map_ps) / 1000.0
    }
    pub fn unmap_mean_ns(&self) -> f64 {
        self.per_map(self.unmap_ps) / 1000.0
    }
    pub fn copied_per_map(&self) -> f64 {
        self.per_map(self.bounce_bytes)
    }
    /// The busiest lock's share of all acquisitions, in % (100 with one lock).
    pub fn busiest_lock_pct(&self) -> f64 {
        let total: u64 = self.locks.iter().sum();
        let max = self.locks.iter().copied().max().unwrap_or(0);
        if total == 0 {
            0.0
        } else {
            max as f64 * 100.0 / total as f64
        }
    }
}

#[derive(Clone, Debug)]
pub struct BounceResult {
    pub scenario: String,
    pub platform: String,
    pub arch: Arch,
    pub policies: Policies,
    pub device: Device,
    pub workload: Bounce,
    /// Which swiotlb code ran.
    pub implementation: String,
    pub pool_bytes: u64,
    pub nareas: usize,
    pub rows: Vec<BounceRow>,
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

/// Run a bounce scenario on the Model.
pub fn run(s: &Scenario, b: &Bounce) -> Result<BounceResult, DmaError> {
    let mut hw = Model::new(s.profile.model.clone());
    let largest = b.sizes.iter().copied().max().unwrap_or(1);
    let stride = largest.next_multiple_of(4096);
    let nbuf = u64::from(b.cpus) * u64::from(b.in_flight);
    let mem = PhysMem::new(vec![
        NodeRange {
            node: 0,
            start: PhysAddr(LOW),
            size: (s.swiotlb.size + (1 << 20)).next_multiple_of(4096),
        },
        NodeRange {
            node: 1,
            start: PhysAddr(HIGH),
            size: (nbuf * stride).next_multiple_of(4096).max(4096) * 2,
        },
    ])
    .shared();
    let bad = |e: crate::dma::swiotlb::SwiotlbError| DmaError::MappingError(e.to_string());
    let (ops, implementation): (Box<dyn DmaMapOps>, String) =
        if s.policies.kernel >= KernelVersion(6, 0) || s.profile.arch() != Arch::X86_64 {
            let release = if s.policies.kernel >= KernelVersion(6, 0) {
                Release::Linux6_0
            } else {
                Release::Linux3_6
            };
            let areas = match (release, s.swiotlb.areas) {
                (Release::Linux3_6, _) => Areas::Exact(1),
                (_, Some(n)) => Areas::Exact(n),
                (_, None) => Areas::PossibleCpus(b.cpus),
            };
            let pool = Swiotlb::new(
                &hw,
                mem.clone(),
                &SwiotlbConfig {
                    size: s.swiotlb.size,
                    areas,
                    release,
                    node: 0,
                    force: s.swiotlb.force,
                },
            )
            .map_err(bad)?;
            let sync = sync_policy::by_name(&s.policies.sync).ok_or_else(|| {
                DmaError::MappingError(format!("unknown sync policy `{}`", s.policies.sync))
            })?;
            let direct = DmaDirect::new(&hw, super::run::arch_for(&s.profile, &s.policies), sync)
                .with_swiotlb(pool);
            (
                Box::new(direct),
                format!("dma-direct over swiotlb ({} rules)", release.name()),
            )
        } else {
            let book = bookkeeping_by_name(&hw, &s.policies.swiotlb_addr).ok_or_else(|| {
                DmaError::MappingError(format!(
                    "unknown swiotlb_addr policy `{}`",
                    s.policies.swiotlb_addr
                ))
            })?;
            let ops = Swiotlb2012Ops::new(
                &hw,
                mem.clone(),
                &Swiotlb2012Config {
                    size: s.swiotlb.size,
                    node: 0,
                    force: s.swiotlb.force,
                },
                book,
            )
            .map_err(bad)?;
            (
                Box::new(ops),
                format!(
                    "2012 x86 swiotlb_dma_ops, one pool lock, swiotlb_addr={}",
                    s.policies.swiotlb_addr
                ),
            )
        };
    let bufs: Vec<PhysAddr> = (0..nbuf)
        .map(|_| {
            mem.borrow_mut()
                .alloc_aligned(1, stride, 4096)
                .map_err(|e| DmaError::MappingError(format!("buffer allocation: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let mut api = DmaApi::new(&hw, s.device.clone(), ops);
    let nareas = api.ops.swiotlb_pool().map_or(0, |p| p.nareas());
    let pool_bytes = api.ops.swiotlb_pool().map_or(0, |p| p.end().0 - p.start.0);
    let locks = |api: &DmaApi| -> Vec<u64> {
        api.ops
            .swiotlb_pool()
            .map(|p| p.table.areas.iter().map(|a| a.locks).collect())
            .unwrap_or_default()
    };

    let (dir, attrs) = (b.direction, DmaAttrs::NONE);
    let mut rows = Vec::new();
    for &size in &b.sizes {
        let locks0 = locks(&api);
        let counts0 = hw.ledger.totals();
        let mut row = BounceRow {
            size,
            maps: 0,
            errors: 0,
            map_ps: 0,
            unmap_ps: 0,
            bounce_copies: 0,
            bounce_bytes: 0,
            slots_per_map: nr_slots(size),
            peak_slots: 0,
            locks: Vec::new(),
        };
        for _ in 0..b.iterations {
            let mut mapped = Vec::with_capacity(bufs.len());
            for k in 0..b.in_flight {
                for cpu in 0..b.cpus {
                    let buf = bufs[(cpu * b.in_flight + k) as usize];
                    api.ops.set_cpu(cpu);
                    let t0 = hw.now_ps();
                    let r = api.map_page(&mut hw, buf, size, dir, attrs);
                    let ok = match r {
                        Ok(a) if !api.mapping_error(&mut hw, a) => Some(a),
                        _ => None,
                    };
                    row.map_ps += hw.now_ps() - t0;
                    row.maps += 1;
                    match ok {
                        Some(a) => mapped.push((cpu, a)),
                        None => row.errors += 1,
                    }
                }
            }
            let used = api.ops.swiotlb_pool().map_or(0, |p| p.table.used()) as u64;
            row.peak_slots = row.peak_slots.max(used);
            for (cpu, a) in mapped {
                api.ops.set_cpu(cpu);
                let t0 = hw.now_ps();
                api.unmap_page(&mut hw, a, size, dir, attrs);
                row.unmap_ps += hw.now_ps() - t0;
            }
        }
        let counts1 = hw.ledger.totals();
        row.bounce_copies =
            counts1[Counter::BounceCopy as usize] - counts0[Counter::BounceCopy as usize];
        row.bounce_bytes =
            counts1[Counter::BounceCopyBytes as usize] - counts0[Counter::BounceCopyBytes as usize];
        row.locks = locks(&api)
            .into_iter()
            .zip(locks0.iter().copied().chain(std::iter::repeat(0)))
            .map(|(a, b)| a - b)
            .collect();
        rows.push(row);
    }
    debug_assert!(hw.ledger.depth_is_zero());
    let stacks = hw
        .ledger
        .stacks()
        .into_iter()
        .map(|st| StackRow {
            stack: st.stack_string(),
            self_ps: st.self_ps,
            counts: st.counts,
        })
        .collect();
    Ok(BounceResult {
        scenario: s.name.clone(),
        platform: s.profile.name().to_string(),
        arch: s.profile.arch(),
        policies: s.policies.clone(),
        device: s.device.clone(),
        workload: b.clone(),
        implementation,
        pool_bytes,
        nareas,
        rows,
        stacks,
        total_ps: hw.ledger.total_ps(),
    })
}
