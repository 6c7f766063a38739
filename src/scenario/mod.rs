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
pub mod coherent;
pub mod forwarding;
pub mod iommu;
mod kind;
pub mod pipeline;
pub mod progress;
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
pub use crate::setup::{DeviceSetup, DmaOpsKind, IommuConfig, SmmuModel, SwiotlbSpec};
pub use kind::{KindResult, WorkloadKind};
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
    Coherent(coherent::Coherent),
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

    /// The call stacks, for folded output.
    pub fn stacks(&self) -> &[StackRow] {
        self.as_result().stacks()
    }
}

/// Why a run could not produce a result: the modelled kernel refused to set the machine up (a
/// pool or table that does not fit, a receive ring that cannot be mapped). Refusals *during* a
/// run are part of its result instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: the modelled kernel refused: {message}")]
pub struct Refused {
    pub file: String,
    pub message: String,
}

/// Why `execute` gave no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The modelled kernel refused to set the machine up.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The run's modelled time passed what the picosecond clock holds (u64, 213 days): the
    /// input asked for more than the model can represent.
    #[error(transparent)]
    Input(#[from] InputError),
}

/// Run any scenario on the Model.
pub fn execute(s: &Scenario) -> Result<Outcome, RunError> {
    execute_with(s, &Progress::new())
}

/// [`execute`], counting the run's outer steps on `progress`.
pub fn execute_with(s: &Scenario, progress: &Progress) -> Result<Outcome, RunError> {
    let outcome = run_kind(s, progress)?;
    if outcome.total_ps() == u64::MAX {
        return Err(RunError::Input(InputError::new(
            &s.file,
            "the run's modelled time passed 2^64 ps (213 days), more than the model's clock holds: lower the costs or the work",
        )));
    }
    Ok(outcome)
}

fn run_kind(s: &Scenario, p: &Progress) -> Result<Outcome, Refused> {
    s.workload.run_kind(s, p).map_err(|message| Refused {
        file: s.file.clone(),
        message,
    })
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

/// Where a setting came from: a line of the scenario file, or the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Origin {
    File(Option<usize>),
    Argument,
}

/// One `policy.key = value` of the file or `--policy key=value` of the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PolicyOverride {
    key: String,
    value: String,
    origin: Origin,
}

/// Lines of the keys that checks after an override may blame.
#[derive(Clone, Debug, Default)]
struct Lines {
    platform: Option<usize>,
    kernel: Option<usize>,
    areas: Option<usize>,
    smmu: Option<usize>,
    kind: Option<usize>,
    mask: Option<usize>,
    numa_node: Option<usize>,
    boot_cma: Option<usize>,
    boot_cma_pernuma: Option<usize>,
    boot_numa_cma: Option<usize>,
}

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedFile {
    scenario: ScenarioSection,
    device: Option<DeviceSection>,
    swiotlb: Option<SwiotlbSection>,
    iommu: Option<iommu::IommuSection>,
    boot: Option<BootSection>,
}

/// `[boot]`: kernel command-line parameters, written as on the command line (`cma = "64M@0-4G"`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BootSection {
    cma: Option<Spanned<String>>,
    cma_pernuma: Option<Spanned<String>>,
    numa_cma: Option<Spanned<String>>,
    /// The kernel's build: `CONFIG_CMA_SIZE_MBYTES`, the default area without `cma=`.
    cma_size_mbytes: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioSection {
    name: String,
    platform: Spanned<String>,
    kernel: Option<Spanned<toml::Value>>,
    #[serde(default)]
    policy: BTreeMap<String, Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceSection {
    name: String,
    coherent: bool,
    dma_mask_bits: Spanned<i64>,
    numa_node: Option<Spanned<i64>>,
}

/// `[swiotlb]`: the bounce pool as `swiotlb=` on the kernel command line would set it up.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwiotlbSection {
    size: Option<Spanned<toml::Value>>,
    force: Option<bool>,
    areas: Option<Spanned<i64>>,
}

/// Where a value being checked came from, so errors can name the file, line and key.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn line(&self, span: std::ops::Range<usize>) -> usize {
        crate::input::line_of(self.text, span.start)
    }

    /// Read a kind's `[workload]` section into its own type (unknown keys are that kind's).
    pub(crate) fn section<T: serde::de::DeserializeOwned>(
        &self,
        v: Spanned<toml::de::DeValue>,
    ) -> Result<T, InputError> {
        from_section(self.file, self.text, "workload", v)
    }

    /// The `[scenario]` section's platform: a built-in name, or a profile path relative to the
    /// scenario file's directory (never to the current directory).
    fn profile(&self, sec: &ScenarioSection, dir: &std::path::Path) -> Result<Profile, InputError> {
        let pname = sec.platform.get_ref();
        if pname.trim().is_empty() {
            return Err(self.err(
                sec.platform.span(),
                "scenario.platform",
                "empty: give a built-in platform (see `dmasim platforms`) or a profile file",
            ));
        }
        if crate::platform::is_builtin(pname) {
            return Profile::load(pname);
        }
        let rel = dir.join(pname);
        if rel.is_file() {
            Profile::load(&rel.to_string_lossy())
        } else {
            let known = crate::platform::builtin_names();
            Err(self.err(
                sec.platform.span(),
                "scenario.platform",
                format!(
                    "`{pname}` is neither a built-in platform ({}) nor a profile file next to this scenario",
                    known.join(", ")
                ),
            ))
        }
    }

    /// An integer key that must lie in `range`.
    pub(crate) fn int(
        &self,
        v: &Spanned<i64>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<u64, InputError> {
        let x = *v.get_ref();
        if !range.contains(&x) {
            return Err(self.err(
                v.span(),
                key,
                format!("must be {}..={}, found {x}", range.start(), range.end()),
            ));
        }
        Ok(x as u64)
    }

    pub(crate) fn direction(&self, d: &Spanned<String>) -> Result<DmaDirection, InputError> {
        let direction = DmaDirection::parse(d.get_ref()).ok_or_else(|| {
            self.err(
                d.span(),
                "workload.direction",
                format!(
                    "unknown direction `{}`; choose bidirectional, to_device, from_device or none",
                    d.get_ref()
                ),
            )
        })?;
        if direction == DmaDirection::None {
            return Err(self.err(d.span(), "workload.direction", "DMA_NONE cannot be mapped or synced (the kernel's valid_dma_direction() check BUGs on it); choose bidirectional, to_device or from_device"));
        }
        Ok(direction)
    }

    pub(crate) fn err(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        msg: impl Into<String>,
    ) -> InputError {
        InputError::at(self.file, self.text, Some(span), key, msg)
    }

    pub(crate) fn size(
        &self,
        v: &toml::Value,
        span: std::ops::Range<usize>,
        key: &str,
    ) -> Result<u64, InputError> {
        let n = match v {
            toml::Value::Integer(i) if *i > 0 => Some(*i as u64),
            toml::Value::String(s) => parse_size(s),
            _ => None,
        };
        match n {
            Some(n) if n > 0 => Ok(n),
            _ => Err(self.err(
                span,
                key,
                format!("expected a positive size such as 4096, \"4K\" or \"10M\", found {v}"),
            )),
        }
    }

    /// A required key of a kind's section that is missing: blamed on the `kind` line.
    pub(crate) fn missing(&self, kind: &Spanned<String>, key: &str, what: &str) -> InputError {
        self.err(
            kind.span(),
            &format!("workload.{key}"),
            format!("missing: {what}"),
        )
    }
}

