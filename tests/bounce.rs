//! The bouncing scenario: copies, slots, locks per area, and a full pool as the kernel's mapping error.

use dmasim::scenario::bounce::BounceResult;
use dmasim::scenario::{Outcome, Scenario, execute};

const BOUNCE: &str = include_str!("../scenarios/swiotlb-bounce.toml");

fn run(text: &str) -> BounceResult {
    let s = Scenario::parse(
        "scenarios/swiotlb-bounce.toml",
        text,
        std::path::Path::new("."),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    match execute(&s).unwrap() {
        Outcome::Bounce(r) => r,
        _ => panic!("a bounce scenario"),
    }
}

#[test]
fn every_mapping_bounces_both_ways_and_frees_its_slots() {
    let r = run(BOUNCE);
    assert_eq!(r.nareas, 4, "6.0: one area per CPU");
    for row in &r.rows {
        assert_eq!(row.errors, 0);
        assert_eq!(row.maps, 10 * 4 * 8);
        // Bidirectional: copied in at map, out at unmap.
        assert_eq!(row.bounce_copies, 2 * row.maps, "{}", row.size);
        assert_eq!(row.bounce_bytes, 2 * row.maps * row.size);
        assert_eq!(row.slots_per_map, row.size.div_ceil(2048));
        // 32 mappings held at once.
        assert!(row.peak_slots >= 32 * row.slots_per_map, "{row:?}");
        // Every CPU starts in its own area: the locks share the work evenly.
        assert_eq!(row.locks, vec![160; 4], "{}", row.size);
        assert_eq!(row.busiest_lock_pct(), 25.0);
    }
    // Larger mappings take longer (the copy).
    assert!(r.rows.last().unwrap().map_mean_ns() > 10.0 * r.rows[0].map_mean_ns());
}

#[test]
fn before_areas_one_lock_takes_everything() {
    let text = BOUNCE.replace("kernel = \"6.0\"", "kernel = \"3.6\"");
    let r = run(&text);
    assert_eq!(r.nareas, 1);
    assert_eq!(
        r.implementation,
        "x86 swiotlb_dma_ops (3.6 rules), one pool lock, swiotlb_addr=virt"
    );
    for row in &r.rows {
        assert_eq!(row.locks, vec![640]);
        assert_eq!(row.busiest_lock_pct(), 100.0);
        assert_eq!(row.errors, 0);
    }
}

#[test]
fn a_full_pool_is_the_kernels_mapping_error_not_a_panic() {
    // 32 mappings of 64 KiB want 1024 slots; a 1 MiB pool has 512.
    for kernel in ["6.0", "3.6"] {
        let text = BOUNCE
            .replace("kernel = \"6.0\"", &format!("kernel = \"{kernel}\""))
            .replace("size = \"64M\"", "size = \"1M\"")
            .replace(
                "sizes = [\"64\", \"512\", \"2K\", \"4K\", \"16K\", \"64K\", \"256K\"]",
                "sizes = [\"64K\", \"2K\"]",
            );
        let r = run(&text);
        let big = &r.rows[0];
        assert!(big.errors > 0 && big.errors < big.maps, "{kernel}: {big:?}");
        assert!(big.peak_slots <= 512);
        // Everything mapped was unmapped: the next size starts from an empty pool.
        assert_eq!(r.rows[1].errors, 0, "{kernel}");
    }
}

#[test]
fn x86_bounces_through_its_own_swiotlb_ops_until_5_0_and_dma_direct_from_5_0() {
    // 4.20 still has lib/swiotlb.c's swiotlb_dma_ops; 5.0 merged them into dma-direct, with the
    // same one-lock pool; 6.0 brought the areas.
    for (kernel, implementation, locks) in [
        (
            "4.20",
            "x86 swiotlb_dma_ops (4.11 rules), one pool lock, swiotlb_addr=phys",
            vec![640],
        ),
        ("5.0", "dma-direct over swiotlb (5.0 rules)", vec![640]),
        ("5.19", "dma-direct over swiotlb (5.18 rules)", vec![640]),
        ("6.0", "dma-direct over swiotlb (6.0 rules)", vec![160; 4]),
    ] {
        let text = BOUNCE.replace("kernel = \"6.0\"", &format!("kernel = \"{kernel}\""));
        let r = run(&text);
        assert_eq!(r.implementation, implementation, "{kernel}");
        for row in &r.rows {
            assert_eq!(row.locks, locks, "{kernel} {}", row.size);
            assert_eq!(row.errors, 0);
            assert_eq!(row.bounce_copies, 2 * row.maps);
        }
    }
}
