//! Reading a kernel trace of a driver's DMA API calls: the text of `/sys/kernel/tracing/trace`
//! or `trace_pipe`, `trace-cmd report` (with or without `-R` raw fields, `-t` timestamps) and
//! `perf script`, for the `dma:*` events (6.12 on), `iommu:map`/`iommu:unmap` and
//! `swiotlb:swiotlb_bounced`.
//!
//! Kernel counterpart: include/trace/events/dma.h, iommu.h and swiotlb.h — the events' print
//! formats (`TP_printk`), and kernel/trace/trace_output.c for how arrays, flags and the line's
//! header print.
//!
//! What it reads: each line's event by name (wherever the header puts it: `name: ` after the
//! timestamp, `dma:name:` in perf script), its timestamp and CPU when the header has them, and
//! its fields by `key=value`, never by position, so the format changes between releases read
//! alike: `dma_map_page` and its 6.18 name `dma_map_phys` (which also takes 6.18's resource
//! mappings, `attrs=MMIO`), alloc and free with and without `dir=` (6.13 on; 6.12-rc printed
//! `phys_addr=`, 6.12 `virt_addr=`), `dma_map_sg` with or without the 128-entry cap
//! (`nents=a/b ents=c/d [TRUNCATED]`), the older and newer `iommu:map`/`unmap`. Addresses print
//! as hex (`%llx`, bare) and sizes as decimal (`%zu`); arrays as `{0x1000,0x2000}`; `attrs` as
//! `|`-separated names, empty when zero, and names this parser does not know are kept. A raw
//! line (`trace-cmd report -R`, libtraceevent 1.4 on) names the device `device=` (`dev_name=`
//! for swiotlb), prints a field the print format uses with that format's conversion (addresses
//! still bare hex), `dir` as a number, `attrs` as `0x..`, arrays as `ARRAY[..]` of bytes, and
//! uses the struct's field names (`addrs`, `lengths`, `full_nents`, `truncated`). A line
//! libtraceevent could not format (`[FAILED TO PARSE]`) prints every number in decimal. A
//! 6.12 `dma_alloc` may print a `dir` it never set: a `dir` that is not a direction on alloc or
//! free reads as unknown.
//!
//! A line's event is the first `name:` token after its `[CPU]` field or timestamp: the task's
//! name before them is any text (`CPU 0/KVM`, QEMU's vCPU threads). A file is told to be a
//! trace by that layout, of any event ([`sniff`]).
//!
//! Invariants: a line that is not one of these events is counted by its event name (or as
//! unrecognised) and skipped, never refused, whatever bytes it holds; a line that names one of
//! them but whose fields do not read, that is not UTF-8, or that ends the file without its
//! newline right after a number (cut while written) is an error naming the file, the line and
//! the field, quoting at most 80 characters of a value. No line is read past
//! [`MAX_LINE_BYTES`] and the skipped events' names are bounded, so memory does not grow with
//! the input. Nothing here depends on the kernel release: the replay decides what each call
//! did.

use crate::input::{InputError, quote};
use crate::types::DmaDirection;
use std::collections::BTreeMap;

pub mod checks;
pub mod live;
pub mod replay;

/// The hash maps of the reader, the live table and the replay: keyed by addresses, mapping
/// numbers and device names, and looked up several times a line. foldhash rather than SipHash
/// for speed; its per-process seed still keeps a hostile trace from choosing collisions.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The CPU's address of a coherent buffer as an alloc or free line gives it: before 6.13 its
/// physical address (`phys_addr=`), from 6.13 the virtual one as `%p` prints it (hashed, but the
/// same pointer hashes the same within a boot), so two are compared only in the same form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuAddr {
    Phys(u64),
    HashedVirt(u64),
}

impl CpuAddr {
    /// Whether `other` is another address in the same form (of another form, no one can say).
    pub fn differs(self, other: CpuAddr) -> bool {
        match (self, other) {
            (CpuAddr::Phys(a), CpuAddr::Phys(b))
            | (CpuAddr::HashedVirt(a), CpuAddr::HashedVirt(b)) => a != b,
            _ => false,
        }
    }
}

/// What one traced call was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `dma_map_phys` (`dma_map_page` before 6.18, and `dma_map_resource`).
    Map {
        dir: DmaDirection,
        dma_addr: u64,
        size: u64,
        /// Every release prints it; a raw line may leave it out.
        phys_addr: Option<u64>,
        /// `dma_map_resource`, or from 6.18 a `dma_map_phys` with `attrs=MMIO`.
        resource: bool,
    },
    /// `dma_unmap_phys` (`dma_unmap_page`, `dma_unmap_resource`).
    Unmap {
        dir: DmaDirection,
        dma_addr: u64,
        size: u64,
        resource: bool,
    },
    /// `dma_alloc`, `dma_alloc_pages`, `dma_alloc_sgt`: `dir` only from 6.13 (6.12.y).
    Alloc {
        dir: Option<DmaDirection>,
        dma_addr: u64,
        size: u64,
        what: AllocKind,
        cpu_addr: Option<CpuAddr>,
    },
    /// `dma_alloc_sgt_err` (a failed `dma_alloc` may instead show as `dma_alloc` with
    /// `dma_addr=0` on recent releases).
    AllocErr { size: u64 },
    /// `dma_free`, `dma_free_pages`, `dma_free_sgt`.
    Free {
        dir: Option<DmaDirection>,
        dma_addr: u64,
        size: u64,
        what: AllocKind,
        cpu_addr: Option<CpuAddr>,
    },
    /// `dma_map_sg`: the mapped list. `nents`/`ents` as (printed, real) when the line says;
    /// `truncated` when it was cut at 128 entries.
    MapSg {
        dir: DmaDirection,
        dma_addrs: Vec<u64>,
        sizes: Vec<u64>,
        phys_addrs: Vec<u64>,
        nents: Option<(u64, u64)>,
        ents: Option<(u64, u64)>,
        truncated: bool,
    },
    /// `dma_map_sg_err`: the list's physical addresses and the error.
    MapSgErr {
        dir: DmaDirection,
        phys_addrs: Vec<u64>,
        err: i64,
    },
    /// `dma_unmap_sg`: the physical addresses of the list given back.
    UnmapSg {
        dir: DmaDirection,
        phys_addrs: Vec<u64>,
    },
    /// `dma_sync_single_for_cpu` / `_for_device`.
    SyncSingle {
        dir: DmaDirection,
        dma_addr: u64,
        size: u64,
        for_device: bool,
    },
    /// `dma_sync_sg_for_cpu` / `_for_device`.
    SyncSg {
        dir: DmaDirection,
        dma_addrs: Vec<u64>,
        sizes: Vec<u64>,
        for_device: bool,
    },
    /// `iommu:map`.
    IommuMap { iova: u64, paddr: u64, size: u64 },
    /// `iommu:unmap`.
    IommuUnmap { iova: u64, size: u64, unmapped: u64 },
    /// `swiotlb:swiotlb_bounced`.
    SwiotlbBounced {
        dma_mask: u64,
        dev_addr: u64,
        size: u64,
    },
}

/// Which allocator an alloc or free event names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    Coherent,
    Pages,
    Sgt,
}

/// One traced call, where the trace put it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// 1-based line in the trace text.
    pub line: usize,
    /// Nanoseconds since the trace clock's origin, when the header has a timestamp.
    pub time_ns: Option<u64>,
    pub cpu: Option<u32>,
    /// `dev_name()` of the device; empty for `iommu:*` events, which name none.
    pub device: String,
    /// The DMA attributes as printed (`SKIP_CPU_SYNC`, ...), unknown names kept.
    pub attrs: Vec<String>,
    pub event: Event,
}

/// A trace, read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub records: Vec<Record>,
    /// Lines of other events, by event name (`?` for lines with no event at all), skipped.
    pub skipped: BTreeMap<String, u64>,
}

/// The events this reader knows, by the name the trace prints: what [`is_event`] matches, as
/// its test checks.
#[cfg(test)]
const EVENTS: &[&str] = &[
    "dma_map_phys",
    "dma_map_page",
    "dma_map_resource",
    "dma_unmap_phys",
    "dma_unmap_page",
    "dma_unmap_resource",
    "dma_alloc",
    "dma_alloc_pages",
    "dma_alloc_sgt",
    "dma_alloc_sgt_err",
    "dma_free",
    "dma_free_pages",
    "dma_free_sgt",
    "dma_map_sg",
    "dma_map_sg_err",
    "dma_unmap_sg",
    "dma_sync_single_for_cpu",
    "dma_sync_single_for_device",
    "dma_sync_sg_for_cpu",
    "dma_sync_sg_for_device",
    "map",
    "unmap",
    "swiotlb_bounced",
];

