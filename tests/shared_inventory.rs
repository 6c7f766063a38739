//! docs/design.md's inventory of what the machine's CPUs share is the code's.
//!
//! Kernel counterpart: none — this keeps a document honest. The kernel's shared state is its
//! locks and the words CPUs read and write in turn; the model's is every `smp::SpinLock` and
//! `smp::Shared` a layer constructs.
//!
//! What it checks: every construction of a lock (`SpinLock::named`, `SpinLock::per_cpu`) or of
//! a shared value (`Shared::new`) in `src/` outside the engine itself is found as text, with the
//! kernel's name it is given (its first string argument) and its file; the table rendered from
//! them must be the one between the inventory markers in docs/design.md. A new lock or line
//! without its row, or a row for one that is gone, fails with the table as it should read.
//!
//! Invariants checked: the scan finds the known shared state (so an empty table cannot pass);
//! every construction names its state with a string literal.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const BEGIN: &str =
    "<!-- shared-state inventory: rendered from src/ by tests/shared_inventory.rs -->";
const END: &str = "<!-- end of the shared-state inventory -->";

/// What a construction makes, by the call that makes it.
const KINDS: [(&str, &str); 3] = [
    ("SpinLock::named(", "lock"),
    ("SpinLock::per_cpu(", "per-CPU lock"),
    ("Shared::new(", "shared line"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The first string literal from `at` on: the kernel's name the construction gives.
fn first_literal(text: &str) -> Option<&str> {
    let open = text.find('"')?;
    let rest = &text[open + 1..];
    Some(&rest[..rest.find('"')?])
}

/// (name, kind, file) of every construction in `src/`, outside the engine and tests.
fn inventory() -> BTreeSet<(String, &'static str, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut out = BTreeSet::new();
    for f in files {
        let rel = f
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // The engine defines the types; tests make locks of their own.
        if rel == "src/smp.rs" || rel.ends_with("tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (call, kind) in KINDS {
            for (at, _) in code.match_indices(call) {
                let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
                if code[line_start..at].trim_start().starts_with("//") {
                    continue;
                }
                let name = first_literal(&code[at + call.len()..])
                    .unwrap_or_else(|| panic!("{rel}: a {kind} built without a literal name"));
                out.insert((name.to_string(), kind, rel.clone()));
            }
        }
    }
    out
}

fn render(rows: &BTreeSet<(String, &'static str, String)>) -> String {
    let mut s =
        String::from("| shared state (the kernel's name) | kind | where |\n|---|---|---|\n");
    for (name, kind, file) in rows {
        s.push_str(&format!("| `{name}` | {kind} | `{file}` |\n"));
    }
    s
}

#[test]
fn the_design_doc_lists_every_lock_and_shared_line() {
    let rows = inventory();
    for known in [
        "iova_rbtree_lock",
        "cmdq->q.llq",
        "cpu_rcache->lock",
        "area->lock",
    ] {
        assert!(
            rows.iter().any(|r| r.0 == known),
            "the scan lost `{known}`: {rows:?}"
        );
    }
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md");
    let doc = std::fs::read_to_string(doc_path).unwrap();
    let start = doc
        .find(BEGIN)
        .expect("docs/design.md has the inventory's start marker");
    let end = doc
        .find(END)
        .expect("docs/design.md has the inventory's end marker");
    let have = doc[start + BEGIN.len()..end].trim();
    let want = render(&rows);
    assert_eq!(
        have,
        want.trim(),
        "docs/design.md's inventory differs from the code; it should read:\n{want}"
    );
}

#[test]
fn a_name_is_the_first_literal_after_the_call() {
    assert_eq!(
        first_literal("\n    \"fq->lock\",\n    \"(spinning on fq->lock)\","),
        Some("fq->lock")
    );
    assert_eq!(first_literal("x, y)"), None);
}
