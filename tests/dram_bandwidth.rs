//! Each node's DRAM write channel under cache maintenance: a run of dirty lines cleaned to the
//! point of coherency is in DRAM no sooner than its bytes over the profile's write bandwidth,
//! whatever the core's issue rate, and the CPUs of one node share that rate.

use dmasim::hw::model::Model;
use dmasim::hw::{CacheOp, Hw};
use dmasim::platform::Profile;
use dmasim::setup::numa_lines;
use dmasim::types::PhysAddr;

const MIB: u64 = 1 << 20;

/// `profile`'s `memory.write_bandwidth_mb_s`, as the file gives it.
fn write_mb_s(p: &Profile) -> f64 {
    let m = p.file.memory.as_ref().expect("a [memory] section");
    *m.write_bandwidth_mb_s
        .as_ref()
        .expect("a write bandwidth")
        .value
        .get_ref()
}

/// A CPU of `name` on node 0 (with its topology, when the profile has one).
fn cpu(p: &Profile) -> Model {
    let mut hw = Model::new(p.model.clone());
    if let Some(n) = numa_lines(p, 0) {
        hw.set_numa(n);
    }
    hw
}

/// Bytes over MB/s, in ps.
fn floor_ps(bytes: u64, mb_s: f64) -> f64 {
    bytes as f64 * 1e6 / mb_s
}

/// Clean `bytes` from `at` and wait for it (`dcache_clean_poc` then the DSB): the time it took.
fn clean_and_wait(hw: &mut Model, at: u64, bytes: u64) -> u64 {
    let t = hw.now_ps();
    hw.cache_maint(CacheOp::Clean, PhysAddr(at), bytes / hw.line_bytes());
    hw.barrier();
    hw.now_ps() - t
}

#[test]
fn a_2_mib_dirty_clean_takes_at_least_its_bytes_over_the_write_bandwidth() {
    for name in ["sm8150", "kunpeng920"] {
        let p = Profile::load(name).unwrap();
        let mut hw = cpu(&p);
        let took = clean_and_wait(&mut hw, 0, 2 * MIB);
        let floor = floor_ps(2 * MIB, write_mb_s(&p));
        assert!(
            took as f64 >= floor,
            "{name}: 2 MiB cleaned in {took} ps, under the {floor} ps its write bandwidth allows"
        );
        // The channel, not the core, is what bounds it: at the core's issue rate alone the
        // run would be far quicker.
        let mut fast = p.clone();
        fast.model.dram_write_ps = None;
        let unbounded = clean_and_wait(&mut cpu(&fast), 0, 2 * MIB);
        assert!(
            (unbounded as f64) < floor,
            "{name}: {unbounded} ps at the issue rate alone, not under the {floor} ps floor"
        );
        // An invalidate writes nothing back: the channel does not change its time.
        let inval = |hw: &mut Model| {
            hw.cache_maint(CacheOp::Inval, PhysAddr(0), 2 * MIB / hw.line_bytes());
            hw.barrier();
            hw.now_ps()
        };
        assert_eq!(inval(&mut cpu(&p)), inval(&mut cpu(&fast)), "{name}");
    }
}

#[test]
fn cpus_of_one_node_share_its_channel_and_another_node_has_its_own() {
    let p = Profile::load("kunpeng920").unwrap();
    let floor = floor_ps(2 * MIB, write_mb_s(&p));
    let mut a = cpu(&p);
    let mut b = a.on_cpu(1, 0);
    let mut c = a.on_cpu(64, 2);
    clean_and_wait(&mut a, 0, 2 * MIB);
    // Node 0's channel is still busy with CPU 0's 2 MiB when CPU 1 starts its own there.
    let shared = clean_and_wait(&mut b, 0, 2 * MIB);
    assert!(
        shared as f64 >= 2.0 * floor,
        "{shared} ps for the second 2 MiB on node 0"
    );
    // Node 2's memory (from 128 GiB) has a channel of its own.
    let own = clean_and_wait(&mut c, 128 << 30, 2 * MIB);
    assert!(
        (own as f64) < 1.5 * floor,
        "{own} ps on node 2's idle channel"
    );
}
