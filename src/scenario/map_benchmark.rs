//! The `map_benchmark` workload: the kernel's DMA map benchmark, run on the model.
//!
//! Kernel counterpart: kernel/dma/map_benchmark.c (5.11 on), driven by
//! tools/dma/dma_map_benchmark (tools/testing/selftests/dma/ before 6.19). Each benchmark thread
//! writes its buffer of `granule` pages (`memset`, unless the device only writes it), maps it
//! with `dma_map_single`, waits `dma_trans_ns` as if the device were using it (`ndelay`), unmaps
//! it, and does it again until the run's seconds are up. From 7.1 the tool's `-m 1` (the
//! module's `DMA_MAP_BENCH_SG_MODE`) maps a scatterlist of `granule` entries instead, a page
//! each from `__get_free_page()`, with `dma_map_sg` and `dma_unmap_sg`; 7.1's tool names the
//! mode in its first line (`dma mapping benchmark(SINGLE_MODE): ... granule:1`).
//! Each map and unmap is timed with `ktime_get()` in whole nanoseconds and kept in units of
//! 100 ns (`div64_ul(delta, 100)`, so a call under 100 ns counts 0); the averages and standard
//! deviations come from those units' sums and sums of squares, as the kernel computes them.
//!
//! What it models: each benchmark thread on a CPU of its own ([`thread_cpus`]), with its own
//! clock and buffer, over the device setup gives the scenario's `[device]` (dma-direct,
//! iommu-dma behind an `[iommu]`). What the kernel shares between CPUs is shared
//! ([`crate::smp`]): the IOVA space and its locks, the page table, the SMMU and its command
//! queue, a swiotlb pool; each thread's latencies are added into one set of sums, as the
//! kernel's threads add into shared atomics. Modelled seconds, not host seconds: each thread's
//! loop ends at its first unmap that ends past them. A scatter-gather thread's pages lie a page
//! apart, so no two entries are physically contiguous: order-0 pages taken one after another
//! seldom come in ascending runs, and iommu-dma would map such a run with one `__iommu_map`.
//! Before a run, [`trial`] runs its first few modelled ms on their own and times them on the
//! host, so that a command can say how long the whole run will take; those host times are
//! returned to the caller and read by nothing in the model.
//!
//! Invariants: one thread makes exactly the calls a streaming `map_single+unmap_single`
//! scenario of one entry of `granule` pages makes (with `cpu = "write_all"` unless the
//! direction is `from_device`), on the machine as set up, so its per-call means are that
//! scenario's (in scatter-gather mode, the calls `map_sg+unmap_sg` makes of the same pages);
//! every figure comes from the CPUs' ledgers, summed; the kernel tool's lines are
//! computed from the per-call latencies, never from the means; the same inputs give the same
//! bytes for any thread count.

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::hw::cache::Access;
use crate::hw::calls::{CallTimer, stack_rows};
use crate::hw::memory::MemType;
use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::input::InputError;
use crate::iommu::arm_smmu_v3::CmdqStats;
use crate::report::{
    CallDoc, DeviceDoc, FORMAT_VERSION, HeadDoc, StackDoc, breakdown_docs, call_doc, counts_map,
    device_line, header, ns, refusals, stack_table,
};
use crate::scatterlist::SgTable;
use crate::setup::{SetupError, setup_dma_ops};
use crate::stats::Stats;
use crate::types::{DmaAddr, DmaAttrs, DmaDirection, PhysAddr};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use toml::Spanned;

pub use crate::hw::calls::{CallStat, StackRow};

mod tool;
pub use tool::{DIRECTIONS, ToolOptions};

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "map_benchmark",
    summary: "the kernel's dma_map_benchmark: map_single+unmap_single of granule pages for seconds",
    parse,
};

/// `DMA_MAP_MAX_THREADS`.
pub const MAX_THREADS: i64 = 1024;
/// `DMA_MAP_MAX_SECONDS`.
pub const MAX_SECONDS: i64 = 300;
/// `DMA_MAP_MAX_TRANS_DELAY`: 10 ms.
pub const MAX_TRANS_NS: i64 = 10_000_000;
/// The largest granule the kernel takes, in pages.
pub const MAX_GRANULE: i64 = 1024;
/// `PAGE_SIZE` of the benchmark's buffer.
const PAGE: u64 = 4096;

/// Bytes per store of arm64's `memset` of a non-zero pattern (arch/arm64/lib/memset.S, Linaro's
/// cortex-strings code: an `stp` of two 64-bit registers filled with the byte; its `dc zva`
/// path serves only zeroes).
const MEMSET_STORE: u64 = 16;
/// Most loops one run may make, whatever the profile prices: a bound on the model's work.
pub const MAX_LOOPS: u64 = 1 << 32;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    mode: Option<Spanned<String>>,
    threads: Option<Spanned<i64>>,
    seconds: Option<Spanned<i64>>,
    node: Option<Spanned<i64>>,
    direction: Option<Spanned<String>>,
    granule: Option<Spanned<i64>>,
    dma_trans_ns: Option<Spanned<i64>>,
}

/// How a thread maps its buffer: the module's `map_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `DMA_MAP_BENCH_SINGLE_MODE` (`-m 0`, and the only mode before 7.1): `granule` pages with
    /// one `dma_map_single`.
    Single,
    /// `DMA_MAP_BENCH_SG_MODE` (`-m 1`, 7.1 on): a scatterlist of `granule` one-page entries
    /// with `dma_map_sg`.
    Sg,
}

impl Mode {
    /// The name the scenario key takes.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Single => "single",
            Mode::Sg => "sg",
        }
    }

    /// The name 7.1's tool prints (its `mode[]`).
    fn tool_name(self) -> &'static str {
        match self {
            Mode::Single => "SINGLE_MODE",
            Mode::Sg => "SG_MODE",
        }
    }
}

/// The release whose module and tool have `map_mode` and `-m`: "dma-mapping: benchmark: add
/// support for dma_map_sg" and "tools/dma: Add dma_map_sg support", merged for 7.1.
pub const MODE_SINCE: crate::policy::KernelVersion = crate::policy::KernelVersion(7, 1);

