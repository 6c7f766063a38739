//! Unit tests of the profile reader: every check names its file, line and key.

use super::*;

#[test]
fn every_builtin_profile_loads() {
    for n in builtin_names() {
        let p = Profile::load(n).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.name(), n);
        assert!(p.params().iter().all(|i| !i.source.trim().is_empty()));
    }
}

#[test]
fn unknown_platform_lists_the_known_ones() {
    let e = Profile::load("no-such-soc").unwrap_err();
    assert!(e.message.contains("dimensity9500"), "{e}");
}

const MINIMAL: &str = r#"
[platform]
name = "t"
description = "test"
arch = "arm64"
cpu_freq_mhz = { value = 1000, source = "test" }

[cache]
line_bytes = { value = 64, source = "test" }
[cache.clean]
issue = { cycles = 2, source = "test" }
latency = { ns = 100, source = "test" }

[barrier]
cost = { ns = 5, source = "test" }
"#;

#[test]
fn cycles_convert_at_the_profile_clock() {
    let p = Profile::parse("t.toml", MINIMAL).unwrap();
    let c = p.model.maint(CacheOp::Clean).unwrap();
    assert_eq!(c.issue_ps, 2000);
    assert_eq!(c.latency_ps, 100_000);
    assert_eq!(p.model.barrier_ps, 5000);
    assert!(p.model.maint(CacheOp::Inval).is_none());
    assert!(
        p.require_ops(&[CacheOp::Inval], "arm64 dma-direct")
            .is_err()
    );
}

#[test]
fn negative_cost_names_key_and_line() {
    let text = MINIMAL.replace("latency = { ns = 100", "latency = { ns = -3");
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("cache.clean.latency.ns"), "{e}");
    assert_eq!(e.line, Some(12), "{e}");
}

#[test]
fn numbers_that_would_wrap_the_clock_are_refused() {
    // (from, to, key, line): each value is finite and non-negative but out of range.
    for (from, to, key, line) in [
        (
            "latency = { ns = 100",
            "latency = { ns = 1e300",
            "cache.clean.latency",
            12,
        ),
        (
            "issue = { cycles = 2",
            "issue = { cycles = 1e18",
            "cache.clean.issue",
            11,
        ),
        (
            "cpu_freq_mhz = { value = 1000",
            "cpu_freq_mhz = { value = 1e-300",
            "platform.cpu_freq_mhz.value",
            6,
        ),
        (
            "cpu_freq_mhz = { value = 1000",
            "cpu_freq_mhz = { value = 2.4",
            "platform.cpu_freq_mhz.value",
            6,
        ),
        (
            "line_bytes = { value = 64",
            "line_bytes = { value = 1099511627776",
            "cache.line_bytes.value",
            9,
        ),
    ] {
        let e = Profile::parse("t.toml", &MINIMAL.replace(from, to)).unwrap_err();
        assert_eq!(e.key.as_deref(), Some(key), "{to}: {e}");
        assert_eq!(e.line, Some(line), "{to}: {e}");
    }
    // The largest allowed values still load.
    let edge = MINIMAL
        .replace("latency = { ns = 100", "latency = { ns = 1e9")
        .replace("line_bytes = { value = 64", "line_bytes = { value = 4096");
    assert!(Profile::parse("t.toml", &edge).is_ok());
}

const SMMU: &str = r#"
[smmu]
kind = "mmu-500"
version = "2"
source = "test"
mmio_write = { ns = 10, source = "test" }
mmio_read = { cycles = 200, source = "test" }
tlbi_va = { ns = 30, source = "test" }
tlbi_asid = { ns = 40, source = "test" }
sync = { ns = 50, source = "test" }
coherent_walk = { value = false, source = "test" }
"#;

