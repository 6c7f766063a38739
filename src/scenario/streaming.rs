//! The `streaming` workload: a driver's map/unmap or sync loop over one scatter-gather buffer.
//!
//! Kernel counterpart: none — this is the driver loop around the DMA API (`dma_map_sg` /
//! `dma_unmap_sg`, `dma_sync_sg_for_*`, `dma_map_page` / `dma_unmap_page`, `dma_map_single` /
//! `dma_unmap_single`) that `dma_map_benchmark` and most block and camera drivers run. The device
//! gets whatever ops setup gives it: dma-direct, or iommu-dma when the scenario has an `[iommu]`.
//!
//! Invariants: each API call's time is the Model clock's advance across it, so per-call means, the
//! per-stack breakdown and the total all come from the same charges and agree exactly. A call
//! the modelled kernel refuses is counted with its error, and the loop goes on as a driver
//! would (a refused map is not unmapped).

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::hw::cache::Access;
use crate::hw::calls::{CallTimer, stack_rows};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw};
use crate::input::InputError;
use crate::mm::physmem::NodeRange;
use crate::scatterlist::SgTable;
use crate::setup::{Machine, SetupError, setup_dma_ops, table_bytes};
use crate::types::{DmaAttrs, DmaDirection, PhysAddr};
use serde::Deserialize;
use toml::Spanned;

pub use crate::hw::calls::{CallStat, StackRow};
use crate::report::{
    CallDoc, DeviceDoc, FORMAT_VERSION, HeadDoc, StackDoc, TimeUnit, breakdown_docs, call_doc,
    counts_map, device_line, header, human_bytes, ns, refusals, stack_table, trim_float,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "streaming",
    summary: "map/unmap or sync loop over one scatter-gather buffer",
    parse,
};

/// Where simulated DRAM starts (arm64 SoCs commonly map DRAM at 2 GiB).
pub const DRAM_BASE: u64 = 0x8000_0000;
/// Largest buffer a streaming scenario may ask for: the model keeps the list in memory.
pub const MAX_BUFFER: u64 = 64 << 30;
/// Most sg entries a list may have (the model holds every entry; 4M entries is 16 GiB of pages).
pub const MAX_ENTRIES: u64 = 1 << 22;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    buffer: Option<Spanned<toml::Value>>,
    entry: Option<Spanned<toml::Value>>,
    entries: Option<Spanned<Vec<toml::Value>>>,
    calls: Option<Spanned<String>>,
    attrs: Option<Spanned<Vec<String>>>,
    direction: Option<Spanned<String>>,
    iterations: Option<Spanned<i64>>,
    cpu: Option<Spanned<String>>,
    rate: Option<Spanned<String>>,
    cpus: Option<Spanned<i64>>,
}

/// What the program does to the buffer between DMA transfers (`cpu`): before each for-device
/// step (map, `dma_sync_*_for_device`), after the previous for-CPU step. With a functional cache
/// model (`[cache_model]`) the lines' states follow; otherwise it changes nothing. The program's
/// own time is not charged: the workload times the DMA API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CpuTouch {
    /// Nothing: the buffer's lines stay as the maintenance left them.
    #[default]
    None,
    /// Reads every byte (a consumer of data the device wrote).
    ReadAll,
    /// Writes every byte (a producer filling the buffer for the device).
    WriteAll,
}

impl CpuTouch {
    pub const NAMES: &[&str] = &["none", "read_all", "write_all"];

    pub fn parse(s: &str) -> Option<CpuTouch> {
        match s {
            "none" => Some(CpuTouch::None),
            "read_all" => Some(CpuTouch::ReadAll),
            "write_all" => Some(CpuTouch::WriteAll),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CpuTouch::None => "none",
            CpuTouch::ReadAll => "read_all",
            CpuTouch::WriteAll => "write_all",
        }
    }

    fn apply(self, hw: &mut dyn Hw, start: PhysAddr, bytes: u64) {
        match self {
            CpuTouch::None => {}
            CpuTouch::ReadAll => hw.cpu_touch(Access::Read, start, bytes),
            CpuTouch::WriteAll => hw.cpu_touch(Access::Write, start, bytes),
        }
    }
}

