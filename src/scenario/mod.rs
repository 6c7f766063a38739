//! Scenarios: a platform, the kernel's policies, a device and a workload, as a TOML file.
//!
//! Kernel counterpart: none — a scenario is what a driver would do to the DMA API, written down.
//! The format is documented in docs/scenarios.md.
//!
//! The file is parsed once. The shared sections (`[scenario]`, `[device]`, `[swiotlb]`,
//! `[iommu]`, and `[boot]`: the CMA command-line parameters, parsed once into a typed
//! [`CmaBoot`]) are read here; `[workload]` belongs to the kind it names, and each kind is one
//! module ([`streaming`], [`forwarding`], [`bounce`], [`iommu`], [`user_access`],
//! [`pipeline`], [`coherent`]) owning its section's keys, its
//! checks, its work estimate, its runner and its result, through the [`WorkloadKind`] and
//! [`KindResult`] traits; one list ([`kind::workloads!`], below) makes the [`Workload`] and
//! [`Outcome`] enums, the registry [`KINDS`] and every dispatch from them. Running goes through
//! [`crate::setup`], which builds the machine; a runner never assembles a stack itself.
//!
//! Invariants: a scenario that parses has been checked completely (sizes, directions, calls,
//! platform, policies and whether they apply) before anything runs, so running it cannot fail
//! on bad input; every error names the file, the line and the key. Overrides (`--platform`,
//! `--kernel`, `--policy`) go through the same checks. Running is deterministic.

pub mod bounce;
mod builtin;
pub mod coherent;
mod file;
pub mod forwarding;
pub mod iommu;
mod kind;
pub mod map_benchmark;
pub mod pipeline;
pub mod progress;
pub mod replay;
mod resolve;
pub mod smp_cpus;
pub mod streaming;
pub mod user_access;

use crate::arch::ArchDma;
use crate::dma::contiguous::{CmaBoot, CmaCmdline, memparse, parse_numa_cma};
use crate::hw::sw_costs::{Layer, SwKey};
use crate::input::{InputError, from_section, from_table, parse_document, parse_size};
use crate::platform::{Arch, Profile};
use crate::policy::{KernelVersion, LATEST, Policies, Target};
use crate::types::DmaDirection;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub use crate::hw::calls::{self, CallStat, StackRow};
pub use crate::report::RunInfo;
use crate::setup::SetupError;
pub use crate::setup::{DeviceSetup, DmaOpsKind, IommuConfig, SmmuModel, SwiotlbSpec};
use builtin::read_scenario;
pub use builtin::{BUILTIN, BuiltinInfo, builtin_list};
use file::*;
pub use kind::{KindResult, SweepPoint, WorkloadKind};
pub use progress::Progress;
pub use streaming::RunResult;

kind::workloads! {
    Streaming(streaming::Streaming),
    Forwarding(forwarding::Forwarding),
    Bounce(bounce::Bounce),
    IommuSweep(iommu::Sweep),
    IommuOps(iommu::Ops),
    UserAccess(user_access::UserAccess),
    Pipeline(pipeline::Pipeline),
    Replay(replay::Replay),
    Coherent(coherent::Coherent),
    MapBenchmark(map_benchmark::MapBenchmark),
}

impl Outcome {
    /// The terminal table.
    pub fn table(&self) -> String {
        self.as_result().table()
    }

    /// The JSON document (docs/output.md).
    pub fn json(&self) -> serde_json::Value {
        self.as_result().json()
    }

    /// The run's modelled time, in ps.
    pub fn total_ps(&self) -> u64 {
        self.as_result().total_ps()
    }

    /// Which scenario ran where, under which policies.
    pub fn info(&self) -> &RunInfo {
        self.as_result().info()
    }

    /// Every timed call of the run as (name, calls, total ps), in the order the kind reports
    /// them: the DMA API calls, or per size a bounce workload's map and unmap, or an IOMMU
    /// workload's operations by label.
    pub fn call_totals(&self) -> Vec<(String, u64, u64)> {
        self.as_result().call_totals()
    }

