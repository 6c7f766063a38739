//! Which CPUs of the platform a workload's CPUs are, how many the platform has, whether they can
//! share what setup gives them, and the machine each runs on: a clock of its own, and the one
//! device API every CPU calls.
//!
//! Kernel counterpart: none as such — the CPUs a driver's threads (or `dma_map_benchmark`'s
//! kthreads, bound to a node's mask with `-n`) happen to run on.
//!
//! What it models: a workload of `n` CPUs runs on `n` distinct CPUs of the platform: with a
//! node, that node's CPUs in order; without, the machine's CPUs in order from the first CPU of
//! the node the calls run on ([`Scenario::cpu_node`]), wrapping round. A platform without a
//! `[numa]` topology has its CPUs 0, 1, ... on the calls' node.
//!
//! Invariants: the CPUs are distinct and exist on the platform (callers check `n` against
//! [`platform_cpus`] first); the same inputs place them the same way; a scenario whose CPUs
//! would share ops a second CPU cannot call in the model is refused when it is checked
//! ([`check_shared`]), never when it runs.

use super::{Bug, Progress, Scenario};
use crate::dma::DmaMapOps;
use crate::hw::model::Model;
use crate::input::InputError;
use crate::setup::DeviceDmaApi;
use std::rc::Rc;

/// How many CPUs the platform has: its topology's, else `platform.cpus`.
pub fn platform_cpus(s: &Scenario) -> Option<u32> {
    match &s.profile.numa {
        Some(t) => Some(t.nodes.iter().map(|n| n.cpus.len() as u32).sum::<u32>()),
        None => s.profile.cpus,
    }
}

/// The platform's CPU numbers, in order: its topology's, else `0..platform.cpus`; none when
/// it does not say.
pub fn platform_cpu_numbers(s: &Scenario) -> Vec<u32> {
    let mut all: Vec<u32> = match &s.profile.numa {
        Some(t) => t
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect(),
        None => (0..s.profile.cpus.unwrap_or(0)).collect(),
    };
    all.sort_unstable();
    all
}

/// The node of the platform's CPU `cpu`: its topology's, else the node the calls run on.
pub fn node_of(s: &Scenario, cpu: u32) -> u32 {
    s.profile
        .numa
        .as_ref()
        .and_then(|t| t.nodes.iter().find(|n| n.cpus.contains(&cpu)))
        .map_or_else(|| s.cpu_node(), |n| n.id)
}

/// `(cpu, node)` of each of `n` CPUs, on `node` if given.
pub fn place(s: &Scenario, n: u32, node: Option<u32>) -> Vec<(u32, u32)> {
    let Some(t) = &s.profile.numa else {
        let node = node.unwrap_or_else(|| s.cpu_node());
        return (0..n).map(|c| (c, node)).collect();
    };
    let mut all: Vec<(u32, u32)> = t
        .nodes
        .iter()
        .filter(|nd| node.is_none_or(|x| x == nd.id))
        .flat_map(|nd| nd.cpus.iter().map(move |&c| (c, nd.id)))
        .collect();
    all.sort_unstable();
    if node.is_none() {
        let home = s.cpu_node();
        if let Some(first) = all.iter().position(|&(_, nd)| nd == home) {
            all.rotate_left(first);
        }
    }
    all.truncate(n as usize);
    all
}

/// How many CPUs' worth of per-CPU state (IOVA magazines, flush-queue rings, swiotlb areas) to
/// set up for the CPUs `placed`: one for a single CPU (the single-CPU setup), else every CPU of
/// the platform (the kernel's possible CPUs, which its per-CPU loops walk), and at least up to
/// the highest placed.
pub fn per_cpu_slots(s: &Scenario, placed: &[(u32, u32)]) -> u32 {
    if placed.len() <= 1 {
        return 1;
    }
    let highest = placed.iter().map(|&(c, _)| c + 1).max().unwrap_or(1);
    platform_cpus(s).unwrap_or(highest).max(highest)
}

