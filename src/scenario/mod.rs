//! Scenarios: a platform, the kernel's policies, a device and a workload, as a TOML file.
//!
//! Kernel counterpart: none — a scenario is what a driver would do to the DMA API, written down.
//! The format is documented in docs/scenarios.md.
//!
//! Invariants: a scenario that parses has been checked completely (sizes, directions, calls,
//! platform, policies) before anything runs, so running it cannot fail on bad input; every error
//! names the file, the line and the key. Running is deterministic: the same scenario gives the same
//! [`RunResult`] bit for bit.

pub mod bounce;
pub mod forwarding;
pub mod iommu;
pub mod run;

use crate::hw::sw_costs::{Layer, SwKey};
use crate::input::{InputError, parse_size, parse_toml};
use crate::platform::Profile;
use crate::policy::{KernelVersion, LATEST, Policies};
use crate::types::{DmaAttrs, DmaDirection};
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub use run::{CallStat, RunResult, StackRow, run};

/// What running a scenario produced, by workload kind.
#[derive(Clone, Debug)]
pub enum Outcome {
    Streaming(RunResult),
    Forwarding(forwarding::ForwardingResult),
    Bounce(bounce::BounceResult),
}

/// Run any scenario on the Model.
pub fn execute(s: &Scenario) -> Result<Outcome, crate::dma::DmaError> {
    match &s.workload {
        Workload::Streaming(_) => run(s).map(Outcome::Streaming),
        Workload::Forwarding(f) => forwarding::run(s, f).map(Outcome::Forwarding),
        Workload::Bounce(b) => bounce::run(s, b).map(Outcome::Bounce),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    scenario: ScenarioSection,
    device: DeviceSection,
    workload: WorkloadSection,
    swiotlb: Option<SwiotlbSection>,
}

/// `[swiotlb]`: the bounce pool as `swiotlb=` on the kernel command line would set it up.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwiotlbSection {
    size: Option<Spanned<toml::Value>>,
    force: Option<bool>,
    areas: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScenarioSection {
    pub(crate) name: String,
    pub(crate) platform: Spanned<String>,
    pub(crate) kernel: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) policy: BTreeMap<String, Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceSection {
    name: String,
    coherent: bool,
    dma_mask_bits: Spanned<i64>,
    numa_node: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadSection {
    kind: Spanned<String>,
    // streaming
    buffer: Option<Spanned<toml::Value>>,
    entry: Option<Spanned<toml::Value>>,
    entries: Option<Spanned<Vec<toml::Value>>>,
    calls: Option<Spanned<String>>,
    #[serde(default)]
    attrs: Option<Spanned<Vec<String>>>,
    // streaming and bounce
    direction: Option<Spanned<String>>,
    iterations: Option<Spanned<i64>>,
    // forwarding
    packets: Option<Spanned<i64>>,
    packet_bytes: Option<Spanned<i64>>,
    rx_ring: Option<Spanned<i64>>,
    rx_reuse_percent: Option<Spanned<i64>>,
    // forwarding and bounce
    cpus: Option<Spanned<i64>>,
    // bounce
    sizes: Option<Spanned<Vec<toml::Value>>>,
    in_flight: Option<Spanned<i64>>,
}

/// Which keys of `[workload]` each kind takes (besides `kind`).
const KIND_KEYS: &[(&str, &[&str])] = &[
    (
        "streaming",
        &[
            "buffer",
            "entry",
            "entries",
            "direction",
            "calls",
            "iterations",
            "attrs",
        ],
    ),
    (
        "forwarding",
        &[
            "packets",
            "packet_bytes",
            "rx_ring",
            "rx_reuse_percent",
            "cpus",
        ],
    ),
    (
        "bounce",
        &["sizes", "direction", "iterations", "cpus", "in_flight"],
    ),
];

/// Which DMA API calls a streaming workload makes each iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// `dma_map_sg` then `dma_unmap_sg` of the whole list.
    MapUnmapSg,
    /// The list is mapped once; each iteration `dma_sync_sg_for_device` then `dma_sync_sg_for_cpu`.
    SyncSg,
    /// Each entry on its own: `dma_map_page` then `dma_unmap_page`.
    MapUnmapPage,
}

impl Calls {
    pub const NAMES: &[&str] = &[
        "map_sg+unmap_sg",
        "sync_sg_for_device+for_cpu",
        "map_page+unmap_page",
    ];

    pub fn parse(s: &str) -> Option<Calls> {
        match s {
            "map_sg+unmap_sg" => Some(Calls::MapUnmapSg),
            "sync_sg_for_device+for_cpu" | "sync_sg" => Some(Calls::SyncSg),
            "map_page+unmap_page" => Some(Calls::MapUnmapPage),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Calls::MapUnmapSg => Calls::NAMES[0],
            Calls::SyncSg => Calls::NAMES[1],
            Calls::MapUnmapPage => Calls::NAMES[2],
        }
    }
}

/// A streaming loop over one scatter-gather buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Streaming {
    pub buffer_bytes: u64,
    /// Entry sizes, cycled over the buffer.
    pub entry_bytes: Vec<u32>,
    pub direction: DmaDirection,
    pub calls: Calls,
    pub iterations: u32,
    /// `DMA_ATTR_*` passed to map and unmap calls.
    pub attrs: DmaAttrs,
}

