//! End-to-end checks of the swiotlb-phys experiment (seed 004) and of the forwarding path behind it.

use dmasim::hw::Counter;
use dmasim::policy::KernelVersion;
use dmasim::reproduce::{self, swiotlb_phys};
use dmasim::scenario::forwarding::{ForwardingResult, SEED_SYMBOLS};
use dmasim::scenario::{Scenario, Workload};

fn published(id: &str) -> f64 {
    dmasim::published::get("swiotlb-phys")
        .unwrap()
        .row(id)
        .unwrap_or_else(|| panic!("{id} published"))
        .value
}

fn with_reuse(percent: u32, packets: u64) -> Scenario {
    let mut s = swiotlb_phys::scenario().unwrap();
    if let Workload::Forwarding(f) = &mut s.workload {
        f.rx_reuse_percent = percent;
        f.packets = packets;
    }
    s
}

fn run(s: &Scenario, kernel: KernelVersion) -> ForwardingResult {
    swiotlb_phys::run_under(s, kernel).unwrap()
}

#[test]
fn throughput_and_every_symbol_are_within_tolerance_before_and_after() {
    let report = (reproduce::find("swiotlb-phys").unwrap().run)().unwrap();
    let row = |id: &str| {
        report
            .rows
            .iter()
            .find(|r| r.id == format!("swiotlb-phys/{id}"))
            .unwrap_or_else(|| panic!("row {id}"))
    };
    let before = row("throughput.before");
    let after = row("throughput.after");
    assert_eq!(before.published, Some(published("throughput.before")));
    assert!(before.error.unwrap().abs() <= 1.0, "{before:?}");
    // With the packet path's __phys_addr calls run and kept by 3.8, the prediction is -2.30 %:
    // outside the seed's 2 % and reported as such (the report's closing note says what was
    // looked for). Pinned here so that a change in the mechanism shows.
    let e = after.error.unwrap();
    assert!((-2.40..=-2.20).contains(&e), "{after:?}");
    assert!(after.model > before.model, "3.8 routes faster");
    let mut after_rows = 0;
    for when in ["before", "after"] {
        for sym in SEED_SYMBOLS {
            let r = row(&format!("profile.{when}.{sym}"));
            let Some(p) = r.published else {
                // Not in the seed's after listing: a model-only row.
                assert_eq!(when, "after", "{sym}");
                continue;
            };
            assert_eq!(r.error_unit, Some("pp"));
            // Relative to the published share (0.17 to 1.97 %): the fitted before rows to 1 %,
            // the predicted after rows within a factor 0.6..1.6 (today +9 % to +51 %, all above:
            // the remaining fixed cost per call is overstated). A symbol predicted to vanish or
            // to keep its before share fails.
            let ratio = r.model / p;
            let (lo, hi) = if when == "before" {
                (0.99, 1.01)
            } else {
                (0.6, 1.6)
            };
            assert!(
                (lo..=hi).contains(&ratio),
                "{when} {sym}: model {:.3} % vs published {p} % (ratio {ratio:.3})",
                r.model
            );
            // The functions whose code the series changed lose share.
            if when == "after" && ["swiotlb_sync_single", "swiotlb_dma_mapping_error"].contains(sym)
            {
                let before = row(&format!("profile.before.{sym}"));
                assert!(
                    r.model < before.model,
                    "{sym}: 3.8 must shrink its share ({:.3} -> {:.3})",
                    before.model,
                    r.model
                );
            }
            if when == "after" {
                after_rows += 1;
            }
        }
    }
    assert_eq!(after_rows, 6);
}