/// The release whose tree first has the benchmark (kernel/dma/map_benchmark.c, "dma-mapping:
/// add benchmark support for streaming DMA APIs"). On an earlier release the loop runs as the
/// module built out of tree against it would, and the report says so.
pub const MODULE_SINCE: crate::policy::KernelVersion = crate::policy::KernelVersion(5, 11);

/// One run of the benchmark, with the tool's options.
#[derive(Clone, Debug, PartialEq)]
pub struct MapBenchmark {
    /// `-m`: how each thread maps its buffer; `None` where the scenario does not say (the tool
    /// before 7.1 has no `-m`), which maps as [`Mode::Single`].
    pub mode: Option<Mode>,
    /// `-t`: benchmark threads, one per CPU.
    pub threads: u32,
    /// `-s`: modelled seconds the threads run for.
    pub seconds: u32,
    /// `-n`: the node the threads run on; `None` is `NUMA_NO_NODE` (-1).
    pub node: Option<u32>,
    /// `-d`: 0 bidirectional, 1 to the device, 2 from it.
    pub direction: DmaDirection,
    /// `-g`: pages per buffer; in scatter-gather mode, entries of a page each.
    pub granule: u32,
    /// `-x`: how long the device holds each mapping, ns.
    pub dma_trans_ns: u32,
    /// Lines of `threads`, `node` and `mode` in the file, for the checks against the platform
    /// and the release.
    lines: (Option<usize>, Option<usize>, Option<usize>),
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let int = |v: &Option<Spanned<i64>>,
               key: &str,
               range: std::ops::RangeInclusive<i64>,
               default| { v.as_ref().map_or(Ok(default), |v| c.int(v, key, range)) };
    let threads = int(&w.threads, "workload.threads", 1..=MAX_THREADS, 1)? as u32;
    let seconds = int(&w.seconds, "workload.seconds", 1..=MAX_SECONDS, 20)? as u32;
    let node = match &w.node {
        None => None,
        Some(n) if *n.get_ref() == -1 => None,
        Some(n) => Some(c.int(n, "workload.node", 0..=i64::from(u32::MAX))? as u32),
    };
    let direction = match &w.direction {
        None => DmaDirection::Bidirectional,
        Some(d) => c.direction(d)?,
    };
    let granule = int(&w.granule, "workload.granule", 1..=MAX_GRANULE, 1)? as u32;
    let mode = match &w.mode {
        None => None,
        Some(m) => Some(match m.get_ref().as_str() {
            "single" => Mode::Single,
            "sg" => Mode::Sg,
            other => {
                return Err(c.err(
                    m.span(),
                    "workload.mode",
                    format!("unknown mode `{other}`; choose single or sg"),
                ));
            }
        }),
    };
    let dma_trans_ns = int(
        &w.dma_trans_ns,
        "workload.dma_trans_ns",
        0..=MAX_TRANS_NS,
        0,
    )? as u32;
    let lines = (
        w.threads.as_ref().map(|t| c.line(t.span())),
        w.node.as_ref().map(|n| c.line(n.span())),
        w.mode.as_ref().map(|m| c.line(m.span())),
    );
    let _ = &w.kind;
    Ok(Workload::MapBenchmark(MapBenchmark {
        mode,
        threads,
        seconds,
        node,
        direction,
        granule,
        dma_trans_ns,
        lines,
    }))
}

/// Sums of one call's latencies in the kernel's units, as `map_benchmark_thread` keeps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latencies {
    /// Calls timed.
    pub loops: u64,
    /// Sum of each call's latency in whole 100 ns units.
    pub sum_100ns: u64,
    /// Sum of their squares.
    pub sum_sq: u64,
    /// Sum of each call's `ktime_get` delta in whole ns, before the kernel divides it into
    /// 100 ns units: not printed by the tool, kept for `dmasim fit`, whose rows are means a
    /// board's jitter has smoothed (a step of the truncated sums is no gradient to fit on).
    pub sum_ns: u64,
}

impl Latencies {
    /// Another thread's sums added in, as every thread adds its own into the benchmark's
    /// shared `atomic64_t` sums.
    fn absorb(&mut self, other: &Latencies) {
        self.loops += other.loops;
        self.sum_100ns = self.sum_100ns.saturating_add(other.sum_100ns);
        self.sum_sq = self.sum_sq.saturating_add(other.sum_sq);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    fn add(&mut self, delta_ns: u64) {
        let u = delta_ns / 100;
        self.loops += 1;
        self.sum_100ns = self.sum_100ns.saturating_add(u);
        self.sum_sq = self.sum_sq.saturating_add(u.saturating_mul(u));
        self.sum_ns = self.sum_ns.saturating_add(delta_ns);
    }

    /// The mean `ktime_get` delta in ns, untruncated.
    pub fn mean_ns(&self) -> f64 {
        if self.loops == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.loops as f64
        }
    }

    /// The average in 100 ns units, as the kernel returns it (`sum / loops`, truncated).
    pub fn avg_100ns(&self) -> u64 {
        self.sum_100ns.checked_div(self.loops).unwrap_or(0)
    }

    /// The standard deviation in 100 ns units: the integer square root of the mean square less
    /// the square of the (truncated) mean.
    pub fn stddev_100ns(&self) -> u64 {
        let avg = self.avg_100ns();
        let msq = self.sum_sq.checked_div(self.loops).unwrap_or(0);
        msq.saturating_sub(avg.saturating_mul(avg)).isqrt()
    }
}

#[derive(Clone, Debug)]
pub struct MapBenchmarkResult {
    pub info: RunInfo,
    pub device: Device,
    pub dma_ops: String,
    pub workload: MapBenchmark,
    pub map: Latencies,
    pub unmap: Latencies,
    /// Why the loop ended before its seconds were up, if it did.
    pub stopped: Option<String>,
    pub calls: Vec<CallStat>,
    pub counts: [u64; Counter::N],
    /// What each lock of the device's DMA layers saw, by the kernel's name.
    pub locks: Vec<(&'static str, crate::smp::LockRecord)>,
    /// What the SMMUv3 command queue saw, behind an SMMUv3.
    pub cmdq: Option<CmdqStats>,
    /// Each thread's `(cpu, node)`, in thread order.
    pub cpus: Vec<(u32, u32)>,
    /// The SMMUv3 probed at boot on a NUMA platform, and where its command queue landed.
    pub smmu: Option<SmmuPlace>,
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

pub use crate::report::Wait;

/// Where the SMMUv3 the device sits behind was probed: its node, and the node of the memory
/// its command queue came from (which every command list's line transfers are priced against).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmmuPlace {
    pub name: String,
    pub node: u32,
    pub cmdq_node: u32,
}

impl MapBenchmarkResult {
    pub fn call(&self, name: &str) -> Option<&CallStat> {
        self.calls.iter().find(|c| c.call == name)
    }