/// The shipped scenarios (`scenarios/*.toml`), compiled in so that `dmasim run NAME` works from any
/// directory, as built-in platforms do: (name, TOML text). A test checks the list against the
/// directory.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "batched-sync",
        include_str!("../../scenarios/batched-sync.toml"),
    ),
    ("iommu-api", include_str!("../../scenarios/iommu-api.toml")),
    ("iommu-ops", include_str!("../../scenarios/iommu-ops.toml")),
    (
        "ixgbe-forwarding",
        include_str!("../../scenarios/ixgbe-forwarding.toml"),
    ),
    (
        "pernuma-cma",
        include_str!("../../scenarios/pernuma-cma.toml"),
    ),
    (
        "smmu-walk-flush",
        include_str!("../../scenarios/smmu-walk-flush.toml"),
    ),
    (
        "swiotlb-bounce",
        include_str!("../../scenarios/swiotlb-bounce.toml"),
    ),
    (
        "zynq-coherence-options",
        include_str!("../../scenarios/zynq-coherence-options.toml"),
    ),
    (
        "zynq-memcpy",
        include_str!("../../scenarios/zynq-memcpy.toml"),
    ),
    (
        "zynq-pipeline-coherent",
        include_str!("../../scenarios/zynq-pipeline-coherent.toml"),
    ),
    (
        "zynq-pipeline-streaming",
        include_str!("../../scenarios/zynq-pipeline-streaming.toml"),
    ),
    (
        "zynq-streaming",
        include_str!("../../scenarios/zynq-streaming.toml"),
    ),
    (
        "zynq-user-access",
        include_str!("../../scenarios/zynq-user-access.toml"),
    ),
];

/// A shipped scenario as `dmasim scenarios` lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BuiltinInfo {
    pub name: &'static str,
    pub kind: String,
    pub platform: String,
    pub kernel: String,
    /// The first sentence of the file's opening comment.
    pub description: String,
}

/// Every shipped scenario, in name order: its kind, platform and release as the file gives them,
/// and the first sentence of its opening comment.
pub fn builtin_list() -> Vec<BuiltinInfo> {
    BUILTIN
        .iter()
        .map(|(name, text)| {
            let doc: toml::Table = toml::from_str(text).unwrap_or_default();
            let get = |sec: &str, key: &str| {
                doc.get(sec)
                    .and_then(|t| t.get(key))
                    .and_then(|v| v.as_str())
                    .unwrap_or("-")
                    .to_string()
            };
            let comment: Vec<&str> = text
                .lines()
                .map_while(|l| l.strip_prefix('#'))
                .map(str::trim)
                .collect();
            let comment = comment.join(" ");
            let description = match comment.find(". ") {
                Some(i) => comment[..=i].to_string(),
                None => comment,
            };
            BuiltinInfo {
                name,
                kind: get("workload", "kind"),
                platform: get("scenario", "platform"),
                kernel: get("scenario", "kernel"),
                description,
            }
        })
        .collect()
}

