//! Packet forwarding through an ixgbe-style driver over the 2012 x86-64 swiotlb.
//!
//! Kernel counterpart: the per-packet DMA calls of ixgbe as of Linux 3.6
//! (drivers/net/ethernet/intel/ixgbe/ixgbe_main.c after "ixgbe: Replace standard receive path with
//! a page based receive"): `ixgbe_clean_rx_irq` syncs the received half page for the CPU
//! (`dma_sync_single_range_for_cpu`, `ixgbe_rx_bufsz()` bytes, FROM_DEVICE) and, when the page can
//! be reused (`ixgbe_reuse_rx_page`: the stack has let go of the other half), flips to the other
//! half and syncs it back for the device (`dma_sync_single_range_for_device`); a page that cannot
//! be reused is unmapped (`dma_unmap_page`, the whole page) and `ixgbe_alloc_rx_buffers` maps a new
//! one (`dma_map_page` + `dma_mapping_error`). The routed packet leaves through
//! `ixgbe_xmit_frame_ring` → `ixgbe_tx_map`: `dma_map_single` of the linear data +
//! `dma_mapping_error`; `ixgbe_clean_tx_irq` unmaps it at completion (`dma_unmap_single`). On x86
//! those DMA API calls are inlines that call `swiotlb_dma_ops` ([`crate::dma::swiotlb::x86_2012::Swiotlb2012Ops`]).
//!
//! What it models: the rx ring's buffers as real pages in simulated memory above the swiotlb pool
//! (the NIC reaches all memory, nothing bounces; above the pool, so `is_swiotlb_buffer`'s `&&`
//! evaluates both bounds as it does for the packet memory of a large server), page reuse decided
//! deterministically at `rx_reuse_percent`, and everything else a routed packet costs — ixgbe's
//! own instructions, netif_receive_skb, ip_rcv, the FIB lookup, ip_forward, neighbour output, the
//! qdisc, skb allocation and freeing — as one named cost, `ip_forward_path`. Packets per second
//! is `cpus` divided by the CPU time of one packet: each CPU routes its own queue pair, and the
//! model assumes they do not slow each other down.
//!
//! Invariants: every charge is made by running the calls above; the time per packet is the
//! Model clock's advance per packet; the per-symbol self times sum to it. When a tx completion is
//! cleaned does not change the CPU time per packet, so each packet's tx buffer is unmapped in the
//! same iteration it was mapped.

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::arch::x86::physaddr::PhysAddrKind;
use crate::device::{Device, PCI_SEG_BOUNDARY};
use crate::drivers::ixgbe::IxgbeConfig;
use crate::hw::Counter;
use crate::hw::calls::{CallStat, StackRow, stack_rows};
use crate::input::InputError;
use crate::setup::{DeviceSetup, Machine, SetupError, setup_dma_ops};
use serde::Deserialize;
use toml::Spanned;

pub use crate::drivers::ixgbe::{Forwarder, HIGH_MEMORY, IXGBE_RX_BUFSZ, LOW_MEMORY};
use crate::report::{
    CallDoc, DeviceDoc, FORMAT_VERSION, HeadDoc, StackDoc, TimeUnit, breakdown_docs, call_doc,
    device_line, header, human_ns, instr, ns, share, trim_float,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "forwarding",
    summary: "packets received, routed and transmitted by ixgbe over the 2012 x86-64 swiotlb",
    parse,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    packets: Option<Spanned<i64>>,
    packet_bytes: Option<Spanned<i64>>,
    rx_ring: Option<Spanned<i64>>,
    rx_reuse_percent: Option<Spanned<i64>>,
    cpus: Option<Spanned<i64>>,
}

/// A forwarding loop: packets received, routed and transmitted by an ixgbe-style driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forwarding {
    pub packets: u64,
    /// Frame length without FCS (60 for the smallest Ethernet frame).
    pub packet_bytes: u32,
    /// Receive descriptors (and receive buffers) per ring.
    pub rx_ring: u32,
    /// Share of received pages the driver can hand back to the device (ixgbe's page reuse).
    pub rx_reuse_percent: u32,
    /// CPUs routing in parallel, each with its own queue pair: packets per second = cpus / CPU
    /// time per packet.
    pub cpus: u32,
}

