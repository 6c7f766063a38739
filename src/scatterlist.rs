//! Scatter-gather lists.
//!
//! Kernel counterpart: `struct scatterlist` and `sg_table` (include/linux/scatterlist.h).
//!
//! Models: each entry names a physical page, an offset into it and a length; once mapped it also
//! carries `dma_address` and `dma_length`. A mapping may merge entries (iommu-dma does), so the
//! number of mapped entries (`nents` returned by map_sg) can be smaller than `orig_nents`.
//!
//! Invariants: `offset < PAGE_SIZE` relative to `page`; `length > 0` for entries a caller builds.

use crate::types::{DmaAddr, PhysAddr};

/// The kernel's base page size on every platform modelled so far.
pub const PAGE_SIZE: u64 = 4096;

/// One scatterlist entry. Packed to 4 bytes (28 bytes where the natural layout pads to 32, as the
/// kernel's `struct scatterlist` does on arm64): a workload of millions of entries holds the
/// whole list, and this is most of the model's memory in such a run. Fields are read and written
/// by value; a reference to an 8-byte field of a packed struct cannot be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct SgEntry {
    /// Physical address of the page (`sg_page(sg)` turned into a physical address).
    pub page: PhysAddr,
    pub offset: u32,
    pub length: u32,
    /// Filled by map_sg; `DmaAddr::MAPPING_ERROR` until then.
    pub dma_address: DmaAddr,
    pub dma_length: u32,
}

impl SgEntry {
    /// `sg_phys()`: where the data of this entry starts.
    pub fn phys(&self) -> PhysAddr {
        PhysAddr(self.page.0 + u64::from(self.offset))
    }
}

/// An `sg_table`: the entries and how many of them carry a DMA mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SgTable {
    pub entries: Vec<SgEntry>,
    /// Mapped entries (`nents` after map_sg); 0 while unmapped.
    pub nents: usize,
}

impl SgTable {
    /// Build a list covering `[start, start + total)` physically contiguous memory, cut into
    /// entries of the given sizes (cycled if shorter than needed). Each entry starts at the next
    /// byte, so entry boundaries need not be page aligned when sizes are not page multiples.
    pub fn from_contiguous(start: PhysAddr, total: u64, sizes: &[u32]) -> SgTable {
        assert!(!sizes.is_empty() && sizes.iter().all(|&s| s > 0));
        let mut entries = Vec::new();
        let mut pos = 0u64;
        let mut i = 0usize;
        while pos < total {
            let want = u64::from(sizes[i % sizes.len()]).min(total - pos);
            let phys = start.0 + pos;
            let page = phys & !(PAGE_SIZE - 1);
            entries.push(SgEntry {
                page: PhysAddr(page),
                offset: (phys - page) as u32,
                length: want as u32,
                dma_address: DmaAddr::MAPPING_ERROR,
                dma_length: 0,
            });
            pos += want;
            i += 1;
        }
        SgTable { entries, nents: 0 }
    }

    /// Build a list of one whole page per entry, at the pages given, in order
    /// (`sg_set_buf(sg, page, PAGE_SIZE)` over a table of separately allocated pages).
    pub fn from_pages(pages: impl IntoIterator<Item = PhysAddr>) -> SgTable {
        let entries = pages
            .into_iter()
            .map(|page| SgEntry {
                page,
                offset: 0,
                length: PAGE_SIZE as u32,
                dma_address: DmaAddr::MAPPING_ERROR,
                dma_length: 0,
            })
            .collect();
        SgTable { entries, nents: 0 }
    }

    pub fn orig_nents(&self) -> usize {
        self.entries.len()
    }

    pub fn total_len(&self) -> u64 {
        self.entries.iter().map(|e| u64::from(e.length)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_list_covers_the_buffer_exactly() {
        let t = SgTable::from_contiguous(PhysAddr(0x8000_0000), 10 << 20, &[4096]);
        assert_eq!(t.orig_nents(), 2560);
        assert_eq!(t.total_len(), 10 << 20);
        assert!(t.entries.iter().all(|e| e.offset == 0));
    }

    #[test]
    fn a_list_of_pages_has_a_whole_page_an_entry() {
        let t = SgTable::from_pages([PhysAddr(0x3000), PhysAddr(0x1000)]);
        assert_eq!(t.orig_nents(), 2);
        assert_eq!(t.total_len(), 2 * PAGE_SIZE);
        assert_eq!(t.entries[1].phys(), PhysAddr(0x1000));
        assert!(t.entries.iter().all(|e| e.offset == 0));
    }

    #[test]
    fn mixed_sizes_cycle_and_the_tail_is_short() {
        let t = SgTable::from_contiguous(PhysAddr(0x1000), 10_000, &[4096, 1000]);
        let lens: Vec<u32> = t.entries.iter().map(|e| e.length).collect();
        assert_eq!(lens, vec![4096, 1000, 4096, 808]);
        assert_eq!(t.entries[1].phys(), PhysAddr(0x2000));
        assert_eq!(t.entries[2].phys(), PhysAddr(0x1000 + 5096));
        assert_eq!(t.entries[2].offset, (5096 - 4096) as u32);
    }

    /// The packed entry: what an 8 GiB list of 4 KB entries holds in memory (2,097,152 entries:
    /// 56 MiB rather than 64).
    #[test]
    fn an_entry_takes_28_bytes() {
        assert_eq!(std::mem::size_of::<SgEntry>(), 28);
    }
}
