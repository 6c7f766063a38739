//! The `replay` workload: a driver's own DMA API calls, read from a kernel trace, made again on
//! the modelled platform, release and policies.
//!
//! Kernel counterpart: none — the calls are the driver's (`dma:*` trace events, 6.12 on); what
//! they cost is the modelled stack's. [`crate::trace::replay`] pairs each unmap and sync with
//! its map; each device gets the ops setup gives a device of its kind (behind an IOMMU or not,
//! with a bounce pool or not); each CPU the trace names runs its calls in trace order on the
//! platform's CPU of that number ([`crate::smp`], every CPU calling each device's one set of
//! DMA layers, so their locks and per-CPU caches are contended as on the board), or every
//! call runs on one modelled CPU (`cpus = 1`, and a trace from one CPU); each call at its
//! timestamp on the trace's clock ([`clock`]): a CPU idles between calls, the DMA ops' timers
//! (the flush queue's) run when they expire, charged to no call, and a call whose CPU is
//! still busy when it is due, or whose mapping's earlier call another CPU has not yet made,
//! starts late and is counted.
//!
//! Devices: a trace names devices, not their setup. `[workload]` gives the defaults
//! (`coherent`, `dma_mask_bits`) and `[workload.devices."NAME"]` a device's own; what is not
//! given is inferred from the trace where it shows (a map whose DMA address differs from its
//! physical one: an IOMMU; a `swiotlb_bounced` event: a bounce pool) and the report says so.
//!
//! Mappings made before the capture began (a page pool's, synced and unmapped in it) are
//! inferred by the first read from the calls that use them ([`Table::infer`]) and made on the
//! model before the first line, where neither the ledger nor the trace's clock sees them, so
//! their calls are timed as any other; the report counts them per device.
//!
//! Invariants: every traced call is replayed or named as not replayable with its line; a call
//! whose map the modelled kernel refused is not made (as a driver would not unmap a failed map)
//! and is counted as skipped; the checks of [`crate::trace::checks`] are made as the run reads
//! the trace, on the one live table the pairing uses ([`crate::trace::live`]), the cut lists
//! made whole. The trace is read twice ([`source`]), so it is a regular file, and the second
//! read takes the bytes the first read and only while the file's length and modification time
//! are as the first read left them (else bad input, exit 2); or it is standard input, spooled
//! by its first read. A trace without a DMA API event is bad input
//! that says how to enable the events.

mod clock;
mod source;

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::dma::DmaMapOps as _;
use crate::hw::calls::{CallStat, CallTimer, StackRow, stack_rows};
use crate::hw::{Counter, FrameId, Hw};
use crate::input::{InputError, quote};
use crate::mm::physmem::NodeRange;
use crate::report::{
    FORMAT_VERSION, HeadDoc, StackDoc, TimeUnit, breakdown_docs, call_doc, counts_map, header,
    human_bytes, ns, stack_table, trim_float,
};
use crate::scatterlist::{SgEntry, SgTable};
use crate::setup::{DeviceSetup, Machine, setup_dma_ops};
use crate::trace::checks::{Checker, Finding, FindingKind, Findings};
use crate::trace::live::{Befores, Mapping, Table, Wholes};
use crate::trace::replay::{Call, DeviceCalls, Rebuilder, Traced, Unresolved};
use crate::types::{DmaAddr, PhysAddr};
pub use clock::Late;
use clock::TraceClock;
use serde::{Deserialize, Serialize};
pub use source::STDIN_NAME;
use source::{Source, Stamp};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::rc::Rc;
use toml::Spanned;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "replay",
    summary: "a driver's DMA API calls read from a kernel trace, made again",
    parse,
};

/// Where the model's own memory (page tables, bounce pools) starts when the trace's buffers
/// leave room there; otherwise above the trace's highest address.
const MODEL_MEMORY_BASE: u64 = 0x8000_0000;
const MODEL_MEMORY: u64 = 1 << 30;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    #[allow(dead_code)]
    kind: Spanned<String>,
    trace: Option<Spanned<String>>,
    coherent: Option<Spanned<bool>>,
    dma_mask_bits: Option<Spanned<i64>>,
    skip_bad_lines: Option<Spanned<bool>>,
    strict_window: Option<Spanned<bool>>,
    /// "trace" (each of the trace's CPUs on a modelled CPU of its own) or 1.
    cpus: Option<Spanned<toml::Value>>,
    #[serde(default)]
    devices: BTreeMap<String, DeviceSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceSection {
    coherent: Option<Spanned<bool>>,
    dma_mask_bits: Option<Spanned<i64>>,
    iommu: Option<Spanned<bool>>,
    /// The IOMMU's page size for this device's domain: 4K, 16K or 64K.
    granule: Option<Spanned<toml::Value>>,
    bounce: Option<Spanned<bool>>,
}

/// One traced device as the replay sets it up.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayDevice {
    pub device: Device,
    pub iommu: bool,
    /// Its domain's granule when the device table gives one.
    pub granule: Option<u64>,
    pub bounce: bool,
    /// What was inferred from the trace rather than given, in words, with the line.
    pub inferred: Vec<String>,
    pub calls: DeviceCalls,
    /// Mappings it made before the trace began, inferred from their syncs and unmaps.
    pub mapped_before: u64,
}

/// A trace to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct Replay {
    /// The trace file as the scenario names it (`-`: standard input), and where it is.
    pub trace: String,
    source: Source,
    /// The trace as the first read found it.
    stamp: Stamp,
    /// Whether lines that do not read are skipped (counted) rather than refused.
    skip_bad: bool,
    /// Whether the trace covers the traced drivers' whole life, so that what is live at its
    /// end is a leak.
    strict_window: bool,
    /// Cut lists the first read found whole, by their map's line.
    wholes: Rc<Wholes>,
    /// Mappings made before the trace began, per device as the first read inferred them.
    before: Rc<Befores>,
    /// Where the physical pages of those behind an IOMMU start (the trace gives their IOVAs
    /// only): above every address the trace's calls touch.
    before_base: u64,
    pub devices: Rc<Vec<ReplayDevice>>,
    /// Lines of other events, by name.
    pub skipped: BTreeMap<String, u64>,
    /// The lowest and highest physical address the calls touch.
    phys_span: (u64, u64),
    /// The CPUs the trace's calls ran on, in order (the first [`MAX_CPUS`]), and the line
    /// each is first named at.
    pub cpus: Rc<Vec<u32>>,
    cpu_lines: Rc<Vec<usize>>,
    /// Which CPUs replay the calls (`workload.cpus`, `--cpus`).
    pub on: OnCpus,
}

/// Which modelled CPUs replay a trace's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnCpus {
    /// Each CPU the trace names on the platform's CPU of that number, its calls at their
    /// timestamps (the default). A trace that names one CPU replays on one, as [`OnCpus::One`].
    Trace,
    /// Every call on one modelled CPU, in trace order.
    One,
}

impl Replay {
    /// Whether the calls run on the trace's CPUs, more than one.
    pub fn on_trace_cpus(&self) -> bool {
        self.on == OnCpus::Trace && self.cpus.len() > 1
    }
}

/// The domain a device behind an IOMMU maps through when the scenario gives no `[iommu]`: the
/// platform's SMMU, 4 KB pages, 48-bit IOVAs (arm64's usual `CONFIG_ARM64_VA_BITS_48`).
fn default_domain(profile: &crate::platform::Profile) -> Option<crate::setup::IommuConfig> {
    let smmu = super::iommu::platform_smmu(profile)?;
    Some(crate::setup::IommuConfig {
        granule: 4096,
        ias: 48,
        smmu,
        coherent_walk: profile.model.smmu.is_some_and(|s| s.coherent_walk),
        node: 0,
    })
}

/// The name of the scenario a trace is read as.
pub const TRACE_SCENARIO: &str = "trace";

/// The scenario a trace is read as where a scenario is expected (`dmasim run trace.txt`,
/// `compare`, `--sweep`): the trace replayed on the default platform and the latest release.
/// `--platform`, `--kernel`, `--set` and `dmasim replay --device` change it.
pub fn scenario_text(trace_file: &str) -> String {
    let mut t = toml_edit::DocumentMut::new();
    // Not the file's name: the user gave it, and a trace on standard input then reports as
    // the same trace in a file does, byte for byte.
    t["scenario"]["name"] = toml_edit::value(TRACE_SCENARIO);
    t["scenario"]["platform"] = toml_edit::value(DEFAULT_PLATFORM);
    t["workload"]["kind"] = toml_edit::value("replay");
    t["workload"]["trace"] = toml_edit::value(trace_file);
    t.to_string()
}

