//! The checks CONFIG_DMA_API_DEBUG makes, made offline on a trace: each device's mappings as
//! the kernel had them, every unmap, sync and free held against them.
//!
//! Kernel counterpart: kernel/dma/debug.c — `check_unmap()` (an address not mapped, a size or
//! direction differing from the map's, a double unmap), `check_sync()` (a sync outside the
//! mapping, or in a direction the mapping forbids), `debug_dma_free_coherent()`, the leak report
//! of `dma_debug_device_change()`, and the active-cacheline tracking that warns of two live
//! mappings sharing a cache line (`active_cacheline_insert()`: each entry is tracked by the
//! cache line its physical address starts in, across all devices; only mappings the device may
//! write, so not `DMA_TO_DEVICE`; no warning for a map with `DMA_ATTR_SKIP_CPU_SYNC`).
//!
//! What it models: mappings keyed as debug.c keys them — a single mapping by device and DMA
//! address, a scatter-gather list by device and the physical addresses `dma_unmap_sg` logs, a
//! coherent allocation by device and DMA address. A trace sees only what happened after it
//! began, so an unmap of something never mapped is reported as possibly mapped before the
//! trace started, and a list cut at 128 entries is kept but its missing entries are not checked.
//! Cache lines are `L1_CACHE_BYTES` = 64 bytes, the most common value; a different line size
//! changes only the overlap finding. Coherent allocations, which debug.c tracks too, are left
//! out of it: their trace events give no physical address.
//!
//! Invariants: each finding names its device and the trace lines involved (the map's line first
//! where there is one); the findings come in the order of the lines that reveal them, and the
//! leaks last, in the order the leaked mappings were made.

use super::{Event, Record, Trace};
use crate::types::DmaDirection;
use std::collections::BTreeMap;

/// debug.c's cache-line size (`L1_CACHE_SHIFT` of the commonest configurations).
const CACHE_LINE: u64 = 64;

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
    /// A sync in a direction the mapping does not allow.
    SyncDirection,
    /// A mapping the device may write whose entry starts in the cache line another live one's
    /// does.
    CachelineOverlap,
    /// A `dma_map_sg_err` event: the map failed.
    MapError,
    /// A mapping still live when the trace ends.
    Leak,
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
            FindingKind::MapError => "map-error",
            FindingKind::Leak => "leak",
        }
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

/// A live mapping.
#[derive(Clone, Debug)]
struct Live {
    line: usize,
    dir: DmaDirection,
    /// (DMA address, size) of each segment (one for a single mapping).
    segments: Vec<(u64, u64)>,
    /// Physical ranges, where the trace gives them.
    phys: Vec<(u64, u64)>,
    truncated: bool,
}

#[derive(Default)]
struct Device {
    /// Single mappings by DMA address.
    single: BTreeMap<u64, Live>,
    /// Scatter-gather lists by their physical addresses.
    sg: BTreeMap<Vec<u64>, Live>,
    /// Coherent allocations by DMA address: (line, size).
    coherent: BTreeMap<u64, (usize, u64)>,
    /// Where each unmapped DMA address or list was unmapped, for a second unmap.
    gone_single: BTreeMap<u64, usize>,
    gone_sg: BTreeMap<Vec<u64>, usize>,
}

/// Every finding of `trace`.
pub fn check(trace: &Trace) -> Vec<Finding> {
    let mut c = Checker::default();
    for r in &trace.records {
        c.push(r);
    }
    c.finish()
}

/// The checks made as a trace is read, record by record, holding only what is live (and the
/// addresses last unmapped, for a second unmap).
#[derive(Default)]
pub struct Checker {
    devices: BTreeMap<String, Device>,
    active: ActiveLines,
    out: Vec<Finding>,
}