    /// Each name of [`Outcome::call_totals`] that is a device's call, as (the name, the
    /// device, the call): a replay's.
    pub fn call_devices(&self) -> Vec<(String, String, String)> {
        self.as_result().call_devices()
    }

    /// The call stacks, for folded output.
    pub fn stacks(&self) -> &[StackRow] {
        self.as_result().stacks()
    }

    /// What a sweep shows of this run beyond its calls' means, if anything.
    pub fn sweep_point(&self) -> Option<kind::SweepPoint> {
        self.as_result().sweep_point()
    }
}

/// A failure of dmasim's own, found while running a scenario that passed its checks: a bug in
/// dmasim (exit status 70, as a caught panic), never something the input or the modelled kernel
/// did.
#[derive(Debug, thiserror::Error)]
pub enum Bug {
    /// The run's CPUs could not all call the device's layers ([`smp_cpus::machines`]): the
    /// scenario's checks ([`smp_cpus::check_shared`]) should have refused them.
    #[error("{what} on more than one CPU: sharing its state between CPUs is not modelled yet")]
    NotShared { what: &'static str },
    /// The IOMMU runner given a scenario of another kind: its caller chose the wrong runner.
    #[error("scenario `{scenario}` is a {kind} workload, not an IOMMU one")]
    NotIommu {
        scenario: String,
        kind: &'static str,
    },
    /// Every CPU still running waited for another ([`crate::smp::run`]): the model's locking went
    /// wrong.
    #[error(transparent)]
    Deadlock(#[from] crate::smp::Deadlock),
}

/// Why a workload's runner gave no result, by whose failure it is.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    /// The modelled kernel refused to set the machine up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// dmasim failed.
    #[error(transparent)]
    Bug(#[from] Bug),
    /// An input read during the run was bad: a replayed trace that changed between its reads.
    #[error(transparent)]
    Input(#[from] InputError),
}

impl From<crate::smp::Deadlock> for RunFailure {
    fn from(d: crate::smp::Deadlock) -> RunFailure {
        RunFailure::Bug(Bug::Deadlock(d))
    }
}

impl RunFailure {
    /// The failure as [`execute`] reports it, naming the scenario's `file`.
    pub fn in_file(self, file: &str) -> RunError {
        let file = file.to_string();
        match self {
            RunFailure::Setup(cause) => RunError::Refused(Refused {
                file,
                variant: None,
                cause: Box::new(cause),
            }),
            RunFailure::Bug(cause) => RunError::Internal(Internal {
                file,
                variant: None,
                cause,
            }),
            RunFailure::Input(e) => RunError::Input(e),
        }
    }
}

/// Why a run could not produce a result: the modelled kernel refused to set the machine up (a
/// pool or table that does not fit, a receive ring that cannot be mapped). Refusals *during* a
/// run are part of its result instead.
#[derive(Debug)]
pub struct Refused {
    pub file: String,
    /// The variant of a comparison (`dmasim compare`, a sweep) that was refused, if any.
    pub variant: Option<String>,
    /// Boxed: a refusal is rare, and every run's `Result` would otherwise carry its size.
    pub cause: Box<SetupError>,
}

/// A run that ended in a bug of dmasim's ([`Bug`]).
#[derive(Debug)]
pub struct Internal {
    pub file: String,
    /// The variant of a comparison that failed, if any.
    pub variant: Option<String>,
    pub cause: Bug,
}

/// `FILE: WHAT: [variant `V`: ]CAUSE`, the line [`Refused`] and [`Internal`] say.
fn write_failure(
    f: &mut std::fmt::Formatter<'_>,
    file: &str,
    what: &str,
    variant: Option<&str>,
    cause: &dyn std::fmt::Display,
) -> std::fmt::Result {
    write!(f, "{file}: {what}: ")?;
    if let Some(v) = variant {
        write!(f, "variant `{v}`: ")?;
    }
    write!(f, "{cause}")
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.variant.as_deref();
        write_failure(f, &self.file, "the modelled kernel refused", v, &self.cause)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

impl std::fmt::Display for Internal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.variant.as_deref();
        write_failure(
            f,
            &self.file,
            "internal error (a bug in dmasim)",
            v,
            &self.cause,
        )
    }
}

impl std::error::Error for Internal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// Why `execute` gave no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The modelled kernel refused to set the machine up.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The run's modelled time passed what the picosecond clock holds (u64, 213 days): the
    /// input asked for more than the model can represent; or an input read during the run
    /// (a replayed trace) was bad.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A bug in dmasim, found while running.
    #[error(transparent)]
    Internal(#[from] Internal),
}

/// Run any scenario on the Model.
pub fn execute(s: &Scenario) -> Result<Outcome, RunError> {
    execute_with(s, &Progress::new())
}

/// [`execute`], counting the run's outer steps on `progress`.
pub fn execute_with(s: &Scenario, progress: &Progress) -> Result<Outcome, RunError> {
    let outcome = s
        .workload
        .run_kind(s, progress)
        .map_err(|f| f.in_file(&s.file))?;
    if outcome.total_ps() == u64::MAX {
        return Err(RunError::Input(InputError::new(
            &s.file,
            "the run's modelled time passed 2^64 ps (213 days), more than the model's clock holds: lower the costs or the work",
        )));
    }
    Ok(outcome)
}

/// A workload kind: its name, what it does, and how its `[workload]` section is read.
pub struct Kind {
    pub name: &'static str,
    pub summary: &'static str,
    parse: fn(&Ctx, Spanned<toml::de::DeValue>, &Shared) -> Result<Workload, InputError>,
}

/// What a kind's parser may need from the shared sections.
pub(crate) struct Shared<'a> {
    pub(crate) profile: &'a Profile,
    pub(crate) iommu: Option<&'a IommuConfig>,
    /// The scenario file's directory: files it names are read from there.
    pub(crate) dir: &'a std::path::Path,
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        self.as_kind().kind()
    }

