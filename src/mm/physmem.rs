//! Simulated physical memory: NUMA nodes, a page allocator, and real bytes.
//!
//! Kernel counterpart: `alloc_pages_node()` / `__free_pages()` (mm/page_alloc.c) and the RAM behind
//! them. Page-table pages (io-pgtable), swiotlb pools, CMA areas and DMA buffers all live here, so a
//! descriptor written by the page-table code is the same byte a walk reads back, and a bounce copy
//! moves real data.
//!
//! What it models: each node owns a physical range; allocation is first-fit over free ranges,
//! aligned to the allocation's size rounded up to a power of two (as the buddy allocator aligns an
//! order-n block), and can fail; frees coalesce. Bytes are stored sparsely per 4 KiB page and read
//! as zero until written; a page is found as sparsemem finds its `struct page`, through a table
//! of sections over the nodes' span (two indexed loads), each section's map made on its first
//! write.
//!
//! Boot-time reservations (`memblock_alloc_range_nid()`: CMA areas) take a range of one node
//! top-down or bottom-up between two addresses; `alloc_pages_node()` tries the nodes of the
//! requested node's zonelist in order (nearest first, as the topology's SLIT orders them) below
//! a zone's limit.
//!
//! Invariants: free ranges never overlap and never touch (they are coalesced); an address is either
//! inside exactly one allocation or free; freeing something not allocated is an error, not a
//! silent no-op. A page's bytes sit at one index of the page store while the page is written and
//! not freed; `slot_pfn` names the page at each index, so an index a caller remembers (a walk's
//! per-level hint) is checked before use and never reads another page's bytes. The write stamp
//! moves on every change of any byte (a write, a first write that gives a page its bytes, a
//! free), so a caller that remembers something read from memory may use it while the stamp is
//! the one it saw.

use crate::types::PhysAddr;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Memory shared by the layers of one simulated machine (swiotlb's pool, page tables, the buffers
/// a scenario fills). One run is single-threaded, so a plain `Rc<RefCell<_>>`; borrows are held only
/// for the length of one read, write or copy, never across a call into another layer.
pub type SharedPhysMem = Rc<RefCell<PhysMem>>;

const PAGE: u64 = 4096;
/// Pages per memory section at least: arm64's `SECTION_SIZE_BITS` of 27 (128 MiB) in pages.
const SECTION_PAGE_BITS: u32 = 15;
/// The most sections a memory's span is cut into; a wider span takes larger sections.
const MAX_SECTIONS_BITS: u32 = 16;

/// The page map of the nodes' span, as sparsemem keeps `mem_section[]`: the span cut into
/// sections of `1 << shift` pages, each section's map (a page's index in the page store plus
/// one, 0 for a page never written) made on the section's first write. A lookup is two indexed
/// loads: the section, then its page.
#[derive(Clone, Debug, Default)]
struct Sections {
    base_pfn: u64,
    shift: u32,
    maps: Vec<Option<Box<[u32]>>>,
}

impl Sections {
    fn new(nodes: &[NodeRange]) -> Sections {
        let lo = nodes.iter().map(|n| n.start.0 / PAGE).min().unwrap_or(0);
        let hi = nodes
            .iter()
            .map(|n| (n.start.0 + n.size) / PAGE)
            .max()
            .unwrap_or(0);
        let span_bits = 64 - (hi - lo).leading_zeros();
        let shift = SECTION_PAGE_BITS.max(span_bits.saturating_sub(MAX_SECTIONS_BITS));
        let count = (hi - lo).div_ceil(1 << shift) as usize;
        Sections {
            base_pfn: lo,
            shift,
            maps: vec![None; count],
        }
    }

    /// Where page `pfn`'s entry is: `None` outside the span.
    #[inline(always)]
    fn locate(&self, pfn: u64) -> Option<(usize, usize)> {
        let off = pfn.wrapping_sub(self.base_pfn);
        let sec = (off >> self.shift) as usize;
        (sec < self.maps.len()).then(|| (sec, (off & ((1 << self.shift) - 1)) as usize))
    }
}

/// One NUMA node's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRange {
    pub node: u32,
    pub start: PhysAddr,
    pub size: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhysMemError {
    #[error("out of memory on node {node}: no free block of {size:#x} bytes aligned to {align:#x}")]
    OutOfMemory { node: u32, size: u64, align: u64 },
    #[error("no node {0}")]
    NoSuchNode(u32),
    #[error("free of {addr} ({size:#x} bytes) which is not an allocation")]
    BadFree { addr: PhysAddr, size: u64 },
}

#[derive(Clone, Debug, Default)]
pub struct PhysMem {
    nodes: Vec<NodeRange>,
    /// start -> length, per node index.
    free: Vec<BTreeMap<u64, u64>>,
    /// start -> length of every live allocation.
    allocated: BTreeMap<u64, u64>,
    /// Index in `pages` of every page of the nodes' span that has been written.
    sections: Sections,
    /// The same for pages outside every node (a caller's stray address), kept apart.
    outside: BTreeMap<u64, u32>,
    /// The written pages' bytes; a freed page's entry is emptied and its index reused.
    pages: Vec<Box<[u8]>>,
    /// Per index of `pages`, the page-frame number it holds plus one (0: free), so a caller's
    /// remembered index can be checked without a lookup ([`PhysMem::read_u64_hinted`]).
    slot_pfn: Vec<u64>,
    free_slots: Vec<u32>,
    /// Per node id, the nodes its allocations fall back to, itself first (`node_zonelists`).
    /// Empty for a node not listed: then its own node only.
    zonelists: BTreeMap<u32, Vec<u32>>,
    /// Changes whenever any byte may have changed ([`PhysMem::write_stamp`]).
    stamp: WriteStamp,
}

/// A value that moves on every change of a [`PhysMem`]'s bytes. Each memory starts from its own
/// base, taken from a process-wide counter, so two memories show the same stamp only when one is
/// an unchanged clone of the other, bytes and all.
#[derive(Clone, Debug)]
struct WriteStamp(u64);

impl Default for WriteStamp {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        // 2^40 changes a memory before its stamps could reach the next memory's base.
        WriteStamp(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 40)
    }
}

