//! `search_files`' `query` as a Drive `q` expression.
//!
//! The rule: a query is a **raw Drive `q` expression** when it starts like one: a search
//! field followed by an operator (`name contains 'plan'`, `mimeType = '…'`,
//! `modifiedTime > '2024-01-01'`), a quoted value followed by `in` (`'FOLDER' in parents`),
//! `not ` or `(`. Anything else is **free text**, searched as `fullText contains '<text>'`
//! with `\` and `'` escaped, so the text can never leave its quoted string. A raw
//! expression is checked for closed quotes and balanced parentheses before it is wrapped
//! in `( … )` and joined to the connector's own terms (`trashed = false`, the `mime_type`
//! filter), so it cannot reach past its parentheses either.

/// Drive's searchable fields (files.list `q`).
const FIELDS: &[&str] = &[
    "name",
    "fullText",
    "mimeType",
    "modifiedTime",
    "viewedByMeTime",
    "createdTime",
    "trashed",
    "starred",
    "parents",
    "owners",
    "writers",
    "readers",
    "sharedWithMe",
    "properties",
    "appProperties",
    "visibility",
    "shortcutDetails.targetId",
];

/// Drive's query operators.
const OPERATORS: &[&str] = &["contains", "=", "!=", "<", "<=", ">", ">=", "in", "has"];

/// `value` as a Drive query string literal: in single quotes, `\` and `'` escaped.
pub(crate) fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\\' || c == '\'' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// Whether `query` is a raw `q` expression (see the module's rule).
pub(crate) fn is_raw(query: &str) -> bool {
    let q = query.trim_start();
    if q.starts_with('(') || q.starts_with("not ") {
        return true;
    }
    if q.starts_with('\'') {
        // `'value' in field`
        return quoted_end(q)
            .map(|end| q[end..].trim_start().starts_with("in "))
            .unwrap_or(false);
    }
    let mut words = q.split_whitespace();
    let (Some(field), Some(op)) = (words.next(), words.next()) else {
        return false;
    };
    FIELDS.contains(&field) && OPERATORS.contains(&op)
}

/// The byte just past the quoted string `q` starts with, if it is closed.
fn quoted_end(q: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in q.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// Refuses a raw expression whose quotes are open or whose parentheses do not balance.
pub(crate) fn check_raw(query: &str) -> Result<(), String> {
    let mut depth: i32 = 0;
    let mut quoted = false;
    let mut escaped = false;
    for c in query.chars() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '\'' => quoted = true,
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("the query closes a parenthesis it did not open".into());
                }
            }
            _ => {}
        }
    }
    if quoted {
        return Err(
            "the query leaves a quoted string open (escape a ' inside a value as \\')".into(),
        );
    }
    if depth != 0 {
        return Err("the query leaves a parenthesis open".into());
    }
    Ok(())
}

/// The whole `q`: the query (raw or free text), then `trashed = false` unless the query
/// speaks of `trashed` itself, then the MIME type filter.
pub(crate) fn build(query: &str, mime_type: Option<&str>) -> Result<String, String> {
    let query = query.trim();
    let mut terms = Vec::new();
    let mut mentions_trashed = false;
    if !query.is_empty() {
        if is_raw(query) {
            check_raw(query)?;
            mentions_trashed = query.contains("trashed");
            terms.push(format!("({query})"));
        } else {
            terms.push(format!("fullText contains {}", quote(query)));
        }
    }
    if !mentions_trashed {
        terms.push("trashed = false".to_owned());
    }
    if let Some(mime) = mime_type.map(str::trim).filter(|m| !m.is_empty()) {
        terms.push(format!("mimeType = {}", quote(mime)));
    }
    Ok(terms.join(" and "))
}

/// Checks `order_by`: comma-separated Drive sort keys, each optionally ` desc`.
pub(crate) fn check_order_by(order_by: &str) -> Result<(), String> {
    const KEYS: &[&str] = &[
        "createdTime",
        "folder",
        "modifiedByMeTime",
        "modifiedTime",
        "name",
        "name_natural",
        "quotaBytesUsed",
        "recency",
        "sharedWithMeTime",
        "starred",
        "viewedByMeTime",
    ];
    for part in order_by.split(',') {
        let mut words = part.split_whitespace();
        let key = words.next().unwrap_or_default();
        let dir = words.next();
        if !KEYS.contains(&key)
            || !matches!(dir, None | Some("desc" | "asc"))
            || words.next().is_some()
        {
            return Err(format!(
                "order_by `{}` is not a Drive sort key (one of {}; optionally followed by desc)",
                part.trim(),
                KEYS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_text_is_searched_in_full_text_with_quotes_and_backslashes_escaped() {
        assert_eq!(
            build("budget 2024", None).unwrap(),
            "fullText contains 'budget 2024' and trashed = false"
        );
        assert_eq!(
            build(r"x' or name contains 'secret", None).unwrap(),
            r"fullText contains 'x\' or name contains \'secret' and trashed = false"
        );
        assert_eq!(
            build(r"a\' or 1", None).unwrap(),
            r"fullText contains 'a\\\' or 1' and trashed = false"
        );
    }

    #[test]
    fn an_expression_that_starts_like_drive_syntax_is_passed_raw_in_parentheses() {
        assert!(is_raw("name contains 'plan'"));
        assert!(is_raw("'abc' in parents"));
        assert!(is_raw("not name contains 'x'"));
        assert!(is_raw("(name = 'a' or name = 'b')"));
        assert!(is_raw("mimeType != 'application/pdf'"));
        assert!(!is_raw("name of the project"));
        assert!(!is_raw("quarterly plan"));
        assert!(!is_raw("'quoted words'"));
        assert_eq!(
            build("name contains 'plan'", Some("application/pdf")).unwrap(),
            "(name contains 'plan') and trashed = false and mimeType = 'application/pdf'"
        );
        assert_eq!(build("trashed = true", None).unwrap(), "(trashed = true)");
    }

    #[test]
    fn a_raw_expression_cannot_escape_its_parentheses() {
        assert!(build("name contains 'x') or (name contains 'y'", None).is_err());
        assert!(build("name contains 'x", None).is_err());
        assert!(build("(name contains 'x'", None).is_err());
        // A parenthesis inside a quoted value is just text.
        assert!(build(r"name contains ')\''", None).is_ok());
    }

    #[test]
    fn the_mime_type_filter_is_quoted_too() {
        assert_eq!(
            build("", Some("a' or 'b")).unwrap(),
            r"trashed = false and mimeType = 'a\' or \'b'"
        );
    }

    #[test]
    fn order_by_takes_drive_sort_keys_only() {
        assert!(check_order_by("modifiedTime desc,name").is_ok());
        assert!(check_order_by("modifiedTime sideways").is_err());
        assert!(check_order_by("size").is_err());
    }
}
