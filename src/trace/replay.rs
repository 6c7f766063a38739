//! A traced driver's DMA API calls rebuilt as calls the model can make again: each unmap and
//! sync paired with the map it belongs to, per device.
//!
//! Kernel counterpart: none — the pairing is kernel/dma/debug.c's, through the live table of
//! [`super::live`], turned back into calls.
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
//! is made whole from its `dma_unmap_sg` where a first read found one
//! ([`Table::completing`]).
//!
//! A sync or unmap of a mapping made before the trace began pairs, as any other, with the
//! mapping the live table inferred for it ([`Table::infer`]).
//!
//! What it cannot rebuild, and says so ([`Unresolved`]): an unmap, sync or free whose map is not
//! in the trace and was not inferred (a free, an unmap of a list no sync showed, a call after
//! an unmap of it: a misuse `trace::checks` names), a map whose range
//! cannot exist (zero bytes, or past the top of the address space), a resource (MMIO) mapping,
//! the calls on a mapping it did not make, and the maps and allocations the traced kernel
//! refused.
//!
//! Invariants: every call of the trace is either in [`DeviceCalls::calls`] or named in
//! [`DeviceCalls::unresolved`] (a test checks the counts); a [`MapId`] is used only between
//! the map that made it and the unmap that ends it.

use super::live::{Effect, Mapping, Step, Table};
use super::{AllocKind, Event, Record, Trace};
use crate::types::{DmaAttrs, DmaDirection};

pub use super::live::{MapId, Wholes};

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

/// A device's calls as they are rebuilt.
impl DeviceCalls {
    fn add(&mut self, r: &Record, call: Call, bytes: u64) -> Option<Traced> {
        self.made += 1;
        self.bytes = self.bytes.saturating_add(bytes);
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
        self.unresolved_count += 1;
        if self.unresolved.len() < KEPT_UNRESOLVED {
            self.unresolved.push(Unresolved {
                line: r.line,
                event,
                why: why.into(),
            });
        }
        None
    }
}

/// Why a map whose range runs past the top of the 64-bit physical address space is not made:
/// no kernel could have made it, so the line was damaged.
const WRAPS: &str = "its range runs past the end of the physical address space";

/// A sum of sizes from a trace, which may name any 64-bit values.
fn saturating_sum(xs: impl Iterator<Item = u64>) -> u64 {
    xs.fold(0, u64::saturating_add)
}

