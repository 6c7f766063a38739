//! `dmasim map-benchmark`: the kernel's dma_map_benchmark, with the tool's options, run on the
//! model (the `map_benchmark` workload, docs/scenarios.md).
//!
//! Kernel counterpart: tools/dma/dma_map_benchmark.c, the user-space half of
//! kernel/dma/map_benchmark.c.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use super::{apply_overrides, print_run};
use crate::cli::{Overrides, RunFormat};
use dmasim::input::InputError;
use dmasim::scenario::{self, Scenario};

/// `dmasim map-benchmark`'s arguments: the kernel tool's, then the model's.
#[derive(clap::Args)]
pub struct MapBenchmarkArgs {
    /// Threads, one per CPU (-t, 1 to 1024).
    #[arg(short = 't', default_value_t = 1, allow_negative_numbers = true)]
    pub threads: i64,
    /// Modelled seconds to run for (-s, 1 to 300).
    #[arg(short = 's', default_value_t = 20, allow_negative_numbers = true)]
    pub seconds: i64,
    /// The node the threads run on, -1 for any (-n).
    #[arg(short = 'n', default_value_t = -1, allow_negative_numbers = true)]
    pub node: i64,
    /// Direction: 0 bidirectional, 1 to the device, 2 from it (-d).
    #[arg(short = 'd', default_value_t = 0, allow_negative_numbers = true)]
    pub dir: i64,
    /// Nanoseconds the device holds each mapping (-x, at most 10 ms).
    #[arg(short = 'x', default_value_t = 0, allow_negative_numbers = true)]
    pub dma_trans_ns: i64,
    /// The device's DMA mask, in bits (-b, 20 to 64).
    #[arg(short = 'b', default_value_t = 32, allow_negative_numbers = true)]
    pub bits: i64,
    /// Pages per mapping (-g, 1 to 1024); with -m 1, scatterlist entries of a page each.
    #[arg(short = 'g', default_value_t = 1, allow_negative_numbers = true)]
    pub granule: i64,
    /// Map mode (-m, 7.1 on): 0 one dma_map_single of the pages, 1 a dma_map_sg of a
    /// scatterlist with a page an entry. Before 7.1 the tool has no -m.
    #[arg(short = 'm', allow_negative_numbers = true)]
    pub mode: Option<i64>,
    #[command(flatten)]
    pub overrides: Overrides,
    /// The device sits behind the platform's IOMMU (iommu-dma, 4 KB pages, 48-bit IOVAs).
    #[arg(long)]
    pub iommu: bool,
    /// The device is cache-coherent (`dma-coherent`): no cache maintenance.
    #[arg(long)]
    pub coherent: bool,
    /// Run once per value of an option or scenario key: t=1,2,4,8 (any of the tool's
    /// options, or a dotted scenario key), with several --kernel or --platform values one curve
    /// each: per-call latency against the setting.
    #[arg(long)]
    pub sweep: Vec<String>,
    /// With --sweep: also write the scaling curve as an SVG (or HTML) plot.
    #[arg(long)]
    pub plot: Option<String>,
    /// Most model steps the run may take, 1 or more (each thread counted at a million pairs a
    /// modelled second; as for `run`).
    #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_work: u64,
    /// Rerun with each profile cost the run used at -10 % and +10 % and report the elasticity
    /// of the map and unmap latencies to each, ranked, with each cost's source kind (so the
    /// held costs an answer rests on are named). Each rerun is a whole run: use a short -s.
    #[arg(long)]
    pub sensitivity: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: RunFormat,
}

