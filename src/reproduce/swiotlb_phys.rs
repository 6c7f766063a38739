//! Seed 004: swiotlb keeps its pool by physical address (Alexander Duyck's series, Linux 3.7).
//!
//! Runs the built-in forwarding scenario (scenarios/ixgbe-forwarding.toml: small packets routed
//! between ixgbe ports on the x86-2012-ixgbe profile, nothing bounced) under the 3.6 policies
//! (`swiotlb_addr = virt`) and the 3.7 policies (`phys`), and compares packets per second and the
//! per-symbol perf profile — each symbol's self time as a share of all cycles — with the seed's.
//! The profile was fitted on the before rows only; the after rows are predictions.

use super::{Report, Row, RowBuilder};
use crate::hw::Counter;
use crate::input::InputError;
use crate::policy::KernelVersion;
use crate::scenario::forwarding::{ForwardingResult, SEED_SYMBOLS};
use crate::scenario::{Scenario, Workload};

pub const SCENARIO: &str = include_str!("../../scenarios/ixgbe-forwarding.toml");
const FILE: &str = "scenarios/ixgbe-forwarding.toml";

/// The seed's callers of `__phys_addr`, in its order.
const CALLERS: &[&str] = &[
    "swiotlb_sync_single",
    "is_swiotlb_buffer",
    "unmap_single",
    "swiotlb_dma_mapping_error",
];

/// The DMA API calls of one packet, in the order the driver makes them.
const CALLS: &[&str] = &[
    "dma_sync_single_for_cpu",
    "dma_sync_single_for_device",
    "dma_unmap_page",
    "dma_map_page",
    "dma_map_single",
    "dma_mapping_error",
    "dma_unmap_single",
];

/// Run the forwarding scenario under a release.
pub fn run_under(base: &Scenario, kernel: KernelVersion) -> Result<ForwardingResult, InputError> {
    let mut s = base.clone();
    s.set_kernel(kernel)?;
    let Workload::Forwarding(f) = &s.workload else {
        return Err(InputError::new(FILE, "not a forwarding scenario"));
    };
    crate::scenario::forwarding::run(&s, f).map_err(|e| InputError::new(FILE, e.to_string()))
}

/// The built-in scenario.
pub fn scenario() -> Result<Scenario, InputError> {
    Scenario::parse(FILE, SCENARIO, std::path::Path::new("."))
}

fn per_packet(r: &ForwardingResult) -> serde_json::Value {
    let mut ops = serde_json::Map::new();
    for c in Counter::ALL {
        if r.counts[c as usize] > 0 {
            ops.insert(c.name().into(), r.per_packet(c).into());
        }
    }
    let mut calls = serde_json::Map::new();
    for c in CALLS {
        let n = r.calls_per_packet(c);
        if n > 0.0 {
            calls.insert((*c).into(), n.into());
        }
    }
    serde_json::json!({
        "cpu_ns": r.per_packet_ns(),
        "cpus": r.workload.cpus,
        "dma_calls": calls,
        "operations": ops,
    })
}

/// Share of `__phys_addr`'s self time whose immediate caller is `caller`, in %.
fn immediate_caller_pct(r: &ForwardingResult, caller: &str) -> f64 {
    let total = r.self_ps("__phys_addr");
    let suffix = format!("{caller} > __phys_addr");
    let n: u64 = r
        .stacks
        .iter()
        .filter(|s| s.stack.ends_with(&suffix))
        .map(|s| s.self_ps)
        .sum();
    if total == 0 {
        0.0
    } else {
        n as f64 * 100.0 / total as f64
    }
}

fn symbol_row(b: &RowBuilder, r: &ForwardingResult, when: &str, sym: &str, what: &str) -> Row {
    let mut row = b.row(
        &format!("profile.{when}.{sym}"),
        "%",
        what,
        r.share_pct(sym),
    );
    row.detail.insert(
        "self_ns_per_packet".into(),
        (r.self_ps(sym) as f64 / 1000.0 / r.packets.max(1) as f64).into(),
    );
    row.detail.insert(
        "phys_addr_calls_per_packet_beneath".into(),
        r.per_packet_through(Counter::PhysAddrCall, sym).into(),
    );
    row
}

