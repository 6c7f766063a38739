//! The Host backend: runs cache maintenance on this machine's real caches and measures it.
//!
//! Kernel counterpart: none as such — this is the machine under the kernel. Where the Model charges
//! a time for each [`Hw`] call, the Host executes the instruction the kernel's code would:
//!
//! | [`CacheOp`]   | x86-64       | arm64      |
//! |---------------|--------------|------------|
//! | `Clean`       | `CLWB`       | `DC CVAC`  |
//! | `CleanInval`  | `CLFLUSHOPT` | `DC CIVAC` |
//! | `Inval`       | (none)       | `DC IVAC` is EL1-only, so refused |
//! | barrier       | `SFENCE`     | `DSB SY`   |
//! | wmb           | `SFENCE`     | `DSB ST`   |
//!
//! Software costs ([`Hw::sw`]) are free here because the real CPU is already executing the
//! software path; frames ([`Hw::enter`]/[`Hw::leave`]) are free so they do not perturb what is
//! measured.
//!
//! It implements [`Hw`] only, not [`super::SmmuPort`]: there is no SMMU it could reach. So it is no
//! [`super::DeviceHw`], and neither the iommu layer nor a [`crate::dma::DmaMapOps`] can be handed
//! it; the benchmarks drive dma-direct through its inherent methods, which need only [`Hw`].
//!
//! Addressing: the Host owns one page-aligned buffer of real memory. A physical address `P` handed
//! to it stands for the byte at `buffer_ptr + (P - base)`, where `base` (page aligned) is chosen at
//! construction. Because both `base` and the buffer are page aligned, line boundaries in the
//! simulated physical space are line boundaries in real memory too.
//!
//! Invariants: no instruction ever touches memory outside the buffer. A request that would — or an
//! operation this CPU cannot issue — is skipped whole and recorded as a [`HostFault`]; it never
//! panics. Every line actually issued is counted per operation, so tests can check that the stack
//! asked for exactly the lines it should.

use super::{CacheOp, Caller, FrameId, Hw, SwCost, SwKey};
use crate::scatterlist::PAGE_SIZE;
use crate::types::PhysAddr;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::time::Instant;

/// A host measurement could not run as asked: an option out of range for this machine, an
/// instruction this CPU cannot issue, or a buffer the OS would not provide. It is raised before
/// anything is timed. It lives here rather than in `hostbench` because the Host raises it too and
/// `hw` must not depend on the layers above it; `hostbench::HostError` re-exports it. The CLI exits
/// 2 on it, as for bad input: the request has to change before it can run on this host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// A request the Host refused instead of executing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostFault {
    /// `lines` lines from the line containing `first` do not lie inside the buffer.
    OutOfRange { first: PhysAddr, lines: u64 },
    /// This CPU (or this privilege level) has no instruction for the operation.
    Unsupported(CacheOp),
    /// An outer-cache (PL310) operation: its registers are not reachable from a host process.
    NoOuterCache,
}

impl std::fmt::Display for HostFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostFault::OutOfRange { first, lines } => {
                write!(
                    f,
                    "{lines} line(s) from {first} lie outside the host buffer"
                )
            }
            HostFault::Unsupported(op) => write!(f, "no host instruction for `{}`", op.key()),
            HostFault::NoOuterCache => write!(f, "no outer cache is reachable from the host"),
        }
    }
}

/// Which maintenance instructions this CPU can issue from user space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCaps {
    pub clean: bool,
    pub clean_inval: bool,
}