/// A forwarding loop: packets received, routed and transmitted by an ixgbe-style driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forwarding {
    pub packets: u64,
    /// Frame length without FCS (60 for the smallest Ethernet frame).
    pub packet_bytes: u32,
    /// Receive descriptors (and receive buffers) per ring.
    pub rx_ring: u32,
    /// Share of received pages the driver can hand back to the device (ixgbe's page reuse).
    pub rx_reuse_percent: u32,
    /// CPUs routing in parallel, each with its own queue pair: packets per second = cpus / CPU
    /// time per packet.
    pub cpus: u32,
}

/// A map/unmap sweep through the swiotlb bounce pool, from several CPUs in turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounce {
    /// Mapping sizes, each at most 256 KiB (one segment).
    pub sizes: Vec<u64>,
    pub direction: DmaDirection,
    pub iterations: u32,
    /// CPUs mapping at once, interleaved round robin (the model has one clock).
    pub cpus: u32,
    /// Mappings each CPU holds before unmapping them.
    pub in_flight: u32,
}

/// What a scenario does.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    Streaming(Streaming),
    Forwarding(Forwarding),
    Bounce(Bounce),
}

impl Workload {
    pub fn kind(&self) -> &'static str {
        match self {
            Workload::Streaming(_) => "streaming",
            Workload::Forwarding(_) => "forwarding",
            Workload::Bounce(_) => "bounce",
        }
    }
}

/// The swiotlb pool a scenario sets up (`[swiotlb]`; defaults: 64 MiB, not forced, areas as the
/// release has them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwiotlbSpec {
    pub size: u64,
    pub force: bool,
    /// `None`: the release's default (one pool lock before 6.0; one area per CPU, rounded up to
    /// a power of two, from 6.0).
    pub areas: Option<u32>,
}

impl Default for SwiotlbSpec {
    fn default() -> Self {
        SwiotlbSpec {
            size: crate::dma::swiotlb::IO_TLB_DEFAULT_SIZE,
            force: false,
            areas: None,
        }
    }
}

/// Largest swiotlb pool a scenario may set up (the model keeps a slot table entry per 2 KiB).
pub const MAX_SWIOTLB: u64 = 1 << 30;

/// A checked scenario, ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    /// The file it was read from, for messages.
    pub file: String,
    pub profile: Profile,
    pub policies: Policies,
    pub device: crate::device::Device,
    pub workload: Workload,
    pub swiotlb: SwiotlbSpec,
}

impl Scenario {
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

/// Largest buffer a streaming scenario may ask for: the model keeps the list in memory.
pub const MAX_BUFFER: u64 = 64 << 30;
/// Most sg entries a list may have (the model holds every entry; 4M entries is 16 GiB of pages).
pub const MAX_ENTRIES: u64 = 1 << 22;

/// Where a value being checked came from, so errors can name the file, line and key.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
    pub(crate) text: &'a str,
}

