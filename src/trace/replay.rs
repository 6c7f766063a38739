//! A traced driver's DMA API calls rebuilt as calls the model can make again: each unmap and
//! sync paired with the map it belongs to, per device.
//!
//! Kernel counterpart: none — this is the bookkeeping kernel/dma/debug.c keeps (its hash of
//! live mappings by device and DMA address), used to turn a trace back into calls.
//!
//! What it rebuilds: `dma_map_phys`/`dma_map_page` and their unmap, paired by device and DMA
//! address; `dma_map_sg` and `dma_unmap_sg`, paired by device and the list's physical addresses
//! (the unmap prints no DMA address); syncs of a single mapping, paired by the mapping that
//! holds the synced range (a driver may sync part of a mapping, or one entry of a list), and
//! syncs of a list, by its first DMA address. The model maps again at its own addresses, so a
//! later call names the mapping by [`MapId`], never by the traced address.
//!
//! Coherent allocations (`dma_alloc*`) and their frees are rebuilt too, paired by DMA address,
//! for the replay to count (the model does not time them). A list the trace cut at 128 entries
//! is made whole from its `dma_unmap_sg` where a first read found one ([`Rebuilder::completing`]).
//!
//! What it cannot rebuild, and says so ([`Unresolved`]): an unmap, sync or free whose map is not
//! in the trace (lost before it started, or a misuse `trace::checks` names), a map whose range
//! cannot exist (zero bytes, or past the top of the address space), a resource (MMIO) mapping,
//! and the maps and allocations the traced kernel refused.
//!
//! Invariants: every call of the trace is either in [`DeviceCalls::calls`] or named in
//! [`DeviceCalls::unresolved`] (a test checks the counts); a [`MapId`] is used only between
//! the map that made it and the unmap that ends it.

use super::{AllocKind, Event, Record, Trace};
use crate::types::{DmaAttrs, DmaDirection};
use std::collections::{BTreeMap, HashMap};

/// Lists the trace cut at 128 entries, by their map's line: the physical addresses of the
/// entries past the printed ones, as a later `dma_unmap_sg` listed them, and the length each
/// is taken to have (the last printed entry's).
pub type Wholes = HashMap<usize, (Vec<u64>, u64)>;

/// A mapping the replay made, numbered per device in map order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapId(pub usize);

/// One call to make again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    MapPage {
        map: MapId,
        phys: u64,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    },
    UnmapPage {
        map: MapId,
        size: u64,
        dir: DmaDirection,
        attrs: DmaAttrs,
    },
    /// The list's entries as (physical address, length).
    MapSg {
        map: MapId,
        entries: Vec<(u64, u64)>,
        dir: DmaDirection,
        attrs: DmaAttrs,
    },
    UnmapSg {
        map: MapId,
        dir: DmaDirection,
        attrs: DmaAttrs,
    },
    /// A sync of `size` bytes at `offset` bytes into the mapping (a list's entries counted
    /// back to back: the model's list may merge them differently).
    SyncSingle {
        map: MapId,
        offset: u64,
        size: u64,
        dir: DmaDirection,
        for_device: bool,
    },
    SyncSg {
        map: MapId,
        dir: DmaDirection,
        for_device: bool,
    },
    /// A coherent allocation (`dma_alloc*`) and its free, paired by DMA address: rebuilt and
    /// counted, but not timed (the model places coherent memory; it does not price it).
    Alloc {
        size: u64,
        what: AllocKind,
    },
    Free {
        size: u64,
        what: AllocKind,
    },
}

impl Call {
    /// The DMA API function the call is, as the run's table names it.
    pub fn name(&self) -> &'static str {
        match self {
            Call::MapPage { .. } => "dma_map_page",
            Call::UnmapPage { .. } => "dma_unmap_page",
            Call::MapSg { .. } => "dma_map_sg",
            Call::UnmapSg { .. } => "dma_unmap_sg",
            Call::SyncSingle {
                for_device: false, ..
            } => "dma_sync_single_for_cpu",
            Call::SyncSingle {
                for_device: true, ..
            } => "dma_sync_single_for_device",
            Call::SyncSg {
                for_device: false, ..
            } => "dma_sync_sg_for_cpu",
            Call::SyncSg {
                for_device: true, ..
            } => "dma_sync_sg_for_device",
            Call::Alloc { what, .. } => match what {
                AllocKind::Coherent => "dma_alloc",
                AllocKind::Pages => "dma_alloc_pages",
                AllocKind::Sgt => "dma_alloc_sgt",
            },
            Call::Free { what, .. } => match what {
                AllocKind::Coherent => "dma_free",
                AllocKind::Pages => "dma_free_pages",
                AllocKind::Sgt => "dma_free_sgt",
            },
        }
    }
}

