//! The terminal table and the JSON document of an IOMMU workload's result.
//!
//! Kernel counterpart: none.

use super::*;

/// One operation (or sweep row) of an IOMMU run, in JSON.
#[derive(Serialize)]
pub(super) struct IommuOpDoc {
    label: String,
    call: &'static str,
    bytes: u64,
    iova: String,
    count: u64,
    mean_ns: f64,
    total_ns: f64,
    /// Operations per call (a fraction where calls differ, e.g. table allocations in the first).
    operations_per_call: BTreeMap<&'static str, f64>,
    /// Calls the modelled kernel refused, and the first refusal.
    refused: u64,
    first_refusal: Option<String>,
    /// What the last call returned, as the kernel returns it.
    #[serde(skip_serializing_if = "Option::is_none")]
    returned: Option<String>,
    /// Bytes the last call mapped or unmapped.
    bytes_done: u64,
    /// What the operation asks for (`iommu_ops` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    geometry: Option<GeometryDoc>,
    /// The page table after the last call (`pgtable_shape = true`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pgtable: Option<ShapeDoc>,
}

/// An `iommu_ops` operation as the scenario gives it.
#[derive(Serialize)]
pub(super) struct GeometryDoc {
    op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// A hex address, or "alloc".
    #[serde(skip_serializing_if = "Option::is_none")]
    iova: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    element: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<&'static str>,
    /// Contiguous from this physical address.
    #[serde(skip_serializing_if = "Option::is_none")]
    phys: Option<String>,
    /// An explicit sg list: (physical address, length) per element.
    #[serde(skip_serializing_if = "Option::is_none")]
    sg: Option<Vec<(String, u64)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prot: Option<Vec<&'static str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queued: Option<bool>,
}

/// Live tables and valid leaves per level (keys are level numbers).
#[derive(Serialize)]
pub(super) struct ShapeDoc {
    table_pages: u64,
    tables: BTreeMap<String, u64>,
    leaves: BTreeMap<String, u64>,
}

pub(super) fn shape_doc(sh: &PgtableShape) -> ShapeDoc {
    let per_level = |v: &[u64]| {
        v.iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(l, n)| (l.to_string(), *n))
            .collect()
    };
    ShapeDoc {
        table_pages: sh.tables.iter().sum(),
        tables: per_level(&sh.tables),
        leaves: per_level(&sh.leaves),
    }
}

pub(super) fn geometry_doc(o: &Op, ops: &[Op]) -> GeometryDoc {
    let name_of = |index: usize| match &ops[index] {
        Op::Map(m) => m.name.clone(),
        _ => None,
    };
    let mut g = GeometryDoc {
        op: match o {
            Op::Map(MapOp {
                call: MapCall::MapSg,
                ..
            }) => "map",
            Op::Map(_) => "iommu_map",
            Op::UnmapRange { fast: None, .. } | Op::UnmapOf { fast: None, .. } => "unmap",
            Op::UnmapRange { .. } | Op::UnmapOf { .. } => "unmap_fast",
            Op::IotlbSync => "iotlb_sync",
            Op::FlushIotlbAll => "flush_iotlb_all",
            Op::IovaToPhys { .. } => "iova_to_phys",
        },
        name: None,
        iova: None,
        size: None,
        of: None,
        element: None,
        layout: None,
        phys: None,
        sg: None,
        prot: None,
        queued: None,
    };
    match o {
        Op::Map(m) => {
            g.name = m.name.clone();
            g.iova = Some(match m.iova {
                IovaSpec::Fixed(a) => format!("{a:#x}"),
                IovaSpec::Alloc => "alloc".to_string(),
            });
            g.size = Some(m.size);
            match &m.phys {
                Phys::Generated { element, layout } => {
                    g.element = Some(*element);
                    g.layout = Some(layout.name());
                }
                Phys::At(pa) => g.phys = Some(format!("{pa:#x}")),
                Phys::Sg(list) => {
                    g.sg = Some(
                        list.iter()
                            .map(|(pa, l)| (format!("{pa:#x}"), *l))
                            .collect(),
                    )
                }
            }
            g.prot = Some(m.prot.names());
        }
        Op::UnmapRange { iova, size, fast } => {
            g.iova = Some(format!("{iova:#x}"));
            g.size = Some(*size);
            g.queued = *fast;
        }
        Op::UnmapOf { index, fast, .. } => {
            g.of = name_of(*index);
            g.queued = *fast;
        }
        Op::IovaToPhys {
            at: IovaAt::Fixed(a),
        } => g.iova = Some(format!("{a:#x}")),
        Op::IovaToPhys {
            at: IovaAt::Of { name, .. },
        } => g.of = Some(name.clone()),
        Op::IotlbSync | Op::FlushIotlbAll => {}
    }
    g
}

