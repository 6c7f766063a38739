//! The docs are tested: every fenced block of README.md and docs/*.md is extracted and checked by
//! the conventions docs/README.md sets out, so a doc that no longer matches the program fails here.
//!
//! - A `toml` block is a complete scenario (`[scenario]` and `[workload]`: parsed and run), a
//!   complete profile (`[platform]`: parsed, then the shipped `batched-sync` scenario run on it),
//!   or is marked ```` ```toml fragment base=scenario:NAME ```` / `base=profile:NAME`: its sections
//!   replace the base's sections of the same name (and theirs beneath), and the result is parsed,
//!   and run when it is a scenario.
//! - A block with `$ ` lines is a session: each command runs (the built binary as `dmasim`, in a
//!   temporary directory holding copies of `scenarios/` and `profiles/`, one directory per page so
//!   a later command can read what an earlier one wrote) and must exit 0, or with the status a
//!   trailing `# exit N` gives. The lines after a command are its output: split at lines that are
//!   `...` alone, each run of lines must appear in that order as consecutive lines of the real
//!   output (standard error, then standard output), the first at its start unless a `...` comes
//!   first and the last at its end unless a `...` comes last. Within a line, `...` stands for any
//!   text.
//! - An `sh` block without `$ ` lines is a script and runs whole under `sh -e` the same way; a
//!   here-document `cat > NAME <<'END'` ... `END` in it writes that file of the scratch
//!   directory, its text as the page shows it.
//! - Commands other than `dmasim` are known here one by one: `cargo run --release --` is the
//!   binary; `cargo test`, `cargo install` and `tools/compare-hostbench.sh` are not run (each
//!   reason below). Any other command fails the test until it is given a rule.

use dmasim::platform::Profile;
use dmasim::scenario::{Scenario, execute};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Commands the docs show but this test does not run, and why.
const NOT_RUN: &[(&str, &str)] = &[
    ("cargo test", "the suite this test is part of"),
    ("cargo install", "writes to the user's ~/.cargo"),
    (
        "cargo bench",
        "benchmarks take minutes each and their figures are the machine's, not the model's",
    ),
    (
        "tools/compare-hostbench.sh",
        "needs a C compiler and takes minutes; CI runs it on its own",
    ),
];

#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    info: String,
    body: Vec<String>,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The fenced blocks of a Markdown page; a fence indented (in a list item) has that indent taken
/// off its lines.
fn blocks(file: &str, md: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, Block)> = None;
    for (i, line) in md.lines().enumerate() {
        let t = line.trim_start();
        match &mut cur {
            None if t.starts_with("```") => {
                cur = Some((
                    line.len() - t.len(),
                    Block {
                        file: file.to_string(),
                        line: i + 1,
                        info: t.trim_start_matches('`').trim().to_string(),
                        body: Vec::new(),
                    },
                ))
            }
            Some(_) if t.starts_with("```") => out.extend(cur.take().map(|(_, b)| b)),
            Some((indent, b)) => {
                let cut = line.len().min(*indent);
                let s = if line[..cut].trim().is_empty() {
                    &line[cut..]
                } else {
                    line
                };
                b.body.push(s.to_string());
            }
            None => {}
        }
    }
    assert!(cur.is_none(), "{file}: a fence is not closed");
    out
}

fn pages() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

/// A temporary directory with copies of `scenarios/` and `profiles/`, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "dmasim-docs-{}-{}",
            std::process::id(),
            tag.replace('/', "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["scenarios", "profiles"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
            for e in std::fs::read_dir(Path::new(ROOT).join(sub)).unwrap() {
                let p = e.unwrap().path();
                std::fs::copy(&p, dir.join(sub).join(p.file_name().unwrap())).unwrap();
            }
        }
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a command line is to this test: run (as a shell line for `dmasim`), or skipped.
fn command(at: &str, line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(rest) = line.strip_prefix("cargo run --release --") {
        return Some(format!("dmasim{rest}"));
    }
    if line.starts_with("dmasim ") || line == "dmasim" {
        return Some(line.to_string());
    }
    if NOT_RUN.iter().any(|(p, _)| line.starts_with(p)) {
        return None;
    }
    // Shell syntax around dmasim commands (a loop) runs as it is.
    let first = line.split_whitespace().next().unwrap_or("");
    if ["for", "do", "done", "#"].contains(&first) || line.is_empty() {
        return Some(line.to_string());
    }
    panic!(
        "{at}: `{line}`: this test does not know how to run it; give it a rule in NOT_RUN or run it"
    )
}

