//! The `pipeline` workload: blocks streamed between user space and a DMA engine in programmable
//! logic, under one or more coherence options, as a discrete-event run of the CPU and the engine.
//!
//! Kernel counterpart: none — this is seed 002's user program and driver loop: user space
//! dequeues a block (`ioctl(DEQUEUE_BLOCK)`), reads what the engine wrote or writes what it will
//! send, and enqueues it again (`ioctl(ENQUEUE_BLOCK)`), keeping `queue_depth` blocks in flight.
//! The driver is [`crate::drivers::pl_dma`]; its DMA API calls run through the ops setup gives
//! the device (on ARMv7, arch/arm's direction rules over the L1 and the PL310).
//!
//! What it models: two timelines. The CPU's advances by the Model clock's advance across each
//! step (ioctl, the DMA API calls inside it, copies, page pinning, user access) and waits when the
//! block it needs back is still with the engine; the engine's takes blocks in queue order, each
//! for its transfer time at the engine's bandwidth, and waits when nothing is queued. Throughput,
//! CPU busy time per MB, the engine's busy fraction and which of the two is the bottleneck all
//! follow from running that loop, not from a formula. Each option of `coherence` runs on a fresh
//! machine; the advice picks the best for the seed's goal from the runs' own figures.
//!
//! Invariants: MB is 10^6 bytes, so MB/s and the engine's bandwidth share a unit; the CPU's busy
//! time is exactly the ledger's total (every step is charged through the Model); a block is never
//! dequeued before the engine completed it; what user space reads back is the engine's stamp for
//! that block (checked every block, reported as `data_errors`).

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::drivers::pl_dma::{Coherence, Flow, PlDma, PlDmaConfig, UserMemory};
use crate::hw::Counter;
use crate::hw::calls::{CallStat, CallTimer, StackRow, stack_rows};
use crate::input::InputError;
use crate::mm::physmem::NodeRange;
use crate::report::{
    CallDoc, DeviceDoc, FORMAT_VERSION, HeadDoc, StackDoc, TimeUnit, breakdown_docs, call_doc,
    counts_map, device_line, header, human_bytes, instr, trim_float,
};
use crate::setup::{DeviceSetup, Machine, SetupError, setup_dma_ops};
use crate::types::PhysAddr;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use toml::Spanned;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "pipeline",
    summary: "blocks streamed between user space and a DMA engine, per coherence option",
    parse,
};

/// Where the blocks are placed in simulated DRAM.
pub const DRAM_BASE: u64 = 0x8000_0000;
/// Largest block.
pub const MAX_BLOCK: u64 = 64 << 20;
/// Most memory all slots' buffers may take together.
pub const MAX_BUFFERS: u64 = 1 << 30;
/// Options within this share of the best throughput count as reaching it, for the advice.
const SAME_RATE: f64 = 0.05;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    coherence: Option<Spanned<toml::Value>>,
    flow: Option<Spanned<String>>,
    block: Option<Spanned<toml::Value>>,
    bytes_used: Option<Spanned<toml::Value>>,
    blocks: Option<Spanned<i64>>,
    queue_depth: Option<Spanned<i64>>,
    device_mb_s: Option<Spanned<toml::Value>>,
    user_access_bytes: Option<Spanned<i64>>,
}

/// A pipeline of blocks between user space and a PL DMA engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    /// The options to run, in the file's order, each once.
    pub coherence: Vec<Coherence>,
    /// Line of the `coherence` key, for checks made after parsing (the ACP's port).
    pub coherence_line: Option<usize>,
    pub flow: Flow,
    pub block_bytes: u64,
    pub used_bytes: u64,
    pub blocks: u64,
    pub queue_depth: u32,
    /// The engine's own bandwidth, MB/s.
    pub device_mb_s: f64,
    /// Bytes per load or store of the user program's pass over each block, charged by the
    /// mapping's memory type; 0 (the default): the pass changes the caches' state but its time is
    /// not counted, as the seed's own accounting (7 ms of syncs per MB, 150 MB/s) does not.
    pub user_access_bytes: u64,
    /// Line of `user_access_bytes`, for the checks against the platform.
    pub user_access_line: Option<usize>,
}

impl Pipeline {
    /// Buffers one option allocates, in bytes.
    pub fn buffer_bytes(&self, c: Coherence) -> u64 {
        let per = if c.copies() { 2 } else { 1 };
        u64::from(self.queue_depth) * self.flow.directions().len() as u64 * per * self.block_bytes
    }

