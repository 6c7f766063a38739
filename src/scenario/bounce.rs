//! Bouncing: a device that cannot reach the buffers maps and unmaps them through swiotlb.
//!
//! Kernel counterpart: a 32-bit DMA master on a machine with memory above 4 GiB (or any device
//! under `swiotlb=force`): every `dma_map_page` claims slots in the bounce pool and copies, every
//! `dma_unmap_page` copies back and frees them. Which code runs depends on the release: from 6.0
//! dma-direct falls back to kernel/dma/swiotlb.c with its areas; before 6.0 on x86-64 the device's
//! ops are 2012's `swiotlb_dma_ops` (one pool lock; the `swiotlb_addr` policy picks 3.6 or 3.8
//! bookkeeping); before 6.0 elsewhere, dma-direct over the pool with 3.6's rules.
//!
//! What it models: for each mapping size, `cpus` CPUs each map `in_flight` buffers and then unmap
//! them, `iterations` times, all at once, each on its own clock ([`crate::smp`]), through the
//! device's one set of ops: one pool and its locks, `raw_smp_processor_id()` each CPU's own so
//! 6.0 picks its area first. A CPU that finds the pool's lock (or its area's) held spins until
//! its holder releases it, and the report says where the CPUs waited, beside the acquisitions
//! per area (3.6: the one pool lock) and the busiest lock's share of them.
//!
//! Invariants: every slot a map claimed is released by its unmap, so the pool is pristine
//! between sizes; a mapping the pool cannot hold is the kernel's mapping error (counted), never a
//! panic.

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::dma::swiotlb::nr_slots;
use crate::hw::Counter;
use crate::hw::calls::{CallTimer, StackRow, stack_rows};
use crate::input::InputError;
use crate::mm::physmem::NodeRange;
use crate::report::{
    DeviceDoc, FORMAT_VERSION, TimeUnit, breakdown_docs, device_line, header, human_bytes, ns,
    policies_map, trim_float,
};
use crate::setup::{DeviceDmaApi, Machine, SetupError, setup_dma_ops};
use crate::stats::Stats;
use crate::types::{DmaAttrs, DmaDirection, PhysAddr};
use serde::Deserialize;
use serde::Serialize;
use std::fmt::Write;
use std::rc::Rc;
use toml::Spanned;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "bounce",
    summary: "map/unmap sweep through the swiotlb bounce pool from several CPUs",
    parse,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    sizes: Option<Spanned<Vec<toml::Value>>>,
    direction: Option<Spanned<String>>,
    iterations: Option<Spanned<i64>>,
    cpus: Option<Spanned<i64>>,
    in_flight: Option<Spanned<i64>>,
}

/// A map/unmap sweep through the swiotlb bounce pool, from several CPUs at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounce {
    /// Mapping sizes, each at most 256 KiB (one segment).
    pub sizes: Vec<u64>,
    pub direction: DmaDirection,
    pub iterations: u32,
    /// CPUs mapping at once, each on its own clock.
    pub cpus: u32,
    pub cpus_line: Option<usize>,
    /// Mappings each CPU holds before unmapping them.
    pub in_flight: u32,
}

