//! calibrate: measure this host and write a platform profile whose Model reproduces it.
//!
//! Kernel counterpart: none — this produces the data a profile holds (see [`crate::platform`]),
//! from runs of the same dma-direct scatter-gather sync that [`crate::hostbench`] times.
//!
//! What it measures, all on one entry size (the one given, normally 4 KiB) so that other entry
//! sizes are genuine predictions:
//!
//! 1. `P`, `Q`: medians of interleaved per-entry and batched `sync_sg_for_device` passes over a
//!    freshly dirtied buffer of `N` entries of `n` lines (exactly as hostbench does).
//! 2. `S`: the software path per entry — the same batched pass with the Host in dry mode (every
//!    request checked, no instruction executed).
//! 3. `I`: the per-line issue cost when there is nothing to write back — a batched pass over lines
//!    the previous pass already flushed, less `S`.
//! 4. `B`: an SFENCE / DSB SY with nothing outstanding, timed over a run of back-to-back barriers.
//! 5. A cross-check, not used in the fit: one dirty line plus a barrier, repeated.
//!
//! The fit follows the Model's mechanism ([`crate::hw::model`]): per line, issue `I`; completion
//! `L` after issue; completions at least `V` apart; a barrier waits for the last completion, then
//! costs `B`. For a list of `N` entries of `n` lines, with `S` of software per entry and `V ≥ I`:
//!
//! ```text
//! per-entry pass  P = N · (S + L + (n − 1)·V + B)
//! batched pass    Q = S + L + (N·n − 1)·V + B
//! ```
//!
//! so `V = (Q − P/N) / (n·(N − 1))` and `L = P/N − S − B − (n − 1)·V`. Both come from the one
//! entry size; the profile then predicts other entry sizes from the same two equations. If the
//! host turns out issue-bound (`I > V`), the Model charges `I` per line instead and the fit says so
//! in the profile's header.
//!
//! The profile is complete for its architecture: every section a run there needs is written.
//! Without `--instruction`, every maintenance instruction user space may issue is measured (arm64:
//! `DC CVAC` and `DC CIVAC`; x86-64: `CLFLUSHOPT`, and `CLWB` where the CPU has it), each on its
//! own runs. What user space cannot issue is held, with the reason in its source: arm64's
//! `DC IVAC` is not permitted at EL0 (it would discard other data's dirty lines; `SCTLR_EL1.UCI`
//! opens only the clean and clean+invalidate forms), so `cache.inval` is held equal to the
//! measured `DC CIVAC`, which completes at the same point of coherency. The `[sw]` costs the
//! dry pass cannot separate are held too: `sg_next` at 0 (inside the measured per-entry path),
//! `dma_direct_map_phys` and `dma_direct_unmap_phys` equal to it (not measured), `dma_api_call` at
//! 0 (once per call, not measured).
//!
//! Invariants: every parameter written carries `source = "measured: ..."` naming geometry,
//! iterations and statistic, or `held: ...` naming what it is held to and why; the output is a
//! profile [`crate::platform::Profile::parse`] accepts; no measured figure is built into the code.

use crate::hostbench::{Bench, HostError, HostbenchOpts, Instruction, Mode, median, validate};
use crate::hw::host::{HostCaps, host_line_bytes};
use crate::hw::{CacheOp, Hw};
use crate::platform::Arch;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalibrateOpts {
    pub buffer_bytes: u64,
    pub entry_bytes: u64,
    pub iterations: u32,
    /// One instruction to measure; `None`: every one this host can issue from user space.
    pub instruction: Option<Instruction>,
}

/// Raw host measurements, all in nanoseconds (medians).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Measurements {
    /// One per-entry pass.
    pub per_entry_ns: f64,
    /// One batched pass.
    pub batched_ns: f64,
    /// Software path per entry (dry batched pass / entries).
    pub sw_entry_ns: f64,
    /// A batched pass with nothing to write back.
    pub clean_pass_ns: f64,
    /// One barrier with nothing outstanding.
    pub barrier_ns: f64,
    /// One dirty line plus a barrier (cross-check only).
    pub one_line_ns: f64,
}

/// The fitted Model parameters, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Fit {
    pub issue_ns: f64,
    pub latency_ns: f64,
    pub interval_ns: f64,
    pub barrier_ns: f64,
    pub sw_entry_ns: f64,
    /// The host was issue-bound (`I > V`): completions are paced by issue, not by the memory side.
    pub issue_bound: bool,
    /// `L` came out negative (noise) and was held at 0.
    pub latency_clamped: bool,
}

