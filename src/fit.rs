//! `dmasim fit`: a platform profile from a board's own measurements.
//!
//! Kernel counterpart: none — this turns what the kernel's own tools printed on a board
//! (`dma_map_benchmark`'s lines, `function_graph` durations) into the costs a profile holds, so
//! that the model, which counts what the kernel does, prices it as that board does.
//!
//! What it does: each measured row names a tool run; the model makes that run (the same
//! map_benchmark scenario `dmasim map-benchmark` makes, cut at [`PAIRS`] pairs a thread) and
//! predicts the row. The parameters fitted are profile costs, never geometry, counts or
//! topology (the registry's kinds); by default every cost the runs used that the profile gives
//! as one number. [`solve`] finds which of them the rows can tell apart, fits those, holds the
//! rest at their base values, and says how far each fitted value moves when a row is left out.
//! The written profile is the base profile's text with each fitted number replaced and its
//! `source` a `fit:` naming the rows that moved it, and a header listing every row with the
//! base's, the fit's and the measured value.
//!
//! The tool's averages are its kernel module's: whole 100 ns units of each call's `ktime_get`
//! delta, averaged with an integer division and printed to 0.1 µs. On a board each truncation
//! takes half a unit on average (the deltas' jitter spreads them over the unit), so the model's
//! untruncated mean less [`TOOL_TRUNCATION_NS`] is what a row of the tool predicts, and a row's
//! uncertainty is at least the printed resolution's.
//!
//! Invariants: every prediction is a whole model run's; a fit that cannot be made — a row no
//! parameter moves, two rows of the same run and metric that disagree, a parameter that is not
//! a cost — is an input error naming the file, line or key; the written profile parses as any
//! other, and only fitted parameters change.

pub mod rows;
pub mod solve;
mod write;

pub use write::{json, table};

use crate::input::InputError;
use crate::platform::Profile;
use crate::platform::params::{self, Kind, SourceRule};
use crate::policy::KernelVersion;
use crate::scenario::map_benchmark::{self, MapBenchmarkResult, ToolOptions};
use crate::scenario::{Outcome, RunError, Scenario, Workload};
use nalgebra::DMatrix;
pub use rows::{Metric, Row};
use solve::Residuals;

/// Map+unmap pairs a thread of each modelled run makes before the pairs a row is predicted
/// from, and then the number of those pairs: the first pairs fill the IOVA caches and allocate
/// the page tables, which a board's seconds-long run amortises to nothing, so each run is made
/// twice, to `PAIRS` and to twice that, and the row is predicted from the difference.
pub const PAIRS: u64 = 1000;

/// What the tool's two truncations take from a mean on average, in ns: half of a 100 ns unit
/// per call (`div64_ul(delta, 100)`), and half a unit again in `sum / loops`.
pub const TOOL_TRUNCATION_NS: f64 = 100.0;

/// The tool prints its averages to 0.1 µs: a printed value is uniform over that step.
const TOOL_RESOLUTION_US: f64 = 0.1;

/// The smallest relative uncertainty of a row: a board's repeated runs differ by about this.
const REL_UNCERTAINTY: f64 = 0.01;

/// What `dmasim fit` is asked.
#[derive(Clone, Debug)]
pub struct Request {
    /// The base profile: a built-in name or a file, as `--platform` takes it.
    pub platform: String,
    /// The release the board runs.
    pub kernel: KernelVersion,
    /// The benchmark's device is behind the platform's IOMMU.
    pub iommu: bool,
    /// The benchmark's device is cache-coherent.
    pub coherent: bool,
    /// The parameters to fit; empty for the default set.
    pub params: Vec<String>,
    /// The written profile's `platform.name`.
    pub name: Option<String>,
}

/// Why a fit gave no profile.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// A bad measurement, argument or profile, or rows no fit can meet.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A model run failed: the modelled kernel refused the machine, or dmasim has a bug.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// One fitted parameter.
#[derive(Clone, Debug)]
pub struct Fitted {
    pub key: String,
    /// The unit its number is written in (`ns`, `cycles`, or the registry's).
    pub unit: String,
    pub base: f64,
    pub value: f64,
    /// Indices into [`Fit::rows`] of the rows it moves.
    pub rows: Vec<usize>,
    /// The largest move of its value, as a fraction, when one row is left out, and that row.
    pub loo: Option<(f64, usize)>,
    /// Parameters the rows cannot tell from this one alone, moved by the same factor (the
    /// base's ratio between them kept): (key, unit, base value).
    pub tied: Vec<(String, String, f64)>,
}

