//! The `user_access` workload: a program's loop over a buffer mapped into its address space.
//!
//! Kernel counterpart: none for the loop (it is user code); the mapping is the kernel's —
//! `dma_mmap_coherent` (arch/arm/mm/dma-mapping.c `arm_dma_mmap`: `remap_pfn_range` with
//! `__get_dma_pgprot`), a driver's own `remap_pfn_range` with the protection it chose, or the
//! program's own `malloc`ed pages — and decides the memory type ([`crate::arch::arm::pgtable`]).
//!
//! What it models: a read loop or a write loop of `access_bytes`-sized accesses over the buffer,
//! or a memcpy into it or out of it from a cached `malloc`ed buffer of the same size (glibc's:
//! 8-byte loads and stores on ARMv7, [`user_copy_access`]), `iterations` times, charged through
//! [`crate::hw::Hw::cpu_access`] and [`crate::hw::Hw::cpu_copy`]: cached memory through the cache
//! model, other types one bus transaction per access.
//!
//! Invariants: the memory type comes from the mapping call and its protection only; a loop's
//! accesses are counted by running it line by line; an access size the architecture does not
//! have was refused before the run.

use super::{Ctx, RunInfo, Scenario, Shared, Workload};
use crate::arch::arm::pgtable::{Pgprot, get_dma_pgprot};
use crate::hw::cache::Access;
use crate::hw::calls::{StackRow, stack_rows};
use crate::hw::memory::{MemType, access_sizes, user_copy_access};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw};
use crate::input::InputError;
use crate::report::{
    FORMAT_VERSION, HeadDoc, breakdown_docs, counts_map, header, human_bytes, ns, stack_table,
};
use crate::types::{Arch, PhysAddr};
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use toml::Spanned;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "user_access",
    summary: "a program's read/write/memcpy loop over a buffer mapped to user space",
    parse,
};

/// Largest buffer: the loop is run line by line.
pub const MAX_BUFFER: u64 = 4 << 30;
/// Where the buffer sits (simulated DRAM; only its line alignment matters).
const BUF: u64 = 0x1000_0000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    buffer: Option<Spanned<toml::Value>>,
    memory: Option<Spanned<String>>,
    mapping: Option<Spanned<String>>,
    prot: Option<Spanned<String>>,
    pattern: Option<Spanned<String>>,
    access_bytes: Option<Spanned<i64>>,
    iterations: Option<Spanned<i64>>,
}

/// What backs the buffer and how the program got it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// `dma_alloc_coherent` for a non-coherent device, then `dma_mmap_coherent`.
    DmaMmapCoherent,
    /// A driver's `remap_pfn_range` of its buffer with `prot`.
    RemapPfnRange(Pgprot),
    /// The program's own `malloc`: anonymous, cacheable pages.
    Malloc,
}

impl Mapping {
    /// The protection the user mapping is made with.
    pub fn prot(self) -> Pgprot {
        match self {
            Mapping::DmaMmapCoherent => get_dma_pgprot(false),
            Mapping::RemapPfnRange(p) => p,
            Mapping::Malloc => Pgprot::VmPageProt,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mapping::DmaMmapCoherent => "dma_mmap_coherent",
            Mapping::RemapPfnRange(_) => "remap_pfn_range",
            Mapping::Malloc => "malloc",
        }
    }
}

/// The program's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Read,
    Write,
    /// memcpy from a cached buffer into the mapped one.
    MemcpyIn,
    /// memcpy from the mapped buffer into a cached one.
    MemcpyOut,
}

impl Pattern {
    pub const NAMES: &[&str] = &["read", "write", "memcpy_in", "memcpy_out"];

    fn parse(s: &str) -> Option<Pattern> {
        match s {
            "read" => Some(Pattern::Read),
            "write" => Some(Pattern::Write),
            "memcpy_in" => Some(Pattern::MemcpyIn),
            "memcpy_out" => Some(Pattern::MemcpyOut),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Pattern::NAMES[self as usize]
    }

    fn is_copy(self) -> bool {
        matches!(self, Pattern::MemcpyIn | Pattern::MemcpyOut)
    }
}

/// A user-space access loop.
#[derive(Clone, Debug, PartialEq)]
pub struct UserAccess {
    pub buffer_bytes: u64,
    /// Whether the memory came from `dma_alloc_coherent` (else kmalloc or malloc: cacheable).
    pub coherent_memory: bool,
    pub mapping: Mapping,
    pub pattern: Pattern,
    /// Bytes per access of a read or write loop (memcpy uses glibc's, [`user_copy_access`]).
    pub access_bytes: u64,
    /// The line of `access_bytes`, for the arch check at resolve.
    pub access_line: Option<usize>,
    /// The line of `prot`, for the release check at resolve.
    pub prot_line: Option<usize>,
    pub iterations: u32,
}

impl UserAccess {
    /// The memory type of the program's mapping.
    pub fn memory_type(&self) -> MemType {
        self.mapping.prot().memory_type()
    }

