//! The `[workload]` sections of `iommu_sweep` and `iommu_ops`, read and checked: sizes, layouts,
//! the list of operations and what each may name.
//!
//! Kernel counterpart: none; each operation is one iommu API call (`iommu_map`, `iommu_map_sg`,
//! `iommu_unmap`, ...) as a driver would make it.

use super::*;
impl Ctx<'_> {
    fn spanned_size(&self, v: &Spanned<toml::Value>, key: &str) -> Result<u64, InputError> {
        self.size(v.get_ref(), v.span(), key)
    }

    /// A size that is a whole number of granules and at most [`MAX_MAP`].
    fn granule_size(
        &self,
        v: &toml::Value,
        span: std::ops::Range<usize>,
        key: &str,
        granule: u64,
    ) -> Result<u64, InputError> {
        let n = self.size(v, span.clone(), key)?;
        if !n.is_multiple_of(granule) {
            return Err(self.err(
                span,
                key,
                format!(
                    "{n} bytes is not a multiple of the {} KiB IOMMU granule",
                    granule >> 10
                ),
            ));
        }
        if n > MAX_MAP {
            return Err(self.err(span, key, format!("at most {MAX_MAP} bytes")));
        }
        Ok(n)
    }

    /// An IOVA: an integer, a hex string ("0x4000_0000"), a size ("1G"), or "alloc".
    fn iova(&self, v: &Spanned<toml::Value>, key: &str) -> Result<IovaSpec, InputError> {
        let bad = || {
            self.err(
                v.span(),
                key,
                format!(
                    "expected an address such as \"0x40000000\", \"1G\" or \"alloc\", found {}",
                    v.get_ref()
                ),
            )
        };
        match v.get_ref() {
            toml::Value::Integer(i) if *i >= 0 => Ok(IovaSpec::Fixed(*i as u64)),
            toml::Value::String(s) if s == "alloc" => Ok(IovaSpec::Alloc),
            toml::Value::String(s) => {
                let t = s.trim().replace('_', "");
                let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    Some(h) => u64::from_str_radix(h, 16).ok(),
                    None => parse_size(&t),
                };
                n.map(IovaSpec::Fixed).ok_or_else(bad)
            }
            _ => Err(bad()),
        }
    }

    /// A fixed range must be granule aligned and inside the input address space.
    fn check_range(
        &self,
        span: std::ops::Range<usize>,
        key: &str,
        iova: u64,
        size: u64,
        cfg: &IommuConfig,
    ) -> Result<(), InputError> {
        if !iova.is_multiple_of(cfg.granule) {
            return Err(self.err(
                span,
                key,
                format!(
                    "IOVA {iova:#x} is not aligned to the {} KiB granule",
                    cfg.granule >> 10
                ),
            ));
        }
        if iova.checked_add(size).is_none_or(|e| e > 1u64 << cfg.ias) {
            return Err(self.err(
                span,
                key,
                format!(
                    "IOVA {iova:#x} + {size:#x} is outside the {}-bit input address space",
                    cfg.ias
                ),
            ));
        }
        Ok(())
    }
}

/// What `[iommu]` said itself; whatever it left out, the platform's `[smmu]` decides (after
/// overrides too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IommuGiven {
    pub(crate) smmu: bool,
    pub(crate) coherent_walk: bool,
}

