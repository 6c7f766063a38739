//! Resolving a scenario: the release's presets on this platform, then every override, then the
//! checks between sections; and what the resolved scenario decides for setup (its device's ops,
//! the software costs it can charge, the size of its run).
//!
//! Kernel counterpart: none; the choices follow the kernel's (`get_dma_ops()`'s answer for the
//! device, boot's CMA areas).
//!
//! Invariants: a scenario that resolves has been checked completely; an override that fails
//! leaves the scenario as it was.

use super::*;

impl Scenario {
    /// Resolve again; on an error, put the scenario back as it was, so a refused override
    /// leaves it usable.
    pub(super) fn resolve_or(&mut self, before: Scenario) -> Result<(), InputError> {
        let r = self.resolve();
        if r.is_err() {
            *self = before;
        }
        r
    }

    pub(super) fn error(&self, origin: &Origin, key: &str, message: String) -> InputError {
        match origin {
            Origin::File(line) => InputError {
                file: self.file.clone(),
                line: *line,
                key: Some(key.to_string()),
                message,
            },
            Origin::Argument => InputError {
                file: "<argument>".to_string(),
                line: None,
                key: Some(key.to_string()),
                message,
            },
        }
    }

    /// Presets for the release on this platform, then every override, each checked against the
    /// registry and the target; then the checks between sections.
    pub(super) fn resolve(&mut self) -> Result<(), InputError> {
        if let Workload::Forwarding(_) = self.workload
            && self.profile.arch() != Arch::X86_64
        {
            return Err(self.error(
                &Origin::File(self.lines.platform),
                "scenario.platform",
                format!(
                    "a forwarding workload models ixgbe on 2012 x86-64; platform `{}` is {}",
                    self.profile.name(),
                    self.profile.arch().name()
                ),
            ));
        }
        let t = self.target();
        if !self.kernel.modelled_on(t.arch) {
            return Err(self.error(
                &self.kernel_origin,
                "scenario.kernel",
                format!(
                    "Linux {} cannot run on platform `{}`: {}",
                    self.kernel,
                    self.profile.name(),
                    self.kernel.unmodelled_reason(t.arch)
                ),
            ));
        }
        let mut p = Policies::preset(self.kernel, &t);
        for o in &self.overrides {
            let key = match o.origin {
                Origin::File(_) => format!("scenario.policy.{}", o.key),
                Origin::Argument => format!("--policy {}", o.key),
            };
            let d = crate::policy::def(&o.key).map_err(|m| self.error(&o.origin, &key, m))?;
            d.applies(&t).map_err(|why| {
                self.error(
                    &o.origin,
                    &key,
                    format!("policy `{}` does not apply to this scenario: {why}", o.key),
                )
            })?;
            p.set(&o.key, &o.value)
                .map_err(|m| self.error(&o.origin, &key, m))?;
        }
        if p.invalidation == crate::iommu::dma_fq::Invalidation::Lazy
            && self.kernel < crate::policy::LAZY_SINCE
        {
            let o = self
                .overrides
                .iter()
                .rev()
                .find(|o| o.key == "invalidation");
            let origin = o.map_or(Origin::File(None), |o| o.origin.clone());
            return Err(self.error(
                &origin,
                "invalidation",
                format!(
                    "lazy invalidation (iommu.strict=0) reached arm-smmu and arm-smmu-v3 in Linux {}; the scenario runs {}",
                    crate::policy::LAZY_SINCE,
                    self.kernel
                ),
            ));
        }
        self.policies = p;
        self.check()
    }

