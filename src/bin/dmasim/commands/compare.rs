//! `dmasim compare`: one scenario under several variants, side by side.
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use super::{compare_error, device_error, with_device_sets, write_sensitivity};
use crate::cli::RunFormat;
use dmasim::scenario::{self, Scenario};

/// `dmasim compare`'s arguments.
#[derive(clap::Args)]
pub struct CompareArgs {
    /// The scenario: a TOML file (see docs/scenarios.md) or a shipped scenario's name (see
    /// `dmasim scenarios`).
    pub scenario: String,
    /// A kernel release to compare (repeat: --kernel 7.0 --kernel 7.1); one beside --variant is
    /// each variant's that names none.
    #[arg(long)]
    pub kernel: Vec<String>,
    /// A platform to compare (repeat; with several --kernel, every combination runs); one
    /// beside --variant is each variant's that names none.
    #[arg(long)]
    pub platform: Vec<String>,
    /// One variant as key=value pairs, e.g. kernel=7.1,sync=per-entry,workload.entry=16K
    /// (repeat; kernel and platform pick those, a dotted key sets a scenario key as --set
    /// does, any other key is a policy).
    #[arg(long)]
    pub variant: Vec<String>,
    /// A policy override applied to every variant: key=value (repeatable).
    #[arg(long = "policy")]
    pub policy: Vec<String>,
    /// Set any scenario key for every variant: KEY=VALUE (repeatable), as for `run`.
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// A traced device's setup for every variant: NAME:key=value,... as for `dmasim replay
    /// --device` (repeatable).
    #[arg(long = "device")]
    pub device: Vec<String>,
    /// The variant the others are measured against: its letter in the table (A, B, ...),
    /// its number (1, 2, ...) or its label (e.g. "kernel 7.1"); default: the first.
    #[arg(long)]
    pub baseline: Option<String>,
    /// Most model steps each variant's run may take.
    #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_work: u64,
    /// Rerun every variant with each profile cost the runs used at -10 % and +10 % and
    /// report the elasticity of each call's means and of its change against the first
    /// variant (absolute and %), ranked, with each parameter's source kind.
    #[arg(long)]
    pub sensitivity: bool,
    /// Also write the comparison's pictures: each call's time per variant and each
    /// variant's time by call stack, as an SVG, or with a `.html` name as a self-contained
    /// HTML page with the tables.
    #[arg(long)]
    pub plot: Option<String>,
    /// table, json, or folded: the two variants' matched stacks as one differential folded
    /// file (`stack A B`, for flamegraph.pl).
    #[arg(long, value_enum, default_value = "table")]
    pub format: RunFormat,
}

pub fn compare(args: CompareArgs, out: &mut impl Write) -> Result<()> {
    let CompareArgs {
        scenario,
        kernel,
        platform,
        variant,
        policy,
        mut set,
        device,
        baseline,
        max_work,
        sensitivity,
        plot,
        format,
    } = args;
    if sensitivity && plot.is_some() {
        return Err(
            arg_error("--plot draws the comparison itself: give it without --sensitivity").into(),
        );
    }
    let mut variants = dmasim::compare::variants_from(&variant, &platform, &kernel)?;
    if let Some(b) = &baseline {
        dmasim::compare::put_baseline_first(&mut variants, b)?;
    }
    // The settings are read on the first variant's platform (each variant then applies
    // its own and is checked there), so a --set that fits the compared platforms and not
    // the file's is accepted.
    let first = variants.iter().find_map(|v| v.platform.as_deref());
    with_device_sets(&device, &mut set)?;
    let mut s = Scenario::load_on(&scenario, &set, first).map_err(|e| device_error(e, &device))?;
    for p in &policy {
        s.set_policies(p)?;
    }
    // Each variant is checked for its size before any runs, as `run` does, and each
    // platform's unpriced costs are said once.
    let mut warned = std::collections::BTreeSet::new();
    for v in &variants {
        let mut t = s.clone();
        v.apply(&mut t)?;
        t.check_work(u128::from(max_work))?;
        if warned.insert(t.profile.origin.clone()) {
            warn_unpriced(&t.profile, &t.sw_keys(), &t.name);
        }
    }
    if sensitivity {
        let r = with_progress(None, |p| dmasim::sensitivity::analyse(&s, &variants, p));
        let r = r.map_err(compare_error)?;
        return write_sensitivity(out, &r, format);
    }
    let total = s.progress_total().saturating_mul(variants.len() as u64);
    let c = with_progress(Some(total), |p| dmasim::compare::compare(&s, &variants, p));
    let c = c.map_err(compare_error)?;
    if let Some(path) = &plot {
        let doc = if is_html(path) {
            dmasim::compare::html(&c)
        } else {
            dmasim::plot::document(&dmasim::compare::charts(&c))
        };
        write_plot(path, &doc)?;
    }
    match format {
        RunFormat::Table => write!(out, "{}", dmasim::compare::table(&c))?,
        RunFormat::Json => print_json(out, &dmasim::compare::json(&c))?,
        RunFormat::Folded => write!(out, "{}", dmasim::compare::folded_pair(&c)?)?,
    }
    Ok(())
}
