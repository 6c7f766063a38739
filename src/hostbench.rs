//! hostbench: run dma-direct's scatter-gather sync on this machine's real caches, per-entry vs
//! batched completion, and (optionally) set the Model's prediction beside the measurement.
//!
//! Kernel counterpart: `dma_direct_sync_sg_for_device()` (kernel/dma/direct.c) on a non-coherent
//! device, with ≤ 7.0's per-region `arch_sync_dma_for_device()` ending in a barrier
//! ([`PerEntry`]) against issue-only helpers plus one `arch_sync_dma_flush()` per call
//! ([`Batched`]) — what 7.1 merged for every scatter-gather path, this one included.
//! The code timed is the crate's own dma-direct, unchanged, over the [`Host`] backend, so every
//! line and barrier the kernel's algorithm asks for becomes the real instruction (CLFLUSHOPT or CLWB
//! plus SFENCE on x86-64, DC CIVAC or DC CVAC plus DSB SY on arm64).
//!
//! What one measurement is: a list of equal entries covering a page-aligned buffer is mapped once;
//! then, per iteration and per mode, every line of the buffer is written (untimed, so each line is
//! dirty as after a CPU filled it) and one `sync_sg_for_device` pass is timed with the monotonic
//! clock. The two modes alternate which goes first from one iteration to the next, so slow drift
//! (frequency, a neighbour VM) lands on both. Reported: min and median per mode, and the median
//! reduction of batched over per-entry.
//!
//! Invariants: options are checked before anything is allocated and every bad value is a
//! [`HostError`] naming the option; the Host never touches memory outside its buffer; the Model
//! side ([`predict`]) is deterministic.

use crate::arch::ArchOps;
use crate::arch::arm64::{Arm64, Arm64CleanInval, DirRules};
use crate::arch::x86::X86Flush;
use crate::device::Device;
use crate::dma::direct::DmaDirect;
use crate::dma::sync_policy::SyncRule;
use crate::hw::host::{Host, host_line_bytes};
use crate::hw::model::Model;
use crate::hw::{CacheOp, Hw};
use crate::input::InputError;
use crate::platform::{Arch, Profile};
use crate::scatterlist::SgTable;
use crate::types::{DmaAttrs, DmaDirection, PhysAddr};
use std::time::Instant;

/// Where the host buffer sits in the simulated physical space (any page-aligned address works;
/// this one is reachable by a 64-bit mask and never zero).
pub const HOST_BASE: PhysAddr = PhysAddr(0x1_0000_0000);

pub use crate::hw::host::HostError;

/// The cache-maintenance instruction a host run issues per line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// x86-64 CLFLUSHOPT: write back and invalidate.
    Clflushopt,
    /// x86-64 CLWB: write back, keep the line.
    Clwb,
    /// arm64 DC CVAC: clean to the point of coherency.
    DcCvac,
    /// arm64 DC CIVAC: clean and invalidate to the point of coherency.
    DcCivac,
}

impl Instruction {
    pub const ALL: [Instruction; 4] = [
        Instruction::Clflushopt,
        Instruction::Clwb,
        Instruction::DcCvac,
        Instruction::DcCivac,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Instruction::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
    }

    pub fn name(self) -> &'static str {
        match self {
            Instruction::Clflushopt => "clflushopt",
            Instruction::Clwb => "clwb",
            Instruction::DcCvac => "dc-cvac",
            Instruction::DcCivac => "dc-civac",
        }
    }

    /// The clean-and-invalidate instruction of this host's architecture, if it can issue one.
    pub fn default_for_host() -> Option<Self> {
        let caps = crate::hw::host::HostCaps::detect();
        if !caps.clean_inval {
            return None;
        }
        if cfg!(target_arch = "x86_64") {
            Some(Instruction::Clflushopt)
        } else if cfg!(target_arch = "aarch64") {
            Some(Instruction::DcCivac)
        } else {
            None
        }
    }

    /// The cache operation this instruction performs.
    pub fn op(self) -> CacheOp {
        match self {
            Instruction::Clflushopt | Instruction::DcCivac => CacheOp::CleanInval,
            Instruction::Clwb | Instruction::DcCvac => CacheOp::Clean,
        }
    }

    /// The architecture that has this instruction.
    pub fn arch(self) -> Arch {
        match self {
            Instruction::Clflushopt | Instruction::Clwb => Arch::X86_64,
            Instruction::DcCvac | Instruction::DcCivac => Arch::Arm64,
        }
    }

    /// The arch layer that issues exactly this instruction on `sync_for_device`.
    pub(crate) fn arch_dma(self) -> ArchOps {
        match self {
            Instruction::Clflushopt | Instruction::Clwb => X86Flush { op: self.op() }.into(),
            // The kernel's own arm64 path: clean to PoC for the device in every direction.
            Instruction::DcCvac => Arm64::new(DirRules::Since5_19).into(),
            Instruction::DcCivac => Arm64CleanInval.into(),
        }
    }
}

