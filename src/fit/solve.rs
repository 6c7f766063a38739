//! The least-squares solve behind `dmasim fit`: which parameters the rows can tell apart, the
//! Levenberg-Marquardt fit of those, and how far it moves when a row is left out.
//!
//! Kernel counterpart: none — this is arithmetic on the model's own runs.
//!
//! What it does: a parameter is a factor on its base value, fitted as its logarithm so that no
//! step makes a cost negative. The Jacobian is the model's: each column is a whole rerun with
//! one factor moved by [`STEP`], never a formula. Columns are taken largest first; one whose
//! part outside the span of those already taken is too small to pin it ([`DETERMINED`]) is not
//! fitted: it either moves the rows too little, or the rows cannot tell it from those taken,
//! and the fit never returns an arbitrary split between them. The solve is the `levenberg-marquardt` crate's; leave-one-out is one Gauss-Newton step
//! from the solution with the row's residual removed, exact where the model is linear in the
//! costs (one thread's runs are, up to the picosecond rounding of each cost).
//!
//! Invariants: residuals are weighted (measured minus model, over the row's uncertainty), so a
//! row at the tool's 0.1 µs resolution weighs what its resolution allows; every evaluation is a
//! set of whole model runs, the same inputs giving the same numbers.

use levenberg_marquardt::{LeastSquaresProblem, LevenbergMarquardt};
use nalgebra::{DMatrix, DVector, Dyn, Owned};
use std::cell::RefCell;

/// The step, in the logarithm of a factor, of each Jacobian column's rerun: 5 % keeps each
/// resolved cost's picosecond rounding (a few ps on a cost of some ns) under 1 % of the step.
pub const STEP: f64 = 0.05;

/// How firmly the rows must pin a parameter for it to be fitted: the part of its column that no
/// parameter fitted before it shares must move the weighted rows (each in units of its
/// uncertainty) by at least this per unit of its log-factor, so that the fit knows its
/// logarithm to about 1/10: its value to about ±10 %. A parameter below it either moves the
/// rows too little or moves them as others already do.
pub const DETERMINED: f64 = 10.0;

/// A kept column's share of a dependent one (on normalised columns) below which it is not
/// named as one the dependent cannot be told from: the rest is the Jacobian's own noise.
pub const SHARE: f64 = 0.05;

/// Weighted residuals at `x` (log-factors of the fitted parameters), or why the model failed.
pub trait Residuals {
    type Error;
    fn residuals(&self, x: &[f64]) -> Result<Vec<f64>, Self::Error>;
}

/// The model's Jacobian at `x`: one rerun per parameter.
pub fn jacobian<R: Residuals>(f: &R, x: &[f64], r0: &[f64]) -> Result<DMatrix<f64>, R::Error> {
    let mut j = DMatrix::zeros(r0.len(), x.len());
    for k in 0..x.len() {
        let mut xs = x.to_vec();
        xs[k] += STEP;
        let r = f.residuals(&xs)?;
        for (i, (a, b)) in r.iter().zip(r0).enumerate() {
            j[(i, k)] = (a - b) / STEP;
        }
    }
    Ok(j)
}

/// Which columns the rows can tell apart.
#[derive(Clone, Debug, PartialEq)]
pub struct Separation {
    /// Columns fitted, in order.
    pub kept: Vec<usize>,
    /// Columns that move the rows too little to be fitted ([`DETERMINED`]).
    pub unmoved: Vec<usize>,
    /// Columns held at base because they lie in the span of kept ones: each with the kept
    /// columns it cannot be told from (those its column is made of).
    pub dependent: Vec<(usize, Vec<usize>)>,
}

