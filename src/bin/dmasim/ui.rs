//! What the commands share on the terminal side: notes and warnings on standard error, the
//! progress bar, JSON output with its format version, plot files.
//!
//! Kernel counterpart: none.

use anyhow::Result;
use dmasim::input::InputError;
use dmasim::platform::Profile;
use dmasim::scenario;
use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once from `-q` before anything runs; read where a note or the progress bar would show.
pub(crate) static QUIET: AtomicBool = AtomicBool::new(false);

/// An informational line on standard error, unless `-q`.
pub(crate) fn info(msg: std::fmt::Arguments) {
    if !QUIET.load(Ordering::Relaxed) {
        note(msg);
    }
}

/// A progress bar on standard error for a long run, drawn by a thread of its own that reads the
/// run's counter (a clone of the [`scenario::Progress`] handle the run counts on) a few times a
/// second: the run itself only counts its
/// outer steps, and nothing it computes or prints depends on the bar. The bar appears only once
/// the run has taken [`Progress::DELAY`] of wall time, so a quick run draws nothing whatever its
/// size estimate said; only when standard error is a terminal and `-q` is not given; and it is
/// cleared when the run ends, so no output byte changes.
pub(crate) struct Progress {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    const POLL: std::time::Duration = std::time::Duration::from_millis(200);
    /// "A run of more than a second shows progress."
    const DELAY: std::time::Duration = std::time::Duration::from_secs(1);

    /// A bar counting `total` outer steps (the scenario's `progress_total`), or, for work whose
    /// total is not known up front (a sweep), a spinner counting steps done. `None` when no bar
    /// may be drawn.
    fn start(total: Option<u64>, counter: &scenario::Progress) -> Option<Progress> {
        if !io::stderr().is_terminal() || QUIET.load(Ordering::Relaxed) {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let counter = counter.clone();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let began = std::time::Instant::now();
            while began.elapsed() < Self::DELAY {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::park_timeout(Self::DELAY.saturating_sub(began.elapsed()));
            }
            let bar = indicatif::ProgressBar::with_draw_target(
                total,
                indicatif::ProgressDrawTarget::stderr(),
            )
            .with_elapsed(began.elapsed());
            let template = if total.is_some() {
                "{elapsed_precise} [{bar:40}] {pos}/{len} (about {eta} left)"
            } else {
                "{elapsed_precise} {spinner} {pos} steps done"
            };
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            while !flag.load(Ordering::Relaxed) {
                let done = counter.done();
                bar.set_position(total.map_or(done, |t| done.min(t)));
                bar.tick();
                std::thread::park_timeout(Self::POLL);
            }
            bar.finish_and_clear();
        });
        Some(Progress { stop, thread })
    }

    /// Clear the bar (if it was drawn) before anything else is written.
    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

/// Runs `work` with a [`Progress`] display over it (for a known `total` of outer steps, or a
/// step counter when `None`), cleared before the caller writes anything.
pub(crate) fn with_progress<T>(
    total: Option<u64>,
    work: impl FnOnce(&scenario::Progress) -> T,
) -> T {
    let counter = scenario::Progress::new();
    let bar = Progress::start(total, &counter);
    let r = work(&counter);
    if let Some(bar) = bar {
        bar.finish();
    }
    r
}

/// A line on standard error. `eprintln!` would panic if stderr were a closed pipe; a message that
/// cannot be shown has nowhere else to go, so it is dropped.
pub(crate) fn note(msg: std::fmt::Arguments) {
    let _ = writeln!(io::stderr(), "{msg}");
}

pub(crate) fn arg_error(msg: impl Into<String>) -> InputError {
    InputError::new("<argument>", msg)
}

/// Every JSON document leads with its `format_version` (docs/output.md).
pub(crate) fn print_json(out: &mut impl Write, v: &serde_json::Value) -> Result<()> {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut()
        && !o.contains_key("format_version")
    {
        o.insert(
            "format_version".into(),
            dmasim::report::FORMAT_VERSION.into(),
        );
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

/// A missing `[sw]` cost is charged as 0, which is a legitimate choice for a profile (the cost
/// may be folded into another) but must not pass unseen: say so on standard error.
pub(crate) fn warn_unpriced(p: &Profile, keys: &[dmasim::hw::SwKey], scenario: &str) {
    if let Some(w) = p.unpriced_sw_warning(keys, &format!("scenario `{scenario}`")) {
        note(format_args!("warning: {w}"));
    }
}

/// Whether a `--plot` path asks for an HTML page rather than an SVG.
pub(crate) fn is_html(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.ends_with(".html") || p.ends_with(".htm")
}

pub(crate) fn write_plot(path: &str, doc: &str) -> Result<(), InputError> {
    std::fs::write(path, doc)
        .map_err(|e| InputError::new(path, format!("cannot write plot: {e}")))?;
    info(format_args!("wrote {path}"));
    Ok(())
}

/// A `--plot` path must name a format dmasim writes: SVG, or a self-contained HTML page.
/// Checked before anything runs, so a `.png` is refused rather than given SVG bytes.
pub(crate) fn check_plot(plot: Option<&String>) -> Result<(), InputError> {
    let Some(path) = plot else {
        return Ok(());
    };
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".svg") || is_html(path) {
        return Ok(());
    }
    let ext = std::path::Path::new(path).extension().map_or_else(
        || "no extension".to_string(),
        |e| format!("`.{}`", e.to_string_lossy()),
    );
    Err(arg_error(format!(
        "--plot {path}: {ext} is not a format dmasim writes; it writes SVG (.svg) or a self-contained HTML page (.html, .htm): convert the SVG to PNG with a tool such as rsvg-convert"
    )))
}
