//! `dmasim fit`: a platform profile fitted to a board's own measurements ([`dmasim::fit`]).
//!
//! Kernel counterpart: none — it reads what tools/dma/dma_map_benchmark and the
//! `function_graph` tracer printed on the board.

use crate::cli::ListFormat;
use crate::ui::*;
use anyhow::Result;
use dmasim::fit::{self, FitError};
use dmasim::input::InputError;
use std::io::Write;

/// `dmasim fit`'s arguments.
#[derive(clap::Args)]
pub struct FitArgs {
    /// Measurement files: dma_map_benchmark's output, a function_graph capture taken while it
    /// ran, or a CSV `experiment,options,metric,value` (docs/fit.md).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// The base profile: a built-in name (`dmasim platforms`) or a profile file. Its costs are
    /// the fit's starting point, and everything not fitted is kept from it.
    #[arg(long)]
    pub platform: String,
    /// The kernel release the board ran (default: the latest modelled).
    #[arg(long)]
    pub kernel: Option<String>,
    /// The benchmark's device sits behind the platform's IOMMU.
    #[arg(long)]
    pub iommu: bool,
    /// The benchmark's device is cache-coherent.
    #[arg(long)]
    pub coherent: bool,
    /// A profile cost to fit (repeatable), e.g. sw.iommu_dma_map; default: every cost the runs
    /// use that the base profile gives as one number.
    #[arg(long = "param")]
    pub params: Vec<String>,
    /// Write the fitted profile here.
    #[arg(long, short = 'o')]
    pub output: Option<String>,
    /// The written profile's platform name (default: the base's, with `-fit`).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

pub fn fit(args: FitArgs, out: &mut impl Write) -> Result<()> {
    let kernel = match &args.kernel {
        Some(k) => dmasim::policy::KernelVersion::parse(k)
            .map_err(|m| InputError::new("<argument>", format!("--kernel {k}: {m}")))?,
        None => dmasim::policy::LATEST,
    };
    let mut rows = Vec::new();
    for f in &args.files {
        let text = dmasim::input::read_input(f, "measurements")?;
        rows.extend(fit::rows::read(f, &text)?);
    }
    let req = fit::Request {
        platform: args.platform.clone(),
        kernel,
        iommu: args.iommu,
        coherent: args.coherent,
        params: args.params.clone(),
        name: args.name.clone(),
    };
    let fitted = fit::fit(&req, rows).map_err(|e| match e {
        FitError::Input(i) => anyhow::Error::from(i),
        FitError::Run(r) => super::run_error(r),
    })?;
    if let Some(path) = &args.output {
        std::fs::write(path, &fitted.profile)
            .map_err(|e| InputError::new(path, format!("cannot write the profile: {e}")))?;
        info(format_args!("wrote {path}"));
    }
    match args.format {
        ListFormat::Table => write!(out, "{}", fit::table(&fitted))?,
        ListFormat::Json => print_json(out, &fit::json(&fitted))?,
    }
    Ok(())
}