    /// Whether the workload drives a device through the DMA API (and so needs `[device]`,
    /// unless it names its own devices).
    pub fn uses_dma_api(&self) -> bool {
        self.as_kind().uses_dma_api()
    }

    /// Whether the workload names its devices itself (`[[workload.device]]`) instead of the
    /// one `[device]`.
    pub fn own_devices(&self) -> bool {
        self.as_kind().own_devices()
    }

    /// Whether the device's ops need a swiotlb pool.
    pub fn uses_swiotlb(&self) -> bool {
        self.as_kind().uses_swiotlb()
    }

    /// Whether the device is a PCI function (the forwarding workload's NIC), whose bus sets
    /// its segment boundary whatever the release.
    pub fn pci_device(&self) -> bool {
        self.as_kind().pci_device()
    }

    /// Whether the workload takes IOVAs from the allocator (behind an `[iommu]`): every DMA-API
    /// workload through iommu-dma, an `iommu_ops` list with an `iova = "alloc"` map.
    pub fn allocates_iovas(&self) -> bool {
        self.as_kind().allocates_iovas()
    }
}

/// `--set` arguments split into the platform's (`platform.KEY=VALUE`, as (KEY, VALUE)) and
/// the scenario's, each in its order.
fn split_platform_sets(sets: &[String]) -> (Vec<(String, String)>, Vec<String>) {
    let (mut platform, mut scenario) = (Vec::new(), Vec::new());
    for s in sets {
        match crate::input::split_assignment(s) {
            Some((k, v)) if k.trim().starts_with("platform.") => platform.push((
                k.trim()["platform.".len()..].to_string(),
                v.trim().to_string(),
            )),
            _ => scenario.push(s.clone()),
        }
    }
    (platform, scenario)
}

// Re-exported under their old paths: the kinds' types.
pub use bounce::Bounce;
pub use forwarding::{Forwarding, IXGBE_RX_BUFSZ};
pub use streaming::{Calls, Streaming};

/// Most model steps a run may take unless `--max-work` raises it: about a minute of wall time.
pub const DEFAULT_MAX_WORK: u128 = 20_000_000_000;
/// Steps one page mapped and unmapped through the io-pgtable costs, in the units of a cache line
/// maintained (measured: a PTE's walk, write, clean and invalidation take about that much longer).
pub(crate) const IOMMU_PAGE_STEPS: u128 = 100;
/// Runs estimated above this many steps say so on standard error before they start. (Progress
/// is drawn by wall time, not by this estimate: any run past a second shows it on a terminal.)
pub const WARN_WORK: u128 = 1_000_000_000;