/// Geometry of the calibration list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Geometry {
    pub entries: u64,
    pub lines_per_entry: u64,
}

/// Fit the Model's parameters to the measurements (see the module header for the equations).
pub fn fit(m: &Measurements, g: Geometry) -> Fit {
    let n = g.lines_per_entry as f64;
    let nn = g.entries as f64;
    let per_entry_entry = m.per_entry_ns / nn;
    let lines = nn * n;
    let issue = ((m.clean_pass_ns - m.sw_entry_ns * nn) / lines).max(0.0);
    let interval = if g.entries > 1 {
        ((m.batched_ns - per_entry_entry) / (n * (nn - 1.0))).max(0.0)
    } else {
        0.0
    };
    let issue_bound = issue > interval;
    let pace = interval.max(issue);
    let latency = per_entry_entry - m.sw_entry_ns - m.barrier_ns - (n - 1.0) * pace;
    Fit {
        issue_ns: issue,
        latency_ns: latency.max(0.0),
        interval_ns: interval,
        barrier_ns: m.barrier_ns,
        sw_entry_ns: m.sw_entry_ns,
        issue_bound,
        latency_clamped: latency < 0.0,
    }
}

/// Everything the profile text says besides the fitted numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileMeta {
    pub arch: Arch,
    pub cpu_model: String,
    pub cpu_freq_mhz: f64,
    pub cpu_freq_source: String,
    pub line_bytes: u64,
    pub line_source: String,
    pub buffer_bytes: u64,
    pub entry_bytes: u64,
    pub iterations: u32,
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn ns(x: f64) -> String {
    // Three decimals: picosecond resolution, the Model's unit.
    format!("{x:.3}")
}

/// One instruction's measurements and the fit on them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpRun {
    pub instruction: Instruction,
    pub measurements: Measurements,
    pub fit: Fit,
}

impl OpRun {
    pub fn new(instruction: Instruction, measurements: Measurements, g: Geometry) -> OpRun {
        OpRun {
            instruction,
            measurements,
            fit: fit(&measurements, g),
        }
    }
}

/// Everything one `dmasim calibrate` found: what it ran on and each instruction's runs, the
/// clean-and-invalidate one (if measured) first.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub meta: ProfileMeta,
    pub geometry: Geometry,
    pub runs: Vec<OpRun>,
}

/// What `dmasim calibrate` says on standard error after its fit: each fit it could not make as
/// measured (a latency that came out negative, held at 0) and each cross-check that misses the
/// measurement by more than 10 % (the Model's one dirty line plus barrier against the timed
/// one). The profile is written all the same: these are warnings, not errors.
pub fn warnings(c: &Calibration) -> Vec<String> {
    let mut out = Vec::new();
    for r in &c.runs {
        let (m, f) = (&r.measurements, &r.fit);
        let name = insn_upper(r.instruction);
        if f.latency_clamped {
            out.push(format!(
                "{name}: the latency fit came out negative (measurement noise) and is held at 0"
            ));
        }
        let model = f.issue_ns + f.latency_ns + f.barrier_ns;
        if m.one_line_ns > 0.0 {
            let err = (model - m.one_line_ns) / m.one_line_ns * 100.0;
            if err.abs() > 10.0 {
                out.push(format!(
                    "{name}: cross-check misses by {err:+.1} %: the Model charges one dirty line + barrier {model:.1} ns, measured {:.1} ns",
                    m.one_line_ns
                ));
            }
        }
    }
    out
}

/// The instructions to measure: the one asked for, else every one this host's user space can
/// issue, clean-and-invalidate first (its run gives the barrier and the software path).
pub fn instructions_for(
    arch: Arch,
    asked: Option<Instruction>,
    caps: HostCaps,
) -> Vec<Instruction> {
    if let Some(i) = asked {
        return vec![i];
    }
    let (ci, c) = match arch {
        Arch::Arm64 => (Instruction::DcCivac, Instruction::DcCvac),
        _ => (Instruction::Clflushopt, Instruction::Clwb),
    };
    let mut out = Vec::new();
    if caps.clean_inval {
        out.push(ci);
    }
    if caps.clean {
        out.push(c);
    }
    out
}

