//! The DMA layer's CMA areas: the default area from `cma=`, per-node areas from `cma_pernuma=`
//! (5.10) and `numa_cma=` (6.6), reserved at boot; and `dma_alloc_contiguous()` /
//! `dma_free_contiguous()`, which pick the area an allocation comes from and return it there.
//!
//! Kernel counterpart: kernel/dma/contiguous.c of 5.10 (`CONFIG_DMA_PERNUMA_CMA`,
//! `dma_pernuma_cma_reserve()` called by arm64's `bootmem_init()` after the default area was
//! reserved in `arm64_memblock_init()`) and of 6.6 (`CONFIG_DMA_NUMA_CMA`: both parameters,
//! `dma_numa_cma_reserve()` called first thing in `dma_contiguous_reserve()` on every
//! architecture); 7.1's is 6.6's. The default area's limit is arm64's
//! (`arch/arm64/mm/init.c`): `arm64_dma32_phys_limit` in 5.10, `arm64_dma_phys_limit` from 5.11
//! (ZONE_DMA, at most 32 bits), each through `max_zone_phys()` — 5.10's counts the zone from
//! the start of DRAM rounded down to its width, 5.11's is an absolute limit widened when DRAM
//! starts above it ([`ContiguousRules::max_zone_phys`]). Without `cma=` the default area's size
//! is the build's `CONFIG_CMA_SIZE_MBYTES` ([`CmaBoot::size_mbytes`]).
//!
//! What it models: the boot parameters as the kernel parses them (`memparse` sizes, `cma=` with
//! `@base` and `-limit`, `numa_cma=` as `node:size` pairs); which releases have which
//! ([`NumaCma`]: a parameter the release does not have is not reserved, and the boot says so, as
//! the kernel passes an unknown parameter on to init); the areas' placement through
//! [`crate::mm::cma`]; and the allocation order: no CMA unless the allocation may block; a
//! single page never from CMA; the device's node areas (`cma_pernuma`, then `numa_cma`) only
//! for a device with a node and a request without GFP_DMA/GFP_DMA32; then the default area.
//! Free goes to the node area of the page's node (`page_to_nid()`), then the default area, then
//! the page allocator. No device here has its own `dev->cma_area` (a DT `shared-dma-pool`).
//!
//! Invariants: areas are reserved once, at boot, in the release's order; an allocation that
//! every area refuses is `None` (the caller falls back to the page allocator); a release goes to
//! the area the pages came from.

use crate::mm::cma::{CmaArea, CmaError, CmaRules, PAGE_SHIFT, cma_declare_contiguous_nid};
use crate::mm::physmem::PhysMem;
use crate::types::PhysAddr;

/// arm64's `CONFIG_CMA_ALIGNMENT` default: an allocation is aligned to at most 2^8 pages.
pub const CMA_ALIGNMENT: u32 = 8;

/// Which per-node CMA a release has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumaCma {
    /// Before 5.10: the default area only.
    None,
    /// 5.10–6.5: `CONFIG_DMA_PERNUMA_CMA`, `cma_pernuma=<size>` on every online node.
    PerNuma,
    /// 6.6+: `CONFIG_DMA_NUMA_CMA`, `cma_pernuma=` and `numa_cma=<node>:<size>,...`.
    NumaCma,
}

/// How a release reserves and uses its CMA areas on the platform's architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContiguousRules {
    pub numa: NumaCma,
    pub cma: CmaRules,
    /// The per-node areas are reserved before the default area (6.6) rather than after (5.10).
    pub numa_first: bool,
    /// arm64's ZONE_DMA width (`zone_dma_bits`): 30 in 5.10, 32 from 5.11 where firmware
    /// reports no narrower limit.
    pub zone_dma_bits: u32,
    /// The default area is limited by ZONE_DMA32's end (5.10) rather than ZONE_DMA's.
    pub default_below_dma32: bool,
    /// 5.10's `max_zone_phys()`: the zone's width counted from the start of DRAM rounded down
    /// to it (a DMA offset assumed for memory above 4 GiB), rather than 5.11's absolute limit.
    pub zone_from_dram_start: bool,
}

impl ContiguousRules {
    /// `max_zone_phys(bits)` on arm64 in this release.
    pub fn max_zone_phys(&self, mem: &PhysMem, bits: u32) -> u64 {
        if self.zone_from_dram_start {
            max_zone_phys_5_10(mem, bits)
        } else {
            max_zone_phys(mem, bits)
        }
    }
}

