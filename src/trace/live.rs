//! The live DMA mappings of every traced device: one table, fed once per event, that the
//! checks ([`super::checks`]) and the replay ([`super::replay`]) both consult, so that they
//! cannot disagree about what is mapped.
//!
//! Kernel counterpart: kernel/dma/debug.c — its one hash of `dma_debug_entry`s keyed by device
//! and DMA address (`add_dma_entry()`, `hash_bucket_find()`, `hash_bucket_del()`), and its
//! active cache lines (`active_cacheline_insert()`/`_remove()`).
//!
//! What it models: per device, each live DMA segment under its DMA address, oldest first. A
//! bucket may hold several (a buffer mapped twice without an IOMMU has one address twice), and
//! an unmap takes the entry that fits it best by size and direction, the oldest among equals, as
//! `hash_bucket_find()` does (debug.c gives up when several fit and none exactly; here the best
//! is taken, so that a size or direction mismatch still names its map). A list is entered under
//! each of its DMA segments and found for `dma_unmap_sg`, which prints no DMA address, by its
//! physical addresses. A list the trace cut at 128 entries is made whole from its unmap where a
//! first read found one ([`Table::completing`]): its unprinted entries get their physical
//! addresses from the unmap and the last printed entry's length, and, when the printed entries
//! show the list direct-mapped (each DMA address its physical one), the same DMA addresses;
//! otherwise those entries' DMA addresses are unknown and [`Table::unknown_tail`] says so.
//! Coherent allocations by DMA address. A capture starts while the driver runs, so a sync or
//! unmap may use a mapping made before it began: a first read infers each such mapping from
//! the call that first uses it, as that line gives it (its DMA range and direction; a list's
//! entries from a list sync), grown to cover the later syncs that reach past it and merged
//! into the single unmap that gives the mappings inside its range back ([`Table::infer`]); a
//! second read is given them ([`Table::with_before`]) and enters each at that same line, so
//! both reads pair every call alike. Their physical addresses are taken to be their DMA ones
//! (dma-direct without an offset); a sync or unmap right after an unmap of the same address is
//! no such use (the checks name it). A sync's mapping is found through the ordered starts
//! (a B-tree per device), looking back over a bounded number of them, never by a scan of the
//! device's mappings. A failed map (`DMA_MAPPING_ERROR`) or allocation (DMA address 0) enters
//! nothing: debug.c ignores both.
//!
//! Invariants: a mapping is in the table from its map (for one made before the trace, the line
//! that first uses it) to the unmap that ends it, under each of its known DMA segments and
//! nowhere else; the active cache lines, when tracked, hold exactly
//! the entries of the live mappings the device may write; of an unmapped mapping nothing is
//! kept but, for a cut list, its unprinted entries' physical addresses, for a second read.

use super::{Event, HashMap, Record};
use crate::types::DmaDirection;
use std::collections::{BTreeMap, BTreeSet};

/// The DMA address a failed map returns (`DMA_MAPPING_ERROR`), as a trace prints it.
pub const DMA_MAPPING_ERROR: u64 = u64::MAX;

/// debug.c's cache-line size (`L1_CACHE_SHIFT` of the commonest configurations): a different
/// line size changes only the overlap finding.
pub const CACHE_LINE: u64 = 64;

/// How many mapping starts below an address a sync's lookup passes before giving up: a
/// mapping nested under more than this many shorter ones is not found.
const HOLDING_LOOK: usize = 64;

/// Lists the trace cut at 128 entries, by their map's line: the physical addresses of the
/// entries past the printed ones, as a later `dma_unmap_sg` listed them, and the length each
/// is taken to have (the last printed entry's).
pub type Wholes = HashMap<usize, (Vec<u64>, u64)>;

/// Mappings made before the trace began, per device in the order devices first appear: its
/// name and its mappings, each by the line that first uses it ([`Table::befores`]).
pub type Befores = Vec<(String, Vec<Mapping>)>;

/// A mapping, numbered per device in map order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MapId(pub usize);

/// A live mapping as its map line gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The map's line.
    pub line: usize,
    pub dir: DmaDirection,
    /// A `dma_map_sg` list, or a single mapping.
    pub sg: bool,
    /// `dma_map_resource` (MMIO).
    pub resource: bool,
    /// The DMA segments, (start, length): a single mapping's one; a list's printed ones, then
    /// those of the entries its map did not print when they are known.
    pub dma: Vec<(u64, u64)>,
    /// The physical entries, (start, length), as the driver built them (a single mapping's
    /// one, none when its line gives no physical address), a cut list's completed ones last.
    pub phys: Vec<(u64, u64)>,
    /// The trace cut the list at 128 entries, and its unmap made it whole.
    pub truncated: bool,
    pub completed: bool,
    /// The list has entries whose DMA addresses the trace does not show.
    pub unknown_tail: bool,
    /// Made before the trace began, inferred from the call that first uses it (`line`).
    pub before: bool,
}