    /// Where the CPUs waited, most first ([`crate::report::waits`]).
    pub fn waits(&self) -> Vec<Wait> {
        crate::report::waits(&self.stacks)
    }

    /// A lock record's (waiter, holder) pairs as the machine's CPU numbers, most time first.
    pub fn lock_pairs(&self, r: &crate::smp::LockRecord) -> Vec<(u32, u32, u64)> {
        let cpu = |i: usize| self.cpus.get(i).map_or(i as u32, |c| c.0);
        let mut v: Vec<(u32, u32, u64)> = r
            .by_pair
            .iter()
            .map(|(&(w, h), &ps)| (cpu(w), cpu(h), ps))
            .collect();
        v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| (a.0, a.1).cmp(&(b.0, b.1))));
        v
    }

    /// The kernel tool's three lines, as the release's tool prints them: 7.1's names the mode
    /// and drops the space after `granule:`.
    pub fn tool_lines(&self) -> String {
        let w = &self.workload;
        let dir = match w.direction {
            DmaDirection::Bidirectional => "BIDIRECTIONAL",
            DmaDirection::ToDevice => "TO_DEVICE",
            DmaDirection::FromDevice => "FROM_DEVICE",
            DmaDirection::None => "NONE",
        };
        let node = w.node.map_or(-1, i64::from);
        let (mode, granule) = if self.info.policies.kernel >= MODE_SINCE {
            (format!("({})", w.mode().tool_name()), "granule:")
        } else {
            (String::new(), "granule: ")
        };
        format!(
            "dma mapping benchmark{mode}: threads:{} seconds:{} node:{node} dir:{dir} {granule}{}\n\
             average map latency(us):{:.1} standard deviation:{:.1}\n\
             average unmap latency(us):{:.1} standard deviation:{:.1}\n",
            w.threads,
            w.seconds,
            w.granule,
            self.map.avg_100ns() as f64 / 10.0,
            self.map.stddev_100ns() as f64 / 10.0,
            self.unmap.avg_100ns() as f64 / 10.0,
            self.unmap.stddev_100ns() as f64 / 10.0,
        )
    }
}

/// Pairs a thread is counted at in a modelled second, before anything runs: about what one
/// CPU's map+unmap of a page through an SMMU makes (0.9 M on kunpeng920, 0.35 M on sm8150). A
/// pair that costs less (dma-direct to a coherent device: tens of ns) makes the estimate low.
pub const PAIRS_A_SECOND: u64 = 1_000_000;

impl MapBenchmark {
    /// How each thread maps its buffer.
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::Single)
    }

    /// The pairs one thread is counted at for the work limit: [`PAIRS_A_SECOND`] for each
    /// second, no more than `-x`'s delay lets a thread make, and at most [`MAX_LOOPS`]. The
    /// real count is known only once the model has run.
    pub fn loops_counted(&self) -> u64 {
        let per_second = match self.dma_trans_ns {
            0 => PAIRS_A_SECOND,
            x => PAIRS_A_SECOND.min(1_000_000_000 / u64::from(x)),
        };
        MAX_LOOPS.min(u64::from(self.seconds) * per_second)
    }

    /// Model steps one map+unmap pair is counted at: each line of the buffer written and
    /// maintained, and behind an IOMMU each page mapped and unmapped.
    pub fn steps_per_pair(&self, s: &Scenario) -> u128 {
        let bytes = u128::from(self.granule) * u128::from(PAGE);
        let entries = match self.mode() {
            Mode::Single => 1,
            Mode::Sg => u128::from(self.granule),
        };
        let mut per = 2 * (bytes / s.work_line()) + 4 * entries;
        if s.iommu.is_some() {
            per += super::IOMMU_PAGE_STEPS * bytes / s.work_page();
        }
        per
    }
}

/// A warning when the profile does not price the stores of the memset each loop makes before
/// its map (`memory_type.cached.write_16`): it then takes no time, and the loops run faster
/// than the board's. The timed calls do not depend on it.
pub fn unpriced_memset(s: &Scenario, w: &MapBenchmark) -> Option<String> {
    let priced = s
        .profile
        .model
        .mem
        .as_ref()
        .and_then(|m| m.of(MemType::Cached))
        .and_then(|c| c.cost(true, MEMSET_STORE))
        .is_some();
    (!priced && w.direction != DmaDirection::FromDevice).then(|| {
        format!(
            "{}: platform `{}` does not price memory_type.cached.write_{MEMSET_STORE}, so the benchmark's memset of its buffer before each map takes no time: the loops run faster than the board's, though the map and unmap latencies do not depend on it",
            s.profile.origin,
            s.profile.name()
        )
    })
}

/// `ktime_get()` on the model: its own code, then the clock in whole nanoseconds. The clock is
/// read at the end of the call, so a timed window holds one whole `ktime_get` besides the call
/// it times (the tail of the first read's and the head of the second's, on the board).
fn ktime_get(hw: &mut dyn Hw, cost: SwCost) -> u64 {
    hw.leaf("ktime_get", cost, None);
    hw.now_ps() / 1000
}

/// Where each benchmark thread runs: one thread per CPU, `(cpu, node)`, as
/// [`super::smp_cpus::place`] places them (with `-n`, on the node's CPUs).
pub fn thread_cpus(s: &Scenario, w: &MapBenchmark) -> Vec<(u32, u32)> {
    super::smp_cpus::place(s, w.threads, w.node)
}

/// How far each thread's loop goes: the run's modelled seconds, or a trial's shorter stretch.
#[derive(Clone, Copy, Debug)]
struct Bound {
    end_ps: u64,
    max_loops: u64,
}

