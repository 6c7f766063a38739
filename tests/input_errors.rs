//! Errors by phase: bad input exits 2 naming file, line and key in plain words; what the
//! modelled kernel refuses is part of the result (exit 0).

use std::process::{Command, Output};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// Scratch files removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("dmasim-errors-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BATCHED: &str = include_str!("../scenarios/batched-sync.toml");
const OPS: &str = include_str!("../scenarios/iommu-ops.toml");

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle")
        + 1
}

/// Exit 2, one line naming `file:line` and `key`, no serde internals, no panic.
fn input_error(o: &Output, file: &str, line: Option<usize>, key: &str) -> String {
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(2), "{e}");
    let at = match line {
        Some(l) => format!("{file}:{l}: key `{key}`"),
        None => format!("{file}: key `{key}`"),
    };
    assert!(e.contains(&at), "want `{at}` in: {e}");
    assert!(!e.contains("serde") && !e.contains("$__"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn an_unknown_policy_name_is_refused_where_it_is_written() {
    let t = Scratch::new("policy");
    let text = BATCHED.replace(
        "kernel = \"7.1\"",
        "kernel = \"7.1\"\npolicy = { colour = \"red\" }",
    );
    let f = t.file("p.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "colour")),
        "scenario.policy.colour",
    );
    assert!(e.contains("known policies"), "{e}");
    let e = input_error(
        &dmasim(&[
            "run",
            "scenarios/batched-sync.toml",
            "--policy",
            "sync=sometimes",
        ]),
        "<argument>",
        None,
        "--policy sync",
    );
    assert!(e.contains("per-entry"), "{e}");
}

#[test]
fn an_iommu_policy_without_an_iommu_is_refused() {
    let t = Scratch::new("iommu-policy");
    let text = BATCHED.replace(
        "kernel = \"7.1\"",
        "kernel = \"7.1\"\npolicy = { walk_flush = \"asid\" }",
    );
    let f = t.file("w.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "walk_flush")),
        "scenario.policy.walk_flush",
    );
    assert!(e.contains("no [iommu]"), "{e}");
    let e = input_error(
        &dmasim(&[
            "run",
            "scenarios/batched-sync.toml",
            "--policy",
            "unmap_split=per-page",
        ]),
        "<argument>",
        None,
        "--policy unmap_split",
    );
    assert!(e.contains("no [iommu]"), "{e}");
    // A policy of another architecture: the 2012 x86-64 swiotlb's bookkeeping on arm64.
    input_error(
        &dmasim(&[
            "run",
            "scenarios/batched-sync.toml",
            "--policy",
            "swiotlb_addr=phys",
        ]),
        "<argument>",
        None,
        "--policy swiotlb_addr",
    );
}

#[test]
fn an_unquoted_kernel_is_refused_in_plain_words() {
    let t = Scratch::new("kernel");
    let text = BATCHED.replace("kernel = \"7.1\"", "kernel = 7.1");
    let f = t.file("k.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "kernel = 7.1")),
        "scenario.kernel",
    );
    assert!(e.contains("kernel = \"7.1\""), "{e}");
    // Type errors elsewhere name the key without serde's internals either.
    let text = BATCHED.replace("dma_mask_bits = 64", "dma_mask_bits = \"64\"");
    let f = t.file("m.toml", &text);
    input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "dma_mask_bits")),
        "device.dma_mask_bits",
    );
}

