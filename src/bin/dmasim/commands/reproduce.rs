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
    let chosen: Vec<&reproduce::Experiment> = match &experiment {
        Some(n) => vec![reproduce::find(n)?],
        None => reproduce::EXPERIMENTS.iter().collect(),
    };
    let mut reports = Vec::new();
    for e in chosen {
        reports.push((e.run)()?);
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
