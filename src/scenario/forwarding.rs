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
//! those DMA API calls are inlines that call `swiotlb_dma_ops` ([`Swiotlb2012Ops`]).
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

use super::{Forwarding, IXGBE_RX_BUFSZ, Scenario};
use crate::device::Device;
use crate::dma::DmaError;
use crate::dma::mapping::DmaApi;
use crate::dma::swiotlb::x86_2012::{Swiotlb2012Config, Swiotlb2012Ops, bookkeeping_by_name};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::mm::physmem::{NodeRange, PhysMem, SharedPhysMem};
use crate::platform::Arch;
use crate::policy::Policies;
use crate::scatterlist::PAGE_SIZE;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

use super::run::{CallStat, StackRow};

/// Below 4 GiB, where swiotlb's pool is allocated at boot (`alloc_bootmem_low_pages`).
pub const LOW_MEMORY: u64 = 0x1000_0000;
/// Packet memory: above 4 GiB, and so above the pool.
pub const HIGH_MEMORY: u64 = 0x1_0000_0000;

/// One receive buffer: a page mapped whole, of which the half at `page_offset` is the device's.
#[derive(Clone, Copy, Debug)]
struct RxBuffer {
    page: PhysAddr,
    dma: DmaAddr,
    page_offset: u64,
}

/// The forwarding loop, set up and ready to forward packets.
pub struct Forwarder {
    pub hw: Model,
    api: DmaApi,
    mem: SharedPhysMem,
    rx: Vec<RxBuffer>,
    next_to_clean: usize,
    /// Linear skb data areas the routed packets are sent from, cycled.
    tx: Vec<PhysAddr>,
    next_tx: usize,
    packet_bytes: u64,
    reuse_percent: u32,
    reuse_acc: u32,
    route: SwCost,
    /// Packets forwarded since the ledger was last cleared.
    pub packets: u64,
    /// Receive pages mapped by `ixgbe_alloc_rx_buffers` after the ring was filled.
    pub rx_pages_mapped: u64,
    /// Packets dropped because a mapping failed (`dma_mapping_error`).
    pub dropped: u64,
    timer: Vec<CallStat>,
}

fn time(stats: &mut Vec<CallStat>, hw: &mut Model, call: &'static str, f: impl FnOnce(&mut Model)) {
    let t0 = hw.now_ps();
    f(hw);
    let dt = hw.now_ps() - t0;
    match stats.iter_mut().find(|s| s.call == call) {
        Some(s) => {
            s.count += 1;
            s.total_ps += dt;
        }
        None => stats.push(CallStat {
            call,
            count: 1,
            total_ps: dt,
        }),
    }
}

