//! Reading user input: one error type that names the file, the line and the key.
//!
//! No kernel counterpart. Every file a user hands us (profile, scenario, trace) goes through
//! [`parse_toml`], and every semantic check after parsing reports through [`InputError`], so a bad
//! input always ends in one message and exit status 2, never a panic.

use serde::de::DeserializeOwned;
use std::fmt;
use std::ops::Range;

/// A problem with something the user supplied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InputError {
    /// The file (or `<argument>` for command-line values).
    pub file: String,
    /// 1-based line, when the problem sits at a place in the file.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `cache.clean.latency`.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl InputError {
    pub fn new(file: &str, message: impl Into<String>) -> InputError {
        InputError {
            file: file.to_string(),
            line: None,
            key: None,
            message: message.into(),
        }
    }

    pub fn at(
        file: &str,
        text: &str,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) -> InputError {
        InputError {
            file: file.to_string(),
            line: span.map(|s| line_of(text, s.start)),
            key: (!key.is_empty()).then(|| key.to_string()),
            message: message.into(),
        }
    }
}

/// Largest input file dmasim reads: far above any real profile or scenario (a few KiB), far
/// below what would cost noticeable memory or time to parse.
pub const MAX_INPUT_BYTES: u64 = 1 << 20;

/// Read a user's file: only a regular file (not a directory, FIFO or device, which could block
/// or never end) of at most [`MAX_INPUT_BYTES`], checked before anything is read.
pub fn read_input(path: &str, what: &str) -> Result<String, InputError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| InputError::new(path, format!("cannot read {what}: {e}")))?;
    if !meta.is_file() {
        return Err(InputError::new(
            path,
            format!("cannot read {what}: not a regular file"),
        ));
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(InputError::new(
            path,
            format!(
                "cannot read {what}: {} bytes, more than the {MAX_INPUT_BYTES} a {what} may have",
                meta.len()
            ),
        ));
    }
    // Read at most one byte past the limit, in case the file grew since it was measured.
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| InputError::new(path, format!("cannot read {what}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::new(
            path,
            format!("cannot read {what}: more than {MAX_INPUT_BYTES} bytes"),
        ));
    }
    text(path, bytes)
}

/// A file's bytes as text; a byte that is not UTF-8 is an error naming its line.
pub fn text(path: &str, bytes: Vec<u8>) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let b = e.as_bytes();
        InputError {
            file: path.to_string(),
            line: Some(b[..at].iter().filter(|&&c| c == b'\n').count() + 1),
            key: None,
            message: not_utf8(b[at]),
        }
    })
}

/// What a byte that is not UTF-8 is told: the byte, as no text can show it.
pub fn not_utf8(byte: u8) -> String {
    format!("not text: byte 0x{byte:02x} is not UTF-8")
}

/// Most characters of a user's value an error message quotes.
pub const QUOTE_CHARS: usize = 80;

/// A user's value as an error message quotes it: whole up to [`QUOTE_CHARS`] characters, else
/// its start and its length, so that a field of a hundred megabytes is not copied into the
/// message.
pub fn quote(v: &str) -> String {
    match v.char_indices().nth(QUOTE_CHARS) {
        None => format!("`{v}`"),
        Some((end, _)) => format!("`{}...` ({} bytes)", &v[..end], v.len()),
    }
}

/// 1-based line number of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse a TOML document into `T`, turning any syntax or schema error into an [`InputError`] with
/// the line and the dotted path of the offending key.
pub fn parse_toml<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, InputError> {
    let doc = parse_document(file, text)?;
    from_table(file, text, doc)
}

/// A TOML document parsed once, with the place of every key and value, so its sections can be
/// handed to the parts of the program that own them.
pub type Document<'i> = toml::Spanned<toml::de::DeTable<'i>>;

/// Parse the syntax of a TOML document (no schema yet).
pub fn parse_document<'i>(file: &str, text: &'i str) -> Result<Document<'i>, InputError> {
    toml::de::DeTable::parse(text).map_err(|e| {
        let key = e.span().map(|s| key_at(text, s.start)).unwrap_or_default();
        toml_error(file, text, &e, &key)
    })
}

/// Read a (part of a) document as `T`; errors name the line and the dotted key.
pub fn from_table<T: DeserializeOwned>(
    file: &str,
    text: &str,
    table: Document<'_>,
) -> Result<T, InputError> {
    let de = toml::Deserializer::from(table);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        toml_error(file, text, e.inner(), &path)
    })
}

