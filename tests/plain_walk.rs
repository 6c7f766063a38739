//! The io-pgtable walk's shortcut (src/iommu/io_pgtable_arm/leaf_walk.rs) changes nothing: this
//! suite runs itself again with the shortcut off (`DMASIM_PLAIN_WALK`, which the `dmasim`
//! binaries the tests start inherit too), and every figure, snapshot and exact count must still
//! hold. The command-line module is left out: its tests are about arguments, files and the
//! terminal, and one of them is timed.

use std::process::Command;

#[test]
fn the_suite_passes_with_the_walk_shortcut_off() {
    if std::env::var_os("DMASIM_PLAIN_WALK").is_some() {
        // This is the inner run: the outer one checks its result.
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let o = Command::new(exe)
        .env("DMASIM_PLAIN_WALK", "1")
        .args([
            "--skip",
            "plain_walk::",
            "--skip",
            "cli::",
            "--test-threads",
            "2",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The inner run ran the suite, not nothing.
    let passed: u64 = out
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(passed > 100, "{out}");
}
