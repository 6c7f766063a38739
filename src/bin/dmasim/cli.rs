//! The command line as clap reads it: the commands, their shared option groups and the output
//! formats each accepts (clap refuses a format a command does not write).
//!
//! Kernel counterpart: none.

use crate::commands::{
    compare::CompareArgs,
    host::{CalibrateArgs, HostbenchArgs},
    list::{CostsArgs, PlatformsArgs, PoliciesArgs, ScenariosArgs},
    reproduce::ReproduceArgs,
    run::RunArgs,
};
use crate::ui::arg_error;
use clap::{Parser, Subcommand, ValueEnum};
use dmasim::hostbench::Instruction;
use dmasim::input::InputError;

#[derive(Parser)]
#[command(
    name = "dmasim",
    version,
    about = "An executable model of the Linux DMA-mapping stack"
)]
pub struct Cli {
    /// Quiet: no progress bar and no informational notes on standard error (warnings and errors
    /// still show).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// What a listing or a measurement writes.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum ListFormat {
    Table,
    Json,
}

/// What a run or a comparison writes.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum RunFormat {
    Table,
    Json,
    /// Folded stacks for flame-graph tools (`run`, and `compare` of two variants).
    Folded,
}

#[derive(clap::Args)]
pub struct Overrides {
    /// Platform profile: a built-in name (see `dmasim platforms`) or a profile file. Several
    /// (repeated) with --sweep make one curve each.
    #[arg(long)]
    pub platform: Vec<String>,
    /// Kernel release whose policies to use, e.g. 7.0 or 7.1. Several (repeated) with --sweep make
    /// one curve each; without it, see `dmasim compare`.
    #[arg(long)]
    pub kernel: Vec<String>,
    /// Override a policy: key=value (repeatable, or comma separated), e.g. sync=batched.
    #[arg(long = "policy")]
    pub policy: Vec<String>,
    /// Set any scenario key before it is read: KEY=VALUE with a dotted key, e.g.
    /// workload.entry=64K or workload.iterations=10 (repeatable).
    #[arg(long = "set")]
    pub set: Vec<String>,
}

#[derive(clap::Args)]
pub struct HostGeometry {
    /// Buffer size (bytes, or with K/M/G).
    #[arg(long, default_value = "10M", value_parser = size_arg)]
    pub buffer: u64,
    /// Scatter-gather entry size.
    #[arg(long, default_value = "4K", value_parser = size_arg)]
    pub entry: u64,
    /// Passes per mode.
    #[arg(long, default_value_t = 50)]
    pub iterations: u32,
    /// clflushopt | clwb (x86-64), dc-cvac | dc-civac (arm64); default: the host's clean-and-invalidate.
    #[arg(long)]
    pub instruction: Option<String>,
}

fn size_arg(s: &str) -> Result<u64, String> {
    dmasim::input::parse_size(s).ok_or_else(|| format!("not a size: `{s}` (try 4096, 4K, 10M)"))
}

impl HostGeometry {
    pub fn instruction(&self) -> Result<Instruction, InputError> {
        match &self.instruction {
            Some(n) => Instruction::parse(n).ok_or_else(|| arg_error(format!("--instruction: `{n}` is not one of clflushopt, clwb, dc-cvac, dc-civac"))),
            None => Instruction::default_for_host()
                .ok_or_else(|| arg_error("this CPU has no user-space cache clean-and-invalidate instruction dmasim can measure")),
        }
    }
}

#[derive(Subcommand)]
pub enum Cmd {
    /// List the built-in platform profiles, or every parameter of one (NAME) with its value,
    /// unit, kind and source.
    Platforms(PlatformsArgs),
    /// List the shipped scenarios, runnable by name from any directory (`dmasim run batched-sync`).
    Scenarios(ScenariosArgs),
    /// List every kernel policy: its choices, what it does, and its preset per release.
    Policies(PoliciesArgs),
    /// List every named software cost the model charges: the `[sw]` keys a profile may price.
    Costs(CostsArgs),
    /// Run a scenario file on the model.
    Run(RunArgs),
    /// Run one scenario under several variants and show them side by side: per call, per
    /// operation and per call stack, each change against the first variant.
    Compare(CompareArgs),
    /// Replay a driver's DMA API calls from a kernel trace on the model, and check them as
    /// CONFIG_DMA_API_DEBUG would.
    Replay(crate::commands::replay::ReplayArgs),
    /// The kernel's dma_map_benchmark on the model: its options (-t -s -n -d -x -b -g), its
    /// output lines, then where the time went.
    MapBenchmark(crate::commands::map_benchmark::MapBenchmarkArgs),
    /// Measure per-entry vs batched cache maintenance on this machine's real caches.
    Hostbench(HostbenchArgs),
    /// Fit a profile to this machine from host measurements and write it as TOML: every
    /// maintenance instruction user space can issue is measured (one with --instruction), and
    /// what cannot be is held with its reason.
    Calibrate(CalibrateArgs),
    /// Fit a base profile's costs to a board's own measurements (dma_map_benchmark's output,
    /// function_graph durations) and write the fitted profile: which costs the rows determine,
    /// how well, and each row's residual.
    Fit(crate::commands::fit::FitArgs),
    /// Recreate published experiments: published vs model, row by row.
    Reproduce(ReproduceArgs),
}
