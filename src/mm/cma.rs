//! The Contiguous Memory Allocator: areas reserved at boot, and a bitmap allocator per area.
//!
//! Kernel counterpart: mm/cma.c — `cma_declare_contiguous_nid()` (reserve an area at boot
//! through memblock), `cma_alloc()` (first fit in the area's bitmap with
//! `bitmap_find_next_zero_area_off()`, one bit per `2^order_per_bit` pages, the start aligned to
//! `2^align` pages in physical address terms), `cma_release()` (clear the bits, refuse pages
//! outside the area). Read in 5.10/5.11, 5.12, 5.15, 6.0 and 6.6.
//!
//! What it models: the reservation rules of each release ([`CmaRules`]): the minimum alignment
//! of an area (5.10–5.17: `PAGE_SIZE << max(MAX_ORDER - 1, pageblock_order)`, 4 MiB on arm64
//! with 4 KiB pages; from 5.18 `CMA_MIN_ALIGNMENT_BYTES`, one pageblock, 2 MiB), size rounded
//! up to it, memblock top-down below the limit, and from 5.12 a bottom-up attempt above 4 GiB
//! first when memory reaches that far; the per-node areas pass `exact_nid`, so an area that does
//! not fit its node fails rather than landing elsewhere. The area's pages are taken out of the
//! page allocator: the kernel gives them back as `MIGRATE_CMA` pageblocks, which only movable
//! allocations use, never the unmovable `GFP_KERNEL` pages dma-direct asks for, so for every
//! allocation this model makes the two are the same.
//!
//! Invariants: a set bit is an allocated unit; an allocation's units are contiguous, inside the
//! area, and start at a page frame aligned as asked; `release` accepts exactly the pages the
//! area handed out (a range outside it is `Ok(false)`, as `cma_release` returns false; a range
//! inside it that is not allocated is an error, where the kernel would corrupt its bitmap).

use crate::mm::physmem::PhysMem;
use crate::types::PhysAddr;

pub const PAGE_SHIFT: u32 = 12;
#[cfg(test)]
const PAGE: u64 = 1 << PAGE_SHIFT;

/// How a release reserves CMA areas (`cma_declare_contiguous_nid()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaRules {
    /// The least alignment (and size granule) of an area, in bytes.
    pub min_align: u64,
    /// 5.12+: try a bottom-up placement above 4 GiB first, when memory reaches `4 GiB + size`.
    pub bottom_up_above_4g: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmaError {
    /// `-EINVAL` from `cma_declare_contiguous_nid()`.
    #[error("{0}")]
    Invalid(String),
    /// `-ENOMEM`: memblock found no place.
    #[error("no {size:#x} bytes at {align:#x} alignment below {limit:#x}{}", .node.map(|n| format!(" on node {n}")).unwrap_or_default())]
    NoMemory {
        size: u64,
        align: u64,
        limit: u64,
        node: Option<u32>,
    },
    /// A release of pages inside the area that it had not handed out.
    #[error("cma_release of {count} pages at {addr} in area {area}: not allocated from it")]
    BadRelease {
        area: String,
        addr: PhysAddr,
        count: u64,
    },
}

/// One area (`struct cma`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmaArea {
    pub name: String,
    pub base_pfn: u64,
    /// Pages in the area.
    pub count: u64,
    pub order_per_bit: u32,
    /// The node the area was reserved on (the node of its memory).
    pub node: u32,
    bitmap: Vec<u64>,
}

impl CmaArea {
    /// An area over `[base, base + size)` (`cma_init_reserved_mem()`); the caller has taken the
    /// memory out of the page allocator.
    pub fn new(name: &str, base: PhysAddr, size: u64, order_per_bit: u32, node: u32) -> CmaArea {
        let count = size >> PAGE_SHIFT;
        let bits = count >> order_per_bit;
        CmaArea {
            name: name.to_string(),
            base_pfn: base.0 >> PAGE_SHIFT,
            count,
            order_per_bit,
            node,
            bitmap: vec![0; bits.div_ceil(64) as usize],
        }
    }

