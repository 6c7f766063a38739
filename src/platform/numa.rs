//! A platform's NUMA topology: nodes, their CPUs and memory, where the SMMUs and devices sit, and
//! what an access from each initiator to each node's memory costs.
//!
//! Kernel counterpart: what firmware tells the kernel and the kernel keeps — the ACPI SRAT
//! (`numa_add_memblk()`, `node_set_online()`: each node's CPUs and memory ranges), the SLIT
//! (`numa_set_distance()`, read back by `node_distance()`), and a device's `_PXM` / DT
//! `numa-node-id` (`dev_to_node()`). The access latencies have no kernel counterpart: they are
//! the hardware the kernel runs on (HMAT would carry some of them; arm64 servers of the 5.10
//! era publish none), and each carries its source.
//!
//! What it models: the optional `[numa]` section of a profile, checked once. Node `i` is the
//! `i`-th `[[numa.node]]`; `distance` is the SLIT (N×N, 10 on the diagonal as ACPI requires,
//! more than 10 off it); `latency_ns` is the CPU-to-memory access latency (N×N: a CPU of node
//! `i` reading memory of node `j`); each `[[numa.initiator]]` (an SMMU, a device, a CPU
//! cluster) sits on a node and may give its own row of latencies. The optional `line_ns` is the
//! cost of moving one cache line homed on node `j` to an initiator on node `i` when the line is
//! held in a cache, not DRAM (a line another agent just wrote: what a CPU polling a queue slot
//! the SMMU writes, or the SMMU reading a command the CPU wrote, pays); an SMMU or device uses
//! the row of its node.
//!
//! Invariants: every matrix is square over the nodes; every initiator sits on a node that has
//! memory (a DMA master or SMMU on a memory-less node is a topology the kernel would map to
//! another node — say so in the profile instead); memory ranges are page aligned and do not
//! overlap; every value carries a non-empty source. A profile without `[numa]` is a single node
//! exactly as before.

use crate::input::{InputError, parse_size};
use serde::Deserialize;
use toml::Spanned;

/// ACPI's `LOCAL_DISTANCE`: the SLIT's diagonal.
pub const LOCAL_DISTANCE: u32 = 10;
/// The most nodes a profile may describe (arm64's `CONFIG_NODES_SHIFT` allows 64 by default).
pub const MAX_NODES: usize = 64;
/// The most initiators a profile may name.
pub const MAX_INITIATORS: usize = 256;
/// The longest access latency a profile may give, in ns.
pub const MAX_LATENCY_NS: f64 = 1e6;

/// A matrix with its source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixSpec {
    pub value: Spanned<Vec<Spanned<Vec<Spanned<f64>>>>>,
    pub source: Spanned<String>,
}

/// One `[[numa.node]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's CPUs as a list such as `"0-31"` or `"0-3,8"`; `""` for a CPU-less node.
    pub cpus: Spanned<String>,
    /// Where its memory starts (`"0"`, `"0x2000000000"`, `"128G"`).
    pub memory_base: Spanned<String>,
    /// How much memory it has (`"64G"`; `"0"` for a memory-less node).
    pub memory_size: Spanned<String>,
    pub source: Spanned<String>,
}

/// What an initiator is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitiatorKind {
    Cpu,
    Smmu,
    Device,
}

/// One `[[numa.initiator]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitiatorSpec {
    pub name: Spanned<String>,
    pub kind: InitiatorKind,
    pub node: Spanned<i64>,
    /// Its own access latency to each node's memory, in ns (one per node). Optional: a CPU
    /// cluster's row of `latency_ns` applies otherwise.
    pub latency_ns: Option<Spanned<Vec<Spanned<f64>>>>,
    pub source: Spanned<String>,
}

/// The `[numa]` section as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumaSpec {
    pub distance: MatrixSpec,
    pub latency_ns: MatrixSpec,
    /// Cache-line transfer cost between nodes, in ns (optional: without it nothing is priced
    /// by where a line is homed).
    pub line_ns: Option<MatrixSpec>,
    pub node: Vec<NodeSpec>,
    #[serde(default)]
    pub initiator: Vec<InitiatorSpec>,
}

/// One node, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub mem_base: u64,
    pub mem_size: u64,
}

/// One initiator, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Initiator {
    pub name: String,
    pub kind: InitiatorKind,
    pub node: u32,
    /// Access latency to each node's memory, in ps.
    pub latency_ps: Vec<u64>,
}