/// Whether the model can make mapping `m` again, and if not why: it needs its physical
/// entries, none of zero bytes or wrapping, and no MMIO.
fn replayable(m: &Mapping) -> Result<(), &'static str> {
    if m.sg {
        if m.phys.is_empty() {
            return Err("the list has no entries");
        }
        if m.phys.iter().any(|e| e.1 == 0) {
            return Err("an entry of zero bytes");
        }
    } else {
        if m.phys.is_empty() {
            return Err("the line gives no physical address");
        }
        if m.resource {
            return Err("a resource mapping (MMIO) is not replayed");
        }
        if m.phys[0].1 == 0 {
            return Err("a map of zero bytes");
        }
    }
    if m.phys.iter().any(|(p, l)| p.checked_add(*l).is_none()) {
        return Err(WRAPS);
    }
    Ok(())
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
    let mut table = Table::default();
    let mut b = Rebuilder::default();
    let mut calls: Vec<Vec<Traced>> = Vec::new();
    for r in &trace.records {
        let step = table.push(r);
        if let Some((i, t)) = b.push(r, &step, &table) {
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

/// The pairing as a stream: each record in, after the live table took it, the call it is (and
/// its device's number in the table) out.
#[derive(Default)]
pub struct Rebuilder {
    devs: Vec<DeviceCalls>,
}

impl Rebuilder {
    /// The call `r` is, to be made now by device number `.0`, given what it did to `table`
    /// (`step`, from [`Table::push`]); `None` for a record that is no call to make (counted or
    /// named in its device's summary).
    pub fn push(&mut self, r: &Record, step: &Step, table: &Table) -> Option<(usize, Traced)> {
        let dev = step.dev?;
        while self.devs.len() <= dev {
            let name = table.name(self.devs.len()).to_string();
            self.devs.push(DeviceCalls {
                name,
                ..DeviceCalls::default()
            });
        }
        let d = &mut self.devs[dev];
        if let Some(t) = r.time_ns {
            d.first_ns.get_or_insert(t);
            d.last_ns = Some(t);
        }
        let t = match &r.event {
            Event::Map { .. } | Event::MapSg { .. } => map(d, r, &step.effect, table, dev),
            Event::Unmap { .. } | Event::UnmapSg { .. } => unmap(d, r, &step.effect),
            Event::SyncSingle { .. } | Event::SyncSg { .. } => sync(d, r, table, dev),
            _ => coherent(d, r, &step.effect),
        };
        t.map(|t| (dev, t))
    }

    /// Each device's summary, in the order devices first appeared.
    pub fn finish(self) -> Vec<DeviceCalls> {
        self.devs
    }
}

fn map(
    d: &mut DeviceCalls,
    r: &Record,
    effect: &Effect,
    table: &Table,
    dev: usize,
) -> Option<Traced> {
    let event = match &r.event {
        Event::Map { resource: true, .. } => "dma_map_resource",
        Event::Map { .. } => "dma_map_phys",
        _ => "dma_map_sg",
    };
    let Effect::Mapped { id, .. } = effect else {
        return d.unresolved(r, event, "a map the traced kernel refused");
    };
    let m = table.mapping(dev, *id)?;
    if let Err(why) = replayable(m) {
        return d.unresolved(r, event, why);
    }
    let attrs = attrs_of(&r.attrs);
    if !m.sg {
        let (phys, size) = m.phys[0];
        let call = Call::MapPage {
            map: *id,
            phys,
            size,
            dir: m.dir,
            attrs,
        };
        return d.add(r, call, size);
    }
    if m.truncated {
        d.truncated += 1;
        d.completed += u64::from(m.completed);
    }
    let call = Call::MapSg {
        map: *id,
        entries: m.phys.clone(),
        dir: m.dir,
        attrs,
    };
    d.add(r, call, m.bytes())
}

fn unmap(d: &mut DeviceCalls, r: &Record, effect: &Effect) -> Option<Traced> {
    let attrs = attrs_of(&r.attrs);
    match (&r.event, effect) {
        (Event::Unmap { resource: true, .. }, _) => d.unresolved(
            r,
            "dma_unmap_resource",
            "a resource mapping (MMIO) is not replayed",
        ),
        (Event::Unmap { dma_addr, .. }, Effect::Unmatched) => d.unresolved(
            r,
            "dma_unmap_phys",
            format!("no live map at DMA address {dma_addr:#x} in the trace"),
        ),
        (Event::UnmapSg { .. }, Effect::Unmatched) => d.unresolved(
            r,
            "dma_unmap_sg",
            "no live list with these physical addresses in the trace",
        ),
        (e, Effect::Unmapped { id, mapping }) => {
            let single = matches!(e, Event::Unmap { .. });
            let event = if single {
                "dma_unmap_phys"
            } else {
                "dma_unmap_sg"
            };
            if replayable(mapping).is_err() {
                let why = format!("its map (line {}) was not replayed", mapping.line);
                return d.unresolved(r, event, why);
            }
            match e {
                Event::Unmap { dir, size, .. } => {
                    let call = Call::UnmapPage {
                        map: *id,
                        size: *size,
                        dir: *dir,
                        attrs,
                    };
                    d.add(r, call, *size)
                }
                Event::UnmapSg { dir, .. } => {
                    let call = Call::UnmapSg {
                        map: *id,
                        dir: *dir,
                        attrs,
                    };
                    d.add(r, call, mapping.bytes())
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn sync(d: &mut DeviceCalls, r: &Record, table: &Table, dev: usize) -> Option<Traced> {
    match &r.event {
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
            let hold = table.holding(dev, *dma_addr, *size).filter(|h| h.whole);
            let Some((h, m)) = hold.and_then(|h| Some((h, table.mapping(dev, h.id)?))) else {
                return d.unresolved(
                    r,
                    event,
                    format!("no live mapping holds {dma_addr:#x}+{size:#x} in the trace"),
                );
            };
            if let Err(why) = replayable(m) {
                return d.unresolved(r, event, format!("its map (line {}): {why}", m.line));
            }
            // The mapping's segments counted back to back: the model's list may merge them
            // differently.
            let before = saturating_sum(m.dma[..h.seg].iter().map(|e| e.1));
            let call = Call::SyncSingle {
                map: h.id,
                offset: before.saturating_add(dma_addr - h.start),
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
            let found = dma_addrs
                .first()
                .and_then(|a| table.sg_starting_at(dev, *a));
            let Some((id, m)) = found.and_then(|id| Some((id, table.mapping(dev, id)?))) else {
                return d.unresolved(r, event, "no live list starts at this DMA address");
            };
            if let Err(why) = replayable(m) {
                return d.unresolved(r, event, format!("its map (line {}): {why}", m.line));
            }
            let call = Call::SyncSg {
                map: id,
                dir: *dir,
                for_device: *for_device,
            };
            d.add(r, call, saturating_sum(sizes.iter().copied()))
        }
        _ => None,
    }
}

/// Coherent allocations and frees, and the refusals traced as their own events.
fn coherent(d: &mut DeviceCalls, r: &Record, effect: &Effect) -> Option<Traced> {
    match (&r.event, effect) {
        (Event::Alloc { size, what, .. }, Effect::Allocated) => {
            d.allocs += 1;
            let call = Call::Alloc {
                size: *size,
                what: *what,
            };
            d.add(r, call, *size)
        }
        (Event::Alloc { .. }, _) => {
            d.unresolved(r, "dma_alloc", "an allocation the traced kernel refused")
        }
        (Event::Free { size, what, .. }, Effect::Freed(_)) => {
            d.allocs += 1;
            let call = Call::Free {
                size: *size,
                what: *what,
            };
            d.add(r, call, *size)
        }
        (Event::Free { dma_addr, what, .. }, _) => {
            let event = Call::Free {
                size: 0,
                what: *what,
            }
            .name();
            d.unresolved(
                r,
                event,
                format!("no live allocation at DMA address {dma_addr:#x} in the trace"),
            )
        }
        (Event::AllocErr { .. }, _) => d.unresolved(
            r,
            "dma_alloc_sgt_err",
            "an allocation the traced kernel refused",
        ),
        (Event::MapSgErr { .. }, _) => {
            d.unresolved(r, "dma_map_sg_err", "a map the traced kernel refused")
        }
        _ => None,
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

    /// A map traced at DMA_MAPPING_ERROR failed: it is named as refused, and an unmap of that
    /// address pairs with nothing.
    #[test]
    fn a_failed_map_is_refused_and_pairs_nothing() {
        let h = "a-1 [000] 1.0:";
        let d = rebuilt(&format!(
            "{h} dma_map_phys: d dir=TO_DEVICE dma_addr=ffffffffffffffff size=64 phys_addr=1000 attrs=\n\
             {h} dma_unmap_phys: d dir=TO_DEVICE dma_addr=ffffffffffffffff size=64 attrs=\n"
        ));
        assert!(d[0].calls.is_empty());
        let why: Vec<&str> = d[0].unresolved.iter().map(|u| u.why.as_str()).collect();
        assert_eq!(
            why,
            [
                "a map the traced kernel refused",
                "no live map at DMA address 0xffffffffffffffff in the trace"
            ]
        );
    }

    /// On the second read a cut list is whole: a sync of an entry its map did not print is
    /// paired with it, at that entry's offset, where the first read could not pair it.
    #[test]
    fn a_sync_past_a_cut_lists_printed_entries_pairs_once_it_is_whole() {
        let h = "a-1 [000] 1.0:";
        let text = format!(
            "{h} dma_map_sg: d dir=FROM_DEVICE nents=2/3 ents=2/3 [TRUNCATED] dma_addrs={{0x1000,0x2000}} sizes={{0x1000,0x1000}} phys_addrs={{0x1000,0x2000}} attrs=\n\
             {h} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=3100 size=64\n\
             {h} dma_unmap_sg: d dir=FROM_DEVICE phys_addrs={{0x1000,0x2000,0x3000}} attrs=\n"
        );
        let trace = crate::trace::parse("t.txt", &text).unwrap();
        let mut first = Table::default();
        let mut b = Rebuilder::default();
        let made: Vec<bool> = trace
            .records
            .iter()
            .map(|r| b.push(r, &first.push(r), &first).is_some())
            .collect();
        assert_eq!(made, [true, false, true]);
        let mut second = Table::completing(first.wholes().clone());
        let mut b = Rebuilder::default();
        let calls: Vec<Call> = trace
            .records
            .iter()
            .filter_map(|r| b.push(r, &second.push(r), &second).map(|t| t.1.call))
            .collect();
        assert!(matches!(&calls[0], Call::MapSg { entries, .. } if entries.len() == 3));
        assert!(matches!(calls[1], Call::SyncSingle { offset: 0x2100, .. }));
        assert_eq!(calls.len(), 3);
        assert_eq!(b.finish()[0].completed, 1);
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