impl Bound {
    fn run(w: &MapBenchmark) -> Bound {
        Bound {
            end_ps: u64::from(w.seconds) * 1_000_000_000_000,
            max_loops: MAX_LOOPS,
        }
    }
}

/// What one benchmark thread leaves behind.
struct ThreadRun {
    hw: crate::hw::model::Model,
    api: std::rc::Rc<crate::setup::DeviceDmaApi>,
    map: Latencies,
    unmap: Latencies,
    calls: CallTimer,
    stopped: Option<String>,
    /// Modelled time from the thread's first pair to the end of its last.
    elapsed_ps: u64,
    /// Whether its loop ran to the bound, rather than ending on a failed map or a pair that
    /// takes no time.
    to_bound: bool,
}

/// A thread's buffer as its mode maps it: the module's `dma_single_map_param` or
/// `dma_sg_map_param`, with its `initialize_data`, `do_map` and `do_unmap`.
enum Buffer {
    /// `granule` pages from `alloc_pages_exact()`, and the address its map returned.
    Single {
        phys: PhysAddr,
        size: u64,
        addr: Option<DmaAddr>,
    },
    /// A scatterlist of `granule` entries, a page each.
    Sg(SgTable),
}

impl Buffer {
    /// The buffer of `w`'s mode in the memory allocated for it at `phys` (for scatter-gather,
    /// twice its pages: each entry takes every other page).
    fn at(phys: PhysAddr, w: &MapBenchmark) -> Buffer {
        let size = u64::from(w.granule) * PAGE;
        match w.mode() {
            Mode::Single => Buffer::Single {
                phys,
                size,
                addr: None,
            },
            Mode::Sg => Buffer::Sg(SgTable::from_pages(
                (0..u64::from(w.granule)).map(|i| PhysAddr(phys.0 + 2 * i * PAGE)),
            )),
        }
    }

    /// Bytes to allocate for a buffer of `w`'s mode.
    fn bytes(w: &MapBenchmark) -> u64 {
        let size = u64::from(w.granule) * PAGE;
        match w.mode() {
            Mode::Single => size,
            Mode::Sg => 2 * size,
        }
    }

    /// `initialize_data()`: `memset(0x66)` over the pages unless the device only writes them,
    /// so a non-coherent device's map has lines to clean. Outside the timed windows, but on
    /// the thread's clock: arm64's memset stores a non-zero pattern [`MEMSET_STORE`] bytes at a
    /// time, priced as the profile's cached stores of that size.
    fn initialize(&self, hw: &mut crate::hw::model::Model, dir: DmaDirection) {
        if dir == DmaDirection::FromDevice {
            return;
        }
        let back = hw.enter(crate::frame_id!("memset"));
        match self {
            Buffer::Single { phys, size, .. } => {
                hw.cpu_access(Access::Write, MemType::Cached, MEMSET_STORE, *phys, *size)
            }
            Buffer::Sg(sgt) => {
                for e in &sgt.entries {
                    let n = u64::from(e.length);
                    hw.cpu_access(Access::Write, MemType::Cached, MEMSET_STORE, e.phys(), n);
                }
            }
        }
        hw.leave(back);
    }

    /// `do_map()`, timed by `t`: whether the map succeeded.
    fn map(
        &mut self,
        t: &mut CallTimer,
        hw: &mut crate::hw::model::Model,
        api: &crate::setup::DeviceDmaApi,
        dir: DmaDirection,
    ) -> bool {
        match self {
            Buffer::Single { phys, size, addr } => {
                *addr = t.time_result(hw, "dma_map_single", |hw| {
                    api.map_single(hw, *phys, *size, dir, DmaAttrs::NONE)
                });
                addr.is_some()
            }
            Buffer::Sg(sgt) => t
                .time_result(hw, "dma_map_sg", |hw| {
                    api.map_sg(hw, sgt, dir, DmaAttrs::NONE)
                })
                .is_some(),
        }
    }

    /// `do_unmap()` of what [`Buffer::map`] mapped, timed by `t`.
    fn unmap(
        &mut self,
        t: &mut CallTimer,
        hw: &mut crate::hw::model::Model,
        api: &crate::setup::DeviceDmaApi,
        dir: DmaDirection,
    ) {
        match self {
            Buffer::Single { size, addr, .. } => {
                let a = addr
                    .take()
                    .expect("unmapped only after a map that succeeded");
                t.time(hw, "dma_unmap_single", |hw| {
                    api.unmap_single(hw, a, *size, dir, DmaAttrs::NONE)
                });
            }
            Buffer::Sg(sgt) => t.time(hw, "dma_unmap_sg", |hw| {
                api.unmap_sg(hw, sgt, dir, DmaAttrs::NONE)
            }),
        }
    }
}

/// `map_benchmark_thread()` on one CPU until `bound` is reached.
/// `struct map_benchmark_data`'s sums, which every thread adds into after each pair: five
/// `atomic64_t`s side by side, one line every CPU writes.
#[derive(Debug, Default)]
struct BenchSums {
    sum_map_100ns: u64,
    sum_unmap_100ns: u64,
    sum_sq_map: u64,
    sum_sq_unmap: u64,
    loops: u64,
}

/// The end of `map_benchmark_thread()`'s loop: the pair's times in units of 100 ns and their
/// squares added into the module's sums, and the loop counted, one `atomic64_add` or
/// `atomic64_inc` each; the line goes to whichever CPU adds next.
fn add_sums(
    hw: &mut crate::hw::model::Model,
    sums: &crate::smp::Shared<BenchSums>,
    map_ns: u64,
    unmap_ns: u64,
) {
    use crate::hw::SmpHw;
    let back = hw.enter(crate::frame_id!("map_benchmark_thread"));
    let (m, u) = (map_ns / 100, unmap_ns / 100);
    hw.update(sums, |_, s| {
        s.sum_map_100ns = s.sum_map_100ns.saturating_add(m)
    });
    hw.update(sums, |_, s| {
        s.sum_unmap_100ns = s.sum_unmap_100ns.saturating_add(u)
    });
    let (m2, u2) = (m.saturating_mul(m), u.saturating_mul(u));
    hw.update(sums, |_, s| s.sum_sq_map = s.sum_sq_map.saturating_add(m2));
    hw.update(sums, |_, s| {
        s.sum_sq_unmap = s.sum_sq_unmap.saturating_add(u2)
    });
    hw.update(sums, |_, s| s.loops += 1);
    hw.leave(back);
}

