// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Aligned text tables and time formatting.

use std::io::{self, Write};

/// A time in nanoseconds as `8.546 ms`, `31.637 us`, `1.234  s` (three decimals, the
/// largest unit that keeps at least one digit before the point).
pub fn time(ns: u64) -> String {
    let (unit, div) = if ns >= 1_000_000_000 {
        (" s", 1_000_000_000)
    } else if ns >= 1_000_000 {
        ("ms", 1_000_000)
    } else {
        ("us", 1_000)
    };
    let whole = ns / div;
    let frac = (ns % div) * 1000 / div;
    format!("{}.{:03} {}", whole, frac, unit)
}

/// A time that may be unknown: `-` when it is.
pub fn opt_time(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".to_string(), time)
}

/// Column alignment.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the left.
    Right,
    /// Padded on the right (the last column is not padded).
    Left,
}

/// A table: a header and rows of cells, written with columns aligned.
pub struct Table {
    aligns: Vec<Align>,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles and alignments.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            aligns: columns.iter().map(|c| c.1).collect(),
            header: columns.iter().map(|c| c.0.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are empty, extra ones are dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Writes the header (after `# `) and the rows (after two spaces).
    pub fn write(&self, w: &mut dyn Write) -> io::Result<()> {
        let n = self.aligns.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                if let Some(wd) = widths.get_mut(i) {
                    *wd = (*wd).max(c.chars().count());
                }
            }
        }
        let line = |cells: &[String], first: &str| -> String {
            let mut s = String::from(first);
            for (i, (a, wd)) in self.aligns.iter().zip(&widths).enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                if i > 0 {
                    s.push_str("  ");
                }
                let pad = wd.saturating_sub(c.chars().count());
                match a {
                    Align::Right => {
                        s.extend(std::iter::repeat_n(' ', pad));
                        s.push_str(c);
                    }
                    Align::Left => {
                        s.push_str(c);
                        if i + 1 < n {
                            s.extend(std::iter::repeat_n(' ', pad));
                        }
                    }
                }
            }
            s.trim_end().to_string()
        };
        writeln!(w, "{}", line(&self.header, "# "))?;
        for r in &self.rows {
            writeln!(w, "{}", line(r, "  "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time(0), "0.000 us");
        assert_eq!(time(31_637), "31.637 us");
        assert_eq!(time(8_545_827), "8.545 ms");
        assert_eq!(time(1_234_567_890), "1.234  s");
        assert_eq!(opt_time(None), "-");
    }

    #[test]
    fn aligned() {
        let mut t = Table::new(&[("N", Align::Right), ("NAME", Align::Left)]);
        t.row(vec!["10".into(), "foo".into()]);
        t.row(vec!["1".into(), "barbaz".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "#  N  NAME\n  10  foo\n   1  barbaz\n"
        );
    }
}
