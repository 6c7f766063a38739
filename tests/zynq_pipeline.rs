//! Seed 002's pipeline end to end: blocks looped through a PL DMA engine under each coherence
//! option, as a discrete-event run of the CPU and the engine. The tests check the mechanism —
//! which timeline limits the loop, and that the limit moves when the engine's bandwidth or the
//! syncs' cost moves — and the exact operations each option issues per block; the profile's
//! costs are still unfitted assumptions, so no test pins a seed figure.

use dmasim::drivers::pl_dma::Coherence;
use dmasim::hw::Counter;
use dmasim::platform::Profile;
use dmasim::scenario::pipeline::{Bottleneck, OptionRun, PipelineResult};
use dmasim::scenario::{Outcome, Scenario, execute};

const STREAMING: &str = include_str!("../scenarios/zynq-pipeline-streaming.toml");
const OPTIONS: &str = include_str!("../scenarios/zynq-coherence-options.toml");
const PROFILE: &str = include_str!("../profiles/zynq7000.toml");
const MB: u64 = 1 << 20;
const LINES_PER_MB: u64 = MB / 32;

/// `text` with the number after every `key` divided by 100 (the profile's costs, whatever their
/// fitted values).
fn hundredth(text: &str, key: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(key) {
        let (head, tail) = rest.split_at(i + key.len());
        out.push_str(head);
        let end = tail
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(tail.len());
        let v: f64 = tail[..end].parse().expect("a number after the key");
        out.push_str(&format!("{}", v / 100.0));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn scenario(text: &str) -> Scenario {
    Scenario::parse("s.toml", text, std::path::Path::new(".")).unwrap()
}

fn run(s: &Scenario) -> PipelineResult {
    match execute(s).unwrap() {
        Outcome::Pipeline(r) => r,
        _ => unreachable!("a pipeline scenario"),
    }
}

fn only(text: &str, option: &str) -> PipelineResult {
    let r = run(&scenario(&text.replace(
        "coherence = \"streaming\"",
        &format!("coherence = \"{option}\""),
    )));
    assert_eq!(r.runs.len(), 1);
    r
}

fn maintenance(r: &OptionRun) -> u64 {
    [
        Counter::CacheCleanLine,
        Counter::CacheInvalLine,
        Counter::CacheCleanInvalLine,
        Counter::Barrier,
        Counter::Wmb,
        Counter::OuterCleanLine,
        Counter::OuterInvalLine,
        Counter::OuterCleanInvalLine,
        Counter::OuterSync,
    ]
    .iter()
    .map(|&c| r.count(c))
    .sum()
}

#[test]
fn the_streaming_design_is_cpu_bound_and_issues_the_seeds_four_syncs_per_block() {
    let r = only(STREAMING, "streaming");
    let x = &r.runs[0];
    let blocks = r.workload.blocks;
    assert_eq!(x.bottleneck(), Bottleneck::Cpu);
    // The CPU never waits for the engine: the loop takes exactly its busy time.
    assert_eq!(x.elapsed_ps, x.cpu_busy_ps);
    assert!(x.device_busy_fraction() < 1.0);
    // Per block: for_device(TO) cleans L1 then L2; for_device(FROM) invalidates L1 then L2;
    // for_cpu(FROM) invalidates L2 then L1; for_cpu(TO) does nothing.
    assert_eq!(x.count(Counter::CacheCleanLine), blocks * LINES_PER_MB);
    assert_eq!(x.count(Counter::CacheInvalLine), blocks * 2 * LINES_PER_MB);
    assert_eq!(x.count(Counter::OuterCleanLine), blocks * LINES_PER_MB);
    assert_eq!(x.count(Counter::OuterInvalLine), blocks * 2 * LINES_PER_MB);
    assert_eq!(x.count(Counter::OuterSync), blocks * 3);
    assert_eq!(x.count(Counter::Wmb), blocks * 3);
    // for_cpu(TO_DEVICE) issues no operation at all (only the API wrapper's own instructions).
    let to_cpu = x.call("dma_sync_single_for_cpu(TO_DEVICE)").unwrap();
    assert_eq!(to_cpu.count, blocks);
    assert!(to_cpu.counts.iter().all(|&n| n == 0), "{:?}", to_cpu.counts);
    assert!(to_cpu.total_ps < blocks * 100_000, "{} ps", to_cpu.total_ps);
    for c in [
        "dma_sync_single_for_device(TO_DEVICE)",
        "dma_sync_single_for_device(FROM_DEVICE)",
        "dma_sync_single_for_cpu(FROM_DEVICE)",
    ] {
        let c = x.call(c).unwrap();
        assert_eq!(c.count, blocks);
        assert!(c.total_ps > 0);
    }
    // Throughput is what the CPU's busy time allows: bytes over the elapsed time.
    let want = (blocks * MB) as f64 / (x.elapsed_ps as f64 * 1e-12) / 1e6;
    assert!((x.throughput_mb_s() - want).abs() < 1e-9);
    assert_eq!(x.data_errors, 0);
}

#[test]
fn the_coherent_design_runs_at_the_engines_bandwidth_with_no_maintenance() {
    for option in ["coherent", "write-combine"] {
        let r = only(STREAMING, option);
        let x = &r.runs[0];
        assert_eq!(x.bottleneck(), Bottleneck::Device, "{option}");
        assert_eq!(maintenance(x), 0, "{option}");
        // 32 blocks at 600 MB/s; the CPU's first enqueue and last dequeue stick out by a little.
        let rate = x.throughput_mb_s();
        assert!(rate < 600.0 && rate > 599.0, "{option}: {rate}");
        assert!(x.device_busy_fraction() > 0.999, "{option}");
        assert_eq!(x.data_errors, 0);
    }
}

#[test]
fn an_acp_device_issues_no_maintenance_and_is_limited_by_the_port() {
    let text = STREAMING.replace("device_mb_s = 600", "device_mb_s = 2000");
    let r = only(&text, "acp");
    let x = &r.runs[0];
    assert_eq!(maintenance(x), 0);
    // The streaming driver's syncs still go through the DMA API, and do nothing.
    assert_eq!(
        x.call("dma_sync_single_for_device(TO_DEVICE)")
            .unwrap()
            .count,
        r.workload.blocks
    );
    // The engine could do 2000 MB/s; the profile's ACP carries 1200.
    assert_eq!(x.engine_mb_s, 1200.0);
    assert_eq!(x.bottleneck(), Bottleneck::Device);
    let rate = x.throughput_mb_s();
    assert!(rate > 1190.0 && rate < 1200.0, "{rate}");
    // Elsewhere the port does not apply.
    let s = only(&text, "coherent");
    assert_eq!(s.runs[0].engine_mb_s, 2000.0);
}

#[test]
fn the_bottleneck_moves_with_the_engines_bandwidth() {
    let fast = only(STREAMING, "streaming");
    let cpu_rate = fast.runs[0].throughput_mb_s();
    // An engine slower than what the CPU can feed becomes the limit, and sets the rate.
    let slow_bw = (cpu_rate / 2.0).floor();
    let slow = only(
        &STREAMING.replace("device_mb_s = 600", &format!("device_mb_s = {slow_bw}")),
        "streaming",
    );
    let x = &slow.runs[0];
    assert_eq!(x.bottleneck(), Bottleneck::Device);
    assert!(x.throughput_mb_s() <= slow_bw && x.throughput_mb_s() > slow_bw * 0.95);
    // The CPU did the same work per block either way.
    assert_eq!(x.cpu_busy_ps, fast.runs[0].cpu_busy_ps);
    assert!(x.elapsed_ps > x.cpu_busy_ps);
}

#[test]
fn the_bottleneck_moves_with_the_cost_of_the_syncs() {
    // The same streaming loop on a Zynq whose maintenance and writebacks cost a hundredth: the syncs
    // no longer hold the CPU back, and the engine becomes the limit.
    let mut cheap = PROFILE.to_string();
    for key in [
        "clean_line = { ns = ",
        "inval_line = { ns = ",
        "clean_inval_line = { ns = ",
        "issue = { cycles = ",
        "l1_writeback = { ns = ",
        "l2_writeback = { ns = ",
    ] {
        cheap = hundredth(&cheap, key);
    }
    let mut s = scenario(STREAMING);
    let before = run(&s).runs[0].clone();
    s.set_profile(Profile::parse("cheap.toml", &cheap).unwrap())
        .unwrap();
    let after = run(&s).runs[0].clone();
    assert_eq!(before.bottleneck(), Bottleneck::Cpu);
    assert_eq!(after.bottleneck(), Bottleneck::Device);
    // The same operations were issued; only their price changed.
    assert_eq!(before.counts, after.counts);
    assert!(after.throughput_mb_s() > 590.0);
}

#[test]
fn with_one_block_in_flight_the_cpu_and_the_engine_take_turns() {
    let text = STREAMING.replace("queue_depth = 4", "queue_depth = 1");
    for option in ["streaming", "coherent", "bounce"] {
        let r = only(&text, option);
        let x = &r.runs[0];
        // Nothing overlaps: the loop is the CPU's work plus the engine's, block after block.
        assert_eq!(x.elapsed_ps, x.cpu_busy_ps + x.device_busy_ps, "{option}");
        let deeper = only(STREAMING, option);
        assert!(deeper.runs[0].elapsed_ps < x.elapsed_ps, "{option}");
    }
}

#[test]
fn partial_syncs_cover_only_the_bytes_used() {
    let text = STREAMING.replace(
        "device_mb_s = 600",
        "device_mb_s = 600\nbytes_used = \"256K\"",
    );
    let full = only(&text, "streaming");
    let part = only(&text, "streaming-partial");
    let blocks = full.workload.blocks;
    let lines = (256 << 10) / 32;
    assert_eq!(
        full.runs[0].count(Counter::CacheCleanLine),
        blocks * LINES_PER_MB
    );
    assert_eq!(part.runs[0].count(Counter::CacheCleanLine), blocks * lines);
    assert_eq!(
        part.runs[0].count(Counter::OuterInvalLine),
        blocks * 2 * lines
    );
    assert!(part.runs[0].cpu_ms_per_mb() < full.runs[0].cpu_ms_per_mb());
}

#[test]
fn bounce_copies_the_engines_bytes_and_user_pages_maps_each_page() {
    let r = run(&scenario(OPTIONS));
    let w = &r.workload;
    let used = w.used_bytes;
    let bounce = r.run(Coherence::Bounce).unwrap();
    // One copy_from_user out and one copy_to_user back per block, of the bytes used.
    assert_eq!(bounce.count(Counter::BounceCopy), 2 * w.blocks);
    assert_eq!(bounce.count(Counter::BounceCopyBytes), 2 * w.blocks * used);
    assert_eq!(maintenance(bounce), 0);
    let pages = used / 4096;
    let gup = r.run(Coherence::UserPages).unwrap();
    // dma_map_sg per page entry, each ending in its own dsb st and CACHE_SYNC (map TO, map FROM,
    // unmap FROM: ARMv7's unmap of a TO_DEVICE list does nothing).
    assert_eq!(gup.count(Counter::OuterSync), 3 * pages * w.blocks);
    assert_eq!(gup.count(Counter::Wmb), 3 * pages * w.blocks);
    assert_eq!(gup.count(Counter::CacheCleanLine), w.blocks * used / 32);
    assert!(gup.split.pinning_ps > 0 && bounce.split.copy_ps > 0);
    for x in &r.runs {
        assert_eq!(x.data_errors, 0, "{}", x.coherence.name());
    }
}

#[test]
fn the_advice_follows_the_figures() {
    let r = run(&scenario(OPTIONS));
    let best = r.run(r.advice.best).unwrap();
    let top = r
        .runs
        .iter()
        .map(|x| x.throughput_mb_s())
        .fold(0.0, f64::max);
    assert!(best.throughput_mb_s() >= top * 0.95);
    for x in r.runs.iter().filter(|x| x.throughput_mb_s() >= top * 0.95) {
        assert!(best.cpu_ms_per_mb() <= x.cpu_ms_per_mb());
    }
    assert!(
        r.advice.reason.contains("engine is the limit"),
        "{}",
        r.advice.reason
    );
    // Between the two streaming designs alone, the one that syncs less wins, because of its CPU.
    let two = run(&scenario(&OPTIONS.replace(
        "[\"coherent\", \"streaming\", \"streaming-partial\", \"write-combine\", \"acp\", \"bounce\", \"user-pages\"]",
        "[\"streaming\", \"streaming-partial\"]",
    )));
    assert_eq!(two.advice.best, Coherence::StreamingPartial);
    assert!(
        two.advice.reason.contains("CPU as the limit"),
        "{}",
        two.advice.reason
    );
    assert!(
        two.advice.reason.contains("cache maintenance"),
        "{}",
        two.advice.reason
    );
}

#[test]
fn the_run_is_deterministic_and_renders() {
    let s = scenario(OPTIONS);
    let a = execute(&s).unwrap();
    let b = execute(&s).unwrap();
    assert_eq!(a.table(), b.table());
    assert_eq!(a.json(), b.json());
    let j = a.json();
    assert_eq!(j["workload"]["kind"], "pipeline");
    assert_eq!(j["options"].as_array().unwrap().len(), 7);
    assert!(j["options"][0]["user_read_ms_per_mb"].is_null());
    assert!(a.table().contains("best for the goal"));
}

#[test]
fn a_block_user_space_wrote_costs_its_clean_more_than_the_invalidate() {
    // With the profile's functional cache model, the block user space just wrote through its
    // cached mapping is dirty: for_device(TO_DEVICE) writes those lines back, the FROM_DEVICE
    // invalidates have nothing to write.
    let r = only(STREAMING, "streaming");
    let x = &r.runs[0];
    let to = x.call("dma_sync_single_for_device(TO_DEVICE)").unwrap();
    let from = x.call("dma_sync_single_for_device(FROM_DEVICE)").unwrap();
    assert!(
        to.total_ps > from.total_ps,
        "{} vs {}",
        to.total_ps,
        from.total_ps
    );
    assert!(x.count(Counter::L1Writeback) > 0 && x.count(Counter::L2Writeback) > 0);
    // A capture loop (the user only reads) leaves nothing dirty to write back.
    let capture = only(
        &STREAMING.replace("flow = \"loopback\"", "flow = \"from_device\""),
        "streaming",
    );
    let c = &capture.runs[0];
    assert_eq!(
        c.count(Counter::L1Writeback) + c.count(Counter::L2Writeback),
        0
    );
    // Through an uncached mapping the caches are never touched.
    let wc = only(STREAMING, "write-combine");
    assert_eq!(wc.runs[0].count(Counter::L1Writeback), 0);
}

#[test]
fn charged_user_access_makes_the_uncached_mapping_pay_for_every_read() {
    // The seed's first design, with the program reading and writing each block byte by byte (its
    // test loop): through the coherent (Normal non-cacheable) mapping every byte is a bus
    // transaction, through streaming's cached mapping one line fill per 32 bytes at most.
    let text = OPTIONS
        .replace(
            r#"coherence = ["coherent", "streaming", "streaming-partial", "write-combine", "acp", "bounce", "user-pages"]"#,
            r#"coherence = ["coherent", "streaming"]"#,
        )
        .replace("device_mb_s = 600", "device_mb_s = 600\nuser_access_bytes = 1");
    let r = run(&scenario(&text));
    let (coh, st) = (&r.runs[0], &r.runs[1]);
    assert!(coh.user_access_charged && st.user_access_charged);
    assert!(coh.split.user_read_ps > 0 && st.split.user_read_ps > 0);
    assert!(
        coh.split.user_read_ps > 10 * st.split.user_read_ps,
        "uncached reads {} ps vs cached {} ps",
        coh.split.user_read_ps,
        st.split.user_read_ps
    );
    assert_eq!(
        coh.count(Counter::LineFill),
        0,
        "uncached reads fill no line"
    );
    assert!(st.count(Counter::LineFill) > 0);
    // Not charged (the default): the same runs spend nothing in user space.
    let free = run(&scenario(
        &text.replace("user_access_bytes = 1", "user_access_bytes = 0"),
    ));
    assert!(!free.runs[0].user_access_charged);
    assert_eq!(free.runs[0].split.user_read_ps, 0);
    // A size the CPU does not have is bad input.
    let e = Scenario::parse(
        "s.toml",
        &text.replace("user_access_bytes = 1", "user_access_bytes = 16"),
        std::path::Path::new("."),
    )
    .unwrap_err();
    assert_eq!(e.key.as_deref(), Some("workload.user_access_bytes"), "{e}");
    assert!(e.line.is_some(), "{e}");
}

/// 3.14 and 3.15 ignore the device tree's `dma-coherent` (ARM reads it from 3.16), so a device
/// on the ACP gets arm_dma_ops unless its driver installs arm_coherent_dma_ops itself: the model
/// runs the driver doing so (the same costs as 3.16's DT path) and the report says it did.
#[test]
fn the_acp_under_3_14_is_coherent_because_the_driver_says_so() {
    let text = OPTIONS.replace("kernel = \"3.19\"", "kernel = \"3.14\"");
    let Outcome::Pipeline(r) = execute(&scenario(&text)).unwrap() else {
        panic!("a pipeline result")
    };
    let acp = r.run(Coherence::Acp).unwrap();
    assert!(
        acp.what.contains("driver sets arm_coherent_dma_ops itself"),
        "{}",
        acp.what
    );
    assert_eq!(acp.counts[Counter::CacheCleanLine as usize], 0);
    let Outcome::Pipeline(r) = execute(&scenario(OPTIONS)).unwrap() else {
        panic!("a pipeline result")
    };
    assert!(!r.run(Coherence::Acp).unwrap().what.contains("driver sets"));
}

/// With the program's pass charged, the advice says which access pattern decides: reading every
/// block in glibc memcpy's 8-byte loads makes the non-cacheable mapping pay a bus round trip per
/// load, more than a cached pass plus its maintenance; a program that only writes its blocks
/// (posted, buffered stores) and reads nothing turns the comparison around.
#[test]
fn the_advice_names_the_access_pattern_that_decides_the_ranking() {
    let two = |flow: &str| {
        run(&scenario(
            &OPTIONS
                .replace(
                    "[\"coherent\", \"streaming\", \"streaming-partial\", \"write-combine\", \"acp\", \"bounce\", \"user-pages\"]",
                    "[\"coherent\", \"streaming-partial\"]",
                )
                .replace("flow = \"loopback\"", &format!("flow = \"{flow}\""))
                .replace("device_mb_s = 600", "device_mb_s = 600\nuser_access_bytes = 8"),
        ))
    };
    let loopback = two("loopback");
    let why = &loopback.advice.reason;
    assert!(
        why.contains("what decides the ranking is the program's access pattern"),
        "{why}"
    );
    assert!(why.contains("8-byte loads and stores"), "{why}");
    assert_eq!(loopback.advice.best, Coherence::StreamingPartial, "{why}");
    assert!(
        why.contains("a cached pass plus its maintenance costs less"),
        "{why}"
    );
    let to_device = two("to_device");
    let why = &to_device.advice.reason;
    assert_eq!(to_device.advice.best, Coherence::Coherent, "{why}");
    assert!(why.contains("the uncached pass costs less"), "{why}");
}
