//! The checks CONFIG_DMA_API_DEBUG makes, made offline on a trace: each device's mappings as
//! the kernel had them, every unmap, sync and free held against them.
//!
//! Kernel counterpart: kernel/dma/debug.c — `check_unmap()` (an address not mapped, a size or
//! direction differing from the map's, a double unmap, a list's segment unmapped as a single
//! mapping, a list unmapped with another entry count), `check_sync()` (a sync outside the
//! mapping, or in a direction the mapping forbids), `debug_dma_free_coherent()`, the leak report
//! of `dma_debug_device_change()` (made of what is live at the end of the trace only when asked:
//! a capture ends while the driver runs, and no removal of the device is traced), and the active-cacheline tracking that warns of two live
//! mappings sharing a cache line (`active_cacheline_insert()`: each entry is tracked by the
//! cache line its physical address starts in, across all devices; only mappings the device may
//! write, so not `DMA_TO_DEVICE`; no warning for a map with `DMA_ATTR_SKIP_CPU_SYNC`).
//!
//! What it models: the checks, one function each as debug.c has them, made on what each record
//! did to the one live table of [`super::live`] (debug.c's hash: a single mapping by device and
//! DMA address, a list by its DMA segments and, for `dma_unmap_sg`, which prints no DMA
//! address, by its physical addresses; coherent allocations by DMA address). A trace sees only
//! what happened after it began, so an unmap, sync or free of something never mapped is
//! `mapped-before`, no misuse, unless the trace is the driver's whole life (`strict`): then it
//! is `not-mapped`; a sync of a single mapping after its unmap is `sync-after-unmap`. A
//! mapping made before the trace, which the table infers for the replay ([`Table::infer`]),
//! is as never mapped: each of its calls `mapped-before`, and it is never live at the end,
//! while after its unmap what follows is checked as for any other's. A list cut at 128 entries is made whole from its unmap; a
//! sync no mapping holds is not reported while a list whose unprinted entries' DMA addresses
//! are unknown is live. Of what was unmapped only the last [`GONE_WINDOW`] unmaps per device
//! are kept, for `double-unmap` and `sync-after-unmap`. Cache lines are `L1_CACHE_BYTES` = 64 bytes, the most common
//! value; a different line size changes only the overlap finding. Coherent allocations, which
//! debug.c tracks too, are left out of it: their trace events give no physical address.
//!
//! Invariants: each finding names its device and the trace lines involved (the map's line first
//! where there is one); the findings come in the order of the lines that reveal them, and what
//! is live at the end last, in the order it was mapped.

use super::live::{Effect, Mapping, Step, Table};
use super::{Event, Record, Trace};
use crate::types::DmaDirection;
use std::collections::{BTreeMap, VecDeque};

/// A CPU address as a line gives it.
fn cpu(c: super::CpuAddr) -> String {
    match c {
        super::CpuAddr::Phys(p) => format!("{p:#x} (physical)"),
        super::CpuAddr::HashedVirt(v) => format!("{v:016x} (as %p prints it)"),
    }
}

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingKind {
    /// An unmap, sync or free of something this trace never saw mapped.
    NotMapped,
    /// An unmap of something already unmapped.
    DoubleUnmap,
    /// An unmap or free whose size differs from the map's or allocation's.
    SizeMismatch,
    /// An unmap whose direction differs from the map's.
    DirectionMismatch,
    /// A sync reaching outside its mapping.
    SyncOutside,
    /// A sync in a direction the mapping does not allow: another than the map's, and (as
    /// debug.c says apart) that direction for the CPU of memory the device only reads, or for
    /// the device of memory it only writes.
    SyncDirection,
    /// A mapping the device may write whose entry starts in the cache line another live one's
    /// does.
    CachelineOverlap,
    /// An unmap by another function than the map's: a list's segment given back by
    /// `dma_unmap_page` (`dma_unmap_phys`).
    WrongFunction,
    /// A `dma_unmap_sg` or a list's sync with another number of entries than its map was
    /// given.
    SgEntryCount,
    /// A `dma_map_sg_err` event: the map failed.
    MapError,
    /// A mapping still live when the trace ends, reported as a leak (`--strict-window`).
    Leak,
    /// A mapping still live when the trace ends: a capture stops while the driver runs, so
    /// this is no misuse unless the window was the driver's whole life.
    LiveAtEnd,
    /// An unmap, sync or free of what this trace never saw mapped: a capture starts after the
    /// driver set up, so this is no misuse unless the window was the driver's whole life (then
    /// it is [`FindingKind::NotMapped`]).
    MappedBefore,
    /// A sync of a mapping the trace showed unmapped.
    SyncAfterUnmap,
    /// A coherent free whose CPU address is not the allocation's (debug.c's "frees DMA memory
    /// with different CPU address").
    WrongCpuAddress,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::NotMapped => "not-mapped",
            FindingKind::DoubleUnmap => "double-unmap",
            FindingKind::SizeMismatch => "size-mismatch",
            FindingKind::DirectionMismatch => "direction-mismatch",
            FindingKind::SyncOutside => "sync-outside-mapping",
            FindingKind::SyncDirection => "sync-direction",
            FindingKind::CachelineOverlap => "cacheline-overlap",
            FindingKind::WrongFunction => "wrong-function",
            FindingKind::SgEntryCount => "sg-entry-count",
            FindingKind::MapError => "map-error",
            FindingKind::Leak => "leak",
            FindingKind::LiveAtEnd => "live-at-end",
            FindingKind::MappedBefore => "mapped-before",
            FindingKind::SyncAfterUnmap => "sync-after-unmap",
            FindingKind::WrongCpuAddress => "wrong-cpu-address",
        }
    }

    /// Whether the finding is a misuse, for `--check`'s exit status.
    pub fn fails(self) -> bool {
        !matches!(self, FindingKind::LiveAtEnd | FindingKind::MappedBefore)
    }
}

