//! Parse, override, check and run: the library path of `dmasim run`, rendered in every format.
//!
//! Input: a scenario, optionally followed by a line `#%profile` and a profile the scenario then
//! runs on (as `--platform FILE` would); lines `#%kernel V` and `#%policy K=V` anywhere in the
//! scenario apply as `--kernel` and `--policy` (to the TOML parser they are comments). Each run's
//! work is capped at a few milliseconds, as `--max-work` would cap it.
#![no_main]

use dmasim::platform::Profile;
use dmasim::scenario::{self, RunError, Scenario};
use libfuzzer_sys::fuzz_target;

const MAX_WORK: u128 = 2_000_000;

fn run(text: &str) -> Result<(), RunError> {
    let (scenario_text, profile_text) = match text.split_once("\n#%profile\n") {
        Some((s, p)) => (s, Some(p)),
        None => (text, None),
    };
    let dir = std::path::Path::new("/nonexistent-dmasim-fuzz");
    let mut s = Scenario::parse("fuzz.toml", scenario_text, dir)?;
    if let Some(p) = profile_text {
        s.set_profile(Profile::parse("fuzz-profile.toml", p)?)?;
    }
    for line in scenario_text.lines() {
        if let Some(k) = line.strip_prefix("#%kernel ") {
            s.set_kernel_str(k)?;
        } else if let Some(p) = line.strip_prefix("#%policy ") {
            s.set_policies(p)?;
        }
    }
    let _ = s.profile.unpriced_sw_warning(&s.sw_keys(), "fuzz");
    s.check_work(MAX_WORK)?;
    let outcome = scenario::execute(&s)?;
    let _ = outcome.table();
    let _ = outcome.json();
    let _ = dmasim::report::folded(outcome.stacks());
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data)
        && let Err(RunError::Internal(bug)) = run(text)
    {
        // A bug the model found itself (exit 70 from the binary) is a finding, as a panic is.
        panic!("{bug}");
    }
});