impl std::fmt::Display for Instruction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The architecture this binary runs on, if it is one the Host backend drives.
pub fn host_arch() -> Option<Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(Arch::X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(Arch::Arm64)
    } else {
        None
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostbenchOpts {
    pub buffer_bytes: u64,
    pub entry_bytes: u64,
    pub iterations: u32,
    pub instruction: Instruction,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModeResult {
    /// `per-entry` or `batched`.
    pub mode: String,
    pub instruction: String,
    pub median_ns: f64,
    pub min_ns: f64,
}

/// The Model's prediction for one mode, and how far it is from the measured median.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PredictedMode {
    pub mode: String,
    pub predicted_ns: f64,
    /// `100 * (predicted - measured) / measured`, against the measured median; absent when there
    /// is no measurement (a bare [`predict`]).
    pub error_pct: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelPrediction {
    /// Origin of the profile (`builtin:NAME` or a path).
    pub profile: String,
    pub modes: Vec<PredictedMode>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct HostbenchReport {
    pub buffer_bytes: u64,
    pub entry_bytes: u64,
    pub entries: u64,
    pub iterations: u32,
    pub modes: Vec<ModeResult>,
    /// Median based: `100 * (1 - batched / per_entry)`.
    pub reduction_pct: f64,
    pub model: Option<ModelPrediction>,
}

/// The two completion policies compared, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    PerEntry,
    Batched,
}

impl Mode {
    pub(crate) const BOTH: [Mode; 2] = [Mode::PerEntry, Mode::Batched];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::PerEntry => "per-entry",
            Mode::Batched => "batched",
        }
    }

    fn policy(self) -> SyncRule {
        match self {
            Mode::PerEntry => SyncRule::PerEntry,
            Mode::Batched => SyncRule::Batched,
        }
    }
}

/// Check the geometry against `line` and return the number of entries.
/// Largest host buffer: it is allocated for real and dirtied every pass, and a larger one than the
/// machine can hold would be killed by the OOM killer rather than refused.
pub const MAX_BUFFER: u64 = 4 << 30;
/// Most scatterlist entries a host run may build (each side of the comparison keeps its list).
pub const MAX_ENTRIES: u64 = 1 << 22;
/// Most passes a run may make.
pub const MAX_ITERATIONS: u32 = 100_000;
/// Most bytes a run may maintain over all its passes and both modes (1 TiB: minutes, not days).
pub const MAX_WORK_BYTES: u64 = 1 << 40;

/// Bytes a run holds: the buffer and both modes' scatterlists.
pub fn memory_needed(opts: &HostbenchOpts) -> u64 {
    let entries = opts.buffer_bytes / opts.entry_bytes.max(1);
    let lists = 2 * entries * std::mem::size_of::<crate::scatterlist::SgEntry>() as u64;
    opts.buffer_bytes.saturating_add(lists)
}

/// `MemAvailable` of /proc/meminfo, in bytes, where the kernel reports it.
fn memory_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