#[allow(clippy::too_many_arguments)]
fn bench_thread(
    mut hw: crate::hw::model::Model,
    api: std::rc::Rc<crate::setup::DeviceDmaApi>,
    mut buf: Buffer,
    sums: &crate::smp::Shared<BenchSums>,
    w: &MapBenchmark,
    bound: Bound,
    platform: &str,
    progress: Option<&Progress>,
) -> ThreadRun {
    let dir = w.direction;
    let ktime = hw.sw_cost(SwKey::KtimeGet);
    let mut t = CallTimer::default();
    let (mut map, mut unmap) = (Latencies::default(), Latencies::default());
    let trans = SwCost(u64::from(w.dma_trans_ns) * 1000);
    let start = hw.now_ps();
    let mut stopped = None;
    let mut second = 1;
    let mut to_bound = true;
    while hw.now_ps() - start < bound.end_ps && map.loops < bound.max_loops {
        buf.initialize(&mut hw, dir);
        let pair_start = hw.now_ps();
        let t0 = ktime_get(&mut hw, ktime);
        let mapped = buf.map(&mut t, &mut hw, &api, dir);
        let map_ns = ktime_get(&mut hw, ktime) - t0;
        map.add(map_ns);
        if !mapped {
            // The kernel's thread stops at a failed map ("dma_map_single failed").
            to_bound = false;
            break;
        }
        if trans.0 > 0 {
            // ndelay(): the CPU spins while the device would use the buffer.
            hw.leaf("ndelay", trans, None);
        }
        let t1 = ktime_get(&mut hw, ktime);
        buf.unmap(&mut t, &mut hw, &api, dir);
        let unmap_ns = ktime_get(&mut hw, ktime) - t1;
        unmap.add(unmap_ns);
        add_sums(&mut hw, sums, map_ns, unmap_ns);
        if hw.now_ps() == pair_start {
            stopped = Some(format!(
                "stopped after {} pairs: platform `{platform}` prices a map and an unmap at 0 ps, so modelled time does not pass",
                map.loops
            ));
            to_bound = false;
            break;
        }
        if let Some(p) = progress {
            while second <= w.seconds
                && hw.now_ps() - start >= u64::from(second) * 1_000_000_000_000
            {
                p.advance(1);
                second += 1;
            }
        }
    }
    debug_assert!(hw.ledger().depth_is_zero());
    let elapsed_ps = hw.now_ps() - start;
    ThreadRun {
        hw,
        api,
        map,
        unmap,
        calls: t,
        stopped,
        elapsed_ps,
        to_bound,
    }
}

/// One thread's CPU (its clock), the device's DMA layers every thread calls, and its buffer.
type ThreadMachine = (
    (
        crate::hw::model::Model,
        std::rc::Rc<crate::setup::DeviceDmaApi>,
    ),
    Buffer,
);

/// The machine as the benchmark's threads find it: the device's DMA layers set up, each CPU's
/// clock and buffer, and where every CPU's charges are summed.
struct Machines {
    cpus: Vec<(u32, u32)>,
    smmu: Option<SmmuPlace>,
    each: Vec<ThreadMachine>,
    total: crate::hw::model::Model,
}

