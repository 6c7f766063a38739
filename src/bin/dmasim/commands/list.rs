//! The listing commands: `dmasim platforms` (and one profile's parameters with `platforms
//! NAME`), `scenarios`, `policies`, `costs`.
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use crate::cli::ListFormat;
use dmasim::hw::sw_costs::{REGISTRY, SwCostDecl};
use dmasim::platform::{self, Profile};
use dmasim::scenario;

/// `dmasim platforms`'s arguments.
#[derive(clap::Args)]
pub struct PlatformsArgs {
    /// A built-in platform's name or a profile file, as `--platform` takes: list every
    /// parameter it gives, with its value, unit, kind (fitted, held or sourced) and source.
    pub name: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

/// `dmasim scenarios`'s arguments.
#[derive(clap::Args)]
pub struct ScenariosArgs {
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

/// `dmasim policies`'s arguments.
#[derive(clap::Args)]
pub struct PoliciesArgs {
    /// Show the presets this platform gets (they can depend on its hardware).
    #[arg(long, default_value = "sm8150")]
    pub platform: String,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

/// `dmasim costs`'s arguments.
#[derive(clap::Args)]
pub struct CostsArgs {
    /// Show what this profile (a built-in name or a profile file) prices each cost at, and the
    /// kind of its source: measured, cited, fitted, held, or unpriced (charged as 0).
    #[arg(long)]
    pub platform: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

pub fn platforms(args: PlatformsArgs, out: &mut impl Write) -> Result<()> {
    let PlatformsArgs { name, format } = args;
    if let Some(name) = name {
        let p = Profile::load(&name)?;
        match format {
            ListFormat::Table => write!(out, "{}", params_table(&p))?,
            ListFormat::Json => print_json(out, &params_json(&p))?,
        }
        return Ok(());
    }
    match format {
        ListFormat::Table => {
            for (name, desc) in platform::builtin_list() {
                writeln!(out, "{name:<16} {desc}")?;
            }
        }
        ListFormat::Json => {
            let list: Vec<serde_json::Value> = platform::builtin_list()
                .into_iter()
                .map(|(name, desc)| serde_json::json!({ "name": name, "description": desc }))
                .collect();
            print_json(out, &serde_json::json!({ "platforms": list }))?;
        }
    }
    Ok(())
}

/// A parameter's kind as `dmasim platforms NAME` names it: how its value was obtained.
fn provenance(i: &platform::ParamInfo) -> &'static str {
    platform::SourceKind::of(&i.source).provenance()
}

/// Every parameter `p` gives, in the registry's order: key, value, unit, kind and source, then
/// a count per kind. A long source stays on one line, so the table can be searched with grep.
fn params_table(p: &Profile) -> String {
    let params = p.params();
    let width = |f: &dyn Fn(&platform::ParamInfo) -> usize, head: &str| {
        params.iter().map(f).chain([head.len()]).max().unwrap_or(0)
    };
    let kw = width(&|i| i.key.len(), "KEY");
    // A matrix or a section's summary would widen every row: it gets a line of its own below.
    const WIDE: usize = 12;
    let vw = width(&|i| i.number().len().min(WIDE), "VALUE");
    let uw = width(&|i| i.unit.len(), "UNIT");
    let mut out = format!(
        "{}: {}\n{}\n\n{:<kw$}  {:>vw$}  {:<uw$}  {:<7}  SOURCE\n",
        p.name(),
        p.file.platform.description,
        p.origin,
        "KEY",
        "VALUE",
        "UNIT",
        "KIND"
    );
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for i in &params {
        let kind = provenance(i);
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
        let (value, below) = match i.number() {
            v if v.len() > WIDE => ("", Some(v)),
            v => (v, None),
        };
        out.push_str(&format!(
            "{:<kw$}  {value:>vw$}  {:<uw$}  {kind:<7}  {}\n",
            i.key, i.unit, i.source
        ));
        if let Some(v) = below {
            out.push_str(&format!("{:<kw$}    = {v}\n", ""));
        }
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    out.push_str(&format!(
        "\n{} parameters: {}\n",
        params.len(),
        counts.join(", ")
    ));
    out
}

fn params_json(p: &Profile) -> serde_json::Value {
    let params: Vec<serde_json::Value> = p
        .params()
        .iter()
        .map(|i| {
            serde_json::json!({
                "key": i.key,
                "value": i.number(),
                "unit": i.unit,
                "kind": provenance(i),
                "source": i.source,
            })
        })
        .collect();
    serde_json::json!({
        "platform": p.name(),
        "description": p.file.platform.description,
        "origin": p.origin,
        "params": params,
    })
}

pub fn scenarios(args: ScenariosArgs, out: &mut impl Write) -> Result<()> {
    let ScenariosArgs { format } = args;
    let list = scenario::builtin_list();
    match format {
        ListFormat::Table => {
            let w =
                |f: &dyn Fn(&scenario::BuiltinInfo) -> usize| list.iter().map(f).max().unwrap_or(0);
            let (nw, kw, pw) = (
                w(&|i| i.name.len()),
                w(&|i| i.kind.len()),
                w(&|i| i.platform.len()),
            );
            for i in &list {
                writeln!(
                    out,
                    "{:<nw$}  {:<kw$}  {:<pw$}  {:<6} {}",
                    i.name, i.kind, i.platform, i.kernel, i.description
                )?;
            }
        }
        ListFormat::Json => {
            print_json(out, &serde_json::json!({ "scenarios": list }))?;
        }
    }
    Ok(())
}

pub fn policies(args: PoliciesArgs, out: &mut impl Write) -> Result<()> {
    let PoliciesArgs { platform, format } = args;
    let profile = Profile::load(&platform)?;
    match format {
        ListFormat::Table => write!(out, "{}", dmasim::report::policies_table(&profile))?,
        ListFormat::Json => print_json(out, &dmasim::report::policies_json(&profile))?,
    }
    Ok(())
}

pub fn costs(args: CostsArgs, out: &mut impl Write) -> Result<()> {
    let CostsArgs { platform, format } = args;
    let priced = match &platform {
        Some(p) => Some(Priced::of(&Profile::load(p)?)),
        None => None,
    };
    match (format, &priced) {
        (ListFormat::Table, None) => write!(out, "{}", costs_table())?,
        (ListFormat::Table, Some(p)) => write!(out, "{}", priced_table(p))?,
        (ListFormat::Json, _) => print_json(out, &costs_json(priced.as_ref()))?,
    }
    Ok(())
}

/// One profile's price of each `[sw]` cost of the registry: its value as written and its source,
/// or `None` where the profile leaves it unpriced.
struct Priced {
    platform: String,
    rows: Vec<(&'static SwCostDecl, Option<platform::ParamInfo>)>,
}

impl Priced {
    fn of(p: &Profile) -> Priced {
        let mut given: std::collections::BTreeMap<String, platform::ParamInfo> = p
            .params()
            .into_iter()
            .filter_map(|i| Some((i.key.strip_prefix("sw.")?.to_string(), i)))
            .collect();
        Priced {
            platform: p.name().to_string(),
            rows: REGISTRY.iter().map(|d| (d, given.remove(d.name))).collect(),
        }
    }

    /// The kind of a row's source, as `--sensitivity` names it, or "unpriced".
    fn kind(info: Option<&platform::ParamInfo>) -> &'static str {
        info.map_or("unpriced", |i| platform::SourceKind::of(&i.source).name())
    }
}

/// The registry as one profile prices it: one row per `[sw]` key, then a count per source kind.
fn priced_table(p: &Priced) -> String {
    fn value(i: &Option<platform::ParamInfo>) -> &str {
        i.as_ref().map_or("-", |i| i.value.as_str())
    }
    let kw = p.rows.iter().map(|(d, _)| d.name.len()).max().unwrap_or(0);
    let vw = p
        .rows
        .iter()
        .map(|(_, i)| value(i).len())
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "{:<kw$}  {:<vw$}  {:<8}  SOURCE (platform `{}`)\n",
        "KEY ([sw])", "VALUE", "KIND", p.platform
    );
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for (d, i) in &p.rows {
        let kind = Priced::kind(i.as_ref());
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
        let source = i
            .as_ref()
            .map_or("charged as 0 wherever a run reaches it", |i| {
                i.source.as_str()
            });
        out.push_str(&format!(
            "{:<kw$}  {:<vw$}  {kind:<8}  {source}\n",
            d.name,
            value(i)
        ));
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    out.push_str(&format!(
        "\n{} costs: {}\n",
        p.rows.len(),
        counts.join(", ")
    ));
    out
}

/// The software-cost registry as a table: one row per `[sw]` key.
fn costs_table() -> String {
    let modules = |d: &SwCostDecl| -> String {
        d.layers
            .iter()
            .map(|l| l.module())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kw = REGISTRY.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let fw = REGISTRY.iter().map(|d| d.function.len()).max().unwrap_or(0);
    let mw = REGISTRY.iter().map(|d| modules(d).len()).max().unwrap_or(0);
    let mut out = format!(
        "{:<kw$}  {:<fw$}  {:<mw$}  DESCRIPTION\n",
        "KEY ([sw])", "KERNEL FUNCTION", "MODULES"
    );
    for d in REGISTRY {
        out.push_str(&format!(
            "{:<kw$}  {:<fw$}  {:<mw$}  {}\n",
            d.name,
            d.function,
            modules(d),
            d.description
        ));
    }
    out
}

fn costs_json(priced: Option<&Priced>) -> serde_json::Value {
    let costs: Vec<serde_json::Value> = REGISTRY
        .iter()
        .enumerate()
        .map(|(n, d)| {
            let mut row = serde_json::json!({
                "key": d.name,
                "function": d.function,
                "layers": d.layers.iter().map(|l| l.name()).collect::<Vec<_>>(),
                "modules": d.layers.iter().map(|l| l.module()).collect::<Vec<_>>(),
                "description": d.description,
            });
            if let Some(p) = priced {
                let info = p.rows[n].1.as_ref();
                row["value"] = info.map(|i| i.value.clone()).into();
                row["source"] = info.map(|i| i.source.clone()).into();
                row["kind"] = Priced::kind(info).into();
            }
            row
        })
        .collect();
    match priced {
        Some(p) => serde_json::json!({ "platform": p.platform, "sw_costs": costs }),
        None => serde_json::json!({ "sw_costs": costs }),
    }
}
