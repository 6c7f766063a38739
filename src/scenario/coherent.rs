//! The `coherent` workload: coherent allocations for devices on chosen NUMA nodes, under the
//! boot's CMA areas, and what a device ring's placement costs.
//!
//! Kernel counterpart: `dma_alloc_coherent()` / `dma_free_coherent()` (kernel/dma/mapping.c's
//! `dma_alloc_attrs()`, which clears the caller's zone flags) through dma-direct
//! ([`crate::dma::coherent`]) or, for a device behind the IOMMU, iommu-dma
//! ([`crate::iommu::dma_iommu::IommuDma::iommu_dma_alloc`]); the CMA areas boot reserved from
//! `[boot]` ([`crate::dma::contiguous`]); with an `[iommu]`, the SMMUv3's probe
//! (`arm_smmu_init_structures()`, its queues from `dmam_alloc_coherent()`) before any device.
//!
//! What it models: each allocation in the order written, then each device ring's traffic,
//! then the frees in their `free` order. Per allocation: the node of its memory, what served it
//! (a per-node CMA area, the default area, the page allocator on the node asked for, or on a
//! fallback node) or the failure, and the time charged. A ring lives in one allocation; per
//! descriptor the CPU writes it, the device reads it, the device writes its completion back
//! into the same slot and the CPU reads that — each a transfer of the slot's cache lines
//! between the initiator's node and the memory's node ([`crate::hw::Hw::numa_line`], priced by
//! the profile's `numa.line_ns`), one after another as a request waits for its completion.
//! Devices are DMA-coherent (arm64 servers' PCIe); a non-coherent device's remap and the
//! atomic pools are not modelled, and neither is a device's doorbell register.
//!
//! Invariants: the workload was checked against the platform before it runs (a topology, nodes
//! in range with memory, an SMMU for `iommu` devices); a failed allocation is a result, and a
//! free gives the memory back to where it came from; counts come from running the allocators.

use super::{Ctx, Progress, RunFailure, RunInfo, Scenario, Shared, Workload};
use crate::device::Device;
use crate::dma::coherent::{Allocation, DmaCoherent, dma_alloc_attrs_gfp};
use crate::dma::contiguous::{Gfp, Served};
use crate::hw::FrameId;
use crate::hw::calls::{StackRow, stack_rows};
use crate::hw::model::Model;
use crate::hw::{Counter, Hw, SwKey, lines_spanned};
use crate::input::InputError;
use crate::iommu::arm_smmu_v3::{Cmdq, SmmuV3Idr1, SmmuV3Structures, arm_smmu_init_structures};
use crate::iommu::dma_iommu::{IommuCoherent, IommuDma};
use crate::mm::physmem::SharedPhysMem;
use crate::platform::numa::InitiatorKind;
use crate::report::{
    FORMAT_VERSION, HeadDoc, breakdown_docs, counts_map, header, human_bytes, instr, ns,
    stack_table,
};
use crate::setup::{
    SetupError, SmmuModel, arch_dma, dma_coherent_init, iommu_domain_alloc_with_cmdq, numa_lines,
    numa_memory,
};
use crate::types::{Arch, PhysAddr};
use serde::Deserialize;
use std::fmt::Write;
use toml::Spanned;

/// The registry entry of this kind.
pub const KIND: super::Kind = super::Kind {
    name: "coherent",
    summary: "dma_alloc_coherent / dma_free_coherent on a NUMA platform: each allocation's node and CMA area, device rings local or remote",
    parse,
};

/// Largest single allocation (the page allocator's and CMA's bookkeeping run per block).
pub const MAX_ALLOC: u64 = 1 << 32;
/// Most allocations, devices and rings a workload may list.
pub const MAX_ITEMS: usize = 4096;
/// Most descriptors a ring may run.
pub const MAX_DESCRIPTORS: i64 = 10_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    kind: Spanned<String>,
    cpu_node: Option<Spanned<i64>>,
    #[serde(default)]
    device: Vec<DeviceSpec>,
    #[serde(default)]
    alloc: Vec<AllocSpec>,
    #[serde(default)]
    ring: Vec<RingSpec>,
    smmu: Option<SmmuSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceSpec {
    name: Spanned<String>,
    node: Option<Spanned<i64>>,
    dma_mask_bits: Spanned<i64>,
    iommu: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllocSpec {
    name: Option<Spanned<String>>,
    device: Spanned<String>,
    size: Spanned<toml::Value>,
    gfp: Option<Spanned<String>>,
    force_contiguous: Option<bool>,
    free: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RingSpec {
    alloc: Spanned<String>,
    descriptors: Spanned<i64>,
    descriptor_bytes: Spanned<i64>,
    completion_bytes: Spanned<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SmmuSpec {
    cmdqs: Spanned<i64>,
    evtqs: Spanned<i64>,
    sidsize: Spanned<i64>,
    dma_mask_bits: Spanned<i64>,
}

/// A device of the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct CoherentDevice {
    pub name: String,
    /// `dev_to_node()`; `None` is `NUMA_NO_NODE`.
    pub node: Option<u32>,
    pub node_line: Option<usize>,
    /// `coherent_dma_mask` as a bit count.
    pub dma_mask_bits: u32,
    /// Behind the platform's SMMU (iommu-dma) rather than direct.
    pub iommu: bool,
    pub line: usize,
}

impl CoherentDevice {
    fn device(&self) -> Device {
        Device {
            numa_node: self.node,
            ..Device::new(&self.name, true, self.dma_mask_bits)
        }
    }
}

/// One `dma_alloc_coherent()`.
#[derive(Clone, Debug, PartialEq)]
pub struct Alloc {
    pub name: Option<String>,
    /// Index into [`Coherent::devices`].
    pub device: usize,
    pub size: u64,
    /// The flags as the caller passed them (zone flags included, which `dma_alloc_attrs()`
    /// clears).
    pub gfp: Gfp,
    /// `DMA_ATTR_FORCE_CONTIGUOUS`.
    pub force_contiguous: bool,
    /// Its place among the frees (`None`: never freed).
    pub free: Option<u32>,
}

/// A device ring in one allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Ring {
    /// Index into [`Coherent::allocs`].
    pub alloc: usize,
    pub descriptors: u64,
    pub descriptor_bytes: u64,
    pub completion_bytes: u64,
}

/// The SMMUv3's probe: what its ID registers report, and its own DMA mask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmmuProbe {
    pub idr1: SmmuV3Idr1,
    pub dma_mask_bits: u32,
}