#[test]
fn smmu_section_resolves_and_is_listed() {
    let p = Profile::parse("t.toml", &format!("{MINIMAL}{SMMU}")).unwrap();
    let s = p.model.smmu.unwrap();
    assert_eq!(s.kind, SmmuKind::Mmu500);
    assert_eq!(s.mmio_read_ps, 200_000);
    assert_eq!(s.sync_ps, 50_000);
    assert!(p.params().iter().any(|i| i.key == "smmu.tlbi_va"));
    assert!(
        Profile::parse("t.toml", MINIMAL)
            .unwrap()
            .model
            .smmu
            .is_none()
    );
}

#[test]
fn smmu_errors_name_key_and_line() {
    let text = format!("{MINIMAL}{SMMU}").replace("tlbi_asid = { ns = 40", "tlbi_asid = { ns = -1");
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("smmu.tlbi_asid.ns"), "{e}");
    assert_eq!(e.line, Some(24), "{e}");
    let text = format!("{MINIMAL}{SMMU}").replace("\"mmu-500\"", "\"smmu-v3\"");
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("smmu.version"), "{e}");
    let text = text.replace("version = \"2\"", "version = \"3.2\"");
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("smmu.cmdq_write"), "{e}");
    let text = text.replace(
        "sync = { ns = 50, source = \"test\" }",
        "sync = { ns = 50, source = \"test\" }\ncmdq_write = { ns = 2, source = \"t\" }",
    );
    let s = Profile::parse("t.toml", &text).unwrap().model.smmu.unwrap();
    assert!(s.range_inv);
    assert_eq!(s.kind, SmmuKind::SmmuV3);
    assert!(!s.coherent_walk);
    // Whether the walker snoops is the platform's to say, with its source.
    let text = format!("{MINIMAL}{SMMU}")
        .replace("coherent_walk = { value = false, source = \"test\" }\n", "");
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert!(e.to_string().contains("coherent_walk"), "{e}");
    let text = format!("{MINIMAL}{SMMU}").replace(
        "value = false, source = \"test\"",
        "value = true, source = \" \"",
    );
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("smmu.coherent_walk.source"), "{e}");
}

#[test]
fn memory_copy_is_optional_and_checked() {
    let p = Profile::parse("t.toml", MINIMAL).unwrap();
    assert!(p.model.copy.is_none());
    assert!(p.require_copy("swiotlb").is_err());
    let text = format!(
        "{MINIMAL}\n[memory.copy]\ncall = {{ ns = 10, source = \"test\" }}\nper_byte = {{ cycles = 0.1, source = \"test\" }}\n"
    );
    let p = Profile::parse("t.toml", &text).unwrap();
    // 0.1 cycles at 1 GHz = 100 ps per byte.
    assert_eq!(
        p.model.copy,
        Some(CopyCost {
            call_ps: 10_000,
            per_byte_fs: 100_000
        })
    );
    p.require_copy("swiotlb").unwrap();
    assert!(p.params().iter().any(|i| i.key == "memory.copy.per_byte"));
    let bad = text.replace("ns = 10,", "ns = -1,");
    let e = Profile::parse("t.toml", &bad).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("memory.copy.call.ns"), "{e}");
    assert!(e.line.is_some());
    let nosrc = text.replace(
        "cycles = 0.1, source = \"test\"",
        "cycles = 0.1, source = \" \"",
    );
    let e = Profile::parse("t.toml", &nosrc).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("memory.copy.per_byte.source"), "{e}");
}

#[test]
fn unknown_sw_key_names_file_line_key_and_the_closest_name() {
    let text = format!(
        "{MINIMAL}\n[sw]\nsg_next = {{ cycles = 4, source = \"test\" }}\ndma_api_cal = {{ cycles = 20, source = \"test\" }}\n"
    );
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.file, "t.toml");
    assert_eq!(e.key.as_deref(), Some("sw.dma_api_cal"), "{e}");
    assert_eq!(e.line, Some(19), "{e}");
    assert!(e.message.contains("did you mean `dma_api_call`?"), "{e}");
    assert!(e.message.contains("dmasim costs"), "{e}");
    let far = text.replace("dma_api_cal", "\"no such thing\"");
    let e = Profile::parse("t.toml", &far).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("sw.no such thing"), "{e}");
    assert!(!e.message.contains("did you mean"), "{e}");
    let ok = text.replace("dma_api_cal", "dma_api_call");
    let p = Profile::parse("t.toml", &ok).unwrap();
    assert_eq!(p.model.sw.get("dma_api_call"), Some(&20_000));
    assert!(p.params().iter().any(|i| i.key == "sw.dma_api_call"));
}

