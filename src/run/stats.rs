//! Summary statistics over a cell group's records, and Welch's interval for the ratio of two groups' rates (the
//! report's endpoint ratios, bisect's speed test). Pure functions, no I/O.

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

#[cfg(test)]
mod tests {
    use super::*;

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
