//! The `dmasim` command line.
//!
//! Kernel counterpart: none — this is the user's door to the model and the host measurements.
//!
//! Exit status (also in docs/output.md):
//!
//! | status | meaning |
//! |--------|---------|
//! | 0  | success; also when the reader of standard output goes away early (`dmasim ... \| head`): what it read is all it wanted, so that is not a failure |
//! | 1  | the tool could not finish for a reason that is not the input: an I/O error writing the output, a serialisation failure |
//! | 2  | bad input: a profile, scenario or argument (one message naming the file, line and key; clap's usage errors exit 2 too), or a host measurement that cannot run as asked on this machine ([`HostError`]: an option out of range for it, an instruction its CPU lacks) |
//! | 3  | the modelled kernel refused to set the machine up (a swiotlb pool that does not fit, a receive ring that cannot be mapped), so there is no result; calls it refuses *during* a run are part of the result and exit 0 |
//! | 4  | `dmasim replay --check`: the trace shows a misuse of the DMA API (the report, findings included, is printed first) |
//! | 70 | a bug in dmasim: a panic, caught (`EX_SOFTWARE` from sysexits.h); an integer overflow is one, as release builds check for it |
//!
//! A [`HostError`] is classed with bad input rather than as an environment failure because it is
//! always found before anything is measured and always means the request must change (another
//! size, another instruction) to run here; retrying the same command never helps.
//!
//! Invariants: everything goes to standard output through one lock with `write!`, never `print!`,
//! because `print!` panics when the pipe is closed; a broken pipe ends the program quietly with
//! status 0; no other failure is silent.

mod cli;
mod commands;
mod ui;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Cmd};
use dmasim::hostbench::HostError;
use dmasim::input::InputError;
use dmasim::scenario;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use ui::{QUIET, check_plot, note};

/// `EX_SOFTWARE` (sysexits.h): an internal software error.
const EXIT_PANIC: u8 = 70;

fn main() -> ExitCode {
    let cli = Cli::parse();
    QUIET.store(cli.quiet, Ordering::Relaxed);
    // The default hook has already printed the panic message and location by the time the
    // unwind is caught; the closing line only says what the status means.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut out = io::stdout().lock();
        real_main(cli, &mut out)?;
        // The lock's line buffer may hold a tail; a broken pipe there must be seen, not dropped
        // at exit.
        out.flush()?;
        Ok(())
    }));
    let result: Result<()> = match run {
        Ok(r) => r,
        Err(_) => {
            note(format_args!(
                "error: internal error (a bug in dmasim); exit status {EXIT_PANIC}"
            ));
            return ExitCode::from(EXIT_PANIC);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(ie) = e.downcast_ref::<InputError>() {
                note(format_args!("error: {ie}"));
                ExitCode::from(2)
            } else if let Some(he) = e.downcast_ref::<HostError>() {
                note(format_args!("error: {he}"));
                ExitCode::from(2)
            } else if let Some(f) = e.downcast_ref::<commands::replay::Findings>() {
                note(format_args!("error: {f}"));
                ExitCode::from(4)
            } else if let Some(r) = e.downcast_ref::<scenario::Refused>() {
                note(format_args!("error: {r}"));
                ExitCode::from(3)
            } else if let Some(io) = e.downcast_ref::<io::Error>() {
                // Every file dmasim reads or writes reports as an InputError naming it; a bare
                // I/O error is the write of the results.
                note(format_args!("error: cannot write standard output: {io}"));
                ExitCode::from(1)
            } else {
                note(format_args!("error: {e:#}"));
                ExitCode::from(1)
            }
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn real_main(cli: Cli, out: &mut impl Write) -> Result<()> {
    match &cli.cmd {
        Cmd::Run(a) => check_plot(a.plot.as_ref())?,
        Cmd::Compare(a) => check_plot(a.plot.as_ref())?,
        Cmd::Reproduce(a) => check_plot(a.plot.as_ref())?,
        _ => {}
    }
    match cli.cmd {
        Cmd::Platforms(a) => commands::list::platforms(a, out),
        Cmd::Scenarios(a) => commands::list::scenarios(a, out),
        Cmd::Policies(a) => commands::list::policies(a, out),
        Cmd::Costs(a) => commands::list::costs(a, out),
        Cmd::Run(a) => commands::run::run(a, out),
        Cmd::Compare(a) => commands::compare::compare(a, out),
        Cmd::Replay(a) => commands::replay::replay(a, out),
        Cmd::MapBenchmark(a) => commands::map_benchmark::map_benchmark(a, out),
        Cmd::Hostbench(a) => commands::host::hostbench(a, out),
        Cmd::Calibrate(a) => commands::host::calibrate(a, out),
        Cmd::Reproduce(a) => commands::reproduce::reproduce(a, out),
    }
}
