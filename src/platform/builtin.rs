//! The built-in profiles, compiled into the binary.
//!
//! Kernel counterpart: none.

use super::*;

/// Built-in profiles: (name, file name, TOML text).
pub(super) const BUILTIN: &[(&str, &str)] = &[
    (
        "dimensity9500",
        include_str!("../../profiles/dimensity9500.toml"),
    ),
    (
        "x86-2012-ixgbe",
        include_str!("../../profiles/x86-2012-ixgbe.toml"),
    ),
    ("sm8150", include_str!("../../profiles/sm8150.toml")),
    ("zynq7000", include_str!("../../profiles/zynq7000.toml")),
    ("kunpeng920", include_str!("../../profiles/kunpeng920.toml")),
    // Starting points for a machine no profile above describes: nothing in them is fitted.
    (
        "generic-arm64-smmuv3",
        include_str!("../../profiles/generic-arm64-smmuv3.toml"),
    ),
    (
        "generic-arm64-mmu500",
        include_str!("../../profiles/generic-arm64-mmu500.toml"),
    ),
];

/// Whether `name` is a built-in profile's name.
pub fn is_builtin(name: &str) -> bool {
    BUILTIN.iter().any(|(n, _)| *n == name)
}

pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// `(name, description)` of every built-in profile.
pub fn builtin_list() -> Vec<(String, String)> {
    BUILTIN
        .iter()
        .filter_map(|(n, _)| Profile::load(n).ok())
        .map(|p| {
            (
                p.file.platform.name.clone(),
                p.file.platform.description.clone(),
            )
        })
        .collect()
}
