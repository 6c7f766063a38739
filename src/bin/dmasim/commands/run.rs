//! `dmasim run`: one scenario on the model, or a sweep of it (`--sweep`), or the sensitivity of
//! its calls to each cost (`--sensitivity`).
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use super::{
    apply_overrides, compare_error, device_error, execute_and_print, run_sensitivity,
    with_device_sets,
};
use crate::cli::{Overrides, RunFormat};
use dmasim::scenario::{self, Scenario};

/// `dmasim run`'s arguments.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The scenario: a TOML file (see docs/scenarios.md) or a shipped scenario's name (see
    /// `dmasim scenarios`).
    pub scenario: String,
    #[command(flatten)]
    pub overrides: Overrides,
    /// A traced device's setup (a trace, or a `replay` scenario): NAME:key=value,... as for
    /// `dmasim replay --device` (repeatable).
    #[arg(long = "device")]
    pub device: Vec<String>,
    /// Most model steps the run may take, 1 or more (the estimate is printed when it is large).
    #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_work: u64,
    /// Run once per value of a scenario key: KEY=V1,V2,... (one or two keys), each call's
    /// time per value and per --kernel/--platform given.
    #[arg(long)]
    pub sweep: Vec<String>,
    /// With --sweep: also write an SVG plot of each call's time against the swept value.
    #[arg(long)]
    pub plot: Option<String>,
    /// Rerun with each profile cost the run used at -10 % and +10 % and report, per call,
    /// the elasticity of its mean time to each, ranked, with each parameter's source kind.
    #[arg(long)]
    pub sensitivity: bool,
    #[arg(long, value_enum, default_value = "table")]
    pub format: RunFormat,
}

pub fn run(args: RunArgs, out: &mut impl Write) -> Result<()> {
    let RunArgs {
        scenario,
        mut overrides,
        device,
        max_work,
        sweep,
        plot,
        sensitivity,
        format,
    } = args;
    with_device_sets(&device, &mut overrides.set)?;
    if !sweep.is_empty() {
        if sensitivity {
            return Err(arg_error(
                "--sensitivity analyses one run or one comparison: drop --sweep, or run --sensitivity at each value with --set",
            )
            .into());
        }
        let source = Scenario::source(&scenario)?;
        run_sweeps(
            &source,
            &overrides,
            &sweep,
            plot.as_deref(),
            format,
            max_work,
            out,
        )?;
    } else {
        if plot.is_some() {
            return Err(arg_error("--plot draws a sweep: give --sweep KEY=V1,V2,...").into());
        }
        if overrides.platform.len() > 1 {
            return Err(arg_error(
                "several --platform values: put them side by side with `dmasim compare`, or give --sweep",
            )
            .into());
        }
        // The platform first, then the settings, then the checks.
        let mut s = Scenario::load_on(
            &scenario,
            &overrides.set,
            overrides.platform.first().map(String::as_str),
        )
        .map_err(|e| device_error(e, &device))?;
        apply_overrides(&mut s, &overrides)?;
        warn_unpriced(&s.profile, &s.sw_keys(), &s.name);
        s.check_work(u128::from(max_work))?;
        if sensitivity {
            return run_sensitivity(&s, format, out);
        }
        execute_and_print(&s, format, out)?;
    }
    Ok(())
}

/// `--sweep` (and `--plot`) over a scenario's text: one run per setting and per
/// --kernel/--platform given, each call's time per setting, as a table or JSON.
pub(super) fn run_sweeps(
    source: &(String, String, std::path::PathBuf),
    overrides: &crate::cli::Overrides,
    sweep: &[String],
    plot: Option<&str>,
    format: RunFormat,
    max_work: u64,
    out: &mut impl Write,
) -> Result<()> {
    let sweeps = dmasim::sweep::sweeps_from(sweep)?;
    let variants = if overrides.kernel.len() > 1 || overrides.platform.len() > 1 {
        dmasim::compare::variants_from(&[], &overrides.platform, &overrides.kernel)?
    } else {
        // One curve: the scenario as written, or under the one release/platform given.
        vec![dmasim::compare::Variant {
            platform: overrides.platform.first().cloned(),
            kernel: overrides.kernel.first().cloned(),
            policies: Vec::new(),
            sets: Vec::new(),
        }]
    };
    if format == RunFormat::Folded {
        return Err(arg_error("--format folded applies to a single run or to `compare`").into());
    }
    let warned = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let check = |t: &Scenario| {
        if warned.borrow_mut().insert(t.profile.origin.clone()) {
            warn_unpriced(&t.profile, &t.sw_keys(), &t.name);
        }
        t.check_work(u128::from(max_work))
    };
    let r = with_progress(None, |p| {
        dmasim::sweep::run_source(
            source,
            &overrides.set,
            &overrides.policy,
            &sweeps,
            &variants,
            &check,
            p,
        )
    });
    let r = r.map_err(compare_error)?;
    if let Some(path) = plot {
        let doc = if is_html(path) {
            dmasim::sweep::html(&r)
        } else {
            dmasim::plot::svg(&dmasim::sweep::charts(&r))
        };
        write_plot(path, &doc)?;
    }
    match format {
        RunFormat::Json => print_json(out, &dmasim::sweep::json(&r))?,
        _ => write!(out, "{}", dmasim::sweep::table(&r))?,
    }
    Ok(())
}
