//! Plots as self-contained SVG, and HTML reports that embed them.
//!
//! Kernel counterpart: none. Written by hand, small: no plotting crate serves without pulling in
//! font handling, and an SVG of a few polylines and rectangles is plain text.
//!
//! What it draws, one panel under another:
//! - [`Chart`]: a line chart of a value against a swept parameter (`run --sweep --plot`). The x
//!   axis is the swept values in the order given (evenly spaced: they are settings such as entry
//!   sizes, not a continuous scale; or by their logarithm, for counts of CPUs that double), the
//!   y axis linear from zero to a rounded maximum, each series a polyline with a marker per
//!   point.
//! - [`BarChart`]: horizontal bars, one group per row label and one bar per series (time per call
//!   per variant for `compare --plot`; the error of each published row for `reproduce --format
//!   html`, signed about zero, with a tolerance band and bars past the axis clipped and marked).
//! - [`StackChart`]: one horizontal bar per variant split into its call stacks' self time, with a
//!   legend row per stack underneath (stack names are long; the legend carries them whole).
//!
//! Every mark carries its value in a `<title>` (shown on hover) and in `data-*` attributes, so
//! the figures can be read back from the file. Horizontal bars keep long labels (calls, row ids)
//! readable without rotation; label widths are estimated from the character count.
//!
//! Invariants: the output is well-formed XML (every text is escaped); the same input gives the
//! same bytes; a missing point (`None`) breaks its series' line, or leaves its bar out, rather
//! than being drawn as zero.

use std::fmt::Write as _;

/// One line of a chart: its legend and a value per x position.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub values: Vec<Option<f64>>,
}

/// One panel: a title, the x axis' name and tick labels, the y axis' name, and its series.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_name: String,
    pub x_labels: Vec<String>,
    pub y_name: String,
    pub series: Vec<Series>,
    /// Each x label's value, to place it on a logarithmic axis (a count of CPUs, which doubles
    /// from setting to setting); `None` spaces the labels evenly. Values not all above zero,
    /// or all equal, are spaced evenly too.
    pub log_x: Option<Vec<f64>>,
}

impl Chart {
    /// Where the `i`-th of `n` x labels sits, as a fraction of the plot's width.
    fn x_fraction(&self, i: usize, n: usize) -> f64 {
        if let Some(v) = self.log_x.as_ref().filter(|v| v.len() == n) {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            if lo > 0.0 && hi > lo {
                return (v[i] / lo).ln() / (hi / lo).ln();
            }
        }
        if n == 1 {
            0.5
        } else {
            i as f64 / (n - 1) as f64
        }
    }
}

const W: f64 = 720.0;
const H: f64 = 300.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
/// Where a line chart's legend entries start (swatch, then text at `LEGEND_X + 26`).
const LEGEND_X: f64 = W - RIGHT + 12.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Colours that stay apart for most readers (Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
];