impl Mapping {
    /// The bytes the mapping covers, its physical entries summed.
    pub fn bytes(&self) -> u64 {
        self.phys.iter().fold(0, |a, e| a.saturating_add(e.1))
    }
}

/// A live coherent allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alloc {
    pub line: usize,
    pub size: u64,
    /// The CPU address the line gave, if it gave one.
    pub cpu_addr: Option<super::CpuAddr>,
}

/// What one record did to the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing entered or left: a sync, an error event, an event of no device.
    None,
    /// A map or allocation the traced kernel refused: nothing entered.
    Failed,
    /// A map entered as `id`. `overlap`, when cache lines are tracked: the line of a live
    /// mapping whose entry starts in the cache line one of this one's starts in, and the
    /// physical address of this one's entry.
    Mapped {
        id: MapId,
        overlap: Option<(usize, u64)>,
    },
    /// An unmap that ended mapping `id`, as it was.
    Unmapped {
        id: MapId,
        mapping: Mapping,
    },
    /// An unmap or a free that nothing live matches.
    Unmatched,
    Allocated,
    /// A free that ended this allocation.
    Freed(Alloc),
}

/// One record's effect, with its device's number in the table (in the order devices first
/// appear; none for a record that names no device or is no DMA API call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub dev: Option<usize>,
    pub effect: Effect,
}

/// A live DMA segment in its address's bucket.
#[derive(Clone, Copy, Debug)]
struct Entry {
    id: usize,
    /// Its index among its mapping's DMA segments.
    seg: usize,
    len: u64,
    sg: bool,
}

/// A live segment that holds (the start of) a synced range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub id: MapId,
    /// The segment's index in its mapping, its start and length.
    pub seg: usize,
    pub start: u64,
    pub len: u64,
    /// The whole range is inside the segment, not only its start.
    pub whole: bool,
}

/// One device's part of the table.
#[derive(Default)]
struct DeviceTable {
    name: String,
    next: usize,
    maps: HashMap<usize, Mapping>,
    /// debug.c's hash for this device: DMA address → entries, oldest first; ordered, for a
    /// sync's look back to the segment that holds it.
    by_addr: BTreeMap<u64, Vec<Entry>>,
    /// First physical address of each live list → its mappings, oldest first.
    sg_by_phys: HashMap<u64, Vec<usize>>,
    /// Live coherent allocations by DMA address, oldest first.
    coherent: HashMap<u64, Vec<Alloc>>,
    /// Live lists whose unprinted entries' DMA addresses are unknown.
    unknown_tails: usize,
    /// Mappings made before the trace: live ones by id, and those unmapped since.
    before_live: BTreeSet<usize>,
    before_gone: Vec<Mapping>,
    /// On a second read, the ones still to enter, by id.
    dormant: HashMap<usize, Mapping>,
}

impl DeviceTable {
    fn enter(&mut self, m: Mapping) -> usize {
        let id = self.next;
        self.next += 1;
        self.enter_as(id, m);
        id
    }

    fn enter_as(&mut self, id: usize, m: Mapping) {
        for (seg, &(a, len)) in m.dma.iter().enumerate() {
            let sg = m.sg;
            self.by_addr
                .entry(a)
                .or_default()
                .push(Entry { id, seg, len, sg });
        }
        if m.sg
            && let Some(&(p, _)) = m.phys.first()
        {
            self.sg_by_phys.entry(p).or_default().push(id);
        }
        if m.unknown_tail {
            self.unknown_tails += 1;
        }
        if m.before {
            self.before_live.insert(id);
        }
        self.maps.insert(id, m);
    }

    fn remove(&mut self, id: usize) -> Option<Mapping> {
        let m = self.maps.remove(&id)?;
        for &(a, _) in &m.dma {
            if let Some(v) = self.by_addr.get_mut(&a) {
                v.retain(|e| e.id != id);
                if v.is_empty() {
                    self.by_addr.remove(&a);
                }
            }
        }
        if m.sg
            && let Some((p, _)) = m.phys.first()
            && let Some(v) = self.sg_by_phys.get_mut(p)
        {
            v.retain(|&n| n != id);
            if v.is_empty() {
                self.sg_by_phys.remove(p);
            }
        }
        if m.unknown_tail {
            self.unknown_tails -= 1;
        }
        if m.before {
            self.before_live.remove(&id);
        }
        Some(m)
    }