/// Most memory a bounce workload may hold mapped at once (cpus × in_flight × largest size).
pub const MAX_BOUNCE_IN_FLIGHT: u64 = 1 << 30;

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let list = w.sizes.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "sizes",
            "mapping sizes, e.g. [\"512\", \"4K\", \"64K\"]",
        )
    })?;
    if list.get_ref().is_empty() {
        return Err(c.err(list.span(), "workload.sizes", "must not be empty"));
    }
    let max = crate::dma::swiotlb::IO_TLB_MAX_MAPPING;
    let mut sizes = Vec::new();
    for v in list.get_ref() {
        let n = c.size(v, list.span(), "workload.sizes")?;
        if n > max {
            return Err(c.err(
                list.span(),
                "workload.sizes",
                format!(
                    "{n} bytes: swiotlb bounces at most {max} bytes ({} KiB, one segment of {} slots) in one mapping (swiotlb_max_mapping_size)",
                    max >> 10,
                    crate::dma::swiotlb::IO_TLB_SEGSIZE
                ),
            ));
        }
        sizes.push(n);
    }
    let d = w.direction.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "direction",
            "bidirectional, to_device or from_device",
        )
    })?;
    let direction = c.direction(d)?;
    let iterations = match &w.iterations {
        Some(i) => c.int(i, "workload.iterations", 1..=100_000)? as u32,
        None => 1,
    };
    let cpus = match &w.cpus {
        Some(n) => c.int(n, "workload.cpus", 1..=256)? as u32,
        None => 1,
    };
    let in_flight = match &w.in_flight {
        Some(n) => c.int(n, "workload.in_flight", 1..=4096)? as u32,
        None => 1,
    };
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let held = u64::from(cpus) * u64::from(in_flight) * largest.next_multiple_of(4096);
    if held > MAX_BOUNCE_IN_FLIGHT {
        return Err(c.err(
            w.in_flight.as_ref().map(|x| x.span()).unwrap_or(w.kind.span()),
            "workload.in_flight",
            format!(
                "cpus x in_flight x the largest size is {held} bytes of buffers; at most {MAX_BOUNCE_IN_FLIGHT}"
            ),
        ));
    }
    Ok(Workload::Bounce(Bounce {
        sizes,
        direction,
        iterations,
        cpus,
        cpus_line: w.cpus.as_ref().map(|n| c.line(n.span())),
        in_flight,
    }))
}

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
    /// Which scenario ran where, under which policies.
    pub info: RunInfo,
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
pub fn run(s: &Scenario, b: &Bounce, progress: &Progress) -> Result<BounceResult, RunFailure> {
    let largest = b.sizes.iter().copied().max().unwrap_or(1);
    let stride = largest.next_multiple_of(4096);
    let nbuf = u64::from(b.cpus) * u64::from(b.in_flight);
    let mut m = Machine::boot(
        &s.profile,
        vec![
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
        ],
    );
    let api = setup_dma_ops(&mut m, &s.device_setup(), b.cpus)?;
    let implementation = s.dma_ops().describe(&s.policies);
    let Machine { mut hw, mem, .. } = m;
    let bufs: Vec<PhysAddr> = (0..nbuf)
        .map(|_| {
            mem.borrow_mut()
                .alloc_aligned(1, stride, 4096)
                .map_err(SetupError::Buffer)
        })
        .collect::<Result<_, _>>()?;
    let pool = api.ops.swiotlb_stats();
    let nareas = pool.as_ref().map_or(0, |p| p.nareas);
    let pool_bytes = pool.as_ref().map_or(0, |p| p.bytes);
    let locks = |api: &DeviceDmaApi| -> Vec<u64> {
        api.ops
            .swiotlb_stats()
            .and_then(|p| p.area_locks)
            .unwrap_or_default()
    };
    hw.clear_ledger();
    // Where every CPU's charges are summed.
    let mut total = hw.clone();
    // Every CPU maps through the device's one set of ops (one pool and its locks), and the
    // CPUs run at once, each on its own clock.
    let placed: Vec<(u32, u32)> = (0..b.cpus).map(|c| (c, 0)).collect();
    let mut machines = super::smp_cpus::machines(hw, api, &placed)?;

    let (dir, attrs) = (b.direction, DmaAttrs::NONE);
    let mut rows = Vec::new();
    for &size in &b.sizes {
        let locks0 = locks(&machines[0].1);
        let counts0: Vec<[u64; Counter::N]> = machines
            .iter_mut()
            .map(|(hw, _)| hw.ledger().totals())
            .collect();
        let runs = super::smp_cpus::run_each(
            machines.iter_mut().zip(bufs.chunks(b.in_flight as usize)),
            progress,
            &|((hw, api), mine): (&mut (crate::hw::model::Model, Rc<DeviceDmaApi>), _),
              c,
              progress| {
                hw.set_cpu(c);
                let r = bounce_loop(hw, api, mine, size, (dir, attrs), b.iterations, progress);
                hw.set_cpu(crate::smp::Cpu::alone());
                r
            },
        )?;
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
        for (t, maps, errors, peak) in &runs {
            let total = |call: &str| {
                t.stats
                    .iter()
                    .find(|c| c.call == call)
                    .map_or(0, |c| c.total_ps)
            };
            row.map_ps += total("dma_map_page");
            row.unmap_ps += total("dma_unmap_page");
            row.maps += maps;
            row.errors += errors;
            row.peak_slots = row.peak_slots.max(*peak);
        }
        for ((hw, _), before) in machines.iter_mut().zip(&counts0) {
            let after = hw.ledger().totals();
            row.bounce_copies +=
                after[Counter::BounceCopy as usize] - before[Counter::BounceCopy as usize];
            row.bounce_bytes += after[Counter::BounceCopyBytes as usize]
                - before[Counter::BounceCopyBytes as usize];
        }
        row.locks = locks(&machines[0].1)
            .into_iter()
            .zip(locks0.iter().copied().chain(std::iter::repeat(0)))
            .map(|(a, b)| a - b)
            .collect();
        rows.push(row);
    }
    for (hw, _) in &machines {
        total.absorb_ledger(hw);
    }
    let mut hw = total;
    debug_assert!(hw.ledger().depth_is_zero());
    let stacks = stack_rows(hw.ledger());
    Ok(BounceResult {
        info: s.run_info(),
        device: s.device.clone(),
        workload: b.clone(),
        implementation,
        pool_bytes,
        nareas,
        rows,
        stacks,
        total_ps: hw.ledger().total_ps(),
    })
}

