//! Output of the commands, the last step before stdout: `--format table|csv|json`. Text tables
//! (fixed-width columns, or columns as wide as their widest cell), CSV written by the `csv`
//! crate (fields quoted when they hold a comma, a quote or a line break), and JSON. Every
//! command that prints rows goes through here, so the three formats read the same everywhere.

use serde::Serialize;

use crate::exit::CliError;

/// `--format`: how a command prints its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Json,
}

/// Which side of its column a cell sits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column of a text table: the spaces before it (none before the first), its alignment and
/// its width in characters (longer text overflows; it is never cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    pub gap: usize,
    pub align: Align,
    pub width: usize,
}

impl Column {
    /// Left-aligned, one space before it.
    pub const fn left(width: usize) -> Self {
        Self {
            gap: 1,
            align: Align::Left,
            width,
        }
    }

    /// Right-aligned, one space before it.
    pub const fn right(width: usize) -> Self {
        Self {
            gap: 1,
            align: Align::Right,
            width,
        }
    }

    /// The same column with `gap` spaces before it.
    pub const fn after_gap(self, gap: usize) -> Self {
        Self { gap, ..self }
    }
}

/// One line of a fixed-width table (no line break): each cell padded to its column. Cells
/// beyond the last column are ignored; missing cells are empty.
pub fn fixed_line<S: AsRef<str>>(columns: &[Column], cells: &[S]) -> String {
    let mut line = String::new();
    for (index, column) in columns.iter().enumerate() {
        if index > 0 {
            line.extend(std::iter::repeat_n(' ', column.gap));
        }
        let cell = cells.get(index).map_or("", AsRef::as_ref);
        let width = column.width;
        match column.align {
            Align::Left => line.push_str(&format!("{cell:<width$}")),
            Align::Right => line.push_str(&format!("{cell:>width$}")),
        }
    }
    line
}

/// A table whose columns are as wide as their widest cell (header included), left-aligned, two
/// spaces apart, with trailing spaces trimmed; one line per row after the header, if any.
pub fn fit_table<H: AsRef<str>, S: AsRef<str>>(header: Option<&[H]>, rows: &[Vec<S>]) -> String {
    let columns = header
        .map(<[H]>::len)
        .into_iter()
        .chain(rows.iter().map(Vec::len))
        .max()
        .unwrap_or(0);
    let mut widths = vec![0; columns];
    let header_cells = header.map(|h| h.iter().map(AsRef::as_ref).collect::<Vec<&str>>());
    let all_rows = header_cells
        .iter()
        .cloned()
        .chain(rows.iter().map(|r| r.iter().map(AsRef::as_ref).collect()));
    for row in all_rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let layout: Vec<Column> = widths
        .iter()
        .enumerate()
        .map(|(index, &width)| Column {
            gap: if index == 0 { 0 } else { 2 },
            align: Align::Left,
            width,
        })
        .collect();
    let mut out = String::new();
    let mut push = |cells: &[&str]| {
        out.push_str(fixed_line(&layout, cells).trim_end());
        out.push('\n');
    };
    if let Some(header) = &header_cells {
        push(header);
    }
    for row in rows {
        push(&row.iter().map(AsRef::as_ref).collect::<Vec<&str>>());
    }
    out
}

/// CSV with a header line: a field is quoted when it holds a comma, a quote or a line break
/// (quotes doubled inside); every line ends with `\n`.
pub fn csv<H, R, S>(header: &[H], rows: R) -> Result<String, CliError>
where
    H: AsRef<str>,
    R: IntoIterator,
    R::Item: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let failed = |e: csv::Error| CliError::failed(format!("writing CSV: {e}"));
    let mut writer = csv::WriterBuilder::new()
        .flexible(true)
        .from_writer(Vec::new());
    writer
        .write_record(header.iter().map(|h| h.as_ref().as_bytes()))
        .map_err(failed)?;
    for row in rows {
        let cells: Vec<S> = row.into_iter().collect();
        writer
            .write_record(cells.iter().map(|c| c.as_ref().as_bytes()))
            .map_err(failed)?;
    }
    let bytes = writer
        .into_inner()
        .map_err(|e| CliError::failed(format!("writing CSV: {}", e.error())))?;
    String::from_utf8(bytes).map_err(|e| CliError::failed(format!("writing CSV: {e}")))
}

/// `value` as one line of JSON (no line break).
pub fn json_line<T: Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    serde_json::to_string(value).map_err(|e| CliError::failed(format!("writing JSON: {e}")))
}

/// `value` as indented JSON (no final line break).
pub fn json_pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map_err(|e| CliError::failed(format!("writing JSON: {e}")))
}

/// Writes a command's output to stdout at once; a closed pipe (`| head`) is not an error.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_only_fields_that_need_it() {
        let text = csv(
            &["name", "value"],
            [
                vec!["plain", "a,b"],
                vec!["say \"hi\"", "two\nlines"],
                vec!["cr\r", ""],
            ],
        )
        .unwrap();
        assert_eq!(
            text,
            "name,value\nplain,\"a,b\"\n\"say \"\"hi\"\"\",\"two\nlines\"\n\"cr\r\",\n"
        );
    }

    #[test]
    fn fit_table_pads_to_the_widest_cell_and_trims() {
        let rows = vec![vec!["a", "long value"], vec!["longer", "x"]];
        assert_eq!(
            fit_table(Some(&["K", "V"]), &rows),
            "K       V\na       long value\nlonger  x\n"
        );
        assert_eq!(
            fit_table::<&str, _>(None, &rows),
            "a       long value\nlonger  x\n"
        );
    }

    #[test]
    fn fixed_lines_match_format_width_specifiers() {
        let columns = [
            Column::left(5),
            Column::right(4),
            Column::left(0).after_gap(2),
        ];
        assert_eq!(
            fixed_line(&columns, &["ab", "7", "rest"]),
            format!("{:<5} {:>4}  {}", "ab", "7", "rest")
        );
        assert_eq!(
            fixed_line(&columns, &["toolong", "12345", ""]),
            "toolong 12345  "
        );
    }
}