/// `[iommu]`: the domain a device or an IOMMU workload maps through. Returns the configuration
/// and which of its keys were given.
pub(crate) fn parse_section(
    c: &Ctx,
    io: &IommuSection,
    profile: &Profile,
) -> Result<(IommuConfig, IommuGiven), InputError> {
    let granule = match c.spanned_size(&io.granule, "iommu.granule") {
        Ok(g @ (0x1000 | 0x4000 | 0x10000)) => g,
        Ok(g) => {
            return Err(c.err(
                io.granule.span(),
                "iommu.granule",
                format!("unsupported granule of {g} bytes; an Arm LPAE table has 4K, 16K or 64K"),
            ));
        }
        Err(e) => return Err(e),
    };
    let ias = *io.ias.get_ref();
    if !(32..=48).contains(&ias) {
        return Err(c.err(
            io.ias.span(),
            "iommu.ias",
            format!("input address size must be 32..=48 bits, found {ias}"),
        ));
    }
    let (smmu, smmu_given) = match &io.smmu {
        Some(s) => (
            SmmuModel::parse(s.get_ref()).ok_or_else(|| {
                c.err(
                    s.span(),
                    "iommu.smmu",
                    format!(
                        "unknown SMMU model `{}`; choose one of: {}",
                        s.get_ref(),
                        SmmuModel::NAMES.join(", ")
                    ),
                )
            })?,
            true,
        ),
        None => (platform_smmu(profile).unwrap_or(SmmuModel::Mmu500), false),
    };
    Ok((
        IommuConfig {
            granule,
            ias: ias as u32,
            smmu,
            // The platform's walker unless the scenario says otherwise.
            coherent_walk: io
                .coherent_walk
                .unwrap_or_else(|| profile.model.smmu.is_some_and(|s| s.coherent_walk)),
            // The tables come from table_memory(), one node.
            node: 0,
        },
        IommuGiven {
            smmu: smmu_given,
            coherent_walk: io.coherent_walk.is_some(),
        },
    ))
}

/// The `[iommu]` an IOMMU workload needs.
pub(super) fn domain_of<'a>(
    c: &Ctx,
    kind: &Spanned<String>,
    shared: &'a Shared,
) -> Result<&'a IommuConfig, InputError> {
    shared.iommu.ok_or_else(|| {
        c.err(
            kind.span(),
            "iommu",
            format!(
                "missing: an {} workload maps into a domain; give an [iommu] section (granule, ias)",
                kind.get_ref()
            ),
        )
    })
}

pub(super) fn iterations(c: &Ctx, it: &Spanned<i64>) -> Result<u32, InputError> {
    Ok(c.int(it, "workload.iterations", 1..=MAX_ITERATIONS)? as u32)
}

/// `workload.cpus` (1 if not given) and its line; every CPU's fixed ranges, each CPU
/// [`cpu_stride`] above the one before, inside the input address space.
pub(super) fn cpus(
    c: &Ctx,
    n: &Option<Spanned<i64>>,
    ranges: &[(u64, u64)],
    cfg: &IommuConfig,
) -> Result<(u32, Option<usize>), InputError> {
    let Some(n) = n else { return Ok((1, None)) };
    let cpus = c.int(n, "workload.cpus", 1..=crate::smp::MAX_CPUS as i64)? as u32;
    let stride = cpu_stride(ranges);
    let top = u64::from(cpus - 1).checked_mul(stride);
    for &(iova, size) in ranges {
        let end = top.and_then(|t| t.checked_add(iova)?.checked_add(size));
        if end.is_none_or(|e| e > 1u64 << cfg.ias) {
            return Err(c.err(
                n.span(),
                "workload.cpus",
                format!(
                    "the last of {cpus} CPUs would work at IOVA {iova:#x} + {} x {stride:#x} \
                     (each CPU's fixed IOVAs sit {stride:#x} above the previous CPU's), outside \
                     the {}-bit input address space",
                    cpus - 1,
                    cfg.ias
                ),
            ));
        }
    }
    Ok((cpus, Some(c.line(n.span()))))
}

pub(super) fn layout(
    c: &Ctx,
    l: &Option<Spanned<String>>,
    key: &str,
) -> Result<Layout, InputError> {
    match l {
        None => Ok(Layout::Scattered),
        Some(s) => Layout::parse(s.get_ref()).ok_or_else(|| {
            c.err(
                s.span(),
                key,
                format!(
                    "unknown layout `{}`; choose scattered or contiguous",
                    s.get_ref()
                ),
            )
        }),
    }
}