/// Whether this reader knows the event: one of [`EVENTS`], by a match the compiler turns into a
/// dispatch on the name's length rather than a comparison with each.
fn is_event(name: &str) -> bool {
    matches!(
        name,
        "dma_map_phys"
            | "dma_map_page"
            | "dma_map_resource"
            | "dma_unmap_phys"
            | "dma_unmap_page"
            | "dma_unmap_resource"
            | "dma_alloc"
            | "dma_alloc_pages"
            | "dma_alloc_sgt"
            | "dma_alloc_sgt_err"
            | "dma_free"
            | "dma_free_pages"
            | "dma_free_sgt"
            | "dma_map_sg"
            | "dma_map_sg_err"
            | "dma_unmap_sg"
            | "dma_sync_single_for_cpu"
            | "dma_sync_single_for_device"
            | "dma_sync_sg_for_cpu"
            | "dma_sync_sg_for_device"
            | "map"
            | "unmap"
            | "swiotlb_bounced"
    )
}

/// Whether `path` is a binary trace-cmd file (`trace.dat`), by its magic.
pub fn is_trace_dat(path: &str) -> bool {
    use std::io::Read;
    let mut head = [0u8; 10];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == TRACE_DAT_MAGIC)
}

/// What a file handed where a scenario is expected holds, as its first bytes tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// A trace's text: a tracefs header (`# tracer:`) or an event line, of any event.
    Trace,
    /// Nothing but whitespace: neither a trace nor a scenario.
    Empty,
    /// Anything else (a scenario, or what its reader will refuse).
    Other,
}

/// How much of a file [`sniff_file`] reads: a trace's first event line is in its first few
/// lines, however many other events came first, and a scenario is a few KiB.
const SNIFF_BYTES: u64 = 64 << 10;

/// [`sniff`] of a file's first 64 KiB; a file that cannot be read is [`Sniffed::Other`], for
/// the scenario reader to say why.
pub fn sniff_file(path: &str) -> Sniffed {
    use std::io::Read;
    let mut head = Vec::new();
    match std::fs::File::open(path).and_then(|f| f.take(SNIFF_BYTES).read_to_end(&mut head)) {
        Ok(_) => sniff(&head),
        Err(_) => Sniffed::Other,
    }
}

/// Whether a file's first bytes are a trace, by its layout rather than its events: a tracefs
/// header, or a line shaped as an event line (`TASK-PID [CPU] ... TIME: EVENT:`, or perf
/// script's `TASK PID [CPU] TIME: SYSTEM:EVENT:`) of any event, so that other events first do
/// not hide a trace. A byte that is not UTF-8 spoils its line only (the trace's reader names
/// it); a TOML table header (`[workload]`) makes a scenario, whatever its comments quote.
pub fn sniff(head: &[u8]) -> Sniffed {
    if head.iter().all(u8::is_ascii_whitespace) {
        return Sniffed::Empty;
    }
    let mut trace = false;
    for raw in head.split(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(raw);
        let l = text.trim();
        if is_toml_table(l) {
            return Sniffed::Other;
        }
        trace = trace
            || l.starts_with("# tracer:")
            || (!l.starts_with('#') && header(l).is_some_and(|h| h.anchored));
    }
    if trace {
        Sniffed::Trace
    } else {
        Sniffed::Other
    }
}

/// `[table]` or `[[array.of.tables]]`: a TOML table header, which no trace line is.
fn is_toml_table(l: &str) -> bool {
    let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else {
        return false;
    };
    let name = name.trim_matches(|c| c == '[' || c == ']').trim();
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.\" :".contains(c))
}

/// Read a trace's text (`file` names it in errors).
pub fn parse(file: &str, text: &str) -> Result<Trace, InputError> {
    let mut t = Trace::default();
    for (i, raw) in text.lines().enumerate() {
        match parse_line(file, i + 1, raw)? {
            Line::Record(r) => t.records.push(r),
            Line::Skipped(event) => *t.skipped.entry(event.to_string()).or_default() += 1,
            Line::Nothing => {}
        }
    }
    Ok(t)
}

/// What one line of a trace is.
pub enum Line<'a> {
    /// One of the events this reader knows.
    Record(Record),
    /// Another event, by name (`?` for a line with none).
    Skipped(&'a str),
    /// A comment or a blank line.
    Nothing,
}

/// Read line number `line` (1-based) of a trace; an error names `file`, the line and the field.
pub fn parse_line<'a>(file: &str, line: usize, raw: &'a str) -> Result<Line<'a>, InputError> {
    let l = raw.trim();
    if l.is_empty() || l.starts_with('#') {
        return Ok(Line::Nothing);
    }
    let Some(h) = header(l) else {
        // trace-cmd's `CPU 0 is empty` and tracefs's `CPU:2 [LOST 45 EVENTS]` are no lines of
        // events; a task named `CPU 0/KVM` (QEMU's vCPU threads) has an event line.
        if l.starts_with("CPU") {
            return Ok(Line::Nothing);
        }
        return Ok(Line::Skipped("?"));
    };
    if !is_event(h.event) || !system_fits(h.system, h.event) {
        return Ok(Line::Skipped(h.event));
    }
    let f = Fields::of(h.rest, h.event);
    let (device, attrs, event) = event(&h, &f).map_err(|(k, m)| InputError {
        file: file.to_string(),
        line: Some(line),
        key: Some(format!("{}.{k}", h.event)),
        message: m,
    })?;
    Ok(Line::Record(Record {
        line,
        time_ns: h.time_ns,
        cpu: h.cpu,
        device,
        attrs,
        event,
    }))
}

/// What a read of a trace saw besides its records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Lines of other events by name (`?` for lines with no event, `(bad line)` for the lines
    /// `skip_bad` skipped); past [`MAX_SKIPPED_NAMES`] names, or for a name longer than
    /// [`MAX_EVENT_NAME`], under `(other events)`, so a hostile trace cannot grow the map.
    pub skipped: BTreeMap<String, u64>,
    /// Lines read.
    pub lines: usize,
    /// Bytes read.
    pub bytes: u64,
}

/// Longest line read: the kernel prints a line into a `trace_seq` of a page or two (a few KiB;
/// 128 KiB with 64 KiB pages) and trace-cmd's raw arrays of the 128 entries a `dma_map_sg`
/// prints take about 12 KiB, so a longer line is no trace line; the bound keeps a file with no
/// newline (`/dev/zero`, a 100 MB field) from being read whole into memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// Most event names [`ReadSummary::skipped`] counts apart.
const MAX_SKIPPED_NAMES: usize = 256;
/// Longest event name counted apart (the kernel's are under 40 characters).
const MAX_EVENT_NAME: usize = 64;

