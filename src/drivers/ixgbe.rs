//! ixgbe's per-packet DMA: receive into half pages with page reuse, route, transmit.
//!
//! Kernel counterpart: drivers/net/ethernet/intel/ixgbe/ixgbe_main.c as of Linux 3.6 (after
//! "ixgbe: Replace standard receive path with a page based receive"): `ixgbe_clean_rx_irq`,
//! `ixgbe_reuse_rx_page`, `ixgbe_alloc_rx_buffers` / `ixgbe_alloc_mapped_page`,
//! `ixgbe_xmit_frame_ring` → `ixgbe_tx_map`, and `ixgbe_clean_tx_irq`. See
//! [`crate::scenario::forwarding`] for the calls each packet makes.
//!
//! What it models: the rx ring's buffers as real pages, page reuse decided deterministically at
//! `rx_reuse_percent`, and the routed packet's path through the rest of the stack as one named
//! cost (`ip_forward_path`). Of that path it runs what goes through x86-64's `__pa()`, which 3.6
//! calls out of line: `dma_map_single()` of the frame on transmit (two `virt_to_page()`, see
//! [`crate::dma::mapping`]) and, when the transmit completes, `dev_kfree_skb_any()` freeing the
//! skb: `skb_free_head()`'s `virt_to_head_page()` of the page-fragment head
//! (`netdev_alloc_frag()` since 3.5) and `kmem_cache_free()`'s `virt_to_head_page()` of the
//! `struct sk_buff` (SLUB; SLAB's `cache_free_alien()` on a NUMA machine makes the same call).
//! Nothing else of net/core, net/ipv4 or ixgbe's own code in 3.6 translates an address on this
//! path (the rx head is copied from a page, pages are freed by `struct page`). The driver gets a
//! typed config and the device's DMA API handle from setup; it never sees the scenario.
//!
//! Invariants: every charge is made by running the calls; each packet's tx buffer is unmapped in
//! the iteration it was mapped; a failed rx page mapping at open is the kernel's refusal, returned
//! as an error, never a panic.

use crate::arch::x86::physaddr::{self, PhysAddrFn, PhysAddrImpl, PhysAddrKind};
use crate::dma::DmaError;
use crate::hw::Counter;
use crate::hw::calls::CallStat;
use crate::hw::model::Model;
use crate::hw::{Hw, SwCost, SwKey};
use crate::mm::physmem::{NodeRange, SharedPhysMem};
use crate::scatterlist::PAGE_SIZE;
use crate::setup::{DeviceDmaApi, Machine};
use crate::stats::Stats;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};

/// Largest ixgbe receive buffer: half a 4 KiB page (`ixgbe_rx_bufsz()` of 3.6 without jumbo).
pub const IXGBE_RX_BUFSZ: u64 = 2048;

/// What the driver is configured with (ring size, frames, and how often pages come back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IxgbeConfig {
    /// Receive descriptors (and receive buffers) per ring.
    pub rx_ring: u32,
    /// Frame length without FCS.
    pub packet_bytes: u32,
    /// Share of received pages the driver can hand back to the device (page reuse).
    pub rx_reuse_percent: u32,
    /// The release's `__pa()`, for the skb frees.
    pub phys_addr: PhysAddrKind,
}

/// Slab objects of `skbuff_head_cache` per page: `struct sk_buff` is 232 bytes on 3.6 x86-64, so
/// SLUB's kmalloc-style rounding gives 256-byte objects.
const SKBS_PER_PAGE: u64 = PAGE_SIZE / 256;

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
    api: DeviceDmaApi,
    mem: SharedPhysMem,
    rx: Vec<RxBuffer>,
    next_to_clean: usize,
    /// Linear skb data areas the routed packets are sent from, cycled (each the skb's head).
    tx: Vec<PhysAddr>,
    /// The `struct sk_buff` of each tx slot, in `skbuff_head_cache`'s slab pages.
    skbs: Vec<PhysAddr>,
    next_tx: usize,
    pa: PhysAddrImpl,
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
    /// Each API call's count and Model time, by [`Call`]: flat counters, so timing a call costs
    /// no lookup by name (the report's [`CallStat`]s are built at the end, [`Forwarder::call_stats`]).
    calls: [(u64, u64); Call::N],
    /// The calls in the order first made since the last clear (the order the report lists).
    call_order: Vec<Call>,
}

/// The DMA API calls the driver makes, each timed on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    MapPage,
    MappingError,
    SyncForCpu,
    SyncForDevice,
    UnmapPage,
    MapSingle,
    UnmapSingle,
}

impl Call {
    const N: usize = 7;