/// A sweep over one of the tool's options (`t=1,2,4`, `-t=1,2,4` after `--sweep=`) as a sweep of the scenario
/// key it sets; any other spec as given.
fn sweep_spec(spec: &str) -> String {
    let Some((key, values)) = spec.split_once('=') else {
        return spec.to_string();
    };
    let opt = format!("-{}", key.trim().trim_start_matches('-'));
    if opt == "-m" {
        // The tool's numbers as the scenario key's words; anything else is refused by the key.
        let words: Vec<&str> = values
            .split(',')
            .map(|v| mode_word(v.trim()).unwrap_or(v))
            .collect();
        return format!("workload.mode={}", words.join(","));
    }
    match [
        "workload.threads",
        "workload.seconds",
        "workload.node",
        "workload.direction",
        "workload.granule",
        "workload.dma_trans_ns",
        "device.dma_mask_bits",
    ]
    .into_iter()
    .find(|k| option_of(k) == Some(opt.as_str()))
    {
        Some(k) => format!("{k}={values}"),
        None => spec.to_string(),
    }
}

/// The scenario key's word for the tool's `-m` value.
fn mode_word(m: &str) -> Option<&'static str> {
    match m {
        "0" => Some("single"),
        "1" => Some("sg"),
        _ => None,
    }
}

/// The tool's options as values.
fn tool_options(a: &MapBenchmarkArgs) -> scenario::map_benchmark::ToolOptions {
    scenario::map_benchmark::ToolOptions {
        threads: a.threads,
        seconds: a.seconds,
        node: a.node,
        dir: a.dir,
        dma_trans_ns: a.dma_trans_ns,
        bits: a.bits,
        granule: a.granule,
        mode: a.mode,
    }
}

/// The options' ranges, as the kernel tool and the kernel module check them.
fn check_options(a: &MapBenchmarkArgs) -> Result<(), InputError> {
    tool_options(a)
        .check()
        .map_err(|m| InputError::new("<argument>", m))
}

/// The scenario the options describe.
fn scenario_text(a: &MapBenchmarkArgs, platform: &str, kernel: &str) -> String {
    tool_options(a).scenario_text(platform, kernel, a.iommu, a.coherent)
}

/// The option a scenario key came from, for messages about it.
fn option_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "workload.threads" => "-t",
        "workload.seconds" => "-s",
        "workload.node" => "-n",
        "workload.direction" => "-d",
        "workload.granule" => "-g",
        "workload.mode" => "-m",
        "workload.dma_trans_ns" => "-x",
        "device.dma_mask_bits" => "-b",
        _ => return None,
    })
}

pub fn map_benchmark(args: MapBenchmarkArgs, out: &mut impl Write) -> Result<()> {
    check_options(&args)?;
    let o = &args.overrides;
    if !args.sweep.is_empty() {
        if args.sensitivity {
            return Err(arg_error(
                "--sensitivity analyses one run: drop --sweep, or run --sensitivity at each setting",
            )
            .into());
        }
        let platform = o.platform.first().ok_or_else(|| {
            arg_error("--platform is required: the board to model (`dmasim platforms` lists the built-in ones)")
        })?;
        let text = scenario_text(&args, platform, &dmasim::policy::LATEST.to_string());
        let source = (
            "<map-benchmark>".to_string(),
            text,
            std::env::current_dir()?,
        );
        let specs: Vec<String> = args.sweep.iter().map(|s| sweep_spec(s)).collect();
        return super::run::run_sweeps(
            &source,
            o,
            &specs,
            args.plot.as_deref(),
            args.format,
            args.max_work,
            out,
        );
    }
    if args.plot.is_some() {
        return Err(arg_error("--plot draws a sweep: give --sweep, e.g. --sweep t=1,2,4,8").into());
    }
    if o.platform.len() > 1 || o.kernel.len() > 1 {
        return Err(arg_error(
            "several --kernel or --platform values: give --sweep (e.g. --sweep t=1,2,4) for one curve each, or compare them with `dmasim compare` on a map_benchmark scenario",
        )
        .into());
    }
    let platform = o
        .platform
        .first()
        .ok_or_else(|| arg_error("--platform is required: the board to model (`dmasim platforms` lists the built-in ones)"))?;
    // The release is set as `run --kernel` sets it, with its checks; the latest until then.
    let text = scenario_text(&args, platform, &dmasim::policy::LATEST.to_string());
    let named = |e: InputError| match e.key.as_deref().and_then(option_of) {
        Some(opt) => InputError::new("<argument>", format!("{opt}: {}", e.message)),
        None => e,
    };
    let dir = std::env::current_dir()?;
    let mut s = Scenario::load_source_on(
        ("<map-benchmark>".to_string(), text, dir),
        &o.set,
        Some(platform.as_str()),
    )
    .map_err(named)?;
    apply_overrides(&mut s, o).map_err(named)?;
    warn_unpriced(&s.profile, &s.sw_keys(), &s.name);
    if let scenario::Workload::MapBenchmark(w) = &s.workload
        && let Some(w) = scenario::map_benchmark::unpriced_memset(&s, w)
    {
        note(format_args!("warning: {w}"));
    }
    check_work(&s, args.max_work)?;
    if args.sensitivity {
        say_how_long(&s, true);
        return super::run_sensitivity(&s, args.format, out);
    }
    say_how_long(&s, false);
    print_run(&s, args.format, out)?;
    Ok(())
}