#[test]
fn unpriced_sw_costs_are_listed_and_can_be_required() {
    let text = format!("{MINIMAL}\n[sw]\nsg_next = {{ ns = 0, source = \"test\" }}\n");
    let p = Profile::parse("t.toml", &text).unwrap();
    let keys = [SwKey::DmaApiCall, SwKey::SgNext, SwKey::DmaDirectMapPhys];
    // An explicit zero is priced; only absent keys are unpriced.
    assert_eq!(
        p.unpriced_sw(&keys),
        vec![SwKey::DmaApiCall, SwKey::DmaDirectMapPhys]
    );
    let e = p.require_sw(&keys, "arm64 dma-direct").unwrap_err();
    assert_eq!(e.file, "t.toml");
    assert_eq!(e.key.as_deref(), Some("sw.dma_api_call"), "{e}");
    assert!(
        e.message.contains("also missing: sw.dma_direct_map_phys"),
        "{e}"
    );
    p.require_sw(&[SwKey::SgNext], "a walk").unwrap();
    let w = p.unpriced_sw_warning(&keys, "a test run").unwrap();
    assert!(w.starts_with("t.toml: platform `t` does not price 2 software costs a test run can charge, so they cost 0: sw.dma_api_call, sw.dma_direct_map_phys"), "{w}");
    assert_eq!(p.unpriced_sw_warning(&[SwKey::SgNext], "a walk"), None);
    for n in builtin_names() {
        let p = Profile::load(n).unwrap();
        assert!(
            p.file
                .sw
                .keys()
                .all(|k| SwKey::from_name(k.get_ref()).is_some()),
            "{n}"
        );
    }
}

#[test]
fn empty_source_is_refused() {
    let text = MINIMAL.replace(
        "cost = { ns = 5, source = \"test\" }",
        "cost = { ns = 5, source = \"\" }",
    );
    let e = Profile::parse("t.toml", &text).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("barrier.cost.source"), "{e}");
}

#[test]
fn per_instruction_costs_need_their_instruction_counts() {
    let insn =
        format!("{MINIMAL}\n[sw]\n\"insn.unmap_single\" = {{ cycles = 1, source = \"test\" }}\n");
    let e = Profile::parse("t.toml", &insn).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("code.swiotlb_2012"), "{e}");
    assert!(e.to_string().contains("t.toml:"), "{e}");
    // The built-in profile counts them; every group is listed with its source.
    let text = BUILTIN
        .iter()
        .find(|(n, _)| *n == "x86-2012-ixgbe")
        .unwrap()
        .1;
    let p = Profile::parse("x.toml", text).unwrap();
    let groups: Vec<_> = p
        .params()
        .into_iter()
        .filter(|i| i.key.starts_with("code.swiotlb_2012."))
        .collect();
    assert_eq!(groups.len(), 10);
    assert!(groups.iter().all(|g| g.source.starts_with("counted:")));
    // A count must be a whole number, and within bounds.
    for (bad, want) in [
        ("4.5", "whole number"),
        ("1e6", "whole number"),
        ("-1", "non-negative"),
    ] {
        let t = text.replacen(
            "frame = { value = 4,",
            &format!("frame = {{ value = {bad},"),
            1,
        );
        let e = Profile::parse("x.toml", &t).unwrap_err();
        assert_eq!(
            e.key.as_deref(),
            Some("code.swiotlb_2012.frame.value"),
            "{e}"
        );
        assert!(e.to_string().contains(want), "{bad}: {e}");
    }
    // An unknown group is refused by name.
    let t = text.replacen("frame = { value = 4,", "frames = { value = 4,", 1);
    assert!(Profile::parse("x.toml", &t).is_err());
}
