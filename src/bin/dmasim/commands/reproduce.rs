//! `dmasim reproduce`: the published experiments, published vs model row by row.
//!
//! Kernel counterpart: none.

use crate::ui::*;
use anyhow::Result;
use std::io::Write;

use crate::cli::ListFormat;
use dmasim::reproduce;

/// `dmasim reproduce`'s arguments.
#[derive(clap::Args)]
pub struct ReproduceArgs {
    /// One experiment (default: all). `--list` shows them.
    pub experiment: Option<String>,
    #[arg(long)]
    pub list: bool,
    /// A profile `dmasim fit` wrote: its measured rows beside what it predicts, each fitted
    /// or a prediction, instead of the published experiments.
    #[arg(long, conflicts_with_all = ["experiment", "list"])]
    pub platform: Option<String>,
    /// With --platform: more measurements (as `dmasim fit` reads them) to predict.
    #[arg(long, requires = "platform")]
    pub rows: Vec<String>,
    /// Also write a report of published vs model per row with the error: with a `.html`
    /// name a self-contained HTML page (plots and tables), otherwise an SVG of the plots.
    #[arg(long)]
    pub plot: Option<String>,
    #[arg(long, value_enum, default_value = "table")]
    pub format: ListFormat,
}

pub fn reproduce(args: ReproduceArgs, out: &mut impl Write) -> Result<()> {
    let ReproduceArgs {
        experiment,
        list,
        platform,
        rows,
        plot,
        format,
    } = args;
    if list {
        let w = reproduce::EXPERIMENTS
            .iter()
            .map(|e| e.name.len())
            .max()
            .unwrap_or(0);
        for e in reproduce::EXPERIMENTS {
            writeln!(out, "{:<w$}  {}", e.name, e.summary)?;
        }
        return Ok(());
    }
    let mut reports = Vec::new();
    if let Some(p) = &platform {
        let mut extra = Vec::new();
        for f in &rows {
            let text = dmasim::input::read_input(f, "measurements")?;
            extra.extend(dmasim::fit::rows::read(f, &text)?);
        }
        reports.push(dmasim::fit::reproduce(p, extra).map_err(|e| match e {
            dmasim::fit::FitError::Input(i) => anyhow::Error::from(i),
            dmasim::fit::FitError::Run(r) => super::run_error(r),
        })?);
    } else {
        let chosen: Vec<&reproduce::Experiment> = match &experiment {
            Some(n) => vec![reproduce::find(n)?],
            None => reproduce::EXPERIMENTS.iter().collect(),
        };
        for e in chosen {
            reports.push((e.run)()?);
        }
    }
    if let Some(path) = &plot {
        let page = reproduce::render_html(&reports);
        let doc = if is_html(path) {
            page
        } else {
            reproduce::render_svg(&reports)
        };
        write_plot(path, &doc)?;
    }
    match format {
        ListFormat::Table => {
            let tables: Vec<String> = reports.iter().map(reproduce::render_table).collect();
            write!(out, "{}", tables.join("\n"))?;
        }
        ListFormat::Json => {
            let v = if reports.len() == 1 {
                serde_json::to_value(&reports[0])?
            } else {
                serde_json::json!({ "experiments": reports })
            };
            print_json(out, &v)?;
        }
    }
    Ok(())
}