fn set_up(s: &Scenario, w: &MapBenchmark) -> Result<Machines, RunFailure> {
    let cpus = thread_cpus(s, w);
    let bytes = Buffer::bytes(w);
    let mut m = super::streaming::boot_for_buffer(s, cpus[0].1, bytes * u64::from(w.threads))?;
    // Each thread's buffer, allocated on its node before the threads start mapping.
    let bufs = cpus
        .iter()
        .map(|&(_, node)| m.mem.borrow_mut().alloc(node, bytes))
        .map(|phys| phys.map(|p| Buffer::at(p, w)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(SetupError::Buffer)?;
    // The IOVA magazines and swiotlb areas are per CPU of the machine.
    let machine_cpus = super::smp_cpus::per_cpu_slots(s, &cpus);
    let api = setup_dma_ops(&mut m, &s.device_setup(), machine_cpus)?;
    let smmu = m.smmu.as_ref().map(|p| SmmuPlace {
        name: p.name.clone(),
        node: p.node,
        cmdq_node: p.cmdq_node(),
    });
    let mut hw = m.hw;
    hw.clear_ledger();
    let total = hw.clone();
    // One thread runs on the machine as set up; more run on clocks of their own, every one
    // calling the device's one set of DMA layers.
    let machines = super::smp_cpus::machines(hw, api, &cpus)?;
    Ok(Machines {
        cpus,
        smmu,
        each: machines.into_iter().zip(bufs).collect(),
        total,
    })
}

/// Every thread's loop at once, up to `bound`.
fn run_threads(
    s: &Scenario,
    w: &MapBenchmark,
    each: Vec<ThreadMachine>,
    bound: Bound,
    progress: &Progress,
) -> Result<Vec<ThreadRun>, RunFailure> {
    let platform = s.profile.name().to_string();
    let sums = crate::smp::Shared::new(
        "map->sum_map_100ns, map->sum_unmap_100ns, map->sum_sq_map, map->sum_sq_unmap, map->loops",
        BenchSums::default(),
    );
    let runs = super::smp_cpus::run_each(
        each,
        progress,
        &|((mut thw, tapi), buf): ((crate::hw::model::Model, _), _), c, progress| {
            thw.set_cpu(c);
            bench_thread(thw, tapi, buf, &sums, w, bound, &platform, progress)
        },
    )?;
    debug_assert_eq!(
        sums.peek().loops,
        runs.iter().map(|r| r.unmap.loops).sum::<u64>()
    );
    Ok(runs)
}

/// Run the benchmark's threads on the Model, one CPU each, sharing the device's DMA layers.
pub fn run(
    s: &Scenario,
    w: &MapBenchmark,
    progress: &Progress,
) -> Result<MapBenchmarkResult, RunFailure> {
    run_to(s, w, Bound::run(w), progress)
}

/// The run cut at `pairs` map+unmap pairs a thread (or its seconds, if they end first): what
/// `dmasim fit` runs for each row, where a one-thread run's means settle within its first
/// pairs and a modelled second of them would cost the fit a second of host time a step.
pub fn sample(
    s: &Scenario,
    w: &MapBenchmark,
    pairs: u64,
) -> Result<MapBenchmarkResult, RunFailure> {
    let bound = Bound {
        max_loops: pairs.min(MAX_LOOPS),
        ..Bound::run(w)
    };
    run_to(s, w, bound, &Progress::new())
}

fn run_to(
    s: &Scenario,
    w: &MapBenchmark,
    bound: Bound,
    progress: &Progress,
) -> Result<MapBenchmarkResult, RunFailure> {
    let Machines {
        cpus,
        smmu,
        each,
        total,
    } = set_up(s, w)?;
    let runs = run_threads(s, w, each, bound, progress)?;
    let mut map = Latencies::default();
    let mut unmap = Latencies::default();
    let mut t = CallTimer::default();
    let mut stopped = None;
    let mut hw = total;
    for r in &runs {
        map.absorb(&r.map);
        unmap.absorb(&r.unmap);
        t.absorb(&r.calls);
        hw.absorb_ledger(&r.hw);
        if stopped.is_none() {
            stopped.clone_from(&r.stopped);
        }
    }
    let stacks = stack_rows(hw.ledger());
    t.attribute(&stacks);
    Ok(MapBenchmarkResult {
        info: s.run_info(),
        device: s.device.clone(),
        dma_ops: s.dma_ops().describe(&s.policies),
        workload: w.clone(),
        map,
        unmap,
        stopped,
        calls: t.stats,
        counts: hw.ledger().totals(),
        locks: runs[0].api.ops.lock_records(),
        cmdq: runs[0].api.ops.cmdq_stats(),
        cpus,
        smmu,
        stacks,
        total_ps: hw.ledger().total_ps(),
    })
}

/// A trial's stretch of modelled time: 4 ms, or the run's seconds if shorter. Long enough that
/// a run of many threads (the long ones) is timed over tens of ms of host time.
pub const TRIAL_PS: u64 = 4_000_000_000;
/// Most pairs one thread makes in a trial: where a pair costs tens of ns (dma-direct to a
/// coherent device), 4 ms of many threads would itself take seconds of host time.
pub const TRIAL_PAIRS: u64 = 10_000;

/// What a short stretch of a run, run first, says about the whole: how many pairs the run
/// will make and how long the host takes over them. The stretch is the run's own beginning
/// (the same machine, threads and calls), so its rate includes what the threads wait for.
#[derive(Clone, Debug)]
pub struct Trial {
    /// Pairs the trial's threads made, all together.
    pub pairs: u64,
    /// Modelled time the trial ran each thread for, in ps (at most).
    pub modelled_ps: u64,
    /// Pairs the whole run will make at each thread's rate in the trial.
    pub expected_pairs: u64,
    /// Host time setting the machine up, and running the trial's threads.
    pub setup: std::time::Duration,
    pub looped: std::time::Duration,
}

impl Trial {
    /// Host time the whole run will take: setting up once, and the pairs at the trial's host
    /// cost a pair.
    pub fn host_estimate(&self) -> std::time::Duration {
        let ratio = self.expected_pairs as f64 / self.pairs.max(1) as f64;
        self.setup + self.looped.mul_f64(ratio)
    }
}

/// Run the first [`TRIAL_PS`] of `w` (at most [`TRIAL_PAIRS`] a thread) and time it on the
/// host the second time: a fresh process's first pairs pay for the host's page faults and cold
/// caches, which the run itself, started after the trial, does not. The
/// host times are measurements of this machine, never read by the model; the pairs are the
/// model's, the same for the same inputs.
pub fn trial(s: &Scenario, w: &MapBenchmark) -> Result<Trial, RunFailure> {
    let whole = Bound::run(w).end_ps;
    let bound = Bound {
        end_ps: TRIAL_PS.min(whole),
        max_loops: TRIAL_PAIRS,
    };
    let Machines { each, .. } = set_up(s, w)?;
    run_threads(s, w, each, bound, &Progress::new())?;
    let began = std::time::Instant::now();
    let Machines { each, .. } = set_up(s, w)?;
    let setup = began.elapsed();
    let looping = std::time::Instant::now();
    let runs = run_threads(s, w, each, bound, &Progress::new())?;
    let looped = looping.elapsed();
    let expected_pairs = runs
        .iter()
        .map(|r| {
            if !r.to_bound || r.elapsed_ps == 0 {
                // The run's loop ends where the trial's did.
                return r.map.loops;
            }
            let at_rate = u128::from(r.map.loops) * u128::from(whole) / u128::from(r.elapsed_ps);
            u64::try_from(at_rate).unwrap_or(u64::MAX).min(MAX_LOOPS)
        })
        .sum();
    Ok(Trial {
        pairs: runs.iter().map(|r| r.map.loops).sum(),
        modelled_ps: bound.end_ps,
        expected_pairs,
        setup,
        looped,
    })
}

#[derive(Serialize)]
struct Doc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    device: DeviceDoc<'a>,
    workload: WorkloadDoc,
    /// What the kernel tool prints, in its units (µs at 100 ns resolution).
    tool: ToolDoc,
    /// Where the threads ran, and where the device and the SMMU's command queue sit.
    placement: PlacementDoc<'a>,
    /// Why the loop ended before its seconds were up, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<String>,
    calls: Vec<CallDoc>,
    operations: BTreeMap<&'static str, u64>,
    /// Where the threads waited, most first.
    waits: Vec<WaitDoc>,
    locks: Vec<LockDoc>,
    /// What the SMMUv3 command queue saw (behind an SMMUv3 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    cmdq: Option<CmdqDoc>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct PlacementDoc<'a> {
    /// Each thread's CPU and its node, in thread order.
    threads: Vec<ThreadDoc>,
    /// `dev_to_node()`: `null` is `NUMA_NO_NODE`.
    device_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    smmu: Option<SmmuDoc<'a>>,
}

#[derive(Serialize)]
struct ThreadDoc {
    cpu: u32,
    node: u32,
}

#[derive(Serialize)]
struct SmmuDoc<'a> {
    name: &'a str,
    node: u32,
    cmdq_node: u32,
}

