//! Seed 002: what the syncs of a 1 MB streaming block cost on a Zynq-7000.
//!
//! Runs the built-in scenario (scenarios/zynq-streaming.toml: the `zynq7000` profile, Linux 3.19,
//! one 1 MB kmalloc'ed block mapped with dma_map_single) with the seed's calls,
//! `dma_sync_single_for_device` then `dma_sync_single_for_cpu`, once for a TO_DEVICE block and
//! once for a FROM_DEVICE block, and compares each call of the first and the second round with
//! the eight published timings, with the operations each issued at L1 (cache-v7.S) and at the
//! PL310 (cache-l2x0.c). The four calls of a round added are the seed's "over 7 ms per MB".
//!
//! A round's second call is the two-round run's total less the one-round run's: the model is
//! deterministic, so the difference is exactly what the second round cost.

use super::{Report, Row, RowBuilder};
use crate::hw::Counter;
use crate::input::InputError;
use crate::scenario::streaming::CpuTouch;
use crate::scenario::{Outcome, RunResult, Scenario, execute};
use crate::types::DmaDirection;

pub const SCENARIO: &str = include_str!("../../scenarios/zynq-streaming.toml");
/// The seed's two designs as pipelines (1 MB blocks through the PL engine at 600 MB/s).
pub const PIPELINE_STREAMING: &str = include_str!("../../scenarios/zynq-pipeline-streaming.toml");
pub const PIPELINE_COHERENT: &str = include_str!("../../scenarios/zynq-pipeline-coherent.toml");
/// Every coherence option of item 5, with the advice.
pub const OPTIONS: &str = include_str!("../../scenarios/zynq-coherence-options.toml");
/// The seed's byte loop over 200 MB from the coherent mapping.
pub const USER_ACCESS: &str = include_str!("../../scenarios/zynq-user-access.toml");

fn execute_named(file: &str, text: &str) -> Result<Outcome, InputError> {
    let s = Scenario::parse(file, text, std::path::Path::new("."))?;
    execute(&s).map_err(|e| InputError::new(file, e.to_string()))
}

/// The first option's throughput, CPU time per MB and limit of a pipeline scenario.
fn pipeline_row(file: &str, text: &str) -> Result<(f64, f64, &'static str), InputError> {
    match execute_named(file, text)? {
        Outcome::Pipeline(r) => {
            let x = r
                .runs
                .first()
                .ok_or_else(|| InputError::new(file, "no option ran"))?;
            Ok((
                x.throughput_mb_s(),
                x.cpu_ms_per_mb(),
                x.bottleneck().name(),
            ))
        }
        _ => Err(InputError::new(file, "not a pipeline scenario")),
    }
}

/// Seconds of one pass of the byte loop, and the loads and line fills it made.
fn byte_loop(file: &str, text: &str) -> Result<(f64, u64, u64), InputError> {
    match execute_named(file, text)? {
        Outcome::UserAccess(r) => Ok((
            r.seconds(),
            r.count(Counter::CpuAccess),
            r.count(Counter::LineFill),
        )),
        _ => Err(InputError::new(file, "not a user_access scenario")),
    }
}

const FOR_DEVICE: &str = "dma_sync_single_for_device";
const FOR_CPU: &str = "dma_sync_single_for_cpu";

fn run_with(base: &Scenario, dir: DmaDirection, rounds: u32) -> Result<RunResult, InputError> {
    let mut s = base.clone();
    let w = s
        .streaming_mut()
        .ok_or_else(|| InputError::new(&base.file, "not a streaming scenario"))?;
    w.direction = dir;
    w.calls = crate::scenario::streaming::Calls::SyncSingle;
    // What the program does with the block between transfers: it fills an outgoing block before
    // handing it to the device, and reads an incoming one after taking it back.
    w.cpu = match dir {
        DmaDirection::ToDevice => CpuTouch::WriteAll,
        _ => CpuTouch::ReadAll,
    };
    w.iterations = rounds;
    match execute(&s) {
        Ok(Outcome::Streaming(r)) => Ok(r),
        Ok(_) => Err(InputError::new(&s.file, "not a streaming scenario")),
        Err(e) => Err(InputError::new(&s.file, e.to_string())),
    }
}