    /// `hash_bucket_find()` for an unmap of a single mapping: of the segments at `addr`, a
    /// single mapping of this size and direction, else the one that fits best by size,
    /// direction and kind (a list's segment fits least: debug.c finds it, and `check_unmap()`
    /// names the wrong function), oldest first.
    fn hash_bucket_find(&self, addr: u64, size: u64, dir: DmaDirection) -> Option<usize> {
        let mut best: Option<(u8, usize)> = None;
        for e in self.by_addr.get(&addr)? {
            let same_dir = self.maps.get(&e.id).is_some_and(|m| m.dir == dir);
            let fit = u8::from(e.len == size) + u8::from(same_dir) + u8::from(!e.sg);
            if fit == 3 {
                return Some(e.id);
            }
            if best.is_none_or(|(b, _)| fit > b) {
                best = Some((fit, e.id));
            }
        }
        best.map(|(_, id)| id)
    }

    /// The live list `dma_unmap_sg` gives back: the one with these physical addresses, or a
    /// cut one whose printed entries begin them (oldest first); failing both, the oldest
    /// whose entries agree with the unmap's as far as both go, as debug.c finds a list
    /// unmapped with another entry count by its first segment (and says so).
    fn sg_find(&self, phys: &[u64]) -> Option<usize> {
        let ids = self.sg_by_phys.get(phys.first()?)?;
        let agree = |m: &Mapping| m.phys.iter().zip(phys).all(|(e, p)| e.0 == *p);
        let exact = ids.iter().copied().find(|id| {
            self.maps.get(id).is_some_and(|m| {
                let n = m.phys.len();
                n <= phys.len() && (n == phys.len() || (m.truncated && !m.completed)) && agree(m)
            })
        });
        exact.or_else(|| {
            ids.iter()
                .copied()
                .find(|id| self.maps.get(id).is_some_and(agree))
        })
    }
}

/// The live mappings of every device of a trace.
#[derive(Default)]
pub struct Table {
    index: HashMap<String, usize>,
    devs: Vec<DeviceTable>,
    /// The device of the last record: most records are the same device's as the one before.
    last: Option<usize>,
    /// Cut lists made whole by their unmap: found on this read, or given for this one.
    wholes: Wholes,
    active: Option<ActiveLines>,
    /// On a second read, the mappings made before the trace, by the line that first uses
    /// each: (device, id).
    pending: HashMap<usize, Vec<(usize, usize)>>,
}

impl Table {
    /// A table that completes the cut lists a first read found whole ([`Table::wholes`]).
    pub fn completing(wholes: Wholes) -> Table {
        Table {
            wholes,
            ..Table::default()
        }
    }

    /// The same table tracking debug.c's active cache lines, for the overlap check.
    pub fn tracking_cachelines(self) -> Table {
        Table {
            active: Some(ActiveLines::default()),
            ..self
        }
    }

    /// The same table given the mappings a first read found made before the trace
    /// ([`Table::befores`]): device `i`'s `j`th is its mapping `MapId(j)`, entered at the line
    /// that first uses it. The devices are numbered in the order given.
    pub fn with_before(mut self, befores: &Befores) -> Table {
        for (name, maps) in befores {
            let dev = self.device(name);
            let d = &mut self.devs[dev];
            for m in maps {
                let id = d.next;
                d.next += 1;
                d.dormant.insert(id, m.clone());
                self.pending.entry(m.line).or_default().push((dev, id));
            }
        }
        self
    }

    /// Every device's mappings made before the trace that this read inferred
    /// ([`Table::infer`]), in the order devices first appeared, each device's by the line that
    /// first uses them.
    pub fn befores(&self) -> Befores {
        self.devs
            .iter()
            .map(|d| {
                let live = d.before_live.iter().filter_map(|id| d.maps.get(id));
                let mut v: Vec<Mapping> = d.before_gone.iter().chain(live).cloned().collect();
                v.sort_by_key(|m| m.line);
                (d.name.clone(), v)
            })
            .collect()
    }

    /// On a first read, before `r` is pushed: when it syncs or unmaps what nothing live holds,
    /// and `after_unmap` (the checks' memory of the device's last unmaps) does not say it
    /// follows an unmap of it, the mapping made before the trace that it uses enters, as the
    /// line gives it. A sync reaching past such a mapping grows it; a single unmap gives back,
    /// as one mapping of its range, those inside that range.
    pub fn infer(&mut self, r: &Record, after_unmap: impl Fn(usize, &Record) -> bool) {
        let (addr, size, dir) = match &r.event {
            Event::Unmap {
                dma_addr,
                size,
                dir,
                resource: false,
                ..
            }
            | Event::SyncSingle {
                dma_addr,
                size,
                dir,
                ..
            } => (*dma_addr, *size, *dir),
            Event::SyncSg { .. } => return self.infer_list(r, after_unmap),
            _ => return,
        };
        if r.device.is_empty() || size == 0 || addr.checked_add(size).is_none() {
            return;
        }
        let dev = self.device(&r.device);
        let unmap = matches!(r.event, Event::Unmap { .. });
        let found = if unmap {
            self.devs[dev].hash_bucket_find(addr, size, dir).is_some()
        } else {
            match self.holding(dev, addr, size) {
                Some(h) if !h.whole => return self.grow(dev, h.id, addr, size),
                Some(_) => true,
                None => self.unknown_tail(dev),
            }
        };
        if found || after_unmap(dev, r) {
            return;
        }
        let d = &mut self.devs[dev];
        let mut line = r.line;
        if unmap {
            // The mappings made before the trace inside the unmapped range were this one.
            let inside: Vec<usize> = d
                .by_addr
                .range(addr..addr + size)
                .flat_map(|(&a, v)| v.iter().map(move |e| (a, e)))
                .filter(|(a, e)| !e.sg && a.saturating_add(e.len) <= addr + size)
                .map(|(_, e)| e.id)
                .filter(|id| d.maps.get(id).is_some_and(|m| m.before))
                .collect();
            for id in inside {
                line = line.min(d.remove(id).map_or(line, |m| m.line));
            }
        }
        d.enter(before(line, dir, false, vec![(addr, size)]));
    }