/// Which DMA API calls a streaming workload makes each iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// `dma_map_sg` then `dma_unmap_sg` of the whole list.
    MapUnmapSg,
    /// The list is mapped once; each iteration `dma_sync_sg_for_device` then `dma_sync_sg_for_cpu`.
    SyncSg,
    /// Each entry on its own: `dma_map_page` then `dma_unmap_page`.
    MapUnmapPage,
    /// Each entry on its own: `dma_map_single` then `dma_unmap_single`.
    MapUnmapSingle,
    /// Each entry mapped once with `dma_map_single`; each iteration `dma_sync_single_for_device`
    /// then `dma_sync_single_for_cpu` of every entry (a driver handing a kmalloc'ed block to its
    /// device and back, seed 002's streaming design).
    SyncSingle,
}

impl Calls {
    pub const NAMES: &[&str] = &[
        "map_sg+unmap_sg",
        "sync_sg_for_device+for_cpu",
        "map_page+unmap_page",
        "map_single+unmap_single",
        "sync_single_for_device+for_cpu",
    ];

    pub fn parse(s: &str) -> Option<Calls> {
        match s {
            "map_sg+unmap_sg" => Some(Calls::MapUnmapSg),
            "sync_sg_for_device+for_cpu" | "sync_sg" => Some(Calls::SyncSg),
            "map_page+unmap_page" => Some(Calls::MapUnmapPage),
            "map_single+unmap_single" => Some(Calls::MapUnmapSingle),
            "sync_single_for_device+for_cpu" | "sync_single" => Some(Calls::SyncSingle),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Calls::MapUnmapSg => Calls::NAMES[0],
            Calls::SyncSg => Calls::NAMES[1],
            Calls::MapUnmapPage => Calls::NAMES[2],
            Calls::MapUnmapSingle => Calls::NAMES[3],
            Calls::SyncSingle => Calls::NAMES[4],
        }
    }
}

/// A streaming loop over one scatter-gather buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Streaming {
    pub buffer_bytes: u64,
    /// Entry sizes, cycled over the buffer.
    pub entry_bytes: Vec<u32>,
    pub direction: DmaDirection,
    pub calls: Calls,
    pub iterations: u32,
    /// `DMA_ATTR_*` passed to map and unmap calls.
    pub attrs: DmaAttrs,
    /// What the program does to the buffer between transfers.
    pub cpu: CpuTouch,
    /// How often the driver runs one iteration (`rate = "30/s"`), per second: the report gives
    /// the share of one CPU the calls take at that rate.
    pub rate_per_s: Option<f64>,
    /// CPUs running the loop at once, each over a buffer of its own, the device shared
    /// (`cpus`, default 1), and the line of the key, for the check against the platform.
    pub cpus: u32,
    pub cpus_line: Option<usize>,
}

