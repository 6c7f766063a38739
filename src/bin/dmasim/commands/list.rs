//! The listing commands: `dmasim platforms`, `scenarios`, `policies`, `costs`.
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
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

pub fn platforms(args: PlatformsArgs, out: &mut impl Write) -> Result<()> {
    let PlatformsArgs { format } = args;
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
    let CostsArgs { format } = args;
    match format {
        ListFormat::Table => write!(out, "{}", costs_table())?,
        ListFormat::Json => print_json(out, &costs_json())?,
    }
    Ok(())
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

fn costs_json() -> serde_json::Value {
    let costs: Vec<serde_json::Value> = REGISTRY
        .iter()
        .map(|d| {
            serde_json::json!({
                "key": d.name,
                "function": d.function,
                "layers": d.layers.iter().map(|l| l.name()).collect::<Vec<_>>(),
                "modules": d.layers.iter().map(|l| l.module()).collect::<Vec<_>>(),
                "description": d.description,
            })
        })
        .collect();
    serde_json::json!({ "sw_costs": costs })
}