/// Sort the columns of `j` into kept, unmoved and dependent. Columns are taken largest first
/// (the parameter that moves the rows most stands for those it cannot be told from), and each
/// list is in column order.
pub fn separate(j: &DMatrix<f64>) -> Separation {
    let mut s = Separation {
        kept: Vec::new(),
        unmoved: Vec::new(),
        dependent: Vec::new(),
    };
    let norms: Vec<f64> = (0..j.ncols()).map(|k| j.column(k).norm()).collect();
    let mut order: Vec<usize> = (0..j.ncols()).collect();
    order.sort_by(|&a, &b| norms[b].total_cmp(&norms[a]).then(a.cmp(&b)));
    for k in order {
        let n = norms[k];
        if n < DETERMINED {
            s.unmoved.push(k);
            continue;
        }
        let col = j.column(k) / n;
        let coef = if s.kept.is_empty() {
            None
        } else {
            let basis = DMatrix::from_columns(
                &s.kept
                    .iter()
                    .map(|&c| j.column(c) / norms[c])
                    .collect::<Vec<_>>(),
            );
            let coef = basis
                .clone()
                .svd(true, true)
                .solve(&col, 1e-12)
                .unwrap_or_else(|_| DVector::zeros(s.kept.len()));
            let off = (&col - &basis * &coef).norm();
            (off * n < DETERMINED).then_some(coef)
        };
        match coef {
            Some(coef) => {
                let mut with: Vec<usize> = s
                    .kept
                    .iter()
                    .zip(coef.iter())
                    .filter(|(_, c)| c.abs() > SHARE)
                    .map(|(&c, _)| c)
                    .collect();
                with.sort_unstable();
                s.dependent.push((k, with));
            }
            None => s.kept.push(k),
        }
    }
    s.kept.sort_unstable();
    s.unmoved.sort_unstable();
    s.dependent.sort_unstable_by_key(|d| d.0);
    s
}

/// The Levenberg-Marquardt problem: the model's residuals over the kept parameters' log-factors.
struct Problem<'a, R: Residuals> {
    f: &'a R,
    x: DVector<f64>,
    r: Option<DVector<f64>>,
    /// The first failure of the model, which ends the solve.
    failed: RefCell<Option<R::Error>>,
}

impl<R: Residuals> Problem<'_, R> {
    fn eval(&self, x: &DVector<f64>) -> Option<DVector<f64>> {
        if self.failed.borrow().is_some() {
            return None;
        }
        match self.f.residuals(x.as_slice()) {
            Ok(r) => Some(DVector::from_vec(r)),
            Err(e) => {
                *self.failed.borrow_mut() = Some(e);
                None
            }
        }
    }
}

impl<R: Residuals> LeastSquaresProblem<f64, Dyn, Dyn> for Problem<'_, R> {
    type ResidualStorage = Owned<f64, Dyn>;
    type JacobianStorage = Owned<f64, Dyn, Dyn>;
    type ParameterStorage = Owned<f64, Dyn>;

    fn set_params(&mut self, x: &DVector<f64>) {
        self.x.copy_from(x);
        self.r = self.eval(x);
    }

    fn params(&self) -> DVector<f64> {
        self.x.clone()
    }

    fn residuals(&self) -> Option<DVector<f64>> {
        self.r.clone()
    }

    fn jacobian(&self) -> Option<DMatrix<f64>> {
        let r0 = self.r.as_ref()?;
        match jacobian(self.f, self.x.as_slice(), r0.as_slice()) {
            Ok(j) => Some(j),
            Err(e) => {
                *self.failed.borrow_mut() = Some(e);
                None
            }
        }
    }
}

/// What the solve found.
#[derive(Clone, Debug)]
pub struct Solution {
    /// The log-factors.
    pub x: Vec<f64>,
    /// Weighted residuals at `x`.
    pub r: Vec<f64>,
    /// The Jacobian at `x`.
    pub j: DMatrix<f64>,
    /// Whether the solver says it converged, and why it stopped.
    pub converged: bool,
    pub stopped: String,
    /// Residual evaluations it took.
    pub evaluations: usize,
}

/// Minimise the weighted residuals over `x`, from `x0`.
pub fn minimise<R: Residuals>(f: &R, x0: Vec<f64>) -> Result<Solution, R::Error> {
    let p = Problem {
        f,
        x: DVector::from_vec(x0.clone()),
        r: None,
        failed: RefCell::new(None),
    };
    let mut p = p;
    p.set_params(&DVector::from_vec(x0));
    let (p, report) = LevenbergMarquardt::new()
        .with_ftol(1e-10)
        .with_xtol(1e-8)
        .with_patience(30)
        .minimize(p);
    if let Some(e) = p.failed.into_inner() {
        return Err(e);
    }
    let x = p.x.as_slice().to_vec();
    let r = f.residuals(&x)?;
    let j = jacobian(f, &x, &r)?;
    Ok(Solution {
        x,
        r,
        j,
        converged: report.termination.was_successful(),
        stopped: format!("{:?}", report.termination),
        evaluations: report.number_of_evaluations,
    })
}