/// One thing debug.c would have warned of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    pub device: String,
    /// Trace lines involved: the mapping's first where there is one.
    pub lines: Vec<usize>,
    pub message: String,
}

/// How many findings of each kind are kept with their lines and message; past that they are
/// only counted ([`Findings::counts`]), so a trace with a misuse on every line, or a page pool
/// of many thousands of buffers live at its end, does not make memory or the report grow
/// with it.
pub const KEPT_PER_KIND: u64 = 100;

/// What the checks found: every finding counted by kind, the first [`KEPT_PER_KIND`] of each
/// kept in full, in the order they were found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    pub kept: Vec<Finding>,
    pub counts: BTreeMap<FindingKind, u64>,
}

impl Findings {
    /// Count a finding of `kind`, and keep it (made by `make`) while its kind has room.
    fn add(&mut self, kind: FindingKind, make: impl FnOnce() -> Finding) {
        let n = self.counts.entry(kind).or_default();
        *n += 1;
        if *n <= KEPT_PER_KIND {
            self.kept.push(make());
        }
    }

    /// How many findings are misuses (`--check` fails on any).
    pub fn misuses(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.fails())
            .map(|(_, n)| n)
            .sum()
    }

    /// How many findings of `kind` were counted but not kept.
    pub fn not_kept(&self, kind: FindingKind) -> u64 {
        self.counts
            .get(&kind)
            .map_or(0, |n| n.saturating_sub(KEPT_PER_KIND))
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// How many unmaps per device are remembered, for a second unmap of the same address or list
/// to be named `double-unmap` with the line of the first: a driver's double unmap is one
/// cleanup path run twice, close together. An older one is still found, as `not-mapped`.
pub const GONE_WINDOW: usize = 1024;

/// What an unmap gave back, as a second unmap of it would name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    /// A single mapping's DMA address.
    Single(u64),
    /// A list's first physical address and its number of entries.
    Sg(u64, usize),
}

/// Every finding of `trace`: a first pass finds the cut lists' whole entries in their unmaps,
/// as the replay's first read does, and the checks are made on the second. What is live at
/// the end is a leak when `strict` says the trace covers the driver's whole life.
pub fn check(trace: &Trace, strict: bool) -> Findings {
    let mut first = Table::default();
    for r in &trace.records {
        first.push(r);
    }
    let mut table = Table::completing(first.wholes().clone()).tracking_cachelines();
    let mut c = Checker::new(strict);
    for r in &trace.records {
        let step = table.push(r);
        c.push(r, &step, &table);
    }
    c.finish(&table, strict)
}

/// The checks made as a trace is read, record by record, on what each did to the live table
/// ([`Table::push`], with cache lines tracked), keeping of what is gone only the last
/// [`GONE_WINDOW`] unmaps of each device.
#[derive(Default)]
pub struct Checker {
    /// Per device (the table's numbers), its last unmaps and their lines, newest last.
    gone: Vec<VecDeque<(Gone, usize, u64)>>,
    out: Findings,
    /// The trace is the driver's whole life: what it never saw mapped is `not-mapped`.
    strict: bool,
}

impl Checker {
    /// The checks of a trace that is the driver's whole life when `strict`, else a window on
    /// a running driver.
    pub fn new(strict: bool) -> Checker {
        Checker {
            strict,
            ..Checker::default()
        }
    }

    /// Whether `r`, of device `dev`, unmaps or syncs what one of the device's last unmaps gave
    /// back: then it is no use of a mapping made before the trace ([`Table::infer`]).
    pub fn after_unmap(&self, dev: usize, r: &Record) -> bool {
        let Some(gone) = self.gone.get(dev) else {
            return false;
        };
        let holds = |addr: u64| {
            gone.iter()
                .any(|&(g, _, len)| matches!(g, Gone::Single(a) if addr >= a && addr - a < len))
        };
        match &r.event {
            Event::Unmap { dma_addr, .. } => gone.iter().any(|g| g.0 == Gone::Single(*dma_addr)),
            Event::SyncSingle { dma_addr, .. } => holds(*dma_addr),
            Event::SyncSg { dma_addrs, .. } => dma_addrs.iter().any(|&a| holds(a)),
            _ => false,
        }
    }