    /// The memory node a run boots with: room for the largest option's buffers.
    pub fn node_bytes(&self) -> u64 {
        let need = self
            .coherence
            .iter()
            .map(|&c| self.buffer_bytes(c))
            .max()
            .unwrap_or(0);
        need.next_power_of_two().max(1 << 20) * 2
    }
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let names = Coherence::ALL.map(|c| c.name()).join(", ");
    let co = w
        .coherence
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "coherence", &format!("one of {names}, or a list")))?;
    let raw: Vec<&toml::Value> = match co.get_ref() {
        toml::Value::Array(a) if !a.is_empty() => a.iter().collect(),
        toml::Value::Array(_) => {
            return Err(c.err(co.span(), "workload.coherence", "must not be empty"));
        }
        other => vec![other],
    };
    let mut coherence = Vec::new();
    for v in raw {
        let name = v.as_str().unwrap_or("");
        let Some(opt) = Coherence::parse(name) else {
            return Err(c.err(
                co.span(),
                "workload.coherence",
                format!("unknown coherence option `{v}`; choose from: {names}"),
            ));
        };
        if coherence.contains(&opt) {
            return Err(c.err(
                co.span(),
                "workload.coherence",
                format!("`{name}` is listed twice"),
            ));
        }
        coherence.push(opt);
    }
    let f = w.flow.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "flow",
            &format!("one of {}", Flow::NAMES.join(", ")),
        )
    })?;
    let flow = Flow::parse(f.get_ref()).ok_or_else(|| {
        c.err(
            f.span(),
            "workload.flow",
            format!(
                "unknown flow `{}`; choose one of: {}",
                f.get_ref(),
                Flow::NAMES.join(", ")
            ),
        )
    })?;
    let b = w
        .block
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "block", "the block size, e.g. \"1M\""))?;
    let block_bytes = c.size(b.get_ref(), b.span(), "workload.block")?;
    if block_bytes > MAX_BLOCK {
        return Err(c.err(
            b.span(),
            "workload.block",
            format!("at most {MAX_BLOCK} bytes"),
        ));
    }
    let used_bytes = match &w.bytes_used {
        None => block_bytes,
        Some(u) => {
            let n = c.size(u.get_ref(), u.span(), "workload.bytes_used")?;
            if n > block_bytes {
                return Err(c.err(
                    u.span(),
                    "workload.bytes_used",
                    format!("{n} bytes, more than the block's {block_bytes}"),
                ));
            }
            n
        }
    };
    let n = w
        .blocks
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "blocks", "how many blocks to move, 1..=1000000"))?;
    let blocks = c.int(n, "workload.blocks", 1..=1_000_000)?;
    let queue_depth = match &w.queue_depth {
        Some(q) => c.int(q, "workload.queue_depth", 1..=64)? as u32,
        None => 2,
    };
    let bw = w.device_mb_s.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "device_mb_s",
            "the engine's bandwidth in MB/s, e.g. 600",
        )
    })?;
    let device_mb_s = match bw.get_ref() {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(x) => Some(*x),
        _ => None,
    }
    .filter(|x| x.is_finite() && *x > 0.0 && *x <= crate::platform::MAX_PORT_MB_S)
    .ok_or_else(|| {
        c.err(
            bw.span(),
            "workload.device_mb_s",
            format!(
                "the engine's bandwidth must be a number of MB/s above 0 and at most {}, found {}",
                crate::platform::MAX_PORT_MB_S,
                bw.get_ref()
            ),
        )
    })?;
    let (user_access_bytes, user_access_line) = match &w.user_access_bytes {
        Some(a) => (
            c.int(a, "workload.user_access_bytes", 0..=64)?,
            Some(c.line(a.span())),
        ),
        None => (0, None),
    };
    let p = Pipeline {
        user_access_bytes,
        user_access_line,
        coherence,
        coherence_line: Some(c.line(co.span())),
        flow,
        block_bytes,
        used_bytes,
        blocks,
        queue_depth,
        device_mb_s,
    };
    for &o in &p.coherence {
        if p.buffer_bytes(o) > MAX_BUFFERS {
            return Err(c.err(
                b.span(),
                "workload.block",
                format!(
                    "{} bytes of buffers for `{}` (queue_depth x buffers per slot x block); at most {MAX_BUFFERS}",
                    p.buffer_bytes(o),
                    o.name()
                ),
            ));
        }
    }
    Ok(Workload::Pipeline(p))
}

/// Which timeline limits the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bottleneck {
    Cpu,
    Device,
}

impl Bottleneck {
    pub fn name(self) -> &'static str {
        match self {
            Bottleneck::Cpu => "cpu",
            Bottleneck::Device => "device",
        }
    }
}