/// The machine set up (`hw`, the device's `api`) as each CPU of `placed` runs it: the first CPU
/// on the machine itself, each other on a clock of its own ([`Model::on_cpu`]), and every CPU
/// calling the one `api`, as the kernel's CPUs call one `dev->dma_ops`. Ops whose sharing is
/// not modelled ([`crate::setup::DmaOps::shareable`]) refuse more than one CPU, a [`Bug`]: the
/// scenario's checks refuse them first.
pub fn machines(
    mut hw: Model,
    api: DeviceDmaApi,
    placed: &[(u32, u32)],
) -> Result<Vec<(Model, Rc<DeviceDmaApi>)>, Bug> {
    let api = Rc::new(api);
    let mut out = Vec::with_capacity(placed.len());
    if let [(first, _), rest @ ..] = placed
        && !rest.is_empty()
    {
        if !api.ops.shareable() {
            return Err(Bug::NotShared {
                what: api.ops.name(),
            });
        }
        hw.set_processor(*first);
        for &(cpu, node) in rest {
            out.push((hw.on_cpu(cpu, node), Rc::clone(&api)));
        }
    }
    out.insert(0, (hw, api));
    Ok(out)
}

/// Run `body` on every CPU at once ([`crate::smp::run`]): CPU `i` runs it over `each`'s `i`-th
/// item (its machine, its buffers), with its [`crate::smp::Cpu`] and, for the first CPU alone,
/// the progress display (its loop moves it). The results come in CPU order; a run in which
/// every CPU left waits for another is a bug of the model's ([`Bug::Deadlock`]).
pub fn run_each<'a, M: 'a, R: 'a, F>(
    each: impl IntoIterator<Item = M>,
    progress: &'a Progress,
    body: &'a F,
) -> Result<Vec<R>, crate::smp::Deadlock>
where
    F: Fn(M, crate::smp::Cpu, Option<&'a Progress>) -> R,
{
    let bodies: Vec<crate::smp::Body<'a, R>> = each
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let progress = (i == 0).then_some(progress);
            Box::new(move |c| body(m, c, progress)) as crate::smp::Body<'a, R>
        })
        .collect();
    crate::smp::run(bodies)
}

/// `n` CPUs (the workload's `key`, at `line` of the file) against the platform's: at most as
/// many as it has, and more than one only on a platform that says how many it has.
pub fn check_count(s: &Scenario, n: u32, line: Option<usize>, key: &str) -> Result<(), InputError> {
    let at = |m: String| s.error(&super::Origin::File(line), key, m);
    match platform_cpus(s) {
        Some(p) if n > p => Err(at(format!(
            "{n} CPUs, and platform `{}` has {p}",
            s.profile.name()
        ))),
        None if n > 1 => Err(at(format!(
            "platform `{}` does not say how many CPUs it has (`platform.cpus`), so it runs on one",
            s.profile.name()
        ))),
        _ => Ok(()),
    }
}

/// `n` CPUs (the workload's `key`, at `line` of the file) sharing what setup gives the scenario:
/// its device's ops, or the domain of a workload that drives the IOMMU itself. Ops whose sharing
/// between CPUs is not modelled ([`crate::setup::DmaOpsKind::cpu_sharing`]) take one CPU, and
/// the input says so before anything runs.
pub fn check_shared(
    s: &Scenario,
    n: u32,
    line: Option<usize>,
    key: &str,
) -> Result<(), InputError> {
    if n <= 1 {
        return Ok(());
    }
    let arch = s.profile.arch();
    let (what, shared) = if s.workload.uses_dma_api() {
        let ops = s.dma_ops();
        let what = format!("the device's {}", ops.describe(&s.policies));
        (what, ops.cpu_sharing(arch, s.iommu.as_ref()))
    } else if let Some(cfg) = &s.iommu {
        ("the IOMMU domain".to_string(), cfg.cpu_sharing(arch))
    } else {
        return Ok(());
    };
    shared.map_err(|why| {
        let m = format!(
            "{n} CPUs would share {what} on platform `{}`, but {why}: set {key} = 1",
            s.profile.name()
        );
        s.error(&super::Origin::File(line), key, m)
    })
}
