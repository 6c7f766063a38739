//! Hostile input through the whole library: thousands of mutated copies of the shipped profiles
//! and scenarios, each parsed, checked, overridden, run and rendered, with overflow checks on.
//! Every case must end in a result, an input error (exit 2 from the binary) or a refusal of the
//! modelled kernel (exit 3) — never in a panic, which an overflow would be, nor in a bug the model
//! finds itself (exit 70: a deadlock of the many-CPU engine, CPUs the checks should have refused).
//!
//! How overflow checks are on for the code under test: `[profile.release]` in Cargo.toml sets
//! `overflow-checks = true`, and `[profile.ci]` inherits it, so `cargo test --profile ci` (the
//! CI command) builds the library with them, and so does every release build of the binary: an overflow that the input checks miss
//! ends that run as a caught panic (exit 70), never as a wrapped number. The test crate shares the
//! library's profile; `overflow_checks_are_on` proves they are, so a change of profile that
//! turned them off would fail here rather than make this test vacuous. (A plain `cargo test`
//! has them too: the dev profile's default.) Their cost on `cargo bench --bench dma_direct` is
//! about 9 % (docs/design.md, "Hostile input").
//!
//! The mutations are deterministic (a seeded splitmix64): values replaced by extremes (0, -1,
//! 2^31, 2^63, 1e300, 1e-300, NaN, sizes of exabytes, unaligned addresses), keys renamed,
//! lines deleted, duplicated or swapped, bytes inserted, text truncated, plus `--kernel` and
//! `--policy` overrides. Each case's work is capped (`Scenario::check_work`) so the whole test
//! stays well under a minute on two cores; a case over the cap is an input error like any other.

use dmasim::input::InputError;
use dmasim::platform::Profile;
use dmasim::scenario::{self, RunError, Scenario};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The shipped files, as the seeds: (name, text).
const SCENARIOS: &[(&str, &str)] = &[
    (
        "batched-sync.toml",
        include_str!("../scenarios/batched-sync.toml"),
    ),
    (
        "iommu-ops.toml",
        include_str!("../scenarios/iommu-ops.toml"),
    ),
    (
        "ixgbe-forwarding.toml",
        include_str!("../scenarios/ixgbe-forwarding.toml"),
    ),
    (
        "smmu-walk-flush.toml",
        include_str!("../scenarios/smmu-walk-flush.toml"),
    ),
    (
        "swiotlb-bounce.toml",
        include_str!("../scenarios/swiotlb-bounce.toml"),
    ),
];

const PROFILES: &[(&str, &str)] = &[
    (
        "dimensity9500.toml",
        include_str!("../profiles/dimensity9500.toml"),
    ),
    ("sm8150.toml", include_str!("../profiles/sm8150.toml")),
    (
        "x86-2012-ixgbe.toml",
        include_str!("../profiles/x86-2012-ixgbe.toml"),
    ),
];

/// Cases: scenarios mutated on the built-in platforms, then profiles mutated under a shipped
/// scenario of their platform.
const SCENARIO_CASES: u64 = 3500;
const PROFILE_CASES: u64 = 2100;
/// Most model steps a case may run (a few ms at most; the shrunk seeds take up to 4.6M).
const CASE_WORK: u128 = 5_000_000;