/// `--device NAME:key=value,...` as the `--set` edits it stands for
/// (`workload.devices."NAME".key=value`): `coherent`, `iommu` and `bounce` take yes or no,
/// `granule` a size, `dma_mask_bits` a number. A name may hold colons (a PCI address): the
/// settings follow the last one.
pub fn device_sets(arg: &str) -> Result<Vec<String>, InputError> {
    let bad = |m: &str| InputError::new("<argument>", format!("--device {arg}: {m}"));
    let (name, kvs) = arg
        .rsplit_once(':')
        .filter(|(n, kv)| kv.contains('=') && !n.is_empty())
        .ok_or_else(|| bad("expected NAME:key=value,... (e.g. 0000:01:00.0:coherent=yes)"))?;
    let device = crate::input::key_part(name);
    let mut out = Vec::new();
    for kv in kvs.split(',') {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| bad(&format!("`{kv}` is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        let v = match (k, v) {
            ("coherent" | "iommu" | "bounce", "yes" | "true") => "true".to_string(),
            ("coherent" | "iommu" | "bounce", "no" | "false") => "false".to_string(),
            ("coherent" | "iommu" | "bounce", _) => {
                return Err(bad(&format!("{k} is yes or no, found {}", quote(v))));
            }
            ("dma_mask_bits", _) => v.to_string(),
            // A size as a TOML string ("64K").
            ("granule", _) => toml_edit::Value::from(v).to_string(),
            _ => {
                return Err(bad(&format!(
                    "unknown key {}; the keys are coherent, iommu, granule, bounce and dma_mask_bits",
                    quote(k)
                )));
            }
        };
        out.push(format!("workload.devices.{device}.{k}={v}"));
    }
    Ok(out)
}

/// Most CPUs of a trace a replay tells apart (the kernel's `NR_CPUS` reaches 8192 on arm64):
/// a hostile trace naming more cannot grow the set.
pub const MAX_CPUS: usize = 8192;

/// The platform a trace replays on unless `--platform` says: an arm64 phone SoC whose DMA
/// masters do not snoop, where the DMA API's cache maintenance shows.
pub const DEFAULT_PLATFORM: &str = "dimensity9500";

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, shared: &Shared) -> Result<Workload, InputError> {
    let kind_span = v.span();
    let w: Section = c.section(v)?;
    let trace = w.trace.as_ref().ok_or_else(|| {
        c.err(
            kind_span.clone(),
            "workload.trace",
            "missing: the trace file to replay (the text of `trace-cmd report`, tracefs or `perf script`)",
        )
    })?;
    let source = Source::of(shared.dir, trace.get_ref());
    let shown = source.shown();
    let skip_bad = w.skip_bad_lines.as_ref().is_some_and(|b| *b.get_ref());
    let strict_window = w.strict_window.as_ref().is_some_and(|b| *b.get_ref());
    let on = match &w.cpus {
        None => OnCpus::Trace,
        Some(v) => match v.get_ref() {
            toml::Value::String(t) if t == "trace" => OnCpus::Trace,
            toml::Value::Integer(1) => OnCpus::One,
            other => {
                return Err(c.err(
                    v.span(),
                    "workload.cpus",
                    format!(
                        "\"trace\" (each of the trace's CPUs on its own) or 1 (every call on one CPU, in trace order), found {}",
                        quote(&other.to_string())
                    ),
                ));
            }
        },
    };
    // The first of two reads of the trace, both streamed: what each device is and does, and
    // which cut lists their unmaps make whole; the run reads it again, makes the calls as
    // they come and checks them, the lists whole. The second reads the bytes the first read,
    // and only if the file has not changed since.
    let (mut input, opened) = source.open().map_err(|e| {
        c.err(
            trace.span(),
            "workload.trace",
            format!("cannot read {shown}: {e}"),
        )
    })?;
    let mut table = Table::default();
    let mut seen = crate::trace::DevicesSeen::default();
    let mut rebuilder = Rebuilder::default();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let mut cpus = BTreeMap::new();
    // The checks' memory of each device's last unmaps, so that a sync after an unmap is not
    // taken for a use of a mapping made before the trace.
    let mut checker = Checker::new(strict_window);
    let sum = crate::trace::read(&shown, &mut input, skip_bad, |r| {
        if let Some(c) = r.cpu
            && cpus.len() < MAX_CPUS
        {
            cpus.entry(c).or_insert(r.line);
        }
        seen.push(&r);
        table.infer(&r, |dev, r| checker.after_unmap(dev, r));
        let step = table.push(&r);
        checker.push(&r, &step, &table);
        if let Some((_, t)) = rebuilder.push(&r, &step, &table) {
            let mut span = |p: u64, len: u64| {
                lo = lo.min(p);
                hi = hi.max(p.saturating_add(len));
            };
            match &t.call {
                Call::MapPage { phys, size, .. } => span(*phys, *size),
                Call::MapSg { entries, .. } => entries.iter().for_each(|&(p, l)| span(p, l)),
                _ => {}
            }
        }
        Ok(())
    })?;
    // A cut list's entries past the printed ones, which the run will make too.
    for (tail, len) in table.wholes().values() {
        for &p in tail {
            lo = lo.min(p);
            hi = hi.max(p.saturating_add(*len));
        }
    }
    let stamp = source.first_read_done(input, opened, sum.bytes)?;
    let seen = seen.finish();
    if seen.iter().all(|d| d.calls == 0) {
        return Err(no_dma_events(&shown, &sum));
    }
    let wholes = Rc::new(table.wholes().clone());
    let before = table.befores();
    let rebuilt = rebuilder.finish();

    let mask = |v: &Spanned<i64>, key: &str| c.int(v, key, 12..=64).map(|b| b as u32);
    let default_coherent = w.coherent.as_ref().is_some_and(|b| *b.get_ref());
    let default_mask = match &w.dma_mask_bits {
        Some(m) => mask(m, "workload.dma_mask_bits")?,
        None => 64,
    };
    for name in w.devices.keys() {
        if !rebuilt.iter().any(|d| &d.name == name) {
            let known: Vec<&str> = rebuilt.iter().map(|d| d.name.as_str()).collect();
            return Err(c.err(
                kind_span.clone(),
                &format!("workload.devices.{name}"),
                format!(
                    "the trace has no device {}; it names: {}",
                    quote(name),
                    some(&known)
                ),
            ));
        }
    }
    let mut devices = Vec::new();
    for calls in rebuilt {
        let mapped_before = before
            .iter()
            .find(|(n, _)| *n == calls.name)
            .map_or(0, |(_, v)| v.len() as u64);
        let own = w.devices.get(&calls.name);
        let seen = seen.iter().find(|s| s.name == calls.name);
        let mut inferred = Vec::new();
        let coherent = own
            .and_then(|d| d.coherent.as_ref())
            .map_or(default_coherent, |b| *b.get_ref());
        let mask_bits = match own.and_then(|d| d.dma_mask_bits.as_ref()) {
            Some(m) => mask(m, &format!("workload.devices.{}.dma_mask_bits", calls.name))?,
            None => default_mask,
        };
        let iommu = match own.and_then(|d| d.iommu.as_ref()) {
            Some(b) => *b.get_ref(),
            None => match seen.and_then(|s| s.translated_at) {
                Some(line) => {
                    inferred.push(format!(
                        "behind an IOMMU (line {line}: a DMA address differs from its physical address)"
                    ));
                    true
                }
                None => false,
            },
        };
        let granule = match own.and_then(|d| d.granule.as_ref()) {
            Some(g) => {
                let key = format!("workload.devices.{}.granule", calls.name);
                match c.size(g.get_ref(), g.span(), &key)? {
                    v @ (0x1000 | 0x4000 | 0x10000) => Some(v),
                    v => {
                        return Err(c.err(
                            g.span(),
                            &key,
                            format!("an Arm LPAE table has 4K, 16K or 64K pages, not {v} bytes"),
                        ));
                    }
                }
            }
            None => None,
        };
        let bounce = match own.and_then(|d| d.bounce.as_ref()) {
            Some(b) => *b.get_ref(),
            None => match seen.and_then(|s| s.bounced_at) {
                Some(line) => {
                    inferred.push(format!("bounces through swiotlb (line {line})"));
                    true
                }
                None => false,
            },
        };
        devices.push(ReplayDevice {
            device: Device::new(&calls.name, coherent, mask_bits),
            iommu,
            granule,
            bounce,
            inferred,
            calls,
            mapped_before,
        });
    }
    let (lo, hi, before_base) = before_span(&before, &devices, (lo, hi));
    Ok(Workload::Replay(Replay {
        trace: match source {
            Source::Stdin => STDIN_NAME.to_string(),
            Source::File(_) => trace.get_ref().clone(),
        },
        source,
        stamp,
        skip_bad,
        strict_window,
        wholes,
        devices: Rc::new(devices),
        skipped: sum.skipped,
        cpu_lines: Rc::new(cpus.values().copied().collect()),
        cpus: Rc::new(cpus.into_keys().collect()),
        on,
        phys_span: (lo.min(hi), hi),
        before: Rc::new(before),
        before_base,
    }))
}

/// The physical span of the calls widened by the mappings made before the trace: a device
/// without an IOMMU maps them at their DMA addresses, one behind an IOMMU at pages of their
/// own above the span (their first page's offset kept, as their IOVAs' is), which start at
/// the returned base.
fn before_span(
    before: &Befores,
    devices: &[ReplayDevice],
    (lo, hi): (u64, u64),
) -> (u64, u64, u64) {
    let (mut lo, mut hi) = (lo, hi);
    let mut pages = 0u64;
    for ((_, maps), d) in before.iter().zip(devices) {
        for &(p, len) in maps.iter().flat_map(|m| &m.phys) {
            if d.iommu {
                pages = pages.saturating_add(before_pages(p, len));
            } else {
                lo = lo.min(p);
                hi = hi.max(p.saturating_add(len));
            }
        }
    }
    let base = hi.saturating_add(BEFORE_ALIGN - 1) & !(BEFORE_ALIGN - 1);
    let top = base.saturating_add(pages.saturating_mul(PAGE));
    (lo.min(hi), if pages > 0 { top } else { hi }, base)
}

/// The page size of the physical pages given to mappings made before the trace behind an
/// IOMMU, and where their region starts.
const PAGE: u64 = 4096;
const BEFORE_ALIGN: u64 = 1 << 21;

/// How many pages an entry at `p` of `len` bytes spans, its offset in its page kept.
fn before_pages(p: u64, len: u64) -> u64 {
    ((p & (PAGE - 1)).saturating_add(len)).div_ceil(PAGE)
}

