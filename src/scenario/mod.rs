//! Scenarios: a platform, the kernel's policies, a device and a workload, as a TOML file.
//!
//! Kernel counterpart: none — a scenario is what a driver would do to the DMA API, written down.
//! The format is documented in docs/scenarios.md.
//!
//! Invariants: a scenario that parses has been checked completely (sizes, directions, calls,
//! platform, policies) before anything runs, so running it cannot fail on bad input; every error
//! names the file, the line and the key. Running is deterministic: the same scenario gives the same
//! [`RunResult`] bit for bit.

pub mod iommu;
pub mod run;

use crate::input::{InputError, parse_size, parse_toml};
use crate::platform::Profile;
use crate::policy::{KernelVersion, LATEST, Policies};
use crate::types::{DmaAttrs, DmaDirection};
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub use run::{CallStat, RunResult, StackRow, run};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    scenario: ScenarioSection,
    device: DeviceSection,
    workload: WorkloadSection,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioSection {
    name: String,
    platform: Spanned<String>,
    kernel: Option<Spanned<String>>,
    #[serde(default)]
    policy: BTreeMap<String, Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceSection {
    name: String,
    coherent: bool,
    dma_mask_bits: Spanned<i64>,
    numa_node: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadSection {
    kind: Spanned<String>,
    buffer: Spanned<toml::Value>,
    entry: Option<Spanned<toml::Value>>,
    entries: Option<Spanned<Vec<toml::Value>>>,
    direction: Spanned<String>,
    calls: Spanned<String>,
    iterations: Spanned<i64>,
    #[serde(default)]
    attrs: Option<Spanned<Vec<String>>>,
}

/// Which DMA API calls a streaming workload makes each iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// `dma_map_sg` then `dma_unmap_sg` of the whole list.
    MapUnmapSg,
    /// The list is mapped once; each iteration `dma_sync_sg_for_device` then `dma_sync_sg_for_cpu`.
    SyncSg,
    /// Each entry on its own: `dma_map_page` then `dma_unmap_page`.
    MapUnmapPage,
}

impl Calls {
    pub const NAMES: &[&str] = &[
        "map_sg+unmap_sg",
        "sync_sg_for_device+for_cpu",
        "map_page+unmap_page",
    ];

    pub fn parse(s: &str) -> Option<Calls> {
        match s {
            "map_sg+unmap_sg" => Some(Calls::MapUnmapSg),
            "sync_sg_for_device+for_cpu" | "sync_sg" => Some(Calls::SyncSg),
            "map_page+unmap_page" => Some(Calls::MapUnmapPage),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Calls::MapUnmapSg => Calls::NAMES[0],
            Calls::SyncSg => Calls::NAMES[1],
            Calls::MapUnmapPage => Calls::NAMES[2],
        }
    }
}

/// A streaming loop over one scatter-gather buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Streaming {
    pub buffer_bytes: u64,
    /// Entry sizes, cycled over the buffer.
    pub entry_bytes: Vec<u32>,
    pub direction: DmaDirection,
    pub calls: Calls,
    pub iterations: u32,
    /// `DMA_ATTR_*` passed to map and unmap calls.
    pub attrs: DmaAttrs,
}

/// A checked scenario, ready to run.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub profile: Profile,
    pub policies: Policies,
    pub device: crate::device::Device,
    pub workload: Streaming,
}

/// Largest buffer a streaming scenario may ask for: the model keeps the list in memory.
pub const MAX_BUFFER: u64 = 64 << 30;

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: std::ops::Range<usize>, key: &str, msg: impl Into<String>) -> InputError {
        InputError::at(self.file, self.text, Some(span), key, msg)
    }

    fn size(
        &self,
        v: &toml::Value,
        span: std::ops::Range<usize>,
        key: &str,
    ) -> Result<u64, InputError> {
        let n = match v {
            toml::Value::Integer(i) if *i > 0 => Some(*i as u64),
            toml::Value::String(s) => parse_size(s),
            _ => None,
        };
        match n {
            Some(n) if n > 0 => Ok(n),
            _ => Err(self.err(
                span,
                key,
                format!("expected a positive size such as 4096, \"4K\" or \"10M\", found {v}"),
            )),
        }
    }
}