pub(super) fn element(
    c: &Ctx,
    e: &Option<Spanned<toml::Value>>,
    key: &str,
    granule: u64,
) -> Result<u64, InputError> {
    match e {
        None => Ok(granule),
        Some(e) => c.granule_size(e.get_ref(), e.span(), key, granule),
    }
}

pub(super) fn parse_sweep(
    c: &Ctx,
    v: Spanned<toml::de::DeValue>,
    shared: &Shared,
) -> Result<Workload, InputError> {
    let w: SweepSection = c.section(v)?;
    let iommu = domain_of(c, &w.kind, shared)?;
    let granule = iommu.granule;
    let iterations = iterations(c, &w.iterations)?;
    let Some(list) = &w.sizes else {
        return Err(c.missing(&w.kind, "sizes", "an iommu_sweep needs a list of sizes"));
    };
    if list.get_ref().is_empty() {
        return Err(c.err(list.span(), "workload.sizes", "must not be empty"));
    }
    let element = element(c, &w.element, "workload.element", granule)?;
    let sizes: Vec<u64> = list
        .get_ref()
        .iter()
        .map(|v| c.granule_size(v, list.span(), "workload.sizes", granule))
        .collect::<Result<_, _>>()?;
    if let Some(bad) = sizes.iter().find(|s| !s.is_multiple_of(element)) {
        return Err(c.err(
            list.span(),
            "workload.sizes",
            format!("{bad} bytes is not a whole number of {element}-byte elements"),
        ));
    }
    let iova = match &w.iova {
        None => DEFAULT_SWEEP_IOVA,
        Some(v) => match c.iova(v, "workload.iova")? {
            IovaSpec::Fixed(a) => a,
            IovaSpec::Alloc => {
                return Err(c.err(
                    v.span(),
                    "workload.iova",
                    "a sweep maps at one fixed IOVA; give an address",
                ));
            }
        },
    };
    let max = sizes.iter().copied().max().unwrap_or(0);
    let span = w.iova.as_ref().map_or(list.span(), |v| v.span());
    c.check_range(span, "workload.iova", iova, max, iommu)?;
    let (cpus, cpus_line) = cpus(c, &w.cpus, &[(iova, max)], iommu)?;
    Ok(Workload::IommuSweep(Sweep {
        sizes,
        element,
        layout: layout(c, &w.layout, "workload.layout")?,
        iova,
        iterations,
        cpus,
        cpus_line,
    }))
}

pub(super) fn parse_ops(
    c: &Ctx,
    v: Spanned<toml::de::DeValue>,
    shared: &Shared,
) -> Result<Workload, InputError> {
    let w: OpsSection = c.section(v)?;
    let iommu = domain_of(c, &w.kind, shared)?;
    let iterations = iterations(c, &w.iterations)?;
    if w.op.is_empty() {
        return Err(c.missing(
            &w.kind,
            "op",
            "an iommu_ops workload needs [[workload.op]] entries",
        ));
    }
    if w.op.len() > MAX_OPS {
        return Err(c.err(
            w.op[MAX_OPS].op.span(),
            "workload.op",
            format!("at most {MAX_OPS} operations"),
        ));
    }
    let mut ops = Vec::new();
    for (i, o) in w.op.iter().enumerate() {
        ops.push(parse_op(c, o, i, &ops, iommu)?);
    }
    let mut list = Ops {
        ops,
        iterations,
        pgtable_shape: w.pgtable_shape.unwrap_or(false),
        cpus: 1,
        cpus_line: None,
    };
    (list.cpus, list.cpus_line) = cpus(c, &w.cpus, &list.fixed_ranges(), iommu)?;
    Ok(Workload::IommuOps(list))
}

pub(crate) fn platform_smmu(p: &Profile) -> Option<SmmuModel> {
    p.model.smmu.map(|s| match s.kind {
        SmmuKind::Mmu500 => SmmuModel::Mmu500,
        SmmuKind::SmmuV3 => SmmuModel::SmmuV3 {
            range_inv: s.range_inv,
        },
    })
}