    /// [`Table::infer`] for a list's sync: a list made before the trace, its entries as the
    /// line gives them, when no live mapping holds any of them.
    fn infer_list(&mut self, r: &Record, after_unmap: impl Fn(usize, &Record) -> bool) {
        let Event::SyncSg {
            dir,
            dma_addrs,
            sizes,
            ..
        } = &r.event
        else {
            return;
        };
        let entries: Vec<(u64, u64)> = dma_addrs
            .iter()
            .copied()
            .zip(sizes.iter().copied())
            .collect();
        let whole = |&(a, l): &(u64, u64)| l > 0 && a.checked_add(l).is_some();
        if r.device.is_empty() || entries.is_empty() || !entries.iter().all(whole) {
            return;
        }
        let dev = self.device(&r.device);
        let held = entries
            .iter()
            .any(|&(a, l)| self.holding(dev, a, l).is_some());
        if held || self.unknown_tail(dev) || after_unmap(dev, r) {
            return;
        }
        self.devs[dev].enter(before(r.line, *dir, true, entries));
    }

    /// A sync reaching past mapping `id`: when it was made before the trace, it was as long
    /// as the sync shows.
    fn grow(&mut self, dev: usize, id: MapId, addr: u64, size: u64) {
        let d = &mut self.devs[dev];
        if !d.maps.get(&id.0).is_some_and(|m| m.before && !m.sg) {
            return;
        }
        let Some(mut m) = d.remove(id.0) else {
            return;
        };
        let (start, len) = m.dma[0];
        let end = (start + len).max(addr + size);
        m.dma = vec![(start, end - start)];
        m.phys.clone_from(&m.dma);
        d.enter_as(id.0, m);
    }

    /// The cut lists found whole so far, for a second read ([`Table::completing`]).
    pub fn wholes(&self) -> &Wholes {
        &self.wholes
    }

    /// The name of device number `dev`.
    pub fn name(&self, dev: usize) -> &str {
        self.devs.get(dev).map_or("", |d| d.name.as_str())
    }

    /// Live mapping `id` of device `dev`.
    pub fn mapping(&self, dev: usize, id: MapId) -> Option<&Mapping> {
        self.devs.get(dev)?.maps.get(&id.0)
    }

    /// Whether device `dev` holds a live list whose unprinted entries' DMA addresses are
    /// unknown: an address found in no mapping may be one of them.
    pub fn unknown_tail(&self, dev: usize) -> bool {
        self.devs.get(dev).is_some_and(|d| d.unknown_tails > 0)
    }

    /// The live segment of device `dev` that holds `[addr, addr + size)`, or failing that the
    /// nearest one that holds `addr`: the nearest starts first, a short mapping inside a longer
    /// one not hiding it.
    pub fn holding(&self, dev: usize, addr: u64, size: u64) -> Option<Hold> {
        let d = self.devs.get(dev)?;
        let mut partial = None;
        for (&start, bucket) in d.by_addr.range(..=addr).rev().take(HOLDING_LOOK) {
            let off = addr - start;
            for e in bucket.iter().filter(|e| off < e.len) {
                let hold = Hold {
                    id: MapId(e.id),
                    seg: e.seg,
                    start,
                    len: e.len,
                    whole: off.saturating_add(size) <= e.len,
                };
                if hold.whole {
                    return Some(hold);
                }
                partial.get_or_insert(hold);
            }
        }
        partial
    }

    /// The oldest live list of device `dev` whose first DMA segment starts at `addr`.
    pub fn sg_starting_at(&self, dev: usize, addr: u64) -> Option<MapId> {
        let d = self.devs.get(dev)?;
        let e = d.by_addr.get(&addr)?.iter().find(|e| e.sg && e.seg == 0)?;
        Some(MapId(e.id))
    }

    /// Every live mapping, with its device's name, in no particular order.
    pub fn live(&self) -> impl Iterator<Item = (&str, &Mapping)> {
        self.devs
            .iter()
            .flat_map(|d| d.maps.values().map(move |m| (d.name.as_str(), m)))
    }

