//! Run the host measurement from the library API and print the report as JSON (or a table with
//! `--table`). Stands in for `dmasim hostbench` until the CLI lands; `tools/compare-hostbench.sh`
//! drives it beside the C reference.
//!
//! Usage: cargo run --release --example hostbench -- [--buffer 10M] [--entry 4K]
//!        [--iterations 50] [--instruction clflushopt|clwb|dc-cvac|dc-civac]
//!        [--profile NAME|PATH] [--table]

use dmasim::hostbench::{HostbenchOpts, Instruction, render_table, run_with_model};
use dmasim::input::parse_size;
use dmasim::platform::Profile;
use std::process::ExitCode;

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hostbench: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<(), String> {
    let mut buffer = 10u64 << 20;
    let mut entry = 4096u64;
    let mut iterations = 50u32;
    let mut instruction = Instruction::default_for_host();
    let mut profile = None;
    let mut table = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--buffer" => {
                let v = val()?;
                buffer = parse_size(&v).ok_or(format!("--buffer: not a size: `{v}`"))?;
            }
            "--entry" => {
                let v = val()?;
                entry = parse_size(&v).ok_or(format!("--entry: not a size: `{v}`"))?;
            }
            "--iterations" => {
                let v = val()?;
                iterations = v
                    .parse()
                    .map_err(|_| format!("--iterations: not a count: `{v}`"))?;
            }
            "--instruction" => {
                let v = val()?;
                instruction = Some(Instruction::parse(&v).ok_or(format!(
                    "--instruction: `{v}` is not one of clflushopt, clwb, dc-cvac, dc-civac"
                ))?);
            }
            "--profile" => {
                let v = val()?;
                profile = Some(Profile::load(&v).map_err(|e| e.to_string())?);
            }
            "--table" => table = true,
            _ => return Err(format!("unknown argument `{a}`")),
        }
    }
    let instruction = instruction
        .ok_or("unsupported: this CPU has no user-space clean-and-invalidate instruction")?;
    let opts = HostbenchOpts {
        buffer_bytes: buffer,
        entry_bytes: entry,
        iterations,
        instruction,
    };
    let r = run_with_model(&opts, profile.as_ref()).map_err(|e| e.to_string())?;
    if table {
        print!("{}", render_table(&r));
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}
