//! `dmasim replay` at scale, in shapes of generated trace (the 6.18 print format), each of
//! 1 M and 10 M DMA API calls read, checked, paired and made, both reads of the trace included,
//! in a child process of its own so its peak resident set (`VmHWM`, Linux only) is its alone:
//! memory that grew with the trace would show as the difference between the two sizes.
//! - four devices mapping, syncing and unmapping 2 KB receive buffers, on the Dimensity 9500;
//! - a busy system's (on the SM8150, whose MMU-500 the NVMe is behind): a NIC's page pool of
//!   1024 live pages synced per packet, NVMe lists completing out of order, AHCI and USB, a
//!   camera's lists of up to 160 entries, one in eight capped at the 128 a line prints; every
//!   map of fresh memory. It holds no misuse, so any finding fails the bench;
//! - the realistic shape from 8 CPUs (each round of its loop on the next), 1 M calls replayed
//!   on its 8 CPUs: the many-CPU engine's rate beside the one-CPU replay's.
//!
//! Targets: at least 1 M calls a second on one core, parse and model together; peak memory
//! bounded by the live mappings, not by the trace (at most 64 MiB). `cargo bench --bench replay`;
//! `--write-realistic PATH CALLS` only writes the realistic trace, for a profiler.

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

/// A small deterministic generator (xorshift64*): the same trace every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Writes the lines of a realistic trace, counting them.
struct Realistic<W: Write> {
    /// How many CPUs the rounds rotate over (1: each call on the CPU its kind names).
    cpus: u32,
    /// The loop's round.
    round: u64,
    out: W,
    us: u64,
    lines: u64,
    rng: Rng,
    /// The next fresh physical page: every map takes new memory, as a busy system's do.
    page: u64,
    /// The next IOVA, handed out downwards as iommu-dma's allocator does.
    iova: u64,
}

/// How many pages the fresh physical addresses cycle through (64 GiB): more than 10 M calls
/// take (about 14 pages every 30 calls). A page that came round while a long-lived page-pool
/// page still held it would be a real overlap, which the checks rightly report.
const PAGES: u64 = 1 << 24;
const NIC: &str = "0000:01:00.0";
const NVME: &str = "0000:04:00.0";
const AHCI: &str = "0000:00:17.0";
const USB: &str = "a600000.usb";
const CAMERA: &str = "1c0e000.isp";

impl<W: Write> Realistic<W> {
    fn line(&mut self, task: &str, cpu: u32, event: &str, dev: &str, fields: &str) {
        let (s, f) = (self.us / 1_000_000, self.us % 1_000_000);
        // Spread: each round of the loop on the next of `cpus` CPUs, as interrupts and
        // softirqs move between a busy system's CPUs.
        let cpu = if self.cpus > 1 {
            (cpu + self.round as u32) % self.cpus
        } else {
            cpu
        };
        writeln!(
            self.out,
            "{task:>16} [{cpu:03}] ..s1. {s}.{f:06}: {event}: {dev} {fields}"
        )
        .unwrap();
        self.us += 1;
        self.lines += 1;
    }

    fn fresh_page(&mut self) -> u64 {
        let p = 0x1_0000_0000 + (self.page % PAGES) * 4096;
        self.page += 1;
        p
    }

    fn fresh_iova(&mut self, pages: u64) -> u64 {
        if self.iova < 0x1000_0000 + pages * 4096 {
            self.iova = 0xffff_f000;
        }
        self.iova -= pages * 4096;
        self.iova
    }

    /// A page-pool page mapped for the NIC's receive ring.
    fn nic_map(&mut self) -> u64 {
        let p = self.fresh_page();
        let f = format!(
            "dir=FROM_DEVICE dma_addr={p:x} size=4096 phys_addr={p:x} attrs=SKIP_CPU_SYNC|WEAK_ORDERING"
        );
        self.line("ksoftirqd/2-22", 2, "dma_map_phys", NIC, &f);
        p
    }

    /// One received packet: the CPU reads the frame, the page goes back to the ring.
    fn nic_packet(&mut self, pool: &mut [u64]) {
        let i = self.rng.below(pool.len() as u64) as usize;
        let (p, len) = (pool[i] + 64, 64 + self.rng.below(1472));
        let f = format!("dir=FROM_DEVICE dma_addr={p:x} size={len}");
        self.line("ksoftirqd/2-22", 2, "dma_sync_single_for_cpu", NIC, &f);
        // One page in 64 leaves the pool (the stack kept it) and a fresh one replaces it.
        if self.rng.below(64) == 0 {
            let f = format!(
                "dir=FROM_DEVICE dma_addr={:x} size=4096 attrs=SKIP_CPU_SYNC",
                pool[i]
            );
            self.line("ksoftirqd/2-22", 2, "dma_unmap_phys", NIC, &f);
            pool[i] = self.nic_map();
        } else {
            let f = format!("dir=FROM_DEVICE dma_addr={p:x} size=1536");
            self.line("ksoftirqd/2-22", 2, "dma_sync_single_for_device", NIC, &f);
        }
    }

