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
//! | 70 | a bug in dmasim: a panic, caught (`EX_SOFTWARE` from sysexits.h) |
//!
//! A [`HostError`] is classed with bad input rather than as an environment failure because it is
//! always found before anything is measured and always means the request must change (another
//! size, another instruction) to run here; retrying the same command never helps.
//!
//! Invariants: everything goes to standard output through one lock with `write!`, never `print!`,
//! because `print!` panics when the pipe is closed; a broken pipe ends the program quietly with
//! status 0; no other failure is silent.

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use dmasim::hostbench::{HostError, HostbenchOpts, Instruction};
use dmasim::input::InputError;
use dmasim::platform::{self, Profile};
use dmasim::policy::KernelVersion;
use dmasim::reproduce;
use dmasim::scenario::{self, Scenario};
use std::io::{self, Write};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "dmasim",
    version,
    about = "An executable model of the Linux DMA-mapping stack"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Table,
    Json,
    /// Folded stacks for flame-graph tools (`run` only).
    Folded,
}

#[derive(clap::Args)]
struct Overrides {
    /// Platform profile: a built-in name (see `dmasim platforms`) or a profile file.
    #[arg(long)]
    platform: Option<String>,
    /// Kernel release whose policies to use, e.g. 7.0 or 7.1.
    #[arg(long)]
    kernel: Option<String>,
    /// Override a policy: key=value (repeatable, or comma separated), e.g. sync=batched.
    #[arg(long = "policy")]
    policy: Vec<String>,
}

#[derive(clap::Args)]
struct HostGeometry {
    /// Buffer size (bytes, or with K/M/G).
    #[arg(long, default_value = "10M", value_parser = size_arg)]
    buffer: u64,
    /// Scatter-gather entry size.
    #[arg(long, default_value = "4K", value_parser = size_arg)]
    entry: u64,
    /// Passes per mode.
    #[arg(long, default_value_t = 50)]
    iterations: u32,
    /// clflushopt | clwb (x86-64), dc-cvac | dc-civac (arm64); default: the host's clean-and-invalidate.
    #[arg(long)]
    instruction: Option<String>,
}

fn size_arg(s: &str) -> Result<u64, String> {
    dmasim::input::parse_size(s).ok_or_else(|| format!("not a size: `{s}` (try 4096, 4K, 10M)"))
}