impl Checker {
    /// Check one record in trace order.
    pub fn push(&mut self, r: &Record) {
        if r.device.is_empty() {
            return;
        }
        let Checker {
            devices,
            active,
            out,
        } = self;
        if !devices.contains_key(&r.device) {
            devices.insert(r.device.clone(), Device::default());
        }
        let d = devices.get_mut(&r.device).expect("inserted above");
        let mut find = |kind, lines: Vec<usize>, message: String| {
            out.push(Finding {
                kind,
                device: r.device.clone(),
                lines,
                message,
            })
        };
        match &r.event {
            Event::Map {
                dir,
                dma_addr,
                size,
                phys_addr,
                ..
            } => {
                let live = Live {
                    line: r.line,
                    dir: *dir,
                    segments: vec![(*dma_addr, *size)],
                    phys: phys_addr.map(|p| (p, *size)).into_iter().collect(),
                    truncated: false,
                };
                active.insert(&live, r, &mut find);
                d.gone_single.remove(dma_addr);
                if let Some(old) = d.single.insert(*dma_addr, live) {
                    active.remove(&old);
                }
            }
            Event::MapSg {
                dir,
                dma_addrs,
                sizes,
                phys_addrs,
                truncated,
                ..
            } => {
                let live = Live {
                    line: r.line,
                    dir: *dir,
                    segments: dma_addrs
                        .iter()
                        .copied()
                        .zip(sizes.iter().copied())
                        .collect(),
                    phys: phys_addrs
                        .iter()
                        .copied()
                        .zip(sizes.iter().copied())
                        .collect(),
                    truncated: *truncated,
                };
                active.insert(&live, r, &mut find);
                d.gone_sg.remove(phys_addrs);
                if let Some(old) = d.sg.insert(phys_addrs.clone(), live) {
                    active.remove(&old);
                }
            }
            Event::MapSgErr { err, .. } => find(
                FindingKind::MapError,
                vec![r.line],
                format!("dma_map_sg failed with {err}"),
            ),
            Event::Unmap {
                dir,
                dma_addr,
                size,
                ..
            } => match d.single.remove(dma_addr) {
                Some(m) => {
                    active.remove(&m);
                    let mapped = m.segments[0].1;
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
                    d.gone_single.insert(*dma_addr, r.line);
                }
                None => not_mapped(d.gone_single.get(dma_addr), r, &mut find, || {
                    format!("unmap of {dma_addr:#x}")
                }),
            },
            Event::UnmapSg { dir, phys_addrs } => match d.sg.remove(phys_addrs) {
                Some(m) => {
                    active.remove(&m);
                    if m.dir != *dir {
                        find(
                            FindingKind::DirectionMismatch,
                            vec![m.line, r.line],
                            format!("unmap_sg {}, mapped {}", dir.name(), m.dir.name()),
                        );
                    }
                    d.gone_sg.insert(phys_addrs.clone(), r.line);
                }
                None => not_mapped(d.gone_sg.get(phys_addrs), r, &mut find, || {
                    format!(
                        "unmap_sg of a list of {} entries at {:#x}",
                        phys_addrs.len(),
                        phys_addrs.first().copied().unwrap_or(0)
                    )
                }),
            },
            Event::SyncSingle {
                dir,
                dma_addr,
                size,
                ..
            } => sync(d, r, *dir, &[(*dma_addr, *size)], &mut find),
            Event::SyncSg {
                dir,
                dma_addrs,
                sizes,
                ..
            } => {
                let segs: Vec<(u64, u64)> = dma_addrs
                    .iter()
                    .copied()
                    .zip(sizes.iter().copied())
                    .filter(|s| s.1 > 0)
                    .collect();
                sync(d, r, *dir, &segs, &mut find);
            }
            Event::Alloc { dma_addr, size, .. } => {
                d.coherent.insert(*dma_addr, (r.line, *size));
            }
            Event::Free { dma_addr, size, .. } => match d.coherent.remove(dma_addr) {
                Some((line, s)) if s != *size => find(
                    FindingKind::SizeMismatch,
                    vec![line, r.line],
                    format!("free of {size} bytes at {dma_addr:#x}, allocated as {s}"),
                ),
                Some(_) => {}
                None => find(
                    FindingKind::NotMapped,
                    vec![r.line],
                    format!(
                        "free of {dma_addr:#x}, not allocated in this trace (allocated before it began?)"
                    ),
                ),
            },
            Event::AllocErr { .. }
            | Event::IommuMap { .. }
            | Event::IommuUnmap { .. }
            | Event::SwiotlbBounced { .. } => {}
        }
    }

    /// The findings, once the trace has ended: those made along the way, then what is still
    /// live, in the order it was made.
    pub fn finish(self) -> Vec<Finding> {
        let Checker {
            devices, mut out, ..
        } = self;
        let mut leaks = Vec::new();
        for (name, d) in &devices {
            for m in d.single.values().chain(d.sg.values()) {
                let (addr, size) = m.segments.first().copied().unwrap_or((0, 0));
                let n = m.segments.len();
                let entries = if n == 1 {
                    "1 entry".to_string()
                } else {
                    format!("{n} entries")
                };
                let cut = if m.truncated { ", list truncated" } else { "" };
                leaks.push((
                    m.line,
                    name.to_string(),
                    format!("mapping of {size} bytes at {addr:#x} ({entries}{cut}) still live at the end of the trace"),
                ));
            }
            for (addr, (line, size)) in &d.coherent {
                leaks.push((
                *line,
                name.to_string(),
                format!("coherent allocation of {size} bytes at {addr:#x} not freed by the end of the trace"),
            ));
            }
        }
        leaks.sort();
        out.extend(leaks.into_iter().map(|(line, device, message)| Finding {
            kind: FindingKind::Leak,
            device,
            lines: vec![line],
            message,
        }));
        out
    }
}