    /// Every live coherent allocation with its device's name and DMA address.
    pub fn live_allocs(&self) -> impl Iterator<Item = (&str, u64, &Alloc)> {
        self.devs.iter().flat_map(|d| {
            d.coherent
                .iter()
                .flat_map(move |(&a, v)| v.iter().map(move |x| (d.name.as_str(), a, x)))
        })
    }

    fn device(&mut self, name: &str) -> usize {
        if let Some(i) = self.last.filter(|&i| self.devs[i].name == name) {
            return i;
        }
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.index.insert(name.to_string(), self.devs.len());
                self.devs.push(DeviceTable {
                    name: name.to_string(),
                    ..DeviceTable::default()
                });
                self.devs.len() - 1
            }
        };
        self.last = Some(i);
        i
    }

    /// Feed one record, in trace order: what it maps enters, what it unmaps or frees leaves.
    pub fn push(&mut self, r: &Record) -> Step {
        if !self.pending.is_empty()
            && let Some(due) = self.pending.remove(&r.line)
        {
            for (dev, id) in due {
                if let Some(m) = self.devs[dev].dormant.remove(&id) {
                    self.devs[dev].enter_as(id, m);
                }
            }
        }
        if r.device.is_empty() || matches!(r.event, Event::SwiotlbBounced { .. }) {
            return Step {
                dev: None,
                effect: Effect::None,
            };
        }
        let dev = self.device(&r.device);
        let effect = match &r.event {
            Event::Map { dma_addr, .. } if *dma_addr == DMA_MAPPING_ERROR => Effect::Failed,
            Event::Map {
                dir,
                dma_addr,
                size,
                phys_addr,
                resource,
            } => self.enter(
                dev,
                Mapping {
                    line: r.line,
                    dir: *dir,
                    sg: false,
                    resource: *resource,
                    dma: vec![(*dma_addr, *size)],
                    phys: phys_addr.map(|p| (p, *size)).into_iter().collect(),
                    truncated: false,
                    completed: false,
                    unknown_tail: false,
                    before: false,
                },
            ),
            Event::MapSg {
                dir,
                dma_addrs,
                sizes,
                phys_addrs,
                truncated,
                ..
            } => {
                let m = self.sg_mapping(r.line, *dir, dma_addrs, sizes, phys_addrs, *truncated);
                self.enter(dev, m)
            }
            Event::Unmap {
                dir,
                dma_addr,
                size,
                ..
            } => {
                let found = self.devs[dev].hash_bucket_find(*dma_addr, *size, *dir);
                self.leave(dev, found)
            }
            Event::UnmapSg { phys_addrs, .. } => {
                let d = &self.devs[dev];
                let found = d.sg_find(phys_addrs);
                // A cut list given back whole: its unprinted entries, for a second read.
                let whole = found
                    .and_then(|id| d.maps.get(&id))
                    .filter(|m| m.truncated && !m.completed && phys_addrs.len() > m.phys.len())
                    .map(|m| {
                        let len = m.phys.last().map_or(0, |e| e.1);
                        (m.line, (phys_addrs[m.phys.len()..].to_vec(), len))
                    });
                if let Some((line, w)) = whole {
                    self.wholes.insert(line, w);
                }
                self.leave(dev, found)
            }
            Event::Alloc {
                dma_addr,
                size,
                cpu_addr,
                ..
            } => {
                // Recent kernels trace a failed allocation as one at DMA address 0.
                if *dma_addr == 0 {
                    Effect::Failed
                } else {
                    let a = Alloc {
                        line: r.line,
                        size: *size,
                        cpu_addr: *cpu_addr,
                    };
                    self.devs[dev]
                        .coherent
                        .entry(*dma_addr)
                        .or_default()
                        .push(a);
                    Effect::Allocated
                }
            }
            Event::Free { dma_addr, .. } => {
                let c = &mut self.devs[dev].coherent;
                let oldest = c
                    .get_mut(dma_addr)
                    .filter(|v| !v.is_empty())
                    .map(|v| (v.remove(0), v.is_empty()));
                match oldest {
                    Some((a, emptied)) => {
                        if emptied {
                            c.remove(dma_addr);
                        }
                        Effect::Freed(a)
                    }
                    None => Effect::Unmatched,
                }
            }
            Event::SyncSingle { .. }
            | Event::SyncSg { .. }
            | Event::AllocErr { .. }
            | Event::MapSgErr { .. }
            | Event::IommuMap { .. }
            | Event::IommuUnmap { .. }
            | Event::SwiotlbBounced { .. } => Effect::None,
        };
        Step {
            dev: Some(dev),
            effect,
        }
    }

    fn enter(&mut self, dev: usize, m: Mapping) -> Effect {
        let overlap = self.active.as_mut().and_then(|a| a.insert(&m));
        let id = MapId(self.devs[dev].enter(m));
        Effect::Mapped { id, overlap }
    }

    fn leave(&mut self, dev: usize, found: Option<usize>) -> Effect {
        match found.and_then(|id| Some((id, self.devs[dev].remove(id)?))) {
            Some((id, mapping)) => {
                if mapping.before {
                    self.devs[dev].before_gone.push(mapping.clone());
                } else if let Some(a) = self.active.as_mut() {
                    a.remove(&mapping);
                }
                Effect::Unmapped {
                    id: MapId(id),
                    mapping,
                }
            }
            None => Effect::Unmatched,
        }
    }

    /// A `dma_map_sg` line as a mapping, a cut list completed where the first read found it
    /// whole.
    fn sg_mapping(
        &mut self,
        line: usize,
        dir: DmaDirection,
        dma_addrs: &[u64],
        sizes: &[u64],
        phys_addrs: &[u64],
        truncated: bool,
    ) -> Mapping {
        let dma: Vec<(u64, u64)> = dma_addrs
            .iter()
            .copied()
            .zip(sizes.iter().copied())
            .collect();
        let phys: Vec<(u64, u64)> = phys_addrs
            .iter()
            .copied()
            .zip(entry_lengths(sizes, phys_addrs.len()))
            .collect();
        let mut m = Mapping {
            line,
            dir,
            sg: true,
            resource: false,
            dma,
            phys,
            truncated,
            completed: false,
            unknown_tail: truncated,
            before: false,
        };
        if truncated
            && let Some((tail, len)) = self.wholes.remove(&line)
            && tail.iter().all(|p| p.checked_add(len).is_some())
        {
            // Direct-mapped as printed: the unprinted entries are too (dma-direct maps each
            // entry at its physical address when there is no offset).
            let direct = m.dma == m.phys;
            m.phys.extend(tail.iter().map(|&p| (p, len)));
            if direct {
                m.dma.clone_from(&m.phys);
            }
            m.completed = true;
            m.unknown_tail = !direct;
        }
        m
    }
}

