//! The statistics of a run's analysis, pure functions over measured values, no I/O (`report` and `sweep` show
//! them; `bisect` compares speeds with Welch's interval):
//!
//! - mean, median, sample sd, and a [`Summary`] of a sample: n, median, mean, sample sd and MAD;
//! - outliers by the modified z-score on the MAD ([`outliers`]), as hyperfine flags its outliers, with the
//!   threshold of Iglewicz and Hoaglin and a guard for MAD = 0;
//! - times to a crash: their coefficient of variation and a verdict, deterministic or variable
//!   ([`timing_verdict`]);
//! - the ratio of two groups' rates with a confidence interval: Welch's t interval on the logarithms
//!   ([`welch_log_ratio`]).

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Arithmetic mean; none for no values.
pub fn mean(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    Some(v.iter().sum::<f64>() / v.len() as f64)
}

/// Sample standard deviation (n − 1 in the denominator: the runs are a sample of what the setup does); none for
/// fewer than two values.
pub fn sample_sd(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let m = mean(v)?;
    let ss: f64 = v.iter().map(|x| (x - m) * (x - m)).sum();
    Some((ss / (v.len() - 1) as f64).sqrt())
}

/// Median; none for no values. NaNs sort last and are not expected (inputs are measured durations).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let mid = s.len() / 2;
    Some(if s.len().is_multiple_of(2) { (s[mid - 1] + s[mid]) / 2.0 } else { s[mid] })
}

/// The ratio a/b of two samples of a rate, with a confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RatioCi {
    /// exp(mean(ln a) − mean(ln b)): the ratio of the geometric means.
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
    /// Welch–Satterthwaite degrees of freedom; none when both samples are constant (the interval is the point).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub df: Option<f64>,
    pub level: f64,
}

/// Degrees of freedom above which the t quantile comes from the Cornish–Fisher expansion around the normal
/// quantile (Abramowitz and Stegun 26.7.5, four terms) instead of statrs's inversion of the incomplete beta
/// function, which loses digits there (at 10⁶ df it is off by 1e-4); at 1000 df the two agree to 1e-12.
pub const EXPANSION_DF: f64 = 1000.0;

/// Welch's t interval for the difference of the means of ln a and ln b, turned back into a ratio: a/b as the
/// ratio of geometric means with its `level` (e.g. 0.95) confidence interval. Rates combine by multiplication
/// (twice as fast is a ratio), their spread grows with their size, and on the log scale a ratio is a difference;
/// Welch's interval does not assume equal variances and is honest at the few repetitions a sweep has (its t
/// quantile widens the interval for small n, where a bootstrap of two or three values cannot). B. L. Welch, "The
/// generalization of 'Student's' problem when several different population variances are involved",
/// Biometrika 34 (1947); the degrees of freedom are Satterthwaite's. None unless both samples have two or more
/// positive values.
pub fn welch_log_ratio(a: &[f64], b: &[f64], level: f64) -> Option<RatioCi> {
    let la: Vec<f64> = a.iter().filter(|x| **x > 0.0 && x.is_finite()).map(|x| x.ln()).collect();
    let lb: Vec<f64> = b.iter().filter(|x| **x > 0.0 && x.is_finite()).map(|x| x.ln()).collect();
    if la.len() < 2 || lb.len() < 2 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let (na, nb) = (la.len() as f64, lb.len() as f64);
    let diff = mean(&la)? - mean(&lb)?;
    let (va, vb) = (sample_sd(&la)?.powi(2) / na, sample_sd(&lb)?.powi(2) / nb);
    let se = (va + vb).sqrt();
    let ratio = diff.exp();
    if se == 0.0 {
        return Some(RatioCi { ratio, low: ratio, high: ratio, df: None, level });
    }
    let df = (va + vb).powi(2) / (va.powi(2) / (na - 1.0) + vb.powi(2) / (nb - 1.0));
    let t = t_quantile(0.5 + level / 2.0, df)?;
    Some(RatioCi { ratio, low: (diff - t * se).exp(), high: (diff + t * se).exp(), df: Some(df), level })
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
pub fn t_quantile(p: f64, df: f64) -> Option<f64> {
    if !(0.0..1.0).contains(&p) || p == 0.0 || df.is_nan() || df <= 0.0 {
        return None;
    }
    let q = if df > EXPANSION_DF {
        let z = Normal::new(0.0, 1.0).ok()?.inverse_cdf(p);
        let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
        z + (z3 + z) / (4.0 * df)
            + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df.powi(2))
            + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
    } else {
        StudentsT::new(0.0, 1.0, df).ok()?.inverse_cdf(p)
    };
    q.is_finite().then_some(q)
}