struct Ran {
    status: i32,
    lines: Vec<String>,
}

fn sh(dir: &Path, script: &str) -> Ran {
    let bin = Path::new(env!("CARGO_BIN_EXE_dmasim"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("sh runs");
    let mut lines: Vec<String> = String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect();
    lines.extend(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.trim_end().to_string()),
    );
    Ran {
        status: o.status.code().unwrap_or(-1),
        lines,
    }
}

/// A shown line against a real one: equal, with `...` standing for any text.
fn line_matches(shown: &str, real: &str) -> bool {
    let shown = shown.trim_end();
    if !shown.contains("...") {
        return shown == real;
    }
    let parts: Vec<&str> = shown.split("...").collect();
    let mut rest = real;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(j) => rest = &rest[j + p.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Check shown output against real output by the `...` convention; the first failure, if any.
fn check_output(shown: &[String], real: &[String]) -> Result<(), String> {
    let shown: Vec<&str> = shown.iter().map(|s| s.trim_end()).collect();
    // Trailing blank lines are layout, not output.
    let end = shown
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(0, |i| i + 1);
    let shown = &shown[..end];
    if shown.is_empty() {
        return Ok(());
    }
    let open_start = shown.first() == Some(&"...");
    let open_end = shown.last() == Some(&"...");
    let chunks: Vec<&[&str]> = shown
        .split(|l| *l == "...")
        .filter(|c| !c.is_empty())
        .collect();
    let mut pos = 0;
    for (ci, chunk) in chunks.iter().enumerate() {
        let fits = |at: usize| {
            at + chunk.len() <= real.len()
                && chunk
                    .iter()
                    .zip(&real[at..])
                    .all(|(s, r)| line_matches(s, r))
        };
        let found = if ci == 0 && !open_start {
            fits(0).then_some(0)
        } else {
            (pos..=real.len()).find(|&at| fits(at))
        };
        let Some(at) = found else {
            return Err(format!(
                "these lines are not in the output{}:\n{}",
                if ci == 0 && !open_start {
                    " at its start (a `...` line marks a cut)"
                } else {
                    " in this order"
                },
                chunk.join("\n")
            ));
        };
        pos = at + chunk.len();
    }
    if !open_end && pos != real.len() {
        return Err(format!(
            "the output goes on after the last line shown (a `...` line marks a cut):\n{}",
            real[pos..]
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    Ok(())
}

/// Run a session block (`$ ` lines and their output). Returns how many commands ran.
fn run_session(b: &Block, dir: &Path) -> usize {
    let mut ran = 0;
    let mut i = 0;
    while i < b.body.len() {
        let Some(cmd) = b.body[i].strip_prefix("$ ") else {
            assert!(
                b.body[i].trim().is_empty(),
                "{}: output before any `$ ` command: `{}`",
                b.at(),
                b.body[i]
            );
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < b.body.len() && !b.body[j].starts_with("$ ") {
            j += 1;
        }
        let shown = &b.body[i + 1..j];
        let (cmd, want) = match cmd.rsplit_once("# exit ") {
            Some((c, n)) => (c.trim(), n.trim().parse::<i32>().expect("# exit N")),
            None => (cmd.trim(), 0),
        };
        let at = format!("{}:{}", b.file, b.line + 1 + i);
        if let Some(script) = command(&at, cmd) {
            let r = sh(dir, &script);
            assert_eq!(
                r.status,
                want,
                "{at}: `{cmd}` exited {} (want {want}):\n{}",
                r.status,
                r.lines.join("\n")
            );
            if let Err(e) = check_output(shown, &r.lines) {
                panic!(
                    "{at}: `{cmd}`: {e}\n--- real output ---\n{}",
                    r.lines.join("\n")
                );
            }
            ran += 1;
        }
        i = j;
    }
    ran
}

/// Run an `sh` script block line by line through [`command`], as one script.
/// Whether `line` opens a here-document that writes a file of the scratch directory, `cat >
/// NAME <<'END'`: the way a page shows a file's whole text and has it for the next command.
fn writes_file(line: &str) -> bool {
    let Some(rest) = line.trim().strip_prefix("cat > ") else {
        return false;
    };
    let name = rest.split_whitespace().next().unwrap_or("");
    !name.is_empty() && !name.contains(['/', '$', '`']) && rest.ends_with("<<'END'")
}

fn run_script(b: &Block, dir: &Path) -> usize {
    let mut script = String::new();
    let mut n = 0;
    let mut in_file = false;
    for (i, l) in b.body.iter().enumerate() {
        let at = format!("{}:{}", b.file, b.line + 1 + i);
        if in_file || writes_file(l) {
            // A file's text is the page's, not commands: kept as written.
            in_file = !(in_file && l == "END");
            n += usize::from(writes_file(l));
            script.push_str(l);
            script.push('\n');
            continue;
        }
        if let Some(c) = command(&at, l) {
            n += usize::from(c.starts_with("dmasim"));
            script.push_str(&c);
            script.push('\n');
        }
    }
    if n > 0 {
        let r = sh(dir, &script);
        assert_eq!(
            r.status,
            0,
            "{}: the script failed:\n{script}\n{}",
            b.at(),
            r.lines.join("\n")
        );
    }
    n
}

/// The `[header]` lines of a TOML text, as written between the brackets.
fn header(line: &str) -> Option<String> {
    let t = line.trim();
    let t = t.split('#').next().unwrap().trim();
    (t.starts_with('[') && t.ends_with(']')).then(|| t.trim_matches(['[', ']']).trim().to_string())
}

/// The base with every section the fragment has (and every section beneath one) taken out, then
/// the fragment appended.
fn insert(base: &str, fragment: &str) -> String {
    let replaced: Vec<String> = fragment.lines().filter_map(header).collect();
    let mut out = String::new();
    let mut skipping = false;
    for l in base.lines() {
        if let Some(h) = header(l) {
            skipping = replaced
                .iter()
                .any(|r| h == *r || h.starts_with(&format!("{r}.")));
        }
        if !skipping {
            out.push_str(l);
            out.push('\n');
        }
    }
    out + "\n" + fragment
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn run_scenario_text(at: &str, text: &str) {
    let s = Scenario::parse(at, text, Path::new(ROOT).join("scenarios").as_path())
        .unwrap_or_else(|e| panic!("{at}: {e}\n{text}"));
    execute(&s).unwrap_or_else(|e| panic!("{at}: {e}"));
}

fn run_profile_text(at: &str, text: &str, dir: &Path) {
    Profile::parse(at, text).unwrap_or_else(|e| panic!("{at}: {e}\n{text}"));
    let path = dir.join("doc-profile.toml");
    std::fs::write(&path, text).unwrap();
    let mut s = Scenario::load("batched-sync").unwrap();
    s.set_platform(&path.to_string_lossy())
        .unwrap_or_else(|e| panic!("{at}: {e}"));
    execute(&s).unwrap_or_else(|e| panic!("{at}: batched-sync on this profile: {e}"));
}

fn run_toml(b: &Block, dir: &Path) {
    let text = b.body.join("\n") + "\n";
    let at = b.at();
    let words: Vec<&str> = b.info.split_whitespace().collect();
    if words.contains(&"fragment") {
        let base = words
            .iter()
            .find_map(|w| w.strip_prefix("base="))
            .unwrap_or_else(|| {
                panic!("{at}: a fragment names its base: base=scenario:NAME or base=profile:NAME")
            });
        if let Some(name) = base.strip_prefix("scenario:") {
            let whole = insert(&read(&format!("scenarios/{name}.toml")), &text);
            run_scenario_text(&at, &whole);
        } else if let Some(name) = base.strip_prefix("profile:") {
            let whole = insert(&read(&format!("profiles/{name}.toml")), &text);
            Profile::parse(&at, &whole).unwrap_or_else(|e| panic!("{at}: {e}\n{whole}"));
        } else {
            panic!("{at}: base `{base}` is neither scenario:NAME nor profile:NAME");
        }
        return;
    }
    let heads: Vec<String> = b.body.iter().filter_map(|l| header(l)).collect();
    let has = |h: &str| heads.iter().any(|x| x == h);
    if has("scenario") && has("workload") {
        run_scenario_text(&at, &text);
    } else if has("platform") {
        run_profile_text(&at, &text, dir);
    } else {
        panic!(
            "{at}: neither a whole scenario nor a whole profile: mark it ```toml fragment base=..."
        );
    }
}

#[test]
fn every_fenced_example_in_the_docs_runs_and_shows_real_output() {
    let mut commands = 0;
    let mut tomls = 0;
    // Every block is checked, and every failure reported, before the test fails.
    let mut failed = Vec::new();
    for (file, md) in pages() {
        let scratch = Scratch::new(&file);
        for b in blocks(&file, &md) {
            let lang = b.info.split_whitespace().next().unwrap_or("");
            let session = b.body.iter().any(|l| l.starts_with("$ "));
            let dir = &scratch.0;
            let r = std::panic::catch_unwind(|| match lang {
                "toml" => {
                    run_toml(&b, dir);
                    (0, 1)
                }
                _ if session => (run_session(&b, dir), 0),
                "sh" => (run_script(&b, dir), 0),
                // Output formats and equations: shown, not run.
                "" | "json" | "text" => (0, 0),
                other => panic!("{}: a ```{other} block: say here how to check it", b.at()),
            });
            match r {
                Ok((c, t)) => {
                    commands += c;
                    tomls += t;
                }
                Err(_) => failed.push(b.at()),
            }
        }
    }
    assert!(
        failed.is_empty(),
        "failing blocks (messages above): {failed:?}"
    );
    assert!(commands >= 10, "{commands} commands ran");
    assert!(tomls >= 15, "{tomls} TOML blocks checked");
}

#[test]
fn the_output_convention_is_enforced() {
    let real: Vec<String> = ["a", "b 1.0 x", "c", "d"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(check_output(&s(&["a", "b ... x", "c", "d"]), &real).is_ok());
    assert!(check_output(&s(&["a", "...", "d"]), &real).is_ok());
    assert!(check_output(&s(&["...", "c", "..."]), &real).is_ok());
    // A cut that is not marked, a line not printed, lines out of order.
    assert!(check_output(&s(&["a", "c", "d"]), &real).is_err());
    assert!(check_output(&s(&["a", "..."]), &real).is_ok());
    assert!(check_output(&s(&["a"]), &real).is_err());
    assert!(check_output(&s(&["...", "e"]), &real).is_err());
    assert!(check_output(&s(&["...", "c", "...", "a", "..."]), &real).is_err());
    assert!(check_output(&s(&["b"]), &real).is_err());
}

#[test]
fn a_fragment_replaces_its_sections_and_those_beneath() {
    let base = "[a]\nx = 1\n[a.b]\ny = 2\n[c]\nz = 3\n";
    let got = insert(base, "[a]\nx = 5\n");
    assert!(got.contains("[c]\nz = 3") && got.contains("x = 5"), "{got}");
    assert!(!got.contains("y = 2") && !got.contains("x = 1"), "{got}");
}

#[test]
fn every_shipped_scenario_runs() {
    let mut n = 0;
    for e in std::fs::read_dir(Path::new(ROOT).join("scenarios")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let s = Scenario::load(&p.to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
            execute(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 5, "{n} scenarios");
}

/// The user docs describe the product as it is: no development log (sessions, issue numbers),
/// and profiles and scenarios cite public sources only, never a file the repository does not
/// ship or a fit still to come.
#[test]
fn user_docs_and_shipped_files_are_for_users() {
    let root = Path::new(ROOT);
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    for p in &pages {
        let t = std::fs::read_to_string(p).unwrap().to_lowercase();
        assert!(!t.contains("session"), "{}: mentions sessions", p.display());
        assert!(!t.contains("issue #"), "{}: names an issue", p.display());
    }
    for dir in ["profiles", "scenarios"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            let t = std::fs::read_to_string(&p).unwrap();
            for bad in ["kernel-facts", "the lead's", "session"] {
                assert!(!t.contains(bad), "{}: `{bad}`", p.display());
            }
        }
    }
}

#[test]
fn the_parameter_table_is_the_registry() {
    let md = read("docs/profiles.md");
    let table = dmasim::platform::params::markdown_table();
    assert!(
        md.contains(&table),
        "docs/profiles.md's \"Every parameter\" table differs from the registry \
         (src/platform/params.rs); it should read:\n{table}"
    );
}
