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
//! | 3  | the modelled kernel refused to set the machine up ([`dmasim::scenario::Refused`]: a swiotlb pool that does not fit, a receive ring that cannot be mapped), so there is no result; calls it refuses *during* a run are part of the result and exit 0 |
//! | 4  | `dmasim replay --check`: the trace shows a misuse of the DMA API (the report, findings included, is printed first) |
//! | 70 | a bug in dmasim (`EX_SOFTWARE` from sysexits.h): a panic, caught (an integer overflow is one, as release builds check for it), or a failure the model finds in itself ([`dmasim::scenario::Internal`]: a deadlock of the many-CPU engine, every CPU waiting for another) |
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
    match result.err().and_then(|e| failure(&e)) {
        None => ExitCode::SUCCESS,
        Some((status, line)) => {
            note(format_args!("{line}"));
            ExitCode::from(status)
        }
    }
}

/// A failure's exit status (the table above) and the line standard error says of it; `None` for
/// a broken pipe, which is not a failure.
fn failure(e: &anyhow::Error) -> Option<(u8, String)> {
    if is_broken_pipe(e) {
        return None;
    }
    Some(if let Some(ie) = e.downcast_ref::<InputError>() {
        (2, format!("error: {ie}"))
    } else if let Some(he) = e.downcast_ref::<HostError>() {
        (2, format!("error: {he}"))
    } else if let Some(f) = e.downcast_ref::<commands::replay::Findings>() {
        (4, format!("error: {f}"))
    } else if let Some(r) = e.downcast_ref::<scenario::Refused>() {
        (3, format!("error: {r}"))
    } else if let Some(b) = e.downcast_ref::<scenario::Internal>() {
        // Found by the model rather than by a panic: no panic message above says where, so
        // the line names the scenario and what went wrong.
        (EXIT_PANIC, format!("error: {b}"))
    } else if let Some(io) = e.downcast_ref::<io::Error>() {
        // Every file dmasim reads or writes reports as an InputError naming it; a bare I/O
        // error is the write of the results.
        (1, format!("error: cannot write standard output: {io}"))
    } else {
        (1, format!("error: {e:#}"))
    })
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
        Cmd::Fit(a) => commands::fit::fit(a, out),
        Cmd::Reproduce(a) => commands::reproduce::reproduce(a, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dmasim::compare::CompareError;
    use dmasim::mm::physmem::PhysMemError;
    use dmasim::scenario::RunFailure;
    use dmasim::setup::SetupError;
    use dmasim::smp::Deadlock;

    /// A deadlock of the many-CPU engine (which no scenario can provoke on purpose) is a bug in
    /// dmasim: it exits as a caught panic does, not as the modelled kernel's refusal, from a
    /// run and from a compared variant alike.
    #[test]
    fn an_engine_deadlock_exits_70() {
        let deadlock = || RunFailure::from(Deadlock(vec![0, 1])).in_file("s.toml");
        let (status, line) = failure(&commands::run_error(deadlock())).unwrap();
        assert_eq!(status, EXIT_PANIC);
        assert_eq!(
            line,
            "error: s.toml: internal error (a bug in dmasim): every CPU still running waits for a lock: CPUs [0, 1]"
        );
        let variant = CompareError::of_variant("workload.cpus=2".into(), deadlock());
        let (status, line) = failure(&commands::compare_error(variant)).unwrap();
        assert_eq!(status, EXIT_PANIC);
        assert!(
            line.contains("variant `workload.cpus=2`: every CPU"),
            "{line}"
        );
    }

    /// What the modelled kernel refuses at setup exits 3, naming the file and the cause.
    #[test]
    fn a_setup_refusal_exits_3() {
        let refused = RunFailure::from(SetupError::Buffer(PhysMemError::NoSuchNode(1)));
        let (status, line) = failure(&commands::run_error(refused.in_file("s.toml"))).unwrap();
        assert_eq!(status, 3);
        assert_eq!(
            line,
            "error: s.toml: the modelled kernel refused: buffer allocation: no node 1"
        );
    }
}
