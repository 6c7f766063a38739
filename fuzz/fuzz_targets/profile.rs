//! The profile parser and its checks: any bytes must give a checked profile or an input error
//! naming the file, never a panic (overflow checks are on in fuzz builds).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = dmasim::platform::Profile::parse("fuzz.toml", text) {
        // What `dmasim policies` and reports read from a profile.
        let _ = p.params();
        let _ = dmasim::report::policies_table(&p);
    }
});
