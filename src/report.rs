//! Rendering results: terminal tables and the stable JSON documents (docs/output.md).
//!
//! Kernel counterpart: none.
//!
//! Invariants: output depends only on the result, never on the clock or the environment, so the
//! same inputs give byte-identical output; JSON field order is fixed by the structs below.

use crate::hw::Counter;
use crate::platform::Arch;
use crate::scenario::{RunInfo, RunResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Version of the JSON documents' layout; bumped on any incompatible change.
pub const FORMAT_VERSION: u32 = 1;

pub fn ns(ps: u64) -> f64 {
    ps as f64 / 1000.0
}

/// A duration for people: ns, µs or ms with four significant-ish digits.
pub fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

pub fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn counts_map(c: &[u64; Counter::N]) -> BTreeMap<&'static str, u64> {
    Counter::ALL
        .iter()
        .filter(|k| c[**k as usize] > 0)
        .map(|k| (k.name(), c[*k as usize]))
        .collect()
}

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
}

#[derive(Serialize)]
struct DeviceDoc<'a> {
    name: &'a str,
    coherent: bool,
    dma_mask: String,
    numa_node: Option<u32>,
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
}

#[derive(Serialize)]
struct CallDoc {
    call: &'static str,
    count: u64,
    mean_ns: f64,
    total_ns: f64,
    /// Calls the modelled kernel refused (a mapping error), and the first refusal.
    refused: u64,
    first_refusal: Option<String>,
    /// Operations issued inside the call, per call.
    operations_per_call: BTreeMap<&'static str, f64>,
}

fn call_doc(c: &crate::scenario::CallStat) -> CallDoc {
    CallDoc {
        call: c.call,
        count: c.count,
        mean_ns: c.mean_ns(),
        total_ns: ns(c.total_ps),
        refused: c.errors,
        first_refusal: c.first_error.clone(),
        operations_per_call: Counter::ALL
            .iter()
            .filter(|k| c.counts[**k as usize] > 0)
            .map(|k| (k.name(), c.per_call(*k)))
            .collect(),
    }
}

#[derive(Serialize)]
struct StackDoc {
    stack: String,
    self_ns: f64,
    share_pct: f64,
    operations: BTreeMap<&'static str, u64>,
}

impl<'a> DeviceDoc<'a> {
    fn of(d: &'a crate::device::Device) -> DeviceDoc<'a> {
        DeviceDoc {
            name: &d.name,
            coherent: d.coherent,
            dma_mask: format!("{:#x}", d.dma_mask),
            numa_node: d.numa_node,
        }
    }
}

/// The release and every policy in effect for `t`, for the JSON documents' `policies`.
pub fn policies_map(
    p: &crate::policy::Policies,
    t: &crate::policy::Target,
) -> BTreeMap<&'static str, String> {
    let mut m: BTreeMap<&'static str, String> = p
        .in_effect(t)
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    m.insert("kernel", p.kernel.to_string());
    m
}

fn breakdown_docs(stacks: &[crate::scenario::StackRow], total_ps: u64) -> Vec<StackDoc> {
    stacks
        .iter()
        .map(|s| StackDoc {
            stack: s.stack.clone(),
            self_ns: ns(s.self_ps),
            share_pct: share(s.self_ps, total_ps),
            operations: counts_map(&s.counts),
        })
        .collect()
}

fn share(part: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (part as f64 * 100.0 / total as f64 * 1000.0).round() / 1000.0
    }
}

/// The `dmasim run --format json` document.
pub fn run_json(r: &RunResult) -> serde_json::Value {
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
        },
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

/// The first lines of every `run` table: scenario, platform and policies.
fn header(o: &mut String, i: &RunInfo) {
    let _ = writeln!(o, "scenario   {}", i.scenario);
    let _ = writeln!(
        o,
        "platform   {} ({}), {}",
        i.platform,
        i.arch.name(),
        i.policies.summary(&i.target)
    );
}

/// The head of every run document: scenario, platform, arch and the policies in effect.
#[derive(Serialize)]
struct HeadDoc<'a> {
    scenario: &'a str,
    platform: &'a str,
    arch: &'a str,
    policies: BTreeMap<&'static str, String>,
}