/// `cma=nn[KMG][@base[KMG][-limit[KMG]]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaCmdline {
    pub size: u64,
    pub base: u64,
    pub limit: u64,
}

/// `CONFIG_CMA_SIZE_MBYTES` of the arm64 defconfig (arch/arm64/configs/defconfig, 5.10 and
/// later): the default area's size when the command line has no `cma=`. The Kconfig default
/// is 16; the defconfig sets 32.
pub const CMA_SIZE_MBYTES_ARM64_DEFCONFIG: u64 = 32;

/// The CMA boot parameters of a scenario (`[boot]`), and the build's CMA size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmaBoot {
    pub cma: Option<CmaCmdline>,
    pub cma_pernuma: Option<u64>,
    /// `numa_cma=` as (node, size) pairs, in the order given.
    pub numa_cma: Vec<(u32, u64)>,
    /// `CONFIG_CMA_SIZE_MBYTES`: the default area's size in MiB without `cma=` (0: none).
    pub size_mbytes: u64,
}

impl Default for CmaBoot {
    fn default() -> CmaBoot {
        CmaBoot {
            cma: None,
            cma_pernuma: None,
            numa_cma: Vec::new(),
            size_mbytes: CMA_SIZE_MBYTES_ARM64_DEFCONFIG,
        }
    }
}

/// The kernel's `memparse()`: a number (decimal, or hex with `0x`), then an optional K, M, G,
/// T, P or E; returns the value and the rest of the string.
pub fn memparse(s: &str) -> Option<(u64, &str)> {
    let (digits, radix, body) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => (h.bytes().take_while(u8::is_ascii_hexdigit).count(), 16, h),
        None => (s.bytes().take_while(u8::is_ascii_digit).count(), 10, s),
    };
    if digits == 0 {
        return None;
    }
    let v = u64::from_str_radix(&body[..digits], radix).ok()?;
    let rest = &body[digits..];
    let shift = match rest.bytes().next().map(|b| b.to_ascii_uppercase()) {
        Some(b'K') => 10,
        Some(b'M') => 20,
        Some(b'G') => 30,
        Some(b'T') => 40,
        Some(b'P') => 50,
        Some(b'E') => 60,
        _ => return Some((v, rest)),
    };
    Some((v.checked_mul(1u64 << shift)?, &rest[1..]))
}

fn whole(s: &str, what: &str) -> Result<u64, String> {
    match memparse(s.trim()) {
        Some((v, "")) => Ok(v),
        _ => Err(format!(
            "expected a size such as \"64M\", \"1G\" or \"0x4000000\" for {what}, found \"{s}\""
        )),
    }
}

impl CmaCmdline {
    /// `early_cma()`.
    pub fn parse(s: &str) -> Result<CmaCmdline, String> {
        let (size, rest) = s.split_once('@').map_or((s, None), |(a, b)| (a, Some(b)));
        let size = whole(size, "cma=")?;
        let (base, limit) = match rest {
            None => (0, 0),
            Some(r) => match r.split_once('-') {
                None => {
                    let b = whole(r, "cma='s @base")?;
                    (b, b.checked_add(size).ok_or("cma= base + size overflows")?)
                }
                Some((b, l)) => (whole(b, "cma='s @base")?, whole(l, "cma='s -limit")?),
            },
        };
        Ok(CmaCmdline { size, base, limit })
    }
}

/// `early_numa_cma()`'s `node:size[,node:size]`, strictly: a list the kernel would stop
/// reading part way is refused whole.
pub fn parse_numa_cma(s: &str) -> Result<Vec<(u32, u64)>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (n, size) = part.split_once(':').ok_or_else(|| {
            format!("expected node:size pairs such as \"0:16M,2:16M\", found \"{s}\"")
        })?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("expected a node number before ':', found \"{n}\""))?;
        out.push((n, whole(size, "numa_cma=")?));
    }
    Ok(out)
}

/// What boot reserved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contiguous {
    pub rules: ContiguousRules,
    /// `dma_contiguous_default_area`.
    pub default_area: Option<CmaArea>,
    /// `dma_contiguous_pernuma_area[nid]`.
    pub pernuma: Vec<Option<CmaArea>>,
    /// `dma_contiguous_numa_area[nid]` (6.6+).
    pub numa: Vec<Option<CmaArea>>,
    /// What boot printed about the areas: each reservation, and every failure or parameter the
    /// release ignored.
    pub log: Vec<String>,
    /// Parameters the release does not have: the kernel's `parse_args()` finds no handler,
    /// so boot goes on without them (a run reports them as ignored, a result).
    pub ignored: Vec<IgnoredParam>,
}