/// The operation names an `iommu_ops` list accepts, in the order help texts give them.
pub const OP_NAMES: &[&str] = &[
    "map",
    "iommu_map",
    "unmap",
    "unmap_fast",
    "iotlb_sync",
    "flush_iotlb_all",
    "iova_to_phys",
];

/// Which keys each operation takes (besides `op`).
pub(super) fn op_keys(op: &str) -> &'static [&'static str] {
    match op {
        "map" => &[
            "name", "iova", "size", "element", "layout", "phys", "sg", "prot",
        ],
        "iommu_map" => &["name", "iova", "size", "phys", "prot"],
        "unmap" => &["iova", "size", "of"],
        "unmap_fast" => &["iova", "size", "of", "queued"],
        "iova_to_phys" => &["iova", "of"],
        _ => &[],
    }
}

/// A physical address: an integer or a hex string, below 2^64.
pub(super) fn phys_addr(
    c: &Ctx,
    v: &toml::Value,
    span: std::ops::Range<usize>,
    key: &str,
) -> Result<u64, InputError> {
    let bad = || {
        c.err(
            span.clone(),
            key,
            format!("expected a physical address such as \"0x80000000\", found {v}"),
        )
    };
    match v {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        toml::Value::String(s) => {
            let t = s.trim().replace('_', "");
            match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).map_err(|_| bad()),
                None => parse_size(&t).ok_or_else(bad),
            }
        }
        _ => Err(bad()),
    }
}

/// A size of an `iommu_ops` operation: non-zero and at most [`MAX_MAP`]. Alignment is the
/// kernel's to check (a misaligned request is refused with `-EINVAL`, a result).
pub(super) fn op_size(
    c: &Ctx,
    v: &toml::Value,
    span: std::ops::Range<usize>,
    key: &str,
) -> Result<u64, InputError> {
    let n = c.size(v, span.clone(), key)?;
    if n == 0 || n > MAX_MAP {
        return Err(c.err(
            span,
            key,
            format!("must be 1 to {MAX_MAP} bytes, found {n}"),
        ));
    }
    Ok(n)
}

/// The named map op earlier in the list.
pub(super) fn named_map(
    c: &Ctx,
    earlier: &[Op],
    of: &Spanned<String>,
    key: &str,
) -> Result<usize, InputError> {
    earlier
        .iter()
        .position(|e| matches!(e, Op::Map(m) if m.name.as_deref() == Some(of.get_ref())))
        .ok_or_else(|| {
            c.err(
                of.span(),
                key,
                format!("no earlier map is named `{}`", of.get_ref()),
            )
        })
}

