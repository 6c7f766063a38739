//! The shipped scenarios, compiled in: `dmasim run NAME` and `dmasim scenarios` work from any
//! directory, as built-in platforms do.
//!
//! Kernel counterpart: none.
//!
//! Invariants: the list is the `scenarios/` directory, name for name and byte for byte (a test
//! checks it); a file of the same name as a shipped scenario wins.

use super::*;

/// The shipped scenarios (`scenarios/*.toml`), compiled in so that `dmasim run NAME` works from any
/// directory, as built-in platforms do: (name, TOML text). A test checks the list against the
/// directory.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "batched-sync",
        include_str!("../../scenarios/batched-sync.toml"),
    ),
    ("iommu-api", include_str!("../../scenarios/iommu-api.toml")),
    ("iommu-ops", include_str!("../../scenarios/iommu-ops.toml")),
    (
        "ixgbe-forwarding",
        include_str!("../../scenarios/ixgbe-forwarding.toml"),
    ),
    (
        "pernuma-cma",
        include_str!("../../scenarios/pernuma-cma.toml"),
    ),
    (
        "smmu-walk-flush",
        include_str!("../../scenarios/smmu-walk-flush.toml"),
    ),
    (
        "swiotlb-bounce",
        include_str!("../../scenarios/swiotlb-bounce.toml"),
    ),
    (
        "zynq-coherence-options",
        include_str!("../../scenarios/zynq-coherence-options.toml"),
    ),
    (
        "zynq-memcpy",
        include_str!("../../scenarios/zynq-memcpy.toml"),
    ),
    (
        "zynq-pipeline-coherent",
        include_str!("../../scenarios/zynq-pipeline-coherent.toml"),
    ),
    (
        "zynq-pipeline-streaming",
        include_str!("../../scenarios/zynq-pipeline-streaming.toml"),
    ),
    (
        "zynq-streaming",
        include_str!("../../scenarios/zynq-streaming.toml"),
    ),
    (
        "zynq-user-access",
        include_str!("../../scenarios/zynq-user-access.toml"),
    ),
];

/// A shipped scenario as `dmasim scenarios` lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BuiltinInfo {
    pub name: &'static str,
    pub kind: String,
    pub platform: String,
    pub kernel: String,
    /// The first sentence of the file's opening comment.
    pub description: String,
}

/// Every shipped scenario, in name order: its kind, platform and release as the file gives them,
/// and the first sentence of its opening comment.
pub fn builtin_list() -> Vec<BuiltinInfo> {
    BUILTIN
        .iter()
        .map(|(name, text)| {
            let doc: toml::Table = toml::from_str(text).unwrap_or_default();
            let get = |sec: &str, key: &str| {
                doc.get(sec)
                    .and_then(|t| t.get(key))
                    .and_then(|v| v.as_str())
                    .unwrap_or("-")
                    .to_string()
            };
            let comment: Vec<&str> = text
                .lines()
                .map_while(|l| l.strip_prefix('#'))
                .map(str::trim)
                .collect();
            let comment = comment.join(" ");
            let description = match comment.find(". ") {
                Some(i) => comment[..=i].to_string(),
                None => comment,
            };
            BuiltinInfo {
                name,
                kind: get("workload", "kind"),
                platform: get("scenario", "platform"),
                kernel: get("scenario", "kernel"),
                description,
            }
        })
        .collect()
}

/// A scenario's text and the directory its relative profile paths start from: the file when one
/// exists at `path`, else the shipped scenario of that name (whose platforms are all built in).
pub(super) fn read_scenario(
    path: &str,
) -> Result<(String, String, std::path::PathBuf), InputError> {
    // `-`: a trace on standard input (a scenario is a file), which the replay spools.
    if path == "-" {
        let text = super::replay::scenario_text(path);
        return Ok((
            super::replay::STDIN_NAME.to_string(),
            text,
            std::path::PathBuf::new(),
        ));
    }
    let p = std::path::Path::new(path);
    if !p.exists()
        && let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == path)
    {
        return Ok((
            format!("builtin:{name}"),
            (*text).to_string(),
            std::path::PathBuf::new(),
        ));
    }
    if p.is_file() && crate::trace::is_trace_dat(path) {
        return Err(InputError::new(path, crate::trace::TRACE_DAT));
    }
    // A trace where a scenario is expected (told by its first lines; a trace may be far larger
    // than any scenario): the scenario that replays it. An empty file is neither.
    match p.is_file().then(|| crate::trace::sniff_file(path)) {
        Some(crate::trace::Sniffed::Trace) => {
            let dir = p.parent().map(|d| d.to_path_buf()).unwrap_or_default();
            let name = p.file_name().map_or(path.into(), |n| n.to_string_lossy());
            let text = super::replay::scenario_text(&name);
            return Ok((path.to_string(), text, dir));
        }
        Some(crate::trace::Sniffed::Empty) => {
            return Err(InputError {
                file: path.to_string(),
                line: Some(1),
                key: None,
                message: "the file is empty: neither a trace (the text of `trace-cmd report`, \
                          tracefs or `perf script`) nor a scenario"
                    .into(),
            });
        }
        _ => {}
    }
    let text = crate::input::read_input(path, "scenario").map_err(|mut e| {
        if !p.exists() {
            e.message.push_str(&format!(
                " (shipped scenarios, runnable by name: {})",
                BUILTIN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        e
    })?;
    let dir = p.parent().map(|d| d.to_path_buf()).unwrap_or_default();
    Ok((path.to_string(), text, dir))
}
