//! The anchor's answer format: CSV with a header row (korotovsky marshals its structs with
//! gocsv, so the headers are the Go field names), the next page's cursor in the last row's
//! `Cursor` column. The same CSV is the text content and `structuredContent.content`, with
//! `next_cursor` beside it so a client need not parse the CSV to page. Also Slack's `ts`
//! as RFC 3339 and the dates the `limit` windows start at (UTC).

use serde_json::json;
use toolyard::proto::CallToolResult;
use toolyard::IntoCallToolResult;

/// A CSV table being built.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    text: String,
    rows: usize,
    cursor_column: Option<usize>,
    next_cursor: Option<String>,
}

/// One field, quoted when it holds a comma, a quote or a line break; control characters
/// other than line breaks and tabs, and BiDi overrides, are dropped (untrusted text).
fn field(out: &mut String, value: &str) {
    let clean: String = value
        .chars()
        .filter(|c| {
            (!c.is_control() || matches!(c, '\n' | '\t' | '\r'))
                && !matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}' | '\u{FEFF}')
        })
        .collect();
    if clean.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&clean.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(&clean);
    }
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        let mut text = String::new();
        for (i, h) in header.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            field(&mut text, h);
        }
        text.push('\n');
        Table {
            text,
            rows: 0,
            cursor_column: header.iter().position(|h| *h == "Cursor"),
            next_cursor: None,
        }
    }

    pub(crate) fn row(&mut self, values: &[&str]) {
        for (i, v) in values.iter().enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            field(&mut self.text, v);
        }
        self.text.push('\n');
        self.rows += 1;
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Puts `cursor` in the last row's `Cursor` column (the table's last column), as the
    /// anchor does; it is also reported as `next_cursor`.
    pub(crate) fn set_cursor(&mut self, cursor: Option<String>) {
        let Some(cursor) = cursor.filter(|c| !c.is_empty()) else {
            return;
        };
        if self.rows > 0 && self.cursor_column.is_some() && self.text.ends_with(",\n") {
            self.text.truncate(self.text.len() - 1);
            field(&mut self.text, &cursor);
            self.text.push('\n');
        }
        self.next_cursor = Some(cursor);
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }
}

impl IntoCallToolResult for Table {
    fn into_call_tool_result(self) -> CallToolResult {
        let mut result = CallToolResult::text(self.text.clone());
        let mut structured = json!({ "content": self.text });
        if let Some(c) = &self.next_cursor {
            structured["next_cursor"] = json!(c);
        }
        result.structured_content = Some(structured);
        result
    }
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil_from_days).
pub(crate) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Slack's `ts` (`"1712345678.123456"`) as RFC 3339 in UTC; the `ts` itself when unreadable.
pub(crate) fn ts_to_rfc3339(ts: &str) -> String {
    let Some(secs) = ts.split('.').next().and_then(|s| s.parse::<i64>().ok()) else {
        return ts.to_owned();
    };
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// A date as `YYYY-MM-DD`.
pub(crate) fn date(days: i64) -> String {
    let (y, m, d) = civil(days);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_and_cleaned_and_the_cursor_goes_in_the_last_row() {
        let mut t = Table::new(&["MsgID", "Text", "Cursor"]);
        t.row(&["1.2", "hello, \"world\"\nbye\u{202E}\u{7}", ""]);
        t.row(&["1.3", "plain", ""]);
        t.set_cursor(Some("bmV4dA==".into()));
        assert_eq!(
            t.clone().into_text(),
            "MsgID,Text,Cursor\n1.2,\"hello, \"\"world\"\"\nbye\",\n1.3,plain,bmV4dA==\n"
        );
        let r = t.into_call_tool_result();
        assert_eq!(r.structured_content.unwrap()["next_cursor"], "bmV4dA==");
    }

    #[test]
    fn timestamps_and_dates_are_utc() {
        assert_eq!(ts_to_rfc3339("1712345678.123456"), "2024-04-05T19:34:38Z");
        assert_eq!(ts_to_rfc3339("0"), "1970-01-01T00:00:00Z");
        assert_eq!(ts_to_rfc3339("x"), "x");
        assert_eq!(date(days_from_civil(2024, 2, 29)), "2024-02-29");
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }
}