/// `rate`: `"30/s"`, `"30 Hz"`, `"60 fps"` (one iteration a frame), `"1.5k/s"`; at most a
/// billion a second.
fn parse_rate(s: &str) -> Option<f64> {
    let t = s.trim().to_ascii_lowercase();
    let num = ["/s", "hz", "fps"]
        .iter()
        .find_map(|u| t.strip_suffix(u))?
        .trim();
    let (num, mult) = match num.strip_suffix('k') {
        Some(n) => (n, 1e3),
        None => match num.strip_suffix('m') {
            Some(n) => (n, 1e6),
            None => (num, 1.0),
        },
    };
    let v: f64 = num.trim().parse().ok()?;
    let v = v * mult;
    (v.is_finite() && v > 0.0 && v <= 1e9).then_some(v)
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let buffer = w
        .buffer
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "buffer", "the buffer size, e.g. \"10M\""))?;
    let buffer_bytes = c.size(buffer.get_ref(), buffer.span(), "workload.buffer")?;
    if buffer_bytes > MAX_BUFFER {
        return Err(c.err(
            buffer.span(),
            "workload.buffer",
            format!("at most {MAX_BUFFER} bytes"),
        ));
    }
    let entry_bytes: Vec<u32> = match (&w.entry, &w.entries) {
        (Some(e), None) => vec![c.size(e.get_ref(), e.span(), "workload.entry")?],
        (None, Some(list)) if !list.get_ref().is_empty() => list
            .get_ref()
            .iter()
            .map(|v| c.size(v, list.span(), "workload.entries"))
            .collect::<Result<_, _>>()?,
        (None, Some(list)) => {
            return Err(c.err(list.span(), "workload.entries", "must not be empty"));
        }
        (Some(e), Some(_)) => {
            return Err(c.err(
                e.span(),
                "workload.entry",
                "give `entry` or `entries`, not both",
            ));
        }
        (None, None) => {
            return Err(c.err(
                w.kind.span(),
                "workload.entry",
                "missing: give `entry` (one size) or `entries` (a list)",
            ));
        }
    }
    .into_iter()
    .map(|n| u32::try_from(n).ok().filter(|&n| n <= 1 << 30))
    .collect::<Option<_>>()
    .ok_or_else(|| {
        c.err(
            w.entry.as_ref().map(|e| e.span()).unwrap_or(w.kind.span()),
            "workload.entry",
            "an sg entry is at most 1 GiB",
        )
    })?;
    let smallest = u64::from(*entry_bytes.iter().min().unwrap_or(&1));
    if buffer_bytes / smallest.max(1) > MAX_ENTRIES {
        return Err(c.err(
            buffer.span(),
            "workload.buffer",
            format!("{buffer_bytes} bytes in entries of {smallest} bytes is more than {MAX_ENTRIES} sg entries"),
        ));
    }
    let d = w.direction.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "direction",
            "bidirectional, to_device or from_device",
        )
    })?;
    let direction = c.direction(d)?;
    let calls_v = w.calls.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "calls",
            &format!("one of {}", Calls::NAMES.join(", ")),
        )
    })?;
    let calls = Calls::parse(calls_v.get_ref()).ok_or_else(|| {
        c.err(
            calls_v.span(),
            "workload.calls",
            format!(
                "unknown calls `{}`; choose one of: {}",
                calls_v.get_ref(),
                Calls::NAMES.join(", ")
            ),
        )
    })?;
    let it = w
        .iterations
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "iterations", "1..=1000000"))?;
    let iterations = c.int(it, "workload.iterations", 1..=1_000_000)? as u32;

    let mut attrs = DmaAttrs::NONE;
    if let Some(list) = &w.attrs {
        for a in list.get_ref() {
            match a.as_str() {
                "skip_cpu_sync" | "DMA_ATTR_SKIP_CPU_SYNC" => {
                    attrs = attrs.union(DmaAttrs::SKIP_CPU_SYNC)
                }
                _ => {
                    return Err(c.err(
                        list.span(),
                        "workload.attrs",
                        format!("unknown attribute `{a}`; known: skip_cpu_sync"),
                    ));
                }
            }
        }
    }
    let cpu = match &w.cpu {
        None => CpuTouch::None,
        Some(v) => CpuTouch::parse(v.get_ref()).ok_or_else(|| {
            c.err(
                v.span(),
                "workload.cpu",
                format!(
                    "unknown CPU access `{}`; choose one of: {}",
                    v.get_ref(),
                    CpuTouch::NAMES.join(", ")
                ),
            )
        })?,
    };
    let rate_per_s = match &w.rate {
        None => None,
        Some(v) => Some(parse_rate(v.get_ref()).ok_or_else(|| {
            c.err(
                v.span(),
                "workload.rate",
                format!(
                    "expected how often an iteration runs, e.g. \"30/s\", \"1k/s\" or \"60 fps\" (more than 0, at most 1e9 a second), found \"{}\"",
                    v.get_ref()
                ),
            )
        })?),
    };
    let cpus = match &w.cpus {
        None => 1,
        Some(n) => c.int(n, "workload.cpus", 1..=crate::smp::MAX_CPUS as i64)? as u32,
    };
    Ok(Workload::Streaming(Streaming {
        buffer_bytes,
        entry_bytes,
        direction,
        calls,
        iterations,
        attrs,
        cpu,
        rate_per_s,
        cpus,
        cpus_line: w.cpus.as_ref().map(|n| c.line(n.span())),
    }))
}

#[derive(Clone, Debug)]
pub struct RunResult {
    /// Which scenario ran where, under which policies.
    pub info: RunInfo,
    pub device: Device,
    /// Which ops served the device (`dma-direct`, `iommu-dma`, ...).
    pub dma_ops: String,
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