fn check_geometry(opts: &HostbenchOpts, line: u64) -> Result<u64, HostError> {
    let err = |m: String| Err(HostError(m));
    if opts.buffer_bytes == 0 {
        return err("--buffer must be greater than zero".into());
    }
    if opts.entry_bytes == 0 {
        return err("--entry must be greater than zero".into());
    }
    if opts.iterations == 0 {
        return err("--iterations must be at least 1".into());
    }
    if opts.buffer_bytes > MAX_BUFFER {
        return err(format!(
            "--buffer {} is larger than hostbench's {} GiB limit (the buffer is real memory, written every pass)",
            opts.buffer_bytes,
            MAX_BUFFER >> 30
        ));
    }
    if !opts.entry_bytes.is_multiple_of(line) {
        return err(format!(
            "--entry {} is not a multiple of the {line}-byte cache line",
            opts.entry_bytes
        ));
    }
    if opts.entry_bytes > u64::from(u32::MAX) {
        return err(format!(
            "--entry {} exceeds a scatterlist entry's 32-bit length",
            opts.entry_bytes
        ));
    }
    if !opts.buffer_bytes.is_multiple_of(opts.entry_bytes) {
        return err(format!(
            "--buffer {} is not a multiple of --entry {}",
            opts.buffer_bytes, opts.entry_bytes
        ));
    }
    let entries = opts.buffer_bytes / opts.entry_bytes;
    if entries > MAX_ENTRIES {
        return err(format!(
            "--buffer {} in --entry {} is {entries} scatterlist entries; at most {MAX_ENTRIES} (use larger entries)",
            opts.buffer_bytes, opts.entry_bytes
        ));
    }
    if opts.iterations > MAX_ITERATIONS {
        return err(format!(
            "--iterations {} is more than {MAX_ITERATIONS}",
            opts.iterations
        ));
    }
    let work = 2 * u64::from(opts.iterations) * opts.buffer_bytes;
    if work > MAX_WORK_BYTES {
        return err(format!(
            "--iterations {} of --buffer {} maintain {work} bytes in all; at most {MAX_WORK_BYTES} (1 TiB): fewer iterations or a smaller buffer",
            opts.iterations, opts.buffer_bytes
        ));
    }
    let need = memory_needed(opts);
    if let Some(avail) = memory_available()
        && need > avail
    {
        return err(format!(
            "this run needs {} MiB of memory (the buffer and two scatterlists) and this machine has {} MiB available: a smaller --buffer or larger --entry",
            need >> 20,
            avail >> 20
        ));
    }
    Ok(entries)
}

/// Check `opts` for a run on this host: the geometry, and that the instruction is this host's.
pub fn validate(opts: &HostbenchOpts) -> Result<u64, HostError> {
    let (line, _) = host_line_bytes();
    let entries = check_geometry(opts, line)?;
    match host_arch() {
        Some(a) if a == opts.instruction.arch() => Ok(entries),
        Some(a) => Err(HostError(format!(
            "unsupported: --instruction {} is an {} instruction and this host is {}",
            opts.instruction,
            opts.instruction.arch().name(),
            a.name()
        ))),
        None => Err(HostError(
            "unsupported: hostbench runs only on x86_64 and arm64 hosts".into(),
        )),
    }
}

/// One side of the comparison: a mapped list and the dma-direct instance that syncs it.
struct Side {
    mode: Mode,
    direct: DmaDirect,
    sgt: SgTable,
}

/// A host buffer with both modes mapped over it, ready to time passes. Also used by calibrate.
pub(crate) struct Bench {
    pub(crate) host: Host,
    dev: Device,
    sides: Vec<Side>,
    seed: u8,
}

impl Bench {
    pub(crate) fn new(opts: &HostbenchOpts) -> Result<Bench, HostError> {
        validate(opts)?;
        let mut host = Host::new(HOST_BASE, opts.buffer_bytes, &[opts.instruction.op()])?;
        let dev = Device::new("hostbench", false, 64);
        let mut sides = Vec::new();
        // Checked in `check_geometry`: the entry fits a scatterlist entry's u32 length.
        let entry = opts.entry_bytes as u32;
        for mode in Mode::BOTH {
            let direct = DmaDirect::new(&host, opts.instruction.arch_dma(), mode.policy());
            let mut sgt = SgTable::from_contiguous(HOST_BASE, opts.buffer_bytes, &[entry]);
            direct
                .map_sg(
                    &mut host,
                    &dev,
                    &mut sgt,
                    DmaDirection::ToDevice,
                    DmaAttrs::SKIP_CPU_SYNC,
                )
                .map_err(|e| HostError(format!("cannot map the host buffer: {e}")))?;
            sides.push(Side { mode, direct, sgt });
        }
        Ok(Bench {
            host,
            dev,
            sides,
            seed: 0,
        })
    }

    /// Dirty every line (untimed), then time one `sync_sg_for_device` pass in `mode`, in ns.
    pub(crate) fn pass(&mut self, mode: Mode) -> f64 {
        self.pass_with(mode, true)
    }

