//! Resolving a profile: every value checked (range, unit, source) and turned into what the
//! Model charges from ([`crate::hw::model::ModelParams`]).
//!
//! Kernel counterpart: none.
//!
//! Invariants: a value out of its range is an error naming the file, line and key; every cost
//! is finite, non-negative and at most [`MAX_COST_NS`].

use super::*;
/// Longest one operation may cost, in ns: one second. With it and the model's limits on work,
/// no run's picosecond clock can wrap.
pub const MAX_COST_NS: f64 = 1e9;
/// The CPU frequencies a profile may give, in MHz. The floor is a plausible one for a CPU that
/// runs Linux's DMA layer: a value below it is most likely a GHz figure typed as MHz.
pub const MIN_FREQ_MHZ: f64 = 10.0;
pub const MAX_FREQ_MHZ: f64 = 100_000.0;
/// The largest cache line a profile may give, in bytes.
pub const MAX_LINE_BYTES: f64 = 4096.0;

pub(super) struct Resolver<'a> {
    pub(super) origin: &'a str,
    pub(super) text: &'a str,
    pub(super) freq_mhz: f64,
}

impl Resolver<'_> {
    pub(super) fn source(&self, key: &str, s: &Spanned<String>) -> Result<(), InputError> {
        if s.get_ref().trim().is_empty() {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(s.span()),
                &format!("{key}.source"),
                "a source is required: a citation, `fit: <rows>` or `measured: <how>`",
            ));
        }
        if let Some(d) = params::def(key)
            && !d.source.allows(SourceKind::of(s.get_ref()))
        {
            // What the machine is (its geometry, topology, counts) is read from its manual or
            // firmware; fitting it to timings would let it absorb any error of the costs.
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(s.span()),
                &format!("{key}.source"),
                format!(
                    "a {} is not fitted: cite where it comes from (a manual, the firmware) or say `measured:` or `held:`",
                    d.kind.name()
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn number(&self, key: &str, v: &Spanned<f64>) -> Result<f64, InputError> {
        let x = *v.get_ref();
        if !x.is_finite() || x < 0.0 {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(v.span()),
                key,
                format!("must be a finite, non-negative number, found {x}"),
            ));
        }
        Ok(x)
    }

    pub(super) fn param(&self, key: &str, p: &Param) -> Result<f64, InputError> {
        self.source(key, &p.source)?;
        self.number(&format!("{key}.value"), &p.value)
    }

    /// A cost in picoseconds.
    pub(super) fn cost(&self, key: &str, c: &Cost) -> Result<u64, InputError> {
        self.cost_scaled(key, c, 1000.0)
    }

    /// A cost in femtoseconds, for per-byte costs that are fractions of a picosecond.
    pub(super) fn cost_fs(&self, key: &str, c: &Cost) -> Result<u64, InputError> {
        self.cost_scaled(key, c, 1_000_000.0)
    }

    /// A cost in nanoseconds times `per_ns` (1000 for picoseconds).
    pub(super) fn cost_scaled(&self, key: &str, c: &Cost, per_ns: f64) -> Result<u64, InputError> {
        self.source(key, &c.source)?;
        let ns = match (&c.ns, &c.cycles) {
            (Some(ns), None) => self.number(&format!("{key}.ns"), ns)?,
            (None, Some(cy)) => self.number(&format!("{key}.cycles"), cy)? * 1000.0 / self.freq_mhz,
            (Some(ns), Some(_)) => {
                return Err(InputError::at(
                    self.origin,
                    self.text,
                    Some(ns.span()),
                    key,
                    "give either `ns` or `cycles`, not both",
                ));
            }
            (None, None) => {
                return Err(InputError::at(
                    self.origin,
                    self.text,
                    Some(c.source.span()),
                    key,
                    "a cost needs `ns` or `cycles`",
                ));
            }
        };
        if ns > MAX_COST_NS {
            let span = c.ns.as_ref().or(c.cycles.as_ref()).map(|v| v.span());
            return Err(InputError::at(
                self.origin,
                self.text,
                span,
                key,
                format!(
                    "{ns} ns is more than the model allows for one operation ({MAX_COST_NS} ns, one second): the picosecond clock must not wrap"
                ),
            ));
        }
        Ok((ns * per_ns).round() as u64)
    }

    /// A plain value, checked against the range its registry row gives ([`params::Check`]).
    pub(super) fn checked(&self, key: &str, p: &Param) -> Result<f64, InputError> {
        let x = self.param(key, p)?;
        if let Some(d) = params::def(key)
            && let Some(m) = d.check.violation(d.unit, x)
        {
            return Err(InputError::at(
                self.origin,
                self.text,
                Some(p.value.span()),
                &format!("{key}.value"),
                m,
            ));
        }
        Ok(x)
    }

    /// A whole value its row checks (a power of two, a count).
    pub(super) fn whole(&self, key: &str, p: &Param) -> Result<u64, InputError> {
        Ok(self.checked(key, p)? as u64)
    }

    pub(super) fn maint(&self, key: &str, m: &MaintSpec) -> Result<MaintCost, InputError> {
        Ok(MaintCost {
            issue_ps: self.cost(&format!("{key}.issue"), &m.issue)?,
            latency_ps: self.cost(&format!("{key}.latency"), &m.latency)?,
            interval_ps: match &m.interval {
                Some(i) => self.cost(&format!("{key}.interval"), i)?,
                None => 0,
            },
        })
    }
}