/// The frame each device's calls are made in (the first 64 devices; any further ones share
/// the last): the ledger's stacks then split by device, and the report names each by its own
/// name. Entering a frame costs the model nothing, so the calls' times are as without it.
static DEVICE_FRAMES: [FrameId; 64] = [
    FrameId::new("device 0"),
    FrameId::new("device 1"),
    FrameId::new("device 2"),
    FrameId::new("device 3"),
    FrameId::new("device 4"),
    FrameId::new("device 5"),
    FrameId::new("device 6"),
    FrameId::new("device 7"),
    FrameId::new("device 8"),
    FrameId::new("device 9"),
    FrameId::new("device 10"),
    FrameId::new("device 11"),
    FrameId::new("device 12"),
    FrameId::new("device 13"),
    FrameId::new("device 14"),
    FrameId::new("device 15"),
    FrameId::new("device 16"),
    FrameId::new("device 17"),
    FrameId::new("device 18"),
    FrameId::new("device 19"),
    FrameId::new("device 20"),
    FrameId::new("device 21"),
    FrameId::new("device 22"),
    FrameId::new("device 23"),
    FrameId::new("device 24"),
    FrameId::new("device 25"),
    FrameId::new("device 26"),
    FrameId::new("device 27"),
    FrameId::new("device 28"),
    FrameId::new("device 29"),
    FrameId::new("device 30"),
    FrameId::new("device 31"),
    FrameId::new("device 32"),
    FrameId::new("device 33"),
    FrameId::new("device 34"),
    FrameId::new("device 35"),
    FrameId::new("device 36"),
    FrameId::new("device 37"),
    FrameId::new("device 38"),
    FrameId::new("device 39"),
    FrameId::new("device 40"),
    FrameId::new("device 41"),
    FrameId::new("device 42"),
    FrameId::new("device 43"),
    FrameId::new("device 44"),
    FrameId::new("device 45"),
    FrameId::new("device 46"),
    FrameId::new("device 47"),
    FrameId::new("device 48"),
    FrameId::new("device 49"),
    FrameId::new("device 50"),
    FrameId::new("device 51"),
    FrameId::new("device 52"),
    FrameId::new("device 53"),
    FrameId::new("device 54"),
    FrameId::new("device 55"),
    FrameId::new("device 56"),
    FrameId::new("device 57"),
    FrameId::new("device 58"),
    FrameId::new("device 59"),
    FrameId::new("device 60"),
    FrameId::new("device 61"),
    FrameId::new("device 62"),
    FrameId::new("device 63"),
];

/// The frame device `i`'s calls and timers run in.
fn device_frame(i: usize) -> &'static FrameId {
    &DEVICE_FRAMES[i.min(DEVICE_FRAMES.len() - 1)]
}

/// Each device's DMA ops as the owners of the replay's timers (the flush queue's), each run in
/// its device's frame and counted.
struct DeviceTimers<'a> {
    apis: &'a [(crate::setup::DeviceDmaApi, String)],
    runs: &'a mut [u64],
}

impl clock::Timers for DeviceTimers<'_> {
    fn next(&self) -> Option<(u64, usize)> {
        self.apis
            .iter()
            .enumerate()
            .filter_map(|(i, (a, _))| Some((a.ops.next_timer_ps()?, i)))
            .min()
    }

    fn run(&mut self, hw: &mut crate::hw::model::Model, i: usize) -> u64 {
        let back = hw.enter(device_frame(i));
        let ran = self.apis[i].0.ops.run_timers(hw);
        hw.leave(back);
        self.runs[i] += ran;
        ran
    }
}

/// A trace without a DMA API event: nothing to replay, most likely the events were not
/// enabled when it was recorded.
fn no_dma_events(shown: &str, sum: &crate::trace::ReadSummary) -> InputError {
    let what = match sum.lines {
        0 => "the trace is empty".to_string(),
        1 => "no dma:* event in the trace's one line".to_string(),
        n => format!("no dma:* event in the trace's {n} lines"),
    };
    InputError {
        file: shown.to_string(),
        line: Some(sum.lines.max(1)),
        key: None,
        message: format!(
            "{what}: record them (Linux 6.12 on) with `trace-cmd record -e dma` or `echo 1 > /sys/kernel/tracing/events/dma/enable`"
        ),
    }
}

/// Names for a message: the first few, each quoted, and how many more.
fn some(names: &[&str]) -> String {
    const SHOWN: usize = 8;
    let mut s: Vec<String> = names.iter().take(SHOWN).map(|n| quote(n)).collect();
    if names.len() > SHOWN {
        s.push(format!("and {} more", names.len() - SHOWN));
    }
    s.join(", ")
}

/// What was replayed for one device.
#[derive(Clone, Debug)]
pub struct DeviceResult {
    pub name: String,
    pub coherent: bool,
    pub dma_mask: u64,
    pub dma_ops: String,
    pub inferred: Vec<String>,
    pub calls: Vec<CallStat>,
    /// Bytes per call, in the order of `calls`.
    pub bytes: Vec<u64>,
    pub unresolved: Vec<Unresolved>,
    pub unresolved_count: u64,
    /// Calls not made because the map they belong to was refused by the modelled kernel.
    pub skipped_after_refusal: u64,
    pub truncated: u64,
    pub completed: u64,
    /// Calls rebuilt but not timed (coherent allocations and frees): (call, count, bytes).
    pub untimed: Vec<(&'static str, u64, u64)>,
    /// The trace's own span of this device's calls, in ns.
    pub span_ns: Option<u64>,
    /// What its DMA ops' timers did, between its calls and after them.
    pub timers: TimerWork,
    /// Mappings made before the trace began, inferred from their syncs and unmaps, made
    /// before the first line and not timed.
    pub mapped_before: u64,
}

/// A device's timers over a replay (the flush queue's `fq_flush_timeout`): run while the CPU
/// idled between calls, so charged to no call.
#[derive(Clone, Debug, PartialEq)]
pub struct TimerWork {
    pub runs: u64,
    /// Of those, run after the trace's last call.
    pub after_end: u64,
    /// The timers' kernel functions, as their frames name them.
    pub names: Vec<String>,
    pub total_ps: u64,
    pub counts: [u64; Counter::N],
}

impl TimerWork {
    /// From a device's own stacks: those that no call of `calls` is the root of are its
    /// timers'.
    fn of(own: &[StackRow], calls: &[CallStat], runs: u64, in_trace: u64) -> TimerWork {
        let mut w = TimerWork {
            runs,
            after_end: runs.saturating_sub(in_trace),
            names: Vec::new(),
            total_ps: 0,
            counts: [0; Counter::N],
        };
        for row in own {
            let root = row.stack.split(" > ").next().unwrap_or("");
            if calls.iter().any(|c| c.call == root) {
                continue;
            }
            if !w.names.iter().any(|n| n == root) {
                w.names.push(root.to_string());
            }
            w.total_ps = w.total_ps.saturating_add(row.self_ps);
            for (a, b) in w.counts.iter_mut().zip(row.counts) {
                *a = a.saturating_add(b);
            }
        }
        w
    }
}

impl DeviceResult {
    fn total_ps(&self) -> u64 {
        self.calls
            .iter()
            .map(|c| c.total_ps)
            .fold(0, u64::saturating_add)
    }

    fn call_count(&self) -> u64 {
        self.calls.iter().map(|c| c.count).sum()
    }

    /// The modelled time of the calls and the device's timers as a share of one CPU over the
    /// trace's own span of its calls.
    pub fn cpu_share(&self) -> Option<f64> {
        let span = self.span_ns.filter(|&s| s > 0)?;
        let busy = self.total_ps().saturating_add(self.timers.total_ps);
        Some(ns(busy) / span as f64)
    }

