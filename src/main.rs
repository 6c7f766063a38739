//! The `dmasim` command line.
//!
//! Exit status: 0 on success, 2 for bad input (a profile, scenario or argument; the message names
//! the file, line and key), 1 for anything else.

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use dmasim::input::InputError;
use dmasim::platform::{self, Profile};
use dmasim::policy::KernelVersion;
use dmasim::reproduce;
use dmasim::scenario::{self, Scenario};
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(ie) = e.downcast_ref::<InputError>() {
                eprintln!("error: {ie}");
                ExitCode::from(2)
            } else {
                eprintln!("error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}

fn arg_error(msg: impl Into<String>) -> InputError {
    InputError::new("<argument>", msg)
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
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

fn real_main(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Platforms => {
            for (name, desc) in platform::builtin_list() {
                println!("{name:<16} {desc}");
            }
        }
        Cmd::Run {
            scenario,
            overrides,
            format,
        } => {
            let mut s = Scenario::load(&scenario)?;
            apply_overrides(&mut s, &overrides)?;
            let r = scenario::run(&s).map_err(|e| InputError::new(&scenario, e.to_string()))?;
            match format {
                Format::Table => print!("{}", dmasim::report::run_table(&r)),
                Format::Json => print_json(&dmasim::report::run_json(&r))?,
            }
        }
        Cmd::Reproduce {
            experiment,
            list,
            format,
        } => {
            if list {
                for e in reproduce::EXPERIMENTS {
                    println!("{:<16} {}", e.name, e.summary);
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
            match format {
                Format::Table => {
                    let tables: Vec<String> = reports.iter().map(reproduce::render_table).collect();
                    print!("{}", tables.join("\n"));
                }
                Format::Json => {
                    let v = if reports.len() == 1 {
                        serde_json::to_value(&reports[0])?
                    } else {
                        serde_json::json!({ "experiments": reports })
                    };
                    print_json(&v)?;
                }
            }
        }
    }
    Ok(())
}