/// Before the run starts, how long it will take on this machine: its first modelled
/// millisecond is run and timed on its own ([`scenario::map_benchmark::trial`]) and carried
/// over to the whole run at the same rate, in pairs and in host time a pair. Under
/// `--sensitivity` the estimate is of each of its runs, whose number the base run decides.
fn say_how_long(s: &Scenario, sensitivity: bool) {
    if QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let scenario::Workload::MapBenchmark(w) = &s.workload else {
        return;
    };
    // A trial the modelled kernel refuses to set up says nothing: the run itself says why.
    let Ok(t) = scenario::map_benchmark::trial(s, w) else {
        return;
    };
    let which = if sensitivity {
        "each of --sensitivity's runs (the base run, then two for each cost it used)"
    } else {
        "this run"
    };
    info(format_args!(
        "note: {which} will take about {} of host time: its first {} modelled ms made {} map+unmap pairs in {:.3} s here, and the whole run makes about {}",
        host_time(t.host_estimate()),
        t.modelled_ps as f64 / 1e9,
        t.pairs,
        t.looped.as_secs_f64(),
        t.expected_pairs,
    ));
}

/// A host time as a person reads an estimate: seconds, then minutes, then hours and minutes.
fn host_time(d: std::time::Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 10.0 {
        format!("{secs:.1} s")
    } else if secs < 90.0 {
        format!("{secs:.0} s")
    } else if secs < 90.0 * 60.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        let m = (secs / 60.0).round() as u64;
        format!("{} h {} min", m / 60, m % 60)
    }
}

/// `run`'s refusal of a run estimated above `--max-work` steps, said in the tool's terms: how
/// the steps were counted and which options make the run smaller.
fn check_work(s: &Scenario, max_work: u64) -> Result<(), InputError> {
    if s.check_work(u128::from(max_work)).is_ok() {
        return Ok(());
    }
    let scenario::Workload::MapBenchmark(w) = &s.workload else {
        unreachable!("map-benchmark writes a map_benchmark scenario")
    };
    // What a person weighs: the host time, from the same trial the note before a run makes
    // (a few modelled ms, well under a second here).
    let here = scenario::map_benchmark::trial(s, w)
        .map(|t| format!(", about {} of host time here", host_time(t.host_estimate())))
        .unwrap_or_default();
    Err(arg_error(format!(
        "--max-work: this run would take about {} model steps ({} threads counted at {} map+unmap pairs each, {} steps a pair){here}; the limit is {max_work}: fewer threads (-t) or seconds (-s), or raise the limit with --max-work",
        s.work(),
        w.threads,
        w.loops_counted(),
        w.steps_per_pair(s),
    )))
}