    /// The modelled time of one iteration's calls.
    pub fn iteration_ps(&self) -> f64 {
        self.total_ps as f64 / f64::from(self.workload.iterations.max(1))
    }

    /// At the workload's `rate`, the fraction of one CPU the calls take (1.0: all of it).
    pub fn cpu_share(&self) -> Option<f64> {
        self.workload
            .rate_per_s
            .map(|r| self.iteration_ps() * 1e-12 * r)
    }
}

/// The machine a driver's loop over one buffer of `bytes` runs on: the NUMA SMMUv3 boot when the
/// run probes one, else one node at [`DRAM_BASE`] with room for the buffer (and its page tables
/// behind an `[iommu]`).
pub(super) fn boot_for_buffer(s: &Scenario, node: u32, bytes: u64) -> Result<Machine, SetupError> {
    if s.probes_smmu_v3() {
        return Machine::boot_numa_smmu_v3(&s.profile, s.kernel, &s.boot, node);
    }
    let mut node_size = bytes.next_power_of_two().max(1 << 20) * 2;
    if s.iommu.is_some() {
        node_size += table_bytes(bytes);
    }
    Ok(Machine::boot(
        &s.profile,
        vec![NodeRange {
            node,
            start: PhysAddr(DRAM_BASE),
            size: node_size,
        }],
    ))
}

/// A buffer of `bytes` at [`DRAM_BASE`] that dma-direct cannot reach, with no bounce pool to fall
/// back on, fails every map: the input says so before anything runs.
pub(super) fn check_reach(s: &Scenario, bytes: u64, what: &str) -> Result<(), InputError> {
    if s.iommu.is_none() {
        let last = DRAM_BASE.saturating_add(bytes.saturating_sub(1));
        if last > s.device.dma_mask {
            let msg = format!(
                "the buffer ends at {last:#x}, above the device's mask {:#x}, and {what} has no swiotlb pool to bounce through: every map would fail (raise the mask, or put the device behind an [iommu])",
                s.device.dma_mask
            );
            return Err(s.error(
                &super::Origin::File(s.lines.mask),
                "device.dma_mask_bits",
                msg,
            ));
        }
    }
    Ok(())
}

/// Run a checked streaming scenario on the Model: its CPUs at once (one, by default), each
/// over a buffer of its own on its node, the device's DMA layers shared ([`crate::smp`]).
pub fn run(s: &Scenario, w: &Streaming, progress: &Progress) -> Result<RunResult, RunFailure> {
    // The driver's calls, and its buffers, on its device's node.
    let placed = super::smp_cpus::place(s, w.cpus, None);
    let mut m = boot_for_buffer(s, placed[0].1, w.buffer_bytes * u64::from(w.cpus))?;
    // The driver's buffers first, as they would be allocated before the device is opened.
    let bufs = placed
        .iter()
        .map(|&(_, node)| m.mem.borrow_mut().alloc(node, w.buffer_bytes))
        .collect::<Result<Vec<_>, _>>()
        .map_err(SetupError::Buffer)?;
    let api = setup_dma_ops(
        &mut m,
        &s.device_setup(),
        super::smp_cpus::per_cpu_slots(s, &placed),
    )?;
    let mut hw = m.hw;
    hw.clear_ledger();
    // Where every CPU's charges are summed.
    let mut total = hw.clone();
    let machines = super::smp_cpus::machines(hw, api, &placed)?;
    let runs = super::smp_cpus::run_each(
        machines.into_iter().zip(bufs),
        progress,
        &|((mut hw, api), buf): ((Model, std::rc::Rc<_>), _), c, progress| {
            hw.set_cpu(c);
            let (t, entries) = driver_loop(&mut hw, &api, buf, w, progress);
            (hw, t, entries)
        },
    )?;
    let mut t = CallTimer::default();
    for (hw, calls, _) in &runs {
        total.absorb_ledger(hw);
        t.absorb(calls);
    }
    let mut hw = total;
    let stacks = stack_rows(hw.ledger());
    t.attribute(&stacks);
    Ok(RunResult {
        info: s.run_info(),
        device: s.device.clone(),
        dma_ops: s.dma_ops().describe(&s.policies),
        workload: w.clone(),
        entries: runs[0].2,
        calls: t.stats,
        counts: hw.ledger().totals(),
        stacks,
        total_ps: hw.ledger().total_ps(),
    })
}

