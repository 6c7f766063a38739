//! The command line: bad input exits 2 with one message naming the file, line and key; a reader
//! that closes the pipe early ends the program quietly; the suite leaves nothing in the temp
//! directory.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn dmasim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A path in the temp directory, unique to this process and name, removed when the guard drops
/// (also when the test fails, so a failing run does not litter either). It derefs to the path as
/// a `&str`, the form the command line takes.
struct Scratch(String);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("dmasim-cli-{}-{name}", std::process::id()));
        Scratch(p.to_string_lossy().into_owned())
    }
}

impl std::ops::Deref for Scratch {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let p = Path::new(&self.0);
        // Not there is fine: the command that was to write it may have failed first.
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
    }
}

/// A scratch file holding `text`.
fn scratch(name: &str, text: &str) -> Scratch {
    let p = Scratch::new(name);
    std::fs::write(&*p, text).unwrap();
    p
}

const PROFILE: &str = include_str!("../profiles/dimensity9500.toml");
const SCENARIO: &str = include_str!("../scenarios/batched-sync.toml");

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
        + 1
}

fn expect_input_error(o: &Output, file: &str, line: usize, key: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {e}");
    assert!(
        e.contains(&format!("{file}:{line}")),
        "want {file}:{line} in: {e}"
    );
    assert!(
        e.contains(&format!("key `{key}`")),
        "want key `{key}` in: {e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.lines().count(), 1, "one message: {e}");
}

/// (case, broken text, a snippet on the line the error must name, the key it must name)
type Case = (&'static str, String, &'static str, &'static str);

fn check_cases(cases: Vec<Case>, run: impl Fn(&str) -> Output) {
    for (case, text, at, key) in cases {
        let path = scratch(&format!("{case}.toml"), &text);
        let o = run(&path);
        expect_input_error(&o, &path, line_of(&text, at), key);
    }
}

#[test]
fn bad_profiles_exit_2_naming_file_line_and_key() {
    let cases: Vec<Case> = vec![
        (
            "p-syntax",
            PROFILE.replace("cost = { cycles = 10,", "cost = { cycles = ,"),
            "cost = { cycles = ,",
            "barrier.cost",
        ),
        (
            "p-unknown",
            PROFILE.replace("[barrier]\n", "[barrier]\nspeed = 3\n"),
            "speed = 3",
            "barrier.speed",
        ),
        (
            "p-missing",
            PROFILE
                .lines()
                .filter(|l| !l.starts_with("line_bytes"))
                .map(|l| format!("{l}\n"))
                .collect(),
            "[cache]",
            "cache.line_bytes",
        ),
        (
            "p-negative",
            PROFILE.replacen("latency = { ns = 65.5", "latency = { ns = -65.5", 1),
            "ns = -65.5",
            "cache.clean.latency.ns",
        ),
    ];
    check_cases(cases, |path| {
        dmasim(&["run", "scenarios/batched-sync.toml", "--platform", path])
    });
}

#[test]
fn bad_scenarios_exit_2_naming_file_line_and_key() {
    let cases: Vec<Case> = vec![
        (
            "s-syntax",
            SCENARIO.replace("iterations = 200", "iterations = 200 200"),
            "iterations = 200 200",
            "workload.iterations",
        ),
        (
            "s-unknown",
            SCENARIO.replace("[device]\n", "[device]\ncolour = \"red\"\n"),
            "colour",
            "device.colour",
        ),
        (
            "s-missing",
            SCENARIO
                .lines()
                .filter(|l| !l.starts_with("coherent"))
                .map(|l| format!("{l}\n"))
                .collect(),
            "[device]",
            "device.coherent",
        ),
        (
            "s-negative",
            SCENARIO.replace("iterations = 200", "iterations = -5"),
            "iterations = -5",
            "workload.iterations",
        ),
    ];
    check_cases(cases, |path| dmasim(&["run", path]));
}

fn run_scenario(name: &str, text: &str) -> (Output, Scratch) {
    let path = scratch(name, text);
    (dmasim(&["run", &path]), path)
}

#[test]
fn unknown_platform_lists_the_known_ones() {
    let o = dmasim(&["run", "scenarios/batched-sync.toml", "--platform", "pdp11"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("pdp11") && e.contains("dimensity9500"), "{e}");
    let bad = SCENARIO.replace("platform = \"dimensity9500\"", "platform = \"pdp11\"");
    let (o, path) = run_scenario("s-platform.toml", &bad);
    expect_input_error(&o, &path, line_of(&bad, "pdp11"), "scenario.platform");
    assert!(stderr(&o).contains("dimensity9500"));
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        vec![
            "run",
            "scenarios/batched-sync.toml",
            "--policy",
            "sync=sometimes",
        ],
        vec!["run", "scenarios/batched-sync.toml", "--kernel", "seven"],
        vec!["run", "no/such/scenario.toml"],
        vec!["reproduce", "no-such-experiment"],
        vec!["run", "scenarios/batched-sync.toml", "--format", "xml"],
        vec!["frobnicate"],
        vec!["run", "scenarios/batched-sync.toml", "--max-work", "0"],
        vec!["run", "scenarios/batched-sync.toml", "--max-work", "-1"],
        vec![
            "run",
            "scenarios/batched-sync.toml",
            "--max-work",
            "18446744073709551616",
        ],
        vec!["hostbench", "--iterations", "0"],
        vec!["hostbench", "--buffer", "99999999999999999999G"],
        vec!["hostbench", "--entry", "0"],
    ] {
        let o = dmasim(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}

#[test]
fn platforms_lists_builtins() {
    let o = dmasim(&["platforms"]);
    assert!(o.status.success());
    assert!(stdout(&o).starts_with("dimensity9500 "), "{}", stdout(&o));
}

#[test]
fn reproduce_json_has_rows_with_the_documented_fields() {
    let o = dmasim(&["reproduce", "batched-sync", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() >= 2);
    for r in rows {
        for k in ["id", "unit", "published", "model"] {
            assert!(r.get(k).is_some(), "row lacks {k}: {r}");
        }
    }
    // Deterministic: byte-identical output on a second run.
    let again = dmasim(&["reproduce", "batched-sync", "--format", "json"]);
    assert_eq!(o.stdout, again.stdout);
}

#[test]
fn run_json_is_deterministic_and_complete() {
    let o = dmasim(&[
        "run",
        "scenarios/batched-sync.toml",
        "--kernel",
        "7.0",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["policies"]["sync"], "per-entry");
    assert_eq!(v["operations"]["barrier"], 200 * 2560 * 2);
    assert!(
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["call"] == "dma_map_sg")
    );
    assert!(v["breakdown"].as_array().unwrap().iter().any(|s| s["stack"]
        == serde_json::json!([
            "dma_map_sg",
            "dma_direct_map_sg",
            "arch_sync_dma_for_device",
            "dcache_clean_poc"
        ])));
    let again = dmasim(&[
        "run",
        "scenarios/batched-sync.toml",
        "--kernel",
        "7.0",
        "--format",
        "json",
    ]);
    assert_eq!(o.stdout, again.stdout);
}

#[test]
fn hostbench_bad_options_exit_2() {
    for args in [
        vec!["hostbench", "--entry", "100"],
        vec!["hostbench", "--buffer", "3 parsecs"],
        vec!["hostbench", "--iterations", "0"],
        vec!["hostbench", "--buffer", "1024G"],
        vec!["hostbench", "--instruction", "wbinvd"],
        vec!["calibrate", "--entry", "0"],
    ] {
        let o = dmasim(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
    // The other architecture's instruction is refused with a clear message.
    let foreign = if cfg!(target_arch = "x86_64") {
        "dc-cvac"
    } else {
        "clflushopt"
    };
    let o = dmasim(&["hostbench", "--instruction", foreign]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unsupported"), "{}", stderr(&o));
}

#[test]
fn hostbench_json_reports_both_modes() {
    // A profile calibrated on this host (small and quick: the figures are not judged here).
    let profile = Scratch::new("host.toml");
    let o = dmasim(&[
        "calibrate",
        "--buffer",
        "256K",
        "--entry",
        "4K",
        "--iterations",
        "3",
        "-o",
        &profile,
    ]);
    if o.status.code() == Some(2) && stderr(&o).contains("unsupported") {
        dmasim::hw::host::skip_host_test(&format!(
            "this CPU cannot run the default instruction ({})",
            stderr(&o)
        ));
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let o = dmasim(&[
        "hostbench",
        "--buffer",
        "256K",
        "--entry",
        "4K",
        "--iterations",
        "3",
        "--format",
        "json",
        "--platform",
        &profile,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let modes: Vec<&str> = v["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["per-entry", "batched"]);
    for m in v["modes"].as_array().unwrap() {
        assert!(
            m["median_ns"].as_f64().unwrap() > 0.0
                && m["min_ns"].as_f64().unwrap() <= m["median_ns"].as_f64().unwrap()
        );
        assert!(m["instruction"].is_string());
    }
    assert_eq!(v["entries"], 64);
    assert_eq!(v["model"]["modes"].as_array().unwrap().len(), 2);
}

const FORWARDING: &str = include_str!("../scenarios/ixgbe-forwarding.toml");
const BOUNCE: &str = include_str!("../scenarios/swiotlb-bounce.toml");

#[test]
fn bad_forwarding_and_bounce_keys_exit_2_naming_file_line_and_key() {
    let cases: Vec<Case> = vec![
        (
            "f-packets",
            FORWARDING.replace("packets = 100000", "packets = 0"),
            "packets = 0",
            "workload.packets",
        ),
        (
            "f-bytes",
            FORWARDING.replace("packet_bytes = 60", "packet_bytes = 9000"),
            "packet_bytes = 9000",
            "workload.packet_bytes",
        ),
        (
            "f-ring",
            FORWARDING.replace("rx_ring = 512", "rx_ring = 100"),
            "rx_ring = 100",
            "workload.rx_ring",
        ),
        (
            "f-reuse",
            FORWARDING.replace("rx_reuse_percent = 100", "rx_reuse_percent = 101"),
            "rx_reuse_percent = 101",
            "workload.rx_reuse_percent",
        ),
        (
            "f-foreign-key",
            FORWARDING.replace("packets = 100000", "packets = 100000\nbuffer = \"1M\""),
            "buffer = \"1M\"",
            "workload.buffer",
        ),
        (
            "f-arm64",
            FORWARDING.replace(
                "platform = \"x86-2012-ixgbe\"",
                "platform = \"dimensity9500\"",
            ),
            "platform = \"dimensity9500\"",
            "scenario.platform",
        ),
        (
            "f-areas",
            format!("{FORWARDING}\n[swiotlb]\nareas = 2\n"),
            "areas = 2",
            "swiotlb.areas",
        ),
        (
            "b-pool-size",
            BOUNCE.replace("size = \"64M\"", "size = \"1000K\""),
            "size = \"1000K\"",
            "swiotlb.size",
        ),
        (
            "b-areas",
            BOUNCE.replace("# areas = 4 ", "areas = 3 "),
            "areas = 3",
            "swiotlb.areas",
        ),
        (
            "b-too-large",
            BOUNCE.replace("\"256K\"]", "\"512K\"]"),
            "\"512K\"]",
            "workload.sizes",
        ),
        (
            "b-kind",
            BOUNCE.replace("kind = \"bounce\"", "kind = \"bouncy\""),
            "kind = \"bouncy\"",
            "workload.kind",
        ),
        (
            "b-in-flight",
            BOUNCE.replace("in_flight = 8", "in_flight = 0"),
            "in_flight = 0",
            "workload.in_flight",
        ),
    ];
    check_cases(cases, |path| dmasim(&["run", path]));
}

#[test]
fn areas_before_6_0_are_refused_after_an_override_too() {
    let text = BOUNCE.replace("# areas = 4 ", "areas = 4 ");
    let (o, path) = run_scenario("b-areas-override.toml", &text);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = dmasim(&["run", &path, "--kernel", "3.6"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("key `swiotlb.areas`") && e.contains("6.0"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn forwarding_and_bounce_run_in_every_format() {
    for scenario in [
        "scenarios/ixgbe-forwarding.toml",
        "scenarios/swiotlb-bounce.toml",
    ] {
        for format in ["table", "json", "folded"] {
            let o = dmasim(&["run", scenario, "--format", format]);
            assert!(o.status.success(), "{scenario} {format}: {}", stderr(&o));
            assert!(!o.stdout.is_empty());
            let again = dmasim(&["run", scenario, "--format", format]);
            assert_eq!(o.stdout, again.stdout, "{scenario} {format}: deterministic");
        }
    }
    let o = dmasim(&[
        "run",
        "scenarios/ixgbe-forwarding.toml",
        "--kernel",
        "3.6",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["workload"]["kind"], "forwarding");
    // 7 from swiotlb, 4 from dma_map_single and the skb free.
    assert_eq!(v["operations_per_packet"]["phys_addr_call"], 11.0);
    let o = dmasim(&["reproduce", "swiotlb-phys", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["experiment"], "swiotlb-phys");
    assert!(v["rows"].as_array().unwrap().len() >= 20);
}

const IOMMU_SCENARIO: &str = include_str!("../scenarios/smmu-walk-flush.toml");

#[test]
fn bad_iommu_scenarios_exit_2_naming_file_line_and_key() {
    let cases: Vec<Case> = vec![
        (
            "i-size",
            IOMMU_SCENARIO.replace("\"24M\", \"32M\"]", "\"24M\", \"6000\"]"),
            "sizes = [",
            "workload.sizes",
        ),
        (
            "i-ias",
            IOMMU_SCENARIO.replace("ias = 48", "ias = 64"),
            "ias = 64",
            "iommu.ias",
        ),
        (
            "i-smmu",
            IOMMU_SCENARIO.replace("smmu = \"mmu-500\"", "smmu = \"mmu-700\""),
            "smmu = \"mmu-700\"",
            "iommu.smmu",
        ),
        (
            "i-granule",
            IOMMU_SCENARIO.replace("granule = \"4K\"", "granule = \"8K\""),
            "granule = \"8K\"",
            "iommu.granule",
        ),
        (
            "i-kind",
            IOMMU_SCENARIO.replace("[workload]\n", "[workload]\nbogus = 1\n"),
            "bogus = 1",
            "workload.bogus",
        ),
    ];
    check_cases(cases, |p| dmasim(&["run", p]));
    let o = dmasim(&[
        "run",
        "scenarios/smmu-walk-flush.toml",
        "--policy",
        "walk_flush=sometimes",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("by-va"), "{}", stderr(&o));
}

#[test]
fn iommu_scenario_runs_in_json() {
    let o = dmasim(&[
        "run",
        "scenarios/smmu-walk-flush.toml",
        "--kernel",
        "5.15",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["policies"]["walk_flush"], "asid");
    assert_eq!(v["ops"].as_array().unwrap().len(), 16);
}

#[test]
fn misspelled_sw_key_exits_2_naming_file_line_key_and_the_right_name() {
    let text = PROFILE.replacen("\ndma_api_call =", "\ndma_api_cal =", 1);
    assert_ne!(text, PROFILE);
    let p = scratch("p-sw-key.toml", &text);
    let path = p.to_string();
    let o = dmasim(&["run", "scenarios/batched-sync.toml", "--platform", &path]);
    expect_input_error(&o, &path, line_of(&text, "dma_api_cal ="), "sw.dma_api_cal");
    let e = stderr(&o);
    assert!(e.contains("did you mean `dma_api_call`?"), "{e}");
    assert!(e.contains("dmasim costs"), "{e}");
    assert!(o.stdout.is_empty(), "no result from a refused profile");
}

#[test]
fn costs_lists_every_named_software_cost() {
    let o = dmasim(&["costs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("KEY ([sw])"), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("iova_rcache_hit "))
        .expect("iova_rcache_hit listed");
    assert!(row.contains("iommu::iova"), "{row}");
    let o = dmasim(&["costs", "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let costs = v["sw_costs"].as_array().unwrap();
    assert_eq!(costs.len(), t.lines().count() - 1, "one row per key");
    let sg = costs.iter().find(|c| c["key"] == "sg_next").unwrap();
    assert_eq!(sg["function"], "sg_next");
    assert!(sg["modules"].as_array().unwrap().len() >= 2, "{sg}");
    assert!(sg["description"].as_str().is_some_and(|d| !d.is_empty()));
    // Every key a built-in profile prices is listed.
    for p in ["dimensity9500", "sm8150", "x86-2012-ixgbe"] {
        let text = std::fs::read_to_string(format!("profiles/{p}.toml")).unwrap();
        let sw = text
            .split("\n[sw]")
            .nth(1)
            .unwrap()
            .split("\n[")
            .next()
            .unwrap();
        for key in sw
            .lines()
            .filter_map(|l| l.split_once(" = {"))
            .map(|(k, _)| k)
        {
            let key = key.trim().trim_matches('"');
            assert!(costs.iter().any(|c| c["key"] == key), "{p}: {key}");
        }
    }
    let o = dmasim(&["costs", "--format", "folded"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn unpriced_software_costs_are_warned_not_silent() {
    // sm8150 without its IOVA allocator's costs: the iommu core, io-pgtable and arm-smmu costs
    // are still priced, the allocator's are named.
    let text: String = include_str!("../profiles/sm8150.toml")
        .lines()
        .filter(|l| {
            !(l.starts_with("iova_") || l.starts_with("alloc_iova") || l.starts_with("free_iova"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let p = scratch("p-no-iova.toml", &text);
    let path = p.to_string();
    let o = dmasim(&["run", "scenarios/iommu-ops.toml", "--platform", &path]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.starts_with("warning: ") && e.contains("p-no-iova.toml"),
        "{e}"
    );
    assert!(
        e.contains("sw.iova_rcache_hit") && e.contains("sw.free_iova"),
        "{e}"
    );
    assert!(!e.contains("sw.iommu_map"), "priced: {e}");
    // The shipped profile prices them all.
    let o = dmasim(&["run", "scenarios/iommu-ops.toml"]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // A fully priced run says nothing.
    let o = dmasim(&["run", "scenarios/smmu-walk-flush.toml"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = dmasim(&["run", "scenarios/batched-sync.toml"]);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    // Leaving out a cost a streaming run charges is reported, and the run still uses 0 for it.
    let text: String = PROFILE
        .lines()
        .filter(|l| !l.starts_with("sg_next"))
        .map(|l| format!("{l}\n"))
        .collect();
    let p = scratch("p-no-sg-next.toml", &text);
    let path = p.to_string();
    let o = dmasim(&["run", "scenarios/batched-sync.toml", "--platform", &path]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&path) && e.contains("1 software cost") && e.contains("sw.sg_next"),
        "{e}"
    );
}

/// Runs `args`, reads the first 100 bytes of its standard output, closes the pipe and waits.
fn read_100_then_close(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    let mut head = [0u8; 100];
    let mut reader = child.stdout.take().unwrap();
    reader.read_exact(&mut head).expect("100 bytes of output");
    drop(reader);
    child.wait_with_output().unwrap()
}

/// An IOMMU scenario of `n` map/unmap pairs: cheap to run, with a JSON document of about 750
/// bytes per pair.
fn many_ops(n: u64) -> String {
    let mut t = String::from(
        "[scenario]\nname = \"many-ops\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\
         [iommu]\ngranule = \"4K\"\nias = 48\n\
         [workload]\nkind = \"iommu_ops\"\niterations = 1\n",
    );
    for i in 0..n {
        let iova = 0x4000_0000 + i * 4096;
        for op in ["map", "unmap"] {
            t += &format!("[[workload.op]]\nop = \"{op}\"\niova = \"{iova:#x}\"\nsize = \"4K\"\n");
        }
    }
    t
}

#[test]
fn a_reader_closing_the_pipe_ends_the_program_quietly() {
    // Far more output than a pipe holds (64 KiB on Linux), so the program is still writing when
    // the reader goes and meets the broken pipe every time, not by a race.
    let big = scratch("many-ops.toml", &many_ops(300));
    let full = dmasim(&["run", &big, "--format", "json"]);
    assert!(full.status.success(), "{}", stderr(&full));
    assert!(full.stdout.len() > 128 << 10, "{} bytes", full.stdout.len());
    for i in 0..50 {
        // `reproduce` is the reported case; its document may fit the pipe, so the close can
        // come before, during or after its last write.
        let args: &[&str] = if i % 10 == 0 {
            &["reproduce", "--format", "json"]
        } else {
            &["run", &big, "--format", "json"]
        };
        let o = read_100_then_close(args);
        let e = stderr(&o);
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {e}");
        assert!(e.is_empty(), "{args:?}: quiet, but: {e}");
    }
}

#[test]
fn scratch_paths_are_removed_when_the_guard_drops() {
    let f = scratch("guard.toml", "x");
    let d = Scratch::new("guard-dir");
    std::fs::create_dir_all(Path::new(&*d).join("sub")).unwrap();
    std::fs::write(Path::new(&*d).join("sub/f"), "x").unwrap();
    let (fp, dp) = (f.to_string(), d.to_string());
    assert!(Path::new(&fp).is_file() && Path::new(&dp).is_dir());
    drop((f, d));
    assert!(!Path::new(&fp).exists() && !Path::new(&dp).exists());
}

/// A run of more than a second shows a progress bar when standard error is a terminal, nothing
/// with `-q`, and nothing but its one size note in a pipe; its standard output is the same bytes
/// in each case.
#[test]
fn a_long_run_shows_progress_on_a_terminal_and_nowhere_else() {
    // The bar is drawn by wall time (after a second), so the run is sized from a timed short
    // one to take about four seconds on whatever machine runs the test (at least two and a
    // half, so that the same run on the terminal, if the machine got less busy meanwhile, still
    // outlasts the bar's first second).
    let sized = |iterations: u64| {
        let text = include_str!("../scenarios/batched-sync.toml")
            .replace("iterations = 200", &format!("iterations = {iterations}"));
        scratch(&format!("long-{iterations}.toml"), &text)
    };
    let probe = sized(2000);
    let began = std::time::Instant::now();
    assert!(dmasim(&["run", &probe]).status.success());
    let per_iteration = began.elapsed().as_secs_f64() / 2000.0;
    // batched-sync is 337,920 model steps an iteration, and the default work limit (2e10 steps)
    // refuses a run of more than 59,185: the long run raises the limit (`--max-work`) to what
    // it needs, so however fast the model has become it can still be sized to take seconds.
    const MOST: u64 = 2_000_000;
    let max_work = (MOST * 337_920).to_string();
    let mut iterations = ((4.0 / per_iteration) as u64).clamp(4000, MOST);
    // The probe's time is partly start-up, and a machine busy during the probe and idle after
    // it (or the reverse) sizes the run wrongly: a run that came out short is sized again from
    // its own rate, a few times at most.
    let mut tries = 0;
    let (s, piped, took) = loop {
        let s = sized(iterations);
        let began = std::time::Instant::now();
        let piped = dmasim(&["run", &s, "--max-work", &max_work]);
        let took = began.elapsed();
        tries += 1;
        if took > std::time::Duration::from_millis(2500) || tries == 4 || iterations == MOST {
            break (s, piped, took);
        }
        let rate = iterations as f64 / took.as_secs_f64().max(1e-3);
        iterations = ((4.0 * rate) as u64).max(iterations * 2).min(MOST);
    };
    let err = stderr(&piped);
    assert!(piped.status.success(), "{err}");
    assert!(
        took > std::time::Duration::from_millis(2500),
        "the run meant to be long took {took:?} after {tries} sizings"
    );
    assert!(err.contains("model steps"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    // `script` runs the command on a pseudo-terminal (standard error there), standard output
    // still going to a file. bsdutils, which has it, is an essential package of Debian.
    let on_terminal = |quiet: bool| {
        let out = scratch(&format!("long-{quiet}.out"), "");
        let cmd = format!(
            "'{}' {} run '{}' --max-work {} > '{}'",
            env!("CARGO_BIN_EXE_dmasim"),
            if quiet { "-q" } else { "" },
            &*s,
            max_work,
            &*out
        );
        // In a process group of its own: script(1) signals its whole group when it fails,
        // which must not reach the test harness.
        let t = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .process_group(0)
            .output()
            .expect("script(1) runs");
        let term = String::from_utf8_lossy(&t.stdout).into_owned();
        assert!(t.status.success(), "{term}");
        assert_eq!(std::fs::read(&*out).unwrap(), piped.stdout);
        term
    };
    let term = on_terminal(false);
    assert!(
        term.contains(&format!("/{iterations}")) && term.contains("left)"),
        "no progress bar on the terminal: {term:?}"
    );
    let quiet = on_terminal(true);
    assert!(quiet.trim().is_empty(), "-q, yet: {quiet:?}");
}

/// Runs every other test of this module in a child process whose temp directory is a fresh,
/// empty one, then checks that the directory is still empty.
#[test]
fn the_suite_leaves_nothing_in_the_temp_directory() {
    const ME: &str = "the_suite_leaves_nothing_in_the_temp_directory";
    let tmp = Scratch::new("tmpdir");
    std::fs::create_dir_all(&*tmp).unwrap();
    // This module's tests, named as the harness names them (the path without the crate).
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let o = Command::new(std::env::current_exe().unwrap())
        .args([&format!("{module}::"), "--skip", ME, "--test-threads", "2"])
        .env("TMPDIR", &*tmp)
        .output()
        .expect("the test binary runs");
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(
        !out.contains("running 0 tests"),
        "the child ran no tests: {out}"
    );
    let left: Vec<String> = std::fs::read_dir(&*tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left in the temp directory: {left:?}");
}

/// `--platform` applies before `--set`, and only then is the scenario checked: a setting that
/// fits the new platform and not the file's runs; an SMMU the new platform does not have is
/// refused, naming the argument.
#[test]
fn the_platform_applies_before_the_settings() {
    let text = "[scenario]\nname = \"nic\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\n[device]\nname = \"nic\"\ncoherent = false\ndma_mask_bits = 64\n\n[iommu]\ngranule = \"4K\"\nias = 48\n\n[workload]\nkind = \"streaming\"\nbuffer = \"64K\"\nentry = \"4K\"\ncalls = \"map_sg+unmap_sg\"\ndirection = \"to_device\"\niterations = 2\n";
    let f = scratch("nic.toml", text);
    let path = f.to_string();
    for order in [
        ["--platform", "kunpeng920", "--set", "iommu.smmu=smmu-v3"],
        ["--set", "iommu.smmu=smmu-v3", "--platform", "kunpeng920"],
    ] {
        let mut args = vec!["run", path.as_str()];
        args.extend(order);
        let o = dmasim(&args);
        assert!(o.status.success(), "{order:?}: {}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("smmu-v3 (version 3.0)"));
    }
    // kunpeng920's SMMUv3 is version 3.0: no range invalidation to turn on from a scenario.
    let o = dmasim(&[
        "run",
        &path,
        "--platform",
        "kunpeng920",
        "--set",
        "iommu.smmu=smmu-v3.2",
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--set iommu.smmu=smmu-v3.2") && e.contains("kunpeng920"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// A profile parameter set on the command line (`--set platform.KEY=VALUE`, with its unit) gives
/// the answer editing the profile gives; a cost without a unit, or a key the profile does not
/// have, is one message naming the argument, exit 2.
#[test]
fn a_profile_parameter_set_on_the_command_line_is_the_edited_profile() {
    // The first latency line is [cache.clean]'s.
    let mut first = true;
    let text: String = include_str!("../profiles/dimensity9500.toml")
        .lines()
        .map(|l| {
            if first && l.starts_with("latency = {") {
                first = false;
                "latency = { ns = 150, source = \"edited\" }\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let p = scratch("d9500-150.toml", &text);
    let path = p.to_string();
    let edited = dmasim(&[
        "run",
        "batched-sync",
        "--kernel",
        "7.0",
        "--platform",
        &path,
    ]);
    let set = dmasim(&[
        "run",
        "batched-sync",
        "--kernel",
        "7.0",
        "--set",
        "platform.cache.clean.latency=150ns",
    ]);
    let plain = dmasim(&["run", "batched-sync", "--kernel", "7.0"]);
    assert!(
        edited.status.success() && set.status.success(),
        "{}",
        stderr(&set)
    );
    let calls = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.starts_with("dma_map_sg") || l.starts_with("dma_unmap_sg"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&edited), calls(&set));
    assert_ne!(calls(&plain), calls(&set));
    // The same edit reaches every compared platform.
    let o = dmasim(&[
        "compare",
        "batched-sync",
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
        "--set",
        "platform.cache.clean.latency=0.15us",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for (arg, needle) in [
        ("platform.cache.clean.latency=150", "its unit"),
        ("platform.cache.nope=1ns", "has no `cache.nope`"),
    ] {
        let o = dmasim(&["run", "batched-sync", "--set", arg]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(arg) && e.contains(needle), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// Small output defects stay fixed: an error writing the results names standard output;
/// `reproduce --list` keeps its columns apart; `compare --help` says folded output is for two
/// variants too; the operations table keeps its columns under long instruction labels.
#[test]
fn small_output_defects_stay_fixed() {
    if Path::new("/dev/full").exists() {
        let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
            .args(["run", "batched-sync"])
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let e = stderr(&o);
        assert!(e.contains("cannot write standard output"), "{e}");
        assert_ne!(o.status.code(), Some(0));
    }
    let o = dmasim(&["reproduce", "--list"]);
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        let name = l.split_whitespace().next().unwrap();
        assert!(l[name.len()..].starts_with("  "), "{l}");
    }
    let help = String::from_utf8_lossy(&dmasim(&["compare", "--help"]).stdout).into_owned();
    assert!(!help.contains("(`run` only)"), "{help}");
    // An IOMMU-backed streaming run: long labels (`unmap_pages call`) in one aligned column.
    let text = "[scenario]\nname = \"s\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\n[device]\nname = \"d\"\ncoherent = true\ndma_mask_bits = 64\n\n[iommu]\ngranule = \"4K\"\nias = 48\n\n[workload]\nkind = \"streaming\"\nbuffer = \"64K\"\nentry = \"4K\"\ncalls = \"map_sg+unmap_sg\"\ndirection = \"to_device\"\niterations = 1\n";
    let f = scratch("aligned.toml", text);
    let path = f.to_string();
    let o = dmasim(&["run", &path]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let table: Vec<&str> = out
        .split("operations per iteration\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.is_empty())
        .collect();
    let ends: Vec<usize> = table.iter().map(|l| l.len()).collect();
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{table:#?}");
    assert!(
        table.iter().any(|l| l.contains("unmap_pages call")),
        "{out}"
    );
}