/// A `coherent` workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Coherent {
    /// The node of the CPU making the calls and touching the rings.
    pub cpu_node: u32,
    pub cpu_node_line: usize,
    pub devices: Vec<CoherentDevice>,
    pub allocs: Vec<Alloc>,
    pub rings: Vec<Ring>,
    pub smmu: Option<SmmuProbe>,
    pub kind_line: usize,
}

/// `GFP_KERNEL`, `GFP_ATOMIC`, each optionally `| GFP_DMA32` or `| GFP_DMA`.
fn parse_gfp(s: &str) -> Option<Gfp> {
    let mut g: Option<Gfp> = None;
    let (mut dma, mut dma32) = (false, false);
    for part in s.split('|').map(str::trim) {
        match part {
            "GFP_KERNEL" if g.is_none() => g = Some(Gfp::KERNEL),
            "GFP_ATOMIC" if g.is_none() => g = Some(Gfp::ATOMIC),
            "GFP_DMA32" if !dma32 => dma32 = true,
            "GFP_DMA" if !dma => dma = true,
            _ => return None,
        }
    }
    g.map(|g| Gfp { dma, dma32, ..g })
}

fn gfp_name(g: Gfp) -> String {
    let mut s = String::from(if g.blocking {
        "GFP_KERNEL"
    } else {
        "GFP_ATOMIC"
    });
    if g.dma32 {
        s.push_str(" | GFP_DMA32");
    }
    if g.dma {
        s.push_str(" | GFP_DMA");
    }
    s
}

fn parse(c: &Ctx, v: Spanned<toml::de::DeValue>, _shared: &Shared) -> Result<Workload, InputError> {
    let w: Section = c.section(v)?;
    let kind_line = c.line(w.kind.span());
    let cpu = w.cpu_node.as_ref().ok_or_else(|| {
        c.missing(
            &w.kind,
            "cpu_node",
            "the node of the CPU making the calls, e.g. 2",
        )
    })?;
    let cpu_node = c.int(cpu, "workload.cpu_node", 0..=1023)? as u32;
    if w.device.is_empty() {
        return Err(c.missing(
            &w.kind,
            "device",
            "at least one [[workload.device]] (name, node, dma_mask_bits)",
        ));
    }
    if w.alloc.is_empty() {
        return Err(c.missing(
            &w.kind,
            "alloc",
            "at least one [[workload.alloc]] (device, size)",
        ));
    }
    if w.device.len() + w.alloc.len() + w.ring.len() > MAX_ITEMS {
        return Err(c.err(
            w.kind.span(),
            "workload",
            format!("at most {MAX_ITEMS} devices, allocations and rings in all"),
        ));
    }
    let mut devices: Vec<CoherentDevice> = Vec::new();
    for d in &w.device {
        let name = d.name.get_ref().trim().to_string();
        if name.is_empty() || devices.iter().any(|x| x.name == name) {
            return Err(c.err(
                d.name.span(),
                "workload.device.name",
                format!("`{name}`: each device needs a name of its own"),
            ));
        }
        let node = match &d.node {
            Some(n) => Some(c.int(n, "workload.device.node", 0..=1023)? as u32),
            None => None,
        };
        devices.push(CoherentDevice {
            name,
            node,
            node_line: d.node.as_ref().map(|n| c.line(n.span())),
            dma_mask_bits: c.int(&d.dma_mask_bits, "workload.device.dma_mask_bits", 12..=64)?
                as u32,
            iommu: d.iommu.unwrap_or(false),
            line: c.line(d.name.span()),
        });
    }
    let mut allocs: Vec<Alloc> = Vec::new();
    let mut names: Vec<Option<String>> = Vec::new();
    for a in &w.alloc {
        let device = devices
            .iter()
            .position(|d| d.name == a.device.get_ref().trim())
            .ok_or_else(|| {
                c.err(
                    a.device.span(),
                    "workload.alloc.device",
                    format!("no [[workload.device]] is named `{}`", a.device.get_ref()),
                )
            })?;
        let size = c.size(a.size.get_ref(), a.size.span(), "workload.alloc.size")?;
        if size > MAX_ALLOC {
            return Err(c.err(
                a.size.span(),
                "workload.alloc.size",
                format!("at most {} in the model", human_bytes(MAX_ALLOC)),
            ));
        }
        let gfp = match &a.gfp {
            None => Gfp::KERNEL,
            Some(g) => parse_gfp(g.get_ref()).ok_or_else(|| {
                c.err(
                    g.span(),
                    "workload.alloc.gfp",
                    format!(
                        "`{}`: expected GFP_KERNEL or GFP_ATOMIC, optionally `| GFP_DMA32` or `| GFP_DMA`",
                        g.get_ref()
                    ),
                )
            })?,
        };
        let name = match &a.name {
            Some(n) => {
                let n2 = n.get_ref().trim().to_string();
                if n2.is_empty() || names.iter().flatten().any(|x| *x == n2) {
                    return Err(c.err(
                        n.span(),
                        "workload.alloc.name",
                        format!("`{n2}`: each allocation's name must be its own"),
                    ));
                }
                Some(n2)
            }
            None => None,
        };
        let free = match &a.free {
            Some(f) => Some(c.int(f, "workload.alloc.free", 1..=1_000_000)? as u32),
            None => None,
        };
        names.push(name.clone());
        allocs.push(Alloc {
            name,
            device,
            size,
            gfp,
            force_contiguous: a.force_contiguous.unwrap_or(false),
            free,
        });
    }
    let mut rings = Vec::new();
    for r in &w.ring {
        let want = r.alloc.get_ref().trim();
        let alloc = names
            .iter()
            .position(|n| n.as_deref() == Some(want))
            .ok_or_else(|| {
                c.err(
                    r.alloc.span(),
                    "workload.ring.alloc",
                    format!("no [[workload.alloc]] is named `{want}`"),
                )
            })?;
        let descriptors = c.int(
            &r.descriptors,
            "workload.ring.descriptors",
            1..=MAX_DESCRIPTORS,
        )?;
        let descriptor_bytes = c.int(
            &r.descriptor_bytes,
            "workload.ring.descriptor_bytes",
            1..=4096,
        )?;
        if descriptor_bytes > allocs[alloc].size {
            return Err(c.err(
                r.descriptor_bytes.span(),
                "workload.ring.descriptor_bytes",
                format!(
                    "a {descriptor_bytes}-byte descriptor does not fit in `{want}` ({})",
                    human_bytes(allocs[alloc].size)
                ),
            ));
        }
        let completion_bytes = c.int(
            &r.completion_bytes,
            "workload.ring.completion_bytes",
            1..=descriptor_bytes as i64,
        )?;
        rings.push(Ring {
            alloc,
            descriptors,
            descriptor_bytes,
            completion_bytes,
        });
    }
    let smmu = match &w.smmu {
        Some(s) => Some(SmmuProbe {
            idr1: SmmuV3Idr1 {
                cmdqs: c.int(&s.cmdqs, "workload.smmu.cmdqs", 0..=19)? as u32,
                evtqs: c.int(&s.evtqs, "workload.smmu.evtqs", 0..=19)? as u32,
                sidsize: c.int(&s.sidsize, "workload.smmu.sidsize", 0..=32)? as u32,
            },
            dma_mask_bits: c.int(&s.dma_mask_bits, "workload.smmu.dma_mask_bits", 32..=64)? as u32,
        }),
        None => None,
    };
    Ok(Workload::Coherent(Coherent {
        cpu_node,
        cpu_node_line: c.line(cpu.span()),
        devices,
        allocs,
        rings,
        smmu,
        kind_line,
    }))
}

