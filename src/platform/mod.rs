//! Platform profiles: the hardware, as data.
//!
//! Kernel counterpart: none — a profile describes the machine the kernel runs on: CPU architecture
//! and clock, cache line size, what each cache-maintenance operation and barrier costs, and what
//! named stretches of kernel code cost on that CPU.
//!
//! Invariants: every parameter carries a non-empty `source` (a citation, `fit: <rows>`, or
//! `measured: <how>`); every cost is finite and non-negative; a profile that fails a check is an
//! [`InputError`] naming the file, line and key. Built-in profiles are compiled into the binary.

use crate::hw::cache::{Geometry, HierarchySpec, LevelSpec};
use crate::hw::model::{
    CacheModelParams, CopyCost, MaintCost, ModelParams, OuterParams, SmmuImpl, SmmuKind, SmmuParams,
};
use crate::hw::{CacheOp, SwKey};
use crate::input::{InputError, parse_toml};
/// Re-exported so `platform::Arch` keeps naming it; it lives in [`crate::types`] so that `hw` can use
/// it without depending on `platform`, which depends on `hw`.
pub use crate::types::Arch;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub mod numa;
pub mod params;

mod builtin;
mod resolve;
mod schema;

use builtin::BUILTIN;
pub use builtin::{builtin_list, builtin_names, is_builtin};
use resolve::*;
pub use resolve::{MAX_COST_NS, MAX_FREQ_MHZ, MAX_LINE_BYTES, MIN_FREQ_MHZ};
pub use schema::*;

/// A loaded, checked profile.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Where it came from: `builtin:NAME` or the path given.
    pub origin: String,
    pub file: ProfileFile,
    pub model: ModelParams,
    /// `platform.cpus`, checked to be a whole number of at least 1.
    pub cpus: Option<u32>,
    /// The checked `[numa]` section, if any.
    pub numa: Option<numa::Topology>,
    /// `acp.bandwidth_mb_s`, checked to be more than 0 and at most [`MAX_PORT_MB_S`].
    pub acp_mb_s: Option<f64>,
    /// The TOML it was read from, so that a `--set platform.KEY=VALUE` edits it and is checked
    /// exactly as the file would be.
    pub text: String,
}

/// `150ns`, `0.2us`, `800ps`, `40cycles` as (the profile's unit key, the number in it).
fn parse_cost_arg(v: &str) -> Option<(&'static str, f64)> {
    let v = v.trim();
    let split = v
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.trim().parse().ok()?;
    if !n.is_finite() {
        return None;
    }
    match unit.trim() {
        "ns" => Some(("ns", n)),
        "us" | "µs" => Some(("ns", n * 1000.0)),
        "ps" => Some(("ns", n / 1000.0)),
        "cycles" | "cycle" => Some(("cycles", n)),
        _ => None,
    }
}

/// Where a parameter's value comes from, by its source text (docs/profiles.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// `measured: ...` — taken on the machine (`dmasim calibrate` writes these).
    Measured,
    /// A manual, datasheet, paper or kernel file (and `counted:` instruction counts).
    Cited,
    /// `fit: <rows>` — chosen so that the model meets published rows.
    Fitted,
    /// `held: ...` or `assumption: ...` — a value set by judgement and kept fixed.
    Held,
}

impl SourceKind {
    pub fn of(source: &str) -> SourceKind {
        let s = source.trim_start().to_ascii_lowercase();
        if s.starts_with("measured") {
            SourceKind::Measured
        } else if s.starts_with("fit:") || s.starts_with("fit ") || s.starts_with("fitted") {
            SourceKind::Fitted
        } else if s.starts_with("held") || s.starts_with("assum") {
            SourceKind::Held
        } else {
            SourceKind::Cited
        }
    }