    /// Check one record in trace order, after `table` took it (`step`).
    pub fn push(&mut self, r: &Record, step: &Step, table: &Table) {
        let Some(dev) = step.dev else {
            return;
        };
        if self.gone.len() <= dev {
            self.gone.resize_with(dev + 1, VecDeque::new);
        }
        let Checker { gone, out, strict } = self;
        let gone = &mut gone[dev];
        let mut find = |kind, lines: Vec<usize>, message: String| {
            // What was mapped before a window began is no misuse of the window.
            let kind = match kind {
                FindingKind::NotMapped if !*strict => FindingKind::MappedBefore,
                k => k,
            };
            out.add(kind, || Finding {
                kind,
                device: r.device.clone(),
                lines,
                message,
            })
        };
        match (&r.event, &step.effect) {
            (Event::Map { .. } | Event::MapSg { .. }, Effect::Mapped { overlap, .. }) => {
                // debug.c does not warn of a map that skips the CPU sync.
                if let Some((first, phys)) = overlap
                    && !r.attrs.iter().any(|a| a == "SKIP_CPU_SYNC")
                {
                    find(
                        FindingKind::CachelineOverlap,
                        vec![*first, r.line],
                        format!(
                            "the entry at {phys:#x} starts in a cache line a live mapping's entry starts in"
                        ),
                    );
                }
            }
            (Event::MapSgErr { err, .. }, _) => find(
                FindingKind::MapError,
                vec![r.line],
                format!("dma_map_sg failed with {err}"),
            ),
            (Event::Unmap { .. } | Event::UnmapSg { .. }, _) => {
                check_unmap(r, &step.effect, gone, &mut find)
            }
            (
                Event::SyncSingle {
                    dir,
                    dma_addr,
                    size,
                    for_device,
                },
                _,
            ) => {
                let sync = Sync {
                    dir: *dir,
                    to_cpu: !for_device,
                };
                check_sync(table, (dev, gone), r, sync, *dma_addr, *size, &mut find)
            }
            (
                Event::SyncSg {
                    dir,
                    dma_addrs,
                    sizes,
                    for_device,
                },
                _,
            ) => {
                let sync = Sync {
                    dir: *dir,
                    to_cpu: !for_device,
                };
                check_sync_sg_count(table, dev, r, dma_addrs, &mut find);
                for (&a, &s) in dma_addrs.iter().zip(sizes).filter(|s| *s.1 > 0) {
                    check_sync(table, (dev, gone), r, sync, a, s, &mut find);
                }
            }
            (
                Event::Free {
                    dma_addr,
                    size,
                    cpu_addr,
                    ..
                },
                Effect::Freed(a),
            ) => {
                // check_unmap() tests the size and then the CPU address, each on its own.
                if a.size != *size {
                    find(
                        FindingKind::SizeMismatch,
                        vec![a.line, r.line],
                        format!(
                            "free of {size} bytes at {dma_addr:#x}, allocated as {}",
                            a.size
                        ),
                    );
                }
                if let (Some(c), Some(ac)) = (cpu_addr, a.cpu_addr)
                    && c.differs(ac)
                {
                    find(
                        FindingKind::WrongCpuAddress,
                        vec![a.line, r.line],
                        format!(
                            "free of {dma_addr:#x} with CPU address {}, allocated with {}",
                            cpu(*c),
                            cpu(ac)
                        ),
                    );
                }
            }
            (Event::Free { dma_addr, .. }, Effect::Unmatched) => find(
                FindingKind::NotMapped,
                vec![r.line],
                format!(
                    "free of {dma_addr:#x}, not allocated in this trace (allocated before it began?)"
                ),
            ),
            _ => {}
        }
    }

    /// The findings, once the trace has ended: those made along the way, then what `table`
    /// still holds, in the order it was made: live at the end, or leaks when `strict` says
    /// the trace's window is the driver's whole life.
    pub fn finish(self, table: &Table, strict: bool) -> Findings {
        let mut out = self.out;
        let mut leaks = Vec::new();
        // What was mapped before the trace was never seen mapped: not live, nor a leak.
        for (name, m) in table.live().filter(|(_, m)| !m.before) {
            let (addr, size) = m.dma.first().copied().unwrap_or((0, 0));
            let n = m.dma.len();
            let entries = if n == 1 {
                "1 entry".to_string()
            } else {
                format!("{n} entries")
            };
            let cut = if m.truncated { ", list truncated" } else { "" };
            leaks.push((
                m.line,
                name.to_string(),
                format!(
                    "mapping of {size} bytes at {addr:#x} ({entries}{cut}) still live at the end of the trace"
                ),
            ));
        }
        for (name, addr, a) in table.live_allocs() {
            leaks.push((
                a.line,
                name.to_string(),
                format!(
                    "coherent allocation of {} bytes at {addr:#x} not freed by the end of the trace",
                    a.size
                ),
            ));
        }
        leaks.sort();
        let kind = if strict {
            FindingKind::Leak
        } else {
            FindingKind::LiveAtEnd
        };
        for (line, device, message) in leaks {
            out.add(kind, || Finding {
                kind,
                device,
                lines: vec![line],
                message,
            });
        }
        out
    }
}