/// One CPU's loop over its buffer: the driver's calls, timed. Returns the calls and the
/// buffer's sg entries.
fn driver_loop(
    hw: &mut Model,
    api: &crate::setup::DeviceDmaApi,
    buf: PhysAddr,
    w: &Streaming,
    progress: Option<&Progress>,
) -> (CallTimer, usize) {
    let hw = &mut *hw;
    let mut sgt = SgTable::from_contiguous(buf, w.buffer_bytes, &w.entry_bytes);
    let (dir, attrs) = (w.direction, w.attrs);
    let mut t = CallTimer::default();
    let touch = |hw: &mut dyn Hw| w.cpu.apply(hw, buf, w.buffer_bytes);
    let advance = || {
        if let Some(p) = progress {
            p.advance(1);
        }
    };

    match w.calls {
        Calls::MapUnmapSg => {
            for _ in 0..w.iterations {
                touch(hw);
                let mapped =
                    t.time_result(hw, "dma_map_sg", |hw| api.map_sg(hw, &mut sgt, dir, attrs));
                if mapped.is_some() {
                    t.time(hw, "dma_unmap_sg", |hw| {
                        api.unmap_sg(hw, &mut sgt, dir, attrs)
                    });
                }
                advance();
            }
        }
        Calls::SyncSg => {
            let mapped = t.time_result(hw, "dma_map_sg", |hw| api.map_sg(hw, &mut sgt, dir, attrs));
            if mapped.is_some() {
                hw.clear_ledger();
                t.clear();
                for _ in 0..w.iterations {
                    touch(hw);
                    t.time(hw, "dma_sync_sg_for_device", |hw| {
                        api.sync_sg_for_device(hw, &sgt, dir)
                    });
                    t.time(hw, "dma_sync_sg_for_cpu", |hw| {
                        api.sync_sg_for_cpu(hw, &sgt, dir)
                    });
                    advance();
                }
            }
        }
        Calls::SyncSingle => {
            let regions: Vec<(PhysAddr, u64)> = sgt
                .entries
                .iter()
                .map(|e| (e.phys(), u64::from(e.length)))
                .collect();
            let mut mapped = Vec::with_capacity(regions.len());
            for &(phys, len) in &regions {
                if let Some(addr) = t.time_result(hw, "dma_map_single", |hw| {
                    api.map_single(hw, phys, len, dir, attrs)
                }) {
                    mapped.push((addr, len));
                }
            }
            // The driver's set-up is not part of the loop it measures.
            hw.clear_ledger();
            t.clear();
            for _ in 0..w.iterations {
                for &(addr, len) in &mapped {
                    w.cpu.apply(hw, PhysAddr(addr.0), len);
                    t.time(hw, "dma_sync_single_for_device", |hw| {
                        api.sync_single_for_device(hw, addr, len, dir)
                    });
                    t.time(hw, "dma_sync_single_for_cpu", |hw| {
                        api.sync_single_for_cpu(hw, addr, len, dir)
                    });
                }
                advance();
            }
        }
        Calls::MapUnmapPage | Calls::MapUnmapSingle => {
            let single = w.calls == Calls::MapUnmapSingle;
            let (map, unmap) = if single {
                ("dma_map_single", "dma_unmap_single")
            } else {
                ("dma_map_page", "dma_unmap_page")
            };
            let regions: Vec<(PhysAddr, u64)> = sgt
                .entries
                .iter()
                .map(|e| (e.phys(), u64::from(e.length)))
                .collect();
            for _ in 0..w.iterations {
                for &(phys, len) in &regions {
                    w.cpu.apply(hw, phys, len);
                    let addr = t.time_result(hw, map, |hw| {
                        if single {
                            api.map_single(hw, phys, len, dir, attrs)
                        } else {
                            api.map_page(hw, phys, len, dir, attrs)
                        }
                    });
                    if let Some(addr) = addr {
                        t.time(hw, unmap, |hw| {
                            if single {
                                api.unmap_single(hw, addr, len, dir, attrs)
                            } else {
                                api.unmap_page(hw, addr, len, dir, attrs)
                            }
                        });
                    }
                }
                advance();
            }
        }
    }
    debug_assert!(hw.ledger().depth_is_zero());
    (t, sgt.orig_nents())
}