/// A sample's location and spread.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    /// Sample standard deviation (n − 1); none for one value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sd: Option<f64>,
    /// Median absolute deviation from the median, unscaled.
    pub mad: f64,
}

/// The summary of `v`; none for no values.
pub fn summarize(v: &[f64]) -> Option<Summary> {
    Some(Summary { n: v.len(), median: median(v)?, mean: mean(v)?, sd: sample_sd(v), mad: mad(v)? })
}

/// Median absolute deviation from the median (unscaled: for normal data it is 0.6745 σ); none for no values.
pub fn mad(v: &[f64]) -> Option<f64> {
    let m = median(v)?;
    let deviations: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    median(&deviations)
}

/// Mean absolute deviation from the median; none for no values.
fn mean_ad(v: &[f64]) -> Option<f64> {
    let m = median(v)?;
    mean(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

/// |modified z-score| above which a value is an outlier: 3.5, the threshold Iglewicz and Hoaglin recommend for
/// M = 0.6745 (x − median) / MAD (B. Iglewicz, D. C. Hoaglin, "How to Detect and Handle Outliers", ASQC Basic
/// References in Quality Control vol. 16, 1993; also the NIST/SEMATECH e-Handbook of Statistical Methods,
/// §1.3.5.17). hyperfine flags only far stronger outliers (|x − median| / MAD > 14.826, i.e. 10 σ) because it
/// warns about a whole benchmark; here each flagged run is listed for a person to look at.
pub const OUTLIER_THRESHOLD: f64 = 3.5;

/// 0.6745 = Φ⁻¹(0.75): it scales the MAD to the standard deviation of normal data, so that M reads in σ.
const MAD_TO_Z: f64 = 0.6745;

/// 1.253314 = √(π/2): it scales the mean absolute deviation to the standard deviation of normal data. When more
/// than half the values are equal the MAD is 0 and M is undefined; IBM's definition of the modified z-score then
/// divides by 1.253314 · MeanAD instead (IBM Cognos Analytics 11.1 documentation, "Modified z score").
const MEAN_AD_TO_SD: f64 = 1.253_314;

/// Fewest values outliers are looked for among: with two, each is as far from the median as the other.
pub const MIN_OUTLIER_N: usize = 3;

/// The modified z-score of each value: 0.6745 (x − median) / MAD; when MAD = 0, (x − median) / (1.253314 ·
/// MeanAD); when that is 0 too (all values equal), 0 for every value. Empty for no values.
pub fn modified_z_scores(v: &[f64]) -> Vec<f64> {
    let (Some(m), Some(mad), Some(mean_ad)) = (median(v), mad(v), mean_ad(v)) else { return Vec::new() };
    v.iter()
        .map(|x| {
            if mad > 0.0 {
                MAD_TO_Z * (x - m) / mad
            } else if mean_ad > 0.0 {
                (x - m) / (MEAN_AD_TO_SD * mean_ad)
            } else {
                0.0
            }
        })
        .collect()
}

/// Indices of the outliers of `v` with their modified z-scores: |M| > [`OUTLIER_THRESHOLD`], among at least
/// [`MIN_OUTLIER_N`] values.
pub fn outliers(v: &[f64]) -> Vec<(usize, f64)> {
    if v.len() < MIN_OUTLIER_N {
        return Vec::new();
    }
    modified_z_scores(v).into_iter().enumerate().filter(|(_, z)| z.abs() > OUTLIER_THRESHOLD).collect()
}

/// Coefficient of variation: sample sd / mean; none for fewer than two values or a mean that is not positive.
pub fn cv(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    (m > 0.0).then_some(sample_sd(v)? / m)
}

/// The coefficient of variation of the times to a crash at or below which the crash is called deterministic.
///
/// A crash at a fixed point of the work (a bad kernel, an assertion at a given layer) comes after the same work
/// every time, so its time varies as much as the duration of that work does: a few percent between repeated
/// identical requests (the crash this tool was built around: num_gpu=1, 2.653 s ± 0.059 s, CV 0.022). A crash at
/// a random moment — a race, a fault at a constant rate — spreads over the request instead: a moment uniform in
/// [0, T] has CV 1/√3 ≈ 0.58, an exponential (memoryless) waiting time has CV 1. 0.10 lies well above timing
/// noise and more than five times below the nearest random model.
pub const CV_DETERMINISTIC: f64 = 0.10;

/// Fewest timed crashes a verdict is given for: the sd of two values is one difference, not a spread.
pub const MIN_VERDICT_N: usize = 3;

/// Whether crashes come at a fixed point of the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// CV ≤ [`CV_DETERMINISTIC`]: at the same point every time — not a race.
    Deterministic,
    /// CV above it: at different points — a race, a resource running out, or more than one cause.
    Variable,
    /// Fewer than [`MIN_VERDICT_N`] timed crashes.
    TooFew,
}

impl Verdict {
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Deterministic => "deterministic, not a race",
            Verdict::Variable => "variable: a race, a resource running out, or more than one cause",
            Verdict::TooFew => "too few timed crashes to tell",
        }
    }
}