/// Largest swiotlb pool a scenario may set up (the model keeps a slot table entry per 2 KiB).
pub const MAX_SWIOTLB: u64 = 1 << 30;

/// A checked scenario, ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    /// The file it was read from, for messages.
    pub file: String,
    pub profile: Profile,
    /// The release whose presets apply, and where it was set.
    pub kernel: KernelVersion,
    kernel_origin: Origin,
    /// The policies in effect: the release's presets for this platform, then the overrides.
    pub policies: Policies,
    overrides: Vec<PolicyOverride>,
    pub device: crate::device::Device,
    pub swiotlb: SwiotlbSpec,
    /// The IOMMU domain the device (or an IOMMU workload) maps through.
    pub iommu: Option<IommuConfig>,
    /// Which of `iommu.smmu` and `iommu.coherent_walk` were given; the platform's `[smmu]`
    /// decides the others.
    iommu_given: iommu::IommuGiven,
    pub workload: Workload,
    /// The CMA boot parameters (`[boot]`), as the kernel's command line would give them.
    pub boot: CmaBoot,
    lines: Lines,
    /// `--set platform.KEY=VALUE` edits of the profile, kept so that another platform
    /// (`--platform`, a compared variant) gets them too.
    profile_sets: Vec<(String, String)>,
    /// The text it was parsed from (with any `--set` edits), its file name and directory, so
    /// that a variant can set scenario keys of its own ([`Scenario::with_sets`]).
    source: std::rc::Rc<(String, String, std::path::PathBuf)>,
}

impl Scenario {
    /// Read a scenario: a file, or a shipped scenario by name (`dmasim scenarios`). A file's
    /// `platform` may be a built-in name or a path relative to the file.
    pub fn load(path: &str) -> Result<Scenario, InputError> {
        let (file, text, dir) = read_scenario(path)?;
        Scenario::parse(&file, &text, &dir)
    }

    /// Read a scenario file with `--set KEY=VALUE` edits applied first ([`crate::input::set_key`]).
    /// An error in a key the user set names the argument; any other names the line as written
    /// in the file.
    pub fn load_with(path: &str, sets: &[String]) -> Result<Scenario, InputError> {
        Scenario::load_on(path, sets, None)
    }

    /// [`Scenario::load_with`] on `platform` (`--platform`) rather than the file's: the
    /// platform applies first, then the settings, and only then is the result checked, so a
    /// `--set` that fits the new platform and not the file's is accepted.
    pub fn load_on(
        path: &str,
        sets: &[String],
        platform: Option<&str>,
    ) -> Result<Scenario, InputError> {
        let source = read_scenario(path)?;
        Scenario::load_source_on(source, sets, platform)
    }

    /// The text of a scenario (or of a trace, read as a `replay` scenario), its name and its
    /// directory, as [`Scenario::load_on`] reads them from a path; a command may edit the text
    /// ([`crate::input::set_path`]) before [`Scenario::load_source_on`].
    pub fn source(path: &str) -> Result<(String, String, std::path::PathBuf), InputError> {
        read_scenario(path)
    }

    /// [`Scenario::load_on`] of a scenario's text ([`Scenario::source`]).
    pub fn load_source_on(
        source: (String, String, std::path::PathBuf),
        sets: &[String],
        platform: Option<&str>,
    ) -> Result<Scenario, InputError> {
        let profile = platform.map(Profile::load).transpose()?;
        // `platform.KEY=VALUE` edits the profile, every other key the scenario file.
        let (profile_sets, scenario_sets) = split_platform_sets(sets);
        let mut s = Scenario::load_scenario_sets(source, &scenario_sets, profile)?;
        if !profile_sets.is_empty() {
            s.profile_sets = profile_sets;
            let p = s.with_profile_sets(s.profile.clone())?;
            s.set_profile(p)?;
        }
        Ok(s)
    }