impl Forwarding {
    /// The driver's configuration, with the release's `__pa()` (`phys_addr` policy).
    pub fn ixgbe(&self, phys_addr: PhysAddrKind) -> IxgbeConfig {
        IxgbeConfig {
            rx_ring: self.rx_ring,
            packet_bytes: self.packet_bytes,
            rx_reuse_percent: self.rx_reuse_percent,
            phys_addr,
        }
    }
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let profile = shared.profile;
    let packets = w.packets.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "packets",
            "how many packets to forward, 1..=100000000",
        )
    })?;
    let packets = c.int(packets, "workload.packets", 1..=100_000_000)?;
    let packet_bytes = match &w.packet_bytes {
        Some(b) => c.int(b, "workload.packet_bytes", 60..=IXGBE_RX_BUFSZ as i64)? as u32,
        None => 60,
    };
    let rx_ring = match &w.rx_ring {
        Some(r) => {
            let n = c.int(r, "workload.rx_ring", 64..=4096)?;
            if n % 8 != 0 {
                return Err(c.err(
                    r.span(),
                    "workload.rx_ring",
                    format!(
                        "must be a multiple of 8 (IXGBE_REQ_RX_DESCRIPTOR_MULTIPLE), found {n}"
                    ),
                ));
            }
            n as u32
        }
        None => 512,
    };
    let rx_reuse_percent = match &w.rx_reuse_percent {
        Some(r) => c.int(r, "workload.rx_reuse_percent", 0..=100)? as u32,
        None => 100,
    };
    let cpus = match &w.cpus {
        Some(n) => c.int(n, "workload.cpus", 1..=4096)? as u32,
        // 0 = not given and the profile has none: reported by `consistency`.
        None => profile.cpus.unwrap_or(0),
    };
    Ok(Workload::Forwarding(Forwarding {
        packets,
        packet_bytes,
        rx_ring,
        rx_reuse_percent,
        cpus,
    }))
}

/// What a forwarding run measured.
#[derive(Clone, Debug)]
pub struct ForwardingResult {
    /// Which scenario ran where, under which policies.
    pub info: RunInfo,
    pub device: Device,
    pub workload: Forwarding,
    pub packets: u64,
    pub dropped: u64,
    pub rx_pages_mapped: u64,
    pub calls: Vec<CallStat>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

/// The symbols of the seed's perf profiles, in its order.
pub const SEED_SYMBOLS: &[&str] = &[
    "__phys_addr",
    "swiotlb_sync_single",
    "is_swiotlb_buffer",
    "unmap_single",
    "swiotlb_map_page",
    "swiotlb_sync_single_for_device",
    "swiotlb_sync_single_for_cpu",
    "swiotlb_dma_mapping_error",
    "swiotlb_unmap_page",
];

impl ForwardingResult {
    /// CPU time per forwarded packet, in nanoseconds.
    pub fn per_packet_ns(&self) -> f64 {
        self.total_ps as f64 / 1000.0 / self.packets.max(1) as f64
    }

    /// Packets per second over all CPUs, in millions.
    pub fn mpps(&self) -> f64 {
        let ns = self.per_packet_ns();
        if ns == 0.0 {
            0.0
        } else {
            f64::from(self.workload.cpus) * 1e3 / ns
        }
    }

    /// Self time of a symbol (its frame's own time, on every path that reaches it), in ps.
    pub fn self_ps(&self, symbol: &str) -> u64 {
        self.stacks
            .iter()
            .filter(|s| s.stack.rsplit(" > ").next() == Some(symbol))
            .map(|s| s.self_ps)
            .sum()
    }

    /// A symbol's share of all cycles (perf's "Overhead"), in %.
    pub fn share_pct(&self, symbol: &str) -> f64 {
        if self.total_ps == 0 {
            0.0
        } else {
            self.self_ps(symbol) as f64 * 100.0 / self.total_ps as f64
        }
    }