    /// Calls a second at the trace's own rate.
    pub fn call_rate(&self) -> Option<f64> {
        let span = self.span_ns.filter(|&s| s > 0)?;
        Some(self.call_count() as f64 * 1e9 / span as f64)
    }
}

#[derive(Clone, Debug)]
pub struct RunResult {
    pub info: RunInfo,
    pub devices: Vec<DeviceResult>,
    pub findings: Rc<Findings>,
    /// Calls that started after their timestamp, the modelled CPU still busy.
    pub late: Late,
    /// The CPUs the trace's calls ran on.
    pub cpus: Rc<Vec<u32>>,
    /// How many modelled CPUs replayed them: 1, or each of the trace's on its own.
    pub replayed_on_cpus: u32,
    /// The locks the DMA layers took, on more than one CPU.
    pub locks: Vec<LockRow>,
    pub skipped: BTreeMap<String, u64>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

/// A lock the devices' DMA layers took on a many-CPU replay, and who waited for it.
#[derive(Clone, Debug, PartialEq)]
pub struct LockRow {
    /// The device whose ops reported it first.
    pub device: String,
    pub lock: &'static str,
    pub record: crate::smp::LockRecord,
    /// (waiting CPU, holding CPU, ps) by the trace's CPU numbers, the longest first.
    pub pairs: Vec<(u32, u32, u64)>,
}

/// A mapping the replay made, by the trace's number for it.
enum Mapped {
    Single(DmaAddr),
    Sg(SgTable),
}

fn sg_table(entries: &[(u64, u64)]) -> Option<SgTable> {
    let mut out = Vec::with_capacity(entries.len());
    for &(phys, len) in entries {
        let page = phys & !(crate::scatterlist::PAGE_SIZE - 1);
        out.push(SgEntry {
            page: PhysAddr(page),
            offset: (phys - page) as u32,
            length: u32::try_from(len).ok()?,
            dma_address: DmaAddr::MAPPING_ERROR,
            dma_length: 0,
        });
    }
    Some(SgTable {
        entries: out,
        nents: 0,
    })
}

/// The DMA address `offset` bytes into a mapped list, its mapped segments counted back to
/// back.
fn sg_addr(sgt: &SgTable, offset: u64) -> Option<DmaAddr> {
    let mut at = 0u64;
    for e in &sgt.entries[..sgt.nents] {
        let len = u64::from(e.dma_length);
        if offset < at.saturating_add(len) {
            return e.dma_address.0.checked_add(offset - at).map(DmaAddr);
        }
        at = at.saturating_add(len);
    }
    None
}

/// A device's mappings the replay made, by the trace's number for them.
type LiveMaps = RefCell<crate::trace::HashMap<usize, Mapped>>;

/// The replay's mappings, per device.
type Live = Vec<LiveMaps>;

/// Each device's DMA ops, and how the report names them.
type Apis = Vec<(crate::setup::DeviceDmaApi, String)>;

/// Make each device's mappings made before the trace, as the kernel had made them before it
/// began: device `i`'s `j`th is the trace's mapping `MapId(j)` ([`Table::with_before`]). A
/// device without an IOMMU maps each at its DMA address (dma-direct: its physical one); one
/// behind an IOMMU maps pages of its own from `before_base` at the IOVA its allocator gives,
/// which its later calls reach through their `MapId`, as those of a traced map do. A map the
/// modelled kernel refuses leaves the mapping out, and its calls are then not made.
fn map_before(
    hw: &mut crate::hw::model::Model,
    apis: &[(crate::setup::DeviceDmaApi, String)],
    w: &Replay,
) -> Live {
    let mut next = w.before_base;
    let mut live: Live = (0..w.devices.len()).map(|_| Default::default()).collect();
    for (i, (_, maps)) in w.before.iter().enumerate() {
        let (Some(d), Some((api, _))) = (w.devices.get(i), apis.get(i)) else {
            continue;
        };
        for (id, m) in maps.iter().enumerate() {
            let phys = if d.iommu {
                own_pages(m, &mut next)
            } else {
                m.phys.clone()
            };
            let attrs = crate::types::DmaAttrs::NONE;
            let made = if m.sg {
                sg_table(&phys).and_then(|mut sgt| {
                    api.map_sg(hw, &mut sgt, m.dir, attrs).ok()?;
                    Some(Mapped::Sg(sgt))
                })
            } else {
                let (p, size) = phys[0];
                let a = api.map_page(hw, PhysAddr(p), size, m.dir, attrs);
                a.ok().map(Mapped::Single)
            };
            if let Some(made) = made {
                live[i].get_mut().insert(id, made);
            }
        }
    }
    live
}

/// Pages of its own for a mapping made before the trace behind an IOMMU, from `next` on, each
/// entry's offset in its first page kept.
fn own_pages(m: &Mapping, next: &mut u64) -> Vec<(u64, u64)> {
    m.phys
        .iter()
        .map(|&(p, len)| {
            let at = next.saturating_add(p & (PAGE - 1));
            *next = next.saturating_add(before_pages(p, len).saturating_mul(PAGE));
            (at, len)
        })
        .collect()
}

/// What a CPU's calls added up to, per device: each CPU of a many-CPU replay keeps its own,
/// added up when the run ends.
struct Tally {
    timers: Vec<CallTimer>,
    bytes: Vec<BTreeMap<&'static str, u64>>,
    /// Calls not made: their mapping was refused by the modelled kernel.
    skipped: Vec<u64>,
    /// Calls rebuilt but not timed, by name: (count, bytes).
    untimed: Vec<BTreeMap<&'static str, (u64, u64)>>,
    /// Each device's timer runs.
    runs: Vec<u64>,
}

impl Tally {
    fn new(n: usize) -> Tally {
        Tally {
            timers: (0..n).map(|_| CallTimer::default()).collect(),
            bytes: vec![BTreeMap::new(); n],
            skipped: vec![0; n],
            untimed: vec![BTreeMap::new(); n],
            runs: vec![0; n],
        }
    }

    fn absorb(&mut self, o: &Tally) {
        for i in 0..self.timers.len() {
            self.timers[i].absorb(&o.timers[i]);
            for (k, v) in &o.bytes[i] {
                let b = self.bytes[i].entry(k).or_default();
                *b = b.saturating_add(*v);
            }
            self.skipped[i] += o.skipped[i];
            for (k, (n, b)) in &o.untimed[i] {
                let u = self.untimed[i].entry(k).or_default();
                *u = (u.0 + n, u.1.saturating_add(*b));
            }
            self.runs[i] += o.runs[i];
        }
    }
}

/// The machine booted with each device's DMA ops (`slots` CPUs' worth of per-CPU state), and
/// the mappings made before the trace, its ledger cleared after them.
fn boot(
    s: &Scenario,
    w: &Replay,
    slots: u32,
) -> Result<(crate::hw::model::Model, Apis, Live), RunFailure> {
    // The model's own memory where the driver's buffers are not.
    let (lo, hi) = w.phys_span;
    let above = hi
        .div_ceil(MODEL_MEMORY)
        .checked_mul(MODEL_MEMORY)
        .filter(|b| b.checked_add(MODEL_MEMORY).is_some());
    let base = match above {
        Some(b) if hi > MODEL_MEMORY_BASE && lo < MODEL_MEMORY_BASE + MODEL_MEMORY => b,
        // Free where it usually is, or no room above the trace's addresses: where it usually is.
        _ => MODEL_MEMORY_BASE,
    };
    let mut m = Machine::boot(
        &s.profile,
        vec![NodeRange {
            node: 0,
            start: PhysAddr(base),
            size: MODEL_MEMORY,
        }],
    );
    let domain = s.iommu.or_else(|| default_domain(&s.profile));
    let mut apis = Vec::new();
    for d in w.devices.iter() {
        let own = domain.map(|c| crate::setup::IommuConfig {
            granule: d.granule.unwrap_or(c.granule),
            ..c
        });
        let setup = DeviceSetup {
            profile: &s.profile,
            policies: &s.policies,
            device: &d.device,
            swiotlb: &s.swiotlb,
            iommu: if d.iommu { own.as_ref() } else { None },
            ops: s.dma_ops_for(d.iommu, d.bounce),
        };
        let ops = setup.ops.describe(&s.policies);
        apis.push((setup_dma_ops(&mut m, &setup, slots)?, ops));
    }
    let mut hw = m.hw;
    // Made before the first line, so neither timed nor counted: the ledger starts after.
    let live = map_before(&mut hw, &apis, w);
    hw.clear_ledger();
    Ok((hw, apis, live))
}

/// What the second read leaves for the report: the live table, the checks and the pairing.
struct Read {
    table: Table,
    checker: Checker,
    rebuilder: Rebuilder,
}

/// The second read: each call handed to `each` as its line comes (its record, its device, the
/// call), of the bytes the first read (a trace that grew since is refused, here and after).
fn second_read(
    w: &Replay,
    mut each: impl FnMut(&crate::trace::Record, usize, Traced) -> Result<(), InputError>,
) -> Result<Read, RunFailure> {
    // The live table the checks and the pairing share, the cut lists whole and what was
    // mapped before the trace entered where it is first used.
    let mut table = Table::completing((*w.wholes).clone())
        .with_before(&w.before)
        .tracking_cachelines();
    let mut checker = Checker::new(w.strict_window);
    let mut rebuilder = Rebuilder::default();
    let shown = w.source.shown();
    let input = w.source.reopen(w.stamp)?;
    let n = w.devices.len();
    let read = crate::trace::read(&shown, input, w.skip_bad, |r| {
        let step = table.push(&r);
        checker.push(&r, &step, &table);
        let Some((di, traced)) = rebuilder.push(&r, &step, &table) else {
            return Ok(());
        };
        if di >= n {
            return Err(InputError::new(
                &shown,
                "the trace changed while it was replayed",
            ));
        }
        each(&r, di, traced)
    });
    if read?.bytes != w.stamp.bytes {
        return Err(InputError::new(&shown, "the trace changed while it was read").into());
    }
    w.source.unchanged(w.stamp)?;
    Ok(Read {
        table,
        checker,
        rebuilder,
    })
}

/// Make device `di`'s traced call on `hw` in its device's frame, timed, and tally it. The
/// mapping it uses is taken out of `live` while the call runs (another CPU's call on it waits
/// its turn, [`Many::ready`]), so no borrow is held across a switch of CPUs.
fn make_call(
    hw: &mut crate::hw::model::Model,
    api: &crate::setup::DeviceDmaApi,
    live: &LiveMaps,
    tally: &mut Tally,
    di: usize,
    traced: &Traced,
) {
    let t = &mut tally.timers[di];
    let name = traced.call.name();
    let back = hw.enter(device_frame(di));
    let made = match &traced.call {
        Call::Alloc { .. } | Call::Free { .. } => {
            // Counted with its bytes, its time left out (the model does not price it).
            let u = tally.untimed[di].entry(name).or_default();
            *u = (u.0 + 1, u.1.saturating_add(traced.bytes));
            hw.leave(back);
            return;
        }
        Call::MapPage {
            map,
            phys,
            size,
            dir,
            attrs,
        } => {
            let r = t.time_result(hw, name, |hw| {
                api.map_page(hw, PhysAddr(*phys), *size, *dir, *attrs)
            });
            if let Some(a) = r {
                live.borrow_mut().insert(map.0, Mapped::Single(a));
            }
            true
        }
        Call::UnmapPage {
            map,
            size,
            dir,
            attrs,
        } => {
            let m = live.borrow_mut().remove(&map.0);
            match m {
                Some(Mapped::Single(a)) => {
                    t.time(hw, name, |hw| api.unmap_page(hw, a, *size, *dir, *attrs));
                    true
                }
                _ => false,
            }
        }
        Call::MapSg {
            map,
            entries,
            dir,
            attrs,
        } => match sg_table(entries) {
            Some(mut sgt) => {
                let r = t.time_result(hw, name, |hw| api.map_sg(hw, &mut sgt, *dir, *attrs));
                if r.is_some() {
                    live.borrow_mut().insert(map.0, Mapped::Sg(sgt));
                }
                true
            }
            None => false,
        },
        Call::UnmapSg { map, dir, attrs } => {
            let m = live.borrow_mut().remove(&map.0);
            match m {
                Some(Mapped::Sg(mut sgt)) => {
                    t.time(hw, name, |hw| api.unmap_sg(hw, &mut sgt, *dir, *attrs));
                    true
                }
                _ => false,
            }
        }
        Call::SyncSingle {
            map,
            offset,
            size,
            dir,
            for_device,
        } => {
            let addr = match live.borrow().get(&map.0) {
                Some(Mapped::Single(a)) => a.0.checked_add(*offset).map(DmaAddr),
                Some(Mapped::Sg(sgt)) => sg_addr(sgt, *offset),
                None => None,
            };
            match addr {
                Some(a) => {
                    t.time(hw, name, |hw| {
                        if *for_device {
                            api.sync_single_for_device(hw, a, *size, *dir)
                        } else {
                            api.sync_single_for_cpu(hw, a, *size, *dir)
                        }
                    });
                    true
                }
                None => false,
            }
        }
        Call::SyncSg {
            map,
            dir,
            for_device,
        } => {
            let m = live.borrow_mut().remove(&map.0);
            match m {
                Some(Mapped::Sg(sgt)) => {
                    t.time(hw, name, |hw| {
                        if *for_device {
                            api.sync_sg_for_device(hw, &sgt, *dir)
                        } else {
                            api.sync_sg_for_cpu(hw, &sgt, *dir)
                        }
                    });
                    live.borrow_mut().insert(map.0, Mapped::Sg(sgt));
                    true
                }
                other => {
                    if let Some(o) = other {
                        live.borrow_mut().insert(map.0, o);
                    }
                    false
                }
            }
        }
    };
    hw.leave(back);
    if made {
        let b = tally.bytes[di].entry(name).or_default();
        *b = b.saturating_add(traced.bytes);
    } else {
        tally.skipped[di] += 1;
    }
}

pub fn run(s: &Scenario, w: &Replay, progress: &Progress) -> Result<RunResult, RunFailure> {
    if w.on_trace_cpus() {
        run_many(s, w, progress)
    } else {
        run_one(s, w, progress)
    }
}

/// Every call on one modelled CPU in trace order, each made as its line is read.
fn run_one(s: &Scenario, w: &Replay, progress: &Progress) -> Result<RunResult, RunFailure> {
    let (mut hw, apis, live) = boot(s, w, 1)?;
    let n = w.devices.len();
    let mut tally = Tally::new(n);
    let mut clock = TraceClock::default();
    // Each call made as its line comes, every device's in trace order, at its timestamp.
    let read = second_read(w, |r, di, traced| {
        let mut owners = DeviceTimers {
            apis: &apis,
            runs: &mut tally.runs,
        };
        clock.before_call(&mut hw, r.time_ns, r.cpu, &mut owners);
        make_call(&mut hw, &apis[di].0, &live[di], &mut tally, di, &traced);
        progress.advance(1);
        Ok(())
    })?;
    let in_trace = tally.runs.clone();
    let mut owners = DeviceTimers {
        apis: &apis,
        runs: &mut tally.runs,
    };
    clock.finish(&mut hw, &mut owners);
    let ran = Ran {
        hw,
        apis,
        tally,
        in_trace,
        late: clock.late,
        on_cpus: 1,
    };
    Ok(ran.result(s, w, read, progress))
}

/// A call of a many-CPU replay, queued for its CPU: its device, the trace's CPU, and its place
/// among the calls on its mapping.
struct Item {
    di: usize,
    cpu: Option<u32>,
    traced: Traced,
    /// The mapping it uses (the trace's number for it) and how many calls on it come before
    /// it in the trace.
    after: Option<(usize, u32)>,
}

/// What the trace's CPUs share besides the DMA layers: the driver's own hand-over of its
/// mappings. A mapping made on one CPU and synced or unmapped on another is handed over in
/// the driver's memory, which the model does not price: a call waits, at its turn, until the
/// calls the trace shows before it on its mapping are made, as the driver's call could not
/// come before them.
struct Many {
    /// Per device, calls made on each mapping.
    made: RefCell<Vec<crate::trace::HashMap<usize, u32>>>,
    q: crate::smp::WaitQueue,
}

impl Many {
    /// Wait until the calls before `it` on its mapping are made: whether it waited.
    fn ready(&self, hw: &mut crate::hw::model::Model, it: &Item) -> bool {
        let Some((map, seq)) = it.after else {
            return false;
        };
        hw.take_turn();
        let mut waited = false;
        while self.made.borrow()[it.di].get(&map).copied().unwrap_or(0) < seq {
            hw.wait_on(&self.q);
            waited = true;
        }
        waited
    }

