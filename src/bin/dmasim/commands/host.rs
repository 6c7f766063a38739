//! The host commands: `dmasim hostbench` measures this machine's cache maintenance, and
//! `dmasim calibrate` fits a profile to it.
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use crate::cli::{HostGeometry, ListFormat};
use dmasim::hostbench::HostbenchOpts;
use dmasim::input::InputError;
use dmasim::platform::Profile;

/// `dmasim hostbench`'s arguments.
#[derive(clap::Args)]
pub struct HostbenchArgs {
    #[command(flatten)]
    pub geometry: HostGeometry,
    /// Also predict the medians from a profile (e.g. one written by `dmasim calibrate`).
    #[arg(long)]
    pub platform: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

/// `dmasim calibrate`'s arguments.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub geometry: HostGeometry,
    /// Write the profile here instead of standard output.
    #[arg(long, short)]
    pub output: Option<String>,
    /// table: the profile (TOML); json: a document with the measurements, the fit and the
    /// profile text.
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

pub fn hostbench(args: HostbenchArgs, out: &mut impl Write) -> Result<()> {
    let HostbenchArgs {
        geometry,
        platform,
        format,
    } = args;
    let opts = HostbenchOpts {
        buffer_bytes: geometry.buffer,
        entry_bytes: geometry.entry,
        iterations: geometry.iterations,
        instruction: geometry.instruction()?,
    };
    let profile = platform.as_deref().map(Profile::load).transpose()?;
    let r = dmasim::hostbench::run_with_model(&opts, profile.as_ref())?;
    match format {
        ListFormat::Table => write!(out, "{}", dmasim::hostbench::render_table(&r))?,
        ListFormat::Json => print_json(out, &serde_json::to_value(&r)?)?,
    }
    Ok(())
}

pub fn calibrate(args: CalibrateArgs, out: &mut impl Write) -> Result<()> {
    let CalibrateArgs {
        geometry,
        output,
        format,
    } = args;
    let instruction = match &geometry.instruction {
        Some(_) => Some(geometry.instruction()?),
        None => None,
    };
    let opts = dmasim::calibrate::CalibrateOpts {
        buffer_bytes: geometry.buffer,
        entry_bytes: geometry.entry,
        iterations: geometry.iterations,
        instruction,
    };
    let c = dmasim::calibrate::measure_host(&opts)?;
    for w in dmasim::calibrate::warnings(&c) {
        note(format_args!("warning: {w}"));
    }
    let text = dmasim::calibrate::render_profile(&c);
    if let Some(path) = &output {
        std::fs::write(path, &text)
            .map_err(|e| InputError::new(path, format!("cannot write profile: {e}")))?;
        info(format_args!("wrote {path}"));
    }
    match format {
        ListFormat::Json => print_json(out, &dmasim::calibrate::json(&c))?,
        _ if output.is_none() => write!(out, "{text}")?,
        _ => {}
    }
    Ok(())
}