pub(super) fn resolve(
    origin: &str,
    text: &str,
    f: &ProfileFile,
) -> Result<ModelParams, InputError> {
    let mut r = Resolver {
        origin,
        text,
        freq_mhz: 1.0,
    };
    let cpu_freq = &f.platform.cpu_freq_mhz;
    let freq = r.param("platform.cpu_freq_mhz", cpu_freq)?;
    if freq > 0.0 && freq < MIN_FREQ_MHZ && freq * 1000.0 <= MAX_FREQ_MHZ {
        return Err(InputError::at(
            origin,
            text,
            Some(cpu_freq.value.span()),
            "platform.cpu_freq_mhz.value",
            format!(
                "must be {MIN_FREQ_MHZ}..={MAX_FREQ_MHZ} MHz, found {freq}: the key is in MHz, so {freq} GHz is {}",
                freq * 1000.0
            ),
        ));
    }
    r.checked("platform.cpu_freq_mhz", cpu_freq)?;
    r.freq_mhz = freq;
    let line = r.whole("cache.line_bytes", &f.cache.line_bytes)?;
    let mut maint = [None; 3];
    for op in CacheOp::ALL {
        if let Some(m) = maint_spec(&f.cache, op) {
            maint[op as usize] = Some(r.maint(&format!("cache.{}", op.key()), m)?);
        }
    }
    let barrier_ps = r.cost("barrier.cost", &f.barrier.cost)?;
    let wmb_ps = match &f.barrier.wmb {
        Some(c) => Some(r.cost("barrier.wmb", c)?),
        None => None,
    };
    let line_transfer_ps = match &f.cache.line_transfer {
        Some(c) => Some(r.cost("cache.line_transfer", c)?),
        None => None,
    };
    let mut sw = BTreeMap::new();
    for (k, c) in &f.sw {
        let name = k.get_ref();
        if SwKey::from_name(name).is_none() {
            // A misspelt key would otherwise price nothing and leave the cost it meant at 0.
            let hint = match SwKey::closest(name) {
                Some(near) => format!("did you mean `{near}`? "),
                None => String::new(),
            };
            return Err(InputError::at(
                origin,
                text,
                Some(k.span()),
                &format!("sw.{name}"),
                format!(
                    "unknown software cost `{name}`; {hint}`dmasim costs` lists every name the model charges"
                ),
            ));
        }
        sw.insert(name.clone(), r.cost(&format!("sw.{name}"), c)?);
    }
    resolve_code(&r, f)?;
    let smmu = match &f.smmu {
        Some(sm) => Some(resolve_smmu(&r, sm)?),
        None => None,
    };
    let copy = match f.memory.as_ref().and_then(|m| m.copy.as_ref()) {
        Some(c) => Some(CopyCost {
            call_ps: match &c.call {
                Some(call) => r.cost("memory.copy.call", call)?,
                None => 0,
            },
            per_byte_fs: r.cost_fs("memory.copy.per_byte", &c.per_byte)?,
        }),
        None => None,
    };
    for (key, p) in [
        ("cache.size_kib", &f.cache.size_kib),
        ("cache.ways", &f.cache.ways),
    ] {
        if let Some(p) = p {
            r.checked(key, p)?;
        }
    }
    let outer = match &f.outer_cache {
        Some(o) => Some(resolve_outer(&r, f.platform.arch, o)?),
        None => None,
    };
    let caches = match &f.cache_model {
        Some(m) => Some(resolve_cache_model(&r, f, m, line)?),
        None => None,
    };
    let mem = match &f.memory_type {
        Some(t) => Some(resolve_memory_types(&r, f, t)?),
        None => None,
    };
    let dram_write_ps = match f
        .memory
        .as_ref()
        .and_then(|m| m.write_bandwidth_mb_s.as_ref())
    {
        Some(p) => Some(resolve_dram_write(&r, p, line, caches.is_some())?),
        None => None,
    };
    Ok(ModelParams {
        dram_write_ps,
        line_bytes: line,
        maint,
        barrier_ps,
        wmb_ps,
        line_transfer_ps,
        sw,
        copy,
        smmu,
        outer,
        caches,
        mem,
    })
}

