//! x86-64's `__pa()`: the physical address behind a kernel virtual address.
//!
//! Kernel counterpart: arch/x86/mm/physaddr.c `__phys_addr()` — out of line on x86-64 up to 3.8
//! (declared plain `extern` in asm/page_64_types.h, so the compiler can neither drop nor merge a
//! call) — and, from 3.9 ("x86: Improve __phys_addr performance by making use of carry flags and
//! inlining"), `__phys_addr_nodebug()` inlined into its callers without `CONFIG_DEBUG_VIRTUAL`;
//! asm/page.h `__pa()` / `virt_to_page()` and mm.h `virt_to_head_page()`, which all go through it.
//!
//! What it models: the direct map (`PAGE_OFFSET` + physical address, `__va()` an inline add) and
//! the translation back, as the release compiles it: [`OutOfLine`] enters `__phys_addr`, charges
//! its cost (`__phys_addr` in a profile's `[sw]`) and counts a [`Counter::PhysAddrCall`];
//! [`Inline`] is a few instructions of the caller's own, charged with the caller.
//!
//! Invariants: a translation's result is exact for every direct-map address whatever the policy;
//! the count of `__phys_addr` calls is whatever the callers' code made, one per `__pa()` evaluated.
//!
//! Dispatch: [`PhysAddrFn`] is the policy's trait, its methods generic over the backend; callers
//! hold the choice as [`PhysAddrImpl`], an enum of the two implementations chosen once at setup,
//! so a caller with a concrete backend gets the translation (and its frame, charge and count)
//! inlined.

use crate::hw::{Counter, Hw, SwCost, SwKey};
use crate::types::PhysAddr;
use std::fmt::Debug;

/// x86-64's `PAGE_OFFSET` of the 3.x releases: the direct map of physical memory starts here.
pub const PAGE_OFFSET: u64 = 0xffff_8800_0000_0000;

const PAGE_MASK: u64 = !(crate::scatterlist::PAGE_SIZE - 1);

/// `__va()`: the direct-map address of `phys` (inline in every release).
pub fn va(phys: PhysAddr) -> u64 {
    PAGE_OFFSET.wrapping_add(phys.0)
}

/// How a release turns a kernel virtual address into a physical one.
pub trait PhysAddrFn: Debug {
    /// `__pa(virt)`. Without `CONFIG_DEBUG_VIRTUAL` nothing checks the address: one below
    /// `PAGE_OFFSET` gives a meaningless result, as in the kernel, never a panic.
    fn pa<H: Hw + ?Sized>(&self, hw: &mut H, virt: u64) -> PhysAddr;
    /// Whether `__pa()` is a call of its own (for which a caller sets up an argument and keeps
    /// its live values), or arithmetic inlined into the caller.
    fn out_of_line(&self) -> bool;

    /// `virt_to_page()` (and `virt_to_head_page()` for an order-0 page): the page `virt` lies in,
    /// as the physical address of its first byte.
    #[inline]
    fn virt_to_page<H: Hw + ?Sized>(&self, hw: &mut H, virt: u64) -> PhysAddr {
        PhysAddr(self.pa(hw, virt).0 & PAGE_MASK)
    }
}

/// ≤ 3.8: every `__pa()` calls `__phys_addr`.
#[derive(Clone, Copy, Debug)]
pub struct OutOfLine {
    cost: SwCost,
}

impl OutOfLine {
    pub fn new<H: Hw + ?Sized>(hw: &H) -> OutOfLine {
        OutOfLine {
            cost: hw.sw_cost(SwKey::PhysAddr),
        }
    }
}

impl PhysAddrFn for OutOfLine {
    /// `__pa(virt)`: a call of `__phys_addr`.
    #[inline]
    fn pa<H: Hw + ?Sized>(&self, hw: &mut H, virt: u64) -> PhysAddr {
        hw.leaf("__phys_addr", self.cost, Some(Counter::PhysAddrCall));
        PhysAddr(virt.wrapping_sub(PAGE_OFFSET))
    }
    fn out_of_line(&self) -> bool {
        true
    }
}