/// XML-escape text for an element or an attribute.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// An axis tick as the data reads: no more digits than it has (`30`, `2.5`, `0.125`).
fn tick(x: f64) -> String {
    let t = format!("{x:.4}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" || t.is_empty() {
        "0".into()
    } else {
        t.to_string()
    }
}

/// A number as a short tick or hover label.
fn num(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

fn panel(o: &mut String, c: &Chart, y0: f64) {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let max = c
        .series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |m, &v| if v.is_finite() { m.max(v) } else { m });
    let ymax = nice_ceil_fine(max);
    let n = c.x_labels.len().max(1);
    let x_at = |i: usize| LEFT + pw * c.x_fraction(i, n);
    let y_at = |v: f64| y0 + TOP + ph - ph * (v / ymax).clamp(0.0, 1.0);

    let _ = writeln!(
        o,
        r#"<g class="chart"><text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        y0 + 24.0,
        escape(&c.title)
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        o,
        r##"<rect x="{LEFT}" y="{}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##,
        y0 + TOP
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let y = y_at(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            y + 4.0,
            tick(v)
        );
    }
    for (i, l) in c.x_labels.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"#,
            x_at(i),
            y0 + TOP + ph + 16.0,
            escape(l)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        y0 + H - 8.0,
        escape(&c.x_name)
    );
    let _ = writeln!(
        o,
        r#"<text x="16" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        y0 + TOP + ph / 2.0,
        y0 + TOP + ph / 2.0,
        escape(&c.y_name)
    );
    // Series: a polyline per unbroken run of points, a marker per point, a legend entry.
    for (si, s) in c.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let _ = writeln!(
            o,
            r#"<g class="series" data-label="{}" stroke="{colour}" fill="{colour}">"#,
            escape(&s.label)
        );
        let mut run: Vec<String> = Vec::new();
        let flush = |o: &mut String, run: &mut Vec<String>| {
            if run.len() > 1 {
                let _ = writeln!(
                    o,
                    r#"<polyline fill="none" stroke-width="2" points="{}"/>"#,
                    run.join(" ")
                );
            }
            run.clear();
        };
        for (i, v) in s.values.iter().enumerate() {
            match v {
                Some(v) if v.is_finite() => run.push(format!("{:.1},{:.1}", x_at(i), y_at(*v))),
                _ => flush(o, &mut run),
            }
        }
        flush(o, &mut run);
        for (i, v) in s.values.iter().enumerate() {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                let x = c.x_labels.get(i).map_or("", String::as_str);
                let _ = writeln!(
                    o,
                    r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="3.5" data-x="{}" data-y="{v}"><title>{}: {} = {}</title></circle>"#,
                    x_at(i),
                    y_at(v),
                    escape(x),
                    escape(&s.label),
                    escape(x),
                    num(v)
                );
            }
        }
        let ly = y0 + TOP + 14.0 + 18.0 * si as f64;
        let _ = writeln!(
            o,
            r#"<line x1="{}" y1="{ly:.1}" x2="{}" y2="{ly:.1}" stroke-width="2"/><text x="{}" y="{:.1}" font-size="12" stroke="none">{}</text></g>"#,
            LEGEND_X,
            LEGEND_X + 20.0,
            LEGEND_X + 26.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    let _ = writeln!(o, "</g>");
}

/// The charts, one panel under another, as one SVG document.
pub fn svg(charts: &[Chart]) -> String {
    let panels: Vec<Panel> = charts.iter().cloned().map(Panel::Line).collect();
    document(&panels)
}

/// One horizontal bar chart: a group of bars per row label, a bar per series.
#[derive(Clone, Debug)]
pub struct BarChart {
    pub title: String,
    /// The value axis' name, with its unit.
    pub x_name: String,
    /// The legend, one entry per series (empty: one unnamed series, no legend).
    pub series: Vec<String>,
    pub groups: Vec<BarGroup>,
    /// Values may be negative: the axis runs symmetric about zero.
    pub signed: bool,
    /// A band drawn about zero, ±this value (a tolerance).
    pub band: Option<f64>,
    /// The axis stops here; a bar beyond it is drawn to the edge and marked as cut.
    pub clip: Option<f64>,
}

/// One row of a bar chart: its label, one value per series and the text written at each bar's
/// end (the caller formats it, with its unit).
#[derive(Clone, Debug)]
pub struct BarGroup {
    pub label: String,
    pub values: Vec<Option<f64>>,
    pub texts: Vec<String>,
}

/// Self time per call stack: one bar per variant, split into stacks.
#[derive(Clone, Debug)]
pub struct StackChart {
    pub title: String,
    pub x_name: String,
    /// The bars' names (the variants).
    pub bars: Vec<String>,
    /// One segment per stack: its name and its value in each bar.
    pub segments: Vec<Series>,
}

/// Any panel.
#[derive(Clone, Debug)]
pub enum Panel {
    Line(Chart),
    Bars(BarChart),
    Stack(StackChart),
}

