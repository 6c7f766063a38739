//! No silent zero: every software cost a shipped scenario can charge on its own platform is
//! priced in that platform's profile, with a source (a fit, a citation, or a held assumption
//! with its reasoning — a held 0 says why it is 0). A scenario added or changed so that it
//! charges a cost its platform leaves out fails here, naming both.

use dmasim::scenario::{BUILTIN, Scenario};

#[test]
fn every_shipped_scenario_runs_with_every_cost_priced() {
    let mut unpriced = Vec::new();
    for (name, text) in BUILTIN {
        let s = Scenario::parse(
            &format!("scenarios/{name}.toml"),
            text,
            std::path::Path::new("."),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(w) = s
            .profile
            .unpriced_sw_warning(&s.sw_keys(), &format!("scenario `{name}`"))
        {
            unpriced.push(w);
        }
        // Every parameter the profile lists carries a source.
        for p in s.profile.params() {
            assert!(
                !p.source.trim().is_empty(),
                "{name}: {} has no source",
                p.key
            );
        }
    }
    assert!(unpriced.is_empty(), "{}", unpriced.join("\n"));
    assert!(
        BUILTIN.len() >= 12,
        "the shipped scenarios: {}",
        BUILTIN.len()
    );
}

/// sm8150's built-in profile with its dma-direct costs taken out, written once per test run: a
/// platform that leaves costs unpriced which a dma-direct scenario (`batched-sync`) charges.
pub fn sm8150_without_dma_direct() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let text: String = include_str!("../profiles/sm8150.toml")
            .lines()
            .filter(|l| !l.starts_with("dma_direct_"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(text.len() < include_str!("../profiles/sm8150.toml").len());
        let path = std::env::temp_dir().join(format!(
            "dmasim-sm8150-no-direct-{}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    })
}