/// Read a trace from `input` line by line, as a stream, handing each record to `each` in
/// order: memory does not grow with the trace, and no line is read past [`MAX_LINE_BYTES`].
/// Returns the other events' lines by name, and under `(bad line)` the lines that did not read
/// when `skip_bad` lets them be skipped rather than refused (a line too long is refused
/// regardless: it may have no end to skip to). A binary `trace.dat` is refused with the way
/// to its text.
pub fn read(
    file: &str,
    mut input: impl std::io::BufRead,
    skip_bad: bool,
    mut each: impl FnMut(Record) -> Result<(), InputError>,
) -> Result<ReadSummary, InputError> {
    let mut sum = ReadSummary::default();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let mut bounded = std::io::Read::take(&mut input, MAX_LINE_BYTES as u64 + 1);
        let n = std::io::BufRead::read_until(&mut bounded, b'\n', &mut buf)
            .map_err(|e| InputError::new(file, format!("cannot read the trace: {e}")))?;
        if n == 0 {
            return Ok(sum);
        }
        sum.lines += 1;
        sum.bytes += n as u64;
        let line = sum.lines;
        let at = |message: String| InputError {
            file: file.to_string(),
            line: Some(line),
            key: None,
            message,
        };
        if line == 1 && buf.starts_with(TRACE_DAT_MAGIC) {
            return Err(InputError::new(file, TRACE_DAT));
        }
        if buf.len() > MAX_LINE_BYTES {
            return Err(at(format!(
                "a line longer than {} MiB, which no trace has: not the text of a trace?",
                MAX_LINE_BYTES >> 20
            )));
        }
        let parsed = match std::str::from_utf8(&buf) {
            Ok(text) => parse_line(file, line, text).and_then(|l| match l {
                Line::Record(_) if !buf.ends_with(b"\n") && ends_in_number(text) => Err(at(
                    "the file ends inside this line, right after a number: cut while it was \
                     written? (a whole line ends with a newline)"
                        .into(),
                )),
                l => Ok(l),
            }),
            // Another event's line may hold any bytes (a task's name is the task's); one of
            // these events' must be text, as its device name and fields are taken exactly.
            Err(e) => {
                let bad = buf[e.valid_up_to()];
                let text = String::from_utf8_lossy(&buf);
                match parse_line(file, line, &text) {
                    Ok(Line::Skipped(event)) => {
                        count_skipped(&mut sum.skipped, event);
                        continue;
                    }
                    Ok(Line::Nothing) => continue,
                    _ => Err(at(crate::input::not_utf8(bad))),
                }
            }
        };
        match parsed {
            Ok(Line::Record(r)) => each(r)?,
            Ok(Line::Skipped(event)) => count_skipped(&mut sum.skipped, event),
            Ok(Line::Nothing) => {}
            Err(_) if skip_bad => count_skipped(&mut sum.skipped, "(bad line)"),
            Err(e) => return Err(e),
        }
    }
}

/// Whether a line's text ends in a digit (a hex one: addresses print bare): a line the file
/// ends in without its newline may have lost the rest of that number.
fn ends_in_number(text: &str) -> bool {
    text.trim_end()
        .as_bytes()
        .last()
        .is_some_and(u8::is_ascii_hexdigit)
}

/// Count one skipped line under its event's name, within the map's bounds.
fn count_skipped(skipped: &mut BTreeMap<String, u64>, event: &str) {
    if let Some(n) = skipped.get_mut(event) {
        *n += 1;
        return;
    }
    let name = if skipped.len() < MAX_SKIPPED_NAMES && event.len() <= MAX_EVENT_NAME {
        event
    } else {
        "(other events)"
    };
    *skipped.entry(name.to_string()).or_default() += 1;
}

/// The first bytes of a binary trace-cmd file.
const TRACE_DAT_MAGIC: &[u8] = b"\x17\x08\x44tracing";
/// What a binary trace-cmd file is told.
pub const TRACE_DAT: &str =
    "a binary trace-cmd file (trace.dat): run `trace-cmd report` on it and give its text";

/// What precedes a line's fields.
struct Header<'a> {
    /// `dma`, `iommu`, `swiotlb` when the line names the system (perf script), else empty.
    system: &'a str,
    event: &'a str,
    time_ns: Option<u64>,
    cpu: Option<u32>,
    /// The line has a `[CPU]` field or a timestamp before its event: an event line's layout.
    anchored: bool,
    rest: &'a str,
}

/// The event token is the first `name:` (or `system:name:`) token after the `[CPU]` field or
/// the timestamp: the task's name is any text before `-PID [CPU]` (spaces and colons too:
/// QEMU's vCPU threads are `CPU 0/KVM`), so no token before those fields is the event. A line
/// with neither field takes its first `name:` token. The timestamp is the `seconds.fraction:`
/// token before the event, the CPU the last `[N]` before it.
fn header(l: &str) -> Option<Header<'_>> {
    let mut time_ns = None;
    let mut cpu = None;
    let mut anchored = false;
    let mut first = None;
    for (start, tok) in tokens(l) {
        let at = start + tok.len();
        // Told apart by their last byte first: most tokens are neither `[N]` nor `name:`.
        let b = tok.as_bytes();
        if b[b.len() - 1] == b']' {
            if b.len() > 2 && b[0] == b'[' && b[1..b.len() - 1].iter().all(u8::is_ascii_digit) {
                cpu = tok[1..tok.len() - 1].parse().ok();
                anchored = true;
            }
            continue;
        }
        let Some(name) = tok.strip_suffix(':') else {
            continue;
        };
        if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            if let Some(ns) = seconds_ns(name) {
                time_ns = Some(ns);
                anchored = true;
                continue;
            }
            // A counter clock (`x86-tsc`, `counter`) prints an integer of its own unit.
            if name.bytes().all(|b| b.is_ascii_digit()) {
                anchored = true;
                continue;
            }
        }
        let Some((system, event)) = event_name(name) else {
            continue;
        };
        if anchored {
            return Some(Header {
                system,
                event,
                time_ns,
                cpu,
                anchored,
                rest: l[at..].trim(),
            });
        }
        first.get_or_insert((system, event, at));
    }
    first.map(|(system, event, at)| Header {
        system,
        event,
        time_ns: None,
        cpu: None,
        anchored: false,
        rest: l[at..].trim(),
    })
}

/// An event token's `system:event` or `event` (the colon that ends the token taken off), when
/// it is one: the name is letters, digits and underscores.
fn event_name(name: &str) -> Option<(&str, &str)> {
    let (system, event) = match name.bytes().position(|b| b == b':') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => ("", name),
    };
    let ok = !event.is_empty()
        && event
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then_some((system, event))
}

/// The whitespace-separated tokens of `s` (ASCII whitespace, as `split_ascii_whitespace`
/// takes it), each with the byte offset it starts at.
fn tokens(s: &str) -> Tokens<'_> {
    Tokens { s, at: 0 }
}

/// The first ASCII whitespace byte of `b` at or after `i`, or `b.len()`: eight bytes at a time
/// while none is below `0x21` (every whitespace byte is), as every byte of a trace's lines
/// passes through here twice (a camera's `dma_map_sg` line is 5 KB).
fn next_space(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(word) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        // Some byte of `w` is below 0x21 exactly when this is not zero.
        if w.wrapping_sub(ONES * 0x21) & !w & HIGH != 0 {
            break;
        }
        i += 8;
    }
    while i < b.len() && !b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// [`tokens`]: a scan of the bytes, as every line of a trace passes through it twice.
struct Tokens<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Iterator for Tokens<'a> {
    type Item = (usize, &'a str);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a str)> {
        let b = self.s.as_bytes();
        let mut i = self.at;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        i = next_space(b, i);
        self.at = i;
        // Both ends are at an ASCII byte or the end: char boundaries.
        (start < i).then(|| (start, &self.s[start..i]))
    }
}

/// Whether a line's system (perf script's `dma:`, ...) may carry the event: none given, or the
/// event's own (`iommu:map` prints as a bare `map:` in ftrace and trace-cmd).
fn system_fits(system: &str, event: &str) -> bool {
    match system {
        "" => true,
        "dma" => event.starts_with("dma_"),
        "iommu" => event == "map" || event == "unmap",
        "swiotlb" => event == "swiotlb_bounced",
        _ => false,
    }
}

/// `12345.678901` seconds as nanoseconds (a trace clock with up to nine decimals).
fn seconds_ns(s: &str) -> Option<u64> {
    let dot = s.bytes().position(|b| b == b'.')?;
    let (whole, frac) = (&s.as_bytes()[..dot], &s.as_bytes()[dot + 1..]);
    if whole.is_empty() || frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let secs = decimal(whole)?;
    let f = decimal(frac)?;
    let scale = 10u64.pow(9 - frac.len() as u32);
    secs.checked_mul(1_000_000_000)?
        .checked_add(f.checked_mul(scale)?)
}

/// Decimal digits only (no sign), as a `u64`; `None` past its range.
fn decimal(d: &[u8]) -> Option<u64> {
    if d.is_empty() {
        return None;
    }
    d.iter().try_fold(0u64, |v, &b| {
        let x = b.wrapping_sub(b'0');
        (x < 10).then_some(())?;
        v.checked_mul(10)?.checked_add(u64::from(x))
    })
}

/// Hex digits only (no sign, no `0x`), as a `u64`; `None` past its range.
fn hexadecimal(d: &[u8]) -> Option<u64> {
    if d.is_empty() {
        return None;
    }
    d.iter().try_fold(0u64, |v, &b| {
        let x = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        (v >> 60 == 0).then_some((v << 4) | u64::from(x))
    })
}