    /// What `dmasim platforms NAME` calls it: `fitted`, `held`, or `sourced` for a value read
    /// from a document or measured on the machine, which no judgement chose.
    pub fn provenance(self) -> &'static str {
        match self {
            SourceKind::Fitted => "fitted",
            SourceKind::Held => "held",
            SourceKind::Measured | SourceKind::Cited => "sourced",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Measured => "measured",
            SourceKind::Cited => "cited",
            SourceKind::Fitted => "fitted",
            SourceKind::Held => "held",
        }
    }
}

/// A parameter's resolved value and source, for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    pub key: String,
    /// The value as reports show it, with its unit when it has one (`60 ns`, `64 B`, `true`).
    pub value: String,
    /// The unit as the profile writes it (`ns` or `cycles` for a cost, the registry's unit
    /// otherwise), or empty for a flag or a section given as a whole.
    pub unit: String,
    pub source: String,
}

impl ParamInfo {
    /// The value without its unit, for a listing that gives the unit a column of its own.
    pub fn number(&self) -> &str {
        self.value
            .strip_suffix(self.unit.as_str())
            .filter(|_| !self.unit.is_empty())
            .map_or(self.value.as_str(), str::trim_end)
    }
}

impl Profile {
    pub fn name(&self) -> &str {
        &self.file.platform.name
    }

    pub fn arch(&self) -> Arch {
        self.file.platform.arch
    }

    /// Parse and check a profile.
    pub fn parse(origin: &str, text: &str) -> Result<Profile, InputError> {
        let file: ProfileFile = parse_toml(origin, text)?;
        let model = resolve(origin, text, &file)?;
        let cpus = match &file.platform.cpus {
            None => None,
            Some(p) => {
                let r = Resolver {
                    origin,
                    text,
                    freq_mhz: 1.0,
                };
                let n = r.whole("platform.cpus", p)?;
                Some(n as u32)
            }
        };
        let numa = match &file.numa {
            Some(n) => Some(numa::resolve(origin, text, n)?),
            None => None,
        };
        let acp_mb_s = match &file.acp {
            None => None,
            Some(a) => {
                let r = Resolver {
                    origin,
                    text,
                    freq_mhz: 1.0,
                };
                let bw = r.checked("acp.bandwidth_mb_s", &a.bandwidth_mb_s)?;
                Some(bw)
            }
        };
        Ok(Profile {
            origin: origin.to_string(),
            file,
            model,
            cpus,
            numa,
            acp_mb_s,
            text: text.to_string(),
        })
    }

    /// This profile with one parameter changed from the command line (`--set
    /// platform.KEY=VALUE`): a cost takes a number with its unit (`150ns`, `0.2us`, `800ps`,
    /// `40cycles`), any other parameter its value as the file writes it. The edited profile is
    /// checked as a file would be; an error names the argument. The parameter's source becomes
    /// the argument, so reports say where the value came from.
    pub fn with_set(&self, key: &str, value: &str) -> Result<Profile, InputError> {
        let arg = format!("--set platform.{key}={value}");
        let err = |m: String| InputError::new("<argument>", format!("{arg}: {m}"));
        let mut doc: toml_edit::DocumentMut = self
            .text
            .parse()
            .map_err(|e: toml_edit::TomlError| err(e.message().to_string()))?;
        let path = crate::input::key_parts(key).map_err(err)?;
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let (last, tables) = path.split_last().expect("split gives one part at least");
        let mut item = doc.as_item_mut();
        for t in tables {
            item = item
                .as_table_like_mut()
                .and_then(|tl| tl.get_mut(t))
                .ok_or_else(|| err(self.no_such_key(key)))?;
        }
        let slot = item
            .as_table_like_mut()
            .and_then(|tl| tl.get_mut(last))
            .ok_or_else(|| err(self.no_such_key(key)))?;
        let source = format!("set on the command line: {arg}");
        let mut table = toml_edit::InlineTable::new();
        let old = slot.as_table_like();
        let is_cost = old.is_some_and(|t| t.contains_key("ns") || t.contains_key("cycles"));
        let is_param = old.is_some_and(|t| t.contains_key("value"));
        if is_cost {
            let (unit, n) = parse_cost_arg(value).ok_or_else(|| {
                err("a cost takes a number and its unit: ns, us, ps or cycles (e.g. 150ns)".into())
            })?;
            table.insert(unit, toml_edit::Value::from(n));
        } else if is_param {
            let v = value
                .parse::<toml_edit::Value>()
                .map_err(|_| err("expected a number, or true or false".into()))?;
            table.insert("value", v);
        } else {
            return Err(err(
                "not a parameter of the profile: --set platform.KEY takes a cost (`{ ns = ... }`) or a `{ value = ... }` parameter".into(),
            ));
        }
        table.insert("source", toml_edit::Value::from(source));
        *slot = toml_edit::Item::Value(toml_edit::Value::InlineTable(table));
        let text = doc.to_string();
        Profile::parse(&self.origin, &text).map_err(|e| match &e.key {
            Some(k) if k == key || k.starts_with(&format!("{key}.")) => err(e.message),
            _ => err(e.to_string()),
        })
    }