/// Approximate width in px of `s` at `size` px in a sans-serif face: enough to keep labels
/// apart without a font, since nothing here measures glyphs.
fn text_w(s: &str, size: f64) -> f64 {
    // DejaVu Sans, the usual fallback, averages about 0.62 em per character of these labels.
    s.chars().count() as f64 * size * 0.65
}

/// A round axis end at or above `x`, so the longest bar or highest point fills most of its axis: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten.
fn nice_ceil_fine(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= x * (1.0 - 1e-12) {
            return m * p;
        }
    }
    10.0 * p
}

const BAR_H: f64 = 14.0;
const GROUP_GAP: f64 = 10.0;

fn bar_layout(c: &BarChart) -> (f64, f64, f64) {
    let label_w = c
        .groups
        .iter()
        .map(|g| text_w(&g.label, 12.0))
        .fold(60.0, f64::max)
        + 28.0;
    let text_w_max = c
        .groups
        .iter()
        .flat_map(|g| g.texts.iter().map(|t| text_w(t, 11.0)))
        .fold(40.0, f64::max);
    let plot_w = 420.0;
    let legend_w = c
        .series
        .iter()
        .map(|s| text_w(s, 12.0) + 40.0)
        .fold(0.0, f64::max);
    let width = label_w + plot_w + text_w_max + 24.0 + legend_w;
    (label_w, plot_w, width.max(W))
}

fn bars_height(c: &BarChart) -> f64 {
    let per = BAR_H * c.series.len().max(1) as f64 + GROUP_GAP;
    TOP + per * c.groups.len() as f64 + BOTTOM
}

fn bars_panel(o: &mut String, c: &BarChart, y0: f64) {
    let (left, pw, width) = bar_layout(c);
    let ns = c.series.len().max(1);
    let per = BAR_H * ns as f64 + GROUP_GAP;
    let ph = per * c.groups.len() as f64;
    let max = c
        .groups
        .iter()
        .flat_map(|g| g.values.iter().flatten())
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, &v| m.max(v.abs()));
    let mut lim = nice_ceil_fine(max.max(c.band.unwrap_or(0.0)));
    if let Some(clip) = c.clip {
        lim = lim.min(clip);
    }
    let (lo, hi) = if c.signed { (-lim, lim) } else { (0.0, lim) };
    let x_at = |v: f64| left + pw * ((v.clamp(lo, hi) - lo) / (hi - lo));
    let top = y0 + TOP;
    let _ = writeln!(
        o,
        r#"<g class="bars"><text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        16.0,
        y0 + 24.0,
        escape(&c.title)
    );
    if let Some(b) = c.band {
        let (x1, x2) = (x_at(-b.min(hi)), x_at(b.min(hi)));
        let x1 = if c.signed { x1 } else { left };
        let _ = writeln!(
            o,
            r##"<rect class="band" x="{x1:.1}" y="{top}" width="{:.1}" height="{ph}" fill="#e8f4e8"/>"##,
            x2 - x1
        );
    }
    for k in 0..=4 {
        let v = lo + (hi - lo) * k as f64 / 4.0;
        let x = x_at(v);
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 14.0,
            num(v)
        );
    }
    let zero = x_at(0.0);
    let _ = writeln!(
        o,
        r##"<line x1="{zero:.1}" y1="{top}" x2="{zero:.1}" y2="{:.1}" stroke="#444"/>"##,
        top + ph
    );
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + 32.0,
        escape(&c.x_name)
    );
    for (gi, g) in c.groups.iter().enumerate() {
        let gy = top + per * gi as f64 + GROUP_GAP / 2.0;
        let _ = writeln!(
            o,
            r#"<text class="label" x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"#,
            left - 8.0,
            gy + BAR_H * ns as f64 / 2.0 + 4.0,
            escape(&g.label)
        );
        for (si, v) in g.values.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite()) else {
                continue;
            };
            let colour = COLOURS[si % COLOURS.len()];
            let y = gy + BAR_H * si as f64;
            let (a, b) = (zero.min(x_at(v)), zero.max(x_at(v)));
            let cut = v < lo || v > hi;
            let series = c.series.get(si).map_or("", String::as_str);
            let text = g.texts.get(si).map_or(String::new(), |t| t.clone());
            let _ = writeln!(
                o,
                r#"<rect class="bar" x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}" data-group="{}" data-series="{}" data-value="{v}"{}><title>{}{}: {}</title></rect>"#,
                y + 1.0,
                (b - a).max(0.5),
                BAR_H - 2.0,
                escape(&g.label),
                escape(series),
                if cut { r#" data-cut="true""# } else { "" },
                escape(&g.label),
                if series.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", escape(series))
                },
                escape(&text)
            );
            // The value at the bar's end, outside it; a cut bar says so.
            let (tx, anchor) = if v < 0.0 && c.signed {
                (a - 4.0, "end")
            } else {
                (b + 4.0, "start")
            };
            let (tx, anchor) = if v < 0.0 && c.signed && tx - text_w(&text, 11.0) < left {
                (b + 4.0, "start")
            } else {
                (tx, anchor)
            };
            let _ = writeln!(
                o,
                r#"<text x="{tx:.1}" y="{:.1}" font-size="11" text-anchor="{anchor}">{}{}</text>"#,
                y + BAR_H - 3.0,
                if cut { "✂ " } else { "" },
                escape(&text)
            );
        }
    }
    for (si, s) in c.series.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let lx = width - text_w(s, 12.0) - 40.0;
        let ly = top + 18.0 * si as f64;
        let _ = writeln!(
            o,
            r#"<rect x="{lx:.1}" y="{:.1}" width="14" height="10" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
            ly,
            lx + 20.0,
            ly + 9.0,
            escape(s)
        );
    }
    let _ = writeln!(o, "</g>");
}