    fn load_scenario_sets(
        (file, text, dir): (String, String, std::path::PathBuf),
        sets: &[String],
        profile: Option<Profile>,
    ) -> Result<Scenario, InputError> {
        if sets.is_empty() && profile.is_none() {
            return Scenario::parse(&file, &text, &dir);
        }
        let path = file.as_str();
        let mut edited = text.clone();
        let mut keys = Vec::new();
        for s in sets {
            let (k, v) = crate::input::split_assignment(s).ok_or_else(|| {
                InputError::new(
                    "<argument>",
                    format!("--set: `{s}` is not KEY=VALUE (e.g. workload.entry=64K)"),
                )
            })?;
            edited = crate::input::set_key(path, &edited, k.trim(), v.trim())?;
            // As the parser names a key: its parts joined, quotes gone.
            let plain =
                crate::input::key_parts(k).map_or_else(|_| k.trim().to_string(), |p| p.join("."));
            keys.push((plain, s.clone()));
        }
        Scenario::parse_on(path, &edited, &dir, profile).map_err(|mut e| {
            let set = e.key.as_ref().and_then(|ek| {
                keys.iter()
                    .find(|(k, _)| ek == k || ek.starts_with(&format!("{k}.")))
            });
            if let Some((_, arg)) = set {
                return InputError::new("<argument>", format!("--set {arg}: {}", e.message));
            }
            // A line of the scenario's text moved with the edits; a line of a trace read as
            // its scenario (the text made for it names no line of it) did not.
            let named = toml::from_str::<toml::Table>(&text)
                .ok()
                .and_then(|t| Some(t.get("workload")?.get("trace")?.as_str()?.to_string()));
            let trace = named.is_some_and(|t| text == replay::scenario_text(&t));
            if !trace {
                let map = crate::input::line_map(&text, &edited);
                e.line = e.line.and_then(|l| map.get(l - 1).copied().flatten());
            }
            e
        })
    }

    /// The head of this scenario's results.
    pub fn run_info(&self) -> RunInfo {
        let (fitted, held) = self.profile.fitted_and_held();
        RunInfo {
            scenario: self.name.clone(),
            platform: self.profile.name().to_string(),
            arch: self.profile.arch(),
            policies: self.policies.clone(),
            target: self.target(),
            iommu: self.iommu.map(|c| self.describe_iommu(&c)),
            fitted,
            held,
        }
    }

    /// The header line of the IOMMU: granule, input address size, which SMMU (model, version
    /// as the platform gives it), and whose word the walker's coherence is.
    fn describe_iommu(&self, c: &IommuConfig) -> String {
        let version = self
            .profile
            .file
            .smmu
            .as_ref()
            .and_then(|s| s.version.as_ref())
            .map_or(String::new(), |v| format!(" (version {})", v.get_ref()));
        format!(
            "{} KiB granule, {}-bit IAS, {}{version}, {} table walker ({})",
            c.granule >> 10,
            c.ias,
            c.smmu.name(),
            if c.coherent_walk {
                "coherent"
            } else {
                "non-coherent"
            },
            if self.iommu_given.coherent_walk {
                "the scenario's coherent_walk"
            } else {
                "the platform's [smmu] coherent_walk"
            }
        )
    }

    /// What presets and policy checks depend on.
    pub fn target(&self) -> Target {
        Target::of(
            &self.profile,
            self.iommu_dma(),
            self.workload.uses_swiotlb(),
            self.workload.uses_dma_api(),
        )
        .with_pci_device(self.workload.pci_device())
        .with_iova_alloc(self.workload.allocates_iovas())
    }

    /// Whether a device of the run maps through an iommu-dma domain: the `[iommu]` section's,
    /// or one a replayed device is behind without it.
    pub fn iommu_dma(&self) -> bool {
        self.iommu.is_some() || self.workload.as_kind().own_iommu_domain()
    }

    /// Run on another platform (`--platform`): presets follow the new hardware, and the
    /// command line's `--set platform.KEY=VALUE` edits apply to it as to the first.
    pub fn set_platform(&mut self, name: &str) -> Result<(), InputError> {
        let profile = self.with_profile_sets(Profile::load(name)?)?;
        self.set_profile(profile)
    }

