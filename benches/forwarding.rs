//! Wall time of the model itself on the forwarding path: modelled packets forwarded per second of
//! wall time, one core. Each iteration forwards 1000 packets of the built-in ixgbe scenario (rx
//! sync for the CPU and back for the device, tx map + mapping error + unmap, the routing cost)
//! under 3.6 and 3.7 (`virt`: 7 `__phys_addr` frames a packet) and 3.8 (`phys`). Target (#12): at
//! least 10 million modelled packets per wall second under 3.6 and 3.7 (the throughput column).
//! `forward_by_packets` runs 3.7 at 100, 1000 and 10000 packets an iteration to show the cost
//! growing linearly with the packets.

use dmasim::reproduce::swiotlb_phys;
use dmasim::scenario::Workload;
use dmasim::scenario::forwarding::forwarder;

fn main() {
    divan::main();
}

fn run(bencher: divan::Bencher, kernel: &str, packets: u64) {
    let mut s = swiotlb_phys::scenario().unwrap();
    s.set_kernel_str(kernel).unwrap();
    let Workload::Forwarding(f) = &s.workload else {
        unreachable!("the built-in scenario forwards")
    };
    let mut fw = forwarder(&s, f).unwrap();
    bencher
        .counter(divan::counter::ItemsCount::new(packets))
        .bench_local(|| fw.forward(packets).unwrap());
}

#[divan::bench(args = ["3.6", "3.7", "3.8"])]
fn forward_1000_packets(bencher: divan::Bencher, kernel: &str) {
    run(bencher, kernel, 1000);
}

#[divan::bench(args = [100, 1000, 10000])]
fn forward_by_packets(bencher: divan::Bencher, packets: u64) {
    run(bencher, "3.7", packets);
}