/// A mapping made before the trace, first used at `line`: its physical entries taken as its
/// DMA ones (dma-direct without an offset).
fn before(line: usize, dir: DmaDirection, sg: bool, dma: Vec<(u64, u64)>) -> Mapping {
    Mapping {
        line,
        dir,
        sg,
        resource: false,
        phys: dma.clone(),
        dma,
        truncated: false,
        completed: false,
        unknown_tail: false,
        before: true,
    }
}

/// Each physical entry's length: its DMA segment's when they pair one to one; otherwise (an
/// IOMMU merged them) the mapped bytes spread over the entries.
fn entry_lengths(sizes: &[u64], n: usize) -> Vec<u64> {
    if sizes.len() == n || n == 0 {
        return sizes.iter().copied().take(n).collect();
    }
    let total = sizes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let each = total / n as u64;
    let mut v = vec![each; n];
    if let Some(last) = v.last_mut() {
        *last += total - each * n as u64; // below n: cannot overflow
    }
    v
}

/// debug.c's active cache lines: the line each physical entry of a live mapping the device
/// may write starts in (`to_cacheline_number()`), across all devices, with the trace line of
/// each mapping holding it.
#[derive(Default)]
struct ActiveLines(HashMap<u64, Vec<usize>>);

impl ActiveLines {
    /// `active_cacheline_insert()` of every entry of `m`: the first entry whose line is already
    /// held, with the line of the mapping holding it.
    fn insert(&mut self, m: &Mapping) -> Option<(usize, u64)> {
        // "If the device is not writing memory then we don't have any concerns about the cpu
        // consuming stale data" (debug.c): TO_DEVICE mappings are not tracked.
        if m.dir == DmaDirection::ToDevice {
            return None;
        }
        let mut overlap = None;
        for &(phys, _) in &m.phys {
            let holders = self.0.entry(phys / CACHE_LINE).or_default();
            if overlap.is_none()
                && let Some(&first) = holders.first()
            {
                overlap = Some((first, phys));
            }
            holders.push(m.line);
        }
        overlap
    }

