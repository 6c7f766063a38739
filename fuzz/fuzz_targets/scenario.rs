//! The scenario parser and every check made before a run: any bytes must give a checked scenario
//! or an input error, never a panic. Platforms are the built-in ones (a path names no file: the
//! scenario's directory does not exist).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let dir = std::path::Path::new("/nonexistent-dmasim-fuzz");
    if let Ok(s) = dmasim::scenario::Scenario::parse("fuzz.toml", text, dir) {
        let _ = s.work();
        let _ = s.sw_keys();
        let _ = s.run_info();
        let _ = s.check_work(dmasim::scenario::DEFAULT_MAX_WORK);
    }
});