impl Scenario {
    /// Read a scenario file. Its `platform` may be a built-in name or a path relative to the file.
    pub fn load(path: &str) -> Result<Scenario, InputError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| InputError::new(path, format!("cannot read scenario: {e}")))?;
        let dir = std::path::Path::new(path)
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default();
        Scenario::parse(path, &text, &dir)
    }

    pub fn parse(file: &str, text: &str, dir: &std::path::Path) -> Result<Scenario, InputError> {
        let f: ScenarioFile = parse_toml(file, text)?;
        let c = Ctx { file, text };

        let pname = f.scenario.platform.get_ref();
        let profile = match Profile::load(pname) {
            Ok(p) => p,
            Err(e) if e.file == "<argument>" => {
                let rel = dir.join(pname);
                if rel.exists() {
                    Profile::load(&rel.to_string_lossy())?
                } else {
                    return Err(c.err(f.scenario.platform.span(), "scenario.platform", e.message));
                }
            }
            Err(e) => return Err(e),
        };

        let kernel = match &f.scenario.kernel {
            None => LATEST,
            Some(k) => KernelVersion::parse(k.get_ref()).ok_or_else(|| {
                c.err(
                    k.span(),
                    "scenario.kernel",
                    format!(
                        "expected a release such as \"7.1\", found \"{}\"",
                        k.get_ref()
                    ),
                )
            })?,
        };
        let mut policies = Policies::preset(kernel);
        for (k, v) in &f.scenario.policy {
            policies
                .set(k, v.get_ref())
                .map_err(|m| c.err(v.span(), &format!("scenario.policy.{k}"), m))?;
        }

        let bits = *f.device.dma_mask_bits.get_ref();
        if !(12..=64).contains(&bits) {
            return Err(c.err(
                f.device.dma_mask_bits.span(),
                "device.dma_mask_bits",
                format!("must be 12..=64, found {bits}"),
            ));
        }
        let mut device = crate::device::Device::new(&f.device.name, f.device.coherent, bits as u32);
        if let Some(n) = &f.device.numa_node {
            let v = *n.get_ref();
            if !(0..=1023).contains(&v) {
                return Err(c.err(
                    n.span(),
                    "device.numa_node",
                    format!("must be 0..=1023, found {v}"),
                ));
            }
            device.numa_node = Some(v as u32);
        }

        let w = &f.workload;
        if w.kind.get_ref() != "streaming" {
            return Err(c.err(
                w.kind.span(),
                "workload.kind",
                format!(
                    "unknown workload kind `{}`; known kinds: streaming",
                    w.kind.get_ref()
                ),
            ));
        }
        let buffer_bytes = c.size(w.buffer.get_ref(), w.buffer.span(), "workload.buffer")?;
        if buffer_bytes > MAX_BUFFER {
            return Err(c.err(
                w.buffer.span(),
                "workload.buffer",
                format!("at most {MAX_BUFFER} bytes"),
            ));
        }
        let entry_bytes: Vec<u32> = match (&w.entry, &w.entries) {
            (Some(e), None) => vec![c.size(e.get_ref(), e.span(), "workload.entry")?],
            (None, Some(list)) if !list.get_ref().is_empty() => list
                .get_ref()
                .iter()
                .map(|v| c.size(v, list.span(), "workload.entries"))
                .collect::<Result<_, _>>()?,
            (None, Some(list)) => {
                return Err(c.err(list.span(), "workload.entries", "must not be empty"));
            }
            (Some(e), Some(_)) => {
                return Err(c.err(
                    e.span(),
                    "workload.entry",
                    "give `entry` or `entries`, not both",
                ));
            }
            (None, None) => {
                return Err(c.err(
                    w.kind.span(),
                    "workload.entry",
                    "missing: give `entry` (one size) or `entries` (a list)",
                ));
            }
        }
        .into_iter()
        .map(|n| u32::try_from(n).ok().filter(|&n| n <= 1 << 30))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            c.err(
                w.entry.as_ref().map(|e| e.span()).unwrap_or(w.kind.span()),
                "workload.entry",
                "an sg entry is at most 1 GiB",
            )
        })?;
        let direction = DmaDirection::parse(w.direction.get_ref()).ok_or_else(|| {
            c.err(
                w.direction.span(),
                "workload.direction",
                format!(
                    "unknown direction `{}`; choose bidirectional, to_device, from_device or none",
                    w.direction.get_ref()
                ),
            )
        })?;
        if direction == DmaDirection::None {
            return Err(c.err(w.direction.span(), "workload.direction", "DMA_NONE cannot be mapped or synced (the kernel's valid_dma_direction() check BUGs on it); choose bidirectional, to_device or from_device"));
        }
        let calls = Calls::parse(w.calls.get_ref()).ok_or_else(|| {
            c.err(
                w.calls.span(),
                "workload.calls",
                format!(
                    "unknown calls `{}`; choose one of: {}",
                    w.calls.get_ref(),
                    Calls::NAMES.join(", ")
                ),
            )
        })?;
        let it = *w.iterations.get_ref();
        if !(1..=1_000_000).contains(&it) {
            return Err(c.err(
                w.iterations.span(),
                "workload.iterations",
                format!("must be 1..=1000000, found {it}"),
            ));
        }

        let mut attrs = DmaAttrs::NONE;
        if let Some(list) = &w.attrs {
            for a in list.get_ref() {
                match a.as_str() {
                    "skip_cpu_sync" | "DMA_ATTR_SKIP_CPU_SYNC" => {
                        attrs = attrs.union(DmaAttrs::SKIP_CPU_SYNC)
                    }
                    _ => {
                        return Err(c.err(
                            list.span(),
                            "workload.attrs",
                            format!("unknown attribute `{a}`; known: skip_cpu_sync"),
                        ));
                    }
                }
            }
        }

        let s = Scenario {
            name: f.scenario.name,
            profile,
            policies,
            device,
            workload: Streaming {
                buffer_bytes,
                entry_bytes,
                direction,
                calls,
                iterations: it as u32,
                attrs,
            },
        };
        s.check_profile()?;
        Ok(s)
    }

    /// The profile must price every operation this scenario's arch layer can issue.
    pub fn check_profile(&self) -> Result<(), InputError> {
        let arch = run::arch_for(&self.profile, &self.policies);
        self.profile
            .require_ops(arch.required_ops(), &format!("{} dma-direct", arch.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"
[scenario]
name = "t"
platform = "dimensity9500"
kernel = "7.0"
policy = { sync = "batched" }

[device]
name = "dev"
coherent = false
dma_mask_bits = 64

[workload]
kind = "streaming"
buffer = "1M"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 3
"#;

    fn parse(text: &str) -> Result<Scenario, InputError> {
        Scenario::parse("s.toml", text, std::path::Path::new("."))
    }

    #[test]
    fn good_scenario_parses_and_overrides_apply() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.policies.kernel, KernelVersion(7, 0));
        assert_eq!(s.policies.sync, "batched");
        assert_eq!(s.workload.buffer_bytes, 1 << 20);
        assert_eq!(s.workload.entry_bytes, vec![4096]);
    }

    #[test]
    fn errors_name_key_and_line() {
        let cases = [
            (
                "buffer = \"1M\"",
                "buffer = \"1 furlong\"",
                "workload.buffer",
                15,
            ),
            (
                "direction = \"bidirectional\"",
                "direction = \"up\"",
                "workload.direction",
                17,
            ),
            (
                "calls = \"map_sg+unmap_sg\"",
                "calls = \"dance\"",
                "workload.calls",
                18,
            ),
            (
                "iterations = 3",
                "iterations = -3",
                "workload.iterations",
                19,
            ),
            (
                "dma_mask_bits = 64",
                "dma_mask_bits = 99",
                "device.dma_mask_bits",
                11,
            ),
            (
                "policy = { sync = \"batched\" }",
                "policy = { sync = \"never\" }",
                "scenario.policy.sync",
                6,
            ),
            (
                "platform = \"dimensity9500\"",
                "platform = \"nosuch\"",
                "scenario.platform",
                4,
            ),
            (
                "kernel = \"7.0\"",
                "kernel = \"seven\"",
                "scenario.kernel",
                5,
            ),
            (
                "entry = \"4K\"",
                "entry = \"4K\"\ncolour = \"red\"",
                "workload.colour",
                17,
            ),
        ];
        for (from, to, key, line) in cases {
            let e = parse(&GOOD.replace(from, to)).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
            assert_eq!(e.line, Some(line), "{to}: {e}");
        }
        let e = parse(&GOOD.replace(
            "iterations = 3",
            "iterations = 3\nattrs = [\"weak_ordering\"]",
        ))
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.attrs"), "{e}");
        assert_eq!(e.line, Some(20), "{e}");
        let e = parse(&GOOD.replace("iterations = 3\n", "")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("workload.iterations"), "{e}");
        assert!(e.line.is_some(), "{e}");
    }
}