const LEGEND_ROW: f64 = 16.0;
/// Width of one value column in a stack chart's legend.
const LEGEND_COL: f64 = 64.0;

fn stack_height(c: &StackChart) -> f64 {
    TOP + (BAR_H + 8.0) * c.bars.len() as f64 + 52.0 + LEGEND_ROW * c.segments.len() as f64 + 16.0
}

fn stack_width(c: &StackChart) -> f64 {
    let bar_label = c.bars.iter().map(|b| text_w(b, 12.0)).fold(40.0, f64::max) + 12.0;
    let legend = c
        .segments
        .iter()
        .map(|s| text_w(&s.label, 11.0))
        .fold(0.0, f64::max)
        + 46.0
        + LEGEND_COL * c.bars.len() as f64;
    (bar_label + 16.0 + 560.0 + 24.0).max(legend + 32.0).max(W)
}

fn stack_panel(o: &mut String, c: &StackChart, y0: f64) {
    let left = c.bars.iter().map(|b| text_w(b, 12.0)).fold(40.0, f64::max) + 28.0;
    let pw = 560.0;
    let total = |bi: usize| -> f64 {
        c.segments
            .iter()
            .filter_map(|s| s.values.get(bi).copied().flatten())
            .filter(|v| v.is_finite() && *v > 0.0)
            .sum()
    };
    let max = (0..c.bars.len()).map(total).fold(0.0, f64::max);
    let lim = nice_ceil_fine(max);
    let x_at = |v: f64| left + pw * (v / lim).clamp(0.0, 1.0);
    let top = y0 + TOP;
    let bars_h = (BAR_H + 8.0) * c.bars.len() as f64;
    let _ = writeln!(
        o,
        r#"<g class="stack"><text x="16" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        y0 + 24.0,
        escape(&c.title)
    );
    for k in 0..=4 {
        let v = lim * k as f64 / 4.0;
        let x = x_at(v);
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            top + bars_h,
            top + bars_h + 14.0,
            num(v)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + bars_h + 30.0,
        escape(&c.x_name)
    );
    for (bi, b) in c.bars.iter().enumerate() {
        let y = top + (BAR_H + 8.0) * bi as f64 + 4.0;
        let _ = writeln!(
            o,
            r#"<text class="label" x="{:.1}" y="{:.1}" font-size="12" text-anchor="end">{}</text>"#,
            left - 8.0,
            y + BAR_H - 3.0,
            escape(b)
        );
        let mut at = 0.0;
        for (si, s) in c.segments.iter().enumerate() {
            let Some(v) = s.values.get(bi).copied().flatten() else {
                continue;
            };
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            let colour = COLOURS[si % COLOURS.len()];
            let (x1, x2) = (x_at(at), x_at(at + v));
            let _ = writeln!(
                o,
                r#"<rect class="segment" x="{x1:.1}" y="{y:.1}" width="{:.1}" height="{BAR_H}" fill="{colour}" stroke="white" stroke-width="0.5" data-bar="{}" data-stack="{}" data-value="{v}"><title>{}: {}: {}</title></rect>"#,
                (x2 - x1).max(0.5),
                escape(b),
                escape(&s.label),
                escape(b),
                escape(&s.label),
                num(v)
            );
            at += v;
        }
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            x_at(at) + 4.0,
            y + BAR_H - 3.0,
            num(at)
        );
    }
    // The legend: a swatch, each bar's value in a column of its own, the stack's name.
    let ly0 = top + bars_h + 52.0;
    let col = |i: usize| 34.0 + LEGEND_COL * (i as f64 + 1.0);
    let letters: Vec<String> = c
        .bars
        .iter()
        .map(|b| b.split(':').next().unwrap_or(b).to_string())
        .collect();
    for (i, l) in letters.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{ly0:.1}" font-size="11" font-weight="bold" text-anchor="end">{}</text>"#,
            col(i),
            escape(l)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{ly0:.1}" font-size="11" font-weight="bold">stack ({})</text>"#,
        col(letters.len() - 1) + 12.0,
        escape(&c.x_name)
    );
    for (si, s) in c.segments.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let y = ly0 + LEGEND_ROW * (si as f64 + 1.0);
        let _ = writeln!(
            o,
            r#"<rect x="16" y="{:.1}" width="12" height="10" fill="{colour}"/>"#,
            y - 9.0
        );
        for (i, v) in s.values.iter().enumerate() {
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{y:.1}" font-size="11" text-anchor="end">{}</text>"#,
                col(i),
                v.map_or("-".to_string(), num)
            );
        }
        let _ = writeln!(
            o,
            r#"<text class="legend" x="{:.1}" y="{y:.1}" font-size="11">{}</text>"#,
            col(s.values.len().max(1) - 1) + 12.0,
            escape(&s.label)
        );
    }
    let _ = writeln!(o, "</g>");
}