    /// `it` is made: a CPU waiting for it goes on.
    fn done(&self, hw: &crate::hw::model::Model, it: &Item) {
        if let Some((map, seq)) = it.after {
            self.made.borrow_mut()[it.di].insert(map, seq + 1);
            hw.wake_all(&self.q);
        }
    }
}

/// The trace's number for the mapping a call uses.
fn map_of(call: &Call) -> Option<usize> {
    match call {
        Call::Alloc { .. } | Call::Free { .. } => None,
        Call::MapPage { map, .. }
        | Call::UnmapPage { map, .. }
        | Call::MapSg { map, .. }
        | Call::UnmapSg { map, .. }
        | Call::SyncSingle { map, .. }
        | Call::SyncSg { map, .. } => Some(map.0),
    }
}

/// One modelled CPU's run: its machine, its tally and its late calls.
struct CpuRun {
    hw: crate::hw::model::Model,
    tally: Tally,
    late: Late,
}

/// Each CPU of the trace on a modelled CPU of its own ([`crate::smp`]), its calls in trace
/// order at their timestamps, every CPU calling each device's one set of DMA layers. The
/// calls are read first, per CPU, then run.
fn run_many(s: &Scenario, w: &Replay, progress: &Progress) -> Result<RunResult, RunFailure> {
    let placed: Vec<(u32, u32)> = w
        .cpus
        .iter()
        .map(|&c| (c, super::smp_cpus::node_of(s, c)))
        .collect();
    let (hw, apis, live) = boot(s, w, super::smp_cpus::per_cpu_slots(s, &placed))?;
    let n = w.devices.len();
    let mut queues: Vec<Vec<Item>> = placed.iter().map(|_| Vec::new()).collect();
    let mut seqs: crate::trace::HashMap<(usize, usize), u32> = Default::default();
    let mut t0 = None;
    let read = second_read(w, |r, di, traced| {
        // A line without a CPU runs on the trace's first.
        let q = r
            .cpu
            .and_then(|c| w.cpus.binary_search(&c).ok())
            .unwrap_or(0);
        t0 = t0.or(traced.time_ns);
        let after = map_of(&traced.call).map(|m| {
            let k = seqs.entry((di, m)).or_default();
            *k += 1;
            (m, *k - 1)
        });
        queues[q].push(Item {
            di,
            cpu: r.cpu,
            traced,
            after,
        });
        Ok(())
    })?;
    drop(seqs);
    let origin = hw.now_ps();
    let total = hw.clone();
    let mut machines = Vec::with_capacity(placed.len());
    for &(cpu, node) in &placed[1..] {
        machines.push(hw.on_cpu(cpu, node));
    }
    let mut hw = hw;
    hw.place(placed[0].0, placed[0].1);
    machines.insert(0, hw);
    for (a, _) in &apis {
        if !a.ops.shareable() {
            return Err(super::Bug::NotShared { what: a.ops.name() }.into());
        }
    }
    let many = Many {
        made: RefCell::new((0..n).map(|_| Default::default()).collect()),
        q: crate::smp::WaitQueue::new(),
    };
    let body = |(mut hw, calls): (crate::hw::model::Model, Vec<Item>), c, _| {
        hw.set_cpu(c);
        let mut clock = t0.map_or_else(TraceClock::default, |t| TraceClock::starting_at(origin, t));
        let mut tally = Tally::new(n);
        for it in &calls {
            let mut owners = DeviceTimers {
                apis: &apis,
                runs: &mut tally.runs,
            };
            let t = it.traced.time_ns;
            clock.before_call_after(&mut hw, t, it.cpu, &mut owners, |hw| many.ready(hw, it));
            make_call(
                &mut hw,
                &apis[it.di].0,
                &live[it.di],
                &mut tally,
                it.di,
                &it.traced,
            );
            many.done(&hw, it);
            progress.advance(1);
        }
        CpuRun {
            hw,
            tally,
            late: clock.late,
        }
    };
    let runs = super::smp_cpus::run_each(machines.into_iter().zip(queues), progress, &body)?;
    Ok(end_many(s, w, read, total, apis, runs, progress))
}

/// After the CPUs: the timers still pending run after the trace's last call, on the first
/// CPU, alone, from when the last CPU ended; every CPU's charges and tallies are added up.
fn end_many(
    s: &Scenario,
    w: &Replay,
    read: Read,
    mut total: crate::hw::model::Model,
    apis: Apis,
    runs: Vec<CpuRun>,
    progress: &Progress,
) -> RunResult {
    let n = w.devices.len();
    let mut tally = Tally::new(n);
    let mut late = Late::default();
    let end = runs.iter().map(|r| r.hw.now_ps()).max().unwrap_or(0);
    let mut last = None;
    for r in runs {
        tally.absorb(&r.tally);
        late.absorb(&r.late);
        if last.is_none() {
            last = Some(r.hw);
        } else {
            total.absorb_ledger(&r.hw);
        }
    }
    let in_trace = tally.runs.clone();
    if let Some(mut hw) = last {
        hw.set_cpu(crate::smp::Cpu::alone());
        hw.idle_until(end);
        let mut owners = DeviceTimers {
            apis: &apis,
            runs: &mut tally.runs,
        };
        TraceClock::default().finish(&mut hw, &mut owners);
        total.absorb_ledger(&hw);
    }
    let ran = Ran {
        hw: total,
        apis,
        tally,
        in_trace,
        late,
        on_cpus: w.cpus.len() as u32,
    };
    ran.result(s, w, read, progress)
}

/// A run done: the machine whose ledger holds every CPU's charges, the device's ops, and
/// what the calls added up to.
struct Ran {
    hw: crate::hw::model::Model,
    apis: Apis,
    tally: Tally,
    /// Each device's timer runs before the trace's last call.
    in_trace: Vec<u64>,
    late: Late,
    on_cpus: u32,
}

impl Ran {
    fn result(self, s: &Scenario, w: &Replay, read: Read, progress: &Progress) -> RunResult {
        let Ran {
            mut hw,
            apis,
            mut tally,
            in_trace,
            late,
            on_cpus,
        } = self;
        let n = w.devices.len();
        // What only the second read knows: the cut lists it completed, so the calls it could
        // pair and those it could not, and what the checks found.
        let second = read.rebuilder.finish();
        let findings = read.checker.finish(&read.table, w.strict_window);
        // Each call left out advances the run as a made one does, so that the run's steps add
        // up to its total (the first read's calls, made or left out).
        progress.advance(second.iter().map(|d| d.unresolved_count).sum());
        debug_assert!(hw.ledger().depth_is_zero());
        let stacks = device_stacks(stack_rows(hw.ledger()), w);
        let mut timer_work = Vec::with_capacity(n);
        for (i, (d, t)) in w.devices.iter().zip(tally.timers.iter_mut()).enumerate() {
            let own: Vec<StackRow> = stacks
                .iter()
                .filter_map(|r| {
                    let rest = r.stack.strip_prefix(d.device.name.as_str())?;
                    Some(StackRow {
                        stack: rest.strip_prefix(" > ")?.to_string(),
                        self_ps: r.self_ps,
                        counts: r.counts,
                    })
                })
                .collect();
            t.attribute(&own);
            timer_work.push(TimerWork::of(&own, &t.stats, tally.runs[i], in_trace[i]));
        }
        let locks = if on_cpus > 1 {
            lock_rows(w, &apis)
        } else {
            Vec::new()
        };
        let devices = w
            .devices
            .iter()
            .zip(std::mem::take(&mut tally.timers))
            .zip(apis)
            .enumerate()
            .map(|(i, ((d, t), (_, ops)))| DeviceResult {
                name: d.device.name.clone(),
                coherent: d.device.coherent,
                dma_mask: d.device.dma_mask,
                dma_ops: ops,
                inferred: inferred(s, d),
                bytes: t
                    .stats
                    .iter()
                    .map(|c| tally.bytes[i].get(c.call).copied().unwrap_or(0))
                    .collect(),
                calls: t.stats,
                unresolved: second.get(i).map_or(Vec::new(), |c| c.unresolved.clone()),
                unresolved_count: second.get(i).map_or(0, |c| c.unresolved_count),
                skipped_after_refusal: tally.skipped[i],
                truncated: d.calls.truncated,
                completed: second.get(i).map_or(0, |c| c.completed),
                untimed: tally.untimed[i]
                    .iter()
                    .map(|(c, (n, b))| (*c, *n, *b))
                    .collect(),
                span_ns: d
                    .calls
                    .first_ns
                    .zip(d.calls.last_ns)
                    .map(|(a, b)| b.saturating_sub(a)),
                timers: timer_work[i].clone(),
                mapped_before: d.mapped_before,
            })
            .collect();
        RunResult {
            info: s.run_info(),
            devices,
            findings: Rc::new(findings),
            late,
            cpus: w.cpus.clone(),
            replayed_on_cpus: on_cpus,
            locks,
            skipped: w.skipped.clone(),
            counts: hw.ledger().totals(),
            stacks,
            total_ps: hw.ledger().total_ps(),
        }
    }
}

/// What the report says was inferred of device `d`, its domain included.
fn inferred(s: &Scenario, d: &ReplayDevice) -> Vec<String> {
    let mut v = d.inferred.clone();
    if d.iommu && s.iommu.is_none() {
        let kib = d.granule.unwrap_or(4096) >> 10;
        v.push(format!(
            "its domain: the platform's SMMU, {kib} KB pages, 48-bit IOVAs (an [iommu] section sets another)"
        ));
    }
    v
}

/// Each device's stacks under its own name rather than its frame's.
fn device_stacks(mut stacks: Vec<StackRow>, w: &Replay) -> Vec<StackRow> {
    let n = w.devices.len();
    for row in &mut stacks {
        let (root, rest) = row.stack.split_once(" > ").unwrap_or((&row.stack, ""));
        let Some(i) = DEVICE_FRAMES.iter().position(|f| f.name() == root) else {
            continue;
        };
        let name = if i == DEVICE_FRAMES.len() - 1 && n > DEVICE_FRAMES.len() {
            "(devices 64 on)"
        } else {
            w.devices[i].device.name.as_str()
        };
        row.stack = if rest.is_empty() {
            name.to_string()
        } else {
            format!("{name} > {rest}")
        };
    }
    stacks
}

/// The locks the devices' DMA layers took, each once (devices behind one SMMU share its
/// locks, and report the same record), named by device where there are several, with the
/// waits by the trace's CPU numbers.
fn lock_rows(w: &Replay, apis: &Apis) -> Vec<LockRow> {
    use crate::stats::Stats as _;
    let mut rows: Vec<LockRow> = Vec::new();
    let cpu = |i: usize| w.cpus.get(i).copied().unwrap_or(i as u32);
    for (d, (api, _)) in w.devices.iter().zip(apis) {
        for (name, rec) in api.ops.lock_records() {
            if rec.acquired == 0 || rows.iter().any(|r| r.lock == name && r.record == rec) {
                continue;
            }
            let mut pairs: Vec<(u32, u32, u64)> = rec
                .by_pair
                .iter()
                .map(|(&(a, b), &ps)| (cpu(a), cpu(b), ps))
                .collect();
            pairs.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (a.0, a.1).cmp(&(b.0, b.1))));
            rows.push(LockRow {
                device: d.device.name.clone(),
                lock: name,
                record: rec,
                pairs,
            });
        }
    }
    rows
}