/// Values a mutation puts where a value was: boundaries of every integer type the model uses,
/// floats at the edges of f64, and sizes, addresses and strings that the parsers must refuse.
const VALUES: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "12",
    "31",
    "32",
    "63",
    "64",
    "65",
    "255",
    "256",
    "4095",
    "4096",
    "4097",
    "65536",
    "1000000",
    "100000000",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "0.5",
    "-0.0",
    "1e9",
    "1e10",
    "1e300",
    "1e-300",
    "1.7976931348623157e308",
    "5e-324",
    "nan",
    "inf",
    "-inf",
    "true",
    "\"\"",
    "\"0\"",
    "\"1\"",
    "\"3\"",
    "\"4K\"",
    "\"4097\"",
    "\"64K\"",
    "\"2M\"",
    "\"1G\"",
    "\"4G\"",
    "\"64G\"",
    "\"1T\"",
    "\"8E\"",
    "\"16E\"",
    "\"18446744073709551615\"",
    "\"0x0\"",
    "\"0x1\"",
    "\"0x1000\"",
    "\"0xfffffffffffff000\"",
    "\"0xffffffffffffffff\"",
    "\"0x10000000000000000\"",
    "\"alloc\"",
    "\"3.6\"",
    "\"7.1\"",
    "\"99.0\"",
    "\"2\"",
    "\"3.2\"",
    "\"qcom\"",
    "\"mmu-500\"",
    "\"smmu-v3\"",
    "\"map\"",
    "\"unmap\"",
    "\"scattered\"",
    "\"bidirectional\"",
    "\"to_device\"",
    "\"none\"",
    "\"map_sg+unmap_sg\"",
    "\"sync_for_cpu+sync_for_device\"",
    "\"dimensity9500\"",
    "\"sm8150\"",
    "\"x86-2012-ixgbe\"",
    "\"streaming\"",
    "\"bounce\"",
    "\"forwarding\"",
    "\"iommu_ops\"",
    "\"iommu_sweep\"",
    "[]",
    "[\"4K\", \"0\"]",
    "[\"16E\"]",
    "[\"64\", \"4G\"]",
    "{ ns = 1e9, source = \"x\" }",
    "{ cycles = 1e300, source = \"x\" }",
    "{ ns = 0, source = \"\" }",
];

const KERNELS: &[&str] = &[
    "3.6",
    "3.7",
    "5.14",
    "5.15",
    "5.19",
    "6.0",
    "7.0",
    "7.1",
    "99.0",
    "0.0",
    "4294967295.4294967295",
    "",
    "v6.1.55-rc1",
];

const POLICIES: &[&str] = &[
    "sync=batched",
    "sync=per-entry",
    "arm64_dir_rules=pre-5.19",
    "swiotlb_rules=3.6",
    "swiotlb_rules=6.0",
    "swiotlb_addr=virt",
    "swiotlb_addr=phys",
    "walk_flush=asid",
    "walk_flush=by-va",
    "unmap_split=per-page",
    "invalidation=lazy",
    "invalidation=strict",
    "sync=never",
    "",
    "=",
    "sync=batched,walk_flush=asid,invalidation=lazy",
];

/// splitmix64: a fixed sequence from a fixed seed, so every run tries the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The shipped scenarios run hundreds of iterations; a case needs few to reach every path.
fn shrink(text: &str) -> String {
    text.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("iterations =") {
                "iterations = 2".to_string()
            } else if t.starts_with("packets =") {
                "packets = 2000".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Byte ranges of the values in `text`: what follows each `=` up to a `,`, `}`, `#` or the end
/// of the line (strings and arrays whole), and each quoted string on its own.
fn value_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'=' {
            let mut s = i + 1;
            while s < b.len() && b[s] == b' ' {
                s += 1;
            }
            let mut e = s;
            let mut depth = 0i32;
            let mut in_str = false;
            while e < b.len() && b[e] != b'\n' {
                match b[e] {
                    b'"' => in_str = !in_str,
                    b'[' | b'{' if !in_str => depth += 1,
                    b']' | b'}' if !in_str => {
                        if depth == 0 {
                            break;
                        }
                        depth -= 1;
                    }
                    b',' | b'#' if !in_str && depth == 0 => break,
                    _ => {}
                }
                e += 1;
            }
            while e > s && b[e - 1] == b' ' {
                e -= 1;
            }
            if e > s {
                spans.push((s, e));
            }
        } else if b[i] == b'"'
            && let Some(len) = text[i + 1..].find(['"', '\n'])
        {
            spans.push((i, i + len + 2));
            i += len + 1;
        }
        i += 1;
    }
    spans
}

fn is_number(v: &str) -> bool {
    v.starts_with(|c: char| c.is_ascii_digit() || c == '-') || matches!(v, "nan" | "inf")
}