/// A call in the trace, where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    pub line: usize,
    pub time_ns: Option<u64>,
    pub call: Call,
    /// The bytes the call covers as the trace gives them.
    pub bytes: u64,
}

/// A call of the trace the replay leaves out, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unresolved {
    pub line: usize,
    pub event: &'static str,
    pub why: String,
}

/// One device's calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCalls {
    pub name: String,
    /// The calls, in trace order ([`rebuild`]; a stream through [`Rebuilder`] hands each on
    /// instead and counts them in `made` and `bytes`).
    pub calls: Vec<Traced>,
    /// Calls rebuilt, and the bytes they cover.
    pub made: u64,
    pub bytes: u64,
    /// The first [`KEPT_UNRESOLVED`] calls left out; `unresolved_count` counts them all.
    pub unresolved: Vec<Unresolved>,
    pub unresolved_count: u64,
    /// Coherent allocations and frees rebuilt (in `calls`, not timed).
    pub allocs: u64,
    /// Lists the trace cut at 128 entries: replayed with the entries it printed, or `completed`
    /// from their unmap's whole list.
    pub truncated: u64,
    pub completed: u64,
    /// The first and last timestamps of the device's calls, when the trace has them.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
}

/// What a live mapping covers in the traced DMA address space: per entry, (start, length).
#[derive(Clone, Debug)]
struct Live {
    sg: bool,
    entries: Vec<(u64, u64)>,
    phys: Vec<u64>,
    /// The map's line, and whether the trace cut its list.
    line: usize,
    truncated: bool,
    /// The bytes the replayed map covers (a completed list's included).
    bytes: u64,
    /// A list's last printed entry's length.
    last_len: u64,
}

#[derive(Default)]
struct DeviceState {
    out: DeviceCalls,
    next: usize,
    live: HashMap<usize, Live>,
    /// Traced DMA address of each live entry → (map number, entry index, its length).
    /// Several live mappings may share an address (a buffer mapped twice without an IOMMU):
    /// oldest first, as debug.c's hash bucket finds the first that matches.
    by_addr: BTreeMap<u64, Vec<(usize, usize, u64)>>,
    /// First physical address of each live list → its map numbers, oldest first.
    sg_by_phys: HashMap<u64, Vec<usize>>,
    /// Live coherent allocations: DMA address → size.
    coherent: HashMap<u64, u64>,
}

impl DeviceState {
    fn add(&mut self, r: &Record, call: Call, bytes: u64) -> Option<Traced> {
        self.out.made += 1;
        self.out.bytes = self.out.bytes.saturating_add(bytes);
        Some(Traced {
            line: r.line,
            time_ns: r.time_ns,
            call,
            bytes,
        })
    }

    fn unresolved(
        &mut self,
        r: &Record,
        event: &'static str,
        why: impl Into<String>,
    ) -> Option<Traced> {
        self.out.unresolved_count += 1;
        if self.out.unresolved.len() < KEPT_UNRESOLVED {
            self.out.unresolved.push(Unresolved {
                line: r.line,
                event,
                why: why.into(),
            });
        }
        None
    }

    fn new_map(
        &mut self,
        r: &Record,
        sg: bool,
        entries: Vec<(u64, u64)>,
        phys: Vec<u64>,
        truncated: bool,
    ) -> MapId {
        let n = self.next;
        self.next += 1;
        for (i, &(a, len)) in entries.iter().enumerate() {
            self.by_addr.entry(a).or_default().push((n, i, len));
        }
        if sg && let Some(&p) = phys.first() {
            self.sg_by_phys.entry(p).or_default().push(n);
        }
        self.live.insert(
            n,
            Live {
                sg,
                entries,
                phys,
                line: r.line,
                truncated,
                bytes: 0,
                last_len: 0,
            },
        );
        MapId(n)
    }

    fn end_map(&mut self, n: usize) -> Option<Live> {
        let l = self.live.remove(&n)?;
        for &(a, _) in &l.entries {
            if let Some(v) = self.by_addr.get_mut(&a) {
                v.retain(|e| e.0 != n);
                if v.is_empty() {
                    self.by_addr.remove(&a);
                }
            }
        }
        if l.sg
            && let Some(p) = l.phys.first()
            && let Some(v) = self.sg_by_phys.get_mut(p)
        {
            v.retain(|&m| m != n);
            if v.is_empty() {
                self.sg_by_phys.remove(p);
            }
        }
        Some(l)
    }