/// A CMA boot parameter the release does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IgnoredParam {
    /// As written on the command line, with its `=`: `cma_pernuma=`, `numa_cma=`.
    pub param: &'static str,
    /// The release that introduced it.
    pub since: &'static str,
}

impl IgnoredParam {
    /// What a run reports, for the release `kernel` it ran.
    pub fn describe(&self, kernel: &str) -> String {
        format!(
            "{} is not a parameter of {kernel}: ignored (it came in Linux {}; the kernel hands an unknown parameter on to init and reserves no area for it)",
            self.param, self.since
        )
    }
}

/// Where a contiguous allocation came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// A CMA area, by name (`reserved`, `pernuma2`, `numa2`).
    Area(String),
    /// The page allocator (`alloc_pages_node`), on this node.
    PageAllocator,
}

/// `memblock_start_of_DRAM()` and `memblock_end_of_DRAM()`.
fn dram_span(mem: &PhysMem) -> (u64, u64) {
    let start = mem.nodes().iter().map(|n| n.start.0).min().unwrap_or(0);
    let end = mem
        .nodes()
        .iter()
        .map(|n| n.start.0 + n.size)
        .max()
        .unwrap_or(0);
    (start, end)
}

/// 5.10's `max_zone_phys(bits)`: the start of DRAM with its low `bits` cleared, plus the
/// zone's width, capped at the end of DRAM.
pub fn max_zone_phys_5_10(mem: &PhysMem, bits: u32) -> u64 {
    let (start, end) = dram_span(mem);
    if bits >= 64 {
        return end;
    }
    let offset = start & !((1u64 << bits) - 1);
    offset.saturating_add(1 << bits).min(end)
}

/// `max_zone_phys(bits)` on arm64 from 5.11: the end of a zone of that width, widened to 4 GiB
/// when DRAM starts above it and to everything when DRAM starts above 4 GiB.
pub fn max_zone_phys(mem: &PhysMem, bits: u32) -> u64 {
    let (start, end) = dram_span(mem);
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mask = if start > u64::from(u32::MAX) {
        u64::MAX
    } else if start > mask {
        u64::from(u32::MAX)
    } else {
        mask
    };
    mask.min(end.saturating_sub(1)).saturating_add(1)
}

impl Contiguous {
    /// Boot: `dma_contiguous_reserve()` and the per-node reservations, in the release's order,
    /// over `mem` whose online nodes are `nodes`.
    pub fn reserve(
        mem: &mut PhysMem,
        rules: ContiguousRules,
        boot: &CmaBoot,
        nodes: &[u32],
    ) -> Contiguous {
        let max = nodes.iter().copied().max().map_or(0, |m| m as usize + 1);
        let mut c = Contiguous {
            rules,
            default_area: None,
            pernuma: vec![None; max],
            numa: vec![None; max],
            log: Vec::new(),
            ignored: Vec::new(),
        };
        let has_pernuma = rules.numa != NumaCma::None;
        let has_numa = rules.numa == NumaCma::NumaCma;
        if boot.cma_pernuma.is_some() && !has_pernuma {
            c.ignored.push(IgnoredParam {
                param: "cma_pernuma=",
                since: "5.10",
            });
        }
        if !boot.numa_cma.is_empty() && !has_numa {
            c.ignored.push(IgnoredParam {
                param: "numa_cma=",
                since: "6.6",
            });
        }
        let pernuma = boot.cma_pernuma.filter(|_| has_pernuma).unwrap_or(0);
        let numa: Vec<(u32, u64)> = if has_numa {
            boot.numa_cma.clone()
        } else {
            vec![]
        };
        if rules.numa_first {
            c.reserve_numa(mem, pernuma, &numa, nodes);
            c.reserve_default(mem, boot);
        } else {
            c.reserve_default(mem, boot);
            c.reserve_numa(mem, pernuma, &numa, nodes);
        }
        c
    }

    fn declare(&mut self, mem: &mut PhysMem, d: Declare) -> Option<CmaArea> {
        match cma_declare_contiguous_nid(
            mem,
            self.rules.cma,
            d.base,
            d.size,
            d.limit,
            0,
            0,
            d.fixed,
            d.name,
            d.nid,
        ) {
            Ok(a) => {
                self.log.push(format!(
                    "cma: {}: reserved {} MiB at {} on node {}",
                    a.name,
                    a.size() >> 20,
                    a.base(),
                    a.node
                ));
                Some(a)
            }
            Err(e) => {
                self.log
                    .push(format!("cma: {}: reservation failed: {e}", d.name));
                None
            }
        }
    }