/// debug.c's `check_unmap()`: the unmap's size and direction against the map's; an unmap that
/// ends nothing is a second unmap when the window still has the first, else of something
/// mapped before the trace began (or never).
fn check_unmap(
    r: &Record,
    effect: &Effect,
    gone: &mut VecDeque<(Gone, usize, u64)>,
    find: &mut impl FnMut(FindingKind, Vec<usize>, String),
) {
    let (key, what) = match &r.event {
        Event::Unmap { dma_addr, .. } => {
            (Gone::Single(*dma_addr), format!("unmap of {dma_addr:#x}"))
        }
        Event::UnmapSg { phys_addrs, .. } => {
            let first = phys_addrs.first().copied().unwrap_or(0);
            let n = phys_addrs.len();
            let what = format!("unmap_sg of a list of {n} entries at {first:#x}");
            (Gone::Sg(first, n), what)
        }
        _ => return,
    };
    let made = match effect {
        // Made before the trace (the replay infers it): as far as the trace shows, never.
        Effect::Unmapped { mapping: m, .. } if !m.before => Some(m),
        _ => None,
    };
    let Some(m) = made else {
        match gone.iter().rev().find(|g| g.0 == key) {
            Some(&(_, line, _)) => find(
                FindingKind::DoubleUnmap,
                vec![line, r.line],
                format!("{what}: already unmapped"),
            ),
            None => find(
                FindingKind::NotMapped,
                vec![r.line],
                format!("{what}: not mapped in this trace (mapped before it began?)"),
            ),
        }
        // A mapping made before the trace is gone now, as one the trace made would be.
        if let Effect::Unmapped { mapping, .. } = effect {
            remember(gone, key, r.line, mapping);
        }
        return;
    };
    match &r.event {
        // Only a list against a single mapping: before 6.18 a resource was a kind of its own
        // too, but from 6.18 a resource and a page are both `dma_debug_phy`, and a trace line
        // does not say which of its release's kinds an `attrs=MMIO` map was.
        Event::Unmap { dma_addr, .. } if m.sg => find(
            FindingKind::WrongFunction,
            vec![m.line, r.line],
            format!(
                "unmap of {dma_addr:#x} with the wrong function: mapped as scatter-gather, unmapped as single"
            ),
        ),
        Event::UnmapSg { phys_addrs, .. }
            // A cut list no unmap made whole has fewer entries than it was given.
            if (!m.truncated || m.completed) && m.phys.len() != phys_addrs.len() =>
        {
            find(
                FindingKind::SgEntryCount,
                vec![m.line, r.line],
                format!(
                    "unmap_sg of a list of {} entries, mapped with {}",
                    phys_addrs.len(),
                    m.phys.len()
                ),
            )
        }
        _ => {}
    }
    match &r.event {
        Event::Unmap {
            dir,
            dma_addr,
            size,
            ..
        } if !m.sg => {
            let mapped = m.dma.first().map_or(0, |s| s.1);
            if mapped != *size {
                find(
                    FindingKind::SizeMismatch,
                    vec![m.line, r.line],
                    format!("unmap of {size} bytes at {dma_addr:#x}, mapped as {mapped}"),
                );
            }
            if m.dir != *dir {
                find(
                    FindingKind::DirectionMismatch,
                    vec![m.line, r.line],
                    format!(
                        "unmap {} at {dma_addr:#x}, mapped {}",
                        dir.name(),
                        m.dir.name()
                    ),
                );
            }
        }
        Event::UnmapSg { dir, .. } if m.dir != *dir => find(
            FindingKind::DirectionMismatch,
            vec![m.line, r.line],
            format!("unmap_sg {}, mapped {}", dir.name(), m.dir.name()),
        ),
        _ => {}
    }
    remember(gone, key, r.line, m);
}

/// An unmap of `m` at `line`, among the device's last [`GONE_WINDOW`].
fn remember(gone: &mut VecDeque<(Gone, usize, u64)>, key: Gone, line: usize, m: &Mapping) {
    if gone.len() == GONE_WINDOW {
        gone.pop_front();
    }
    // A single mapping's length too, for a sync after its unmap.
    let len = m.dma.first().map_or(0, |s| s.1);
    gone.push_back((key, line, len));
}

/// debug.c's `check_sync()` for one synced range: inside the live segment that holds its
/// start, in a direction the mapping allows (its own, or any when it is bidirectional). A
/// range no mapping holds is not reported while the device holds a list with entries the
/// trace did not print: it may be one of them.
fn check_sync(
    table: &Table,
    (dev, gone): (usize, &VecDeque<(Gone, usize, u64)>),
    r: &Record,
    sync: Sync,
    addr: u64,
    size: u64,
    find: &mut impl FnMut(FindingKind, Vec<usize>, String),
) {
    let dir = sync.dir;
    let held = table
        .holding(dev, addr, size)
        .and_then(|h| Some((h, table.mapping(dev, h.id)?)))
        .filter(|(_, m)| !m.before);
    let Some((h, m)) = held else {
        let unmapped = gone.iter().rev().find_map(|&(g, line, len)| match g {
            Gone::Single(a) if addr >= a && addr - a < len => Some(line),
            _ => None,
        });
        if let Some(line) = unmapped {
            find(
                FindingKind::SyncAfterUnmap,
                vec![line, r.line],
                format!("sync of {size} bytes at {addr:#x} after its unmap at line {line}"),
            );
        } else if !table.unknown_tail(dev) {
            find(
                FindingKind::NotMapped,
                vec![r.line],
                format!(
                    "sync of {size} bytes at {addr:#x}: not mapped in this trace (mapped before it began?)"
                ),
            );
        }
        return;
    };
    if !h.whole {
        let past = addr
            .saturating_add(size)
            .saturating_sub(h.start.saturating_add(h.len));
        find(
            FindingKind::SyncOutside,
            vec![m.line, r.line],
            format!("sync of {size} bytes at {addr:#x} ends {past:#x} past its mapping"),
        );
    }
    if m.dir == DmaDirection::Bidirectional {
        return;
    }
    if m.dir != dir {
        find(
            FindingKind::SyncDirection,
            vec![m.line, r.line],
            format!("sync {} of a mapping made {}", dir.name(), m.dir.name()),
        );
    }
    // debug.c's two rules past the direction's: for the CPU, a mapping the device only reads
    // synced as anything but TO_DEVICE; for the device, one it only writes synced as anything
    // but FROM_DEVICE (a sync in the mapping's own direction passes both).
    use DmaDirection::{FromDevice, ToDevice};
    if sync.to_cpu && m.dir != FromDevice && dir != ToDevice {
        find(
            FindingKind::SyncDirection,
            vec![m.line, r.line],
            format!(
                "sync {} for the CPU of {size} bytes at {addr:#x}, which the device only reads (mapped {})",
                dir.name(),
                m.dir.name()
            ),
        );
    }
    if !sync.to_cpu && m.dir != ToDevice && dir != FromDevice {
        find(
            FindingKind::SyncDirection,
            vec![m.line, r.line],
            format!(
                "sync {} for the device of {size} bytes at {addr:#x}, which the device only writes (mapped {})",
                dir.name(),
                m.dir.name()
            ),
        );
    }
}