/// A line chart's size: the plot, and room right of it for the longest legend entry whole, and
/// below for every entry.
fn line_size(c: &Chart) -> (f64, f64) {
    let legend = c
        .series
        .iter()
        .map(|s| text_w(&s.label, 12.0))
        .fold(0.0, f64::max);
    let width = (LEGEND_X + 26.0 + legend + 12.0).max(W);
    let height = (TOP + 14.0 + 18.0 * c.series.len() as f64 + 8.0).max(H);
    (width, height)
}

fn panel_size(p: &Panel) -> (f64, f64) {
    match p {
        Panel::Line(c) => line_size(c),
        Panel::Bars(b) => (bar_layout(b).2, bars_height(b)),
        Panel::Stack(s) => (stack_width(s), stack_height(s)),
    }
}

/// The panels, one under another, as an `<svg>` element (no XML declaration), to stand alone
/// after one or to sit inside an HTML page.
pub fn svg_element(panels: &[Panel]) -> String {
    let width = panels.iter().map(|p| panel_size(p).0).fold(W, f64::max);
    // As tall as its panels: a short bar panel (a reproduce experiment of two rows) keeps no
    // blank band under it; an empty picture keeps a line panel's height.
    let height = if panels.is_empty() {
        H
    } else {
        panels.iter().map(|p| panel_size(p).1).sum::<f64>()
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>"#
    );
    let mut y = 0.0;
    for p in panels {
        match p {
            Panel::Line(c) => panel(&mut o, c, y),
            Panel::Bars(c) => bars_panel(&mut o, c, y),
            Panel::Stack(c) => stack_panel(&mut o, c, y),
        }
        y += panel_size(p).1;
    }
    o.push_str("</svg>\n");
    o
}

