//! A titled table rendered as aligned text (stdout) or Markdown, with notes
//! below it.

pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Self {
        Self {
            title: title.into(),
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        widths
    }

    pub fn to_text(&self) -> String {
        let widths = self.widths();
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .enumerate()
                .map(
                    |(i, c)| if i == 0 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) },
                )
                .collect();
            padded.join("  ").trim_end().to_string()
        };
        let mut out = format!("{}\n", self.title);
        out.push_str(&line(&self.header));
        out.push('\n');
        out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1)));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        for note in &self.notes {
            out.push_str(&format!("  {note}\n"));
        }
        out
    }

    pub fn to_markdown(&self) -> String {
        let mut out = format!("### {}\n\n| {} |\n", self.title, self.header.join(" | "));
        let align: Vec<&str> = (0..self.header.len()).map(|i| if i == 0 { "---" } else { "---:" }).collect();
        out.push_str(&format!("| {} |\n", align.join(" | ")));
        for row in &self.rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                out.push_str(&format!("- {note}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_ways() {
        let mut t = Table::new("T", &["step", "p50"]);
        t.row(vec!["run".into(), "1.5".into()]);
        assert_eq!(t.to_text(), "T\nstep  p50\n---------\nrun   1.5\n");
        assert_eq!(t.to_markdown(), "### T\n\n| step | p50 |\n| --- | ---: |\n| run | 1.5 |\n");
        t.note("n");
        assert_eq!(t.to_text(), "T\nstep  p50\n---------\nrun   1.5\n  n\n");
        assert!(t.to_markdown().ends_with("| run | 1.5 |\n\n- n\n"));
    }
}