/// A sync as `check_sync()` takes it: its direction, and whether it is for the CPU.
#[derive(Clone, Copy)]
struct Sync {
    dir: DmaDirection,
    to_cpu: bool,
}

/// `check_sync()`'s entry count: a list synced with another number of entries than it was
/// mapped with (a list whose unprinted entries the trace does not give is not judged).
fn check_sync_sg_count(
    table: &Table,
    dev: usize,
    r: &Record,
    dma_addrs: &[u64],
    find: &mut impl FnMut(FindingKind, Vec<usize>, String),
) {
    let Some(&first) = dma_addrs.first() else {
        return;
    };
    let held = table
        .holding(dev, first, 0)
        .and_then(|h| table.mapping(dev, h.id));
    if let Some(m) = held
        && m.sg
        && !m.before
        && (!m.truncated || m.completed)
        && m.phys.len() != dma_addrs.len()
    {
        find(
            FindingKind::SgEntryCount,
            vec![m.line, r.line],
            format!(
                "sync of a list of {} entries, mapped with {}",
                dma_addrs.len(),
                m.phys.len()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse;

    fn kinds(text: &str) -> Vec<(FindingKind, Vec<usize>)> {
        check(&parse("t.txt", text).unwrap(), true)
            .kept
            .into_iter()
            .map(|f| (f.kind, f.lines))
            .collect()
    }

    const H: &str = "app-1 [000] 1.0:";

    /// debug.c's check of a coherent free: its size and its CPU address, each on its own; the
    /// CPU address compared only in the form both lines give (6.13's hashed `%p`, or the
    /// physical address before), so a trace that gives neither checks only the size.
    #[test]
    fn a_coherent_free_is_checked_for_its_size_and_its_cpu_address() {
        let alloc = |c: &str| {
            format!(
                "{H} dma_alloc: dev dir=BIDIRECTIONAL dma_addr=c000 size=8192 {c} flags=GFP_KERNEL attrs=\n"
            )
        };
        let free = |size: u32, c: &str| {
            format!("{H} dma_free: dev dir=BIDIRECTIONAL dma_addr=c000 size={size} {c} attrs=\n")
        };
        let (va, vb) = ("virt_addr=00000000a1b2c3d4", "virt_addr=00000000deadbeef");
        let wrong = FindingKind::WrongCpuAddress;
        assert_eq!(kinds(&format!("{}{}", alloc(va), free(8192, va))), vec![]);
        assert_eq!(
            kinds(&format!("{}{}", alloc(va), free(8192, vb))),
            vec![(wrong, vec![1, 2])]
        );
        assert_eq!(
            kinds(&format!("{}{}", alloc(va), free(4096, vb))),
            vec![(FindingKind::SizeMismatch, vec![1, 2]), (wrong, vec![1, 2])]
        );
        let (pa, pb) = ("phys_addr=3f000000", "phys_addr=3f002000");
        assert_eq!(
            kinds(&format!("{}{}", alloc(pa), free(8192, pb))),
            vec![(wrong, vec![1, 2])]
        );
        // A physical address and a hashed pointer are not compared.
        assert_eq!(kinds(&format!("{}{}", alloc(pa), free(8192, vb))), vec![]);
        assert!(wrong.fails());
    }

    /// debug.c's `check_sync()`: past a direction other than the map's, a sync for the CPU of
    /// memory the device only reads (mapped TO_DEVICE) that is not itself TO_DEVICE, or for the
    /// device of memory it only writes that is not FROM_DEVICE; each rule alone in its own
    /// direction passes. A list synced with another entry count than it was mapped with.
    #[test]
    fn sync_directions_and_entry_counts_are_checked_as_debug_c_checks_them() {
        let map = |dir: &str| {
            format!(
                "{H} dma_map_phys: dev dir={dir} dma_addr=1000 size=4096 phys_addr=1000 attrs=\n"
            )
        };
        let sync = |to: &str, dir: &str| {
            format!("{H} dma_sync_single_for_{to}: dev dir={dir} dma_addr=1000 size=64\n")
        };
        let sd = FindingKind::SyncDirection;
        // In the mapping's own direction, either way: clean (a page pool syncs its
        // FROM_DEVICE pages for the device, a driver its TO_DEVICE buffer for the CPU).
        for (dir, to) in [
            ("TO_DEVICE", "cpu"),
            ("FROM_DEVICE", "device"),
            ("TO_DEVICE", "device"),
        ] {
            assert_eq!(
                kinds(&format!("{}{}", map(dir), sync(to, dir))),
                vec![(FindingKind::Leak, vec![1])]
            );
        }
        // Another direction: that, and the read-only or write-only rule.
        let both = vec![
            (sd, vec![1, 2]),
            (sd, vec![1, 2]),
            (FindingKind::Leak, vec![1]),
        ];
        for (dir, to, synced) in [
            ("TO_DEVICE", "cpu", "FROM_DEVICE"),
            ("FROM_DEVICE", "device", "TO_DEVICE"),
        ] {
            assert_eq!(kinds(&format!("{}{}", map(dir), sync(to, synced))), both);
        }
        // A bidirectional mapping takes any sync.
        assert_eq!(
            kinds(&format!(
                "{}{}",
                map("BIDIRECTIONAL"),
                sync("cpu", "TO_DEVICE")
            )),
            vec![(FindingKind::Leak, vec![1])]
        );
        let sg = format!(
            "{H} dma_map_sg: dev dir=TO_DEVICE dma_addrs={{0x1000,0x3000}} sizes={{0x1000,0x1000}} phys_addrs={{0x1000,0x3000}} attrs=\n"
        );
        let sync_one = format!(
            "{H} dma_sync_sg_for_device: dev dir=TO_DEVICE dma_addrs={{0x1000}} sizes={{0x1000}}\n"
        );
        assert_eq!(
            kinds(&format!("{sg}{sync_one}")),
            vec![
                (FindingKind::SgEntryCount, vec![1, 2]),
                (FindingKind::Leak, vec![1])
            ]
        );
    }

    /// debug.c's `check_unmap()` names the function when the unmap's kind is not the map's (a
    /// list's segment given back by `dma_unmap_page`), and the entry count when `dma_unmap_sg`
    /// is given another list length than the map was.
    #[test]
    fn an_unmap_by_the_wrong_function_or_entry_count_is_named() {
        let sg = format!(
            "{H} dma_map_sg: dev dir=TO_DEVICE dma_addrs={{0x1000,0x3000}} sizes={{0x1000,0x1000}} phys_addrs={{0x1000,0x3000}} attrs=\n"
        );
        let page =
            format!("{H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=4096 attrs=\n");
        assert_eq!(
            kinds(&format!("{sg}{page}")),
            vec![(FindingKind::WrongFunction, vec![1, 2])]
        );
        let short = format!("{H} dma_unmap_sg: dev dir=TO_DEVICE phys_addrs={{0x1000}} attrs=\n");
        assert_eq!(
            kinds(&format!("{sg}{short}")),
            vec![(FindingKind::SgEntryCount, vec![1, 2])]
        );
        let whole =
            format!("{H} dma_unmap_sg: dev dir=TO_DEVICE phys_addrs={{0x1000,0x3000}} attrs=\n");
        assert_eq!(kinds(&format!("{sg}{whole}")), vec![]);
        // Right function, right count: the page's own unmap is clean.
        let map = format!(
            "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=4096 phys_addr=1000 attrs=\n"
        );
        assert_eq!(kinds(&format!("{map}{page}")), vec![]);
    }

    #[test]
    fn a_clean_trace_has_no_findings() {
        let t = format!(
            "{H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=1000 size=4096 phys_addr=80000000 attrs=\n\
             {H} dma_sync_single_for_cpu: dev dir=FROM_DEVICE dma_addr=1000 size=4096\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=1000 size=4096 attrs=\n\
             {H} dma_map_sg: dev dir=TO_DEVICE dma_addrs={{0x2000,0x3000}} sizes={{0x1000,0x1000}} phys_addrs={{0x90000000,0x90002000}} attrs=\n\
             {H} dma_unmap_sg: dev dir=TO_DEVICE phys_addrs={{0x90000000,0x90002000}} attrs=\n"
        );
        assert_eq!(kinds(&t), vec![]);
    }

    /// A window on a running driver: what it never saw mapped was mapped before it began, no
    /// misuse (unless the window is the driver's whole life); a sync of what it saw unmapped
    /// is one either way, naming the unmap's line.
    #[test]
    fn what_was_mapped_before_the_window_fails_only_when_strict() {
        let t = format!(
            "{H} dma_sync_single_for_cpu: dev dir=FROM_DEVICE dma_addr=1000 size=64\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=1000 size=4096 attrs=\n\
             {H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=8000 size=4096 phys_addr=80000000 attrs=\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=8000 size=4096 attrs=\n\
             {H} dma_sync_single_for_cpu: dev dir=FROM_DEVICE dma_addr=8040 size=64\n"
        );
        let trace = parse("t.txt", &t).unwrap();
        let of = |strict| -> Vec<(FindingKind, Vec<usize>, bool)> {
            check(&trace, strict)
                .kept
                .into_iter()
                .map(|f| (f.kind, f.lines, f.kind.fails()))
                .collect()
        };
        assert_eq!(
            of(false),
            [
                (FindingKind::MappedBefore, vec![1], false),
                (FindingKind::MappedBefore, vec![2], false),
                (FindingKind::SyncAfterUnmap, vec![4, 5], true),
            ]
        );
        assert_eq!(
            of(true),
            [
                (FindingKind::NotMapped, vec![1], true),
                (FindingKind::NotMapped, vec![2], true),
                (FindingKind::SyncAfterUnmap, vec![4, 5], true),
            ]
        );
        let after = check(&trace, false).kept.pop().unwrap();
        assert_eq!(after.kind.name(), "sync-after-unmap");
        assert!(
            after.message.contains("after its unmap at line 4"),
            "{}",
            after.message
        );
    }

    /// debug.c tracks only mappings the device may write, and does not warn of a map that
    /// skips the CPU sync.
    #[test]
    fn cache_lines_shared_with_to_device_or_skip_sync_mappings_are_not_overlaps() {
        let t = format!(
            "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr=5000 size=100 phys_addr=a0000000 attrs=\n\
             {H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=6000 size=100 phys_addr=a0000040 attrs=\n\
             {H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=7000 size=64 phys_addr=a0000080 attrs=SKIP_CPU_SYNC\n\
             {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=5000 size=100 attrs=\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=6000 size=100 attrs=\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=7000 size=64 attrs=\n"
        );
        assert_eq!(kinds(&t), vec![]);
    }

    /// Lines are tracked by where each entry starts, for every device at once, and let go at
    /// unmap: entries that only run into each other's lines, or whose first holder is gone, do
    /// not overlap.
    #[test]
    fn cache_lines_are_where_entries_start_across_devices() {
        let t = format!(
            "{H} dma_map_phys: a dir=FROM_DEVICE dma_addr=1000 size=256 phys_addr=b0000000 attrs=\n\
             {H} dma_map_phys: b dir=FROM_DEVICE dma_addr=1000 size=64 phys_addr=b0000040 attrs=\n\
             {H} dma_map_sg: b dir=FROM_DEVICE dma_addrs={{0x2000}} sizes={{0x40}} phys_addrs={{0xb0000010}} attrs=\n\
             {H} dma_unmap_phys: a dir=FROM_DEVICE dma_addr=1000 size=256 attrs=\n\
             {H} dma_map_phys: a dir=FROM_DEVICE dma_addr=3000 size=64 phys_addr=b0000000 attrs=\n\
             {H} dma_unmap_sg: b dir=FROM_DEVICE phys_addrs={{0xb0000010}} attrs=\n\
             {H} dma_unmap_phys: b dir=FROM_DEVICE dma_addr=1000 size=64 attrs=\n\
             {H} dma_unmap_phys: a dir=FROM_DEVICE dma_addr=3000 size=64 attrs=\n"
        );
        assert_eq!(
            kinds(&t),
            vec![
                (FindingKind::CachelineOverlap, vec![1, 3]),
                (FindingKind::CachelineOverlap, vec![3, 5]),
            ]
        );
    }

    /// A list printed capped at 128 of its 160 entries: its unmap lists them all, which makes
    /// it whole (direct-mapped, so its unprinted entries' DMA addresses are their physical
    /// ones): a sync past the printed entries is of it, and the unmap ends it. Without the
    /// unmap, such a sync may be of an unprinted entry and is not reported either.
    #[test]
    fn a_capped_list_is_whole_for_its_syncs_and_its_unmap() {
        let addrs = |n: usize| -> String {
            let v: Vec<String> = (0..n)
                .map(|i| format!("{:#x}", 0x1000_0000 + i * 0x2000))
                .collect();
            format!("{{{}}}", v.join(","))
        };
        let sizes = |n: usize| format!("{{{}}}", vec!["0x1000"; n].join(","));
        let map = format!(
            "{H} dma_map_sg: dev dir=FROM_DEVICE nents=128/160 ents=128/160 [TRUNCATED] dma_addrs={} sizes={} phys_addrs={} attrs=\n",
            addrs(128),
            sizes(128),
            addrs(128)
        );
        let sync = format!(
            "{H} dma_sync_sg_for_cpu: dev dir=FROM_DEVICE dma_addrs={} sizes={}\n\
             {H} dma_sync_single_for_cpu: dev dir=FROM_DEVICE dma_addr=1012c000 size=4096\n",
            addrs(160),
            sizes(160)
        );
        let unmap = format!(
            "{H} dma_unmap_sg: dev dir=FROM_DEVICE phys_addrs={} attrs=\n",
            addrs(160)
        );
        assert_eq!(kinds(&format!("{map}{sync}{unmap}")), vec![]);
        assert_eq!(
            kinds(&format!("{map}{sync}")),
            vec![(FindingKind::Leak, vec![1])]
        );
        // Once the list is gone, its entries are not mapped: each of the sg sync's, and the
        // single sync's; the first hundred are kept, all are counted.
        let f = check(
            &parse("t.txt", &format!("{map}{unmap}{sync}")).unwrap(),
            true,
        );
        assert_eq!(f.counts, BTreeMap::from([(FindingKind::NotMapped, 161)]));
        assert_eq!(f.not_kept(FindingKind::NotMapped), 61);
        assert_eq!(f.misuses(), 161);
        assert_eq!(f.kept.len(), KEPT_PER_KIND as usize);
        assert!(f.kept.iter().all(|x| x.lines == [3]));
    }

    /// debug.c's hash holds a buffer mapped twice at one address (no IOMMU) twice: two unmaps
    /// end both, a third is a double unmap.
    #[test]
    fn two_maps_at_one_address_take_two_unmaps() {
        let t = format!(
            "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=\n\
             {H} dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=\n\
             {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n\
             {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n"
        );
        assert_eq!(kinds(&t), vec![]);
        let third =
            format!("{t}{H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n");
        assert_eq!(kinds(&third), vec![(FindingKind::DoubleUnmap, vec![4, 5])]);
    }

    /// A trace is a window on a running driver: what is live at its end is reported as such,
    /// and as a leak, a misuse, only when the window is said to be the driver's whole life.
    #[test]
    fn what_is_live_at_the_end_is_a_leak_only_when_strict() {
        let t = format!(
            "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=\n\
             {H} dma_alloc: dev dir=BIDIRECTIONAL dma_addr=c000 size=8192 virt_addr=0 flags=GFP_KERNEL attrs=\n"
        );
        let trace = parse("t.txt", &t).unwrap();
        let of = |strict| -> Vec<(FindingKind, bool)> {
            let f = check(&trace, strict);
            f.kept.iter().map(|f| (f.kind, f.kind.fails())).collect()
        };
        assert_eq!(of(false), [(FindingKind::LiveAtEnd, false); 2]);
        assert_eq!(of(true), [(FindingKind::Leak, true); 2]);
    }

    /// A map traced at DMA_MAPPING_ERROR failed, and debug.c ignores it: it is no leak, and
    /// an unmap of that address is of nothing mapped.
    #[test]
    fn a_failed_map_is_no_mapping() {
        let t = format!(
            "{H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=ffffffffffffffff size=64 phys_addr=2000 attrs=\n"
        );
        assert_eq!(kinds(&t), vec![]);
        let unmap = format!(
            "{t}{H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=ffffffffffffffff size=64 attrs=\n"
        );
        assert_eq!(kinds(&unmap), vec![(FindingKind::NotMapped, vec![2])]);
    }

    /// Only the last GONE_WINDOW unmaps are kept: a second unmap within them is a double
    /// unmap, one further back is reported as not mapped.
    #[test]
    fn a_double_unmap_is_named_within_the_window_only() {
        let mut t = String::new();
        for i in 0..=GONE_WINDOW {
            let a = 0x10000 + i * 0x1000;
            t.push_str(&format!(
                "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr={a:x} size=64 phys_addr={a:x} attrs=\n\
                 {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr={a:x} size=64 attrs=\n"
            ));
        }
        let again = |a: usize| {
            format!("{t}{H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr={a:x} size=64 attrs=\n")
        };
        let last = 2 * (GONE_WINDOW + 1);
        assert_eq!(
            kinds(&again(0x10000 + GONE_WINDOW * 0x1000)),
            vec![(FindingKind::DoubleUnmap, vec![last, last + 1])]
        );
        assert_eq!(
            kinds(&again(0x11000)),
            vec![(FindingKind::DoubleUnmap, vec![4, last + 1])]
        );
        assert_eq!(
            kinds(&again(0x10000)),
            vec![(FindingKind::NotMapped, vec![last + 1])]
        );
    }

    #[test]
    fn each_check_names_its_lines() {
        let t = format!(
            "{H} dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=4096 phys_addr=80000000 attrs=\n\
             {H} dma_sync_single_for_device: dev dir=TO_DEVICE dma_addr=1f00 size=512\n\
             {H} dma_sync_single_for_cpu: dev dir=FROM_DEVICE dma_addr=1000 size=64\n\
             {H} dma_unmap_phys: dev dir=FROM_DEVICE dma_addr=1000 size=2048 attrs=\n\
             {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=4096 attrs=\n\
             {H} dma_unmap_phys: dev dir=TO_DEVICE dma_addr=9000 size=64 attrs=\n\
             {H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=5000 size=100 phys_addr=a0000000 attrs=\n\
             {H} dma_map_phys: dev dir=FROM_DEVICE dma_addr=6000 size=100 phys_addr=a0000020 attrs=\n\
             {H} dma_map_sg_err: dev dir=TO_DEVICE dma_addrs={{0x80000000}} err=-12 attrs=\n\
             {H} dma_alloc: dev dir=BIDIRECTIONAL dma_addr=c000 size=8192 virt_addr=0 flags=GFP_KERNEL attrs=\n"
        );
        assert_eq!(
            kinds(&t),
            vec![
                (FindingKind::SyncOutside, vec![1, 2]),
                (FindingKind::SyncDirection, vec![1, 3]),
                // And debug.c's second rule: for the CPU, memory the device only reads.
                (FindingKind::SyncDirection, vec![1, 3]),
                (FindingKind::SizeMismatch, vec![1, 4]),
                (FindingKind::DirectionMismatch, vec![1, 4]),
                (FindingKind::DoubleUnmap, vec![4, 5]),
                (FindingKind::NotMapped, vec![6]),
                (FindingKind::CachelineOverlap, vec![7, 8]),
                (FindingKind::MapError, vec![9]),
                (FindingKind::Leak, vec![7]),
                (FindingKind::Leak, vec![8]),
                (FindingKind::Leak, vec![10]),
            ]
        );
    }
}
