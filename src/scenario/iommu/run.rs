//! Running an IOMMU workload on the Model: the domain set up as `iommu_domain_alloc` would, each
//! operation timed per call, the page table's shape recorded.
//!
//! Kernel counterpart: drivers/iommu/iommu.c's API as a driver calls it.

use super::*;
/// One operation's (or one sweep row's) figures over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct OpStat {
    /// `map_sg 4K`, `unmap 4K`, `op[0] map`, ...
    pub label: String,
    /// The iommu core call timed: `iommu_map_sg` or `iommu_unmap`.
    pub call: &'static str,
    pub bytes: u64,
    /// The IOVA of the last call.
    pub iova: u64,
    pub calls: u64,
    pub total_ps: u64,
    /// Operations issued by all calls together.
    pub counts: [u64; Counter::N],
    /// Calls the modelled kernel refused, and the first refusal in its words.
    pub errors: u64,
    pub first_error: Option<String>,
    /// What the last call returned, as the kernel returns it (`0`, `-EEXIST`, bytes unmapped,
    /// a physical address, `void`).
    pub returned: Option<String>,
    /// Bytes the last call mapped or unmapped.
    pub bytes_done: u64,
    /// The page table's shape after the last call, when the scenario asks for it.
    pub shape: Option<PgtableShape>,
}

impl OpStat {
    pub fn mean_ns(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.total_ps as f64 / self.calls as f64 / 1000.0
        }
    }
    /// Operations of one kind per call.
    pub fn per_call(&self, c: Counter) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.counts[c as usize] as f64 / self.calls as f64
        }
    }
}

#[derive(Clone, Debug)]
pub struct IommuRunResult {
    /// Which scenario ran where, under which policies.
    pub info: RunInfo,
    pub iommu: IommuConfig,
    /// The domain's page-table geometry (`None` only when no domain was allocated).
    pub geometry: Option<DomainGeometry>,
    pub workload: Workload,
    pub ops: Vec<OpStat>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl IommuRunResult {
    pub fn op(&self, label: &str) -> Option<&OpStat> {
        self.ops.iter().find(|o| o.label == label)
    }
}

/// A size for labels: `4K`, `2M`, `1G`, or bytes.
pub fn size_label(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

/// The sg list of one mapping: `(physical start, length)` per element.
pub(super) fn segments(base: u64, size: u64, element: u64, layout: Layout) -> Vec<(PhysAddr, u64)> {
    let stride = match layout {
        Layout::Scattered => 2 * element,
        Layout::Contiguous => element,
    };
    (0..size / element)
        .map(|i| (PhysAddr(base + i * stride), element))
        .collect()
}

/// Physical base for the `k`-th mapping's pages: each gets its own 1 GiB-aligned window (aligned
/// for every block size), so contiguous pages can be mapped with blocks.
pub(super) fn data_base(k: usize, size: u64) -> u64 {
    let window = (2 * size).next_multiple_of(1 << 30);
    DATA_BASE + k as u64 * window
}

/// A fresh domain on its own table memory, enough for `mapped` bytes of leaves.
pub(super) fn new_domain(
    hw: &mut Model,
    s: &Scenario,
    cfg: &IommuConfig,
    mapped: u64,
    cmdq_shift: Option<u32>,
) -> Result<crate::iommu::core::IommuDomain, String> {
    let cmdq = Cmdq::new(cmdq_shift.unwrap_or(8));
    iommu_domain_alloc_with_cmdq(
        hw,
        cfg,
        &s.profile,
        &s.policies,
        table_memory(table_bytes(mapped)),
        cmdq,
    )
    .map_err(|e| e.to_string())
}

pub(super) struct Meter {
    ops: Vec<OpStat>,
    /// The page table of the first domain the run allocated (every domain of a run has the
    /// same configuration).
    geometry: Option<DomainGeometry>,
}

/// What the run's domain is, as the documents describe it: the domain type, and the io-pgtable
/// format `alloc_io_pgtable_ops` worked out from the granule and the address sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DomainGeometry {
    /// `iommu_domain_alloc()` gives the caller an `IOMMU_DOMAIN_UNMANAGED` domain: the iommu
    /// core's API is driven directly, as the seed's test driver did; no iommu-dma, no IOVA
    /// flush queue.
    pub domain_type: &'static str,
    pub format: &'static str,
    pub granule: u64,
    pub ias: u32,
    pub oas: u32,
    /// Levels walked (`ARM_LPAE_MAX_LEVELS - start_level`) and the level the walk starts at.
    pub levels: u32,
    pub start_level: u32,
    /// The top-level table's bytes (`ARM_LPAE_PGD_SIZE`).
    pub pgd_bytes: u64,
    /// `pgsize_bitmap`, and the page and block sizes it allows, smallest first.
    pub pgsize_bitmap: String,
    pub page_sizes: Vec<u64>,
}

impl DomainGeometry {
    fn of(d: &crate::iommu::core::IommuDomain) -> DomainGeometry {
        let t = &d.pgtable;
        let bitmap = t.pgsize_bitmap();
        DomainGeometry {
            domain_type: "IOMMU_DOMAIN_UNMANAGED",
            format: "ARM_64_LPAE_S1",
            granule: t.granule(),
            ias: t.cfg().ias,
            oas: t.cfg().oas,
            levels: t.levels(),
            start_level: t.start_level(),
            pgd_bytes: t.pgd_size(),
            pgsize_bitmap: format!("{bitmap:#x}"),
            page_sizes: (0..64)
                .map(|b| 1u64 << b)
                .filter(|sz| bitmap & sz != 0)
                .collect(),
        }
    }
}

impl Meter {
    fn saw(&mut self, d: &crate::iommu::core::IommuDomain) {
        if self.geometry.is_none() {
            self.geometry = Some(DomainGeometry::of(d));
        }
    }
}

impl Meter {
    /// Time and count one call of the operation at `slot`.
    fn time<T>(&mut self, hw: &mut Model, slot: usize, f: impl FnOnce(&mut Model) -> T) -> T {
        let t0 = hw.now_ps();
        let c0 = hw.ledger().totals();
        let r = f(hw);
        let c1 = hw.ledger().totals();
        let o = &mut self.ops[slot];
        o.calls += 1;
        o.total_ps += hw.now_ps() - t0;
        for (k, (a, b)) in o.counts.iter_mut().zip(c1.iter().zip(c0.iter())) {
            *k += a - b;
        }
        r
    }