/// Read one section's value as `T`; its keys are reported under `prefix` (e.g. `workload`).
pub fn from_section<T: DeserializeOwned>(
    file: &str,
    text: &str,
    prefix: &str,
    value: toml::Spanned<toml::de::DeValue<'_>>,
) -> Result<T, InputError> {
    let de = toml::de::ValueDeserializer::from(value);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." || path.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}.{path}")
        };
        toml_error(file, text, e.inner(), &path)
    })
}

/// serde's messages about a `Spanned` value leak its private field name; say what was wanted.
fn plain_message(m: &str) -> String {
    m.replace("struct Spanned", "a value")
        .replace("`$__serde_spanned_private_value`", "a value")
        .replace("$__serde_spanned_private_value", "value")
        .replace("$__serde_spanned_private_start", "value")
        .replace("$__serde_spanned_private_end", "value")
}

fn toml_error(file: &str, text: &str, e: &toml::de::Error, path: &str) -> InputError {
    let message = plain_message(e.message().trim());
    let path = path
        .split('.')
        .filter(|seg| !seg.starts_with("$__serde_spanned"))
        .collect::<Vec<_>>()
        .join(".");
    let path = path.as_str();
    // serde reports an unknown or missing key without putting it in the path; lift it out of the
    // message so the key is always named.
    let mut key = path.to_string();
    for marker in ["unknown field `", "missing field `"] {
        if let Some(rest) = message.strip_prefix(marker)
            && let Some(name) = rest.split('`').next()
        {
            let ends_with_name = key == name || key.ends_with(&format!(".{name}"));
            if !ends_with_name {
                key = if key.is_empty() {
                    name.to_string()
                } else {
                    format!("{key}.{name}")
                };
            }
        }
    }
    InputError::at(file, text, e.span(), &key, message)
}

/// The dotted key being defined on the line holding byte `offset`, for syntax errors, where the
/// parser has no key to report: the last `[table]` header above it plus the `key =` on the line.
fn key_at(text: &str, offset: usize) -> String {
    let line_start = text[..offset.min(text.len())]
        .rfind('\n')
        .map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
        .unwrap_or_default();
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    match (table.is_empty(), key) {
        (_, None) => table,
        (true, Some(k)) => k.to_string(),
        (false, Some(k)) => format!("{table}.{k}"),
    }
}

/// Parse a size such as `4096`, `4K`, `64KiB`, `10M` or `2 GiB` (binary multiples).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// `--set KEY=VALUE`: `text` with the dotted `key` given `value`, everything else kept as
/// written (comments, order, the lines of every other key). The value is read as TOML where it
/// reads as one of the type the key already has (any type for a new key), and as a string
/// otherwise, so `--set workload.entry=64K` and `--set scenario.kernel=7.1` need no quotes.
/// Missing tables are created.
pub fn set_key(file: &str, text: &str, key: &str, value: &str) -> Result<String, InputError> {
    let arg = format!("--set {key}={value}");
    let path = key_parts(key).map_err(|m| InputError::new("<argument>", format!("{arg}: {m}")))?;
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    set_path(file, text, &path, value, &arg)
}

/// A dotted key as TOML reads one: its parts split at the dots, a part in quotes
/// (`workload.devices."fe300000.ethernet".iommu`) kept whole, dots and all.
pub fn key_parts(key: &str) -> Result<Vec<String>, String> {
    let quoted = key.contains(['"', '\'']);
    if !quoted && key.split('.').any(|p| p.trim().is_empty()) {
        return Err("the key is empty or has an empty part".into());
    }
    let parts = toml_edit::Key::parse(key).map_err(|_| {
        format!(
            "{} is not a dotted key: a part other than letters, digits, `-` and `_` goes in quotes, e.g. workload.devices.\"0000:01:00.0\".iommu",
            quote(key)
        )
    })?;
    Ok(parts.iter().map(|k| k.get().to_string()).collect())
}

/// `KEY=VALUE` split at the first `=` outside a quoted part of the key.
pub fn split_assignment(arg: &str) -> Option<(&str, &str)> {
    let mut quote = None;
    for (i, c) in arg.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '=') => return Some((&arg[..i], &arg[i + 1..])),
            _ => {}
        }
    }
    None
}