#[derive(Serialize)]
pub(super) struct IommuRunDoc<'a> {
    format_version: u32,
    #[serde(flatten)]
    head: HeadDoc<'a>,
    iommu: IommuDoc,
    workload: IommuWorkloadDoc,
    ops: Vec<IommuOpDoc>,
    operations: BTreeMap<&'static str, u64>,
    breakdown: Vec<StackDoc>,
    total_ns: f64,
}

#[derive(Serialize)]
pub(super) struct IommuDoc {
    granule: u64,
    ias: u32,
    smmu: &'static str,
    coherent_walk: bool,
    /// The domain as set up: type, io-pgtable format, levels, address sizes, page sizes.
    #[serde(flatten)]
    geometry: Option<DomainGeometry>,
}

#[derive(Serialize)]
pub(super) struct IommuWorkloadDoc {
    kind: &'static str,
    iterations: u32,
    /// CPUs running the workload at once (left out for one).
    #[serde(skip_serializing_if = "is_one")]
    cpus: u32,
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

pub(super) fn per_call_map(o: &OpStat) -> BTreeMap<&'static str, f64> {
    Counter::ALL
        .iter()
        .filter(|k| o.counts[**k as usize] > 0)
        .map(|k| (k.name(), o.per_call(*k)))
        .collect()
}

/// The `dmasim run --format json` document of an IOMMU scenario.
pub fn json(r: &IommuRunResult) -> serde_json::Value {
    let doc = IommuRunDoc {
        format_version: FORMAT_VERSION,
        head: HeadDoc::of(&r.info),
        iommu: IommuDoc {
            granule: r.iommu.granule,
            ias: r.iommu.ias,
            smmu: r.iommu.smmu.name(),
            coherent_walk: r.iommu.coherent_walk,
            geometry: r.geometry.clone(),
        },
        workload: IommuWorkloadDoc {
            kind: r.workload.kind(),
            iterations: iommu_iterations(&r.workload),
            cpus: iommu_cpus(&r.workload),
        },
        ops: r
            .ops
            .iter()
            .enumerate()
            .map(|(i, o)| IommuOpDoc {
                label: o.label.clone(),
                call: o.call,
                bytes: o.bytes,
                iova: format!("{:#x}", o.iova),
                count: o.calls,
                mean_ns: o.mean_ns(),
                total_ns: ns(o.total_ps),
                operations_per_call: per_call_map(o),
                refused: o.errors,
                first_refusal: o.first_error.clone(),
                returned: o.returned.clone(),
                bytes_done: o.bytes_done,
                geometry: match &r.workload {
                    Workload::IommuOps(w) => w.ops.get(i).map(|op| geometry_doc(op, &w.ops)),
                    _ => None,
                },
                pgtable: o.shape.as_ref().map(shape_doc),
            })
            .collect(),
        operations: counts_map(&r.counts),
        breakdown: breakdown_docs(&r.stacks, r.total_ps),
        total_ns: ns(r.total_ps),
    };
    serde_json::to_value(doc).expect("plain data serialises")
}

pub(super) fn iommu_cpus(w: &Workload) -> u32 {
    match w {
        Workload::IommuSweep(s) => s.cpus,
        Workload::IommuOps(o) => o.cpus,
        _ => 1,
    }
}

pub(super) fn iommu_iterations(w: &Workload) -> u32 {
    match w {
        Workload::IommuSweep(s) => s.iterations,
        Workload::IommuOps(o) => o.iterations,
        _ => 1,
    }
}

