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
//! | 70 | a bug in dmasim: a panic, caught (`EX_SOFTWARE` from sysexits.h); an integer overflow is one, as release builds check for it |
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
use dmasim::hw::sw_costs::{REGISTRY, SwCostDecl};
use dmasim::input::InputError;
use dmasim::platform::{self, Profile};
use dmasim::reproduce;
use dmasim::scenario::{self, Scenario};
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Parser)]
#[command(
    name = "dmasim",
    version,
    about = "An executable model of the Linux DMA-mapping stack"
)]
struct Cli {
    /// Quiet: no progress bar and no informational notes on standard error (warnings and errors
    /// still show).
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

/// Set once from `-q` before anything runs; read where a note or the progress bar would show.
static QUIET: AtomicBool = AtomicBool::new(false);

/// An informational line on standard error, unless `-q`.
fn info(msg: std::fmt::Arguments) {
    if !QUIET.load(Ordering::Relaxed) {
        note(msg);
    }
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Table,
    Json,
    /// Folded stacks for flame-graph tools (`run`, and `compare` of two variants).
    Folded,
}

#[derive(clap::Args)]
struct Overrides {
    /// Platform profile: a built-in name (see `dmasim platforms`) or a profile file. Several
    /// (repeated) with --sweep make one curve each.
    #[arg(long)]
    platform: Vec<String>,
    /// Kernel release whose policies to use, e.g. 7.0 or 7.1. Several (repeated) with --sweep make
    /// one curve each; without it, see `dmasim compare`.
    #[arg(long)]
    kernel: Vec<String>,
    /// Override a policy: key=value (repeatable, or comma separated), e.g. sync=batched.
    #[arg(long = "policy")]
    policy: Vec<String>,
    /// Set any scenario key before it is read: KEY=VALUE with a dotted key, e.g.
    /// workload.entry=64K or workload.iterations=10 (repeatable).
    #[arg(long = "set")]
    set: Vec<String>,
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
    Platforms {
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List the shipped scenarios, runnable by name from any directory (`dmasim run batched-sync`).
    Scenarios {
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List every kernel policy: its choices, what it does, and its preset per release.
    Policies {
        /// Show the presets this platform gets (they can depend on its hardware).
        #[arg(long, default_value = "sm8150")]
        platform: String,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// List every named software cost the model charges: the `[sw]` keys a profile may price.
    Costs {
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Run a scenario file on the model.
    Run {
        /// The scenario: a TOML file (see docs/scenarios.md) or a shipped scenario's name (see
        /// `dmasim scenarios`).
        scenario: String,
        #[command(flatten)]
        overrides: Overrides,
        /// Most model steps the run may take, 1 or more (the estimate is printed when it is large).
        #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_work: u64,
        /// Run once per value of a scenario key: KEY=V1,V2,... (one or two keys), each call's
        /// time per value and per --kernel/--platform given.
        #[arg(long)]
        sweep: Vec<String>,
        /// With --sweep: also write an SVG plot of each call's time against the swept value.
        #[arg(long)]
        plot: Option<String>,
        /// Rerun with each profile cost the run used at -10 % and +10 % and report, per call,
        /// the elasticity of its mean time to each, ranked, with each parameter's source kind.
        #[arg(long)]
        sensitivity: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Run one scenario under several variants and show them side by side: per call, per
    /// operation and per call stack, each change against the first variant.
    Compare {
        /// The scenario: a TOML file (see docs/scenarios.md) or a shipped scenario's name (see
        /// `dmasim scenarios`).
        scenario: String,
        /// A kernel release to compare (repeat: --kernel 7.0 --kernel 7.1).
        #[arg(long)]
        kernel: Vec<String>,
        /// A platform to compare (repeat; with several --kernel, every combination runs).
        #[arg(long)]
        platform: Vec<String>,
        /// One variant as key=value pairs, e.g. kernel=7.1,sync=per-entry,workload.entry=16K
        /// (repeat; kernel and platform pick those, a dotted key sets a scenario key as --set
        /// does, any other key is a policy).
        #[arg(long)]
        variant: Vec<String>,
        /// A policy override applied to every variant: key=value (repeatable).
        #[arg(long = "policy")]
        policy: Vec<String>,
        /// Set any scenario key for every variant: KEY=VALUE (repeatable), as for `run`.
        #[arg(long = "set")]
        set: Vec<String>,
        /// The variant the others are measured against: its letter in the table (A, B, ...),
        /// its number (1, 2, ...) or its label (e.g. "kernel 7.1"); default: the first.
        #[arg(long)]
        baseline: Option<String>,
        /// Most model steps each variant's run may take.
        #[arg(long, default_value_t = scenario::DEFAULT_MAX_WORK as u64,
              value_parser = clap::value_parser!(u64).range(1..))]
        max_work: u64,
        /// Rerun every variant with each profile cost the runs used at -10 % and +10 % and
        /// report the elasticity of each call's means and of its change against the first
        /// variant (absolute and %), ranked, with each parameter's source kind.
        #[arg(long)]
        sensitivity: bool,
        /// Also write the comparison's pictures: each call's time per variant and each
        /// variant's time by call stack, as an SVG, or with a `.html` name as a self-contained
        /// HTML page with the tables.
        #[arg(long)]
        plot: Option<String>,
        /// table, json, or folded: the two variants' matched stacks as one differential folded
        /// file (`stack A B`, for flamegraph.pl).
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
    /// Fit a profile to this machine from host measurements and write it as TOML: every
    /// maintenance instruction user space can issue is measured (one with --instruction), and
    /// what cannot be is held with its reason.
    Calibrate {
        #[command(flatten)]
        geometry: HostGeometry,
        /// Write the profile here instead of standard output.
        #[arg(long, short)]
        output: Option<String>,
        /// table: the profile (TOML); json: a document with the measurements, the fit and the
        /// profile text.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Recreate published experiments: published vs model, row by row.
    Reproduce {
        /// One experiment (default: all). `--list` shows them.
        experiment: Option<String>,
        #[arg(long)]
        list: bool,
        /// Also write a report of published vs model per row with the error: with a `.html`
        /// name a self-contained HTML page (plots and tables), otherwise an SVG of the plots.
        #[arg(long)]
        plot: Option<String>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
}

/// A progress bar on standard error for a long run, drawn by a thread of its own that reads the
/// run's counter (a clone of the [`scenario::Progress`] handle the run counts on) a few times a
/// second: the run itself only counts its
/// outer steps, and nothing it computes or prints depends on the bar. The bar appears only once
/// the run has taken [`Progress::DELAY`] of wall time, so a quick run draws nothing whatever its
/// size estimate said; only when standard error is a terminal and `-q` is not given; and it is
/// cleared when the run ends, so no output byte changes.
struct Progress {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    const POLL: std::time::Duration = std::time::Duration::from_millis(200);
    /// "A run of more than a second shows progress."
    const DELAY: std::time::Duration = std::time::Duration::from_secs(1);

    /// A bar counting `total` outer steps (the scenario's `progress_total`), or, for work whose
    /// total is not known up front (a sweep), a spinner counting steps done. `None` when no bar
    /// may be drawn.
    fn start(total: Option<u64>, counter: &scenario::Progress) -> Option<Progress> {
        if !io::stderr().is_terminal() || QUIET.load(Ordering::Relaxed) {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let counter = counter.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let began = std::time::Instant::now();
            while began.elapsed() < Self::DELAY {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::park_timeout(Self::DELAY.saturating_sub(began.elapsed()));
            }
            let bar = indicatif::ProgressBar::with_draw_target(
                total,
                indicatif::ProgressDrawTarget::stderr(),
            )
            .with_elapsed(began.elapsed());
            let template = if total.is_some() {
                "{elapsed_precise} [{bar:40}] {pos}/{len} (about {eta} left)"
            } else {
                "{elapsed_precise} {spinner} {pos} steps done"
            };
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            while !flag.load(Ordering::Relaxed) {
                let done = counter.done();
                bar.set_position(total.map_or(done, |t| done.min(t)));
                bar.tick();
                std::thread::park_timeout(Self::POLL);
            }
            bar.finish_and_clear();
        });
        Some(Progress { stop, thread })
    }

    /// Clear the bar (if it was drawn) before anything else is written.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// Runs `work` with a [`Progress`] display over it (for a known `total` of outer steps, or a
/// step counter when `None`), cleared before the caller writes anything.
fn with_progress<T>(total: Option<u64>, work: impl FnOnce(&scenario::Progress) -> T) -> T {
    let counter = scenario::Progress::new();
    let bar = Progress::start(total, &counter);
    let r = work(&counter);
    if let Some(bar) = bar {
        bar.finish();
    }
    r
}

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

/// A line on standard error. `eprintln!` would panic if stderr were a closed pipe; a message that
/// cannot be shown has nowhere else to go, so it is dropped.
fn note(msg: std::fmt::Arguments) {
    let _ = writeln!(io::stderr(), "{msg}");
}

fn arg_error(msg: impl Into<String>) -> InputError {
    InputError::new("<argument>", msg)
}

/// Every JSON document leads with its `format_version` (docs/output.md).
fn print_json(out: &mut impl Write, v: &serde_json::Value) -> Result<()> {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut()
        && !o.contains_key("format_version")
    {
        o.insert(
            "format_version".into(),
            dmasim::report::FORMAT_VERSION.into(),
        );
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

/// A missing `[sw]` cost is charged as 0, which is a legitimate choice for a profile (the cost
/// may be folded into another) but must not pass unseen: say so on standard error.
fn warn_unpriced(p: &Profile, keys: &[dmasim::hw::SwKey], scenario: &str) {
    if let Some(w) = p.unpriced_sw_warning(keys, &format!("scenario `{scenario}`")) {
        note(format_args!("warning: {w}"));
    }
}

/// Whether a `--plot` path asks for an HTML page rather than an SVG.
fn is_html(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".html") || p.ends_with(".htm")
}

fn write_plot(path: &str, doc: &str) -> Result<(), InputError> {
    std::fs::write(path, doc)
        .map_err(|e| InputError::new(path, format!("cannot write plot: {e}")))?;
    info(format_args!("wrote {path}"));
    Ok(())
}

/// A comparison's failure as the command reports it: a refused variant is named.
fn compare_error(e: dmasim::compare::CompareError) -> anyhow::Error {
    match e {
        dmasim::compare::CompareError::Input(i) => anyhow::Error::from(i),
        dmasim::compare::CompareError::Refused { label, refused } => {
            anyhow::Error::from(scenario::Refused {
                file: refused.file,
                message: format!("variant `{label}`: {}", refused.message),
            })
        }
    }
}

fn write_sensitivity(
    out: &mut impl Write,
    r: &dmasim::sensitivity::Sensitivity,
    format: Format,
) -> Result<()> {
    match format {
        Format::Table => write!(out, "{}", dmasim::sensitivity::table(r))?,
        Format::Json => print_json(out, &dmasim::sensitivity::json(r))?,
        Format::Folded => {
            return Err(arg_error(
                "--format folded writes call stacks; --sensitivity writes a table or JSON",
            )
            .into());
        }
    }
    Ok(())
}

/// `--kernel` and `--policy` on a scenario that [`Scenario::load_on`] has already put on the
/// `--platform` (with the `--set` edits).
fn apply_overrides(s: &mut Scenario, o: &Overrides) -> Result<(), InputError> {
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

/// The software-cost registry as a table: one row per `[sw]` key.
fn costs_table() -> String {
    let modules = |d: &SwCostDecl| -> String {
        d.layers
            .iter()
            .map(|l| l.module())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kw = REGISTRY.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let fw = REGISTRY.iter().map(|d| d.function.len()).max().unwrap_or(0);
    let mw = REGISTRY.iter().map(|d| modules(d).len()).max().unwrap_or(0);
    let mut out = format!(
        "{:<kw$}  {:<fw$}  {:<mw$}  DESCRIPTION\n",
        "KEY ([sw])", "KERNEL FUNCTION", "MODULES"
    );
    for d in REGISTRY {
        out.push_str(&format!(
            "{:<kw$}  {:<fw$}  {:<mw$}  {}\n",
            d.name,
            d.function,
            modules(d),
            d.description
        ));
    }
    out
}

fn costs_json() -> serde_json::Value {
    let costs: Vec<serde_json::Value> = REGISTRY
        .iter()
        .map(|d| {
            serde_json::json!({
                "key": d.name,
                "function": d.function,
                "layers": d.layers.iter().map(|l| l.name()).collect::<Vec<_>>(),
                "modules": d.layers.iter().map(|l| l.module()).collect::<Vec<_>>(),
                "description": d.description,
            })
        })
        .collect();
    serde_json::json!({ "sw_costs": costs })
}

/// A `--plot` path must name a format dmasim writes: SVG, or a self-contained HTML page.
/// Checked before anything runs, so a `.png` is refused rather than given SVG bytes.
fn check_plot(plot: Option<&String>) -> Result<(), InputError> {
    let Some(path) = plot else {
        return Ok(());
    };
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".svg") || is_html(path) {
        return Ok(());
    }
    let ext = std::path::Path::new(path).extension().map_or_else(
        || "no extension".to_string(),
        |e| format!("`.{}`", e.to_string_lossy()),
    );
    Err(arg_error(format!(
        "--plot {path}: {ext} is not a format dmasim writes; it writes SVG (.svg) or a self-contained HTML page (.html, .htm): convert the SVG to PNG with a tool such as rsvg-convert"
    )))
}

fn real_main(cli: Cli, out: &mut impl Write) -> Result<()> {
    match &cli.cmd {
        Cmd::Run { plot, .. } | Cmd::Compare { plot, .. } | Cmd::Reproduce { plot, .. } => {
            check_plot(plot.as_ref())?
        }
        _ => {}
    }
    match cli.cmd {
        Cmd::Platforms { format } => match format {
            Format::Table => {
                for (name, desc) in platform::builtin_list() {
                    writeln!(out, "{name:<16} {desc}")?;
                }
            }
            Format::Json => {
                let list: Vec<serde_json::Value> = platform::builtin_list()
                    .into_iter()
                    .map(|(name, desc)| serde_json::json!({ "name": name, "description": desc }))
                    .collect();
                print_json(out, &serde_json::json!({ "platforms": list }))?;
            }
            Format::Folded => {
                return Err(
                    arg_error("--format folded applies to `run` and `compare` only").into(),
                );
            }
        },
        Cmd::Scenarios { format } => {
            let list = scenario::builtin_list();
            match format {
                Format::Table => {
                    let w = |f: &dyn Fn(&scenario::BuiltinInfo) -> usize| {
                        list.iter().map(f).max().unwrap_or(0)
                    };
                    let (nw, kw, pw) = (
                        w(&|i| i.name.len()),
                        w(&|i| i.kind.len()),
                        w(&|i| i.platform.len()),
                    );
                    for i in &list {
                        writeln!(
                            out,
                            "{:<nw$}  {:<kw$}  {:<pw$}  {:<6} {}",
                            i.name, i.kind, i.platform, i.kernel, i.description
                        )?;
                    }
                }
                Format::Json => {
                    print_json(out, &serde_json::json!({ "scenarios": list }))?;
                }
                Format::Folded => {
                    return Err(
                        arg_error("--format folded applies to `run` and `compare` only").into(),
                    );
                }
            }
        }
        Cmd::Run {
            scenario,
            overrides,
            max_work,
            sweep,
            plot,
            sensitivity,
            format,
        } if !sweep.is_empty() => {
            if sensitivity {
                return Err(arg_error(
                    "--sensitivity analyses one run or one comparison: drop --sweep, or run --sensitivity at each value with --set",
                )
                .into());
            }
            let sweeps = dmasim::sweep::sweeps_from(&sweep)?;
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
            if format == Format::Folded {
                return Err(
                    arg_error("--format folded applies to a single run or to `compare`").into(),
                );
            }
            let warned = std::cell::RefCell::new(std::collections::BTreeSet::new());
            let check = |t: &Scenario| {
                if warned.borrow_mut().insert(t.profile.origin.clone()) {
                    warn_unpriced(&t.profile, &t.sw_keys(), &t.name);
                }
                t.check_work(u128::from(max_work))
            };
            let r = with_progress(None, |p| {
                dmasim::sweep::run(
                    &scenario,
                    &overrides.set,
                    &overrides.policy,
                    &sweeps,
                    &variants,
                    &check,
                    p,
                )
            });
            let r = r.map_err(compare_error)?;
            if let Some(path) = &plot {
                let doc = if is_html(path) {
                    dmasim::sweep::html(&r)
                } else {
                    dmasim::plot::svg(&dmasim::sweep::charts(&r))
                };
                write_plot(path, &doc)?;
            }
            match format {
                Format::Json => print_json(out, &dmasim::sweep::json(&r))?,
                _ => write!(out, "{}", dmasim::sweep::table(&r))?,
            }
        }
        Cmd::Run {
            scenario,
            overrides,
            max_work,
            plot,
            sensitivity,
            format,
            ..
        } => {
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
            )?;
            apply_overrides(&mut s, &overrides)?;
            warn_unpriced(&s.profile, &s.sw_keys(), &s.name);
            s.check_work(u128::from(max_work))?;
            if sensitivity {
                // The reruns' number is known only once the base run has said which parameters
                // it used, so the display (past a second, on a terminal) counts steps, no total.
                let r = with_progress(None, |p| {
                    dmasim::sensitivity::analyse(&s, &[dmasim::compare::Variant::default()], p)
                });
                let r = r.map_err(compare_error)?;
                return write_sensitivity(out, &r, format);
            }
            if s.work() > scenario::WARN_WORK {
                info(format_args!(
                    "note: about {} model steps: this run may take a while",
                    s.work()
                ));
            }
            let outcome =
                with_progress(Some(s.progress_total()), |p| scenario::execute_with(&s, p));
            let outcome = outcome.map_err(|e| match e {
                scenario::RunError::Refused(r) => anyhow::Error::from(r),
                scenario::RunError::Input(i) => anyhow::Error::from(i),
            })?;
            match format {
                Format::Table => write!(out, "{}", outcome.table())?,
                Format::Json => print_json(out, &outcome.json())?,
                Format::Folded => write!(out, "{}", dmasim::report::folded(outcome.stacks()))?,
            }
        }
        Cmd::Compare {
            scenario,
            kernel,
            platform,
            variant,
            policy,
            set,
            baseline,
            max_work,
            sensitivity,
            plot,
            format,
        } => {
            if sensitivity && plot.is_some() {
                return Err(arg_error(
                    "--plot draws the comparison itself: give it without --sensitivity",
                )
                .into());
            }
            let mut variants = dmasim::compare::variants_from(&variant, &platform, &kernel)?;
            if let Some(b) = &baseline {
                dmasim::compare::put_baseline_first(&mut variants, b)?;
            }
            // The settings are read on the first variant's platform (each variant then applies
            // its own and is checked there), so a --set that fits the compared platforms and not
            // the file's is accepted.
            let first = variants.iter().find_map(|v| v.platform.as_deref());
            let mut s = Scenario::load_on(&scenario, &set, first)?;
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
                Format::Table => write!(out, "{}", dmasim::compare::table(&c))?,
                Format::Json => print_json(out, &dmasim::compare::json(&c))?,
                Format::Folded => write!(out, "{}", dmasim::compare::folded_pair(&c)?)?,
            }
        }
        Cmd::Policies { platform, format } => {
            let profile = Profile::load(&platform)?;
            match format {
                Format::Table => write!(out, "{}", dmasim::report::policies_table(&profile))?,
                Format::Json => print_json(out, &dmasim::report::policies_json(&profile))?,
                Format::Folded => {
                    return Err(
                        arg_error("--format folded applies to `run` and `compare` only").into(),
                    );
                }
            }
        }
        Cmd::Costs { format } => match format {
            Format::Table => write!(out, "{}", costs_table())?,
            Format::Json => print_json(out, &costs_json())?,
            Format::Folded => {
                return Err(
                    arg_error("--format folded applies to `run` and `compare` only").into(),
                );
            }
        },
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
                    return Err(
                        arg_error("--format folded applies to `run` and `compare` only").into(),
                    );
                }
                Format::Json => print_json(out, &serde_json::to_value(&r)?)?,
            }
        }
        Cmd::Calibrate {
            geometry,
            output,
            format,
        } => {
            if format == Format::Folded {
                return Err(
                    arg_error("--format folded applies to `run` and `compare` only").into(),
                );
            }
            let instruction = match &geometry.instruction {
                Some(_) => Some(geometry.instruction()?),
                None => None,
            };
            let opts = dmasim::calibrate::CalibrateOpts {
                buffer_bytes: geometry.buffer,
                entry_bytes: geometry.entry,
                iterations: geometry.iterations,
                instruction,
            };
            let c = dmasim::calibrate::measure_host(&opts)?;
            for w in dmasim::calibrate::warnings(&c) {
                note(format_args!("warning: {w}"));
            }
            let text = dmasim::calibrate::render_profile(&c);
            if let Some(path) = &output {
                std::fs::write(path, &text)
                    .map_err(|e| InputError::new(path, format!("cannot write profile: {e}")))?;
                info(format_args!("wrote {path}"));
            }
            match format {
                Format::Json => print_json(out, &dmasim::calibrate::json(&c))?,
                _ if output.is_none() => write!(out, "{text}")?,
                _ => {}
            }
        }
        Cmd::Reproduce {
            experiment,
            list,
            plot,
            format,
        } => {
            if list {
                let w = reproduce::EXPERIMENTS
                    .iter()
                    .map(|e| e.name.len())
                    .max()
                    .unwrap_or(0);
                for e in reproduce::EXPERIMENTS {
                    writeln!(out, "{:<w$}  {}", e.name, e.summary)?;
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
                return Err(
                    arg_error("--format folded applies to `run` and `compare` only").into(),
                );
            }
            if let Some(path) = &plot {
                let page = reproduce::render_html(&reports);
                let doc = if is_html(path) {
                    page
                } else {
                    reproduce::render_svg(&reports)
                };
                write_plot(path, &doc)?;
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
