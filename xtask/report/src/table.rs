//! The one table writer of the reports: a header, a per-column alignment and rows, rendered as
//! a markdown table (the `docs/` reports) or as aligned plain text (the terminal summaries).
//!
//! ```
//! use xtask_report::markdown::Table;
//!
//! let mut t = Table::new().left("metric").right("ours").right("theirs");
//! t.row(["wall (s)", "1.20", "1.50"]);
//! assert_eq!(
//!     t.markdown(),
//!     "| metric | ours | theirs |\n|---|---:|---:|\n| wall (s) | 1.20 | 1.50 |\n"
//! );
//! assert_eq!(t.text(), "metric   ours theirs\nwall (s) 1.20   1.50\n");
//! ```

use std::fmt::Write as _;

/// How a column's cells are aligned: in markdown the rule (`---` or `---:`), in text the
/// padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Left (markdown `---`).
    Left,
    /// Right (markdown `---:`).
    Right,
}

/// One column: its header, alignment and, for the text form, its width and the spaces before it.
#[derive(Clone, Debug)]
struct Column {
    header: String,
    align: Align,
    /// Text form: the width cells are padded to (longer cells are not cut, as with `{:<w$}`);
    /// `None`: the widest of the header and the cells.
    width: Option<usize>,
    /// Text form: spaces between the previous column and this one.
    gap: usize,
}

/// A table: columns (header and alignment) and rows of cells, as markdown or aligned text.
///
/// Columns are added in order with [`left`](Table::left) and [`right`](Table::right) (the text
/// form's width and gap apply to the column added last), rows with [`row`](Table::row).
#[derive(Clone, Debug, Default)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
    /// Text form: spaces before every line.
    indent: usize,
}

impl Table {
    /// A table without columns or rows.
    pub fn new() -> Table {
        Table::default()
    }

    /// Adds a column with `header` and `align`.
    pub fn column(mut self, header: impl Into<String>, align: Align) -> Table {
        self.columns.push(Column {
            header: header.into(),
            align,
            width: None,
            gap: 1,
        });
        self
    }

    /// Adds a left-aligned column.
    pub fn left(self, header: impl Into<String>) -> Table {
        self.column(header, Align::Left)
    }

    /// Adds a right-aligned column.
    pub fn right(self, header: impl Into<String>) -> Table {
        self.column(header, Align::Right)
    }

    /// Text form: pads the last added column's cells to `width` characters (a longer cell is
    /// kept whole and pushes the rest of its line right, as `format!("{:<w$}")` does); 0 leaves
    /// them unpadded. Without it, the column is as wide as its widest cell or header.
    pub fn width(mut self, width: usize) -> Table {
        if let Some(c) = self.columns.last_mut() {
            c.width = Some(width);
        }
        self
    }

    /// Text form: `spaces` between the previous column and the last added one (1 by default).
    pub fn gap(mut self, spaces: usize) -> Table {
        if let Some(c) = self.columns.last_mut() {
            c.gap = spaces;
        }
        self
    }

    /// Text form: `spaces` before every line.
    pub fn indent(mut self, spaces: usize) -> Table {
        self.indent = spaces;
        self
    }