#[derive(Serialize)]
struct CmdqDoc {
    commands: u64,
    lists: u64,
    syncs: u64,
    coalesced: u64,
    claims: u64,
    cmpxchg_retries: u64,
    overruns: u64,
}

#[derive(Serialize)]
struct WaitDoc {
    place: String,
    ns: f64,
    share: f64,
}

#[derive(Serialize)]
struct LockDoc {
    name: &'static str,
    acquired: u64,
    contended: u64,
    wait_ns: f64,
    max_wait_ns: f64,
    /// Time each CPU spun waiting for the lock, by the CPU that handed it over.
    waited_on: Vec<PairDoc>,
}

#[derive(Serialize)]
struct PairDoc {
    cpu: u32,
    on_cpu: u32,
    ns: f64,
}

#[derive(Serialize)]
struct WorkloadDoc {
    kind: &'static str,
    /// `single` or `sg` (7.1's `-m`).
    mode: &'static str,
    threads: u32,
    seconds: u32,
    node: i64,
    direction: &'static str,
    granule: u32,
    dma_trans_ns: u32,
}

#[derive(Serialize)]
struct ToolDoc {
    loops: u64,
    avg_map_us: f64,
    map_stddev_us: f64,
    avg_unmap_us: f64,
    unmap_stddev_us: f64,
}

/// The kernel tool's figures, in its units.
fn tool_doc(r: &MapBenchmarkResult) -> ToolDoc {
    let us = |u: u64| u as f64 / 10.0;
    ToolDoc {
        loops: r.map.loops,
        avg_map_us: us(r.map.avg_100ns()),
        map_stddev_us: us(r.map.stddev_100ns()),
        avg_unmap_us: us(r.unmap.avg_100ns()),
        unmap_stddev_us: us(r.unmap.stddev_100ns()),
    }
}