impl HostCaps {
    /// Ask the CPU. x86-64: CPUID leaf 7 EBX bit 23 (CLFLUSHOPT) and bit 24 (CLWB) — read directly
    /// because `is_x86_feature_detected!` does not know these two on stable Rust. arm64: Linux sets SCTLR_EL1.UCI, so `DC CVAC` and
    /// `DC CIVAC` are allowed at EL0 (`DC IVAC` never is).
    pub fn detect() -> HostCaps {
        #[cfg(target_arch = "x86_64")]
        {
            let max_leaf = std::arch::x86_64::__cpuid(0).eax;
            if max_leaf < 7 {
                return HostCaps::default();
            }
            let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
            HostCaps {
                clean: ebx & (1 << 24) != 0,
                clean_inval: ebx & (1 << 23) != 0,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            HostCaps {
                clean: true,
                clean_inval: true,
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            HostCaps::default()
        }
    }

    pub fn supports(self, op: CacheOp) -> bool {
        match op {
            CacheOp::Clean => self.clean,
            CacheOp::CleanInval => self.clean_inval,
            CacheOp::Inval => false,
        }
    }
}

/// The host's cache line size as the maintenance loops must step: (bytes, how it was found).
pub fn host_line_bytes() -> (u64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID leaf 1, EBX[15:8]: the CLFLUSH line size in 8-byte units — exactly the granule
        // CLFLUSHOPT and CLWB act on.
        let r = std::arch::x86_64::__cpuid(1);
        let units = u64::from((r.ebx >> 8) & 0xff);
        if units > 0 && (units * 8).is_power_of_two() {
            return (units * 8, "CPUID leaf 1 EBX[15:8] (CLFLUSH line size)");
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let ctr: u64;
        // SAFETY: reading CTR_EL0 has no side effects; Linux lets EL0 read it (SCTLR_EL1.UCT),
        // emulating the read if it traps.
        unsafe { std::arch::asm!("mrs {0}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
        // DminLine, CTR_EL0[19:16]: log2 of the smallest D-cache line in 4-byte words.
        return (4 << ((ctr >> 16) & 0xf), "CTR_EL0.DminLine");
    }
    #[allow(unreachable_code)]
    (64, "assumed 64 (no line size reported)")
}

/// A page-aligned, zeroed heap allocation, freed on drop.
struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

impl Buffer {
    fn new(len: u64) -> Result<Buffer, HostError> {
        let len_usize = usize::try_from(len)
            .map_err(|_| HostError(format!("host buffer of {len} bytes is too large")))?;
        if len_usize == 0 {
            return Err(HostError("host buffer must not be empty".into()));
        }
        let layout = Layout::from_size_align(len_usize, PAGE_SIZE as usize)
            .map_err(|e| HostError(format!("host buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| HostError(format!("cannot allocate a host buffer of {len} bytes")))?;
        Ok(Buffer {
            ptr,
            len: len_usize,
            layout,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` came from `alloc_zeroed` with `len` bytes, is initialised (zeroed), is
        // exclusively owned by `self`, and the borrow of `self` bounds the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `Buffer::new` with exactly this layout, freed only here.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

// SAFETY: `Buffer` uniquely owns its allocation; nothing else aliases the pointer.
unsafe impl Send for Buffer {}

/// This machine, exercised for real.
pub struct Host {
    buf: Buffer,
    base: PhysAddr,
    line: u64,
    caps: HostCaps,
    epoch: Instant,
    lines_issued: [u64; 3],
    barriers: u64,
    faults: u64,
    first_fault: Option<HostFault>,
    dry: bool,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("base", &self.base)
            .field("bytes", &self.buf.len)
            .field("line", &self.line)
            .field("caps", &self.caps)
            .field("lines_issued", &self.lines_issued)
            .field("barriers", &self.barriers)
            .field("faults", &self.faults)
            .finish()
    }
}

impl Host {
    /// A host buffer of `bytes` standing for physical `[base, base + bytes)`. Fails unless `base`
    /// is page aligned, the range fits the 64-bit space, memory is available, and this CPU can issue
    /// every operation in `ops`.
    pub fn new(base: PhysAddr, bytes: u64, ops: &[CacheOp]) -> Result<Host, HostError> {
        if !base.is_aligned(PAGE_SIZE) {
            return Err(HostError(format!(
                "host base {base} is not {PAGE_SIZE}-byte aligned"
            )));
        }
        if base.checked_add(bytes).is_none() {
            return Err(HostError(format!(
                "host buffer {base}+{bytes:#x} overflows the address space"
            )));
        }
        let caps = HostCaps::detect();
        for &op in ops {
            if !caps.supports(op) {
                return Err(HostError(format!(
                    "unsupported: this CPU cannot issue `{}` from user space ({})",
                    op.key(),
                    unsupported_why(op)
                )));
            }
        }
        let (line, _) = host_line_bytes();
        Ok(Host {
            buf: Buffer::new(bytes)?,
            base,
            line,
            caps,
            epoch: Instant::now(),
            lines_issued: [0; 3],
            barriers: 0,
            faults: 0,
            first_fault: None,
            dry: false,
        })
    }

    pub fn base(&self) -> PhysAddr {
        self.base
    }

    pub fn len(&self) -> u64 {
        self.buf.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.buf.len == 0
    }

    /// Write one byte in every line, as a CPU that just filled the buffer would, so each line is
    /// dirty in the cache when maintenance reaches it. `seed` varies the bytes between passes.
    pub fn dirty(&mut self, seed: u8) {
        let line = self.line as usize;
        let s = self.buf.as_mut_slice();
        for (i, b) in s.iter_mut().step_by(line).enumerate() {
            *b = seed.wrapping_add(i as u8);
        }
        // The writes must reach the cache before the maintenance that follows; without this the
        // compiler could sink or drop stores to memory it cannot see being read.
        std::hint::black_box(s);
    }

    /// Dry mode: every request is still checked, but no instruction runs and nothing is counted.
    /// What is left to time is the software path alone — the stack's walk, the calls into this
    /// backend and the bounds checks — which calibration needs to separate software from hardware.
    pub fn set_dry(&mut self, dry: bool) {
        self.dry = dry;
    }

    /// Write one byte at `phys` so its line is dirty. False (and nothing written) if `phys` is
    /// outside the buffer.
    pub fn touch(&mut self, phys: PhysAddr, value: u8) -> bool {
        let Some(off) = phys
            .offset_from(self.base)
            .and_then(|o| usize::try_from(o).ok())
        else {
            return false;
        };
        match self.buf.as_mut_slice().get_mut(off) {
            Some(b) => {
                *b = value;
                std::hint::black_box(b);
                true
            }
            _ => false,
        }
    }

    /// Lines issued so far with `op` (only lines actually executed).
    pub fn lines_issued(&self, op: CacheOp) -> u64 {
        self.lines_issued[op as usize]
    }

    pub fn barriers(&self) -> u64 {
        self.barriers
    }

    /// Requests refused so far, and the first of them.
    pub fn faults(&self) -> (u64, Option<HostFault>) {
        (self.faults, self.first_fault)
    }

    /// Zero the counters (after a warm-up).
    pub fn reset_counts(&mut self) {
        self.lines_issued = [0; 3];
        self.barriers = 0;
        self.faults = 0;
        self.first_fault = None;
    }

    fn fault(&mut self, f: HostFault) {
        self.faults += 1;
        self.first_fault.get_or_insert(f);
    }

    /// Byte offset in the buffer of the line containing `first`, if `lines` lines from there fit.
    fn offset_of(&self, first: PhysAddr, lines: u64) -> Option<usize> {
        let line_addr = first.align_down(self.line);
        let off = line_addr.offset_from(self.base)?;
        let end = lines.checked_mul(self.line)?.checked_add(off)?;
        (end <= self.buf.len as u64).then_some(off as usize)
    }
}

fn unsupported_why(op: CacheOp) -> &'static str {
    match (op, cfg!(target_arch = "x86_64")) {
        (CacheOp::Clean, true) => "this CPU has no CLWB",
        (CacheOp::CleanInval, true) => "this CPU has no CLFLUSHOPT",
        (CacheOp::Inval, true) => "x86 has no invalidate-only instruction",
        (CacheOp::Inval, false) => "DC IVAC is not allowed at EL0",
        _ => "no cache-maintenance instructions on this architecture",
    }
}

#[cfg(target_arch = "x86_64")]
mod insn {
    /// CLFLUSHOPT on the line containing `p`.
    ///
    /// # Safety
    /// `p` must point into memory this process owns and the CPU must support CLFLUSHOPT.
    #[inline(always)]
    pub unsafe fn clean_inval(p: *const u8) {
        // SAFETY: per the contract, `p` is mapped and owned; CLFLUSHOPT writes back and drops the
        // line without changing its contents as seen by any agent.
        unsafe {
            std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
        };
    }

    /// CLWB on the line containing `p`.
    ///
    /// # Safety
    /// As [`clean_inval`], with CLWB support.
    #[inline(always)]
    pub unsafe fn clean(p: *const u8) {
        // SAFETY: per the contract; CLWB writes the line back and leaves the data unchanged.
        unsafe { std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn barrier() {
        // SFENCE orders CLFLUSHOPT/CLWB: it retires once every earlier one has completed.
        // SAFETY: SFENCE has no operands and no effect beyond ordering.
        unsafe { std::arch::asm!("sfence", options(nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn wmb() {
        // The kernel's x86-64 wmb() is SFENCE as well.
        barrier();
    }
}

#[cfg(target_arch = "aarch64")]
mod insn {
    /// DC CIVAC on the line containing `p`.
    ///
    /// # Safety
    /// `p` must point into memory this process owns (EL0 may issue DC CIVAC under Linux).
    #[inline(always)]
    pub unsafe fn clean_inval(p: *const u8) {
        // SAFETY: per the contract; DC CIVAC cleans and invalidates to PoC, data unchanged.
        unsafe { std::arch::asm!("dc civac, {0}", in(reg) p, options(nostack, preserves_flags)) };
    }

    /// DC CVAC on the line containing `p`.
    ///
    /// # Safety
    /// As [`clean_inval`].
    #[inline(always)]
    pub unsafe fn clean(p: *const u8) {
        // SAFETY: per the contract; DC CVAC cleans to PoC, data unchanged.
        unsafe { std::arch::asm!("dc cvac, {0}", in(reg) p, options(nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn barrier() {
        // SAFETY: DSB SY has no operands; it waits for earlier maintenance to complete.
        unsafe { std::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
    }

    #[inline(always)]
    pub fn wmb() {
        // SAFETY: DSB ST has no operands; it waits for earlier stores to complete.
        unsafe { std::arch::asm!("dsb st", options(nostack, preserves_flags)) };
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod insn {
    // `Host::new` refuses every operation on other architectures, so these are never reached.
    pub unsafe fn clean_inval(_p: *const u8) {}
    pub unsafe fn clean(_p: *const u8) {}
    pub fn barrier() {}
    pub fn wmb() {}
}

impl Hw for Host {
    #[inline]
    fn as_dyn_hw(&mut self) -> &mut dyn Hw {
        self
    }

    fn enter(&mut self, _frame: &'static FrameId) -> Caller {
        Caller(0)
    }

    fn leave(&mut self, _caller: Caller) {}

    fn leaf(&mut self, _name: &'static str, cost: SwCost, count: Option<crate::hw::Counter>) {
        self.sw(cost);
        if let Some(c) = count {
            self.count(c, 1);
        }
    }

    fn cache_maint(&mut self, op: CacheOp, first: PhysAddr, lines: u64) {
        if lines == 0 {
            return;
        }
        if !self.caps.supports(op) {
            self.fault(HostFault::Unsupported(op));
            return;
        }
        let Some(off) = self.offset_of(first, lines) else {
            self.fault(HostFault::OutOfRange { first, lines });
            return;
        };
        if self.dry {
            return;
        }
        let step = self.line as usize;
        // SAFETY: `offset_of` proved `off + lines * line <= len`, so the pointer is inside the
        // allocation and every line stepped to below stays inside it.
        let start = unsafe { self.buf.ptr.as_ptr().add(off) };
        let n = lines as usize;
        match op {
            CacheOp::CleanInval => {
                for i in 0..n {
                    // SAFETY: `i * step < lines * line`, inside the buffer (see above); the CPU
                    // supports the instruction (`caps`, checked above).
                    unsafe { insn::clean_inval(start.add(i * step)) };
                }
            }
            CacheOp::Clean => {
                for i in 0..n {
                    // SAFETY: as above.
                    unsafe { insn::clean(start.add(i * step)) };
                }
            }
            CacheOp::Inval => {}
        }
        self.lines_issued[op as usize] += lines;
    }

    fn barrier(&mut self) {
        if self.dry {
            return;
        }
        insn::barrier();
        self.barriers += 1;
    }

    // Nothing on the host path issues one (the iommu layer needs a DeviceHw); it runs the
    // instruction all the same, so a future caller measures what it asks for.
    fn wmb(&mut self) {
        if !self.dry {
            insn::wmb();
        }
    }

    fn sw(&mut self, _cost: SwCost) {}

    fn sw_cost(&self, _key: SwKey) -> SwCost {
        SwCost(0)
    }

    fn line_bytes(&self) -> u64 {
        self.line
    }

    fn outer_line_op(&mut self, _op: CacheOp, _first: PhysAddr, lines: u64) {
        if lines > 0 {
            self.fault(HostFault::NoOuterCache);
        }
    }

    fn outer_sync(&mut self) {
        self.fault(HostFault::NoOuterCache);
    }

    fn outer_way_op(&mut self, _op: CacheOp, _lines: u64) {
        self.fault(HostFault::NoOuterCache);
    }

    fn now_ps(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX / 1000)
            .saturating_mul(1000)
    }
}

/// The environment variable that makes a host-dependent test fail, rather than skip, on a CPU
/// without the instruction it needs: set it where the instructions are known to be there, so
/// that a test cannot pass by never running.
pub const REQUIRE_HOST_INSNS: &str = "DMASIM_REQUIRE_HOST_INSNS";

/// A host-dependent test cannot run on this CPU, for `why`: said on standard error as a skip,
/// or a failure when [`REQUIRE_HOST_INSNS`] is set (to anything but `0`).
pub fn skip_host_test(why: &str) {
    if std::env::var_os(REQUIRE_HOST_INSNS).is_some_and(|v| v != "0") {
        panic!("{REQUIRE_HOST_INSNS} is set, and this test cannot run on this CPU: {why}");
    }
    eprintln!("skipped: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: PhysAddr = PhysAddr(0x8000_0000);

    /// A host for `op`, or `None` (with a note) on a CPU without it.
    fn host(bytes: u64, op: CacheOp) -> Option<Host> {
        match Host::new(BASE, bytes, &[op]) {
            Ok(h) => Some(h),
            Err(e) => {
                skip_host_test(&e.to_string());
                None
            }
        }
    }

    #[test]
    fn issues_exactly_the_lines_asked_for() {
        for op in [CacheOp::CleanInval, CacheOp::Clean] {
            let Some(mut h) = host(64 * 1024, op) else {
                continue;
            };
            let line = h.line_bytes();
            h.dirty(1);
            h.cache_maint(op, BASE, 10);
            h.cache_maint(op, PhysAddr(BASE.0 + 5 * line + 3), 2);
            h.barrier();
            assert_eq!(h.lines_issued(op), 12);
            assert_eq!(h.barriers(), 1);
            assert_eq!(h.faults(), (0, None));
        }
    }

    /// A host process cannot reach a PL310: outer-cache operations are faults, never silently
    /// free, and an empty run is not one.
    #[test]
    fn outer_cache_operations_are_faults() {
        let Some(mut h) = host(8192, CacheOp::CleanInval) else {
            return;
        };
        h.outer_line_op(CacheOp::Clean, BASE, 0);
        assert_eq!(h.faults(), (0, None));
        h.outer_line_op(CacheOp::Clean, BASE, 4);
        h.outer_sync();
        assert_eq!(h.faults(), (2, Some(HostFault::NoOuterCache)));
    }

    #[test]
    fn refuses_out_of_range_without_panicking() {
        let Some(mut h) = host(8192, CacheOp::CleanInval) else {
            return;
        };
        let line = h.line_bytes();
        let cases = [
            (PhysAddr(BASE.0 - line), 1),        // below the base
            (PhysAddr(BASE.0 + 8192), 1),        // just past the end
            (PhysAddr(BASE.0 + 8192 - line), 2), // starts inside, runs out
            (PhysAddr(BASE.0), u64::MAX),        // length overflows
            (PhysAddr(u64::MAX), 1),             // far away
        ];
        for (first, lines) in cases {
            h.cache_maint(CacheOp::CleanInval, first, lines);
        }
        assert_eq!(h.lines_issued(CacheOp::CleanInval), 0);
        let (n, first) = h.faults();
        assert_eq!(n, cases.len() as u64);
        assert_eq!(
            first,
            Some(HostFault::OutOfRange {
                first: PhysAddr(BASE.0 - line),
                lines: 1
            })
        );
        // The last line of the buffer is inside.
        h.cache_maint(CacheOp::CleanInval, PhysAddr(BASE.0 + 8192 - line), 1);
        assert_eq!(h.lines_issued(CacheOp::CleanInval), 1);
    }

    #[test]
    fn invalidate_only_is_refused() {
        assert!(Host::new(BASE, 4096, &[CacheOp::Inval]).is_err());
        let Some(mut h) = host(4096, CacheOp::CleanInval) else {
            return;
        };
        h.cache_maint(CacheOp::Inval, BASE, 1);
        assert_eq!(
            h.faults(),
            (1, Some(HostFault::Unsupported(CacheOp::Inval)))
        );
        assert_eq!(h.lines_issued(CacheOp::Inval), 0);
    }

    #[test]
    fn dry_mode_checks_but_issues_nothing() {
        let Some(mut h) = host(8192, CacheOp::CleanInval) else {
            return;
        };
        h.set_dry(true);
        h.cache_maint(CacheOp::CleanInval, BASE, 4);
        h.cache_maint(CacheOp::CleanInval, PhysAddr(BASE.0 + 8192), 1);
        h.barrier();
        assert_eq!(h.lines_issued(CacheOp::CleanInval), 0);
        assert_eq!(h.barriers(), 0);
        assert_eq!(h.faults().0, 1);
        h.set_dry(false);
        h.cache_maint(CacheOp::CleanInval, BASE, 4);
        assert_eq!(h.lines_issued(CacheOp::CleanInval), 4);
        assert!(h.touch(PhysAddr(BASE.0 + 8191), 1));
        assert!(!h.touch(PhysAddr(BASE.0 + 8192), 1));
        assert!(!h.touch(PhysAddr(BASE.0 - 1), 1));
    }

    #[test]
    fn bad_geometry_is_an_error() {
        assert!(Host::new(PhysAddr(0x1001), 4096, &[]).is_err());
        assert!(Host::new(BASE, 0, &[]).is_err());
        assert!(Host::new(PhysAddr(!0xfff), 1 << 20, &[]).is_err());
    }

    #[test]
    fn dirtying_writes_every_line_and_clock_moves_forward() {
        let Some(mut h) = host(4096, CacheOp::CleanInval) else {
            return;
        };
        let line = h.line_bytes() as usize;
        h.dirty(7);
        let s = h.buf.as_mut_slice();
        assert_eq!(s[0], 7);
        assert_eq!(s[line], 8);
        assert_eq!(s[1], 0);
        let t0 = h.now_ps();
        let t1 = h.now_ps();
        assert!(t1 >= t0);
    }
}