    /// One timed pass, dirtying every line first only if `dirty`.
    pub(crate) fn pass_with(&mut self, mode: Mode, dirty: bool) -> f64 {
        if dirty {
            self.seed = self.seed.wrapping_add(1);
            self.host.dirty(self.seed);
        }
        let side = self
            .sides
            .iter_mut()
            .find(|s| s.mode == mode)
            .expect("both modes are set up in Bench::new");
        let t0 = Instant::now();
        side.direct.sync_sg_for_device(
            &mut self.host,
            &self.dev,
            &side.sgt,
            DmaDirection::ToDevice,
        );
        t0.elapsed().as_nanos() as f64
    }

    /// `iterations` timed passes of each mode, alternating which goes first, after one untimed
    /// warm-up pass of each. Returns the samples per mode, in [`Mode::BOTH`] order.
    pub(crate) fn sample(&mut self, iterations: u32) -> [Vec<f64>; 2] {
        for m in Mode::BOTH {
            self.pass(m);
        }
        let mut out = [Vec::new(), Vec::new()];
        for i in 0..iterations {
            let order = if i % 2 == 0 {
                [Mode::PerEntry, Mode::Batched]
            } else {
                [Mode::Batched, Mode::PerEntry]
            };
            for m in order {
                let ns = self.pass(m);
                out[m as usize].push(ns);
            }
        }
        out
    }

    /// Everything issued went to the buffer: no refused request. A failure here is a bug in the
    /// geometry, never user input, but it is reported rather than trusted.
    pub(crate) fn check_clean(&self) -> Result<(), HostError> {
        match self.host.faults() {
            (0, _) => Ok(()),
            (n, first) => Err(HostError(format!(
                "the host refused {n} maintenance request(s); first: {}",
                first.map(|f| f.to_string()).unwrap_or_default()
            ))),
        }
    }
}

/// Median of `v` (mean of the middle two for an even count); 0 for an empty slice.
pub(crate) fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(crate) fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Measure per-entry against batched sync on this host.
pub fn run(opts: &HostbenchOpts) -> Result<HostbenchReport, HostError> {
    run_with_model(opts, None)
}

/// [`run`], and if a profile is given, the Model's prediction for the same geometry with the
/// error of each mode against the measured median.
pub fn run_with_model(
    opts: &HostbenchOpts,
    profile: Option<&Profile>,
) -> Result<HostbenchReport, HostError> {
    let entries = validate(opts)?;
    // Predict first: a profile that cannot price this run is a user error found before measuring.
    let prediction = match profile {
        Some(p) => Some(predict(p, opts).map_err(|e| HostError(e.to_string()))?),
        None => None,
    };
    let mut bench = Bench::new(opts)?;
    let samples = bench.sample(opts.iterations);
    bench.check_clean()?;
    let modes: Vec<ModeResult> = Mode::BOTH
        .iter()
        .map(|&m| ModeResult {
            mode: m.name().to_string(),
            instruction: opts.instruction.name().to_string(),
            median_ns: median(&samples[m as usize]),
            min_ns: min(&samples[m as usize]),
        })
        .collect();
    let reduction_pct = reduction(modes[0].median_ns, modes[1].median_ns);
    let model = prediction.map(|mut p| {
        for (pm, r) in p.modes.iter_mut().zip(&modes) {
            pm.error_pct = Some(error_pct(pm.predicted_ns, r.median_ns));
        }
        p
    });
    Ok(HostbenchReport {
        buffer_bytes: opts.buffer_bytes,
        entry_bytes: opts.entry_bytes,
        entries,
        iterations: opts.iterations,
        modes,
        reduction_pct,
        model,
    })
}

/// `100 * (1 - batched / per_entry)`; 0 if per-entry took no time.
pub fn reduction(per_entry: f64, batched: f64) -> f64 {
    if per_entry > 0.0 {
        100.0 * (1.0 - batched / per_entry)
    } else {
        0.0
    }
}

/// Signed relative error of a prediction, in percent of the measurement.
pub fn error_pct(predicted: f64, measured: f64) -> f64 {
    if measured > 0.0 {
        100.0 * (predicted - measured) / measured
    } else {
        0.0
    }
}