/// The maintenance operations a run on `arch` issues, so the profile must price.
fn needed_ops(arch: Arch) -> &'static [CacheOp] {
    match arch {
        Arch::Arm64 | Arch::Armv7 => &[CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval],
        Arch::X86_64 => &[CacheOp::CleanInval],
    }
}

fn insn_upper(i: Instruction) -> String {
    i.name().to_ascii_uppercase().replace('-', " ")
}

/// Why an operation no run measured is held equal to `from`'s measurement.
fn held_reason(arch: Arch, op: CacheOp, from: Instruction) -> String {
    let f = insn_upper(from);
    match (arch, op) {
        (Arch::Arm64, CacheOp::Inval) => format!(
            "held: DC IVAC is not permitted at EL0 (SCTLR_EL1.UCI opens only DC CVAC and DC CIVAC to user space), so it cannot be measured; assumed equal to {f} as measured here, which completes at the same point of coherency"
        ),
        _ => format!(
            "held: not measured (only {} was run); assumed equal to {f} as measured here",
            from.name()
        ),
    }
}

/// The profile TOML for a calibration: every section a run on its architecture needs.
pub fn render_profile(c: &Calibration) -> String {
    let meta = &c.meta;
    let g = c.geometry;
    let Some(first) = c.runs.first() else {
        return String::new();
    };
    let names: Vec<&str> = c.runs.iter().map(|r| r.instruction.name()).collect();
    let geo = format!(
        "{} B buffer as {} entries of {} B ({} lines each)",
        meta.buffer_bytes, g.entries, meta.entry_bytes, g.lines_per_entry
    );
    let it = meta.iterations;
    let mut out = format!(
        "# This host, calibrated by `dmasim calibrate` on one entry size only: {geo}, {it} iterations,\n\
         # measuring {}.\n",
        names.join(" and ")
    );
    for r in &c.runs {
        let (m, f) = (&r.measurements, &r.fit);
        out.push_str(&format!(
            "# {}: raw medians (ns): per-entry pass {}, batched pass {}, dry (software-only) pass per entry {},\n\
             #   batched pass with nothing to write back {}, barrier alone {}, one dirty line + barrier {}.\n\
             #   The Model charges one dirty line + barrier as issue + latency + barrier = {} ns (cross-check).\n",
            insn_upper(r.instruction),
            ns(m.per_entry_ns),
            ns(m.batched_ns),
            ns(m.sw_entry_ns),
            ns(m.clean_pass_ns),
            ns(m.barrier_ns),
            ns(m.one_line_ns),
            ns(f.issue_ns + f.latency_ns + f.barrier_ns),
        ));
        if f.issue_bound {
            out.push_str(
                "# NOTE: issue-bound (issue > interval): the Model paces completions by issue here.\n",
            );
        }
        if f.latency_clamped {
            out.push_str("# NOTE: the latency fit came out negative (noise) and is held at 0.\n");
        }
    }
    out.push_str(&format!(
        "\n[platform]\nname = \"host\"\ndescription = {}\narch = \"{}\"\ncpu_freq_mhz = {{ value = {:.1}, source = {} }}\n",
        quote(&format!(
            "this host ({}), calibrated with {}",
            meta.cpu_model,
            names.join(" and ")
        )),
        meta.arch.name(),
        meta.cpu_freq_mhz,
        quote(&meta.cpu_freq_source),
    ));
    out.push_str(&format!(
        "\n[cache]\nline_bytes = {{ value = {}, source = {} }}\n",
        meta.line_bytes,
        quote(&format!("measured: {}", meta.line_source))
    ));
    let mut ops: Vec<CacheOp> = c.runs.iter().map(|r| r.instruction.op()).collect();
    for &op in needed_ops(meta.arch) {
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    for op in [CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval] {
        if !ops.contains(&op) {
            continue;
        }
        match c.runs.iter().find(|r| r.instruction.op() == op) {
            Some(r) => {
                let f = &r.fit;
                let geo = format!("{geo}, {}", r.instruction.name());
                out.push_str(&format!(
                    "\n[cache.{}]   # {}\n\
                     issue = {{ ns = {}, source = {} }}\n\
                     latency = {{ ns = {}, source = {} }}\n\
                     interval = {{ ns = {}, source = {} }}\n",
                    op.key(),
                    insn_upper(r.instruction),
                    ns(f.issue_ns),
                    quote(&format!(
                        "measured: median of {it} batched passes over lines the previous pass had already written back ({geo}), less the dry software time, per line"
                    )),
                    ns(f.latency_ns),
                    quote(&format!(
                        "measured: per-entry median / entries - software - barrier - (lines - 1) * interval, medians of {it} interleaved per-entry/batched passes over dirty lines ({geo})"
                    )),
                    ns(f.interval_ns),
                    quote(&format!(
                        "measured: (batched median - per-entry median / entries) / (lines * (entries - 1)), medians of {it} interleaved passes over dirty lines ({geo})"
                    )),
                ));
            }
            None => {
                // Held equal to the measured clean-and-invalidate when there is one, else to
                // whatever was measured.
                let from = c
                    .runs
                    .iter()
                    .find(|r| r.instruction.op() == CacheOp::CleanInval)
                    .unwrap_or(first);
                let why = held_reason(meta.arch, op, from.instruction);
                let f = &from.fit;
                out.push_str(&format!(
                    "\n[cache.{}]   # held\n\
                     issue = {{ ns = {}, source = {} }}\n\
                     latency = {{ ns = {}, source = {} }}\n\
                     interval = {{ ns = {}, source = {} }}\n",
                    op.key(),
                    ns(f.issue_ns),
                    quote(&why),
                    ns(f.latency_ns),
                    quote(&why),
                    ns(f.interval_ns),
                    quote(&why),
                ));
            }
        }
    }
    let f = &first.fit;
    let geo1 = format!("{geo}, {}", first.instruction.name());
    out.push_str(&format!(
        "\n[barrier]\ncost = {{ ns = {}, source = {} }}\n",
        ns(f.barrier_ns),
        quote(&format!(
            "measured: median over {it} runs of back-to-back barriers with nothing outstanding, per barrier (the {} runs)",
            first.instruction.name()
        ))
    ));
    out.push_str(&format!(
        "\n[sw]\ndma_direct_sync_single = {{ ns = {}, source = {} }}\n",
        ns(f.sw_entry_ns),
        quote(&format!(
            "measured: median of {it} dry batched passes (instructions suppressed) per entry ({geo1}); the whole per-entry software path of dma_direct_sync_sg_for_device on this host, sg_next included"
        ))
    ));
    out.push_str(&format!(
        "sg_next = {{ ns = 0, source = {} }}\n\
         dma_direct_map_phys = {{ ns = {}, source = {} }}\n\
         dma_direct_unmap_phys = {{ ns = {}, source = {} }}\n\
         dma_api_call = {{ ns = 0, source = {} }}\n",
        quote("held: 0, because the measured dma_direct_sync_single already includes each entry's sg_next"),
        ns(f.sw_entry_ns),
        quote("held: the map path's per-entry software is not measured; assumed equal to the measured per-entry sync path (dma_direct_sync_single)"),
        ns(f.sw_entry_ns),
        quote("held: the unmap path's per-entry software is not measured; assumed equal to the measured per-entry sync path (dma_direct_sync_single)"),
        quote("held: 0, not measured (once per DMA API call, small beside the per-entry work)"),
    ));
    out
}

/// The calibration as a JSON document: what was measured, the fit, and the profile text.
pub fn json(c: &Calibration) -> serde_json::Value {
    serde_json::json!({
        "host": {
            "arch": c.meta.arch.name(),
            "cpu_model": c.meta.cpu_model,
            "cpu_freq_mhz": c.meta.cpu_freq_mhz,
            "cpu_freq_source": c.meta.cpu_freq_source,
            "line_bytes": c.meta.line_bytes,
            "line_source": c.meta.line_source,
        },
        "geometry": {
            "buffer_bytes": c.meta.buffer_bytes,
            "entry_bytes": c.meta.entry_bytes,
            "entries": c.geometry.entries,
            "lines_per_entry": c.geometry.lines_per_entry,
            "iterations": c.meta.iterations,
        },
        "runs": c.runs.iter().map(|r| serde_json::json!({
            "instruction": r.instruction.name(),
            "operation": r.instruction.op().key(),
            "measurements_ns": r.measurements,
            "fit_ns": r.fit,
        })).collect::<Vec<_>>(),
        "profile": render_profile(c),
    })
}

/// Runs of back-to-back barriers timed at once, so the clock's own cost is spread thin.
const BARRIERS_PER_RUN: u32 = 1000;

/// Lines in the one-line-plus-barrier cross-check, one per entry so each is a separate dirty line.
fn one_line_plus_barrier(bench: &mut Bench, entries: u64, entry: u64, op: CacheOp) -> f64 {
    let base = bench.host.base();
    for e in 0..entries {
        bench
            .host
            .touch(crate::types::PhysAddr(base.0 + e * entry), e as u8);
    }
    let t0 = Instant::now();
    for e in 0..entries {
        bench
            .host
            .cache_maint(op, crate::types::PhysAddr(base.0 + e * entry), 1);
        bench.host.barrier();
    }
    t0.elapsed().as_nanos() as f64 / entries as f64
}

/// Take every measurement the fit needs, for one instruction.
pub fn measure(
    opts: &CalibrateOpts,
    instruction: Instruction,
) -> Result<(Measurements, Geometry), HostError> {
    let hb = HostbenchOpts {
        buffer_bytes: opts.buffer_bytes,
        entry_bytes: opts.entry_bytes,
        iterations: opts.iterations,
        instruction,
    };
    let entries = validate(&hb)?;
    if entries < 2 {
        return Err(HostError(
            "--buffer must hold at least two entries: the fit compares one barrier per entry with one per list".into(),
        ));
    }
    let (line, _) = host_line_bytes();
    let g = Geometry {
        entries,
        lines_per_entry: opts.entry_bytes / line,
    };
    let mut bench = Bench::new(&hb)?;
    let it = opts.iterations;
    let [pe, b] = bench.sample(it);

    bench.host.set_dry(true);
    let dry: Vec<f64> = (0..it)
        .map(|_| bench.pass_with(Mode::Batched, false))
        .collect();
    bench.host.set_dry(false);

    // After a pass every line has been written back, so the next pass has nothing to write.
    let clean: Vec<f64> = (0..it)
        .map(|_| {
            bench.pass_with(Mode::Batched, false);
            bench.pass_with(Mode::Batched, false)
        })
        .collect();

    let barrier: Vec<f64> = (0..it)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..BARRIERS_PER_RUN {
                bench.host.barrier();
            }
            t0.elapsed().as_nanos() as f64 / f64::from(BARRIERS_PER_RUN)
        })
        .collect();

    let op = instruction.op();
    let one: Vec<f64> = (0..it)
        .map(|_| one_line_plus_barrier(&mut bench, entries, opts.entry_bytes, op))
        .collect();
    bench.check_clean()?;
    Ok((
        Measurements {
            per_entry_ns: median(&pe),
            batched_ns: median(&b),
            sw_entry_ns: median(&dry) / entries as f64,
            clean_pass_ns: median(&clean),
            barrier_ns: median(&barrier),
            one_line_ns: median(&one),
        },
        g,
    ))
}

