//! Release rules that setup resolves once: the segment boundary a device reports
//! (`dma_get_seg_boundary()`), as the ops the kernel gives it will read it.

use dmasim::mm::physmem::NodeRange;
use dmasim::policy::KernelVersion;
use dmasim::scenario::Scenario;
use dmasim::setup::{DeviceSetup, Machine, setup_dma_ops};
use dmasim::types::PhysAddr;

const BOUNCE: &str = include_str!("../scenarios/swiotlb-bounce.toml");
const FORWARDING: &str = include_str!("../scenarios/ixgbe-forwarding.toml");

fn scenario(text: &str, kernel: (u32, u32)) -> Scenario {
    let mut s = Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap();
    s.set_kernel(KernelVersion(kernel.0, kernel.1)).unwrap();
    s
}

/// The boundary the device's ops see after setup.
fn boundary(s: &Scenario, setup: &DeviceSetup) -> u64 {
    let node = NodeRange {
        node: 0,
        start: PhysAddr(0x1000_0000),
        size: (s.swiotlb.size + (1 << 20)).next_multiple_of(4096),
    };
    let mut m = Machine::boot(&s.profile, vec![node]);
    setup_dma_ops(&mut m, setup, 1)
        .unwrap()
        .dev
        .seg_boundary_mask
}

#[test]
fn a_device_that_set_no_boundary_gets_4g_up_to_5_9_and_ulong_max_from_5_10() {
    for (kernel, want) in [
        ((5, 9), 0xffff_ffff),
        ((5, 10), u64::MAX),
        ((6, 0), u64::MAX),
    ] {
        let s = scenario(BOUNCE, kernel);
        assert_eq!(boundary(&s, &s.device_setup()), want, "{kernel:?}");
    }
}

#[test]
fn a_pci_nic_keeps_the_4g_boundary_the_pci_core_sets() {
    for kernel in [(3, 6), (5, 10), (6, 6)] {
        let s = scenario(FORWARDING, kernel);
        let nic = dmasim::scenario::forwarding::nic(&s);
        let setup = DeviceSetup {
            device: &nic,
            ..s.device_setup()
        };
        assert_eq!(boundary(&s, &setup), 0xffff_ffff, "{kernel:?}");
    }
}

const CAMERA: &str = r#"
[scenario]
name = "camera-behind-mmu500"
platform = "sm8150"
kernel = "5.15"

[device]
name = "camera"
coherent = false
dma_mask_bits = 36

[iommu]
granule = "4K"
ias = 36

[workload]
kind = "streaming"
buffer = "64K"
entry = "4K"
direction = "from_device"
calls = "map_page+unmap_page"
iterations = 2
"#;

/// `iova_to_phys` walks and WARNs per `dma_unmap_page`, end to end from `--kernel`.
#[test]
fn unmap_page_lookups_follow_the_release_end_to_end() {
    use dmasim::hw::Counter;
    use dmasim::scenario::{Outcome, execute};
    for (kernel, coherent, lookups) in [
        ((5, 10), false, 1.0),
        ((5, 10), true, 0.0),
        ((5, 14), false, 2.0),
        ((5, 14), true, 1.0),
        ((5, 15), false, 1.0),
        ((5, 15), true, 1.0),
    ] {
        let text = CAMERA.replace(
            "coherent = false",
            if coherent {
                "coherent = true"
            } else {
                "coherent = false"
            },
        );
        let s = scenario(&text, kernel);
        let Ok(Outcome::Streaming(r)) = execute(&s) else {
            panic!("a streaming result")
        };
        let unmap = r.call("dma_unmap_page").unwrap();
        assert_eq!(unmap.count, 32);
        assert_eq!(
            unmap.per_call(Counter::IovaToPhys),
            lookups,
            "{kernel:?} {coherent}"
        );
        assert_eq!(unmap.per_call(Counter::Warn), 0.0);
        assert_eq!(unmap.per_call(Counter::IovaFree), 1.0);
        // Whatever the lookups, the maintenance is the sync's: 64 lines per 4 KiB page.
        let lines = if coherent { 0.0 } else { 64.0 };
        assert_eq!(unmap.per_call(Counter::CacheInvalLine), lines);
    }
}

/// What no policy offers is listed by `dmasim policies` (table and JSON), with what runs
/// instead: a user looking for SMMUv3 CMD_SYNC polling without MSIs finds the answer there.
#[test]
fn policies_list_what_is_not_modelled() {
    let p = dmasim::platform::Profile::load("kunpeng920").unwrap();
    let t = dmasim::report::policies_table(&p);
    assert!(
        t.contains("not modelled") && t.contains("CMD_SYNC completion without MSI polling"),
        "{t}"
    );
    let j = dmasim::report::policies_json(&p);
    let list = j["not_modelled"].as_array().unwrap();
    assert!(list.iter().any(|e| {
        e["behaviour"]
            .as_str()
            .unwrap()
            .contains("without MSI polling")
    }));
    assert!(
        list.iter()
            .all(|e| !e["instead"].as_str().unwrap().is_empty())
    );
}