    fn reserve_default(&mut self, mem: &mut PhysMem, boot: &CmaBoot) {
        // Without `cma=`, dma_contiguous_reserve() takes the build's size
        // (CONFIG_CMA_SIZE_SEL_MBYTES: CONFIG_CMA_SIZE_MBYTES), below the same limit.
        let cmd = boot.cma.unwrap_or(CmaCmdline {
            size: boot.size_mbytes.saturating_mul(1 << 20),
            base: 0,
            limit: 0,
        });
        if cmd.size == 0 {
            return;
        }
        let limit = if self.rules.default_below_dma32 {
            self.rules.max_zone_phys(mem, 32)
        } else {
            self.rules.max_zone_phys(mem, self.rules.zone_dma_bits)
        };
        let limit = match (cmd.limit, limit) {
            (0, l) => l,
            (c, 0) => c,
            (c, l) => c.min(l),
        };
        let fixed = cmd.base.checked_add(cmd.size) == Some(cmd.limit);
        self.default_area = self.declare(
            mem,
            Declare {
                base: cmd.base,
                size: cmd.size,
                limit,
                fixed,
                name: "reserved",
                nid: None,
            },
        );
    }

    fn reserve_numa(
        &mut self,
        mem: &mut PhysMem,
        pernuma: u64,
        numa: &[(u32, u64)],
        nodes: &[u32],
    ) {
        for &(n, _) in numa {
            if !nodes.contains(&n) {
                self.log.push(format!("cma: invalid node {n} specified"));
            }
        }
        for &nid in nodes {
            if pernuma > 0 {
                let name = format!("pernuma{nid}");
                self.pernuma[nid as usize] = self.declare(
                    mem,
                    Declare {
                        base: 0,
                        size: pernuma,
                        limit: 0,
                        fixed: false,
                        name: &name,
                        nid: Some(nid),
                    },
                );
            }
            // The last size given for a node is the one the kernel keeps.
            if let Some(&(_, size)) = numa.iter().rev().find(|(n, _)| *n == nid)
                && size > 0
            {
                let name = format!("numa{nid}");
                self.numa[nid as usize] = self.declare(
                    mem,
                    Declare {
                        base: 0,
                        size,
                        limit: 0,
                        fixed: false,
                        name: &name,
                        nid: Some(nid),
                    },
                );
            }
        }
    }

    /// Every area, for reports.
    pub fn areas(&self) -> impl Iterator<Item = &CmaArea> {
        self.default_area
            .iter()
            .chain(self.pernuma.iter().flatten())
            .chain(self.numa.iter().flatten())
    }

    fn area_mut(&mut self, name: &str) -> Option<&mut CmaArea> {
        self.default_area
            .iter_mut()
            .chain(self.pernuma.iter_mut().flatten())
            .chain(self.numa.iter_mut().flatten())
            .find(|a| a.name == name)
    }

    /// `cma_alloc_aligned()`: the pages of `size`, aligned to its order capped at
    /// [`CMA_ALIGNMENT`].
    fn alloc_aligned(area: &mut CmaArea, size: u64) -> Option<PhysAddr> {
        let pages = size.div_ceil(1 << PAGE_SHIFT);
        area.alloc(pages, get_order(size).min(CMA_ALIGNMENT))
    }

    /// `dma_alloc_contiguous(dev, size, gfp)`: the area that served it, or `None` (the caller
    /// goes to the page allocator).
    pub fn alloc(&mut self, node: Option<u32>, size: u64, gfp: Gfp) -> Option<(PhysAddr, String)> {
        if !gfp.blocking || size <= 1 << PAGE_SHIFT {
            return None;
        }
        if let Some(nid) = node
            && !gfp.dma
            && !gfp.dma32
        {
            let i = nid as usize;
            for area in [self.pernuma.get_mut(i), self.numa.get_mut(i)]
                .into_iter()
                .flatten()
                .flatten()
            {
                if let Some(p) = Self::alloc_aligned(area, size) {
                    return Some((p, area.name.clone()));
                }
            }
        }
        let area = self.default_area.as_mut()?;
        Self::alloc_aligned(area, size).map(|p| (p, area.name.clone()))
    }

