//! The trace reader and the offline checks: any bytes must give a trace (then its devices and
//! its findings) or an input error naming the file and line, never a panic (overflow checks are
//! on in fuzz builds).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = dmasim::trace::parse("fuzz.txt", text) {
        let _ = t.devices();
        let _ = dmasim::trace::checks::check(&t);
    }
});