pub(super) fn parse_op(
    c: &Ctx,
    o: &OpSection,
    i: usize,
    earlier: &[Op],
    cfg: &IommuConfig,
) -> Result<Op, InputError> {
    let key = |k: &str| format!("workload.op[{i}].{k}");
    let name = o.op.get_ref().as_str();
    if !OP_NAMES.contains(&name) {
        return Err(c.err(
            o.op.span(),
            &key("op"),
            format!(
                "unknown operation `{name}`; choose one of: {}",
                OP_NAMES.join(", ")
            ),
        ));
    }
    // Keys the operation does not take are mistakes, named with what it does take.
    let given: [(&str, Option<std::ops::Range<usize>>); 10] = [
        ("iova", o.iova.as_ref().map(|v| v.span())),
        ("size", o.size.as_ref().map(|v| v.span())),
        ("element", o.element.as_ref().map(|v| v.span())),
        ("layout", o.layout.as_ref().map(|v| v.span())),
        ("name", o.name.as_ref().map(|v| v.span())),
        ("of", o.of.as_ref().map(|v| v.span())),
        ("phys", o.phys.as_ref().map(|v| v.span())),
        ("sg", o.sg.as_ref().map(|v| v.span())),
        ("prot", o.prot.as_ref().map(|v| v.span())),
        ("queued", o.queued.as_ref().map(|v| v.span())),
    ];
    let takes = op_keys(name);
    for (k, span) in given {
        if let Some(span) = span
            && !takes.contains(&k)
        {
            let what = if takes.is_empty() {
                "takes no other key".to_string()
            } else {
                format!("takes {}", takes.join(", "))
            };
            return Err(c.err(span, &key(k), format!("`{name}` {what}")));
        }
    }
    let fixed_iova = |v: &Spanned<toml::Value>, size: u64| -> Result<u64, InputError> {
        match c.iova(v, &key("iova"))? {
            IovaSpec::Fixed(a) if a.checked_add(size).is_some() => Ok(a),
            IovaSpec::Fixed(a) => Err(c.err(
                v.span(),
                &key("iova"),
                format!("IOVA {a:#x} + {size:#x} passes 2^64"),
            )),
            IovaSpec::Alloc => Err(c.err(
                v.span(),
                &key("iova"),
                format!(
                    "`{name}` needs an address; to name an allocated mapping use `of = \"name\"`"
                ),
            )),
        }
    };
    let fast = (name == "unmap_fast").then(|| o.queued.as_ref().is_some_and(|q| *q.get_ref()));
    match name {
        "map" | "iommu_map" => parse_map(c, o, i, earlier, cfg, name),
        "unmap" | "unmap_fast" => match (&o.of, &o.iova, &o.size) {
            (Some(of), None, None) => Ok(Op::UnmapOf {
                index: named_map(c, earlier, of, &key("of"))?,
                name: of.get_ref().clone(),
                fast,
            }),
            (None, Some(v), Some(sz)) => {
                let size = op_size(c, sz.get_ref(), sz.span(), &key("size"))?;
                let iova = fixed_iova(v, size)?;
                Ok(Op::UnmapRange { iova, size, fast })
            }
            _ => Err(c.err(
                o.op.span(),
                &key("op"),
                format!("`{name}` takes either `of = \"name\"` or both `iova` and `size`"),
            )),
        },
        "iova_to_phys" => match (&o.of, &o.iova) {
            (Some(of), None) => Ok(Op::IovaToPhys {
                at: IovaAt::Of {
                    index: named_map(c, earlier, of, &key("of"))?,
                    name: of.get_ref().clone(),
                },
            }),
            (None, Some(v)) => Ok(Op::IovaToPhys {
                at: IovaAt::Fixed(fixed_iova(v, 0)?),
            }),
            _ => Err(c.err(
                o.op.span(),
                &key("op"),
                "`iova_to_phys` takes either `of = \"name\"` or `iova`",
            )),
        },
        "iotlb_sync" => Ok(Op::IotlbSync),
        _ => Ok(Op::FlushIotlbAll),
    }
}