/// `[memory_type.*]`: each type's costs by access size (sizes the architecture has), and the
/// cached type's fills.
pub(super) fn resolve_memory_types(
    r: &Resolver,
    f: &ProfileFile,
    types: &BTreeMap<Spanned<String>, MemoryTypeCosts>,
) -> Result<crate::hw::memory::MemCosts, InputError> {
    use crate::hw::memory::{MemCosts, MemType, TypeCosts, access_sizes};
    let arch = f.platform.arch;
    let mut out = MemCosts::default();
    for (t, costs) in types {
        let Some(mt) = MemType::from_key(t.get_ref()) else {
            let names: Vec<&str> = MemType::ALL.iter().map(|m| m.key()).collect();
            return Err(InputError::at(
                r.origin,
                r.text,
                Some(t.span()),
                &format!("memory_type.{}", t.get_ref()),
                format!("unknown memory type; known: {}", names.join(", ")),
            ));
        };
        let mut tc = TypeCosts::default();
        for (k, c) in costs {
            let key = format!("memory_type.{}.{}", t.get_ref(), k.get_ref());
            let ps = r.cost(&key, c)?;
            let name = k.get_ref().as_str();
            let sized = name
                .strip_prefix("read_")
                .map(|n| (false, n))
                .or_else(|| name.strip_prefix("write_").map(|n| (true, n)));
            match (mt, name, sized) {
                (MemType::Cached, "fill_l2", _) => out.fill_l2_ps = ps,
                (MemType::Cached, "fill_memory", _) => out.fill_memory_ps = ps,
                (_, _, Some((write, n))) => {
                    let size = n
                        .parse::<u64>()
                        .ok()
                        .filter(|s| access_sizes(arch).contains(s));
                    let Some(size) = size else {
                        return Err(InputError::at(
                            r.origin,
                            r.text,
                            Some(k.span()),
                            &key,
                            format!(
                                "{} has no access of `{n}` bytes; its sizes: {:?}",
                                arch.name(),
                                access_sizes(arch)
                            ),
                        ));
                    };
                    if write {
                        tc.write.push((size, ps));
                    } else {
                        tc.read.push((size, ps));
                    }
                }
                _ => {
                    return Err(InputError::at(
                        r.origin,
                        r.text,
                        Some(k.span()),
                        &key,
                        "unknown key: read_N or write_N (N bytes per access), and for `cached` fill_l2 and fill_memory",
                    ));
                }
            }
        }
        out.types[mt as usize] = Some(tc);
    }
    out.prefetch_next_line = f
        .cache_model
        .as_ref()
        .and_then(|m| m.l1_prefetch.as_ref())
        .is_some_and(|p| *p.value.get_ref());
    if let Some(p) = f
        .cache_model
        .as_ref()
        .and_then(|m| m.linefill_buffers.as_ref())
    {
        let n = r.whole("cache_model.linefill_buffers", p)?;
        out.linefill_buffers = n as u32;
    }
    Ok(out)
}