/// The bare keys of `text` (`name = `), to rename one key as another.
fn keys(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
        .filter(|k| !k.is_empty() && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'))
        .collect()
}

/// One mutation of `text`, and what it did (for the report of a failing case).
fn mutate(rng: &mut Rng, text: &str, all_keys: &[String]) -> (String, String) {
    let lines: Vec<&str> = text.lines().collect();
    match rng.below(20) {
        0..=13 => {
            let spans = value_spans(text);
            if spans.is_empty() {
                return (text.to_string(), "none".into());
            }
            let (s, e) = *rng.pick(&spans);
            // Mostly a value of the same shape (a number for a number, a string for a string),
            // so that the case gets past the schema to the checks and the run.
            let old = &text[s..e];
            let same: Vec<&str> = VALUES
                .iter()
                .copied()
                .filter(|v| {
                    v.as_bytes()[0] == old.as_bytes()[0] || (is_number(v) && is_number(old))
                })
                .collect();
            let v = if same.is_empty() || rng.below(6) == 0 {
                rng.pick(VALUES)
            } else {
                rng.pick(&same)
            };
            (
                format!("{}{}{}", &text[..s], v, &text[e..]),
                format!("value `{}` -> `{v}`", &text[s..e]),
            )
        }
        14 | 15 => {
            let i = rng.below(lines.len().max(1));
            let mut l = lines.clone();
            if !l.is_empty() {
                l.remove(i);
            }
            (l.join("\n"), format!("delete line {}", i + 1))
        }
        16 => {
            let i = rng.below(lines.len().max(1));
            let mut l = lines.clone();
            if let Some(x) = lines.get(i) {
                l.insert(i, x);
            }
            (l.join("\n"), format!("duplicate line {}", i + 1))
        }
        17 => {
            let (i, j) = (rng.below(lines.len().max(1)), rng.below(lines.len().max(1)));
            let mut l = lines.clone();
            if !l.is_empty() {
                l.swap(i, j);
            }
            (l.join("\n"), format!("swap lines {} {}", i + 1, j + 1))
        }
        18 => {
            let own = keys(text);
            if own.is_empty() || all_keys.is_empty() {
                return (text.to_string(), "none".into());
            }
            let from = rng.pick(&own).clone();
            let to = rng.pick(all_keys);
            let at = text.find(&format!("{from} =")).unwrap_or(0);
            let mut t = text.to_string();
            if text[at..].starts_with(&from) {
                t.replace_range(at..at + from.len(), to);
            }
            (t, format!("key `{from}` -> `{to}`"))
        }
        _ => {
            let mut at = rng.below(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            if rng.below(2) == 0 {
                (text[..at].to_string(), format!("truncate at {at}"))
            } else {
                let c = *rng.pick(&["[", "]", "\"", "=", "\n", "{", "#", "0", "-", "\0", "é"]);
                (
                    format!("{}{c}{}", &text[..at], &text[at..]),
                    format!("insert {c:?} at {at}"),
                )
            }
        }
    }
}

/// How a case ended, when it did not panic.
#[derive(Debug)]
enum End {
    Ran,
    Input(InputError),
    Refused,
    /// A bug of dmasim's, found by the model (its message).
    Bug(String),
}

/// Parse, override, check and run one scenario (on `profile` when given), rendering the result
/// in every format: the library path of `dmasim run`.
fn parse_then_run(
    file: &str,
    text: &str,
    profile: Option<&str>,
    kernel: Option<&str>,
    policy: Option<&str>,
) -> End {
    let go = || -> Result<(), RunError> {
        let mut s = Scenario::parse(file, text, Path::new("."))?;
        if let Some(p) = profile {
            s.set_profile(Profile::parse("p.toml", p)?)?;
        }
        if let Some(k) = kernel {
            s.set_kernel_str(k)?;
        }
        if let Some(p) = policy {
            s.set_policies(p)?;
        }
        let _ = s.profile.unpriced_sw_warning(&s.sw_keys(), "the case");
        s.check_work(CASE_WORK)?;
        let outcome = scenario::execute(&s)?;
        let _ = outcome.table();
        let _ = outcome.json();
        let _ = dmasim::report::folded(outcome.stacks());
        Ok(())
    };
    match go() {
        Ok(()) => End::Ran,
        Err(RunError::Input(e)) => End::Input(e),
        Err(RunError::Refused(_)) => End::Refused,
        Err(RunError::Internal(b)) => End::Bug(b.to_string()),
    }
}

/// Values at the edges of their documented ranges, in combinations the mutations rarely reach,
/// each of which once overflowed (or could): they must run, or be refused, without a panic.
#[test]
fn edge_values_run_or_are_refused_without_overflow() {
    let streaming_behind_iommu = |buffer: &str, entry: &str, calls: &str| {
        format!(
            "[scenario]\nname = \"edge\"\nplatform = \"sm8150\"\nkernel = \"5.15\"\n\
             [device]\nname = \"d\"\ncoherent = false\ndma_mask_bits = 64\n\
             [iommu]\ngranule = \"4K\"\nias = 48\n\
             [workload]\nkind = \"streaming\"\nbuffer = \"{buffer}\"\nentry = \"{entry}\"\n\
             direction = \"bidirectional\"\ncalls = \"{calls}\"\niterations = 2\n"
        )
    };
    // Entries longer than iommu-dma's max_seg_size (64 KiB): __finalise_sg's unsigned
    // `max_len - cur_len` wraps, as in the kernel (it overflowed in the model's u64).
    for (buffer, entry) in [("4G", "1G"), ("2G", "1G"), ("1M", "128K")] {
        for calls in ["map_sg+unmap_sg", "sync_sg_for_device+for_cpu"] {
            let text = streaming_behind_iommu(buffer, entry, calls);
            let s = Scenario::parse("edge.toml", &text, Path::new(".")).unwrap();
            s.check_work(1_000_000_000).unwrap();
            let r = std::panic::catch_unwind(|| scenario::execute(&s).map(|o| o.json()));
            assert!(
                matches!(r, Ok(Ok(_))),
                "{buffer} in {entry} entries, {calls}: {:?}",
                r.map(|x| x.err())
            );
        }
    }
}

#[test]
fn overflow_checks_are_on() {
    let x: u8 = std::hint::black_box(255);
    let r = std::panic::catch_unwind(|| std::hint::black_box(x) + 1);
    assert!(
        r.is_err(),
        "overflow checks are off: the mutation test would not see an overflow"
    );
}

#[test]
fn mutated_shipped_files_end_in_a_result_or_an_error_never_a_panic() {
    // Panics are caught per case; the hook records where each happened instead of printing.
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = panics.clone();
    let quiet = std::thread::current().id();
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() == quiet {
            seen.lock().unwrap().push(info.to_string());
        } else {
            prev(info);
        }
    }));

    let started = std::time::Instant::now();
    let all_keys: Vec<String> = SCENARIOS
        .iter()
        .chain(PROFILES)
        .flat_map(|(_, t)| keys(t))
        .collect();
    let seeds: Vec<(&str, String)> = SCENARIOS.iter().map(|(n, t)| (*n, shrink(t))).collect();
    let mut rng = Rng(0x646d_6173_696d);
    let mut failures = Vec::new();
    let (mut ran, mut input, mut refused, mut whole) = (0u64, 0u64, 0u64, 0u64);
    let mut keyless = Vec::new();
    let mut slowest = (std::time::Duration::ZERO, String::new());
    for case in 0..SCENARIO_CASES + PROFILE_CASES {
        let on_profile = case >= SCENARIO_CASES;
        let (name, seed) = rng.pick(&seeds).clone();
        let mut scenario_text = seed.clone();
        let mut profile_text = None;
        let mut what = Vec::new();
        if on_profile {
            // A mutated copy of the profile the chosen scenario names.
            let (pname, ptext) = PROFILES
                .iter()
                .find(|(p, _)| seed.contains(&format!("platform = \"{}\"", &p[..p.len() - 5])))
                .expect("every shipped scenario runs on a shipped profile");
            let mut p = ptext.to_string();
            for _ in 0..1 + rng.below(3) {
                let (t, w) = mutate(&mut rng, &p, &all_keys);
                p = t;
                what.push(format!("{pname}: {w}"));
            }
            profile_text = Some(p);
        } else {
            for _ in 0..1 + rng.below(3) {
                let (t, w) = mutate(&mut rng, &scenario_text, &all_keys);
                scenario_text = t;
                what.push(w);
            }
        }
        let kernel = (rng.below(5) == 0).then(|| *rng.pick(KERNELS));
        let policy = (rng.below(5) == 0).then(|| *rng.pick(POLICIES));
        let t0 = std::time::Instant::now();
        let end = std::panic::catch_unwind(|| {
            parse_then_run(
                name,
                &scenario_text,
                profile_text.as_deref(),
                kernel,
                policy,
            )
        });
        let took = t0.elapsed();
        let label = format!(
            "case {case} ({name}; {}; kernel {kernel:?}; policy {policy:?})",
            what.join("; ")
        );
        if took > slowest.0 {
            slowest = (took, label.clone());
        }
        match end {
            Ok(End::Ran) => ran += 1,
            Ok(End::Refused) => refused += 1,
            Ok(End::Bug(b)) => failures.push(format!("{label}: {b}")),
            Ok(End::Input(e)) => {
                input += 1;
                // What the file shows names its line or key; only the run as a whole (its
                // work, its clock) and command-line overrides have no key to name.
                let whole_run = e.message.contains("model steps") || e.message.contains("2^64 ps");
                if e.key.is_none() && e.line.is_none() && e.file != "<argument>" {
                    if whole_run {
                        whole += 1;
                    } else {
                        keyless.push(format!("{label}: {e}"));
                    }
                }
            }
            Err(_) => {
                let msg = panics.lock().unwrap().pop().unwrap_or_default();
                failures.push(format!("{label}: {msg}"));
            }
        }
    }
    let _ = std::panic::take_hook();
    let total = SCENARIO_CASES + PROFILE_CASES;
    eprintln!(
        "{total} cases in {:.1?}: {ran} ran, {input} input errors ({whole} about the run as a whole), {refused} refused, {} panicked or met a bug; slowest {:.1?}: {}",
        started.elapsed(),
        failures.len(),
        slowest.0,
        slowest.1
    );
    assert!(
        failures.is_empty(),
        "{} of {total} cases panicked or met a bug:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        keyless.is_empty(),
        "{} input errors name no line and no key:\n{}",
        keyless.len(),
        keyless
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The mutations must reach the runners, not only the parsers, or the test proves little.
    assert!(ran >= total / 10, "only {ran} of {total} cases ran");
    assert!(
        input >= total / 10,
        "only {input} of {total} cases were refused as input"
    );
}