    /// Every symbol with self time, largest first (ties by name), as (symbol, self ps).
    pub fn symbols(&self) -> Vec<(String, u64)> {
        let mut m: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &self.stacks {
            let sym = s.stack.rsplit(" > ").next().unwrap_or("").to_string();
            *m.entry(sym).or_default() += s.self_ps;
        }
        let mut v: Vec<(String, u64)> = m.into_iter().filter(|(_, ps)| *ps > 0).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Events of a counter per packet.
    pub fn per_packet(&self, c: Counter) -> f64 {
        self.counts[c as usize] as f64 / self.packets.max(1) as f64
    }

    /// Events of a counter per packet on call stacks passing through `frame`.
    pub fn per_packet_through(&self, c: Counter, frame: &str) -> f64 {
        let n: u64 = self
            .stacks
            .iter()
            .filter(|s| s.stack.split(" > ").any(|f| f == frame))
            .map(|s| s.counts[c as usize])
            .sum();
        n as f64 / self.packets.max(1) as f64
    }

    /// DMA API calls per packet.
    pub fn calls_per_packet(&self, call: &str) -> f64 {
        self.calls
            .iter()
            .find(|c| c.call == call)
            .map_or(0.0, |c| c.count as f64 / self.packets.max(1) as f64)
    }
}

/// The scenario's device as the forwarding workload's NIC, a PCI function: `pci_device_add()`
/// sets its segment boundary to 4 GiB in every release.
pub fn nic(s: &Scenario) -> Device {
    Device {
        dma_parms_seg_boundary: Some(PCI_SEG_BOUNDARY),
        ..s.device.clone()
    }
}

/// Set up the machine and open the driver: swiotlb's pool below 4 GiB, the device's ops from
/// setup, the rx ring filled (not counted).
pub fn forwarder(s: &Scenario, f: &Forwarding) -> Result<Forwarder, SetupError> {
    let cfg = f.ixgbe(s.policies.phys_addr);
    let mut m = Machine::boot(&s.profile, Forwarder::memory(&cfg, s.swiotlb.size));
    let nic = nic(s);
    let setup = DeviceSetup {
        device: &nic,
        ..s.device_setup()
    };
    let api = setup_dma_ops(&mut m, &setup, f.cpus)?;
    Forwarder::new(m, api, &cfg).map_err(SetupError::RxRing)
}

/// Packets forwarded between two counts of progress.
const PROGRESS_BLOCK: u64 = 1 << 16;

/// Run a forwarding scenario on the Model.
pub fn run(
    s: &Scenario,
    f: &Forwarding,
    progress: &Progress,
) -> Result<ForwardingResult, SetupError> {
    let mut fw = forwarder(s, f)?;
    // In blocks, so that progress is counted per block of packets rather than per packet;
    // forwarding a+b packets is forwarding a, then b.
    let mut left = f.packets;
    while left > 0 {
        let n = left.min(PROGRESS_BLOCK);
        fw.forward(n).map_err(SetupError::RxRing)?;
        progress.advance(n);
        left -= n;
    }
    debug_assert!(fw.hw.ledger().depth_is_zero());
    let stacks = stack_rows(fw.hw.ledger());
    Ok(ForwardingResult {
        info: s.run_info(),
        device: s.device.clone(),
        workload: f.clone(),
        packets: fw.packets,
        dropped: fw.dropped,
        rx_pages_mapped: fw.rx_pages_mapped,
        calls: fw.call_stats(),
        counts: fw.hw.ledger().totals(),
        stacks,
        total_ps: fw.hw.ledger().total_ps(),
    })
}

// Rendering: the terminal table and the JSON document of this kind's result.

/// The `dmasim run` table of a forwarding scenario.
pub fn table(r: &ForwardingResult) -> String {
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
    let unit = TimeUnit::for_column(r.calls.iter().map(|c| c.mean_ns()));
    let _ = writeln!(
        o,
        "\n{:<28} {:>10} {:>14}",
        "call",
        "per packet",
        unit.header("mean")
    );
    for c in &r.calls {
        let _ = writeln!(
            o,
            "{:<28} {:>10} {:>14}",
            c.call,
            trim_float(r.calls_per_packet(c.call)),
            unit.num(c.mean_ns())
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
    let packets = r.packets.max(1) as f64;
    let unit = TimeUnit::for_column(r.symbols().into_iter().map(|(_, ps)| ns(ps) / packets));
    let _ = writeln!(
        o,
        "  {:>7} {:>15}  symbol",
        "share",
        unit.header("per packet")
    );
    for (sym, ps) in r.symbols() {
        let _ = writeln!(
            o,
            "  {:>6.2}% {:>15}  {}",
            share(ps, r.total_ps),
            unit.num(ns(ps) / packets),
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
pub fn json(r: &ForwardingResult) -> serde_json::Value {
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

impl super::WorkloadKind for Forwarding {
    type Output = ForwardingResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<ForwardingResult, RunFailure> {
        Ok(run(s, self, progress)?)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        if self.cpus == 0 {
            return Err(s.error(
                &super::Origin::File(s.lines.kind),
                "workload.cpus",
                format!(
                    "missing: platform `{}` has no `platform.cpus`, so the scenario must say how many CPUs route",
                    s.profile.name()
                ),
            ));
        }
        Ok(())
    }

    fn work(&self, _s: &Scenario) -> u128 {
        64 * u128::from(self.packets)
    }

    fn progress_total(&self) -> u64 {
        self.packets
    }

    fn uses_swiotlb(&self) -> bool {
        true
    }

    fn pci_device(&self) -> bool {
        true
    }

    fn behind_iommu(&self) -> bool {
        false
    }

    /// The IP forwarding path's own costs; on x86-64 before 3.8 its skb frees call `__pa()`.
    fn driver_layers(&self, s: &Scenario) -> Vec<crate::hw::sw_costs::Layer> {
        use crate::hw::sw_costs::Layer;
        let mut v = vec![Layer::IpForward];
        if s.policies.phys_addr == PhysAddrKind::Call {
            v.push(Layer::X86PhysAddr);
        }
        v
    }
}

impl super::KindResult for ForwardingResult {
    super::kind::result_fields!();
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        super::kind::call_stat_totals(&self.calls)
    }
}
