//! Golden-file checks of rendered reports: a test renders a report from fixed sample data and
//! compares it, byte for byte, with a file kept in the repository, so that a refactoring of the
//! writers cannot change what they write unnoticed.
//!
//! `XTASK_UPDATE_GOLDEN=1 cargo test -p xtask` writes the files instead of comparing (for a
//! deliberate change of a report; review the diff of the files before committing it).

use std::path::Path;

/// The variable that makes [`check`] write the golden files instead of comparing.
pub const UPDATE_ENV: &str = "XTASK_UPDATE_GOLDEN";

/// Panics unless `actual` equals the content of `file` (showing the first differing line), or
/// writes `actual` to `file` when [`UPDATE_ENV`] is set.
pub fn check(file: &Path, actual: &str) {
    if std::env::var_os(UPDATE_ENV).is_some() {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        std::fs::write(file, actual).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        return;
    }
    let expected = std::fs::read_to_string(file).unwrap_or_else(|e| {
        panic!(
            "reading the golden file {}: {e} (write it with {UPDATE_ENV}=1)",
            file.display()
        )
    });
    if expected == actual {
        return;
    }
    let line = expected
        .split_inclusive('\n')
        .zip(actual.split_inclusive('\n'))
        .position(|(e, a)| e != a)
        .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
    let nth = |text: &str| {
        text.split_inclusive('\n')
            .nth(line)
            .unwrap_or("")
            .to_owned()
    };
    panic!(
        "{} differs from the rendered report at line {}:\nexpected: {:?}\nactual:   {:?}\n\
         (the whole rendering:\n{actual})",
        file.display(),
        line + 1,
        nth(&expected),
        nth(actual)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_passes_and_a_difference_names_its_line() {
        let file = std::env::temp_dir().join(format!("xtask-golden-{}.md", std::process::id()));
        std::fs::write(&file, "a\nb\n").unwrap();
        check(&file, "a\nb\n");
        let err = std::panic::catch_unwind(|| check(&file, "a\nc\n")).unwrap_err();
        let text = err.downcast_ref::<String>().unwrap();
        assert!(text.contains("at line 2"), "{text}");
        std::fs::remove_file(&file).unwrap();
    }
}
