//! Memory types and what a CPU access to each costs.
//!
//! Kernel counterpart: none — the memory type is the hardware's reading of a page's attributes
//! (ARMv7's TEX/C/B through the kernel's `L_PTE_MT_*` remapping); which `pgprot_*` gives which
//! type is the arch's business (`arch::arm::pgtable`).
//!
//! What it models: four types. *Cached* (Normal write-back): loads and stores go through the
//! cache model, an access that hits the L1 costs the profile's per-access cost, a miss adds the
//! line fill from the level that answered. *Normal non-cacheable* (what ARMv7's
//! `pgprot_dmacoherent` and `pgprot_writecombine` both give, "bufferable"), *Device* and
//! *Strongly-ordered*: every access is its own bus transaction, priced per access size by the
//! profile, and touches no cache.
//!
//! Invariants: an access size is one the architecture has ([`access_sizes`]); a profile prices
//! each (type, direction, size) a workload uses, or the scenario is refused before it runs.

use crate::types::Arch;

/// The memory type of a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemType {
    /// Normal memory, write-back cacheable.
    Cached,
    /// Normal memory, non-cacheable (ARMv7 "bufferable": stores may be buffered and merged).
    NormalNc,
    /// Device memory.
    Device,
    /// Strongly-ordered memory.
    StronglyOrdered,
}

impl MemType {
    pub const ALL: [MemType; 4] = [
        MemType::Cached,
        MemType::NormalNc,
        MemType::Device,
        MemType::StronglyOrdered,
    ];

    /// The profile's section name, `[memory_type.<key>]`.
    pub fn key(self) -> &'static str {
        match self {
            MemType::Cached => "cached",
            MemType::NormalNc => "normal_nc",
            MemType::Device => "device",
            MemType::StronglyOrdered => "strongly_ordered",
        }
    }

    pub fn from_key(k: &str) -> Option<MemType> {
        MemType::ALL.into_iter().find(|t| t.key() == k)
    }

    /// How reports describe it.
    pub fn describe(self) -> &'static str {
        match self {
            MemType::Cached => "Normal, write-back cacheable",
            MemType::NormalNc => "Normal, non-cacheable, bufferable",
            MemType::Device => "Device",
            MemType::StronglyOrdered => "Strongly-ordered",
        }
    }
}

/// The load/store sizes, in bytes, an architecture's CPU issues as one access. ARMv7: LDRB,
/// LDRH, LDR, LDRD, and an LDM/STM of eight registers (32 bytes, the line memcpy moves at a
/// time: arch/arm/lib/copy_template.S). arm64: up to an LDP of two X registers (16). x86-64: up
/// to a 64-byte AVX-512 move.
pub fn access_sizes(arch: Arch) -> &'static [u64] {
    match arch {
        Arch::Armv7 => &[1, 2, 4, 8, 32],
        Arch::Arm64 => &[1, 2, 4, 8, 16],
        Arch::X86_64 => &[1, 2, 4, 8, 16, 32, 64],
    }
}

/// The size a user program's `memcpy` moves per load and per store on `arch`. ARMv7: 8 —
/// glibc's ARMv7 memcpy (sysdeps/arm/armv7/multiarch/memcpy_impl.S, the NEON, VFP and plain
/// variants alike) copies its long aligned runs with 64-bit `vldr`/`vstr` or `ldrd`/`strd`, not
/// with the kernel's 32-byte LDM/STM (the VFP one "much better at streaming loads and stores" on
/// the Cortex-A9, its comment says). Elsewhere: the largest access.
pub fn user_copy_access(arch: Arch) -> u64 {
    match arch {
        Arch::Armv7 => 8,
        _ => *access_sizes(arch).last().expect("every arch has sizes"),
    }
}

/// What one type's accesses cost, in picoseconds, by size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeCosts {
    /// (size in bytes, ps) per load.
    pub read: Vec<(u64, u64)>,
    /// (size in bytes, ps) per store.
    pub write: Vec<(u64, u64)>,
}

impl TypeCosts {
    pub fn cost(&self, write: bool, size: u64) -> Option<u64> {
        let v = if write { &self.write } else { &self.read };
        v.iter().find(|c| c.0 == size).map(|c| c.1)
    }
}

/// The profile's `[memory_type.*]` sections, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemCosts {
    /// By [`MemType`] as index; `None` where the profile has no section.
    pub types: [Option<TypeCosts>; 4],
    /// Cached memory: exposed time of a line fill from the L2, and from memory, on an L1 miss.
    pub fill_l2_ps: u64,
    pub fill_memory_ps: u64,
    /// Cached memory: the L1 prefetches the next line of a sequential stream, so a fill of the
    /// line after the previous one overlaps the accesses to that previous line.
    pub prefetch_next_line: bool,
    /// Cached memory: how many line fills the L1 has in flight at most (its linefill buffers);
    /// 0 reads as 1.
    pub linefill_buffers: u32,
}

impl MemCosts {
    pub fn of(&self, t: MemType) -> Option<&TypeCosts> {
        self.types[t as usize].as_ref()
    }
}