    /// What `--set platform.KEY` says of a key this profile does not give: the command that
    /// lists the ones it does, named as the user named the profile.
    fn no_such_key(&self, key: &str) -> String {
        let named = self.origin.strip_prefix("builtin:").unwrap_or(&self.origin);
        format!(
            "platform `{}` has no `{key}` (`dmasim platforms {named}` lists its parameters; docs/profiles.md, every key a profile may give)",
            self.name()
        )
    }

    /// The profile's costs by how their values were obtained: (fitted, held), each a list of
    /// keys in profile order. Geometry, counts and properties are not costs and are left out.
    pub fn fitted_and_held(&self) -> (Vec<String>, Vec<String>) {
        let (mut fitted, mut held) = (Vec::new(), Vec::new());
        for p in self.params() {
            let cost = !(p.key.starts_with("platform.")
                || p.key.starts_with("code.")
                || p.key.starts_with("numa.distance")
                || p.key.starts_with("numa.latency_ns")
                || p.key.ends_with("line_bytes")
                || p.key.ends_with("size_kib")
                || p.key.ends_with("ways"));
            if !cost {
                continue;
            }
            match SourceKind::of(&p.source) {
                SourceKind::Fitted => fitted.push(p.key),
                SourceKind::Held => held.push(p.key),
                _ => {}
            }
        }
        (fitted, held)
    }