/// The panels as one SVG document.
pub fn document(panels: &[Panel]) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{}",
        svg_element(panels)
    )
}

/// A table for an HTML report: a head row, then rows of cells (plain text, escaped here).
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub head: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One part of an HTML report: a heading, paragraphs, panels and a table.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub heading: String,
    pub notes: Vec<String>,
    pub panels: Vec<Panel>,
    pub table: Option<Table>,
}

/// A self-contained HTML page (no scripts, no external files) with the sections' SVG inline.
/// It is also well-formed XML (XHTML syntax), so tests can parse it whole.
pub fn html(title: &str, sections: &[Section]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>{}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
table {{ border-collapse: collapse; margin: 12px 0 24px 0; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
p.note {{ max-width: 60em; font-size: 14px; }}
svg {{ display: block; margin: 8px 0; }}
</style>
</head>
<body>
<h1>{}</h1>"#,
        escape(title),
        escape(title)
    );
    for s in sections {
        let _ = writeln!(o, "<section>\n<h2>{}</h2>", escape(&s.heading));
        for n in &s.notes {
            let _ = writeln!(o, r#"<p class="note">{}</p>"#, escape(n));
        }
        if !s.panels.is_empty() {
            o.push_str(&svg_element(&s.panels));
        }
        if let Some(t) = &s.table {
            o.push_str("<table>\n<tr>");
            for h in &t.head {
                let _ = write!(o, "<th>{}</th>", escape(h));
            }
            o.push_str("</tr>\n");
            for r in &t.rows {
                o.push_str("<tr>");
                for cell in r {
                    // Figures align right; words left.
                    let numeric = cell
                        .trim_start_matches(['+', '-', '>', '<'])
                        .starts_with(|c: char| c.is_ascii_digit());
                    let _ = write!(
                        o,
                        "<td{}>{}</td>",
                        if numeric { r#" class="num""# } else { "" },
                        escape(cell)
                    );
                }
                o.push_str("</tr>\n");
            }
            o.push_str("</table>\n");
        }
        o.push_str("</section>\n");
    }
    o.push_str("</body>\n</html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            title: "dma_map_sg <&>".into(),
            x_name: "workload.entry".into(),
            x_labels: vec!["4K".into(), "16K".into(), "64K".into()],
            y_name: "µs per call".into(),
            series: vec![
                Series {
                    label: "kernel 7.0".into(),
                    values: vec![Some(273.1), Some(80.0), Some(30.5)],
                },
                Series {
                    label: "kernel 7.1".into(),
                    values: vec![Some(96.6), None, Some(20.0)],
                },
            ],
            log_x: None,
        }
    }

    /// Counts of CPUs on a log axis: 1, 2 and 4 evenly apart, 3 between 2 and 4 nearer 4, 16
    /// twice as far from 4 as 4 from 1.
    #[test]
    fn a_log_axis_places_each_label_by_its_value() {
        let c = Chart {
            log_x: Some(vec![1.0, 2.0, 3.0, 4.0, 16.0]),
            x_labels: ["1", "2", "3", "4", "16"].map(String::from).to_vec(),
            ..chart()
        };
        let at: Vec<f64> = (0..5).map(|i| c.x_fraction(i, 5)).collect();
        assert_eq!(at[0], 0.0);
        assert!(
            (at[1] - 0.25).abs() < 1e-9 && (at[3] - 0.5).abs() < 1e-9,
            "{at:?}"
        );
        assert!(at[2] > 0.25 + 0.125 && at[2] < 0.5, "{at:?}");
        assert_eq!(at[4], 1.0);
        let even = Chart {
            log_x: Some(vec![0.0, 2.0, 4.0]),
            ..chart()
        };
        assert_eq!(even.x_fraction(1, 3), 0.5);
    }

    #[test]
    fn every_point_is_in_the_file_and_text_is_escaped() {
        let s = svg(&[chart()]);
        assert!(s.contains("dma_map_sg &lt;&amp;&gt;"));
        assert_eq!(s.matches("<circle class=\"point\"").count(), 5);
        assert!(s.contains(r#"data-x="4K" data-y="273.1""#));
        assert!(s.contains(r#"data-x="64K" data-y="20""#));
        // The gap in 7.1 leaves two single points: no line for that series.
        assert_eq!(s.matches("<polyline").count(), 1);
        assert_eq!(s, svg(&[chart()]), "deterministic");
    }

    #[test]
    fn bars_past_the_axis_are_cut_and_marked_and_gaps_are_left_out() {
        let c = BarChart {
            title: "errors".into(),
            x_name: "%".into(),
            series: Vec::new(),
            groups: vec![
                BarGroup {
                    label: "a<b".into(),
                    values: vec![Some(-96.8)],
                    texts: vec!["-96.80 %".into()],
                },
                BarGroup {
                    label: "c".into(),
                    values: vec![Some(2.5)],
                    texts: vec!["+2.50 %".into()],
                },
                BarGroup {
                    label: "d".into(),
                    values: vec![None],
                    texts: vec![String::new()],
                },
            ],
            signed: true,
            band: Some(10.0),
            clip: Some(25.0),
        };
        let s = document(&[Panel::Bars(c.clone())]);
        assert_eq!(s.matches(r#"class="bar""#).count(), 2);
        assert_eq!(s.matches("data-cut").count(), 1);
        assert!(
            s.contains(r#"data-group="a&lt;b" data-series="" data-value="-96.8" data-cut="true""#)
        );
        assert!(s.contains("✂ -96.80 %"));
        assert_eq!(s.matches(r#"class="band""#).count(), 1);
        assert_eq!(s, document(&[Panel::Bars(c)]), "deterministic");
    }

    #[test]
    fn stack_segments_follow_each_other_and_the_legend_holds_every_value() {
        let c = StackChart {
            title: "t".into(),
            x_name: "ms".into(),
            bars: vec!["A: 7.0".into(), "B: 7.1".into()],
            segments: vec![
                Series {
                    label: "x > y".into(),
                    values: vec![Some(3.0), Some(1.0)],
                },
                Series {
                    label: "x > z".into(),
                    values: vec![Some(5.0), None],
                },
            ],
        };
        let s = document(&[Panel::Stack(c)]);
        assert_eq!(s.matches(r#"class="segment""#).count(), 3);
        assert!(s.contains(r#"data-bar="A: 7.0" data-stack="x &gt; z" data-value="5""#));
        // A's bar ends at 8 of an axis to 8: the second segment starts where the first ends.
        let x = |stack: &str| {
            let at = s
                .find(&format!(r#"data-bar="A: 7.0" data-stack="{stack}""#))
                .unwrap();
            let head = &s[..at];
            let from = head.rfind(r#"x=""#).unwrap() + 3;
            head[from..]
                .split('"')
                .next()
                .unwrap()
                .parse::<f64>()
                .unwrap()
        };
        assert!(x("x &gt; z") > x("x &gt; y"));
        assert!(s.contains(r#"<text class="legend""#));
    }

    #[test]
    fn nice_ceilings_are_round_and_ticks_read_as_the_data() {
        assert_eq!(nice_ceil_fine(f64::NAN), 1.0);
        assert_eq!(nice_ceil_fine(31.0), 40.0);
        assert_eq!(tick(30.0), "30");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(0.0), "0");
        assert_eq!(nice_ceil_fine(273.1), 300.0);
        assert_eq!(nice_ceil_fine(108.0), 120.0);
        assert_eq!(nice_ceil_fine(25.0), 25.0);
        assert_eq!(nice_ceil_fine(0.0), 1.0);
    }
}