/// The CPU's model name from /proc/cpuinfo, for the description.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Hardware"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string())
}

/// The CPU clock in MHz and how it was found.
fn cpu_freq() -> (f64, String) {
    #[cfg(target_arch = "x86_64")]
    {
        // The TSC ticks at the nominal clock on every CPU with constant_tsc; count its ticks over
        // a stretch of the monotonic clock.
        let t0 = Instant::now();
        // SAFETY: RDTSC only reads the time-stamp counter; every x86-64 CPU has it.
        let c0 = unsafe { std::arch::x86_64::_rdtsc() };
        while t0.elapsed().as_millis() < 50 {
            std::hint::spin_loop();
        }
        // SAFETY: as above.
        let c1 = unsafe { std::arch::x86_64::_rdtsc() };
        let ns = t0.elapsed().as_nanos() as f64;
        if ns > 0.0 && c1 > c0 {
            return (
                (c1 - c0) as f64 * 1000.0 / ns,
                "measured: TSC ticks over 50 ms of CLOCK_MONOTONIC (the nominal clock, assuming constant_tsc)".into(),
            );
        }
    }
    for path in [
        "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
        "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
    ] {
        if let Some(khz) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|k| *k > 0.0)
        {
            return (khz / 1000.0, format!("measured: read from {path} (kHz)"));
        }
    }
    (
        1000.0,
        "measured: not available on this host; placeholder (every cost in this profile is in ns, so unused)".into(),
    )
}