    /// The live mapping holding `[addr, addr + size)` in one of its entries: the mapping, and
    /// the offset into it with its entries counted back to back.
    fn holding(&self, addr: u64, size: u64) -> Option<(usize, u64)> {
        // The nearest starts first; a short mapping inside a longer one does not hide it (a
        // bounded look: mappings nested deeper than this are not searched).
        let (n, i, off) = self
            .by_addr
            .range(..=addr)
            .rev()
            .take(HOLDING_LOOK)
            .flat_map(|(&start, v)| v.iter().map(move |e| (start, *e)))
            .find(|&(start, (_, _, len))| (addr - start).saturating_add(size) <= len)
            .map(|(start, (n, i, _))| (n, i, addr - start))?;
        let before = saturating_sum(self.live.get(&n)?.entries[..i].iter().map(|e| e.1));
        Some((n, before.saturating_add(off)))
    }

    /// The oldest live mapping whose entry `entry` starts at `addr` and that is a list or not.
    fn starting_at(&self, addr: u64, entry: usize, sg: bool) -> Option<usize> {
        self.by_addr.get(&addr)?.iter().find_map(|&(n, i, _)| {
            (i == entry && self.live.get(&n).is_some_and(|l| l.sg == sg)).then_some(n)
        })
    }
}

/// How many mapping starts below an address a sync's lookup passes before giving up.
const HOLDING_LOOK: usize = 64;

/// Why a map whose range runs past the top of the 64-bit physical address space is not made:
/// no kernel could have made it, so the line was damaged.
const WRAPS: &str = "its range runs past the end of the physical address space";

/// A sum of sizes from a trace, which may name any 64-bit values.
fn saturating_sum(xs: impl Iterator<Item = u64>) -> u64 {
    xs.fold(0, u64::saturating_add)
}

/// The attributes a trace line names, as the model knows them; names it does not model are
/// kept in the trace and play no part here.
pub fn attrs_of(names: &[String]) -> DmaAttrs {
    if names.iter().any(|a| a == "SKIP_CPU_SYNC") {
        DmaAttrs::SKIP_CPU_SYNC
    } else {
        DmaAttrs::NONE
    }
}

/// How many of a device's left-out calls are kept to be named (the rest are counted).
pub const KEPT_UNRESOLVED: usize = 100;

/// Rebuild every device's calls from a trace, in trace order.
pub fn rebuild(trace: &Trace) -> Vec<DeviceCalls> {
    let mut b = Rebuilder::default();
    let mut calls: Vec<Vec<Traced>> = Vec::new();
    for r in &trace.records {
        if let Some((i, t)) = b.push(r) {
            calls.resize_with(calls.len().max(i + 1), Vec::new);
            calls[i].push(t);
        }
    }
    let mut out = b.finish();
    for (d, c) in out.iter_mut().zip(calls) {
        d.calls = c;
    }
    out
}

/// The pairing as a stream: each record in, the call it is (and its device's number, in the
/// order devices first appear) out, holding only what is live.
#[derive(Default)]
pub struct Rebuilder {
    index: HashMap<String, usize>,
    devs: Vec<DeviceState>,
    /// Lists the trace cut at 128 entries, by their map's line, with every entry's physical
    /// address as a later `dma_unmap_sg` listed them.
    wholes: Wholes,
    /// The device of the last record.
    last: Option<usize>,
}

impl Rebuilder {
    /// A rebuilder that completes the cut lists a first read found whole ([`Rebuilder::wholes`]).
    pub fn completing(wholes: Wholes) -> Rebuilder {
        Rebuilder {
            wholes,
            ..Rebuilder::default()
        }
    }

    /// The cut lists found whole so far, for a second read ([`Rebuilder::completing`]).
    pub fn wholes(&self) -> &Wholes {
        &self.wholes
    }

