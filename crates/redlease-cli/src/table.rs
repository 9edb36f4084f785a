//! Plain-text tables with aligned columns, readable in any terminal and in
//! a log file (no colours, no box drawing).

use std::fmt::Write as _;

/// Columns are as wide as their widest cell; the last column is not padded.
/// A row may carry a note, printed on the next line under the last column.
pub struct Table {
    header: Vec<String>,
    rows: Vec<(Vec<String>, Option<String>)>,
}

/// Spaces between columns.
const GAP: usize = 2;

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>, note: Option<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push((cells, note));
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
                // Empty cells pad the note out to the last column.
                line(&[vec![String::new(); columns - 1], vec![note.clone()]].concat());
            }
        }
        out
    }
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
}