impl PhysMem {
    /// Memory made of the given node ranges (page aligned, not overlapping).
    pub fn new(nodes: Vec<NodeRange>) -> PhysMem {
        let free = nodes
            .iter()
            .map(|n| {
                assert!(
                    n.start.is_aligned(PAGE) && n.size % PAGE == 0 && n.size > 0,
                    "node ranges are page aligned"
                );
                BTreeMap::from([(n.start.0, n.size)])
            })
            .collect();
        let ids: Vec<u32> = nodes.iter().map(|n| n.node).collect();
        let zonelists = ids
            .iter()
            .map(|&n| {
                let mut z = vec![n];
                z.extend(ids.iter().copied().filter(|&o| o != n));
                (n, z)
            })
            .collect();
        PhysMem {
            sections: Sections::new(&nodes),
            nodes,
            free,
            allocated: BTreeMap::new(),
            outside: BTreeMap::new(),
            pages: Vec::new(),
            slot_pfn: Vec::new(),
            free_slots: Vec::new(),
            zonelists,
            stamp: WriteStamp::default(),
        }
    }

    /// What a caller that remembers something derived from the bytes (io-pgtable's walk cache)
    /// checks: while it is unchanged, no byte has changed. Every write, materialised page and
    /// freed page moves it.
    #[inline(always)]
    pub fn write_stamp(&self) -> u64 {
        self.stamp.0
    }

    #[inline(always)]
    fn changed(&mut self) {
        self.stamp.0 = self.stamp.0.wrapping_add(1);
    }

    /// Wrap for sharing between layers.
    pub fn shared(self) -> SharedPhysMem {
        Rc::new(RefCell::new(self))
    }

    /// A single node 0 of `size` bytes at `start`.
    pub fn single(start: PhysAddr, size: u64) -> PhysMem {
        PhysMem::new(vec![NodeRange {
            node: 0,
            start,
            size,
        }])
    }

    pub fn nodes(&self) -> &[NodeRange] {
        &self.nodes
    }