/// Where the CPU's time went, by what a driver writer would call it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSplit {
    /// Cache maintenance: the arch's `__dma_page_*` frames and below.
    pub maintenance_ps: u64,
    /// `copy_from_user` / `copy_to_user`.
    pub copy_ps: u64,
    /// `get_user_pages`, `sg_init_table`, `sg_set_page`, `put_page`.
    pub pinning_ps: u64,
    /// User space reading or writing the blocks.
    pub user_read_ps: u64,
    pub user_write_ps: u64,
    /// Everything else: the ioctls and the DMA API's own frames.
    pub other_ps: u64,
}

impl CpuSplit {
    fn of(stacks: &[StackRow]) -> CpuSplit {
        let mut s = CpuSplit::default();
        for r in stacks {
            let has = |f: &str| r.stack.split(" > ").any(|x| x == f);
            let slot = if has("__dma_page_cpu_to_dev") || has("__dma_page_dev_to_cpu") {
                &mut s.maintenance_ps
            } else if has("copy_from_user") || has("copy_to_user") {
                &mut s.copy_ps
            } else if has("get_user_pages")
                || has("sg_init_table")
                || has("sg_set_page")
                || has("put_page")
            {
                &mut s.pinning_ps
            } else if has("user: read block") {
                &mut s.user_read_ps
            } else if has("user: write block") {
                &mut s.user_write_ps
            } else {
                &mut s.other_ps
            };
            *slot += r.self_ps;
        }
        s
    }

    /// The largest part, named as a driver writer would.
    fn largest(&self) -> (&'static str, u64) {
        [
            (
                "cache maintenance in the DMA API calls",
                self.maintenance_ps,
            ),
            ("copying to or from user space", self.copy_ps),
            (
                "pinning user pages and building the scatterlist",
                self.pinning_ps,
            ),
            ("user space reading the blocks", self.user_read_ps),
            ("user space writing the blocks", self.user_write_ps),
            ("the ioctls and DMA API calls themselves", self.other_ps),
        ]
        .into_iter()
        .max_by_key(|&(_, ps)| ps)
        .unwrap_or(("nothing", 0))
    }
}

/// One option's run.
#[derive(Clone, Debug)]
pub struct OptionRun {
    pub coherence: Coherence,
    /// What the driver does, in a driver writer's words, under this release.
    pub what: String,
    /// The engine's bandwidth in this option (the ACP's port may limit it), MB/s.
    pub engine_mb_s: f64,
    /// Modelled time from the first enqueue until the last block was consumed.
    pub elapsed_ps: u64,
    pub cpu_busy_ps: u64,
    pub device_busy_ps: u64,
    /// Bytes the engine moved in one direction (`blocks` x `bytes_used`).
    pub bytes: u64,
    /// The ioctls and the DMA API calls inside them.
    pub calls: Vec<CallStat>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub split: CpuSplit,
    /// Whether user access was charged (`user_access_bytes` above 0).
    pub user_access_charged: bool,
    /// Blocks whose bytes, as user space read them, were not what the engine wrote.
    pub data_errors: u64,
}

impl OptionRun {
    pub fn throughput_mb_s(&self) -> f64 {
        if self.elapsed_ps == 0 {
            0.0
        } else {
            self.bytes as f64 / (self.elapsed_ps as f64 * 1e-12) / 1e6
        }
    }

    /// CPU busy time per MB moved, in ms.
    pub fn cpu_ms_per_mb(&self) -> f64 {
        per_mb_ms(self.cpu_busy_ps, self.bytes)
    }

    pub fn cpu_busy_fraction(&self) -> f64 {
        frac(self.cpu_busy_ps, self.elapsed_ps)
    }

    pub fn device_busy_fraction(&self) -> f64 {
        frac(self.device_busy_ps, self.elapsed_ps)
    }

    /// The timeline that was busy the larger share of the run.
    pub fn bottleneck(&self) -> Bottleneck {
        if self.cpu_busy_ps > self.device_busy_ps {
            Bottleneck::Cpu
        } else {
            Bottleneck::Device
        }
    }

    pub fn call(&self, name: &str) -> Option<&CallStat> {
        self.calls.iter().find(|c| c.call == name)
    }

    pub fn count(&self, c: Counter) -> u64 {
        self.counts[c as usize]
    }
}

fn frac(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn per_mb_ms(ps: u64, bytes: u64) -> f64 {
    if bytes == 0 {
        0.0
    } else {
        ps as f64 * 1e-9 / (bytes as f64 / 1e6)
    }
}

/// Which option suits the seed's goal (move the frames at the highest rate, with the least CPU),
/// and why, from the runs' figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Advice {
    pub best: Coherence,
    pub reason: String,
}

