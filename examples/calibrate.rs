//! Calibrate a profile on this host from the library API and print it (TOML). Stands in for
//! `dmasim calibrate` until the CLI lands.
//!
//! Usage: cargo run --release --example calibrate -- [--buffer 10M] [--entry 4K]
//!        [--iterations 50] [--instruction clflushopt|clwb|dc-cvac|dc-civac] > host.toml

use dmasim::calibrate::{CalibrateOpts, calibrate};
use dmasim::hostbench::Instruction;
use dmasim::input::parse_size;
use std::process::ExitCode;

fn main() -> ExitCode {
    match real_main() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("calibrate: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<String, String> {
    let mut opts = CalibrateOpts {
        buffer_bytes: 10 << 20,
        entry_bytes: 4096,
        iterations: 50,
        instruction: Instruction::default_for_host()
            .ok_or("unsupported: this CPU has no user-space clean-and-invalidate instruction")?,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
        let size = |v: &str| parse_size(v).ok_or(format!("{a}: not a size: `{v}`"));
        match a.as_str() {
            "--buffer" => opts.buffer_bytes = size(&v)?,
            "--entry" => opts.entry_bytes = size(&v)?,
            "--iterations" => {
                opts.iterations = v
                    .parse()
                    .map_err(|_| format!("--iterations: not a count: `{v}`"))?
            }
            "--instruction" => {
                opts.instruction = Instruction::parse(&v).ok_or(format!(
                    "--instruction: `{v}` is not one of clflushopt, clwb, dc-cvac, dc-civac"
                ))?
            }
            _ => return Err(format!("unknown argument `{a}`")),
        }
    }
    calibrate(&opts).map_err(|e| e.to_string())
}