#[test]
fn releases_are_read_like_uname_and_checked() {
    for k in ["v7.0", "6.1.55", "6.1.55-generic"] {
        let o = dmasim(&["run", "scenarios/batched-sync.toml", "--kernel", k]);
        assert!(
            o.status.success(),
            "{k}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for k in ["99.0", "0.0", "4294967295.4294967295", "seven"] {
        let o = dmasim(&["run", "scenarios/batched-sync.toml", "--kernel", k]);
        assert_eq!(o.status.code(), Some(2), "{k}");
    }
    // arm64 was merged in 3.7: a 3.6 preset cannot run an arm64 platform.
    input_error(
        &dmasim(&["run", "scenarios/batched-sync.toml", "--kernel", "3.6"]),
        "<argument>",
        None,
        "scenario.kernel",
    );
}

#[test]
fn a_model_refusal_is_a_result_not_bad_input() {
    let t = Scratch::new("refusal");
    // Map twice at one fixed IOVA without unmapping: the second map is -EEXIST.
    let text = format!(
        "{}\n[[workload.op]]\nop = \"map\"\nname = \"again\"\niova = \"0x40000000\"\nsize = \"4M\"\n",
        OPS.trim_end()
    );
    let f = t.file("r.toml", &text);
    let o = dmasim(&["run", &f]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("refused by the modelled kernel"), "{out}");
    assert!(out.contains("already mapped"), "{out}");
    let o = dmasim(&["run", &f, "--format", "json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let refused: u64 = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["refused"].as_u64().unwrap())
        .sum();
    assert!(refused > 0, "{v}");
}

#[test]
fn every_document_names_its_format_and_the_policies_in_effect() {
    let o = dmasim(&[
        "run",
        "scenarios/ixgbe-forwarding.toml",
        "--policy",
        "swiotlb_addr=phys",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["policies"]["swiotlb_addr"], "phys");
    assert_eq!(v["policies"]["swiotlb_rules"], "3.6");
    assert_eq!(v["policies"]["kernel"], "3.6");
    for f in [
        "scenarios/batched-sync.toml",
        "scenarios/iommu-ops.toml",
        "scenarios/ixgbe-forwarding.toml",
        "scenarios/smmu-walk-flush.toml",
        "scenarios/swiotlb-bounce.toml",
    ] {
        let o = dmasim(&["run", f, "--format", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["format_version"].as_u64().is_some(), "{f}");
        assert!(v["policies"]["kernel"].is_string(), "{f}");
    }
    let o = dmasim(&["reproduce", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["format_version"].as_u64().is_some());
}

#[test]
fn a_profile_path_is_relative_to_the_scenario_not_the_current_directory() {
    let t = Scratch::new("relative");
    let here = t.0.join("here");
    let there = t.0.join("there");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&there).unwrap();
    std::fs::write(
        there.join("p.toml"),
        include_str!("../profiles/dimensity9500.toml"),
    )
    .unwrap();
    let text = BATCHED.replace("platform = \"dimensity9500\"", "platform = \"p.toml\"");
    std::fs::write(there.join("s.toml"), &text).unwrap();
    // A p.toml in the current directory that is not a profile at all must not be read.
    std::fs::write(here.join("p.toml"), "not a profile").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .current_dir(&here)
        .args(["run", "../there/s.toml"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An empty platform names its line.
    let text = BATCHED.replace("platform = \"dimensity9500\"", "platform = \"\"");
    let f = t.file("e.toml", &text);
    input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "platform = \"\"")),
        "scenario.platform",
    );
}

#[test]
fn only_regular_files_of_bounded_size_are_read() {
    let t = Scratch::new("files");
    // A device that never ends, and a directory: refused before reading.
    for path in ["/dev/zero", t.0.to_str().unwrap()] {
        let o = dmasim(&["run", path]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{path}: {e}");
        assert!(e.contains("not a regular file"), "{e}");
        let o = dmasim(&["run", "scenarios/batched-sync.toml", "--platform", path]);
        assert_eq!(o.status.code(), Some(2), "{path}");
    }
    // A file over the limit: refused by its size, whatever it holds.
    let big = "[".repeat(2 << 20);
    let f = t.file("big.toml", &big);
    let o = dmasim(&["run", &f]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("more than"), "{e}");
    // A FIFO would block a reader forever.
    let fifo = t.0.join("fifo.toml");
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        let o = dmasim(&["run", fifo.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
    }
}

#[test]
fn what_the_input_shows_is_checked_before_the_run() {
    let t = Scratch::new("before-run");
    // A buffer above a 31-bit mask (DRAM starts at 2 GiB), with no pool to bounce through.
    let text = BATCHED.replace("dma_mask_bits = 64", "dma_mask_bits = 31");
    let f = t.file("mask.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "dma_mask_bits")),
        "device.dma_mask_bits",
    );
    assert!(e.contains("above the device's mask"), "{e}");
    // A node the platform does not have.
    let text = BATCHED.replace("dma_mask_bits = 64", "dma_mask_bits = 64\nnuma_node = 5");
    let f = t.file("node.toml", &text);
    input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "numa_node")),
        "device.numa_node",
    );
    // An empty --policy names what is wrong.
    let o = dmasim(&["run", "scenarios/batched-sync.toml", "--policy", ""]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn host_measurements_refuse_what_would_not_fit_or_not_end() {
    for args in [
        &[
            "hostbench",
            "--buffer",
            "4G",
            "--entry",
            "64",
            "--iterations",
            "1",
        ][..],
        &[
            "calibrate",
            "--buffer",
            "4G",
            "--entry",
            "64",
            "--iterations",
            "1",
        ][..],
        &["hostbench", "--iterations", "4294967295"][..],
        &[
            "hostbench",
            "--buffer",
            "4G",
            "--entry",
            "1M",
            "--iterations",
            "100000",
        ][..],
    ] {
        let o = dmasim(args);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.starts_with("error: --"), "{args:?}: {e}");
    }
}

#[test]
fn runs_that_would_take_hours_are_refused_unless_asked_for() {
    let t = Scratch::new("work");
    // 16 GiB in 4 KB entries, a million times: about 38 hours of model time on this machine.
    let text = BATCHED
        .replace("buffer = \"10M\"", "buffer = \"16G\"")
        .replace("iterations = 200", "iterations = 1000000");
    let f = t.file("long.toml", &text);
    let o = dmasim(&["run", &f]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--max-work"), "{e}");
    // A thousand maps of 4 GiB each on one domain (8 GiB of page tables).
    let mut ops = OPS.split("\n[[workload.op]]").next().unwrap().to_string();
    ops = ops.replace("iterations = 10", "iterations = 1");
    for _ in 0..1000 {
        ops += "\n[[workload.op]]\nop = \"map\"\nsize = \"4G\"\n";
    }
    let f = t.file("maps.toml", &ops);
    let o = dmasim(&["run", &f]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Within the limit, a large run says how large before it starts.
    let text = BATCHED.replace("iterations = 200", "iterations = 3500");
    let f = t.file("noted.toml", &text);
    let o = dmasim(&["run", &f, "--format", "json"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("model steps"));
}

/// Issue #9's first finding: a cost of 1e300 ns ran with exit 0 and a clock that had wrapped to
/// a smaller figure, and a frequency of 1e-300 MHz gave 92233720 ms; a line of 2^40 bytes passed.
/// Each now exits 2 naming the profile, the line and the key.
#[test]
fn costs_frequencies_and_line_sizes_out_of_range_name_file_line_and_key() {
    let t = Scratch::new("ranges");
    let profile = include_str!("../profiles/dimensity9500.toml");
    for (from, to, key) in [
        (
            "latency = { ns = 65.5",
            "latency = { ns = 1e300",
            "cache.clean.latency",
        ),
        (
            "issue = { cycles = 1,",
            "issue = { cycles = 1e300,",
            "cache.clean.issue",
        ),
        (
            "cpu_freq_mhz = { value = 2600",
            "cpu_freq_mhz = { value = 1e-300",
            "platform.cpu_freq_mhz.value",
        ),
        (
            "line_bytes = { value = 64",
            "line_bytes = { value = 1099511627776",
            "cache.line_bytes.value",
        ),
    ] {
        assert!(profile.contains(from), "{from}");
        let text = profile.replacen(from, to, 1);
        let p = t.file("p.toml", &text);
        input_error(
            &dmasim(&["run", "scenarios/batched-sync.toml", "--platform", &p]),
            &p,
            Some(line_of(&text, to)),
            key,
        );
    }
}

#[test]
fn a_clock_that_would_wrap_is_an_error_not_a_small_number() {
    let t = Scratch::new("clock");
    // One second per line issued (the most a cost may be): 200 iterations of 327680 lines pass
    // 2^64 ps. Release and overflow-checked builds alike must say so rather than wrap.
    let profile = include_str!("../profiles/dimensity9500.toml")
        .replace("issue = { cycles = 1,", "issue = { ns = 1e9,");
    t.file("slow.toml", &profile);
    let text = BATCHED.replace("platform = \"dimensity9500\"", "platform = \"slow.toml\"");
    let f = t.file("s.toml", &text);
    let o = dmasim(&["run", &f]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("2^64 ps"), "{e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn an_iommu_scenario_needs_the_profile_to_price_wmb() {
    let t = Scratch::new("wmb");
    let profile = include_str!("../profiles/sm8150.toml");
    let without: String = profile
        .lines()
        .filter(|l| !l.starts_with("wmb = "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without.len(), profile.len(), "sm8150 prices wmb");
    let p = t.file("p.toml", &without);
    let s = t.file(
        "s.toml",
        &OPS.replace("platform = \"sm8150\"", "platform = \"p.toml\""),
    );
    let e = input_error(&dmasim(&["run", &s]), &p, None, "barrier.wmb");
    assert!(e.contains("wmb()"), "{e}");
    // Without an [iommu] domain nothing issues wmb(), so the same profile runs.
    let b = t.file(
        "b.toml",
        &BATCHED.replace("platform = \"dimensity9500\"", "platform = \"p.toml\""),
    );
    let o = dmasim(&["run", &b]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn the_smmuv3_policy_is_refused_on_an_mmu_500() {
    let e = input_error(
        &dmasim(&[
            "run",
            "scenarios/iommu-ops.toml",
            "--policy",
            "smmuv3_inv=7.1",
        ]),
        "<argument>",
        None,
        "--policy smmuv3_inv",
    );
    assert!(e.contains("not an SMMUv3"), "{e}");
}

const PIPELINE: &str = include_str!("../scenarios/zynq-pipeline-streaming.toml");
const ZYNQ: &str = include_str!("../profiles/zynq7000.toml");

#[test]
fn a_pipeline_option_the_platform_cannot_serve_is_refused_where_it_is_named() {
    let t = Scratch::new("pipeline-acp");
    // The same Zynq without its ACP: a profile file next to the scenario, minus the section.
    let start = ZYNQ
        .find("[acp]")
        .expect("the zynq7000 profile has an [acp] section");
    let end = start
        + ZYNQ[start..]
            .find("\n\n")
            .expect("a blank line after [acp]");
    let no_acp = format!("{}{}", &ZYNQ[..start], &ZYNQ[end..]);
    t.file("noacp.toml", &no_acp);
    let text = PIPELINE
        .replace("platform = \"zynq7000\"", "platform = \"noacp.toml\"")
        .replace(
            "coherence = \"streaming\"",
            "coherence = [\"streaming\", \"acp\"]",
        );
    let f = t.file("acp.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "coherence =")),
        "workload.coherence",
    );
    assert!(e.contains("accelerator coherency port"), "{e}");
    // On the built-in zynq7000, which has one, the ACP runs; moved with --platform onto the
    // profile without one, it is refused the same way.
    let ok = t.file(
        "ok.toml",
        &PIPELINE.replace("coherence = \"streaming\"", "coherence = \"acp\""),
    );
    let o = dmasim(&["run", &ok]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = dmasim(&[
        "run",
        &ok,
        "--platform",
        &t.0.join("noacp.toml").to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("workload.coherence"));
}

#[test]
fn a_pipeline_with_an_unknown_option_or_no_bandwidth_is_refused() {
    let t = Scratch::new("pipeline-bad");
    let text = PIPELINE.replace("coherence = \"streaming\"", "coherence = \"snoopy\"");
    let f = t.file("u.toml", &text);
    let e = input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "snoopy")),
        "workload.coherence",
    );
    assert!(e.contains("streaming-partial") && e.contains("acp"), "{e}");
    for bad in ["0", "-5", "0.0", "\"fast\""] {
        let text = PIPELINE.replace("device_mb_s = 600", &format!("device_mb_s = {bad}"));
        let f = t.file("z.toml", &text);
        let e = input_error(
            &dmasim(&["run", &f]),
            &f,
            Some(line_of(&text, "device_mb_s")),
            "workload.device_mb_s",
        );
        assert!(e.contains("above 0"), "{e}");
    }
    let text = PIPELINE.replace(
        "device_mb_s = 600",
        "device_mb_s = 600\nbytes_used = \"2M\"",
    );
    let f = t.file("b.toml", &text);
    input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "bytes_used")),
        "workload.bytes_used",
    );
    let text = PIPELINE.replace("flow = \"loopback\"", "flow = \"sideways\"");
    let f = t.file("f.toml", &text);
    input_error(
        &dmasim(&["run", &f]),
        &f,
        Some(line_of(&text, "sideways")),
        "workload.flow",
    );
}

#[test]
fn a_profile_acp_without_bandwidth_is_refused() {
    let t = Scratch::new("acp-zero");
    let bad = ZYNQ.replace(
        "bandwidth_mb_s = { value = 1200",
        "bandwidth_mb_s = { value = 0",
    );
    let f = t.file("p.toml", &bad);
    input_error(
        &dmasim(&[
            "run",
            "scenarios/zynq-pipeline-streaming.toml",
            "--platform",
            &f,
        ]),
        &f,
        Some(line_of(&bad, "bandwidth_mb_s")),
        "acp.bandwidth_mb_s.value",
    );
}

/// A cache geometry that is not a power of two (size, ways, line), or whose ways of lines do not
/// fit in its size, is refused where it is written when the profile runs a cache model.
#[test]
fn a_cache_geometry_that_is_not_a_power_of_two_is_refused_where_it_is_written() {
    let t = Scratch::new("geometry");
    let good = include_str!("../profiles/zynq7000.toml");
    for (i, (from, to, key)) in [
        (
            "size_kib = { value = 32,",
            "size_kib = { value = 48,",
            "cache.size_kib.value",
        ),
        (
            "ways = { value = 4,",
            "ways = { value = 3,",
            "cache.ways.value",
        ),
        (
            "line_bytes = { value = 32,",
            "line_bytes = { value = 24,",
            "cache.line_bytes.value",
        ),
        // A power of two, but not the PL310's line: one line size for the whole model.
        (
            "line_bytes = { value = 32,",
            "line_bytes = { value = 64,",
            "cache.line_bytes.value",
        ),
        (
            "size_kib = { value = 512,",
            "size_kib = { value = 384,",
            "outer_cache.size_kib.value",
        ),
        (
            "ways = { value = 8,",
            "ways = { value = 12,",
            "outer_cache.ways.value",
        ),
        // 64 ways of 32 bytes is 2 KiB: more than a 1 KiB cache holds.
        (
            "size_kib = { value = 32,",
            "size_kib = { value = 1,",
            "cache.ways.value",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let text = good.replacen(from, to, 1);
        let text = if i == 6 {
            text.replacen("ways = { value = 4,", "ways = { value = 64,", 1)
        } else {
            text
        };
        assert_ne!(text, good, "{from}");
        let f = t.file(&format!("p{i}.toml"), &text);
        let needle = if i == 6 { "ways = { value = 64," } else { to };
        input_error(
            &dmasim(&["run", "scenarios/zynq-streaming.toml", "--platform", &f]),
            &f,
            Some(line_of(&text, needle)),
            key,
        );
    }
    // Without [cache_model] the L1's geometry is not needed, but what is given is still checked.
    let plain = good.split("\n[cache_model]").next().unwrap().replacen(
        "ways = { value = 4,",
        "ways = { value = 5,",
        1,
    );
    let f = t.file("plain.toml", &plain);
    input_error(
        &dmasim(&["run", "scenarios/zynq-streaming.toml", "--platform", &f]),
        &f,
        Some(line_of(&plain, "ways = { value = 5,")),
        "cache.ways.value",
    );
}

/// A GHz figure typed as `cpu_freq_mhz` (2.4) is refused below the plausible floor, naming the
/// file, line and key, with the hint of what it most likely meant.
#[test]
fn a_ghz_figure_typed_as_mhz_is_refused_with_a_hint() {
    let text = include_str!("../profiles/dimensity9500.toml");
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu_freq_mhz"))
        .expect("a cpu_freq_mhz line");
    let value = line
        .split("value = ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let edited = text.replacen(line, &line.replacen(value, "2.4", 1), 1);
    let dir = std::env::temp_dir().join(format!("dmasim-ghz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("ghz.toml");
    std::fs::write(&p, &edited).unwrap();
    let path = p.to_string_lossy().into_owned();
    let o = dmasim(&["run", "batched-sync", "--platform", &path]);
    std::fs::remove_dir_all(&dir).unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("platform.cpu_freq_mhz") && e.contains("2.4 GHz is 2400"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

const ZYNQ_STREAMING: &str = include_str!("../scenarios/zynq-streaming.toml");
const BOUNCE: &str = include_str!("../scenarios/swiotlb-bounce.toml");

/// Ops whose state several CPUs cannot share yet (32-bit ARM's: its cache maintenance holds the
/// machine's one PL310 outer cache) are bad input when the scenario is checked: exit 2 with one
/// line naming the key that asks for the CPUs, for every kind that takes several, never the
/// modelled kernel's refusal at run time (exit 3).
#[test]
fn ops_cpus_cannot_share_are_refused_where_the_cpus_are_asked_for() {
    let not_shared = |e: &str| {
        assert!(e.contains("is not modelled yet"), "{e}");
        assert!(e.contains("outer cache"), "{e}");
    };
    // A shipped streaming scenario on the Zynq, given a second CPU on the command line.
    let o = dmasim(&[
        "run",
        "zynq-streaming",
        "--platform",
        "zynq7000",
        "--set",
        "workload.cpus=2",
    ]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(o.stdout.is_empty(), "no result");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(
            "error: <argument>: --set workload.cpus=2: 2 CPUs would share the device's arm_dma_ops"
        ),
        "{e}"
    );
    not_shared(&e);

    let t = Scratch::new("cpus-shared");
    // The same in the file: its line and key.
    let text = ZYNQ_STREAMING.replace("iterations = 10", "iterations = 10\ncpus = 2");
    let s = t.file("streaming.toml", &text);
    let e = input_error(
        &dmasim(&["run", &s]),
        &s,
        Some(line_of(&text, "cpus = 2")),
        "workload.cpus",
    );
    not_shared(&e);

    // The benchmark's threads, one per CPU.
    let text = "[scenario]\nname = \"mb\"\nplatform = \"zynq7000\"\nkernel = \"3.19\"\n\
                [device]\nname = \"dma_map_benchmark\"\ncoherent = false\ndma_mask_bits = 32\n\
                [workload]\nkind = \"map_benchmark\"\nthreads = 2\nseconds = 1\n";
    let s = t.file("mb.toml", text);
    let e = input_error(
        &dmasim(&["run", &s]),
        &s,
        Some(line_of(text, "threads = 2")),
        "workload.threads",
    );
    not_shared(&e);

    // A bounce workload's CPUs, through dma-direct over the pool.
    let text = BOUNCE
        .replace("platform = \"x86-2012-ixgbe\"", "platform = \"zynq7000\"")
        .replace("kernel = \"6.0\"", "kernel = \"3.19\"");
    let s = t.file("bounce.toml", &text);
    let e = input_error(
        &dmasim(&["run", &s]),
        &s,
        Some(line_of(&text, "cpus = 4")),
        "workload.cpus",
    );
    assert!(e.contains("dma-direct over swiotlb"), "{e}");
    not_shared(&e);

    // An IOMMU workload's domain on a 32-bit ARM platform with an SMMU: a non-coherent table
    // walker's PTEs are cleaned by the arch's cache maintenance, so its CPUs cannot share the
    // domain; with a coherent walker nothing of the arch's is shared, and they run.
    let sm8150 = include_str!("../profiles/sm8150.toml");
    let smmu = &sm8150[sm8150.find("\n[smmu]").expect("sm8150 has an [smmu]")..];
    t.file("zynq-smmu.toml", &format!("{ZYNQ}{smmu}"));
    let text = OPS
        .replace("platform = \"sm8150\"", "platform = \"zynq-smmu.toml\"")
        .replace("kernel = \"5.15\"", "kernel = \"3.19\"")
        .replace("iterations = 10", "iterations = 1\ncpus = 2");
    let s = t.file("ops.toml", &text);
    let e = input_error(
        &dmasim(&["run", &s]),
        &s,
        Some(line_of(&text, "cpus = 2")),
        "workload.cpus",
    );
    assert!(e.contains("the IOMMU domain"), "{e}");
    not_shared(&e);
    let o = dmasim(&["run", &s, "--set", "iommu.coherent_walk=true"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
