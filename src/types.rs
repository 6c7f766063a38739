//! Address newtypes, DMA directions and attributes, and the CPU architecture.
//!
//! Kernel counterparts: `phys_addr_t`, `dma_addr_t` (include/linux/types.h), the IOVA a domain hands
//! out (drivers/iommu/iova.c), `enum dma_data_direction` (include/linux/dma-direction.h), the
//! `DMA_ATTR_*` bits (include/linux/dma-mapping.h) and the `ARCH=` a kernel is built for.
//!
//! This module is a leaf of the crate's module graph (it uses nothing from the crate), so every
//! layer, `hw` included, can name these types without an import cycle; `tests/module_graph.rs`
//! checks that.
//!
//! Invariants: the three address kinds never mix implicitly; arithmetic on them is checked and
//! returns `None` on overflow instead of wrapping, because a wrapped bus address is exactly the kind
//! of bug this tool must surface rather than hide.

use std::fmt;

/// CPU architecture, which decides the cache-maintenance rules of the arch layer. A profile names
/// it (`platform::Arch` re-exports it from here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    Arm64,
    #[serde(rename = "x86_64")]
    X86_64,
    /// 32-bit ARMv7-A (`ARCH=arm`): Cortex-A9 and friends, with an outer cache beside the L1.
    Armv7,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Arm64 => "arm64",
            Arch::X86_64 => "x86_64",
            Arch::Armv7 => "armv7",
        }
    }
}

macro_rules! addr_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u64);

        impl $name {
            /// `self + off`, or `None` if it would leave the 64-bit space.
            pub fn checked_add(self, off: u64) -> Option<Self> {
                self.0.checked_add(off).map(Self)
            }
            /// `self - off`, or `None` below zero.
            pub fn checked_sub(self, off: u64) -> Option<Self> {
                self.0.checked_sub(off).map(Self)
            }
            /// Distance from `base` up to `self`, or `None` if `self` lies below `base`.
            pub fn offset_from(self, base: Self) -> Option<u64> {
                self.0.checked_sub(base.0)
            }
            /// Round down to a power-of-two `align`.
            pub fn align_down(self, align: u64) -> Self {
                debug_assert!(align.is_power_of_two());
                Self(self.0 & !(align - 1))
            }
            /// Round up to a power-of-two `align`, or `None` on overflow.
            pub fn align_up(self, align: u64) -> Option<Self> {
                debug_assert!(align.is_power_of_two());
                self.0.checked_add(align - 1).map(|v| Self(v & !(align - 1)))
            }
            pub fn is_aligned(self, align: u64) -> bool {
                debug_assert!(align.is_power_of_two());
                self.0 & (align - 1) == 0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

addr_type!(
    /// A CPU physical address (`phys_addr_t`).
    PhysAddr
);
addr_type!(
    /// A bus address as the device sees it (`dma_addr_t`).
    DmaAddr
);
addr_type!(
    /// An I/O virtual address inside an IOMMU domain.
    IovaAddr
);

impl DmaAddr {
    /// The kernel's `DMA_MAPPING_ERROR` (all ones).
    pub const MAPPING_ERROR: DmaAddr = DmaAddr(u64::MAX);
}

/// `enum dma_data_direction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DmaDirection {
    Bidirectional,
    ToDevice,
    FromDevice,
    None,
}

impl DmaDirection {
    pub const ALL: [DmaDirection; 4] = [
        DmaDirection::Bidirectional,
        DmaDirection::ToDevice,
        DmaDirection::FromDevice,
        DmaDirection::None,
    ];

    /// The kernel's spelling, as in `DMA_BIDIRECTIONAL`, lower-cased for input files.
    pub fn name(self) -> &'static str {
        match self {
            DmaDirection::Bidirectional => "bidirectional",
            DmaDirection::ToDevice => "to_device",
            DmaDirection::FromDevice => "from_device",
            DmaDirection::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let norm = s.to_ascii_lowercase().replace('-', "_");
        let norm = norm.strip_prefix("dma_").unwrap_or(&norm);
        Self::ALL
            .into_iter()
            .find(|d| d.name() == norm || (norm == "bidi" && *d == DmaDirection::Bidirectional))
    }
}

impl fmt::Display for DmaDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `DMA_ATTR_*` bits. Only the ones the model acts on are named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DmaAttrs(u32);

impl DmaAttrs {
    pub const NONE: DmaAttrs = DmaAttrs(0);
    /// `DMA_ATTR_SKIP_CPU_SYNC`: the caller does its own cache maintenance.
    pub const SKIP_CPU_SYNC: DmaAttrs = DmaAttrs(1 << 5);

    pub fn contains(self, other: DmaAttrs) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: DmaAttrs) -> DmaAttrs {
        DmaAttrs(self.0 | other.0)
    }
}

/// A policy's value: one of a fixed list of named choices.
pub trait Choice: Copy + Eq + std::fmt::Debug + 'static {
    /// Every choice, in the order help texts list them.
    const ALL: &'static [Self];
    fn name(self) -> &'static str;
    fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.name() == s)
    }
    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|c| c.name()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_arithmetic_refuses_overflow() {
        assert_eq!(PhysAddr(u64::MAX).checked_add(1), None);
        assert_eq!(DmaAddr(0).checked_sub(1), None);
        assert_eq!(PhysAddr(0x1000).checked_add(0x10), Some(PhysAddr(0x1010)));
        assert_eq!(PhysAddr(0x1234).align_down(0x1000), PhysAddr(0x1000));
        assert_eq!(PhysAddr(0x1234).align_up(0x1000), Some(PhysAddr(0x2000)));
        assert_eq!(PhysAddr(u64::MAX - 3).align_up(0x1000), None);
        assert_eq!(IovaAddr(0x2000).offset_from(IovaAddr(0x3000)), None);
    }

    #[test]
    fn direction_names_round_trip() {
        for d in DmaDirection::ALL {
            assert_eq!(DmaDirection::parse(d.name()), Some(d));
        }
        assert_eq!(
            DmaDirection::parse("DMA_FROM_DEVICE"),
            Some(DmaDirection::FromDevice)
        );
        assert_eq!(DmaDirection::parse("sideways"), None);
    }

    #[test]
    fn attrs_contain() {
        let a = DmaAttrs::NONE.union(DmaAttrs::SKIP_CPU_SYNC);
        assert!(a.contains(DmaAttrs::SKIP_CPU_SYNC));
        assert!(!DmaAttrs::NONE.contains(DmaAttrs::SKIP_CPU_SYNC));
    }
}