impl Coherent {
    /// Checks against the platform and the other sections (an override can change both).
    pub(crate) fn check(&self, s: &Scenario) -> Result<(), InputError> {
        let err = |line: Option<usize>, key: &str, message: String| InputError {
            file: s.file.clone(),
            line,
            key: Some(key.into()),
            message,
        };
        let name = s.profile.name();
        if s.profile.arch() != Arch::Arm64 {
            return Err(err(
                Some(self.kind_line),
                "workload.kind",
                format!(
                    "a coherent workload models arm64's coherent allocation and CMA placement; platform `{name}` is {}",
                    s.profile.arch().name()
                ),
            ));
        }
        if s.kernel < crate::policy::KernelVersion(5, 10) {
            return Err(err(
                Some(self.kind_line),
                "scenario.kernel",
                format!(
                    "a coherent workload models the coherent allocation path from Linux 5.10 (per-NUMA CMA's release); the scenario runs {}",
                    s.kernel
                ),
            ));
        }
        let Some(t) = &s.profile.numa else {
            return Err(err(
                Some(self.kind_line),
                "workload.kind",
                format!(
                    "a coherent workload places memory by NUMA node, and platform `{name}` has no [numa] topology"
                ),
            ));
        };
        let node_ok = |n: u32, line: Option<usize>, key: &str, what: &str| {
            if n as usize >= t.nodes.len() {
                Err(err(
                    line,
                    key,
                    format!(
                        "node {n} is out of range: platform `{name}` has nodes 0 to {}",
                        t.nodes.len() - 1
                    ),
                ))
            } else if what == "device" && !t.has_memory(n) {
                Err(err(
                    line,
                    key,
                    format!(
                        "node {n} of platform `{name}` has no memory: a device sits on a node with memory"
                    ),
                ))
            } else {
                Ok(())
            }
        };
        node_ok(
            self.cpu_node,
            Some(self.cpu_node_line),
            "workload.cpu_node",
            "cpu",
        )?;
        for d in &self.devices {
            if let Some(n) = d.node {
                node_ok(n, d.node_line, "workload.device.node", "device")?;
            }
            if d.iommu && s.iommu.is_none() {
                return Err(err(
                    Some(d.line),
                    "workload.device.iommu",
                    format!(
                        "device `{}` sits behind the IOMMU, but the scenario has no [iommu] section",
                        d.name
                    ),
                ));
            }
        }
        if let Some(cfg) = &s.iommu {
            if !matches!(cfg.smmu, SmmuModel::SmmuV3 { .. }) {
                return Err(err(
                    Some(self.kind_line),
                    "iommu.smmu",
                    "a coherent workload probes an SMMUv3 (its queues come from dmam_alloc_coherent); the domain's SMMU is an MMU-500".into(),
                ));
            }
            if self.smmu.is_none() {
                return Err(err(
                    Some(self.kind_line),
                    "workload.smmu",
                    "missing: with an [iommu] the SMMUv3 probes first; give its ID registers (cmdqs, evtqs, sidsize) and dma_mask_bits".into(),
                ));
            }
        }
        if self.smmu.is_some() {
            if s.iommu.is_none() {
                return Err(err(
                    Some(self.kind_line),
                    "workload.smmu",
                    "an SMMU probe needs the scenario's [iommu] section (the domain its devices map through)".into(),
                ));
            }
            if t.first_of(InitiatorKind::Smmu).is_none() {
                return Err(InputError {
                    file: s.profile.origin.clone(),
                    line: None,
                    key: Some("numa.initiator".into()),
                    message: format!(
                        "scenario `{}` probes an SMMU, but the topology names no initiator of kind \"smmu\" (its node)",
                        s.name
                    ),
                });
            }
        }
        if !self.rings.is_empty() && t.line_ps.is_none() {
            return Err(InputError {
                file: s.profile.origin.clone(),
                line: None,
                key: Some("numa.line_ns".into()),
                message: format!(
                    "missing, but scenario `{}` runs device rings: the line transfers between nodes price them",
                    s.name
                ),
            });
        }
        Ok(())
    }