    /// Record a refusal of the operation at `slot`.
    fn refused(&mut self, slot: usize, why: String) {
        let o = &mut self.ops[slot];
        o.errors += 1;
        if o.first_error.is_none() {
            o.first_error = Some(why);
        }
    }

    fn slot(&mut self, label: String, call: &'static str, bytes: u64) -> usize {
        self.ops.push(OpStat {
            label,
            call,
            bytes,
            iova: 0,
            calls: 0,
            total_ps: 0,
            counts: [0; Counter::N],
            errors: 0,
            first_error: None,
            returned: None,
            bytes_done: 0,
            shape: None,
        });
        self.ops.len() - 1
    }

    /// Record what the call at `slot` returned and the bytes it moved.
    fn returned(&mut self, slot: usize, returned: String, bytes: u64) {
        let o = &mut self.ops[slot];
        o.returned = Some(returned);
        o.bytes_done = bytes;
    }
}

/// Run a checked IOMMU scenario on the Model. What the modelled kernel refuses (mapping over a
/// live mapping, unmapping a hole) is recorded on the operation and the run goes on; only a
/// domain that cannot be set up ends it.
pub fn run(s: &Scenario, progress: &Progress) -> Result<IommuRunResult, String> {
    let cfg = s
        .iommu
        .ok_or_else(|| format!("scenario `{}` has no [iommu] domain", s.name))?;
    // On a NUMA platform the SMMUv3 probes at boot: its command queue's node prices every
    // command list below. The tables themselves come from table_memory().
    let (mut hw, cmdq_shift) = if s.probes_smmu_v3() {
        let m = Machine::boot_numa_smmu_v3(&s.profile, s.kernel, &s.boot, s.cpu_node())
            .map_err(|e| e.to_string())?;
        let shift = m.smmu.as_ref().map(|p| p.structures.cmdq.max_n_shift);
        let mut hw = m.hw;
        hw.clear_ledger();
        (hw, shift)
    } else {
        (Model::new(s.profile.model.clone()), None)
    };
    let mut m = Meter {
        ops: Vec::new(),
        geometry: None,
    };
    match &s.workload {
        Workload::IommuSweep(w) => {
            for &size in &w.sizes {
                let label = size_label(size);
                let map = m.slot(format!("map_sg {label}"), "iommu_map_sg", size);
                let unmap = m.slot(format!("unmap {label}"), "iommu_unmap", size);
                let mut d = new_domain(&mut hw, s, &cfg, size, cmdq_shift)
                    .map_err(|e| format!("domain: {e}"))?;
                m.saw(&d);
                let segs = segments(data_base(0, size), size, w.element, w.layout);
                for it in 0..w.iterations {
                    let r = m.time(&mut hw, map, |hw| {
                        d.iommu_map_sg(hw, IovaAddr(w.iova), &segs, Prot::RW)
                    });
                    if let Err(e) = r {
                        m.refused(map, format!("iteration {it}: {e}"));
                    }
                    let r = m.time(&mut hw, unmap, |hw| {
                        d.iommu_unmap(hw, IovaAddr(w.iova), size)
                    });
                    if let Err(e) = r {
                        m.refused(unmap, format!("iteration {it}: {e}"));
                    }
                    progress.advance(1);
                }
                m.ops[map].iova = w.iova;
                m.ops[unmap].iova = w.iova;
            }
        }
        Workload::IommuOps(w) => run_ops(&mut hw, &mut m, s, &cfg, w, cmdq_shift, progress)?,
        other => {
            return Err(format!(
                "scenario `{}` is a {} workload, not an IOMMU one",
                s.name,
                other.kind()
            ));
        }
    }
    debug_assert!(hw.ledger().depth_is_zero());
    let stacks = stack_rows(hw.ledger());
    Ok(IommuRunResult {
        info: s.run_info(),
        iommu: cfg,
        geometry: m.geometry,
        workload: s.workload.clone(),
        ops: m.ops,
        counts: hw.ledger().totals(),
        stacks,
        total_ps: hw.ledger().total_ps(),
    })
}

/// The sg list (physical start, length) of map op `i`.
pub(super) fn map_segments(i: usize, m: &MapOp) -> Vec<(PhysAddr, u64)> {
    match &m.phys {
        Phys::Generated { element, layout } => {
            segments(data_base(i, m.size), m.size, *element, *layout)
        }
        Phys::At(pa) => vec![(PhysAddr(*pa), m.size)],
        Phys::Sg(list) => list.iter().map(|&(pa, len)| (PhysAddr(pa), len)).collect(),
    }
}

/// The label of op `i` in tables and JSON.
pub(super) fn op_label(i: usize, o: &Op, ops: &[Op]) -> String {
    let name_of = |index: usize| match &ops[index] {
        Op::Map(m) => m.name.clone().unwrap_or_default(),
        _ => String::new(),
    };
    match o {
        Op::Map(m) => {
            let verb = match m.call {
                MapCall::MapSg => "map",
                MapCall::Map => "iommu_map",
            };
            format!("op[{i}] {verb} {}", size_label(m.size))
        }
        Op::UnmapRange { size, fast, .. } => format!(
            "op[{i}] {} {}",
            if fast.is_some() {
                "unmap_fast"
            } else {
                "unmap"
            },
            size_label(*size)
        ),
        Op::UnmapOf { index, fast, .. } => format!(
            "op[{i}] {} {}",
            if fast.is_some() {
                "unmap_fast"
            } else {
                "unmap"
            },
            name_of(*index)
        ),
        Op::IotlbSync => format!("op[{i}] iotlb_sync"),
        Op::FlushIotlbAll => format!("op[{i}] flush_iotlb_all"),
        Op::IovaToPhys {
            at: IovaAt::Fixed(a),
        } => format!("op[{i}] iova_to_phys {a:#x}"),
        Op::IovaToPhys {
            at: IovaAt::Of { name, .. },
        } => format!("op[{i}] iova_to_phys {name}"),
    }
}

/// What `iommu_unmap` / `iommu_unmap_fast` returns: the bytes unmapped (0 when refused).
pub(super) fn unmapped(r: &Result<u64, IommuError>) -> u64 {
    match r {
        Ok(b) => *b,
        Err(IommuError::ShortUnmap { unmapped, .. }) => *unmapped,
        Err(_) => 0,
    }
}

pub(super) fn run_ops(
    hw: &mut Model,
    m: &mut Meter,
    s: &Scenario,
    cfg: &IommuConfig,
    w: &Ops,
    cmdq_shift: Option<u32>,
    progress: &Progress,
) -> Result<(), String> {
    let ops = &w.ops;
    let mapped: u64 = ops
        .iter()
        .map(|o| match o {
            Op::Map(mo) => mo.size,
            _ => 0,
        })
        .sum();
    let mut d = new_domain(hw, s, cfg, mapped, cmdq_shift).map_err(|e| format!("domain: {e}"))?;
    m.saw(&d);
    let iovad = IovaDomain::new(hw, cfg.granule, 1, 1)
        .map_err(|e| format!("IOVA domain: {e}"))?
        .with_rules(s.policies.iova.rules());
    let shift = cfg.granule.trailing_zeros();
    let limit_pfn = ((1u64 << cfg.ias) >> shift) - 1;
    for (i, o) in ops.iter().enumerate() {
        let bytes = match o {
            Op::Map(mo) => mo.size,
            Op::UnmapRange { size, .. } => *size,
            Op::UnmapOf { index, .. } => match &ops[*index] {
                Op::Map(mo) => mo.size,
                _ => 0,
            },
            _ => 0,
        };
        m.slot(op_label(i, o, ops), o.call(), bytes);
    }
    let segs: Vec<Vec<(PhysAddr, u64)>> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Op::Map(mo) if mo.call == MapCall::MapSg => map_segments(i, mo),
            _ => Vec::new(),
        })
        .collect();
    // The gather `iommu_unmap_fast` collects into, until an `iotlb_sync`.
    let mut gather = IommuIotlbGather::new();
    // Where each map op's mapping currently lives (and whether its IOVA came from the allocator).
    let mut live: Vec<Option<(u64, bool)>> = vec![None; ops.len()];
    for it in 0..w.iterations {
        for (i, o) in ops.iter().enumerate() {
            let at = |e: &IommuError| format!("iteration {it}: {e}");
            'op: {
                match o {
                    Op::Map(mo) => {
                        let pages = mo.size.div_ceil(cfg.granule);
                        let r = m.time(hw, i, |hw| {
                            let (iova, alloc) = match mo.iova {
                                IovaSpec::Fixed(a) => (a, false),
                                IovaSpec::Alloc => {
                                    let pfn =
                                        iovad.alloc_iova_fast(hw, 0, pages, limit_pfn, true)?;
                                    // 0 is the allocator's failure value (5.11 to 6.1 can hand it
                                    // out when the retry wraps): no IOVA; the range stays allocated.
                                    if pfn == 0 {
                                        return Err(IommuError::IovaZero { pages });
                                    }
                                    (pfn << shift, true)
                                }
                            };
                            let r = match mo.call {
                                MapCall::MapSg => {
                                    d.iommu_map_sg(hw, IovaAddr(iova), &segs[i], mo.prot)
                                }
                                MapCall::Map => {
                                    let pa = match mo.phys {
                                        Phys::At(pa) => pa,
                                        _ => data_base(i, mo.size),
                                    };
                                    d.iommu_map(hw, IovaAddr(iova), PhysAddr(pa), mo.size, mo.prot)
                                        .map(|()| mo.size)
                                }
                            };
                            if r.is_err() && alloc {
                                let _ = iovad.free_iova_fast(hw, 0, iova >> shift, pages);
                            }
                            r.map(|b| (iova, alloc, b))
                        });
                        let (iova, alloc, b) = match r {
                            Ok(x) => x,
                            Err(e) => {
                                if let IovaSpec::Fixed(a) = mo.iova {
                                    m.ops[i].iova = a;
                                }
                                // What iommu_map_sg() itself returned (an IOVA the
                                // allocator refused never reached it).
                                let iova_refused = matches!(
                                    e,
                                    IommuError::IovaZero { .. } | IommuError::IovaExhausted { .. }
                                );
                                let returned = match mo.call {
                                    MapCall::MapSg if !iova_refused => {
                                        d.map_sg_returns.value(&Err(e.clone()))
                                    }
                                    _ => e.errno().to_string(),
                                };
                                m.returned(i, returned, 0);
                                m.refused(i, at(&e));
                                break 'op;
                            }
                        };
                        m.returned(
                            i,
                            match mo.call {
                                MapCall::MapSg => b.to_string(),
                                MapCall::Map => "0".to_string(),
                            },
                            b,
                        );
                        if live[i].is_some() {
                            m.refused(
                            i,
                            format!(
                                "iteration {it}: mapped again while its previous mapping is still live (leaked)"
                            ),
                        );
                        }
                        live[i] = Some((iova, alloc));
                        m.ops[i].iova = iova;
                    }
                    Op::UnmapRange { iova, size, fast } => {
                        let r = m.time(hw, i, |hw| match fast {
                            None => d.iommu_unmap(hw, IovaAddr(*iova), *size),
                            Some(queued) => {
                                gather.queued = *queued;
                                d.iommu_unmap_fast(hw, IovaAddr(*iova), *size, &mut gather)
                            }
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, at(&e));
                        }
                        m.ops[i].iova = *iova;
                        // A fixed-IOVA mapping that started in the range is gone (or cut short).
                        for l in live.iter_mut() {
                            if l.is_some_and(|(a, alloc)| !alloc && a >= *iova && a - *iova < *size)
                            {
                                *l = None;
                            }
                        }
                    }
                    Op::UnmapOf { index, name, fast } => {
                        let Some((iova, alloc)) = live[*index].take() else {
                            m.refused(i, format!("iteration {it}: mapping `{name}` is not mapped"));
                            break 'op;
                        };
                        let size = m.ops[*index].bytes;
                        let r = m.time(hw, i, |hw| {
                            let r = match fast {
                                None => d.iommu_unmap(hw, IovaAddr(iova), size),
                                Some(queued) => {
                                    gather.queued = *queued;
                                    d.iommu_unmap_fast(hw, IovaAddr(iova), size, &mut gather)
                                }
                            };
                            if alloc {
                                iovad.free_iova_fast(
                                    hw,
                                    0,
                                    iova >> shift,
                                    size.div_ceil(cfg.granule),
                                )?;
                            }
                            r
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, at(&e));
                        }
                        m.ops[i].iova = iova;
                    }
                    Op::IotlbSync => {
                        m.time(hw, i, |hw| d.iotlb_sync(hw, &mut gather));
                        gather = IommuIotlbGather::new();
                        m.returned(i, "void".to_string(), 0);
                    }
                    Op::FlushIotlbAll => {
                        m.time(hw, i, |hw| d.flush_iotlb_all(hw));
                        m.returned(i, "void".to_string(), 0);
                    }
                    Op::IovaToPhys { at } => {
                        let iova = match at {
                            IovaAt::Fixed(a) => *a,
                            IovaAt::Of { index, .. } => match live[*index] {
                                Some((a, _)) => a,
                                None => {
                                    m.refused(
                                        i,
                                        format!("iteration {it}: the mapping is not mapped"),
                                    );
                                    break 'op;
                                }
                            },
                        };
                        let pa = m.time(hw, i, |hw| {
                            let back = hw.enter(crate::frame_id!("iommu_iova_to_phys"));
                            let pa = d.iova_to_phys(hw, IovaAddr(iova));
                            hw.leave(back);
                            pa
                        });
                        m.ops[i].iova = iova;
                        m.returned(i, pa.map_or("0".to_string(), |p| format!("{:#x}", p.0)), 0);
                    }
                }
            }
            if w.pgtable_shape {
                m.ops[i].shape = Some(d.pgtable.shape());
            }
        }
        progress.advance(1);
    }
    Ok(())
}