// Rendering.

/// The `dmasim run` table of a replay.
pub fn table(r: &RunResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let calls: u64 = r.devices.iter().map(|d| d.call_count()).sum();
    let n = r.devices.len();
    let _ = writeln!(
        o,
        "trace      {n} device{}, {calls} calls replayed",
        if n == 1 { "" } else { "s" },
    );
    if !r.skipped.is_empty() {
        let n: u64 = r.skipped.values().fold(0, |a, b| a.saturating_add(*b));
        let s = if n == 1 { "" } else { "s" };
        let _ = writeln!(o, "           {n} line{s} of other events skipped");
    }
    cpus_line(&mut o, &r.cpus, r.replayed_on_cpus);
    late_line(&mut o, &r.late, r.replayed_on_cpus);
    for d in &r.devices {
        let _ = writeln!(
            o,
            "\ndevice     {} ({}, DMA mask {:#x}), {}",
            d.name,
            if d.coherent {
                "coherent"
            } else {
                "non-coherent"
            },
            d.dma_mask,
            d.dma_ops
        );
        for i in &d.inferred {
            let _ = writeln!(o, "inferred   {i}");
        }
        if d.mapped_before > 0 {
            let n = d.mapped_before;
            let _ = writeln!(
                o,
                "before     {n} mapping{} made before the trace began, as {} first sync or unmap gives {}: made before the first line, not timed",
                if n == 1 { "" } else { "s" },
                if n == 1 { "its" } else { "their" },
                if n == 1 { "it" } else { "them" },
            );
        }
        let unit = TimeUnit::for_column(d.calls.iter().map(|c| c.mean_ns()));
        let total_unit = TimeUnit::for_column(d.calls.iter().map(|c| ns(c.total_ps)));
        if !d.calls.is_empty() || !d.untimed.is_empty() {
            let _ = writeln!(
                o,
                "{:<28} {:>8} {:>10} {:>14} {:>14}",
                "call",
                "count",
                "bytes",
                unit.header("mean"),
                total_unit.header("total")
            );
        }
        for (c, b) in d.calls.iter().zip(&d.bytes) {
            let _ = writeln!(
                o,
                "{:<28} {:>8} {:>10} {:>14} {:>14}",
                c.call,
                c.count,
                human_bytes(*b),
                unit.num(c.mean_ns()),
                total_unit.num(ns(c.total_ps))
            );
        }
        for (call, count, b) in &d.untimed {
            let row = format!(
                "{call:<28} {count:>8} {:>10} {:>14}",
                human_bytes(*b),
                "not timed"
            );
            let _ = writeln!(o, "{row}");
        }
        if let (Some(rate), Some(share)) = (d.call_rate(), d.cpu_share())
            && !d.calls.is_empty()
        {
            let _ = writeln!(
                o,
                "at the trace's rate ({rate:.0} calls/s): {:.3} % of one CPU{}",
                share * 100.0,
                if d.timers.runs > 0 {
                    ", its timers' work included"
                } else {
                    ""
                }
            );
        }
        for c in &d.calls {
            let ops: Vec<String> = Counter::ALL
                .iter()
                .filter(|k| c.counts[**k as usize] > 0)
                .map(|k| format!("{} {}", k.name(), trim_float(c.per_call(*k))))
                .collect();
            if !ops.is_empty() {
                let _ = writeln!(o, "  per call {:<19} {}", c.call, ops.join(", "));
            }
        }
        timers_lines(&mut o, &d.timers);
        for c in d.calls.iter().filter(|c| c.errors > 0) {
            let _ = writeln!(
                o,
                "refused    {} of {} {}: {}",
                c.errors,
                c.count,
                c.call,
                c.first_error.as_deref().unwrap_or("")
            );
        }
        if d.skipped_after_refusal > 0 {
            let _ = writeln!(
                o,
                "not made   {} calls on mappings the modelled kernel refused",
                d.skipped_after_refusal
            );
        }
        if d.truncated > 0 {
            let _ = writeln!(
                o,
                "truncated  {} lists the trace cut at 128 entries: {} completed from their unmap's whole list (the entries past 128 as long as the last printed one), the others replayed with their first 128",
                d.truncated, d.completed
            );
        }
        for u in d.unresolved.iter().take(5) {
            let _ = writeln!(o, "not replayed line {}: {}: {}", u.line, u.event, u.why);
        }
        if d.unresolved_count > 5 {
            let _ = writeln!(o, "not replayed ... {} more", d.unresolved_count - 5);
        }
    }
    locks_table(&mut o, &r.locks);
    findings(&mut o, &r.findings);
    stack_table(&mut o, "over the trace", &r.stacks, r.total_ps, 1);
    o
}