    /// The call `r` is, to be made now by device number `.0`; `None` for a record that is no
    /// call to make (counted or named in its device's summary).
    pub fn push(&mut self, r: &Record) -> Option<(usize, Traced)> {
        if r.device.is_empty() || matches!(r.event, Event::SwiotlbBounced { .. }) {
            return None;
        }
        // Most records are the same device's as the one before: no hash for those.
        let last = self.last.filter(|&i| self.devs[i].out.name == r.device);
        let i = match last.or_else(|| self.index.get(&r.device).copied()) {
            Some(i) => i,
            None => {
                self.index.insert(r.device.clone(), self.devs.len());
                self.devs.push(DeviceState {
                    out: DeviceCalls {
                        name: r.device.clone(),
                        ..DeviceCalls::default()
                    },
                    ..DeviceState::default()
                });
                self.devs.len() - 1
            }
        };
        self.last = Some(i);
        let d = &mut self.devs[i];
        if let Some(t) = r.time_ns {
            d.out.first_ns.get_or_insert(t);
            d.out.last_ns = Some(t);
        }
        step(d, r, &mut self.wholes).map(|t| (i, t))
    }

    /// Each device's summary, in the order devices first appeared.
    pub fn finish(self) -> Vec<DeviceCalls> {
        self.devs.into_iter().map(|d| d.out).collect()
    }
}