/// `str::parse::<u64>` and `u64::from_str_radix(_, 16)`, by bytes: a trace is mostly numbers,
/// each read twice. A leading `+` is taken, as theirs take it.
fn unsigned(s: &str, radix16: bool) -> Option<u64> {
    let d = s.strip_prefix('+').unwrap_or(s).as_bytes();
    if radix16 { hexadecimal(d) } else { decimal(d) }
}

/// The field keys the events print, formatted or raw: one slot each in [`Fields`], so a field
/// is found by its key once per line, not looked for by each reader of it.
macro_rules! keys {
    ($($key:ident = $name:literal),* $(,)?) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum K {
            $($key),*
        }

        impl K {
            const COUNT: usize = [$(K::$key),*].len();

            fn of(name: &str) -> Option<K> {
                match name {
                    $($name => Some(K::$key),)*
                    _ => None,
                }
            }

            fn name(self) -> &'static str {
                match self {
                    $(K::$key => $name),*
                }
            }
        }
    };
}

keys! {
    Dir = "dir",
    DmaAddr = "dma_addr",
    Addr = "addr",
    Size = "size",
    PhysAddr = "phys_addr",
    VirtAddr = "virt_addr",
    Attrs = "attrs",
    DmaAddrs = "dma_addrs",
    Sizes = "sizes",
    Lengths = "lengths",
    PhysAddrs = "phys_addrs",
    Addrs = "addrs",
    Nents = "nents",
    Ents = "ents",
    FullNents = "full_nents",
    FullEnts = "full_ents",
    Truncated = "truncated",
    Err = "err",
    Iova = "iova",
    Paddr = "paddr",
    UnmappedSize = "unmapped_size",
    DmaMask = "dma_mask",
    DevAddr = "dev_addr",
}

/// A line's fields: the leading device name (formatted lines) and the `key=value` fields this
/// reader knows, the first of each key (others are not read: no event needs them).
struct Fields<'a> {
    device: Option<&'a str>,
    vals: [Option<&'a str>; K::COUNT],
    /// A `key=value` field came: a bare token after it is no device name.
    any_kv: bool,
    /// The line printed ` [TRUNCATED]`.
    truncated: bool,
    /// Raw fields (`trace-cmd report -R`).
    raw: bool,
    /// `[FAILED TO PARSE]`: every number printed in decimal.
    decimal: bool,
}

impl<'a> Fields<'a> {
    fn of(rest: &'a str, event: &str) -> Fields<'a> {
        let mut f = Fields {
            device: None,
            vals: [None; K::COUNT],
            any_kv: false,
            truncated: false,
            raw: false,
            decimal: false,
        };
        let rest = match rest.strip_prefix("[FAILED TO PARSE]") {
            Some(r) => {
                f.raw = true;
                f.decimal = true;
                r.trim_start()
            }
            None => rest,
        };
        // swiotlb_bounced prints `dev_name: NAME`; iommu events start with `IOMMU:`.
        let rest = rest
            .strip_prefix("IOMMU:")
            .map(str::trim_start)
            .unwrap_or(rest);
        let mut toks = tokens(rest).peekable();
        if event == "swiotlb_bounced"
            && let Some(&(_, "dev_name:")) = toks.peek()
        {
            toks.next();
            f.device = toks.next().map(|t| t.1);
        }
        while let Some((at, tok)) = toks.next() {
            if tok == "[TRUNCATED]" {
                f.truncated = true;
                continue;
            }
            // `iova=0x.. - 0x..`: the range's end is implied by the size.
            if tok == "-" {
                toks.next();
                continue;
            }
            let Some(eq) = tok.bytes().position(|b| b == b'=') else {
                if f.device.is_none() && !f.any_kv {
                    f.device = Some(tok);
                }
                continue;
            };
            let (k, v) = (&tok[..eq], &tok[eq + 1..]);
            f.any_kv = true;
            // A raw array, `ARRAY[00, 10, ...]`, spans tokens: take it whole.
            let v = if v.starts_with("ARRAY[") && !v.ends_with(']') {
                let from = at + eq + 1;
                let end = rest[from..].find(']').map_or(rest.len(), |e| from + e + 1);
                while toks.peek().is_some_and(|t| !t.1.ends_with(']')) {
                    toks.next();
                }
                toks.next();
                &rest[from..end]
            } else {
                v
            };
            if k == "device" || (k == "dev_name" && event == "swiotlb_bounced") {
                f.raw = true;
                f.device = Some(v);
            } else if let Some(key) = K::of(k) {
                f.vals[key as usize].get_or_insert(v);
            }
        }
        f
    }

    fn get(&self, k: K) -> Option<&'a str> {
        self.vals[k as usize]
    }
}

type FieldError = (&'static str, String);

fn need<'a>(f: &Fields<'a>, k: K) -> Result<&'a str, FieldError> {
    f.get(k).ok_or_else(|| (k.name(), "missing".to_string()))
}

/// An address: bare hex as `%llx` prints it, or `0x` hex.
/// An alloc or free line's CPU address, in the form its release prints it.
fn cpu_addr(f: &Fields) -> Result<Option<CpuAddr>, FieldError> {
    if f.get(K::VirtAddr).is_some() {
        return addr(f, K::VirtAddr).map(|a| Some(CpuAddr::HashedVirt(a)));
    }
    f.get(K::PhysAddr)
        .map(|_| addr(f, K::PhysAddr).map(CpuAddr::Phys))
        .transpose()
}

fn addr(f: &Fields, k: K) -> Result<u64, FieldError> {
    let v = need(f, k)?;
    if f.decimal && !v.starts_with("0x") {
        return unsigned(v, false)
            .ok_or_else(|| (k.name(), format!("{} is not a number", quote(v))));
    }
    let h = v.strip_prefix("0x").unwrap_or(v);
    unsigned(h, true).ok_or_else(|| {
        (
            k.name(),
            format!("{} is not a hexadecimal address", quote(v)),
        )
    })
}

/// A size or count: decimal as `%zu`/`%d` prints it (or `0x` hex).
fn num(f: &Fields, k: K) -> Result<u64, FieldError> {
    let v = need(f, k)?;
    number(v).ok_or_else(|| (k.name(), format!("{} is not a number", quote(v))))
}

/// `0x` hex or decimal.
fn number(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => unsigned(h, true),
        None => unsigned(v, false),
    }
}

/// `{0x1000,0x2000}`, or a raw `ARRAY[..]` of the elements' bytes (little-endian, `width`
/// bytes each: 8 for addresses, 4 for lengths).
fn array(f: &Fields, k: K) -> Result<Vec<u64>, FieldError> {
    let width = if k == K::Lengths || k == K::Sizes {
        4
    } else {
        8
    };
    let v = need(f, k)?;
    if let Some(bytes) = v.strip_prefix("ARRAY[").and_then(|s| s.strip_suffix(']')) {
        return raw_array(k, v, bytes, width);
    }
    let inner = v
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .ok_or_else(|| {
            (
                k.name(),
                format!("{} is not a list such as {{0x1000,0x2000}}", quote(v)),
            )
        })?;
    if inner.is_empty() {
        return Ok(Vec::new());
    }
    // Split at the commas by bytes: a camera's list prints 128 entries, and every line of a
    // trace is read twice.
    let mut out = Vec::with_capacity(inner.len() / 8 + 1);
    let mut rest = inner;
    loop {
        let (x, tail) = match rest.bytes().position(|b| b == b',') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let x = x.trim_ascii();
        out.push(number(x).ok_or_else(|| {
            (
                k.name(),
                format!("{} in the list is not a number", quote(x)),
            )
        })?);
        match tail {
            Some(t) => rest = t,
            None => return Ok(out),
        }
    }
}

/// The elements of a raw `ARRAY[..]` (`bytes`, the brackets taken off) of `width`-byte
/// little-endian elements.
fn raw_array(k: K, v: &str, bytes: &str, width: usize) -> Result<Vec<u64>, FieldError> {
    let b: Vec<u8> = bytes
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| (k.name(), format!("{} is not an array of bytes", quote(v))))?;
    if !b.len().is_multiple_of(width) {
        return Err((
            k.name(),
            format!(
                "{} bytes is not a whole number of {width}-byte elements",
                b.len()
            ),
        ));
    }
    Ok(b.chunks(width)
        .map(|c| c.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
        .collect())
}