/// `[cache_model]`: the levels' geometry from `[cache]` and `[outer_cache]`, checked to be one a
/// cache can have, and the writeback costs.
pub(super) fn resolve_cache_model(
    r: &Resolver,
    f: &ProfileFile,
    m: &CacheModelSpec,
    line: u64,
) -> Result<CacheModelParams, InputError> {
    r.source("cache_model", &m.source)?;
    let at = |span: std::ops::Range<usize>, key: &str, msg: String| {
        InputError::at(r.origin, r.text, Some(span), key, msg)
    };
    if *m.inclusion.get_ref() != InclusionSpec::Neither {
        return Err(at(
            m.inclusion.span(),
            "cache_model.inclusion",
            "only \"neither\" (non-inclusive, non-exclusive: a Cortex-A9 with a PL310 outside exclusive mode) is modelled".into(),
        ));
    }
    r.source("cache_model.l1_write_allocate", &m.l1_write_allocate.source)?;
    let need = |p: &Option<Param>, key: &str| {
        p.clone().ok_or_else(|| {
            at(
                m.source.span(),
                key,
                format!("missing, but [cache_model] takes the L1's geometry from `{key}`"),
            )
        })
    };
    let size_kib = r.whole(
        "cache.size_kib",
        &need(&f.cache.size_kib, "cache.size_kib")?,
    )?;
    let ways_p = need(&f.cache.ways, "cache.ways")?;
    let ways = r.whole("cache.ways", &ways_p)?;
    let l1 = Geometry {
        line_bytes: line,
        size_bytes: size_kib << 10,
        ways,
    };
    if !l1.is_valid() {
        return Err(at(
            ways_p.value.span(),
            "cache.ways.value",
            format!("{ways} ways of {line}-byte lines do not fit in {size_kib} KiB"),
        ));
    }
    let mut levels = vec![LevelSpec {
        name: "L1",
        geometry: l1,
        write_allocate: *m.l1_write_allocate.value.get_ref(),
    }];
    let l1_wb = r.cost("cache_model.l1_writeback", &m.l1_writeback)?;
    let mut l2_wb = 0;
    if let Some(o) = &f.outer_cache {
        let outer_line = crate::arch::arm::cache_l2x0::CACHE_LINE_SIZE;
        if line != outer_line {
            return Err(at(
                f.cache.line_bytes.value.span(),
                "cache.line_bytes.value",
                format!(
                    "the cache model needs the L1 and the outer cache to share one line size, and the PL310's is {outer_line} bytes"
                ),
            ));
        }
        let size = r.whole("outer_cache.size_kib", &o.size_kib)?;
        let oways = r.whole("outer_cache.ways", &o.ways)?;
        let geometry = Geometry {
            line_bytes: line,
            size_bytes: size << 10,
            ways: oways,
        };
        if !geometry.is_valid() {
            return Err(at(
                o.ways.value.span(),
                "outer_cache.ways.value",
                format!("{oways} ways of {line}-byte lines do not fit in {size} KiB"),
            ));
        }
        let wa = m.l2_write_allocate.as_ref().ok_or_else(|| {
            at(
                m.source.span(),
                "cache_model.l2_write_allocate",
                "missing: with an [outer_cache], say whether it allocates on a write".into(),
            )
        })?;
        r.source("cache_model.l2_write_allocate", &wa.source)?;
        let c = m.l2_writeback.as_ref().ok_or_else(|| {
            at(
                m.source.span(),
                "cache_model.l2_writeback",
                "missing: with an [outer_cache], the cost of writing one of its dirty lines to memory".into(),
            )
        })?;
        l2_wb = r.cost("cache_model.l2_writeback", c)?;
        levels.push(LevelSpec {
            name: "L2",
            geometry,
            write_allocate: *wa.value.get_ref(),
        });
    } else if let Some(c) = &m.l2_writeback {
        return Err(at(
            c.source.span(),
            "cache_model.l2_writeback",
            "the platform has no [outer_cache]: there is no L2 level to write back from".into(),
        ));
    }
    let outer_from = if f.outer_cache.is_some() {
        1
    } else {
        levels.len()
    };
    Ok(CacheModelParams {
        hierarchy: HierarchySpec { levels, outer_from },
        writeback_ps: [l1_wb, l2_wb],
    })
}