/// A scenario's text and the directory its relative profile paths start from: the file when one
/// exists at `path`, else the shipped scenario of that name (whose platforms are all built in).
fn read_scenario(path: &str) -> Result<(String, String, std::path::PathBuf), InputError> {
    let p = std::path::Path::new(path);
    if !p.exists()
        && let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == path)
    {
        return Ok((
            format!("builtin:{name}"),
            (*text).to_string(),
            std::path::PathBuf::new(),
        ));
    }
    let text = crate::input::read_input(path, "scenario").map_err(|mut e| {
        if !p.exists() {
            e.message.push_str(&format!(
                " (shipped scenarios, runnable by name: {})",
                BUILTIN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        e
    })?;
    let dir = p.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    Ok((path.to_string(), text, dir))
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
        let profile = platform.map(Profile::load).transpose()?;
        // `platform.KEY=VALUE` edits the profile, every other key the scenario file.
        let mut profile_sets = Vec::new();
        let mut scenario_sets = Vec::new();
        for s in sets {
            match s.split_once('=') {
                Some((k, v)) if k.trim().starts_with("platform.") => profile_sets.push((
                    k.trim()["platform.".len()..].to_string(),
                    v.trim().to_string(),
                )),
                _ => scenario_sets.push(s.clone()),
            }
        }
        let mut s = Scenario::load_scenario_sets(path, &scenario_sets, profile)?;
        if !profile_sets.is_empty() {
            s.profile_sets = profile_sets;
            let p = s.with_profile_sets(s.profile.clone())?;
            s.set_profile(p)?;
        }
        Ok(s)
    }

    fn load_scenario_sets(
        path: &str,
        sets: &[String],
        profile: Option<Profile>,
    ) -> Result<Scenario, InputError> {
        if sets.is_empty() && profile.is_none() {
            return Scenario::load(path);
        }
        let (file, text, dir) = read_scenario(path)?;
        let path = file.as_str();
        let mut edited = text.clone();
        let mut keys = Vec::new();
        for s in sets {
            let (k, v) = s.split_once('=').ok_or_else(|| {
                InputError::new(
                    "<argument>",
                    format!("--set: `{s}` is not KEY=VALUE (e.g. workload.entry=64K)"),
                )
            })?;
            edited = crate::input::set_key(path, &edited, k.trim(), v.trim())?;
            keys.push((k.trim().to_string(), s.clone()));
        }
        Scenario::parse_on(path, &edited, &dir, profile).map_err(|mut e| {
            let set = e.key.as_ref().and_then(|ek| {
                keys.iter()
                    .find(|(k, _)| ek == k || ek.starts_with(&format!("{k}.")))
            });
            if let Some((_, arg)) = set {
                return InputError::new("<argument>", format!("--set {arg}: {}", e.message));
            }
            let map = crate::input::line_map(&text, &edited);
            e.line = e.line.and_then(|l| map.get(l - 1).copied().flatten());
            e
        })
    }

    pub fn parse(file: &str, text: &str, dir: &std::path::Path) -> Result<Scenario, InputError> {
        Scenario::parse_on(file, text, dir, None)
    }

    /// [`Scenario::parse`], on `platform` instead of the file's `scenario.platform` when given.
    pub fn parse_on(
        file: &str,
        text: &str,
        dir: &std::path::Path,
        platform: Option<Profile>,
    ) -> Result<Scenario, InputError> {
        let c = Ctx { file, text };
        let doc = parse_document(file, text)?;
        let doc_span = doc.span();
        let mut table = doc.into_inner();
        let workload = table.remove("workload");
        let f: SharedFile = from_table(file, text, Spanned::new(doc_span.clone(), table))?;
        let Some(workload) = workload else {
            return Err(InputError::at(
                file,
                text,
                Some(doc_span),
                "workload",
                "missing: a [workload] section with its `kind`",
            ));
        };

        let given = platform.is_some();
        let profile = match platform {
            Some(p) => p,
            None => c.profile(&f.scenario, dir)?,
        };
        let mut lines = Lines {
            platform: (!given).then(|| c.line(f.scenario.platform.span())),
            ..Lines::default()
        };
        let (kernel, kernel_origin) = match &f.scenario.kernel {
            None => (LATEST, Origin::File(None)),
            Some(k) => {
                let line = c.line(k.span());
                lines.kernel = Some(line);
                let v = match k.get_ref() {
                    toml::Value::String(s) => KernelVersion::parse(s),
                    toml::Value::Float(x) => Err(format!(
                        "write the release as a string, kernel = \"{x}\": as a number, 7.10 would read as 7.1"
                    )),
                    other => Err(format!(
                        "expected a release such as \"7.1\", found {other}"
                    )),
                }
                .map_err(|m| c.err(k.span(), "scenario.kernel", m))?;
                (v, Origin::File(Some(line)))
            }
        };
        let overrides = f
            .scenario
            .policy
            .iter()
            .map(|(k, v)| PolicyOverride {
                key: k.clone(),
                value: v.get_ref().clone(),
                origin: Origin::File(Some(c.line(v.span()))),
            })
            .collect();

        let iommu_cfg = match &f.iommu {
            Some(sec) => {
                let (cfg, given) = iommu::parse_section(&c, sec, &profile)?;
                if let Some(s) = &sec.smmu {
                    lines.smmu = Some(c.line(s.span()));
                }
                Some((cfg, given))
            }
            None => None,
        };

        // The workload's kind picks the section's reader.
        let kind_v = workload
            .get_ref()
            .get("kind")
            .ok_or_else(|| {
                c.err(
                    workload.span(),
                    "workload.kind",
                    "missing: which workload, one of the kinds in docs/scenarios.md",
                )
            })?
            .clone();
        let kind_name = kind_v.get_ref().as_str().unwrap_or("");
        lines.kind = Some(c.line(kind_v.span()));
        let Some(kind) = KINDS
            .iter()
            .copied()
            .flatten()
            .find(|k| k.name == kind_name)
        else {
            let kinds: Vec<&str> = KINDS.iter().copied().flatten().map(|k| k.name).collect();
            return Err(c.err(
                kind_v.span(),
                "workload.kind",
                format!(
                    "unknown workload kind `{kind_name}`; known kinds: {}",
                    kinds.join(", ")
                ),
            ));
        };
        let shared = Shared {
            profile: &profile,
            iommu: iommu_cfg.as_ref().map(|(cfg, _)| cfg),
        };
        let w = (kind.parse)(&c, workload, &shared)?;

        let device = match (&f.device, w.uses_dma_api()) {
            (Some(_), true) if w.own_devices() => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(kind_v.span()),
                    "device",
                    format!(
                        "a {} workload names its devices in [[workload.device]]: remove [device]",
                        w.kind()
                    ),
                ));
            }
            (None, true) if w.own_devices() => crate::device::Device::new("none", true, 64),
            (Some(d), true) => {
                lines.mask = Some(c.line(d.dma_mask_bits.span()));
                lines.numa_node = d.numa_node.as_ref().map(|n| c.line(n.span()));
                device(&c, d)?
            }
            (None, true) => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(doc_span),
                    "device",
                    format!(
                        "missing: a {} workload drives a device; give a [device] section",
                        w.kind()
                    ),
                ));
            }
            (Some(_), false) => {
                return Err(InputError::at(
                    file,
                    text,
                    Some(kind_v.span()),
                    "device",
                    format!(
                        "a {} workload calls the iommu core directly, with no device: remove [device], or use a streaming workload to drive a device through iommu-dma",
                        w.kind()
                    ),
                ));
            }
            (None, false) => crate::device::Device::new("iommu-core", true, 64),
        };

        let swiotlb = match &f.swiotlb {
            Some(sec) => {
                if !w.uses_swiotlb() {
                    return Err(InputError::at(
                        file,
                        text,
                        Some(kind_v.span()),
                        "swiotlb",
                        format!(
                            "a {} workload sets up no bounce pool; [swiotlb] applies to forwarding and bounce workloads",
                            w.kind()
                        ),
                    ));
                }
                if let Some(a) = &sec.areas {
                    lines.areas = Some(c.line(a.span()));
                }
                swiotlb_spec(&c, sec)?
            }
            None => SwiotlbSpec::default(),
        };

        let boot = match &f.boot {
            Some(b) => boot_section(&c, b, &mut lines)?,
            None => CmaBoot::default(),
        };

        let (iommu, iommu_given) = match iommu_cfg {
            Some((cfg, given)) => (Some(cfg), given),
            None => (None, iommu::IommuGiven::default()),
        };
        let mut s = Scenario {
            name: f.scenario.name,
            file: file.to_string(),
            policies: Policies::preset(
                kernel,
                &Target::of(
                    &profile,
                    iommu.is_some(),
                    w.uses_swiotlb(),
                    w.uses_dma_api(),
                )
                .with_pci_device(w.pci_device())
                .with_iova_alloc(w.allocates_iovas()),
            ),
            profile,
            kernel,
            kernel_origin,
            overrides,
            device,
            swiotlb,
            iommu,
            iommu_given,
            workload: w,
            boot,
            lines,
            profile_sets: Vec::new(),
            source: std::rc::Rc::new((file.to_string(), text.to_string(), dir.to_path_buf())),
        };
        s.resolve()?;
        Ok(s)
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
            self.iommu.is_some(),
            self.workload.uses_swiotlb(),
            self.workload.uses_dma_api(),
        )
        .with_pci_device(self.workload.pci_device())
        .with_iova_alloc(self.workload.allocates_iovas())
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
        for a in sets {
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| InputError::new("<argument>", format!("`{a}` is not KEY=VALUE")))?;
            edited = crate::input::set_key(file, &edited, k.trim(), v.trim())?;
        }
        let named = |e: InputError| {
            if e.file == "<argument>" {
                e
            } else {
                InputError::new("<argument>", format!("{}: {}", sets.join(","), e.message))
            }
        };
        let mut t =
            Scenario::parse_on(file, &edited, dir, Some(self.profile.clone())).map_err(named)?;
        t.profile_sets = self.profile_sets.clone();
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

    /// Resolve again; on an error, put the scenario back as it was, so a refused override
    /// leaves it usable.
    fn resolve_or(&mut self, before: Scenario) -> Result<(), InputError> {
        let r = self.resolve();
        if r.is_err() {
            *self = before;
        }
        r
    }

    fn error(&self, origin: &Origin, key: &str, message: String) -> InputError {
        match origin {
            Origin::File(line) => InputError {
                file: self.file.clone(),
                line: *line,
                key: Some(key.to_string()),
                message,
            },
            Origin::Argument => InputError {
                file: "<argument>".to_string(),
                line: None,
                key: Some(key.to_string()),
                message,
            },
        }
    }

    /// Presets for the release on this platform, then every override, each checked against the
    /// registry and the target; then the checks between sections.
    fn resolve(&mut self) -> Result<(), InputError> {
        if let Workload::Forwarding(_) = self.workload
            && self.profile.arch() != Arch::X86_64
        {
            return Err(self.error(
                &Origin::File(self.lines.platform),
                "scenario.platform",
                format!(
                    "a forwarding workload models ixgbe on 2012 x86-64; platform `{}` is {}",
                    self.profile.name(),
                    self.profile.arch().name()
                ),
            ));
        }
        let t = self.target();
        if !self.kernel.modelled_on(t.arch) {
            return Err(self.error(
                &self.kernel_origin,
                "scenario.kernel",
                format!(
                    "Linux {} cannot run on platform `{}`: {}",
                    self.kernel,
                    self.profile.name(),
                    self.kernel.unmodelled_reason(t.arch)
                ),
            ));
        }
        let mut p = Policies::preset(self.kernel, &t);
        for o in &self.overrides {
            let key = match o.origin {
                Origin::File(_) => format!("scenario.policy.{}", o.key),
                Origin::Argument => format!("--policy {}", o.key),
            };
            let d = crate::policy::def(&o.key).map_err(|m| self.error(&o.origin, &key, m))?;
            d.applies(&t).map_err(|why| {
                self.error(
                    &o.origin,
                    &key,
                    format!("policy `{}` does not apply to this scenario: {why}", o.key),
                )
            })?;
            p.set(&o.key, &o.value)
                .map_err(|m| self.error(&o.origin, &key, m))?;
        }
        if p.invalidation == crate::iommu::dma_fq::Invalidation::Lazy
            && self.kernel < crate::policy::LAZY_SINCE
        {
            let o = self
                .overrides
                .iter()
                .rev()
                .find(|o| o.key == "invalidation");
            let origin = o.map_or(Origin::File(None), |o| o.origin.clone());
            return Err(self.error(
                &origin,
                "invalidation",
                format!(
                    "lazy invalidation (iommu.strict=0) reached arm-smmu and arm-smmu-v3 in Linux {}; the scenario runs {}",
                    crate::policy::LAZY_SINCE,
                    self.kernel
                ),
            ));
        }
        self.policies = p;
        self.check()
    }

    /// Checks between sections that an override (`--platform`, `--kernel`, `--policy`) can
    /// break, and the profile's coverage of every operation the run will price.
    fn check(&mut self) -> Result<(), InputError> {
        let file = |line: Option<usize>| Origin::File(line);
        if let Some(n) = self.swiotlb.areas
            && n != 1
            && !self.policies.swiotlb_rules.has_areas()
        {
            return Err(self.error(
                &file(self.lines.areas),
                "swiotlb.areas",
                format!(
                    "{n} areas, but swiotlb before 6.0 (Linux {}, swiotlb_rules={}) has one pool lock and no areas; areas came with 6.0",
                    self.kernel,
                    crate::types::Choice::name(self.policies.swiotlb_rules)
                ),
            ));
        }
        if self.iommu.is_some() && !self.workload.as_kind().behind_iommu() {
            return Err(self.error(
                &file(self.lines.kind),
                "iommu",
                format!(
                    "a {} workload's device does not sit behind an IOMMU in this model; remove [iommu]",
                    self.workload.kind()
                ),
            ));
        }
        if let Some(cfg) = self.iommu.as_mut() {
            self.profile
                .require_wmb(&format!("scenario `{}` (an [iommu] domain)", self.name))?;
            let Some(p) = iommu::platform_smmu(&self.profile) else {
                return Err(InputError {
                    file: self.profile.origin.clone(),
                    line: None,
                    key: Some("smmu".into()),
                    message: format!(
                        "missing, but scenario `{}` drives an SMMU: the platform must price its operations",
                        self.name
                    ),
                });
            };
            if !self.iommu_given.coherent_walk {
                cfg.coherent_walk = self.profile.model.smmu.is_some_and(|s| s.coherent_walk);
            }
            if !self.iommu_given.smmu {
                cfg.smmu = p;
            } else if p != cfg.smmu {
                let msg = format!(
                    "{} does not match the platform `{}`, whose [smmu] is {}",
                    cfg.smmu.name(),
                    self.profile.name(),
                    p.name()
                );
                return Err(self.error(&file(self.lines.smmu), "iommu.smmu", msg));
            }
        }
        // A device sits on a node of the platform's topology that has memory (`dev_to_node()`
        // names a node whose memory its coherent allocations prefer); a platform without
        // `[numa]` has one node, 0.
        if let Some(n) = self.device.numa_node {
            let msg = match &self.profile.numa {
                None if n != 0 => Some(format!(
                    "node {n}, but platform `{}` has one memory node (node 0)",
                    self.profile.name()
                )),
                Some(t) if n as usize >= t.nodes.len() => Some(format!(
                    "node {n} is out of range: platform `{}` has nodes 0 to {}",
                    self.profile.name(),
                    t.nodes.len() - 1
                )),
                Some(t) if !t.has_memory(n) => Some(format!(
                    "node {n} of platform `{}` has no memory: a device sits on a node with memory",
                    self.profile.name()
                )),
                _ => None,
            };
            if let Some(msg) = msg {
                return Err(self.error(&file(self.lines.numa_node), "device.numa_node", msg));
            }
        }
        self.check_boot()?;
        self.workload.as_kind().check(self)?;
        let arch = crate::setup::arch_dma(&self.profile, &self.policies);
        if self.workload.uses_dma_api() {
            self.profile
                .require_ops(arch.required_ops(), &format!("{} dma-direct", arch.name()))?;
        } else if self.iommu.is_some_and(|c| !c.coherent_walk) {
            self.profile.require_ops(
                arch.required_ops(),
                "a non-coherent SMMU table walker (PTE cleaning)",
            )?;
        }
        Ok(())
    }

    /// Whether the run boots as the kernel does on a NUMA platform with an SMMUv3
    /// ([`crate::setup::Machine::boot_numa_smmu_v3`]): the SMMU probes, its command queue lands
    /// where boot's CMA areas put it, and every command list is priced against that node.
    pub fn probes_smmu_v3(&self) -> bool {
        self.workload.as_kind().probes_smmu()
            && crate::setup::Machine::numa_smmu_v3(&self.profile, self.iommu.as_ref())
    }

    /// The node of the CPU making the calls: the device's (a driver's calls run where its
    /// device and interrupts are), else the SMMU's when the run probes one, else node 0.
    pub fn cpu_node(&self) -> u32 {
        self.device.numa_node.unwrap_or_else(|| {
            self.profile
                .numa
                .as_ref()
                .filter(|_| self.probes_smmu_v3())
                .and_then(|t| t.first_of(crate::platform::numa::InitiatorKind::Smmu))
                .map_or(0, |i| i.node)
        })
    }

    /// `[boot]` against the workload and the platform's memory. An area the scenario asks for
    /// that is larger than the memory it must come from is bad input; one that fits in memory
    /// but cannot be placed (other reservations, `@base`/`-limit`) is the kernel's result:
    /// `cma_declare_contiguous_nid()` fails and boot logs it. A parameter the release lacks is
    /// a result too (ignored at boot), so the release is not checked here.
    fn check_boot(&self) -> Result<(), InputError> {
        let b = &self.boot;
        if *b == CmaBoot::default() {
            return Ok(());
        }
        let first = [
            self.lines.boot_cma,
            self.lines.boot_cma_pernuma,
            self.lines.boot_numa_cma,
        ]
        .into_iter()
        .flatten()
        .min();
        if !self.workload.as_kind().own_devices() && !self.probes_smmu_v3() {
            return Err(self.error(
                &Origin::File(first),
                "boot",
                format!(
                    "a {} workload allocates no coherent memory here, so CMA boot parameters change nothing; [boot] applies to a coherent workload, or to a streaming or IOMMU workload behind an SMMUv3 on a NUMA platform (whose command queue boot's CMA places)",
                    self.workload.kind()
                ),
            ));
        }
        // The coherent kind's own check has required a topology.
        let Some(t) = &self.profile.numa else {
            return Ok(());
        };
        let mib = |n: u64| crate::report::human_bytes(n);
        let at =
            |line: Option<usize>, key: &str, msg: String| self.error(&Origin::File(line), key, msg);
        if let Some(c) = b.cma {
            let total: u64 = t.memory_nodes().map(|n| n.mem_size).sum();
            if c.size > total {
                return Err(at(
                    self.lines.boot_cma,
                    "boot.cma",
                    format!(
                        "an area of {} is larger than all of platform `{}`'s memory ({})",
                        mib(c.size),
                        self.profile.name(),
                        mib(total)
                    ),
                ));
            }
        }
        if let Some(size) = b.cma_pernuma
            && let Some(n) = t.memory_nodes().find(|n| n.mem_size < size)
        {
            return Err(at(
                self.lines.boot_cma_pernuma,
                "boot.cma_pernuma",
                format!(
                    "an area of {} on every node, but node {} of platform `{}` has {} of memory",
                    mib(size),
                    n.id,
                    self.profile.name(),
                    mib(n.mem_size)
                ),
            ));
        }
        for &(node, size) in &b.numa_cma {
            let line = self.lines.boot_numa_cma;
            let msg = match t.nodes.get(node as usize) {
                None => Some(format!(
                    "node {node} is out of range: platform `{}` has nodes 0 to {}",
                    self.profile.name(),
                    t.nodes.len() - 1
                )),
                Some(n) if n.mem_size == 0 => Some(format!(
                    "node {node} of platform `{}` has no memory: no area can be reserved there",
                    self.profile.name()
                )),
                Some(n) if size > n.mem_size => Some(format!(
                    "an area of {} is larger than node {node}'s memory ({})",
                    mib(size),
                    mib(n.mem_size)
                )),
                _ => None,
            };
            if let Some(msg) = msg {
                return Err(at(line, "boot.numa_cma", msg));
            }
        }
        Ok(())
    }

    /// Which `dma_map_ops` the kernel gives this scenario's device: iommu-dma behind an
    /// IOMMU; a bounce pool where the workload needs one (on x86-64 before 5.0, lib/swiotlb.c's
    /// own `swiotlb_dma_ops`; dma-direct over the pool otherwise); dma-direct otherwise.
    pub fn dma_ops(&self) -> DmaOpsKind {
        if self.iommu.is_some() {
            return DmaOpsKind::IommuDma;
        }
        if !self.workload.uses_swiotlb() {
            // ARM had no dma-direct before 5.x; every modelled ARMv7 release has arm_dma_ops.
            if self.profile.arch() == Arch::Armv7 {
                return DmaOpsKind::ArmDma;
            }
            return DmaOpsKind::Direct;
        }
        // lib/swiotlb.c's own ops served x86-64 until 5.0, when they were merged into dma-direct
        // ("dma-direct: merge swiotlb_dma_ops into the dma_direct code").
        match (self.profile.arch(), self.policies.swiotlb_rules) {
            (Arch::X86_64, rules) if rules.own_dma_ops() => DmaOpsKind::Swiotlb2012(rules),
            (_, rules) => DmaOpsKind::DirectSwiotlb(rules),
        }
    }

    /// What setup needs to give this scenario's device its ops.
    pub fn device_setup(&self) -> DeviceSetup<'_> {
        DeviceSetup {
            profile: &self.profile,
            policies: &self.policies,
            device: &self.device,
            swiotlb: &self.swiotlb,
            iommu: self.iommu.as_ref(),
            ops: self.dma_ops(),
        }
    }

    /// A rough count of the model's steps this run will take (a cache line maintained, a PTE
    /// written, a packet forwarded, ...), from the workload alone, before anything runs. The
    /// model takes a few nanoseconds of wall time per step.
    pub fn work(&self) -> u128 {
        self.workload.as_kind().work(self)
    }

    /// The cache line a run's work estimate counts in ([`WorkloadKind::work`]).
    pub(crate) fn work_line(&self) -> u128 {
        u128::from(self.profile.model.line_bytes.max(1))
    }

    /// The page a run's work estimate counts IOMMU steps in: the domain's granule, or 4 KB.
    pub(crate) fn work_page(&self) -> u128 {
        u128::from(self.iommu.map_or(4096, |c| c.granule))
    }

    /// The outer steps the run counts with [`Progress::advance`]: iterations (per size, for a
    /// sweep or a bounce workload), or packets.
    pub fn progress_total(&self) -> u64 {
        self.workload.as_kind().progress_total()
    }

    /// Refuse a run estimated above `max_work` steps (see [`DEFAULT_MAX_WORK`]).
    pub fn check_work(&self, max_work: u128) -> Result<(), InputError> {
        let w = self.work();
        if w > max_work {
            return Err(InputError::new(
                &self.file,
                format!(
                    "this run would take about {w} model steps (hours at a few ns each); the limit is {max_work}: make the workload smaller, or raise the limit with --max-work"
                ),
            ));
        }
        Ok(())
    }

    /// The named software costs this scenario's run can charge: the layers setup gives its
    /// device (or, for an IOMMU workload, the domain and the IOVA allocator), plus the driver's.
    pub fn sw_keys(&self) -> Vec<SwKey> {
        let mut layers = Vec::new();
        if self.workload.uses_dma_api() {
            layers.push(Layer::DmaApi);
            match self.dma_ops() {
                DmaOpsKind::Direct => layers.push(Layer::DmaDirect),
                DmaOpsKind::ArmDma => layers.push(Layer::ArmDma),
                DmaOpsKind::DirectSwiotlb(_) => {
                    layers.extend([Layer::DmaDirect, Layer::Swiotlb, Layer::SwiotlbPool])
                }
                DmaOpsKind::Swiotlb2012(_) => {
                    layers.extend([Layer::Swiotlb2012, Layer::SwiotlbPool])
                }
                DmaOpsKind::IommuDma => {
                    layers.extend([Layer::IommuDma, Layer::Iova]);
                    if self.policies.invalidation == crate::iommu::dma_fq::Invalidation::Lazy {
                        layers.push(Layer::DmaFq);
                    }
                }
            }
        } else if self.workload.allocates_iovas() {
            layers.push(Layer::Iova);
        }
        if let Some(cfg) = &self.iommu {
            layers.extend([Layer::IommuCore, Layer::IoPgtableArm]);
            layers.push(match cfg.smmu {
                SmmuModel::Mmu500 => Layer::ArmSmmu,
                SmmuModel::SmmuV3 { .. } => Layer::ArmSmmuV3,
            });
        }
        layers.extend(self.workload.as_kind().driver_layers(self));
        // x86-64's __pa() is a call up to 3.8: dma_map_single and the 2012 swiotlb's virtual
        // bookkeeping make it (a driver that makes it too says so in its layers).
        if self.workload.uses_dma_api()
            && self.policies.phys_addr == crate::arch::x86::physaddr::PhysAddrKind::Call
        {
            layers.push(Layer::X86PhysAddr);
        }
        SwKey::charged_by(&layers)
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

fn device(c: &Ctx, d: &DeviceSection) -> Result<crate::device::Device, InputError> {
    let bits = *d.dma_mask_bits.get_ref();
    if !(12..=64).contains(&bits) {
        return Err(c.err(
            d.dma_mask_bits.span(),
            "device.dma_mask_bits",
            format!("must be 12..=64, found {bits}"),
        ));
    }
    let mut device = crate::device::Device::new(&d.name, d.coherent, bits as u32);
    if let Some(n) = &d.numa_node {
        let v = *n.get_ref();
        if !(0..=1023).contains(&v) {
            return Err(c.err(
                n.span(),
                "device.numa_node",
                format!("must be 0..=1023, found {v}"),
            ));
        }
        device.numa_node = Some(v as u32);
    }
    Ok(device)
}

/// Read `[boot]` as the kernel reads its command line: `early_cma()`, `early_cma_pernuma()`
/// (`memparse`), `early_numa_cma()`. Whether the release has each parameter, and whether the
/// areas fit the platform's memory, are checked at resolve (an override can change both).
fn boot_section(c: &Ctx, b: &BootSection, lines: &mut Lines) -> Result<CmaBoot, InputError> {
    let mut boot = CmaBoot::default();
    if let Some(v) = &b.cma {
        lines.boot_cma = Some(c.line(v.span()));
        boot.cma = Some(
            CmaCmdline::parse(v.get_ref().trim()).map_err(|m| c.err(v.span(), "boot.cma", m))?,
        );
    }
    if let Some(v) = &b.cma_pernuma {
        lines.boot_cma_pernuma = Some(c.line(v.span()));
        boot.cma_pernuma = match memparse(v.get_ref().trim()) {
            Some((n, "")) => Some(n),
            _ => {
                return Err(c.err(
                    v.span(),
                    "boot.cma_pernuma",
                    format!(
                        "expected a size such as \"32M\" or \"0x2000000\", found \"{}\"",
                        v.get_ref()
                    ),
                ));
            }
        };
    }
    if let Some(v) = &b.numa_cma {
        lines.boot_numa_cma = Some(c.line(v.span()));
        boot.numa_cma =
            parse_numa_cma(v.get_ref().trim()).map_err(|m| c.err(v.span(), "boot.numa_cma", m))?;
    }
    if let Some(v) = &b.cma_size_mbytes {
        lines.boot_cma = lines.boot_cma.or(Some(c.line(v.span())));
        boot.size_mbytes = c.int(v, "boot.cma_size_mbytes", 0..=(1 << 20))?;
    }
    Ok(boot)
}

fn swiotlb_spec(c: &Ctx, sec: &SwiotlbSection) -> Result<SwiotlbSpec, InputError> {
    use crate::dma::swiotlb::{IO_TLB_MAX_MAPPING, IO_TLB_SEGSIZE, SwiotlbError};
    let mut spec = SwiotlbSpec::default();
    if let Some(v) = &sec.size {
        let n = c.size(v.get_ref(), v.span(), "swiotlb.size")?;
        if !n.is_multiple_of(IO_TLB_MAX_MAPPING) {
            return Err(c.err(
                v.span(),
                "swiotlb.size",
                SwiotlbError::BadSize(n).to_string(),
            ));
        }
        if n > MAX_SWIOTLB {
            return Err(c.err(
                v.span(),
                "swiotlb.size",
                format!("at most {} MiB in the model", MAX_SWIOTLB >> 20),
            ));
        }
        spec.size = n;
    }
    if let Some(f) = sec.force {
        spec.force = f;
    }
    if let Some(a) = &sec.areas {
        let n = c.int(a, "swiotlb.areas", 1..=1024)? as u32;
        if !n.is_power_of_two() {
            return Err(c.err(
                a.span(),
                "swiotlb.areas",
                SwiotlbError::AreasNotPowerOfTwo(n).to_string(),
            ));
        }
        let nslabs = spec.size >> crate::dma::swiotlb::IO_TLB_SHIFT;
        if !nslabs.is_multiple_of(u64::from(n) * IO_TLB_SEGSIZE as u64) {
            return Err(c.err(
                a.span(),
                "swiotlb.areas",
                SwiotlbError::TooManyAreas { nareas: n, nslabs }.to_string(),
            ));
        }
        spec.areas = Some(n);
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"
[scenario]
name = "t"
platform = "dimensity9500"
kernel = "7.0"
policy = { sync = "batched" }

[device]
name = "dev"
coherent = false
dma_mask_bits = 64

[workload]
kind = "streaming"
buffer = "1M"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 3
"#;

    fn parse(text: &str) -> Result<Scenario, InputError> {
        Scenario::parse("s.toml", text, std::path::Path::new("."))
    }

    #[test]
    fn good_scenario_parses_and_overrides_apply() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.policies.kernel, KernelVersion(7, 0));
        assert_eq!(s.policies.sync, crate::dma::sync_policy::SyncKind::Batched);
        let w = s.streaming().unwrap();
        assert_eq!(w.buffer_bytes, 1 << 20);
        assert_eq!(w.entry_bytes, vec![4096]);
    }

    #[test]
    fn errors_name_key_and_line() {
        let cases = [
            (
                "buffer = \"1M\"",
                "buffer = \"1 furlong\"",
                "workload.buffer",
                15,
            ),
            (
                "direction = \"bidirectional\"",
                "direction = \"up\"",
                "workload.direction",
                17,
            ),
            (
                "calls = \"map_sg+unmap_sg\"",
                "calls = \"dance\"",
                "workload.calls",
                18,
            ),
            (
                "iterations = 3",
                "iterations = -3",
                "workload.iterations",
                19,
            ),
            (
                "dma_mask_bits = 64",
                "dma_mask_bits = 99",
                "device.dma_mask_bits",
                11,
            ),
            (
                "policy = { sync = \"batched\" }",
                "policy = { sync = \"never\" }",
                "scenario.policy.sync",
                6,
            ),
            (
                "platform = \"dimensity9500\"",
                "platform = \"nosuch\"",
                "scenario.platform",
                4,
            ),
            (
                "kernel = \"7.0\"",
                "kernel = \"seven\"",
                "scenario.kernel",
                5,
            ),
            (
                "entry = \"4K\"",
                "entry = \"4K\"\ncolour = \"red\"",
                "workload.colour",
                17,
            ),
        ];
        for (from, to, key, line) in cases {
            let e = parse(&GOOD.replace(from, to)).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
            assert_eq!(e.line, Some(line), "{to}: {e}");
        }
        let e = parse(&GOOD.replace(
            "iterations = 3",
            "iterations = 3\nattrs = [\"weak_ordering\"]",
        ))
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.attrs"), "{e}");
        assert_eq!(e.line, Some(20), "{e}");
        let e = parse(&GOOD.replace("iterations = 3\n", "")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.iterations"), "{e}");
        assert!(e.line.is_some(), "{e}");
    }

    const FORWARDING: &str = r#"
[scenario]
name = "f"
platform = "x86-2012-ixgbe"
kernel = "3.6"

[device]
name = "ixgbe"
coherent = true
dma_mask_bits = 64

[workload]
kind = "forwarding"
packets = 10
"#;

    #[test]
    fn forwarding_defaults_come_from_ixgbe_and_the_profile() {
        let s = parse(FORWARDING).unwrap();
        let Workload::Forwarding(f) = &s.workload else {
            panic!("forwarding")
        };
        assert_eq!(
            (f.packets, f.packet_bytes, f.rx_ring, f.rx_reuse_percent),
            (10, 60, 512, 100)
        );
        assert_eq!(Some(f.cpus), s.profile.cpus);
        assert_eq!(s.swiotlb, SwiotlbSpec::default());
        let s = parse(&format!(
            "{FORWARDING}cpus = 2\n[swiotlb]\nsize = \"1M\"\nforce = true\n"
        ))
        .unwrap();
        assert_eq!(s.swiotlb.size, 1 << 20);
        assert!(s.swiotlb.force);
        let Workload::Forwarding(f) = &s.workload else {
            panic!("forwarding")
        };
        assert_eq!(f.cpus, 2);
    }

    #[test]
    fn forwarding_errors_name_key_and_line() {
        for (extra, key, line) in [
            ("cpus = 0\n", "workload.cpus", 15),
            ("iterations = 3\n", "workload.iterations", 15),
            ("[swiotlb]\nsize = \"300K\"\n", "swiotlb.size", 16),
            ("[swiotlb]\nareas = 2\n", "swiotlb.areas", 16),
        ] {
            let e = parse(&format!("{FORWARDING}{extra}")).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{extra}: {e}");
            assert_eq!(e.line, Some(line), "{extra}: {e}");
        }
        let e = parse(&FORWARDING.replace("packets = 10\n", "")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.packets"), "{e}");
    }

    #[test]
    fn every_shipped_scenario_is_built_in_under_its_file_name() {
        let mut files: Vec<String> = std::fs::read_dir("scenarios")
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".toml").map(str::to_string)
            })
            .collect();
        files.sort();
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, files);
        for (name, text) in BUILTIN {
            let on_disk = std::fs::read_to_string(format!("scenarios/{name}.toml")).unwrap();
            assert_eq!(*text, on_disk, "{name}");
        }
    }

    #[test]
    fn a_shipped_scenario_loads_by_name_and_a_file_of_that_name_wins() {
        let s = Scenario::load("batched-sync").unwrap();
        assert_eq!(s.name, "batched-sync");
        let info = builtin_list();
        let b = info.iter().find(|i| i.name == "batched-sync").unwrap();
        assert_eq!(
            (b.kind.as_str(), b.platform.as_str()),
            ("streaming", "dimensity9500")
        );
        assert!(b.description.ends_with('.'), "{}", b.description);
        let e = Scenario::load("no-such-scenario").unwrap_err();
        assert!(e.message.contains("batched-sync"), "{e}");
        // A path that exists is read as the file, never replaced by the built-in.
        let dir = std::env::temp_dir().join(format!("dmasim-builtin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("batched-sync");
        std::fs::write(&f, "not toml [").unwrap();
        let r = Scenario::load(&f.to_string_lossy());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(r.is_err());
    }
}