impl<'a> HeadDoc<'a> {
    fn of(i: &'a RunInfo) -> HeadDoc<'a> {
        HeadDoc {
            scenario: &i.scenario,
            platform: &i.platform,
            arch: i.arch.name(),
            policies: policies_map(&i.policies, &i.target),
        }
    }
}

fn device_line(o: &mut String, d: &crate::device::Device) {
    let kind = if d.coherent {
        "coherent"
    } else {
        "non-coherent"
    };
    let _ = writeln!(
        o,
        "device     {}: {kind}, dma_mask {:#x}",
        d.name, d.dma_mask
    );
}

fn instr(c: Counter, arch: Arch) -> &'static str {
    c.instruction(arch)
}

/// The `dmasim run` terminal table.
pub fn run_table(r: &RunResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    let it = u64::from(w.iterations);
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
        "workload   {} of {} in {} entries ({}), {}{}, {} iterations",
        w.calls.name(),
        human_bytes(w.buffer_bytes),
        sizes.join("/"),
        r.entries,
        w.direction,
        attr_names(w.attrs)
            .iter()
            .map(|a| format!(", {a}"))
            .collect::<String>(),
        w.iterations
    );
    let _ = writeln!(o, "\n{:<28} {:>10} {:>14}", "call", "count", "mean");
    for c in &r.calls {
        let _ = writeln!(
            o,
            "{:<28} {:>10} {:>14}",
            c.call,
            c.count,
            human_ns(c.mean_ns())
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
    let _ = writeln!(o, "\noperations per iteration");
    for c in Counter::ALL {
        let n = r.counts[c as usize];
        if n > 0 {
            let per = n as f64 / it as f64;
            let _ = writeln!(
                o,
                "  {:<12} {:<24} {:>12}",
                instr(c, r.info.arch),
                c.name(),
                trim_float(per)
            );
        }
    }
    let _ = writeln!(o, "\ntime by call stack (per iteration)");
    let _ = writeln!(o, "  {:>7} {:>12}  stack", "share", "time");
    for s in &r.stacks {
        if s.self_ps == 0 {
            continue;
        }
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>12}  {}",
            share(s.self_ps, r.total_ps),
            human_ns(ns(s.self_ps) / it as f64),
            s.stack
        );
    }
    o
}

/// Each call's own operations, per call: what an IOMMU-backed device pays in IOVA, page-table
/// and TLB work on every map and unmap.
fn per_call_operations(o: &mut String, r: &RunResult) {
    let _ = writeln!(o, "\noperations per call");
    for c in &r.calls {
        let ops: Vec<String> = Counter::ALL
            .iter()
            .filter(|k| c.counts[**k as usize] > 0)
            .map(|k| format!("{} {}", k.name(), trim_float(c.per_call(*k))))
            .collect();
        if !ops.is_empty() {
            let _ = writeln!(o, "  {:<26} {}", c.call, ops.join(", "));
        }
    }
}

/// What the modelled kernel refused, per call: a section only when something was.
fn refusals<'a>(o: &mut String, rows: impl Iterator<Item = (&'a str, u64, Option<&'a str>)>) {
    let rows: Vec<_> = rows.filter(|r| r.1 > 0).collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(o, "\nrefused by the modelled kernel");
    for (what, n, first) in rows {
        let _ = writeln!(o, "  {what:<26} {n:>8}  first: {}", first.unwrap_or("?"));
    }
}

fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// Folded stacks (`frame;frame;frame value`), the input of flame-graph tools; the value is
/// picoseconds so that no stack rounds to zero.
pub fn run_folded(r: &RunResult) -> String {
    folded(&r.stacks)
}

/// The `dmasim run` table of a forwarding scenario.
pub fn forwarding_table(r: &crate::scenario::forwarding::ForwardingResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    header(&mut o, &r.info);
    device_line(&mut o, &r.device);
    let _ = writeln!(
        o,
        "workload   forwarding {} packets of {} B, rx ring {}, rx page reuse {} %, {} CPUs",
        r.packets, w.packet_bytes, w.rx_ring, w.rx_reuse_percent, w.cpus
    );
    let _ = writeln!(
        o,
        "\nCPU time per packet {}  ->  {:.3} Mpps on {} CPUs",
        human_ns(r.per_packet_ns()),
        r.mpps(),
        w.cpus
    );
    if r.dropped > 0 {
        let _ = writeln!(o, "dropped    {} packets (mapping errors)", r.dropped);
    }
    let _ = writeln!(o, "\n{:<28} {:>10} {:>14}", "call", "per packet", "mean");
    for c in &r.calls {
        let _ = writeln!(
            o,
            "{:<28} {:>10} {:>14}",
            c.call,
            trim_float(r.calls_per_packet(c.call)),
            human_ns(c.mean_ns())
        );
    }
    let _ = writeln!(o, "\noperations per packet");
    for c in Counter::ALL {
        if r.counts[c as usize] > 0 {
            let _ = writeln!(
                o,
                "  {:<18} {:<24} {:>8}",
                instr(c, r.info.arch),
                c.name(),
                trim_float(r.per_packet(c))
            );
        }
    }
    let _ = writeln!(
        o,
        "\nself time by symbol (share of all cycles, as perf reports it)"
    );
    let _ = writeln!(o, "  {:>7} {:>12}  symbol", "share", "per packet");
    for (sym, ps) in r.symbols() {
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>12}  {}",
            share(ps, r.total_ps),
            human_ns(ns(ps) / r.packets.max(1) as f64),
            sym
        );
    }
    o
}

