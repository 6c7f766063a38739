//! Plots as self-contained SVG: line charts of a value against a swept parameter.
//!
//! Kernel counterpart: none. Written by hand, small: no plotting crate serves without pulling in
//! font handling, and an SVG of a few polylines is plain text.
//!
//! What it draws: one panel per chart, stacked; in each, the x axis is the swept values in the
//! order given (evenly spaced: they are settings such as entry sizes, not a continuous scale), the
//! y axis is linear from zero to a rounded maximum, and each series is a polyline with a marker
//! per point. Every point carries its value in a `<title>` (shown on hover) and in `data-x` /
//! `data-y` attributes, so the figures can be read back from the file.
//!
//! Invariants: the output is well-formed XML (every text is escaped); the same input gives the
//! same bytes; a missing point (`None`) breaks its series' line rather than being drawn as zero.

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
}

const W: f64 = 720.0;
const H: f64 = 300.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
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

/// A round number at or above `x` (1, 2 or 5 times a power of ten).
fn nice_ceil(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= x {
            return m * p;
        }
    }
    10.0 * p
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
    let ymax = nice_ceil(max);
    let n = c.x_labels.len().max(1);
    let x_at = |i: usize| {
        if n == 1 {
            LEFT + pw / 2.0
        } else {
            LEFT + pw * i as f64 / (n - 1) as f64
        }
    };
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
            num(v)
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
            W - RIGHT + 12.0,
            W - RIGHT + 32.0,
            W - RIGHT + 38.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    let _ = writeln!(o, "</g>");
}

/// The charts, one panel under another, as one SVG document.
pub fn svg(charts: &[Chart]) -> String {
    let height = H * charts.len().max(1) as f64;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>"#
    );
    for (i, c) in charts.iter().enumerate() {
        panel(&mut o, c, H * i as f64);
    }
    o.push_str("</svg>\n");
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
        }
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
    fn nice_ceilings_are_round() {
        assert_eq!(nice_ceil(273.1), 500.0);
        assert_eq!(nice_ceil(96.6), 100.0);
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(f64::NAN), 1.0);
        assert_eq!(nice_ceil(1.5), 2.0);
    }
}