#[test]
fn only_before_rows_are_fitted() {
    let report = (reproduce::find("swiotlb-phys").unwrap().run)().unwrap();
    for r in &report.rows {
        let fitted = !r.fitted_params.is_empty();
        let before_row = r.id.contains("throughput.before") || r.id.contains("profile.before.");
        assert_eq!(fitted, before_row, "{}: {:?}", r.id, r.fitted_params);
    }
    // Each before symbol is fitted by its own parameter only.
    let sync = report
        .rows
        .iter()
        .find(|r| r.id == "swiotlb-phys/profile.before.swiotlb_sync_single")
        .unwrap();
    assert_eq!(sync.fitted_params, vec!["sw.insn.swiotlb_sync_single"]);
}

#[test]
fn is_swiotlb_buffer_and_swiotlbs_phys_addr_vanish_under_phys_the_packet_paths_stay() {
    let s = with_reuse(100, 64);
    let r = run(&s, KernelVersion(3, 8));
    assert_eq!(r.share_pct("is_swiotlb_buffer"), 0.0);
    assert!(r.share_pct("__phys_addr") > 0.0);
    assert!(
        r.stacks
            .iter()
            .all(|st| !st.stack.contains("is_swiotlb_buffer"))
    );
    // Every __phys_addr call left is outside swiotlb.
    for st in r
        .stacks
        .iter()
        .filter(|st| st.stack.ends_with("__phys_addr"))
    {
        assert!(!st.stack.contains("swiotlb"), "{}", st.stack);
    }
    // 3.9 inlines __phys_addr: no call is left anywhere (override phys_addr=call brings them back).
    let r = run(&s, KernelVersion(3, 9));
    assert_eq!(r.per_packet(Counter::PhysAddrCall), 0.0);
    assert_eq!(r.share_pct("__phys_addr"), 0.0);
    let mut s39 = s.clone();
    s39.set_kernel(KernelVersion(3, 9)).unwrap();
    s39.set_policies("phys_addr=call").unwrap();
    let Workload::Forwarding(f) = &s39.workload else {
        unreachable!()
    };
    let r = dmasim::scenario::forwarding::run(&s39, f, &dmasim::scenario::Progress::new()).unwrap();
    assert_eq!(r.per_packet(Counter::PhysAddrCall), 4.0);
}

/// Calls to `__phys_addr` per packet on one exact call path.
fn at(r: &ForwardingResult, stack: &str) -> f64 {
    let n: u64 = r
        .stacks
        .iter()
        .filter(|s| s.stack == stack)
        .map(|s| s.counts[Counter::PhysAddrCall as usize])
        .sum();
    n as f64 / r.packets as f64
}

#[test]
fn per_packet_operation_counts_are_exact_for_both_policies() {
    let s = with_reuse(100, 1000);
    let virt = run(&s, KernelVersion(3, 6));
    let phys = run(&s, KernelVersion(3, 8));
    assert_eq!(virt.packets, 1000);
    // 7 from swiotlb (what the series removes), 4 from the packet path (kept).
    assert_eq!(virt.per_packet(Counter::PhysAddrCall), 11.0);
    assert_eq!(phys.per_packet(Counter::PhysAddrCall), 4.0);
    for r in [&virt, &phys] {
        assert_eq!(
            at(r, "ixgbe_xmit_frame_ring > dma_map_single > __phys_addr"),
            2.0
        );
        assert_eq!(
            at(
                r,
                "ixgbe_clean_tx_irq > consume_skb > skb_release_data > __phys_addr"
            ),
            1.0
        );
        assert_eq!(
            at(
                r,
                "ixgbe_clean_tx_irq > consume_skb > kmem_cache_free > __phys_addr"
            ),
            1.0
        );
    }
    let isb = "is_swiotlb_buffer > __phys_addr";
    assert_eq!(
        at(
            &virt,
            &format!(
                "ixgbe_clean_rx_irq > dma_sync_single_for_cpu > swiotlb_sync_single_for_cpu > swiotlb_sync_single > {isb}"
            )
        ),
        2.0
    );
    assert_eq!(
        at(
            &virt,
            &format!(
                "ixgbe_clean_rx_irq > dma_sync_single_for_device > swiotlb_sync_single_for_device > swiotlb_sync_single > {isb}"
            )
        ),
        2.0
    );
    assert_eq!(
        at(
            &virt,
            &format!(
                "ixgbe_clean_tx_irq > dma_unmap_page > swiotlb_unmap_page > unmap_single > {isb}"
            )
        ),
        2.0
    );
    assert_eq!(
        at(
            &virt,
            "ixgbe_xmit_frame_ring > swiotlb_dma_mapping_error > __phys_addr"
        ),
        1.0
    );
    for r in [&virt, &phys] {
        for call in [
            "dma_sync_single_for_cpu",
            "dma_sync_single_for_device",
            "dma_map_single",
            "dma_mapping_error",
            "dma_unmap_single",
        ] {
            assert_eq!(r.calls_per_packet(call), 1.0, "{call}");
        }
        assert_eq!(r.calls_per_packet("dma_map_page"), 0.0);
        assert_eq!(r.per_packet(Counter::SpinLock), 0.0, "nothing bounces");
        assert_eq!(r.per_packet(Counter::BounceCopy), 0.0);
        assert_eq!(r.rx_pages_mapped, 0);
        assert_eq!(r.dropped, 0);
        // The per-symbol self times add up to the CPU time of the packets.
        let sum: u64 = r.symbols().iter().map(|(_, ps)| ps).sum();
        assert_eq!(sum, r.total_ps);
    }
}