    /// An NVMe read behind the IOMMU: a list of 1-8 pages mapped into one IOVA range.
    fn nvme_submit(&mut self, inflight: &mut Vec<(u64, Vec<u64>)>) {
        let n = 1 + self.rng.below(8);
        let phys: Vec<u64> = (0..n).map(|_| self.fresh_page()).collect();
        let iova = self.fresh_iova(n);
        let list = |v: &[u64]| {
            let s: Vec<String> = v.iter().map(|a| format!("0x{a:x}")).collect();
            s.join(",")
        };
        let f = format!(
            "dir=FROM_DEVICE nents={n}/{n} ents=1/1 dma_addrs={{0x{iova:x}}} sizes={{0x{:x}}} phys_addrs={{{}}} attrs=",
            n * 4096,
            list(&phys)
        );
        self.line("fio-4411", 5, "dma_map_sg", NVME, &f);
        inflight.push((iova, phys));
    }

    /// An NVMe completion, of any command in flight: they complete out of order.
    fn nvme_complete(&mut self, inflight: &mut Vec<(u64, Vec<u64>)>) {
        let i = self.rng.below(inflight.len() as u64) as usize;
        let (_, phys) = inflight.swap_remove(i);
        let s: Vec<String> = phys.iter().map(|a| format!("0x{a:x}")).collect();
        let f = format!("dir=FROM_DEVICE phys_addrs={{{}}} attrs=", s.join(","));
        self.line("irq/88-nvme-551", 3, "dma_unmap_sg", NVME, &f);
    }

    /// A SATA write of 4-64 KiB, direct-mapped, mapped and unmapped around the command.
    fn ahci_io(&mut self) {
        let size = 4096 << self.rng.below(5);
        let p = self.fresh_page();
        self.page += size / 4096 - 1;
        let f = format!("dir=TO_DEVICE dma_addr={p:x} size={size} phys_addr={p:x} attrs=");
        self.line("kworker/1:1H-201", 1, "dma_map_phys", AHCI, &f);
        let f = format!("dir=TO_DEVICE dma_addr={p:x} size={size} attrs=");
        self.line("irq/40-ahci-310", 1, "dma_unmap_phys", AHCI, &f);
    }

    /// A USB bulk transfer of 512 bytes.
    fn usb_io(&mut self) {
        let p = self.fresh_page() + 0x200;
        let f = format!("dir=TO_DEVICE dma_addr={p:x} size=512 phys_addr={p:x} attrs=");
        self.line("kworker/0:2-88", 0, "dma_map_phys", USB, &f);
        let f = format!("dir=TO_DEVICE dma_addr={p:x} size=512 attrs=");
        self.line("irq/120-dwc3-402", 0, "dma_unmap_phys", USB, &f);
    }

    /// A camera frame: a list of 96-160 pages; one in eight is longer than the 128 entries
    /// `dma_map_sg` prints, so its line is capped and its unmap makes it whole.
    fn camera_frame(&mut self) {
        let n = if self.rng.below(8) == 0 {
            129 + self.rng.below(32)
        } else {
            96 + self.rng.below(33)
        };
        let phys: Vec<u64> = (0..n).map(|_| self.fresh_page()).collect();
        let hex = |v: &[u64]| {
            let s: Vec<String> = v.iter().map(|a| format!("0x{a:x}")).collect();
            s.join(",")
        };
        let sizes = |k: usize| vec!["0x1000"; k].join(",");
        let shown = phys.len().min(128);
        let nents = if phys.len() > 128 {
            format!("nents={shown}/{n} ents={shown}/{n} [TRUNCATED]")
        } else {
            format!("nents={n}/{n} ents={n}/{n}")
        };
        let f = format!(
            "dir=FROM_DEVICE {nents} dma_addrs={{{}}} sizes={{{}}} phys_addrs={{{}}} attrs=",
            hex(&phys[..shown]),
            sizes(shown),
            hex(&phys[..shown])
        );
        self.line("kworker/u16:2-140", 6, "dma_map_sg", CAMERA, &f);
        let f = format!(
            "dir=FROM_DEVICE dma_addrs={{{}}} sizes={{{}}}",
            hex(&phys),
            sizes(phys.len())
        );
        self.line("kworker/u16:2-140", 6, "dma_sync_sg_for_cpu", CAMERA, &f);
        let f = format!("dir=FROM_DEVICE phys_addrs={{{}}} attrs=", hex(&phys));
        self.line("kworker/u16:2-140", 6, "dma_unmap_sg", CAMERA, &f);
    }
}