    /// Appends a row. Missing cells are empty; cells beyond the columns are dropped.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut row: Vec<String> = cells
            .into_iter()
            .take(self.columns.len())
            .map(Into::into)
            .collect();
        row.resize(self.columns.len(), String::new());
        self.rows.push(row);
        self
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The markdown table: the header line, the rule (`---` for left, `---:` for right
    /// alignment) and one line per row, each cell as `| cell ` and each line closed by `|` and
    /// a newline. An empty header cell is written `| |`.
    pub fn markdown(&self) -> String {
        let mut out = String::from("|");
        for c in &self.columns {
            if c.header.is_empty() {
                out.push_str(" |");
            } else {
                let _ = write!(out, " {} |", c.header);
            }
        }
        out.push_str("\n|");
        for c in &self.columns {
            out.push_str(match c.align {
                Align::Left => "---|",
                Align::Right => "---:|",
            });
        }
        out.push('\n');
        for row in &self.rows {
            out.push('|');
            for cell in row {
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
        out
    }

    /// The aligned text form: the header line, then one line per row, each cell padded to its
    /// column's width and alignment and separated by its gap, after the indent; no rule.
    /// Trailing columns whose header is empty are left out of the header line (with their
    /// gaps), so the header line ends at its last title; without any title there is no header
    /// line.
    pub fn text(&self) -> String {
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.width.unwrap_or_else(|| {
                    self.rows
                        .iter()
                        .map(|r| r[i].chars().count())
                        .chain([c.header.chars().count()])
                        .max()
                        .unwrap_or(0)
                })
            })
            .collect();
        let titled = self
            .columns
            .iter()
            .rposition(|c| !c.header.is_empty())
            .map_or(0, |i| i + 1);
        let mut out = String::new();
        let headers: Vec<&str> = self.columns.iter().map(|c| c.header.as_str()).collect();
        if titled > 0 {
            self.text_line(&mut out, &headers[..titled], &widths);
        }
        for row in &self.rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            self.text_line(&mut out, &cells, &widths);
        }
        out
    }

    /// One line of the text form.
    fn text_line(&self, out: &mut String, cells: &[&str], widths: &[usize]) {
        out.extend(std::iter::repeat_n(' ', self.indent));
        for (i, (cell, c)) in cells.iter().zip(&self.columns).enumerate() {
            if i > 0 {
                out.extend(std::iter::repeat_n(' ', c.gap));
            }
            let w = widths[i];
            let _ = match c.align {
                Align::Left => write!(out, "{cell:<w$}"),
                Align::Right => write!(out, "{cell:>w$}"),
            };
        }
        out.push('\n');
    }
}

impl std::fmt::Display for Table {
    /// The markdown form.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.markdown())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut t = Table::new().left("name").right("value").left("");
        t.row(["a", "1", "ok"]);
        t.row(["longer", "22.5", ""]);
        t
    }

    #[test]
    fn markdown_has_the_rule_of_each_alignment_and_an_empty_header_as_a_bar() {
        assert_eq!(
            sample().markdown(),
            "| name | value | |\n|---|---:|---|\n| a | 1 | ok |\n| longer | 22.5 |  |\n"
        );
        assert_eq!(sample().to_string(), sample().markdown());
    }

    #[test]
    fn text_pads_to_the_widest_cell_and_ends_the_header_at_its_last_title() {
        assert_eq!(
            sample().text(),
            "name   value\na          1 ok\nlonger  22.5   \n"
        );
    }

    #[test]
    fn text_widths_and_gaps_are_as_format_would_pad() {
        let mut t = Table::new()
            .left("w")
            .width(4)
            .right("ratio")
            .width(8)
            .left("target")
            .width(6)
            .gap(2)
            .right("n")
            .width(0);
        t.row(["toolong", "1.00×", "x", "7"]);
        assert_eq!(
            t.text(),
            format!(
                "{:<4} {:>8}  {:<6} {}\n{:<4} {:>8}  {:<6} {}\n",
                "w", "ratio", "target", "n", "toolong", "1.00×", "x", "7"
            )
        );
    }

    #[test]
    fn text_without_titles_has_no_header_line_and_indents_every_line() {
        let mut t = Table::new().left("").width(3).right("").indent(2);
        t.row(["a", "1"]).row(["b", "22"]);
        assert_eq!(t.text(), "  a    1\n  b   22\n");
    }

    #[test]
    fn rows_are_fitted_to_the_columns() {
        let mut t = Table::new().left("a").left("b");
        assert!(t.is_empty());
        t.row(["1"]).row(["1", "2", "3"]);
        assert_eq!(t.markdown(), "| a | b |\n|---|---|\n| 1 |  |\n| 1 | 2 |\n");
        assert!(!t.is_empty());
    }
}