#[test]
fn pages_that_cannot_be_reused_are_unmapped_and_replaced() {
    let s = with_reuse(0, 100);
    let virt = run(&s, KernelVersion(3, 6));
    // Each packet: no sync back to the device (2 fewer), the whole page unmapped instead
    // (is_swiotlb_buffer: 2), a new page mapped and checked (dma_mapping_error: 1 more).
    assert_eq!(virt.per_packet(Counter::PhysAddrCall), 12.0);
    assert_eq!(virt.calls_per_packet("dma_unmap_page"), 1.0);
    assert_eq!(virt.calls_per_packet("dma_map_page"), 1.0);
    assert_eq!(virt.calls_per_packet("dma_mapping_error"), 2.0);
    assert_eq!(virt.calls_per_packet("dma_sync_single_for_device"), 0.0);
    assert_eq!(virt.rx_pages_mapped, 100);
    // Half reused: in between, deterministically.
    let half = run(&with_reuse(50, 100), KernelVersion(3, 6));
    assert_eq!(half.per_packet(Counter::PhysAddrCall), 11.5);
    assert_eq!(half.rx_pages_mapped, 50);
    assert!(half.mpps() > virt.mpps());
}

#[test]
fn the_gain_follows_the_calls_the_driver_makes() {
    // With every page reused, a packet makes two syncs, a map and an unmap; with none, the rx
    // page is unmapped and a new one mapped as well. Each of those calls checks
    // is_swiotlb_buffer, which 3.6 pays for with __phys_addr: more calls, more translations
    // removed by 3.8, so the gain must grow as reuse falls. (The CPU count only divides the
    // per-packet time, so it is not what this test varies.)
    let gain = |reuse: u32| {
        let s = with_reuse(reuse, 400);
        let (before, after) = (run(&s, KernelVersion(3, 6)), run(&s, KernelVersion(3, 8)));
        (
            before.per_packet(Counter::PhysAddrCall),
            after.per_packet(Counter::PhysAddrCall),
            before.per_packet_ns() - after.per_packet_ns(),
        )
    };
    let (virt_all, phys_all, saved_all) = gain(100);
    let (virt_none, phys_none, saved_none) = gain(0);
    // The packet path's four calls stay under 3.8 whatever the reuse.
    assert_eq!((phys_all, phys_none), (4.0, 4.0));
    assert!(
        virt_none > virt_all,
        "{virt_none} vs {virt_all} translations per packet"
    );
    assert!(
        saved_none > saved_all,
        "{saved_none} vs {saved_all} ns saved per packet"
    );
}