/// A parameter held at its base value, and why.
#[derive(Clone, Debug)]
pub struct Held {
    pub key: String,
    /// The fitted parameters it cannot be told from (two or more: it is made of them); empty
    /// if it is too small a part of the rows to be fitted ([`solve::DETERMINED`]).
    pub with: Vec<String>,
}

/// The fit, and the profile it writes.
#[derive(Clone, Debug)]
pub struct Fit {
    pub base: String,
    pub kernel: KernelVersion,
    /// The rows fitted, with the base profile's and the fitted profile's predictions.
    pub rows: Vec<Row>,
    pub base_model: Vec<f64>,
    pub fit_model: Vec<f64>,
    /// Rows the model cannot predict (a function its path does not run), with why.
    pub ignored: Vec<(Row, String)>,
    pub fitted: Vec<Fitted>,
    pub held: Vec<Held>,
    /// Rows without which the rest cannot determine every fitted parameter.
    pub essential: Vec<usize>,
    pub converged: bool,
    pub stopped: String,
    /// Model runs made, all steps together.
    pub runs: u64,
    /// The fitted profile, as TOML.
    pub profile: String,
}

/// The machine of each distinct tool run, loaded once.
struct Runs {
    runs: Vec<ToolOptions>,
    scenarios: Vec<Scenario>,
}

impl Runs {
    fn load(req: &Request, rows: &[Row]) -> Result<Runs, InputError> {
        let mut runs: Vec<ToolOptions> = rows.iter().map(|r| r.run).collect();
        runs.sort();
        runs.dedup();
        let kernel = req.kernel.to_string();
        let dir = std::env::current_dir()
            .map_err(|e| InputError::new("<fit>", format!("no working directory: {e}")))?;
        let scenarios = runs
            .iter()
            .map(|o| {
                let text = o.scenario_text(&req.platform, &kernel, req.iommu, req.coherent);
                let name = format!("<dma_map_benchmark {}>", o.command());
                Scenario::load_source_on((name, text, dir.clone()), &[], Some(&req.platform))
            })
            .collect::<Result<_, _>>()?;
        Ok(Runs { runs, scenarios })
    }

    /// Every run on `profile`, each to [`PAIRS`] pairs and to twice that.
    fn results(&self, profile: &Profile) -> Result<Vec<Steady>, RunError> {
        self.scenarios
            .iter()
            .map(|s| {
                let mut s = s.clone();
                s.profile = profile.clone();
                let Workload::MapBenchmark(w) = &s.workload else {
                    unreachable!("a tool run is a map_benchmark scenario")
                };
                let run = |n| map_benchmark::sample(&s, w, n).map_err(|f| f.in_file(&s.file));
                Ok(Steady {
                    first: run(PAIRS)?,
                    both: run(2 * PAIRS)?,
                })
            })
            .collect()
    }

    fn of(&self, run: &ToolOptions) -> usize {
        self.runs
            .binary_search(run)
            .expect("every row's run was loaded")
    }
}

/// A run's pairs past its first [`PAIRS`]: the difference of a run to twice that and one to it.
struct Steady {
    first: MapBenchmarkResult,
    both: MapBenchmarkResult,
}

impl Steady {
    /// The mean of what `f` sums over `count` items, over the second run's extra items.
    fn mean(&self, f: impl Fn(&MapBenchmarkResult) -> (u64, u64)) -> Result<f64, String> {
        let ((s1, n1), (s2, n2)) = (f(&self.first), f(&self.both));
        if n2 <= n1 {
            return Err(format!(
                "the model's run stopped within its first {PAIRS} pairs ({})",
                self.both.stopped.as_deref().unwrap_or("a failed map")
            ));
        }
        Ok(s2.saturating_sub(s1) as f64 / (n2 - n1) as f64)
    }

    fn tool(&self, unmap: bool) -> Result<f64, String> {
        self.mean(|r| {
            let l = if unmap { &r.unmap } else { &r.map };
            (l.sum_ns, l.loops)
        })
    }
}

