//! Wall time of the model itself on the forwarding path: modelled packets forwarded per second of
//! wall time, one core. Each iteration forwards 1000 packets of the built-in ixgbe scenario (rx
//! sync for the CPU and back for the device, tx map + mapping error + unmap, the routing cost)
//! under 3.6 (`virt`: 7 `__phys_addr` frames a packet) and 3.8 (`phys`). Target: at least one
//! million modelled packets per wall second.

use dmasim::reproduce::swiotlb_phys;
use dmasim::scenario::Workload;
use dmasim::scenario::forwarding::forwarder;

fn main() {
    divan::main();
}

const PACKETS: u64 = 1000;

#[divan::bench(args = ["3.6", "3.8"])]
fn forward_1000_packets(bencher: divan::Bencher, kernel: &str) {
    let mut s = swiotlb_phys::scenario().unwrap();
    s.set_kernel_str(kernel).unwrap();
    let Workload::Forwarding(f) = &s.workload else {
        unreachable!("the built-in scenario forwards")
    };
    let mut fw = forwarder(&s, f).unwrap();
    bencher
        .counter(divan::counter::ItemsCount::new(PACKETS))
        .bench_local(|| fw.forward(PACKETS).unwrap());
}