    fn with_profile_sets(&self, mut p: Profile) -> Result<Profile, InputError> {
        for (k, v) in &self.profile_sets {
            p = p.with_set(k, v)?;
        }
        Ok(p)
    }

    /// This scenario with scenario keys set as `--set KEY=VALUE` would (`--variant
    /// kernel=7.1,workload.entry=16K`): the text is edited and read again on the same platform
    /// (with its `--set platform.` edits), then the release and the policy overrides given as
    /// arguments apply again. An error names the argument.
    pub fn with_sets(&self, sets: &[String]) -> Result<Scenario, InputError> {
        let (file, text, dir) = &*self.source;
        let mut edited = text.clone();
        let (profile_sets, sets) = split_platform_sets(sets);
        for a in &sets {
            let (k, v) = crate::input::split_assignment(a)
                .ok_or_else(|| InputError::new("<argument>", format!("`{a}` is not KEY=VALUE")))?;
            edited = crate::input::set_key(file, &edited, k.trim(), v.trim())?;
        }
        // `platform.KEY=VALUE` edits this variant's profile, on top of the command line's.
        let mut profile = self.profile.clone();
        for (k, v) in &profile_sets {
            profile = profile.with_set(k, v)?;
        }
        let named = |e: InputError| {
            if e.file == "<argument>" {
                e
            } else {
                InputError::new("<argument>", format!("{}: {}", sets.join(","), e.message))
            }
        };
        let mut t = Scenario::parse_on(file, &edited, dir, Some(profile)).map_err(named)?;
        t.profile_sets = [self.profile_sets.clone(), profile_sets].concat();
        t.lines.platform = self.lines.platform;
        if self.kernel_origin == Origin::Argument {
            t.set_kernel(self.kernel).map_err(named)?;
        }
        let args: Vec<PolicyOverride> = self
            .overrides
            .iter()
            .filter(|o| o.origin == Origin::Argument)
            .cloned()
            .collect();
        if !args.is_empty() {
            let before = t.clone();
            t.overrides.extend(args);
            t.resolve_or(before).map_err(named)?;
        }
        Ok(t)
    }

    /// The `--set platform.KEY=VALUE` edits in effect, as (key, value).
    pub fn profile_sets(&self) -> &[(String, String)] {
        &self.profile_sets
    }

    /// Run on a profile already loaded (a caller that holds its text, such as the fuzz targets).
    pub fn set_profile(&mut self, profile: Profile) -> Result<(), InputError> {
        let before = self.clone();
        self.profile = profile;
        self.lines.platform = None;
        self.resolve_or(before)
    }

    /// Run under another release (`--kernel`): its presets, then the policy overrides again.
    pub fn set_kernel(&mut self, kernel: KernelVersion) -> Result<(), InputError> {
        let before = self.clone();
        self.kernel = kernel;
        self.kernel_origin = Origin::Argument;
        self.resolve_or(before)
    }

    /// `--kernel` as the user typed it.
    pub fn set_kernel_str(&mut self, k: &str) -> Result<(), InputError> {
        let v = KernelVersion::parse(k)
            .map_err(|m| InputError::new("<argument>", format!("--kernel: {m}")))?;
        self.set_kernel(v)
    }

    /// Override policies (`--policy key=value[,key=value]`), after the file's own.
    pub fn set_policies(&mut self, spec: &str) -> Result<(), InputError> {
        let pairs = Policies::parse_overrides(spec)
            .map_err(|m| InputError::new("<argument>", format!("--policy: {m}")))?;
        let before = self.clone();
        for (key, value) in pairs {
            self.overrides.push(PolicyOverride {
                key,
                value,
                origin: Origin::Argument,
            });
        }
        self.resolve_or(before)
    }

    /// The streaming workload, if that is what this scenario runs.
    pub fn streaming(&self) -> Option<&Streaming> {
        match &self.workload {
            Workload::Streaming(w) => Some(w),
            _ => None,
        }
    }

    pub fn streaming_mut(&mut self) -> Option<&mut Streaming> {
        match &mut self.workload {
            Workload::Streaming(w) => Some(w),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