/// The names a `function_graph` capture gives each of the model's DMA API calls: the exported
/// functions the inline wrappers (`dma_map_single`, `dma_map_page`) end in, by release.
const ENTRY_POINTS: &[(&str, &[&str])] = &[
    (
        "dma_map_single",
        &["dma_map_page_attrs", "dma_map_single_attrs", "dma_map_phys"],
    ),
    (
        "dma_unmap_single",
        &[
            "dma_unmap_page_attrs",
            "dma_unmap_single_attrs",
            "dma_unmap_phys",
        ],
    ),
    (
        "dma_map_sg",
        &["dma_map_sg_attrs", "__dma_map_sg_attrs", "dma_map_sgtable"],
    ),
    ("dma_unmap_sg", &["dma_unmap_sg_attrs", "dma_unmap_sgtable"]),
];

/// A function's mean duration in a run, ns: an entry point's calls, or a frame's inclusive time
/// over the calls of the entry point it runs under.
fn function_ns(r: &Steady, name: &str) -> Result<f64, String> {
    let call = ENTRY_POINTS
        .iter()
        .find(|(_, names)| names.contains(&name))
        .map_or(name, |(call, _)| call);
    let of_call =
        |r: &MapBenchmarkResult, call: &str| r.call(call).map_or((0, 0), |c| (c.total_ps, c.count));
    if r.both.call(call).is_some_and(|c| c.count > 0) {
        return r.mean(|x| of_call(x, call)).map(|ps| ps / 1000.0);
    }
    let top = under(&r.both, name)?;
    r.mean(|x| {
        let ps = x
            .stacks
            .iter()
            .filter(|s| s.stack.split(" > ").any(|f| f == name))
            .fold(0u64, |a, s| a.saturating_add(s.self_ps));
        (ps, of_call(x, top).1)
    })
    .map(|ps| ps / 1000.0)
}

/// The one DMA API call `name` runs under in `r`'s stacks.
fn under<'a>(r: &'a MapBenchmarkResult, name: &str) -> Result<&'a str, String> {
    let mut top: Option<&str> = None;
    for s in &r.stacks {
        let first = s.stack.split(" > ").next().unwrap_or("");
        if s.stack.split(" > ").any(|f| f == name) {
            if top.is_some_and(|t| t != first) {
                return Err(format!(
                    "`{name}` runs under both `{}` and `{first}` in the model: a capture's mean of it cannot be split between them",
                    top.unwrap_or_default()
                ));
            }
            top = Some(first);
        }
    }
    top.filter(|t| r.call(t).is_some_and(|c| c.count > 0))
        .ok_or_else(|| {
            format!(
                "the model's run does not call `{name}` under a DMA API call (its calls are {})",
                r.calls
                    .iter()
                    .map(|c| c.call)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// What the model predicts for `row` from its run.
fn predict(row: &Row, r: &Steady) -> Result<f64, String> {
    let tool = |mean_ns: f64| (mean_ns - TOOL_TRUNCATION_NS).max(0.0) / 1000.0;
    match &row.metric {
        Metric::ToolMap => r.tool(false).map(tool),
        Metric::ToolUnmap => r.tool(true).map(tool),
        Metric::Function(f) => function_ns(r, f),
    }
}

/// A row's uncertainty, in its unit.
fn sigma(row: &Row) -> f64 {
    let floor = match row.metric {
        Metric::ToolMap | Metric::ToolUnmap => TOOL_RESOLUTION_US / 12f64.sqrt(),
        Metric::Function(_) => 1.0,
    };
    (row.value * REL_UNCERTAINTY).max(floor)
}

/// The model's residuals over a set of parameters' log-factors.
struct Model<'a> {
    runs: &'a Runs,
    base: &'a Profile,
    /// Each factor's parameters: the fitted one, then those tied to it.
    keys: Vec<Vec<String>>,
    rows: &'a [Row],
    evaluations: std::cell::Cell<u64>,
}

impl Model<'_> {
    fn profile(&self, x: &[f64]) -> Profile {
        let mut p = self.base.clone();
        for (ks, v) in self.keys.iter().zip(x) {
            for k in ks {
                crate::sensitivity::scale(&mut p, k, v.exp());
            }
        }
        p
    }

    fn predictions(&self, x: &[f64]) -> Result<Vec<f64>, RunError> {
        let results = self.runs.results(&self.profile(x))?;
        self.evaluations
            .set(self.evaluations.get() + results.len() as u64);
        Ok(self
            .rows
            .iter()
            .map(|row| predict(row, &results[self.runs.of(&row.run)]).unwrap_or(f64::NAN))
            .collect())
    }
}

impl Residuals for Model<'_> {
    type Error = RunError;
    fn residuals(&self, x: &[f64]) -> Result<Vec<f64>, RunError> {
        Ok(self
            .predictions(x)?
            .iter()
            .zip(self.rows)
            .map(|(m, row)| (m - row.value) / sigma(row))
            .collect())
    }
}