    /// Checks between sections that an override (`--platform`, `--kernel`, `--policy`) can
    /// break, and the profile's coverage of every operation the run will price.
    pub(super) fn check(&mut self) -> Result<(), InputError> {
        let file = |line: Option<usize>| Origin::File(line);
        if let Some(n) = self.swiotlb.areas
            && n != 1
            && !self.policies.swiotlb_rules.has_areas()
        {
            return Err(self.error(
                &file(self.lines.areas),
                "swiotlb.areas",
                format!(
                    "{n} areas, but swiotlb before 6.0 (Linux {}, swiotlb_rules={}) has one pool lock and no areas; areas came with 6.0",
                    self.kernel,
                    crate::types::Choice::name(self.policies.swiotlb_rules)
                ),
            ));
        }
        if self.iommu.is_some() && !self.workload.as_kind().behind_iommu() {
            return Err(self.error(
                &file(self.lines.kind),
                "iommu",
                format!(
                    "a {} workload's device does not sit behind an IOMMU in this model; remove [iommu]",
                    self.workload.kind()
                ),
            ));
        }
        if let Some(cfg) = self.iommu.as_mut() {
            self.profile
                .require_wmb(&format!("scenario `{}` (an [iommu] domain)", self.name))?;
            let Some(p) = iommu::platform_smmu(&self.profile) else {
                return Err(InputError {
                    file: self.profile.origin.clone(),
                    line: None,
                    key: Some("smmu".into()),
                    message: format!(
                        "missing, but scenario `{}` drives an SMMU: the platform must price its operations",
                        self.name
                    ),
                });
            };
            if !self.iommu_given.coherent_walk {
                cfg.coherent_walk = self.profile.model.smmu.is_some_and(|s| s.coherent_walk);
            }
            if !self.iommu_given.smmu {
                cfg.smmu = p;
            } else if p != cfg.smmu {
                let msg = format!(
                    "{} does not match the platform `{}`, whose [smmu] is {}",
                    cfg.smmu.name(),
                    self.profile.name(),
                    p.name()
                );
                return Err(self.error(&file(self.lines.smmu), "iommu.smmu", msg));
            }
        }
        // A device sits on a node of the platform's topology that has memory (`dev_to_node()`
        // names a node whose memory its coherent allocations prefer); a platform without
        // `[numa]` has one node, 0.
        if let Some(n) = self.device.numa_node {
            let msg = match &self.profile.numa {
                None if n != 0 => Some(format!(
                    "node {n}, but platform `{}` has one memory node (node 0)",
                    self.profile.name()
                )),
                Some(t) if n as usize >= t.nodes.len() => Some(format!(
                    "node {n} is out of range: platform `{}` has nodes 0 to {}",
                    self.profile.name(),
                    t.nodes.len() - 1
                )),
                Some(t) if !t.has_memory(n) => Some(format!(
                    "node {n} of platform `{}` has no memory: a device sits on a node with memory",
                    self.profile.name()
                )),
                _ => None,
            };
            if let Some(msg) = msg {
                return Err(self.error(&file(self.lines.numa_node), "device.numa_node", msg));
            }
        }
        self.check_boot()?;
        self.workload.as_kind().check(self)?;
        let arch = crate::setup::arch_dma(&self.profile, &self.policies);
        if self.workload.uses_dma_api() {
            self.profile
                .require_ops(arch.required_ops(), &format!("{} dma-direct", arch.name()))?;
        } else if self.iommu.is_some_and(|c| !c.coherent_walk) {
            self.profile.require_ops(
                arch.required_ops(),
                "a non-coherent SMMU table walker (PTE cleaning)",
            )?;
        }
        Ok(())
    }

    /// Whether the run boots as the kernel does on a NUMA platform with an SMMUv3
    /// ([`crate::setup::Machine::boot_numa_smmu_v3`]): the SMMU probes, its command queue lands
    /// where boot's CMA areas put it, and every command list is priced against that node.
    pub fn probes_smmu_v3(&self) -> bool {
        self.workload.as_kind().probes_smmu()
            && crate::setup::Machine::numa_smmu_v3(&self.profile, self.iommu.as_ref())
    }

    /// The node of the CPU making the calls: the device's (a driver's calls run where its
    /// device and interrupts are), else the SMMU's when the run probes one, else node 0.
    pub fn cpu_node(&self) -> u32 {
        self.device.numa_node.unwrap_or_else(|| {
            self.profile
                .numa
                .as_ref()
                .filter(|_| self.probes_smmu_v3())
                .and_then(|t| t.first_of(crate::platform::numa::InitiatorKind::Smmu))
                .map_or(0, |i| i.node)
        })
    }

