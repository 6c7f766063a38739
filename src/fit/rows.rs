//! Measurement rows: what a board's own tools printed, read as their producers print them.
//!
//! Kernel counterpart: the output of tools/dma/dma_map_benchmark.c (its three lines per run, as
//! 5.11 to 7.x print them) and of the `function_graph` tracer (kernel/trace/
//! trace_functions_graph.c: `cat trace`, and `trace-cmd report`'s `funcgraph_entry` /
//! `funcgraph_exit` lines).
//!
//! What it reads, each file sniffed by its content:
//! - the tool's output: `dma mapping benchmark[(MODE)]: threads:T seconds:S node:N dir:DIR
//!   granule[: ]G`, then `average map latency(us):X standard deviation:Y` and the same for
//!   unmap. One run or several concatenated; options the first line does not print (`-x`,
//!   `-b`) come from a command line before it, `# dma_map_benchmark -x 500 -b 64`, which holds
//!   until the next one.
//! - a `function_graph` capture taken while the tool ran: a duration for each traced function,
//!   averaged per function; the run is named by the same command-line comment, which such a
//!   file must have (the capture alone does not say what ran).
//! - a CSV `experiment,options,metric,value` for a user's own timing: `experiment` is
//!   `dma_map_benchmark`, `options` its command line, `metric` `map_latency_us` or
//!   `unmap_latency_us` (as the tool prints them) or a kernel function's name (its mean in ns).
//!
//! Invariants: every row names its file and line; a line that is none of these, or a run cut
//! short, is one error naming the file, the line and what was expected; numbers are finite and
//! not negative.

use crate::input::{InputError, quote};
use crate::scenario::map_benchmark::{DIRECTIONS, ToolOptions};

/// What a row measured.
#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    /// The tool's `average map latency(us)`.
    ToolMap,
    /// The tool's `average unmap latency(us)`.
    ToolUnmap,
    /// A kernel function's mean duration, ns.
    Function(String),
}

impl Metric {
    /// The metric as a CSV row or a profile's `[fit]` row writes it.
    pub fn key(&self) -> &str {
        match self {
            Metric::ToolMap => "map_latency_us",
            Metric::ToolUnmap => "unmap_latency_us",
            Metric::Function(f) => f,
        }
    }

    /// The metric a key names, if any.
    pub fn parse(key: &str) -> Option<Metric> {
        match key {
            "map_latency_us" => Some(Metric::ToolMap),
            "unmap_latency_us" => Some(Metric::ToolUnmap),
            f if is_symbol(f) => Some(Metric::Function(f.to_string())),
            _ => None,
        }
    }

    /// The unit its values are in.
    pub fn unit(&self) -> &'static str {
        match self {
            Metric::ToolMap | Metric::ToolUnmap => "µs",
            Metric::Function(_) => "ns",
        }
    }

    pub fn name(&self) -> String {
        match self {
            Metric::ToolMap => "map_latency_us".into(),
            Metric::ToolUnmap => "unmap_latency_us".into(),
            Metric::Function(f) => format!("{f} (ns)"),
        }
    }
}

/// One measured value, and where it was read.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub file: String,
    pub line: usize,
    /// The tool run it was measured in.
    pub run: ToolOptions,
    pub metric: Metric,
    /// In the metric's unit: µs for the tool's lines, ns for a function.
    pub value: f64,
    /// Calls averaged, for a function: how many the capture showed.
    pub calls: Option<u64>,
}