/// The replay's fixtures, as the seeds of the trace cases.
const TRACES: &[(&str, &str)] = &[
    ("v6.12.txt", include_str!("data/traces/v6.12.txt")),
    ("v6.13.txt", include_str!("data/traces/v6.13.txt")),
    ("v6.18.txt", include_str!("data/traces/v6.18.txt")),
    ("capped-sg.txt", include_str!("data/traces/capped-sg.txt")),
    ("misuse.txt", include_str!("data/traces/misuse.txt")),
    ("iommu.txt", include_str!("data/traces/iommu.txt")),
];
const TRACE_CASES: u64 = 4000;
/// Field values a trace line may carry at the edges: zero, all ones, sizes past any memory,
/// unaligned and negative numbers, no digits at all.
const TRACE_VALUES: &[&str] = &[
    "0",
    "ffffffffffffffff",
    "18446744073709551615",
    "fffffffffffff000",
    "1",
    "-1",
    "4294967296",
    "7fffffffffffffff",
    "",
    "{}",
    "{0x0}",
    "{0xffffffffffffffff,0x1}",
    "NONE",
    "BIDIRECTIONAL",
];

/// One mutation of a trace: a field's value replaced, a line deleted, duplicated or swapped
/// with another, the text cut short, or a byte inserted.
fn mutate_trace(rng: &mut Rng, text: &str) -> (String, String) {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let n = lines.len().max(1);
    match rng.below(6) {
        0 | 1 => {
            let i = rng.below(n);
            let Some(line) = lines.get(i).cloned() else {
                return (text.to_string(), "nothing".into());
            };
            let fields: Vec<(usize, usize)> = line
                .match_indices('=')
                .map(|(at, _)| {
                    let end = line[at + 1..].find(' ').map_or(line.len(), |e| at + 1 + e);
                    (at + 1, end)
                })
                .collect();
            if fields.is_empty() {
                return (text.to_string(), "nothing".into());
            }
            let (a, b) = *rng.pick(&fields);
            let v = *rng.pick(TRACE_VALUES);
            lines[i] = format!("{}{v}{}", &line[..a], &line[b..]);
            (
                lines.join("\n"),
                format!("line {}: a value -> `{v}`", i + 1),
            )
        }
        2 => {
            let i = rng.below(n);
            if i < lines.len() {
                lines.remove(i);
            }
            (lines.join("\n"), format!("line {} deleted", i + 1))
        }
        3 => {
            let i = rng.below(n);
            if let Some(l) = lines.get(i).cloned() {
                lines.insert(i, l);
            }
            (lines.join("\n"), format!("line {} doubled", i + 1))
        }
        4 => {
            let (i, j) = (rng.below(n), rng.below(n));
            if i < lines.len() && j < lines.len() {
                lines.swap(i, j);
            }
            (
                lines.join("\n"),
                format!("lines {} and {} swapped", i + 1, j + 1),
            )
        }
        _ => {
            let cut = rng.below(text.len().max(1));
            let cut = (0..=cut)
                .rev()
                .find(|&c| text.is_char_boundary(c))
                .unwrap_or(0);
            (text[..cut].to_string(), format!("cut at byte {cut}"))
        }
    }
}

