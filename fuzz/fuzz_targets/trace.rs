//! The trace reader, the offline checks and the replay: any bytes must give a trace (then its
//! devices, its findings, its rebuilt calls and their replay on the model) or an input error
//! naming the file and line, never a panic (overflow checks are on in fuzz builds). The
//! detection of a trace and the streaming reader take the raw bytes, not UTF-8 and over-long
//! lines included.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

/// One file per fuzzing process, rewritten for each input: the replay reads its trace from a
/// file, as `dmasim replay` does.
fn scratch() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dmasim-fuzz-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("fuzz.txt")
    })
}

fuzz_target!(|data: &[u8]| {
    // Detection and the streaming reader take any bytes: lines that are not UTF-8, and (an
    // input that starts `LONG`, repeated) a line past the reader's bound.
    let _ = dmasim::trace::sniff(data);
    let long;
    let bytes = match data.strip_prefix(b"LONG") {
        Some(rest) if !rest.is_empty() => {
            long = rest.repeat(dmasim::trace::MAX_LINE_BYTES / rest.len() + 2);
            &long[..]
        }
        _ => data,
    };
    let _ = dmasim::trace::read("fuzz.txt", bytes, false, |_| Ok(()));
    let _ = dmasim::trace::read("fuzz.txt", bytes, true, |_| Ok(()));
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(t) = dmasim::trace::parse("fuzz.txt", text) else {
        return;
    };
    let _ = t.devices();
    let _ = dmasim::trace::checks::check(&t, false);
    let _ = dmasim::trace::replay::rebuild(&t);
    // The replay on the model, as `dmasim replay` runs it (a trace the scenario reader does not
    // take for one, or that the checks before a run refuse, is an input error).
    let path = scratch();
    std::fs::write(path, data).unwrap();
    let source = (
        "fuzz.txt".to_string(),
        dmasim::scenario::replay::scenario_text("fuzz.txt"),
        path.parent().unwrap().to_path_buf(),
    );
    if let Ok(s) = dmasim::scenario::Scenario::load_source_on(source, &[], None)
        && s.check_work(2_000_000).is_ok()
    {
        match dmasim::scenario::execute(&s) {
            Ok(o) => {
                let _ = o.table();
                let _ = o.json();
            }
            // A bug the model found itself (exit 70 from the binary) is a finding, as a panic is.
            Err(dmasim::scenario::RunError::Internal(bug)) => panic!("{bug}"),
            Err(_) => {}
        }
    }
});