pub(super) fn resolve_outer(
    r: &Resolver,
    arch: Arch,
    o: &OuterCacheSpec,
) -> Result<OuterParams, InputError> {
    r.source("outer_cache", &o.source)?;
    if arch != Arch::Armv7 {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(o.source.span()),
            "outer_cache",
            format!(
                "an outer cache is driven by ARMv7's cache-l2x0.c, and the platform is {}",
                arch.name()
            ),
        ));
    }
    let rev = o.revision.get_ref();
    if !OUTER_REVISIONS.contains(&rev.as_str()) {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(o.revision.span()),
            "outer_cache.revision",
            format!(
                "PL310 revision `{rev}` is not modelled (its errata workarounds are not); modelled: {}",
                OUTER_REVISIONS.join(", ")
            ),
        ));
    }
    r.whole("outer_cache.size_kib", &o.size_kib)?;
    r.whole("outer_cache.ways", &o.ways)?;
    let mut line_ps = [0; 3];
    for (op, key, c) in [
        (CacheOp::Clean, "outer_cache.clean_line", &o.clean_line),
        (CacheOp::Inval, "outer_cache.inval_line", &o.inval_line),
        (
            CacheOp::CleanInval,
            "outer_cache.clean_inval_line",
            &o.clean_inval_line,
        ),
    ] {
        line_ps[op as usize] = r.cost(key, c)?;
    }
    let mut way_line_ps = [0; 3];
    way_line_ps[CacheOp::Clean as usize] =
        r.cost("outer_cache.clean_way_line", &o.clean_way_line)?;
    way_line_ps[CacheOp::CleanInval as usize] =
        r.cost("outer_cache.clean_inval_way_line", &o.clean_inval_way_line)?;
    Ok(OuterParams {
        line_ps,
        sync_ps: r.cost("outer_cache.sync", &o.sync)?,
        way_line_ps,
    })
}

/// Check `[code]`: whole instruction counts, and present wherever `[sw]` prices a function per
/// instruction (a per-instruction cost with nothing to count would silently charge nothing).
pub(super) fn resolve_code(r: &Resolver, f: &ProfileFile) -> Result<(), InputError> {
    let code = f.code.as_ref().and_then(|c| c.swiotlb_2012.as_ref());
    if let Some(c) = code {
        for (k, p) in c.groups() {
            let key = format!("code.swiotlb_2012.{k}");
            r.checked(&key, p)?;
        }
    } else if let Some((k, _)) =
        f.sw.iter()
            .find(|(k, _)| SwKey::from_name(k.get_ref()).is_some_and(|key| key.per_instruction()))
    {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(k.span()),
            "code.swiotlb_2012",
            format!(
                "`sw.{}` is a cost per instruction, so the profile must count the instructions: add a [code.swiotlb_2012] section (docs/profiles.md)",
                k.get_ref()
            ),
        ));
    }
    Ok(())
}