    fn name(self) -> &'static str {
        match self {
            Call::MapPage => "dma_map_page",
            Call::MappingError => "dma_mapping_error",
            Call::SyncForCpu => "dma_sync_single_for_cpu",
            Call::SyncForDevice => "dma_sync_single_for_device",
            Call::UnmapPage => "dma_unmap_page",
            Call::MapSingle => "dma_map_single",
            Call::UnmapSingle => "dma_unmap_single",
        }
    }
}

/// Time one call on the Model clock ([`crate::hw::calls::lap`]) into `calls`, by index rather
/// than by name: the forwarding loop makes several calls a packet.
#[inline]
fn timed<T>(
    calls: &mut [(u64, u64); Call::N],
    order: &mut Vec<Call>,
    hw: &mut Model,
    call: Call,
    f: impl FnOnce(&mut Model) -> T,
) -> T {
    let (r, dt) = crate::hw::calls::lap(hw, f);
    let c = &mut calls[call as usize];
    if c.0 == 0 {
        order.push(call);
    }
    c.0 += 1;
    c.1 += dt;
    r
}

impl Forwarder {
    /// `ixgbe_open`: fill the rx ring with mapped pages (`ixgbe_alloc_rx_buffers`) and set aside
    /// tx data areas, in node 1 of `m` (above the swiotlb pool). `api` is the device's DMA API as
    /// setup built it. The set-up is not counted.
    pub fn new(m: Machine, api: DeviceDmaApi, cfg: &IxgbeConfig) -> Result<Forwarder, DmaError> {
        let Machine { hw, mem, .. } = m;
        let rx_ring = cfg.rx_ring as usize;
        let mut fw = Forwarder {
            route: hw.sw_cost(SwKey::IpForwardPath),
            pa: cfg.phys_addr.resolve(&hw),
            hw,
            api,
            mem,
            rx: Vec::with_capacity(rx_ring),
            next_to_clean: 0,
            tx: Vec::with_capacity(rx_ring),
            skbs: Vec::with_capacity(rx_ring),
            next_tx: 0,
            packet_bytes: u64::from(cfg.packet_bytes),
            reuse_percent: cfg.rx_reuse_percent,
            reuse_acc: 0,
            packets: 0,
            rx_pages_mapped: 0,
            dropped: 0,
            calls: [(0, 0); Call::N],
            call_order: Vec::with_capacity(Call::N),
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
        for _ in 0..(rx_ring as u64).div_ceil(SKBS_PER_PAGE) {
            let slab = fw.alloc_page()?;
            for i in 0..SKBS_PER_PAGE {
                if fw.skbs.len() < rx_ring {
                    fw.skbs
                        .push(PhysAddr(slab.0 + i * (PAGE_SIZE / SKBS_PER_PAGE)));
                }
            }
        }
        fw.clear();
        Ok(fw)
    }

    /// Memory the machine needs: the pool below 4 GiB (node 0), the ring's, the tx data and the
    /// sk_buff slab pages above it (node 1).
    pub fn memory(cfg: &IxgbeConfig, pool_bytes: u64) -> Vec<NodeRange> {
        let ring = u64::from(cfg.rx_ring);
        let high = (2 * ring + ring.div_ceil(SKBS_PER_PAGE) + 16) * PAGE_SIZE;
        vec![
            NodeRange {
                node: 0,
                start: PhysAddr(LOW_MEMORY),
                size: (pool_bytes + (1 << 20)).next_multiple_of(PAGE_SIZE),
            },
            NodeRange {
                node: 1,
                start: PhysAddr(HIGH_MEMORY),
                size: high,
            },
        ]
    }

    /// Each DMA API call's count and Model time since the last clear, in the order first made.
    pub fn call_stats(&self) -> Vec<CallStat> {
        self.call_order
            .iter()
            .map(|&c| {
                let (count, total_ps) = self.calls[c as usize];
                CallStat {
                    call: c.name(),
                    count,
                    total_ps,
                    errors: 0,
                    first_error: None,
                    counts: [0; Counter::N],
                }
            })
            .collect()
    }

    /// Forget charges, counts and call times (after set-up, or between benchmark runs).
    pub fn clear(&mut self) {
        self.hw.clear_ledger();
        self.calls = [(0, 0); Call::N];
        self.call_order.clear();
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
        let (api, hw, calls, order) = (
            &mut self.api,
            &mut self.hw,
            &mut self.calls,
            &mut self.call_order,
        );
        let dma = timed(calls, order, hw, Call::MapPage, |hw| {
            api.map_page(
                hw,
                page,
                PAGE_SIZE,
                DmaDirection::FromDevice,
                DmaAttrs::NONE,
            )
        })?;
        let bad = timed(calls, order, hw, Call::MappingError, |hw| {
            api.mapping_error(hw, dma)
        });
        if bad {
            let pool = self.api.ops.swiotlb_stats();
            return Err(DmaError::MappingError(format!(
                "ixgbe_alloc_mapped_page: rx page {page} could not be mapped: dma_mapping_error() (the swiotlb pool has {} of {} slots in use; the rx ring needs two per page when pages bounce — give [swiotlb] a larger size)",
                pool.as_ref().and_then(|p| p.used).unwrap_or(0),
                pool.as_ref().map_or(0, |p| p.nslabs)
            )));
        }
        Ok(dma)
    }

    /// `dev_kfree_skb_any()` of the skb sent from tx slot `slot`, as far as it translates
    /// addresses: `skb_free_head()` puts the head's page (`virt_to_head_page(skb->head)`), then
    /// `kfree_skbmem()` gives the `struct sk_buff` back to its slab (`kmem_cache_free()` →
    /// `virt_to_head_page(skb)`). The rest of the free is in `ip_forward_path`.
    fn free_skb(&mut self, slot: usize) {
        let (head, skb) = (self.tx[slot], self.skbs[slot]);
        let hw = &mut self.hw;
        let consume = hw.enter(crate::frame_id!("consume_skb"));
        let back = hw.enter(crate::frame_id!("skb_release_data"));
        let head_page = self.pa.virt_to_page(hw, physaddr::va(head));
        hw.leave(back);
        let back = hw.enter(crate::frame_id!("kmem_cache_free"));
        let slab_page = self.pa.virt_to_page(hw, physaddr::va(skb));
        hw.leave(back);
        hw.leave(consume);
        debug_assert_eq!(
            (head_page, slab_page),
            (head.align_down(PAGE_SIZE), skb.align_down(PAGE_SIZE))
        );
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
        self.next_to_clean = if i + 1 == self.rx.len() { 0 } else { i + 1 };
        let buf = self.rx[i];
        let reuse = self.reusable();

        let back = self.hw.enter(crate::frame_id!("ixgbe_clean_rx_irq"));
        {
            let (api, hw, calls, order) = (
                &mut self.api,
                &mut self.hw,
                &mut self.calls,
                &mut self.call_order,
            );
            timed(calls, order, hw, Call::SyncForCpu, |hw| {
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
                timed(calls, order, hw, Call::SyncForDevice, |hw| {
                    api.sync_single_for_device(
                        hw,
                        DmaAddr(buf.dma.0 + offset),
                        IXGBE_RX_BUFSZ,
                        DmaDirection::FromDevice,
                    )
                });
            } else {
                timed(calls, order, hw, Call::UnmapPage, |hw| {
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
        self.hw.leave(back);

        self.hw.leaf("ip_forward_path", self.route, None);

        let slot = self.next_tx;
        let data = self.tx[slot];
        self.next_tx = if slot + 1 == self.tx.len() {
            0
        } else {
            slot + 1
        };
        let len = self.packet_bytes;
        let back = self.hw.enter(crate::frame_id!("ixgbe_xmit_frame_ring"));
        let mapped = {
            let (api, hw, calls, order) = (
                &mut self.api,
                &mut self.hw,
                &mut self.calls,
                &mut self.call_order,
            );
            let r = timed(calls, order, hw, Call::MapSingle, |hw| {
                api.map_single(hw, data, len, DmaDirection::ToDevice, DmaAttrs::NONE)
            });
            match r {
                Ok(dma) => {
                    let bad = timed(calls, order, hw, Call::MappingError, |hw| {
                        api.mapping_error(hw, dma)
                    });
                    (!bad).then_some(dma)
                }
                Err(_) => None,
            }
        };
        self.hw.leave(back);
        match mapped {
            Some(dma) => {
                let back = self.hw.enter(crate::frame_id!("ixgbe_clean_tx_irq"));
                // 3.6 frees the skb before unmapping its head.
                self.free_skb(slot);
                let (api, hw, calls, order) = (
                    &mut self.api,
                    &mut self.hw,
                    &mut self.calls,
                    &mut self.call_order,
                );
                timed(calls, order, hw, Call::UnmapSingle, |hw| {
                    api.unmap_page(hw, dma, len, DmaDirection::ToDevice, DmaAttrs::NONE)
                });
                self.hw.leave(back);
            }
            None => {
                // ixgbe_tx_map's dma_error path frees the skb too.
                let back = self.hw.enter(crate::frame_id!("ixgbe_xmit_frame_ring"));
                self.free_skb(slot);
                self.hw.leave(back);
                self.dropped += 1;
            }
        }

        if !reuse {
            // The stack frees the old page with the skb; ixgbe_alloc_rx_buffers maps a new one.
            let _ = self.mem.borrow_mut().free(buf.page, PAGE_SIZE);
            let back = self.hw.enter(crate::frame_id!("ixgbe_alloc_rx_buffers"));
            let page = self.alloc_page();
            let r = page.and_then(|p| self.map_rx_page(p).map(|d| (p, d)));
            self.hw.leave(back);
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