    /// Model steps, roughly: a page allocator or bitmap step per page, a line per ring step.
    pub fn work(&self) -> u128 {
        let pages: u128 = self
            .allocs
            .iter()
            .map(|a| u128::from(a.size.div_ceil(4096)))
            .sum();
        let ring: u128 = self
            .rings
            .iter()
            .map(|r| 4 * u128::from(r.descriptors) * u128::from(r.descriptor_bytes.div_ceil(64)))
            .sum();
        pages + ring + 64 * self.allocs.len() as u128
    }
}

/// One block of an allocation's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub phys: PhysAddr,
    pub bytes: u64,
    pub node: u32,
    /// `cma:<area>` or `page allocator`.
    pub served: String,
    /// What served it, in words: a per-node area, the default area, the page allocator on the
    /// node asked for, or a fallback node.
    pub from: String,
}

/// What one allocation got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub blocks: Vec<Block>,
    /// The IOVA (behind the IOMMU); `None` for dma-direct, whose DMA address is the physical.
    pub iova: Option<u64>,
    /// The zone dma-direct asked for ("" normal, `GFP_DMA32`, `GFP_DMA`).
    pub zone: &'static str,
}

/// One allocation's row of the result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocRow {
    pub index: usize,
    pub name: Option<String>,
    pub device: String,
    pub device_node: Option<u32>,
    pub size: u64,
    pub gfp: String,
    /// Which code path: `dma-direct`, `iommu-dma remap`, `iommu-dma contiguous`.
    pub path: &'static str,
    pub result: Result<Placed, String>,
    pub alloc_ps: u64,
    /// Where the free sent each block, and its time; `None` when not freed.
    pub free: Option<(Result<Vec<String>, String>, u64)>,
}

/// The SMMU's probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmmuRow {
    pub name: String,
    pub node: u32,
    pub structures: SmmuV3Structures,
    /// A lone `CMD_SYNC` into the empty queue, from the command store to the CPU seeing its
    /// completion.
    pub cmd_sync_ps: u64,
}

/// One ring's traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingRow {
    pub alloc: String,
    pub device: String,
    pub device_node: Option<u32>,
    pub cpu_node: u32,
    /// The node of the ring's memory (its first block).
    pub memory_node: Option<u32>,
    pub descriptors: u64,
    /// Per descriptor, mean ps of: CPU writes descriptor, device reads it, device writes the
    /// completion, CPU reads the completion.
    pub step_ps: [u64; 4],
    /// Why it did not run (its allocation failed).
    pub skipped: Option<String>,
}

pub static RING_STEPS: [FrameId; 4] = [
    FrameId::new("cpu writes descriptor"),
    FrameId::new("device reads descriptor"),
    FrameId::new("device writes completion"),
    FrameId::new("cpu reads completion"),
];

#[derive(Clone, Debug)]
pub struct CoherentResult {
    pub info: RunInfo,
    pub kernel: String,
    pub cpu_node: u32,
    /// The areas boot reserved: (name, node, base, bytes).
    pub areas: Vec<(String, u32, u64, u64)>,
    /// What boot logged about CMA (reservations and failures).
    pub boot_log: Vec<String>,
    /// Parameters the release does not have, ignored at boot.
    pub ignored: Vec<String>,
    pub smmu: Option<SmmuRow>,
    pub allocs: Vec<AllocRow>,
    pub rings: Vec<RingRow>,
    pub counts: [u64; Counter::N],
    pub stacks: Vec<StackRow>,
    pub total_ps: u64,
}

impl CoherentResult {
    pub fn call_totals(&self) -> Vec<(String, u64, u64)> {
        let mut v = Vec::new();
        for a in &self.allocs {
            let who = a.name.clone().unwrap_or_else(|| format!("#{}", a.index));
            v.push((format!("dma_alloc_coherent {who}"), 1, a.alloc_ps));
            if let Some((_, ps)) = &a.free {
                v.push((format!("dma_free_coherent {who}"), 1, *ps));
            }
        }
        for r in &self.rings {
            v.push((
                format!("ring {}", r.alloc),
                r.descriptors,
                r.step_ps.iter().sum::<u64>() * r.descriptors,
            ));
        }
        v
    }