/// The Model's time for one `sync_sg_for_device` pass per mode, on the same geometry the host run
/// would use, priced by `profile`. Deterministic.
pub fn predict(profile: &Profile, opts: &HostbenchOpts) -> Result<ModelPrediction, InputError> {
    let line = profile.model.line_bytes;
    let arg = |m: String| InputError::new("<argument>", m);
    check_geometry(opts, line).map_err(|e| arg(e.0))?;
    if profile.arch() != opts.instruction.arch() {
        return Err(InputError {
            file: profile.origin.clone(),
            line: None,
            key: Some("platform.arch".into()),
            message: format!(
                "is {}, but --instruction {} is an {} instruction",
                profile.arch().name(),
                opts.instruction,
                opts.instruction.arch().name()
            ),
        });
    }
    profile.require_ops(
        &[opts.instruction.op()],
        &format!("hostbench with {}", opts.instruction),
    )?;
    let modes = Mode::BOTH
        .iter()
        .map(|&m| PredictedMode {
            mode: m.name().to_string(),
            predicted_ns: model_pass_ps(profile, opts, m) as f64 / 1000.0,
            error_pct: None,
        })
        .collect();
    Ok(ModelPrediction {
        profile: profile.origin.clone(),
        modes,
    })
}

/// Picoseconds the Model charges for one pass, after a warm-up pass as on the host. Geometry
/// must already be checked.
fn model_pass_ps(profile: &Profile, opts: &HostbenchOpts, mode: Mode) -> u64 {
    let mut model = Model::new(profile.model.clone());
    let direct = DmaDirect::new(&model, opts.instruction.arch_dma(), mode.policy());
    let dev = Device::new("hostbench", false, 64);
    let mut sgt =
        SgTable::from_contiguous(HOST_BASE, opts.buffer_bytes, &[opts.entry_bytes as u32]);
    // A 64-bit device reaches every address; a failure here would be a bug, and costs nothing.
    let _ = direct.map_sg(
        &mut model,
        &dev,
        &mut sgt,
        DmaDirection::ToDevice,
        DmaAttrs::SKIP_CPU_SYNC,
    );
    direct.sync_sg_for_device(&mut model, &dev, &sgt, DmaDirection::ToDevice);
    let t0 = model.now_ps();
    direct.sync_sg_for_device(&mut model, &dev, &sgt, DmaDirection::ToDevice);
    model.now_ps() - t0
}