/// Mutated traces through the whole replay (read, checks, pairing, the model, the report) on
/// each release and on platforms with and without an SMMU: a result or an input error, never a
/// panic.
#[test]
fn mutated_traces_end_in_a_result_or_an_error_never_a_panic() {
    let dir = std::env::temp_dir().join(format!("dmasim-mutation-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("case.txt");
    let mut rng = Rng(0x0074_7261_6365);
    let (mut ran, mut failures) = (0u64, Vec::new());
    for _ in 0..TRACE_CASES {
        let (name, seed) = *rng.pick(TRACES);
        let mut text = seed.to_string();
        let mut what = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let (t, w) = mutate_trace(&mut rng, &text);
            text = t;
            what.push(w);
        }
        let kernel = *rng.pick(&["7.1", "7.0", "6.1", "5.4", "4.19"]);
        let platform = *rng.pick(&["dimensity9500", "sm8150", "kunpeng920"]);
        std::fs::write(&path, &text).unwrap();
        let end = std::panic::catch_unwind(|| -> Result<(), RunError> {
            let source = (
                "case.txt".to_string(),
                dmasim::scenario::replay::scenario_text("case.txt"),
                dir.clone(),
            );
            let mut s = Scenario::load_source_on(source, &[], Some(platform))?;
            s.set_kernel_str(kernel)?;
            s.check_work(CASE_WORK)?;
            let o = scenario::execute(&s)?;
            let _ = o.table();
            let _ = o.json();
            Ok(())
        });
        match end {
            Ok(Ok(())) => ran += 1,
            Ok(Err(RunError::Internal(b))) => failures.push(format!(
                "{name} on {platform} {kernel}: {}: {b}",
                what.join("; ")
            )),
            Ok(Err(_)) => {}
            Err(_) => failures.push(format!(
                "{name} on {platform} {kernel}: {}",
                what.join("; ")
            )),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        failures.is_empty(),
        "panics or bugs:\n{}",
        failures.join("\n")
    );
    // Most mutations leave a trace that still replays: the cases reach the model.
    assert!(ran > TRACE_CASES / 3, "{ran} of {TRACE_CASES} ran");
}