/// A checked topology.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// SLIT distances, `distance[i][j]`.
    pub distance: Vec<Vec<u32>>,
    /// CPU-to-memory latency in ps, `latency_ps[cpu node][memory node]`.
    pub latency_ps: Vec<Vec<u64>>,
    /// Cache-line transfer cost in ps, `line_ps[initiator node][home node]`, if the profile
    /// gives one.
    pub line_ps: Option<Vec<Vec<u64>>>,
    pub initiators: Vec<Initiator>,
}

const PAGE: u64 = 4096;

impl Topology {
    /// The node whose memory holds `phys` (`page_to_nid()`), if any node's does.
    pub fn node_of(&self, phys: u64) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.mem_size > 0 && phys >= n.mem_base && phys - n.mem_base < n.mem_size)
            .map(|n| n.id)
    }

    /// `node_distance(a, b)`.
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        self.distance[a as usize][b as usize]
    }

    /// Nodes with memory, in id order.
    pub fn memory_nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.mem_size > 0)
    }

    pub fn has_memory(&self, node: u32) -> bool {
        self.nodes
            .get(node as usize)
            .is_some_and(|n| n.mem_size > 0)
    }

    /// The initiator of this name.
    pub fn initiator(&self, name: &str) -> Option<&Initiator> {
        self.initiators.iter().find(|i| i.name == name)
    }

    /// The first initiator of a kind (the platform's SMMU).
    pub fn first_of(&self, kind: InitiatorKind) -> Option<&Initiator> {
        self.initiators.iter().find(|i| i.kind == kind)
    }

    /// The order in which the page allocator falls back from `node` (`build_zonelists()` →
    /// `find_next_best_node()`): nearest first by SLIT distance; among equals, a node above
    /// `node` before one below it, and a node without CPUs before one with them (the kernel's
    /// penalties). The kernel's `node_load` spreading of exact ties between several local
    /// nodes is not modelled: ties left after those rules go by node id.
    pub fn fallback_order(&self, node: u32) -> Vec<u32> {
        let mut order: Vec<(u64, u32)> = self
            .nodes
            .iter()
            .map(|n| {
                let d = u64::from(self.distance(node, n.id));
                let below = u64::from(n.id < node);
                let cpus = u64::from(!n.cpus.is_empty());
                let key = if n.id == node {
                    0
                } else {
                    (d + below + cpus) * 2
                };
                (key, n.id)
            })
            .collect();
        order.sort();
        order.into_iter().map(|(_, id)| id).collect()
    }
}

/// Parse a CPU list such as `0-31,64-95` (the kernel's `cpulist_parse`).
fn cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        let part = part.trim();
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= 65536 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// An address or size: a size such as `64G`, or a hexadecimal `0x...`.
fn address(s: &str) -> Option<u64> {
    let t = s.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16).ok(),
        None => parse_size(t),
    }
}