fn human_bytes(b: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (u, name) in UNITS {
        if b >= u && b.is_multiple_of(u) {
            return format!("{} {name}", b / u);
        }
    }
    format!("{b} B")
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

/// A human-readable table of a report.
pub fn render_table(r: &HostbenchReport) -> String {
    let instr = r
        .modes
        .first()
        .map(|m| m.instruction.as_str())
        .unwrap_or("");
    let mut out = format!(
        "hostbench: {} buffer as {} entries of {}, {} iteration(s), {instr}\n\n",
        human_bytes(r.buffer_bytes),
        r.entries,
        human_bytes(r.entry_bytes),
        r.iterations
    );
    let with_model = r.model.is_some();
    out.push_str(&format!(
        "{:<10} {:>12} {:>12}",
        "mode", "median µs", "min µs"
    ));
    if with_model {
        out.push_str(&format!(" {:>12} {:>8}", "model µs", "error"));
    }
    out.push('\n');
    for (i, m) in r.modes.iter().enumerate() {
        out.push_str(&format!(
            "{:<10} {:>12} {:>12}",
            m.mode,
            us(m.median_ns),
            us(m.min_ns)
        ));
        if let Some(p) = r.model.as_ref().and_then(|p| p.modes.get(i)) {
            let e = p
                .error_pct
                .map(|e| format!("{e:+.1} %"))
                .unwrap_or_default();
            out.push_str(&format!(" {:>12} {:>8}", us(p.predicted_ns), e));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "\nbatched vs per-entry (medians): {:.1} % less time\n",
        r.reduction_pct
    ));
    if let Some(p) = &r.model {
        out.push_str(&format!("model: {}\n", p.profile));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(buffer: u64, entry: u64, iterations: u32) -> HostbenchOpts {
        HostbenchOpts {
            buffer_bytes: buffer,
            entry_bytes: entry,
            iterations,
            instruction: Instruction::default_for_host().unwrap_or(Instruction::Clflushopt),
        }
    }

    #[test]
    fn instruction_names_round_trip() {
        for i in Instruction::ALL {
            assert_eq!(Instruction::parse(i.name()), Some(i));
        }
        assert_eq!(Instruction::parse("CLWB"), Some(Instruction::Clwb));
        assert_eq!(Instruction::parse("dc civac"), None);
        assert_eq!(Instruction::Clwb.op(), CacheOp::Clean);
        assert_eq!(Instruction::DcCivac.op(), CacheOp::CleanInval);
    }

    #[test]
    fn option_errors_name_the_option() {
        let cases = [
            (opts(0, 4096, 1), "--buffer"),
            (opts(8192, 0, 1), "--entry"),
            (opts(8192, 4096, 0), "--iterations"),
            (opts(8192, 100, 1), "--entry 100"),
            (opts(10_000, 4096, 1), "--buffer 10000"),
            (opts(1 << 32, 1 << 32, 1), "--entry"),
            (opts(1 << 33, 4096, 1), "--buffer"),
        ];
        for (o, want) in cases {
            let e = run(&o).unwrap_err();
            assert!(e.0.contains(want), "{o:?}: {e}");
        }
    }

    #[test]
    fn foreign_instruction_is_unsupported() {
        let foreign = if cfg!(target_arch = "aarch64") {
            Instruction::Clflushopt
        } else {
            Instruction::DcCvac
        };
        let mut o = opts(8192, 4096, 1);
        o.instruction = foreign;
        let e = run(&o).unwrap_err();
        assert!(e.0.starts_with("unsupported"), "{e}");
    }

    #[test]
    fn a_small_run_issues_every_line_and_reports_both_modes() {
        let Some(instruction) = Instruction::default_for_host() else {
            crate::hw::host::skip_host_test(
                "this CPU has no user-space clean-and-invalidate instruction",
            );
            return;
        };
        let o = HostbenchOpts {
            buffer_bytes: 64 * 1024,
            entry_bytes: 4096,
            iterations: 3,
            instruction,
        };
        let mut b = Bench::new(&o).unwrap();
        b.host.reset_counts();
        let s = b.sample(o.iterations);
        let line = b.host.line_bytes();
        let passes = 2 * (u64::from(o.iterations) + 1);
        assert_eq!(
            b.host.lines_issued(instruction.op()),
            passes * o.buffer_bytes / line
        );
        // Per-entry: 16 barriers a pass; batched: 1.
        assert_eq!(b.host.barriers(), (u64::from(o.iterations) + 1) * (16 + 1));
        assert!(b.check_clean().is_ok());
        assert_eq!(s[0].len(), 3);
        assert_eq!(s[1].len(), 3);

        let r = run(&o).unwrap();
        assert_eq!(r.entries, 16);
        let names: Vec<&str> = r.modes.iter().map(|m| m.mode.as_str()).collect();
        assert_eq!(names, ["per-entry", "batched"]);
        assert!(r.modes.iter().all(|m| m.min_ns <= m.median_ns));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["modes"][1]["instruction"], instruction.name());
        assert!(render_table(&r).contains("per-entry"));
    }

    #[test]
    fn median_and_min() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min(&[4.0, 1.0, 2.0]), 1.0);
        assert_eq!(reduction(200.0, 150.0), 25.0);
    }

    const PROFILE: &str = r#"
[platform]
name = "t"
description = "test"
arch = "x86_64"
cpu_freq_mhz = { value = 1000, source = "test" }
[cache]
line_bytes = { value = 64, source = "test" }
[cache.clean_inval]
issue = { ns = 1, source = "test" }
latency = { ns = 100, source = "test" }
[barrier]
cost = { ns = 10, source = "test" }
"#;

    #[test]
    fn predict_matches_the_mechanism() {
        let p = Profile::parse("t.toml", PROFILE).unwrap();
        let o = HostbenchOpts {
            buffer_bytes: 40960,
            entry_bytes: 4096,
            iterations: 1,
            instruction: Instruction::Clflushopt,
        };
        let m = predict(&p, &o).unwrap();
        // Per entry: 64 issues, the last line's latency minus the last issue, the barrier.
        assert_eq!(m.modes[0].predicted_ns, 10.0 * (64.0 + 100.0 - 1.0 + 10.0));
        assert_eq!(m.modes[1].predicted_ns, 640.0 + 100.0 - 1.0 + 10.0);
        assert_eq!(predict(&p, &o).unwrap(), m);
        // CLWB is not priced by this profile; an arm64 instruction does not fit an x86 profile.
        let mut o2 = o;
        o2.instruction = Instruction::Clwb;
        assert_eq!(
            predict(&p, &o2).unwrap_err().key.as_deref(),
            Some("cache.clean")
        );
        o2.instruction = Instruction::DcCvac;
        assert!(predict(&p, &o2).is_err());
    }
}