    /// A built-in profile by name, or a profile file by path. An unknown name lists the known ones.
    pub fn load(name_or_path: &str) -> Result<Profile, InputError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Profile::parse(&format!("builtin:{name_or_path}"), text);
        }
        let path = std::path::Path::new(name_or_path);
        if path.exists() {
            let text = crate::input::read_input(name_or_path, "profile")?;
            return Profile::parse(name_or_path, &text);
        }
        Err(InputError::new(
            "<argument>",
            format!(
                "unknown platform `{name_or_path}` (not a built-in name and no such file); built-in platforms: {}",
                builtin_names().join(", ")
            ),
        ))
    }

    /// Fail unless the profile prices every cache operation `ops` needs.
    pub fn require_ops(&self, ops: &[CacheOp], why: &str) -> Result<(), InputError> {
        for &op in ops {
            if self.model.maint(op).is_none() {
                return Err(InputError {
                    file: self.origin.clone(),
                    line: None,
                    key: Some(format!("cache.{}", op.key())),
                    message: format!("missing, but {why} issues this operation"),
                });
            }
        }
        Ok(())
    }

    /// Fail unless the profile prices `wmb()` (`barrier.wmb`), which `why` issues.
    pub fn require_wmb(&self, why: &str) -> Result<(), InputError> {
        if self.model.wmb_ps.is_none() {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some("barrier.wmb".to_string()),
                message: format!(
                    "missing, but {why} issues wmb() (io-pgtable's map, arm-smmu's invalidations)"
                ),
            });
        }
        Ok(())
    }

    /// Fail unless the profile prices a memory copy (`[memory.copy]`), which `why` performs.
    pub fn require_copy(&self, why: &str) -> Result<(), InputError> {
        if self.model.copy.is_none() {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some("memory.copy".to_string()),
                message: format!("missing, but {why} copies memory (swiotlb bounce buffers)"),
            });
        }
        Ok(())
    }

    /// The costs of `keys` this profile leaves out of `[sw]`, in the order given. The Model charges
    /// them as 0; a caller that runs a stack charging `keys` should say so.
    pub fn unpriced_sw(&self, keys: &[SwKey]) -> Vec<SwKey> {
        keys.iter()
            .copied()
            .filter(|k| !self.model.sw.contains_key(k.name()))
            .collect()
    }

    /// A one-line warning naming the costs of `keys` this profile leaves unpriced (charged as 0 by
    /// `what`), or `None` when it prices them all.
    pub fn unpriced_sw_warning(&self, keys: &[SwKey], what: &str) -> Option<String> {
        let missing = self.unpriced_sw(keys);
        if missing.is_empty() {
            return None;
        }
        let names: Vec<String> = missing.iter().map(|k| format!("sw.{k}")).collect();
        Some(format!(
            "{}: platform `{}` does not price {} software cost{} {what} can charge, so {} 0: {} (`dmasim costs` says what each stands for)",
            self.origin,
            self.name(),
            missing.len(),
            if missing.len() == 1 { "" } else { "s" },
            if missing.len() == 1 {
                "it costs"
            } else {
                "they cost"
            },
            names.join(", ")
        ))
    }

    /// Fail unless the profile prices every software cost of `keys`, which `why` charges. The
    /// error names the first missing key and lists the others.
    pub fn require_sw(&self, keys: &[SwKey], why: &str) -> Result<(), InputError> {
        let missing = self.unpriced_sw(keys);
        let Some(first) = missing.first() else {
            return Ok(());
        };
        let mut message = format!("missing, but {why} charges it ({})", first.decl().function);
        if missing.len() > 1 {
            let rest: Vec<String> = missing[1..].iter().map(|k| format!("sw.{k}")).collect();
            message.push_str(&format!("; also missing: {}", rest.join(", ")));
        }
        Err(InputError {
            file: self.origin.clone(),
            line: None,
            key: Some(format!("sw.{first}")),
            message,
        })
    }

    /// Every parameter the profile gives, with its value and source, in the registry's order
    /// ([`params::PARAMS`]).
    pub fn params(&self) -> Vec<ParamInfo> {
        params::PARAMS.iter().flat_map(|d| d.values(self)).collect()
    }

    /// Fail unless the profile prices `write`s (or reads) of `size` bytes to `t`, which `why`
    /// makes; for cached memory, its line fills too.
    pub fn require_access(
        &self,
        t: crate::hw::memory::MemType,
        write: bool,
        size: u64,
        why: &str,
    ) -> Result<(), InputError> {
        let key = format!(
            "memory_type.{}.{}_{size}",
            t.key(),
            if write { "write" } else { "read" }
        );
        let priced = self
            .model
            .mem
            .as_ref()
            .and_then(|m| m.of(t))
            .and_then(|c| c.cost(write, size))
            .is_some();
        if !priced {
            return Err(InputError {
                file: self.origin.clone(),
                line: None,
                key: Some(key),
                message: format!("missing, but {why} makes these accesses"),
            });
        }
        Ok(())
    }
}

fn maint_spec(c: &CacheSpec, op: CacheOp) -> Option<&MaintSpec> {
    match op {
        CacheOp::Clean => c.clean.as_ref(),
        CacheOp::Inval => c.inval.as_ref(),
        CacheOp::CleanInval => c.clean_inval.as_ref(),
    }
}

#[cfg(test)]
mod tests;