/// One CPU's share of a row: `iterations` times, map each of its buffers and then unmap them.
/// Returns its calls, how many maps it made and how many the kernel refused, and the most slots
/// in use it saw after its maps.
fn bounce_loop(
    hw: &mut crate::hw::model::Model,
    api: &DeviceDmaApi,
    bufs: &[PhysAddr],
    size: u64,
    (dir, attrs): (crate::types::DmaDirection, DmaAttrs),
    iterations: u32,
    progress: Option<&Progress>,
) -> (CallTimer, u64, u64, u64) {
    let mut t = CallTimer::default();
    let (mut maps, mut errors, mut peak) = (0, 0, 0u64);
    for _ in 0..iterations {
        let mut mapped = Vec::with_capacity(bufs.len());
        for &buf in bufs {
            let ok = t.time(hw, "dma_map_page", |hw| {
                match api.map_page(hw, buf, size, dir, attrs) {
                    Ok(a) if !api.mapping_error(hw, a) => Some(a),
                    _ => None,
                }
            });
            maps += 1;
            match ok {
                Some(a) => mapped.push(a),
                None => errors += 1,
            }
        }
        // The pool's occupancy, unless another CPU is inside its lock (the table is its).
        let used = api.ops.swiotlb_stats().and_then(|p| p.used).unwrap_or(0) as u64;
        peak = peak.max(used);
        for a in mapped {
            t.time(hw, "dma_unmap_page", |hw| {
                api.unmap_page(hw, a, size, dir, attrs)
            });
        }
        if let Some(p) = progress {
            p.advance(1);
        }
    }
    (t, maps, errors, peak)
}

// Rendering: the terminal table and the JSON document of this kind's result.

/// The `dmasim run` table of a bounce scenario.
pub fn table(r: &BounceResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    header(&mut o, &r.info);
    device_line(&mut o, &r.device);
    let _ = writeln!(
        o,
        "swiotlb    {}, pool {}, {} lock{}",
        r.implementation,
        human_bytes(r.pool_bytes),
        r.nareas,
        if r.nareas == 1 { "" } else { "s (areas)" }
    );
    let _ = writeln!(
        o,
        "workload   bounce: {} CPUs at once each map {} buffer(s), then unmap them; {}, {} iterations",
        w.cpus, w.in_flight, w.direction, w.iterations
    );
    let map_unit = TimeUnit::for_column(r.rows.iter().map(|row| row.map_mean_ns()));
    let unmap_unit = TimeUnit::for_column(r.rows.iter().map(|row| row.unmap_mean_ns()));
    let _ = writeln!(
        o,
        "\n{:>8} {:>8} {:>7} {:>13} {:>15} {:>11} {:>6} {:>7} {:>8} {:>8}",
        "size",
        "maps",
        "errors",
        map_unit.header("map mean"),
        unmap_unit.header("unmap mean"),
        "copied/map",
        "slots",
        "peak",
        "locks",
        "busiest"
    );
    for row in &r.rows {
        let _ = writeln!(
            o,
            "{:>8} {:>8} {:>7} {:>13} {:>15} {:>11} {:>6} {:>7} {:>8} {:>7.1}%",
            human_bytes(row.size),
            row.maps,
            row.errors,
            map_unit.num(row.map_mean_ns()),
            unmap_unit.num(row.unmap_mean_ns()),
            trim_float(row.copied_per_map()),
            row.slots_per_map,
            row.peak_slots,
            row.locks.iter().sum::<u64>(),
            row.busiest_lock_pct()
        );
    }
    let _ = writeln!(o, "\nlock acquisitions per area, by size");
    for row in &r.rows {
        let per: Vec<String> = row.locks.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(o, "  {:>8}  [{}]", human_bytes(row.size), per.join(", "));
    }
    let maps: u64 = r.rows.iter().map(|row| row.maps).sum();
    crate::report::waits_table(
        &mut o,
        &r.stacks,
        r.total_ps,
        maps,
        "per map+unmap, all CPUs",
    );
    o
}