/// Write a trace of at least `calls` calls shaped as a busy system's: a NIC's page pool of
/// 1024 live pages synced per packet (one in 64 recycled to a fresh page), NVMe lists behind
/// the IOMMU completing out of order (up to 32 in flight), AHCI and USB transfers, and a
/// camera's long lists, one in eight capped at 128 printed entries. Every map takes fresh
/// memory.
fn generate_realistic(path: &Path, calls: u64) {
    generate_realistic_on(path, calls, 1);
}

/// [`generate_realistic`] with each round of the loop on the next of 8 CPUs: an NVMe list may
/// complete on another CPU than it was submitted on, a page go back to the pool on another.
fn generate_realistic_8(path: &Path, calls: u64) {
    generate_realistic_on(path, calls, 8);
}

fn generate_realistic_on(path: &Path, calls: u64, cpus: u32) {
    let out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut g = Realistic {
        cpus,
        round: 0,
        out,
        us: 1_000_000_000,
        lines: 0,
        rng: Rng(0x9e37_79b9_7f4a_7c15),
        page: 0,
        iova: 0xffff_f000,
    };
    writeln!(g.out, "# tracer: nop").unwrap();
    let mut pool: Vec<u64> = (0..1024).map(|_| g.nic_map()).collect();
    let mut inflight = Vec::new();
    let mut round = 0u64;
    while g.lines < calls {
        for _ in 0..8 {
            g.nic_packet(&mut pool);
        }
        if inflight.len() < 32 {
            g.nvme_submit(&mut inflight);
        }
        if inflight.len() > 16 || g.rng.below(2) == 0 {
            g.nvme_complete(&mut inflight);
        }
        g.ahci_io();
        g.usb_io();
        if round.is_multiple_of(64) {
            g.camera_frame();
        }
        round += 1;
        g.round = round;
    }
}

/// In the child: replay the trace at `path` on `platform` on `cpus` (`trace` or 1) and print
/// calls, seconds and peak KiB.
fn child(path: &str, platform: &str, cpus: &str) {
    let t0 = Instant::now();
    let cpus = if cpus == "1" { "1" } else { "\"trace\"" };
    let s = Scenario::load_on(path, &[format!("workload.cpus={cpus}")], Some(platform)).unwrap();
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
    // The generated traces hold no misuse: a finding would be the checks' false alarm.
    if let Some(f) = r.findings.kept.iter().find(|f| f.kind.fails()) {
        panic!("a misuse-free trace gave a finding: {f:?}");
    }
    println!("{calls} {secs} {}", vm_hwm_kib());
}

fn run(path: &Path, platform: &str, cpus: &str) -> (u64, f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .arg(path)
        .arg(platform)
        .arg(cpus)
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
        return child(&args[i + 1], &args[i + 2], &args[i + 3]);
    }
    if let Some(i) = args.iter().position(|a| a == "--write-realistic") {
        return generate_realistic(Path::new(&args[i + 1]), args[i + 2].parse().unwrap());
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
    type Writer = fn(&Path, u64);
    // The realistic shape's NVMe is behind an IOMMU: a phone SoC with an MMU-500. The first
    // two replay on one CPU; the third's trace names 8, each replayed on its own.
    let shapes: [(&str, Writer, &str, &str, &[u64]); 3] = [
        (
            "four devices' map, sync, unmap (one CPU)",
            generate,
            "dimensity9500",
            "1",
            sizes,
        ),
        (
            "realistic (sm8150): page pool, NVMe out of order, capped lists (one CPU)",
            generate_realistic,
            "sm8150",
            "1",
            sizes,
        ),
        (
            "realistic (sm8150) from 8 CPUs, replayed on its 8 CPUs",
            generate_realistic_8,
            "sm8150",
            "trace",
            &sizes[..1],
        ),
    ];
    println!("replay of generated traces (2 reads, checks, pairing, the model), one process each");
    for (name, write, platform, cpus, sizes) in shapes {
        println!("{name}");
        println!(
            "{:>12} {:>10} {:>14} {:>12}",
            "calls", "seconds", "calls/s", "peak MiB"
        );
        for &n in sizes {
            let path = dir.join(format!("trace-{n}.txt"));
            write(&path, n);
            let (calls, secs, kib) = run(&path, platform, cpus);
            assert!(calls >= n, "{calls} of {n} calls replayed");
            println!(
                "{calls:>12} {secs:>10.2} {:>14.0} {:>12.1}",
                calls as f64 / secs,
                kib as f64 / 1024.0
            );
            std::fs::remove_file(&path).unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