    /// `[boot]` against the workload and the platform's memory. An area the scenario asks for
    /// that is larger than the memory it must come from is bad input; one that fits in memory
    /// but cannot be placed (other reservations, `@base`/`-limit`) is the kernel's result:
    /// `cma_declare_contiguous_nid()` fails and boot logs it. A parameter the release lacks is
    /// a result too (ignored at boot), so the release is not checked here.
    pub(super) fn check_boot(&self) -> Result<(), InputError> {
        let b = &self.boot;
        if *b == CmaBoot::default() {
            return Ok(());
        }
        let first = [
            self.lines.boot_cma,
            self.lines.boot_cma_pernuma,
            self.lines.boot_numa_cma,
        ]
        .into_iter()
        .flatten()
        .min();
        if !self.workload.as_kind().own_devices() && !self.probes_smmu_v3() {
            return Err(self.error(
                &Origin::File(first),
                "boot",
                format!(
                    "a {} workload allocates no coherent memory here, so CMA boot parameters change nothing; [boot] applies to a coherent workload, or to a streaming or IOMMU workload behind an SMMUv3 on a NUMA platform (whose command queue boot's CMA places)",
                    self.workload.kind()
                ),
            ));
        }
        // The coherent kind's own check has required a topology.
        let Some(t) = &self.profile.numa else {
            return Ok(());
        };
        let mib = |n: u64| crate::report::human_bytes(n);
        let at =
            |line: Option<usize>, key: &str, msg: String| self.error(&Origin::File(line), key, msg);
        if let Some(c) = b.cma {
            let total: u64 = t.memory_nodes().map(|n| n.mem_size).sum();
            if c.size > total {
                return Err(at(
                    self.lines.boot_cma,
                    "boot.cma",
                    format!(
                        "an area of {} is larger than all of platform `{}`'s memory ({})",
                        mib(c.size),
                        self.profile.name(),
                        mib(total)
                    ),
                ));
            }
        }
        if let Some(size) = b.cma_pernuma
            && let Some(n) = t.memory_nodes().find(|n| n.mem_size < size)
        {
            return Err(at(
                self.lines.boot_cma_pernuma,
                "boot.cma_pernuma",
                format!(
                    "an area of {} on every node, but node {} of platform `{}` has {} of memory",
                    mib(size),
                    n.id,
                    self.profile.name(),
                    mib(n.mem_size)
                ),
            ));
        }
        for &(node, size) in &b.numa_cma {
            let line = self.lines.boot_numa_cma;
            let msg = match t.nodes.get(node as usize) {
                None => Some(format!(
                    "node {node} is out of range: platform `{}` has nodes 0 to {}",
                    self.profile.name(),
                    t.nodes.len() - 1
                )),
                Some(n) if n.mem_size == 0 => Some(format!(
                    "node {node} of platform `{}` has no memory: no area can be reserved there",
                    self.profile.name()
                )),
                Some(n) if size > n.mem_size => Some(format!(
                    "an area of {} is larger than node {node}'s memory ({})",
                    mib(size),
                    mib(n.mem_size)
                )),
                _ => None,
            };
            if let Some(msg) = msg {
                return Err(at(line, "boot.numa_cma", msg));
            }
        }
        Ok(())
    }

    /// Which `dma_map_ops` the kernel gives this scenario's device: iommu-dma behind an
    /// IOMMU; a bounce pool where the workload needs one (on x86-64 before 5.0, lib/swiotlb.c's
    /// own `swiotlb_dma_ops`; dma-direct over the pool otherwise); dma-direct otherwise.
    pub fn dma_ops(&self) -> DmaOpsKind {
        self.dma_ops_for(self.iommu.is_some(), self.workload.uses_swiotlb())
    }

    /// [`Scenario::dma_ops`] for a device behind an IOMMU or not, with a bounce pool or not
    /// (a replayed trace's devices each have their own).
    pub fn dma_ops_for(&self, iommu: bool, swiotlb: bool) -> DmaOpsKind {
        if iommu {
            return DmaOpsKind::IommuDma;
        }
        if !swiotlb {
            // ARM had no dma-direct before 5.x; every modelled ARMv7 release has arm_dma_ops.
            if self.profile.arch() == Arch::Armv7 {
                return DmaOpsKind::ArmDma;
            }
            return DmaOpsKind::Direct;
        }
        // lib/swiotlb.c's own ops served x86-64 until 5.0, when they were merged into dma-direct
        // ("dma-direct: merge swiotlb_dma_ops into the dma_direct code").
        match (self.profile.arch(), self.policies.swiotlb_rules) {
            (Arch::X86_64, rules) if rules.own_dma_ops() => DmaOpsKind::Swiotlb2012(rules),
            (_, rules) => DmaOpsKind::DirectSwiotlb(rules),
        }
    }