#[derive(Serialize)]
struct BounceRowDoc {
    size: u64,
    maps: u64,
    errors: u64,
    map_mean_ns: f64,
    unmap_mean_ns: f64,
    bounce_copies: u64,
    bounce_bytes: u64,
    slots_per_map: u64,
    peak_slots: u64,
    locks_per_area: Vec<u64>,
    busiest_lock_pct: f64,
}

/// The `dmasim run --format json` document of a bounce scenario.
pub fn json(r: &BounceResult) -> serde_json::Value {
    let w = &r.workload;
    serde_json::json!({
        "format_version": FORMAT_VERSION,
        "scenario": r.info.scenario,
        "platform": r.info.platform,
        "arch": r.info.arch.name(),
        "policies": policies_map(&r.info.policies, &r.info.target),
        "device": DeviceDoc::of(&r.device),
        "workload": {
            "kind": "bounce",
            "sizes": w.sizes,
            "direction": w.direction.name(),
            "iterations": w.iterations,
            "cpus": w.cpus,
            "in_flight": w.in_flight,
        },
        "swiotlb": {
            "implementation": r.implementation,
            "pool_bytes": r.pool_bytes,
            "areas": r.nareas,
        },
        "sizes": r.rows.iter().map(|row| BounceRowDoc {
            size: row.size,
            maps: row.maps,
            errors: row.errors,
            map_mean_ns: row.map_mean_ns(),
            unmap_mean_ns: row.unmap_mean_ns(),
            bounce_copies: row.bounce_copies,
            bounce_bytes: row.bounce_bytes,
            slots_per_map: row.slots_per_map,
            peak_slots: row.peak_slots,
            locks_per_area: row.locks.clone(),
            busiest_lock_pct: row.busiest_lock_pct(),
        }).collect::<Vec<_>>(),
        "breakdown": breakdown_docs(&r.stacks, r.total_ps),
        "total_ns": ns(r.total_ps),
    })
}

impl super::WorkloadKind for Bounce {
    type Output = BounceResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<BounceResult, RunFailure> {
        run(s, self, progress)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        s.profile.require_copy("a bounce workload")?;
        super::smp_cpus::check_shared(s, self.cpus, self.cpus_line, "workload.cpus")
    }

    fn work(&self, s: &Scenario) -> u128 {
        let line = s.work_line();
        let per: u128 = self
            .sizes
            .iter()
            .map(|&size| 640 + 2 * u128::from(size) / line)
            .sum();
        per * u128::from(self.iterations) * u128::from(self.cpus) * u128::from(self.in_flight)
    }

    fn progress_total(&self) -> u64 {
        self.sizes.len() as u64 * u64::from(self.iterations)
    }

    fn uses_swiotlb(&self) -> bool {
        true
    }

    fn behind_iommu(&self) -> bool {
        false
    }
}

impl super::KindResult for BounceResult {
    super::kind::result_fields!();
    /// Per size, its map and its unmap.
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        self.rows
            .iter()
            .flat_map(|row| {
                let size = human_bytes(row.size);
                [
                    (format!("map {size}"), row.maps, row.map_ps),
                    (format!("unmap {size}"), row.maps, row.unmap_ps),
                ]
            })
            .collect()
    }
}