#[derive(Serialize)]
struct ForwardingDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    device: DeviceDoc<'a>,
    workload: ForwardingWorkloadDoc,
    per_packet_ns: f64,
    mpps: f64,
    dropped: u64,
    rx_pages_mapped: u64,
    calls: Vec<CallDoc>,
    operations_per_packet: BTreeMap<&'static str, f64>,
    symbols: Vec<SymbolDoc>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct ForwardingWorkloadDoc {
    kind: &'static str,
    packets: u64,
    packet_bytes: u32,
    rx_ring: u32,
    rx_reuse_percent: u32,
    cpus: u32,
}

#[derive(Serialize)]
struct SymbolDoc {
    symbol: String,
    self_ns_per_packet: f64,
    share_pct: f64,
}

/// The `dmasim run --format json` document of a forwarding scenario.
pub fn forwarding_json(r: &crate::scenario::forwarding::ForwardingResult) -> serde_json::Value {
    let w = &r.workload;
    let per = r.packets.max(1) as f64;
    let doc = ForwardingDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        device: DeviceDoc::of(&r.device),
        workload: ForwardingWorkloadDoc {
            kind: "forwarding",
            packets: w.packets,
            packet_bytes: w.packet_bytes,
            rx_ring: w.rx_ring,
            rx_reuse_percent: w.rx_reuse_percent,
            cpus: w.cpus,
        },
        per_packet_ns: r.per_packet_ns(),
        mpps: r.mpps(),
        dropped: r.dropped,
        rx_pages_mapped: r.rx_pages_mapped,
        calls: r.calls.iter().map(call_doc).collect(),
        operations_per_packet: Counter::ALL
            .iter()
            .filter(|c| r.counts[**c as usize] > 0)
            .map(|c| (c.name(), r.per_packet(*c)))
            .collect(),
        symbols: r
            .symbols()
            .into_iter()
            .map(|(symbol, ps)| SymbolDoc {
                share_pct: share(ps, r.total_ps),
                self_ns_per_packet: ns(ps) / per,
                symbol,
            })
            .collect(),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

/// Folded stacks of any run's breakdown.
pub fn folded(stacks: &[crate::scenario::StackRow]) -> String {
    let mut o = String::new();
    for s in stacks {
        if s.self_ps > 0 {
            let _ = writeln!(o, "{} {}", s.stack.replace(" > ", ";"), s.self_ps);
        }
    }
    o
}

/// The `dmasim run` table of a bounce scenario.
pub fn bounce_table(r: &crate::scenario::bounce::BounceResult) -> String {
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
        "workload   bounce: {} CPUs in turn each map {} buffer(s), then unmap them; {}, {} iterations",
        w.cpus, w.in_flight, w.direction, w.iterations
    );
    let _ = writeln!(
        o,
        "\n{:>8} {:>8} {:>7} {:>12} {:>12} {:>11} {:>6} {:>7} {:>8} {:>8}",
        "size",
        "maps",
        "errors",
        "map mean",
        "unmap mean",
        "copied/map",
        "slots",
        "peak",
        "locks",
        "busiest"
    );
    for row in &r.rows {
        let _ = writeln!(
            o,
            "{:>8} {:>8} {:>7} {:>12} {:>12} {:>11} {:>6} {:>7} {:>8} {:>7.1}%",
            human_bytes(row.size),
            row.maps,
            row.errors,
            human_ns(row.map_mean_ns()),
            human_ns(row.unmap_mean_ns()),
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
    let _ = writeln!(
        o,
        "\n(the model has one clock: CPUs take turns, so lock counts show where several CPUs would\n contend; the waiting itself is not modelled)"
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
pub fn bounce_json(r: &crate::scenario::bounce::BounceResult) -> serde_json::Value {
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

/// One operation (or sweep row) of an IOMMU run, in JSON.
#[derive(Serialize)]
struct IommuOpDoc {
    label: String,
    call: &'static str,
    bytes: u64,
    iova: String,
    count: u64,
    mean_ns: f64,
    total_ns: f64,
    /// Operations per call (a fraction where calls differ, e.g. table allocations in the first).
    operations_per_call: BTreeMap<&'static str, f64>,
    /// Calls the modelled kernel refused, and the first refusal.
    refused: u64,
    first_refusal: Option<String>,
}

#[derive(Serialize)]
struct IommuRunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    iommu: IommuDoc,
    workload: IommuWorkloadDoc,
    ops: Vec<IommuOpDoc>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct IommuDoc {
    granule: u64,
    ias: u32,
    smmu: &'static str,
    coherent_walk: bool,
}

#[derive(Serialize)]
struct IommuWorkloadDoc {
    kind: &'static str,
    iterations: u32,
}

fn per_call_map(o: &crate::scenario::iommu::OpStat) -> BTreeMap<&'static str, f64> {
    Counter::ALL
        .iter()
        .filter(|k| o.counts[**k as usize] > 0)
        .map(|k| (k.name(), o.per_call(*k)))
        .collect()
}

/// The `dmasim run --format json` document of an IOMMU scenario.
pub fn iommu_run_json(r: &crate::scenario::iommu::IommuRunResult) -> serde_json::Value {
    let doc = IommuRunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        iommu: IommuDoc {
            granule: r.iommu.granule,
            ias: r.iommu.ias,
            smmu: r.iommu.smmu.name(),
            coherent_walk: r.iommu.coherent_walk,
        },
        workload: IommuWorkloadDoc {
            kind: r.workload.kind(),
            iterations: iommu_iterations(&r.workload),
        },
        ops: r
            .ops
            .iter()
            .map(|o| IommuOpDoc {
                label: o.label.clone(),
                call: o.call,
                bytes: o.bytes,
                iova: format!("{:#x}", o.iova),
                count: o.calls,
                mean_ns: o.mean_ns(),
                total_ns: ns(o.total_ps),
                operations_per_call: per_call_map(o),
                refused: o.errors,
                first_refusal: o.first_error.clone(),
            })
            .collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

fn iommu_iterations(w: &crate::scenario::Workload) -> u32 {
    match w {
        crate::scenario::Workload::IommuSweep(s) => s.iterations,
        crate::scenario::Workload::IommuOps(o) => o.iterations,
        _ => 1,
    }
}

/// The SMMU and page-table operations shown per call in the IOMMU table, in this order.
const IOMMU_COLUMNS: &[(Counter, &str)] = &[
    (Counter::SmmuTlbiva, "TLBIVA"),
    (Counter::SmmuTlbival, "TLBIVAL"),
    (Counter::SmmuTlbiasid, "TLBIASID"),
    (Counter::SmmuTlbsync, "TLBSYNC"),
    (Counter::SmmuTlbstatusRead, "STATUS"),
    (Counter::Udelay, "udelay"),
    (Counter::CmdqTlbiNhVa, "NH_VA"),
    (Counter::CmdqTlbiNhAsid, "NH_ASID"),
    (Counter::CmdqSync, "CMD_SYNC"),
    (Counter::PgtableMapCall, "map call"),
    (Counter::PgtableUnmapCall, "unmap call"),
];

/// The `dmasim run` terminal table of an IOMMU scenario.
pub fn iommu_run_table(r: &crate::scenario::iommu::IommuRunResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let _ = writeln!(
        o,
        "iommu      {} KiB granule, {}-bit IAS, {}, {} table walker",
        r.iommu.granule >> 10,
        r.iommu.ias,
        r.iommu.smmu.name(),
        if r.iommu.coherent_walk {
            "coherent"
        } else {
            "non-coherent"
        }
    );
    let _ = writeln!(
        o,
        "workload   {}, {} iterations",
        r.workload.kind(),
        iommu_iterations(&r.workload)
    );
    let cols: Vec<&(Counter, &str)> = IOMMU_COLUMNS
        .iter()
        .filter(|(c, _)| r.ops.iter().any(|op| op.counts[*c as usize] > 0))
        .collect();
    let _ = write!(o, "\n{:<20} {:>7} {:>14}", "operation", "calls", "mean");
    for (_, h) in &cols {
        let _ = write!(o, " {h:>10}");
    }
    let _ = writeln!(o);
    for op in &r.ops {
        let _ = write!(
            o,
            "{:<20} {:>7} {:>14}",
            op.label,
            op.calls,
            human_ns(op.mean_ns())
        );
        for (c, _) in &cols {
            let _ = write!(o, " {:>10}", trim_float(op.per_call(*c)));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "(operation counts are per call)");
    refusals(
        &mut o,
        r.ops
            .iter()
            .map(|op| (op.label.as_str(), op.errors, op.first_error.as_deref())),
    );
    let _ = writeln!(o, "\ntime by call stack (whole run)");
    let _ = writeln!(o, "  {:>7} {:>12}  stack", "share", "time");
    for s in &r.stacks {
        if s.self_ps == 0 {
            continue;
        }
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>12}  {}",
            share(s.self_ps, r.total_ps),
            human_ns(ns(s.self_ps)),
            s.stack
        );
    }
    o
}

/// Folded stacks of an IOMMU run.
pub fn iommu_run_folded(r: &crate::scenario::iommu::IommuRunResult) -> String {
    folded(&r.stacks)
}

/// The terminal table of any run.
pub fn table(o: &crate::scenario::Outcome) -> String {
    use crate::scenario::Outcome;
    match o {
        Outcome::Streaming(r) => run_table(r),
        Outcome::Forwarding(r) => forwarding_table(r),
        Outcome::Bounce(r) => bounce_table(r),
        Outcome::Iommu(r) => iommu_run_table(r),
    }
}

/// The JSON document of any run.
pub fn json(o: &crate::scenario::Outcome) -> serde_json::Value {
    use crate::scenario::Outcome;
    match o {
        Outcome::Streaming(r) => run_json(r),
        Outcome::Forwarding(r) => forwarding_json(r),
        Outcome::Bounce(r) => bounce_json(r),
        Outcome::Iommu(r) => iommu_run_json(r),
    }
}

/// The call stacks of any run (for folded output).
pub fn stacks(o: &crate::scenario::Outcome) -> &[crate::scenario::StackRow] {
    use crate::scenario::Outcome;
    match o {
        Outcome::Streaming(r) => &r.stacks,
        Outcome::Forwarding(r) => &r.stacks,
        Outcome::Bounce(r) => &r.stacks,
        Outcome::Iommu(r) => &r.stacks,
    }
}

/// `dmasim policies`: every policy with its choices, meaning, preset rule, and the preset each
/// release gets on `profile` (behind an IOMMU where the platform has one).
pub fn policies_table(profile: &crate::platform::Profile) -> String {
    use crate::policy::{KernelVersion, REGISTRY, Target};
    const RELEASES: &[KernelVersion] = &[
        KernelVersion(3, 6),
        KernelVersion(3, 7),
        KernelVersion(5, 14),
        KernelVersion(5, 15),
        KernelVersion(5, 19),
        KernelVersion(6, 0),
        KernelVersion(7, 0),
        KernelVersion(7, 1),
    ];
    let t = Target::of(profile, profile.model.smmu.is_some(), true, true);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "presets on platform {} ({}{})",
        profile.name(),
        t.arch.name(),
        t.smmu
            .map(|(k, i)| format!(", SMMU {k:?} by {}", i.name()))
            .unwrap_or_default()
    );
    let _ = write!(o, "\n{:<16}", "policy");
    for k in RELEASES {
        let _ = write!(o, " {:>11}", k.to_string());
    }
    let _ = writeln!(o);
    for d in REGISTRY {
        let _ = write!(o, "{:<16}", d.key);
        for &k in RELEASES {
            let v = if d.applies(&t).is_ok() && k >= KernelVersion::oldest_for(t.arch) {
                d.preset(k, &t)
            } else {
                "-"
            };
            let _ = write!(o, " {v:>11}");
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "(- : does not apply on this platform)");
    for d in REGISTRY {
        let _ = writeln!(o, "\n{}  ({})", d.key, (d.choices)().join(" | "));
        let _ = writeln!(o, "  {}", d.description);
        let _ = writeln!(o, "  preset: {}", d.preset_rule);
        if let Err(why) = d.applies(&t) {
            let _ = writeln!(o, "  not here: {why}");
        }
    }
    o
}