    /// What setup needs to give this scenario's device its ops.
    pub fn device_setup(&self) -> DeviceSetup<'_> {
        DeviceSetup {
            profile: &self.profile,
            policies: &self.policies,
            device: &self.device,
            swiotlb: &self.swiotlb,
            iommu: self.iommu.as_ref(),
            ops: self.dma_ops(),
        }
    }

    /// A rough count of the model's steps this run will take (a cache line maintained, a PTE
    /// written, a packet forwarded, ...), from the workload alone, before anything runs. The
    /// model takes a few nanoseconds of wall time per step.
    pub fn work(&self) -> u128 {
        self.workload.as_kind().work(self)
    }

    /// The cache line a run's work estimate counts in ([`WorkloadKind::work`]).
    pub(crate) fn work_line(&self) -> u128 {
        u128::from(self.profile.model.line_bytes.max(1))
    }

    /// The page a run's work estimate counts IOMMU steps in: the domain's granule, or 4 KB.
    pub(crate) fn work_page(&self) -> u128 {
        u128::from(self.iommu.map_or(4096, |c| c.granule))
    }

    /// The outer steps the run counts with [`Progress::advance`]: iterations (per size, for a
    /// sweep or a bounce workload), or packets.
    pub fn progress_total(&self) -> u64 {
        self.workload.as_kind().progress_total()
    }

    /// Refuse a run estimated above `max_work` steps (see [`DEFAULT_MAX_WORK`]).
    pub fn check_work(&self, max_work: u128) -> Result<(), InputError> {
        let w = self.work();
        if w > max_work {
            return Err(InputError::new(
                &self.file,
                format!(
                    "this run would take about {w} model steps (hours at a few ns each); the limit is {max_work}: make the workload smaller, or raise the limit with --max-work"
                ),
            ));
        }
        Ok(())
    }

    /// The named software costs this scenario's run can charge: the layers setup gives its
    /// device (or, for an IOMMU workload, the domain and the IOVA allocator), plus the driver's.
    pub fn sw_keys(&self) -> Vec<SwKey> {
        let mut layers = Vec::new();
        // A replay's devices each have their own ops: those behind an IOMMU iommu-dma's.
        let own_domain = self.workload.as_kind().own_iommu_domain();
        if own_domain {
            layers.extend([Layer::IommuDma, Layer::Iova]);
            if self.policies.invalidation == crate::iommu::dma_fq::Invalidation::Lazy {
                layers.push(Layer::DmaFq);
            }
        }
        if self.workload.uses_dma_api() {
            layers.push(Layer::DmaApi);
            match self.dma_ops() {
                DmaOpsKind::Direct => layers.push(Layer::DmaDirect),
                DmaOpsKind::ArmDma => layers.push(Layer::ArmDma),
                DmaOpsKind::DirectSwiotlb(_) => {
                    layers.extend([Layer::DmaDirect, Layer::Swiotlb, Layer::SwiotlbPool])
                }
                DmaOpsKind::Swiotlb2012(_) => {
                    layers.extend([Layer::Swiotlb2012, Layer::SwiotlbPool])
                }
                DmaOpsKind::IommuDma => {
                    layers.extend([Layer::IommuDma, Layer::Iova]);
                    if self.policies.invalidation == crate::iommu::dma_fq::Invalidation::Lazy {
                        layers.push(Layer::DmaFq);
                    }
                }
            }
        } else if self.workload.allocates_iovas() {
            layers.push(Layer::Iova);
        }
        let smmu = match &self.iommu {
            Some(cfg) => Some(cfg.smmu),
            None if own_domain => iommu::platform_smmu(&self.profile),
            None => None,
        };
        if let Some(smmu) = smmu {
            layers.extend([Layer::IommuCore, Layer::IoPgtableArm]);
            layers.push(match smmu {
                SmmuModel::Mmu500 => Layer::ArmSmmu,
                SmmuModel::SmmuV3 { .. } => Layer::ArmSmmuV3,
            });
        }
        layers.extend(self.workload.as_kind().driver_layers(self));
        // x86-64's __pa() is a call up to 3.8: dma_map_single and the 2012 swiotlb's virtual
        // bookkeeping make it (a driver that makes it too says so in its layers).
        if self.workload.uses_dma_api()
            && self.policies.phys_addr == crate::arch::x86::physaddr::PhysAddrKind::Call
        {
            layers.push(Layer::X86PhysAddr);
        }
        SwKey::charged_by(&layers)
    }
}
