//! One module per command, each with its arguments and its body, as cargo's `commands/`.
//!
//! Kernel counterpart: none.

pub mod compare;
pub mod fit;
pub mod host;
pub mod list;
pub mod map_benchmark;
pub mod replay;
pub mod reproduce;
pub mod run;

use crate::cli::{Overrides, RunFormat};
use crate::ui::*;
use anyhow::Result;
use dmasim::input::InputError;
use dmasim::scenario::{self, Scenario};
use std::io::Write;

/// A comparison's failure as the command reports it (a failed variant is named), as the type
/// main's exit status reads.
pub(crate) fn compare_error(e: dmasim::compare::CompareError) -> anyhow::Error {
    match e {
        dmasim::compare::CompareError::Input(i) => anyhow::Error::from(i),
        dmasim::compare::CompareError::Refused(r) => anyhow::Error::from(r),
        dmasim::compare::CompareError::Internal(b) => anyhow::Error::from(b),
    }
}

/// A run's failure as the command reports it, as the type main's exit status reads.
pub(crate) fn run_error(e: scenario::RunError) -> anyhow::Error {
    match e {
        scenario::RunError::Refused(r) => anyhow::Error::from(r),
        scenario::RunError::Input(i) => anyhow::Error::from(i),
        scenario::RunError::Internal(b) => anyhow::Error::from(b),
    }
}

pub(crate) fn write_sensitivity(
    out: &mut impl Write,
    r: &dmasim::sensitivity::Sensitivity,
    format: RunFormat,
) -> Result<()> {
    match format {
        RunFormat::Table => write!(out, "{}", dmasim::sensitivity::table(r))?,
        RunFormat::Json => print_json(out, &dmasim::sensitivity::json(r))?,
        RunFormat::Folded => {
            return Err(arg_error(
                "--format folded writes call stacks; --sensitivity writes a table or JSON",
            )
            .into());
        }
    }
    Ok(())
}

/// `--sensitivity` of one run as written: the base run, then two per cost it used, with a
/// progress display that counts runs (their number is known only after the base run).
pub(crate) fn run_sensitivity(s: &Scenario, format: RunFormat, out: &mut impl Write) -> Result<()> {
    let r = with_progress(None, |p| {
        dmasim::sensitivity::analyse(s, &[dmasim::compare::Variant::default()], p)
    });
    let r = r.map_err(compare_error)?;
    write_sensitivity(out, &r, format)
}

/// `--device NAME:key=value,...` arguments as the `--set` edits they stand for, put before
/// the command line's own `--set` (which then wins).
pub(crate) fn with_device_sets(
    devices: &[String],
    sets: &mut Vec<String>,
) -> Result<(), InputError> {
    let mut all = Vec::new();
    for d in devices {
        all.extend(scenario::replay::device_sets(d)?);
    }
    all.append(sets);
    *sets = all;
    Ok(())
}

/// An error reading a scenario that `--device` edits: one about the devices' table names
/// the argument (a device the trace does not name, a scenario that is no trace).
pub(crate) fn device_error(e: InputError, devices: &[String]) -> InputError {
    match e.key.as_deref() {
        Some(k) if k.starts_with("workload.devices") && !devices.is_empty() => {
            InputError::new("<argument>", format!("--device: {}", e.message))
        }
        _ => e,
    }
}

/// `--kernel` and `--policy` on a scenario that [`Scenario::load_on`] has already put on the
/// `--platform` (with the `--set` edits).
pub(crate) fn apply_overrides(s: &mut Scenario, o: &Overrides) -> Result<(), InputError> {
    if o.platform.len() > 1 || o.kernel.len() > 1 {
        return Err(arg_error(
            "several --kernel or --platform values: put them side by side with `dmasim compare`, or give --sweep",
        ));
    }
    if let Some(k) = o.kernel.first() {
        s.set_kernel_str(k)?;
    }
    for p in &o.policy {
        s.set_policies(p)?;
    }
    Ok(())
}

/// Run a checked scenario on the model (a note first when it is long, a progress bar past a
/// second) and print its result in `format`: the body of `run` and `replay`.
pub(crate) fn execute_and_print(
    s: &Scenario,
    format: RunFormat,
    out: &mut impl Write,
) -> Result<scenario::Outcome> {
    if s.work() > scenario::WARN_WORK {
        info(format_args!(
            "note: about {} model steps: this run may take a while",
            s.work()
        ));
    }
    print_run(s, format, out)
}

/// Run a checked scenario on the model (a progress bar past a second) and print its result in
/// `format`, with no note first: for a command that says itself what the run will take.
pub(crate) fn print_run(
    s: &Scenario,
    format: RunFormat,
    out: &mut impl Write,
) -> Result<scenario::Outcome> {
    let outcome = with_progress(Some(s.progress_total()), |p| scenario::execute_with(s, p));
    let outcome = outcome.map_err(run_error)?;
    match format {
        RunFormat::Table => write!(out, "{}", outcome.table())?,
        RunFormat::Json => print_json(out, &outcome.json())?,
        RunFormat::Folded => write!(out, "{}", dmasim::report::folded(outcome.stacks()))?,
    }
    Ok(outcome)
}