    /// The node an address belongs to.
    pub fn node_of(&self, addr: PhysAddr) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| addr.0 >= n.start.0 && addr.0 - n.start.0 < n.size)
            .map(|n| n.node)
    }

    /// Allocate `size` bytes (rounded up to whole pages) on `node`, aligned to the size rounded up
    /// to a power of two.
    pub fn alloc(&mut self, node: u32, size: u64) -> Result<PhysAddr, PhysMemError> {
        let size = size.max(1).div_ceil(PAGE) * PAGE;
        let align = size.checked_next_power_of_two().unwrap_or(1 << 63);
        self.alloc_aligned(node, size, align)
    }

    /// Allocate `size` bytes (whole pages) on `node` at an `align`-aligned address (power of two).
    pub fn alloc_aligned(
        &mut self,
        node: u32,
        size: u64,
        align: u64,
    ) -> Result<PhysAddr, PhysMemError> {
        let idx = self
            .nodes
            .iter()
            .position(|n| n.node == node)
            .ok_or(PhysMemError::NoSuchNode(node))?;
        let size = size.max(1).div_ceil(PAGE) * PAGE;
        let align = align.max(PAGE);
        let free = &mut self.free[idx];
        let found = free.iter().find_map(|(&start, &len)| {
            let a = start.checked_add(align - 1)? & !(align - 1);
            (a - start + size <= len).then_some((start, len, a))
        });
        let Some((start, len, a)) = found else {
            return Err(PhysMemError::OutOfMemory { node, size, align });
        };
        free.remove(&start);
        if a > start {
            free.insert(start, a - start);
        }
        let end = a + size;
        if end < start + len {
            free.insert(end, start + len - end);
        }
        self.allocated.insert(a, size);
        Ok(PhysAddr(a))
    }

    /// Set the order in which each node's page allocations fall back to other nodes
    /// (`build_zonelists()`; see `platform::numa::Topology::fallback_order`).
    pub fn set_zonelists(&mut self, zonelists: BTreeMap<u32, Vec<u32>>) {
        self.zonelists = zonelists;
    }

    /// The nodes an allocation on `node` tries, in order.
    pub fn zonelist(&self, node: u32) -> Vec<u32> {
        self.zonelists
            .get(&node)
            .cloned()
            .unwrap_or_else(|| vec![node])
    }

    /// Carve `[a, a + size)` out of free range `start` of node index `idx`.
    fn take(&mut self, idx: usize, start: u64, a: u64, size: u64) {
        let free = &mut self.free[idx];
        let len = free.remove(&start).unwrap_or(0);
        if a > start {
            free.insert(start, a - start);
        }
        let end = a + size;
        if end < start + len {
            free.insert(end, start + len - end);
        }
        self.allocated.insert(a, size);
    }

    /// The place for `size` bytes at `align` inside `[lo, hi)` on node index `idx`: the highest
    /// (`top_down`) or lowest fit among its free ranges, as (free range start, address).
    fn fit(
        &self,
        idx: usize,
        size: u64,
        align: u64,
        lo: u64,
        hi: u64,
        top_down: bool,
    ) -> Option<(u64, u64)> {
        let mut best: Option<(u64, u64)> = None;
        for (&start, &len) in &self.free[idx] {
            let s = start.max(lo);
            let e = (start + len).min(hi);
            if e <= s || e - s < size {
                continue;
            }
            let a = if top_down {
                (e - size) & !(align - 1)
            } else {
                match s.checked_add(align - 1) {
                    Some(x) => x & !(align - 1),
                    None => continue,
                }
            };
            if a < s || a.checked_add(size).is_none_or(|x| x > e) {
                continue;
            }
            let better = match best {
                None => true,
                Some((_, b)) => (top_down && a > b) || (!top_down && a < b),
            };
            if better {
                best = Some((start, a));
            }
        }
        best
    }

    /// `memblock_alloc_range_nid(size, align, start, end, nid, exact_nid = true)` at boot:
    /// `size` bytes at `align` inside `[start, end)` on `node` (any node for `None`), the
    /// highest fit when `top_down` (memblock's default direction), else the lowest.
    pub fn memblock_alloc_range(
        &mut self,
        node: Option<u32>,
        size: u64,
        align: u64,
        start: u64,
        end: u64,
        top_down: bool,
    ) -> Option<PhysAddr> {
        if size == 0 || !size.is_multiple_of(PAGE) || !align.is_power_of_two() {
            return None;
        }
        let align = align.max(PAGE);
        let mut best: Option<(usize, u64, u64)> = None;
        for (idx, n) in self.nodes.iter().enumerate() {
            if node.is_some_and(|want| want != n.node) {
                continue;
            }
            if let Some((fs, a)) = self.fit(idx, size, align, start, end, top_down) {
                let better = match best {
                    None => true,
                    Some((_, _, b)) => (top_down && a > b) || (!top_down && a < b),
                };
                if better {
                    best = Some((idx, fs, a));
                }
            }
        }
        let (idx, fs, a) = best?;
        self.take(idx, fs, a, size);
        Some(PhysAddr(a))
    }

    /// `alloc_pages_node(node, gfp, order)`: `2^order` pages aligned to their size, below
    /// `limit` (the highest zone `gfp` allows: ZONE_DMA's or ZONE_DMA32's end, or none), from
    /// the first node of `node`'s zonelist that has such a block. The lowest fit of a node
    /// stands for the buddy allocator's choice (which block a real buddy hands out depends on
    /// history the model does not keep; the node and the zone are what the callers see).
    pub fn alloc_pages_node(
        &mut self,
        node: u32,
        order: u32,
        limit: Option<u64>,
    ) -> Result<PhysAddr, PhysMemError> {
        let size = PAGE
            .checked_shl(order)
            .filter(|s| order < 40 && *s > 0)
            .ok_or(PhysMemError::OutOfMemory {
                node,
                size: u64::MAX,
                align: u64::MAX,
            })?;
        for n in self.zonelist(node) {
            let Some(idx) = self.nodes.iter().position(|r| r.node == n) else {
                continue;
            };
            if let Some((fs, a)) = self.fit(idx, size, size, 0, limit.unwrap_or(u64::MAX), false) {
                self.take(idx, fs, a, size);
                return Ok(PhysAddr(a));
            }
        }
        Err(PhysMemError::OutOfMemory {
            node,
            size,
            align: size,
        })
    }

    /// Free bytes on `node`.
    pub fn free_bytes(&self, node: u32) -> u64 {
        self.nodes
            .iter()
            .position(|n| n.node == node)
            .map_or(0, |i| self.free[i].values().sum())
    }

    /// Free an allocation made by [`PhysMem::alloc`] (the size must match, in whole pages).
    pub fn free(&mut self, addr: PhysAddr, size: u64) -> Result<(), PhysMemError> {
        let size = size.max(1).div_ceil(PAGE) * PAGE;
        if self.allocated.get(&addr.0) != Some(&size) {
            return Err(PhysMemError::BadFree { addr, size });
        }
        self.allocated.remove(&addr.0);
        let idx = self
            .nodes
            .iter()
            .position(|n| addr.0 >= n.start.0 && addr.0 - n.start.0 < n.size)
            .ok_or(PhysMemError::BadFree { addr, size })?;
        let free = &mut self.free[idx];
        let (mut start, mut len) = (addr.0, size);
        if let Some((&ps, &pl)) = free.range(..start).next_back()
            && ps + pl == start
        {
            free.remove(&ps);
            start = ps;
            len += pl;
        }
        if let Some(&nl) = free.get(&(start + len)) {
            free.remove(&(start + len));
            len += nl;
        }
        free.insert(start, len);
        // Freed memory keeps no bytes: a later allocation starts from zeroes, as __GFP_ZERO would
        // give, and the store does not grow without bound.
        for pfn in addr.0 / PAGE..(addr.0 + size) / PAGE {
            if let Some(slot) = self.slot_of(pfn) {
                self.changed();
                self.set_slot(pfn, 0);
                self.pages[slot] = Box::default();
                self.slot_pfn[slot] = 0;
                self.free_slots.push(slot as u32);
            }
        }
        Ok(())
    }

    /// The index in `pages` of page `pfn`, if it has been written.
    #[inline(always)]
    fn slot_of(&self, pfn: u64) -> Option<usize> {
        match self.sections.locate(pfn) {
            Some((sec, i)) => match &self.sections.maps[sec] {
                Some(map) => map[i].checked_sub(1).map(|s| s as usize),
                None => None,
            },
            None => self.outside.get(&pfn).map(|&s| s as usize),
        }
    }

    /// Record page `pfn` at index `slot + 1` (0: not written).
    fn set_slot(&mut self, pfn: u64, entry: u32) {
        match self.sections.locate(pfn) {
            Some((sec, i)) => {
                let per = 1usize << self.sections.shift;
                self.sections.maps[sec].get_or_insert_with(|| vec![0; per].into_boxed_slice())[i] =
                    entry;
            }
            None if entry == 0 => {
                self.outside.remove(&pfn);
            }
            None => {
                self.outside.insert(pfn, entry - 1);
            }
        }
    }

    /// Page `pfn`'s bytes, zeroes first if it has never been written.
    #[inline]
    fn page_mut(&mut self, pfn: u64) -> &mut [u8] {
        self.changed();
        let slot = match self.slot_of(pfn) {
            Some(s) => s,
            None => self.materialize(pfn),
        };
        &mut self.pages[slot]
    }

    /// A first write to page `pfn`: give it zeroed bytes and a slot.
    #[cold]
    #[inline(never)]
    fn materialize(&mut self, pfn: u64) -> usize {
        self.changed();
        let fresh = vec![0u8; PAGE as usize].into_boxed_slice();
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.pages[s as usize] = fresh;
                self.slot_pfn[s as usize] = pfn + 1;
                s
            }
            None => {
                self.pages.push(fresh);
                self.slot_pfn.push(pfn + 1);
                (self.pages.len() - 1) as u32
            }
        };
        self.set_slot(pfn, slot + 1);
        slot as usize
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated.values().sum()
    }

    /// Number of live allocations.
    pub fn allocations(&self) -> usize {
        self.allocated.len()
    }

    pub fn read(&self, addr: PhysAddr, out: &mut [u8]) {
        let mut pos = 0usize;
        while pos < out.len() {
            let a = addr.0 + pos as u64;
            let (pfn, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(out.len() - pos);
            match self.slot_of(pfn) {
                Some(p) => out[pos..pos + n].copy_from_slice(&self.pages[p][off..off + n]),
                None => out[pos..pos + n].fill(0),
            }
            pos += n;
        }
    }

    pub fn write(&mut self, addr: PhysAddr, data: &[u8]) {
        let mut pos = 0usize;
        while pos < data.len() {
            let a = addr.0 + pos as u64;
            let (pfn, off) = (a / PAGE, (a % PAGE) as usize);
            let n = (PAGE as usize - off).min(data.len() - pos);
            let page = self.page_mut(pfn);
            page[off..off + n].copy_from_slice(&data[pos..pos + n]);
            pos += n;
        }
    }

    /// Copy `len` bytes inside simulated memory (a bounce copy).
    pub fn copy(&mut self, dst: PhysAddr, src: PhysAddr, len: u64) {
        let mut buf = vec![0u8; len as usize];
        self.read(src, &mut buf);
        self.write(dst, &buf);
    }

    #[inline(always)]
    pub fn read_u64(&self, addr: PhysAddr) -> u64 {
        // One lookup when the word sits inside one page, as every aligned descriptor does.
        let off = (addr.0 % PAGE) as usize;
        if off + 8 <= PAGE as usize {
            return match self.slot_of(addr.0 / PAGE) {
                Some(p) => {
                    u64::from_le_bytes(self.pages[p][off..off + 8].try_into().unwrap_or([0; 8]))
                }
                None => 0,
            };
        }
        self.read_u64_straddling(addr)
    }

    /// [`PhysMem::read_u64`] for a caller that remembers where it last found the page: `hint`
    /// holds an index into the page store, checked against the page-frame number before use and
    /// updated on a miss. A page-table walk keeps one per level: the table it reads at a level is
    /// almost always the one it read there last, and a checked index puts the descriptor's load
    /// at an address known before the previous level's descriptor has arrived (the section
    /// table's entry depends on that descriptor: without the hints the iommu benches take 8 to
    /// 19 % longer). Same bytes as [`PhysMem::read_u64`], always.
    #[inline(always)]
    pub fn read_u64_hinted(&self, addr: PhysAddr, hint: &Cell<u32>) -> u64 {
        let (pfn, off) = (addr.0 / PAGE, (addr.0 % PAGE) as usize);
        if off + 8 > PAGE as usize {
            return self.read_u64_straddling(addr);
        }
        let h = hint.get() as usize;
        let slot = if self.slot_pfn.get(h) == Some(&(pfn + 1)) {
            h
        } else {
            match self.slot_of(pfn) {
                Some(s) => {
                    hint.set(s as u32);
                    s
                }
                None => return 0,
            }
        };
        u64::from_le_bytes(self.pages[slot][off..off + 8].try_into().unwrap_or([0; 8]))
    }

    /// [`PhysMem::write_u64`] with the hint of [`PhysMem::read_u64_hinted`].
    #[inline(always)]
    pub fn write_u64_hinted(&mut self, addr: PhysAddr, v: u64, hint: &Cell<u32>) {
        let (pfn, off) = (addr.0 / PAGE, (addr.0 % PAGE) as usize);
        if off + 8 > PAGE as usize {
            return self.write(addr, &v.to_le_bytes());
        }
        self.changed();
        let h = hint.get() as usize;
        let slot = if self.slot_pfn.get(h) == Some(&(pfn + 1)) {
            h
        } else {
            let s = match self.slot_of(pfn) {
                Some(s) => s,
                None => self.materialize(pfn),
            };
            hint.set(s as u32);
            s
        };
        self.pages[slot][off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// [`PhysMem::read_u64_hinted`] of a word and then, if `update` of its value is
    /// `Some(new)`, [`PhysMem::write_u64_hinted`] of `new` there, with the page looked up once
    /// for both (a descriptor checked and replaced: a page-table walk's last step). Returns the
    /// word as read. Same bytes, stamp and hint as the read and the write one after the other.
    #[inline(always)]
    pub fn update_u64_hinted(
        &mut self,
        addr: PhysAddr,
        hint: &Cell<u32>,
        update: impl FnOnce(u64) -> Option<u64>,
    ) -> u64 {
        let (pfn, off) = (addr.0 / PAGE, (addr.0 % PAGE) as usize);
        let h = hint.get() as usize;
        let slot = if off + 8 > PAGE as usize {
            None
        } else if self.slot_pfn.get(h) == Some(&(pfn + 1)) {
            Some(h)
        } else {
            self.slot_of(pfn)
        };
        let Some(slot) = slot else {
            // Straddling a page, or in a page never written: the read and the write apart.
            let old = self.read_u64_hinted(addr, hint);
            if let Some(new) = update(old) {
                self.write_u64_hinted(addr, new, hint);
            }
            return old;
        };
        hint.set(slot as u32);
        let word = &mut self.pages[slot][off..off + 8];
        let old = u64::from_le_bytes((&*word).try_into().unwrap_or([0; 8]));
        if let Some(new) = update(old) {
            word.copy_from_slice(&new.to_le_bytes());
            self.changed();
        }
        old
    }

    /// A word across a page boundary (never a descriptor: those are aligned).
    #[cold]
    fn read_u64_straddling(&self, addr: PhysAddr) -> u64 {
        let mut b = [0u8; 8];
        self.read(addr, &mut b);
        u64::from_le_bytes(b)
    }

    #[inline]
    pub fn write_u64(&mut self, addr: PhysAddr, v: u64) {
        let off = (addr.0 % PAGE) as usize;
        if off + 8 <= PAGE as usize {
            let page = self.page_mut(addr.0 / PAGE);
            page[off..off + 8].copy_from_slice(&v.to_le_bytes());
            return;
        }
        self.write(addr, &v.to_le_bytes());
    }

    /// `out.len()` little-endian words from `addr` (a run of descriptors), one page lookup per
    /// page the run touches.
    #[inline]
    pub fn read_u64s(&self, addr: PhysAddr, out: &mut [u64]) {
        if !addr.0.is_multiple_of(8) {
            for (i, w) in out.iter_mut().enumerate() {
                *w = self.read_u64(PhysAddr(addr.0 + i as u64 * 8));
            }
            return;
        }
        let mut pos = 0usize;
        while pos < out.len() {
            let a = addr.0 + pos as u64 * 8;
            let (pfn, off) = (a / PAGE, (a % PAGE) as usize);
            let n = ((PAGE as usize - off) / 8).min(out.len() - pos);
            let dst = &mut out[pos..pos + n];
            match self.slot_of(pfn) {
                Some(p) => {
                    for (w, b) in dst
                        .iter_mut()
                        .zip(self.pages[p][off..off + n * 8].chunks_exact(8))
                    {
                        *w = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    }
                }
                None => dst.fill(0),
            }
            pos += n;
        }
    }

    /// Write `vals` as little-endian words from `addr`, one page lookup per page touched.
    pub fn write_u64s(&mut self, addr: PhysAddr, vals: &[u64]) {
        self.write_u64s_with(addr, vals.len() as u64, |i| vals[i as usize]);
    }

    /// Write `n` little-endian words from `addr`, word `i` being `f(i)` (a run of descriptors
    /// computed as they are stored, with no buffer), one page lookup per page touched.
    #[inline]
    pub fn write_u64s_with(&mut self, addr: PhysAddr, n: u64, mut f: impl FnMut(u64) -> u64) {
        if !addr.0.is_multiple_of(8) {
            for i in 0..n {
                self.write_u64(PhysAddr(addr.0 + i * 8), f(i));
            }
            return;
        }
        let mut pos = 0u64;
        while pos < n {
            let a = addr.0 + pos * 8;
            let (pfn, off) = (a / PAGE, (a % PAGE) as usize);
            let k = ((PAGE - off as u64) / 8).min(n - pos);
            let page = self.page_mut(pfn);
            for (i, b) in page[off..off + k as usize * 8]
                .chunks_exact_mut(8)
                .enumerate()
            {
                b.copy_from_slice(&f(pos + i as u64).to_le_bytes());
            }
            pos += k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesce() {
        let mut m = PhysMem::single(PhysAddr(0x8000_0000), 1 << 20);
        let a = m.alloc(0, 4096).unwrap();
        let b = m.alloc(0, 8192).unwrap();
        assert!(b.is_aligned(8192));
        assert_ne!(a, b);
        m.free(a, 4096).unwrap();
        m.free(b, 8192).unwrap();
        assert_eq!(m.allocated_bytes(), 0);
        // Everything coalesced back: the whole node is one free block again.
        assert_eq!(m.alloc(0, 1 << 20).unwrap(), PhysAddr(0x8000_0000));
        assert!(matches!(
            m.alloc(0, 4096),
            Err(PhysMemError::OutOfMemory { .. })
        ));
    }

    #[test]
    fn word_runs_cross_pages_and_freed_pages_read_zero() {
        let mut m = PhysMem::single(PhysAddr(0), 1 << 20);
        let a = m.alloc(0, 16384).unwrap();
        // 600 words from 8 bytes before the end of the first page: three pages touched.
        let start = PhysAddr(a.0 + 4096 - 8);
        let vals: Vec<u64> = (0..600)
            .map(|i| 0x0101_0101_0101_0101 * (i % 255 + 1))
            .collect();
        m.write_u64s(start, &vals);
        let mut back = vec![0u64; 600];
        m.read_u64s(start, &mut back);
        assert_eq!(back, vals);
        // The same bytes through the byte interface, and word by word.
        let mut bytes = vec![0u8; 600 * 8];
        m.read(start, &mut bytes);
        assert_eq!(&bytes[8..16], &vals[1].to_le_bytes());
        assert_eq!(m.read_u64(PhysAddr(start.0 + 8 * 599)), vals[599]);
        // Unaligned runs take the same bytes.
        let mut odd = vec![0u64; 3];
        m.read_u64s(PhysAddr(start.0 + 4), &mut odd);
        let mut w = [0u8; 8];
        m.read(PhysAddr(start.0 + 4), &mut w);
        assert_eq!(odd[0], u64::from_le_bytes(w));
        // A freed page forgets its bytes, even with its lookup cached, and a page reused after
        // it starts from zeroes.
        assert_eq!(m.read_u64(a), 0);
        m.write_u64(a, 7);
        assert_eq!(m.read_u64(a), 7);
        m.free(a, 16384).unwrap();
        assert_eq!(m.read_u64(a), 0);
        let mut z = vec![1u64; 600];
        m.read_u64s(start, &mut z);
        assert!(z.iter().all(|&w| w == 0));
        let b = m.alloc(0, 4096).unwrap();
        assert_eq!(m.read_u64(b), 0);
        m.write_u64(PhysAddr(b.0 + 8), 9);
        assert_eq!(m.read_u64(b), 0);
        assert_eq!(m.read_u64(PhysAddr(b.0 + 8)), 9);
    }

    #[test]
    fn bad_free_is_an_error() {
        let mut m = PhysMem::single(PhysAddr(0), 1 << 20);
        let a = m.alloc(0, 4096).unwrap();
        assert!(m.free(PhysAddr(a.0 + 4096), 4096).is_err());
        assert!(m.free(a, 8192).is_err());
        m.free(a, 4096).unwrap();
        assert!(m.free(a, 4096).is_err());
    }

    /// Every way of changing bytes moves the write stamp, reading never does, and two memories
    /// share a stamp only as a clone and its unchanged original.
    #[test]
    fn the_write_stamp_moves_with_every_change() {
        let mut m = PhysMem::single(PhysAddr(0x1000_0000), 1 << 20);
        let a = m.alloc(0, 8192).unwrap();
        let hint = Cell::new(0);
        let last = Cell::new(m.write_stamp());
        let moved = |m: &PhysMem, what: &str| {
            assert_ne!(m.write_stamp(), last.get(), "{what}");
            last.set(m.write_stamp());
        };
        m.write(a, &[1, 2, 3]);
        moved(&m, "write");
        m.write_u64(PhysAddr(a.0 + 8), 7);
        moved(&m, "write_u64");
        m.write_u64_hinted(PhysAddr(a.0 + 4096), 9, &hint);
        moved(&m, "write_u64_hinted, new page");
        m.write_u64_hinted(PhysAddr(a.0 + 4104), 9, &hint);
        moved(&m, "write_u64_hinted");
        m.write_u64s(PhysAddr(a.0 + 64), &[1, 2]);
        moved(&m, "write_u64s");
        m.copy(PhysAddr(a.0 + 128), a, 16);
        moved(&m, "copy");
        let mut buf = [0u8; 16];
        m.read(a, &mut buf);
        let _ = (m.read_u64(a), m.read_u64_hinted(a, &hint));
        assert_eq!(m.write_stamp(), last.get(), "reads");
        let c = m.clone();
        assert_eq!(c.write_stamp(), m.write_stamp());
        m.free(a, 8192).unwrap();
        moved(&m, "free");
        let fresh = PhysMem::single(PhysAddr(0x1000_0000), 1 << 20);
        assert_ne!(
            fresh.write_stamp(),
            PhysMem::single(PhysAddr(0x1000_0000), 1 << 20).write_stamp()
        );
    }

    /// `update_u64_hinted` is the hinted read and, when the update asks, the hinted write: the
    /// same value read, bytes, write stamp and hint, on a hinted page, a page found by lookup,
    /// a page never written, a word straddling two pages, with and without a write.
    #[test]
    fn an_update_is_the_read_and_the_write() {
        let mut m = PhysMem::single(PhysAddr(0x1000_0000), 1 << 20);
        let a = m.alloc(0, 4 * 4096).unwrap();
        m.write_u64(a, 5);
        m.write_u64(PhysAddr(a.0 + 4096), 6);
        let addrs = [
            0u64,
            8,
            0,
            4096,
            4096 + 16,
            2 * 4096,
            4096 - 4,
            3 * 4096 - 4,
            8,
        ];
        for (i, &off) in addrs.iter().enumerate() {
            for write in [false, true] {
                let (mut x, mut y) = (m.clone(), m.clone());
                let (hx, hy) = (Cell::new(i as u32 % 2), Cell::new(i as u32 % 2));
                let addr = PhysAddr(a.0 + off);
                let new = 0x1111 * (i as u64 + 1);
                let got = x.update_u64_hinted(addr, &hx, |old| write.then_some(old + new));
                let old = y.read_u64_hinted(addr, &hy);
                if write {
                    y.write_u64_hinted(addr, old + new, &hy);
                }
                assert_eq!(got, old, "{off:#x}");
                assert_eq!(x.read_u64(addr), y.read_u64(addr), "{off:#x}");
                assert_eq!(x.write_stamp() == m.write_stamp(), !write, "{off:#x}");
                assert_eq!(hx.get(), hy.get(), "{off:#x}");
                let (mut bx, mut by) = (vec![0u8; 4 * 4096], vec![0u8; 4 * 4096]);
                x.read(a, &mut bx);
                y.read(a, &mut by);
                assert_eq!(bx, by, "{off:#x}");
                if write {
                    m = x;
                }
            }
        }
    }

    #[test]
    fn bytes_round_trip_across_pages() {
        let mut m = PhysMem::single(PhysAddr(0), 1 << 20);
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        m.write(PhysAddr(4000), &data);
        let mut back = vec![0u8; 10_000];
        m.read(PhysAddr(4000), &mut back);
        assert_eq!(back, data);
        m.copy(PhysAddr(0x20000), PhysAddr(4000), 10_000);
        m.read(PhysAddr(0x20000), &mut back);
        assert_eq!(back, data);
        m.write_u64(PhysAddr(0x30008), 0xdead_beef_0000_0003);
        assert_eq!(m.read_u64(PhysAddr(0x30008)), 0xdead_beef_0000_0003);
        assert_eq!(m.read_u64(PhysAddr(0x40000)), 0);
    }

    #[test]
    fn nodes_are_separate() {
        let mut m = PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(0),
                size: 1 << 20,
            },
            NodeRange {
                node: 1,
                start: PhysAddr(1 << 30),
                size: 1 << 20,
            },
        ]);
        let a = m.alloc(1, 4096).unwrap();
        assert_eq!(m.node_of(a), Some(1));
        assert!(matches!(m.alloc(7, 4096), Err(PhysMemError::NoSuchNode(7))));
    }

    #[test]
    fn memblock_places_top_down_or_bottom_up_inside_the_range() {
        let mut m = PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(0),
                size: 1 << 30,
            },
            NodeRange {
                node: 1,
                start: PhysAddr(1 << 30),
                size: 1 << 30,
            },
        ]);
        // Any node, top-down: the highest fit of all memory.
        let a = m.memblock_alloc_range(None, 4 << 20, 4 << 20, 0, u64::MAX, true);
        assert_eq!(a, Some(PhysAddr((2 << 30) - (4 << 20))));
        // Node 0, below 512 MiB, top-down.
        let b = m.memblock_alloc_range(Some(0), 2 << 20, 2 << 20, 0, 512 << 20, true);
        assert_eq!(b, Some(PhysAddr((512 << 20) - (2 << 20))));
        // Node 1, bottom-up from its start.
        let c = m.memblock_alloc_range(Some(1), 2 << 20, 2 << 20, 0, u64::MAX, false);
        assert_eq!(c, Some(PhysAddr(1 << 30)));
        // A range no node has room in.
        assert_eq!(
            m.memblock_alloc_range(Some(0), 2 << 30, 4096, 0, u64::MAX, true),
            None
        );
    }

    #[test]
    fn alloc_pages_node_walks_the_zonelist_below_the_zone_limit() {
        let mut m = PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(0),
                size: 1 << 20,
            },
            NodeRange {
                node: 1,
                start: PhysAddr(1 << 30),
                size: 1 << 20,
            },
            NodeRange {
                node: 2,
                start: PhysAddr(2 << 30),
                size: 1 << 20,
            },
        ]);
        m.set_zonelists(BTreeMap::from([(1, vec![1, 2, 0])]));
        let a = m.alloc_pages_node(1, 8, None).unwrap();
        assert_eq!(m.node_of(a), Some(1));
        // Node 1 is full: the next block comes from node 2, its zonelist's second.
        let b = m.alloc_pages_node(1, 8, None).unwrap();
        assert_eq!(m.node_of(b), Some(2));
        // Below a 1 GiB zone limit only node 0 qualifies.
        let c = m.alloc_pages_node(1, 0, Some(1 << 30)).unwrap();
        assert_eq!(m.node_of(c), Some(0));
        // A node without a zonelist entry tries only itself.
        assert_eq!(m.zonelist(0), vec![0]);
        m.free(a, 1 << 20).unwrap();
        assert_eq!(m.free_bytes(1), 1 << 20);
    }
}