fn step(d: &mut DeviceState, r: &Record, wholes: &mut Wholes) -> Option<Traced> {
    let attrs = attrs_of(&r.attrs);
    match &r.event {
        Event::Map {
            dir,
            dma_addr,
            size,
            phys_addr,
            resource,
        } => {
            let Some(phys) = phys_addr else {
                return d.unresolved(r, "dma_map_phys", "the line gives no physical address");
            };
            if *resource {
                return d.unresolved(
                    r,
                    "dma_map_resource",
                    "a resource mapping (MMIO) is not replayed",
                );
            }
            if *size == 0 {
                return d.unresolved(r, "dma_map_phys", "a map of zero bytes");
            }
            if phys.checked_add(*size).is_none() {
                return d.unresolved(r, "dma_map_phys", WRAPS);
            }
            let map = d.new_map(r, false, vec![(*dma_addr, *size)], vec![*phys], false);
            let call = Call::MapPage {
                map,
                phys: *phys,
                size: *size,
                dir: *dir,
                attrs,
            };
            d.add(r, call, *size)
        }
        Event::Unmap {
            dir,
            dma_addr,
            size,
            resource,
        } => {
            if *resource {
                return d.unresolved(
                    r,
                    "dma_unmap_resource",
                    "a resource mapping (MMIO) is not replayed",
                );
            }
            let found = d.starting_at(*dma_addr, 0, false);
            let Some(n) = found else {
                return d.unresolved(
                    r,
                    "dma_unmap_phys",
                    format!("no live map at DMA address {dma_addr:#x} in the trace"),
                );
            };
            d.end_map(n);
            let call = Call::UnmapPage {
                map: MapId(n),
                size: *size,
                dir: *dir,
                attrs,
            };
            d.add(r, call, *size)
        }
        Event::MapSg {
            dir,
            dma_addrs,
            sizes,
            phys_addrs,
            truncated,
            ..
        } => {
            if phys_addrs.is_empty() {
                return d.unresolved(r, "dma_map_sg", "the list has no entries");
            }
            if *truncated {
                d.out.truncated += 1;
            }
            // The physical entries are the list as the driver built it; the DMA ones may be
            // fewer (an IOMMU merges). Each physical entry's length is its DMA segment's when
            // they pair one to one; otherwise the mapped bytes are spread over the entries as
            // the segments give them.
            let total = saturating_sum(sizes.iter().copied());
            let n = phys_addrs.len();
            let lens: Vec<u64> = if sizes.len() == n {
                sizes.clone()
            } else {
                let each = total / n as u64;
                let mut v = vec![each; n];
                if let Some(last) = v.last_mut() {
                    *last += total - each * n as u64; // below n: cannot overflow
                }
                v
            };
            if lens.contains(&0) {
                return d.unresolved(r, "dma_map_sg", "an entry of zero bytes");
            }
            if phys_addrs
                .iter()
                .zip(&lens)
                .any(|(p, l)| p.checked_add(*l).is_none())
            {
                return d.unresolved(r, "dma_map_sg", WRAPS);
            }
            let mut entries: Vec<(u64, u64)> = phys_addrs
                .iter()
                .copied()
                .zip(lens.iter().copied())
                .collect();
            // A cut list whose unmap (read earlier, on the first pass) listed it whole: the
            // rest of its entries, each as long as the last printed one.
            if *truncated
                && let Some((tail, len)) = wholes.remove(&r.line)
                && tail.iter().all(|p| p.checked_add(len).is_some())
            {
                entries.extend(tail.iter().map(|&p| (p, len)));
                d.out.completed += 1;
            }
            let total = saturating_sum(entries.iter().map(|e| e.1));
            let dma_entries: Vec<(u64, u64)> = dma_addrs
                .iter()
                .copied()
                .zip(sizes.iter().copied())
                .collect();
            let map = d.new_map(r, true, dma_entries, phys_addrs.clone(), *truncated);
            if let Some(l) = d.live.get_mut(&map.0) {
                l.bytes = total;
                l.last_len = lens.last().copied().unwrap_or(0);
            }
            let call = Call::MapSg {
                map,
                entries,
                dir: *dir,
                attrs,
            };
            d.add(r, call, total)
        }
        Event::UnmapSg { dir, phys_addrs } => {
            let found = phys_addrs.first().and_then(|p| {
                d.sg_by_phys.get(p).and_then(|v| {
                    // The same list, or a cut one whose printed entries begin this whole one.
                    v.iter().copied().find(|n| {
                        d.live.get(n).is_some_and(|l| {
                            l.phys == *phys_addrs
                                || (l.truncated
                                    && phys_addrs.len() > l.phys.len()
                                    && phys_addrs[..l.phys.len()] == l.phys[..])
                        })
                    })
                })
            });
            let Some(n) = found else {
                return d.unresolved(
                    r,
                    "dma_unmap_sg",
                    "no live list with these physical addresses in the trace",
                );
            };
            let bytes = d.live.get(&n).map_or(0, |l| l.bytes);
            if let Some(l) = d.end_map(n)
                && l.truncated
                && phys_addrs.len() > l.phys.len()
            {
                wholes.insert(l.line, (phys_addrs[l.phys.len()..].to_vec(), l.last_len));
            }
            let call = Call::UnmapSg {
                map: MapId(n),
                dir: *dir,
                attrs,
            };
            d.add(r, call, bytes)
        }
        Event::SyncSingle {
            dir,
            dma_addr,
            size,
            for_device,
        } => {
            let event = if *for_device {
                "dma_sync_single_for_device"
            } else {
                "dma_sync_single_for_cpu"
            };
            let Some((n, offset)) = d.holding(*dma_addr, *size) else {
                return d.unresolved(
                    r,
                    event,
                    format!("no live mapping holds {dma_addr:#x}+{size:#x} in the trace"),
                );
            };
            let call = Call::SyncSingle {
                map: MapId(n),
                offset,
                size: *size,
                dir: *dir,
                for_device: *for_device,
            };
            d.add(r, call, *size)
        }
        Event::SyncSg {
            dir,
            dma_addrs,
            sizes,
            for_device,
        } => {
            let event = if *for_device {
                "dma_sync_sg_for_device"
            } else {
                "dma_sync_sg_for_cpu"
            };
            let found = dma_addrs.first().and_then(|a| d.starting_at(*a, 0, true));
            let Some(n) = found else {
                return d.unresolved(r, event, "no live list starts at this DMA address");
            };
            let call = Call::SyncSg {
                map: MapId(n),
                dir: *dir,
                for_device: *for_device,
            };
            d.add(r, call, saturating_sum(sizes.iter().copied()))
        }
        Event::Alloc {
            dma_addr,
            size,
            what,
            ..
        } => {
            // Recent kernels trace a failed allocation as one at DMA address 0.
            if *dma_addr == 0 {
                return d.unresolved(r, "dma_alloc", "an allocation the traced kernel refused");
            }
            d.out.allocs += 1;
            d.coherent.insert(*dma_addr, *size);
            let call = Call::Alloc {
                size: *size,
                what: *what,
            };
            d.add(r, call, *size)
        }
        Event::Free {
            dma_addr,
            size,
            what,
            ..
        } => {
            let event = Call::Free {
                size: 0,
                what: *what,
            }
            .name();
            if d.coherent.remove(dma_addr).is_none() {
                return d.unresolved(
                    r,
                    event,
                    format!("no live allocation at DMA address {dma_addr:#x} in the trace"),
                );
            }
            d.out.allocs += 1;
            let call = Call::Free {
                size: *size,
                what: *what,
            };
            d.add(r, call, *size)
        }
        Event::AllocErr { .. } => d.unresolved(
            r,
            "dma_alloc_sgt_err",
            "an allocation the traced kernel refused",
        ),
        Event::MapSgErr { .. } => {
            d.unresolved(r, "dma_map_sg_err", "a map the traced kernel refused")
        }
        Event::IommuMap { .. } | Event::IommuUnmap { .. } | Event::SwiotlbBounced { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rebuilt(text: &str) -> Vec<DeviceCalls> {
        rebuild(&crate::trace::parse("t.txt", text).unwrap())
    }

    const STREAM: &str = "\
 kworker-1 [000] ..... 10.000000: dma_map_phys: 0000:01:00.0 dir=FROM_DEVICE dma_addr=ffff0000 size=4096 phys_addr=80001000 attrs=
 kworker-1 [000] ..... 10.000010: dma_sync_single_for_cpu: 0000:01:00.0 dir=FROM_DEVICE dma_addr=ffff0100 size=64
 kworker-1 [000] ..... 10.000020: dma_unmap_phys: 0000:01:00.0 dir=FROM_DEVICE dma_addr=ffff0000 size=4096 attrs=SKIP_CPU_SYNC
";

    #[test]
    fn a_map_its_partial_sync_and_its_unmap_pair() {
        let d = rebuilt(STREAM);
        assert_eq!(d.len(), 1);
        let calls: Vec<&str> = d[0].calls.iter().map(|c| c.call.name()).collect();
        assert_eq!(
            calls,
            ["dma_map_page", "dma_sync_single_for_cpu", "dma_unmap_page"]
        );
        assert_eq!(
            d[0].calls[1].call,
            Call::SyncSingle {
                map: MapId(0),
                offset: 0x100,
                size: 64,
                dir: DmaDirection::FromDevice,
                for_device: false
            }
        );
        assert!(matches!(
            d[0].calls[2].call,
            Call::UnmapPage { map: MapId(0), attrs, .. } if attrs == DmaAttrs::SKIP_CPU_SYNC
        ));
        assert!(d[0].unresolved.is_empty());
    }

    /// A buffer mapped twice at one DMA address (no IOMMU): each unmap ends one of the two,
    /// oldest first, and nothing stays live; a sync inside a long mapping is found past a short
    /// one that starts nearer.
    #[test]
    fn mappings_sharing_an_address_pair_in_order_and_nested_ones_do_not_hide() {
        let h = "a-1 [000] 1.0:";
        let d = rebuilt(&format!(
            "{h} dma_map_phys: d dir=TO_DEVICE dma_addr=80002000 size=4096 phys_addr=80002000 attrs=\n\
             {h} dma_map_phys: d dir=FROM_DEVICE dma_addr=80002000 size=4096 phys_addr=80002000 attrs=\n\
             {h} dma_unmap_phys: d dir=TO_DEVICE dma_addr=80002000 size=4096 attrs=\n\
             {h} dma_unmap_phys: d dir=FROM_DEVICE dma_addr=80002000 size=4096 attrs=\n\
             {h} dma_map_phys: d dir=TO_DEVICE dma_addr=80000000 size=65536 phys_addr=80000000 attrs=\n\
             {h} dma_map_phys: d dir=TO_DEVICE dma_addr=80001000 size=256 phys_addr=80001000 attrs=\n\
             {h} dma_sync_single_for_device: d dir=TO_DEVICE dma_addr=80008000 size=4096\n"
        ));
        let maps: Vec<MapId> = d[0]
            .calls
            .iter()
            .filter_map(|t| match t.call {
                Call::UnmapPage { map, .. } => Some(map),
                Call::SyncSingle { map, offset, .. } => {
                    assert_eq!(offset, 0x8000);
                    Some(map)
                }
                _ => None,
            })
            .collect();
        assert_eq!(maps, [MapId(0), MapId(1), MapId(2)]);
        assert!(d[0].unresolved.is_empty());
    }

    /// A failed allocation, traced at DMA address 0, is named and not counted as live.
    #[test]
    fn a_failed_allocation_is_not_an_allocation() {
        let d = rebuilt(
            "a-1 [000] 1.0: dma_alloc: d dir=BIDIRECTIONAL dma_addr=0 size=4096 virt_addr=0000000000000000 flags=GFP_KERNEL attrs=\n",
        );
        assert!(d[0].calls.is_empty());
        assert_eq!(d[0].unresolved.len(), 1);
    }

    #[test]
    fn an_unmap_with_no_map_in_the_trace_is_named_not_replayed() {
        let lines: Vec<&str> = STREAM.lines().collect();
        let d = rebuilt(&format!("{}\n", lines[2]));
        assert!(d[0].calls.is_empty());
        assert_eq!(d[0].unresolved.len(), 1);
        assert_eq!(d[0].unresolved[0].line, 1);
        assert_eq!(d[0].unresolved[0].event, "dma_unmap_phys");
    }
}
