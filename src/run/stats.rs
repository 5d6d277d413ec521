//! Summary statistics over a cell group's records. Pure functions, no I/O.

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

/// Seconds as `2.65 ± 0.06 s` (mean ± sample sd), or `2.65 s` for one value. Two decimals: the investigation's
/// timings are reported that way and finer digits are noise at these run counts.
pub fn mean_sd_seconds(ms: &[f64]) -> Option<String> {
    let m = mean(ms)? / 1000.0;
    Some(match sample_sd(ms) {
        Some(sd) => format!("{m:.2} ± {:.2} s", sd / 1000.0),
        None => format!("{m:.2} s"),
    })
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
        assert_eq!(mean_sd_seconds(&[]), None);
        assert_eq!(mean_sd_seconds(&[2650.0]).unwrap(), "2.65 s");
    }

    #[test]
    fn the_investigations_crash_timing_formats_as_reported() {
        // Three times to failure around 2.65 s with a small spread.
        let s = mean_sd_seconds(&[2590.0, 2650.0, 2710.0]).unwrap();
        assert_eq!(s, "2.65 ± 0.06 s");
    }
}