#[derive(Clone, Debug)]
pub struct PipelineResult {
    pub info: RunInfo,
    pub device: Device,
    pub workload: Pipeline,
    pub runs: Vec<OptionRun>,
    pub advice: Advice,
    /// Every option's stacks, each under a root frame named after its option.
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl PipelineResult {
    pub fn run(&self, c: Coherence) -> Option<&OptionRun> {
        self.runs.iter().find(|r| r.coherence == c)
    }
}

/// What the driver does for option `c` under `kernel`. ARMv7 reads the device tree's
/// `dma-coherent` only from 3.16 (`of_dma_is_coherent` → `set_arch_dma_coherent_ops` in
/// `of_dma_configure`); on 3.14 and 3.15 a device on the ACP gets `arm_dma_ops` like any other,
/// so the modelled driver installs `arm_coherent_dma_ops` itself (`set_dma_ops`, exported since
/// 3.6) before it maps anything, and the report says so.
fn describe(c: Coherence, kernel: crate::policy::KernelVersion) -> String {
    if c == Coherence::Acp && kernel < crate::policy::KernelVersion(3, 16) {
        format!(
            "{}; {kernel} ignores the DT `dma-coherent` property, so the driver sets arm_coherent_dma_ops itself",
            c.describe()
        )
    } else {
        c.describe().to_string()
    }
}

/// Run every option of a checked pipeline scenario on the Model.
pub fn run(s: &Scenario, w: &Pipeline, progress: &Progress) -> Result<PipelineResult, SetupError> {
    let runs = w
        .coherence
        .iter()
        .map(|&c| run_option(s, w, c, progress))
        .collect::<Result<Vec<_>, _>>()?;
    let stacks = runs
        .iter()
        .flat_map(|r| {
            r.stacks.iter().map(move |row| StackRow {
                stack: format!("{} > {}", r.coherence.name(), row.stack),
                self_ps: row.self_ps,
                counts: row.counts,
            })
        })
        .collect();
    let total_ps = runs
        .iter()
        .fold(0u64, |a, r| a.saturating_add(r.cpu_busy_ps));
    let advice = advise(&runs, w.user_access_bytes);
    Ok(PipelineResult {
        info: s.run_info(),
        device: s.device.clone(),
        workload: w.clone(),
        runs,
        advice,
        stacks,
        total_ps,
    })
}

/// The engine's time for `bytes` at `mb_s`, in ps.
fn transfer_ps(bytes: u64, mb_s: f64) -> u64 {
    let ps = (bytes as f64 * 1e6 / mb_s).ceil();
    if ps >= u64::MAX as f64 {
        u64::MAX
    } else {
        ps as u64
    }
}

fn run_option(
    s: &Scenario,
    w: &Pipeline,
    c: Coherence,
    progress: &Progress,
) -> Result<OptionRun, SetupError> {
    let mut m = Machine::boot(
        &s.profile,
        vec![NodeRange {
            node: 0,
            start: PhysAddr(DRAM_BASE),
            size: w.node_bytes(),
        }],
    );
    let mut device = s.device.clone();
    device.coherent |= c.device_coherent();
    let setup = DeviceSetup {
        device: &device,
        ..s.device_setup()
    };
    let api = setup_dma_ops(&mut m, &setup, 1)?;
    let mut hw = m.hw;
    let cfg = PlDmaConfig {
        coherence: c,
        flow: w.flow,
        block_bytes: w.block_bytes,
        used_bytes: w.used_bytes,
        slots: w.queue_depth,
        user_access_bytes: w.user_access_bytes,
    };
    let mut drv = PlDma::open(&mut hw, api, m.mem.clone(), cfg)?;
    hw.clear_ledger();
    let engine_mb_s = match (c, s.profile.acp_mb_s) {
        (Coherence::Acp, Some(acp)) => w.device_mb_s.min(acp),
        _ => w.device_mb_s,
    };
    let per_block = transfer_ps(w.used_bytes, engine_mb_s);
    let mut t = CallTimer::default();
    let q = u64::from(w.queue_depth);
    let n = w.blocks;
    // The CPU's timeline (`cpu`), the engine's (`dev_free`), and when each block in flight completes.
    let (mut cpu, mut dev_free, mut device_busy) = (0u64, 0u64, 0u64);
    let mut done = std::collections::VecDeque::new();
    let mut data_errors = 0u64;
    let reads = w.flow != Flow::ToDevice;
    let step = |hw: &mut crate::hw::model::Model,
                f: &mut dyn FnMut(&mut crate::hw::model::Model)| {
        let t0 = crate::hw::Hw::now_ps(hw);
        f(hw);
        crate::hw::Hw::now_ps(hw) - t0
    };
    let mut take_back = |hw: &mut crate::hw::model::Model,
                         drv: &mut PlDma,
                         t: &mut CallTimer,
                         cpu: &mut u64,
                         done_at: u64,
                         j: u64| {
        let slot = (j % q) as usize;
        *cpu = (*cpu).max(done_at);
        *cpu = cpu.saturating_add(step(hw, &mut |hw| drv.dequeue(hw, slot, t)));
        *cpu = cpu.saturating_add(step(hw, &mut |hw| drv.user_consume(hw, slot)));
        if reads && drv.user_sees(slot) != Some(j) {
            data_errors += 1;
        }
    };
    for i in 0..n {
        let slot = (i % q) as usize;
        if i >= q {
            let done_at = done.pop_front().unwrap_or(0);
            take_back(&mut hw, &mut drv, &mut t, &mut cpu, done_at, i - q);
        }
        cpu = cpu.saturating_add(step(&mut hw, &mut |hw| drv.user_produce(hw, slot)));
        cpu = cpu.saturating_add(step(&mut hw, &mut |hw| drv.enqueue(hw, slot, &mut t)));
        let start = dev_free.max(cpu);
        drv.device_transfer(slot, i);
        dev_free = start.saturating_add(per_block);
        device_busy = device_busy.saturating_add(per_block);
        done.push_back(dev_free);
        progress.advance(1);
    }
    let first_left = n.saturating_sub(q);
    for j in first_left..n {
        let done_at = done.pop_front().unwrap_or(0);
        take_back(&mut hw, &mut drv, &mut t, &mut cpu, done_at, j);
    }
    debug_assert!(hw.ledger().depth_is_zero());
    let stacks = stack_rows(hw.ledger());
    let split = CpuSplit::of(&stacks);
    Ok(OptionRun {
        what: describe(c, s.kernel),
        coherence: c,
        engine_mb_s,
        elapsed_ps: cpu,
        cpu_busy_ps: hw.ledger().total_ps(),
        device_busy_ps: device_busy,
        bytes: n.saturating_mul(w.used_bytes),
        calls: t.stats,
        counts: hw.ledger().totals(),
        stacks,
        split,
        user_access_charged: drv.user_access_charged,
        data_errors,
    })
}

/// The seed's goal: move the frames at the highest rate; of the options within [`SAME_RATE`] of
/// the best rate, the one that leaves the CPU the most time (least CPU per MB).
fn advise(runs: &[OptionRun], access_bytes: u64) -> Advice {
    let top = runs
        .iter()
        .map(|r| r.throughput_mb_s())
        .fold(0.0f64, f64::max);
    let best = runs
        .iter()
        .filter(|r| r.throughput_mb_s() >= top * (1.0 - SAME_RATE))
        .min_by(|a, b| a.cpu_ms_per_mb().total_cmp(&b.cpu_ms_per_mb()))
        .or(runs.first());
    let Some(b) = best else {
        return Advice {
            best: Coherence::Streaming,
            reason: "no option ran".into(),
        };
    };
    let mut why = String::new();
    let (what, ps) = b.split.largest();
    let _ = match b.bottleneck() {
        Bottleneck::Device => write!(
            why,
            "the engine is the limit at {:.0} MB/s (busy {:.0} % of the time), and the CPU spends {:.3} ms per MB",
            b.throughput_mb_s(),
            b.device_busy_fraction() * 100.0,
            b.cpu_ms_per_mb()
        ),
        Bottleneck::Cpu => write!(
            why,
            "it moves {:.0} MB/s with the CPU as the limit (busy {:.0} % of the time, {:.3} ms per MB)",
            b.throughput_mb_s(),
            b.cpu_busy_fraction() * 100.0,
            b.cpu_ms_per_mb()
        ),
    };
    if ps > 0 {
        let _ = write!(
            why,
            ", most of it {what} ({:.0} %)",
            frac(ps, b.cpu_busy_ps) * 100.0
        );
    }
    // What the others lose, in the same words.
    for r in runs.iter().filter(|r| r.coherence != b.coherence) {
        let (what, _) = r.split.largest();
        let limit = match r.bottleneck() {
            Bottleneck::Cpu => "CPU-bound",
            Bottleneck::Device => "engine-bound",
        };
        let _ = write!(
            why,
            "; {}: {:.0} MB/s, {limit}, {:.3} ms CPU per MB, mostly {what}",
            r.coherence.name(),
            r.throughput_mb_s(),
            r.cpu_ms_per_mb()
        );
    }
    if runs.iter().any(|r| r.user_access_charged) {
        why.push_str(&deciding_pattern(runs, access_bytes));
    } else {
        why.push_str(
            "; user space's own pass over the blocks is not charged (user_access_bytes = 0, the seed's accounting), so an uncached or write-combined user mapping looks free here: set user_access_bytes to price it",
        );
    }
    Advice {
        best: b.coherence,
        reason: why,
    }
}

/// Which access pattern decides the ranking: what user space's own pass over the blocks costs
/// through each kind of mapping the options give it, against the cache maintenance a cached
/// mapping needs to stay coherent, each per MB moved and the cheapest of the options having it.
fn deciding_pattern(runs: &[OptionRun], access_bytes: u64) -> String {
    let user_ms = |r: &OptionRun| {
        per_mb_ms(
            r.split.user_read_ps.saturating_add(r.split.user_write_ps),
            r.bytes,
        )
    };
    let mut kinds: Vec<(UserMemory, f64)> = Vec::new();
    for r in runs.iter().filter(|r| !r.coherence.copies()) {
        let (m, ms) = (r.coherence.user_memory(), user_ms(r));
        match kinds.iter_mut().find(|k| k.0 == m) {
            Some(k) => k.1 = k.1.min(ms),
            None => kinds.push((m, ms)),
        }
    }
    let passes: Vec<String> = kinds
        .iter()
        .map(|(m, ms)| format!("{ms:.3} ms per MB through a {} mapping", m.name()))
        .collect();
    let maintenance = runs
        .iter()
        .filter(|r| r.split.maintenance_ps > 0)
        .map(|r| {
            (
                per_mb_ms(r.split.maintenance_ps, r.bytes),
                r.coherence.name(),
            )
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = format!(
        "; what decides the ranking is the program's access pattern: its pass over each block in {access_bytes}-byte loads and stores costs {}",
        passes.join(", ")
    );
    if let Some((ms, name)) = maintenance {
        let _ = write!(
            out,
            ", and keeping a cached mapping coherent costs at least {ms:.3} ms per MB of cache maintenance ({name})"
        );
    }
    // The two costs the options trade against each other, per MB: the pass through an uncached
    // mapping, or the pass through a cached one plus its maintenance.
    let cached = runs
        .iter()
        .filter(|r| !r.coherence.copies() && r.coherence.user_memory() == UserMemory::Cached)
        .map(|r| user_ms(r) + per_mb_ms(r.split.maintenance_ps, r.bytes))
        .fold(f64::INFINITY, f64::min);
    let uncached = kinds
        .iter()
        .filter(|k| k.0 != UserMemory::Cached)
        .map(|k| k.1)
        .fold(f64::INFINITY, f64::min);
    if cached.is_finite() && uncached.is_finite() {
        out.push_str(if uncached < cached {
            ": with this pattern the uncached pass costs less than a cached pass plus its maintenance"
        } else {
            ": with this pattern a cached pass plus its maintenance costs less than the uncached pass, whose every load is a bus round trip"
        });
    }
    out
}

// Rendering.

#[derive(Serialize)]
struct RunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    device: DeviceDoc<'a>,
    workload: WorkloadDoc,
    options: Vec<OptionDoc<'a>>,
    best: &'static str,
    reason: &'a str,
    total_ns: f64,
}

#[derive(Serialize)]
struct WorkloadDoc {
    kind: &'static str,
    coherence: Vec<&'static str>,
    flow: &'static str,
    block_bytes: u64,
    bytes_used: u64,
    blocks: u64,
    queue_depth: u32,
    device_mb_s: f64,
}

#[derive(Serialize)]
struct OptionDoc<'a> {
    coherence: &'static str,
    what: &'a str,
    user_memory: &'static str,
    engine_mb_s: f64,
    throughput_mb_s: f64,
    cpu_ms_per_mb: f64,
    cpu_busy_fraction: f64,
    device_busy_fraction: f64,
    bottleneck: &'static str,
    cpu_split_ms_per_mb: BTreeMap<&'static str, f64>,
    /// `null` when user access is not charged (`user_access_bytes = 0`).
    user_read_ms_per_mb: Option<f64>,
    user_write_ms_per_mb: Option<f64>,
    data_errors: u64,
    calls: Vec<CallDoc>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    elapsed_ns: f64,
    cpu_busy_ns: f64,
}

fn option_doc(r: &OptionRun) -> OptionDoc<'_> {
    let s = &r.split;
    let mb = |ps| per_mb_ms(ps, r.bytes);
    let user = |ps| r.user_access_charged.then(|| mb(ps));
    OptionDoc {
        coherence: r.coherence.name(),
        what: &r.what,
        user_memory: r.coherence.user_memory().name(),
        engine_mb_s: r.engine_mb_s,
        throughput_mb_s: r.throughput_mb_s(),
        cpu_ms_per_mb: r.cpu_ms_per_mb(),
        cpu_busy_fraction: r.cpu_busy_fraction(),
        device_busy_fraction: r.device_busy_fraction(),
        bottleneck: r.bottleneck().name(),
        cpu_split_ms_per_mb: [
            ("maintenance", mb(s.maintenance_ps)),
            ("copy", mb(s.copy_ps)),
            ("pinning", mb(s.pinning_ps)),
            ("user_read", mb(s.user_read_ps)),
            ("user_write", mb(s.user_write_ps)),
            ("other", mb(s.other_ps)),
        ]
        .into_iter()
        .collect(),
        user_read_ms_per_mb: user(s.user_read_ps),
        user_write_ms_per_mb: user(s.user_write_ps),
        data_errors: r.data_errors,
        calls: r.calls.iter().map(call_doc).collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.cpu_busy_ps),
        elapsed_ns: crate::report::ns(r.elapsed_ps),
        cpu_busy_ns: crate::report::ns(r.cpu_busy_ps),
    }
}