/// The verdict on times to a crash (any unit), with their CV when there are enough of them.
pub fn timing_verdict(times: &[f64]) -> (Verdict, Option<f64>) {
    if times.len() < MIN_VERDICT_N {
        return (Verdict::TooFew, cv(times));
    }
    match cv(times) {
        Some(c) if c <= CV_DETERMINISTIC => (Verdict::Deterministic, Some(c)),
        Some(c) => (Verdict::Variable, Some(c)),
        None => (Verdict::TooFew, None),
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    /// Values computed by Python's `statistics` module (an independent implementation) for the same sample.
    fn python(expr: &str, data: &[f64]) -> Vec<f64> {
        let list = data.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(",");
        let script = format!("import statistics as s, math\nd=[{list}]\nfor v in {expr}: print(repr(float(v)))");
        let out = Command::new("python3").arg("-c").arg(&script).output().expect("python3 runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
    }

    #[test]
    fn summary_matches_python_statistics() {
        // Wall times (ms) of a real-shaped sample with one slow request.
        let d = [812.5, 790.25, 805.0, 1890.75, 799.5, 801.0, 820.125];
        let want = python("[s.median(d), s.fmean(d), s.stdev(d), s.median([abs(x - s.median(d)) for x in d])]", &d);
        let got = summarize(&d).unwrap();
        assert_eq!(got.n, 7);
        assert!(close(got.median, want[0], 1e-12) && close(got.mean, want[1], 1e-12), "{got:?} vs {want:?}");
        assert!(close(got.sd.unwrap(), want[2], 1e-12) && close(got.mad, want[3], 1e-12), "{got:?} vs {want:?}");
    }

    #[test]
    fn outliers_by_the_modified_z_score() {
        // By hand: median 805, deviations 7.5 14.75 0 1085.75 5.5 4 15.125 → MAD 7.5.
        // M(1890.75) = 0.6745 · 1085.75 / 7.5 = 97.64…; M(820.125) = 0.6745 · 15.125 / 7.5 = 1.36…
        let d = [812.5, 790.25, 805.0, 1890.75, 799.5, 801.0, 820.125];
        let z = modified_z_scores(&d);
        assert!(close(z[3], 0.6745 * 1085.75 / 7.5, 1e-12), "{z:?}");
        assert!(close(z[6], 0.6745 * 15.125 / 7.5, 1e-12), "{z:?}");
        assert_eq!(outliers(&d).iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![3]);
        // 3.5 is the boundary: a value whose M is just above it is flagged, just below is not.
        // median 10, deviations 0 1 1 0 x → MAD 1 (for x > 1); M = 0.6745 x.
        let at = |x: f64| outliers(&[10.0, 9.0, 11.0, 10.0, 10.0 + x]).len();
        assert_eq!(at(3.5 / 0.6745 + 0.01), 1);
        assert_eq!(at(3.5 / 0.6745 - 0.01), 0);
    }

    #[test]
    fn mad_zero_falls_back_to_the_mean_absolute_deviation() {
        // More than half equal: MAD = 0. MeanAD from the median 10: (0·6 + 90) / 7 = 12.857…
        // M(100) = 90 / (1.253314 · 90/7) = 7 / 1.253314 = 5.585… > 3.5.
        let d = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 100.0];
        assert_eq!(mad(&d), Some(0.0));
        let z = modified_z_scores(&d);
        assert!(close(z[6], 7.0 / 1.253_314, 1e-12), "{z:?}");
        assert!(z[..6].iter().all(|v| *v == 0.0));
        assert_eq!(outliers(&d), vec![(6, z[6])]);
        // All equal: nothing is an outlier, and nothing divides by zero.
        assert_eq!(modified_z_scores(&[5.0; 4]), vec![0.0; 4]);
        assert!(outliers(&[5.0; 4]).is_empty());
        // Too few values: no outliers at all.
        assert!(outliers(&[1.0, 1000.0]).is_empty());
        assert!(modified_z_scores(&[]).is_empty());
    }

    #[test]
    fn crash_timing_verdicts() {
        // The investigation's crash: 2.653 s ± 0.059 s. Three times m − sd, m, m + sd have mean m and sample sd
        // √((sd² + 0 + sd²) / 2) = sd.
        let k = 0.059;
        let times = [2.653 - k, 2.653, 2.653 + k];
        let (v, c) = timing_verdict(&times);
        assert_eq!(v, Verdict::Deterministic);
        assert!(close(c.unwrap(), 0.059 / 2.653, 1e-9), "{c:?}");
        // Crashes uniform over a 10 s request: CV ≈ 0.58.
        let uniform: Vec<f64> = (0..10).map(|i| f64::from(i) + 0.5).collect();
        let (v, c) = timing_verdict(&uniform);
        assert_eq!(v, Verdict::Variable);
        let want = python("[s.stdev(d) / s.fmean(d)]", &uniform)[0];
        assert!(close(c.unwrap(), want, 1e-12));
        // The boundary is inclusive.
        let edge = [0.9, 1.0, 1.1];
        assert!(close(cv(&edge).unwrap(), 0.1, 1e-12));
        assert_eq!(timing_verdict(&[0.9, 1.1]).0, Verdict::TooFew);
        assert_eq!(timing_verdict(&[]), (Verdict::TooFew, None));
        assert_eq!(cv(&[0.0, 0.0, 0.0]), None, "a mean of zero has no CV");
    }

    #[test]
    fn t_quantiles_match_published_tables() {
        // NIST/SEMATECH e-Handbook §1.3.6.7.2, upper critical values of Student's t for α = 0.025.
        for (df, want) in [(1.0, 12.706), (2.0, 4.303), (5.0, 2.571), (10.0, 2.228), (30.0, 2.042), (100.0, 1.984)] {
            let got = t_quantile(0.975, df).unwrap();
            assert!((got - want).abs() < 0.0006, "df {df}: {got} vs {want}");
        }
        // Both sides of the switch to the expansion agree, and far beyond it the t quantile is the normal one
        // (Python's NormalDist).
        let (below, above) =
            (t_quantile(0.975, EXPANSION_DF).unwrap(), t_quantile(0.975, EXPANSION_DF + 1e-9).unwrap());
        assert!((below - above).abs() < 1e-9, "{below} vs {above}");
        assert!((t_quantile(0.975, 1000.0).unwrap() - 1.962).abs() < 0.0006, "the table's 1000 df row");
        let z = python("[s.NormalDist().inv_cdf(0.975)]", &[])[0];
        let t = t_quantile(0.975, 1e12).unwrap();
        assert!((t - z).abs() < 1e-5, "{t} vs {z}");
    }

    #[test]
    fn welch_interval_of_a_ratio() {
        // a = 10·e^(0.1 i), b = 5·e^(0.1 i), i = 1..6: the logs differ by ln 2 with equal variances
        // (sample variance of 0.1·(1..6) = 0.01 · 3.5), so df = 2·6 − 2 = 10 and t(0.975, 10) = 2.228 (table).
        let a: Vec<f64> = (1..=6).map(|i| 10.0 * (0.1 * f64::from(i)).exp()).collect();
        let b: Vec<f64> = (1..=6).map(|i| 5.0 * (0.1 * f64::from(i)).exp()).collect();
        let r = welch_log_ratio(&a, &b, 0.95).unwrap();
        assert!(close(r.ratio, 2.0, 1e-12), "{r:?}");
        assert!(close(r.df.unwrap(), 10.0, 1e-9), "{r:?}");
        let se = (2.0 * 0.035f64 / 6.0).sqrt();
        let (low, high) = (2.0 * (-2.228 * se).exp(), 2.0 * (2.228 * se).exp());
        assert!((r.low - low).abs() < 1e-3 && (r.high - high).abs() < 1e-3, "{r:?} vs {low}..{high}");
        // The same numbers from Python: mean and variance of the logs, the Welch–Satterthwaite df.
        let mut both = a.clone();
        both.extend(&b);
        let py = python(
            "[(lambda la, lb: (s.fmean(la) - s.fmean(lb), (s.variance(la)/6 + s.variance(lb)/6)**2 / ((s.variance(la)/6)**2/5 + (s.variance(lb)/6)**2/5)))(list(map(math.log, d[:6])), list(map(math.log, d[6:])))[i] for i in (0, 1)]",
            &both,
        );
        assert!(close(r.ratio.ln(), py[0], 1e-12) && close(r.df.unwrap(), py[1], 1e-9), "{r:?} vs {py:?}");
        // Unequal spreads: the interval is not symmetric around the ratio on the linear scale, but is on the log one.
        let c = welch_log_ratio(&[40.0, 42.0, 41.0, 39.5], &[12.0, 15.0, 9.0], 0.95).unwrap();
        assert!(close((c.ratio / c.low).ln(), (c.high / c.ratio).ln(), 1e-9), "{c:?}");
        assert!(c.df.unwrap() < 5.0, "Satterthwaite's df lies below na + nb − 2: {c:?}");
        // Constant samples: the interval is the point. Too few values or non-positive ones: none.
        let p = welch_log_ratio(&[4.0, 4.0], &[2.0, 2.0, 2.0], 0.95).unwrap();
        assert_eq!((p.ratio, p.low, p.high, p.df), (2.0, 2.0, 2.0, None));
        assert!(welch_log_ratio(&[4.0], &[2.0, 2.0], 0.95).is_none());
        assert!(welch_log_ratio(&[4.0, 0.0], &[2.0, 2.0], 0.95).is_none());
    }

    #[test]
    fn mean_sd_and_median_of_known_values() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean(&v), Some(5.0));
        // Population sd of this textbook set is 2; the sample sd is sqrt(32/7).
        assert!((sample_sd(&v).unwrap() - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert_eq!(median(&v), Some(4.5));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn empty_and_single_inputs_give_none_not_nan() {
        assert_eq!(mean(&[]), None);
        assert_eq!(median(&[]), None);
        assert_eq!(sample_sd(&[1.0]), None);
    }
}