impl HostGeometry {
    fn instruction(&self) -> Result<Instruction, InputError> {
        match &self.instruction {
            Some(n) => Instruction::parse(n).ok_or_else(|| arg_error(format!("--instruction: `{n}` is not one of clflushopt, clwb, dc-cvac, dc-civac"))),
            None => Instruction::default_for_host()
                .ok_or_else(|| arg_error("this CPU has no user-space cache clean-and-invalidate instruction dmasim can measure")),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// List the built-in platform profiles.
    Platforms,
    /// Run a scenario file on the model.
    Run {
        /// The scenario (TOML; see docs/scenarios.md).
        scenario: String,
        #[command(flatten)]
        overrides: Overrides,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Measure per-entry vs batched cache maintenance on this machine's real caches.
    Hostbench {
        #[command(flatten)]
        geometry: HostGeometry,
        /// Also predict the medians from a profile (e.g. one written by `dmasim calibrate`).
        #[arg(long)]
        platform: Option<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Fit a profile to this machine from host measurements and write it as TOML.
    Calibrate {
        #[command(flatten)]
        geometry: HostGeometry,
        /// Write the profile here instead of standard output.
        #[arg(long, short)]
        output: Option<String>,
    },
    /// Recreate published experiments: published vs model, row by row.
    Reproduce {
        /// One experiment (default: all). `--list` shows them.
        experiment: Option<String>,
        #[arg(long)]
        list: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
}

/// `EX_SOFTWARE` (sysexits.h): an internal software error.
const EXIT_PANIC: u8 = 70;

fn main() -> ExitCode {
    let cli = Cli::parse();
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

/// A line on standard error. `eprintln!` would panic if stderr were a closed pipe; a message that
/// cannot be shown has nowhere else to go, so it is dropped.
fn note(msg: std::fmt::Arguments) {
    let _ = writeln!(io::stderr(), "{msg}");
}

fn arg_error(msg: impl Into<String>) -> InputError {
    InputError::new("<argument>", msg)
}

fn print_json(out: &mut impl Write, v: &serde_json::Value) -> Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(v)?)?;
    Ok(())
}

fn apply_overrides(s: &mut Scenario, o: &Overrides) -> Result<(), InputError> {
    if let Some(p) = &o.platform {
        s.profile = Profile::load(p)?;
    }
    if let Some(k) = &o.kernel {
        let v = KernelVersion::parse(k).ok_or_else(|| {
            arg_error(format!(
                "--kernel: expected a release such as 7.1, found `{k}`"
            ))
        })?;
        s.policies = dmasim::policy::Policies::preset(v);
    }
    for p in &o.policy {
        s.policies
            .apply(p)
            .map_err(|m| arg_error(format!("--policy: {m}")))?;
    }
    s.check_profile()
}

/// Whether a scenario file holds an IOMMU workload (`iommu_sweep`, `iommu_ops`); an unreadable
/// file is left to the streaming loader, which reports it.
fn is_iommu_file(path: &str) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| scenario::iommu::is_iommu_scenario(&t))
}

fn run_iommu(out: &mut impl Write, path: &str, o: &Overrides, format: Format) -> Result<()> {
    let mut s = scenario::iommu::IommuScenario::load(path)?;
    if let Some(p) = &o.platform {
        s.profile = Profile::load(p)?;
    }
    if let Some(k) = &o.kernel {
        let v = KernelVersion::parse(k).ok_or_else(|| {
            arg_error(format!(
                "--kernel: expected a release such as 5.15, found `{k}`"
            ))
        })?;
        s.policies = dmasim::policy::Policies::preset(v);
    }
    for p in &o.policy {
        s.policies
            .apply(p)
            .map_err(|m| arg_error(format!("--policy: {m}")))?;
    }
    s.check_profile()?;
    let r = scenario::iommu::run(&s).map_err(|e| InputError::new(path, e))?;
    match format {
        Format::Table => write!(out, "{}", dmasim::report::iommu_run_table(&r))?,
        Format::Json => print_json(out, &dmasim::report::iommu_run_json(&r))?,
        Format::Folded => write!(out, "{}", dmasim::report::iommu_run_folded(&r))?,
    }
    Ok(())
}

fn real_main(cli: Cli, out: &mut impl Write) -> Result<()> {
    match cli.cmd {
        Cmd::Platforms => {
            for (name, desc) in platform::builtin_list() {
                writeln!(out, "{name:<16} {desc}")?;
            }
        }
        Cmd::Run {
            scenario,
            overrides,
            format,
        } => {
            if is_iommu_file(&scenario) {
                return run_iommu(out, &scenario, &overrides, format);
            }
            let mut s = Scenario::load(&scenario)?;
            apply_overrides(&mut s, &overrides)?;
            let outcome =
                scenario::execute(&s).map_err(|e| InputError::new(&scenario, e.to_string()))?;
            use dmasim::report;
            use scenario::Outcome;
            match (format, &outcome) {
                (Format::Table, Outcome::Streaming(r)) => write!(out, "{}", report::run_table(r))?,
                (Format::Json, Outcome::Streaming(r)) => print_json(out, &report::run_json(r))?,
                (Format::Folded, Outcome::Streaming(r)) => {
                    write!(out, "{}", report::run_folded(r))?
                }
                (Format::Table, Outcome::Forwarding(r)) => {
                    write!(out, "{}", report::forwarding_table(r))?
                }
                (Format::Json, Outcome::Forwarding(r)) => {
                    print_json(out, &report::forwarding_json(r))?
                }
                (Format::Folded, Outcome::Forwarding(r)) => {
                    write!(out, "{}", report::folded(&r.stacks))?
                }
                (Format::Table, Outcome::Bounce(r)) => write!(out, "{}", report::bounce_table(r))?,
                (Format::Json, Outcome::Bounce(r)) => print_json(out, &report::bounce_json(r))?,
                (Format::Folded, Outcome::Bounce(r)) => {
                    write!(out, "{}", report::folded(&r.stacks))?
                }
            }
        }
        Cmd::Hostbench {
            geometry,
            platform,
            format,
        } => {
            let opts = HostbenchOpts {
                buffer_bytes: geometry.buffer,
                entry_bytes: geometry.entry,
                iterations: geometry.iterations,
                instruction: geometry.instruction()?,
            };
            let profile = platform.as_deref().map(Profile::load).transpose()?;
            let r = dmasim::hostbench::run_with_model(&opts, profile.as_ref())?;
            match format {
                Format::Table => write!(out, "{}", dmasim::hostbench::render_table(&r))?,
                Format::Folded => {
                    return Err(arg_error("--format folded applies to `run` only").into());
                }
                Format::Json => print_json(out, &serde_json::to_value(&r)?)?,
            }
        }
        Cmd::Calibrate { geometry, output } => {
            let opts = dmasim::calibrate::CalibrateOpts {
                buffer_bytes: geometry.buffer,
                entry_bytes: geometry.entry,
                iterations: geometry.iterations,
                instruction: geometry.instruction()?,
            };
            let text = dmasim::calibrate::calibrate(&opts)?;
            match output {
                Some(path) => {
                    std::fs::write(&path, text).map_err(|e| {
                        InputError::new(&path, format!("cannot write profile: {e}"))
                    })?;
                    note(format_args!("wrote {path}"));
                }
                None => write!(out, "{text}")?,
            }
        }
        Cmd::Reproduce {
            experiment,
            list,
            format,
        } => {
            if list {
                for e in reproduce::EXPERIMENTS {
                    writeln!(out, "{:<16} {}", e.name, e.summary)?;
                }
                return Ok(());
            }
            let chosen: Vec<&reproduce::Experiment> = match &experiment {
                Some(n) => vec![reproduce::find(n)?],
                None => reproduce::EXPERIMENTS.iter().collect(),
            };
            let mut reports = Vec::new();
            for e in chosen {
                reports.push((e.run)()?);
            }
            if format == Format::Folded {
                return Err(arg_error("--format folded applies to `run` only").into());
            }
            match format {
                Format::Folded => unreachable!("refused above"),
                Format::Table => {
                    let tables: Vec<String> = reports.iter().map(reproduce::render_table).collect();
                    write!(out, "{}", tables.join("\n"))?;
                }
                Format::Json => {
                    let v = if reports.len() == 1 {
                        serde_json::to_value(&reports[0])?
                    } else {
                        serde_json::json!({ "experiments": reports })
                    };
                    print_json(out, &v)?;
                }
            }
        }
    }
    Ok(())
}
