//! Plain-text tables with aligned columns, readable in any terminal and in
//! a log file (no colours, no box drawing).

use std::fmt::Write as _;

/// Columns are as wide as their widest cell; the last column is not padded.
/// A row may carry a note, printed on the next line under the last column
/// (or the one [`notes_under`](Table::notes_under) names). Cells and notes
/// are one line each: line breaks and other control characters in them
/// (an error message's, say) become spaces, so they cannot break the
/// layout.
pub struct Table {
    header: Vec<String>,
    rows: Vec<(Vec<String>, Option<String>)>,
    note_column: usize,
}

/// Spaces between columns.
const GAP: usize = 2;

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            note_column: header.len() - 1,
        }
    }

    /// Notes start under column `column` instead of the last.
    pub fn notes_under(mut self, column: usize) -> Table {
        debug_assert!(column < self.header.len());
        self.note_column = column;
        self
    }

    pub fn row(&mut self, cells: Vec<String>, note: Option<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        let cells = cells.iter().map(|c| one_line(c)).collect();
        self.rows.push((cells, note.as_deref().map(one_line)));
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths = vec![0; columns];
        for cells in std::iter::once(&self.header).chain(self.rows.iter().map(|(c, _)| c)) {
            for (w, cell) in widths.iter_mut().zip(cells) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 < columns {
                    let _ = write!(text, "{cell:<width$}", width = widths[i] + GAP);
                } else {
                    text.push_str(cell);
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.header);
        for (cells, note) in &self.rows {
            line(cells);
            if let Some(note) = note {
                // Empty cells pad the note out to its column; it is the
                // line's last cell, so it is not padded or cut.
                line(&[vec![String::new(); self.note_column], vec![note.clone()]].concat());
            }
        }
        out
    }
}

/// `text` on one line: each run of whitespace and control characters
/// (line breaks, tabs, escapes) becomes one space, and the ends are
/// trimmed.
fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns_and_puts_notes_under_the_last() {
        let mut t = Table::new(&["A", "LONGER", "C"]);
        t.row(vec!["xyz".into(), "1".into(), "first".into()], None);
        t.row(
            vec!["x".into(), "22".into(), "second".into()],
            Some("fix: it".into()),
        );
        assert_eq!(
            t.render(),
            "A    LONGER  C\n\
             xyz  1       first\n\
             x    22      second\n             \
             fix: it\n"
        );
    }

    #[test]
    fn line_breaks_in_cells_and_notes_do_not_break_the_layout() {
        let mut t = Table::new(&["A", "B", "C"]).notes_under(1);
        t.row(
            vec![
                "x".into(),
                "Parse error at 1\nUnexpected `84`\r\n".into(),
                "c".into(),
            ],
            Some("why:\n\tsee\x1b[31m here".into()),
        );
        t.row(vec!["y".into(), "b".into(), "c".into()], None);
        assert_eq!(
            t.render(),
            "A  B                                 C\n\
             x  Parse error at 1 Unexpected `84`  c\n   \
             why: see [31m here\n\
             y  b                                 c\n"
        );
    }
}