/// `dir=`: a name, or in raw lines its number (0 BIDIRECTIONAL .. 3 NONE).
fn dir(f: &Fields) -> Result<DmaDirection, FieldError> {
    let v = need(f, K::Dir)?;
    match v {
        "BIDIRECTIONAL" | "0" => Ok(DmaDirection::Bidirectional),
        "TO_DEVICE" | "1" => Ok(DmaDirection::ToDevice),
        "FROM_DEVICE" | "2" => Ok(DmaDirection::FromDevice),
        "NONE" | "3" => Ok(DmaDirection::None),
        _ => Err((
            "dir",
            format!(
                "{}: expected BIDIRECTIONAL, TO_DEVICE, FROM_DEVICE or NONE",
                quote(v)
            ),
        )),
    }
}

/// `a/b` as printed by the capped `dma_map_sg` (`nents=%d/%d`).
fn pair(f: &Fields, k: K) -> Result<Option<(u64, u64)>, FieldError> {
    let Some(v) = f.get(k) else {
        return Ok(None);
    };
    let bad = || (k.name(), format!("{} is not a count a/b", quote(v)));
    let (a, b) = v.split_once('/').ok_or_else(bad)?;
    Ok(Some((
        a.parse().map_err(|_| bad())?,
        b.parse().map_err(|_| bad())?,
    )))
}

/// A raw `full_nents=N`: the list had N entries, of which the trace holds at most 128.
fn raw_pair(f: &Fields, k: K) -> Result<Option<(u64, u64)>, FieldError> {
    if f.get(k).is_none() {
        return Ok(None);
    }
    let full = num(f, k)?;
    Ok(Some((full.min(128), full)))
}

fn event(h: &Header, f: &Fields) -> Result<(String, Vec<String>, Event), FieldError> {
    let device = f.device.unwrap_or("").to_string();
    // A raw line prints the flags as a number (`0x0`); a formatted one as names.
    let attrs: Vec<String> = f
        .get(K::Attrs)
        .filter(|a| !a.is_empty() && *a != "0" && *a != "0x0")
        .map(|a| a.split('|').map(str::to_string).collect())
        .unwrap_or_default();
    // 6.12's dma_alloc printed a `dir` it never set: not a direction reads as unknown.
    let opt_dir = || f.get(K::Dir).and_then(|_| dir(f).ok());
    let mmio = attrs.iter().any(|a| a == "MMIO");
    let e = match h.event {
        "dma_map_phys" | "dma_map_page" | "dma_map_resource" => Event::Map {
            dir: dir(f)?,
            dma_addr: addr(f, K::DmaAddr)?,
            size: num(f, K::Size)?,
            phys_addr: f
                .get(K::PhysAddr)
                .map(|_| addr(f, K::PhysAddr))
                .transpose()?,
            resource: h.event == "dma_map_resource" || mmio,
        },
        "dma_unmap_phys" | "dma_unmap_page" | "dma_unmap_resource" => Event::Unmap {
            dir: dir(f)?,
            // The raw field is `addr` (dma_unmap_phys's `addr`), the formatted one `dma_addr`.
            dma_addr: if f.get(K::DmaAddr).is_some() {
                addr(f, K::DmaAddr)?
            } else {
                addr(f, K::Addr)?
            },
            size: num(f, K::Size)?,
            resource: h.event == "dma_unmap_resource" || mmio,
        },
        "dma_alloc" | "dma_alloc_pages" | "dma_alloc_sgt" => Event::Alloc {
            dir: opt_dir(),
            dma_addr: addr(f, K::DmaAddr)?,
            size: num(f, K::Size)?,
            what: alloc_kind(h.event),
            cpu_addr: cpu_addr(f)?,
        },
        "dma_alloc_sgt_err" => Event::AllocErr {
            size: num(f, K::Size)?,
        },
        "dma_free" | "dma_free_pages" | "dma_free_sgt" => Event::Free {
            dir: opt_dir(),
            dma_addr: addr(f, K::DmaAddr)?,
            size: num(f, K::Size)?,
            what: alloc_kind(h.event),
            cpu_addr: cpu_addr(f)?,
        },
        "dma_map_sg" => Event::MapSg {
            dir: dir(f)?,
            dma_addrs: array(f, K::DmaAddrs)?,
            sizes: if f.get(K::Sizes).is_some() {
                array(f, K::Sizes)?
            } else {
                array(f, K::Lengths)?
            },
            phys_addrs: array(f, K::PhysAddrs)?,
            nents: match pair(f, K::Nents)? {
                Some(p) => Some(p),
                None => raw_pair(f, K::FullNents)?,
            },
            ents: match pair(f, K::Ents)? {
                Some(p) => Some(p),
                None => raw_pair(f, K::FullEnts)?,
            },
            truncated: f.truncated || f.get(K::Truncated) == Some("1"),
        },
        "dma_map_sg_err" => Event::MapSgErr {
            dir: dir(f)?,
            // The list holds sg_phys() values, whatever its name says.
            phys_addrs: if f.get(K::PhysAddrs).is_some() {
                array(f, K::PhysAddrs)?
            } else {
                array(f, K::DmaAddrs)?
            },
            err: need(f, K::Err)?
                .parse()
                .map_err(|_| ("err", "not a number".to_string()))?,
        },
        "dma_unmap_sg" => Event::UnmapSg {
            dir: dir(f)?,
            // Raw lines name the array `addrs`.
            phys_addrs: if f.get(K::PhysAddrs).is_some() {
                array(f, K::PhysAddrs)?
            } else {
                array(f, K::Addrs)?
            },
        },
        "dma_sync_single_for_cpu" | "dma_sync_single_for_device" => Event::SyncSingle {
            dir: dir(f)?,
            dma_addr: addr(f, K::DmaAddr)?,
            size: num(f, K::Size)?,
            for_device: h.event.ends_with("device"),
        },
        "dma_sync_sg_for_cpu" | "dma_sync_sg_for_device" => Event::SyncSg {
            dir: dir(f)?,
            dma_addrs: array(f, K::DmaAddrs)?,
            sizes: if f.get(K::Sizes).is_some() {
                array(f, K::Sizes)?
            } else {
                array(f, K::Lengths)?
            },
            for_device: h.event.ends_with("device"),
        },
        "map" => Event::IommuMap {
            iova: addr(f, K::Iova)?,
            paddr: addr(f, K::Paddr)?,
            size: num(f, K::Size)?,
        },
        "unmap" => Event::IommuUnmap {
            iova: addr(f, K::Iova)?,
            size: num(f, K::Size)?,
            unmapped: num(f, K::UnmappedSize)?,
        },
        "swiotlb_bounced" => Event::SwiotlbBounced {
            dma_mask: addr(f, K::DmaMask)?,
            dev_addr: addr(f, K::DevAddr)?,
            size: num(f, K::Size)?,
        },
        _ => unreachable!("EVENTS lists every name matched here"),
    };
    Ok((device, attrs, e))
}

fn alloc_kind(event: &str) -> AllocKind {
    if event.ends_with("_pages") {
        AllocKind::Pages
    } else if event.ends_with("_sgt") {
        AllocKind::Sgt
    } else {
        AllocKind::Coherent
    }
}

/// What a trace shows of one device, before any device table says more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSeen {
    pub name: String,
    /// DMA API calls traced for it.
    pub calls: u64,
    /// The first and last of their timestamps, when the trace has them.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// A map whose DMA address differs from its physical one: an IOMMU (or an offset) stands
    /// between the device and memory; the trace line that shows it.
    pub translated_at: Option<usize>,
    /// A `swiotlb_bounced` event for it: the device bounces; the line.
    pub bounced_at: Option<usize>,
}

impl Trace {
    /// Every device the trace names, in the order it first appears, with what its events show
    /// (`iommu:*` events name no device and count for none).
    pub fn devices(&self) -> Vec<DeviceSeen> {
        let mut seen = DevicesSeen::default();
        for r in &self.records {
            seen.push(r);
        }
        seen.finish()
    }
}

/// [`Trace::devices`] as a trace streams by.
#[derive(Default)]
pub struct DevicesSeen {
    out: Vec<DeviceSeen>,
    index: HashMap<String, usize>,
}

