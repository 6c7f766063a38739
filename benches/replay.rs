//! `dmasim replay` at scale: a generated trace of 10 M DMA API calls (four devices mapping,
//! syncing and unmapping 2 KB receive buffers, the 6.18 print format) read, checked, paired and
//! made on the Dimensity 9500 model, both reads of the trace included, in a child process of its
//! own so its peak resident set (`VmHWM`, Linux only) is its alone. A trace of 1 M calls is run
//! the same way beside it: memory that grew with the trace would show as the difference.
//!
//! Targets: at least 1 M calls a second on one core, parse and model together; peak memory
//! bounded by the live mappings, not by the trace (at most 64 MiB). `cargo bench --bench replay`.

use dmasim::scenario::{Outcome, Scenario, execute};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const DEVICES: [&str; 4] = ["0000:01:00.0", "0000:01:00.1", "1c0e000.isp", "a600000.usb"];

fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Write a trace of `calls` calls: per device and buffer, map, sync for the CPU, unmap.
fn generate(path: &Path, calls: u64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(out, "# tracer: nop").unwrap();
    let (mut n, mut us) = (0u64, 1_000_000_000u64);
    while n < calls {
        for (i, d) in DEVICES.iter().enumerate() {
            let a = 0x8000_0000 + i as u64 * 0x100_0000 + (n / 12 % 1024) * 4096;
            let mut line = |event: &str, fields: String| {
                let (s, f) = (us / 1_000_000, us % 1_000_000);
                writeln!(
                    out,
                    "  ksoftirqd/2-22  [002] ..s1. {s}.{f:06}: {event}: {d} {fields}"
                )
                .unwrap();
                us += 1;
            };
            line(
                "dma_map_phys",
                format!("dir=FROM_DEVICE dma_addr={a:x} size=2048 phys_addr={a:x} attrs="),
            );
            line(
                "dma_sync_single_for_cpu",
                format!("dir=FROM_DEVICE dma_addr={a:x} size=2048"),
            );
            line(
                "dma_unmap_phys",
                format!("dir=FROM_DEVICE dma_addr={a:x} size=2048 attrs=SKIP_CPU_SYNC"),
            );
            n += 3;
        }
    }
}

/// In the child: replay the trace at `path` and print calls, seconds and peak KiB.
fn child(path: &str) {
    let t0 = Instant::now();
    let s = Scenario::load(path).unwrap();
    let Ok(Outcome::Replay(r)) = execute(&s) else {
        panic!("a replay");
    };
    let secs = t0.elapsed().as_secs_f64();
    let calls: u64 = r
        .devices
        .iter()
        .flat_map(|d| d.calls.iter())
        .map(|c| c.count)
        .sum();
    println!("{calls} {secs} {}", vm_hwm_kib());
}

fn run(path: &Path) -> (u64, f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<&str> = text.split_whitespace().collect();
    (
        v[0].parse().unwrap(),
        v[1].parse().unwrap(),
        v[2].parse().unwrap(),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1]);
    }
    // Under `cargo test --benches` (divan's `--test`), a token run: the generator and the
    // child work, and nothing is timed.
    let quick = args.iter().any(|a| a == "--test");
    let dir: PathBuf =
        std::env::temp_dir().join(format!("dmasim-bench-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sizes: &[u64] = if quick {
        &[1_200]
    } else {
        &[1_000_000, 10_000_000]
    };
    println!("replay of a generated trace (2 reads, checks, pairing, the model), one process each");
    println!(
        "{:>12} {:>10} {:>14} {:>12}",
        "calls", "seconds", "calls/s", "peak MiB"
    );
    for &n in sizes {
        let path = dir.join(format!("trace-{n}.txt"));
        generate(&path, n);
        let (calls, secs, kib) = run(&path);
        assert!(calls >= n, "{calls} of {n} calls replayed");
        println!(
            "{calls:>12} {secs:>10.2} {:>14.0} {:>12.1}",
            calls as f64 / secs,
            kib as f64 / 1024.0
        );
        std::fs::remove_file(&path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
