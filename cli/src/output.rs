//! Printing: a table or text for people, JSON or YAML for scripts.

use serde::Serialize;

use crate::CliError;

/// The `-o` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Columns or text, for people.
    Table,
    /// JSON, for scripts.
    Json,
    /// YAML, for scripts.
    Yaml,
}

/// `value` as `format` asks; `human` makes the table or text.
pub fn render<T: Serialize>(
    format: Format,
    value: &T,
    human: impl FnOnce(&T) -> String,
) -> Result<String, CliError> {
    match format {
        Format::Table => Ok(human(value)),
        Format::Json => serde_json::to_string_pretty(value)
            .map(|mut text| {
                text.push('\n');
                text
            })
            .map_err(|e| CliError::failed(format!("writing JSON: {e}"))),
        Format::Yaml => {
            serde_saphyr::to_string(value).map_err(|e| CliError::failed(format!("writing YAML: {e}")))
        }
    }
}

/// Columns aligned by the widest cell, two spaces apart, as kubectl prints them.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(cell.chars().count());
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}