impl DevicesSeen {
    pub fn push(&mut self, r: &Record) {
        if r.device.is_empty() {
            return;
        }
        let i = match self.index.get(&r.device) {
            Some(&i) => i,
            None => {
                self.index.insert(r.device.clone(), self.out.len());
                self.out.push(DeviceSeen {
                    name: r.device.clone(),
                    calls: 0,
                    first_ns: None,
                    last_ns: None,
                    translated_at: None,
                    bounced_at: None,
                });
                self.out.len() - 1
            }
        };
        let d = &mut self.out[i];
        if let Event::SwiotlbBounced { .. } = r.event {
            d.bounced_at.get_or_insert(r.line);
            return;
        }
        d.calls += 1;
        if let Some(t) = r.time_ns {
            d.first_ns.get_or_insert(t);
            d.last_ns = Some(t);
        }
        let translated = match &r.event {
            // A failed map's address is no translation (debug.c ignores the map).
            Event::Map {
                dma_addr,
                phys_addr: Some(p),
                ..
            } => dma_addr != p && *dma_addr != live::DMA_MAPPING_ERROR,
            Event::MapSg {
                dma_addrs,
                phys_addrs,
                ..
            } => dma_addrs.first() != phys_addrs.first(),
            _ => false,
        };
        if translated {
            d.translated_at.get_or_insert(r.line);
        }
    }

    /// Every device seen, in the order it first appeared.
    pub fn finish(self) -> Vec<DeviceSeen> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_match_is_the_event_list() {
        assert!(EVENTS.iter().all(|e| is_event(e)));
        assert!(!is_event("dma_map") && !is_event("io_page_fault") && !is_event(""));
    }

    fn one(line: &str) -> Record {
        let t = parse("t.txt", line).unwrap();
        assert_eq!(t.records.len(), 1, "{t:?}");
        t.records[0].clone()
    }

    #[test]
    fn an_ftrace_line_of_each_release_reads_by_key() {
        // 6.12's dma_map_page and 6.18's dma_map_phys: the same call.
        let a = one(
            "  irq/45-ath12k-812 [003] ..s1. 1234.567890: dma_map_page: 0000:03:00.0 dir=FROM_DEVICE dma_addr=ffd00000 size=2048 phys_addr=1a2b3c000 attrs=",
        );
        let b = one(
            "  irq/45-ath12k-812 [003] ..s1. 1234.567890: dma_map_phys: 0000:03:00.0 dir=FROM_DEVICE dma_addr=ffd00000 size=2048 phys_addr=1a2b3c000 attrs=",
        );
        assert_eq!(a.event, b.event);
        assert_eq!(a.device, "0000:03:00.0");
        assert_eq!(a.cpu, Some(3));
        assert_eq!(a.time_ns, Some(1_234_567_890_000));
        assert!(a.attrs.is_empty());
        assert_eq!(
            a.event,
            Event::Map {
                dir: DmaDirection::FromDevice,
                dma_addr: 0xffd0_0000,
                size: 2048,
                phys_addr: Some(0x1_a2b3_c000),
                resource: false,
            }
        );
        // 6.12-rc's alloc has no dir= and prints phys_addr; 6.13's dir= and virt_addr.
        let old = one(
            "kworker-1 [000] ..... 5.000001: dma_alloc: d4280800.sdh dma_addr=3f000000 size=4096 phys_addr=3f000000 flags=GFP_KERNEL attrs=",
        );
        assert!(matches!(
            old.event,
            Event::Alloc {
                dir: None,
                size: 4096,
                ..
            }
        ));
        let new = one(
            "kworker-1 [000] ..... 5.000001: dma_alloc: d4280800.sdh dir=BIDIRECTIONAL dma_addr=3f000000 size=4096 virt_addr=00000000a1b2c3d4 flags=GFP_KERNEL attrs=",
        );
        assert!(matches!(
            new.event,
            Event::Alloc {
                dir: Some(DmaDirection::Bidirectional),
                cpu_addr: Some(CpuAddr::HashedVirt(0xa1b2_c3d4)),
                ..
            }
        ));
        assert!(matches!(
            old.event,
            Event::Alloc {
                cpu_addr: Some(CpuAddr::Phys(0x3f00_0000)),
                ..
            }
        ));
    }

    #[test]
    fn sg_lists_arrays_the_cap_and_unknown_attributes() {
        let r = one(
            "app-9 [001] ..... 10.5: dma_map_sg: 0000:01:00.0 dir=TO_DEVICE nents=128/200 ents=128/200 [TRUNCATED] dma_addrs={0x1000,0x2000} sizes={0x1000,0x1000} phys_addrs={0x80001000,0x80002000} attrs=SKIP_CPU_SYNC|CACHE_CLEAN",
        );
        assert_eq!(r.attrs, vec!["SKIP_CPU_SYNC", "CACHE_CLEAN"]);
        assert_eq!(r.time_ns, Some(10_500_000_000));
        match r.event {
            Event::MapSg {
                dma_addrs,
                sizes,
                phys_addrs,
                nents,
                ents,
                truncated,
                ..
            } => {
                assert_eq!(dma_addrs, vec![0x1000, 0x2000]);
                assert_eq!(sizes, vec![4096, 4096]);
                assert_eq!(phys_addrs, vec![0x8000_1000, 0x8000_2000]);
                assert_eq!((nents, ents), (Some((128, 200)), Some((128, 200))));
                assert!(truncated);
            }
            e => panic!("{e:?}"),
        }
        let u = one(
            "app-9 [001] ..... 11.0: dma_unmap_sg: 0000:01:00.0 dir=TO_DEVICE phys_addrs={0x80001000,0x80002000} attrs=",
        );
        assert!(matches!(u.event, Event::UnmapSg { ref phys_addrs, .. } if phys_addrs.len() == 2));
    }

    #[test]
    fn perf_script_trace_cmd_raw_and_the_other_systems() {
        // perf script: its own header, `dma:name:`.
        let p = one(
            "   app  9123 [002]  4567.000123456:  dma:dma_sync_single_for_cpu: 0000:01:00.0 dir=FROM_DEVICE dma_addr=1000 size=64",
        );
        assert_eq!(p.time_ns, Some(4_567_000_123_456));
        assert!(matches!(
            p.event,
            Event::SyncSingle {
                for_device: false,
                size: 64,
                ..
            }
        ));
        // trace-cmd report -R: raw fields, `device=`, numeric dir, `addr` on unmap (still
        // printed with the format's %llx), attrs as a number.
        let r = one(
            "app-9 [001] 12.000001: dma_unmap_phys: device=0000:01:00.0 addr=1000 size=64 dir=2 attrs=0x0",
        );
        assert_eq!(r.device, "0000:01:00.0");
        assert!(r.attrs.is_empty());
        assert_eq!(
            r.event,
            Event::Unmap {
                dir: DmaDirection::FromDevice,
                dma_addr: 0x1000,
                size: 64,
                resource: false,
            }
        );
        // Raw arrays are the elements' bytes; the capped list's counts are raw fields.
        let sg = one(
            "app-9 [001] 12.1: dma_map_sg: device=d full_nents=200 full_ents=200 truncated=1 phys_addrs=ARRAY[00, 10, 00, 80, 00, 00, 00, 00] dma_addrs=ARRAY[00, 10, 00, 00, 00, 00, 00, 00] lengths=ARRAY[00, 10, 00, 00] dir=1 attrs=0x0",
        );
        assert_eq!(
            sg.event,
            Event::MapSg {
                dir: DmaDirection::ToDevice,
                dma_addrs: vec![0x1000],
                sizes: vec![0x1000],
                phys_addrs: vec![0x8000_1000],
                nents: Some((128, 200)),
                ents: Some((128, 200)),
                truncated: true,
            }
        );
        let un = one(
            "app-9 [001] 12.2: dma_unmap_sg: device=d addrs=ARRAY[00, 10, 00, 80, 00, 00, 00, 00] dir=1 attrs=0x0",
        );
        assert_eq!(
            un.event,
            Event::UnmapSg {
                dir: DmaDirection::ToDevice,
                phys_addrs: vec![0x8000_1000],
            }
        );
        // A line libtraceevent could not format: decimal numbers.
        let failed = one(
            "app-9 [001] 12.3: dma_sync_single_for_device: [FAILED TO PARSE] device=d dma_addr=4096 size=64 dir=1",
        );
        assert!(matches!(
            failed.event,
            Event::SyncSingle { dma_addr: 4096, .. }
        ));
        // A counter clock's integer timestamp is no event name; a 6.12 alloc's unset dir.
        let tsc = one(
            "app-9 [001] 987654321: dma_alloc: dev dir=0x7f3a dma_addr=1000 size=4096 virt_addr=00000000deadbeef flags=GFP_KERNEL attrs=",
        );
        assert_eq!(tsc.time_ns, None);
        assert!(matches!(tsc.event, Event::Alloc { dir: None, .. }));
        // 6.18's resource mapping is a dma_map_phys with MMIO.
        let mmio = one(
            "app-9 [001] 12.4: dma_map_phys: dev dir=BIDIRECTIONAL dma_addr=fe000000 size=4096 phys_addr=fe000000 attrs=MMIO",
        );
        assert!(matches!(mmio.event, Event::Map { resource: true, .. }));
        // iommu:map, new and old; swiotlb_bounced.
        let m = one(
            "app-9 [001] 12.5: map: IOMMU: iova=0x00000000ffff0000 - 0x00000000ffff1000 paddr=0x0000000080001000 size=4096",
        );
        assert_eq!(
            m.event,
            Event::IommuMap {
                iova: 0xffff_0000,
                paddr: 0x8000_1000,
                size: 4096
            }
        );
        let old = one(
            "app-9 [001] 12.5: unmap: IOMMU: iova=0x00000000ffff0000 size=4096 unmapped_size=4096",
        );
        assert!(matches!(
            old.event,
            Event::IommuUnmap { unmapped: 4096, .. }
        ));
        let s = one(
            "app-9 [001] 12.6: swiotlb_bounced: dev_name: 0000:01:00.0 dma_mask=ffffffff dev_addr=100000000 size=1500 FORCE",
        );
        assert_eq!(s.device, "0000:01:00.0");
        let raw = one(
            "app-9 [001] 12.6: swiotlb_bounced: dev_name=0000:01:00.0 dma_mask=ffffffff dev_addr=100000000 size=1500 force=1",
        );
        assert_eq!(raw.device, "0000:01:00.0");
        assert!(matches!(
            s.event,
            Event::SwiotlbBounced {
                dma_mask: 0xffff_ffff,
                ..
            }
        ));
    }

