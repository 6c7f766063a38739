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
//! Invariants: every parameter written carries `source = "measured: ..."` naming geometry,
//! iterations and statistic; the output is a profile [`crate::platform::Profile::parse`] accepts;
//! no measured figure is built into the code.

use crate::hostbench::{Bench, HostError, HostbenchOpts, Instruction, Mode, median, validate};
use crate::hw::host::host_line_bytes;
use crate::hw::{CacheOp, Hw};
use crate::platform::Arch;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalibrateOpts {
    pub buffer_bytes: u64,
    pub entry_bytes: u64,
    pub iterations: u32,
    pub instruction: Instruction,
}

/// Raw host measurements, all in nanoseconds (medians).
#[derive(Clone, Copy, Debug, PartialEq)]
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
#[derive(Clone, Copy, Debug, PartialEq)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    pub instruction: Instruction,
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

/// The profile TOML for a fit.
pub fn render_profile(meta: &ProfileMeta, m: &Measurements, f: &Fit, g: Geometry) -> String {
    let geo = format!(
        "{} B buffer as {} entries of {} B ({} lines each), {}",
        meta.buffer_bytes, g.entries, meta.entry_bytes, g.lines_per_entry, meta.instruction
    );
    let it = meta.iterations;
    let section = match meta.instruction.op() {
        CacheOp::Clean => "clean",
        CacheOp::Inval => "inval",
        CacheOp::CleanInval => "clean_inval",
    };
    let insn = meta
        .instruction
        .name()
        .to_ascii_uppercase()
        .replace('-', " ");
    let mut out = String::new();
    out.push_str(&format!(
        "# This host, calibrated by `dmasim calibrate` on one entry size only: {geo}, {it} iterations.\n\
         # Raw medians (ns): per-entry pass {}, batched pass {}, dry (software-only) pass per entry {},\n\
         # batched pass with nothing to write back {}, barrier alone {}, one dirty line + barrier {}.\n\
         # The Model charges one dirty line + barrier as issue + latency + barrier = {} ns (cross-check).\n",
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
            "# NOTE: issue-bound host (issue > interval): the Model paces completions by issue here.\n",
        );
    }
    if f.latency_clamped {
        out.push_str("# NOTE: the latency fit came out negative (noise) and is held at 0.\n");
    }
    out.push_str(&format!(
        "\n[platform]\nname = \"host\"\ndescription = {}\narch = \"{}\"\ncpu_freq_mhz = {{ value = {:.1}, source = {} }}\n",
        quote(&format!(
            "this host ({}), calibrated with {}",
            meta.cpu_model, meta.instruction
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
    out.push_str(&format!(
        "\n[cache.{section}]   # {insn}\n\
         issue = {{ ns = {}, source = {} }}\n\
         latency = {{ ns = {}, source = {} }}\n\
         interval = {{ ns = {}, source = {} }}\n",
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
    out.push_str(&format!(
        "\n[barrier]\ncost = {{ ns = {}, source = {} }}\n",
        ns(f.barrier_ns),
        quote(&format!(
            "measured: median over {it} runs of back-to-back barriers with nothing outstanding, per barrier"
        ))
    ));
    out.push_str(&format!(
        "\n[sw]\ndma_direct_sync_single = {{ ns = {}, source = {} }}\n",
        ns(f.sw_entry_ns),
        quote(&format!(
            "measured: median of {it} dry batched passes (instructions suppressed) per entry ({geo}); the whole per-entry software path of dma_direct_sync_sg_for_device on this host, sg_next included"
        ))
    ));
    out
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

/// Take every measurement the fit needs.
pub fn measure(opts: &CalibrateOpts) -> Result<(Measurements, Geometry), HostError> {
    let hb = HostbenchOpts {
        buffer_bytes: opts.buffer_bytes,
        entry_bytes: opts.entry_bytes,
        iterations: opts.iterations,
        instruction: opts.instruction,
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

    let op = opts.instruction.op();
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

/// Measure this host on the given geometry and return a profile TOML.
pub fn calibrate(opts: &CalibrateOpts) -> Result<String, HostError> {
    let (m, g) = measure(opts)?;
    let f = fit(&m, g);
    let (line_bytes, line_source) = host_line_bytes();
    let (cpu_freq_mhz, cpu_freq_source) = cpu_freq();
    let meta = ProfileMeta {
        arch: opts.instruction.arch(),
        cpu_model: cpu_model(),
        cpu_freq_mhz,
        cpu_freq_source,
        line_bytes,
        line_source: line_source.to_string(),
        instruction: opts.instruction,
        buffer_bytes: opts.buffer_bytes,
        entry_bytes: opts.entry_bytes,
        iterations: opts.iterations,
    };
    Ok(render_profile(&meta, &m, &f, g))
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
            instruction: Instruction::Clflushopt,
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
        let text = render_profile(&meta(), &m, &fit(&m, g), g);
        let p = Profile::parse("calibrated.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        for info in p.params() {
            assert!(
                info.source.starts_with("measured: "),
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
        assert!(render_profile(&meta(), &m, &f, g).contains("held at 0"));
    }

    #[test]
    fn calibrate_on_this_host_writes_a_measured_profile() {
        let Some(instruction) = Instruction::default_for_host() else {
            eprintln!("skipping: this CPU has no user-space clean-and-invalidate instruction");
            return;
        };
        let opts = CalibrateOpts {
            buffer_bytes: 64 * 4096,
            entry_bytes: 4096,
            iterations: 3,
            instruction,
        };
        let text = calibrate(&opts).unwrap();
        let p = Profile::parse("calibrated.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(Some(p.arch()), crate::hostbench::host_arch());
        assert!(p.model.maint(instruction.op()).is_some());
        assert!(
            p.params()
                .iter()
                .all(|i| i.source.starts_with("measured: "))
        );
    }

    #[test]
    fn calibrate_refuses_bad_options() {
        let base = CalibrateOpts {
            buffer_bytes: 4096,
            entry_bytes: 4096,
            iterations: 3,
            instruction: Instruction::default_for_host().unwrap_or(Instruction::Clflushopt),
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
}