fn bad(m: impl Into<String>) -> FitError {
    FitError::Input(InputError::new("<argument>", m))
}

/// Fit `req`'s parameters to `rows`.
pub fn fit(req: &Request, rows: Vec<Row>) -> Result<Fit, FitError> {
    let base = Profile::load(&req.platform)?;
    let runs = Runs::load(req, &rows)?;
    let first = runs.results(&base)?;
    // Rows the model cannot predict are set aside and said, not fitted to.
    let (mut usable, mut ignored): (Vec<Row>, _) = (Vec::new(), Vec::new());
    for row in rows {
        match predict(&row, &first[runs.of(&row.run)]) {
            Ok(_) => usable.push(row),
            Err(why) => ignored.push((row, why)),
        }
    }
    if usable.is_empty() {
        return Err(bad(
            "no row the model can predict: every row names a function its runs do not call",
        ));
    }
    contradictions(&usable)?;
    let outcomes: Vec<Outcome> = first
        .into_iter()
        .map(|r| Outcome::MapBenchmark(r.both))
        .collect();
    let keys = candidates(req, &base, &runs, &outcomes)?;
    let all = Model {
        runs: &runs,
        base: &base,
        keys: keys.iter().map(|(k, _, _)| vec![k.clone()]).collect(),
        rows: &usable,
        evaluations: Default::default(),
    };
    let x0 = vec![0.0; keys.len()];
    let r0 = all.residuals(&x0)?;
    let j0 = solve::jacobian(&all, &x0, &r0)?;
    unmoved_rows(&j0, &usable)?;
    let sep = solve::separate(&j0);
    // A parameter the rows cannot tell from one fitted parameter alone moves with it; one made
    // of several is held at its base value.
    let (tied, held): (Vec<_>, Vec<_>) = sep.dependent.iter().partition(|(_, w)| w.len() == 1);
    let group = |k: usize| -> Vec<usize> {
        std::iter::once(k)
            .chain(tied.iter().filter(|(_, w)| w[0] == k).map(|(d, _)| *d))
            .collect()
    };
    let kept = Model {
        keys: sep
            .kept
            .iter()
            .map(|&k| group(k).into_iter().map(|g| keys[g].0.clone()).collect())
            .collect(),
        ..all
    };
    let sol = solve::minimise(&kept, vec![0.0; sep.kept.len()])?;
    let loo = solve::leave_one_out(&sol.j, &sol.r);
    let mut fitted = fitted(&keys, &sep.kept, &sol.x, &sol.j, &loo);
    for (f, &k) in fitted.iter_mut().zip(&sep.kept) {
        f.tied = group(k)[1..].iter().map(|&g| keys[g].clone()).collect();
    }
    let mut held: Vec<Held> = held
        .iter()
        .map(|(k, with)| Held {
            key: keys[*k].0.clone(),
            with: with.iter().map(|&w| keys[w].0.clone()).collect(),
        })
        .collect();
    held.extend(sep.unmoved.iter().map(|&k| Held {
        key: keys[k].0.clone(),
        with: Vec::new(),
    }));
    let base_model = kept.predictions(&vec![0.0; sep.kept.len()])?;
    let fit_model = kept.predictions(&sol.x)?;
    let runs_made = kept.evaluations.get() + runs.runs.len() as u64;
    let mut fit = Fit {
        base: base.origin.clone(),
        kernel: req.kernel,
        rows: usable.clone(),
        base_model,
        fit_model,
        ignored,
        fitted,
        held,
        essential: (0..loo.len()).filter(|&i| loo[i].is_none()).collect(),
        converged: sol.converged,
        stopped: sol.stopped,
        runs: runs_made,
        profile: String::new(),
    };
    fit.profile = write::profile(&fit, &base, req)?;
    Ok(fit)
}

/// Two rows of the same run and metric that disagree beyond their uncertainties.
fn contradictions(rows: &[Row]) -> Result<(), FitError> {
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            if a.run == b.run
                && a.metric == b.metric
                && (a.value - b.value).abs() > sigma(a) + sigma(b)
            {
                return Err(FitError::Input(InputError {
                    line: Some(b.line),
                    ..InputError::new(
                        &b.file,
                        format!(
                            "{} of `dma_map_benchmark {}` is {} here but {} at {}: the rows contradict each other, and no profile meets both",
                            a.metric.name(),
                            a.run.command(),
                            b.value,
                            a.value,
                            a.place()
                        ),
                    )
                }));
            }
        }
    }
    Ok(())
}