/// `list` split at each `sep` outside quotes (a `--variant` whose key part is quoted).
pub fn split_outside_quotes(list: &str, sep: char) -> Vec<&str> {
    let (mut out, mut start, mut quote) = (Vec::new(), 0, None);
    for (i, c) in list.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, _) if c == sep => {
                out.push(&list[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// `name` as one part of a dotted key: bare when TOML allows, else quoted.
pub fn key_part(name: &str) -> String {
    toml_edit::Key::new(name).display_repr().into_owned()
}

/// [`set_key`] of a key given by its parts (a part may hold dots: a device named
/// `0000:01:00.0`); an error names `arg`.
pub fn set_path(
    file: &str,
    text: &str,
    path: &[&str],
    value: &str,
    arg: &str,
) -> Result<String, InputError> {
    let arg = |m: String| InputError::new("<argument>", format!("{arg}: {m}"));
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| InputError::new(file, e.message().to_string()))?;
    if path.iter().any(|p| p.is_empty()) {
        return Err(arg("the key is empty or has an empty part".into()));
    }
    let (last, tables) = path.split_last().expect("split gives one part at least");
    let mut item = doc.as_item_mut();
    for (i, t) in tables.iter().enumerate() {
        let table = item
            .as_table_like_mut()
            .ok_or_else(|| arg(format!("`{}` is not a table", path[..i].join("."))))?;
        if table.get(t).is_none() {
            table.insert(t, toml_edit::Item::Table(toml_edit::Table::new()));
        }
        item = table.get_mut(t).expect("inserted above");
    }
    let table = item
        .as_table_like_mut()
        .ok_or_else(|| arg(format!("`{}` is not a table", tables.join("."))))?;
    let old = table.get(last).and_then(|i| i.as_value()).cloned();
    let parsed = value.parse::<toml_edit::Value>().ok();
    let same_type = |a: &toml_edit::Value, b: &toml_edit::Value| {
        std::mem::discriminant(a) == std::mem::discriminant(b)
    };
    let v = match (parsed, &old) {
        (Some(p), Some(o)) if same_type(&p, o) => p,
        (Some(p), None) => p,
        _ => toml_edit::Value::from(value),
    };
    match table.get_mut(last) {
        Some(slot) if slot.is_value() => {
            let decor = slot.as_value().map(|v| v.decor().clone());
            *slot = toml_edit::Item::Value(v);
            if let (Some(d), Some(v)) = (decor, slot.as_value_mut()) {
                *v.decor_mut() = d;
            }
        }
        Some(_) => return Err(arg(format!("`{}` is a table, not a value", path.join(".")))),
        None => {
            table.insert(last, toml_edit::Item::Value(v));
        }
    }
    Ok(doc.to_string())
}

/// Which line of an original text each line of an edited one came from (`None` for a line the
/// edit inserted), so an error in the edited text names the line the user wrote.
pub fn line_map(original: &str, edited: &str) -> Vec<Option<usize>> {
    let old: Vec<&str> = original.lines().collect();
    let new: Vec<&str> = edited.lines().collect();
    let mut map = Vec::with_capacity(new.len());
    let mut i = 0;
    for j in 0..new.len() {
        let more_new = new.len() - j > old.len().saturating_sub(i);
        if i < old.len() && new[j] == old[i] {
            map.push(Some(i + 1));
            i += 1;
        } else if more_new && (i >= old.len() || new.get(j + 1) == old.get(i)) {
            map.push(None);
        } else {
            map.push((i < old.len()).then_some(i + 1));
            i += 1;
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        inner: Inner,
    }
    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        a: u32,
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let text = "[inner]\na = 1\nb = 2\n";
        let e = parse_toml::<Outer>("f.toml", text).unwrap_err();
        assert_eq!(e.line, Some(3), "{e}");
        assert_eq!(e.key.as_deref(), Some("inner.b"), "{e}");
    }

    #[test]
    fn missing_key_is_named() {
        let e = parse_toml::<Outer>("f.toml", "[inner]\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("inner.a"), "{e}");
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = parse_toml::<Outer>("f.toml", "[inner]\na = = 1\n").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert_eq!(e.key.as_deref(), Some("inner.a"), "{e}");
        assert!(e.to_string().starts_with("f.toml:2: key `inner.a`"), "{e}");
    }

    #[test]
    fn type_errors_are_free_of_serde_internals() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct S {
            s: toml::Spanned<String>,
            n: toml::Spanned<i64>,
        }
        for (text, key) in [("s = 7.1\nn = 1\n", "s"), ("s = \"x\"\nn = \"one\"\n", "n")] {
            let e = parse_toml::<S>("f.toml", text).unwrap_err();
            assert!(!e.to_string().contains("serde"), "{e}");
            assert_eq!(e.key.as_deref(), Some(key), "{e}");
            assert!(e.line.is_some(), "{e}");
        }
    }

    #[test]
    fn a_long_value_is_quoted_by_its_start_and_length() {
        assert_eq!(quote("ffd00000"), "`ffd00000`");
        let long = "é".repeat(1000);
        let q = quote(&long);
        assert!(
            q.starts_with(&format!("`{}...`", "é".repeat(QUOTE_CHARS))),
            "{q}"
        );
        assert!(q.ends_with("(2000 bytes)"), "{q}");
        assert!(q.len() < 200, "{q}");
    }

    #[test]
    fn a_byte_that_is_not_utf8_names_its_line() {
        let e = text("f.toml", b"a = 1\nb = \"\xff\"\n".to_vec()).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("0xff"), "{e}");
        assert_eq!(text("f", b"ok\n".to_vec()).unwrap(), "ok\n");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("10 MiB"), Some(10 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("3 parsecs"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }

    #[test]
    fn a_quoted_key_part_keeps_its_dots() {
        let parts = key_parts(r#"workload.devices."fe300000.ethernet".iommu"#).unwrap();
        assert_eq!(parts, ["workload", "devices", "fe300000.ethernet", "iommu"]);
        let parts = key_parts("workload.devices.'0000:01:00.0' . coherent").unwrap();
        assert_eq!(parts, ["workload", "devices", "0000:01:00.0", "coherent"]);
        assert_eq!(key_parts("workload.entry").unwrap(), ["workload", "entry"]);
        for bad in ["", "a..b", "workload."] {
            assert!(key_parts(bad).unwrap_err().contains("empty"), "{bad}");
        }
        let e = key_parts("workload.devices.0000:01:00.0.iommu").unwrap_err();
        assert!(e.contains("goes in quotes"), "{e}");
        assert!(key_parts(r#"workload."unclosed"#).is_err());
        let text = "[workload]\nkind = \"replay\"\n";
        let out = set_key("f", text, r#"workload.devices."a.b".iommu"#, "true").unwrap();
        assert!(out.contains(r#"[workload.devices."a.b"]"#), "{out}");
        assert!(out.contains("iommu = true"), "{out}");
    }

    #[test]
    fn an_assignment_splits_outside_quotes() {
        assert_eq!(
            split_assignment(r#"workload.devices."a=b".iommu=true"#),
            Some((r#"workload.devices."a=b".iommu"#, "true"))
        );
        assert_eq!(split_assignment("k=v=w"), Some(("k", "v=w")));
        assert_eq!(split_assignment(r#"k."a=b""#), None);
        assert_eq!(
            split_outside_quotes(r#"kernel=7.1,workload.devices."a,b".iommu=true"#, ','),
            ["kernel=7.1", r#"workload.devices."a,b".iommu=true"#]
        );
        assert_eq!(key_part("a.b"), "\"a.b\"");
        assert_eq!(key_part("isp"), "isp");
    }

    #[test]
    fn set_key_keeps_the_rest_and_the_types() {
        let text = "# c\n[scenario]\nkernel = \"7.0\" # why\n\n[workload]\nentry = \"4K\"\niterations = 10\n";
        let t = set_key("f", text, "scenario.kernel", "7.1").unwrap();
        assert!(t.contains("kernel = \"7.1\" # why"), "{t}");
        let t = set_key("f", &t, "workload.iterations", "20").unwrap();
        assert!(t.contains("iterations = 20\n"), "{t}");
        let t = set_key("f", &t, "workload.entry", "64K").unwrap();
        assert!(t.contains("entry = \"64K\""), "{t}");
        let t = set_key("f", &t, "workload.sizes", "[4096, 8192]").unwrap();
        assert!(t.contains("sizes = [4096, 8192]"), "{t}");
        let t2 = set_key("f", &t, "device.coherent", "true").unwrap();
        assert!(
            t2.contains("[device]") && t2.contains("coherent = true"),
            "{t2}"
        );
        assert!(t2.starts_with("# c\n[scenario]"), "{t2}");
        for bad in ["", "workload.", "workload.entry.x"] {
            let e = set_key("f", text, bad, "1").unwrap_err();
            assert_eq!(e.file, "<argument>", "{bad}: {e}");
        }
    }

    #[test]
    fn line_map_follows_inserted_and_changed_lines() {
        let old = "a\nb\nc\nd\n";
        assert_eq!(
            line_map(old, "a\nB\nc\nd\n"),
            [Some(1), Some(2), Some(3), Some(4)]
        );
        assert_eq!(
            line_map(old, "a\nb\nx\nc\nd\n"),
            [Some(1), Some(2), None, Some(3), Some(4)]
        );
        assert_eq!(
            line_map(old, "a\nb\nc\nd\ne\n"),
            [Some(1), Some(2), Some(3), Some(4), None]
        );
    }
}