    pub fn count(&self, c: Counter) -> u64 {
        self.counts[c as usize]
    }
}

fn from_words(served: &Served, node: u32, wanted: u32) -> String {
    match served {
        Served::Area(a) if a == "reserved" => format!("default CMA area on node {node}"),
        Served::Area(a) => format!("per-node CMA area {a} on node {node}"),
        Served::PageAllocator if node == wanted => format!("page allocator on node {node}"),
        Served::PageAllocator => {
            format!("page allocator, fallback to node {node} (node {wanted} had no block)")
        }
    }
}

fn served_key(s: &Served) -> String {
    match s {
        Served::Area(a) => format!("cma:{a}"),
        Served::PageAllocator => "page allocator".into(),
    }
}

fn block(a: &Allocation, wanted: u32) -> Block {
    Block {
        phys: a.phys,
        bytes: a.size,
        node: a.node,
        served: served_key(&a.served),
        from: from_words(&a.served, a.node, wanted),
    }
}

/// What an allocation holds until it is freed.
enum Live {
    Direct(Allocation),
    Iommu(IommuCoherent),
}

/// Run the workload on the Model.
pub fn run(s: &Scenario, w: &Coherent, progress: &Progress) -> Result<CoherentResult, SetupError> {
    let topo = s.profile.numa.as_ref().ok_or(SetupError::NoTopology)?;
    let mut hw = Model::new(s.profile.model.clone());
    if let Some(l) = numa_lines(&s.profile, w.cpu_node) {
        hw.set_numa(l);
    }
    let mem: SharedPhysMem = numa_memory(&s.profile, vec![]).shared();
    let mut coh: DmaCoherent = dma_coherent_init(&mut mem.borrow_mut(), s.kernel, &s.boot);
    // numa_mem_id(): the CPU's node, or the nearest node with memory when it has none; an
    // allocation for a device without a node starts there.
    coh.cpu_node = topo
        .fallback_order(w.cpu_node)
        .into_iter()
        .find(|&n| topo.has_memory(n))
        .unwrap_or(w.cpu_node);
    let kernel = s.kernel.to_string();
    let areas = coh
        .cma
        .areas()
        .map(|a| (a.name.clone(), a.node, a.base().0, a.size()))
        .collect();
    let boot_log = coh.cma.log.clone();
    let ignored = coh
        .cma
        .ignored
        .iter()
        .map(|i| i.describe(&kernel))
        .collect();

    // The SMMU probes at boot, before any device driver allocates.
    let mut smmu = None;
    let mut cmdq_shift = 8;
    if let Some(p) = &w.smmu {
        let init = topo
            .first_of(InitiatorKind::Smmu)
            .ok_or(SetupError::NoSmmu)?;
        let dev = Device {
            numa_node: Some(init.node),
            ..Device::new(&init.name, true, p.dma_mask_bits)
        };
        let back = hw.enter(crate::frame_id!("arm_smmu_device_probe"));
        let st = arm_smmu_init_structures(&mut hw, &mut coh, &mut mem.borrow_mut(), &dev, p.idr1);
        hw.leave(back);
        let st = st.map_err(|source| SetupError::SmmuProbe {
            smmu: init.name.clone(),
            source,
        })?;
        cmdq_shift = st.cmdq.max_n_shift;
        // A lone CMD_SYNC into the empty queue: what every strict unmap behind it waits for.
        let q = Cmdq::new(cmdq_shift);
        let cost = hw.sw_cost(SwKey::ArmSmmuCmdqIssueCmdlist);
        let t = hw.now_ps();
        let back = hw.enter(crate::frame_id!("arm_smmu_cmdq_issue_sync"));
        q.issue_sync(&mut hw, cost);
        hw.leave(back);
        smmu = Some(SmmuRow {
            name: init.name.clone(),
            node: init.node,
            structures: st,
            cmd_sync_ps: hw.now_ps() - t,
        });
    }

    // Each device behind the IOMMU gets its own default domain, its tables on the SMMU's node.
    let mut domains: Vec<Option<IommuDma>> = (0..w.devices.len()).map(|_| None).collect();
    for (i, d) in w.devices.iter().enumerate() {
        if !d.iommu {
            continue;
        }
        let Some(mut cfg) = s.iommu else {
            return Err(SetupError::NoIommuFor(d.name.clone()));
        };
        cfg.node = smmu.as_ref().map_or(cfg.node, |m| m.node);
        let domain = iommu_domain_alloc_with_cmdq(
            &mut hw,
            &cfg,
            &s.profile,
            &s.policies,
            mem.clone(),
            Cmdq::new(cmdq_shift),
        )?;
        let dma = IommuDma::new(
            &hw,
            domain,
            1,
            arch_dma(&s.profile, &s.policies),
            s.policies.sync,
        )
        .map_err(SetupError::IovaDomain)?
        .with_invalidation(&hw, s.policies.invalidation)
        .with_release_rules(s.policies.iova.rules(), s.policies.unmap_lookup);
        domains[i] = Some(dma);
    }

    let mut rows = Vec::new();
    let mut live: Vec<Option<Live>> = Vec::new();
    for (index, a) in w.allocs.iter().enumerate() {
        let d = &w.devices[a.device];
        let dev = d.device();
        let wanted = d.node.unwrap_or(w.cpu_node);
        let gfp = dma_alloc_attrs_gfp(a.gfp);
        let t0 = hw.now_ps();
        let back = hw.enter(crate::frame_id!("dma_alloc_coherent"));
        let (path, got) = match domains[a.device].as_mut() {
            Some(dom) => {
                let remap = gfp.blocking && !a.force_contiguous;
                let r = dom.iommu_dma_alloc(
                    &mut hw,
                    &mut coh,
                    &mem,
                    &dev,
                    a.size,
                    gfp,
                    a.force_contiguous,
                );
                (
                    if remap {
                        "iommu-dma remap"
                    } else {
                        "iommu-dma contiguous"
                    },
                    r.map(Live::Iommu),
                )
            }
            None => {
                let back2 = hw.enter(crate::frame_id!("dma_direct_alloc"));
                let r = coh.alloc(&mut mem.borrow_mut(), &dev, a.size, gfp, false);
                hw.leave(back2);
                ("dma-direct", r.map(Live::Direct).map_err(|e| e.to_string()))
            }
        };
        hw.leave(back);
        let alloc_ps = hw.now_ps() - t0;
        let result = match &got {
            Ok(Live::Direct(x)) => Ok(Placed {
                blocks: vec![block(x, wanted)],
                iova: None,
                zone: x.zone,
            }),
            Ok(Live::Iommu(x)) => Ok(Placed {
                blocks: x.pages.iter().map(|p| block(p, wanted)).collect(),
                iova: Some(x.dma.0),
                zone: "",
            }),
            Err(e) => Err(e.clone()),
        };
        live.push(got.ok());
        progress.advance(1);
        rows.push(AllocRow {
            index,
            name: a.name.clone(),
            device: d.name.clone(),
            device_node: d.node,
            size: a.size,
            gfp: gfp_name(a.gfp),
            path,
            result,
            alloc_ps,
            free: None,
        });
    }

    // Rings run while their memory is live.
    let line = hw.line_bytes().max(1);
    let mut rings = Vec::new();
    for r in &w.rings {
        let a = &w.allocs[r.alloc];
        let d = &w.devices[a.device];
        let name = a.name.clone().unwrap_or_default();
        let mut row = RingRow {
            alloc: name.clone(),
            device: d.name.clone(),
            device_node: d.node,
            cpu_node: w.cpu_node,
            memory_node: None,
            descriptors: r.descriptors,
            step_ps: [0; 4],
            skipped: None,
        };
        let blocks: Vec<(PhysAddr, u64)> = match &live[r.alloc] {
            Some(Live::Direct(x)) => vec![(x.phys, x.size)],
            Some(Live::Iommu(x)) => x.pages.iter().map(|p| (p.phys, p.size)).collect(),
            None => {
                row.skipped = Some(format!("`{name}` was not allocated"));
                rings.push(row);
                continue;
            }
        };
        row.memory_node = blocks.first().and_then(|b| mem.borrow().node_of(b.0));
        // Without a node the device's accesses come from the CPU's node's interconnect.
        let dev_node = d.node.unwrap_or(w.cpu_node);
        let slots = (a.size / r.descriptor_bytes).max(1);
        let mut totals = [0u64; 4];
        for k in 0..r.descriptors {
            let off = (k % slots) * r.descriptor_bytes;
            let slot = phys_at(&blocks, off);
            let desc = lines_spanned(slot, r.descriptor_bytes, line);
            let comp = lines_spanned(slot, r.completion_bytes, line);
            for (i, (from, n)) in [
                (w.cpu_node, desc),
                (dev_node, desc),
                (dev_node, comp),
                (w.cpu_node, comp),
            ]
            .into_iter()
            .enumerate()
            {
                let t = hw.now_ps();
                let back = hw.enter(&RING_STEPS[i]);
                hw.numa_line(from, slot, n);
                hw.leave(back);
                totals[i] += hw.now_ps() - t;
            }
        }
        row.step_ps = totals.map(|t| t / r.descriptors);
        rings.push(row);
    }

    // Frees, in their order (ties in the order written).
    let mut order: Vec<(u32, usize)> = w
        .allocs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.free.map(|f| (f, i)))
        .collect();
    order.sort();
    for (_, i) in order {
        let Some(held) = live[i].take() else {
            rows[i].free = Some((Err("not allocated: nothing to free".into()), 0));
            continue;
        };
        let a = &w.allocs[i];
        let d = &w.devices[a.device];
        let dev = d.device();
        let t0 = hw.now_ps();
        let back = hw.enter(crate::frame_id!("dma_free_coherent"));
        let r = match (held, domains[a.device].as_mut()) {
            (Live::Iommu(x), Some(dom)) => dom
                .iommu_dma_free(&mut hw, &mut coh, &mem, &dev, &x)
                .map(|v| v.iter().map(served_key).collect()),
            (Live::Direct(x), _) => {
                let back2 = hw.enter(crate::frame_id!("dma_direct_free"));
                let r = coh
                    .free(&mut mem.borrow_mut(), &dev, x.phys, x.size)
                    .map(|s| vec![served_key(&s)])
                    .map_err(|e| e.to_string());
                hw.leave(back2);
                r
            }
            (Live::Iommu(_), None) => Err("no domain".into()),
        };
        hw.leave(back);
        rows[i].free = Some((r, hw.now_ps() - t0));
    }

    Ok(CoherentResult {
        info: s.run_info(),
        kernel,
        cpu_node: w.cpu_node,
        areas,
        boot_log,
        ignored,
        smmu,
        allocs: rows,
        rings,
        counts: hw.ledger().totals(),
        stacks: stack_rows(hw.ledger()),
        total_ps: hw.ledger().total_ps(),
    })
}