/// A row no candidate parameter moves cannot be fitted to.
fn unmoved_rows(j: &DMatrix<f64>, rows: &[Row]) -> Result<(), FitError> {
    for (i, row) in rows.iter().enumerate() {
        if j.row(i).iter().all(|v| v.abs() < 1e-9) {
            return Err(FitError::Input(InputError {
                line: Some(row.line),
                ..InputError::new(
                    &row.file,
                    format!(
                        "no parameter being fitted moves this row ({} of `dma_map_benchmark {}`): fit one that does (--param), or leave the row out",
                        row.metric.name(),
                        row.run.command()
                    ),
                )
            }));
        }
    }
    Ok(())
}

/// The parameters to fit: (key, unit, base value as the file writes it).
fn candidates(
    req: &Request,
    base: &Profile,
    runs: &Runs,
    outcomes: &[Outcome],
) -> Result<Vec<(String, String, f64)>, FitError> {
    let slot = |key: &str| write::number(&base.text, key);
    if req.params.is_empty() {
        let scenarios: Vec<&Scenario> = runs.scenarios.iter().collect();
        let used = crate::sensitivity::used_params(&scenarios, outcomes);
        let keys: Vec<_> = used
            .costs
            .iter()
            .filter(|p| fittable(&p.key).is_ok())
            .filter_map(|p| slot(&p.key).map(|(u, v)| (p.key.clone(), u, v)))
            .filter(|(_, _, v)| *v > 0.0)
            .collect();
        if keys.is_empty() {
            return Err(bad(format!(
                "profile `{}` gives none of the costs these runs use as one number: name them with --param",
                base.name()
            )));
        }
        return Ok(keys);
    }
    let mut keys: Vec<(String, String, f64)> = Vec::new();
    for key in &req.params {
        let key = key.strip_prefix("platform.").unwrap_or(key);
        fittable(key).map_err(|m| bad(format!("--param {key}: {m}")))?;
        let (unit, v) = slot(key).ok_or_else(|| {
            bad(format!(
                "--param {key}: profile `{}` does not give it as one number (`dmasim platforms {}` lists its parameters)",
                base.name(),
                req.platform
            ))
        })?;
        if v <= 0.0 {
            return Err(bad(format!(
                "--param {key}: it is 0 in profile `{}`, and a fit moves a cost by a factor: give it a value first",
                base.name()
            )));
        }
        if !keys.iter().any(|(k, _, _)| k == key) {
            keys.push((key.to_string(), unit, v));
        }
    }
    Ok(keys)
}

/// Whether `key` is a parameter a fit may move: a cost or rate the registry lets be fitted.
fn fittable(key: &str) -> Result<(), String> {
    let d = params::def(key).ok_or("not a parameter of a profile (docs/profiles.md lists them)")?;
    match d.kind {
        Kind::Cost | Kind::Rate if d.source == SourceRule::Any && d.scale.is_some() => Ok(()),
        Kind::Cost | Kind::Rate => Err("its value is read from the hardware, never fitted".into()),
        k => Err(format!(
            "a {}, not a cost: a fit moves only costs and rates",
            k.name()
        )),
    }
}