/// The locks the trace's CPUs took, on a many-CPU replay: how often each CPU found one held,
/// and the longest waits by CPU pair (the trace's numbers).
fn locks_table(o: &mut String, locks: &[LockRow]) {
    if locks.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{:<32} {:>10} {:>10} {:>12} {:>10}  longest waits (CPU on CPU)",
        "lock", "taken", "found held", "spun (µs)", "max (ns)"
    );
    let named = locks.iter().any(|l| l.device != locks[0].device);
    for l in locks {
        let name = if named {
            format!("{}: {}", l.device, l.lock)
        } else {
            l.lock.to_string()
        };
        let top: Vec<String> = l
            .pairs
            .iter()
            .take(3)
            .map(|(w, h, ps)| format!("{w} on {h}: {:.3} µs", ns(*ps) / 1000.0))
            .collect();
        let r = &l.record;
        let _ = writeln!(
            o,
            "{name:<32} {:>10} {:>10} {:>12.3} {:>10.1}  {}",
            r.acquired,
            r.contended,
            ns(r.wait_ps) / 1000.0,
            ns(r.max_wait_ps),
            top.join("; ")
        );
    }
}

/// The CPUs the trace's calls ran on, and what the replay ran them on.
fn cpus_line(o: &mut String, cpus: &[u32], on: u32) {
    let ran = match cpus {
        [] => return,
        [c] => format!("CPU {c}"),
        _ => format!("{} CPUs ({})", cpus.len(), cpu_ranges(cpus)),
    };
    let how = if on > 1 {
        "replayed on the same CPUs of the platform, each its calls in trace order at their timestamps"
    } else {
        "replayed in trace order on one modelled CPU"
    };
    let _ = writeln!(o, "cpus       the trace's calls ran on {ran}; {how}");
}

/// Sorted CPU numbers as ranges: `0-3, 7`.
fn cpu_ranges(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j].saturating_add(1) {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

/// How many calls started after their timestamp, if any did.
fn late_line(o: &mut String, late: &Late, on: u32) {
    if late.calls == 0 {
        return;
    }
    let s = if late.calls == 1 { "" } else { "s" };
    let _ = write!(
        o,
        "late       {} call{s} started after {}, {} ({:.3} µs late in all)",
        late.calls,
        if late.calls == 1 {
            "its timestamp"
        } else {
            "their timestamps"
        },
        if on > 1 {
            "their modelled CPU still busy or waiting"
        } else {
            "the modelled CPU still busy"
        },
        ns(late.ps) / 1000.0,
    );
    let mut behind = Vec::new();
    if late.behind_other_cpu > 0 && on > 1 {
        behind.push(format!(
            "{} waiting for another CPU's earlier call on the same mapping",
            late.behind_other_cpu
        ));
    } else if late.behind_other_cpu > 0 {
        behind.push(format!(
            "{} behind a call the trace shows on another CPU (replayed on one)",
            late.behind_other_cpu
        ));
    }
    if late.behind_timer > 0 {
        behind.push(format!("{} behind a timer", late.behind_timer));
    }
    if !behind.is_empty() {
        let _ = write!(o, ": {}", behind.join(", "));
    }
    let _ = writeln!(o);
}

/// What a device's timers did, if they ran.
fn timers_lines(o: &mut String, t: &TimerWork) {
    if t.runs == 0 {
        return;
    }
    let after = match t.after_end {
        0 => String::new(),
        n => format!(", {n} after the trace's last call"),
    };
    let _ = writeln!(
        o,
        "timers     {} runs of {}{after}: {:.3} µs in all, in no call's time",
        t.runs,
        t.names.join(", "),
        ns(t.total_ps) / 1000.0,
    );
    let ops: Vec<String> = Counter::ALL
        .iter()
        .filter(|k| t.counts[**k as usize] > 0)
        .map(|k| {
            let per = t.counts[*k as usize] as f64 / t.runs as f64;
            format!("{} {}", k.name(), trim_float(per))
        })
        .collect();
    if !ops.is_empty() {
        let _ = writeln!(o, "  per run  {}", ops.join(", "));
    }
}

fn findings(o: &mut String, f: &Findings) {
    let (misuses, edges): (Vec<&Finding>, Vec<&Finding>) =
        f.kept.iter().partition(|x| x.kind.fails());
    let (before, live): (Vec<&Finding>, Vec<&Finding>) = edges
        .into_iter()
        .partition(|x| x.kind == FindingKind::MappedBefore);
    if !misuses.is_empty() {
        let _ = writeln!(o, "\nwarnings (what CONFIG_DMA_API_DEBUG would report)");
        finding_lines(o, &misuses);
        not_kept(o, f, |k| k.fails());
    }
    if !before.is_empty() {
        let _ = writeln!(
            o,
            "\nmapped before the trace began (no misuse in a window on a running driver; --strict-window makes them not-mapped)"
        );
        finding_lines(o, &before);
        not_kept(o, f, |k| k == FindingKind::MappedBefore);
    }
    if !live.is_empty() {
        let _ = writeln!(
            o,
            "\nlive at the end of the trace (no misuse in a window on a running driver; --strict-window makes them leaks)"
        );
        finding_lines(o, &live);
        not_kept(o, f, |k| !k.fails() && k != FindingKind::MappedBefore);
    }
}

/// A line for each kind with findings past those kept: how many more there were.
fn not_kept(o: &mut String, f: &Findings, which: impl Fn(FindingKind) -> bool) {
    for (&kind, _) in f.counts.iter().filter(|(k, _)| which(**k)) {
        let more = f.not_kept(kind);
        if more > 0 {
            let _ = writeln!(
                o,
                "  ... {more} more {} (the first {} of each kind are listed)",
                kind.name(),
                crate::trace::checks::KEPT_PER_KIND
            );
        }
    }
}

fn finding_lines(o: &mut String, f: &[&Finding]) {
    for x in f {
        let lines: Vec<String> = x.lines.iter().map(|l| l.to_string()).collect();
        let _ = writeln!(
            o,
            "  line {}: {} {}: {}",
            lines.join(", "),
            x.device,
            x.kind.name(),
            x.message
        );
    }
}

#[derive(Serialize)]
struct RunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    workload: WorkloadDoc<'a>,
    devices: Vec<DeviceDoc<'a>>,
    /// Every finding counted by kind; `findings` lists the first of each kind.
    finding_counts: BTreeMap<&'static str, u64>,
    findings: Vec<FindingDoc<'a>>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct WorkloadDoc<'a> {
    kind: &'static str,
    skipped_lines: &'a BTreeMap<String, u64>,
    /// The CPUs the trace's calls ran on, and how many modelled CPUs replayed them.
    trace_cpus: &'a [u32],
    replayed_on_cpus: u32,
    /// The locks the DMA layers took; left out on one CPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    locks: Vec<LockDoc<'a>>,
    /// Calls that started after their timestamp; left out when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    started_late: Option<LateDoc>,
}

#[derive(Serialize)]
struct LockDoc<'a> {
    device: &'a str,
    lock: &'static str,
    taken: u64,
    found_held: u64,
    spun_ns: f64,
    max_wait_ns: f64,
    /// The waits by (waiting CPU, holding CPU), the trace's numbers, the longest first.
    waits: Vec<WaitDoc>,
}

#[derive(Serialize)]
struct WaitDoc {
    cpu: u32,
    on_cpu: u32,
    ns: f64,
}

#[derive(Serialize)]
struct LateDoc {
    calls: u64,
    behind_other_cpu: u64,
    behind_timer: u64,
    total_ns: f64,
}

#[derive(Serialize)]
struct TimersDoc<'a> {
    runs: u64,
    after_trace: u64,
    functions: &'a [String],
    total_ns: f64,
    operations: BTreeMap<&'static str, u64>,
}

#[derive(Serialize)]
struct DeviceDoc<'a> {
    name: &'a str,
    coherent: bool,
    dma_mask: String,
    dma_ops: &'a str,
    inferred: &'a [String],
    /// Mappings made before the trace began, inferred and made before its first line.
    mapped_before: u64,
    calls: Vec<serde_json::Value>,
    /// The first calls left out, each with its line; `not_replayed_count` counts them all.
    not_replayed: Vec<UnresolvedDoc<'a>>,
    not_replayed_count: u64,
    not_made_after_refusal: u64,
    truncated_lists: u64,
    completed_lists: u64,
    /// Coherent allocations and frees: rebuilt and counted, not timed.
    untimed_calls: Vec<UntimedDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    calls_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_share: Option<f64>,
    /// Its DMA ops' timers; left out when none ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    timers: Option<TimersDoc<'a>>,
}

#[derive(Serialize)]
struct UntimedDoc {
    call: &'static str,
    count: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct UnresolvedDoc<'a> {
    line: usize,
    event: &'static str,
    why: &'a str,
}