/// The SMMU and page-table operations shown per call in the IOMMU table, in this order.
pub(super) const IOMMU_COLUMNS: &[(Counter, &str)] = &[
    (Counter::SmmuTlbiva, "TLBIVA"),
    (Counter::SmmuTlbival, "TLBIVAL"),
    (Counter::SmmuTlbiasid, "TLBIASID"),
    (Counter::SmmuTlbsync, "TLBSYNC"),
    (Counter::SmmuTlbstatusRead, "STATUS"),
    (Counter::Udelay, "udelay"),
    (Counter::CmdqTlbiNhVa, "NH_VA"),
    (Counter::CmdqTlbiNhAsid, "NH_ASID"),
    (Counter::CmdqSync, "CMD_SYNC"),
    (Counter::PgtableMapCall, "map call"),
    (Counter::PgtableUnmapCall, "unmap call"),
    (Counter::Wmb, "wmb"),
    (Counter::CacheCleanLine, "PTE clean"),
    (Counter::Warn, "WARN"),
];

/// The `dmasim run` terminal table of an IOMMU scenario.
pub fn table(r: &IommuRunResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let _ = writeln!(
        o,
        "workload   {}, {} iterations",
        r.workload.kind(),
        iommu_iterations(&r.workload)
    );
    let cpus = iommu_cpus(&r.workload);
    if cpus > 1 {
        let _ = writeln!(
            o,
            "cpus       {cpus} at once on the one domain, each at IOVAs and on pages of its own \
             (figures sum them; `returned`, `iova` and the page table are the first CPU's)"
        );
    }
    let cols: Vec<&(Counter, &str)> = IOMMU_COLUMNS
        .iter()
        .filter(|(c, _)| r.ops.iter().any(|op| op.counts[*c as usize] > 0))
        .collect();
    let width = r
        .ops
        .iter()
        .map(|op| op.label.len())
        .max()
        .unwrap_or(0)
        .max(20);
    let returns = r.ops.iter().any(|op| op.returned.is_some());
    let unit = TimeUnit::for_column(r.ops.iter().map(|op| op.mean_ns()));
    let _ = write!(
        o,
        "\n{:<width$} {:>7} {:>14}",
        "operation",
        "calls",
        unit.header("mean")
    );
    for (_, h) in &cols {
        let _ = write!(o, " {h:>10}");
    }
    if returns {
        let _ = write!(o, " {:>14}", "returned");
    }
    let _ = writeln!(o);
    for op in &r.ops {
        let _ = write!(
            o,
            "{:<width$} {:>7} {:>14}",
            op.label,
            op.calls,
            unit.num(op.mean_ns())
        );
        for (c, _) in &cols {
            let _ = write!(o, " {:>10}", trim_float(op.per_call(*c)));
        }
        if returns {
            let _ = write!(o, " {:>14}", op.returned.as_deref().unwrap_or("-"));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(
        o,
        "(operation counts are per call{})",
        if returns {
            "; `returned` is the last call's return value, as the kernel gives it"
        } else {
            ""
        }
    );
    if r.ops.iter().any(|op| op.shape.is_some()) {
        let _ = writeln!(o, "\npage table after each operation (last iteration)");
        for op in &r.ops {
            if let Some(sh) = &op.shape {
                let lv = |v: &[u64]| {
                    v.iter()
                        .enumerate()
                        .filter(|(_, n)| **n > 0)
                        .map(|(l, n)| format!("L{l} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    o,
                    "{:<width$}  tables: {}; leaves: {}",
                    op.label,
                    lv(&sh.tables),
                    if sh.leaves.iter().any(|n| *n > 0) {
                        lv(&sh.leaves)
                    } else {
                        "none".to_string()
                    }
                );
            }
        }
    }
    refusals(
        &mut o,
        r.ops
            .iter()
            .map(|op| (op.label.as_str(), op.errors, op.first_error.as_deref())),
    );
    if cpus > 1 {
        crate::report::waits_table(&mut o, &r.stacks, r.total_ps, 1, "whole run, all CPUs");
    }
    stack_table(&mut o, "whole run", &r.stacks, r.total_ps, 1);
    o
}