/// The physical address `off` bytes into memory made of `blocks`, in order.
fn phys_at(blocks: &[(PhysAddr, u64)], mut off: u64) -> PhysAddr {
    for &(p, n) in blocks {
        if off < n {
            return PhysAddr(p.0 + off);
        }
        off -= n;
    }
    blocks.last().map_or(PhysAddr(0), |b| b.0)
}

fn placed_json(r: &AllocRow) -> serde_json::Value {
    let mut v = serde_json::json!({
        "index": r.index,
        "name": r.name,
        "device": r.device,
        "device_node": r.device_node,
        "bytes": r.size,
        "gfp": r.gfp,
        "path": r.path,
        "alloc_ns": ns(r.alloc_ps),
    });
    match &r.result {
        Ok(p) => {
            v["node"] = p.blocks.first().map(|b| b.node).into();
            v["served"] = p.blocks.first().map(|b| b.served.clone()).into();
            v["blocks"] = p
                .blocks
                .iter()
                .map(|b| {
                    serde_json::json!({
                        "phys": format!("{:#x}", b.phys.0),
                        "bytes": b.bytes,
                        "node": b.node,
                        "served": b.served,
                        "from": b.from,
                    })
                })
                .collect();
            v["iova"] = p.iova.map(|i| format!("{i:#x}")).into();
            v["zone"] = p.zone.into();
        }
        Err(e) => v["error"] = e.clone().into(),
    }
    if let Some((f, ps)) = &r.free {
        v["free"] = match f {
            Ok(to) => serde_json::json!({ "to": to, "ns": ns(*ps) }),
            Err(e) => serde_json::json!({ "error": e, "ns": ns(*ps) }),
        };
    }
    v
}