#[derive(Serialize)]
struct FindingDoc<'a> {
    kind: &'static str,
    device: &'a str,
    lines: &'a [usize],
    message: &'a str,
}

/// The `dmasim run --format json` document of a replay.
pub fn json(r: &RunResult) -> serde_json::Value {
    let doc = RunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        workload: WorkloadDoc {
            kind: "replay",
            skipped_lines: &r.skipped,
            trace_cpus: &r.cpus,
            replayed_on_cpus: r.replayed_on_cpus,
            locks: r
                .locks
                .iter()
                .map(|l| LockDoc {
                    device: &l.device,
                    lock: l.lock,
                    taken: l.record.acquired,
                    found_held: l.record.contended,
                    spun_ns: ns(l.record.wait_ps),
                    max_wait_ns: ns(l.record.max_wait_ps),
                    waits: l
                        .pairs
                        .iter()
                        .map(|&(cpu, on_cpu, ps)| WaitDoc {
                            cpu,
                            on_cpu,
                            ns: ns(ps),
                        })
                        .collect(),
                })
                .collect(),
            started_late: (r.late.calls > 0).then(|| LateDoc {
                calls: r.late.calls,
                behind_other_cpu: r.late.behind_other_cpu,
                behind_timer: r.late.behind_timer,
                total_ns: ns(r.late.ps),
            }),
        },
        devices: r
            .devices
            .iter()
            .map(|d| DeviceDoc {
                name: &d.name,
                coherent: d.coherent,
                dma_mask: format!("{:#x}", d.dma_mask),
                dma_ops: &d.dma_ops,
                inferred: &d.inferred,
                mapped_before: d.mapped_before,
                calls: d
                    .calls
                    .iter()
                    .zip(&d.bytes)
                    .map(|(c, b)| {
                        let mut v = serde_json::to_value(call_doc(c)).expect("plain data");
                        v["bytes"] = (*b).into();
                        v
                    })
                    .collect(),
                not_replayed: d
                    .unresolved
                    .iter()
                    .map(|u| UnresolvedDoc {
                        line: u.line,
                        event: u.event,
                        why: &u.why,
                    })
                    .collect(),
                not_replayed_count: d.unresolved_count,
                not_made_after_refusal: d.skipped_after_refusal,
                truncated_lists: d.truncated,
                completed_lists: d.completed,
                untimed_calls: d
                    .untimed
                    .iter()
                    .map(|&(call, count, bytes)| UntimedDoc { call, count, bytes })
                    .collect(),
                calls_per_s: d.call_rate(),
                cpu_share: d.cpu_share(),
                timers: (d.timers.runs > 0).then(|| TimersDoc {
                    runs: d.timers.runs,
                    after_trace: d.timers.after_end,
                    functions: &d.timers.names,
                    total_ns: ns(d.timers.total_ps),
                    operations: counts_map(&d.timers.counts),
                }),
            })
            .collect(),
        finding_counts: r
            .findings
            .counts
            .iter()
            .map(|(k, n)| (k.name(), *n))
            .collect(),
        findings: r
            .findings
            .kept
            .iter()
            .map(|f| FindingDoc {
                kind: f.kind.name(),
                device: &f.device,
                lines: &f.lines,
                message: &f.message,
            })
            .collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

impl super::WorkloadKind for Replay {
    type Output = RunResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<RunResult, RunFailure> {
        run(s, self, progress)
    }

    /// A device behind an IOMMU needs an SMMU on the platform (the scenario's `[iommu]`, or
    /// the platform's own with [`default_domain`]); the trace's CPUs, when they replay the
    /// calls, the platform's CPUs of their numbers ([`Replay::check_cpus`]).
    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        self.check_cpus(s)?;
        let Some(d) = self.devices.iter().find(|d| d.iommu) else {
            return Ok(());
        };
        if s.iommu.is_none() && default_domain(&s.profile).is_none() {
            return Err(InputError::new(
                &s.file,
                format!(
                    "device {} maps through an IOMMU, but platform {} has no [smmu]: replay it on a platform with one (--platform), or say the device has none (--device {}:iommu=no)",
                    d.device.name,
                    s.profile.name(),
                    d.device.name
                ),
            ));
        }
        s.profile
            .require_wmb(&format!("device {} (behind an IOMMU)", d.device.name))
    }

    fn work(&self, s: &Scenario) -> u128 {
        let line = s.work_line();
        self.devices
            .iter()
            .map(|d| 8 * u128::from(d.calls.made) + u128::from(d.calls.bytes) / line)
            .sum()
    }

    fn progress_total(&self) -> u64 {
        self.devices
            .iter()
            .map(|d| d.calls.made.saturating_add(d.calls.unresolved_count))
            .fold(0, u64::saturating_add)
    }

    fn own_devices(&self) -> bool {
        true
    }

    fn uses_swiotlb(&self) -> bool {
        self.devices.iter().any(|d| d.bounce)
    }

    fn own_iommu_domain(&self) -> bool {
        self.devices.iter().any(|d| d.iommu)
    }
}

impl Replay {
    /// Each of the trace's CPUs replays on the platform's CPU of its number (so its per-CPU
    /// state and its node are that CPU's), which the platform must have; and every device's
    /// ops must be shareable between CPUs. A trace naming one CPU, or `--cpus 1`, needs
    /// neither. Refused naming the trace's line that first names the CPU.
    fn check_cpus(&self, s: &Scenario) -> Result<(), InputError> {
        if !self.on_trace_cpus() {
            return Ok(());
        }
        let file = self.source.shown();
        let fix = "replay on a platform with them (--platform), or every call on one CPU in trace order (--cpus 1, `workload.cpus = 1`)";
        let platform = s.profile.name();
        let at = |line: usize, message: String| InputError {
            file: file.clone(),
            line: Some(line),
            key: None,
            message,
        };
        let first = self.cpu_lines.first().copied().unwrap_or(1);
        let has = super::smp_cpus::platform_cpu_numbers(s);
        if has.is_empty() {
            return Err(at(
                first,
                format!(
                    "the trace's calls ran on {} CPUs, and platform `{platform}` does not say how many it has (`platform.cpus`): {fix}",
                    self.cpus.len()
                ),
            ));
        }
        if self.cpus.len() > has.len() {
            let line = self.cpu_lines.get(has.len()).copied().unwrap_or(first);
            return Err(at(
                line,
                format!(
                    "the trace's calls ran on {} CPUs ({}), and platform `{platform}` has {}: {fix}",
                    self.cpus.len(),
                    cpu_ranges(&self.cpus),
                    has.len()
                ),
            ));
        }
        for (&c, &line) in self.cpus.iter().zip(self.cpu_lines.iter()) {
            if has.binary_search(&c).is_err() {
                return Err(at(
                    line,
                    format!(
                        "the trace's calls ran on CPU {c}, and platform `{platform}` has no CPU {c} (its CPUs: {}): {fix}",
                        cpu_ranges(&has)
                    ),
                ));
            }
        }
        let arch = s.profile.arch();
        for d in self.devices.iter() {
            let ops = s.dma_ops_for(d.iommu, d.bounce);
            let domain = s.iommu.or_else(|| default_domain(&s.profile));
            let iommu = if d.iommu { domain.as_ref() } else { None };
            if let Err(why) = ops.cpu_sharing(arch, iommu) {
                return Err(at(
                    first,
                    format!(
                        "the trace's calls ran on {} CPUs, which would share device {}'s {} on platform `{platform}`, but {why}: replay every call on one CPU (--cpus 1, `workload.cpus = 1`)",
                        self.cpus.len(),
                        d.device.name,
                        ops.describe(&s.policies)
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One row of a replay's calls, as a comparison lines them up: `name` is the device's and the
/// call's together.
struct DeviceRow {
    name: String,
    device: String,
    call: String,
    count: u64,
    total_ps: u64,
}

impl RunResult {
    /// Each device's calls, then its timers (their runs), in the report's order.
    fn device_rows(&self) -> Vec<DeviceRow> {
        let mut out = Vec::new();
        for d in &self.devices {
            let row = |call: String, count, total_ps| DeviceRow {
                name: format!("{} {call}", d.name),
                device: d.name.clone(),
                call,
                count,
                total_ps,
            };
            for c in &d.calls {
                out.push(row(c.call.to_string(), c.count, c.total_ps));
            }
            let t = &d.timers;
            if t.runs > 0 {
                let call = format!("{} (timer)", t.names.join(", "));
                out.push(row(call, t.runs, t.total_ps));
            }
        }
        out
    }
}

impl super::KindResult for RunResult {
    super::kind::result_fields!();
    /// Per device and call, so that a comparison shows each device's change; a device's
    /// timers after its calls, as their runs (lazy invalidation moves work there).
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        self.device_rows()
            .into_iter()
            .map(|r| (r.name, r.count, r.total_ps))
            .collect()
    }

    fn call_devices(&self) -> Vec<(String, String, String)> {
        self.device_rows()
            .into_iter()
            .map(|r| (r.name, r.device, r.call))
            .collect()
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;

    #[test]
    fn cpus_print_as_ranges() {
        assert_eq!(cpu_ranges(&[0, 1, 2, 3, 7]), "0-3, 7");
        assert_eq!(cpu_ranges(&[5]), "5");
        assert_eq!(cpu_ranges(&[1, 3, 4, u32::MAX]), "1, 3-4, 4294967295");
        let mut o = String::new();
        cpus_line(&mut o, &[], 1);
        assert_eq!(o, "");
        cpus_line(&mut o, &[2, 3], 1);
        assert_eq!(
            o,
            "cpus       the trace's calls ran on 2 CPUs (2-3); replayed in trace order on one modelled CPU\n"
        );
    }
}