/// The `--format json` document.
pub fn json(r: &MapBenchmarkResult) -> serde_json::Value {
    let w = &r.workload;
    let doc = Doc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        device: DeviceDoc::of(&r.device),
        workload: WorkloadDoc {
            kind: KIND.name,
            mode: w.mode().name(),
            threads: w.threads,
            seconds: w.seconds,
            node: w.node.map_or(-1, i64::from),
            direction: w.direction.name(),
            granule: w.granule,
            dma_trans_ns: w.dma_trans_ns,
        },
        tool: tool_doc(r),
        placement: PlacementDoc {
            threads: r
                .cpus
                .iter()
                .map(|&(cpu, node)| ThreadDoc { cpu, node })
                .collect(),
            device_node: r.device.numa_node,
            smmu: r.smmu.as_ref().map(|p| SmmuDoc {
                name: &p.name,
                node: p.node,
                cmdq_node: p.cmdq_node,
            }),
        },
        stopped: r.stopped.clone(),
        calls: r.calls.iter().map(call_doc).collect(),
        operations: counts_map(&r.counts),
        waits: r
            .waits()
            .into_iter()
            .map(|w| WaitDoc {
                share: crate::report::share(w.ps, r.total_ps),
                ns: ns(w.ps),
                place: w.place,
            })
            .collect(),
        cmdq: r.cmdq.map(|q| CmdqDoc {
            commands: q.commands,
            lists: q.batches,
            syncs: q.syncs,
            coalesced: q.coalesced,
            claims: q.claims,
            cmpxchg_retries: q.cmpxchg_retries,
            overruns: q.overruns,
        }),
        locks: r
            .locks
            .iter()
            .map(|(name, l)| LockDoc {
                name,
                acquired: l.acquired,
                contended: l.contended,
                wait_ns: ns(l.wait_ps),
                max_wait_ns: ns(l.max_wait_ps),
                waited_on: r
                    .lock_pairs(l)
                    .into_iter()
                    .map(|(cpu, on_cpu, ps)| PairDoc {
                        cpu,
                        on_cpu,
                        ns: ns(ps),
                    })
                    .collect(),
            })
            .collect(),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

/// The terminal report: the kernel tool's lines first, then the model's view of the same run.
pub fn table(r: &MapBenchmarkResult) -> String {
    let mut o = r.tool_lines();
    o.push('\n');
    header(&mut o, &r.info);
    device_line(&mut o, &r.device);
    let _ = writeln!(o, "dma ops    {}", r.dma_ops);
    let cpu = if r.cpus.len() == 1 { "CPU" } else { "CPUs" };
    let _ = writeln!(o, "threads    on {cpu} {}", cpu_ranges(&r.cpus));
    let device = r
        .device
        .numa_node
        .map_or("no node (NUMA_NO_NODE)".to_string(), |n| {
            format!("node {n}")
        });
    let _ = match &r.smmu {
        Some(p) => writeln!(
            o,
            "placement  device on {device}; SMMU {} on node {}, its command queue on node {}",
            p.name, p.node, p.cmdq_node
        ),
        None => writeln!(o, "placement  device on {device}"),
    };
    if r.info.policies.kernel < MODULE_SINCE {
        let _ = writeln!(
            o,
            "module     not in {}'s tree (it came with {MODULE_SINCE}): the loop runs as the module built out of tree against {} would",
            r.info.policies.kernel, r.info.policies.kernel
        );
    }
    let _ = writeln!(
        o,
        "loops      {} map+unmap pairs in {} modelled seconds",
        r.map.loops, r.workload.seconds
    );
    let _ = writeln!(o, "\n{:<28} {:>12} {:>14}", "call", "count", "mean ns");
    for c in &r.calls {
        let _ = writeln!(o, "{:<28} {:>12} {:>14.3}", c.call, c.count, c.mean_ns());
    }
    if let Some(why) = &r.stopped {
        let _ = writeln!(o, "\n{why}");
    }
    refusals(
        &mut o,
        r.calls
            .iter()
            .map(|c| (c.call, c.errors, c.first_error.as_deref())),
    );
    contention_table(&mut o, r);
    stack_table(
        &mut o,
        "per map+unmap",
        &r.stacks,
        r.total_ps,
        r.map.loops.max(1),
    );
    o
}

/// The threads' CPUs in thread order as runs of consecutive CPUs on one node, each with its
/// node: `64-95 (node 2), 96-99 (node 3)`.
fn cpu_ranges(cpus: &[(u32, u32)]) -> String {
    let mut runs: Vec<(u32, u32, u32)> = Vec::new();
    for &(cpu, node) in cpus {
        match runs.last_mut() {
            Some((_, last, n)) if *n == node && cpu == *last + 1 => *last = cpu,
            _ => runs.push((cpu, cpu, node)),
        }
    }
    runs.iter()
        .map(|&(a, b, n)| match a == b {
            true => format!("{a} (node {n})"),
            false => format!("{a}-{b} (node {n})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the threads waited, and each lock's record: the shares say what limits scaling.
fn contention_table(o: &mut String, r: &MapBenchmarkResult) {
    crate::report::waits_table(
        o,
        &r.stacks,
        r.total_ps,
        r.map.loops,
        "per map+unmap, all threads",
    );
    if let Some(q) = r.cmdq {
        let _ = writeln!(
            o,
            "\ncommand queue: {} commands in {} lists, {} doorbells, {} CMD_SYNCs ({} waited on \
             one already queued), {} cmpxchg retries in {} claims, {} lists past unconsumed \
             entries",
            q.commands,
            q.batches,
            r.counts[Counter::CmdqBatch as usize],
            q.syncs,
            q.coalesced,
            q.cmpxchg_retries,
            q.claims,
            q.overruns
        );
        if q.overruns > 0 {
            let _ = writeln!(
                o,
                "(a list past entries the SMMU has not consumed is written all the same: \
                 waiting for queue space is not modelled)"
            );
        }
    }
    let locks: Vec<_> = r.locks.iter().filter(|(_, l)| l.acquired > 0).collect();
    if locks.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{:<18} {:>12} {:>12} {:>14} {:>12}  longest waits (CPU on CPU)",
        "lock", "taken", "found held", "spun (µs)", "max (ns)"
    );
    for (name, l) in locks {
        let top: Vec<String> = r
            .lock_pairs(l)
            .iter()
            .take(3)
            .map(|(w, h, ps)| format!("{w} on {h}: {:.1} µs", ns(*ps) / 1000.0))
            .collect();
        let _ = writeln!(
            o,
            "{:<18} {:>12} {:>12} {:>14.1} {:>12.1}  {}",
            name,
            l.acquired,
            l.contended,
            ns(l.wait_ps) / 1000.0,
            ns(l.max_wait_ps),
            top.join("; ")
        );
    }
}

impl super::WorkloadKind for MapBenchmark {
    type Output = MapBenchmarkResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<MapBenchmarkResult, RunFailure> {
        run(s, self, progress)
    }

    /// The threads against the platform's CPUs and the node against its nodes, as the module's
    /// ioctl checks them on the board; the buffer against the device's mask.
    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        let at = |line, key: &str, m: String| s.error(&super::Origin::File(line), key, m);
        let (threads_line, node_line, mode_line) = self.lines;
        if self.mode.is_some() && s.kernel < MODE_SINCE {
            return Err(at(
                mode_line,
                "workload.mode",
                format!(
                    "the map mode (the tool's -m) came with {MODE_SINCE}'s dma_map_benchmark; the run is of {}, whose tool has no -m and whose module maps with dma_map_single alone",
                    s.kernel
                ),
            ));
        }
        match super::smp_cpus::platform_cpus(s) {
            Some(n) if self.threads > n => {
                return Err(at(
                    threads_line,
                    "workload.threads",
                    format!(
                        "{} threads, and platform `{}` has {n} CPUs: one thread runs on each",
                        self.threads,
                        s.profile.name()
                    ),
                ));
            }
            None if self.threads > 1 => {
                return Err(at(
                    threads_line,
                    "workload.threads",
                    format!(
                        "platform `{}` does not say how many CPUs it has (`platform.cpus`), so it runs one thread",
                        s.profile.name()
                    ),
                ));
            }
            _ => {}
        }
        if let Some(node) = self.node {
            let cpus_on = match &s.profile.numa {
                Some(t) => t.nodes.iter().find(|n| n.id == node).map(|n| n.cpus.len()),
                None => (node == 0).then_some(1),
            };
            match cpus_on {
                None => {
                    return Err(at(
                        node_line,
                        "workload.node",
                        format!("platform `{}` has no node {node}", s.profile.name()),
                    ));
                }
                Some(0) => {
                    return Err(at(
                        node_line,
                        "workload.node",
                        format!("node {node} has no CPUs to run the threads on"),
                    ));
                }
                Some(_) => {}
            }
        }
        super::smp_cpus::check_shared(s, self.threads, threads_line, "workload.threads")?;
        super::streaming::check_reach(s, u64::from(self.granule) * PAGE, "the benchmark's device")
    }

    fn driver_layers(&self, _s: &Scenario) -> Vec<crate::hw::sw_costs::Layer> {
        vec![crate::hw::sw_costs::Layer::MapBenchmark]
    }

    fn work(&self, s: &Scenario) -> u128 {
        u128::from(self.threads) * u128::from(self.loops_counted()) * self.steps_per_pair(s)
    }

    fn progress_total(&self) -> u64 {
        u64::from(self.seconds)
    }

    fn probes_smmu(&self) -> bool {
        true
    }
}

impl super::KindResult for MapBenchmarkResult {
    super::kind::result_fields!();
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        super::kind::call_stat_totals(&self.calls)
    }

    /// The tool's three lines, and all threads' pairs over the run's modelled seconds.
    fn sweep_point(&self) -> Option<super::SweepPoint> {
        let rate = self.map.loops as f64 / f64::from(self.workload.seconds);
        let mut json = serde_json::to_value(tool_doc(self)).expect("plain data serialises");
        json["pairs_per_s"] = rate.into();
        json["lines"] = self.tool_lines().lines().collect::<Vec<_>>().into();
        Some(super::SweepPoint {
            rate_of: "map+unmap pairs",
            rate,
            lines: self.tool_lines(),
            json,
        })
    }
}
