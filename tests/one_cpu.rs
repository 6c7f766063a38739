//! One CPU through the many-CPU engine gives exactly the results the single-clock model gave.
//! `tests/data/one_cpu/` holds the JSON documents of every shipped streaming and IOMMU scenario
//! (as shipped, and under 5.4, 5.10 and 7.0 where the platform runs them) written by the model
//! as it was before CPUs shared anything (commit e33f28c; `iommu-api`'s again when a map that
//! walks into a live block began cleaning the block's entry before refusing, as the kernel's
//! `__arm_lpae_map` does: one line and one barrier more); each is run again here, a streaming
//! workload with `workload.cpus = 1` said outright, and every figure must match exactly. The
//! lists of the profile's fitted and held costs are left out of the comparison: they describe
//! the profile (which has since gained what its CPUs' shared lines cost), not the run.

use std::process::Command;

fn dmasim(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn every_streaming_and_iommu_scenario_on_one_cpu_is_what_it_was() {
    let dir = std::path::Path::new("tests/data/one_cpu");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_string();
        let (scenario, kernel) = match stem.split_once('@') {
            Some((s, k)) => (s.to_string(), Some(k.to_string())),
            None => (stem.clone(), None),
        };
        let file = format!("scenarios/{scenario}.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let mut args = vec!["run", file.as_str(), "--format", "json"];
        if let Some(k) = &kernel {
            args.extend(["--kernel", k.as_str()]);
        }
        if text.contains("kind = \"streaming\"") {
            args.extend(["--set", "workload.cpus=1"]);
        }
        let figures = |text: &str| {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("fitted_costs");
            o.remove("held_costs");
            v
        };
        let before = std::fs::read_to_string(&path).unwrap();
        assert_eq!(figures(&dmasim(&args)), figures(&before), "{stem}");
        n += 1;
    }
    assert_eq!(n, 17, "every recorded run was compared");
}

/// A streaming scenario of sm8150 behind its MMU-500 on 4 CPUs: each CPU's calls are counted,
/// the CPUs meet on the context bank's lock around each TLB sync, and the run is the same
/// twice. More CPUs than the platform has is bad input naming the key.
#[test]
fn a_streaming_scenario_runs_on_many_cpus() {
    let text = "[scenario]\nname = \"s\"\nplatform = \"sm8150\"\nkernel = \"7.1\"\n\
                [device]\nname = \"d\"\ncoherent = false\ndma_mask_bits = 32\n\
                [iommu]\ngranule = \"4K\"\nias = 48\n\
                [workload]\nkind = \"streaming\"\nbuffer = \"16K\"\nentry = \"4K\"\n\
                direction = \"to_device\"\ncalls = \"map_single+unmap_single\"\niterations = 200\n";
    let path = std::env::temp_dir().join(format!("dmasim-cpus-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let json = dmasim(&["run", p, "--set", "workload.cpus=4", "--format", "json"]);
    assert_eq!(
        json,
        dmasim(&["run", p, "--set", "workload.cpus=4", "--format", "json"])
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["workload"]["cpus"], 4);
    let calls = v["calls"].as_array().unwrap();
    assert!(calls.iter().all(|c| c["count"] == 4 * 4 * 200), "{calls:?}");
    let table = dmasim(&["run", p, "--set", "workload.cpus=4"]);
    assert!(table.contains("cpus       4 at once"), "{table}");
    assert!(table.contains("(spinning on cb_lock)"), "{table}");
    let o = Command::new(env!("CARGO_BIN_EXE_dmasim"))
        .args(["run", p, "--set", "workload.cpus=9"])
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("workload.cpus") && err.contains("has 8"),
        "{err}"
    );
}