impl Forwarder {
    /// Boot the modelled machine: swiotlb's pool below 4 GiB, the rx ring filled and mapped
    /// (`ixgbe_alloc_rx_buffers` at `ixgbe_open`), tx data areas above 4 GiB. The set-up is not
    /// counted.
    pub fn new(
        s: &Scenario,
        f: &Forwarding,
        policies: &Policies,
        dev: Device,
    ) -> Result<Forwarder, DmaError> {
        let hw = Model::new(s.profile.model.clone());
        let rx_ring = f.rx_ring as usize;
        let high = (2 * rx_ring as u64 + 16) * PAGE_SIZE;
        let mem = PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(LOW_MEMORY),
                size: (s.swiotlb.size + (1 << 20)).next_multiple_of(PAGE_SIZE),
            },
            NodeRange {
                node: 1,
                start: PhysAddr(HIGH_MEMORY),
                size: high,
            },
        ])
        .shared();
        let book = bookkeeping_by_name(&hw, &policies.swiotlb_addr).ok_or_else(|| {
            DmaError::MappingError(format!(
                "unknown swiotlb_addr policy `{}`",
                policies.swiotlb_addr
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
        .map_err(|e| DmaError::MappingError(e.to_string()))?;
        let api = DmaApi::new(&hw, dev, Box::new(ops));
        let mut fw = Forwarder {
            route: hw.sw_cost(SwKey::IpForwardPath),
            hw,
            api,
            mem,
            rx: Vec::with_capacity(rx_ring),
            next_to_clean: 0,
            tx: Vec::with_capacity(rx_ring),
            next_tx: 0,
            packet_bytes: u64::from(f.packet_bytes),
            reuse_percent: f.rx_reuse_percent,
            reuse_acc: 0,
            packets: 0,
            rx_pages_mapped: 0,
            dropped: 0,
            timer: Vec::new(),
        };
        for _ in 0..rx_ring {
            let page = fw.alloc_page()?;
            let dma = fw.map_rx_page(page)?;
            fw.rx.push(RxBuffer {
                page,
                dma,
                page_offset: 0,
            });
            let data = fw.alloc_page()?;
            fw.tx.push(data);
        }
        fw.clear();
        Ok(fw)
    }

    /// Forget charges, counts and call times (after set-up, or between benchmark runs).
    pub fn clear(&mut self) {
        self.hw.clear_ledger();
        self.timer.clear();
        self.packets = 0;
        self.rx_pages_mapped = 0;
        self.dropped = 0;
    }

    fn alloc_page(&mut self) -> Result<PhysAddr, DmaError> {
        self.mem
            .borrow_mut()
            .alloc(1, PAGE_SIZE)
            .map_err(|e| DmaError::MappingError(format!("rx page allocation: {e}")))
    }

    /// `ixgbe_alloc_mapped_page`: map a whole page for the device, and check the mapping.
    fn map_rx_page(&mut self, page: PhysAddr) -> Result<DmaAddr, DmaError> {
        let (api, hw, t) = (&mut self.api, &mut self.hw, &mut self.timer);
        let mut r = Err(DmaError::MappingError(String::new()));
        time(t, hw, "dma_map_page", |hw| {
            r = api.map_page(
                hw,
                page,
                PAGE_SIZE,
                DmaDirection::FromDevice,
                DmaAttrs::NONE,
            )
        });
        let dma = r?;
        let mut bad = false;
        time(t, hw, "dma_mapping_error", |hw| {
            bad = api.mapping_error(hw, dma)
        });
        if bad {
            let pool = self.api.ops.swiotlb_pool();
            return Err(DmaError::MappingError(format!(
                "ixgbe_alloc_mapped_page: rx page {page} could not be mapped: dma_mapping_error() (the swiotlb pool has {} of {} slots in use; the rx ring needs two per page when pages bounce — give [swiotlb] a larger size)",
                pool.map_or(0, |p| p.table.used()),
                pool.map_or(0, |p| p.nslabs())
            )));
        }
        Ok(dma)
    }

    /// Whether the page just received into can be handed back (deterministic at the workload's
    /// reuse percentage).
    fn reusable(&mut self) -> bool {
        self.reuse_acc += self.reuse_percent;
        if self.reuse_acc >= 100 {
            self.reuse_acc -= 100;
            true
        } else {
            false
        }
    }

    /// Receive, route and transmit one packet.
    pub fn forward_one(&mut self) -> Result<(), DmaError> {
        let i = self.next_to_clean;
        self.next_to_clean = (i + 1) % self.rx.len();
        let buf = self.rx[i];
        let reuse = self.reusable();

        self.hw.enter("ixgbe_clean_rx_irq");
        {
            let (api, hw, t) = (&mut self.api, &mut self.hw, &mut self.timer);
            time(t, hw, "dma_sync_single_for_cpu", |hw| {
                api.sync_single_for_cpu(
                    hw,
                    DmaAddr(buf.dma.0 + buf.page_offset),
                    IXGBE_RX_BUFSZ,
                    DmaDirection::FromDevice,
                )
            });
            if reuse {
                // ixgbe_reuse_rx_page: the other half goes back to the device.
                let offset = buf.page_offset ^ IXGBE_RX_BUFSZ;
                self.rx[i].page_offset = offset;
                time(t, hw, "dma_sync_single_for_device", |hw| {
                    api.sync_single_for_device(
                        hw,
                        DmaAddr(buf.dma.0 + offset),
                        IXGBE_RX_BUFSZ,
                        DmaDirection::FromDevice,
                    )
                });
            } else {
                time(t, hw, "dma_unmap_page", |hw| {
                    api.unmap_page(
                        hw,
                        buf.dma,
                        PAGE_SIZE,
                        DmaDirection::FromDevice,
                        DmaAttrs::NONE,
                    )
                });
            }
        }
        self.hw.leave();

        self.hw.enter("ip_forward_path");
        self.hw.sw(self.route);
        self.hw.leave();

        let data = self.tx[self.next_tx];
        self.next_tx = (self.next_tx + 1) % self.tx.len();
        let len = self.packet_bytes;
        self.hw.enter("ixgbe_xmit_frame_ring");
        let mapped = {
            let (api, hw, t) = (&mut self.api, &mut self.hw, &mut self.timer);
            let mut r = Err(DmaError::MappingError(String::new()));
            time(t, hw, "dma_map_single", |hw| {
                r = api.map_page(hw, data, len, DmaDirection::ToDevice, DmaAttrs::NONE)
            });
            match r {
                Ok(dma) => {
                    let mut bad = false;
                    time(t, hw, "dma_mapping_error", |hw| {
                        bad = api.mapping_error(hw, dma)
                    });
                    (!bad).then_some(dma)
                }
                Err(_) => None,
            }
        };
        self.hw.leave();
        match mapped {
            Some(dma) => {
                self.hw.enter("ixgbe_clean_tx_irq");
                let (api, hw, t) = (&mut self.api, &mut self.hw, &mut self.timer);
                time(t, hw, "dma_unmap_single", |hw| {
                    api.unmap_page(hw, dma, len, DmaDirection::ToDevice, DmaAttrs::NONE)
                });
                self.hw.leave();
            }
            None => self.dropped += 1,
        }

        if !reuse {
            // The stack frees the old page with the skb; ixgbe_alloc_rx_buffers maps a new one.
            let _ = self.mem.borrow_mut().free(buf.page, PAGE_SIZE);
            self.hw.enter("ixgbe_alloc_rx_buffers");
            let page = self.alloc_page();
            let r = page.and_then(|p| self.map_rx_page(p).map(|d| (p, d)));
            self.hw.leave();
            let (page, dma) = r?;
            self.rx[i] = RxBuffer {
                page,
                dma,
                page_offset: 0,
            };
            self.rx_pages_mapped += 1;
        }
        self.packets += 1;
        Ok(())
    }

    /// Forward `n` packets.
    pub fn forward(&mut self, n: u64) -> Result<(), DmaError> {
        for _ in 0..n {
            self.forward_one()?;
        }
        Ok(())
    }
}

/// What a forwarding run measured.
#[derive(Clone, Debug)]
pub struct ForwardingResult {
    pub scenario: String,
    pub platform: String,
    pub arch: Arch,
    pub policies: Policies,
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

/// Run a forwarding scenario on the Model.
pub fn run(s: &Scenario, f: &Forwarding) -> Result<ForwardingResult, DmaError> {
    let mut fw = Forwarder::new(s, f, &s.policies, s.device.clone())?;
    fw.forward(f.packets)?;
    debug_assert!(fw.hw.ledger.depth_is_zero());
    let stacks = fw
        .hw
        .ledger
        .stacks()
        .into_iter()
        .map(|st| StackRow {
            stack: st.stack_string(),
            self_ps: st.self_ps,
            counts: st.counts,
        })
        .collect();
    Ok(ForwardingResult {
        scenario: s.name.clone(),
        platform: s.profile.name().to_string(),
        arch: s.profile.arch(),
        policies: s.policies.clone(),
        device: s.device.clone(),
        workload: f.clone(),
        packets: fw.packets,
        dropped: fw.dropped,
        rx_pages_mapped: fw.rx_pages_mapped,
        calls: std::mem::take(&mut fw.timer),
        counts: fw.hw.ledger.totals(),
        stacks,
        total_ps: fw.hw.ledger.total_ps(),
    })
}
