//! Replaying a traced driver: what the trace's calls cost on the model equals what the same
//! calls written by hand as a scenario cost, and each fixture replays every call it holds.

use dmasim::policy::KernelVersion;
use dmasim::scenario::{Outcome, Scenario, execute};

const STREAMING_BY_HAND: &str = r#"
[scenario]
name = "by-hand"
platform = "dimensity9500"
kernel = "7.1"
[device]
name = "1c0e000.isp"
coherent = false
dma_mask_bits = 64
[workload]
kind = "streaming"
buffer = "512K"
entry = "4K"
direction = "bidirectional"
calls = "map_sg+unmap_sg"
iterations = 10
"#;

fn replayed(kernel: KernelVersion) -> dmasim::scenario::replay::RunResult {
    let mut s = Scenario::load("tests/data/traces/streaming-4k.toml").unwrap();
    s.set_kernel(kernel).unwrap();
    match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        other => panic!(
            "a replay result, got {:?}",
            other.map(|o| o.info().scenario.clone())
        ),
    }
}

/// The streaming fixture (a camera driver's map_sg / unmap_sg of 128 entries of 4 KB, 10
/// times) costs per call exactly what the hand-written streaming scenario of the same list
/// costs, under 7.0 (a barrier per entry) and 7.1 (one per list): the change per call is the
/// same to the last digit.
#[test]
fn a_traced_streaming_driver_costs_what_the_same_loop_by_hand_costs() {
    for k in [KernelVersion(7, 0), KernelVersion(7, 1)] {
        let mut s =
            Scenario::parse("by-hand.toml", STREAMING_BY_HAND, std::path::Path::new(".")).unwrap();
        s.set_kernel(k).unwrap();
        let by_hand = match execute(&s) {
            Ok(Outcome::Streaming(r)) => r,
            _ => panic!("a streaming result"),
        };
        let r = replayed(k);
        assert_eq!(r.devices.len(), 1);
        let d = &r.devices[0];
        assert_eq!(d.calls.len(), 2);
        for c in &d.calls {
            let h = by_hand.call(c.call).unwrap();
            assert_eq!(
                (c.count, c.total_ps),
                (h.count, h.total_ps),
                "{k} {}",
                c.call
            );
        }
        assert_eq!(r.total_ps, by_hand.total_ps, "{k}");
        assert_eq!(r.counts, by_hand.counts, "{k}");
    }
}

#[test]
fn every_call_of_the_streaming_fixture_is_replayed() {
    let r = replayed(KernelVersion(7, 1));
    let d = &r.devices[0];
    let counts: Vec<(&str, u64)> = d.calls.iter().map(|c| (c.call, c.count)).collect();
    assert_eq!(counts, [("dma_map_sg", 10), ("dma_unmap_sg", 10)]);
    assert!(d.unresolved.is_empty());
    assert_eq!(d.skipped_after_refusal, 0);
    assert!(r.findings.is_empty());
}

fn replay_of(file: &str) -> dmasim::scenario::replay::RunResult {
    let s = Scenario::load(file).unwrap();
    match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        _ => panic!("{file}: a replay result"),
    }
}

fn counts(d: &dmasim::scenario::replay::DeviceResult) -> Vec<(&'static str, u64)> {
    d.calls.iter().map(|c| (c.call, c.count)).collect()
}

/// One fixture per generation of the print formats: 6.12's first events (`dma_map_page`,
/// alloc without `dir=`), 6.13's `dir=` on alloc and free, 6.18's `dma_map_phys`. Every call is
/// rebuilt, none is left out: each of the mapping API is replayed on the model, and the
/// coherent allocation and its free are counted with their bytes (the model does not time
/// them).
#[test]
fn each_print_format_generation_replays_every_call() {
    for f in ["v6.12", "v6.13", "v6.18"] {
        let r = replay_of(&format!("tests/data/traces/{f}.txt"));
        assert_eq!(r.devices.len(), 1, "{f}");
        let d = &r.devices[0];
        assert_eq!(
            counts(d),
            [
                ("dma_map_page", 1),
                ("dma_map_sg", 1),
                ("dma_sync_sg_for_cpu", 1),
                ("dma_sync_single_for_device", 1),
                ("dma_unmap_sg", 1),
                ("dma_unmap_page", 1),
            ],
            "{f}"
        );
        assert_eq!(
            d.untimed,
            [("dma_alloc", 1, 8192), ("dma_free", 1, 8192)],
            "{f}"
        );
        assert!(d.unresolved.is_empty(), "{f}: {:?}", d.unresolved);
        assert_eq!(d.skipped_after_refusal, 0, "{f}");
        assert!(d.calls.iter().all(|c| c.errors == 0), "{f}");
    }
}