// Rendering: the terminal table and the JSON document of this kind's result.

#[derive(Serialize)]
struct RunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    device: DeviceDoc<'a>,
    workload: WorkloadDoc,
    calls: Vec<CallDoc>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
    /// At the workload's `rate`: the calls' modelled time per second over one second, the
    /// fraction of one CPU they take.
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_share: Option<f64>,
}

#[derive(Serialize)]
struct WorkloadDoc {
    kind: &'static str,
    calls: &'static str,
    buffer_bytes: u64,
    entry_bytes: Vec<u32>,
    entries: usize,
    direction: &'static str,
    iterations: u32,
    attrs: Vec<&'static str>,
    #[serde(skip_serializing_if = "is_none")]
    cpu: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_per_s: Option<f64>,
    /// CPUs running the loop at once (left out for one).
    #[serde(skip_serializing_if = "is_one")]
    cpus: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_none(c: &&'static str) -> bool {
    *c == CpuTouch::None.name()
}

/// The `dmasim run --format json` document.
pub fn json(r: &RunResult) -> serde_json::Value {
    let doc = RunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        device: DeviceDoc::of(&r.device),
        workload: WorkloadDoc {
            kind: "streaming",
            calls: r.workload.calls.name(),
            buffer_bytes: r.workload.buffer_bytes,
            entry_bytes: r.workload.entry_bytes.clone(),
            entries: r.entries,
            direction: r.workload.direction.name(),
            iterations: r.workload.iterations,
            attrs: attr_names(r.workload.attrs),
            cpu: r.workload.cpu.name(),
            rate_per_s: r.workload.rate_per_s,
            cpus: r.workload.cpus,
        },
        cpu_share: r.cpu_share(),
        calls: r.calls.iter().map(call_doc).collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

fn attr_names(a: crate::types::DmaAttrs) -> Vec<&'static str> {
    let mut v = Vec::new();
    if a.contains(crate::types::DmaAttrs::SKIP_CPU_SYNC) {
        v.push("skip_cpu_sync");
    }
    v
}

/// The `dmasim run` terminal table.
pub fn table(r: &RunResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    // Per iteration of one CPU: every CPU ran the loop.
    let it = u64::from(w.iterations) * u64::from(w.cpus);
    header(&mut o, &r.info);
    device_line(&mut o, &r.device);
    if r.dma_ops != "dma-direct" {
        let _ = writeln!(o, "dma ops    {}", r.dma_ops);
    }
    let sizes: Vec<String> = w
        .entry_bytes
        .iter()
        .map(|&e| human_bytes(u64::from(e)))
        .collect();
    let _ = writeln!(
        o,
        "workload   {} of {} in {} entries ({}), {}{}{}, {} iterations",
        w.calls.name(),
        human_bytes(w.buffer_bytes),
        sizes.join("/"),
        r.entries,
        w.direction,
        attr_names(w.attrs)
            .iter()
            .map(|a| format!(", {a}"))
            .collect::<String>(),
        match w.cpu {
            CpuTouch::None => String::new(),
            c => format!(", cpu {}", c.name()),
        },
        w.iterations
    );
    if w.cpus > 1 {
        let _ = writeln!(
            o,
            "cpus       {} at once, each over a buffer of its own (figures sum them)",
            w.cpus
        );
    }
    let unit = TimeUnit::for_column(r.calls.iter().map(|c| c.mean_ns()));
    let _ = writeln!(
        o,
        "\n{:<28} {:>10} {:>14}",
        "call",
        "count",
        unit.header("mean")
    );
    for c in &r.calls {
        let _ = writeln!(
            o,
            "{:<28} {:>10} {:>14}",
            c.call,
            c.count,
            unit.num(c.mean_ns())
        );
    }
    if let (Some(rate), Some(share)) = (w.rate_per_s, r.cpu_share()) {
        let _ = writeln!(
            o,
            "at {}/s    {:.3} % of one CPU ({} of calls a second)",
            trim_float(rate),
            share * 100.0,
            crate::report::human_time_ns(share * 1e9)
        );
    }
    refusals(
        &mut o,
        r.calls
            .iter()
            .map(|c| (c.call, c.errors, c.first_error.as_deref())),
    );
    if r.dma_ops != "dma-direct" {
        per_call_operations(&mut o, r);
    }
    if w.cpus > 1 {
        crate::report::waits_table(&mut o, &r.stacks, r.total_ps, it, "per iteration of a CPU");
    }
    let _ = writeln!(o, "\noperations per iteration");
    crate::report::operations_per_iteration(&mut o, &r.counts, r.info.arch, it);
    stack_table(&mut o, "per iteration", &r.stacks, r.total_ps, it);
    o
}

/// Each call's own operations, per call: what an IOMMU-backed device pays in IOVA, page-table
/// and TLB work on every map and unmap.
fn per_call_operations(o: &mut String, r: &RunResult) {
    let lines: Vec<String> = r
        .calls
        .iter()
        .filter_map(|c| {
            let ops: Vec<String> = Counter::ALL
                .iter()
                .filter(|k| c.counts[**k as usize] > 0)
                .map(|k| format!("{} {}", k.name(), trim_float(c.per_call(*k))))
                .collect();
            (!ops.is_empty()).then(|| format!("  {:<26} {}", c.call, ops.join(", ")))
        })
        .collect();
    // No heading over nothing.
    if !lines.is_empty() {
        let _ = writeln!(o, "\noperations per call");
        for l in lines {
            let _ = writeln!(o, "{l}");
        }
    }
}

impl super::WorkloadKind for Streaming {
    type Output = RunResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<RunResult, RunFailure> {
        run(s, self, progress)
    }