    #[test]
    fn other_events_are_counted_and_bad_fields_name_the_line() {
        let t = parse(
            "t.txt",
            "# tracer: nop\n\napp-9 [001] 1.0: sched_switch: prev_comm=a\nnot a trace line\napp-9 [001] 1.1: dma_sync_sg_for_device: dev dir=TO_DEVICE dma_addrs={0x1000} sizes={64}\n",
        )
        .unwrap();
        assert_eq!(t.records.len(), 1);
        assert_eq!(t.records[0].line, 5);
        assert_eq!(t.skipped.get("sched_switch"), Some(&1));
        assert_eq!(t.skipped.get("?"), Some(&1));
        let e = parse(
            "t.txt",
            "x\napp-9 [001] 1.0: dma_map_phys: dev dir=SIDEWAYS dma_addr=1000 size=64 phys_addr=1000 attrs=",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert_eq!(e.key.as_deref(), Some("dma_map_phys.dir"));
        let e = parse(
            "t.txt",
            "app-9 [001] 1.0: dma_sync_single_for_device: dev dir=TO_DEVICE dma_addr=zz size=64",
        )
        .unwrap_err();
        assert_eq!(
            e.key.as_deref(),
            Some("dma_sync_single_for_device.dma_addr")
        );
    }

    /// [`read`] of a text, its records and summary, or its error.
    fn read_text(text: &[u8], skip_bad: bool) -> Result<(Vec<Record>, ReadSummary), InputError> {
        let mut out = Vec::new();
        let sum = read("t.txt", text, skip_bad, |r| {
            out.push(r);
            Ok(())
        })?;
        Ok((out, sum))
    }

    const MAP: &str = "dma_map_phys: dev dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=";

    #[test]
    fn a_task_name_is_any_text_before_its_pid_and_cpu() {
        // QEMU's vCPU threads: a name with a space, starting `CPU`.
        let r = one(&format!("CPU 0/KVM-4321 [002] ..... 5.000001: {MAP}"));
        assert_eq!((r.device.as_str(), r.cpu), ("dev", Some(2)));
        // A name with a colon and a space is no event.
        let r = one(&format!("my: task-77 [001] 5.0: {MAP}"));
        assert_eq!((r.cpu, r.time_ns), (Some(1), Some(5_000_000_000)));
        // trace-cmd's and tracefs's lines about CPUs are still no lines.
        let t = parse("t.txt", "CPU 0 is empty\nCPU:2 [LOST 45 EVENTS]\n").unwrap();
        assert!(t.records.is_empty() && t.skipped.is_empty(), "{t:?}");
    }

    #[test]
    fn a_line_is_bounded_and_a_long_value_is_quoted_short() {
        let long = format!(
            "a-1 [000] 1.0: {}",
            MAP.replace("1000 size", &"f".repeat(200))
        );
        let e = read_text(format!("{long}\n").as_bytes(), false).unwrap_err();
        assert!(e.message.len() < 200, "{e}");
        assert!(e.message.contains("...` (203 bytes)"), "{e}");
        let huge = format!(
            "a-1 [000] 1.0: dma_map_phys: dev dma_addr={}",
            "f".repeat(MAX_LINE_BYTES)
        );
        for skip_bad in [false, true] {
            let e = read_text(huge.as_bytes(), skip_bad).unwrap_err();
            assert_eq!(e.line, Some(1), "{e}");
            assert!(e.message.contains("longer than 1 MiB"), "{e}");
        }
        // Exactly at the bound, a line still reads (as another event's).
        let at = format!("a-1 [000] 1.0: x: {}\n", "y".repeat(MAX_LINE_BYTES - 19));
        assert_eq!(at.len(), MAX_LINE_BYTES);
        assert_eq!(read_text(at.as_bytes(), false).unwrap().1.skipped["x"], 1);
    }

    #[test]
    fn a_last_line_cut_after_a_number_is_refused() {
        let cut = b"a-1 [000] 1.0: dma_sync_single_for_cpu: dev dir=TO_DEVICE dma_addr=1000 size=6";
        let e = read_text(cut, false).unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
        assert!(e.message.contains("cut"), "{e}");
        // With its newline it is whole; a last line ending in no digit is whole too.
        let (r, _) = read_text(&[&cut[..], b"\n"].concat(), false).unwrap();
        assert_eq!(r.len(), 1);
        let (r, _) = read_text(format!("a-1 [000] 1.0: {MAP}MMIO").as_bytes(), false).unwrap();
        assert_eq!(r.len(), 1);
        let (r, sum) = read_text(cut, true).unwrap();
        assert!(r.is_empty() && sum.skipped["(bad line)"] == 1);
    }

    #[test]
    fn a_byte_not_utf8_is_refused_in_a_dma_line_only() {
        let text = b"a-\xff [000] 1.0: sched_switch: x\na-1 [000] 1.0: dma_map_phys: d\xffv dir=TO_DEVICE dma_addr=1 size=1 attrs=\n";
        let e = read_text(text, false).unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("0xff"), "{e}");
        let (r, sum) = read_text(text, true).unwrap();
        assert!(r.is_empty());
        assert_eq!(
            (sum.skipped["sched_switch"], sum.skipped["(bad line)"]),
            (1, 1)
        );
        assert_eq!((sum.lines, sum.bytes), (2, text.len() as u64));
    }

    #[test]
    fn skipped_names_are_bounded() {
        let mut text = String::new();
        for i in 0..MAX_SKIPPED_NAMES + 10 {
            text.push_str(&format!("a-1 [000] 1.0: ev{i}: x\n"));
        }
        text.push_str(&format!(
            "a-1 [000] 1.0: {}: x\n",
            "e".repeat(MAX_EVENT_NAME + 1)
        ));
        let (_, sum) = read_text(text.as_bytes(), false).unwrap();
        assert_eq!(sum.skipped.len(), MAX_SKIPPED_NAMES + 1);
        assert_eq!(sum.skipped["(other events)"], 11);
    }

