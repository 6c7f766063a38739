//! `dmasim replay`: a driver's DMA API calls, read from a kernel trace, made again on the model
//! (the `replay` workload, docs/replay.md), with the device table given on the command line and
//! the trace's misuses checked as CONFIG_DMA_API_DEBUG would.
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use super::{apply_overrides, device_error, execute_and_print, with_device_sets};
use crate::cli::{Overrides, RunFormat};
use dmasim::scenario::{self, Outcome, Scenario};

/// `dmasim replay`'s arguments.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The trace: the text of /sys/kernel/tracing/trace or trace_pipe, of `trace-cmd report`,
    /// or of `perf script`, with the dma:* events (or a scenario of kind `replay`); `-` reads
    /// it from standard input.
    pub trace: String,
    #[command(flatten)]
    pub overrides: Overrides,
    /// A device's setup: NAME:key=value,... with coherent=yes|no, iommu=yes|no, granule=4K|16K|64K
    /// (its IOMMU domain's page size), bounce=yes|no, dma_mask_bits=N (repeatable). What is not
    /// given is inferred from the trace.
    #[arg(long = "device")]
    pub device: Vec<String>,
    /// Exit with status 4 when the trace shows a misuse of the DMA API (the findings are
    /// printed either way).
    #[arg(long)]
    pub check: bool,
    /// The trace covers the drivers' whole life: what is still mapped at its end is a leak (a
    /// misuse), not only live at the end of the window.
    #[arg(long)]
    pub strict_window: bool,
    /// Skip (and count) a line of a traced event that does not read, rather than stop there.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// Which CPUs replay the calls: `trace` (each CPU the trace names on the platform's CPU
    /// of that number, its calls at their timestamps) or `1` (every call on one CPU, in trace
    /// order). Default: the trace's.
    #[arg(long, value_parser = ["trace", "1"])]
    pub cpus: Option<String>,
    /// Most model steps the replay may take, 1 or more.
    #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_work: u64,
    #[arg(long, value_enum, default_value = "table")]
    pub format: RunFormat,
}

/// `--check` found misuses: exit status 4 (main.rs).
#[derive(Debug)]
pub struct Findings(pub u64);

impl std::fmt::Display for Findings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} misuse{} of the DMA API in the trace (--check)",
            self.0,
            if self.0 == 1 { "" } else { "s" }
        )
    }
}

impl std::error::Error for Findings {}

pub fn replay(args: ReplayArgs, out: &mut impl Write) -> Result<()> {
    let ReplayArgs {
        trace,
        mut overrides,
        device,
        check,
        strict_window,
        skip_bad_lines,
        cpus,
        max_work,
        format,
    } = args;
    let (file, mut text, dir) = Scenario::source(&trace)?;
    with_device_sets(&device, &mut overrides.set)?;
    if skip_bad_lines {
        let path = ["workload", "skip_bad_lines"];
        text = dmasim::input::set_path(&file, &text, &path, "true", "--skip-bad-lines")?;
    }
    if strict_window {
        let path = ["workload", "strict_window"];
        text = dmasim::input::set_path(&file, &text, &path, "true", "--strict-window")?;
    }
    if let Some(c) = cpus {
        let v = if c == "1" { "1" } else { "\"trace\"" };
        text = dmasim::input::set_path(&file, &text, &["workload", "cpus"], v, "--cpus")?;
    }
    if overrides.platform.len() > 1 || overrides.kernel.len() > 1 {
        return Err(arg_error(
            "several --kernel or --platform values: compare them with `dmasim compare TRACE --kernel A --kernel B`",
        )
        .into());
    }
    let mut s = Scenario::load_source_on(
        (file, text, dir),
        &overrides.set,
        overrides.platform.first().map(String::as_str),
    )
    .map_err(|e| device_error(e, &device))?;
    if s.workload.kind() != "replay" {
        return Err(arg_error(format!(
            "{trace} is a {} scenario, not a trace: run it with `dmasim run`",
            s.workload.kind()
        ))
        .into());
    }
    apply_overrides(&mut s, &overrides)?;
    warn_unpriced(&s.profile, &s.sw_keys(), &s.name);
    s.check_work(u128::from(max_work))?;
    let outcome = execute_and_print(&s, format, out)?;
    let misuses = match &outcome {
        Outcome::Replay(r) => r.findings.misuses(),
        _ => 0,
    };
    if check && misuses > 0 {
        out.flush()?;
        return Err(Findings(misuses).into());
    }
    Ok(())
}