pub(super) fn parse_map(
    c: &Ctx,
    o: &OpSection,
    i: usize,
    earlier: &[Op],
    cfg: &IommuConfig,
    op: &str,
) -> Result<Op, InputError> {
    let key = |k: &str| format!("workload.op[{i}].{k}");
    let call = if op == "map" {
        MapCall::MapSg
    } else {
        MapCall::Map
    };
    let (phys, size) = match (&o.sg, &o.phys) {
        (Some(sg), _) => {
            let span = sg.span();
            if o.phys.is_some() || o.size.is_some() || o.element.is_some() || o.layout.is_some() {
                return Err(c.err(
                    span,
                    &key("sg"),
                    "an explicit sg list gives every element's address and size: drop phys, size, element and layout",
                ));
            }
            let list = sg.get_ref();
            if list.is_empty() || list.len() > MAX_SG {
                return Err(c.err(
                    span,
                    &key("sg"),
                    format!("must have 1 to {MAX_SG} elements"),
                ));
            }
            let mut els = Vec::new();
            let mut total = 0u64;
            for (j, e) in list.iter().enumerate() {
                let k = key(&format!("sg[{j}]"));
                let pa = phys_addr(c, &e.phys, span.clone(), &format!("{k}.phys"))?;
                let len = op_size(c, &e.size, span.clone(), &format!("{k}.size"))?;
                if pa.checked_add(len).is_none() {
                    return Err(c.err(span.clone(), &k, format!("{pa:#x} + {len:#x} passes 2^64")));
                }
                total = total
                    .checked_add(len)
                    .filter(|&t| t <= MAX_MAP)
                    .ok_or_else(|| {
                        c.err(
                            span.clone(),
                            &key("sg"),
                            format!("at most {MAX_MAP} bytes in all"),
                        )
                    })?;
                els.push((pa, len));
            }
            (Phys::Sg(els), total)
        }
        (None, phys) => {
            let Some(sz) = &o.size else {
                return Err(c.err(
                    o.op.span(),
                    &key("size"),
                    "missing: a map needs a size (or an sg list)",
                ));
            };
            let size = op_size(c, sz.get_ref(), sz.span(), &key("size"))?;
            match phys {
                Some(p) => {
                    if o.element.is_some() || o.layout.is_some() {
                        return Err(c.err(
                            p.span(),
                            &key("phys"),
                            "one contiguous run from `phys`: drop element and layout (or give an sg list)",
                        ));
                    }
                    let pa = phys_addr(c, p.get_ref(), p.span(), &key("phys"))?;
                    if pa.checked_add(size).is_none() {
                        return Err(c.err(
                            p.span(),
                            &key("phys"),
                            format!("{pa:#x} + {size:#x} passes 2^64"),
                        ));
                    }
                    (Phys::At(pa), size)
                }
                None => {
                    let element = match &o.element {
                        None => cfg.granule.min(size),
                        Some(e) => op_size(c, e.get_ref(), e.span(), &key("element"))?,
                    };
                    if !size.is_multiple_of(element) {
                        return Err(c.err(
                            sz.span(),
                            &key("size"),
                            format!(
                                "{size} bytes is not a whole number of {element}-byte elements"
                            ),
                        ));
                    }
                    let layout = match call {
                        MapCall::MapSg => layout(c, &o.layout, &key("layout"))?,
                        MapCall::Map => Layout::Contiguous,
                    };
                    (Phys::Generated { element, layout }, size)
                }
            }
        }
    };
    let iova = match &o.iova {
        None => IovaSpec::Alloc,
        Some(v) => match c.iova(v, &key("iova"))? {
            IovaSpec::Fixed(a) if a.checked_add(size).is_none() => {
                return Err(c.err(
                    v.span(),
                    &key("iova"),
                    format!("IOVA {a:#x} + {size:#x} passes 2^64"),
                ));
            }
            x => x,
        },
    };
    let prot = match &o.prot {
        None => Prot::RW,
        Some(list) => {
            let mut p = Prot(0);
            for f in list.get_ref() {
                p = p.union(Prot::flag(f).ok_or_else(|| {
                    let names: Vec<&str> = Prot::FLAGS.iter().map(|f| f.0).collect();
                    c.err(
                        list.span(),
                        &key("prot"),
                        format!("unknown flag `{f}`; choose from: {}", names.join(", ")),
                    )
                })?);
            }
            if !p.contains(Prot::READ) && !p.contains(Prot::WRITE) {
                return Err(c.err(
                    list.span(),
                    &key("prot"),
                    "needs read or write: with neither, io-pgtable-arm maps nothing and reports success, and 5.15's __iommu_map never finishes",
                ));
            }
            p
        }
    };
    let name = match &o.name {
        Some(n) => {
            let dup = earlier
                .iter()
                .any(|e| matches!(e, Op::Map(m) if m.name.as_deref() == Some(n.get_ref())));
            if dup {
                return Err(c.err(
                    n.span(),
                    &key("name"),
                    format!("a mapping named `{}` was already declared", n.get_ref()),
                ));
            }
            Some(n.get_ref().clone())
        }
        None => None,
    };
    Ok(Op::Map(MapOp {
        name,
        call,
        iova,
        size,
        phys,
        prot,
    }))
}