/// Measure this host on the given geometry: each instruction [`instructions_for`] picks.
pub fn measure_host(opts: &CalibrateOpts) -> Result<Calibration, HostError> {
    let arch = crate::hostbench::host_arch()
        .ok_or_else(|| HostError("calibrate runs on x86-64 and arm64 hosts only".into()))?;
    let insns = instructions_for(arch, opts.instruction, HostCaps::detect());
    if insns.is_empty() {
        return Err(HostError(
            "this CPU has no user-space cache maintenance instruction dmasim can measure".into(),
        ));
    }
    let mut runs = Vec::new();
    let mut geometry = None;
    for i in insns {
        let (m, g) = measure(opts, i)?;
        geometry = Some(g);
        runs.push(OpRun::new(i, m, g));
    }
    let (line_bytes, line_source) = host_line_bytes();
    let (cpu_freq_mhz, cpu_freq_source) = cpu_freq();
    let meta = ProfileMeta {
        arch: runs[0].instruction.arch(),
        cpu_model: cpu_model(),
        cpu_freq_mhz,
        cpu_freq_source,
        line_bytes,
        line_source: line_source.to_string(),
        buffer_bytes: opts.buffer_bytes,
        entry_bytes: opts.entry_bytes,
        iterations: opts.iterations,
    };
    Ok(Calibration {
        meta,
        geometry: geometry.unwrap_or(Geometry {
            entries: 0,
            lines_per_entry: 0,
        }),
        runs,
    })
}