/// An unmap of something not live: a second unmap if this trace saw it go, else possibly
/// mapped before the trace began.
fn not_mapped(
    gone: Option<&usize>,
    r: &Record,
    find: &mut impl FnMut(FindingKind, Vec<usize>, String),
    what: impl FnOnce() -> String,
) {
    match gone {
        Some(&line) => find(
            FindingKind::DoubleUnmap,
            vec![line, r.line],
            format!("{}: already unmapped", what()),
        ),
        None => find(
            FindingKind::NotMapped,
            vec![r.line],
            format!(
                "{}: not mapped in this trace (mapped before it began?)",
                what()
            ),
        ),
    }
}

/// debug.c's `check_sync()` for each segment: inside one live mapping, in a direction it allows
/// (its own, or any when it is bidirectional).
fn sync(
    d: &Device,
    r: &Record,
    dir: DmaDirection,
    segs: &[(u64, u64)],
    find: &mut impl FnMut(FindingKind, Vec<usize>, String),
) {
    for &(addr, size) in segs {
        let end = addr.saturating_add(size);
        let holder = d.single.values().chain(d.sg.values()).find_map(|m| {
            m.segments
                .iter()
                .find(|&&(a, s)| a <= addr && addr < a.saturating_add(s))
                .map(|&(a, s)| (m, a.saturating_add(s)))
        });
        match holder {
            None => {
                find(
                    FindingKind::NotMapped,
                    vec![r.line],
                    format!(
                        "sync of {size} bytes at {addr:#x}: not mapped in this trace (mapped before it began?)"
                    ),
                );
            }
            Some((m, seg_end)) => {
                if end > seg_end {
                    find(
                        FindingKind::SyncOutside,
                        vec![m.line, r.line],
                        format!(
                            "sync of {size} bytes at {addr:#x} ends {:#x} past its mapping",
                            end - seg_end
                        ),
                    );
                }
                if m.dir != DmaDirection::Bidirectional && m.dir != dir {
                    find(
                        FindingKind::SyncDirection,
                        vec![m.line, r.line],
                        format!("sync {} of a mapping made {}", dir.name(), m.dir.name()),
                    );
                }
            }
        }
    }
}

/// debug.c's active cache lines: the line each entry of a live mapping the device may write
/// starts in (`to_cacheline_number()`), across all devices, with the trace line of each mapping
/// holding it.
#[derive(Default)]
struct ActiveLines(BTreeMap<u64, Vec<usize>>);

impl ActiveLines {
    /// `active_cacheline_insert()` of every entry of `live`: an entry whose line is already held
    /// is an overlap (reported once per mapping), unless the map skips the CPU sync.
    fn insert(
        &mut self,
        live: &Live,
        r: &Record,
        find: &mut impl FnMut(FindingKind, Vec<usize>, String),
    ) {
        // "If the device is not writing memory then we don't have any concerns about the cpu
        // consuming stale data" (debug.c): TO_DEVICE mappings are not tracked.
        if live.dir == DmaDirection::ToDevice {
            return;
        }
        let skip_sync = r.attrs.iter().any(|a| a == "SKIP_CPU_SYNC");
        let mut reported = false;
        for &(phys, _) in &live.phys {
            let holders = self.0.entry(phys / CACHE_LINE).or_default();
            if let Some(&first) = holders.first()
                && !skip_sync
                && !reported
            {
                reported = true;
                find(
                    FindingKind::CachelineOverlap,
                    vec![first, r.line],
                    format!(
                        "the entry at {phys:#x} starts in a cache line a live mapping's entry starts in"
                    ),
                );
            }
            holders.push(live.line);
        }
    }

    /// `active_cacheline_remove()` of every entry of `live`.
    fn remove(&mut self, live: &Live) {
        if live.dir == DmaDirection::ToDevice {
            return;
        }
        for &(phys, _) in &live.phys {
            let cln = phys / CACHE_LINE;
            if let Some(holders) = self.0.get_mut(&cln) {
                if let Some(i) = holders.iter().position(|&l| l == live.line) {
                    holders.swap_remove(i);
                }
                if holders.is_empty() {
                    self.0.remove(&cln);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse;

    fn kinds(text: &str) -> Vec<(FindingKind, Vec<usize>)> {
        check(&parse("t.txt", text).unwrap())
            .into_iter()
            .map(|f| (f.kind, f.lines))
            .collect()
    }

    const H: &str = "app-1 [000] 1.0:";

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