    #[test]
    fn a_trace_is_told_by_its_layout() {
        // Other events first, perf script's and tracefs's layouts, a tracefs header.
        let mut perf =
            "  qemu  4321 [002]  4567.000123456:  sched:sched_switch: a=b\n".repeat(2000);
        perf.push_str("  app  9123 [002]  4567.1:  dma:dma_map_phys: dev dir=TO_DEVICE\n");
        assert!(perf.len() > 64 << 10);
        assert_eq!(sniff(perf.as_bytes()), Sniffed::Trace);
        assert_eq!(sniff(b"# tracer: nop\n#\n"), Sniffed::Trace);
        assert_eq!(
            sniff(format!("CPU 0/KVM-4321 [002] 1.0: {MAP}").as_bytes()),
            Sniffed::Trace
        );
        // A byte that is not UTF-8 spoils its own line only.
        assert_eq!(
            sniff(b"\xff\xfe junk\na-1 [000] 1.0: kvm_exit: x\n"),
            Sniffed::Trace
        );
        assert_eq!(sniff(b""), Sniffed::Empty);
        assert_eq!(sniff(b" \n\t\n"), Sniffed::Empty);
        // A scenario, whatever its comments and strings say.
        let toml =
            "# a-1 [000] 1.0: dma_map_phys: dev\n[scenario]\nname = \"a-1 [000] 1.0: map: x\"\n";
        assert_eq!(sniff(toml.as_bytes()), Sniffed::Other);
        assert_eq!(sniff(b"[[workload.device]]\nx = 1\n"), Sniffed::Other);
        assert_eq!(sniff(b"just: some text\n"), Sniffed::Other);
    }

    proptest::proptest! {
        /// Whatever a trace holds, reading it ends in a trace or in an error, never a panic:
        /// lines built from the tokens a real one has, shuffled and cut anywhere.
        #[test]
        fn any_text_reads_or_is_refused(
            toks in proptest::collection::vec(proptest::sample::select(vec![
                "app-9", "[001]", "1.5:", "12345.000000001:", "dma_map_phys:", "dma:dma_map_sg:",
                "map:", "IOMMU:", "dev", "dir=TO_DEVICE", "dir=9", "dma_addr=ffff", "dma_addr=",
                "size=64", "size=-1", "phys_addr=zz", "dma_addrs={0x1,", "sizes={}", "nents=1/",
                "[TRUNCATED]", "attrs=A|B", "-", "iova=0x10", "paddr=0x20", "unmapped_size=4",
                "device=d", "dev_name:", "\n", "99999999999999999999.9:",
                "addrs=ARRAY[00,", "10,", "ff]", "lengths=ARRAY[", "[FAILED", "TO", "PARSE]",
                "dev_name=x", "full_nents=300", "truncated=1", "é", "123:",
            ]), 0..40),
        ) {
            let text = toks.join(" ");
            let _ = parse("t.txt", &text);
        }
    }

    /// The reader's header as it was first written, on `split_ascii_whitespace`, `split_once`
    /// and `str::parse`: the reference the byte scans are held to.
    type HeaderParts<'a> = (&'a str, &'a str, Option<u64>, Option<u32>, bool, &'a str);

    fn reference_header(l: &str) -> Option<HeaderParts<'_>> {
        let seconds = |s: &str| -> Option<u64> {
            let (whole, frac) = s.split_once('.')?;
            let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
            if !digits(whole) || !digits(frac) || frac.len() > 9 {
                return None;
            }
            let (secs, f): (u64, u64) = (whole.parse().ok()?, frac.parse().ok()?);
            secs.checked_mul(1_000_000_000)?
                .checked_add(f.checked_mul(10u64.pow(9 - frac.len() as u32))?)
        };
        let (mut time_ns, mut cpu, mut anchored, mut first) = (None, None, false, None);
        for tok in l.split_ascii_whitespace() {
            let at = tok.as_ptr() as usize - l.as_ptr() as usize + tok.len();
            if let Some(c) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']'))
                && !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_digit())
            {
                (cpu, anchored) = (c.parse().ok(), true);
                continue;
            }
            let Some(name) = tok.strip_suffix(':') else {
                continue;
            };
            if let Some(ns) = seconds(name) {
                (time_ns, anchored) = (Some(ns), true);
                continue;
            }
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()) {
                anchored = true;
                continue;
            }
            let (system, event) = name.split_once(':').unwrap_or(("", name));
            if event.is_empty()
                || !event
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                continue;
            }
            if anchored {
                return Some((system, event, time_ns, cpu, true, l[at..].trim()));
            }
            first.get_or_insert((system, event, at));
        }
        first.map(|(system, event, at)| (system, event, None, None, false, l[at..].trim()))
    }

    proptest::proptest! {
        /// The header's byte scans find what the reference finds, on lines of the tokens a
        /// header has, spaced by any whitespace.
        #[test]
        fn the_header_is_the_reference_header(
            toks in proptest::collection::vec(proptest::sample::select(vec![
                "CPU", "0/KVM-4321", "app-9", "[001]", "[]", "[x]", "[4294967296]", "..s1.",
                "1.5:", "12345.000000001:", "1.1234567890:", "99999999999999999999.9:", "123:",
                ".5:", "5.:", "dma_map_phys:", "dma:dma_map_sg:", "map:", "a:b:c:", ":", "::",
                "é:", "dev", "dir=TO_DEVICE", "x]", "[1]:", "+1.5:",
            ]), 0..12),
            seps in proptest::collection::vec(proptest::sample::select(vec![
                " ", "  ", "\t", " \x0c", "\r ", "\u{a0}",
            ]), 12),
        ) {
            let mut l = String::new();
            for (t, sep) in toks.iter().zip(&seps) {
                l.push_str(sep);
                l.push_str(t);
            }
            let got = header(&l).map(|h| (h.system, h.event, h.time_ns, h.cpu, h.anchored, h.rest));
            proptest::prop_assert_eq!(got, reference_header(&l), "{:?}", l);
        }

        /// Numbers read by bytes as `str::parse` and `from_str_radix` read them.
        #[test]
        fn numbers_read_as_the_standard_library_reads_them(
            s in "[+]?[0-9a-fA-Fx+-]{0,22}",
        ) {
            proptest::prop_assert_eq!(unsigned(&s, false), s.parse::<u64>().ok());
            proptest::prop_assert_eq!(unsigned(&s, true), u64::from_str_radix(&s, 16).ok());
        }

        /// The tokens are `split_ascii_whitespace`'s, at their offsets.
        #[test]
        fn tokens_split_as_the_standard_library_splits(s in "[ a\t\n\r\x0c\x01\x7f\u{a0}é=]{0,40}") {
            let ours: Vec<(usize, &str)> = tokens(&s).collect();
            let std: Vec<(usize, &str)> = s
                .split_ascii_whitespace()
                .map(|t| (t.as_ptr() as usize - s.as_ptr() as usize, t))
                .collect();
            proptest::prop_assert_eq!(ours, std);
        }
    }

    #[test]
    fn devices_say_what_the_trace_shows_of_them() {
        let t = parse(
            "t.txt",
            "a-1 [000] 1.000000: dma_map_phys: nic dir=TO_DEVICE dma_addr=1000 size=64 phys_addr=1000 attrs=\n\
             a-1 [000] 1.000100: dma_map_phys: gpu dir=TO_DEVICE dma_addr=ffff0000 size=64 phys_addr=80001000 attrs=\n\
             a-1 [000] 1.000200: map: IOMMU: iova=0x00000000ffff0000 - 0x00000000ffff1000 paddr=0x0000000080001000 size=4096\n\
             a-1 [000] 1.000300: swiotlb_bounced: dev_name: nic dma_mask=ffffffff dev_addr=100000000 size=64 FORCE\n\
             a-1 [000] 1.000400: dma_unmap_phys: nic dir=TO_DEVICE dma_addr=1000 size=64 attrs=\n",
        )
        .unwrap();
        let d = t.devices();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].name.as_str(), d[0].calls), ("nic", 2));
        assert_eq!(
            (d[0].first_ns, d[0].last_ns),
            (Some(1_000_000_000), Some(1_000_400_000))
        );
        assert_eq!((d[0].translated_at, d[0].bounced_at), (None, Some(4)));
        assert_eq!((d[1].name.as_str(), d[1].translated_at), ("gpu", Some(2)));
    }
}