/// Check `[numa]`.
pub fn resolve(origin: &str, text: &str, n: &NumaSpec) -> Result<Topology, InputError> {
    let err = |span: std::ops::Range<usize>, key: &str, msg: String| {
        InputError::at(origin, text, Some(span), key, msg)
    };
    let source = |key: &str, s: &Spanned<String>| {
        if s.get_ref().trim().is_empty() {
            Err(err(
                s.span(),
                &format!("{key}.source"),
                "a source is required: a citation, `fit: <rows>` or `measured: <how>`".into(),
            ))
        } else {
            Ok(())
        }
    };
    let count = n.node.len();
    if count == 0 || count > MAX_NODES {
        return Err(err(
            n.distance.value.span(),
            "numa.node",
            format!("a topology has 1 to {MAX_NODES} [[numa.node]] entries, found {count}"),
        ));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(count);
    let mut cpus_seen = std::collections::BTreeSet::new();
    for (i, ns) in n.node.iter().enumerate() {
        let key = format!("numa.node[{i}]");
        source(&key, &ns.source)?;
        let cpus = cpu_list(ns.cpus.get_ref()).ok_or_else(|| {
            err(
                ns.cpus.span(),
                &format!("{key}.cpus"),
                format!(
                    "expected a CPU list such as \"0-31\" or \"0-3,8\" (CPUs below 65536), found \"{}\"",
                    ns.cpus.get_ref()
                ),
            )
        })?;
        if let Some(c) = cpus.iter().find(|c| !cpus_seen.insert(**c)) {
            return Err(err(
                ns.cpus.span(),
                &format!("{key}.cpus"),
                format!("CPU {c} is already on another node"),
            ));
        }
        let base = address(ns.memory_base.get_ref()).filter(|b| b % PAGE == 0);
        let base = base.ok_or_else(|| {
            err(
                ns.memory_base.span(),
                &format!("{key}.memory_base"),
                format!(
                    "expected a page-aligned address such as \"0\", \"0x2000000000\" or \"128G\", found \"{}\"",
                    ns.memory_base.get_ref()
                ),
            )
        })?;
        let size = address(ns.memory_size.get_ref()).filter(|s| s % PAGE == 0 && *s <= 1 << 50);
        let size = size.ok_or_else(|| {
            err(
                ns.memory_size.span(),
                &format!("{key}.memory_size"),
                format!(
                    "expected a size in whole pages of at most 1 PiB such as \"64G\" (\"0\" for a memory-less node), found \"{}\"",
                    ns.memory_size.get_ref()
                ),
            )
        })?;
        if base.checked_add(size).is_none_or(|e| e > 1 << 52) {
            return Err(err(
                ns.memory_size.span(),
                &format!("{key}.memory_size"),
                "the node's memory ends above 2^52, the largest physical address arm64 has".into(),
            ));
        }
        if size > 0
            && let Some(o) = nodes.iter().find(|o| {
                o.mem_size > 0 && base < o.mem_base + o.mem_size && o.mem_base < base + size
            })
        {
            return Err(err(
                ns.memory_base.span(),
                &format!("{key}.memory_base"),
                format!("node {i}'s memory overlaps node {}'s", o.id),
            ));
        }
        nodes.push(Node {
            id: i as u32,
            cpus,
            mem_base: base,
            mem_size: size,
        });
    }
    if nodes.iter().all(|n| n.mem_size == 0) {
        return Err(err(
            n.node[0].memory_size.span(),
            "numa.node",
            "no node has memory".into(),
        ));
    }
    let matrix = |key: &str, m: &MatrixSpec| -> Result<Vec<Vec<f64>>, InputError> {
        source(key, &m.source)?;
        let rows = m.value.get_ref();
        if rows.len() != count {
            return Err(err(
                m.value.span(),
                &format!("{key}.value"),
                format!(
                    "the matrix is not square over the nodes: {} rows for {count} nodes",
                    rows.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(count);
        for (i, row) in rows.iter().enumerate() {
            if row.get_ref().len() != count {
                return Err(err(
                    row.span(),
                    &format!("{key}.value[{i}]"),
                    format!(
                        "the matrix is not square: row {i} has {} entries for {count} nodes",
                        row.get_ref().len()
                    ),
                ));
            }
            let mut r = Vec::with_capacity(count);
            for (j, v) in row.get_ref().iter().enumerate() {
                let x = *v.get_ref();
                if !x.is_finite() || x < 0.0 {
                    return Err(err(
                        v.span(),
                        &format!("{key}.value[{i}][{j}]"),
                        format!("must be a finite, non-negative number, found {x}"),
                    ));
                }
                r.push(x);
            }
            out.push(r);
        }
        Ok(out)
    };
    let dist = matrix("numa.distance", &n.distance)?;
    let mut distance = vec![vec![0u32; count]; count];
    for (i, row) in dist.iter().enumerate() {
        for (j, &d) in row.iter().enumerate() {
            let span = n.distance.value.get_ref()[i].get_ref()[j].span();
            let ok = d.fract() == 0.0
                && d <= 254.0
                && if i == j {
                    d == f64::from(LOCAL_DISTANCE)
                } else {
                    d > f64::from(LOCAL_DISTANCE)
                };
            if !ok {
                return Err(err(
                    span,
                    &format!("numa.distance.value[{i}][{j}]"),
                    format!(
                        "a SLIT distance is a whole number, {LOCAL_DISTANCE} from a node to itself and 11 to 254 to another (ACPI 6.x, 5.2.17), found {d}"
                    ),
                ));
            }
            distance[i][j] = d as u32;
        }
    }
    let ps = |key: &str, span: std::ops::Range<usize>, ns: f64| -> Result<u64, InputError> {
        if ns > MAX_LATENCY_NS {
            return Err(err(
                span,
                key,
                format!("must be at most {MAX_LATENCY_NS} ns, found {ns}"),
            ));
        }
        Ok((ns * 1000.0).round() as u64)
    };
    let lat = matrix("numa.latency_ns", &n.latency_ns)?;
    let mut latency_ps = vec![vec![0u64; count]; count];
    for (i, row) in lat.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            let span = n.latency_ns.value.get_ref()[i].get_ref()[j].span();
            latency_ps[i][j] = ps(&format!("numa.latency_ns.value[{i}][{j}]"), span, v)?;
        }
    }
    let line_ps = match &n.line_ns {
        None => None,
        Some(m) => {
            let v = matrix("numa.line_ns", m)?;
            let mut out = vec![vec![0u64; count]; count];
            for (i, row) in v.iter().enumerate() {
                for (j, &x) in row.iter().enumerate() {
                    let span = m.value.get_ref()[i].get_ref()[j].span();
                    out[i][j] = ps(&format!("numa.line_ns.value[{i}][{j}]"), span, x)?;
                }
            }
            Some(out)
        }
    };
    if n.initiator.len() > MAX_INITIATORS {
        return Err(err(
            n.initiator[MAX_INITIATORS].name.span(),
            "numa.initiator",
            format!("at most {MAX_INITIATORS} initiators"),
        ));
    }
    let mut initiators: Vec<Initiator> = Vec::new();
    for (k, s) in n.initiator.iter().enumerate() {
        let key = format!("numa.initiator[{k}]");
        source(&key, &s.source)?;
        let name = s.name.get_ref().trim();
        if name.is_empty() || initiators.iter().any(|i| i.name == name) {
            return Err(err(
                s.name.span(),
                &format!("{key}.name"),
                format!("an initiator needs a name of its own, found \"{name}\""),
            ));
        }
        let node = *s.node.get_ref();
        if node < 0 || node as usize >= count {
            return Err(err(
                s.node.span(),
                &format!("{key}.node"),
                format!(
                    "node {node} is out of range: the topology has nodes 0 to {}",
                    count - 1
                ),
            ));
        }
        if nodes[node as usize].mem_size == 0 {
            return Err(err(
                s.node.span(),
                &format!("{key}.node"),
                format!("node {node} has no memory: a {:?} must sit on a node with memory (put it on the node its firmware would report as nearest)", s.kind).to_lowercase(),
            ));
        }
        let latency_ps = match &s.latency_ns {
            None => latency_ps[node as usize].clone(),
            Some(row) => {
                if row.get_ref().len() != count {
                    return Err(err(
                        row.span(),
                        &format!("{key}.latency_ns"),
                        format!(
                            "one latency per node: {} entries for {count} nodes",
                            row.get_ref().len()
                        ),
                    ));
                }
                let mut r = Vec::with_capacity(count);
                for (j, v) in row.get_ref().iter().enumerate() {
                    let x = *v.get_ref();
                    let k2 = format!("{key}.latency_ns[{j}]");
                    if !x.is_finite() || x < 0.0 {
                        return Err(err(
                            v.span(),
                            &k2,
                            format!("must be a finite, non-negative number, found {x}"),
                        ));
                    }
                    r.push(ps(&k2, v.span(), x)?);
                }
                r
            }
        };
        initiators.push(Initiator {
            name: name.to_string(),
            kind: s.kind,
            node: node as u32,
            latency_ps,
        });
    }
    Ok(Topology {
        nodes,
        distance,
        latency_ps,
        line_ps,
        initiators,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
        assert_eq!(cpu_list(""), Some(vec![]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("x"), None);
        assert_eq!(address("0x1000"), Some(4096));
        assert_eq!(address("128G"), Some(128 << 30));
    }

    fn topo(distance: Vec<Vec<u32>>, cpus: Vec<bool>) -> Topology {
        let n = distance.len();
        Topology {
            nodes: (0..n)
                .map(|i| Node {
                    id: i as u32,
                    cpus: if cpus[i] { vec![i as u32] } else { vec![] },
                    mem_base: (i as u64) << 30,
                    mem_size: 1 << 30,
                })
                .collect(),
            distance,
            latency_ps: vec![vec![0; n]; n],
            line_ps: None,
            initiators: vec![],
        }
    }

    #[test]
    fn the_page_allocator_falls_back_by_distance() {
        // Kunpeng 920's SLIT (kernel-facts.md, seed 003).
        let t = topo(
            vec![
                vec![10, 12, 20, 22],
                vec![12, 10, 22, 24],
                vec![20, 22, 10, 12],
                vec![22, 24, 12, 10],
            ],
            vec![true; 4],
        );
        assert_eq!(t.fallback_order(0), vec![0, 1, 2, 3]);
        assert_eq!(t.fallback_order(1), vec![1, 0, 2, 3]);
        assert_eq!(t.fallback_order(2), vec![2, 3, 0, 1]);
        assert_eq!(t.fallback_order(3), vec![3, 2, 0, 1]);
        // Equal distances: a node above before one below, a CPU-less node before one with CPUs.
        let t = topo(
            vec![vec![10, 20, 20], vec![20, 10, 20], vec![20, 20, 10]],
            vec![true, true, true],
        );
        assert_eq!(t.fallback_order(1), vec![1, 2, 0]);
        let t = topo(
            vec![vec![10, 20, 20], vec![20, 10, 20], vec![20, 20, 10]],
            vec![true, true, false],
        );
        assert_eq!(t.fallback_order(0), vec![0, 2, 1]);
    }
}