    /// A streaming buffer dma-direct cannot reach, with no bounce pool to fall back on, fails
    /// every map: the input says so before anything runs.
    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        super::smp_cpus::check_count(s, self.cpus, self.cpus_line, "workload.cpus")?;
        super::smp_cpus::check_shared(s, self.cpus, self.cpus_line, "workload.cpus")?;
        check_reach(s, self.buffer_bytes, "a streaming device")
    }

    fn work(&self, s: &Scenario) -> u128 {
        let bytes = u128::from(self.buffer_bytes);
        let entries = bytes / u128::from(*self.entry_bytes.iter().min().unwrap_or(&1)).max(1);
        let mut per = 2 * (bytes / s.work_line()) + 4 * entries;
        if s.iommu.is_some() {
            per += super::IOMMU_PAGE_STEPS * bytes / s.work_page();
        }
        u128::from(self.iterations) * per * u128::from(self.cpus)
    }

    fn progress_total(&self) -> u64 {
        u64::from(self.iterations)
    }

    fn probes_smmu(&self) -> bool {
        true
    }
}

impl super::KindResult for RunResult {
    super::kind::result_fields!();
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        super::kind::call_stat_totals(&self.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::tests::GOOD;

    fn go(s: &Scenario) -> RunResult {
        run(s, s.streaming().unwrap(), &Progress::new()).unwrap()
    }

    fn scenario(text: &str) -> Scenario {
        Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap()
    }

    #[test]
    fn breakdown_sums_to_the_calls() {
        for calls in Calls::NAMES {
            let s = scenario(&GOOD.replace("map_sg+unmap_sg", calls));
            let r = go(&s);
            let calls_total: u64 = r.calls.iter().map(|c| c.total_ps).sum();
            let stacks_total: u64 = r.stacks.iter().map(|s| s.self_ps).sum();
            assert_eq!(calls_total, r.total_ps, "{calls}");
            assert_eq!(stacks_total, r.total_ps, "{calls}");
            assert!(r.total_ps > 0);
        }
    }

    #[test]
    fn counts_come_from_the_walk() {
        let r = go(&scenario(GOOD));
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
        let r = go(&s);
        assert_eq!(
            r.count(Counter::CacheCleanLine) + r.count(Counter::CacheInvalLine),
            0
        );
        // 7.1 still closes each sg call with arch_sync_dma_flush() on a non-coherent device.
        assert_eq!(r.count(Counter::Barrier), 6);
    }

    #[test]
    fn deterministic() {
        let a = go(&scenario(GOOD));
        let b = go(&scenario(GOOD));
        assert_eq!(a.calls, b.calls);
        assert_eq!(a.stacks, b.stacks);
    }
}