impl Row {
    /// `FILE:LINE`, as reports and sources name a row.
    pub fn place(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Read one measurement file, whatever of the three it is.
pub fn read(file: &str, text: &str) -> Result<Vec<Row>, InputError> {
    let lines: Vec<&str> = text.lines().collect();
    let err = |line: usize, m: String| InputError {
        line: Some(line),
        ..InputError::new(file, m)
    };
    let first = lines
        .iter()
        .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let Some(first) = first else {
        return Err(InputError::new(
            file,
            "no measurements: expected dma_map_benchmark's output, a function_graph capture or a CSV `experiment,options,metric,value`",
        ));
    };
    let rows = if lines.iter().any(|l| l.starts_with("dma mapping benchmark")) {
        tool_output(file, &lines)?
    } else if lines[first].replace(' ', "") == "experiment,options,metric,value" {
        csv(file, &lines, first)?
    } else if lines.iter().any(|l| l.contains('|')) {
        function_graph(file, &lines)?
    } else {
        return Err(err(
            first + 1,
            "not a measurement: expected dma_map_benchmark's output (`dma mapping benchmark: threads:...`), a function_graph capture, or a CSV whose first line is `experiment,options,metric,value`".into(),
        ));
    };
    if rows.is_empty() {
        return Err(InputError::new(file, "no measurements in it"));
    }
    Ok(rows)
}

/// A `# dma_map_benchmark ...` (or `$ ./dma_map_benchmark ...`) line's options, if it is one.
fn command_line(l: &str) -> Option<Result<ToolOptions, String>> {
    let l = l.trim_start().trim_start_matches(['#', '$']).trim_start();
    let mut words = l.split_whitespace();
    let prog = words.next()?;
    prog.rsplit('/')
        .next()
        .is_some_and(|p| p == "dma_map_benchmark")
        .then(|| ToolOptions::parse_args(words))
}

/// A number as the tool or the tracer prints it: finite, not negative.
fn number(s: &str) -> Option<f64> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn tool_output(file: &str, lines: &[&str]) -> Result<Vec<Row>, InputError> {
    let err = |i: usize, m: String| InputError {
        line: Some(i + 1),
        ..InputError::new(file, m)
    };
    let mut rows = Vec::new();
    let mut given = ToolOptions::default();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_end();
        if let Some(o) = command_line(l) {
            given = o.map_err(|m| err(i, m))?;
        } else if l.starts_with("dma mapping benchmark") {
            let run = first_line(l, given).map_err(|m| err(i, m))?;
            for (k, (what, metric)) in [
                ("average map latency(us):", Metric::ToolMap),
                ("average unmap latency(us):", Metric::ToolUnmap),
            ]
            .into_iter()
            .enumerate()
            {
                let j = i + 1 + k;
                let line = lines.get(j).copied().unwrap_or("");
                let value = line
                    .strip_prefix(what)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(number)
                    .ok_or_else(|| {
                        err(
                            j.min(lines.len().saturating_sub(1)),
                            format!("expected the tool's `{what}X standard deviation:Y` line after its first line"),
                        )
                    })?;
                rows.push(Row {
                    file: file.to_string(),
                    line: j + 1,
                    run,
                    metric,
                    value,
                    calls: None,
                });
            }
            i += 2;
        } else if !l.trim().is_empty() && !l.trim_start().starts_with('#') {
            return Err(err(
                i,
                format!("not a line of dma_map_benchmark's output: {}", quote(l)),
            ));
        }
        i += 1;
    }
    Ok(rows)
}

/// The tool's first line of a run, checked against the command line given before it (which
/// supplies what the line does not print).
fn first_line(l: &str, given: ToolOptions) -> Result<ToolOptions, String> {
    let rest = l.strip_prefix("dma mapping benchmark").unwrap_or(l);
    let (mode, rest) = match rest.strip_prefix('(') {
        Some(r) => {
            let (m, r) = r
                .split_once(')')
                .ok_or("unclosed `(` after the tool's name")?;
            let mode = match m {
                "SINGLE_MODE" => 0,
                "SG_MODE" => 1,
                _ => return Err(format!("unknown map mode `{m}`")),
            };
            (Some(mode), r)
        }
        None => (None, rest),
    };
    let rest = rest
        .strip_prefix(':')
        .ok_or("expected `:` after the tool's name")?;
    let mut o = given;
    // `granule: 1` (before 7.1) has a space after its colon; join it back to its key.
    let text = rest.replace(": ", ":");
    let mut seen = Vec::new();
    for kv in text.split_whitespace() {
        let (k, v) = kv
            .split_once(':')
            .ok_or_else(|| format!("expected `key:value`, found {}", quote(kv)))?;
        let n = || {
            v.parse::<i64>()
                .map_err(|_| format!("`{k}` takes a whole number, found {}", quote(v)))
        };
        match k {
            "threads" => o.threads = n()?,
            "seconds" => o.seconds = n()?,
            "node" => o.node = n()?,
            "granule" => o.granule = n()?,
            "dir" => {
                o.dir = DIRECTIONS
                    .iter()
                    .position(|d| *d == v)
                    .ok_or_else(|| format!("unknown direction {}", quote(v)))?
                    as i64
            }
            _ => return Err(format!("unknown field {}", quote(k))),
        }
        seen.push(k);
    }
    for k in ["threads", "seconds", "node", "dir"] {
        if !seen.contains(&k) {
            return Err(format!("the tool's first line has no `{k}:`"));
        }
    }
    if mode.is_some() {
        o.mode = mode;
    }
    let differs = |a: i64, b: i64, d: i64| a != b && b != d;
    let dflt = ToolOptions::default();
    if differs(o.threads, given.threads, dflt.threads)
        || differs(o.granule, given.granule, dflt.granule)
        || differs(o.dir, given.dir, dflt.dir)
    {
        return Err(format!(
            "the tool's line says `{}`, but the command line before it says `{}`",
            o.command(),
            given.command()
        ));
    }
    o.check()?;
    Ok(o)
}

fn csv(file: &str, lines: &[&str], header: usize) -> Result<Vec<Row>, InputError> {
    let mut rows = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(header + 1) {
        let err = |m: String| InputError {
            line: Some(i + 1),
            ..InputError::new(file, m)
        };
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let cells: Vec<&str> = l.split(',').map(str::trim).collect();
        let [experiment, options, metric, value] = cells[..] else {
            return Err(err(format!(
                "expected four cells `experiment,options,metric,value`, found {}",
                cells.len()
            )));
        };
        if experiment != "dma_map_benchmark" {
            return Err(err(format!(
                "unknown experiment {}: this version fits dma_map_benchmark runs",
                quote(experiment)
            )));
        }
        let run = ToolOptions::parse_args(options.split_whitespace()).map_err(err)?;
        let metric = Metric::parse(metric).ok_or_else(|| {
            err(format!(
                "unknown metric {}: map_latency_us, unmap_latency_us or a kernel function's name",
                quote(metric)
            ))
        })?;
        let value = number(value)
            .ok_or_else(|| err(format!("{} is not a number of at least 0", quote(value))))?;
        rows.push(Row {
            file: file.to_string(),
            line: i + 1,
            run,
            metric,
            value,
            calls: None,
        });
    }
    Ok(rows)
}

/// A C identifier, as a traced function's name is.
fn is_symbol(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// One function_graph line: its CPU, its duration in ns if it has one, and what it shows.
struct GraphLine<'a> {
    cpu: u32,
    duration_ns: Option<f64>,
    body: &'a str,
}

/// Read a line of `cat trace` (` 1)   0.958 us    |  f();`) or of `trace-cmd report`
/// (`task-1 [001] 12.3: funcgraph_entry:   0.958 us   |  f();`); `None` for a line that shows
/// no call (a marker such as `------------------------------------------`).
fn graph_line(l: &str) -> Result<Option<GraphLine<'_>>, String> {
    let Some((head, body)) = l.split_once('|') else {
        return Ok(None);
    };
    let cpu = if let Some(open) = head.find('[') {
        let close = head[open..].find(']').ok_or("unclosed `[` of the CPU")? + open;
        head[open + 1..close].trim().parse::<u32>().ok()
    } else {
        head.split_once(')')
            .and_then(|(c, _)| c.trim().parse::<u32>().ok())
    };
    let Some(cpu) = cpu else {
        return Ok(None);
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let duration_ns = match words
        .iter()
        .position(|w| *w == "us" || *w == "ns" || *w == "ms")
    {
        Some(u) if u > 0 => {
            let n = number(words[u - 1])
                .ok_or_else(|| format!("{} is not a duration", quote(words[u - 1])))?;
            Some(match words[u] {
                "ns" => n,
                "us" => n * 1e3,
                _ => n * 1e6,
            })
        }
        _ => None,
    };
    Ok(Some(GraphLine {
        cpu,
        duration_ns,
        body: body.trim(),
    }))
}

fn function_graph(file: &str, lines: &[&str]) -> Result<Vec<Row>, InputError> {
    let err = |i: usize, m: String| InputError {
        line: Some(i + 1),
        ..InputError::new(file, m)
    };
    let mut run = None;
    // Per function: (first line, calls, total ns); in the order first met.
    let mut seen: Vec<(String, usize, u64, f64)> = Vec::new();
    let mut open: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for (i, l) in lines.iter().enumerate() {
        if let Some(o) = command_line(l) {
            run = Some(o.map_err(|m| err(i, m))?);
            continue;
        }
        if l.trim_start().starts_with('#') {
            continue;
        }
        let Some(g) = graph_line(l).map_err(|m| err(i, m))? else {
            continue;
        };
        let stack = open.entry(g.cpu).or_default();
        let done = if let Some(name) = g.body.strip_suffix("();") {
            Some(name.trim().to_string())
        } else if let Some(name) = g.body.strip_suffix("() {") {
            stack.push(name.trim().to_string());
            None
        } else if let Some(tail) = g.body.strip_prefix('}') {
            // `} /* f */` with funcgraph-tail; otherwise the innermost open call on its CPU.
            let named = tail
                .trim()
                .strip_prefix("/*")
                .and_then(|t| t.strip_suffix("*/"))
                .map(|t| t.trim().to_string());
            let popped = stack.pop();
            // A return whose call began before the capture did: nothing to time.
            named.or(popped)
        } else {
            None
        };
        let (Some(name), Some(ns)) = (done, g.duration_ns) else {
            continue;
        };
        if !is_symbol(&name) {
            return Err(err(i, format!("{} is not a function's name", quote(&name))));
        }
        match seen.iter_mut().find(|s| s.0 == name) {
            Some(s) => {
                s.2 += 1;
                s.3 += ns;
            }
            None => seen.push((name, i + 1, 1, ns)),
        }
    }
    let Some(run) = run else {
        return Err(InputError::new(
            file,
            "a function_graph capture must say which dma_map_benchmark run it was taken during: add its command line as a comment, e.g. `# dma_map_benchmark -t 1 -g 1 -d 0`",
        ));
    };
    Ok(seen
        .into_iter()
        .map(|(name, line, calls, total)| Row {
            file: file.to_string(),
            line,
            run,
            metric: Metric::Function(name),
            value: total / calls as f64,
            calls: Some(calls),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_lines_are_read_per_release() {
        let text = "# dma_map_benchmark -x 0 -b 48\n\
            dma mapping benchmark: threads:1 seconds:20 node:-1 dir:TO_DEVICE granule: 256\n\
            average map latency(us):12.3 standard deviation:0.4\n\
            average unmap latency(us):4.5 standard deviation:0.1\n\
            dma mapping benchmark(SG_MODE): threads:2 seconds:5 node:0 dir:FROM_DEVICE granule:4\n\
            average map latency(us):1.0 standard deviation:0.0\n\
            average unmap latency(us):0.7 standard deviation:0.0\n";
        let rows = read("b.txt", text).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!((rows[0].line, rows[0].value), (3, 12.3));
        assert_eq!(rows[0].run.granule, 256);
        assert_eq!(rows[0].run.dir, 1);
        assert_eq!(rows[0].run.bits, 48);
        assert_eq!(rows[1].metric, Metric::ToolUnmap);
        assert_eq!(rows[2].run.mode, Some(1));
        assert_eq!(
            (rows[3].line, rows[3].run.threads, rows[3].run.node),
            (7, 2, 0)
        );
    }

    #[test]
    fn a_cut_run_names_its_line() {
        let text = "dma mapping benchmark: threads:1 seconds:20 node:-1 dir:TO_DEVICE granule: 1\n\
            average map latency(us):0.3 standard deviation:0.0\n";
        let e = read("b.txt", text).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("average unmap latency"), "{e}");
    }

    #[test]
    fn function_graph_durations_are_averaged_per_function() {
        let text = "# dma_map_benchmark -t 1 -g 1 -d 1\n\
            # tracer: function_graph\n\
            #\n\
            # CPU  DURATION                  FUNCTION CALLS\n\
             3)   0.900 us    |  dma_map_page_attrs();\n\
             3)               |  dma_unmap_page_attrs() {\n\
             3)   0.300 us    |    iommu_dma_unmap_page();\n\
             3)   2.000 us    |  }\n\
             3)   1.100 us    |  dma_map_page_attrs();\n\
            dma_map_benchmark-7 [003] 10.1: funcgraph_entry:               |  dma_unmap_page_attrs() {\n\
            dma_map_benchmark-7 [003] 10.2: funcgraph_exit:  + 10.000 us   |  }\n";
        let rows = read("g.txt", text).unwrap();
        let got: Vec<(String, usize, f64, Option<u64>)> = rows
            .iter()
            .map(|r| (r.metric.name(), r.line, r.value, r.calls))
            .collect();
        assert_eq!(
            got,
            vec![
                ("dma_map_page_attrs (ns)".into(), 5, 1000.0, Some(2)),
                ("iommu_dma_unmap_page (ns)".into(), 7, 300.0, Some(1)),
                ("dma_unmap_page_attrs (ns)".into(), 8, 6000.0, Some(2)),
            ]
        );
        assert_eq!(rows[0].run.dir, 1);
    }

    #[test]
    fn a_capture_without_its_run_is_refused() {
        let e = read("g.txt", " 0)   0.9 us |  dma_map_page_attrs();\n").unwrap_err();
        assert!(e.message.contains("# dma_map_benchmark"), "{e}");
    }

    #[test]
    fn csv_rows_and_their_errors() {
        let text = "experiment,options,metric,value\n\
            dma_map_benchmark,-t 1 -g 256 -d 2,map_latency_us,3.4\n\
            dma_map_benchmark,-t 1,iommu_dma_map_page,210\n";
        let rows = read("m.csv", text).unwrap();
        assert_eq!(
            rows[1].metric,
            Metric::Function("iommu_dma_map_page".into())
        );
        assert_eq!((rows[1].line, rows[1].value), (3, 210.0));
        for (bad, line, want) in [
            (
                "dma_map_benchmark,-t 1,map_latency_us,-1\n",
                2,
                "not a number",
            ),
            (
                "dma_map_benchmark,-t 0,map_latency_us,1\n",
                2,
                "-t: threads",
            ),
            ("fio,-t 1,map_latency_us,1\n", 2, "unknown experiment"),
            (
                "dma_map_benchmark,-t 1,map latency,1\n",
                2,
                "unknown metric",
            ),
            ("dma_map_benchmark,-t 1\n", 2, "four cells"),
        ] {
            let e = read("m.csv", &format!("experiment,options,metric,value\n{bad}")).unwrap_err();
            assert_eq!(e.line, Some(line), "{e}");
            assert!(e.message.contains(want), "{e}");
        }
    }

    #[test]
    fn what_is_none_of_them_is_refused() {
        for text in ["", "# only a comment\n", "hello world\n"] {
            assert!(read("x", text).is_err(), "{text:?}");
        }
        let e = read(
            "x",
            "dma mapping benchmark: threads:1 seconds:20 node:-1 dir:SIDEWAYS granule: 1\n",
        )
        .unwrap_err();
        assert!(e.message.contains("unknown direction `SIDEWAYS`"), "{e}");
    }
}