impl Ctx<'_> {
    /// The `[scenario]` section's platform: a built-in name, or a profile path relative to `dir`.
    pub(crate) fn profile(
        &self,
        sec: &ScenarioSection,
        dir: &std::path::Path,
    ) -> Result<Profile, InputError> {
        let pname = sec.platform.get_ref();
        match Profile::load(pname) {
            Ok(p) => Ok(p),
            Err(e) if e.file == "<argument>" => {
                let rel = dir.join(pname);
                if rel.exists() {
                    Profile::load(&rel.to_string_lossy())
                } else {
                    Err(self.err(sec.platform.span(), "scenario.platform", e.message))
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The `[scenario]` section's kernel preset with its policy overrides applied.
    pub(crate) fn policies(&self, sec: &ScenarioSection) -> Result<Policies, InputError> {
        let kernel = match &sec.kernel {
            None => LATEST,
            Some(k) => KernelVersion::parse(k.get_ref()).ok_or_else(|| {
                self.err(
                    k.span(),
                    "scenario.kernel",
                    format!(
                        "expected a release such as \"7.1\", found \"{}\"",
                        k.get_ref()
                    ),
                )
            })?,
        };
        let mut policies = Policies::preset(kernel);
        for (k, v) in &sec.policy {
            policies
                .set(k, v.get_ref())
                .map_err(|m| self.err(v.span(), &format!("scenario.policy.{k}"), m))?;
        }
        Ok(policies)
    }

    /// An integer key that must lie in `range`.
    fn int(
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

    fn direction(&self, d: &Spanned<String>) -> Result<DmaDirection, InputError> {
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
}

impl Scenario {
    /// Read a scenario file. Its `platform` may be a built-in name or a path relative to the file.
    pub fn load(path: &str) -> Result<Scenario, InputError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InputError::new(path, format!("cannot read scenario: {e}")))?;
        let dir = std::path::Path::new(path)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default();
        Scenario::parse(path, &text, &dir)
    }

    pub fn parse(file: &str, text: &str, dir: &std::path::Path) -> Result<Scenario, InputError> {
        let f: ScenarioFile = parse_toml(file, text)?;
        let c = Ctx { file, text };

        let profile = c.profile(&f.scenario, dir)?;
        let policies = c.policies(&f.scenario)?;

        let bits = *f.device.dma_mask_bits.get_ref();
        if !(12..=64).contains(&bits) {
            return Err(c.err(
                f.device.dma_mask_bits.span(),
                "device.dma_mask_bits",
                format!("must be 12..=64, found {bits}"),
            ));
        }
        let mut device = crate::device::Device::new(&f.device.name, f.device.coherent, bits as u32);
        if let Some(n) = &f.device.numa_node {
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

        let w = &f.workload;
        let Some((kind, keys)) = KIND_KEYS.iter().find(|(k, _)| k == w.kind.get_ref()) else {
            let kinds: Vec<&str> = KIND_KEYS.iter().map(|k| k.0).collect();
            return Err(c.err(
                w.kind.span(),
                "workload.kind",
                format!(
                    "unknown workload kind `{}`; known kinds: {}",
                    w.kind.get_ref(),
                    kinds.join(", ")
                ),
            ));
        };
        for (key, span) in w.present_keys() {
            if !keys.contains(&key) {
                return Err(c.err(
                    span,
                    &format!("workload.{key}"),
                    format!(
                        "not a key of a {kind} workload; its keys are: kind, {}",
                        keys.join(", ")
                    ),
                ));
            }
        }
        let workload = match *kind {
            "streaming" => Workload::Streaming(streaming(&c, w)?),
            "forwarding" => Workload::Forwarding(forwarding(&c, w, &profile)?),
            _ => Workload::Bounce(bounce(&c, w)?),
        };
        let swiotlb = swiotlb_spec(&c, f.swiotlb.as_ref())?;

        let s = Scenario {
            name: f.scenario.name,
            file: file.to_string(),
            profile,
            policies,
            device,
            workload,
            swiotlb,
        };
        if let Err((key, msg)) = s.consistency() {
            let span = match key {
                "swiotlb.areas" => f
                    .swiotlb
                    .as_ref()
                    .and_then(|x| x.areas.as_ref())
                    .map(|a| a.span()),
                "scenario.platform" => Some(f.scenario.platform.span()),
                "workload.cpus" => w.cpus.as_ref().map(|x| x.span()),
                _ => None,
            }
            .unwrap_or(w.kind.span());
            return Err(c.err(span, key, msg));
        }
        s.check_profile()?;
        Ok(s)
    }

    /// Checks between sections that an override (`--platform`, `--kernel`) can break: the key to
    /// blame and why.
    fn consistency(&self) -> Result<(), (&'static str, String)> {
        let pre_areas = self.policies.kernel < KernelVersion(6, 0);
        if let Some(n) = self.swiotlb.areas
            && n != 1
            && (pre_areas || matches!(self.workload, Workload::Forwarding(_)))
        {
            return Err((
                "swiotlb.areas",
                format!(
                    "{n} areas, but swiotlb before Linux 6.0 (here {}) has one pool lock and no areas",
                    self.policies.kernel
                ),
            ));
        }
        match &self.workload {
            Workload::Forwarding(_) if self.profile.arch() != crate::platform::Arch::X86_64 => {
                Err((
                    "scenario.platform",
                    format!(
                        "a forwarding workload runs the 2012 x86-64 swiotlb_dma_ops; platform `{}` is {}",
                        self.profile.name(),
                        self.profile.arch().name()
                    ),
                ))
            }
            Workload::Forwarding(f) if f.cpus == 0 => Err((
                "workload.cpus",
                format!(
                    "missing: platform `{}` has no `platform.cpus`, so the scenario must say how many CPUs route",
                    self.profile.name()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The named software costs this scenario's run can charge: the layers `run`, `bounce` and
    /// `forwarding` build (bounce picks dma-direct over swiotlb from 6.0 or off x86-64, else the
    /// 2012 `swiotlb_dma_ops`).
    pub fn sw_keys(&self) -> Vec<SwKey> {
        use Layer::*;
        let modern = self.policies.kernel >= KernelVersion(6, 0)
            || self.profile.arch() != crate::platform::Arch::X86_64;
        SwKey::charged_by(match self.workload {
            Workload::Streaming(_) => &[DmaApi, DmaDirect],
            Workload::Bounce(_) if modern => &[DmaApi, DmaDirect, Swiotlb, SwiotlbPool],
            Workload::Bounce(_) => &[DmaApi, Swiotlb2012, SwiotlbPool],
            Workload::Forwarding(_) => &[DmaApi, Swiotlb2012, SwiotlbPool, IpForward],
        })
    }

    /// The profile must price every operation this scenario's arch layer can issue, and the
    /// sections must agree with each other (checked again after command-line overrides).
    pub fn check_profile(&self) -> Result<(), InputError> {
        if let Err((key, msg)) = self.consistency() {
            return Err(InputError {
                file: self.file.clone(),
                line: None,
                key: Some(key.to_string()),
                message: msg,
            });
        }
        if let Workload::Bounce(_) = self.workload {
            self.profile.require_copy("a bounce workload")?;
        }
        let arch = run::arch_for(&self.profile, &self.policies);
        self.profile
            .require_ops(arch.required_ops(), &format!("{} dma-direct", arch.name()))
    }
}

impl WorkloadSection {
    /// The keys given, with where they are.
    fn present_keys(&self) -> Vec<(&'static str, std::ops::Range<usize>)> {
        let mut v = Vec::new();
        macro_rules! key {
            ($($f:ident),*) => {$(
                if let Some(x) = &self.$f {
                    v.push((stringify!($f), x.span()));
                }
            )*};
        }
        key!(
            buffer,
            entry,
            entries,
            calls,
            attrs,
            direction,
            iterations,
            packets,
            packet_bytes,
            rx_ring,
            rx_reuse_percent,
            cpus,
            sizes,
            in_flight
        );
        v
    }
}

fn missing(c: &Ctx, w: &WorkloadSection, key: &str, what: &str) -> InputError {
    c.err(
        w.kind.span(),
        &format!("workload.{key}"),
        format!("missing: {what}"),
    )
}

fn streaming(c: &Ctx, w: &WorkloadSection) -> Result<Streaming, InputError> {
    let buffer = w
        .buffer
        .as_ref()
        .ok_or_else(|| missing(c, w, "buffer", "the buffer size, e.g. \"10M\""))?;
    let buffer_bytes = c.size(buffer.get_ref(), buffer.span(), "workload.buffer")?;
    if buffer_bytes > MAX_BUFFER {
        return Err(c.err(
            buffer.span(),
            "workload.buffer",
            format!("at most {MAX_BUFFER} bytes"),
        ));
    }
    let entry_bytes: Vec<u32> = match (&w.entry, &w.entries) {
        (Some(e), None) => vec![c.size(e.get_ref(), e.span(), "workload.entry")?],
        (None, Some(list)) if !list.get_ref().is_empty() => list
            .get_ref()
            .iter()
            .map(|v| c.size(v, list.span(), "workload.entries"))
            .collect::<Result<_, _>>()?,
        (None, Some(list)) => {
            return Err(c.err(list.span(), "workload.entries", "must not be empty"));
        }
        (Some(e), Some(_)) => {
            return Err(c.err(
                e.span(),
                "workload.entry",
                "give `entry` or `entries`, not both",
            ));
        }
        (None, None) => {
            return Err(c.err(
                w.kind.span(),
                "workload.entry",
                "missing: give `entry` (one size) or `entries` (a list)",
            ));
        }
    }
    .into_iter()
    .map(|n| u32::try_from(n).ok().filter(|&n| n <= 1 << 30))
    .collect::<Option<_>>()
    .ok_or_else(|| {
        c.err(
            w.entry.as_ref().map(|e| e.span()).unwrap_or(w.kind.span()),
            "workload.entry",
            "an sg entry is at most 1 GiB",
        )
    })?;
    let smallest = u64::from(*entry_bytes.iter().min().unwrap_or(&1));
    if buffer_bytes / smallest.max(1) > MAX_ENTRIES {
        return Err(c.err(
            buffer.span(),
            "workload.buffer",
            format!("{buffer_bytes} bytes in entries of {smallest} bytes is more than {MAX_ENTRIES} sg entries"),
        ));
    }
    let d = w
        .direction
        .as_ref()
        .ok_or_else(|| missing(c, w, "direction", "bidirectional, to_device or from_device"))?;
    let direction = c.direction(d)?;
    let calls_v = w.calls.as_ref().ok_or_else(|| {
        missing(
            c,
            w,
            "calls",
            &format!("one of {}", Calls::NAMES.join(", ")),
        )
    })?;
    let calls = Calls::parse(calls_v.get_ref()).ok_or_else(|| {
        c.err(
            calls_v.span(),
            "workload.calls",
            format!(
                "unknown calls `{}`; choose one of: {}",
                calls_v.get_ref(),
                Calls::NAMES.join(", ")
            ),
        )
    })?;
    let it = w
        .iterations
        .as_ref()
        .ok_or_else(|| missing(c, w, "iterations", "1..=1000000"))?;
    let iterations = c.int(it, "workload.iterations", 1..=1_000_000)? as u32;

    let mut attrs = DmaAttrs::NONE;
    if let Some(list) = &w.attrs {
        for a in list.get_ref() {
            match a.as_str() {
                "skip_cpu_sync" | "DMA_ATTR_SKIP_CPU_SYNC" => {
                    attrs = attrs.union(DmaAttrs::SKIP_CPU_SYNC)
                }
                _ => {
                    return Err(c.err(
                        list.span(),
                        "workload.attrs",
                        format!("unknown attribute `{a}`; known: skip_cpu_sync"),
                    ));
                }
            }
        }
    }
    Ok(Streaming {
        buffer_bytes,
        entry_bytes,
        direction,
        calls,
        iterations,
        attrs,
    })
}

/// Largest ixgbe receive buffer: half a 4 KiB page (`ixgbe_rx_bufsz()` of 3.6 without jumbo).
pub const IXGBE_RX_BUFSZ: u64 = 2048;

fn forwarding(c: &Ctx, w: &WorkloadSection, profile: &Profile) -> Result<Forwarding, InputError> {
    let packets = w.packets.as_ref().ok_or_else(|| {
        missing(
            c,
            w,
            "packets",
            "how many packets to forward, 1..=100000000",
        )
    })?;
    let packets = c.int(packets, "workload.packets", 1..=100_000_000)?;
    let packet_bytes = match &w.packet_bytes {
        Some(b) => c.int(b, "workload.packet_bytes", 60..=IXGBE_RX_BUFSZ as i64)? as u32,
        None => 60,
    };
    let rx_ring = match &w.rx_ring {
        Some(r) => {
            let n = c.int(r, "workload.rx_ring", 64..=4096)?;
            if n % 8 != 0 {
                return Err(c.err(
                    r.span(),
                    "workload.rx_ring",
                    format!(
                        "must be a multiple of 8 (IXGBE_REQ_RX_DESCRIPTOR_MULTIPLE), found {n}"
                    ),
                ));
            }
            n as u32
        }
        None => 512,
    };
    let rx_reuse_percent = match &w.rx_reuse_percent {
        Some(r) => c.int(r, "workload.rx_reuse_percent", 0..=100)? as u32,
        None => 100,
    };
    let cpus = match &w.cpus {
        Some(n) => c.int(n, "workload.cpus", 1..=4096)? as u32,
        // 0 = not given and the profile has none: reported by `consistency`.
        None => profile.cpus.unwrap_or(0),
    };
    Ok(Forwarding {
        packets,
        packet_bytes,
        rx_ring,
        rx_reuse_percent,
        cpus,
    })
}

/// Most memory a bounce workload may hold mapped at once (cpus × in_flight × largest size).
pub const MAX_BOUNCE_IN_FLIGHT: u64 = 1 << 30;

fn bounce(c: &Ctx, w: &WorkloadSection) -> Result<Bounce, InputError> {
    let list = w.sizes.as_ref().ok_or_else(|| {
        missing(
            c,
            w,
            "sizes",
            "mapping sizes, e.g. [\"512\", \"4K\", \"64K\"]",
        )
    })?;
    if list.get_ref().is_empty() {
        return Err(c.err(list.span(), "workload.sizes", "must not be empty"));
    }
    let max = crate::dma::swiotlb::IO_TLB_MAX_MAPPING;
    let mut sizes = Vec::new();
    for v in list.get_ref() {
        let n = c.size(v, list.span(), "workload.sizes")?;
        if n > max {
            return Err(c.err(
                list.span(),
                "workload.sizes",
                format!(
                    "{n} bytes: swiotlb bounces at most {max} bytes ({} KiB, one segment of {} slots) in one mapping (swiotlb_max_mapping_size)",
                    max >> 10,
                    crate::dma::swiotlb::IO_TLB_SEGSIZE
                ),
            ));
        }
        sizes.push(n);
    }
    let d = w
        .direction
        .as_ref()
        .ok_or_else(|| missing(c, w, "direction", "bidirectional, to_device or from_device"))?;
    let direction = c.direction(d)?;
    let iterations = match &w.iterations {
        Some(i) => c.int(i, "workload.iterations", 1..=100_000)? as u32,
        None => 1,
    };
    let cpus = match &w.cpus {
        Some(n) => c.int(n, "workload.cpus", 1..=256)? as u32,
        None => 1,
    };
    let in_flight = match &w.in_flight {
        Some(n) => c.int(n, "workload.in_flight", 1..=4096)? as u32,
        None => 1,
    };
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let held = u64::from(cpus) * u64::from(in_flight) * largest.next_multiple_of(4096);
    if held > MAX_BOUNCE_IN_FLIGHT {
        return Err(c.err(
            w.in_flight.as_ref().map(|x| x.span()).unwrap_or(w.kind.span()),
            "workload.in_flight",
            format!(
                "cpus x in_flight x the largest size is {held} bytes of buffers; at most {MAX_BOUNCE_IN_FLIGHT}"
            ),
        ));
    }
    Ok(Bounce {
        sizes,
        direction,
        iterations,
        cpus,
        in_flight,
    })
}

fn swiotlb_spec(c: &Ctx, sec: Option<&SwiotlbSection>) -> Result<SwiotlbSpec, InputError> {
    use crate::dma::swiotlb::{IO_TLB_MAX_MAPPING, IO_TLB_SEGSIZE, SwiotlbError};
    let mut spec = SwiotlbSpec::default();
    let Some(sec) = sec else {
        return Ok(spec);
    };
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
        assert_eq!(s.policies.sync, "batched");
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
}