/// The L1 and L2 operations of one call, per call.
fn ops(r: &RunResult, call: &str) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    if let Some(c) = r.call(call) {
        for k in Counter::ALL {
            let n = c.counts[k as usize];
            if n > 0 && c.count > 0 {
                m.insert(k.name().to_string(), (n / c.count).into());
            }
        }
    }
    serde_json::Value::Object(m)
}

fn total_ps(r: &RunResult, call: &str) -> u64 {
    r.call(call).map_or(0, |c| c.total_ps)
}

pub fn run() -> Result<Report, InputError> {
    let base = Scenario::parse(
        "scenarios/zynq-streaming.toml",
        SCENARIO,
        std::path::Path::new("."),
    )?;
    let published = crate::published::get("zynq-coherent-streaming").expect("embedded");
    let b = RowBuilder {
        published: &published,
        profile: &base.profile,
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut round_one_ps = 0u64;
    // The seed's order within a round: for_device(TO), for_device(FROM), for_cpu(FROM), for_cpu(TO).
    let mut runs = Vec::new();
    for dir in [DmaDirection::ToDevice, DmaDirection::FromDevice] {
        runs.push((dir, run_with(&base, dir, 1)?, run_with(&base, dir, 2)?));
    }
    let order = [
        (FOR_DEVICE, DmaDirection::ToDevice, "for_device.to_device"),
        (
            FOR_DEVICE,
            DmaDirection::FromDevice,
            "for_device.from_device",
        ),
        (FOR_CPU, DmaDirection::FromDevice, "for_cpu.from_device"),
        (FOR_CPU, DmaDirection::ToDevice, "for_cpu.to_device"),
    ];
    for (call, dir, key) in order {
        let (_, one, two) = runs
            .iter()
            .find(|r| r.0 == dir)
            .expect("both directions ran");
        let first = total_ps(one, call);
        let second = total_ps(two, call).saturating_sub(first);
        round_one_ps = round_one_ps.saturating_add(first);
        for (round, ps) in [(1, first), (2, second)] {
            let mut r = b.row(
                &format!("{key}.{round}"),
                "µs",
                &format!("{call}({dir}) of the 1 MB block, round {round}"),
                ps as f64 / 1e6,
            );
            r.detail.insert("operations".into(), ops(two, call));
            rows.push(r);
        }
    }
    rows.push(b.row(
        "overhead_per_mb",
        "ms",
        "the four syncs of round one added",
        round_one_ps as f64 / 1e9,
    ));
    // The two designs' throughput, from the pipeline's discrete-event run.
    for (id, file, text, what) in [
        (
            "streaming_throughput",
            "scenarios/zynq-pipeline-streaming.toml",
            PIPELINE_STREAMING,
            "streaming design: 1 MB blocks looped through the engine, four syncs each, depth 4",
        ),
        (
            "coherent_throughput",
            "scenarios/zynq-pipeline-coherent.toml",
            PIPELINE_COHERENT,
            "coherent design: the same loop on dma_alloc_coherent blocks, no sync",
        ),
    ] {
        let (mb_s, cpu_ms, limit) = pipeline_row(file, text)?;
        let mut r = b.row(id, "MB/s", what, mb_s);
        r.detail.insert("cpu_ms_per_mb".into(), cpu_ms.into());
        r.detail.insert("bottleneck".into(), limit.into());
        rows.push(r);
    }
    // The byte loop, from the coherent mapping and from malloc'ed memory.
    let malloc = USER_ACCESS
        .replace("memory = \"dma_alloc_coherent\"", "memory = \"malloc\"")
        .replace("mapping = \"dma_mmap_coherent\"\n", "");
    for (id, text, what) in [
        (
            "byte_loop.coherent",
            USER_ACCESS,
            "200 MB read byte by byte through dma_mmap_coherent (Normal non-cacheable)",
        ),
        (
            "byte_loop.malloc",
            malloc.as_str(),
            "the same loop over malloc'ed (cached) memory",
        ),
    ] {
        let (secs, loads, fills) = byte_loop("scenarios/zynq-user-access.toml", text)?;
        let mut r = b.row(id, "s", what, secs);
        r.detail.insert("cpu_access".into(), loads.into());
        r.detail.insert("line_fill".into(), fills.into());
        rows.push(r);
    }
    // The advice of every coherence option, driver time only (the seed's accounting) and with
    // the program copying each block in and out (glibc memcpy's 8-byte loads and stores on the
    // block's side, charged by its mapping's type).
    let mut advice = Vec::new();
    for (what, text) in [
        (
            "driver time only (user_access_bytes = 0)",
            OPTIONS.to_string(),
        ),
        (
            "with the program's memcpy of each block charged, glibc's 8-byte loads and stores on the block's side (user_access_bytes = 8)",
            OPTIONS.replace(
                "device_mb_s = 600",
                "device_mb_s = 600\nuser_access_bytes = 8",
            ),
        ),
    ] {
        match execute_named("scenarios/zynq-coherence-options.toml", &text)? {
            Outcome::Pipeline(r) => {
                let table: Vec<String> = r
                    .runs
                    .iter()
                    .map(|x| {
                        format!(
                            "{} {:.0} MB/s {:.3} ms CPU/MB",
                            x.coherence.name(),
                            x.throughput_mb_s(),
                            x.cpu_ms_per_mb()
                        )
                    })
                    .collect();
                advice.push(format!(
                    "advice, {what} (scenarios/zynq-coherence-options.toml, 768K used of 1 MB blocks): {}; best: {}: {}",
                    table.join(", "),
                    r.advice.best.name(),
                    r.advice.reason
                ));
            }
            _ => return Err(InputError::new("zynq-coherence-options", "not a pipeline")),
        }
    }
    // Why the clean costs more than the invalidate, from the runs' own counts.
    let (_, to, _) = &runs[0];
    let (_, from, _) = &runs[1];
    let per_call =
        |r: &RunResult, call: &str, c: Counter| r.call(call).map_or(0.0, |s| s.per_call(c));
    let mechanism = format!(
        "why for_device(TO_DEVICE) costs more than for_device(FROM_DEVICE): both issue {} L1 and {} PL310 line operations (3.19 has no whole-cache operation), but the program's writes left {} L1 and {} PL310 lines dirty, each written back by the clean ({:.0} vs {:.0} µs); an invalidate writes nothing back",
        per_call(to, FOR_DEVICE, Counter::CacheCleanLine),
        per_call(to, FOR_DEVICE, Counter::OuterCleanLine),
        per_call(to, FOR_DEVICE, Counter::L1Writeback),
        per_call(to, FOR_DEVICE, Counter::L2Writeback),
        total_ps(to, FOR_DEVICE) as f64 / 1e6,
        total_ps(from, FOR_DEVICE) as f64 / 1e6,
    );
    let block = published
        .condition("block_bytes")
        .map_or(1 << 20, |c| c.value as u64);
    Ok(Report::of(
        &published,
        base.profile.name(),
        vec![
            format!(
                "Linux {} (the seed's user ran Xilinx's 3.17 or a 3.19 tree; both have 3.16's l2c210_* PL310 ranges and cache-v7.S's dsb st)",
                base.kernel
            ),
            "CONFIG_ARM_ERRATA_764369 off, as mainline's multi_v7_defconfig and mach-zynq's Kconfig leave it; Xilinx's own xilinx_zynq_defconfig enables it, which adds one dsb before each cache-v7.S range loop (one per sync here): `--policy arm_errata_764369=on` runs that configuration".into(),
            format!(
                "one {block}-byte block per direction, kmalloc'ed (lowmem, physically contiguous, 32-byte aligned), mapped once with dma_map_single; a non-coherent device on an HP port"
            ),
            "the user program writes all of an outgoing block before each dma_sync_single_for_device(TO_DEVICE) and reads all of an incoming one after each dma_sync_single_for_cpu(FROM_DEVICE) (before the next for_device); its own time is not counted".into(),
            "each direction runs on its own block and the two are not interleaved: the rounds of one direction follow each other".into(),
            "throughput rows: 1 MB loopback blocks (a block out and one back per slot), queue depth 4, the engine at 600 MB/s; the program's own pass over the blocks is not charged (user_access_bytes = 0), as the seed's 150 MB/s counts only the syncs".into(),
            "byte-loop rows: one pass over 200 MiB, one load per byte; the cached row assumes the A9's L1 prefetcher is on (the zynq7000 profile's l1_prefetch; without it the same profile predicts about 1.6 s)".into(),
            mechanism,
        ]
        .into_iter()
        .chain(advice)
        .collect(),
        rows,
    ))
}