    /// The size of each access to the mapped buffer on `arch`.
    pub fn size_on(&self, arch: Arch) -> u64 {
        if self.pattern.is_copy() {
            user_copy_access(arch)
        } else {
            self.access_bytes
        }
    }

    /// A cacheable user alias of memory the kernel maps non-cacheable.
    pub fn mismatched(&self) -> bool {
        self.coherent_memory && self.memory_type() == MemType::Cached
    }

    /// Checks that depend on the platform: the access size, the profile's costs.
    pub(crate) fn check(&self, s: &Scenario) -> Result<(), InputError> {
        let arch = s.profile.arch();
        if arch != Arch::Armv7 {
            return Err(InputError::new(
                &s.file,
                format!(
                    "user_access models ARMv7's page protections (3.16-4.0) only, and platform `{}` is {}",
                    s.profile.name(),
                    arch.name()
                ),
            ));
        }
        // ARM has no pgprot_device of its own in these releases; asm-generic's fallback to
        // pgprot_noncached arrived in 3.19, so a driver calling it does not build before that.
        if self.mapping.prot() == Pgprot::Device && s.kernel < crate::policy::KernelVersion(3, 19) {
            return Err(InputError {
                file: s.file.clone(),
                line: self.prot_line,
                key: Some("workload.prot".into()),
                message: format!(
                    "pgprot_device does not exist on ARM in {}: asm-generic's fallback (pgprot_noncached, strongly-ordered) arrived in 3.19; use noncached, or kernel 3.19 or later",
                    s.kernel
                ),
            });
        }
        let size = self.size_on(arch);
        if !access_sizes(arch).contains(&size) {
            return Err(InputError {
                file: s.file.clone(),
                line: self.access_line,
                key: Some("workload.access_bytes".into()),
                message: format!(
                    "{} has no {size}-byte access; its sizes: {:?}",
                    arch.name(),
                    access_sizes(arch)
                ),
            });
        }
        let why = format!("a user_access {} loop", self.pattern.name());
        let mt = self.memory_type();
        match self.pattern {
            Pattern::Read => s.profile.require_access(mt, false, size, &why)?,
            Pattern::Write => s.profile.require_access(mt, true, size, &why)?,
            Pattern::MemcpyIn => {
                s.profile
                    .require_access(MemType::Cached, false, size, &why)?;
                s.profile.require_access(mt, true, size, &why)?;
            }
            Pattern::MemcpyOut => {
                s.profile.require_access(mt, false, size, &why)?;
                s.profile
                    .require_access(MemType::Cached, true, size, &why)?;
            }
        }
        Ok(())
    }
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let buffer = w
        .buffer
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "buffer", "the buffer size, e.g. \"200M\""))?;
    let buffer_bytes = c.size(buffer.get_ref(), buffer.span(), "workload.buffer")?;
    if buffer_bytes > MAX_BUFFER {
        return Err(c.err(
            buffer.span(),
            "workload.buffer",
            format!("at most {MAX_BUFFER} bytes"),
        ));
    }
    let mem = w
        .memory
        .as_ref()
        .ok_or_else(|| c.missing(&w.kind, "memory", "dma_alloc_coherent, kmalloc or malloc"))?;
    let memory = mem.get_ref().as_str();
    if !["dma_alloc_coherent", "kmalloc", "malloc"].contains(&memory) {
        return Err(c.err(
            mem.span(),
            "workload.memory",
            format!("unknown memory `{memory}`; choose dma_alloc_coherent, kmalloc or malloc"),
        ));
    }
    let mapping = match (memory, &w.mapping) {
        ("malloc", None) => Mapping::Malloc,
        ("malloc", Some(m)) => {
            return Err(c.err(
                m.span(),
                "workload.mapping",
                "malloc'ed memory is the program's own: no mapping call",
            ));
        }
        (_, None) => {
            return Err(c.missing(&w.kind, "mapping", "dma_mmap_coherent or remap_pfn_range"));
        }
        (_, Some(m)) => match m.get_ref().as_str() {
            "dma_mmap_coherent" if memory == "dma_alloc_coherent" => Mapping::DmaMmapCoherent,
            "dma_mmap_coherent" => {
                return Err(c.err(
                    m.span(),
                    "workload.mapping",
                    "dma_mmap_coherent maps memory from dma_alloc_coherent only",
                ));
            }
            "remap_pfn_range" => {
                let p = w.prot.as_ref().ok_or_else(|| {
                    c.missing(
                        &w.kind,
                        "prot",
                        &format!(
                            "the protection passed to remap_pfn_range: {}",
                            Pgprot::NAMES.join(", ")
                        ),
                    )
                })?;
                Mapping::RemapPfnRange(Pgprot::parse(p.get_ref()).ok_or_else(|| {
                    c.err(
                        p.span(),
                        "workload.prot",
                        format!(
                            "unknown protection `{}`; choose one of: {}",
                            p.get_ref(),
                            Pgprot::NAMES.join(", ")
                        ),
                    )
                })?)
            }
            other => {
                return Err(c.err(
                    m.span(),
                    "workload.mapping",
                    format!(
                        "unknown mapping `{other}`; choose dma_mmap_coherent or remap_pfn_range"
                    ),
                ));
            }
        },
    };
    if let (Some(p), false) = (&w.prot, matches!(mapping, Mapping::RemapPfnRange(_))) {
        return Err(c.err(
            p.span(),
            "workload.prot",
            "only remap_pfn_range takes a protection from the driver",
        ));
    }
    let pat = w.pattern.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "pattern",
            &format!("one of {}", Pattern::NAMES.join(", ")),
        )
    })?;
    let pattern = Pattern::parse(pat.get_ref()).ok_or_else(|| {
        c.err(
            pat.span(),
            "workload.pattern",
            format!(
                "unknown pattern `{}`; choose one of: {}",
                pat.get_ref(),
                Pattern::NAMES.join(", ")
            ),
        )
    })?;
    let (access_bytes, access_line) = match (&w.access_bytes, pattern.is_copy()) {
        (Some(a), true) => {
            return Err(c.err(
                a.span(),
                "workload.access_bytes",
                "memcpy moves what glibc's memcpy moves per load and store (8 bytes on ARMv7); access_bytes is for read and write loops",
            ));
        }
        (Some(a), false) => (
            c.int(a, "workload.access_bytes", 1..=64)?,
            Some(c.line(a.span())),
        ),
        (None, true) => (0, None),
        (None, false) => {
            return Err(c.missing(&w.kind, "access_bytes", "bytes per load or store, e.g. 1"));
        }
    };
    let iterations = match &w.iterations {
        Some(it) => c.int(it, "workload.iterations", 1..=1000)? as u32,
        None => 1,
    };
    Ok(Workload::UserAccess(UserAccess {
        buffer_bytes,
        coherent_memory: memory == "dma_alloc_coherent",
        mapping,
        pattern,
        access_bytes,
        access_line,
        prot_line: w.prot.as_ref().map(|p| c.line(p.span())),
        iterations,
    }))
}