/// 3.9 on (and every other architecture the model runs): inline arithmetic, no call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inline;

impl PhysAddrFn for Inline {
    /// `__pa(virt)`: a subtraction in the caller.
    #[inline]
    fn pa<H: Hw + ?Sized>(&self, _hw: &mut H, virt: u64) -> PhysAddr {
        PhysAddr(virt.wrapping_sub(PAGE_OFFSET))
    }
    fn out_of_line(&self) -> bool {
        false
    }
}

/// The `phys_addr` policy's implementation held by value: [`OutOfLine`] or [`Inline`], chosen
/// once at setup ([`PhysAddrKind::resolve`]), dispatched by a match instead of a vtable and
/// generic over the backend.
#[derive(Clone, Copy, Debug)]
pub enum PhysAddrImpl {
    OutOfLine(OutOfLine),
    Inline(Inline),
}

impl PhysAddrFn for PhysAddrImpl {
    #[inline]
    fn pa<H: Hw + ?Sized>(&self, hw: &mut H, virt: u64) -> PhysAddr {
        match self {
            PhysAddrImpl::OutOfLine(o) => o.pa(hw, virt),
            PhysAddrImpl::Inline(i) => i.pa(hw, virt),
        }
    }
    #[inline]
    fn out_of_line(&self) -> bool {
        matches!(self, PhysAddrImpl::OutOfLine(_))
    }
}

/// The `phys_addr` policy: whether x86-64's `__pa()` calls the out-of-line `__phys_addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysAddrKind {
    /// ≤ 3.8: a call to `__phys_addr` per `__pa()` ([`OutOfLine`]).
    Call,
    /// 3.9 on: inlined ([`Inline`]).
    Inline,
}

impl crate::types::Choice for PhysAddrKind {
    const ALL: &'static [Self] = &[PhysAddrKind::Call, PhysAddrKind::Inline];
    fn name(self) -> &'static str {
        match self {
            PhysAddrKind::Call => "call",
            PhysAddrKind::Inline => "inline",
        }
    }
}

impl PhysAddrKind {
    /// The implementation, chosen once at setup, held by value.
    pub fn resolve<H: Hw + ?Sized>(self, hw: &H) -> PhysAddrImpl {
        match self {
            PhysAddrKind::Call => PhysAddrImpl::OutOfLine(OutOfLine::new(hw)),
            PhysAddrKind::Inline => PhysAddrImpl::Inline(Inline),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::recorder::Recorder;

    #[test]
    fn out_of_line_translations_are_calls_inline_ones_are_not() {
        let mut r = Recorder::new(64);
        let phys = PhysAddr(0x1_0000_0a3c);
        for (kind, calls) in [(PhysAddrKind::Call, 2), (PhysAddrKind::Inline, 0)] {
            // The policy held by value, called with a concrete backend and through `dyn Hw`:
            // the same answers and the same calls.
            let before = r.counts[Counter::PhysAddrCall as usize];
            let pa = kind.resolve(&r);
            let dynamic: &mut dyn Hw = &mut r;
            assert_eq!(pa.pa(dynamic, va(phys)), phys);
            assert_eq!(pa.virt_to_page(dynamic, va(phys)), PhysAddr(0x1_0000_0000));
            assert_eq!(r.counts[Counter::PhysAddrCall as usize] - before, calls);
            let before = r.counts[Counter::PhysAddrCall as usize];
            let pa = kind.resolve(&r);
            assert_eq!(pa.pa(&mut r, va(phys)), phys);
            assert_eq!(pa.virt_to_page(&mut r, va(phys)), PhysAddr(0x1_0000_0000));
            assert_eq!(pa.out_of_line(), kind == PhysAddrKind::Call);
            assert_eq!(r.counts[Counter::PhysAddrCall as usize] - before, calls);
        }
        // An address below the direct map wraps as the kernel's subtraction does.
        assert_eq!(
            Inline.pa(&mut r, 0x1000),
            PhysAddr(0x1000u64.wrapping_sub(PAGE_OFFSET))
        );
    }
}