    /// `active_cacheline_remove()` of every entry of `m`.
    fn remove(&mut self, m: &Mapping) {
        if m.dir == DmaDirection::ToDevice {
            return;
        }
        for &(phys, _) in &m.phys {
            let cln = phys / CACHE_LINE;
            if let Some(holders) = self.0.get_mut(&cln) {
                if let Some(i) = holders.iter().position(|&l| l == m.line) {
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

    const H: &str = "a-1 [000] 1.0:";

    /// Every record of `text` fed to `t`, with the effects.
    fn feed(t: &mut Table, text: &str) -> Vec<Effect> {
        let trace = parse("t.txt", text).unwrap();
        trace.records.iter().map(|r| t.push(r).effect).collect()
    }

    fn unmapped(e: &Effect) -> Option<usize> {
        match e {
            Effect::Unmapped { mapping, .. } => Some(mapping.line),
            _ => None,
        }
    }

    /// One address mapped twice (no IOMMU): each unmap ends the mapping that fits it, by
    /// direction and size before age, and a third finds nothing.
    #[test]
    fn an_unmap_takes_the_entry_that_fits_it_best() {
        let mut t = Table::default();
        let e = feed(
            &mut t,
            &format!(
                "{H} dma_map_phys: d dir=TO_DEVICE dma_addr=1000 size=4096 phys_addr=1000 attrs=\n\
                 {H} dma_map_phys: d dir=FROM_DEVICE dma_addr=1000 size=4096 phys_addr=1000 attrs=\n\
                 {H} dma_unmap_phys: d dir=FROM_DEVICE dma_addr=1000 size=4096 attrs=\n\
                 {H} dma_unmap_phys: d dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n\
                 {H} dma_unmap_phys: d dir=TO_DEVICE dma_addr=1000 size=4096 attrs=\n"
            ),
        );
        let ends: Vec<Option<usize>> = e.iter().map(unmapped).collect();
        assert_eq!(ends, [None, None, Some(2), Some(1), None]);
        assert_eq!(e[4], Effect::Unmatched);
        assert_eq!(t.live().count(), 0);
    }

    /// A failed map or allocation enters nothing, so nothing of it is live or unmapped.
    #[test]
    fn a_failed_map_enters_nothing() {
        let mut t = Table::default();
        let e = feed(
            &mut t,
            &format!(
                "{H} dma_map_phys: d dir=TO_DEVICE dma_addr=ffffffffffffffff size=4096 phys_addr=1000 attrs=\n\
                 {H} dma_alloc: d dir=BIDIRECTIONAL dma_addr=0 size=4096 virt_addr=0 flags=GFP_KERNEL attrs=\n\
                 {H} dma_unmap_phys: d dir=TO_DEVICE dma_addr=ffffffffffffffff size=4096 attrs=\n"
            ),
        );
        assert_eq!(e, [Effect::Failed, Effect::Failed, Effect::Unmatched]);
        assert_eq!((t.live().count(), t.live_allocs().count()), (0, 0));
    }

    /// A sync is found in the segment holding it through the ordered starts: past a short
    /// mapping that starts nearer, and in any entry of a list.
    #[test]
    fn a_sync_finds_its_segment_by_the_ordered_starts() {
        let mut t = Table::default();
        feed(
            &mut t,
            &format!(
                "{H} dma_map_phys: d dir=TO_DEVICE dma_addr=80000000 size=65536 phys_addr=80000000 attrs=\n\
                 {H} dma_map_phys: d dir=TO_DEVICE dma_addr=80001000 size=256 phys_addr=80001000 attrs=\n\
                 {H} dma_map_sg: d dir=FROM_DEVICE dma_addrs={{0x90000000,0x90004000}} sizes={{0x1000,0x1000}} phys_addrs={{0x90000000,0x90004000}} attrs=\n"
            ),
        );
        let h = t.holding(0, 0x8000_1080, 0x1000).unwrap();
        assert_eq!((h.id, h.start, h.whole), (MapId(0), 0x8000_0000, true));
        let h = t.holding(0, 0x9000_4800, 0x1000).unwrap();
        assert_eq!((h.id, h.seg, h.whole), (MapId(2), 1, false));
        assert_eq!(t.holding(0, 0x9000_2000, 64), None);
        assert_eq!(t.sg_starting_at(0, 0x9000_0000), Some(MapId(2)));
        assert_eq!(t.sg_starting_at(0, 0x9000_4000), None);
    }

    /// A cut list: found by its unmap's longer list, which the table keeps for a second read;
    /// on that read the list is whole, its unprinted entries' DMA addresses known when the
    /// printed ones are direct and unknown behind an IOMMU.
    #[test]
    fn a_cut_list_is_made_whole_from_its_unmap_on_a_second_read() {
        let text = format!(
            "{H} dma_map_sg: d dir=FROM_DEVICE nents=2/3 ents=2/3 [TRUNCATED] dma_addrs={{0x1000,0x2000}} sizes={{0x1000,0x1000}} phys_addrs={{0x1000,0x2000}} attrs=\n\
             {H} dma_map_sg: e dir=FROM_DEVICE nents=2/3 ents=2/3 [TRUNCATED] dma_addrs={{0xf000,0xe000}} sizes={{0x1000,0x1000}} phys_addrs={{0x5000,0x6000}} attrs=\n\
             {H} dma_unmap_sg: d dir=FROM_DEVICE phys_addrs={{0x1000,0x2000,0x3000}} attrs=\n\
             {H} dma_unmap_sg: e dir=FROM_DEVICE phys_addrs={{0x5000,0x6000,0x7000}} attrs=\n"
        );
        let mut first = Table::default();
        let e = feed(&mut first, &text);
        assert_eq!(unmapped(&e[2]), Some(1));
        assert_eq!(unmapped(&e[3]), Some(2));
        assert_eq!(first.wholes().get(&1), Some(&(vec![0x3000], 0x1000)));

        let mut second = Table::completing(first.wholes().clone());
        let trace = parse("t.txt", &text).unwrap();
        second.push(&trace.records[0]);
        second.push(&trace.records[1]);
        let d = second.mapping(0, MapId(0)).unwrap();
        assert!(d.completed && !d.unknown_tail);
        assert_eq!(d.dma.len(), 3);
        assert_eq!(second.holding(0, 0x3800, 64).map(|h| h.seg), Some(2));
        let e = second.mapping(1, MapId(0)).unwrap();
        assert!(e.completed && e.unknown_tail);
        assert_eq!((e.dma.len(), e.phys.len(), e.bytes()), (2, 3, 0x3000));
        assert!(second.unknown_tail(1) && !second.unknown_tail(0));
        let rest: Vec<Option<usize>> = trace.records[2..]
            .iter()
            .map(|r| unmapped(&second.push(r).effect))
            .collect();
        assert_eq!(rest, [Some(1), Some(2)]);
        assert!(!second.unknown_tail(1));
    }

    /// A window on a running driver: a page synced before it is unmapped was mapped before the
    /// trace. Its first sync enters it, a longer sync grows it, and the unmap of the page takes
    /// it as one mapping of its range, first used at the first sync; a second read enters it
    /// there, so every call pairs with it, and nothing of it is live or cache-line tracked.
    #[test]
    fn a_mapping_made_before_the_trace_is_inferred_grown_and_merged() {
        let text = format!(
            "{H} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=1040 size=1514\n\
             {H} dma_sync_single_for_device: d dir=FROM_DEVICE dma_addr=1040 size=1536\n\
             {H} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=1800 size=64\n\
             {H} dma_unmap_phys: d dir=FROM_DEVICE dma_addr=1000 size=4096 attrs=\n\
             {H} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=5040 size=64\n"
        );
        let trace = parse("t.txt", &text).unwrap();
        let mut first = Table::default();
        for r in &trace.records {
            first.infer(r, |_, _| false);
            first.push(r);
        }
        let b = first.befores();
        assert_eq!(b.len(), 1);
        let spans: Vec<(usize, Vec<(u64, u64)>)> =
            b[0].1.iter().map(|m| (m.line, m.dma.clone())).collect();
        assert_eq!(spans, [(1, vec![(0x1000, 4096)]), (5, vec![(0x5040, 64)])]);
        assert!(b[0].1.iter().all(|m| m.before && m.phys == m.dma));

        let mut second = Table::default().with_before(&b).tracking_cachelines();
        assert_eq!(second.holding(0, 0x1040, 64), None);
        let e: Vec<Effect> = trace
            .records
            .iter()
            .map(|r| second.push(r).effect)
            .collect();
        assert_eq!(second.holding(0, 0x5040, 64).map(|h| h.id), Some(MapId(1)));
        assert!(matches!(&e[3], Effect::Unmapped { id: MapId(0), mapping } if mapping.before));
        assert_eq!(second.live().count(), 1);
        assert!(second.active.as_ref().is_some_and(|a| a.0.is_empty()));
        // What the checks say follows an unmap enters nothing.
        let mut none = Table::default();
        none.infer(&trace.records[0], |_, _| true);
        assert!(none.befores()[0].1.is_empty());
    }

    /// Cache lines are tracked where entries start, for mappings the device may write, and let
    /// go at unmap.
    #[test]
    fn cache_lines_are_held_by_live_writable_mappings() {
        let mut t = Table::default().tracking_cachelines();
        let e = feed(
            &mut t,
            &format!(
                "{H} dma_map_phys: a dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=b0000000 attrs=\n\
                 {H} dma_map_phys: a dir=FROM_DEVICE dma_addr=2000 size=64 phys_addr=b0000010 attrs=\n\
                 {H} dma_map_phys: b dir=FROM_DEVICE dma_addr=2000 size=64 phys_addr=b0000020 attrs=\n\
                 {H} dma_unmap_phys: a dir=FROM_DEVICE dma_addr=2000 size=64 attrs=\n\
                 {H} dma_unmap_phys: b dir=FROM_DEVICE dma_addr=2000 size=64 attrs=\n\
                 {H} dma_map_phys: b dir=FROM_DEVICE dma_addr=2000 size=64 phys_addr=b0000020 attrs=\n"
            ),
        );
        let overlaps: Vec<Option<(usize, u64)>> = e
            .iter()
            .map(|e| match e {
                Effect::Mapped { overlap, .. } => *overlap,
                _ => None,
            })
            .collect();
        assert_eq!(
            overlaps,
            [None, None, Some((2, 0xb000_0020)), None, None, None]
        );
    }
}
