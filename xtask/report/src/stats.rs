//! Medians, percentiles, spreads and ratios over repeated measurements.

/// The median (mean of the two middle values for an even count); `None` for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// [`median`], NaN for no values (for tables that show NaN as a dash).
pub fn median_or_nan(values: &[f64]) -> f64 {
    median(values).unwrap_or(f64::NAN)
}

/// The `p`-th percentile (0-100) by the nearest-rank method; `None` for no values.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// (lowest, highest) of `values`: (+inf, -inf) for none.
pub fn min_max(values: &[f64]) -> (f64, f64) {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (low, high)
}

/// The median and range of repeated measurements of one quantity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median of the values.
    pub median: f64,
    /// The lowest value.
    pub min: f64,
    /// The highest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` for no values.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let (min, max) = min_max(values);
        Some(Spread {
            median: median(values)?,
            min,
            max,
        })
    }

    /// `median (min–max)` with `decimals` digits, or the median alone when all values are
    /// equal; `-` for no values.
    pub fn display(s: Option<Spread>, decimals: usize) -> String {
        match s {
            None => "-".into(),
            Some(s) if s.min == s.max => crate::markdown::fixed(s.median, decimals),
            Some(s) => format!(
                "{} ({}–{})",
                crate::markdown::fixed(s.median, decimals),
                crate::markdown::fixed(s.min, decimals),
                crate::markdown::fixed(s.max, decimals)
            ),
        }
    }
}

/// Ours / theirs of two medians; `None` when either is missing or theirs is not positive.
pub fn ratio_of_medians(ours: Option<Spread>, theirs: Option<Spread>) -> Option<f64> {
    let (o, t) = (ours?.median, theirs?.median);
    (t > 0.0).then(|| o / t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_medians() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), Some(50.0));
        assert_eq!(percentile(&values, 99.0), Some(99.0));
        assert_eq!(percentile(&values, 100.0), Some(100.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert!(median_or_nan(&[]).is_nan());
    }

    #[test]
    fn spreads_and_ratios() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::display(Some(s), 1), "2.0 (1.0–3.0)");
        assert_eq!(Spread::display(Spread::of(&[2.0, 2.0]), 0), "2");
        assert_eq!(Spread::display(None, 0), "-");
        assert_eq!(
            ratio_of_medians(Spread::of(&[4.0]), Spread::of(&[2.0])),
            Some(2.0)
        );
        assert_eq!(
            ratio_of_medians(Spread::of(&[4.0]), Spread::of(&[0.0])),
            None
        );
        assert_eq!(min_max(&[2.0, -1.0, 5.0]), (-1.0, 5.0));
    }
}
