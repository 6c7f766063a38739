//! The crate's module graph has no cycles.
//!
//! Kernel counterpart: none — this guards the crate's layering, which mirrors the kernel's: `types`
//! and `hw` at the bottom, then `platform`, `arch`, `dma`, `iommu`, and the tools on top. A cycle
//! (say `hw` naming `platform::Arch` while `platform` builds on `hw`) compiles fine in Rust, so
//! nothing but a check like this one stops the layers from knotting together.
//!
//! What it models: every file under `src/` is read as text; each `crate::` path in code (not in
//! comments), including every item of a `crate::{a, b::c}` group, is an edge from the file's
//! top-level module (`src/hw/host.rs` belongs to `hw`) to the path's first segment. A module naming
//! its own submodules is no edge. `super::` paths are followed only when they climb out of the
//! file's top-level module, which this crate never does. The edges keep their file and line, so a
//! cycle is reported as the lines that close it.
//!
//! Invariants checked: the top-level graph is acyclic; `hw` depends on none of the layers that
//! build on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One dependency: `from` names `to` at `file:line`.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    file: String,
    line: usize,
}

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

/// The file's module path below the crate root: `src/hw/host.rs` is `[hw, host]`, `src/hw/mod.rs`
/// is `[hw]`, `src/lib.rs` is `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// Blanks out comments and string/char literals, keeping line breaks, so that only code is
/// scanned and line numbers stay right.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep_newlines = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |n| i + n);
            keep_newlines(&b[i..end], &mut out);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            let start = i;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_newlines(&b[start..i], &mut out);
        } else if b[i] == b'r' && (b[i + 1..].starts_with(b"\"") || b[i + 1..].starts_with(b"#")) {
            // A raw string (r"..", r#".."#, br".."), unless the r ends an identifier.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let byte_raw =
                i == 1 && b[0] == b'b' || i > 1 && b[i - 1] == b'b' && !is_ident(b[i - 2]);
            if b.get(i + 1 + hashes) != Some(&b'"') || (i > 0 && is_ident(b[i - 1]) && !byte_raw) {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |n| body + n + close.len());
            keep_newlines(&b[i..end], &mut out);
            i = end;
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
            keep_newlines(&b[start..i], &mut out);
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // 'x' (a lifetime like 'a never has a closing quote two bytes on).
            out.push_str("   ");
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // '\n', '\'', '\u{..}': the escaped character sits at i + 2, the closing quote after.
            let end = b[i + 3..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |n| i + 4 + n);
            keep_newlines(&b[i..end], &mut out);
            i = end;
        } else {
            // Copy one whole UTF-8 character.
            let len = text[i..].chars().next().unwrap().len_utf8();
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_at(b: &[u8], mut i: usize) -> (String, usize) {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    while i < b.len() && is_ident(b[i]) {
        i += 1;
    }
    (String::from_utf8_lossy(&b[start..i]).into_owned(), i)
}

/// The first segment of every path in a `{...}` group starting at `b[open]`.
fn group_heads(b: &[u8], open: usize) -> Vec<(String, usize)> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut i = open;
    let mut expect_head = true;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                i += 1;
                if depth == 1 {
                    expect_head = true;
                }
            }
            b'}' => {
                depth -= 1;
                i += 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => {
                expect_head = true;
                i += 1;
            }
            c if depth == 1 && expect_head && is_ident(c) => {
                let (id, next) = ident_at(b, i);
                heads.push((id, i));
                expect_head = false;
                i = next;
            }
            _ => i += 1,
        }
    }
    heads
}

/// Every top-level module the code of one file names, with the byte offset it is named at.
fn named_modules(code: &str, here: &[String]) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_word = i == 0 || !is_ident(b[i - 1]);
        if at_word && b[i..].starts_with(b"crate::") {
            let after = i + "crate::".len();
            let (id, next) = ident_at(b, after);
            if id.is_empty() && b.get(next) == Some(&b'{') {
                found.extend(group_heads(b, next));
            } else {
                found.push((id, i));
            }
            i = next.max(i + 1);
        } else if at_word && b[i..].starts_with(b"super::") {
            // Climbing out of the file's own top-level module lands at the crate root.
            let start = i;
            let mut ups = 0;
            while b[i..].starts_with(b"super::") {
                ups += 1;
                i += "super::".len();
            }
            if ups >= here.len() {
                let (id, next) = ident_at(b, i);
                found.push((id, start));
                i = next;
            }
        } else {
            i += 1;
        }
    }
    found
}

