//! Running an IOMMU workload on the Model: the domain set up as `iommu_domain_alloc` would, each
//! operation timed per call, the page table's shape recorded.
//!
//! Kernel counterpart: drivers/iommu/iommu.c's API as a driver calls it.

use super::*;
use crate::scenario::Bug;
use crate::setup::SetupError;
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
    /// An operation nothing has called yet.
    fn new(label: String, call: &'static str, bytes: u64) -> OpStat {
        OpStat {
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
        }
    }

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

/// A fresh domain on its own table memory, enough for `n` CPUs each mapping `mapped` bytes
/// in `maps` mappings ([`table_budget`]).
pub(super) fn new_domain(
    hw: &mut Model,
    s: &Scenario,
    cfg: &IommuConfig,
    (mapped, maps, n): (u64, u64, u32),
    cmdq_shift: Option<u32>,
) -> Result<crate::iommu::core::IommuDomain, SetupError> {
    let cmdq = Cmdq::new(cmdq_shift.unwrap_or(8));
    iommu_domain_alloc_with_cmdq(
        hw,
        cfg,
        &s.profile,
        &s.policies,
        table_memory(table_budget(cfg, mapped, maps, n)),
        cmdq,
    )
}

/// Bytes of page-table memory for `n` CPUs each mapping `mapped` bytes in `maps` mappings:
/// every CPU's leaves, and for each CPU beyond the first a table of every level under each of
/// its mappings (each CPU's sit a stride of whole GiBs from the others', so share no table
/// below the top).
fn table_budget(cfg: &IommuConfig, mapped: u64, maps: u64, n: u32) -> u64 {
    let own = u64::from(n - 1)
        .saturating_mul(maps)
        .saturating_mul(4 * cfg.granule);
    table_bytes(mapped.saturating_mul(u64::from(n))).saturating_add(own)
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
    /// The operations from slot `from` on, nothing counted yet: one CPU's meter of them.
    fn blank(&self, from: usize) -> Meter {
        Meter {
            ops: self.ops[from..]
                .iter()
                .map(|o| OpStat::new(o.label.clone(), o.call, o.bytes))
                .collect(),
            geometry: None,
        }
    }

    /// Add one CPU's meter of the operations from slot `from` on ([`Meter::blank`]): its
    /// calls, time, counts and refusals; what the last call returned, its IOVA and the page
    /// table after it are the first CPU's (`first`), and the first refusal the first CPU's to
    /// have one.
    fn absorb(&mut self, from: usize, cpu: &Meter, first: bool) {
        for (o, c) in self.ops[from..].iter_mut().zip(&cpu.ops) {
            o.calls += c.calls;
            o.total_ps += c.total_ps;
            for (a, b) in o.counts.iter_mut().zip(&c.counts) {
                *a += b;
            }
            o.errors += c.errors;
            if o.first_error.is_none() {
                o.first_error.clone_from(&c.first_error);
            }
            if first {
                o.iova = c.iova;
                o.returned.clone_from(&c.returned);
                o.bytes_done = c.bytes_done;
                o.shape.clone_from(&c.shape);
            }
        }
    }

    /// Time and count one call of the operation at `slot`.
    fn time<T>(&mut self, hw: &mut Model, slot: usize, f: impl FnOnce(&mut Model) -> T) -> T {
        let (r, dt, counts) = crate::hw::calls::lap_counted(hw, f);
        let o = &mut self.ops[slot];
        o.calls += 1;
        o.total_ps += dt;
        for (k, c) in o.counts.iter_mut().zip(counts) {
            *k += c;
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
        self.ops.push(OpStat::new(label, call, bytes));
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
pub fn run(s: &Scenario, progress: &Progress) -> Result<IommuRunResult, RunFailure> {
    let cfg = s
        .iommu
        .ok_or_else(|| SetupError::NoDomain(s.name.clone()))?;
    // On a NUMA platform the SMMUv3 probes at boot: its command queue's node prices every
    // command list below. The tables themselves come from table_memory().
    let (mut hw, cmdq_shift) = if s.probes_smmu_v3() {
        let m = Machine::boot_numa_smmu_v3(&s.profile, s.kernel, &s.boot, s.cpu_node())?;
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
    let n = match &s.workload {
        Workload::IommuSweep(w) => w.cpus,
        Workload::IommuOps(w) => w.cpus,
        _ => 1,
    };
    // Each CPU on its own model of the machine; the first is the machine as booted.
    let placed = crate::scenario::smp_cpus::place(s, n, None);
    let mut cpus: Vec<(Model, CpuAt)> = placed
        .iter()
        .enumerate()
        .skip(1)
        .map(|(k, &(cpu, node))| (hw.on_cpu(cpu, node), CpuAt::new(k, cpu, n)))
        .collect();
    if n > 1 {
        hw.set_processor(placed[0].0);
    }
    cpus.insert(0, (hw, CpuAt::new(0, placed[0].0, n)));
    match &s.workload {
        Workload::IommuSweep(w) => {
            let stride = cpu_stride(&w.fixed_ranges());
            for &size in &w.sizes {
                let label = size_label(size);
                let map = m.slot(format!("map_sg {label}"), "iommu_map_sg", size);
                m.slot(format!("unmap {label}"), "iommu_unmap", size);
                let d = new_domain(&mut cpus[0].0, s, &cfg, (size, 1, n), cmdq_shift)?;
                m.saw(&d);
                run_on_cpus(
                    &mut cpus,
                    d,
                    &mut m,
                    map,
                    progress,
                    &|hw, cm, d, at, progress| {
                        sweep_loop(hw, cm, d, (w, size), (at, stride), progress)
                    },
                )?;
            }
        }
        Workload::IommuOps(w) => {
            // The IOVA allocator's per-CPU magazines, for the CPUs placed.
            let slots = crate::scenario::smp_cpus::per_cpu_slots(s, &placed);
            run_ops(&mut cpus, &mut m, s, &cfg, w, (cmdq_shift, slots), progress)?
        }
        other => {
            return Err(Bug::NotIommu {
                scenario: s.name.clone(),
                kind: other.kind(),
            }
            .into());
        }
    }
    let (mut hw, _) = cpus.remove(0);
    for (other, _) in &cpus {
        hw.absorb_ledger(other);
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

/// One CPU's iterations of a sweep's `size` on the size's domain, at its own IOVA
/// (`at.index` strides up) and on pages of its own, counted in `m` (this size's map, then
/// its unmap).
fn sweep_loop(
    hw: &mut Model,
    m: &mut Meter,
    d: &crate::iommu::core::IommuDomain,
    (w, size): (&Sweep, u64),
    (at, stride): (CpuAt, u64),
    progress: Option<&Progress>,
) {
    let (map, unmap) = (0, 1);
    let iova = w.iova + at.index as u64 * stride;
    let segs = segments(data_base(at.index, size), size, w.element, w.layout);
    for it in 0..w.iterations {
        let r = m.time(hw, map, |hw| {
            d.iommu_map_sg(hw, IovaAddr(iova), &segs, Prot::RW)
        });
        if let Err(e) = r {
            m.refused(map, format!("{}: {e}", at.iteration(it)));
        }
        let r = m.time(hw, unmap, |hw| d.iommu_unmap(hw, IovaAddr(iova), size));
        if let Err(e) = r {
            m.refused(unmap, format!("{}: {e}", at.iteration(it)));
        }
        if let Some(p) = progress {
            p.advance(1);
        }
    }
    m.ops[map].iova = iova;
    m.ops[unmap].iova = iova;
}

/// Which of the workload's CPUs a body is: its place among them (`index`: its fixed IOVAs
/// and generated pages are that many strides up), the platform CPU it is (its per-CPU IOVA
/// magazines), and whether there are others (refusals then name the CPU).
#[derive(Clone, Copy, Debug)]
pub(super) struct CpuAt {
    index: usize,
    cpu: u32,
    many: bool,
}

impl CpuAt {
    fn new(index: usize, cpu: u32, n: u32) -> CpuAt {
        CpuAt {
            index,
            cpu,
            many: n > 1,
        }
    }

    /// `iteration 3`, or with several CPUs `CPU 5, iteration 3`, for refusals.
    fn iteration(self, it: u32) -> String {
        if self.many {
            format!("CPU {}, iteration {it}", self.cpu)
        } else {
            format!("iteration {it}")
        }
    }
}

/// Inclusive ranges, sorted, with those that overlap or touch made one.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The sg list (physical start, length) of a map op whose generated pages are in the
/// `window`-th mapping's window ([`data_base`]).
pub(super) fn map_segments(window: usize, m: &MapOp) -> Vec<(PhysAddr, u64)> {
    match &m.phys {
        Phys::Generated { element, layout } => {
            segments(data_base(window, m.size), m.size, *element, *layout)
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
    cpus: &mut [(Model, CpuAt)],
    m: &mut Meter,
    s: &Scenario,
    cfg: &IommuConfig,
    w: &Ops,
    (cmdq_shift, slots): (Option<u32>, u32),
    progress: &Progress,
) -> Result<(), RunFailure> {
    let ops = &w.ops;
    let mapped: u64 = ops
        .iter()
        .map(|o| match o {
            Op::Map(mo) => mo.size,
            _ => 0,
        })
        .sum();
    let n = cpus.len();
    let hw = &mut cpus[0].0;
    let maps = ops.iter().filter(|o| matches!(o, Op::Map(_))).count() as u64;
    let d = new_domain(hw, s, cfg, (mapped, maps, n as u32), cmdq_shift)?;
    m.saw(&d);
    let iovad = IovaDomain::new(hw, cfg.granule, 1, slots as usize)
        .map_err(SetupError::IovaDomain)?
        .with_rules(s.policies.iova.rules());
    let stride = cpu_stride(&w.fixed_ranges());
    if n > 1 && w.allocates_iovas() {
        // The other CPUs' fixed ranges are this tool's copies of the list's, not the user's:
        // the allocator keeps out of them, as it keeps out of a device's reserved regions.
        let shift = cfg.granule.trailing_zeros();
        let fixed = w.fixed_ranges();
        for k in 1..n as u64 {
            let pfns = fixed
                .iter()
                .map(|&(a, size)| {
                    let a = a + k * stride;
                    (a >> shift, (a + size.max(1) - 1) >> shift)
                })
                .collect();
            for (lo, hi) in merged(pfns) {
                let free = iovad.reserve_iova(lo, hi);
                debug_assert!(free, "each CPU's ranges are apart from the others'");
            }
        }
    }
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
    run_on_cpus(cpus, d, m, 0, progress, &|hw, cm, d, at, progress| {
        ops_loop(hw, cm, d, &iovad, (cfg, w), (at, stride), progress)
    })
}

/// One CPU's part of an IOMMU workload: its model, its meter, the domain, which CPU it is,
/// and the progress display if it moves it.
type CpuBody<'a> =
    dyn Fn(&mut Model, &mut Meter, &crate::iommu::core::IommuDomain, CpuAt, Option<&Progress>) + 'a;

/// Run `body` on every CPU at once ([`crate::scenario::smp_cpus::run_each`]), each calling the
/// one domain `d` and counting the operations from slot `from` on in a meter of its own, then
/// add every CPU's meter into `m`.
fn run_on_cpus(
    cpus: &mut [(Model, CpuAt)],
    d: crate::iommu::core::IommuDomain,
    m: &mut Meter,
    from: usize,
    progress: &Progress,
    body: &CpuBody<'_>,
) -> Result<(), RunFailure> {
    if cpus.len() > 1 && !d.shareable() {
        return Err(Bug::NotShared {
            what: "this domain",
        }
        .into());
    }
    // Each CPU's own state in the domain, found by the platform CPU it is.
    let slots = cpus.iter().map(|(_, at)| at.cpu as usize + 1).max();
    let d = d.with_cpus(slots.unwrap_or(1));
    // The domain exists from the first CPU's clock on: no CPU maps into it earlier.
    let ready = cpus[0].0.now_ps();
    for (hw, _) in cpus.iter_mut() {
        hw.idle_until(ready);
    }
    let blank = m.blank(from);
    let meters = crate::scenario::smp_cpus::run_each(
        cpus.iter_mut(),
        progress,
        &|(hw, at): &mut (Model, CpuAt), c, progress| {
            hw.set_cpu(c);
            let mut cm = blank.blank(0);
            body(hw, &mut cm, &d, *at, progress);
            hw.set_cpu(crate::smp::Cpu::alone());
            cm
        },
    )?;
    for (k, cm) in meters.iter().enumerate() {
        m.absorb(from, cm, k == 0);
    }
    Ok(())
}

/// One CPU's run of the list, `iterations` times, on the domain: its fixed IOVAs
/// `at.index` strides up, its generated pages in windows of its own, its IOVAs from its own
/// magazines of the shared allocator.
fn ops_loop(
    hw: &mut Model,
    m: &mut Meter,
    d: &crate::iommu::core::IommuDomain,
    iovad: &IovaDomain,
    (cfg, w): (&IommuConfig, &Ops),
    (at, stride): (CpuAt, u64),
    progress: Option<&Progress>,
) {
    let ops = &w.ops;
    let off = at.index as u64 * stride;
    let window = |i: usize| at.index * ops.len() + i;
    let shift = cfg.granule.trailing_zeros();
    let limit_pfn = ((1u64 << cfg.ias) >> shift) - 1;
    let segs: Vec<Vec<(PhysAddr, u64)>> = ops
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Op::Map(mo) if mo.call == MapCall::MapSg => map_segments(window(i), mo),
            _ => Vec::new(),
        })
        .collect();
    // The gather `iommu_unmap_fast` collects into, until an `iotlb_sync`.
    let mut gather = IommuIotlbGather::new();
    // Where each map op's mapping currently lives (and whether its IOVA came from the allocator).
    let mut live: Vec<Option<(u64, bool)>> = vec![None; ops.len()];
    for it in 0..w.iterations {
        for (i, o) in ops.iter().enumerate() {
            let refusal = |e: &IommuError| format!("{}: {e}", at.iteration(it));
            'op: {
                match o {
                    Op::Map(mo) => {
                        let pages = mo.size.div_ceil(cfg.granule);
                        let r = m.time(hw, i, |hw| {
                            let (iova, alloc) = match mo.iova {
                                IovaSpec::Fixed(a) => (a + off, false),
                                IovaSpec::Alloc => {
                                    let pfn = iovad.alloc_iova_fast(hw, pages, limit_pfn, true)?;
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
                                        _ => data_base(window(i), mo.size),
                                    };
                                    d.iommu_map(hw, IovaAddr(iova), PhysAddr(pa), mo.size, mo.prot)
                                        .map(|()| mo.size)
                                }
                            };
                            if r.is_err() && alloc {
                                let _ = iovad.free_iova_fast(hw, iova >> shift, pages);
                            }
                            r.map(|b| (iova, alloc, b))
                        });
                        let (iova, alloc, b) = match r {
                            Ok(x) => x,
                            Err(e) => {
                                if let IovaSpec::Fixed(a) = mo.iova {
                                    m.ops[i].iova = a + off;
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
                                m.refused(i, refusal(&e));
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
                                "{}: mapped again while its previous mapping is still live (leaked)",
                                at.iteration(it)
                            ),
                        );
                        }
                        live[i] = Some((iova, alloc));
                        m.ops[i].iova = iova;
                    }
                    Op::UnmapRange { iova, size, fast } => {
                        let iova = &(*iova + off);
                        let r = m.time(hw, i, |hw| match fast {
                            None => d.iommu_unmap(hw, IovaAddr(*iova), *size),
                            Some(queued) => {
                                gather.queued = *queued;
                                d.iommu_unmap_fast(hw, IovaAddr(*iova), *size, &mut gather)
                            }
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, refusal(&e));
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
                            m.refused(
                                i,
                                format!("{}: mapping `{name}` is not mapped", at.iteration(it)),
                            );
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
                                    iova >> shift,
                                    size.div_ceil(cfg.granule),
                                )?;
                            }
                            r
                        });
                        m.returned(i, unmapped(&r).to_string(), unmapped(&r));
                        if let Err(e) = r {
                            m.refused(i, refusal(&e));
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
                    Op::IovaToPhys { at: spot } => {
                        let iova = match spot {
                            IovaAt::Fixed(a) => *a + off,
                            IovaAt::Of { index, .. } => match live[*index] {
                                Some((a, _)) => a,
                                None => {
                                    m.refused(
                                        i,
                                        format!("{}: the mapping is not mapped", at.iteration(it)),
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
            // The shared table as the first CPU's call left it: only its figures are kept.
            if w.pgtable_shape && at.index == 0 {
                m.ops[i].shape = Some(d.pgtable.shape());
            }
        }
        if let Some(p) = progress {
            p.advance(1);
        }
    }
}