pub fn run() -> Result<Report, InputError> {
    let base = scenario()?;
    let published = crate::published::get("swiotlb-phys").expect("embedded");
    let before = run_under(&base, KernelVersion(3, 6))?;
    let after = run_under(&base, KernelVersion(3, 7))?;
    let b = RowBuilder {
        published: &published,
        profile: &base.profile,
    };

    let mut rows: Vec<Row> = Vec::new();
    for (id, r, what) in [
        (
            "throughput.before",
            &before,
            "packets routed per second, 3.6 (swiotlb_addr=virt)",
        ),
        (
            "throughput.after",
            &after,
            "packets routed per second, 3.7 (swiotlb_addr=phys)",
        ),
    ] {
        let mut row = b.row(id, "Mpps", what, r.mpps());
        row.detail.insert("per_packet".into(), per_packet(r));
        rows.push(row);
    }
    for sym in SEED_SYMBOLS {
        rows.push(symbol_row(&b, &before, "before", sym, ""));
    }
    for caller in CALLERS {
        let mut row = b.row(
            &format!("phys_addr_callers.before.{caller}"),
            "%",
            "",
            immediate_caller_pct(&before, caller),
        );
        row.detail.insert(
            "through_pct".into(),
            (before.per_packet_through(Counter::PhysAddrCall, caller) * 100.0
                / before
                    .per_packet(Counter::PhysAddrCall)
                    .max(f64::MIN_POSITIVE))
            .into(),
        );
        rows.push(row);
    }
    for sym in SEED_SYMBOLS {
        let what = match *sym {
            "__phys_addr" => {
                "share of all cycles in __phys_addr, after (no calls left on the DMA path; not in the seed's after listing)"
            }
            "is_swiotlb_buffer" => {
                "share of all cycles in is_swiotlb_buffer, after (inlined into its callers: no symbol)"
            }
            "unmap_single" => {
                "share of all cycles in unmap_single, after (not in the seed's after listing)"
            }
            _ => "",
        };
        rows.push(symbol_row(&b, &after, "after", sym, what));
    }

    let caller = |c: &str| {
        published
            .row(&format!("phys_addr_callers.before.{c}"))
            .map_or(0.0, |r| r.value)
    };
    let named: f64 = CALLERS.iter().map(|c| caller(c)).sum();
    let callers_note = format!(
        "the seed's call graph of __phys_addr cannot be matched call for call and the model does not try: it names swiotlb_sync_single ({} %) and unmap_single ({} %) as callers, but in 3.6 they reach __phys_addr only through is_swiotlb_buffer (frame-pointer unwinding names the grandparent when a sample lands before the leaf has pushed its frame), and {:.1} % of the samples name none of the four. The model's phys_addr_callers rows are immediate callers (is_swiotlb_buffer {} of {} calls, swiotlb_dma_mapping_error {} of {}); detail.through_pct gives the share through each function",
        caller("swiotlb_sync_single"),
        caller("unmap_single"),
        100.0 - named,
        before.per_packet_through(Counter::PhysAddrCall, "is_swiotlb_buffer"),
        before.per_packet(Counter::PhysAddrCall),
        before.per_packet_through(Counter::PhysAddrCall, "swiotlb_dma_mapping_error"),
        before.per_packet(Counter::PhysAddrCall),
    );
    let insns = crate::setup::swiotlb_2012_insns(&base.profile);
    let (sync, unmap, err) = (
        insns.sync_single(),
        insns.unmap_single(),
        insns.mapping_error(),
    );
    let insn_note = format!(
        "what 3.7 removes from the callers is counted in instructions from the 3.6 and 3.7 lib/swiotlb.c source as GCC of 2012 would compile it (-O2, frame pointers, no shrink-wrapping), not from a disassembly (the profile's [code.swiotlb_2012]): swiotlb_sync_single {} -> {} ({} callee-saved registers and the is_swiotlb_buffer call go, the inlined range check comes), unmap_single {} -> {}, swiotlb_dma_mapping_error {} -> {}; each function keeps its cycles per instruction across the releases. Functions the series did not change keep their time per call",
        sync.virt(),
        sync.phys(),
        insns.sync_single_live,
        unmap.virt(),
        unmap.phys(),
        err.virt(),
        err.phys(),
    );
    let cpus = before.workload.cpus;
    let freq = base.profile.file.platform.cpu_freq_mhz.value.get_ref();
    Ok(Report {
        experiment: published.experiment.clone(),
        title: published.title.clone(),
        source: published.source.clone(),
        conditions: published.conditions.clone(),
        platform: base.profile.name().to_string(),
        assumptions: vec![
            format!("{cpus} CPUs at {freq} MHz route in parallel, one ixgbe queue pair each, without slowing each other: packets per second = CPUs / CPU time per packet. The seed names no machine; the shares and the before/after ratio do not depend on this choice, only the absolute cycles per packet do"),
            "each packet makes the DMA calls of ixgbe's 3.6 page-reuse receive path and transmit path: dma_sync_single_range_for_cpu of the received half page, dma_sync_single_range_for_device of the other half (the page is reused: a routed packet is freed long before its page comes round the 512-entry ring again), dma_map_single + dma_mapping_error of the linear frame on transmit and dma_unmap_single at completion. Under 3.6 that is 7 calls to __phys_addr per packet, the seed's count".into(),
            "packet memory lies above the swiotlb pool (a large server's memory is mostly above the 64 MiB pool carved out below 4 GiB), so is_swiotlb_buffer evaluates both bounds: two __phys_addr calls, not one".into(),
            "perf's percentages are of all cycles of a machine fully busy routing, so 'all cycles' is the whole CPU time per packet, routing included; everything a packet costs besides the swiotlb symbols is one named cost, ip_forward_path, fitted on the before throughput".into(),
            "all of __phys_addr's share is swiotlb's: the seed's call graph names only swiotlb callers and its after profile has no __phys_addr. In 3.6 dma_map_single's virt_to_page and the slab's virt_to_head_page on skb free also call __phys_addr; the model counts those instructions in ip_forward_path".into(),
            callers_note,
            insn_note,
            "the seed's after listing has only swiotlb_* symbols; unmap_single, __phys_addr and is_swiotlb_buffer after are model-only rows".into(),
        ],
        rows,
    })
}