#[derive(Clone, Debug)]
pub struct UserAccessResult {
    pub info: RunInfo,
    pub workload: UserAccess,
    pub memory_type: MemType,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl UserAccessResult {
    /// Seconds per iteration.
    pub fn seconds(&self) -> f64 {
        self.total_ps as f64 / 1e12 / f64::from(self.workload.iterations)
    }

    pub fn count(&self, c: Counter) -> u64 {
        self.counts[c as usize]
    }

    /// The buffer's bytes the loop moved per second (MiB/s), averaged over the iterations.
    pub fn mib_per_s(&self) -> f64 {
        let s = self.seconds();
        if s > 0.0 {
            self.workload.buffer_bytes as f64 / f64::from(1u32 << 20) / s
        } else {
            0.0
        }
    }
}

/// Run the loop on the Model.
pub fn run(s: &Scenario, w: &UserAccess) -> UserAccessResult {
    let mut hw = Model::new(s.profile.model.clone());
    let arch = s.profile.arch();
    let size = w.size_on(arch);
    let mt = w.memory_type();
    let buf = PhysAddr(BUF);
    // The malloc'ed side of a memcpy, a line-aligned gap after the buffer.
    let other = PhysAddr(BUF + w.buffer_bytes.next_multiple_of(1 << 20) + (1 << 20));
    let n = w.buffer_bytes;
    for _ in 0..w.iterations {
        let back = match w.pattern {
            Pattern::Read => {
                let back = hw.enter(crate::frame_id!("user read loop"));
                hw.cpu_access(Access::Read, mt, size, buf, n);
                back
            }
            Pattern::Write => {
                let back = hw.enter(crate::frame_id!("user write loop"));
                hw.cpu_access(Access::Write, mt, size, buf, n);
                back
            }
            Pattern::MemcpyIn => {
                let back = hw.enter(crate::frame_id!("memcpy"));
                hw.cpu_copy((mt, buf), (MemType::Cached, other), size, n);
                back
            }
            Pattern::MemcpyOut => {
                let back = hw.enter(crate::frame_id!("memcpy"));
                hw.cpu_copy((MemType::Cached, other), (mt, buf), size, n);
                back
            }
        };
        hw.leave(back);
    }
    UserAccessResult {
        info: s.run_info(),
        workload: w.clone(),
        memory_type: mt,
        counts: hw.ledger().totals(),
        stacks: stack_rows(hw.ledger()),
        total_ps: hw.ledger().total_ps(),
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    workload: WorkloadDoc,
    memory_type: &'static str,
    mismatched_attributes: bool,
    seconds_per_iteration: f64,
    mib_per_s: f64,
    operations: std::collections::BTreeMap<&'static str, u64>,
    breakdown: Vec<crate::report::StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
struct WorkloadDoc {
    kind: &'static str,
    buffer_bytes: u64,
    memory: &'static str,
    mapping: &'static str,
    prot: &'static str,
    pattern: &'static str,
    access_bytes: u64,
    iterations: u32,
}

fn memory_name(w: &UserAccess) -> &'static str {
    match (w.coherent_memory, w.mapping) {
        (true, _) => "dma_alloc_coherent",
        (false, Mapping::Malloc) => "malloc",
        (false, _) => "kmalloc",
    }
}

/// The `dmasim run --format json` document.
pub fn json(r: &UserAccessResult) -> serde_json::Value {
    let w = &r.workload;
    let doc = Doc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        workload: WorkloadDoc {
            kind: "user_access",
            buffer_bytes: w.buffer_bytes,
            memory: memory_name(w),
            mapping: w.mapping.name(),
            prot: w.mapping.prot().name(),
            pattern: w.pattern.name(),
            access_bytes: w.size_on(r.info.arch),
            iterations: w.iterations,
        },
        memory_type: r.memory_type.key(),
        mismatched_attributes: w.mismatched(),
        seconds_per_iteration: r.seconds(),
        mib_per_s: r.mib_per_s(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

/// The `dmasim run` terminal table.
pub fn table(r: &UserAccessResult) -> String {
    let mut o = String::new();
    let w = &r.workload;
    header(&mut o, &r.info);
    let _ = writeln!(
        o,
        "workload   {} loop of {}-byte accesses over {} ({} memory, {} with {}), {} iteration(s)",
        w.pattern.name(),
        w.size_on(r.info.arch),
        human_bytes(w.buffer_bytes),
        memory_name(w),
        w.mapping.name(),
        w.mapping.prot().name(),
        w.iterations
    );
    let _ = writeln!(o, "memory     {}", r.memory_type.describe());
    if w.mismatched() {
        let _ = writeln!(
            o,
            "warning    a cacheable user alias of memory the kernel maps non-cacheable: mismatched attributes (ARMv7 ARM A3.5.7); the model runs it as cached"
        );
    }
    let _ = writeln!(o, "time       {:.3} s per iteration", r.seconds());
    let _ = writeln!(
        o,
        "rate       {:.1} MiB/s of the buffer (the first iteration starts with cold caches)",
        r.mib_per_s()
    );
    let _ = writeln!(o, "\noperations per iteration");
    let it = u64::from(w.iterations);
    crate::report::operations_per_iteration(&mut o, &r.counts, r.info.arch, it);
    stack_table(&mut o, "per iteration", &r.stacks, r.total_ps, it);
    o
}

impl super::WorkloadKind for UserAccess {
    type Output = UserAccessResult;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(
        &self,
        s: &Scenario,
        _progress: &super::Progress,
    ) -> Result<UserAccessResult, super::RunFailure> {
        Ok(run(s, self))
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        UserAccess::check(self, s)
    }

    fn work(&self, s: &Scenario) -> u128 {
        2 * u128::from(self.buffer_bytes) / s.work_line() * u128::from(self.iterations)
    }

    fn progress_total(&self) -> u64 {
        u64::from(self.iterations)
    }

    fn uses_dma_api(&self) -> bool {
        false
    }
}

impl super::KindResult for UserAccessResult {
    super::kind::result_fields!();
    /// The program's loop, once per iteration.
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        vec![(
            format!("{} loop", self.workload.pattern.name()),
            u64::from(self.workload.iterations),
            self.total_ps,
        )]
    }
}
