//! Replaying a traced driver: what the trace's calls cost on the model equals what the same
//! calls written by hand as a scenario cost, and each fixture replays every call it holds.

use dmasim::policy::KernelVersion;
use dmasim::scenario::{Outcome, Scenario, execute};

const STREAMING_BY_HAND: &str = r#"
[scenario]
name = "by-hand"
platform = "dimensity9500"
kernel = "7.1"
[device]
name = "1c0e000.isp"
coherent = false
dma_mask_bits = 64
[workload]
kind = "streaming"
buffer = "512K"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 10
"#;

fn replayed(kernel: KernelVersion) -> dmasim::scenario::replay::RunResult {
    let mut s = Scenario::load("tests/data/traces/streaming-4k.toml").unwrap();
    s.set_kernel(kernel).unwrap();
    match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        other => panic!(
            "a replay result, got {:?}",
            other.map(|o| o.info().scenario.clone())
        ),
    }
}

/// The streaming fixture (a camera driver's map_sg / unmap_sg of 128 entries of 4 KB, 10
/// times) costs per call exactly what the hand-written streaming scenario of the same list
/// costs, under 7.0 (a barrier per entry) and 7.1 (one per list): the change per call is the
/// same to the last digit.
#[test]
fn a_traced_streaming_driver_costs_what_the_same_loop_by_hand_costs() {
    for k in [KernelVersion(7, 0), KernelVersion(7, 1)] {
        let mut s =
            Scenario::parse("by-hand.toml", STREAMING_BY_HAND, std::path::Path::new(".")).unwrap();
        s.set_kernel(k).unwrap();
        let by_hand = match execute(&s) {
            Ok(Outcome::Streaming(r)) => r,
            _ => panic!("a streaming result"),
        };
        let r = replayed(k);
        assert_eq!(r.devices.len(), 1);
        let d = &r.devices[0];
        assert_eq!(d.calls.len(), 2);
        for c in &d.calls {
            let h = by_hand.call(c.call).unwrap();
            assert_eq!(
                (c.count, c.total_ps),
                (h.count, h.total_ps),
                "{k} {}",
                c.call
            );
        }
        assert_eq!(r.total_ps, by_hand.total_ps, "{k}");
        assert_eq!(r.counts, by_hand.counts, "{k}");
    }
}

#[test]
fn every_call_of_the_streaming_fixture_is_replayed() {
    let r = replayed(KernelVersion(7, 1));
    let d = &r.devices[0];
    let counts: Vec<(&str, u64)> = d.calls.iter().map(|c| (c.call, c.count)).collect();
    assert_eq!(counts, [("dma_map_sg", 10), ("dma_unmap_sg", 10)]);
    assert!(d.unresolved.is_empty());
    assert_eq!(d.skipped_after_refusal, 0);
    assert!(r.findings.is_empty());
}
