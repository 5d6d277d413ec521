//! Value parsers for numeric flags that have a documented range: a value outside it is refused while the command
//! line is parsed (exit 2, the message naming the flag), so no deadline (`now + d`), `Duration`, loop or
//! allocation later sees it. Integer flags use clap's own `value_parser!(T).range(…)`; these are for decimals.

/// A decimal from `lo` to `hi` (finite: NaN and the infinities are refused).
pub fn decimal(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("expected a number from {lo} to {hi}")),
    }
}

/// Seconds: above 0 and at most `max`.
pub fn seconds(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= max => Ok(v),
        _ => Err(format!("expected seconds above 0 and at most {max}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_and_non_finite_values_are_refused() {
        let s = seconds(60.0);
        assert_eq!(s("1.5"), Ok(1.5));
        for bad in ["0", "-1", "60.5", "NaN", "inf", "1e308", "x"] {
            assert!(s(bad).is_err(), "{bad}");
        }
        let d = decimal(-1.0, 1.0);
        assert_eq!(d("-1"), Ok(-1.0));
        assert!(d("-inf").is_err() && d("1.01").is_err());
    }
}