/// The `dmasim run --format json` document.
pub fn json(r: &CoherentResult) -> serde_json::Value {
    let mut head = serde_json::to_value(HeadDoc::of(&r.info)).expect("plain data serialises");
    let smmu = r.smmu.as_ref().map(|m| {
        let q = |a: &Allocation| {
            serde_json::json!({
                "bytes": a.size,
                "node": a.node,
                "served": served_key(&a.served),
            })
        };
        serde_json::json!({
            "name": m.name,
            "node": m.node,
            "cmdq": q(&m.structures.cmdq.alloc),
            "evtq": q(&m.structures.evtq.alloc),
            "strtab_l1": q(&m.structures.strtab_l1),
            "cmd_sync_ns": ns(m.cmd_sync_ps),
        })
    });
    let rings: Vec<serde_json::Value> = r
        .rings
        .iter()
        .map(|x| {
            let mut v = serde_json::json!({
                "alloc": x.alloc,
                "device": x.device,
                "device_node": x.device_node,
                "cpu_node": x.cpu_node,
                "memory_node": x.memory_node,
                "descriptors": x.descriptors,
            });
            match &x.skipped {
                Some(why) => v["skipped"] = why.clone().into(),
                None => {
                    let steps: serde_json::Map<String, serde_json::Value> = RING_STEPS
                        .iter()
                        .zip(x.step_ps)
                        .map(|(k, ps)| (k.name().replace(' ', "_"), ns(ps).into()))
                        .collect();
                    v["per_descriptor_ns"] = steps.into();
                    v["round_trip_ns"] = ns(x.step_ps.iter().sum()).into();
                }
            }
            v
        })
        .collect();
    let doc = serde_json::json!({
        "format_version": FORMAT_VERSION,
        "workload": { "kind": "coherent", "cpu_node": r.cpu_node },
        "boot": {
            "areas": r.areas.iter().map(|(n, node, base, size)| serde_json::json!({
                "name": n, "node": node, "base": format!("{base:#x}"), "bytes": size,
            })).collect::<Vec<_>>(),
            "log": r.boot_log,
            "ignored": r.ignored,
        },
        "smmu": smmu,
        "allocations": r.allocs.iter().map(placed_json).collect::<Vec<_>>(),
        "rings": rings,
        "operations": counts_map(&r.counts),
        "breakdown": breakdown_docs(&r.stacks, r.total_ps),
        "total_ns": ns(r.total_ps),
    });
    if let (Some(h), serde_json::Value::Object(d)) = (head.as_object_mut(), doc) {
        let mut out = serde_json::Map::new();
        out.insert("format_version".into(), FORMAT_VERSION.into());
        out.append(h);
        for (k, v) in d {
            out.entry(k).or_insert(v);
        }
        return out.into();
    }
    serde_json::Value::Null
}