fn line_at(code: &str, offset: usize) -> usize {
    code[..offset].bytes().filter(|&c| c == b'\n').count() + 1
}

fn edges() -> Vec<Edge> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let top: BTreeSet<String> = files
        .iter()
        .filter_map(|f| module_path(&src, f).first().cloned())
        .collect();
    let mut out = Vec::new();
    for f in &files {
        let here = module_path(&src, f);
        // lib.rs declares the modules; the binary (src/bin/dmasim) is a separate crate that
        // writes `dmasim::`, and its own `crate::` paths name no module of the library.
        let Some(from) = here.first() else { continue };
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for (to, offset) in named_modules(&code, &here) {
            if &to != from && top.contains(&to) {
                out.push(Edge {
                    from: from.clone(),
                    to,
                    file: f.strip_prefix(&root).unwrap().display().to_string(),
                    line: line_at(&code, offset),
                });
            }
        }
    }
    out
}

/// A cycle in the graph as the edges that close it, or `None`.
fn find_cycle(edges: &[Edge]) -> Option<Vec<Edge>> {
    let mut out: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        out.entry(&e.from).or_default().push(e);
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit<'a>(
        n: &'a str,
        out: &BTreeMap<&'a str, Vec<&'a Edge>>,
        mark: &mut BTreeMap<&'a str, Mark>,
        path: &mut Vec<&'a Edge>,
    ) -> Option<Vec<Edge>> {
        match mark.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = path.iter().position(|e| e.from == n).unwrap();
                return Some(path[start..].iter().map(|&e| e.clone()).collect());
            }
            None => {}
        }
        mark.insert(n, Mark::Open);
        for &e in out.get(n).map(Vec::as_slice).unwrap_or_default() {
            path.push(e);
            if let Some(c) = visit(&e.to, out, mark, path) {
                return Some(c);
            }
            path.pop();
        }
        mark.insert(n, Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    let nodes: Vec<&str> = out.keys().copied().collect();
    for n in nodes {
        if let Some(c) = visit(n, &out, &mut mark, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

fn describe(cycle: &[Edge]) -> String {
    cycle
        .iter()
        .map(|e| format!("  {} -> {}   ({}:{})", e.from, e.to, e.file, e.line))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn top_level_module_graph_is_acyclic() {
    let edges = edges();
    // The scan must see the crate's known layering, or an empty graph would pass vacuously.
    for (from, to) in [("platform", "hw"), ("arch", "hw"), ("hostbench", "hw")] {
        assert!(
            edges.iter().any(|e| e.from == from && e.to == to),
            "the scan lost the edge {from} -> {to}"
        );
    }
    if let Some(c) = find_cycle(&edges) {
        panic!("module cycle:\n{}", describe(&c));
    }
}

#[test]
fn hw_depends_on_no_layer_built_on_it() {
    let uppers: BTreeSet<String> = edges()
        .into_iter()
        .filter(|e| e.to == "hw")
        .map(|e| e.from)
        .collect();
    let bad: Vec<Edge> = edges()
        .into_iter()
        .filter(|e| e.from == "hw" && uppers.contains(&e.to))
        .collect();
    assert!(
        bad.is_empty(),
        "hw names modules that build on it:\n{}",
        describe(&bad)
    );
}

#[test]
fn the_scanner_sees_groups_inline_paths_and_skips_comments() {
    let code = code_only(
        "use crate::{hw::Hw, types::{PhysAddr, Arch}};\n\
         // use crate::report;\n\
         let s = \"crate::policy\";\n\
         fn f(a: crate::platform::Arch) {}\n\
         use super::super::dma::X;\n",
    );
    let names: Vec<String> = named_modules(&code, &["iommu".into(), "core".into()])
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["hw", "types", "platform", "dma"]);
    let e = |from: &str, to: &str| Edge {
        from: from.into(),
        to: to.into(),
        file: "f.rs".into(),
        line: 1,
    };
    let cycle = find_cycle(&[e("a", "b"), e("b", "c"), e("c", "a"), e("a", "d")]).unwrap();
    let names: Vec<&str> = cycle.iter().map(|e| e.from.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(find_cycle(&[e("a", "b"), e("a", "c"), e("b", "c")]).is_none());
}