    pub fn base(&self) -> PhysAddr {
        PhysAddr(self.base_pfn << PAGE_SHIFT)
    }

    pub fn size(&self) -> u64 {
        self.count << PAGE_SHIFT
    }

    /// `cma_bitmap_maxno()`.
    fn maxno(&self) -> u64 {
        self.count >> self.order_per_bit
    }

    fn bit(&self, i: u64) -> bool {
        self.bitmap[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    fn set(&mut self, i: u64, v: bool) {
        let w = &mut self.bitmap[(i / 64) as usize];
        if v {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    /// `cma_bitmap_pages_to_bits()`.
    fn pages_to_bits(&self, pages: u64) -> u64 {
        pages.div_ceil(1 << self.order_per_bit)
    }

    /// `bitmap_find_next_zero_area_off()`: the first index from `start` where `nr` clear bits
    /// begin and `(index + offset) & mask == 0`; `maxno` or more when there is none.
    fn find_zero_area(&self, mut start: u64, nr: u64, mask: u64, offset: u64) -> u64 {
        let size = self.maxno();
        loop {
            let mut index = start;
            while index < size && self.bit(index) {
                index += 1;
            }
            // Round up so that (index + offset) is a multiple of mask + 1.
            let index = ((index + offset + mask) & !mask).saturating_sub(offset);
            let end = index.saturating_add(nr);
            if end > size {
                return end;
            }
            match (index..end).find(|&i| self.bit(i)) {
                Some(i) => start = i + 1,
                None => return index,
            }
        }
    }

    /// `cma_alloc(cma, count, align)`: `count` pages whose first page frame is a multiple of
    /// `2^align` pages, or `None` when the area has no such run free.
    pub fn alloc(&mut self, count: u64, align: u32) -> Option<PhysAddr> {
        if count == 0 || self.count == 0 || align >= 52 {
            return None;
        }
        let mask = if align <= self.order_per_bit {
            0
        } else {
            (1u64 << (align - self.order_per_bit)) - 1
        };
        let offset = (self.base_pfn & ((1u64 << align) - 1)) >> self.order_per_bit;
        let bits = self.pages_to_bits(count);
        if bits > self.maxno() {
            return None;
        }
        let no = self.find_zero_area(0, bits, mask, offset);
        if no >= self.maxno() || no + bits > self.maxno() {
            return None;
        }
        for i in no..no + bits {
            self.set(i, true);
        }
        Some(PhysAddr(
            (self.base_pfn + (no << self.order_per_bit)) << PAGE_SHIFT,
        ))
    }

    /// Whether the page at `addr` lies inside the area.
    pub fn contains(&self, addr: PhysAddr) -> bool {
        let pfn = addr.0 >> PAGE_SHIFT;
        pfn >= self.base_pfn && pfn < self.base_pfn + self.count
    }

    /// `cma_release(cma, pages, count)`: `Ok(false)` when the pages are not the area's.
    pub fn release(&mut self, addr: PhysAddr, count: u64) -> Result<bool, CmaError> {
        if !self.contains(addr) {
            return Ok(false);
        }
        let pfn = addr.0 >> PAGE_SHIFT;
        let bad = || CmaError::BadRelease {
            area: self.name.clone(),
            addr,
            count,
        };
        if pfn + count > self.base_pfn + self.count || count == 0 {
            return Err(bad());
        }
        let no = (pfn - self.base_pfn) >> self.order_per_bit;
        let bits = self.pages_to_bits(count);
        if !(pfn - self.base_pfn).is_multiple_of(1 << self.order_per_bit)
            || (no..no + bits).any(|i| !self.bit(i))
        {
            return Err(bad());
        }
        for i in no..no + bits {
            self.set(i, false);
        }
        Ok(true)
    }

    /// Pages currently allocated (set bits times pages per bit).
    pub fn used_pages(&self) -> u64 {
        let set: u64 = self.bitmap.iter().map(|w| u64::from(w.count_ones())).sum();
        set << self.order_per_bit
    }
}

/// `cma_declare_contiguous_nid(base, size, limit, alignment, order_per_bit, fixed, name, nid)`
/// at boot, over `mem`'s free memory: the area, on the node its memory belongs to.
#[allow(clippy::too_many_arguments)]
pub fn cma_declare_contiguous_nid(
    mem: &mut PhysMem,
    rules: CmaRules,
    base: u64,
    size: u64,
    limit: u64,
    alignment: u64,
    order_per_bit: u32,
    fixed: bool,
    name: &str,
    nid: Option<u32>,
) -> Result<CmaArea, CmaError> {
    let inval = |m: String| Err(CmaError::Invalid(m));
    if size == 0 {
        return inval("size 0".into());
    }
    if alignment != 0 && !alignment.is_power_of_two() {
        return inval(format!("alignment {alignment:#x} is not a power of two"));
    }
    let alignment = alignment.max(rules.min_align);
    if fixed && base & (alignment - 1) != 0 {
        return inval(format!(
            "region at {base:#x} must be aligned to {alignment:#x} bytes"
        ));
    }
    let (Some(base), Some(size)) = (
        base.checked_next_multiple_of(alignment),
        size.checked_next_multiple_of(alignment),
    ) else {
        return inval("size or base beyond the address space".into());
    };
    let limit = limit & !(alignment - 1);
    let fixed = fixed && base != 0;
    if !(size >> PAGE_SHIFT).is_multiple_of(1 << order_per_bit) {
        return inval("size not a multiple of the pages per bit".into());
    }
    let memblock_end = mem
        .nodes()
        .iter()
        .map(|n| n.start.0 + n.size)
        .max()
        .unwrap_or(0);
    let limit = if limit == 0 || limit > memblock_end {
        memblock_end
    } else {
        limit
    };
    if base.saturating_add(size) > limit {
        return inval(format!(
            "size {size:#x} of region at {base:#x} exceeds limit {limit:#x}"
        ));
    }
    let addr = if fixed {
        // memblock_reserve of exactly [base, base + size): the range must be free memory.
        let node = mem.node_of(PhysAddr(base));
        match node.and_then(|n| {
            mem.memblock_alloc_range(Some(n), size, alignment, base, base + size, false)
        }) {
            Some(a) => a,
            None => {
                return inval(format!(
                    "region {base:#x}+{size:#x} is not free memory (-EBUSY)"
                ));
            }
        }
    } else {
        let mut addr = None;
        const SZ_4G: u64 = 1 << 32;
        if rules.bottom_up_above_4g && memblock_end >= SZ_4G + size {
            addr = mem.memblock_alloc_range(nid, size, alignment, SZ_4G, limit, false);
        }
        // arm64 has no highmem: high_memory's boundary is the end of memory, so the kernel's
        // "try high memory first" step never applies.
        match addr.or_else(|| mem.memblock_alloc_range(nid, size, alignment, base, limit, true)) {
            Some(a) => a,
            None => {
                return Err(CmaError::NoMemory {
                    size,
                    align: alignment,
                    limit,
                    node: nid,
                });
            }
        }
    };
    let node = mem.node_of(addr).unwrap_or(0);
    Ok(CmaArea::new(name, addr, size, order_per_bit, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::physmem::NodeRange;

    fn two_nodes() -> PhysMem {
        PhysMem::new(vec![
            NodeRange {
                node: 0,
                start: PhysAddr(0),
                size: 8 << 30,
            },
            NodeRange {
                node: 1,
                start: PhysAddr(8 << 30),
                size: 8 << 30,
            },
        ])
    }

    const R5_10: CmaRules = CmaRules {
        min_align: 4 << 20,
        bottom_up_above_4g: false,
    };
    const R6_6: CmaRules = CmaRules {
        min_align: 2 << 20,
        bottom_up_above_4g: true,
    };

    #[test]
    fn areas_are_placed_as_each_release_places_them() {
        // The default area below a 4 GiB limit: top-down, just under it, on node 0.
        let mut m = two_nodes();
        let a = cma_declare_contiguous_nid(
            &mut m,
            R5_10,
            0,
            64 << 20,
            1 << 32,
            0,
            0,
            false,
            "reserved",
            None,
        )
        .unwrap();
        assert_eq!(a.base(), PhysAddr((1 << 32) - (64 << 20)));
        assert_eq!(a.node, 0);
        // A per-node area, 5.10: top-down in its node.
        let p = cma_declare_contiguous_nid(
            &mut m,
            R5_10,
            0,
            16 << 20,
            0,
            0,
            0,
            false,
            "pernuma1",
            Some(1),
        )
        .unwrap();
        assert_eq!(p.base(), PhysAddr((16 << 30) - (16 << 20)));
        assert_eq!(p.node, 1);
        // 6.6: bottom-up from 4 GiB first; node 0's area sits at 4 GiB, node 1's at its start.
        let mut m = two_nodes();
        let p0 =
            cma_declare_contiguous_nid(&mut m, R6_6, 0, 16 << 20, 0, 0, 0, false, "numa0", Some(0))
                .unwrap();
        assert_eq!(p0.base(), PhysAddr(1 << 32));
        let p1 =
            cma_declare_contiguous_nid(&mut m, R6_6, 0, 16 << 20, 0, 0, 0, false, "numa1", Some(1))
                .unwrap();
        assert_eq!(p1.base(), PhysAddr(8 << 30));
        // The default area's limit lies below 4 GiB, so its bottom-up attempt finds nothing.
        let d = cma_declare_contiguous_nid(
            &mut m,
            R6_6,
            0,
            64 << 20,
            1 << 32,
            0,
            0,
            false,
            "reserved",
            None,
        )
        .unwrap();
        assert_eq!(d.base(), PhysAddr((1 << 32) - (64 << 20)));
        // Sizes round up to the release's minimum alignment.
        let s = cma_declare_contiguous_nid(&mut m, R5_10, 0, 5 << 20, 0, 0, 0, false, "x", None)
            .unwrap();
        assert_eq!(s.size(), 8 << 20);
    }

    #[test]
    fn an_area_that_does_not_fit_its_node_fails() {
        let mut m = two_nodes();
        let e = cma_declare_contiguous_nid(
            &mut m,
            R5_10,
            0,
            9 << 30,
            0,
            0,
            0,
            false,
            "pernuma0",
            Some(0),
        )
        .unwrap_err();
        assert!(matches!(e, CmaError::NoMemory { node: Some(0), .. }), "{e}");
        // Nothing was taken.
        assert_eq!(m.allocated_bytes(), 0);
        let e = cma_declare_contiguous_nid(
            &mut m,
            R5_10,
            0,
            64 << 20,
            32 << 20,
            0,
            0,
            false,
            "reserved",
            None,
        )
        .unwrap_err();
        assert!(matches!(e, CmaError::Invalid(_)), "{e}");
    }

    #[test]
    fn the_bitmap_allocates_aligned_first_fit_and_releases() {
        let mut a = CmaArea::new("t", PhysAddr(0x4000_0000), 64 * PAGE, 0, 0);
        let x = a.alloc(3, 0).unwrap();
        assert_eq!(x, PhysAddr(0x4000_0000));
        // Aligned to 4 pages: skips the 3 in use.
        let y = a.alloc(4, 2).unwrap();
        assert_eq!(y, PhysAddr(0x4000_0000 + 4 * PAGE));
        assert_eq!(a.used_pages(), 7);
        assert!(a.alloc(64, 0).is_none());
        assert_eq!(a.release(x, 3), Ok(true));
        assert!(a.release(x, 3).is_err(), "a double release is caught");
        assert_eq!(a.release(PhysAddr(0), 1), Ok(false));
        assert_eq!(a.release(y, 4), Ok(true));
        assert_eq!(a.used_pages(), 0);
        assert_eq!(a.alloc(64, 6), Some(PhysAddr(0x4000_0000)));
    }

    #[test]
    fn alignment_is_of_the_physical_frame_not_the_bit_index() {
        // An area starting at pfn 2 (mod 4): a 4-page-aligned run starts at bit 2.
        let mut a = CmaArea::new("t", PhysAddr(2 * PAGE), 16 * PAGE, 0, 0);
        let x = a.alloc(1, 2).unwrap();
        assert_eq!(x.0 / PAGE % 4, 0);
        assert_eq!(x, PhysAddr(4 * PAGE));
        // order_per_bit 1: two pages per bit; a 3-page allocation takes 2 bits.
        let mut b = CmaArea::new("t", PhysAddr(0), 16 * PAGE, 1, 0);
        b.alloc(3, 0).unwrap();
        assert_eq!(b.used_pages(), 4);
    }
}

/// Property tests: random allocations and releases of random counts and alignments, against a
/// page-by-page reference: no two live allocations overlap, each starts at a page frame
/// aligned as asked, each is the lowest fit (the kernel's first fit), every failure is genuine
/// (the reference finds no fit either), and releasing everything leaves nothing used.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Alloc {
            count: u64,
            align: u32,
        },
        /// Release the live allocation at this index (modulo the number live).
        Release(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u64..=40, 0u32..=6).prop_map(|(count, align)| Op::Alloc { count, align }),
            2 => any::<usize>().prop_map(Op::Release),
        ]
    }

    /// The lowest bit index where `count` pages fit free at a frame aligned to `2^align`.
    fn reference_fit(
        used: &[bool],
        base_pfn: u64,
        opb: u32,
        count: u64,
        align: u32,
    ) -> Option<u64> {
        let bits = count.div_ceil(1 << opb);
        let maxno = used.len() as u64;
        (0..maxno).find(|&i| {
            let pfn = base_pfn + (i << opb);
            i + bits <= maxno
                && pfn.is_multiple_of(1u64 << align.max(opb))
                && (i..i + bits).all(|b| !used[b as usize])
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn the_bitmap_allocator_matches_a_reference(
            base_units in 0u64..64,
            units in 1u64..=128,
            opb in 0u32..=2,
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let base_pfn = base_units << opb;
            let mut area = CmaArea::new("p", PhysAddr(base_pfn << PAGE_SHIFT), (units << opb) * PAGE, opb, 0);
            let mut used = vec![false; units as usize];
            let mut live: Vec<(u64, u64)> = Vec::new(); // (pfn, count)
            for op in ops {
                match op {
                    Op::Alloc { count, align } => {
                        let want = reference_fit(&used, base_pfn, opb, count, align);
                        let got = area.alloc(count, align);
                        match (got, want) {
                            (None, None) => {}
                            (Some(p), Some(i)) => {
                                let pfn = p.0 >> PAGE_SHIFT;
                                prop_assert_eq!(pfn, base_pfn + (i << opb), "first fit");
                                prop_assert_eq!(pfn % (1u64 << align), 0, "aligned");
                                prop_assert!(pfn + count <= base_pfn + (units << opb), "inside the area");
                                for &(q, c) in &live {
                                    prop_assert!(pfn + count <= q || q + c <= pfn, "overlap");
                                }
                                for b in i..i + count.div_ceil(1 << opb) {
                                    used[b as usize] = true;
                                }
                                live.push((pfn, count));
                            }
                            (g, w) => prop_assert!(false, "model {:?} vs reference {:?}", g, w),
                        }
                    }
                    Op::Release(k) if !live.is_empty() => {
                        let (pfn, count) = live.remove(k % live.len());
                        prop_assert_eq!(area.release(PhysAddr(pfn << PAGE_SHIFT), count), Ok(true));
                        let i = (pfn - base_pfn) >> opb;
                        for b in i..i + count.div_ceil(1 << opb) {
                            used[b as usize] = false;
                        }
                    }
                    Op::Release(_) => {}
                }
                let want: u64 = used.iter().filter(|u| **u).count() as u64;
                prop_assert_eq!(area.used_pages(), want << opb);
            }
            for (pfn, count) in live.drain(..) {
                prop_assert_eq!(area.release(PhysAddr(pfn << PAGE_SHIFT), count), Ok(true));
            }
            prop_assert_eq!(area.used_pages(), 0, "no leak");
            prop_assert!(area.alloc(units << opb, 0).is_some(), "the whole area is free again");
        }
    }
}
