//! The reports' tables ([`Table`], markdown and aligned text) and their cells.

pub use crate::table::{Align, Table};

/// `v` with `decimals` digits after the point; `-` when it is not finite.
pub fn fixed(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "-".into()
    }
}

/// `ours / theirs` with two decimals; `–` when either is not finite or theirs is 0.
pub fn ratio_cell(ours: f64, theirs: f64) -> String {
    if ours.is_finite() && theirs.is_finite() && theirs != 0.0 {
        format!("{:.2}", ours / theirs)
    } else {
        "–".into()
    }
}

/// `bytes` in MiB with one decimal, e.g. `12.5 MiB`.
pub fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells() {
        assert_eq!(fixed(1.234, 2), "1.23");
        assert_eq!(fixed(f64::NAN, 2), "-");
        assert_eq!(ratio_cell(3.0, 2.0), "1.50");
        assert_eq!(ratio_cell(3.0, 0.0), "–");
        assert_eq!(mib(3.0 * 1024.0 * 1024.0), "3.0 MiB");
    }
}