fn fitted(
    keys: &[(String, String, f64)],
    kept: &[usize],
    x: &[f64],
    j: &DMatrix<f64>,
    loo: &[Option<Vec<f64>>],
) -> Vec<Fitted> {
    kept.iter()
        .enumerate()
        .map(|(c, &k)| {
            let (key, unit, base) = &keys[k];
            let col = j.column(c);
            let max = col.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let rows = (0..j.nrows())
                .filter(|&i| col[i].abs() > max * 1e-6)
                .collect();
            let loo = loo
                .iter()
                .enumerate()
                .filter_map(|(i, d)| Some(((d.as_ref()?[c].exp() - 1.0).abs(), i)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            Fitted {
                key: key.clone(),
                unit: unit.clone(),
                base: *base,
                value: base * x[c].exp(),
                rows,
                loo,
                tied: Vec::new(),
            }
        })
        .collect()
}

/// A fitted profile's `[fit]` rows, then `extra`, each beside what the profile predicts: a
/// row a `fit:` source names is fitted, any other a prediction (`dmasim reproduce --platform`).
pub fn reproduce(platform: &str, extra: Vec<Row>) -> Result<crate::reproduce::Report, FitError> {
    let profile = Profile::load(platform)?;
    let (origin, text) = (profile.origin.as_str(), profile.text.as_str());
    let spec = profile.file.fit.clone().ok_or_else(|| {
        InputError::new(
            origin,
            "no [fit] section: `dmasim fit -o FILE` writes one, with the rows it fitted the profile to",
        )
    })?;
    let kernel = KernelVersion::parse(spec.kernel.get_ref())
        .map_err(|m| InputError::at(origin, text, Some(spec.kernel.span()), "fit.kernel", m))?;
    let mut rows = spec_rows(&profile, &spec)?;
    rows.extend(extra);
    let req = Request {
        platform: platform.to_string(),
        kernel,
        iommu: spec.iommu,
        coherent: spec.coherent,
        params: Vec::new(),
        name: None,
    };
    let runs = Runs::load(&req, &rows)?;
    let results = runs.results(&profile)?;
    let params = profile.params();
    let mut out = Vec::new();
    for row in &rows {
        let model = predict(row, &results[runs.of(&row.run)]).map_err(|m| InputError {
            line: Some(row.line),
            ..InputError::new(&row.file, m)
        })?;
        let id = row.place();
        out.push(crate::reproduce::Row {
            unit: row.metric.unit().to_string(),
            what: format!(
                "{} of `dma_map_benchmark {}`",
                row.metric.name(),
                row.run.command()
            ),
            published: Some(row.value),
            bound: None,
            model,
            error: (row.value != 0.0).then(|| (model - row.value) / row.value * 100.0),
            error_unit: Some("%"),
            fitted_params: params
                .iter()
                .filter(|p| {
                    p.source.starts_with("fit:") && crate::reproduce::names_row(&p.source, &id)
                })
                .map(|p| p.key.clone())
                .collect(),
            detail: serde_json::Map::new(),
            id,
        });
    }
    Ok(crate::reproduce::Report {
        experiment: profile.name().to_string(),
        title: "a board's dma_map_benchmark rows against its fitted profile".into(),
        source: profile.origin.clone(),
        conditions: format!(
            "Linux {kernel}; the benchmark's device {} the IOMMU, {}; each run modelled to {PAIRS} and {} pairs a thread, predicted from the difference",
            if spec.iommu { "behind" } else { "not behind" },
            if spec.coherent {
                "coherent"
            } else {
                "not coherent"
            },
            2 * PAIRS
        ),
        platform: profile.name().to_string(),
        assumptions: vec![format!(
            "a row of the tool's is its printed average: the model's mean less the {TOOL_TRUNCATION_NS} ns its two truncations take on average"
        )],
        rows: out,
    })
}

/// The rows of a profile's `[fit]` section; a bad one names the profile's line and key.
fn spec_rows(profile: &Profile, spec: &crate::platform::FitSpec) -> Result<Vec<Row>, InputError> {
    let (origin, text) = (profile.origin.as_str(), profile.text.as_str());
    let at = |span: std::ops::Range<usize>, key: &str, m: String| {
        InputError::at(origin, text, Some(span), key, m)
    };
    let mut rows = Vec::new();
    for r in &spec.row {
        let (file, line) =
            r.at.get_ref()
                .rsplit_once(':')
                .and_then(|(f, l)| Some((f.to_string(), l.parse().ok()?)))
                .ok_or_else(|| at(r.at.span(), "fit.row.at", "expected FILE:LINE".into()))?;
        let run = ToolOptions::parse_args(r.run.get_ref().split_whitespace())
            .map_err(|m| at(r.run.span(), "fit.row.run", m))?;
        let metric = Metric::parse(r.metric.get_ref()).ok_or_else(|| {
            at(
                r.metric.span(),
                "fit.row.metric",
                "expected map_latency_us, unmap_latency_us or a function's name".into(),
            )
        })?;
        let value = *r.value.get_ref();
        if !(value.is_finite() && value >= 0.0) {
            let m = format!("a measured value is a number of at least 0, found {value}");
            return Err(at(r.value.span(), "fit.row.value", m));
        }
        rows.push(Row {
            file,
            line,
            run,
            metric,
            value,
            calls: None,
        });
    }
    Ok(rows)
}