/// For each row, how far each log-factor moves when that row is left out (one Gauss-Newton
/// step from the solution without it), or `None` if the other rows cannot determine every
/// factor: without it, the least pinned direction of the factors is pinned ten times less.
pub fn leave_one_out(j: &DMatrix<f64>, r: &[f64]) -> Vec<Option<Vec<f64>>> {
    let least = |m: &DMatrix<f64>| m.clone().svd(false, false).singular_values.min();
    let full = least(j);
    (0..j.nrows())
        .map(|i| {
            let keep: Vec<usize> = (0..j.nrows()).filter(|&k| k != i).collect();
            let ji = j.select_rows(&keep);
            if keep.len() < j.ncols() || least(&ji) < full / 10.0 {
                return None;
            }
            let ri = DVector::from_iterator(keep.len(), keep.iter().map(|&k| r[k]));
            ji.svd(true, true)
                .solve(&(-ri), 1e-12)
                .ok()
                .map(|d| d.as_slice().to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A linear model in the factors: y = A · e^x, against targets, in units of the rows'
    /// uncertainty (so a column of 100 moves its row by 100 σ per unit of log-factor).
    struct Linear {
        a: DMatrix<f64>,
        y: Vec<f64>,
    }

    impl Residuals for Linear {
        type Error = ();
        fn residuals(&self, x: &[f64]) -> Result<Vec<f64>, ()> {
            let s = DVector::from_iterator(x.len(), x.iter().map(|v| v.exp()));
            Ok((&self.a * s)
                .iter()
                .zip(&self.y)
                .map(|(m, y)| m - y)
                .collect())
        }
    }

    #[test]
    fn a_linear_model_is_recovered_and_collinear_columns_are_found() {
        // Column 2 is twice column 0: they cannot be told apart; column 3 moves nothing.
        let a = DMatrix::from_row_slice(
            4,
            4,
            &[
                1.0, 3.0, 2.0, 0.0, //
                2.0, 1.0, 4.0, 0.0, //
                5.0, 1.0, 10.0, 0.0, //
                1.0, 7.0, 2.0, 0.0,
            ],
        ) * 100.0;
        let truth = DVector::from_vec(vec![0.5, 2.0, 1.5, 1.0]);
        let y = (&a * &truth).as_slice().to_vec();
        let f = Linear { a: a.clone(), y };
        let r0 = f.residuals(&[0.0; 4]).unwrap();
        let sep = separate(&jacobian(&f, &[0.0; 4], &r0).unwrap());
        // Column 2 moves the rows most, so it stands for column 0.
        assert_eq!(sep.kept, vec![1, 2]);
        assert_eq!(sep.unmoved, vec![3]);
        assert_eq!(sep.dependent, vec![(0, vec![2])]);
        // Fit 0 and 1 with 2 held at its base (factor 1): 0 absorbs the rest of 2's share
        // (0.5 of its own and 1.5 − 1 of 2's, twice over), and 1 is recovered untouched.
        let held = Linear {
            a: DMatrix::from_columns(&[a.column(0).into_owned(), a.column(1).into_owned()]),
            y: f.y
                .iter()
                .zip(a.column(2).iter())
                .map(|(y, c)| y - c)
                .collect(),
        };
        let s = minimise(&held, vec![0.0, 0.0]).unwrap();
        let got: Vec<f64> = s.x.iter().map(|v| v.exp()).collect();
        assert!((got[0] - 1.5).abs() < 1e-6, "{got:?}");
        assert!((got[1] - 2.0).abs() < 1e-6, "{got:?}");
        assert!(s.converged, "{}", s.stopped);
        // Each row left out: the other three still determine both factors, and the data are
        // exact, so nothing moves.
        for d in leave_one_out(&s.j, &s.r) {
            let d = d.expect("three rows determine two factors");
            assert!(d.iter().all(|v| v.abs() < 1e-6), "{d:?}");
        }
    }

    #[test]
    fn a_row_that_alone_determines_a_factor_says_so() {
        let a = DMatrix::from_row_slice(3, 2, &[1.0, 0.0, 1.0, 0.0, 0.0, 1.0]) * 100.0;
        let f = Linear {
            a,
            y: vec![100.0, 120.0, 300.0],
        };
        let s = minimise(&f, vec![0.0, 0.0]).unwrap();
        let loo = leave_one_out(&s.j, &s.r);
        assert!(loo[0].is_some() && loo[1].is_some());
        assert!(
            loo[2].is_none(),
            "only the third row moves the second factor"
        );
        // Leaving out the first row moves the first factor toward the second row's 1.2.
        let d = loo[0].as_ref().unwrap();
        assert!(d[0] > 0.0, "{d:?}");
    }
}