/// The capped `dma_map_sg`: a list of 130 entries printed with its first 128 and
/// `[TRUNCATED]` is paired with its unmap, which lists all 130, and replayed whole from it, the
/// two entries the map did not print as long as the last printed one; without the unmap it
/// is replayed with the 128 it printed. Either way the report counts it.
#[test]
fn a_truncated_list_is_completed_from_its_unmap_or_replayed_as_printed() {
    let r = replay_of("tests/data/traces/capped-sg.txt");
    let d = &r.devices[0];
    assert_eq!(counts(d), [("dma_map_sg", 2), ("dma_unmap_sg", 2)]);
    assert_eq!((d.truncated, d.completed), (1, 1));
    assert!(d.unresolved.is_empty());
    // 2 + 130 entries of 4 KB.
    assert_eq!(d.bytes, [132 * 4096, 132 * 4096]);

    let text = std::fs::read_to_string("tests/data/traces/capped-sg.txt").unwrap();
    let dir = std::env::temp_dir().join(format!("dmasim-capped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut: String = text
        .lines()
        .filter(|l| !l.contains("dir=TO_DEVICE phys_addrs"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("no-unmap.txt");
    std::fs::write(&path, cut).unwrap();
    let r = replay_of(path.to_str().unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    let d = &r.devices[0];
    assert_eq!(counts(d), [("dma_map_sg", 2), ("dma_unmap_sg", 1)]);
    assert_eq!((d.truncated, d.completed), (1, 0));
    assert_eq!(d.bytes[0], 130 * 4096);
}

/// The JSON document a run that must succeed printed.
fn json_of(o: &std::process::Output) -> serde_json::Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A command that must be refused as bad input (exit 2) with `message` in its error.
fn refused(args: &[&str], message: &str) {
    let o = dmasim(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(message), "{args:?}: {err}");
}

fn dmasim(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// A trace with one of each misuse debug.c reports gives exactly one finding of each kind,
/// naming its lines; `--check` turns them into exit status 4, and without it they are warnings.
/// What is mapped at the end is live at the end, and what the trace never saw mapped was
/// mapped before it began, no misuse either, unless `--strict-window` says the trace is the
/// driver's whole life: then they are a leak and not-mapped, misuses.
#[test]
fn each_misuse_is_one_finding_naming_its_lines_and_check_exits_4() {
    let o = dmasim(&["replay", "tests/data/traces/misuse.txt", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let found: Vec<(String, Vec<u64>)> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let lines = f["lines"].as_array().unwrap();
            (
                f["kind"].as_str().unwrap().to_string(),
                lines.iter().map(|l| l.as_u64().unwrap()).collect(),
            )
        })
        .collect();
    let want: Vec<(String, Vec<u64>)> = [
        ("sync-outside-mapping", vec![2, 3]),
        ("sync-direction", vec![2, 4]),
        ("size-mismatch", vec![2, 5]),
        ("direction-mismatch", vec![2, 5]),
        ("double-unmap", vec![5, 6]),
        ("mapped-before", vec![7]),
        ("cacheline-overlap", vec![8, 9]),
        ("map-error", vec![11]),
        ("live-at-end", vec![9]),
    ]
    .into_iter()
    .map(|(k, l)| (k.to_string(), l))
    .collect();
    assert_eq!(found, want);
    let o = dmasim(&["replay", "tests/data/traces/misuse.txt", "--check"]);
    assert_eq!(o.status.code(), Some(4));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("line 8, 9: 0000:02:00.0 cacheline-overlap"),
        "{out}"
    );
    assert!(
        out.contains("live at the end of the trace (")
            && out.contains("line 9: 0000:02:00.0 live-at-end: mapping of 100 bytes"),
        "{out}"
    );
    assert!(
        out.contains("mapped before the trace began (")
            && out.contains("line 7: 0000:02:00.0 mapped-before: unmap of 0x80009000"),
        "{out}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("7 misuses"), "{err}");
    let strict = &[
        "replay",
        "tests/data/traces/misuse.txt",
        "--check",
        "--strict-window",
    ];
    let o = dmasim(strict);
    assert_eq!(o.status.code(), Some(4));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("line 9: 0000:02:00.0 leak: mapping of 100 bytes")
            && out.contains("line 7: 0000:02:00.0 not-mapped: unmap of 0x80009000"),
        "{out}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("9 misuses"));
}

/// Bad input: a binary trace, a line that stops short, an event without a field it must have,
/// a device the trace does not name: one message naming the file (and line), exit 2.
#[test]
fn bad_traces_and_devices_exit_2_with_one_message() {
    let dir = std::env::temp_dir().join(format!("dmasim-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dat = dir.join("trace.dat");
    std::fs::write(&dat, b"\x17\x08\x44tracing6\0\0\0\0").unwrap();
    let cut = dir.join("cut.txt");
    std::fs::write(
        &cut,
        "a-1 [000] 1.000000: dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=40\n\
         a-1 [000] 1.000001: dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 si",
    )
    .unwrap();
    let missing = dir.join("missing.txt");
    std::fs::write(
        &missing,
        "a-1 [000] 1.000000: dma_map_phys: dev dir=TO_DEVICE size=64 phys_addr=1000 attrs=\n",
    )
    .unwrap();
    let cases: [(&[&str], &str); 4] = [
        (&[dat.to_str().unwrap()], "trace-cmd report"),
        (&[cut.to_str().unwrap()], ":2"),
        (&[missing.to_str().unwrap()], "dma_addr"),
        (
            &[
                "tests/data/traces/v6.18.txt",
                "--device",
                "0000:09:00.0:coherent=yes",
            ],
            "0000:09:00.0",
        ),
    ];
    for (args, says) in cases {
        let mut a = vec!["replay"];
        a.extend_from_slice(args);
        let o = dmasim(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A real capture (linux-wireless, ath12k on 6.12.35): 6.12.y's alloc and free without `dir=`,
/// the newer `iommu:map`/`unmap` with an IOVA range, and another event's line, all read; the
/// buffer allocated and freed whole is no finding; the allocation and free are counted, not
/// replayed, and the page fault's line is skipped by name.
#[test]
fn a_real_ath12k_capture_reads_and_checks_clean() {
    // Its calls ran on CPUs 10 and 11: a platform with them replays each on its own.
    let s = Scenario::load_on(
        "tests/data/traces/ath12k-6.12.35.txt",
        &[],
        Some("kunpeng920"),
    )
    .unwrap();
    let r = match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        _ => panic!("a replay result"),
    };
    assert_eq!(r.replayed_on_cpus, 2);
    assert_eq!(r.devices.len(), 1);
    let d = &r.devices[0];
    assert_eq!(d.name, "0000:c2:00.0");
    assert_eq!(d.calls.len(), 0);
    assert_eq!(
        d.untimed,
        [("dma_alloc", 1, 524_288), ("dma_free", 1, 524_288)]
    );
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.skipped.get("io_page_fault"), Some(&1));
    let text = std::fs::read_to_string("tests/data/traces/ath12k-6.12.35.txt").unwrap();
    let t = dmasim::trace::parse("ath12k.txt", &text).unwrap();
    let iommu: Vec<&dmasim::trace::Event> = t
        .records
        .iter()
        .map(|r| &r.event)
        .filter(|e| {
            matches!(
                e,
                dmasim::trace::Event::IommuMap { .. } | dmasim::trace::Event::IommuUnmap { .. }
            )
        })
        .collect();
    assert_eq!(
        iommu,
        [
            &dmasim::trace::Event::IommuMap {
                iova: 0xfe98_0000,
                paddr: 0x1_0ec8_0000,
                size: 524_288
            },
            &dmasim::trace::Event::IommuUnmap {
                iova: 0xfe98_0000,
                size: 524_288,
                unmapped: 524_288
            },
        ]
    );
}

/// A real capture of `swiotlb_bounced` (QEMU's edu device, 32-bit mask) under tracefs's full
/// header: the device is seen bouncing, at its first such line.
#[test]
fn a_real_swiotlb_capture_shows_the_device_bouncing() {
    let text = std::fs::read_to_string("tests/data/traces/swiotlb-edu.txt").unwrap();
    let t = dmasim::trace::parse("swiotlb-edu.txt", &text).unwrap();
    let d = t.devices();
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].name.as_str(), d[0].bounced_at),
        ("0000:00:0a.0", Some(15))
    );
    assert!(t.skipped.is_empty());
}

/// A device table's `granule` gives the device's IOMMU domain its page size: a 64 KB granule
/// maps the same trace with other page-table work than 4 KB; another size is refused, exit 2.
#[test]
fn a_device_granule_sets_its_domains_page_size() {
    let run = |granule: &str| {
        let o = dmasim(&[
            "replay",
            "tests/data/traces/iommu.txt",
            "--platform",
            "sm8150",
            "-q",
            "--format",
            "json",
            "--device",
            &format!("a600000.usb:granule={granule}"),
        ]);
        json_of(&o)["devices"][0]["calls"][0]["total_ns"]
            .as_f64()
            .unwrap()
    };
    assert_ne!(run("4K"), run("64K"));
    let o = dmasim(&[
        "replay",
        "tests/data/traces/iommu.txt",
        "--platform",
        "sm8150",
        "--device",
        "a600000.usb:granule=8K",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("4K, 16K or 64K"));
}

/// `dmasim replay FILE --check --format json` of a trace with no misuse: it exits 0 with no
/// finding; its document.
fn checks_clean(file: &str) -> serde_json::Value {
    let o = dmasim(&["replay", file, "--check", "--format", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("{file}: {e}: {}", String::from_utf8_lossy(&o.stderr));
    });
    assert_eq!(o.status.code(), Some(0), "{file}: {doc}");
    assert_eq!(doc["findings"], serde_json::json!([]), "{file}");
    doc
}

/// The calls a replay document shows for its first device, by name and count.
fn doc_counts(doc: &serde_json::Value) -> Vec<(String, u64)> {
    doc["devices"][0]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = c["call"].as_str().unwrap().to_string();
            (name, c["count"].as_u64().unwrap())
        })
        .collect()
}

/// A list longer than the 128 entries its map prints: its unmap, which lists them all, makes
/// it whole, so a sync of every entry and of one past the printed ones are of a live mapping,
/// and the unmap ends it. No finding, `--check` exits 0, and every call is replayed; the
/// project's first capped fixture checks clean too.
#[test]
fn a_capped_list_synced_past_its_printed_entries_checks_clean() {
    let doc = checks_clean("tests/data/traces/capped-160.txt");
    let d = &doc["devices"][0];
    assert_eq!(d["not_replayed_count"], 0, "{d}");
    assert_eq!(
        (&d["truncated_lists"], &d["completed_lists"]),
        (&1.into(), &1.into())
    );
    let bytes: Vec<u64> = d["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["bytes"].as_u64().unwrap())
        .collect();
    // The list's 160 entries of 4 KB, and the one entry synced alone.
    assert_eq!(bytes, [160 * 4096, 160 * 4096, 4096, 160 * 4096]);
    checks_clean("tests/data/traces/capped-sg.txt");
}

/// One buffer mapped twice at one DMA address by a device without an IOMMU, and unmapped
/// twice: each unmap ends one of the two mappings, as debug.c's hash bucket holds both. No
/// finding, and both pairs are replayed.
#[test]
fn a_buffer_mapped_twice_and_unmapped_twice_checks_clean() {
    let doc = checks_clean("tests/data/traces/mapped-twice.txt");
    assert_eq!(
        doc_counts(&doc),
        [
            ("dma_map_page".to_string(), 2),
            ("dma_unmap_page".to_string(), 2)
        ]
    );
}

/// A `dma_map_phys` traced at DMA_MAPPING_ERROR failed: it is no map (named as refused, not
/// replayed), no leak at the end, and no sign of an IOMMU (its address differs from its
/// physical one only because it failed): the device stays dma-direct.
#[test]
fn a_failed_map_is_no_map_no_leak_and_no_iommu() {
    let doc = checks_clean("tests/data/traces/failed-map.txt");
    let d = &doc["devices"][0];
    assert_eq!(d["dma_ops"], "dma-direct", "{d}");
    assert_eq!(d["inferred"], serde_json::json!([]));
    assert_eq!(
        doc_counts(&doc),
        [
            ("dma_map_page".to_string(), 1),
            ("dma_sync_single_for_cpu".to_string(), 1),
            ("dma_unmap_page".to_string(), 1),
        ]
    );
    assert_eq!(d["not_replayed_count"], 1);
    assert_eq!(d["not_replayed"][0]["line"], 4);
    assert_eq!(
        d["not_replayed"][0]["why"],
        "a map the traced kernel refused"
    );
}

/// A trace is a window on a running driver: mappings still live at its end are reported as
/// live at the end, and `--check` exits 0 for them; `--strict-window` makes them leaks, exit 4.
#[test]
fn mappings_live_at_the_end_fail_the_check_only_in_a_strict_window() {
    let text = std::fs::read_to_string("tests/data/traces/mapped-twice.txt").unwrap();
    let maps: String = text
        .lines()
        .filter(|l| !l.contains("dma_unmap_phys"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = std::env::temp_dir().join(format!("dmasim-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("maps-only.txt");
    std::fs::write(&path, maps).unwrap();
    let file = path.to_str().unwrap();
    let o = dmasim(&["replay", file, "--check", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["live-at-end", "live-at-end"]);
    let o = dmasim(&["replay", file, "--check", "--strict-window"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 misuses"));
}

/// A fresh directory under the system's temporary one, for inputs a test makes.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dmasim-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const MAP_LINE: &str =
    "dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=";
const UNMAP_LINE: &str = "dma_unmap_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 attrs=";

/// Input no trace reader should take whole or silently: `/dev/zero` named as a scenario's
/// trace, a 100 MB line, a byte that is not UTF-8, an empty file, a trace without DMA events.
/// Each exits 2 with one short line naming the file and the line, in bounded memory and time.
#[test]
fn hostile_traces_exit_2_with_one_short_message_naming_file_and_line() {
    let dir = scratch("hostile");
    let zero = dir.join("zero.toml");
    std::fs::write(
        &zero,
        "[scenario]\nname = \"zero\"\nplatform = \"dimensity9500\"\n\n[workload]\nkind = \"replay\"\ntrace = \"/dev/zero\"\n",
    )
    .unwrap();
    // A 100 MB field on one line, with no newline: made here, never committed.
    let big = dir.join("big.txt");
    let mut line = format!("a-1 [000] 1.000000: {MAP_LINE}").into_bytes();
    line.splice(
        line.len() - " attrs=".len()..line.len() - " attrs=".len(),
        std::iter::repeat_n(b'f', 100 << 20),
    );
    std::fs::write(&big, &line).unwrap();
    drop(line);
    let bytes = dir.join("bytes.txt");
    std::fs::write(
        &bytes,
        [
            format!("a-1 [000] 1.000000: {MAP_LINE}\n").as_bytes(),
            b"a-1 [000] 1.000001: dma_unmap_phys: d\xffv dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n",
        ]
        .concat(),
    )
    .unwrap();
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let names_empty = dir.join("names-empty.toml");
    let scenario = std::fs::read_to_string(&zero).unwrap();
    std::fs::write(&names_empty, scenario.replace("/dev/zero", "empty.txt")).unwrap();
    let no_dma = dir.join("no-dma.txt");
    std::fs::write(
        &no_dma,
        "# tracer: nop\n#\nkworker/0:1-12 [000] 1.000000: sched_switch: prev_comm=a\nqemu-9 [001] 1.000001: kvm_exit: reason=HLT\n",
    )
    .unwrap();
    let p = |f: &std::path::Path| f.to_str().unwrap().to_string();
    let cases = [
        (p(&zero), format!("{}:7:", p(&zero)), "not a regular file"),
        (p(&big), format!("{}:1:", p(&big)), "longer than 1 MiB"),
        (p(&bytes), format!("{}:2:", p(&bytes)), "not UTF-8"),
        (p(&empty), format!("{}:1:", p(&empty)), "empty"),
        (p(&names_empty), format!("{}:7:", p(&names_empty)), "empty"),
        (
            p(&no_dma),
            format!("{}:4:", p(&no_dma)),
            "trace-cmd record -e dma",
        ),
    ];
    for (file, at, says) in cases {
        let o = dmasim(&["replay", &file]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{file}: {err}");
        assert_eq!(err.lines().count(), 1, "{file}: {err}");
        assert!(err.len() < 300, "{file}: {} bytes: {err}", err.len());
        assert!(err.starts_with(&format!("error: {at}")), "{file}: {err}");
        assert!(err.contains(says), "{file}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A value too long to be one is quoted by its start and length, not copied whole.
#[test]
fn a_long_bad_value_is_quoted_short() {
    let dir = scratch("long-value");
    let long = dir.join("long.txt");
    let map = MAP_LINE.replace(
        "dma_addr=1000",
        &format!("dma_addr={}", "z".repeat(100_000)),
    );
    std::fs::write(&long, format!("a-1 [000] 1.000000: {map}\n")).unwrap();
    let o = dmasim(&["replay", long.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.len() < 300 && err.contains(":1: key `dma_map_phys.dma_addr`"),
        "{err}"
    );
    assert!(err.contains("(100000 bytes)"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A task is named by any text before its `-PID [CPU]`: QEMU's vCPU threads (`CPU 0/KVM`)
/// are read; and `perf script` output whose first 64 KiB are other events is still a trace.
#[test]
fn a_vcpu_thread_and_a_late_first_dma_event_are_read() {
    let dir = scratch("layouts");
    let kvm = dir.join("kvm.txt");
    std::fs::write(
        &kvm,
        format!("CPU 0/KVM-4321 [002] ..... 1.000000: {MAP_LINE}\nCPU 0/KVM-4321 [002] ..... 1.000001: {UNMAP_LINE}\n"),
    )
    .unwrap();
    let perf = dir.join("perf.txt");
    let mut text =
        "  qemu  4321 [002]  4567.000000001:  sched:sched_switch: prev_comm=a\n".repeat(2000);
    text.push_str(&format!("  app  9123 [002]  4567.100000000:  dma:{MAP_LINE}\n  app  9123 [002]  4567.200000000:  dma:{UNMAP_LINE}\n"));
    assert!(text.len() > 64 << 10);
    std::fs::write(&perf, text).unwrap();
    for f in [&kvm, &perf] {
        let o = dmasim(&["replay", f.to_str().unwrap(), "--format", "json"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{f:?}: {err}");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let calls: u64 = doc_counts(&doc).iter().map(|(_, n)| n).sum();
        assert_eq!(calls, 2, "{f:?}: {doc}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The replay reads its trace twice: a trace that grows between the reads (a capture still
/// being written) is refused as bad input, rather than replaying calls the first read did not
/// pair or failing as the modelled kernel's refusal.
#[test]
fn a_trace_that_grows_between_its_reads_is_refused() {
    let dir = scratch("grows");
    let trace = dir.join("grows.txt");
    let first = format!("a-1 [000] 1.000000: {MAP_LINE}\na-1 [000] 1.000001: {UNMAP_LINE}\n");
    std::fs::write(&trace, &first).unwrap();
    let s = Scenario::load(trace.to_str().unwrap()).unwrap();
    std::fs::write(&trace, format!("{first}a-1 [000] 1.000002: {MAP_LINE}\n")).unwrap();
    match execute(&s) {
        Err(dmasim::scenario::RunError::Input(e)) => {
            assert!(e.file.ends_with("grows.txt"), "{e}");
            assert!(e.message.contains("changed"), "{e}");
        }
        Err(e) => panic!("bad input, got {e}"),
        Ok(_) => panic!("the grown trace replayed"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A page pool's worth of buffers live at the end, and as many syncs of nothing: every finding
/// is counted by kind, the first hundred of each listed, and the report says how many more.
#[test]
fn findings_are_counted_by_kind_and_listed_up_to_a_bound() {
    let mut text = String::from("# tracer: nop\n");
    for i in 0..300u64 {
        let a = 0x8000_0000 + i * 0x1000;
        text.push_str(&format!(
            "napi-1 [000] 1.{i:06}: dma_map_phys: nic dir=FROM_DEVICE dma_addr={a:x} size=2048 phys_addr={a:x} attrs=\n"
        ));
    }
    for i in 0..150u64 {
        let a = 0x9000_0000 + i * 0x1000;
        text.push_str(&format!(
            "napi-1 [000] 2.{i:06}: dma_sync_single_for_cpu: nic dir=FROM_DEVICE dma_addr={a:x} size=2048\n"
        ));
    }
    let dir = scratch("bounded-findings");
    let path = dir.join("pool.txt");
    std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap();
    let o = dmasim(&["replay", file, "--check", "--format", "json"]);
    let t = dmasim(&["replay", file]);
    let strict = dmasim(&["replay", file, "--check", "--strict-window"]);
    std::fs::remove_dir_all(&dir).unwrap();
    // A window on a running driver: syncs of what was mapped before it, pages live after it.
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        doc["finding_counts"],
        serde_json::json!({"mapped-before": 150, "live-at-end": 300})
    );
    assert_eq!(doc["findings"].as_array().unwrap().len(), 200);
    let report = String::from_utf8(t.stdout).unwrap();
    assert!(report.contains("  ... 50 more mapped-before (the first 100 of each kind are listed)"));
    assert!(report.contains("  ... 200 more live-at-end (the first 100 of each kind are listed)"));
    // The driver's whole life: every one a misuse, all counted though a hundred of each shown.
    assert_eq!(strict.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&strict.stderr).contains("450 misuses"));
    let report = String::from_utf8(strict.stdout).unwrap();
    assert!(report.contains("  ... 50 more not-mapped (the first 100 of each kind are listed)"));
    assert!(report.contains("  ... 200 more leak (the first 100 of each kind are listed)"));
}

fn lazy_fixture(invalidation: &str) -> dmasim::scenario::replay::RunResult {
    let mut s = Scenario::load_on("tests/data/traces/lazy-50ms.txt", &[], Some("sm8150")).unwrap();
    s.set_policies(&format!("invalidation={invalidation}"))
        .unwrap();
    match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        _ => panic!("a replay result"),
    }
}

/// Ten map/unmap pairs 50 ms apart on the trace's clock, the device behind an inferred
/// domain: lazily, each unmap queues its IOVA and the flush queue's 10 ms timer flushes and
/// frees it while the CPU idles before the next map (the last after the trace's last call),
/// so every map finds an IOVA cached but the first; strictly, each unmap invalidates its page
/// and frees its IOVA itself. Lazy's unmaps are cheaper and its timers do the flushes, in no
/// call's time.
#[test]
fn the_flush_queue_timer_runs_on_the_traces_clock() {
    use dmasim::hw::Counter;
    let lazy = lazy_fixture("lazy");
    let strict = lazy_fixture("strict");
    let (l, s) = (&lazy.devices[0], &strict.devices[0]);
    assert_eq!(counts(l), [("dma_map_page", 10), ("dma_unmap_page", 10)]);
    assert_eq!(
        (l.timers.runs, l.timers.after_end, l.timers.names.as_slice()),
        (10, 1, &["fq_flush_timeout".to_string()][..])
    );
    let timer = |c: Counter| l.timers.counts[c as usize];
    assert_eq!(timer(Counter::FqFlush), 10);
    assert_eq!(timer(Counter::IovaFree), 10);
    assert_eq!(timer(Counter::SmmuTlbiasid), 10);
    let whole = |r: &dmasim::scenario::replay::RunResult, c: Counter| r.counts[c as usize];
    assert_eq!(whole(&lazy, Counter::FqQueued), 10);
    assert_eq!(whole(&lazy, Counter::FqFlush), 10);
    assert_eq!(whole(&lazy, Counter::IovaFree), 10, "every IOVA freed");
    assert_eq!(whole(&lazy, Counter::SmmuTlbival), 0);
    assert_eq!(
        whole(&lazy, Counter::IovaRcacheHit),
        9,
        "the IOVA caches refill"
    );
    // Strictly: a leaf invalidation and a free in each unmap, no queue, no timer.
    assert_eq!(s.timers.runs, 0);
    assert_eq!(whole(&strict, Counter::SmmuTlbival), 10);
    assert_eq!(whole(&strict, Counter::IovaFree), 10);
    assert_eq!(whole(&strict, Counter::FqFlush), 0);
    let mean = |d: &dmasim::scenario::replay::DeviceResult, call: &str| {
        d.calls.iter().find(|c| c.call == call).unwrap().mean_ns()
    };
    assert!(mean(l, "dma_unmap_page") < mean(s, "dma_unmap_page"));
    assert_eq!(mean(l, "dma_map_page"), mean(s, "dma_map_page"));
    // The timers' time is the run's, not the calls'.
    let calls_ps: u64 = l.calls.iter().map(|c| c.total_ps).sum();
    assert_eq!(calls_ps + l.timers.total_ps, lazy.total_ps);
    assert_eq!(lazy.late.calls, 0, "50 ms apart, no call waits for another");
}

/// Calls closer together than the model makes them queue on one modelled CPU (`--cpus 1`):
/// each starts when the call before has returned, and the report says how many started late
/// and how many only because the trace's other CPU made them (on the board the two ran side
/// by side). On the trace's CPUs only a call behind its own CPU's starts late.
#[test]
fn calls_closer_than_the_model_makes_them_start_late_and_are_counted() {
    let dir = scratch("late");
    let trace = dir.join("late.txt");
    let sg = |cpu: u32, t: &str, phys: u64| {
        let ents: Vec<String> = (0..64)
            .map(|i| format!("0x{:x}", phys + i * 4096))
            .collect();
        format!(
            "  app-1 [{cpu:03}] ..... {t}: dma_map_sg: dev dir=TO_DEVICE nents=64/64 ents=64/64 dma_addrs={{{a}}} sizes={{{s}}} phys_addrs={{{a}}} attrs=\n",
            a = ents.join(","),
            s = vec!["0x1000"; 64].join(","),
        )
    };
    // Three lists a microsecond apart: the second on another CPU, the third on the second's.
    let text = [
        sg(0, "5.000000", 0x1000_0000),
        sg(1, "5.000001", 0x2000_0000),
        sg(1, "5.000002", 0x3000_0000),
    ]
    .concat();
    std::fs::write(&trace, text).unwrap();
    let doc = json_of(&dmasim(&[
        "replay",
        trace.to_str().unwrap(),
        "--cpus",
        "1",
        "--format",
        "json",
    ]));
    let late = &doc["workload"]["started_late"];
    assert_eq!(late["calls"], 2, "{doc}");
    assert_eq!(late["behind_other_cpu"], 1, "{doc}");
    assert_eq!(late["behind_timer"], 0, "{doc}");
    assert!(late["total_ns"].as_f64().unwrap() > 0.0, "{doc}");
    let o = dmasim(&["replay", trace.to_str().unwrap(), "--cpus", "1"]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains(
            "late       2 calls started after their timestamps, the modelled CPU still busy ("
        ),
        "{table}"
    );
    assert!(
        table.contains(": 1 behind a call the trace shows on another CPU (replayed on one)\n"),
        "{table}"
    );
    // On the trace's two CPUs (the default) the second list runs beside the first: only the
    // third, behind the second on its own CPU, starts late.
    let doc = json_of(&dmasim(&[
        "replay",
        trace.to_str().unwrap(),
        "--format",
        "json",
    ]));
    assert_eq!(doc["workload"]["replayed_on_cpus"], 2, "{doc}");
    let late = &doc["workload"]["started_late"];
    assert_eq!(late["calls"], 1, "{doc}");
    assert_eq!(late["behind_other_cpu"], 0, "{doc}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A device the trace shows behind an IOMMU maps through an iommu-dma domain without an
/// `[iommu]` section, and the iommu-dma policies apply to it: lazy invalidation queues its
/// unmaps' IOVAs instead of invalidating each.
#[test]
fn iommu_dma_policies_apply_to_an_inferred_domain() {
    let o = dmasim(&[
        "replay",
        "tests/data/traces/iommu.txt",
        "--platform",
        "sm8150",
        "--policy",
        "invalidation=lazy",
        "--format",
        "json",
    ]);
    let doc = json_of(&o);
    assert_eq!(doc["policies"]["invalidation"], "lazy");
    let ops = &doc["operations"];
    assert_eq!(ops["fq_queued"], 2, "{ops}");
    assert!(ops.get("smmu_tlbival").is_none(), "{ops}");
}

const DOTTED: &str = "tests/data/traces/dotted-name.txt";

/// A device named with a dot ("a.b", as every platform device is) is set by a TOML-quoted key
/// part or by `--device`, on `run`, `compare` and `--sweep` alike; one `--platform` beside
/// `--variant`s is each one's; a variant may set a platform key. Lazily the trace's 50 ms
/// gaps make the flush queue's timer flush, strictly each unmap invalidates.
#[test]
fn per_device_settings_work_on_run_compare_and_sweeps() {
    let compare = |how: &[&str]| {
        let mut args = vec!["compare", DOTTED];
        args.extend_from_slice(how);
        args.extend([
            "--variant",
            "invalidation=strict",
            "--variant",
            "invalidation=lazy",
            "--platform",
            "sm8150",
            "--format",
            "json",
        ]);
        json_of(&dmasim(&args))
    };
    let by_set = compare(&["--set", r#"workload.devices."a.b".iommu=true"#]);
    let by_device = compare(&["--device", "a.b:iommu=yes"]);
    assert_eq!(by_set, by_device);
    let ops = &by_set["operations"];
    let row = |name: &str| {
        ops.as_array()
            .unwrap()
            .iter()
            .find(|r| r["operation"] == name)
            .unwrap_or_else(|| panic!("{name}: {ops}"))["values"]
            .clone()
    };
    assert_eq!(row("smmu_tlbival"), serde_json::json!([2, 0]), "{ops}");
    assert_eq!(row("fq_flush"), serde_json::json!([0, 2]), "{ops}");
    // A platform key in one variant only.
    let doc = json_of(&dmasim(&[
        "compare",
        DOTTED,
        "--device",
        "a.b:iommu=yes",
        "--platform",
        "sm8150",
        "--variant",
        "platform.smmu.mmio_write=1us",
        "--variant",
        "kernel=7.1",
        "--format",
        "json",
    ]));
    let total = |i: usize| doc["variants"][i]["total_ps"].as_u64().unwrap();
    assert!(total(0) > total(1), "{}", doc["variants"]);
    // run, and a sweep of a quoted key.
    let on_smmu = [
        "run",
        DOTTED,
        "--device",
        "a.b:iommu=yes",
        "--platform",
        "sm8150",
    ];
    let sweep = json_of(&dmasim(
        &[
            &on_smmu[..],
            &[
                "--sweep",
                r#"workload.devices."a.b".granule=4K,64K"#,
                "--format",
                "json",
            ],
        ]
        .concat(),
    ));
    assert_eq!(
        sweep["sweep"][0]["values"],
        serde_json::json!(["4K", "64K"])
    );
    assert_eq!(sweep["points"].as_array().map(Vec::len), Some(2));
    let run = json_of(&dmasim(&[&on_smmu[..], &["--format", "json"]].concat()));
    assert_eq!(run["devices"][0]["dma_ops"], "iommu-dma");
    // A device the trace does not name, and a bare key part that needs quotes.
    let args = [
        "--device",
        "nope:iommu=yes",
        "--kernel",
        "7.0",
        "--kernel",
        "7.1",
    ];
    refused(
        &[&["compare", DOTTED][..], &args].concat(),
        "--device: the trace has no device `nope`",
    );
    let quotes = ["run", DOTTED, "--set", "workload.devices.a:b.iommu=true"];
    refused(&quotes, "goes in quotes");
}

/// A comparison of strict and lazy invalidation on an SMMU, as JSON.
const STRICT_VS_LAZY: [&str; 8] = [
    "--platform",
    "sm8150",
    "--variant",
    "invalidation=strict",
    "--variant",
    "invalidation=lazy",
    "--format",
    "json",
];

/// `dmasim` with `input` written to its standard input through a pipe, as `cat TRACE |`.
fn dmasim_piped(args: &[&str], input: Vec<u8>) -> std::process::Output {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("binary runs");
    let mut stdin = child.stdin.take().unwrap();
    // Written from another thread: the pipe holds less than the trace, and dmasim reads it as
    // it comes. It may stop reading early (a refusal), so a failed write is no failure here.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// `cat TRACE | dmasim replay -` prints what `dmasim replay TRACE` prints, byte for byte, as a
/// table and as JSON: the report does not name its input. A comparison reads the spooled input
/// once per variant; input that is no trace is refused as a file would be.
#[test]
fn a_trace_on_standard_input_replays_as_the_file_does() {
    for (file, extra) in [
        (
            "tests/data/traces/lazy-50ms.txt",
            &["--platform", "sm8150"][..],
        ),
        ("tests/data/traces/misuse.txt", &[][..]),
        (
            "tests/data/traces/ath12k-6.12.35.txt",
            &["--platform", "kunpeng920"][..],
        ),
        (
            "scenarios/nic-two-cpus.txt",
            &["--platform", "sm8150", "--format", "json"][..],
        ),
        ("tests/data/traces/misuse.txt", &["--format", "json"][..]),
        (
            "tests/data/traces/lazy-50ms.txt",
            &["--platform", "sm8150", "--format", "json"][..],
        ),
    ] {
        let piped = dmasim_piped(
            &[&["replay", "-"][..], extra].concat(),
            std::fs::read(file).unwrap(),
        );
        let direct = dmasim(&[&["replay", file][..], extra].concat());
        assert_eq!(piped.status.code(), direct.status.code(), "{file}");
        assert_eq!(piped.stderr, direct.stderr, "{file}");
        assert!(!direct.stdout.is_empty(), "{file}");
        assert_eq!(
            String::from_utf8(piped.stdout).unwrap(),
            String::from_utf8(direct.stdout).unwrap(),
            "{file} {extra:?}"
        );
    }
    let compared = dmasim_piped(
        &[&["compare", "-"][..], &STRICT_VS_LAZY].concat(),
        std::fs::read("tests/data/traces/lazy-50ms.txt").unwrap(),
    );
    let doc = json_of(&compared);
    let counts: Vec<u64> = doc["devices"][0]["calls"][0]["count"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts, [10, 10], "each variant replays every call: {doc}");
    let o = dmasim_piped(&["replay", "-"], vec![b'x'; 3 << 20]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("<stdin>:1: a line longer than 1 MiB"), "{err}");
}

/// A comparison of a trace keeps its calls by device, as the replay's own document does; and
/// the document says which CPUs the trace ran on and how many replayed it.
#[test]
fn a_comparison_of_a_trace_keeps_its_devices_and_says_its_cpus() {
    let lazy = ["compare", "tests/data/traces/lazy-50ms.txt"];
    let doc = json_of(&dmasim(&[&lazy[..], &STRICT_VS_LAZY].concat()));
    assert_eq!(doc["calls"], serde_json::json!([]), "{doc}");
    let devices = doc["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["name"], "ff100000.dsp");
    let calls: Vec<&str> = devices[0]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    assert_eq!(
        calls,
        ["dma_map_page", "dma_unmap_page", "fq_flush_timeout (timer)"]
    );
    assert_eq!(devices[0]["calls"][2]["count"], serde_json::json!([0, 10]));
    let ath12k = [
        "replay",
        "tests/data/traces/ath12k-6.12.35.txt",
        "--format",
        "json",
    ];
    let run = json_of(&dmasim(
        &[&ath12k[..], &["--platform", "kunpeng920"]].concat(),
    ));
    assert_eq!(run["workload"]["trace_cpus"], serde_json::json!([10, 11]));
    assert_eq!(run["workload"]["replayed_on_cpus"], 2);
    let run = json_of(&dmasim(&[&ath12k[..], &["--cpus", "1"]].concat()));
    assert_eq!(run["workload"]["trace_cpus"], serde_json::json!([10, 11]));
    assert_eq!(run["workload"]["replayed_on_cpus"], 1);
}

/// A window cut from a running NIC: its page pool's four pages were mapped before the capture
/// began, and the trace shows only their syncs and the unmap of two. Each is replayed on a
/// mapping inferred from its first use, made before the first line and not timed, so every
/// sync and unmap is timed like any other; the report counts the four, `--check` passes, and
/// `--strict-window` fails on each call it never saw mapped.
#[test]
fn a_page_pool_mapped_before_the_window_is_replayed_and_counted() {
    use dmasim::hw::Counter;
    let file = "tests/data/traces/capture-window.txt";
    let r = replay_of(file);
    let d = &r.devices[0];
    assert_eq!(d.mapped_before, 4);
    assert_eq!(
        counts(d),
        [
            ("dma_sync_single_for_cpu", 8),
            ("dma_sync_single_for_device", 8),
            ("dma_unmap_page", 3),
            ("dma_map_page", 1)
        ]
    );
    assert_eq!(d.unresolved_count, 0);
    assert_eq!(d.skipped_after_refusal, 0);
    // Each recycle cleans the 1536 bytes the device may write, a line at a time.
    let recycle = &d.calls[1];
    assert!(recycle.total_ps > 0);
    assert_eq!(recycle.per_call(Counter::CacheCleanLine), 24.0);
    assert_eq!(recycle.per_call(Counter::Barrier), 1.0);
    assert!(d.calls[0].total_ps > 0);
    // The calls are the run: nothing of the mappings made before it is charged.
    let calls_ps: u64 = d.calls.iter().map(|c| c.total_ps).sum();
    assert_eq!(calls_ps, r.total_ps);
    let kinds: Vec<(&str, u64)> = r
        .findings
        .counts
        .iter()
        .map(|(k, n)| (k.name(), *n))
        .collect();
    assert_eq!(kinds, [("mapped-before", 18)]);

    let text = dmasim(&["replay", file, "--check"]);
    assert_eq!(text.status.code(), Some(0));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("\nbefore     4 mappings made before the trace began, "),
        "{text}"
    );
    let doc = json_of(&dmasim(&["replay", file, "--format", "json"]));
    assert_eq!(doc["devices"][0]["mapped_before"], 4);
    assert_eq!(doc["devices"][0]["calls"][0]["count"], 8);
    let strict = dmasim(&[
        "replay",
        file,
        "--check",
        "--strict-window",
        "--format",
        "json",
    ]);
    assert_eq!(strict.status.code(), Some(4));
    let doc: serde_json::Value = serde_json::from_slice(&strict.stdout).unwrap();
    assert_eq!(
        doc["finding_counts"],
        serde_json::json!({ "not-mapped": 18 })
    );
    assert_eq!(doc["devices"][0]["mapped_before"], 4);
}

/// Behind an IOMMU the trace's DMA addresses are IOVAs: a mapping made before the window gets
/// pages of its own and the IOVA the model's allocator gives, which its calls reach as those
/// of a traced map do. Its unmaps free IOVAs and invalidate the TLB, its syncs find their pages
/// through the page table.
#[test]
fn a_page_pool_mapped_before_the_window_behind_an_iommu_unmaps_for_real() {
    use dmasim::hw::Counter;
    let s = Scenario::load_on(
        "tests/data/traces/capture-window.txt",
        &[r#"workload.devices."fe2a0000.ethernet".iommu=true"#.to_string()],
        Some("sm8150"),
    )
    .unwrap();
    let r = match execute(&s) {
        Ok(Outcome::Replay(r)) => r,
        _ => panic!("a replay result"),
    };
    let d = &r.devices[0];
    assert_eq!(d.mapped_before, 4);
    assert_eq!(d.skipped_after_refusal, 0);
    let unmap = d.calls.iter().find(|c| c.call == "dma_unmap_page").unwrap();
    assert_eq!(unmap.count, 3);
    assert_eq!(unmap.per_call(Counter::IovaFree), 1.0);
    for c in &d.calls[..2] {
        assert_eq!(
            (c.count, c.per_call(Counter::IovaToPhys)),
            (8, 1.0),
            "{}",
            c.call
        );
    }
}

/// What follows an unmap the trace showed is named as that, not taken for a mapping made
/// before the window: a sync after the unmap of a mapping made before it, and a second unmap,
/// as after a traced map's unmap. Neither is replayed.
#[test]
fn a_sync_after_an_unmap_in_the_window_is_a_sync_after_unmap() {
    let h = "  napi-1 [000] ..... 1.000000:";
    let dir = scratch("window-unmap");
    let file = dir.join("t.txt");
    std::fs::write(
        &file,
        format!(
            "{h} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=84000040 size=64\n\
             {h} dma_unmap_page: d dir=FROM_DEVICE dma_addr=84000000 size=4096 attrs=\n\
             {h} dma_sync_single_for_cpu: d dir=FROM_DEVICE dma_addr=84000040 size=64\n\
             {h} dma_unmap_page: d dir=FROM_DEVICE dma_addr=84000000 size=4096 attrs=\n\
             {h} dma_map_page: d dir=TO_DEVICE dma_addr=85000000 size=64 phys_addr=85000000 attrs=\n\
             {h} dma_unmap_page: d dir=TO_DEVICE dma_addr=85000000 size=64 attrs=\n\
             {h} dma_sync_single_for_device: d dir=TO_DEVICE dma_addr=85000000 size=64\n"
        ),
    )
    .unwrap();
    let r = replay_of(file.to_str().unwrap());
    let d = &r.devices[0];
    assert_eq!(d.mapped_before, 1);
    assert_eq!(
        counts(d),
        [
            ("dma_sync_single_for_cpu", 1),
            ("dma_unmap_page", 2),
            ("dma_map_page", 1)
        ]
    );
    assert_eq!(d.unresolved_count, 3);
    let found: Vec<(&str, &[usize], &str)> = r
        .findings
        .kept
        .iter()
        .map(|f| (f.kind.name(), &f.lines[..], f.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "mapped-before",
                &[1][..],
                "sync of 64 bytes at 0x84000040: not mapped in this trace (mapped before it began?)"
            ),
            (
                "mapped-before",
                &[2][..],
                "unmap of 0x84000000: not mapped in this trace (mapped before it began?)"
            ),
            (
                "sync-after-unmap",
                &[2, 3][..],
                "sync of 64 bytes at 0x84000040 after its unmap at line 2"
            ),
            (
                "double-unmap",
                &[2, 4][..],
                "unmap of 0x84000000: already unmapped"
            ),
            (
                "sync-after-unmap",
                &[6, 7][..],
                "sync of 64 bytes at 0x85000000 after its unmap at line 6"
            ),
        ]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Two CPUs' calls at the same instants, a NIC behind kunpeng920's SMMUv3: on the trace's
/// CPUs the second CPU's first map finds the IOVA allocator's rbtree lock held by the first
/// (both magazines empty), and spins; replayed on one CPU no lock is ever found held, the
/// calls queue instead. The same inputs give the same bytes.
#[test]
fn two_cpus_calls_at_once_wait_on_a_shared_lock_one_cpu_does_not() {
    let two = [
        "replay",
        "scenarios/nic-two-cpus.txt",
        "--platform",
        "kunpeng920",
        "--format",
        "json",
    ];
    let o = dmasim(&two);
    let doc = json_of(&o);
    assert_eq!(doc["workload"]["replayed_on_cpus"], 2, "{doc}");
    assert_eq!(doc["workload"]["trace_cpus"], serde_json::json!([0, 1]));
    let locks = doc["workload"]["locks"].as_array().unwrap();
    let rbtree = locks
        .iter()
        .find(|l| l["lock"] == "iova_rbtree_lock")
        .unwrap_or_else(|| panic!("{doc}"));
    assert_eq!(rbtree["taken"], 2, "{doc}");
    assert_eq!(rbtree["found_held"], 1, "{doc}");
    assert!(rbtree["spun_ns"].as_f64().unwrap() > 0.0, "{doc}");
    assert_eq!(rbtree["waits"][0]["cpu"], 1, "{doc}");
    assert_eq!(rbtree["waits"][0]["on_cpu"], 0, "{doc}");
    let spun = |d: &serde_json::Value| {
        d["breakdown"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["stack"].to_string().contains("(spinning on"))
            .count()
    };
    assert_eq!(spun(&doc), 1, "{doc}");
    let calls = &doc["devices"][0]["calls"];
    assert_eq!(calls[0]["count"], 16);
    assert_eq!(calls[1]["count"], 16);
    // Determinism: the same run twice, the same bytes, as a table too.
    assert_eq!(dmasim(&two).stdout, o.stdout);
    let table = |args: &[&str]| String::from_utf8(dmasim(args).stdout).unwrap();
    assert_eq!(table(&two[..4]), table(&two[..4]));
    assert!(
        table(&two[..4]).contains("\niova_rbtree_lock                          2          1 "),
        "{}",
        table(&two[..4])
    );

    let one = json_of(&dmasim(&[&two[..], &["--cpus", "1"]].concat()));
    assert_eq!(one["workload"]["replayed_on_cpus"], 1, "{one}");
    assert!(one["workload"].get("locks").is_none(), "{one}");
    assert_eq!(spun(&one), 0, "{one}");
    assert_eq!(one["devices"][0]["calls"][0]["count"], 16);
    assert_eq!(
        one["workload"]["started_late"]["behind_other_cpu"], 17,
        "{one}"
    );
}

/// A trace whose CPUs the platform does not have is refused before it runs, naming the line
/// that first names the CPU and the way out (`--cpus 1`); on one CPU it replays.
#[test]
fn a_trace_on_cpus_the_platform_lacks_exits_2_naming_the_line() {
    let o = dmasim(&["replay", "tests/data/traces/ath12k-6.12.35.txt"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        "error: tests/data/traces/ath12k-6.12.35.txt:8: the trace's calls ran on CPU 10, and platform `dimensity9500` has no CPU 10 (its CPUs: 0-7): replay on a platform with them (--platform), or every call on one CPU in trace order (--cpus 1, `workload.cpus = 1`)\n"
    );
    let dir = scratch("nine-cpus");
    let trace = dir.join("nine.txt");
    let text: String = (0..9)
        .map(|c| format!("  app-1 [{c:03}] ..... 5.00000{c}: dma_map_phys: dev dir=TO_DEVICE dma_addr={a:x} size=4096 phys_addr={a:x} attrs=\n", a = 0x1000_0000 + c * 0x1000))
        .collect();
    std::fs::write(&trace, text).unwrap();
    let path = trace.to_str().unwrap();
    let o = dmasim(&["replay", path, "--platform", "sm8150"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err,
        format!(
            "error: {path}:9: the trace's calls ran on 9 CPUs (0-8), and platform `sm8150` has 8: replay on a platform with them (--platform), or every call on one CPU in trace order (--cpus 1, `workload.cpus = 1`)\n"
        )
    );
    let o = dmasim(&["replay", path, "--platform", "sm8150", "--cpus", "1"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = dmasim(&["replay", path, "--set", "workload.cpus=2"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("workload.cpus"), "{err}");
    assert!(
        err.contains("\"trace\" (each of the trace's CPUs on its own) or 1"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