/// Measure this host on the given geometry and return a profile TOML.
pub fn calibrate(opts: &CalibrateOpts) -> Result<String, HostError> {
    Ok(render_profile(&measure_host(opts)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostbench::{HostbenchOpts, predict};
    use crate::platform::Profile;

    fn meta() -> ProfileMeta {
        ProfileMeta {
            arch: Arch::X86_64,
            cpu_model: "Test \"CPU\"".into(),
            cpu_freq_mhz: 2000.0,
            cpu_freq_source: "measured: test".into(),
            line_bytes: 64,
            line_source: "test".into(),
            buffer_bytes: 40 * 4096,
            entry_bytes: 4096,
            iterations: 5,
        }
    }

    /// Measurements a Model with these parameters would produce, to check the fit inverts it.
    fn synthetic(g: Geometry, i: f64, l: f64, v: f64, b: f64, s: f64) -> Measurements {
        let n = g.lines_per_entry as f64;
        let nn = g.entries as f64;
        Measurements {
            per_entry_ns: nn * (s + l + (n - 1.0) * v + b),
            batched_ns: s + l + (nn * n - 1.0) * v + b,
            sw_entry_ns: s,
            clean_pass_ns: nn * (s + n * i),
            barrier_ns: b,
            one_line_ns: i + l + b,
        }
    }

    #[test]
    fn fit_inverts_the_model_equations() {
        let g = Geometry {
            entries: 40,
            lines_per_entry: 64,
        };
        let m = synthetic(g, 0.5, 150.0, 2.0, 10.0, 12.0);
        let f = fit(&m, g);
        assert!((f.issue_ns - 0.5).abs() < 1e-9, "{f:?}");
        assert!((f.latency_ns - 150.0).abs() < 1e-9, "{f:?}");
        assert!((f.interval_ns - 2.0).abs() < 1e-9, "{f:?}");
        assert!(!f.issue_bound && !f.latency_clamped);
    }

    #[test]
    fn fitted_profile_parses_and_reproduces_its_own_geometry() {
        let g = Geometry {
            entries: 40,
            lines_per_entry: 64,
        };
        let m = synthetic(g, 0.5, 150.0, 2.0, 10.0, 12.0);
        let c = Calibration {
            meta: meta(),
            geometry: g,
            runs: vec![OpRun::new(Instruction::Clflushopt, m, g)],
        };
        let text = render_profile(&c);
        let p = Profile::parse("calibrated.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        for info in p.params() {
            assert!(
                info.source.starts_with("measured: ") || info.source.starts_with("held: "),
                "{} has source `{}`",
                info.key,
                info.source
            );
        }
        assert!(
            p.params()
                .iter()
                .any(|i| i.key == "cache.clean_inval.interval")
        );
        let opts = HostbenchOpts {
            buffer_bytes: 40 * 4096,
            entry_bytes: 4096,
            iterations: 1,
            instruction: Instruction::Clflushopt,
        };
        let pred = predict(&p, &opts).unwrap();
        for (pm, want) in pred.modes.iter().zip([m.per_entry_ns, m.batched_ns]) {
            assert!((pm.predicted_ns - want).abs() < 1.0, "{pm:?} vs {want}");
        }
    }

    #[test]
    fn negative_latency_is_held_at_zero_and_said() {
        let g = Geometry {
            entries: 4,
            lines_per_entry: 64,
        };
        let mut m = synthetic(g, 0.5, 150.0, 2.0, 10.0, 12.0);
        m.per_entry_ns = 1.0;
        let f = fit(&m, g);
        assert_eq!(f.latency_ns, 0.0);
        let c = Calibration {
            meta: meta(),
            geometry: g,
            runs: vec![OpRun::new(Instruction::Clflushopt, m, g)],
        };
        assert!(render_profile(&c).contains("held at 0"));
        let w = warnings(&c);
        assert!(w.iter().any(|w| w.contains("held at 0")), "{w:?}");
        // A cross-check measured far from the Model's charge is named; one close to it is not.
        let mut c2 = c.clone();
        let f = c2.runs[0].fit;
        c2.runs[0].measurements.one_line_ns = (f.issue_ns + f.latency_ns + f.barrier_ns) * 2.0;
        assert!(
            warnings(&c2)
                .iter()
                .any(|w| w.contains("cross-check misses by -50.0 %"))
        );
        c2.runs[0].measurements.one_line_ns = (f.issue_ns + f.latency_ns + f.barrier_ns) * 1.05;
        assert!(!warnings(&c2).iter().any(|w| w.contains("cross-check")));
    }

    #[test]
    fn calibrate_on_this_host_writes_a_measured_profile() {
        let Some(instruction) = Instruction::default_for_host() else {
            crate::hw::host::skip_host_test(
                "this CPU has no user-space clean-and-invalidate instruction",
            );
            return;
        };
        let opts = CalibrateOpts {
            buffer_bytes: 64 * 4096,
            entry_bytes: 4096,
            iterations: 3,
            instruction: None,
        };
        let text = calibrate(&opts).unwrap();
        let p = Profile::parse("calibrated.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(Some(p.arch()), crate::hostbench::host_arch());
        assert!(p.model.maint(instruction.op()).is_some());
        assert!(
            p.params()
                .iter()
                .all(|i| i.source.starts_with("measured: ") || i.source.starts_with("held: "))
        );
    }

    #[test]
    fn calibrate_refuses_bad_options() {
        let base = CalibrateOpts {
            buffer_bytes: 4096,
            entry_bytes: 4096,
            iterations: 3,
            instruction: Instruction::default_for_host(),
        };
        let e = calibrate(&base).unwrap_err();
        assert!(
            e.0.contains("two entries") || e.0.starts_with("unsupported"),
            "{e}"
        );
        let e = calibrate(&CalibrateOpts {
            iterations: 0,
            ..base
        })
        .unwrap_err();
        assert!(
            e.0.contains("--iterations") || e.0.starts_with("unsupported"),
            "{e}"
        );
    }

    /// The measurements in `tests/data/calibrate-arm64.json` (the shape `calibrate --format json`
    /// prints; see its `provenance`), as a [`Calibration`] on an arm64 host.
    fn recorded_arm64() -> Calibration {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../tests/data/calibrate-arm64.json")).unwrap();
        let g: Geometry = serde_json::from_value(doc["geometry"].clone()).unwrap();
        let host = &doc["host"];
        let geo = &doc["geometry"];
        let runs = doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let i = Instruction::parse(r["instruction"].as_str().unwrap()).unwrap();
                let m: Measurements = serde_json::from_value(r["measurements_ns"].clone()).unwrap();
                OpRun::new(i, m, g)
            })
            .collect();
        Calibration {
            meta: ProfileMeta {
                arch: Arch::Arm64,
                cpu_model: host["cpu_model"].as_str().unwrap().into(),
                cpu_freq_mhz: host["cpu_freq_mhz"].as_f64().unwrap(),
                cpu_freq_source: host["cpu_freq_source"].as_str().unwrap().into(),
                line_bytes: host["line_bytes"].as_u64().unwrap(),
                line_source: host["line_source"].as_str().unwrap().into(),
                buffer_bytes: geo["buffer_bytes"].as_u64().unwrap(),
                entry_bytes: geo["entry_bytes"].as_u64().unwrap(),
                iterations: geo["iterations"].as_u64().unwrap() as u32,
            },
            geometry: g,
            runs,
        }
    }

    /// Run the shipped batched-sync scenario (map_sg + unmap_sg: DC CVAC, DC IVAC and DSB on
    /// arm64) on a profile text, under 7.0 and 7.1; its two mean times per call.
    fn run_batched_sync(text: &str, tag: &str) -> Vec<f64> {
        let dir = std::env::temp_dir().join(format!("dmasim-cal-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("host.toml");
        std::fs::write(&path, text).unwrap();
        let mut means = Vec::new();
        for k in ["7.0", "7.1"] {
            let mut s = crate::scenario::Scenario::load("batched-sync").unwrap();
            s.set_platform(&path.to_string_lossy()).unwrap();
            s.set_kernel_str(k).unwrap();
            let out = crate::scenario::execute(&s).unwrap_or_else(|e| panic!("{k}: {e}"));
            let j = out.json();
            means.push(j["calls"][0]["mean_ns"].as_f64().unwrap());
        }
        std::fs::remove_dir_all(&dir).unwrap();
        means
    }

    #[test]
    fn arm64_calibration_writes_every_section_an_arm64_run_needs() {
        let c = recorded_arm64();
        let text = render_profile(&c);
        let p = Profile::parse("arm64-host.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(p.arch(), Arch::Arm64);
        p.require_ops(
            &[CacheOp::Clean, CacheOp::Inval, CacheOp::CleanInval],
            "arm64 dma-direct",
        )
        .unwrap();
        let src = |k: &str| {
            p.params()
                .into_iter()
                .find(|i| i.key == k)
                .unwrap_or_else(|| panic!("no {k}"))
                .source
                .clone()
        };
        // Each measured instruction's own fit; DC IVAC held to DC CIVAC's, saying why.
        assert!(src("cache.clean.latency").starts_with("measured: "));
        assert!(src("cache.clean.latency").contains("dc-cvac"));
        assert!(src("cache.clean_inval.latency").contains("dc-civac"));
        assert!(
            src("cache.inval.latency").starts_with("held: DC IVAC is not permitted at EL0"),
            "{}",
            src("cache.inval.latency")
        );
        let civac = c.runs[0].fit;
        let cvac = c.runs[1].fit;
        assert!((civac.latency_ns - 70.0).abs() < 0.01, "{civac:?}");
        assert!((cvac.latency_ns - 65.0).abs() < 0.01, "{cvac:?}");
        let inval = p.model.maint(CacheOp::Inval).unwrap();
        let ci = p.model.maint(CacheOp::CleanInval).unwrap();
        assert_eq!(inval, ci);
        assert_ne!(p.model.maint(CacheOp::Clean).unwrap(), ci);
        // No software cost of the streaming path is left unpriced (so no warning either).
        let s = crate::scenario::Scenario::load("batched-sync").unwrap();
        assert!(
            p.unpriced_sw_warning(&s.sw_keys(), "batched-sync")
                .is_none()
        );
        // The profile runs as written, and 7.1's one DSB per list beats 7.0's one per entry.
        let means = run_batched_sync(&text, "arm64");
        assert!(means[1] < means[0], "{means:?}");
    }

    #[test]
    fn one_instruction_asked_for_holds_the_others_to_it() {
        let mut c = recorded_arm64();
        c.runs.remove(0); // only DC CVAC
        let text = render_profile(&c);
        let p = Profile::parse("cvac.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let ci = p
            .params()
            .into_iter()
            .find(|i| i.key == "cache.clean_inval.latency")
            .unwrap();
        assert!(
            ci.source.starts_with("held: not measured (only dc-cvac"),
            "{}",
            ci.source
        );
        assert_eq!(
            p.model.maint(CacheOp::CleanInval),
            p.model.maint(CacheOp::Clean)
        );
        run_batched_sync(&text, "cvac");
    }

    #[test]
    fn the_instructions_measured_follow_the_host() {
        let both = HostCaps {
            clean: true,
            clean_inval: true,
        };
        assert_eq!(
            instructions_for(Arch::Arm64, None, both),
            [Instruction::DcCivac, Instruction::DcCvac]
        );
        let no_clwb = HostCaps {
            clean: false,
            clean_inval: true,
        };
        assert_eq!(
            instructions_for(Arch::X86_64, None, no_clwb),
            [Instruction::Clflushopt]
        );
        assert_eq!(
            instructions_for(Arch::X86_64, Some(Instruction::Clwb), no_clwb),
            [Instruction::Clwb]
        );
    }
}