    /// `dma_free_contiguous()`'s CMA part: `Ok(Some(area))` when an area took the pages back,
    /// `Ok(None)` when none holds them (the caller frees them to the page allocator).
    pub fn release(
        &mut self,
        page_node: u32,
        addr: PhysAddr,
        size: u64,
    ) -> Result<Option<String>, CmaError> {
        let count = size.div_ceil(1 << PAGE_SHIFT);
        let i = page_node as usize;
        let mut names: Vec<String> = Vec::new();
        for list in [&self.pernuma, &self.numa] {
            if let Some(Some(a)) = list.get(i) {
                names.push(a.name.clone());
            }
        }
        if let Some(a) = &self.default_area {
            names.push(a.name.clone());
        }
        for name in names {
            if let Some(a) = self.area_mut(&name)
                && a.release(addr, count)?
            {
                return Ok(Some(name));
            }
        }
        Ok(None)
    }
}

struct Declare<'a> {
    base: u64,
    size: u64,
    limit: u64,
    fixed: bool,
    name: &'a str,
    nid: Option<u32>,
}

/// `get_order(size)`: the order of the smallest power-of-two number of pages holding `size`.
pub fn get_order(size: u64) -> u32 {
    let pages = size.max(1).div_ceil(1 << PAGE_SHIFT);
    pages.next_power_of_two().trailing_zeros()
}

/// The allocation flags the coherent path reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gfp {
    /// `__GFP_DIRECT_RECLAIM` (`GFP_KERNEL`): the caller may sleep, so CMA may be used.
    pub blocking: bool,
    pub dma: bool,
    pub dma32: bool,
}

impl Gfp {
    pub const KERNEL: Gfp = Gfp {
        blocking: true,
        dma: false,
        dma32: false,
    };
    pub const ATOMIC: Gfp = Gfp {
        blocking: false,
        dma: false,
        dma32: false,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DRAM from 2 GiB to 6 GiB: 5.10 puts a 30-bit zone's end at 2 GiB + 1 GiB (counted from
    /// DRAM's start rounded down to 1 GiB); 5.11 widens it to 4 GiB, as DRAM starts above the
    /// zone. A 32-bit zone ends at 4 GiB in both. From address 0 the two agree.
    #[test]
    fn max_zone_phys_is_relative_to_dram_in_5_10_only() {
        use crate::mm::physmem::NodeRange;
        let mem = PhysMem::new(vec![NodeRange {
            node: 0,
            start: PhysAddr(2 << 30),
            size: 4 << 30,
        }]);
        assert_eq!(max_zone_phys_5_10(&mem, 30), 3 << 30);
        assert_eq!(max_zone_phys(&mem, 30), 4 << 30);
        assert_eq!(max_zone_phys_5_10(&mem, 32), 4 << 30);
        assert_eq!(max_zone_phys(&mem, 32), 4 << 30);
        let low = PhysMem::new(vec![NodeRange {
            node: 0,
            start: PhysAddr(0),
            size: 8 << 30,
        }]);
        for bits in [30, 32] {
            assert_eq!(max_zone_phys_5_10(&low, bits), max_zone_phys(&low, bits));
        }
    }

    #[test]
    fn boot_parameters_parse_as_the_kernel_reads_them() {
        assert_eq!(memparse("64M"), Some((64 << 20, "")));
        assert_eq!(memparse("0x1000@"), Some((4096, "@")));
        assert_eq!(memparse("M"), None);
        assert_eq!(
            CmaCmdline::parse("64M").unwrap(),
            CmaCmdline {
                size: 64 << 20,
                base: 0,
                limit: 0
            }
        );
        assert_eq!(
            CmaCmdline::parse("64M@1G").unwrap(),
            CmaCmdline {
                size: 64 << 20,
                base: 1 << 30,
                limit: (1 << 30) + (64 << 20)
            }
        );
        assert_eq!(
            CmaCmdline::parse("64M@0-2G").unwrap(),
            CmaCmdline {
                size: 64 << 20,
                base: 0,
                limit: 2 << 30
            }
        );
        assert!(CmaCmdline::parse("lots").is_err());
        assert_eq!(
            parse_numa_cma("0:16M,2:16M").unwrap(),
            vec![(0, 16 << 20), (2, 16 << 20)]
        );
        assert!(parse_numa_cma("0=16M").is_err());
        assert!(parse_numa_cma("x:16M").is_err());
        assert_eq!(get_order(4096), 0);
        assert_eq!(get_order(4097), 1);
        assert_eq!(get_order(64 << 10), 4);
        assert_eq!(get_order(96 << 10), 5);
    }
}