/// The `dmasim run --format json` document.
pub fn json(r: &PipelineResult) -> serde_json::Value {
    let w = &r.workload;
    let doc = RunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        device: DeviceDoc::of(&r.device),
        workload: WorkloadDoc {
            kind: "pipeline",
            coherence: w.coherence.iter().map(|c| c.name()).collect(),
            flow: w.flow.name(),
            block_bytes: w.block_bytes,
            bytes_used: w.used_bytes,
            blocks: w.blocks,
            queue_depth: w.queue_depth,
            device_mb_s: w.device_mb_s,
        },
        options: r.runs.iter().map(option_doc).collect(),
        best: r.advice.best.name(),
        reason: &r.advice.reason,
        total_ns: crate::report::ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

/// The `dmasim run` terminal table.
pub fn table(r: &PipelineResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    header(&mut o, &r.info);
    device_line(&mut o, &r.device);
    let _ = writeln!(
        o,
        "workload   pipeline: {} of {} blocks ({} used), {} blocks, queue depth {}, engine {} MB/s",
        w.flow.name(),
        human_bytes(w.block_bytes),
        human_bytes(w.used_bytes),
        w.blocks,
        w.queue_depth,
        trim_float(w.device_mb_s)
    );
    let charged = r.runs.iter().any(|x| x.user_access_charged);
    let user = |x: &OptionRun, ps: u64| {
        if charged {
            format!("{:.3}", per_mb_ms(ps, x.bytes))
        } else {
            "not charged".to_string()
        }
    };
    let _ = writeln!(
        o,
        "\n{:<18} {:>8} {:>10} {:>7} {:>7} {:>10} {:>12} {:>12}",
        "option", "MB/s", "CPU ms/MB", "CPU %", "dev %", "bottleneck", "user rd/MB", "user wr/MB"
    );
    for x in &r.runs {
        let _ = writeln!(
            o,
            "{:<18} {:>8.1} {:>10.3} {:>7.1} {:>7.1} {:>10} {:>12} {:>12}",
            x.coherence.name(),
            x.throughput_mb_s(),
            x.cpu_ms_per_mb(),
            x.cpu_busy_fraction() * 100.0,
            x.device_busy_fraction() * 100.0,
            x.bottleneck().name(),
            user(x, x.split.user_read_ps),
            user(x, x.split.user_write_ps)
        );
    }
    if !charged {
        let _ = writeln!(
            o,
            "(user access not charged: user_access_bytes = 0, the driver's time only, as the seed counts)"
        );
    }
    for x in &r.runs {
        let _ = writeln!(
            o,
            "\n{}: {}; user mapping {}; engine {} MB/s",
            x.coherence.name(),
            x.what,
            x.coherence.user_memory().name(),
            trim_float(x.engine_mb_s)
        );
        let blocks = w.blocks.max(1);
        let unit = TimeUnit::for_column(x.calls.iter().map(|c| c.mean_ns()));
        let _ = writeln!(
            o,
            "  {:<42} {:>8} {:>14}",
            "call",
            "count",
            unit.header("mean")
        );
        for c in &x.calls {
            let _ = writeln!(
                o,
                "  {:<42} {:>8} {:>14}",
                c.call,
                c.count,
                unit.num(c.mean_ns())
            );
        }
        let ops: Vec<String> = Counter::ALL
            .iter()
            .filter(|k| x.counts[**k as usize] > 0)
            .map(|k| {
                format!(
                    "{} {}",
                    instr(*k, r.info.arch),
                    trim_float(x.counts[*k as usize] as f64 / blocks as f64)
                )
            })
            .collect();
        if ops.is_empty() {
            let _ = writeln!(o, "  operations per block: none");
        } else {
            let _ = writeln!(o, "  operations per block: {}", ops.join(", "));
        }
        if x.data_errors > 0 {
            let _ = writeln!(
                o,
                "  {} blocks read back something other than what the engine wrote",
                x.data_errors
            );
        }
    }
    let _ = writeln!(
        o,
        "\nbest for the goal (highest rate, then least CPU per MB): {}\n  {}",
        r.advice.best.name(),
        r.advice.reason
    );
    o
}

impl super::WorkloadKind for Pipeline {
    type Output = PipelineResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<PipelineResult, RunFailure> {
        Ok(run(s, self, progress)?)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        // The user program's pass over each block: a size the CPU has, priced for every
        // memory type and direction an option maps the blocks with.
        let arch = s.profile.arch();
        let size = self.user_access_bytes;
        if size > 0 && !crate::hw::memory::access_sizes(arch).contains(&size) {
            return Err(InputError {
                file: s.file.clone(),
                line: self.user_access_line,
                key: Some("workload.user_access_bytes".into()),
                message: format!(
                    "{} has no {size}-byte access; its sizes: {:?}",
                    arch.name(),
                    crate::hw::memory::access_sizes(arch)
                ),
            });
        }
        for &c in self.coherence.iter().filter(|_| size > 0) {
            for d in self.flow.directions() {
                let write = *d == crate::types::DmaDirection::ToDevice;
                let why = format!(
                    "the pipeline's `{}` option (user space {} each block through a {} mapping)",
                    c.name(),
                    if write { "writes" } else { "reads" },
                    c.user_memory().name()
                );
                s.profile
                    .require_access(c.user_memory().memory_type(), write, size, &why)?;
            }
        }
        if self
            .coherence
            .contains(&crate::drivers::pl_dma::Coherence::Acp)
            && s.profile.acp_mb_s.is_none()
        {
            let msg = format!(
                "`acp` puts the engine on an accelerator coherency port, but platform `{}` has none (its profile has no `[acp]` section with `bandwidth_mb_s`)",
                s.profile.name()
            );
            return Err(s.error(
                &super::Origin::File(self.coherence_line),
                "workload.coherence",
                msg,
            ));
        }
        if self.coherence.iter().any(|c| c.copies()) {
            s.profile
                .require_copy("the pipeline's `bounce` option (copy_to_user / copy_from_user)")?;
        }
        // Every buffer the driver allocates lies in the run's memory node; the device must
        // reach all of it (dma-direct has no bounce pool here).
        let last = DRAM_BASE.saturating_add(self.node_bytes() - 1);
        if last > s.device.dma_mask {
            let msg = format!(
                "the pipeline's blocks may lie up to {last:#x}, above the device's mask {:#x}: raise the mask",
                s.device.dma_mask
            );
            return Err(s.error(
                &super::Origin::File(s.lines.mask),
                "device.dma_mask_bits",
                msg,
            ));
        }
        Ok(())
    }

    /// Per block and buffer: every line synced twice at most, a copy of the bytes (a few
    /// lines' worth of steps per page), a page pinned.
    fn work(&self, s: &Scenario) -> u128 {
        let bytes = u128::from(self.block_bytes);
        let per = 2 * bytes / s.work_line() + 8 * bytes / 4096 + 64;
        per * self.flow.directions().len() as u128
            * u128::from(self.blocks)
            * self.coherence.len() as u128
    }

    fn progress_total(&self) -> u64 {
        self.blocks.saturating_mul(self.coherence.len() as u64)
    }

    /// The PL DMA engine does not sit behind an IOMMU in this model.
    fn behind_iommu(&self) -> bool {
        false
    }

    fn driver_layers(&self, _s: &Scenario) -> Vec<crate::hw::sw_costs::Layer> {
        use crate::hw::sw_costs::Layer;
        let mut v = vec![Layer::PlDma];
        if self.coherence.contains(&Coherence::UserPages) {
            v.push(Layer::UserPages);
        }
        v
    }
}

impl super::KindResult for PipelineResult {
    super::kind::result_fields!();
    /// Per option: its ioctls and the DMA API calls inside them.
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        self.runs
            .iter()
            .flat_map(|x| {
                x.calls.iter().map(move |c| {
                    (
                        format!("{} {}", x.coherence.name(), c.call),
                        c.count,
                        c.total_ps,
                    )
                })
            })
            .collect()
    }
}