/// The `dmasim run` terminal table.
pub fn table(r: &CoherentResult) -> String {
    let mut o = String::new();
    header(&mut o, &r.info);
    let _ = writeln!(o, "\nboot (Linux {})", r.kernel);
    if r.areas.is_empty() {
        let _ = writeln!(o, "  no CMA area");
    }
    for l in &r.boot_log {
        let _ = writeln!(o, "  {l}");
    }
    for l in &r.ignored {
        let _ = writeln!(o, "  {l}");
    }
    if let Some(m) = &r.smmu {
        let _ = writeln!(o, "\nSMMUv3 probe: {} on node {}", m.name, m.node);
        for (what, a) in [
            ("command queue", &m.structures.cmdq.alloc),
            ("event queue", &m.structures.evtq.alloc),
            ("stream table L1", &m.structures.strtab_l1),
        ] {
            let _ = writeln!(
                o,
                "  {what:<16} {:>9}  node {}  {}",
                human_bytes(a.size),
                a.node,
                served_key(&a.served)
            );
        }
        let _ = writeln!(
            o,
            "  CMD_SYNC on the empty queue: {:.1} ns",
            ns(m.cmd_sync_ps)
        );
    }
    let _ = writeln!(o, "\nallocations");
    let _ = writeln!(
        o,
        "  {:<12} {:<12} {:>4} {:>9}  {:<20} {:<20} {:>5}  {:<44} {:>10}  free",
        "name", "device", "node", "size", "gfp", "path", "node", "served by", "alloc ns"
    );
    for a in &r.allocs {
        let name = a.name.clone().unwrap_or_else(|| format!("#{}", a.index));
        let dnode = a.device_node.map_or("-".into(), |n| n.to_string());
        let (node, from) = match &a.result {
            Ok(p) => {
                let nodes: Vec<String> = {
                    let mut v: Vec<u32> = p.blocks.iter().map(|b| b.node).collect();
                    v.dedup();
                    v.iter().map(u32::to_string).collect()
                };
                let from = if p.blocks.len() == 1 {
                    p.blocks[0].from.clone()
                } else {
                    format!("{} blocks: {}", p.blocks.len(), p.blocks[0].from)
                };
                (nodes.join(","), from)
            }
            Err(e) => ("-".into(), format!("failed: {e}")),
        };
        let free = match &a.free {
            None => String::new(),
            Some((Ok(to), ps)) => {
                let mut t = to.clone();
                t.dedup();
                format!("to {} in {:.1} ns", t.join(", "), ns(*ps))
            }
            Some((Err(e), _)) => e.clone(),
        };
        let _ = writeln!(
            o,
            "  {:<12} {:<12} {:>4} {:>9}  {:<20} {:<20} {:>5}  {:<44} {:>10.1}  {}",
            name,
            a.device,
            dnode,
            human_bytes(a.size),
            a.gfp,
            a.path,
            node,
            from,
            ns(a.alloc_ps),
            free
        );
    }
    if !r.rings.is_empty() {
        let _ = writeln!(o, "\ndevice rings: ns per descriptor");
        let _ = writeln!(
            o,
            "  {:<12} {:<12} {:>8} {:>8} {:>8}  {:>10} {:>10} {:>10} {:>10} {:>11}",
            "ring",
            "device",
            "dev node",
            "cpu node",
            "mem node",
            "cpu write",
            "dev read",
            "dev write",
            "cpu read",
            "round trip"
        );
        for x in &r.rings {
            let node = |n: Option<u32>| n.map_or("-".into(), |n| n.to_string());
            if let Some(why) = &x.skipped {
                let _ = writeln!(o, "  {:<12} {:<12} not run: {why}", x.alloc, x.device);
                continue;
            }
            let s = x.step_ps;
            let _ = writeln!(
                o,
                "  {:<12} {:<12} {:>8} {:>8} {:>8}  {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11.1}",
                x.alloc,
                x.device,
                node(x.device_node),
                x.cpu_node,
                node(x.memory_node),
                ns(s[0]),
                ns(s[1]),
                ns(s[2]),
                ns(s[3]),
                ns(s.iter().sum())
            );
        }
    }
    let _ = writeln!(o, "\noperations");
    for c in Counter::ALL {
        let n = r.counts[c as usize];
        if n > 0 {
            let _ = writeln!(
                o,
                "  {:<12} {:<24} {:>14}",
                instr(c, r.info.arch),
                c.name(),
                n
            );
        }
    }
    stack_table(&mut o, "whole run", &r.stacks, r.total_ps, 1);
    o
}

impl super::WorkloadKind for Coherent {
    type Output = Box<CoherentResult>;
    const KINDS: &'static [super::Kind] = &[KIND];

    fn run(&self, s: &Scenario, progress: &Progress) -> Result<Box<CoherentResult>, RunFailure> {
        Ok(run(s, self, progress).map(Box::new)?)
    }

    fn check(&self, s: &Scenario) -> Result<(), InputError> {
        Coherent::check(self, s)
    }

    fn work(&self, _s: &Scenario) -> u128 {
        Coherent::work(self)
    }

    fn progress_total(&self) -> u64 {
        self.allocs.len() as u64
    }

    fn own_devices(&self) -> bool {
        true
    }
}

impl super::KindResult for CoherentResult {
    super::kind::result_fields!();
    /// Per allocation: its dma_alloc_coherent and, if freed, its dma_free_coherent.
    fn call_totals(&self) -> Vec<(String, u64, u64)> {
        CoherentResult::call_totals(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfp_flags_read_as_a_driver_writes_them() {
        assert_eq!(parse_gfp("GFP_KERNEL"), Some(Gfp::KERNEL));
        assert_eq!(parse_gfp("GFP_ATOMIC"), Some(Gfp::ATOMIC));
        let g = parse_gfp("GFP_KERNEL | GFP_DMA32").unwrap();
        assert!(g.blocking && g.dma32 && !g.dma);
        assert_eq!(gfp_name(g), "GFP_KERNEL | GFP_DMA32");
        for bad in [
            "",
            "GFP_DMA32",
            "GFP_KERNEL | GFP_ATOMIC",
            "GFP_KERNEL|GFP_DMA|GFP_DMA",
            "kernel",
        ] {
            assert_eq!(parse_gfp(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_ring_slot_is_found_across_blocks() {
        let blocks = [(PhysAddr(0x1000), 0x1000), (PhysAddr(0x9000), 0x1000)];
        assert_eq!(phys_at(&blocks, 0), PhysAddr(0x1000));
        assert_eq!(phys_at(&blocks, 0xff0), PhysAddr(0x1ff0));
        assert_eq!(phys_at(&blocks, 0x1010), PhysAddr(0x9010));
    }
}