pub(super) fn resolve_smmu(r: &Resolver, s: &SmmuSpec) -> Result<SmmuParams, InputError> {
    r.source("smmu", &s.source)?;
    let kind = match s.kind {
        SmmuKindSpec::Mmu500 => SmmuKind::Mmu500,
        SmmuKindSpec::SmmuV3 => SmmuKind::SmmuV3,
    };
    let bad_version = |v: &Spanned<String>, what: &str| {
        InputError::at(r.origin, r.text, Some(v.span()), "smmu.version", what)
    };
    let range_inv = match (&s.version, kind) {
        (None, _) => false,
        (Some(v), SmmuKind::Mmu500) => {
            if !matches!(v.get_ref().as_str(), "1" | "2") {
                return Err(bad_version(v, "an mmu-500 is an SMMUv2: expected \"2\""));
            }
            false
        }
        (Some(v), SmmuKind::SmmuV3) => {
            let minor = v
                .get_ref()
                .strip_prefix("3.")
                .and_then(|m| m.parse::<u32>().ok())
                .ok_or_else(|| bad_version(v, "expected \"3.N\", e.g. \"3.2\""))?;
            minor >= 2
        }
    };
    let cmdq_write_ps = match (&s.cmdq_write, kind) {
        (Some(c), _) => r.cost("smmu.cmdq_write", c)?,
        (None, SmmuKind::SmmuV3) => {
            return Err(InputError::at(
                r.origin,
                r.text,
                Some(s.source.span()),
                "smmu.cmdq_write",
                "missing: an smmu-v3 writes its commands into a queue in memory",
            ));
        }
        (None, SmmuKind::Mmu500) => 0,
    };
    let imp = match &s.implementation {
        None => SmmuImpl::Arm,
        Some(v) => match (SmmuImpl::parse(v.get_ref()), kind) {
            (Some(SmmuImpl::Qcom), SmmuKind::SmmuV3) => {
                return Err(InputError::at(
                    r.origin,
                    r.text,
                    Some(v.span()),
                    "smmu.impl",
                    "Qualcomm's implementation (arm-smmu-qcom.c) drives MMU-500s, not SMMUv3s",
                ));
            }
            (Some(i), _) => i,
            (None, _) => {
                return Err(InputError::at(
                    r.origin,
                    r.text,
                    Some(v.span()),
                    "smmu.impl",
                    format!(
                        "unknown implementation `{}`; choose one of: {}",
                        v.get_ref(),
                        SmmuImpl::NAMES.join(", ")
                    ),
                ));
            }
        },
    };
    r.source("smmu.coherent_walk", &s.coherent_walk.source)?;
    Ok(SmmuParams {
        kind,
        imp,
        range_inv,
        coherent_walk: *s.coherent_walk.value.get_ref(),
        mmio_write_ps: r.cost("smmu.mmio_write", &s.mmio_write)?,
        mmio_read_ps: r.cost("smmu.mmio_read", &s.mmio_read)?,
        tlbi_va_ps: r.cost("smmu.tlbi_va", &s.tlbi_va)?,
        tlbi_asid_ps: r.cost("smmu.tlbi_asid", &s.tlbi_asid)?,
        sync_ps: r.cost("smmu.sync", &s.sync)?,
        cmdq_write_ps,
    })
}

/// `memory.write_bandwidth_mb_s` as one line's write-back time, rounded up so that a run of lines
/// never moves faster than the bandwidth. Refused beside `[cache_model]`, whose write-backs price
/// their own way to DRAM and do not use the channel.
fn resolve_dram_write(
    r: &Resolver,
    p: &Param,
    line_bytes: u64,
    cache_model: bool,
) -> Result<u64, InputError> {
    let key = "memory.write_bandwidth_mb_s";
    let mb_s = r.checked(key, p)?;
    if cache_model {
        return Err(InputError::at(
            r.origin,
            r.text,
            Some(p.value.span()),
            key,
            "a DRAM write channel beside `[cache_model]` is not modelled: the cache model prices \
             a dirty line's way to DRAM itself (`cache_model.l1_writeback`, `cache_model.l2_writeback`); give one or the other"
                .to_string(),
        ));
    }
    // bytes / (MB/s) is microseconds per 10^6 bytes: × 10^6 for ps.
    Ok((line_bytes as f64 * 1e6 / mb_s).ceil() as u64)
}
